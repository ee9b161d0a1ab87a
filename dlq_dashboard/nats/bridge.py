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
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

import nats
import nats.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from ..config import Settings
from . import headers

log = logging.getLogger(__name__)
T = TypeVar("T")


class NatsUnavailable(RuntimeError):
    """NATS cannot be reached now; the message says so in a sentence."""


@dataclass
class ConnectionState:
    """What /healthz and the pages say about the connection."""

    connected: bool = False
    url: str | None = None
    last_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"connected": self.connected, "url": self.url, "last_error": self.last_error}


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

    def __init__(self, settings: Settings, servers: list[str]):
        self.settings = settings
        self.servers = servers
        self.state = ConnectionState()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.nc: NATS | None = None
        self.js: JetStreamContext | None = None
        self._thread: threading.Thread | None = None
        self._connected = threading.Event()
        self._stopping = False
        self._tasks: set[asyncio.Task] = set()
        self._on_connect: list[Callable[[], Awaitable[None]]] = []

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> "Bridge":
        """Start the loop thread and begin connecting (returns at once)."""
        ready = threading.Event()

        def run():
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            ready.set()
            self.loop.run_forever()
            self.loop.close()

        self._thread = threading.Thread(target=run, name="nats-bridge", daemon=True)
        self._thread.start()
        ready.wait()
        self.spawn(self._connect_forever())
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

        Raises NatsUnavailable when not connected or when the call times out.
        """
        if not self.state.connected:
            raise NatsUnavailable(f"NATS is not reachable ({self.state.last_error or 'connecting'})")
        timeout = self.settings.request_timeout if timeout is None else timeout
        future = asyncio.run_coroutine_threadsafe(_awaiting(make), self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
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

        async def shutdown():
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self.nc is not None and not self.nc.is_closed:
                try:
                    await asyncio.wait_for(self.nc.close(), 5)
                except Exception:  # the server may be gone already
                    log.debug("closing the NATS connection failed", exc_info=True)
            # Whatever the client left behind (subscription readers) ends with the loop.
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout)
        except Exception:
            log.warning("the NATS bridge did not stop cleanly", exc_info=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        self._thread = None

    # --- connecting -------------------------------------------------------------------------

    def _connect_options(self) -> dict[str, Any]:
        options: dict[str, Any] = dict(
            servers=self.servers, name="dlq-dashboard", allow_reconnect=True,
            max_reconnect_attempts=-1, reconnect_time_wait=1, connect_timeout=2,
            disconnected_cb=self._disconnected, reconnected_cb=self._reconnected,
            error_cb=self._error, closed_cb=self._closed,
        )
        options.update(auth_options(self.settings))
        return options

    async def _connect_forever(self) -> None:
        # nats-py's first connect to a dead server retries max_reconnect_attempts times before
        # it gives up (forever with -1), so each attempt is bounded here and retried with backoff.
        delay = 0.5
        while not self._stopping:
            try:
                self.nc = await asyncio.wait_for(headers.connect(**self._connect_options()),
                                                 self.settings.connect_timeout)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: report it and try again
                self._set_state(False, f"cannot connect to {', '.join(self.servers)}: {exc or type(exc).__name__}")
                log.warning("NATS: %s; retrying in %.1f s", self.state.last_error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30)
        self.js = self.nc.jetstream()
        self._set_state(True, None)
        await self._run_on_connect()

    async def _run_on_connect(self) -> None:
        for callback in self._on_connect:
            try:
                await callback()
            except (asyncio.TimeoutError, nats.errors.Error) as exc:
                # Typical while a cluster elects a stream leader: the next connection, or the
                # mirror finding a stream missing, runs it again.
                log.warning("after connecting, setting up the streams failed for now: %s: %s",
                            type(exc).__name__, exc)
            except Exception:
                log.exception("a NATS connect callback failed")

    def _set_state(self, connected: bool, error: str | None) -> None:
        self.state = ConnectionState(
            connected=connected,
            url=str(self.nc.connected_url.geturl()) if connected and self.nc and self.nc.connected_url else None,
            last_error=error)
        if connected:
            self._connected.set()
        else:
            self._connected.clear()

    async def _disconnected(self) -> None:
        if self._stopping:
            return
        self._set_state(False, "disconnected from NATS; reconnecting")
        log.warning("NATS: disconnected; reconnecting")

    async def _reconnected(self) -> None:
        self._set_state(True, None)
        log.info("NATS: reconnected to %s", self.state.url)
        await self._run_on_connect()

    async def _error(self, exc: Exception) -> None:
        log.debug("NATS client error: %r", exc)
        if self.state.connected is False:
            self.state.last_error = f"cannot connect to {', '.join(self.servers)}: {exc or type(exc).__name__}"

    async def _closed(self) -> None:
        if not self._stopping:
            self._set_state(False, "the NATS connection was closed")


async def _awaiting(make: Callable[[], Awaitable[T]]) -> T:
    return await make()
