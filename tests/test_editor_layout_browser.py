"""The editor beside its errors in Chromium: side by side from 1200 px, stacked below; the failing
line marked in the gutter and gone once fixed; the actions in view; and the page after a
republish saying what was done in a status region, with a link to it."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from . import support
from .test_editor import SCHEMA

# A long order (the editor holds 30 lines at most and scrolls), its first price a string.
ORDER = {"order_id": "o-1", "customer_id": "c-1",
         "items": [{"sku": f"sku-{i}", "qty": 1, "price": "12.50" if i == 0 else 3.5} for i in range(25)]}
PRETTY = json.dumps(ORDER, indent=2)
PRICE_LINE = PRETTY.splitlines().index('      "price": "12.50"') + 1


@pytest.fixture
def settings(tmp_path, nats_server):
    """The orders schema: prices are numbers."""
    return support.make_settings(tmp_path, nats_server.url, schemas_dir=support.orders_schema_folder(tmp_path, SCHEMA))


def _boxes(page):
    return page.locator("#payload").bounding_box(), page.locator("#payload-check").bounding_box()


def test_the_errors_stand_beside_the_editor_from_1200_px_and_below_it_on_a_narrower_window(app, live_server, page):
    entry_id = support.dead_letter(app, 1, payload=json.dumps(ORDER).encode())
    support.sign_in(page, live_server, app, "operator")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server}/entries/{entry_id}/edit")
    editor, check = _boxes(page)
    assert check["x"] >= editor["x"] + editor["width"], (editor, check)
    assert abs(check["y"] - editor["y"]) < 60 and check["y"] < 900
    republish = page.get_by_role("button", name="Republish", exact=True)
    box = republish.bounding_box()
    assert box["y"] + box["height"] <= 900, f"the Republish button is at {box['y']} px, below the window"

    for width in (1100, 390):
        page.set_viewport_size({"width": width, "height": 844})
        page.goto(f"{live_server}/entries/{entry_id}/edit")
        editor, check = _boxes(page)
        assert check["y"] >= editor["y"] + editor["height"], (width, editor, check)
        box = republish.bounding_box()
        assert box["y"] + box["height"] <= 844, f"at {width} px the Republish button is at {box['y']} px"


def test_the_failing_line_is_marked_in_the_gutter_until_it_is_fixed(app, live_server, page):
    entry_id = support.dead_letter(app, 1, payload=json.dumps(ORDER).encode())
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/entries/{entry_id}/edit")
    gutter = page.locator("pre.gutter")
    expect(gutter.locator(".failing")).to_have_text([str(PRICE_LINE)])
    row = gutter.locator(".failing").bounding_box()
    editor = page.locator("#payload")
    top = editor.bounding_box()["y"]
    line_height = float(editor.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)"))
    assert abs(row["y"] - (top + 8 + (PRICE_LINE - 1) * line_height)) < line_height  # beside its line

    page.get_by_role("button", name=f"Line {PRICE_LINE}").click()
    expect(editor).to_be_focused()
    selected = editor.evaluate("e => e.value.slice(e.selectionStart, e.selectionEnd)")
    assert selected == '      "price": "12.50"'

    editor.fill(PRETTY.replace('"12.50"', "12.50"))
    expect(page.locator("#payload-check")).to_contain_text("It passes the current schema")
    expect(gutter.locator(".failing")).to_have_count(0)
    # A new line moves the numbers with it.
    editor.fill("{\n\n" + PRETTY[2:])
    expect(page.locator("#payload-check .failing-lines")).to_contain_text(f"Line {PRICE_LINE + 1}")
    expect(gutter.locator(".failing")).to_have_text([str(PRICE_LINE + 1)])


def test_after_an_edited_republish_the_page_announces_what_was_done_with_a_link(app, live_server, page, nats_server):
    support.make_orders_stream(nats_server.url)
    entry_id = support.dead_letter(app, 1, payload=json.dumps(ORDER).encode())
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/entries/{entry_id}/edit")
    page.locator("#payload").fill(PRETTY.replace('"12.50"', "12.50"))
    expect(page.locator("#payload-check")).to_contain_text("It passes the current schema")
    page.get_by_role("button", name="Republish", exact=True).click()
    page.wait_for_url(re.compile(rf"/entries/{entry_id}$"))
    status = page.get_by_role("status")
    expect(status).to_have_text(f"Republished entry {entry_id} with the edited payload to orders.created, "
                                "stored by stream ORDERS as message 1. See it in the timeline")
    assert status.get_attribute("aria-live") == "polite"
    # Shown as the page came (without script too), the link beside the words.
    shown = page.locator("[data-done] p").first
    expect(shown).to_be_visible()
    shown.get_by_role("link", name="See it in the timeline").click()
    expect(page.locator("#timeline-title")).to_be_in_viewport()
