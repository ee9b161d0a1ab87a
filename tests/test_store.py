"""The query layer: every filter, the full-text search, keyset pages, counts, groups, the chart."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import pytest
from sqlalchemy import insert, select, update

from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.db.models import Entry, Republish
from dlq_dashboard.entries.filters import EntryFilter, FilterError, decode_cursor, encode_cursor
from dlq_dashboard.times import format_time, utcnow
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases


@pytest.fixture
def store(offline_app):
    return runtime_of(offline_app).store


@pytest.fixture
def engine(offline_app):
    return runtime_of(offline_app).engine


@pytest.fixture
def corpus(engine):
    """A small, varied set of entries: id by name."""
    ids = {}
    ids["created"] = support.dead_letter(engine, 1, "orders.created", b'{"order": 1, "customer": "zebulon"}',
                                 Dlq_Reason="schema_invalid", Dlq_Consumer="order-service",
                                 Dlq_Original_Stream="ORDERS", Dlq_Original_Seq="11",
                                 Dlq_Schema_Errors=json.dumps([{"path": "/order", "message": "1 is not of type 'string'"}]))
    ids["updated"] = support.dead_letter(engine, 2, "orders.updated", b'{"order": 2}', Dlq_Reason="fatal",
                                 Dlq_Error="order 2 not found in warehouse", Dlq_Consumer="order-service")
    ids["deep"] = support.dead_letter(engine, 3, "orders.eu.created", b'{"order": 3}', Dlq_Reason="fatal",
                              Dlq_Error="order 3 not found in warehouse", Dlq_Consumer="billing",
                              Dlq_Original_Stream="EU")
    ids["payment"] = support.dead_letter(engine, 4, "payments.captured", b'{"amount": "twelve"}',
                                 Dlq_Reason="max_deliveries", Dlq_Error="gateway timeout", Dlq_Consumer="billing")
    ids["binary"] = support.dead_letter(engine, 5, "payments.refunded", b"\xff\xfe\x00binary", Dlq_Reason="terminated")
    return ids


def ids_of(store, **args) -> list[int]:
    return [e.id for e in store.list_entries(EntryFilter.from_args({k: str(v) for k, v in args.items()})).entries]


def test_the_list_is_newest_first(store, corpus):
    assert ids_of(store) == sorted(corpus.values(), reverse=True)


def test_status_filters_by_status(store, engine, corpus):
    with write_transaction(engine) as conn:
        conn.execute(update(Entry).where(Entry.id == corpus["updated"]).values(status="closed"))
    assert ids_of(store, status="closed") == [corpus["updated"]]
    assert corpus["updated"] not in ids_of(store, status="open")


def test_an_exact_subject_matches_only_itself(store, corpus):
    assert ids_of(store, subject="orders.created") == [corpus["created"]]


def test_a_star_matches_exactly_one_token(store, corpus):
    assert sorted(ids_of(store, subject="orders.*")) == [corpus["created"], corpus["updated"]]
    assert ids_of(store, subject="*.captured") == [corpus["payment"]]


def test_a_greater_than_matches_every_remaining_token(store, corpus):
    assert sorted(ids_of(store, subject="orders.>")) == sorted([corpus["created"], corpus["updated"], corpus["deep"]])
    assert ids_of(store, subject="orders.*.created") == [corpus["deep"]]


def test_subject_wildcards_are_not_like_patterns(store, engine):
    percent = support.dead_letter(engine, 9, "orders%x.created", b"{}")
    support.dead_letter(engine, 10, "ordersAx.created", b"{}")
    assert ids_of(store, subject="orders%x.*") == [percent]


def test_stream_matches_the_original_or_the_dlq_stream(store, corpus):
    assert ids_of(store, stream="EU") == [corpus["deep"]]
    assert len(ids_of(store, stream="DLQ")) == len(corpus)


def test_consumer_and_reason_filter_exactly(store, corpus):
    assert sorted(ids_of(store, consumer="billing")) == [corpus["deep"], corpus["payment"]]
    assert sorted(ids_of(store, reason="fatal")) == [corpus["updated"], corpus["deep"]]


def test_since_and_until_bound_the_received_time(store, engine, corpus):
    old = datetime(2026, 1, 1, 12, 0)
    with write_transaction(engine) as conn:
        conn.execute(update(Entry).where(Entry.id == corpus["created"]).values(received_at=old))
    assert ids_of(store, until="2026-01-02T00:00:00Z") == [corpus["created"]]
    assert corpus["created"] not in ids_of(store, since="2026-01-02T00:00:00Z")
    assert ids_of(store, since="2026-01-01T12:00:00+00:00", until="2026-01-01T12:00:01Z") == [corpus["created"]]


def test_search_finds_a_word_in_the_payload_the_error_or_the_subject(store, corpus):
    assert ids_of(store, q="zebulon") == [corpus["created"]]
    assert ids_of(store, q="gateway") == [corpus["payment"]]
    assert ids_of(store, q="captured") == [corpus["payment"]]


def test_search_takes_the_last_word_as_a_prefix_and_needs_every_word(store, corpus):
    assert ids_of(store, q="zebu") == [corpus["created"]]
    assert sorted(ids_of(store, q="warehouse order")) == [corpus["updated"], corpus["deep"]]
    assert ids_of(store, q="warehouse zebulon") == []


def test_search_means_the_same_on_either_database(store, engine):
    # Case and diacritics do not matter, words are runs of letters, digits and '_', the last
    # word is a prefix, and the first 64 Ki characters of a payload count even past 64 KiB.
    support.dead_letter(engine, 1, "orders.created", '{"customer_id": "Zoë Café", "note": "Über-fast"}'.encode())
    support.dead_letter(engine, 2, "orders.created", b'{"x": "' + "\u00e9 ".encode() * 30000 + b'tail"}')
    support.dead_letter(engine, 3, "orders.created", b"\xff\xfe secretword")
    support.dead_letter(engine, 4, "orders.created", b"{}", Dlq_Error="Timeout calling payments-api v2.3")
    expected = {"cafe": [1], "CAFÉ": [1], "zoe": [1], "customer_id": [1], "uber fast": [1], "über": [1],
                "caf": [1], "secretword": [3], "tail": [2], "payments api": [4], "v2": [4], "created": [4, 3, 2, 1],
                "2.3": [], "fast tail": []}
    assert {q: [e.dlq_seq for e in store.list_entries(EntryFilter(q=q)).entries] for q in expected} == expected


def test_search_combines_with_the_other_filters(store, corpus):
    assert ids_of(store, q="warehouse", consumer="billing") == [corpus["deep"]]


def words_of(text: str | None) -> list[str]:
    return re.findall(r"\w+", (text or "").lower())


def containing(store, corpus, q: str) -> list[int]:
    """The corpus entries, newest first, whose subject, error or payload text holds every word of
    ``q`` (the last as the start of a word): what a search for ``q`` should find."""
    *whole, last = words_of(q) or [None]
    if last is None:
        return []
    found = []
    for entry_id in sorted(corpus.values(), reverse=True):
        entry = store.get_entry(entry_id, with_history=False)
        words = set(words_of(entry.original_subject) + words_of(entry.error) + words_of(entry.payload_text))
        if set(whole) <= words and any(w.startswith(last) for w in words):
            found.append(entry_id)
    return found


@pytest.mark.parametrize("q", ['"', "*", "^", "NEAR(a b)", "a OR", "-x", "'); DROP TABLE entries; --", "{{7*7}}",
                               '"zebulon', "zebulon)", "NOT warehouse", "order*", "gateway OR zebulon",
                               "warehouse'); DROP TABLE entries; --", "captured:", "-gateway", "^timeout"])
def test_search_syntax_in_what_people_type_finds_the_words_and_leaves_the_database_alone(store, engine, corpus, q):
    page = store.list_entries(EntryFilter.from_args({"q": q}))

    assert isinstance(page.entries, list)
    assert [e.id for e in page.entries] == containing(store, corpus, q)
    assert support.entry_count(engine) == len(corpus)
    assert ids_of(store, q="zebulon") == [corpus["created"]]  # the search index is intact too


def test_what_a_search_should_find_is_worked_out_from_the_words_of_each_entry(store, corpus):
    # The reference the test above holds the store to, on queries whose answer is plain.
    assert containing(store, corpus, '"') == []
    assert containing(store, corpus, "NOT warehouse") == [corpus["deep"], corpus["updated"]]
    assert containing(store, corpus, "order*") == [corpus["deep"], corpus["updated"], corpus["created"]]
    assert containing(store, corpus, "captured:") == [corpus["payment"]]


def test_keyset_pages_cover_everything_once(store, engine):
    ids = [support.dead_letter(engine, seq, "orders.created", b'{"word": "pagination"}') for seq in range(1, 24)]
    for args in ({}, {"q": "pagination"}):
        seen, cursor = [], None
        while True:
            page = store.list_entries(EntryFilter.from_args({**args, "limit": "5", **({"cursor": cursor} if cursor else {})}))
            seen += [e.id for e in page.entries]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == sorted(ids, reverse=True)


def test_iter_entries_reads_every_match_in_batches(store, corpus):
    flt = EntryFilter.from_args({"q": "warehouse"})
    assert [e.id for e in store.iter_entries(flt, batch=1)] == [corpus["deep"], corpus["updated"]]


def test_count_newer_counts_only_later_matching_entries_up_to_a_cap(store, engine, corpus):
    top = max(corpus.values())
    assert store.count_newer(EntryFilter(), top) == 0
    support.dead_letter(engine, 20, "orders.created", b'{"fresh": "arrival"}')
    support.dead_letter(engine, 21, "payments.captured", b"{}")
    assert store.count_newer(EntryFilter(), top) == 2
    assert store.count_newer(EntryFilter.from_args({"subject": "orders.>"}), top) == 1
    assert store.count_newer(EntryFilter.from_args({"q": "arrival"}), top) == 1
    assert store.count_newer(EntryFilter(), 0, cap=3) == 3


def test_an_entry_is_found_by_its_dlq_reference(store, corpus):
    assert store.entry_by_dlq_ref("DLQ:4").id == corpus["payment"]
    assert store.entry_by_dlq_ref("DLQ:404") is None
    assert store.entry_by_dlq_ref("no reference") is None


@pytest.mark.parametrize("args, word", [
    ({"subject": "orders..x"}, "subject"), ({"subject": "orders.>.x"}, "subject"), ({"subject": "a b"}, "subject"),
    ({"since": "yesterday"}, "since"), ({"until": "2026-13-01"}, "until"), ({"status": "lost"}, "status"),
    ({"limit": "0"}, "limit"), ({"cursor": "not-a-cursor"}, "cursor"),
])
def test_a_filter_value_that_does_not_parse_is_a_sentence_naming_it(args, word):
    with pytest.raises(FilterError, match=word):
        EntryFilter.from_args(args)


def test_a_filter_survives_the_round_trip_through_its_url_arguments():
    flt = EntryFilter.from_args({"status": "open", "subject": "orders.*", "q": "x", "group": "g",
                                 "since": "2026-11-29T10:00:00Z"})
    assert EntryFilter.from_args(flt.to_args()) == flt
    assert decode_cursor(encode_cursor(42)) == 42


def test_an_entry_keeps_its_history_and_actions(store, engine, corpus):
    entry = store.get_entry(corpus["created"])
    assert entry.history == [] and entry.actions == []
    assert entry.to_dict()["received_at"] == format_time(entry.received_at)
    assert entry.received_at <= utcnow()


def test_out_of_range_times_ids_and_cursors_are_refused_with_a_sentence(offline_app, tokens):
    from dlq_dashboard.entries.filters import encode_cursor

    client = offline_app.test_client()
    headers = {"Authorization": f"Bearer {tokens['viewer']}"}
    for query in ({"since": "0001-01-01T00:00:00+01:00"}, {"until": "9999-12-31T23:59:59-01:00"},
                  {"cursor": encode_cursor(2**63)}):
        response = client.get("/api/entries", query_string=query, headers=headers)
        assert response.status_code == 400 and "is not valid" in response.get_json()["error"]
    for path in ("/api/entries/9223372036854775808", "/api/jobs/9223372036854775808", "/api/nothing-here"):
        response = client.get(path, headers=headers)
        assert response.status_code == 404 and response.get_json()["error"]
    response = client.get("/api/audit", query_string={"entry": "9223372036854775808"}, headers=headers)
    assert response.status_code == 400


def test_the_replays_of_an_entry_are_those_of_its_source_found_through_their_own_index(store, engine):
    from sqlalchemy import event

    from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch

    original = support.dead_letter(engine, 1, "orders.created", b"{}")
    others = [StreamMessage(seq, "dlq.orders.created", {"Dlq-Original-Subject": "orders.created"}, b"{}", utcnow())
              for seq in range(2, 40)]
    ingest_dlq_batch(engine, "DLQ", "e1", others)
    replay = support.dead_letter(engine, 40, "orders.created", b"{}", Dlq_Replay_Of="DLQ:1")
    elsewhere = StreamMessage(1, "dlq.orders.created", {"Dlq-Original-Subject": "orders.created",
                                                        "Dlq-Replay-Of": "DLQ:1"}, b"{}", utcnow())
    ingest_dlq_batch(engine, "DLQ", "b1", [elsewhere], source="billing")
    statements = []

    def seen(_conn, _cursor, statement, parameters, _context, _many):
        statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", seen)
    try:
        assert [e.id for e in store.replays_of("DLQ:1", "default")] == [replay]
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert [e.source for e in store.replays_of("DLQ:1")] == ["default", "billing"]
    assert store.replays_of("DLQ:1", "orders-eu") == [] and original < replay
    if engine.dialect.name == "sqlite":
        # Without statistics (no ANALYZE: a fresh deployment) SQLite walked every entry of the
        # source, in id order, to find them: the entry page grew with the database.
        (statement, parameters), = [s for s in statements if "replay_of" in s[0]]
        with engine.connect() as conn:
            plan = " ".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}",
                                                                          parameters))
        assert "ix_entries_replay_of" in plan and "ix_entries_source_id" not in plan, plan


def test_the_statements_built_once_answer_each_entry_with_its_own_values(store, engine):
    # get_entry, its history, group_of, replays_of and failed_again run statements built at
    # import with bound parameters: asked in turn, each answer is the one of the entry asked.
    from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch

    a = support.dead_letter(engine, 1, "orders.created", b"{}", Dlq_Consumer="order-service", Dlq_Reason="fatal",
                            Dlq_Error="a", Dlq_Original_Stream="ORDERS", Dlq_Original_Seq="11")
    b = support.dead_letter(engine, 2, "payments.captured", b"{}", Dlq_Reason="max_deliveries", Dlq_Error="b",
                            Dlq_Original_Stream="PAYMENTS", Dlq_Original_Seq="5")
    again_a = support.dead_letter(engine, 3, "orders.created", b"{}", Dlq_Replay_Of="DLQ:1")
    again_a2 = support.dead_letter(engine, 4, "orders.created", b"{}", Dlq_Replay_Of="DLQ:1")
    again_b = support.dead_letter(engine, 5, "payments.captured", b"{}", Dlq_Replay_Of="DLQ:2")
    ingest_dlq_batch(engine, "DLQ", "b1", [StreamMessage(9, "dlq.x", {"Dlq-Original-Subject": "x",
                                                                      "Dlq-Replay-Of": "DLQ:1"}, b"{}", utcnow())],
                     source="billing")
    with engine.connect() as conn:
        group_ids = dict(conn.execute(select(Entry.id, Entry.group_id).where(Entry.id.in_([a, b]))).all())
    assert group_ids[a] != group_ids[b]
    # A failure again is one of an entry that was republished before it arrived (entries/replays.py).
    with write_transaction(engine) as conn:
        conn.execute(insert(Republish), [{"entry_id": e, "version": 1, "msg_id": f"sent-{e}", "subject": "x",
                                          "payload": b"{}", "state": "published", "actor": "a",
                                          "created_at": utcnow() - timedelta(minutes=1)} for e in (a, b)])
    for _ in range(2):
        for entry_id, subject in ((a, "orders.created"), (b, "payments.captured"), (a, "orders.created")):
            entry = store.get_entry(entry_id)
            assert (entry.id, entry.original_subject) == (entry_id, subject)
            assert store.group_of(entry_id)[0] == group_ids[entry_id]
        assert [e.id for e in store.replays_of("DLQ:1", "default")] == [again_a, again_a2]
        assert [e.id for e in store.replays_of("DLQ:2")] == [again_b] and store.replays_of("DLQ:9") == []
        assert store.failed_again([(a, "DLQ:1"), (b, "DLQ:2")]) == {a: again_a2, b: again_b}
        assert store.failed_again([(b, "DLQ:2")]) == {b: again_b}
        assert store.get_entry(10_000) is None and store.group_of(10_000) is None


def test_statements_kept_for_a_filter_answer_every_cursor_and_entry_as_built_afresh(store, engine, corpus,
                                                                                   monkeypatch):
    # A page, the neighbours and the new-entries count are built once a filter
    # (Store.statement_for), what the request brings besides (cursor, entry id) bound: each
    # answer must be that of a store that builds everything afresh, and the store keeps no more
    # than KEPT_STATEMENTS.
    from dlq_dashboard.entries import store as store_module
    from dlq_dashboard.entries.store import Store

    monkeypatch.setattr(store_module, "KEPT_STATEMENTS", 4)
    filters = [{}, {"limit": "2"}, {"subject": "orders.>", "limit": "1"}, {"consumer": "billing"},
               {"q": "order", "limit": "1"}, {"status": "open", "since": "1h"}, {"reason": "fatal"}]
    ids = sorted(corpus.values())
    for _ in range(2):
        for args in filters:
            flt = EntryFilter.from_args(args)
            fresh = Store(engine)
            pages, cursor = [], None
            while True:
                page = store.list_entries(EntryFilter.from_args({**args, **({"cursor": cursor} if cursor else {})}))
                again = fresh.list_entries(EntryFilter.from_args({**args, **({"cursor": cursor} if cursor else {})}))
                assert ([e.id for e in page.entries], page.next_cursor) == ([e.id for e in again.entries],
                                                                            again.next_cursor), args
                pages.append([e.id for e in page.entries])
                cursor = page.next_cursor
                if cursor is None:
                    break
            for entry_id in ids:
                assert store.neighbours(flt, entry_id) == Store(engine).neighbours(flt, entry_id), (args, entry_id)
                assert store.count_newer(flt, entry_id) == Store(engine).count_newer(flt, entry_id), (args, entry_id)
            assert len(store._built) <= 4



def test_a_statement_is_kept_only_for_a_filter_whose_values_are_all_it_holds(store, corpus):
    # Each filter says whether a statement built for it holds its value and nothing else
    # (ListFilter.keeps_statement): a time back from now does not (a new time each request), nor a
    # key field's (how far its backfill has come). Those are built each time, the rest kept; on
    # SQLite a time filter's too, whose statement holds its window's ids (entries/windows.py).
    from dlq_dashboard.entries.fields import key_fields

    customer = key_fields((("customer", "/customer"),))
    kept = [EntryFilter.from_args(args) for args in ({}, {"status": "open"}, {"subject": "orders.>"},
                                                     {"since": "2026-01-01T00:00:00Z"}, {"q": "order"})]
    afresh = [EntryFilter.from_args({"since": "1h"}),
              EntryFilter.from_args({"field.customer": "zebulon"}, key_fields=customer),
              EntryFilter.from_args({"status": "open", "since": "7d"})]
    assert all(flt.keeps_statement for flt in kept)
    assert not any(flt.keeps_statement for flt in afresh)
    sqlite = store.engine.dialect.name == "sqlite"
    assert [store.keeps(flt) for flt in kept] == [True, True, True, not sqlite, True]
    for flt in kept + afresh:
        store._built.clear()
        store.list_entries(flt)
        assert bool(store._built) is store.keeps(flt), flt.to_args()
        built_twice = [store.statement_for(store._page_query, flt, False, None) for _ in range(2)]
        assert (built_twice[0] is built_twice[1]) is store.keeps(flt), flt.to_args()

def test_key_field_values_from_a_kept_statement_are_each_entrys_own(store, corpus):
    # The statement of a set of key fields is kept by the store, the ids bound.
    from dlq_dashboard.entries.fields import key_fields

    customer, order = key_fields((("customer", "/customer"), ("order", "/order")))
    created, updated, binary = corpus["created"], corpus["updated"], corpus["binary"]
    for _ in range(2):
        assert store.field_values([created, updated, binary], (customer, order)) == {
            created: {"customer": "zebulon", "order": "1"}, updated: {"customer": None, "order": "2"},
            binary: {"customer": None, "order": None}}
        assert store.field_values([updated], (order,)) == {updated: {"order": "2"}}
        assert store.field_values([created], (order, customer)) == {created: {"order": "1", "customer": "zebulon"}}
        assert store.field_values([], (order,)) == {} and store.field_values([created], ()) == {}
