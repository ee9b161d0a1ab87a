"""What outside checks of the pages found: notes without a bound, a malformed schema-errors
header told twice, a form body that is not UTF-8 refused as a missing CSRF token, and a
"failed again" listed above the republish it followed."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from dlq_dashboard.actions.close import NOTE_MAX
from dlq_dashboard.db.models import Action, Entry
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases

TOO_LONG = "x" * (NOTE_MAX + 1)
SENTENCE = f"The note is {NOTE_MAX + 1:,} characters long; a note holds at most {NOTE_MAX:,}."


# --- close notes -----------------------------------------------------------------------------

def test_a_close_note_longer_than_the_bound_is_refused_with_a_sentence_on_the_api_the_form_and_the_cli(
        offline_app, auth, tokens):
    engine = runtime_of(offline_app).engine
    entry_id = support.dead_letter(engine, 1)
    client = offline_app.test_client()

    api = client.post(f"/api/entries/{entry_id}/close", json={"version": 1, "note": TOO_LONG},
                      headers=support.bearer(tokens["operator"]))
    assert (api.status_code, api.get_json()) == (400, {"error": SENTENCE})
    bulk = client.post("/api/bulk", json={"action": "close", "ids": [entry_id], "note": TOO_LONG},
                       headers=support.bearer(tokens["operator"]))
    assert (bulk.status_code, bulk.get_json()) == (400, {"error": SENTENCE})

    operator = auth.client("operator")
    page = operator.get(f"/entries/{entry_id}").get_data(as_text=True)
    assert f'<input name="note" maxlength="{NOTE_MAX}"' in page
    form = operator.post(f"/entries/{entry_id}/close", data={"version": "1", "note": TOO_LONG,
                                                             "csrf_token": support.csrf_token(operator, "/")})
    assert form.status_code == 400 and SENTENCE in form.get_data(as_text=True)

    cli = offline_app.test_cli_runner().invoke(args=["entries", "close", str(entry_id), "--note", TOO_LONG])
    assert cli.exit_code == 2 and SENTENCE in cli.output
    assert runtime_of(offline_app).store.get_entry(entry_id).status == "open"

    # At the bound it is kept whole.
    kept = client.post(f"/api/entries/{entry_id}/close", json={"version": 1, "note": "y" * NOTE_MAX},
                       headers=support.bearer(tokens["operator"]))
    assert kept.status_code == 200 and kept.get_json()["entry"]["close_note"] == "y" * NOTE_MAX


def test_a_note_kept_before_the_bound_is_shown_cut_and_wrapped(offline_app, auth, tokens):
    engine = runtime_of(offline_app).engine
    entry_id = support.dead_letter(engine, 1)
    client = offline_app.test_client()
    assert client.post(f"/api/entries/{entry_id}/close", json={"version": 1, "note": "short"},
                       headers=support.bearer(tokens["operator"])).status_code == 200
    with engine.begin() as conn:  # as an older release kept it: 200,000 characters, no space
        conn.execute(update(Entry).where(Entry.id == entry_id).values(close_note="z" * 200_000))
        conn.execute(update(Action).where(Action.entry_id == entry_id).values(note="z" * 200_000))
    cut = "z" * (NOTE_MAX - 1) + "…"
    for role, path, shown in (("operator", f"/entries/{entry_id}", f'<span class="note-text">{cut}</span>'),
                              ("viewer", f"/entries/{entry_id}", f'<p class="quote note-text">{cut}</p>'),
                              ("viewer", "/audit", f'<td class="note-text">{cut}</td>')):
        page = auth.client(role).get(path).get_data(as_text=True)
        assert shown in page, (role, path)
        assert "z" * NOTE_MAX not in page
    css = client.get("/static/app.css").get_data(as_text=True)
    assert ".note-text { overflow-wrap: anywhere; }" in css
