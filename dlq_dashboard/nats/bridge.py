"""The single asyncio thread that owns the NATS client, and a small synchronous facade.

nats-py is asyncio-only and not thread-safe: only this thread touches NATS objects. Flask
threads call ``bridge.call(lambda: coro)``, which runs the coroutine on the bridge's loop
and waits for it with a timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import ssl
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Awaitable, Callable, TypeVar

import nats
import nats.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from ..config import Settings
from ..redaction import scrub, without_userinfo
from ..scopes import DEFAULT_SOURCE
from ..times import format_time, utcnow
from . import headers
from .client_log import ConnectionLog, describe_error
from .streams import NO_JETSTREAM, jetstream_missing

log = logging.getLogger(__name__)
T = TypeVar("T")

# How often a thread waiting in call() looks whether the probe has given up on the server.
CALL_SLICE = 0.05
# What a call is told once the bridge stops (the dashboard is shutting down).
STOPPING = "the dashboard is stopping; NATS is no longer reachable from it"
#: How a connection to a server that has stopped answering (frozen, its host gone without a word)
#: is given up for another server of NATS_URL: nats-py pings every PING_INTERVAL seconds and
#: reconnects once more than MAX_OUTSTANDING_PINGS are unanswered, about 12 s. Its defaults
#: (120 s, 2) kept the mirror, jobs and republishes on a frozen node of a cluster for 4-5 minutes
#: while the other nodes answered.
PING_INTERVAL, MAX_OUTSTANDING_PINGS = 4, 2


def stale_after_options() -> dict[str, Any]:
    """nats.connect() options that give a server that stopped answering up within seconds."""
    return {"ping_interval": PING_INTERVAL, "max_outstanding_pings": MAX_OUTSTANDING_PINGS}


class NatsUnavailable(RuntimeError):
    """NATS cannot be reached now; the message says so in a sentence."""


@dataclass
class ConnectionState:
    """What /healthz and the pages say about the connection. ``connected`` means usable: connected
    and answering the probe's pings; ``unreachable_since`` is when that stopped (None while usable).
    ``url`` is the server connected to, and while none is the servers configured (an admin reads
    which server is away); it and ``last_error`` never carry a user or password
    (Bridge._set_state scrubs them)."""

    connected: bool = False
    url: str | None = None
    last_error: str | None = None
    unreachable_since: datetime | None = None
    rtt_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"connected": self.connected, "url": self.url, "last_error": self.last_error,
                "unreachable_since": format_time(self.unreachable_since),
                "rtt_ms": None if self.rtt_ms is None else round(self.rtt_ms, 1)}

    def reason(self) -> str:
        """Why NATS cannot be used now, as a sentence (for a refusal)."""
        return f"NATS is not reachable ({self.last_error or 'connecting'})"


def _reason(exc: BaseException) -> str:
    """An exception's own words, or its type's name where it has none (asyncio's TimeoutError)."""
    return str(exc).strip() or type(exc).__name__


def auth_options(settings: Settings) -> dict[str, Any]:
    """nats.connect() options for the configured credentials, token, user and TLS CA."""
    options: dict[str, Any] = {}
    if settings.nats_creds:
        options["user_credentials"] = settings.nats_creds
    if settings.nats_user:
        options["user"], options["password"] = settings.nats_user, settings.nats_password
    if settings.nats_token:
        options["token"] = settings.nats_token
    if settings.nats_tls_ca:
        options["tls"] = ssl.create_default_context(cafile=settings.nats_tls_ca)
    return options


class Bridge:
    """Owns the event loop thread and the NATS connection; reconnects forever."""

    def __init__(self, settings: Settings, servers: list[str], source: str = DEFAULT_SOURCE, purpose: str = ""):
        self.settings = settings
        self.servers = servers
        self.source = source  # the source (SPEC section 12) this connection serves
        # The servers as every text names them: NATS_URL may carry user:password@.
        self.shown_servers = ", ".join(without_userinfo(s) for s in servers)
        self.state = ConnectionState(url=self.shown_servers)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.nc: NATS | None = None
        self.js: JetStreamContext | None = None
        self._thread: threading.Thread | None = None
        self._connected = threading.Event()
        self._stopping = False
        self._tasks: set[asyncio.Task] = set()
        self._on_connect: list[Callable[[], Awaitable[None]]] = []
        # Raised at every (re)connection: a ping sent on an earlier connection is never answered.
        self._generation = 0
        # nats-py reports each failed reconnect attempt: logged once until the error changes.
        # How its log lines start: "NATS", or "NATS of source billing" beside other sources; with a
        # ``purpose``, "NATS (mirror)": the mirror's process has connections of its own.
        self.label = "NATS" if source == DEFAULT_SOURCE else f"NATS of source {source}"
        if purpose:
            self.label += f" ({purpose})"
        self._errors = ConnectionLog(log, self.label)
        # What nats-py reported during the current first-connection attempt (its error_cb).
        self._attempt_error: Exception | None = None
        # Whether the log has said the streams cannot be set up for JetStream missing (said once).
        self._told_no_jetstream = False

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> "Bridge":
        """Start the loop thread and begin connecting (returns at once)."""
        ready = threading.Event()

        def run():
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            ready.set()
            try:
                self.loop.run_forever()
            finally:
                close_loop(self.loop)

        self._thread = threading.Thread(target=run, daemon=True, name="nats-bridge" if self.source == DEFAULT_SOURCE
                                        else f"nats-bridge-{self.source}")
        self._thread.start()
        ready.wait()
        self.state = ConnectionState(url=self.shown_servers, unreachable_since=utcnow())
        self.spawn(self._connect_forever())
        self.spawn(self._probe_forever())
        return self

    def wait_connected(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the first connection."""
        return self._connected.wait(timeout)

    def spawn(self, coro: Awaitable[Any]) -> concurrent.futures.Future:
        """Run a long-lived coroutine (a mirror loop) on the bridge; cancelled at stop."""
        async def tracked():
            task = asyncio.current_task()
            self._tasks.add(task)
            try:
                return await coro
            finally:
                self._tasks.discard(task)

        return asyncio.run_coroutine_threadsafe(tracked(), self.loop)

    def call(self, make: Callable[[], Awaitable[T]], timeout: float | None = None) -> T:
        """Run a coroutine on the bridge from another thread and return its result.

        Raises NatsUnavailable at once when NATS is not usable, when the call times out, and as
        soon as the probe declares the server unreachable while the call waits (what the call
        sent may still arrive: for a publish the outcome is unknown), and once the bridge stops.
        """
        if self._stopping:
            raise NatsUnavailable(STOPPING)
        if not self.state.connected:
            raise NatsUnavailable(self.state.reason())
        timeout = self.settings.request_timeout if timeout is None else timeout
        try:
            future = asyncio.run_coroutine_threadsafe(_awaiting(make), self.loop)
        except RuntimeError:  # the loop closed since the look above
            raise NatsUnavailable(STOPPING) from None
        deadline = time.monotonic() + timeout
        while True:
            try:
                return future.result(max(min(CALL_SLICE, deadline - time.monotonic()), 0))
            except concurrent.futures.CancelledError:  # stop() cancels what runs on the bridge
                raise NatsUnavailable(STOPPING if self._stopping else "the NATS call was cancelled") from None
            except concurrent.futures.TimeoutError:
                if future.done():  # the coroutine's own timeout (TimeoutError) ended it
                    raise NatsUnavailable(f"NATS did not answer within {timeout:g} s") from None
            if not self.state.connected:
                future.cancel()
                raise NatsUnavailable(f"{self.state.reason()}; stopped waiting for its answer") from None
            if time.monotonic() >= deadline:
                future.cancel()
                raise NatsUnavailable(f"NATS did not answer within {timeout:g} s") from None

    def on_connect(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Run ``callback`` on the bridge after every (re)connection, e.g. to ensure streams."""
        self._on_connect.append(callback)

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the bridge's tasks, drain the connection and stop the thread."""
        if self.loop is None or self._thread is None:
            return
        self._stopping = True

        async def shutdown() -> set[asyncio.Task]:
            # Each step is bounded, so the stop ends even when a task does not end at its cancel.
            await cancel_and_wait(list(self._tasks), 5)
            if self.nc is not None and not self.nc.is_closed:
                closing = asyncio.ensure_future(self.nc.close())
                done, _ = await asyncio.wait({closing}, timeout=3)
                if closing in done and closing.exception() is not None:  # the server may be gone already
                    log.debug("closing the NATS connection failed: %r", closing.exception())
            # Whatever the client left behind (subscription readers) ends with the loop.
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            return await cancel_and_wait(others, 1)

        try:
            left = asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout)
        except Exception as exc:  # noqa: BLE001 - the loop is stopped and closed below all the same
            log.warning("the NATS bridge did not stop cleanly (%s)", describe_error(exc))
        else:
            if left:
                log.warning("the NATS bridge stopped with %d task(s) still running after their cancel: %s", len(left),
                            ", ".join(sorted(_task_name(t) for t in left)))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        self._thread = None

    # --- connecting -------------------------------------------------------------------------

    def _connect_options(self) -> dict[str, Any]:
        options: dict[str, Any] = dict(
            servers=self.servers, name="dlq-dashboard", allow_reconnect=True,
            max_reconnect_attempts=-1, reconnect_time_wait=1, connect_timeout=2,
            disconnected_cb=self._disconnected, reconnected_cb=self._reconnected,
            error_cb=self._error, closed_cb=self._closed, **stale_after_options(),
        )
        options.update(auth_options(self.settings))
        return options

    async def _connect_forever(self) -> None:
        # nats-py's first connect to a dead server retries max_reconnect_attempts times before
        # it gives up (forever with -1), so each attempt is bounded here and retried with backoff.
        delay = 0.5
        while not self._stopping:
            self._attempt_error = None
            try:
                self.nc = await asyncio.wait_for(headers.connect(**self._connect_options()),
                                                 self.settings.connect_timeout)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: report it and try again
                self._set_state(False, self._connect_error(exc))
                log.warning("%s: %s; retrying in %.1f s", self.label, self.state.last_error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30)
        self.js = self.nc.jetstream()
        self._set_state(True, None)
        await self._run_on_connect()

    def _connect_error(self, exc: Exception) -> str:
        """Why a first connection failed. An attempt that ran out of time says nothing of its own
        (asyncio's TimeoutError has no text): the error nats-py reported during it (a refused
        connection, a TLS or auth failure, kept by ``_error``) says why, else the time it had."""
        if isinstance(exc, asyncio.TimeoutError):
            exc = self._attempt_error or exc
        if isinstance(exc, asyncio.TimeoutError):
            return f"cannot connect to {self.shown_servers}: no answer within {self.settings.connect_timeout:g} s"
        return f"cannot connect to {self.shown_servers}: {_reason(exc)}"

    async def _run_on_connect(self) -> None:
        for callback in self._on_connect:
            try:
                await callback()
            except (asyncio.TimeoutError, nats.errors.Error) as exc:
                if jetstream_missing(exc):
                    # Lasting, mended by the server's configuration: said once, not at each
                    # reconnection while it lasts (the streams' stuck lines say it too).
                    if not self._told_no_jetstream:
                        log.warning("%s: after connecting, setting up the streams failed: %s", self.label,
                                    NO_JETSTREAM)
                    self._told_no_jetstream = True
                    continue
                # Typical while a cluster elects a stream leader: the next connection, or the
                # mirror finding a stream missing, runs it again.
                log.warning("after connecting, setting up the streams failed for now: %s: %s",
                            type(exc).__name__, scrub(str(exc)))
            except Exception:
                log.exception("a NATS connect callback failed")
            else:
                self._told_no_jetstream = False

    def _set_state(self, connected: bool, error: str | None) -> None:
        # Replaced whole, never changed in place: a Flask thread reads one consistent state.
        # Redacted here, where the state is recorded, so no reader of it (health, the banner, a
        # refusal, a log line) can show the credentials of NATS_URL or quote them from an error.
        previous = self.state
        url = self.nc.connected_url.geturl() if connected and self.nc and self.nc.connected_url else None
        self.state = ConnectionState(
            connected=connected,
            url=without_userinfo(str(url)) if url else self.shown_servers,
            last_error=scrub(error),
            unreachable_since=None if connected else (previous.unreachable_since or utcnow()),
            rtt_ms=previous.rtt_ms if connected else None)
        if connected:
            self._connected.set()
        else:
            self._connected.clear()

    async def _disconnected(self) -> None:
        if self._stopping:
            return
        self._set_state(False, "disconnected from NATS; reconnecting")
        log.warning("%s: disconnected; reconnecting", self.label)

    async def _reconnected(self) -> None:
        self._generation += 1
        self._errors.reset()
        self._set_state(True, None)
        log.info("%s: reconnected to %s", self.label, self.state.url)
        await self._run_on_connect()

    async def _error(self, exc: Exception) -> None:
        self._attempt_error = exc
        if self._stopping or self._errors.seen(exc):
            log.debug("NATS client error: %s", scrub(repr(exc)))
        else:
            log.warning("%s: %s", self.label, scrub(describe_error(exc)))
        if self.state.connected is False:
            self.state = replace(self.state,
                                 last_error=scrub(f"cannot connect to {self.shown_servers}: {_reason(exc)}"))

    async def _closed(self) -> None:
        if not self._stopping:
            self._set_state(False, "the NATS connection was closed")

    # --- liveness ---------------------------------------------------------------------------

    async def _probe_forever(self) -> None:
        """Ping the server every probe_interval; unanswered for nats_answer_limit seconds, it is
        declared unreachable, and usable again when the answer comes.

        The ping's future is never cancelled: nats-py answers pongs in order with
        ``future.set_result``, and a cancelled future there (what ``nc.flush(timeout)`` leaves
        after a timeout) raises InvalidStateError in its read loop, which then stops reading.
        """
        loop = asyncio.get_running_loop()
        interval, limit = self.settings.probe_interval, self.settings.nats_answer_limit
        ping: asyncio.Future | None = None
        sent, generation = 0.0, -1
        while not self._stopping:
            nc = self.nc
            if nc is None or not nc.is_connected:
                ping = None  # nats-py reports the outage itself and reconnects
                await asyncio.sleep(interval)
                continue
            if ping is None or generation != self._generation:
                ping, sent, generation = loop.create_future(), loop.time(), self._generation
                try:
                    await nc._send_ping(ping)
                except Exception as exc:  # the connection just went: nats-py reconnects
                    log.debug("the liveness ping could not be sent: %r", exc)
                    ping = None
                    await asyncio.sleep(interval)
                    continue
            waited = loop.time() - sent
            await asyncio.wait({ping}, timeout=max(min(interval, limit - waited), 0.01))
            waited = loop.time() - sent
            if ping.done():
                self._answered(waited)
                ping = None
                await asyncio.sleep(max(interval - waited, 0))
            elif waited >= limit:
                self._unanswered(waited)

    def _answered(self, rtt: float) -> None:
        if self.state.connected:
            self.state = replace(self.state, rtt_ms=rtt * 1000)
        elif self.nc is not None and self.nc.is_connected and self.js is not None:
            self._set_state(True, None)
            self.state = replace(self.state, rtt_ms=rtt * 1000)
            log.warning("%s: answering again at %s", self.label, self.state.url)

    def _unanswered(self, waited: float) -> None:
        if self.state.connected:
            self._set_state(False, f"no answer from NATS at {self.state.url} for {waited:.1f} s")
            log.warning("%s: %s; it is treated as unreachable until it answers", self.label, self.state.last_error)


def close_loop(loop: asyncio.AbstractEventLoop, timeout: float = 5.0) -> None:
    """Cancel and await the tasks still on a stopped ``loop``, end its async generators and
    executor threads, and close it, as ``asyncio.run`` does. A task left pending when its loop
    closes is logged as "Task was destroyed but it is pending" and its coroutine raises
    RuntimeError when it is collected (nats-py leaves subscription readers behind)."""
    try:
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        if pending:
            loop.run_until_complete(cancel_and_wait(pending, timeout))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


def on_loop(future: concurrent.futures.Future, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
    """``future``, settled by another thread, as a future of ``loop``: ``asyncio.wrap_future``,
    except that an outcome arriving while the loop closes is dropped. asyncio looks whether the
    loop is closed and then hands the outcome over; a loop closed between the two (a stop while a
    thread or process answers) raises RuntimeError in the settling thread, which
    concurrent.futures logs with its traceback. Cancelling the result cancels ``future``."""
    waiter = loop.create_future()

    def cancel_source(waited: asyncio.Future) -> None:
        if waited.cancelled():
            future.cancel()

    def hand_over(settled: concurrent.futures.Future) -> None:
        try:
            loop.call_soon_threadsafe(_copy_outcome, settled, waiter)
        except RuntimeError:  # the loop has closed: nothing waits for the outcome any more
            pass

    waiter.add_done_callback(cancel_source)
    future.add_done_callback(hand_over)
    return waiter


def _copy_outcome(settled: concurrent.futures.Future, waiter: asyncio.Future) -> None:
    if waiter.done():
        return
    if settled.cancelled():
        waiter.cancel()
    elif settled.exception() is not None:
        waiter.set_exception(settled.exception())
    else:
        waiter.set_result(settled.result())


async def cancel_and_wait(tasks, timeout: float) -> set[asyncio.Task]:
    """Cancel ``tasks`` once and wait up to ``timeout`` seconds for them to end; returns those
    still running. Once: a task may finish what it must after its cancel (the mirror lets its
    writes in flight commit), and a second cancel would cut that short."""
    pending = {task for task in tasks if not task.done()}
    for task in pending:
        task.cancel()
    if not pending:
        return set()
    _, still = await asyncio.wait(pending, timeout=timeout)
    return still


def _task_name(task: asyncio.Task) -> str:
    coro = task.get_coro()
    return f"{task.get_name()} ({getattr(coro, '__qualname__', coro)})"


async def _awaiting(make: Callable[[], Awaitable[T]]) -> T:
    return await make()
