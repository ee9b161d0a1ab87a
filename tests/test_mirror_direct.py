"""The mirror reads a backlog by batched direct gets (ingest/direct.py) against a real
nats-server: what it stores is what the ordered consumer stores, byte for byte; a stream that
allows no direct gets, a refused one and a stream recreated during the reads lose nothing and
store nothing under the wrong epoch."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timezone

import nats
import pytest
from sqlalchemy import select

from dlq_dashboard.db.models import Entry
from dlq_dashboard.ingest import direct, mirror
from dlq_dashboard.ingest.inbox import Budget, Inbox
from dlq_dashboard.runtime import runtime_of

from . import support

SMALL_BATCH = 50  # a backlog of several batches in a few hundred messages
BACKLOG = 300


def tricky(i: int) -> tuple[bytes, dict | None]:
    """Messages of every shape the headers and payloads can take."""
    kind = i % 6
    if kind == 0:
        return b"", support.dlq_headers("orders.empty", Dlq_Error="empty payload")
    if kind == 1:
        return b"\xff\xfe not UTF-8", support.dlq_headers("orders.bin", Dlq_Error="zoë 😀 ✓")
    if kind == 2:
        return b'{"n": %d}' % i, None  # no headers at all
    if kind == 3:
        return b"{}", {**support.dlq_headers("orders.pad", Dlq_Error="  padded  "), "X-Empty": ""}
    if kind == 4:  # a header named as the server's own lines, which must stay the message's
        return b"{}", {**support.dlq_headers("orders.named"), "Nats-Stream-Note": "x: y", "X-Colon": "a: b: c"}
    return json.dumps({"n": i, "text": "x" * 200}).encode(), support.dlq_headers(
        "orders.created", Dlq_Reason="schema_invalid", Dlq_Deliveries="3",
        Dlq_Schema_Errors='[{"path": "/n", "message": "not a string"}]', Dlq_Failed_At="2026-11-29T10:00:00Z")


def publish_backlog(url: str, count: int = BACKLOG, *, allow_direct: bool = True) -> None:
    async def publish():
        nc = await nats.connect(url)
        try:
            await nc.jetstream().add_stream(name="DLQ", subjects=["dlq.>"], allow_direct=allow_direct)
        finally:
            await nc.close()
        await support.publish_fast(url, "dlq.backlog", count, tricky)

    support.run(publish())


def stored(app) -> list[dict]:
    """Every entry's columns but the ones the moment of writing sets, in stream order."""
    left_out = {"id", "received_at", "updated_at", "group_id", "dlq_epoch"}
    with runtime_of(app).engine.connect() as conn:
        rows = conn.execute(select(Entry.__table__).order_by(Entry.dlq_epoch, Entry.dlq_seq)).mappings().all()
    return [{k: v for k, v in row.items() if k not in left_out} for row in rows]


@pytest.fixture
def direct_reads(monkeypatch) -> list[int]:
    """The batch sizes read by direct get; the mirror's batches made small."""
    monkeypatch.setattr(mirror, "BATCH", SMALL_BATCH)
    sizes: list[int] = []
    read = direct.DirectReader.read

    async def counted(self, start, count, max_bytes):
        batch, pending = await read(self, start, count, max_bytes)
        sizes.append(len(batch))
        return batch, pending

    monkeypatch.setattr(direct.DirectReader, "read", counted)
    return sizes


def entry_count(app) -> int:
    return len(stored(app))


def test_a_backlog_read_by_direct_gets_is_stored_as_the_consumer_stores_it(make_app, settings, nats_server,
                                                                           tmp_path, direct_reads, monkeypatch):
    publish_backlog(nats_server.url)
    by_direct = make_app(settings=settings, online=True)
    support.wait_for(lambda: entry_count(by_direct) == BACKLOG, timeout=60, message="the backlog, read directly")
    assert sum(direct_reads) >= BACKLOG - SMALL_BATCH, direct_reads  # the backlog came by direct gets
    read_directly = sum(direct_reads)
    # Caught up, the live stream is followed by the ordered consumer.
    support.run(support.publish_many(nats_server.url, [("dlq.live", b"{}", support.dlq_headers("live.x"))]))
    support.wait_for(lambda: entry_count(by_direct) == BACKLOG + 1, message="the live message")
    assert sum(direct_reads) == read_directly

    monkeypatch.setattr(mirror.Mirror, "_direct_reader", lambda self, stream, info: None)
    by_consumer = make_app(settings=settings, online=True, database_url=f"sqlite:///{tmp_path}/consumer.sqlite3")
    support.wait_for(lambda: entry_count(by_consumer) == BACKLOG + 1, timeout=60, message="the backlog, by consumer")
    assert stored(by_direct) == stored(by_consumer)
    rows = stored(by_direct)
    assert json.loads(rows[1]["headers"])["Dlq-Error"] == ["zoë 😀 ✓"] and rows[1]["payload"] == b"\xff\xfe not UTF-8"
    assert rows[2]["headers"] == "{}" and "no headers" in rows[2]["notes"]
    assert json.loads(rows[4]["headers"])["X-Colon"] == ["a: b: c"]


def test_a_stream_without_direct_gets_is_read_by_the_consumer(make_app, settings, nats_server, direct_reads):
    publish_backlog(nats_server.url, allow_direct=False)
    app = make_app(settings=settings, online=True)
    support.wait_for(lambda: entry_count(app) == BACKLOG, timeout=60, message="the backlog")
    assert direct_reads == []
    assert [row["dlq_seq"] for row in stored(app)] == list(range(1, BACKLOG + 1))


def test_a_refused_direct_get_falls_back_to_the_consumer(make_app, settings, nats_server, direct_reads, monkeypatch,
                                                         caplog):
    publish_backlog(nats_server.url)
    read = direct.DirectReader.read
    calls = []

    async def refused_once(self, start, count, max_bytes):
        calls.append(start)
        if len(calls) == 2:
            raise direct.DirectUnavailable("a direct get of DLQ was refused (503)")
        return await read(self, start, count, max_bytes)

    monkeypatch.setattr(direct.DirectReader, "read", refused_once)
    with caplog.at_level(logging.WARNING, logger="dlq_dashboard.ingest.mirror"):
        app = make_app(settings=settings, online=True)
        support.wait_for(lambda: entry_count(app) == BACKLOG, timeout=60, message="the backlog")
    assert [row["dlq_seq"] for row in stored(app)] == list(range(1, BACKLOG + 1))
    assert any("refused (503); reading the stream with a consumer instead" in r.getMessage() for r in caplog.records)


def test_a_stream_recreated_while_read_directly_stores_nothing_of_it_under_the_old_epoch(
        make_app, settings, nats_server, direct_reads, monkeypatch):
    publish_backlog(nats_server.url)
    read = direct.DirectReader.read
    calls = []

    async def recreating(self, start, count, max_bytes):
        calls.append(start)
        if len(calls) == 2:  # the stream is replaced by a longer one between two batches
            nc = await nats.connect(nats_server.url)
            try:
                js = nc.jetstream()
                await js.delete_stream("DLQ")
                await js.add_stream(name="DLQ", subjects=["dlq.>"], allow_direct=True)
            finally:
                await nc.close()
            await support.publish_fast(nats_server.url, "dlq.new", 2 * BACKLOG,
                                       lambda i: (b'{"new": %d}' % i, support.dlq_headers("new.x")))
        return await read(self, start, count, max_bytes)

    monkeypatch.setattr(direct.DirectReader, "read", recreating)
    app = make_app(settings=settings, online=True)
    support.wait_for(lambda: entry_count(app) == SMALL_BATCH + 2 * BACKLOG, timeout=60,
                     message="the first batch of the old stream and the whole new one")
    with runtime_of(app).engine.connect() as conn:
        epochs = conn.execute(select(Entry.dlq_epoch, Entry.dlq_seq, Entry.original_subject)
                              .order_by(Entry.id)).all()
    old, new = epochs[0][0], epochs[-1][0]
    assert old != new
    assert [(seq, subject) for epoch, seq, subject in epochs if epoch == old] == \
        [(i + 1, tricky(i)[1]["Dlq-Original-Subject"] if tricky(i)[1] else None) for i in range(SMALL_BATCH)]
    assert [seq for epoch, seq, _ in epochs if epoch == new] == list(range(1, 2 * BACKLOG + 1))


@pytest.mark.parametrize("stamp, expected", [
    (b"2026-12-01T22:52:46.214612305Z", datetime(2026, 12, 1, 22, 52, 46, 214612, timezone.utc)),
    (b"2026-12-01T22:52:46.2Z", datetime(2026, 12, 1, 22, 52, 46, 200000, timezone.utc)),
    (b"2026-12-01T22:52:46Z", datetime(2026, 12, 1, 22, 52, 46, tzinfo=timezone.utc)),
    (b"2026-12-01T23:52:46.5+01:00", datetime(2026, 12, 1, 22, 52, 46, 500000, timezone.utc)),
])
def test_a_stored_time_reads_as_the_consumer_reads_it(stamp, expected):
    ns = direct.stored_ns(stamp)
    assert ns // 1000 == int(expected.timestamp()) * 1_000_000 + expected.microsecond


def test_batched_direct_gets_need_nats_server_2_11():
    assert direct.supports_batches("2.15.1") and direct.supports_batches("2.11.0")
    assert not direct.supports_batches("2.10.22") and not direct.supports_batches(None)
    assert not direct.supports_batches("weird")


class _SwallowingReader:
    """A direct reader whose read, cancelled, returns a batch instead (as asyncio.wait_for did
    before Python 3.12 when the answer came with the cancel)."""

    def __init__(self):
        self.reading = asyncio.Event()

    async def read(self, start: int, count: int, max_bytes: int):
        self.reading.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return [(start + i, 0, _Message(b"x")) for i in range(count)], 1000
        return [], 0

    async def close(self) -> None:
        pass


class _Message:
    def __init__(self, data: bytes):
        self.data = data


def test_closing_an_inbox_ends_a_backlog_reader_whose_cancel_was_lost():
    """Seen after a full disk during a catch-up: the follower, closing its inbox to start over,
    waited for good for a reader that had lost its cancel and waited for room in a full inbox;
    nothing was mirrored again until a restart."""
    budget = Budget(queue=100, queue_bytes=10_000, batch=100, batch_bytes=10_000)

    async def scenario():
        reader = _SwallowingReader()
        box = Inbox(0, lambda: budget, reader)
        box.behind = True
        await box.follow(None, "DLQ")  # starts the backlog reader
        await asyncio.wait_for(reader.reading.wait(), 10)
        # The reader's cancel is lost: it takes a full batch, then waits for room nobody makes.
        await asyncio.wait_for(box.close(), 10)  # a deadline against a hang, not a measure
        return box

    box = asyncio.run(scenario())
    # The reader went on as if not cancelled (its batch was taken), then ended by its loop's terms.
    assert len(box.messages) == 100 and box.behind is False


@pytest.mark.slow
def test_a_writer_failing_through_several_retries_of_a_catch_up_loses_nothing_once_it_is_back(
        make_app, settings, nats_server, direct_reads, monkeypatch):
    """The full disk of a catch-up by direct gets, on a real server: each retry starts over from
    the database with a full inbox behind it; once the writer takes writes again, the backlog is
    stored, every message once."""
    from .test_mirror_hardening import WriterFault

    monkeypatch.setattr(mirror, "QUEUE", 2 * SMALL_BATCH)  # the inbox fills while the writer refuses
    publish_backlog(nats_server.url)
    fault = WriterFault(monkeypatch)
    fault.on.set()
    app = make_app(settings=settings, online=True)
    support.wait_for(lambda: fault.refused >= 6, timeout=60, message="several retries refused")
    fault.on.clear()
    support.wait_for(lambda: entry_count(app) == BACKLOG, timeout=60, message="the backlog once the writer is back")
    assert [row["dlq_seq"] for row in stored(app)] == list(range(1, BACKLOG + 1))
