"""Scopes enforced (access/visible.py): an entry a reader may read but not act on, a republish
within and outside an operator's scopes on a real nats-server, a bulk selection by ids across
scopes, which shared saved views a scoped reader sees, and the kept counts a scoped reader's
groups and summary are counted from."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from dlq_dashboard.access import visible
from dlq_dashboard.access.reader import Reader
from dlq_dashboard.accounts import create_token
from dlq_dashboard.actions.bulk.jobs import create_job, select_items
from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.db.models import Entry, FailureGroup
from dlq_dashboard.entries.filters import EntryFilter, FilterError
from dlq_dashboard.scopes import pattern_within
from dlq_dashboard.entries.saved_views import View
from dlq_dashboard.errors import EntryNotFound, Forbidden
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import Grant, parse_scopes
from dlq_dashboard.times import utcnow
from dlq_dashboard.web import bulk, data, pages

from . import support

ORDERS, BILLING = parse_scopes(["orders.>"]), parse_scopes(["billing.>"])
#: Operator over orders, viewer over billing: reads both, acts on orders only.
MIXED = Reader.of("operator", None, (Grant("operator", ORDERS), Grant("viewer", BILLING)))


@pytest.fixture
def three(offline_app):
    """An entry of orders, one of billing, one of audit: their ids."""
    return {subject: support.dead_letter(offline_app, seq, subject)
            for seq, subject in enumerate(("orders.created", "billing.paid", "audit.seen"), start=1)}


@pytest.mark.both_databases
def test_an_entry_read_but_not_acted_on_is_a_403_with_its_sentence_and_unknown_outside_every_grant(
        offline_app, three):
    store = runtime_of(offline_app).store
    assert visible.acting_on(MIXED, store, three["orders.created"]).original_subject == "orders.created"
    with pytest.raises(Forbidden, match="outside the scopes you may act on"):
        visible.acting_on(MIXED, store, three["billing.paid"])
    assert visible.lookup(MIXED, store, three["billing.paid"]).id == three["billing.paid"]
    with pytest.raises(EntryNotFound):
        visible.acting_on(MIXED, store, three["audit.seen"])
    page = visible.page(MIXED, store, EntryFilter())
    assert {e.original_subject for e in page.entries} == {"orders.created", "billing.paid"}


def test_the_entry_page_offers_no_action_bar_where_the_operator_may_not_act_and_the_api_says_why(
        offline_app, three, monkeypatch):
    client = support.logged_in(offline_app, "operator")
    for module in (data, pages):
        monkeypatch.setattr(module, "current_reader", lambda: MIXED)
    page = client.get(f"/entries/{three['billing.paid']}").get_data(as_text=True)
    assert 'id="outside-acts"' in page and 'data-action="close"' not in page
    assert 'data-action="close"' in client.get(f"/entries/{three['orders.created']}").get_data(as_text=True)
    answer = client.post(f"/api/entries/{three['billing.paid']}/close", json={"version": 1},
                         headers={"X-CSRFToken": support.csrf_token(client, "/")})
    assert answer.status_code == 403
    assert answer.get_json()["error"] == visible.NOT_YOURS.format(id=three["billing.paid"])
    assert client.get(f"/entries/{three['audit.seen']}").status_code == 404


def test_a_job_read_but_not_acted_on_offers_no_cancel_and_its_cancel_is_a_403_saying_why(offline_app, three,
                                                                                         monkeypatch):
    """It was a 404 "There is no job N" beside the job's page, which offered Cancel job."""
    rt = runtime_of(offline_app)
    jobs_of = {subject: create_job(rt, "close", actor="ann", ids=[entry_id], note="n", start=False)
               for subject, entry_id in three.items()}
    client = support.logged_in(offline_app, "operator")
    for module in (data, bulk):
        monkeypatch.setattr(module, "current_reader", lambda: MIXED)
    csrf = {"X-CSRFToken": support.csrf_token(client, "/")}
    billing, orders = jobs_of["billing.paid"], jobs_of["orders.created"]
    page = client.get(f"/jobs/{billing}")
    assert page.status_code == 200 and "Cancel job" not in page.get_data(as_text=True)
    assert "Cancel job" in client.get(f"/jobs/{orders}").get_data(as_text=True)
    answer = client.post(f"/api/jobs/{billing}/cancel", headers=csrf)
    assert answer.status_code == 403
    assert answer.get_json()["error"] == (f"You may see job {billing} but not cancel it: some of its entries are "
                                          "outside the subjects you may act on.")
    assert client.post(f"/api/jobs/{jobs_of['audit.seen']}/cancel", headers=csrf).status_code == 404
    assert client.post(f"/api/jobs/{orders}/cancel", headers=csrf).status_code == 200


def test_a_scoped_operator_republishes_inside_its_scope_once_and_nothing_outside(app, nats_server):
    rt = runtime_of(app)
    bridge = rt.bridge
    for name, subjects in (("ORDERS", ["orders.>"]), ("BILLING", ["billing.>"])):
        bridge.call(lambda n=name, s=subjects: bridge.js.add_stream(name=n, subjects=s), timeout=5)
    inside = support.dead_letter(app, 1, "orders.created", b'{"n": 1}')
    outside = support.dead_letter(app, 2, "billing.paid", b'{"n": 2}')
    auth = support.bearer(create_token(rt.engine, "orders-ops", "operator", scopes=ORDERS))
    client = app.test_client()
    answer = client.post(f"/api/entries/{inside}/republish", json={"version": 1}, headers=auth)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    refused = client.post(f"/api/entries/{outside}/republish", json={"version": 1}, headers=auth)
    unknown = client.post("/api/entries/999999/republish", json={"version": 1}, headers=auth)
    assert refused.status_code == unknown.status_code == 404
    assert refused.get_json()["error"] == f"There is no entry {outside}."
    sent = support.stream_messages(nats_server.url, "ORDERS")
    assert [(m.subject, m.data) for m in sent] == [("orders.created", b'{"n": 1}')]
    assert support.stream_messages(nats_server.url, "BILLING") == []


@pytest.mark.both_databases
def test_a_bulk_selection_by_ids_leaves_an_uncovered_id_out_as_an_unknown_one(offline_app, three):
    rt = runtime_of(offline_app)
    items, summary = select_items(rt, ids=[three["orders.created"], three["billing.paid"], 999999], scopes=ORDERS)
    assert list(items.ids) == [three["orders.created"]]
    assert summary["missing"] == 2
    items, _ = select_items(rt, filter_args={"status": "open"}, scopes=ORDERS)
    assert list(items.ids) == [three["orders.created"]]


@pytest.mark.both_databases
def test_a_job_of_another_team_is_no_job_to_a_scoped_readers_job_filter(offline_app, three):
    rt = runtime_of(offline_app)
    theirs = create_job(rt, "close", actor="admin", ids=[three["billing.paid"]], start=False)
    with pytest.raises(FilterError, match=f"job {theirs} is not a bulk job"):
        select_items(rt, filter_args={"job": str(theirs)}, scopes=ORDERS)
    items, _ = select_items(rt, filter_args={"job": f"{theirs}:pending"}, scopes=BILLING)
    assert list(items.ids) == [three["billing.paid"]]


@pytest.mark.parametrize("inner, outer, within", [
    ("orders.created", "orders.>", True), ("orders.*", "orders.>", True), ("orders.>", "orders.>", True),
    ("orders.>", "orders.*", False), ("orders", "orders.>", False), (">", "orders.>", False),
    ("orders.*.x", "orders.*.x", True), ("orders.eu.x", "orders.*.x", True), ("orders.*.x", "orders.eu.x", False),
    ("billing.>", "orders.>", False), ("orders.a.b", "orders.*", False),
])
def test_a_pattern_lies_within_another(inner, outer, within):
    assert pattern_within(inner, outer) is within


def test_a_scoped_reader_sees_its_own_views_and_the_shared_ones_of_its_scopes(offline_app, three):
    store = runtime_of(offline_app).store
    reader = Reader.of("viewer", None, (Grant("viewer", ORDERS),))
    with store.engine.connect() as conn:
        groups = dict(conn.execute(select(FailureGroup.subject, FailureGroup.id)).all())

    def view(i, owner, query, shared=True):
        return View(i, owner, f"v{i}", "list", query, shared, utcnow())
    found = [view(1, "admin", "subject=orders.created"), view(2, "admin", "subject=billing.%3E"),
             view(3, "admin", "status=open"), view(4, "me", "subject=billing.%3E", shared=False),
             view(5, "admin", f"group={groups['orders.created']}"), view(6, "admin", f"group={groups['billing.paid']}")]
    assert [v.id for v in visible.views(reader, store, found, "me")] == [1, 4, 5]
    assert visible.views(Reader.of("viewer", None), store, found, "me") == found


@pytest.mark.both_databases
def test_a_scoped_readers_groups_and_summary_are_counted_from_the_kept_counts(offline_app, three):
    store = runtime_of(offline_app).store
    reader = Reader.of("viewer", None, (Grant("viewer", parse_scopes(["orders.*", "audit.seen"])),))
    tallies = visible.tallies(reader, store)
    groups, tally = tallies.groups(EntryFilter())
    assert tally.kept and sorted(g.subject for g in groups) == ["audit.seen", "orders.created"]
    counts, tally = tallies.counts_by_status(EntryFilter())
    assert tally.kept and counts == {"open": 2, "republished": 0, "closed": 0}
    first, last = tallies.received_range(EntryFilter())
    totals, tally = tallies.received_between(EntryFilter(), [first - timedelta(hours=1), last + timedelta(hours=1)])
    assert tally.kept and totals == [2]



def test_a_scoped_readers_empty_list_and_groups_name_its_subjects_not_how_to_start(offline_app):
    from dlq_dashboard import accounts

    support.dead_letter(offline_app, 1, "orders.created")  # there are dead letters, none of payments
    accounts.create_user(runtime_of(offline_app).engine, "vera", support.PASSWORD, "viewer",
                         accounts.read_scopes(["payments.>", "refunds.*"]))
    client = offline_app.test_client()
    assert support.login(client, "vera", support.PASSWORD).status_code == 302
    html = client.get("/").get_data(as_text=True)
    assert "<strong>No dead letters on your subjects</strong> (payments.&gt;, refunds.*)" in html
    assert "nats pub" not in html and "nothing has failed, or nothing has been mirrored yet.</strong>" not in html
    groups = client.get("/groups").get_data(as_text=True)
    assert "<strong>No failures to group among open entries on your subjects.</strong> (payments.&gt;, refunds.*)" in groups


@pytest.mark.both_databases
def test_a_groups_triage_records_are_in_the_audit_of_the_readers_who_may_read_the_group(offline_app, three):
    """A scoped reader saw none of them, not even their own (the group's page shows them as its
    activity; the audit hid every record of no entry and no job)."""
    from dlq_dashboard.actions.triage import add_note, change_state, parse_state_change
    from dlq_dashboard.entries.audit import audit_page

    rt = runtime_of(offline_app)
    with rt.engine.connect() as conn:
        groups = dict(conn.execute(select(FailureGroup.subject, FailureGroup.id)).all())
    change_state(rt.engine, groups["billing.paid"], 1, parse_state_change({"state": "investigating", "assignee": "kim"}, utcnow()),
                 actor="token:billing-op")
    add_note(rt.engine, groups["billing.paid"], "card processor down", actor="token:billing-op")
    add_note(rt.engine, groups["orders.created"], "orders note", actor="admin")

    def seen(scopes):
        return sorted((r["action"], r["note"]) for r in audit_page(rt.engine, {}, scopes=scopes)["actions"])

    assert seen(BILLING) == [("group_note", "card processor down"), ("group_state", None)]
    assert seen(ORDERS) == [("group_note", "orders note")]
    assert len(seen(None)) == 3


@pytest.mark.both_databases
def test_a_job_whose_entries_were_purged_is_shown_to_no_scoped_reader_on_any_channel(make_app, database_url):
    """A purge takes a job's items with their entries, and a job with none left passed "every
    entry it took may be read" for every reader: an orders reader saw a billing close, its
    selection, note and actor, on its pages, in the API and in the audit."""
    from dlq_dashboard.accounts import create_user
    from dlq_dashboard.actions.bulk.jobs import job_status
    from dlq_dashboard.actions.purge import purge_entries

    app = make_app(online=True, retention=0)
    rt = runtime_of(app)
    billing = [support.dead_letter(rt.engine, seq, "billing.charged") for seq in (1, 2)]
    orders = support.dead_letter(rt.engine, 3, "orders.created")
    billing_op = support.bearer(create_token(rt.engine, "billing-op", "operator", scopes=BILLING))
    client = app.test_client()
    started = client.post("/api/bulk", json={"action": "close", "ids": billing, "note": "bulk"}, headers=billing_op)
    assert started.status_code == 202, started.get_data(as_text=True)
    job_id = started.get_json()["job"]
    support.wait_for(lambda: job_status(rt, job_id, limit=0)["state"] == "done", message="the close job")
    # A job of orders' own, partly purged below: its billing item went, its orders item stays.
    mixed = create_job(rt, "close", actor="admin", ids=[billing[0], orders], note="mixed")
    support.wait_for(lambda: job_status(rt, mixed, limit=0)["state"] == "done", message="the mixed job")
    create_user(rt.engine, "orders-viewer", support.PASSWORD, "viewer", scopes=ORDERS)
    session = app.test_client()
    assert support.login(session, "orders-viewer", support.PASSWORD).status_code == 302
    viewer = support.bearer(create_token(rt.engine, "orders-reader", "viewer", scopes=ORDERS))
    admin = support.bearer(create_token(rt.engine, "admin", "admin"))

    def shown(job: int) -> dict:
        listed = client.get("/api/jobs", headers=viewer).get_json()["jobs"]
        audit = client.get("/api/audit", headers=viewer).get_json()["actions"]
        return {"list": job in [j["id"] for j in listed], "json": client.get(f"/api/jobs/{job}", headers=viewer).status_code,
                "page": session.get(f"/jobs/{job}").status_code, "jobs page": f'href="/jobs/{job}"' in session.get(
                    "/jobs").get_data(as_text=True), "audit": job in [r.get("job_id") for r in audit]}

    hidden = {"list": False, "json": 404, "page": 404, "jobs page": False, "audit": False}
    assert shown(job_id) == hidden
    with write_transaction(rt.engine) as conn:  # resolved long ago
        conn.execute(update(Entry).where(Entry.id.in_(billing)).values(updated_at=utcnow() - timedelta(days=2)))
    assert purge_entries(rt, older_than=86400, actor="test", statuses=("closed",)).total == 2
    assert shown(job_id) == hidden
    assert shown(mixed) == hidden
    assert client.get(f"/api/jobs/{job_id}", headers=admin).get_json()["purged"] == 2  # an admin still sees it
    cli = app.test_cli_runner().invoke(args=["jobs", "show", str(job_id), "--as", "viewer", "--scope", "orders.>"])
    assert cli.exit_code != 0 and f"There is no job {job_id}." in cli.output
