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
"""

from __future__ import annotations

import json
import logging
import threading
from functools import lru_cache
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

import nats.errors
import nats.js.errors
from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from .bridge import NatsUnavailable
from .contract import republish_headers, utcnow
from .db import write_transaction
from .models import Action, Entry, Republish
from .multirow import insert_rows, update_rows
from .schemas import ValidationResult
from .store import EntryView

log = logging.getLogger(__name__)

ENTRIES, INTENTS, ACTIONS = Entry.__table__, Republish.__table__, Action.__table__
REPUBLISHABLE = ("open", "republished")


# --- errors: each carries the HTTP status the edge answers with --------------------------------

class ActionError(Exception):
    """An action that was not done; the message is a sentence for the operator."""

    status = 400

    def __init__(self, message: str, *, entry_id: int | None = None, seen_version: int | None = None,
                 publish: "Published | None" = None, errors: list[dict] | None = None):
        super().__init__(message)
        self.entry_id, self.seen_version, self.publish = entry_id, seen_version, publish
        self.errors = errors or []


class EntryNotFound(ActionError):
    status = 404


class Conflict(ActionError):
    """The entry is not at the version the operator saw, or not in a state that allows this."""

    status = 409


class AlreadyRepublished(Conflict):
    """This decision (entry and version) was republished before; ``publish`` says where."""


class InFlight(Conflict):
    """Another request, job or recovery is publishing this very intent right now."""


class Refused(ActionError):
    """The request cannot be done as asked (no subject, no stream, an invalid payload)."""

    status = 422


class NatsDown(ActionError):
    """NATS is unreachable or did not answer; ``in_doubt`` when the message may still arrive."""

    status = 503

    def __init__(self, message: str, *, in_doubt: bool = False, **kw):
        super().__init__(message, **kw)
        self.in_doubt = in_doubt


# --- values ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Published:
    """The broker's answer to a republish."""

    msg_id: str
    stream: str | None
    seq: int | None
    duplicate: bool | None

    def to_dict(self) -> dict[str, Any]:
        return {"msg_id": self.msg_id, "stream": self.stream, "seq": self.seq, "duplicate": self.duplicate}


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


@dataclass
class Intent:
    """A republish intent as committed: exactly what will be (or was) published."""

    id: int | None
    entry_id: int
    version: int
    msg_id: str
    subject: str
    payload: bytes
    headers: dict[str, str]
    edited: bool
    actor: str
    job_id: int | None
    created_at: datetime
    state: str = "pending"
    error: str | None = None
    forced: bool = False
    stream: str | None = None
    seq: int | None = None
    duplicate: bool | None = None
    # Published before (a retry, a recovery): an earlier attempt may have been stored, so a
    # failure now never counts as "nothing was stored" unless the broker itself said so.
    resumed: bool = False

    @classmethod
    def from_row(cls, row) -> "Intent":
        m = row._mapping
        return cls(id=m["id"], entry_id=m["entry_id"], version=m["version"], msg_id=m["msg_id"],
                   subject=m["subject"], payload=bytes(m["payload"]), headers=json.loads(m["headers"] or "{}"),
                   edited=bool(m["edited"]), actor=m["actor"], job_id=m["job_id"],
                   created_at=m["created_at"], state=m["state"], error=m["error"], stream=m["stream"],
                   seq=m["seq"], duplicate=m["duplicate"])


def entry_ref(entry: Mapping[str, Any]) -> str:
    """``<dlq stream>:<seq>`` (Dlq-Replay-Of); an advisory-only entry is named by its original message."""
    if entry["dlq_stream"] and entry["dlq_seq"]:
        return f"{entry['dlq_stream']}:{entry['dlq_seq']}"
    return f"{entry['original_stream']}:{entry['original_seq']}"


def republish_msg_id(entry: Mapping[str, Any], version: int) -> str:
    """The msgId of the decision to republish ``entry`` as seen at ``version``.

    The same for a retried request or a recovery; different from every earlier republish
    (each raises the version) and from the message's own ids (``<stream>:<seq>:dlq``, the
    service's), which never start with ``dlq-dashboard:``.
    """
    return f"dlq-dashboard:{entry_ref(entry)}:e{entry['id']}:v{version}"


# Tests replace this to simulate a crash at "after_intent" or "after_publish".
def fault_point(stage: str, intent: Intent) -> None:
    """A no-op hook between the steps of a republish."""


# Intents this process is publishing right now: a concurrent request for one of them is a
# double-click (409), not a retry of an abandoned publish.
_in_flight: set[str] = set()
_in_flight_lock = threading.Lock()


def start_flight(intents: list[Intent]) -> None:
    """Note that this process is publishing these intents now."""
    with _in_flight_lock:
        _in_flight.update(i.msg_id for i in intents)


def end_flight(intents: list[Intent]) -> None:
    """Note that these publishes have ended (answered, failed or abandoned)."""
    with _in_flight_lock:
        _in_flight.difference_update(i.msg_id for i in intents)


def _is_in_flight(intent: Intent, rt, *, other_processes: bool = True) -> bool:
    with _in_flight_lock:
        if intent.msg_id in _in_flight:
            return True
    if not other_processes:
        return False
    # Another process may be publishing it: a young pending intent without a recorded failure.
    age = (utcnow() - intent.created_at).total_seconds()
    return intent.error is None and age < rt.settings.request_timeout + 5


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
        if _is_in_flight(existing, rt, other_processes=not resume_pending):
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


# --- outcomes ----------------------------------------------------------------------------------

@lru_cache(maxsize=256)
def _audit_detail(subject: str, edited: bool, forced: bool, recovered: bool) -> str:
    detail: dict[str, Any] = {"subject": subject, "edited": edited}
    if forced:
        detail["forced"] = True
    if recovered:
        detail["recovered"] = True
    return json.dumps(detail)


def _audit(intent: Intent, action: str, now: datetime, *, recovered: bool, **values) -> dict[str, Any]:
    return {"entry_id": intent.entry_id, "job_id": intent.job_id, "action": action, "actor": intent.actor,
            "at": now, "note": None, "version": intent.version, "msg_id": intent.msg_id,
            "publish_stream": None, "publish_seq": None, "duplicate": None, "error": None,
            "detail": _audit_detail(intent.subject, intent.edited, intent.forced, recovered), **values}


def record_published(conn: Connection, results: list[tuple[Intent, Any]], *, recovered: bool = False) -> list[Intent]:
    """Record PubAcks: intent published, entry ``republished`` (version raised), one audit row each."""
    acks = {i.msg_id: ack for i, ack in results}
    now = utcnow()
    # Only the first outcome counts: another thread or process may have finished some already.
    changed = update_rows(conn, INTENTS, "msg_id", [
        {"msg_id": i.msg_id, "stream": ack.stream, "seq": ack.seq, "duplicate": bool(ack.duplicate)}
        for i, ack in results], constants={"state": "published", "published_at": now, "error": None},
        match={"state": "pending"})
    done = [i for i, _ in results if i.msg_id in changed]
    if not done:
        return done
    conn.execute(update(ENTRIES).where(ENTRIES.c.id.in_([i.entry_id for i in done]))
                 .values(status="republished", version=ENTRIES.c.version + 1, updated_at=now))
    insert_rows(conn, ACTIONS, [_audit(i, "republish", now, recovered=recovered, publish_stream=acks[i.msg_id].stream,
                                       publish_seq=acks[i.msg_id].seq, duplicate=bool(acks[i.msg_id].duplicate))
                                for i in done])
    return done


def record_failed(conn: Connection, results: list[tuple[Intent, str]], *, recovered: bool = False) -> list[Intent]:
    """Record publishes that cannot have stored anything. The entry was never changed, so it is
    as it was, and the same request retried (same version) reuses the msgId."""
    errors = {i.msg_id: e for i, e in results}
    changed = update_rows(conn, INTENTS, "msg_id", [{"msg_id": i.msg_id, "error": e} for i, e in results],
                          constants={"state": "failed"}, match={"state": "pending"})
    done = [i for i, _ in results if i.msg_id in changed]
    insert_rows(conn, ACTIONS, [_audit(i, "republish_failed", utcnow(), recovered=recovered, error=errors[i.msg_id])
                                for i in done])
    return done


def mark_in_doubt(conn: Connection, intents: list[Intent], error: str) -> None:
    """Note on pending intents that their publish got no answer; recovery completes them."""
    for intent in intents:
        intent.error = error
        conn.execute(update(INTENTS).where(INTENTS.c.msg_id == intent.msg_id, INTENTS.c.state == "pending")
                     .values(error=error))


def classify_failure(exc: BaseException, intent: Intent) -> tuple[bool, int, str]:
    """(nothing was stored, HTTP status, sentence) for an exception from publishing ``intent``."""
    nothing_stored, status, sentence = _classify(exc, intent.subject)
    if nothing_stored and status == 503 and intent.resumed:
        # This attempt was not sent, but an earlier one may have been stored.
        return False, 503, (f"{sentence.split(';')[0]}. The republish may have been stored by an earlier "
                            "attempt; it will be completed with the same msgId once NATS answers.")
    return nothing_stored, status, sentence


def _classify(exc: BaseException, subject: str) -> tuple[bool, int, str]:
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return True, 422, f"No stream stores subject {subject}, so nothing was republished."
    if isinstance(exc, nats.js.errors.ServiceUnavailableError):
        return True, 503, f"JetStream is temporarily unavailable ({exc.description}); nothing was republished."
    if isinstance(exc, nats.js.errors.APIError):
        return True, 422, f"NATS refused the message ({exc.description}, error {exc.err_code})."
    if isinstance(exc, (nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError,
                        nats.errors.MaxPayloadError, nats.errors.BadHeaderError, nats.errors.BadSubjectError)):
        return True, 503, f"The message could not be sent ({type(exc).__name__}: {exc}); nothing was republished."
    reason = str(exc) if isinstance(exc, NatsUnavailable) else f"no answer from NATS ({type(exc).__name__})"
    return False, 503, (f"{reason}. The republish may still arrive; it will be completed with the same "
                        "msgId once NATS answers, and nothing is published twice.")


# --- the publish -------------------------------------------------------------------------------

def nats_unreachable(rt) -> str | None:
    """Why NATS cannot be used now (a sentence), or None when it is connected."""
    if rt.bridge is None:
        return "NATS is not connected (the dashboard's background services are not running)"
    if not rt.bridge.state.connected:
        return f"NATS is not reachable ({rt.bridge.state.last_error or 'connecting'})"
    return None


def publish_intent(rt, intent: Intent, *, recovered: bool = False) -> Published:
    """Publish a committed intent with its msgId and record the outcome; raise Refused or NatsDown."""
    start_flight([intent])
    try:
        fault_point("after_intent", intent)
        down = nats_unreachable(rt)
        if down and intent.resumed:
            raise NatsDown(f"{down}. The republish (msgId {intent.msg_id}) is completed with that msgId "
                           "when NATS is back; nothing is published twice.", in_doubt=True, entry_id=intent.entry_id)
        if down:
            with write_transaction(rt.engine) as conn:
                record_failed(conn, [(intent, down)], recovered=recovered)
            raise NatsDown(f"{down}; nothing was republished and entry {intent.entry_id} is as it was. "
                           "Try again when NATS is back.", entry_id=intent.entry_id)
        timeout = rt.settings.request_timeout
        try:
            ack = rt.bridge.call(lambda: rt.bridge.js.publish(intent.subject, intent.payload,
                                                              headers=dict(intent.headers), timeout=timeout),
                                 timeout + 1.0)
        except Exception as exc:
            nothing_stored, status, sentence = classify_failure(exc, intent)
            with write_transaction(rt.engine) as conn:
                if nothing_stored:
                    record_failed(conn, [(intent, sentence)], recovered=recovered)
                else:
                    mark_in_doubt(conn, [intent], sentence)
            error = (Refused if status == 422 else NatsDown)
            if nothing_stored:
                sentence += f" Entry {intent.entry_id} is as it was."
            raise error(sentence, entry_id=intent.entry_id) from None
        fault_point("after_publish", intent)
        with write_transaction(rt.engine) as conn:
            record_published(conn, [(intent, ack)], recovered=recovered)
        return Published(intent.msg_id, ack.stream, ack.seq, bool(ack.duplicate))
    finally:
        end_flight([intent])


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


# --- recovery ----------------------------------------------------------------------------------

def recover_pending(rt, *, older_than: float = 0.0) -> int:
    """Finish intents left pending (a crash, an unanswered publish) with their own msgId.

    Returns how many were finished. Past the target stream's duplicate window the broker no
    longer recognises the msgId, so the stream is searched for it before publishing.
    """
    if nats_unreachable(rt):
        return 0
    cutoff = utcnow() - timedelta(seconds=older_than)
    with rt.engine.connect() as conn:
        rows = conn.execute(select(INTENTS).where(INTENTS.c.state == "pending", INTENTS.c.created_at <= cutoff)
                            .order_by(INTENTS.c.id)).all()
    finished = 0
    for intent in map(Intent.from_row, rows):
        intent.resumed = True  # whether it was sent before the crash is unknown
        with _in_flight_lock:
            if intent.msg_id in _in_flight:
                continue
        try:
            found = rt.bridge.call(lambda: find_stored(rt.bridge.js, intent), rt.settings.request_timeout + 30)
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
            break
    return finished


async def find_stored(js, intent: Intent):
    """The PubAck of an intent's message if its stream holds it and the duplicate window has
    passed (within the window a publish with the same msgId is the safe, cheaper check)."""
    import asyncio

    from nats.js.api import ConsumerConfig, DeliverPolicy, PubAck

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
            if (msg.headers or {}).get("Nats-Msg-Id") == intent.msg_id:
                return PubAck(stream=stream, seq=msg.metadata.sequence.stream, duplicate=True)
            if msg.metadata.num_pending == 0:
                return None
    finally:
        await sub.unsubscribe()


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
