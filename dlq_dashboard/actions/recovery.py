"""Completing republishes a crash or an unanswered publish left pending, with their own msgId.

Within the target stream's duplicate window a publish with the same msgId is the safe check
(the broker answers "duplicate" if it has it); past the window the broker no longer knows the
msgId, so the stream is searched for it first.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta, timezone

import nats.errors
import nats.js.errors
from nats.js.api import ConsumerConfig, DeliverPolicy, PubAck
from sqlalchemy import select

from dlq_consumer import headers as contract

from ..db.engine import write_transaction
from ..nats.bridge import NatsUnavailable
from ..times import utcnow
from .context import ActionContext
from .errors import NatsDown, Refused
from .intents import INTENTS, Intent, record_published
from .publishing import nats_unreachable, not_configured, publish_intent

log = logging.getLogger(__name__)


def recover_pending(rt: ActionContext, *, older_than: float = 0.0, first: bool = False) -> int:
    """Finish intents left pending (a crash, an unanswered publish) with their own msgId, each
    through its source's NATS.

    Returns how many were finished. Past the target stream's duplicate window the broker no
    longer recognises the msgId, so the stream is searched for it before publishing. The
    intents of a source whose NATS is unreachable, or that is not configured here, stay
    pending for a later pass; the other sources' are finished. The ``first`` pass of a runtime
    logs the sources not configured here that have intents waiting (once: later passes are quiet).
    """
    waiting = {source for source in rt.feeds if nats_unreachable(rt, source)}
    if len(waiting) == len(rt.feeds):
        return 0
    cutoff = utcnow() - timedelta(seconds=older_than)
    with rt.engine.connect() as conn:
        rows = conn.execute(select(INTENTS).where(INTENTS.c.state == "pending", INTENTS.c.created_at <= cutoff)
                            .order_by(INTENTS.c.id)).all()
    finished = 0
    told: set[str] = set()
    for intent in map(Intent.from_row, rows):
        intent.resumed = True  # whether it was sent before the crash is unknown
        if intent.source in waiting or intent in rt.flights:
            continue
        if intent.source not in rt.feeds:
            if first and intent.source not in told:
                told.add(intent.source)
                log.warning("republishes of source %r wait: %s", intent.source, not_configured(intent.source))
            continue
        bridge = rt.bridge_for(intent.source)
        try:
            found = bridge.call(lambda: find_stored(bridge.js, intent), rt.settings.request_timeout + 30)
            if found is not None:
                with write_transaction(rt.engine) as conn:
                    record_published(conn, [(intent, found)], recovered=True)
            else:
                publish_intent(rt, intent, recovered=True)
            finished += 1
        except Refused as exc:
            log.warning("republish %s could not be completed: %s", intent.msg_id, exc)
            finished += 1
        except (NatsDown, NatsUnavailable) as exc:
            log.warning("republish %s is still waiting for NATS: %s", intent.msg_id, exc)
            waiting.add(intent.source)  # the rest of its source's wait too; the others go on
    return finished


async def find_stored(js, intent: Intent) -> PubAck | None:
    """The PubAck of an intent's message if its stream holds it and the duplicate window has
    passed (within the window a publish with the same msgId is the safe, cheaper check)."""
    try:
        stream = await js.find_stream_name_by_subject(intent.subject)
        info = await js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return None
    window = info.config.duplicate_window or 120.0
    if (utcnow() - intent.created_at).total_seconds() < window / 2:
        return None
    since = (intent.created_at - timedelta(seconds=5)).replace(tzinfo=timezone.utc)
    sub = await js.subscribe(intent.subject, stream=stream, ordered_consumer=True, config=ConsumerConfig(
        deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since, headers_only=True))
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                return None
            if (msg.headers or {}).get(contract.NATS_MSG_ID) == intent.msg_id:
                return PubAck(stream=stream, seq=msg.metadata.sequence.stream, duplicate=True)
            if msg.metadata.num_pending == 0:
                return None
    finally:
        await sub.unsubscribe()
