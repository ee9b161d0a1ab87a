"""Publishing a big job's windows from a process of its own, with its own NATS connection.

nats-py spends about as much interpreter time on a publish as the job spends recording it, and
in one process the two share one interpreter lock: the job's statements wait for the bridge's
loop and the loop waits for them. A child process publishes the windows instead (the same
``publish_async`` with the intents' own msgIds), and the job's process only records. The
intents are committed before a window is sent, exactly as through the bridge; a child that dies
leaves its windows unanswered, so their intents stay pending and are completed with the same
msgIds. The child ends when its pipe closes, however the dashboard's process ends. With several
sources each source a job publishes to has a child of its own, connected to that source's NATS
(lanes.py).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import pickle
import threading
from concurrent.futures import Future
from typing import Any, Iterable, NamedTuple

from ...children import without_main
from ...config import Settings
from ...nats.bridge import NatsUnavailable, auth_options, stale_after_options
from ...nats.headers import outgoing
from ...redaction import scrub
from ..stored import find_stored_many

log = logging.getLogger(__name__)


async def publish_window(js, messages: Iterable[Any], timeout: float) -> list[Any]:
    """Publish messages (each with ``subject``, ``payload`` and ``headers``) pipelined with
    publish_async, and return each one's PubAck or exception."""
    futures: list[Any] = []
    for message in messages:
        try:
            # No wait_stall: with a timeout, asyncio.wait_for makes a task per message (a third
            # of the throughput); two windows in flight stay under the client's pending limit.
            futures.append(await js.publish_async(message.subject, message.payload, headers=outgoing(message.headers)))
        except Exception as exc:  # not sent: classified by the caller
            futures.append(exc)
    waiting = [f for f in futures if isinstance(f, asyncio.Future)]
    if waiting:
        await asyncio.wait(waiting, timeout=timeout)
    results = []
    for f in futures:
        if not isinstance(f, asyncio.Future):
            results.append(f)
        elif not f.done():
            f.cancel()
            results.append(asyncio.TimeoutError())
        else:
            results.append(f.exception() or f.result())
    return results


async def publish_searched(js, intents: list, timeout: float) -> list[Any]:
    """``publish_window`` of a window holding resumed intents (a crash left them pending; they may
    have been sent): those its stream holds already, past half its duplicate window, are answered
    by what was found (a duplicate's PubAck) and not sent again (actions/stored.py)."""
    found = await find_stored_many(js, [i for i in intents if i.resumed])
    answers = iter(await publish_window(js, [i for i in intents if i.msg_id not in found], timeout))
    return [found[i.msg_id] if i.msg_id in found else next(answers) for i in intents]


class Ack(NamedTuple):
    """A PubAck as the child answers it: one small object where nats-py's PubAck is an instance
    and its dict, for the garbage collector to walk while a window's answers wait."""

    stream: str
    seq: int
    duplicate: bool


class _Message:
    __slots__ = ("subject", "payload", "headers")

    def __init__(self, subject: str, payload: bytes, headers: dict[str, str]):
        self.subject, self.payload, self.headers = subject, payload, headers


# --- the child --------------------------------------------------------------------------------

def _serve(conn, settings: Settings, timeout: float, name: str = "dlq-dashboard-jobs") -> None:
    asyncio.run(_publish_forever(conn, settings, timeout, name))


async def _publish_forever(conn, settings: Settings, timeout: float, name: str = "dlq-dashboard-jobs") -> None:
    import nats

    async def quiet(*_args) -> None:  # the job's own process reports NATS's state
        return None

    try:
        nc = await asyncio.wait_for(nats.connect(
            servers=list(settings.nats_urls), name=name, allow_reconnect=True,
            max_reconnect_attempts=-1, reconnect_time_wait=1, connect_timeout=2, error_cb=quiet,
            disconnected_cb=quiet, reconnected_cb=quiet, **stale_after_options(), **auth_options(settings)),
            settings.connect_timeout)
    except Exception as exc:  # the job publishes through the bridge instead
        conn.send(("failed", f"{type(exc).__name__}: {scrub(str(exc))}"))
        return
    js = nc.jetstream()
    loop = asyncio.get_running_loop()
    closed = loop.create_future()
    tasks: set[asyncio.Task] = set()

    async def answer(window_id: int, messages: list[tuple]) -> None:
        results = await publish_window(js, [_Message(*m) for m in messages], timeout)
        conn.send(("answers", window_id, [(r.stream, r.seq, bool(r.duplicate)) if not isinstance(r, BaseException)
                                          else _sendable(r) for r in results]))

    def readable() -> None:
        try:
            request = conn.recv()
        except (EOFError, OSError):  # the job's process is gone: nobody reads the answers
            request = False
        if request is None or request is False:
            loop.remove_reader(conn.fileno())
            if not closed.done():
                closed.set_result(request is None)
            return
        task = loop.create_task(answer(*request))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    loop.add_reader(conn.fileno(), readable)
    conn.send(("ready",))
    try:
        if await closed:  # asked to end: answer the windows it has first
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for task in tasks:
            task.cancel()
        await nc.close()


def _sendable(exc: BaseException) -> BaseException:
    """The exception itself if it crosses the pipe (nats-py's do, with their codes), else a
    NatsUnavailable saying what it was: an exception of unknown kind is a publish in doubt."""
    try:
        pickle.dumps(exc)
        return exc
    except Exception:
        return NatsUnavailable(f"no answer from NATS ({type(exc).__name__}: {scrub(str(exc))})")


# --- the job's side ---------------------------------------------------------------------------

class Publisher:
    """A child process publishing windows; a window's future has each message's PubAck or
    exception. It starts in the background: until :attr:`ready`, publish through the bridge.
    ``settings``: whose NATS it connects to (a source's, with several); ``source``: that source's
    name (None: the one source), in the process's and the connection's name."""

    def __init__(self, settings: Settings, timeout: float, source: str | None = None):
        self.source = source
        name = without_main("dlq-dashboard-jobs" if source is None else f"dlq-dashboard-jobs-{source}")
        context = multiprocessing.get_context("spawn")  # no fork of the dashboard's threads
        self._conn, child = context.Pipe()
        self._proc = context.Process(target=_serve, args=(child, settings, timeout, name), name=name,
                                     daemon=True)
        self._proc.start()
        child.close()
        self._ready = threading.Event()
        self._gone = False
        self._lock = threading.Lock()
        self._waiting: dict[int, Future] = {}
        self._sent = 0
        self._reader = threading.Thread(target=self._read, name="job-publisher-answers", daemon=True)
        self._reader.start()

    @property
    def ready(self) -> bool:
        """True once the child is connected, until it ends."""
        return self._ready.is_set() and not self._gone

    def publish(self, messages: list[tuple[str, bytes, dict[str, str]]]) -> Future:
        """Send a window of (subject, payload, headers); NatsUnavailable if the child has ended."""
        future: Future = Future()
        with self._lock:
            if self._gone:
                raise NatsUnavailable("the job's publishing process has ended")
            self._sent += 1
            window_id = self._sent
            self._waiting[window_id] = future
        try:
            # Outside the lock: the reader must be able to take answers while this waits for
            # the child to read, or a child busy sending answers and this would wait on each other.
            self._conn.send((window_id, messages))
        except (OSError, ValueError) as exc:
            with self._lock:
                self._waiting.pop(window_id, None)
            raise NatsUnavailable(f"the job's publishing process has ended ({exc})") from None
        return future

    def _read(self) -> None:
        try:
            while True:
                message = self._conn.recv()
                if message[0] == "ready":
                    self._ready.set()
                elif message[0] == "failed":
                    log.warning("a job publishes through the bridge%s: its own connection failed (%s)",
                                "" if self.source is None else f" of source {self.source}", message[1])
                    return
                else:
                    _, window_id, answers = message
                    with self._lock:
                        future = self._waiting.pop(window_id)
                    future.set_result([Ack(*a) if isinstance(a, tuple) else a for a in answers])
        except (EOFError, OSError):
            pass
        finally:
            with self._lock:
                self._gone = True
                waiting, self._waiting = list(self._waiting.values()), {}
            for future in waiting:  # in doubt: the window may have been published
                future.set_exception(NatsUnavailable("the job's publishing process ended before NATS's answer"))

    def close(self, timeout: float = 5.0) -> None:
        """End the child after the windows it has; their answers still arrive."""
        try:
            self._conn.send(None)
        except (OSError, ValueError):
            pass
        self._reader.join(timeout)
        self._proc.join(timeout)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout)
        self._conn.close()
