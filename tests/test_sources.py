"""Several sources on one desk (SPEC section 12), on real servers: two nats-servers, one of them
with two accounts, mirrored as three sources by one dashboard."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sqlalchemy import select

from dlq_dashboard.config import ConfigError, load_settings
from dlq_dashboard.db.models import Entry, FailureGroup
from dlq_dashboard.nats.bridge import Bridge
from dlq_dashboard.nats.server import NatsServer
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.sources import Source, sources_of

from . import support


@pytest.fixture
def shared_server(tmp_path):
    """A nats-server of two accounts (A and B)."""
    server = NatsServer(store_dir=tmp_path / "nats-ab", extra_config=support.TWO_ACCOUNTS).start()
    yield server
    server.stop()


@pytest.fixture
def three_sources(tmp_path, shared_server, nats_server):
    """A DLQ_CONFIG of three sources: accounts A and B of one server, and a second server."""
    return support.sources_file(tmp_path, [
        {"name": "orders", "nats_url": support.account_url(shared_server, "a"), "stream": "DLQ"},
        {"name": "billing", "nats_url": support.account_url(shared_server, "b"), "stream": "DLQ"},
        {"name": "shipping", "nats_url": nats_server.url, "stream": "DLQ_SHIPPING", "subjects": ["dlq.shipping.>"]},
    ])


def dead_letter(subject: str, seq: int) -> tuple[str, bytes, dict]:
    return f"dlq.{subject}", b'{"n": %d}' % seq, support.dlq_headers(subject, **{"Dlq-Error": f"failed {seq}"})


def test_without_dlq_config_there_is_one_default_source_made_of_the_environment():
    settings = load_settings({"NATS_URL": "nats://127.0.0.1:4222", "DLQ_STREAM": "DEAD"})
    assert sources_of(settings) == (Source(name="default", nats_urls=("nats://127.0.0.1:4222",), stream="DEAD"),)


def test_a_bad_sources_file_stops_the_start_naming_the_file_the_source_and_the_key(tmp_path):
    path = support.sources_file(tmp_path, [{"name": "orders", "nats_url": "http://x", "stream": "DLQ"}])
    with pytest.raises(ConfigError) as caught:
        load_settings({"DLQ_CONFIG": path})
    assert str(caught.value) == (f"DLQ_CONFIG={path!r} is not valid: source 'orders', key 'nats_url': "
                                 "'http://x' is not a nats:// URL")


def test_three_sources_are_mirrored_each_over_its_own_connection(three_sources, shared_server, nats_server,
                                                                 make_app, database_url):
    app = make_app(sources=load_settings({"DLQ_CONFIG": three_sources}).sources)
    support.start_sources(app)
    rt = runtime_of(app)
    assert list(rt.feeds) == ["orders", "billing", "shipping"]
    asyncio.run(support.publish_many(support.account_url(shared_server, "a"), [dead_letter("orders.created", 1)]))
    asyncio.run(support.publish_many(support.account_url(shared_server, "b"),
                                     [dead_letter("orders.created", 2), dead_letter("billing.charged", 3)]))
    asyncio.run(support.publish_many(nats_server.url, [dead_letter("shipping.sent", 4)]))

    def stored():
        with rt.engine.connect() as conn:
            return sorted(conn.execute(select(Entry.source, Entry.original_subject)).all())

    support.wait_for(lambda: len(stored()) == 4, message="the four dead letters")
    assert stored() == [("billing", "billing.charged"), ("billing", "orders.created"),
                        ("orders", "orders.created"), ("shipping", "shipping.sent")]
    with rt.engine.connect() as conn:
        groups = sorted(conn.execute(select(FailureGroup.source, FailureGroup.subject)).all())
    # The same failure in two sources is two groups.
    assert groups == [("billing", "billing.charged"), ("billing", "orders.created"),
                      ("orders", "orders.created"), ("shipping", "shipping.sent")]


def test_a_sources_connection_names_it_in_its_log_lines(tmp_path, caplog):
    settings = support.make_settings(tmp_path)
    with caplog.at_level(logging.WARNING, logger="dlq_dashboard.nats.bridge"):
        bridge = Bridge(settings, ["nats://127.0.0.1:1"], "billing").start()
        try:
            support.wait_for(lambda: any(r.name == "dlq_dashboard.nats.bridge" for r in caplog.records),
                             message="the bridge's first warning")
        finally:
            bridge.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "dlq_dashboard.nats.bridge"]
    assert lines and all(line.startswith("NATS of source billing: ") for line in lines)
