"""In Debian's Chromium, what a person under pressure meets: a focus ring seen on the light page,
a schema error's pointer read on the dark one, tick boxes a finger hits on a phone, and the old
results marked stale while a search loads."""

from __future__ import annotations

import json

from playwright.sync_api import expect

from dlq_dashboard.runtime import runtime_of

from . import support
from .demo_entries import store_demo_entries

#: The contrast of two CSS colours (WCAG 2.1's relative luminance), as the page computes them.
CONTRAST = """([a, b]) => {
  const rgb = c => c.match(/[\\d.]+/g).slice(0, 3).map(Number).map(v => v / 255)
                     .map(v => v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4));
  const lum = c => { const [r, g, b] = rgb(c); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}"""


def test_the_focus_ring_stands_out_on_the_light_page(app, live_server, page):
    support.sign_in(page, live_server, app, "viewer")
    page.emulate_media(color_scheme="light")
    page.goto(f"{live_server}/groups")
    page.keyboard.press("Tab")
    focused = page.evaluate("""() => [document.activeElement !== document.body,
                                      getComputedStyle(document.activeElement).outlineStyle,
                                      parseFloat(getComputedStyle(document.activeElement).outlineWidth)]""")
    assert focused[0] and focused[1] == "solid" and focused[2] >= 2, focused  # a ring is drawn where Tab went
    ring, background = page.evaluate("""() => [getComputedStyle(document.activeElement).outlineColor,
                                               getComputedStyle(document.body).backgroundColor]""")
    assert page.evaluate(CONTRAST, [ring, background]) >= 3, (ring, background)  # WCAG 2.1 1.4.11


def test_a_schema_errors_pointer_reads_on_the_dark_page(app, live_server, page):
    entry_id = support.dead_letter(app, 1, payload=b'{"price": "ten"}', Dlq_Reason="schema_invalid",
                                   Dlq_Schema_Errors=json.dumps([{"path": "/price", "message": "not a number"}]))
    support.sign_in(page, live_server, app, "viewer")
    page.emulate_media(color_scheme="dark")
    page.goto(f"{live_server}/entries/{entry_id}")
    pointer = page.locator("a.pointer code").first
    expect(pointer).to_be_visible()
    colours = pointer.evaluate("code => [getComputedStyle(code).color, getComputedStyle(code).backgroundColor]")
    assert page.evaluate(CONTRAST, colours) >= 4.5, colours


def test_on_a_phone_a_rows_tick_box_is_a_touch_target(app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 5)
    support.sign_in(page, live_server, app, "operator")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server}/")
    box = page.locator("#entry-rows input[name=ids]").first.bounding_box()
    assert box["width"] >= 24 and box["height"] >= 24, box  # WCAG 2.2 2.5.8


def test_the_old_results_are_marked_while_a_search_loads(app, live_server, page):
    store_demo_entries(runtime_of(app).engine, 5)
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/")
    held: list = []
    page.route(f"{live_server}/?q=*", lambda route: held.append(route))  # its answer not come yet
    page.fill("#q", "CRM")
    expect(page.locator("#results")).to_have_class("results htmx-request")  # dimmed by app.css
    expect(page.locator("#results")).to_have_css("opacity", "0.6")
    for route in held:
        route.continue_()
    expect(page.locator("#results")).not_to_have_class("results htmx-request")
