"""The receiving side alone: a stream's backlog drained by nats-py's ordered consumer, and by the
mirror's batched direct gets (ingest/direct.py, the headers read as the mirror reads them), side
by side, taking turns; the client's CPU a message from time.process_time (no database).

    python bench/bench_receive.py [--messages 100000] [--rounds 2]

Starts its own nats-server with a temporary store and publishes bench_mirror.py's dead letters
(300-byte payloads, eleven headers) into a stream that allows direct gets.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nats  # noqa: E402
from nats.js.api import ConsumerConfig, DeliverPolicy  # noqa: E402

from bench_mirror import publish_backlog  # noqa: E402
from dlq_dashboard.ingest.direct import DirectReader  # noqa: E402
from dlq_dashboard.nats import headers as nats_headers  # noqa: E402
from dlq_dashboard.nats.server import NatsServer  # noqa: E402

BATCH = 2000


async def ordered(url: str, count: int) -> tuple[float, float]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    done, seen = asyncio.Event(), 0

    async def received(msg):
        nonlocal seen
        seen += 1
        if seen >= count:
            done.set()

    cpu, wall = time.process_time(), time.perf_counter()
    sub = await js.subscribe(">", stream="DLQ", ordered_consumer=True, cb=received,
                             config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL))
    await done.wait()
    result = time.perf_counter() - wall, time.process_time() - cpu
    await sub.unsubscribe()
    await nc.close()
    return result


async def direct(url: str, count: int) -> tuple[float, float]:
    nc = await nats_headers.connect(servers=[url])
    reader = DirectReader(nc, "DLQ", timeout=10)
    cpu, wall = time.process_time(), time.perf_counter()
    taken, last = 0, 0
    while taken < count:
        batch, _ = await reader.read(last + 1, BATCH, 16 * 1024 * 1024)
        taken += len(batch)
        last = batch[-1][0]
    result = time.perf_counter() - wall, time.process_time() - cpu
    await reader.close()
    await nc.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    n = args.messages
    print("| round | read by | msg/s | client CPU µs a message |")
    print("| --- | --- | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp) / "nats").start()
        try:
            asyncio.run(publish_backlog(server.url, n))
            for r in range(1, args.rounds + 1):
                for name, drain in (("ordered consumer", ordered), ("direct gets, headers read", direct)):
                    wall, cpu = asyncio.run(drain(server.url, n))
                    print(f"| {r} | {name} | {n / wall:,.0f} | {1e6 * cpu / n:.1f} |", flush=True)
        finally:
            server.stop()
    with open("/proc/loadavg") as load:
        print(f"\nload average at the end: {load.read().split()[0]}")


if __name__ == "__main__":
    main()
