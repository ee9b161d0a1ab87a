"""The editor marks the lines its schema errors point at: each error's JSON Pointer to the line
where that value starts in the text as typed (pretty or on one line); a missing property to its
object's line. And after each action the entry's page says what was done, with a link to it."""

from __future__ import annotations

import html
import json
import re
import tracemalloc

import pytest

from dlq_dashboard.web.presenters.lines import FailingLine, failing_lines, value_lines

from . import support
from .test_editor import ORIGINAL, PRETTY, SCHEMA

ORDER = {"order_id": "o-1", "items": [{"sku": "gizmo", "price": "12.50"}, {"sku": "a/b~c", "price": 3}],
         "shipping": {"city": "Paris"}, "note": "a \"quoted\" \\ [word]"}


def _pointers(value, at: str = "") -> list[str]:
    """Every pointer of a value, itself first."""
    inner = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [at] + [p for key, item in inner
                   for p in _pointers(item, f"{at}/{str(key).replace('~', '~0').replace('/', '~1')}")]


def test_every_value_of_a_pretty_payload_is_found_on_its_own_line():
    text = json.dumps(ORDER, indent=2)
    lines = value_lines(text, _pointers(ORDER))
    assert len(lines) == len(_pointers(ORDER))
    for pointer, line in lines.items():
        key = pointer.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
        shown = text.splitlines()[line - 1]
        assert pointer == "" or f'"{key}"' in shown or shown.strip() in ("{", "[", "{},"), (pointer, shown)
    assert lines["/items/0/price"] == text.splitlines().index('      "price": "12.50"') + 1
    assert lines["/note"] == len(text.splitlines()) - 1


def test_a_one_line_payload_has_every_value_on_line_one_and_a_later_line_counts_its_breaks():
    assert set(value_lines(json.dumps(ORDER), _pointers(ORDER)).values()) == {1}
    # Only the pointers asked for, of those the text holds.
    assert value_lines('{"a": 1,\n\n "b": [1,\n 2]}', ["", "/a", "/b", "/b/0", "/b/1", "/b/2", "/c"]) == {
        "": 1, "/a": 1, "/b": 3, "/b/0": 3, "/b/1": 4}
    assert value_lines('{"a": 1,\n "b": [1,\n 2]}', ["/b/1"]) == {"/b/1": 3}


def test_an_error_points_at_its_value_or_at_the_nearest_value_the_text_holds():
    text = json.dumps(ORDER, indent=2)
    found = failing_lines(text, [{"path": "/items/0/price", "message": "'12.50' is not of type 'number'"},
                                 {"path": "/shipping/postcode", "message": "missing"},
                                 {"path": "", "message": "'customer_id' is a required property"},
                                 {"path": "/shipping", "message": "too few properties"}])
    rows = text.splitlines()
    assert [(f.line, rows[f.line - 1].strip()) for f in found] == [
        (1, "{"), (rows.index('      "price": "12.50"') + 1, '"price": "12.50"'), (rows.index('  "shipping": {') + 1, '"shipping": {')]
    assert found[2].pointers == ("/shipping/postcode", "/shipping")


@pytest.mark.parametrize("text", ["", "{", "not json", '{"a" 1}', '{"a": tru}', "[1,", '{"a": 1} {"b": 2}', "}",
                                  '{"a": 1]', "[1}", '{"a": }'])
def test_a_text_that_is_not_json_marks_no_line(text):
    assert failing_lines(text, [{"path": "/a", "message": "m"}]) == []


@pytest.mark.parametrize("opening, value, closing", [("[", "", "]"), ('{"a~/b": ', "1", "}"), ('[{"k": ', "2", "}]")])
def test_a_text_nested_deep_is_followed_in_memory_that_grows_with_the_depth_not_its_square(opening, value, closing):
    """A 100,000 deep payload made its editor hold every value's pointer, each as long as its
    depth: 22 GB, and the dashboard was killed. Only the errors' pointers are followed now."""
    depth = 5_000
    text = opening * depth + value + closing * depth
    pointer = "/a~0~1b" if opening.startswith("{") else "/0/k" if opening == '[{"k": ' else "/0"
    errors = [{"path": "", "message": "payload nests too deeply to be parsed"},
              {"path": pointer * 3, "message": "deeper"}, {"path": pointer * 3 + "/x/y", "message": "not there"}]
    tracemalloc.start()
    try:
        found = failing_lines(text, errors)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == [FailingLine(1, ("/", pointer * 3, pointer * 3 + "/x/y"),
                                 ("payload nests too deeply to be parsed", "deeper", "not there"))]
    # A few bytes a level (one pointer a level: 25 MB at this depth).
    assert peak < 20 * len(text), peak


def test_a_deep_value_is_found_on_its_line():
    text = "[\n" * 3_000 + '{"price": "1"}' + "\n]" * 3_000
    found = failing_lines(text, [{"path": "/0" * 3_000 + "/price", "message": "not a number"}])
    assert [(f.line, f.pointers) for f in found] == [(3_001, ("/0" * 3_000 + "/price",))]


@pytest.fixture
def settings(tmp_path, nats_server):
    """The orders schema: prices are numbers."""
    return support.make_settings(tmp_path, nats_server.url, schemas_dir=support.orders_schema_folder(tmp_path, SCHEMA))


def test_the_editor_marks_the_failing_line_in_its_gutter_and_lists_it_beside(app):
    operator = support.logged_in(app, "operator")
    entry_id = support.dead_letter(app, 1, payload=ORIGINAL)
    page = operator.get(f"/entries/{entry_id}/edit").get_data(as_text=True)
    line = PRETTY.splitlines().index('      "price": "12.50"') + 1
    assert re.search(rf'<span class="failing">{line}</span>', page)
    assert f'data-failing-lines="{line}"' in page
    assert f'data-goto-line="{line}">Line {line}</button>' in page
    # The live check of a new text says its own lines: the same error on one line is line 1.
    form = {"payload": ORIGINAL.decode(), "encoding": "text", "csrf_token": support.csrf_token(operator, f"/entries/{entry_id}/edit")}
    fragment = operator.post(f"/entries/{entry_id}/validate", data=form).get_data(as_text=True)
    assert 'data-failing-lines="1"' in fragment and 'data-goto-line="1">Line 1</button>' in fragment
    form["payload"] = PRETTY.replace('"12.50"', "12.50")
    fragment = operator.post(f"/entries/{entry_id}/validate", data=form).get_data(as_text=True)
    assert 'data-failing-lines=""' in fragment and "data-goto-line" not in fragment



def test_the_confirmation_names_the_failing_line_without_a_button_that_does_nothing(app, nats_server):
    """"Line 11" on the plain Republish confirmation was a button with no editor to put a cursor in."""
    operator = support.logged_in(app, "operator")
    entry_id = support.dead_letter(app, 1, payload=ORIGINAL)
    page = operator.get(f"/entries/{entry_id}/republish?version=1").get_data(as_text=True)
    assert "data-goto-line" not in page and re.search(r"<li>Line \d+:", page)


def test_the_editor_the_confirmation_and_the_live_check_answer_a_payload_nested_100000_deep(app):
    """The editor of such a payload was killed for its memory (D1); it is shown as its text, and
    the check says it cannot be read."""
    operator = support.logged_in(app, "operator")
    deep = "[" * 100_000 + "]" * 100_000
    entry_id = support.dead_letter(app, 1, payload=deep.encode())
    for path in (f"/entries/{entry_id}/edit", f"/entries/{entry_id}/republish", f"/entries/{entry_id}"):
        response = operator.get(path)
        assert response.status_code == 200, path
        assert deep in response.get_data(as_text=True), path
    edit = operator.get(f"/entries/{entry_id}/edit").get_data(as_text=True)
    assert "payload nests too deeply to be parsed" in edit and 'data-failing-lines="1"' in edit
    # What an operator types: 40,000 deep, within a form's bound.
    typed = "[" * 40_000 + "]" * 40_000
    form = {"payload": typed, "encoding": "text", "csrf_token": support.csrf_token(operator, f"/entries/{entry_id}/edit")}
    response = operator.post(f"/entries/{entry_id}/validate", data=form)
    fragment = response.get_data(as_text=True)
    assert response.status_code == 200 and "payload nests too deeply to be parsed" in fragment
    assert 'data-failing-lines="1"' in fragment and 'data-goto-line="1">Line 1</button>' in fragment


def _done(response) -> str:
    """The sentence the page shows where its content starts (static/app.js says it in the page's status region)."""
    page = html.unescape(response.get_data(as_text=True))
    match = re.search(r'<div class="done" data-done>\s*<p>(.*?)</p>\s*</div>', page, re.S)
    assert match, "no confirmation on the page"
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(1)).split())


def test_each_action_says_what_it_did_on_the_page_it_leads_to_once(app, nats_server):
    support.make_orders_stream(nats_server.url)
    operator = support.logged_in(app, "operator")
    entry_id = support.dead_letter(app, 1, payload=ORIGINAL)
    token = support.csrf_token(operator, f"/entries/{entry_id}/edit")

    edited = PRETTY.replace('"12.50"', "12.50")
    response = operator.post(f"/entries/{entry_id}/republish", data={
        "version": "1", "payload": edited, "encoding": "text", "csrf_token": token}, follow_redirects=True)
    assert _done(response) == (f"Republished entry {entry_id} with the edited payload to orders.created, "
                               "stored by stream ORDERS as message 1. See it in the timeline")
    assert 'href="#timeline-title"' in response.get_data(as_text=True)
    assert 'data-done' not in operator.get(f"/entries/{entry_id}").get_data(as_text=True)  # said once

    response = operator.post(f"/entries/{entry_id}/reopen", data={"version": "2", "csrf_token": token},
                             follow_redirects=True)
    assert _done(response) == f"Reopened entry {entry_id}: it is open again. See it in the timeline"
    response = operator.post(f"/entries/{entry_id}/republish", data={"version": "3", "force": "on", "csrf_token": token},
                             follow_redirects=True)
    assert _done(response) == (f"Republished entry {entry_id} to orders.created, stored by stream ORDERS as message 2. "
                               "See it in the timeline")
    other = support.dead_letter(app, 2, payload=ORIGINAL)
    response = operator.post(f"/entries/{other}/close", data={"version": "1", "note": "done", "csrf_token": token},
                             follow_redirects=True)
    assert _done(response) == f"Closed entry {other}: it is acknowledged and no longer open. See it in the timeline"
