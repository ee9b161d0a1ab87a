"""The database: SQLite pragmas for a crash-safe mirror, and migrations that are the only way the
schema changes and keep every row."""

import importlib.util
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import func, inspect, select, text, update

from dlq_dashboard.config import ConfigError
from dlq_dashboard.db.engine import create_db_engine, read_transaction, serial_plans, write_transaction
from dlq_dashboard.db import regroup
from dlq_dashboard.db.counts import ARRIVALS, GROUPS, Change, count_changes, group_ids
from dlq_dashboard.db.migrate import MIGRATIONS, current_revision, head, migrate, revisions
from dlq_dashboard.db.models import Base, Entry, Event
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.entries.store import Store
from dlq_dashboard.entries.tallies import Tallies
from dlq_dashboard.ingest.grouping import GROUPING_VERSION, error_group
from dlq_dashboard.ingest.parse import Advisory
from dlq_dashboard.ingest.writes import StreamMessage, ingest_advisory_batch, ingest_dlq_batch
from dlq_dashboard.times import utcnow
from dlq_dashboard.nats.server import free_port

from . import support
from .test_tallies import kept, truth

# The migrations' own tests: every database_url here starts empty (not the migrated template).
pytestmark = pytest.mark.fresh_database

ROOT = Path(__file__).resolve().parent.parent
V1_RELEASE = ROOT / "tests" / "data" / "v1-release.sqlite3"
# What SQLite's full-text index adds beside the models' tables.
FTS_TABLES = {"entries_fts", "entries_fts_config", "entries_fts_content", "entries_fts_data",
              "entries_fts_docsize", "entries_fts_idx"}


def triggers(engine) -> set[str]:
    if engine.dialect.name != "sqlite":
        return set()
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


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_transaction_may_ask_for_plans_without_parallel_workers_for_itself_alone(database_url):
    engine = create_db_engine(database_url, pool_size=1, max_overflow=0)  # one connection: the same next time
    try:
        with read_transaction(engine) as conn:
            before = conn.exec_driver_sql("SHOW max_parallel_workers_per_gather").scalar()
            serial_plans(conn)
            assert conn.exec_driver_sql("SHOW max_parallel_workers_per_gather").scalar() == "0" != before
        with read_transaction(engine) as conn:
            assert conn.exec_driver_sql("SHOW max_parallel_workers_per_gather").scalar() == before
    finally:
        engine.dispose()


@pytest.mark.both_databases
def test_migrate_brings_an_empty_database_to_the_newest_revision_once(database_url):
    engine = create_db_engine(database_url)
    assert revisions() == ["0001", "0002", "0003", "0004", "0005", "0006", "0007", "0009", "0010", "0011", "0012",
                           "0014", "0015", "0016", "0017", "0018", "0019", "0020", "0021", "0022", "0023", "0024",
                           "0025", "0026", "0027", "0028", "0029", "0030", "0031", "0032", "0033", "0034"]
    assert migrate(engine) == head() == "0034"
    assert migrate(engine) == "0034"
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all() == ["0034"]
    engine.dispose()


def test_an_upgrade_says_from_which_revision_and_which_it_ran(database_url, caplog):
    # An upgrade logged what a new database logs ("the database schema is at revision 0030"):
    # nothing said it upgraded, from where, or which revisions ran.
    engine = create_db_engine(database_url)
    with caplog.at_level("INFO", logger="dlq_dashboard.db.migrate"):
        migrate(engine, "0028")
        migrate(engine)
        migrate(engine)  # at the newest already: nothing said
    said = [r.getMessage() for r in caplog.records if r.name == "dlq_dashboard.db.migrate"]
    assert said == ["the database schema is at revision 0028 (a new database)",
                    f"the database schema was upgraded from revision 0028 to {head()} "
                    f"(ran {', '.join(revisions()[revisions().index('0028') + 1:])})"], said
    engine.dispose()


def _beside_the_models(name, kind, parent) -> bool:
    # The full-text index lives beside the models: SQLite's FTS5 tables, PostgreSQL's entry_search.
    return not ((kind == "table" and name in FTS_TABLES | {"entry_search"})
                or (kind == "index" and name == "ix_entry_search_search"))


@pytest.mark.both_databases
def test_intents_and_bulk_items_are_written_without_a_foreign_key_check_a_row(database_url):
    # Checked a row at a time, the keys were a tenth of a bulk republish's database time
    # (revision 0018); on PostgreSQL an item's result is written beside it (fillfactor 50).
    engine = create_db_engine(database_url)
    migrate(engine)
    inspector = inspect(engine)
    assert inspector.get_foreign_keys("republishes") == []
    assert inspector.get_foreign_keys("job_items") == []
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            options = conn.exec_driver_sql("SELECT reloptions FROM pg_class WHERE relname = 'job_items'").scalar()
        assert "fillfactor=50" in options
    engine.dispose()


@pytest.mark.both_databases
def test_the_migrated_schema_is_exactly_what_the_models_declare(database_url):
    # Migrations are the only way the schema changes: a model changed without a revision
    # (or a revision that differs from its model) shows up here as a difference.
    engine = create_db_engine(database_url)
    migrate(engine)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_name": _beside_the_models})
        assert compare_metadata(context, Base.metadata) == []
    engine.dispose()


@pytest.mark.both_databases
def test_a_database_upgraded_by_a_newer_release_is_refused_in_one_line(database_url):
    engine = create_db_engine(database_url)
    migrate(engine)
    with write_transaction(engine) as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0099'")
    with pytest.raises(ConfigError) as refused:
        migrate(engine)
    message = str(refused.value)
    assert message.startswith("DATABASE_URL=") and "revision 0099" in message and "\n" not in message
    engine.dispose()


@pytest.mark.slow
def test_a_postgresql_url_that_cannot_connect_stops_the_start_in_one_line_without_user_or_password(tmp_path):
    closed = free_port()
    url = f"postgresql://dlq:s3cret@127.0.0.1:{closed}/dlq"
    result = subprocess.run([sys.executable, "app.py", "--port", str(free_port())], cwd=ROOT, capture_output=True,
                            text=True, timeout=60,
                            env={**os.environ, "DATABASE_URL": url, "NATS_URL": "nats://127.0.0.1:1",
                                 "SECRET_KEY": "x", "DLQ_CAPTURE_ADVISORIES": "false"})
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: DATABASE_URL='postgresql://127.0.0.1:"), result.stderr
    assert "cannot be used" in lines[-1] and "Traceback" not in result.stderr and "s3cret" not in result.stderr


def test_a_database_of_the_first_release_is_upgraded_with_every_row_kept(tmp_path):
    path = tmp_path / "dlq.sqlite3"
    shutil.copy(V1_RELEASE, path)
    before = {table: sqlite3.connect(path).execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
              for table in ("entries", "events", "actions", "republishes", "users", "api_tokens")}
    assert before["entries"] == 7 and before["events"] == 2

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
    # Its entries are grouped as new ones are, and the old cache of groups is gone.
    groups = {g.key: g.count for g in Tallies(store).groups(EntryFilter())[0]}
    assert groups["/price: … is not of type 'number'"] == 5 and sum(groups.values()) == 7
    assert not inspect(engine).has_table("entry_groups")
    # A new entry is indexed for search once, by the mirror (no trigger does it twice).
    support.dead_letter(engine, 7, payload=b'{"note": "after the upgrade"}')
    assert indexed_rows(engine) == 8
    assert len(store.list_entries(EntryFilter(q="upgrade")).entries) == 1


@pytest.mark.both_databases
def test_a_database_at_revision_0001_holding_data_is_upgraded_keeping_it(database_url):
    engine = create_db_engine(database_url)
    sqlite = engine.dialect.name == "sqlite"
    assert migrate(engine, "0001") == "0001"
    assert not sqlite or "entries_fts_insert" in triggers(engine)  # how v1 indexed new entries
    assert not inspect(engine).has_table("entry_groups")
    with write_transaction(engine) as conn:
        conn.execute(text(
            "INSERT INTO entries (status, version, dlq_stream, dlq_epoch, dlq_seq, original_subject, received_at, "
            "headers, payload, payload_available, sources, notes, error, schema_errors) VALUES ('open', 1, 'DLQ', "
            "'e1', :seq, 'orders.created', :at, '{}', :payload, :yes, 'dlq', '[]', :error, :schema)"), [
            {"seq": 1, "at": datetime(2026, 11, 29, 10), "payload": b"{}", "yes": True, "error": "price is a string",
             "schema": None},
            {"seq": 2, "at": datetime(2026, 11, 29, 10), "payload": b'{"price": "1"}', "yes": True, "error": None,
             "schema": json.dumps([{"path": "/price", "message": "'1' is not of type 'number'"}])}])
        conn.execute(text("INSERT INTO mirror_state (stream, epoch, last_seq) VALUES ('DLQ', 'e1', 2)"))

    assert migrate(engine) == head()
    assert not triggers(engine) or "entries_fts_insert" not in triggers(engine)
    names = {index["name"] for index in inspect(engine).get_indexes("entries")}
    assert {"ix_entries_advisory_only", "ix_entries_replay_of", "ix_entries_dlq_ref", "ix_entries_group_id"} <= names
    assert "ix_entries_status_reason" not in names  # 0019: /metrics reads the kept counts
    store = Store(engine)
    # 0003 grouped the entries v1 stored.
    assert sorted((g.key, g.count) for g in Tallies(store).groups(EntryFilter())[0]) == [
        ("/price: … is not of type 'number'", 1), ("price is a string", 1)]
    assert store.list_entries(EntryFilter(q="price")).entries[-1].dlq_seq == 1
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT last_seq FROM mirror_state").scalar() == 2
    support.dead_letter(engine, 3, payload=b'{"note": "after the upgrade"}')
    if sqlite:
        assert indexed_rows(engine) == 3
    assert [e.dlq_seq for e in store.list_entries(EntryFilter(q="upgrade")).entries] == [3]
    engine.dispose()


@pytest.mark.both_databases
def test_a_database_at_revision_0030_holding_entries_is_upgraded_to_keep_each_message_within_its_source(
        database_url):
    # The entries' key (stream, epoch, sequence) left the source out: a source reading a copy of
    # another's stream store (the same creation time) had every message "stored already".
    engine = create_db_engine(database_url)
    assert migrate(engine, "0030") == "0030"

    def dead_letters(source: str, *seqs: int, note: str = "before") -> int:
        return ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(
            seq, "dlq.orders.created", {"Dlq-Original-Subject": "orders.created", "Dlq-Reason": "fatal"},
            b'{"note": "%s %d"}' % (note.encode(), seq), utcnow()) for seq in seqs], source=source)

    assert dead_letters("eps", 1, 2) == 2
    assert dead_letters("zeta", 1) == 0  # the defect, at revision 0030

    def advisory(source: str, position: int) -> int:
        told = Advisory("terminated", "adv-1", utcnow(), "ORDERS", "billing", 7, 1, "refused", {})
        return ingest_advisory_batch(engine, "DLQ_ADVISORIES", "a1", [(told, None, "gone")], position, source=source)

    # An advisory stored at 0030, under the key 0030's code gave it.
    assert advisory("eps", 1) == 1
    with engine.begin() as conn:
        conn.execute(update(Event).values(source_key="advisory:adv-1"))
    columns = (Entry.id, Entry.source, Entry.dlq_stream, Entry.dlq_epoch, Entry.dlq_seq, Entry.status, Entry.payload)
    with engine.connect() as conn:
        kept = conn.execute(select(*columns).order_by(Entry.id)).all()
    made_before = triggers(engine)

    assert migrate(engine) == head()
    with engine.connect() as conn:
        assert conn.execute(select(*columns).order_by(Entry.id)).all() == kept
    assert triggers(engine) == made_before  # SQLite: the search index's and the key fields' triggers
    [key] = [c for c in inspect(engine).get_unique_constraints("entries") if c["name"] == "uq_entries_dlq_message"]
    assert key["column_names"] == ["source", "dlq_stream", "dlq_epoch", "dlq_seq"]
    assert dead_letters("zeta", 1, 2, note="upgraded") == 2
    assert dead_letters("eps", 1, 2, 3, note="upgraded") == 1  # 1 and 2 are stored already
    with engine.connect() as conn:
        assert Counter(conn.execute(select(Entry.source, Entry.dlq_seq)).all()) == Counter(
            {("eps", None): 1, ("eps", 1): 1, ("eps", 2): 1, ("eps", 3): 1, ("zeta", 1): 1, ("zeta", 2): 1})
    store = Store(engine)
    assert sorted((e.source, e.dlq_seq) for e in store.list_entries(EntryFilter(q="upgraded")).entries) == [
        ("eps", 3), ("zeta", 1), ("zeta", 2)]
    # The advisory's key names its source, so the advisory stream read again stores nothing twice.
    with engine.connect() as conn:
        assert conn.execute(select(Event.source, Event.source_key)).all() == [("eps", "advisory:eps:adv-1")]
    assert advisory("eps", 2) == 0
    with engine.connect() as conn:
        assert conn.execute(select(Event.source_key)).scalars().all() == ["advisory:eps:adv-1"]
        assert conn.execute(select(func.count()).select_from(Entry).where(Entry.sources == "advisory")).scalar() == 1
    engine.dispose()


@pytest.mark.both_databases
def test_a_database_holding_user_names_equal_in_any_case_is_upgraded_keeping_every_user_and_their_sign_in(
        database_url):
    # Before revision 0026 a local user could be named as a single sign-on user in another case
    # ("OPS1@example.com" after "ops1@example.com"), and "viewer1" beside "Viewer1".
    from werkzeug.security import generate_password_hash

    from dlq_dashboard import accounts
    from dlq_dashboard.scopes import Grant

    engine = create_db_engine(database_url)
    assert migrate(engine, "0025") == "0025"
    password = generate_password_hash("a good password")
    with write_transaction(engine) as conn:
        conn.execute(text("INSERT INTO users (id, name, password_hash, role, disabled, created_at, via, oidc_subject) "
                          "VALUES (:id, :name, :hash, 'viewer', :no, :at, :via, :subject)"), [
            {"id": user_id, "name": name, "hash": hashed, "via": via, "subject": subject, "no": False,
             "at": datetime(2026, 1, 1)}
            for user_id, name, hashed, via, subject in [
                (1, "ops1@example.com", accounts.NO_PASSWORD, "oidc", "iss ops1"),
                (2, "OPS1@example.com", password, "password", None), (3, "Viewer1", password, "password", None),
                (4, "viewer1", password, "password", None), (5, "VIEWER1", password, "password", None)]])
        # Sessions hold a key into users, which SQLite's rebuild of the table (revision 0026)
        # dropped under it: the upgrade failed ("FOREIGN KEY constraint failed") where anyone
        # had ever signed in.
        conn.execute(text("INSERT INTO sessions (id, user_id, created_at, last_seen_at, via) "
                          "VALUES (:id, :user, :at, :at, 'password')"),
                     [{"id": f"s{user_id}", "user": user_id, "at": datetime(2026, 1, 2)} for user_id in (2, 3)])

    assert migrate(engine) == head()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT id, user_id FROM sessions ORDER BY id")).all() == [("s2", 2), ("s3", 3)]
        if conn.dialect.name == "sqlite":  # the keys still hold, and are still checked
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    with engine.connect() as conn:
        keys = conn.execute(text("SELECT name, name_key FROM users ORDER BY id")).all()
    assert [tuple(k) for k in keys] == [("ops1@example.com", "ops1@example.com"),
                                        ("OPS1@example.com", "ops1@example.com:2"), ("Viewer1", "viewer1"),
                                        ("viewer1", "viewer1:4"), ("VIEWER1", "viewer1:5")]
    # Each signs in as before: the first by single sign-on, whatever was made after them, the
    # others with their passwords.
    assert accounts.sign_in_oidc_user(engine, "iss ops1", "ops1@example.com", (Grant("viewer"),)).id == 1
    assert [accounts.verify_password(engine, name, "a good password").id
            for name in ("OPS1@example.com", "Viewer1", "viewer1", "VIEWER1")] == [2, 3, 4, 5]
    # No new user takes such a name, in any case.
    with pytest.raises(accounts.AccountError, match="is taken: user 'Viewer1' holds it"):
        accounts.create_user(engine, "vIEWER1", "a good password", "viewer")
    engine.dispose()


@pytest.mark.both_databases
def test_a_single_sign_on_user_is_upgraded_with_every_grant_of_their_newest_session(database_url):
    # Before revision 0028 the user row kept only the highest grant; their sessions kept them all.
    from dlq_dashboard import accounts
    from dlq_dashboard.scopes import Grant, Scope

    engine = create_db_engine(database_url)
    assert migrate(engine, "0027") == "0027"
    users = [(1, "mia@example.com", "operator", "oidc", '["orders.>"]'), (2, "ned@example.com", "viewer", "oidc", None),
             (3, "ann", "viewer", "password", None)]
    older, both = '[{"role":"operator","scopes":["orders.>"]}]', ('[{"role":"operator","scopes":["orders.>"]},'
                                                                 '{"role":"viewer","scopes":["billing.>"]}]')
    with write_transaction(engine) as conn:
        conn.execute(text("INSERT INTO users (id, name, name_key, password_hash, role, disabled, created_at, via, "
                          "scopes) VALUES (:id, :name, :name, 'x', :role, :no, :at, :via, :scopes)"), [
            {"id": i, "name": name, "role": role, "via": via, "scopes": scopes, "no": False, "at": datetime(2026, 1, 1)}
            for i, name, role, via, scopes in users])
        conn.execute(text("INSERT INTO sessions (id, user_id, created_at, last_seen_at, via, grants) "
                          "VALUES (:id, :user, :at, :at, :via, :grants)"), [
            {"id": "s1", "user": 1, "at": datetime(2026, 1, 2), "via": "oidc", "grants": older},
            {"id": "s2", "user": 1, "at": datetime(2026, 1, 3), "via": "oidc", "grants": both},
            {"id": "s3", "user": 3, "at": datetime(2026, 1, 3), "via": "password", "grants": None}])

    assert migrate(engine) == head()
    shown = {u.name: u.given for u in accounts.list_users(engine)}
    assert shown == {"mia@example.com": (Grant("operator", (Scope("orders.>"),)), Grant("viewer", (Scope("billing.>"),))),
                     # No session left to read: the row's one grant, until the next sign-in.
                     "ned@example.com": (Grant("viewer"),), "ann": (Grant("viewer"),)}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT grants FROM users ORDER BY id")).scalars().all() == [both, None, None]
    engine.dispose()


@pytest.mark.both_databases
def test_key_fields_stored_by_a_repeated_keys_first_value_are_filled_again_by_its_last(database_url, monkeypatch):
    # Before revision 0029 SQLite stored a repeated key's first value (json_extract); the upgrade
    # reads again the entries whose payload writes a token of a key field twice.
    from dlq_dashboard.ingest.key_fields import record_key_fields
    from dlq_dashboard.masking import Mask

    engine = create_db_engine(database_url)
    assert migrate(engine, "0028") == "0028"
    record_key_fields(engine, (("Customer", "/customer/id"),))
    payloads = [b'{"customer": {"id": "A"}, "customer": {"id": "B"}}', b'{"customer": {"id": "C"}}',
                b'{"customer": {"id": "D", "id": "E"}}']
    # Stored as the code before revision 0032 stored them: without entries.payload_opaque (0032's).
    monkeypatch.setattr(Mask, "hides_whole", staticmethod(lambda payload: False))
    ids = [support.dead_letter(engine, seq, payload=p) for seq, p in enumerate(payloads, start=1)]
    monkeypatch.undo()
    with write_transaction(engine) as conn:  # as the older reading stored them
        conn.execute(text("UPDATE entry_fields SET value = 'A' WHERE entry_id = :id"), {"id": ids[0]})
        conn.execute(text("UPDATE entry_fields SET value = 'D' WHERE entry_id = :id"), {"id": ids[2]})
    assert migrate(engine) == head()
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT entry_id, value FROM entry_fields ORDER BY entry_id")).all()
    # PostgreSQL read the last value already: the revision leaves its values as they are.
    expected = ["B", "C", "E"] if engine.dialect.name == "sqlite" else ["A", "C", "D"]
    assert [tuple(r) for r in stored] == list(zip(ids, expected))
    with engine.connect() as conn:  # and revision 0032 marks the payloads DLQ_MASK hides whole
        assert conn.execute(select(Entry.payload_opaque).order_by(Entry.id)).scalars().all() == [True, False, True]
    engine.dispose()


# --- regrouping when the grouping rules change ------------------------------------------------------

# Entries as the first release grouped them (its key last): "'vat_rate'" and "'currency'" were one
# group while each tenant was a group of its own, and each array index too.
OLD_ROWS = [
    ("orders.created", "fatal", "KeyError: 'vat_rate' for tenant t1", None, "KeyError: '…' for tenant t1"),
    ("orders.created", "fatal", "KeyError: 'vat_rate' for tenant t2", None, "KeyError: '…' for tenant t2"),
    ("orders.created", "fatal", "KeyError: 'currency' for tenant t1", None, "KeyError: '…' for tenant t1"),
    ("orders.created", "schema_invalid", None, [{"path": "/items/0/price", "message": "'x' is not of type 'number'"}],
     "/items/0/price: … is not of type 'number'"),
    ("orders.created", "schema_invalid", None, [{"path": "/items/3/price", "message": "'7' is not of type 'number'"}],
     "/items/3/price: … is not of type 'number'"),
    ("payments.captured", "fatal", "disk full", None, "disk full"),
]


@pytest.mark.both_databases
def test_entries_grouped_by_older_rules_are_regrouped_with_counts_equal_to_a_recount(database_url, monkeypatch):
    monkeypatch.setattr(regroup, "BATCH", 4)  # several chunks, a group split across them
    engine = create_db_engine(database_url)
    assert migrate(engine, "0003") == "0003"
    rnd = random.Random(4)
    start = datetime(2026, 11, 29, 10)
    with write_transaction(engine) as conn:
        rows = []
        for seq in range(1, 41):
            subject, reason, error, schema, old_key = OLD_ROWS[seq % len(OLD_ROWS)]
            rows.append({"seq": seq, "subject": subject, "reason": reason, "error": error,
                         "schema": json.dumps(schema) if schema else None, "old_key": old_key,
                         "status": rnd.choice(["open", "open", "republished", "closed"]),
                         "at": start + timedelta(minutes=rnd.randrange(0, 300))})
        ids = group_ids(conn, {(r["subject"], r["reason"], r["old_key"]) for r in rows})
        conn.execute(text(
            "INSERT INTO entries (status, version, dlq_stream, dlq_epoch, dlq_seq, original_subject, reason, error, "
            "schema_errors, received_at, headers, payload, payload_available, sources, notes, group_id) VALUES "
            "(:status, 1, 'DLQ', 'e1', :seq, :subject, :reason, :error, :schema, :at, '{}', :payload, :yes, 'dlq', "
            "'[]', :group)"),
            [{**r, "payload": b"{}", "yes": True, "group": ids[(r["subject"], r["reason"], r["old_key"])]}
             for r in rows])
        count_changes(conn, [Change(None, ids[(r["subject"], r["reason"], r["old_key"])], r["at"], None, r["status"])
                             for r in rows])
    assert kept(engine) == truth(engine)

    assert migrate(engine) == head()
    with engine.connect() as conn:
        groups = {g.key: g for g in conn.execute(select(GROUPS))}
        seen = {g: (first, last) for g, first, last in conn.execute(
            select(Entry.group_id, func.min(Entry.received_at), func.max(Entry.received_at)).group_by(Entry.group_id))}
        arrival_groups = set(conn.execute(select(ARRIVALS.c.group_id).distinct()).scalars())
    assert sorted(groups) == ["/items/*/price: … is not of type 'number'", "KeyError: 'currency' for tenant <id>",
                              "KeyError: 'vat_rate' for tenant <id>", "disk full"]
    assert kept(engine) == truth(engine)
    assert {g.id: (g.first_seen, g.last_seen) for g in groups.values()} == seen
    assert arrival_groups <= {g.id for g in groups.values()} | {0}
    # A second run (the next start) finds nothing to move.
    with write_transaction(engine) as conn:
        assert regroup.regroup_entries(conn, error_group) == 0
    engine.dispose()


def test_the_grouping_rules_in_use_are_the_ones_the_newest_regrouping_revision_applies():
    # Stored keys are computed once: rules changed without a revision that regroups would leave
    # the stored entries in groups the new rules never make.
    regroupings = []
    for path in sorted((MIGRATIONS / "versions").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"revision_{path.stem}", path)
        if "RULES = " in path.read_text():
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            regroupings.append(module.RULES)
    assert regroupings and regroupings[-1] == GROUPING_VERSION
