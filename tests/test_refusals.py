"""Refusals are raised and answered by the error table: one status and one title for each kind,
its sentence as JSON, as text for htmx or as the error page, whatever the route was about to do."""

from __future__ import annotations

import pytest

from dlq_dashboard.errors import Forbidden, ForeignSite, Hidden, NotSaved, RequestRefused
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.web.errors import REFUSALS, status_of, title_of

from . import support


@pytest.mark.parametrize("kind, status, title", [
    (Forbidden, 403, "Not allowed"), (Hidden, 403, "Hidden"), (NotSaved, 409, "Not saved"),
    (RequestRefused, 400, "Refused"), (ForeignSite, 403, "Refused"),
])
def test_each_refusal_has_one_status_and_one_title(kind, status, title):
    exc = kind("Why not.")
    assert (status_of(exc), title_of(exc), isinstance(exc, REFUSALS)) == (status, title, True)


def test_a_viewer_posting_an_operators_form_gets_the_refusal_page_not_the_entry_it_would_have_changed(
        offline_app, auth):
    entry_id = support.dead_letter(offline_app, 1)
    client = auth.client("viewer")
    token = support.csrf_token(client, "/")
    page = client.post(f"/entries/{entry_id}/close", data={"csrf_token": token, "version": "1"})
    text = page.get_data(as_text=True)
    assert page.status_code == 403 and "<title>Not allowed" in text, text
    assert "This needs the operator role; viewer" in text and "changed since" not in text

    fragment = client.post(f"/entries/{entry_id}/close", data={"csrf_token": token, "version": "1"},
                           headers={"HX-Request": "true"})
    assert fragment.status_code == 403 and fragment.mimetype == "text/plain"
    assert fragment.get_data(as_text=True).startswith("This needs the operator role; viewer")
    assert runtime_of(offline_app).store.get_entry(entry_id).status == "open"


def test_a_viewers_token_gets_the_refusal_as_json(offline_app, tokens):
    entry_id = support.dead_letter(offline_app, 1)
    response = offline_app.test_client().post(f"/api/entries/{entry_id}/close", json={"version": 1},
                                              headers=support.bearer(tokens["viewer"]))
    assert response.status_code == 403
    assert response.get_json() == {"error": "This needs the operator role; token:test-viewer has viewer."}
