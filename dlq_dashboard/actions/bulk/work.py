"""One bulk job's work: its windows of items, republished or closed, and the items' results.

Republish windows go through the same intents as a single republish (actions/intents.py),
published with ``publish_async`` so a window costs one round trip, and the outcome of a window
is committed with the items' results. A crash leaves intents pending; they are finished with
their own msgIds, and the job resumes with the items not yet done. runner.py runs the threads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update

from ...db.counts import Change, count_changes
from ...db.engine import write_transaction
from ...db.leases import acquire_lease
from ...db.rows import update_rows
from ...nats.bridge import NatsUnavailable
from ...times import utcnow

# fault_point is looked up on its module at each call, so that tests replacing it reach jobs too.
from .. import publishing
from ..close import delete_from_dlq
from ..context import ActionContext
from ..decisions import close_values, decide_close, decide_republish, pending_intents, write_claims
from ..errors import AlreadyRepublished, Conflict, InFlight, NatsDown, Refused
from ..intents import (
    ACTIONS,
    ENTRIES,
    INTENTS,
    Intent,
    mark_in_doubt,
    record_failed,
    record_published,
    republish_msg_id,
)
from ..publishing import classify_failure, nats_unreachable
from .jobs import FINISHED, ITEMS, JOBS, ack_sentence
from .pacing import TokenBucket, window_size

log = logging.getLogger(__name__)

LEASE_SECONDS = 30.0
# What deciding a republish reads of an entry (no times: parsing them is most of a wide row's cost).
_CLAIM_COLUMNS = [ENTRIES.c[name] for name in (
    "id", "version", "status", "original_subject", "payload", "payload_available", "headers", "dlq_stream",
    "dlq_seq", "original_stream", "original_seq")]


# --- publishing a window ---------------------------------------------------------------------

async def publish_window(js, intents: list[Intent], timeout: float) -> list[Any]:
    """Publish intents pipelined (publish_async) and return each one's PubAck or exception."""
    futures: list[Any] = []
    for intent in intents:
        try:
            # No wait_stall: with a timeout, asyncio.wait_for makes a task per message (a third
            # of the throughput); two windows in flight stay under the client's pending limit.
            futures.append(await js.publish_async(intent.subject, intent.payload, headers=dict(intent.headers)))
        except Exception as exc:  # not sent: classified by the caller
            futures.append(exc)
    waiting = [f for f in futures if isinstance(f, asyncio.Future)]
    if waiting:
        await asyncio.wait(waiting, timeout=timeout)
    results = []
    for f in futures:
        if not isinstance(f, asyncio.Future):
            results.append(f)
        elif not f.done():
            f.cancel()
            results.append(asyncio.TimeoutError())
        else:
            results.append(f.exception() or f.result())
    return results


# --- one job ---------------------------------------------------------------------------------

class WaitForNats(Exception):
    """The window could not finish because NATS is down; its items stay pending."""


class JobWork:
    """One job's loop: windows of pending items, paced by the token bucket.

    Republish windows are pipelined: while one window's publishes are out, the next window's
    intents are committed and the previous window's outcomes are recorded, so the database
    and the broker work at the same time. Each window's intents are committed before its
    publish starts, and its outcomes after its answers arrive.
    """

    def __init__(self, rt: ActionContext, job_id: int, *, lease: str, holder: str, wake: threading.Event,
                 stop: threading.Event):
        self.rt, self.job_id, self.lease, self.holder = rt, job_id, lease, holder
        self.wake, self.stop = wake, stop
        rate = self.rt.settings.republish_rate
        self.size = window_size(rate)
        self.bucket = TokenBucket(rate, self.size)
        self.renewed = time.monotonic()
        self.flights: list[tuple[list[Intent], Any]] = []

    def _job(self):
        if time.monotonic() - self.renewed > LEASE_SECONDS / 3:
            acquire_lease(self.rt.engine, self.lease, self.holder, LEASE_SECONDS)
            self.renewed = time.monotonic()
        with self.rt.engine.connect() as conn:
            return conn.execute(select(JOBS).where(JOBS.c.id == self.job_id)).first()._mapping

    def _pending(self, after: int):
        with self.rt.engine.connect() as conn:
            return conn.execute(select(ITEMS.c.entry_id, ITEMS.c.version).where(
                ITEMS.c.job_id == self.job_id, ITEMS.c.state == "pending", ITEMS.c.entry_id > after)
                .order_by(ITEMS.c.entry_id).limit(self.size)).all()

    def _pause(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()

    def run(self) -> None:
        after = 0  # items are taken in entry order; a pass from the start again picks up leftovers
        try:
            while True:
                job = self._job()
                republish = job["action"] == "republish"
                if self.stop.is_set() or job["state"] in FINISHED:
                    return self._land()
                if job["cancel_requested"]:
                    self._land()
                    return self._finish(cancelled=True)
                if (republish or self.rt.settings.delete_on_close) and nats_unreachable(self.rt):
                    self._land()
                    after = 0
                    self._pause(1.0)
                    continue
                items = self._pending(after)
                if not items and not self.flights:
                    if after == 0:
                        return self._finish(cancelled=False)
                    after = 0
                    continue
                if items and not self.bucket.take(len(items), self.wake):
                    self.wake.clear()
                    continue  # woken by a cancel: look at the job again
                try:
                    if republish:
                        self._republish(job, items)
                    elif items:
                        self._close(job, items)
                except (WaitForNats, NatsDown, NatsUnavailable) as exc:
                    log.warning("job %d waits for NATS: %s", self.job_id, exc)
                    self._pause(1.0)
                    after = 0
                    continue
                if items:
                    after = items[-1].entry_id
        finally:
            for intents, _ in self.flights:  # a window whose outcome is not recorded stays pending
                self.rt.flights.end(intents)

    def _republish(self, job, items) -> None:
        """Keep two windows in flight. When the older one's answers are in, one transaction
        records them and commits the next window's intents (one commit a window), and the next
        window's publish starts while the other is still out."""
        oldest = None
        if len(self.flights) >= 2 or (self.flights and not items):
            oldest = self.flights.pop(0)
        try:
            answers = self._answers(*oldest) if oldest else None
            with write_transaction(self.rt.engine) as conn:
                waiting = self._write_outcomes(conn, oldest[0], answers) if oldest else 0
                claims = self._claim(conn, job, items) if items else []
        finally:
            if oldest:
                self.rt.flights.end(oldest[0])
        if claims:
            self.flights.append(self._start([intent for _, intent in claims]))
        if waiting:
            raise WaitForNats(f"{waiting} republishes wait for NATS")

    def _land(self) -> None:
        """Record every window still in flight."""
        while self.flights:
            intents, future = self.flights.pop(0)
            try:
                answers = self._answers(intents, future)
                with write_transaction(self.rt.engine) as conn:
                    self._write_outcomes(conn, intents, answers)
            finally:
                self.rt.flights.end(intents)

    def _claim(self, conn, job, items) -> list[tuple[str, Intent]]:
        rt, now = self.rt, utcnow()
        force = bool(json.loads(job["selection"] or "{}").get("force"))
        results: dict[int, tuple[str, str]] = {}
        claims: list[tuple[str, Intent]] = []
        ids = [i.entry_id for i in items]
        names = [c.name for c in _CLAIM_COLUMNS]
        rows = {r[0]: dict(zip(names, r)) for r in conn.execute(select(*_CLAIM_COLUMNS).where(ENTRIES.c.id.in_(ids)))}
        msg_ids = {i.entry_id: republish_msg_id(rows[i.entry_id], i.version) for i in items if i.entry_id in rows}
        # One look at these entries' intents: this decision's own (a retry, a resume) and any pending.
        wanted, existing, pending = set(msg_ids.values()), {}, {}
        for row in conn.execute(select(INTENTS).where(INTENTS.c.entry_id.in_(ids))):
            intent = Intent.from_row(row)
            if intent.msg_id in wanted:
                existing[intent.msg_id] = intent
            if intent.state == "pending":
                pending.setdefault(intent.entry_id, []).append(intent)
        for item in items:
            if item.entry_id not in rows:
                results[item.entry_id] = ("failed", "The entry no longer exists.")
                continue
            msg_id = msg_ids[item.entry_id]
            try:
                claims.append(decide_republish(
                    rt, rows[item.entry_id], item.version, existing.get(msg_id),
                    [p for p in pending.get(item.entry_id, []) if p.msg_id != msg_id],
                    actor=job["actor"], force=force, job_id=self.job_id, resume_pending=True, now=now))
            except AlreadyRepublished as exc:
                results[item.entry_id] = ("done", ack_sentence(exc.publish))
            except InFlight:
                pass  # recovery is publishing it: its outcome is read on a later pass
            except Conflict as exc:
                results[item.entry_id] = ("skipped", str(exc))
            except Refused as exc:
                results[item.entry_id] = ("failed", str(exc))
        write_claims(conn, claims)
        _write_results(conn, self.job_id, results)
        return claims

    def _start(self, intents: list[Intent]):
        self.rt.flights.start(intents)
        try:
            for intent in intents:
                publishing.fault_point("after_intent", intent)
            bridge = self.rt.bridge
            return intents, bridge.spawn(publish_window(bridge.js, intents, self.rt.settings.request_timeout))
        except BaseException:
            self.rt.flights.end(intents)
            raise

    def _answers(self, intents: list[Intent], future) -> list[Any]:
        try:
            answers = future.result(self.rt.settings.request_timeout + 5)
        except Exception as exc:  # the loop stopped, or no answer in time: classified per intent
            answers = [exc] * len(intents)
        for intent in intents:
            publishing.fault_point("after_publish", intent)
        return answers

    def _write_outcomes(self, conn, intents: list[Intent], answers: list[Any]) -> int:
        """Record a window's answers; returns how many must wait for NATS (left pending)."""
        published, failed, retry_later, in_doubt = [], [], [], []
        results: dict[int, tuple[str, str]] = {}
        for intent, answer in zip(intents, answers):
            if not isinstance(answer, BaseException):
                published.append((intent, answer))
                results[intent.entry_id] = ("done", None)  # job_status tells it from the intent
                continue
            nothing_stored, error = classify_failure(answer, intent)
            if not nothing_stored:
                in_doubt.append(intent)
            elif isinstance(error, Refused):
                failed.append((intent, str(error)))
                results[intent.entry_id] = ("failed", str(error))
            else:
                retry_later.append((intent, str(error)))
        recorded = {i.msg_id for i in record_published(conn, published)}
        recorded |= {i.msg_id for i in record_failed(conn, failed + retry_later)}
        if in_doubt:
            mark_in_doubt(conn, in_doubt, "No answer from NATS; completed with the same msgId later.")
        # An intent someone else finished (recovery) keeps its item pending: a later pass reads
        # that outcome.
        _write_results(conn, self.job_id, {i.entry_id: results[i.entry_id] for i in intents
                                           if i.msg_id in recorded and i.entry_id in results})
        return len(retry_later) + len(in_doubt)

    def _close(self, job, items) -> None:
        rt, now = self.rt, utcnow()
        results: dict[int, tuple[str, str]] = {}
        with write_transaction(rt.engine) as conn:
            ids = [i.entry_id for i in items]
            query = select(ENTRIES).where(ENTRIES.c.id.in_(ids))
            if conn.dialect.name == "postgresql":
                query = query.with_for_update()  # decided and changed in this transaction only
            rows = {r.id: r._mapping for r in conn.execute(query)}
            pending = pending_intents(conn, ids)
            closing = []
            for item in items:
                row = rows.get(item.entry_id)
                if row is None:
                    results[item.entry_id] = ("failed", "The entry no longer exists.")
                    continue
                try:
                    decide_close(row, item.version, pending.get(item.entry_id, []))
                    closing.append((item, row))
                except Conflict as exc:
                    results[item.entry_id] = ("skipped", str(exc))
            deleted: dict[int, str] = {}
            to_delete = [row for _, row in closing if row["dlq_stream"] and row["dlq_seq"]]
            if rt.settings.delete_on_close and to_delete:
                deleted = delete_from_dlq(rt, to_delete)
            if closing:
                conn.execute(update(ENTRIES).where(ENTRIES.c.id == bindparam("b_id"),
                                                   ENTRIES.c.version == bindparam("b_version"))
                             .values(version=ENTRIES.c.version + 1, **close_values(job["actor"], job["note"], now)),
                             [{"b_id": item.entry_id, "b_version": item.version} for item, _ in closing])
                count_changes(conn, [Change(row["group_id"], row["group_id"], row["received_at"], row["status"],
                                            "closed") for _, row in closing])
                conn.execute(insert(ACTIONS), [{
                    "entry_id": item.entry_id, "job_id": self.job_id, "action": "close", "actor": job["actor"],
                    "at": now, "note": job["note"], "version": item.version,
                    "detail": json.dumps({"dlq_delete": deleted[item.entry_id]} if item.entry_id in deleted else {}),
                } for item, _ in closing])
                for item, _ in closing:
                    results[item.entry_id] = ("done", "Closed." + (f" DLQ message {deleted[item.entry_id]}."
                                                                   if item.entry_id in deleted else ""))
            _write_results(conn, self.job_id, results)

    def _finish(self, *, cancelled: bool) -> None:
        with write_transaction(self.rt.engine) as conn:
            if cancelled:
                conn.execute(update(ITEMS).where(ITEMS.c.job_id == self.job_id, ITEMS.c.state == "pending")
                             .values(state="cancelled", result="Cancelled before it was processed."))
            conn.execute(update(JOBS).where(JOBS.c.id == self.job_id).values(
                state="cancelled" if cancelled else "done", finished_at=utcnow()))
            _count(conn, self.job_id)


# --- the items' results ----------------------------------------------------------------------

def _write_results(conn, job_id: int, results: dict[int, tuple[str, str | None]]) -> None:
    if not results:
        return
    # Only this job's runner (it holds the job's lease) moves its items out of pending, once.
    plain = [e for e, (s, r) in results.items() if s == "done" and r is None]
    if plain:
        conn.execute(update(ITEMS).where(ITEMS.c.job_id == job_id, ITEMS.c.entry_id.in_(plain),
                                         ITEMS.c.state == "pending").values(state="done"))
    update_rows(conn, ITEMS, "entry_id", [{"entry_id": e, "state": s, "result": r}
                                          for e, (s, r) in results.items() if r is not None],
                match={"job_id": job_id, "state": "pending"})
    done = sum(1 for s, _ in results.values() if s == "done")
    conn.execute(update(JOBS).where(JOBS.c.id == job_id).values(
        done=JOBS.c.done + done, failed=JOBS.c.failed + len(results) - done))


def _count(conn, job_id: int) -> None:
    counts = dict(conn.execute(select(ITEMS.c.state, func.count()).where(ITEMS.c.job_id == job_id)
                               .group_by(ITEMS.c.state)).all())
    conn.execute(update(JOBS).where(JOBS.c.id == job_id).values(
        done=counts.get("done", 0), failed=counts.get("failed", 0) + counts.get("skipped", 0)))
