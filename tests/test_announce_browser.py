"""In Debian's Chromium, a part htmx replaces whole is no live region: what it says when it
changes (a job that ended, seen on its page and on the jobs list) is said by the page's one status
region, which stays, and only when it changes; not the progress of every poll."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.runtime import runtime_of

from . import support


@pytest.fixture
def app(make_app):
    """The app with three open entries; nothing started (a close job needs no NATS, and runs when
    the test submits it)."""
    application = make_app()
    for seq in (1, 2, 3):
        support.dead_letter(application, seq, payload=b'{"order_id": %d}' % seq, Dlq_Reason="fatal")
    return application


@pytest.mark.parametrize("where", ["/jobs/{job}", "/jobs"])
def test_a_job_that_ends_is_said_by_the_pages_status_region(app, live_server, page, where):
    rt = runtime_of(app)
    job_id = jobs.create_job(rt, "close", actor="ann", filter_args={"reason": "fatal"}, note="known", start=False)
    support.sign_in(page, live_server, app, "operator")
    page.add_init_script("window.settled = 0; document.addEventListener('htmx:afterSettle', () => window.settled++);")
    page.goto(live_server + where.format(job=job_id))
    part = page.locator("#job-progress" if "{job}" in where else "#jobs")
    expect(part).to_have_attribute("hx-trigger", "every 1s" if "{job}" in where else "every 2s")  # it polls
    assert part.get_attribute("aria-live") is None  # replaced whole at each poll: not a live region
    announcer = page.locator("#announcer")
    expect(announcer).to_have_attribute("role", "status")
    # Two polls while it waits to run say nothing: nothing a person must hear changed.
    page.wait_for_function("() => window.settled >= 2", timeout=20_000)
    assert announcer.text_content() == ""
    rt.jobs.submit(job_id)
    expect(announcer).to_have_text(f"Job {job_id} finished: 3 done, 0 failed, 0 skipped.", timeout=20_000)


def test_the_status_banner_says_a_line_once_when_it_comes_not_at_each_poll(make_app, nats_server, page, tmp_path):
    """The banner was a live region polled every 2 s whose "(12 s ago)" and counts moved: a
    screen reader read it again at each poll."""
    live = make_app(settings=support.make_settings(tmp_path, nats_server.url), online=True)
    rt = runtime_of(live)
    server, thread = support.serve_in_thread(live)
    try:
        base = f"http://127.0.0.1:{server.effective_port}"
        support.dead_letter_orders(live, nats_server.url, [b'{"order_id": "o-1"}'])
        support.sign_in(page, base, live, "viewer")
        page.add_init_script("window.settled = 0; document.addEventListener('htmx:afterSettle', () => window.settled++);")
        page.goto(f"{base}/groups")
        banner, announcer = page.locator("[data-status-banner]"), page.locator("#announcer")
        assert banner.get_attribute("aria-live") is None
        with support.writer_stopped(rt):  # the mirror receives, nothing is committed
            support.run(support.publish_fast(nats_server.url, "dlq.orders.created", 3,
                                             lambda i: (b'{"order_id": "o-2"}', support.dlq_headers())))
            expect(banner).to_contain_text("The list is behind NATS", timeout=30_000)
            expect(announcer).to_have_text("The list is behind NATS on stream DLQ.")
            page.evaluate("() => { document.getElementById('announcer').textContent = ''; window.settled = 0; }")
            page.wait_for_function("() => window.settled >= 2", timeout=20_000)  # two more polls, its "(n s ago)" moving
            assert announcer.text_content() == ""
        # Its end is said too, once (it went unsaid: the line just left the banner). The three
        # dead letters, stored now, are said by the page's own poll ("New dead letters ...").
        expect(banner).not_to_contain_text("The list is behind NATS", timeout=30_000)
        expect(announcer).to_contain_text("The list has caught up with NATS on stream DLQ.")
        page.evaluate("() => { document.getElementById('announcer').textContent = ''; window.settled = 0; }")
        page.wait_for_function("() => window.settled >= 3", timeout=20_000)
        assert "caught up" not in announcer.text_content()
    finally:
        support.stop_serving(server, thread)


@pytest.mark.parametrize("state, said", [
    ("running", "Job 5 running."),
    ("done", "Job 5 finished: 3 done, 0 failed, 1 skipped."),
    ("cancelled", "Job 5 cancelled: 3 done, 0 failed, 1 skipped, 2 not processed."),  # was "cancelled: cancelled: ..."
])
def test_what_a_job_says_names_its_state_once(app, state, said):
    job = {"id": 5, "state": state, "done": 3, "failed": 0, "skipped": 1, "cancelled": 2, "cancel_requested": False}
    with app.test_request_context("/"):
        assert " ".join(str(app.jinja_env.get_template("_jobs.html").module.announce(job)).split()) == said


def test_new_entries_are_said_once_when_they_arrive_not_at_each_poll(app, live_server, page):
    """The results were a live region holding the count of new entries polled every 5 s: a screen
    reader read "1 new — show", "2 new — show"... at each poll. The arrival is said once."""
    support.sign_in(page, live_server, app, "viewer")
    page.add_init_script("window.settled = 0; document.addEventListener('htmx:afterSettle', () => window.settled++);")
    page.goto(live_server + "/")
    results, announcer = page.locator("#results"), page.locator("#announcer")
    assert results.get_attribute("aria-live") is None
    expect(page.locator("#entry-rows > tr")).to_have_count(3)
    support.dead_letter(app, 4, payload=b'{"order_id": 4}', Dlq_Reason="fatal")
    expect(page.locator(".new-entries")).to_contain_text("1 new", timeout=20_000)
    expect(announcer).to_have_text("New dead letters have arrived: Show them is above the list.")
    page.evaluate("() => { document.getElementById('announcer').textContent = ''; }")
    support.dead_letter(app, 5, payload=b'{"order_id": 5}', Dlq_Reason="fatal")
    expect(page.locator(".new-entries")).to_contain_text("2 new", timeout=20_000)
    page.evaluate("() => { window.settled = 0; }")
    page.wait_for_function("() => window.settled >= 1", timeout=20_000)  # one more poll after the change
    assert announcer.text_content() == ""
    page.goto(live_server + "/groups")
    assert page.locator("#results").get_attribute("aria-live") is None


def test_the_groups_page_says_once_that_new_dead_letters_arrived_and_shows_them_on_request(app, live_server, page):
    """The groups page showed the counts of the moment it was opened for as long as it stayed
    open: it now polls as the list does, says the arrival once, and shows the groups again."""
    support.sign_in(page, live_server, app, "viewer")
    page.goto(live_server + "/groups?window=1h")
    announcer = page.locator("#announcer")
    support.dead_letter(app, 4, "payments.captured", payload=b'{"order_id": 4}', Dlq_Reason="fatal",
                        Dlq_Error="card 4 declined by the bank")
    expect(page.locator(".new-entries")).to_contain_text("1 new", timeout=20_000)
    expect(announcer).to_have_text("New dead letters have arrived: Show them is above the groups.")
    assert "declined" not in page.locator("#results").inner_text()
    page.locator("#new-entries-show").click()
    expect(page.locator("#results")).to_contain_text("declined", timeout=20_000)
    assert "window=1h" in page.url
    expect(page.locator(".new-entries")).to_have_text("")


@pytest.mark.parametrize("where, status, first, same_count, none", [
    ("/", "open", "3 dead letters shown for status open.", "3 dead letters shown for status open, reason fatal.",
     "No dead letter matches status open, subject payments.*, reason fatal."),
    ("/groups", "", "1 failure group shown.", "1 failure group shown for reason fatal.",
     "No failure group matches subject payments.*, reason fatal."),
])
def test_a_filter_change_says_what_is_shown(app, live_server, page, where, status, first, same_count, none):
    """The results, replaced whole after a search or a filter change, said nothing: what is shown
    is said by the page's status region after each change, not at the page's polls."""
    support.sign_in(page, live_server, app, "viewer")
    page.add_init_script("window.settled = 0; document.addEventListener('htmx:afterSettle', () => window.settled++);")
    page.goto(live_server + where)
    announcer = page.locator("#announcer")
    # The list's counts come after the page, replacing their part: that says nothing.
    page.wait_for_function("() => !document.querySelector('.summary[aria-busy]')", timeout=20_000)
    assert announcer.text_content() == ""  # what the page showed as it loaded is not read out
    page.locator("select[name=status]").select_option(status)
    expect(announcer).to_have_text(first, timeout=20_000)
    for name, value, said in (("reason", "fatal", same_count), ("subject", "payments.*", none)):
        page.locator(f"form[role=search] input[name={name}]").fill(value)
        page.locator(f"form[role=search] input[name={name}]").press("Enter")
        expect(announcer).to_have_text(said, timeout=20_000)  # the same count, another sentence; then none
    if where == "/":  # the rows again, whose count of new entries is polled: a poll says nothing
        page.locator("form[role=search] input[name=subject]").fill("")
        page.locator("form[role=search] input[name=subject]").press("Enter")
        expect(announcer).to_have_text(same_count, timeout=20_000)
        page.evaluate("() => { document.getElementById('announcer').textContent = ''; window.settled = 0; }")
        page.wait_for_function("() => window.settled >= 2", timeout=20_000)
        assert announcer.text_content() == ""


def test_a_refused_ignore_names_its_box_and_a_state_change_is_said(app, live_server, page):
    """"soon" in the box labelled "Ignore for" said "until 'soon' is not valid" (the next box is
    labelled "until ... more failures"), tied to no box, the focus at the top; a change that
    worked said nothing to a screen reader."""
    support.sign_in(page, live_server, app, "operator")
    page.goto(live_server + "/groups")
    page.get_by_role("link", name="Open group").click()
    page.wait_for_url(re.compile(r"/groups/\d+$"))
    group_id = page.url.rsplit("/", 1)[1]
    box = page.get_by_label("Ignore for", exact=True)
    box.fill("soon")
    page.get_by_role("button", name="Ignore for a time").click()
    error = page.locator("#state-error")
    expect(error).to_contain_text("Ignore for 'soon' is not valid")
    box = page.get_by_label("Ignore for", exact=True)
    expect(box).to_be_focused()
    expect(box).to_have_attribute("aria-invalid", "true")
    expect(box).to_have_attribute("aria-describedby", "state-error")
    page.get_by_role("button", name="Assign to me").click()
    expect(page.locator("#announcer")).to_have_text(re.compile(rf"^Group {group_id} is assigned to \S+\. See its activity$"))
