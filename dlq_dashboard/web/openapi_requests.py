"""The OpenAPI schemas of the API's request bodies, merged into web/openapi.py's document, as
web/params.py reads them: one Version for every version a body sends, a bulk selection's ids and
filter, and which field names a body may hold (request_body)."""

from __future__ import annotations

from ..actions.bulk.jobs import JOB_ACTIONS
from ..actions.close import NOTE_MAX
from ..entries.filters import FILTERS
from ..entries.shape import BOOL, STR
from ..entries.shape import schema_ref as _ref
from ..numbers import ID_MAX, VERSION_MAX
from .params import API_FIELDS

NOTE = {**STR, "maxLength": NOTE_MAX, "description": f"At most {NOTE_MAX} characters; a longer note is a 400."}
#: Digits, blanks around them allowed, as a JSON body's ids and upto may come (numbers.whole_number).
DIGITS = {"type": "string", "pattern": r"^\s*[0-9]+\s*$", "description": "Its digits as text."}
ENTRY_ID = {"anyOf": [{"type": "integer", "minimum": 1, "maximum": ID_MAX}, DIGITS],
            "description": "An entry's id, from 1 to 2^63 - 1: a JSON number or its digits as text."}
#: A filter's value in a JSON body: text, or a number or a boolean read as JSON writes it; null is no filter.
FILTER_VALUE = {"type": ["string", "number", "boolean", "null"]}


def request_body(schema: dict) -> dict:
    """A request body's schema: its own fields; a field that only another request of the API takes
    (the version and note one client sends to every action) is left out, any other name is a 400
    (params.json_body)."""
    return {**schema, "type": "object", "propertyNames": {"enum": sorted(API_FIELDS)},
            "description": " ".join((schema.get("description", ""), (
                "A field that only another request of the API takes is left out; any other field not "
                "listed is a 400."))).strip()}


SELECTION = {
    "ids": {"type": ["array", "null"], "description": "Entries by id (null: none given).", "items": {"anyOf": [
        ENTRY_ID,
        {"type": "string", "pattern": r"^\s*[0-9]+\s*:\s*[0-9]+\s*$",
         "description": "id:version, as a form sends it (12:3)."},
        {"type": "object", "required": ["id"], "properties": {"id": ENTRY_ID, "version": _ref("Version")}}]}},
    "filter": {"anyOf": [_ref("Filter"), {"type": "null"}], "description": "null: no filter."},
    "only_valid": {**BOOL, "description": ("Take only entries whose payload passes its schema; for patch "
                                           "(default true), only those that pass it once patched: the "
                                           "others are skipped with the reason.")},
    "upto": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": ID_MAX}, DIGITS, {"const": ""}, {"type": "null"}],
             "description": "Leave out entries newer than this id (what a preview showed); \"\" or null: none."},
}

SCHEMAS: dict[str, dict] = {
    "Version": {"type": "integer", "minimum": 0, "maximum": VERSION_MAX,
                "description": (f"A version as seen, from 0 to {VERSION_MAX:,} (2^31 - 1), a JSON whole number: "
                                "text (\"3\"), a fraction or a boolean is a 400; a stale one gets 409.")},
    "RepublishRequest": request_body({
        "required": ["version"],
        "properties": {
            "version": {**_ref("Version"), "description": "The entry's version as seen; a stale one gets 409."},
            "payload_base64": {**STR, "contentEncoding": "base64",
                               "description": ("An edited payload; without it the stored one is sent. ASCII "
                                               "whitespace (lines) in it is skipped.")},
            "force": {**BOOL, "description": "Republish even though the payload fails its schema."},
        },
    }),
    "CloseRequest": request_body({"required": ["version"], "properties": {"version": _ref("Version"), "note": NOTE}}),
    "ReopenRequest": request_body({"required": ["version"], "properties": {"version": _ref("Version")}}),
    "Filter": {
        "type": "object",
        "description": ("The filters of GET /api/entries, and field.<label> for a key field (DLQ_LIST_FIELDS); "
                        "another name is a 400. A value is text, or a number or a boolean read as JSON writes "
                        "it (group may be the integer a group's filter gives); null is no filter; a list or "
                        "an object is a 400."),
        "properties": {**{f.name: FILTER_VALUE for f in FILTERS if not f.family}},
        "patternProperties": {r"^field\.": FILTER_VALUE},
        "additionalProperties": False,
    },
    "BulkRequest": request_body({
        "required": ["action"],
        "description": ("Select entries by ids or by filter (without status, or with any: open entries, closed ones for reopen; "
                        "a status the action cannot change is a 400). Each is taken at its version now, or at the one given with its id."),
        "properties": {
            "action": {"type": "string", "enum": list(JOB_ACTIONS),
                       "description": ("patch: apply ``patch`` to each payload, then republish the result; "
                                       "repair: coerce each payload by its current schema (docs/repair.md), then "
                                       "republish those that pass (the others skipped with the reason); reopen: "
                                       "open again closed or republished entries (open ones are skipped).")},
            "patch": {"type": "array", "items": {"type": "object", "required": ["op", "path"]},
                      "description": ("A JSON Patch (RFC 6902) for action patch. An entry it cannot apply to "
                                      "(not JSON, a path missing, a test failing) is skipped with the reason.")},
            **SELECTION,
            "note": NOTE,
            "force": {**BOOL, "description": "Republish payloads that fail their schema too."},
        },
    }),
    "RepairSelection": request_body({
        "description": "Entries chosen either by ids or by filter, as POST /api/bulk takes them.",
        "properties": {key: SELECTION[key] for key in ("ids", "filter", "upto")},
    }),
}
