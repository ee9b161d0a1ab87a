"""A request's JSON body is read only as application/json, in UTF-8 (RFC 8259), and what cannot
be read is a sentence for a person: a valid JSON number too long to read is not "not JSON"."""

from __future__ import annotations

import pytest

from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.web.openapi import openapi_document

from . import support

CLOSE = b'{"version": 1, "note": "x"}'


def close(app, token: str, entry_id: int, body: bytes, content_type: str | None):
    headers = {**support.bearer(token), **({"Content-Type": content_type} if content_type else {})}
    return app.test_client().post(f"/api/entries/{entry_id}/close", data=body, headers=headers)


def status_of(app, entry_id: int) -> str:
    return runtime_of(app).store.get_entry(entry_id, with_history=False).status


@pytest.mark.parametrize("content_type, words", [
    ("application/json; charset=latin-1", "is sent in charset 'latin-1': JSON is read as UTF-8 only"),
    ("application/json;charset=ISO-8859-1", "is sent in charset 'ISO-8859-1'"),
    ("application/merge-patch+json", "(it is sent as 'application/merge-patch+json')"),
    ("application/vnd.api+json", "(it is sent as 'application/vnd.api+json')"),
    ("text/plain", "(it is sent as 'text/plain')"),
    (None, "Send a JSON object as the request body (Content-Type: application/json)."),
])
def test_a_body_not_sent_as_utf8_application_json_is_a_415_and_nothing_changes(offline_app, tokens, content_type,
                                                                               words):
    entry_id = support.dead_letter(offline_app, 1)
    response = close(offline_app, tokens["operator"], entry_id, CLOSE, content_type)
    assert response.status_code == 415, response.get_data(as_text=True)
    assert words in response.get_json()["error"]
    assert status_of(offline_app, entry_id) == "open"


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON; Charset=UTF-8", 'application/json; charset="utf-8"'])
def test_a_body_sent_as_application_json_in_utf8_is_read(offline_app, tokens, content_type):
    entry_id = support.dead_letter(offline_app, 1)
    response = close(offline_app, tokens["operator"], entry_id, CLOSE, content_type)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert status_of(offline_app, entry_id) == "closed"


def test_a_number_of_more_digits_than_can_be_read_is_a_400_saying_so(offline_app, tokens):
    entry_id = support.dead_letter(offline_app, 1)
    for number in (b"9" * 5000, b"-" + b"9" * 4301):
        response = close(offline_app, tokens["operator"], entry_id, b'{"version": %s, "note": "x"}' % number,
                         "application/json")
        assert response.status_code == 400
        error = response.get_json()["error"]
        assert error.startswith("A number in the request body has more than 4,300 digits"), error
        assert "not JSON" not in error and "sys." not in error
    assert status_of(offline_app, entry_id) == "open"
    # As many digits as can be read: read, and refused as the version it is not.
    response = close(offline_app, tokens["operator"], entry_id, b'{"version": %s, "note": "x"}' % (b"9" * 4300),
                     "application/json")
    assert response.status_code == 400 and "digits" not in response.get_json()["error"]


def test_every_operation_with_a_body_lists_the_415(offline_app):
    doc = openapi_document(offline_app)
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            assert ("415" in operation["responses"]) == ("requestBody" in operation), (method, path)
    assert "application/json" in doc["components"]["responses"]["E415"]["description"]
