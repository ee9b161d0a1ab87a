"""Revision 0011 regroups a database grouped by version 2 of the rules: a format failure's quoted
value and a code after a noun no longer make a group each, their counts move with them, and the
causes that only look alike stay apart."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select, text

from dlq_dashboard.db import regroup
from dlq_dashboard.db.counts import ARRIVALS, GROUPS, Change, count_changes, group_ids
from dlq_dashboard.db.engine import create_db_engine, write_transaction
from dlq_dashboard.db.migrate import head, migrate
from dlq_dashboard.db.models import Entry
from dlq_dashboard.ingest.grouping import error_group

from .test_tallies import kept, truth

# The migrations' own tests: every database_url here starts empty (not the migrated template).
pytestmark = [pytest.mark.both_databases, pytest.mark.fresh_database]

EMAILS = ["user36@example", "user7@example", "jane.doe", "", "o'brien@"]
COUPONS = ["SAVE11", "SAVE87", "XMAS24", "WINTER2026"]


def v2_rows() -> list[tuple[str, str, str, str]]:
    """(subject, reason, error, the key version 2 gave it): each address and each coupon but the
    one v2 already read as an id was a group of its own."""
    rows = []
    for value in EMAILS:
        error = f"/customer/email: {value!r} is not a 'email'"
        rows.append(("customers.created", "schema_invalid", error, error))
    for code in COUPONS:
        error = f"coupon {code} expired"
        rows.append(("orders.created", "fatal", error, "coupon <id> expired" if code == "WINTER2026" else error))
    for code in ("42P01", "23P01"):  # a code that names the cause: two groups before and after
        error = f"insert failed: error code {code}"
        rows.append(("orders.created", "fatal", error, error))
    rows.append(("orders.created", "fatal", "disk full", "disk full"))
    return rows


def store_grouped_by_v2(engine, count: int) -> None:
    rnd = random.Random(11)
    start = datetime(2026, 11, 29, 10)
    old = v2_rows()
    with write_transaction(engine) as conn:
        rows = []
        for seq in range(1, count + 1):
            subject, reason, error, old_key = old[seq % len(old)]
            rows.append({"seq": seq, "subject": subject, "reason": reason, "error": error, "old_key": old_key,
                         "status": rnd.choice(["open", "open", "republished", "closed"]),
                         "at": start + timedelta(minutes=rnd.randrange(0, 600))})
        ids = group_ids(conn, {(r["subject"], r["reason"], r["old_key"]) for r in rows})
        conn.execute(text(
            "INSERT INTO entries (status, version, dlq_stream, dlq_epoch, dlq_seq, original_subject, reason, error, "
            "received_at, headers, payload, payload_available, sources, notes, group_id) VALUES "
            "(:status, 1, 'DLQ', 'e1', :seq, :subject, :reason, :error, :at, '{}', :payload, :yes, 'dlq', "
            "'[]', :group)"),
            [{**r, "payload": b"{}", "yes": True, "group": ids[(r["subject"], r["reason"], r["old_key"])]}
             for r in rows])
        count_changes(conn, [Change(None, ids[(r["subject"], r["reason"], r["old_key"])], r["at"], None, r["status"])
                             for r in rows])


def group_sizes(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(conn.execute(select(GROUPS.c.key, GROUPS.c.open_count + GROUPS.c.republished_count
                                        + GROUPS.c.closed_count)).all())


def test_format_values_and_codes_after_a_noun_grouped_by_v2_are_regrouped_with_their_counts(
        database_url, monkeypatch):
    monkeypatch.setattr(regroup, "BATCH", 7)  # several chunks, a group split across them
    engine = create_db_engine(database_url)
    assert migrate(engine, "0009") == "0009"
    store_grouped_by_v2(engine, 84)  # 7 of each of the 12 texts
    assert kept(engine) == truth(engine)
    before = group_sizes(engine)
    assert len(before) == 12 and before["coupon <id> expired"] == 7

    assert migrate(engine) == head()
    after = group_sizes(engine)
    assert after == {"/customer/email: '…' is not a 'email'": 35, "coupon <id> expired": 28,
                     "insert failed: error code 42P01": 7, "insert failed: error code 23P01": 7, "disk full": 7}
    assert kept(engine) == truth(engine)
    with engine.connect() as conn:
        groups = {g.id: (g.first_seen, g.last_seen) for g in conn.execute(select(GROUPS))}
        seen = {g: (first, last) for g, first, last in conn.execute(
            select(Entry.group_id, func.min(Entry.received_at), func.max(Entry.received_at)).group_by(Entry.group_id))}
        arrival_groups = set(conn.execute(select(ARRIVALS.c.group_id).distinct()).scalars())
        stored = set(conn.execute(
            select(Entry.error, GROUPS.c.key).join(GROUPS, GROUPS.c.id == Entry.group_id)).all())
    assert groups == seen
    assert arrival_groups <= set(groups) | {0}
    assert all(key == error_group(error, None) for error, key in stored)
    with write_transaction(engine) as conn:
        assert regroup.regroup_entries(conn, error_group) == 0  # the next start moves nothing
    engine.dispose()

