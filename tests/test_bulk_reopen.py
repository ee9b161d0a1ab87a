"""A mistaken bulk close undone at once: a reopen job (the API, the job page's "Reopen what it
closed", the CLI) opens again what was closed or republished, as a single reopen would, the
counts kept; open entries are skipped; it needs no NATS. Against a real nats-server."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import func, select

from dlq_dashboard.accounts import create_token
from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.actions.publishing import nats_unreachable
from dlq_dashboard.db.models import Action
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases


def job_done(client, job_id, token):
    status = client.get(f"/api/jobs/{job_id}?limit=200", headers=support.bearer(token)).get_json()
    return status if status["state"] in ("done", "cancelled") else None


def statuses(rt, ids) -> list[str]:
    return [rt.store.get_entry(entry_id).status for entry_id in ids]


def bulk(client, token, **body):
    response = client.post("/api/bulk", json=body, headers=support.bearer(token))
    assert response.status_code == 202, response.get_data(as_text=True)
    return response.get_json()["job"]


def test_a_reopen_job_undoes_a_bulk_close_and_skips_what_is_open(app, rt, nats_server, tokens):
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"n": %d}' % i for i in range(6)])
    client = app.test_client()
    summary_before = client.get("/api/summary", headers=support.bearer(tokens["viewer"])).get_json()
    closing = bulk(client, tokens["operator"], action="close", ids=ids[:4], note="wrong customer")
    support.wait_for(lambda: job_done(client, closing, tokens["viewer"]), message="the close job")
    assert statuses(rt, ids) == ["closed"] * 4 + ["open"] * 2

    # What that job closed, by its items: its done ones still closed.
    reopening = bulk(client, tokens["operator"], action="reopen", filter={"job": f"{closing}:done"})
    status = support.wait_for(lambda: job_done(client, reopening, tokens["viewer"]), message="the reopen job")
    assert (status["action"], status["state"], status["done"], status["total"]) == ("reopen", "done", 4, 4)
    assert {item["result"] for item in status["items"]} == {"Reopened (was closed)."}
    assert statuses(rt, ids) == ["open"] * 6
    entry = rt.store.get_entry(ids[0])
    assert (entry.version, entry.closed_by, entry.close_note) == (3, None, None)
    with rt.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Action).where(
            Action.job_id == reopening, Action.action == "reopen")).scalar() == 4
    # The counts are as before the close.
    assert client.get("/api/summary", headers=support.bearer(tokens["viewer"])).get_json() == summary_before
    audit = client.get("/api/audit", query_string={"action": "bulk_reopen"},
                       headers=support.bearer(tokens["viewer"])).get_json()
    assert [record["job_id"] for record in audit["actions"]] == [reopening]

    # By ids, an open one is skipped saying so.
    again = bulk(client, tokens["operator"], action="reopen", ids=[ids[5]])
    status = support.wait_for(lambda: job_done(client, again, tokens["viewer"]))
    assert status["items"][0]["state"] == "skipped" and "already open" in status["items"][0]["result"]


def test_by_filter_without_a_status_a_reopen_takes_the_closed_entries(app, rt, nats_server, tokens):
    ids = support.dead_letter_orders(app, nats_server.url, [b"{}"] * 3)
    client = app.test_client()
    closing = bulk(client, tokens["operator"], action="close", ids=ids[:2])
    support.wait_for(lambda: job_done(client, closing, tokens["viewer"]))
    items, summary = jobs.select_items(rt, filter_args={"subject": "orders.created"}, action="reopen")
    assert list(items.ids) == ids[:2] and summary["by_status"] == {"closed": 2}
    assert jobs.select_items(rt, filter_args={"subject": "orders.created"})[0].ids.tolist() == ids[2:]


def test_the_job_page_of_a_close_offers_to_reopen_what_it_closed(app, rt, nats_server, tokens, auth):
    ids = support.dead_letter_orders(app, nats_server.url, [b"{}"] * 3)
    api = app.test_client()
    closing = bulk(api, tokens["operator"], action="close", ids=ids[:2])
    support.wait_for(lambda: job_done(api, closing, tokens["viewer"]))
    assert "Reopen what it closed" not in auth.client("viewer").get(f"/jobs/{closing}").get_data(as_text=True)
    client = auth.client("operator")
    page = client.get(f"/jobs/{closing}").get_data(as_text=True)
    form = re.search(r'<form method="post" action="/bulk/preview" class="job-undo">(.*?)</form>', page, re.S).group(1)
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form))
    assert "Reopen what it closed" in form
    preview = client.post("/bulk/preview", data=fields)
    text = preview.get_data(as_text=True)
    assert preview.status_code == 200, text
    assert "<strong>2</strong> entries will be reopened" in text and f"job={closing}:done" in text
    started = client.post("/bulk", data={**fields, "upto": re.search(r'name="upto" value="(\d+)"', text).group(1)})
    assert started.status_code == 303
    job_id = int(started.headers["Location"].rsplit("/", 1)[1])
    support.wait_for(lambda: job_done(api, job_id, tokens["viewer"]), message="the reopen job")
    assert statuses(rt, ids) == ["open"] * 3
    # A reopen job's own page offers nothing more to undo.
    assert "Reopen what it closed" not in client.get(f"/jobs/{job_id}").get_data(as_text=True)


def test_a_reopen_job_needs_no_nats_though_closing_deletes_from_the_dlq(make_app, nats_server, database_url):
    application = make_app(online=True, delete_on_close=True)
    rt = runtime_of(application)
    operator = create_token(rt.engine, "test-operator", "operator")
    ids = support.dead_letter_orders(application, nats_server.url, [b"{}"] * 2)
    client = application.test_client()
    closing = bulk(client, operator, action="close", ids=ids)
    support.wait_for(lambda: job_done(client, closing, operator))
    assert support.stream_messages(nats_server.url, "DLQ") == []  # closing deleted them
    nats_server.kill()
    support.wait_for(lambda: nats_unreachable(rt), message="NATS to be seen away")
    job_id = bulk(client, operator, action="reopen", ids=ids)
    status = support.wait_for(lambda: job_done(client, job_id, operator), timeout=20,
                              message="the reopen job, NATS away")
    assert (status["done"], statuses(rt, ids)) == (2, ["open", "open"])
    # The entries keep their payloads: reopened, they can be republished once NATS is back.
    assert rt.store.get_entry(ids[0]).payload == b"{}"


def test_the_command_line_starts_a_reopen_job(app, rt, nats_server, tokens):
    ids = support.dead_letter_orders(app, nats_server.url, [b"{}"] * 2)
    client = app.test_client()
    closing = bulk(client, tokens["operator"], action="close", ids=ids)
    support.wait_for(lambda: job_done(client, closing, tokens["viewer"]))
    runner = app.test_cli_runner()
    dry = runner.invoke(args=["jobs", "start", "reopen", "--subject", "orders.created", "--dry-run"])
    assert dry.exit_code == 0 and "Would reopen 2 entries" in dry.output and "2 closed" in dry.output, dry.output
    made = runner.invoke(args=["jobs", "start", "reopen", "--id", str(ids[0]), "--wait"])
    assert made.exit_code == 0, made.output
    assert statuses(rt, ids) == ["open", "closed"]


def test_a_preview_says_which_of_the_selected_are_skipped_as_closed_or_open_already(app, rt, nats_server, auth):
    """"3 entries will be closed" stood beside "1 closed": the job then skipped it."""
    ids = support.dead_letter_orders(app, nats_server.url, [b"{}"] * 3)
    client = auth.client("operator")
    token = support.csrf_token(client, "/")
    client.post(f"/entries/{ids[2]}/close", data={"version": "1", "csrf_token": token})
    page = client.post("/bulk/preview", data={"csrf_token": token, "by": "ids", "action": "close",
                                              "ids": [f"{i}:{1 if i != ids[2] else 2}" for i in ids]})
    text = " ".join(page.get_data(as_text=True).split())
    assert "<strong>3</strong> entries selected to be closed" in text
    assert "<li>1 closed: skipped, closed already</li>" in text and "<li>2 open</li>" in text
    reopen = client.post("/bulk/preview", data={"csrf_token": token, "by": "ids", "action": "reopen",
                                                "ids": [f"{i}:{1 if i != ids[2] else 2}" for i in ids]})
    text = " ".join(reopen.get_data(as_text=True).split())
    assert "<strong>3</strong> entries selected to be reopened" in text and "<li>2 open: skipped, open already</li>" in text


def test_a_close_undone_already_leads_back_from_its_empty_preview(app, rt, nats_server, auth, tokens):
    """"Reopen what it closed", once reopened, led to "No entries match; nothing to do." on a page
    without a link."""
    ids = support.dead_letter_orders(app, nats_server.url, [b"{}"] * 2)
    api = app.test_client()
    closing = bulk(api, tokens["operator"], action="close", ids=ids)
    support.wait_for(lambda: job_done(api, closing, tokens["viewer"]))
    reopening = bulk(api, tokens["operator"], action="reopen", filter={"job": f"{closing}:done"})
    support.wait_for(lambda: job_done(api, reopening, tokens["viewer"]))
    client = auth.client("operator")
    form = {"csrf_token": support.csrf_token(client, f"/jobs/{closing}"), "action": "reopen", "by": "filter",
            "job": f"{closing}:done", "status": "closed"}
    page = client.post("/bulk/preview", data=form, headers={"Referer": f"http://localhost/jobs/{closing}"})
    text = page.get_data(as_text=True)
    assert page.status_code == 400 and "No entries match; nothing to do." in text
    assert f'<a href="/jobs/{closing}">Back to the page you were on</a>' in text
