"""The streams the dashboard creates: the DLQ stream it mirrors and the stream that captures
JetStream's consumer advisories (SPEC section 5)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import weakref
from dataclasses import dataclass
from datetime import datetime

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamInfo
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from ..config import Settings
from ..times import parse_time
from .headers import parse_header_block

log = logging.getLogger(__name__)

ADVISORY_PREFIX = "$JS.EVENT.ADVISORY.CONSUMER."
ADVISORY_KINDS = ("MAX_DELIVERIES", "MSG_TERMINATED", "MSG_NAKED")
ADVISORY_MAX_AGE = 30 * 24 * 3600


def advisory_subjects() -> list[str]:
    """The advisory subjects the capture stream listens to."""
    return [f"{ADVISORY_PREFIX}{kind}.>" for kind in ADVISORY_KINDS]


def stream_epoch(info: StreamInfo) -> str:
    """A stream's creation time: sequences restart at 1 when a stream is recreated, so
    (stream, epoch, seq) names a message where (stream, seq) does not."""
    return info.created.isoformat() if info.created else "unknown"


# JetStream's error codes: no such stream; no such message (MSG.GET's answer).
STREAM_NOT_FOUND, NO_MESSAGE_FOUND = 10059, 10037


async def delete_message(nc: Client, js: JetStreamContext, stream: str, seq: int, timeout: float) -> bool:
    """Delete one message of a stream: True if deleted, False if it (or its stream) was already
    gone; raises NotDeleted with JetStream's description for any other refusal."""
    # nats-py's delete_msg asks for a secure erase (the bytes overwritten on disk): about 100
    # deletes a second here, against 4,000 with no_erase (measured). A dead letter is removed as
    # the database's own DELETE removes a row, without overwriting the space it held.
    prefix = getattr(js, "_prefix", None) or "$JS.API"  # nats-py keeps the API prefix (domain) private
    answer = await _api(nc, f"{prefix}.STREAM.MSG.DELETE.{stream}", {"seq": seq, "no_erase": True}, timeout)
    if answer.get("success"):
        return True
    error = answer.get("error") or {}
    if error.get("err_code") == STREAM_NOT_FOUND:
        return False
    # A refused delete has one code (10057) whatever the cause - "no message found", "stream store
    # EOF", "message delete not permitted" - so ask whether the message is still there.
    probe = await _api(nc, f"{prefix}.STREAM.MSG.GET.{stream}", {"seq": seq}, timeout)
    if (probe.get("error") or {}).get("err_code") in (NO_MESSAGE_FOUND, STREAM_NOT_FOUND):
        return False
    raise NotDeleted(error.get("description") or f"JetStream did not delete {stream} #{seq}")


#: What the banner, /sources, /api/sources and /healthz say of a source whose NATS answers
#: without JetStream for its account.
NO_JETSTREAM = ("JetStream is not enabled for this source's account (a server started without -js, "
                "or an account without jetstream: enabled)")
#: JetStream's codes for "JetStream not enabled for account" and "JetStream not enabled".
JETSTREAM_NOT_ENABLED = (10039, 10076)


def jetstream_missing(exc: BaseException) -> bool:
    """Whether ``exc`` is a server that answers without JetStream for the account: its API says
    so (err_code 10039 or 10076), or nothing listens on it (nats-py's ServiceUnavailableError
    without a code: no responders to a JetStream API request, a server started without -js).
    A lasting state, mended by the server's configuration, not by waiting."""
    if not isinstance(exc, ServiceUnavailableError):
        return False
    if exc.err_code in JETSTREAM_NOT_ENABLED:
        return True
    return exc.code is None and exc.err_code is None and not exc.description


@dataclass(frozen=True)
class StoredMessage:
    """A message of a stream read back by its sequence."""

    subject: str
    seq: int
    headers: dict[str, str] | None
    data: bytes
    stored_at: datetime | None = None  # when the stream stored it (naive UTC)


async def read_message(nc: Client, js: JetStreamContext, stream: str, seq: int, timeout: float) -> StoredMessage:
    """The message a stream stores at ``seq``, its header values byte for byte as a live delivery
    reads them; raises nats-py's errors as ``js.get_msg`` does (NotFoundError with err_code
    10037 for a missing message, 10059 for a missing stream; NoRespondersError, TimeoutError)."""
    # Not js.get_msg: it reads the header block with email.parser, which garbles every value
    # that is not ASCII (nats/headers.py).
    prefix = getattr(js, "_prefix", None) or "$JS.API"
    answer = await _api(nc, f"{prefix}.STREAM.MSG.GET.{stream}", {"seq": seq}, timeout)
    if "error" in answer:
        APIError.from_error(answer["error"])  # raises the error's class
    message = answer["message"]
    block = base64.b64decode(message["hdrs"]) if message.get("hdrs") else b""
    data = base64.b64decode(message["data"]) if message.get("data") else b""
    return StoredMessage(subject=message["subject"], seq=int(message.get("seq") or seq),
                         headers=parse_header_block(block), data=data, stored_at=parse_time(message.get("time")))


async def _api(nc: Client, subject: str, request: dict, timeout: float) -> dict:
    reply = await nc.request(subject, json.dumps(request).encode(), timeout=timeout)
    return json.loads(reply.data)


class NotDeleted(Exception):
    """JetStream refused to delete a message for a reason other than its being gone."""


class StreamSetup:
    """Creates the DLQ stream and the advisory capture stream when they are missing.

    Run after every (re)connection and whenever the mirror finds a stream gone. Several tasks
    may ensure at once and the server does not say which created a stream, so each creation
    (stream and creation time) is announced once per runtime.
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self._announced: set[tuple[str, str]] = set()
        # One ensure at a time per event loop. On a cluster a lookup sent while another task's
        # creation of that stream is in flight goes unanswered (its RAFT group has no leader
        # yet) and times out after 5 s; on one server the race was harmless.
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary())

    async def ensure(self, js: JetStreamContext) -> None:
        """Create the streams that are missing; leave existing ones as they are."""
        settings = self.settings
        lock = self._locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            await self._ensure(js, settings.dlq_stream, list(settings.dlq_subjects), "the DLQ stream")
            if settings.capture_advisories:
                # The server emits an advisory only if someone listens at that moment.
                await self._ensure(js, settings.advisory_stream, advisory_subjects(),
                                   "the advisory capture stream", max_age=ADVISORY_MAX_AGE)

    async def _ensure(self, js: JetStreamContext, name: str, subjects: list[str], what: str, **config) -> None:
        replicas = self.settings.stream_replicas
        try:
            info = await js.stream_info(name)
        except NotFoundError:
            pass
        else:
            existing = info.config.num_replicas or 1
            if existing != replicas and (name, "replicas") not in self._announced:
                # An existing stream is never changed here: raising its replicas moves data
                # between servers, a step for an operator to take deliberately.
                self._announced.add((name, "replicas"))
                log.warning("%s %s has %d replica(s), DLQ_REPLICAS is %d: it is left as it is "
                            "(nats stream edit %s --replicas %d changes it)",
                            what, name, existing, replicas, name, replicas)
            return
        # allow_direct: the mirror reads a backlog by batched direct gets (ingest/direct.py).
        info = await js.add_stream(name=name, subjects=subjects, storage=StorageType.FILE,
                                   retention=RetentionPolicy.LIMITS, num_replicas=replicas, allow_direct=True,
                                   **config)
        key = (name, stream_epoch(info))
        if key not in self._announced:
            self._announced.add(key)
            log.info("created %s %s (%s)", what, name, ", ".join(subjects))
