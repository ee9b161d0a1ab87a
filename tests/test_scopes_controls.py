"""The pages offer an operator the controls of an entry or a failure group only where their
operator grants cover it: with an operator grant on one pattern and a viewer grant on another
(as DLQ_OIDC_ROLES gives them), the list's read-only rows have no checkbox and no Republish or
Close, a read-only group's page no state forms, note form or bulk actions (a sentence says
why, as the entry page does), /groups no bulk Republish or Close for it, and a close job of
read-only entries no "Reopen what it closed": each request would be a 403."""

from __future__ import annotations

import re

import pytest

from dlq_dashboard.access import visible
from dlq_dashboard.actions.bulk.jobs import create_job
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import Grant, parse_scopes

from . import support

MIXED = (Grant("operator", parse_scopes(["orders.>"])), Grant("viewer", parse_scopes(["billing.>"])))


@pytest.fixture
def two(offline_app):
    """{subject: (entry id, group id)} for an entry of orders (acted on) and one of billing (read only)."""
    store = runtime_of(offline_app).store
    found = {}
    for seq, subject in enumerate(("orders.created", "billing.paid"), start=1):
        entry_id = support.dead_letter(offline_app, seq, subject, Dlq_Reason="fatal", Dlq_Error=f"{subject} failed")
        found[subject] = (entry_id, store.group_of(entry_id)[0])
    return found


def row_of(page: str, entry_id: int) -> str:
    """The list's row of one entry."""
    found = re.search(rf'<tr hx-disable data-id="{entry_id}".*?</tr>', page, re.S)
    assert found, f"no row of entry {entry_id}"
    return found.group(0)


def test_the_list_offers_no_checkbox_and_no_row_actions_on_a_row_the_operator_may_only_read(offline_app, two):
    client = support.signed_in_with(offline_app, MIXED)
    (orders, _), (billing, _) = two["orders.created"], two["billing.paid"]
    page = client.get("/").get_data(as_text=True)
    acted, read = row_of(page, orders), row_of(page, billing)
    assert f'name="ids" value="{orders}:' in acted and 'data-action="row-close"' in acted
    assert 'name="ids"' not in read and "data-action=" not in read and "read only" in read
    # The row's form would be refused, which is why it is not offered.
    csrf = {"X-CSRFToken": support.csrf_token(client, "/")}
    assert client.post(f"/api/entries/{billing}/close", json={"version": 1}, headers=csrf).status_code == 403


def test_a_group_the_operator_may_only_read_offers_no_triage_or_bulk_actions_and_says_why(offline_app, two):
    client = support.signed_in_with(offline_app, MIXED)
    orders, billing = two["orders.created"][1], two["billing.paid"][1]
    read = client.get(f"/groups/{billing}").get_data(as_text=True)
    assert visible.GROUP_NOT_YOURS.format(id=billing) in read and 'id="outside-acts"' in read
    controls = ("Assign to me", "Resolve", "Ignore for good", "Add note", "label\">Republish</button>",
                "label\">Close</button>")
    for control in controls:
        assert control not in read, control
    acted = client.get(f"/groups/{orders}").get_data(as_text=True)
    assert 'id="outside-acts"' not in acted
    for control in controls:
        assert control in acted, control
    groups = client.get("/groups").get_data(as_text=True)
    assert f'aria-describedby="group-{orders}-label">Republish</button>' in groups
    assert f'aria-describedby="group-{billing}-label">Republish</button>' not in groups
    assert f'aria-describedby="group-{billing}-label">Close</button>' not in groups
    csrf = {"X-CSRFToken": support.csrf_token(client, "/")}
    assert client.post(f"/api/groups/{billing}/notes", json={"text": "mine"}, headers=csrf).status_code == 403


def test_a_close_job_of_entries_the_operator_may_only_read_offers_no_reopen(offline_app, two):
    rt = runtime_of(offline_app)
    jobs = {subject: create_job(rt, "close", actor="admin", ids=[entry_id], note="n")
            for subject, (entry_id, _) in two.items()}
    support.jobs_settled(rt.engine)
    client = support.signed_in_with(offline_app, MIXED)
    assert "Reopen what it closed" in client.get(f"/jobs/{jobs['orders.created']}").get_data(as_text=True)
    assert "Reopen what it closed" not in client.get(f"/jobs/{jobs['billing.paid']}").get_data(as_text=True)
