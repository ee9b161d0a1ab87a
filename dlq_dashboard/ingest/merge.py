"""A DLQ copy joining the entry its failure's advisory made first (the mirror may read the
advisory stream ahead of the DLQ stream): the copy's fields and error decide the entry, and it moves
to the copy's failure group. For that group it is a new failure (what it counts toward: a spike, a
regression, an ignore's count; its first and last seen), and for the advisory's group it never was
one: what it did to its triage state is undone (db/triage.py undo_passing: it counts toward no
ignore, and a regression or a reopening it alone made, not announced yet, is taken back, as is a
spike not announced yet that it was needed for: alerts/outbox.py withdraw_passed_spikes). Left
empty, that group is as if it had never been: its alerts not sent yet are withdrawn, and the group
itself goes when nothing was done with it (a failure of its kind later is new again, and announced).

Where the copy is silent, what the advisory knew stays, whichever of the two came first
(``joined``, ``advisory_confirms``): the failure's time (the advisory's, unless the copy gives
Dlq-Failed-At: without it the copy's time is only when the DLQ stream stored it), the original
msgId, the Dlq-Replay-Of link, and the original message's headers the copy does not carry. The
copy's subject, error and reason choose the group, so they stay the copy's (no reason when it
gives none), whichever of the two came first."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, select, update

from dlq_consumer.headers import carried

from ..alerts.outbox import ADVISORY_HOLD, withdraw_emptied, withdraw_passed_spikes
from ..db.counts import Change, count_changes, group_ids, group_of
from ..db.models import Alert, Arrival, Entry, FailureGroup, GroupActivity
from ..db.triage import undo_passing
from ..scopes import DEFAULT_SOURCE
from ..surrogates import dumps_kept, loads_kept
from ..teams import Team
from ..times import utcnow
from .key_fields import fill_key_fields
from .parse import H_ORIGINAL_MSG_ID, H_ORIGINAL_SUBJECT, H_REPLAY_OF, NO_SUBJECT, Advisory, given_failed_at

ENTRIES, GROUPS, ARRIVALS = Entry.__table__, FailureGroup.__table__, Arrival.__table__

# Columns a DLQ copy brings to an entry first made from an advisory, as it gives them.
DLQ_FIELDS = ("dlq_stream", "dlq_epoch", "dlq_seq", "error", "schema_errors", "payload", "payload_available",
              "payload_opaque", "notes")
# Columns the copy gives where it names them; where it is silent (null), what the advisory read
# from the source stream stays: a copy without Dlq-Original-Subject joining an advisory that read
# the message's subject can be republished (the group stays the copy's word, in either order).
KNOWN_FIELDS = ("original_subject", "original_msg_id", "replay_of")


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
    remaining, matched = [], []
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
        matched.append((match, row))
    if not matched:
        return remaining, Counter()
    # What the advisories read from their source stream, for the matches only (the candidates
    # may be many entries that wait for no copy of this batch).
    known = {r.id: r for r in conn.execute(
        select(Entry.id, Entry.headers, *(ENTRIES.c[name] for name in KNOWN_FIELDS))
        .where(Entry.id.in_([match.id for match, _ in matched])))}
    merged = []
    for match, row in matched:
        values = joined(row, match, known[match.id])
        merged.append((match, values, group_of(row["original_subject"], values["reason"],
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
    left: dict[int, list[datetime]] = {}
    for match, _, group in merged:
        if ids[group] != match.group_id:
            left.setdefault(match.group_id, []).append(match.received_at)
    undo_passing(conn, left, utcnow(), ADVISORY_HOLD)  # the failure was never the advisory group's
    withdraw_passed_spikes(conn, left)  # nor counted toward its spike
    retire_emptied(conn, {old for old, _ in moves}, new_groups)  # announced from the group it joined
    return remaining, Counter(new for _, new in moves)


def joined(row: dict, match: Any, known: Any) -> dict:
    """The columns of the entry ``match`` (an advisory's, ``known`` its headers and KNOWN_FIELDS)
    that its DLQ copy ``row`` (parse.py) sets: the copy's word where it gives one."""
    values = {k: row[k] for k in DLQ_FIELDS}
    values.update({k: row[k] if row[k] is not None else getattr(known, k) for k in KNOWN_FIELDS})
    if row["original_subject"] is None and values["original_subject"] is not None:
        values["notes"] = without_note(values["notes"], NO_SUBJECT)
    # The copy's reason, with its subject and error, chooses the group, none when it gives none:
    # an advisory confirming a copy that came first changes no group, so the other order does not.
    values["reason"] = row["reason"] or None
    values["consumer"] = match.consumer or row["consumer"]
    values["deliveries"] = row["deliveries"] if row["deliveries"] is not None else match.deliveries
    # The advisory's time is when JetStream saw the failure; a copy without Dlq-Failed-At tells
    # only when the DLQ stream stored it (seconds or more later: a service may dead-letter late).
    values["failed_at"] = row["failed_at"] if row["failed_at_given"] or match.failed_at is None else match.failed_at
    values["headers"] = with_original_headers(row["headers"], loads_kept(known.headers or "{}"))
    values["sources"] = "dlq,advisory"
    # The timeline tells the copy when it came (received_at stays the advisory's, the entry's arrival).
    values["updated_at"] = values["dlq_received_at"] = row["received_at"]
    return values


def without_note(notes: str, note: str) -> str:
    """An entry's notes (a JSON list) without ``note``."""
    return json.dumps([n for n in json.loads(notes or "[]") if n != note], ensure_ascii=False)


def with_original_headers(copy: str, original: dict[str, list[str]]) -> str:
    """A DLQ copy's headers (JSON text: name -> values) and, after them, each header of the
    original message (as its advisory read it from the source stream) that the contract carries
    but this copy does not (names compared case-insensitively): the copy's values where it has the name."""
    if not original:
        return copy
    headers = loads_kept(copy or "{}")  # values with bytes that are not UTF-8 kept (surrogates.py)
    names = {name.lower() for name in headers}
    missing = {name: values for name, values in original.items() if carried(name) and name.lower() not in names}
    return dumps_kept({**headers, **missing}) if missing else copy


def advisory_confirms(conn: Connection, match: Any, advisory: Advisory, original: dict[str, list[str]],
                      named: dict[str, str]) -> None:
    """An advisory confirming the failure its DLQ copy (the entry ``match``) told first: its
    provenance, and what the copy left unsaid as ``joined`` keeps it the other way round: the
    advisory's time without a Dlq-Failed-At, the original msgId and Dlq-Replay-Of (``named``:
    those the source stream's message holds), its headers the copy does not carry (``original``)."""
    stored = conn.execute(select(Entry.headers, Entry.notes, *(ENTRIES.c[name] for name in KNOWN_FIELDS))
                          .where(Entry.id == match.id)).one()
    values: dict[str, Any] = {}
    # As the parse read it: the copy's failed_at is its Dlq-Failed-At, or else when it was stored.
    if given_failed_at(loads_kept(stored.headers or "{}")) is None and match.failed_at != advisory.at:
        values["failed_at"] = advisory.at
    for name, header in (("original_subject", H_ORIGINAL_SUBJECT), ("original_msg_id", H_ORIGINAL_MSG_ID),
                         ("replay_of", H_REPLAY_OF)):
        if getattr(stored, name) is None and named.get(header) is not None:
            values[name] = named[header]
    if "original_subject" in values:  # the copy said it could not be republished: now it can
        values["notes"] = without_note(stored.notes, NO_SUBJECT)
    headers = with_original_headers(stored.headers, original)
    if headers != stored.headers:
        values["headers"] = headers
    # Provenance alone is not something an operator must have seen: the version (and any open
    # form) stays. What the copy left unsaid is (a republish sends these headers): a new version.
    if values:
        values["version"] = ENTRIES.c.version + 1
    conn.execute(update(ENTRIES).where(ENTRIES.c.id == match.id).values(
        consumer=match.consumer or advisory.consumer,
        deliveries=match.deliveries if match.deliveries is not None else advisory.deliveries,
        sources="dlq,advisory", updated_at=utcnow(), **values))


#: How far apart a DLQ copy and an advisory of one message may say it failed and still be one
#: failure: the consumer dead-letters and terminates a message in one handling, seconds apart. A
#: message that fails again later (redelivered, or a stream recreated since, its sequences
#: starting again) is a new failure, and a new entry.
SAME_FAILURE = timedelta(hours=1)


def same_failure(first: datetime | None, second: datetime | None) -> bool:
    """Whether two reports of one message (a DLQ copy, an advisory) tell one failure by when."""
    return first is None or second is None or abs(first - second) <= SAME_FAILURE


#: Groups settled in one statement: a regrouping revision may leave thousands, and each is a
#: bound parameter (PostgreSQL takes 65,535 a statement, SQLite 32,766).
SETTLED_AT_ONCE = 500


def retire_emptied(conn: Connection, group_ids: set[int], new_groups: set[int] | None = None) -> int:
    """Settle the groups entries moved out of (a DLQ copy joining its advisory's entry, a
    regrouping revision): one left empty loses its alerts not sent yet, and goes when nothing was
    done with it (forget_untouched); how many went."""
    ordered, gone = sorted(group_ids), 0
    for start in range(0, len(ordered), SETTLED_AT_ONCE):
        chunk = set(ordered[start:start + SETTLED_AT_ONCE])
        withdraw_emptied(conn, chunk)
        gone += forget_untouched(conn, chunk, new_groups)
    return gone


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
