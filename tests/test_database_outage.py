"""A database outage, generated over every route of app.url_map: with the database stopped (or, on
SQLite, its file gone) every route answers 503 with one sentence, never a 500, as a session user
and as a token, whether the probe has noticed yet or not; the banner and /healthz answer from
memory; after the database is back every route answers again. Frozen PostgreSQL (SIGSTOP): the
banner and /healthz within a second, no request waits as long as the freeze."""

from __future__ import annotations

import re
import shutil
import threading
from contextlib import contextmanager

from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
import requests

from sqlalchemy.exc import OperationalError

from dlq_dashboard.accounts import create_token
from dlq_dashboard.db.bounds import Bounds, bounded
from dlq_dashboard.db.engine import create_db_engine, dispose_quietly, write_transaction
from dlq_dashboard.db.liveness import CANNOT_WRITE, TOO_SLOW, UNREACHABLE, DatabaseProbe
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.web.openapi import openapi_document, route_key

from . import support
from .postgres import PostgresServer
from .test_routes_roles import fill, routes



@pytest.fixture(scope="module")
def own_postgres():
    """A PostgreSQL server of this module's own: its tests stop, freeze and restart it."""
    server = PostgresServer().start()
    yield server
    server.remove()


@pytest.fixture
def database_url(request, tmp_path):
    """SQLite in a folder of its own (moved away for an outage), or a database on own_postgres;
    already at the newest revision, as conftest's."""
    if getattr(request, "param", "sqlite") == "sqlite":
        (tmp_path / "db").mkdir()
        yield support.migrated_sqlite(tmp_path / "db" / "dlq.sqlite3")
        return
    server = request.getfixturevalue("own_postgres")
    url = server.create_database(migrated=True)
    yield url
    if server.proc.poll() is not None:  # a failed test left it stopped
        server.start()
    server.drop_database(url)


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """Short database timeouts, so that a bound shows within a test."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url,
                                 database_statement_timeout=2.0, database_connect_timeout=2.0)


def from_memory(app, endpoint: str) -> bool:
    """A route that answers without the database (the banner, /healthz, /metrics, static documents)."""
    return getattr(app.view_functions[endpoint], "from_memory", False)


def is_postgres(rt) -> bool:
    return rt.engine.dialect.name == "postgresql"


@contextmanager
def database_away(request, rt, tmp_path):
    """PostgreSQL stopped, or the SQLite file's folder moved away (no connection opens), then back."""
    if is_postgres(rt):
        server = request.getfixturevalue("own_postgres")
        server.stop()
        try:
            yield
        finally:
            server.start()
        return
    away = tmp_path / "db-away"
    shutil.move(tmp_path / "db", away)
    engines = [rt.engine] + ([rt.database._engine] if rt.database is not None else [])
    for engine in engines:
        dispose_quietly(engine)  # the pooled connections hold the file open
    try:
        yield
    finally:
        shutil.move(away, tmp_path / "db")
        for engine in engines:
            dispose_quietly(engine)


def prepare(app, auth):
    """An entry, an admin session with its CSRF token and an admin token, made while all is well."""
    rt = runtime_of(app)
    entry_id = support.dead_letter(app, 1, Dlq_Error="boom")
    session = auth.client("admin")
    return {"entry_id": entry_id, "session": session, "csrf": support.csrf_token(session, "/"),
            "token": create_token(rt.engine, "outage-admin", "admin")}


def send(client, method: str, path: str, *, token: str | None = None, csrf: str | None = None):
    headers = support.bearer(token) if token else {}
    if method == "GET":
        response = client.get(path, headers=headers)
    elif path.startswith("/api/"):
        if csrf:
            headers["X-CSRFToken"] = csrf
        response = client.open(path, method=method, json={"version": 1}, headers=headers)
    else:
        response = client.open(path, method=method, data={"version": "1", "csrf_token": csrf or ""},
                               headers=headers)
    response.get_data()  # a streamed answer finishes
    response.close()
    return response


#: Filters the kept counts cannot answer, so a route that counts or lists reads the entries where
#: it would not without: a search with another filter (the search index, a search's window), a
#: consumer (the newest matches counted by the database: tallies._Newest), and a time window
#: (on SQLite its ids are read from the time index while the statement is built: entries/windows.py).
UNKEPT = ("q=boom&reason=fatal", "consumer=billing", "since=1h&until=2030-01-01T00:00:00Z")


def every_route(app, world):
    """(label, endpoint, response) for every route and method, as the session and as the token;
    a GET also with each of UNKEPT."""
    for endpoint, rule, method in routes(app):
        filled = fill(rule, world["entry_id"])
        queries = [f"{filled}{'&' if '?' in filled else '?'}{query}" for query in UNKEPT]
        for path in (filled, *queries) if method == "GET" else (filled,):
            yield (f"{method} {path} by session", endpoint,
                   send(world["session"], method, path, csrf=world["csrf"]))
            yield (f"{method} {path} by token", endpoint,
                   send(app.test_client(), method, path, token=world["token"]))


def undocumented_503s(app, answered: set[tuple[str, str]]) -> list[str]:
    """The operations of the OpenAPI document whose route answered 503 in the walk (``answered``:
    method and endpoint) but that do not list 503."""
    operations = {(method, route_key(path)): operation for path, item in openapi_document(app)["paths"].items()
                  for method, operation in item.items()}
    return [f"{method} {rule.rule}: answers 503, which /api/openapi.json does not list"
            for rule in app.url_map.iter_rules() for method in sorted(rule.methods or ())
            if (method, rule.endpoint) in answered
            and "503" not in operations.get((method.lower(), route_key(rule.rule)), {"responses": {"503": 1}})["responses"]]


def outage_problems(app, world, *, noticed: bool) -> list[str]:
    problems = []
    answered = set()
    for label, endpoint, response in every_route(app, world):
        if response.status_code == 503:
            answered.add((label.split()[0], endpoint))
        body = response.get_data().decode(errors="replace")
        if endpoint == "status.banner":
            if response.status_code != 200 or (noticed and "The database is not reachable" not in body):
                problems.append(f"{label}: {response.status_code} {body[:200]!r}")
            continue
        if endpoint == "metrics.metrics":
            if response.status_code != 200 or "dlq_database_up 0.0" not in body:
                problems.append(f"{label}: {response.status_code}, the database is not said to be down")
            continue
        if endpoint == "api.readyz":  # from memory: ready until the probe notices, then not
            if response.status_code != (503 if noticed else 200):
                problems.append(f"{label}: {response.status_code}, {response.get_json()!r}")
            continue
        if from_memory(app, endpoint) and endpoint != "api.healthz":
            if response.status_code != 200:  # needs no database: answers as ever
                problems.append(f"{label}: {response.status_code}")
            continue
        if response.status_code != 503:
            problems.append(f"{label}: {response.status_code}, not 503")
            continue
        if endpoint == "api.healthz":
            if response.get_json()["database"]["connected"] is not False:
                problems.append(f"{label}: the database is said to be connected")
        elif response.is_json:
            if response.get_json() != {"error": UNREACHABLE}:
                problems.append(f"{label}: {response.get_json()!r}")
        elif UNREACHABLE not in body or (noticed and 'data-stale="database"' not in body):
            problems.append(f"{label}: the error page lacks the sentence or the banner: {body[:300]!r}")
    return problems + undocumented_503s(app, answered)


def anonymous_problems(app, world) -> list[str]:
    """Anonymous calls during the outage: a refusal or a 503, never another 5xx."""
    problems = []
    for endpoint, rule, method in routes(app):
        path = fill(rule, world["entry_id"])
        for htmx in (False, True):
            response = send(app.test_client(), method, path) if not htmx else \
                app.test_client().open(path, method=method, headers={"HX-Request": "true"})
            label = f"{method} {path} anonymous{' (htmx)' if htmx else ''}"
            if response.status_code >= 500 and response.status_code != 503:
                problems.append(f"{label}: {response.status_code}")
            if response.status_code == 503 and "data-status-banner" in response.get_data().decode(errors="replace"):
                problems.append(f"{label}: the status banner shown to an anonymous caller")
    return problems


def answering_problems(app, world) -> list[str]:
    return [f"{label}: {response.status_code}" for label, endpoint, response in every_route(app, world)
            if response.status_code >= 500 and endpoint != "api.healthz"]


@pytest.mark.both_databases
@pytest.mark.parametrize("noticed", [True, False], ids=["probe-noticed", "not-yet-noticed"])
@pytest.mark.slow
def test_every_route_answers_503_with_a_sentence_while_the_database_is_away_and_again_after(
        request, app, auth, tmp_path, noticed):
    rt = runtime_of(app)
    world = prepare(app, auth)
    if not noticed:
        # As if the outage began a moment ago: no probe, every route meets the error itself.
        rt.database.stop()
        rt.database = None
    with database_away(request, rt, tmp_path):
        if noticed:
            support.wait_for(lambda: not rt.database.state.reachable, message="the probe to notice")
        problems = outage_problems(app, world, noticed=noticed) + anonymous_problems(app, world)
    assert problems == [], "\n".join(problems)
    if noticed:
        support.wait_for(lambda: rt.database.state.reachable, message="the probe to see the database again")
    problems = answering_problems(app, world)
    assert problems == [], "\n".join(problems)


@pytest.mark.both_databases
def test_a_tokens_last_use_that_cannot_be_written_does_not_fail_its_request(app, tokens, caplog):
    import sqlalchemy

    from dlq_dashboard.db.models import ApiToken

    rt = runtime_of(app)
    driver_error = _disk_full(rt)

    def fail_the_last_use(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("UPDATE API_TOKENS"):
            raise sqlalchemy.exc.OperationalError(statement, parameters, driver_error)

    sqlalchemy.event.listen(rt.engine, "before_cursor_execute", fail_the_last_use)
    try:
        client = app.test_client()
        answers = [client.get("/api/entries", headers=support.bearer(tokens["viewer"])) for _ in range(3)]
    finally:
        sqlalchemy.event.remove(rt.engine, "before_cursor_execute", fail_the_last_use)
    assert [a.status_code for a in answers] == [200, 200, 200]
    logged = [r for r in caplog.records if "last use could not be recorded" in r.getMessage()]
    assert len(logged) == 1, logged
    with rt.engine.connect() as conn:
        assert conn.execute(sqlalchemy.select(ApiToken.last_used_at)
                            .where(ApiToken.name == "test-viewer")).scalar() is None
    # Once the write works again, it is recorded.
    assert app.test_client().get("/api/entries", headers=support.bearer(tokens["viewer"])).status_code == 200
    with rt.engine.connect() as conn:
        assert conn.execute(sqlalchemy.select(ApiToken.last_used_at)
                            .where(ApiToken.name == "test-viewer")).scalar() is not None


def _disk_full(rt) -> Exception:
    """The driver's own error for a full disk."""
    if is_postgres(rt):
        import psycopg.errors

        return psycopg.errors.DiskFull("could not extend file: No space left on device")
    import sqlite3

    return sqlite3.OperationalError("database or disk is full")


@pytest.mark.both_databases
def test_a_statement_that_waits_past_the_statement_timeout_is_a_503_saying_so(app, tokens):
    """A lock held elsewhere: the request's statement is cut short after DLQ_DB_STATEMENT_TIMEOUT."""
    rt = runtime_of(app)
    entry_id = support.dead_letter(app, 1)
    client = app.test_client()
    with holding_the_entries(rt):
        response = client.post(f"/api/entries/{entry_id}/close", json={"version": 1},
                               headers=support.bearer(tokens["operator"]))
    assert response.status_code == 503
    assert response.get_json() == {"error": TOO_SLOW}
    again = client.post(f"/api/entries/{entry_id}/close", json={"version": 1},
                        headers=support.bearer(tokens["operator"]))
    assert again.status_code == 200, again.get_json()


@contextmanager
def holding_the_entries(rt):
    """Another connection holds what a close must write: SQLite's write lock, or PostgreSQL's
    lock on the entries table."""
    with write_transaction(rt.engine) as conn:  # BEGIN IMMEDIATE on SQLite
        if is_postgres(rt):
            conn.exec_driver_sql("LOCK TABLE entries IN ACCESS EXCLUSIVE MODE")
        yield


@pytest.mark.both_databases
def test_a_write_the_database_cannot_store_is_a_503_saying_so(app, tokens):
    import sqlalchemy

    rt = runtime_of(app)
    entry_id = support.dead_letter(app, 1)
    driver_error = _disk_full(rt)

    def fail_the_close(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("UPDATE ENTRIES"):
            raise sqlalchemy.exc.OperationalError(statement, parameters, driver_error)

    sqlalchemy.event.listen(rt.engine, "before_cursor_execute", fail_the_close)
    try:
        response = app.test_client().post(f"/api/entries/{entry_id}/close", json={"version": 1},
                                          headers=support.bearer(tokens["operator"]))
    finally:
        sqlalchemy.event.remove(rt.engine, "before_cursor_execute", fail_the_close)
    assert response.status_code == 503
    assert response.get_json() == {"error": CANNOT_WRITE}
    assert rt.store.get_entry(entry_id).status == "open"


def test_sqlites_disk_io_error_is_said_as_a_database_that_cannot_write():
    """An immutable file (chattr +i) or a failing disk: SQLite's "disk I/O error" was said as "The
    database is not reachable" beside pages that read it well."""
    import sqlite3

    import sqlalchemy

    from dlq_dashboard.db.liveness import sentence

    refused = sqlalchemy.exc.OperationalError("UPDATE entries ...", {}, sqlite3.OperationalError("disk I/O error"))
    assert sentence(refused) == CANNOT_WRITE
    unopened = sqlalchemy.exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError("unable to open database file"))
    assert sentence(unopened) == UNREACHABLE
    unread = sqlalchemy.exc.OperationalError("SELECT id FROM entries", {}, sqlite3.OperationalError("disk I/O error"))
    assert sentence(unread) == UNREACHABLE  # a read that failed: not a word of writing


@pytest.mark.both_databases
def test_work_outside_a_request_is_not_cut_short_by_the_statement_timeout(app):
    """The mirror's writes, jobs, purges and migrations run unbounded; a request's statements do not."""
    rt = runtime_of(app)
    if not is_postgres(rt):
        return _sqlite_work_outside_a_request_waits_for_the_write_lock(app, rt)
    with rt.engine.connect() as conn:
        conn.exec_driver_sql("SELECT pg_sleep(2.5)")  # longer than the 2 s statement timeout
    with app.test_request_context("/"):
        app.preprocess_request()
        with pytest.raises(Exception, match="statement timeout"):
            with rt.engine.connect() as conn:
                conn.exec_driver_sql("SELECT pg_sleep(2.5)")


def test_a_pooled_connection_keeps_the_timeout_its_check_set_and_a_transaction_sets_one_only_when_it_differs(
        postgres_server):
    """PostgreSQL: the pool's check of a connection before use sets the statement_timeout its work
    wants for the session, so a bounded transaction sends no SET LOCAL of its own (a round trip
    each); work wanting another bound, or none, on the same connection gets its own, and the
    rollback that ends a read undoes none of it."""
    import sqlalchemy

    url = postgres_server.create_database(migrated=False)
    engine = create_db_engine(url, pool_size=1, max_overflow=0)  # one connection: every checkout reuses it
    sent: list[str] = []
    sqlalchemy.event.listen(engine, "before_cursor_execute", lambda _c, _cur, statement, *_: sent.append(statement))

    def shown(conn=None) -> str:
        if conn is not None:
            return conn.exec_driver_sql("SHOW statement_timeout").scalar()
        with engine.connect() as conn:  # a read: it ends with a rollback
            return shown(conn)

    try:
        made = shown()  # the connection is made for unbounded work: the server's own timeout
        with bounded(Bounds(statement=2.0)):
            checked = [shown(), shown()]  # each checkout checked, which sets the request's bound
        unbounded = shown()
        with bounded(Bounds(statement=2.0)):
            with engine.connect() as conn:
                with bounded(Bounds(statement=3.0)):  # a bound changed after the check
                    changed = shown(conn)
            after = shown()
    finally:
        dispose_quietly(engine)
        postgres_server.drop_database(url, later=True)
    assert (made, checked, unbounded, changed, after) == ("0", ["2s", "2s"], "0", "3s", "2s")
    assert [s for s in sent if s.startswith("SET")] == ["SET LOCAL statement_timeout = 3000"]


@pytest.mark.both_databases
def test_a_bulk_job_started_by_a_request_runs_its_statements_without_the_requests_bounds(app, tokens):
    """The job runs in threads of its own after the request: its statements are never cut short."""
    import threading

    import sqlalchemy

    from dlq_dashboard.db.bounds import current_bounds

    rt = runtime_of(app)
    ids = [support.dead_letter(app, seq) for seq in range(1, 4)]
    seen: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append((threading.current_thread().name, current_bounds()))

    sqlalchemy.event.listen(rt.engine, "before_cursor_execute", record)
    try:
        answer = app.test_client().post("/api/bulk", json={"action": "close", "ids": ids, "note": "bounds"},
                                        headers=support.bearer(tokens["operator"]))
        assert answer.status_code == 202, answer.get_json()
        support.jobs_settled(rt.engine)
    finally:
        sqlalchemy.event.remove(rt.engine, "before_cursor_execute", record)
    request_thread = threading.current_thread().name  # the test client runs the request here
    by_the_job = [bounds for thread, bounds in seen if thread != request_thread]
    assert by_the_job and all(bounds is None for bounds in by_the_job)
    assert any(bounds is not None for thread, bounds in seen if thread == request_thread)
    assert [rt.store.get_entry(i).status for i in ids] == ["closed"] * 3


def _sqlite_work_outside_a_request_waits_for_the_write_lock(app, rt):
    """SQLite's bound is the busy timeout: 2 s in a request, 30 s for the rest (the mirror's writer)."""
    import sqlite3
    import threading

    from sqlalchemy.exc import OperationalError as Locked

    holder = sqlite3.connect(rt.engine.url.database, isolation_level=None, check_same_thread=False)
    try:
        holder.execute("BEGIN IMMEDIATE")

        def write_in_a_request():
            with app.test_request_context("/"):
                app.preprocess_request()
                with pytest.raises(Locked, match="database is locked"):
                    with write_transaction(rt.engine):
                        pass

        with ThreadPoolExecutor(1) as pool:
            pool.submit(write_in_a_request).result(timeout=6)  # the request's 2 s, not 30
        # Held for 3 s, longer than a request's bound: work outside a request waits it out.
        release = threading.Timer(3.0, holder.rollback)
        release.start()
        with write_transaction(rt.engine) as conn:
            conn.exec_driver_sql("SELECT 1")
        release.join()
    finally:
        holder.close()


# --- frozen PostgreSQL ------------------------------------------------------------------------

def statement_on_a_frozen_server(conn):
    """A statement of a request (its bounds) on a connection that was well a moment ago."""
    with bounded(Bounds(statement=2.0)):
        conn.exec_driver_sql("SELECT 1")

@contextmanager
def frozen(server: PostgresServer):
    """The postmaster and its backends stopped with SIGSTOP (connections stay open, nothing
    answers), continued with SIGCONT afterwards whatever happens (support.stopped)."""
    main = psutil.Process(server.proc.pid)
    with support.stopped(main.pid, *[child.pid for child in main.children(recursive=True)]):
        yield


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
@pytest.mark.slow
def test_a_frozen_database_makes_no_request_wait_as_long_as_the_freeze(request, app, live_server):
    rt = runtime_of(app)
    support.ensure_user(app, "frozen-admin", "admin")
    token = create_token(rt.engine, "frozen-admin", "admin")
    browser = requests.Session()
    page = browser.get(f"{live_server}/login", timeout=10).text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert browser.post(f"{live_server}/login", data={"username": "frozen-admin", "password": support.PASSWORD,
                                                      "csrf_token": csrf}, timeout=10, allow_redirects=False).status_code == 302
    entry_id = support.dead_letter(app, 1)
    server = request.getfixturevalue("own_postgres")
    in_use = rt.engine.connect()
    in_use.exec_driver_sql("SELECT 1")
    in_use.rollback()
    with frozen(server):
        support.wait_for(lambda: not rt.database.state.reachable, timeout=20,
                         message="the probe to notice the freeze")
        # From memory, within a second (a timeout fails the test).
        health = requests.get(f"{live_server}/healthz", timeout=1)
        assert health.status_code == 503 and health.json()["database"]["connected"] is False
        banner = browser.get(f"{live_server}/status/banner", timeout=1)
        assert banner.status_code == 200 and "The database is not reachable" in banner.text
        # Every route answers at once, without waiting on the database.
        for endpoint, rule, method in routes(app):
            if from_memory(app, endpoint):
                continue
            answer = requests.request(method, live_server + fill(rule, entry_id), timeout=2,
                                      headers=support.bearer(token), json={"version": 1})
            assert answer.status_code == 503, (method, rule.rule, answer.status_code)
        # A request that began before the probe noticed waits at most its bounds, not the freeze:
        # the check of its pooled connection (1 s) and a connect (2 s) ...
        rt.database.stop()
        rt.database = None
        answer = requests.get(f"{live_server}/api/entries", headers=support.bearer(token), timeout=6)
        assert answer.status_code == 503 and answer.json() == {"error": UNREACHABLE}
        # ... or, on a connection already in use, its statement's 2 s and a second's grace.
        with ThreadPoolExecutor(1) as pool:
            waited = pool.submit(statement_on_a_frozen_server, in_use)
            with pytest.raises(OperationalError, match="did not answer within 3 s"):
                waited.result(timeout=6)
    in_use.close()
    rt.database = DatabaseProbe(rt.settings.database_url).start()
    support.wait_for(lambda: rt.database.state.reachable, message="the probe to see the database again")
    assert requests.get(f"{live_server}/api/entries", headers=support.bearer(token), timeout=10).status_code == 200
    assert browser.get(f"{live_server}/", timeout=10).status_code == 200


def test_the_database_timeouts_are_read_from_the_environment_and_a_bad_one_is_refused():
    from dlq_dashboard.config import ConfigError, load_settings

    settings = load_settings({"DLQ_DB_CONNECT_TIMEOUT": "3s", "DLQ_DB_STATEMENT_TIMEOUT": "1m"})
    assert (settings.database_connect_timeout, settings.database_statement_timeout) == (3.0, 60.0)
    assert (load_settings({}).database_connect_timeout, load_settings({}).database_statement_timeout) == (5.0, 5.0)
    for bad in ("0", "5", "2h", "soon"):
        with pytest.raises(ConfigError, match="DLQ_DB_STATEMENT_TIMEOUT"):
            load_settings({"DLQ_DB_STATEMENT_TIMEOUT": bad})


@pytest.mark.both_databases
def test_healthz_reads_within_its_own_bound_while_the_entries_are_locked(make_app, tmp_path, nats_server,
                                                                         database_url):
    """A lock held by hand on entries held every /healthz for the whole statement timeout (5 s by
    default; a load balancer's check gives up after 1): its reads have the bound of the streams'
    answer now, and what they could not read (the search's lag) is null."""
    app = make_app(settings=support.make_settings(tmp_path, nats_server.url, database_url=database_url,
                                                  database_statement_timeout=120.0))
    rt = runtime_of(app)
    support.dead_letter(app, 1)
    answers: list = []
    with holding_the_entries(rt):
        asking = threading.Thread(target=lambda: answers.append(app.test_client().get("/healthz")))
        asking.start()
        asking.join(60)  # a deadline against the 120 s wait, not a measure
        assert not asking.is_alive(), "/healthz waited on the lock as a page does"
    [answer] = answers
    assert answer.status_code in (200, 503) and "mirror_lag" in answer.get_json()
    if is_postgres(rt):
        assert answer.get_json()["search_lag"] is None
