"""How long it takes to look for republishes a crash left pending past their stream's duplicate
window: one read of the subject for all of them (``stored.find_stored_many``, what recovery
does) side by side with one read an intent (``find_stored`` in a loop, what it did: a crash
that left 2,000 pending took about six minutes to recover).

    python bench/bench_recovery.py [--intents 2000] [--others 20000]

A fresh nats-server; a stream ORDERS with a one-second duplicate window; ``--others`` messages
on the subject before the intents' (other republishes: what each search reads past), then the
intents' messages, half of them (the other half never left). Both ways must find the same half.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


async def run(url: str, intents_n: int, others: int) -> None:
    import nats

    from dlq_dashboard.actions.intents import Intent
    from dlq_dashboard.actions.stored import find_stored, find_stored_many
    from dlq_dashboard.times import utcnow

    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=1024)
    await js.add_stream(name="ORDERS", subjects=["orders.>"], duplicate_window=1.0)
    for i in range(others):
        await js.publish_async("orders.created", b"{}", headers={"Nats-Msg-Id": f"other-{i}"})
    await js.publish_async_completed()
    created = utcnow()
    intents = [Intent(id=i, entry_id=i, version=1, msg_id=f"intent-{i}", subject="orders.created", payload=b"{}",
                      headers={}, edited=False, actor="bench", job_id=None, created_at=created) for i in range(intents_n)]
    for intent in intents[::2]:
        await js.publish_async("orders.created", b"{}", headers={"Nats-Msg-Id": intent.msg_id})
    await js.publish_async_completed()
    while utcnow() - created < timedelta(seconds=1.5):  # past the window: the broker forgets the msgIds
        await asyncio.sleep(0.1)

    started = time.perf_counter()
    found_once = await find_stored_many(js, intents)
    once = time.perf_counter() - started
    started = time.perf_counter()
    found_each = {i.msg_id: ack for i in intents if (ack := await find_stored(js, i)) is not None}
    each = time.perf_counter() - started
    await nc.close()
    assert set(found_once) == set(found_each) == {i.msg_id for i in intents[::2]}
    print(f"{intents_n:,} intents ({len(found_once):,} stored), {others:,} other messages on the subject:")
    print(f"  one read for all (find_stored_many): {once:8.2f} s  {intents_n / once:10,.0f} intents/s")
    print(f"  one read an intent (find_stored):    {each:8.2f} s  {intents_n / each:10,.0f} intents/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intents", type=int, default=2000)
    parser.add_argument("--others", type=int, default=20000)
    args = parser.parse_args()
    from dlq_dashboard.nats.server import NatsServer

    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp) / "nats", log_path=Path(tmp) / "nats.log").start()
        try:
            asyncio.run(run(server.url, args.intents, args.others))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
