"""A bulk job by filter naming a status its action cannot change (a republish, close, patch or
repair of closed entries; a reopen of open ones) was made, and then skipped every item: it is
refused before any job is made, in one sentence naming the statuses that action takes, by the
API (a 400), the preview and Start on the pages (a 400) and the command line (exit 2)."""

from __future__ import annotations

import pytest

from dlq_dashboard.runtime import runtime_of

from . import support

PATCH = [{"op": "add", "path": "/n", "value": 1}]
REFUSED = {
    "republish": ("closed", "A republish job by filter takes open or republished entries, not closed ones"),
    "close": ("closed", "A close job by filter takes open or republished entries, not closed ones"),
    "patch": ("closed", "A patch job by filter takes open or republished entries, not closed ones"),
    "repair": ("closed", "A repair job by filter takes open or republished entries, not closed ones"),
    "reopen": ("open", "A reopen job by filter takes closed or republished entries, not open ones"),
}


def open_and_closed(app, tokens) -> tuple[int, int]:
    """An open and a closed entry of orders.created."""
    opened, closed = support.dead_letter(app, 1), support.dead_letter(app, 2)
    answer = app.test_client().post(f"/api/entries/{closed}/close", json={"version": 1},
                                    headers=support.bearer(tokens["operator"]))
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return opened, closed


def job_count(app) -> int:
    with runtime_of(app).engine.connect() as conn:
        return conn.exec_driver_sql("SELECT COUNT(*) FROM jobs").scalar_one()


@pytest.mark.parametrize("action", list(REFUSED))
def test_the_api_refuses_a_status_the_action_cannot_change(offline_app, tokens, action):
    open_and_closed(offline_app, tokens)
    status, sentence = REFUSED[action]
    body = {"action": action, "filter": {"status": status, "subject": "orders.created"},
            **({"patch": PATCH} if action == "patch" else {})}
    answer = offline_app.test_client().post("/api/bulk", json=body, headers=support.bearer(tokens["operator"]))
    assert answer.status_code == 400, answer.get_data(as_text=True)
    assert answer.get_json()["error"].startswith(sentence), answer.get_json()
    assert job_count(offline_app) == 0


def test_a_status_the_action_can_change_is_still_taken_as_named(offline_app, tokens):
    opened, closed = open_and_closed(offline_app, tokens)
    client, operator = offline_app.test_client(), support.bearer(tokens["operator"])

    def ended(job_id: int):
        job = client.get(f"/api/jobs/{job_id}", headers=operator).get_json()
        return job if job["state"] in ("done", "cancelled") else None

    # Each job ends before the next is asked for: the close job closes the open entry, so the
    # reopen job by "closed" takes both (asked while the close job ran, it took one or both).
    for action, status, taken in (("close", "open", [opened]), ("reopen", "closed", sorted([opened, closed]))):
        answer = client.post("/api/bulk", json={"action": action, "filter": {"status": status}}, headers=operator)
        assert answer.status_code == 202, answer.get_data(as_text=True)
        job = support.wait_for(lambda: ended(answer.get_json()["job"]), timeout=30, message=f"the {action} job to end")
        assert sorted(item["entry_id"] for item in job["items"]) == taken


@pytest.mark.parametrize("action", ["republish", "close", "reopen"])
def test_the_preview_and_start_refuse_it(offline_app, tokens, auth, action):
    open_and_closed(offline_app, tokens)
    status, sentence = REFUSED[action]
    client = auth.client("operator")
    form = {"by": "filter", "action": action, "status": status, "subject": "orders.created"}
    preview = client.get("/bulk/preview", query_string=form)
    page = preview.get_data(as_text=True)
    assert preview.status_code == 400 and sentence in page, page
    assert 'action="/bulk"' not in page  # no Start
    started = client.post("/bulk", data={**form, "csrf_token": support.csrf_token(client, "/")})
    assert started.status_code == 400 and sentence in started.get_data(as_text=True)
    assert job_count(offline_app) == 0


@pytest.mark.parametrize("action", list(REFUSED))
def test_the_command_line_refuses_it_as_bad_input(offline_app, tokens, tmp_path, action):
    open_and_closed(offline_app, tokens)
    status, sentence = REFUSED[action]
    patch = tmp_path / "patch.json"
    patch.write_text('[{"op": "add", "path": "/n", "value": 1}]')
    runner = offline_app.test_cli_runner()
    for extra in (["--dry-run"], []):
        args = ["jobs", "start", action, "--status", status, *extra,
                *(["--patch-file", str(patch)] if action == "patch" else [])]
        result = runner.invoke(args=args)
        assert result.exit_code == 2, result.output
        assert sentence in result.output, result.output
    assert job_count(offline_app) == 0
