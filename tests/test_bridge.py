"""The NATS bridge: one thread owns the client, its first connection is bounded, it reconnects."""

import asyncio
import concurrent.futures
import logging
import threading

import pytest

from dlq_dashboard.nats.bridge import Bridge, NatsUnavailable, on_loop
from dlq_dashboard.nats.server import NatsServer, free_port

from . import support


def test_a_dead_server_does_not_block_and_the_bridge_connects_once_it_appears(tmp_path):
    port = free_port()
    bridge = Bridge(support.make_settings(tmp_path, f"nats://127.0.0.1:{port}"), [f"nats://127.0.0.1:{port}"]).start()
    server = None
    try:
        assert not bridge.wait_connected(1.0)
        support.wait_for(lambda: bridge.state.last_error, message="the connection error to be reported")
        assert "cannot connect" in bridge.state.last_error
        with pytest.raises(NatsUnavailable):
            bridge.call(lambda: bridge.nc.flush())
        server = NatsServer(store_dir=tmp_path / "nats", port=port).start()
        assert bridge.wait_connected(30), "the bridge did not connect when the server appeared"
        assert bridge.call(lambda: bridge.js.account_info()).streams == 0
    finally:
        bridge.stop()
        if server:
            server.stop()


def test_calls_from_many_threads_run_on_the_one_bridge_thread(tmp_path, nats_server):
    bridge = Bridge(support.make_settings(tmp_path, nats_server.url), [nats_server.url]).start()
    try:
        assert bridge.wait_connected(10)
        seen = set()

        async def where():
            seen.add(threading.current_thread().name)
            return True

        threads = [threading.Thread(target=lambda: bridge.call(where)) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert seen == {"nats-bridge"}
    finally:
        bridge.stop()


@pytest.mark.slow
def test_a_restarted_server_is_reconnected_to_and_the_outage_is_visible(tmp_path, nats_server):
    bridge = Bridge(support.make_settings(tmp_path, nats_server.url), [nats_server.url]).start()
    try:
        assert bridge.wait_connected(10)
        nats_server.kill()
        support.wait_for(lambda: not bridge.state.connected, message="the disconnect")
        with pytest.raises(NatsUnavailable):
            bridge.call(lambda: bridge.nc.flush())
        nats_server.start()
        support.wait_for(lambda: bridge.state.connected, timeout=30, message="the reconnect")
        bridge.call(lambda: bridge.nc.flush())
    finally:
        bridge.stop()


def test_a_call_that_takes_too_long_raises_instead_of_hanging(tmp_path, nats_server):
    import asyncio

    bridge = Bridge(support.make_settings(tmp_path, nats_server.url), [nats_server.url]).start()
    try:
        assert bridge.wait_connected(10)
        finished = threading.Event()

        async def slow():
            await asyncio.sleep(5)
            finished.set()

        with pytest.raises(NatsUnavailable, match="did not answer"):
            bridge.call(slow, timeout=0.2)
        assert not finished.is_set(), "the call waited for its work to end before it raised"
    finally:
        bridge.stop()


class _ClosedUnseen(asyncio.SelectorEventLoop):
    """A loop that closes between asyncio's look at it and the hand-over of an outcome: the race
    a stop meets when a writer answers just then."""

    hiding = False  # while set, the loop looks open though it is closed

    def is_closed(self) -> bool:
        return not self.hiding and super().is_closed()


def test_an_outcome_arriving_as_the_loop_closes_is_dropped_without_a_traceback(caplog):
    loop = _ClosedUnseen()
    answered: concurrent.futures.Future = concurrent.futures.Future()
    on_loop(answered, loop)
    loop.close()
    loop.hiding = True
    with caplog.at_level(logging.DEBUG):
        answer = threading.Thread(target=answered.set_result, args=("committed",))
        answer.start()
        answer.join()
    loop.hiding = False
    assert answered.result() == "committed"
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text


def test_on_loop_gives_the_outcome_and_passes_a_cancel_back():
    loop = asyncio.new_event_loop()
    try:
        async def wait_for(answer: concurrent.futures.Future):
            return await on_loop(answer, asyncio.get_running_loop())

        answered: concurrent.futures.Future = concurrent.futures.Future()
        threading.Timer(0.05, answered.set_result, args=(7,)).start()
        assert loop.run_until_complete(wait_for(answered)) == 7

        failed: concurrent.futures.Future = concurrent.futures.Future()
        threading.Timer(0.05, failed.set_exception, args=(ValueError("refused"),)).start()
        with pytest.raises(ValueError, match="refused"):
            loop.run_until_complete(wait_for(failed))

        abandoned: concurrent.futures.Future = concurrent.futures.Future()

        async def give_up():
            waiting = asyncio.ensure_future(wait_for(abandoned))
            await asyncio.sleep(0.01)
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)

        loop.run_until_complete(give_up())
        assert abandoned.cancelled()
    finally:
        loop.close()


def test_a_call_in_flight_or_made_while_the_bridge_stops_is_told_as_unavailable(tmp_path, nats_server):
    # waitress closes its socket before the runtime stops, but a request it is serving still runs:
    # its NATS call must end in NatsUnavailable (a clear answer), not a cancel or a closed loop.
    bridge = Bridge(support.make_settings(tmp_path, nats_server.url), [nats_server.url]).start()
    assert bridge.wait_connected(10)
    outcome: list[BaseException] = []
    started = threading.Event()

    async def wait_long():
        started.set()
        await asyncio.sleep(30)

    def waiting_call():
        try:
            bridge.call(wait_long, timeout=60)
        except BaseException as exc:  # noqa: BLE001 - the test looks at what was raised
            outcome.append(exc)

    caller = threading.Thread(target=waiting_call)
    caller.start()
    assert started.wait(10), "the call did not start on the bridge"
    bridge.stop()
    caller.join(10)
    assert not caller.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], NatsUnavailable), outcome
    assert "stopping" in str(outcome[0])
    with pytest.raises(NatsUnavailable, match="stopping"):
        bridge.call(lambda: bridge.nc.flush())


def test_a_first_connection_that_runs_out_of_time_says_why_not_an_empty_reason(tmp_path, caplog):
    # Each attempt is bounded by asyncio.wait_for, whose TimeoutError has no text: the reason
    # read "cannot connect to nats://...: " (an empty one) on /sources and the banner.
    port = free_port()
    bridge = Bridge(support.make_settings(tmp_path, f"nats://127.0.0.1:{port}", connect_timeout=0.5),
                    [f"nats://127.0.0.1:{port}"])
    with caplog.at_level(logging.WARNING, logger="dlq_dashboard.nats.bridge"):
        bridge.start()
        try:
            support.wait_for(lambda: sum("retrying in" in r.getMessage() for r in caplog.records) >= 2,
                             message="two failed attempts to be logged")
            errors = [bridge.state.last_error] + [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
        finally:
            bridge.stop()
    for error in errors:
        assert "Connect call failed" in error, error
