"""One bulk job's work: its windows of items, republished or closed, and the items' results.

Republish windows go through the same intents as a single republish (actions/intents.py),
published with ``publish_async`` so a window costs one round trip (from a process of its own
for a big job, publisher.py), and the outcome of a window is committed with the items' results.
A crash leaves intents pending; they are finished with their own msgIds, and the job resumes
with the items not yet done. runner.py runs the threads.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update

from ...db.counts import Change, count_changes
from ...db.engine import is_sqlite, write_transaction
from ...db.leases import acquire_lease
from ...db.rows import UNCACHED, among, update_rows
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
from .jobs import FINISHED, ITEMS, JOBS, REPUBLISHING, ack_sentence
from .pacing import TokenBucket, window_size
from .patching import Unpatchable, patch_for_job
from .repairing import repair_for_job
from .publisher import Publisher, publish_window
from .steps import Turn, next_step

log = logging.getLogger(__name__)

LEASE_SECONDS = 30.0
#: A republish job of at least this many items, with no rate limit or one of at least
#: OWN_PUBLISHER_RATE a second, publishes from a process of its own (publisher.py): a smaller
#: or slower one is over, or barely busy, before that process would pay for itself.
OWN_PUBLISHER_FROM = 5000
OWN_PUBLISHER_RATE = 1000
# What deciding a republish reads of an entry (no times: parsing them is most of a wide row's cost).
_CLAIM_COLUMNS = [ENTRIES.c[name] for name in (
    "id", "version", "status", "original_subject", "payload", "payload_available", "headers", "dlq_stream",
    "dlq_seq", "original_stream", "original_seq")]


# --- one job ---------------------------------------------------------------------------------

class WaitForNats(Exception):
    """The window could not finish because NATS is down; its items stay pending."""


class JobWork:
    """One job's loop: windows of pending items, paced by the token bucket.

    Republish windows are pipelined: while one window's publishes are out, the next window's
    intents are committed and the previous window's outcomes are recorded, so the database
    and the broker work at the same time. Each window's intents are committed before its
    publish starts, and its outcomes after its answers arrive. On SQLite one transaction a
    window does both; on PostgreSQL the outcomes have a connection and a thread of their own.
    """

    def __init__(self, rt: ActionContext, job_id: int, *, lease: str, holder: str, wake: threading.Event,
                 stop: threading.Event):
        self.rt, self.job_id, self.lease, self.holder = rt, job_id, lease, holder
        self.wake, self.stop = wake, stop
        # Set by the job's action when it is first read (_paced): only republishes are paced.
        self.action: str | None = None
        self.size, self.bucket = window_size(0), None
        self.renewed = time.monotonic()
        self.flights: list[tuple[list[Intent], Any]] = []
        self.publisher: Publisher | bool | None = None  # False: could not be started
        # PostgreSQL: a window's outcome is recorded on a connection of its own (see _republish_recording_apart).
        self.recorder: ThreadPoolExecutor | None = None
        self.recording: Future | None = None
        # Items are taken in entry order after ``after``; a pass from the start again picks up
        # leftovers. ``ahead``: the job and its next window, read at the end of the window
        # before's transaction (a connection and two statements a window fewer, each a wait for
        # the interpreter lock while the bridge's loop publishes).
        self.after = 0
        self.ahead: tuple[Any, list] | None = None

    def _renew(self) -> None:
        if time.monotonic() - self.renewed > LEASE_SECONDS / 3:
            acquire_lease(self.rt.engine, self.lease, self.holder, LEASE_SECONDS)
            self.renewed = time.monotonic()

    def _paced(self, action: str) -> None:
        """DLQ_REPUBLISH_RATE paces what a job publishes; a close publishes nothing, so it goes in
        whole windows unpaced (15,000 closes took 76 s at the republish rate)."""
        self.action = action
        rate = self.rt.settings.republish_rate if action in REPUBLISHING else 0
        self.size = window_size(rate)
        self.bucket = TokenBucket(rate, self.size) if rate > 0 else None

    def _read_job_and_window(self, conn, after: int):
        """The job as it is now, and its next window of pending items after ``after``."""
        job = conn.execute(select(JOBS).where(JOBS.c.id == self.job_id)).first()._mapping
        if self.action is None:
            self._paced(job["action"])
        # (entry id, version) as plain tuples, which the garbage collector stops tracking: rows
        # kept from one window to the next would be scanned again by every full collection.
        items = [tuple(r) for r in conn.execute(select(ITEMS.c.entry_id, ITEMS.c.version).where(
            ITEMS.c.job_id == self.job_id, ITEMS.c.state == "pending", ITEMS.c.entry_id > after)
            .order_by(ITEMS.c.entry_id).limit(self.size))]
        return job, items

    def _wants_publisher(self, job) -> bool:
        rate = self.rt.settings.republish_rate
        return job["total"] >= OWN_PUBLISHER_FROM and (rate <= 0 or rate >= OWN_PUBLISHER_RATE)

    def _start_publisher(self) -> Publisher | bool:
        """The job's publishing process, started in the background (windows go through the
        bridge until it is connected); False if it cannot be started."""
        try:
            return Publisher(self.rt.settings, self.rt.settings.request_timeout)
        except Exception:  # e.g. no processes allowed: the bridge publishes every window
            log.warning("job %d publishes through the bridge: its own process did not start", self.job_id,
                        exc_info=True)
            return False

    def _pause(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()

    def run(self) -> None:
        """Take turns until a step ends the job or the runner stops: each turn reads what the loop
        decides on, next_step (steps.py) names the step, and the step runs."""
        try:
            while True:
                job, items = self._begin_turn()
                step = next_step(self._turn(job, items))
                if not getattr(self, f"_{step.value}")(job, items):
                    return
        finally:
            self._release()

    def _release(self) -> None:
        """End the recorder's thread and the publishing process; a window whose outcome is not
        recorded stays pending (its intents are finished with their msgIds later)."""
        if self.recorder is not None:
            self.recorder.shutdown(wait=True)
        for intents, _ in self.flights:
            self.rt.flights.end(intents)
        if self.publisher:
            self.publisher.close()

    def _begin_turn(self):
        """Renew the lease; the job and its next window (read now after a cancel woke the loop,
        else as the window before's transaction read it); start what a republish needs."""
        self._renew()
        if self.wake.is_set():  # a cancel: read the job as it is now
            self.wake.clear()
            self.ahead = None
        if self.ahead is None:
            with self.rt.engine.connect() as conn:
                self.ahead = self._read_job_and_window(conn, self.after)
        (job, items), self.ahead = self.ahead, None
        if job["action"] in REPUBLISHING:
            if items and self.publisher is None and self._wants_publisher(job):
                self.publisher = self._start_publisher()
            if self.recorder is None and not is_sqlite(self.rt.engine):
                self.recorder = ThreadPoolExecutor(1, thread_name_prefix=f"job-{self.job_id}-outcomes")
        return job, items

    def _turn(self, job, items) -> Turn:
        """What next_step decides on, as this turn sees it."""
        needs_nats = job["action"] in REPUBLISHING or self.rt.settings.delete_on_close
        return Turn(stopping=self.stop.is_set(), finished=job["state"] in FINISHED,
                    cancel_requested=bool(job["cancel_requested"]), needs_nats=bool(needs_nats),
                    nats_down=bool(needs_nats and nats_unreachable(self.rt)), has_items=bool(items),
                    in_flight=bool(self.flights), recording=self.recording is not None, from_start=self.after == 0)

    # The steps (steps.Step), each named for its value; True: take another turn.

    def _leave(self, job, items) -> bool:
        self._record_in_flight()
        return False

    def _cancel(self, job, items) -> bool:
        self._record_in_flight()
        self._end_job(cancelled=True)
        return False

    def _wait_for_nats(self, job, items) -> bool:
        self._record_in_flight()
        self.after = 0
        self._pause(1.0)
        return True

    def _await_recording(self, job, items) -> bool:
        if self._wait_for_recording():  # its republishes wait for NATS: a second, then a new pass
            self._pause(1.0)
            self.after = 0
        return True

    def _finish(self, job, items) -> bool:
        self._end_job(cancelled=False)
        return False

    def _start_over(self, job, items) -> bool:
        self.after = 0
        return True

    def _work_window(self, job, items) -> bool:
        """Wait for the pacer's tokens, then republish or close the window; a republish with no
        items left records its oldest window in flight."""
        if items and self.bucket is not None and not self.bucket.take(len(items), self.wake):
            self.wake.clear()
            return True  # woken by a cancel: look at the job again
        try:
            if job["action"] in REPUBLISHING:
                self.ahead = self._republish(job, items, items[-1][0] if items else self.after)
            elif items:
                self._close(job, items)
        except (WaitForNats, NatsDown, NatsUnavailable) as exc:
            log.warning("job %d waits for NATS: %s", self.job_id, exc)
            self._pause(1.0)
            self.after = 0
            return True
        if items:
            self.after = items[-1][0]
        return True

    def _republish(self, job, items, after: int):
        """Keep two windows in flight. When the older one's answers are in, one transaction
        records them, commits the next window's intents (one commit a window) and reads the
        window after; the next window's publish starts while the other is still out. Returns
        what it read: the job and its next items after ``after``."""
        if self.recorder is not None:
            return self._republish_recording_apart(job, items, after)
        oldest = None
        if len(self.flights) >= 2 or (self.flights and not items):
            oldest = self.flights.pop(0)
        try:
            answers = self._answers(*oldest) if oldest else None
            with write_transaction(self.rt.engine) as conn:
                waiting = self._write_outcomes(conn, oldest[0], answers) if oldest else 0
                claims = self._claim(conn, job, items) if items else []
                ahead = self._read_job_and_window(conn, after)
        finally:
            if oldest:
                self.rt.flights.end(oldest[0])
        if claims:
            self.flights.append(self._start([intent for _, intent in claims]))
        if waiting:
            raise WaitForNats(f"{waiting} republishes wait for NATS")
        return ahead

    def _republish_recording_apart(self, job, items, after: int):
        """_republish on PostgreSQL: the older window's answers are awaited and recorded by the
        recorder thread, in a transaction of its own, while this one commits the next window's
        intents. The server's work for an outcome (a new version of each entry in every one of
        its indexes) is most of a window's time; one connection made the job wait for it."""
        waiting = self._wait_for_recording()  # the window before's outcome (its error is raised here)
        if len(self.flights) >= 2 or (self.flights and not items):
            self.recording = self.recorder.submit(self._record, *self.flights.pop(0))
        with write_transaction(self.rt.engine) as conn:
            claims = self._claim(conn, job, items) if items else []
            ahead = self._read_job_and_window(conn, after)
        if claims:
            self.flights.append(self._start([intent for _, intent in claims]))
        if waiting:
            raise WaitForNats(f"{waiting} republishes wait for NATS")
        return ahead

    def _record(self, intents: list[Intent], future) -> int:
        try:
            answers = self._answers(intents, future)
            with write_transaction(self.rt.engine) as conn:
                return self._write_outcomes(conn, intents, answers)
        finally:
            self.rt.flights.end(intents)

    def _wait_for_recording(self) -> int:
        """Wait for the outcome being recorded (its error is raised here); returns how many of
        its republishes wait for NATS."""
        recording, self.recording = self.recording, None
        return recording.result() if recording is not None else 0

    def _record_in_flight(self) -> None:
        """Record every window still in flight."""
        self._wait_for_recording()
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
        selection = json.loads(job["selection"] or "{}")
        force, patch = bool(selection.get("force")), selection.get("patch") if job["action"] == "patch" else None
        results: dict[int, tuple[str, str]] = {}
        claims: list[tuple[str, Intent]] = []
        ids = [entry_id for entry_id, _ in items]
        names = [c.name for c in _CLAIM_COLUMNS]
        rows = {r[0]: dict(zip(names, r)) for r in conn.execute(
            select(*_CLAIM_COLUMNS).where(among(conn, ENTRIES.c.id, ids)), execution_options=UNCACHED).all()}
        msg_ids = {entry_id: republish_msg_id(rows[entry_id], version)
                   for entry_id, version in items if entry_id in rows}
        # One look at these entries' intents: this decision's own (a retry, a resume) and any pending.
        wanted, existing, pending = set(msg_ids.values()), {}, {}
        for row in conn.execute(select(INTENTS).where(among(conn, INTENTS.c.entry_id, ids)),
                                execution_options=UNCACHED):
            intent = Intent.from_row(row)
            if intent.msg_id in wanted:
                existing[intent.msg_id] = intent
            if intent.state == "pending":
                pending.setdefault(intent.entry_id, []).append(intent)
        for entry_id, version in items:
            if entry_id not in rows:
                results[entry_id] = ("failed", "The entry no longer exists.")
                continue
            msg_id = msg_ids[entry_id]
            try:
                # A patch gives the same bytes every time (patching.py): a resumed item asks for its own
                # intent. One already published or pending carries its payload: nothing to patch again.
                earlier = existing.get(msg_id)
                fresh = earlier is None or earlier.state == "failed"
                payload = patch_for_job(rt, patch, rows[entry_id], bool(selection.get("only_valid"))) \
                    if patch is not None and fresh else \
                    repair_for_job(rt, rows[entry_id]) if job["action"] == "repair" and fresh else None
                claims.append(decide_republish(
                    rt, rows[entry_id], version, existing.get(msg_id),
                    [p for p in pending.get(entry_id, []) if p.msg_id != msg_id],
                    actor=job["actor"], payload=payload, force=force, job_id=self.job_id, resume_pending=True,
                    now=now))
            except Unpatchable as exc:
                results[entry_id] = ("skipped", str(exc))
            except AlreadyRepublished as exc:
                results[entry_id] = ("done", ack_sentence(exc.publish))
            except InFlight:
                pass  # recovery is publishing it: its outcome is read on a later pass
            except Conflict as exc:
                results[entry_id] = ("skipped", str(exc))
            except Refused as exc:
                results[entry_id] = ("failed", str(exc))
        write_claims(conn, claims)
        _write_results(conn, self.job_id, results)
        return claims

    def _start(self, intents: list[Intent]):
        self.rt.flights.start(intents)
        try:
            for intent in intents:
                publishing.fault_point("after_intent", intent)
            if self.publisher and self.publisher.ready:
                try:
                    return intents, self.publisher.publish([(i.subject, i.payload, i.headers) for i in intents])
                except NatsUnavailable:  # the child has ended: the bridge publishes the rest
                    pass
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
            ids = [entry_id for entry_id, _ in items]
            query = select(ENTRIES).where(ENTRIES.c.id.in_(ids))
            if conn.dialect.name == "postgresql":
                query = query.with_for_update()  # decided and changed in this transaction only
            rows = {r.id: r._mapping for r in conn.execute(query)}
            pending = pending_intents(conn, ids)
            closing = []
            for entry_id, version in items:
                row = rows.get(entry_id)
                if row is None:
                    results[entry_id] = ("failed", "The entry no longer exists.")
                    continue
                try:
                    decide_close(row, version, pending.get(entry_id, []))
                    closing.append(((entry_id, version), row))
                except Conflict as exc:
                    results[entry_id] = ("skipped", str(exc))
            deleted: dict[int, str] = {}
            to_delete = [row for _, row in closing if row["dlq_stream"] and row["dlq_seq"]]
            if rt.settings.delete_on_close and to_delete:
                deleted = delete_from_dlq(rt, to_delete)
            if closing:
                conn.execute(update(ENTRIES).where(ENTRIES.c.id == bindparam("b_id"),
                                                   ENTRIES.c.version == bindparam("b_version"))
                             .values(version=ENTRIES.c.version + 1, **close_values(job["actor"], job["note"], now)),
                             [{"b_id": entry_id, "b_version": version} for (entry_id, version), _ in closing])
                count_changes(conn, [Change(row["group_id"], row["group_id"], row["received_at"], row["status"],
                                            "closed") for _, row in closing])
                conn.execute(insert(ACTIONS), [{
                    "entry_id": entry_id, "job_id": self.job_id, "action": "close", "actor": job["actor"],
                    "at": now, "note": job["note"], "version": version,
                    "detail": json.dumps({"dlq_delete": deleted[entry_id]} if entry_id in deleted else {}),
                } for (entry_id, version), _ in closing])
                for (entry_id, _), _ in closing:
                    results[entry_id] = ("done", "Closed." + (f" DLQ message {deleted[entry_id]}."
                                                              if entry_id in deleted else ""))
            _write_results(conn, self.job_id, results)

    def _end_job(self, *, cancelled: bool) -> None:
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
        conn.execute(update(ITEMS).where(ITEMS.c.job_id == job_id, among(conn, ITEMS.c.entry_id, plain),
                                         ITEMS.c.state == "pending").values(state="done"), execution_options=UNCACHED)
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
