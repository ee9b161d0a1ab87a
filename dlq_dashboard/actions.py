"""Operator actions on entries: republish exactly once, close and reopen, each with its audit record.

A republish is two transactions around one publish (commit first, publish second):

1. the intent: the version the operator saw is checked and a Republish row is committed with a
   msgId derived from the entry and that version; while it is pending, every other action on
   the entry is refused (409);
2. the publish, with that msgId;
3. the outcome: the PubAck, status ``republished``, the version raised and the audit record;
   or, when nothing can have been stored, the failure and its audit record. The entry itself
   was never touched, so it is as it was, and the same request retried reuses the msgId.

A crash between 1 and 3, or a publish whose answer never came, leaves the intent pending;
``recover_pending`` publishes it again with the same msgId and payload, and the broker's
duplicate window absorbs the copy. docs/actions.md explains the design.

This module decides and commits; the publish, the outcome and the recovery are in intents.py,
the errors in action_errors.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

import nats.js.errors
from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from .action_errors import AlreadyRepublished, Conflict, EntryNotFound, InFlight, NatsDown, Refused
from .bridge import NatsUnavailable
from .contract import republish_headers, utcnow
from .db import write_transaction
from .intents import Intent, Published, entry_ref, is_in_flight, nats_unreachable, publish_intent, republish_msg_id
from .models import Action, Entry, Republish
from .multirow import insert_rows, update_rows
from .schemas import ValidationResult
from .store import EntryView

ENTRIES, INTENTS, ACTIONS = Entry.__table__, Republish.__table__, Action.__table__
REPUBLISHABLE = ("open", "republished")


# --- what an action answers --------------------------------------------------------------------

@dataclass
class Outcome:
    """What an action answers: the entry after it, and the PubAck of a republish."""

    entry: EntryView
    publish: Published | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"entry": self.entry.to_dict()}
        if self.publish is not None:
            body["publish"] = self.publish.to_dict()
        return body


# --- deciding ----------------------------------------------------------------------------------

def load_entry(conn: Connection, entry_id: int):
    """The entry row, or EntryNotFound."""
    row = conn.execute(select(ENTRIES).where(ENTRIES.c.id == entry_id)).first()
    if row is None:
        raise EntryNotFound(f"No entry {entry_id}.", entry_id=entry_id)
    return row._mapping


def pending_intents(conn: Connection, entry_ids: list[int]) -> dict[int, list[Intent]]:
    """The unfinished intents of these entries."""
    found: dict[int, list[Intent]] = {}
    rows = conn.execute(select(INTENTS).where(INTENTS.c.entry_id.in_(entry_ids), INTENTS.c.state == "pending"))
    for row in rows:
        intent = Intent.from_row(row)
        found.setdefault(intent.entry_id, []).append(intent)
    return found


def _check_nothing_pending(pending: list[Intent], entry_id: int, version: int) -> None:
    if pending:
        raise Conflict(f"Entry {entry_id} has a republish (msgId {pending[0].msg_id}) waiting for NATS's "
                       "answer; it is completed first. Reload and decide again.",
                       entry_id=entry_id, seen_version=version)


def _check_version(entry: Mapping, version: int) -> None:
    if entry["version"] != version:
        raise Conflict(f"Entry {entry['id']} changed since you saw it (version {version}, now "
                       f"{entry['version']}); nothing was done.", entry_id=entry["id"], seen_version=version)


_NO_SCHEMA = ValidationResult(None, [])


def decide_republish(rt, entry: Mapping, version: int, existing: Intent | None, pending: list[Intent], *,
                     actor: str, payload: bytes | None = None, force: bool = False,
                     job_id: int | None = None, resume_pending: bool = False,
                     now: datetime | None = None) -> tuple[str, Intent]:
    """Decide what a republish request means; raise an ActionError when it cannot be done.

    Returns ("new", intent) to insert, ("retry", intent) to reuse a failed intent's row, or
    ("resume", intent) to publish again an intent that is pending and not in flight.
    ``resume_pending``: the caller owns the intent (a job holding its lease), so only this
    process's publishes count as in flight.
    """
    entry_id = entry["id"]
    if existing is not None and existing.state == "published":
        raise AlreadyRepublished(f"Entry {entry_id} was already republished at version {version} "
                                 f"(msgId {existing.msg_id}); nothing more was published.",
                                 entry_id=entry_id, seen_version=version,
                                 publish=Published(existing.msg_id, existing.stream, existing.seq, existing.duplicate))
    if existing is not None and existing.state == "pending":
        if is_in_flight(existing, rt, other_processes=not resume_pending):
            raise InFlight(f"Entry {entry_id} is being republished right now (msgId {existing.msg_id}).",
                           entry_id=entry_id, seen_version=version)
        if payload is not None and payload != existing.payload:
            raise Conflict(f"An earlier republish of entry {entry_id} at version {version} (msgId "
                           f"{existing.msg_id}) may have reached NATS; it is completed with its own payload "
                           "first. Reload and decide again.", entry_id=entry_id, seen_version=version)
        existing.resumed = True
        return "resume", existing
    _check_nothing_pending(pending, entry_id, version)
    _check_version(entry, version)
    if entry["status"] not in REPUBLISHABLE:
        raise Conflict(f"Entry {entry_id} is {entry['status']}; reopen it before republishing.",
                       entry_id=entry_id, seen_version=version)
    subject = entry["original_subject"]
    if not subject:
        raise Refused(f"Entry {entry_id} has no Dlq-Original-Subject, so there is nowhere to republish it.",
                      entry_id=entry_id)
    original = bytes(entry["payload"] or b"")
    if payload is None and not entry["payload_available"]:
        raise Refused(f"Entry {entry_id} has no payload (the source stream no longer had it); "
                      "edit one in to republish.", entry_id=entry_id)
    body = original if payload is None else payload
    verdict = rt.schemas.validate(subject, body) if rt.schemas.schemas else _NO_SCHEMA
    if not verdict.valid and not force:
        first = verdict.errors[0]
        raise Refused(f"The payload does not pass the current schema {verdict.schema} "
                      f"({first.path or '/'}: {first.message}); republishing it needs the override.",
                      entry_id=entry_id, errors=[e.to_dict() for e in verdict.errors])
    ref = entry_ref(entry)
    msg_id = f"dlq-dashboard:{ref}:e{entry_id}:v{version}"  # republish_msg_id, with the ref at hand
    headers = republish_headers(json.loads(entry["headers"] or "{}"), msg_id, ref)
    intent = Intent(id=existing.id if existing else None, entry_id=entry_id, version=version, msg_id=msg_id,
                    subject=subject, payload=body, headers=headers, edited=body != original, actor=actor,
                    job_id=job_id, created_at=now or utcnow(), forced=not verdict.valid)
    return ("retry" if existing else "new"), intent


def write_claims(conn: Connection, claims: list[tuple[str, Intent]]) -> None:
    """Commit new intents; resumed ones need no write. The entry's version is raised only when
    the outcome is recorded: until then the pending intent itself refuses every other action.
    Intents are known by their msgId (unique) from here on."""
    def values(i: Intent) -> dict[str, Any]:
        return {"msg_id": i.msg_id, "entry_id": i.entry_id, "version": i.version, "subject": i.subject,
                "payload": i.payload, "headers": json.dumps(i.headers), "edited": i.edited, "actor": i.actor,
                "job_id": i.job_id, "created_at": i.created_at}

    insert_rows(conn, INTENTS, [{**values(i), "state": "pending"} for kind, i in claims if kind == "new"])
    update_rows(conn, INTENTS, "msg_id", [values(i) for kind, i in claims if kind == "retry"],
                constants={"state": "pending", "error": None})


# --- the actions -------------------------------------------------------------------------------

def republish_entry(rt, entry_id: int, version: int, *, actor: str, payload: bytes | None = None,
                    force: bool = False) -> Outcome:
    """Republish an entry (or an edited payload) exactly once for the version the operator saw."""
    with write_transaction(rt.engine) as conn:
        entry = load_entry(conn, entry_id)
        msg_id = republish_msg_id(entry, version)
        row = conn.execute(select(INTENTS).where(INTENTS.c.msg_id == msg_id)).first()
        existing = Intent.from_row(row) if row else None
        pending = [i for i in pending_intents(conn, [entry_id]).get(entry_id, []) if i.msg_id != msg_id]
        kind, intent = decide_republish(rt, entry, version, existing, pending, actor=actor,
                                        payload=payload, force=force)
        try:
            write_claims(conn, [(kind, intent)])
        except IntegrityError:  # PostgreSQL: a concurrent request inserted this msgId first
            raise Conflict(f"Entry {entry_id} is being republished right now (msgId {msg_id}).",
                           entry_id=entry_id, seen_version=version) from None
    published = publish_intent(rt, intent, recovered=kind == "resume")
    return Outcome(rt.store.get_entry(entry_id), published)


def decide_close(entry: Mapping, version: int, pending: list[Intent]) -> None:
    """Raise unless the entry can be closed at ``version``."""
    _check_nothing_pending(pending, entry["id"], version)
    _check_version(entry, version)
    if entry["status"] == "closed":
        raise Conflict(f"Entry {entry['id']} is already closed.", entry_id=entry["id"], seen_version=version)


def close_values(actor: str, note: str | None, now: datetime) -> dict[str, Any]:
    """The columns a close sets (the version is raised by the caller's WHERE)."""
    return {"status": "closed", "closed_by": actor, "closed_at": now, "close_note": note, "updated_at": now}


def close_entry(rt, entry_id: int, version: int, *, actor: str, note: str | None = None) -> Outcome:
    """Acknowledge and close an entry with a note; with DLQ_DELETE_ON_CLOSE also delete its DLQ message.

    The delete happens inside the transaction: if NATS cannot delete it, nothing changes.
    """
    note = (note or "").strip() or None
    with write_transaction(rt.engine) as conn:
        entry = load_entry(conn, entry_id)
        decide_close(entry, version, pending_intents(conn, [entry_id]).get(entry_id, []))
        detail: dict[str, Any] = {}
        if rt.settings.delete_on_close and entry["dlq_stream"] and entry["dlq_seq"]:
            detail["dlq_delete"] = delete_from_dlq(rt, [entry])[entry_id]
        now = utcnow()
        conn.execute(update(ENTRIES).where(ENTRIES.c.id == entry_id, ENTRIES.c.version == version)
                     .values(version=version + 1, **close_values(actor, note, now)))
        conn.execute(insert(ACTIONS).values(entry_id=entry_id, action="close", actor=actor, at=now, note=note,
                                            version=version, detail=json.dumps(detail)))
    return Outcome(rt.store.get_entry(entry_id))


def delete_from_dlq(rt, entries: list[Mapping]) -> dict[int, str]:
    """Delete entries' messages from the DLQ stream; {entry id: what happened}. NatsDown if unreachable."""
    down = nats_unreachable(rt)
    if down:
        raise NatsDown(f"{down}; DLQ_DELETE_ON_CLOSE needs NATS to delete the message, so nothing was closed.")

    async def delete_all():
        results: dict[int, str] = {}
        epochs: dict[str, str] = {}
        for entry in entries:
            stream = entry["dlq_stream"]
            if stream not in epochs:
                info = await rt.bridge.js.stream_info(stream)
                epochs[stream] = info.created.isoformat() if info.created else "unknown"
            if epochs[stream] != entry["dlq_epoch"]:
                # Sequences restart in a recreated stream: this seq is another message now.
                results[entry["id"]] = "not deleted: the DLQ stream was recreated since"
                continue
            try:
                await rt.bridge.js.delete_msg(stream, entry["dlq_seq"])
                results[entry["id"]] = "deleted"
            except nats.js.errors.NotFoundError:
                results[entry["id"]] = "already gone"
        return results

    try:
        return rt.bridge.call(delete_all, rt.settings.request_timeout + 0.05 * len(entries))
    except NatsUnavailable as exc:
        raise NatsDown(f"{exc}; the DLQ message could not be deleted, so nothing was closed.") from None
    except nats.js.errors.NotFoundError:
        raise NatsDown("The DLQ stream does not exist now, so nothing was closed.") from None


def decide_reopen(entry: Mapping, version: int, pending: list[Intent]) -> None:
    """Raise unless the entry can be reopened at ``version``."""
    _check_nothing_pending(pending, entry["id"], version)
    _check_version(entry, version)
    if entry["status"] == "open":
        raise Conflict(f"Entry {entry['id']} is already open.", entry_id=entry["id"], seen_version=version)


def reopen_entry(rt, entry_id: int, version: int, *, actor: str) -> Outcome:
    """Reopen a closed or republished entry."""
    with write_transaction(rt.engine) as conn:
        entry = load_entry(conn, entry_id)
        decide_reopen(entry, version, pending_intents(conn, [entry_id]).get(entry_id, []))
        now = utcnow()
        conn.execute(update(ENTRIES).where(ENTRIES.c.id == entry_id, ENTRIES.c.version == version).values(
            status="open", version=version + 1, closed_by=None, closed_at=None, close_note=None, updated_at=now))
        conn.execute(insert(ACTIONS).values(entry_id=entry_id, action="reopen", actor=actor, at=now,
                                            version=version, detail=json.dumps({"was": entry["status"]})))
    return Outcome(rt.store.get_entry(entry_id))


# --- what a republish reaches ------------------------------------------------------------------

def republish_targets(rt, subject: str | None) -> dict[str, Any]:
    """The stream that stores ``subject`` and the consumers that will receive a republish of it."""
    from .store import subject_pattern_regex

    if not subject:
        return {"stream": None, "consumers": [], "error": "The entry has no original subject."}
    if nats_unreachable(rt):
        return {"stream": None, "consumers": [], "error": f"{nats_unreachable(rt)}; the consumers cannot be listed."}

    async def look_up():
        import re

        try:
            stream = await rt.bridge.js.find_stream_name_by_subject(subject)
        except nats.js.errors.NotFoundError:
            return {"stream": None, "consumers": [],
                    "error": f"No stream stores subject {subject}: a republish would be refused."}
        consumers = []
        for info in await rt.bridge.js.consumers_info(stream):
            filters = list(info.config.filter_subjects or []) or (
                [info.config.filter_subject] if info.config.filter_subject else [])
            if not filters or any(re.match(subject_pattern_regex(f), subject) for f in filters):
                consumers.append({"name": info.name, "filters": filters or [">"],
                                  "durable": bool(info.config.durable_name)})
        return {"stream": stream, "consumers": sorted(consumers, key=lambda c: c["name"]), "error": None}

    try:
        return rt.bridge.call(look_up, rt.settings.request_timeout)
    except NatsUnavailable as exc:
        return {"stream": None, "consumers": [], "error": f"{exc}; the consumers cannot be listed."}
