"""A republished message that fails again is linked to the entry that was republished: by the
msgId it was sent with (Dlq-Original-Msg-Id) first, since Dlq-Replay-Of's ``<dlq stream>:<seq>``
names an entry in each epoch of a DLQ stream made again; else among the entries of that
reference that were republished, never one that was not."""

from __future__ import annotations

import asyncio
import html
import re

import nats
import pytest
from nats.js.api import ConsumerConfig

from dlq_consumer import dead_letter
from dlq_dashboard.actions.republish import republish_entry
from dlq_dashboard.entries.filters import EntryFilter

from . import support


def words(client, path: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", client.get(path).get_data(as_text=True))))


def mirrored(rt, predicate, message: str):
    """The newest entry matching ``predicate`` once its DLQ copy is stored."""
    def found():
        page = rt.store.list_entries(EntryFilter(limit=50)).entries
        return next((e for e in page if e.dlq_seq and predicate(e)), None)
    return support.wait_for(found, timeout=30, message=message)


def test_a_failure_again_of_an_older_epochs_republish_is_linked_to_that_entry_not_to_the_newer_seq(
        app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    api = app.test_client()
    headers = support.bearer(tokens["operator"])

    async def scenario():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        sub = await js.pull_subscribe("orders.created", durable="billing", stream="ORDERS",
                                      config=ConsumerConfig(max_deliver=1))

        async def fail_next(error: str):  # what a service's consumer does with a message it cannot handle
            [msg] = await sub.fetch(1, timeout=5)
            await dead_letter(js, msg, "fatal", error=error)
            await msg.term()

        async def in_thread(*args, **kwargs):
            return await asyncio.to_thread(*args, **kwargs)

        try:
            await js.publish("orders.created", b'{"order_id": "o-1"}')
            await fail_next("first epoch")
            older = await in_thread(mirrored, rt, lambda e: e.error == "first epoch", "the first epoch's entry")
            # The DLQ stream made again: its seq 1 is another message, another entry.
            await js.delete_stream("DLQ")
            await js.add_stream(name="DLQ", subjects=["dlq.>"])
            await js.publish("orders.created", b'{"order_id": "o-2"}')
            await fail_next("second epoch")
            newer = await in_thread(mirrored, rt, lambda e: e.error == "second epoch", "the second epoch's entry")
            assert older.dlq_ref == newer.dlq_ref == "DLQ:1" and older.id != newer.id
            # The older one is republished, and its message fails again.
            published = await in_thread(republish_entry, rt, older.id, older.version, actor="alice")
            await fail_next("failed again")
            replay = await in_thread(mirrored, rt, lambda e: e.error == "failed again", "the failure again")
            return older, newer, replay, published.publish.msg_id
        finally:
            await nc.close()

    older, newer, replay, msg_id = support.run(scenario())
    assert (replay.replay_of, replay.original_msg_id) == ("DLQ:1", msg_id)

    def entry(entry_id):
        return api.get(f"/api/entries/{entry_id}", headers=headers).get_json()

    assert entry(replay.id)["original"] == older.id
    assert (entry(older.id)["failed_again"], [r["id"] for r in entry(older.id)["replays"]]) == (replay.id, [replay.id])
    assert (entry(newer.id)["failed_again"], entry(newer.id)["replays"]) == (None, [])

    client = support.logged_in(app, "viewer")
    assert f"Its republish failed again: entry {replay.id} is the new failure." in words(client, f"/entries/{older.id}")
    assert "failed again" not in words(client, f"/entries/{newer.id}")
    assert (f"This message is a republish of entry {older.id} (DLQ:1): its republish failed again."
            in words(client, f"/entries/{replay.id}"))
    # The list marks the one whose republish failed again.
    rows = re.findall(r'<tr hx-disable data-id="(\d+)"(.*?)</tr>', client.get("/").get_data(as_text=True), re.S)
    assert len(rows) == 3 and {int(i) for i, row in rows if "failed-again-link" in row} == {older.id}


@pytest.mark.both_databases
def test_without_its_msg_id_a_failure_again_goes_to_the_newest_republished_entry_of_its_reference(offline_app, rt):
    engine = rt.engine
    republished = support.dead_letter(engine, 1, stream="DLQ")
    support.record_republish(rt, republished)
    never = support.dead_letter(engine, 1, stream="DLQ", epoch="e2")
    # A replay without Dlq-Original-Msg-Id (or with another installation's) names DLQ:1 alone.
    other = support.dead_letter(engine, 2, stream="DLQ", epoch="e2", Dlq_Replay_Of="DLQ:1",
                                Dlq_Original_Msg_Id="dlq-dashboard:0123456789abcdef:DLQ:1:e1:v1")
    bare = support.dead_letter(engine, 3, stream="DLQ", epoch="e2", Dlq_Replay_Of="DLQ:1")
    for replay in (other, bare):
        assert rt.store.original_of(rt.store.get_entry(replay)).id == republished
    assert [e.id for e in rt.store.replays_of_entry(rt.store.get_entry(republished))] == [other, bare]
    assert rt.store.replays_of_entry(rt.store.get_entry(never)) == []
    assert rt.store.failed_again([(republished, "DLQ:1"), (never, "DLQ:1")]) == {republished: bare}

    # Of a reference whose entries were never republished, a replay is linked to none.
    lonely = support.dead_letter(engine, 4, stream="DLQ", epoch="e2")
    stray = support.dead_letter(engine, 5, stream="DLQ", epoch="e2", Dlq_Replay_Of="DLQ:4")
    assert rt.store.original_of(rt.store.get_entry(stray)) is None
    assert rt.store.failed_again([(lonely, "DLQ:4")]) == {}
    # One of this installation's msgIds whose intent is gone (purged with its entry) is linked to none either.
    gone = support.dead_letter(engine, 6, stream="DLQ", epoch="e2", Dlq_Replay_Of="DLQ:1",
                               Dlq_Original_Msg_Id=f"{support.msg_id_prefix(rt)}:DLQ:1:e999:v1")
    assert rt.store.original_of(rt.store.get_entry(gone)) is None


@pytest.mark.both_databases
def test_without_its_msg_id_a_failure_again_goes_to_the_entry_republished_before_it_arrived_not_a_newer_one(
        offline_app, rt):
    engine = rt.engine
    older = support.dead_letter(engine, 1, stream="DLQ")
    support.record_republish(rt, older)
    replay = support.dead_letter(engine, 2, stream="DLQ", Dlq_Replay_Of="DLQ:1")
    # The DLQ stream made again: its seq 1 is another entry, made and republished after the replay arrived.
    newer = support.dead_letter(engine, 1, stream="DLQ", epoch="e2")
    support.record_republish(rt, newer)
    assert rt.store.original_of(rt.store.get_entry(replay)).id == older
    assert [e.id for e in rt.store.replays_of_entry(rt.store.get_entry(older))] == [replay]
    assert rt.store.replays_of_entry(rt.store.get_entry(newer)) == []
    assert rt.store.failed_again([(older, "DLQ:1"), (newer, "DLQ:1")]) == {older: replay}
    # A failure again that arrives after the newer one's republish is that one's.
    again = support.dead_letter(engine, 2, stream="DLQ", epoch="e2", Dlq_Replay_Of="DLQ:1")
    assert rt.store.original_of(rt.store.get_entry(again)).id == newer
    assert rt.store.failed_again([(older, "DLQ:1"), (newer, "DLQ:1")]) == {older: replay, newer: again}
