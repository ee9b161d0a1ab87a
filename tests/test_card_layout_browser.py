"""On a phone (960 px and less) the list's rows are cards, in Debian's Chromium: what a card shows
that does not speak for itself (a key field's value, the source of several) carries its label,
and a failure group's newest entries are the list's cards, cell for cell. An entry's and a group's
short facts stand two a line. /sources fits every width, a source a block where its table does not."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from dlq_dashboard.config import load_settings
from dlq_dashboard.db.models import Entry
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import browser_support, support
from .browser_support import SETTLED
from .test_accessibility_browser import _violations

PHONE = (390, 844)
MAX_ROW = 120
# What a card shows that reads without a label: the tick, the number, the status, the reason, the
# age, the subject and the error.
SPEAKS_FOR_ITSELF = {"select", "id", "state", "reason", "failed", "subject", "error-text"}
# Each shown cell of a table's rows: its class, its label, what stands before it, its place.
CELLS = """(rows) => [...document.querySelectorAll(rows)].map(row => [...row.cells]
  .filter(cell => cell.getClientRects().length)
  .map(cell => ({cls: cell.className, label: cell.dataset.label || '',
                 before: getComputedStyle(cell, '::before').content, order: getComputedStyle(cell).order,
                 display: getComputedStyle(cell).display, height: row.getBoundingClientRect().height})))"""
LIST_ROWS, NEWEST_ROWS = "#entry-rows tr[data-id]", ".group-newest tbody tr"
LONG_SOURCE = "shipping-eu-west-production-warehouses"  # 38 characters, the longest name is 40


@pytest.fixture
def app(tmp_path, make_app):
    """Three sources, nothing started, with entries written as each source's mirror does, and a
    key field."""
    path = support.sources_file(tmp_path, [
        {"name": name, "nats_url": f"nats://127.0.0.1:{port}", "stream": "DLQ"}
        for port, name in enumerate(("orders", "billing", LONG_SOURCE), 1)])
    app = make_app(sources=load_settings({"DLQ_CONFIG": path}).sources, list_fields=(("Customer", "/customer_id"),))
    engine = runtime_of(app).engine
    for source, count in (("orders", 4), ("billing", 3)):
        messages = [StreamMessage(seq, "dlq.orders.created",
                                  support.dlq_headers("orders.created", Dlq_Reason="fatal",
                                                      Dlq_Error=f"customer C-{seq} not found in the ledger",
                                                      Dlq_Consumer="fulfilment-worker"),
                                  json.dumps({"order_id": f"o-{seq}", "customer_id": f"C-{seq}"}).encode(), utcnow())
                    for seq in range(1, count + 1)]
        ingest_dlq_batch(engine, "DLQ", f"e-{source}", messages, source=source)
    return app


def _cards(page, base: str, path: str, rows: str) -> list[list[dict]]:
    page.set_viewport_size({"width": PHONE[0], "height": PHONE[1]})
    page.goto(base + path)
    page.wait_for_function(SETTLED)
    browser_support.assert_fits(page, path)
    cards = page.evaluate(CELLS, rows)
    assert cards, f"{path}: no rows: {page.inner_text('main')[:600]}"
    for card in cards:
        assert card[0]["height"] <= MAX_ROW, f"{path}: a card {card[0]['height']} px tall"
    return cards


def test_on_a_phone_every_value_of_a_card_that_does_not_speak_for_itself_carries_its_label(app, live_server, page):
    support.sign_in(page, live_server, app, "operator")
    cards = _cards(page, live_server, "/", LIST_ROWS)
    for card in cards:
        labelled = {cell["label"] for cell in card if cell["cls"] not in SPEAKS_FOR_ITSELF}
        assert labelled == {"Source", "Customer"}, f"a card shows {labelled} besides what speaks for itself"
        for cell in card:
            if cell["cls"] not in SPEAKS_FOR_ITSELF:
                assert cell["before"] == f'"{cell["label"]}: "', f"{cell['label']} shown without its label"


def test_on_a_phone_a_groups_newest_entries_are_the_lists_cards(app, live_server, page):
    with runtime_of(app).engine.connect() as conn:
        group = conn.execute(select(Entry.group_id).where(Entry.source == "orders")).scalars().first()
    support.sign_in(page, live_server, app, "operator")
    shown = {cell["cls"]: cell for cell in _cards(page, live_server, "/", LIST_ROWS)[0]}
    newest = _cards(page, live_server, f"/groups/{group}", NEWEST_ROWS)
    assert len(newest) == 4
    for card in newest:
        assert [cell["cls"] for cell in card] == ["id", "state", "error-text", "failed"]
        for cell in card:
            as_listed = shown[cell["cls"]]
            assert (cell["display"], cell["order"], cell["before"]) == \
                (as_listed["display"], as_listed["order"], as_listed["before"]), f"{cell['cls']} not as the list shows it"


#: Each fact of a page's box of facts: its label and its box.
FACTS = """() => [...document.querySelectorAll('dl.facts > div')].map(fact => {
  const box = fact.getBoundingClientRect();
  return {label: fact.querySelector('dt').textContent.trim(), left: Math.round(box.left),
          top: Math.round(box.top), width: box.width, whole: fact.parentElement.clientWidth};
})"""
#: The facts that keep a whole line on a phone: long, or of a length no one knows.
WHOLE_LINE = {"Source", "Subject", "Error", "Stored as", "Trace", "Key"}


@pytest.mark.parametrize("page_of", ["entry", "group"])
def test_on_a_phone_the_short_facts_of_an_entry_and_a_group_stand_two_a_line(app, live_server, page, page_of):
    with runtime_of(app).engine.connect() as conn:
        entry_id, group = conn.execute(select(Entry.id, Entry.group_id).where(Entry.source == "orders")).first()
    path = f"/entries/{entry_id}" if page_of == "entry" else f"/groups/{group}"
    support.sign_in(page, live_server, app, "operator")
    page.set_viewport_size({"width": PHONE[0], "height": PHONE[1]})
    page.goto(live_server + path)
    browser_support.assert_fits(page, path)
    facts = page.evaluate(FACTS)
    short = [fact for fact in facts if fact["label"] not in WHOLE_LINE]
    assert len(short) >= 4, facts
    for fact in facts:
        if fact["label"] in WHOLE_LINE:
            assert fact["width"] > 0.9 * fact["whole"], f"{path}: {fact['label']} shares its line"
        else:
            assert fact["width"] < 0.6 * fact["whole"], f"{path}: {fact['label']} takes a whole line"
    lines = {}
    for fact in short:
        lines.setdefault(fact["top"], []).append(fact["label"])
    assert any(len(labels) == 2 for labels in lines.values()), f"{path}: no two facts share a line: {lines}"

    page.set_viewport_size({"width": 1280, "height": 900})  # a desk's window: as many a line as fit
    page.wait_for_function("() => document.querySelector('dl.facts > div').getBoundingClientRect().width < 400")
    tops = [fact["top"] for fact in page.evaluate(FACTS) if fact["label"] not in WHOLE_LINE - {"Subject", "Source"}]
    assert max(tops.count(top) for top in tops) >= 3, tops


@pytest.mark.parametrize("width", (1440, 1024, 800, 390))
def test_an_entrys_group_line_stands_apart_from_its_action_bar_at_every_width(app, live_server, page, width):
    """The action bar (here with the sentence why republishing is not possible: the source's NATS
    is down) and the "Failure group" line below it: at 800 px, where the bar wraps under the
    title, the line touched the sentence's box."""
    with runtime_of(app).engine.connect() as conn:
        entry_id = conn.execute(select(Entry.id).where(Entry.source == "orders")).scalars().first()
    support.sign_in(page, live_server, app, "operator")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server}/entries/{entry_id}")
    page.wait_for_function(SETTLED)
    expect(page.locator(".action-bar .note")).to_contain_text("not possible")
    bar = page.locator(".entry-head").evaluate(
        "(head) => Math.max(...[...head.querySelectorAll('*')].map(e => e.getBoundingClientRect().bottom))")
    line = page.locator("p.group-link").bounding_box()["y"]
    assert line - bar >= 6, f"at {width} px the group line is {line - bar:.1f} px below the action bar"


@pytest.mark.parametrize("width", (1440, 1101, 1024, 800, 390))
def test_sources_fit_every_width_with_each_source_a_block_where_its_table_would_not(app, live_server, page, width):
    """The table needs about 1,140 px: below 1,101 each source is a block (its counts in words),
    above it a row; either way nothing scrolls sideways, not even inside the table's box, and
    each source's name reads as it is written (a row's header once showed it as a column's
    title, in capitals) and is broken at its hyphens only."""
    support.sign_in(page, live_server, app, "viewer")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(live_server + "/sources")
    page.wait_for_function(SETTLED)
    browser_support.assert_fits(page, "/sources")
    box = page.evaluate("() => { const b = document.querySelector('#sources .table-scroll'); return [b.clientWidth, b.scrollWidth]; }")
    assert box[1] <= box[0], f"the sources' table scrolls in its box at {width} px: {box}"
    names = page.locator("table.sources th.source-name")
    assert sorted(names.all_inner_texts()) == sorted(["orders", "billing", LONG_SOURCE])
    # Where each line of the long name starts: only after a hyphen.
    breaks = names.filter(has_text=LONG_SOURCE).evaluate("""(th) => { const text = th.firstChild, range = document.createRange();
      const top = i => { range.setStart(text, i); range.setEnd(text, i + 1); return Math.round(range.getBoundingClientRect().top); };
      const found = []; for (let i = 1; i < text.length; i++) if (top(i) > top(i - 1)) found.push(text.data.slice(0, i));
      return found; }""")
    assert all(before.endswith("-") for before in breaks), f"{LONG_SOURCE} broken inside a word: {breaks}"
    blocks = page.locator("table.sources thead").is_hidden()
    assert blocks == (width <= 1100), f"at {width} px the sources are {'blocks' if blocks else 'rows'}"
    orders = page.locator("table.sources tr[data-source=orders]")
    words = orders.locator("td.source-count").all_inner_texts()
    assert words == (["4 open", "4 in the last hour"] if blocks else ["4", "4"]), words
    if width in (1440, 800):  # a row and a block: what axe-core checks on every page
        assert not _violations(page, f"/sources at {width} px")
