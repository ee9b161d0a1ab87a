"""Bulk jobs: republish or close a set of entries fixed at creation, paced, cancellable, resumable.

The set is written as JobItems (entry and the version it was selected at) when the job is
made, so entries that arrive later are never swept in and every item is judged by the same
optimistic concurrency as a single action. A job thread works through the items in windows:
republish windows go through the same intents as a single republish (actions.py), published
with ``publish_async`` so a window costs one round trip, and the outcome of a window is
committed with the items' results. A crash leaves intents pending; they are finished with their
own msgIds, and the job resumes with the items not yet done.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import replace
from typing import Any, Iterable

from sqlalchemy import and_, bindparam, func, insert, select, update

from . import actions
from .actions import (
    ACTIONS, ENTRIES, INTENTS, ActionError, AlreadyRepublished, Conflict, InFlight, Intent, NatsDown, Refused,
    classify_failure, decide_close, decide_republish, mark_in_doubt, pending_intents, record_failed,
    record_published, republish_msg_id, write_claims,
)
from .bridge import NatsUnavailable
from .contract import format_time, utcnow
from .db import write_transaction
from .ingest import acquire_lease, release_lease
from .models import Job, JobItem
from .store import EntryFilter, encode_cursor

log = logging.getLogger(__name__)

JOBS, ITEMS = Job.__table__, JobItem.__table__
JOB_ACTIONS = ("republish", "close")
# Two windows are in flight at once: well within nats-py's default of 4,000 pending async publishes.
WINDOW = 1000
LEASE_SECONDS = 30.0
FINISHED = ("done", "cancelled")
# What deciding a republish reads of an entry (no times: parsing them is most of a wide row's cost).
_CLAIM_COLUMNS = [ENTRIES.c[name] for name in (
    "id", "version", "status", "original_subject", "payload", "payload_available", "headers", "dlq_stream",
    "dlq_seq", "original_stream", "original_seq")]


class JobError(ValueError):
    """A bulk request that cannot be made; the message says why (HTTP 400)."""


# --- selecting -------------------------------------------------------------------------------

def _parse_ids(ids: Iterable[Any]) -> dict[int, int | None]:
    """Ids as given by a form ("12" or "12:3" with the version seen) or JSON (12 or {"id", "version"})."""
    wanted: dict[int, int | None] = {}
    for raw in ids:
        try:
            if isinstance(raw, dict):
                entry_id, version = int(raw["id"]), (int(raw["version"]) if raw.get("version") is not None else None)
            elif isinstance(raw, str) and ":" in raw:
                entry_id, version = (int(x) for x in raw.split(":", 1))
            else:
                entry_id, version = int(raw), None
        except (KeyError, TypeError, ValueError):
            raise JobError(f"{raw!r} is not an entry id: use numbers, or objects with id and version") from None
        wanted[entry_id] = version
    return wanted


def select_items(rt, *, ids=None, filter_args: dict | None = None, only_valid: bool = False,
                 upto: int | None = None) -> tuple[list[dict], dict[str, Any]]:
    """The entries a job would take, as [{"id", "version", "status"}], and a summary of the choice.

    By filter without a status, only open entries are taken. ``upto`` (the newest id a preview
    showed) keeps entries that arrived after the preview out of the job.
    """
    if (ids is None) == (filter_args is None):
        raise JobError("Choose the entries either by ids or by filter.")
    summary: dict[str, Any] = {"only_valid": only_valid}
    if ids is not None:
        wanted = _parse_ids(ids)
        if not wanted:
            raise JobError("No entries were selected.")
        with rt.engine.connect() as conn:
            rows = conn.execute(select(ENTRIES.c.id, ENTRIES.c.version, ENTRIES.c.status, ENTRIES.c.original_subject,
                                       ENTRIES.c.payload, ENTRIES.c.payload_available)
                                .where(ENTRIES.c.id.in_(list(wanted)))).all()
        summary.update(ids=len(wanted), missing=len(wanted) - len(rows))
        candidates = [(r.id, wanted[r.id] if wanted[r.id] is not None else r.version, r.status,
                       r.original_subject, r.payload, r.payload_available) for r in rows]
    else:
        args = {k: v for k, v in filter_args.items() if k not in ("limit", "cursor")}
        if not str(args.get("status") or "").strip():
            args["status"] = "open"
        flt = EntryFilter.from_args(args)
        if upto is not None:
            flt = replace(flt, cursor=encode_cursor(int(upto) + 1))
        summary["filter"] = flt.to_args()
        if only_valid:
            candidates = [(e.id, e.version, e.status, e.original_subject, e.payload, e.payload_available)
                          for e in rt.store.iter_entries(flt)]
        else:  # no payloads needed: one narrow query
            query = rt.store.select_entries(flt).with_only_columns(
                ENTRIES.c.id, ENTRIES.c.version, ENTRIES.c.status, ENTRIES.c.original_subject)
            if flt.cursor:
                query = query.where(ENTRIES.c.id < int(upto) + 1)
            with rt.engine.connect() as conn:
                candidates = [(r.id, r.version, r.status, r.original_subject, None, True) for r in conn.execute(query)]
    items, invalid = [], 0
    for entry_id, version, status, subject, payload, available in candidates:
        if only_valid and (not available or not rt.schemas.validate(subject, bytes(payload or b"")).valid):
            invalid += 1
            continue
        items.append({"id": entry_id, "version": version, "status": status, "subject": subject})
    items.sort(key=lambda i: i["id"])
    summary.update(count=len(items), left_out_invalid=invalid, upto=max((i["id"] for i in items), default=None))
    by_status: dict[str, int] = {}
    for item in items:
        by_status[item["status"]] = by_status.get(item["status"], 0) + 1
    summary["by_status"] = by_status
    subjects: dict[str, int] = {}
    for item in items:
        subjects[item["subject"] or ""] = subjects.get(item["subject"] or "", 0) + 1
    summary["subjects"] = dict(sorted(subjects.items(), key=lambda kv: -kv[1])[:10])
    return items, summary


def create_job(rt, action: str, *, actor: str, ids=None, filter_args: dict | None = None,
               only_valid: bool = False, upto: int | None = None, note: str | None = None,
               force: bool = False, start: bool = True) -> int:
    """Make a job over the selected entries (fixed now, with their versions) and start it."""
    if action not in JOB_ACTIONS:
        raise JobError(f"action {action!r} is not valid: use republish or close")
    items, summary = select_items(rt, ids=ids, filter_args=filter_args, only_valid=only_valid, upto=upto)
    if not items:
        raise JobError("No entries match; nothing to do.")
    summary["force"] = bool(force)
    now = utcnow()
    with write_transaction(rt.engine) as conn:
        job_id = conn.execute(insert(JOBS).values(
            action=action, actor=actor, state="queued", note=(note or "").strip() or None,
            selection=json.dumps(summary), total=len(items), done=0, failed=0, cancel_requested=False,
            created_at=now)).inserted_primary_key[0]
        actions.insert_rows(conn, ITEMS, [{"job_id": job_id, "entry_id": i["id"], "version": i["version"],
                                           "state": "pending"} for i in items])
        conn.execute(insert(ACTIONS).values(job_id=job_id, action=f"bulk_{action}", actor=actor, at=now,
                                            note=(note or "").strip() or None,
                                            detail=json.dumps({"total": len(items), **summary})))
    if start:
        runner_for(rt).submit(job_id)
    return job_id


def cancel_job(rt, job_id: int, *, actor: str) -> bool:
    """Ask a job to stop after its current window; False if it had already finished."""
    with write_transaction(rt.engine) as conn:
        job = conn.execute(select(JOBS.c.state).where(JOBS.c.id == job_id)).first()
        if job is None:
            raise ActionError(f"No job {job_id}.")
        if job.state in FINISHED:
            return False
        conn.execute(update(JOBS).where(JOBS.c.id == job_id).values(cancel_requested=True))
        conn.execute(insert(ACTIONS).values(job_id=job_id, action="cancel_job", actor=actor, at=utcnow(),
                                            detail="{}"))
    runner = getattr(rt, "jobs", None)
    if runner is not None:
        runner.wake(job_id)
    return True


def job_status(rt, job_id: int, *, item_state: str | None = None, limit: int = 200) -> dict[str, Any] | None:
    """A job's progress and the results of (some of) its items."""
    with rt.engine.connect() as conn:
        job = conn.execute(select(JOBS).where(JOBS.c.id == job_id)).first()
        if job is None:
            return None
        counts = dict(conn.execute(select(ITEMS.c.state, func.count()).where(ITEMS.c.job_id == job_id)
                                   .group_by(ITEMS.c.state)).all())
        # An item this job published keeps no sentence of its own: its intent has the PubAck.
        published = ITEMS.outerjoin(INTENTS, and_(INTENTS.c.job_id == ITEMS.c.job_id,
                                                  INTENTS.c.entry_id == ITEMS.c.entry_id,
                                                  INTENTS.c.state == "published", ITEMS.c.result.is_(None)))
        query = (select(ITEMS.c.entry_id, ITEMS.c.version, ITEMS.c.state, ITEMS.c.result, INTENTS.c.msg_id,
                        INTENTS.c.stream, INTENTS.c.seq, INTENTS.c.duplicate)
                 .select_from(published).where(ITEMS.c.job_id == job_id))
        if item_state:
            query = query.where(ITEMS.c.state == item_state)
        items = conn.execute(query.order_by(ITEMS.c.entry_id).limit(limit)).all()
    m = job._mapping
    finished = sum(counts.get(s, 0) for s in ("done", "failed", "skipped", "cancelled"))
    return {
        "id": m["id"], "action": m["action"], "actor": m["actor"], "state": m["state"], "note": m["note"],
        "selection": json.loads(m["selection"] or "{}"), "total": m["total"],
        "done": counts.get("done", 0), "failed": counts.get("failed", 0), "skipped": counts.get("skipped", 0),
        "cancelled": counts.get("cancelled", 0), "pending": counts.get("pending", 0),
        "percent": round(100 * finished / m["total"], 1) if m["total"] else 100.0,
        "cancel_requested": bool(m["cancel_requested"]), "created_at": format_time(m["created_at"]),
        "finished_at": format_time(m["finished_at"]),
        "items": [{"entry_id": r.entry_id, "version": r.version, "state": r.state,
                   "result": r.result or (_ack_sentence(actions.Published(r.msg_id, r.stream, r.seq, r.duplicate))
                                          if r.msg_id else None)} for r in items],
    }


# --- pacing ----------------------------------------------------------------------------------

class TokenBucket:
    """At most ``rate`` tokens a second after an initial burst of ``burst`` (rate 0: no limit)."""

    def __init__(self, rate: float, burst: int):
        self.rate, self.capacity = rate, max(1, burst)
        self.tokens, self.at = float(self.capacity), time.monotonic()

    def take(self, n: int, stop: threading.Event) -> bool:
        """Wait until ``n`` (at most the burst) tokens are there and take them; False if stopped."""
        if self.rate <= 0:
            return True
        n = min(n, self.capacity)
        while True:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
            self.at = now
            if self.tokens >= n:
                self.tokens -= n
                return True
            if stop.wait((n - self.tokens) / self.rate):
                return False


def window_size(rate: int) -> int:
    """Items per window: a tenth of a second's worth when rate-limited, so pacing stays smooth."""
    return WINDOW if rate <= 0 else max(1, min(WINDOW, rate // 10))


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


# --- running ---------------------------------------------------------------------------------

class WaitForNats(Exception):
    """The window could not finish because NATS is down; its items stay pending."""


class JobRunner:
    """One thread per running job, plus a recovery thread that finishes pending intents and
    resumes jobs left unfinished (by a crash here, or by another process whose lease ran out)."""

    def __init__(self, rt):
        self.rt = rt
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._threads: dict[int, threading.Thread] = {}
        self._wakes: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self._recovery: threading.Thread | None = None
        # Set once the first recovery pass after start has run (what a restart waits for).
        self.recovered = threading.Event()

    def start(self, interval: float = 5.0) -> "JobRunner":
        """Start the recovery thread: it waits for NATS without blocking the caller."""
        self._recovery = threading.Thread(target=self._recover_forever, args=(interval,),
                                          name="republish-recovery", daemon=True)
        self._recovery.start()
        return self

    def _recover_forever(self, interval: float) -> None:
        first = True
        while not self._stop.is_set():
            try:
                bridge = self.rt.bridge
                if bridge is not None and bridge.state.connected:
                    # At start every pending intent is abandoned; later only those whose
                    # publish got no answer, or that are older than any publish can take.
                    actions.recover_pending(self.rt, older_than=0 if first else 3 * self.rt.settings.request_timeout)
                    first = False
                self.resume_unfinished()
                if not first:
                    self.recovered.set()
            except Exception:
                log.exception("recovering republishes and jobs failed; retrying")
            self._stop.wait(0.5 if first else interval)

    def resume_unfinished(self) -> None:
        """Start a thread for every unfinished job that no thread here is running."""
        with self.rt.engine.connect() as conn:
            ids = [r[0] for r in conn.execute(select(JOBS.c.id).where(JOBS.c.state.in_(("queued", "running")))
                                              .order_by(JOBS.c.id))]
        for job_id in ids:
            self.submit(job_id)

    def submit(self, job_id: int) -> None:
        """Run a job in its own thread (no-op if one is running it already)."""
        with self._lock:
            thread = self._threads.get(job_id)
            if self._stop.is_set() or (thread is not None and thread.is_alive()):
                return
            self._wakes[job_id] = threading.Event()
            thread = threading.Thread(target=self._run, args=(job_id,), name=f"job-{job_id}", daemon=True)
            self._threads[job_id] = thread
            thread.start()

    def wake(self, job_id: int) -> None:
        """Interrupt a job's pacing wait (after a cancel)."""
        event = self._wakes.get(job_id)
        if event is not None:
            event.set()

    def join(self, job_id: int, timeout: float | None = None) -> None:
        """Wait for a job's thread to end (tests, the benchmark)."""
        thread = self._threads.get(job_id)
        if thread is not None:
            thread.join(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every job thread after its current window (they resume at the next start)."""
        self._stop.set()
        for event in list(self._wakes.values()):
            event.set()
        for thread in [self._recovery, *self._threads.values()]:
            if thread is not None:
                thread.join(timeout)

    # --- one job ---------------------------------------------------------------------------

    def _run(self, job_id: int) -> None:
        lease = f"job:{job_id}"
        try:
            if not acquire_lease(self.rt.engine, lease, self.holder, LEASE_SECONDS):
                return  # another process runs it
            with write_transaction(self.rt.engine) as conn:
                conn.execute(update(JOBS).where(JOBS.c.id == job_id, JOBS.c.state == "queued").values(state="running"))
            JobWork(self, job_id, lease).run()
        except Exception:
            log.exception("job %d stopped; it resumes at the next recovery pass", job_id)
        finally:
            try:
                release_lease(self.rt.engine, lease, self.holder)
            except Exception:
                log.debug("releasing the lease of job %d failed", job_id, exc_info=True)


class JobWork:
    """One job's loop: windows of pending items, paced by the token bucket.

    Republish windows are pipelined: while one window's publishes are out, the next window's
    intents are committed and the previous window's outcomes are recorded, so the database
    and the broker work at the same time. Each window's intents are committed before its
    publish starts, and its outcomes after its answers arrive.
    """

    def __init__(self, runner: JobRunner, job_id: int, lease: str):
        self.runner, self.rt, self.job_id, self.lease = runner, runner.rt, job_id, lease
        self.wake = runner._wakes[job_id]
        rate = self.rt.settings.republish_rate
        self.size = window_size(rate)
        self.bucket = TokenBucket(rate, self.size)
        self.renewed = time.monotonic()
        self.flights: list[tuple[list[Intent], Any]] = []

    def _job(self):
        if time.monotonic() - self.renewed > LEASE_SECONDS / 3:
            acquire_lease(self.rt.engine, self.lease, self.runner.holder, LEASE_SECONDS)
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
                if self.runner._stop.is_set() or job["state"] in FINISHED:
                    return self._land()
                if job["cancel_requested"]:
                    self._land()
                    return self._finish(cancelled=True)
                if (republish or self.rt.settings.delete_on_close) and actions.nats_unreachable(self.rt):
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
                actions.end_flight(intents)

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
                actions.end_flight(oldest[0])
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
                actions.end_flight(intents)

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
                results[item.entry_id] = ("done", _ack_sentence(exc.publish))
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
        actions.start_flight(intents)
        try:
            for intent in intents:
                actions.fault_point("after_intent", intent)
            bridge = self.rt.bridge
            return intents, bridge.spawn(publish_window(bridge.js, intents, self.rt.settings.request_timeout))
        except BaseException:
            actions.end_flight(intents)
            raise

    def _answers(self, intents: list[Intent], future) -> list[Any]:
        try:
            answers = future.result(self.rt.settings.request_timeout + 5)
        except Exception as exc:  # the loop stopped, or no answer in time: classified per intent
            answers = [exc] * len(intents)
        for intent in intents:
            actions.fault_point("after_publish", intent)
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
            nothing_stored, status, sentence = classify_failure(answer, intent)
            if not nothing_stored:
                in_doubt.append(intent)
            elif status == 422:
                failed.append((intent, sentence))
                results[intent.entry_id] = ("failed", sentence)
            else:
                retry_later.append((intent, sentence))
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
            rows = {r.id: r._mapping for r in conn.execute(select(ENTRIES).where(ENTRIES.c.id.in_(ids)))}
            pending = pending_intents(conn, ids)
            closing = []
            for item in items:
                row = rows.get(item.entry_id)
                try:
                    if row is None:
                        raise ActionError("The entry no longer exists.")
                    decide_close(row, item.version, pending.get(item.entry_id, []))
                    closing.append((item, row))
                except Conflict as exc:
                    results[item.entry_id] = ("skipped", str(exc))
                except ActionError as exc:
                    results[item.entry_id] = ("failed", str(exc))
            deleted: dict[int, str] = {}
            to_delete = [row for _, row in closing if row["dlq_stream"] and row["dlq_seq"]]
            if rt.settings.delete_on_close and to_delete:
                deleted = actions.delete_from_dlq(rt, to_delete)
            if closing:
                conn.execute(update(ENTRIES).where(ENTRIES.c.id == bindparam("b_id"),
                                                   ENTRIES.c.version == bindparam("b_version"))
                             .values(version=ENTRIES.c.version + 1, **actions.close_values(job["actor"], job["note"], now)),
                             [{"b_id": item.entry_id, "b_version": item.version} for item, _ in closing])
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


def _ack_sentence(publish) -> str:
    if publish is None:
        return "Republished earlier."
    copy = " (a duplicate the broker had already stored)" if publish.duplicate else ""
    return f"Published to {publish.stream} seq {publish.seq}{copy}, msgId {publish.msg_id}."


def _write_results(conn, job_id: int, results: dict[int, tuple[str, str | None]]) -> None:
    if not results:
        return
    # Only this job's runner (it holds the job's lease) moves its items out of pending, once.
    plain = [e for e, (s, r) in results.items() if s == "done" and r is None]
    if plain:
        conn.execute(update(ITEMS).where(ITEMS.c.job_id == job_id, ITEMS.c.entry_id.in_(plain),
                                         ITEMS.c.state == "pending").values(state="done"))
    actions.update_rows(conn, ITEMS, "entry_id", [{"entry_id": e, "state": s, "result": r}
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


def runner_for(rt) -> JobRunner:
    """The runtime's job runner (made on first use; Runtime.start also starts its recovery)."""
    if getattr(rt, "jobs", None) is None:
        rt.jobs = JobRunner(rt)
    return rt.jobs
