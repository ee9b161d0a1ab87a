"""Two real `python app.py` processes on one PostgreSQL database and one nats-server, as behind a
load balancer: one mirror at a time and a takeover after kill -9, a bulk job that runs once and
is resumed by the other replica, a republish raced over both that publishes once, a login valid
on either, and a login throttle that counts failures made on both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests
from sqlalchemy import func, select

from dlq_dashboard.accounts import create_token, create_user
from dlq_dashboard.db.engine import create_db_engine
from dlq_dashboard.db.migrate import migrate
from dlq_dashboard.db.models import Entry, Republish
from dlq_dashboard.ingest.mirror import LEASE_SECONDS
from dlq_dashboard.nats.server import free_port, listens_on

from . import support

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


class Replica:
    """One `python app.py` process of the dashboard, on its own port."""

    def __init__(self, name: str, workdir: Path, env: dict[str, str]):
        self.name, self.workdir, self.env = name, workdir / name, env
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        return self.launch().wait_started()

    def launch(self) -> Replica:
        """Start the process without waiting for it to answer."""
        with open(self.workdir / "app.log", "ab") as log:
            self.proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(self.port)],
                                         cwd=self.workdir, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=support.ends_with_this_process())
        return self

    def wait_started(self) -> Replica:
        def started() -> bool:
            assert self.proc.poll() is None, f"replica {self.name} exited: {self.log()[-2000:]}"
            # Its own answer, not another's on the port (taken before it bound it).
            return self.healthy() and listens_on(self.proc.pid, self.port) is not False

        support.wait_for(started, timeout=60, interval=0.1, message=f"replica {self.name} to answer")
        return self

    def health(self) -> dict | None:
        try:
            return requests.get(f"{self.url}/healthz", timeout=2).json()
        except (requests.RequestException, ValueError):
            return None

    def healthy(self) -> bool:
        return (self.health() or {}).get("status") == "ok"

    def leads(self) -> bool:
        return bool(((self.health() or {}).get("mirror") or {}).get("leader"))

    def kill(self) -> None:
        """kill -9, as a crash would."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return (self.workdir / "app.log").read_text(errors="replace")


def start_all(replicas: list[Replica]) -> None:
    """Start the replicas side by side (a start is mostly imports and the first database round
    trips), then wait until each answers."""
    for replica in replicas:
        replica.launch()
    for replica in replicas:
        replica.wait_started()


@pytest.fixture
def cluster(tmp_path, nats_server, postgres_server, scratch):
    """Two replicas of the dashboard on one PostgreSQL database, with a user and a token (their
    TMPDIR, scratch, is removed afterwards: a replica killed with -9 leaves its mirror's there)."""
    url = postgres_server.create_database(migrated=True)
    engine = create_db_engine(url)
    migrate(engine)  # at the newest revision already: finds nothing to do
    create_user(engine, "ops", support.PASSWORD, "operator")
    token = create_token(engine, "ops-token", "operator")
    support.make_orders_stream(nats_server.url)
    env = {**os.environ, "DATABASE_URL": url, "NATS_URL": nats_server.url, "SECRET_KEY": "shared-by-every-replica",
           "DLQ_REPUBLISH_RATE": "100", "PYTHONUNBUFFERED": "1", "TMPDIR": str(scratch)}
    replicas = [Replica(name, tmp_path, env) for name in ("a", "b")]
    try:
        start_all(replicas)
        yield {"replicas": replicas, "engine": engine, "token": token, "nats": nats_server.url}
    finally:
        for replica in replicas:
            replica.stop()
    engine.dispose()
    postgres_server.drop_database(url)


def entries(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Entry)).scalar()


def dead_letter(nats_url: str, count: int, start: int = 0) -> None:
    support.run(support.publish_fast(nats_url, "dlq.orders.created", count, lambda i: (
        f'{{"order_id": "o-{start + i}"}}'.encode(),
        support.dlq_headers("orders.created", Dlq_Reason="fatal", Dlq_Error="handler failed"))))


def test_one_replica_mirrors_and_the_other_takes_over_after_a_kill_9(cluster):
    a, b = cluster["replicas"]
    engine = cluster["engine"]
    leader = support.wait_for(lambda: [r for r in (a, b) if r.leads()], message="a mirror leader")
    assert len(leader) == 1
    [leader], [other] = leader, [r for r in (a, b) if r not in leader]
    dead_letter(cluster["nats"], 500)
    support.wait_for(lambda: entries(engine) == 500, timeout=30, message="500 entries")

    leader.kill()
    support.wait_for(other.leads, timeout=LEASE_SECONDS + 5, message="the other replica to take the mirror over")
    dead_letter(cluster["nats"], 500, start=500)
    support.wait_for(lambda: entries(engine) == 1000, timeout=30, message="1,000 entries")
    with engine.connect() as conn:
        seqs = conn.execute(select(Entry.dlq_seq).order_by(Entry.dlq_seq)).scalars().all()
    assert seqs == list(range(1, 1001))


def test_a_bulk_job_runs_once_and_another_replica_resumes_it_when_its_runner_dies(cluster):
    a, b = cluster["replicas"]
    engine, headers = cluster["engine"], support.bearer(cluster["token"])
    dead_letter(cluster["nats"], 300)
    support.wait_for(lambda: entries(engine) == 300, timeout=30, message="300 entries")
    created = requests.post(f"{a.url}/api/bulk", json={"action": "republish", "filter": {"status": "open"}},
                            headers=headers, timeout=10)
    assert created.status_code == 202, created.text
    job = created.json()["job"]

    def progress():
        return requests.get(f"{b.url}/api/jobs/{job}?limit=0", headers=headers, timeout=5).json()

    # At 100 republishes a second the job takes three seconds: kill the replica running it
    # in the middle (the job's lease names the process that holds it).
    support.wait_for(lambda: progress()["done"] >= 50, timeout=30, message="the job to start")
    runner = a if _job_holder_pid(engine, job) == a.proc.pid else b
    runner.kill()
    survivor = b if runner is a else a
    status = support.wait_for(lambda: (s := requests.get(f"{survivor.url}/api/jobs/{job}?limit=0", headers=headers,
                                                        timeout=5).json())["state"] == "done" and s,
                              timeout=90, message="the other replica to finish the job")
    assert status["done"] == 300 and status["failed"] == 0
    published = support.stream_messages(cluster["nats"])
    assert len(published) == 300
    assert len({m.headers["Nats-Msg-Id"] for m in published}) == 300
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Republish)
                            .where(Republish.state == "published")).scalar() == 300


def _job_holder_pid(engine, job: int) -> int:
    with engine.connect() as conn:
        holder = conn.exec_driver_sql("SELECT holder FROM leases WHERE name = %s", (f"job:{job}",)).scalar()
    return int(holder.split(":")[1])


def test_a_republish_raced_over_two_replicas_publishes_once(cluster):
    a, b = cluster["replicas"]
    engine, headers = cluster["engine"], support.bearer(cluster["token"])
    dead_letter(cluster["nats"], 1)
    support.wait_for(lambda: entries(engine) == 1, timeout=30, message="the entry")
    barrier, answers = threading.Barrier(6), []

    def attempt(replica):
        barrier.wait()
        answers.append(requests.post(f"{replica.url}/api/entries/1/republish", json={"version": 1},
                                     headers=headers, timeout=30))

    threads = [threading.Thread(target=attempt, args=(r,)) for r in (a, b, a, b, a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.status_code for r in answers) == [200] + [409] * 5, [r.text for r in answers]
    assert len(support.stream_messages(cluster["nats"])) == 1


def test_a_login_made_on_one_replica_is_valid_on_the_other(cluster):
    a, b = cluster["replicas"]
    session = requests.Session()
    token = _csrf(session, f"{a.url}/login")
    logged_in = session.post(f"{a.url}/login", data={"username": "ops", "password": support.PASSWORD,
                                                     "csrf_token": token}, allow_redirects=False, timeout=10)
    assert logged_in.status_code == 302
    page = session.get(f"{b.url}/", allow_redirects=False, timeout=10)
    assert page.status_code == 200 and "ops" in page.text
    assert requests.get(f"{b.url}/", allow_redirects=False, timeout=10).status_code == 302  # and not without it


def test_the_login_throttle_counts_failures_made_on_every_replica(cluster):
    a, b = cluster["replicas"]
    for replica in (a, b, a, b, a):  # five failures, spread over both
        session = requests.Session()
        refused = session.post(f"{replica.url}/login", data={"username": "ops", "password": "guess-guess",
                                                            "csrf_token": _csrf(session, f"{replica.url}/login")},
                               timeout=10)
        assert refused.status_code == 401
    for replica in (a, b):
        session = requests.Session()
        throttled = session.post(f"{replica.url}/login", data={"username": "ops", "password": support.PASSWORD,
                                                              "csrf_token": _csrf(session, f"{replica.url}/login")},
                                 timeout=10)
        assert throttled.status_code == 429


def _csrf(session: requests.Session, url: str) -> str:
    import re

    html = session.get(url, timeout=10).text
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def test_postgresql_stopped_and_started_during_ingest_loses_and_doubles_nothing(tmp_path, nats_server):
    """The mirror waits while the database is down and /healthz says why, then resumes from
    the committed position: every dead letter is an entry exactly once."""
    from dlq_dashboard import create_app
    from dlq_dashboard.runtime import runtime_of

    from .postgres import PostgresServer

    server = PostgresServer().start()
    try:
        url = server.create_database()
        app = create_app({"SETTINGS": support.make_settings(tmp_path, nats_server.url, database_url=url),
                          "TESTING": True})
        runtime = runtime_of(app).start()
        client = app.test_client()
        try:
            support.wait_for(lambda: client.get("/healthz").status_code == 200, message="a healthy start")
            dead_letter(nats_server.url, 2000)
            support.wait_for(lambda: entries(runtime.engine) >= 200, timeout=30, message="ingest to begin")
            server.stop()
            down = support.wait_for(lambda: (r := client.get("/healthz")).status_code == 503 and r.get_json(),
                                    timeout=30, message="/healthz to say degraded")
            assert down["status"] == "degraded" and down["database"]["connected"] is False
            assert down["database"]["last_error"]
            dead_letter(nats_server.url, 2000, start=2000)  # more arrive while the database is down
            server.start()
            support.wait_for(lambda: entries(runtime.engine) == 4000, timeout=60, message="every entry after the restart")
            support.wait_for(lambda: client.get("/healthz").status_code == 200, timeout=30, message="healthy again")
            with runtime.engine.connect() as conn:
                seqs = conn.execute(select(Entry.dlq_seq).order_by(Entry.dlq_seq)).scalars().all()
            assert seqs == list(range(1, 4001))
        finally:
            runtime.stop()
    finally:
        server.remove()
