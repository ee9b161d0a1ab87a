"""Triage (SPEC section 11): a failure group's state, changed with the version seen (409 when
stale), audited, with notes and an activity log; regression and reopening decided at ingest in
the mirror's transaction with their alerts; ignored groups silent; the periodic pass that ends an
ignore whose time has come; the API, the page's forms and the command line."""

from __future__ import annotations

import json
import re
from html import unescape
from datetime import timedelta

import pytest
from sqlalchemy import select

from dlq_dashboard.actions.triage import ReopenSchedule, change_state, parse_state_change, reopen_expired
from dlq_dashboard.alerts.outbox import AlertRule
from dlq_dashboard.db.models import Action, Alert, FailureGroup, GroupActivity
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support

RULE = AlertRule(urls=("http://a.example/hook",), threshold=1000)


def fail(engine, first_seq: int, count: int = 1, error: str = "order 1 not found", rule: AlertRule | None = RULE,
         subject: str = "orders.created") -> None:
    """Dead-letter ``count`` failures of one cause, as the mirror writes them."""
    headers = support.dlq_headers(subject, Dlq_Reason="fatal", Dlq_Error=error)
    ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(seq, f"dlq.{subject}", dict(headers), b'{"a": 1}', utcnow())
                                           for seq in range(first_seq, first_seq + count)], alerts=rule)


def group_row(engine, group_id: int | None = None):
    with engine.connect() as conn:
        query = select(FailureGroup)
        if group_id is not None:
            query = query.where(FailureGroup.id == group_id)
        return conn.execute(query.order_by(FailureGroup.id)).first()


def events(engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(select(Alert.event).order_by(Alert.id)).scalars())


def post_state(client, token, group_id: int, **body):
    return client.post(f"/api/groups/{group_id}/state", json=body, headers=support.bearer(token))


@pytest.fixture
def world(offline_app, tokens):
    """One group of three failures (and its group.new alert)."""
    engine = runtime_of(offline_app).engine
    fail(engine, 1, 3)
    return {"engine": engine, "group": group_row(engine).id, "client": offline_app.test_client(), "tokens": tokens}


# --- the state, its version and its audit --------------------------------------------------------

@pytest.mark.both_databases
def test_a_group_is_open_at_first_and_the_api_lists_its_state_assignee_team_version_and_notes(world, database_url):
    body = world["client"].get("/api/groups", headers=support.bearer(world["tokens"]["viewer"])).get_json()
    group = body["groups"][0]
    assert {k: group[k] for k in ("state", "assignee", "team", "version", "notes")} == {
        "state": "open", "assignee": None, "team": None, "version": 1, "notes": 0}


def test_a_misspelt_field_of_a_state_change_or_a_note_is_a_400_and_changes_nothing(world):
    client, operator, group = world["client"], world["tokens"]["operator"], world["group"]
    answer = post_state(client, operator, group, version=1, state="resolved", resolvd_in="v2.4.1")
    assert answer.status_code == 400
    assert answer.get_json()["error"] == ("'resolvd_in' is not a field of this request: use version, state, "
                                          "assignee, note, until, until_count, resolved_in.")
    note = client.post(f"/api/groups/{group}/notes", json={"txt": "looked"}, headers=support.bearer(operator))
    assert note.status_code == 400 and note.get_json()["error"].startswith("'txt' is not a field")
    row = group_row(world["engine"], group)
    assert (row.state, row.version, row.note_count) == ("open", 1, 0)


@pytest.mark.both_databases
def test_assigning_takes_the_version_seen_and_a_stale_one_is_a_409_that_changes_nothing(world, database_url):
    client, operator, group = world["client"], world["tokens"]["operator"], world["group"]
    answer = post_state(client, operator, group, version=1, state="investigating", assignee="alice", note="on it")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert {k: answer.get_json()["group"][k] for k in ("state", "assignee", "version", "notes")} == {
        "state": "investigating", "assignee": "alice", "version": 2, "notes": 1}
    stale = post_state(client, operator, group, version=1, state="resolved")
    assert stale.status_code == 409 and "version 1" in stale.get_json()["error"]
    # The answer carries the group as it is now, as an entry's 409 carries the entry: decide again from it.
    assert {k: stale.get_json()["group"][k] for k in ("id", "state", "assignee", "version")} == {
        "id": group, "state": "investigating", "assignee": "alice", "version": 2}
    assert group_row(world["engine"], group).state == "investigating"
    with world["engine"].connect() as conn:
        audit = conn.execute(select(Action.action, Action.actor, Action.note, Action.detail)
                             .where(Action.action == "group_state")).all()
    assert [(a.action, a.actor, a.note) for a in audit] == [("group_state", "token:test-operator", "on it")]
    assert json.loads(audit[0].detail)["group"] == group and json.loads(audit[0].detail)["state"] == "investigating"


@pytest.mark.parametrize("body, words", [
    ({"state": "regressed"}, "not set by hand"),
    ({"state": "closed"}, "is not valid"),
    ({"state": "investigating"}, "assignee is required"),
    ({"state": "resolved", "until": "2h"}, "until goes with state ignored"),
    ({"state": "ignored", "until": "2h", "until_count": 5}, "not both"),
    ({"state": "ignored", "until": "yesterday"}, "until 'yesterday' is not valid"),
    ({"state": "ignored", "until": "2020-01-01T00:00:00Z"}, "has passed"),
    # Past what a date holds: OverflowError, a 500, on the group's page and in the API.
    ({"state": "ignored", "until": "3000000d"}, "is more than 100 years away"),
    ({"state": "ignored", "until": "99999999999d"}, "is more than 100 years away"),
    ({"state": "ignored", "until_count": 0}, "until_count"),
    ({"state": "ignored", "resolved_in": "v2"}, "resolved_in goes with state resolved"),
    ({"state": "open", "note": 5}, "note must be text"),
])
def test_a_bad_state_change_is_a_400_with_a_sentence(world, body, words):
    answer = post_state(world["client"], world["tokens"]["operator"], world["group"], version=1, **body)
    assert answer.status_code == 400 and words in answer.get_json()["error"], answer.get_json()
    assert group_row(world["engine"], world["group"]).version == 1


def test_viewers_read_and_operators_change(world):
    client, tokens, group = world["client"], world["tokens"], world["group"]
    assert post_state(client, tokens["viewer"], group, version=1, state="resolved").status_code == 403
    assert client.post(f"/api/groups/{group}/notes", json={"text": "x"},
                       headers=support.bearer(tokens["viewer"])).status_code == 403
    assert client.get(f"/api/groups/{group}", headers=support.bearer(tokens["viewer"])).status_code == 200
    assert client.get("/api/groups/999999", headers=support.bearer(tokens["viewer"])).status_code == 404
    assert post_state(client, tokens["operator"], 999999, version=1, state="resolved").status_code == 404


@pytest.mark.both_databases
def test_a_note_is_201_counted_audited_and_in_the_activity_without_raising_the_version(world, database_url):
    client, tokens, group = world["client"], world["tokens"], world["group"]
    answer = client.post(f"/api/groups/{group}/notes", json={"text": "  looks like the v1 parser  "},
                         headers=support.bearer(tokens["operator"]))
    assert answer.status_code == 201 and answer.get_json()["note"]["text"] == "looks like the v1 parser"
    assert client.post(f"/api/groups/{group}/notes", json={"text": " "},
                       headers=support.bearer(tokens["operator"])).status_code == 400
    shown = client.get(f"/api/groups/{group}", headers=support.bearer(tokens["viewer"])).get_json()
    assert shown["notes"] == 1 and shown["version"] == 1
    assert [(a["kind"], a["text"]) for a in shown["activity"]] == [("note", "looks like the v1 parser")]
    with world["engine"].connect() as conn:
        assert conn.execute(select(Action.note).where(Action.action == "group_note")).scalar_one() == \
            "looks like the v1 parser"
    # The audit page names the group it was about (its Entry column is empty), and offers the
    # group records among its actions.
    assert post_state(client, tokens["operator"], group, version=1, state="investigating",
                      assignee="kim").status_code == 200
    page = client.get("/audit", headers=support.bearer(tokens["viewer"])).get_data(as_text=True)
    assert f'group_note: <a href="/groups/{group}">group {group}</a>' in page
    assert f'group_state: <a href="/groups/{group}">group {group}</a>, investigating (kim)' in page
    assert '<option value="group_state">group_state</option>' in page


@pytest.mark.both_databases
def test_api_groups_filters_by_state_list_assignee_me_and_team(world, database_url):
    engine, client, tokens = world["engine"], world["client"], world["tokens"]
    fail(engine, 10, 1, error="another cause")
    fail(engine, 20, 1, error="a third cause")
    first, second, third = (g.id for g in _all_groups(engine))
    operator = support.bearer(tokens["operator"])
    assert post_state(client, tokens["operator"], first, version=1, state="investigating",
                      assignee="token:test-operator").status_code == 200
    assert post_state(client, tokens["operator"], second, version=1, state="resolved", resolved_in="v2").status_code == 200
    with engine.begin() as conn:
        conn.execute(FailureGroup.__table__.update().where(FailureGroup.id == third).values(team="orders"))

    def ids(query: str, headers=operator) -> list[int]:
        answer = client.get(f"/api/groups?{query}", headers=headers)
        assert answer.status_code == 200, answer.get_data(as_text=True)
        return sorted(g["id"] for g in answer.get_json()["groups"])

    assert ids("state=investigating,resolved") == sorted([first, second])
    assert ids("state=open") == [third]
    assert ids("assignee=me") == [first]
    assert ids("assignee=me", support.bearer(tokens["viewer"])) == []
    assert ids("team=orders") == [third]
    bad = client.get("/api/groups?state=done", headers=operator)
    assert bad.status_code == 400 and "state 'done' is not valid" in bad.get_json()["error"]


def test_assignee_me_is_stored_as_the_caller_on_the_api_and_the_command_line(world, offline_app):
    from dlq_dashboard.cli.output import cli_actor

    client, tokens, group = world["client"], world["tokens"], world["group"]
    answer = post_state(client, tokens["operator"], group, version=1, state="investigating", assignee="me")
    assert answer.status_code == 200 and answer.get_json()["group"]["assignee"] == "token:test-operator"
    found = client.get("/api/groups?assignee=me", headers=support.bearer(tokens["operator"])).get_json()
    assert [g["id"] for g in found["groups"]] == [group]
    runner = offline_app.test_cli_runner()
    result = runner.invoke(args=["groups", "assign", str(group), "me"])
    assert result.exit_code == 0 and f"investigating ({cli_actor()})" in result.output, result.output
    listed = runner.invoke(args=["groups", "list", "--json", "--assignee", "me"])
    assert [g["id"] for g in json.loads(listed.output)["groups"]] == [group]


def _all_groups(engine):
    with engine.connect() as conn:
        return conn.execute(select(FailureGroup).order_by(FailureGroup.id)).all()


# --- at ingest: regression, ignores and their alerts ---------------------------------------------

@pytest.mark.both_databases
def test_a_new_failure_in_a_resolved_group_regresses_it_with_one_group_regressed_alert(world, database_url):
    engine, group = world["engine"], world["group"]
    assert post_state(world["client"], world["tokens"]["operator"], group, version=1, state="resolved",
                      resolved_in="v2").status_code == 200
    fail(engine, 4, 2)
    row = group_row(engine, group)
    assert (row.state, row.resolved_in, row.version) == ("regressed", "v2", 3)
    assert events(engine) == ["group.new", "group.regressed"]
    body = json.loads(_alert_bodies(engine)[-1])
    assert body["event"] == "group.regressed" and body["group"]["state"] == "regressed"
    assert "v2" in body["text"] and body["group"]["resolved_in"] == "v2"
    fail(engine, 6, 1)  # regressed already: no second alert
    assert events(engine) == ["group.new", "group.regressed"]
    with engine.connect() as conn:
        logged = conn.execute(select(GroupActivity.actor, GroupActivity.state).order_by(GroupActivity.id)).all()
    assert [tuple(r) for r in logged][-1] == ("mirror", "regressed")


@pytest.mark.both_databases
def test_a_failure_stored_before_the_group_was_resolved_and_mirrored_after_does_not_regress_it(world):
    from dlq_dashboard.ingest.parse import Advisory
    from dlq_dashboard.ingest.writes import FetchedMessage, ingest_advisory_batch

    def terminated(seq: int, at) -> None:
        advisory = Advisory("terminated", f"adv-{seq}", at, "ORDERS", "shipper", seq, 1, None, {})
        ingest_advisory_batch(engine, "ADV", "e1", [(advisory, FetchedMessage("orders.created", None, b"{}"), None)],
                              seq, after=seq - 1, alerts=RULE)

    engine, group = world["engine"], world["group"]
    terminated(1, utcnow())
    advisory_group = max(g.id for g in _all_groups(engine))
    before = utcnow()  # the DLQ stream and JetStream had these then; the mirror was behind
    for resolved in (group, advisory_group):
        change_state(engine, resolved, 1, parse_state_change({"state": "resolved", "resolved_in": "v2"}, utcnow()),
                     actor="test")
    headers = support.dlq_headers("orders.created", Dlq_Reason="fatal", Dlq_Error="order 1 not found")
    ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(4, "dlq.orders.created", dict(headers), b"{}", before)],
                     alerts=RULE)
    terminated(2, before)
    assert [(g.state, g.open_count, g.version) for g in _all_groups(engine)] == [("resolved", 4, 2), ("resolved", 2, 2)]
    assert "group.regressed" not in events(engine)
    fail(engine, 5)  # stored after it was resolved: a failure again, as is an advisory sent after
    terminated(3, utcnow())
    assert [g.state for g in _all_groups(engine)] == ["regressed", "regressed"]
    assert events(engine).count("group.regressed") == 2


def _alert_bodies(engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(select(Alert.body).order_by(Alert.id)).scalars())


@pytest.mark.both_databases
def test_an_ignored_group_raises_no_spike_and_opens_again_after_its_count_with_group_reopened(world, database_url):
    engine, group = world["engine"], world["group"]
    assert post_state(world["client"], world["tokens"]["operator"], group, version=1, state="ignored",
                      until_count=5).status_code == 200
    spiky = AlertRule(urls=RULE.urls, threshold=3)
    fail(engine, 10, 4, rule=spiky)  # past the spike threshold, but ignored: silent
    row = group_row(engine, group)
    assert (row.state, row.ignored_seen) == ("ignored", 4)
    assert events(engine) == ["group.new"]
    fail(engine, 20, 1, rule=spiky)  # the fifth: open again
    row = group_row(engine, group)
    assert (row.state, row.ignored_until_count, row.ignored_seen) == ("open", None, 0)
    assert events(engine)[-1] == "group.reopened" and events(engine).count("group.reopened") == 1


def test_an_ignore_by_count_shows_how_many_failures_came_since_on_the_page_the_api_and_the_cli(world, offline_app):
    """The page still read "until 5 more failures" after 3 had come, and the API and the CLI gave
    only until_count: nobody could tell that 2 more would open the group."""
    engine, client, group = world["engine"], world["client"], world["group"]
    viewer = support.bearer(world["tokens"]["viewer"])
    assert client.get(f"/api/groups/{group}", headers=viewer).get_json()["ignored_seen"] is None  # open
    assert post_state(client, world["tokens"]["operator"], group, version=1, state="ignored",
                      until_count=5).status_code == 200
    fail(engine, 10, 3)
    body = client.get(f"/api/groups/{group}", headers=viewer).get_json()
    assert (body["state"], body["until_count"], body["ignored_seen"]) == ("ignored", 5, 3)
    listed = client.get("/api/groups?state=ignored", headers=viewer).get_json()["groups"]
    assert [(g["id"], g["ignored_seen"]) for g in listed] == [(group, 3)]
    page = client.get(f"/groups/{group}", headers=viewer).get_data(as_text=True)
    assert "until 5 more failures: 3 so far" in " ".join(page.split())
    shown = offline_app.test_cli_runner().invoke(args=["groups", "show", str(group)])
    assert shown.exit_code == 0 and re.search(r"^until_count:\s+5$", shown.output, re.M) \
        and re.search(r"^ignored_seen:\s+3$", shown.output, re.M), shown.output


@pytest.mark.both_databases
def test_an_ignored_group_whose_time_has_come_opens_again_without_a_failure_in_the_periodic_pass(world,
                                                                                                 database_url):
    engine, group = world["engine"], world["group"]
    assert post_state(world["client"], world["tokens"]["operator"], group, version=1, state="ignored",
                      until="1h").status_code == 200
    assert reopen_expired(engine, RULE) == set()
    assert reopen_expired(engine, RULE, now=utcnow() + timedelta(hours=2)) == {group}
    assert group_row(engine, group).state == "open" and events(engine) == ["group.new", "group.reopened"]
    assert reopen_expired(engine, RULE, now=utcnow() + timedelta(hours=3)) == set()


def test_the_reopening_pass_runs_only_while_this_process_leads(world):
    engine, group = world["engine"], world["group"]
    change = parse_state_change({"state": "ignored", "until": "1s"}, utcnow())
    change_state(engine, group, 1, change, actor="test")
    leading = {"now": False}
    schedule = ReopenSchedule(engine, RULE, lambda: leading["now"], interval=0.05).start()
    try:
        support.wait_for(lambda: group_row(engine, group).ignored_until < utcnow(), message="the second to pass")
        schedule._stop.wait(0.3)  # several passes while not leading: nothing changes
        assert group_row(engine, group).state == "ignored"
        leading["now"] = True
        support.wait_for(lambda: group_row(engine, group).state == "open", message="the pass to reopen it")
    finally:
        schedule.stop()


def test_ignored_for_good_stays_ignored_and_silent(world):
    engine, group = world["engine"], world["group"]
    assert post_state(world["client"], world["tokens"]["operator"], group, version=1, state="ignored").status_code == 200
    fail(engine, 30, 50, rule=AlertRule(urls=RULE.urls, threshold=10))
    assert group_row(engine, group).state == "ignored" and events(engine) == ["group.new"]


# --- the page, its forms, and the list ------------------------------------------------------------

def test_the_group_page_shows_state_actions_notes_activity_counts_and_newest_entries(world, offline_app):
    engine, group = world["engine"], world["group"]
    operator = support.logged_in(offline_app, "operator")
    page = operator.get(f"/groups/{group}").get_data(as_text=True)
    assert "order &lt;id&gt; not found" in page
    for words in ("Assign to me", "Resolve", "Ignore for good", "Add note", "Newest entries", "Every entry of this group"):
        assert words in page, words
    # The group's bulk actions, the same as its row's on the groups page (Repair was missing here);
    # no Repair by schema on a group whose failures are not the schema's.
    bulk_actions = re.compile(r'name="action" value="(\w+)"')
    row = operator.get("/groups").get_data(as_text=True)
    assert bulk_actions.findall(page) == bulk_actions.findall(row) == ["republish", "close", "patch"]
    token = support.csrf_token(operator, f"/groups/{group}")
    answer = operator.post(f"/groups/{group}/state", data={"csrf_token": token, "version": "1",
                                                           "state": "investigating", "assign": "me"})
    assert answer.status_code == 303
    assert group_row(engine, group).assignee == "operator-user"
    answer = operator.post(f"/groups/{group}/notes", data={"csrf_token": token, "text": "<b>bold</b> idea"})
    assert answer.status_code == 303
    page = operator.get(f"/groups/{group}").get_data(as_text=True)
    assert "&lt;b&gt;bold&lt;/b&gt; idea" in page and "<b>bold</b>" not in page
    assert "operator-user" in page and "investigating" in page
    # Without the CSRF token nothing changes.
    refused = operator.post(f"/groups/{group}/state", data={"version": "2", "state": "open"})
    assert refused.status_code in (400, 403) and group_row(engine, group).state == "investigating"
    # A change refused is the group's page again, with why and what was typed (a page of its own
    # lost both): a stale version, and a duration that is none.
    stale = operator.post(f"/groups/{group}/state", data={"csrf_token": token, "version": "1", "state": "resolved",
                                                          "resolved_in": "v2.4.1"})
    text = stale.get_data(as_text=True)
    assert stale.status_code == 409 and "The group changed since you saw it" in text
    assert 'value="v2.4.1"' in text and "operator-user" in text  # who changed it, in its activity
    bad = operator.post(f"/groups/{group}/state", data={"csrf_token": token, "version": "2", "state": "ignored",
                                                        "until": "tomorrow"})
    assert bad.status_code == 400 and 'name="until"' in bad.get_data(as_text=True)
    assert 'value="tomorrow"' in bad.get_data(as_text=True) and group_row(engine, group).state == "investigating"
    viewer = support.logged_in(offline_app, "viewer")
    seen = viewer.get(f"/groups/{group}").get_data(as_text=True)
    assert "Assign to me" not in seen and "bold" in seen
    assert viewer.post(f"/groups/{group}/state", data={"csrf_token": support.csrf_token(viewer, f"/groups/{group}"),
                                                       "version": "2", "state": "open"}).status_code == 403


def test_the_groups_page_shows_state_and_assignee_and_filters_by_them_and_the_list_marks_entries(world, offline_app):
    engine, group = world["engine"], world["group"]
    fail(engine, 40, 1, error="another cause")
    other = _all_groups(engine)[-1].id
    assert post_state(world["client"], world["tokens"]["operator"], group, version=1, state="investigating",
                      assignee="alice").status_code == 200
    viewer = support.logged_in(offline_app, "viewer")
    page = viewer.get("/groups?state=investigating").get_data(as_text=True)
    assert "alice" in page and f"/groups/{group}" in page and f"/groups/{other}\"" not in page
    assert viewer.get("/groups?state=nope").status_code == 400
    listing = viewer.get("/").get_data(as_text=True)
    assert 'group-state-investigating' in listing


@pytest.mark.both_databases
def test_the_assign_field_offers_the_names_groups_the_reader_may_read_are_assigned_to(world, offline_app):
    """Any name is taken as an assignee (a rotation's, a person's not signed in yet), and a typo
    ("opz") hid the group from its person's "assigned to me": the field offers the names groups
    are assigned to, those of groups outside a scoped reader's scopes not."""
    from dlq_dashboard.accounts.tokens import create_token
    from dlq_dashboard.scopes import Scope

    engine, group, client = world["engine"], world["group"], world["client"]
    operator = world["tokens"]["operator"]
    fail(engine, 40, 1, error="another cause")
    fail(engine, 50, 1, subject="payments.settle")
    other, payments = [g.id for g in _all_groups(engine)[-2:]]
    assert post_state(client, operator, other, version=1, state="investigating", assignee="night-rota").status_code == 200
    assert post_state(client, operator, payments, version=1, state="investigating", assignee="pay-rota").status_code == 200

    def offered(headers) -> list[str]:
        page = client.get(f"/groups/{group}", headers=headers).get_data(as_text=True)
        assert 'aria-label="Assign to" list="assignees"' in page
        datalist = re.search(r'<datalist id="assignees">(.*?)</datalist>', page, re.S).group(1)
        return re.findall(r'<option value="([^"]*)">', datalist)

    assert offered(support.bearer(operator)) == ["pay-rota", "night-rota"]  # the latest assigned first
    scoped = create_token(engine, "orders-op", "operator", scopes=(Scope("orders.>"),))
    assert offered(support.bearer(scoped)) == ["night-rota"]


def test_the_trend_is_drawn_per_minute_for_a_burst_of_minutes(world, offline_app):
    viewer = support.logged_in(offline_app, "viewer")
    page = viewer.get(f"/groups/{world['group']}").get_data(as_text=True)
    assert 'data-bar-size="1 minute"' in page


# --- the command line -------------------------------------------------------------------------------

def test_the_command_line_assigns_resolves_ignores_reopens_notes_and_shows(world, offline_app):
    runner, group, engine = offline_app.test_cli_runner(), str(world["group"]), world["engine"]

    def run(*args):
        result = runner.invoke(args=["groups", *args])
        assert result.exit_code == 0, result.output
        return result.output

    assert "investigating (bob)" in run("assign", group, "bob")
    assert "resolved" in run("resolve", group, "--in", "v3")
    assert group_row(engine, int(group)).resolved_in == "v3"
    assert "ignored" in run("ignore", group, "--count", "10")
    assert "open" in run("reopen", group)
    run("note", group, "checked the logs")
    shown = run("show", group)
    assert "checked the logs" in shown and "state:" in shown
    listed = json.loads(run("list", "--json", "--state", "open"))
    assert [g["id"] for g in listed["groups"]] == [int(group)]
    stale = runner.invoke(args=["groups", "resolve", group, "--version", "1"])
    assert stale.exit_code == 1 and "changed since you saw it" in stale.output
    bad = runner.invoke(args=["groups", "ignore", group])
    assert bad.exit_code == 2
    with engine.connect() as conn:
        actors = set(conn.execute(select(Action.actor).where(Action.action.like("group_%"))).scalars())
    assert all(a.startswith("cli:") for a in actors)


def test_a_saved_view_of_the_groups_keeps_its_state_assignee_me_and_team(world, offline_app):
    viewer = support.logged_in(offline_app, "viewer")
    token = support.csrf_token(viewer, "/groups")
    answer = viewer.post("/views", data={"csrf_token": token, "name": "mine", "page": "groups", "status": "any",
                                         "state": "investigating,regressed", "assignee": "me", "team": "orders"})
    assert answer.status_code == 303
    opened = answer.headers["Location"]
    assert "state=investigating%2Cregressed" in opened and "assignee=me" in opened and "team=orders" in opened


def test_the_trend_of_a_day_long_group_is_drawn_per_hour(offline_app, monkeypatch):
    from dlq_dashboard.ingest import writes

    engine, now = runtime_of(offline_app).engine, utcnow()
    for seq, ago in ((1, timedelta(hours=22)), (2, timedelta(hours=5)), (3, timedelta(minutes=1))):
        monkeypatch.setattr(writes, "utcnow", lambda ago=ago: now - ago)
        fail(engine, seq)
    monkeypatch.undo()
    page = support.logged_in(offline_app, "viewer").get(f"/groups/{group_row(engine).id}").get_data(as_text=True)
    wide, narrow = page.split('class="chart-narrow"')  # the same bars drawn for a desk and a phone
    assert 'data-bar-size="1 hour"' in page and wide.count('class="bar"') == narrow.count('class="bar"') == 3


@pytest.mark.both_databases
def test_a_bulk_job_over_a_group_is_in_its_activity(world, offline_app, database_url):
    from dlq_dashboard.actions.bulk import jobs

    job_id = jobs.create_job(runtime_of(offline_app), "close", actor="ann", filter_args={"group": str(world["group"])},
                             start=False)
    shown = world["client"].get(f"/api/groups/{world['group']}",
                                headers=support.bearer(world["tokens"]["viewer"])).get_json()
    [job] = [a for a in shown["activity"] if a["kind"] == "job"]
    assert (job["actor"], job["detail"]) == ("ann", {"job": job_id, "action": "close", "total": 3})
    page = support.logged_in(offline_app, "viewer").get(f"/groups/{world['group']}").get_data(as_text=True)
    assert f"/jobs/{job_id}" in page


@pytest.mark.both_databases
def test_a_reopen_of_what_a_group_s_close_job_closed_is_in_its_activity(world, offline_app, database_url):
    """"Reopen what it closed" takes job=N:done, which names no group: the group's activity said
    "closed" and never showed the reopen (nor a close of what that reopen reopened)."""
    client, operator = world["client"], support.bearer(world["tokens"]["operator"])
    made = []
    for action, flt in (("close", {"group": str(world["group"])}), ("reopen", {"job": "{}:done", "status": "closed"}),
                        ("close", {"job": "{}:done"})):
        flt = {k: v.format(made[-1] if made else "") for k, v in flt.items()}
        answer = client.post("/api/bulk", json={"action": action, "filter": flt}, headers=operator)
        assert answer.status_code == 202, answer.get_data(as_text=True)
        made.append(answer.get_json()["job"])
        support.jobs_settled(runtime_of(offline_app).engine)
    shown = client.get(f"/api/groups/{world['group']}", headers=support.bearer(world["tokens"]["viewer"])).get_json()
    assert [a["detail"] for a in shown["activity"] if a["kind"] == "job"] == [
        {"job": job_id, "action": action, "total": 3} for job_id, action in zip(made[::-1], ("close", "reopen", "close"))]
    page = support.logged_in(offline_app, "viewer").get(f"/groups/{world['group']}").get_data(as_text=True)
    assert f'bulk <a href="/jobs/{made[1]}">reopen job {made[1]}</a> over 3 entries' in page


def test_a_failure_after_an_ignore_s_time_opens_the_group_at_once(world):
    engine, group = world["engine"], world["group"]
    change_state(engine, group, 1, parse_state_change({"state": "ignored", "until": "1h"}, utcnow()), actor="test")
    fail(engine, 40, 2)  # while ignored: counted
    with engine.begin() as conn:  # its hour has passed, and no pass has run yet
        conn.execute(FailureGroup.__table__.update().where(FailureGroup.id == group)
                     .values(ignored_until=utcnow() - timedelta(minutes=1)))
    fail(engine, 50, 3)  # after its time: they open it, and were not failures while it was ignored
    assert group_row(engine, group).state == "open" and events(engine)[-1] == "group.reopened"
    with engine.connect() as conn:
        detail = json.loads(conn.execute(select(GroupActivity.detail).where(GroupActivity.group_id == group)
                                         .order_by(GroupActivity.id.desc()).limit(1)).scalar())
    assert (detail["why"], detail["failures_while_ignored"]) == ("time", 2)


@pytest.mark.parametrize("fields, box, said", [
    ({"state": "ignored", "until_count": "10000000000000000"}, "until_count",
     "Ignore until this many more failures '10000000000000000' is not valid"),
    ({"state": "investigating", "assignee": "x" * 300}, "assignee", "Assign to is 300 characters long"),
    ({"state": "resolved", "resolved_in": "v" * 300}, "resolved_in", "Resolved in release is 300 characters long"),
    ({"state": "ignored", "until": "soon"}, "until", "Ignore for 'soon' is not valid"),
])
def test_a_refused_state_change_names_the_box_as_the_page_labels_it_and_marks_it(world, offline_app, fields, box,
                                                                                   said):
    """"until_count '1e16' is not valid" named a field the page calls "Ignore until this many more
    failures", and the box was not marked (only "Ignore for" was)."""
    group = world["group"]
    operator = support.logged_in(offline_app, "operator")
    token = support.csrf_token(operator, f"/groups/{group}")
    refused = operator.post(f"/groups/{group}/state", data={"csrf_token": token, "version": "1", **fields})
    text = refused.get_data(as_text=True)
    assert refused.status_code == 400 and said in unescape(text), text[:3000]
    marked = re.findall(r'<input name="(\w+)"[^>]*aria-invalid="true" aria-describedby="state-error" autofocus', text)
    assert marked == [box]
