"""DLQ_MASK: viewers see "•••" for the masked payload fields and headers in every channel and
cannot find an entry by a masked value; operators see and republish the real values."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from dlq_dashboard.config import ConfigError, load_settings
from dlq_dashboard.masking import MASKED, Mask
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support
from .test_export import parse_export

MASK = ("/customer/email", "/items/*/card", "x-card", "/no/such/field")
EMAIL = "alice.secret@example.com"
CARD = "4111111111111111"
PAYLOAD = json.dumps({"order_id": 7, "customer": {"email": EMAIL, "name": "Robin"},
                      "items": [{"sku": "A-1", "card": CARD}, {"sku": "B-2"}]}).encode()
HEADER_SECRET = "card-token-zq81"


@pytest.fixture
def masked(make_app, database_url):
    """An app with DLQ_MASK set (nothing started), one entry whose error quotes the email, and
    a viewer's and an operator's client."""
    app = make_app(mask=MASK)
    entry_id = support.dead_letter(app, 1, payload=PAYLOAD, Dlq_Reason="fatal",
                                   Dlq_Error=f"customer {EMAIL} is blocked", X_CARD=HEADER_SECRET)
    return app, entry_id, support.logged_in(app, "viewer"), support.logged_in(app, "operator")


def secrets_in(text: str) -> list[str]:
    return [s for s in (EMAIL, CARD, HEADER_SECRET, "alice.secret") if s in text]


# --- the mask itself ------------------------------------------------------------------------------

def test_a_pointer_masks_its_field_and_the_payload_stays_json():
    payload, hidden = Mask.parse(MASK).mask_payload(PAYLOAD)
    value = json.loads(payload)
    assert value["customer"] == {"email": MASKED, "name": "Robin"}
    assert value["items"] == [{"sku": "A-1", "card": MASKED}, {"sku": "B-2"}]
    assert sorted(hidden) == sorted([EMAIL, CARD])


def test_a_pointer_that_matches_nothing_leaves_the_payload_byte_for_byte():
    assert Mask.parse(["/no/such/field"]).mask_payload(PAYLOAD) == (PAYLOAD, [])


def test_an_array_index_and_an_escaped_pointer_reach_one_field():
    mask = Mask.parse(["/items/1/card", "/a~1b/c~0d"])
    payload, _ = mask.mask_payload(b'{"items": [{"card": 1}, {"card": 2}], "a/b": {"c~d": "x"}}')
    assert json.loads(payload) == {"items": [{"card": 1}, {"card": MASKED}], "a/b": {"c~d": MASKED}}


def test_a_payload_that_is_not_json_is_hidden_while_a_pointer_is_set():
    assert Mask.parse(["/customer/email"]).mask_payload(b"email=alice") == (None, [])
    assert Mask.parse(["X-Card"]).mask_payload(b"email=alice") == (b"email=alice", [])


def test_header_names_are_matched_case_insensitively():
    headers, hidden = Mask.parse(["X-Card"]).mask_headers({"x-CARD": ["1", "2"], "X-Other": ["3"]})
    assert headers == {"x-CARD": [MASKED, MASKED], "X-Other": ["3"]} and hidden == ["1", "2"]


def test_a_masked_value_quoted_in_a_text_is_replaced_as_a_whole_word():
    text = Mask.mask_text(f"user {EMAIL.upper()} failed; id 12 in 2012", [EMAIL, "12"])
    assert text == f"user {MASKED} failed; id {MASKED} in 2012"


def test_a_patch_shows_dots_for_a_value_written_into_or_tested_against_a_masked_field():
    mask = Mask.parse(MASK)
    ops = [{"op": "test", "path": "/customer/email", "value": EMAIL},
           {"op": "replace", "path": "/customer", "value": {"email": EMAIL}},
           {"op": "add", "path": "/items/3/card", "value": CARD},
           {"op": "replace", "path": "/customer/name", "value": "Robin"},
           {"op": "remove", "path": "/customer/email"},
           {"op": "copy", "from": "/customer/email", "path": "/note"}]
    assert mask.mask_patch(ops) == [{**ops[0], "value": MASKED}, {**ops[1], "value": MASKED},
                                    {**ops[2], "value": MASKED}, ops[3], ops[4], ops[5]]
    assert mask.covers("not a pointer") and not mask.covers("/customer/name")
    assert Mask.parse(["X-Card"]).mask_patch(ops) == ops


@pytest.mark.parametrize("raw", ["/customer/~2email", "customer/email", "X Card", "/ok,bad header"])
def test_a_malformed_mask_stops_the_start_with_one_line_naming_the_variable(raw):
    with pytest.raises(ConfigError) as raised:
        load_settings({"DLQ_MASK": raw})
    message = str(raised.value)
    assert message.startswith("DLQ_MASK=") and "\n" not in message and "use" in message


def test_the_mask_is_read_from_the_environment():
    assert load_settings({"DLQ_MASK": " /customer/email , X-Card,"}).mask == ("/customer/email", "X-Card")


# --- what a viewer sees ---------------------------------------------------------------------------

@pytest.mark.both_databases
def test_a_viewer_sees_dots_and_never_the_value_on_every_page_and_in_the_json(masked):
    app, entry_id, viewer, _ = masked
    for path in ("/", "/groups", "/groups?status=", f"/entries/{entry_id}", "/api/entries",
                 f"/api/entries/{entry_id}"):
        body = viewer.get(path).get_data(as_text=True)
        assert secrets_in(body) == [], path
    page = viewer.get(f"/entries/{entry_id}").get_data(as_text=True)
    assert MASKED in page and "Robin" in page
    assert "Fields DLQ_MASK hides from viewers read •••; an operator sees their values." in page  # why the dots
    # Only a header masked: the payload is as stored, and says nothing of the mask.
    plain = support.dead_letter(app, 2, payload=b'{"order_id": 8}', Dlq_Reason="fatal", X_CARD=HEADER_SECRET)
    assert "DLQ_MASK hides" not in viewer.get(f"/entries/{plain}").get_data(as_text=True)
    entry = viewer.get(f"/api/entries/{entry_id}").get_json()
    assert json.loads(entry["payload_text"])["customer"]["email"] == MASKED
    assert json.loads(base64.b64decode(entry["payload_base64"]))["items"][0]["card"] == MASKED
    assert entry["headers"]["X-CARD"] == [MASKED]  # DLQ_MASK says x-card
    assert entry["error"] == f"customer {MASKED} is blocked"


@pytest.mark.both_databases
def test_every_export_format_and_the_payload_download_are_masked_for_a_viewer(masked):
    app, entry_id, viewer, operator = masked
    for fmt in ("json", "ndjson", "csv"):
        body = viewer.get(f"/api/export.{fmt}").get_data(as_text=True)
        assert secrets_in(body) == [], fmt
        [row] = parse_export(fmt, body.encode())
        assert MASKED in row["payload_text"]
        assert EMAIL in operator.get(f"/api/export.{fmt}").get_data(as_text=True)
    download = viewer.get(f"/entries/{entry_id}/payload")
    assert download.status_code == 200
    assert json.loads(download.data)["customer"]["email"] == MASKED
    assert operator.get(f"/entries/{entry_id}/payload").data == PAYLOAD


@pytest.mark.both_databases
def test_a_patch_jobs_value_for_a_masked_field_shows_dots_to_a_viewer_on_every_page_and_in_the_json(masked):
    from dlq_dashboard.actions.bulk import jobs

    app, entry_id, viewer, operator = masked
    patch = [{"op": "test", "path": "/customer/email", "value": EMAIL},
             {"op": "replace", "path": "/customer/name", "value": "Robin Hood"}]
    job_id = jobs.create_job(runtime_of(app), "patch", actor="op", ids=[entry_id], patch=patch, start=False)
    for path in (f"/jobs/{job_id}", f"/api/jobs/{job_id}", "/jobs", "/api/jobs", "/audit", "/api/audit",
                 f"/audit?job={job_id}", f"/api/audit?job={job_id}&fold=1"):
        response = viewer.get(path)
        text = response.get_data(as_text=True)
        assert response.status_code == 200 and secrets_in(text) == [], path
    assert viewer.get(f"/api/jobs/{job_id}").get_json()["patch"] == [{**patch[0], "value": MASKED}, patch[1]]
    assert "Robin Hood" in viewer.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert operator.get(f"/api/jobs/{job_id}").get_json()["patch"] == patch
    assert EMAIL in operator.get(f"/jobs/{job_id}").get_data(as_text=True).replace("&#64;", "@")


def test_a_patch_value_for_a_masked_field_shows_dots_on_the_entry_page_and_its_json(masked):
    from sqlalchemy import insert

    from dlq_dashboard.db.models import Action

    app, entry_id, viewer, operator = masked
    new_email = "bob.fresh@example.org"  # not the entry's own value: only the patch's path hides it
    patch = [{"op": "replace", "path": "/customer/email", "value": new_email}]
    with runtime_of(app).engine.begin() as conn:
        conn.execute(insert(Action).values(entry_id=entry_id, action="republish", actor="op", at=utcnow(),
                                           msg_id="m-1", detail=json.dumps({"edited": True, "patch": patch})))
    for path in (f"/entries/{entry_id}", f"/api/entries/{entry_id}"):
        assert new_email not in viewer.get(path).get_data(as_text=True), path
    assert new_email in operator.get(f"/api/entries/{entry_id}").get_data(as_text=True)


def test_operators_and_admins_see_the_real_values(masked):
    app, entry_id, _, operator = masked
    admin = support.logged_in(app, "admin")
    for client in (operator, admin):
        entry = client.get(f"/api/entries/{entry_id}").get_json()
        assert base64.b64decode(entry["payload_base64"]) == PAYLOAD
        assert entry["headers"]["X-CARD"] == [HEADER_SECRET] and EMAIL in entry["error"]
        assert EMAIL in client.get(f"/entries/{entry_id}").get_data(as_text=True)
        assert "DLQ_MASK hides" not in client.get(f"/entries/{entry_id}").get_data(as_text=True)


@pytest.mark.both_databases
def test_a_viewer_cannot_find_an_entry_by_a_masked_value_and_an_operator_can(masked):
    app, entry_id, viewer, operator = masked
    for q in ("alice", "alice.secret", "4111111111111111", "example"):
        assert viewer.get(f"/api/entries?q={q}").get_json()["entries"] == [], q
        assert [e["id"] for e in operator.get(f"/api/entries?q={q}").get_json()["entries"]] == [entry_id], q
        assert viewer.get(f"/api/export.ndjson?q={q}").data == b""
        assert "No entries match" in viewer.get(f"/?q={q}").get_data(as_text=True)
        summary = viewer.get(f"/summary?q={q}").get_data(as_text=True)
        assert "<strong>0</strong>" in summary and "<strong>1</strong>" not in summary
        assert "entries" not in viewer.get(f"/entries/new?q={q}&after=0").get_data(as_text=True)
    # What the viewer sees still finds it.
    for q in ("robin", "blocked", "A-1", "orders"):
        assert [e["id"] for e in viewer.get(f"/api/entries?q={q}").get_json()["entries"]] == [entry_id], q


@pytest.mark.both_databases
def test_a_viewers_search_pages_past_entries_found_by_a_masked_value_only(make_app, database_url):
    app = make_app(mask=MASK)
    # Newest first: 30 that match "alice" by the masked email only, then 5 that show it.
    visible = [support.dead_letter(app, i, payload=json.dumps({"note": "alice"}).encode()) for i in range(1, 6)]
    for i in range(6, 36):
        support.dead_letter(app, i, payload=json.dumps({"customer": {"email": f"alice{i}@x.io"}}).encode())
    viewer = support.logged_in(app, "viewer")
    found, cursor = [], ""
    for _ in range(10):
        page = viewer.get(f"/api/entries?q=alice&limit=2{cursor}").get_json()
        found += [e["id"] for e in page["entries"]]
        if not page["next_cursor"]:
            break
        cursor = f"&cursor={page['next_cursor']}"
    assert found == sorted(visible, reverse=True)


@pytest.mark.both_databases
def test_a_payload_that_is_not_json_is_hidden_from_a_viewer_with_a_note(masked):
    app, _, viewer, operator = masked
    entry_id = support.dead_letter(app, 2, payload=f"email={EMAIL}".encode())
    page = viewer.get(f"/entries/{entry_id}").get_data(as_text=True)
    assert EMAIL not in page and "hidden from viewers" in page
    assert viewer.get(f"/entries/{entry_id}/payload").status_code == 403
    entry = viewer.get(f"/api/entries/{entry_id}").get_json()
    assert entry["payload_base64"] == "" and entry["payload_available"] is False
    assert viewer.get("/api/entries?q=secret").get_json()["entries"] == []
    assert operator.get(f"/entries/{entry_id}/payload").data == f"email={EMAIL}".encode()


def test_a_group_whose_error_quotes_a_masked_value_hides_it_from_a_viewer(masked):
    app, _, viewer, operator = masked
    # Grouping leaves an email out of the key by itself; a plain word it keeps.
    assert EMAIL not in operator.get("/groups?status=").get_data(as_text=True)
    support.dead_letter(app, 2, payload=json.dumps({"customer": {"email": "zebulon"}}).encode(),
                        Dlq_Reason="fatal", Dlq_Error="sender zebulon is blocked")
    groups = viewer.get("/groups").get_data(as_text=True)
    assert "zebulon" not in groups and f"sender {MASKED} is blocked" in groups
    assert "zebulon" not in viewer.get("/api/groups").get_data(as_text=True)
    assert "sender zebulon is blocked" in operator.get("/groups").get_data(as_text=True)


def test_schema_messages_quoting_a_masked_value_hide_it(tmp_path, make_app, database_url):
    folder = support.orders_schema_folder(tmp_path, {
        "x-subjects": ["orders.*"], "type": "object",
        "properties": {"customer": {"properties": {"email": {"type": "string", "maxLength": 5}}}}})
    app = make_app(mask=MASK, schemas_dir=folder)
    entry_id = support.dead_letter(app, 1, payload=PAYLOAD, Dlq_Schema_Errors=json.dumps(
        [{"path": "/customer/email", "message": f"'{EMAIL}' is not of type 'integer'"}]))
    page = support.logged_in(app, "viewer").get(f"/entries/{entry_id}").get_data(as_text=True)
    assert EMAIL not in page and f"&#39;{MASKED}&#39; is not of type" in page
    # The stored payload was validated: "•••" is not too long.
    assert f"&#39;{MASKED}&#39; is too long" in page


def test_without_dlq_mask_a_viewer_sees_everything(offline_app):
    entry_id = support.dead_letter(offline_app, 1, payload=PAYLOAD)
    viewer = support.logged_in(offline_app, "viewer")
    assert base64.b64decode(viewer.get(f"/api/entries/{entry_id}").get_json()["payload_base64"]) == PAYLOAD
    assert viewer.get("/api/entries?q=alice").get_json()["entries"]


# --- republishing ---------------------------------------------------------------------------------

@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """The app fixture's settings, with DLQ_MASK."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, mask=MASK)


@pytest.mark.both_databases
def test_an_operator_republishes_the_real_payload(app, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [PAYLOAD], headers={"X-Card": HEADER_SECRET})
    viewer = app.test_client().get(f"/api/entries/{entry_id}", headers=support.bearer(tokens["viewer"]))
    assert EMAIL not in viewer.get_data(as_text=True)
    response = app.test_client().post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                                      headers=support.bearer(tokens["operator"]))
    assert response.status_code == 200, response.get_json()
    [message] = support.stream_messages(nats_server.url)
    assert message.data == PAYLOAD and message.headers["X-Card"] == HEADER_SECRET


def test_gzip_bytes_are_hidden_whole_and_the_values_inside_them_are_found_for_the_texts():
    # Its error quotes the card: the values are read from the payload decompressed, so every
    # text of the entry hides them as it does for a JSON payload.
    mask = Mask.parse(["/card"])
    masked, hidden = mask.mask_payload(gzip.compress(b'{"card": "4111-1111", "id": 1}'))
    assert masked is None and hidden == ["4111-1111"]
    assert mask.mask_payload(gzip.compress(b"not json")) == (None, [])
    assert mask.mask_payload(b"\x1f\x8b not gzip") == (None, [])


def test_a_payload_holding_a_key_twice_is_hidden_whole_and_its_every_value_hidden_in_texts():
    mask = Mask.parse(MASK)
    twice = b'{"customer": {"email": "first@x.com"}, "order_id": "d2", "customer": null}'
    payload, hidden = mask.mask_payload(twice)
    assert payload is None and hidden == ["first@x.com"]
    deep = b'{"customer": {"email": "a@x.com", "email": "b@x.com"}, "items": [{"card": 1, "card": 2}]}'
    assert mask.mask_payload(deep) == (None, ["a@x.com", "b@x.com", "1", "2"])
    # Hidden whole even where the repeated key is no masked field: a rewrite writes each key once.
    assert Mask.parse(["/customer/email"]).mask_payload(b'{"a": 1, "a": 2}') == (None, [])
    assert Mask.parse(["X-Card"]).mask_payload(twice) == (twice, [])  # header names only


@pytest.mark.both_databases
def test_a_payload_holding_a_masked_key_twice_shows_a_viewer_neither_value_in_any_channel(masked):
    app, _, viewer, operator = masked
    secret = "again-secret@x.com"
    twice = b'{"customer": {"email": "%s"}, "order_id": "d2", "customer": null}' % secret.encode()
    entry_id = support.dead_letter(app, 2, payload=twice, Dlq_Reason="fatal", Dlq_Error=f"no account {secret}")
    for path in ("/", "/api/entries", f"/api/entries/{entry_id}", f"/entries/{entry_id}",
                 "/api/export.json", "/api/export.ndjson", "/api/export.csv"):
        body = viewer.get(path).get_data(as_text=True)
        assert "again-secret" not in body and base64.b64encode(twice).decode() not in body, path
    entry = viewer.get(f"/api/entries/{entry_id}").get_json()
    assert entry["payload_base64"] == "" and entry["payload_available"] is False
    assert "holds a key more than once" in " ".join(entry["notes"])
    download = viewer.get(f"/entries/{entry_id}/payload")
    assert download.status_code == 403 and "more than once" in download.get_data(as_text=True)
    assert "hidden" in viewer.get("/").get_data(as_text=True)  # the list's snippet
    for q in ("again", "again-secret"):
        assert viewer.get(f"/api/entries?q={q}").get_json()["entries"] == [], q
        assert [e["id"] for e in operator.get(f"/api/entries?q={q}").get_json()["entries"]] == [entry_id], q
    shown = app.test_cli_runner().invoke(args=["entries", "export", "--as", "viewer"])
    assert shown.exit_code == 0 and "again-secret" not in shown.output and "d2" not in shown.output
    assert operator.get(f"/entries/{entry_id}/payload").data == twice


def test_the_key_fields_of_a_payload_hidden_whole_read_dots_to_a_viewer(make_app):
    app = make_app(mask=MASK, list_fields=(("Order", "/order_id"),))
    plain = support.dead_letter(app, 1, payload=b'{"order_id": "d1"}')
    twice = support.dead_letter(app, 2, payload=b'{"customer": {"email": "x@y.z"}, "order_id": "d2", "customer": null}')
    fields = {e["id"]: e["fields"] for e in support.logged_in(app, "viewer").get("/api/entries").get_json()["entries"]}
    assert fields == {plain: {"Order": "d1"}, twice: {"Order": MASKED}}
    fields = {e["id"]: e["fields"] for e in support.logged_in(app, "operator").get("/api/entries").get_json()["entries"]}
    assert fields[twice] == {"Order": "d2"}
