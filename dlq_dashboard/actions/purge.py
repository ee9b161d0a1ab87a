"""Retention: resolved entries older than DLQ_RETENTION go, with their delivery history, their
search index, their republish records and their DLQ stream messages; the audit stays.

An entry's age is counted from when it was resolved (``updated_at``, set by the close or the
republish that resolved it, or by any later change), so an entry received long ago and closed
today is kept for the whole retention after today. Open entries are never purged, nor an entry
with a republish or a bulk item still pending.

Each batch deletes its DLQ stream messages first and its rows second: a crash in between leaves
rows whose message is gone (the next run finds it "already gone"), never a message nobody can
find any more. A message NATS cannot delete now (it is down) keeps its entry for the next run.
The rows are checked again under the write lock, so an entry reopened or republished while its
batch's messages were being deleted is kept, but without its DLQ message (the window is the
deletes of one batch, milliseconds to a second).

A run holds a lease, ``purge:<its record's id>``, made with its record and renewed as it goes:
a run killed mid-batch leaves its record unfinished, and the next run, finding no live holder of
that lease, closes the record and writes the audit record saying the run was interrupted and
what it had purged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable

import nats.errors
import nats.js.errors
from sqlalchemy import Connection, and_, delete, exists, func, insert, or_, select, tuple_, update

from ..actors import RETENTION
from ..alerts.outbox import forget_sent
from ..times import format_duration
from ..db.counts import ARRIVALS, GROUPS, WIDTHS, Change, bucket, count_changes
from ..db.failing import FailureLog
from ..db.triage import record_activity
from ..db.engine import read_transaction, retried_write, write_transaction
from ..db.leases import holder_alive, new_holder
from ..db.models import Action, Entry, Event, GroupActivity, Job, JobItem, Lease, Purge, Republish
from ..db.rows import UNCACHED, among
from ..nats.bridge import NatsUnavailable
from ..nats.streams import NotDeleted, delete_message, stream_epoch
from ..times import format_time, utcnow
from .bulk.jobs import FINISHED
from .context import ActionContext
from .publishing import nats_unreachable, of_source

log = logging.getLogger(__name__)

ENTRIES, EVENTS, INTENTS, ITEMS = Entry.__table__, Event.__table__, Republish.__table__, JobItem.__table__
PURGES, ACTIONS, JOBS, LEASES = Purge.__table__, Action.__table__, Job.__table__, Lease.__table__
ACTIVITY = GroupActivity.__table__
#: The statuses a purge may remove: resolved ones. Open entries are never purged.
RESOLVED = ("closed", "republished")
#: Entries a transaction: small enough that the mirror never waits long for the write lock.
BATCH = 2000
#: Stream deletes in flight at once.
DELETES_IN_FLIGHT = 256
#: A run's lease (``purge:<id>``) lasts this long unless renewed; a run renews it between its
#: batches at most every RENEW_EVERY seconds. A run whose lease ran out, or whose process on this
#: host is gone, cannot still be going: the next run tells it as interrupted.
RUN_LEASE = 600.0
RENEW_EVERY = 60.0


@dataclass
class PurgeReport:
    """What a purge removed (or, in a dry run, would remove)."""

    older_than: int
    statuses: tuple[str, ...]
    dry_run: bool = False
    purged: Counter = field(default_factory=Counter)  # status -> entries
    messages_deleted: int = 0
    # Entries kept for the next run: their DLQ message could not be deleted now.
    deferred: int = 0
    deferred_reason: str | None = None
    # Dry run: how many of the entries have a DLQ stream message to delete.
    with_messages: int = 0
    # Alerts delivered before the cutoff, removed with the entries (alerts/outbox.py forget_sent:
    # a kept group's activity keeps a row of each);
    # in a dry run, how many would be.
    alerts_removed: int = 0

    @property
    def total(self) -> int:
        return sum(self.purged.values())

    def to_dict(self) -> dict:
        return {"older_than": format_duration(self.older_than), "statuses": list(self.statuses),
                "dry_run": self.dry_run, "purged": {s: self.purged.get(s, 0) for s in self.statuses},
                "total": self.total, "messages_deleted": self.messages_deleted, "deferred": self.deferred,
                "deferred_reason": self.deferred_reason, "alerts_removed": self.alerts_removed}


def _unfinished():
    """Entries a purge must leave: a republish waiting for NATS's answer, an item a running bulk
    job has still to do (a cancelled job's untouched items stay pending for good)."""
    running = select(JOBS.c.id).where(JOBS.c.state.not_in(FINISHED))
    return or_(exists().where(INTENTS.c.entry_id == ENTRIES.c.id, INTENTS.c.state == "pending"),
               exists().where(ITEMS.c.entry_id == ENTRIES.c.id, ITEMS.c.state == "pending",
                              ITEMS.c.job_id.in_(running)))


def _purgeable(status: str, cutoff: datetime):
    return and_(ENTRIES.c.status == status, ENTRIES.c.updated_at < cutoff, ~_unfinished())


def purge_entries(rt: ActionContext, *, older_than: int, actor: str, statuses: tuple[str, ...] = RESOLVED,
                  dry_run: bool = False, batch: int = BATCH, now: datetime | None = None,
                  stopping: Callable[[], bool] = lambda: False) -> PurgeReport:
    """Purge entries of ``statuses`` resolved more than ``older_than`` seconds ago, a batch a
    transaction, until done or ``stopping()``; with ``dry_run`` only count them. ValueError
    for an open status."""
    if not set(statuses) <= set(RESOLVED):
        raise ValueError("open entries are never purged: a purge takes republished or closed entries")
    if older_than <= 0:
        raise ValueError("a purge needs an age above zero")
    cutoff = (now or utcnow()) - timedelta(seconds=older_than)
    report = PurgeReport(older_than, tuple(statuses), dry_run)
    if dry_run:
        with read_transaction(rt.engine) as conn:
            for status in statuses:
                count, messages = conn.execute(select(func.count(), func.count(ENTRIES.c.dlq_seq))
                                               .where(_purgeable(status, cutoff))).one()
                report.purged[status] += count
                report.with_messages += messages
            report.alerts_removed = forget_sent(conn, cutoff, dry_run=True).count
        return report

    tell_interrupted(rt)
    purge_id: int | None = None
    holder, renew_at = new_holder(), time.monotonic() + RENEW_EVERY
    epochs: dict[tuple[str, str], str | None] = {}
    for status in statuses:
        after: tuple[datetime, int] | None = None
        while not stopping():
            # In the order they were resolved: a range of ix_entries_status_updated, no sort.
            query = (select(ENTRIES.c.id, ENTRIES.c.updated_at, ENTRIES.c.source, ENTRIES.c.dlq_stream,
                            ENTRIES.c.dlq_epoch, ENTRIES.c.dlq_seq)
                     .where(_purgeable(status, cutoff)).order_by(ENTRIES.c.updated_at, ENTRIES.c.id).limit(batch))
            if after is not None:
                query = query.where(tuple_(ENTRIES.c.updated_at, ENTRIES.c.id) > tuple_(*after))
            with read_transaction(rt.engine) as conn:
                rows = conn.execute(query).all()
            if not rows:
                break
            after = (rows[-1].updated_at, rows[-1].id)
            if purge_id is not None and time.monotonic() >= renew_at:
                _renew(rt, purge_id, holder)
                renew_at = time.monotonic() + RENEW_EVERY
            kept, deleted, reason = delete_messages(rt, [r for r in rows if r.dlq_stream and r.dlq_seq], epochs)
            report.messages_deleted += deleted
            if kept:
                report.deferred += len(kept)
                report.deferred_reason = reason
            ids = [r.id for r in rows if r.id not in kept]
            if ids:
                purge_id = _remove(rt, ids, status, cutoff, purge_id, actor, older_than, deleted, len(kept), report,
                                   holder)
    if not stopping():
        with write_transaction(rt.engine) as conn:
            forgotten = forget_sent(conn, cutoff)
            report.alerts_removed = forgotten.count
            if forgotten.failed_attempts:  # still counted by /metrics (a counter never goes down)
                if purge_id is None:
                    purge_id = _open_record(conn, holder, actor=actor, older_than=older_than,
                                            alert_attempts=forgotten.failed_attempts)
                else:
                    conn.execute(update(PURGES).where(PURGES.c.id == purge_id).values(
                        alert_attempts=PURGES.c.alert_attempts + forgotten.failed_attempts))
    if purge_id is not None:
        _finish(rt, purge_id, actor, report)
    return report


def delete_messages(rt: ActionContext, rows: list,
                    epochs: dict[tuple[str, str], str | None]) -> tuple[set[int], int, str | None]:
    """Delete these entries' DLQ stream messages, each through its source's NATS: (the ids whose
    message could not be deleted now, how many were deleted, why not). A message already gone,
    or in a stream since deleted or recreated (where its sequence names another message), counts
    as gone. A source whose NATS is unreachable keeps its rows for the next run; the others go on.
    ``epochs``: each (source, stream)'s epoch, as asked so far in this purge."""
    failed: set[int] = set()
    deleted, reasons = 0, []
    by_source: dict[str, list] = {}
    for row in rows:
        by_source.setdefault(row.source, []).append(row)
    for source, some in by_source.items():
        kept, done, reason = _delete_in(rt, source, some, epochs)
        failed |= kept
        deleted += done
        if reason:
            reasons.append(reason)
    return failed, deleted, "; ".join(reasons) or None


def _delete_in(rt: ActionContext, source: str, rows: list,
               epochs: dict[tuple[str, str], str | None]) -> tuple[set[int], int, str | None]:
    down = nats_unreachable(rt, source)
    if down:
        return {r.id for r in rows}, 0, down
    bridge = rt.bridge_for(source)

    async def delete_all() -> tuple[set[int], int]:
        js = bridge.js
        for name in {r.dlq_stream for r in rows} - {stream for known, stream in epochs if known == source}:
            try:
                epochs[(source, name)] = stream_epoch(await js.stream_info(name))
            except nats.js.errors.NotFoundError:
                epochs[(source, name)] = None
        failed: set[int] = set()
        deleted = 0
        window = asyncio.Semaphore(DELETES_IN_FLIGHT)

        async def delete_one(row) -> None:
            nonlocal deleted
            async with window:
                try:
                    # Already gone (removed by hand, by its limits, or by DLQ_DELETE_ON_CLOSE) counts as gone.
                    # Awaited first: `deleted += await ...` would read `deleted` before the await.
                    done = await delete_message(bridge.nc, js, row.dlq_stream, row.dlq_seq,
                                                rt.settings.request_timeout)
                except (nats.errors.Error, asyncio.TimeoutError, ValueError, NotDeleted):
                    failed.add(row.id)
                    return
                deleted += done

        await asyncio.gather(*(delete_one(r) for r in rows if epochs.get((source, r.dlq_stream)) is not None
                               and epochs[(source, r.dlq_stream)] == r.dlq_epoch))
        return failed, deleted

    try:
        failed, deleted = bridge.call(delete_all, rt.settings.request_timeout + 0.01 * len(rows))
    except NatsUnavailable as exc:
        return {r.id for r in rows}, 0, of_source(rt, source, str(exc))
    return failed, deleted, of_source(rt, source, "NATS did not delete their DLQ messages") if failed else None


def _remove(rt: ActionContext, ids: list[int], status: str, cutoff: datetime, purge_id: int | None, actor: str,
            older_than: int, deleted: int, deferred: int, report: PurgeReport, holder: str) -> int | None:
    """Delete the entries among ``ids`` that still qualify, with everything that is theirs alone,
    and take them out of the kept counts, in one transaction."""
    purge_id, removed = retried_write(rt.engine, lambda conn: _remove_in(conn, ids, status, cutoff, purge_id, actor,
                                                                         older_than, deleted, deferred, holder))
    report.purged[status] += removed
    return purge_id


def _remove_in(conn: Connection, ids: list[int], status: str, cutoff: datetime, purge_id: int | None, actor: str,
               older_than: int, deleted: int, deferred: int, holder: str) -> tuple[int | None, int]:
    # Run again if PostgreSQL aborts it as a deadlock's victim: the stream messages were deleted
    # before, so nothing but rows is done again. Its locks are taken in the order a bulk job's
    # recording takes them (entries, failure_groups by id, arrivals, jobs), so the two do not
    # wait for each other in a circle.
    conn = conn.execution_options(**UNCACHED)
    # Checked again under the write lock (a row lock on PostgreSQL): an entry reopened or
    # republished since it was read is not purged.
    query = (select(ENTRIES.c.id, ENTRIES.c.group_id, ENTRIES.c.received_at, ENTRIES.c.original_stream,
                    ENTRIES.c.original_seq)
             .where(among(conn, ENTRIES.c.id, ids), _purgeable(status, cutoff)))
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(of=ENTRIES)
    rows = conn.execute(query).all()
    if rows:
        gone = [r.id for r in rows]
        job_counts = _job_counts(conn, gone)  # read now: the items go with the entries
        conn.execute(delete(ITEMS).where(among(conn, ITEMS.c.entry_id, gone)))
        conn.execute(delete(INTENTS).where(among(conn, INTENTS.c.entry_id, gone)))
        # On SQLite a trigger takes each entry out of the search index too.
        conn.execute(delete(ENTRIES).where(among(conn, ENTRIES.c.id, gone)))
        _remove_history(conn, rows)
        count_changes(conn, [Change(group_id, None, at, status, None, n) for (group_id, at), n
                             in Counter((r.group_id, r.received_at) for r in rows).items()])
        _drop_empty_buckets(conn, rows)
        _move_first_seen(conn, {r.group_id for r in rows if r.group_id is not None})
        _keep_job_counts(conn, job_counts)  # jobs last, as a job's recording locks them
    counts = {"republished": len(rows) if status == "republished" else 0,
              "closed": len(rows) if status == "closed" else 0,
              "messages_deleted": deleted, "deferred": deferred}
    if purge_id is None and (rows or deleted or deferred):
        purge_id = _open_record(conn, holder, actor=actor, older_than=older_than, **counts)
    elif purge_id is not None:
        conn.execute(update(PURGES).where(PURGES.c.id == purge_id).values(
            **{name: PURGES.c[name] + n for name, n in counts.items()}))
    if rows:
        _tell_groups(conn, purge_id, Counter(r.group_id for r in rows if r.group_id is not None))
    return purge_id, len(rows)


def _tell_groups(conn: Connection, purge_id: int, removed: Counter) -> None:
    """Count the entries removed from each group in its activity, one row a group a purge (kind
    "purge", detail {"purge", "entries"}): the group's page says so, and a masked viewer's
    reading of its notes knows that entries they may quote are gone (access/unread.py)."""
    for group_id, n in sorted(removed.items()):
        row = conn.execute(select(ACTIVITY.c.id, ACTIVITY.c.detail).where(
            ACTIVITY.c.group_id == group_id, ACTIVITY.c.kind == "purge",
            ACTIVITY.c.detail.like(f'{{"purge": {purge_id},%')).limit(1)).first()
        if row is None:
            record_activity(conn, [{"group_id": group_id, "at": utcnow(), "actor": RETENTION, "kind": "purge",
                                    "detail": {"purge": purge_id, "entries": n}}])
        else:
            n += json.loads(row.detail).get("entries", 0)
            conn.execute(update(ACTIVITY).where(ACTIVITY.c.id == row.id).values(
                detail=json.dumps({"purge": purge_id, "entries": n})))


def _job_counts(conn: Connection, gone: list[int]) -> dict[int, Counter]:
    """The job items of purged entries, counted by job and state, before they go with them."""
    found: dict[int, Counter] = {}
    for job_id, state, n in conn.execute(select(ITEMS.c.job_id, ITEMS.c.state, func.count())
                                         .where(among(conn, ITEMS.c.entry_id, gone))
                                         .group_by(ITEMS.c.job_id, ITEMS.c.state)):
        found.setdefault(job_id, Counter())[state] += n
    return found


def _keep_job_counts(conn: Connection, found: dict[int, Counter]) -> None:
    """Add the purged items' counts (_job_counts) to their jobs' ``purged``, in the order of the
    jobs' ids: a finished job still says how it went (it read "0 done ... of 2,999")."""
    for job_id, counts in sorted(found.items()):
        kept = conn.execute(select(JOBS.c.purged).where(JOBS.c.id == job_id)).scalar()
        counts.update(json.loads(kept or "{}"))
        conn.execute(update(JOBS).where(JOBS.c.id == job_id).values(purged=json.dumps(dict(sorted(counts.items())))))


def _remove_history(conn: Connection, rows: list) -> None:
    # History is kept by original message, shared by every entry of that message: it goes with
    # the last of them.
    pairs = sorted({(r.original_stream, r.original_seq) for r in rows
                    if r.original_stream is not None and r.original_seq is not None})
    for start in range(0, len(pairs), 500):
        chunk = pairs[start:start + 500]
        still_told = exists().where(ENTRIES.c.original_stream == EVENTS.c.original_stream,
                                    ENTRIES.c.original_seq == EVENTS.c.original_seq)
        conn.execute(delete(EVENTS).where(tuple_(EVENTS.c.original_stream, EVENTS.c.original_seq).in_(chunk),
                                          ~still_told))


def _move_first_seen(conn: Connection, group_ids: set[int]) -> None:
    # A group's first_seen bounds the chart: it becomes the oldest entry still stored (ids grow
    # with the time received). A group left empty keeps its dates; it counts no entries.
    oldest = (select(ENTRIES.c.received_at).where(ENTRIES.c.group_id == GROUPS.c.id)
              .order_by(ENTRIES.c.id).limit(1).scalar_subquery())
    conn.execute(update(GROUPS).where(among(conn, GROUPS.c.id, sorted(group_ids)))
                 .values(first_seen=func.coalesce(oldest, GROUPS.c.first_seen)))


def _drop_empty_buckets(conn: Connection, rows: list) -> None:
    # A bucket whose last entry went is a row of zeros: removed, so the table shrinks too.
    low = bucket(min(r.received_at for r in rows), 3600)
    high = max(r.received_at for r in rows)
    conn.execute(delete(ARRIVALS).where(ARRIVALS.c.width.in_(WIDTHS), ARRIVALS.c.bucket.between(low, high),
                                        ARRIVALS.c.count == 0))


def _lease(purge_id: int) -> str:
    return f"purge:{purge_id}"


def _open_record(conn: Connection, holder: str, **values) -> int:
    """The run's record, with its lease in the same transaction: no record is seen without it."""
    purge_id = conn.execute(insert(PURGES).values(started_at=utcnow(), **values).returning(PURGES.c.id)).scalar_one()
    conn.execute(insert(LEASES).values(name=_lease(purge_id), holder=holder,
                                       expires_at=utcnow() + timedelta(seconds=RUN_LEASE)))
    return purge_id


def _renew(rt: ActionContext, purge_id: int, holder: str) -> None:
    with write_transaction(rt.engine) as conn:
        conn.execute(update(LEASES).where(LEASES.c.name == _lease(purge_id), LEASES.c.holder == holder)
                     .values(expires_at=utcnow() + timedelta(seconds=RUN_LEASE)))


def tell_interrupted(rt: ActionContext) -> list[int]:
    """Close the record of every earlier run that cannot still be going (its lease gone or run
    out, or its process on this host gone: killed mid-batch), each with an audit record saying it
    was interrupted and what it had purged; the ids of those closed. A record is closed once:
    two runs starting together tell it once (the update's WHERE is the compare-and-swap)."""
    now = utcnow()
    told: list[int] = []
    with write_transaction(rt.engine) as conn:
        rows = conn.execute(select(PURGES).where(PURGES.c.finished_at.is_(None)).order_by(PURGES.c.id)).all()
        if not rows:
            return told
        leases = {r.name: r for r in conn.execute(select(LEASES.c.name, LEASES.c.holder, LEASES.c.expires_at)
                                                  .where(LEASES.c.name.in_([_lease(r.id) for r in rows])))}
        for row in rows:
            lease = leases.get(_lease(row.id))
            if lease is not None and lease.expires_at > now and holder_alive(lease.holder):
                continue  # still going
            closed = conn.execute(update(PURGES).where(PURGES.c.id == row.id, PURGES.c.finished_at.is_(None))
                                  .values(finished_at=now))
            conn.execute(delete(LEASES).where(LEASES.c.name == _lease(row.id)))
            if closed.rowcount != 1:
                continue
            total = (row.republished or 0) + (row.closed or 0)
            conn.execute(insert(ACTIONS).values(
                entry_id=None, action="purge", actor=row.actor, at=now,
                note=(f"{total} resolved entries older than {format_duration(row.older_than)} purged by a run "
                      f"started {format_time(row.started_at)} that was interrupted before it finished"),
                detail=json.dumps({"purge": row.id, "interrupted": True, "started_at": format_time(row.started_at),
                                   "older_than": format_duration(row.older_than),
                                   "purged": {"closed": row.closed or 0, "republished": row.republished or 0},
                                   "total": total, "messages_deleted": row.messages_deleted or 0,
                                   "deferred": row.deferred or 0})))
            told.append(row.id)
            log.warning("the retention purge run %s (started %s by %s) was interrupted before it finished; "
                        "%s entries had been purged", row.id, format_time(row.started_at), row.actor, total)
    return told


def _finish(rt: ActionContext, purge_id: int, actor: str, report: PurgeReport) -> None:
    """Close the purge's record, give its lease up and write its audit record (one for the whole run)."""
    now = utcnow()
    with write_transaction(rt.engine) as conn:
        conn.execute(update(PURGES).where(PURGES.c.id == purge_id).values(finished_at=now))
        conn.execute(delete(LEASES).where(LEASES.c.name == _lease(purge_id)))
        if report.total:
            conn.execute(insert(ACTIONS).values(
                entry_id=None, action="purge", actor=actor, at=now,
                note=f"{report.total} resolved entries older than {format_duration(report.older_than)} purged",
                detail=json.dumps({"purge": purge_id, **report.to_dict()})))


def purged_totals(conn: Connection) -> dict[str, int]:
    """Entries every purge so far removed, by status (what /metrics reports)."""
    row = conn.execute(select(func.coalesce(func.sum(PURGES.c.republished), 0),
                              func.coalesce(func.sum(PURGES.c.closed), 0))).one()
    return {"republished": int(row[0]), "closed": int(row[1])}


class RetentionSchedule:
    """Runs the purge every ``settings.purge_interval`` seconds while ``leading()`` says this
    process holds the mirror lease (at once when it takes it), so one replica purges."""

    def __init__(self, rt: ActionContext, leading: Callable[[], bool]):
        self.rt, self.leading = rt, leading
        self.last: PurgeReport | None = None
        self.runs = 0
        self.failing = False  # the last run failed (/metrics dlq_retention_purge_failing)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "RetentionSchedule":
        """Start the thread (returns at once); nothing runs while DLQ_RETENTION is 0."""
        self._thread = threading.Thread(target=self._run, name="retention", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the batch in progress."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        interval = self.rt.settings.purge_interval
        due = 0.0
        failures = FailureLog(log, "the retention purge", f"it runs again every {interval:.0f} s")
        while not self._stop.wait(min(interval, 5.0)):
            if not self.rt.settings.retention:
                continue
            if not self.leading():
                due = 0.0  # when this replica takes the mirror over, it purges at once
                continue
            if time.monotonic() < due:
                continue
            due = time.monotonic() + interval
            self.runs += 1  # started
            try:
                self.last = purge_entries(self.rt, older_than=self.rt.settings.retention, actor=RETENTION,
                                          stopping=self._stop.is_set)
                if self.last.total or self.last.deferred:
                    log.info("retention purge: %s", self.last.to_dict())
                self.failing = False
                failures.worked()
            except Exception as exc:  # the database or NATS away: tried again at the next interval
                self.failing = True
                failures.failed(exc)
