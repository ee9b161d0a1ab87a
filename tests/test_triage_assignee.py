"""A group's state set to investigating without an assignee keeps the group's assignee, as
docs/triage.md says ("not given, the assignee stays"); a group with none is refused with a
sentence. The API and the group page's form."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from sqlalchemy import select

from dlq_dashboard.db.models import Action, FailureGroup, GroupActivity
from dlq_dashboard.runtime import runtime_of

from . import support
from .test_triage import fail, group_row, post_state


@pytest.fixture
def world(offline_app, tokens):
    """Two groups of failures: the first assigned to alice and then resolved (she stays its
    assignee), the second never assigned."""
    engine = runtime_of(offline_app).engine
    fail(engine, 1, 2, error="order 1 not found")
    fail(engine, 3, 2, error="payment declined")
    with engine.connect() as conn:
        kept, bare = conn.execute(select(FailureGroup.id).order_by(FailureGroup.id)).scalars().all()
    client, operator = offline_app.test_client(), tokens["operator"]
    assert post_state(client, operator, kept, version=1, state="investigating", assignee="alice").status_code == 200
    assert post_state(client, operator, kept, version=2, state="resolved").status_code == 200
    assert (group_row(engine, kept).state, group_row(engine, kept).assignee) == ("resolved", "alice")
    return {"engine": engine, "kept": kept, "bare": bare, "client": client, "operator": operator}


@pytest.mark.both_databases
def test_the_api_keeps_the_assignee_when_none_is_given_and_refuses_a_group_without_one(world, database_url):
    engine, client, operator = world["engine"], world["client"], world["operator"]
    answer = post_state(client, operator, world["kept"], version=3, state="investigating")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert {k: answer.get_json()["group"][k] for k in ("state", "assignee", "version")} == {
        "state": "investigating", "assignee": "alice", "version": 4}
    # Its activity and its audit record name who is on it.
    with engine.connect() as conn:
        activity = conn.execute(select(GroupActivity.detail).where(GroupActivity.group_id == world["kept"],
                                                                   GroupActivity.state == "investigating")
                                .order_by(GroupActivity.id)).scalars().all()
        audit = conn.execute(select(Action.detail).where(Action.action == "group_state")
                             .order_by(Action.id)).scalars().all()
    assert [json.loads(d)["assignee"] for d in activity] == ["alice", "alice"]
    assert json.loads(audit[-1])["assignee"] == "alice"

    refused = post_state(client, operator, world["bare"], version=1, state="investigating")
    assert refused.status_code == 400
    assert refused.get_json()["error"] == "assignee is required for this state: the group has none to keep."
    row = group_row(engine, world["bare"])
    assert (row.state, row.assignee, row.version) == ("open", None, 1)


def test_the_group_page_form_keeps_the_assignee_when_the_name_is_left_empty(world, offline_app):
    engine, kept, bare = world["engine"], world["kept"], world["bare"]
    operator = support.logged_in(offline_app, "operator")
    token = support.csrf_token(operator, f"/groups/{kept}")
    answer = operator.post(f"/groups/{kept}/state", data={"csrf_token": token, "version": "3",
                                                          "state": "investigating", "assignee": ""})
    assert answer.status_code == 303, unescape(answer.get_data(as_text=True))[:3000]
    row = group_row(engine, kept)
    assert (row.state, row.assignee, row.version) == ("investigating", "alice", 4)
    page = unescape(operator.get(f"/groups/{kept}").get_data(as_text=True))
    assert f"Group {kept} is assigned to alice." in page
    # The box holds the name the group has (a hint of it read as typed in); sent empty all the
    # same (a form of another page, a script), the name stays, as above.
    box = re.search(r'<input name="assignee"[^>]*>', page).group(0)
    assert 'value="alice"' in box and 'placeholder="a name"' in box

    # A group with no one to keep: the box is required, and the form without a name is refused.
    page = operator.get(f"/groups/{bare}").get_data(as_text=True)
    assert " required" in re.search(r'<input name="assignee"[^>]*>', page).group(0)
    refused = operator.post(f"/groups/{bare}/state", data={"csrf_token": token, "version": "1",
                                                           "state": "investigating", "assignee": ""})
    assert refused.status_code == 400
    assert "assignee is required for this state: the group has none to keep." in unescape(refused.get_data(as_text=True))
    assert (group_row(engine, bare).state, group_row(engine, bare).version) == ("open", 1)
