"""One fix for many: a JSON Patch applied to a selection, previewed, republished exactly once."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from dlq_dashboard.actions import publishing
from dlq_dashboard.actions.bulk import jobs, publisher, work
from dlq_dashboard.actions.bulk.runner import JobRunner
from dlq_dashboard.db.models import Action, Job
from dlq_dashboard.runtime import runtime_of

from . import support

PATCH = [{"op": "replace", "path": "/price", "value": 12.5}]
#: price must be a number: ten dead letters have it as a string.
SCHEMA = {"x-subjects": ["orders.*"], "type": "object", "required": ["order_id", "price"],
          "properties": {"price": {"type": "number"}}}
BROKEN = [b'{"order_id": "o-%d", "price": "12.50"}' % i for i in range(10)]


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """The orders schema with a numeric price."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, republish_rate=2000,
                                 request_timeout=2.0, schemas_dir=support.orders_schema_folder(tmp_path, SCHEMA))


def audit_rows(rt, *conds) -> list:
    with rt.engine.connect() as conn:
        return conn.execute(select(Action).where(*conds).order_by(Action.id)).all()


def assert_patched_exactly_once(url: str, ids: list[int]) -> None:
    """ORDERS holds one message for each of ``ids``, each with the patched price."""
    published = support.stream_messages(url)
    assert len(published) == len(ids)
    assert len({m.headers["Nats-Msg-Id"] for m in published}) == len(ids)
    assert {m.headers["Nats-Msg-Id"].rsplit(":e", 1)[1] for m in published} == {f"{i}:v1" for i in ids}
    bodies = [json.loads(m.data) for m in published]
    assert all(b["price"] == 12.5 for b in bodies)
    assert sorted(b["order_id"] for b in bodies) == sorted(f"o-{i}" for i in range(len(ids)))


@pytest.mark.both_databases
def test_a_patch_for_a_filter_is_previewed_then_republished_once_even_when_started_twice(
        app, rt, nats_server, auth, tokens):
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, BROKEN)
    not_json, no_price = support.dead_letter_orders(app, nats_server.url, [b"not json", b'{"order_id": "x"}'])
    client = auth.client("operator")
    token = support.csrf_token(client, "/")
    form = {"csrf_token": token, "by": "filter", "action": "patch", "subject": "orders.created"}

    # From the list's bulk bar: the form first, the option on.
    first = client.post("/bulk/preview", data=form)
    page = first.get_data(as_text=True)
    assert first.status_code == 200 and "<strong>12</strong> entries are selected" in page
    assert 'name="only_valid" checked' in page and "What the patch would do" not in page

    preview = client.post("/bulk/preview", data={**form, "patch": json.dumps(PATCH), "only_valid": "on",
                                                 "upto": str(no_price)})
    page = preview.get_data(as_text=True)
    assert preview.status_code == 200, page
    assert "<strong>10</strong> would then pass the current schema and be republished" in page
    assert "<strong>0</strong> would still fail it" in page
    assert "<strong>2</strong> cannot be patched and would be skipped" in page
    assert "1: The payload is not JSON, so a JSON Patch cannot apply." in page
    assert '<span class="del">-  &#34;price&#34;: &#34;12.50&#34;</span>' in page  # the pretty forms' line diff
    assert '<span class="add">+  &#34;price&#34;: 12.5</span>' in page
    assert page.count('class="patch-example"') == 5
    assert support.stream_messages(nats_server.url) == []  # nothing runs before Start

    start = {**form, "patch": json.dumps(PATCH), "only_valid": "on", "upto": str(no_price)}
    answers = [client.post("/bulk", data=start) for _ in range(2)]  # a double-click
    assert answers[0].status_code == 303
    assert answers[1].status_code in (303, 400)  # a second job, or none left open to take
    support.jobs_settled(rt.engine)
    assert_patched_exactly_once(nats_server.url, ids)

    # Posted twice without the page's guard (static/app.js sends a form once), two jobs may run:
    # each entry is patched and republished by one of them, and the other says who did.
    made = [int(a.headers["Location"].rsplit("/", 1)[1]) for a in answers if a.status_code == 303]
    statuses = [client.get(f"/api/jobs/{job}").get_json() for job in made]
    assert sum(s["done"] for s in statuses) == 10
    for status in statuses:
        assert (status["action"], status["patch"], status["selection"]["only_valid"]) == ("patch", PATCH, True)
        assert (status["total"], status["done"] + status["skipped"]) == (12, 12)
        reasons = {i["entry_id"]: i["result"] for i in status["items"] if i["state"] == "skipped"}
        assert reasons[not_json] == "The payload is not JSON, so a JSON Patch cannot apply."
        assert reasons[no_price].startswith("The patch does not apply:") and "price" in reasons[no_price]
        assert all(r.startswith("Republished by ") for e, r in reasons.items() if e not in (not_json, no_price))
    job_id = max(statuses, key=lambda s: s["done"])["id"]

    # The audit: the job's row and each republish carry the patch.
    [job_row] = audit_rows(rt, Action.job_id == job_id, Action.action == "bulk_patch")
    assert json.loads(job_row.detail)["patch"] == PATCH
    republished = audit_rows(rt, Action.action == "republish")
    assert sorted(r.entry_id for r in republished) == ids
    assert all(json.loads(r.detail)["patch"] == PATCH and json.loads(r.detail)["edited"] for r in republished)

    # Each entry's timeline, and the job's page.
    entry_page = client.get(f"/entries/{ids[3]}").get_data(as_text=True)
    assert "Republished with a JSON Patch to orders.created" in entry_page
    assert "<dt>patch</dt><dd>[{&#34;op&#34;: &#34;replace&#34;, &#34;path&#34;: &#34;/price&#34;" in entry_page
    job_page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Job %d: bulk patch" % job_id in job_page and 'class="patch-text"' in job_page


def test_a_patch_job_resumed_after_a_crash_publishes_nothing_twice(app, rt, nats_server, tokens, monkeypatch):
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, BROKEN)

    def crash_after_the_publish(where, intent):
        if where == "after_publish":
            raise RuntimeError("simulated crash after the publish, before the commit")

    monkeypatch.setattr(publishing, "fault_point", crash_after_the_publish)
    response = app.test_client().post("/api/bulk", json={"action": "patch", "patch": PATCH, "ids": ids},
                                      headers=support.bearer(tokens["operator"]))
    assert response.status_code == 202, response.get_data(as_text=True)
    job_id = response.get_json()["job"]
    rt.jobs.join(job_id, timeout=30)
    assert jobs.job_status(rt, job_id, limit=0)["state"] == "running"
    assert len(support.stream_messages(nats_server.url)) == 10  # published, not recorded

    # A restart: recovery publishes the pending intents again (same msgIds, same patched
    # payloads), then the job resumes and finds them done.
    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    rt.jobs.stop()
    rt.jobs = JobRunner(rt).start()
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s,
                              timeout=30, message="the resumed job to finish")
    assert (status["done"], status["skipped"], status["failed"]) == (10, 0, 0)
    assert_patched_exactly_once(nats_server.url, ids)
    republished = audit_rows(rt, Action.action == "republish")
    assert len(republished) == 10 and all(json.loads(r.detail)["patch"] == PATCH for r in republished)


def test_bad_patches_get_a_sentence_and_a_viewer_is_refused(offline_app, tokens, auth):
    entry_id = support.dead_letter(offline_app, 1, payload=b'{"order_id": "o-1", "price": "1"}')
    client = offline_app.test_client()

    def api(body, role="operator"):
        return client.post("/api/bulk", json={"action": "patch", "ids": [entry_id], **body},
                           headers=support.bearer(tokens[role]))

    assert api({"patch": PATCH}, role="viewer").status_code == 403
    for patch, sentence in [
        ("nope", "The patch is not JSON"),
        ("[" * 100_000 + "]" * 100_000, "The patch nests too deeply"),
        ({"op": "replace", "path": "/price", "value": 1}, "A JSON Patch is an array of operations"),
        ([], "The patch has no operations"),
        (["replace"], "Operation 1 is not an object"),
        ([{"op": "frobnicate", "path": "/price"}], "Operation 1 has op 'frobnicate': use one of add, remove"),
        ([{"op": {"add": 1}, "path": {}}], "Operation 1 has an op that is no name: use one of add"),
        ([{"path": "/price"}], "Operation 1 has no op name: use one of add"),
        ([{"op": "replace", "path": "/price"}], "Operation 1 (replace) has no 'value'"),
        ([{"op": "move", "path": "/a"}], "Operation 1 (move) has no 'from'"),
        ([{"op": "remove", "path": "price"}], "is not a JSON Pointer"),
        (None, "Write a JSON Patch"),
    ]:
        response = api({"patch": patch} if patch is not None else {})
        assert response.status_code == 400, (patch, response.get_data(as_text=True))
        assert sentence in response.get_json()["error"], (patch, response.get_json())
    with runtime_of(offline_app).engine.connect() as conn:
        assert conn.execute(select(Job.id)).first() is None  # nothing was made

    operator = auth.client("operator")
    form = {"csrf_token": support.csrf_token(operator, "/"), "by": "ids", "ids": str(entry_id), "action": "patch"}
    bad = operator.post("/bulk/preview", data={**form, "patch": "[{\"op\": \"replace\"}]"})
    assert bad.status_code == 400 and "Operation 1 (replace) has no &#39;path&#39;" in bad.get_data(as_text=True)
    assert operator.post("/bulk", data={**form, "patch": "{}"}).status_code == 400
    listing = operator.get("/").get_data(as_text=True)
    assert '<option value="patch"' in listing
    assert "Patch and republish" in operator.get("/groups").get_data(as_text=True)

    viewer = auth.client("viewer")
    token = support.csrf_token(viewer, "/")
    assert viewer.post("/bulk/preview", data={**form, "csrf_token": token, "patch": json.dumps(PATCH)}).status_code == 403
    assert viewer.post("/bulk", data={**form, "csrf_token": token, "patch": json.dumps(PATCH)}).status_code == 403
    assert '<option value="patch"' not in viewer.get("/").get_data(as_text=True)
    assert "Patch and republish" not in viewer.get("/groups").get_data(as_text=True)


def test_a_big_patch_job_sends_the_patched_payloads_from_its_own_publishing_process(app, rt, nats_server,
                                                                                    monkeypatch):
    support.make_orders_stream(nats_server.url)
    support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-%d", "price": "1"}' % i for i in range(2000)])
    monkeypatch.setattr(work, "OWN_PUBLISHER_FROM", 1)
    sent = []
    original = publisher.Publisher.publish
    monkeypatch.setattr(publisher.Publisher, "publish", lambda self, messages: sent.extend(messages)
                        or original(self, messages))
    # The process connected before the first window: on a busy machine (CI) the whole job went
    # through the bridge before it had, and nothing was sent from it.
    support.publish_once_connected(monkeypatch)
    job_id = jobs.create_job(rt, "patch", actor="alice", patch=PATCH, only_valid=True,
                             filter_args={"subject": "orders.created"})
    rt.jobs.join(job_id, timeout=60)
    assert jobs.job_status(rt, job_id, limit=0)["done"] == 2000
    assert sent and all(json.loads(payload)["price"] == 12.5 for _, payload, _ in sent)
    published = support.stream_messages(nats_server.url)
    assert len(published) == 2000 and len({m.headers["Nats-Msg-Id"] for m in published}) == 2000
    assert all(json.loads(m.data)["price"] == 12.5 for m in published)


def test_a_patch_gives_the_same_compact_bytes_every_time_or_a_reason_that_quotes_no_payload_value():
    from dlq_dashboard.actions.bulk.patching import Unpatchable, patched_payload

    payload = '{"order_id": "o-1", "price": "12.50", "name": "é"}'.encode()
    first = patched_payload(PATCH, payload)
    assert first == patched_payload(PATCH, payload) == '{"order_id":"o-1","price":12.5,"name":"é"}'.encode()
    for ops, body, reason in [
        (PATCH, b"not json", "The payload is not JSON"),
        (PATCH, b'{"order_id": "o-1"}', "The patch does not apply: can't replace a non-existent object 'price'"),
        ([{"op": "test", "path": "/price", "value": 1}], b'{"price": "secret-value"}',
         "A test operation failed: the payload does not hold the tested value."),
        (PATCH, b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (PATCH, None, "The payload is not available"),
        # What cannot be written back as it was is not patched: no Infinity sent, no value lost.
        (PATCH, b'{"price": "1", "big": 1e400}', "1e400 is beyond the range of a double"),
        (PATCH, b'{"price": "1", "ratio": NaN}', "NaN is not a JSON number"),
        (PATCH, '{"price": "1"}'.encode("utf-16"), "it is not UTF-8 text"),
        (PATCH, b'{"price": "1", "k": 1, "k": 2}', "repeats a key in an object"),
    ]:
        with pytest.raises(Unpatchable) as caught:
            patched_payload(ops, body, available=body is not None)
        assert reason in str(caught.value) and "secret-value" not in str(caught.value)


def test_one_patch_gives_every_entry_the_same_result_though_its_ops_change_what_they_added():
    from dlq_dashboard.actions.bulk.patching import patched_payload

    # The second op changes inside the value the first added: the patch itself must not change.
    ops = [{"op": "add", "path": "/a", "value": {"x": 1}}, {"op": "test", "path": "/a/x", "value": 1},
           {"op": "replace", "path": "/a/x", "value": 2}]
    assert [patched_payload(ops, b'{"n": %d}' % i) for i in range(3)] == \
        [b'{"n":%d,"a":{"x":2}}' % i for i in range(3)]
    assert ops[0]["value"] == {"x": 1}


def test_a_patch_skips_a_payload_it_cannot_republish_with_the_sentence_a_republish_gets():
    import gzip

    from dlq_dashboard.actions.bulk.patching import Unpatchable, patch_for_job, patched_payload
    from dlq_dashboard.actions.decisions import republish_refusal

    # Gzip bytes no header declares are patched decompressed (as the editor edits them), and sent so.
    unpacked = {"id": 7, "original_subject": "orders.created", "payload": gzip.compress(b'{"price": "1"}'),
                "payload_available": True, "headers": "{}"}
    assert patch_for_job(None, PATCH, unpacked, only_valid=False) == patched_payload(PATCH, b'{"price": "1"}')
    for row in ({"id": 8, "original_subject": "orders.created", "payload": b'{"price": "1"}',
                 "payload_available": True, "headers": '{"Content-Encoding": ["gzip"]}'},
                {"id": 9, "original_subject": None, "payload": b'{"price": "1"}', "payload_available": True,
                 "headers": "{}"}):
        with pytest.raises(Unpatchable) as caught:
            patch_for_job(None, PATCH, row, only_valid=False)
        assert str(caught.value) == republish_refusal(row)
