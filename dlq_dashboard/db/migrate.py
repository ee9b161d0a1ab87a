"""Bring a database to the newest schema with the Alembic revisions in ``migrations/versions``.

Migrations are the only way the schema changes: nothing is created at query time. Each start
runs :func:`migrate`, which applies what is missing in one write transaction; two processes
starting at once migrate one after the other (SQLite's write lock, PostgreSQL's advisory lock).
A database made before Alembic was used (it has ``schema_version`` 1) is taken as revision
0001 and upgraded from there. A database at a revision this code does not know was upgraded by
a newer release: this one refuses to run on it rather than misread it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import InterfaceError, OperationalError

from ..config import ConfigError
from ..redaction import scrub
from .engine import shown_url, write_transaction

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")
#: The revision of the schema before Alembic: ``schema_version`` 1 of the first release.
LEGACY_BASELINE = "0001"
# Any constant: the key of the PostgreSQL advisory lock two starting replicas queue on.
_MIGRATION_LOCK = 0x444C51


class SchemaTooNew(ConfigError):
    """The database was upgraded by a newer release than this one."""


@lru_cache(maxsize=1)
def _script() -> ScriptDirectory:
    # Reading the revision files once a process: create_app runs migrate() at every start.
    return ScriptDirectory(str(MIGRATIONS))


def head() -> str:
    """The newest revision this code knows."""
    return _script().get_current_head()


def revisions() -> list[str]:
    """Every revision, oldest first."""
    return [r.revision for r in reversed(list(_script().walk_revisions()))]


def current_revision(conn: Connection) -> str | None:
    """The revision the database is at (None for an empty database)."""
    return MigrationContext.configure(conn).get_current_revision()


def _config(conn: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn
    return config


def _legacy_version(conn: Connection) -> int:
    if not inspect(conn).has_table("schema_version"):
        return 0
    return int(conn.execute(text("SELECT MAX(version) FROM schema_version")).scalar() or 0)


@contextmanager
def _migrating(engine: Engine) -> Iterator[Connection]:
    """The transaction the revisions run in (taking the write lock at its start). On SQLite its
    connection checks no foreign key until the commit: a revision that changes a table SQLite
    cannot ALTER rebuilds it (Alembic's batch mode: a copy, DROP TABLE, a rename), and the DROP of
    users failed ("FOREIGN KEY constraint failed") under the sessions that point into it. The keys
    are checked once before the commit instead, as SQLite's own procedure for such a change does,
    and the connection checks them again afterwards."""
    if engine.dialect.name != "sqlite":
        with write_transaction(engine) as conn:
            yield conn
        return
    with engine.connect() as conn:
        raw = conn.connection.driver_connection  # the pragma does nothing inside a transaction
        raw.execute("PRAGMA foreign_keys=OFF")
        try:
            conn.execution_options(immediate=True)
            with conn.begin():
                yield conn
                broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
                if broken:
                    raise RuntimeError(f"the upgrade would leave rows whose keys name no row: {broken[:5]}")
        finally:
            raw.execute("PRAGMA foreign_keys=ON")


def migrate(engine: Engine, target: str = "head") -> str:
    """Upgrade the database to ``target`` (the newest revision by default), keeping all data;
    return the revision reached. ConfigError (one line naming DATABASE_URL) when the database
    cannot be reached or is newer than this code."""
    wanted = head() if target == "head" else target
    try:
        with _migrating(engine) as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
            current = current_revision(conn)
            if current is not None and current not in revisions():
                raise SchemaTooNew(
                    f"DATABASE_URL={shown_url(engine.url)!r} is at schema revision {current}, which this "
                    f"release does not know (it knows {', '.join(revisions())}): a newer release upgraded it; "
                    "run that release here too")
            if current == wanted:
                return current
            config = _config(conn)
            if current is None and _legacy_version(conn) >= 1:
                log.info("the database predates revision numbers: taking it as revision %s", LEGACY_BASELINE)
                command.stamp(config, LEGACY_BASELINE)
                current = LEGACY_BASELINE
            command.upgrade(config, target)
            reached = current_revision(conn)
    except (OperationalError, InterfaceError) as exc:
        # Connecting failed (refused, unknown host, bad password, no such database, a file that
        # cannot be opened): the operator's setting, said in one line, not a traceback.
        reason = scrub(str(exc.orig).strip().splitlines()[0]) if exc.orig else type(exc).__name__
        raise ConfigError(f"DATABASE_URL={shown_url(engine.url)!r} cannot be used: {reason}") from None
    if current is None:
        log.info("the database schema is at revision %s (a new database)", reached)
    else:  # an upgrade says so, from which revision, and which it ran (their files in db/migrations/versions)
        log.info("the database schema was upgraded from revision %s to %s (ran %s)", current, reached,
                 ", ".join(_revisions_between(current, reached)))
    return reached


def _revisions_between(older: str, newer: str) -> list[str]:
    """The revisions after ``older`` up to ``newer``, oldest first."""
    return [step.revision for step in reversed(list(_script().iterate_revisions(newer, older))) if step]

