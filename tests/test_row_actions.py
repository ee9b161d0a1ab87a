"""Republish and Close on a row of the list: operators only, asked first with the entry named,
the entry page's exactly-once actions behind them, the row swapped for htmx, a page without script."""

from __future__ import annotations

import re
from html import unescape

from . import support

HTMX = {"HX-Request": "true"}


def row_of(html: str, entry_id: int) -> str:
    return re.search(rf'<tr hx-disable data-id="{entry_id}".*?</tr>', html, re.S).group(0)


def test_a_viewer_sees_no_row_actions_and_cannot_use_them(offline_app, auth):
    entry_id = support.dead_letter(offline_app, 1, payload=b'{"n": 1}')
    viewer = auth.client("viewer")
    page = viewer.get("/").get_data(as_text=True)
    assert "data-row-action" not in page and ">Actions</th>" not in page and row_of(page, entry_id)
    assert viewer.get(f"/entries/{entry_id}/row/republish").status_code == 403
    token = support.csrf_token(viewer, "/")
    answer = viewer.post(f"/entries/{entry_id}/row/close", data={"csrf_token": token, "version": "1"})
    assert answer.status_code == 403


def test_an_operators_row_asks_first_naming_the_entry(offline_app, auth):
    entry_id = support.dead_letter(offline_app, 1, payload=b'{"n": 1}')
    closed = support.dead_letter(offline_app, 2, payload=b'{"n": 2}')
    operator = auth.client("operator")
    token = support.csrf_token(operator, "/")
    assert operator.post(f"/entries/{closed}/close", data={"csrf_token": token, "version": "1"}).status_code == 303
    page = operator.get("/?status=any").get_data(as_text=True)
    row = unescape(row_of(page, entry_id))
    assert f'data-confirm="Republish entry {entry_id} (orders.created)?"' in row
    assert f'data-confirm="Close entry {entry_id} (orders.created)?"' in row
    assert f'data-post="/entries/{entry_id}/row/republish"' in row and ">Actions</th>" in page
    assert "data-row-action" not in row_of(page, closed)  # a closed entry: nothing to republish or close

    confirm = operator.get(f"/entries/{entry_id}/row/close?version=1&back=/%3Fstatus%3Dopen")
    text = confirm.get_data(as_text=True)
    assert confirm.status_code == 200 and f"<h1>Close entry {entry_id} (orders.created)?</h1>" in text
    assert 'name="back" value="/?status=open"' in text and 'name="csrf_token"' in text
    # A confirmation that would lead off the site leads to the list instead, however it is spelt
    # (a browser drops a tab and reads "\\" as "/"), both its Cancel link and where it goes after.
    for away in ("//evil.example/", "/%09/evil.example/", "/%5C/evil.example", "/\t/evil.example", "https://evil.example/"):
        text = operator.get(f"/entries/{entry_id}/row/close?back={away}").get_data(as_text=True)
        assert 'name="back" value="/"' in text and "evil" not in text, away
    form = {"csrf_token": support.csrf_token(operator, "/"), "version": "1", "back": "/\t/evil.example/x"}
    closed_now = operator.post(f"/entries/{entry_id}/row/close", data=form)
    assert closed_now.status_code == 303 and closed_now.headers["Location"] == "/"
    assert operator.get(f"/entries/{entry_id}/row/explode").status_code == 400


def test_a_row_republish_publishes_once_even_when_submitted_twice(app, rt, nats_server, auth):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-1"}'])
    operator = auth.client("operator")
    form = {"csrf_token": support.csrf_token(operator, "/"), "version": "1", "back": "/?status=open"}

    first = operator.post(f"/entries/{entry_id}/row/republish", data=form, headers=HTMX)
    second = operator.post(f"/entries/{entry_id}/row/republish", data=form, headers=HTMX)
    assert first.status_code == 200 and second.status_code == 200
    assert first.headers["HX-Trigger"] == "entries-changed"  # the counts above the list count again
    row = first.get_data(as_text=True)
    assert row.strip().startswith(f'<tr hx-disable data-id="{entry_id}"') and "status-republished" in row
    assert f"Republished entry {entry_id} to ORDERS seq 1." in row
    assert 'name="version" value="2"' in row and 'name="back" value="/?status=open"' in row
    again = second.get_data(as_text=True)
    assert 'class="row-message error"' in again and "status-republished" in again
    assert len(support.stream_messages(nats_server.url)) == 1

    # Without script: the confirmation page's form, then back to the list; once more changes nothing.
    [other] = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-2"}'])
    answers = [operator.post(f"/entries/{other}/row/republish", data=form) for _ in range(2)]
    assert answers[0].status_code == 303 and answers[0].headers["Location"].endswith("/?status=open")
    assert answers[1].status_code == 409
    assert len(support.stream_messages(nats_server.url)) == 2

    # Once republished, a second send is asked as one: by the row, the confirmation and the editor.
    again_asked = unescape(row)
    assert f"Republish entry {entry_id} (orders.created) again? It was republished before" in again_asked
    for path in ("republish", "edit"):
        page = unescape(operator.get(f"/entries/{entry_id}/{path}").get_data(as_text=True))
        assert re.search(r"Already republished by operator-user at .+ as dlq-dashboard:[0-9a-f]{16}:DLQ:\d+:e\d+:v1: "
                         r"this sends it again, with a new msgId\.", re.sub(r"<[^>]+>", "", page)), path
    [fresh] = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-3"}'])
    assert "Already republished" not in operator.get(f"/entries/{fresh}/republish").get_data(as_text=True)


def test_a_row_close_swaps_the_row_and_needs_the_csrf_token(offline_app, rt, auth):
    entry_id = support.dead_letter(offline_app, 1, payload=b'{"n": 1}')
    operator = auth.client("operator")
    refused = operator.post(f"/entries/{entry_id}/row/close", data={"version": "1"}, headers=HTMX)
    assert refused.status_code == 400
    assert "open" in operator.get(f"/api/entries/{entry_id}").get_json()["status"]

    form = {"csrf_token": support.csrf_token(operator, "/"), "version": "1", "note": "known"}
    row = operator.post(f"/entries/{entry_id}/row/close", data=form, headers=HTMX).get_data(as_text=True)
    assert "status-closed" in row and f"Closed entry {entry_id}." in row and "data-row-action" not in row
    entry = operator.get(f"/api/entries/{entry_id}").get_json()
    assert (entry["status"], entry["version"]) == ("closed", 2)
