"""Stale data is visible: the liveness probe finds a frozen or stopped nats-server within about a
second, no request waits on it longer than that, the banner says so (and how far the mirror is
behind), and republishing stays exactly once through it all. Against a real nats-server, frozen
with SIGSTOP (it keeps its TCP connection, so the client alone would not notice for minutes)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from contextlib import contextmanager
from typing import Iterator
from unittest.mock import patch

import pytest
from sqlalchemy import select

from dlq_dashboard import create_app
from dlq_dashboard.actions.recovery import recover_pending
from dlq_dashboard.db.models import Entry, Republish
from dlq_dashboard.nats.bridge import NatsUnavailable
from dlq_dashboard.runtime import runtime_of

from . import support
from .support import frozen
from .test_times_shown import assert_one_format

# What the issue asks: NATS liveness known within about a second (the probe's ping interval plus
# the time it waits for an answer, 0.25 + 0.75 s); a request refused at once while it is known
# (sent_to_nats: it sends nothing to the server); a request already waiting released when it
# becomes known. The bounds leave room for a busy CI.
DECLARED_WITHIN = 2.0
RELEASED_WITHIN = 2.0
PAYLOAD = b'{"order_id": "o-1", "customer_id": "c-1"}'


@contextmanager
def sent_to_nats(rt) -> Iterator[list[str]]:
    """What this thread sends to the bridge's event loop meanwhile (the coroutines' names). A
    request answered at once while NATS is known down sends nothing there, so nothing of it waits
    on the server: that, not a wall-clock bound, is what "at once" asserts (a loaded machine
    stretches any bound). The Flask test client serves a request in the calling thread."""
    sent, me, real = [], threading.current_thread(), asyncio.run_coroutine_threadsafe

    def spy(coro, loop):
        if threading.current_thread() is me and loop is rt.bridge.loop:
            sent.append(getattr(coro, "__qualname__", repr(coro)))
        return real(coro, loop)

    with patch.object(asyncio, "run_coroutine_threadsafe", spy):  # bridge.py looks it up at each call
        yield sent


def timed(call):
    """(what ``call`` returns, the seconds it took)."""
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def entry_row(rt, entry_id):
    with rt.engine.connect() as conn:
        return tuple(conn.execute(select(Entry.status, Entry.version).where(Entry.id == entry_id)).one())


def intents_of(rt, entry_id):
    with rt.engine.connect() as conn:
        return conn.execute(select(Republish).where(Republish.entry_id == entry_id).order_by(Republish.id)).all()


def declared_unreachable(rt) -> float:
    """Wait for the probe to give up on the server; the seconds that took."""
    _, took = timed(lambda: support.wait_for(lambda: not rt.bridge.state.connected, timeout=10,
                                             message="the probe to declare NATS unreachable"))
    return took


def usable_again(rt) -> None:
    support.wait_for(lambda: rt.bridge.state.connected, timeout=30, message="NATS to be usable again")


@pytest.fixture
def orders_entry(app, nats_server):
    """An open entry of orders.created, with stream ORDERS to republish it to."""
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [PAYLOAD])
    return entry_id


# --- the probe -----------------------------------------------------------------------------------

def test_the_probe_declares_a_frozen_server_unreachable_within_about_a_second_and_usable_when_it_thaws(
        app, nats_server):
    rt = runtime_of(app)
    assert rt.bridge.state.connected and rt.bridge.state.unreachable_since is None
    support.wait_for(lambda: rt.bridge.state.rtt_ms is not None, message="the probe's first round trip")
    with frozen(nats_server):
        assert declared_unreachable(rt) < DECLARED_WITHIN
        state = rt.bridge.state
        assert state.unreachable_since is not None
        assert "no answer from NATS" in state.last_error
        assert state.to_dict()["unreachable_since"].endswith("Z")
    usable_again(rt)
    assert rt.bridge.state.unreachable_since is None and rt.bridge.state.last_error is None
    # The connection was never replaced: what the client sent meanwhile is answered on it.
    assert rt.bridge.call(lambda: rt.bridge.js.stream_info(rt.settings.dlq_stream)).config.name == "DLQ"


def test_a_call_waiting_on_a_frozen_server_is_released_when_the_probe_gives_up_and_the_next_is_refused_at_once(
        app, nats_server):
    rt = runtime_of(app)
    with frozen(nats_server):
        started = time.monotonic()
        with pytest.raises(NatsUnavailable, match="stopped waiting"):
            rt.bridge.call(lambda: rt.bridge.js.stream_info("DLQ"), timeout=30)
        assert time.monotonic() - started < RELEASED_WITHIN, "a call waits on a frozen server about a second"
        assert not rt.bridge.state.connected
        with sent_to_nats(rt) as sent, pytest.raises(NatsUnavailable, match="not reachable"):
            rt.bridge.call(lambda: rt.bridge.js.stream_info("DLQ"), timeout=30)
        assert sent == []
    usable_again(rt)


# --- requests while NATS is frozen ----------------------------------------------------------------

def test_while_nats_is_frozen_healthz_the_confirmation_and_a_republish_answer_at_once_and_change_nothing(
        app, nats_server, orders_entry, auth, tokens):
    rt, entry_id = runtime_of(app), orders_entry
    operator = auth.client("operator")
    anonymous = app.test_client()
    with frozen(nats_server):
        # Before the probe has decided, /healthz waits on the stream for less than a second.
        health, took = timed(lambda: anonymous.get("/healthz"))
        assert took < RELEASED_WITHIN, "/healthz never blocks on a frozen server"
        declared_unreachable(rt)

        with sent_to_nats(rt) as sent:
            health = anonymous.get("/healthz")
        assert sent == [] and health.status_code == 503
        body = health.get_json()
        assert body["status"] == "degraded" and body["nats"]["connected"] is False
        assert body["nats"]["unreachable_since"]

        with sent_to_nats(rt) as sent:
            confirm = operator.get(f"/entries/{entry_id}/republish?version=1")
        assert sent == [] and confirm.status_code == 200
        html = confirm.get_data(as_text=True)
        assert "NATS is not reachable" in html and "consumers cannot be listed" in html
        assert re.search(r"<button type=\"submit\" data-needs-nats disabled title=\"NATS is not reachable", html)

        token = support.csrf_token(operator, f"/entries/{entry_id}")
        with sent_to_nats(rt) as sent:
            posted = operator.post(f"/entries/{entry_id}/republish", data={"version": "1", "csrf_token": token})
        assert sent == [] and posted.status_code == 503
        assert "NATS is not reachable" in posted.get_data(as_text=True)

        with sent_to_nats(rt) as sent:
            api = anonymous.post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                                 headers=support.bearer(tokens["operator"]))
        assert sent == [] and api.status_code == 503
        assert "nothing was republished" in api.get_json()["error"]
        assert entry_row(rt, entry_id) == ("open", 1)
        assert {i.state for i in intents_of(rt, entry_id)} == {"failed"}

    usable_again(rt)
    done = anonymous.post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                          headers=support.bearer(tokens["operator"]))
    assert done.status_code == 200, done.get_json()
    assert entry_row(rt, entry_id) == ("republished", 2)
    assert len(support.stream_messages(nats_server.url)) == 1


def test_a_republish_in_flight_when_nats_freezes_is_in_doubt_and_completed_once_after_it_thaws(
        app, nats_server, orders_entry, tokens):
    rt, entry_id, client = runtime_of(app), orders_entry, app.test_client()
    with frozen(nats_server):
        # Sent before the probe has decided: the publish is written, its answer never comes.
        hung, took = timed(lambda: client.post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                                               headers=support.bearer(tokens["operator"])))
        assert took < RELEASED_WITHIN, "the request is released once the probe gives up"
        assert hung.status_code == 503 and "may still arrive" in hung.get_json()["error"]
        [intent] = intents_of(rt, entry_id)
        assert intent.state == "pending"
        assert entry_row(rt, entry_id) == ("open", 1)

    usable_again(rt)
    assert recover_pending(rt) == 1
    assert entry_row(rt, entry_id) == ("republished", 2)
    [intent] = intents_of(rt, entry_id)
    assert intent.state == "published"
    stored = support.stream_messages(nats_server.url)
    assert [m.headers["Nats-Msg-Id"] for m in stored] == [intent.msg_id]


def test_a_stopped_server_is_refused_at_once_and_the_retry_after_it_is_back_publishes_once(
        app, nats_server, orders_entry, tokens):
    rt, entry_id, client = runtime_of(app), orders_entry, app.test_client()
    nats_server.stop()
    declared_unreachable(rt)
    with sent_to_nats(rt) as sent:
        health = client.get("/healthz")
        down = client.post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                           headers=support.bearer(tokens["operator"]))
    assert sent == [] and health.status_code == 503 and down.status_code == 503
    assert entry_row(rt, entry_id) == ("open", 1)

    nats_server.start()
    usable_again(rt)
    retry = client.post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                        headers=support.bearer(tokens["operator"]))
    assert retry.status_code == 200, retry.get_json()
    assert len(support.stream_messages(nats_server.url)) == 1


def test_closing_is_the_databases_decision_and_works_while_nats_is_frozen(app, nats_server, orders_entry, tokens):
    rt, entry_id, client = runtime_of(app), orders_entry, app.test_client()
    with frozen(nats_server):
        declared_unreachable(rt)
        with sent_to_nats(rt) as sent:
            closed = client.post(f"/api/entries/{entry_id}/close", json={"version": 1},
                                 headers=support.bearer(tokens["operator"]))
        assert closed.status_code == 200, closed.get_json()
    assert sent == [], "the close waited on NATS"
    assert entry_row(rt, entry_id) == ("closed", 2)


def test_with_delete_on_close_closing_is_refused_at_once_while_nats_is_frozen(make_app, nats_server):
    app = make_app(online=True, delete_on_close=True)
    rt = runtime_of(app)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [PAYLOAD])
    operator = support.logged_in(app, "operator")
    with frozen(nats_server):
        declared_unreachable(rt)
        page = operator.get(f"/entries/{entry_id}").get_data(as_text=True)
        assert re.search(r'data-needs-nats disabled title="NATS is not reachable[^"]*">Close</button>', page)
        token = support.csrf_token(operator, f"/entries/{entry_id}")
        with sent_to_nats(rt) as sent:
            refused = operator.post(f"/entries/{entry_id}/close", data={"version": "1", "csrf_token": token})
        assert sent == [] and refused.status_code == 503
        assert "nothing was closed" in refused.get_data(as_text=True)
    assert entry_row(rt, entry_id) == ("open", 1)


# --- the banner -----------------------------------------------------------------------------------

def banner(client) -> str:
    response = client.get("/status/banner")
    assert response.status_code == 200
    return response.get_data(as_text=True)


def test_the_banner_is_empty_while_all_is_well_and_says_since_when_nats_is_unreachable(app, nats_server, auth):
    rt, viewer = runtime_of(app), auth.client("viewer")
    assert 'data-nats-state="up"' in banner(viewer) and "stale" not in banner(viewer)
    assert app.test_client().get("/status/banner").status_code == 302, "the banner needs a login"
    with frozen(nats_server):
        declared_unreachable(rt)
        text = banner(viewer)
        assert 'data-nats-state="down"' in text and 'NATS is not reachable</strong> <span class="since-exact">since' in text
        assert "no answer from NATS" in text
        assert assert_one_format(text, "the banner") == 1  # its time as every page shows one
        # Every page carries it from its first render too.
        assert 'NATS is not reachable</strong> <span class="since-exact">since' in viewer.get("/").get_data(as_text=True)
    usable_again(rt)
    assert "NATS is not reachable" not in banner(viewer)


def test_streams_stuck_with_one_error_are_one_line_of_the_banner(offline_app, auth, monkeypatch):
    """With NATS away the DLQ and its advisories are stuck alike: two lines saying one thing took
    a third of a phone's screen (334 of 844 px with the NATS line)."""
    from dlq_dashboard.times import utcnow
    from dlq_dashboard.web import status

    now = utcnow()
    stuck = (status.StreamStuck("DLQ", "TimeoutError: nats: timeout", now, 12),
             status.StreamStuck("DLQ_ADVISORIES", "TimeoutError: nats: timeout", now, 3),
             status.StreamStuck("DLQ_OTHER", "OperationalError: database or disk is full", now, 0))
    monkeypatch.setattr(status, "service_status", lambda rt: status.ServiceStatus(True, None, None, (), stuck))
    text = re.sub(r"\s+", " ", banner(auth.client("viewer")))
    assert text.count('data-stale="mirror"') == 2
    assert "The mirror is stuck on streams DLQ and DLQ_ADVISORIES</strong>" in text
    assert "15 messages of the streams not mirrored yet" in text
    assert "The mirror is stuck on stream DLQ_OTHER</strong>" in text and "database or disk is full" in text


def test_the_banner_says_how_far_the_mirror_is_behind_while_its_writer_is_held(tmp_path, nats_server):
    app = create_app({"SETTINGS": support.make_settings(tmp_path, nats_server.url, mirror_stale_after=0.5),
                      "TESTING": True})
    rt = runtime_of(app).start()
    try:
        assert rt.bridge.wait_connected(10)
        support.wait_for(lambda: all(p.epoch for p in rt.mirror.progress.values()), message="the mirror")
        support.dead_letter_orders(app, nats_server.url, [PAYLOAD])
        viewer = support.logged_in(app, "viewer")
        assert "The list is behind" not in banner(viewer)

        with support.writer_stopped(rt):  # the mirror receives, nothing is committed
            support.run(support.publish_fast(nats_server.url, "dlq.orders.created", 20,
                                             lambda i: (PAYLOAD, support.dlq_headers())))
            text = support.wait_for(lambda: "The list is behind" in (t := banner(viewer)) and t,
                                    timeout=20, message="the banner to say the mirror lags")
            assert "20 messages of stream DLQ not mirrored yet" in text and "the oldest waiting since" in text
            health = app.test_client().get("/healthz").get_json()
            assert health["mirror"]["streams"]["DLQ"]["lag"] == 20
            assert health["mirror"]["streams"]["DLQ"]["behind_since"]
        support.wait_for(lambda: "The list is behind" not in banner(viewer), timeout=30,
                         message="the banner to go once the mirror caught up")
        assert support.entry_count(rt.engine) == 21
    finally:
        rt.stop()


def test_a_job_that_waits_for_nats_says_so_instead_of_an_eta_from_its_past_rate(app, nats_server, auth):
    """Its page said "Running" with "about 53 s" left, worked out from before the outage: only the
    banner said that nothing could move."""
    from dlq_dashboard.actions.bulk import jobs

    rt = runtime_of(app)
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-%d"}' % i for i in range(5)])
    viewer = auth.client("viewer")
    with frozen(nats_server):
        declared_unreachable(rt)
        job_id = jobs.create_job(rt, "republish", actor="alice", ids=ids)
        support.wait_for(lambda: jobs.job_status(rt, job_id, limit=0)["state"] == "running", message="the job to run")
        status = jobs.job_status(rt, job_id, limit=0)
        assert (status["waits_for"], status["pending"]) == (["default"], 5)
        page = re.sub(r"\s+", " ", viewer.get(f"/jobs/{job_id}").get_data(as_text=True))
        assert '<dd class="job-waits-for">NATS: its items wait, nothing is lost</dd>' in page
        assert '<dd class="job-eta">when NATS answers again</dd>' in page
    usable_again(rt)
    done = support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s, timeout=30,
                            message="the job to finish once NATS answers")
    assert (done["done"], done["waits_for"]) == (5, [])
    assert len(support.stream_messages(nats_server.url)) == 5
