"""DLQ_MASK after the retention purge: the audit, the jobs and the groups outlive their entries, and
their texts were masked with the values of those entries. A masked viewer reads a text whose
entries are gone as a sentence saying why, never the values it quotes; an operator reads it whole."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from dlq_dashboard.access.unread import GONE, GROUP_GONE
from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.actions.purge import purge_entries
from dlq_dashboard.actions.triage import add_note
from dlq_dashboard.db.models import Entry
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support

MASK = ("/user/name", "/user/email")
NAME, EMAIL, OTHER = "Quuxington", "quux@example.org", "Zorblax"
SECRETS = (NAME, EMAIL, OTHER)


def _payload(name: str, email: str = "x@example.net") -> bytes:
    return json.dumps({"user": {"name": name, "email": email}}).encode()


def _secrets(text: str) -> list[str]:
    text = text.replace("&#64;", "@")
    return [s for s in SECRETS if s.lower() in text.lower()]


def _group_of(engine, entry_id: int) -> int:
    with engine.connect() as conn:
        return conn.execute(select(Entry.group_id).where(Entry.id == entry_id)).scalar_one()


@pytest.mark.both_databases
def test_a_masked_viewer_reads_no_value_of_purged_entries_in_the_audit_jobs_and_groups(make_app, database_url):
    app = make_app(online=True, mask=MASK)
    rt = runtime_of(app)
    # Group one: one entry, its error (and so the group's text) quoting the name; closed with a
    # note quoting both values, then purged whole.
    alone = support.dead_letter(app, 1, payload=_payload(NAME, EMAIL), Dlq_Reason="fatal",
                                Dlq_Error=f"user {NAME} has no {EMAIL} mailbox")
    close_entry(rt, alone, 1, actor="alice", note=f"{NAME} confirmed, {EMAIL} deleted")
    # Group two: two entries; the one of Zorblax closed by a job whose note names it and purged,
    # the other (Robin's) open and kept. A note on the group names Zorblax.
    gone = support.dead_letter(app, 2, payload=_payload(OTHER), Dlq_Reason="fatal", Dlq_Error="mailbox missing")
    kept = support.dead_letter(app, 3, payload=_payload("Robin"), Dlq_Reason="fatal", Dlq_Error="mailbox missing")
    job_id = jobs.create_job(rt, "close", actor="alice", ids=[gone], note=f"{OTHER} asked")
    support.jobs_settled(rt.engine)
    first, second = _group_of(rt.engine, alone), _group_of(rt.engine, kept)
    assert first != second
    add_note(rt.engine, first, f"{NAME} is a test account", actor="alice")
    add_note(rt.engine, second, f"{OTHER} is a test account", actor="alice")
    viewer, operator = support.logged_in(app, "viewer"), support.logged_in(app, "operator")
    paths = ("/api/audit", "/audit", f"/api/groups/{first}", f"/groups/{first}", f"/api/groups/{second}",
             f"/groups/{second}", "/api/groups", "/groups", f"/api/jobs/{job_id}", f"/jobs/{job_id}", "/api/jobs",
             "/jobs")
    for path in paths:
        response = viewer.get(path)
        assert response.status_code == 200 and _secrets(response.get_data(as_text=True)) == [], path

    report = purge_entries(rt, older_than=1, actor="test", now=utcnow() + timedelta(seconds=5))
    assert report.total == 2

    for path in paths:
        response = viewer.get(path)
        assert response.status_code == 200 and _secrets(response.get_data(as_text=True)) == [], path
    result = runner_output(app, "groups", "show", str(second)) + runner_output(app, "jobs", "show", str(job_id))
    assert _secrets(result) == []
    # Said why, where a text was.
    records = viewer.get("/api/audit").get_json()["actions"]
    assert GONE in [r["note"] for r in records if r.get("entry_id") == alone]
    assert viewer.get(f"/api/groups/{first}").get_json()["label"] == GROUP_GONE
    assert viewer.get(f"/api/jobs/{job_id}").get_json()["note"] == GONE
    activity = viewer.get(f"/api/groups/{second}").get_json()["activity"]
    assert GONE in [a["text"] for a in activity if a["kind"] == "note"]
    assert [a["detail"]["entries"] for a in activity if a["kind"] == "purge"] == [1]
    assert "1 entry removed by the retention purge" in viewer.get(f"/groups/{second}").get_data(as_text=True)
    # An operator reads them as written.
    for path in ("/api/audit", f"/api/groups/{first}", f"/api/groups/{second}", f"/api/jobs/{job_id}"):
        assert _secrets(operator.get(path).get_data(as_text=True)), path


def runner_output(app, *args: str) -> str:
    result = app.test_cli_runner().invoke(args=[*args, "--as", "viewer"])
    assert result.exit_code == 0, result.output
    return result.output
