"""A search's page on PostgreSQL as one signed-in client meets it: each query asked twelve times
in a row on the same app, the queries in the order given, so that psycopg prepares the
statements and the server may keep generic plans as a long-running dashboard's connections do.

    python bench/bench_search_plans.py [--entries 200000] [--analyze] [--statistics N]
                                       [--queries o-4170,c-417,EUR,o-4170,c-417] [--trees . ../baseline]

Each tree (a checkout: this one and a baseline, taking turns, a process each) gets a fresh
database on a PostgreSQL server started for the run (tests/postgres.py): ``--entries`` dead
letters written by the server itself (order-like JSON payloads: "o-<n>" an order id, one of a
thousand customers "c-<n % 1000>", a currency, a note), indexed by the search pass, then with
``--analyze`` vacuumed and analysed as autovacuum does once a table has grown (``--statistics``
first sets the search vectors' statistics target, as a migration may). Printed: each query's
median wall ms a page through Flask's test client and every run's, and how long ANALYZE of
entry_search took.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trees import add_tree_options, enter_tree

INSERT = """
INSERT INTO entries (id, status, version, dlq_stream, dlq_epoch, dlq_seq, original_subject, original_stream,
    original_seq, consumer, reason, error, received_at, headers, payload, payload_available, sources, notes, source)
SELECT g, 'open', 1, 'DLQ', 'e', g, 'orders.created', 'ORDERS', g, 'billing', 'schema_invalid', 'price is a string',
    now() - (%(n)s - g) * interval '1 ms', '{}',
    convert_to(format('{"order_id": "o-%%s", "customer_id": "c-%%s", "items": [{"sku": "SKU-1", "qty": 2, '
                      '"price": "12.50"}], "currency": "EUR", "note": "%%s"}', g, g %% 1000, repeat('x', 120)), 'UTF8'),
    true, 'dlq', '[]', 'default'
FROM generate_series(1, %(n)s) AS g
"""


def one_tree(args) -> None:
    """The run of one tree (the tree's modules first on the path): print its lines."""
    import psycopg

    import bench_pages
    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
    from dlq_dashboard.ingest.search_index import index_pending
    from tests.postgres import PostgresServer

    server = PostgresServer().start()
    try:
        url = server.create_database(migrated=True)
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(INSERT, {"n": args.entries})
            db.execute("SELECT setval(pg_get_serial_sequence('entries', 'id'), %s)", (args.entries,))
        engine = create_db_engine(url)
        while index_pending(engine, 20_000).more:
            pass
        dispose_quietly(engine)
        if args.analyze:
            with psycopg.connect(url, autocommit=True) as db:
                if args.statistics:
                    db.execute(f"ALTER TABLE entry_search ALTER COLUMN search SET STATISTICS {int(args.statistics)}")
                db.execute("VACUUM ANALYZE entries")
                began = time.perf_counter()
                db.execute("VACUUM ANALYZE entry_search")
                print(f"  VACUUM ANALYZE entry_search: {time.perf_counter() - began:.2f} s")
        with tempfile.TemporaryDirectory() as work:
            _, client = bench_pages.open_client(url, Path(work))
            for q in args.queries.split(","):
                times = []
                for _ in range(12):
                    began = time.perf_counter()
                    response = client.get(f"/?q={q}")
                    response.get_data()
                    times.append((time.perf_counter() - began) * 1000)
                    assert response.status_code == 200, (q, response.status_code)
                print(f"  {q:>10}: median {statistics.median(times):7.1f} ms  "
                      f"[{', '.join(f'{t:.0f}' for t in times)}]", flush=True)
    finally:
        server.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--analyze", action="store_true", help="VACUUM ANALYZE the tables before the requests")
    parser.add_argument("--statistics", type=int, help="with --analyze: the search vectors' statistics target first")
    parser.add_argument("--queries", default="o-4170,c-417,EUR,o-4170,c-417",
                        help="comma-separated, asked twelve times each in this order")
    add_tree_options(parser)
    args = parser.parse_args()
    if enter_tree(args):
        one_tree(args)
        return
    passed = ["--entries", str(args.entries), "--queries", args.queries]
    passed += ["--analyze"] if args.analyze else []
    passed += ["--statistics", str(args.statistics)] if args.statistics else []
    for tree in args.trees:
        print(f"{Path(tree).resolve()} ({args.entries:,} entries"
              + (", analysed" if args.analyze else ", not analysed")
              + (f", statistics {args.statistics}" if args.statistics else "") + ")", flush=True)
        subprocess.run([sys.executable, __file__, *passed, "--one-tree", str(Path(tree).resolve())],
                       cwd=tree, check=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
