"""A backlog the mirror finds as it starts following a stream (a start after downtime, the end of
an outage, a replica taking the lease over from one that died) has waited since its oldest
message was stored, not since the mirror first looked: "behind since" (the banner, /healthz,
dlq_mirror_behind_seconds) is the stream's own time of that message."""

from __future__ import annotations

import pytest

from dlq_dashboard.nats.streams import StreamSetup, read_message
from dlq_dashboard.runtime import runtime_of

from . import support
from .test_mirror_hardening import FULL_DISK, WriterFault, publish_dead_letters, stuck_health

pytestmark = [pytest.mark.timeout(120)]


async def _stored_at(url: str, stream: str, seq: int):
    import nats

    nc = await nats.connect(url)
    try:
        return (await read_message(nc, nc.jetstream(), stream, seq, 5.0)).stored_at
    finally:
        await nc.close()


async def _make_streams(url: str, settings) -> None:
    import nats

    nc = await nats.connect(url)
    try:
        await StreamSetup(settings).ensure(nc.jetstream())
    finally:
        await nc.close()


def test_a_backlog_found_at_start_is_behind_since_its_oldest_message_was_stored(settings, make_app, nats_server,
                                                                                monkeypatch):
    support.run(_make_streams(nats_server.url, settings))
    publish_dead_letters(nats_server.url, 3)  # while no dashboard runs
    oldest = support.run(_stored_at(nats_server.url, "DLQ", 1))
    assert oldest is not None
    fault = WriterFault(monkeypatch)
    fault.on.set()  # nothing is stored: the backlog stays, and so does its wait
    app = make_app(settings=settings, online=True)
    support.wait_for(lambda: stuck_health(app, FULL_DISK), timeout=20, message="the mirror to hold the backlog")
    progress = runtime_of(app).mirror.progress["DLQ"]
    assert progress.lag == 3
    assert progress.behind_since() == oldest  # was the moment the mirror first looked, later
    fault.on.clear()
    support.wait_for(lambda: progress.behind_since() is None, timeout=20, message="the backlog mirrored")
