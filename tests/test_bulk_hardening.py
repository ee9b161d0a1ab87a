"""Bulk jobs as an operator meets them: a close is not held to the republish rate, and the
preview says before Start which republishes will be refused and why."""

from __future__ import annotations

import re

import pytest

from dlq_dashboard.actions.bulk import jobs, listing, pacing

from . import support

pytestmark = pytest.mark.both_databases

RATE = 1  # a republish a second: a close job held to it would take minutes


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """A republish rate of one a second, and a schema for orders.* (customer_id required)."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, republish_rate=RATE,
                                 schemas_dir=support.orders_schema_folder(tmp_path))


@pytest.mark.slow
def test_a_close_job_is_not_paced_by_the_republish_rate(app, rt, monkeypatch):
    ids = [support.dead_letter(app, seq, payload=b'{"order_id": %d}' % seq) for seq in range(1, 301)]
    taken = []
    real_take = pacing.TokenBucket.take

    def take(self, n, stop):
        taken.append(n)
        return real_take(self, n, stop)
    monkeypatch.setattr(pacing.TokenBucket, "take", take)
    job_id = jobs.create_job(rt, "close", actor="alice", ids=ids, note="known outage")
    # At one a second the 300 would need five minutes; the deadline is far below and far above
    # what closing them takes.
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s,
                              timeout=60, message="the close job to finish")
    assert (status["done"], status["failed"]) == (300, 0)
    assert taken == []  # the pacer was never asked
    assert {rt.store.get_entry(i).status for i in ids} == {"closed"}


# --- the preview says what the job would refuse -------------------------------------------------

def preview(client, ids: list[int]) -> str:
    token = support.csrf_token(client, "/")
    response = client.post("/bulk/preview", data={"csrf_token": token, "action": "republish",
                                                  "ids": [str(i) for i in ids]})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_data(as_text=True)


def start_buttons(page: str) -> dict[str, str]:
    """The preview's submit buttons by their words, each with its attributes."""
    return {words.strip(): attrs for attrs, words in re.findall(r"<button type=\"submit\"([^>]*)>([^<]*)</button>", page)}


def test_the_preview_counts_republishes_no_stream_would_store_and_disables_start(app, rt, nats_server, auth):
    support.make_orders_stream(nats_server.url)  # stores orders.>, not payments.>
    ids = [support.dead_letter(app, seq, subject="payments.settled", payload=b'{"id": %d}' % seq)
           for seq in range(1, 6)]
    page = preview(auth.client("operator"), ids + [support.dead_letter(app, 6, subject=None)])
    # The headline counts what is selected, not "will be republished" above "6 of these 6 would not be".
    assert "<strong>6</strong> entries selected to be republished" in page and "will be republished" not in page
    assert "<strong>6</strong> of these 6\n     would not be republished" in page
    assert "more subject" not in page  # the entry with no subject is no subject of "Where they go"
    assert "<li>5: No stream stores subject payments.settled: a republish would be refused.</li>" in page
    buttons = start_buttons(page)
    assert "disabled" in buttons["Start"] and "data-needs-nats" not in buttons["Start"]
    assert "Republish with the override" not in buttons  # no payload here fails a schema
    assert "Start is unavailable: every one of the 6 would be refused" in page


def test_the_preview_counts_what_the_schema_and_the_contract_refuse_and_offers_the_override(
        app, rt, nats_server, auth):
    support.make_orders_stream(nats_server.url)
    valid = [support.dead_letter(app, seq, payload=b'{"customer_id": "c-%d"}' % seq) for seq in (1, 2, 3)]
    invalid = [support.dead_letter(app, seq, payload=b'{"order_id": %d}' % seq) for seq in (4, 5)]
    nowhere = [support.dead_letter(app, 6, subject=None)]
    client = auth.client("operator")

    page = preview(client, valid + invalid + nowhere)
    assert "<strong>3</strong> of these 6" in page
    assert ("<li>2: The payload does not pass the current schema orders.json; republishing it needs the override.</li>"
            in page)
    assert "<li>1: The entry has no Dlq-Original-Subject, so there is nowhere to republish it.</li>" in page
    assert ("With the override, the 2 that only the current schema refuses are republished as they are; "
            "1 would be refused still." in page)
    buttons = start_buttons(page)
    assert "disabled" not in buttons["Start"] and "disabled" not in buttons["Republish with the override"]
    assert 'name="force" value="on"' in buttons["Republish with the override"]

    # Every one fails the schema: Start is disabled, the override still offered.
    page = preview(client, invalid)
    buttons = start_buttons(page)
    assert "disabled" in buttons["Start"] and "disabled" not in buttons["Republish with the override"]
    assert "every one of the 2 would be refused unless the override republishes" in page

    # Nothing refused: no word of it.
    page = preview(client, valid)
    assert "What the job would refuse" not in page and "disabled" not in start_buttons(page)["Start"]


def test_the_override_button_starts_a_job_that_republishes_what_the_schema_refuses(app, rt, nats_server, auth):
    support.make_orders_stream(nats_server.url)
    invalid = [support.dead_letter(app, seq, payload=b'{"order_id": %d}' % seq) for seq in (1, 2)]
    client = auth.client("operator")
    token = support.csrf_token(client, "/")
    started = client.post("/bulk", data={"csrf_token": token, "action": "republish", "force": "on",
                                         "ids": [str(i) for i in invalid]})
    assert started.status_code == 303
    job_id = int(started.headers["Location"].rsplit("/", 1)[1])
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s,
                              timeout=30, message="the job to finish")
    assert (status["done"], status["failed"]) == (2, 0)


def test_a_bulk_republish_with_force_false_in_json_does_not_republish_what_the_schema_refuses(
        app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    invalid = [support.dead_letter(app, seq, payload=b'{"order_id": %d}' % seq) for seq in (1, 2)]
    started = app.test_client().post("/api/bulk", json={"action": "republish", "ids": invalid, "force": "false"},
                                     headers=support.bearer(tokens["operator"]))
    assert started.status_code == 202, started.get_json()
    job_id = started.get_json()["job"]
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id))["state"] == "done" and s,
                              timeout=30, message="the job to finish")
    assert status["selection"]["force"] is False
    assert (status["done"], status["failed"]) == (0, 2)
    assert {item["state"] for item in status["items"]} == {"failed"}
    assert support.stream_messages(nats_server.url) == []
    assert {rt.store.get_entry(i).status for i in invalid} == {"open"}


@pytest.mark.parametrize("field", ["force", "only_valid"])
def test_a_bulk_flag_that_is_not_a_yes_or_a_no_is_a_400_sentence_and_starts_no_job(app, rt, tokens, field):
    entry_id = support.dead_letter(app, 1, payload=b'{"order_id": 1}')
    response = app.test_client().post("/api/bulk", json={"action": "patch", "ids": [entry_id], field: "maybe",
                                                         "patch": [{"op": "add", "path": "/x", "value": 1}]},
                                      headers=support.bearer(tokens["operator"]))
    assert response.status_code == 400
    assert response.get_json() == {"error": f"{field} 'maybe' is not valid: use one of true, false, 1, 0, on, "
                                            "off, yes, no, or leave it out"}
    assert listing.list_jobs(rt.engine)["jobs"] == []


@pytest.mark.parametrize("path", ["/api/bulk", "/api/repair/preview"])
@pytest.mark.parametrize("flt, words", [
    ({"subjet": "orders.*"}, "filter 'subjet' is not one of the list's filters: use source, status, subject"),
    ({"status": "open", "limit": 10}, "filter 'limit' is not one of the list's filters"),
    ({"subject": ["orders.*"]}, "filter subject: give one value as text, not list"),
])
def test_a_bulk_filter_that_names_no_filter_is_a_400_sentence_not_every_open_entry(app, rt, tokens, path, flt, words):
    """A typo in a filter's name (or a page's limit) was left out, and the job took every open entry."""
    for seq in range(1, 4):
        support.dead_letter(app, seq, subject="payments.captured" if seq == 3 else "orders.created",
                            payload=b'{"order_id": 1}')
    response = app.test_client().post(path, json={"action": "close", "filter": flt},
                                      headers=support.bearer(tokens["operator"]))
    assert response.status_code == 400, response.get_json()
    assert response.get_json()["error"].startswith(words)
    assert listing.list_jobs(rt.engine)["jobs"] == []
    # A filter given as null is no filter: here status alone, the three open entries.
    taken = app.test_client().post("/api/bulk", json={"action": "close", "filter": {"subject": None, "status": "open"},
                                                      "note": "all"}, headers=support.bearer(tokens["operator"]))
    assert taken.status_code == 202
    support.jobs_settled(rt.engine)
    assert jobs.job_status(rt, taken.get_json()["job"], limit=0)["done"] == 3


@pytest.mark.parametrize("word, kept", [("on", True), ("off", False), ("false", False), ("yes", True)])
def test_the_previews_start_form_keeps_only_valid_as_the_form_said_it(app, rt, auth, word, kept):
    support.dead_letter(app, 1, payload=b'{"customer_id": "c-1"}')
    client = auth.client("operator")
    response = client.post("/bulk/preview", data={"csrf_token": support.csrf_token(client, "/"), "action": "close",
                                                  "by": "filter", "status": "open", "only_valid": word})
    assert response.status_code == 200, response.get_data(as_text=True)
    assert ('<input type="hidden" name="only_valid" value="on">' in response.get_data(as_text=True)) is kept


def test_the_patch_preview_counts_what_no_stream_would_store_and_disables_start(app, rt, nats_server, auth):
    support.make_orders_stream(nats_server.url)  # stores orders.>, not payments.>
    ids = [support.dead_letter(app, seq, subject="payments.settled", payload=b'{"id": %d}' % seq)
           for seq in range(1, 4)]
    client = auth.client("operator")
    token = support.csrf_token(client, "/")
    response = client.post("/bulk/preview", data={
        "csrf_token": token, "action": "patch", "ids": [str(i) for i in ids],
        "patch": '[{"op": "add", "path": "/fixed", "value": true}]', "only_valid": "on"})
    page = response.get_data(as_text=True)
    assert response.status_code == 200, page
    assert ("<strong>3</strong> would be patched and then refused: No stream stores subject payments.settled: "
            "a republish would be refused.") in page
    assert "disabled" in start_buttons(page)["Start"]
    assert "Start is unavailable: none of the 3 would be republished" in page


@pytest.mark.parametrize("action", ["republsh", "explode"])
def test_a_preview_of_an_action_that_is_none_is_a_400_sentence_not_a_close(app, rt, auth, action):
    """A typo in a shared link: the preview said "1 entry will be closed" beside an enabled Start,
    which the start then refused."""
    support.dead_letter(app, 1, subject="shipping.csv")
    response = auth.client("operator").get(f"/bulk/preview?by=filter&action={action}&subject=shipping.csv")
    page = response.get_data(as_text=True)
    assert response.status_code == 400
    assert (f"action &#39;{action}&#39; is not valid: use republish, close, patch, repair or reopen") in page
    assert "will be closed" not in page and "Start" not in start_buttons(page)
