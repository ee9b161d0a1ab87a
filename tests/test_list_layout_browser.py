"""The list starts with the list: at 1440×900 the first entry is fully in the first screen, filters
included, and on a 390×844 phone an entry takes at most 120 px and the first starts in the first
screen; on the demo's dead letters and on 50,000 of them. The common filters stand in one row,
the rest fold (open while one of them is set, or as last left), the chart folds and stays as
left, and the bulk bar shows once an entry is ticked (everything matching: while a filter is set).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from dlq_dashboard.demo.service import demo_settings
from dlq_dashboard.runtime import runtime_of

from . import browser_support, support
from .browser_support import COUNTED_SUMMARY, SAMPLE_FIRST_ROW, SETTLED
from .demo_entries import store_demo_entries

DESKTOP, PHONE = (1440, 900), (390, 844)
MAX_PHONE_ROW = 120
ROWS = """() => [...document.querySelectorAll('#entry-rows tr[data-id]')].slice(0, 5).map(row => {
  const box = row.getBoundingClientRect();
  return {top: box.top + window.scrollY, bottom: box.bottom + window.scrollY, height: box.height};
})"""


@pytest.fixture
def app(settings, make_app):
    """The app as ``python app.py --demo`` configures it: the orders' schema and key fields."""
    return make_app(settings=demo_settings(settings), online=True)


def _open(page, base: str, path: str, size: tuple[int, int]) -> list[dict]:
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(base + path)
    page.wait_for_function(SETTLED)
    rows = page.evaluate(ROWS)
    assert rows, f"{path}: no rows"
    return rows


def _measure_both_widths(page, base: str) -> dict[str, float]:
    """The first row's place at both sizes; asserts the layout's promises and returns the numbers."""
    rows = _open(page, base, "/", DESKTOP)
    assert rows[0]["bottom"] <= DESKTOP[1], f"the first row ends at {rows[0]['bottom']} px, below the fold"
    # The common filters in one row, the rest folded.
    tops = [page.locator(sel).first.bounding_box()["y"] for sel in
            ("#q", "#filters select[name=status]", "#filters input[name=subject]", "#filters input[name=reason]",
             "#filters button[type=submit]")]
    assert max(tops) - min(tops) < 20, f"the common filters stand in more than one row: {tops}"
    expect(page.locator("#filters input[name=consumer]")).to_be_hidden()
    desktop = rows[0]["bottom"]

    rows = _open(page, base, "/", PHONE)
    assert rows[0]["top"] < PHONE[1], f"the first row starts at {rows[0]['top']} px, past the first screen"
    tallest = max(r["height"] for r in rows)
    assert tallest <= MAX_PHONE_ROW, f"a row is {tallest} px tall on a phone"
    return {"desktop_first_row_bottom": desktop, "phone_first_row_top": rows[0]["top"], "phone_tallest_row": tallest}


def test_the_first_demo_entry_is_in_the_first_screen_at_1440_and_390_px(app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 80)
    support.sign_in(page, live_server, app, "operator")
    measured = _measure_both_widths(page, live_server)
    print("demo entries:", measured)


@pytest.mark.slow
def test_the_first_of_50000_entries_is_in_the_first_screen_at_1440_and_390_px(app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 50_000)
    support.sign_in(page, live_server, app, "operator")
    measured = _measure_both_widths(page, live_server)
    print("50,000 entries:", measured)


#: The key fields' values (the demo's order and customer ids, up to 12 characters) that stand on
#: more than one line: an id broken in its middle ("ORD-B6A930" over "73") is misread.
BROKEN_IDS = """() => [...document.querySelectorAll('#entry-rows td.key-field')]
  .filter(cell => cell.getClientRects().length && cell.textContent.trim() !== '—')
  .filter(cell => { const range = document.createRange(); range.selectNodeContents(cell);
                    return new Set([...range.getClientRects()].map(rect => Math.round(rect.top))).size > 1; })
  .map(cell => cell.textContent.trim())"""
#: Between a phone's layout and a wide screen: no row taller than this, no error column narrower.
MAX_DESKTOP_ROW, MIN_ERROR_WIDTH = 130, 150


def test_an_operators_list_with_key_fields_keeps_readable_rows_and_never_scrolls_sideways(app, live_server, page):
    # The widest list: the checkboxes, two key fields and the row's actions.
    store_demo_entries(runtime_of(app).engine, 30)
    support.sign_in(page, live_server, app, "operator")
    for width in (961, 1024, 1280, 1366, 1440, 1536, 1920):
        rows = _open(page, live_server, "/", (width, 900))
        browser_support.assert_fits(page, "the list")
        tallest = max(r["height"] for r in rows)
        assert tallest <= MAX_DESKTOP_ROW, f"a row is {tallest} px tall at {width} px"
        error = page.locator("#entry-rows tr[data-id] td.error-text").first.bounding_box()["width"]
        assert error >= MIN_ERROR_WIDTH, f"the error column is {error} px wide at {width} px"
        expect(page.locator("#entry-rows tr[data-id]").first.get_by_role("button", name="Close", exact=False)).to_be_visible()
        broken = page.evaluate(BROKEN_IDS)
        assert not broken, f"at {width} px a key field's id breaks across lines: {broken}"


def test_further_filters_open_while_one_is_set_and_the_first_row_stays_in_view(app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 30)
    support.sign_in(page, live_server, app, "operator")
    rows = _open(page, live_server, "/?consumer=fulfilment", DESKTOP)
    expect(page.locator("details.more-filters")).to_have_attribute("open", "")
    expect(page.locator("details.more-filters summary")).to_have_text("More filters (1 set)")
    expect(page.locator("#filters input[name=consumer]")).to_have_value("fulfilment")
    assert rows[0]["bottom"] <= DESKTOP[1]


def test_the_further_filters_and_the_chart_stay_as_they_were_left(app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 30)
    support.sign_in(page, live_server, app, "operator")
    _open(page, live_server, "/", DESKTOP)
    chart = page.locator("figure.chart svg.chart-wide")
    expect(chart).to_be_visible()
    page.get_by_text("Chart: failures per").click()
    expect(chart).to_be_hidden()
    page.locator("details.more-filters summary").click()
    expect(page.locator("#filters input[name=consumer]")).to_be_visible()

    _open(page, live_server, "/", DESKTOP)
    expect(page.locator("figure.chart")).to_be_hidden()
    expect(page.locator("#filters input[name=consumer]")).to_be_visible()
    # The chart comes again with new filters (htmx renders it anew), still folded.
    page.locator("#filters select[name=status]").select_option("open")
    page.wait_for_url("**/?status=open")
    page.wait_for_function(SETTLED)
    expect(page.locator("details.chart-fold")).to_have_count(1)
    expect(page.locator("figure.chart")).to_be_hidden()
    page.get_by_text("Chart: failures per").click()
    _open(page, live_server, "/", DESKTOP)
    expect(page.locator("figure.chart svg.chart-wide")).to_be_visible()
    # Remembered in the click's own task: a page left at once keeps it (remembered on the "toggle"
    # event, a later task, a page left at once lost it: seen in CI; this read came before it).
    assert page.evaluate("""() => {
      document.querySelector('details.chart-fold > summary').click();
      return localStorage.getItem('dlq.fold.list-chart');
    }""") == "folded"


def test_the_chart_is_folded_at_first_on_a_phone(app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 30)
    support.sign_in(page, live_server, app, "operator")
    _open(page, live_server, "/", PHONE)
    expect(page.locator("figure.chart")).to_be_hidden()
    page.get_by_text("Chart: failures per").click()
    # Its drawing for a phone: the desk's scaled to 360 px had labels 6 px high.
    expect(page.locator("figure.chart svg.chart-narrow")).to_be_visible()
    expect(page.locator("figure.chart svg.chart-wide")).to_be_hidden()
    heights = page.locator("figure.chart svg.chart-narrow text").evaluate_all(
        "texts => texts.map(t => parseFloat(getComputedStyle(t).fontSize) * t.ownerSVGElement.getScreenCTM().a)")
    assert heights and min(heights) >= 10, heights


def _first_row_while_the_counts_arrive(page, url: str) -> list[float]:
    """The first row's top at every frame drawn from the page's load until its summary's counts,
    held back until the rows were drawn, have arrived and settled."""
    held = []

    def hold(route):
        held.append(route)

    page.route("**/summary?*", hold)
    page.route("**/summary", hold)
    try:
        with page.expect_request("**/summary*"):
            page.goto(url)
        expect(page.locator(".summary[aria-busy]")).to_have_count(1)
        page.wait_for_function("() => window.firstRowTops.length > 0")
        for route in held:
            route.continue_()
        expect(page.locator(COUNTED_SUMMARY + " .counts li").last).not_to_contain_text("–")
        page.wait_for_function(SETTLED)
        page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
        return page.evaluate("window.firstRowTops")
    finally:
        page.unroute("**/summary?*")
        page.unroute("**/summary")


def test_the_rows_do_not_move_when_the_summarys_counts_arrive(app, live_server, page):
    # The counts come after the page (the slow part at a million); until then the summary stands
    # in their place at their size: a click aimed at a row as they arrive still lands on it.
    store_demo_entries(runtime_of(app).engine, 30)
    support.sign_in(page, live_server, app, "operator")
    page.add_init_script(SAMPLE_FIRST_ROW)
    for path, size in (("/", DESKTOP), ("/", PHONE), ("/?status=open", DESKTOP), ("/?consumer=fulfilment", DESKTOP),
                       ("/?q=order", PHONE)):
        page.set_viewport_size({"width": size[0], "height": size[1]})
        tops = _first_row_while_the_counts_arrive(page, live_server + path)
        assert max(tops) - min(tops) < 0.5, f"{path} at {size}: the first row moved: {sorted(set(tops))} px"
    # The chart as it was left, folded: in its place before the counts too, and never open a frame.
    _open(page, live_server, "/", DESKTOP)
    expect(page.locator("figure.chart")).to_be_visible()
    page.get_by_text("Chart: failures per").click()
    expect(page.locator("figure.chart")).to_be_hidden()
    tops = _first_row_while_the_counts_arrive(page, live_server + "/")
    assert max(tops) - min(tops) < 0.5, f"with the chart folded the first row moved: {sorted(set(tops))} px"


#: The most of a phone's height the bulk bar may cover while rows are ticked (it took 310 px).
MAX_PHONE_BAR = 100


def test_on_a_phone_the_bulk_bar_keeps_the_rows_in_view(app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 30)
    support.sign_in(page, live_server, app, "operator")
    _open(page, live_server, "/?subject=orders.*", PHONE)
    bar = page.locator("section.bulk-actions")
    matching = page.get_by_role("button", name="Preview for all matching")
    # Nothing ticked: "everything matching" waits below the rows, not over them.
    assert bar.evaluate("el => getComputedStyle(el).position") == "static"
    rows_end = page.evaluate("document.querySelector('#entry-rows').getBoundingClientRect().bottom")
    assert bar.bounding_box()["y"] >= rows_end - 1
    page.locator("#entry-rows input[name=ids]").nth(0).check()
    page.locator("#entry-rows input[name=ids]").nth(1).check()
    # Ticked: only the ticked rows' part follows them, in one or two lines.
    expect(page.get_by_role("button", name="Preview bulk action")).to_be_in_viewport()
    expect(matching).to_be_hidden()
    box = bar.bounding_box()
    assert box["height"] <= MAX_PHONE_BAR, f"the bar covers {box['height']:.0f} of {PHONE[1]} px"
    assert box["x"] + box["width"] <= PHONE[0] and page.evaluate("document.documentElement.scrollWidth") <= PHONE[0]
    page.locator("#entry-rows input[name=ids]").nth(0).uncheck()
    page.locator("#entry-rows input[name=ids]").nth(1).uncheck()
    expect(matching).to_be_attached()
    assert bar.evaluate("el => getComputedStyle(el).position") == "static"


def test_the_bulk_bar_shows_once_an_entry_is_ticked_or_a_filter_is_set(app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 30)
    support.sign_in(page, live_server, app, "operator")
    _open(page, live_server, "/", DESKTOP)
    selected = page.get_by_role("button", name="Preview bulk action")
    expect(selected).to_be_hidden()
    expect(page.get_by_role("button", name="Preview for all matching")).to_have_count(0)
    page.locator("#entry-rows input[name=ids]").first.check()
    expect(selected).to_be_visible()
    # It says how many are ticked, and follows each tick.
    expect(page.locator(".bulk-selected select")).to_have_accessible_name(re.compile(r"^Selected entries \(1\)"))
    page.locator("#entry-rows input[name=ids]").nth(2).check()
    page.locator("#entry-rows input[name=ids]").nth(3).check()
    expect(page.get_by_label("Selected entries (3)")).to_be_visible()
    page.locator("#entry-rows input[name=ids]").nth(2).uncheck()
    expect(page.get_by_label("Selected entries (2)")).to_be_visible()
    # "Select every entry" says some are ticked (mixed), then all, then none.
    every = page.get_by_label("Select every entry on this page")
    assert every.evaluate("box => [box.checked, box.indeterminate]") == [False, True]
    every.check()
    assert every.evaluate("box => [box.checked, box.indeterminate]") == [True, False]
    page.locator("#entry-rows input[name=ids]").nth(1).uncheck()
    assert every.evaluate("box => [box.checked, box.indeterminate]") == [False, True]  # it read "all" still
    every.check()
    every.uncheck()
    assert every.evaluate("box => [box.checked, box.indeterminate]") == [False, False]
    expect(selected).to_be_hidden()

    _open(page, live_server, "/?status=open", DESKTOP)
    expect(page.get_by_role("button", name="Preview for all matching")).to_be_visible()
    expect(selected).to_be_hidden()
