"""A JetStream publish that tells a stream's answer from any other.

nats-py's ``js.publish`` is a core request: whoever subscribes to the subject may answer it. A
plain core-NATS subscriber that does not answer makes it time out (read as NATS not answering),
and one that answers with something other than a PubAck (``{"ok": true}``) makes it raise a
TypeError from building the PubAck. :func:`publish_acked` sends the same request and reads the
answer itself: a PubAck, the stream's error, or :class:`NotPubAck` with what came instead.
"""

from __future__ import annotations

import json
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import api

#: How much of an answer that is not a PubAck is quoted.
QUOTED = 120


class NotPubAck(Exception):
    """The subject was answered, but not by a JetStream stream (no PubAck): a core-NATS responder.
    Nothing says a stream stored the message."""

    def __init__(self, answer: bytes):
        text = answer[:QUOTED].decode("utf-8", "replace")
        super().__init__(repr(text) + ("..." if len(answer) > QUOTED else "") if answer else "an empty answer")


def pub_ack(data: bytes) -> api.PubAck:
    """The PubAck in ``data``; nats-py's APIError for a stream's error; NotPubAck for anything else."""
    try:
        answer: Any = json.loads(data)
    except ValueError:
        raise NotPubAck(data) from None
    if not isinstance(answer, dict):
        raise NotPubAck(data)
    if isinstance(answer.get("error"), dict):
        raise nats.js.errors.APIError.from_error(answer["error"])
    if not isinstance(answer.get("stream"), str) or not isinstance(answer.get("seq"), int) \
            or isinstance(answer.get("seq"), bool):
        raise NotPubAck(data)
    return api.PubAck.from_response(answer)


async def publish_acked(nc, subject: str, payload: bytes, *, headers: dict | None,
                        timeout: float) -> api.PubAck:
    """Publish to JetStream as ``js.publish`` does and return the stream's PubAck; raise
    NoStreamResponseError for no responders, nats-py's APIError for a stream's refusal,
    NotPubAck for an answer that is not a stream's, TimeoutError for none."""
    try:
        msg = await nc.request(subject, payload, timeout=timeout, headers=headers or None)
    except nats.errors.NoRespondersError:
        raise nats.js.errors.NoStreamResponseError from None
    return pub_ack(msg.data)
