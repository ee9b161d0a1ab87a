"""Alerts: a new failure group and a spike reach every webhook, signed, written to the outbox
with the entries and sent after, retried with the same id until a webhook takes them, across
restarts, without ever slowing the mirror; one sender whatever the replicas."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys

import pytest
from sqlalchemy import select

from dlq_dashboard import create_app
from dlq_dashboard.alerts.outbox import AlertRule, raise_alerts
from dlq_dashboard.alerts.sender import AlertSender, backoff
from dlq_dashboard.db.counts import group_ids
from dlq_dashboard.db.engine import create_db_engine, dispose_quietly, write_transaction
from dlq_dashboard.db.migrate import migrate
from dlq_dashboard.db.models import Alert, FailureGroup
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.nats.server import free_port
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support

SECRET = "webhook-secret"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_app(tmp_path, nats_server, database_url, urls, **changes):
    """The app with its mirror and alert sender, alerting ``urls`` (fast retries for the tests)."""
    settings = support.make_settings(tmp_path, nats_server.url, database_url=database_url, webhook_urls=tuple(urls),
                                     webhook_secret=SECRET, alert_poll=0.1, alert_first_retry=0.3, **changes)
    app = create_app({"SETTINGS": settings, "TESTING": True})
    rt = runtime_of(app)
    rt.start()
    assert rt.bridge.wait_connected(10), "the bridge did not connect"
    support.wait_for(lambda: all(p.epoch for p in rt.mirror.progress.values()), message="the mirror to start")
    return app


def dead_letter(nats_server, count: int, error: str, subject: str = "orders.created") -> None:
    headers = support.dlq_headers(subject, Dlq_Reason="fatal", Dlq_Error=error)
    support.run(support.publish_fast(nats_server.url, f"dlq.{subject}", count,
                                     lambda i: (json.dumps({"order": i}).encode(), dict(headers))))


def signed(headers: dict, body: bytes) -> bool:
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["x-dlq-signature"], expected)


def outbox(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(select(Alert).order_by(Alert.id)).all()


@pytest.mark.both_databases
def test_a_new_failure_group_reaches_the_webhook_once_signed_and_retried_with_the_same_id(
        tmp_path, nats_server, database_url, receiver):
    hook = receiver([500])
    app = start_app(tmp_path, nats_server, database_url, [hook.url])
    try:
        dead_letter(nats_server, 3, "customer 17 not found")
        support.wait_for(lambda: len(hook.requests) >= 2, timeout=30, message="the refused alert to be sent again")
        (first_headers, first_body), (retry_headers, retry_body) = hook.requests[:2]
        assert first_body == retry_body and first_headers["x-dlq-event-id"] == retry_headers["x-dlq-event-id"]
        assert signed(retry_headers, retry_body) and retry_headers["content-type"] == "application/json"
        alert = json.loads(retry_body)
        assert alert["event"] == "group.new" and alert["id"] == retry_headers["x-dlq-event-id"]
        assert alert["group"]["subject"] == "orders.created" and alert["group"]["reason"] == "fatal"
        assert alert["group"]["key"] == "customer <id> not found" and alert["group"]["count"] >= 1
        assert alert["group"]["first_seen"].endswith("Z") and alert["group"]["last_seen"].endswith("Z")
        # The group's page (SPEC section 9: "url opens the group"), not the list of its entries.
        assert alert["url"] == f"/groups/{alert['group']['id']}"
        assert "\n" not in alert["text"] and "orders.created" in alert["text"]
        assert "customer &lt;id&gt; not found" in alert["text"]  # as Slack wants <, > written

        # More of the same cause is no new group; another cause is, and it is sent after them.
        dead_letter(nats_server, 5, "customer 18 not found")
        dead_letter(nats_server, 1, "warehouse closed")
        # The later group's alert is due after any the earlier writes raised: once it is here, they would be.
        support.wait_for(lambda: len(hook.alerts("group.new")) == 3, timeout=30, message="the second group's alert")
        ids = [b["id"] for _, b in hook.alerts("group.new")]
        assert len(set(ids)) == 2 and hook.alerts("group.spike") == []
        row = [r for r in outbox(runtime_of(app).engine) if r.event_id == ids[0]][0]
        assert row.attempts == 2 and row.sent_at is not None and row.last_error == "HTTP 500 Internal Server Error"
    finally:
        runtime_of(app).stop()


@pytest.mark.both_databases
def test_a_spike_past_the_threshold_raises_one_group_spike(tmp_path, nats_server, database_url, receiver):
    hook = receiver()
    app = start_app(tmp_path, nats_server, database_url, [hook.url], alert_threshold=5,
                    public_url="https://dlq.example.com")
    try:
        dead_letter(nats_server, 12, "payment gateway timeout")
        support.wait_for(lambda: hook.alerts("group.spike"), timeout=30, message="the spike alert")
        # The flood goes on: no second spike within 5 minutes.
        dead_letter(nats_server, 10, "payment gateway timeout")
        dead_letter(nats_server, 1, "an unrelated failure")
        support.wait_for(lambda: len(hook.alerts("group.new")) == 2, timeout=30, message="the marker group's alert")
        spikes = hook.alerts("group.spike")
        assert len(spikes) == 1
        headers, spike = spikes[0]
        assert signed(headers, json.dumps(spike, ensure_ascii=False, separators=(",", ":")).encode())
        assert spike["spike"]["threshold"] == 5 and spike["spike"]["count"] >= 5
        assert spike["url"] == f"https://dlq.example.com/groups/{spike['group']['id']}"
        assert spike["text"].startswith("Failure spike on orders.created, fatal:")
        assert spike["text"].endswith(spike["url"])
    finally:
        runtime_of(app).stop()


@pytest.mark.both_databases
def test_an_alert_refused_before_a_restart_is_delivered_after_it_with_the_same_id(
        tmp_path, nats_server, database_url, receiver):
    hook = receiver(["close"] * 1000)  # hangs up on every POST until told otherwise
    app = start_app(tmp_path, nats_server, database_url, [hook.url])
    dead_letter(nats_server, 2, "stock reservation failed")
    support.wait_for(lambda: hook.requests, timeout=30, message="the first attempt")
    runtime_of(app).stop()
    (refused_headers, refused_body), = hook.requests[:1]
    with hook._lock:
        hook.answers.clear()

    app = start_app(tmp_path, nats_server, database_url, [hook.url])
    try:
        support.wait_for(lambda: outbox(runtime_of(app).engine)[0].sent_at, timeout=30,
                         message="the alert to be delivered after the restart")
        delivered_headers, delivered_body = hook.requests[-1]
        assert delivered_headers["x-dlq-event-id"] == refused_headers["x-dlq-event-id"]
        assert delivered_body == refused_body and signed(delivered_headers, delivered_body)
        rows = outbox(runtime_of(app).engine)
        assert len(rows) == 1 and rows[0].attempts >= 2  # the restart made no second alert
    finally:
        runtime_of(app).stop()


@pytest.mark.both_databases
def test_an_unreachable_webhook_keeps_the_alert_pending_with_its_error(tmp_path, nats_server, database_url):
    closed = f"http://127.0.0.1:{free_port(39000)}/hook"
    app = start_app(tmp_path, nats_server, database_url, [closed, "http://nonexistent.invalid/hook"])
    try:
        dead_letter(nats_server, 1, "tax service down")
        engine = runtime_of(app).engine
        # One read each time: all() of no rows is true, so the alerts must be there in that read.
        support.wait_for(lambda: len(rows := outbox(engine)) == 2 and all(r.attempts >= 2 for r in rows),
                         timeout=60, message="two failed attempts at each URL")
        refused, unresolved = outbox(engine)
        assert refused.event_id == unresolved.event_id
        assert refused.sent_at is None and refused.last_error == "connection refused"
        assert unresolved.sent_at is None and unresolved.last_error.startswith("the host name does not resolve")
        assert refused.next_attempt_at > refused.created_at
        metrics = app.test_client().get("/metrics").get_data(as_text=True)
        assert 'dlq_alerts{event="group.new",state="pending"} 2.0' in metrics
        failed = next(line for line in metrics.splitlines() if line.startswith("dlq_alert_failed_attempts_total"))
        assert float(failed.split()[-1]) >= 4
        assert "dlq_alert_sender_leader 1.0" in metrics
    finally:
        runtime_of(app).stop()


def test_a_webhook_that_hangs_does_not_slow_the_mirror(tmp_path, nats_server, receiver):
    hook = receiver(["hang"] * 1000)
    app = start_app(tmp_path, nats_server, None, [hook.url], alert_timeout=50.0)
    try:
        dead_letter(nats_server, 1, "first cause")
        support.wait_for(lambda: hook.hanging, timeout=30, message="the webhook to hang")
        engine = runtime_of(app).engine
        dead_letter(nats_server, 500, "second cause")
        # Stored while the sender still waits on the webhook (for up to 50 s): the mirror does not.
        support.wait_for(lambda: support.entry_count(engine) == 501, timeout=30,
                         message="the mirror to store the dead letters while the webhook hangs")
        assert hook.hanging == 1 and not hook.released.is_set()  # the sender still waits
        # The second group's alerts (500 > the default threshold of 100: a spike too) wait in the
        # outbox for the sender, not in the mirror.
        assert [r.event for r in outbox(engine)] == ["group.new", "group.new", "group.spike"]
    finally:
        hook.released.set()
        runtime_of(app).stop()


# --- the outbox and the sender without NATS -------------------------------------------------

def write(engine, first_seq: int, count: int, error: str, rule: AlertRule) -> None:
    headers = support.dlq_headers("orders.created", Dlq_Reason="fatal", Dlq_Error=error)
    ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(seq, "dlq.orders.created", dict(headers), b"{}", utcnow())
                                           for seq in range(first_seq, first_seq + count)], alerts=rule)


@pytest.mark.both_databases
def test_the_outbox_holds_one_group_new_a_url_and_a_spike_once_a_flood(database_url):
    engine = create_db_engine(database_url)
    migrate(engine)
    rule = AlertRule(urls=("http://a.example/hook", "http://b.example/hook"), threshold=10)
    try:
        write(engine, 1, 4, "order 1 failed", rule)
        write(engine, 5, 5, "order 2 failed", rule)  # 9: below the threshold
        assert [(r.event, r.url) for r in outbox(engine)] == [("group.new", "http://a.example/hook"),
                                                              ("group.new", "http://b.example/hook")]
        write(engine, 10, 3, "order 3 failed", rule)  # 12: over it
        write(engine, 13, 30, "order 4 failed", rule)  # the flood goes on
        write(engine, 1, 12, "order 1 failed", rule)  # a replay of stored messages: nothing new
        events = [r.event for r in outbox(engine)]
        assert events == ["group.new", "group.new", "group.spike", "group.spike"]
        spike = json.loads(outbox(engine)[2].body)
        assert spike["group"]["count"] == 12 and spike["spike"] == {"count": 12, "minutes": 5, "threshold": 10}
        assert outbox(engine)[2].event_id == outbox(engine)[3].event_id
        # Without a rule (no DLQ_WEBHOOK_URL) nothing is written.
        write(engine, 100, 20, "another cause", None)
        assert len(outbox(engine)) == 4
    finally:
        dispose_quietly(engine)


@pytest.mark.both_databases
def test_a_group_the_write_left_empty_raises_no_alert(database_url):
    engine = create_db_engine(database_url)
    migrate(engine)
    rule = AlertRule(urls=("http://a.example/hook",), threshold=1)
    try:
        with write_transaction(engine) as conn:
            made: set[int] = set()
            ids = group_ids(conn, {("orders.created", "", "order <n> failed")}, made=made)
            assert made == set(ids.values())
            assert raise_alerts(conn, rule, made, {}, utcnow()) == 0
        assert outbox(engine) == []
    finally:
        dispose_quietly(engine)


@pytest.mark.both_databases
def test_an_alert_hides_what_dlq_mask_hides_from_viewers(database_url):
    engine = create_db_engine(database_url)
    migrate(engine)
    rule = AlertRule(urls=("http://a.example/hook",), threshold=2, mask=("/customer/email", "X-Card"))
    headers = support.dlq_headers("orders.created", Dlq_Reason="fatal", Dlq_Error="sender zebulon is blocked")
    payload = json.dumps({"customer": {"email": "zebulon"}}).encode()
    try:
        ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(seq, "dlq.orders.created", dict(headers), payload, utcnow())
                                               for seq in (1, 2)], alerts=rule)
        bodies = [json.loads(r.body) for r in outbox(engine)]
        assert [b["event"] for b in bodies] == ["group.new", "group.spike"]
        for body in bodies:
            assert "zebulon" not in json.dumps(body)
            assert body["group"]["key"] == "sender ••• is blocked" and "sender ••• is blocked" in body["text"]
        # The group itself keeps its key: operators find it by the real text.
        with engine.connect() as conn:
            assert conn.execute(select(FailureGroup.key)).scalars().all() == ["sender zebulon is blocked"]
    finally:
        dispose_quietly(engine)


@pytest.mark.both_databases
def test_two_replicas_send_each_alert_once(tmp_path, database_url, receiver):
    hook = receiver()
    engine = create_db_engine(database_url)
    migrate(engine)
    for n in range(5):
        write(engine, n + 1, 1, f"cause {'abcde'[n]}", AlertRule(urls=(hook.url,)))
    settings = support.make_settings(tmp_path, database_url=database_url, webhook_urls=(hook.url,),
                                     alert_poll=0.05)
    senders = [AlertSender(engine, settings).start() for _ in range(2)]
    try:
        support.wait_for(lambda: all(r.sent_at for r in outbox(engine)), timeout=30, message="every alert sent")
        assert senders[0].leader + senders[1].leader == 1
        assert len(hook.requests) == 5
        assert len({h["x-dlq-event-id"] for h, _ in hook.requests}) == 5
        assert "x-dlq-signature" not in hook.requests[0][0]  # no secret, no signature
    finally:
        for sender in senders:
            sender.stop()
        dispose_quietly(engine)


def test_retries_wait_5_seconds_doubling_to_10_minutes():
    assert [backoff(n) for n in (1, 2, 3, 4, 8, 9, 50)] == [5, 10, 20, 40, 600, 600, 600]


@pytest.mark.slow
def test_a_webhook_url_that_is_not_a_url_stops_the_start_with_one_line_naming_it(tmp_path):
    # The other alert settings are refused alike (tests/test_config.py).
    result = subprocess.run([sys.executable, "app.py"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DLQ_WEBHOOK_URL": "notaurl"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: DLQ_WEBHOOK_URL='notaurl' is not valid: use comma-separated URLs such as "
        "https://hooks.slack.com/services/...")


def test_a_webhook_that_does_not_answer_in_time_is_tried_again_later(tmp_path, receiver):
    hook = receiver(["hang"])
    engine = create_db_engine(f"sqlite:///{tmp_path}/dlq.sqlite3")
    migrate(engine)
    write(engine, 1, 1, "slow cause", AlertRule(urls=(hook.url,)))
    settings = support.make_settings(tmp_path, webhook_urls=(hook.url,), alert_poll=0.05, alert_timeout=0.5,
                                     alert_first_retry=0.2)
    sender = AlertSender(engine, settings).start()
    try:
        support.wait_for(lambda: outbox(engine)[0].last_error, timeout=30, message="the attempt to time out")
        assert outbox(engine)[0].last_error == "no answer within 0.5 s" and outbox(engine)[0].sent_at is None
        hook.released.set()
        support.wait_for(lambda: outbox(engine)[0].sent_at, timeout=30, message="the retry to be delivered")
        ids = {h["x-dlq-event-id"] for h, _ in hook.requests}
        assert len(hook.requests) >= 2 and len(ids) == 1
    finally:
        sender.stop()
        dispose_quietly(engine)


def test_a_webhook_urls_user_and_password_are_sent_as_basic_authentication(tmp_path, receiver):
    # Left in the URL, urllib took "user:p@ss@127.0.0.1" for the host name: every alert failed
    # with "the host name does not resolve" and the webhook never heard of it.
    guarded, open_hook = receiver(), receiver()
    with_credentials = guarded.url.replace("http://", "http://alert%20bot:p%40ss:word@")
    engine = create_db_engine(f"sqlite:///{tmp_path}/dlq.sqlite3")
    migrate(engine)
    write(engine, 1, 1, "a cause", AlertRule(urls=(with_credentials, open_hook.url)))
    settings = support.make_settings(tmp_path, webhook_urls=(with_credentials, open_hook.url), alert_poll=0.05)
    sender = AlertSender(engine, settings).start()
    try:
        support.wait_for(lambda: all(row.sent_at for row in outbox(engine)), timeout=30, message="both alerts sent")
        [(headers, _)] = guarded.requests
        assert headers["authorization"] == "Basic " + base64.b64encode(b"alert bot:p@ss:word").decode()
        assert [h.get("authorization") for h, _ in open_hook.requests] == [None]
        assert all(row.last_error is None for row in outbox(engine))
    finally:
        sender.stop()
        dispose_quietly(engine)


@pytest.mark.both_databases
def test_a_failure_an_advisory_reported_first_is_announced_once_from_the_group_its_dlq_copy_joins(database_url):
    """An advisory's write holds its alerts ADVISORY_HOLD; the DLQ copy that arrives after it moves
    the entry to its own error's group, where it is a new failure (its times, a spike), and the
    advisory's group, left empty and untouched, goes with its unsent alert: a later failure of its
    kind is new again, and announced. A group that still holds a failure keeps its alert."""
    from datetime import timedelta

    from dlq_dashboard.alerts.outbox import ADVISORY_HOLD
    from dlq_dashboard.ingest.parse import Advisory
    from dlq_dashboard.ingest.writes import FetchedMessage, ingest_advisory_batch

    engine = create_db_engine(database_url)
    migrate(engine)
    rule = AlertRule(urls=("http://a.example/hook",), threshold=3)
    now = utcnow()

    def terminated(seq: int) -> tuple:
        advisory = Advisory("terminated", f"adv-{seq}", now, "PAY", "payer", seq, 1, "schema_invalid: bad", {})
        return advisory, FetchedMessage("pay.captured", None, b'{"amount": "ten"}'), None

    def copy(seq: int) -> StreamMessage:
        return StreamMessage(seq, "dlq.pay.captured", support.dlq_headers(
            "pay.captured", Dlq_Original_Stream="PAY", Dlq_Original_Seq=str(seq), Dlq_Consumer="payer",
            Dlq_Reason="schema_invalid", Dlq_Error="amount is a string"), b'{"amount": "ten"}', now)

    def groups() -> dict:
        with engine.connect() as conn:
            return {g.id: g for g in conn.execute(select(FailureGroup))}

    try:
        ingest_advisory_batch(engine, "DLQ_ADVISORIES", "e1", [terminated(1), terminated(2)], 2, alerts=rule)
        [held] = outbox(engine)
        assert held.event == "group.new" and held.sent_at is None
        assert held.next_attempt_at - held.created_at == ADVISORY_HOLD
        advisory_group = held.group_id
        # The DLQ copy of the first message: the entry moves to the copy's error's group.
        ingest_dlq_batch(engine, "DLQ", "e1", [copy(1)], alerts=rule)
        alerts = outbox(engine)
        # The advisory's group still holds the second failure: its alert stays, as held.
        assert [(a.event, a.group_id) for a in alerts][0] == ("group.new", advisory_group)
        [joined] = [a for a in alerts if a.group_id != advisory_group]
        assert joined.event == "group.new" and joined.next_attempt_at == joined.created_at
        assert json.loads(joined.body)["group"]["first_seen"] is not None  # seen there since the move
        # The second's copy (and a third, straight) empties the advisory's group: its unsent alert is
        # withdrawn, the group gone; three failures of the copy's group in five minutes are a spike.
        ingest_dlq_batch(engine, "DLQ", "e1", [copy(2), StreamMessage(3, "dlq.pay.captured", {
            **copy(1).headers, "Dlq-Original-Seq": "3"}, b"{}", now + timedelta(seconds=1))], alerts=rule)
        assert [(a.event, a.group_id) for a in outbox(engine)] == [("group.new", joined.group_id),
                                                                   ("group.spike", joined.group_id)]
        assert advisory_group not in groups()
        found = groups()[joined.group_id]
        assert (found.open_count, found.first_seen is not None, found.last_seen is not None) == (3, True, True)
        # A later failure of the advisory's kind, with no copy: its group is new again, and announced.
        ingest_advisory_batch(engine, "DLQ_ADVISORIES", "e1", [terminated(4)], 4, after=2, alerts=rule)
        again = [a for a in outbox(engine) if a.group_id not in (joined.group_id,)]
        assert [(a.event, a.next_attempt_at - a.created_at) for a in again] == [("group.new", ADVISORY_HOLD)]
    finally:
        dispose_quietly(engine)


def test_a_terminated_message_and_its_dlq_copy_on_a_real_server_raise_one_group_new(tmp_path, nats_server):
    """The consumer dead-letters then terminates: whichever of the copy and the advisory the mirror
    reads first, the outbox ends with one group.new, for the group of the copy's error."""
    import nats

    from dlq_dashboard.db.models import Entry

    app = start_app(tmp_path, nats_server, None, ["http://127.0.0.1:9/hook"])
    engine = runtime_of(app).engine

    async def dead_letter_then_terminate():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        msg = await support.first_delivery(js, "SHIP", "ship.sent", "shipper", b'{"parcel": "p-1"}')
        await nc.request(msg.reply, b"+TERM fatal: carrier refused", timeout=2)
        await js.publish("dlq.ship.sent", msg.data, headers=support.dlq_headers(
            "ship.sent", Dlq_Original_Stream="SHIP", Dlq_Original_Seq="1", Dlq_Consumer="shipper",
            Dlq_Reason="fatal", Dlq_Error="carrier refused the parcel"))
        await nc.close()

    try:
        support.run(dead_letter_then_terminate())

        def merged():
            with engine.connect() as conn:
                rows = conn.execute(select(Entry.group_id, Entry.sources).where(Entry.original_stream == "SHIP")).all()
            return rows if len(rows) == 1 and rows[0].sources == "dlq,advisory" else None

        [(group_id, _)] = support.wait_for(merged, timeout=20, message="one entry from both sources")
        assert [(a.event, a.group_id) for a in outbox(engine)] == [("group.new", group_id)]
    finally:
        runtime_of(app).stop()


@pytest.mark.both_databases
def test_a_spike_made_by_failures_that_only_passed_through_a_group_is_withdrawn_with_them(database_url):
    """Three advisories reach the spike threshold of their group (held ADVISORY_HOLD); the DLQ copy
    of one moves it to its own error's group: the advisory's group, two failures within five
    minutes, is below the threshold again, and its unsent spike goes (its group.new stays). A spike
    the failures left behind still reach is kept."""
    from dlq_dashboard.ingest.parse import Advisory
    from dlq_dashboard.ingest.writes import FetchedMessage, ingest_advisory_batch

    engine = create_db_engine(database_url)
    migrate(engine)
    rule = AlertRule(urls=("http://a.example/hook",), threshold=3)
    now = utcnow()

    def terminated(seq: int, stream: str = "PAY") -> tuple:
        advisory = Advisory("terminated", f"adv-{stream}-{seq}", now, stream, "payer", seq, 1, "schema_invalid: bad", {})
        return advisory, FetchedMessage("pay.captured", None, b'{"amount": "ten"}'), None

    def copy(seq: int, stream: str = "PAY") -> StreamMessage:
        return StreamMessage(seq, "dlq.pay.captured", support.dlq_headers(
            "pay.captured", Dlq_Original_Stream=stream, Dlq_Original_Seq=str(seq), Dlq_Consumer="payer",
            Dlq_Reason="schema_invalid", Dlq_Error="amount is a string"), b'{"amount": "ten"}', now)

    def unsent(group_id: int) -> list[str]:
        return [a.event for a in outbox(engine) if a.group_id == group_id and a.sent_at is None]

    try:
        ingest_advisory_batch(engine, "DLQ_ADVISORIES", "e1", [terminated(1), terminated(2), terminated(3)], 3,
                              alerts=rule)
        [advisory_group] = {a.group_id for a in outbox(engine)}
        assert unsent(advisory_group) == ["group.new", "group.spike"]
        ingest_dlq_batch(engine, "DLQ", "e1", [copy(1)], alerts=rule)
        assert unsent(advisory_group) == ["group.new"]
        # Three more advisories: a spike of five, and one of them passing through leaves four.
        ingest_advisory_batch(engine, "DLQ_ADVISORIES", "e1", [terminated(s, "ORD") for s in (1, 2, 3)], 6,
                              after=3, alerts=rule)
        assert unsent(advisory_group) == ["group.new", "group.spike"]
        ingest_dlq_batch(engine, "DLQ", "e1", [copy(1, "ORD")], after=1, alerts=rule)
        assert unsent(advisory_group) == ["group.new", "group.spike"]
    finally:
        dispose_quietly(engine)
