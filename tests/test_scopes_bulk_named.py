"""A bulk selection by filter naming a failure group or a job the signed-in person may read but
not act on (an operator grant on one pattern, a viewer grant on another, as DLQ_OIDC_ROLES gives
them): refused saying it is outside the scopes they may act on, a 403, never "not a failure
group"; one they may not even read is still unknown, a 400, as an id that names none."""

from __future__ import annotations

import pytest

from dlq_dashboard.actions.bulk.jobs import GROUP_NOT_YOURS, JOB_NOT_YOURS, create_job
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import Grant, parse_scopes

from . import support

#: Operator over orders, viewer over billing (audit is neither's).
MIXED = (Grant("operator", parse_scopes(["orders.>"])), Grant("viewer", parse_scopes(["billing.>"])))


@pytest.fixture
def groups(offline_app):
    """{subject: (entry id, group id)} for an entry of orders, one of billing and one of audit."""
    store = runtime_of(offline_app).store
    found = {}
    for seq, subject in enumerate(("orders.created", "billing.paid", "audit.seen"), start=1):
        entry_id = support.dead_letter(offline_app, seq, subject, Dlq_Reason="fatal", Dlq_Error=f"{subject} failed")
        found[subject] = (entry_id, store.group_of(entry_id)[0])
    return found


@pytest.mark.both_databases
def test_a_group_read_but_not_acted_on_is_a_403_saying_so_in_bulk_and_its_previews(offline_app, groups):
    client = support.signed_in_with(offline_app, MIXED)
    csrf = {"X-CSRFToken": support.csrf_token(client, "/")}
    orders, billing, audit = (groups[s][1] for s in ("orders.created", "billing.paid", "audit.seen"))
    assert client.get(f"/api/groups/{billing}").status_code == 200
    refused = GROUP_NOT_YOURS.format(group=billing)
    for path in ("/api/bulk", "/api/repair/preview"):
        answer = client.post(path, json={"action": "close", "filter": {"group": str(billing), "status": "open"}}
                             if path == "/api/bulk" else {"filter": {"group": str(billing)}}, headers=csrf)
        assert (answer.status_code, answer.get_json()["error"]) == (403, refused), path
        unknown = client.post(path, json={"action": "close", "filter": {"group": str(audit), "status": "open"}}
                              if path == "/api/bulk" else {"filter": {"group": str(audit)}}, headers=csrf)
        assert unknown.status_code == 400 and "is not a failure group" in unknown.get_json()["error"], path
    for action in ("republish", "close", "repair", "patch"):
        page = client.get(f"/bulk/preview?by=filter&action={action}&status=open&group={billing}")
        assert page.status_code == 403 and refused in page.get_data(as_text=True), action
        assert client.get(f"/bulk/preview?by=filter&action={action}&status=open&group={audit}").status_code == 400
        assert client.get(f"/bulk/preview?by=filter&action={action}&status=open&group={orders}").status_code == 200
    answer = client.post("/api/bulk", json={"action": "close", "filter": {"group": str(orders), "status": "open"}},
                         headers=csrf)
    assert answer.status_code == 202, answer.get_data(as_text=True)


@pytest.mark.both_databases
def test_a_job_read_but_not_acted_on_is_a_403_saying_so_in_a_bulk_filter(offline_app, groups):
    rt = runtime_of(offline_app)
    billing = create_job(rt, "close", actor="admin", ids=[groups["billing.paid"][0]], start=False)
    audit = create_job(rt, "close", actor="admin", ids=[groups["audit.seen"][0]], start=False)
    client = support.signed_in_with(offline_app, MIXED)
    csrf = {"X-CSRFToken": support.csrf_token(client, "/")}
    answer = client.post("/api/bulk", json={"action": "close", "filter": {"job": str(billing)}}, headers=csrf)
    assert (answer.status_code, answer.get_json()["error"]) == (403, JOB_NOT_YOURS.format(job=billing))
    answer = client.post("/api/bulk", json={"action": "close", "filter": {"job": str(audit)}}, headers=csrf)
    assert answer.status_code == 400 and "is not a bulk job" in answer.get_json()["error"]
