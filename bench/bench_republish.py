"""Bulk republish speed: a job over 20,000 entries with the rate limit off, side by side in the
same run with raw nats-py ``publish_async`` of the same payloads with msgIds.

    python bench/bench_republish.py [--entries 20000] [--rounds 3] [--record] [--database sqlite|postgresql]

Each round starts a fresh nats-server and database (a SQLite file, or with --database postgresql
a new database on a PostgreSQL server started for the run from tests/postgres.py and removed
at the end), dead-letters the entries (~300-byte JSON orders with contract headers) and lets
the mirror store them. Then, on the same server:
raw publish_async in windows of 256 with a Nats-Msg-Id each, into a stream of its own; and a
bulk job (POST /api/bulk) that republishes every entry through the dashboard's intents,
PubAck records and audit. The job is timed from the request to its last item. Target: the
job at 50% of raw msg/s or better. ``--record`` appends the results to docs/PERFORMANCE.md
under "## Republish".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_RATIO = 0.5
RAW_WINDOW = 256


def order_payload(i: int) -> bytes:
    """A ~300-byte order, different for each entry."""
    return json.dumps({
        "order_id": f"ord-20261129-{i:06d}", "customer_id": f"c-{i % 977}",
        "items": [{"sku": f"sku-{i % 50}", "qty": 1 + i % 3, "price": 12.5}, {"sku": "sku-gift", "qty": 1, "price": 0}],
        "total": 12.5 * (1 + i % 3), "currency": "EUR", "placed_at": "2026-11-29T10:00:00Z",
        "note": "please deliver to the back door",
    }).encode()


HEADERS = {"Dlq-Original-Subject": "orders.created", "Dlq-Original-Stream": "ORDERS", "Dlq-Consumer": "billing",
           "Dlq-Reason": "max_deliveries", "Dlq-Error": "timeout calling the payment service",
           "Dlq-Deliveries": "5", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


async def dead_letter_all(url: str, n: int) -> None:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=1024)
    for i in range(n):
        await js.publish_async("dlq.orders.created", order_payload(i),
                               headers={**HEADERS, "Dlq-Original-Seq": str(i + 1), "Nats-Msg-Id": f"ORDERS:{i + 1}:dlq"})
        if i % 512 == 511:
            await js.publish_async_completed()
    await js.publish_async_completed()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    await js.add_stream(name="RAW", subjects=["raw.>"])
    await nc.close()


async def raw_publish(url: str, n: int) -> float:
    """msg/s of publish_async in windows of 256, each with a Nats-Msg-Id and the republish headers."""
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=4000)
    started = time.perf_counter()
    futures = []
    for i in range(n):
        headers = {"traceparent": HEADERS["traceparent"], "Nats-Msg-Id": f"raw:{i}", "Dlq-Replay-Of": f"DLQ:{i + 1}"}
        futures.append(await js.publish_async("raw.orders.created", order_payload(i), headers=headers))
        if len(futures) == RAW_WINDOW:
            await asyncio.gather(*futures)
            futures = []
    await asyncio.gather(*futures)
    elapsed = time.perf_counter() - started
    stored = (await js.stream_info("RAW")).state.messages
    await nc.close()
    assert stored == n, f"RAW holds {stored} messages, not {n}"
    return n / elapsed


def one_round(n: int, postgres=None) -> tuple[float, float]:
    from sqlalchemy import func, select

    from dlq_dashboard import create_app
    from dlq_dashboard.accounts import create_token
    from dlq_dashboard.config import Settings
    from dlq_dashboard.db.models import Entry
    from dlq_dashboard.nats.server import NatsServer
    from dlq_dashboard.runtime import runtime_of

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = NatsServer(store_dir=work / "nats", log_path=work / "nats.log").start()
        database_url = postgres.create_database() if postgres else f"sqlite:///{work / 'dlq.sqlite3'}"
        settings = Settings(database_url=database_url, nats_urls=(server.url,),
                            instance_path=str(work / "instance"), secret_key="bench", republish_rate=0)
        app = create_app({"SETTINGS": settings})
        rt = runtime_of(app).start()
        try:
            assert rt.bridge.wait_connected(10)
            while not all(p.epoch for p in rt.mirror.progress.values()):
                time.sleep(0.05)
            asyncio.run(dead_letter_all(server.url, n))
            deadline = time.monotonic() + 120
            while True:
                with rt.engine.connect() as conn:
                    stored = conn.execute(select(func.count()).select_from(Entry)).scalar()
                if stored >= n:
                    break
                assert time.monotonic() < deadline, f"the mirror stored only {stored} of {n}"
                time.sleep(0.1)
            # The same payloads, published raw, on the same server in the same run.
            raw = asyncio.run(raw_publish(server.url, n))

            token = create_token(rt.engine, "bench", "operator")
            client = app.test_client()
            started = time.perf_counter()
            response = client.post("/api/bulk", json={"action": "republish", "filter": {"subject": "orders.created"}},
                                   headers={"Authorization": f"Bearer {token}"})
            assert response.status_code == 202, response.get_json()
            job_id = response.get_json()["job"]
            rt.jobs.join(job_id, timeout=600)
            elapsed = time.perf_counter() - started
            status = client.get(f"/api/jobs/{job_id}?limit=0", headers={"Authorization": f"Bearer {token}"}).get_json()
            assert (status["state"], status["done"]) == ("done", n), status
            stored = asyncio.run(_stream_count(server.url, "ORDERS"))
            assert stored == n, f"ORDERS holds {stored} messages, not {n}"
            return raw, n / elapsed
        finally:
            rt.stop()
            server.stop()


async def _stream_count(url: str, stream: str) -> int:
    import nats

    nc = await nats.connect(url)
    try:
        return (await nc.jetstream().stream_info(stream)).state.messages
    finally:
        await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="append the results to docs/PERFORMANCE.md")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite",
                        help="a SQLite file a round, or a PostgreSQL server started here (a database a round)")
    args = parser.parse_args()

    results = []
    postgres = None
    if args.database == "postgresql":
        from tests.postgres import PostgresServer

        postgres = PostgresServer().start()
    try:
        for round_no in range(1, args.rounds + 1):
            raw, job = one_round(args.entries, postgres)
            results.append((raw, job))
            print(f"round {round_no}: raw publish_async {raw:,.0f} msg/s, bulk job {job:,.0f} msg/s "
                  f"({job / raw:.0%} of raw)", flush=True)
    finally:
        if postgres is not None:
            postgres.remove()
    raw_med = statistics.median(r for r, _ in results)
    job_med = statistics.median(j for _, j in results)
    ratio = statistics.median(j / r for r, j in results)
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    print(f"median: raw {raw_med:,.0f} msg/s, bulk job {job_med:,.0f} msg/s, {ratio:.0%} of raw "
          f"({verdict} the {TARGET_RATIO:.0%} target)")
    if args.record:
        record(args, results, raw_med, job_med, ratio, verdict)


def record(args, results, raw_med, job_med, ratio, verdict) -> None:
    import os
    from importlib.metadata import version

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "", "## Republish" + (" on PostgreSQL" if args.database == "postgresql" else ""), "",
        f"`python bench/bench_republish.py --entries {args.entries} --rounds {args.rounds} --record"
        + (" --database postgresql" if args.database == "postgresql" else "") + "` "
        f"({datetime.now(timezone.utc):%Y-%m-%d}, Python {platform.python_version()}, nats-py {version('nats-py')}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, nats-server on the same host; load average {load} "
        "at the end: the machine was shared).", "",
        f"A bulk job (POST /api/bulk, rate limit off) republishing {args.entries:,} entries of ~300-byte JSON, "
        "timed from the request to its last item: selection, intents committed before publishing, "
        "publish_async in windows, PubAcks, statuses, audit and item results committed after. "
        f"Raw: nats-py publish_async of the same payloads with msgIds, windows of {RAW_WINDOW}, same server, same run.", "",
        "| round | raw publish_async msg/s | bulk job msg/s | job / raw |", "| --- | --- | --- | --- |",
    ]
    lines += [f"| {i} | {r:,.0f} | {j:,.0f} | {j / r:.0%} |" for i, (r, j) in enumerate(results, 1)]
    lines += [f"| median | {raw_med:,.0f} | {job_med:,.0f} | {ratio:.0%} |", "",
              f"Target: 50% of raw or better; this run {verdict} it.", ""]
    path = ROOT / "docs" / "PERFORMANCE.md"
    if not path.exists():
        path.write_text("# Performance\n")
    with path.open("a") as f:
        f.write("\n".join(lines))
    print(f"appended to {path}")


if __name__ == "__main__":
    main()
