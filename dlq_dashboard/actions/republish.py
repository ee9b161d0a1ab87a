"""Republishing one entry exactly once, for the version the operator saw.

A republish is two transactions around one publish (commit first, publish second):

1. the intent: the version the operator saw is checked and a Republish row is committed with a
   msgId derived from the entry and that version; while it is pending, every other action on
   the entry is refused (409);
2. the publish, with that msgId (publishing.py);
3. the outcome: the PubAck, status ``republished``, the version raised and the audit record;
   or, when nothing can have been stored, the failure and its audit record. The entry itself
   was never touched, so it is as it was, and the same request retried reuses the msgId.

A crash between 1 and 3, or a publish whose answer never came, leaves the intent pending;
recovery.py publishes it again with the same msgId and payload, and the broker's duplicate
window absorbs the copy. docs/actions.md explains the design.
"""

from __future__ import annotations

from typing import Any

import nats.js.errors
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from ..db.engine import write_transaction
from ..db.installation import installation_id
from ..nats.bridge import NatsUnavailable
from ..scopes import subject_matches
from .context import ActionContext
from .decisions import Outcome, decide_republish, load_entry, no_stream_sentence, pending_intents, write_claims
from .errors import Conflict
from .intents import INTENTS, Intent, decision_intent
from .publishing import nats_unreachable, of_source, publish_intent


def republish_entry(rt: ActionContext, entry_id: int, version: int, *, actor: str, payload: bytes | None = None,
                    force: bool = False) -> Outcome:
    """Republish an entry (or an edited payload) exactly once for the version the operator saw."""
    with write_transaction(rt.engine) as conn:
        entry = load_entry(conn, entry_id)
        # This decision's intent (a retry, a resume) is found by entry and version: one made
        # before the installation id keeps the msgId it was first sent with.
        existing = decision_intent([Intent.from_row(row) for row in conn.execute(
            select(INTENTS).where(INTENTS.c.entry_id == entry_id, INTENTS.c.version == version))])
        pending = [i for i in pending_intents(conn, [entry_id]).get(entry_id, [])
                   if existing is None or i.id != existing.id]
        kind, intent = decide_republish(rt, entry, version, existing, pending, installation=installation_id(conn),
                                        actor=actor, payload=payload, force=force)
        try:
            write_claims(conn, [(kind, intent)])
        except IntegrityError:  # PostgreSQL: a concurrent request inserted this msgId first
            raise Conflict(f"Entry {entry_id} is being republished right now (msgId {intent.msg_id}).",
                           entry_id=entry_id, seen_version=version) from None
    published = publish_intent(rt, intent, recovered=kind == "resume")
    return Outcome(rt.store.get_entry(entry_id), published)


def republish_targets(rt: ActionContext, subject: str | None, source: str | None = None) -> dict[str, Any]:
    """The stream that stores ``subject`` in ``source`` (None: the main source), where a
    republish of an entry of that source goes, and the consumers that will receive it."""
    if not subject:
        return {"stream": None, "consumers": [], "error": "The entry has no original subject."}
    down = nats_unreachable(rt, source)
    if down:
        return {"stream": None, "consumers": [], "error": f"{down}; the consumers cannot be listed."}
    bridge = rt.bridge if source is None else rt.bridge_for(source)

    async def look_up():
        try:
            stream = await bridge.js.find_stream_name_by_subject(subject)
        except nats.js.errors.NotFoundError:
            return {"stream": None, "consumers": [], "error": of_source(rt, source, no_stream_sentence(subject))}
        consumers = []
        for info in await bridge.js.consumers_info(stream):
            filters = list(info.config.filter_subjects or []) or (
                [info.config.filter_subject] if info.config.filter_subject else [])
            if not filters or any(subject_matches(f, subject) for f in filters):
                consumers.append({"name": info.name, "filters": filters or [">"],
                                  "durable": bool(info.config.durable_name)})
        return {"stream": stream, "consumers": sorted(consumers, key=lambda c: c["name"]), "error": None}

    try:
        return bridge.call(look_up, rt.settings.request_timeout)
    except NatsUnavailable as exc:
        return {"stream": None, "consumers": [], "error": f"{of_source(rt, source, str(exc))}; "
                                                          "the consumers cannot be listed."}
