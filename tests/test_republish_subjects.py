"""A dead letter's Dlq-Original-Subject is written by whoever can publish to the DLQ: a republish
goes only to a subject a message can be published to. One in NATS's reserved namespace
($JS.API...) would make Republish a command to the server (it deleted a stream), a wildcard
would be stored as a literal subject, and a dead-letter subject would dead-letter it again."""

from __future__ import annotations

import re
from html import unescape

import pytest

from dlq_dashboard.actions import publishing
from dlq_dashboard.actions.bulk import refusals
from dlq_dashboard.actions.decisions import republish_refusal, write_claims
from dlq_dashboard.actions.errors import Refused
from dlq_dashboard.actions.intents import Intent
from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.times import utcnow

from . import support

RESERVED = "$JS.API.STREAM.DELETE.JUNK"


@pytest.mark.parametrize("subject, words", [
    (RESERVED, "is in NATS's reserved namespace"),
    ("$SYS.REQ.SERVER.PING", "is in NATS's reserved namespace"),
    ("orders.*", "holds a wildcard"),
    ("orders.>", "holds a wildcard"),
    ("orders..created", "is not a subject a message can be published to"),
    ("orders.a b", "is not a subject a message can be published to"),
    ("orders.\tcreated", "is not a subject a message can be published to"),
])
def test_a_subject_no_message_can_be_republished_to_is_refused_with_why(subject, words):
    entry = {"id": 7, "status": "open", "original_subject": subject, "payload": b"{}", "payload_available": True,
             "headers": "{}"}
    assert words in republish_refusal(entry)
    assert publishing.subject_refusal("orders.created") is None
    assert publishing.subject_refusal("$") is not None


def test_republish_never_sends_a_command_to_the_server_nor_a_message_to_a_wildcard_or_the_dlq(
        app, rt, nats_server, tokens):
    support.make_stream(nats_server.url, "JUNK", ["junk.>"])
    support.make_orders_stream(nats_server.url)
    support.run(support.publish_many(nats_server.url, [("junk.a", b"keep me", None)]))
    reserved = support.dead_letter(app, 1, subject=RESERVED, Dlq_Reason="fatal")
    wildcard = support.dead_letter(app, 2, subject="orders.>", Dlq_Reason="fatal")
    looping = support.dead_letter(app, 3, subject="dlq.orders.created", Dlq_Reason="fatal")
    fine = support.dead_letter(app, 4, subject="orders.created", Dlq_Reason="fatal")
    api = app.test_client()
    operator = support.bearer(tokens["operator"])
    for entry_id, words in ((reserved, "reserved namespace"), (wildcard, "holds a wildcard"),
                            (looping, "is a dead-letter subject (DLQ_SUBJECTS)")):
        answer = api.post(f"/api/entries/{entry_id}/republish", json={"version": 1}, headers=operator)
        assert answer.status_code == 422 and words in answer.get_json()["error"], answer.get_json()
        assert rt.store.get_entry(entry_id).status == "open"
        # The page's Republish and Edit are disabled with the same sentence.
        page = unescape(support.logged_in(app, "operator").get(f"/entries/{entry_id}").get_data(as_text=True))
        bar = page.split('class="action-bar"')[1].split("</section>")[0]
        assert re.search(r'<button type="submit" disabled aria-describedby="republish-reason"', bar)
        assert words in bar
    # Nothing reached NATS: the stream a command would have deleted holds its message.
    assert [m.data for m in support.stream_messages(nats_server.url, "JUNK")] == [b"keep me"]
    assert support.stream_messages(nats_server.url) == []
    # A bulk republish's preview counts them as refused, and the job fails them and sends the rest.
    preview = refusals.republish_refusals(rt, [reserved, wildcard, looping, fine])
    assert preview["refused"] == 3 and preview["with_override"] == 3, preview
    assert api.post(f"/api/entries/{fine}/republish", json={"version": 1}, headers=operator).status_code == 200
    assert [m.subject for m in support.stream_messages(nats_server.url)] == ["orders.created"]


def test_a_pending_intent_to_a_refused_subject_is_failed_not_published(app, rt, nats_server):
    """An intent written before such subjects were refused is failed when completed, not sent."""
    support.make_stream(nats_server.url, "JUNK", ["junk.>"])
    entry_id = support.dead_letter(app, 1, subject=RESERVED, Dlq_Reason="fatal")
    intent = Intent(id=None, entry_id=entry_id, version=1, msg_id="dlq-dashboard:DLQ:e1:1:v1", subject=RESERVED,
                    payload=b"{}", headers={}, edited=False, actor="test", job_id=None, created_at=utcnow(),
                    source="default")
    with write_transaction(rt.engine) as conn:
        write_claims(conn, [("new", intent)])
    with pytest.raises(Refused, match="reserved namespace"):
        publishing.publish_intent(rt, intent)
    # The stream the command names is still there (stream_info would raise), and the intent failed.
    assert support.stream_messages(nats_server.url, "JUNK") == []
    [stored] = rt.store.republishes_of(entry_id)
    assert stored["state"] == "failed" and "reserved namespace" in stored["error"]
