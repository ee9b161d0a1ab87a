"""The payload editor in Debian's Chromium: a pretty payload, a one-line fix checked as it is
typed, and the entry page telling the edit afterwards."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from . import support
from .test_editor import ORIGINAL, PRETTY, SCHEMA

EXPECT_TIMEOUT = 10_000
#: A check or a republish of a payload of half a megabyte and more, on a loaded machine.
LARGE_TIMEOUT = 30_000


@pytest.fixture
def settings(tmp_path, nats_server):
    """The orders schema: prices are numbers."""
    return support.make_settings(tmp_path, nats_server.url, schemas_dir=support.orders_schema_folder(tmp_path, SCHEMA))


def test_an_operator_fixes_a_field_in_the_pretty_payload_and_the_entry_tells_the_edit(
        app, live_server, page, nats_server):
    support.make_orders_stream(nats_server.url)
    entry_id = support.dead_letter(app, 1, payload=ORIGINAL, Dlq_Reason="schema_invalid")
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/entries/{entry_id}/edit")

    editor = page.locator("#payload")
    assert editor.input_value() == PRETTY
    check = page.locator("#payload-check")
    expect(check).to_contain_text("'12.50' is not of type 'number'")
    fixed = PRETTY.replace('"12.50"', "12.50")
    editor.fill(fixed)
    expect(check).to_contain_text("It passes the current schema", timeout=EXPECT_TIMEOUT)
    # The check is replaced at each edit: what it found is said by the page's status region.
    expect(page.locator("#announcer")).to_have_text("It passes the current schema orders.json.")
    expect(check.locator(".diff .del")).to_have_text(['-      "price": "12.50"'])
    expect(check.locator(".diff .add")).to_have_text(['+      "price": 12.50'])

    page.get_by_role("button", name="Republish", exact=True).click()
    page.wait_for_url(re.compile(rf"/entries/{entry_id}$"))
    [message] = support.stream_messages(nats_server.url)
    assert message.data == fixed.encode()

    moment = page.locator(".moment-republish")
    expect(moment.locator("strong")).to_have_text("Edited and republished to orders.created")
    expect(moment.locator(".diff .add")).to_have_text(['+      "price": 12.50'])
    moment.get_by_text("The payload sent").click()
    expect(moment.locator(".sent-payload pre")).to_have_text(fixed)
    why = page.locator("section.why")
    expect(why.locator(".last-sent")).to_contain_text("The payload last sent, edited by operator-browser at")
    expect(why.locator(".last-sent")).to_contain_text("Valid against orders.json")
    expect(why).to_contain_text("The original payload against the current schema")
    expect(why.locator(".schema-errors").last).to_contain_text("/items/0/price")


def test_a_payload_of_more_than_half_a_megabyte_is_checked_and_republished_as_edited(app, live_server, page,
                                                                                    nats_server):
    """A form field was taken up to 500,000 bytes (Flask's default): the edit of a larger payload
    was a 413 "the dashboard takes at most 16 MB", its check kept the verdict of the text before,
    and the edit was lost. One past what the dashboard takes says so where the verdict was."""
    import json

    support.make_orders_stream(nats_server.url)
    large = json.dumps({"customer_id": "C-1", "items": [{"sku": "gizmo", "price": 1}],
                        "note": "x" * 600_000}, indent=2)
    entry_id = support.dead_letter(app, 1, payload=large.encode(), Dlq_Reason="fatal")
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/entries/{entry_id}/edit")
    check = page.locator("#payload-check")
    expect(check).to_contain_text("Unchanged from the original")
    edited = large.replace('"price": 1', '"price": 2')
    page.locator("#payload").fill(edited)
    changed = "too large to compare line by line"  # a change, which the check now tells
    expect(check).to_contain_text(changed, timeout=LARGE_TIMEOUT)

    # A check the dashboard cannot make (here its answer to a body past the 16 MB it takes, given
    # by the browser's router: sending 17 MB is slow on a loaded machine) says so where the verdict was.
    too_large = "The request's body is 17.0 MB; the dashboard takes at most 16 MB. Nothing was done."
    answers = [lambda route: route.fulfill(status=413, content_type="text/plain", body=too_large),
               lambda route: route.abort(),  # no answer at all
               # A 400 is swapped elsewhere; here the sentence took the panel's place, and the
               # checks after it had nowhere to go.
               lambda route: route.fulfill(status=400, content_type="text/plain", body="The CSRF token is missing.")]
    for n, (answer, said) in enumerate(zip(answers, [too_large, "the dashboard did not answer.",
                                                     "The CSRF token is missing."])):
        page.route("**/validate", answer)
        page.locator("#payload").fill(edited + " " * (n + 1))
        expect(check).to_have_text(f"It could not be checked: {said}", timeout=EXPECT_TIMEOUT)
        expect(page.locator("#announcer")).to_have_text(f"It could not be checked: {said}")
        page.unroute("**/validate")

    page.locator("#payload").fill(edited)
    expect(check).to_contain_text(changed, timeout=LARGE_TIMEOUT)
    page.get_by_role("button", name="Republish", exact=True).click()
    page.wait_for_url(re.compile(rf"/entries/{entry_id}$"))
    [message] = support.stream_messages(nats_server.url)
    assert message.data == edited.encode()
