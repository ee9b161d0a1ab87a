"""The two summaries that read entries, side by side with the ones the kept counts answer, at a
small and a large size in one run; and what storing key fields costs the mirror a row.

    python bench/bench_summaries.py --entries 1000000 --runs 15
    python bench/bench_summaries.py --entries 100000 --runs 9 --small 1000       # a quick run
    python bench/bench_summaries.py --database postgresql --entries 1000000 --runs 15
    python bench/bench_summaries.py --ingest-only                                   # the mirror's cost alone

Builds each database as bench/bench_pages.py does (the same rows; SQLite files under bench/out/,
``--keep`` reuses them; PostgreSQL in a server started here from tests/postgres.py and removed at
the end), then records three key fields (DLQ_LIST_FIELDS) and fills them with the backfill, timed.
A fourth label, not recorded, reads the same pointer from the payloads as every key-field filter
did before: the "as before" rows. Times each request through the Flask test client (median of
``--runs`` after two warm-ups, wall and this process's CPU), every request at both sizes taking
turns in each round, and compares each at the large size with the unfiltered one of its kind
(summary, JSON summary, list page) measured in the same rounds.

The ingest part loops ingest/writes.py ``ingest_dlq_batch`` over 60,000 rows in batches of 2,000
(bench/bench_mirror.py's headers and payloads) into a fresh database, with and without two key
fields, taking turns; CPU from time.process_time (SQLite runs in this process; on PostgreSQL the
server backend's CPU from /proc is added).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_mirror  # noqa: E402
import bench_pages  # noqa: E402

#: The bench's key fields: a value of one entry in 20, of about one in 997, of one entry.
FIELDS = (("customer", "/customer"), ("note", "/note"), ("order", "/order_id"))
#: Not recorded: filtered by reading the payloads, as before key fields were stored.
UNSTORED = ("note_unstored", "/note")


#: What each row is compared with at the large size: a summary with the unfiltered summary (the
#: kept counts), a page of the list with the unfiltered list's first page, the groups with the
#: unfiltered groups page.
SUMMARY, LIST, API = "summary, unfiltered (kept counts)", "list, unfiltered", "GET /api/summary, unfiltered"
#: A groups page (or its JSON) with the groups page as it opens.
GROUPS = "groups, unfiltered (kept counts)"


#: The row of the filter as it was before key fields were stored: every payload read.
BEFORE = "as before: summary, field.note_unstored=rare42 (payloads read)"


def requests_for(count: int, postgresql: bool = False) -> list[tuple[str, str, str]]:
    """(label, URL, the label of the row it is compared with) of each timed request; on
    PostgreSQL without the "as before" row, which the web's statement timeout (db/bounds.py)
    ends with a 503 at a million entries."""
    order = f"ord-{count // 2:08d}"
    return [row for row in [
        (SUMMARY, "/summary", SUMMARY),
        ("summary, status=open (kept counts)", "/summary?status=open", SUMMARY),
        ("summary, field.note=rare42 (1 entry in 997)", "/summary?field.note=rare42", SUMMARY),
        (f"summary, field.order={order} (one entry)", f"/summary?field.order={order}", SUMMARY),
        ("summary, field.note=rare42&status=open", "/summary?field.note=rare42&status=open", SUMMARY),
        (BEFORE, "/summary?field.note_unstored=rare42", SUMMARY),
        ("summary, field.customer=alice (1 entry in 20)", "/summary?field.customer=alice", SUMMARY),
        ("summary, field.customer=alice&status=open", "/summary?field.customer=alice&status=open", SUMMARY),
        ("summary, q=widget (1 entry in 20 and more)", "/summary?q=widget", SUMMARY),
        ("summary, q=rare42 (1 entry in 997)", "/summary?q=rare42", SUMMARY),
        (API, "/api/summary", API),
        ("GET /api/summary?field.customer=alice", "/api/summary?field.customer=alice", API),
        ("GET /api/summary?q=widget", "/api/summary?q=widget", API),
        (LIST, "/", LIST),
        ("list, field.note=rare42", "/?field.note=rare42", LIST),
        ("list, field.customer=alice", "/?field.customer=alice", LIST),
        (GROUPS, "/groups", GROUPS),
        ("groups, field.customer=alice (1 entry in 20)", "/groups?field.customer=alice", GROUPS),
        ("groups, field.note=rare42 (1 entry in 997)", "/groups?field.note=rare42", GROUPS),
        ("groups, field.customer=alice&status=open", "/groups?field.customer=alice&status=open", GROUPS),
        ("GET /api/groups?field.customer=alice", "/api/groups?field.customer=alice", GROUPS),
        ("groups, consumer=billing (1 entry in 5, not a kept count)", "/groups?consumer=billing", GROUPS),
    ] if not (postgresql and row[0] == BEFORE)]


def time_requests(clients: dict[int, object], runs: int,
                  postgresql: bool = False) -> dict[int, dict[str, tuple[float, float]]]:
    """Median (wall ms, CPU ms of this process) of each request at each size: a round asks every
    request once at each size in turn, so a change of the machine's load falls on all of them
    alike; the first two rounds are warm-ups."""
    samples: dict[int, dict[str, list[tuple[float, float]]]] = {size: {} for size in clients}
    plans = {size: requests_for(size, postgresql) for size in clients}
    for round_ in range(runs + 2):
        for index in range(len(plans[next(iter(clients))])):
            for size, client in clients.items():
                label, url, _ = plans[size][index]
                began, cpu = time.perf_counter(), time.process_time()
                response = client.get(url)
                response.get_data()
                elapsed = ((time.perf_counter() - began) * 1000, (time.process_time() - cpu) * 1000)
                assert response.status_code == 200, (url, response.status_code)
                if round_ >= 2:
                    samples[size].setdefault(label, []).append(elapsed)
    return {size: {label: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                   for label, v in by_label.items()} for size, by_label in samples.items()}


def fill_key_fields(database_url: str) -> float:
    """Record FIELDS and run the backfill to its end; seconds taken."""
    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
    from dlq_dashboard.ingest.key_fields import backfill, record_key_fields

    engine = create_db_engine(database_url)
    began = time.perf_counter()
    record_key_fields(engine, FIELDS)
    backfill(engine)
    if engine.dialect.name != "sqlite":
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE entry_fields")
    took = time.perf_counter() - began
    dispose_quietly(engine)
    return took


def index_search(database_url: str) -> float:
    """Index every entry for search as the mirror's search pass does, on PostgreSQL, where
    bench_pages.build_postgres writes the rows alone (build_database indexes the SQLite file);
    seconds taken."""
    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
    from dlq_dashboard.ingest.search_index import index_pending

    engine = create_db_engine(database_url)
    began = time.perf_counter()
    while index_pending(engine, limit=50_000).entries:
        pass
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE entry_search")
    took = time.perf_counter() - began
    dispose_quietly(engine)
    return took


# --- the mirror's cost a row ----------------------------------------------------------------------

def _backend_cpu(engine) -> float:
    """CPU seconds of the PostgreSQL backend of the engine's one connection (0 on SQLite)."""
    if engine.dialect.name == "sqlite":
        return 0.0
    with engine.connect() as conn:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ingest_cpu(database_url: str, list_fields: tuple, rows: int = 60_000, batch: int = 2_000) -> tuple[float, float]:
    """µs of CPU a row to ingest ``rows`` DLQ messages in batches (this process and the backend),
    and of it the calls of fill_key_fields (this process's CPU: on PostgreSQL the server's work
    is in the first number only)."""
    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
    from dlq_dashboard.ingest.key_fields import record_key_fields
    from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
    from dlq_dashboard.times import utcnow

    engine = create_db_engine(database_url, pool_size=1, max_overflow=0) if not database_url.startswith("sqlite") \
        else create_db_engine(database_url)
    record_key_fields(engine, list_fields)
    now = utcnow()
    batches = [[StreamMessage(i + 1, "dlq.orders.created", bench_mirror.headers(i), bench_mirror.payload(i), now)
                for i in range(first, min(first + batch, rows))] for first in range(0, rows, batch)]
    from dlq_dashboard.ingest import writes

    own = [0.0]
    fill = writes.fill_key_fields

    def timed_fill(conn, *args, **kwargs):  # the key fields' own share, this process's CPU
        began = time.process_time()
        try:
            return fill(conn, *args, **kwargs)
        finally:
            own[0] += time.process_time() - began

    writes.fill_key_fields = timed_fill
    try:
        before, server_before = time.process_time(), _backend_cpu(engine)
        after = None
        for messages in batches:
            ingest_dlq_batch(engine, "DLQ", "e1", messages, after=after)
            after = messages[-1].seq
        spent = time.process_time() - before + _backend_cpu(engine) - server_before
    finally:
        writes.fill_key_fields = fill
    dispose_quietly(engine)
    return spent / rows * 1e6, own[0] / rows * 1e6


def measure_ingest(new_database, rounds: int = 3) -> dict[str, list[tuple[float, float]]]:
    """The ingest's CPU a row without and with two key fields, taking turns, ``rounds`` each."""
    variants = {"no key fields": (), "two key fields (customer_id, order_id)":
                (("customer", "/customer_id"), ("order", "/order_id"))}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fields in variants.items():
            results[name].append(ingest_cpu(new_database(), fields))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000, help="the large database's size")
    parser.add_argument("--small", type=int, default=1_000, help="the small database's size")
    parser.add_argument("--runs", type=int, default=15, help="timed runs per request (the median is kept)")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--keep", action="store_true", help="SQLite: reuse databases of the right size in bench/out/")
    parser.add_argument("--ingest-only", action="store_true", help="only the mirror's cost a row")
    parser.add_argument("--no-ingest", action="store_true", help="only the requests, not the mirror's cost")
    parser.add_argument("--ingest-rounds", type=int, default=3)
    options = parser.parse_args()
    with database_server(options.database) as postgres:
        return run(options, postgres)


@contextmanager
def database_server(database: str):
    """For "postgresql" a server started from tests/postgres.py, removed at the end; for
    "sqlite" None."""
    postgres = None
    if database == "postgresql":
        from tests.postgres import PostgresServer

        postgres = PostgresServer().start()
    try:
        yield postgres
    finally:
        if postgres is not None:
            postgres.remove()


def new_databases(postgres, workdir: str):
    """A function that makes an empty database at the newest revision each time it is called
    (in ``postgres``, or a SQLite file in ``workdir``) and returns its URL."""
    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
    from dlq_dashboard.db.migrate import migrate

    counter = iter(range(10**6))

    def new_database() -> str:
        if postgres is not None:
            return postgres.create_database(migrated=True)
        url = f"sqlite:///{workdir}/ingest-{next(counter)}.sqlite3"
        engine = create_db_engine(url)
        migrate(engine)
        dispose_quietly(engine)
        return url
    return new_database


def run(options, postgres) -> int:
    import sqlite3

    from dlq_dashboard.runtime import runtime_of

    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average at the start: {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as workdir:
        new_database = new_databases(postgres, workdir)
        ingest = {} if options.no_ingest else measure_ingest(new_database, options.ingest_rounds)
        for name, values in ingest.items():
            print(f"ingest, {name}: {', '.join(f'{v:.1f}' for v, _ in values)} µs of CPU a row "
                  f"(median {statistics.median(v for v, _ in values):.1f}); in fill_key_fields "
                  f"{', '.join(f'{k:.1f}' for _, k in values)} µs a row", flush=True)
        if options.ingest_only:
            return 0
        sizes = [options.small, options.entries]
        clients, apps, fills, builds = {}, {}, {}, {}
        for size in sizes:
            if postgres is not None:
                url = postgres.create_database()
                print(f"building {size:,} entries in PostgreSQL ...", flush=True)
                builds[size] = bench_pages.build_postgres(url, size)
                print(f"  {size:,}: search index filled in {index_search(url):.1f} s", flush=True)
            else:
                path = out / f"summaries-{size}.sqlite3"
                url = f"sqlite:///{path}"
                if not (options.keep and path.exists()):
                    print(f"building {size:,} entries ...", flush=True)
                    builds[size] = bench_pages.build_database(path, size)
            fills[size] = fill_key_fields(url)
            print(f"  {size:,}: built in {builds.get(size, 0):.0f} s, key fields filled in {fills[size]:.1f} s",
                  flush=True)
            apps[size], clients[size] = bench_pages.open_client(url, Path(workdir) / str(size),
                                                                list_fields=FIELDS + (UNSTORED,))
        timings = time_requests(clients, options.runs, postgres is not None)
        for app in apps.values():
            runtime_of(app).stop()
    small, large = sizes
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    database = f"SQLite {sqlite3.sqlite_version}" if postgres is None else "PostgreSQL (tests/postgres.py)"
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {database}\n")
    # CPU: this process's (routing, queries, template); on PostgreSQL the server's is not in it.
    print(f"| request | {small:,} entries (ms) | {large:,} entries (ms) | CPU at {large:,} (ms) "
          f"| vs unfiltered at {large:,} (wall, CPU) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    postgresql = postgres is not None
    for (label, _, _), (label_large, _, base) in zip(requests_for(small, postgresql),
                                                     requests_for(large, postgresql)):
        (a, _), (b, cpu), (base_wall, base_cpu) = timings[small][label], timings[large][label_large], \
            timings[large][base]
        print(f"| {label_large} | {a:.1f} | {b:.1f} | {cpu:.1f} | {b / base_wall:.2f}×, {cpu / base_cpu:.2f}× |")
    for size in sizes:
        print(f"key fields filled at {size:,} entries: {fills[size]:.1f} s (three fields)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
