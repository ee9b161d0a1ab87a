"""A dead letter's subject holding a mark that reorders text (U+202E and the other bidirectional
controls) is shown with the mark as its escape on every page, never as the subject it mimics."""

from __future__ import annotations

import re

import pytest

from dlq_dashboard.controls import shown

from . import support

SPOOF = "orders.\u202edetaerc"  # reads "orders.created" where the mark is obeyed
SHOWN = "orders.\\u202edetaerc"


@pytest.mark.parametrize("mark", ["\u202a", "\u202e", "\u2066", "\u2069", "\u200e", "\u200f", "\u061c", "\x1b"])
def test_every_bidirectional_control_is_written_as_its_escape(mark):
    assert shown(f"a{mark}b") == f"a\\u{ord(mark):04x}b"


def test_every_page_showing_a_subject_shows_its_marks_as_escapes(app):
    entry_id = support.dead_letter(app, 1, subject=SPOOF, payload=b'{"a": 1}', Dlq_Reason="fatal")
    client = support.logged_in(app, "operator")
    groups = client.get("/groups").get_data(as_text=True)
    [group] = set(re.findall(r'href="/groups/(\d+)', groups))
    pages = ["/", "/?status=open", f"/entries/{entry_id}", f"/entries/{entry_id}/row/close",
             f"/entries/{entry_id}/republish", f"/entries/{entry_id}/edit", "/groups", f"/groups/{group}"]
    for path in pages:
        answer = client.get(path)
        assert answer.status_code == 200, path
        html = answer.get_data(as_text=True)
        marks = [html[max(0, m.start() - 120):m.end() + 20] for m in re.finditer("\u202e", html)]
        assert not marks, f"{path} holds the mark itself: {marks}"
        assert SHOWN in html, f"{path} does not show the subject with its escape"
    confirm = client.get(f"/entries/{entry_id}/republish").get_data(as_text=True)
    assert f"To subject <code><bdi>{SHOWN}</bdi></code>" in confirm
