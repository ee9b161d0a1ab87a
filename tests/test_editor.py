"""The payload editor: the pretty form it holds, the line diff, what it republishes, and how the
entry page tells an edit (its timeline and the validation of the payload last sent)."""

from __future__ import annotations

import base64
import gzip
import html
import json

import pytest
from sqlalchemy import select

from dlq_dashboard.db.models import Republish
from dlq_dashboard.runtime import runtime_of

from . import support

ORDER = {"order_id": "o-1", "customer_id": "c-42", "note": "café",
         "items": [{"sku": "gizmo", "qty": 2, "price": "12.50"}, {"sku": "widget", "qty": 1, "price": 3.10}]}
# One compact line, with a number written as "3.10" (the editor keeps numbers as written).
ORIGINAL = json.dumps(ORDER, ensure_ascii=False, separators=(",", ":")).replace("3.1", "3.10").encode()
PRETTY = json.dumps(ORDER, ensure_ascii=False, indent=2).replace("3.1", "3.10")
SCHEMA = {"x-subjects": ["orders.*"], "type": "object", "required": ["customer_id"],
          "properties": {"items": {"type": "array", "items": {"properties": {"price": {"type": "number"}}}}}}


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """The orders schema (prices are numbers) and a viewer mask over the customer."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, mask=("/customer_id",),
                                 schemas_dir=support.orders_schema_folder(tmp_path, SCHEMA))


def _text(response) -> str:
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    return html.unescape(response.get_data(as_text=True))


def _republish(client, entry_id: int, payload: str | None, force: bool = False):
    form = {"version": "1", "csrf_token": support.csrf_token(client, f"/entries/{entry_id}/edit")}
    if force:  # the original does not pass the schema (a price is a string)
        form["force"] = "on"
    if payload is not None:
        form.update(payload=payload, encoding="text")
    response = client.post(f"/entries/{entry_id}/republish", data=form)
    assert response.status_code == 303, response.get_data(as_text=True)[:800]


def test_the_editor_and_the_confirmation_show_the_payload_pretty_and_other_payloads_as_they_are(app):
    operator = support.logged_in(app, "operator")
    json_id = support.dead_letter(app, 1, payload=ORIGINAL)
    text_id = support.dead_letter(app, 2, payload=b"plain text, not {json")
    binary_id = support.dead_letter(app, 3, payload=b"\xff\x00\xfe")

    edit = _text(operator.get(f"/entries/{json_id}/edit"))
    assert f">{PRETTY}</textarea>" in edit.replace("\r\n", "\n")
    assert "Unchanged from the original" in edit
    confirm = _text(operator.get(f"/entries/{json_id}/republish"))
    assert f">{PRETTY}</pre>" in confirm
    assert ">plain text, not {json</textarea>" in _text(operator.get(f"/entries/{text_id}/edit"))
    binary = _text(operator.get(f"/entries/{binary_id}/edit"))
    assert ">/wD+</textarea>" in binary and "base64: the original is not UTF-8" in binary


def test_a_check_of_an_entry_gone_or_of_a_payload_too_large_answers_its_sentence_as_text(app):
    """The editor's check puts what it is told where its verdict was (static/app.js): an entry
    purged meanwhile was an HTML page there ("the dashboard answered 404"), no reason given."""
    operator = support.logged_in(app, "operator")
    entry_id = support.dead_letter(app, 1, payload=ORIGINAL)
    token = support.csrf_token(operator, f"/entries/{entry_id}/edit")
    gone = operator.post("/entries/99999/validate", data={"payload": "{}", "encoding": "text", "csrf_token": token},
                         headers={"HX-Request": "true"})
    assert (gone.status_code, gone.mimetype) == (404, "text/plain")
    assert gone.get_data(as_text=True) == "There is no entry 99999.\n"
    large = operator.post(f"/entries/{entry_id}/validate", headers={"HX-Request": "true"},
                          data={"payload": "x" * (17 * 2 ** 20), "encoding": "text", "csrf_token": token})
    assert (large.status_code, large.mimetype) == (413, "text/plain")
    assert large.get_data(as_text=True).startswith("The request's body is 17.0 MB; the dashboard takes at most 16 MB")


def test_a_one_field_change_is_one_line_out_and_one_in(app):
    operator = support.logged_in(app, "operator")
    entry_id = support.dead_letter(app, 1, payload=ORIGINAL)
    token = support.csrf_token(operator, f"/entries/{entry_id}/edit")
    edited = PRETTY.replace('"12.50"', "12.50")
    fragment = _text(operator.post(f"/entries/{entry_id}/validate", data={
        "payload": edited.replace("\n", "\r\n"), "encoding": "text", "csrf_token": token},
        headers={"HX-Request": "true"}))
    assert "It passes the current schema" in fragment
    lines = [line for line in fragment.splitlines() if line.startswith(('<span class="add">', '<span class="del">'))]
    assert lines == ['<span class="del">-      "price": "12.50"</span>', '<span class="add">+      "price": 12.50</span>']
    failing = _text(operator.post(f"/entries/{entry_id}/validate", data={
        "payload": PRETTY.replace('"c-42"', '"c-43"'), "encoding": "text", "csrf_token": token}))
    assert "'12.50' is not of type 'number'" in failing
    assert '-  "customer_id": "c-42",' in failing and '+  "customer_id": "c-43",' in failing


def test_an_unchanged_edit_republishes_the_original_bytes_and_an_edit_what_was_submitted(app, nats_server):
    support.make_orders_stream(nats_server.url)
    operator = support.logged_in(app, "operator")
    same_id = support.dead_letter(app, 1, payload=ORIGINAL)
    edited_id = support.dead_letter(app, 2, payload=ORIGINAL)
    # The pretty form as submitted, and the same document laid out otherwise: the original bytes.
    _republish(operator, same_id, PRETTY.replace("\n", "\r\n"), force=True)
    edited = PRETTY.replace('"12.50"', "12.50")
    _republish(operator, edited_id, edited.replace("\n", "\r\n"))
    sent = [m.data for m in support.stream_messages(nats_server.url)]
    assert sent == [ORIGINAL, edited.encode()]
    with runtime_of(app).engine.connect() as conn:
        rows = conn.execute(select(Republish.entry_id, Republish.edited, Republish.payload)
                            .order_by(Republish.id)).all()
    assert [(r.entry_id, r.edited, bytes(r.payload)) for r in rows] == [
        (same_id, False, ORIGINAL), (edited_id, True, edited.encode())]


def test_an_edit_of_a_json_payload_that_no_longer_parses_is_refused_even_with_the_override(app, nats_server):
    """A stray comma with the schema's override ticked went out, and came straight back as a dead
    letter ("payload is not valid JSON"). Text that was not JSON is still edited as text."""
    support.make_orders_stream(nats_server.url)
    operator = support.logged_in(app, "operator")
    entry_id = support.dead_letter(app, 1, payload=ORIGINAL)
    form = {"version": "1", "force": "on", "payload": '{"order_id": "o-1", "customer_id": "c-42",,}',
            "encoding": "text", "csrf_token": support.csrf_token(operator, f"/entries/{entry_id}/edit")}
    refused = operator.post(f"/entries/{entry_id}/republish", data=form)
    assert refused.status_code == 400
    said = html.unescape(refused.get_data(as_text=True))
    assert "The edited payload is not JSON (Expecting property name enclosed in double quotes: line 1 column" \
        in said and "the original was. Nothing was republished" in said
    # The editor again, with the text as typed: a page of its own dropped the edit.
    assert '<textarea' in said and '{"order_id": "o-1", "customer_id": "c-42",,}</textarea>' in said
    assert support.stream_messages(nats_server.url) == []
    text_id = support.dead_letter(app, 2, payload=b"order o-1 for c-42")
    _republish(operator, text_id, "order o-1 for c-43", force=True)
    assert [m.data for m in support.stream_messages(nats_server.url)] == [b"order o-1 for c-43"]


@pytest.mark.both_databases
def test_the_entry_page_tells_the_edit_and_validates_the_payload_last_sent(app, nats_server):
    support.make_orders_stream(nats_server.url)
    operator = support.logged_in(app, "operator")
    fixed_id = support.dead_letter(app, 1, payload=ORIGINAL)
    plain_id = support.dead_letter(app, 2, payload=ORIGINAL)
    fixed = PRETTY.replace('"12.50"', "12.50").replace('"c-42"', '"c-77"')
    _republish(operator, fixed_id, fixed)
    _republish(operator, plain_id, None, force=True)

    page = _text(operator.get(f"/entries/{fixed_id}"))
    timeline = page[page.index('id="timeline-title"'):]
    assert "Edited and republished to orders.created" in timeline
    assert '<span class="del">-      "price": "12.50"</span>' in timeline
    assert '<span class="add">+      "price": 12.50</span>' in timeline
    assert '<span class="add">+  "customer_id": "c-77",</span>' in timeline
    assert f'<pre class="code payload-pretty" tabindex="0">{fixed}</pre>' in timeline
    why = page[page.index('id="why-title"'):page.index('id="headers-title"')]
    assert "The payload last sent, edited by operator-user at" in why
    assert "Valid against <code>orders.json</code>" in why
    # The original's verdict is kept below.
    original = why[why.index("The original payload against the current schema"):]
    assert "is not of type" in original and "/items/0/price" in original

    plain = _text(operator.get(f"/entries/{plain_id}"))
    assert "The payload last sent is the original, republished by operator-user" in plain
    assert "Edited and republished" not in plain and "The payload sent" not in plain
    assert "Invalid against <code>orders.json</code>" in plain

    # The page's JSON twin: the payload last sent and the verdict on it.
    sent = operator.get(f"/api/entries/{fixed_id}").get_json()["last_sent"]
    assert base64.b64decode(sent.pop("payload_base64")) == fixed.encode()
    assert sent.pop("at") and sent == {"actor": "operator-user", "edited": True, "msg_id": f"{support.msg_id_prefix(app)}:DLQ:1:e{fixed_id}:v1",
                                       "job_id": None, "hidden": False, "schema": "orders.json", "valid": True,
                                       "errors": [], "error": None}
    plain_sent = operator.get(f"/api/entries/{plain_id}").get_json()["last_sent"]
    assert plain_sent["edited"] is False and plain_sent["valid"] is False
    assert plain_sent["errors"][0]["path"] == "/items/0/price"
    unsent = support.dead_letter(app, 3, payload=ORIGINAL)
    assert operator.get(f"/api/entries/{unsent}").get_json()["last_sent"] is None

    # A viewer sees the edit through DLQ_MASK: the customer is hidden in the diff and the payload sent.
    viewer = _text(support.logged_in(app, "viewer").get(f"/entries/{fixed_id}"))
    seen = viewer[viewer.index('id="timeline-title"'):]
    assert "c-77" not in viewer and "c-42" not in viewer
    # (masking.py writes the masked document again, numbers as Python writes them: 12.50 is 12.5)
    assert '"customer_id": "•••"' in seen and '<span class="add">+      "price": 12.5</span>' in seen
    assert "The payload last sent, edited by operator-user" in viewer and "Valid against" in viewer
    as_json = support.logged_in(app, "viewer").get(f"/api/entries/{fixed_id}").get_json()["last_sent"]
    assert json.loads(base64.b64decode(as_json["payload_base64"]))["customer_id"] == "•••"


def test_a_viewer_does_not_see_an_edited_payload_the_mask_cannot_pick_fields_out_of(app, nats_server):
    from dlq_dashboard.actions.republish import republish_entry

    support.make_orders_stream(nats_server.url)
    entry_id = support.dead_letter(app, 1, payload=b"customer c-42, not JSON")
    republish_entry(runtime_of(app), entry_id, 1, actor="carol", payload=b"customer c-43, still not JSON",
                    force=True)
    operator = _text(support.logged_in(app, "operator").get(f"/entries/{entry_id}"))
    assert "customer c-43, still not JSON</pre>" in operator and "+customer c-43, still not JSON" in operator
    viewer = _text(support.logged_in(app, "viewer").get(f"/entries/{entry_id}"))
    assert "c-43" not in viewer and "c-42" not in viewer
    assert "The payload sent is hidden from viewers (DLQ_MASK)." in viewer
    assert "Not shown: the payload sent is hidden from viewers." in viewer


def test_gzip_bytes_are_edited_decompressed_and_republished_once_as_the_text(app, nats_server):
    """A producer that compresses without a header saying so: the consumer could not read the
    payload, the dashboard could not fix it. The editor opens it decompressed, and what it
    republishes is the text (with no header that would make it gzip again)."""
    import gzip

    support.make_orders_stream(nats_server.url)
    fixed = ORDER | {"items": [{"sku": "gizmo", "qty": 2, "price": 12.50}]}
    document = json.dumps(fixed, ensure_ascii=False).encode()
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [gzip.compress(document)])
    operator = support.logged_in(app, "operator")
    page = _text(operator.get(f"/entries/{entry_id}"))
    assert "Edit and republish (or Repair by schema, for many) sends it decompressed." in page  # Republish's reason
    assert 'data-action="edit" data-needs-nats' in page  # Edit is offered
    edit = _text(operator.get(f"/entries/{entry_id}/edit"))
    pretty = json.dumps(fixed, ensure_ascii=False, indent=2)
    assert f">{pretty}</textarea>" in edit.replace("\r\n", "\n") and "Payload (decompressed)" in edit
    assert "Unchanged from the original decompressed: that text is republished" in edit
    assert "republishes it as it was decompressed" in edit and "republishes the original bytes" not in edit
    assert "It passes the current schema" in edit
    _republish(operator, entry_id, pretty.replace("\n", "\r\n"))
    again = operator.post(f"/entries/{entry_id}/republish", data={
        "version": "1", "payload": pretty, "encoding": "text",
        "csrf_token": support.csrf_token(operator, f"/entries/{entry_id}")})
    assert again.status_code == 409  # the version seen is gone: nothing sent twice
    [sent] = support.stream_messages(nats_server.url)
    assert sent.data == document and "Content-Encoding" not in (sent.headers or {})
    with runtime_of(app).engine.connect() as conn:
        [republish] = conn.execute(select(Republish.payload, Republish.edited)).all()
    assert (bytes(republish.payload), republish.edited) == (document, True)


def test_gzip_a_header_declares_is_judged_decompressed_and_republished_as_stored(app, nats_server, tokens):
    """A payload whose Content-Encoding says gzip is read by its consumer decompressed: the
    schema judges it so (page, JSON, the republish, a bulk "only those that pass"), and a
    republish sends the stored bytes with the header. The editor does not compress again."""
    from dlq_dashboard.actions.bulk import jobs

    support.make_orders_stream(nats_server.url)
    fixed = json.dumps(ORDER | {"items": [{"sku": "gizmo", "qty": 2, "price": 12.5}]}).encode()
    stored = gzip.compress(fixed)
    passes, fails = support.dead_letter_orders(app, nats_server.url, [stored, gzip.compress(ORIGINAL)],
                                               headers={"Content-Encoding": "gzip"})
    operator = support.logged_in(app, "operator")
    page = _text(operator.get(f"/entries/{passes}"))
    assert "Valid against <code>orders.json</code> now" in page and "Republish is not possible" not in page
    assert "Edit and republish is not possible: The payload of entry" in page
    assert "it is read and validated decompressed but not edited here" in page
    verdict = operator.get(f"/api/entries/{fails}").get_json()["current_schema"]
    assert verdict["valid"] is False and [e["path"] for e in verdict["errors"]] == ["/items/0/price"]
    assert verdict["decompressed"] is None
    edit = _text(operator.get(f"/entries/{passes}/edit"))
    assert "Republish it as it is (its Content-Encoding goes with it)" in edit and "Payload (decompressed)" not in edit
    assert '<button type="submit" disabled aria-describedby="refusal"' in edit
    rt = runtime_of(app)
    selected, summary = jobs.select_items(rt, ids=[passes, fails], only_valid=True)
    assert list(selected.ids) == [passes] and summary["left_out_invalid"] == 1

    refused = app.test_client().post(f"/api/entries/{fails}/republish", json={"version": 1},
                                     headers=support.bearer(tokens["operator"]))
    assert refused.status_code == 422 and "needs the override" in refused.get_json()["error"]
    _republish(operator, passes, None)
    [sent] = support.stream_messages(nats_server.url)
    assert sent.data == stored and sent.headers["Content-Encoding"] == "gzip"
    last = operator.get(f"/api/entries/{passes}").get_json()["last_sent"]
    assert (last["edited"], last["valid"], last["errors"]) == (False, True, [])


@pytest.mark.parametrize("encoding, payload", [("gzip", gzip.compress(b"[" * 300_000 + b"]" * 300_000, mtime=0)),
                                               ("br", b"\x1b\x07\x00\xf8")], ids=["gzip", "br"])
def test_a_declared_compressed_payload_not_read_here_is_not_validated_rather_than_not_json(app, encoding, payload):
    """Past 256 KiB decompressed (or in an encoding not read here), its verdict said "payload is
    not valid JSON: 'utf-8' codec can't decode byte 0x8b", as if no header had declared it."""
    entry_id = support.dead_letter(app, 1, payload=payload, Content_Encoding=encoding)
    verdict = support.logged_in(app, "operator").get(f"/api/entries/{entry_id}").get_json()["current_schema"]
    assert verdict["valid"] is None and verdict["errors"] == []
    assert verdict["error"].startswith(f"Not validated: the payload is compressed (Content-Encoding: {encoding})")


def test_a_close_refused_because_the_entry_changed_shows_the_note_not_saved(app):
    """Two people close one entry: the second's 409 page showed the first's change and dropped the
    note the second had typed."""
    operator = support.logged_in(app, "operator")
    entry_id = support.dead_letter(app, 1, payload=ORIGINAL)
    token = support.csrf_token(operator, f"/entries/{entry_id}")
    first = {"version": "1", "csrf_token": token, "note": "done by ann"}
    assert operator.post(f"/entries/{entry_id}/close", data=first).status_code == 303
    note = "customer <b>C-42</b> called: refund sent, do not republish"
    refused = operator.post(f"/entries/{entry_id}/close", data={**first, "note": note})
    text = refused.get_data(as_text=True)
    assert refused.status_code == 409 and "<h2>Your note, not saved</h2>" in text
    assert note in html.unescape(text) and "<b>C-42</b>" not in text  # shown, as text


def test_an_edit_refused_because_the_entry_changed_shows_the_edit_not_sent(app, nats_server):
    """The conflict page offered only "Back to entry N as it is now": the edit was lost."""
    operator = support.logged_in(app, "operator")
    entry_id = support.dead_letter(app, 1, payload=ORIGINAL)
    token = support.csrf_token(operator, f"/entries/{entry_id}/edit")
    assert operator.post(f"/entries/{entry_id}/close", data={"version": "1", "csrf_token": token}).status_code == 303
    edit = '{"order_id": "o-1", "customer_id": "c-43 <b>"}'
    refused = operator.post(f"/entries/{entry_id}/republish", data={"version": "1", "payload": edit, "encoding": "text",
                                                                    "csrf_token": token})
    text = refused.get_data(as_text=True)
    assert refused.status_code == 409 and "<h2>Your edit, not sent</h2>" in text
    assert edit in html.unescape(text) and "c-43 <b>" not in text  # shown, as text
    assert f'href="/entries/{entry_id}/edit">Edit entry {entry_id} as it is now</a>' in text


@pytest.mark.both_databases
@pytest.mark.parametrize("payload", [
    b'{"s":"\\ud800"}',
    b'{"\\udfff": 1, "customer_id": "c-\\uDC00"}',
    b'{"customer_id": "c", "items": [{"price": "\\ud800"}], "pair": "\\ud83d\\ude00"}',
], ids=["value", "key", "quoted-by-the-schema"])
def test_a_payload_holding_half_a_utf16_pair_is_shown_as_written_and_its_pages_work(app, nats_server, payload):
    """JSON's "\\ud800" without its other half is read as a character no UTF-8 page holds: the
    entry's page, its editor and its confirmation answered 500 to everyone (D2)."""
    support.make_orders_stream(nats_server.url)
    entry_id = support.dead_letter(app, 1, payload=payload)
    written = payload.decode()
    viewer = support.logged_in(app, "viewer")
    assert "half of a UTF-16 pair, which is no character: shown as written" in _text(viewer.get(f"/entries/{entry_id}"))
    assert viewer.get(f"/api/entries/{entry_id}").status_code == 200
    operator = support.logged_in(app, "operator")
    page = _text(operator.get(f"/entries/{entry_id}"))
    assert f"<code>{written}</code></pre>" in page and "shown as written" in page
    if b"price" in payload:  # the schema's message quotes the value: as its escape
        assert "'\\ud800' is not of type 'number'" in page
    assert f">{written}</textarea>" in _text(operator.get(f"/entries/{entry_id}/edit"))
    assert f">{written}</pre>" in _text(operator.get(f"/entries/{entry_id}/republish"))
    form = {"payload": written, "encoding": "text", "csrf_token": support.csrf_token(operator, f"/entries/{entry_id}/edit")}
    check = _text(operator.post(f"/entries/{entry_id}/validate", data=form))
    assert "Unchanged from the original" in check
    # The text as the editor holds it is the payload: its bytes go out as they were.
    _republish(operator, entry_id, written, force=True)
    assert [m.data for m in support.stream_messages(nats_server.url)] == [payload]
    assert _text(operator.get("/")).count(f"/entries/{entry_id}") >= 1


def test_only_the_forms_that_carry_a_payload_or_a_patch_take_a_field_past_500000_bytes(app):
    """Every form took a field as large as a body (16 MB), though only the editor's and a bulk
    patch's need it: a note, a filter or a name of 16 MB was read into memory whole."""
    operator = support.logged_in(app, "operator")
    entry_id = support.dead_letter(app, 1, payload=ORIGINAL)
    token = support.csrf_token(operator, f"/entries/{entry_id}/edit")
    big = "x" * 600_000
    checked = operator.post(f"/entries/{entry_id}/validate", headers={"HX-Request": "true"},
                            data={"payload": f'{{"note": "{big}"}}', "encoding": "text", "csrf_token": token})
    assert checked.status_code == 200, checked.get_data(as_text=True)[:300]
    noted = operator.post(f"/entries/{entry_id}/close", data={"version": "1", "note": big, "csrf_token": token})
    assert noted.status_code == 413
    assert "A field of this form is larger than the 500,000 bytes it takes" in noted.get_data(as_text=True)
    assert runtime_of(app).store.get_entry(entry_id).status == "open"  # nothing was done


def test_a_binary_payload_edited_as_base64_in_lines_is_read_as_its_bytes(app):
    # The editor's base64 pasted from a tool that wraps it every 76 characters (or typed with
    # spaces): the check reads the bytes, as the republish does; a character outside base64
    # is still "not valid base64".
    operator = support.logged_in(app, "operator")
    original = bytes(range(256)) * 2
    entry_id = support.dead_letter(app, 1, payload=original)
    token = support.csrf_token(operator, f"/entries/{entry_id}/edit")

    def check(text: str) -> str:
        return _text(operator.post(f"/entries/{entry_id}/validate", headers={"HX-Request": "true"},
                                   data={"payload": text, "encoding": "base64", "csrf_token": token}))

    wrapped = base64.encodebytes(original).decode().replace("\n", "\r\n")
    assert wrapped.count("\r\n") > 5
    assert "not valid base64" not in check(wrapped) and "not valid base64" not in check(" " + wrapped + " ")
    assert "not valid base64" in check(wrapped.replace("\r\n", "!", 1))
