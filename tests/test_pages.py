"""The support-staff pages as HTML: the list and its fragments, groups, the detail page."""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta
from html import unescape
from urllib.parse import unquote

import pytest
from sqlalchemy import insert, update

from dlq_dashboard.ingest.parse import Advisory
from dlq_dashboard.times import utcnow
from dlq_dashboard.ingest.writes import ingest_advisory_batch
from dlq_dashboard.db.models import Action, Entry, Republish
from dlq_dashboard.web.presenters.payloads import TEXT_LIMIT
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases

ORDER_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "x-subjects": ["orders.*"],
    "type": "object",
    "required": ["order_id"],
    "properties": {"order_id": {"type": "string"},
                   "items": {"type": "array", "items": {"type": "object",
                                                         "properties": {"price": {"type": "number"}}}}},
}


@pytest.fixture
def schemas_dir(tmp_path):
    folder = tmp_path / "schemas"
    folder.mkdir()
    (folder / "orders.json").write_text(json.dumps(ORDER_SCHEMA))
    return folder


@pytest.fixture
def web(make_app, schemas_dir, database_url):
    """The app over the test's database, with a schema folder; nothing else started."""
    return make_app(schemas_dir=str(schemas_dir))


@pytest.fixture
def client(web):
    return support.logged_in(web, "viewer")


def html_of(response) -> str:
    return response.get_data(as_text=True)


def row_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr hx-disable data-id="(\d+)"', html)]


# --- the list ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/", "/groups"])
def test_the_filter_fields_offer_every_status_and_reason_and_keep_the_one_chosen(client, path):
    html = html_of(client.get(f"{path}?status=closed&reason=fatal"))
    status_select = re.search(r'<select name="status">(.*?)</select>', html, re.S).group(1)
    assert re.findall(r'<option value="([^"]*)"', status_select) == ["", "open", "republished", "closed"]
    assert re.findall(r'<option value="([^"]*)" selected', status_select) == ["closed"]
    reasons = re.search(r'<datalist id="reasons">(.*?)</datalist>', html, re.S).group(1)
    assert re.findall(r'<option value="([^"]*)"', reasons) == ["schema_invalid", "max_deliveries", "fatal", "terminated"]
    assert 'name="reason" value="fatal"' in html


def test_the_list_is_a_full_page_with_the_login_and_htmx_wired(web, client):
    support.dead_letter(web, 1, "orders.created", b'{"order_id": "a-1"}', Dlq_Reason="fatal", Dlq_Error="kaput")
    response = client.get("/")
    html = html_of(response)
    assert response.status_code == 200 and "HX-Request" in response.headers["Vary"]
    assert "<html" in html and 'id="results"' in html
    assert "viewer-user" in html and 'action="/logout"' in html and ">Logout<" in html
    assert 'href="/groups"' in html and 'href="/audit"' in html
    assert '<meta name="csrf-token"' in html and '"selfRequestsOnly":true' in html
    assert "htmx-2.0.11.min.js" in html and "app.js" in html
    assert "orders.created" in html and "kaput" in html and "fatal" in html


def test_the_same_route_answers_htmx_with_the_results_fragment_only(web, client):
    support.dead_letter(web, 1, "orders.created", b"{}", Dlq_Error="kaput")
    response = client.get("/?subject=orders.*&status=", headers={"HX-Request": "true"})
    html = html_of(response)
    assert response.status_code == 200 and "HX-Request" in response.headers["Vary"]
    assert html.lstrip().startswith('<section id="results"') and "<html" not in html
    assert "kaput" in html
    # The address bar gets the tidy URL, without the form's empty fields.
    assert response.headers["HX-Push-Url"] == "/?subject=orders.%2A"


def test_a_history_restore_gets_the_full_page(web, client):
    html = html_of(client.get("/", headers={"HX-Request": "true", "HX-History-Restore-Request": "true"}))
    assert "<html" in html


def test_filters_in_the_url_narrow_the_list_and_stay_in_the_form(web, client):
    keep = support.dead_letter(web, 1, "orders.created", b'{"customer": "zebulon"}', Dlq_Reason="fatal")
    support.dead_letter(web, 2, "payments.captured", b'{"customer": "zebulon"}', Dlq_Reason="fatal")
    html = html_of(client.get("/?subject=orders.>&q=zebulon&reason=fatal"))
    assert row_ids(html) == [keep]
    assert 'value="orders.&gt;"' in html and 'value="zebulon"' in html
    assert 'href="/api/export.csv?subject=orders.%3E&amp;reason=fatal&amp;q=zebulon"' in html
    assert "/api/export.json?" in html and "/api/export.ndjson?" in html


@pytest.mark.parametrize("query, words", [
    ("subject=orders..created", "is not a NATS subject"), ("subject=orders.>.x", "is not a NATS subject"),
    ("since=last+tuesday", "RFC 3339"), ("status=gone", "status"), ("cursor=%25%25", "cursor"),
])
def test_a_filter_that_does_not_parse_is_a_message_and_a_400(web, client, query, words):
    for headers in ({}, {"HX-Request": "true"}):
        response = client.get(f"/?{query}", headers=headers)
        assert response.status_code == 400
        assert 'role="alert"' in html_of(response) and words in html_of(response)
    assert client.get(f"/summary?{query}").status_code == 400
    assert client.get(f"/groups?{query}").status_code == 400


def test_an_operators_rows_have_checkboxes_carrying_the_version_seen_and_a_viewers_none(web, client):
    entry_id = support.dead_letter(web, 1)
    operator = html_of(support.logged_in(web, "operator").get("/"))
    assert f'<input type="checkbox" name="ids" value="{entry_id}:1" form="bulk-form"' in operator
    assert 'data-select-all="ids"' in operator and 'id="bulk-form"' in operator
    viewer = html_of(client.get("/"))
    assert f'data-id="{entry_id}"' in viewer
    # (The keys dialog's "Turn off these single keys" is everyone's; no row has a box.)
    assert 'type="checkbox" name="ids"' not in viewer and "data-select-all" not in viewer
    assert "bulk-form" not in viewer and "Bulk actions" not in viewer


def test_an_empty_list_says_how_to_publish_a_dead_letter(client):
    html = html_of(client.get("/"))
    assert "No dead letters" in html and "nats pub dlq.orders.created" in html and "Dlq-Original-Subject:" in html


def test_a_filter_that_matches_nothing_says_so_and_offers_to_clear(web, client):
    support.dead_letter(web, 1)
    html = html_of(client.get("/?q=nothingatall"))
    assert "No entries match these filters" in html and "Clear the filters" in html


def test_older_entries_are_reached_by_cursor_without_repeats(web, client):
    ids = [support.dead_letter(web, seq) for seq in range(1, 8)]
    first = html_of(client.get("/?limit=3"))
    assert row_ids(first) == ids[::-1][:3]
    older = re.search(r'href="(/\?cursor=[^"]+&amp;limit=3)"', first).group(1).replace("&amp;", "&")
    second = html_of(client.get(older, headers={"HX-Request": "true"}))
    assert row_ids(second) == ids[::-1][3:6]
    assert 'hx-select="#entry-rows &gt; tr"' in second or "hx-select=\"#entry-rows > tr\"" in second


def test_the_new_entries_indicator_counts_arrivals_without_moving_the_list(web, client):
    top = support.dead_letter(web, 1)
    html = html_of(client.get("/"))
    poll = re.search(r'hx-get="(/entries/new\?[^"]+)"', html).group(1).replace("&amp;", "&")
    assert f"after={top}" in poll and 'hx-trigger="every 5s"' in html
    assert "new — show" not in html_of(client.get(poll))
    support.dead_letter(web, 2)
    support.dead_letter(web, 3)
    assert "2 new — show" in html_of(client.get(poll))


def test_the_summary_counts_by_status_and_draws_failures_over_time(web, client):
    for seq in range(1, 4):
        support.dead_letter(web, seq, "orders.created")
    support.dead_letter(web, 4, "payments.captured")
    html = html_of(client.get("/summary?subject=orders.*"))
    assert re.search(r"status-open\">open</span> <strong>3</strong>", html)
    assert "<svg" in html and '<rect class="bar"' in html and "since=" in html and "until=" in html
    assert "the tallest bar is 3" in html


def test_the_counted_summary_counts_again_after_a_rows_action(web, client):
    """A row closed in place read "closed" under counts that still said "open 7 · closed 0"."""
    support.dead_letter(web, 1, "orders.created")
    html = html_of(client.get("/summary?subject=orders.*"))
    assert re.search(r'<div class="summary" hx-get="/summary\?subject=orders\.\*" '
                     r'hx-trigger="entries-changed from:body" hx-swap="outerHTML">', html.replace("%2A", "*")), html[:500]


def test_the_group_filters_chip_reads_as_the_group_not_as_its_number(web, client):
    """"Group: 4" told a person nothing of which failures the list was narrowed to."""
    entry = support.dead_letter(web, 1, "orders.created", Dlq_Reason="fatal", Dlq_Error="order <7> not found")
    group = runtime_of(web).store.group_of(entry)[0]
    html = html_of(client.get(f"/?group={group}"))
    chip = re.search(r'<p class="chip" hx-disable>(.*?)<input', html, re.S).group(1)
    assert " ".join(chip.split()) == f"Group {group}: <span>order &lt;&lt;n&gt;&gt; not found</span>", chip


def test_the_list_holds_the_summarys_place_until_its_counts_arrive(web, client):
    for seq in range(1, 4):
        support.dead_letter(web, seq, "orders.created")
    for path in ("/?subject=orders.*", "/?subject=orders.*&since=7d"):
        for headers in ({}, {"HX-Request": "true"}):  # the page, and its results after a filter changes
            html = html_of(client.get(path, headers=headers))
            pending = re.search(r'<div class="summary" hx-get="([^"]+)" hx-trigger="load, entries-changed from:body" '
                                r'hx-swap="outerHTML" aria-busy="true">(.*?)<figcaption', html, re.S)
            assert pending, html
            assert unquote(pending.group(1).replace("&amp;", "&")) == "/summary?" + path.split("?")[1]
            # The counted summary's parts, their numbers pending: the same place and size.
            assert re.search(r"status-open\">open</span> <strong>–</strong>", pending.group(2))
            assert "Counting the entries stored…" in pending.group(2)
            assert 'class="chart-fold" data-remember="list-chart" data-fold-narrow open' in pending.group(2)
            assert ('class="note"' in pending.group(2)) == ("since" in path)  # counted entry by entry
            assert "<rect" not in pending.group(2)
    counted = html_of(client.get("/summary?subject=orders.*"))
    # Counted: not fetched again on its own (only after a row's action: entries-changed).
    assert 'hx-trigger="entries-changed from:body"' in counted and "load" not in counted.split(">")[0]
    assert "aria-busy" not in counted and "<strong>–</strong>" not in counted


def test_without_script_the_list_links_its_counts_on_a_page_of_their_own(web, client):
    """The counts come after the page, by script: without it they never arrived (a "–" each)."""
    for seq in range(1, 4):
        support.dead_letter(web, seq, "orders.created")
    html = html_of(client.get("/?subject=orders.*"))
    link = re.search(r'<noscript><p class="noscript-counts">.*?<a href="([^"]+)">count these entries</a>', html)
    assert link and unquote(link.group(1).replace("&amp;", "&")) == "/summary?subject=orders.*"
    page = html_of(client.get("/summary?subject=orders.*"))  # followed: a page, with the counts
    assert "<h1>Counts of these entries</h1>" in page and "<nav" in page
    assert re.search(r"status-open\">open</span> <strong>3</strong>", page)
    assert '<a href="/?subject=orders.*">Dead letters</a>' in page.replace("%2A", "*")
    # Asked by the list's script, the counts alone.
    fragment = html_of(client.get("/summary?subject=orders.*", headers={"HX-Request": "true"}))
    assert fragment.lstrip().startswith('<div class="summary"') and "<h1>" not in fragment


# --- groups -----------------------------------------------------------------------------------

def test_groups_count_failures_by_subject_reason_and_rule_and_open_the_list(web, client):
    for seq, value in enumerate(["'1.5'", "'2'", "'abc'"], start=1):
        support.dead_letter(web, seq, "orders.created", b"{}", Dlq_Reason="schema_invalid",
                    Dlq_Schema_Errors=json.dumps([{"path": "/items/0/price", "message": f"{value} is not of type 'number'"}]))
    support.dead_letter(web, 9, "orders.created", b"{}", Dlq_Reason="fatal", Dlq_Error="order 9 not found")
    response = client.get("/groups")
    html = html_of(response)
    assert response.status_code == 200 and "HX-Request" in response.headers["Vary"]
    assert "/items/*/price: … is not of type &#39;number&#39;" in html
    rows = re.findall(r"<tr hx-disable[^>]*>(.*?)</tr>", html, re.S)
    assert "<strong>3</strong>" in rows[0] and "<strong>1</strong>" in rows[1]
    link = re.search(r'href="(/\?[^"]+)"[^>]*>Show entries', rows[0]).group(1).replace("&amp;", "&")
    assert "status=open" in link
    assert len(row_ids(html_of(client.get(link)))) == 3
    fragment = html_of(client.get("/groups?status=", headers={"HX-Request": "true"}))
    assert fragment.lstrip().startswith('<section id="results"')


def test_groups_show_a_trend_a_readable_label_and_operators_get_the_group_actions(web, client):
    for seq in (1, 2, 3):
        support.dead_letter(web, seq, "orders.created", b"{}", Dlq_Reason="fatal", Dlq_Error=f"order {seq} not found")
    html = html_of(client.get("/groups"))

    row = re.findall(r"<tr hx-disable[^>]*>(.*?)</tr>", html, re.S)[0]
    assert 'aria-label="3 in the last 24 h, peak 3/h"' in row and "<title>3 in the last 24 h, peak 3/h</title>" in row
    # One bar, the peak: this hour's (or the last one's, had the hour just turned).
    assert re.search(r'<path class="spark-bars" d="M(93|89).5 20v-19"></path>', row)
    assert ">order &lt;id&gt; not found</span>" in row and "group-key" not in row  # the label is the whole key
    assert '<bdi class="subject-name">orders.created</bdi>' in row
    assert "<form" not in row and ">Republish<" not in row  # a viewer reads only
    operator = html_of(support.logged_in(web, "operator").get("/groups"))
    row = re.findall(r"<tr hx-disable[^>]*>(.*?)</tr>", operator, re.S)[0]
    forms = re.findall(r'<form method="get" action="/bulk/preview".*?</form>', row, re.S)
    assert [re.search(r'name="action" value="(\w+)"', f).group(1) for f in forms] == ["republish", "close", "patch"]
    group_id = re.search(r'name="group" value="(\d+)"', forms[0]).group(1)
    for form in forms:
        assert 'name="by" value="filter"' in form and 'name="status" value="open"' in form
        # A preview writes nothing: asked by GET, without a CSRF token (Start, on it, posts one).
        assert f'name="group" value="{group_id}"' in form and 'name="csrf_token"' not in form


def test_a_long_subject_may_break_only_after_a_dot(web, client):
    subject = "warehouse.europe-west.frankfurt.inventory.reservations.created.v2"
    support.dead_letter(web, 1, subject, b"{}", Dlq_Error="boom")
    html = html_of(client.get("/groups"))
    assert ('<bdi class="subject-name subject-long"><span>warehouse.</span><wbr><span>europe-west.</span><wbr>'
            in html) and "<span>v2</span></bdi>" in html


def test_groups_say_what_to_do_when_nothing_is_open(client):
    assert "No failures to group among open entries" in html_of(client.get("/groups"))


# --- the detail page --------------------------------------------------------------------------

def test_the_detail_shows_the_payload_with_the_failing_field_marked_beside_the_errors(web, client):
    payload = json.dumps({"order_id": "o-1", "items": [{"sku": "x", "price": "12.50"}]}).encode()
    entry_id = support.dead_letter(web, 1, "orders.created", payload, Dlq_Reason="schema_invalid",
                           Dlq_Schema_Errors=json.dumps([{"path": "/items/0/price", "message": "'12.50' is not of type 'number'"}]))
    html = html_of(client.get(f"/entries/{entry_id}"))
    assert '<mark id="mark-0">&#34;price&#34;: &#34;12.50&#34;</mark>' in html
    assert html.count('href="#mark-0"') == 2  # from the header's errors and from the current schema
    assert "Invalid against <code>orders.json</code>" in html
    payload_at, errors_at = html.index('class="payload"'), html.index('class="why"')
    assert payload_at < errors_at


def test_an_error_for_a_missing_field_says_it_is_not_in_the_payload(web, client):
    entry_id = support.dead_letter(web, 1, "orders.created", b'{"items": []}', Dlq_Reason="schema_invalid")
    html = html_of(client.get(f"/entries/{entry_id}"))
    assert "&#39;order_id&#39; is a required property" in html and "(whole payload)" in html


def test_a_payload_the_current_schema_accepts_says_it_would_pass(web, client):
    entry_id = support.dead_letter(web, 1, "orders.created", b'{"order_id": "fine"}')
    assert "it would pass" in html_of(client.get(f"/entries/{entry_id}"))
    other = support.dead_letter(web, 2, "users.signup", b"{}")
    assert "No schema in DLQ_SCHEMAS covers <bdi>users.signup</bdi>" in html_of(client.get(f"/entries/{other}"))


def test_a_payload_that_is_not_utf8_is_a_hex_dump_with_a_download(web, client):
    data = b"\xff\xfe\x00\x01binary payload\x80"
    entry_id = support.dead_letter(web, 1, "orders.created", data)
    html = html_of(client.get(f"/entries/{entry_id}"))
    assert "00000000" in html and "ff fe 00 01" in html and "not UTF-8" in html
    download = client.get(f"/entries/{entry_id}/payload")
    assert download.data == data and download.headers["Content-Type"] == "application/octet-stream"
    assert "attachment" in download.headers["Content-Disposition"]
    assert download.headers["X-Content-Type-Options"] == "nosniff"


def test_a_large_payload_is_truncated_with_a_download_link(web, client):
    big = json.dumps({"order_id": "o", "blob": "x" * (TEXT_LIMIT + 10)}).encode()
    entry_id = support.dead_letter(web, 1, "orders.created", big)
    html = html_of(client.get(f"/entries/{entry_id}"))
    assert "Only the start is shown" in html and f"/entries/{entry_id}/payload" in html
    assert len(html) < TEXT_LIMIT + 50_000


def test_a_payload_nested_too_deeply_is_shown_not_crashed_on(web, client):
    entry_id = support.dead_letter(web, 1, "orders.created", b"[" * 5000 + b"]" * 5000)
    response = client.get(f"/entries/{entry_id}")
    assert response.status_code == 200 and "nests too deeply" in html_of(response)


def test_a_payload_holding_a_key_twice_says_so_naming_the_key_and_shows_the_last_value(web, client):
    """The page showed only the last value of a repeated key, without a word (D5)."""
    payload = b'{"order_id":"A","order_id":"B","customer_id":"C-1","customer_id":"C-2","items":[{"s":1,"s":2}]}'
    entry_id = support.dead_letter(web, 1, "orders.created", payload)
    page = unescape(html_of(client.get(f"/entries/{entry_id}")))
    assert ('The payload holds a key more than once in one object ("s", "order_id", "customer_id"): only the last '
            "value of each is shown, the one the schema check reads.") in page
    assert '"order_id": "B"' in page and '"order_id": "A"' not in page
    once = support.dead_letter(web, 2, "orders.created", b'{"order_id":"A","items":[{"order_id":"A"}]}')
    assert "more than once" not in html_of(client.get(f"/entries/{once}"))


def test_the_detail_lists_the_headers_in_a_table(web, client):
    entry_id = support.dead_letter(web, 1, "orders.created", b"{}", traceparent="00-abc-def-01")
    html = html_of(client.get(f"/entries/{entry_id}"))
    assert "<code>traceparent</code></td><td class=\"value\"><bdi>00-abc-def-01</bdi></td>" in html


def test_the_timeline_tells_naks_dead_lettering_republishes_failures_again_and_closes(web, client):
    engine = runtime_of(web).engine
    now = utcnow()
    entry_id = support.dead_letter(web, 1, "orders.created", b"{}", Dlq_Reason="max_deliveries", Dlq_Consumer="C",
                           Dlq_Original_Stream="ORDERS", Dlq_Original_Seq="11")
    naks = [(Advisory("nak", f"nak-{n}", now - timedelta(minutes=5 - n), "ORDERS", "C", 11, n, None, {}), None, None)
            for n in (1, 2)]
    ingest_advisory_batch(engine, "DLQ_ADVISORIES", "e1", naks, 2)
    with engine.begin() as conn:
        conn.execute(insert(Republish).values(
            entry_id=entry_id, version=1, msg_id="dlq-republish-1", subject="orders.created", payload=b"{}",
            headers="{}", edited=False, state="published", actor="olga", created_at=now + timedelta(seconds=10),
            published_at=now + timedelta(seconds=10),
            stream="ORDERS", seq=12, duplicate=False))
        conn.execute(insert(Action).values(entry_id=entry_id, action="close", actor="olga", at=now + timedelta(seconds=20),
                                           note="customer refunded by hand", detail="{}"))
        conn.execute(insert(Action).values(entry_id=entry_id, action="reopen", actor="piotr",
                                           at=now + timedelta(seconds=30), detail="{}"))
    again = support.dead_letter(web, 2, "orders.created", b"{}", stored_at=now + timedelta(seconds=15), Dlq_Reason="fatal",
                        Dlq_Replay_Of="DLQ:1")
    with engine.begin() as conn:  # mirrored as the DLQ stored it, after the republish went out (a failure
        # again is linked only to a republish made before it arrived: entries/replays.py)
        conn.execute(update(Entry).where(Entry.id == again).values(received_at=now + timedelta(seconds=15)))
    html = html_of(client.get(f"/entries/{entry_id}"))
    timeline = html[html.index('id="timeline-title"'):]
    order = ["Delivery 1 was nak", "Delivery 2 was nak", "Failed: max_deliveries", "Dead-lettered and mirrored",
             "Republished to orders.created", "The republished message failed again", "Closed", "Reopened"]
    positions = [timeline.index(text) for text in order]
    assert positions == sorted(positions)
    assert "dlq-republish-1" in timeline and "<dt>seq</dt><dd>12</dd>" in timeline and "<dt>duplicate</dt><dd>no</dd>" in timeline
    assert f'href="/entries/{again}"' in timeline and "customer refunded by hand" in timeline and "by piotr" in timeline
    back = html_of(client.get(f"/entries/{again}"))
    assert f'This message is a republish of\n  <a href="/entries/{entry_id}">' in back


def test_a_failure_without_a_reason_is_told_as_failed_not_as_failed_a_failure(web, client):
    entry_id = support.dead_letter(web, 1, "orders.created", b"{}", Dlq_Error="boom")
    html = html_of(client.get(f"/entries/{entry_id}"))
    timeline = html[html.index('id="timeline-title"'):]
    assert "<strong>Failed</strong>" in timeline and "a failure" not in timeline


def test_a_broken_schema_file_is_reported_by_name_on_the_page_and_in_the_log(make_app, schemas_dir, caplog):
    (schemas_dir / "broken.json").write_text("{ not json")
    with caplog.at_level(logging.ERROR):
        application = make_app(schemas_dir=str(schemas_dir))
    assert "broken.json" in caplog.text
    entry_id = support.dead_letter(application, 1, "orders.created", b'{"order_id": "x"}')
    html = html_of(support.logged_in(application, "viewer").get(f"/entries/{entry_id}"))
    assert "Schema files that could not be loaded" in html and "<code>broken.json</code>" in html
    assert "it would pass" in html  # the good file still works


def test_an_unknown_entry_is_a_readable_404(client):
    response = client.get("/entries/424242")
    assert response.status_code == 404 and "There is no entry 424242" in html_of(response)


def test_pages_need_a_login(web):
    anonymous = web.test_client()
    for path in ("/", "/groups", "/summary", "/entries/new?after=0", "/entries/1", "/entries/1/payload"):
        response = anonymous.get(path)
        assert response.status_code == 302 and "/login" in response.headers["Location"]


# --- hostile input ----------------------------------------------------------------------------

HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(2)>', "</textarea><b>x</b>", "{{7*7}}",
           '<div hx-get="/logout" hx-trigger="load">', "<a hx-on:click=\"alert(3)\">x</a>"]


def test_hostile_payloads_subjects_headers_and_errors_are_text_inside_hx_disable(web, client):
    for seq, evil in enumerate(HOSTILE, start=1):
        payload = json.dumps({"order_id": evil, evil: [evil]}).encode()
        support.dead_letter(web, seq, f"orders.{seq}", payload, Dlq_Reason=evil, Dlq_Error=evil, X_Evil=evil,
                    Dlq_Schema_Errors=json.dumps([{"path": "/order_id", "message": evil}]))
    pages = [html_of(client.get("/")), html_of(client.get("/groups?status=")), html_of(client.get("/?q=alert"))]
    pages += [html_of(client.get(f"/entries/{i}")) for i in range(1, len(HOSTILE) + 1)]
    for html in pages:
        assert "<script>alert" not in html and "<img src=x" not in html and "</textarea><b>" not in html
        assert 'hx-get="/logout"' not in html and "<a hx-on:click" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[0] and "&lt;img src=x onerror=alert(2)&gt;" in pages[0]
    detail = pages[-1]
    for container in ('class="payload"', 'class="why"', 'class="headers"', 'class="timeline"', 'class="facts"'):
        assert re.search(container + r'[^>]*hx-disable', detail), container
    assert "{{7*7}}" in html_of(client.get("/entries/4"))
