"""The database: SQLite pragmas for a crash-safe mirror, and migrations that are the only way the
schema changes and keep every row."""

import shutil
import sqlite3
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from dlq_dashboard.db.engine import create_db_engine, write_transaction
from dlq_dashboard.db.migrate import current_revision, head, migrate, revisions
from dlq_dashboard.db.models import Base
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.entries.store import Store

from . import support

V1_RELEASE = Path(__file__).parent / "data" / "v1-release.sqlite3"
# What SQLite's full-text index adds beside the models' tables.
FTS_TABLES = {"entries_fts", "entries_fts_config", "entries_fts_content", "entries_fts_data",
              "entries_fts_docsize", "entries_fts_idx"}


def triggers(engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'trigger'").scalars())


def indexed_rows(engine) -> int:
    with engine.connect() as conn:
        return conn.exec_driver_sql("SELECT COUNT(*) FROM entries_fts").scalar()


def test_sqlite_runs_in_wal_mode_with_full_sync_and_a_busy_timeout(tmp_path):
    engine = create_db_engine(f"sqlite:///{tmp_path}/a.sqlite3")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def test_write_transactions_take_the_write_lock_at_their_start(tmp_path):
    engine = create_db_engine(f"sqlite:///{tmp_path}/a.sqlite3")
    migrate(engine)
    with write_transaction(engine) as conn:
        # In an IMMEDIATE transaction SQLite already holds the RESERVED lock: another
        # connection cannot begin one (it would wait for busy_timeout; 0 here).
        other = sqlite3.connect(f"{tmp_path}/a.sqlite3", timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            locked = False
        except sqlite3.OperationalError as exc:
            locked = "locked" in str(exc)
        finally:
            other.close()
        conn.execute(text("SELECT 1"))
    assert locked


def test_migrate_brings_an_empty_database_to_the_newest_revision_once(tmp_path):
    engine = create_db_engine(f"sqlite:///{tmp_path}/a.sqlite3")
    assert revisions() == ["0001", "0002"]
    assert migrate(engine) == head() == "0002"
    assert migrate(engine) == "0002"
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all() == ["0002"]


def test_the_migrated_schema_is_exactly_what_the_models_declare(tmp_path):
    # Migrations are the only way the schema changes: a model changed without a revision
    # (or a revision that differs from its model) shows up here as a difference.
    engine = create_db_engine(f"sqlite:///{tmp_path}/a.sqlite3")
    migrate(engine)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={
            "include_name": lambda name, kind, parent: not (kind == "table" and name in FTS_TABLES)})
        assert compare_metadata(context, Base.metadata) == []


def test_a_database_of_the_first_release_is_upgraded_with_every_row_kept(tmp_path):
    path = tmp_path / "dlq.sqlite3"
    shutil.copy(V1_RELEASE, path)
    before = {table: sqlite3.connect(path).execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
              for table in ("entries", "events", "actions", "republishes", "users", "api_tokens", "entry_groups")}
    assert before["entries"] == 7 and before["events"] == 2 and before["entry_groups"] == 7

    engine = create_db_engine(f"sqlite:///{path}")
    assert migrate(engine) == head()
    with engine.connect() as conn:
        assert current_revision(conn) == head()
        for table, count in before.items():
            assert conn.exec_driver_sql(f"SELECT COUNT(*) FROM {table}").scalar() == count, table
        payload = conn.exec_driver_sql("SELECT payload FROM entries WHERE dlq_seq = 6").scalar()
    assert payload == b"\xff\xfe not utf-8"
    # Its rows read as they did, and search still finds them.
    store = Store(engine)
    assert [e.dlq_seq for e in store.list_entries(EntryFilter(q="price")).entries] == [5, 4, 3, 2, 1]
    assert store.get_entry(7).history[0]["kind"] == "nak"
    # A new entry is indexed for search once, by the mirror (no trigger does it twice).
    support.dead_letter(engine, 7, payload=b'{"note": "after the upgrade"}')
    assert indexed_rows(engine) == 8
    assert len(store.list_entries(EntryFilter(q="upgrade")).entries) == 1


def test_a_database_at_revision_0001_holding_data_is_upgraded_keeping_it(tmp_path):
    engine = create_db_engine(f"sqlite:///{tmp_path}/a.sqlite3")
    assert migrate(engine, "0001") == "0001"
    assert "entries_fts_insert" in triggers(engine)  # how v1 indexed new entries
    assert not inspect(engine).has_table("entry_groups")
    # v1 wrote entries through its insert trigger: one row in the index each.
    with write_transaction(engine) as conn:
        conn.exec_driver_sql(
            "INSERT INTO entries (status, version, dlq_stream, dlq_epoch, dlq_seq, original_subject, received_at, "
            "headers, payload, payload_available, sources, notes, error) VALUES ('open', 1, 'DLQ', 'e1', 1, "
            "'orders.created', '2026-11-29 10:00:00.000000', '{}', X'7B7D', 1, 'dlq', '[]', 'price is a string')")
        conn.exec_driver_sql("INSERT INTO mirror_state (stream, epoch, last_seq) VALUES ('DLQ', 'e1', 1)")

    assert migrate(engine) == "0002"
    assert "entries_fts_insert" not in triggers(engine)
    names = {index["name"] for index in inspect(engine).get_indexes("entries")}
    assert {"ix_entries_advisory_only", "ix_entries_status_reason", "ix_entries_dlq_ref"} <= names
    store = Store(engine)
    assert [g.count for g in store.groups(EntryFilter())] == [1]
    assert store.list_entries(EntryFilter(q="price")).entries[0].dlq_seq == 1
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT last_seq FROM mirror_state").scalar() == 1
    support.dead_letter(engine, 2)
    assert indexed_rows(engine) == 2
