"""Teams (DLQ_TEAMS): a TOML file read once at start (a bad one stops the start in one line
naming the file, the team and the key); a new failure group is given the first team covering its
subject, in the insert that makes it, in the mirror's own process; a group's alerts also go to
its team's webhooks and e-mails, each once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from sqlalchemy import select

from dlq_dashboard.alerts.outbox import AlertRule, targets_for
from dlq_dashboard.config import ConfigError, Settings, load_settings
from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
from dlq_dashboard.db.migrate import migrate
from dlq_dashboard.db.models import Alert, FailureGroup
from dlq_dashboard.ingest.writer import WriterProcess
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.teams import Team, team_for
from dlq_dashboard.times import utcnow

from . import support
from .test_alerts import dead_letter, start_app

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = """
[teams.orders]
subjects = ["orders.>", "billing.>"]
webhooks = ["https://hooks.example/orders"]
emails = ["orders-oncall@example.com"]

[teams.everything-else]
subjects = [">"]
"""


def teams_file(tmp_path, text: str) -> str:
    path = tmp_path / "teams.toml"
    path.write_text(text)
    return str(path)


def test_the_teams_file_is_read_in_its_order_and_the_first_covering_team_wins(tmp_path):
    settings = load_settings({"DLQ_TEAMS": teams_file(tmp_path, EXAMPLE), "DLQ_SMTP_URL": "smtp://mail.example",
                              "DLQ_MAIL_FROM": "dlq@example.com"})
    orders, rest = settings.teams
    assert orders == Team("orders", ("orders.>", "billing.>"), ("https://hooks.example/orders",),
                          ("orders-oncall@example.com",))
    assert rest == Team("everything-else", (">",))
    assert team_for(settings.teams, "billing.invoice.paid") == "orders"  # both cover it: the first wins
    assert team_for(settings.teams, "shipping.label") == "everything-else"
    assert team_for(settings.teams[:1], "shipping.label") is None and team_for(settings.teams, "") is None
    assert Settings().teams == ()


def test_a_url_or_address_listed_twice_in_a_team_is_kept_once(tmp_path):
    settings = load_settings({"DLQ_TEAMS": teams_file(tmp_path, """
[teams.orders]
subjects = ["orders.>", "orders.>"]
webhooks = ["https://hooks.example/o", "https://hooks.example/o"]
emails = ["oncall@example.com", "OnCall@Example.com"]
"""), "DLQ_SMTP_URL": "smtp://mail.example", "DLQ_MAIL_FROM": "dlq@example.com"})
    assert settings.teams == (Team("orders", ("orders.>",), ("https://hooks.example/o",), ("oncall@example.com",)),)


BAD_FILES = [
    ("[teams.orders\nsubjects = 1", "it is not TOML ("),
    ('title = "x"\n[teams.orders]\nsubjects = ["orders.>"]', "the key 'title' is not known"),
    ("", "it names no team"),
    ('[teams.Orders]\nsubjects = ["orders.>"]', '[teams."Orders"]: the team name must be 1 to 64 of a-z, 0-9'),
    (f'[teams.{"a" * 65}]\nsubjects = ["orders.>"]', f'[teams."{"a" * 65}"]: the team name must be'),
    ('[teams."orders\\n"]\nsubjects = ["orders.>"]', '[teams."orders\\n"]: the team name must be'),
    ('[teams.orders]\nsubjects = ["orders.>"]\nwebhook = ["https://h.example"]',
     "[teams.orders]: the key 'webhook' is not known; use subjects, webhooks and emails"),
    ('[teams.orders]\nwebhooks = ["https://h.example"]', "[teams.orders] subjects: missing"),
    ('[teams.orders]\nsubjects = []', "[teams.orders] subjects: empty"),
    ('[teams.orders]\nsubjects = "orders.>"', "[teams.orders] subjects: not a list of strings"),
    ('[teams.orders]\nsubjects = ["orders.>.x"]', "[teams.orders] subjects: subject pattern 'orders.>.x' has '>'"),
    ('[teams.orders]\nsubjects = ["orders.*x"]', "[teams.orders] subjects: subject pattern 'orders.*x': a wildcard"),
    ('[teams.orders]\nsubjects = ["orders.>"]\nwebhooks = ["ftp://h.example/x"]',
     "[teams.orders] webhooks: 'ftp://h.example/x' is not an http:// or https:// URL"),
    ('[teams.orders]\nsubjects = ["orders.>"]\nwebhooks = ["https://u:hunter2@h.example:port/x"]',
     "[teams.orders] webhooks: 'https://h.example:port/x' is not an http:// or https:// URL"),
    ('[teams.orders]\nsubjects = ["orders.>"]\nemails = ["oncall.example.com"]',
     "[teams.orders] emails: 'oncall.example.com' is not an e-mail address"),
    ('[teams.orders]\nsubjects = ["orders.>"]\nemails = ["a@b.example\\nBcc: c@d.example"]',
     "[teams.orders] emails: 'a@b.example\\nBcc: c@d.example' is not an e-mail address"),
    ('[teams]\norders = "x"', "[teams.orders]: a team is a table"),
]


@pytest.mark.parametrize("text,reason", BAD_FILES)
def test_a_bad_teams_file_is_refused_in_one_line_naming_the_file_the_team_and_the_key(tmp_path, text, reason):
    path = teams_file(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_settings({"DLQ_TEAMS": path, "DLQ_SMTP_URL": "smtp://mail.example", "DLQ_MAIL_FROM": "d@example.com"})
    message = str(raised.value)
    assert message.startswith(f"DLQ_TEAMS={path!r} is not valid: {reason}"), message
    assert "\n" not in message and "hunter2" not in message


@pytest.mark.parametrize("path", ["/no/such/teams.toml", "."])
def test_a_teams_file_that_cannot_be_read_is_refused_in_one_line(path):
    with pytest.raises(ConfigError) as raised:
        load_settings({"DLQ_TEAMS": path})
    message = str(raised.value)
    assert message.startswith(f"DLQ_TEAMS={path!r} is not valid: the file cannot be read (") and "\n" not in message
    assert "use a TOML file of [teams.<name>] tables" in message


@pytest.mark.slow
def test_a_bad_teams_file_stops_the_start_with_one_line(tmp_path):
    path = teams_file(tmp_path, '[teams.orders]\nsubjects = ["orders.>"]\nemails = ["oncall"]\n')
    result = subprocess.run([sys.executable, "app.py"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DLQ_TEAMS": path})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: DLQ_TEAMS={path!r} is not valid: [teams.orders] emails: 'oncall' is not an e-mail address "
        "(write it as name@example.com)")


TEAMS = (Team("orders", ("orders.>", "billing.>"), ("https://hooks.example/orders", "https://hooks.example/all"),
              ("orders-oncall@example.com",)),
         Team("billing", ("billing.>",), ("https://hooks.example/billing",)))


def groups(engine) -> dict[str, str | None]:
    with engine.connect() as conn:
        return dict(conn.execute(select(FailureGroup.subject, FailureGroup.team)).all())


def outbox(engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return [(r.event, r.url, r.group_id) for r in conn.execute(select(Alert).order_by(Alert.id))]


def messages(subjects) -> list[StreamMessage]:
    return [StreamMessage(seq, f"dlq.{s}", support.dlq_headers(s, Dlq_Reason="fatal", Dlq_Error="it broke"), b"{}",
                          utcnow()) for seq, s in enumerate(subjects, 1)]


@pytest.mark.both_databases
def test_a_new_group_is_given_the_first_team_covering_its_subject_and_its_alerts_go_there_once(database_url):
    engine = create_db_engine(database_url)
    migrate(engine)
    rule = AlertRule(urls=("https://hooks.example/all",), teams=TEAMS)
    try:
        ingest_dlq_batch(engine, "DLQ", "e1", messages(["orders.created", "billing.charged", "shipping.sent"]),
                         alerts=rule, teams=TEAMS)
        assert groups(engine) == {"orders.created": "orders", "billing.charged": "orders", "shipping.sent": None}
        with engine.connect() as conn:
            ids = dict(conn.execute(select(FailureGroup.subject, FailureGroup.id)).all())
        urls = {}
        for _, url, group_id in outbox(engine):
            urls.setdefault(group_id, []).append(url)
        # The global URL the team lists too goes out once; the team's e-mail is a mailto: target.
        team_targets = ["https://hooks.example/all", "https://hooks.example/orders", "mailto:orders-oncall@example.com"]
        assert urls == {ids["orders.created"]: team_targets, ids["billing.charged"]: team_targets,
                        ids["shipping.sent"]: ["https://hooks.example/all"]}
        # A later file gives no team to a group made before it: the team is decided when it is made.
        ingest_dlq_batch(engine, "DLQ", "e1", messages(["orders.created", "billing.charged", "shipping.sent",
                                                        "billing.refunded"]), teams=TEAMS[1:])
        assert groups(engine) == {"orders.created": "orders", "billing.charged": "orders", "shipping.sent": None,
                                  "billing.refunded": "billing"}
    finally:
        dispose_quietly(engine)


def test_the_targets_of_a_group_are_the_global_urls_then_its_teams_each_once():
    class Group:
        team = "orders"

    rule = AlertRule(urls=("https://hooks.example/all", "https://hooks.example/all"), teams=TEAMS)
    assert targets_for(rule, Group) == ("https://hooks.example/all", "https://hooks.example/orders",
                                        "mailto:orders-oncall@example.com")
    Group.team = "gone"  # a team the file no longer names: the global URLs alone
    assert targets_for(rule, Group) == ("https://hooks.example/all",)
    Group.team = None
    assert targets_for(AlertRule(urls=(), teams=TEAMS), Group) == ()


def test_a_team_with_a_webhook_makes_alerts_without_dlq_webhook_url():
    assert AlertRule.from_settings(Settings(teams=(Team("a", ("a.>",)),))) is None
    rule = AlertRule.from_settings(Settings(teams=TEAMS[1:]))
    assert rule is not None and rule.urls == () and rule.teams == TEAMS[1:]


def test_the_writer_process_gives_new_groups_their_team(tmp_path):
    url = support.migrated_sqlite(tmp_path / "dlq.sqlite3")
    writer = WriterProcess(url, None, TEAMS)
    try:
        rows = [(m.seq, m.subject, m.headers, m.data, m.stored_at) for m in messages(["billing.x", "other.y"])]
        assert writer.call("ingest_dlq_rows", "DLQ", "e1", rows) == 2
    finally:
        writer.close()
    engine = create_db_engine(url)
    try:
        assert groups(engine) == {"billing.x": "orders", "other.y": None}
    finally:
        dispose_quietly(engine)


@pytest.mark.slow
def test_each_team_gets_only_its_groups_alerts_and_the_global_webhook_gets_all(tmp_path, nats_server, receiver):
    everyone, orders_hook, billing_hook = receiver(), receiver(), receiver()
    teams = (Team("orders", ("orders.>",), (orders_hook.url,)), Team("billing", ("billing.>",), (billing_hook.url,)))
    app = start_app(tmp_path, nats_server, f"sqlite:///{tmp_path}/dlq.sqlite3", [everyone.url], teams=teams)
    try:
        dead_letter(nats_server, 2, "customer 17 not found", subject="orders.created")
        dead_letter(nats_server, 3, "card 4 declined", subject="billing.charged")
        dead_letter(nats_server, 1, "label printer offline", subject="shipping.labelled")
        support.wait_for(lambda: len(everyone.alerts("group.new")) == 3, timeout=30, message="three group.new alerts")
        support.wait_for(lambda: orders_hook.alerts() and billing_hook.alerts(), timeout=30,
                         message="each team's alert")
        engine = runtime_of(app).engine
        assert groups(engine) == {"orders.created": "orders", "billing.charged": "billing", "shipping.labelled": None}
        support.wait_for(lambda: all(r.sent_at for r in _rows(engine)), timeout=30, message="every alert sent")
        assert [b["group"]["subject"] for _, b in orders_hook.alerts()] == ["orders.created"]
        assert [b["group"]["subject"] for _, b in billing_hook.alerts()] == ["billing.charged"]
        assert sorted(b["group"]["subject"] for _, b in everyone.alerts()) == [
            "billing.charged", "orders.created", "shipping.labelled"]
        # The same event at each target: one id, delivered once to each.
        ids = {b["group"]["subject"]: b["id"] for _, b in everyone.alerts()}
        assert orders_hook.alerts()[0][0]["x-dlq-event-id"] == ids["orders.created"]
        assert billing_hook.alerts()[0][1]["id"] == ids["billing.charged"]
    finally:
        runtime_of(app).stop()


@pytest.mark.slow
def test_a_team_webhook_alone_starts_the_alert_sender(tmp_path, nats_server, receiver):
    hook = receiver()
    teams = (Team("orders", ("orders.>",), (hook.url,)),)
    app = start_app(tmp_path, nats_server, f"sqlite:///{tmp_path}/dlq.sqlite3", [], teams=teams)
    try:
        assert runtime_of(app).alerts is not None
        dead_letter(nats_server, 1, "customer 17 not found", subject="orders.created")
        dead_letter(nats_server, 1, "label printer offline", subject="shipping.labelled")
        support.wait_for(lambda: hook.alerts("group.new"), timeout=30, message="the team's alert")
        assert [json.loads(b)["group"]["subject"] for _, b in hook.requests] == ["orders.created"]
    finally:
        runtime_of(app).stop()


def _rows(engine):
    with engine.connect() as conn:
        return conn.execute(select(Alert)).all()
