"""/admin/users in Debian's Chromium: an admin creates a scoped user through the page, the user
signs in with the password shown once, and disabling them asks first (on the page, by htmx) and
then signs them out at once."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from dlq_dashboard import accounts
from dlq_dashboard.db.models import Action
from dlq_dashboard.runtime import runtime_of

from . import browser_support, support


@pytest.fixture
def app(make_app):
    """The app over a database only (no NATS needed for accounts)."""
    return make_app()


def test_an_admin_creates_a_scoped_user_and_disables_them_after_confirming(app, live_server, browser, page):
    engine = runtime_of(app).engine
    problems = []
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    support.browser_login(page, live_server, app, "admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Users").click()
    page.wait_for_url(f"{live_server}/admin/users")

    form = page.locator("#new-user")
    form.locator("input[name=name]").fill("team-orders")
    form.locator("select[name=role]").select_option("operator")
    form.locator("input[name=scopes]").fill("orders.>, billing.>")
    form.get_by_role("button", name="Create user").click()
    expect(page.locator("[data-shown-once]")).to_contain_text(
        "Created user team-orders (operator over billing.>, orders.>)")
    password = page.locator("[data-secret]").inner_text()
    assert accounts.get_user(engine, "team-orders").grants[0].to_dict() == {"role": "operator",
                                                                            "scopes": ["billing.>", "orders.>"]}

    member = browser.new_context().new_page()
    try:
        member.goto(f"{live_server}/login")
        member.fill("input[name=username]", "team-orders")
        member.fill("input[name=password]", password)
        member.click("button[type=submit]")
        member.wait_for_url(lambda url: "/login" not in url)

        page.goto(f"{live_server}/admin/users")
        row = page.locator('tr[data-user="team-orders"]')
        expect(row).to_contain_text("1")  # one session open
        row.get_by_role("button", name="Disable").click()
        confirm = page.locator("#admin-confirm [data-confirm]")
        expect(confirm).to_contain_text("Disable team-orders? Their one session will end at once")
        assert page.url == f"{live_server}/admin/users"  # asked on the page, by htmx
        assert not accounts.get_user(engine, "team-orders").disabled
        confirm.get_by_role("button", name="Disable team-orders").click()
        expect(page.get_by_role("status").filter(has_text="Disabled team-orders; 1 session ended.")).to_be_visible()
        expect(page.locator('tr[data-user="team-orders"]')).to_contain_text("disabled")

        member.goto(f"{live_server}/")
        member.wait_for_url(re.compile(r"/login\?next="))
    finally:
        member.context.close()
    assert accounts.get_user(engine, "team-orders").disabled
    with engine.connect() as conn:
        audited = [(r.action, r.actor) for r in conn.execute(select(Action.__table__).order_by(Action.id))]
    assert audited == [("user_create", "admin-browser"), ("user_disable", "admin-browser")]
    assert problems == []


def test_the_page_fits_its_window_at_1440_and_390_px_with_long_names_and_patterns_cuts_no_hint_hides_no_cell_and_breaks_no_wcag_rule(
        app, live_server, page):
    # What every page is checked for (tests/test_layout_browser.py, tests/test_accessibility_browser.py),
    # on the one page only an admin opens.
    from .test_accessibility_browser import _violations

    engine = runtime_of(app).engine
    long_pattern = "orders." + ".".join(["segment" + "y" * 40] * 5)
    accounts.create_user(engine, "u" + "x" * 63, support.PASSWORD, "operator", accounts.read_scopes([long_pattern]))
    accounts.create_token(engine, "t" + "y" * 63, "viewer", accounts.read_scopes([long_pattern, "pay.*"]))
    support.sign_in(page, live_server, app, "admin")
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server}/admin/users")
        browser_support.assert_fits(page, f"/admin/users at {width} px")
        cut = browser_support.cut_hints(page)
        assert not cut, f"/admin/users at {width} px: hints cut by their fields: {cut}"
        loose = browser_support.loose_cells(page)
        assert not loose, f"/admin/users at {width} px: cells laid out outside their rows: {loose}"
        # Every cell in the window, none in a table's scrolling box (on a phone each account is a block).
        outside = page.evaluate("""() => [...document.querySelectorAll('table.accounts tbody tr')]
          .flatMap(row => [...row.cells]).filter(cell => cell.getClientRects().length)
          .map(cell => [cell.className || cell.tagName, cell.getBoundingClientRect().right])
          .filter(([, right]) => right > window.innerWidth + 1)""")
        assert not outside, f"/admin/users at {width} px: cells out of the window: {outside[:4]}"
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            found = _violations(page, f"/admin/users ({scheme}, {width} px)")
            assert not found, "\n".join(found)
        page.emulate_media(color_scheme="light")
