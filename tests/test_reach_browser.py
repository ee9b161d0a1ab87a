"""What a finger, the keyboard and a screen reader reach on the list, in Debian's Chromium (WCAG
2.2): every tick box is a target of 24×24 px at least, at a desk's width and a phone's; from the
top of the list a few Tab presses reach the first row and the bulk bar (links skip the chart's
bars and the rows); the results of the list and of the groups have a heading that says what is
shown; a phone's list has its "select all" too; and /admin/users does not scroll sideways at
320 px."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import expect

from dlq_dashboard.demo.service import demo_settings
from dlq_dashboard.ingest import writes
from dlq_dashboard.ingest.writes import ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import browser_support, support
from .browser_support import COUNTED_SUMMARY, SETTLED
from .demo_entries import demo_messages

DESKTOP, PHONE = (1440, 900), (390, 844)
LEAST_TARGET = 24  # CSS px, WCAG 2.2 2.5.8
#: Each shown tick box that selects rows (a row's, "select all"): the box a click on it lands in,
#: its label when a label holds it.
TICK_TARGETS = """() => [...document.querySelectorAll('input[type=checkbox][name=ids], input[type=checkbox][data-select-all]')]
  .filter(box => box.checkVisibility())
  .map(box => { const target = box.closest('label') || box, rect = target.getBoundingClientRect();
                return {name: box.getAttribute('aria-label') || target.textContent.trim(), all: box.hasAttribute('data-select-all'),
                        width: rect.width, height: rect.height}; })"""
#: Where the keyboard's focus is: the link's words, and whether it is inside what ``selector``
#: names (its first match).
FOCUS_IN = """(selector) => {
  const focused = document.activeElement, place = document.querySelector(selector);
  return {words: focused && focused !== document.body ? (focused.textContent || '').trim() : null,
          link: !!(focused && focused.matches('a[href^="#"]')), inside: !!(place && place.contains(focused))};
}"""


@pytest.fixture
def app(settings, make_app):
    """The app as ``python app.py --demo`` configures it, with 80 of the demo's dead letters
    received three minutes apart: a page of rows and a chart of some fifty bars."""
    application = make_app(settings=demo_settings(settings), online=True)
    now = utcnow()
    with pytest.MonkeyPatch.context() as patch:
        for n, message in enumerate(demo_messages(80)):
            patch.setattr(writes, "utcnow", lambda at=now - timedelta(minutes=3 * (80 - n)): at)
            ingest_dlq_batch(runtime_of(application).engine, "DLQ", "e1", [message])
    return application


def _open(page, base: str, path: str, size: tuple[int, int]) -> None:
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(base + path)
    page.wait_for_function(SETTLED)
    expect(page.locator(COUNTED_SUMMARY)).to_be_visible()


def test_every_tick_box_that_selects_rows_is_a_target_of_24_px_at_1440_and_390_px(app, live_server, page):
    support.sign_in(page, live_server, app, "operator")
    for size in (DESKTOP, PHONE):
        _open(page, live_server, "/", size)
        targets = page.evaluate(TICK_TARGETS)
        assert sum(not t["all"] for t in targets) >= 20, f"at {size[0]} px: {targets[:3]}"
        assert sum(t["all"] for t in targets) == 1, f"at {size[0]} px no one select-all: {[t for t in targets if t['all']]}"
        small = [t for t in targets if t["width"] < LEAST_TARGET or t["height"] < LEAST_TARGET]
        assert not small, f"at {size[0]} px {len(small)} tick boxes are smaller than 24×24 px: {small[:3]}"


def _presses_to_reach(page, place: str, skip_words: str, most: int) -> int:
    """Tab (and Enter on the link that says ``skip_words``) from the top of the page until the
    focus is inside ``place``: how many presses that took; ``most`` + 1 when it took more."""
    for presses in range(1, most + 1):
        page.keyboard.press("Tab")
        focus = page.evaluate(FOCUS_IN, place)
        if focus["link"] and focus["words"] == skip_words:
            page.keyboard.press("Enter")  # a press too
            continue
        if focus["inside"]:
            return presses
    return most + 1


#: The presses from the top of the list to the first row, and to the bulk bar, at most: the main
#: menu, the filters, the time presets and the saved view's form come first (about 30), not the
#: chart's bars (some fifty) nor every row's controls (four a row).
MOST_PRESSES = 40


@pytest.mark.parametrize("place, skip_words", [("#entry-rows tr[data-id]", "Skip to results"),
                                               (".bulk-actions", "Skip to bulk actions")],
                         ids=["the first row", "the bulk bar"])
def test_from_the_top_of_the_list_a_few_tab_presses_reach_the_first_row_and_the_bulk_bar(app, live_server, page,
                                                                                       place, skip_words):
    support.sign_in(page, live_server, app, "operator")
    _open(page, live_server, "/?status=open", DESKTOP)  # a filter set: the bulk bar shows
    bars = page.locator("figure.chart svg.chart-wide a").count()
    assert bars >= 40, f"the chart has {bars} bars"
    presses = _presses_to_reach(page, place, skip_words, MOST_PRESSES)
    assert presses <= MOST_PRESSES, f"{place} is not reached within {MOST_PRESSES} presses from the top"
    # The skip link is out of sight until the keyboard reaches it, and then in view.
    link = page.get_by_role("link", name=skip_words)
    assert link.bounding_box()["x"] < 0 or link.bounding_box()["width"] <= 1
    page.goto(f"{live_server}/?status=open")
    page.wait_for_function(SETTLED)
    link.focus()
    box = link.bounding_box()
    assert box["x"] >= 0 and box["width"] > 1 and 0 <= box["y"] < DESKTOP[1], box


def test_the_link_to_the_bulk_bar_is_there_while_the_bar_is(app, live_server, page):
    """No filter set: the bar shows once a row is ticked, and the link with it."""
    support.sign_in(page, live_server, app, "operator")
    _open(page, live_server, "/", DESKTOP)
    expect(page.locator(".bulk-actions")).to_be_hidden()
    expect(page.get_by_role("link", name="Skip to bulk actions")).to_have_count(0)
    # Ticked without a click, so that Tab starts at the top.
    page.evaluate("() => document.querySelector('#entry-rows input[name=ids]').click()")
    expect(page.get_by_role("link", name="Skip to bulk actions")).to_have_count(1)
    assert _presses_to_reach(page, ".bulk-actions", "Skip to bulk actions", MOST_PRESSES) <= MOST_PRESSES


@pytest.mark.parametrize("path, says", [("/", r"^50 dead letters shown, the newest of more$"),
                                        ("/?status=open", r"^\d+ dead letters? shown.* for status open$"),
                                        ("/?q=ffee0c4d9a", r"^No dead letter matches search ffee0c4d9a$"),
                                        ("/?since=bad", r"^No dead letters shown$"),
                                        ("/groups", r"^\d+ failure groups? shown for status open$"),
                                        ("/groups?reason=fatal", r"^1 failure group shown for status open, reason fatal$")])
def test_the_results_of_the_list_and_the_groups_have_a_heading_that_says_what_is_shown(app, live_server, page,
                                                                                      path, says):
    support.sign_in(page, live_server, app, "viewer")
    page.goto(live_server + path)
    page.wait_for_function(SETTLED)
    heading = page.locator("#results").get_by_role("heading", level=2)
    expect(heading).to_have_count(1)
    expect(heading).to_have_accessible_name(re.compile(says))
    # It names the region, a landmark a screen reader lists.
    expect(page.get_by_role("region", name=re.compile(says))).to_have_attribute("id", "results")


def test_on_a_phone_the_list_has_a_select_all_that_ticks_every_row(app, live_server, page):
    support.sign_in(page, live_server, app, "operator")
    _open(page, live_server, "/", PHONE)
    # The one shown: the header's ("Select every entry on this page") is hidden with the header.
    select_all = page.get_by_role("checkbox", name=re.compile("^Select (every entry|all) on this page$"))
    expect(select_all).to_have_count(1)
    expect(select_all).to_have_accessible_name("Select all on this page")
    select_all.check()
    boxes = page.locator("#entry-rows input[name=ids]")
    assert boxes.count() == 50
    expect(page.locator("#entry-rows input[name=ids]:not(:checked)")).to_have_count(0)
    expect(page.locator(".bulk-selected .ticked-count")).to_have_text(" (50)")
    expect(page.locator(".bulk-selected")).to_be_visible()
    boxes.first.uncheck()
    expect(select_all).not_to_be_checked()
    select_all.check()
    select_all.uncheck()
    expect(page.locator("#entry-rows input[name=ids]:checked")).to_have_count(0)


def test_the_users_page_does_not_scroll_sideways_at_320_px(app, live_server, page):
    """Its tables are blocks a row on a phone; its forms' fields are never wider than the form."""
    support.ensure_user(app, "operator-b7e1", "operator")  # a second user, a second row
    support.sign_in(page, live_server, app, "admin")
    for width in (320, 390):
        page.set_viewport_size({"width": width, "height": 640})
        page.goto(f"{live_server}/admin/users")
        page.wait_for_function(SETTLED)
        expect(page.locator("table.users tr[data-user]")).to_have_count(2)
        fits = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert fits[0] <= fits[1], f"/admin/users is {fits[0]} px wide at {fits[1]} px: {browser_support.too_wide(page)}"
