"""The database engine (SQLite tuned for a crash-safe mirror) and the versioned schema."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url

from .models import Base

log = logging.getLogger(__name__)


def is_sqlite(engine: Engine) -> bool:
    """True for SQLite engines, which get pragmas, FTS5 and IMMEDIATE transactions."""
    return engine.dialect.name == "sqlite"


def create_db_engine(url: str) -> Engine:
    """Create the engine; for SQLite: WAL, synchronous=FULL, busy_timeout, IMMEDIATE writes."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)

    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

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
    """A read-only snapshot (a deferred transaction)."""
    with engine.connect() as conn:
        with conn.begin():
            yield conn


# --- the versioned schema ------------------------------------------------------------------
# Each migration takes a connection inside the upgrade transaction. Append, never edit one
# that has been released: a user's database is at some version and must reach the newest.

def _v1_baseline(conn: Connection) -> None:
    Base.metadata.create_all(conn)
    if conn.dialect.name == "sqlite":
        # A full-text index over subject, error and payload text; rowid = entries.id.
        conn.exec_driver_sql(
            "CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5("
            "subject, error, payload, tokenize='unicode61 remove_diacritics 2')"
        )
        # New entries are indexed by ingest.index_new_entries in the transaction that inserts
        # them (one set-based INSERT a batch: twice the rows per second of a per-row trigger,
        # measured); triggers keep the index right when an entry changes or goes.
        # Only the first 64 KiB of a payload is indexed: enough to find it, bounded in size.
        indexed = ("new.original_subject, new.error, "
                   "CASE WHEN new.payload_available THEN substr(CAST(new.payload AS TEXT), 1, 65536) END")
        conn.exec_driver_sql(
            "CREATE TRIGGER IF NOT EXISTS entries_fts_update AFTER UPDATE OF original_subject, error, payload "
            "ON entries BEGIN DELETE FROM entries_fts WHERE rowid = old.id; "
            f"INSERT INTO entries_fts(rowid, subject, error, payload) VALUES (new.id, {indexed}); END")
        conn.exec_driver_sql(
            "CREATE TRIGGER IF NOT EXISTS entries_fts_delete AFTER DELETE ON entries BEGIN "
            "DELETE FROM entries_fts WHERE rowid = old.id; END")


MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "baseline: entries, events, audit, republishes, jobs, users, tokens, mirror state", _v1_baseline),
]


def schema_version(conn: Connection) -> int:
    """The version the database is at (0 for an empty database)."""
    conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute(text("SELECT MAX(version) FROM schema_version")).scalar()
    return int(row or 0)


def migrate(engine: Engine, migrations=None) -> int:
    """Bring the schema to the newest version, keeping all data; return the version reached."""
    migrations = MIGRATIONS if migrations is None else migrations
    with write_transaction(engine) as conn:
        current = schema_version(conn)
        for version, description, apply in migrations:
            if version <= current:
                continue
            log.info("upgrading the database schema to version %d: %s", version, description)
            apply(conn)
            conn.execute(text("INSERT INTO schema_version (version) VALUES (:v)"), {"v": version})
            current = version
    return current


def dispose_quietly(engine: Engine) -> None:
    """Close every pooled connection (used at shutdown and between tests)."""
    try:
        engine.dispose()
    except Exception:  # pragma: no cover - shutdown path
        log.exception("closing the database failed")
