"""Jobs you can find: /jobs and /api/jobs list every bulk job with who, what, progress, rate,
result and who cancelled it; a job's page says the same."""

from __future__ import annotations

import pytest

from sqlalchemy import select

from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.db.models import Entry

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
    assert bad.status_code == 400 and "running or finished" in bad.get_json()["error"]

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
