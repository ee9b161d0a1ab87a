"""The list's rows: consumer, original msgId, a payload snippet and key fields (DLQ_LIST_FIELDS)
as columns, key fields as filters on both databases, masked for viewers; the time presets."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from datetime import timedelta
from html import unescape

import pytest
from sqlalchemy import update

from dlq_dashboard.db.models import Entry
from dlq_dashboard.entries.fields import check_database
from dlq_dashboard.config import ConfigError, load_settings
from dlq_dashboard.masking import MASKED
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.web.presenters.rows import snippet
from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.times import utcnow

from . import support

pytestmark = pytest.mark.both_databases

#: The masked card numbers: whole test card numbers, which no time, id or token in a page holds by
#: chance (a four-digit "4111" was once found in a timestamp's microseconds).
CARD, OTHER_CARD = "4111111111111111", "5500005555555559"
FIELDS = (("Customer", "/customer/id"), ("sku", "/items/0/sku"), ("card", "/card"), ("paid", "/paid"))
LONG = json.dumps({"customer": {"id": "C-42", "name": "Zoë"}, "items": [{"sku": "A-1"}], "card": CARD,
                   "paid": True, "note": "x" * 600}, indent=2, ensure_ascii=False).encode()


@pytest.fixture
def rows_app(make_app, database_url):
    """An app (nothing started) with key fields and DLQ_MASK on /card; entries of every kind."""
    app = make_app(list_fields=FIELDS, mask=("/card",))
    ids = {
        "long": support.dead_letter(app, 1, payload=LONG, Dlq_Consumer="billing", Dlq_Original_Msg_Id="order-42",
                                    Dlq_Reason="fatal", Dlq_Error="bad"),
        "binary": support.dead_letter(app, 2, payload=b"\xff\xfe\x00\x01" * 50, Dlq_Reason="fatal"),
        "text": support.dead_letter(app, 3, payload=b"plain text,\n  not JSON", Dlq_Reason="fatal"),
        "other": support.dead_letter(app, 4, payload=json.dumps({"customer": {"id": "C-7"}, "items": [],
                                                                 "paid": False, "card": OTHER_CARD}).encode(),
                                     Dlq_Reason="fatal"),
        "nul": support.dead_letter(app, 5, payload=b'{"customer": \x00{"id": "C-42"}}', Dlq_Reason="fatal"),
        "accent": support.dead_letter(app, 6, payload=json.dumps({"customer": {"id": "Zoë"}}, ensure_ascii=False)
                                      .encode(), Dlq_Reason="fatal"),
    }
    return app, ids


def row_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'data-id="(\d+)"', html)]


def cells(html: str, entry_id: int) -> dict[str, str]:
    """The row's cells by their data-label, as text."""
    row = re.search(rf'<tr[^>]*data-id="{entry_id}".*?</tr>', html, re.S).group(0)
    return {label: unescape(re.sub(r"<[^>]+>", "", text)).strip()
            for label, text in re.findall(r'<td data-label="([^"]+)"[^>]*>(.*?)</td>', row, re.S)}


def test_rows_show_consumer_msg_id_snippet_and_key_fields(rows_app):
    app, ids = rows_app
    operator = support.logged_in(app, "operator")
    html = operator.get("/").get_data(as_text=True)
    for label in ("Consumer", "Original msgId", "Customer", "sku", "card", "paid", "Payload"):
        assert f">{label}</th>" in html
    row = cells(html, ids["long"])
    assert row["Consumer"] == "billing" and row["Original msgId"] == "order-42"
    assert row["Customer"] == "C-42" and row["sku"] == "A-1" and row["card"] == CARD and row["paid"] == "true"
    # One line, whitespace runs as one space, cut at 80 characters.
    assert row["Payload"].startswith('{ "customer": { "id": "C-42", "name": "Zoë" }')
    assert len(row["Payload"]) == 80 and row["Payload"].endswith("…") and "\n" not in row["Payload"]
    assert cells(html, ids["binary"])["Payload"] == "binary, 200 bytes"
    assert cells(html, ids["text"])["Payload"] == "plain text, not JSON"
    assert cells(html, ids["text"])["Customer"] == "—" and cells(html, ids["other"])["paid"] == "false"
    assert cells(html, ids["other"])["sku"] == "—" and cells(html, ids["accent"])["Customer"] == "Zoë"
    # The times are <time> elements with the exact time on hover.
    assert re.search(r'<td data-label="Failed" class="failed"><time datetime="[^"]+Z" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC" data-ago>',
                     html)
    # The JSON API carries the key fields too.
    api = operator.get("/api/entries").get_json()["entries"]
    assert {e["id"]: e["fields"]["Customer"] for e in api}[ids["long"]] == "C-42"


def test_the_row_of_older_entries_spans_every_column_the_list_shows_to_each_role(rows_app):
    app, _ = rows_app
    # An operator has a checkbox and the row's actions (Republish, Close) besides.
    for role, own in (("viewer", 0), ("operator", 2)):
        html = support.logged_in(app, role).get("/?limit=2").get_data(as_text=True)
        head = re.search(r"<thead>.*?</thead>", html, re.S).group(0)
        columns = len(re.findall(r"<th\b", head))
        assert columns == own + 7 + len(FIELDS) + 3, role
        rows = re.findall(r"<tr hx-disable data-id=.*?</tr>", html, re.S)
        assert len(rows) == 2 and all(len(re.findall(r"<td\b", row)) == columns for row in rows), role
        assert re.search(r'<tr class="more">\s*<td colspan="(\d+)"', html).group(1) == str(columns), role


def test_a_viewer_sees_masked_key_fields_and_a_masked_snippet(rows_app):
    app, ids = rows_app
    viewer = support.logged_in(app, "viewer")
    html = viewer.get("/").get_data(as_text=True)
    assert CARD not in html and OTHER_CARD not in html
    assert cells(html, ids["other"])["card"] == MASKED and cells(html, ids["other"])["Customer"] == "C-7"
    assert MASKED in cells(html, ids["other"])["Payload"]
    # A payload that is not JSON is hidden whole while a pointer is masked.
    assert cells(html, ids["text"])["Payload"] == "hidden"
    # Filtering by the masked field would tell its value: refused, for a viewer only.
    refused = viewer.get(f"/?field.card={CARD}")
    assert refused.status_code == 400 and "DLQ_MASK hides this field" in refused.get_data(as_text=True)
    assert viewer.get(f"/api/entries?field.card={CARD}").status_code == 400
    assert row_ids(support.logged_in(app, "operator").get(f"/?field.card={CARD}").get_data(as_text=True)) == [ids["long"]]


def test_key_fields_filter_the_list_the_api_and_the_exports(rows_app):
    app, ids = rows_app
    operator = support.logged_in(app, "operator")
    # Exact values; payloads that are not JSON (binary, text, a NUL byte) match nothing, and no query fails.
    assert row_ids(operator.get("/?field.Customer=C-42").get_data(as_text=True)) == [ids["long"]]
    assert row_ids(operator.get("/?field.Customer=Zo%C3%AB").get_data(as_text=True)) == [ids["accent"]]
    assert row_ids(operator.get("/?field.sku=A-1&field.Customer=C-42").get_data(as_text=True)) == [ids["long"]]
    assert row_ids(operator.get("/?field.paid=false").get_data(as_text=True)) == [ids["other"]]
    assert row_ids(operator.get("/?field.Customer=C-4").get_data(as_text=True)) == []
    assert row_ids(operator.get("/?field.Customer=").get_data(as_text=True)) == sorted(ids.values(), reverse=True)
    api = operator.get("/api/entries?field.Customer=C-7").get_json()
    assert [e["id"] for e in api["entries"]] == [ids["other"]]
    export = operator.get("/api/export.ndjson?field.Customer=C-7").get_data(as_text=True).splitlines()
    assert [json.loads(line)["id"] for line in export] == [ids["other"]]
    assert json.loads(export[0])["fields"] == {"Customer": "C-7", "sku": None, "card": OTHER_CARD, "paid": "false"}
    assert operator.get("/api/export.json?field.Customer=C-42").get_json()[0]["fields"]["sku"] == "A-1"
    table = list(csv.DictReader(io.StringIO(operator.get("/api/export.csv?field.Customer=C-42").get_data(as_text=True))))
    assert [(r["id"], r["field.Customer"], r["field.sku"], r["field.card"]) for r in table] == \
        [(str(ids["long"]), "C-42", "A-1", CARD)]
    # A viewer's export shows the masked field as dots, as the list does.
    viewer = support.logged_in(app, "viewer").get("/api/export.ndjson?field.Customer=C-7").get_data(as_text=True)
    assert json.loads(viewer)["fields"]["card"] == MASKED and OTHER_CARD not in viewer
    assert operator.get("/summary?field.Customer=C-42").status_code == 200
    # An unknown label is a 400 naming the labels.
    for url in ("/?field.nope=1", "/api/entries?field.nope=1", "/api/export.csv?field.nope=1"):
        answer = operator.get(url)
        assert answer.status_code == 400 and "field.nope is not a key field" in answer.get_data(as_text=True)
    assert "Customer, sku, card, paid" in operator.get("/?field.nope=1").get_data(as_text=True)
    # The field filter is part of the list's shareable URL and its inputs.
    html = operator.get("/?field.sku=A-1").get_data(as_text=True)
    assert 'name="field.sku" value="A-1"' in html


def test_time_presets_keep_the_other_filters_and_mark_the_active_one(rows_app):
    app, ids = rows_app
    operator = support.logged_in(app, "operator")
    old = support.dead_letter(app, 7, payload=b"{}", Dlq_Reason="fatal")
    with runtime_of(app).engine.begin() as conn:  # received two days ago
        conn.execute(update(Entry).where(Entry.id == old).values(received_at=utcnow() - timedelta(days=2)))
    html = operator.get("/?reason=fatal&since=1h").get_data(as_text=True)
    presets = re.search(r'<nav class="presets".*?</nav>', html, re.S).group(0)
    links = re.findall(r'<a href="([^"]+)"( aria-current="true")?>([^<]+)</a>', presets)
    assert [(unescape(href), bool(current), label) for href, current, label in links] == [
        ("/?reason=fatal&since=15m", False, "15 minutes"), ("/?reason=fatal&since=1h", True, "hour"),
        ("/?reason=fatal&since=1d", False, "day"), ("/?reason=fatal&since=7d", False, "week"),
        ("/?reason=fatal", False, "any time")]
    assert len(row_ids(html)) == len(ids)
    assert len(row_ids(operator.get("/?since=7d").get_data(as_text=True))) == len(ids) + 1
    assert operator.get("/?since=1h", headers={"HX-Request": "true"}).headers["HX-Push-Url"] == "/?since=1h"
    answer = operator.get("/?since=soon")
    assert answer.status_code == 400 and "15m, 1h or 7d" in answer.get_data(as_text=True)


def test_a_bulk_action_by_filter_takes_the_key_field_filter(rows_app):
    app, ids = rows_app
    operator = support.logged_in(app, "operator")
    html = operator.get("/?field.Customer=C-42").get_data(as_text=True)
    assert re.search(r'<input type="hidden" name="field.Customer" value="C-42"', html)  # in the bulk form
    preview = operator.post("/bulk/preview", data={"csrf_token": support.csrf_token(operator, "/"), "by": "filter",
                                                   "action": "close", "field.Customer": "C-42"})
    assert preview.status_code == 200 and "<strong>1</strong>" in preview.get_data(as_text=True)
    # The preview's Start, and a patch's preview, pass the key field on: the job takes that one entry.
    for page in (preview.get_data(as_text=True), operator.post("/bulk/preview", data={
            "csrf_token": support.csrf_token(operator, "/"), "by": "filter", "action": "patch",
            "field.Customer": "C-42", "patch": '[{"op": "add", "path": "/x", "value": 1}]'}).get_data(as_text=True)):
        start = page.split('action="/bulk"', 1)[1].split("</form>", 1)[0]
        assert 'name="field.Customer" value="C-42"' in start
    form = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"',
                           preview.get_data(as_text=True).split('action="/bulk"', 1)[1].split("</form>", 1)[0]))
    started = operator.post("/bulk", data=form)
    assert started.status_code in (302, 303), started.get_data(as_text=True)
    job_id = int(started.headers["Location"].rsplit("/", 1)[1])
    status = jobs.job_status(runtime_of(app), job_id, limit=0)
    assert status["total"] == 1 and status["selection"]["filter"]["field.Customer"] == "C-42"


def test_a_saved_view_keeps_a_key_field_and_a_preset(rows_app):
    app, _ = rows_app
    operator = support.logged_in(app, "operator")
    response = operator.post("/views", data={"csrf_token": support.csrf_token(operator, "/"), "name": "C-42 lately",
                                             "page": "list", "since": "1d", "field.Customer": "C-42"})
    assert response.status_code == 303 and response.location == "/?since=1d&field.Customer=C-42"
    refused = operator.post("/views", data={"csrf_token": support.csrf_token(operator, "/"), "name": "x",
                                            "page": "list", "field.nope": "1"})
    assert refused.status_code == 400


def test_key_fields_on_postgresql_before_16_stop_the_start_with_one_line(rows_app, monkeypatch):
    engine = runtime_of(rows_app[0]).engine
    check_database(engine, FIELDS)  # SQLite 3.38+ and PostgreSQL 16+ read them
    if engine.dialect.name == "postgresql":
        monkeypatch.setattr(engine.dialect, "server_version_info", (15, 6))
        with pytest.raises(ConfigError, match="needs PostgreSQL 16 or newer"):
            check_database(engine, FIELDS)
        check_database(engine, ())  # without key fields, any version


@pytest.mark.parametrize("raw", ["customer", "A=/a,A=/b", "/a~2", "bad label=/x", "/items/*/sku", '/a"b'])
def test_a_malformed_list_fields_stops_the_start_with_one_line(raw):
    with pytest.raises(ConfigError) as caught:
        load_settings({"DLQ_LIST_FIELDS": raw})
    assert "DLQ_LIST_FIELDS" in str(caught.value) and "\n" not in str(caught.value)


def test_list_fields_are_read_from_the_environment():
    assert load_settings({"DLQ_LIST_FIELDS": " Customer=/customer/id, /items/0/sku ,"}).list_fields == (
        ("Customer", "/customer/id"), ("sku", "/items/0/sku"))


def test_the_demo_shows_its_orders_key_fields_unless_list_fields_is_set(tmp_path):
    from dlq_dashboard.demo import demo_settings

    assert dict(demo_settings(support.make_settings(tmp_path)).list_fields) == {
        "Order": "/order_id", "Customer": "/customer_id"}
    own = support.make_settings(tmp_path, list_fields=(("sku", "/sku"),))
    assert demo_settings(own).list_fields == (("sku", "/sku"),)


def test_a_jobs_filter_by_a_masked_key_field_shows_dots_to_a_viewer(rows_app):
    app, ids = rows_app
    job_id = jobs.create_job(runtime_of(app), "close", actor="op", filter_args={"field.card": CARD}, start=False)
    viewer = support.logged_in(app, "viewer")
    assert viewer.get(f"/api/jobs/{job_id}").get_json()["selection"]["filter"]["field.card"] == MASKED
    for path in (f"/jobs/{job_id}", "/jobs", "/api/jobs", "/audit", "/api/audit"):
        assert CARD not in viewer.get(path).get_data(as_text=True), path
    operator = support.logged_in(app, "operator")
    assert operator.get(f"/api/jobs/{job_id}").get_json()["selection"]["filter"]["field.card"] == CARD


def test_every_link_of_a_row_is_what_url_for_makes(rows_app):
    # The rows' links are built once a page (web/responses.py IdUrls), the list's filters riding
    # along; each must be the URL url_for makes for that entry.
    from flask import url_for

    app, ids = rows_app
    operator = support.logged_in(app, "operator")
    query = {"subject": "orders.*", "q": "", "reason": "fatal", "field.Customer": "C-42"}
    html = operator.get("/", query_string=query).get_data(as_text=True)
    shown = row_ids(html)
    assert shown and set(shown) <= set(ids.values())
    with app.test_request_context("/"):
        for entry_id in shown:
            row = re.search(rf'<tr[^>]*data-id="{entry_id}".*?</tr>', html, re.S).group(0)
            entry = url_for("pages.entry", entry_id=entry_id, **{k: v for k, v in query.items() if v})
            assert f'data-row-url="{entry}"'.replace("&", "&amp;") in row
            for action in ("republish", "close"):
                assert f'action="{url_for("row_actions.confirm", entry_id=entry_id, action=action)}"' in row
                assert f'data-post="{url_for("row_actions.act", entry_id=entry_id, action=action)}"' in row


def test_a_gzip_payloads_row_says_gzip_not_binary(make_app):
    app = make_app()
    zipped = support.dead_letter(app, 1, payload=gzip.compress(b'{"order": 1}'))
    other = support.dead_letter(app, 2, payload=b"\xff\xfe\x00\x01" * 50)
    store = runtime_of(app).store
    size = len(gzip.compress(b'{"order": 1}'))
    assert snippet(store.get_entry(zipped)) == f"gzip, {size} bytes"
    assert snippet(store.get_entry(other)) == "binary, 200 bytes"
