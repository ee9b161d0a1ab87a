"""Reading a stream's backlog by batched direct gets, without nats-py's per-message objects.

An ordered consumer delivers each message through nats-py's protocol parser, a ``Msg``, the
subscription's queue and a task switch, and the ordered consumer's bookkeeping: about 30-40 µs of
the receiving process a message, most of what the mirror's receive cost (docs/PERFORMANCE.md).
A batched direct get (``$JS.API.DIRECT.GET.<stream>`` with ``batch``, nats-server 2.11+, ADR-31)
asks for up to a batch of messages from a sequence on, and the server answers each as a message
to the request's inbox, then a ``204 EOB`` status with the count still pending. Those answers are
read here straight from the parser's frames (nats/headers.py ``Client.raw_subscribe``): about
8 µs a message before the headers are read.

Each answer carries the stored header block followed by the server's own lines (``Nats-Stream``,
``Nats-Subject``, ``Nats-Sequence``, ``Nats-Time-Stamp``, ``Nats-Num-Pending``,
``Nats-Last-Sequence``, in that order and always last). They are cut off, so the headers read are
the ones a live delivery of the message has. The stream must allow direct gets (``allow_direct``);
the mirror uses this reader only to catch up on a backlog and follows the live stream with its
ordered consumer.
"""

from __future__ import annotations

import asyncio
import itertools
from calendar import timegm
from dataclasses import dataclass
from datetime import datetime

import orjson
from nats.aio.msg import _V1_TOKEN_COUNT, Msg
from nats.errors import TimeoutError as NatsTimeoutError

from ..nats.headers import parse_header_lines

DIRECT_GET = "$JS.API.DIRECT.GET."
MIN_SERVER = (2, 11)  # the first nats-server with batched direct gets

_HEADER_LINE = b"NATS/1.0\r\n"
_SERVER_LINES = b"\r\nNats-Stream: "  # where the server's own lines start (the last occurrence)
_counter = itertools.count(1)


class DirectUnavailable(RuntimeError):
    """The stream answers no direct get (allow_direct is off, or the server is older)."""


@dataclass(frozen=True, slots=True)
class Received:
    """A message read by a direct get: what the mirror keeps of it (an ``Msg``'s fields)."""

    subject: str
    headers: dict[str, str] | None
    data: bytes


def supports_batches(server_version: str | None) -> bool:
    """True when a nats-server of ``server_version`` (e.g. "2.15.1") answers batched direct gets."""
    try:
        major, minor = (int(part) for part in (server_version or "").split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= MIN_SERVER


EPOCH = datetime(1970, 1, 1)  # what a stored time in ns counts from (naive UTC, as entries keep times)


def consumer_position(reply: str) -> tuple[int, int]:
    """(stream sequence, stored time in ns) of a message an ordered consumer delivered, read from
    its reply subject as nats-py's ``Msg.metadata`` reads them, without the metadata object and
    its aware datetime (13% of the receiving thread's time, measured)."""
    tokens = Msg.Metadata._get_metadata_fields(reply)
    if len(tokens) == _V1_TOKEN_COUNT:
        return int(tokens[5]), int(tokens[7])
    return int(tokens[Msg.Ack.StreamSeq]), int(tokens[Msg.Ack.Timestamp])


_seconds: dict[bytes, int] = {}


def stored_ns(stamp: bytes) -> int:
    """A ``Nats-Time-Stamp`` (RFC 3339 in UTC with up to nine fraction digits, e.g.
    ``2026-12-01T22:52:46.214612305Z``) as nanoseconds since the epoch, as an ordered consumer's
    reply subject gives it. The whole seconds of a backlog repeat: each is converted once."""
    if stamp[-1:] != b"Z" or len(stamp) < 20:
        return _other_ns(stamp)
    whole, dot, fraction = stamp[:-1].partition(b".")
    seconds = _seconds.get(whole)
    if seconds is None:
        try:
            seconds = timegm(datetime.strptime(whole.decode(), "%Y-%m-%dT%H:%M:%S").timetuple())
        except ValueError:
            return _other_ns(stamp)
        if len(_seconds) > 4096:
            _seconds.clear()
        _seconds[whole] = seconds
    if not dot:
        return seconds * 1_000_000_000
    if not fraction.isdigit() or len(fraction) > 9:
        return _other_ns(stamp)
    return seconds * 1_000_000_000 + int(fraction.ljust(9, b"0"))


def _other_ns(stamp: bytes) -> int:
    # Another offset than Z, or a form not seen from nats-server: the general parser (microseconds).
    text = stamp.decode(errors="replace")
    whole, dot, fraction = text.partition(".")
    if dot:
        digits = "".join(itertools.takewhile(str.isdigit, fraction))
        text = f"{whole}.{digits[:6].ljust(6, '0')}{fraction[len(digits):]}"
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


class DirectReader:
    """Reads batches of one stream by direct get on a client of nats/headers.py."""

    def __init__(self, nc, stream: str, timeout: float):
        self.nc = nc
        self.stream = stream
        self.timeout = timeout
        self._prefix = f"{nc.new_inbox()}."
        self._sub = None
        self._reply: bytes | None = None  # the inbox of the request being answered
        self._batch: list = []
        self._size = 0
        self._done: asyncio.Future | None = None

    async def start(self) -> None:
        self._sub = await self.nc.raw_subscribe(f"{self._prefix}*", self._frame)

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception:
                pass

    async def read(self, start: int, count: int, max_bytes: int) -> tuple[list, int]:
        """Up to ``count`` messages (and about ``max_bytes`` of payload) from sequence ``start``
        on, each as (sequence, stored time in ns, Received), and how many the stream holds after
        them (0: the batch reached its end). Raises DirectUnavailable, or nats' TimeoutError when
        the server does not answer in time."""
        if self._sub is None:
            await self.start()
        reply = f"{self._prefix}{next(_counter)}"
        self._reply, self._batch, self._size = reply.encode(), [], 0
        self._done = asyncio.get_running_loop().create_future()
        request = {"seq": start, "batch": count, "max_bytes": max_bytes}
        await self.nc.publish(DIRECT_GET + self.stream, orjson.dumps(request), reply=reply)
        try:
            # asyncio.timeout, not wait_for: before Python 3.12 wait_for may drop a cancel that
            # comes as the answer does (the reader then went on as if not cancelled).
            async with asyncio.timeout(self.timeout):
                pending = await asyncio.shield(self._done)
        except TimeoutError:
            raise NatsTimeoutError from None
        finally:
            self._reply = None
        return self._batch, pending

    def _frame(self, subject: bytes, block: bytes, data: bytes) -> None:
        if subject != self._reply or self._done is None or self._done.done():
            return  # an answer to a request given up
        if block.startswith(_HEADER_LINE):
            at = block.rfind(_SERVER_LINES)
            if at < 0:
                self._done.set_exception(DirectUnavailable(f"a direct get of {self.stream} answered without its "
                                                           "stream's headers"))
                return
            # The server's lines, in the order it writes them: stream, subject, sequence, time.
            _, subject_line, seq_line, time_line, _ = block[at + 2:].split(b"\r\n", 4)
            if not (subject_line.startswith(b"Nats-Subject: ") and seq_line.startswith(b"Nats-Sequence: ")
                    and time_line.startswith(b"Nats-Time-Stamp: ")):
                fields = dict(line.split(b": ", 1) for line in block[at + 2:].split(b"\r\n") if b": " in line)
                subject_line, seq_line, time_line = (b"Nats-Subject: " + fields[b"Nats-Subject"],
                                                     b"Nats-Sequence: " + fields[b"Nats-Sequence"],
                                                     b"Nats-Time-Stamp: " + fields[b"Nats-Time-Stamp"])
            ours = block[len(_HEADER_LINE):at + 2]
            headers = (parse_header_lines(ours + b"\r\n") or None) if ours else None
            self._batch.append((int(seq_line[15:]), stored_ns(time_line[17:]),
                                Received(subject_line[14:].decode(errors="replace"), headers, data)))
            return
        status = block[len(_HEADER_LINE) - 1:].split(b"\r\n", 1)
        code = status[0][:4].strip()
        if code == b"204":  # the end of the batch: how many are left after it
            pending = next((line.split(b": ", 1)[1] for line in status[1].split(b"\r\n")
                            if line.startswith(b"Nats-Num-Pending: ")), b"0")
            self._done.set_result(int(pending))
        elif code == b"404":  # nothing at or after the sequence asked for
            self._done.set_result(0)
        else:
            self._done.set_exception(DirectUnavailable(
                f"a direct get of {self.stream} was refused ({status[0].decode(errors='replace').strip()})"))
