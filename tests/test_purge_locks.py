"""On PostgreSQL a purge and a bulk job's recording lock the same rows (a group's counts, the
job's counters): they take them in one order, so neither waits for the other in a circle, and a
transaction PostgreSQL still aborts as a deadlock's victim is run again."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from sqlalchemy import insert, select, text, update

from dlq_dashboard.actions.bulk.closing import write_results
from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.actions.purge import purge_entries
from dlq_dashboard.db.counts import GROUPS
from dlq_dashboard.db.engine import retried_write, write_transaction
from dlq_dashboard.db.models import Entry, Job, JobItem, Lease
from dlq_dashboard.times import utcnow

from . import support

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

DAY = 86400


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """No periodic purge: the test purges when it says so."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, retention=0)


def waiting_for_a_lock(engine, at_least: int = 1) -> None:
    """Wait until ``at_least`` other sessions of this database wait for a row lock."""
    def waiting() -> bool:
        with engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                     "AND wait_event_type = 'Lock'")).scalar() >= at_least
    support.wait_for(waiting, timeout=10, message="a transaction to wait for a lock")


def running_job(engine, done_entry: int, pending_entry: int) -> int:
    """A republish job another replica runs (its lease): one item done, one pending."""
    now = utcnow()
    with write_transaction(engine) as conn:
        job = conn.execute(insert(Job).values(action="republish", actor="alice", state="running", selection="{}",
                                              total=2, done=1, created_at=now).returning(Job.id)).scalar_one()
        conn.execute(insert(JobItem).values(job_id=job, entry_id=done_entry, version=2, state="done"))
        conn.execute(insert(JobItem).values(job_id=job, entry_id=pending_entry, version=1, state="pending"))
        conn.execute(insert(Lease).values(name=f"job:{job}", holder="another-host:1:replica",
                                          expires_at=now + timedelta(minutes=10)))
    return job


def test_a_purge_and_a_jobs_recording_of_the_same_group_and_job_both_finish(app, rt):
    """The purge took the job's row (its purged counts) and then the group's; the job's
    recording the group's and then the job's: "deadlock detected", and one of them stopped."""
    old, pending = [support.dead_letter(rt.engine, seq) for seq in (1, 2)]
    close_entry(rt, old, 1, actor="test")
    with write_transaction(rt.engine) as conn:
        conn.execute(update(Entry).where(Entry.id == old).values(updated_at=utcnow() - timedelta(days=40)))
        group = conn.execute(select(Entry.group_id).where(Entry.id == pending)).scalar_one()
    job = running_job(rt.engine, old, pending)

    # The job's recording, as _write_outcomes orders it: the group's counts, then the job's counters.
    recording = rt.engine.connect()
    transaction = recording.begin()
    recording.execute(update(GROUPS).where(GROUPS.c.id == group).values(last_seen=GROUPS.c.last_seen))
    purged, errors = [], []

    def purge() -> None:
        try:
            purged.append(purge_entries(rt, older_than=30 * DAY, actor="test").total)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=purge)
    thread.start()
    try:
        waiting_for_a_lock(rt.engine)  # the purge waits for the group the recording holds
        write_results(recording, job, {pending: ("done", None)})
        transaction.commit()
    finally:
        recording.close()
        thread.join(30)
    assert errors == [] and purged == [1]
    with rt.engine.connect() as conn:
        done, kept = conn.execute(select(Job.done, Job.purged).where(Job.id == job)).one()
    assert done == 2 and json.loads(kept) == {"done": 1}


def test_a_write_transaction_aborted_as_a_deadlocks_victim_is_run_again_once_with_effect(app, rt):
    """Two transactions lock a job and a group in opposite orders; the retried one is made the
    victim (the other waits longer before looking for a deadlock) and is run again."""
    old = support.dead_letter(rt.engine, 1)
    with rt.engine.connect() as conn:
        group = conn.execute(select(Entry.group_id).where(Entry.id == old)).scalar_one()
    job = running_job(rt.engine, old, support.dead_letter(rt.engine, 2))
    holding, other_errors, attempts = threading.Event(), [], []

    def other() -> None:
        try:
            with write_transaction(rt.engine) as conn:
                conn.execute(text("SET LOCAL deadlock_timeout = '20s'"))
                conn.execute(update(GROUPS).where(GROUPS.c.id == group).values(last_seen=GROUPS.c.last_seen))
                holding.set()
                conn.execute(update(Job).where(Job.id == job).values(failed=Job.failed + 1))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            other_errors.append(exc)

    def work(conn) -> int:
        attempts.append(1)
        conn.execute(update(Job).where(Job.id == job).values(done=Job.done + 1))
        if len(attempts) == 1:
            thread.start()
            assert holding.wait(10)
            waiting_for_a_lock(rt.engine)  # the other waits for the job this one holds
        conn.execute(update(GROUPS).where(GROUPS.c.id == group).values(last_seen=GROUPS.c.last_seen))
        return len(attempts)

    thread = threading.Thread(target=other)
    assert retried_write(rt.engine, work) == 2
    thread.join(30)
    assert other_errors == []
    with rt.engine.connect() as conn:
        assert conn.execute(select(Job.done, Job.failed).where(Job.id == job)).one() == (2, 1)
