"""A durable pull consumer that feeds messages to a :class:`Lifecycle` with bounded concurrency.

    lifecycle = Lifecycle(nc, handle_order, schema=ORDER_SCHEMA)
    runner = ConsumerRunner(nc, "ORDERS", ConsumerConfig(durable_name="billing", max_deliver=5),
                            lifecycle)
    await runner.run()   # until runner.stop()
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from .headers import describe_error
from .lifecycle import Lifecycle, default_is_transient

log = logging.getLogger(__name__)


class ConsumerRunner:
    """Pull from a durable consumer and apply a :class:`Lifecycle` with bounded concurrency.

    ``run()`` creates or updates the durable from ``config`` and processes messages until
    ``stop()``; then it finishes the messages in flight and returns.
    """

    def __init__(
        self,
        nc: Any,
        stream: str,
        config: ConsumerConfig,
        lifecycle: Lifecycle,
        *,
        concurrency: int = 8,
        fetch_timeout: float = 1.0,
    ) -> None:
        name = config.durable_name or config.name
        if not name:
            raise ValueError("the consumer config needs a durable_name")
        if config.ack_policy not in (None, AckPolicy.EXPLICIT):
            raise ValueError("the lifecycle acks each message: ack_policy must be explicit")
        if config.backoff and not (config.max_deliver and config.max_deliver > len(config.backoff)):
            # The server refuses this (err 10116); say so before connecting.
            raise ValueError("with backoff, max_deliver must exceed the number of backoff values")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.stream = stream
        self.config = config.evolve(name=name, durable_name=name, ack_policy=AckPolicy.EXPLICIT)
        self.lifecycle = lifecycle
        self.concurrency = concurrency
        self.fetch_timeout = fetch_timeout
        self.ready = asyncio.Event()  # set once the durable exists and the runner pulls
        self._stop = asyncio.Event()

    @property
    def name(self) -> str:
        return self.config.durable_name

    def stop(self) -> None:
        """Ask ``run()`` to stop pulling, finish the messages in flight and return."""
        self._stop.set()

    async def run(self) -> None:
        """Process messages until :meth:`stop`; cancelling also cancels the messages in flight."""
        # pull_subscribe would keep an existing durable's old config; add_consumer updates it.
        info = await self.js.add_consumer(self.stream, self.config)
        self.lifecycle.remember_consumer(info)
        sub = await self.js.pull_subscribe_bind(durable=self.name, stream=self.stream)
        slots = asyncio.Semaphore(self.concurrency)
        in_flight: set[asyncio.Task] = set()
        self.ready.set()
        try:
            while not self._stop.is_set():
                free = await self._acquire_free_slots(slots)
                msgs = await self._fetch(sub, free)
                for _ in range(free - len(msgs)):
                    slots.release()
                for msg in msgs:
                    task = asyncio.create_task(self._process(msg, slots))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
        except asyncio.CancelledError:
            for task in in_flight:
                task.cancel()
            raise
        finally:
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)
            self.ready.clear()
            try:
                await sub.unsubscribe()
            except Exception as exc:  # noqa: BLE001 - the connection may be gone already
                log.debug("unsubscribe from %s failed: %s", self.name, exc)

    async def _acquire_free_slots(self, slots: asyncio.Semaphore) -> int:
        # Pull only as many messages as can start now: a fetched message waiting for a slot
        # would use up its ack_wait before its handler even began.
        await slots.acquire()
        free = 1
        while free < self.concurrency and not slots.locked():
            await slots.acquire()  # returns at once while the semaphore is not locked
            free += 1
        return free

    async def _fetch(self, sub: JetStreamContext.PullSubscription, batch: int) -> list[Msg]:
        if self._stop.is_set():
            return []
        try:
            return await sub.fetch(batch, timeout=self.fetch_timeout)
        except asyncio.TimeoutError:  # nats.errors.TimeoutError, and a plain one nats-py also raises
            # Nothing to do (or, during a reconnect, nothing reachable): pull again.
            return []
        except Exception as exc:
            if not default_is_transient(exc):
                raise
            log.warning("fetch from %s failed, retrying: %s", self.name, describe_error(exc))
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=self.fetch_timeout)
            except asyncio.TimeoutError:
                pass
            return []

    async def _process(self, msg: Msg, slots: asyncio.Semaphore) -> None:
        try:
            await self.lifecycle.handle(msg)
        except Exception:  # noqa: BLE001 - unsettled, the message comes back after ack_wait
            log.exception("processing a message from %s failed", self.name)
        finally:
            slots.release()
