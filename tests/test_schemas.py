"""The schema registry (SPEC section 7): files matched by x-subjects, errors with JSON Pointers,
broken files reported by name instead of raised."""

from __future__ import annotations

import json
import logging

from dlq_consumer import json_pointer, make_validator, parse_and_validate
from dlq_dashboard.entries.schemas import SchemaRegistry

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
