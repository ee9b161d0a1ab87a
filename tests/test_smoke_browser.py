"""The browser fixtures work: a logged-in Chromium sees the list page."""

from . import support


def test_a_logged_in_browser_sees_the_list_page(app, live_server, page):
    support.browser_login(page, live_server, app, "viewer")
    assert page.locator("h1").first.inner_text() == "Dead letters"
