"""Sources whose streams share a name and a creation time (SPEC section 12), on real servers: a
second nats-server started from a copy of the first's store (a backup restored, a disaster-recovery
copy) holds stream DLQ with the first's creation time. Two sources reading the two each store
every message, under their own name; a source renamed goes on where its old name stopped and
stores nothing twice."""

from __future__ import annotations

import logging
import shutil
from collections import Counter

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig
from sqlalchemy import select

from dlq_dashboard.config import load_settings
from dlq_dashboard.db.engine import create_db_engine
from dlq_dashboard.db.models import Entry, MirrorState
from dlq_dashboard.ingest.takeover import take_over_position
from dlq_dashboard.ingest.writes import OutOfOrder, StreamMessage, ingest_dlq_batch
from dlq_dashboard.nats.server import NatsServer
from dlq_dashboard.runtime import runtime_of

from dlq_dashboard.times import utcnow

from . import support

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# More than a batch (ingest/mirror.py BATCH): the backlog is read in several.
BACKLOG = 2500


def publish(url: str, count: int, start: int = 0) -> None:
    support.run(support.publish_fast(url, "dlq.orders.created", count, lambda i: (
        b'{"n": %d}' % (start + i), support.dlq_headers(Dlq_Reason="fatal", Dlq_Error="failed"))), timeout=60)


async def _terminate_one(url: str) -> None:
    """One message of stream ORDERS terminated by its consumer: a termination advisory, which the
    mirror makes an entry of (its DLQ copy never comes)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        await js.publish("orders.created", b'{"order": 1}')
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="billing", ack_policy=AckPolicy.EXPLICIT))
        sub = await js.pull_subscribe("orders.>", durable="billing", stream="ORDERS")
        [message] = await sub.fetch(1, timeout=5)
        await nc.request(message.reply, b"+TERM refused", timeout=2)
    finally:
        await nc.close()


async def _created(url: str):
    nc = await nats.connect(url)
    try:
        return (await nc.jetstream().stream_info("DLQ")).created
    finally:
        await nc.close()


def stored(engine) -> Counter:
    """How often each (source, epoch, sequence) of a DLQ message is stored."""
    with engine.connect() as conn:
        return Counter(conn.execute(select(Entry.source, Entry.dlq_epoch, Entry.dlq_seq)
                                    .where(Entry.dlq_seq.is_not(None))).all())


def of_source(engine, source: str) -> list[int]:
    """The DLQ sequences stored under ``source``, in order."""
    return sorted(seq for (name, _, seq) in stored(engine) if name == source)


def advisory_entries(engine) -> Counter:
    """Entries made from an advisory alone, by source."""
    with engine.connect() as conn:
        return Counter(conn.execute(select(Entry.source).where(Entry.sources == "advisory")).scalars())


def positions(engine) -> dict[tuple[str, str], int]:
    with engine.connect() as conn:
        return {(r.source, r.stream): r.last_seq
                for r in conn.execute(select(MirrorState.source, MirrorState.stream, MirrorState.last_seq))}


def started(make_app, tmp_path, sources: list[dict]):
    """A dashboard of ``sources`` (the test's database), every source's mirror following."""
    app = make_app(sources=load_settings({"DLQ_CONFIG": support.sources_file(tmp_path, sources)}).sources)
    return support.start_sources(app)


@pytest.fixture
def copy_server(tmp_path):
    server = None

    def start_from(original: NatsServer) -> NatsServer:
        nonlocal server
        original.stop()
        shutil.copytree(original.store_dir, tmp_path / "nats-copy")
        original.start()
        server = NatsServer(store_dir=tmp_path / "nats-copy", log_path=tmp_path / "nats-copy.log").start()
        return server

    yield start_from
    if server is not None:
        server.stop()


def _eps_mirrored(make_app, tmp_path, nats_server):
    """Source eps's dashboard, started, its backlog and a terminated message's advisory stored,
    then stopped: the engine of its database."""
    first = started(make_app, tmp_path, [{"name": "eps", "nats_url": nats_server.url, "stream": "DLQ"}])
    engine = runtime_of(first).engine
    publish(nats_server.url, BACKLOG)
    support.run(_terminate_one(nats_server.url), timeout=30)
    support.wait_for(lambda: len(of_source(engine, "eps")) == BACKLOG and advisory_entries(engine)["eps"] == 1,
                     timeout=60, message="source eps to store its backlog and its advisory")
    runtime_of(first).stop()
    return engine


def test_two_sources_reading_a_stream_and_a_copy_of_its_store_each_store_every_message(
        make_app, tmp_path, nats_server, copy_server):
    # The key (stream, epoch, sequence) left the source out: the copy's messages were "already
    # stored" as the first source's, and dropped, while /api/sources said the copy's source was ok.
    eps = {"name": "eps", "nats_url": nats_server.url, "stream": "DLQ"}
    engine = _eps_mirrored(make_app, tmp_path, nats_server)

    copy = copy_server(nats_server)
    assert support.run(_created(copy.url), timeout=10) == support.run(_created(nats_server.url), timeout=10)
    zeta = {"name": "zeta", "nats_url": copy.url, "stream": "DLQ"}
    second = started(make_app, tmp_path, [eps, zeta])
    support.wait_for(lambda: len(of_source(engine, "zeta")) == BACKLOG and advisory_entries(engine)["zeta"] == 1,
                     timeout=60, message=f"source zeta to store its {BACKLOG} messages and its advisory "
                                         f"(it has {len(of_source(engine, 'zeta'))})")
    # New dead letters to each, the copy's first: each stored under its own source.
    publish(copy.url, 1, start=BACKLOG)
    support.wait_for(lambda: len(of_source(engine, "zeta")) == BACKLOG + 1, timeout=30, message="zeta's new one")
    publish(nats_server.url, 1, start=BACKLOG)
    support.wait_for(lambda: len(of_source(engine, "eps")) == BACKLOG + 1, timeout=30, message="eps's new one")
    everything = range(1, BACKLOG + 2)
    assert of_source(engine, "eps") == of_source(engine, "zeta") == list(everything)
    assert set(stored(engine).values()) == {1} and advisory_entries(engine) == {"eps": 1, "zeta": 1}
    assert positions(engine)[("eps", "DLQ")] == positions(engine)[("zeta", "DLQ")] == BACKLOG + 1
    sources = {s["name"]: s for s in support.logged_in(second, "viewer").get("/api/sources").get_json()["sources"]}
    assert {name: (s["status"], s["mirror_lag"], s["open"]) for name, s in sources.items()} == {
        "eps": ("ok", 0, BACKLOG + 2), "zeta": ("ok", 0, BACKLOG + 2)}


def test_a_renamed_source_goes_on_where_its_old_name_stopped_and_stores_nothing_twice(
        make_app, tmp_path, nats_server, caplog):
    # Renaming keeps the place: with the source in the key, reading the stream again from its start
    # would store every message a second time under the new name.
    engine = _eps_mirrored(make_app, tmp_path, nats_server)
    was = positions(engine)

    caplog.set_level(logging.WARNING, logger="dlq_dashboard.ingest.takeover")
    second = started(make_app, tmp_path, [{"name": "zeta", "nats_url": nats_server.url, "stream": "DLQ"}])
    assert positions(engine) == {("zeta", stream): seq for (_, stream), seq in was.items()}
    publish(nats_server.url, 1, start=BACKLOG)
    support.run(_terminate_one_more(nats_server.url), timeout=30)
    support.wait_for(lambda: of_source(engine, "zeta") == [BACKLOG + 1] and advisory_entries(engine)["zeta"] == 1,
                     timeout=30, message="the new ones under the new name")
    assert of_source(engine, "eps") == list(range(1, BACKLOG + 1))
    assert set(stored(engine).values()) == {1} and advisory_entries(engine) == {"eps": 1, "zeta": 1}
    taken = [r.getMessage() for r in caplog.records if "takes over" in r.getMessage()]
    assert sorted(taken) == sorted(
        f"source zeta takes over the position of stream {stream} that source eps (no longer configured) left: "
        f"it goes on after sequence {seq}; the entries stored before keep the name eps"
        for (_, stream), seq in was.items()), taken
    [row] = support.logged_in(second, "viewer").get("/api/sources").get_json()["sources"]
    assert (row["name"], row["status"], row["mirror_lag"]) == ("zeta", "ok", 0)


async def _terminate_one_more(url: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.publish("orders.created", b'{"order": 2}')
        sub = await js.pull_subscribe("orders.>", durable="billing", stream="ORDERS")
        [message] = await sub.fetch(1, timeout=5)
        await nc.request(message.reply, b"+TERM refused", timeout=2)
    finally:
        await nc.close()


@pytest.mark.both_databases
def test_a_position_is_taken_over_only_from_a_source_no_longer_configured_of_that_stream_and_epoch(database_url):
    engine = create_db_engine(database_url)

    def dead_letters(source: str, *seqs: int, after: int | None = None) -> int:
        return ingest_dlq_batch(engine, "DLQ", "e1", [StreamMessage(seq, "dlq.orders.created", None, b"{}", utcnow())
                                                      for seq in seqs], after=after, source=source)

    try:
        assert dead_letters("eps", 1, 2, 3) == 3
        assert take_over_position(engine, "DLQ", "e1", "zeta", ("eps", "zeta")) == (None, 0)  # eps is configured
        assert take_over_position(engine, "DLQ", "e2", "zeta", ("zeta",)) == (None, 0)  # another stream of that name
        assert take_over_position(engine, "ORDERS_DLQ", "e1", "zeta", ("zeta",)) == (None, 0)
        assert positions(engine) == {("eps", "DLQ"): 3}
        assert take_over_position(engine, "DLQ", "e1", "zeta", ("zeta",)) == ("e1", 3)
        assert take_over_position(engine, "DLQ", "e1", "zeta", ("zeta",)) == ("e1", 3)  # its own now
        assert positions(engine) == {("zeta", "DLQ"): 3}
        # A process still writing the old name's batches (a replica not yet restarted with the new
        # file) finds its position gone: its batch is refused, so nothing is stored twice.
        with pytest.raises(OutOfOrder):
            dead_letters("eps", 4, after=3)
        assert dead_letters("zeta", 4, after=3) == 1
        assert stored(engine) == Counter({("eps", "e1", 1): 1, ("eps", "e1", 2): 1, ("eps", "e1", 3): 1,
                                          ("zeta", "e1", 4): 1})
    finally:
        engine.dispose()
