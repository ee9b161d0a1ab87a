"""One bulk job's work: its windows of items, republished or closed, and the items' results.

Republish windows go through the same intents as a single republish (actions/intents.py),
published with ``publish_async`` so a window costs one round trip (from a process of its own
for a big job, publisher.py), and the outcome of a window is committed with the items' results.
A crash leaves intents pending; they are finished with their own msgIds, and the job resumes
with the items not yet done. runner.py runs the threads. With several sources a republish job
goes by lanes, a source each (lanes.py): each source's windows are its own, paced on their own,
published through that source's connection, and wait for that source's NATS alone.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from sqlalchemy import select, update

from ...db.engine import is_sqlite, retried_write, write_transaction
from ...db.installation import installation_id
from ...db.leases import acquire_lease
from ...db.rows import UNCACHED, among
from ...nats.bridge import NatsUnavailable
from ...times import utcnow

# fault_point is looked up on its module at each call, so that tests replacing it reach jobs too.
from .. import publishing
from ..context import ActionContext
from ..decisions import decide_republish, locking, write_claims
from ..errors import AlreadyRepublished, Conflict, InFlight, NatsDown, Refused, SchemaRefused
from ..intents import (ENTRIES, INTENTS, Intent, decision_intent, mark_in_doubt, record_failed,
                       record_published)
from ..publishing import classify_failure, nats_unreachable
from .closing import close_window, count_results, write_results
from .jobs import FINISHED, ITEMS, JOBS, REPUBLISHING, ack_sentence
from .lanes import Lane, Lanes, not_configured, publisher_settings, read_window
from .pacing import window_size
from .patching import Unpatchable, patch_for_job
from .refusals import schema_sentence
from .repairing import repair_for_job
from ..stored import SEARCH_SECONDS
from .publisher import Publisher, publish_searched, publish_window
from .recorders import Recorders
from .standing import ActorWatch
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
    "dlq_seq", "original_stream", "original_seq", "source")]


# --- one job ---------------------------------------------------------------------------------

class WaitForNats(Exception):
    """The window could not finish because NATS is down; its items stay pending. ``lane``: the
    lane whose window it was."""

    def __init__(self, message: str, lane: Lane | None = None):
        super().__init__(message)
        self.lane = lane


class JobWork:
    """One job's loop: windows of pending items, paced by the token bucket.

    Republish windows are pipelined: while one window's publishes are out, the next window's
    intents are committed and the previous window's outcomes are recorded, so the database
    and the broker work at the same time. Each window's intents are committed before its
    publish starts, and its outcomes after its answers arrive. On SQLite one transaction a
    window does both; on PostgreSQL the outcomes have connections and threads of their own
    (RECORDERS windows' outcomes at once, each its own transaction).
    """

    def __init__(self, rt: ActionContext, job_id: int, *, lease: str, holder: str, wake: threading.Event,
                 stop: threading.Event):
        self.rt, self.job_id, self.lease, self.holder = rt, job_id, lease, holder
        self.wake, self.stop = wake, stop
        self.action: str | None = None  # set when the job is first read (_paced): only republishes are paced
        self.watch = ActorWatch(rt, job_id)  # who started it, looked at each turn (standing.py)
        self.size, self.rate = window_size(0), 0
        self.renewed = time.monotonic()
        # Windows published and not recorded yet: (intents, the answers' future, the lane).
        self.flights: list[tuple[list[Intent], Any, Lane]] = []
        # The job's lanes (a source each, or one), made when it is first read; the lane of this
        # turn's window. A lane has its token bucket and its publishing process (publisher.py).
        self.lanes: Lanes | None = None
        self.lane: Lane | None = None
        # PostgreSQL: a window's outcome is recorded on a connection of its own (see _republish_recording_apart).
        self.recorder: Recorders | None = None
        # A lane's items are taken in entry order after its ``after``; a pass from the start again
        # picks up leftovers. ``ahead``: the job, the next lane and its window, read at the end of
        # the window before's transaction (a connection and two statements a window fewer, each a
        # wait for the interpreter lock while the bridge's loop publishes).
        self.ahead: tuple[Any, Lane | None, list] | None = None

    def _renew(self) -> None:
        if time.monotonic() - self.renewed > LEASE_SECONDS / 3:
            acquire_lease(self.rt.engine, self.lease, self.holder, LEASE_SECONDS)
            self.renewed = time.monotonic()

    def _paced(self, action: str) -> None:
        """DLQ_REPUBLISH_RATE paces what a job publishes; a close publishes nothing, so it goes in
        whole windows unpaced (15,000 closes took 76 s at the republish rate)."""
        self.action = action
        self.rate = self.rt.settings.republish_rate if action in REPUBLISHING else 0
        self.size = window_size(self.rate)

    def _read_job_and_window(self, conn):
        """The job as it is now, the lane whose turn it is and its next window of pending items."""
        job = conn.execute(select(JOBS).where(JOBS.c.id == self.job_id)).first()._mapping
        if self.action is None:
            self._paced(job["action"])
        if self.lanes is None:
            self.lanes = Lanes.of_job(self.rt, conn, job, job["action"] in REPUBLISHING, self.rate, self.size)
        lane = self.lanes.pick(self.rt)
        return job, lane, read_window(conn, self.job_id, lane, self.size)

    def _wants_publisher(self, job) -> bool:
        rate = self.rt.settings.republish_rate
        return job["total"] >= OWN_PUBLISHER_FROM and (rate <= 0 or rate >= OWN_PUBLISHER_RATE)

    def _start_publisher(self) -> Publisher | bool:
        """The publishing process of this turn's lane (its source's NATS), started in the
        background (windows go through the bridge until it is connected); False if it cannot be
        started."""
        try:
            return Publisher(publisher_settings(self.rt, self.lane), self.rt.settings.request_timeout,
                             source=self.lane.source)
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
            self.recorder.shutdown()
        for intents, _, _ in self.flights:
            self.rt.flights.end(intents)
        for lane in self.lanes or ():
            if lane.publisher:
                lane.publisher.close()

    def _begin_turn(self):
        """Renew the lease; the job, the lane whose turn it is and its next window (read now
        after a cancel woke the loop or when that lane's NATS went away, else as the window
        before's transaction read it); start what a republish needs."""
        self._renew()
        if self.wake.is_set() | self.watch.settle():  # a cancel, or its actor may do less: read the job again
            self.wake.clear()
            self.ahead = None
        if self.ahead is not None and self.ahead[1] is not None and not self.lanes.usable(self.rt, self.ahead[1]):
            self.ahead[1].after = 0
            self.ahead = None
        if self.ahead is None:
            with self.rt.engine.connect() as conn:
                self.ahead = self._read_job_and_window(conn)
        (job, self.lane, items), self.ahead = self.ahead, None
        if job["action"] in REPUBLISHING:
            if items and self.lane.publisher is None and self._wants_publisher(job):
                self.lane.publisher = self._start_publisher()
            if self.recorder is None and not is_sqlite(self.rt.engine):
                self.recorder = Recorders(self.job_id)
        return job, items

    def _turn(self, job, items) -> Turn:
        """What next_step decides on, as this turn sees it."""
        needs_nats = job["action"] in REPUBLISHING or (job["action"] == "close" and self.rt.settings.delete_on_close)
        lane, lanes = self.lane, self.lanes
        if lanes.several:
            # NATS is down for this job when every lane left waits for its source's; it is done
            # when its last lane's pass from the first item finds nothing.
            nats_down = lane is None and len(lanes) > 0
            from_start = lane is None or (lane.after == 0 and len(lanes) == 1)
        else:
            nats_down = bool(needs_nats and nats_unreachable(self.rt))
            from_start = lane.after == 0
        return Turn(stopping=self.stop.is_set(), finished=job["state"] in FINISHED,
                    cancel_requested=bool(job["cancel_requested"]), needs_nats=bool(needs_nats),
                    nats_down=nats_down, has_items=bool(items),
                    in_flight=bool(self.flights), recording=self.recorder is not None and self.recorder.busy,
                    from_start=from_start)

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
        for lane in self.lanes:
            lane.after = 0
        self._pause(1.0)
        return True

    def _await_recording(self, job, items) -> bool:
        lane, waiting = self._wait_for_recording()
        if waiting:  # its republishes wait for NATS: a second, then a new pass
            self._lane_waits(lane)
        return True

    def _finish(self, job, items) -> bool:
        self._end_job(cancelled=False)
        return False

    def _start_over(self, job, items) -> bool:
        if self.lanes.several and self.lane is not None and self.lane.after == 0:
            self.lanes.drop(self.lane)  # its pass from the first item found nothing: its items are settled
            if self.lane.publisher:  # nothing of it is in flight (a start over comes after the last outcome)
                self.lane.publisher.close()
                self.lane.publisher = False
        elif self.lane is not None:
            self.lane.after = 0
        return True

    def _lane_waits(self, lane: Lane | None) -> None:
        """A lane's republishes wait for NATS: with one lane the job pauses a second and starts a
        new pass; with several that lane alone waits a second, and the others go on."""
        if self.lanes.several and lane is not None:
            lane.wait_a_second()
            return
        self._pause(1.0)
        for each in self.lanes:
            each.after = 0

    def _work_window(self, job, items) -> bool:
        """Wait for the lane's pacer's tokens, then republish or close the window; a republish
        with no items left records its oldest window in flight."""
        lane = self.lane
        bucket = lane.bucket if lane is not None else None
        if items and bucket is not None and not bucket.take(len(items), self.wake):
            self.wake.clear()
            return True  # woken by a cancel: look at the job again
        after = items[-1][0] if items else (lane.after if lane is not None else 0)
        try:
            if job["action"] in REPUBLISHING:
                self.ahead = self._republish(job, items, after)
            elif items:
                self._close(job, items)
        except (WaitForNats, NatsDown, NatsUnavailable) as exc:
            log.warning("job %d waits for NATS: %s", self.job_id, exc)
            waits = exc.lane if isinstance(exc, WaitForNats) and exc.lane is not None else lane
            if lane is not None and waits is not lane and items:
                lane.after = after  # its window was claimed and sent; another lane's waits
            self._lane_waits(waits)
            return True
        if items and lane is not None:
            lane.after = after
        return True

    def _republish(self, job, items, after: int):
        """Keep two windows in flight. When the older one's answers are in, one transaction
        records them, commits the next window's intents (one commit a window) and reads the
        window after; the next window's publish starts while the other is still out. Returns
        what it read: the job, the next lane and its items (this lane's after ``after``)."""
        if self.recorder is not None:
            return self._republish_recording_apart(job, items, after)
        oldest = None
        if len(self.flights) >= 2 or (self.flights and not items):
            oldest = self.flights.pop(0)
        try:
            answers = self._answers(*oldest[:2]) if oldest else None
            waiting, (claims, ahead) = retried_write(self.rt.engine, lambda conn: (
                self._write_outcomes(conn, oldest[0], answers) if oldest else 0,
                self._claim_and_read(conn, job, items, after)))
        finally:
            if oldest:
                self.rt.flights.end(oldest[0])
        if claims:
            self.flights.append(self._start([intent for _, intent in claims]))
        if waiting:
            raise WaitForNats(f"{waiting} republishes wait for NATS", oldest[2])
        return ahead

    def _claim_and_read(self, conn, job, items, after: int):
        """Commit the next window's intents and read the job and the window after (in the caller's
        transaction, run again if PostgreSQL aborts it as a deadlock's victim: nothing is sent in it)."""
        claims = self._claim(conn, job, items) if items else []
        self._advance(after)
        return claims, self._read_job_and_window(conn)

    def _advance(self, after: int) -> None:
        """This turn's lane has taken its items up to ``after``."""
        if self.lane is not None:
            self.lane.after = after

    def _republish_recording_apart(self, job, items, after: int):
        """_republish on PostgreSQL: the older window's answers are awaited and recorded by the
        recorders (recorders.py), each outcome in a transaction of its own, while this one
        commits the next window's intents."""
        # the outcomes recorded meanwhile (their errors are raised here); the oldest awaited
        # when every recorder is busy
        waiting_lane, waiting = self.recorder.recorded(block=self.recorder.full)
        if len(self.flights) >= 2 or (self.flights and not items):
            self.recorder.submit(self._record, *self.flights.pop(0))
        claims, ahead = retried_write(self.rt.engine, lambda conn: self._claim_and_read(conn, job, items, after))
        if claims:
            self.flights.append(self._start([intent for _, intent in claims]))
        if waiting:
            raise WaitForNats(f"{waiting} republishes wait for NATS", waiting_lane)
        return ahead

    def _record(self, intents: list[Intent], future, lane: Lane) -> tuple[Lane, int]:
        try:
            answers = self._answers(intents, future)
            return lane, retried_write(self.rt.engine, lambda conn: self._write_outcomes(conn, intents, answers))
        finally:
            self.rt.flights.end(intents)

    def _wait_for_recording(self) -> tuple[Lane | None, int]:
        """Wait for every outcome being recorded (the first error is raised here); returns the
        first lane whose republishes wait for NATS and how many of them do, or (None, 0)."""
        return self.recorder.wait() if self.recorder is not None else (None, 0)

    def _record_in_flight(self) -> None:
        """Record every window still in flight."""
        self._wait_for_recording()
        while self.flights:
            intents, future, _ = self.flights.pop(0)
            try:
                answers = self._answers(intents, future)
                retried_write(self.rt.engine, lambda conn: self._write_outcomes(conn, intents, answers))
            finally:
                self.rt.flights.end(intents)

    def _claim(self, conn, job, items) -> list[tuple[str, Intent]]:
        rt, now = self.rt, utcnow()
        selection = json.loads(job["selection"] or "{}")
        # Asked for only those that pass, a payload the schema fails is left out, override or not
        # (create_job records no override then; a job made before it did may carry both).
        force = bool(selection.get("force")) and not selection.get("only_valid")
        patch = selection.get("patch") if job["action"] == "patch" else None
        results: dict[int, tuple[str, str]] = {}
        claims: list[tuple[str, Intent]] = []
        ids = [entry_id for entry_id, _ in items]
        names = [c.name for c in _CLAIM_COLUMNS]
        rows = {r[0]: dict(zip(names, r)) for r in conn.execute(  # locked: a close meanwhile waits, then sees them
            locking(conn, select(*_CLAIM_COLUMNS).where(among(conn, ENTRIES.c.id, ids))), execution_options=UNCACHED)}
        # One look at these entries' intents: each decision's own (a retry, a resume: found by entry and
        # version, so one made before the installation id keeps its msgId) and any pending.
        wanted, decided, pending = dict(items), {}, {}
        for row in conn.execute(select(INTENTS).where(among(conn, INTENTS.c.entry_id, ids)),
                                execution_options=UNCACHED):
            intent = Intent.from_row(row)
            if wanted.get(intent.entry_id) == intent.version:
                decided.setdefault(intent.entry_id, []).append(intent)
            if intent.state == "pending":
                pending.setdefault(intent.entry_id, []).append(intent)
        existing, installation = {e: decision_intent(found) for e, found in decided.items()}, installation_id(conn)
        for entry_id, version in items:
            if entry_id not in rows:
                results[entry_id] = ("failed", "The entry no longer exists.")
                continue
            if self.lane is not None and not self.lane.configured:
                results[entry_id] = ("failed", not_configured(self.lane.source, entry_id))
                continue
            earlier = existing.get(entry_id)
            try:
                # A patch gives the same bytes every time (patching.py): a resumed item asks for its own
                # intent. One already published or pending carries its payload: nothing to patch again.
                fresh = earlier is None or earlier.state == "failed"
                payload = patch_for_job(rt, patch, rows[entry_id], bool(selection.get("only_valid"))) \
                    if patch is not None and fresh else \
                    repair_for_job(rt, rows[entry_id]) if job["action"] == "repair" and fresh else None
                claims.append(decide_republish(
                    rt, rows[entry_id], version, earlier,
                    [p for p in pending.get(entry_id, []) if earlier is None or p.id != earlier.id],
                    installation=installation, actor=job["actor"], payload=payload, force=force, job_id=self.job_id,
                    resume_pending=True, now=now))
            except Unpatchable as exc:
                results[entry_id] = ("skipped", str(exc))
            except AlreadyRepublished as exc:  # by this job before a crash, or by another meanwhile
                results[entry_id] = ("done", ack_sentence(exc.publish)) if earlier.job_id == self.job_id else (
                    "skipped", f"Republished by {earlier.actor} meanwhile: {ack_sentence(exc.publish)}")
            except InFlight:
                pass  # recovery is publishing it: its outcome is read on a later pass
            except Conflict as exc:
                results[entry_id] = ("skipped", str(exc))
            except SchemaRefused as exc:
                # Asked for only those that pass: one taken unjudged (jobs.JUDGED_NOW) is left out.
                results[entry_id] = ("skipped", schema_sentence(exc.schema, True, (exc.errors or [{}])[0], exc.unusable)) \
                    if selection.get("only_valid") and job["action"] == "republish" else ("failed", str(exc))
            except Refused as exc:
                results[entry_id] = ("failed", str(exc))
        write_claims(conn, claims)
        write_results(conn, self.job_id, results)
        return claims

    def _start(self, intents: list[Intent]):
        """Publish a window of one lane: through that lane's process, else its source's bridge."""
        lane = self.lane
        self.rt.flights.start(intents)
        try:
            for intent in intents:
                publishing.fault_point("after_intent", intent)
            # One that may have been sent before a crash is looked for in its stream first: not in a child.
            searched = any(i.resumed for i in intents)
            if lane.publisher and lane.publisher.ready and not searched:
                try:
                    return intents, lane.publisher.publish([(i.subject, i.payload, i.headers) for i in intents]), lane
                except NatsUnavailable:  # the child has ended: the bridge publishes the rest
                    pass
            bridge = self.rt.bridge if lane.source is None else self.rt.bridge_for(intents[0].source)
            if lane.source is not None and (bridge is None or bridge.js is None):
                raise NatsUnavailable(f"the NATS of source {lane.source} is not connected")
            publish = publish_searched if searched else publish_window
            return intents, bridge.spawn(publish(bridge.js, intents, self.rt.settings.request_timeout)), lane
        except BaseException:
            self.rt.flights.end(intents)
            raise

    def _answers(self, intents: list[Intent], future) -> list[Any]:
        try:
            searched = SEARCH_SECONDS if any(i.resumed for i in intents) else 0  # publish_searched looks first
            answers = future.result(self.rt.settings.request_timeout + 5 + searched)
        except Exception as exc:  # the loop stopped, or no answer in time: classified per intent
            answers = [exc] * len(intents)
        # "No responders" or no answer is "no stream" only if NATS says so (asked once a subject).
        answers = publishing.as_answered_all(self.rt, answers, intents)
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
        write_results(conn, self.job_id, {i.entry_id: results[i.entry_id] for i in intents
                                           if i.msg_id in recorded and i.entry_id in results})
        return len(retry_later) + len(in_doubt)

    def _close(self, job, items) -> None:
        close_window(self.rt, self.job_id, job, items)

    def _end_job(self, *, cancelled: bool) -> None:
        with write_transaction(self.rt.engine) as conn:
            if cancelled:
                conn.execute(update(ITEMS).where(ITEMS.c.job_id == self.job_id, ITEMS.c.state == "pending")
                             .values(state="cancelled", result="Cancelled before it was processed."))
            conn.execute(update(JOBS).where(JOBS.c.id == self.job_id).values(
                state="cancelled" if cancelled else "done", finished_at=utcnow()))
            count_results(conn, self.job_id)
