"""A bulk job by filter with status "any" (an edited or shared address: the pages' own forms never
send it) takes what a filter without a status takes: open entries, closed ones to reopen. The
preview counts what Start then takes, on the page, the API and the command line. Against a real
nats-server."""

from __future__ import annotations

import re

import pytest

from . import support

pytestmark = pytest.mark.both_databases

SUBJECT = "orders.shipped"


def three_statuses(app, rt, nats_server, tokens) -> tuple[int, int, int]:
    """An open, a closed and a republished entry of SUBJECT; ORDERS holds the one republish."""
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"n": %d}' % i for i in range(3)], subject=SUBJECT)
    api, operator = app.test_client(), support.bearer(tokens["operator"])
    for entry_id, action in zip(ids[1:], ("close", "republish")):
        answer = api.post(f"/api/entries/{entry_id}/{action}", json={"version": rt.store.get_entry(entry_id).version},
                          headers=operator)
        assert answer.status_code == 200, answer.get_data(as_text=True)
    assert [rt.store.get_entry(i).status for i in ids] == ["open", "closed", "republished"]
    assert len(support.stream_messages(nats_server.url)) == 1
    return ids[0], ids[1], ids[2]


def finished(client, job_id: int, token: str):
    status = client.get(f"/api/jobs/{job_id}", headers=support.bearer(token)).get_json()
    return status if status["state"] in ("done", "cancelled") else None


def test_the_preview_and_start_with_any_status_republish_the_open_entry_only(app, rt, nats_server, tokens, auth):
    open_one, closed, republished = three_statuses(app, rt, nats_server, tokens)
    client = auth.client("operator")
    preview = client.get("/bulk/preview", query_string={"by": "filter", "action": "republish", "status": "any",
                                                        "subject": SUBJECT})
    page = preview.get_data(as_text=True)
    assert preview.status_code == 200, page
    assert "<strong>1</strong> entry will be republished" in page
    assert "<li>1 open</li>" in page and " closed</li>" not in page and " republished</li>" not in page
    form = re.search(r'<form method="post" action="/bulk">(.*?)</form>', page, re.S).group(1)
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form))
    assert fields["status"] == "any" and fields["upto"] == str(open_one)

    started = client.post("/bulk", data=fields)
    assert started.status_code == 303, started.get_data(as_text=True)
    job_id = int(started.headers["Location"].rsplit("/", 1)[1])
    status = support.wait_for(lambda: finished(app.test_client(), job_id, tokens["viewer"]), message="the job")
    assert (status["total"], status["done"], status["failed"], status["skipped"]) == (1, 1, 0, 0)
    assert [item["entry_id"] for item in status["items"]] == [open_one]
    messages = support.stream_messages(nats_server.url)
    assert len(messages) == 2 and messages[-1].headers["Dlq-Replay-Of"] != messages[0].headers["Dlq-Replay-Of"]
    assert rt.store.get_entry(republished).version == rt.store.get_entry(closed).version == 2


@pytest.mark.parametrize("action, taken", [("republish", 0), ("close", 0), ("reopen", 1)])
def test_the_api_with_any_status_takes_what_no_status_takes(app, rt, nats_server, tokens, action, taken):
    ids = three_statuses(app, rt, nats_server, tokens)
    client = app.test_client()
    answer = client.post("/api/bulk", json={"action": action, "filter": {"status": "any", "subject": SUBJECT}},
                         headers=support.bearer(tokens["operator"]))
    assert answer.status_code == 202, answer.get_data(as_text=True)
    status = support.wait_for(lambda: finished(client, answer.get_json()["job"], tokens["viewer"]), message="the job")
    assert [item["entry_id"] for item in status["items"]] == [ids[taken]]
    assert (status["done"], status["failed"], status["skipped"]) == (1, 0, 0)
    assert len(support.stream_messages(nats_server.url)) == (2 if action == "republish" else 1)


def test_the_command_line_with_status_any_republishes_the_open_entry_only(app, rt, nats_server, tokens):
    open_one, _, _ = three_statuses(app, rt, nats_server, tokens)
    runner = app.test_cli_runner()
    dry = runner.invoke(args=["jobs", "start", "republish", "--status", "any", "--subject", SUBJECT, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert re.search(r"^Would republish 1 entry:", dry.output, re.M), dry.output
    assert "1 open" in dry.output and "closed" not in dry.output and "republished" not in dry.output
    ran = runner.invoke(args=["jobs", "start", "republish", "--status", "any", "--subject", SUBJECT, "--wait"])
    assert ran.exit_code == 0, ran.output
    assert "finished: 1 done, 0 failed, 0 skipped, 0 to go, of 1." in ran.output
    assert len(support.stream_messages(nats_server.url)) == 2
    assert rt.store.get_entry(open_one).status == "republished"
