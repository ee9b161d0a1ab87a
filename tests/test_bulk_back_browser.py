"""In Debian's Chromium: Back from a bulk job's page to its preview, the way a person checks what
they started."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from dlq_dashboard.runtime import runtime_of

from .demo_entries import store_demo_entries
from . import support


def test_back_from_a_started_job_shows_its_preview_again_not_a_resubmission_error(app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 12)
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/?subject=orders.*")
    matching = page.locator("form.bulk-matching")
    matching.get_by_role("combobox").select_option("close")
    matching.get_by_role("button", name="Preview for all matching").click()
    expect(page.get_by_role("button", name="Start")).to_be_visible()
    closing = int(page.locator("main p strong").first.inner_text().replace(",", ""))
    assert closing > 0
    preview_url = page.url
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/jobs/\d+"))
    expect(page.locator(".job-state")).to_contain_text(f"Finished: {closing} done", timeout=20_000)
    page.go_back()  # Chromium refused with ERR_CACHE_MISS while the preview was a POST's answer
    assert page.url == preview_url
    # The preview asked again: what the filters take now (the job closed them all).
    expect(page.locator("h1")).to_have_text("Bulk close: preview")
    expect(page.get_by_role("alert")).to_have_text("No entries match; nothing to do.")
    page.go_forward()
    expect(page.locator(".job-state")).to_contain_text(f"Finished: {closing} done")


def test_ticked_rows_preview_start_and_come_back(app, live_server, page):
    """The list's ticked rows go to the preview by GET, an ``ids`` a row: two or more of them
    too (the query's parameters are otherwise given once)."""
    store_demo_entries(runtime_of(app).engine, 12)
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/?subject=orders.*")
    ticks = page.locator("#entry-rows input[name=ids]")
    for i in range(3):
        ticks.nth(i).check()
    selected = page.locator("form.bulk-selected")
    selected.get_by_role("combobox").select_option("close")
    selected.get_by_role("button", name="Preview bulk action").click()
    expect(page.locator("h1")).to_have_text("Bulk close: preview")
    assert page.url.count("ids=") == 3
    expect(page.locator("main p strong").first).to_have_text("3")
    preview_url = page.url
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/jobs/\d+"))
    expect(page.locator(".job-state")).to_contain_text("Finished: 3 done", timeout=20_000)
    page.go_back()
    assert page.url == preview_url
    # Asked again: the three are closed now, each counted as skipped.
    expect(page.locator("h1")).to_have_text("Bulk close: preview")
    expect(page.locator("main")).to_contain_text("3 closed: skipped, closed already")


def test_start_pressed_twice_before_its_answer_is_sent_once(app, live_server, page):
    """A second press of Start while the first one's answer is on its way (a double click, a slow
    network) sent a second POST: two jobs over the same entries. The form is sent once: a second
    submission is refused in the page and its button disabled."""
    store_demo_entries(runtime_of(app).engine, 12)
    support.sign_in(page, live_server, app, "operator")
    posted: list[str] = []

    def answer_later(route):  # no answer that leaves the page: as one still on its way
        posted.append(route.request.method)
        route.fulfill(status=204)

    page.route(f"{live_server}/bulk", answer_later)
    page.goto(f"{live_server}/bulk/preview?by=filter&subject=orders.*&action=close")
    page.evaluate("window.seen = []; window.addEventListener('submit', e => window.seen.push(e.defaultPrevented))")
    start = page.get_by_role("button", name="Start")
    start.click()
    expect(start).to_be_disabled()
    # Submitted again (a key, a script): refused in the page, before any request.
    page.evaluate("document.querySelector('form[action=\"/bulk\"]').requestSubmit()")
    assert page.evaluate("window.seen") == [False, True] and posted == ["POST"]
    page.reload()  # a page shown again is usable again
    expect(page.get_by_role("button", name="Start")).to_be_enabled()
    assert posted == ["POST"]  # again, once the round trips since have let any later POST's route be called
