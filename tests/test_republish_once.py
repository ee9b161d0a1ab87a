"""Exactly once past the duplicate window, whoever completes a republish a crash left pending:
the recovery pass, a retried request, or the resumed job itself. Past the window the broker no
longer recognises the msgId, so each looks for the message in its stream first (actions/stored.py).
Against a real nats-server, its stream's window made one second long."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from dlq_dashboard.accounts import create_token
from dlq_dashboard.actions import publishing, recovery
from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.actions.bulk.runner import JobRunner
from dlq_dashboard.actions.republish import republish_entry
from dlq_dashboard.db.models import Republish
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support

pytestmark = pytest.mark.both_databases

WINDOW = 1.0  # seconds: the ORDERS stream's duplicate window


class SimulatedCrash(Exception):
    """Raised where the process would die: after the publish, before its outcome is recorded."""


def crash_after_publish(monkeypatch, sent: set[int] | None = None) -> None:
    """Crash after the publish (of ``sent``'s entries; None: every one), before it for the others."""
    def fault(where, intent):
        if where == ("after_publish" if sent is None or intent.entry_id in sent else "after_intent"):
            raise SimulatedCrash(where)

    monkeypatch.setattr(publishing, "fault_point", fault)


def forgotten_by_the_broker(since, at_least: float = 0.0) -> None:
    """Wait until the stream's duplicate window (and ``at_least`` seconds) has passed since
    ``since``: a publish with the same msgId would be stored again."""
    support.wait_for(lambda: utcnow() - since > timedelta(seconds=max(WINDOW * 1.5, at_least + 0.5)), timeout=20,
                     message="the duplicate window to pass")


def half_sent_before_a_crash(app, rt, nats_server, monkeypatch, count: int) -> None:
    """``count`` entries republished, every other one published before a crash and the rest never
    sent, all pending, their stream's duplicate window passed since; no recovery pass but the test's."""
    support.make_orders_stream(nats_server.url, duplicate_window=WINDOW)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-%d"}' % i for i in range(count)])
    rt.jobs.stop()  # the test's passes are the only ones
    crash_after_publish(monkeypatch, set(ids[::2]))
    crashed_at = utcnow()
    for entry_id in ids:
        with pytest.raises(SimulatedCrash):
            republish_entry(rt, entry_id, 1, actor="alice")
    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    assert pending(rt) == count and len(support.stream_messages(nats_server.url)) == count // 2
    forgotten_by_the_broker(crashed_at)


def pending(rt) -> int:
    with rt.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Republish).where(Republish.state == "pending")).scalar()


def test_a_retried_request_past_the_window_finds_the_message_and_sends_nothing(make_app, nats_server, database_url,
                                                                              monkeypatch):
    """A crash left the publish pending; the operator's retry published it a second time. (A
    pending intent younger than a publish can take is taken as another process's, in flight: a
    request timeout of one second lets the retry come soon.)"""
    app = make_app(online=True, request_timeout=1.0)
    rt = runtime_of(app)
    token = create_token(rt.engine, "test-operator", "operator")
    support.make_orders_stream(nats_server.url, duplicate_window=WINDOW)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-1"}'])
    rt.jobs.stop()  # no recovery pass: the retry alone completes it
    crash_after_publish(monkeypatch)
    crashed_at = utcnow()
    with pytest.raises(SimulatedCrash):
        republish_entry(rt, entry_id, 1, actor="alice")
    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    forgotten_by_the_broker(crashed_at, rt.settings.request_timeout + 5)

    response = app.test_client().post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                                      headers=support.bearer(token))
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["publish"]["duplicate"] is True
    assert len(support.stream_messages(nats_server.url)) == 1
    assert rt.store.get_entry(entry_id).status == "republished" and pending(rt) == 0


def test_a_job_resumed_past_the_window_sends_nothing_its_crash_had_sent(app, rt, nats_server, monkeypatch):
    """A job resumed before any recovery pass (NATS not answering yet when the dashboard started,
    or another process's job whose lease ran out) published its pending intents again."""
    support.make_orders_stream(nats_server.url, duplicate_window=WINDOW)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-%d"}' % i for i in range(30)])
    crash_after_publish(monkeypatch)
    crashed_at = utcnow()
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=ids)
    rt.jobs.join(job_id, timeout=30)
    assert len(support.stream_messages(nats_server.url)) > 0 and pending(rt) > 0
    sent_before = len(support.stream_messages(nats_server.url))
    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    rt.jobs.stop()
    forgotten_by_the_broker(crashed_at)

    rt.jobs = JobRunner(rt)  # no recovery pass: the job alone completes what it left pending
    rt.jobs.submit(job_id)
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s,
                              timeout=30, message="the resumed job to finish")
    assert status["done"] == 30 and pending(rt) == 0
    published = support.stream_messages(nats_server.url)
    assert len(published) == 30 and len({m.headers["Nats-Msg-Id"] for m in published}) == 30
    # What the crash had sent was found in the stream (the broker no longer knew its msgIds), not sent again.
    with rt.engine.connect() as conn:
        found = conn.execute(select(func.count()).select_from(Republish).where(Republish.duplicate.is_(True))).scalar()
    assert found == sent_before


def test_a_recovery_pass_looks_for_every_pending_republish_in_one_read_of_the_stream(app, rt, nats_server,
                                                                                     monkeypatch):
    """Each intent read its subject afresh (and waited a second for a message past the last): a
    crash that left 2,000 pending took six minutes to recover, its job frozen meanwhile."""
    half_sent_before_a_crash(app, rt, nats_server, monkeypatch, 40)
    reads = []
    real = recovery.find_stored_many

    async def counted(js, intents):
        reads.append(len(intents))
        return await real(js, intents)

    monkeypatch.setattr(recovery, "find_stored_many", counted)
    assert recovery.recover_pending(rt) == 40
    assert reads == [40]  # one search for the source's forty
    published = support.stream_messages(nats_server.url)
    assert len(published) == 40 and len({m.headers["Nats-Msg-Id"] for m in published}) == 40
    assert pending(rt) == 0


def test_a_search_whose_messages_are_slow_to_come_leaves_the_republishes_pending_not_sent_twice(
        app, rt, nats_server, monkeypatch):
    """The search waited a second for each message and took none coming for "not stored": on a
    loaded machine the stream's first message came later, and the recovery published again
    messages the stream held past their duplicate window (45 of 40 stored)."""
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js.client import JetStreamContext

    half_sent_before_a_crash(app, rt, nats_server, monkeypatch, 10)

    async def slow(self, timeout=1.0):  # the stream's messages not come yet, whatever the wait
        raise NatsTimeout

    with monkeypatch.context() as patched:
        patched.setattr(JetStreamContext.PushSubscription, "next_msg", slow)
        assert recovery.recover_pending(rt) == 0  # no answer: nothing finished, nothing sent
    assert pending(rt) == 10 and len(support.stream_messages(nats_server.url)) == 5
    assert recovery.recover_pending(rt) == 10  # the next pass, answered
    published = support.stream_messages(nats_server.url)
    assert len(published) == 10 and len({m.headers["Nats-Msg-Id"] for m in published}) == 10
    assert pending(rt) == 0
