"""Whether a republish's message is in its stream already: what is asked before an intent that
may have been sent is sent again past its stream's duplicate window (recovery, a retried
request, a resumed job), when the broker no longer recognises its msgId."""

from __future__ import annotations

import asyncio
from datetime import timedelta, timezone

import nats.errors
import nats.js.errors
from nats.js.api import ConsumerConfig, DeliverPolicy, PubAck

from dlq_consumer import headers as contract

from ..times import utcnow
from .intents import Intent

#: The longest a search of the streams for a pass's intents may take (it reads their subjects'
#: headers from the oldest intent's time on, once each).
SEARCH_SECONDS = 120.0


async def find_stored_many(js, intents: list[Intent]) -> dict[str, PubAck]:
    """{msgId: the PubAck of its message} for each of ``intents`` whose stream holds its message
    and whose duplicate window has half passed (within it a publish with the same msgId is the
    safe, cheaper check: the broker answers "duplicate"). Each subject's stream is read once,
    headers only, from its oldest such intent's time on."""
    by_subject: dict[str, list[Intent]] = {}
    for intent in intents:
        by_subject.setdefault(intent.subject, []).append(intent)
    found: dict[str, PubAck] = {}
    for subject, group in by_subject.items():
        try:
            stream = await js.find_stream_name_by_subject(subject)
            info = await js.stream_info(stream)
        except nats.js.errors.NotFoundError:
            continue
        window = info.config.duplicate_window or 120.0
        old = [i for i in group if (utcnow() - i.created_at).total_seconds() >= window / 2]
        if not old:
            continue
        wanted = {i.msg_id for i in old}
        since = (min(i.created_at for i in old) - timedelta(seconds=5)).replace(tzinfo=timezone.utc)
        sub = await js.subscribe(subject, stream=stream, ordered_consumer=True, config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since, headers_only=True))
        try:
            while wanted:
                try:
                    msg = await sub.next_msg(timeout=1.0)
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    break
                msg_id = (msg.headers or {}).get(contract.NATS_MSG_ID)
                if msg_id in wanted:
                    wanted.discard(msg_id)
                    found[msg_id] = PubAck(stream=stream, seq=msg.metadata.sequence.stream, duplicate=True)
                if msg.metadata.num_pending == 0:
                    break
        finally:
            await sub.unsubscribe()
    return found


async def find_stored(js, intent: Intent) -> PubAck | None:
    """The PubAck of an intent's message if its stream holds it and the duplicate window has
    half passed (``find_stored_many`` of one)."""
    return (await find_stored_many(js, [intent])).get(intent.msg_id)
