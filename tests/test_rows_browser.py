"""The list in a real browser: the keys (j, k, Enter, /, ?), the chart's axes, the dark theme
that follows the system setting, and rows that never make the page scroll sideways."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect


from . import browser_support, support
from .browser_support import COUNTED_SUMMARY


@pytest.fixture
def app(make_app):
    """The app with key fields and three entries; nothing started (the pages need no NATS here)."""
    application = make_app(list_fields=(("Customer", "/customer/id"),))
    for seq in (1, 2, 3):
        payload = json.dumps({"customer": {"id": f"C-{seq}"}, "note": "a long line without spaces " + "x" * 300})
        support.dead_letter(application, seq, payload=payload.encode(), Dlq_Reason="fatal",
                            Dlq_Consumer="billing-" + "y" * 60, Dlq_Original_Msg_Id=f"order-{seq}-" + "z" * 60,
                            Dlq_Error="customer not found")
    return application


def current(page) -> list[str]:
    """The entry URLs of the rows marked as chosen."""
    return page.eval_on_selector_all("tr.row-current", "rows => rows.map(r => r.dataset.rowUrl)")


def test_keys_move_open_search_and_explain_and_typing_is_left_alone(app, live_server, page):
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/")
    urls = page.eval_on_selector_all("#entry-rows tr[data-row-url]", "rows => rows.map(r => r.dataset.rowUrl)")
    assert len(urls) == 3
    page.keyboard.press("j")
    assert current(page) == [urls[0]]
    page.keyboard.press("j")
    assert current(page) == [urls[1]]
    page.keyboard.press("j")
    page.keyboard.press("j")  # stays on the last row
    assert current(page) == [urls[2]]
    page.keyboard.press("k")
    assert current(page) == [urls[1]]
    expect(page.locator("tr.row-current")).to_be_focused()
    page.keyboard.press("Enter")
    page.wait_for_url(f"{live_server}{urls[1]}")

    page.goto(f"{live_server}/")
    page.keyboard.press("/")
    expect(page.locator("#q")).to_be_focused()
    page.keyboard.type("jk")  # typed into the search box, not moving through the rows
    assert current(page) == [] and page.input_value("#q") == "jk"
    page.keyboard.press("Control+j")

    page.goto(f"{live_server}/")
    help_dialog = page.locator("#keys-help")
    expect(help_dialog).to_be_hidden()
    page.keyboard.press("?")
    expect(help_dialog).to_be_visible()
    # On its Close button, not its "Turn off" box: a key pressed as the dialog closes reached the
    # box (focus leaves a closed dialog a moment later) and was taken as typing.
    expect(help_dialog.get_by_role("button", name="Close")).to_be_focused()
    assert "open the chosen row" in help_dialog.inner_text()
    page.keyboard.press("j")  # keys wait while the help is open
    assert current(page) == []
    page.keyboard.press("Escape")
    expect(help_dialog).to_be_hidden()
    page.keyboard.press("j")
    assert current(page) == [urls[0]]

    page.goto(f"{live_server}/groups")  # the groups' rows too: Enter opens the group's page, as "Open group"
    page.keyboard.press("j")
    [group_url] = current(page)
    assert group_url == page.get_by_role("link", name="Open group").get_attribute("href")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/groups/\d+"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("Failure group")


def test_the_chart_has_labelled_axes_on_a_log_scale(app, live_server, page):
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/")
    chart = page.locator(f"{COUNTED_SUMMARY} figure.chart svg.chart-wide")
    chart.wait_for()
    ticks = chart.locator("text.tick").all_text_contents()
    assert "0" in ticks and "3" in ticks  # counts on the left: 0 and the peak
    assert sum(bool(re.fullmatch(r"(\d\d-\d\d )?\d\d:\d\d", t)) for t in ticks) >= 3  # times along the bottom
    titles = chart.locator("text.axis-title").all_text_contents()
    assert any("log scale" in t for t in titles) and any("time" in t for t in titles)
    assert "log scale" in page.locator("#chart-caption").inner_text()
    assert chart.get_attribute("aria-labelledby") == "chart-caption"
    box = chart.bounding_box()
    assert box["width"] > 300 and box["height"] > 60  # drawn, not squashed


def background(page) -> str:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


def test_the_theme_follows_the_system_and_rows_never_scroll_sideways(app, live_server, page):
    support.sign_in(page, live_server, app, "viewer")
    page.emulate_media(color_scheme="dark")
    page.goto(f"{live_server}/")
    assert background(page) == "rgb(18, 22, 29)"
    ink = page.evaluate("getComputedStyle(document.body).color")
    assert ink == "rgb(227, 231, 238)"
    badge = page.locator("#entry-rows .status-open").first  # a row's (the summary's is replaced as its counts arrive)
    assert badge.evaluate("e => getComputedStyle(e).color") == "rgb(255, 255, 255)"
    page.emulate_media(color_scheme="light")
    assert background(page) == "rgb(250, 251, 252)"
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server}/")
        page.locator(f"{COUNTED_SUMMARY} details.chart-fold").wait_for()  # folded at first on a phone
        browser_support.assert_fits(page, "the list")


def test_a_key_does_not_leave_a_note_typed_and_not_sent_and_the_keys_can_be_turned_off(app, live_server, page):
    """A Close note typed, then Tab to Close, then j opened the next entry and the note was lost;
    and the single keys could not be turned off (WCAG 2.1.4)."""
    first, second = (support.dead_letter(app, seq, payload=b'{"n": %d}' % seq) for seq in (10, 11))
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/entries/{second}?status=open")
    note = page.locator("input[name=note]")
    note.fill("known duplicate")
    note.press("Tab")
    expect(note).not_to_be_focused()
    page.keyboard.press("j")
    expect(page.locator("#announcer")).to_have_text("Not opened: a field holds text you typed and have not sent.")
    assert page.url.endswith(f"/entries/{second}?status=open") and note.input_value() == "known duplicate"
    note.fill("")  # nothing typed any more: j opens the next entry
    note.press("Tab")
    page.keyboard.press("j")
    page.wait_for_url(re.compile(rf"/entries/{first}\?status=open$"))

    page.goto(f"{live_server}/")
    page.get_by_role("button", name="Keys").click()
    help_dialog = page.locator("#keys-help")
    expect(help_dialog).to_be_visible()
    help_dialog.get_by_label("Turn off these single keys").check()
    page.keyboard.press("Escape")
    expect(help_dialog).to_be_hidden()
    page.reload()  # remembered
    page.keyboard.press("j")
    page.keyboard.press("?")
    assert current(page) == [] and not help_dialog.is_visible()
    page.get_by_role("button", name="Keys").click()
    expect(help_dialog.get_by_label("Turn off these single keys")).to_be_checked()
    help_dialog.get_by_label("Turn off these single keys").uncheck()
    page.keyboard.press("Escape")
    page.keyboard.press("j")
    assert len(current(page)) == 1


def test_how_long_ago_is_kept_current_and_the_exact_time_is_read_without_hovering(app, live_server, page):
    """"2 s ago" was written as the page was made and stayed so on a list left open; the exact
    time was a title, shown only on hover."""
    support.sign_in(page, live_server, app, "viewer")
    page.clock.install()  # the browser's clock, moved on below without waiting
    page.goto(f"{live_server}/")
    failed = page.locator("#entry-rows tr[data-row-url] td.failed time").first
    expect(failed.locator("[data-ago-text]")).to_have_text(re.compile(r"^(\d+ s ago|just now)$"))
    exact = failed.get_attribute("title")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", exact)
    assert failed.locator(".visually-hidden").text_content() == f" ({exact})"  # read, not only hovered
    page.clock.fast_forward("03:00")
    expect(failed.locator("[data-ago-text]")).to_have_text(re.compile(r"^[34] min ago$"))
