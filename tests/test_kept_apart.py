"""A message the database refuses for a reason the parse did not foresee is kept apart, and its
batch, and every dead letter behind it, is written: the mirror no longer stops for good on one
message (ingest/apart.py). A trigger stands for the unforeseen refusal, on both databases, through
the writes and through the mirror against a real nats-server."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from dlq_dashboard.db.engine import create_db_engine, dispose_quietly, write_transaction
from dlq_dashboard.db.models import Entry, Event
from dlq_dashboard.ingest.apart import transient
from dlq_dashboard.ingest.parse import Advisory
from dlq_dashboard.ingest.writes import FetchedMessage, StreamMessage, ingest_advisory_batch, ingest_dlq_batch, \
    read_position
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support

POISON = "substr(NEW.original_subject, 1, 7) = 'poison.'"
REFUSAL = "refused by a rule of the database"


def refuse(engine, condition: str, sqlstate: str = "22000") -> None:
    """Make the database refuse an entry whose new row meets ``condition`` (SQL over NEW)."""
    with write_transaction(engine) as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql(f"CREATE TRIGGER refuse BEFORE INSERT ON entries WHEN {condition} "
                                 f"BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END")
            return
        conn.exec_driver_sql(f"CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN IF {condition} THEN "
                             f"RAISE EXCEPTION '{REFUSAL}' USING ERRCODE = '{sqlstate}'; END IF; RETURN NEW; END "
                             "$$ LANGUAGE plpgsql")
        conn.exec_driver_sql("CREATE TRIGGER refuse BEFORE INSERT ON entries FOR EACH ROW EXECUTE FUNCTION refuse()")


def allow(engine) -> None:
    with write_transaction(engine) as conn:
        conn.exec_driver_sql("DROP TRIGGER refuse" + ("" if conn.dialect.name == "sqlite" else " ON entries"))


@pytest.fixture
def engine(database_url):
    engine = create_db_engine(database_url)
    yield engine
    dispose_quietly(engine)


def batch(subjects: list[str]) -> list[StreamMessage]:
    return [StreamMessage(seq, f"dlq.{subject}", support.dlq_headers(subject, Dlq_Reason="fatal",
                                                                     Dlq_Error=f"boom {seq}"),
                          json.dumps({"n": seq}).encode(), utcnow())
            for seq, subject in enumerate(subjects, start=1)]


def entries(engine) -> dict:
    with engine.connect() as conn:
        return {e.dlq_seq: e for e in conn.execute(select(*Entry.__table__.columns))}


def counts_match_entries(engine) -> None:
    with engine.connect() as conn:
        mismatched = conn.execute(text(
            "SELECT g.id FROM failure_groups g WHERE g.open_count <> "
            "(SELECT count(*) FROM entries e WHERE e.group_id = g.id AND e.status = 'open')")).all()
    assert mismatched == []


@pytest.mark.both_databases
def test_a_message_the_database_refuses_is_kept_apart_and_its_batch_written(engine, caplog):
    refuse(engine, POISON)
    with caplog.at_level(logging.WARNING, "dlq_dashboard.ingest.writes"):
        made = ingest_dlq_batch(engine, "DLQ", "e1", batch(["orders.a", "poison.x", "orders.b"]), after=0)
    assert made == 3 and read_position(engine, "DLQ") == ("e1", 3)
    stored = entries(engine)
    assert [stored[1].original_subject, stored[3].original_subject] == ["orders.a", "orders.b"]
    assert [stored[1].error, stored[3].error] == ["boom 1", "boom 3"]
    kept = stored[2]
    # Without the columns read from its headers, which are kept as they came; the payload kept.
    assert (kept.original_subject, kept.reason, kept.error) == (None, None, None)
    assert json.loads(kept.headers)["Dlq-Original-Subject"] == ["poison.x"]
    assert kept.payload == b'{"n": 2}' and kept.payload_available
    notes = json.loads(kept.notes)
    assert REFUSAL in notes[0] and "cannot be republished from here" in notes[0]
    assert "the DLQ stream holds it at DLQ sequence 2" in notes[1]
    assert "DLQ sequence 2 kept apart" in caplog.text and "message by message" in caplog.text
    counts_match_entries(engine)
    # The next batch is written as any other: the one-by-one writing was this batch's alone.
    assert ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(4, "dlq.orders.c", support.dlq_headers("orders.c"),
                                                                b"{}", utcnow())], after=3) == 1


@pytest.mark.both_databases
def test_one_refused_with_its_headers_is_kept_bare_saying_where_they_are(engine):
    refuse(engine, "NEW.dlq_seq = 2 AND NEW.payload_available")
    assert ingest_dlq_batch(engine, "DLQ", "e1", batch(["orders.a", "orders.b"]), after=0) == 2
    kept = entries(engine)[2]
    assert (kept.headers, kept.payload, kept.payload_available) == ("{}", b"", False)
    assert "they are in the DLQ stream, DLQ sequence 2" in json.loads(kept.notes)[1]
    assert entries(engine)[1].original_subject == "orders.a"


@pytest.mark.both_databases
def test_one_refused_even_bare_holds_its_batch_and_nothing_of_it_is_written(engine):
    refuse(engine, "NEW.dlq_seq = 2")
    with pytest.raises(IntegrityError if engine.dialect.name == "sqlite" else DBAPIError, match=REFUSAL):
        ingest_dlq_batch(engine, "DLQ", "e1", batch(["orders.a", "orders.b", "orders.c"]), after=0)
    assert entries(engine) == {} and read_position(engine, "DLQ") == (None, 0)
    allow(engine)  # what refused it is mended: the batch is written whole, as it came
    assert ingest_dlq_batch(engine, "DLQ", "e1", batch(["orders.a", "orders.b", "orders.c"]), after=0) == 3
    assert entries(engine)[2].original_subject == "orders.b"


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # SQLite's triggers raise no such error
def test_a_refusal_of_the_databases_state_is_not_taken_for_the_messages(engine, caplog):
    refuse(engine, "NEW.dlq_seq = 2", sqlstate="40001")  # a serialisation failure: retried later, whole
    with caplog.at_level(logging.WARNING, "dlq_dashboard.ingest.writes"), pytest.raises(OperationalError):
        ingest_dlq_batch(engine, "DLQ", "e1", batch(["orders.a", "orders.b"]), after=0)
    assert entries(engine) == {} and "message by message" not in caplog.text


@pytest.mark.parametrize("exc, expected", [
    (OperationalError("INSERT", {}, Exception("database is locked")), True),
    (IntegrityError("INSERT", {}, Exception("CHECK constraint failed")), False),
    (OverflowError("Python int too large to convert to SQLite INTEGER"), False),
    (ValueError("A string literal cannot contain NUL (0x00) characters."), False),
    (MemoryError(), True),
    (ConnectionResetError(), True),
], ids=["locked", "constraint", "overflow", "nul", "memory", "connection"])
def test_which_errors_are_the_databases_state(exc, expected):
    assert transient(exc) is expected


@pytest.mark.both_databases
def test_an_advisory_whose_message_the_database_refuses_is_stored_without_it(engine):
    refuse(engine, POISON)
    at = utcnow() - timedelta(seconds=5)
    advisories = [(Advisory("terminated", f"adv-{seq}", at, "ORDERS", "billing", seq, 2, "bad payload", {}),
                   FetchedMessage(subject, {"Nats-Msg-Id": [f"m-{seq}"]}, b'{"k": 1}'), None)
                  for seq, subject in ((7, "orders.a"), (8, "poison.y"))]
    assert ingest_advisory_batch(engine, "ADVISORIES", "e1", advisories, last_seq=2, after=0) == 2
    assert read_position(engine, "ADVISORIES") == ("e1", 2)
    with engine.connect() as conn:
        made = {e.original_seq: e for e in conn.execute(select(*Entry.__table__.columns))}
        events = conn.execute(select(Event.original_seq)).scalars().all()
    assert sorted(events) == [7, 8]
    assert (made[7].original_subject, made[7].payload_available) == ("orders.a", True)
    kept = made[8]
    assert (kept.original_subject, kept.payload_available, kept.error) == (None, False, "bad payload")
    assert any(REFUSAL in n and "it is there at sequence 8" in n for n in json.loads(kept.notes))
    counts_match_entries(engine)


@pytest.mark.both_databases
def test_the_mirror_keeps_a_refused_message_apart_and_mirrors_on(app, nats_server, tokens):
    engine = runtime_of(app).engine
    refuse(engine, POISON)
    messages = [(f"dlq.{subject}", b'{"ok": true}', support.dlq_headers(subject, Dlq_Error="failed"))
                for subject in ("orders.a", "poison.z", "orders.b")]
    support.run(support.publish_many(nats_server.url, messages))
    support.wait_for(lambda: support.entry_count(engine) == 3, timeout=20, message="all three as entries")
    client = app.test_client()
    body = client.get("/api/entries", query_string={"limit": 10}, headers=support.bearer(tokens["viewer"])).get_json()
    by_seq = {e["dlq_seq"]: e for e in body["entries"]}
    assert [by_seq[1]["original_subject"], by_seq[3]["original_subject"]] == ["orders.a", "orders.b"]
    kept = client.get(f"/api/entries/{by_seq[2]['id']}", headers=support.bearer(tokens["viewer"])).get_json()
    assert kept["original_subject"] is None and kept["headers"]["Dlq-Original-Subject"] == ["poison.z"]
    assert any(REFUSAL in n for n in kept["notes"])
    # Not stuck: later dead letters arrive, and the health says nothing is wrong.
    support.run(support.publish_many(nats_server.url, [("dlq.orders.c", b"{}", support.dlq_headers("orders.c"))]))
    support.wait_for(lambda: support.entry_count(engine) == 4, timeout=20, message="the next one")
    health = client.get("/healthz").get_json()
    assert health["status"] == "ok", health


@pytest.mark.both_databases
def test_an_advisory_refused_even_without_its_message_is_skipped_and_the_rest_written(engine, caplog):
    refuse(engine, "NEW.original_seq = 9")
    at = utcnow() - timedelta(seconds=5)
    advisories = [(Advisory("max_deliveries", f"adv-{seq}", at, "ORDERS", "billing", seq, 5, None, {}), None,
                   "The source stream no longer has this message.") for seq in (9, 10)]
    with caplog.at_level(logging.WARNING, "dlq_dashboard.ingest.writes"):
        assert ingest_advisory_batch(engine, "ADVISORIES", "e1", advisories, last_seq=2, after=0) == 1
    assert read_position(engine, "ADVISORIES") == ("e1", 2)
    with engine.connect() as conn:
        assert conn.execute(select(Entry.original_seq)).scalars().all() == [10]
        assert conn.execute(select(Event.original_seq)).scalars().all() == [10]  # its history went with it
    assert "advisory adv-9 (ORDERS sequence 9) skipped" in caplog.text and REFUSAL in caplog.text
    counts_match_entries(engine)


@pytest.mark.both_databases
def test_a_message_the_parse_cannot_read_is_kept_apart_before_any_write(engine, monkeypatch, caplog):
    """The parse never raises for what it foresees; for anything else (an error of its own) the
    message is kept apart too, instead of failing its batch before the database is asked."""
    from dlq_dashboard.ingest import writes

    real = writes.entry_from_dlq_message

    def parse(**fields):
        if fields["seq"] == 2 and fields["headers"] is not None:
            raise TypeError("an error the parse did not foresee")
        return real(**fields)

    monkeypatch.setattr(writes, "entry_from_dlq_message", parse)
    with caplog.at_level(logging.WARNING, "dlq_dashboard.ingest.writes"):
        assert ingest_dlq_batch(engine, "DLQ", "e1", batch(["orders.a", "orders.b", "orders.c"]), after=0) == 3
    kept = entries(engine)[2]
    assert (kept.original_subject, kept.payload) == (None, b'{"n": 2}')
    assert json.loads(kept.headers)["Dlq-Original-Subject"] == ["orders.b"]
    notes = json.loads(kept.notes)
    assert notes[0].startswith("The dashboard could not read this message as it came (TypeError: an error the parse")
    assert entries(engine)[3].original_subject == "orders.c"
    assert "DLQ sequence 2 kept apart: its headers could not be read" in caplog.text


@pytest.mark.both_databases
def test_a_message_whose_headers_cannot_be_written_out_either_says_where_they_are(engine, monkeypatch):
    from dlq_dashboard.ingest import writes

    def unreadable(**fields):
        if fields["headers"] is not None:
            raise TypeError("an error the parse did not foresee")
        return real(**fields)

    def unwritable(headers):
        raise ValueError("not written out")

    real = writes.entry_from_dlq_message
    monkeypatch.setattr(writes, "entry_from_dlq_message", unreadable)
    monkeypatch.setattr(writes, "normalize_headers", unwritable)
    assert ingest_dlq_batch(engine, "DLQ", "e1", batch(["orders.a"]), after=0) == 1
    kept = entries(engine)[1]
    assert (kept.headers, kept.payload) == ("{}", b'{"n": 1}')
    assert json.loads(kept.notes)[1] == "Its headers could not be stored: they are in the DLQ stream, DLQ sequence 1."
