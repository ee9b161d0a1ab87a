"""A message that fails again is a new failure, and a new entry: an advisory or a DLQ copy of the
same (stream, sequence, consumer) as an entry already confirmed, or far apart in time from it (a
redelivery, a source stream recreated since, its sequences starting again), no longer folds into
that entry, overwriting its payload or vanishing into a closed one (found from outside). The DLQ
copy and the advisory of one failure still make one entry, and so do two terminal advisories of
one failure (a message deleted while pending, then terminated by its consumer), checked against
a real nats-server too."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy
from sqlalchemy import select

from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.db.models import Entry, Event
from dlq_dashboard.ingest.parse import Advisory
from dlq_dashboard.ingest.writes import FetchedMessage, StreamMessage, ingest_advisory_batch, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import format_time, utcnow

from . import support

pytestmark = pytest.mark.both_databases


@pytest.fixture
def engine(offline_app):
    return runtime_of(offline_app).engine


def terminated(engine, position: int, at, payload: bytes | None, advisory_id: str, consumer: str = "billing",
               reason: str = "cannot handle", deliveries: int = 1) -> None:
    advisory = Advisory("terminated", advisory_id, at, "ORDERS", consumer, 5, deliveries, reason, {})
    fetched = FetchedMessage("orders.created", {}, payload) if payload is not None else None
    ingest_advisory_batch(engine, "DLQ_ADVISORIES", "e1", [(advisory, fetched, None)], position)


def dlq_copy(engine, seq: int, failed_at, payload: bytes) -> None:
    headers = support.dlq_headers("orders.created", Dlq_Original_Stream="ORDERS", Dlq_Original_Seq="5",
                                  Dlq_Consumer="billing", Dlq_Reason="fatal", Dlq_Error="brand new failure",
                                  Dlq_Failed_At=format_time(failed_at))
    ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(seq, "dlq.orders.created", headers, payload, failed_at)])


def rows(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(select(Entry.id, Entry.status, Entry.payload, Entry.sources, Entry.error,
                                   Entry.deliveries).order_by(Entry.id)).all()


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
    # A second terminal advisory of that failure (its consumer's TERM after JetStream's own) joins it too.
    terminated(engine, 2, now + timedelta(seconds=3), b'{"new": 1}', "a-2b", reason="handler failed")
    assert [(bytes(r.payload), r.sources) for r in rows(engine)] == [(b'{"old": 1}', "advisory"),
                                                                      (b'{"new": 1}', "dlq,advisory")]
    terminated(engine, 3, now + timedelta(hours=5), b'{"later": 1}', "a-3")
    dlq_copy(engine, 2, now + timedelta(hours=5, seconds=1), b'{"later": 1}')
    merged = rows(engine)[-1]
    assert (len(rows(engine)), bytes(merged.payload), merged.sources, merged.error) == (
        3, b'{"later": 1}', "dlq,advisory", "brand new failure")


# --- two terminal advisories of one failure -------------------------------------------------------

def test_two_terminal_advisories_of_one_failure_are_one_entry_in_one_batch_or_two_and_a_redelivered_one_too(
        offline_app, engine):
    """JetStream terminates a pending message that is deleted ("Unacknowledged message was
    deleted"), then the consumer's own TERM of it says why it failed: one failure. The entry is the
    first report's; the timeline keeps both."""
    now = utcnow()
    terminated(engine, 1, now, None, "a-1", reason="Unacknowledged message was deleted")
    terminated(engine, 2, now + timedelta(milliseconds=3), None, "a-2", reason="handler failed", deliveries=2)
    terminated(engine, 2, now + timedelta(milliseconds=3), None, "a-2", reason="handler failed", deliveries=2)
    terminated(engine, 3, now + timedelta(seconds=40), None, "a-3", reason="late TERM", deliveries=2)
    # In one batch (one transaction) as well: the second sees the entry the first made.
    both = [(Advisory("terminated", f"b-{i}", now, "ORDERS", "shipping", 5, 1, why, {}), None, "deleted")
            for i, why in enumerate(("Unacknowledged message was deleted", "handler failed"))]
    ingest_advisory_batch(engine, "DLQ_ADVISORIES", "e1", both, 5, after=3)
    found = rows(engine)
    assert [(r.status, r.sources, r.error, r.deliveries) for r in found] == [
        ("open", "advisory", "Unacknowledged message was deleted", 2),
        ("open", "advisory", "Unacknowledged message was deleted", 1)]
    history = runtime_of(offline_app).store.get_entry(found[0].id).history
    assert sorted(h["detail"].get("reason") for h in history if h["kind"] == "terminated") == [
        "Unacknowledged message was deleted", "handler failed", "late TERM"]
    # A DLQ copy of that failure still joins the one entry.
    dlq_copy(engine, 1, now + timedelta(seconds=1), b'{"n": 1}')
    assert [(r.sources, bytes(r.payload)) for r in rows(engine)][0] == ("dlq,advisory", b'{"n": 1}')
    assert len(rows(engine)) == 2


async def two_terminal_advisories(url: str, scenario: str) -> tuple[int, str | None]:
    """ORDERS' message failed for good twice over by one consumer; its stream sequence once
    JetStream has sent both advisories (nats-server 2.15):

    - "deleted": deleted from the stream while the consumer held it ("Unacknowledged message was
      deleted"), then terminated by the consumer with its reason;
    - "late": its one delivery outlived ack_wait (MAX_DELIVERIES, sent at the next pull), then the
      consumer's TERM came."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"], retention=RetentionPolicy.LIMITS)
        ack = await js.publish("orders.created", b'{"order_id": "o-1"}')
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="worker", ack_policy=AckPolicy.EXPLICIT,
                                                       max_deliver=1 if scenario == "late" else 3,
                                                       ack_wait=1 if scenario == "late" else 30))
        advisories: list = []

        async def advised(msg) -> None:
            advisories.append(msg)

        await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.*.ORDERS.worker", cb=advised)
        sub = await js.pull_subscribe_bind("worker", stream="ORDERS")
        msg = (await sub.fetch(1, timeout=5))[0]
        if scenario == "deleted":
            await js.delete_msg("ORDERS", ack.seq)
        else:
            for _ in range(40):  # until the server gives up on it (MAX_DELIVERIES, at a pull)
                if advisories:
                    break
                try:
                    await sub.fetch(1, timeout=0.5)
                except asyncio.TimeoutError:
                    continue
        await nc.publish(msg.reply, b"+TERM customer does not exist")
        for _ in range(100):
            if len(advisories) >= 2:
                break
            await asyncio.sleep(0.05)
        assert len(advisories) == 2, "two terminal advisories"
        # The reason of the one JetStream sent first (the deletion's is not always first: it
        # may follow the TERM), which the entry keeps; None for MAX_DELIVERIES, which has none.
        return ack.seq, json.loads(advisories[0].data).get("reason")
    finally:
        await nc.close()


@pytest.mark.parametrize("scenario, first", [("deleted", "Unacknowledged message was deleted"),
                                             ("late", "Reached the consumer's maximum of 1 deliveries.")])
def test_one_message_failed_for_good_twice_over_is_one_entry_with_both_advisories(app, nats_server, tokens,
                                                                                  scenario, first):
    seq, sent_first = support.run(two_terminal_advisories(nats_server.url, scenario))
    first = sent_first or first
    engine = runtime_of(app).engine

    def mirrored():
        with engine.connect() as conn:
            found = conn.execute(select(Event.kind).where(Event.original_stream == "ORDERS", Event.original_seq == seq,
                                                          Event.kind != "nak")).scalars().all()
        return found if len(found) == 2 else None

    support.wait_for(mirrored, timeout=20, message="both advisories mirrored")
    with engine.connect() as conn:
        entries = conn.execute(select(Entry.id, Entry.error).where(Entry.original_stream == "ORDERS")).all()
    assert [e.error for e in entries] == [first]
    entry = app.test_client().get(f"/api/entries/{entries[0].id}", headers=support.bearer(tokens["viewer"])).get_json()
    told = [(h["kind"], (h.get("detail") or {}).get("reason")) for h in entry["history"] if h["kind"] != "nak"]
    assert sorted(told, key=str) == sorted([("terminated", "customer does not exist"),
                                            ("terminated", "Unacknowledged message was deleted")
                                            if scenario == "deleted" else ("max_deliveries", None)], key=str)
