"""Republish exactly once, close, reopen and the audit, against a real nats-server and SQLite."""

from __future__ import annotations

import base64
import html
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import nats
import pytest
from nats.js.api import ConsumerConfig
from sqlalchemy import select

from dlq_dashboard.actions import publishing, recovery
from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.actions.republish import republish_entry
from dlq_dashboard.db.models import Action, Entry, Republish
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases

ORDER_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "x-subjects": ["orders.*"],
    "type": "object",
    "required": ["order_id", "customer_id"],
    "properties": {"order_id": {"type": "string"}},
}
VALID = b'{"order_id": "o-1", "customer_id": "c-1", "note": "caf\xc3\xa9"}'
INVALID = b'{"order_id": "o-2"}'


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """The app's settings, with a schema for orders.* and a short publish timeout."""
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "orders.json").write_text(json.dumps(ORDER_SCHEMA))
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, schemas_dir=str(schemas),
                                 request_timeout=2.0)


class SimulatedCrash(Exception):
    """Raised by the fault hook where the process would die."""


def crash_at(monkeypatch, stage: str) -> None:
    def fault(where, intent):
        if where == stage:
            raise SimulatedCrash(where)

    monkeypatch.setattr(publishing, "fault_point", fault)


def entry_row(rt, entry_id):
    with rt.engine.connect() as conn:
        return conn.execute(select(Entry.status, Entry.version).where(Entry.id == entry_id)).one()


def audit_of(rt, entry_id, action=None):
    query = select(Action).where(Action.entry_id == entry_id)
    if action:
        query = query.where(Action.action == action)
    with rt.engine.connect() as conn:
        return conn.execute(query.order_by(Action.id)).all()


def intents_of(rt, entry_id):
    with rt.engine.connect() as conn:
        return conn.execute(select(Republish).where(Republish.entry_id == entry_id).order_by(Republish.id)).all()


def post(client, url, body, token):
    return client.post(url, json=body, headers=support.bearer(token))


# --- exactly once ------------------------------------------------------------------------------

@pytest.mark.slow
def test_ten_concurrent_republishes_at_one_version_publish_one_message_and_the_rest_get_409(
        app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    barrier = threading.Barrier(10)

    def attempt(_):
        client = app.test_client()
        barrier.wait()
        return post(client, f"/api/entries/{entry_id}/republish", {"version": 1}, tokens["operator"])

    with ThreadPoolExecutor(10) as pool:
        responses = list(pool.map(attempt, range(10)))

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * 9, [r.get_json() for r in responses]
    assert len(support.stream_messages(nats_server.url)) == 1
    assert len(audit_of(rt, entry_id, "republish")) == 1
    ok = next(r.get_json() for r in responses if r.status_code == 200)
    assert ok["entry"]["status"] == "republished"
    assert ok["publish"]["stream"] == "ORDERS" and ok["publish"]["seq"] == 1 and ok["publish"]["duplicate"] is False


def test_a_retried_request_after_success_gets_409_with_the_same_publish(app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    client = app.test_client()
    first = post(client, f"/api/entries/{entry_id}/republish", {"version": 1}, tokens["operator"]).get_json()
    again = post(client, f"/api/entries/{entry_id}/republish", {"version": 1}, tokens["operator"])
    assert again.status_code == 409
    assert again.get_json()["publish"] == first["publish"]
    assert len(support.stream_messages(nats_server.url)) == 1


def test_the_republished_message_carries_the_original_payload_and_headers_except_msg_id_and_replay_of(
        app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    original = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "X-Tenant": "acme"}
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID], headers=original)
    response = post(app.test_client(), f"/api/entries/{entry_id}/republish", {"version": 1}, tokens["operator"])
    assert response.status_code == 200, response.get_json()
    msg_id = response.get_json()["publish"]["msg_id"]

    [message] = support.stream_messages(nats_server.url)
    assert message.subject == "orders.created"
    assert message.data == VALID
    assert message.headers == {**original, "Nats-Msg-Id": msg_id, "Dlq-Replay-Of": f"DLQ:{entry_id}"}
    assert msg_id == f"{support.msg_id_prefix(rt)}:DLQ:{entry_id}:e{entry_id}:v1"


def test_a_crash_after_the_intent_is_committed_ends_with_exactly_one_message_once_recovered(
        app, rt, nats_server, monkeypatch):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    crash_at(monkeypatch, "after_intent")
    with pytest.raises(SimulatedCrash):
        republish_entry(rt, entry_id, 1, actor="alice")
    assert [i.state for i in intents_of(rt, entry_id)] == ["pending"]
    assert support.stream_messages(nats_server.url) == []

    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    assert recovery.recover_pending(rt) == 1
    assert len(support.stream_messages(nats_server.url)) == 1
    assert entry_row(rt, entry_id).status == "republished"
    [record] = audit_of(rt, entry_id, "republish")
    assert record.actor == "alice" and record.publish_seq == 1 and json.loads(record.detail)["recovered"]


def test_a_crash_after_the_publish_before_the_commit_ends_with_exactly_one_message_once_recovered(
        app, rt, nats_server, monkeypatch):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    crash_at(monkeypatch, "after_publish")
    with pytest.raises(SimulatedCrash):
        republish_entry(rt, entry_id, 1, actor="alice")
    assert len(support.stream_messages(nats_server.url)) == 1
    assert [i.state for i in intents_of(rt, entry_id)] == ["pending"]

    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    assert recovery.recover_pending(rt) == 1
    assert len(support.stream_messages(nats_server.url)) == 1
    [intent] = intents_of(rt, entry_id)
    assert (intent.state, intent.seq, intent.duplicate) == ("published", 1, True)
    assert len(audit_of(rt, entry_id, "republish")) == 1


def test_a_recovery_after_the_duplicate_window_has_passed_still_publishes_once(app, rt, nats_server, monkeypatch):
    support.make_orders_stream(nats_server.url, duplicate_window=1.0)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    crash_at(monkeypatch, "after_publish")
    with pytest.raises(SimulatedCrash):
        republish_entry(rt, entry_id, 1, actor="alice")
    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    # Let the broker forget the msgId: a plain publish now would be stored a second time.
    threading.Event().wait(1.5)

    assert recovery.recover_pending(rt) == 1
    assert len(support.stream_messages(nats_server.url)) == 1
    [intent] = intents_of(rt, entry_id)
    assert (intent.state, intent.seq) == ("published", 1)


def test_a_republish_while_nats_is_down_returns_503_and_the_retry_after_it_is_back_publishes_once(
        app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    client = app.test_client()
    nats_server.kill()
    support.wait_for(lambda: not rt.bridge.state.connected, message="the bridge to notice the outage")

    down = post(client, f"/api/entries/{entry_id}/republish", {"version": 1}, tokens["operator"])
    assert down.status_code == 503
    assert "NATS" in down.get_json()["error"]
    assert tuple(entry_row(rt, entry_id)) == ("open", 1)
    assert [i.state for i in intents_of(rt, entry_id)] == ["failed"]

    nats_server.start()
    support.wait_for(lambda: rt.bridge.state.connected, timeout=20, message="the bridge to reconnect")
    retry = post(client, f"/api/entries/{entry_id}/republish", {"version": 1}, tokens["operator"])
    assert retry.status_code == 200, retry.get_json()
    assert len(support.stream_messages(nats_server.url)) == 1
    assert [i.msg_id for i in intents_of(rt, entry_id)] == [retry.get_json()["publish"]["msg_id"]]
    assert [a.action for a in audit_of(rt, entry_id)] == ["republish_failed", "republish"]


def test_a_publish_that_gets_no_answer_is_completed_later_with_the_same_msg_id(app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    client = app.test_client()
    with support.frozen(nats_server):  # the server hangs: the publish is sent, no answer comes
        hung = post(client, f"/api/entries/{entry_id}/republish", {"version": 1}, tokens["operator"])
    assert hung.status_code == 503
    assert "may still arrive" in hung.get_json()["error"]
    [intent] = intents_of(rt, entry_id)
    assert intent.state == "pending" and intent.error

    # Nothing else may happen to the entry until that publish is settled.
    blocked = post(client, f"/api/entries/{entry_id}/close", {"version": 1}, tokens["operator"])
    assert blocked.status_code == 409 and "waiting for NATS's answer" in blocked.get_json()["error"]
    assert tuple(entry_row(rt, entry_id)) == ("open", 1)
    # Once NATS answers again: the hang may have outlasted the probe's limit too, and until the
    # probe hears back a republish is a 503 "not reachable" (what the product says, rightly).
    support.wait_for(lambda: rt.bridge.state.connected, timeout=20, message="the bridge to hear NATS again")
    retry = post(client, f"/api/entries/{entry_id}/republish", {"version": 1}, tokens["operator"])
    assert retry.status_code == 200, retry.get_json()
    assert retry.get_json()["publish"]["duplicate"] is True
    assert len(support.stream_messages(nats_server.url)) == 1


# --- refusals ----------------------------------------------------------------------------------

def test_stale_versions_get_409_and_change_nothing(app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    client = app.test_client()
    closed = post(client, f"/api/entries/{entry_id}/close", {"version": 1, "note": "known issue"}, tokens["operator"])
    assert closed.status_code == 200 and closed.get_json()["entry"]["version"] == 2

    for action, body in (("republish", {"version": 1}), ("close", {"version": 1}), ("reopen", {"version": 1})):
        response = post(client, f"/api/entries/{entry_id}/{action}", body, tokens["operator"])
        assert response.status_code == 409, action
        assert response.get_json()["entry"]["version"] == 2
        assert "changed since you saw it" in response.get_json()["error"]
    assert tuple(entry_row(rt, entry_id)) == ("closed", 2)
    assert [a.action for a in audit_of(rt, entry_id)] == ["close"]
    assert support.stream_messages(nats_server.url) == []


def test_an_invalid_payload_needs_the_override_and_an_edited_one_is_sent_as_edited(app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [INVALID])
    client = app.test_client()
    refused = post(client, f"/api/entries/{entry_id}/republish", {"version": 1}, tokens["operator"])
    assert refused.status_code == 422
    assert refused.get_json()["schema_errors"][0]["message"] == "'customer_id' is a required property"
    assert tuple(entry_row(rt, entry_id)) == ("open", 1)

    edited = b'{"order_id": "o-2", "customer_id": "c-9"}'
    sent = post(client, f"/api/entries/{entry_id}/republish",
                {"version": 1, "payload_base64": base64.b64encode(edited).decode()}, tokens["operator"])
    assert sent.status_code == 200, sent.get_json()
    assert sent.get_json()["entry"]["payload_base64"] == base64.b64encode(INVALID).decode()  # the original stays
    assert [m.data for m in support.stream_messages(nats_server.url)] == [edited]
    assert json.loads(audit_of(rt, entry_id, "republish")[0].detail)["edited"] is True


def test_base64_wrapped_in_lines_as_rfc_2045_writes_it_is_read_and_anything_else_invalid_is_a_400(
        app, rt, nats_server, tokens):
    # Python's base64.encodebytes and the base64 command without -w0: a newline every 76
    # characters (and a reader skips spaces and CRLFs as well).
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [INVALID] * 4)
    client = app.test_client()
    edited = json.dumps({"order_id": "o-2", "customer_id": "c-9", "note": "x" * 200}).encode()
    wrapped = base64.encodebytes(edited).decode()
    assert "\n" in wrapped.rstrip("\n")
    spaced = " \t".join(wrapped.replace("\n", "\r\n").split("\r\n"))
    for entry_id, text in zip(ids, (wrapped, spaced)):
        sent = post(client, f"/api/entries/{entry_id}/republish", {"version": 1, "payload_base64": text},
                    tokens["operator"])
        assert sent.status_code == 200, sent.get_json()
    assert [m.data for m in support.stream_messages(nats_server.url)] == [edited, edited]
    # Not base64 stays a 400: a character outside the alphabet, and whitespace that is not ASCII.
    for entry_id, text in zip(ids[2:], ("not base64!", wrapped.replace("\n", "\u00a0", 1))):
        refused = post(client, f"/api/entries/{entry_id}/republish", {"version": 1, "payload_base64": text},
                       tokens["operator"])
        assert refused.status_code == 400
        assert refused.get_json()["error"] == "payload_base64 is not valid base64."
        assert tuple(entry_row(rt, entry_id)) == ("open", 1)


def test_an_invalid_payload_is_republished_with_the_override(app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [INVALID])
    forced = post(app.test_client(), f"/api/entries/{entry_id}/republish", {"version": 1, "force": True},
                  tokens["operator"])
    assert forced.status_code == 200
    assert [m.data for m in support.stream_messages(nats_server.url)] == [INVALID]
    assert json.loads(audit_of(rt, entry_id, "republish")[0].detail)["forced"] is True


@pytest.mark.parametrize("word", ["false", "0", "off", "No", False])
def test_force_false_written_any_way_does_not_republish_an_invalid_payload(app, rt, nats_server, tokens, word):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [INVALID])
    refused = post(app.test_client(), f"/api/entries/{entry_id}/republish", {"version": 1, "force": word},
                   tokens["operator"])
    assert refused.status_code == 422, refused.get_json()
    assert refused.get_json()["schema_errors"][0]["message"] == "'customer_id' is a required property"
    assert tuple(entry_row(rt, entry_id)) == ("open", 1)
    assert support.stream_messages(nats_server.url) == []


def test_force_that_is_not_a_yes_or_a_no_is_a_400_sentence_and_nothing_is_sent(app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [INVALID])
    response = post(app.test_client(), f"/api/entries/{entry_id}/republish", {"version": 1, "force": "maybe"},
                    tokens["operator"])
    assert response.status_code == 400
    assert response.get_json() == {"error": "force 'maybe' is not valid: use one of true, false, 1, 0, on, off, "
                                            "yes, no, or leave it out"}
    assert tuple(entry_row(rt, entry_id)) == ("open", 1)
    assert support.stream_messages(nats_server.url) == []


@pytest.mark.parametrize("path, body, field", [
    ("republish", {"version": 1, "force": True, "paylod_base64": "e30="}, "paylod_base64"),  # a typo
    ("republish", {"version": 1, "force": True, "payload": "{}"}, "payload"),  # not base64's name
    ("close", {"version": 1, "nte": "refunded by hand"}, "nte"),
    ("reopen", {"version": 1, "versoin": 1}, "versoin"),
])
def test_a_field_no_request_takes_is_a_400_sentence_and_nothing_changes(app, rt, nats_server, tokens, path, body,
                                                                          field):
    """Left out, a misspelt edited payload republished the original one, and a misspelt note
    closed the entry without it."""
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    response = post(app.test_client(), f"/api/entries/{entry_id}/{path}", body, tokens["operator"])
    assert response.status_code == 400
    assert response.get_json()["error"].startswith(f"{field!r} is not a field of this request: use version")
    assert tuple(entry_row(rt, entry_id)) == ("open", 1)
    assert support.stream_messages(nats_server.url) == []


LONE_SURROGATE = b'"\\ud800"'  # JSON's escape of half a UTF-16 pair: no text a database stores


@pytest.mark.parametrize("path, body, words", [
    ("entries/{id}/close", b'{"version": 1, "note": ' + LONE_SURROGATE + b"}", "holds a lone surrogate escape"),
    ("bulk", b'{"action": "close", "note": ' + LONE_SURROGATE + b', "ids": [{id}]}', "holds a lone surrogate escape"),
    ("bulk", b'{"action": "close", "filter": {"subject": ' + LONE_SURROGATE + b"}}", "holds a lone surrogate escape"),
    ("bulk", b'{"action": "patch", "ids": [{id}], "patch": [{"op": "add", "path": "/x", "value": '
     + LONE_SURROGATE + b"}]}", "holds a lone surrogate escape"),
    ("groups/1/notes", b'{"text": ' + LONE_SURROGATE + b"}", "holds a lone surrogate escape"),
    ("entries/{id}/close", b'{"version": 1, "note": "caf\xe9"}', "The request body is not UTF-8 (byte 27 is not)"),
    ("bulk", b'{"action": "close", "ids": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests deeper than 64 levels"),
    ("entries/{id}/close", b"", "it is empty"),
    ("entries/{id}/close", b'{"version": 1,', "The request body is not JSON: Expecting property name enclosed in double quotes: line 1"),
    # Which of two values counts JSON leaves to the reader: "version" 1 then 7 closed with 7.
    ("entries/{id}/close", b'{"version": 7, "note": "a", "version": 1}', "names 'version' twice in one object"),
    ("bulk", b'{"action": "close", "filter": {"subject": "a.*", "subject": "orders.*"}}', "names 'subject' twice"),
], ids=["close-note", "bulk-note", "bulk-filter", "patch-value", "group-note", "not-utf8", "deep", "empty", "cut",
        "twice", "twice-nested"])
def test_a_body_that_cannot_be_read_or_stored_is_a_400_sentence_and_nothing_changes(app, rt, nats_server, tokens,
                                                                                    path, body, words):
    """Each was a 500 (UnicodeEncodeError when the text was written, RecursionError while the
    body was read); a patch job with such a value was started, and its page was a 500 for good."""
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    response = app.test_client().post("/api/" + path.replace("{id}", str(entry_id)),
                                      data=body.replace(b"{id}", str(entry_id).encode()),
                                      headers={**support.bearer(tokens["operator"]), "Content-Type": "application/json"})
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert words in response.get_json()["error"]
    assert tuple(entry_row(rt, entry_id)) == ("open", 1)
    assert app.test_client().get("/api/jobs", headers=support.bearer(tokens["viewer"])).get_json()["jobs"] == []


NUL_REQUESTS = [
    ("get", "/api/entries?subject=orders.%00", None),
    ("get", "/api/summary?consumer=%00", None),
    ("get", "/api/export.csv?reason=a%00b", None),
    ("get", "/api/groups?assignee=%00", None),
    ("get", "/api/audit?actor=%00", None),
    ("post", "/api/entries/{id}/close", {"version": 1, "note": "a\u0000b"}),
    ("post", "/api/groups/{group}/notes", {"text": "a\u0000b"}),
    ("post", "/api/groups/{group}/state", {"version": 1, "state": "investigating", "assignee": "a\u0000b"}),
    ("post", "/api/bulk", {"action": "close", "ids": ["{id}"], "note": "a\u0000b"}),
    ("post", "/api/bulk", {"action": "close", "filter": {"subject": "orders.\u0000"}}),
]


@pytest.mark.both_databases
@pytest.mark.parametrize("method, path, body", NUL_REQUESTS, ids=[f"{m}-{p.split('?')[0]}-{i}"
                                                                  for i, (m, p, _) in enumerate(NUL_REQUESTS)])
def test_a_nul_character_in_a_parameter_or_a_body_is_a_400_sentence_and_nothing_changes(
        offline_app, rt, tokens, method, path, body):
    """PostgreSQL stores no NUL in text: each was a bare 500 there (and stored on SQLite)."""
    entry_id = support.dead_letter(offline_app, 1, Dlq_Reason="fatal")
    with rt.engine.connect() as conn:
        group = conn.execute(select(Entry.group_id).where(Entry.id == entry_id)).scalar_one()
    path = path.replace("{id}", str(entry_id)).replace("{group}", str(group))
    data = None if body is None else json.dumps(body).replace('"{id}"', str(entry_id))
    response = offline_app.test_client().open(path, method=method.upper(), data=data, headers={
        **support.bearer(tokens["operator"]), **({"Content-Type": "application/json"} if data else {})})
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    error = response.get_json()["error"]
    assert "holds a NUL character (U+0000)" in error
    if body is not None:  # it names the field, not the value (a note of thousands of characters)
        assert f"in {next(k for k, v in body.items() if 'u0000' in json.dumps(v))!r}:" in error and "a\\x00b" not in error
    assert tuple(entry_row(rt, entry_id)) == ("open", 1)
    assert offline_app.test_client().get("/api/jobs", headers=support.bearer(tokens["viewer"])).get_json()["jobs"] == []


def test_a_nul_in_a_form_field_is_a_400_but_an_edited_payload_may_hold_one(offline_app, rt, auth):
    entry_id = support.dead_letter(offline_app, 1, Dlq_Reason="fatal")
    client = auth.client("operator")
    token = support.csrf_token(client, f"/entries/{entry_id}")
    closed = client.post(f"/entries/{entry_id}/close", data={"csrf_token": token, "version": "1", "note": "a\0b"})
    assert closed.status_code == 400
    assert "holds a NUL character (U+0000) at 'note'" in html.unescape(closed.get_data(as_text=True))
    assert tuple(entry_row(rt, entry_id)) == ("open", 1)
    checked = client.post(f"/entries/{entry_id}/validate", data={"csrf_token": token, "payload": '{"a": 1}\0'})
    assert checked.status_code == 200, checked.get_data(as_text=True)[:300]


def test_a_number_of_any_size_in_a_body_stays_exact(app, rt, nats_server, tokens):
    """A patch's value is republished as sent: a reader of JSON that makes a float of an integer
    past 64 bits would send 1.2345678901234568e+29 for 123456789012345678901234567890."""
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    response = app.test_client().post(
        "/api/bulk", data=b'{"action": "patch", "ids": [%d], "only_valid": false, "patch": [{"op": "add", "path": '
        b'"/big", "value": 123456789012345678901234567890}]}' % entry_id,
        headers={**support.bearer(tokens["operator"]), "Content-Type": "application/json"})
    assert response.status_code == 202, response.get_data(as_text=True)
    job = app.test_client().get(f"/api/jobs/{response.get_json()['job']}",
                                headers=support.bearer(tokens["viewer"])).get_data(as_text=True)
    assert "123456789012345678901234567890" in job and "e+29" not in job


def test_a_body_not_sent_as_json_is_not_read_as_json(app, rt, nats_server, tokens):
    """A form a browser posts from another site is never taken for the API's JSON."""
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    response = app.test_client().post(f"/api/entries/{entry_id}/close", data=b'{"version": 1}',
                                      headers={**support.bearer(tokens["operator"]), "Content-Type": "text/plain"})
    assert response.status_code == 415 and "Content-Type: application/json" in response.get_json()["error"]
    assert tuple(entry_row(rt, entry_id)) == ("open", 1)


def test_a_field_another_request_takes_is_left_out_as_before(app, rt, nats_server, tokens):
    """One body for several requests (a client's version and note for each action) still works."""
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    client = app.test_client()
    assert post(client, f"/api/entries/{entry_id}/close", {"version": 1, "note": "n", "force": False},
                tokens["operator"]).status_code == 200
    assert post(client, f"/api/entries/{entry_id}/reopen", {"version": 2, "note": "n"},
                tokens["operator"]).status_code == 200


def test_a_subject_without_a_stream_is_refused_with_422_and_the_entry_stays_retriable(app, rt, nats_server, tokens):
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [b"{}"], subject="nowhere.created")
    client = app.test_client()
    refused = post(client, f"/api/entries/{entry_id}/republish", {"version": 1}, tokens["operator"])
    assert refused.status_code == 422
    assert "No stream stores subject nowhere.created" in refused.get_json()["error"]
    assert tuple(entry_row(rt, entry_id)) == ("open", 1)

    async def add_stream():
        nc = await nats.connect(nats_server.url)
        await nc.jetstream().add_stream(name="NOWHERE", subjects=["nowhere.>"])
        await nc.close()

    support.run(add_stream())
    assert post(client, f"/api/entries/{entry_id}/republish", {"version": 1}, tokens["operator"]).status_code == 200
    assert len(support.stream_messages(nats_server.url, "NOWHERE")) == 1


def test_an_entry_without_a_subject_cannot_be_republished(app, rt, nats_server, tokens):
    support.run(support.publish_many(nats_server.url, [("dlq.unknown", b"x", {"Dlq-Reason": "fatal"})]))
    support.wait_for(lambda: rt.store.get_entry(1))
    response = post(app.test_client(), "/api/entries/1/republish", {"version": 1}, tokens["operator"])
    assert response.status_code == 422 and "Dlq-Original-Subject" in response.get_json()["error"]


def test_requests_without_a_version_get_400_and_viewers_get_403(app, rt, nats_server, tokens):
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    client = app.test_client()
    assert post(client, f"/api/entries/{entry_id}/republish", {}, tokens["operator"]).status_code == 400
    assert post(client, f"/api/entries/{entry_id}/close", {"version": 1}, tokens["viewer"]).status_code == 403
    assert post(client, "/api/entries/999/close", {"version": 1}, tokens["operator"]).status_code == 404


# --- close, reopen, audit ----------------------------------------------------------------------

def test_close_and_reopen_are_audited_with_who_and_the_note(app, rt, nats_server, tokens):
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    client = app.test_client()
    closed = post(client, f"/api/entries/{entry_id}/close", {"version": 1, "note": "duplicate order"},
                  tokens["operator"]).get_json()["entry"]
    assert (closed["status"], closed["closed_by"], closed["close_note"]) == ("closed", "token:test-operator",
                                                                              "duplicate order")
    reopened = post(client, f"/api/entries/{entry_id}/reopen", {"version": 2}, tokens["operator"]).get_json()["entry"]
    assert (reopened["status"], reopened["version"], reopened["closed_by"]) == ("open", 3, None)

    audit = client.get(f"/api/audit?entry={entry_id}", headers=support.bearer(tokens["viewer"])).get_json()["actions"]
    assert [(a["action"], a["actor"], a["note"], a["version"]) for a in audit] == [
        ("reopen", "token:test-operator", None, 2), ("close", "token:test-operator", "duplicate order", 1)]
    assert client.delete("/api/audit", headers=support.bearer(tokens["admin"])).status_code == 405
    assert client.post("/api/audit", json={}, headers=support.bearer(tokens["admin"])).status_code == 405


def test_closing_with_delete_on_close_also_deletes_the_dlq_message(make_app, nats_server):
    application = make_app(online=True, delete_on_close=True)
    runtime = runtime_of(application)
    [entry_id] = support.dead_letter_orders(application, nats_server.url, [VALID])
    assert len(support.stream_messages(nats_server.url, "DLQ")) == 1
    outcome = close_entry(runtime, entry_id, 1, actor="alice", note="handled by hand")
    assert outcome.entry.status == "closed"
    assert support.stream_messages(nats_server.url, "DLQ") == []
    assert json.loads(audit_of(runtime, entry_id, "close")[0].detail) == {"dlq_delete": "deleted"}


# --- a republish that fails again --------------------------------------------------------------

def test_a_republished_message_that_fails_again_arrives_as_a_new_entry_linked_to_the_first(
        app, rt, nats_server, tokens):
    import asyncio

    from dlq_consumer import dead_letter

    support.make_orders_stream(nats_server.url)

    async def scenario():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        sub = await js.pull_subscribe("orders.created", durable="billing", stream="ORDERS",
                                      config=ConsumerConfig(max_deliver=1))

        async def fail_next():  # what a service's consumer does with a message it cannot handle
            [msg] = await sub.fetch(1, timeout=5)
            await dead_letter(js, msg, "fatal", error="still broken")
            await msg.term()

        try:
            await js.publish("orders.created", VALID, headers={"X-Tenant": "acme"})
            await fail_next()
            # The DLQ copy and the terminated advisory come by two followers in either order: an
            # entry made from the advisory first takes the copy later, a new version.
            first = await asyncio.to_thread(support.wait_for, lambda: (lambda e: e if e and e.dlq_seq else None)(
                rt.store.get_entry(1)))
            response = await asyncio.to_thread(post, app.test_client(), f"/api/entries/{first.id}/republish",
                                               {"version": first.version}, tokens["operator"])
            assert response.status_code == 200, response.get_json()
            await fail_next()
            return first
        finally:
            await nc.close()

    first = support.run(scenario())
    second = support.wait_for(lambda: (lambda e: e if e and e.dlq_seq else None)(rt.store.get_entry(2)),
                              message="the second dead letter's DLQ copy")
    assert second.replay_of == first.dlq_ref == "DLQ:1"
    assert [e.id for e in rt.store.replays_of(first.dlq_ref)] == [second.id]
    assert second.headers["X-Tenant"] == ["acme"]


# --- the pages ---------------------------------------------------------------------------------

def test_the_confirm_page_lists_the_consumers_that_will_receive_the_republish(app, rt, nats_server, auth):
    support.make_orders_stream(nats_server.url)

    async def consumers():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="billing", filter_subject="orders.created"))
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="shipping", filter_subject="orders.shipped"))
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="everything"))
        await nc.close()

    support.run(consumers())
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    page = auth.client("operator").get(f"/entries/{entry_id}/republish?version=1").get_data(as_text=True)
    assert "billing" in page and "everything" in page and "shipping" not in page
    assert "stored by stream <code>ORDERS</code>" in page


def test_a_stale_close_from_the_page_shows_what_changed(app, rt, nats_server, auth):
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    close_entry(rt, entry_id, 1, actor="bob", note="bob handled it")
    client = auth.client("operator")
    response = client.post(f"/entries/{entry_id}/close", data={
        "version": "1", "note": "me too", "csrf_token": support.csrf_token(client, f"/entries/{entry_id}/edit")})
    page = response.get_data(as_text=True)
    assert response.status_code == 409
    assert "You acted on version 1" in page and "now at version 2" in page
    assert "bob" in page and "bob handled it" in page
    assert tuple(entry_row(rt, entry_id)) == ("closed", 2)


def test_the_page_republish_redirects_to_the_entry_and_a_double_submit_shows_the_conflict(app, rt, nats_server, auth):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    client = auth.client("operator")
    form = {"version": "1", "csrf_token": support.csrf_token(client, f"/entries/{entry_id}/republish?version=1")}
    first = client.post(f"/entries/{entry_id}/republish", data=form)
    assert first.status_code == 303 and first.headers["Location"].endswith(f"/entries/{entry_id}")
    second = client.post(f"/entries/{entry_id}/republish", data=form)
    assert second.status_code == 409 and "already republished" in second.get_data(as_text=True)
    assert len(support.stream_messages(nats_server.url)) == 1


def test_the_editor_checks_the_payload_as_it_is_typed_and_shows_the_diff(app, rt, nats_server, auth):
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [INVALID])
    client = auth.client("operator")
    token = support.csrf_token(client, f"/entries/{entry_id}/edit")
    invalid = client.post(f"/entries/{entry_id}/validate", data={"payload": '{"order_id": 7}', "csrf_token": token},
                          headers={"HX-Request": "true"}).get_data(as_text=True)
    assert invalid.lstrip().startswith('<div id="payload-check"')
    assert "&#39;customer_id&#39; is a required property" in invalid and "/order_id" in invalid
    # A line diff of the pretty forms: the one field changed is one line out and one in.
    assert "-  &#34;order_id&#34;: &#34;o-2&#34;" in invalid and "+  &#34;order_id&#34;: 7" in invalid
    valid = client.post(f"/entries/{entry_id}/validate", data={
        "payload": '{"order_id": "o-2", "customer_id": "c"}', "csrf_token": token}).get_data(as_text=True)
    assert "It passes the current schema" in valid


def test_the_audit_page_shows_the_msg_id_and_the_brokers_answer(app, rt, nats_server, auth):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID])
    published = republish_entry(rt, entry_id, 1, actor="carol").publish
    page = auth.client("viewer").get("/audit").get_data(as_text=True)
    assert "carol" in page and published.msg_id in page and "ORDERS seq 1" in page
