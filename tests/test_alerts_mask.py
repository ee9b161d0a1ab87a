"""An alert queued under one DLQ_MASK and sent under another: a chat channel (and an e-mail) is read
as a viewer reads, so a body raised before the mask named a field its group's key quotes is not
sent as stored: it is made again with the value hidden, stored so, and every later attempt sends
those bytes. A body raised under the mask in force is sent byte for byte."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from dlq_dashboard.alerts.outbox import AlertRule
from dlq_dashboard.alerts.sender import AlertSender
from dlq_dashboard.db.models import Alert
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.mailing import parse_smtp_url
from dlq_dashboard.masking import MASKED
from dlq_dashboard.teams import Team
from dlq_dashboard.times import utcnow

from . import support
from .smtp import MailServer

MASK = ("/customer/name",)
ORDERS = Team("orders", ("orders.>",), emails=("orders-oncall@example.com",))


@pytest.fixture
def mail_server():
    server = MailServer()
    yield server
    server.close()


def _fail(engine, seq: int, name: str, rule: AlertRule) -> None:
    headers = support.dlq_headers("orders.paid", Dlq_Reason="fatal", Dlq_Error=f"unknown customer {name}")
    payload = json.dumps({"customer": {"name": name}}).encode()
    ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(seq, "dlq.orders.paid", headers, payload, utcnow())],
                     alerts=rule, teams=rule.teams)


def _bodies(engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(select(Alert.url, Alert.body).order_by(Alert.id)).all())


def _sent(tmp_path, engine, hook, server, mask) -> None:
    settings = support.make_settings(tmp_path, webhook_urls=(hook.url,), mask=mask, smtp=parse_smtp_url(server.url),
                                     mail_from="dlq@example.com", alert_poll=0.05, alert_first_retry=0.2)
    sender = AlertSender(engine, settings).start()
    try:
        def all_sent():
            with engine.connect() as conn:
                return all(conn.execute(select(Alert.sent_at)).scalars())
        support.wait_for(all_sent, timeout=30, message="the alerts to be sent")
    finally:
        sender.stop()


@pytest.mark.both_databases
def test_an_alert_queued_before_the_mask_is_sent_with_the_masked_value_hidden(tmp_path, engine, receiver,
                                                                              mail_server):
    hook = receiver()
    _fail(engine, 1, "Zorblax", AlertRule(urls=(hook.url,), teams=(ORDERS,)))
    queued = _bodies(engine)
    assert all('"key":"unknown customer Zorblax"' in body for body in queued.values())

    _sent(tmp_path, engine, hook, mail_server, MASK)

    [(_, sent)] = hook.requests
    alert = json.loads(sent)
    assert "Zorblax" not in sent.decode()
    assert alert["group"]["key"] == f"unknown customer {MASKED}"
    assert alert["text"].startswith(f'New failure group on orders.paid, fatal: "unknown customer {MASKED}"')
    [message] = mail_server.received()
    assert "Zorblax" not in message.as_string() and f"unknown customer {MASKED}" in message.get_content()
    # Stored as sent: a later attempt sends the same bytes (and the same signature).
    assert _bodies(engine)[hook.url].encode() == sent


@pytest.mark.both_databases
def test_an_alert_queued_under_the_mask_in_force_is_sent_byte_for_byte(tmp_path, engine, receiver, mail_server):
    hook = receiver()
    _fail(engine, 1, "Zorblax", AlertRule(urls=(hook.url,), mask=MASK, teams=(ORDERS,)))
    queued = _bodies(engine)
    assert "Zorblax" not in queued[hook.url]

    _sent(tmp_path, engine, hook, mail_server, MASK)

    [(_, sent)] = hook.requests
    assert sent == queued[hook.url].encode() and _bodies(engine) == queued
