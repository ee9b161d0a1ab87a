"""The database: SQLite pragmas for a crash-safe mirror, and a versioned schema that keeps data."""

from sqlalchemy import text

from dlq_dashboard.db import MIGRATIONS, create_db_engine, migrate, schema_version, write_transaction


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
        import sqlite3

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


def test_migrate_creates_the_schema_once_and_is_idempotent(tmp_path):
    engine = create_db_engine(f"sqlite:///{tmp_path}/a.sqlite3")
    newest = MIGRATIONS[-1][0]
    assert migrate(engine) == newest
    assert migrate(engine) == newest
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM schema_version")).scalar() == len(MIGRATIONS)


def test_an_upgrade_keeps_the_users_data(tmp_path):
    engine = create_db_engine(f"sqlite:///{tmp_path}/a.sqlite3")
    migrate(engine)
    with write_transaction(engine) as conn:
        conn.execute(text("INSERT INTO mirror_state (stream, epoch, last_seq) VALUES ('DLQ', 'e', 41)"))

    def add_column(conn):
        conn.exec_driver_sql("ALTER TABLE mirror_state ADD COLUMN note TEXT DEFAULT 'kept'")

    upgraded = MIGRATIONS + [(MIGRATIONS[-1][0] + 1, "a later release adds a column", add_column)]
    assert migrate(engine, upgraded) == MIGRATIONS[-1][0] + 1
    with engine.connect() as conn:
        assert conn.execute(text("SELECT last_seq, note FROM mirror_state")).one() == (41, "kept")
        assert schema_version(conn) == MIGRATIONS[-1][0] + 1
