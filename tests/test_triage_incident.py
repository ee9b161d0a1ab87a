"""An incident on the real server (SPEC section 11): a burst of dead letters through NATS makes a
failure group (of the team "orders"), it is assigned, resolved in "v2", a new failure regresses
it, and exactly one group.regressed alert reaches a local webhook receiver and the team's mailbox
on a real SMTP server, with one event id; the group's activity tells the whole story."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from dlq_dashboard.accounts import create_token
from dlq_dashboard.db.models import Alert
from dlq_dashboard.mailing import parse_smtp_url
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.teams import Team

from . import support
from .smtp import MailServer
from .test_alerts import dead_letter, start_app
from .webhooks import Receiver

ORDERS = Team("orders", ("orders.>",), emails=("orders-oncall@example.com",))


@pytest.fixture
def webhook():
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture
def mailbox():
    server = MailServer()
    yield server
    server.close()


def mails(server: MailServer, event: str) -> list:
    return [m for m in server.received() if m["X-Dlq-Event"] == event]


def all_sent(engine) -> bool:
    with engine.connect() as conn:
        return all(sent is not None for sent in conn.execute(select(Alert.sent_at)).scalars())


@pytest.mark.both_databases
def test_a_burst_is_assigned_resolved_in_v2_and_regresses_with_one_group_regressed_alert(
        tmp_path, nats_server, database_url, webhook, mailbox):
    app = start_app(tmp_path, nats_server, database_url, [webhook.url], teams=(ORDERS,),
                    smtp=parse_smtp_url(mailbox.url), mail_from="dlq@example.com")
    rt = runtime_of(app)
    try:
        client = app.test_client()
        operator = support.bearer(create_token(rt.engine, "oncall", "operator"))
        dead_letter(nats_server, 30, "payment 4711 declined by gateway")
        support.wait_for(lambda: support.entry_count(rt.engine) == 30, timeout=30, message="the burst to be mirrored")
        support.wait_for(lambda: webhook.alerts("group.new"), timeout=20, message="the group.new alert")
        support.wait_for(lambda: all_sent(rt.engine), timeout=20, message="the group.new alert to be recorded sent")
        [group] = client.get("/api/groups", headers=operator).get_json()["groups"]
        assert group["count"] == 30 and group["state"] == "open" and group["team"] == "orders"

        assigned = client.post(f"/api/groups/{group['id']}/state", headers=operator, json={
            "version": group["version"], "state": "investigating", "assignee": "alice"}).get_json()["group"]
        assert (assigned["state"], assigned["assignee"]) == ("investigating", "alice")
        resolved = client.post(f"/api/groups/{group['id']}/state", headers=operator, json={
            "version": assigned["version"], "state": "resolved", "resolved_in": "v2",
            "note": "fixed by the gateway retry in v2"}).get_json()["group"]
        assert (resolved["state"], resolved["resolved_in"]) == ("resolved", "v2")

        dead_letter(nats_server, 1, "payment 4712 declined by gateway")  # the same cause, once more
        support.wait_for(lambda: webhook.alerts("group.regressed"), timeout=20, message="the group.regressed alert")
        support.wait_for(lambda: all_sent(rt.engine), timeout=20, message="every alert to be sent")
        [(headers, body)] = webhook.alerts("group.regressed")
        assert headers["x-dlq-event-id"] == body["id"]
        assert body["group"]["id"] == group["id"] and body["group"]["state"] == "regressed"
        assert "resolved in v2" in body["text"]
        assert [b["event"] for _, b in webhook.alerts()] == ["group.new", "group.regressed"]
        # The team's mailbox: the same two alerts, each once, the regression under the webhook's id.
        support.wait_for(lambda: mails(mailbox, "group.regressed"), timeout=20, message="the group.regressed e-mail")
        [mail] = mails(mailbox, "group.regressed")
        assert mail["X-Dlq-Event-Id"] == body["id"] and mail["To"] == "orders-oncall@example.com"
        assert "resolved in v2" in mail["Subject"]
        assert [m["X-Dlq-Event"] for m in mailbox.received()] == ["group.new", "group.regressed"]

        shown = client.get(f"/api/groups/{group['id']}", headers=operator).get_json()
        assert (shown["state"], shown["resolved_in"], shown["assignee"]) == ("regressed", "v2", "alice")
        story = [(a["kind"], a["actor"], a["state"] or a["detail"].get("event")) for a in reversed(shown["activity"])]
        assert story == [("alert", "alerts", "group.new"), ("state", "token:oncall", "investigating"),
                         ("state", "token:oncall", "resolved"), ("state", "mirror", "regressed"),
                         ("alert", "alerts", "group.regressed")]
    finally:
        rt.stop()
