"""No page scrolls sideways: every HTML page at 1440 and 390 px wide, with the longest texts a
dead letter can bring (a one-line payload of 20 KB, a 300-character subject, header and error,
tokens without a space), fits its window. A wide table or payload may scroll inside its own box.

To cover a new page, add its path to PAGES (ids in braces are filled from the entries made here),
or, for a page reached by a form, a step in the form pages' test. Each page at each width is a
test of its own over one site a module (xdist spreads them).
"""

from __future__ import annotations

import gzip
import json
import re

import pytest
from playwright.sync_api import expect

from sqlalchemy import select, update

from dlq_dashboard.actions.republish import republish_entry
from dlq_dashboard.alerts.outbox import AlertRule
from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.db.models import Alert, Entry, FailureGroup
from dlq_dashboard.entries.saved_views import save_view, share_view
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import browser_support, support

WIDTHS = (1440, 390)

#: Every page reached by a link, as a viewer or an operator opens it.
PAGES = [
    "/",
    "/?status=",
    "/?q=zzzzzzzz",  # nothing found: the empty list
    "/summary?status=open",  # the counts as a page of their own (followed without script)
    "/groups",
    "/groups?status=",
    "/groups/{group}",
    "/groups/{resolved_group}",
    "/entries/{huge}",
    "/entries/{huge}/edit",
    "/entries/{huge}/republish",
    "/entries/{edited}",
    "/entries/{edited}/edit",
    "/entries/{binary}",
    "/entries/{binary}/edit",
    "/entries/{gzipped}",  # shown decompressed, with the verdict on it decompressed
    "/entries/{gzipped}/edit",
    "/audit",
    "/views",
    "/jobs",
    "/jobs/{job}",
    "/jobs/{patch_job}",
    "/jobs/{failed_job}",
    "/audit?job={job}",
    "/entries/{huge}/repair",
    "/entries/{huge}/row/close",
    "/alerts",
    "/sources",
]

TOKEN = "x" * 300  # no space to break at
LONG_SUBJECT = "orders." + ".".join(["segment" + "y" * 40] * 6) + "." + "z" * 40  # 300+ characters
ONE_LINE = json.dumps({"order_id": "o-1", "customer_id": "c-1", "blob": "b" * 12_000,
                       "items": [{"sku": f"sku-{i}", "price": "12.50", "note": "n" * 200} for i in range(30)]})

SETTLED = browser_support.SETTLED


def _measure(page, where: str, overflows: list) -> None:
    # What a <details> holds counts too, as if opened: opened once the page has loaded and htmx
    # has settled (a part loaded later may hold one), then measured.
    page.wait_for_load_state("load")
    page.wait_for_function(SETTLED)
    page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    wide = browser_support.too_wide(page)
    if wide:
        overflows.append(f"{where}: {wide}")
    cut = browser_support.cut_hints(page)
    if cut:
        overflows.append(f"{where}: hints cut by their fields: {cut}")
    value_like = browser_support.value_like_hints(page)
    if value_like:
        overflows.append(f"{where}: hints that read as values: {value_like}")
    small = browser_support.small_fields(page)
    if small:
        overflows.append(f"{where}: fields less than 24 px tall: {small}")
    unreachable = browser_support.unreachable_scrollers(page)
    if unreachable:
        overflows.append(f"{where}: boxes that scroll but Tab does not reach: {unreachable}")


def _entries(app, nats_server) -> dict[str, int]:
    """The entries the pages show: the longest texts, an edited republish, bytes, a job."""
    rt = runtime_of(app)
    assert rt.jobs.recovered.wait(10)
    support.make_orders_stream(nats_server.url)
    ids = {"huge": support.dead_letter(app, 1, subject=LONG_SUBJECT, payload=ONE_LINE.encode(),
                                       Dlq_Reason="fatal", Dlq_Error="failed: " + TOKEN,
                                       Dlq_Consumer="consumer-" + TOKEN, Dlq_Original_Msg_Id="msg-" + TOKEN,
                                       X_Trace=TOKEN, Dlq_Schema_Errors=json.dumps(
                                           [{"path": "/" + TOKEN, "message": "bad " + TOKEN}]))}
    ids["edited"] = support.dead_letter(app, 2, payload=ONE_LINE.encode(), Dlq_Reason="schema_invalid",
                                        Dlq_Error="payload failed schema validation")
    ids["binary"] = support.dead_letter(app, 3, payload=bytes(range(256)) * 20, Dlq_Reason="fatal")
    ids["gzipped"] = support.dead_letter(app, 11, payload=gzip.compress(ONE_LINE.encode()), Dlq_Reason="schema_invalid",
                                         Dlq_Schema_Errors=json.dumps([{"path": "", "message": "payload is not valid JSON"}]))
    ids["conflict"] = support.dead_letter(app, 4, payload=b'{"order_id": "o-4", "customer_id": "c-4"}')
    for seq in range(5, 9):
        support.dead_letter(app, seq, subject="payments.captured", payload=ONE_LINE.encode(), Dlq_Reason="fatal",
                            Dlq_Error=f"gateway timeout {seq}")
    edited = json.loads(ONE_LINE)
    edited["items"][0]["price"] = 12.5
    republish_entry(rt, ids["edited"], 1, actor="operator-" + TOKEN, payload=json.dumps(edited, indent=2).encode())
    from dlq_dashboard.actions.bulk.jobs import create_job, job_status
    ids["job"] = create_job(rt, "close", actor="operator-" + TOKEN, filter_args={"subject": "payments.captured"},
                            note="closing " + TOKEN)
    ids["patch_job"] = create_job(rt, "patch", actor="operator-" + TOKEN, ids=[ids["huge"]], only_valid=False,
                                  patch=[{"op": "add", "path": "/" + TOKEN, "value": TOKEN}], force=True)
    # A job whose item failed: its page sums the failures by reason (no stream stores the subject,
    # a token of 300 characters).
    unstored = support.dead_letter(app, 10, subject="refunds." + TOKEN, payload=b"{}", Dlq_Reason="fatal")
    ids["failed_job"] = create_job(rt, "republish", actor="operator-" + TOKEN, ids=[unstored], force=True)
    support.jobs_settled(rt.engine)
    assert job_status(rt, ids["failed_job"], limit=0)["failed"] == 1, "the job's item did not fail"
    # A saved view of the operator's (its Delete; the longest name, a token) and a shared one (its Share).
    save_view(rt.engine, "operator-browser", "open " + TOKEN[:95], "list", "status=open&q=" + TOKEN, utcnow())
    share_view(rt.engine, save_view(rt.engine, "admin", "groups", "groups", "status=", utcnow()).id, True)
    # An alert that failed, with a long target and error (a new group raises it).
    ingest_dlq_batch(rt.engine, "DLQ", "e1", [StreamMessage(
        90, "dlq.alerts.raised", {**support.dlq_headers("alerts.raised"), "Dlq-Error": "alert " + TOKEN}, b"{}",
        utcnow())], alerts=AlertRule(urls=(f"https://user:secret@hooks.example.com/{TOKEN}?token={TOKEN}",)))
    with write_transaction(rt.engine) as conn:
        conn.execute(update(Alert).values(attempts=1, last_error="connection refused: " + TOKEN))
    with rt.engine.connect() as conn:
        ids["group"] = conn.execute(select(Entry.group_id).where(Entry.id == ids["huge"])).scalar_one()
        refunds, payments = (conn.execute(select(Entry.group_id).where(Entry.id == entry_id)).scalar_one()
                             for entry_id in (unstored, 5))
    # Triage with the longest texts it holds: an assignee and a release of 255 characters, notes.
    from dlq_dashboard.actions.triage import add_note, change_state, parse_state_change
    for group_id, change in ((ids["group"], {"state": "investigating", "assignee": "operator-" + TOKEN[:246]}),
                             (refunds, {"state": "resolved", "resolved_in": "v" + TOKEN[:254]}),
                             (payments, {"state": "ignored", "until_count": "1000000000000"})):
        change_state(rt.engine, group_id, 1, parse_state_change({**change, "note": "why " + TOKEN}, utcnow()),
                     actor="operator-" + TOKEN)
        add_note(rt.engine, group_id, "note " + TOKEN, actor="operator-" + TOKEN)
    ids["resolved_group"] = refunds
    with write_transaction(rt.engine) as conn:  # the longest team name DLQ_TEAMS takes, one word
        conn.execute(update(FailureGroup).where(FailureGroup.id == ids["group"]).values(team="t" * 64))
    return ids


#: Every page at both widths, one test each (the xdist workers share them); the login page signed out.
CHECKS = [(width, path) for width in WIDTHS for path in ["/login", *PAGES]]


# The entries of _entries on one running site for this module's checks, which only read.
site = browser_support.module_site("layout", _entries)
operator_pages = browser_support.operator_pages


def _version(app, entry_id: int) -> int:
    with runtime_of(app).engine.connect() as conn:
        return conn.execute(select(Entry.version).where(Entry.id == entry_id)).scalar_one()


@pytest.mark.parametrize("width, path", CHECKS, ids=[f"{w}px-{p}" for w, p in CHECKS])
def test_no_page_scrolls_sideways_cuts_a_fields_hint_shows_one_as_a_value_or_shrinks_a_field_at_1440_and_390_px(site, operator_pages, browser, width, path):
    """One page at one width a test; with the forms' pages below, every page at both widths, as
    one test walked them before."""
    overflows: list[str] = []
    if path == "/login":
        context = browser.new_context(viewport={"width": width, "height": 900})
        try:
            page = context.new_page()
            page.goto(f"{site.base}/login")
            _measure(page, "/login", overflows)
        finally:
            context.close()
    else:
        page = operator_pages(width, 900)
        url = path.format(**site.ids)
        response = page.goto(site.base + url)
        assert response.ok, f"{url}: {response.status}"
        _measure(page, url, overflows)
    assert not overflows, "pages wider than the window, a field's hint cut, a field too small:\n" + "\n".join(overflows)


@pytest.mark.parametrize("width", WIDTHS, ids=[f"{w}px" for w in WIDTHS])
def test_no_page_reached_by_a_form_scrolls_sideways_cuts_a_fields_hint_shows_one_as_a_value_or_shrinks_a_field_at_1440_and_390_px(site, operator_pages, width):
    """The pages reached by a form (the bulk preview, a JSON Patch's preview, the conflict page)
    at one width, after the module's checks of PAGES (the single test's order). Each width sees
    both conflict pages the single test saw, one a width: a confirmation opened before someone
    else's republish (the site's first), and one opened after it."""
    app, live_server, ids = site.app, site.base, site.ids
    overflows: list[str] = []
    page = operator_pages(width, 900)

    # The bulk preview, reached by the list's form for everything matching.
    page.goto(f"{live_server}/?status=open")
    page.get_by_role("button", name="Preview for all matching").click()
    page.wait_for_url(re.compile(r"/bulk/preview\?"))
    _measure(page, "the bulk preview", overflows)
    # Where they go: a short subject or stream name is read whole (it once broke as "ORDER S" at 390 px).
    names = page.evaluate("""() => [...document.querySelectorAll('table.consumers td.name')].map(cell => {
      const range = document.createRange();
      range.selectNodeContents(cell);
      return [cell.textContent.trim(), new Set([...range.getClientRects()].map(r => Math.round(r.top))).size];
    })""")
    assert names and all(lines == 1 for text, lines in names if len(text) <= 24), names

    # A JSON Patch's preview, from the list's form for everything matching.
    page.goto(f"{live_server}/?status=open")
    by_filter = page.locator("form:has(input[name=by][value=filter])")
    by_filter.locator("select[name=action]").select_option("patch")
    by_filter.get_by_role("button", name="Preview for all matching").click()
    page.get_by_label("JSON Patch (RFC 6902)").fill(json.dumps([{"op": "add", "path": "/note", "value": TOKEN}]))
    page.get_by_role("button", name="Preview the patch").click()
    page.locator(".patch-preview").wait_for()
    _measure(page, "the patch preview", overflows)

    # The conflict page: a confirmation opened before someone else republished the entry; then
    # one opened after it, at the version seen before (its page lists what came since).
    page.goto(f"{live_server}/entries/{ids['conflict']}/republish?version=1")
    if _version(app, ids["conflict"]) == 1:
        republish_entry(runtime_of(app), ids["conflict"], 1, actor="someone-" + TOKEN)
    page.get_by_role("button", name="Republish", exact=True).click()
    expect(page.get_by_text("already republished")).to_be_visible()
    _measure(page, "the conflict page", overflows)
    page.goto(f"{live_server}/entries/{ids['conflict']}/republish?version=1")
    page.get_by_role("button", name="Republish", exact=True).click()
    expect(page.get_by_text("already republished")).to_be_visible()
    _measure(page, "the conflict page, opened after the republish", overflows)
    assert not overflows, "pages wider than the window, a field's hint cut, a field too small:\n" + "\n".join(overflows)


#: Desk widths inside each band of the list's fixed widths (app.css: columns left out below 1,500
#: and below 1,250 px), where a header once kept a column its rows had left out.
DESK_WIDTHS = (1100, 1366)
TABLE_PAGES = ["/", "/groups", "/groups/{group}", "/jobs", "/jobs/{job}", "/audit", "/alerts", "/sources", "/views"]
# Each table shown with its header: the columns its header shows against each row's (a cell
# across several columns counts for each; a row of one cell across the table is left aside).
COLUMNS = """() => [...document.querySelectorAll('table')].filter(t => t.tHead && t.tHead.getClientRects().length).map(t => {
  const shown = row => [...row.cells].filter(c => c.getClientRects().length).reduce((n, c) => n + c.colSpan, 0);
  const head = shown(t.tHead.rows[t.tHead.rows.length - 1]);
  const rows = [...t.tBodies].flatMap(b => [...b.rows]).filter(r => r.getClientRects().length && r.cells.length > 1);
  return {table: t.className || t.id || 'a table', head, off: rows.map(shown).filter(n => n !== head)};
}).filter(t => t.off.length)"""


@pytest.mark.parametrize("path", TABLE_PAGES)
def test_every_tables_header_shows_the_columns_its_rows_show_and_its_cells_stay_cells_at_desk_widths(
        site, operator_pages, path):
    """What a narrower window leaves out of a table's rows, it leaves out of its header too: a
    value never stands under another column's name; and a row shown as a row keeps its cells in
    its lines (no cell made a flex box)."""
    url = path.format(**site.ids)
    for width in DESK_WIDTHS:
        page = operator_pages(width, 900)
        response = page.goto(site.base + url)
        assert response.ok, f"{url}: {response.status}"
        page.wait_for_function(SETTLED)
        off = page.evaluate(COLUMNS)
        assert not off, f"{url} at {width} px: rows whose columns are not the header's: {off}"
        loose = browser_support.loose_cells(page)
        assert not loose, f"{url} at {width} px: cells laid out outside their rows: {loose}"


#: The pages whose tables are blocks on a phone: their rows, and a cell of each row that stands on
#: one line (squeezed into a table's columns, an audit record's time broke every few letters).
PHONE_BLOCKS = [("/jobs", "table.jobs tbody tr", "td.started"), ("/jobs/{job}", "table.job-items tbody tr", "td.item-state"),
                ("/audit", "table.audit tbody tr:not(.audit-job-items)", "td.when"),
                ("/audit?job={job}", "table.audit tbody tr", "td.when"), ("/views", "table.views tbody tr", "td.fact"),
                ("/alerts", "table.alerts tbody tr", "td.alert-event"),
                ("/groups/{group}", "table.activity tbody tr", "td.when")]


@pytest.mark.parametrize("path, rows, one_line", PHONE_BLOCKS)
def test_on_a_phone_every_cell_of_a_job_its_items_the_audit_the_views_and_the_alerts_is_in_the_window(
        site, operator_pages, path, rows, one_line):
    """Not in a table's scrolling box, nor squeezed into its columns: a job's progress and result,
    an item's result, who did what and when (in the audit and a group's activity), a view's
    filters, an alert's error and target are what their reader comes for."""
    page = operator_pages(390, 844)
    url = path.format(**site.ids)
    page.goto(site.base + url)
    page.wait_for_function(SETTLED)
    cells = page.evaluate("""(rows) => [...document.querySelectorAll(rows)].flatMap(row => [...row.cells])
      .filter(cell => cell.getClientRects().length)
      .map(cell => { const box = cell.getBoundingClientRect();
                     return {cls: cell.className, left: box.left, right: box.right}; })""", rows)
    assert cells, f"{url}: no rows"
    outside = [cell for cell in cells if cell["left"] < 0 or cell["right"] > 390 + 1]
    assert not outside, f"{url}: cells out of the window at 390 px: {outside[:4]}"
    assert page.locator(rows.split(" tbody")[0] + " thead").first.is_hidden()  # each value carries its own label
    lines = page.evaluate("""(cells) => [...document.querySelectorAll(cells)].map(cell => {
      const range = document.createRange(); range.selectNodeContents(cell);
      return [cell.textContent.trim(), new Set([...range.getClientRects()].map(r => Math.round(r.top))).size]; })""",
                          rows + " " + one_line)
    assert lines and all(n == 1 for _, n in lines), f"{url}: {one_line} broken across lines: {lines[:4]}"
