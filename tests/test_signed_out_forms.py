"""A form posted after its session ended (logout in another tab, an expired session): nothing is
done, and the answer is a page saying so with what was typed, not a redirect that loses it."""

from __future__ import annotations

from sqlalchemy import select

from dlq_dashboard.db.models import Entry
from dlq_dashboard.runtime import runtime_of

from . import support


def _signed_out_client(app):
    """An operator's client with a page's CSRF token, whose session then ended elsewhere."""
    client = support.logged_in(app, "operator")
    token = support.csrf_token(client, "/views")
    other = app.test_client()
    other.set_cookie(app.config["SESSION_COOKIE_NAME"], client.get_cookie(app.config["SESSION_COOKIE_NAME"]).value)
    assert other.post("/logout", data={"csrf_token": token}).status_code == 302
    return client, token


def _status(app, entry_id: int) -> str:
    with runtime_of(app).engine.connect() as conn:
        return conn.execute(select(Entry.status).where(Entry.id == entry_id)).scalar_one()


def test_a_close_posted_after_the_session_ended_does_nothing_and_shows_the_note_as_text(app):
    entry_id = support.dead_letter(app, 1)
    client, token = _signed_out_client(app)
    note = "customer <b>refunded</b> by hand\nticket 42"

    answer = client.post(f"/entries/{entry_id}/close", data={"version": "1", "note": note, "csrf_token": token},
                         headers={"Referer": f"http://localhost/entries/{entry_id}"})

    assert answer.status_code == 401
    html = answer.get_data(as_text=True)
    assert "You were signed out, so nothing was done" in html
    assert "Your note, not saved" in html
    assert "customer &lt;b&gt;refunded&lt;/b&gt; by hand\nticket 42</textarea>" in html
    assert f'href="/login?next=/entries/{entry_id}"' in html
    assert _status(app, entry_id) == "open"


def test_an_edited_republish_posted_after_the_session_ended_shows_the_edit(app):
    entry_id = support.dead_letter(app, 1, payload=b'{"a": 1}')
    client, token = _signed_out_client(app)

    answer = client.post(f"/entries/{entry_id}/republish",
                         data={"version": "1", "payload": '{"a": 2}', "encoding": "text", "csrf_token": token},
                         headers={"Referer": f"http://localhost/entries/{entry_id}/edit?version=1"})

    assert answer.status_code == 401
    html = answer.get_data(as_text=True)
    assert "Your edit, not sent" in html and "{&#34;a&#34;: 2}</textarea>" in html
    assert 'href="/login?next=/entries/' in html
    assert _status(app, entry_id) == "open"


def test_a_post_without_any_session_does_nothing(app):
    entry_id = support.dead_letter(app, 1)
    answer = app.test_client().post(f"/entries/{entry_id}/close", data={"version": "1", "note": "x"})
    assert answer.status_code == 401
    assert _status(app, entry_id) == "open"
