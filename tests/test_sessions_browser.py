"""Sessions in Debian's Chromium: logging out in one browser leaves the other signed in; a tab
whose session ended keeps its editor and says so in the banner, never navigating; the page
after login is never a fragment."""

from __future__ import annotations

import re

import requests
from playwright.sync_api import expect

from . import support

EXPECT_TIMEOUT = 10_000
ORIGINAL = b'{"order_id": 7, "customer_id": "c-1"}'


def _editor(app, live_server, page, nats_server) -> int:
    """An operator's editor open on a new entry; returns the entry id."""
    support.make_orders_stream(nats_server.url)
    entry_id = support.dead_letter(app, 1, payload=ORIGINAL, Dlq_Reason="fatal")
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/entries/{entry_id}/edit")
    return entry_id


def _new_page(browser):
    return browser.new_context(viewport={"width": 1280, "height": 900}).new_page()


def test_logging_out_in_one_browser_leaves_the_other_browsers_editor_signed_in(
        app, live_server, browser, nats_server):
    laptop, phone = _new_page(browser), _new_page(browser)
    try:
        entry_id = _editor(app, live_server, phone, nats_server)
        typed = '{"order_id": 7, "customer_id": "c-2"}'
        phone.locator("#payload").fill(typed)
        support.browser_login(laptop, live_server, app, "operator")

        laptop.get_by_role("button", name="Logout").click()
        laptop.wait_for_url(re.compile(r"/login$"))

        for _ in range(2):  # two polls of the banner after the logout
            with phone.expect_response(lambda r: "/status/banner" in r.url, timeout=EXPECT_TIMEOUT) as poll:
                pass
            assert poll.value.status == 200
        assert phone.url == f"{live_server}/entries/{entry_id}/edit"
        expect(phone.locator("[data-signed-out]")).to_have_count(0)
        assert phone.locator("#payload").input_value() == typed
        phone.get_by_role("button", name="Republish", exact=True).click()
        phone.wait_for_url(re.compile(rf"/entries/{entry_id}$"))
        [message] = support.stream_messages(nats_server.url)
        assert message.data == typed.encode()
    finally:
        laptop.context.close()
        phone.context.close()


def test_a_tab_whose_session_ended_keeps_its_editor_says_so_in_the_banner_and_saves_after_signing_in_again(
        app, live_server, browser, nats_server):
    editor_tab = _new_page(browser)
    context = editor_tab.context
    try:
        entry_id = _editor(app, live_server, editor_tab, nats_server)
        editor_url = editor_tab.url
        typed = '{"order_id": 7, "customer_id": "c-2"}'
        editor_tab.locator("#payload").fill(typed)
        check = editor_tab.locator("#payload-check")
        expect(check).to_contain_text("Changes from the original", timeout=EXPECT_TIMEOUT)
        cookie_before = {c["name"]: c["value"] for c in context.cookies()}
        other_tab = context.new_page()
        other_tab.goto(f"{live_server}/")

        other_tab.get_by_role("button", name="Logout").click()
        other_tab.wait_for_url(re.compile(r"/login$"))

        notice = editor_tab.locator("[data-status-banner] [data-signed-out]")
        expect(notice).to_have_text("You were signed out: sign in again in another tab; this page keeps what you typed.",
                                    timeout=EXPECT_TIMEOUT)
        expect(notice.get_by_role("link")).to_have_attribute("target", "_blank")
        # Typing on: the live check is answered 401 and not swapped in.
        typed = '{"order_id": 7, "customer_id": "c-3"}'
        with editor_tab.expect_response(lambda r: "/validate" in r.url) as checked:
            editor_tab.locator("#payload").fill(typed)
        assert checked.value.status == 401
        expect(check).to_contain_text("Changes from the original")
        expect(check).not_to_contain_text("signed out")
        assert editor_tab.url == editor_url
        assert editor_tab.locator("#payload").input_value() == typed
        # The cookie from before the logout no longer opens anything.
        replay = requests.get(editor_url, cookies=cookie_before, allow_redirects=False, timeout=10)
        assert replay.status_code == 302 and "/login" in replay.headers["Location"]

        support.browser_login(other_tab, live_server, app, "operator")

        expect(notice).to_have_count(0, timeout=EXPECT_TIMEOUT)
        editor_tab.get_by_role("button", name="Republish", exact=True).click()
        editor_tab.wait_for_url(re.compile(rf"/entries/{entry_id}$"))
        [message] = support.stream_messages(nats_server.url)
        assert message.data == typed.encode()
    finally:
        context.close()


def test_signing_in_from_a_login_link_naming_the_banner_fragment_lands_on_the_list(app, live_server, page):
    support.ensure_user(app, "operator-browser", "operator")
    page.goto(f"{live_server}/login?next=/status/banner")
    page.fill("input[name=username]", "operator-browser")
    page.fill("input[name=password]", support.PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login" not in url)
    assert page.url == f"{live_server}/"
    expect(page.locator("h1")).to_be_visible()


def test_a_close_pressed_after_the_session_ended_is_held_with_its_note_and_sent_after_signing_in_again(
        app, live_server, browser, nats_server):
    entry_tab = _new_page(browser)
    context = entry_tab.context
    try:
        entry_id = support.dead_letter(app, 1, Dlq_Reason="fatal")
        support.sign_in(entry_tab, live_server, app, "operator")
        entry_tab.goto(f"{live_server}/entries/{entry_id}", wait_until="load")
        note = entry_tab.locator("input[name=note]")
        note.fill("refunded by hand")
        other_tab = context.new_page()
        other_tab.goto(f"{live_server}/")
        other_tab.get_by_role("button", name="Logout").click()
        other_tab.wait_for_url(re.compile(r"/login$"))
        expect(entry_tab.locator("[data-signed-out]")).to_be_visible(timeout=EXPECT_TIMEOUT)

        entry_tab.get_by_role("button", name="Close", exact=True).click()

        held = entry_tab.locator("[data-held-signed-out]")
        expect(held).to_have_text("Not sent: you were signed out. Sign in again in another tab, then send it again; "
                                  "what you typed stays here.")
        expect(entry_tab.locator("#announcer")).to_contain_text("Not sent: you were signed out.")
        assert entry_tab.url == f"{live_server}/entries/{entry_id}"
        assert note.input_value() == "refunded by hand"

        support.browser_login(other_tab, live_server, app, "operator")
        expect(entry_tab.locator("[data-signed-out]")).to_have_count(0, timeout=EXPECT_TIMEOUT)
        expect(held).to_have_count(0)
        entry_tab.get_by_role("button", name="Close", exact=True).click()
        expect(entry_tab.locator("h1 .status")).to_have_text("closed", timeout=EXPECT_TIMEOUT)
        expect(entry_tab.locator("section.timeline")).to_contain_text("refunded by hand")
    finally:
        context.close()
