"""A scrape's count of entries by status and reason at a million entries: the statement as it was
(a GROUP BY over the entries, read from ix_entries_status_reason, which revision 0019 dropped)
beside the one now (the counts kept by failure group, as /metrics reads them), on one database in
one run, taking turns; and the whole GET /metrics through the app.

    python bench/bench_metrics.py                                   # SQLite, 1,000,000 entries
    python bench/bench_metrics.py --database postgresql
    python bench/bench_metrics.py --url sqlite:///PATH --rounds 30   # a database built before

Builds the database as bench/bench_pages.py does (a SQLite file in a temporary folder, or a
database of a PostgreSQL server started here from tests/postgres.py, removed at the end). The
index the old statement read is made for the run where the database lacks it, and dropped again
at the end. Both statements' answers are compared (they must agree), then timed: wall ms, median
and 90th percentile.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import bench_pages  # noqa: E402

#: The statement /metrics ran before revision 0019.
BEFORE = "SELECT status, reason, count(*) FROM entries GROUP BY status, reason"
INDEX = "ix_entries_status_reason"


def by_status_reason_before(conn) -> dict[tuple[str, str | None], int]:
    return {(status, reason or None): n for status, reason, n in conn.exec_driver_sql(BEFORE).all()}


def by_status_reason_now(runtime) -> dict[tuple[str, str | None], int]:
    """dlq_entries as the scrape's collector reads it now, from its own code (web/metrics.py): with
    the other metrics it reads from the database in the same transaction."""
    from dlq_dashboard.web.metrics import DashboardCollector

    collector = DashboardCollector(runtime)
    family = next(m for m in collector._database_metrics() if m.name == "dlq_entries")
    return {(s.labels["status"], s.labels["reason"]): int(s.value) for s in family.samples}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--url", help="a database built before (skips the build)")
    parser.add_argument("--rounds", type=int, default=20)
    options = parser.parse_args()
    postgres = None
    if options.url is None and options.database == "postgresql":
        from tests.postgres import PostgresServer

        postgres = PostgresServer().start()
    try:
        with tempfile.TemporaryDirectory() as workdir:
            url = options.url
            if url is None:
                began = time.perf_counter()
                if postgres is not None:
                    url = postgres.create_database()
                    bench_pages.build_postgres(url, options.entries)
                else:
                    path = Path(workdir) / "metrics.sqlite3"
                    url = f"sqlite:///{path}"
                    bench_pages.build_database(path, options.entries)
                print(f"{options.entries:,} entries built in {time.perf_counter() - began:.0f} s", flush=True)
            run(url, Path(workdir), options.rounds)
    finally:
        if postgres is not None:
            postgres.remove()
    return 0


def run(url: str, workdir: Path, rounds: int) -> None:
    from sqlalchemy import inspect

    from dlq_dashboard.runtime import runtime_of
    from dlq_dashboard.web.metrics import reason_label

    app, _ = bench_pages.open_client(url, workdir)
    client = app.test_client()  # /metrics asks for no login
    runtime = runtime_of(app)
    engine = runtime.engine
    made = INDEX not in {index["name"] for index in inspect(engine).get_indexes("entries")}
    if made:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE INDEX {INDEX} ON entries (status, reason)")
            conn.exec_driver_sql("ANALYZE entries")
    gc.collect()
    gc.freeze()  # as `python app.py` does once started
    try:
        with engine.connect() as conn:
            before = by_status_reason_before(conn)
        labelled: dict[tuple[str, str], int] = {}
        for (status, reason), n in before.items():
            labelled[(status, reason_label(reason))] = labelled.get((status, reason_label(reason)), 0) + n
        now = by_status_reason_now(runtime)
        print(f"the two statements agree: {labelled == now} ({sum(now.values()):,} entries)", flush=True)
        samples: dict[str, list[float]] = {"entries by status and reason, as before (the index)": [],
                                           "the scrape's database metrics, now (dlq_entries from the kept counts)": [],
                                           "GET /metrics, now (every metric)": []}
        timed = list(samples)
        for round_ in range(rounds + 2):
            for label in timed if round_ % 2 == 0 else timed[::-1]:
                began = time.perf_counter()
                if label == timed[0]:
                    with engine.connect() as conn:
                        by_status_reason_before(conn)
                elif label == timed[1]:
                    by_status_reason_now(runtime)
                else:
                    assert client.get("/metrics").status_code == 200
                if round_ >= 2:  # two warm-ups
                    samples[label].append((time.perf_counter() - began) * 1000)
    finally:
        if made:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"DROP INDEX {INDEX}")
        runtime.stop()
    print(f"\n{engine.dialect.name}, wall ms, {rounds} rounds: median (90th percentile)\n")
    print("| statement | ms |")
    print("| --- | ---: |")
    for label, values in samples.items():
        print(f"| {label} | {statistics.median(values):.1f} ({statistics.quantiles(values, n=10)[-1]:.1f}) |")


if __name__ == "__main__":
    sys.exit(main())
