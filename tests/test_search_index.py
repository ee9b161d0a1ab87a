"""The search index written by a pass of its own behind the mirror (ingest/search_index.py): the
pass indexes what the writes left to it, from its position, in bounded batches; searches lack
the newest entries until it comes and say so; updates keep the index true; a killed writer's
pass resumes from its position with nothing lost or doubled."""

from __future__ import annotations

import os
import signal

import pytest
from sqlalchemy import inspect, text, update

from dlq_dashboard.db.engine import create_db_engine, dispose_quietly, write_transaction
from dlq_dashboard.db.migrate import migrate
from dlq_dashboard.db.models import Entry
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.entries.store import Store
from dlq_dashboard.ingest.search_index import PG_VECTOR, SearchPass, index_pending, search_lag
from dlq_dashboard.ingest.writer import WriterProcess
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support

pytestmark = pytest.mark.both_databases


def messages(first: int, last: int, word: str = "parcel") -> list[StreamMessage]:
    return [StreamMessage(seq, "dlq.orders.created", {"Dlq-Original-Subject": "orders.created", "Dlq-Reason": "fatal",
                                                      "Dlq-Error": f"{word} {seq} was refused"},
                          f'{{"n": {seq}, "note": "{word}"}}'.encode(), utcnow()) for seq in range(first, last + 1)]


def found(engine, q: str) -> list[int]:
    return sorted(e.dlq_seq for e in Store(engine).list_entries(EntryFilter(q=q, limit=500)).entries)


def index_rows(engine) -> list[int]:
    """The entry ids in the search index (SQLite: its document sizes, one row a document)."""
    table, key = ("entries_fts_docsize", "id") if engine.dialect.name == "sqlite" else ("entry_search", "entry_id")
    with engine.connect() as conn:
        return sorted(conn.exec_driver_sql(f"SELECT {key} FROM {table}").scalars())


def assert_index_true(engine) -> None:
    """Every entry is indexed once, with the text it holds now."""
    assert index_rows(engine) == entry_ids(engine)
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            # An external-content index checked against its content: a row indexed twice, or
            # with words it no longer holds, fails.
            conn.exec_driver_sql("INSERT INTO entries_fts(entries_fts) VALUES ('integrity-check')")
        else:
            stale = conn.exec_driver_sql(
                f"SELECT count(*) FROM entry_search s JOIN entries e ON e.id = s.entry_id "
                f"WHERE s.search IS DISTINCT FROM {PG_VECTOR}").scalar()
            assert stale == 0


def entry_ids(engine) -> list[int]:
    with engine.connect() as conn:
        return sorted(conn.exec_driver_sql("SELECT id FROM entries").scalars())


@pytest.fixture
def deferred(engine):
    """The engine as the writer process has it: its writes leave the index to a pass (not started
    here: the test runs the pass itself)."""
    SearchPass(engine)
    return engine


def test_the_pass_indexes_the_entries_a_write_left_to_it_and_moves_its_position(deferred):
    ingest_dlq_batch(deferred, "DLQ", "e1", messages(1, 7))
    assert found(deferred, "parcel") == [] and index_rows(deferred) == []
    lag = search_lag(deferred)
    assert (lag.position, lag.pending, lag.more) == (0, 7, False)

    done = index_pending(deferred, limit=5)  # bounded: one batch of 5, more to come
    assert (done.entries, done.more) == (5, True)
    assert found(deferred, "parcel") == [1, 2, 3, 4, 5] and search_lag(deferred).pending == 2
    done = index_pending(deferred, limit=5)
    assert (done.entries, done.more, done.position) == (2, False, max(entry_ids(deferred)))
    assert found(deferred, "parcel") == list(range(1, 8)) and search_lag(deferred).pending == 0
    assert index_pending(deferred).entries == 0
    assert_index_true(deferred)


def test_a_write_on_an_engine_without_a_pass_indexes_its_entries_at_once(engine):
    ingest_dlq_batch(engine, "DLQ", "e1", messages(1, 3))
    assert found(engine, "parcel") == [1, 2, 3]
    assert search_lag(engine).pending == 0
    assert_index_true(engine)
    # The pass finds nothing left, and indexes nothing twice.
    assert index_pending(engine).entries == 0
    assert_index_true(engine)


def test_entries_written_with_and_without_a_pass_are_each_indexed_once(engine, database_url):
    ingest_dlq_batch(engine, "DLQ", "e1", messages(1, 2))
    other = create_db_engine(database_url)  # the writer process's engine: its pass is behind
    try:
        SearchPass(other)
        ingest_dlq_batch(other, "DLQ", "e1", messages(3, 5), after=2)
        ingest_dlq_batch(engine, "DLQ", "e1", messages(6, 6), after=5)  # an inline write takes the pending too
        assert found(engine, "parcel") == [1, 2, 3, 4, 5, 6]
        index_pending(other)
        assert search_lag(engine).pending == 0
        assert_index_true(engine)
    finally:
        dispose_quietly(other)


def test_an_update_of_indexed_text_reindexes_the_entry_before_and_after_the_pass(deferred):
    ingest_dlq_batch(deferred, "DLQ", "e1", messages(1, 2))
    index_pending(deferred)
    ingest_dlq_batch(deferred, "DLQ", "e1", messages(3, 3), after=2)  # not indexed yet
    with write_transaction(deferred) as conn:
        conn.execute(update(Entry).where(Entry.dlq_seq.in_([1, 3])).values(error="zeppelin arrived late"))
        # A change of other columns (a close) leaves the index alone.
        conn.execute(update(Entry).where(Entry.dlq_seq == 2).values(status="closed"))
    # The indexed entry at once, in the update's transaction (PostgreSQL's trigger indexes the
    # other one too; SQLite's leaves it to the pass).
    assert found(deferred, "zeppelin") == ([1] if deferred.dialect.name == "sqlite" else [1, 3])
    index_pending(deferred)
    assert found(deferred, "zeppelin") == [1, 3]
    assert found(deferred, "refused") == [2]  # the old words of 1 and 3 are gone from the index
    assert_index_true(deferred)
    # A removed entry leaves the index.
    with write_transaction(deferred) as conn:
        conn.exec_driver_sql("DELETE FROM entries WHERE dlq_seq = 1")
    assert found(deferred, "zeppelin") == [3]
    assert_index_true(deferred)


def test_a_search_lacks_new_entries_until_the_pass_and_the_list_and_api_say_so(make_app, database_url):
    app = make_app()
    engine = runtime_of(app).engine
    SearchPass(engine)
    client = support.logged_in(app, "viewer")
    support.dead_letter(app, 1, payload=b'{"note": "walrus"}')
    support.dead_letter(app, 2, payload=b'{"note": "walrus"}')

    answer = client.get("/api/entries?q=walrus").get_json()
    assert answer["entries"] == []
    assert answer["search"] == {"indexed_through": 0, "not_indexed": 2, "more": False}
    page = client.get("/?q=walrus").get_data(as_text=True)
    assert "Search covers entries up to #0;\n    2 newest not yet indexed." in page
    # The lag counts the entries under the other filters only.
    assert client.get("/api/entries?q=walrus&subject=payments.x").get_json()["search"]["not_indexed"] == 0
    # Without a search there is nothing to say.
    assert "search" not in client.get("/api/entries").get_json()

    index_pending(engine)
    answer = client.get("/api/entries?q=walrus").get_json()
    assert len(answer["entries"]) == 2 and answer["search"]["not_indexed"] == 0
    assert answer["search"]["indexed_through"] == max(entry_ids(engine))
    assert "not yet indexed" not in client.get("/?q=walrus").get_data(as_text=True)


def test_healthz_and_metrics_tell_the_search_lag(make_app, database_url):
    app = make_app()
    engine = runtime_of(app).engine
    SearchPass(engine)
    support.dead_letter(app, 1)
    admin = support.logged_in(app, "admin")
    assert admin.get("/healthz").get_json()["search_lag"] == {"indexed_through": 0, "not_indexed": 1, "more": False}
    assert "dlq_search_lag_entries 1.0" in admin.get("/metrics").get_data(as_text=True)
    index_pending(engine)
    assert admin.get("/healthz").get_json()["search_lag"]["not_indexed"] == 0
    assert "dlq_search_lag_entries 0.0" in admin.get("/metrics").get_data(as_text=True)


def _rows(first: int, last: int) -> list[tuple]:
    return [(m.seq, m.subject, m.headers, m.data, m.stored_at) for m in messages(first, last)]


@pytest.mark.slow
def test_a_writer_killed_between_its_write_and_the_pass_loses_no_index_row_once_started_again(engine, database_url):
    writer = WriterProcess(database_url)
    holder = None
    try:
        if engine.dialect.name == "postgresql":
            # Hold the pass back (it locks its position): the writes commit, the index does not.
            holder = engine.connect()
            holder.begin()
            holder.exec_driver_sql("SELECT last_id FROM search_position FOR UPDATE")
        assert writer.call("ingest_dlq_rows", "DLQ", "e1", _rows(1, 40), 0) == 40
        first = writer._proc.pid
        if holder is not None:
            assert search_lag(engine).pending == 40
        os.kill(first, signal.SIGKILL)
        support.wait_for(lambda: support.gone(first) and not writer._proc.is_alive(), message="the writer to die")
        if holder is not None:
            holder.rollback()
            holder.close()
            holder = None
            assert search_lag(engine).pending == 40  # the killed pass committed nothing
        # The next writer's pass catches up from the position; nothing is indexed twice.
        assert writer.call("ingest_dlq_rows", "DLQ", "e1", _rows(41, 45), 40) == 5
        support.search_indexed(engine)
        assert found(engine, "parcel") == list(range(1, 46))
        assert_index_true(engine)
    finally:
        if holder is not None:
            holder.close()
        writer.close()


@pytest.mark.fresh_database
def test_a_database_upgraded_to_the_search_pass_keeps_every_entry_searchable(database_url):
    engine = create_db_engine(database_url)
    try:
        assert migrate(engine, "0015") == "0015"
        with write_transaction(engine) as conn:
            conn.execute(text(
                "INSERT INTO entries (status, version, dlq_stream, dlq_epoch, dlq_seq, original_subject, received_at, "
                "headers, payload, payload_available, sources, notes, error) VALUES ('open', 1, 'DLQ', 'e1', :seq, "
                "'orders.created', :at, '{}', :payload, :yes, 'dlq', '[]', :error)"),
                [{"seq": seq, "at": utcnow(), "payload": b'{"note": "harbour"}', "yes": True, "error": f"pier {seq}"}
                 for seq in (1, 2, 3)])
            if engine.dialect.name == "sqlite":  # how 0015's mirror indexed them (PostgreSQL: the column)
                conn.exec_driver_sql("INSERT INTO entries_fts(rowid, subject, error, payload) "
                                     "SELECT id, original_subject, error, CAST(payload AS TEXT) FROM entries")
        migrate(engine)
        assert found(engine, "harbour") == [1, 2, 3] and found(engine, "pier") == [1, 2, 3]
        assert search_lag(engine).pending == 0 and search_lag(engine).position == max(entry_ids(engine))
        assert_index_true(engine)
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("entries")}
        assert "search" not in columns
    finally:
        dispose_quietly(engine)


def test_an_entry_committed_after_a_newer_one_is_still_indexed_on_postgresql(deferred, monkeypatch):
    if deferred.dialect.name == "sqlite":
        pytest.skip("SQLite's writers are serialised: ids commit in their order")
    from dlq_dashboard.ingest import search_index

    monkeypatch.setattr(search_index, "WRITERS_WAIT", 0.2)
    slow = deferred.connect()
    slow.begin()
    # A writer that took its id first and commits last (another source's writer, an advisory).
    slow.execute(text(
        "INSERT INTO entries (status, version, dlq_stream, dlq_epoch, dlq_seq, original_subject, received_at, "
        "headers, payload, payload_available, sources, notes, error) VALUES ('open', 1, 'OTHER', 'e1', 1, "
        "'orders.created', :at, '{}', :payload, true, 'dlq', '[]', 'parcel late')"),
        {"at": utcnow(), "payload": b"{}"})
    try:
        ingest_dlq_batch(deferred, "DLQ", "e1", messages(1, 3))
        done = index_pending(deferred)  # the slow writer holds its lock: the position stays
        assert done.entries == 3 and done.position == 0
        assert found(deferred, "parcel") == [1, 2, 3]
        slow.commit()
    finally:
        slow.close()
    done = index_pending(deferred)
    assert done.entries == 1 and done.position == max(entry_ids(deferred))
    assert sorted(found(deferred, "parcel")) == [1, 1, 2, 3]  # the other stream's seq 1 too
    assert_index_true(deferred)


def test_entries_left_to_the_pass_are_indexed_once_the_mirror_starts_though_nothing_new_arrives(
        deferred, make_app, database_url):
    """The writer process (and its pass) starts as the mirror takes its lease, not at its first
    write: what a stop left unindexed is found without waiting for the next dead letter."""
    ingest_dlq_batch(deferred, "DLQ", "e1", messages(1, 5))
    assert search_lag(deferred).pending == 5
    make_app(online=True)
    support.wait_for(lambda: search_lag(deferred).pending == 0, timeout=30, message="the pass to catch up")
    assert found(deferred, "parcel") == entry_ids(deferred)
