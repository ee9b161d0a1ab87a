"""Repair by the schema (entries/repair.py): what each rule repairs, what it leaves alone and why,
and, generated (the "ci" hypothesis profile: the same examples every run), that a repaired payload
passes its schema or is reported as not repairable, and that a passing payload is never changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlq_dashboard.entries.repair import CANNOT, REPAIRED, STILL_FAILS, VALID, repair_payload, schema_validator

ORDERS = schema_validator(json.loads(
    (Path(__file__).resolve().parent.parent / "dlq_dashboard/demo/schemas/orders.json").read_text()))
SHAPES = schema_validator({
    "type": "object",
    "properties": {
        "n": {"type": "number"}, "i": {"type": "integer"}, "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "integer"}},
        "code": {"type": "string", "pattern": "^[A-Z]{2}$"}, "kind": {"enum": ["a", "b"]},
        "either": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
        "one": {"oneOf": [{"type": "number"}, {"type": "array"}]},
        "deep": {"$ref": "#/$defs/deep"},
    },
    "$defs": {"deep": {"type": "object", "properties": {"x": {"type": "number"}}}},
})


def order(price: str = '"12.50"', **fields) -> bytes:
    body = {"order_id": "ORD-0000ABCD", "customer_id": "C-1234", "placed_at": "2026-01-01T00:00:00Z",
            "currency": "EUR", **fields}
    text = json.dumps(body)[:-1] + f', "items": [{{"sku": "ABC-123", "qty": 2, "price": {price}}}]}}'
    return text.encode()


def test_a_price_written_as_text_becomes_the_number_with_its_digits_as_written():
    result = repair_payload(ORDERS, order('"12.50"'))
    assert result.outcome == REPAIRED
    assert b'"price": 12.50}' in result.payload
    assert result.payload == order("12.50")  # every other byte as it was
    assert [c.path for c in result.changes] == ["/items/0/price"]


@pytest.mark.parametrize("written", ["12.50", "1.000", "1E3", "0.10", "-0.0", "123456789012345678901234.5"])
def test_numbers_keep_every_digit(written):
    result = repair_payload(SHAPES, json.dumps({"n": written}).encode())
    assert result.outcome == REPAIRED and result.payload == f'{{"n": {written}}}'.encode()


@pytest.mark.parametrize("before, after", [
    ({"i": "7"}, '{"i": 7}'),
    ({"i": " 7 "}, '{"i": 7}'),
    ({"i": "7.0"}, '{"i": 7.0}'),
    ({"flag": "true"}, '{"flag": true}'),
    ({"flag": "false"}, '{"flag": false}'),
    ({"tags": 3}, '{"tags": [3]}'),
    ({"tags": "3"}, '{"tags": [3]}'),
    ({"code": " DE\n"}, '{"code": "DE"}'),
    ({"kind": " a"}, '{"kind": "a"}'),
    ({"either": "true"}, '{"either": true}'),
    ({"deep": {"x": "1.5"}}, '{"deep": {"x": 1.5}}'),
])
def test_each_rule_repairs_its_mismatch(before, after):
    result = repair_payload(SHAPES, json.dumps(before).encode())
    assert (result.outcome, result.payload.decode()) == (REPAIRED, after)


@pytest.mark.parametrize("before, words", [
    ({"n": "1,5"}, "not a number as JSON writes one"),
    ({"n": "12abc"}, "not a number as JSON writes one"),
    ({"n": "+3"}, "not a number as JSON writes one"),
    ({"n": "012"}, "not a number as JSON writes one"),
    ({"n": "NaN"}, "not a number as JSON writes one"),
    ({"i": "7.5"}, "wants a whole number"),
    ({"flag": "yes"}, 'only "true" and "false"'),
    ({"flag": "True"}, 'only "true" and "false"'),
    ({"tags": {"a": 1}}, "an object where the schema wants an array"),
    ({"one": "7"}, "several alternatives of oneOf"),
    ({"code": " de "}, "No rule repairs it: /code: fails the schema's pattern"),
    ({"n": None}, "No rule repairs it: /n: the schema wants number"),
])
def test_an_ambiguous_value_cannot_be_repaired_and_says_why(before, words):
    payload = json.dumps(before).encode()
    result = repair_payload(SHAPES, payload)
    assert result.outcome == CANNOT and words in result.reason
    assert result.payload == payload and not result.changes


def test_a_reason_names_the_place_and_the_rule_never_the_value():
    result = repair_payload(SHAPES, b'{"n": "secret-4111"}')
    assert result.outcome == CANNOT and "/n" in result.reason and "secret" not in result.reason


def test_a_repair_that_leaves_other_errors_still_fails_with_the_first_of_them():
    payload = order('"12.50"').replace(b'"customer_id": "C-1234", ', b"")
    result = repair_payload(ORDERS, payload)
    assert result.outcome == STILL_FAILS and result.reason == "Repaired, it still fails: /customer_id: missing; " \
                                                              "the schema requires it."
    assert b"12.50}" in result.payload


@pytest.mark.parametrize("payload, words", [
    (b"not json", "not JSON"), (b'{"n": NaN}', "NaN"), (b'{"n": "1", "n": "2"}', "repeats a key"),
    (b"\xff\xfe", "not JSON")])
def test_a_payload_it_cannot_read_cannot_be_repaired(payload, words):
    result = repair_payload(SHAPES, payload)
    assert result.outcome == CANNOT and words in result.reason and result.payload == payload


def test_the_whitespace_and_the_other_values_of_a_pretty_payload_stay_as_written():
    payload = b'{\n  "n" : "2.50" ,\n  "deep": {"x": 1.10},\n  "tags": [1, 2]\n}\n'
    result = repair_payload(SHAPES, payload)
    assert result.payload == payload.replace(b'"2.50"', b"2.50")


# --- generated -----------------------------------------------------------------------------------

NUMERIC_TEXT = st.from_regex(r"\A-?(0|[1-9][0-9]{0,6})(\.[0-9]{1,4})?([eE][+-]?[0-9]{1,2})?\Z")
PADDING = st.sampled_from(["", " ", "\t", " \n"])
ODD_TEXT = st.sampled_from(["1,5", "12abc", "", " ", "+1", "0x10", "1e", "TRUE", "null", "é", "1 2"])
SCALARS = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                    st.none(), NUMERIC_TEXT, st.builds(lambda p, t, q: p + t + q, PADDING, NUMERIC_TEXT, PADDING),
                    st.sampled_from(["true", "false", " true", "DE", " DE ", "a", " b "]), ODD_TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(["x", "n"]), inner, max_size=2)),
                      max_leaves=6)
KEYS = st.sampled_from(["n", "i", "flag", "tags", "code", "kind", "either", "one", "deep", "other"])
PAYLOADS = st.dictionaries(KEYS, VALUES, max_size=6)


@given(PAYLOADS, st.sampled_from([None, 2]))
def test_a_repaired_payload_passes_its_schema_or_is_reported_as_not_repairable(document, indent):
    payload = json.dumps(document, indent=indent).encode()
    result = repair_payload(SHAPES, payload)
    passes = SHAPES.is_valid(json.loads(result.payload))
    if result.outcome in (VALID, REPAIRED):
        assert passes
    else:
        assert result.reason and not passes
    if result.outcome in (VALID, CANNOT):
        assert result.payload == payload


@given(st.builds(lambda text, pad: (text, pad), NUMERIC_TEXT, PADDING))
def test_a_number_written_as_text_keeps_its_digits(case):
    text, pad = case
    result = repair_payload(SHAPES, json.dumps({"n": pad + text + pad}).encode())
    assert result.outcome == REPAIRED and result.payload == f'{{"n": {text}}}'.encode()


@given(st.dictionaries(st.sampled_from(["n", "i", "flag", "tags", "code"]),
                       st.one_of(st.integers(-99, 99), st.booleans(), st.lists(st.integers(0, 9), max_size=2),
                                 st.sampled_from(["AB", "ZZ"])), max_size=5))
def test_a_payload_that_passes_is_unchanged(document):
    payload = json.dumps(document).encode()
    if SHAPES.is_valid(document):
        result = repair_payload(SHAPES, payload)
        assert (result.outcome, result.payload, result.changes) == (VALID, payload, ())


def test_an_order_of_thousands_of_failing_items_is_repaired_whole_each_value_where_it_was_written():
    """A 1.3 MB order of 8,000 items took 67 s on its entry page (the text was read from its
    start for every failing value); each repair lands on its own item, in the text's order."""
    items = [{"sku": f"SKU-{i}", "qty": 2, "price": f'"{i}.50"' if i % 3 else f"{i}.5"} for i in range(3000)]
    text = '{"order_id": "ORD-1", "items": [' + ", ".join(
        f'{{"sku": "{it["sku"]}", "qty": {it["qty"]}, "price": {it["price"]}}}' for it in items) + "]}"
    repaired = repair_payload(schema_validator({"type": "object", "properties": {"items": {
        "type": "array", "items": {"type": "object", "properties": {"price": {"type": "number"}}}}}}), text.encode())
    assert repaired.outcome == REPAIRED
    assert [c.to_dict()["path"] for c in repaired.changes] == [f"/items/{i}/price" for i in range(3000) if i % 3]
    prices = json.loads(repaired.payload)["items"]
    assert all(p["price"] == float(f"{i}.5") and p["sku"] == f"SKU-{i}" for i, p in enumerate(prices))
    assert f'"price": {2}.50}}' in repaired.payload.decode()  # the digits as written
