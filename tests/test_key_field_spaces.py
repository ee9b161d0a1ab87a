"""A key field's filter value was trimmed: ``field.Customer=%20C-9`` listed the entry whose
customer is "C-9", a bulk close by it closed that one, and ``field.Customer=%20`` was no filter at
all. A key field's value is now matched exactly as given (docs/api.md: "exactly C-42"), spaces
and all, in the list, the API, the summary, the export, bulk jobs, saved views and the command
line; only an empty value (the list's empty input) is no filter."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from . import support

pytestmark = pytest.mark.both_databases

FIELDS = (("Customer", "/customer/id"), ("order_id", "/order_id"))
VALUES = [" C-9", "C-9 ", "C-9", "\tC-9"]


@pytest.fixture
def offline_app(make_app, database_url):
    """The offline app with key fields (field.Customer, field.order_id)."""
    return make_app(database_url=database_url, list_fields=FIELDS)


def _store(app) -> dict[str, int]:
    return {value: support.dead_letter(app, seq, payload=json.dumps({"customer": {"id": value},
                                                                     "order_id": f"o-{seq}"}).encode())
            for seq, value in enumerate(VALUES, start=1)}


def _listed(client, headers, value: str) -> list[int]:
    answer = client.get(f"/api/entries?field.Customer={quote(value)}", headers=headers)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return [e["id"] for e in answer.get_json()["entries"]]


def test_a_key_fields_value_is_matched_as_given_spaces_and_all(offline_app, tokens):
    ids = _store(offline_app)
    client, headers = offline_app.test_client(), support.bearer(tokens["viewer"])
    for value, entry_id in ids.items():
        assert _listed(client, headers, value) == [entry_id], repr(value)
        exported = client.get(f"/api/export.json?field.Customer={quote(value)}", headers=headers)
        assert [e["id"] for e in exported.get_json()] == [entry_id], repr(value)
        summary = client.get(f"/api/summary?field.Customer={quote(value)}", headers=headers).get_json()
        assert sum(summary["counts"].values()) == 1, (value, summary)
    assert _listed(client, headers, " ") == []  # spaces are a value: no customer's id is " "
    assert _listed(client, headers, "") == sorted(ids.values(), reverse=True)  # empty: no filter


def test_a_bulk_job_by_a_key_field_takes_the_entry_of_that_exact_value(offline_app, tokens):
    ids = _store(offline_app)
    client = offline_app.test_client()
    answer = client.post("/api/bulk", json={"action": "close", "filter": {"field.Customer": " C-9"}},
                         headers=support.bearer(tokens["operator"]))
    assert answer.status_code == 202, answer.get_data(as_text=True)
    job = client.get(f"/api/jobs/{answer.get_json()['job']}", headers=support.bearer(tokens["viewer"])).get_json()
    assert [item["entry_id"] for item in job["items"]] == [ids[" C-9"]]
    assert job["selection_text"] == "filter status=open field.Customer=' C-9'"  # its space seen
    nothing = client.post("/api/bulk", json={"action": "close", "filter": {"field.Customer": " "}},
                          headers=support.bearer(tokens["operator"]))
    assert nothing.status_code == 400 and nothing.get_json()["error"] == "No entries match; nothing to do."


def test_the_command_line_matches_a_key_fields_value_as_given(offline_app):
    ids = _store(offline_app)
    runner = offline_app.test_cli_runner()
    listed = runner.invoke(args=["entries", "list", "--field", "Customer=\tC-9", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [e["id"] for e in json.loads(listed.output)["entries"]] == [ids["\tC-9"]]
    dry = runner.invoke(args=["jobs", "start", "close", "--field", "Customer=C-9 ", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.startswith("Would close 1 entr"), dry.output
    made = runner.invoke(args=["jobs", "start", "close", "--field", "Customer= C-9", "--json"])
    assert made.exit_code == 0, made.output
    assert json.loads(made.output)["total"] == 1


def test_the_list_page_and_a_saved_view_keep_the_spaces_typed(offline_app, auth):
    ids = _store(offline_app)
    client = auth.client("viewer")
    page = client.get("/", query_string={"field.Customer": "C-9 "}).get_data(as_text=True)
    shown = {entry_id for entry_id in ids.values() if f'href="/entries/{entry_id}' in page}
    assert shown == {ids["C-9 "]}
    assert 'value="C-9 "' in page  # the input keeps what was typed
    assert "1 dead letter shown for Customer “C-9 ”" in page  # its space seen where the count is said
    saved = client.post("/views", data={"name": "spaced", "page": "list", "field.Customer": " C-9",
                                        "csrf_token": support.csrf_token(client, "/")})
    assert saved.status_code in (302, 303), saved.get_data(as_text=True)
    view = next(v for v in client.get("/api/views").get_json()["views"] if v["name"] == "spaced")
    assert view["filters"] == {"field.Customer": " C-9"}
    opened = client.get(view["url"]).get_data(as_text=True)
    assert {entry_id for entry_id in ids.values() if f'href="/entries/{entry_id}' in opened} == {ids[" C-9"]}
