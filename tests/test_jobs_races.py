"""A bulk republish and a close of the same entry at the same moment, by two people: one wins,
the other is told so; an entry is never both closed and republished."""

from __future__ import annotations

import threading

import pytest

from dlq_dashboard.actions.bulk import jobs, work
from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.actions.errors import Conflict

from . import support


@pytest.mark.both_databases
def test_a_close_while_a_job_claims_its_entry_waits_for_the_claim_and_is_refused(app, rt, nats_server):
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-%d"}' % i for i in range(5)])
    # The job's claim of its window is held before its intents are written, as a slow server would.
    claimed, go = threading.Event(), threading.Event()
    original = work.write_claims

    def held(conn, claims):
        claimed.set()
        go.wait(10)
        return original(conn, claims)

    work.write_claims = held
    outcome: list = []
    try:
        job_id = jobs.create_job(rt, "republish", actor="ann", ids=ids)
        assert claimed.wait(20), "the job did not claim its window"

        def close():
            try:
                outcome.append(close_entry(rt, ids[0], 1, actor="bob", note="not this one"))
            except Conflict as exc:
                outcome.append(exc)

        closer = threading.Thread(target=close)
        closer.start()
        closer.join(2)  # before the fix the close decided here, on an entry the claim had read
        go.set()
        closer.join(20)
        rt.jobs.join(job_id, timeout=60)
    finally:
        work.write_claims = original
        go.set()
    # The claim came first: the close waited for it, then saw its republish pending (or, had the
    # job recorded it meanwhile, the version it raised).
    [refused] = outcome
    assert isinstance(refused, Conflict), refused
    assert "has a republish" in str(refused) or "changed since you saw it (version 1, now 2)" in str(refused)
    entry = rt.store.get_entry(ids[0])
    assert (entry.status, entry.version, entry.closed_by) == ("republished", 2, None)
    status = jobs.job_status(rt, job_id, limit=0)
    assert (status["state"], status["done"]) == ("done", 5)
    published = support.stream_messages(nats_server.url)
    assert sorted(m.headers["Nats-Msg-Id"].rsplit(":e", 1)[1] for m in published) == sorted(f"{i}:v1" for i in ids)


def test_an_entry_someone_else_republished_meanwhile_is_skipped_not_counted_as_the_jobs(app, rt, nats_server):
    """Chosen for a job, then republished by another operator before the job reached it: the job
    sends nothing more and says who did, rather than counting it as done by itself."""
    from dlq_dashboard.actions.republish import republish_entry

    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-%d"}' % i for i in range(3)])
    job_id = jobs.create_job(rt, "republish", actor="ann", ids=ids, start=False)
    republish_entry(rt, ids[0], 1, actor="bob")
    rt.jobs.submit(job_id)
    support.wait_for(lambda: jobs.job_status(rt, job_id, limit=0)["state"] == "done", message="the job to finish")
    items = {i["entry_id"]: i for i in jobs.job_status(rt, job_id)["items"]}
    assert [items[i]["state"] for i in ids] == ["skipped", "done", "done"]
    assert items[ids[0]]["result"].startswith("Republished by bob meanwhile: Published to ORDERS seq 1")
    assert len(support.stream_messages(nats_server.url)) == 3
