"""Completing republishes a crash or an unanswered publish left pending, with their own msgId.

Within the target stream's duplicate window a publish with the same msgId is the safe check
(the broker answers "duplicate" if it has it); past the window the broker no longer knows the
msgId, so the stream is searched for it first (stored.py).
"""

from __future__ import annotations

import logging
from datetime import timedelta

import nats.errors
from sqlalchemy import select

from ..db.engine import write_transaction
from ..nats.bridge import NatsUnavailable
from ..sources import acting_source
from ..times import utcnow
from .context import ActionContext
from .errors import NatsDown, Refused
from .intents import INTENTS, Intent, record_published
from .publishing import nats_unreachable, not_configured, publish_intent
from .stored import SEARCH_SECONDS, find_stored_many
from .streams import stream_of

log = logging.getLogger(__name__)


def recover_pending(rt: ActionContext, *, older_than: float = 0.0, first: bool = False) -> int:
    """Finish intents left pending (a crash, an unanswered publish) with their own msgId, each
    through its source's NATS.

    Returns how many were finished. Past the target stream's duplicate window the broker no
    longer recognises the msgId, so the stream is searched for them first: once a source for
    all of its intents (``find_stored_many``), not once an intent (a crash that left 2,000 pending
    took six minutes so). The intents of a source whose NATS is unreachable, or that is not
    configured here, stay pending for a later pass; the other sources' are finished. One intent
    waiting for NATS does not hold the later ones of its source, unless NATS does not answer at
    all (_publish_each); one whose subject no stream stores (asked of NATS) ends failed instead
    of being published again (publishing.py). A wait is logged once, and its end once. The
    ``first`` pass of a runtime logs the sources not configured here that have intents waiting
    (once: later passes are quiet).
    """
    waiting = {source for source in rt.feeds if nats_unreachable(rt, source)}
    if len(waiting) == len(rt.feeds):
        return 0
    cutoff = utcnow() - timedelta(seconds=older_than)
    with rt.engine.connect() as conn:
        rows = conn.execute(select(INTENTS).where(INTENTS.c.state == "pending", INTENTS.c.created_at <= cutoff)
                            .order_by(INTENTS.c.id)).all()
    by_source: dict[str, list[Intent]] = {}
    told: set[str] = set()
    for intent in map(Intent.from_row, rows):
        intent.resumed = True  # whether it was sent before the crash is unknown
        if acting_source(rt.settings, intent.source) in waiting or intent in rt.flights:
            continue
        if acting_source(rt.settings, intent.source) not in rt.feeds:
            if first and intent.source not in told:
                told.add(intent.source)
                log.warning("republishes of source %r wait: %s", intent.source, not_configured(intent.source))
            continue
        by_source.setdefault(intent.source, []).append(intent)
    said = rt.flights.told
    waits = {row.msg_id for row in rows}
    said.difference_update({k for k in said if k not in waits and k.removeprefix("search:") not in by_source})  # ended
    finished = 0
    for source, intents in by_source.items():
        bridge = rt.bridge_for(source)
        rt.flights.start(intents)  # a retried request waits for this pass instead of publishing them too
        try:
            try:
                found = bridge.call(lambda: find_stored_many(bridge.js, intents),
                                    rt.settings.request_timeout + SEARCH_SECONDS)
            except (NatsUnavailable, nats.errors.Error, TimeoutError) as exc:  # asyncio's is this one
                if f"search:{source}" not in said:
                    said.add(f"search:{source}")
                    log.warning("%d republishes are waiting for NATS (said once while it lasts): %s",
                                len(intents), exc)
                continue
            said.discard(f"search:{source}")
            stored = [(intent, found[intent.msg_id]) for intent in intents if intent.msg_id in found]
            if stored:
                with write_transaction(rt.engine) as conn:
                    record_published(conn, stored, recovered=True)
                finished += len(stored)
            finished += _publish_each(rt, source, [i for i in intents if i.msg_id not in found], said)
        finally:
            rt.flights.end(intents)
    return finished


def _publish_each(rt: ActionContext, source: str, intents: list[Intent], told: set[str]) -> int:
    """Publish a source's intents that its stream does not hold, oldest first; returns how many
    ended. One that waits for NATS is logged once (and once when it ends) and does not hold the
    others: the pass goes on to the next unless NATS itself does not answer now (asked: which
    stream stores the subject), when the rest of the source's wait for a later pass too."""
    finished = 0
    for intent in intents:
        try:
            published = publish_intent(rt, intent, recovered=True, searched=True)
        except Refused as exc:
            told.discard(intent.msg_id)
            log.warning("republish %s could not be completed: %s", intent.msg_id, exc)
            finished += 1
        except (NatsDown, NatsUnavailable) as exc:
            if intent.msg_id not in told:
                told.add(intent.msg_id)
                log.warning("republish %s is waiting for NATS (said once, and when it ends): %s", intent.msg_id, exc)
            if nats_unreachable(rt, source) or not stream_of(rt, intent.subject, source, fresh=True)[0]:
                break  # NATS does not answer: the rest of its source's wait too; the other sources go on
        else:
            finished += 1
            if intent.msg_id in told:
                told.discard(intent.msg_id)
                log.warning("republish %s was completed (stream %s, seq %s%s)", intent.msg_id, published.stream,
                            published.seq, ", a duplicate" if published.duplicate else "")
    return finished
