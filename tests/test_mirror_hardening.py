"""The mirror never stops without a word: a write that fails is seen when it ends (a quiet stream
included) and retried with its messages until it succeeds; advisory batches reach the writer in
stream order whatever their payload fetches cost; while a stream is stuck /healthz and the banner
say so with the error, and the log says so once each way. Against a real nats-server."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from concurrent.futures import Future

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig
from sqlalchemy import select

from dlq_dashboard import create_app
from dlq_dashboard.accounts import create_token
from dlq_dashboard.db.models import Entry, Event
from dlq_dashboard.ingest import mirror
from dlq_dashboard.ingest.writer import WriterError, WriterProcess
from dlq_dashboard.ingest.progress import StreamProgress
from dlq_dashboard.ingest.writes import read_position
from dlq_dashboard.runtime import runtime_of

from . import support

FULL_DISK = "OperationalError: database or disk is full"
MIRROR_LOG = "dlq_dashboard.ingest.mirror"


class WriterFault:
    """While on, every write handed to the mirror's writer fails as a full disk makes it fail
    (the writer's answer, with nothing committed); the number of writes refused is counted."""

    def __init__(self, monkeypatch):
        self.on = threading.Event()
        self.refused = 0
        real = WriterProcess.submit

        def submit(writer, name, *args):
            if self.on.is_set():
                self.refused += 1
                failed: Future = Future()
                failed.set_exception(WriterError(FULL_DISK))
                return failed
            return real(writer, name, *args)

        monkeypatch.setattr(WriterProcess, "submit", submit)


def health(app) -> tuple[int, dict]:
    """/healthz as an admin reads it (an anonymous caller is not told the error texts)."""
    if "TEST_ADMIN_TOKEN" not in app.config:
        app.config["TEST_ADMIN_TOKEN"] = create_token(runtime_of(app).engine, "health-admin", "admin")
    token = app.config["TEST_ADMIN_TOKEN"]
    response = app.test_client().get("/healthz", headers={"Authorization": f"Bearer {token}"})
    return response.status_code, response.get_json()


def publish_dead_letters(url: str, count: int, first: int = 0) -> None:
    support.run(support.publish_fast(url, "dlq.orders.created", count,
                                     lambda i: (json.dumps({"n": first + i}).encode(), support.dlq_headers())))


def entry_seqs(engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(select(Entry.dlq_seq).where(Entry.dlq_seq.is_not(None))
                                 .order_by(Entry.dlq_seq)).scalars())


def stuck_health(app, error: str):
    """The /healthz answer once it says the DLQ stream is stuck with ``error`` (else None)."""
    status, body = health(app)
    dlq = body["mirror"]["streams"]["DLQ"]
    return body if status == 503 and body["status"] == "degraded" and error in (dlq["error"] or "") else None


def well(app) -> bool:
    status, body = health(app)
    return status == 200 and body["mirror_lag"] == 0 and all(
        s["error"] is None for s in body["mirror"]["streams"].values())


def mirror_lines(caplog, stream: str, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == MIRROR_LOG and r.getMessage().startswith(f"mirroring {stream} {words}")]


# --- 1. a write failing at the end of a burst ------------------------------------------------------

@pytest.mark.both_databases
def test_a_write_failing_at_the_end_of_a_burst_on_a_quiet_stream_is_retried_until_every_entry_arrives(
        app, nats_server, monkeypatch):
    rt = runtime_of(app)
    fault = WriterFault(monkeypatch)
    publish_dead_letters(nats_server.url, 200)
    support.wait_for(lambda: support.entry_count(rt.engine) == 200, timeout=30, message="the first burst")

    fault.on.set()  # the database goes away for a moment, at the end of a burst
    publish_dead_letters(nats_server.url, 10, first=200)
    body = support.wait_for(lambda: stuck_health(app, FULL_DISK), timeout=10,
                            message="/healthz to say the mirror is stuck, with the error")
    assert body["mirror"]["streams"]["DLQ"]["stuck_since"]
    assert body["mirror_lag"] == 10 and body["mirror"]["streams"]["DLQ"]["lag"] == 10
    assert support.entry_count(rt.engine) == 200

    fault.on.clear()  # nothing else arrives: the retry alone must bring the ten
    support.wait_for(lambda: support.entry_count(rt.engine) == 210, timeout=20,
                     message="the ten dead letters, with no new message")
    support.wait_for(lambda: well(app), timeout=10, message="/healthz to be ok again")
    assert entry_seqs(rt.engine) == list(range(1, 211))
    assert read_position(rt.engine, "DLQ")[1] == 210


def test_postgresql_stopped_at_the_end_of_a_burst_on_a_quiet_stream_stores_every_entry_once_it_is_back(
        tmp_path, nats_server, caplog):
    from .postgres import PostgresServer

    caplog.set_level(logging.WARNING, logger=MIRROR_LOG)

    server = PostgresServer().start()
    try:
        app = create_app({"SETTINGS": support.make_settings(tmp_path, nats_server.url,
                                                            database_url=server.create_database()),
                          "TESTING": True})
        rt = runtime_of(app).start()
        try:
            support.wait_for(lambda: well(app), timeout=20, message="a healthy start")
            publish_dead_letters(nats_server.url, 200)
            support.wait_for(lambda: support.entry_count(rt.engine) == 200, timeout=30, message="the first burst")

            server.stop()
            publish_dead_letters(nats_server.url, 10, first=200)
            support.wait_for(lambda: rt.mirror.progress["DLQ"].error, timeout=20,
                             message="the mirror to know it is stuck")
            status, body = health(app)
            assert status == 503 and body["mirror"]["streams"]["DLQ"]["error"]

            server.start()
            support.wait_for(lambda: support.entry_count(rt.engine) == 210, timeout=30,
                             message="the ten dead letters once PostgreSQL is back, with no new message")
            support.wait_for(lambda: well(app), timeout=20, message="/healthz to be ok again")
            assert entry_seqs(rt.engine) == list(range(1, 211))
            # However many retries the outage took: one line as it began, one as it ended.
            assert len(mirror_lines(caplog, "DLQ", "is stuck")) == 1
            assert len(mirror_lines(caplog, "DLQ", "recovered")) == 1
        finally:
            rt.stop()
    finally:
        server.remove()


# --- 2. advisory batches in stream order ------------------------------------------------------------

async def _pull_orders(url: str, count: int):
    """Stream ORDERS with ``count`` messages and a connection holding all of them pulled once."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    for i in range(count):
        await js.publish("orders.created", json.dumps({"n": i}).encode())
    await js.add_consumer("ORDERS", ConsumerConfig(durable_name="worker", ack_policy=AckPolicy.EXPLICIT,
                                                   ack_wait=30, max_deliver=5))
    sub = await js.pull_subscribe("orders.>", durable="worker", stream="ORDERS")
    pulled = []
    while len(pulled) < count:
        pulled.extend(await sub.fetch(count - len(pulled), timeout=5))
    return nc, sub, pulled


async def _terminate(nc, msgs) -> None:
    for msg in msgs:
        await nc.publish(msg.reply, b"+TERM customer does not exist")
    await nc.flush()


def advisory_entries(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(select(Entry.original_seq, Entry.reason).where(Entry.original_stream == "ORDERS")
                            .order_by(Entry.original_seq)).all()


def history_kinds(engine, seq: int) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(select(Event.kind).where(Event.original_stream == "ORDERS",
                                                          Event.original_seq == seq).order_by(Event.id)).scalars())


@pytest.mark.both_databases
def test_an_advisory_batch_whose_payloads_take_long_to_fetch_is_not_overtaken_by_the_next(
        app, nats_server, monkeypatch):
    rt = runtime_of(app)
    fetch = mirror.Mirror._fetch

    async def slow_fetch(self, stream, seq):  # payloads that cost: 0.1 s each
        await asyncio.sleep(0.1)
        return await fetch(self, stream, seq)

    monkeypatch.setattr(mirror.Mirror, "_fetch", slow_fetch)
    advisories = rt.mirror.progress[rt.settings.advisory_stream]

    async def scenario():
        nc, sub, pulled = await _pull_orders(nats_server.url, 31)
        try:
            await _terminate(nc, pulled[:30])
            # The thirty are taken (their payloads being fetched) when the nak arrives: its batch
            # has nothing to fetch and is ready first.
            await asyncio.to_thread(support.wait_for, lambda: advisories.queued_seq >= 30, 20,
                                    0.001, "the thirty advisories to be taken")
            await pulled[30].nak()
            await nc.flush()
            # Nothing else arrives: the nak must be stored all the same.
            await asyncio.to_thread(support.wait_for, lambda: advisories.last_seq >= 31, 20, 0.02,
                                    "the nak to be committed after the thirty, with no new advisory")
            again = await sub.fetch(1, timeout=10)
            await _terminate(nc, again)
        finally:
            await nc.close()

    support.run(scenario(), timeout=60)
    rows = support.wait_for(lambda: (lambda r: r if len(r) == 31 else None)(advisory_entries(rt.engine)),
                            timeout=20, message="31 terminated entries")
    assert [seq for seq, _ in rows] == list(range(1, 32)) and {reason for _, reason in rows} == {"terminated"}
    assert history_kinds(rt.engine, 31) == ["nak", "terminated"]
    assert advisories.error is None
    support.wait_for(lambda: well(app), timeout=10, message="/healthz to be ok")


def test_mirror_lag_in_healthz_counts_the_advisory_stream_as_well_as_the_dlq(app, nats_server):
    rt = runtime_of(app)
    support.dead_letter_orders(app, nats_server.url, [b"{}"])  # the writer process starts with its first write
    with support.writer_stopped(rt):  # the mirror receives, nothing is committed
        async def terminate_three():
            nc, _, pulled = await _pull_orders(nats_server.url, 3)
            try:
                await _terminate(nc, pulled)
            finally:
                await nc.close()

        support.run(terminate_three(), timeout=30)
        body = support.wait_for(lambda: (b := health(app)[1])["mirror_lag"] == 3 and b, timeout=10,
                                message="mirror_lag to count the three advisories")
        assert body["mirror"]["streams"]["DLQ_ADVISORIES"]["lag"] == 3
        assert body["mirror"]["streams"]["DLQ"]["lag"] == 0
    support.wait_for(lambda: well(app), timeout=20, message="the lag to go once the writer answers")
    assert len(advisory_entries(rt.engine)) == 3


# --- 3. a persistent error: no flapping, one line each way, the delay starts over ----------------------

@pytest.mark.both_databases
def test_a_persistent_write_error_keeps_health_degraded_through_every_retry_and_the_delay_starts_over_after_recovery(
        app, nats_server, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger=MIRROR_LOG)
    rt = runtime_of(app)
    viewer = support.logged_in(app, "viewer")
    # Small batches: a retry sends many writes, so every retry passes through several of them.
    monkeypatch.setattr(mirror, "BATCH", 2)
    fault = WriterFault(monkeypatch)
    pauses: list[float] = []
    pause = mirror.Mirror._pause

    # Each delay asked for is recorded and waited a fifth of its length: the same retries in the
    # same order, sooner, with /healthz still read many times in each.
    async def recorded_pause(self, stream, seconds):
        if stream == "DLQ":
            pauses.append(seconds)
        await pause(self, stream, seconds / 5)

    monkeypatch.setattr(mirror.Mirror, "_pause", recorded_pause)

    fault.on.set()
    publish_dead_letters(nats_server.url, 20)
    support.wait_for(lambda: stuck_health(app, FULL_DISK), timeout=10, message="the mirror to be stuck")
    samples = 0
    while len(pauses) < 4:  # retried after 0.5, 1 and 2 s (a fifth of each), waiting 4 s now
        status, body = health(app)
        assert status == 503 and body["status"] == "degraded", body
        assert FULL_DISK in body["mirror"]["streams"]["DLQ"]["error"], body
        samples += 1
        assert samples < 5000, f"the mirror did not retry ({pauses})"
    assert fault.refused >= 4  # the first attempt and each retry sent a write again, and it failed again
    text = viewer.get("/status/banner").get_data(as_text=True)
    assert "The mirror is stuck on stream DLQ" in text and "database or disk is full" in text
    assert "20 messages of the stream not mirrored yet" in text

    fault.on.clear()
    support.wait_for(lambda: support.entry_count(rt.engine) == 20, timeout=20, message="the twenty after the fault")
    support.wait_for(lambda: well(app), timeout=10, message="/healthz to be ok")
    assert "The mirror is stuck" not in viewer.get("/status/banner").get_data(as_text=True)
    assert pauses[:4] == [0.5, 1.0, 2.0, 4.0]

    # The next outage starts again from the first pause, not from where the last one ended.
    first_outage = len(pauses)
    fault.on.set()
    publish_dead_letters(nats_server.url, 2, first=20)
    support.wait_for(lambda: len(pauses) > first_outage, timeout=10, message="a retry in the second outage")
    assert pauses[first_outage] == 0.5
    fault.on.clear()
    support.wait_for(lambda: support.entry_count(rt.engine) == 22, timeout=20, message="the two after the fault")
    support.wait_for(lambda: well(app), timeout=10, message="/healthz to be ok")
    assert entry_seqs(rt.engine) == list(range(1, 23))

    # One line when the stream got stuck and one when it recovered, each time; none per retry.
    stuck = mirror_lines(caplog, "DLQ", "is stuck")
    assert len(stuck) == 2 and all(FULL_DISK in line for line in stuck), stuck
    assert len(mirror_lines(caplog, "DLQ", "recovered")) == 2


@pytest.fixture
def refusing(monkeypatch) -> threading.Event:
    """While set, the mirror's writer process cannot be started: what a forkserver whose socket
    path is too long raises (a full process table fails the same way)."""
    refusing, started = threading.Event(), WriterProcess._start
    refusing.set()

    def start(writer):
        if refusing.is_set():
            raise OSError("AF_UNIX path too long")
        started(writer)

    monkeypatch.setattr(WriterProcess, "_start", start)
    return refusing


def test_a_writer_process_that_cannot_be_started_is_told_as_stuck_and_mirrors_once_it_starts(
        make_app, nats_server, refusing, caplog):
    caplog.set_level(logging.WARNING, logger=MIRROR_LOG)
    app = make_app(online=True)
    rt = runtime_of(app)
    assert any(line.startswith("the mirror's writer could not be started (OSError: AF_UNIX path too long)")
               for line in (r.getMessage() for r in caplog.records if r.name == MIRROR_LOG))
    publish_dead_letters(nats_server.url, 5)
    body = support.wait_for(lambda: stuck_health(app, "OSError: AF_UNIX path too long"), timeout=10,
                            message="/healthz to say the mirror is stuck, with the writer's error")
    assert body["mirror"]["streams"]["DLQ"]["lag"] == 5
    assert support.entry_count(rt.engine) == 0

    refusing.clear()  # the retry starts the writer
    support.wait_for(lambda: support.entry_count(rt.engine) == 5, timeout=20, message="the five once it starts")
    support.wait_for(lambda: well(app), timeout=10, message="/healthz to be ok")
    assert entry_seqs(rt.engine) == [1, 2, 3, 4, 5]


def test_a_writer_process_that_cannot_be_started_is_told_as_stuck_while_the_streams_are_quiet(
        make_app, nats_server, refusing):
    # Nothing arrives to be written: /healthz must not say all is well while nothing could be.
    app = make_app(online=True)
    rt = runtime_of(app)
    body = support.wait_for(lambda: stuck_health(app, "OSError: AF_UNIX path too long"), timeout=10,
                            message="/healthz to say the mirror is stuck on a quiet stream, with the writer's error")
    assert body["mirror"]["streams"]["DLQ"]["lag"] == 0
    viewer = support.logged_in(app, "viewer")
    # Every stream stuck with the writer's one error: one line names them all.
    support.wait_for(lambda: "The mirror is stuck on streams DLQ and DLQ_ADVISORIES" in viewer.get(
        "/status/banner").get_data(as_text=True), message="the banner to name both streams in one line")

    refusing.clear()  # the next retry starts it, though nothing has arrived
    support.wait_for(lambda: well(app), timeout=20, message="/healthz to be ok once the writer starts")
    publish_dead_letters(nats_server.url, 3)
    support.wait_for(lambda: support.entry_count(rt.engine) == 3, timeout=20, message="the three")
    assert entry_seqs(rt.engine) == [1, 2, 3]


def test_the_mirrors_loop_ended_by_an_unexpected_error_says_so_and_starts_again(make_app, settings, nats_server,
                                                                               monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger=MIRROR_LOG)
    ran, calls = mirror.Mirror._run, []

    async def run(self):  # the first loop meets an error nothing in it expected
        calls.append(self)
        if len(calls) == 1:
            raise RuntimeError("an error nothing expected")
        await ran(self)

    monkeypatch.setattr(mirror.Mirror, "_run", run)
    monkeypatch.setattr(mirror, "RETRY_FIRST", 0.2)
    app = make_app(settings=settings, online=True)  # started: its mirror follows its streams
    failure = [r for r in caplog.records if r.name == MIRROR_LOG and r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failure] == [
        "the mirror stopped (RuntimeError: an error nothing expected); starting it again in 0.2 s"]
    assert failure[0].exc_info is not None  # with its traceback
    assert len(calls) == 2
    publish_dead_letters(nats_server.url, 3)
    support.wait_for(lambda: support.entry_count(runtime_of(app).engine) == 3, timeout=20,
                     message="the loop started again to mirror")
    support.wait_for(lambda: well(app), timeout=10, message="/healthz to be ok")


def test_a_replica_that_does_not_mirror_counts_every_stream_from_the_committed_positions(app, nats_server, settings):
    rt = runtime_of(app)
    other = create_app({"SETTINGS": settings, "TESTING": True})
    second = runtime_of(other).start()
    try:
        assert second.bridge.wait_connected(10)
        support.dead_letter_orders(app, nats_server.url, [b"{}"] * 3)
        status, body = health(other)
        assert status == 200 and body["mirror"]["leader"] is False and body["mirror_lag"] == 0
        assert body["mirror"]["streams"]["DLQ"]["last_seq"] == 3
        assert body["mirror"]["streams"]["DLQ_ADVISORIES"]["last_seq"] == 0

        with support.writer_stopped(rt):  # the replica that mirrors commits nothing meanwhile
            async def terminate_two():
                nc, _, pulled = await _pull_orders(nats_server.url, 2)
                try:
                    await _terminate(nc, pulled)
                finally:
                    await nc.close()

            support.run(terminate_two(), timeout=30)
            publish_dead_letters(nats_server.url, 4)
            body = support.wait_for(lambda: (b := health(other)[1])["mirror_lag"] == 6 and b, timeout=10,
                                    message="the other replica to count four dead letters and two advisories")
            assert body["mirror"]["streams"]["DLQ"]["lag"] == 4
            assert body["mirror"]["streams"]["DLQ_ADVISORIES"]["lag"] == 2
        support.wait_for(lambda: health(other)[1]["mirror_lag"] == 0, timeout=20, message="the lag to go")
    finally:
        second.stop()


def test_a_committed_batch_proves_the_stream_holds_its_last_sequence():
    # stream_info is asked before a batch arrives: the stream's last sequence read then may be
    # below what is committed right after. The progress never says the stream holds less.
    progress = StreamProgress("DLQ", last_seq=0, stream_last_seq=1)
    progress.committed(2, 2)
    assert (progress.last_seq, progress.stream_last_seq, progress.lag, progress.ingested) == (2, 2, 0, 2)
    progress.saw_stream(5)
    progress.committed(3, 1)
    assert (progress.stream_last_seq, progress.lag) == (5, 2)


def test_a_stuck_streams_error_names_no_database_server():
    """Every role reads it on the banner ("The mirror is stuck on stream DLQ: ..."): a viewer was
    shown the database server's address and port and SQLAlchemy's link with PostgreSQL away."""
    import sqlalchemy

    from dlq_dashboard.ingest.progress import StreamProgress

    class OperationalError(Exception):  # psycopg's, as libpq words a refused connection
        pass

    driver = OperationalError('connection to server at "10.1.2.3", port 5432 failed: Connection refused\n'
                              "\tIs the server running on that host and accepting TCP/IP connections?")
    progress = StreamProgress("DLQ")
    progress.stuck(sqlalchemy.exc.OperationalError("INSERT INTO entries ...", {}, driver))
    assert progress.error == "OperationalError: Connection refused"
