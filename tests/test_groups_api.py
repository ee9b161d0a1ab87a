"""GET /api/groups: the failure groups as JSON under the filters of /api/entries, each with the
filter that lists exactly its entries; ``group=`` on the list, the API and the exports; and the
hourly trend the groups page draws, read for every group in one query."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import event

from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.entries.tallies import Tallies
from dlq_dashboard.ingest import writes
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import parse_time, utcnow

from . import support

pytestmark = pytest.mark.both_databases


NOW = utcnow()


@pytest.fixture
def groups_world(offline_app, monkeypatch):
    """Three groups: 3 schema failures of orders.created (one closed) received 1, 2 and 3 hours
    ago, 2 "order <n> not found" of orders.created received minutes ago, and 1 entry without
    subject or error received three days ago."""
    rt = runtime_of(offline_app)

    def received(ago: timedelta, seq: int, subject: str | None, **headers) -> int:
        monkeypatch.setattr(writes, "utcnow", lambda: NOW - ago)  # when the mirror wrote it
        return support.dead_letter(rt.engine, seq, subject, b"{}", **headers)

    ids = [received(timedelta(hours=seq), seq, "orders.created", Dlq_Reason="schema_invalid", Dlq_Schema_Errors=json.dumps(
               [{"path": "/items/0/price", "message": f"{price} is not of type 'number'"}]))
           for seq, price in enumerate(["'1'", "'2'", "'x'"], start=1)]
    ids += [received(timedelta(minutes=seq), seq, "orders.created", Dlq_Reason="fatal", Dlq_Error=f"order {seq} not found")
            for seq in (4, 5)]
    ids.append(received(timedelta(days=3), 6, None))
    monkeypatch.undo()
    close_entry(rt, ids[0], 1, actor="test")
    return ids


def get(client, token, path):
    return client.get(path, headers=support.bearer(token))


def test_groups_come_biggest_first_with_counts_by_status_times_and_a_readable_label(offline_app, tokens,
                                                                                     groups_world):
    response = get(offline_app.test_client(), tokens["viewer"], "/api/groups")

    assert response.status_code == 200
    body = response.get_json()
    assert body["exact"] is True
    groups = body["groups"]
    assert [(g["subject"], g["reason"], g["label"], g["count"], g["by_status"]) for g in groups] == [
        ("orders.created", "schema_invalid", "/items/*/price: … is not of type 'number'", 3,
         {"open": 2, "republished": 0, "closed": 1}),
        ("orders.created", "fatal", "order <id> not found", 2, {"open": 2, "republished": 0, "closed": 0}),
        (None, None, "(no error text)", 1, {"open": 1, "republished": 0, "closed": 0}),
    ]
    for g in groups:
        # The group's id as SPEC writes it ("filter": {"group": id}): the same integer as "id".
        assert g["filter"] == {"group": g["id"]} and isinstance(g["filter"]["group"], int)
        detail = get(offline_app.test_client(), tokens["viewer"], f"/api/groups/{g['id']}").get_json()
        assert detail["filter"] == {"group": g["id"]}
        first, last = parse_time(g["first_seen"]), parse_time(g["last_seen"])
        assert g["first_seen"].endswith("Z") and first <= last


@pytest.mark.parametrize("query", ["", "status=open", "status=closed", "subject=orders.*", "reason=fatal",
                                   "q=order", "consumer=nobody", "since=2000-01-01T00:00:00Z"])
def test_each_groups_filter_lists_exactly_its_count_of_entries(offline_app, tokens, groups_world, query):
    client = offline_app.test_client()
    groups = get(client, tokens["viewer"], f"/api/groups?{query}").get_json()["groups"]

    assert sum(g["count"] for g in groups) == len(get(client, tokens["viewer"],
                                                      f"/api/entries?{query}&limit=500").get_json()["entries"])
    for g in groups:
        assert "group" in g["filter"]
        listed = get(client, tokens["viewer"], "/api/entries?limit=500&" + "&".join(
            f"{k}={v}" for k, v in g["filter"].items())).get_json()["entries"]
        assert len(listed) == g["count"], (query, g)


def test_a_status_filter_counts_that_status_and_the_groups_filter_keeps_it(offline_app, tokens, groups_world):
    groups = get(offline_app.test_client(), tokens["viewer"], "/api/groups?status=closed").get_json()["groups"]

    assert [(g["label"], g["count"]) for g in groups] == [("/items/*/price: … is not of type 'number'", 1)]
    assert groups[0]["filter"] == {"status": "closed", "group": groups[0]["id"]}


def test_a_groups_filter_as_json_selects_its_entries_for_a_bulk_request(offline_app, tokens, groups_world):
    # The filter sent back as it came (its group an integer): the repair preview counts that group.
    client = offline_app.test_client()
    groups = get(client, tokens["viewer"], "/api/groups?status=open").get_json()["groups"]
    fatal = next(g for g in groups if g["reason"] == "fatal")
    response = client.post("/api/repair/preview", json={"filter": fatal["filter"]},
                           headers=support.bearer(tokens["operator"]))
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["count"] == fatal["count"] == 2


def test_a_group_filter_answers_that_group_only_and_limit_caps_the_groups(offline_app, tokens, groups_world):
    client = offline_app.test_client()
    everything = get(client, tokens["viewer"], "/api/groups").get_json()["groups"]
    second = everything[1]

    assert get(client, tokens["viewer"], f"/api/groups?group={second['id']}").get_json()["groups"] == [second]
    assert get(client, tokens["viewer"], "/api/groups?limit=1").get_json()["groups"] == everything[:1]


@pytest.mark.parametrize("query, named", [("status=lost", "status"), ("subject=orders..x", "subject"),
                                          ("since=yesterday", "since"), ("limit=0", "limit"),
                                          ("limit=1001", "limit"), ("cursor=ZTE", "cursor")])
def test_a_bad_filter_is_a_400_that_names_it(offline_app, tokens, query, named):
    response = get(offline_app.test_client(), tokens["viewer"], f"/api/groups?{query}")

    assert response.status_code == 400
    assert named in response.get_json()["error"]


@pytest.mark.parametrize("cursor", ["ZTE", "x"])
def test_a_cursor_for_groups_is_refused_as_groups_have_none_whatever_it_holds(offline_app, tokens, cursor):
    # One that is not a list's cursor was told "use next_cursor from a previous page", which
    # groups have none of.
    response = get(offline_app.test_client(), tokens["viewer"], f"/api/groups?cursor={cursor}")
    assert response.status_code == 400
    assert response.get_json()["error"].startswith("cursor does not apply to groups: they come in one answer")


def test_groups_need_a_viewer_by_token_or_session(offline_app, tokens, auth):
    client = offline_app.test_client()
    assert client.get("/api/groups").status_code == 401
    assert client.get("/api/groups").get_json()["error"]
    assert get(client, "dlq_not-a-token", "/api/groups").status_code == 401
    assert get(client, tokens["viewer"], "/api/groups").status_code == 200
    assert auth.client("viewer").get("/api/groups").get_json() == {"groups": [], "exact": True, "bound": None,
                                                                   "matched": None}


def test_group_selects_the_same_entries_on_the_list_the_api_and_the_exports(offline_app, tokens, auth,
                                                                            groups_world):
    client = offline_app.test_client()
    fatal = get(client, tokens["viewer"], "/api/groups?reason=fatal").get_json()["groups"][0]
    wanted = sorted(groups_world[3:5])

    entries = get(client, tokens["viewer"], f"/api/entries?group={fatal['id']}").get_json()["entries"]
    assert sorted(e["id"] for e in entries) == wanted
    exported = get(client, tokens["viewer"], f"/api/export.ndjson?group={fatal['id']}").get_data(as_text=True)
    assert sorted(json.loads(line)["id"] for line in exported.splitlines()) == wanted
    page = auth.client("viewer").get(f"/?group={fatal['id']}").get_data(as_text=True)
    assert all(f'href="/entries/{i}?group={fatal["id"]}"' in page for i in wanted)  # the list's filter rides along
    assert f'href="/entries/{groups_world[1]}?' not in page and f'href="/entries/{groups_world[1]}"' not in page
    # An id no group has is refused (a 400 sentence); a link made before groups had ids names the key.
    missing = get(client, tokens["viewer"], "/api/entries?group=999999")
    assert missing.status_code == 400 and "is not a failure group" in missing.get_json()["error"]
    by_key = get(client, tokens["viewer"], "/api/entries?group=order <id> not found").get_json()["entries"]
    assert sorted(e["id"] for e in by_key) == wanted


def test_the_hourly_trend_of_every_group_shown_is_one_query(offline_app, groups_world):
    rt = runtime_of(offline_app)
    tallies = Tallies(rt.store)
    groups, _ = tallies.groups(EntryFilter())
    statements = []

    def listen(conn, cursor, statement, *rest):
        statements.append(statement)

    event.listen(rt.engine, "before_cursor_execute", listen)
    try:
        start, trends = tallies.hourly_arrivals([g.id for g in groups], now=NOW)
    finally:
        event.remove(rt.engine, "before_cursor_execute", listen)
    assert len([s for s in statements if "arrivals" in s.lower()]) == 1, statements
    schema, fatal, none = (trends[g.id] for g in groups)
    assert len(schema) == 24 and start == NOW.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    # Every status counts: the closed schema failure arrived 1 hour ago as the others did.
    assert schema[-4:] == [1, 1, 1, 0]
    assert sum(fatal) == 2 and fatal[-1] + fatal[-2] == 2
    assert none == [0] * 24  # it arrived three days ago


@pytest.mark.parametrize("value", ["²", "٣", "1²"])
def test_a_group_that_only_looks_like_a_number_is_looked_up_as_a_key_not_a_server_error(offline_app, tokens, value):
    client = offline_app.test_client()
    for path in ("/api/entries", "/api/groups"):
        response = get(client, tokens["viewer"], f"{path}?group={value}")
        # No group has that key: the sentence says so (the one rule for values, web/params.py).
        assert response.status_code == 400, (path, response.get_data(as_text=True)[:200])
        assert response.get_json()["error"] == f"group {value!r} is not a failure group: use a group's id " \
                                               "from /groups or /api/groups"
