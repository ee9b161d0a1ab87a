"""The list's summary (/summary and GET /api/summary): a search's counts come from its newest
SEARCH_BOUND matches, one query for the counts, the range and the chart, and the page and the JSON
say when they are an estimate; on both databases."""

from __future__ import annotations

import json

import pytest

from dlq_dashboard.entries import tallies

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
    original = tallies.Store.select_entries
    monkeypatch.setattr(tallies.Store, "select_entries", lambda self, *a: calls.append(a) or original(self, *a))
    assert support.logged_in(searched, "viewer").get("/summary?q=widget&status=open").status_code == 200
    assert len(calls) == 1
