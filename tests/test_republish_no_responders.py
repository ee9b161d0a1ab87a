"""A publish answered by "no responders" while a stream stores its subject (a cluster recovering
from a frozen node answers so for a while) is NATS not answering, not "no stream": the republish
keeps its msgId and is completed with it later, once. Against a real nats-server, whose ORDERS
stream stores the subject throughout; the first publish is answered by no responders."""

from __future__ import annotations

import nats.js.errors
import pytest
from sqlalchemy import func, select

from dlq_dashboard.actions import publishing, recovery
from dlq_dashboard.actions.bulk import jobs, work
from dlq_dashboard.db.models import Republish

from . import support

pytestmark = pytest.mark.both_databases


def intents(rt, state: str) -> list[str]:
    with rt.engine.connect() as conn:
        return list(conn.execute(select(Republish.msg_id).where(Republish.state == state)).scalars())


def test_a_republish_answered_by_no_responders_while_its_stream_exists_waits_for_nats(app, rt, nats_server,
                                                                                    tokens, monkeypatch):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-1"}'])
    rt.jobs.stop()  # no recovery pass meanwhile: this test's completes it
    real, answered = publishing.publish_acked, []

    async def no_responders_once(*args, **kwargs):
        if not answered:
            answered.append(1)
            raise nats.js.errors.NoStreamResponseError
        return await real(*args, **kwargs)

    monkeypatch.setattr(publishing, "publish_acked", no_responders_once)
    response = app.test_client().post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                                      headers=support.bearer(tokens["operator"]))
    assert response.status_code == 503, response.get_json()
    assert "NATS did not answer" in response.get_json()["error"]
    assert "No stream stores" not in response.get_json()["error"]
    [msg_id] = intents(rt, "pending")  # kept with its msgId, not failed
    assert intents(rt, "failed") == [] and support.stream_messages(nats_server.url) == []

    assert recovery.recover_pending(rt) == 1
    [stored] = support.stream_messages(nats_server.url)
    assert stored.headers["Nats-Msg-Id"] == msg_id and intents(rt, "published") == [msg_id]
    assert rt.store.get_entry(entry_id).status == "republished"


def test_a_job_whose_window_is_answered_by_no_responders_completes_each_item_once(app, rt, nats_server,
                                                                                 monkeypatch):
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-%d"}' % i for i in range(40)],
                                     subject="orders.created.3")
    real, answered = work.publish_window, []

    async def first_window_unanswered(js, messages, timeout):
        messages = list(messages)
        if not answered:  # nothing sent: nobody responded
            answered.append(len(messages))
            return [nats.js.errors.NoStreamResponseError() for _ in messages]
        return await real(js, messages, timeout)

    monkeypatch.setattr(work, "publish_window", first_window_unanswered)
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=ids)
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s,
                              timeout=30, message="the job to finish")
    assert answered and status["done"] == 40 and status["failed"] == 0, status
    published = support.stream_messages(nats_server.url)
    assert len(published) == 40 and len({m.headers["Nats-Msg-Id"] for m in published}) == 40
    with rt.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Republish)
                            .where(Republish.state != "published")).scalar() == 0
