"""A failure an advisory reports before its DLQ copy (SPEC section 11, docs/alerts.md): on a real
server, a message terminated and dead-lettered 'card 2 declined' is first an entry of the
advisory's group ("Terminated by the consumer"), then moves to the group of its copy's error. For
the group it only passed through it never was one: a resolved group stays resolved, an ignored
one counts it toward no until_count, and neither raises an alert. A failure that stays there
still regresses it."""

from __future__ import annotations

import json

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig
from sqlalchemy import select

from dlq_dashboard.accounts import create_token
from dlq_dashboard.db.models import Alert, Entry, FailureGroup, GroupActivity
from dlq_dashboard.runtime import runtime_of

from . import support
from .test_alerts import start_app


async def _terminate(url: str) -> int:
    """Fetch the next message of SRC3's consumer and TERM it (no reason given); its sequence."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe("pay.charge", durable="charger", stream="SRC3")
        [msg] = await sub.fetch(1, timeout=5)
        await msg.term()
        seq = msg.metadata.sequence.stream
    finally:
        await nc.close()
    return seq


def _copy(url: str, seq: int) -> None:
    support.run(support.publish_many(url, [("dlq.pay.charge", b'{"card": "c-%d"}' % seq, support.dlq_headers(
        "pay.charge", Dlq_Original_Stream="SRC3", Dlq_Original_Seq=str(seq), Dlq_Reason="fatal",
        Dlq_Error=f"card {seq} declined", Nats_Msg_Id=f"copy-{seq}"))]))


@pytest.mark.both_databases
def test_a_failure_that_only_passes_through_a_resolved_or_ignored_group_changes_nothing_there(
        tmp_path, nats_server, database_url):
    async def source():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await js.add_stream(name="SRC3", subjects=["pay.charge"])
        for n in range(1, 7):
            await js.publish("pay.charge", b'{"card": "c-%d"}' % n)
        await js.add_consumer("SRC3", ConsumerConfig(durable_name="charger", ack_policy=AckPolicy.EXPLICIT,
                                                     max_deliver=3))
        await nc.close()

    support.run(source())
    app = start_app(tmp_path, nats_server, database_url, ["http://127.0.0.1:9/hook"])
    rt = runtime_of(app)
    engine, client = rt.engine, app.test_client()
    operator = support.bearer(create_token(engine, "oncall", "operator"))

    def entry(seq: int):
        with engine.connect() as conn:
            return conn.execute(select(Entry).where(Entry.original_stream == "SRC3", Entry.original_seq == seq)).first()

    def group(group_id: int):
        with engine.connect() as conn:
            return conn.execute(select(FailureGroup).where(FailureGroup.id == group_id)).first()

    def fail(copied: bool) -> int:
        """A message terminated; with ``copied``, its DLQ copy once the advisory is mirrored."""
        seq = support.run(_terminate(nats_server.url))
        support.wait_for(lambda: entry(seq), timeout=20, message=f"the advisory of sequence {seq}")
        if copied:
            _copy(nats_server.url, seq)
            support.wait_for(lambda: (e := entry(seq)) and e.sources == "dlq,advisory", timeout=20,
                             message=f"the DLQ copy of sequence {seq} to join its entry")
        return seq

    def state(group_id: int, **body):
        answer = client.post(f"/api/groups/{group_id}/state", json={"version": group(group_id).version, **body},
                             headers=operator)
        assert answer.status_code == 200, answer.get_json()

    def alerts(group_id: int) -> list[str]:
        with engine.connect() as conn:
            return list(conn.execute(select(Alert.event).where(Alert.group_id == group_id).order_by(Alert.id))
                        .scalars())

    def activity(group_id: int) -> list[tuple]:
        with engine.connect() as conn:
            return [(a.actor, a.state, json.loads(a.detail).get("why")) for a in conn.execute(
                select(GroupActivity).where(GroupActivity.group_id == group_id, GroupActivity.kind == "state")
                .order_by(GroupActivity.id))]

    try:
        terminated = entry(fail(copied=False)).group_id
        assert (group(terminated).reason, group(terminated).key) == (
            "terminated", "Terminated by the consumer (no reason given).")
        state(terminated, state="resolved", resolved_in="v7")

        # Terminated, its copy 3 s later: the entry ends in the copy's group; the resolved group stays so.
        moved = entry(fail(copied=True))
        assert moved.group_id != terminated and moved.error == "card 2 declined"
        found = group(terminated)
        assert (found.state, found.resolved_in, found.open_count) == ("resolved", "v7", 1)
        assert alerts(terminated) == ["group.new"]
        assert activity(terminated) == [("token:oncall", "resolved", None)]

        # Ignored until 2 more failures: two that pass through count for nothing.
        state(terminated, state="ignored", until_count=2)
        fail(copied=True)
        fail(copied=True)
        found = group(terminated)
        assert (found.state, found.ignored_seen, found.ignored_until_count, found.open_count) == ("ignored", 0, 2, 1)
        # Until 1 more: the one that passes through opens it, and is taken back when its copy comes.
        state(terminated, state="ignored", until_count=1, assignee="alice")
        fail(copied=True)
        found = group(terminated)
        assert (found.state, found.ignored_seen, found.ignored_until_count, found.assignee) == (
            "ignored", 0, 1, "alice")
        assert alerts(terminated) == ["group.new"]
        assert [a[:2] for a in activity(terminated)] == [("token:oncall", s) for s in ("resolved", "ignored", "ignored")]

        # A failure that stays in the group ends the ignore, as it should.
        fail(copied=False)
        found = group(terminated)
        assert (found.state, found.open_count) == ("open", 2)
        assert activity(terminated)[-1] == ("mirror", "open", "count")
        assert alerts(terminated) == ["group.new", "group.reopened"]
    finally:
        rt.stop()
