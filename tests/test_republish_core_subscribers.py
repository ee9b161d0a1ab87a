"""A republish goes to a stream, and only a stream's PubAck says it was stored. A subject no
stream stores may still have plain core-NATS subscribers (one answering, one not): the republish
is refused before anything is sent, or, when the stream went away between the check and the
publish, ends failed with the reason, never left pending and sent again by every recovery pass.
And a recovery pass is not held by one republish that waits, and says so once. Against a real
nats-server and real core subscribers."""

from __future__ import annotations

import asyncio
import logging
import threading

import nats
import pytest
from sqlalchemy import select

from dlq_dashboard.actions import publishing, recovery
from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.actions.republish import republish_entry
from dlq_dashboard.actions.streams import stream_of
from dlq_dashboard.db.models import Republish
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases


class CoreSubscriber:
    """A plain core-NATS subscriber of ``subject`` on a loop of its own (not JetStream), which
    answers each message with ``reply`` when given."""

    def __init__(self, url: str, subject: str, reply: bytes | None = None):
        self.url, self.subject, self.reply = url, subject, reply
        self.received: list = []
        self._ready, self._stop = threading.Event(), None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)

    async def _serve(self) -> None:
        nc = await nats.connect(self.url)
        self._stop = asyncio.Event()

        async def take(msg) -> None:
            self.received.append(msg)
            if self.reply is not None and msg.reply:
                await nc.publish(msg.reply, self.reply)

        await nc.subscribe(self.subject, cb=take)
        await nc.flush()
        self._loop = asyncio.get_running_loop()
        self._ready.set()
        await self._stop.wait()
        await nc.close()

    def __enter__(self) -> "CoreSubscriber":
        self._thread.start()
        assert self._ready.wait(10), "the core subscriber did not start"
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def intents(rt, entry_id: int) -> list[tuple[str, str | None]]:
    with rt.engine.connect() as conn:
        return [(r.state, r.error) for r in conn.execute(
            select(Republish.state, Republish.error).where(Republish.entry_id == entry_id).order_by(Republish.id))]


def delete_stream(url: str, name: str) -> None:
    async def delete():
        nc = await nats.connect(url)
        try:
            await nc.jetstream().delete_stream(name)
        finally:
            await nc.close()

    support.run(delete())


def answering(url: str, name: str, subjects: list[str]) -> None:
    """Stream ``name`` answers its publishes from now on (no_ack off)."""
    async def update():
        nc = await nats.connect(url)
        try:
            await nc.jetstream().update_stream(name=name, subjects=subjects, no_ack=False)
        finally:
            await nc.close()

    support.run(update())


def crash_after_intent(monkeypatch) -> None:
    """The process dies once the intent is committed, before the publish: the intent stays pending."""
    def fault(where, intent):
        if where == "after_intent":
            raise RuntimeError("crashed")

    monkeypatch.setattr(publishing, "fault_point", fault)


def post_republish(app, tokens, entry_id: int):
    return app.test_client().post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                                  headers=support.bearer(tokens["operator"]))


def test_a_subject_only_core_subscribers_hear_is_refused_before_anything_is_sent(app, rt, nats_server, tokens,
                                                                                database_url):
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [b'{"n": 1}'], subject="nostream.x")
    with CoreSubscriber(nats_server.url, "nostream.>") as heard:
        response = post_republish(app, tokens, entry_id)
        assert response.status_code == 422, response.get_json()
        assert "No stream stores subject nostream.x" in response.get_json()["error"]
        assert heard.received == []
    assert intents(rt, entry_id) == [] and rt.store.get_entry(entry_id).status == "open"
    closed = app.test_client().post(f"/api/entries/{entry_id}/close", json={"version": 1},
                                    headers=support.bearer(tokens["operator"]))
    assert closed.status_code == 200, closed.get_json()


@pytest.mark.parametrize("reply", [None, b'{"ok": true}'], ids=["silent", "answering"])
def test_a_stream_removed_between_the_check_and_the_publish_ends_the_republish_failed_with_why(
        app, rt, nats_server, tokens, database_url, reply):
    support.make_stream(nats_server.url, "GONE", ["nostream.>"])
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [b'{"n": 1}'], subject="nostream.x")
    assert stream_of(rt, "nostream.x") == (True, "GONE")  # remembered: the next check takes it
    delete_stream(nats_server.url, "GONE")
    with CoreSubscriber(nats_server.url, "nostream.>", reply) as heard:
        response = post_republish(app, tokens, entry_id)
        assert response.status_code == 422, response.get_json()
        error = response.get_json()["error"]
        if reply is None:
            assert "No JetStream stream answered the publish to nostream.x, and none stores the subject" in error
        else:
            assert "The subject nostream.x answered, but not as a JetStream stream: '{\"ok\": true}'" in error
        assert len(heard.received) == 1
    [(state, why)] = intents(rt, entry_id)
    assert state == "failed" and why in error
    assert rt.store.get_entry(entry_id).status == "open"
    assert recovery.recover_pending(rt) == 0  # nothing left to send again


def test_recovery_ends_a_pending_republish_whose_subject_no_stream_stores_instead_of_sending_it_again(
        app, rt, nats_server, tokens, database_url, monkeypatch):
    rt.jobs.stop()  # no background pass meanwhile: this test's runs it
    support.make_stream(nats_server.url, "GONE", ["nostream.>"])
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [b'{"n": 1}'], subject="nostream.x")
    crash_after_intent(monkeypatch)
    with pytest.raises(RuntimeError):
        republish_entry(rt, entry_id, 1, actor="alice")
    monkeypatch.undo()
    assert [s for s, _ in intents(rt, entry_id)] == ["pending"]
    delete_stream(nats_server.url, "GONE")
    with CoreSubscriber(nats_server.url, "nostream.>") as heard:
        assert recovery.recover_pending(rt) == 1
        assert heard.received == []
    [(state, why)] = intents(rt, entry_id)
    assert state == "failed" and "No stream stores subject nostream.x" in why
    closed = app.test_client().post(f"/api/entries/{entry_id}/close", json={"version": 1},
                                    headers=support.bearer(tokens["operator"]))
    assert closed.status_code == 200, closed.get_json()


def test_a_job_refuses_the_items_whose_subject_no_stream_stores_and_sends_them_nowhere(app, rt, nats_server,
                                                                                     database_url):
    support.make_orders_stream(nats_server.url)
    lost = support.dead_letter_orders(app, nats_server.url, [b'{"n": %d}' % i for i in range(3)], subject="nostream.x")
    kept = support.dead_letter_orders(app, nats_server.url, [b'{"n": %d}' % i for i in range(2)])
    with CoreSubscriber(nats_server.url, "nostream.>") as heard:
        job_id = jobs.create_job(rt, "republish", actor="alice", ids=lost + kept)
        status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s,
                                  timeout=30, message="the job to finish")
        assert (status["done"], status["failed"]) == (2, 3), status
        assert heard.received == []
    assert len(support.stream_messages(nats_server.url)) == 2


def waiting_behind_a_quiet_stream(make_app, nats_server, monkeypatch):
    """(runtime, the entry whose republish waits, a later one's): both intents pending (a crash
    after each was committed), the older one to a stream that stores but never answers (no_ack)."""
    app = make_app(online=True, request_timeout=1.0)
    support.recovered_first(app)
    rt = runtime_of(app)
    rt.jobs.stop()  # no background pass meanwhile: the test's run
    support.make_orders_stream(nats_server.url)
    support.make_stream(nats_server.url, "QUIET", ["quiet.>"], no_ack=True)
    [quiet] = support.dead_letter_orders(app, nats_server.url, [b'{"n": 1}'], subject="quiet.x")
    [orders] = support.dead_letter_orders(app, nats_server.url, [b'{"n": 2}'])
    crash_after_intent(monkeypatch)
    for entry_id in (quiet, orders):
        with pytest.raises(RuntimeError):
            republish_entry(rt, entry_id, 1, actor="alice")
    monkeypatch.undo()
    return rt, quiet, orders


def test_a_republish_that_waits_does_not_hold_the_later_ones_of_its_source(make_app, nats_server, database_url,
                                                                          monkeypatch):
    rt, quiet, orders = waiting_behind_a_quiet_stream(make_app, nats_server, monkeypatch)
    assert recovery.recover_pending(rt) == 1
    assert [s for s, _ in intents(rt, orders)] == ["published"]
    assert [s for s, _ in intents(rt, quiet)] == ["pending"]
    assert len(support.stream_messages(nats_server.url)) == 1


def test_a_republish_that_waits_is_logged_once_and_once_when_it_ends(make_app, nats_server, database_url,
                                                                    monkeypatch, caplog):
    rt, quiet, _ = waiting_behind_a_quiet_stream(make_app, nats_server, monkeypatch)
    with caplog.at_level(logging.WARNING, logger=recovery.__name__):
        for _ in range(3):
            recovery.recover_pending(rt)
        assert [s for s, _ in intents(rt, quiet)] == ["pending"]
        answering(nats_server.url, "QUIET", ["quiet.>"])
        support.wait_for(lambda: recovery.recover_pending(rt) == 1, timeout=20, message="the republish to end")
    told = [r.getMessage() for r in caplog.records if r.name == recovery.__name__]
    assert len([m for m in told if "waiting for NATS" in m]) == 1, told
    assert len([m for m in told if "was completed" in m]) == 1, told
    assert [s for s, _ in intents(rt, quiet)] == ["published"]
