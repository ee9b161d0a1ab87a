"""The dashboard on a three-node JetStream cluster (DLQ_REPLICAS=3): replicated streams, and a
mirror that loses nothing and stores nothing twice when a node crashes under it."""

from __future__ import annotations

import json
import logging
import time
from typing import Awaitable, Callable, TypeVar

import nats
import nats.js.errors
import pytest
from sqlalchemy import select

from dlq_dashboard.db.models import Entry
from dlq_dashboard.nats.server import NatsCluster
from dlq_dashboard.nats.streams import StreamSetup
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

BACKLOG = 20_000
# The tests' own JetStream API calls to the cluster: an R3 stream's create or delete can take longer
# than nats-py's 5 s on a busy machine (seen once in CI: the create timed out).
JS_TIMEOUT = 20
# A stream's followers wait several seconds before they elect a new leader.
FAILOVER = 45
# How long the tests' own JetStream API calls to the cluster are asked again when unanswered: on a
# busy machine an R3 stream's create and a delete have each gone unanswered for 20 s in CI (once
# with a node restarted by an earlier test still settling). Asking again is safe: creating a
# stream that exists with the same config succeeds, and a delete whose answer was lost meets NotFound.
ANSWER_DEADLINE = 60
T = TypeVar("T")


async def answered(ask: Callable[[], Awaitable[T]]) -> T:
    """``await ask()``, asked again while the cluster leaves it unanswered, up to ANSWER_DEADLINE."""
    deadline = time.monotonic() + ANSWER_DEADLINE
    while True:
        try:
            return await ask()
        except nats.errors.TimeoutError:
            if time.monotonic() > deadline:
                raise


def elected(cluster, streams) -> None:
    """Wait until each of ``streams`` has a leader (a stream just created has none for a moment:
    its info says leader None, and a publish to it goes unanswered)."""
    for stream in streams:
        support.wait_for(lambda name=stream: cluster.stream_leader(name), timeout=FAILOVER,
                         message=f"{stream}'s replicas to elect a leader")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three nats-servers on 127.0.0.1 forming one JetStream cluster, for the whole module."""
    nodes = NatsCluster(tmp_path_factory.mktemp("cluster")).start()
    yield nodes
    nodes.stop()


@pytest.fixture
def cluster_settings(cluster, tmp_path):
    """DLQ_REPLICAS=3 and NATS_URL naming all three nodes; the streams are deleted afterwards,
    with every node running again, so each test starts from empty streams."""
    settings = support.make_settings(tmp_path, cluster.urls[0], stream_replicas=3).with_overrides(
        nats_urls=tuple(cluster.urls))
    yield settings
    for server in cluster.servers:
        if not server.running:
            server.start()
    cluster.wait_healthy()

    async def delete_streams():
        nc = await nats.connect(cluster.urls)
        try:
            js = nc.jetstream(timeout=JS_TIMEOUT)
            for stream in (settings.dlq_stream, settings.advisory_stream):
                async def delete(name=stream):
                    try:
                        await js.delete_stream(name)
                    except nats.js.errors.NotFoundError:
                        pass  # never made (a test may end before), or deleted by a request whose answer was lost

                await answered(delete)
        finally:
            await nc.close()

    support.run(delete_streams(), timeout=2 * (ANSWER_DEADLINE + JS_TIMEOUT) + 10)


@pytest.fixture
def start_dashboard(cluster_settings, make_app):
    """Starts the app as the ``app`` fixture does, on the cluster; stopped afterwards."""
    return lambda: make_app(settings=cluster_settings, online=True)


def payload(n: int) -> bytes:
    return json.dumps({"order_id": f"o-{n}", "n": n}).encode()


def publish(url: str, subject: str, count: int, first: int = 0) -> None:
    """Publish dead letters ``first`` .. ``first + count - 1`` with publish_async."""
    headers = support.dlq_headers("orders.created", Dlq_Reason="fatal")
    support.run(support.publish_fast(url, subject, count, lambda i: (payload(first + i), dict(headers))),
                timeout=60)


def create_streams(cluster, settings) -> None:
    """Create the streams as the dashboard does, so a backlog can wait before it starts."""
    async def ensure():
        nc = await nats.connect(list(settings.nats_urls))
        try:
            js = nc.jetstream(timeout=JS_TIMEOUT)
            await answered(lambda: StreamSetup(settings).ensure(js))
        finally:
            await nc.close()

    support.run(ensure(), timeout=ANSWER_DEADLINE + JS_TIMEOUT + 10)
    elected(cluster, (settings.dlq_stream, settings.advisory_stream))


def stored(app) -> list[tuple[int, bytes]]:
    """(dlq_seq, payload) of every entry, by sequence."""
    with runtime_of(app).engine.connect() as conn:
        return [tuple(row) for row in conn.execute(select(Entry.dlq_seq, Entry.payload).order_by(Entry.dlq_seq))]


def assert_every_message_once(app, count: int) -> None:
    rows = stored(app)
    assert len(rows) == count
    assert [seq for seq, _ in rows] == list(range(1, count + 1))
    # One publisher on one connection: the stream keeps its order, so message n has sequence n + 1.
    mismatched = [seq for seq, data in rows if data != payload(seq - 1)]
    assert mismatched == [], f"{len(mismatched)} payloads differ, first at sequence {mismatched[0]}"


def healthz(client) -> tuple[int, str]:
    response = client.get("/healthz")
    return response.status_code, response.get_json()["status"]


def bridge_server(cluster, app):
    url = runtime_of(app).bridge.state.url
    return next(server for server in cluster.servers if server.url == url)


def test_with_three_replicas_the_dashboard_creates_replicated_streams(cluster, cluster_settings, start_dashboard):
    app = start_dashboard()
    rt = runtime_of(app)
    elected(cluster, (cluster_settings.dlq_stream, cluster_settings.advisory_stream))
    for stream in (cluster_settings.dlq_stream, cluster_settings.advisory_stream):
        info = rt.bridge.call(lambda name=stream: rt.bridge.js.stream_info(name))
        assert info.config.num_replicas == 3
        assert info.cluster.leader in {server.server_name for server in cluster.servers}
        followers = {peer.name for peer in info.cluster.replicas}
        assert len(followers) == 2 and info.cluster.leader not in followers
    assert healthz(app.test_client()) == (200, "ok")


def test_an_existing_stream_keeps_its_replicas_and_the_log_says_how_to_change_them(
        cluster_settings, start_dashboard, caplog):
    async def create_with_one_replica():
        nc = await nats.connect(list(cluster_settings.nats_urls))
        try:
            js = nc.jetstream(timeout=JS_TIMEOUT)
            await answered(lambda: js.add_stream(name=cluster_settings.dlq_stream,
                                                 subjects=list(cluster_settings.dlq_subjects), num_replicas=1))
        finally:
            await nc.close()

    support.run(create_with_one_replica(), timeout=ANSWER_DEADLINE + JS_TIMEOUT + 10)
    caplog.set_level(logging.WARNING, logger="dlq_dashboard.nats.streams")
    app = start_dashboard()
    rt = runtime_of(app)
    assert rt.bridge.call(lambda: rt.bridge.js.stream_info(cluster_settings.dlq_stream)).config.num_replicas == 1
    warnings = [r.getMessage() for r in caplog.records if r.name == "dlq_dashboard.nats.streams"]
    assert warnings == [("the DLQ stream DLQ has 1 replica(s), DLQ_REPLICAS is 3: it is left as it is "
                         "(nats stream edit DLQ --replicas 3 changes it)")]


def test_the_stream_leader_crashing_mid_backlog_loses_nothing_and_doubles_nothing(
        cluster, cluster_settings, start_dashboard):
    create_streams(cluster, cluster_settings)
    publish(cluster.urls[0], "dlq.orders.created", BACKLOG)
    app = start_dashboard()
    engine, client = runtime_of(app).engine, app.test_client()
    leader = cluster.stream_leader(cluster_settings.dlq_stream)
    assert leader is not None  # create_streams waited for it

    support.wait_for(lambda: support.entry_count(engine) > 0, timeout=30, message="the mirror to begin")
    leader.kill()
    at_kill = support.entry_count(engine)
    assert at_kill < BACKLOG, "the backlog was mirrored before the leader could be killed"

    # Without a leader the stream cannot answer, and /healthz says so.
    assert healthz(client) == (503, "degraded")
    new_leader = support.wait_for(lambda: cluster.stream_leader(cluster_settings.dlq_stream), timeout=FAILOVER,
                                  message="the two remaining nodes to elect a leader")
    assert new_leader is not leader
    leader.start()

    support.wait_for(lambda: support.entry_count(engine) >= BACKLOG, timeout=FAILOVER,
                     message="the mirror to resume and finish the backlog")
    cluster.wait_healthy()
    assert_every_message_once(app, BACKLOG)
    support.wait_for(lambda: healthz(client) == (200, "ok"), timeout=10, message="/healthz to be ok")


def move_leaders_off(cluster, settings, server) -> None:
    """Hand the leadership of the dashboard's streams from ``server`` to another node."""
    other = next(node for node in cluster.servers if node is not server)

    async def step_down(stream):
        nc = await nats.connect(cluster.urls)
        try:
            request = json.dumps({"placement": {"preferred": other.server_name}}).encode()
            await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", request, timeout=5)
        finally:
            await nc.close()

    for stream in (settings.dlq_stream, settings.advisory_stream):
        if cluster.stream_leader(stream) is server:
            support.run(step_down(stream), timeout=10)
        support.wait_for(lambda name=stream: cluster.stream_leader(name) not in (None, server), timeout=10,
                         message=f"{stream} to have a leader other than {server.server_name}")


def test_the_bridge_fails_over_when_its_server_crashes_and_the_mirror_carries_on(
        cluster, cluster_settings, start_dashboard):
    app = start_dashboard()
    rt, client = runtime_of(app), app.test_client()
    victim = bridge_server(cluster, app)
    # The server leads no stream, so this is the loss of a connection alone (the test above
    # covers a leader's crash and the election that follows).
    move_leaders_off(cluster, cluster_settings, victim)
    publish(victim.url, "dlq.orders.created", 1000)
    support.wait_for(lambda: support.entry_count(rt.engine) >= 1000, timeout=30, message="the first dead letters")

    victim.kill()
    # nats-py moves to another node of NATS_URL at once, and the first answer of /healthz after
    # that is already ok: the outage lasts milliseconds, too short to read 503 from outside.
    support.wait_for(lambda: rt.bridge.state.connected and rt.bridge.state.url != victim.url, timeout=5,
                     message="the bridge to reconnect to another node")
    assert healthz(client) == (200, "ok")

    survivor = next(server for server in cluster.servers if server.running)
    publish(survivor.url, "dlq.orders.created", 1000, first=1000)
    support.wait_for(lambda: support.entry_count(rt.engine) >= 2000, timeout=FAILOVER,
                     message="the mirror to carry on with a node down")
    assert not victim.running and healthz(client) == (200, "ok")

    victim.start()
    cluster.wait_healthy()
    publish(victim.url, "dlq.orders.created", 1000, first=2000)
    support.wait_for(lambda: support.entry_count(rt.engine) >= 3000, timeout=30,
                     message="the mirror to take what arrives through the restarted node")
    assert_every_message_once(app, 3000)
    assert healthz(client) == (200, "ok")


def test_the_bridge_gives_a_frozen_server_up_for_another_and_the_mirror_carries_on(
        cluster, cluster_settings, start_dashboard):
    """A node that stops answering without closing its connections (SIGSTOP, a host gone without
    a word) kept the mirror, jobs and republishes on it for 4-5 minutes (nats-py's default stale
    check, 120 s pings) while the other nodes answered."""
    app = start_dashboard()
    rt = runtime_of(app)
    victim = bridge_server(cluster, app)
    move_leaders_off(cluster, cluster_settings, victim)
    survivor = next(server for server in cluster.servers if server is not victim)
    publish(survivor.url, "dlq.orders.created", 500)
    support.wait_for(lambda: support.entry_count(rt.engine) >= 500, timeout=30, message="the first dead letters")
    with support.frozen(victim):
        support.wait_for(lambda: rt.bridge.state.connected and rt.bridge.state.url != victim.url, timeout=FAILOVER,
                         message="the bridge to give the frozen node up for another")
        publish(survivor.url, "dlq.orders.created", 500, first=500)
        support.wait_for(lambda: support.entry_count(rt.engine) >= 1000, timeout=FAILOVER,
                         message="the mirror to carry on while a node is frozen")
    assert_every_message_once(app, 1000)
