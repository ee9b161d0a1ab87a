"""The writer's parsed batches written a column at a time (ingest/columns.py) store what the rows'
way (writes.ingest_dlq_rows) stores: the same entries, groups, counts, triage and position, a
merge into an advisory's entry and a replayed batch's duplicates included."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import MetaData, select

from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
from dlq_dashboard.db.migrate import migrate
from dlq_dashboard.ingest import columns, writes
from dlq_dashboard.ingest.parse import Advisory
from dlq_dashboard.ingest.writes import StreamMessage, dlq_values, ingest_advisory_batch, ingest_dlq_rows
from dlq_dashboard.times import utcnow

# Written by the clock at the write, not by the batch: they differ between any two writes.
_CLOCK = {"updated_at", "created_at", "at", "dlq_received_at"}


def messages(first: int, last: int, now) -> list[StreamMessage]:
    found = []
    for seq in range(first, last + 1):
        headers = {"Dlq-Original-Subject": f"orders.{'created' if seq % 2 else 'paid'}",
                   "Dlq-Original-Stream": "ORDERS", "Dlq-Original-Seq": str(seq), "Dlq-Consumer": "billing",
                   "Dlq-Reason": "schema_invalid" if seq % 3 else "fatal", "Dlq-Error": f"price {seq} is a string"}
        if seq % 4:
            headers["Dlq-Failed-At"] = (now - timedelta(minutes=seq)).strftime("%Y-%m-%dT%H:%M:%SZ")
        # A key given twice and bytes that are not UTF-8: payloads a mask hides whole (payload_opaque).
        payload = {7: b'{"n": 7, "n": 8}', 10: b'{"n": "caf\xe9"}'}.get(seq, f'{{"n": {seq}}}'.encode())
        found.append(StreamMessage(seq, "dlq.orders", headers, payload,
                                   None if seq == 3 else now - timedelta(seconds=seq)))
    return found


def stored(engine) -> dict[str, list[tuple]]:
    tables = MetaData()
    tables.reflect(engine, only=["entries", "failure_groups", "group_activity", "arrivals", "events",
                                 "mirror_state", "entry_fields"])
    with engine.connect() as conn:
        return {name: conn.execute(select(*[c for c in table.c if c.name not in _CLOCK])
                                   .order_by(*table.primary_key.columns)).all()
                for name, table in tables.tables.items()}


def test_a_parsed_batch_written_by_columns_stores_what_the_rows_way_stores(tmp_path, monkeypatch):
    now = utcnow()
    advisory = Advisory("terminated", "adv-9", now - timedelta(minutes=9), "ORDERS", "billing", 9, 2, "bad", {})
    engines = {way: create_db_engine(f"sqlite:///{tmp_path}/{way}.sqlite3") for way in ("rows", "columns")}
    try:
        for engine in engines.values():
            migrate(engine)
        batches = [dlq_values("DLQ", "e1", messages(first, last, now)) + (last, after)
                   for first, last, after in ((1, 6, None), (5, 8, 6), (9, 12, 8))]
        for way, engine in engines.items():
            for number, (names, values, last, after) in enumerate(batches):
                if number == 2:  # an advisory's entry waits for the DLQ copy of sequence 9
                    with monkeypatch.context() as clock:  # received at the same moment in both
                        clock.setattr(writes, "utcnow", lambda: now)
                        ingest_advisory_batch(engine, "ADV", "a1", [(advisory, None, "gone")], 1)
                if way == "rows":
                    ingest_dlq_rows(engine, "DLQ", "e1", [dict(zip(names, row)) for row in values], last, after)
                else:
                    columns.ingest_dlq_parsed(engine, "DLQ", "e1", names, values, last, after)
        rows, by_columns = stored(engines["rows"]), stored(engines["columns"])
        assert len(rows["entries"]) == 12 and len(rows["failure_groups"]) >= 4
        assert [e for e in rows["entries"] if e.original_seq == 9][0].sources == "dlq,advisory"
        assert sorted(e.original_seq for e in rows["entries"] if e.payload_opaque) == [7, 10]
        assert by_columns == rows
        assert writes.read_position(engines["columns"], "DLQ") == ("e1", 12)
    finally:
        for engine in engines.values():
            dispose_quietly(engine)
