"""Deciding whether an action may be done: the version the operator saw, the entry's status,
a republish still waiting for NATS's answer, the schema. Each decision reads the entry inside
the caller's transaction and raises an ActionError, or says what to write.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from sqlalchemy import Connection, select

from dlq_consumer import headers as contract

from ..db.models import Entry
from ..db.rows import insert_rows, update_rows
from ..entries.schemas import ValidationResult
from ..entries.view import EntryView
from ..errors import EntryNotFound
from ..scopes import DEFAULT_SOURCE, subject_matches
from ..sources import acting_source
from ..surrogates import dumps_kept, loads_kept
from ..times import utcnow
from ..unpacking import GZIP_BYTES, GZIP_MAGIC, compression_of, decompressed_whole, judged, read_as_declared
from .context import ActionContext
from .errors import AlreadyRepublished, Conflict, EmptyPayload, InFlight, Refused, SchemaRefused
from .intents import INTENTS, Intent, Published, entry_ref, republish_headers, republish_msg_id
from .publishing import nats_unreachable, no_stream_refusal, not_configured, of_source, subject_refusal

ENTRIES = Entry.__table__
#: The statuses an entry can be republished from (a closed one is reopened first).
REPUBLISHABLE = ("open", "republished")


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


def load_entry(conn: Connection, entry_id: int):
    """The entry row, or EntryNotFound; inside a write transaction, so on PostgreSQL the row is
    locked until it commits (a second replica deciding on the same entry waits and sees the
    change; on SQLite the transaction holds the write lock already)."""
    query = select(ENTRIES).where(ENTRIES.c.id == entry_id)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None:
        raise EntryNotFound(entry_id)
    return row._mapping


def locking(conn: Connection, query):
    """``query`` of entries locking them until the transaction ends, in id order, on PostgreSQL
    (SQLite's write transaction holds the lock already): a window a job decides on (closes, or
    claims for republishing) is decided and changed in its transaction only. Another action on
    one of them waits, then sees what it committed (a pending intent, a new version); the same
    order keeps two jobs over the same entries from locking each other."""
    return query.order_by(ENTRIES.c.id).with_for_update() if conn.dialect.name == "postgresql" else query


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

# Whether each type of entry seen (a dict, a row's mapping, an EntryView, a row) is a Mapping:
# isinstance against typing's Mapping walks the ABC's registry, a few microseconds each time,
# five times an entry of a bulk republish.
_IS_MAPPING: dict[type, bool] = {}


def _is_mapping(entry: Any) -> bool:
    kind = type(entry)
    found = _IS_MAPPING.get(kind)
    if found is None:
        found = _IS_MAPPING[kind] = isinstance(entry, Mapping)
    return found


def _field(entry: Mapping | EntryView, name: str) -> Any:
    return entry[name] if _is_mapping(entry) else getattr(entry, name)


def edited_from(entry: Mapping | EntryView) -> tuple[bytes, bool]:
    """What an edit of the entry's payload starts from (the editor, a patch job), and whether it
    is the payload decompressed: gzip bytes no header declares (republish_refusal lets those be
    edited) are edited as what they hold, and the edit is republished as it stands."""
    stored = bytes(_field(entry, "payload") or b"")
    if stored[:2] == GZIP_MAGIC and compression_of(_field(entry, "headers"), stored) == GZIP_BYTES:
        unpacked = decompressed_whole(stored)
        if unpacked is not None:
            return unpacked, True
    return stored, False


def _status_sentence(entry_id: int, status: str, name: str | None = None) -> str:
    return f"{name or f'Entry {entry_id}'} is {status}; reopen it before republishing."


def no_stream_sentence(subject: str) -> str:
    """Why a republish to ``subject`` cannot work when no stream stores it."""
    return f"No stream stores subject {subject}: a republish would be refused."


def source_of(entry: Mapping | EntryView) -> str:
    """The source an entry was mirrored from (SPEC section 12): its actions go out through it."""
    found = entry.get("source") if _is_mapping(entry) else getattr(entry, "source", None)
    return found or DEFAULT_SOURCE


def source_refusal(rt: ActionContext, source: str, entry_id: int | None = None,
                   subject: str | None = None) -> str | None:
    """Why nothing can be republished through ``source`` (a sentence), or None: the source is
    not configured here (taken out of DLQ_CONFIG since its entries were mirrored); with
    ``subject``, also when that is one of the source's dead-letter subjects (DLQ_SUBJECTS):
    republished there, the message would be dead-lettered again, headers and all. An old name of a
    renamed_from acts through the source that gives it."""
    source = acting_source(rt.settings, source)
    if source not in rt.feeds:
        what = f"entry {entry_id}" if entry_id is not None else "the entry"
        return f"{not_configured(source)}, so {what} cannot be republished from this dashboard."
    if subject and any(subject_matches(p, subject) for p in rt.feeds[source].settings.dlq_subjects):
        return (f"Its {contract.ORIGINAL_SUBJECT} {subject} is a dead-letter subject (DLQ_SUBJECTS): republished "
                "there it would be dead-lettered again, so it is not republished.")
    return None


def source_verdict(rt: ActionContext, source: str, entry_id: int | None = None,
                   subject: str | None = None) -> str | None:
    """What the entry page says about republishing through ``source`` now: not configured, a
    dead-letter subject, or (with several sources) its NATS unreachable; None when it can be
    asked. With one source the page says NATS is down the way every page does (the banner, the
    disabled buttons)."""
    refusal = source_refusal(rt, source, entry_id, subject)
    if refusal or len(rt.feeds) <= 1:
        return refusal
    return nats_unreachable(rt, source)


def republish_refusal(entry: Mapping | EntryView, *, payload: bytes | None = None, edit: bool = False,
                      status: bool = False, name: str | None = None,
                      headers: Mapping[str, Any] | None = None) -> str | None:
    """Why this entry cannot be republished (``payload``: with this edited payload; ``edit``:
    why it cannot be edited and republished), as one sentence, or None when it can.

    The one place these rules live: the entry page disables its buttons with the sentence and
    the republish request is refused with it (decide_republish). ``status`` adds the status
    rule (the request answers it as a conflict instead). Whether a stream stores the subject is
    NATS's to say: the page asks (actions/streams.py, no_stream_sentence), the publish is refused.
    ``name`` is what the sentence calls the entry instead of "Entry <id>" (a bulk preview counts
    alike entries under one sentence: "The entry"). ``headers``: the entry's, already parsed.
    """
    entry_id = _field(entry, "id")
    who = name or f"Entry {entry_id}"
    if status and _field(entry, "status") not in REPUBLISHABLE:
        return _status_sentence(entry_id, _field(entry, "status"), name)
    if payload is not None and not payload:
        # An editor emptied, an API client's "" (a script's encoding of nothing): never a fix. The
        # command line says it of an empty --payload-file too (exit 2); a patch or a repair is JSON.
        return (f"The edited payload of {f'{name[0].lower()}{name[1:]}' if name else f'entry {entry_id}'} is empty; "
                "nothing was republished. Send the payload to republish, or none to republish the original.")
    subject = _field(entry, "original_subject")
    if not subject:
        return f"{who} has no {contract.ORIGINAL_SUBJECT}, so there is nowhere to republish it."
    refused = subject_refusal(subject)
    if refused:
        return refused
    given = subjects_given(_field(entry, "headers") if headers is None else headers)
    if len(given) > 1:
        listed = ", ".join(repr(s) for s in given[:5]) + (f" and {len(given) - 5} more" if len(given) > 5 else "")
        return (f"{who} gives {contract.ORIGINAL_SUBJECT} {len(given)} different values ({listed}): where it "
                "belongs is not certain, so it is not republished. Close it, or have its service dead-letter it again.")
    stored = bytes(_field(entry, "payload") or b"")
    # The original headers go with the republish: a Content-Encoding holds for an edited payload too.
    how = compression_of(_field(entry, "headers") if headers is None else headers,
                         stored if payload is None else payload)
    if how:
        owner = f"{name[0].lower()}{name[1:]}" if name else f"entry {entry_id}"
        if how == GZIP_BYTES and payload is None and decompressed_whole(stored) is not None:
            # Compressed by a producer without a header saying so: the editor opens it
            # decompressed, and what it republishes is the text (no header makes it gzip again).
            if edit:
                return None
            return (f"The payload of {owner} is compressed ({how}), which its consumer cannot read: it is "
                    "not republished as it is. Edit and republish (or Repair by schema, for many) sends it decompressed.")
        if payload is None and read_as_declared(how, stored) is not None:
            # Declared (gzip, deflate) and readable: republished as stored with its header,
            # judged decompressed; an edit would have to compress it again.
            if not edit:
                return None
            return (f"The payload of {owner} is compressed ({how}): it is read and validated decompressed "
                    "but not edited here. Republish it as it is (its Content-Encoding goes with it).")
        return (f"The payload of {owner} is compressed ({how}): it cannot be validated or edited here, "
                "so it is not republished from the dashboard.")
    if payload is None and not edit and not _field(entry, "payload_available"):
        return (f"{who} has no payload (the source stream no longer had it); "
                "edit one in to republish.")
    return None


def subjects_given(headers: Mapping[str, Any] | str | None) -> list[str]:
    """The different values of Dlq-Original-Subject in an entry's headers (names in any case),
    in order: the contract gives it one (ingest/parse.py notes one given more than once)."""
    if isinstance(headers, str):
        headers = loads_kept(headers or "{}")
    found: dict[str, None] = {}
    for name, values in (headers or {}).items():
        if isinstance(name, str) and name.lower() == H_SUBJECT:
            found.update((str(v), None) for v in (values if isinstance(values, list) else [values]))
    return list(found)


H_SUBJECT = contract.ORIGINAL_SUBJECT.lower()


def decide_republish(rt: ActionContext, entry: Mapping, version: int, existing: Intent | None, pending: list[Intent], *,
                     installation: str, actor: str, payload: bytes | None = None, force: bool = False,
                     job_id: int | None = None, resume_pending: bool = False,
                     now: datetime | None = None) -> tuple[str, Intent]:
    """Decide what a republish request means; raise an ActionError when it cannot be done.

    Returns ("new", intent) to insert, ("retry", intent) to reuse a failed intent's row, or
    ("resume", intent) to publish again an intent that is pending and not in flight.
    ``existing``: the intent of this decision (intents.decision_intent), ``installation``: the
    database's installation id (db/installation.py), which a new msgId names.
    ``resume_pending``: the caller owns the intent (a job holding its lease), so only this
    process's publishes count as in flight; an intent of another job (or of a request) is its
    publisher's while it is young, as for a request: two jobs over one entry both published it.
    """
    entry_id = entry["id"]
    if existing is not None and existing.state == "published":
        raise AlreadyRepublished(f"Entry {entry_id} was already republished at version {version} "
                                 f"(msgId {existing.msg_id}); nothing more was published.",
                                 entry_id=entry_id, seen_version=version,
                                 publish=Published(existing.msg_id, existing.stream, existing.seq, existing.duplicate))
    if existing is not None and existing.state == "pending":
        if rt.flights.busy(existing, request_timeout=rt.settings.request_timeout,
                           other_processes=not resume_pending or existing.job_id != job_id):
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
        raise Conflict(_status_sentence(entry_id, entry["status"]), entry_id=entry_id, seen_version=version)
    headers = loads_kept(entry["headers"] or "{}")  # bytes that are not UTF-8 go out as they came
    source = source_of(entry)
    refusal = republish_refusal(entry, payload=payload, headers=headers) or source_refusal(
        rt, source, entry_id, entry["original_subject"])
    if refusal:  # an empty payload is republish_refusal's first word on an edit
        raise (EmptyPayload if payload is not None and not payload else Refused)(refusal, entry_id=entry_id)
    subject = entry["original_subject"]
    original = bytes(entry["payload"] or b"")
    body = original if payload is None else payload
    verdict = rt.schemas.validate(subject, judged(headers, body)) if rt.schemas.judges else _NO_SCHEMA
    if verdict.unusable and not force:
        raise SchemaRefused(f"Republishing it needs the override: the payload cannot be judged, as the "
                            f"{verdict.unusable}.", schema=None, entry_id=entry_id, unusable=verdict.unusable)
    if not verdict.valid and not force:
        first = verdict.errors[0]
        raise SchemaRefused(f"The payload does not pass the current schema {verdict.schema} "
                            f"({first.path or '/'}: {first.message}); republishing it needs the override.",
                            schema=verdict.schema, entry_id=entry_id, errors=[e.to_dict() for e in verdict.errors])
    msg_id = republish_msg_id(entry, version, installation)
    headers = republish_headers(headers, msg_id, entry_ref(entry))
    intent = Intent(id=existing.id if existing else None, entry_id=entry_id, version=version, msg_id=msg_id,
                    subject=subject, payload=body, headers=headers, edited=body != original, actor=actor,
                    job_id=job_id, created_at=now or utcnow(), forced=not verdict.valid,
                    source=source)
    missing = no_stream_refusal(rt, intent)  # a core subscriber would take it, and no stream answer
    if missing:
        raise Refused(of_source(rt, source, missing), entry_id=entry_id)
    return ("retry" if existing else "new"), intent


def write_claims(conn: Connection, claims: list[tuple[str, Intent]]) -> None:
    """Commit new intents; resumed ones need no write; a retried one (a failed intent of the same
    decision) is written over its row, with the msgId it is sent with now. The entry's version is
    raised only when the outcome is recorded: until then the pending intent itself refuses every
    other action. Intents are known by their msgId (unique) from here on."""
    def values(i: Intent) -> dict[str, Any]:
        return {"msg_id": i.msg_id, "entry_id": i.entry_id, "version": i.version, "subject": i.subject,
                "payload": i.payload, "headers": dumps_kept(i.headers), "edited": i.edited,
                "actor": i.actor, "job_id": i.job_id, "created_at": i.created_at, "source": i.source}

    insert_rows(conn, INTENTS, [{**values(i), "state": "pending"} for kind, i in claims if kind == "new"])
    update_rows(conn, INTENTS, "id", [{"id": i.id, **values(i)} for kind, i in claims if kind == "retry"],
                constants={"state": "pending", "error": None})


def decide_close(entry: Mapping, version: int, pending: list[Intent]) -> None:
    """Raise unless the entry can be closed at ``version``."""
    _check_nothing_pending(pending, entry["id"], version)
    _check_version(entry, version)
    if entry["status"] == "closed":
        raise Conflict(f"Entry {entry['id']} is already closed.", entry_id=entry["id"], seen_version=version)


def close_values(actor: str, note: str | None, now: datetime) -> dict[str, Any]:
    """The columns a close sets (the version is raised by the caller's WHERE)."""
    return {"status": "closed", "closed_by": actor, "closed_at": now, "close_note": note, "updated_at": now}


def reopen_values(now: datetime) -> dict[str, Any]:
    """The columns a reopen sets (the version is raised by the caller's WHERE)."""
    return {"status": "open", "closed_by": None, "closed_at": None, "close_note": None, "updated_at": now}


def decide_reopen(entry: Mapping, version: int, pending: list[Intent]) -> None:
    """Raise unless the entry can be reopened at ``version``."""
    _check_nothing_pending(pending, entry["id"], version)
    _check_version(entry, version)
    if entry["status"] == "open":
        raise Conflict(f"Entry {entry['id']} is already open.", entry_id=entry["id"], seen_version=version)
