"""A big job's publishing process (actions/bulk/publisher.py) against a real nats-server."""

from __future__ import annotations

import pytest
from nats.js.errors import NoStreamResponseError

from dlq_dashboard.actions.bulk.publisher import Ack, Publisher
from dlq_dashboard.nats.bridge import NatsUnavailable

from . import support



def window(start: int, n: int) -> list[tuple[str, bytes, dict[str, str]]]:
    return [("orders.created", b'{"order_id": "o-%d"}' % i, {"Nats-Msg-Id": f"msg-{i}"})
            for i in range(start, start + n)]


def test_a_window_is_published_with_its_msg_ids_and_answered_with_each_puback(tmp_path, nats_server):
    support.make_orders_stream(nats_server.url)
    publisher = Publisher(support.make_settings(tmp_path, nats_server.url), timeout=5.0)
    try:
        support.wait_for(lambda: publisher.ready, timeout=30, message="the process to connect")
        first = publisher.publish(window(0, 300)).result(timeout=30)
        again = publisher.publish(window(250, 100)).result(timeout=30)  # 50 msgIds seen before
    finally:
        publisher.close()
    assert all(isinstance(a, Ack) and a.stream == "ORDERS" for a in first + again)
    assert [a.seq for a in first] == list(range(1, 301))
    assert [a.duplicate for a in again] == [True] * 50 + [False] * 50
    stored = support.stream_messages(nats_server.url)
    assert len(stored) == 350
    assert [m.headers["Nats-Msg-Id"] for m in stored] == [f"msg-{i}" for i in range(350)]
    assert publisher._proc.exitcode == 0


def test_a_subject_no_stream_stores_is_answered_with_the_error_not_a_hang(tmp_path, nats_server):
    publisher = Publisher(support.make_settings(tmp_path, nats_server.url), timeout=2.0)
    try:
        support.wait_for(lambda: publisher.ready, timeout=30, message="the process to connect")
        answers = publisher.publish(window(0, 3)).result(timeout=30)
    finally:
        publisher.close()
    # The error itself crosses the pipe, so the job reads it as through the bridge: nothing stored.
    assert len(answers) == 3 and all(isinstance(a, NoStreamResponseError) for a in answers)


def test_a_process_that_cannot_connect_is_never_ready_and_refuses_windows(tmp_path):
    publisher = Publisher(support.make_settings(tmp_path), timeout=1.0)
    try:
        support.wait_for(lambda: publisher._gone, timeout=30, message="the process to give up")
        assert not publisher.ready
        try:
            publisher.publish(window(0, 1))
        except NatsUnavailable as exc:
            assert "ended" in str(exc)
        else:
            raise AssertionError("a window was taken by a process that is gone")
    finally:
        publisher.close()
    assert publisher._proc.exitcode is not None


@pytest.mark.slow
def test_windows_in_flight_when_the_process_dies_fail_as_in_doubt(tmp_path, nats_server):
    support.make_orders_stream(nats_server.url)
    publisher = Publisher(support.make_settings(tmp_path, nats_server.url), timeout=5.0)
    try:
        support.wait_for(lambda: publisher.ready, timeout=30, message="the process to connect")
        with support.stopped(nats_server.proc.pid):  # no answers: the window stays out
            future = publisher.publish(window(0, 10))
            publisher._proc.kill()
            error = future.exception(timeout=30)
    finally:
        publisher.close()
    assert isinstance(error, NatsUnavailable)
    assert not publisher.ready


def test_the_process_ends_when_the_dashboard_process_is_killed(tmp_path, nats_server):
    code = ("import time; from dlq_dashboard.actions.bulk.publisher import Publisher; "
            "from dlq_dashboard.config import Settings; "
            f"p = Publisher(Settings(nats_urls=({nats_server.url!r},)), 5.0); "
            "print(p._proc.pid, flush=True); time.sleep(600)")
    support.assert_child_ends_with_its_parent(code, "publisher")
