"""Each source on its own (SPEC section 12), on real servers: three sources (accounts A and B of one
nats-server, and a second server) mirrored by one dashboard, while one of them is killed, frozen or
loses its stream; and two replicas on PostgreSQL sharing the three sources, a lease a source."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest
from sqlalchemy import select

from dlq_dashboard.config import load_settings
from dlq_dashboard.db.engine import create_db_engine
from dlq_dashboard.db.models import Entry
from dlq_dashboard.ingest.mirror import LEASE_SECONDS, lease_name
from dlq_dashboard.runtime import runtime_of

from . import support
from .test_replicas import Replica, start_all

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SOURCES = ("orders", "billing", "shipping")


def urls(shared, second) -> dict[str, str]:
    """Where each source's dead letters are published (three_sources' servers and accounts)."""
    return {"orders": support.account_url(shared, "a"), "billing": support.account_url(shared, "b"),
            "shipping": second.url}


def publish(url: str, source: str, count: int, start: int = 0) -> None:
    """``count`` dead letters into the source's stream (DLQ, or DLQ_SHIPPING over dlq.shipping.>)."""
    subject = "dlq.shipping.sent" if source == "shipping" else f"dlq.{source}.failed"
    support.run(support.publish_fast(url, subject, count, lambda i: (
        b'{"n": %d}' % (start + i), support.dlq_headers(subject[4:], Dlq_Reason="fatal", Dlq_Error="failed"))),
        timeout=60)


def stored(engine) -> Counter:
    """How often each (source, epoch, dlq_seq) is stored."""
    with engine.connect() as conn:
        return Counter(conn.execute(select(Entry.source, Entry.dlq_epoch, Entry.dlq_seq)
                                    .where(Entry.dlq_seq.is_not(None))).all())


def counts(engine) -> dict[str, int]:
    """Entries a source."""
    found = Counter(source for source, _, _ in stored(engine))
    return {source: found.get(source, 0) for source in SOURCES}


def assert_each_once(engine, expected: dict[str, int]) -> None:
    """Every source has its ``expected`` count of entries, sequences 1 to n of its stream each once
    (a stream that was recreated counts again from 1 under its new epoch)."""
    seen = stored(engine)
    assert all(times == 1 for times in seen.values()), [key for key, times in seen.items() if times > 1]
    assert counts(engine) == expected
    for source in SOURCES:
        by_epoch: dict[str, list[int]] = {}
        for (name, epoch, seq) in seen:
            if name == source:
                by_epoch.setdefault(epoch, []).append(seq)
        for seqs in by_epoch.values():
            assert sorted(seqs) == list(range(1, len(seqs) + 1)), (source, sorted(seqs)[:5], len(seqs))


@pytest.fixture
def desk(make_app, three_sources, shared_server, nats_server):
    """One dashboard mirroring the three sources (SQLite), started, with where to publish."""
    app = make_app(sources=load_settings({"DLQ_CONFIG": three_sources}).sources)
    support.start_sources(app)
    return runtime_of(app), urls(shared_server, nats_server)


def test_a_killed_server_stops_only_its_source_and_its_backlog_is_mirrored_once_when_it_returns(
        desk, nats_server):
    rt, at = desk
    for source in SOURCES:
        publish(at[source], source, 200)
    support.wait_for(lambda: counts(rt.engine) == dict.fromkeys(SOURCES, 200), timeout=30, message="600 entries")

    nats_server.kill()
    support.wait_for(lambda: not rt.feeds["shipping"].bridge.state.connected, message="shipping to be unreachable")
    publish(at["orders"], "orders", 300, 200)
    publish(at["billing"], "billing", 300, 200)
    # The other two go on while the third's server is away.
    support.wait_for(lambda: counts(rt.engine) == {"orders": 500, "billing": 500, "shipping": 200}, timeout=30,
                     message="the other sources' new entries while shipping's server is down")
    assert rt.feeds["orders"].bridge.state.connected and rt.feeds["billing"].bridge.state.connected

    nats_server.start()  # same port and store: its stream and its 200 messages are back
    publish(at["shipping"], "shipping", 2000, 200)  # a backlog, waiting while the dashboard reconnects
    support.wait_for(lambda: counts(rt.engine)["shipping"] == 2200, timeout=60, message="shipping's backlog")
    publish(at["orders"], "orders", 1, 500)
    support.wait_for(lambda: counts(rt.engine)["orders"] == 501, message="orders after shipping's return")
    assert_each_once(rt.engine, {"orders": 501, "billing": 500, "shipping": 2200})


def test_a_frozen_server_stops_only_its_source(desk, nats_server):
    rt, at = desk
    publish(at["shipping"], "shipping", 100)
    support.wait_for(lambda: counts(rt.engine)["shipping"] == 100, message="shipping's first entries")
    with support.frozen(nats_server):
        # Long enough for the liveness probe to declare it unreachable and the follower to fail on it.
        support.wait_for(lambda: not rt.feeds["shipping"].bridge.state.connected, message="shipping unreachable")
        publish(at["orders"], "orders", 300)
        publish(at["billing"], "billing", 300)
        support.wait_for(lambda: counts(rt.engine) == {"orders": 300, "billing": 300, "shipping": 100}, timeout=30,
                         message="the other sources' entries while shipping's server is frozen")
        assert rt.feeds["orders"].bridge.state.connected and rt.feeds["billing"].bridge.state.connected
    publish(at["shipping"], "shipping", 100, 100)
    support.wait_for(lambda: counts(rt.engine)["shipping"] == 200, timeout=60, message="shipping after the thaw")
    publish(at["billing"], "billing", 1, 300)
    support.wait_for(lambda: counts(rt.engine)["billing"] == 301, message="billing after the thaw")
    assert_each_once(rt.engine, {"orders": 300, "billing": 301, "shipping": 200})


def test_a_deleted_stream_stops_only_its_source_which_resumes_when_the_stream_is_back(desk, shared_server):
    rt, at = desk
    for source in SOURCES:
        publish(at[source], source, 50)
    support.wait_for(lambda: counts(rt.engine) == dict.fromkeys(SOURCES, 50), timeout=30, message="150 entries")
    old_epoch = rt.feeds["orders"].mirror.progress["DLQ"].epoch

    async def delete():
        import nats

        nc = await nats.connect(at["orders"])
        try:
            await nc.jetstream().delete_stream("DLQ")  # account A's only: billing's DLQ is account B's
        finally:
            await nc.close()

    support.run(delete())
    publish(at["billing"], "billing", 100, 50)
    publish(at["shipping"], "shipping", 100, 50)
    support.wait_for(lambda: counts(rt.engine) == {"orders": 50, "billing": 150, "shipping": 150}, timeout=30,
                     message="the other sources' new entries")
    # The mirror makes the stream again (DLQ_STREAM is created when missing) and follows the new one.
    progress = rt.feeds["orders"].mirror.progress["DLQ"]
    support.wait_for(lambda: progress.epoch not in (None, old_epoch), timeout=30, message="orders' new stream")
    publish(at["orders"], "orders", 70)
    support.wait_for(lambda: counts(rt.engine)["orders"] == 120, timeout=30, message="orders' new stream mirrored")
    assert_each_once(rt.engine, {"orders": 120, "billing": 150, "shipping": 150})


def test_three_busy_sources_hold_together_the_memory_budget_of_one(make_app, three_sources, shared_server,
                                                                   nats_server, monkeypatch):
    """Each source's followers hold a share of the budget (Mirror.sharing): three sources with
    backlogs far larger than it hold about what one would, not three times as much."""
    import gc

    from nats.aio.msg import Msg

    from dlq_dashboard.ingest import mirror
    from dlq_dashboard.ingest.direct import Received  # a backlog is read by direct gets

    monkeypatch.setattr(mirror, "QUEUE", 1000)
    monkeypatch.setattr(mirror, "BATCH", 250)
    send = mirror.Mirror._send

    taken = [0]  # samples taken so far

    async def slow_send(self, *args):
        # Writers far slower than delivery, and never faster than the test looks: each batch waits
        # for the next sample, so the budget is looked at all along, however slow a sample is.
        wanted = taken[0] + 1
        while taken[0] < wanted:
            await asyncio.sleep(0.01)
        return await send(self, *args)

    monkeypatch.setattr(mirror.Mirror, "_send", slow_send)
    app = make_app(sources=load_settings({"DLQ_CONFIG": three_sources}).sources)
    rt = runtime_of(support.start_sources(app))
    at, total = urls(shared_server, nats_server), 6000
    for source in SOURCES:
        publish(at[source], source, total)
    samples = []  # (entries stored, messages held in this process)
    while (stored := sum(counts(rt.engine).values())) < 3 * total:
        gc.collect()
        samples.append((stored, sum(1 for o in gc.get_objects() if type(o) in (Msg, Received))))
        taken[0] = len(samples)
        assert len(samples) < 3000, f"the backlogs were not mirrored ({stored} of {3 * total} entries)"
    peak = max(held for _, held in samples)
    # One source alone stays under 5 budgets (tests/test_mirror.py); three together too.
    assert peak < 5 * mirror.QUEUE, f"{peak} messages held at once"
    assert len([1 for stored, _ in samples if stored < 3 * total / 2]) >= 3
    assert_each_once(rt.engine, dict.fromkeys(SOURCES, total))


# --- two replicas on PostgreSQL ----------------------------------------------------------------

class AnsweringReplica(Replica):
    """A replica that is started once it answers at all: which sources it mirrors is read from the
    leases, not from its /healthz."""

    def healthy(self) -> bool:
        return self.health() is not None


def leaders(engine, replicas) -> dict[str, str | None]:
    """The replica (its name) that holds each source's mirror lease now, None when none does."""
    from dlq_dashboard.db.leases import LEASES
    from dlq_dashboard.times import utcnow

    with engine.connect() as conn:
        rows = dict(conn.execute(select(LEASES.c.name, LEASES.c.holder)
                                 .where(LEASES.c.expires_at > utcnow())).all())
    pids = {str(r.proc.pid): r.name for r in replicas if r.proc is not None and r.proc.poll() is None}
    return {source: pids.get((rows.get(lease_name(source)) or "::").split(":")[1]) for source in SOURCES}


def mirroring(replica) -> list[str]:
    """The sources a replica's log says it started mirroring."""
    return [source for source in SOURCES if f"of source {source}" in replica.log()]


@pytest.mark.timeout(300)
def test_two_replicas_mirror_each_source_once_and_a_kill_9_hands_its_sources_over(
        tmp_path, three_sources, shared_server, nats_server, postgres_server):
    url = postgres_server.create_database(migrated=True)
    engine = create_db_engine(url)
    at = urls(shared_server, nats_server)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("DLQ_", "NATS_"))},
           "DATABASE_URL": url, "DLQ_CONFIG": three_sources, "SECRET_KEY": "shared", "PYTHONUNBUFFERED": "1"}
    replicas = [AnsweringReplica(name, tmp_path, env) for name in ("a", "b")]
    try:
        start_all(replicas)
        held = support.wait_for(lambda: (now := leaders(engine, replicas)) and all(now.values()) and now,
                                timeout=LEASE_SECONDS + 20, message="a leader for every source")
        for source in SOURCES:
            publish(at[source], source, 300)
        support.wait_for(lambda: counts(engine) == dict.fromkeys(SOURCES, 300), timeout=60, message="900 entries")
        # Exactly one replica mirrors each source: the one holding its lease, and the log agrees.
        assert leaders(engine, replicas) == held
        for replica in replicas:
            assert sorted(mirroring(replica)) == sorted(s for s, name in held.items() if name == replica.name)

        victim = next(r for r in replicas if r.name == held["shipping"])
        survivor = next(r for r in replicas if r is not victim)
        publish(at["shipping"], "shipping", 2000, 300)  # in flight when the leader dies
        victim.kill()
        publish(at["orders"], "orders", 200, 300)
        support.wait_for(lambda: set(leaders(engine, replicas).values()) == {survivor.name},
                         timeout=LEASE_SECONDS + 20, message="the survivor to take every source over")
        support.wait_for(lambda: counts(engine) == {"orders": 500, "billing": 300, "shipping": 2300}, timeout=90,
                         message="every entry after the takeover")
        assert_each_once(engine, {"orders": 500, "billing": 300, "shipping": 2300})
    finally:
        for replica in replicas:
            replica.stop()
        engine.dispose()
        postgres_server.drop_database(url)
