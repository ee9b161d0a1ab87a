"""A list row's actions in a real browser: the question names the entry, no answer does nothing,
yes closes it and the row is swapped in place with what was done."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from dlq_dashboard.runtime import runtime_of

from . import support


@pytest.fixture
def app(make_app):
    """The app with two open entries; nothing started (closing needs no NATS)."""
    application = make_app()
    for seq in (1, 2):
        support.dead_letter(application, seq, payload=b'{"order_id": %d}' % seq, Dlq_Reason="fatal")
    return application


def test_a_row_is_closed_after_its_question_and_swapped_in_place(app, live_server, page):
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/")
    first = page.locator("#entry-rows tr[data-id]").first
    entry_id = int(first.get_attribute("data-id"))
    asked: list[str] = []

    def answer(dialog, accept):
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    # The handler answers as the dialog opens; expect_event waits for it while letting Playwright
    # deliver events (a wait that sleeps would not: the dialog may open after click() returns).
    page.once("dialog", lambda d: answer(d, False))
    with page.expect_event("dialog"):
        first.get_by_role("button", name=f"Close entry {entry_id}").click()
    assert asked == [f"Close entry {entry_id} (orders.created)?"]
    assert runtime_of(app).store.get_entry(entry_id, with_history=False).status == "open"

    page.once("dialog", lambda d: answer(d, True))
    with page.expect_event("dialog"):
        page.locator(f'#entry-rows tr[data-id="{entry_id}"]').get_by_role("button", name=f"Close entry {entry_id}").click()
    assert len(asked) == 2
    row = page.locator(f'#entry-rows tr[data-id="{entry_id}"]')
    expect(row.locator(".row-message")).to_have_text(f"Closed entry {entry_id}.")
    # Said by the page's status region, which stays: the row's message came with a row put in.
    expect(page.locator("#announcer")).to_have_text(f"Closed entry {entry_id}.")
    expect(row.locator(".status")).to_have_text("closed")
    assert page.url == f"{live_server}/"  # the list stayed
    assert runtime_of(app).store.get_entry(entry_id, with_history=False).status == "closed"
    expect(page.locator("#entry-rows tr[data-id]")).to_have_count(2)
    # The keyboard's focus was on the row's Close: it is in the row swapped in, not back at the top.
    page.wait_for_function(f"() => document.activeElement.closest('tr[data-id=\"{entry_id}\"]') !== null")
    # The counts above the list count again: one closed now (they read "closed 0" until a reload).
    expect(page.locator(".summary .counts li").filter(has_text="closed")).to_contain_text("closed 1")


def test_a_rows_close_that_is_not_answered_or_signed_out_says_so_and_can_be_pressed_again(app, live_server, page):
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("dialog", lambda dialog: dialog.accept())
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/?status=open", wait_until="load")
    row = page.locator("#entry-rows tr[data-id]").first
    entry_id = int(row.get_attribute("data-id"))
    row = page.locator(f'#entry-rows tr[data-id="{entry_id}"]')
    close = row.get_by_role("button", name=f"Close entry {entry_id}")

    page.context.set_offline(True)
    close.click()
    expect(row.locator(".row-message")).to_have_text("Not sent: the dashboard did not answer. Try again when it does.")
    expect(page.locator("#announcer")).to_have_text("Not sent: the dashboard did not answer. Try again when it does.")
    expect(close).to_be_enabled()
    page.context.set_offline(False)

    page.context.clear_cookies()  # the session ended
    close.click()
    expect(row.locator(".row-message")).to_have_text(
        "Not sent: you were signed out. Sign in again in another tab, then try again.")
    expect(close).to_be_enabled()
    assert runtime_of(app).store.get_entry(entry_id, with_history=False).status == "open"

    support.sign_in(page, live_server, app, "operator")
    page.wait_for_function("() => !document.querySelector('[data-signed-out]')", timeout=10_000)
    close.click()
    expect(row.locator(".row-message")).to_have_text(f"Closed entry {entry_id}.")
    assert errors == []
