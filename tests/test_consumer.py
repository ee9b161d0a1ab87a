"""The consumer lifecycle against a real nats-server: dead-lettering, retries, acks, the runner."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from datetime import datetime
from email.header import decode_header

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.js.api import ConsumerConfig

from dlq_consumer import (
    Backoff,
    ConsumerRunner,
    Lifecycle,
    Outcome,
    TransientError,
    dead_letter,
    default_is_transient,
    ensure_stream,
    json_pointer,
    make_validator,
    parse_and_validate,
    publish_with_retry,
)

from . import support

pytestmark = pytest.mark.timeout(60)

ORDER_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["order_id", "customer_id", "items"],
    "properties": {
        "order_id": {"type": "string"},
        "customer_id": {"type": "string"},
        "items": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["sku", "qty"],
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
            },
        },
    },
}
GOOD_ORDER = {"order_id": "o-1", "customer_id": "c-1", "items": [{"sku": "tea", "qty": 2}]}
FAST = Backoff(initial=0.05, factor=2.0, maximum=1.0, jitter=0.1)
DEADLINE = 45  # seconds for one test's coroutine, start to finish


# --- helpers -----------------------------------------------------------------------------------


async def connect(server):
    return await nats.connect(
        server.url, connect_timeout=2, max_reconnect_attempts=3, reconnect_time_wait=0.2
    )


async def eventually(predicate, timeout: float = 10.0, message: str = "condition"):
    """Poll ``predicate`` (sync or async) until it is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        await asyncio.sleep(0.02)


async def setup_streams(js, retention: str = "limits"):
    await ensure_stream(js, "ORDERS", ["orders.>"], retention=retention)
    await ensure_stream(js, "DLQ", ["dlq.>"])


async def stream_messages(js, stream: str):
    """Every message stored in ``stream``, in order."""
    state = (await js.stream_info(stream)).state
    if state.messages == 0:
        return []
    return [await js.get_msg(stream, seq) for seq in range(state.first_seq, state.last_seq + 1)]


async def settled(js, stream: str, durable: str):
    """True when the consumer has nothing pending and nothing awaiting an ack or a redelivery."""
    info = await js.consumer_info(stream, durable)
    return info.num_pending == 0 and info.num_ack_pending == 0


async def fetch_one(js, durable: str, timeout: float = 5.0):
    sub = await js.pull_subscribe_bind(durable=durable, stream="ORDERS")
    try:
        [msg] = await sub.fetch(1, timeout=timeout)
        return msg
    finally:
        await sub.unsubscribe()


class Runner:
    """A ConsumerRunner in a background task, stopped gracefully on exit."""

    def __init__(self, nc, config: ConsumerConfig, lifecycle: Lifecycle, concurrency: int = 8):
        # A short fetch timeout: a graceful stop waits for the pull request in flight to expire.
        self.runner = ConsumerRunner(nc, "ORDERS", config, lifecycle, concurrency=concurrency,
                                     fetch_timeout=0.25)
        self.task: asyncio.Task | None = None

    async def __aenter__(self):
        self.task = asyncio.create_task(self.runner.run())
        await asyncio.wait_for(self.runner.ready.wait(), 5)
        return self.runner

    async def __aexit__(self, *exc):
        self.runner.stop()
        await asyncio.wait_for(self.task, 10)


def consumer(durable: str = "billing", **config) -> ConsumerConfig:
    config.setdefault("ack_wait", 2.0)
    config.setdefault("max_deliver", 5)
    return ConsumerConfig(durable_name=durable, filter_subject="orders.>", **config)


# --- the lifecycle, end to end -----------------------------------------------------------------


def test_a_schema_invalid_message_is_dead_lettered_once_with_its_errors_and_not_redelivered(nats_server):
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js)
        calls = []

        async def handler(value, msg):
            calls.append(value)

        lifecycle = Lifecycle(nc, handler, schema=ORDER_SCHEMA, backoff=FAST)
        bad = {"order_id": "o-2", "items": [{"sku": "tea", "qty": "two"}]}
        ack = await js.publish("orders.created", json.dumps(bad).encode())
        async with Runner(nc, consumer(), lifecycle):
            await eventually(lambda: settled(js, "ORDERS", "billing"), message="message settled")

        [dead] = await stream_messages(js, "DLQ")
        info = await js.consumer_info("ORDERS", "billing")
        await nc.close()

        assert calls == []
        assert info.num_redelivered == 0
        assert dead.subject == "dlq.orders.created"
        assert dead.headers["Dlq-Reason"] == "schema_invalid"
        assert dead.headers["Dlq-Original-Seq"] == str(ack.seq)
        assert dead.headers["Dlq-Deliveries"] == "1"
        errors = json.loads(dead.headers["Dlq-Schema-Errors"])
        assert {e["path"] for e in errors} == {"", "/items/0/qty"}
        assert any("customer_id" in e["message"] for e in errors if e["path"] == "")
        assert "customer_id" in dead.headers["Dlq-Error"]

    support.run(main(), timeout=DEADLINE)


def test_a_transient_failure_is_retried_with_growing_delays_then_succeeds_without_a_dead_letter(nats_server):
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js)
        deliveries: list[float] = []

        async def handler(value, msg):
            deliveries.append(time.monotonic())
            if len(deliveries) <= 3:
                raise asyncio.TimeoutError("inventory service timed out")

        backoff = Backoff(initial=0.2, factor=2.0, maximum=5.0, jitter=0.1)
        lifecycle = Lifecycle(nc, handler, schema=ORDER_SCHEMA, backoff=backoff)
        await js.publish("orders.created", json.dumps(GOOD_ORDER).encode())
        # ack_wait well above the backoff: any redelivery seen here comes from the nak delay.
        async with Runner(nc, consumer(ack_wait=5.0, max_deliver=10), lifecycle):
            await eventually(lambda: len(deliveries) == 4, message="the fourth delivery")
            await eventually(lambda: settled(js, "ORDERS", "billing"), message="the ack")

        dlq = await stream_messages(js, "DLQ")
        await nc.close()

        gaps = [b - a for a, b in zip(deliveries, deliveries[1:])]
        assert gaps[0] >= 0.2 * 0.9 - 0.02, gaps
        assert gaps[0] < gaps[1] < gaps[2] < 5.0, gaps
        assert dlq == []

    support.run(main(), timeout=DEADLINE)


def test_exhausting_max_deliver_dead_letters_once_with_the_delivery_count(nats_server):
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js)
        calls = []

        async def handler(value, msg):
            calls.append(msg.metadata.num_delivered)
            raise ConnectionError("payments database unreachable")

        lifecycle = Lifecycle(nc, handler, schema=ORDER_SCHEMA, backoff=FAST)
        await js.publish("orders.created", json.dumps(GOOD_ORDER).encode())
        async with Runner(nc, consumer(max_deliver=3), lifecycle):
            await eventually(lambda: settled(js, "ORDERS", "billing"), message="message settled")

        [dead] = await stream_messages(js, "DLQ")
        await nc.close()

        assert calls == [1, 2, 3]
        assert dead.headers["Dlq-Reason"] == "max_deliveries"
        assert dead.headers["Dlq-Deliveries"] == "3"
        assert dead.headers["Dlq-Error"] == "ConnectionError: payments database unreachable"
        assert "Dlq-Schema-Errors" not in dead.headers

    support.run(main(), timeout=DEADLINE)


def test_a_fatal_error_is_dead_lettered_at_once(nats_server):
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js)

        async def handler(value, msg):
            raise LookupError("unknown sku 'tea'\n  while pricing")

        lifecycle = Lifecycle(nc, handler, schema=ORDER_SCHEMA, backoff=FAST)
        await js.add_consumer("ORDERS", consumer())
        await js.publish("orders.created", json.dumps(GOOD_ORDER).encode())
        msg = await fetch_one(js, "billing")
        outcome = await lifecycle.handle(msg)
        [dead] = await stream_messages(js, "DLQ")
        done = await settled(js, "ORDERS", "billing")
        await nc.close()

        assert outcome is Outcome.DEAD_LETTERED
        assert done
        assert dead.headers["Dlq-Reason"] == "fatal"
        assert dead.headers["Dlq-Error"] == "LookupError: unknown sku 'tea' while pricing"

    support.run(main(), timeout=DEADLINE)


def test_an_error_holding_a_lone_surrogate_is_dead_lettered_with_its_text_on_the_first_delivery(nats_server):
    """Text decoded with surrogateescape holds halves of UTF-16 pairs, which UTF-8 cannot encode:
    the header would not go out, and the message was left for redelivery on every delivery."""
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js)

        async def handler(value, msg):
            raise ValueError("fehler \u202e\x1b[31m red \ud800")

        lifecycle = Lifecycle(nc, handler, schema=ORDER_SCHEMA, backoff=FAST)
        await js.add_consumer("ORDERS", consumer())
        await js.publish("orders.created", json.dumps(GOOD_ORDER).encode())
        msg = await fetch_one(js, "billing")
        outcome = await lifecycle.handle(msg)
        dead = await stream_messages(js, "DLQ")
        done = await settled(js, "ORDERS", "billing")
        await nc.close()

        assert outcome is Outcome.DEAD_LETTERED
        assert done and len(dead) == 1
        assert dead[0].headers["Dlq-Deliveries"] == "1"
        # nats-py reads a header value that is not ASCII as an email Header: its bytes, as sent.
        sent = b"".join(part for part, _ in decode_header(dead[0].headers["Dlq-Error"]))
        assert sent.decode("utf-8") == "ValueError: fehler \u202e\x1b[31m red \\ud800"

    support.run(main(), timeout=DEADLINE)


def test_a_crash_between_commit_and_ack_redelivers_and_the_upsert_leaves_one_row(nats_server, tmp_path):
    db_path = tmp_path / "billing.sqlite3"
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE invoices (order_id TEXT PRIMARY KEY, customer_id TEXT, items INT)")

    def upsert(order):
        with sqlite3.connect(db_path) as db:  # commits on leaving the block
            db.execute(
                "INSERT INTO invoices VALUES (?, ?, ?) ON CONFLICT(order_id) DO UPDATE SET "
                "customer_id = excluded.customer_id, items = excluded.items",
                (order["order_id"], order["customer_id"], len(order["items"])),
            )

    async def main():
        first = await connect(nats_server)
        js = first.jetstream()
        await setup_streams(js)
        await js.add_consumer("ORDERS", consumer(ack_wait=1.0))
        await js.publish("orders.created", json.dumps(GOOD_ORDER).encode())

        async def commit_then_crash(order, msg):
            upsert(order)
            await first.close()  # the process dies after its commit, before its ack

        msg = await fetch_one(js, "billing")
        crashed = await Lifecycle(first, commit_then_crash, schema=ORDER_SCHEMA).handle(msg)

        restarted = await connect(nats_server)
        js = restarted.jetstream()

        async def commit(order, msg):
            upsert(order)

        again = await fetch_one(js, "billing", timeout=5.0)  # after ack_wait runs out
        outcome = await Lifecycle(restarted, commit, schema=ORDER_SCHEMA).handle(again)
        done = await settled(js, "ORDERS", "billing")
        dlq = await stream_messages(js, "DLQ")
        await restarted.close()

        assert crashed is Outcome.REDELIVER
        assert again.metadata.sequence.stream == msg.metadata.sequence.stream
        assert again.metadata.num_delivered == 2
        assert outcome is Outcome.ACKED
        assert done
        assert dlq == []

    support.run(main(), timeout=DEADLINE)
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT order_id, customer_id, items FROM invoices").fetchall() == [
            ("o-1", "c-1", 1)
        ]


def test_a_failed_dead_letter_publish_leaves_the_message_unterminated_and_it_is_redelivered(nats_server):
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await ensure_stream(js, "ORDERS", ["orders.>"], retention="workqueue")  # no DLQ stream yet
        await js.add_consumer("ORDERS", consumer(ack_wait=5.0))
        ack = await js.publish("orders.created", b'{"order_id": 7}')

        async def handler(value, msg):
            raise AssertionError("an invalid message must not reach the handler")

        lifecycle = Lifecycle(nc, handler, schema=ORDER_SCHEMA, backoff=FAST,
                              publish_attempts=2, publish_timeout=0.5)
        first = await lifecycle.handle(await fetch_one(js, "billing"))
        pending = (await js.consumer_info("ORDERS", "billing")).num_ack_pending
        stored = (await js.stream_info("ORDERS")).state.messages

        again = await fetch_one(js, "billing")  # the nak's delay, not ack_wait
        await ensure_stream(js, "DLQ", ["dlq.>"])
        second = await lifecycle.handle(again)
        [dead] = await stream_messages(js, "DLQ")
        done = await settled(js, "ORDERS", "billing")
        await nc.close()

        assert first is Outcome.REDELIVER
        assert pending == 1 and stored == 1
        assert again.metadata.sequence.stream == ack.seq
        assert again.metadata.num_delivered == 2
        assert second is Outcome.DEAD_LETTERED
        assert dead.headers["Dlq-Deliveries"] == "2"
        assert done

    support.run(main(), timeout=DEADLINE)


def test_a_handler_slower_than_ack_wait_is_not_redelivered_while_in_progress_is_sent(nats_server):
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js)
        calls = []

        async def slow(value, msg):
            calls.append(msg.metadata.num_delivered)
            await asyncio.sleep(2.2)

        lifecycle = Lifecycle(nc, slow, schema=ORDER_SCHEMA)
        await js.publish("orders.created", json.dumps(GOOD_ORDER).encode())
        async with Runner(nc, consumer(ack_wait=1.0), lifecycle, concurrency=4):
            await eventually(lambda: settled(js, "ORDERS", "billing"), message="the ack")
        info = await js.consumer_info("ORDERS", "billing")
        await nc.close()

        assert calls == [1]
        assert info.num_redelivered == 0

    support.run(main(), timeout=DEADLINE)


def test_without_in_progress_the_same_slow_handler_would_be_redelivered(nats_server):
    """The control for the test above: the broker really does redelivery after ack_wait."""

    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js)
        calls = []

        async def slow(value, msg):
            calls.append(msg.metadata.num_delivered)
            await asyncio.sleep(2.2)

        lifecycle = Lifecycle(nc, slow, schema=ORDER_SCHEMA, progress_interval=3600)
        await js.publish("orders.created", json.dumps(GOOD_ORDER).encode())
        async with Runner(nc, consumer(ack_wait=1.0), lifecycle, concurrency=4):
            await eventually(lambda: 2 in calls, message="a redelivery")
            info = await js.consumer_info("ORDERS", "billing")
        await nc.close()

        assert calls[:2] == [1, 2]
        assert info.num_redelivered >= 1

    support.run(main(), timeout=DEADLINE)


def test_on_a_workqueue_stream_the_dead_letter_keeps_the_payload_byte_for_byte(nats_server):
    not_json = b"\xff\x00not json\r\n\tat all "
    odd_json = (
        '{ "order_id":"o-9",\n  "customer_id" : "caf\u00e9 \u20ac",  "items":[{"sku":"t","qty":1}] }\n'
    ).encode()

    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js, retention="workqueue")

        async def handler(value, msg):
            raise ValueError("customer is blocked")

        lifecycle = Lifecycle(nc, handler, schema=ORDER_SCHEMA, backoff=FAST)
        await js.publish("orders.created", not_json)
        await js.publish("orders.created", odd_json)
        async with Runner(nc, consumer(), lifecycle):
            await eventually(lambda: settled(js, "ORDERS", "billing"), message="both settled")

        dead = await stream_messages(js, "DLQ")
        left = (await js.stream_info("ORDERS")).state.messages
        await nc.close()

        assert left == 0  # TERM deletes from a workqueue stream: the DLQ copy is the only one
        by_reason = {m.headers["Dlq-Reason"]: m for m in dead}
        assert by_reason["schema_invalid"].data == not_json
        assert by_reason["fatal"].data == odd_json
        [violation] = json.loads(by_reason["schema_invalid"].headers["Dlq-Schema-Errors"])
        assert violation["path"] == "" and "not valid JSON" in violation["message"]

    support.run(main(), timeout=DEADLINE)


def test_original_headers_travel_with_the_dead_letter_whose_msg_id_is_deterministic(nats_server):
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js)

        async def handler(value, msg):
            raise RuntimeError("boom")

        await js.publish("orders.created", b"{}")  # so the interesting message is not seq 1
        ack = await js.publish("orders.created", json.dumps(GOOD_ORDER).encode(), headers={
            "traceparent": traceparent,
            "X-Tenant": "acme",
            "Nats-Msg-Id": "order-o-1",
            "Dlq-Replay-Of": "DLQ:7",  # republished by the dashboard, failed again
            "Dlq-Reason": "stale reason from an earlier failure",
        })
        await js.add_consumer("ORDERS", consumer(opt_start_seq=ack.seq, deliver_policy="by_start_sequence"))
        msg = await fetch_one(js, "billing")
        outcome = await Lifecycle(nc, handler).handle(msg)
        [dead] = await stream_messages(js, "DLQ")
        retried = await dead_letter(js, msg, "fatal", error="RuntimeError: boom")
        count = (await js.stream_info("DLQ")).state.messages
        await nc.close()

        assert outcome is Outcome.DEAD_LETTERED
        h = dead.headers
        assert h["Nats-Msg-Id"] == f"ORDERS:{ack.seq}:dlq"
        assert h["traceparent"] == traceparent
        assert h["X-Tenant"] == "acme"
        assert h["Dlq-Replay-Of"] == "DLQ:7"
        assert h["Dlq-Reason"] == "fatal"
        assert h["Dlq-Original-Msg-Id"] == "order-o-1"
        assert h["Dlq-Original-Subject"] == "orders.created"
        assert h["Dlq-Original-Stream"] == "ORDERS"
        assert h["Dlq-Original-Seq"] == str(ack.seq)
        assert h["Dlq-Consumer"] == "billing"
        assert h["Dlq-Error"] == "RuntimeError: boom"
        assert h["Dlq-Failed-At"].endswith("Z")
        datetime.fromisoformat(h["Dlq-Failed-At"].replace("Z", "+00:00"))
        assert retried.duplicate and retried.seq == dead.seq and count == 1

    support.run(main(), timeout=DEADLINE)


def test_a_pydantic_model_validates_and_reports_json_pointer_paths(nats_server):
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):
        sku: str
        qty: int

    class Order(pydantic.BaseModel):
        order_id: str
        items: list[Item]

    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js)
        seen = []

        async def handler(order, msg):
            seen.append(order)

        lifecycle = Lifecycle(nc, handler, schema=Order)
        await js.add_consumer("ORDERS", consumer())
        await js.publish("orders.created", b'{"order_id": "o-3", "items": [{"sku": "x", "qty": 1}]}')
        await js.publish("orders.created", b'{"order_id": "o-4", "items": [{"sku": "x", "qty": "many"}]}')
        good = await lifecycle.handle(await fetch_one(js, "billing"))
        bad = await lifecycle.handle(await fetch_one(js, "billing"))
        [dead] = await stream_messages(js, "DLQ")
        await nc.close()

        assert good is Outcome.ACKED and bad is Outcome.DEAD_LETTERED
        assert isinstance(seen[0], Order) and seen[0].items[0].qty == 1
        [error] = json.loads(dead.headers["Dlq-Schema-Errors"])
        assert error["path"] == "/items/0/qty"

    support.run(main(), timeout=DEADLINE)


# --- publishing and streams --------------------------------------------------------------------


def test_publish_with_retry_retries_no_responders_with_the_same_msg_id_and_stores_once(nats_server):
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()

        async def create_stream_later():
            await asyncio.sleep(0.3)
            await ensure_stream(js, "EVENTS", ["events.>"])

        creator = asyncio.create_task(create_stream_later())
        first = await publish_with_retry(js, "events.x", b"1", "evt-1", attempts=10, retry_delay=0.05)
        await creator
        again = await publish_with_retry(js, "events.x", b"1", "evt-1", headers={"Nats-Msg-Id": "other"})
        [stored] = await stream_messages(js, "EVENTS")
        await nc.close()

        assert not first.duplicate
        assert again.duplicate and again.seq == first.seq
        assert stored.headers["Nats-Msg-Id"] == "evt-1"

    support.run(main(), timeout=DEADLINE)


def test_publish_with_retry_gives_up_after_its_attempts(nats_server):
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        started = time.monotonic()
        with pytest.raises(nats.js.errors.NoStreamResponseError):
            await publish_with_retry(js, "nowhere.x", b"1", "id-1", attempts=3, retry_delay=0.05)
        await nc.close()
        return time.monotonic() - started

    assert support.run(main(), timeout=DEADLINE) >= 0.05 + 0.1


def test_ensure_stream_creates_then_leaves_alone_then_updates(nats_server):
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        created = await ensure_stream(js, "ORDERS", ["orders.>"], max_msgs=1000)
        same = await ensure_stream(js, "ORDERS", ["orders.>"], max_msgs=1000)
        updated = await ensure_stream(js, "ORDERS", ["orders.>", "refunds.>"])
        await nc.close()
        return created, same, updated

    created, same, updated = support.run(main(), timeout=DEADLINE)
    assert created.config.subjects == ["orders.>"]
    assert same.created == created.created
    assert updated.config.subjects == ["orders.>", "refunds.>"]
    assert updated.config.max_msgs == 1000  # settings not given are kept


# --- the runner --------------------------------------------------------------------------------


def test_the_runner_stops_gracefully_after_finishing_messages_in_flight(nats_server):
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js)
        started, finished = [], []

        async def handler(value, msg):
            started.append(value["order_id"])
            await asyncio.sleep(0.5)
            finished.append(value["order_id"])

        lifecycle = Lifecycle(nc, handler, schema=ORDER_SCHEMA)
        runner = ConsumerRunner(nc, "ORDERS", consumer(), lifecycle, concurrency=3, fetch_timeout=0.25)
        task = asyncio.create_task(runner.run())
        for i in range(3):
            await js.publish("orders.created", json.dumps({**GOOD_ORDER, "order_id": f"o-{i}"}).encode())
        await eventually(lambda: len(started) == 3, message="three handlers running")
        runner.stop()
        await asyncio.wait_for(task, 10)
        done = await settled(js, "ORDERS", "billing")
        await nc.close()

        assert sorted(finished) == ["o-0", "o-1", "o-2"]
        assert done

    support.run(main(), timeout=DEADLINE)


def test_the_runner_updates_an_existing_durable_to_the_new_config(nats_server):
    async def main():
        nc = await connect(nats_server)
        js = nc.jetstream()
        await setup_streams(js)
        await js.add_consumer("ORDERS", consumer(max_deliver=2))
        async def handler(value, msg):
            pass

        lifecycle = Lifecycle(nc, handler)
        async with Runner(nc, consumer(max_deliver=7), lifecycle):
            info = await js.consumer_info("ORDERS", "billing")
        await nc.close()
        return info.config.max_deliver

    assert support.run(main(), timeout=DEADLINE) == 7


def test_a_sync_handler_is_refused_before_it_could_dead_letter_everything():
    with pytest.raises(TypeError, match="async"):
        Lifecycle(_Offline(), lambda value, msg: None)


def test_the_runner_refuses_backoff_longer_than_max_deliver():
    with pytest.raises(ValueError, match="max_deliver"):
        ConsumerRunner(_Offline(), "ORDERS", consumer(max_deliver=2, backoff=[1, 2]), None)


# --- pure parts --------------------------------------------------------------------------------


def test_backoff_grows_exponentially_within_its_jitter_and_is_capped():
    backoff = Backoff(initial=1.0, factor=2.0, maximum=10.0, jitter=0.2)
    for attempt, base in [(1, 1.0), (2, 2.0), (3, 4.0), (5, 10.0), (9, 10.0)]:
        assert base * 0.8 <= backoff.delay(attempt) <= base * 1.2


def test_transient_errors_are_recognised_also_as_a_cause_and_can_be_extended():
    class DatabaseBusy(Exception):
        pass

    wrapped = RuntimeError("lookup failed")
    wrapped.__cause__ = nats.errors.TimeoutError()
    assert default_is_transient(asyncio.TimeoutError())
    assert default_is_transient(ConnectionResetError())
    assert default_is_transient(TransientError("try later"))
    assert default_is_transient(wrapped)
    assert not default_is_transient(ValueError("bad"))
    assert not default_is_transient(DatabaseBusy())
    extended = lambda e: default_is_transient(e) or isinstance(e, DatabaseBusy)  # noqa: E731
    assert extended(DatabaseBusy())


def test_schema_errors_are_reported_with_escaped_json_pointers():
    nested = {"properties": {"~x": {"type": "integer"}}}
    validator = make_validator({"type": "object", "properties": {"a/b": nested}})
    _, violations = parse_and_validate(b'{"a/b": {"~x": "no"}}', validator)
    assert [v.path for v in violations] == ["/a~1b/~0x"]
    assert json_pointer(["items", 0, "qty"]) == "/items/0/qty"


# --- small fixtures ----------------------------------------------------------------------------


class _Offline:
    """Stands in for a NATS connection where none is needed."""

    def jetstream(self):
        return None
