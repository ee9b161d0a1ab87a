"""The mirror's health says the truth under faults, against a real nats-server: a writer process
that stops answering is told as stuck with why, then replaced, and the mirror recovers by itself
with nothing lost or stored twice; every place tells the same lag (the stream's head minus what is
committed) while it is stuck; and a NATS outage is NATS's line alone, not a stuck mirror."""

from __future__ import annotations

import logging
import os
import re
import signal

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dlq_dashboard.ingest import mirror
from dlq_dashboard.runtime import runtime_of

from . import support
from .support import frozen
from .test_mirror_hardening import MIRROR_LOG, entry_seqs, health, publish_dead_letters

BACKLOG = 5000


def metric(client, name: str, **labels) -> float | None:
    text = client.get("/metrics").get_data(as_text=True)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def banner(client) -> str:
    return re.sub(r"\s+", " ", client.get("/status/banner").get_data(as_text=True))


def stuck_on_the_writer(app):
    """/healthz once it says the DLQ stream is stuck on its silent writer, with the whole backlog as its lag."""
    status, body = health(app)
    dlq = body["mirror"]["streams"]["DLQ"]
    if status == 503 and "has not answered" in (dlq["error"] or "") and body["mirror_lag"] == BACKLOG:
        return body
    return None


@pytest.mark.both_databases
def test_a_frozen_writer_is_told_as_stuck_with_the_whole_lag_then_replaced_and_nothing_is_lost_or_doubled(
        app, nats_server, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger=MIRROR_LOG)
    rt = runtime_of(app)
    viewer = support.logged_in(app, "viewer")
    publish_dead_letters(nats_server.url, 1)  # the writer process starts with its first write
    support.wait_for(lambda: support.entry_count(rt.engine) == 1, timeout=20, message="the first entry")
    # The mirror knows the commit from the writer's answer, which can come after the row is seen:
    # frozen in between, the writer never tells it, and the banner rightly counts one more.
    support.wait_for(lambda: rt.mirror.progress["DLQ"].last_seq == 1, timeout=20,
                     message="the mirror to hear of the first commit")
    frozen_pid = rt.mirror._process._proc.pid
    monkeypatch.setattr(mirror, "WRITER_STUCK", 1.0)
    monkeypatch.setattr(mirror, "WRITER_KILL", 600.0)  # not replaced until the figures are read
    caplog.clear()

    with support.writer_stopped(rt, watched=True) as pid:  # the mirror receives, nothing is committed
        assert pid == frozen_pid
        publish_dead_letters(nats_server.url, BACKLOG, first=1)
        body = support.wait_for(lambda: stuck_on_the_writer(app), timeout=30,
                                message="/healthz to say the writer is silent, the whole backlog behind")
        assert f"(pid {pid})" in body["mirror"]["streams"]["DLQ"]["error"]
        # The banner, /api/sources and the metrics tell the same: stuck, why, and the same lag.
        said: list[str] = []  # what the banner said last, for the failure's message

        def counted():
            said.append(banner(viewer))
            return f"{BACKLOG:,} messages" in said[-1] and said[-1]

        try:
            text = support.wait_for(counted, timeout=30, message="the banner to count the whole backlog")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the banner said: {said[-1]!r}") from None
        assert "The mirror is stuck on stream DLQ</strong>" in text and "has not answered" in text
        sources = viewer.get("/api/sources").get_json()["sources"][0]
        assert sources["status"] == "stuck" and sources["mirror_lag"] == BACKLOG
        client = app.test_client()
        assert metric(client, "dlq_mirror_stuck", stream="DLQ") == 1
        assert metric(client, "dlq_mirror_lag_messages", stream="DLQ") == BACKLOG
        assert support.entry_count(rt.engine) == 1

        # Silent long enough: killed by its process id and replaced; the mirror goes on by itself.
        monkeypatch.setattr(mirror, "WRITER_KILL", 2.0)
        support.wait_for(lambda: (proc := rt.mirror._process._proc) is not None and proc.pid != pid, timeout=30,
                         message="another writer process")
        # The new writer is judged as usual: a loaded machine's slow batch is not a silence.
        monkeypatch.setattr(mirror, "WRITER_STUCK", 10.0)
        monkeypatch.setattr(mirror, "WRITER_KILL", 60.0)
        support.wait_for(lambda: support.entry_count(rt.engine) == BACKLOG + 1, timeout=60,
                         message="every dead letter mirrored by the new writer")
    assert entry_seqs(rt.engine) == list(range(1, BACKLOG + 2))
    support.wait_for(lambda: health(app)[0] == 200, timeout=20, message="/healthz to be ok again")
    assert "The mirror is stuck" not in banner(viewer)
    assert metric(app.test_client(), "dlq_mirror_stuck", stream="DLQ") == 0
    lines = [r.getMessage() for r in caplog.records if r.name == MIRROR_LOG]
    told = [line for line in lines if f"(pid {pid}) has not answered for" in line and "waiting:" in line]
    assert len(told) == 1 and "DLQ after sequence 1" in told[0], lines
    assert any("killing it" in line for line in lines), lines


def test_a_stream_jetstream_refuses_to_make_is_stuck_with_its_reason_not_waiting_for_nats(make_app, nats_server, tmp_path,
                                                                                          database_url):
    # NATS answers, refusing: waiting for it mends nothing, and the person must read why.
    app = make_app(settings=support.make_settings(tmp_path, nats_server.url, database_url=database_url,
                                                  stream_replicas=3))
    runtime_of(app).start()  # the mirror never follows: support.start would wait for it
    support.wait_for(lambda: "replicas" in (health(app)[1]["mirror"]["streams"]["DLQ"]["error"] or ""),
                     timeout=30, message="the DLQ stream stuck with JetStream's reason")
    status, body = health(app)
    assert status == 503 and body["nats"]["connected"] is True
    assert "not supported in non-clustered mode" in body["mirror"]["streams"]["DLQ"]["error"]
    assert metric(app.test_client(), "dlq_mirror_stuck", stream="DLQ") == 1
    assert "stuck" in banner(support.logged_in(app, "viewer"))


def test_a_nats_outage_is_told_as_nats_unreachable_not_as_a_stuck_mirror(app, nats_server, monkeypatch):
    rt = runtime_of(app)
    viewer = support.logged_in(app, "viewer")
    support.wait_for(lambda: all(p.epoch for p in rt.mirror.progress.values()), message="the mirror to follow")
    failures: list[str] = []
    pause = mirror.Mirror._pause

    async def noted_pause(self, stream, seconds):  # each follower's failure ends in a pause
        failures.append(stream)
        await pause(self, stream, seconds)

    monkeypatch.setattr(mirror.Mirror, "_pause", noted_pause)
    client = app.test_client()
    with frozen(nats_server):
        support.wait_for(lambda: {"DLQ", "DLQ_ADVISORIES"} <= set(failures), timeout=30,
                         message="both followers to fail on the frozen server")
        support.wait_for(lambda: not rt.bridge.state.connected, timeout=10, message="NATS declared unreachable")
        status, body = health(app)
        assert status == 503 and body["nats"]["connected"] is False
        assert [s["error"] for s in body["mirror"]["streams"].values()] == [None, None], body
        assert metric(client, "dlq_mirror_stuck", stream="DLQ") == 0
        assert metric(client, "dlq_mirror_stuck", stream="DLQ_ADVISORIES") == 0
        text = banner(viewer)
        assert "NATS is not reachable" in text and "stuck" not in text
        assert viewer.get("/api/sources").get_json()["sources"][0]["status"] == "unreachable"
    support.wait_for(lambda: health(app)[0] == 200, timeout=30, message="/healthz to be ok again")
    publish_dead_letters(nats_server.url, 3)
    support.wait_for(lambda: support.entry_count(rt.engine) == 3, timeout=30, message="the mirror to go on")


def test_healthz_is_not_ok_while_messages_wait_and_no_process_mirrors_them(tmp_path, nats_server, monkeypatch):
    """Between a mirror's process that ended (here killed) and the next, this process does not
    mirror and its ended child's lease still holds: messages waiting then are not "ok"."""
    from dlq_dashboard import create_app
    from dlq_dashboard.ingest import process

    monkeypatch.setattr(process, "RESTART_FIRST", 600.0)  # the next child is not started during the test
    support.migrated_sqlite(tmp_path / "dlq.sqlite3")
    app = create_app({"SETTINGS": support.make_settings(tmp_path, nats_server.url), "TESTING": True})
    rt = runtime_of(app).start(mirror_process=True)
    try:
        support.wait_for(lambda: rt.mirror.leader, timeout=60, message="the child to take the lease")
        support.wait_for(lambda: health(app)[0] == 200, timeout=20, message="/healthz ok")
        child = rt.mirror_process.pid
        os.kill(child, signal.SIGKILL)
        support.wait_for(lambda: not rt.mirror.leader, timeout=30, message="the child's end to be seen")
        publish_dead_letters(nats_server.url, 5)
        status, body = support.wait_for(lambda: (h := health(app))[1]["mirror_lag"] == 5 and h, timeout=20,
                                        message="/healthz to count the five waiting")
        assert body["mirror"]["leader"] is False
        assert status == 503 and body["status"] == "degraded", body
    finally:
        rt.stop()
