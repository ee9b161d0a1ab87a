"""/alerts and GET /api/alerts: the alert outbox for admins and operators (state, attempts, last
error, next try, a target without its credentials), and "send again" for a failed alert: audited,
CSRF, made due now, then sent by the sender with the same id."""

from __future__ import annotations

import html as htmllib
import json
import re
from datetime import timedelta

import pytest
from sqlalchemy import insert, select

from dlq_dashboard import create_app
from dlq_dashboard.accounts import create_user
from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.db.models import Action, Alert, Entry, FailureGroup
from dlq_dashboard.entries.groups import group_label
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import parse_scopes
from dlq_dashboard.times import utcnow

from . import support
from .test_alerts import SECRET, dead_letter, outbox
from .webhooks import Receiver

SECRET_URL = "https://hook:s3cret@hooks.example/services/T0/B0?token=abc123"


def add_alerts(app) -> dict[str, int]:
    """A sent, a failed and a pending alert, as the outbox holds them."""
    now, ids = utcnow(), {}
    rows = {"sent": dict(attempts=1, sent_at=now, last_error=None),
            "failed": dict(attempts=3, sent_at=None, last_error="connection refused by https://u:pw@hooks.example/x"),
            "pending": dict(attempts=0, sent_at=None, last_error=None)}
    with write_transaction(runtime_of(app).engine) as conn:
        for n, (state, values) in enumerate(rows.items()):
            ids[state] = conn.execute(insert(Alert.__table__).values(
                event_id=f"event-{n}", url=SECRET_URL, event="group.new", group_id=7, body="{}",
                created_at=now - timedelta(minutes=5), next_attempt_at=now + timedelta(minutes=10),
                **values)).inserted_primary_key[0]
    return ids


def row_of(html: str, alert_id: int) -> str:
    return re.search(rf'<tr data-alert="{alert_id}">.*?</tr>', html, re.S).group(0)


def test_operators_and_admins_read_the_outbox_with_the_targets_credentials_left_out(offline_app, auth):
    ids = add_alerts(offline_app)
    for role in ("operator", "admin"):
        page = auth.client(role).get("/alerts")
        html = page.get_data(as_text=True)
        assert page.status_code == 200, role
        assert '<a href="/alerts" aria-current="page">Alerts</a>' in html
        assert "s3cret" not in html and "abc123" not in html and "pw@" not in html
        failed = row_of(html, ids["failed"])
        assert ">failed<" in failed and ">3<" in failed and "connection refused by https://hooks.example/x" in failed
        assert "https://hooks.example/services/T0/B0?…" in failed and ">Send again<" in failed
        assert ">Send again<" not in row_of(html, ids["sent"]) and ">sent<" in row_of(html, ids["sent"])
        assert ">pending<" in row_of(html, ids["pending"])
    only_failed = auth.client("operator").get("/alerts?state=failed").get_data(as_text=True)
    assert f'data-alert="{ids["failed"]}"' in only_failed and f'data-alert="{ids["sent"]}"' not in only_failed
    assert auth.client("operator").get("/alerts?state=lost").status_code == 400


def test_a_viewer_is_refused_the_outbox_and_is_not_offered_it(offline_app, auth, tokens):
    add_alerts(offline_app)
    viewer = auth.client("viewer")
    assert viewer.get("/alerts").status_code == 403
    assert ">Alerts</a>" not in viewer.get("/").get_data(as_text=True)
    api = offline_app.test_client()
    assert api.get("/api/alerts", headers=support.bearer(tokens["viewer"])).status_code == 403


def test_the_json_twin_says_what_the_page_says(offline_app, tokens):
    ids = add_alerts(offline_app)
    body = offline_app.test_client().get("/api/alerts", headers=support.bearer(tokens["operator"])).get_json()
    assert body["counts"] == {"failed": 1, "pending": 1, "sent": 1} and body["next_before"] is None
    by_id = {a["id"]: a for a in body["alerts"]}
    failed = by_id[ids["failed"]]
    assert (failed["state"], failed["attempts"], failed["event_id"]) == ("failed", 3, "event-1")
    assert failed["target"] == "https://hooks.example/services/T0/B0?…" and failed["next_attempt_at"].endswith("Z")
    assert by_id[ids["sent"]]["next_attempt_at"] is None and by_id[ids["sent"]]["sent_at"].endswith("Z")
    paged = offline_app.test_client().get("/api/alerts?limit=1", headers=support.bearer(tokens["admin"])).get_json()
    assert len(paged["alerts"]) == 1 and paged["next_before"] == ids["pending"]


def test_send_again_needs_the_csrf_token_a_failed_alert_and_is_audited(offline_app, auth):
    ids = add_alerts(offline_app)
    engine = runtime_of(offline_app).engine
    operator = auth.client("operator")
    assert operator.post(f"/alerts/{ids['failed']}/send-again").status_code == 400  # no CSRF token
    token = support.csrf_token(operator, "/alerts")
    assert operator.post(f"/alerts/{ids['sent']}/send-again", data={"csrf_token": token}).status_code == 400
    assert operator.post("/alerts/99999/send-again", data={"csrf_token": token}).status_code == 404
    before = utcnow()
    answer = operator.post(f"/alerts/{ids['failed']}/send-again", data={"csrf_token": token, "state": "failed"})
    assert answer.status_code == 303 and answer.headers["Location"].endswith("/alerts?state=failed")
    row = next(r for r in outbox(engine) if r.id == ids["failed"])
    assert before - timedelta(seconds=1) <= row.next_attempt_at <= utcnow() and row.attempts == 3
    with engine.connect() as conn:
        [audit] = conn.execute(select(Action).where(Action.action == "send_alert_again")).all()
    assert audit.actor and audit.entry_id is None
    detail = json.loads(audit.detail)
    assert detail == {"alert": ids["failed"], "event_id": "event-1", "event": "group.new",
                      "target": "https://hooks.example/services/T0/B0?…"}
    viewer = auth.client("viewer")
    assert viewer.post(f"/alerts/{ids['failed']}/send-again",
                       data={"csrf_token": support.csrf_token(viewer, "/")}).status_code == 403


@pytest.mark.both_databases
def test_a_failed_alert_sent_again_is_sent_at_once_with_the_same_id(tmp_path, nats_server, database_url):
    hook = Receiver([500])
    # Retries minutes apart: only "send again" sends it within the test.
    settings = support.make_settings(tmp_path, nats_server.url, database_url=database_url, webhook_urls=(hook.url,),
                                     webhook_secret=SECRET, alert_poll=0.1, alert_first_retry=3600.0)
    app = create_app({"SETTINGS": settings, "TESTING": True})
    runtime_of(app).start()
    try:
        rt = runtime_of(app)
        assert rt.bridge.wait_connected(10), "the bridge did not connect"
        support.wait_for(lambda: all(p.epoch for p in rt.mirror.progress.values()), message="the mirror to start")
        dead_letter(nats_server, 1, "tax service down")
        engine = runtime_of(app).engine
        support.wait_for(lambda: (rows := outbox(engine)) and rows[0].attempts == 1, timeout=30,
                         message="the first, refused attempt")
        [alert] = outbox(engine)
        assert alert.sent_at is None and alert.next_attempt_at > utcnow() + timedelta(minutes=5)  # the longest wait: 10
        operator = support.logged_in(app, "operator")
        page = operator.get("/alerts").get_data(as_text=True)
        assert ">HTTP 500 Internal Server Error<" in row_of(page, alert.id)
        answer = operator.post(f"/alerts/{alert.id}/send-again",
                               data={"csrf_token": support.csrf_token(operator, "/alerts")})
        assert answer.status_code == 303
        support.wait_for(lambda: outbox(engine)[0].sent_at, timeout=30, message="the alert to be sent again")
        (first, _), (again, _) = hook.requests
        assert first["x-dlq-event-id"] == again["x-dlq-event-id"] == alert.event_id
        assert outbox(engine)[0].attempts == 2
    finally:
        runtime_of(app).stop()
        hook.close()


def test_an_empty_outbox_says_whether_alerts_are_off_here_and_what_turns_them_on(make_app):
    # It said "raised when DLQ_WEBHOOK_URL names webhooks" whether or not any was set (and a
    # team's webhooks and e-mails raise them too).
    off = support.logged_in(make_app(), "operator").get("/alerts").get_data(as_text=True)
    assert "Alerts are off here: none is raised until DLQ_WEBHOOK_URL names a webhook or a team" in off
    on = support.logged_in(make_app(webhook_urls=("https://hooks.example/x",)), "operator").get("/alerts")
    html = on.get_data(as_text=True)
    assert "Alerts are off here" not in html and "An alert is raised when a failure group is new, spikes" in html
    assert "or is reopened when an ignored group's limit is reached" in html


def test_send_again_needs_an_operator_grant_covering_the_alerts_group_not_a_reading_one(identity_provider, make_app):
    """A single sign-on user may read everything and act on orders alone: "send again" on an
    alert of a payments group was taken (it asked for the reading grants), where the group's
    own state change and note are a 403."""
    idp = identity_provider(accounts={"olga": {"email": "olga@example.com", "groups": ["team-orders"]}})
    app = make_app(**idp.settings(roles="team-orders=operator:orders.>; *=viewer"))
    idp.start()
    engine = runtime_of(app).engine
    groups = {}
    for seq, subject in enumerate(("orders.created", "payments.settle"), start=1):
        entry_id = support.dead_letter(app, seq, subject=subject)
        with engine.connect() as conn:
            groups[subject] = conn.execute(select(Entry.group_id).where(Entry.id == entry_id)).scalar_one()
    now, alerts = utcnow(), {}
    with write_transaction(engine) as conn:
        for subject, group_id in groups.items():
            alerts[subject] = conn.execute(insert(Alert.__table__).values(
                event_id=f"event-{group_id}", url="https://hooks.example/x", event="group.new", group_id=group_id,
                body="{}", created_at=now, next_attempt_at=now + timedelta(minutes=10), attempts=2, sent_at=None,
                last_error="connection refused")).inserted_primary_key[0]
    client = app.test_client()
    idp.sign_in(client, "olga")
    token = support.csrf_token(client, "/alerts")
    page = client.get("/alerts").get_data(as_text=True)
    assert "Send again: alert {}".format(alerts["orders.created"]) in page
    assert "Send again: alert {}".format(alerts["payments.settle"]) not in page  # shown, not offered
    assert f'<tr data-alert="{alerts["payments.settle"]}">' in page
    refused = client.post(f"/alerts/{alerts['payments.settle']}/send-again", data={"csrf_token": token})
    assert refused.status_code == 403
    assert "outside the scopes you may act on" in refused.get_data(as_text=True)
    assert client.post(f"/alerts/{alerts['orders.created']}/send-again",
                       data={"csrf_token": token}).status_code == 303
    with engine.connect() as conn:
        sent_again = conn.execute(select(Action.detail).where(Action.action == "send_alert_again")).scalars().all()
    assert [json.loads(d)["alert"] for d in sent_again] == [alerts["orders.created"]]


def cell_text(html: str, alert_id: int, cell: str) -> str:
    found = re.search(rf'<td [^>]*class="{cell}"[^>]*>(.*?)</td>', row_of(html, alert_id), re.S).group(1)
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", "", found)).split())


def test_a_delivered_alert_tells_its_last_failure_as_one_before_it_was_sent(offline_app, auth, tokens):
    """A sent alert read "sent 07:20:17 ... attempts 5 ... connection refused" as if it still failed."""
    now = utcnow()
    with write_transaction(runtime_of(offline_app).engine) as conn:
        sent, failed = (conn.execute(insert(Alert.__table__).values(
            event_id=f"event-{n}", url="https://hooks.example/x", event="group.new", group_id=7, body="{}",
            created_at=now, next_attempt_at=now, attempts=5, last_error="connection refused",
            sent_at=now if n == 0 else None)).inserted_primary_key[0] for n in (0, 1))
    html = auth.client("operator").get("/alerts").get_data(as_text=True)
    assert cell_text(html, sent, "error-text") == \
        "Sent after 5 attempts; the last failure before it: connection refused"
    assert cell_text(html, failed, "error-text") == "connection refused"  # still failing: as it is
    body = offline_app.test_client().get("/api/alerts", headers=support.bearer(tokens["operator"])).get_json()
    shown = {a["id"]: a for a in body["alerts"]}[sent]
    assert (shown["state"], shown["attempts"], shown["last_error"]) == ("sent", 5, "connection refused")


def test_two_groups_of_one_subject_are_told_apart_by_their_label_shown_as_text(offline_app, auth, tokens):
    """Each read "group 12 orders.tax", nothing more: which failure it was could not be told."""
    engine = runtime_of(offline_app).engine
    for seq, error in ((1, "rate table missing for <b>DE</b>"), (2, "tax service timed out")):
        support.dead_letter(offline_app, seq, "orders.tax", Dlq_Reason="fatal", Dlq_Error=error)
    with engine.connect() as conn:
        groups = conn.execute(select(FailureGroup.id, FailureGroup.key).order_by(FailureGroup.id)).all()
    assert len(groups) == 2
    now, ids = utcnow(), []
    with write_transaction(engine) as conn:
        for n, group in enumerate(groups):
            ids.append(conn.execute(insert(Alert.__table__).values(
                event_id=f"tax-{n}", url="https://hooks.example/x", event="group.new", group_id=group.id,
                body="{}", created_at=now, next_attempt_at=now, attempts=0)).inserted_primary_key[0])
    html = auth.client("operator").get("/alerts").get_data(as_text=True)
    shown = [cell_text(html, alert_id, "alert-group") for alert_id in ids]
    assert shown == [f"group {g.id} orders.tax {group_label(g.key)}" for g in groups]
    assert shown[0] != shown[1] and "rate table missing for <b>DE</b>" in shown[0]
    # The error's markup is text on the page, never an element.
    assert "<b>DE</b>" not in html and "&lt;b&gt;DE&lt;/b&gt;" in row_of(html, ids[0])
    body = offline_app.test_client().get("/api/alerts", headers=support.bearer(tokens["operator"])).get_json()
    labels = {a["id"]: a["group_label"] for a in body["alerts"]}
    assert [labels[i] for i in ids] == [group_label(g.key) for g in groups]


def audit_rows(html: str) -> list[str]:
    """The audit page's records, each as the text of its What cell."""
    return [" ".join(htmllib.unescape(re.sub(r"<[^>]+>", "", cell)).split())
            for cell in re.findall(r'<td class="what">(.*?)</td>', html, re.S)]


@pytest.mark.both_databases
def test_a_scoped_operator_reads_their_own_send_again_in_the_audit_with_its_alert_event_and_target(offline_app,
                                                                                                 auth):
    """An orders operator's Send again was missing from their /audit ("No actions match."), and
    an admin's row of it named neither the alert, its event id nor the target."""
    engine = runtime_of(offline_app).engine
    groups, alerts = {}, {}
    for seq, subject in enumerate(("orders.created", "billing.paid"), start=1):
        entry_id = support.dead_letter(offline_app, seq, subject=subject)
        with engine.connect() as conn:
            groups[subject] = conn.execute(select(Entry.group_id).where(Entry.id == entry_id)).scalar_one()
    now = utcnow()
    with write_transaction(engine) as conn:
        for subject, group_id in groups.items():
            alerts[subject] = conn.execute(insert(Alert.__table__).values(
                event_id=f"event-{subject}", url=f"https://u:pw@hooks.example/{subject}?token=t", event="group.new",
                group_id=group_id, body="{}", created_at=now, next_attempt_at=now + timedelta(minutes=10),
                attempts=2, last_error="connection refused")).inserted_primary_key[0]
    create_user(engine, "orders-operator", support.PASSWORD, "operator", scopes=parse_scopes(["orders.>"]))
    scoped = offline_app.test_client()
    assert support.login(scoped, "orders-operator", support.PASSWORD).status_code == 302
    sent = scoped.post(f"/alerts/{alerts['orders.created']}/send-again",
                       data={"csrf_token": support.csrf_token(scoped, "/alerts")})
    assert sent.status_code == 303
    admin = auth.client("admin")
    assert admin.post(f"/alerts/{alerts['billing.paid']}/send-again",
                      data={"csrf_token": support.csrf_token(admin, "/alerts")}).status_code == 303
    said = {subject: f"send_alert_again: alert {alerts[subject]} (group.new), event id event-{subject}, "
                     f"to https://hooks.example/{subject}?…" for subject in alerts}
    # Theirs, of a group within their scopes; not the billing one.
    assert audit_rows(scoped.get("/audit?action=send_alert_again").get_data(as_text=True)) == \
        [said["orders.created"]]
    records = scoped.get("/api/audit?action=send_alert_again").get_json()["actions"]
    assert [(r["actor"], r["detail"]["alert"], r["detail"]["event_id"], r["detail"]["target"]) for r in records] == \
        [("orders-operator", alerts["orders.created"], "event-orders.created", "https://hooks.example/orders.created?…")]
    # An admin reads both, each with what it was about.
    assert audit_rows(admin.get("/audit?action=send_alert_again").get_data(as_text=True)) == \
        [said["billing.paid"], said["orders.created"]]
    # A billing reader sees the billing one only.
    create_user(engine, "billing-viewer", support.PASSWORD, "viewer", scopes=parse_scopes(["billing.>"]))
    billing = offline_app.test_client()
    assert support.login(billing, "billing-viewer", support.PASSWORD).status_code == 302
    assert [r["detail"]["alert"] for r in billing.get("/api/audit?action=send_alert_again").get_json()["actions"]] \
        == [alerts["billing.paid"]]
    # ...and its target as its origin alone: a viewer is not shown /alerts, and an incoming
    # webhook's secret is its path (Slack's), which the audit gave viewers.
    assert [r["detail"]["target"] for r in billing.get("/api/audit?action=send_alert_again").get_json()["actions"]] \
        == ["https://hooks.example/…"]
    assert audit_rows(billing.get("/audit?action=send_alert_again").get_data(as_text=True)) == [
        f"send_alert_again: alert {alerts['billing.paid']} (group.new), event id event-billing.paid, "
        "to https://hooks.example/…"]
