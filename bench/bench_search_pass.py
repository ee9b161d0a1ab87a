"""The mirror's write path with the search index written inline against one that leaves it to the
search pass (ingest/search_index.py), and the pass's own cost, in CPU a row.

    python bench/bench_search_pass.py [--rows 60000] [--batch 2000] [--database sqlite|postgresql]

Each mode writes ``--rows`` DLQ messages (bench_mirror.py's headers and payloads) with
``writes.ingest_dlq_batch`` in batches of ``--batch`` into a fresh database:
  inline — the index written in each batch's transaction (an engine without a pass: what the
           writer did before the pass, and what a direct write still does);
  pass   — the writer process's engine: the batches leave the index to the pass, which then
           indexes them in batches of 2,000 (``index_pending``), measured on its own.
CPU from time.process_time (this process) and, on PostgreSQL, the server's processes from
/proc (utime + stime of the postmaster and its children). Run against an older checkout (no
ingest/search_index.py) only ``inline`` is measured: its cost before the change.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_mirror import headers, payload  # noqa: E402
from dlq_dashboard.db.engine import create_db_engine, dispose_quietly  # noqa: E402
from dlq_dashboard.db.migrate import migrate  # noqa: E402
from dlq_dashboard.ingest import writes  # noqa: E402
from dlq_dashboard.times import utcnow  # noqa: E402

try:
    from dlq_dashboard.ingest.search_index import SearchPass, index_pending
except ImportError:  # a checkout from before the search pass
    SearchPass = index_pending = None

TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu(postmaster: int | None) -> float:
    """CPU seconds of the PostgreSQL server: the postmaster and every child of it."""
    if postmaster is None:
        return 0.0
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(pid) == postmaster or int(fields[1]) == postmaster:  # fields[1]: the parent
            total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def write(engine, rows: int, batch: int) -> None:
    for start in range(0, rows, batch):
        messages = [writes.StreamMessage(i + 1, "dlq.orders.created", headers(i), payload(i), utcnow())
                    for i in range(start, min(start + batch, rows))]
        writes.ingest_dlq_batch(engine, "DLQ", "e1", messages, start)


def measure(database_url: str, postmaster: int | None, mode: str, rows: int, batch: int) -> dict[str, float]:
    engine = create_db_engine(database_url)
    migrate(engine)
    if mode == "pass":
        SearchPass(engine)  # not started: its runs are measured below, on their own
    cpu, server, wall = time.process_time(), server_cpu(postmaster), time.perf_counter()
    write(engine, rows, batch)
    result = {"writer": (time.process_time() - cpu) / rows * 1e6,
              "server": (server_cpu(postmaster) - server) / rows * 1e6,
              "wall": (time.perf_counter() - wall) / rows * 1e6}
    if mode == "pass":
        cpu, server = time.process_time(), server_cpu(postmaster)
        while index_pending(engine).more:
            pass
        result["pass"] = (time.process_time() - cpu) / rows * 1e6
        result["pass_server"] = (server_cpu(postmaster) - server) / rows * 1e6
    dispose_quietly(engine)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    modes = ["inline"] + (["pass"] if SearchPass is not None else [])
    with tempfile.TemporaryDirectory() as folder:
        postgres = None
        if args.database == "postgresql":
            from tests.postgres import PostgresServer
            postgres = PostgresServer().start()
        try:
            print("| database | mode | writer CPU µs/row | server CPU µs/row | wall µs/row | pass CPU µs/row "
                  "| pass server CPU µs/row |")
            print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
            for mode in modes:
                url = postgres.create_database() if postgres else f"sqlite:///{folder}/{mode}.sqlite3"
                r = measure(url, postgres.proc.pid if postgres else None, mode, args.rows, args.batch)
                print(f"| {args.database} | {mode} | {r['writer']:.1f} | {r['server']:.1f} | {r['wall']:.1f} | "
                      f"{r.get('pass', 0):.1f} | {r.get('pass_server', 0):.1f} |", flush=True)
        finally:
            if postgres is not None:
                postgres.remove()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
