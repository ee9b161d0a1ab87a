"""The browser tests' own measure of a page's width (browser_support.too_wide), in Debian's
Chromium: a page reached by a click is measured as it is drawn, with its stylesheet, even when
the stylesheet arrives after the page's text (a bulk patch's preview was once measured before it,
wider than the window, in CI)."""

from __future__ import annotations

import json
import threading

import pytest
from playwright.sync_api import expect

from . import browser_support, support


@pytest.fixture
def late_stylesheet(app):
    """static/app.css answered once the test lets it go (``.set()``), every other file at once."""
    let_go = threading.Event()
    view = app.view_functions["static"]

    def held(**values):
        if values.get("filename") == "app.css":
            let_go.wait(30)
        return view(**values)

    app.view_functions["static"] = held
    yield let_go
    let_go.set()


def test_a_page_reached_by_a_click_is_measured_with_its_stylesheet(app, live_server, page, late_stylesheet):
    entry = support.dead_letter(app, 1, payload=json.dumps({"blob": "b" * 3000}).encode(), Dlq_Reason="fatal")
    support.sign_in(page, live_server, app, "viewer")
    late_stylesheet.set()
    page.goto(f"{live_server}/")
    late_stylesheet.clear()
    page.locator(f"#entry-rows tr[data-id='{entry}'] a").first.click()
    expect(page.locator("pre").filter(has_text="bbbb").first).to_be_attached()
    # The text is there and the stylesheet is not: the one-line payload stands unbroken.
    assert page.evaluate("document.documentElement.scrollWidth") > page.viewport_size["width"]
    threading.Timer(1.0, late_stylesheet.set).start()
    assert browser_support.too_wide(page) is None
