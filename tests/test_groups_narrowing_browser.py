"""Narrowing the groups in Chromium at 1440 and 390 px: typing a search narrows them as it is
typed, a key field folded under "More filters" narrows them, the time presets and the trend's
window switch keep the rest, and the page never scrolls sideways."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from dlq_dashboard.demo.service import demo_settings
from dlq_dashboard.runtime import runtime_of

from . import browser_support, support
from .browser_support import SETTLED
from .demo_entries import store_demo_entries



@pytest.fixture
def app(settings, make_app):
    """The app as ``python app.py --demo`` configures it: the orders' schema and key fields."""
    return make_app(settings=demo_settings(settings), online=True)


@pytest.mark.parametrize("width", [1440, 390])
def test_the_groups_narrow_by_search_key_field_time_and_window(app, live_server, page, width):
    store_demo_entries(runtime_of(app).engine, 120)
    support.sign_in(page, live_server, app, "viewer")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server}/groups")
    rows = page.locator("table.groups tbody tr")
    everything = rows.count()
    assert everything >= 4

    page.locator("#q").fill("CRM")
    page.wait_for_url(re.compile(r"/groups\?.*q=CRM"))
    page.wait_for_function(SETTLED)
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".group-label")).to_contain_text("CRM shard")

    page.locator("#q").fill("")
    page.wait_for_url(re.compile(r"/groups\?status=open$"))
    page.wait_for_function(SETTLED)
    page.get_by_text("More filters").click()
    page.get_by_label("Customer").fill("C-1042")
    page.get_by_label("Customer").press("Enter")
    page.wait_for_url(re.compile(r"field\.Customer=C-1042"))
    page.wait_for_function(SETTLED)
    expect(rows).to_have_count(1)

    page.get_by_role("link", name="15 minutes").click()
    page.wait_for_url(re.compile(r"since=15m"))
    assert "field.Customer=C-1042" in page.url
    expect(page.get_by_role("link", name="last hour, per minute")).to_have_attribute("aria-current", "true")
    expect(page.locator("svg.sparkline").first).to_have_attribute("aria-label", re.compile(r"in the last 60 min"))
    page.get_by_role("link", name="last 24 hours, per hour").click()
    page.wait_for_url(re.compile(r"window=24h"))
    assert "since=15m" in page.url and "field.Customer=C-1042" in page.url
    expect(page.locator("svg.sparkline").first).to_have_attribute("aria-label", re.compile(r"in the last 24 h"))
    browser_support.assert_fits(page, "the groups")
