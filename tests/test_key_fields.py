"""Key fields stored at ingest (ingest/key_fields.py): the values written with the entries, the
field filter answering from them exactly as from the payloads, the backfill after DLQ_LIST_FIELDS
changes (the answers right before, during and after it), a changed payload filled again, and a
deleted entry's values gone with it; on both databases."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from sqlalchemy import delete, select

from dlq_dashboard.db.models import Entry, EntryField, KeyFieldState
from dlq_dashboard.entries.fields import KeyField, field_expression, key_fields, payload_condition, shown_value
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.ingest.key_fields import (KeyFieldBackfill, MAX_VALUE, backfill, backfill_step, record_key_fields)
from dlq_dashboard.ingest.parse import Advisory
from dlq_dashboard.ingest.writes import ingest_advisory_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support

pytestmark = pytest.mark.both_databases

FIELDS = (("Customer", "/customer/id"), ("sku", "/items/0/sku"), ("paid", "/paid"), ("n", "/n"))

PAYLOADS = [
    {"customer": {"id": "C-42"}, "items": [{"sku": "A-1"}], "paid": True, "n": 1},
    {"customer": {"id": "C-7"}, "items": [], "paid": False, "n": 2.5},
    {"customer": {"id": "Zoë"}, "items": [{"sku": "A-1"}], "paid": None},
    {"customer": {"id": 42}, "items": {"0": {"sku": "key-not-index"}}},
    {"customer": {"id": {"deep": 1}}, "n": [1, 2]},
    {"customer": {"id": "x" * (MAX_VALUE + 5)}},
    {"customer": {"id": "C-42"}, "n": 1},
]
RAW = [b"not json at all", b"\xff\xfe\x00\x01" * 10, b'{"customer": \x00{"id": "C-42"}}', b"",
       '{"customer": {"id": "C\\u002d42"}}'.encode()]


def _store(app) -> list[int]:
    ids = []
    for seq, payload in enumerate([json.dumps(p, ensure_ascii=False).encode() for p in PAYLOADS] + RAW, start=1):
        ids.append(support.dead_letter(app, seq, payload=payload, Dlq_Reason="fatal"))
    return ids


def stored(engine) -> set[tuple[str, str, int]]:
    """entry_fields as (label, value, entry id), of the fields configured now."""
    kf, ef = KeyFieldState.__table__, EntryField.__table__
    with engine.connect() as conn:
        return {tuple(r) for r in conn.execute(select(kf.c.label, ef.c.value, ef.c.entry_id)
                                               .join(kf, kf.c.id == ef.c.field_id).where(kf.c.retired == False))}  # noqa: E712


def from_payloads(engine, fields: tuple[KeyField, ...]) -> set[tuple[str, str, int]]:
    """What the payloads hold at each field, read as the list reads them (raw, as stored)."""
    found = set()
    with engine.connect() as conn:
        for f in fields:
            for entry_id, value in conn.execute(select(Entry.id, field_expression(engine, f))):
                if value is not None and len(value) <= MAX_VALUE:
                    found.add((f.label, value, entry_id))
    return found


def filtered_ids(rt, field: KeyField, value: str) -> list[int]:
    flt = EntryFilter(field_values=((field, value),))
    with rt.engine.connect() as conn:
        return list(conn.execute(rt.store.select_entries(flt, Entry.id)).scalars())


def payload_ids(rt, field: KeyField, value: str) -> list[int]:
    with rt.engine.connect() as conn:
        return list(conn.execute(select(Entry.id).where(payload_condition(rt.engine, field, value))
                                 .order_by(Entry.id.desc())).scalars())


def candidate_values(rt, fields) -> list[tuple[KeyField, str]]:
    """Every value the payloads hold at each field, as a person types it, and some they do not."""
    with rt.engine.connect() as conn:
        seen = {(f, shown_value(rt.engine, v)) for f in fields
                for v in conn.execute(select(field_expression(rt.engine, f))).scalars() if v is not None}
    return sorted(seen | {(f, v) for f in fields for v in ("C-4", "nope", "true", "1", "x" * (MAX_VALUE + 5))},
                  key=lambda fv: (fv[0].label, fv[1]))


def assert_filters_match_payloads(rt, fields) -> None:
    for field, value in candidate_values(rt, fields):
        assert filtered_ids(rt, field, value) == payload_ids(rt, field, value), (field.label, value)


def test_key_fields_are_stored_at_ingest_as_the_payload_reads(make_app, database_url):
    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    _store(app)
    fields = key_fields(FIELDS)
    assert stored(rt.engine) == from_payloads(rt.engine, fields)
    labels = {(label, value) for label, value, _ in stored(rt.engine)}
    assert {("Customer", "C-42"), ("Customer", "42"), ("paid", "true"), ("paid", "false"), ("n", "2.5"),
            ("sku", "A-1")} <= labels
    assert not any(label == "paid" and value is None for label, value in labels)  # JSON null: no value
    assert_filters_match_payloads(rt, fields)
    # The escaped spelling is the same value.
    assert len(filtered_ids(rt, fields[0], "C-42")) == 3


def test_a_new_key_fields_log_line_says_whether_older_entries_are_filled(make_app, caplog):
    # With none stored it read "filling the no entries stored before it in the background".
    rt = runtime_of(make_app(list_fields=FIELDS))
    with caplog.at_level("INFO", logger="dlq_dashboard.ingest.key_fields"):
        record_key_fields(rt.engine, FIELDS[:1])
        support.dead_letter(rt.engine, 1, payload=b'{"customer_id": "C-1"}')
        record_key_fields(rt.engine, FIELDS[:2])
    # (Its lines alone: the first SQLite database of a test process logs its migration meanwhile.)
    said = [r.getMessage() for r in caplog.records if r.name == "dlq_dashboard.ingest.key_fields"]
    label, pointer = FIELDS[0]
    assert said[0] == f"key field {label} ({pointer}): no entries stored before it to fill"
    label, pointer = FIELDS[1]
    assert said[-1] == f"key field {label} ({pointer}): filling the entries stored before it in the background"


def test_nothing_is_stored_without_key_fields_recorded(make_app, database_url):
    app = make_app(list_fields=FIELDS)
    _store(app)
    rt = runtime_of(app)
    assert stored(rt.engine) == set()
    assert_filters_match_payloads(rt, key_fields(FIELDS))  # read from the payloads, as before


def test_the_filter_is_answered_from_the_stored_values(make_app, database_url):
    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    ids = _store(app)
    # A value put in entry_fields by hand (never in a payload) is found: the filter reads the key.
    field_id = next(f for f in _fields(rt.engine) if f.label == "sku").id
    with rt.engine.begin() as conn:
        conn.execute(EntryField.__table__.insert().values(field_id=field_id, value="only-stored", entry_id=ids[0]))
    assert filtered_ids(rt, key_fields(FIELDS)[1], "only-stored") == [ids[0]]


def test_a_key_fields_pages_cursors_neighbours_and_newer_entries_agree_with_the_payloads(make_app, database_url):
    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    _store(app)
    field = key_fields(FIELDS)[0]
    expected = payload_ids(rt, field, "C-42")  # newest first
    assert len(expected) == 3
    flt = EntryFilter(field_values=((field, "C-42"),))
    pages, cursor = [], None
    while True:
        page = rt.store.list_entries(replace(flt, limit=1, cursor=cursor))
        pages += [e.id for e in page.entries]
        if not (cursor := page.next_cursor):
            break
    assert pages == expected
    assert [v.id for v in rt.store.iter_entries(flt, batch=2)] == expected
    assert rt.store.neighbours(flt, expected[1]) == (expected[0], expected[2])
    assert rt.store.count_newer(flt, expected[-1]) == 2


def test_a_key_fields_page_walks_its_stored_values_in_entry_order_and_stops(make_app):
    # SQLite: before, every match was collected (a list subquery) before the page was read.
    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    _store(app)
    query = rt.store.select_entries(EntryFilter(field_values=((key_fields(FIELDS)[0], "C-42"),))).limit(51)
    with rt.engine.connect() as conn:
        sql = str(query.compile(conn, compile_kwargs={"literal_binds": True}))
        plan = " | ".join(row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
    assert "SEARCH entry_fields USING PRIMARY KEY (field_id=? AND value=?)" in plan, plan
    assert "LIST SUBQUERY" not in plan and "TEMP B-TREE" not in plan, plan


def _fields(engine):
    with engine.connect() as conn:
        return conn.execute(select(KeyFieldState.__table__)).all()


def test_a_changed_configuration_is_backfilled_and_the_answers_stay_right_throughout(make_app, database_url):
    old = (("Customer", "/customer/name"), ("sku", "/items/0/sku"), ("gone", "/n"))
    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, old)
    _store(app)
    assert {label for label, _, _ in stored(rt.engine)} == {"sku", "gone"}
    # Customer re-pointed, gone dropped, paid and n added; sku kept as it is.
    record_key_fields(rt.engine, FIELDS)
    fields = key_fields(FIELDS)
    more = support.dead_letter(app, 100, payload=json.dumps(PAYLOADS[0]).encode(), Dlq_Reason="fatal")
    assert ("Customer", "C-42", more) in stored(rt.engine)  # filled as it was written
    by_label = {f.label: f for f in _fields(rt.engine) if not f.retired}
    assert by_label["sku"].pending_below == 0 and by_label["Customer"].pending_below == more - 1
    assert {f.label for f in _fields(rt.engine) if f.retired} == {"Customer", "gone"}
    assert_filters_match_payloads(rt, fields)  # nothing older filled yet: read from the payloads
    assert backfill_step(rt.engine, batch=3)  # part of the way
    assert_filters_match_payloads(rt, fields)
    assert backfill(rt.engine, batch=3) > 0
    assert not backfill_step(rt.engine)
    assert all(f.pending_below == 0 and not f.retired for f in _fields(rt.engine))
    assert {f.label for f in _fields(rt.engine)} == {label for label, _ in FIELDS}
    assert stored(rt.engine) == from_payloads(rt.engine, fields)
    assert_filters_match_payloads(rt, fields)
    with rt.engine.connect() as conn:  # the retired fields' values are gone
        kept_ids = {f.id for f in _fields(rt.engine)}
        assert set(conn.execute(select(EntryField.field_id).distinct()).scalars()) <= kept_ids


def test_the_backfill_thread_records_the_configuration_and_fills_older_entries(make_app, database_url):
    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    _store(app)
    backfiller = KeyFieldBackfill(rt.engine, FIELDS, pause=0.0).start()
    try:
        support.wait_for(lambda: backfiller.done, message="the backfill to end")
    finally:
        backfiller.stop()
    assert stored(rt.engine) == from_payloads(rt.engine, key_fields(FIELDS))


def test_a_payload_merged_into_an_advisory_entry_is_filled_again(make_app, database_url):
    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    advisory = Advisory(kind="max_deliveries", id="a-1", at=utcnow(), stream="ORDERS", consumer="billing",
                        stream_seq=7, deliveries=3, reason=None, raw={})
    ingest_advisory_batch(rt.engine, "DLQ_ADVISORIES", "e1", [(advisory, None, "gone")], 1)
    merged = support.dead_letter(app, 1, payload=json.dumps(PAYLOADS[1]).encode(), Dlq_Reason="fatal",
                                 Dlq_Original_Stream="ORDERS", Dlq_Original_Seq="7", Dlq_Consumer="billing")
    with rt.engine.connect() as conn:
        assert conn.execute(select(Entry.sources).where(Entry.id == merged)).scalar() == "dlq,advisory"
    assert ("Customer", "C-7", merged) in stored(rt.engine)
    assert filtered_ids(rt, key_fields(FIELDS)[0], "C-7") == [merged]


def test_a_deleted_entry_takes_its_values_with_it(make_app, database_url):
    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    ids = _store(app)
    with rt.engine.begin() as conn:
        conn.execute(delete(Entry.__table__).where(Entry.id == ids[0]))
    assert not any(entry_id == ids[0] for _, _, entry_id in stored(rt.engine))
    assert stored(rt.engine) == from_payloads(rt.engine, key_fields(FIELDS))


@pytest.mark.parametrize("query", ["field.Customer=C-42", "field.Customer=C-42&status=open", "field.sku=A-1",
                                   "field.Customer=nope"])
def test_the_summary_and_the_list_of_a_key_field_agree_with_the_payloads(make_app, database_url, query):
    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    _store(app)
    client = support.logged_in(app, "operator")
    listed = client.get(f"/api/entries?{query}&limit=500").get_json()["entries"]
    summary = client.get(f"/api/summary?{query}").get_json()
    assert summary["exact"] is True
    assert summary["total"] == sum(summary["counts"].values()) == len(listed)


#: Values json_extract (SQLite) read wrongly: half a UTF-16 pair (bytes no text holds: the list
#: was a 503 for everyone), a NUL (cut there), an integer past 64 bits (a float); a whole pair.
HOSTILE = [b'{"customer": {"id": "\\ud800"}}', b'{"customer": {"id": "a\\u0000b"}}',
           b'{"customer": {"id": 9223372036854775808}}', b'{"customer": {"id": "\\ud83d\\ude00"}}',
           # (PostgreSQL's jsonb refuses such escapes anywhere: the payload's every field had no value)
           b'{"customer": {"id": "C-1"}, "note": "\\ud800 \\u0000"}',
           # A whole pair beside Persian as a JSON encoder escapes them (json.dumps): ".\u06cc" is
           # the bytes 2E DB 8C, whose hex holds "EDB" across a byte boundary, not half a pair.
           b'{"customer": {"id": "\\ud83d\\ude00.\\u06cc"}}']


def test_a_value_no_text_holds_or_past_64_bits_is_shown_and_found_as_the_payload_writes_it(make_app, database_url):
    from dlq_dashboard.accounts import create_token

    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    ids = [support.dead_letter(app, seq, payload=p, Dlq_Reason="fatal") for seq, p in enumerate(HOSTILE, start=1)]
    viewer = support.bearer(create_token(rt.engine, "reader", "viewer"))
    listed = app.test_client().get("/api/entries", headers=viewer)
    assert listed.status_code == 200, listed.get_data(as_text=True)[:300]
    shown = {e["id"]: (e.get("fields") or {}).get("Customer") for e in listed.get_json()["entries"]}
    assert shown[ids[2]] == "9223372036854775808" and shown[ids[3]] == "😀" and shown[ids[4]] == "C-1"
    assert shown[ids[5]] == "😀.ی"
    assert (shown[ids[0]], shown[ids[1]]) == ("\\ud800", "a\\u0000b")  # as the payload writes them
    found = app.test_client().get("/api/entries?field.Customer=9223372036854775808", headers=viewer).get_json()
    assert [e["id"] for e in found["entries"]] == [ids[2]]
    assert app.test_client().get("/", headers=viewer).status_code == 200
    assert stored(rt.engine) == from_payloads(rt.engine, key_fields(FIELDS))
    assert_filters_match_payloads(rt, key_fields(FIELDS))


def test_a_payload_nested_past_what_the_database_reads_is_stored_whole_and_the_rest_of_its_batch_keeps_its_values(
        make_app, database_url):
    """On PostgreSQL a payload nested 20,000 deep made the batch's key fields fail ("stack depth
    limit exceeded"): the batch was kept apart, without its subject, headers or payload."""
    from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch

    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    deep = b'{"customer": {"id": "C-deep"}, "x": ' + b'{"a": ' * 20_000 + b"1" + b"}" * 20_000 + b"}"
    plain = b'{"customer": {"id": "C-plain"}}'
    ingest_dlq_batch(rt.engine, "DLQ", "e1", [
        StreamMessage(seq, "dlq.orders.created", support.dlq_headers("orders.created", Dlq_Reason="fatal"), payload,
                      utcnow()) for seq, payload in ((1, deep), (2, plain))])
    with rt.engine.connect() as conn:
        rows = conn.execute(select(Entry.id, Entry.original_subject, Entry.payload).order_by(Entry.dlq_seq)).all()
    assert [(r.original_subject, r.payload) for r in rows] == [("orders.created", deep), ("orders.created", plain)]
    values = {(label, value, entry_id) for label, value, entry_id in stored(rt.engine)}
    assert ("Customer", "C-plain", rows[1].id) in values
    assert_filters_match_payloads(rt, key_fields(FIELDS))
    # The list reads the columns of the payloads it shows: too deep to read, no value (not a 500).
    from dlq_dashboard.accounts import create_token

    listed = app.test_client().get("/api/entries", headers=support.bearer(create_token(rt.engine, "r", "viewer")))
    assert listed.status_code == 200, listed.get_data(as_text=True)[:300]
    shown = {e["id"]: (e.get("fields") or {}).get("Customer") for e in listed.get_json()["entries"]}
    assert shown == {rows[0].id: None, rows[1].id: "C-plain"}


def test_a_batch_whose_values_the_database_refuses_is_filled_an_entry_at_a_time(make_app, database_url, monkeypatch):
    """Whatever else PostgreSQL refuses in one payload costs that entry its values, not its batch
    (SQLite fills a field at a time, through no such statement: every value is stored there)."""
    import sqlalchemy.exc

    from dlq_dashboard.ingest import key_fields as module

    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    real = module._fill_postgresql

    def refusing(conn, fields, where, params):  # the batch, and the first message's entry alone
        first = conn.execute(select(Entry.id).where(Entry.dlq_seq == 1)).scalar()
        if where.startswith("id > ") or params.get("id") == first:
            raise sqlalchemy.exc.DataError("INSERT ...", params, Exception("refused"))
        return real(conn, fields, where, params)

    monkeypatch.setattr(module, "_fill_postgresql", refusing)
    from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch

    ingest_dlq_batch(rt.engine, "DLQ", "e1", [
        StreamMessage(seq, "dlq.orders.created", support.dlq_headers("orders.created"),
                      b'{"customer": {"id": "C-%d"}}' % seq, utcnow()) for seq in (1, 2, 3)])
    with rt.engine.connect() as conn:
        ids = conn.execute(select(Entry.id).order_by(Entry.dlq_seq)).scalars().all()
    kept = {("Customer", "C-2"), ("Customer", "C-3")} | ({("Customer", "C-1")} if database_url.startswith("sqlite") else set())
    assert {(label, value) for label, value, _ in stored(rt.engine)} == kept
    assert len(ids) == 3


#: Payloads holding a key more than once in one object. JSON parsers (json.loads, the schema
#: check, the entry page, PostgreSQL's jsonb) keep the last value, SQLite's json_extract the first.
REPEATED = [b'{"customer": {"id": "A"}, "customer": {"id": "B"}}',
            b'{"customer": {"id": "C-1", "id": "C-2", "id": "C-3"}}',
            b'{"customer": {"id": "X"}, "customer": {"name": "no id in the last"}}',
            b'{"customer": {"id": "lone"}, "note": "customer"}',  # "customer" twice, one key: as before
            b'{"items": [{"sku": "S-1", "sku": "S-2"}], "paid": true, "paid": false, "n": 1, "n": 9223372036854775808}',
            b'{"items": {"0": {"sku": "K-1"}, "0": {"sku": "K-2"}}, "customer": {"id": "\\u0000", "id": "\\ud800!"}}']


def _last_value(payload: bytes, pointer: str):
    """The value at ``pointer`` as json.loads reads ``payload`` (a repeated key: its last value)."""
    node = json.loads(payload)
    for token in pointer.strip("/").split("/"):
        if isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        elif isinstance(node, dict) and token in node:
            node = node[token]
        else:
            return None
    return node


def test_a_repeated_key_is_read_as_its_last_value_as_the_entry_page_and_the_schema_read_it(make_app, database_url):
    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    ids = [support.dead_letter(app, seq, payload=p, Dlq_Reason="fatal") for seq, p in enumerate(REPEATED, start=1)]
    client = support.logged_in(app, "operator")
    shown = {e["id"]: e.get("fields") or {} for e in client.get("/api/entries?limit=500").get_json()["entries"]}
    assert shown[ids[0]].get("Customer") == "B" and shown[ids[1]].get("Customer") == "C-3"
    assert shown[ids[2]].get("Customer") is None and shown[ids[3]].get("Customer") == "lone"
    assert (shown[ids[4]].get("sku"), shown[ids[4]].get("paid"), shown[ids[4]].get("n")) == \
        ("S-2", "false", "9223372036854775808")
    assert shown[ids[5]].get("sku") == "K-2" and shown[ids[5]].get("Customer") == "\\ud800!"
    for entry_id, payload in zip(ids, REPEATED):
        last = _last_value(payload, "/customer/id")
        if isinstance(last, str) and last.isascii() and last.isprintable():
            assert shown[entry_id].get("Customer") == last
    for value, found in (("B", [ids[0]]), ("A", []), ("C-3", [ids[1]]), ("C-1", []), ("X", []), ("lone", [ids[3]])):
        listed = client.get(f"/api/entries?field.Customer={value}").get_json()["entries"]
        assert [e["id"] for e in listed] == found, value
        summary = client.get(f"/api/summary?field.Customer={value}").get_json()
        assert summary["total"] == len(found), value
    for query, found in (("field.sku=S-2", [ids[4]]), ("field.sku=S-1", []), ("field.paid=false", [ids[4]]),
                         ("field.sku=K-2", [ids[5]])):
        assert [e["id"] for e in client.get(f"/api/entries?{query}").get_json()["entries"]] == found, query
    assert stored(rt.engine) == from_payloads(rt.engine, key_fields(FIELDS))
    assert_filters_match_payloads(rt, key_fields(FIELDS))
    # Entries stored before the field was recorded: the backfill and the payload reads agree.
    with rt.engine.begin() as conn:
        conn.execute(delete(EntryField.__table__))
        conn.execute(delete(KeyFieldState.__table__))
    record_key_fields(rt.engine, FIELDS)
    assert_filters_match_payloads(rt, key_fields(FIELDS))
    backfill(rt.engine)
    assert stored(rt.engine) == from_payloads(rt.engine, key_fields(FIELDS))
    assert ("Customer", "B", ids[0]) in stored(rt.engine) and ("Customer", "A", ids[0]) not in stored(rt.engine)
