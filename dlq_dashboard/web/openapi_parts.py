"""Parts of the OpenAPI document (web/openapi.py): the helpers its operations are written with,
and the incident desk's operations and schemas (repair by the schema, the alert outbox, readiness)."""

from __future__ import annotations

from ..entries.filters import CURSOR_SCHEMA, FILTERS
from ..entries.shape import BOOL, INT, STR, TIME
from ..flags import ACCEPTED, FALSE_WORDS, TRUE_WORDS
from ..entries.shape import nullable as _nullable
from ..entries.shape import schema_ref as _ref
from ..entries.tallies import BOUND, FIELD_BOUND, SEARCH_BOUND


def json_answer(schema: dict, description: str) -> dict:
    """A JSON answer of ``schema``."""
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def errors(*codes: int) -> dict:
    """The document's error answers for these status codes."""
    return {str(code): {"$ref": f"#/components/responses/E{code}"} for code in codes}


def general_answers(operation: dict, *, from_memory: bool) -> dict:
    """``operation`` with the answers its route can give whatever it does: 413 and 415 where it
    takes a body (one over the limit, one not sent as application/json), 503 where it asks the
    database (an outage, or a statement that did not finish in time: docs/deploy.md); a route
    that answers from memory never meets the database."""
    more = {**(errors(413, 415) if "requestBody" in operation else {}), **({} if from_memory else errors(503))}
    if set(more) <= set(operation["responses"]):
        return operation
    return {**operation, "responses": dict(sorted({**more, **operation["responses"]}.items()))}


def query(name: str, description: str, schema: dict | None = None) -> dict:
    """An optional query parameter (a string unless ``schema`` says otherwise)."""
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema or STR}


_json, _errors, _query = json_answer, errors, query

#: One parameter per filter; not the key fields' (``field.<label>``): OpenAPI cannot name a family
#: of parameters (deepObject would be field[Customer]), so an operation that takes them says so in
#: its description and names the family in x-key-field-filters (with_key_fields).
FILTER_PARAMETERS = [_query(f.name, f.description, dict(f.schema)) for f in FILTERS if not f.family]
KEY_FIELD_FILTERS = next(f for f in FILTERS if f.family)
KEY_FIELDS_TEXT = (f"Key fields (DLQ_LIST_FIELDS) filter too, one query parameter for each label: "
                   f"{KEY_FIELD_FILTERS.name}=<value> (field.Customer=C-42) keeps the entries whose payload has "
                   "exactly that value there; an unknown label is a 400. OpenAPI cannot name such a family of "
                   "parameters: they are not listed among the parameters, and x-key-field-filters names them.")


def with_key_fields(operation: dict) -> dict:
    """``operation`` (one that takes the list's filters) saying that it takes the key fields' too."""
    return {**operation, "x-key-field-filters": KEY_FIELD_FILTERS.name,
            "description": " ".join(filter(None, (operation.get("description"), KEY_FIELDS_TEXT)))}
CURSOR = _query("cursor", "Opaque: next_cursor of the previous page (base64url text). Stable while new entries "
                          "arrive; one it did not make is a 400.", dict(CURSOR_SCHEMA))
#: A yes or no in a query (flags.truth): one of its words in any case, blanks around; empty: the default.
FLAG = {"type": "string", "pattern": "^\\s*(" + "|".join(
    "".join(f"[{c.upper()}{c}]" if c.isalpha() else c for c in word) for word in (*TRUE_WORDS, *FALSE_WORDS))
    + ")?\\s*$", "description": f"{ACCEPTED}, in any case"}

DESK_SCHEMAS: dict[str, dict] = {
    "GroupList": {
        "type": "object", "required": ["groups", "exact", "bound", "matched"],
        "properties": {"groups": {"type": "array", "items": _ref("Group")},
                       "exact": {**BOOL, "description": (
                           "False when a filter the kept counts do not hold matched more entries than are "
                           f"counted: a search (q) counts what the other filters keep of its newest "
                           f"{SEARCH_BOUND:,} matches, a key field (field.<label>) its newest {FIELD_BOUND:,}, "
                           f"another (stream, consumer, since, until) its newest {BOUND:,}.")},
                       "bound": {**_nullable(INT), "description": "The most matches counted when exact is false, "
                                                                   "else null."},
                       "matched": {**_nullable(INT), "description": (
                           "When exact is false, how many entries match in all where a key field's index "
                           f"counts it (its value all the filter selects, no status beside it; up to {BOUND:,}), "
                           "else null.")}},
    },
    "Summary": {
        "type": "object",
        "required": ["counts", "total", "exact", "bound", "matched", "first_received", "last_received"],
        "properties": {
            "counts": {"type": "object", "additionalProperties": INT,
                       "description": "Entries by status under the filters (their status aside)."},
            "total": {**INT, "description": "The counts added up."},
            "exact": {**BOOL, "description": (f"False when the numbers are an estimate: a search (q) counts what "
                                              f"the other filters keep of its newest {SEARCH_BOUND:,} matches, a "
                                              f"key field (field.<label>) its "
                                              f"newest {FIELD_BOUND:,}, another filter the kept counts do not "
                                              f"hold its newest {BOUND:,}; more matched, so each number is at "
                                              "least what it says.")},
            "bound": {**_nullable(INT), "description": ("The most matches counted when exact is false (a search's: "
                                                         "the most of its matches looked at), else null.")},
            "matched": {**_nullable(INT), "description": (
                "How many entries match in all: total when exact; when not, the count of a key field's "
                f"value in its index where that value (and status) is all the filter selects, up to {BOUND:,} "
                "(beyond, or for any other filter, null).")},
            "first_received": _nullable(TIME), "last_received": _nullable(TIME),
        },
    },
    "RepairReason": {
        "type": "object", "required": ["reason", "count", "examples"],
        "properties": {"reason": STR, "count": INT, "examples": {"type": "array", "items": INT,
                                                                "description": "A few of those entries' ids."}},
    },
    "RepairPreview": {
        "type": "object",
        "required": ["count", "pass", "still_fail", "cannot", "already_valid", "examples"],
        "description": "What repair by the schema would do to the selection, before a job starts.",
        "properties": {
            "count": {**INT, "description": "Entries selected."},
            "upto": {**_nullable(INT), "description": "The newest id selected: pass it to POST /api/bulk."},
            "filter": {"type": ["object", "null"]},
            "counted": INT, "bounded": BOOL, "total": INT,
            "pass": {**INT, "description": "Would pass the current schema once repaired, and be republished."},
            "still_fail": {**INT, "description": "Repaired, would still fail it: skipped."},
            "cannot": {**INT, "description": "Cannot be repaired (ambiguous, not JSON, no schema...): skipped."},
            "already_valid": {**INT, "description": "Already pass: nothing to repair, skipped."},
            "still_fail_reasons": {"type": "array", "items": _ref("RepairReason")},
            "cannot_reasons": {"type": "array", "items": _ref("RepairReason")},
            "examples": {"type": "array", "items": {
                "type": "object", "required": ["id", "changes", "diff"],
                "properties": {"id": INT, "diff": {"type": "array", "items": STR}, "decompressed": {
                    **BOOL, "description": "gzip bytes no header declares: the diff is from what they hold."},
                               "changes": {"type": "array", "items": {
                                   "type": "object", "properties": {"path": STR, "rule": STR}}}}}},
            "no_stream": {"type": "object", "additionalProperties": INT},
            "note": _nullable(STR),
            "sent": {**INT, "description": "Would reach a stream."},
        },
    },
    "Alert": {
        "type": "object",
        "required": ["id", "event_id", "event", "group_id", "target", "state", "attempts", "created_at"],
        "properties": {
            "id": INT, "event_id": STR, "event": STR, "group_id": INT, "group_subject": _nullable(STR),
            "group_label": {**_nullable(STR), "description": (
                "The group's key as one readable line, as /api/groups' label (null once the group is gone).")},
            "target": {**STR, "description": "The webhook URL without its user, password and query."},
            "state": {"type": "string", "enum": ["failed", "pending", "sent"]},
            "attempts": INT, "created_at": TIME,
            "last_error": {**_nullable(STR), "description": (
                "The last failed attempt's error; for a sent alert, the last failure before it was sent.")},
            "next_attempt_at": {**_nullable(TIME), "description": "The next try (null once sent)."},
            "sent_at": _nullable(TIME),
        },
    },
    "Ready": {
        "type": "object", "required": ["status"],
        "properties": {"status": {"type": "string", "enum": ["ready", "not ready"]},
                       "database": {"type": "object", "description": "Only when not ready.",
                                    "properties": {"connected": BOOL, "unreachable_since": _nullable(TIME)}}},
    },
    "AlertPage": {
        "type": "object", "required": ["alerts", "counts", "next_before"],
        "properties": {"alerts": {"type": "array", "items": _ref("Alert")},
                       "counts": {"type": "object", "additionalProperties": INT},
                       "next_before": {**_nullable(INT), "description": "Pass as before for the next page."}},
    },
}

DESK_OPERATIONS: dict[tuple[str, str], dict] = {
    ("post", "/api/repair/preview"): {
        "operationId": "previewRepair", "tags": ["actions"],
        "summary": "What repair by the schema would do to entries (would pass, still fail, cannot repair)",
        "description": ("Needs the operator role. Changes nothing; POST /api/bulk with action repair and the "
                        "same selection starts the job."),
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("RepairSelection")}}},
        "responses": {"200": _json(_ref("RepairPreview"), "The preview."), **_errors(400, 401, 403, 404)},
    },
    ("get", "/api/alerts"): {
        "operationId": "listAlerts", "tags": ["operations"],
        "summary": "The alert outbox, newest first: state, attempts, last error, next try, target",
        "description": "Needs the operator role.",
        "parameters": [_query("state", "Only alerts in this state.",
                              {"type": "string", "enum": ["failed", "pending", "sent"]}),
                       _query("before", "Only alerts with a smaller id (next_before of the page before).",
                              {"type": "integer", "minimum": 1}),
                       _query("limit", "The most alerts, 1 to 500 (default 100).",
                              {"type": "integer", "minimum": 1, "maximum": 500})],
        "responses": {"200": _json(_ref("AlertPage"), "One page of alerts."), **_errors(400, 401, 403)},
    },
    ("get", "/readyz"): {
        "operationId": "ready", "tags": ["operations"], "security": [],
        "summary": "Readiness for a load balancer: the database answers (the mirror's state and NATS aside)",
        "responses": {"200": _json(_ref("Ready"), "This replica serves the pages."),
                      "503": _json(_ref("Ready"), "The database is not reachable: the pages answer 503 until it is.")},
    },
}
