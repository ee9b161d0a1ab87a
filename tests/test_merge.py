"""A failure reported by JetStream's advisory and by a DLQ copy is one entry (ingest/merge.py), and
the merge keeps what the advisory knew where the copy is silent: the failure's time (a copy without
Dlq-Failed-At tells only when the DLQ stream stored it), the original msgId, the original message's
headers the copy does not carry. The timeline tells each report when it arrived. Found from
outside: a copy sent ten seconds after its MAX_DELIVERIES advisory moved the failure to the copy's
time, lost the msgId, and the timeline named the DLQ message ten seconds before it existed."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import timedelta
from html import unescape

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig
from sqlalchemy import func, select

from dlq_dashboard.db.models import Entry, FailureGroup
from dlq_dashboard.ingest.parse import NO_SUBJECT, Advisory
from dlq_dashboard.ingest.writes import FetchedMessage, ingest_advisory_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import format_time, utcnow
from dlq_dashboard.web.presenters.timeline import build_timeline

from . import support

pytestmark = pytest.mark.both_databases

PAYLOAD = b'{"order_id": "o-2", "parcel": "oversize"}'
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
# The original message's headers, as its advisory reads it back from ORDERS.
ORIGINAL = {"Nats-Msg-Id": "adv-2", "traceparent": TRACE, "X-Tenant": "t-7"}


def copy_headers(seq: int, **extra: str) -> dict[str, str]:
    """A service's DLQ copy of ORDERS ``seq``: no Dlq-Failed-At, no Dlq-Original-Msg-Id, and not
    the original's X-Tenant."""
    return {**support.dlq_headers("orders.special", Dlq_Original_Stream="ORDERS", Dlq_Original_Seq=str(seq),
                                  Dlq_Consumer="shipper", Dlq_Reason="max_deliveries",
                                  Dlq_Error="carrier rejected the parcel", Dlq_Deliveries="3"),
            "traceparent": TRACE, **extra}


def moments(html: str) -> list[tuple[str, str, str | None]]:
    """The entry page's timeline as (time, title, "stored as"), in the page's order."""
    timeline = html[html.index('id="timeline-title"'):]
    found = []
    for block in timeline.split('<li class="moment')[1:]:
        at = re.search(r'<time datetime="([^"]+)"', block)
        stored = re.search(r"<dt>stored as</dt><dd>(.*?)</dd>", block)
        found.append((at.group(1) if at else "", unescape(re.search(r"<strong>(.*?)</strong>", block).group(1)),
                      unescape(stored.group(1)) if stored else None))
    return found


# --- against a real nats-server ---------------------------------------------------------------

async def give_up_after_three_naks(url: str) -> int:
    """ORDERS holding one message of orders.special (msgId adv-2) that a consumer with
    max_deliver=3 naks three times, until JetStream sends MAX_DELIVERIES; its stream sequence."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        ack = await js.publish("orders.special", PAYLOAD, headers=dict(ORIGINAL))
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="shipper", ack_policy=AckPolicy.EXPLICIT,
                                                       max_deliver=3, ack_wait=5))
        given_up = asyncio.Event()

        async def advised(_msg) -> None:
            given_up.set()

        await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ORDERS.shipper", cb=advised)
        sub = await js.pull_subscribe("orders.>", durable="shipper", stream="ORDERS")
        for _ in range(20):  # the server sends MAX_DELIVERIES at the fetch after the last nak
            if given_up.is_set():
                break
            try:
                for msg in await sub.fetch(1, timeout=0.5):
                    await msg.nak()
            except asyncio.TimeoutError:
                continue
        assert given_up.is_set(), "no MAX_DELIVERIES advisory"
        return ack.seq
    finally:
        await nc.close()


def test_a_copy_sent_after_its_advisory_keeps_the_advisorys_time_and_msgid_and_the_timeline_in_order(
        app, nats_server, tokens):
    client = app.test_client()
    engine = runtime_of(app).engine

    def entry(entry_id: int) -> dict:
        return client.get(f"/api/entries/{entry_id}", headers=support.bearer(tokens["viewer"])).get_json()

    def only(sources: str):
        with engine.connect() as conn:
            rows = conn.execute(select(Entry.id, Entry.sources).where(Entry.original_stream == "ORDERS")).all()
        return rows[0].id if len(rows) == 1 and rows[0].sources == sources else None

    seq = support.run(give_up_after_three_naks(nats_server.url))
    entry_id = support.wait_for(lambda: only("advisory"), timeout=20, message="the advisory's entry")
    before = support.wait_for(lambda: (lambda e: e if len(e["history"]) == 4 else None)(entry(entry_id)),
                              message="three naks and the give-up in the history")
    assert before["original_msg_id"] == "adv-2"
    # Later, the service dead-letters it: its own msgId, no Dlq-Failed-At, no Dlq-Original-Msg-Id.
    support.run(support.publish_many(nats_server.url, [
        ("dlq.orders.special", PAYLOAD, {**copy_headers(seq), "Nats-Msg-Id": f"ORDERS:{seq}:dlq"})]))
    assert support.wait_for(lambda: only("dlq,advisory"), timeout=20, message="one entry of both") == entry_id
    after = entry(entry_id)

    assert after["failed_at"] == before["failed_at"]  # when JetStream gave up, not when the copy was stored
    assert after["original_msg_id"] == "adv-2"
    assert after["dlq_seq"] == 1 and after["error"] == "carrier rejected the parcel"
    assert before["dlq_received_at"] is None
    assert after["received_at"] == before["received_at"] < after["dlq_received_at"]
    assert after["headers"]["X-Tenant"] == ["t-7"] and after["headers"]["traceparent"] == [TRACE]
    assert after["headers"]["Nats-Msg-Id"] == [f"ORDERS:{seq}:dlq"]  # the copy's own, not the original's
    assert after["headers"]["Dlq-Original-Seq"] == [str(seq)]

    page = support.logged_in(app, "viewer").get(f"/entries/{entry_id}").get_data(as_text=True)
    told = moments(page)
    assert [title for _, title, _ in told] == [
        "Delivery 1 was nak'ed", "Delivery 2 was nak'ed", "Delivery 3 was nak'ed", "Gave up after 3 deliveries",
        "Failed: max_deliveries", "Reported by JetStream's advisory and mirrored", "Dead-lettered and mirrored"]
    assert [at for at, _, _ in told] == sorted(at for at, _, _ in told)
    assert told[-3][0] == after["failed_at"] and told[-2][0] == after["received_at"]
    assert told[-2][2] == "the advisory stream" and told[-1] == (after["dlq_received_at"], "Dead-lettered and mirrored",
                                                                  "DLQ:1")
    assert 'title="Every dead letter of this msgId">adv-2</a>' in page  # the page's "Original msgId"


# --- the merge in the mirror's writes, on both databases ----------------------------------------

@pytest.fixture
def rt(offline_app):
    return runtime_of(offline_app)


# A republish that failed again: the original message links back to the entry it republished.
REPLAYED = {**ORIGINAL, "Dlq-Replay-Of": "DLQ:17"}


def given_up(engine, at, *, seq: int = 2, advisory_id: str = "a-1", position: int = 1,
             original: dict = REPLAYED) -> None:
    """JetStream's MAX_DELIVERIES advisory of ORDERS ``seq`` at ``at``, the message read back."""
    advisory = Advisory("max_deliveries", advisory_id, at, "ORDERS", "shipper", seq, 3, None, {})
    ingest_advisory_batch(engine, "DLQ_ADVISORIES", "e1",
                          [(advisory, FetchedMessage("orders.special", dict(original), PAYLOAD), None)], position)


def dead_lettered(engine, dlq_seq: int, stored_at, *, seq: int = 2, **headers: str) -> int:
    """The service's DLQ copy of ORDERS ``seq``, stored by the DLQ stream at ``stored_at``."""
    return support.dead_letter(engine, dlq_seq, "orders.special", PAYLOAD, stored_at=stored_at,
                               **{k.replace("-", "_"): v for k, v in copy_headers(seq, **headers).items()})


def stored(engine, entry_id: int | None = None):
    """The entry ``entry_id``, or the only one."""
    query = select(Entry.__table__)
    with engine.connect() as conn:
        return conn.execute(query if entry_id is None else query.where(Entry.id == entry_id)).one()


def counts_agree(engine) -> bool:
    """The kept counts of each group are its entries, and no group counts an entry twice."""
    with engine.connect() as conn:
        kept = {r.id: r.open_count for r in conn.execute(select(FailureGroup.id, FailureGroup.open_count))
                if r.open_count}
        entries = dict(conn.execute(select(Entry.group_id, func.count()).group_by(Entry.group_id)).all())
    return kept == entries


def test_a_copy_without_dlq_failed_at_keeps_its_advisorys_time_msgid_and_headers(rt):
    failed = utcnow() - timedelta(seconds=10)
    given_up(rt.engine, failed)
    advisory_entry = stored(rt.engine)
    entry_id = dead_lettered(rt.engine, 9012, utcnow())
    assert entry_id == advisory_entry.id
    row = stored(rt.engine, entry_id)
    assert (row.sources, row.dlq_seq, row.error, row.version) == ("dlq,advisory", 9012,
                                                                   "carrier rejected the parcel", 2)
    assert row.failed_at == failed
    assert row.original_msg_id == "adv-2"
    assert row.replay_of == "DLQ:17"  # its failing again is still told on the entry it republished
    assert row.received_at == advisory_entry.received_at < row.dlq_received_at
    headers = json.loads(row.headers)
    assert headers["X-Tenant"] == ["t-7"] and headers["traceparent"] == [TRACE]
    assert headers["Dlq-Replay-Of"] == ["DLQ:17"]
    assert "Nats-Msg-Id" not in headers  # the original's is its msgId, not a header this copy carries
    assert headers["Dlq-Reason"] == ["max_deliveries"]
    assert counts_agree(rt.engine)  # moved to the copy's group, in the merge's transaction

    entry = rt.store.get_entry(entry_id)
    told = [(m.at, m.title, dict(m.facts).get("stored as")) for m in build_timeline(entry)]
    assert [at for at, _, _ in told] == sorted(at for at, _, _ in told)
    assert told[-3:] == [(failed, "Failed: max_deliveries", None),
                         (row.received_at, "Reported by JetStream's advisory and mirrored", "the advisory stream"),
                         (row.dlq_received_at, "Dead-lettered and mirrored", "DLQ:9012")]


def test_a_copys_own_failure_time_and_msgid_win_over_its_advisorys(rt):
    now = utcnow()
    given_up(rt.engine, now - timedelta(seconds=10))
    told = now - timedelta(seconds=9, milliseconds=500)
    entry_id = dead_lettered(rt.engine, 9012, now, **{"Dlq-Failed-At": format_time(told),
                                                      "Dlq-Original-Msg-Id": "order-77", "X-Tenant": "t-8"})
    row = stored(rt.engine, entry_id)
    assert (row.failed_at, row.original_msg_id, row.sources) == (told, "order-77", "dlq,advisory")
    assert json.loads(row.headers)["X-Tenant"] == ["t-8"]


@pytest.mark.parametrize("reason", ["max_deliveries", ""])
def test_either_order_makes_the_same_entry(rt, reason):
    """The mirror reads the DLQ stream and the advisories apart: the copy may come first. A copy
    without Dlq-Reason made two groups of one cause, by the order (the advisory's kind kept)."""
    now = utcnow()
    failed = now - timedelta(seconds=10)
    given_up(rt.engine, failed, seq=2)
    advisory_first = dead_lettered(rt.engine, 9012, now, seq=2, **{"Dlq-Reason": reason})
    copy_first = dead_lettered(rt.engine, 9013, now, seq=3, **{"Dlq-Reason": reason})
    assert stored(rt.engine, copy_first).failed_at == now  # told nothing else yet: when it was stored
    given_up(rt.engine, failed, seq=3, advisory_id="a-2", position=2)
    first, second = stored(rt.engine, advisory_first), stored(rt.engine, copy_first)

    def facts(row):
        headers = {k: v for k, v in json.loads(row.headers).items() if k != "Dlq-Original-Seq"}
        return (row.sources, row.failed_at, row.original_msg_id, row.replay_of, headers, row.group_id,
                row.reason, row.version)

    assert facts(second) == facts(first)
    assert second.dlq_received_at is None  # its copy came first: received_at is the copy's
    assert counts_agree(rt.engine)


def test_a_redelivered_copy_or_advisory_changes_nothing_after_the_merge(rt):
    now = utcnow()
    failed = now - timedelta(seconds=10)
    given_up(rt.engine, failed)
    entry_id = dead_lettered(rt.engine, 9012, now)
    merged = stored(rt.engine, entry_id)
    given_up(rt.engine, failed)  # the same advisory again (a replay after a crash)
    assert dead_lettered(rt.engine, 9012, now) == entry_id  # the same DLQ message again
    with rt.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Entry)).scalar_one() == 1
    assert stored(rt.engine, entry_id) == merged
    assert counts_agree(rt.engine)


def test_a_copy_without_its_original_subject_takes_the_one_its_advisory_read_in_either_order(rt):
    """A copy without Dlq-Original-Subject joining its advisory's entry emptied the subject the
    advisory had read from the source stream (the entry could no longer be republished) and said
    "it cannot be republished"; the copy first, the advisory added nothing. Now either order keeps
    the subject and drops that note; the group stays the copy's word, the same in both."""
    now = utcnow()
    failed = now - timedelta(seconds=10)

    def copy_without_subject(dlq_seq: int, seq: int) -> int:
        headers = copy_headers(seq)
        del headers["Dlq-Original-Subject"]
        return support.dead_letter(rt.engine, dlq_seq, None, PAYLOAD, stored_at=now,
                                   **{k.replace("-", "_"): v for k, v in headers.items()})

    given_up(rt.engine, failed, seq=2)
    advisory_first = copy_without_subject(9012, 2)
    copy_first = copy_without_subject(9013, 3)
    assert NO_SUBJECT in json.loads(stored(rt.engine, copy_first).notes)  # told nothing else yet
    given_up(rt.engine, failed, seq=3, advisory_id="a-2", position=2)
    first, second = stored(rt.engine, advisory_first), stored(rt.engine, copy_first)
    for row in (first, second):
        assert row.original_subject == "orders.special" and row.sources == "dlq,advisory"
        assert NO_SUBJECT not in json.loads(row.notes)
    assert first.group_id == second.group_id
    assert counts_agree(rt.engine)
    assert rt.store.get_entry(second.id).original_subject == "orders.special"
