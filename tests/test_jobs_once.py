"""A bulk job is started once a request: the same Start sent again (a second click the page did
not stop, a retried API call, two requests racing) is the job the first one made; and a request
with a part its action would leave out is refused, not started without it."""

from __future__ import annotations

import re
import threading

import pytest
from sqlalchemy import func, select

from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.db.models import Action, Job

from . import support


def counted(rt, *where) -> int:
    with rt.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Job).where(*where)).scalar()


def bulk_closes(rt) -> int:
    with rt.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Action).where(Action.action == "bulk_close")).scalar()


@pytest.mark.both_databases
def test_the_same_start_sent_twice_through_the_api_answers_the_one_job_it_made(offline_app, rt, tokens):
    for seq in range(1, 6):
        support.dead_letter(offline_app, seq, Dlq_Reason="fatal" if seq < 5 else "poison")
    client = offline_app.test_client()
    headers = {**support.bearer(tokens["operator"]), "Idempotency-Key": "nightly-close-2026-12-05"}
    body = {"action": "close", "note": "known bad batch", "filter": {"reason": "fatal"}}
    first = client.post("/api/bulk", json=body, headers=headers)
    again = client.post("/api/bulk", json=body, headers=headers)
    assert (first.status_code, again.status_code) == (202, 202), again.get_data(as_text=True)
    assert first.get_json() == again.get_json()
    assert again.headers["Location"] == first.headers["Location"]
    assert counted(rt) == 1 and bulk_closes(rt) == 1
    # The same key with another request names another start: refused, nothing started.
    reused = client.post("/api/bulk", json={**body, "note": "another note"}, headers=headers)
    assert reused.status_code == 422
    assert reused.get_json()["error"].startswith(f"This request key was used for another start (job "
                                                 f"{first.get_json()['job']}), with another action, selection")
    assert counted(rt) == 1
    # Another key is another start (of entries no job holds yet).
    other = client.post("/api/bulk", json={**body, "filter": {"reason": "poison"}},
                        headers={**headers, "Idempotency-Key": "nightly-close-2"})
    assert other.status_code == 202, other.get_data(as_text=True)
    assert other.get_json()["job"] != first.get_json()["job"]
    assert counted(rt) == 2


@pytest.mark.parametrize("key", ["k" * 65, "two words", "caf\u00e9"])
def test_a_key_that_cannot_name_a_start_is_refused_and_starts_nothing(offline_app, rt, tokens, key):
    support.dead_letter(offline_app, 1, Dlq_Reason="fatal")
    response = offline_app.test_client().post(
        "/api/bulk", json={"action": "close", "filter": {"reason": "fatal"}},
        headers={**support.bearer(tokens["operator"]), "Idempotency-Key": key.encode().decode("latin-1")})
    assert response.status_code == 400
    assert response.get_json()["error"] == ("The request key (Idempotency-Key) must be up to 64 printable ASCII "
                                            "characters, without blanks.")
    assert counted(rt) == 0


def test_a_key_names_a_start_of_one_user_only(offline_app, rt):
    ids = [support.dead_letter(offline_app, seq) for seq in range(1, 4)]
    ann = jobs.create_job(rt, "close", actor="ann", ids=ids, request_key="retry-1", start=False)
    bob = jobs.create_job(rt, "close", actor="bob", ids=ids, request_key="retry-1", start=False)
    assert ann != bob
    assert jobs.create_job(rt, "close", actor="ann", ids=ids, request_key="retry-1", start=False) == ann
    assert counted(rt) == 2


@pytest.mark.both_databases
def test_two_requests_with_one_key_racing_make_one_job(offline_app, rt, monkeypatch):
    """Both look for the key before either has written it: the unique index decides, and the one
    that lost answers the winner's job."""
    ids = [support.dead_letter(offline_app, seq) for seq in range(1, 4)]
    both_looked = threading.Barrier(2, timeout=20)
    original = jobs.select_items

    def selected_together(*args, **kwargs):
        both_looked.wait()  # each has looked for the key and found none
        return original(*args, **kwargs)

    monkeypatch.setattr(jobs, "select_items", selected_together)
    made: list = []

    def start():
        made.append(jobs.create_job(rt, "close", actor="ann", ids=ids, request_key="double-click", start=False))

    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(made) == 2 and made[0] == made[1]
    assert counted(rt) == 1 and bulk_closes(rt) == 1


def test_the_start_form_sent_twice_is_the_job_it_made_and_a_new_preview_a_new_start(offline_app, rt, auth):
    for seq in range(1, 4):
        support.dead_letter(offline_app, seq, Dlq_Reason="fatal")
    client = auth.client("operator")
    query = {"by": "filter", "action": "close", "reason": "fatal"}
    page = client.get("/bulk/preview", query_string=query).get_data(as_text=True)
    key = re.search(r'name="request_key" value="([^"]+)"', page).group(1)
    upto = re.search(r'name="upto" value="(\d+)"', page).group(1)
    form = {**query, "csrf_token": support.csrf_token(client, "/"), "upto": upto, "note": "one", "request_key": key}
    first, again = client.post("/bulk", data=form), client.post("/bulk", data=form)
    assert (first.status_code, again.status_code) == (303, 303)
    assert again.headers["Location"] == first.headers["Location"]
    assert counted(rt) == 1
    # A failure after the job was made: the preview again has an entry to take (the job's three
    # may be closed already, and a preview of nothing has no Start), and a key of its own.
    support.jobs_settled(rt.engine)
    support.dead_letter(offline_app, 4, Dlq_Reason="fatal")
    fresh = client.get("/bulk/preview", query_string=query).get_data(as_text=True)
    assert re.search(r'name="request_key" value="([^"]+)"', fresh).group(1) != key


@pytest.mark.parametrize("body, words", [
    ({"action": "close", "patch": [{"op": "add", "path": "/a", "value": 1}]},
     "A patch goes with the action patch only: send action patch, or leave the patch out (a close job"),
    ({"action": "reopen", "patch": []}, "A patch goes with the action patch only"),
    ({"action": "close", "force": True}, "force (republish payloads the current schema refuses) goes with republish"),
    ({"action": "repair", "force": True}, "leave it out of a repair job"),
    ({"action": "reopen", "only_valid": True}, "only_valid (only those that pass the current schema) does not go "
                                               "with reopen, which judges no payload"),
])
def test_a_part_of_a_bulk_request_its_action_would_leave_out_is_a_400_and_starts_nothing(
        offline_app, rt, tokens, body, words):
    """Each was a 202: a close with a patch closed the entries and dropped the patch without a word."""
    entry_id = support.dead_letter(offline_app, 1, Dlq_Reason="fatal")
    if body["action"] == "reopen":
        close_entry(rt, entry_id, 1, actor="ann", note="to reopen")
    response = offline_app.test_client().post("/api/bulk", json={**body, "ids": [entry_id]},
                                              headers=support.bearer(tokens["operator"]))
    assert response.status_code == 400, response.get_data(as_text=True)
    assert words in response.get_json()["error"]
    assert counted(rt) == 0


def test_the_preview_of_a_reopen_asked_for_only_those_that_pass_says_why_before_start(offline_app, rt, auth):
    """The list's form offers the box beside every action: the preview says it, not Start."""
    entry_id = support.dead_letter(offline_app, 1, Dlq_Reason="fatal")
    close_entry(rt, entry_id, 1, actor="ann", note="to reopen")
    page = auth.client("operator").get("/bulk/preview", query_string={
        "by": "filter", "action": "reopen", "status": "closed", "only_valid": "on"})
    assert page.status_code == 400
    assert "does not go with reopen, which judges no payload: leave it out (untick it)." in page.get_data(as_text=True)
