"""The one declaration of an entry's outward shape: the fields of its JSON (SPEC section 6), in
order, each with its JSON Schema. The JSON of the API and the exports, the CSV columns and the
OpenAPI ``Entry`` schema are all made from ``ENTRY_FIELDS``; a field added here is in all three.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable

from ..times import format_time

#: An entry's status: open until someone republishes or closes it.
STATUSES = ("open", "republished", "closed")

STR, INT, BOOL = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
TIME = {"type": "string", "format": "date-time", "description": "RFC 3339, UTC."}


def nullable(schema: dict) -> dict:
    """The schema, or null."""
    return {**schema, "type": [schema["type"], "null"]}


def schema_ref(name: str) -> dict:
    """A reference to a schema of the OpenAPI document's components."""
    return {"$ref": f"#/components/schemas/{name}"}


@dataclass(frozen=True)
class EntryField:
    """One field of an entry's JSON: its name, its JSON Schema, and how it is read from an
    EntryView (the attribute ``source``, default the name, passed through ``encode``)."""

    name: str
    schema: dict
    description: str | None = None
    required: bool = True  # SPEC section 6 names it; the others are extras the dashboard adds
    source: str | None = None
    encode: Callable[[Any], Any] | None = None

    def json_schema(self) -> dict:
        """The field's schema with its description."""
        return {**self.schema, "description": self.description} if self.description else self.schema


def _sources(value: str) -> list[str]:
    return value.split(",")


ENTRY_FIELDS: tuple[EntryField, ...] = (
    EntryField("id", {**INT, "minimum": 1}),
    EntryField("status", {"type": "string", "enum": list(STATUSES)}),
    EntryField("version", {**INT, "minimum": 1}, "Raised by every change; actions send it back."),
    EntryField("dlq_stream", nullable(STR)),
    EntryField("dlq_seq", nullable(INT)),
    EntryField("original_subject", nullable(STR), "Where a republish goes; null: cannot."),
    EntryField("original_stream", nullable(STR)),
    EntryField("original_seq", nullable(INT)),
    EntryField("consumer", nullable(STR)),
    EntryField("original_msg_id", nullable(STR)),
    EntryField("reason", nullable(STR), "schema_invalid, max_deliveries, fatal, terminated, or as given."),
    EntryField("error", nullable(STR)),
    EntryField("schema_errors", {"type": ["array", "null"], "items": schema_ref("SchemaError")}),
    EntryField("deliveries", nullable(INT)),
    EntryField("failed_at", nullable(TIME), encode=format_time),
    EntryField("received_at", TIME, encode=format_time),
    EntryField("headers", {"type": "object", "additionalProperties": {"type": "array", "items": STR}},
               "Header name -> list of values, as received."),
    EntryField("payload_base64", {**STR, "contentEncoding": "base64"}, "The payload, byte for byte."),
    EntryField("payload_text", nullable(STR), "The payload as text; null when not UTF-8."),
    EntryField("payload_available", BOOL, "False when the source no longer held it."),
    EntryField("replay_of", nullable(STR), "<dlq stream>:<seq> of the entry republished."),
    EntryField("sources", {"type": "array", "items": {"type": "string", "enum": ["dlq", "advisory"]}},
               required=False, encode=_sources),
    EntryField("notes", {"type": "array", "items": STR}, "Fields that could not be parsed and were kept raw.",
               required=False),
    EntryField("closed_by", nullable(STR), required=False),
    EntryField("closed_at", nullable(TIME), required=False, encode=format_time),
    EntryField("close_note", nullable(STR), required=False),
    EntryField("trace_id", nullable({**STR, "pattern": "^[0-9a-f]{32}$"}),
               "The W3C trace id of the traceparent header; null without a valid one.", required=False),
    EntryField("trace_url", nullable({**STR, "format": "uri"}),
               "The trace in the tracing UI (DLQ_TRACE_URL); null without a trace id or the setting.",
               required=False),
    # Last, so the CSV's columns before it stay where they were.
    EntryField("source", STR, "The source it was mirrored from (SPEC section 12; \"default\" without DLQ_CONFIG)."),
)

#: The CSV export's columns: the JSON fields, in order.
CSV_COLUMNS = tuple(f.name for f in ENTRY_FIELDS)

# (name, getter, encoder) per field: to_dict runs for every row of a page or an export.
_READERS = tuple((f.name, attrgetter(f.source or f.name), f.encode) for f in ENTRY_FIELDS)


def entry_json(view: Any) -> dict[str, Any]:
    """An EntryView's fields as JSON values, in ENTRY_FIELDS order."""
    return {name: (encode(get(view)) if encode else get(view)) for name, get, encode in _READERS}


def entry_schema() -> dict:
    """The OpenAPI (JSON Schema 2020-12) schema of an entry."""
    return {
        "type": "object",
        "description": "One dead-lettered failure (SPEC section 6).",
        "required": [f.name for f in ENTRY_FIELDS if f.required],
        "properties": {f.name: f.json_schema() for f in ENTRY_FIELDS},
    }
