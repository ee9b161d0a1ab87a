"""Failure groups and the summary: the counts kept beside the entries agree with the entries
after every kind of write, and what they cannot answer is counted from the entries, bounded."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from dlq_dashboard.actions.close import close_entry, reopen_entry
from dlq_dashboard.db.counts import ARRIVALS, GROUPS, bucket
from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.db.models import Entry
from dlq_dashboard.entries import tallies
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.entries.tallies import Tallies
from dlq_dashboard.ingest.grouping import NO_ERROR
from dlq_dashboard.ingest.parse import Advisory
from dlq_dashboard.ingest.writes import StreamMessage, ingest_advisory_batch, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support

pytestmark = pytest.mark.both_databases


@pytest.fixture
def rt(offline_app):
    return runtime_of(offline_app)


@pytest.fixture
def counted(rt):
    return Tallies(rt.store)


def flt(**args) -> EntryFilter:
    return EntryFilter.from_args({k: str(v) for k, v in args.items()})


# --- the kept counts agree with the entries ------------------------------------------------------

def truth(engine) -> tuple[dict, dict]:
    """What the kept counts should say, counted from the entries: per (group, status), and per
    (width, bucket, group, status)."""
    with engine.connect() as conn:
        rows = conn.execute(select(Entry.group_id, Entry.status, Entry.received_at)).all()
    groups: dict = {}
    buckets: dict = {}
    for group_id, status, at in rows:
        groups[(group_id, status)] = groups.get((group_id, status), 0) + 1
        for width in (60, 3600):
            for counted_in in (group_id, 0):  # its group, and every group together
                key = (width, bucket(at, width), counted_in, status)
                buckets[key] = buckets.get(key, 0) + 1
    return groups, buckets


def kept(engine) -> tuple[dict, dict]:
    with engine.connect() as conn:
        groups = {}
        # Named columns: a test of an older revision reads this table before later columns exist.
        for row in conn.execute(select(GROUPS.c.id, GROUPS.c.open_count, GROUPS.c.republished_count,
                                       GROUPS.c.closed_count)):
            for status in ("open", "republished", "closed"):
                if row._mapping[f"{status}_count"]:
                    groups[(row.id, status)] = row._mapping[f"{status}_count"]
        buckets = {(r.width, r.bucket, r.group_id, r.status): r.count
                   for r in conn.execute(select(ARRIVALS)) if r.count}
    return groups, buckets


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_kept_counts_agree_with_the_entries_after_any_mix_of_writes(rt, seed):
    rnd = random.Random(seed)
    errors = ["order 1 not found", "order 2 not found", "timeout after 30 ms", "disk full", None]
    subjects = ["orders.created", "orders.updated", "payments.captured", None]
    seq, advisory_seq = 0, 0
    for step in range(40):
        action = rnd.choice(["ingest", "ingest", "advisory", "close", "reopen", "republish"])
        with rt.engine.connect() as conn:
            entries = conn.execute(select(Entry.id, Entry.status, Entry.version)).all()
        if action == "ingest":
            batch = []
            for _ in range(rnd.randint(1, 6)):
                seq += 1
                headers = {"Dlq-Reason": rnd.choice(["fatal", "max_deliveries"])}
                if (subject := rnd.choice(subjects)) is not None:
                    headers["Dlq-Original-Subject"] = subject
                if (error := rnd.choice(errors)) is not None:
                    headers["Dlq-Error"] = error
                if rnd.random() < 0.3 and advisory_seq:  # the DLQ copy of a failure an advisory told
                    headers.update({"Dlq-Original-Stream": "ORDERS", "Dlq-Original-Seq": str(rnd.randint(1, advisory_seq)),
                                    "Dlq-Consumer": "billing"})
                batch.append(StreamMessage(seq, "dlq.x", headers, b"{}", utcnow() - timedelta(hours=rnd.randint(0, 30))))
            ingest_dlq_batch(rt.engine, "DLQ", "e1", batch)
        elif action == "advisory":
            advisory_seq += 1
            advisory = Advisory(kind="max_deliveries", id=f"a-{advisory_seq}", at=utcnow(), stream="ORDERS",
                                consumer="billing", stream_seq=advisory_seq, deliveries=3, reason=None, raw={})
            ingest_advisory_batch(rt.engine, "DLQ_ADVISORIES", "e1", [(advisory, None, "gone")], advisory_seq)
        elif entries:
            entry = rnd.choice(entries)
            if action == "close" and entry.status != "closed":
                close_entry(rt, entry.id, entry.version, actor="test")
            elif action == "reopen" and entry.status != "open":
                reopen_entry(rt, entry.id, entry.version, actor="test")
            elif action == "republish" and entry.status != "closed":
                with rt.engine.connect() as conn:
                    has_subject = conn.execute(select(Entry.original_subject).where(Entry.id == entry.id)).scalar()
                if has_subject:
                    support.record_republish(rt, entry.id, step)
        assert kept(rt.engine) == truth(rt.engine), f"after step {step}: {action}"


def test_groups_from_the_kept_counts_list_counts_by_status_and_open_their_entries(rt, counted):
    engine = rt.engine
    for seq, price in enumerate(["'1'", "'2'", "'x'"], start=1):
        support.dead_letter(engine, seq, "orders.created", b"{}", Dlq_Reason="schema_invalid",
                            Dlq_Schema_Errors=json.dumps([{"path": "/items/0/price",
                                                           "message": f"{price} is not of type 'number'"}]))
    closed = support.dead_letter(engine, 4, "orders.created", b"{}", Dlq_Reason="fatal", Dlq_Error="order 4 not found")
    support.dead_letter(engine, 5, "orders.created", b"{}", Dlq_Reason="fatal", Dlq_Error="order 5 not found")
    support.dead_letter(engine, 6, None, b"{}")
    close_entry(rt, closed, 1, actor="test")

    groups, tally = counted.groups(flt())
    assert tally.kept
    assert [(g.subject, g.reason, g.key, g.count, g.by_status) for g in groups] == [
        ("orders.created", "schema_invalid", "/items/*/price: … is not of type 'number'", 3,
         {"open": 3, "republished": 0, "closed": 0}),
        ("orders.created", "fatal", "order <id> not found", 2, {"open": 1, "republished": 0, "closed": 1}),
        (None, None, NO_ERROR, 1, {"open": 1, "republished": 0, "closed": 0}),
    ]
    assert groups[0].first_seen <= groups[0].last_seen
    for group in groups:
        listed = rt.store.list_entries(EntryFilter.from_args(group.filter_args())).entries
        assert len(listed) == group.count
    # A status filter counts that status only, and leaves out groups without it.
    assert [(g.key, g.count) for g in counted.groups(flt(status="closed"))[0]] == [("order <id> not found", 1)]
    assert [g.key for g in counted.groups(flt(subject="orders.*", reason="fatal"))[0]] == ["order <id> not found"]
    # Links made before groups had ids name the key.
    assert len(rt.store.list_entries(flt(group="order <id> not found")).entries) == 2


def test_filters_the_kept_counts_do_not_hold_are_counted_from_the_entries_and_agree(rt, counted):
    for seq in range(1, 9):
        support.dead_letter(rt.engine, seq, "orders.created" if seq % 2 else "payments.captured", b"{}",
                            Dlq_Error=f"order {seq} not found", Dlq_Consumer="billing" if seq <= 4 else "shop")
    by_consumer, tally = counted.groups(flt(consumer="billing"))
    assert not tally.kept and tally.whole
    assert sorted((g.subject, g.count) for g in by_consumer) == [("orders.created", 2), ("payments.captured", 2)]
    searched, tally = counted.groups(flt(q="order"))
    assert not tally.kept
    assert sorted((g.subject, g.count) for g in searched) == sorted(
        (g.subject, g.count) for g in counted.groups(flt())[0])
    counts, tally = counted.counts_by_status(flt(status="open", consumer="shop"))
    assert counts == {"open": 4, "republished": 0, "closed": 0} and not tally.kept


def test_counting_from_the_entries_stops_at_the_bound_and_says_so(rt, counted, monkeypatch):
    monkeypatch.setattr(tallies, "BOUND", 5)
    for seq in range(1, 9):
        support.dead_letter(rt.engine, seq, "orders.created", b"{}", Dlq_Error="boom", Dlq_Consumer="billing")
    groups, tally = counted.groups(flt(consumer="billing"))
    assert [g.count for g in groups] == [5] and not tally.whole
    counts, tally = counted.counts_by_status(flt(consumer="billing"))
    assert counts["open"] == 5 and not tally.whole
    kept_groups, tally = counted.groups(flt())
    assert [g.count for g in kept_groups] == [8] and tally.kept and tally.whole


def test_the_groups_count_the_newest_bound_entries_and_the_one_read_beyond_only_says_there_are_more(
        rt, counted, monkeypatch):
    monkeypatch.setattr(tallies, "BOUND", 4)
    # The oldest billing entry alone in its group, the four newer ones in another; four of shop's.
    support.dead_letter(rt.engine, 1, "payments.captured", b"{}", Dlq_Error="boom", Dlq_Consumer="billing")
    for seq in range(2, 6):
        support.dead_letter(rt.engine, seq, "orders.created", b"{}", Dlq_Error="boom", Dlq_Consumer="billing")
    for seq in range(6, 10):
        support.dead_letter(rt.engine, seq, "orders.created" if seq % 2 else "payments.captured", b"{}",
                            Dlq_Error="boom", Dlq_Consumer="shop")
    with rt.engine.connect() as conn:
        times = dict(conn.execute(select(Entry.dlq_seq, Entry.received_at)).all())
    groups, tally = counted.groups(flt(consumer="billing"))
    assert [(g.subject, g.count) for g in groups] == [("orders.created", 4)]
    assert (groups[0].first_seen, groups[0].last_seen) == (times[2], times[5])
    assert not tally.whole and tally.bound == 4 and tally.matched is None
    # Conditions on the groups that leave none still tell that more matched than were counted.
    assert counted.groups(flt(consumer="billing"), where=(GROUPS.c.id == -1,)) == ([], tally)
    # Exactly the bound: every one counted, and whole.
    groups, tally = counted.groups(flt(consumer="shop"))
    assert sorted((g.subject, g.count) for g in groups) == [("orders.created", 2), ("payments.captured", 2)]
    assert tally.whole
    assert counted.groups(flt(consumer="shop"), where=(GROUPS.c.id == -1,)) == ([], tally)
    assert counted.groups(flt(consumer="nobody")) == ([], tally)


def test_a_summary_counted_from_the_entries_is_that_of_its_newest_bound_matches(rt, counted, monkeypatch):
    """Counts by status, the range and the chart of a filter the kept counts do not hold are made
    in SQL from its newest BOUND matches (a run a status and minute): the same numbers as read
    from those entries one by one, the one read beyond the bound left out."""
    monkeypatch.setattr(tallies, "BOUND", 5)
    base = datetime(2026, 11, 29, 12, 0)
    minutes = [0, 0, 3, 3, 3, 7, 9, 9]  # the oldest two share a minute with nothing newer
    ids = [support.dead_letter(rt.engine, seq, "orders.created", b"{}", Dlq_Error="boom", Dlq_Consumer="billing")
           for seq in range(1, len(minutes) + 1)]
    for entry_id in (ids[2], ids[6]):
        close_entry(rt, entry_id, 1, actor="test")
    with write_transaction(rt.engine) as conn:  # received over a few minutes, seconds apart within one
        for i, (entry_id, minute) in enumerate(zip(ids, minutes)):
            conn.execute(update(Entry).where(Entry.id == entry_id)
                         .values(received_at=base + timedelta(minutes=minute, seconds=5 * i)))
    with rt.engine.connect() as conn:
        newest = conn.execute(select(Entry.status, Entry.received_at).order_by(Entry.id.desc()).limit(5)).all()
    newest = [(status, tallies.as_time(at)) for status, at in newest]
    counts, tally = counted.counts_by_status(flt(consumer="billing"))
    assert counts == {s: sum(1 for status, _ in newest if status == s) for s in ("open", "republished", "closed")}
    assert not tally.whole and tally.bound == 5
    opened = [at for status, at in newest if status == "open"]
    assert counted.received_range(flt(consumer="billing", status="open")) == (min(opened), max(opened))
    bounds = [base + timedelta(minutes=m) for m in range(0, 12, 2)]  # bars of two minutes
    totals, tally = counted.received_between(flt(consumer="billing"), bounds)
    assert totals == [sum(1 for _, at in newest if bounds[i] <= at < bounds[i + 1]) for i in range(len(bounds) - 1)]
    assert sum(totals) == 5 and not tally.whole
    # Exactly the bound: whole, every one counted.
    monkeypatch.setattr(tallies, "BOUND", 8)
    counts, tally = Tallies(rt.store).counts_by_status(flt(consumer="billing"))
    assert counts == {"open": 6, "republished": 0, "closed": 2} and tally.whole
    assert Tallies(rt.store).counts_by_status(flt(consumer="nobody")) == (
        {"open": 0, "republished": 0, "closed": 0}, tally)


def test_the_summary_counts_by_status_from_the_kept_counts_under_subject_and_reason(rt, counted):
    ids = [support.dead_letter(rt.engine, seq, subject, b"{}", Dlq_Reason=reason, Dlq_Error="boom")
           for seq, (subject, reason) in enumerate([("orders.created", "fatal"), ("orders.created", "fatal"),
                                                     ("payments.captured", "fatal"), ("orders.updated", "terminated")],
                                                    start=1)]
    close_entry(rt, ids[0], 1, actor="test")
    counts, tally = counted.counts_by_status(flt(status="open", subject="orders.>"))
    assert counts == {"open": 2, "republished": 0, "closed": 1} and tally.kept
    assert counted.counts_by_status(flt(reason="fatal"))[0] == {"open": 2, "republished": 0, "closed": 1}
    assert counted.counts_by_status(flt(subject="nothing.here"))[0] == {"open": 0, "republished": 0, "closed": 0}


@pytest.mark.parametrize("bar", [timedelta(minutes=5), timedelta(hours=3)])
def test_arrivals_over_time_come_from_minute_or_hour_buckets_and_match_the_entries(rt, counted, bar):
    base = datetime(2026, 11, 29, 12, 0)
    at = [base - timedelta(minutes=m) for m in (1, 2, 7, 90, 200, 400)]
    for seq, when in enumerate(at, start=1):
        support.dead_letter(rt.engine, seq, "orders.created", b"{}", Dlq_Error="boom")
    with write_transaction(rt.engine) as conn:  # arrival times as if received then
        for seq, when in enumerate(at, start=1):
            conn.execute(update(Entry).where(Entry.dlq_seq == seq).values(received_at=when))
    # The kept counts were made at insert time: rebuild them as the migration would for old rows.
    _recount(rt.engine)
    first, last = counted.received_range(flt())
    assert (first, last) == (min(at), max(at))
    start = datetime(2026, 11, 29, 0, 0)
    bounds = [start + i * bar for i in range(int(timedelta(hours=13) / bar) + 1)]
    totals, tally = counted.received_between(flt(), bounds)
    assert tally.kept and sum(totals) == 6
    for when in at:
        assert totals[int((when - start) / bar)] >= 1
    from_entries, tally = counted.received_between(flt(consumer="nobody-but-all", q="boom"), bounds)
    assert not tally.kept and from_entries == [0] * len(totals)
    assert counted.received_between(flt(q="boom"), bounds)[0] == totals


def _recount(engine) -> None:
    from dlq_dashboard.db.counts import Change, count_changes

    with write_transaction(engine) as conn:
        conn.execute(ARRIVALS.delete())
        conn.execute(update(GROUPS).values(open_count=0, republished_count=0, closed_count=0,
                                           first_seen=None, last_seen=None))
        rows = conn.execute(select(Entry.group_id, Entry.received_at, Entry.status)).all()
        count_changes(conn, [Change(None, g, at, None, s) for g, at, s in rows])
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(ARRIVALS)).scalar() > 0


def test_kept_statements_answer_each_filter_time_and_group_as_built_afresh(rt, counted):
    # The kept counts' statements are kept by the store for each filter, the times and group ids
    # bound: asked in turn, each answer is that of a Tallies over a store that builds afresh.
    from dlq_dashboard.entries.store import Store

    for seq, (subject, reason) in enumerate([("orders.created", "fatal"), ("orders.created", "terminated"),
                                             ("payments.captured", "fatal"), ("orders.updated", "fatal")], start=1):
        support.dead_letter(rt.engine, seq, subject, b"{}", Dlq_Reason=reason, Dlq_Error=f"boom {seq}")
    close_entry(rt, 1, 1, actor="test")
    now = utcnow()
    spans = [[now - timedelta(hours=2) + i * timedelta(minutes=10) for i in range(14)],
             [now - timedelta(days=1) + i * timedelta(hours=1) for i in range(26)],
             [now + timedelta(hours=1), now + timedelta(hours=2)]]
    filters = [flt(), flt(status="open"), flt(status="closed"), flt(subject="orders.>"), flt(reason="fatal"),
               flt(status="open", subject="payments.*")]
    for _ in range(2):
        for f in filters:
            fresh = Tallies(Store(rt.engine))
            groups = counted.groups(f)[0]
            assert groups == fresh.groups(f)[0] and counted.groups(f, limit=1)[0] == fresh.groups(f, limit=1)[0]
            assert counted.counts_by_status(f) == fresh.counts_by_status(f)
            assert counted.received_range(f) == fresh.received_range(f)
            for bounds in spans:
                assert counted.received_between(f, bounds) == fresh.received_between(f, bounds)
            ids = [g.id for g in groups]
            for width, buckets in ((60, 60), (3600, 24)):
                for some in (ids, ids[:1], []):
                    assert counted.arrivals(some, width=width, buckets=buckets, now=now) == \
                        fresh.arrivals(some, width=width, buckets=buckets, now=now)
    assert sum(sum(n) for n in counted.arrivals([g.id for g in counted.groups(flt())[0]], width=60,
                                                 buckets=60, now=now)[1].values()) == 4
