"""The database engine: SQLite tuned for a crash-safe mirror, and the two kinds of transaction."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

from ..files import private_sqlite
from ..redaction import without_userinfo

log = logging.getLogger(__name__)


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


def create_db_engine(url: str) -> Engine:
    """Create the engine; for SQLite: WAL, synchronous=FULL, busy_timeout, IMMEDIATE writes;
    for PostgreSQL: psycopg 3, connections checked before use (a restarted server is no error)."""
    parsed = engine_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=20)

    if parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
        # Created here with mode 0600 before SQLite opens it, so SQLite's -wal and -shm get it too.
        private_sqlite(parsed.database)
    engine = create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        # Let SQLAlchemy, not pysqlite, decide when a transaction begins (the documented
        # recipe), so that writes can begin IMMEDIATE and never fail with SQLITE_BUSY mid-way.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # FULL: a mirror that has moved past a message must not lose it on power loss.
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection):
        immediate = conn.get_execution_options().get("immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that takes the write lock at its start (BEGIN IMMEDIATE on SQLite)."""
    with engine.connect() as conn:
        conn.execution_options(immediate=True)
        with conn.begin():
            yield conn


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    """A read transaction (on SQLite a snapshot: deferred, so it takes no write lock)."""
    with engine.connect() as conn:
        with conn.begin():
            yield conn


def dispose_quietly(engine: Engine) -> None:
    """Close every pooled connection (used at shutdown and between tests)."""
    try:
        engine.dispose()
    except Exception:  # pragma: no cover - shutdown path
        log.exception("closing the database failed")
