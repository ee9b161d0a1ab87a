"""On PostgreSQL a bulk republish records its windows' outcomes on RECORDERS connections at once
(the server's UPDATE of each entry is most of an outcome's time): windows recorded side by side
publish each entry once and keep the counts of every group they touch exact."""

from __future__ import annotations

import threading

import pytest

from dlq_dashboard.actions.bulk import jobs, recorders, work
from dlq_dashboard.db.models import Entry

from . import support
from .test_jobs import count
from .test_tallies import kept, truth

# A cause a group: words, since the digits of an error are a variable part of its group's key.
CAUSES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]
ENTRIES = 1200


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """Windows of 200 (a tenth of a second at 2,000 a second): six windows for the job."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, republish_rate=2000,
                                 request_timeout=5.0)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_windows_recorded_side_by_side_publish_each_entry_once_and_keep_every_groups_counts(
        app, rt, nats_server, monkeypatch):
    support.make_orders_stream(nats_server.url)
    # Each window holds entries of every group, in an order that differs from window to window.
    messages = [("dlq.orders.created", b'{"order_id": "o-%d"}' % i,
                 support.dlq_headers("orders.created", Dlq_Reason="fatal",
                                     Dlq_Error=f"{CAUSES[(i * 7 + i // 200) % len(CAUSES)]} failed"))
                for i in range(ENTRIES)]
    support.run(support.publish_many(nats_server.url, messages), timeout=60)
    support.wait_for(lambda: support.entry_count(rt.engine) == ENTRIES, timeout=60, message="the mirror")
    assert len({g for g, _ in truth(rt.engine)[0]}) == len(CAUSES)

    # The first outcome is held until a second one is being recorded beside it (at most 10 s).
    running, most, lock, second = [0], [0], threading.Lock(), threading.Event()
    original = work.JobWork._record

    def record(self, intents, future, lane):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            if running[0] > 1:
                second.set()
        try:
            second.wait(10)
            return original(self, intents, future, lane)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(work.JobWork, "_record", record)
    job_id = jobs.create_job(rt, "republish", actor="alice", filter_args={"subject": "orders.created"})
    rt.jobs.join(job_id, timeout=90)

    assert second.is_set() and most[0] == recorders.RECORDERS == 2
    status = jobs.job_status(rt, job_id, limit=0)
    assert (status["state"], status["done"], status["failed"]) == ("done", ENTRIES, 0)
    published = support.stream_messages(nats_server.url)
    assert len(published) == ENTRIES and len({m.headers["Nats-Msg-Id"] for m in published}) == ENTRIES
    assert count(rt, Entry, Entry.status == "republished", Entry.version == 2) == ENTRIES
    assert kept(rt.engine) == truth(rt.engine)
