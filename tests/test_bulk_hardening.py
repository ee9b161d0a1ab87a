"""Bulk jobs as an operator meets them: a close is not held to the republish rate, and the
preview says before Start which republishes will be refused and why."""

from __future__ import annotations

import pytest

from dlq_dashboard.actions.bulk import jobs, pacing

from . import support

pytestmark = pytest.mark.both_databases

RATE = 1  # a republish a second: a close job held to it would take minutes


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """A republish rate of one a second, and a schema for orders.* (customer_id required)."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, republish_rate=RATE,
                                 schemas_dir=support.orders_schema_folder(tmp_path))


@pytest.fixture
def rt(app):
    runtime = app.extensions["dlq"]
    assert runtime.jobs.recovered.wait(10)
    return runtime


def test_a_close_job_is_not_paced_by_the_republish_rate(app, rt, monkeypatch):
    ids = [support.dead_letter(app, seq, payload=b'{"order_id": %d}' % seq) for seq in range(1, 301)]
    taken = []
    real_take = pacing.TokenBucket.take

    def take(self, n, stop):
        taken.append(n)
        return real_take(self, n, stop)
    monkeypatch.setattr(pacing.TokenBucket, "take", take)
    job_id = jobs.create_job(rt, "close", actor="alice", ids=ids, note="known outage")
    # At one a second the 300 would need five minutes; the deadline is far below and far above
    # what closing them takes.
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s,
                              timeout=60, message="the close job to finish")
    assert (status["done"], status["failed"]) == (300, 0)
    assert taken == []  # the pacer was never asked
    assert {rt.store.get_entry(i).status for i in ids} == {"closed"}
