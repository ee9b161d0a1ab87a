"""A source whose NATS answers but whose stream the mirror cannot follow (docs/sources.md), beside a
source that works, on real servers: every place the desk tells a source's state (/api/sources,
/sources, the banner, /metrics, /healthz) says it is stuck and why, and its lag is unknown (null,
absent), never 0 as if it were caught up."""

from __future__ import annotations

import html
import logging
import re

import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import ServiceUnavailableError
from prometheus_client.parser import text_string_to_metric_families

from dlq_dashboard.config import load_settings
from dlq_dashboard.ingest.progress import failure_text, nats_failure
from dlq_dashboard.nats.server import NatsServer
from dlq_dashboard.nats.streams import NO_JETSTREAM
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.timeout(120)

#: Account A with JetStream, account C without (no ``jetstream: enabled``).
WITHOUT_JETSTREAM = """accounts {
  A: { jetstream: enabled, users: [{user: a, password: pa}] }
  C: { users: [{user: c, password: pc}] }
}"""


def samples(client, name: str) -> dict[tuple, float]:
    text = client.get("/metrics").get_data(as_text=True)
    return {tuple(sorted(s.labels.items())): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name}


def desk(make_app, tmp_path, broken_url: str, **broken):
    """An app of two sources: orders, which works, and broken."""
    return make_app(sources=load_settings({"DLQ_CONFIG": support.sources_file(tmp_path, [
        {"name": "orders", "nats_url": broken.pop("orders_url"), "stream": "DLQ"},
        {"name": "broken", "nats_url": broken_url, "stream": "DLQ_BROKEN", "subjects": ["dlq.broken.>"], **broken},
    ])}).sources)


def told_stuck(app, error_part: str) -> dict:
    """What every place tells of source broken once it is stuck with ``error_part`` in its error;
    orders stays ok and caught up. Returns broken's /api/sources entry."""
    viewer, admin = support.logged_in(app, "viewer"), support.logged_in(app, "admin")

    def sources():
        return {s["name"]: s for s in viewer.get("/api/sources").get_json()["sources"]}

    support.wait_for(lambda: sources()["broken"]["status"] == "stuck", timeout=30, message="broken stuck")
    support.wait_for(lambda: sources()["orders"]["status"] == "ok" and sources()["orders"]["mirror_lag"] == 0,
                     timeout=20, message="orders ok")
    broken = sources()["broken"]
    # Neither stream could be read (the advisories' cannot be made either: the DLQ stream is made first).
    assert [s["name"] for s in broken["streams"]] == ["DLQ_BROKEN", "DLQ_ADVISORIES"]
    for stream in broken["streams"]:
        assert error_part in (stream["error"] or ""), stream
        # The stream's head is unknown: not 0 of 0, caught up.
        assert (stream["stream_last_seq"], stream["lag"]) == (None, None), stream
    assert broken["mirror_lag"] is None and broken["nats"]["connected"] is True

    banner = html.unescape(re.sub(r"\s+", " ", viewer.get("/status/banner").get_data(as_text=True)))
    assert 'data-source="broken"' in banner
    assert "Source broken: The mirror is stuck on streams DLQ_BROKEN and DLQ_ADVISORIES" in banner
    assert error_part in banner and 'data-source="orders"' not in banner

    page = html.unescape(re.sub(r"\s+", " ", viewer.get("/sources").get_data(as_text=True)))
    row = page[page.index('data-source="broken"'):]
    row = row[:row.index("</tr>")]
    assert "stuck" in row and error_part in row and "caught up" not in row, row

    stuck = samples(app.test_client(), "dlq_mirror_stuck")
    assert stuck[(("source", "broken"), ("stream", "DLQ_BROKEN"))] == 1
    assert stuck[(("source", "orders"), ("stream", "DLQ"))] == 0
    lags = samples(app.test_client(), "dlq_mirror_lag_messages")
    assert (("source", "broken"), ("stream", "DLQ_BROKEN")) not in lags, lags  # unknown: absent, not 0
    assert lags[(("source", "orders"), ("stream", "DLQ"))] == 0

    health = admin.get("/healthz")
    body = health.get_json()["sources"]["broken"]
    assert health.status_code == 503 and body["status"] == "degraded" and body["mirror_lag"] is None
    assert error_part in (body["mirror"]["streams"]["DLQ_BROKEN"]["error"] or "")
    assert health.get_json()["sources"]["orders"]["status"] == "ok"
    return broken


@pytest.fixture
def account_without_jetstream(tmp_path):
    server = NatsServer(store_dir=tmp_path / "nats-ac", extra_config=WITHOUT_JETSTREAM).start()
    yield server
    server.stop()


@pytest.fixture
def server_without_jetstream(tmp_path):
    server = NatsServer(store_dir=tmp_path / "nats-nojs", jetstream=False).start()
    yield server
    server.stop()


@pytest.mark.parametrize("where", ["account", "server"])
def test_a_source_whose_nats_has_no_jetstream_is_stuck_saying_so_everywhere(make_app, tmp_path, where, request):
    server = request.getfixturevalue("account_without_jetstream")
    broken_url = support.account_url(server, "c")
    if where == "server":  # a server started without -js: JetStream's API has no responders
        broken_url = request.getfixturevalue("server_without_jetstream").url
    app = desk(make_app, tmp_path, broken_url, orders_url=support.account_url(server, "a"))
    runtime_of(app).start()  # support.start_sources would wait for broken's streams
    told_stuck(app, NO_JETSTREAM)
    # NATS answers: its line says so, with the same sentence as the stream's, not nats-py's repr.
    nats = support.logged_in(app, "admin").get("/healthz").get_json()["sources"]["broken"]["nats"]
    assert nats["last_error"] == NO_JETSTREAM, nats


def test_a_source_whose_stream_jetstream_will_not_make_tells_its_lag_unknown_not_zero(make_app, tmp_path,
                                                                                        shared_server):
    # Account B holds a stream over the source's subjects: its DLQ stream cannot be made.
    support.make_stream(support.account_url(shared_server, "b"), "TAKEN", ["dlq.broken.>"])
    app = desk(make_app, tmp_path, support.account_url(shared_server, "b"),
               orders_url=support.account_url(shared_server, "a"))
    runtime_of(app).start()
    told_stuck(app, "subjects overlap with an existing stream")


def test_jetstream_unavailable_for_now_waits_for_nats_and_jetstream_not_enabled_is_stuck():
    # A cluster electing a leader answers 503 for now: waiting for NATS mends it.
    assert nats_failure(ServiceUnavailableError(code=503, err_code=10008,
                                                description="JetStream system temporarily unavailable"))
    assert nats_failure(NatsTimeoutError())
    # No JetStream for the account, or none on the server (no responders: nats-py's bare 503).
    for missing in (ServiceUnavailableError(code=503, err_code=10039, description="JetStream not enabled for account"),
                    ServiceUnavailableError(code=503, err_code=10076, description="JetStream not enabled"),
                    ServiceUnavailableError()):
        assert not nats_failure(missing) and failure_text(missing) == NO_JETSTREAM


def test_the_log_says_once_that_jetstream_is_not_enabled_not_that_setting_up_failed_for_now(make_app, tmp_path,
                                                                                             server_without_jetstream,
                                                                                             caplog):
    # A server without JetStream is a lasting state: the bridge's line said "failed for now".
    app = make_app(settings=support.make_settings(tmp_path, server_without_jetstream.url))
    runtime = runtime_of(app)

    def lines():
        return [r.getMessage() for r in caplog.records
                if r.name == "dlq_dashboard.nats.bridge" and "setting up the streams" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="dlq_dashboard.nats.bridge"):
        runtime.start()
        support.wait_for(lambda: lines(), timeout=30, message="the line on setting up the streams")
        # Each connection sets the streams up again: while JetStream is missing, nothing new to say.
        runtime.bridge.call(runtime.bridge._run_on_connect, timeout=10)
    assert lines() == [f"NATS: after connecting, setting up the streams failed: {NO_JETSTREAM}"], lines()
