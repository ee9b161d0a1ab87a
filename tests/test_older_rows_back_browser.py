"""In Debian's Chromium: Back to the list from an entry opened among the rows "Show older entries"
appended finds those rows again, scrolled to where the list was left."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from . import support


@pytest.fixture
def app(make_app):
    """The app with 60 open entries: 50 on the list's first page, 10 older."""
    application = make_app()
    for seq in range(1, 61):
        support.dead_letter(application, seq, payload=b'{"order_id": %d}' % seq, Dlq_Reason="fatal")
    return application


def test_back_from_an_entry_among_the_older_rows_shows_them_again_where_the_list_was_left(app, live_server, page):
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/?status=open", wait_until="load")
    rows = page.locator("#entry-rows tr[data-id]")
    expect(rows).to_have_count(50)
    page.get_by_role("link", name="Show older entries").click()
    expect(rows).to_have_count(60)
    older = rows.nth(55)
    entry_id = older.get_attribute("data-id")
    older.scroll_into_view_if_needed()
    older.get_by_role("link", name=entry_id, exact=True).click()
    page.wait_for_url(re.compile(rf"/entries/{entry_id}(\?.*)?$"))

    page.go_back()

    expect(rows).to_have_count(60)
    expect(page.locator(f'#entry-rows tr[data-id="{entry_id}"]')).to_be_in_viewport()
