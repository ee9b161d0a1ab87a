"""One entry with everything its page and its JSON say about it, as a reader may see it.

``build_entry_detail`` reads it once and ``EntryDetail`` holds it; the entry page (web/pages.py),
GET /api/entries/<id> (web/api.py) and ``entries show`` (cli/entries.py) all render that one
value, as Datasette's row page and its JSON are both made from one context: the verdict, the
group and the replays cannot differ between the two.

What the reader may see is decided by the visibility layer (visible.py): the entry, each
replay, the original, the republishes and the group's label pass through it, and the schema's
messages hide what the entry as seen hides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlq_consumer import headers as contract

from ..actions.decisions import edited_from
from ..entries.schemas import SchemaRegistry
from ..entries.sent import LastSent, last_sent
from ..entries.shape import BOOL, INT, STATUSES, STR, TIME, nullable, schema_ref
from ..entries.store import Store
from ..entries.view import EntryView
from ..masking import Mask
from ..times import format_time
from ..unpacking import GZIP_BYTES, compression_of, decompressed_whole, read_as_declared
from . import visible
from .reader import Reader

#: Why the current schema's verdict is missing (``SchemaVerdict.error``).
NOT_AVAILABLE = "Not validated: the payload is not available."
HIDDEN = "Not validated: the payload is hidden from viewers (DLQ_MASK)."
TOO_DEEP = "The payload nests too deeply to be validated."
#: Why a payload its Content-Encoding declares is not validated (unpacking.read_as_declared).
UNREAD = "does not decompress here (an encoding other than gzip or deflate, more than 256 KiB, or cut short)"


@dataclass
class SchemaVerdict:
    """The current schema's verdict on an entry's payload as stored, its messages as the reader
    may see them. ``error`` says why it was not validated (then ``valid`` is None)."""

    schema: str | None = None  # the file covering the subject; None when none does
    errors: list[dict[str, Any]] = field(default_factory=list)  # {"path": JSON Pointer, "message"}
    error: str | None = None
    read: bool = True  # the payload was read as JSON (one that is not has nothing to repair)
    unpacks: bool = False  # gzip bytes no header declares, that decompress (a repair decompresses them first)
    #: Gzip bytes no header declares, read decompressed: whether the text inside passes (a
    #: producer that compresses without saying so fails on its bytes alone).
    decompressed: Decompressed | None = None

    @property
    def valid(self) -> bool | None:
        """Whether the payload passes the current schema (no schema: nothing refuses it)."""
        return None if self.error else not self.errors

    @property
    def repairable(self) -> bool:
        """Whether a repair by the schema has something to work on: a JSON payload it fails, or
        gzip bytes it fails that a repair decompresses first (actions/bulk/repairing.py)."""
        return self.valid is False and (self.read or self.unpacks)

    def to_dict(self) -> dict[str, Any]:
        """GET /api/entries/<id>'s ``current_schema`` (web/openapi.py SchemaVerdict)."""
        return {"schema": self.schema, "valid": self.valid, "errors": self.errors, "error": self.error,
                "decompressed": self.decompressed.to_dict() if self.decompressed else None}


@dataclass(frozen=True)
class Decompressed:
    """The current schema's verdict on a compressed payload read decompressed (the entry page's
    "Decompressed, it passes ..."); its messages masked as the verdict's own."""

    compression: str  # "gzip bytes" (unpacking.compression_of)
    errors: list[dict[str, Any]]

    @property
    def valid(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {"compression": self.compression, "valid": self.valid, "errors": self.errors}


@dataclass(frozen=True)
class GroupRef:
    """The failure group an entry belongs to: its id and its label as the reader may see it."""

    id: int
    label: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label}


@dataclass
class EntryDetail:
    """An entry as a reader may see it, with what its page shows beside it.

    - ``entry``: the entry with its history and actions, masked for a viewer;
    - ``current_schema``: the current schema's verdict on its payload;
    - ``header_errors``: the schema errors its Dlq-Schema-Errors header lists (the readable ones);
    - ``group``: its failure group, or None;
    - ``replays``: the entries whose message was a republish of this one (oldest first), masked
      each as its own page masks it;
    - ``republishes``: its republish intents, oldest first, as the reader may see them;
    - ``last_sent``: the payload last sent and the current schema's verdict on it (None before
      any republish);
    - ``original``: for a replay, the entry it is a republish of, when this database holds it and
      the reader may read it;
    - ``scoped``: whether the reader's scopes limit what it reads. Without ``original``, such a
      reader is told only that the other entry is not among those it may read: whether this
      database holds it is not its to know (docs/scopes.md).
    """

    entry: EntryView
    current_schema: SchemaVerdict
    header_errors: list[dict[str, Any]]
    group: GroupRef | None
    replays: list[EntryView]
    republishes: list[dict[str, Any]]
    last_sent: LastSent | None
    original: EntryView | None
    scoped: bool = False

    @property
    def failed_again(self) -> EntryView | None:
        """The newest replay: its republish failed again (whatever its status now)."""
        return self.replays[-1] if self.replays else None

    @property
    def pointers(self) -> list[str]:
        """The JSON Pointers the header's and the current schema's errors name, to mark in the payload."""
        unpacked = self.current_schema.decompressed
        return [e.get("path", "") for e in self.header_errors + self.current_schema.errors
                + (unpacked.errors if unpacked else [])]

    @property
    def schema_errors_given(self) -> bool:
        """Whether the message carries Dlq-Schema-Errors, read or not: a malformed one is told by
        the entry's note, not as a header missing."""
        return any(name.lower() == contract.SCHEMA_ERRORS.lower() for name in self.entry.headers or {})

    def to_dict(self) -> dict[str, Any]:
        """GET /api/entries/<id>: the entry's JSON with its history and actions, and what the
        page shows beside it (web/openapi.py EntryDetail; docs/api.md)."""
        failed = self.failed_again
        return {**self.entry.to_dict(),
                "last_sent": self.last_sent.to_dict() if self.last_sent else None,
                "failed_again": failed.id if failed else None,
                "current_schema": self.current_schema.to_dict(),
                "group": self.group.to_dict() if self.group else None,
                "replays": [replay_dict(r) for r in self.replays],
                "original": self.original.id if self.original else None,
                "dlq_received_at": format_time(self.entry.dlq_received_at)}


def replay_dict(replay: EntryView) -> dict[str, Any]:
    """A replay as GET /api/entries/<id>'s ``replays`` lists it (its own page has the rest)."""
    return {"id": replay.id, "status": replay.status, "reason": replay.reason, "error": replay.error,
            "original_msg_id": replay.original_msg_id, "failed_at": format_time(replay.failed_at),
            "received_at": format_time(replay.received_at)}


def build_entry_detail(store: Store, schemas: SchemaRegistry, entry_id: int, reader: Reader) -> EntryDetail:
    """The entry with this id as ``reader`` may see it, with its verdict, group, replays and
    republishes; EntryNotFound, a 404, when there is none."""
    stored, republishes = visible.jobs_shown(reader, store, visible.lookup(reader, store, entry_id),
                                             store.republishes_of(entry_id))
    seen = visible.entry(reader, stored)
    # By the msgId each republish was sent with first (a DLQ stream made again has a seq 7 in
    # each epoch), within the entry's source (another may have a DLQ stream of the same name).
    replays = visible.replays(reader, store.replays_of_entry(stored), of=seen)
    original = store.original_of(stored)
    if original is not None and not visible.covered(reader.reads, original):
        original = None  # as if this database did not hold it
    republishes_seen = visible.republishes(reader, republishes)
    group = visible.group_of(reader, store, seen)
    return EntryDetail(
        entry=seen, current_schema=_verdict(schemas, stored, seen),
        header_errors=[e for e in seen.schema_errors or [] if isinstance(e, dict)],
        group=GroupRef(group["id"], group["label"]) if group else None, replays=replays,
        republishes=republishes_seen,
        last_sent=last_sent(republishes, republishes_seen, stored.original_subject, schemas.validate),
        original=visible.entry(reader, original) if original is not None else None,
        scoped=reader.reads is not None)


def _verdict(schemas: SchemaRegistry, stored: EntryView, seen: EntryView) -> SchemaVerdict:
    # The stored payload is validated (a masked one would fail where "•••" stands); the messages
    # are shown with what ``seen``, the entry as the reader sees it, hides.
    if seen.payload_hidden:
        return SchemaVerdict(error=HIDDEN)
    if not seen.payload_available:
        return SchemaVerdict(error=NOT_AVAILABLE)
    how = compression_of(stored.headers, stored.payload)  # once: each ask below reads the headers' JSON
    declared = read_as_declared(how, stored.payload)
    if how and how != GZIP_BYTES and declared is None and schemas.for_subject(stored.original_subject) is not None:
        # Its bytes are not what its consumer reads, and what it reads cannot be had here.
        return SchemaVerdict(error=f"Not validated: the payload is compressed ({how}) and {UNREAD}.")
    try:
        # Declared compressed (Content-Encoding: gzip), as its consumer reads it and a republish
        # judges it; gzip bytes no header declares fail on their bytes, with the verdict on
        # what they hold beside it (``decompressed``).
        result = schemas.validate(stored.original_subject, stored.payload if declared is None else declared)
    except RecursionError:
        return SchemaVerdict(error=TOO_DEEP)
    if result.unusable:  # the file that would judge it could not be loaded: not valid, not invalid
        return SchemaVerdict(error=f"Not validated: {result.unusable}.")
    return SchemaVerdict(result.schema, _messages(result.errors, seen), read=result.read,
                         unpacks=not result.read and edited_from(stored)[1],
                         decompressed=_decompressed(schemas, stored, seen, how) if result.errors else None)


def _decompressed(schemas: SchemaRegistry, stored: EntryView, seen: EntryView, how: str | None) -> Decompressed | None:
    # Gzip bytes no header declares that the schema fails on their bytes, read whole within UNPACK_LIMIT.
    unpacked = decompressed_whole(stored.payload) if how == GZIP_BYTES else None
    if unpacked is None:
        return None
    try:
        result = schemas.validate(stored.original_subject, unpacked)
    except RecursionError:
        return None
    return Decompressed(how, _messages(result.errors, seen))


def _messages(errors, seen: EntryView) -> list[dict[str, Any]]:
    # The schema's messages may quote a value the entry as seen hides.
    return [{**e.to_dict(), "message": Mask.mask_text(e.message, seen.hidden_values)} for e in errors]


def detail_schemas() -> dict[str, dict]:
    """The OpenAPI schemas of GET /api/entries/<id>'s answer (web/openapi.py), beside the
    ``to_dict``s they describe; tests/test_openapi.py validates answers against them."""
    schema_name = "The current schema of the subject; null when none covers it."
    return {
        "EntryDetail": {
            "allOf": [schema_ref("Entry"), {
                "type": "object",
                "required": ["history", "actions", "last_sent", "failed_again", "current_schema", "group", "replays",
                             "original", "dlq_received_at"],
                "properties": {"history": {"type": "array", "items": schema_ref("HistoryEvent")},
                               "actions": {"type": "array", "items": schema_ref("AuditRecord")},
                               "last_sent": {"anyOf": [schema_ref("LastSent"), {"type": "null"}],
                                             "description": "The newest published republish; null before any."},
                               "failed_again": {**nullable(INT), "description": (
                                   "The newest entry whose message was a republish of this one: its "
                                   "republish failed again (the status stays as it is).")},
                               "current_schema": schema_ref("SchemaVerdict"),
                               "group": {"anyOf": [schema_ref("GroupRef"), {"type": "null"}],
                                         "description": "The entry's failure group; null when it has none."},
                               "replays": {"type": "array", "items": schema_ref("Replay"), "description": (
                                   "The entries whose message was a republish of this one, oldest first "
                                   "(the last is failed_again).")},
                               "original": {**nullable(INT), "description": (
                                   "For a republish that failed again (replay_of): the id of the entry it "
                                   "republished (by the msgId it was sent with, else by replay_of among the "
                                   "entries that were republished), null when this database holds none.")},
                               "dlq_received_at": {**nullable(TIME), "description": (
                                   "When the DLQ copy arrived, for an entry JetStream's advisory made first "
                                   "(received_at is the advisory's); null otherwise.")}},
            }],
        },
        "SchemaVerdict": {
            "type": "object", "required": ["schema", "valid", "errors", "error", "decompressed"],
            "description": "The current schema's verdict on the payload as stored, as the entry page shows it.",
            "properties": {
                "schema": {**nullable(STR), "description": schema_name},
                "valid": {**nullable(BOOL), "description": ("Whether the payload passes it now (true when no schema "
                                                             "covers the subject, and no file that could not be "
                                                             "loaded may); null when not validated.")},
                "errors": {"type": "array", "items": schema_ref("SchemaError")},
                "error": {**nullable(STR), "description": ("Why it was not validated (the payload not available, "
                                                            "hidden from viewers, or nested too deeply; the schema "
                                                            "file that covers the subject, or may, not usable: "
                                                            "its name and why).")},
                "decompressed": {"anyOf": [schema_ref("Decompressed"), {"type": "null"}], "description": (
                    "Gzip bytes no header declares (the schema fails them), validated decompressed; null "
                    "for any other payload, and when they do not decompress whole. A payload whose "
                    "Content-Encoding declares gzip or deflate is validated decompressed itself.")},
            },
        },
        "Decompressed": {
            "type": "object", "required": ["compression", "valid", "errors"],
            "properties": {
                "compression": {**STR, "description": 'How it is compressed: "gzip bytes" (no header says so).'},
                "valid": {**BOOL, "description": "Whether the payload decompressed passes the current schema."},
                "errors": {"type": "array", "items": schema_ref("SchemaError")},
            },
        },
        "GroupRef": {
            "type": "object", "required": ["id", "label"],
            "properties": {"id": INT,
                           "label": {**STR, "description": "The group's key as one line (masked for viewers)."}},
        },
        "Replay": {
            "type": "object",
            "required": ["id", "status", "reason", "error", "original_msg_id", "failed_at", "received_at"],
            "properties": {"id": INT, "status": {**STR, "enum": list(STATUSES)}, "reason": nullable(STR),
                           "error": {**nullable(STR), "description": "Masked for viewers as on the replay's own page."},
                           "original_msg_id": {**nullable(STR),
                                               "description": "The msgId of the republish that failed."},
                           "failed_at": nullable(TIME), "received_at": TIME},
        },
        "LastSent": {
            "type": "object",
            "required": ["actor", "at", "edited", "msg_id", "job_id", "hidden", "payload_base64", "schema", "valid",
                         "errors", "error"],
            "properties": {
                "actor": nullable(STR), "at": nullable(TIME), "msg_id": nullable(STR), "job_id": nullable(INT),
                "edited": {**BOOL, "description": "The payload sent differs from the original (by hand or a patch)."},
                "hidden": {**BOOL, "description": "DLQ_MASK hides this payload from the viewer asking."},
                "payload_base64": {**nullable(STR),
                                   "description": "The payload sent, byte for byte (masked for viewers)."},
                "schema": {**nullable(STR), "description": schema_name},
                "valid": {**nullable(BOOL), "description": "Whether the payload sent passes the current schema now."},
                "errors": {"type": "array", "items": schema_ref("SchemaError")},
                "error": {**nullable(STR), "description": "Why it could not be validated."},
            },
        },
    }
