"""What counts kept by key-field value would cost: the lever not taken for a common value's
summary (docs/PERFORMANCE.md, "Summaries: key fields and search"). A prototype table of counts by
(field, value, group, status) beside failure_groups, added to in the ingest's transaction and
moved at every status change, as db/counts.py keeps the groups' counts.

    python bench/bench_value_counts.py
    python bench/bench_value_counts.py --database postgresql

The mirror: bench_summaries.ingest_cpu (60,000 messages of bench/bench_mirror.py in batches of
2,000, two key fields: customer_id of 1,000 values and order_id, unique) with and without the
prototype's statement after fill_key_fields, taking turns. A status change: those entries closed
and reopened in windows of 500, one UPDATE a window as actions/intents.py set_status makes it,
with and without the statement that would move their counts, taking turns. CPU of this process
and, on PostgreSQL, of the server backend.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_summaries  # noqa: E402

FIELDS = (("customer", "/customer_id"), ("order", "/order_id"))
TABLE = ("CREATE TABLE value_counts (field_id INTEGER NOT NULL, value VARCHAR(256) NOT NULL, "
         "group_id BIGINT NOT NULL, status VARCHAR(16) NOT NULL, count BIGINT NOT NULL, "
         "PRIMARY KEY (field_id, value, group_id, status))")
_UPSERT = ("INSERT INTO value_counts (field_id, value, group_id, status, count) {select} "
           "ON CONFLICT (field_id, value, group_id, status) DO UPDATE SET count = value_counts.count + excluded.count")
# The entries written after an id, counted by value, group and status ("WHERE true": SQLite's
# parser needs it before an upsert's ON CONFLICT).
ARRIVED = _UPSERT.format(select="SELECT f.field_id, f.value, e.group_id, e.status, count(*) FROM entries e "
                                "JOIN entry_fields f ON f.entry_id = e.id WHERE e.id > {after} AND true "
                                "GROUP BY f.field_id, f.value, e.group_id, e.status")
# A window's entries moved from one status to another: minus the old, plus the new.
MOVED = _UPSERT.format(select="SELECT f.field_id, f.value, e.group_id, s.status, s.sign * count(*) "
                              "FROM entry_fields f JOIN entries e ON e.id = f.entry_id "
                              "CROSS JOIN (SELECT '{old}' AS status, -1 AS sign UNION ALL SELECT '{new}', 1) s "
                              "WHERE f.entry_id IN ({ids}) AND true GROUP BY f.field_id, f.value, e.group_id, "
                              "s.status, s.sign")


def counting_fill(fill):
    """fill_key_fields followed by the prototype's count of what it filled."""
    def fill_and_count(conn, after_id=None, *, ids=None):
        fill(conn, after_id, ids=ids)
        if after_id is not None:
            conn.exec_driver_sql(ARRIVED.format(after=int(after_id)))
    return fill_and_count


def measure_ingest(new_database, rounds: int) -> dict[str, list[float]]:
    """µs of CPU a row, without and with the prototype's counts, ``rounds`` each, taking turns."""
    from dlq_dashboard.ingest import writes

    results: dict[str, list[float]] = {"two key fields": [], "two key fields and counts by value": []}
    fill = writes.fill_key_fields
    for _ in range(rounds):
        for name in results:
            counted = name.endswith("by value")
            url = new_database(counted)
            writes.fill_key_fields = counting_fill(fill) if counted else fill
            try:
                results[name].append(bench_summaries.ingest_cpu(url, FIELDS)[0])
            finally:
                writes.fill_key_fields = fill
    return results


def measure_status_changes(url: str, rounds: int, window: int = 500) -> dict[str, list[float]]:
    """µs of CPU an entry to close and reopen every entry of ``url`` in windows, without and
    with the statement that moves the counts, ``rounds`` each, taking turns."""
    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly, write_transaction

    engine = create_db_engine(url, pool_size=1, max_overflow=0) if not url.startswith("sqlite") \
        else create_db_engine(url)
    with engine.connect() as conn:
        ids = list(conn.exec_driver_sql("SELECT id FROM entries ORDER BY id").scalars())
    results: dict[str, list[float]] = {"status change": [], "status change and counts by value": []}
    for _ in range(rounds):
        for name in results:
            began, server = time.process_time(), bench_summaries._backend_cpu(engine)
            for old, new in (("open", "closed"), ("closed", "open")):
                for start in range(0, len(ids), window):
                    chunk = ",".join(str(i) for i in ids[start:start + window])
                    with write_transaction(engine) as conn:
                        conn.exec_driver_sql(f"UPDATE entries SET status = '{new}', version = version + 1 "
                                             f"WHERE id IN ({chunk}) AND status = '{old}'")
                        if name.endswith("by value"):
                            conn.exec_driver_sql(MOVED.format(old=old, new=new, ids=chunk))
            spent = time.process_time() - began + bench_summaries._backend_cpu(engine) - server
            results[name].append(spent / (2 * len(ids)) * 1e6)
    dispose_quietly(engine)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly, write_transaction

    with bench_summaries.database_server(options.database) as postgres, tempfile.TemporaryDirectory() as workdir:
        migrated = bench_summaries.new_databases(postgres, workdir)
        counted: list[str] = []

        def new_database(with_counts: bool) -> str:
            url = migrated()
            if with_counts:  # the prototype's table beside the app's
                engine = create_db_engine(url)
                with write_transaction(engine) as conn:
                    conn.exec_driver_sql(TABLE)
                dispose_quietly(engine)
                counted[:] = [url]
            return url

        for name, values in measure_ingest(new_database, options.rounds).items():
            print(f"ingest, {name}: {', '.join(f'{v:.1f}' for v in values)} µs of CPU a row "
                  f"(median {statistics.median(values):.1f})", flush=True)
        for name, values in measure_status_changes(counted[0], options.rounds).items():
            print(f"{name}, windows of 500: {', '.join(f'{v:.1f}' for v in values)} µs of CPU an entry "
                  f"(median {statistics.median(values):.1f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
