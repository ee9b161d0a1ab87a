"""Every page shows a time one way: '2026-11-29 10:00:05 UTC' in a <time> element whose datetime
is RFC 3339; where a page says how long ago instead, the exact time is its title (on hover) and read after it by a screen reader."""

from __future__ import annotations

import re
from datetime import timedelta
from html.parser import HTMLParser

import pytest

from dlq_dashboard.times import utcnow

from . import support

pytestmark = pytest.mark.both_databases

EXACT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
RELATIVE = re.compile(r"^(just now|\d+ (s|min|h|d) ago)$")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
ANY_TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d")
# What a message carries is shown as it came (a header may hold a time in any format).
QUOTED = ("script", "style", "title", "textarea", "pre", "code")
MESSAGE_HEADERS = re.compile(r'<section class="headers".*?</section>', re.DOTALL)


class Times(HTMLParser):
    """The <time> elements of a page and the text outside them."""

    def __init__(self):
        super().__init__()
        self.times: list[tuple[dict, str]] = []
        self.outside: list[str] = []
        self._open: dict | None = None
        self._text = ""
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag == "time":
            self._open, self._text = dict(attrs), ""
        elif tag in QUOTED:
            self._skip += 1

    def handle_endtag(self, tag):
        if tag == "time" and self._open is not None:
            self.times.append((self._open, self._text.strip()))
            self._open = None
        elif tag in QUOTED:
            self._skip -= 1

    def handle_data(self, data):
        if self._open is not None:
            self._text += data
        elif not self._skip:
            self.outside.append(data)


def shown_times(html: str) -> Times:
    parser = Times()
    parser.feed(MESSAGE_HEADERS.sub("", html))
    return parser


def assert_one_format(html: str, where: str) -> int:
    page = shown_times(html)
    for attrs, text in page.times:
        assert RFC3339.match(attrs.get("datetime", "")), (where, attrs)
        said, _, read = text.partition(" (")  # how long ago, then the exact time a screen reader reads
        if RELATIVE.match(said):
            assert EXACT.match(attrs.get("title", "")), f"{where}: '{text}' has no exact time on hover: {attrs}"
            assert read == attrs["title"] + ")", f"{where}: '{text}' does not read its exact time"
        else:
            assert EXACT.match(text), f"{where}: a time shown as {text!r}"
    stray = [t for t in page.outside if ANY_TIME.search(t)]
    assert not stray, f"{where}: a time outside a <time> element: {stray}"
    return len(page.times)


def test_every_page_shows_times_in_one_format(offline_app, tokens):
    first = support.dead_letter(offline_app, 1, stored_at=utcnow() - timedelta(hours=3),
                                Dlq_Failed_At=(utcnow() - timedelta(hours=3)).isoformat() + "Z",
                                Dlq_Reason="fatal", Dlq_Error="order 7 not found")
    support.dead_letter(offline_app, 2, Dlq_Reason="fatal", Dlq_Error="order 8 not found")
    operator = support.bearer(tokens["operator"])
    client = offline_app.test_client()
    closed = client.post(f"/api/entries/{first}/close", json={"version": 1, "note": "seen"}, headers=operator)
    assert closed.status_code == 200, closed.get_data(as_text=True)
    job = client.post("/api/bulk", json={"action": "close", "ids": [first + 1], "note": "x"}, headers=operator)
    assert job.status_code == 202, job.get_data(as_text=True)
    job_id = job.get_json()["job"]
    support.wait_for(lambda: client.get(f"/api/jobs/{job_id}", headers=operator).get_json()["state"] == "done",
                     message="the bulk close to finish")

    browser = support.logged_in(offline_app, "operator")
    pages = {"/": 2, "/?status=closed": 2, f"/entries/{first}": 3, "/audit": 2, f"/jobs/{job_id}": 1,
             "/groups?status=": 2}
    for path, at_least in pages.items():
        response = browser.get(path)
        assert response.status_code == 200, path
        assert assert_one_format(response.get_data(as_text=True), path) >= at_least, path
    listed = shown_times(browser.get("/?status=closed").get_data(as_text=True)).times
    assert any(RELATIVE.match(text.partition(" (")[0]) for _, text in listed), "the list says how long ago"


def test_a_stale_version_page_shows_the_history_in_the_same_format(offline_app, tokens):
    entry = support.dead_letter(offline_app, 1)
    browser = support.logged_in(offline_app, "operator")
    first = browser.post(f"/entries/{entry}/close", data={"version": 1, "note": "a",
                                                          "csrf_token": support.csrf_token(browser, f"/entries/{entry}")})
    assert first.status_code in (200, 302, 303)
    stale = browser.post(f"/entries/{entry}/close", data={"version": 1, "note": "b",
                                                          "csrf_token": support.csrf_token(browser, f"/entries/{entry}")})
    assert stale.status_code == 409
    assert assert_one_format(stale.get_data(as_text=True), "conflict page") >= 1


def test_the_time_filters_write_what_markup_format_would():
    # relative and timestamp run for every row of a list and escape their parts themselves.
    from markupsafe import Markup

    from dlq_dashboard.web.templating import ago, relative, rfc3339, timestamp, when

    now = utcnow()
    for value in (now, now - timedelta(minutes=3), now - timedelta(days=40), "2026-11-29 10:00:05.123456",
                  now + timedelta(hours=2)):
        assert relative(value) == Markup('<time datetime="{}" title="{}" data-ago><span data-ago-text>{}</span>'
                                         '<span class="visually-hidden"> ({})</span></time>').format(
            rfc3339(value), when(value), ago(value), when(value))
        assert timestamp(value) == Markup('<time datetime="{}">{}</time>').format(rfc3339(value), when(value))
    assert relative(None) == timestamp(None) == Markup("—")
