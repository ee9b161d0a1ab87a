"""The OpenAPI pieces of a failure group's triage (SPEC section 11), merged into web/openapi.py's
document: the group's state fields, its activity, and the state and notes operations."""

from __future__ import annotations

from ..actions.close import NOTE_MAX
from ..actions.triage import COUNT_MAX, NAME_MAX, SETTABLE
from ..db.triage import STATES
from ..entries.filters import TIME_OR_DURATION
from ..entries.shape import INT, STR, TIME
from ..entries.shape import nullable as _nullable
from ..entries.shape import schema_ref as _ref
from .openapi_requests import request_body

INT64_MAX = 2**63 - 1
NAME = {**STR, "maxLength": NAME_MAX}

#: The fields every group carries (GET /api/groups and GET /api/groups/{group_id}).
GROUP_STATE_PROPERTIES = {
    "state": {"enum": list(STATES), "description": "open, investigating (with an assignee), resolved (with an "
                                                  "optional resolved_in), ignored, or regressed (it was resolved "
                                                  "and failed again; it counts as open)."},
    "assignee": {**_nullable(STR), "description": "Who is on it."},
    "team": {**_nullable(STR), "description": "The team (DLQ_TEAMS) whose patterns covered its subject."},
    "version": {**INT, "description": "Raised by every state change; send it back with a change (stale: 409)."},
    "notes": {**INT, "description": "How many notes it has."},
    "resolved_in": {**_nullable(STR), "description": "The release it was resolved in (kept when it regresses)."},
    "until": {**_nullable(TIME), "description": "Ignored until this time."},
    "until_count": {**_nullable(INT), "description": "Ignored until this many more failures."},
    "ignored_seen": {**_nullable(INT), "description": "Ignored: the new failures since it was ignored (an ignore "
                                                      "by count ends when they reach until_count); null otherwise."},
    "state_changed_at": _nullable(TIME),
}
GROUP_STATE_REQUIRED = ["state", "assignee", "team", "version", "notes"]

SCHEMAS = {
    "GroupActivity": {
        "type": "object", "required": ["at", "actor", "kind", "state", "text", "detail"],
        "properties": {
            "id": _nullable(INT), "at": TIME,
            "actor": {**STR, "description": "Who: a user, token:<name>, cli:<os user>, mirror (a regression or "
                                            "the end of an ignore), alerts (an alert sent)."},
            "kind": {"enum": ["state", "note", "job", "alert"]},
            "state": {**_nullable(STR), "description": "For a state change: the new state."},
            "text": {**_nullable(STR), "description": "A note, or a state change's note."},
            "detail": {"type": "object", "description": "From which state, assignee, resolved_in, until...; a "
                                                        "job's id, action and total; an alert's event and id."},
        },
    },
    "GroupDetail": {"allOf": [_ref("Group"), {"type": "object", "required": ["activity"], "properties": {
        "activity": {"type": "array", "items": _ref("GroupActivity"), "description": "Newest first."}}}]},
    "GroupResult": {"type": "object", "required": ["group"], "properties": {"group": _ref("Group")}},
    "GroupStateRequest": request_body({
        "required": ["version", "state"],
        "properties": {
            "version": {**_ref("Version"), "description": "The group's version as seen; a stale one gets 409."},
            "state": {"enum": list(SETTABLE), "description": "regressed is never set by hand."},
            "assignee": {**NAME, "description": "Kept when not given (open clears it); investigating needs one given or kept. "
                                                "me: the caller, stored by name."},
            "note": {**STR, "maxLength": NOTE_MAX},
            "until": {**TIME_OR_DURATION, "description": ("ignored only: an RFC 3339 time or a duration from now "
                                                           "(2h, 7d), in the future and at most 100 years away.")},
            "until_count": {**INT, "minimum": 1, "maximum": COUNT_MAX,
                            "description": "ignored only: open again after this many more failures."},
            "resolved_in": {**NAME, "description": "resolved only: the release that fixes it."},
        },
    }),
    "GroupNoteRequest": request_body({"required": ["text"],
                                      "properties": {"text": {**STR, "minLength": 1, "maxLength": NOTE_MAX}}}),
    "GroupNote": {"type": "object", "required": ["note"], "properties": {"note": {
        "type": "object", "required": ["group_id", "at", "actor", "kind", "text"],
        "properties": {"group_id": INT, "at": TIME, "actor": STR, "kind": {"const": "note"}, "text": STR}}}},
}

GROUP_FILTER_DESCRIPTIONS = {
    "state": "Only groups in these states, separated by commas (open, investigating, resolved, ignored, regressed).",
    "assignee": "Only groups assigned to this name; me: the caller.",
    "team": "Only groups of this team (DLQ_TEAMS).",
}


def operations(json_body, errors, query, path_id) -> dict[tuple[str, str], dict]:
    """The triage operations, made with openapi.py's helpers."""
    group_id = path_id("group_id", "group")
    return {
        ("get", "/api/groups/{group_id}"): {
            "operationId": "getGroup", "tags": ["entries"], "summary": "One failure group with its state and activity",
            "parameters": [group_id],
            "responses": {"200": json_body(_ref("GroupDetail"), "The group."), **errors(401, 403, 404)},
        },
        ("post", "/api/groups/{group_id}/state"): {
            "operationId": "changeGroupState", "tags": ["actions"],
            "summary": "Assign, resolve, ignore or reopen a failure group",
            "description": "Needs the operator role. Takes the version seen (stale: 409); audited.",
            "parameters": [group_id],
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("GroupStateRequest")}}},
            "responses": {"200": json_body(_ref("GroupResult"), "The group after the change."),
                          **errors(400, 401, 403, 404, 409)},
        },
        ("post", "/api/groups/{group_id}/notes"): {
            "operationId": "addGroupNote", "tags": ["actions"], "summary": "Add a note to a failure group",
            "description": "Needs the operator role. The group's version stays; audited.",
            "parameters": [group_id],
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("GroupNoteRequest")}}},
            "responses": {"201": json_body(_ref("GroupNote"), "The note."), **errors(400, 401, 403, 404)},
        },
    }


def filter_parameters(query) -> list[dict]:
    """GET /api/groups's own parameters."""
    return [query(name, text) for name, text in GROUP_FILTER_DESCRIPTIONS.items()]
