"""POST /api/entries/<id>/republish {"payload_base64": ""} published a 0-byte message on the
original subject (the history saying edited, payload ''), where the command line refuses an empty
--payload-file. An empty edited payload is refused where every republish is decided
(decisions.republish_refusal): the API answers 422 with the sentence, the editor shows the form
again with its own (errors.EDITOR_EMPTY) and no schema verdict, nothing is sent and the entry stays as it was."""

from __future__ import annotations

import html

import pytest

from dlq_dashboard.actions.errors import EDITOR_EMPTY
from dlq_dashboard.runtime import runtime_of

from . import support

SENTENCE = "is empty; nothing was republished. Send the payload to republish, or none to republish the original."


def _claims(app) -> int:
    with runtime_of(app).engine.connect() as conn:
        return conn.exec_driver_sql("SELECT COUNT(*) FROM republishes").scalar_one()


@pytest.mark.parametrize("encoded", ["", " \n"])
def test_the_api_refuses_an_empty_edited_payload_and_sends_nothing(app, nats_server, tokens, encoded):
    support.make_orders_stream(nats_server.url)
    entry_id = support.dead_letter(app, 1, payload=b'{"order_id": "o-1"}')
    client, headers = app.test_client(), support.bearer(tokens["operator"])
    refused = client.post(f"/api/entries/{entry_id}/republish", json={"version": 1, "payload_base64": encoded},
                          headers=headers)
    assert refused.status_code == 422, refused.get_data(as_text=True)
    assert refused.get_json()["error"] == f"The edited payload of entry {entry_id} {SENTENCE}"
    assert support.stream_messages(nats_server.url) == [] and _claims(app) == 0
    assert runtime_of(app).store.get_entry(entry_id).version == 1
    # The original, asked for as the refusal says, is republished at the version seen.
    sent = client.post(f"/api/entries/{entry_id}/republish", json={"version": 1}, headers=headers)
    assert sent.status_code == 200, sent.get_data(as_text=True)
    assert [m.data for m in support.stream_messages(nats_server.url)] == [b'{"order_id": "o-1"}']


@pytest.mark.parametrize("payload, encoding", [(b'{"order_id": "o-1"}', "text"), (b"plain text", "text"),
                                               (b"\xff\xfe", "base64")])
def test_the_editor_emptied_shows_the_form_again_in_its_own_words(settings, make_app, nats_server, tmp_path,
                                                                  payload, encoding):
    app = make_app(settings=settings, online=True, schemas_dir=support.orders_schema_folder(tmp_path))
    support.make_orders_stream(nats_server.url)
    entry_id = support.dead_letter(app, 1, payload=payload)
    operator = support.logged_in(app, "operator")
    token = support.csrf_token(operator, f"/entries/{entry_id}/edit")
    answer = operator.post(f"/entries/{entry_id}/republish", data={
        "version": "1", "payload": "", "encoding": encoding, "csrf_token": token})
    page = html.unescape(answer.get_data(as_text=True))
    assert answer.status_code == 422, page
    # Not the API's words ("send ... none"), nor a schema's verdict on an empty textarea.
    assert EDITOR_EMPTY in page and "<textarea" in page
    assert SENTENCE not in page and "not valid JSON" not in page and "does not pass the current schema" not in page
    assert "The payload is empty: there is nothing to check or to send." in page
    assert support.stream_messages(nats_server.url) == [] and _claims(app) == 0
    # The check as the operator empties the textarea says the same.
    checked = operator.post(f"/entries/{entry_id}/validate", data={"payload": "", "encoding": encoding,
                                                                   "csrf_token": token})
    assert checked.status_code == 200 and "not valid JSON" not in checked.get_data(as_text=True)
    assert "The payload is empty" in html.unescape(checked.get_data(as_text=True))


def test_the_command_line_still_refuses_an_empty_payload_file(app, nats_server, tmp_path):
    support.make_orders_stream(nats_server.url)
    entry_id = support.dead_letter(app, 1, payload=b'{"order_id": "o-1"}')
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    ran = app.test_cli_runner().invoke(args=["entries", "republish", str(entry_id), "--payload-file", str(empty)])
    assert ran.exit_code == 2, ran.output
    assert "is empty; nothing was republished." in ran.output
    assert support.stream_messages(nats_server.url) == [] and _claims(app) == 0
