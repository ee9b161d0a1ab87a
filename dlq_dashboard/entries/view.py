"""An entry as every renderer sees it (EntryView), and a page of them."""

from __future__ import annotations

import base64
from dataclasses import dataclass, fields
from datetime import datetime
from operator import itemgetter
from typing import Any

import orjson

from ..db.models import Entry
from ..scopes import DEFAULT_SOURCE
from ..surrogates import loads_shown
from .shape import entry_json
from .traces import trace_id_of, trace_url

ENTRIES = Entry.__table__


def decode_text(payload: bytes) -> str | None:
    """The payload as text, or None when it is not UTF-8."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _json_or_none(raw):
    return orjson.loads(raw) if raw else None


_NOT_STORED = ("history", "actions", "payload_hidden", "hidden_values", "payload_size", "key_fields",
               "trace_template")


@dataclass
class EntryView:
    """An entry as every renderer sees it: its stored columns, JSON text parsed."""

    id: int
    status: str
    version: int
    dlq_stream: str | None
    dlq_seq: int | None
    original_subject: str | None
    original_stream: str | None
    original_seq: int | None
    consumer: str | None
    original_msg_id: str | None
    reason: str | None
    error: str | None
    schema_errors: list | None
    deliveries: int | None
    failed_at: datetime | None
    received_at: datetime
    headers: dict[str, list[str]]
    payload: bytes
    payload_available: bool
    replay_of: str | None
    sources: str
    notes: list[str]
    closed_by: str | None
    closed_at: datetime | None
    close_note: str | None
    # The source it was mirrored from (SPEC section 12); its actions go out through that source.
    source: str = DEFAULT_SOURCE
    # When its DLQ copy joined an entry its advisory made first (received_at is the advisory's).
    dlq_received_at: datetime | None = None
    history: list[dict] | None = None
    actions: list[dict] | None = None
    # Set on the copy a viewer sees under DLQ_MASK (masking.py): the payload is hidden
    # whole, and the values hidden (to hide them in other texts about the entry too).
    payload_hidden: bool = False
    hidden_values: tuple[str, ...] = ()
    # Set on the list's rows: the whole payload's size when only its start was read (then
    # ``payload`` is that start), and the key fields' values (DLQ_LIST_FIELDS) by label.
    payload_size: int | None = None
    key_fields: dict[str, str | None] | None = None
    # DLQ_TRACE_URL, set by the store that read the entry: trace_url fills it in.
    trace_template: str | None = None

    @classmethod
    def from_row(cls, row, trace_template: str | None = None) -> "EntryView":
        """Build from a row of ``select(entries)`` (every column, in table order); ``trace_template``
        is DLQ_TRACE_URL."""
        # By position and with orjson: this runs for every row of a page or an export, and
        # is a fifth of an export's time this way (bench/bench_export.py).
        values = list(_STORED_COLUMNS(row))
        for index, convert in _CONVERSIONS:
            values[index] = convert(values[index])
        return cls(*values, trace_template=trace_template)

    @property
    def payload_text(self) -> str | None:
        """The payload as text, None when it is not UTF-8."""
        return decode_text(self.payload)

    @property
    def payload_base64(self) -> str:
        """The payload, byte for byte, as base64."""
        return base64.b64encode(self.payload).decode()

    @property
    def trace_id(self) -> str | None:
        """The trace id of a valid W3C ``traceparent`` among the headers, else None (traces.py).
        Read from the headers as they are shown: a viewer's mask hiding the header hides it too."""
        return trace_id_of(self.headers)

    @property
    def trace_url(self) -> str | None:
        """Where the trace opens (DLQ_TRACE_URL), None without a trace id or without the setting."""
        # Without the setting the headers are not read again (a row's JSON has read its trace id).
        return trace_url(self.trace_template, self.trace_id) if self.trace_template else None

    @property
    def dlq_ref(self) -> str | None:
        """``<dlq stream>:<seq>``, how Dlq-Replay-Of names this entry."""
        return f"{self.dlq_stream}:{self.dlq_seq}" if self.dlq_stream and self.dlq_seq else None

    def to_dict(self) -> dict[str, Any]:
        """The entry's JSON shape (entries/shape.py), with its history and actions when loaded."""
        result = entry_json(self)
        if self.key_fields is not None:
            result["fields"] = self.key_fields
        if self.history is not None:
            result["history"] = self.history
        if self.actions is not None:
            result["actions"] = self.actions
        return result


# EntryView's stored fields are table columns of the same names (``source`` too); the others are not.
_STORED = [f.name for f in fields(EntryView) if f.name not in _NOT_STORED]
_STORED_COLUMNS = itemgetter(*(ENTRIES.columns.keys().index(name) for name in _STORED))
_CONVERSIONS = tuple((_STORED.index(name), convert) for name, convert in (
    ("schema_errors", _json_or_none),
    # Bytes of values that are not UTF-8 (kept for a republish as escapes) as U+FFFD: surrogates.py.
    ("headers", lambda raw: loads_shown(raw or "{}")),
    ("payload", lambda raw: bytes(raw or b"")),
    ("payload_available", bool),
    ("notes", lambda raw: orjson.loads(raw or "[]")),
))


@dataclass
class Page:
    """One page of entries and the cursor of the next (None on the last page); for a search,
    how far the search index covers (``search``: ingest/search_index.py SearchLag)."""

    entries: list[EntryView]
    next_cursor: str | None
    search: Any = None

    def to_dict(self) -> dict[str, Any]:
        answer = {"entries": [e.to_dict() for e in self.entries], "next_cursor": self.next_cursor}
        if self.search is not None:
            answer["search"] = self.search.to_dict()
        return answer
