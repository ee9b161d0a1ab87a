"""Failure groups: error texts normalized so that ids and values do not split a group."""

from __future__ import annotations

import json

from dlq_dashboard.entries.groups import LABEL_LENGTH, Group, group_label
from dlq_dashboard.ingest.grouping import NO_ERROR, error_group, normalize_error_text, normalize_schema_message


def test_errors_that_differ_only_in_ids_and_numbers_are_one_group():
    a = normalize_error_text("order 17 not found (id 3f2a9c1e-8b7d-4c6e-9f0a-1b2c3d4e5f60)")
    b = normalize_error_text("order 42 not found (id 00000000-1111-2222-3333-444444444444)")
    assert a == b == "order <id> not found (id <uuid>)"
    assert normalize_error_text("timeout for 'ord-1' after 30000 ms") == normalize_error_text("timeout for 'ord-9' after 5 ms")
    assert normalize_error_text("request deadbeefcafe1234 failed") == "request <id> failed"
    assert normalize_error_text("carrier rejected ord-4711") == "carrier rejected ord-<n>"


def test_a_schema_message_loses_its_value_and_keeps_its_rule():
    assert normalize_schema_message("'abc' is not of type 'number'") == "… is not of type 'number'"
    assert normalize_schema_message("-1 is less than the minimum of 0") == "… is less than the minimum of 0"
    assert normalize_schema_message("'customer_id' is a required property") == "'customer_id' is a required property"


def test_a_schema_failure_groups_by_path_and_rule_not_by_the_wrong_value():
    one = json.dumps([{"path": "/items/0/price", "message": "'12.50' is not of type 'number'"}])
    two = json.dumps([{"path": "/items/0/price", "message": "'abc' is not of type 'number'"}])
    other_index = json.dumps([{"path": "/items/1/price", "message": "'abc' is not of type 'number'"}])
    other_path = json.dumps([{"path": "/items/1/quantity", "message": "'abc' is not of type 'number'"}])
    assert error_group(None, one) == error_group("anything", two) == "/items/*/price: … is not of type 'number'"
    assert error_group(None, other_index) == error_group(None, one)
    assert error_group(None, other_path) != error_group(None, one)
    root = json.dumps([{"path": "", "message": "'customer_id' is a required property"}])
    assert error_group(None, root) == "/customer_id: is a required property"


def test_an_entry_without_an_error_has_a_group_too():
    assert error_group(None, None) == error_group("  ", "not json") == NO_ERROR


def test_a_group_opens_the_list_by_its_id_and_reads_as_json():
    group = Group(7, "orders.created", "fatal", "order <n> not found", 3, None, None, {"open": 3})
    assert group.filter_args() == {"group": "7"}
    assert group.to_dict() == {"id": 7, "source": "default", "subject": "orders.created", "reason": "fatal",
                               "label": "order <n> not found", "count": 3, "by_status": {"open": 3},
                               "first_seen": None, "last_seen": None, "filter": {"group": 7}, "state": "open",
                               "assignee": None, "team": None, "version": 1, "notes": 0, "resolved_in": None,
                               "until": None, "until_count": None, "ignored_seen": None, "state_changed_at": None}
    assert group.to_dict({"status": "open"})["filter"] == {"status": "open", "group": 7}


def test_a_group_label_keeps_its_placeholders_on_one_short_line():
    assert group_label("order <n> not found (id <uuid>)") == "order <n> not found (id <uuid>)"
    assert group_label("/items/*/price: … is not of type 'number'; /email: is a required property") == \
        "/items/*/price: … is not of type 'number' (and 1 more)"
    assert group_label(NO_ERROR) == NO_ERROR
    assert group_label("line one\n  line two") == "line one line two"
    long = group_label("word " * 100)
    assert len(long) <= LABEL_LENGTH and long.endswith("…") and "\n" not in long and not long.endswith(" …")
