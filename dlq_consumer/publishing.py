"""Publishing that survives retries: a deterministic msgId on every attempt, the DLQ copy of a
failed message, and idempotent stream setup."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Mapping, Sequence

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import PubAck, StreamConfig, StreamInfo

from . import headers as h
from .validation import SchemaViolation

log = logging.getLogger(__name__)

_RETRYABLE_PUBLISH_ERRORS: tuple[type[BaseException], ...] = (
    asyncio.TimeoutError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.js.errors.NoStreamResponseError,  # also seen while a stream's leader is being elected
    nats.js.errors.ServiceUnavailableError,
)

STREAM_NAME_IN_USE = 10058  # "stream name already in use with a different configuration"


async def publish_with_retry(
    js: JetStreamContext,
    subject: str,
    payload: bytes,
    msg_id: str,
    headers: Mapping[str, str] | None = None,
    attempts: int = 5,
    timeout: float = 2.0,
    retry_delay: float = 0.2,
) -> PubAck:
    """Publish with ``Nats-Msg-Id: msg_id`` and retry timeouts and no-responders.

    Every attempt reuses ``msg_id``: the stream's duplicate window stores the message once.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    hdrs = {k: v for k, v in (headers or {}).items() if k.lower() != h.NATS_MSG_ID.lower()}
    hdrs[h.NATS_MSG_ID] = msg_id
    for attempt in range(1, attempts + 1):
        try:
            # A publish that timed out may still have been stored (nats-py flushes its buffer
            # after a reconnect): the same msgId on the retry turns that into a duplicate ack.
            ack = await js.publish(subject, payload, timeout=timeout, headers=dict(hdrs))
        except _RETRYABLE_PUBLISH_ERRORS as exc:
            if attempt == attempts:
                raise
            delay = min(2.0, retry_delay * 2 ** (attempt - 1))
            log.info("publish %s to %s failed (%s), attempt %d/%d, retrying in %.2fs",
                     msg_id, subject, h.describe_error(exc), attempt, attempts, delay)
            await asyncio.sleep(delay)
        else:
            if ack.duplicate:
                log.info("publish %s to %s was already stored as %s:%s", msg_id, subject,
                         ack.stream, ack.seq)
            return ack
    raise AssertionError("unreachable: the last attempt returns or raises")


# --- the dead letter ---------------------------------------------------------------------------


def dead_letter_headers(
    msg: Msg,
    reason: str,
    *,
    error: str | None = None,
    schema_errors: Sequence[SchemaViolation] = (),
) -> dict[str, str]:
    """The DLQ copy's headers: the original ones minus ``Nats-*`` plus the ``Dlq-*`` contract."""
    md = msg.metadata
    original = msg.headers or {}
    headers: dict[str, str] = {}
    for name, value in original.items():
        if h.carried(name):
            headers[name] = value
    headers.update({
        h.ORIGINAL_SUBJECT: msg.subject,
        h.ORIGINAL_STREAM: md.stream,
        h.ORIGINAL_SEQ: str(md.sequence.stream),
        h.CONSUMER: md.consumer,
        h.REASON: reason,
        h.DELIVERIES: str(md.num_delivered),
        h.FAILED_AT: h.rfc3339_now(),
    })
    msg_id = next((v for k, v in original.items() if k.lower() == h.NATS_MSG_ID.lower()), None)
    if msg_id:
        headers[h.ORIGINAL_MSG_ID] = msg_id
    if error:
        headers[h.ERROR] = h.one_line(error)
    if schema_errors:
        kept = [
            {"path": v.path, "message": h.one_line(v.message, 500)}
            for v in schema_errors[:h.MAX_SCHEMA_ERRORS]
        ]
        headers[h.SCHEMA_ERRORS] = json.dumps(kept)  # ASCII escapes: any client can read it
    return headers


def dlq_subject(msg: Msg, prefix: str = "dlq") -> str:
    """``<prefix>.<original subject>``, the convention the dashboard's DLQ stream listens on."""
    return f"{prefix}.{msg.subject}"


async def dead_letter(
    js: JetStreamContext,
    msg: Msg,
    reason: str,
    *,
    error: str | None = None,
    schema_errors: Sequence[SchemaViolation] = (),
    prefix: str = "dlq",
    attempts: int = 5,
    timeout: float = 2.0,
) -> PubAck:
    """Copy ``msg`` (payload byte for byte) to its DLQ subject; does not terminate it."""
    md = msg.metadata
    return await publish_with_retry(
        js,
        dlq_subject(msg, prefix),
        msg.data,
        h.dead_letter_msg_id(md.stream, md.sequence.stream),
        headers=dead_letter_headers(msg, reason, error=error, schema_errors=schema_errors),
        attempts=attempts,
        timeout=timeout,
    )


# --- streams -----------------------------------------------------------------------------------


async def ensure_stream(js: JetStreamContext, name: str, subjects: list[str], **config: Any) -> StreamInfo:
    """Create stream ``name`` or update it to ``subjects`` and ``config``; a no-op if it matches.

    ``config`` takes :class:`nats.js.api.StreamConfig` fields; settings not given are kept.
    """
    for _ in range(2):
        try:
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            try:
                return await js.add_stream(name=name, subjects=list(subjects), **config)
            except nats.js.errors.BadRequestError as exc:
                # Another process created it between our lookup and add: update that one.
                if exc.err_code != STREAM_NAME_IN_USE:
                    raise
                continue
        wanted: StreamConfig = info.config.evolve(subjects=list(subjects), **config)
        if wanted.as_dict() == info.config.as_dict():
            return info
        return await js.update_stream(wanted)
    raise RuntimeError(f"stream {name} could be neither created nor found")
