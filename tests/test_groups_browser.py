"""The failure groups in Debian's Chromium: each group's trend with its text alternative, its
counts by status and readable label, a subject that never breaks inside a word, and Republish
for a whole group through the bulk preview (operators only)."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from . import browser_support, support

EXPECT_TIMEOUT = 10_000

# Lines the subject's text occupies: the distinct tops of the rectangles of its text.
SUBJECT_LINES = """(cell) => {
  const range = document.createRange();
  range.selectNodeContents(cell.querySelector('.subject-name'));
  return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
}"""


def two_groups(app, nats_server) -> tuple[list[int], list[int]]:
    """3 "order <n> not found" and 2 "carrier down" dead letters of orders.created, through NATS."""
    support.make_orders_stream(nats_server.url)
    orders = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": %d}' % i for i in range(3)],
                                        headers={"Dlq-Error": "order 4711 not found"})
    carrier = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": 9}', b'{"order_id": 10}'],
                                         headers={"Dlq-Error": "carrier down"})
    return orders, carrier


def group_row(page, label: str):
    return page.locator("table.groups tbody tr").filter(has_text=label)


def test_a_viewer_sees_each_groups_trend_counts_and_label_and_no_actions(app, live_server, page, nats_server):
    two_groups(app, nats_server)
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/groups")

    row = group_row(page, "order <id> not found")
    expect(row.locator("td.num")).to_have_text("3")
    expect(row.locator(".by-status")).to_have_text("open 3")
    trend = row.locator("svg.sparkline")
    expect(trend).to_have_attribute("aria-label", "3 in the last 24 h, peak 3/h")
    expect(trend.locator("title")).to_contain_text("3 in the last 24 h, peak 3/h")
    # One bar, the peak: this hour's (or the last one's, had the hour just turned).
    expect(trend.locator("path.spark-bars")).to_have_attribute("d", re.compile(r"^M(93|89)\.5 20v-19$"))
    expect(row.locator(".group-key")).to_have_count(0)  # the label is the whole key: nothing more to show
    expect(group_row(page, "carrier down").locator("td.num")).to_have_text("2")
    assert page.get_by_role("button", name="Republish").count() == 0
    assert page.get_by_role("button", name="Close").count() == 0


def test_a_subject_stays_on_one_line_on_a_phone_and_a_wide_screen_on_the_groups_and_the_list(app, live_server, page, nats_server):
    two_groups(app, nats_server)
    support.sign_in(page, live_server, app, "operator")  # the widest rows: with the actions
    for width in (390, 1440):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server}/groups")
        cells = page.locator("td.group-subject")
        assert cells.count() == 2
        for i in range(cells.count()):
            cell = cells.nth(i)
            assert cell.inner_text() == "orders.created"
            assert cell.evaluate(SUBJECT_LINES) == 1, f"the subject wraps at {width} px"
            height, line = cell.locator(".subject-name").evaluate(
                "e => [e.getBoundingClientRect().height, parseFloat(getComputedStyle(e).lineHeight)]")
            assert height < 1.5 * line, f"the subject is {height} px high at {width} px, a line is {line}"
        page.goto(f"{live_server}/")  # the list's subject column alike
        cells = page.locator("#entry-rows td.subject")
        assert cells.count() == 5
        for i in range(cells.count()):
            assert cells.nth(i).inner_text() == "orders.created"
            assert cells.nth(i).evaluate(SUBJECT_LINES) == 1, f"a subject on the list wraps at {width} px"


LONG_ERROR = "TimeoutError: the CRM shard eu-3 did not answer for customer C-1042 within the request's deadline"


def store_a_long_errors_group(app, reason: str = "max_deliveries") -> None:
    """Three dead letters of one group whose error is a long sentence."""
    for seq in (1, 2, 3):
        support.dead_letter(app, seq, Dlq_Reason=reason, Dlq_Error=LONG_ERROR)


def test_beside_an_operators_actions_the_error_keeps_a_readable_width_and_every_action_is_in_the_window(
        app, live_server, page):
    # Before: six links and buttons on one line left the error 64 px at 1440 px, a word a line,
    # and at 1024 px the last actions stood beyond the window, in the table's own scrolling box.
    store_a_long_errors_group(app, "schema_invalid")  # the widest rows: every action, Repair too
    support.dead_letter(app, 4, subject="payments.captured", Dlq_Reason="fatal", Dlq_Error="carrier down")
    support.sign_in(page, live_server, app, "operator")  # the widest rows: with the actions
    for width in (1440, 1280, 1101, 1100, 961, 800, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server}/groups")
        browser_support.assert_fits(page, f"/groups at {width} px")
        row = group_row(page, "did not answer")
        error = row.locator("td.error-text").bounding_box()
        assert error["width"] >= 150, f"the error is {error['width']} px wide at {width} px"
        controls = row.locator(".group-action-list > *")
        assert controls.count() == 6  # Open group, Show entries, Republish, Close, Patch, Repair
        for i in range(controls.count()):
            box = controls.nth(i).bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= width, \
                f"{controls.nth(i).inner_text()!r} is beyond the window at {width} px"


def test_on_a_phone_what_a_group_is_is_folded_and_the_first_group_is_in_the_first_screen(app, live_server, page):
    store_a_long_errors_group(app)
    support.sign_in(page, live_server, app, "operator")
    about = page.locator("details.about-groups")
    page.goto(f"{live_server}/groups")
    expect(about).to_have_attribute("open", "")  # a desk's window: open
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server}/groups")
    page.wait_for_function(browser_support.SETTLED)
    expect(about).not_to_have_attribute("open", "")
    first = page.locator("table.groups tbody tr").first.bounding_box()
    assert first["y"] >= 0 and first["y"] + first["height"] <= 844, f"the first group is at {first} on a 390x844 phone"


def test_an_operator_republishes_a_whole_group_through_the_preview(app, live_server, page, nats_server):
    two_groups(app, nats_server)
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/groups")

    group_row(page, "order <id> not found").get_by_role("button", name="Republish", exact=True).click()
    expect(page.locator("main")).to_contain_text("3 entries will be republished")
    expect(page.locator("main")).to_contain_text("status=open")
    assert support.stream_messages(nats_server.url) == []  # nothing is sent before the confirmation
    page.get_by_role("button", name="Start").click()

    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    expect(page.locator(".job-state")).to_contain_text("Finished: 3 done", timeout=20_000)
    assert sorted(m.data for m in support.stream_messages(nats_server.url)) == [
        b'{"order_id": 0}', b'{"order_id": 1}', b'{"order_id": 2}']
    page.goto(f"{live_server}/groups?status=any")
    expect(group_row(page, "order <id> not found").locator(".by-status")).to_have_text("republished 3")
    expect(group_row(page, "carrier down").locator(".by-status")).to_have_text("open 2")


def test_an_operator_closes_a_whole_group_with_a_note(app, live_server, page, nats_server):
    two_groups(app, nats_server)
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/groups")

    group_row(page, "carrier down").get_by_role("button", name="Close").click()
    expect(page.locator("main")).to_contain_text("2 entries will be closed")
    page.get_by_label("Note").fill("carrier outage, orders re-sent by hand")
    page.get_by_role("button", name="Start").click()

    expect(page.locator(".job-state")).to_contain_text("Finished: 2 done", timeout=20_000)
    page.goto(f"{live_server}/groups")  # open entries: the closed group is gone
    expect(page.locator("table.groups tbody tr")).to_have_count(1)
    expect(group_row(page, "order <id> not found").locator("td.num")).to_have_text("3")
    assert support.stream_messages(nats_server.url) == []
