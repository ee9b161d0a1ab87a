"""GET /readyz, a load balancer's readiness check (docs/deploy.md, "Health: liveness and
readiness"): a replica is ready while the database answers, whatever its mirror and NATS do, so
that a burst the mirror catches up, or a replica taking the mirror over, never takes every
replica of a desk out of the rotation at once, as /healthz as the readiness check did."""

from __future__ import annotations

import pytest

from dlq_dashboard.runtime import runtime_of

from . import support
from .postgres import PostgresServer

pytestmark = [pytest.mark.timeout(180)]


def ready(app) -> tuple[int, dict]:
    response = app.test_client().get("/readyz")
    return response.status_code, response.get_json()


def test_a_replica_whose_mirror_is_stuck_and_behind_is_degraded_but_ready(app, nats_server, monkeypatch):
    rt = runtime_of(app)
    support.wait_for(lambda: rt.mirror.leader, timeout=30, message="the mirror to lead")
    assert ready(app) == (200, {"status": "ready"})
    progress = rt.mirror.progress["DLQ"]
    # Stuck until the test ends: the idle follower notes "nothing left to write" every second,
    # which clears the error (in CI once before /healthz read it).
    monkeypatch.setattr(progress, "recovered", lambda: None)
    progress.stuck(RuntimeError("disk full"))
    health = app.test_client().get("/healthz")
    assert health.status_code == 503 and health.get_json()["status"] == "degraded"
    assert ready(app) == (200, {"status": "ready"})


def test_a_replica_without_nats_is_ready(offline_app):
    assert offline_app.test_client().get("/healthz").status_code == 503
    assert ready(offline_app) == (200, {"status": "ready"})


@pytest.fixture(scope="module")
def own_postgres():
    """A PostgreSQL server of this module's own: its test stops it."""
    server = PostgresServer().start()
    yield server
    server.remove()


def test_a_replica_is_not_ready_while_its_database_is_away_and_ready_again_after(own_postgres, make_app):
    url = own_postgres.create_database(migrated=True)
    app = make_app(online=True, database_url=url)
    assert ready(app) == (200, {"status": "ready"})
    own_postgres.stop()
    try:
        support.wait_for(lambda: ready(app)[0] == 503, timeout=30, message="/readyz to say not ready")
        status, body = ready(app)
        assert body["status"] == "not ready" and body["database"]["connected"] is False
        assert body["database"]["unreachable_since"]
        assert set(body) == {"status", "database"}  # nothing of the server's address or the driver's text
    finally:
        own_postgres.start()
    support.wait_for(lambda: ready(app) == (200, {"status": "ready"}), timeout=30, message="/readyz ready again")
