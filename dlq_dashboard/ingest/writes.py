"""The mirror's writes: DLQ messages and advisories become entries and history, with the
stream position committed in the same transaction (commit first, then move on)."""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from operator import itemgetter
from typing import Callable, Iterable

from sqlalchemy import Connection, Engine, func, insert, or_, select, update

from ..alerts.outbox import ADVISORY_HOLD, AlertRule, raise_alerts
from ..db.counts import Change, count_changes, group_ids, group_of
from ..db.engine import write_transaction
from ..db.models import Entry, Event, MirrorState
from ..db.rows import insert_rows
from ..db.triage import apply_arrivals
from ..masking import Mask
from ..scopes import DEFAULT_SOURCE
from ..surrogates import dumps_kept, shown
from ..teams import Team
from ..times import utcnow
from .apart import kept_apart, reason_of, transient
from .grouping import error_group
from .key_fields import fill_key_fields
from .merge import advisory_confirms, merge_into_advisory_entries, same_failure
from .search_index import index_new_entries
from .parse import (H_NATS_MSG_ID, H_ORIGINAL_MSG_ID, H_ORIGINAL_SUBJECT, H_REPLAY_OF, Advisory, entry_from_dlq_message,
                    normalize_headers, within_columns)

log = logging.getLogger(__name__)

ENTRIES = Entry.__table__
EVENTS = Event.__table__


@dataclass(frozen=True)
class StreamMessage:
    """What the mirror keeps of one stream message."""

    seq: int
    subject: str
    headers: dict | None
    data: bytes
    stored_at: datetime | None


# --- position ---------------------------------------------------------------------------------

def read_position(engine: Engine, stream: str, source: str = DEFAULT_SOURCE) -> tuple[str | None, int]:
    """The (epoch, last sequence) the mirror has committed for a stream of ``source``."""
    with engine.connect() as conn:
        row = conn.execute(select(MirrorState.epoch, MirrorState.last_seq)
                           .where(MirrorState.source == source, MirrorState.stream == stream)).first()
    return (row[0], row[1]) if row else (None, 0)


class OutOfOrder(RuntimeError):
    """A batch follows one that was not committed: writing it would skip that one's messages."""


def _check_position(conn: Connection, source: str, stream: str, epoch: str, after: int | None) -> None:
    # Batches may be sent to the writer before the one they follow is committed. If that one
    # failed, this one must not commit: its position would move past messages never stored.
    if after is None:
        return
    # Locked (on PostgreSQL) until the commit: a takeover (take_over_position) waits for this write.
    row = conn.execute(select(MirrorState.epoch, MirrorState.last_seq).with_for_update()
                       .where(MirrorState.source == source, MirrorState.stream == stream)).first()
    stored = row.last_seq if row is not None and row.epoch == epoch else 0
    if stored != after:
        raise OutOfOrder(f"{stream}: the batch follows sequence {after}, the database is at {stored}")


def _save_position(conn: Connection, source: str, stream: str, epoch: str, last_seq: int) -> None:
    table = MirrorState.__table__
    done = conn.execute(update(table).where(table.c.source == source, table.c.stream == stream)
                        .values(epoch=epoch, last_seq=last_seq, updated_at=utcnow()))
    if done.rowcount == 0:
        conn.execute(insert(table).values(source=source, stream=stream, epoch=epoch, last_seq=last_seq,
                                          updated_at=utcnow()))


def reset_position(engine: Engine, stream: str, epoch: str, source: str = DEFAULT_SOURCE) -> None:
    """Start a recreated stream (a new epoch) from its beginning, keeping every old entry."""
    with write_transaction(engine) as conn:
        _save_position(conn, source, stream, epoch, 0)


# --- DLQ messages -----------------------------------------------------------------------------

def dlq_rows(stream: str, epoch: str, messages: list[StreamMessage], source: str = DEFAULT_SOURCE) -> list[dict]:
    """The entries' column values of a batch of DLQ messages (parsing never raises): the part of a
    write that needs no database, done before its transaction."""
    now = utcnow()
    rows = [_parsed(stream, epoch, m, now) for m in messages]
    for row in rows:
        row["source"] = source
    return rows


def _parsed(stream: str, epoch: str, m: StreamMessage, now: datetime) -> dict:
    try:
        return entry_from_dlq_message(stream=stream, epoch=epoch, seq=m.seq, headers=m.headers, payload=m.data,
                                      stored_at=m.stored_at, received_at=now)
    except Exception as exc:  # what the parse did not foresee must not stop the mirror: kept apart
        log.warning("%s sequence %s kept apart: its headers could not be read (%s)", stream, m.seq, reason_of(exc))
        row = entry_from_dlq_message(stream=stream, epoch=epoch, seq=m.seq, headers=None, payload=m.data,
                                     stored_at=m.stored_at, received_at=now)
        try:
            row["headers"] = json.dumps(normalize_headers(m.headers))
        except Exception:  # noqa: BLE001 - the headers are in the stream; the note says where
            return kept_apart(row, exc, unread=True, headers_lost=True)
        return kept_apart(row, exc, unread=True)


def dlq_values(stream: str, epoch: str, messages: list[StreamMessage],
               source: str = DEFAULT_SOURCE) -> tuple[tuple[str, ...], list[tuple]]:
    """``dlq_rows`` as column names and one tuple a row, for a pipe: a fraction of pickling a dict a row."""
    rows = dlq_rows(stream, epoch, messages, source)
    if not rows:
        return (), []
    names = tuple(rows[0])  # the columns of an entry and its source: many, so itemgetter gives tuples
    return names, list(map(itemgetter(*names), rows))


def ingest_dlq_batch(engine: Engine, stream: str, epoch: str, messages: list[StreamMessage],
                     after: int | None = None, alerts: AlertRule | None = None, teams: tuple[Team, ...] = (),
                     source: str = DEFAULT_SOURCE) -> int:
    """Store a batch of DLQ messages and the stream position after it, in one transaction;
    with ``after``, only if the database's position is that sequence (OutOfOrder otherwise).
    With ``alerts``, the alerts the batch raises are written in that transaction too; a group it
    makes is given its team of ``teams`` (DLQ_TEAMS). The entries, groups and position are of
    ``source`` (SPEC section 12).

    Returns how many new entries were made. A message already stored (same source, stream, epoch
    and sequence) is skipped; a failure an advisory already reported is merged into its entry.
    """
    if not messages:
        return 0
    return ingest_dlq_rows(engine, stream, epoch, dlq_rows(stream, epoch, messages, source),
                           max(m.seq for m in messages), after, alerts, teams, source)


def ingest_dlq_rows(engine: Engine, stream: str, epoch: str, rows: list[dict], last_seq: int,
                    after: int | None = None, alerts: AlertRule | None = None, teams: tuple[Team, ...] = (),
                    source: str = DEFAULT_SOURCE) -> int:
    """``ingest_dlq_batch`` of a batch already parsed (``dlq_rows``), ``last_seq`` the stream
    sequence of its last message: the mirror parses in the dashboard's process, so the writer's
    one interpreter only writes."""
    if not rows:
        return 0
    return _apart_if_refused(partial(_write_dlq_rows, engine, stream, epoch, rows, last_seq, after, alerts, teams,
                                     source), stream, last_seq)


def _apart_if_refused(write: Callable[..., int], stream: str, last_seq: int) -> int:
    """``write(apart=False)``; if the database refuses what it writes (apart.py), ``write(apart=True)``:
    the batch again, a message at a time."""
    try:
        return write(apart=False)
    except Exception as exc:
        if isinstance(exc, OutOfOrder) or transient(exc):
            raise
        log.warning("%s: a batch up to sequence %s could not be written (%s); writing it message by message",
                    stream, last_seq, reason_of(exc))
        return write(apart=True)


def _write_dlq_rows(engine: Engine, stream: str, epoch: str, rows: list[dict], last_seq: int, after: int | None,
                    alerts: AlertRule | None, teams: tuple[Team, ...], source: str, *, apart: bool) -> int:
    now = utcnow()
    with write_transaction(engine) as conn:
        _check_position(conn, source, stream, epoch, after)
        # The groups this batch makes, when alerts are on (finding them costs a query).
        new_groups: set[int] | None = set() if alerts is not None else None
        if apart:
            made, arrived = _rows_one_by_one(conn, rows, new_groups, teams, source)
        else:
            made, arrived = _write_rows(conn, rows, new_groups, teams, source)
        # Triage: a resolved group failing again regresses, an ignored one counts (db/triage.py).
        moved = apply_arrivals(conn, arrived, now, _stored(rows))
        if alerts is not None:
            raise_alerts(conn, alerts, new_groups, arrived, now, moved)
        _save_position(conn, source, stream, epoch, last_seq)
    return max(made, 0)


def _stored(rows: list[dict]) -> dict[int, datetime]:
    """{group: when the DLQ stream stored the latest of the batch's rows it took} (a row kept
    apart in another group is left out: that group is judged by the write's time)."""
    latest: dict[int, datetime] = {}
    for row in rows:
        at, group_id = row.get("stored_at") or row["failed_at"], row.get("group_id")
        if group_id is not None and at is not None and (group_id not in latest or at > latest[group_id]):
            latest[group_id] = at
    return latest


def _write_rows(conn: Connection, rows: list[dict], new_groups: set[int] | None, teams: tuple[Team, ...],
                source: str) -> tuple[int, dict[int, int]]:
    """Insert (or merge) ``rows`` in ``conn``'s transaction: (entries made, arrivals by group)."""
    ids = group_ids(conn, {_group_of(r) for r in rows}, made=new_groups, teams=teams, source=source)
    for row in rows:
        row["group_id"] = ids[_group_of(row)]
    # A copy joining its advisory's entry moves it: a new failure of the group it moves to.
    rows, moved_in = merge_into_advisory_entries(conn, rows, new_groups, teams, source)
    if not rows:
        return 0, dict(moved_in)
    newest = conn.execute(select(func.coalesce(func.max(Entry.id), 0))).scalar()
    opaque = any(r["payload_opaque"] for r in rows)
    made = insert_rows(conn, ENTRIES, rows, names=_COLUMNS + ["payload_opaque"] if opaque else _COLUMNS,
                       skip_duplicates=True)
    index_new_entries(conn, newest)  # in the writer process the search pass does it, behind
    fill_key_fields(conn, newest)
    if made == len(rows):  # every row is a new entry: counted as they are
        return made, dict(moved_in + Counter(count_changes(conn, [
            Change(None, group_id, received_at, None, status, n) for (group_id, received_at, status), n in Counter(
                (r["group_id"], r["received_at"], r["status"]) for r in rows).items()])))
    return made, dict(moved_in + Counter(count_new_entries(conn, newest)))


def _rows_one_by_one(conn: Connection, rows: list[dict], new_groups: set[int] | None, teams: tuple[Team, ...],
                     source: str) -> tuple[int, Counter]:
    """``_write_rows`` a row at a time, each in a savepoint: a row the database refuses is written
    kept apart (apart.py), then bare; one refused even so raises, and its batch stays unwritten."""
    made, arrived = 0, Counter()
    for row in rows:
        one, counts = _row_or_kept_apart(conn, row, new_groups, teams, source)
        made += one
        arrived.update(counts)
    return made, arrived


def _row_or_kept_apart(conn: Connection, row: dict, new_groups: set[int] | None, teams: tuple[Team, ...],
                       source: str) -> tuple[int, dict[int, int]]:
    def write(attempt: Callable[[BaseException | None], dict]):
        return lambda groups, refusal: _write_rows(conn, [attempt(refusal)], groups, teams, source)

    try:
        written, refusal = _first_accepted(conn, new_groups, [
            write(lambda _: row), write(lambda refusal: kept_apart(row, refusal)),
            write(lambda refusal: kept_apart(row, refusal, bare=True))])
    except AllRefused as refused:
        raise refused.first
    if refusal is not None:
        log.warning("%s sequence %s kept apart: %s", row["dlq_stream"], row["dlq_seq"], reason_of(refusal))
    return written


class AllRefused(Exception):
    """Every try of ``_first_accepted`` was refused by the database; ``first`` is the first refusal."""

    def __init__(self, first: BaseException):
        super().__init__(str(first))
        self.first = first


def _first_accepted(conn: Connection, new_groups: set[int] | None, tries: list[Callable]) -> tuple:
    """Each of ``tries`` in turn, in a savepoint, until the database accepts one: (its result, the
    first refusal or None). A try is given the set of groups it may fill (merged into
    ``new_groups`` only if accepted: a savepoint rolled back makes no group) and the first
    refusal. A refusal for the database's state raises at once; every try refused raises AllRefused."""
    refusal = None
    for attempt in tries:
        groups = set() if new_groups is not None else None
        try:
            with conn.begin_nested():
                result = attempt(groups, refusal)
        except Exception as exc:
            if transient(exc):
                raise
            refusal = refusal or exc
            continue
        if new_groups is not None:
            new_groups |= groups
        return result, refusal
    raise AllRefused(refusal)


def _group_of(row: dict) -> tuple[str, str, str]:
    return group_of(row["original_subject"], row["reason"], row["group_key"])


def count_new_entries(conn: Connection, after_id: int) -> dict[int, int]:
    """Count entries with an id above ``after_id`` in their groups (db/counts.py), in ``conn``'s
    transaction; return how many each group received. Every code path that inserts entries calls it."""
    # Counted by the database: a batch's entries share a few (group, time, status) values.
    columns = (ENTRIES.c.group_id, ENTRIES.c.received_at, ENTRIES.c.status)
    return count_changes(conn, [Change(None, group_id, received_at, None, status, n) for group_id, received_at, status, n
                         in conn.execute(select(*columns, func.count()).where(ENTRIES.c.id > after_id)
                                         .group_by(*columns))])


# The mirror's hot path: on SQLite one multi-row INSERT a chunk, which skips SQLAlchemy's
# per-row parameter processing and gives the GIL up once a statement, not once a row.
# A DLQ message inserted is its entry's first report: dlq_received_at is the merge's (merge.py).
# payload_opaque is named only for a batch holding such a payload: the column's default is false.
_COLUMNS = [c.name for c in ENTRIES.columns if c.name not in ("id", "dlq_received_at", "payload_opaque")]


# --- advisories -------------------------------------------------------------------------------

@dataclass(frozen=True)
class FetchedMessage:
    """The failed message as read back from its source stream by sequence (None if gone)."""

    subject: str
    headers: dict | None
    data: bytes


def ingest_advisory_batch(engine: Engine, stream: str, epoch: str,
                          items: Iterable[tuple[Advisory, FetchedMessage | None, str | None]],
                          last_seq: int, after: int | None = None, alerts: AlertRule | None = None,
                          teams: tuple[Team, ...] = (), source: str = DEFAULT_SOURCE) -> int:
    """Store advisories (history, and entries for terminal ones) and the position, in one
    transaction; with ``alerts``, the alerts they raise too; a group made gets its team of ``teams``.

    ``items`` pairs each advisory with the failed message fetched from its stream (or None
    and a sentence saying why it could not be). Returns how many new entries were made.
    """
    return _apart_if_refused(partial(_write_advisories, engine, stream, epoch, list(items), last_seq, after, alerts,
                                     teams, source), stream, last_seq)


def _write_advisories(engine: Engine, stream: str, epoch: str, items: list, last_seq: int, after: int | None,
                      alerts: AlertRule | None, teams: tuple[Team, ...], source: str, *, apart: bool) -> int:
    made = 0
    new_groups: set[int] | None = set() if alerts is not None else None
    arrived: Counter[int] = Counter()
    with write_transaction(engine) as conn:
        _check_position(conn, source, stream, epoch, after)
        first_new = conn.execute(select(func.coalesce(func.max(Entry.id), 0))).scalar()
        for advisory, fetched, missing_reason in items:
            if not apart:
                made += _advisory(conn, advisory, fetched, missing_reason, new_groups, arrived, teams, source)
                continue
            # As _rows_one_by_one: each in a savepoint; the failed message read again from its
            # stream is the likely cause, so it is left there, then the advisory is skipped.
            def store(message: FetchedMessage | None):
                def attempt(groups, refusal):
                    why = missing_reason if refusal is None else (
                        f"The database refused the failed message as read from {advisory.stream} "
                        f"({reason_of(refusal)}): it is there at sequence {advisory.stream_seq}.")
                    counts: Counter[int] = Counter()
                    return _advisory(conn, advisory, message, why, groups, counts, teams, source), counts
                return attempt

            try:
                (one, counts), _ = _first_accepted(conn, new_groups, [store(fetched), store(None)])
            except AllRefused as refused:
                log.warning("%s: advisory %s (%s sequence %s) skipped, the database refused it: %s", stream,
                            advisory.id, advisory.stream, advisory.stream_seq, reason_of(refused.first))
                continue
            made += one
            arrived.update(counts)
        now = utcnow()
        # An advisory's entry failed when JetStream reported it (its failed_at).
        reported = dict(conn.execute(select(Entry.group_id, func.max(Entry.failed_at))
                                     .where(Entry.id > first_new).group_by(Entry.group_id)).all())
        moved = apply_arrivals(conn, arrived, now, reported)
        if alerts is not None:
            raise_alerts(conn, alerts, new_groups, arrived, now, moved, hold=ADVISORY_HOLD)
        _save_position(conn, source, stream, epoch, last_seq)
    return made


def _advisory(conn: Connection, advisory: Advisory, fetched: FetchedMessage | None, missing_reason: str | None,
              new_groups: set[int] | None, arrived: Counter, teams: tuple[Team, ...], source: str) -> int:
    """Store one advisory's history and, for a terminal one, its entry; how many entries it made."""
    stored = insert_rows(conn, EVENTS, [{
        "original_stream": advisory.stream, "original_seq": advisory.stream_seq,
        "consumer": advisory.consumer, "kind": advisory.kind, "deliveries": advisory.deliveries,
        "at": advisory.at, "source_key": f"advisory:{source}:{advisory.id}", "source": source,
        "detail": json.dumps({"reason": advisory.reason} if advisory.reason else {})}],
        skip_duplicates=True)
    if not stored or advisory.kind == "nak":
        return 0  # stored before (a replay after a crash), or history only
    return _entry_from_advisory(conn, advisory, fetched, missing_reason, new_groups, arrived, teams, source)


def _advisory_error(advisory: Advisory) -> str:
    if advisory.reason:
        return advisory.reason
    if advisory.kind == "max_deliveries":
        return f"Reached the consumer's maximum of {advisory.deliveries} deliveries."
    return "Terminated by the consumer (no reason given)."


def _told_by_an_advisory(existing: list, advisory: Advisory):
    """The open entry (of ``existing``, newest first) whose failure a terminal advisory of the
    same consumer already told, about when this one failed: this advisory tells it again. One
    closed or republished since, or of long ago, is of an earlier failure (the message failing
    again after a consumer or stream was recreated): the advisory is a new entry."""
    return next((e for e in existing if "advisory" in e.sources.split(",") and e.status == "open"
                 and e.consumer == advisory.consumer and same_failure(e.failed_at, advisory.at)), None)


def _entry_from_advisory(conn: Connection, advisory: Advisory, fetched: FetchedMessage | None,
                         missing_reason: str | None, new_groups: set[int] | None, arrived: Counter,
                         teams: tuple[Team, ...] = (), source: str = DEFAULT_SOURCE) -> int:
    """Merge a terminal advisory into the entry of its DLQ copy, or make an entry of it."""
    existing = conn.execute(
        select(Entry.id, Entry.consumer, Entry.deliveries, Entry.sources, Entry.failed_at, Entry.status)
        .where(Entry.original_stream == advisory.stream, Entry.original_seq == advisory.stream_seq,
               Entry.source == source, or_(Entry.consumer.is_(None), Entry.consumer == advisory.consumer))
        .order_by(Entry.id.desc())
    ).all()
    # The DLQ copy of this failure (one no advisory has confirmed yet, failed about when this did).
    # An entry an advisory made or confirmed is of an earlier failure of the message (after a
    # redelivery, or of a stream since recreated whose sequences start again): this is a new one.
    match = next((e for e in existing if "advisory" not in e.sources.split(",")
                  and same_failure(e.failed_at, advisory.at)), None)
    if match is None and (told := _told_by_an_advisory(existing, advisory)) is not None:
        # Another terminal advisory of the failure an advisory already told: JetStream terminates
        # a pending message that is deleted ("Unacknowledged message was deleted"), then the
        # consumer's own TERM of it follows. One failure, one entry: it keeps what the first
        # report said, and this advisory is an event of its timeline (stored above).
        conn.execute(update(ENTRIES).where(ENTRIES.c.id == told.id).values(
            deliveries=max(told.deliveries or 0, advisory.deliveries or 0) or told.deliveries, updated_at=utcnow()))
        return 0
    notes: list[str] = []
    headers = normalize_headers(fetched.headers if fetched else None, notes)
    # The fetched message's subject and headers are as its producer wrote them: each kept as
    # its column holds it (parse.within_columns), the group named as it is stored.
    named = within_columns({H_ORIGINAL_SUBJECT: fetched.subject if fetched else None, H_REPLAY_OF: next(
        (shown(v[0]) for k, v in headers.items() if k.lower() == H_REPLAY_OF and v), None), H_ORIGINAL_MSG_ID: next(
        (shown(v[0]) for k, v in headers.items() if k.lower() == H_NATS_MSG_ID and v), None)}, notes)
    if match is not None:
        # The advisory confirms a failure its DLQ copy already told (merge.py).
        advisory_confirms(conn, match, advisory, headers, named)
        return 0
    now = utcnow()
    error = _advisory_error(advisory)
    if fetched is None:
        notes.append(missing_reason or "The source stream no longer has this message.")
    group = group_of(named.get(H_ORIGINAL_SUBJECT), advisory.kind, error_group(error, None))
    newest = conn.exec_driver_sql("SELECT COALESCE(MAX(id), 0) FROM entries").scalar()
    conn.execute(insert(ENTRIES).values(
        status="open", version=1, dlq_stream=None, dlq_epoch=None, dlq_seq=None,
        original_subject=named.get(H_ORIGINAL_SUBJECT),
        original_stream=advisory.stream, original_seq=advisory.stream_seq, consumer=advisory.consumer,
        original_msg_id=named.get(H_ORIGINAL_MSG_ID),
        reason=advisory.kind, error=error, schema_errors=None,
        group_id=group_ids(conn, [group], made=new_groups, teams=teams, source=source)[group], source=source,
        deliveries=advisory.deliveries, failed_at=advisory.at, received_at=now,
        headers=dumps_kept(headers), payload=fetched.data if fetched else b"",
        payload_available=fetched is not None, replay_of=named.get(H_REPLAY_OF), sources="advisory",
        notes=json.dumps(notes), updated_at=now,
        **({"payload_opaque": True} if fetched is not None and Mask.hides_whole(fetched.data) else {})))
    index_new_entries(conn, newest)
    fill_key_fields(conn, newest)
    arrived.update(count_new_entries(conn, newest))
    return 1
