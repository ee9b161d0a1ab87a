"""Jobs you can find: /jobs and /api/jobs list every bulk job with who, what, progress, rate,
result and who cancelled it; a job's page says the same."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.db.models import Entry
from dlq_dashboard.times import utcnow

from . import support

pytestmark = pytest.mark.both_databases


def settled(client, job_id, headers):
    status = client.get(f"/api/jobs/{job_id}?limit=0", headers=headers).get_json()
    return status if status["state"] in jobs.FINISHED else None


def test_the_jobs_list_shows_a_finished_and_a_cancelled_job_with_who_cancelled(offline_app, rt, tokens):
    ids = [support.dead_letter(offline_app, seq, payload=b'{"n": %d}' % seq) for seq in range(1, 6)]
    operator = support.bearer(tokens["operator"])
    client = offline_app.test_client()
    finished = client.post("/api/bulk", json={"action": "close", "ids": ids[:3], "note": "known"}, headers=operator)
    assert finished.status_code == 202, finished.get_data(as_text=True)
    finished_id = finished.get_json()["job"]
    support.wait_for(lambda: settled(client, finished_id, operator), message="the close job to finish")
    # Made without starting, cancelled, then run: it stops before its first item, every time.
    cancelled_id = jobs.create_job(rt, "close", actor="ann", filter_args={"status": "open"}, start=False)
    assert jobs.cancel_job(rt, cancelled_id, actor="bob")
    assert jobs.cancel_job(rt, cancelled_id, actor="carol")  # a second cancel names no one new
    rt.jobs.submit(cancelled_id)
    support.wait_for(lambda: settled(client, cancelled_id, operator), message="the cancelled job to stop")

    listing = client.get("/api/jobs", headers=support.bearer(tokens["viewer"]))
    assert listing.status_code == 200
    body = listing.get_json()
    assert [j["id"] for j in body["jobs"]] == [cancelled_id, finished_id] and body["next_cursor"] is None
    newest, oldest = body["jobs"]
    assert newest["state"] == "cancelled" and newest["cancelled_by"] == "bob" and newest["cancelled_at"]
    assert newest["actor"] == "ann" and newest["cancelled"] == 2 and newest["done"] == 0
    assert newest["selection_text"] == "filter status=open" and newest["eta_seconds"] is None
    assert newest["rate"] is None, "cancelled items are no speed"
    assert newest["percent"] == 0, "its progress bar was full: cancelled items are not gone through"
    assert oldest["state"] == "done" and oldest["done"] == 3 and oldest["total"] == 3 and oldest["percent"] == 100
    assert oldest["selection_text"] == "3 selected entries" and oldest["cancelled_by"] is None
    assert oldest["started_at"] and oldest["finished_at"] and oldest["rate"] and oldest["rate"] > 0

    # Paged by a keyset, narrowed by state.
    first = client.get("/api/jobs?limit=1", headers=operator).get_json()
    assert [j["id"] for j in first["jobs"]] == [cancelled_id] and first["next_cursor"]
    second = client.get(f"/api/jobs?limit=1&cursor={first['next_cursor']}", headers=operator).get_json()
    assert [j["id"] for j in second["jobs"]] == [finished_id]
    assert client.get("/api/jobs?state=running", headers=operator).get_json()["jobs"] == []
    bad = client.get("/api/jobs?state=sleeping", headers=operator)
    assert bad.status_code == 400 and "running, finished" in bad.get_json()["error"]

    viewer = support.logged_in(offline_app, "viewer")
    html = viewer.get("/jobs").get_data(as_text=True)
    assert 'href="/jobs"' in html  # in the navigation
    assert f'data-job="{cancelled_id}"' in html and f'data-job="{finished_id}"' in html
    assert "filter status=open" in html and "3 selected entries" in html
    assert "bob at <time" in html and "items/s" in html and "<progress" in html
    assert "hx-trigger" not in html.split('id="jobs"')[1].split(">")[0], "nothing running: no polling"
    assert viewer.get("/jobs?cursor=nonsense").status_code == 400

    page = viewer.get(f"/jobs/{cancelled_id}").get_data(as_text=True)
    assert "Selection: filter status=open" in page and 'class="job-cancelled-by">bob at <time' in page
    page = viewer.get(f"/jobs/{finished_id}").get_data(as_text=True)
    assert "Selection: 3 selected entries" in page and "items/s" in page and "job-cancelled-by" not in page


def test_a_group_job_reads_as_its_group(offline_app, rt, tokens):
    entry = support.dead_letter(offline_app, 1, Dlq_Reason="fatal", Dlq_Error="order 7 not found")
    with rt.engine.connect() as conn:
        group = conn.execute(select(Entry.group_id).where(Entry.id == entry)).scalar_one()
    job_id = jobs.create_job(rt, "close", actor="ann", filter_args={"group": str(group)}, start=False)
    status = offline_app.test_client().get(f"/api/jobs/{job_id}", headers=support.bearer(tokens["viewer"])).get_json()
    assert status["selection_text"].startswith("group order <") and status["selection_text"].endswith("status=open")


@pytest.mark.parametrize("param", ["since", "until"])
def test_a_job_by_a_time_preset_keeps_the_time_it_meant(offline_app, rt, tokens, param):
    entry = support.dead_letter(offline_app, 1, payload=b'{"n": 1}')
    with rt.engine.begin() as conn:  # received two hours ago: in the last day, and older than an hour
        conn.execute(update(Entry).where(Entry.id == entry).values(received_at=utcnow() - timedelta(hours=2)))
    job_id = jobs.create_job(rt, "close", actor="ann", filter_args={param: "1d" if param == "since" else "1h"},
                             start=False)
    at = jobs.job_status(rt, job_id, limit=0)["selection"]["filter"][param]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", at), at
    page = offline_app.test_client().get(f"/jobs/{job_id}", headers=support.bearer(tokens["viewer"]))
    assert f"{param}={at}" in page.get_data(as_text=True) and f"{param}=1" not in page.get_data(as_text=True)


def test_the_audit_folds_a_bulk_job_into_one_row_that_opens_to_its_items(offline_app, rt, tokens):
    ids = [support.dead_letter(offline_app, seq) for seq in range(1, 5)]
    operator = support.bearer(tokens["operator"])
    client = offline_app.test_client()
    job_id = client.post("/api/bulk", json={"action": "close", "ids": ids[:3]}, headers=operator).get_json()["job"]
    support.wait_for(lambda: settled(client, job_id, operator), message="the close job to finish")
    assert client.post(f"/api/entries/{ids[3]}/close", json={"version": 1}, headers=operator).status_code == 200

    # Stored: every item's record (the API, unfolded by default, lists them all).
    every = client.get("/api/audit", headers=operator).get_json()["actions"]
    assert sorted(a["entry_id"] for a in every if a["job_id"] == job_id and a["entry_id"]) == ids[:3]
    folded = client.get("/api/audit?fold=1", headers=operator).get_json()["actions"]
    assert [(a["action"], a["entry_id"]) for a in folded] == [("close", ids[3]), ("bulk_close", None)]
    assert folded[1]["job"] == {"state": "done", "total": 3, "done": 3, "failed": 0, "skipped": 0, "cancelled": 0,
                                "pending": 0}

    viewer = support.logged_in(offline_app, "viewer")
    html = viewer.get("/audit").get_data(as_text=True)
    assert html.count(f'data-job="{job_id}"') == 1 and "finished: 3 done, 0 failed" in html  # not "done: 3 done"
    assert f'hx-get="/audit/jobs/{job_id}/items"' in html
    for entry_id in ids[:3]:
        assert f'href="/entries/{entry_id}"' not in html, "the items are folded"
    assert f'href="/entries/{ids[3]}"' in html

    # A job that is not there: not "No item records yet.".
    missing = viewer.get(f"/audit/jobs/{job_id + 999}/items", headers={"HX-Request": "true"})
    assert missing.status_code == 404 and f"There is no job {job_id + 999}." in missing.get_data(as_text=True)
    items = viewer.get(f"/audit/jobs/{job_id}/items?limit=2").get_data(as_text=True)
    assert [f'href="/entries/{i}"' in items for i in ids[:3]] == [False, True, True]
    older = re.search(r'hx-get="(/audit/jobs/\d+/items\?cursor=[^"]+)"', items).group(1)
    rest = viewer.get(older.replace("&amp;", "&")).get_data(as_text=True)
    assert f'href="/entries/{ids[0]}"' in rest and "Older item records" not in rest

    # The audit of one entry still shows its item record; of the job, every record.
    by_entry = viewer.get(f"/audit?entry={ids[1]}").get_data(as_text=True)
    assert f'href="/entries/{ids[1]}"' in by_entry and "bulk_close" not in by_entry.split("<tbody>")[1]
    by_job = viewer.get(f"/audit?job={job_id}").get_data(as_text=True)
    assert all(f'href="/entries/{i}"' in by_job for i in ids[:3])


def test_a_running_jobs_rate_and_eta_come_from_its_settled_items():
    from datetime import datetime, timedelta

    from dlq_dashboard.actions.bulk.listing import job_summary

    started = datetime(2026, 11, 30, 10, 0, 0)
    row = {"id": 1, "action": "republish", "actor": "ann", "state": "running", "note": None, "selection": "{}",
           "total": 100, "cancel_requested": False, "created_at": started - timedelta(seconds=5),
           "started_at": started, "finished_at": None, "cancelled_by": None, "cancelled_at": None}
    running = job_summary(row, {"done": 30, "failed": 10, "pending": 60}, now=started + timedelta(seconds=20))
    assert running["rate"] == 2.0 and running["eta_seconds"] == 30
    assert running["eta_at"] == "2026-11-30T10:00:50.000000Z" and running["percent"] == 40.0
    done = job_summary({**row, "state": "done", "finished_at": started + timedelta(seconds=50)}, {"done": 100},
                       now=started + timedelta(hours=1))
    assert done["rate"] == 2.0 and done["eta_seconds"] is None
    queued = job_summary({**row, "state": "queued", "started_at": None}, {"pending": 100}, now=started)
    assert queued["rate"] is None and queued["eta_seconds"] is None
