"""The schema registry (SPEC section 7): files matched by x-subjects, errors with JSON Pointers,
broken files reported by name instead of raised."""

from __future__ import annotations

import json
import logging
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dlq_consumer import json_pointer, make_validator, parse_and_validate
from dlq_dashboard.entries.repair import CANNOT, repair_payload, schema_validator
from dlq_dashboard.entries.schemas import SchemaRegistry

from . import support

ORDERS = {"x-subjects": ["orders.*"], "type": "object", "required": ["order_id"],
          "properties": {"order_id": {"type": "string"},
                         "items": {"type": "array", "items": {"properties": {"price": {"type": "number"}}}}}}


def write(folder, name, content):
    (folder / name).write_text(content if isinstance(content, str) else json.dumps(content))


def test_a_payload_is_validated_against_the_schema_covering_its_subject(tmp_path):
    write(tmp_path, "orders.json", ORDERS)
    registry = SchemaRegistry.load(str(tmp_path))
    result = registry.validate("orders.created", b'{"order_id": 1, "items": [{"price": "12.50"}]}')
    assert result.schema == "orders.json" and not result.valid
    assert {(e.path, e.message) for e in result.errors} == {
        ("/order_id", "1 is not of type 'string'"), ("/items/0/price", "'12.50' is not of type 'number'")}
    assert registry.validate("orders.created", b'{"order_id": "a"}').valid


def test_a_subject_no_schema_covers_has_no_verdict(tmp_path):
    write(tmp_path, "orders.json", ORDERS)
    registry = SchemaRegistry.load(str(tmp_path))
    assert registry.validate("orders.eu.created", b"{}").schema is None  # '*' is one token
    assert registry.validate(None, b"{}").schema is None
    assert SchemaRegistry.load(None).validate("orders.created", b"{}").schema is None


def test_the_first_file_by_name_wins_when_two_cover_a_subject(tmp_path):
    write(tmp_path, "a.json", {"x-subjects": ["orders.>"], "type": "object"})
    write(tmp_path, "b.json", ORDERS)
    assert SchemaRegistry.load(str(tmp_path)).validate("orders.created", b"{}").schema == "a.json"


def test_broken_files_are_reported_with_their_name_and_the_rest_still_load(tmp_path, caplog):
    write(tmp_path, "good.json", ORDERS)
    write(tmp_path, "not-json.json", "{ nope")
    write(tmp_path, "no-subjects.json", {"type": "object"})
    write(tmp_path, "bad-subject.json", {"x-subjects": ["orders..x"], "type": "object"})
    write(tmp_path, "bad-schema.json", {"x-subjects": ["users.*"], "type": "no-such-type"})
    (tmp_path / "latin1.json").write_bytes(b'{"x-subjects": ["\xe9"]}')
    with caplog.at_level(logging.ERROR):
        registry = SchemaRegistry.load(str(tmp_path))
    names = {name for name, _ in registry.problems}
    assert names == {"not-json.json", "no-subjects.json", "bad-subject.json", "bad-schema.json", "latin1.json"}
    for name in names:
        assert name in caplog.text
    assert [s.name for s in registry.schemas] == ["good.json"]


def test_a_payload_that_is_not_json_is_one_error_at_the_root(tmp_path):
    write(tmp_path, "orders.json", ORDERS)
    result = SchemaRegistry.load(str(tmp_path)).validate("orders.created", b"\xff\xfe")
    assert [e.path for e in result.errors] == [""] and "not valid JSON" in result.errors[0].message


def test_a_payload_nested_too_deeply_is_an_error_not_a_crash():
    validator = make_validator({"type": "array", "items": {"$ref": "#"}})
    for depth in (900, 50_000):
        _, errors = parse_and_validate(b"[" * depth + b"]" * depth, validator)
        assert errors and "nests too deeply" in errors[0].message


def test_json_pointers_escape_slashes_and_tildes():
    assert json_pointer(["a/b", "c~d", 0]) == "/a~1b/c~0d/0"
    assert json_pointer([]) == ""


@contextmanager
def schema_host():
    """A real HTTP server serving a schema at every path: its base URL and the paths asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_schema_whose_reference_is_not_in_its_file_is_not_usable_and_nothing_is_fetched(tmp_path, caplog):
    from dlq_consumer.validation import UnresolvableReference

    with schema_host() as (url, asked):
        write(tmp_path, "orders.json", ORDERS)
        write(tmp_path, "remote.json", {"$schema": "https://json-schema.org/draft/2020-12/schema",
                                        "x-subjects": ["remote.*"], "$ref": f"{url}/evil.json"})
        write(tmp_path, "sibling.json", {"x-subjects": ["sibling.*"], "$ref": "orders.json"})
        write(tmp_path, "hidden.json", {"x-subjects": ["hidden.*"], "$ref": "#/definitions/far",
                                        "definitions": {"far": {"$ref": f"{url}/far.json"}}})
        write(tmp_path, "local.json", {"x-subjects": ["local.*"], "$ref": "#/$defs/id",
                                       "$defs": {"id": {"type": "string"}},
                                       "properties": {"meta": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}})
        with caplog.at_level(logging.ERROR):
            registry = SchemaRegistry.load(str(tmp_path))
        problems = dict(registry.problems)
        assert set(problems) == {"remote.json", "sibling.json", "hidden.json"}
        assert f"'{url}/evil.json' does not resolve within the schema" in problems["remote.json"]
        assert "'orders.json' does not resolve" in problems["sibling.json"]
        assert f"'{url}/far.json' does not resolve" in problems["hidden.json"]
        assert "remote.json is not usable" in caplog.text
        assert [s.name for s in registry.schemas] == ["local.json", "orders.json"]
        assert registry.validate("remote.a", b"{}").schema is None
        assert not registry.validate("local.a", b"1").valid and registry.validate("local.a", b'"a"').valid
        with pytest.raises(UnresolvableReference):  # a service's schema: refused when it starts
            make_validator({"$ref": f"{url}/evil.json"})
        assert asked == []


def test_a_reference_that_fails_while_validating_is_a_verdict_not_an_exception():
    from dlq_consumer.validation import jsonschema_validator

    with schema_host() as (url, asked):
        schema = {"properties": {"a": {"$ref": f"{url}/evil.json"}}}
        validator = make_validator(jsonschema_validator(schema, check=False))  # made without the check
        _, errors = parse_and_validate(b'{"a": 1}', validator)
        assert [(e.path, e.message) for e in errors] == [
            ("", f"the schema could not be applied: its reference '{url}/evil.json' does not resolve")]
        repaired = repair_payload(schema_validator(schema), b'{"a": 1}')
        assert repaired.outcome == CANNOT and "could not be applied" in repaired.reason
        assert asked == []


def test_an_entry_whose_schema_refers_to_a_uri_is_shown_and_nothing_is_fetched(tmp_path, make_app):
    folder = tmp_path / "schemas"
    folder.mkdir()
    with schema_host() as (url, asked):
        write(folder, "remote.json", {"x-subjects": ["remote.*"], "$ref": f"{url}/evil.json"})
        app = make_app(schemas_dir=str(folder))
        entry_id = support.dead_letter(app, 55, subject="remote.a", payload=b'{"a": 1}')
        client = support.logged_in(app, "operator")
        body = client.get(f"/api/entries/{entry_id}").get_json()
        assert body["current_schema"]["schema"] is None
        page = client.get(f"/entries/{entry_id}")
        assert page.status_code == 200 and "remote.json" in page.get_data(as_text=True)
        assert asked == []


PRICED = {"x-subjects": ["orders.*"], "type": "object",
          "properties": {"order_id": {"type": "string"}, "price": {"type": "number"}}}

NOT_STRICT_JSON = [
    (b'{"order_id": "n", "price": NaN}', "NaN is not a JSON number"),
    (b'{"price": Infinity}', "Infinity is not a JSON number"),
    (b'{"price": -Infinity}', "-Infinity is not a JSON number"),
    (b'{"price": 1e400}', "1e400 is beyond the range of a double"),
    (b'{"price": -1e400}', "-1e400 is beyond the range of a double"),
    (b'{"price": 1' + b"0" * 400 + b"}", "is beyond the range of a double"),
    ('{"price": 1}'.encode("utf-16"), "it is not UTF-8 text (byte 0xff at offset 0)"),
    (b'{"order_id": "\xed\xa0\x80"}', "it is not UTF-8 text (byte 0xed at offset 14)"),
    (b"\xef\xbb\xbf{}", "it begins with a byte order mark"),
]


def test_a_payload_that_is_not_strict_json_fails_and_the_verdict_says_why(tmp_path):
    write(tmp_path, "orders.json", PRICED)
    registry = SchemaRegistry.load(str(tmp_path))
    consumer = make_validator(PRICED)
    for payload, why in NOT_STRICT_JSON:
        for errors in (registry.validate("orders.created", payload).errors, parse_and_validate(payload, consumer)[1]):
            assert [(e.path, e.unread) for e in errors] == [("", True)], payload
            assert errors[0].message.startswith("payload is not valid JSON: ") and why in errors[0].message, payload
    assert registry.validate("orders.created", b"\xff\xfe").errors[0].message == \
        "payload is not valid JSON: it is not UTF-8 text (byte 0xff at offset 0)"
    # What JSON allows still passes: a number too small for a double, an escaped half pair, UTF-8.
    for payload in (b'{"price": 1e-400}', b'{"price": 1' + b"0" * 300 + b"}", b'{"order_id": "\\ud800"}',
                    '{"order_id": "é"}'.encode()):
        assert registry.validate("orders.created", payload).valid, payload


def test_an_entry_whose_payload_holds_nan_fails_its_schema_and_needs_the_override(tmp_path, make_app, tokens):
    write(tmp_path, "orders.json", PRICED)
    app = make_app(schemas_dir=str(tmp_path))
    entry_id = support.dead_letter(app, 1, payload=b'{"order_id": "n", "price": 1e400}')
    client = app.test_client()
    verdict = client.get(f"/api/entries/{entry_id}", headers=support.bearer(tokens["viewer"])).get_json()["current_schema"]
    assert verdict["valid"] is False
    assert verdict["errors"] == [{"path": "", "message": "payload is not valid JSON: 1e400 is beyond the range of a double"}]
    refused = client.post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                          headers=support.bearer(tokens["operator"]))
    assert refused.status_code == 422 and refused.get_json()["schema_errors"] == verdict["errors"]
    page = support.logged_in(app, "viewer").get(f"/entries/{entry_id}").get_data(as_text=True)
    assert "1e400" in page  # the payload is still shown as it was written
