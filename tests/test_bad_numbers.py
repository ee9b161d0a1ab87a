"""Whole numbers in requests are read and bounded in one place (dlq_dashboard/numbers.py): a
value out of range is a 400 with a sentence, never a database or slice error."""

from __future__ import annotations

import json
import re

import pytest
from sqlalchemy import func, select

from dlq_dashboard.db.models import Job
from dlq_dashboard.errors import InvalidRequest
from dlq_dashboard.numbers import ID_MAX, VERSION_MAX, whole_number
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases

BIG = 2**64  # past every column: SQLite's INTEGER and PostgreSQL's bigint alike


@pytest.mark.parametrize("raw, expected", [(0, 0), ("42", 42), (" 7 ", 7), (ID_MAX, ID_MAX), (str(ID_MAX), ID_MAX)])
def test_a_whole_number_in_range_is_read(raw, expected):
    assert whole_number(raw, "n") == expected


@pytest.mark.parametrize("raw", [ID_MAX + 1, BIG, -1, "-1", "1.5", 1.5, True, None, "", "abc", "٣", [1], {"id": 1}])
def test_anything_else_is_refused_with_a_sentence_naming_the_parameter(raw):
    with pytest.raises(InvalidRequest, match=r"^after .* is not valid: use a whole number"):
        whole_number(raw, "after")


def test_the_bounds_are_said_in_the_sentence():
    with pytest.raises(InvalidRequest, match=r"from 1 to 500 \(entries a page\)$"):
        whole_number("501", "limit", low=1, high=500, what="entries a page")
    with pytest.raises(InvalidRequest, match="of 1 or more, below 2\\^63"):
        whole_number(str(ID_MAX + 1), "id", low=1)


def jobs_made(app) -> int:
    with runtime_of(app).engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Job)).scalar()


@pytest.mark.parametrize("body, named", [
    ({"ids": [BIG]}, "id"),
    ({"ids": [{"id": 1, "version": BIG}]}, "version"),
    ({"ids": [f"1:{BIG}"]}, "version"),
    ({"ids": [1.5]}, "1.5 is not an entry id"),
    ({"ids": [True]}, "True is not an entry id"),
    ({"filter": {}, "upto": BIG}, "upto"),
])
def test_a_bulk_request_with_an_id_or_version_out_of_range_is_a_400_and_makes_no_job(offline_app, tokens, body, named):
    support.dead_letter(offline_app, 1)
    response = offline_app.test_client().post("/api/bulk", json={"action": "close", "note": "x", **body},
                                              headers=support.bearer(tokens["operator"]))
    assert response.status_code == 400
    assert named in response.get_json()["error"]
    assert jobs_made(offline_app) == 0


def test_the_bulk_preview_form_refuses_an_id_out_of_range(offline_app, auth):
    client = auth.client("operator")
    response = client.post("/bulk/preview", data={"ids": [str(BIG)], "action": "close",
                                                  "csrf_token": support.csrf_token(client, "/")})
    assert response.status_code == 400
    assert "id &#39;18446744073709551616&#39; is not valid" in response.get_data(as_text=True)


@pytest.mark.parametrize("path, named", [
    (f"/entries/new?after={BIG}", "after"),
    ("/entries/new?after=abc", "after"),
    (f"/api/export.json?limit={BIG}", "limit"),
    (f"/api/export.ndjson?limit={BIG}", "limit"),
    (f"/api/export.csv?limit={BIG}", "limit"),
    (f"/api/jobs/1?limit={BIG}", "limit"),
    (f"/api/audit?entry={BIG}", "entry"),
    (f"/api/audit?limit={BIG}", "limit"),
])
def test_a_number_out_of_range_in_a_url_is_a_400_naming_it(offline_app, tokens, path, named):
    response = offline_app.test_client().get(path, headers=support.bearer(tokens["admin"]))
    assert response.status_code == 400
    assert f"{named} " in response.get_json()["error"]


@pytest.mark.parametrize("action", ["close", "reopen", "republish"])
def test_a_version_out_of_range_is_a_400_and_changes_nothing(offline_app, tokens, action):
    entry_id = support.dead_letter(offline_app, 1)
    response = offline_app.test_client().post(f"/api/entries/{entry_id}/{action}", json={"version": BIG},
                                              headers=support.bearer(tokens["admin"]))
    assert response.status_code == 400
    assert f"version {BIG} is not valid: use a whole number from 0 to {VERSION_MAX:,}" in response.get_json()["error"]
    entry = offline_app.test_client().get(f"/api/entries/{entry_id}", headers=support.bearer(tokens["admin"])).get_json()
    assert (entry["status"], entry["version"]) == ("open", 1)


def test_status_any_shows_every_status_as_the_select_does(offline_app, auth):
    support.dead_letter(offline_app, 1)
    closed = support.dead_letter(offline_app, 2)
    client = auth.client("operator")
    client.post(f"/entries/{closed}/close", data={"version": "1", "note": "done",
                                                  "csrf_token": support.csrf_token(client, f"/entries/{closed}")})

    def shown(path: str) -> str:  # the page without what differs from one response to the next
        response = client.get(path)
        assert response.status_code == 200
        # Tokens, nonces and "4 s ago" (a second may pass between two requests).
        # The CSRF token is signed with the time, in the forms and in the page's meta tag.
        return re.sub(r'(nonce|value|data-csrf-token)="[^"]*"|<meta name="csrf-token" content="[^"]*"'
                      r'|title="[^"]* ago"|>[^<>]* ago<', "", response.get_data(as_text=True))

    assert f'href="/entries/{closed}"' in shown("/?status=any")
    assert shown("/?status=any") == shown("/?status=")
    assert shown("/groups?status=any") == shown("/groups?status=")
    assert shown("/groups?status=any") != shown("/groups")  # the default is open entries only


def test_the_favicon_is_served_to_anyone(offline_app):
    response = offline_app.test_client().get("/favicon.ico")
    assert response.status_code == 200
    assert response.mimetype == "image/vnd.microsoft.icon"
    assert response.data[:4] == b"\x00\x00\x01\x00"  # an icon file
    page = offline_app.test_client().get("/login").get_data(as_text=True)
    assert 'rel="icon" href="/static/favicon.ico"' in page


@pytest.mark.parametrize("action", ["close", "reopen", "republish"])
@pytest.mark.parametrize("sent", ["1", 1.5, True, "abc", [1]])
def test_a_json_version_that_is_no_json_whole_number_is_a_400_and_changes_nothing(offline_app, tokens, action, sent):
    # docs/api.md and the OpenAPI document say integer; "1" and true were taken as 1.
    entry_id = support.dead_letter(offline_app, 1)
    client, admin = offline_app.test_client(), support.bearer(tokens["admin"])
    if action == "reopen":
        assert client.post(f"/api/entries/{entry_id}/close", json={"version": 1}, headers=admin).status_code == 200
    before = client.get(f"/api/entries/{entry_id}", headers=admin).get_json()
    response = client.post(f"/api/entries/{entry_id}/{action}", json={"version": sent}, headers=admin)
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error.startswith(f"version {json.dumps(sent)} is not valid: send the entry's version as you saw it as a "
                            f"JSON whole number from 0 to {VERSION_MAX:,}") and error.count(". ") == 0, error
    after = client.get(f"/api/entries/{entry_id}", headers=admin).get_json()
    assert (after["status"], after["version"]) == (before["status"], before["version"])


def test_a_json_version_written_with_a_point_zero_is_that_whole_number(offline_app, tokens):
    # JSON Schema's integer (the OpenAPI document's Version) takes 1.0; the server refused it.
    entry_id = support.dead_letter(offline_app, 1)
    client, admin = offline_app.test_client(), support.bearer(tokens["admin"])
    response = client.post(f"/api/entries/{entry_id}/close", json={"version": 1.0}, headers=admin)
    assert response.status_code == 200, response.get_json()
    entry = client.get(f"/api/entries/{entry_id}", headers=admin).get_json()
    assert (entry["status"], entry["version"]) == ("closed", 2)


def test_a_groups_json_version_or_a_bulk_ids_version_as_text_is_a_400_and_a_forms_text_still_works(
        offline_app, tokens, auth):
    entry_id = support.dead_letter(offline_app, 1)
    group = runtime_of(offline_app).store.group_of(entry_id)[0]
    client, operator = offline_app.test_client(), support.bearer(tokens["operator"])
    state = client.post(f"/api/groups/{group}/state", json={"version": "0", "state": "investigating"}, headers=operator)
    assert state.status_code == 400
    assert state.get_json()["error"].startswith("version \"0\" is not valid: send the group's version as you saw it")
    assert client.get(f"/api/groups/{group}", headers=operator).get_json()["state"] == "open"
    bulk = client.post("/api/bulk", json={"action": "close", "note": "x", "ids": [{"id": entry_id, "version": "1"}]},
                       headers=operator)
    assert bulk.status_code == 400 and bulk.get_json()["error"].startswith('version "1" is not valid')
    assert jobs_made(offline_app) == 0
    # A form sends text: its version is read as before.
    browser = auth.client("operator")
    closed = browser.post(f"/entries/{entry_id}/close", data={"version": "1", "note": "done",
                                                              "csrf_token": support.csrf_token(browser, f"/entries/{entry_id}")})
    assert closed.status_code == 303
    entry = client.get(f"/api/entries/{entry_id}", headers=operator).get_json()
    assert (entry["status"], entry["version"]) == ("closed", 2)
    assert client.post(f"/api/entries/{entry_id}/reopen", json={"version": 2}, headers=operator).status_code == 200


LONG = int("1" * 4300)  # as many digits as Python reads as a number


@pytest.mark.parametrize("path, body", [
    ("/api/entries/{id}/close", {"version": LONG}),
    ("/api/entries/{id}/republish", {"version": LONG}),
    ("/api/entries/{id}/close", {"version": "2" * 4300}),
    ("/api/bulk", {"action": "close", "note": "x", "ids": [LONG]}),
    ("/api/bulk", {"action": "close", "note": "x", "ids": [{"id": 1, "version": LONG}]}),
    ("/api/bulk", {"action": "close", "note": "x", "ids": [[3] * 2000]}),
])
def test_a_bad_value_thousands_of_characters_long_is_quoted_in_at_most_40(offline_app, tokens, path, body):
    entry_id = support.dead_letter(offline_app, 1)
    response = offline_app.test_client().post(path.format(id=entry_id), json=body,
                                              headers=support.bearer(tokens["admin"]))
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert "…" in error and len(error) < 200, error[:300]
    assert not re.search(r"[123][123, ]{40}", error), error[:300]
