"""Alert e-mails: a team's addresses receive each alert (at least once), through DLQ_SMTP_URL and the same
outbox as the webhooks (same id, same retries), as plain text with the link to the group; a real
SMTP server (tests/smtp.py) refuses, drops and signs in."""

from __future__ import annotations

import json
import logging
import socket
import threading
from pathlib import Path

import pytest
from sqlalchemy import select

from dlq_dashboard.alerts.mail import FOOTER, alert_message, send_message
from dlq_dashboard.alerts.outbox import AlertRule
from dlq_dashboard.alerts.sender import AlertSender
from dlq_dashboard.config import ConfigError, load_settings
from dlq_dashboard.db.models import Alert, FailureGroup
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.mailing import STARTTLS, TLS, parse_smtp_url
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.teams import Team
from dlq_dashboard.times import utcnow

from . import support
from .smtp import MailServer
from .test_alerts import dead_letter as publish_dead_letter, start_app

PUBLIC = "https://dlq.example.com"
ORDERS = Team("orders", ("orders.>",), emails=("orders-oncall@example.com",))


@pytest.fixture
def mail_server():
    made: list[MailServer] = []

    def make(answers=(), **credentials):
        made.append(MailServer(answers, **credentials))
        return made[-1]

    yield make
    for server in made:
        server.close()


def dead_letter(engine, seq: int, subject: str = "orders.created", error: str = "customer 17 not found",
                teams=(ORDERS,), urls=()) -> None:
    rule = AlertRule(urls=tuple(urls), public_url=PUBLIC, teams=tuple(teams))
    headers = support.dlq_headers(subject, Dlq_Reason="fatal", Dlq_Error=error)
    ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(seq, f"dlq.{subject}", headers, b"{}", utcnow())],
                     alerts=rule, teams=rule.teams)


def outbox(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(select(Alert).order_by(Alert.id)).all()


def sender_for(tmp_path, engine, smtp_url: str | None, **changes) -> AlertSender:
    settings = support.make_settings(tmp_path, **{"smtp": parse_smtp_url(smtp_url) if smtp_url else None,
                                                  "mail_from": "dlq@example.com", "alert_poll": 0.05,
                                                  "alert_first_retry": 0.2, "alert_timeout": 5.0, **changes})
    return AlertSender(engine, settings).start()


@pytest.mark.both_databases
def test_an_alert_email_arrives_once_as_plain_text_with_its_event_id_and_the_link(tmp_path, engine, mail_server):
    server = mail_server(user="dlq-mailer", password="s3cret-pass")
    dead_letter(engine, 1)
    [row] = outbox(engine)
    assert row.url == "mailto:orders-oncall@example.com" and row.event == "group.new"
    sender = sender_for(tmp_path, engine, server.url)
    try:
        support.wait_for(lambda: outbox(engine)[0].sent_at, timeout=30, message="the e-mail to be sent")
        assert sender.send_due() == 0  # nothing due any more: sent once
    finally:
        sender.stop()
    assert server.sign_ins == [("dlq-mailer", True)]
    [(recipients, message)] = server.messages
    alert = json.loads(row.body)
    assert recipients == ["orders-oncall@example.com"]
    assert message["X-Dlq-Event-Id"] == row.event_id == alert["id"]
    assert message["Message-ID"] == f"<{row.event_id}@dlq-dashboard>"
    assert message["From"] == "dlq@example.com" and message["To"] == "orders-oncall@example.com"
    assert message["Subject"] == alert["text"].replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    assert message["Subject"].startswith('New failure group on orders.created, fatal: "customer <id> not found"')
    assert message.get_content_type() == "text/plain" and not message.is_multipart()
    text = message.get_content()
    with engine.connect() as conn:
        group_id = conn.execute(select(FailureGroup.id)).scalar_one()
    # The link on a line of its own: every client, plain text or not, shows it as a link.
    assert f"{PUBLIC}/groups/{group_id}" in text.splitlines()  # the group's page, with its triage
    assert "customer <id> not found" in text and "orders.created" in text
    assert text.splitlines()[-len(FOOTER):] == list(FOOTER)  # the signature, as received


def test_the_footer_promises_no_more_than_at_least_once_and_the_documented_sample_carries_it(engine):
    """Every e-mail ended "Sent by DLQ Dashboard, which mails each alert once to each address.",
    while a server that dropped the connection before answering is sent it again."""
    dead_letter(engine, 1)
    [row] = outbox(engine)
    text = alert_message(row.body, row.event_id, "orders-oncall@example.com", "dlq@example.com").get_content()
    footer = text.rstrip("\n").split("\n-- \n")[-1]
    assert "once" not in footer
    assert "may come twice" in footer and "same Message-ID" in footer
    # docs/triage.md's sample e-mail ends as every e-mail does.
    sample = (Path(__file__).resolve().parent.parent / "docs" / "triage.md").read_text().split("### What an alert e-mail looks like")[1]
    assert sample.split("```")[1].rstrip("\n").endswith("\n".join(FOOTER))


def test_a_server_refusing_the_first_delivery_gets_it_on_a_retry_once(tmp_path, engine, mail_server):
    server = mail_server(["451 4.3.0 mailbox busy, try again later"])
    dead_letter(engine, 1)
    sender = sender_for(tmp_path, engine, server.url)
    try:
        support.wait_for(lambda: outbox(engine)[0].sent_at, timeout=30, message="the retry to be delivered")
        assert sender.send_due() == 0
    finally:
        sender.stop()
    [row] = outbox(engine)
    assert server.deliveries == 2 and len(server.messages) == 1
    assert row.attempts == 2 and row.last_error == "SMTP 451 4.3.0 mailbox busy, try again later"
    assert server.received()[0]["X-Dlq-Event-Id"] == row.event_id


def test_a_server_that_drops_the_connection_mid_delivery_gets_it_retried(tmp_path, engine, mail_server):
    server = mail_server(["drop"])
    dead_letter(engine, 1)
    sender = sender_for(tmp_path, engine, server.url)
    try:
        support.wait_for(lambda: outbox(engine)[0].sent_at, timeout=30, message="the retry to be delivered")
    finally:
        sender.stop()
    [row] = outbox(engine)
    assert server.deliveries == 2 and len(server.messages) == 1 and row.attempts == 2
    assert row.last_error == "the mail server closed the connection before it took the message"
    assert server.received()[0]["X-Dlq-Event-Id"] == row.event_id


class SilentServer:
    """A TCP server on 127.0.0.1 that sends ``script`` (an SMTP conversation: the greeting, then
    one reply a line it reads), then reads on and never writes again."""

    def __init__(self, script: list[str]):
        self.script = list(script)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.settimeout(0.1)
            if self.script:
                conn.sendall((self.script.pop(0) + "\r\n").encode())
            while not self.stopped.is_set():
                try:
                    line = conn.recv(4096)
                except TimeoutError:
                    continue
                if not line:
                    return
                if self.script:
                    conn.sendall((self.script.pop(0) + "\r\n").encode())

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()


def attempt(url: str, timeout: float = 0.5) -> str | None:
    message = alert_message(json.dumps({"event": "group.new", "text": "a group", "group": {}}), "e-1",
                            "oncall@example.com", "dlq@example.com")
    return send_message(parse_smtp_url(url), message, "oncall@example.com", "dlq@example.com", timeout)


@pytest.mark.parametrize("script, url", [
    ([], "smtp://127.0.0.1:{port}"),  # accepts, never greets
    # A sign-in refused, then silence (smtplib tries the next way of signing in).
    (["220 mail.example", "250-mail.example\r\n250 AUTH PLAIN LOGIN", "535 5.7.8 no"], "smtp://u:p@127.0.0.1:{port}"),
])
def test_a_mail_server_that_never_answers_is_no_answer_within_the_timeout(script, url):
    server = SilentServer(script)
    try:
        assert attempt(url.format(port=server.port)) == "no answer within 0.5 s"
    finally:
        server.close()


def test_a_mail_server_that_hangs_after_the_message_is_no_answer_within_the_timeout(mail_server):
    server = mail_server(["hang"])
    assert attempt(server.url) == "no answer within 0.5 s"
    assert server.deliveries == 1


def test_a_refused_password_is_never_in_the_error_the_log_or_the_metrics(tmp_path, engine, mail_server, caplog,
                                                                          make_app):
    server = mail_server(user="dlq-mailer", password="right-pass")
    dead_letter(engine, 1)
    url = f"smtp://dlq-mailer:wrong-pass-4711@127.0.0.1:{server.port}"
    caplog.set_level(logging.INFO)
    sender = sender_for(tmp_path, engine, url)
    try:
        support.wait_for(lambda: outbox(engine)[0].last_error, timeout=30, message="the sign-in to fail")
    finally:
        sender.stop()
    [row] = outbox(engine)
    # aiosmtpd refuses with 535; on a busy machine its answer may come after the 5 s timeout.
    assert row.sent_at is None and (row.last_error.startswith("SMTP 535") or row.last_error == "no answer within 5 s")
    assert "wrong-pass-4711" not in row.last_error and "wrong-pass-4711" not in caplog.text
    assert "mailto:orders-oncall@example.com" in caplog.text  # the log names the address
    app = make_app(smtp=parse_smtp_url(url), mail_from="dlq@example.com", teams=(ORDERS,))
    for path in ("/metrics", "/healthz"):
        answer = app.test_client().get(path)
        assert answer.status_code in (200, 503) and b"wrong-pass-4711" not in answer.data
    assert "wrong-pass-4711" not in repr(load_settings({"DLQ_SMTP_URL": url, "DLQ_MAIL_FROM": "a@b.example"}))


def test_without_dlq_smtp_url_an_email_is_kept_and_reported_as_not_sendable(tmp_path, engine, mail_server):
    # Written by a replica that has DLQ_SMTP_URL, sent by one that has not: kept, and said why.
    hook_server = mail_server()
    dead_letter(engine, 1)
    sender = sender_for(tmp_path, engine, None)
    try:
        support.wait_for(lambda: outbox(engine)[0].last_error, timeout=30, message="the attempt to be recorded")
    finally:
        sender.stop()
    [row] = outbox(engine)
    assert row.sent_at is None and row.attempts >= 1
    assert row.last_error.startswith("not sendable here: DLQ_SMTP_URL is not set")
    sender = sender_for(tmp_path, engine, hook_server.url, alert_first_retry=0.05)
    try:  # a sender that has it sends it, once
        support.wait_for(lambda: outbox(engine)[0].sent_at, timeout=60, message="the e-mail to be sent")
    finally:
        sender.stop()
    assert len(hook_server.messages) == 1


def test_a_team_with_emails_and_no_dlq_smtp_url_stops_the_start_in_one_line(tmp_path):
    teams = tmp_path / "teams.toml"
    teams.write_text('[teams.orders]\nsubjects = ["orders.>"]\nemails = ["orders-oncall@example.com"]\n')
    with pytest.raises(ConfigError) as raised:
        load_settings({"DLQ_TEAMS": str(teams)})
    assert str(raised.value) == (f"DLQ_TEAMS={str(teams)!r} is not valid: [teams.orders] emails: DLQ_SMTP_URL is "
                                 "not set, so no e-mail can be sent; set it or remove the emails")
    settings = load_settings({"DLQ_TEAMS": str(teams), "DLQ_SMTP_URL": "smtp://mail.example",
                              "DLQ_MAIL_FROM": "dlq@example.com"})
    assert settings.teams[0].emails == ("orders-oncall@example.com",) and settings.mail_from == "dlq@example.com"


def test_the_smtp_url_names_plain_starttls_and_tls_with_their_usual_ports():
    assert parse_smtp_url("smtp://mail.example") == parse_smtp_url("smtp://mail.example:25")
    relay = parse_smtp_url("smtp://me%40example.com:p%40ss:w@mail.example?starttls=true")
    assert (relay.host, relay.port, relay.security) == ("mail.example", 587, STARTTLS)
    assert (relay.user, relay.password) == ("me@example.com", "p@ss:w")
    assert relay.shown == "smtp://mail.example:587?starttls=true" and "p@ss" not in repr(relay)
    tls = parse_smtp_url("smtps://u:p@mail.example")
    assert (tls.port, tls.security, tls.shown) == (465, TLS, "smtps://mail.example:465")
    # The sender's address defaults to an account named by its address, else it must be given.
    assert load_settings({"DLQ_SMTP_URL": "smtp://me%40example.com:x@mail.example"}).mail_from == "me@example.com"
    with pytest.raises(ConfigError) as raised:
        load_settings({"DLQ_SMTP_URL": "smtp://mailer:x@mail.example"})
    assert str(raised.value) == ("DLQ_SMTP_URL='smtp://mail.example:25' is not valid without DLQ_MAIL_FROM: "
                                 "use DLQ_MAIL_FROM to name the address alert e-mails come from")


@pytest.mark.parametrize("value", ["mail.example", "http://mail.example", "smtp://", "smtp://mail.example:port",
                                   "smtp://u:hunter2@mail.example/path", "smtp://u:hunter2@mail.example?tls=1",
                                   "smtps://u:hunter2@mail.example?starttls=true",
                                   "smtp://u:hunter2@mail.example?starttls=maybe"])
def test_a_bad_smtp_url_is_refused_in_one_line_without_its_password(value):
    with pytest.raises(ConfigError) as raised:
        load_settings({"DLQ_SMTP_URL": value, "DLQ_MAIL_FROM": "dlq@example.com"})
    message = str(raised.value)
    assert message.startswith("DLQ_SMTP_URL=") and "\n" not in message and "use smtp://" in message
    assert "hunter2" not in message


@pytest.mark.parametrize("value", ["dlq", "dlq@", "@example.com", "a@b@c", "DLQ <dlq@example.com>",
                                   "dlq@example.com\r\nBcc: x@y.z", "zoë@example.com"])
def test_a_bad_sender_address_is_refused_in_one_line(value):
    with pytest.raises(ConfigError) as raised:
        load_settings({"DLQ_MAIL_FROM": value})
    message = str(raised.value)
    assert message.startswith("DLQ_MAIL_FROM=") and "\n" not in message and "use" in message


@pytest.mark.slow
def test_a_dead_letter_on_a_teams_subject_reaches_its_mailbox_once_through_the_running_dashboard(
        tmp_path, nats_server, mail_server, receiver):
    server, hook = mail_server(user="dlq-mailer", password="s3cret-pass"), receiver()
    app = start_app(tmp_path, nats_server, f"sqlite:///{tmp_path}/dlq.sqlite3", [hook.url], teams=(ORDERS,),
                    smtp=parse_smtp_url(server.url), mail_from="dlq@example.com", public_url=PUBLIC)
    try:
        publish_dead_letter(nats_server, 2, "customer 17 not found", subject="orders.created")
        publish_dead_letter(nats_server, 1, "label printer offline", subject="shipping.labelled")
        engine = runtime_of(app).engine
        support.wait_for(lambda: len(outbox(engine)) == 3 and all(r.sent_at for r in outbox(engine)), timeout=30,
                         message="the two webhook alerts and the e-mail to be sent")
        assert runtime_of(app).alerts.send_due() == 0
        [message] = server.received()
        [(_, orders_alert)] = [(h, b) for h, b in hook.alerts() if b["group"]["subject"] == "orders.created"]
        assert message["X-Dlq-Event-Id"] == orders_alert["id"] and message["To"] == "orders-oncall@example.com"
        assert orders_alert["url"] in message.get_content().splitlines()
    finally:
        runtime_of(app).stop()
