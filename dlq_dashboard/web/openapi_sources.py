"""Parts of the OpenAPI document (web/openapi.py) about sources (SPEC section 12): GET
/api/sources (web/sources.py) and what /healthz says of each source."""

from __future__ import annotations

from ..entries.shape import BOOL, INT, STR, TIME
from ..entries.shape import nullable as _nullable
from ..entries.shape import schema_ref as _ref
from .openapi_parts import errors as _errors
from .openapi_parts import json_answer as _json

_DATE = {"type": ["string", "null"], "format": "date-time"}

STREAM_STATE = {
    "type": "object", "required": ["name", "last_seq", "stream_last_seq", "lag", "error"],
    "properties": {
        "name": STR,
        "last_seq": {**_nullable(INT), "description": "The last sequence committed to the database."},
        "stream_last_seq": {**_nullable(INT), "description": "The stream's last sequence as the mirror last saw "
                            "it (where another process mirrors the source, as that one reported it last, a "
                            "few seconds ago at most; without a current report, as NATS answers it now); null "
                            "while the source's NATS is not usable, and while the mirror could not read the stream (one JetStream will "
                            "not make, JetStream not enabled for the account): unknown, not 0."},
        "lag": {**_nullable(INT), "description": "Messages not yet mirrored: the stream's last sequence minus "
                "what is committed (as /healthz counts it where another process mirrors the source and its "
                "report is not current); null while the stream's last sequence is unknown."},
        "error": {**_nullable(STR), "description": "Why the stream is stuck (a write failing, retried until it "
                  "succeeds); null while it is not."},
        "stuck_since": _DATE, "behind_since": _DATE,
    },
}

SCHEMAS: dict[str, dict] = {
    "SourceStream": STREAM_STATE,
    "Source": {
        "type": "object", "required": ["name", "status", "mirror_lag", "open", "last_hour", "streams"],
        "properties": {
            "name": STR,
            "status": {"type": "string", "enum": ["ok", "lagging", "stuck", "unreachable"],
                       "description": "From the source's connection and mirror, in memory (docs/sources.md)."},
            "mirror_lag": {**_nullable(INT), "description": "Messages not yet mirrored over its streams; null "
                           "where this process does not mirror the source."},
            "open": {**INT, "description": "Open entries the caller may read."},
            "last_hour": {**INT, "description": "Entries that arrived in the last hour (any status now)."},
            "streams": {"type": "array", "items": _ref("SourceStream")},
            "nats": {"type": "object", "properties": {"connected": BOOL, "unreachable_since": _DATE,
                                                      "last_error": _nullable(STR)}},
            "mirrored_here": {**BOOL, "description": "Whether this process mirrors the source (holds its lease)."},
            "trend": {"type": "object", "properties": {
                "start": TIME, "minutes": {"type": "array", "items": INT,
                                           "description": "Arrivals in each minute of the last hour, the "
                                                          "current minute last."}}},
            "groups": {"type": "array", "description": "The biggest open groups (at most 5), largest first.",
                       "items": {"type": "object", "required": ["id", "label", "open", "url"], "properties": {
                           "id": INT, "subject": _nullable(STR), "reason": _nullable(STR), "label": STR,
                           "open": INT, "state": STR, "url": STR, "entries_url": STR}}},
            "entries_url": {**STR, "description": "The list of the source's entries."},
            "groups_url": {**STR, "description": "The groups of the source."},
        },
    },
    "SourceList": {"type": "object", "required": ["sources"],
                   "properties": {"sources": {"type": "array", "items": _ref("Source")}}},
    "SourceHealth": {
        "type": "object", "required": ["status", "nats", "mirror_lag", "mirror"],
        "properties": {"status": {"type": "string", "enum": ["ok", "degraded"]},
                       "nats": {"type": "object"}, "mirror_lag": _nullable(INT), "mirror": {"type": "object"}},
    },
}

#: /healthz's ``sources`` (only with several sources): each source's health, by name.
HEALTH_SOURCES = {"type": "object", "additionalProperties": _ref("SourceHealth"),
                  "description": "With several sources (DLQ_CONFIG): each source's NATS state, mirror and lag; "
                                 "the top fields are the first source's."}

OPERATIONS: dict[tuple[str, str], dict] = {
    ("get", "/api/sources"): {
        "operationId": "listSources", "tags": ["operations"],
        "summary": "Each source: state, mirror lag and streams, open entries, the last hour, biggest open groups",
        "description": ("In DLQ_CONFIG's order. A scoped caller's counts are of the entries inside their scopes; "
                        "a source no scope of theirs reaches is left out."),
        "responses": {"200": _json(_ref("SourceList"), "The sources."), **_errors(401, 403)},
    },
}
