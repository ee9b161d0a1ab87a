"""A mirror follower's inbox: what one stream has delivered and the writer has not taken yet,
within a memory budget (mirror.py makes one a follower, with its share of the budget)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Awaitable, Callable

from nats.js.api import ConsumerConfig, DeliverPolicy

from .direct import DirectReader, DirectUnavailable, consumer_position

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Budget:
    """How much an inbox may hold (``queue`` messages, ``queue_bytes`` of payload), and the batch
    the writer takes (``batch`` messages, ``batch_bytes``): a direct get reads at most a batch."""

    queue: int
    queue_bytes: int
    batch: int
    batch_bytes: int


class Inbox:
    """The messages of one stream received and not yet handed to the writer, at most
    ``budget().queue`` of them and ``budget().queue_bytes`` of payload: the budget that keeps the
    mirror's memory flat however long the backlog.

    An ordered consumer's flow control cannot keep that budget. nats-py counts a message as
    delivered when it arrives, not when a callback has taken it, so it answers the server's
    flow control at once, and without a callback its reply to a "consumer stalled" heartbeat
    lets another window in every heartbeat. Messages then pile up in the client (1.3 GB for
    a backlog of a million, measured), and once its pending limit is reached nats-py drops
    messages while moving the ordered consumer's position past them: entries lost. So the
    callback only appends, the client's own limits are off (it never drops), and when the
    budget is full the subscription is ended; it is made again after the last message taken
    once the writer has used up most of the budget (a new ordered consumer a few thousand
    messages). A message that arrives after the budget is full is not taken: the next
    subscription starts with it.
    """

    def __init__(self, last_seq: int, budget: Callable[[], Budget], direct: DirectReader | None = None,
                 verify: Callable[[], Awaitable[None]] | None = None):
        self.budget = budget  # asked at each turn: the budget as the mirror's settings have it now
        self._limits = budget()  # as of the last turn, for the callback (a message at a time)
        # Batched direct gets while ``behind`` (a backlog), checked by ``verify`` after each
        # batch: the stream is still the one of the follower's epoch (StreamChanged otherwise).
        self.direct = direct
        self.verify = verify
        self.behind = False
        self._reading: asyncio.Task | None = None
        self._room = asyncio.Event()
        self.messages: deque = deque()
        self.size = 0
        self.last_seq = last_seq  # the last sequence taken
        self.arrived = asyncio.Event()
        self.full = False
        self._sub = None
        self._generation = 0  # of the current subscription; a callback of an older one takes nothing
        self._closing: asyncio.Future | None = None

    @property
    def reading(self) -> list[asyncio.Task]:
        """The task reading the backlog by direct gets, if one runs (the idle follower wakes when it ends)."""
        return [self._reading] if self._reading is not None else []

    async def follow(self, js, stream: str) -> None:
        """Read the backlog by direct gets while behind; otherwise make a subscription after the
        last message taken if there is none and the budget has room again. A failed read is
        raised here (the follower starts over from the database)."""
        if self._reading is not None and self._reading.done():
            reading, self._reading = self._reading, None
            reading.result()
        if self.behind:
            if self._reading is None and self._sub is None:
                self._reading = asyncio.ensure_future(self._read_backlog())
            return
        budget = self._limits = self.budget()
        if self._sub is None and len(self.messages) <= budget.queue // 4 and self.size <= budget.queue_bytes // 4:
            self.full = False
            self._generation += 1
            generation = self._generation
            sub = await js.subscribe(
                ">", stream=stream, ordered_consumer=True, cb=self._received(generation), idle_heartbeat=2.0,
                pending_msgs_limit=0, pending_bytes_limit=0,
                config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                      opt_start_seq=self.last_seq + 1))
            self._sub = sub
            if generation != self._generation:  # filled (and so ended) before it was returned
                await self._unsubscribe()

    def _received(self, generation: int):
        async def received(msg) -> None:
            if self.full or generation != self._generation:
                return  # over budget, or a subscription being ended: the next starts after last_seq
            seq, stored_ns = consumer_position(msg.reply)
            if seq <= self.last_seq:
                return
            self.messages.append((seq, stored_ns, msg))
            self.size += len(msg.data)
            self.last_seq = seq
            self.arrived.set()
            budget = self._limits
            if len(self.messages) >= budget.queue or self.size >= budget.queue_bytes:
                # Ended at once: what the server sends until it reads the unsubscribe is parsed
                # for nothing.
                self.full = True
                self.behind = self.direct is not None  # the stream runs ahead: read the rest directly
                self._closing = asyncio.ensure_future(self._unsubscribe())

        return received

    async def _read_backlog(self) -> None:
        """Read batches by direct get into the budget until the stream has nothing after them."""
        while self.behind:
            budget = self.budget()
            room = min(budget.queue - len(self.messages), budget.batch)
            room_bytes = min(budget.queue_bytes - self.size, budget.batch_bytes)
            if room < budget.batch // 2 or room_bytes < budget.batch_bytes // 2:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                batch, pending = await self.direct.read(self.last_seq + 1, room, room_bytes)
            except DirectUnavailable as exc:
                log.warning("%s; reading the stream with a consumer instead", exc)
                self.direct, self.behind = None, False
                return
            if self.verify is not None:
                await self.verify()
            for item in batch:
                if item[0] > self.last_seq:
                    self.messages.append(item)
                    self.size += len(item[2].data)
                    self.last_seq = item[0]
            if batch:
                self.arrived.set()
            if pending == 0 or not batch:
                self.behind = False  # caught up: the ordered consumer follows from here

    def take(self, count: int, size: int) -> list:
        """Up to ``count`` messages and about ``size`` bytes of payload, oldest first, each as
        (stream sequence, stored time in ns, message)."""
        batch = [self.messages.popleft()]
        taken = len(batch[0][2].data)
        while self.messages and len(batch) < count and taken < size:
            batch.append(self.messages.popleft())
            taken += len(batch[-1][2].data)
        self.size -= taken
        self._room.set()
        if not self.messages:
            self.arrived.clear()
        return batch

    async def close(self) -> None:
        reading, self._reading = self._reading, None
        if reading is not None:
            reading.cancel()
            # Also told to stop by its own loop's terms, and woken if it waits for room: a cancel
            # can be lost (before Python 3.12 asyncio.wait_for returns the result of what ended as
            # the cancel came, and drops the cancel), and the reader then waited for room that
            # nothing would make, with the follower waiting for it: the mirror stalled for good.
            self.behind = False
            self._room.set()
            await asyncio.gather(reading, return_exceptions=True)
        if self.direct is not None:
            await self.direct.close()
        await self._unsubscribe()

    async def _unsubscribe(self) -> None:
        sub, self._sub = self._sub, None
        self._generation += 1
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception:
                log.debug("unsubscribing from the stream failed", exc_info=True)
