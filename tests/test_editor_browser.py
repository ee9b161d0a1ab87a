"""The payload editor in Debian's Chromium: a pretty payload, a one-line fix checked as it is
typed, and the entry page telling the edit afterwards."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from . import support
from .test_editor import ORIGINAL, PRETTY, SCHEMA

EXPECT_TIMEOUT = 10_000


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
