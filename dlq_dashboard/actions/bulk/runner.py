"""The job runner: a thread per running bulk job, and the recovery thread.

The recovery thread finishes republishes a crash left pending (actions/recovery.py) and resumes
jobs left unfinished, here or by another process whose lease ran out; each job's own work is a
JobWork (work.py).
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select, update

from ...db.failing import FailureLog
from ...db.engine import write_transaction
from ...db.leases import acquire_lease, new_holder, release_lease
from ...times import utcnow
from ..context import ActionContext
from ..recovery import recover_pending
from .jobs import JOBS
from .lanes import connected, source_names
from .work import LEASE_SECONDS, JobWork

log = logging.getLogger(__name__)


class JobRunner:
    """One thread per running job, plus a recovery thread that finishes pending intents and
    resumes jobs left unfinished (by a crash here, or by another process whose lease ran out)."""

    def __init__(self, rt: ActionContext):
        self.rt = rt
        self.holder = new_holder()
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
        failures = FailureLog(log, "recovering republishes and jobs",
                              again="republishes and jobs are recovered again")
        while not self._stop.is_set():
            try:
                # Each source's pending intents are finished through its own NATS (recovery.py):
                # a pass runs while any of them answers.
                if any(connected(self.rt, name) for name in source_names(self.rt)):
                    # At start every pending intent is abandoned; later only those whose
                    # publish got no answer, or that are older than any publish can take.
                    recover_pending(self.rt, older_than=0 if first else 3 * self.rt.settings.request_timeout,
                                    first=first)
                    first = False
                self.resume_unfinished()
                if not first:
                    self.recovered.set()
                failures.worked()
            except Exception as exc:
                failures.failed(exc)
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
                conn.execute(update(JOBS).where(JOBS.c.id == job_id, JOBS.c.state == "queued")
                             .values(state="running", started_at=utcnow()))
            JobWork(self.rt, job_id, lease=lease, holder=self.holder, wake=self._wakes[job_id],
                    stop=self._stop).run()
        except Exception:
            log.exception("job %d stopped; it resumes at the next recovery pass", job_id)
        finally:
            try:
                release_lease(self.rt.engine, lease, self.holder)
            except Exception:
                log.debug("releasing the lease of job %d failed", job_id, exc_info=True)
