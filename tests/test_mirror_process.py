"""``python app.py`` mirrors in a child process of its own (dlq_dashboard/ingest/process.py): the
dashboard's process tells what the child reports (/healthz, /metrics, the banner), starts another
when it dies, and takes it down with it however it ends."""

from __future__ import annotations

import multiprocessing.util
import os
import re
import signal
import sqlite3
import threading
import time
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import pytest
import requests

from dlq_dashboard.ingest import process
from dlq_dashboard.ingest.process import MirrorView, snapshot
from dlq_dashboard.ingest.progress import StreamProgress
from dlq_dashboard import create_app
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support
from .test_mirror_hardening import health
from .test_replicas import Replica

pytestmark = [pytest.mark.timeout(180)]


def test_a_snapshot_answers_as_the_progress_it_copies():
    progress = StreamProgress("DLQ", epoch="e1", last_seq=10, stream_last_seq=10, ingested=10)
    for seq in range(11, 2000):  # a long history of growth: the copy keeps one point of it
        progress.saw_stream(seq)
    progress.stuck(RuntimeError("disk full"))
    copy = snapshot(progress)
    assert (copy.lag, copy.error, copy.stuck_since, copy.behind_since()) == \
        (progress.lag, progress.error, progress.stuck_since, progress.behind_since())
    assert copy.behind_since() is not None and len(copy.seen) == 1
    progress.committed(1999, 1989)
    assert snapshot(progress).behind_since() is None and not snapshot(progress).seen


def test_a_view_keeps_its_counts_across_the_children_that_report_for_it():
    view = MirrorView("default", ["DLQ"])
    assert not view.leader and view.progress["DLQ"].ingested == 0
    view.update(True, [StreamProgress("DLQ", last_seq=5, ingested=5, outages=1)])
    assert view.leader and view.progress["DLQ"].ingested == 5
    view.ended()
    assert not view.leader
    view.update(True, [StreamProgress("DLQ", last_seq=8, ingested=3)])
    assert (view.progress["DLQ"].last_seq, view.progress["DLQ"].ingested, view.progress["DLQ"].outages) == (8, 8, 1)


def test_a_view_whose_child_is_silent_tells_its_streams_as_stuck_from_the_last_report(monkeypatch):
    monkeypatch.setattr(process, "SILENT_STUCK", 0.3)
    view = MirrorView("default", ["DLQ", "DLQ_ADVISORIES"])
    before = utcnow()
    view.update(True, [StreamProgress("DLQ", last_seq=5), StreamProgress("DLQ_ADVISORIES", last_seq=2)])
    assert all(p.error is None for p in view.progress.values())
    support.wait_for(lambda: view.progress["DLQ"].error is not None, timeout=5, message="the silence told")
    dlq = view.progress["DLQ"]
    assert "the mirror's process has not reported for" in dlq.error
    assert before <= dlq.stuck_since <= utcnow() and dlq.last_seq == 5
    # A stream stuck for a reason of its own keeps it; a report ends the silence.
    failing = StreamProgress("DLQ", last_seq=6)
    failing.stuck(RuntimeError("disk full"))
    view.update(True, [failing])
    assert view.progress["DLQ_ADVISORIES"].error is None  # heard just now
    support.wait_for(lambda: view.progress["DLQ_ADVISORIES"].error is not None, timeout=5, message="silence again")
    assert view.progress["DLQ"].error == "RuntimeError: disk full"
    # A view that does not mirror (another process holds the lease, or the child ended) claims nothing.
    view.ended()
    assert view.progress["DLQ_ADVISORIES"].error is None and view.progress["DLQ"].error == "RuntimeError: disk full"


@pytest.mark.slow
def test_a_mirror_process_that_stops_reporting_is_told_as_stuck_then_replaced(tmp_path, nats_server, monkeypatch,
                                                                             caplog):
    monkeypatch.setattr(process, "SILENT_STUCK", 1.0)
    monkeypatch.setattr(process, "SILENT_KILL", 4.0)
    db = tmp_path / "dlq.sqlite3"
    support.migrated_sqlite(db)
    support.make_orders_stream(nats_server.url)
    # This process has a multiprocessing directory already (as after a mirror's writer ran in it):
    # the child, which inherits it with its Process object, must still make its own.
    multiprocessing.util.get_temp_dir()
    app = create_app({"SETTINGS": support.make_settings(tmp_path, nats_server.url), "TESTING": True})
    rt = runtime_of(app).start(mirror_process=True)
    held = ExitStack()  # the stopped child continued, at the latest when this process ends (support.stopped)
    try:
        view = rt.mirror
        support.wait_for(lambda: view.leader, timeout=30, message="the child to take the lease")
        assert health(app)[0] == 200
        child, scratch = rt.mirror_process.pid, Path(rt.mirror_process.scratch)
        # The child's writers' forkserver listens in the child's own temporary directory.
        support.wait_for(lambda: list(scratch.glob("listener-*")), timeout=10,
                         message="the child's forkserver in its directory")
        held.enter_context(support.stopped(child))  # neither reports nor ends
        support.wait_for(lambda: view.progress["DLQ"].error is not None, timeout=10, message="the silence told")
        assert "has not reported" in view.progress["DLQ"].error
        status, body = health(app)  # what an operator's probe sees
        assert status == 503, body
        assert "has not reported" in body["mirror"]["streams"]["DLQ"]["error"]
        assert body["mirror"]["streams"]["DLQ"]["stuck_since"]
        metrics = app.test_client().get("/metrics").get_data(as_text=True)  # what alerting scrapes
        assert metric_in(metrics, 'dlq_mirror_stuck{stream="DLQ"}') == 1
        support.wait_for(lambda: rt.mirror_process.restarts == 1 and view.leader and rt.mirror_process.pid != child,
                         timeout=30, message="another child in its place")
        assert support.gone(child)
        assert not scratch.exists(), "a killed child's temporary files are left behind"
        assert Path(rt.mirror_process.scratch) != scratch
        assert f"the mirror's process (pid {child}) has not reported for 4 s; killing it" in caplog.text
        assert view.progress["DLQ"].error is None
        dead_letter(nats_server.url, 5, 0)
        support.wait_for(lambda: count(db) == 5, timeout=30, message="the new child to mirror")
        support.wait_for(lambda: health(app)[0] == 200, timeout=10, message="/healthz well again")
    finally:
        held.close()
        rt.stop()


@pytest.mark.slow
def test_a_child_slower_to_start_than_the_silence_allowed_is_given_its_first_report_time(tmp_path, nats_server,
                                                                                        monkeypatch):
    """A new interpreter importing the dashboard takes seconds on a loaded machine: a child is
    killed for silence only once it has reported, or after FIRST_REPORT (seen in a loaded run:
    each child after a killed one was killed before it could report, and the mirror never came
    back)."""
    monkeypatch.setattr(process, "SILENT_STUCK", 0.5)
    monkeypatch.setattr(process, "SILENT_KILL", 1.0)
    db = tmp_path / "dlq.sqlite3"
    support.migrated_sqlite(db)
    support.make_orders_stream(nats_server.url)
    started = []
    start = process.MirrorProcess._start_child
    held = ExitStack()  # the stopped child continued, at the latest when this process ends (support.stopped)

    def start_frozen(self):  # the child stopped before it can have imported anything, let alone reported
        start(self)
        if not started:
            held.enter_context(support.stopped(self._proc.pid))
        started.append((self._proc.pid, time.monotonic()))

    monkeypatch.setattr(process.MirrorProcess, "_start_child", start_frozen)
    app = create_app({"SETTINGS": support.make_settings(tmp_path, nats_server.url), "TESTING": True})
    rt = runtime_of(app).start(mirror_process=True)
    try:
        support.wait_for(lambda: started, timeout=30, message="the first child")  # started by a thread
        child, since = started[0]
        # Four times SILENT_KILL, each moment checked: still the same child, not killed.
        support.wait_for(lambda: support.gone(child) or time.monotonic() - since > 4 * process.SILENT_KILL,
                         timeout=30, interval=0.05, message="four times the silence allowed")
        assert not support.gone(child) and len(started) == 1 and rt.mirror_process.restarts == 0
        held.close()
        support.wait_for(lambda: rt.mirror.leader, timeout=60, message="the slow child to take the lease")
        assert rt.mirror_process.pid == child and rt.mirror_process.restarts == 0
    finally:
        held.close()
        rt.stop()


@pytest.mark.slow
def test_metrics_count_the_lag_and_its_wait_while_the_mirror_process_hangs(tmp_path, nats_server, monkeypatch):
    """/metrics read the silent child's last report: a lag of 0 and no wait for as long as it hung
    (DLQMirrorBehind could not fire), while /healthz counted what the stream held."""
    monkeypatch.setattr(process, "SILENT_KILL", 600.0)  # not replaced during the test
    db = tmp_path / "dlq.sqlite3"
    support.migrated_sqlite(db)
    support.make_orders_stream(nats_server.url)
    app = create_app({"SETTINGS": support.make_settings(tmp_path, nats_server.url), "TESTING": True})
    rt = runtime_of(app).start(mirror_process=True)
    held = ExitStack()  # the stopped child continued, at the latest when this process ends (support.stopped)
    try:
        support.wait_for(lambda: rt.mirror.leader, timeout=30, message="the child to take the lease")
        dead_letter(nats_server.url, 1, 0)
        support.wait_for(lambda: count(db) == 1, timeout=30, message="the child to mirror")
        child = rt.mirror_process.pid
        held.enter_context(support.stopped(child))  # neither reports nor mirrors
        dead_letter(nats_server.url, 2, 1)
        scrape = lambda: app.test_client().get("/metrics").get_data(as_text=True)  # noqa: E731
        support.wait_for(lambda: metric_in(scrape(), 'dlq_mirror_lag_messages{stream="DLQ"}') == 2, timeout=20,
                         message="/metrics to count the two not mirrored")
        body = health(app)[1]
        assert body["mirror_lag"] == 2, (body, count(db), support.process_state(child))
        assert count(db) == 1  # the two not handed to the writer (every thread of the child stopped first)
        support.wait_for(lambda: metric_in(scrape(), 'dlq_mirror_behind_seconds{stream="DLQ"}') > 0, timeout=20,
                         message="their wait to grow")
    finally:
        held.close()
        rt.stop()


def mirror_child(pid: int) -> int:
    """The dashboard's mirror process (multiprocessing's spawned child, not its resource tracker)."""
    spawned = [child for child in support.children(pid)
               if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes() and not support.gone(child)]
    assert len(spawned) == 1, spawned
    return spawned[0]


def metric(url: str, name: str) -> float | None:
    return metric_in(requests.get(f"{url}/metrics", timeout=5).text, name)


def metric_in(text: str, name: str) -> float | None:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def count(db: Path) -> int:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
    finally:
        conn.close()


def dead_letter(url: str, count: int, start: int) -> None:
    support.run(support.publish_fast(url, "dlq.orders.created", count, lambda i: (
        f'{{"order_id": "o-{start + i}"}}'.encode(), support.dlq_headers("orders.created", Dlq_Reason="fatal"))))


@pytest.mark.slow
def test_app_py_mirrors_in_a_child_it_watches_restarts_and_takes_down_with_it(tmp_path, nats_server, scratch):
    db = tmp_path / "dlq.sqlite3"
    support.migrated_sqlite(db)
    support.make_orders_stream(nats_server.url)
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "NATS_URL": nats_server.url, "SECRET_KEY": "child",
           "PYTHONUNBUFFERED": "1", "TMPDIR": str(scratch)}  # it is killed with -9
    app = Replica("app", tmp_path, env).start()
    try:
        dead_letter(nats_server.url, 200, 0)
        support.wait_for(lambda: count(db) == 200, timeout=30, message="200 entries")
        child = mirror_child(app.proc.pid)
        # The pages' process holds the lease through its child, and says so as before.
        support.wait_for(lambda: app.leads() and metric(app.url, 'dlq_mirror_ingested_total{stream="DLQ"}') == 200,
                         timeout=10, message="the child's progress in /healthz and /metrics")
        assert metric(app.url, "dlq_mirror_leader") == 1

        # A write failing in the child is the parent's news: /healthz degraded, the stream stuck.
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON entries BEGIN "
                         "SELECT RAISE(ABORT, 'refused for the test'); END")
        dead_letter(nats_server.url, 1, 200)

        def stuck() -> bool:
            streams = (app.health() or {}).get("mirror", {}).get("streams", {})
            return (streams.get("DLQ") or {}).get("stuck_since") is not None

        support.wait_for(stuck, timeout=30, message="the stuck stream in /healthz")
        assert requests.get(f"{app.url}/healthz", timeout=5).status_code == 503
        assert metric(app.url, 'dlq_mirror_stuck{stream="DLQ"}') == 1
        with sqlite3.connect(db) as conn:
            conn.execute("DROP TRIGGER refuse")
        support.wait_for(lambda: count(db) == 201 and app.healthy(), timeout=30, message="the stuck write to land")

        # A mirror process that dies is started again, and the count goes on from where it was.
        os.kill(child, signal.SIGKILL)
        support.wait_for(lambda: "the mirror's process ended (exit code -9)" in app.log(), timeout=10,
                         message="the parent to notice")
        dead_letter(nats_server.url, 50, 201)
        support.wait_for(lambda: count(db) == 251, timeout=30, message="the new child to mirror")
        assert mirror_child(app.proc.pid) != child
        support.wait_for(lambda: metric(app.url, 'dlq_mirror_ingested_total{stream="DLQ"}') == 251, timeout=10,
                         message="the count carried over")

        # kill -9 of the dashboard's process: the mirror's process, its writer and its leases go too.
        tree = support.descendants(app.proc.pid)
        app.kill()
        support.wait_for(lambda: all(support.gone(pid) for pid in tree), timeout=30,
                         message=f"the processes {tree} to end with their parent")
        # The mirror's process, ended by its pipe, removed its temporary files itself.
        assert [p.name for p in scratch.iterdir()] == []
        with sqlite3.connect(db) as conn:
            (expires,) = conn.execute("SELECT expires_at FROM leases WHERE name = 'mirror'").fetchone()
        assert expires < (utcnow() - timedelta(minutes=1)).isoformat(" "), "the mirror lease was not released"
    finally:
        app.stop()


@pytest.mark.slow
def test_app_py_stops_its_mirror_process_on_sigterm(tmp_path, nats_server):
    db = tmp_path / "dlq.sqlite3"
    support.migrated_sqlite(db)
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "NATS_URL": nats_server.url, "SECRET_KEY": "child",
           "PYTHONUNBUFFERED": "1"}
    app = Replica("app", tmp_path, env).start()
    support.wait_for(app.leads, timeout=20, message="the lease")
    tree = support.descendants(app.proc.pid)
    assert tree
    app.proc.send_signal(signal.SIGTERM)
    assert app.proc.wait(30) == 0, app.log()[-2000:]
    support.wait_for(lambda: all(support.gone(pid) for pid in tree), timeout=10, message="the children to end")
    assert "Traceback" not in app.log(), app.log()[-3000:]


def test_a_mirror_process_asked_to_stop_is_not_told_as_silent(tmp_path, nats_server, monkeypatch, caplog):
    # It reports no more once asked to stop; a stop that takes longer than SILENT_STUCK (here: its
    # lease's release waits for a write lock the test holds for 2 s) is no silence.
    monkeypatch.setattr(process, "SILENT_STUCK", 0.5)
    db = tmp_path / "dlq.sqlite3"
    support.migrated_sqlite(db)
    app = create_app({"SETTINGS": support.make_settings(tmp_path, nats_server.url), "TESTING": True})
    rt = runtime_of(app).start(mirror_process=True)
    lock = sqlite3.connect(db, timeout=30, isolation_level=None, check_same_thread=False)
    try:
        support.wait_for(lambda: rt.mirror.leader, timeout=30, message="the child to take the lease")
        lock.execute("BEGIN IMMEDIATE")
        threading.Timer(2.0, lambda: lock.execute("ROLLBACK")).start()
    finally:
        before = len(caplog.records)
        started = time.monotonic()
        rt.stop()
        lock.close()
    assert time.monotonic() - started > 2 * process.SILENT_STUCK, "the stop did not wait for the lock"
    assert not [r.getMessage() for r in caplog.records[before:] if "has not reported" in r.getMessage()]
