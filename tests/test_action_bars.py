"""The entry page's action bar and the list's bulk bar, built from the actions declared in
web/presenters/actions.py: the same HTML as when each was written out by hand, for each role and
state (tests/data/action_bars/ holds what the hand-written templates rendered)."""

from __future__ import annotations

from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest
from flask import g, render_template_string

from dlq_dashboard.actions.bulk.jobs import JOB_ACTIONS, _check_status
from dlq_dashboard.entries.shape import STATUSES
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.web.auth import Identity
from dlq_dashboard.web.presenters.actions import bulk_choices, entry_action_bar

BARS = Path(__file__).parent / "data" / "action_bars"
REFUSED, EDIT_REFUSED, DOWN = "no <stream>", "edit & no", "NATS is unreachable"

# name: (role, entry status, republish_reason, edit_reason, nats_down, close_needs_nats, closed_by)
ENTRY_STATES = {
    "entry-viewer": ("viewer", "open", None, None, None, False, None),
    "entry-open-enabled": ("operator", "open", None, None, None, False, None),
    "entry-open-nats-down-close-deletes": ("operator", "open", None, None, DOWN, True, None),
    "entry-open-refused-one-reason": ("operator", "open", REFUSED, REFUSED, None, False, None),
    "entry-republished-edit-refused": ("operator", "republished", None, EDIT_REFUSED, DOWN, False, None),
    "entry-republished-refused-two-reasons": ("admin", "republished", REFUSED, EDIT_REFUSED, DOWN, True, None),
    "entry-closed-with-note": ("operator", "closed", None, None, None, True, "ann"),
}
# name: (role, nats_down, close_needs_nats, the list's filters)
BULK_STATES = {
    "bulk-viewer": ("viewer", None, False, None),
    "bulk-unfiltered": ("operator", None, False, None),
    "bulk-filtered-nats-down-close-deletes": ("operator", DOWN, True, {"status": "republished", "subject": "a.*"}),
    # A closed list: reopen is the one action a job could take on its entries (CHANGES).
    "bulk-closed-list": ("operator", None, False, {"status": "closed"}),
}


class Canonical(HTMLParser):
    """Elements with their attributes (in any order) and text (whitespace runs as one space):
    what a browser builds, not how the template spaced it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[tuple] = []

    def handle_starttag(self, tag, attrs):
        attrs = [(name, "T" if name == "value" and ("name", "csrf_token") in attrs else value)
                 for name, value in attrs]  # the CSRF token is signed with the time
        self.found.append(("<", tag, tuple(sorted(attrs))))

    def handle_endtag(self, tag):
        self.found.append(("</", tag))

    def handle_data(self, data):
        if text := " ".join(data.split()):
            self.found.append(("text", text))


def canonical(html: str) -> list[tuple]:
    parser = Canonical()
    parser.feed(html)
    parser.close()
    return parser.found


def as_role(role: str) -> None:
    g.identity = Identity(name="ann", role=role, via="session")


@pytest.mark.parametrize("name", ENTRY_STATES)
def test_the_entry_pages_action_bar_renders_as_it_did_when_written_by_hand(offline_app, name):
    role, status, republish_reason, edit_reason, nats_down, close_needs_nats, closed_by = ENTRY_STATES[name]
    entry = SimpleNamespace(id=7, version=3, status=status, closed_by=closed_by,
                            closed_at=datetime(2026, 11, 29, 10, 0, 5) if closed_by else None,
                            close_note="why <b>" if closed_by else None)
    with offline_app.test_request_context("/entries/7"):
        as_role(role)
        html = render_template_string(
            '{% from "_entry_actions.html" import action_bar with context %}'
            '{{ action_bar(entry, republish_reason, edit_reason) }}',
            entry=entry, republish_reason=republish_reason, edit_reason=edit_reason, nats_down=nats_down,
            close_needs_nats=close_needs_nats)
    assert canonical(html) == canonical((BARS / f"{name}.html").read_text())


@pytest.mark.parametrize("name", BULK_STATES)
def test_the_bulk_bar_renders_as_it_did_when_written_by_hand(offline_app, name):
    role, nats_down, close_needs_nats, filters = BULK_STATES[name]
    with offline_app.test_request_context("/"):
        as_role(role)
        html = render_template_string('{% include "_bulk_actions.html" %}', nats_down=nats_down,
                                      close_needs_nats=close_needs_nats,
                                      flt=EntryFilter.from_args(filters) if filters else None)
    assert canonical(html) == canonical((BARS / f"{name}.html").read_text())


def test_the_bulk_bar_offers_every_bulk_jobs_action_and_the_ones_that_publish_need_nats():
    assert [c.value for c in bulk_choices(False)] == list(JOB_ACTIONS)
    assert {c.value for c in bulk_choices(False) if not c.needs_nats} == {"close", "reopen"}
    # Closing needs NATS when it deletes the DLQ message; reopening never does.
    assert {c.value for c in bulk_choices(True) if not c.needs_nats} == {"reopen"}


@pytest.mark.parametrize("status, offered", [(None, list(JOB_ACTIONS)), ("any", list(JOB_ACTIONS)),
                                              ("open", ["republish", "close", "patch", "repair"]),
                                              ("republished", list(JOB_ACTIONS)), ("closed", ["reopen"])])
def test_a_list_of_one_status_offers_only_the_bulk_actions_that_change_its_entries(status, offered):
    assert [c.value for c in bulk_choices(False, status)] == offered
    for action in offered:  # and each one offered, a job by that filter takes
        if status in STATUSES:
            _check_status(action, status)  # raises JobError for a status the action cannot change


def test_a_reason_said_once_for_two_buttons_is_shown_once_and_both_buttons_point_at_one():
    bar = entry_action_bar(SimpleNamespace(status="open"), REFUSED, REFUSED, close_needs_nats=False)
    assert [(r.id, r.shown) for r in bar.reasons] == [("republish-reason", True), ("edit-reason", False),
                                                      ("repair-reason", False)]
    assert [a.name for a in bar.actions] == ["republish", "edit", "repair", "close"]
    # Neither republish can work, so only Close is left and it needs no NATS: no note about NATS.
    assert bar.nats_notes == ()


@pytest.mark.parametrize("status, names", [("open", ["republish", "edit", "repair", "close"]),
                                           ("republished", ["republish", "edit", "repair", "close", "reopen"]),
                                           ("closed", ["reopen"])])
def test_an_entrys_status_decides_which_actions_its_bar_offers(status, names):
    bar = entry_action_bar(SimpleNamespace(status=status), None, None, close_needs_nats=True)
    assert [a.name for a in bar.actions] == names
    waiting = {a.nats_note for a in bar.actions if a.waits_for_nats}
    assert bar.nats_notes == tuple(n for n in ("Republishing", "Closing (which deletes the DLQ message)")
                                   if n in waiting)
