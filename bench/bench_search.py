"""PostgreSQL search: the GIN-indexed tsvector the dashboard uses against a pg_trgm index over
the same text, on the same entries in one run (index sizes and the time of a page of matches).

    python bench/bench_search.py --entries 100000

Prints a Markdown table for docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402

from dlq_dashboard.db.engine import create_db_engine  # noqa: E402
from dlq_dashboard.db.migrate import migrate  # noqa: E402
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch  # noqa: E402
from dlq_dashboard.times import utcnow  # noqa: E402
from tests.postgres import PostgresServer  # noqa: E402

WORDS = ["warehouse", "customer", "invoice", "timeout", "gateway", "price", "currency", "tenant", "shipping",
         "refund"]
TEXT = "dlq_search_text(original_subject, error, payload, payload_available)"
# (what a person types, the tsquery the dashboard builds, the ILIKE pattern a trigram index serves)
QUERIES = [("ord-0042317", "'ord' & '0042317':*", "%ord 0042317%"),
           ("warehouse", "'warehouse':*", "%warehouse%"),
           ("sku 77", "'sku' & '77':*", "%sku 77%")]


def fill(url: str, entries: int) -> None:
    engine = create_db_engine(url)
    migrate(engine)
    rnd = random.Random(7)
    for start in range(0, entries, 5000):
        messages = []
        for i in range(start, min(start + 5000, entries)):
            payload = json.dumps({"order_id": f"ord-{i:07d}", "customer": f"c-{rnd.randint(1, 50000)}",
                                  "items": [{"sku": f"sku-{rnd.randint(1, 999)}", "price": f"{rnd.randint(1, 999)}.50"}],
                                  "note": " ".join(rnd.choice(WORDS) for _ in range(8))}).encode()
            headers = {"Dlq-Original-Subject": "orders.created", "Dlq-Reason": "fatal",
                       "Dlq-Error": f"{rnd.choice(WORDS)} failed for order ord-{i:07d}"}
            messages.append(StreamMessage(i + 1, "dlq.orders.created", headers, payload, utcnow()))
        ingest_dlq_batch(engine, "DLQ", "bench", messages)
    engine.dispose()


def best_of(conn, sql: str, arg: str, runs: int = 5) -> tuple[int, float]:
    best, rows = float("inf"), []
    for _ in range(runs):
        began = time.perf_counter()
        rows = conn.execute(sql, (arg,)).fetchall()
        best = min(best, time.perf_counter() - began)
    return len(rows), best * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    options = parser.parse_args()
    server = PostgresServer().start()
    try:
        url = server.create_database()
        fill(url, options.entries)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            began = time.perf_counter()
            conn.execute(f"CREATE INDEX ix_bench_trgm ON entries USING gin ({TEXT} gin_trgm_ops)")
            trgm_build = time.perf_counter() - began
            conn.execute("ANALYZE entries")
            conn.execute("ANALYZE entry_search")
            size = lambda name: conn.execute("SELECT pg_relation_size(%s)", (name,)).fetchone()[0] / 2**20  # noqa: E731
            print(f"{options.entries:,} entries; table {size('entries'):.0f} MiB\n")
            print("| | tsvector (GIN) | pg_trgm (GIN) |")
            print("| --- | ---: | ---: |")
            print(f"| index size | {size('ix_entry_search_search'):.1f} MiB | {size('ix_bench_trgm'):.1f} MiB "
                  f"(built in {trgm_build:.1f} s) |")
            for typed, tsq, pattern in QUERIES:
                n1, t1 = best_of(conn, "SELECT id FROM entries e WHERE EXISTS (SELECT 1 FROM entry_search s WHERE "
                                       "s.entry_id = e.id AND s.search @@ to_tsquery('dlq_search', %s)) "
                                       "ORDER BY id DESC LIMIT 51", tsq)
                n2, t2 = best_of(conn, f"SELECT id FROM entries WHERE {TEXT} ILIKE %s ORDER BY id DESC LIMIT 51",
                                 pattern)
                print(f"| a page of `{typed}` (best of 5) | {t1:.1f} ms, {n1} rows | {t2:.1f} ms, {n2} rows |")
    finally:
        server.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
