"""The database engine: SQLite tuned for a crash-safe mirror, the two kinds of transaction, and
the timeouts (connect, pool, statement under bounds.py's Bounds)."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.engine import URL, make_url

from ..files import private_sqlite
from ..redaction import without_userinfo
from .bounds import Bounds, bounded, current_bounds
from .json_node import NAME as JSON_NODE, TEXT as VALUE_TEXT, json_node, value_text

log = logging.getLogger(__name__)

#: How long a connection may take to open (PostgreSQL's connect_timeout) and how long a caller
#: waits for a pooled connection, in seconds.
CONNECT_TIMEOUT = 5.0
#: How long bounded work waits for the answer to the check of a pooled connection, in seconds.
PING_BOUND = 1.0
#: SQLite's busy timeout outside bounded work (the mirror's writer, jobs, the CLI), in seconds.
BUSY_TIMEOUT = 30.0


def is_sqlite(engine: Engine) -> bool:
    """True for SQLite engines, which get pragmas, FTS5 and IMMEDIATE transactions."""
    return engine.dialect.name == "sqlite"


def engine_url(url: str) -> URL:
    """The URL with the driver the dashboard uses: psycopg 3 for ``postgresql://`` (and the
    ``postgres://`` some hosts hand out)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def shown_url(url: str | URL) -> str:
    """The URL as it may be printed: no user name or password, the driver as the operator wrote it."""
    try:
        parsed = make_url(url)
    except Exception:  # an URL that does not even parse has no password we could find
        return "(not a database URL)"
    if parsed.drivername == "postgresql+psycopg":
        parsed = parsed.set(drivername="postgresql")
    return without_userinfo(parsed.set(username=None, password=None).render_as_string(hide_password=False))


def create_db_engine(url: str, *, connect_timeout: float = CONNECT_TIMEOUT, pool_size: int = 10,
                     max_overflow: int = 20) -> Engine:
    """Create the engine; for SQLite: WAL, synchronous=FULL, busy_timeout, IMMEDIATE writes;
    for PostgreSQL: psycopg 3, connections checked before use (a restarted server is no error),
    a connect timeout. Work run ``bounded`` gets a statement timeout (see Bounds)."""
    parsed = engine_url(url)
    if parsed.get_backend_name() != "sqlite":
        return _postgresql_engine(parsed, connect_timeout, pool_size, max_overflow)

    if parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
        # Created here with mode 0600 before SQLite opens it, so SQLite's -wal and -shm get it too.
        private_sqlite(parsed.database)
    engine = create_engine(parsed, connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT},
                           pool_timeout=connect_timeout)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        # Let SQLAlchemy, not pysqlite, decide when a transaction begins (the documented
        # recipe), so that writes can begin IMMEDIATE and never fail with SQLITE_BUSY mid-way.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # FULL: a mirror that has moved past a message must not lose it on power loss.
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
        # A key field of a payload holding its key more than once: the last value (json_node.py).
        dbapi_connection.create_function(JSON_NODE, 3, json_node, deterministic=True)
        # A key field's value as text though the payload's bytes are not UTF-8 (json_node.py).
        dbapi_connection.create_function(VALUE_TEXT, 1, value_text, deterministic=True)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection):
        # The busy timeout is the connection's, not the transaction's: set it when this work's
        # bound differs from the one the pooled connection last had (a PRAGMA costs microseconds).
        bounds = current_bounds()
        busy = int((bounds.statement if bounds else BUSY_TIMEOUT) * 1000)
        info = conn.connection.info
        if info.get("busy_timeout") != busy:
            conn.exec_driver_sql(f"PRAGMA busy_timeout={busy}")
            info["busy_timeout"] = busy
        immediate = conn.get_execution_options().get("immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _postgresql_engine(parsed: URL, connect_timeout: float, pool_size: int, max_overflow: int) -> Engine:
    from .bounded_pg import BoundedConnection  # imports psycopg: only for PostgreSQL

    connect_args = {}
    if "connect_timeout" not in parsed.query:  # the URL's own choice wins
        # libpq counts whole seconds, and treats less than 2 as 2.
        connect_args["connect_timeout"] = max(2, round(connect_timeout))
    engine = create_engine(parsed, pool_pre_ping=True, pool_size=pool_size, max_overflow=max_overflow,
                           pool_timeout=connect_timeout, connect_args=connect_args)

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect, _record, cargs, cparams):
        # psycopg's connection with a bound on every wait for the server (bounded_pg.py).
        return BoundedConnection.connect(*cargs, **cparams)

    def bounded_ping(dbapi_connection) -> bool:
        # The check of a pooled connection before use answers in milliseconds when the server
        # is well: under bounds it gets a second, not a statement's bound, so that a request
        # meeting a frozen server gives up after the ping and one connect attempt. The check is
        # the statement_timeout this work wants, set for the session: the transactions of this
        # checkout then need no SET LOCAL of their own, a round trip each (_on_begin).
        bounds = current_bounds()
        timeout = _statement_timeout(bounds)
        if bounds is None:
            return _set_statement_timeout(dbapi_connection, timeout)
        with bounded(Bounds(statement=min(PING_BOUND, bounds.statement), grace=0.0)):
            return _set_statement_timeout(dbapi_connection, timeout)

    engine.dialect.do_ping = bounded_ping

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection):
        # Bounded work (a web request) is cut short by the server: the session's timeout set by
        # the check above, or a SET LOCAL (ended with the transaction) where this work wants
        # another one (a connection just made, a bound changed since the check). The first
        # statement of the transaction, so psycopg opens it first.
        timeout = _statement_timeout(current_bounds())
        if timeout != getattr(conn.connection.dbapi_connection, "statement_timeout_set", None):
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {_setting(timeout)}")

    return engine


def _statement_timeout(bounds: Bounds | None) -> int | None:
    """The statement_timeout in milliseconds for work under ``bounds``; None: the server's own."""
    return int(bounds.statement * 1000) if bounds is not None else None


def _setting(timeout: int | None) -> str:
    return "DEFAULT" if timeout is None else str(timeout)


def _set_statement_timeout(dbapi_connection, timeout: int | None) -> bool:
    """Set a psycopg connection's statement_timeout for its session, outside any transaction (a
    rollback would undo it), and note it on the connection; the pool's check before use."""
    autocommit = dbapi_connection.autocommit
    if not autocommit:
        dbapi_connection.autocommit = True
    dbapi_connection.statement_timeout_set = None  # unknown until the server has answered
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"SET statement_timeout = {_setting(timeout)}")
    finally:
        cursor.close()
        if not autocommit and not dbapi_connection.closed:
            dbapi_connection.autocommit = False
    dbapi_connection.statement_timeout_set = timeout
    return True


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that takes the write lock at its start (BEGIN IMMEDIATE on SQLite)."""
    with engine.connect() as conn:
        conn.execution_options(immediate=True)
        with conn.begin():
            yield conn


#: PostgreSQL's sqlstate for a transaction it aborted to break a deadlock (the victim).
DEADLOCK_DETECTED = "40P01"
#: How many times a write transaction is run when it keeps being a deadlock's victim.
DEADLOCK_ATTEMPTS = 4
_T = TypeVar("_T")


def is_deadlock(exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL aborting this transaction as a deadlock's victim."""
    return isinstance(exc, DBAPIError) and getattr(exc.orig, "sqlstate", None) == DEADLOCK_DETECTED


def retried_write(engine: Engine, work: Callable[[Connection], _T], attempts: int = DEADLOCK_ATTEMPTS) -> _T:
    """``work(conn)`` in a write_transaction, run again when PostgreSQL aborted it as a
    deadlock's victim: rolled back, it had no effect, so ``work`` must do nothing outside the
    database (no NATS) that a second run would repeat. The locks are taken in one order
    (docs/ARCHITECTURE.md); this is the net for an order not foreseen."""
    for attempt in range(1, attempts + 1):
        try:
            with write_transaction(engine) as conn:
                return work(conn)
        except DBAPIError as exc:
            if not is_deadlock(exc) or attempt == attempts:
                raise
            log.warning("a transaction was a deadlock's victim; run again (%d of %d)", attempt + 1, attempts)
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")


@contextmanager
def snapshot_transaction(engine: Engine) -> Iterator[Connection]:
    """A read transaction whose statements all see the database as of its first one: SQLite's
    read transaction is such a snapshot; PostgreSQL's default (read committed) lets each statement
    see what committed meanwhile, so there it is REPEATABLE READ. For a read that adds
    up figures of several statements (/metrics: the entries held plus those purged)."""
    if is_sqlite(engine):
        with read_transaction(engine) as conn:
            yield conn
        return
    with engine.connect() as conn:
        conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    """A read transaction (on SQLite a snapshot: deferred, so it takes no write lock), on the
    connection this thread holds for its reads (``hold_reads``) when it holds one, which no
    other of its transactions is using; else on a connection of its own."""
    conn = _held_connection(engine)
    if conn is None:
        with engine.connect() as conn:
            with conn.begin():
                yield conn
        return
    with conn.begin():
        yield conn


class _HeldReads:
    """The connections one thread keeps for its read transactions, an engine's each."""

    def __init__(self):
        self.thread = threading.get_ident()
        self.connections: dict[Engine, Connection] = {}


_held: ContextVar[_HeldReads | None] = ContextVar("dlq_held_reads", default=None)


def hold_reads() -> None:
    """From now on this thread's read transactions share one connection an engine, checked out
    (and checked by the pool) once, until ``release_reads``: a web request's half-dozen reads
    then cost one checkout, one round trip on PostgreSQL, instead of one each."""
    release_reads()
    _held.set(_HeldReads())


def release_reads() -> None:
    """Return the connections ``hold_reads`` kept to the pool; later reads check out their own."""
    held = _held.get()
    _held.set(None)
    if held is None or held.thread != threading.get_ident():
        return
    for conn in held.connections.values():
        try:
            conn.close()
        except Exception:  # a connection the database dropped: the pool has let it go
            log.debug("returning a held connection failed", exc_info=True)


def _held_connection(engine: Engine) -> Connection | None:
    held = _held.get()
    # A coroutine started from the thread runs on another with a copy of its context: not its.
    if held is None or held.thread != threading.get_ident():
        return None
    conn = held.connections.get(engine)
    if conn is not None and (conn.closed or conn.invalidated):
        del held.connections[engine]
        conn.close()
        conn = None
    if conn is None:
        conn = held.connections[engine] = engine.connect()
    return None if conn.in_transaction() else conn  # a read within a read: a connection of its own


def serial_plans(conn: Connection) -> None:
    """For the rest of ``conn``'s transaction, plans without parallel workers (PostgreSQL; SQLite
    has none): a bounded read of a thousand rows in an index's order is planned as a parallel
    scan when the planner thinks many rows match, and starting the worker costs more than the
    read (a key field's newest 1,000 matches at a million entries: 12 ms against 2)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET LOCAL max_parallel_workers_per_gather = 0")


def dispose_quietly(engine: Engine) -> None:
    """Close every pooled connection (used at shutdown and between tests)."""
    try:
        engine.dispose()
    except Exception:  # pragma: no cover - shutdown path
        log.exception("closing the database failed")
