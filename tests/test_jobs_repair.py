"""Repair by the schema over a real nats-server: the demo's main failure (each price sent as a
different numeric string) previewed and repaired in one bulk action, each republish arriving
once with its digits as written; one entry's repair from its page; the JSON twins."""

from __future__ import annotations

import gzip
import json
import random
import re

import pytest

from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.demo.orders import OrderFactory
from dlq_dashboard.demo.service import DEMO_SCHEMAS

from . import support


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """The demo's order schema."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, republish_rate=2000,
                                 request_timeout=2.0, schemas_dir=str(DEMO_SCHEMAS))


def demo_orders(kind: str, count: int, seed: int = 7) -> list[bytes]:
    factory = OrderFactory(random.Random(seed))
    return [factory.make(kind).payload for _ in range(count)]


def repaired(payload: bytes) -> bytes:
    """The payload with its price's quotes removed and nothing else changed (the digits as sent)."""
    return re.sub(rb'"price": "([0-9.]+)"', rb'"price": \1', payload, count=1)


def count_of(page: str, name: str) -> int:
    return int(re.search(rf'data-count="{name}">([0-9,]+)<', page).group(1).replace(",", ""))


@pytest.mark.both_databases
def test_the_demos_prices_as_text_are_repaired_in_one_bulk_action_each_republished_once_with_its_digits(
        app, rt, nats_server, auth, tokens):
    support.make_orders_stream(nats_server.url)
    broken = demo_orders("price_as_string", 12)
    assert len({json.loads(p)["items"][0]["price"] for p in broken}) > 6  # a different numeric string each
    assert any(json.loads(p)["items"][0]["price"].endswith("0") for p in broken)  # a trailing zero to keep
    ids = support.dead_letter_orders(app, nats_server.url, broken)
    missing = support.dead_letter_orders(app, nats_server.url, demo_orders("missing_customer", 2, seed=3))
    comma = support.dead_letter_orders(app, nats_server.url, [re.sub(rb'("price": "[0-9]+)\.', rb"\1,", broken[0])])
    client = auth.client("operator")
    form = {"csrf_token": support.csrf_token(client, "/"), "by": "filter", "action": "repair",
            "subject": "orders.created"}

    preview = client.post("/bulk/preview", data=form)
    page = preview.get_data(as_text=True)
    assert preview.status_code == 200, page
    assert (count_of(page, "pass"), count_of(page, "still_fail"), count_of(page, "cannot")) == (12, 0, 3)
    assert "No rule repairs it: /customer_id: missing; the schema requires it." in page
    assert "/items/0/price: the text is not a number as JSON writes one" in page
    assert page.count('class="repair-example"') == 5
    first = json.loads(broken[0])["items"][0]["price"]
    assert f'<span class="add">+      &#34;price&#34;: {first}' in page  # the diff keeps the digits
    assert support.stream_messages(nats_server.url) == []  # nothing runs before Start

    # The JSON twin says the same.
    answer = app.test_client().post("/api/repair/preview", json={"filter": {"subject": "orders.created"}},
                                    headers=support.bearer(tokens["operator"]))
    assert answer.status_code == 200, answer.get_data(as_text=True)
    body = answer.get_json()
    assert (body["pass"], body["still_fail"], body["cannot"], body["count"]) == (12, 0, 3, 15)
    assert {r["reason"]: r["count"] for r in body["cannot_reasons"]}[
        "No rule repairs it: /customer_id: missing; the schema requires it."] == 2
    assert body["cannot_reasons"][0]["examples"] and body["examples"][0]["changes"] == [
        {"path": "/items/0/price", "rule": "a number written as text"}]

    start = {**form, "upto": str(comma[0])}
    answers = [client.post("/bulk", data=start) for _ in range(2)]  # a double-click
    assert answers[0].status_code == 303
    assert answers[1].status_code in (303, 400)
    support.jobs_settled(rt.engine)

    published = support.stream_messages(nats_server.url)
    assert len(published) == len(ids)
    assert len({m.headers["Nats-Msg-Id"] for m in published}) == len(ids)
    assert sorted(m.data for m in published) == sorted(repaired(p) for p in broken)  # byte for byte
    # Posted twice without the page's guard (static/app.js sends a form once), two jobs may run:
    # each entry is repaired and republished by one of them, and the other says who did.
    made = [int(a.headers["Location"].rsplit("/", 1)[1]) for a in answers if a.status_code == 303]
    statuses = [client.get(f"/api/jobs/{job}").get_json() for job in made]
    assert sum(s["done"] for s in statuses) == 12
    for status in statuses:
        assert (status["action"], status["total"], status["done"] + status["skipped"]) == ("repair", 15, 15)
        skipped = {i["entry_id"]: i["result"] for i in status["items"] if i["state"] == "skipped"}
        assert set(missing + comma) <= set(skipped)
        assert "/customer_id: missing; the schema requires it" in skipped[missing[0]]
        assert all(r.startswith("Republished by ") for e, r in skipped.items() if e not in missing + comma)
    job_id = made[0]
    job_page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Job %d: bulk repair" % job_id in job_page
    # Each republish's audit and the entry's timeline say it was repaired by the schema.
    audit = client.get(f"/api/audit?entry={ids[0]}").get_json()["actions"]
    assert [a["detail"].get("repaired") for a in audit if a["action"] == "republish"] == [True]
    assert "Repaired by the schema and republished to orders.created" in client.get(
        f"/entries/{ids[0]}").get_data(as_text=True)
    assert ", repaired by the schema" in client.get(f"/audit?entry={ids[0]}").get_data(as_text=True)


def test_one_entry_is_repaired_from_its_page_and_republished_once_even_when_sent_twice(
        app, rt, nats_server, auth):
    support.make_orders_stream(nats_server.url)
    [payload] = demo_orders("price_as_string", 1, seed=11)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [payload])
    client = auth.client("operator")

    entry_page = client.get(f"/entries/{entry_id}").get_data(as_text=True)
    assert f'action="/entries/{entry_id}/repair"' in entry_page and ">Repair by schema<" in entry_page
    page = client.get(f"/entries/{entry_id}/repair").get_data(as_text=True)
    assert "Repaired, the payload passes the current schema." in page and "repair-diff" in page
    digest = re.search(r'name="digest" value="([0-9a-f]+)"', page).group(1)
    form = {"csrf_token": support.csrf_token(client, f"/entries/{entry_id}/repair"), "version": "1",
            "digest": digest}
    first = client.post(f"/entries/{entry_id}/repair", data=form)
    # Its entry's page says what was sent (it said nothing), as after an edit.
    after = client.get(first.headers["Location"]).get_data(as_text=True)
    assert (f"Republished entry {entry_id} with the repaired payload to orders.created, stored by stream ORDERS "
            "as message 1.") in after
    again = client.post(f"/entries/{entry_id}/repair", data=form)
    assert first.status_code == 303 and again.status_code == 409
    [message] = support.stream_messages(nats_server.url)
    assert message.data == repaired(payload)

    # A Republish of a repair other than the one shown is refused; without the token too.
    other = client.post(f"/entries/{entry_id}/repair", data={**form, "version": "2", "digest": "0" * 32})
    assert other.status_code == 409 and len(support.stream_messages(nats_server.url)) == 1
    assert client.post(f"/entries/{entry_id}/repair", data={"version": "2", "digest": digest}).status_code == 400


def test_a_repair_opened_from_a_filtered_list_leads_back_to_that_list(app, rt, nats_server, auth):
    """Its form and Cancel dropped the list's filters: the entry's page after it walked every entry."""
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, demo_orders("price_as_string", 1, seed=12))
    client = auth.client("operator")
    page = client.get(f"/entries/{entry_id}/repair?status=open&version=1").get_data(as_text=True)
    assert f'action="/entries/{entry_id}/repair?status=open"' in page
    assert f'<a href="/entries/{entry_id}?status=open">Cancel</a>' in page
    digest = re.search(r'name="digest" value="([0-9a-f]+)"', page).group(1)
    answer = client.post(f"/entries/{entry_id}/repair?status=open", data={
        "csrf_token": support.csrf_token(client, f"/entries/{entry_id}/repair"), "version": "1", "digest": digest})
    assert answer.status_code == 303 and answer.headers["Location"] == f"/entries/{entry_id}?status=open"


def test_a_viewer_gets_no_repair_and_a_payload_without_schema_says_why(offline_app, auth, tokens):
    entry_id = support.dead_letter(offline_app, 1, payload=b'{"price": "1.50"}')
    viewer = auth.client("viewer")
    assert viewer.get(f"/entries/{entry_id}/repair").status_code == 403
    assert ">Repair by schema<" not in viewer.get(f"/entries/{entry_id}").get_data(as_text=True)
    api = offline_app.test_client()
    assert api.post("/api/repair/preview", json={"ids": [entry_id]},
                    headers=support.bearer(tokens["viewer"])).status_code == 403
    body = api.post("/api/repair/preview", json={"ids": [entry_id]},
                    headers=support.bearer(tokens["operator"])).get_json()
    assert body["cannot_reasons"][0]["reason"] == "No schema covers its subject, so there is nothing to repair by."
    page = auth.client("operator").get(f"/entries/{entry_id}/repair").get_data(as_text=True)
    assert "It cannot be repaired. No schema covers its subject" in page


def test_a_repair_job_resumed_after_a_crash_publishes_nothing_twice(app, rt, nats_server, tokens, monkeypatch):
    from dlq_dashboard.actions import publishing
    from dlq_dashboard.actions.bulk.runner import JobRunner

    support.make_orders_stream(nats_server.url)
    broken = demo_orders("price_as_string", 6, seed=5)
    ids = support.dead_letter_orders(app, nats_server.url, broken)

    def crash_after_the_publish(where, intent):
        if where == "after_publish":
            raise RuntimeError("simulated crash after the publish, before the commit")

    monkeypatch.setattr(publishing, "fault_point", crash_after_the_publish)
    response = app.test_client().post("/api/bulk", json={"action": "repair", "ids": ids},
                                      headers=support.bearer(tokens["operator"]))
    assert response.status_code == 202, response.get_data(as_text=True)
    job_id = response.get_json()["job"]
    rt.jobs.join(job_id, timeout=30)
    assert jobs.job_status(rt, job_id, limit=0)["state"] == "running"
    assert len(support.stream_messages(nats_server.url)) == 6  # published, not recorded

    # A restart: recovery publishes the pending intents again (same msgIds, same repaired
    # payloads), then the job resumes and finds them done.
    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    rt.jobs.stop()
    rt.jobs = JobRunner(rt).start()
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s,
                              timeout=30, message="the resumed job to finish")
    assert (status["done"], status["skipped"], status["failed"]) == (6, 0, 0)
    published = support.stream_messages(nats_server.url)
    assert sorted(m.data for m in published) == sorted(repaired(p) for p in broken)


def test_repair_by_schema_is_offered_only_where_the_schema_finds_the_payload_invalid(make_app):
    # A timeout's payload that passes its schema, or one no schema covers, has nothing the repair
    # could change: the button led to a preview saying so.
    app = make_app(schemas_dir=str(DEMO_SCHEMAS))
    [broken] = demo_orders("price_as_string", 1, seed=3)
    [fine] = demo_orders("ok", 1, seed=3)
    invalid = support.dead_letter(app, 1, payload=broken, Dlq_Reason="schema_invalid", Dlq_Error="price")
    valid = support.dead_letter(app, 2, payload=fine, Dlq_Reason="max_deliveries", Dlq_Error="TimeoutError: CRM")
    uncovered = support.dead_letter(app, 3, subject="payments.made", payload=b'{"amount": "1.50"}',
                                    Dlq_Reason="fatal", Dlq_Error="no account")
    # The schema fails a payload that is not JSON too, but no rule of a repair can read it: as the
    # consumer library dead-letters it.
    unread = support.dead_letter(app, 4, payload=b"\x1f\x8b\x08 gzip bytes", Dlq_Reason="schema_invalid",
                                 Dlq_Error="payload is not valid JSON", Dlq_Schema_Errors=json.dumps(
                                     [{"path": "", "message": "payload is not valid JSON: 'utf-8' codec can't decode"}]))
    operator = support.logged_in(app, "operator")

    def offered(entry_id):
        page = operator.get(f"/entries/{entry_id}").get_data(as_text=True)
        return re.findall(r'data-action="(\w+)"', page.split('class="action-bar"')[1].split("</section>")[0])

    assert offered(invalid) == ["republish", "edit", "repair", "close"]
    assert offered(valid) == offered(uncovered) == offered(unread) == ["republish", "edit", "close"]
    groups = {entry_id: operator.get(f"/entries/{entry_id}").get_data(as_text=True).split('data-group="')[1].split('"')[0]
              for entry_id in (invalid, valid, uncovered, unread)}
    for entry_id, actions in [(invalid, ["republish", "close", "patch", "repair"]), (valid, ["republish", "close", "patch"]),
                              (uncovered, ["republish", "close", "patch"]), (unread, ["republish", "close", "patch"])]:
        page = operator.get(f"/groups/{groups[entry_id]}").get_data(as_text=True)
        assert re.findall(r'name="action" value="(\w+)"', page) == actions, entry_id


def test_a_groups_repair_previews_that_groups_entries(make_app):
    app = make_app(schemas_dir=str(DEMO_SCHEMAS))
    for seq, payload in enumerate(demo_orders("price_as_string", 3, seed=2), start=1):
        support.dead_letter(app, seq, payload=payload, Dlq_Reason="schema_invalid",
                            Dlq_Error="/items/0/price is a string")
    support.dead_letter(app, 9, payload=b'{"other": "1"}', Dlq_Reason="fatal", Dlq_Error="something else")
    operator = support.logged_in(app, "operator")
    groups = operator.get("/api/groups").get_json()["groups"]
    [group] = [g for g in groups if g["reason"] == "schema_invalid"]
    page = operator.get("/groups").get_data(as_text=True)
    assert ">Repair by schema</button>" in page
    form = {"csrf_token": support.csrf_token(operator, "/groups"), "by": "filter", "action": "repair",
            **group["filter"]}
    preview = operator.post("/bulk/preview", data=form).get_data(as_text=True)
    assert "<strong>3</strong> entries are selected" in preview
    assert (count_of(preview, "pass"), count_of(preview, "cannot")) == (3, 0)


def test_gzip_bytes_no_header_declares_are_repaired_decompressed_one_by_one_and_by_their_group(app, rt, nats_server):
    """The demo's "garbled" orders (a producer that gzips without saying so): the repair's first
    change decompresses them, its rules do the rest, and what goes out is the text, once."""
    support.make_orders_stream(nats_server.url)
    not_json = json.dumps([{"path": "", "message": "payload is not valid JSON: 'utf-8' codec can't decode byte 0x8b "
                                                   "in position 1: invalid start byte"}])
    [priced, fine] = demo_orders("price_as_string", 1, seed=5) + demo_orders("ok", 1, seed=5)
    [one, other] = support.dead_letter_orders(app, nats_server.url, [gzip.compress(priced), gzip.compress(fine)],
                                              headers={"Dlq-Reason": "schema_invalid", "Dlq-Schema-Errors": not_json})
    operator = support.logged_in(app, "operator")
    assert ">Repair by schema<" in operator.get(f"/entries/{one}").get_data(as_text=True)
    page = operator.get(f"/entries/{one}/repair").get_data(as_text=True)
    changes = re.findall(r"<li><code>([^<]*)</code>: ([^<]*)</li>", page.split('class="repair-changes"')[1])
    assert changes == [("(whole payload)", "gzip bytes decompressed (its producer compressed it without saying so)"),
                       ("/items/0/price", "a number written as text")]
    assert "--- stored, decompressed" in page and "Repaired, the payload passes the current schema." in page
    # Their group offers the repair, and its job republishes both once, decompressed (and repaired).
    group = operator.get(f"/entries/{one}").get_data(as_text=True).split('data-group="')[1].split('"')[0]
    assert re.findall(r'name="action" value="(\w+)"', operator.get(f"/groups/{group}").get_data(as_text=True)) == [
        "republish", "close", "patch", "repair"]
    form = {"csrf_token": support.csrf_token(operator, f"/groups/{group}"), "by": "filter", "action": "repair",
            "group": group}
    preview = operator.post("/bulk/preview", data=form).get_data(as_text=True)
    assert (count_of(preview, "pass"), count_of(preview, "cannot")) == (2, 0)
    # The fine one, decompressed alone: "No line differs." said nothing of why it was counted repaired.
    assert ('<p class="note diff-none">No line differs from the decompressed payload: decompressing it is the '
            'repair, and it goes out decompressed.</p>') in preview
    assert "--- stored, decompressed" in preview  # the other one's diff, from what it holds
    job = jobs.create_job(rt, "repair", actor="ann", filter_args={"group": group}, start=False)
    rt.jobs.submit(job)
    support.wait_for(lambda: jobs.job_status(rt, job, limit=0)["state"] == "done", message="the repair job")
    assert sorted(m.data for m in support.stream_messages(nats_server.url)) == sorted([repaired(priced), fine])
    assert {rt.store.get_entry(i).status for i in (one, other)} == {"republished"}
