"""The browser fixtures work: a logged-in Chromium sees the list page; the browser runs with the
features support.CHROMIUM_ARGS turns off, Playwright's own among them."""

from pathlib import Path

from . import support


def test_a_logged_in_browser_sees_the_list_page(app, live_server, page):
    support.browser_login(page, live_server, app, "viewer")
    assert page.locator("h1").first.inner_text() == "Dead letters"


def test_the_browser_keeps_playwrights_disabled_features_and_a_new_window_loads_no_omnibox_popup(browser):
    """Chromium reads only the last --disable-features of its command line: ours must still hold
    every feature Playwright turns off. And the features ours adds are still the ones this Chromium
    knows: a new context's window loads no omnibox popup page."""
    session = browser.new_browser_cdp_session()
    context = browser.new_context()
    try:
        context.new_page().goto("data:text/html,<title>blank</title>")
        [pid] = [p["id"] for p in session.send("SystemInfo.getProcessInfo")["processInfo"] if p["type"] == "browser"]
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        disabled = [set(a.partition("=")[2].split(",")) for a in arguments if a.startswith("--disable-features=")]
        assert disabled[-1] == set(support.PLAYWRIGHT_DISABLED_FEATURES + support.UNUSED_CHROMIUM_FEATURES)
        assert disabled[0] <= disabled[-1], f"Playwright turns off more now: {sorted(disabled[0] - disabled[-1])}"
        urls = [target["url"] for target in session.send("Target.getTargets")["targetInfos"]]
        assert not [url for url in urls if url.startswith("chrome://omnibox")], urls
    finally:
        context.close()
        session.detach()
