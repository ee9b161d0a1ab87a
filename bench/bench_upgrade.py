"""How long a revision that copies the entries table holds an upgrade of a SQLite database.

- 0031 (an entry's DLQ message keyed within its source): SQLite cannot drop a constraint, so the
  revision copies the entries table, makes its indexes, triggers and the search view again, and
  rewrites the advisory event keys.
- 0032 (whether DLQ_MASK hides a payload whole): a column added, every payload read once.
- 0033 (no id given twice): entries and four small tables copied as AUTOINCREMENT tables; and, on
  a database where ids were given twice (``--damaged``: the newest thousand entries purged and a
  thousand new ones given their ids, never indexed), the search index rebuilt from every entry.
  The database is at 0031 with every entry in the search index, as a running one is.

Baseline, in the same round: ``VACUUM INTO`` of the same database (a copy of every table and
index, the least a rewrite of the largest one can cost).

    python bench/bench_upgrade.py [--revision 0031|0032|0033] [--entries 1000000] [--rounds 2]

The entries are written by one INSERT ... SELECT (a JSON payload of about 60 bytes, an error, the
columns a dead letter fills), in a database migrated to the revision before; each round starts
from a fresh one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import create_engine, text  # noqa: E402

from dlq_dashboard.db.migrate import migrate  # noqa: E402

FILL = """
WITH RECURSIVE seq(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM seq WHERE x < :n)
INSERT INTO entries (status, version, dlq_stream, dlq_epoch, dlq_seq, original_subject, reason, error,
                     received_at, failed_at, headers, payload, payload_available, sources, notes, source)
SELECT 'open', 1, 'DLQ', 'e1', x, 'orders.created', 'fatal', 'card ' || x || ' declined',
       '2026-12-06 10:00:00', '2026-12-06 10:00:00', '{}',
       CAST('{"order_id": "' || x || '", "customer": {"email": "a@example.com"}}' AS BLOB), 1, 'dlq', '[]',
       'default'
FROM seq
"""


def timed(call) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


#: The newest thousand entries purged, then a thousand new ones stored with their ids (what SQLite
#: did before 0033): above no search position, never indexed.
DAMAGE = f"""
DELETE FROM entries WHERE id > (SELECT MAX(id) - 1000 FROM entries);
{FILL.replace(":n", "1000").replace("x, 'orders.created'", "x + 10000000, 'orders.created'")};
"""


def one_round(folder: Path, entries: int, revision: str, damaged: bool) -> tuple[int, tuple[float, float],
                                                                                  tuple[float, float]]:
    path = folder / "dlq.sqlite3"
    for leftover in folder.glob("*"):
        leftover.unlink()
    engine = create_engine(f"sqlite:///{path}")
    migrate(engine, f"{int(revision) - 1:04d}")
    with engine.begin() as conn:
        conn.execute(text(FILL), {"n": entries})
        if revision >= "0033":  # every entry indexed, as the search pass leaves a running database
            conn.exec_driver_sql("INSERT INTO entries_fts(entries_fts) VALUES ('rebuild')")
            conn.exec_driver_sql("UPDATE search_position SET last_id = (SELECT MAX(id) FROM entries)")
    if damaged:
        with engine.connect() as conn:
            conn.connection.driver_connection.executescript(DAMAGE)
    size = os.path.getsize(path)

    def copy():
        with engine.connect() as conn:
            conn.exec_driver_sql(f"VACUUM INTO '{folder / 'copy.sqlite3'}'")

    baseline = timed(copy)
    upgrade = timed(lambda: migrate(engine, revision))  # that revision alone
    engine.dispose()
    return size, baseline, upgrade


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--revision", choices=("0031", "0032", "0033"), default="0031")
    parser.add_argument("--damaged", action="store_true", help="0033: ids were given twice (the index rebuilt)")
    args = parser.parse_args()
    before = f"{int(args.revision) - 1:04d}"
    print(f"| round | entries | database MB | VACUUM INTO (baseline): wall / CPU s | {before} -> {args.revision}"
          f"{' (ids given twice)' if args.damaged else ''}: wall / CPU s |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="dlq-bench-upgrade-") as folder:
        for n in range(1, args.rounds + 1):
            size, (bw, bc), (uw, uc) = one_round(Path(folder), args.entries, args.revision, args.damaged)
            print(f"| {n} | {args.entries:,} | {size / 1e6:.0f} | {bw:.1f} / {bc:.1f} | {uw:.1f} / {uc:.1f} |", flush=True)


if __name__ == "__main__":
    main()
