"""The mirror's writer alone: the CPU a row of committing parsed DLQ batches and of indexing them
for search, as the writer process does them, on a fresh database, without NATS.

    python bench/bench_writer.py [--rows 60000] [--rounds 3] [--database sqlite|postgresql]
                                 [--key-fields] [--trees . ../baseline]

Each round writes ``--rows`` of bench_mirror.py's dead letters (300-byte payloads, eleven
headers) in batches of 2,000, parsed beforehand as the receiving process parses them
(``writes.dlq_values``), through ``writer._ingest_dlq_parsed`` (what the writer process runs for
each batch), then runs the search pass (``search_index.index_pending``) over them. The CPU is
``time.process_time`` of this process, and on PostgreSQL also that of the server's processes
(from /proc). With ``--trees`` the same rounds run for each checkout named, taking turns (each
round a fresh process a tree), so a change and its baseline are measured in the same minutes.
With ``--key-fields`` two key fields (DLQ_LIST_FIELDS: ``/order_id``, ``/customer_id``) are
recorded first, so each batch also stores their values (ingest/key_fields.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TICKS = os.sysconf("SC_CLK_TCK")


def _server_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def _postgres_pids() -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if "(postgres)" in stat.read_text():
                pids.append(int(stat.parent.name))
        except OSError:
            continue
    return pids


def one_round(rows: int, database_url: str, key_fields: bool = False) -> dict:
    """Write ``rows`` in batches, then index them; the CPU µs a row of each step."""
    from bench_mirror import headers, payload
    from dlq_dashboard.db.engine import create_db_engine
    from dlq_dashboard.db.migrate import migrate
    from dlq_dashboard.ingest import search_index, writer, writes
    from dlq_dashboard.times import utcnow

    engine = create_db_engine(database_url)
    migrate(engine)
    if key_fields:
        from dlq_dashboard.ingest.key_fields import record_key_fields

        record_key_fields(engine, (("Order", "/order_id"), ("Customer", "/customer_id")))
    batch = 2000
    prepared = []
    for start in range(0, rows, batch):
        messages = [writes.StreamMessage(seq, "dlq.orders.created", headers(seq - 1), payload(seq - 1), utcnow())
                    for seq in range(start + 1, min(start + batch, rows) + 1)]
        names, values = writes.dlq_values("DLQ", "e1", messages)
        prepared.append((names, values, messages[-1].seq))
    servers = _postgres_pids() if engine.dialect.name == "postgresql" else []
    # The pass's engine is marked as the writer process marks it, so the writes leave indexing to it.
    search_index._PASSED.add(engine)
    cpu, server = time.process_time(), _server_cpu(servers)
    after = None
    for names, values, last in prepared:
        writer._ingest_dlq_parsed(engine, None, (), "default", "DLQ", "e1", names, values, last, after)
        after = last
    write_cpu, write_server = time.process_time() - cpu, _server_cpu(servers) - server
    cpu, server = time.process_time(), _server_cpu(servers)
    while search_index.index_pending(engine).entries:
        pass
    index_cpu, index_server = time.process_time() - cpu, _server_cpu(servers) - server
    engine.dispose()
    return {"write": 1e6 * write_cpu / rows, "write_server": 1e6 * write_server / rows,
            "index": 1e6 * index_cpu / rows, "index_server": 1e6 * index_server / rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--key-fields", action="store_true", help="two key fields recorded: their values stored too")
    parser.add_argument("--trees", nargs="+", default=[str(HERE.parent)],
                        help="checkouts to measure, taking turns (the first is this one)")
    parser.add_argument("--round-in", help=argparse.SUPPRESS)  # a database URL: one round, JSON out
    options = parser.parse_args()
    if options.round_in:
        print(json.dumps(one_round(options.rows, options.round_in, options.key_fields)))
        return
    postgres = None
    results: dict[str, list[dict]] = {tree: [] for tree in options.trees}
    with tempfile.TemporaryDirectory() as tmp:
        if options.database == "postgresql":
            sys.path.insert(0, str(HERE.parent))
            from tests.postgres import PostgresServer

            postgres = PostgresServer().start()
        try:
            for r in range(options.rounds):
                for i, tree in enumerate(options.trees):
                    url = (postgres.create_database() if postgres
                           else f"sqlite:///{tmp}/round-{r}-{i}.sqlite3")
                    env = {**os.environ, "PYTHONPATH": f"{Path(tree).resolve()}:{HERE}"}
                    out = subprocess.run([sys.executable, str(HERE / "bench_writer.py"), "--rows", str(options.rows),
                                          "--round-in", url, *(["--key-fields"] if options.key_fields else [])], env=env, cwd=tree, check=True, capture_output=True,
                                         text=True).stdout
                    results[tree].append(json.loads(out.strip().splitlines()[-1]))
                    last = results[tree][-1]
                    print(f"round {r + 1} {tree}: write {last['write']:.1f} + {last['write_server']:.1f} µs, "
                          f"index {last['index']:.1f} + {last['index_server']:.1f} µs a row", flush=True)
        finally:
            if postgres is not None:
                postgres.remove()
    print(f"\n{options.rows:,} rows a round, {options.rounds} rounds, {options.database}; CPU µs a row "
          "(this process + the database server's), medians\n")
    print("| tree | write | write, server | search index | search index, server | total |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for tree, rounds in results.items():
        med = {k: sorted(r[k] for r in rounds)[len(rounds) // 2] for k in rounds[0]}
        print(f"| {tree} | {med['write']:.1f} | {med['write_server']:.1f} | {med['index']:.1f} | "
              f"{med['index_server']:.1f} | {sum(med.values()):.1f} |")
    with open("/proc/loadavg") as load:
        print(f"\nload average at the end: {load.read().split()[0]}")


if __name__ == "__main__":
    main()
