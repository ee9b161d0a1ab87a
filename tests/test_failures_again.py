"""A message that fails again is a new failure, and a new entry: an advisory or a DLQ copy of the
same (stream, sequence, consumer) as an entry already confirmed, or far apart in time from it (a
redelivery, a source stream recreated since, its sequences starting again), no longer folds into
that entry, overwriting its payload or vanishing into a closed one (found from outside). The DLQ
copy and the advisory of one failure still make one entry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.db.models import Entry
from dlq_dashboard.ingest.parse import Advisory
from dlq_dashboard.ingest.writes import FetchedMessage, StreamMessage, ingest_advisory_batch, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import format_time, utcnow

from . import support

pytestmark = pytest.mark.both_databases


@pytest.fixture
def engine(offline_app):
    return runtime_of(offline_app).engine


def terminated(engine, position: int, at, payload: bytes, advisory_id: str, consumer: str = "billing") -> None:
    advisory = Advisory("terminated", advisory_id, at, "ORDERS", consumer, 5, 1, "cannot handle", {})
    ingest_advisory_batch(engine, "DLQ_ADVISORIES", "e1",
                          [(advisory, FetchedMessage("orders.created", {}, payload), None)], position)


def dlq_copy(engine, seq: int, failed_at, payload: bytes) -> None:
    headers = support.dlq_headers("orders.created", Dlq_Original_Stream="ORDERS", Dlq_Original_Seq="5",
                                  Dlq_Consumer="billing", Dlq_Reason="fatal", Dlq_Error="brand new failure",
                                  Dlq_Failed_At=format_time(failed_at))
    ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(seq, "dlq.orders.created", headers, payload, failed_at)])


def rows(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(select(Entry.id, Entry.status, Entry.payload, Entry.sources, Entry.error)
                            .order_by(Entry.id)).all()


def test_an_advisory_of_a_message_that_fails_again_makes_a_new_entry(engine):
    """The source stream recreated (or the message redelivered to a recreated consumer): its
    sequence 5 is another message, or the same one failing again."""
    now = utcnow()
    terminated(engine, 1, now - timedelta(days=2), b'{"old": 1}', "a-1")
    terminated(engine, 2, now, b'{"new": 2}', "a-2")
    found = rows(engine)
    assert [bytes(r.payload) for r in found] == [b'{"old": 1}', b'{"new": 2}']
    assert [r.status for r in found] == ["open", "open"]


def test_a_failure_again_after_its_entry_was_closed_is_an_open_entry_not_a_line_of_history(offline_app, engine):
    now = utcnow()
    terminated(engine, 1, now - timedelta(minutes=10), b'{"n": 1}', "a-1")
    first = rows(engine)[0].id
    close_entry(runtime_of(offline_app), first, 1, actor="ann", note="fixed the handler")
    terminated(engine, 2, now, b'{"n": 1}', "a-2")
    assert [(r.id == first, r.status) for r in rows(engine)] == [(True, "closed"), (False, "open")]


def test_a_dlq_copy_merges_into_its_own_failures_advisory_but_not_into_one_of_long_ago(engine):
    now = utcnow()
    terminated(engine, 1, now - timedelta(hours=3), b'{"old": 1}', "a-1")
    dlq_copy(engine, 1, now, b'{"new": 1}')  # the stream recreated since: its sequence 5 is another message
    found = rows(engine)
    assert [(bytes(r.payload), r.sources) for r in found] == [(b'{"old": 1}', "advisory"), (b'{"new": 1}', "dlq")]
    # One failure reported both ways, seconds apart, is still one entry, whichever comes first.
    terminated(engine, 2, now + timedelta(seconds=2), b'{"new": 1}', "a-2")
    assert [(bytes(r.payload), r.sources) for r in rows(engine)] == [(b'{"old": 1}', "advisory"),
                                                                      (b'{"new": 1}', "dlq,advisory")]
    terminated(engine, 3, now + timedelta(hours=5), b'{"later": 1}', "a-3")
    dlq_copy(engine, 2, now + timedelta(hours=5, seconds=1), b'{"later": 1}')
    merged = rows(engine)[-1]
    assert (len(rows(engine)), bytes(merged.payload), merged.sources, merged.error) == (
        3, b'{"later": 1}', "dlq,advisory", "brand new failure")
