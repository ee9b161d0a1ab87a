"""The entry page: previous and next within the list it was opened from, its failure group, one
action bar whose Republish says why it cannot work, and a republish that failed again."""

from __future__ import annotations

import gzip
import json
import re
from html import unescape

import jsonschema
import pytest

from dlq_dashboard.actions.decisions import no_stream_sentence, republish_refusal
from dlq_dashboard.db.models import Entry
from dlq_dashboard.masking import PAYLOAD_REPEATED

from . import support


def neighbours(html: str) -> tuple[int | None, int | None]:
    found = {}
    for rel in ("prev", "next"):
        m = re.search(rf'rel="{rel}" href="/entries/(\d+)', html)
        found[rel] = int(m.group(1)) if m else None
    return found["prev"], found["next"]


@pytest.mark.both_databases
def test_previous_and_next_follow_the_lists_filter_search_and_order(offline_app):
    subjects = ["orders.created", "payments.made", "orders.created", "orders.shipped", "payments.made",
                "orders.created"]
    ids = [support.dead_letter(offline_app, seq, subject, payload=b'{"note": "%s parcel"}' % (
        b"fragile" if seq % 2 else b"heavy"), Dlq_Reason="fatal", Dlq_Error=f"failure {seq}")
           for seq, subject in enumerate(subjects, start=1)]
    viewer = support.logged_in(offline_app, "viewer")

    # No list context: every entry, newest first.
    html = viewer.get(f"/entries/{ids[2]}").get_data(as_text=True)
    assert neighbours(html) == (ids[3], ids[1])
    assert 'href="/" data-back-to-list' in html
    newest = viewer.get(f"/entries/{ids[5]}").get_data(as_text=True)
    assert neighbours(newest) == (None, ids[4]) and 'aria-disabled="true">‹ Previous' in newest

    # Opened from the list filtered by a subject wildcard: the payments entries are not in it.
    orders = [i for i, s in zip(ids, subjects) if s.startswith("orders.")]
    walk, at = [], orders[-1]
    while at is not None:
        walk.append(at)
        html = viewer.get(f"/entries/{at}?subject=orders.*").get_data(as_text=True)
        assert "subject=orders.*" in html.replace("%2A", "*")
        at = neighbours(html)[1]
    assert walk == orders[::-1]
    html = viewer.get(f"/entries/{orders[1]}?subject=orders.*").get_data(as_text=True)
    back = re.search(r'class="back" href="([^"]+)"', html).group(1)
    assert back.replace("%2A", "*") == "/?subject=orders.*"

    # A search (the full-text index on SQLite, tsvector on PostgreSQL) and a status together.
    fragile = [ids[0], ids[2], ids[4]]  # the odd sequence numbers
    html = viewer.get(f"/entries/{fragile[1]}?q=fragile&status=open").get_data(as_text=True)
    assert neighbours(html) == (fragile[2], fragile[0])
    assert 'href="/?status=open&amp;q=fragile" data-back-to-list' in html or \
        'href="/?q=fragile&amp;status=open" data-back-to-list' in html
    # The list's links carry the filters to the entry page.
    listing = viewer.get("/?q=fragile&status=open").get_data(as_text=True)
    assert re.search(rf'href="/entries/{fragile[2]}\?[^"]*q=fragile', listing)
    # A filter that does not parse is a 400 with its sentence, as on the list itself.
    lost = viewer.get(f"/entries/{ids[2]}?status=lost")
    assert lost.status_code == 400 and "status &#39;lost&#39; is not valid" in lost.get_data(as_text=True)


@pytest.mark.both_databases
def test_the_entry_page_links_its_failure_group(offline_app, rt):
    entry = support.dead_letter(offline_app, 1, Dlq_Reason="fatal", Dlq_Error="order 7 not found")
    with rt.engine.connect() as conn:
        group = conn.execute(Entry.__table__.select().where(Entry.id == entry)).first().group_id
    html = support.logged_in(offline_app, "viewer").get(f"/entries/{entry}").get_data(as_text=True)
    assert f'href="/?group={group}" data-group="{group}">order &lt;id&gt; not found</a>' in html


def test_republish_is_disabled_with_the_reason_the_request_would_be_refused_with(app, rt, nats_server, tokens,
                                                                                   monkeypatch):
    from dlq_dashboard.actions import streams

    monkeypatch.setattr(streams, "LOOKUP_TIMEOUT", 10.0)  # NATS's answer, however loaded the machine
    support.make_orders_stream(nats_server.url)
    # Declared in an encoding the dashboard does not read (gzip and deflate it does: test_editor.py).
    zipped = support.dead_letter(app, 1, payload=b"\x1b\x07\x00\xf8", stream="DLQT", Content_Encoding="br")
    magic = support.dead_letter(app, 2, payload=gzip.compress(b'{"a": 2}'), stream="DLQT")
    nowhere = support.dead_letter(app, 3, subject=None, stream="DLQT")
    unstored = support.dead_letter(app, 4, subject="payments.made", stream="DLQT")
    fine = support.dead_letter(app, 5, payload=b'{"customer_id": "c"}', stream="DLQT")
    operator = support.logged_in(app, "operator")
    api = app.test_client()

    def refusal(entry_id, **kwargs):
        return republish_refusal(rt.store.get_entry(entry_id, with_history=False), **kwargs)

    assert "compressed (Content-Encoding: br): it cannot be validated or edited here" in refusal(zipped)
    # Gzip bytes no header declares: not republished as they are, edited decompressed (test_editor.py).
    assert "compressed (gzip bytes)" in refusal(magic) and refusal(magic, edit=True) is None
    assert refusal(zipped, edit=True) == refusal(zipped)
    assert refusal(magic, payload=b'{"a": 2}') is None, "an edited payload in plain text may go"
    assert "has no Dlq-Original-Subject" in refusal(nowhere)
    assert refusal(unstored) is None and refusal(fine) is None
    for entry_id in (zipped, magic, nowhere):
        sentence = refusal(entry_id)
        html = operator.get(f"/entries/{entry_id}").get_data(as_text=True)
        bar = html.split('class="action-bar"')[1].split("</section>")[0]
        assert re.search(r'<button type="submit" disabled aria-describedby="republish-reason" '
                         r'title="[^"]+" data-action="republish">Republish</button>', bar)
        assert f"Republish is not possible: {sentence}".replace("&", "&amp;") in bar.replace("&#39;", "'")
        answer = api.post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                          headers=support.bearer(tokens["operator"]))
        assert answer.status_code == 422 and answer.get_json()["error"] == sentence

    html = operator.get(f"/entries/{unstored}").get_data(as_text=True)
    assert no_stream_sentence("payments.made") in html and 'disabled aria-describedby="republish-reason"' in html
    html = operator.get(f"/entries/{fine}").get_data(as_text=True)
    assert "not possible" not in html and 'data-action="republish" data-needs-nats' in html
    bar = html.split('class="action-bar"')[1].split("</section>")[0]
    assert [a for a in re.findall(r'data-action="(\w+)"', bar)] == ["republish", "edit", "close"]  # no schema: no repair
    assert "Audit of this entry" not in bar and "audit of this entry" in html
    viewer = support.logged_in(app, "viewer").get(f"/entries/{fine}").get_data(as_text=True)
    assert 'class="action-bar"' not in viewer

    # Opened by its address, the confirmation and the editor say it too, their button disabled.
    for entry_id, path, edit in [(zipped, "republish", False), (zipped, "edit", True), (magic, "republish", False),
                                 (nowhere, "republish", False)]:
        page = operator.get(f"/entries/{entry_id}/{path}").get_data(as_text=True).replace("&#39;", "'")
        sentence = refusal(entry_id, status=True, edit=edit).replace("&", "&amp;")
        assert f'<p class="error" id="refusal" role="alert">{sentence}</p>' in page, (entry_id, path)
        assert re.search(r'<button type="submit" disabled aria-describedby="refusal"[^>]*>Republish</button>', page)
    for entry_id, path in ((fine, "republish"), (fine, "edit"), (magic, "edit")):
        page = operator.get(f"/entries/{entry_id}/{path}").get_data(as_text=True)
        assert 'id="refusal"' not in page and re.search(r'<button type="submit" data-needs-nats[^>]*>Republish</button>', page)


def test_an_entry_whose_republish_failed_again_says_so_and_links_the_new_failure(app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    first = support.dead_letter(app, 1, payload=b'{"customer_id": "c"}', stream="DLQT")
    operator = support.bearer(tokens["operator"])
    api = app.test_client()
    assert api.post(f"/api/entries/{first}/republish", json={"version": 1}, headers=operator).status_code == 200
    assert api.get(f"/api/entries/{first}", headers=operator).get_json()["failed_again"] is None
    again = support.dead_letter(app, 2, payload=b'{"customer_id": "c"}', stream="DLQT", Dlq_Replay_Of="DLQT:1")
    html = support.logged_in(app, "viewer").get(f"/entries/{first}").get_data(as_text=True)
    assert re.search(rf'<a class="status status-republished failed-again" href="/entries/{again}"[^>]*>'
                     r"republished · failed again</a>", html)
    body = api.get(f"/api/entries/{first}", headers=operator).get_json()
    assert body["status"] == "republished" and body["failed_again"] == again
    assert "· failed again" not in support.logged_in(app, "viewer").get(f"/entries/{again}").get_data(as_text=True)
    # The list says it too, on the republished entry's row only, linked to the new failure.
    listed = support.logged_in(app, "viewer").get("/?status=").get_data(as_text=True)
    rows = {int(i): row for i, row in re.findall(r'<tr hx-disable data-id="(\d+)"(.*?)</tr>', listed, re.S)}
    assert re.search(rf'<a class="failed-again-link" href="/entries/{again}"[^>]*>failed again</a>', rows[first])
    assert "failed again" not in rows[again]


@pytest.mark.both_databases
def test_a_viewers_neighbours_skip_entries_found_only_by_a_masked_value(make_app, database_url):
    app = make_app(mask=("/customer/email",))
    hidden = support.dead_letter(app, 1, payload=b'{"customer": {"email": "alice@example.com"}}')
    shown = [support.dead_letter(app, seq, payload=b'{"customer": {"name": "alice"}}') for seq in (2, 3)]
    viewer, operator = support.logged_in(app, "viewer"), support.logged_in(app, "operator")
    assert neighbours(viewer.get(f"/entries/{shown[1]}?q=alice").get_data(as_text=True)) == (None, shown[0])
    assert neighbours(viewer.get(f"/entries/{shown[0]}?q=alice").get_data(as_text=True)) == (shown[1], None)
    assert neighbours(operator.get(f"/entries/{shown[0]}?q=alice").get_data(as_text=True)) == (shown[1], hidden)


def test_a_masked_value_in_a_group_label_stays_hidden_from_a_viewer(make_app):
    from dlq_dashboard.actions.bulk import jobs
    from dlq_dashboard.runtime import runtime_of

    app = make_app(mask=("/customer/name",))
    rt = runtime_of(app)
    entry = support.dead_letter(app, 1, payload=b'{"customer": {"name": "Zebulon"}}', Dlq_Reason="fatal",
                                Dlq_Error="customer Zebulon is blocked")
    group = rt.store.group_of(entry)
    assert "Zebulon" in group[1], "the group's key quotes the value"
    jobs.create_job(rt, "close", actor="ann", filter_args={"group": str(group[0])}, start=False)
    viewer, operator = support.logged_in(app, "viewer"), support.logged_in(app, "operator")
    page = viewer.get(f"/entries/{entry}").get_data(as_text=True)
    assert "Zebulon" not in page and f'data-group="{group[0]}"' in page
    assert "Zebulon" in operator.get(f"/entries/{entry}").get_data(as_text=True)
    listing = viewer.get("/jobs").get_data(as_text=True)
    assert "Zebulon" not in listing and f"group {group[0]}, status=open" in listing
    assert "Zebulon" not in viewer.get("/api/jobs").get_data(as_text=True)
    assert "Zebulon" in operator.get("/jobs").get_data(as_text=True)


def test_a_gzip_payload_is_read_decompressed_on_its_page_and_never_past_the_mask(make_app):
    document = b'{"order_id": "ORD-7", "customer": {"email": "alice@example.com"}}'
    plain = make_app()
    entry = support.dead_letter(plain, 1, payload=gzip.compress(document), Dlq_Reason="schema_invalid",
                                Dlq_Error="payload is not valid JSON")
    page = unescape(support.logged_in(plain, "viewer").get(f"/entries/{entry}").get_data(as_text=True))
    assert f"The payload is compressed (gzip bytes); shown decompressed, {len(document)} bytes." in page
    assert '"order_id": "ORD-7"' in page and "alice@example.com" in page
    # The download is the payload as stored.
    assert support.logged_in(plain, "viewer").get(f"/entries/{entry}/payload").data[:2] == b"\x1f\x8b"
    masked = make_app(mask=("/customer/email",))
    entry = support.dead_letter(masked, 1, payload=gzip.compress(document), Dlq_Reason="schema_invalid")
    page = support.logged_in(masked, "viewer").get(f"/entries/{entry}").get_data(as_text=True)
    assert "alice@example.com" not in page and "ORD-7" not in page and "shown decompressed" not in page
    assert "The payload is hidden from viewers" in page
    assert "alice@example.com" in unescape(support.logged_in(masked, "operator").get(f"/entries/{entry}").get_data(as_text=True))


def test_a_payload_hidden_for_a_repeated_key_is_not_said_to_be_not_json(make_app):
    """The payload panel said "this one is not JSON" of every payload hidden whole, though one
    holding a key twice is JSON (and a compressed one may be): the notes say which it is."""
    masked = make_app(mask=("/customer/email",))
    entry = support.dead_letter(masked, 1, payload=b'{"customer": {"email": "a@x"}, "customer": null}',
                                Dlq_Reason="fatal")
    page = unescape(support.logged_in(masked, "viewer").get(f"/entries/{entry}").get_data(as_text=True))
    assert PAYLOAD_REPEATED in page and "a@x" not in page
    assert "not JSON" not in page
    assert "The payload is hidden from viewers" in page


def test_a_gzip_payloads_page_says_what_the_schema_makes_of_it_decompressed(make_app, tmp_path):
    schema = {"x-subjects": ["orders.*"], "type": "object", "required": ["customer_id"],
              "properties": {"customer_id": {"type": "string"}}}
    app = make_app(schemas_dir=support.orders_schema_folder(tmp_path, schema))
    not_json = [{"path": "", "message": "payload is not valid JSON: 'utf-8' codec can't decode byte 0x8b"}]
    passes = support.dead_letter(app, 1, payload=gzip.compress(b'{"customer_id": "c-1"}'),
                                 Dlq_Reason="schema_invalid", Dlq_Schema_Errors=json.dumps(not_json))
    fails = support.dead_letter(app, 2, payload=gzip.compress(b'{"order_id": "o-2", "customer_id": 5}'),
                                Dlq_Reason="schema_invalid", Dlq_Schema_Errors=json.dumps(not_json))
    operator = support.logged_in(app, "operator")
    page = unescape(operator.get(f"/entries/{passes}").get_data(as_text=True))
    assert "Decompressed, it passes orders.json: only its compression failed" in re.sub(r"<[^>]+>", "", page)
    page = unescape(operator.get(f"/entries/{fails}").get_data(as_text=True))
    assert "Decompressed, it fails orders.json too:" in re.sub(r"<[^>]+>", "", page)
    # Its failing field is marked in the payload shown decompressed, and the error links it.
    assert '<a href="#mark-0" class="pointer"><code>/customer_id</code></a> <span class="message">5 is not of type' in page
    assert '<mark id="mark-0">' in page
    # The same verdict in GET /api/entries/<id> and `entries show` (one entry detail value).
    verdict = operator.get(f"/api/entries/{fails}").get_json()["current_schema"]
    assert verdict["valid"] is False and verdict["decompressed"]["compression"] == "gzip bytes"
    assert verdict["decompressed"]["valid"] is False
    assert [e["path"] for e in verdict["decompressed"]["errors"]] == ["/customer_id"]
    assert operator.get(f"/api/entries/{passes}").get_json()["current_schema"]["decompressed"] == {
        "compression": "gzip bytes", "valid": True, "errors": []}
    shown = app.test_cli_runner().invoke(args=["entries", "show", str(passes)]).output
    assert "decompressed:     (gzip bytes) passes: only its compression failed" in shown
    shown = app.test_cli_runner().invoke(args=["entries", "show", str(fails)]).output
    assert "decompressed:     (gzip bytes) fails too: /customer_id: 5 is not of type 'string'" in shown
    # As the API document says (web/openapi.py holds access/detail.py's schemas).
    doc = operator.get("/api/openapi.json").get_json()
    jsonschema.Draft202012Validator({**doc, "$ref": "#/components/schemas/EntryDetail"}).validate(
        operator.get(f"/api/entries/{fails}").get_json())


def test_a_large_payloads_page_lists_its_first_100_errors_and_never_says_a_field_is_not_there(make_app, tmp_path):
    """A 1.3 MB order of 8,000 failing items: its page listed 15,101 errors (3 MB of HTML), each
    "(not in the payload)" while the truncated view beside it showed the field."""
    schema = {"x-subjects": ["orders.*"], "type": "object", "properties": {"items": {"type": "array", "items": {
        "type": "object", "properties": {"price": {"type": "number"}}}}}}
    app = make_app(schemas_dir=support.orders_schema_folder(tmp_path, schema))
    items = [{"sku": f"SKU-{i:05}", "note": "x" * 200, "price": "12.50"} for i in range(1500)]
    payload = json.dumps({"order_id": "ORD-1", "items": items}).encode()
    assert len(payload) > 256 * 1024
    entry_id = support.dead_letter(app, 1, payload=payload, Dlq_Reason="schema_invalid")
    page = unescape(support.logged_in(app, "operator").get(f"/entries/{entry_id}").get_data(as_text=True))
    current = page.split("Against the current schema")[1]
    assert current.count("is not of type 'number'") == 100
    assert "And 1,400 more; the entry's JSON lists them all." in re.sub(r"<[^>]+>", "", current)
    assert "(not in the payload)" not in page
    assert "The payload is large; the fields are not marked in a truncated view." in page


def test_an_action_on_an_entry_keeps_the_list_it_was_opened_from(make_app):
    """Closing one of a customer's failures led back to the entry without its list: Previous and
    Next walked every entry, and Back to the list went to all of them."""
    app = make_app()
    ids = [support.dead_letter(app, seq, subject=subject, Dlq_Reason="fatal")
           for seq, subject in enumerate(("orders.created", "payments.made", "orders.created", "orders.created"), 1)]
    operator = support.logged_in(app, "operator")
    listed = "status=open&subject=orders.created"
    page = operator.get(f"/entries/{ids[2]}?{listed}").get_data(as_text=True)
    assert f'action="/entries/{ids[2]}/close?status=open&amp;subject=orders.created"' in page
    # A GET form (Edit and republish) carries them as its fields, and its own form posts them on.
    assert '<input type="hidden" name="subject" value="orders.created">' in page
    edit = operator.get(f"/entries/{ids[2]}/edit?{listed}").get_data(as_text=True)
    assert f'action="/entries/{ids[2]}/republish?status=open&amp;subject=orders.created"' in edit
    token = support.csrf_token(operator, f"/entries/{ids[2]}")
    closed = operator.post(f"/entries/{ids[2]}/close?{listed}", data={"version": "1", "csrf_token": token})
    assert closed.status_code == 303 and closed.headers["Location"] == f"/entries/{ids[2]}?status=open&subject=orders.created"
    after = operator.get(closed.headers["Location"]).get_data(as_text=True)
    # Its neighbours are those of the list: entries 1 and 4, never the payment (entry 2).
    assert f'href="/entries/{ids[3]}?status=open&amp;subject=orders.created" data-neighbour="prev"' in after
    assert f'href="/entries/{ids[0]}?status=open&amp;subject=orders.created" data-neighbour="next"' in after
    reopened = operator.post(f"/entries/{ids[2]}/reopen?{listed}", data={"version": "2", "csrf_token": token})
    assert reopened.headers["Location"] == f"/entries/{ids[2]}?status=open&subject=orders.created"
