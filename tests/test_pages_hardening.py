"""What outside checks of the pages found: notes without a bound, a malformed schema-errors
header told twice, a form body that is not UTF-8 refused as a missing CSRF token, and a
"failed again" listed above the republish it followed."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from dlq_dashboard.actions.close import NOTE_MAX
from dlq_dashboard.db.models import Action, Entry
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import parse_time

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
                              ("viewer", "/audit", f'<td class="note-text" data-label="note">{cut}</td>')):
        page = auth.client(role).get(path).get_data(as_text=True)
        assert shown in page, (role, path)
        assert "z" * NOTE_MAX not in page
    css = client.get("/static/app.css").get_data(as_text=True)
    assert ".note-text { overflow-wrap: anywhere; }" in css


# --- the schema errors a message carries -------------------------------------------------------

def test_a_malformed_schema_errors_header_is_told_once(offline_app, auth):
    engine = runtime_of(offline_app).engine
    malformed = support.dead_letter(engine, 1, Dlq_Schema_Errors="[{not json")
    empty = support.dead_letter(engine, 2, Dlq_Schema_Errors="[]")
    none = support.dead_letter(engine, 3)
    viewer = auth.client("viewer")
    page = viewer.get(f"/entries/{malformed}").get_data(as_text=True)
    assert "Dlq-Schema-Errors is not valid JSON" in page
    assert "carries no Dlq-Schema-Errors header" not in page
    page = viewer.get(f"/entries/{empty}").get_data(as_text=True)
    assert "Its Dlq-Schema-Errors header lists no errors." in page and "carries no" not in page
    assert "carries no Dlq-Schema-Errors header" in viewer.get(f"/entries/{none}").get_data(as_text=True)


# --- text that is not UTF-8 ------------------------------------------------------------------

@pytest.mark.parametrize("note", [b"\xff\xfe", b"%E2%82"], ids=["raw bytes", "percent-encoded"])
def test_a_form_that_is_not_utf8_is_refused_as_such_not_as_a_missing_csrf_token(offline_app, auth, note):
    engine = runtime_of(offline_app).engine
    entry_id = support.dead_letter(engine, 1)
    operator = auth.client("operator")
    token = support.csrf_token(operator, "/").encode()
    response = operator.post(f"/entries/{entry_id}/close", data=b"version=1&note=" + note + b"&csrf_token=" + token,
                             content_type="application/x-www-form-urlencoded")
    page = response.get_data(as_text=True)
    assert response.status_code == 400
    assert "The form is not UTF-8 text (at &#39;note&#39;): send it encoded as UTF-8." in page
    assert "CSRF" not in page
    assert runtime_of(offline_app).store.get_entry(entry_id).status == "open"  # nothing kept, not even U+FFFD
    # UTF-8 goes through, and the query string is held to the same rule.
    kept = operator.post(f"/entries/{entry_id}/close", data=b"version=1&note=caf%C3%A9&csrf_token=" + token,
                         content_type="application/x-www-form-urlencoded")
    assert kept.status_code == 303 and runtime_of(offline_app).store.get_entry(entry_id).close_note == "café"
    query = operator.get("/?q=%FF")
    assert query.status_code == 400 and "The query string is not UTF-8 text (at &#39;q&#39;)" in query.get_data(
        as_text=True)


# --- the timeline ------------------------------------------------------------------------------

@pytest.mark.parametrize("named", [True, False], ids=["by its msgId", "by the time alone"])
def test_failed_again_is_listed_after_the_republish_it_followed_within_one_second(app, nats_server, auth, named):
    from dlq_dashboard.actions.republish import republish_entry

    rt = runtime_of(app)
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": 1}'])
    outcome = republish_entry(rt, entry_id, 1, actor="alice")
    [rep] = rt.store.republishes_of(entry_id)
    published = rep["published_at"]
    # The consumer's clock says the failure came in the same second, to the second: before the
    # republish's own time, which has microseconds.
    failed_at = published[:19] + "Z"
    assert parse_time(failed_at) < parse_time(published)
    headers = {"Dlq-Replay-Of": rt.store.get_entry(entry_id).dlq_ref, "Dlq-Failed-At": failed_at,
               "Dlq-Reason": "fatal"}
    if named:
        headers["Dlq-Original-Msg-Id"] = outcome.publish.msg_id
    replay = support.dead_letter(app, 500, **{k.replace("-", "_"): v for k, v in headers.items()})
    page = auth.client("viewer").get(f"/entries/{entry_id}").get_data(as_text=True)
    timeline = page[page.index('id="timeline-title"'):]
    republished = timeline.index("<strong>Republished to orders.created</strong>")
    again = timeline.index("<strong>The republished message failed again</strong>")
    assert republished < again, "failed again is listed above the republish it followed"
    assert f'href="/entries/{replay}"' in timeline[again:]
