"""Stale data is visible, in Debian's Chromium: the banner appears without a reload when NATS
freezes or the mirror falls behind, the actions that need NATS are disabled with the reason, and
both recover by themselves."""

from __future__ import annotations

import re
from contextlib import contextmanager

import pytest
from playwright.sync_api import expect

from dlq_dashboard.runtime import runtime_of

from . import support
from .browser_support import SAMPLE_FIRST_ROW, SETTLED
from .support import frozen

PAYLOAD = b'{"order_id": "o-1", "customer_id": "c-1"}'
# The banner is polled every 2 s and the probe decides within about a second.
WITHIN = 15_000


@pytest.fixture
def settings(tmp_path, nats_server):
    """A mirror counted as behind once a message has waited a second (10 s by default)."""
    return support.make_settings(tmp_path, nats_server.url, mirror_stale_after=1.0)


def test_the_banner_appears_without_a_reload_while_nats_is_frozen_and_republish_waits_for_it(
        app, live_server, page, nats_server):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [PAYLOAD])
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/entries/{entry_id}")
    banner = page.locator("[data-status-banner]")
    republish = page.get_by_role("button", name="Republish", exact=True)
    edit = page.get_by_role("button", name="Edit and republish")
    note = page.get_by_text("Republishing is unavailable")
    expect(banner).not_to_contain_text("NATS")
    expect(republish).to_be_enabled()
    expect(note).to_be_hidden()
    page.evaluate("window.notReloaded = true")

    with frozen(nats_server):
        expect(banner).to_contain_text("NATS is not reachable since", timeout=WITHIN)
        expect(banner).to_contain_text("no answer from NATS")
        expect(republish).to_be_disabled()
        expect(edit).to_be_disabled()
        expect(republish).to_have_attribute("title", re.compile(r"^NATS is not reachable \(no answer"))
        expect(note).to_be_visible()
        expect(note).to_contain_text("NATS is not reachable")
        assert page.evaluate("window.notReloaded") is True
        # The close action is a database decision: it stays available.
        expect(page.get_by_role("button", name="Close", exact=True)).to_be_enabled()

    expect(banner).not_to_contain_text("NATS", timeout=WITHIN)
    expect(republish).to_be_enabled()
    expect(edit).to_be_enabled()
    expect(republish).not_to_have_attribute("title", re.compile("."))
    expect(note).to_be_hidden()
    assert page.evaluate("window.notReloaded") is True

    republish.click()
    expect(page.get_by_text("stored by stream ORDERS")).to_be_visible()
    page.get_by_role("button", name="Republish", exact=True).click()
    page.wait_for_url(re.compile(rf"/entries/{entry_id}$"))
    expect(page.locator("h1 .status")).to_have_text("republished")
    assert len(support.stream_messages(nats_server.url)) == 1


def test_a_page_opened_while_nats_is_frozen_offers_bulk_close_but_not_bulk_republish(
        app, live_server, page, nats_server):
    support.dead_letter_orders(app, nats_server.url, [PAYLOAD])
    support.sign_in(page, live_server, app, "operator")
    rt = runtime_of(app)
    with frozen(nats_server):
        support.wait_for(lambda: not rt.bridge.state.connected, message="the probe's verdict")
        page.goto(f"{live_server}/")
        expect(page.locator("[data-status-banner]")).to_contain_text("NATS is not reachable since")
        page.locator("#entry-rows input[name=ids]").first.check()  # the bulk bar shows once a row is ticked
        choice = page.get_by_label("Selected entries")
        expect(choice).to_have_value("close")
        expect(choice.locator("option[value=republish]")).to_be_disabled()
        expect(page.get_by_text("Bulk republish is unavailable")).to_be_visible()
    expect(page.locator("[data-status-banner]")).not_to_contain_text("NATS", timeout=WITHIN)
    expect(page.get_by_label("Selected entries").locator("option[value=republish]")).to_be_enabled()
    expect(page.get_by_text("Bulk republish is unavailable")).to_be_hidden()


def test_the_banner_says_how_far_behind_the_list_is_while_the_mirror_lags(app, live_server, page, nats_server):
    rt = runtime_of(app)
    support.dead_letter_orders(app, nats_server.url, [PAYLOAD])
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/groups")
    banner = page.locator("[data-status-banner]")
    expect(banner).not_to_contain_text("behind")

    with support.writer_stopped(rt):  # the mirror receives, nothing is committed
        support.run(support.publish_fast(nats_server.url, "dlq.orders.created", 7,
                                         lambda i: (PAYLOAD, support.dlq_headers())))
        expect(banner).to_contain_text("The list is behind NATS: 7 messages of stream DLQ not mirrored yet",
                                       timeout=WITHIN)
        expect(banner).to_contain_text("the oldest waiting since")
    expect(banner).not_to_contain_text("behind", timeout=WITHIN)


TWO_FRAMES = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


@contextmanager
def banner_held(page):
    """The banner's polls answered with what it says now: measured meanwhile, it does not change
    under the measure (its "(3 s ago)" could wrap to one more line between two looks)."""
    said = page.locator("[data-status-banner]").inner_html()
    page.route("**/status/banner", lambda route: route.fulfill(status=200, content_type="text/html", body=said))
    try:
        yield
    finally:
        page.unroute("**/status/banner")


def test_nothing_of_the_page_moves_when_the_banner_comes_or_goes_and_it_covers_nothing(
        app, live_server, page, nats_server):
    # The banner comes when things go wrong, when operators are busiest: a click aimed at a row as
    # it comes must land on that row. It stands at the window's bottom, over nothing the page
    # keeps there (the bulk bar stands on it) and with the page's end scrollable clear of it.
    support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-%d"}' % i for i in range(40)])
    support.sign_in(page, live_server, app, "operator")
    page.set_viewport_size({"width": 1280, "height": 720})
    page.add_init_script(SAMPLE_FIRST_ROW)
    page.goto(f"{live_server}/")
    page.wait_for_function(SETTLED)
    page.locator("#entry-rows input[name=ids]").first.check()
    bar = page.locator(".bulk-actions.selection-only")
    expect(bar).to_be_visible()
    banner = page.locator("[data-status-banner]")
    stale = banner.locator(".stale").first

    with frozen(nats_server):
        expect(stale).to_contain_text("NATS is not reachable since", timeout=WITHIN)
        with banner_held(page):
            page.evaluate(TWO_FRAMES)
            tops = page.evaluate("window.firstRowTops")
            assert max(tops) - min(tops) < 0.5, f"the rows moved when the banner came: {sorted(set(tops))} px"
            shown = banner.bounding_box()
            assert shown["height"] > 0 and abs(shown["y"] + shown["height"] - 720) < 0.5, \
                f"the banner is not at the window's bottom: {shown}"
            held = bar.bounding_box()
            assert held["y"] + held["height"] <= shown["y"] + 0.5, "the banner covers the bulk bar"
            page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
            page.evaluate(TWO_FRAMES)
            last = page.locator("main > *").last.bounding_box()
            assert last["y"] + last["height"] <= shown["y"] + 0.5, \
                "the page's end cannot be scrolled clear of the banner"
            page.evaluate("window.scrollTo(0, 0)")

    expect(stale).to_have_count(0, timeout=WITHIN)
    page.evaluate(TWO_FRAMES)
    tops = page.evaluate("window.firstRowTops")
    assert max(tops) - min(tops) < 0.5, f"the rows moved when the banner went: {sorted(set(tops))} px"
    assert page.evaluate("getComputedStyle(document.body).paddingBottom") == "0px"


def test_while_the_banner_shows_every_element_tab_reaches_is_seen_and_nothing_breaks_wcag(
        app, live_server, page, nats_server):
    # What every page is checked for (axe-core; Tab reaches every action and shows the focus,
    # never under the banner or a bar at the window's bottom), in the banner's state.
    from .test_accessibility_browser import _tab_through, _violations

    support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-%d"}' % i for i in range(30)])
    support.sign_in(page, live_server, app, "operator")
    with frozen(nats_server):
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            for width, height in ((1280, 720), (390, 844)):
                page.set_viewport_size({"width": width, "height": height})
                page.goto(f"{live_server}/?status=open")
                expect(page.locator("[data-status-banner] .stale").first).to_contain_text(
                    "NATS is not reachable", timeout=WITHIN)
                # On a phone how long ago, not the exact time: the banner covers less of the page.
                expect(page.locator("[data-status-banner] .stale").first).to_contain_text(
                    re.compile(r"^NATS is not reachable \(\d+ s ago\):" if width < 760 else
                               r"^NATS is not reachable since \d{4}-"), use_inner_text=True)
                page.wait_for_function(SETTLED)
                found = _violations(page, f"/?status=open with the banner ({scheme}, {width} px)")
                assert not found, "\n".join(found)
        page.emulate_media(color_scheme="light")
        page.set_viewport_size({"width": 1280, "height": 720})
        page.goto(f"{live_server}/?status=open")
        expect(page.locator("[data-status-banner] .stale").first).to_be_visible(timeout=WITHIN)
        page.wait_for_function(SETTLED)
        with banner_held(page):
            problems = _tab_through(page, "/?status=open with the banner")
        assert not problems, "\n".join(problems)


def test_the_banner_says_when_the_dashboard_cannot_be_reached_and_clears_when_it_answers(app, live_server, page):
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/", wait_until="load")
    line = page.locator("[data-status-banner] [data-unreachable]")
    announcer = page.locator("#announcer")

    page.context.set_offline(True)
    expect(line).to_contain_text("The dashboard cannot be reached since ", timeout=WITHIN)
    expect(line).to_contain_text("What this page shows may be out of date")
    expect(announcer).to_have_text("The dashboard cannot be reached: what this page shows may be out of date.")

    page.context.set_offline(False)
    expect(line).to_have_count(0, timeout=WITHIN)
    expect(announcer).to_have_text("The dashboard answers again.")
