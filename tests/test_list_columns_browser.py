"""An operator's list with many columns (six key fields) at every desk width, in Debian's
Chromium: the page never scrolls sideways and rows stay short; what does not fit is left to the
entry's page in a fixed order (the original msgId and the deliveries, the consumer and the
payload, the key fields from the last to the second), follows the window's width without a
reload, and holds for rows loaded later."""

from __future__ import annotations

from dataclasses import replace

import pytest
from playwright.sync_api import expect

from dlq_dashboard.demo.service import DEMO_LIST_FIELDS, demo_settings
from dlq_dashboard.runtime import runtime_of

from . import browser_support, support
from .browser_support import SETTLED
from .demo_entries import store_demo_entries

FIELDS = DEMO_LIST_FIELDS + (("Price", "/items/0/price"), ("Qty", "/items/0/qty"), ("SKU", "/items/0/sku"),
                             ("Currency", "/currency"))
KEY_LABELS = [label for label, _ in FIELDS]
# What may be left out, in the order it is: the labels of each step.
STEPS = [{"Original msgId", "Deliveries"}, {"Consumer", "Payload"}, *({label} for label in reversed(KEY_LABELS[1:]))]
ALWAYS = {"", "#", "Status", "Subject", "Reason", "Error", KEY_LABELS[0], "Failed", "Actions"}
MAX_ROW, MIN_ERROR = 130, 150
SHOWN = """() => [...document.querySelectorAll('table.entries thead th')]
  .filter(cell => cell.getClientRects().length).map(cell => cell.dataset.label || '')"""
ROW_CELLS = """() => [...document.querySelectorAll('#entry-rows tr[data-id]')]
  .map(row => [...row.cells].filter(cell => cell.getClientRects().length).map(cell => cell.dataset.label || ''))"""


@pytest.fixture
def app(settings, make_app):
    return make_app(settings=replace(demo_settings(settings), list_fields=FIELDS), online=True)


def left_out(page) -> list[str]:
    """The header's labels not shown, after checking the page's promises at its width."""
    width = page.viewport_size["width"]
    browser_support.assert_fits(page, f"the list at {width} px")
    heights = page.evaluate("[...document.querySelectorAll('#entry-rows tr[data-id]')].map(r => r.offsetHeight)")
    assert max(heights) <= MAX_ROW, f"a row is {max(heights)} px tall at {width} px"
    error = page.locator("#entry-rows tr[data-id] td.error-text").first.bounding_box()["width"]
    assert error >= MIN_ERROR, f"the error column is {error} px wide at {width} px"
    shown = page.evaluate(SHOWN)
    assert ALWAYS <= set(shown), f"at {width} px a column that always shows is missing: {ALWAYS - set(shown)}"
    for row in page.evaluate(ROW_CELLS):
        assert row == shown, f"at {width} px a row's cells are not the header's: {row} against {shown}"
    hidden = {label for step in STEPS for label in step} - set(shown)
    # Left out in order: a step only once the ones before it are.
    taken = [bool(step & hidden) for step in STEPS]
    assert taken == sorted(taken, reverse=True), f"at {width} px left out out of order: {sorted(hidden)}"
    return sorted(hidden)


def test_with_six_key_fields_an_operators_list_leaves_columns_in_order_and_never_scrolls_sideways(
        app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 30)
    support.sign_in(page, live_server, app, "operator")
    hidden = {}
    for width in (961, 1024, 1100, 1280, 1366, 1440, 1600, 1920, 2400):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server}/")
        page.wait_for_function(SETTLED)
        hidden[width] = left_out(page)
    assert set(KEY_LABELS[1:]) & set(hidden[961]), hidden  # the narrowest desk leaves key fields out
    assert not set(KEY_LABELS) & set(hidden[1920]), hidden  # a wide one shows every key field
    assert hidden[2400] == hidden[1920], hidden  # the page's width stops growing at 1,600 px


def test_the_columns_follow_the_windows_width_without_a_reload_and_rows_loaded_later_follow_them(
        app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 30)
    support.sign_in(page, live_server, app, "operator")
    page.set_viewport_size({"width": 2400, "height": 900})
    page.goto(f"{live_server}/?limit=10")
    page.wait_for_function(SETTLED)
    page.evaluate("window.notReloaded = true")
    wide = left_out(page)
    assert not set(KEY_LABELS) & set(wide), wide
    page.set_viewport_size({"width": 1024, "height": 900})
    page.wait_for_function("() => document.documentElement.scrollWidth <= 1024")
    narrow = left_out(page)
    assert set(KEY_LABELS[1:]) & set(narrow), narrow

    page.get_by_role("link", name="Show older entries").click()
    expect(page.locator("#entry-rows tr[data-id]")).to_have_count(20)
    page.wait_for_function(SETTLED)
    assert left_out(page) == narrow  # the new rows leave out the same cells as the header

    page.set_viewport_size({"width": 2400, "height": 900})
    page.wait_for_function(f"() => ({SHOWN})().length === {len(KEY_LABELS) + 12 - len(wide)}")
    assert left_out(page) == wide
    assert page.evaluate("window.notReloaded") is True



def test_without_script_a_list_of_many_columns_scrolls_inside_its_own_box_not_the_page(app, live_server, browser):
    # Nothing fits the columns then but app.css's fixed widths, which leave room for two key fields.
    store_demo_entries(runtime_of(app).engine, 30)
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        support.sign_in(page, live_server, app, "operator")
        for width in (961, 1100, 1280, 1440):
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(f"{live_server}/")
            browser_support.assert_fits(page, "the list without scripts", scripts=False)
            assert set(KEY_LABELS) | ALWAYS <= set(page.evaluate(SHOWN)), f"a column left out at {width} px"
            box = page.evaluate("""() => { const box = document.querySelector('.entries-box');
              box.scrollLeft = box.scrollWidth;
              const last = [...box.querySelectorAll('thead th')].filter(c => c.getClientRects().length).pop();
              return {scroll: box.scrollWidth, width: box.clientWidth, right: box.getBoundingClientRect().right,
                      last: last.getBoundingClientRect().right,
                      rows: Math.max(...[...box.querySelectorAll('tbody tr')].map(r => r.offsetHeight))}; }""")
            assert box["scroll"] > box["width"], f"at {width} px the six key fields fit: nothing to check"
            assert box["last"] <= box["right"] + 1, f"at {width} px the last column is not reached by scrolling the box"
            assert box["rows"] <= MAX_ROW, f"a row is {box['rows']} px tall at {width} px"
    finally:
        context.close()
