"""The dead-letter lifecycle of one JetStream message, for Python services.

validate -> run the handler -> ack; transient error -> nak with backoff; schema-invalid, fatal or
last delivery -> copy to the DLQ (SPEC.md section 4), then terminate. The pull runner that feeds
it messages is :class:`dlq_consumer.ConsumerRunner`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
import random
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, ConsumerInfo

from . import headers as h
from .headers import describe_error, one_line
from .publishing import dead_letter
from .validation import SchemaViolation, make_validator, parse_and_validate

log = logging.getLogger(__name__)

MAX_TERM_REASON_CHARS = 200

Handler = Callable[[Any, Msg], Awaitable[None]]


# --- errors and their classification ----------------------------------------------------------


class TransientError(Exception):
    """Raise (or chain with ``raise ... from``) to have a failure retried with backoff."""


_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    TransientError,
    TimeoutError,
    asyncio.TimeoutError,
    ConnectionError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)


def default_is_transient(exc: BaseException) -> bool:
    """True for timeouts, connection errors and :class:`TransientError`, also as a ``__cause__``.

    Extend it: ``is_transient=lambda e: default_is_transient(e) or isinstance(e, MyDbBusy)``.
    """
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 10:
        if isinstance(current, _TRANSIENT_TYPES):
            return True
        current, seen = current.__cause__, seen + 1
    return False


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with proportional jitter: ``initial * factor**(n-1)``, capped, ±jitter."""

    initial: float = 1.0
    factor: float = 2.0
    maximum: float = 60.0
    jitter: float = 0.2

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based)."""
        base = min(self.maximum, self.initial * self.factor ** max(0, attempt - 1))
        # Proportional (not "full") jitter keeps each delay above the previous one while
        # factor * (1 - jitter) > 1 + jitter, and still spreads a thundering herd.
        return max(0.001, base * random.uniform(1 - self.jitter, 1 + self.jitter))


# --- the lifecycle -----------------------------------------------------------------------------


class Outcome(enum.Enum):
    """What :meth:`Lifecycle.handle` did with a message."""

    ACKED = "acked"
    RETRYING = "retrying"  # transient failure: nak'ed with a delay
    DEAD_LETTERED = "dead_lettered"  # copied to the DLQ, then terminated
    REDELIVER = "redeliver"  # dead-lettering or the ack failed: the broker will deliver it again


@dataclass(frozen=True)
class ConsumerLimits:
    """What the lifecycle needs from the consumer's config."""

    max_deliver: int | None = None  # None: unlimited
    ack_wait: float = 30.0
    backoff: tuple[float, ...] = ()

    @classmethod
    def from_config(cls, config: ConsumerConfig) -> "ConsumerLimits":
        max_deliver = config.max_deliver if config.max_deliver and config.max_deliver > 0 else None
        return cls(max_deliver, config.ack_wait or 30.0, tuple(config.backoff or ()))

    def shortest_ack_wait(self) -> float:
        # With backoff, the server uses the backoff values as the ack wait of each delivery.
        return min((self.ack_wait, *self.backoff))


class Lifecycle:
    """Process JetStream messages with the dead-letter lifecycle of SPEC.md section 4.

    ``handler(value, msg)`` gets the validated payload (the parsed JSON, or the pydantic model
    instance) and the message; it commits its own work and must not ack the message itself.
    """

    def __init__(
        self,
        nc: Any,
        handler: Handler,
        *,
        schema: Any = None,
        is_transient: Callable[[BaseException], bool] = default_is_transient,
        backoff: Backoff = Backoff(),
        dlq_prefix: str = "dlq",
        publish_attempts: int = 5,
        publish_timeout: float = 2.0,
        ack_timeout: float = 5.0,
        progress_interval: float | None = None,
    ) -> None:
        if not inspect.iscoroutinefunction(handler) and not inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)
        ):
            # A sync handler would block the loop (no in_progress), and its TypeError on
            # await would be taken for a fatal message error and dead-letter everything.
            raise TypeError("the handler must be an async function: async def handler(value, msg)")
        self.nc = nc
        self.js = nc.jetstream()
        self.handler = handler
        self.validator = make_validator(schema)
        self.is_transient = is_transient
        self.backoff = backoff
        self.dlq_prefix = dlq_prefix
        self.publish_attempts = publish_attempts
        self.publish_timeout = publish_timeout
        self.ack_timeout = ack_timeout
        self.progress_interval = progress_interval
        self._limits: dict[tuple[str, str], ConsumerLimits] = {}

    def remember_consumer(self, info: ConsumerInfo) -> None:
        """Cache a consumer's limits (the runner does this) so they need not be looked up."""
        self._limits[(info.stream_name, info.name)] = ConsumerLimits.from_config(info.config)

    async def handle(self, msg: Msg) -> Outcome:
        """Validate, run the handler and settle ``msg``; never raises for a handler failure."""
        limits = await self._limits_for(msg)
        async with self._keep_alive(msg, limits):
            settle = await self._decide(msg, limits)
        return await settle()

    async def _decide(self, msg: Msg, limits: ConsumerLimits) -> Callable[[], Awaitable[Outcome]]:
        value, violations = parse_and_validate(msg.data, self.validator)
        if violations:
            summary = "; ".join(f"{v.path or '(root)'}: {v.message}" for v in violations[:5])
            return await self._give_up(msg, h.REASON_SCHEMA_INVALID, summary, violations)
        try:
            await self.handler(value, msg)
        except Exception as exc:  # noqa: BLE001 - every handler failure is settled below
            error = describe_error(exc)
            delivered = msg.metadata.num_delivered
            if not self.is_transient(exc):
                log.warning("fatal error on %s: %s", _where(msg), error)
                return await self._give_up(msg, h.REASON_FATAL, error)
            if limits.max_deliver is not None and delivered >= limits.max_deliver:
                log.warning("giving up on %s after %d deliveries: %s", _where(msg), delivered, error)
                return await self._give_up(msg, h.REASON_MAX_DELIVERIES, error)
            delay = self.backoff.delay(delivered)
            log.info("transient error on %s, retry in %.2fs: %s", _where(msg), delay, error)
            return lambda: self._nak(msg, delay, Outcome.RETRYING)
        return lambda: self._ack(msg)

    async def _give_up(
        self, msg: Msg, reason: str, error: str, violations: Sequence[SchemaViolation] = ()
    ) -> Callable[[], Awaitable[Outcome]]:
        try:
            await dead_letter(
                self.js, msg, reason, error=error, schema_errors=violations,
                prefix=self.dlq_prefix, attempts=self.publish_attempts, timeout=self.publish_timeout,
            )
        except Exception as exc:  # noqa: BLE001
            # Terminating now would lose the message on workqueue/interest streams: leave it
            # to be redelivered and dead-lettered again. If this was its last delivery the
            # server keeps it (any retention) and emits MAX_DELIVERIES, which the dashboard
            # captures from its advisory stream.
            delay = self.backoff.delay(msg.metadata.num_delivered)
            log.error("dead-lettering %s failed, left for redelivery in %.2fs: %s",
                      _where(msg), delay, describe_error(exc))
            return lambda: self._nak(msg, delay, Outcome.REDELIVER)
        return lambda: self._terminate(msg, one_line(f"{reason}: {error}", MAX_TERM_REASON_CHARS))

    async def _ack(self, msg: Msg) -> Outcome:
        if msg.is_acked:
            log.warning("the handler settled %s itself; the lifecycle leaves it", _where(msg))
            return Outcome.ACKED
        try:
            # Synchronous, so ACKED means the server has it; a lost ack is a redelivery that
            # the handler's upsert absorbs.
            await msg.ack_sync(timeout=self.ack_timeout)
        except Exception as exc:  # noqa: BLE001
            log.warning("ack of %s failed, it will be redelivered: %s", _where(msg), describe_error(exc))
            return Outcome.REDELIVER
        return Outcome.ACKED

    async def _nak(self, msg: Msg, delay: float, outcome: Outcome) -> Outcome:
        try:
            await msg.nak(delay=delay)
        except Exception as exc:  # noqa: BLE001
            # Unsettled, it comes back after ack_wait anyway.
            log.warning("nak of %s failed: %s", _where(msg), describe_error(exc))
            return Outcome.REDELIVER
        return outcome

    async def _terminate(self, msg: Msg, reason: str) -> Outcome:
        try:
            # nats-py's msg.term() sends no reason; the server puts this one into the
            # MSG_TERMINATED advisory. As a request, the server confirms it.
            await self.nc.request(msg.reply, b"+TERM " + reason.encode(), timeout=self.ack_timeout)
        except Exception as exc:  # noqa: BLE001
            # The DLQ copy is stored; a redelivery dead-letters again under the same msgId,
            # which the DLQ stream's duplicate window absorbs.
            log.warning("terminating %s failed: %s", _where(msg), describe_error(exc))
            return Outcome.REDELIVER
        return Outcome.DEAD_LETTERED

    @contextlib.asynccontextmanager
    async def _keep_alive(self, msg: Msg, limits: ConsumerLimits):
        # +WPI resets the ack_wait timer; a third of it leaves room for one late progress ack.
        interval = self.progress_interval or max(0.01, limits.shortest_ack_wait() / 3)

        async def tick() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await msg.in_progress()
                except Exception as exc:  # noqa: BLE001 - a missed tick only risks a redelivery
                    log.debug("in_progress for %s failed: %s", _where(msg), exc)

        ticker = asyncio.create_task(tick())
        try:
            yield
        finally:
            # Stopped before the final ack/nak/term so no +WPI follows it.
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker

    async def _limits_for(self, msg: Msg) -> ConsumerLimits:
        md = msg.metadata
        key = (md.stream, md.consumer)
        if key not in self._limits:
            try:
                self.remember_consumer(await self.js.consumer_info(md.stream, md.consumer))
            except Exception as exc:  # noqa: BLE001
                log.warning("no consumer info for %s/%s (%s): assuming ack_wait 30s, no max_deliver",
                            md.stream, md.consumer, describe_error(exc))
                return ConsumerLimits()
        return self._limits[key]


def _where(msg: Msg) -> str:
    md = msg.metadata
    return f"{md.stream}:{md.sequence.stream} ({msg.subject}, delivery {md.num_delivered})"
