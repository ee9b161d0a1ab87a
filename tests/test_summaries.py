"""The list's summary (/summary and GET /api/summary): a search's counts come from its newest
SEARCH_BOUND matches, a key field's from its newest FIELD_BOUND, one query for the counts, the range
and the chart, and the page and the JSON say when they are an estimate (a key field's value alone
with every match counted in its index); on both databases."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from sqlalchemy import select

from dlq_dashboard.accounts import create_token
from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.db.models import Entry
from dlq_dashboard.entries import tallies
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.ingest.key_fields import record_key_fields
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import parse_scopes
from dlq_dashboard.times import format_time

from . import support

pytestmark = pytest.mark.both_databases


@pytest.fixture
def searched(make_app, database_url, monkeypatch):
    """An app with five entries that mention widget (two closed) and one that does not; the
    search bound at 3."""
    monkeypatch.setattr(tallies, "SEARCH_BOUND", 3)
    app = make_app()
    for seq in range(1, 6):
        support.dead_letter(app, seq, payload=json.dumps({"sku": "widget", "n": seq}).encode(), Dlq_Reason="fatal")
    support.dead_letter(app, 6, payload=b'{"sku": "gadget"}', Dlq_Reason="fatal")
    return app


def test_a_search_matching_more_than_the_bound_is_an_estimate_on_the_page_and_in_the_json(searched):
    client = support.logged_in(searched, "viewer")
    answer = client.get("/api/summary?q=widget").get_json()
    assert answer["exact"] is False and answer["bound"] == 3
    assert answer["total"] == 3 == sum(answer["counts"].values()) and answer["counts"]["open"] == 3
    html = client.get("/summary?q=widget").get_data(as_text=True)
    assert "Estimate:" in html and "more than 3" in html and "at least what it says" in html


def test_a_search_within_the_bound_is_exact(searched):
    client = support.logged_in(searched, "viewer")
    answer = client.get("/api/summary?q=gadget").get_json()
    assert answer == {**answer, "exact": True, "bound": None, "total": 1}
    assert answer["first_received"] == answer["last_received"] is not None
    html = client.get("/summary?q=gadget").get_data(as_text=True)
    assert "Estimate:" not in html and "more than" not in html


def test_the_unfiltered_summary_is_exact_from_the_kept_counts(searched):
    answer = support.logged_in(searched, "viewer").get("/api/summary").get_json()
    assert answer["exact"] is True and answer["total"] == 6 and answer["bound"] is None
    assert support.logged_in(searched, "viewer").get("/api/summary?status=bogus").status_code == 400


def test_a_search_summary_reads_the_entries_once(searched, monkeypatch):
    calls = []
    original = tallies.Store.search_window
    monkeypatch.setattr(tallies.Store, "search_window",
                        lambda self, *a, **k: calls.append(a) or original(self, *a, **k))
    assert support.logged_in(searched, "viewer").get("/summary?q=widget&status=open").status_code == 200
    assert len(calls) == 1


def test_a_search_summary_counts_the_newest_matches(searched):
    rt = runtime_of(searched)
    for entry_id in (4, 5):  # the two newest of widget's five
        close_entry(rt, entry_id, 1, actor="test")
    with rt.engine.connect() as conn:
        received = dict(conn.execute(select(Entry.id, Entry.received_at)).all())
    for query, first in (("q=widget", 3), ("q=widget&status=closed", 4)):  # the range: of the status
        answer = support.logged_in(searched, "viewer").get(f"/api/summary?{query}").get_json()
        assert answer["counts"] == {"open": 1, "republished": 0, "closed": 2}, query
        assert answer["first_received"] == format_time(received[first]), query
        assert answer["last_received"] == format_time(received[5]), query


def test_a_search_with_another_filter_counts_what_passes_it_among_the_searchs_newest_matches(searched):
    """Two newer billing entries mention widget too: of the search's newest 3 matches, one is an
    order. Counted is what passes the other filter in that window, whatever lies beyond it, so
    the answer takes the time of 3 matches however few of them pass."""
    for seq in (7, 8):
        support.dead_letter(searched, seq, "billing.paid", payload=b'{"sku": "widget"}', Dlq_Reason="fatal")
    client = support.logged_in(searched, "viewer")
    answer = client.get("/api/summary?q=widget&subject=orders.*").get_json()
    assert answer == {**answer, "exact": False, "bound": 3, "total": 1, "matched": None}
    assert answer["counts"] == {"open": 1, "republished": 0, "closed": 0}
    html = client.get("/summary?q=widget&subject=orders.*").get_data(as_text=True)
    assert "Estimate:" in html and "all <strong>at least 1</strong>" in html
    assert "over the entries among the search's newest 3 matches only" in html
    # The search alone: its newest 3 matches all count, and more match.
    alone = client.get("/api/summary?q=widget").get_json()
    assert alone == {**alone, "exact": False, "bound": 3, "total": 3}
    assert "all <strong>more than 3</strong>" in client.get("/summary?q=widget").get_data(as_text=True)
    # Within the window (every match of the search in it): exact.
    assert client.get("/api/summary?q=gadget&subject=orders.*").get_json()["exact"] is True


def test_a_searchs_groups_are_counted_in_its_window_too(searched):
    for seq in (7, 8):
        support.dead_letter(searched, seq, "billing.paid", payload=b'{"sku": "widget"}', Dlq_Reason="fatal")
    client = support.logged_in(searched, "viewer")
    answer = client.get("/api/groups?q=widget&status=").get_json()
    assert answer["exact"] is False
    assert {g["subject"]: g["count"] for g in answer["groups"]} == {"billing.paid": 2, "orders.created": 1}
    narrowed = client.get("/api/groups?q=widget&status=&subject=orders.*").get_json()
    assert {g["subject"]: g["count"] for g in narrowed["groups"]} == {"orders.created": 1}
    # The page, and its fragment as htmx asks for it when a filter changes.
    for headers in ({}, {"HX-Request": "true"}):
        html = client.get("/groups?q=widget&status=", headers=headers).get_data(as_text=True)
        assert "over the entries among the search's newest 3 matches only" in html, headers
    whole = client.get("/api/groups?q=gadget&status=").get_json()
    assert whole["exact"] is True and [g["count"] for g in whole["groups"]] == [1]


@pytest.mark.parametrize("extra", [{}, {"subject": "orders.*"}, {"reason": "fatal"}, {"stream": "DLQ"}, "scoped"])
@pytest.mark.parametrize("q", ["widget", "wid", "gadget", "sku", "nothing", "!!"])
def test_a_searchs_window_is_its_newest_matches_each_with_its_entry_where_the_other_filters_keep_it(searched, q,
                                                                                                    extra):
    """Store.search_window: the newest matches of the search alone, read from its index, with
    the entry's columns where the other filters (or a scoped reader's scopes) keep it and NULLs
    where they do not; the same ids and entries as the filters' own queries, on both databases."""
    rt = runtime_of(searched)
    support.dead_letter(searched, 7, "billing.paid", payload=b'{"sku": "widget"}', Dlq_Reason="fatal")
    flt = EntryFilter.from_args({"q": q, **({} if extra == "scoped" else extra)})
    if extra == "scoped":
        flt = replace(flt, scopes=parse_scopes(["orders.>"]))
    with rt.engine.connect() as conn:
        kept = set(conn.execute(rt.store.select_entries(flt, Entry.id)).scalars())
        for limit in (1, 3, 10):
            newest = conn.execute(rt.store.select_entries(EntryFilter(q=q), Entry.id).limit(limit)).scalars().all()
            window = conn.execute(rt.store.search_window(flt, Entry.status, limit=limit, conn=conn)).all()
            assert [tuple(row) for row in window] == [(i, i, "open") if i in kept else (i, None, None) for i in newest]


# --- a key field's summary ------------------------------------------------------------------------

CUSTOMER = (("customer", "/customer"),)


@pytest.fixture
def keyed(make_app, database_url, monkeypatch):
    """An app with the key field customer: alice in five entries (four of orders.created, one of
    billing.paid, the newest), bob in one; a key field's bound at 3."""
    monkeypatch.setattr(tallies, "FIELD_BOUND", 3)
    app = make_app(list_fields=CUSTOMER)
    record_key_fields(runtime_of(app).engine, CUSTOMER)
    support.dead_letter(app, 1, payload=b'{"customer": "bob"}', Dlq_Reason="fatal")
    for seq in range(2, 6):
        support.dead_letter(app, seq, payload=b'{"customer": "alice"}', Dlq_Reason="fatal")
    support.dead_letter(app, 6, "billing.paid", payload=b'{"customer": "alice"}', Dlq_Reason="fatal")
    return app


def test_a_key_field_beyond_its_bound_is_an_estimate_that_says_how_many_match_in_all(keyed):
    client = support.logged_in(keyed, "viewer")
    for query in ("field.customer=alice", "field.customer=alice&status=open"):
        answer = client.get(f"/api/summary?{query}").get_json()
        assert answer["exact"] is False and answer["bound"] == 3, query
        assert answer["total"] == 3 == sum(answer["counts"].values()) and answer["matched"] == 5, query
        html = client.get(f"/summary?{query}").get_data(as_text=True)
        assert "Estimate:" in html and "of 5 in all" in html and "all <strong>5</strong>" in html, query
        assert "more than" not in html, query


def test_a_key_field_within_its_bound_is_exact_and_matched_is_its_total(keyed):
    answer = support.logged_in(keyed, "viewer").get("/api/summary?field.customer=bob").get_json()
    assert answer == {**answer, "exact": True, "bound": None, "total": 1, "matched": 1}
    unfiltered = support.logged_in(keyed, "viewer").get("/api/summary").get_json()
    assert unfiltered["exact"] is True and unfiltered["matched"] == unfiltered["total"] == 6


def test_matches_are_not_counted_in_the_index_where_the_key_field_is_not_all_that_selects(keyed):
    client = support.logged_in(keyed, "viewer")
    answer = client.get("/api/summary?field.customer=alice&subject=orders.created").get_json()
    assert answer["exact"] is False and answer["total"] == 3 and answer["matched"] is None
    assert "more than 3" in client.get("/summary?field.customer=alice&subject=orders.created").get_data(as_text=True)
    # A scoped reader: the index knows no subjects, so it would count the billing entry too.
    token = create_token(runtime_of(keyed).engine, "orders-viewer", "viewer", scopes=parse_scopes(["orders.>"]))
    scoped = keyed.test_client().get("/api/summary?field.customer=alice", headers=support.bearer(token)).get_json()
    assert scoped["exact"] is False and scoped["total"] == 3 and scoped["matched"] is None


def test_a_search_with_a_key_field_counts_the_entries_holding_both(keyed):
    client = support.logged_in(keyed, "viewer")
    answer = client.get("/api/summary?q=alice&field.customer=alice").get_json()
    assert answer == {**answer, "exact": True, "total": 5, "bound": None}
    assert client.get("/api/summary?q=alice&field.customer=bob").get_json()["total"] == 0
    groups = client.get("/api/groups?q=alice&field.customer=alice&status=").get_json()["groups"]
    assert sorted(g["count"] for g in groups) == [1, 4]


def test_the_groups_of_a_key_field_count_the_entries_its_summary_counts(keyed):
    """Beyond its bound, the groups are of the newest FIELD_BOUND matches (not BOUND's): the newest
    three of alice's five are billing.paid's one and two of orders.created."""
    client = support.logged_in(keyed, "viewer")
    answer = client.get("/api/groups?field.customer=alice").get_json()
    assert sorted((g["subject"], g["count"]) for g in answer["groups"]) == [("billing.paid", 1),
                                                                            ("orders.created", 2)]
    assert answer == {**answer, "exact": False, "bound": 3, "matched": 5}
    summary = client.get("/api/summary?field.customer=alice").get_json()
    assert sum(g["count"] for g in answer["groups"]) == summary["total"]
    for htmx in (False, True):  # the page, and the fragment htmx asks for when a filter changes
        html = client.get("/groups?field.customer=alice&status=",
                          headers={"HX-Request": "true"} if htmx else {}).get_data(as_text=True)
        assert "over the newest 3 matching entries only (of 5 in all)," in html, htmx
    # With a status beside the value the index does not count it: the page says "newest 3" alone.
    answer = client.get("/api/groups?field.customer=alice&status=open").get_json()
    assert answer == {**answer, "exact": False, "bound": 3, "matched": None}
    html = client.get("/groups?field.customer=alice&status=open").get_data(as_text=True)
    assert "over the newest 3 matching entries only," in html and "in all" not in html
    # Within the bound: exact, as every filter the kept counts hold.
    for query in ("field.customer=bob", "status=open"):
        answer = client.get(f"/api/groups?{query}").get_json()
        assert answer["groups"] and answer == {**answer, "exact": True, "bound": None, "matched": None}, query
