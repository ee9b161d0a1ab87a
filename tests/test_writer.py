"""The mirror's writer process: batches commit in order or not at all, a killed writer is
replaced without losing or doubling a message, and a writer never outlives the dashboard."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import Future
from multiprocessing.reduction import ForkingPickler

import pytest
from sqlalchemy import select

from dlq_dashboard.db.models import Entry
from dlq_dashboard.ingest.writer import WRITER_NICENESS, WriterError, WriterProcess
from dlq_dashboard.ingest.writes import OutOfOrder, StreamMessage, ingest_dlq_batch, read_position
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support



def rows(first: int, last: int) -> list[tuple]:
    return [(seq, "dlq.orders.created", {"Dlq-Original-Subject": "orders.created", "Dlq-Reason": "fatal"},
             f'{{"n": {seq}}}'.encode(), utcnow()) for seq in range(first, last + 1)]


def entry_seqs(engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(select(Entry.dlq_seq).order_by(Entry.dlq_seq)).scalars())


@pytest.mark.both_databases
def test_a_batch_that_follows_an_uncommitted_one_is_refused_and_stores_nothing(engine):
    assert ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(*r) for r in rows(1, 3)], after=0) == 3
    with pytest.raises(OutOfOrder, match="follows sequence 5, the database is at 3"):
        ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(*r) for r in rows(6, 8)], after=5)
    assert entry_seqs(engine) == [1, 2, 3] and read_position(engine, "DLQ") == ("e1", 3)
    # A new epoch (the stream was recreated) starts from nothing.
    with pytest.raises(OutOfOrder, match="the database is at 0"):
        ingest_dlq_batch(engine, "DLQ", "e2", [StreamMessage(*r) for r in rows(4, 4)], after=3)
    assert ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(*r) for r in rows(4, 5)], after=3) == 2
    assert entry_seqs(engine) == [1, 2, 3, 4, 5]


@pytest.mark.both_databases
@pytest.mark.slow
def test_the_writer_process_commits_batches_in_order_and_a_killed_one_is_replaced(engine, database_url):
    writer = WriterProcess(database_url)
    try:
        futures = [writer.submit("ingest_dlq_rows", "DLQ", "e1", rows(i, i + 9), i - 1) for i in range(1, 101, 10)]
        assert [f.result(timeout=60) for f in futures] == [10] * 10
        first = writer._proc.pid
        os.kill(first, signal.SIGKILL)
        support.wait_for(lambda: support.gone(first), message="the writer to die")
        # Known dead once its pipe has closed (its parent may reap it later): the next call
        # starts another writer; what was committed stays, nothing is stored twice.
        support.wait_for(writer._ended.is_set, message="the writer's pipe to close")
        assert writer.call("ingest_dlq_rows", "DLQ", "e1", rows(91, 110), 100) == 10
        assert writer._proc.pid != first
        assert entry_seqs(engine) == list(range(1, 111))
        # A failure in the writer comes back as an error with the writer's message.
        refused: Future = writer.submit("ingest_dlq_rows", "DLQ", "e1", rows(200, 201), 150)
        with pytest.raises(WriterError, match="OutOfOrder: DLQ: the batch follows sequence 150"):
            refused.result(timeout=60)
    finally:
        writer.close()
    assert support.gone(first) and writer._proc is None


def test_a_reply_to_a_cancelled_call_leaves_the_writer_answering_the_next_ones(engine, database_url):
    # A stop cancels the mirror's waits for writes in flight; their replies still come back.
    writer = WriterProcess(database_url)
    try:
        assert writer.call("ingest_dlq_rows", "DLQ", "e1", rows(1, 1), 0) == 1
        pid = writer._proc.pid
        with support.stopped(pid):  # holds the reply until the call is cancelled
            cancelled = writer.submit("ingest_dlq_rows", "DLQ", "e1", rows(2, 2), 1)
            assert cancelled.cancel()
        assert writer.submit("ingest_dlq_rows", "DLQ", "e1", rows(3, 3), 2).result(timeout=60) == 1
        assert writer._proc.pid == pid
    finally:
        writer.close()
    assert entry_seqs(engine) == [1, 2, 3]


def test_a_stopped_writer_is_silent_while_calls_wait_and_one_killed_by_its_pid_is_replaced(engine, database_url):
    """What the mirror's watch reads (ingest/mirror.py _watch): how long calls have waited without
    an answer, never while none waits; and the kill by process id that replaces a silent writer."""
    writer = WriterProcess(database_url)
    try:
        assert writer.call("ingest_dlq_rows", "DLQ", "e1", rows(1, 1), 0) == 1
        assert writer.ready and writer.silent() == 0.0
        pid = writer.pid
        with support.stopped(pid):
            waiting = writer.submit("ingest_dlq_rows", "DLQ", "e1", rows(2, 2), 1)
            support.wait_for(lambda: writer.silent() >= 0.5, timeout=10, message="the silence to be counted")
            writer.kill(pid + 1)  # not the current writer's id: nothing happens
            assert not waiting.done()
            writer.kill(pid)
            with pytest.raises(WriterError, match="the writer process ended"):
                waiting.result(timeout=30)
        support.wait_for(lambda: support.gone(pid), message="the silent writer to die")
        assert writer.silent() == 0.0
        # The next call starts another, which takes the batch from the committed position.
        assert writer.call("ingest_dlq_rows", "DLQ", "e1", rows(2, 3), 1) == 2
        assert writer.pid != pid and writer.silent() == 0.0
    finally:
        writer.close()
    assert entry_seqs(engine) == [1, 2, 3]


@pytest.mark.slow
def test_calls_in_flight_when_the_writer_dies_fail_rather_than_hang(engine, database_url):
    writer = WriterProcess(database_url)
    try:
        assert writer.call("ingest_dlq_rows", "DLQ", "e1", rows(1, 1), 0) == 1
        pid = writer._proc.pid
        with support.stopped(pid):  # it cannot answer what it is sent now
            waiting = [writer.submit("ingest_dlq_rows", "DLQ", "e1", rows(i, i), i - 1) for i in (2, 3)]
            os.kill(pid, signal.SIGKILL)
        for future in waiting:
            with pytest.raises(WriterError, match="the writer process ended"):
                future.result(timeout=30)
    finally:
        writer.close()
    assert entry_seqs(engine) == [1]


@pytest.mark.slow
def test_a_killed_writer_process_costs_the_mirror_nothing(app, nats_server):
    mirror = runtime_of(app).mirror
    support.run(support.publish_fast(nats_server.url, "dlq.orders.created", 5_000,
                                     lambda i: (f'{{"n": {i}}}'.encode(), support.dlq_headers())))
    engine = runtime_of(app).engine
    support.wait_for(lambda: support.entry_count(engine) > 0, timeout=30, message="ingest to begin")
    pid = mirror._process._proc.pid
    os.kill(pid, signal.SIGKILL)
    support.run(support.publish_fast(nats_server.url, "dlq.orders.created", 1_000,
                                     lambda i: (f'{{"n": {5_000 + i}}}'.encode(), support.dlq_headers())))
    support.wait_for(lambda: support.entry_count(engine) == 6_000, timeout=60, message="every message stored")
    assert entry_seqs(engine) == list(range(1, 6_001))
    assert mirror._process._proc.pid != pid


def test_the_writer_process_ends_when_the_dashboard_process_is_killed(tmp_path):
    code = ("import time; from dlq_dashboard.ingest.writer import WriterProcess; "
            f"w = WriterProcess('sqlite:///{tmp_path / 'dlq.db'}'); w._start(); "
            "print(w._proc.pid, flush=True); time.sleep(600)")
    support.assert_child_ends_with_its_parent(code, "writer")


def test_a_batch_that_cannot_be_read_fails_alone_and_what_follows_it_is_refused_by_its_position(
        engine, database_url):
    """Batches in flight are answered in the order of the calls: one that fails to be read fails
    alone, and the one sent behind it is refused by its position, never written past it."""
    writer = WriterProcess(database_url)
    try:
        calls = [writer.submit("ingest_dlq_rows", "DLQ", "e1", rows(1, 500), None),
                 writer.submit("ingest_dlq_rows", "DLQ", "e1", rows(501, 1000), 500),
                 writer.submit("ingest_dlq_rows", "DLQ", "e1", [(1001, "dlq.x")], 1000),  # a row cut short
                 writer.submit("ingest_dlq_rows", "DLQ", "e1", rows(1002, 1100), 1001)]
        assert [calls[0].result(30), calls[1].result(30)] == [500, 500]
        with pytest.raises(WriterError, match="TypeError"):
            calls[2].result(30)
        with pytest.raises(WriterError, match="OutOfOrder: DLQ: the batch follows sequence 1001, the database is at 1000"):
            calls[3].result(30)
        assert writer.call("ingest_dlq_rows", "DLQ", "e1", rows(1001, 1100), 1000) == 100
        assert entry_seqs(engine) == list(range(1, 1101)) and read_position(engine, "DLQ") == ("e1", 1100)
    finally:
        writer.close()


def test_the_writer_process_runs_at_a_lower_cpu_priority_than_the_dashboard(engine, database_url):
    # While a backlog drains the writer keeps a CPU busy: a page's request must get it first.
    writer = WriterProcess(database_url)
    try:
        assert writer.call("ingest_dlq_rows", "DLQ", "e1", rows(1, 1), 0) == 1  # serve() is running
        expected = min(os.getpriority(os.PRIO_PROCESS, 0) + WRITER_NICENESS, 19)
        assert os.getpriority(os.PRIO_PROCESS, writer._proc.pid) == expected > os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        writer.close()


def test_the_reply_reader_ends_quietly_when_the_writer_is_closed_between_two_of_its_reads(engine, database_url,
                                                                                           monkeypatch):
    """close() closed the pipe under the reply reader: a read begun just after it raised a
    TypeError in the reader's thread (the connection's handle gone), once in a few thousand
    closes. The reader is held, here, between its reads until close() has returned."""
    from dlq_dashboard.ingest import writer as writer_module

    raised: list[BaseException] = []
    monkeypatch.setattr("threading.excepthook", lambda args: raised.append(args.exc_value))
    writer = WriterProcess(database_url)
    real_pipe = writer_module._context().Pipe

    class HeldAfterReady:
        def __init__(self, conn):
            self.conn, self.reads = conn, 0

        def recv(self):
            self.reads += 1
            if self.reads == 1:  # the "ready" reply
                return self.conn.recv()
            # Connection.recv's own steps, close() returning between its check and its read.
            self.conn._check_closed()
            support.wait_for(lambda: writer._conn is None, timeout=30, message="close() to return")
            return ForkingPickler.loads(self.conn._recv_bytes().getbuffer())

        def __getattr__(self, name):
            return getattr(self.conn, name)

    context = writer_module._context()

    def pipe():
        ours, theirs = real_pipe()
        return HeldAfterReady(ours), theirs

    monkeypatch.setattr(context, "Pipe", pipe)
    writer.ensure_running()
    support.wait_for(lambda: writer.ready, timeout=30, message="the writer to start")
    reader = next(t for t in threading.enumerate() if t.name == "mirror-writer-replies")
    writer.close()
    reader.join(timeout=30)
    assert not reader.is_alive() and raised == []
