"""A mirror that stops reporting (its process frozen: its lease holds for 15 s more) is not told
as current by the other replicas: their banner says its reports stopped coming instead of the
last count it gave, and their /api/sources counts each stream's lag as NATS's head minus what is
committed, as their /healthz does. Two replicas on one database and one nats-server."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from dlq_dashboard import create_app
from dlq_dashboard.db import mirror_reports
from dlq_dashboard.ingest import mirror as mirror_module
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support
from .test_mirror_hardening import health, publish_dead_letters

LATE = "The mirror's reports stopped coming"


def test_a_report_is_late_once_older_than_its_interval_allows():
    now, grace = utcnow(), mirror_reports.REPORT_GRACE

    def made(ago: float, every: float | None = 5.0) -> mirror_reports.StreamReport:
        return mirror_reports.StreamReport("default", "DLQ", 1, 2, None, None, None, now + timedelta(seconds=10), "h", True,
                            now - timedelta(seconds=ago), every)

    assert made(4).current(now) and not made(4).late(now)
    assert made(5 + grace + 0.5).late(now) and not made(5 + grace + 0.5).current(now)
    assert made(60, None).current(now)  # a replica of before says neither: its lease alone decides


@pytest.mark.both_databases
def test_a_frozen_mirrors_report_is_not_told_as_current_by_the_other_replica(app, settings, nats_server, monkeypatch,
                                                                            database_url):
    rt = runtime_of(app)
    other = create_app({"SETTINGS": settings, "TESTING": True})
    second = runtime_of(other).start()
    thawed = threading.Event()
    try:
        assert second.bridge.wait_connected(10) and rt.mirror.leader and not second.mirror.leader
        frozen, waiting = rt.mirror.holder, second.mirror.holder
        real = mirror_module.acquire_lease

        def acquire(engine, name, holder, *args):
            if holder == frozen:  # the mirroring replica frozen: its database thread stands still
                thawed.wait(120)
            if holder == waiting:  # the other does not take the lease over meanwhile
                return False
            return real(engine, name, holder, *args)

        monkeypatch.setattr(mirror_module, "acquire_lease", acquire)
        viewer = support.logged_in(other, "viewer")
        support.wait_for(lambda: LATE in viewer.get("/status/banner").get_data(as_text=True), timeout=30,
                         message="the other replica to tell the mirror's reports stopped coming")
        with support.writer_stopped(rt):  # frozen whole: nothing more is committed either
            publish_dead_letters(nats_server.url, 3)
            support.wait_for(lambda: health(other)[1]["mirror_lag"] == 3, timeout=10, message="/healthz to count 3")
            banner = viewer.get("/status/banner").get_data(as_text=True)
            # No count of a report that is not current (nor, once its lease has run out, of one that expired).
            assert (LATE in banner or "No process mirrors" in banner) and "not mirrored yet" not in banner, banner
            source = viewer.get("/api/sources").get_json()["sources"][0]
            assert source["status"] == "stuck" and source["mirrored_here"] is False
            assert source["mirror_lag"] == 3 and [s["lag"] for s in source["streams"]] == [3, 0], source
    finally:
        thawed.set()
        second.stop()
