"""What a job's failure reasons add to its page, which polls itself each second while the job runs.

    python bench/bench_job_reasons.py                        # SQLite, jobs of 10,000 and 200,000 items
    python bench/bench_job_reasons.py --database postgresql  # on a PostgreSQL started for the run

A database migrated to the newest revision holds one job per size, a third of its items failed
with one of eight results that differ in their values (an entry's id, a number, a quoted
value), a sixth skipped, the rest done. In one run, taking turns, each size times what the job's
page read before failure reasons (the items' counts by state and the first 200 items: the
baseline) and what it reads now (the same, then actions/bulk/listing.py failure_reason_texts,
and their merge, failure_reasons). Prints the median milliseconds of each over ``--runs``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from databases import bench_database  # noqa: E402

RESULTS = ("'CUST-{n}' does not match '^C-[0-9]+$'", "The entry no longer exists.",
           "Entry {n} changed since you saw it (version 1, now 2).", "timeout after {n} ms talking to ledger",
           "No stream stores subject billing.invoice, so nothing was republished.",
           "member 'shipping' not found in {{'order_id': 'o-{n}'}}", "KeyError: 'vat_rate' for tenant t{n}",
           "The payload is compressed (Content-Encoding: gzip): it cannot be republished from here.")


def fill(engine, job_id: int, items: int) -> None:
    from sqlalchemy import insert, text

    from dlq_dashboard.db.engine import write_transaction
    from dlq_dashboard.db.models import Job, JobItem
    from dlq_dashboard.times import utcnow

    with write_transaction(engine) as conn:
        conn.execute(insert(Job.__table__).values(id=job_id, action="republish", actor="bench", state="running",
                                                  selection="{}", total=items, created_at=utcnow()))
        rows = []
        for n in range(1, items + 1):
            kind = n % 6
            state = "failed" if kind in (0, 1) else "skipped" if kind == 2 else "done"
            result = RESULTS[n % len(RESULTS)].format(n=n) if state != "done" else None
            rows.append({"job_id": job_id, "entry_id": n, "version": 1, "state": state, "result": result})
            if len(rows) == 10_000:
                conn.execute(insert(JobItem.__table__), rows)
                rows = []
        if rows:
            conn.execute(insert(JobItem.__table__), rows)
    if engine.dialect.name == "postgresql":  # the statistics autovacuum keeps after such an insert
        with engine.connect() as conn:
            conn.execute(text("ANALYZE job_items"))
            conn.commit()


def page_reads(engine, job_id: int, reasons: bool) -> float:
    """Milliseconds of what the job's page reads of its items (jobs.job_status's item queries)."""
    from sqlalchemy import func, select

    from dlq_dashboard.actions.bulk.listing import ITEMS, failure_reason_texts, failure_reasons

    started = time.perf_counter()
    with engine.connect() as conn:
        conn.execute(select(ITEMS.c.state, func.count()).where(ITEMS.c.job_id == job_id).group_by(ITEMS.c.state)).all()
        conn.execute(select(ITEMS.c.entry_id, ITEMS.c.state, ITEMS.c.result).where(ITEMS.c.job_id == job_id)
                     .order_by(ITEMS.c.entry_id).limit(200)).all()
        if reasons:
            failure_reasons(failure_reason_texts(conn, job_id))
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 200_000])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()

    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
    from dlq_dashboard.db.migrate import migrate

    with bench_database(args.database, "jobs") as url:
        engine = create_db_engine(url)
        try:
            migrate(engine)
            print(f"{args.database}: median ms of a job page's item reads, {args.runs} runs each, taking turns")
            print(f"{'items':>9} {'failed+skipped':>15} {'before':>8} {'now':>8} {'ratio':>6}")
            for job_id, size in enumerate(args.sizes, 1):
                fill(engine, job_id, size)
                page_reads(engine, job_id, True)  # warm the caches
                before, now = [], []
                for run in range(args.runs):
                    for reasons in ((False, True) if run % 2 else (True, False)):
                        (now if reasons else before).append(page_reads(engine, job_id, reasons))
                b, n = statistics.median(before), statistics.median(now)
                print(f"{size:>9,} {size // 2:>15,} {b:>8.1f} {n:>8.1f} {n / b:>6.2f}")
        finally:
            dispose_quietly(engine)


if __name__ == "__main__":
    main()
