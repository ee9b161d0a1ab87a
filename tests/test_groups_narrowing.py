"""Groups you can narrow: /groups takes the list's search, time presets and key-field filters
(counted from the matching entries, as /summary counts them), and its trend fits its window:
per minute over the last hour (the arrivals kept a minute), per hour over 24 hours, with a
switch between them."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest

from dlq_dashboard.demo.service import DEMO_LIST_FIELDS
from dlq_dashboard.ingest import writes
from dlq_dashboard.times import utcnow

from . import support


@pytest.fixture
def web(make_app, database_url):
    """An app with the demo's key fields (Order, Customer); nothing started."""
    return make_app(list_fields=DEMO_LIST_FIELDS)


def _store(web, seq: int, customer: str, error: str, *, minutes_ago: float = 0, reason: str = "fatal",
           at=None) -> None:
    at = at or utcnow() - timedelta(minutes=minutes_ago)
    payload = ('{"order_id": "o-%d", "customer_id": "%s"}' % (seq, customer)).encode()
    saved = writes.utcnow
    writes.utcnow = lambda: at  # received then, as the mirror would have
    try:
        support.dead_letter(web, seq, payload=payload, stored_at=at, Dlq_Reason=reason, Dlq_Error=error)
    finally:
        writes.utcnow = saved


def _groups(client, query: str) -> dict[str, int]:
    """The groups a page shows: each label and its count."""
    response = client.get(f"/groups?{query}")
    assert response.status_code == 200, response.get_data(as_text=True)[:300]
    page = html.unescape(response.get_data(as_text=True))
    rows = re.findall(r'<td class="num"><strong>([\d,]+)</strong></td>.*?<span class="group-label"[^>]*>(.*?)</span>', page, re.S)
    return {label: int(count.replace(",", "")) for count, label in rows}


def _entries(client, query: str) -> int:
    """How many entries the list's own counts find under the same filters."""
    page = client.get(f"/summary?{query}").get_data(as_text=True)
    return int(re.search(r"all <strong>([\d,]+)</strong>", page).group(1).replace(",", ""))


@pytest.mark.both_databases
def test_search_key_fields_and_time_narrow_the_groups_and_their_counts_match_the_list(web, database_url):
    for seq in range(1, 7):
        _store(web, seq, "C-1042" if seq % 2 else "C-7", "timeout calling crm shard", minutes_ago=seq * 20)
    for seq in range(7, 10):
        _store(web, seq, "C-1042", "card declined by gateway", minutes_ago=seq)
    client = support.logged_in(web, "viewer")
    assert _groups(client, "status=") == {"timeout calling crm shard": 6, "card declined by gateway": 3}

    narrowed = {"q=declined": {"card declined by gateway": 3},
                "field.Customer=C-1042": {"timeout calling crm shard": 3, "card declined by gateway": 3},
                "field.Customer=C-7&q=crm": {"timeout calling crm shard": 3},
                "since=1h": {"timeout calling crm shard": 2, "card declined by gateway": 3},
                "since=15m&field.Customer=C-1042": {"card declined by gateway": 3},
                "q=nothing-like-it": {}}
    for query, expected in narrowed.items():
        assert _groups(client, f"status=&{query}") == expected, query
        assert sum(expected.values()) == _entries(client, query), query
    page = client.get("/groups?status=&q=declined").get_data(as_text=True)
    assert "counted entry by entry" in page
    assert 'value="declined"' in page  # the search box keeps what was typed
    # The placeholders of the groups' labels, said in words.
    assert "<code>&lt;n&gt;</code> stands for a number, <code>&lt;id&gt;</code> for an id" in page


def test_a_key_field_or_time_filter_opens_the_further_filters_on_the_groups_page(web):
    client = support.logged_in(web, "viewer")
    closed = client.get("/groups").get_data(as_text=True)
    assert '<details class="more-filters" data-remember="groups-more-filters">' in closed
    opened = client.get("/groups?field.Order=o-1&since=1h").get_data(as_text=True)
    assert 'data-remember="groups-more-filters" open data-keep-open>' in opened and "More filters (2 set)" in opened


def _trend(client, query: str) -> str:
    page = html.unescape(client.get(f"/groups?status=&{query}").get_data(as_text=True))
    return re.search(r'<svg class="sparkline"[^>]*aria-label="([^"]*)"', page).group(1)


def test_the_trend_is_per_minute_over_the_last_hour_and_per_hour_over_a_day(web):
    minute = utcnow().replace(second=0, microsecond=0)  # two of them in one minute, whatever the clock says
    for seq, ago in enumerate((0, 3 * 60 - 5, 3 * 60 - 25, 30 * 60, 58 * 60, 90 * 60, 600 * 60), start=1):
        _store(web, seq, "C-1", "timeout", at=minute - timedelta(seconds=ago))
    client = support.logged_in(web, "viewer")
    # Over a day, by the hour: every entry; over the last hour, by the minute: the five of it,
    # two of them in one minute.
    assert _trend(client, "").startswith("7 in the last 24 h, peak ")
    assert _trend(client, "window=1h") == "5 in the last 60 min, peak 2/min"
    # A time filter of an hour or less chooses the minutes by itself; the switch says which is shown.
    assert _trend(client, "since=15m").endswith("in the last 60 min, peak 2/min")
    page = client.get("/groups?status=&since=15m").get_data(as_text=True)
    assert re.search(r'window=1h"[^>]*aria-current="true">last hour, per minute</a>', html.unescape(page))
    assert "Last hour</th>" in page
    assert _trend(client, "since=1d").startswith("7 in the last 24 h")


def test_a_trend_window_other_than_an_hour_or_a_day_is_refused(web):
    client = support.logged_in(web, "viewer")
    response = client.get("/groups?window=7d")
    assert response.status_code == 400
    assert "window '7d' is not valid: use one of 1h, 24h" in html.unescape(response.get_data(as_text=True))
