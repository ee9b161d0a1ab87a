"""A DLQ copy joining the entry its failure's advisory made first (the mirror may read the
advisory stream ahead of the DLQ stream): the copy's fields and error decide the entry, and it moves
to the copy's failure group. For that group it is a new failure (what it counts toward: a spike, a
regression, an ignore's count; its first and last seen), and the advisory's group, left empty, is
as if it had never been: its alerts not sent yet are withdrawn, and the group itself goes when
nothing was done with it (a failure of its kind later is new again, and announced)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, select, update

from ..alerts.outbox import withdraw_emptied
from ..db.counts import Change, count_changes, group_ids, group_of
from ..db.models import Alert, Arrival, Entry, FailureGroup, GroupActivity
from ..scopes import DEFAULT_SOURCE
from ..teams import Team
from .key_fields import fill_key_fields

ENTRIES, GROUPS, ARRIVALS = Entry.__table__, FailureGroup.__table__, Arrival.__table__

# Columns a DLQ copy brings to an entry first made from an advisory.
DLQ_FIELDS = ("dlq_stream", "dlq_epoch", "dlq_seq", "original_subject", "original_msg_id", "reason",
               "error", "schema_errors", "headers", "payload", "payload_available", "replay_of", "notes")


def merge_into_advisory_entries(conn: Connection, rows: list[dict], new_groups: set[int] | None = None,
                                teams: tuple[Team, ...] = (),
                                source: str = DEFAULT_SOURCE) -> tuple[list[dict], Counter[int]]:
    """Merge rows into entries made earlier from an advisory of the same ``source``; return the
    rows still to insert, and the failures each group received by a move (arrivals, for triage
    and alerts, as new entries are). ``new_groups`` receives the groups made for them."""
    keyed = [r for r in rows if r["original_stream"] and r["original_seq"] is not None]
    if not keyed:
        return rows, Counter()
    # Only entries made from an advisory alone can take a DLQ copy (a small partial index): most
    # batches meet none, which one look at that index says.
    if conn.execute(select(Entry.id).where(Entry.dlq_seq.is_(None), Entry.original_stream.is_not(None))
                    .limit(1)).first() is None:
        return rows, Counter()
    # One range query a source stream instead of a lookup a row.
    seqs: dict[str, list[int]] = {}
    for r in keyed:
        seqs.setdefault(r["original_stream"], []).append(r["original_seq"])
    ranges = {stream_name: (min(found), max(found)) for stream_name, found in seqs.items()}
    candidates = []
    for stream_name, (low, high) in ranges.items():
        candidates.extend(conn.execute(
            select(Entry.id, Entry.original_stream, Entry.original_seq, Entry.consumer, Entry.deliveries,
                   Entry.failed_at, Entry.reason, Entry.group_id, Entry.received_at, Entry.status)
            .where(Entry.dlq_seq.is_(None), Entry.original_stream == stream_name,
                   Entry.original_seq.between(low, high), Entry.source == source)).all())
    if not candidates:
        return rows, Counter()
    remaining, merged = [], []
    taken: set[int] = set()
    for row in rows:
        match = next((c for c in candidates if c.id not in taken
                      and (c.original_stream, c.original_seq) == (row["original_stream"], row["original_seq"])
                      and (c.consumer is None or row["consumer"] is None or c.consumer == row["consumer"])
                      and same_failure(c.failed_at, row["failed_at"])),
                     None)
        if match is None:
            remaining.append(row)
            continue
        taken.add(match.id)
        values = {k: row[k] for k in DLQ_FIELDS}
        values["reason"] = row["reason"] or None
        values["consumer"] = match.consumer or row["consumer"]
        values["deliveries"] = row["deliveries"] if row["deliveries"] is not None else match.deliveries
        values["failed_at"] = row["failed_at"] or match.failed_at
        values["sources"] = "dlq,advisory"
        values["updated_at"] = row["received_at"]
        if values["reason"] is None:
            values.pop("reason")
        merged.append((match, values, group_of(row["original_subject"], values.get("reason", match.reason),
                                               row["group_key"])))
    # The DLQ copy's error decides the group: the entry moves from its advisory's group.
    ids = group_ids(conn, {group for _, _, group in merged}, made=new_groups, teams=teams, source=source)
    for match, values, group in merged:
        conn.execute(update(ENTRIES).where(ENTRIES.c.id == match.id)
                     .values(**values, group_id=ids[group], version=ENTRIES.c.version + 1))
    fill_key_fields(conn, ids=[match.id for match, _, _ in merged])  # their payload is the DLQ copy's
    count_changes(conn, [Change(match.group_id, ids[group], match.received_at, match.status, match.status)
                         for match, _, group in merged])
    moves = [(match.group_id, ids[group]) for match, _, group in merged if ids[group] != match.group_id]
    retire_emptied(conn, {old for old, _ in moves}, new_groups)  # announced from the group it joined
    return remaining, Counter(new for _, new in moves)


#: How far apart a DLQ copy and an advisory of one message may say it failed and still be one
#: failure: the consumer dead-letters and terminates a message in one handling, seconds apart. A
#: message that fails again later (redelivered, or a stream recreated since, its sequences
#: starting again) is a new failure, and a new entry.
SAME_FAILURE = timedelta(hours=1)


def same_failure(first: datetime | None, second: datetime | None) -> bool:
    """Whether two reports of one message (a DLQ copy, an advisory) tell one failure by when."""
    return first is None or second is None or abs(first - second) <= SAME_FAILURE




def retire_emptied(conn: Connection, group_ids: set[int], new_groups: set[int] | None = None) -> int:
    """Settle the groups entries moved out of (a DLQ copy joining its advisory's entry, a
    regrouping revision): one left empty loses its alerts not sent yet, and goes when nothing was
    done with it (forget_untouched); how many went."""
    withdraw_emptied(conn, group_ids)
    return forget_untouched(conn, group_ids, new_groups)


def forget_untouched(conn: Connection, group_ids: set[int], new_groups: set[int] | None = None) -> int:
    """Delete those of ``group_ids`` that hold no entry and nothing was done with: still ``open``
    and unassigned, no activity, no alert kept (withdraw_emptied took those not sent). A later
    failure of their kind makes the group again, new, and announced. How many went."""
    if not group_ids:
        return 0
    has_activity = select(GroupActivity.group_id).where(GroupActivity.group_id == GROUPS.c.id).exists()
    has_alert = select(Alert.group_id).where(Alert.group_id == GROUPS.c.id).exists()
    gone = [row.id for row in conn.execute(select(GROUPS.c.id).where(
        GROUPS.c.id.in_(sorted(group_ids)), GROUPS.c.open_count == 0, GROUPS.c.republished_count == 0,
        GROUPS.c.closed_count == 0, GROUPS.c.state == "open", GROUPS.c.assignee.is_(None), ~has_activity,
        ~has_alert))]
    if gone:
        conn.execute(delete(ARRIVALS).where(ARRIVALS.c.group_id.in_(gone)))
        conn.execute(delete(GROUPS).where(GROUPS.c.id.in_(gone)))
        if new_groups is not None:
            new_groups.difference_update(gone)
    return len(gone)
