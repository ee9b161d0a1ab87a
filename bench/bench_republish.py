"""Bulk republish speed: a job over 20,000 entries with the rate limit off, side by side in the
same run with raw nats-py ``publish_async`` of the same payloads with msgIds.

    python bench/bench_republish.py [--entries 20000] [--rounds 3] [--record] [--database sqlite|postgresql]
                                    [--profile]
    python bench/bench_republish.py --entry-updates

Each round starts a fresh nats-server and database (a SQLite file, or with --database postgresql
a new database on a PostgreSQL server started for the run from tests/postgres.py and removed
at the end), dead-letters the entries (~300-byte JSON orders with contract headers) and lets
the mirror store them. Then, on the same server:
raw publish_async in windows of 256 with a Nats-Msg-Id each, into a stream of its own; and a
bulk job (POST /api/bulk) that republishes every entry through the dashboard's intents,
PubAck records and audit. The job is timed from the request to its last item. Target: the
job at 50% of raw msg/s or better. ``--record`` appends the results to docs/PERFORMANCE.md
under "## Republish".

Every run also reports the CPU an item of each process from /proc (the job's process, its publishing process, nats-server,
the PostgreSQL server), and of raw's; the machine has two CPUs, so a ratio is bounded by the two
totals. ``--profile`` adds each statement's wall time and its backend's CPU an item.
``--entry-updates`` measures the outcome's UPDATE of entries alone on PostgreSQL, as migrated and
then with what a heap-only update would need taken away step by step; ``--heap-only`` runs the
whole job that way too, each round beside one as migrated (what a narrow status table could give
at most).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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


class Cpu:
    """CPU seconds of the processes a job keeps busy, read from /proc: this process (the job, its
    recorder, the bridge), its reaped children (a big job's publishing process), nats-server and
    the PostgreSQL server with its backends."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, nats_pid: int, postgres_pid: int | None):
        self.nats_pid, self.postgres_pid = nats_pid, postgres_pid

    @classmethod
    def of_pid(cls, pid: int) -> float:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / cls.TICK

    def _postgres(self) -> float:
        if self.postgres_pid is None:
            return 0.0
        import psutil

        try:
            server = psutil.Process(self.postgres_pid)
            return sum(self.of_pid(p.pid) for p in [server, *server.children(recursive=True)])
        except psutil.NoSuchProcess:
            return 0.0

    def by_process(self) -> dict[str, float]:
        """CPU seconds so far of each PostgreSQL process still running, by its title (backend,
        autovacuum worker, walwriter, checkpointer...)."""
        import psutil

        found: dict[str, float] = {}
        try:
            for p in psutil.Process(self.postgres_pid).children(recursive=True):
                try:
                    title = " ".join(p.cmdline()).replace("postgres: ", "")
                except psutil.NoSuchProcess:
                    continue
                kind = "backend" if "127.0.0.1" in title else title.split(" t_")[0].strip()
                found[kind] = found.get(kind, 0.0) + self.of_pid(p.pid)
        except psutil.NoSuchProcess:
            pass
        return found

    def read(self) -> dict[str, float]:
        """CPU seconds so far: job (this process), publisher (children ended), nats, postgres."""
        t = os.times()
        return {"job process": t.user + t.system, "publisher": t.children_user + t.children_system,
                "nats-server": self.of_pid(self.nats_pid), "postgresql": self._postgres()}


class Statements:
    """Each statement's wall time and its PostgreSQL backend's CPU (from /proc), summed by the
    statement's first words: where the job's database time goes (--profile)."""

    def __init__(self, engine):
        from sqlalchemy import event

        self.stats: dict[str, list] = {}
        event.listen(engine, "connect", self._connect)
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    @staticmethod
    def _connect(dbapi_conn, record) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("SELECT pg_backend_pid()")
        record.info["backend"] = cursor.fetchone()[0]
        cursor.close()

    def _before(self, conn, cursor, statement, parameters, context, executemany) -> None:
        backend = conn.connection._connection_record.info.get("backend")
        conn.info["bench_started"] = (time.perf_counter(), backend, Cpu.of_pid(backend) if backend else 0.0)

    def _after(self, conn, cursor, statement, parameters, context, executemany) -> None:
        started, backend, cpu = conn.info.pop("bench_started", (None, None, 0.0))
        if started is None:
            return
        stat = self.stats.setdefault(" ".join(statement.split())[:100], [0, 0.0, 0.0])
        stat[0] += 1
        stat[1] += time.perf_counter() - started
        stat[2] += Cpu.of_pid(backend) - cpu if backend else 0.0

    def report(self, n: int) -> list[str]:
        lines = [f"{'calls':>6} {'wall us/item':>12} {'server CPU us/item':>18}  statement"]
        for text, (calls, wall, cpu) in sorted(self.stats.items(), key=lambda kv: -kv[1][1])[:20]:
            lines.append(f"{calls:6d} {wall / n * 1e6:12.1f} {cpu / n * 1e6:18.1f}  {text}")
        return lines


#: What the entry-update measure takes away from ``entries``, a variant at a time, cumulatively.
UPDATE_VARIANTS = [
    ("as migrated", []),  # the search vector is in entry_search since revision 0016
    # ix_entries_status_reason went in revision 0019 (IF EXISTS: a checkout from before it too).
    ("without the indexes holding status", [
        "DROP INDEX ix_entries_status_id", "DROP INDEX IF EXISTS ix_entries_status_reason",
        "DROP INDEX ix_entries_status_updated"]),
    ("and fillfactor 45 (heap-only updates)", ["ALTER TABLE entries SET (fillfactor = 45)"]),
]


#: What ``--heap-only`` takes away from ``entries`` before the dead letters arrive: an outcome's
#: status UPDATE is then a heap-only update, about what it would cost with status, version and
#: updated_at in a narrow table of their own (the named lever), measured on the whole job.
HEAP_ONLY = UPDATE_VARIANTS[1][1] + UPDATE_VARIANTS[2][1]


def one_round(n: int, postgres=None, *, profile: bool = False, heap_only: bool = False) -> dict:
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
        statements = Statements(runtime_of(app).engine) if profile else None
        if heap_only:
            with runtime_of(app).engine.begin() as conn:
                for statement in HEAP_ONLY:
                    conn.exec_driver_sql(statement)
        cpu = Cpu(server.proc.pid, postgres.proc.pid if postgres else None)
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
            before = cpu.read()
            raw = asyncio.run(raw_publish(server.url, n))
            raw_cpu = {name: (seconds - before[name]) / n * 1e6 for name, seconds in cpu.read().items()}

            token = create_token(rt.engine, "bench", "operator")
            client = app.test_client()
            if statements is not None:
                statements.stats.clear()
            before = cpu.read()
            started = time.perf_counter()
            response = client.post("/api/bulk", json={"action": "republish", "filter": {"subject": "orders.created"}},
                                   headers={"Authorization": f"Bearer {token}"})
            assert response.status_code == 202, response.get_json()
            job_id = response.get_json()["job"]
            rt.jobs.join(job_id, timeout=600)
            elapsed = time.perf_counter() - started
            # The publishing process has ended with the job: its CPU is its reaped children's.
            used = {name: (seconds - before[name]) / n * 1e6 for name, seconds in cpu.read().items()}
            status = client.get(f"/api/jobs/{job_id}?limit=0", headers={"Authorization": f"Bearer {token}"}).get_json()
            assert (status["state"], status["done"]) == ("done", n), status
            stored = asyncio.run(_stream_count(server.url, "ORDERS"))
            assert stored == n, f"ORDERS holds {stored} messages, not {n}"
            return {"raw": raw, "job": n / elapsed, "cpu": used, "raw_cpu": raw_cpu,
                    "profile": statements.report(n) if statements is not None else []}
        finally:
            try:
                rt.stop()
            finally:
                server.stop()


async def _stream_count(url: str, stream: str) -> int:
    import nats

    nc = await nats.connect(url)
    try:
        return (await nc.jetstream().stream_info(stream)).state.messages
    finally:
        await nc.close()


def entry_updates(postgres, n: int = 20_000, window: int = 1000) -> list[tuple[str, float, float]]:
    """The republish outcome's UPDATE of entries alone (status, version and updated_at of a
    window of open entries, RETURNING what the counts need), set-based as set_status does it,
    on a fresh database a variant: the server's CPU and the wall time a row."""
    import psycopg

    payload = order_payload(1)
    results, steps = [], []
    for name, statements in UPDATE_VARIANTS:
        steps += statements
        with psycopg.connect(postgres.create_database(migrated=True), autocommit=True) as conn:
            for statement in steps:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO entries (id, status, version, dlq_stream, dlq_epoch, dlq_seq, original_subject, "
                "original_stream, original_seq, consumer, reason, error, received_at, headers, payload, "
                "payload_available, sources, notes, group_id, source) SELECT g, 'open', 1, 'DLQ', 'e', g, "
                "'orders.created', 'ORDERS', g, 'billing', 'max_deliveries', 'timeout calling the payment service', "
                "now(), %s, %s, true, 'dlq', '[]', 1, 'default' FROM generate_series(1, %s) g",
                (json.dumps({k: [v] for k, v in HEADERS.items()}), payload, n))
            conn.execute("VACUUM ANALYZE entries")
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            cpu, started = Cpu.of_pid(backend), time.perf_counter()
            for first in range(1, n + 1, window):
                with conn.transaction():
                    conn.execute("UPDATE entries SET status = 'republished', version = version + 1, updated_at = now() "
                                 "WHERE id = ANY(%s) AND status = 'open' RETURNING id, group_id, received_at",
                                 (list(range(first, first + window)),)).fetchall()
            results.append((name, (Cpu.of_pid(backend) - cpu) / n * 1e6, (time.perf_counter() - started) / n * 1e6))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="append the results to docs/PERFORMANCE.md")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite",
                        help="a SQLite file a round, or a PostgreSQL server started here (a database a round)")
    parser.add_argument("--profile", action="store_true",
                        help="also print where the job's database time goes, statement by statement")
    parser.add_argument("--heap-only", action="store_true",
                        help="PostgreSQL: each round also runs the job with the entries' status updated heap-only "
                             "(the indexes holding status dropped, fillfactor 45), in turns with the schema as migrated")
    parser.add_argument("--entry-updates", action="store_true",
                        help="PostgreSQL: only the outcome's UPDATE of entries, with what makes it a heap-only update")
    args = parser.parse_args()

    if args.entry_updates:
        from tests.postgres import PostgresServer

        postgres = PostgresServer().start()
        try:
            for name, cpu, wall in entry_updates(postgres):
                print(f"entries UPDATE, {name}: server CPU {cpu:.1f} us a row, wall {wall:.1f} us a row", flush=True)
        finally:
            postgres.remove()
        return

    if args.heap_only and args.database != "postgresql":
        parser.error("--heap-only measures PostgreSQL's heap-only updates: add --database postgresql")
    results: list[dict] = []
    heap_only: list[dict] = []
    postgres = None
    if args.database == "postgresql":
        from tests.postgres import PostgresServer

        postgres = PostgresServer().start()
    try:
        for round_no in range(1, args.rounds + 1):
            for variant, kept in ((True, heap_only), (False, results)) if args.heap_only else ((False, results),):
                result = one_round(args.entries, postgres, profile=args.profile, heap_only=variant)
                kept.append(result)
                print(_round_line(f"round {round_no}" + (", heap-only" if variant else ""), result), flush=True)
                for line in result["profile"]:
                    print("    " + line)
    finally:
        if postgres is not None:
            postgres.remove()
    summary = summarize(results)
    raw_med, job_med, ratio, cpu, raw_cpu = summary
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    print(f"median: raw {raw_med:,.0f} msg/s, bulk job {job_med:,.0f} msg/s, "
          f"{ratio:.1%} of raw ({verdict} the {TARGET_RATIO:.0%} target); CPU us an item: "
          + ", ".join(f"{k} {v:,.0f}" for k, v in cpu.items() if v)
          + f" (total {sum(cpu.values()):,.0f}; raw: {raw_cpu:,.0f})")
    if heap_only:
        _, _, variant_ratio, variant_cpu, _ = summarize(heap_only)
        print(f"median, heap-only: {variant_ratio:.1%} of raw; CPU us an item: "
              + ", ".join(f"{k} {v:,.0f}" for k, v in variant_cpu.items() if v)
              + f" (total {sum(variant_cpu.values()):,.0f})")
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.record:
        record(args, results, summary)


def _round_line(label: str, result: dict) -> str:
    cpu = ", ".join(f"{k} {v:,.0f}" for k, v in result["cpu"].items() if v)
    cpu += f" (total {sum(result['cpu'].values()):,.0f}; raw: {sum(result['raw_cpu'].values()):,.0f})"
    return (f"{label}: raw publish_async {result['raw']:,.0f} msg/s, bulk job {result['job']:,.0f} msg/s "
            f"({result['job'] / result['raw']:.0%} of raw); CPU us an item: {cpu}")


def summarize(rounds: list[dict]) -> tuple[float, float, float, dict[str, float], float]:
    """Medians: raw msg/s, job msg/s, the job's ratio to raw (of each round's own pair), the
    job's CPU an item by process, raw's CPU a message (all processes)."""
    cpu = {k: statistics.median(r["cpu"][k] for r in rounds) for k in rounds[0]["cpu"]}
    return (statistics.median(r["raw"] for r in rounds), statistics.median(r["job"] for r in rounds),
            statistics.median(r["job"] / r["raw"] for r in rounds), cpu,
            statistics.median(sum(r["raw_cpu"].values()) for r in rounds))


def record(args, results, summary) -> None:
    from importlib.metadata import version

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "", "## Republish" + (" on PostgreSQL" if args.database == "postgresql" else ""), "",
        f"`python bench/bench_republish.py --entries {args.entries} --rounds {args.rounds} --record"
        + (" --database postgresql" if args.database == "postgresql" else "") + "` "
        f"({datetime.now(timezone.utc):%Y-%m-%d}, Python {platform.python_version()}, nats-py {version('nats-py')}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, nats-server on the same host; load average {load} "
        "at the end: the machine was shared).", "",
        "| round | raw msg/s | raw CPU us/msg | job msg/s | job CPU us/item: job process / publisher / "
        "nats-server / PostgreSQL = total | job / raw |",
        "| --- | ---: | ---: | ---: | --- | ---: |",
    ]

    def cpu_cells(cpu: dict[str, float]) -> str:
        return " / ".join(f"{v:,.0f}" for v in cpu.values()) + f" = {sum(cpu.values()):,.0f}"

    for i, r in enumerate(results, 1):
        lines.append(f"| {i} | {r['raw']:,.0f} | {sum(r['raw_cpu'].values()):,.0f} | "
                     f"{r['job']:,.0f} | {cpu_cells(r['cpu'])} | {r['job'] / r['raw']:.0%} |")
    raw_med, job_med, ratio, cpu, raw_cpu = summary
    lines.append(f"| median | {raw_med:,.0f} | {raw_cpu:,.0f} | {job_med:,.0f} | "
                 f"{cpu_cells(cpu)} | **{ratio:.0%}** |")
    lines += ["", "Target: 50% of raw or better.", ""]
    path = ROOT / "docs" / "PERFORMANCE.md"
    with path.open("a") as f:
        f.write("\n".join(lines))
    print(f"appended to {path}")


if __name__ == "__main__":
    main()
