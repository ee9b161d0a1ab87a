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
#: The longest a search waits for its next message while its consumer has more to deliver: past
#: it, the search ends without an answer (a TimeoutError), and the intents stay pending.
MESSAGE_SECONDS = 5.0


async def find_stored_many(js, intents: list[Intent]) -> dict[str, PubAck]:
    """{msgId: the PubAck of its message} for each of ``intents`` whose stream holds its message
    and whose duplicate window has half passed (within it a publish with the same msgId is the
    safe, cheaper check: the broker answers "duplicate"). Each subject's stream is read once,
    headers only, from its oldest such intent's time on. A TimeoutError when its messages do not
    come (MESSAGE_SECONDS): whether they are stored is then not known, and the caller keeps the
    intents pending (a recovery pass, a retried request and a job each do)."""
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
            if not await _holds_any(sub):
                continue
            while wanted:
                try:
                    msg = await sub.next_msg(timeout=MESSAGE_SECONDS)
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    # Not an answer: messages the stream holds have not come (a loaded server or
                    # client). Taken for "not stored", a message already there was published
                    # again past its duplicate window, stored twice; the intents wait instead.
                    raise TimeoutError(f"stream {stream} did not deliver its messages of {subject} within "
                                       f"{MESSAGE_SECONDS:g} s; whether the republishes are stored is not known") from None
                msg_id = (msg.headers or {}).get(contract.NATS_MSG_ID)
                if msg_id in wanted:
                    wanted.discard(msg_id)
                    found[msg_id] = PubAck(stream=stream, seq=msg.metadata.sequence.stream, duplicate=True)
                if msg.metadata.num_pending == 0:
                    break
        finally:
            await sub.unsubscribe()
    return found


async def _holds_any(sub) -> bool:
    """Whether the search's consumer has any message to deliver (or has delivered one): with none,
    no message is awaited, and none coming is no timeout."""
    info = await sub.consumer_info()
    return bool(info.num_pending or info.delivered.consumer_seq)


async def find_stored(js, intent: Intent) -> PubAck | None:
    """The PubAck of an intent's message if its stream holds it and the duplicate window has
    half passed (``find_stored_many`` of one)."""
    return (await find_stored_many(js, [intent])).get(intent.msg_id)
