"""In Debian's Chromium: walking entries from a filtered list and back, the action bar saying why
Republish cannot work, and /jobs following a job until it ends without a reload."""

from __future__ import annotations

import gzip
import re

from playwright.sync_api import expect

from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.runtime import runtime_of

from . import support

EXPECT_TIMEOUT = 15_000


def test_an_entry_opened_from_a_filtered_list_walks_its_neighbours_and_goes_back(app, live_server, page, nats_server):
    support.make_orders_stream(nats_server.url)
    subjects = ["orders.created", "payments.made", "orders.created", "payments.made", "orders.shipped",
                "orders.created"]
    ids = [support.dead_letter(app, seq, subject, payload=b'{"customer_id": "c-%d"}' % seq, stream="DLQT")
           for seq, subject in enumerate(subjects, start=1)]
    zipped = support.dead_letter(app, 7, "orders.created", payload=gzip.compress(b"{}"), stream="DLQT")
    orders = [zipped] + [i for i, s in zip(ids, subjects) if s.startswith("orders.")][::-1]  # newest first
    support.sign_in(page, live_server, app, "operator")

    page.goto(f"{live_server}/?subject=orders.*")
    page.locator("table.entries tbody tr").first.get_by_role("link", name=str(orders[0])).click()
    page.wait_for_url(re.compile(rf"/entries/{orders[0]}\?subject=orders\.(\*|%2A)$"))
    # The gzip entry: Republish is disabled and the bar says why; Edit opens it decompressed.
    republish = page.get_by_role("button", name="Republish", exact=True)
    expect(republish).to_be_disabled()
    expect(page.get_by_role("button", name="Edit and republish")).to_be_enabled()
    expect(page.locator("#republish-reason")).to_contain_text("is compressed (gzip bytes)")
    expect(page.locator("#republish-reason")).to_contain_text("Edit and republish (or Repair by schema, for many) sends it decompressed")
    expect(page.get_by_role("button", name="Close", exact=True)).to_be_enabled()
    # A disabled button looks so (app.css: any button, as the bulk preview's Start too).
    opacity = "e => getComputedStyle(e).opacity"
    assert republish.evaluate(opacity) == "0.55"
    assert page.get_by_role("button", name="Close", exact=True).evaluate(opacity) == "1"

    for expected in (orders[1], orders[2]):
        page.get_by_role("link", name=re.compile(r"^Next")).click()
        page.wait_for_url(re.compile(rf"/entries/{expected}\?subject=orders\.(\*|%2A)$"))
    expect(page.locator("h1")).to_contain_text(f"Entry {orders[2]}")
    page.get_by_role("link", name=re.compile(r"^‹ Previous")).click()
    page.wait_for_url(re.compile(rf"/entries/{orders[1]}\?subject=orders\.(\*|%2A)$"))
    expect(republish).to_be_enabled()  # a plain JSON order, its stream there
    expect(page.locator("#republish-reason")).to_have_count(0)

    page.get_by_role("link", name="Back to the list").click()
    page.wait_for_url(re.compile(r"/\?subject=orders\.(\*|%2A)$"))
    expect(page.locator("#filters input[name=subject]")).to_have_value("orders.*")
    expect(page.locator("table.entries tbody tr[data-id]")).to_have_count(len(orders))


def test_the_jobs_page_follows_a_job_until_it_is_done_without_a_reload(app, live_server, page, nats_server,
                                                                       monkeypatch):
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"customer_id": "c-%d"}' % i for i in range(20)])
    rt = runtime_of(app)
    assert rt.jobs.recovered.wait(10)
    # Made without starting, and the runner's recovery (every few seconds it starts every queued
    # job) kept from it: the page finds it unfinished, whatever the machine's speed.
    monkeypatch.setattr(rt.jobs, "resume_unfinished", lambda: None)
    job_id = jobs.create_job(rt, "republish", actor="ann", ids=ids, start=False)
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/jobs")
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs")).to_have_attribute(
        "aria-current", "page")
    row = page.locator(f'tr[data-job="{job_id}"]')
    expect(row).to_contain_text("20 selected entries")
    expect(row).to_contain_text("queued")
    expect(row).to_contain_text("0 done, 0 failed of 20")
    page.evaluate("window.notReloaded = true")

    rt.jobs.submit(job_id)
    expect(row).to_contain_text("20 done, 0 failed, 0 skipped", timeout=EXPECT_TIMEOUT)
    expect(row.locator("progress")).to_have_attribute("value", "100.0")
    expect(row).to_contain_text("items/s")
    assert page.evaluate("window.notReloaded") is True
    assert len(support.stream_messages(nats_server.url)) == 20

    row.get_by_role("link", name=str(job_id)).click()
    page.wait_for_url(re.compile(rf"/jobs/{job_id}$"))
    expect(page.locator(".job-selection")).to_contain_text("20 selected entries")
    expect(page.locator(".job-rate")).to_contain_text("items/s")


def test_the_focus_stays_on_its_control_while_a_jobs_page_polls_itself(app, live_server, page, nats_server,
                                                                       monkeypatch):
    """A job's page swaps its progress every second: the focus on one of its links went to
    Cancel job (Enter would have cancelled it), then to the page. It stays on the same link."""
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"customer_id": "c-%d"}' % i for i in range(3)])
    rt = runtime_of(app)
    assert rt.jobs.recovered.wait(10)
    monkeypatch.setattr(rt.jobs, "resume_unfinished", lambda: None)  # queued: its page polls on
    job_id = jobs.create_job(rt, "republish", actor="ann", ids=ids, start=False)
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/jobs/{job_id}")
    progress = page.locator("#job-progress")
    link = progress.get_by_role("link").first
    href = link.get_attribute("href")
    link.focus()
    for swap in (1, 2):  # each poll's section is a new element
        page.evaluate("document.getElementById('job-progress').dataset.old = 'yes'")
        page.wait_for_function("() => !document.getElementById('job-progress').dataset.old", timeout=EXPECT_TIMEOUT)
        page.wait_for_function("href => document.activeElement && document.activeElement.getAttribute('href') === href",
                               arg=href, timeout=EXPECT_TIMEOUT)
    assert page.evaluate("document.activeElement.textContent.trim()") == link.text_content().strip()
