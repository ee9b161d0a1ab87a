"""``python app.py --demo``: an ``ORDERS`` stream, a shop that publishes realistic orders into it,
and a fulfilment service built on :mod:`dlq_consumer` that dead-letters what it cannot handle,
so the dashboard fills with every kind of entry and a fix can be tried.

The demo is a separate service: it runs on its own thread and event loop with its own NATS
connection, and never touches the dashboard's bridge.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig

from dlq_consumer import headers as contract
from dlq_consumer import (
    Backoff, ConsumerRunner, Lifecycle, default_is_transient, ensure_stream, publish_with_retry,
)

from ..accounts import AccountError, create_user
from ..actors import FIRST_START
from ..config import Settings
from ..nats.bridge import auth_options, close_loop
from ..nats.client_log import ConnectionLog
from ..redaction import scrub
from ..runtime import Runtime
from .orders import (
    BURST, CRM_SHARD, OUTAGE_CUSTOMER, TRICKLE_WEIGHTS, OrderFactory, OrderTable, SimulatedServices,
)

log = logging.getLogger(__name__)

DEMO_SCHEMAS = Path(__file__).with_name("schemas")
STREAM = "ORDERS"
SUBJECT = "orders.created"
CONSUMER = "fulfilment"
OPERATOR = "demo"
# Short limits so every failure reaches the dashboard within seconds: four deliveries with
# naks after about 0.5, 1 and 2 s, and an ack_wait that in_progress keeps alive.
MAX_DELIVER = 4
ACK_WAIT = 5.0
BACKOFF = Backoff(initial=0.5, factor=2.0, maximum=4.0, jitter=0.2)


def demo_settings(settings: Settings) -> Settings:
    """The settings with the demo's schema folder and its orders' key fields as the list's
    columns, unless DLQ_SCHEMAS or DLQ_LIST_FIELDS name their own."""
    if not settings.list_fields:
        settings = replace(settings, list_fields=DEMO_LIST_FIELDS)
    if settings.schemas_dir:
        return settings
    return replace(settings, schemas_dir=str(DEMO_SCHEMAS))


#: The demo's orders as the list shows them: what a support person searches by.
DEMO_LIST_FIELDS = (("Order", "/order_id"), ("Customer", "/customer_id"))


def order_schema() -> dict:
    """The JSON Schema the fulfilment service validates orders against (also the dashboard's)."""
    import json

    return json.loads((DEMO_SCHEMAS / "orders.json").read_text(encoding="utf-8"))


def ensure_demo_operator(engine) -> str | None:
    """Create the ``demo`` operator with a random password and return it; None if it exists."""
    password = secrets.token_urlsafe(12)
    try:
        create_user(engine, OPERATOR, password, "operator", actor=FIRST_START)  # by the dashboard, as the first admin
    except AccountError:
        return None
    return password


def is_transient(exc: BaseException) -> bool:
    """Timeouts and connection errors, and a busy order database."""
    return default_is_transient(exc) or (
        isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc))


@dataclass(frozen=True)
class SentOrder:
    """An order message the demo's shop published, and the stream sequence it got."""

    kind: str
    order_id: str
    msg_id: str
    seq: int


class Demo:
    """The demo shop and fulfilment service; ``start()`` returns at once, ``stop()`` joins.

    ``trickle`` is the range of seconds between orders after the opening burst (None: burst
    only); ``outage_seconds`` is how long the CRM shard of OUTAGE_CUSTOMER stays down.
    """

    def __init__(self, runtime: Runtime, *, trickle: tuple[float, float] | None = (1.0, 3.0),
                 outage_seconds: float = 90.0, seed: int | None = None, db_path: Path | None = None):
        if runtime.bridge is None:
            raise RuntimeError("start the runtime first: the demo connects to the same NATS servers")
        self.runtime = runtime
        self.settings: Settings = runtime.settings
        self.servers = list(runtime.bridge.servers)
        self.trickle = trickle
        self.outage_seconds = outage_seconds
        self.rng = random.Random(seed)
        self.db_path = Path(db_path or Path(self.settings.instance_path) / "demo-orders.sqlite3")
        self.table = OrderTable(self.db_path)
        self.services: SimulatedServices | None = None
        self.sent: list[SentOrder] = []
        self.ready = threading.Event()  # set once the consumer pulls and the shop publishes
        self.error: BaseException | None = None
        self.login: tuple[str, str] | None = None  # the operator made at the start, and its password
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._connection_log = ConnectionLog(log, "demo")
        # The order table's one writer: the handler never blocks the loop on SQLite.
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dlq-demo-db")

    # --- start and stop -----------------------------------------------------------------------

    def start(self) -> "Demo":
        """Create the demo operator (its name and password in ``login``, for the start to print
        once) and start the demo thread."""
        password = ensure_demo_operator(self.runtime.engine)
        self.login = (OPERATOR, password) if password else None
        self.services = SimulatedServices(self.outage_seconds)
        self._db.submit(self.table.open).result()
        loop_ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._stopping = asyncio.Event()
            loop_ready.set()
            try:
                self._loop.run_until_complete(self._main())
            finally:
                # What nats-py leaves on the loop (a subscription's reader when the connection
                # closed while reconnecting) is cancelled and awaited, its executor joined.
                close_loop(self._loop)

        self._thread = threading.Thread(target=run, name="dlq-demo", daemon=True)
        self._thread.start()
        loop_ready.wait()
        ends = datetime.now().astimezone() + timedelta(seconds=self.outage_seconds)
        print(f"Demo: orders flow into stream {STREAM}; the CRM shard of customer {OUTAGE_CUSTOMER} is "
              f"down until {ends:%H:%M:%S} (see docs/demo.md)", flush=True)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Stop publishing, let the consumer settle the messages in flight, close, join."""
        if self._thread is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stopping.set)
            except RuntimeError:  # the loop ended by itself (its error is in self.error)
                pass
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the demo did not stop within %g s", timeout)
        self._thread = None
        self._db.submit(self.table.close).result()
        self._db.shutdown(wait=True)

    def outage_over(self) -> bool:
        """True once the CRM shard is back, so OUTAGE_CUSTOMER's dead letters can be republished."""
        return self.services is not None and self.services.outage_over()

    # --- the service --------------------------------------------------------------------------

    async def _main(self) -> None:
        nc = None
        try:
            nc = await self._connect()
            if nc is None:
                return  # stopped before a connection was made
            js = nc.jetstream()
            # The dashboard creates these too; doing it here first means the advisory stream
            # exists before the first nak, so no advisory is emitted to nobody.
            await self.runtime.streams.ensure(js)
            await ensure_stream(js, STREAM, ["orders.>"])
            lifecycle = Lifecycle(nc, self._handle, schema=order_schema(), is_transient=is_transient,
                                  backoff=BACKOFF, dlq_prefix=self._dlq_prefix())
            config = ConsumerConfig(durable_name=CONSUMER, filter_subject="orders.>",
                                    ack_wait=ACK_WAIT, max_deliver=MAX_DELIVER)
            runner = ConsumerRunner(nc, STREAM, config, lifecycle, concurrency=8)
            consuming = asyncio.create_task(runner.run())
            pulling = asyncio.create_task(runner.ready.wait())
            await asyncio.wait({consuming, pulling}, return_when=asyncio.FIRST_COMPLETED)
            pulling.cancel()
            if consuming.done():
                consuming.result()  # raises why the consumer could not start
            producing = asyncio.create_task(self._produce(js))
            announcing = asyncio.create_task(self._announce_outage_end())
            self.ready.set()
            await self._stopping.wait()
            announcing.cancel()
            runner.stop()
            # The shop ends by itself at the stop; cancelling is the fallback for a publish
            # stuck in an outage (asyncio.wait_for before Python 3.12 can swallow a cancel).
            await asyncio.wait({producing}, timeout=2)
            producing.cancel()
            await asyncio.wait({producing}, timeout=2)
            await asyncio.wait_for(consuming, 10)
        except Exception as exc:  # noqa: BLE001 - reported, and the dashboard keeps running
            self.error = exc
            log.exception("the demo stopped")
        finally:
            self._connection_log.closing = True
            if nc is not None and not nc.is_closed:
                try:
                    await asyncio.wait_for(nc.close(), 5)
                except Exception:  # noqa: BLE001 - the server may be gone already
                    log.debug("closing the demo's NATS connection failed", exc_info=True)

    async def _connect(self):
        # Each attempt is bounded: nats-py's first connect to a dead server otherwise retries
        # for minutes. A stop request ends the wait at once.
        s = self.settings
        options: dict[str, Any] = dict(servers=self.servers, name="dlq-demo-fulfilment",
                                       connect_timeout=2, allow_reconnect=True,
                                       max_reconnect_attempts=-1, reconnect_time_wait=1,
                                       **self._connection_log.options())
        options.update(auth_options(s))
        delay = 0.5
        while not self._stopping.is_set():
            attempt = asyncio.create_task(asyncio.wait_for(nats.connect(**options), 5))
            stop = asyncio.create_task(self._stopping.wait())
            await asyncio.wait({attempt, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not attempt.done():
                attempt.cancel()
                await asyncio.gather(attempt, return_exceptions=True)
                return None
            try:
                return attempt.result()
            except Exception as exc:  # noqa: BLE001 - retried until stopped
                log.warning("demo: cannot connect to NATS (%s); retrying in %.1f s", scrub(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__), delay)
            if await self._stopped_within(delay):
                return None
            delay = min(delay * 2, 10)
        return None

    def _dlq_prefix(self) -> str:
        # Dead letters must land in the stream the dashboard mirrors: dlq.> -> "dlq".
        first = self.settings.dlq_subjects[0]
        return first[:-2] if first.endswith(".>") else "dlq"

    async def _handle(self, order: dict, msg: Msg) -> None:
        """The fulfilment handler: check the customer, store the order, reserve its stock."""
        services = self.services
        await services.look_up_customer(order["customer_id"])
        md = msg.metadata
        replay_of = (msg.headers or {}).get(contract.REPLAY_OF)
        # Commit before the reservation: if that fails, the redelivery upserts the same row.
        await asyncio.get_running_loop().run_in_executor(
            self._db, self.table.upsert, order, f"{md.stream}:{md.sequence.stream}", replay_of)
        await services.reserve_stock(order["order_id"])
        log.debug("demo: stored order %s of %s%s", order["order_id"], order["customer_id"],
                 f" (republished from {replay_of})" if replay_of else "")

    async def _announce_outage_end(self) -> None:
        if not await self._stopped_within(max(0.0, self.services.outage_until - self.services.clock())):
            print(f"Demo: the CRM shard {CRM_SHARD} is back; republish the dead letters of customer "
                  f"{OUTAGE_CUSTOMER} now", flush=True)

    # --- the shop -----------------------------------------------------------------------------

    async def _produce(self, js) -> None:
        factory = OrderFactory(self.rng)
        burst = list(BURST)
        self.rng.shuffle(burst)
        burst.insert(self.rng.randint(burst.index("ok") + 1, len(burst)), "resent")
        for kind in burst:
            if self._stopping.is_set():
                return
            await self._publish(js, factory, kind)
        if self.trickle is None:
            return
        kinds, weights = zip(*TRICKLE_WEIGHTS.items())
        while not await self._stopped_within(self.rng.uniform(*self.trickle)):
            await self._publish(js, factory, self.rng.choices(kinds, weights)[0])

    async def _stopped_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except asyncio.TimeoutError:
            return False
        return True

    async def _publish(self, js, factory: OrderFactory, kind: str) -> None:
        outgoing = factory.make(kind)
        if outgoing.kind == "flaky":
            self.services.inventory_timeouts[outgoing.order_id] = self.rng.choice((1, 2))
        try:
            ack = await publish_with_retry(js, SUBJECT, outgoing.payload, outgoing.msg_id,
                                           headers=outgoing.headers)
        except Exception as exc:  # noqa: BLE001 - a shop outage loses this order, not the demo
            log.warning("demo: publishing order %s failed: %s", outgoing.order_id, exc)
            return
        self.sent.append(SentOrder(outgoing.kind, outgoing.order_id, outgoing.msg_id, ack.seq))
