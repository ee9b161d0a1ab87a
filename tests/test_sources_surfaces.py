"""Every surface a reader meets entries and groups on names their source (SPEC section 12): the
JSON, the exports and the command line carry ``source``, every list filters by ``source=``, a
scope of one source (``billing:orders.>``) reaches that source's entries alone, an entry's
history and its "failed again" stay within its source, alerts name it, and the pages show it
only when there are several sources (one source's pages look as they always did)."""

from __future__ import annotations

import re

import csv
import dataclasses
import io
import json
from datetime import datetime, timedelta

import pytest
from markupsafe import escape
from sqlalchemy import insert, select

from dlq_dashboard.access import visible
from dlq_dashboard.access.reader import Reader
from dlq_dashboard.accounts.tokens import create_token
from dlq_dashboard.actions.bulk.jobs import create_job, job_status
from dlq_dashboard.actions.bulk.listing import list_jobs
from dlq_dashboard.alerts.outbox import AlertRule
from dlq_dashboard.db.models import Alert, Entry, Event, Republish
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.entries.saved_views import View
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import Grant, Scope
from dlq_dashboard.sources import Source
from dlq_dashboard.times import utcnow

from . import support

pytestmark = pytest.mark.both_databases

#: Two sources that both have a stream DLQ (told apart by its epoch, as two servers' streams are).
SOURCES = (Source("orders", ("nats://127.0.0.1:1",)), Source("billing", ("nats://127.0.0.1:1",)))
EPOCHS = {"orders": "epoch-orders", "billing": "epoch-billing"}


def store(engine, source: str, seq: int, subject: str = "orders.created", error: str = "no stock",
          rule: AlertRule | None = None, **headers: str) -> int:
    """One DLQ message of ``source`` stored as its mirror would store it; returns the entry id."""
    values = {"Dlq-Original-Subject": subject, "Dlq-Reason": "fatal", "Dlq-Error": error,
              **{k.replace("_", "-"): v for k, v in headers.items()}}
    ingest_dlq_batch(engine, "DLQ", EPOCHS.get(source, "epoch-default"),
                     [StreamMessage(seq, f"dlq.{subject}", values, b'{"n": %d}' % seq, utcnow())],
                     alerts=rule, source=source)
    with engine.connect() as conn:
        return conn.execute(select(Entry.id).where(Entry.source == source, Entry.dlq_seq == seq)).scalar_one()


@pytest.fixture
def desk(make_app, database_url):
    """An app of two sources (nothing started) and its entries: billing's DLQ:7 and DLQ:8, then
    orders' DLQ:7 (the newer of the two DLQ:7), each of them with their ids by name."""
    app = make_app(sources=SOURCES)
    engine = runtime_of(app).engine
    ids = {"billing7": store(engine, "billing", 7, Dlq_Original_Stream="ORDERS", Dlq_Original_Seq="3"),
           "billing8": store(engine, "billing", 8, "billing.charged", "card declined"),
           "orders7": store(engine, "orders", 7, Dlq_Original_Stream="ORDERS", Dlq_Original_Seq="3")}
    return app, ids


def api(app, role: str = "admin", scopes: tuple[Scope, ...] | None = None):
    """A GET of the API as a token of ``role`` (over ``scopes``): path -> response."""
    token = create_token(runtime_of(app).engine, f"t-{role}-{len(scopes or ())}-{id(scopes)}", role, scopes)
    client = app.test_client()
    return lambda path: client.get(path, headers=support.bearer(token))


# --- the JSON, the exports and the command line -------------------------------------------------

def test_an_entrys_json_export_and_show_carry_its_source(desk):
    app, ids = desk
    get = api(app)
    listed = get("/api/entries").get_json()["entries"]
    assert {e["id"]: e["source"] for e in listed} == {ids["billing7"]: "billing", ids["billing8"]: "billing",
                                                      ids["orders7"]: "orders"}
    assert get(f"/api/entries/{ids['orders7']}").get_json()["source"] == "orders"
    rows = list(csv.DictReader(io.StringIO(get("/api/export.csv").get_data(as_text=True))))
    assert sorted(r["source"] for r in rows) == ["billing", "billing", "orders"]
    lines = [json.loads(line) for line in get("/api/export.ndjson").get_data(as_text=True).splitlines()]
    assert sorted(e["source"] for e in lines) == ["billing", "billing", "orders"]
    shown = app.test_cli_runner().invoke(args=["entries", "show", str(ids["billing8"]), "--json"])
    assert json.loads(shown.output)["source"] == "billing"
    words = app.test_cli_runner().invoke(args=["entries", "show", str(ids["billing8"])]).output
    assert "source:           billing" in words


def test_the_source_filter_keeps_one_sources_entries_on_every_channel(desk):
    app, ids = desk
    get = api(app)
    billing = {ids["billing7"], ids["billing8"]}
    assert {e["id"] for e in get("/api/entries?source=billing").get_json()["entries"]} == billing
    assert {e["id"] for e in get("/api/entries?source=orders&subject=orders.*").get_json()["entries"]} == {
        ids["orders7"]}
    rows = list(csv.DictReader(io.StringIO(get("/api/export.csv?source=billing").get_data(as_text=True))))
    assert {int(r["id"]) for r in rows} == billing
    assert len(get("/api/export.ndjson?source=orders").get_data(as_text=True).splitlines()) == 1
    listed = app.test_cli_runner().invoke(args=["entries", "list", "--source", "billing", "--json"])
    assert {e["id"] for e in json.loads(listed.output)["entries"]} == billing
    table = app.test_cli_runner().invoke(args=["entries", "list", "--source", "orders"]).output
    assert table.splitlines()[0].split()[:3] == ["ID", "SOURCE", "STATUS"] and "orders" in table
    page = app.test_client()
    support.ensure_user(app, "admin-user", "admin")
    support.login(page, "admin-user", support.PASSWORD)
    text = page.get("/?source=billing").get_data(as_text=True)
    assert f'data-id="{ids["billing8"]}"' in text and f'data-id="{ids["orders7"]}"' not in text


def test_a_source_that_is_not_one_is_a_400_naming_the_sources(desk):
    app, _ = desk
    get = api(app)
    for path in ("/api/entries?source=shipping", "/api/groups?source=shipping", "/api/export.csv?source=shipping"):
        answer = get(path)
        assert answer.status_code == 400, path
        assert answer.get_json() == {"error": "source 'shipping' is not valid: use one of orders, billing"}
    refused = app.test_cli_runner().invoke(args=["entries", "list", "--source", "shipping"])
    assert refused.exit_code == 2 and "use one of orders, billing" in refused.output
    token = create_token(runtime_of(app).engine, "bulk-operator", "operator")
    job = app.test_client().post("/api/bulk", json={"action": "close", "filter": {"source": "shipping"}},
                                 headers=support.bearer(token))
    assert job.status_code == 400
    assert job.get_json()["error"] == "source 'shipping' is not valid: use one of orders, billing"


def test_groups_belong_to_one_source_and_filter_by_it(desk):
    app, ids = desk
    get = api(app)
    groups = get("/api/groups").get_json()["groups"]
    assert sorted((g["source"], g["subject"]) for g in groups) == [
        ("billing", "billing.charged"), ("billing", "orders.created"), ("orders", "orders.created")]
    billing = get("/api/groups?source=billing").get_json()["groups"]
    assert sorted(g["subject"] for g in billing) == ["billing.charged", "orders.created"]
    assert {g["source"] for g in billing} == {"billing"}
    one = next(g for g in groups if g["source"] == "orders")
    assert get(f"/api/groups/{one['id']}").get_json()["source"] == "orders"
    # A group's filter lists its entries: the group's id says its source.
    entries = get("/api/entries?" + "&".join(f"{k}={v}" for k, v in one["filter"].items())).get_json()["entries"]
    assert [e["id"] for e in entries] == [ids["orders7"]]
    listed = app.test_cli_runner().invoke(args=["groups", "list", "--source", "orders", "--json"])
    assert [g["id"] for g in json.loads(listed.output)["groups"]] == [one["id"]]
    table = app.test_cli_runner().invoke(args=["groups", "list", "--source", "billing"]).output
    assert "SOURCE" in table.splitlines()[0] and "orders.created" in table and "billing.charged" in table
    # The counts under the filter come from the kept counts of that source's groups.
    tallies = visible.tallies(Reader.of("admin", None), runtime_of(app).store)
    counts, tally = tallies.counts_by_status(EntryFilter(source="billing"))
    assert counts["open"] == 2 and tally.kept


# --- scopes of one source ------------------------------------------------------------------------

def test_a_scope_of_one_source_reaches_that_sources_entries_and_groups_alone(desk):
    app, ids = desk
    get = api(app, "viewer", (Scope("orders.>", "billing"),))
    assert [e["id"] for e in get("/api/entries").get_json()["entries"]] == [ids["billing7"]]
    assert get(f"/api/entries/{ids['billing7']}").status_code == 200
    # The same subject in the other source is outside, as unknown as an id that does not exist.
    assert get(f"/api/entries/{ids['orders7']}").status_code == 404
    assert get(f"/api/entries/{ids['billing8']}").status_code == 404
    groups = get("/api/groups").get_json()["groups"]
    assert [(g["source"], g["subject"]) for g in groups] == [("billing", "orders.created")]
    admin_groups = api(app)("/api/groups").get_json()["groups"]
    other = next(g["id"] for g in admin_groups if g["source"] == "orders")
    assert get(f"/api/groups/{other}").status_code == 404
    rows = list(csv.DictReader(io.StringIO(get("/api/export.csv").get_data(as_text=True))))
    assert [int(r["id"]) for r in rows] == [ids["billing7"]]
    # A scope without a source covers the subject in every source.
    every = api(app, "viewer", (Scope("orders.>"),))
    assert {e["id"] for e in every("/api/entries").get_json()["entries"]} == {ids["billing7"], ids["orders7"]}


def test_a_job_is_shown_to_a_scope_of_one_source_only_when_it_took_that_sources_entries(desk):
    app, ids = desk
    rt = runtime_of(app)
    billing = create_job(rt, "close", actor="admin", ids={ids["billing7"]: None}, start=False)
    orders = create_job(rt, "close", actor="admin", ids={ids["orders7"]: None}, start=False)
    by_filter = create_job(rt, "close", actor="admin", filter_args={"source": "billing", "subject": "orders.*"},
                           start=False)
    seen = [j["id"] for j in list_jobs(rt.engine, scopes=(Scope("orders.>", "billing"),))["jobs"]]
    assert sorted(seen) == sorted([billing, by_filter]) and orders not in seen
    chosen = job_status(rt, by_filter)
    # The filter's source took billing's entry alone, and its words name it.
    assert [i["entry_id"] for i in chosen["items"]] == [ids["billing7"]] and "source=billing" in chosen["selection_text"]


def test_a_shared_view_is_within_a_scope_of_one_source_only_when_it_names_that_source(desk):
    app, _ = desk
    rt = runtime_of(app)
    reader = Reader.of("viewer", None, (Grant("viewer", (Scope("orders.>", "billing"),)),))

    def view(query: str) -> View:
        return View(1, "someone", "v", "list", query, True, datetime(2026, 12, 1))

    assert visible.view_within(reader, rt.store, view("subject=orders.%2A&source=billing"))
    assert not visible.view_within(reader, rt.store, view("subject=orders.%2A&source=orders"))
    assert not visible.view_within(reader, rt.store, view("subject=orders.%2A"))  # every source's
    found, _ = visible.tallies(Reader.of("admin", None), rt.store).groups(EntryFilter())
    groups = {f"{g.source}:{g.subject}": g.id for g in found}
    assert visible.view_within(reader, rt.store, view(f"group={groups['billing:orders.created']}"))
    assert not visible.view_within(reader, rt.store, view(f"group={groups['orders:orders.created']}"))


def test_a_saved_views_source_is_checked_as_the_lists(desk):
    app, _ = desk
    client = support.logged_in(app, "viewer")
    answer = client.post("/views", data={"name": "b", "page": "list", "source": "shipping",
                                         "csrf_token": support.csrf_token(client, "/")})
    assert answer.status_code == 400
    assert str(escape("source 'shipping' is not valid: use one of orders, billing")) in answer.get_data(as_text=True)


# --- history and "failed again", within the entry's source ---------------------------------------

def test_history_and_failed_again_stay_within_the_entrys_source(desk):
    app, ids = desk
    rt = runtime_of(app)
    # billing's republish of its DLQ:7 failed again, in billing (orders also has a DLQ:7).
    replay = store(rt.engine, "billing", 9, Dlq_Replay_Of="DLQ:7")
    with rt.engine.begin() as conn:
        # Both DLQ:7 were republished (before the replay arrived): the replay's source tells them
        # apart (entries/replays.py).
        conn.execute(insert(Republish.__table__), [{
            "entry_id": ids[name], "version": 1, "msg_id": f"sent-{name}", "subject": "orders.created",
            "payload": b"{}", "state": "published", "actor": "operator",
            "created_at": utcnow() - timedelta(minutes=1),
            "source": source} for name, source in (("orders7", "default"), ("billing7", "billing"))])
        conn.execute(insert(Event.__table__), [{
            "original_stream": "ORDERS", "original_seq": 3, "consumer": None, "kind": "nak", "deliveries": 1,
            "at": utcnow() - timedelta(minutes=1), "source_key": "advisory:b-1", "source": "billing",
            "detail": "{}"}])
    get = api(app)
    orders = get(f"/api/entries/{ids['orders7']}").get_json()
    billing = get(f"/api/entries/{ids['billing7']}").get_json()
    assert billing["failed_again"] == replay and [r["id"] for r in billing["replays"]] == [replay]
    assert orders["failed_again"] is None and orders["replays"] == []
    assert [e["kind"] for e in billing["history"]] == ["nak"]
    assert orders["history"] == []
    # The replay's original is billing's DLQ:7, though orders' DLQ:7 is newer.
    assert get(f"/api/entries/{replay}").get_json()["original"] == ids["billing7"]
    # The list's "failed again" link too.
    client = support.logged_in(app, "viewer")
    text = client.get("/?subject=orders.created").get_data(as_text=True)
    orders_row = text[text.index(f'data-id="{ids["orders7"]}"'):]
    orders_row = orders_row[:orders_row.index("</tr>")]
    billing_row = text[text.index(f'data-id="{ids["billing7"]}"'):]
    billing_row = billing_row[:billing_row.index("</tr>")]
    assert "failed again" in billing_row and "failed again" not in orders_row


# --- alerts ----------------------------------------------------------------------------------------

def test_an_alert_names_its_groups_source_and_its_text_names_it_with_several_sources(make_app, database_url):
    engine = runtime_of(make_app()).engine
    store(engine, "default", 1, rule=AlertRule(urls=("http://a.example/hook",)))
    store(engine, "billing", 2, "billing.charged", rule=AlertRule(urls=("http://a.example/hook",),
                                                                 name_sources=True))
    with engine.connect() as conn:
        bodies = [json.loads(b) for b in conn.execute(select(Alert.body).order_by(Alert.id)).scalars()]
    one, several = bodies
    assert one["group"]["source"] == "default" and "source" not in one["text"]
    assert one["text"].startswith('New failure group on orders.created, fatal: "no stock"')
    assert several["group"]["source"] == "billing"
    assert several["text"].startswith('New failure group on billing.charged, fatal (source billing): "no stock"')


def test_the_alert_rule_names_sources_when_dlq_config_names_them(tmp_path):
    settings = support.make_settings(tmp_path, webhook_urls=("http://a.example/hook",))
    assert not AlertRule.from_settings(settings).name_sources
    assert AlertRule.from_settings(dataclasses.replace(settings, sources=SOURCES)).name_sources


# --- the pages -------------------------------------------------------------------------------------

SOURCE_HEADER = re.compile(r'<th scope="col"[^>]*>Source</th>')  # the list's and the groups' column


def test_with_one_source_the_pages_name_no_source(make_app, database_url):
    app = make_app()
    entry = support.dead_letter(app, 1)
    client = support.logged_in(app, "operator")
    group = api(app)("/api/groups").get_json()["groups"][0]["id"]
    for path in ("/", "/groups", f"/entries/{entry}", f"/groups/{group}"):
        text = client.get(path).get_data(as_text=True)
        assert not SOURCE_HEADER.search(text) and 'name="source"' not in text and "<dt>Source</dt>" not in text, path
        assert 'data-label="Source"' not in text and "group-source" not in text, path


def test_with_two_sources_the_list_entry_and_groups_show_each_ones_source(desk):
    app, ids = desk
    client = support.logged_in(app, "operator")
    text = client.get("/").get_data(as_text=True)
    assert SOURCE_HEADER.search(text)
    assert '<select name="source">' in text
    assert '<option value="orders">orders</option>' in text and '<option value="billing">billing</option>' in text
    row = text[text.index(f'data-id="{ids["orders7"]}"'):]
    assert '<td data-label="Source" class="source">orders</td>' in row[:row.index("</tr>")]
    chosen = client.get("/?source=billing").get_data(as_text=True)
    assert '<option value="billing" selected>billing</option>' in chosen
    assert client.get("/groups?source=billing").get_data(as_text=True).count('class="group-source">billing') == 2
    groups = client.get("/groups").get_data(as_text=True)
    assert SOURCE_HEADER.search(groups) and 'class="group-source">orders' in groups
    entry = client.get(f"/entries/{ids['billing8']}").get_data(as_text=True)
    assert '<dt>Source</dt><dd class="source">billing</dd>' in entry
    group = api(app)("/api/groups?source=orders").get_json()["groups"][0]["id"]
    page = client.get(f"/groups/{group}").get_data(as_text=True)
    assert '<dt>Source</dt><dd class="source">orders</dd>' in page
