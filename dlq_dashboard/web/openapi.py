"""The API's OpenAPI 3.1 document, served at GET /api/openapi.json.

Each operation is listed once here; the served document keeps those the running app
actually routes, so it never promises a route that is not there. Schemas are JSON Schema
2020-12, the dialect of OpenAPI 3.1.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from flask import Blueprint, Flask, current_app, jsonify

from ..actions.bulk.jobs import JOB_ACTIONS
from ..access.detail import detail_schemas
from ..entries.filters import MAX_LIMIT
from ..entries.shape import BOOL, INT, STATUSES, STR, TIME, entry_schema
from ..entries.shape import nullable as _nullable
from ..entries.shape import schema_ref as _ref
from . import openapi_groups, openapi_requests, openapi_sources, openapi_views
from .auth import requires
from .openapi_export import EXPORT_OPERATIONS
from .openapi_parts import CURSOR, DESK_OPERATIONS, DESK_SCHEMAS, FILTER_PARAMETERS, FLAG
from .openapi_parts import errors as _errors
from .openapi_parts import general_answers, with_key_fields
from .openapi_parts import json_answer as _json
from .openapi_parts import query as _query

bp = Blueprint("openapi", __name__)

INT64_MAX = 2**63 - 1
# The search index is written behind the mirror (ingest/search_index.py SearchLag).
SEARCH_LAG = {"type": "object", "required": ["indexed_through", "not_indexed", "more"], "description": (
    "With q: how far the search index covers. Entries newer than indexed_through (not_indexed of them under the "
    "other filters, counted up to 10,000; more: there are more) are not found by a search yet."),
    "properties": {"indexed_through": INT, "not_indexed": INT, "more": BOOL}}

SCHEMAS: dict[str, dict] = {
    "Error": {
        "type": "object", "required": ["error"],
        "properties": {
            "error": {**STR, "description": "What went wrong, as a sentence."},
            "entry": {"anyOf": [_ref("ActedEntry"), {"type": "null"}],
                      "description": "On 409 from an action: the entry now."},
            "group": {"anyOf": [_ref("Group"), {"type": "null"}], "description": "On 409 of a group's state: it now."},
            "publish": {**_ref("Publish"), "description": "On 409 when this decision was republished before."},
            "schema_errors": {"type": "array", "items": _ref("SchemaError"),
                              "description": "On 422 when a payload fails its schema (send force to override)."},
        },
    },
    "SchemaError": {
        "type": "object", "required": ["path", "message"],
        "properties": {"path": {**STR, "description": "JSON Pointer into the payload."}, "message": STR},
    },
    "Entry": entry_schema(),
    "HistoryEvent": {
        "type": "object", "required": ["kind", "at"],
        "properties": {"kind": STR, "at": TIME, "deliveries": _nullable(INT), "consumer": _nullable(STR),
                       "detail": {"type": "object"}},
    },
    "AuditRecord": {
        "type": "object", "required": ["id", "action", "actor", "at"],
        "properties": {
            "id": INT, "entry_id": _nullable(INT), "job_id": _nullable(INT), "action": STR, "actor": STR,
            "at": TIME, "note": _nullable(STR), "version": _nullable(INT), "msg_id": _nullable(STR),
            "publish_stream": _nullable(STR), "publish_seq": _nullable(INT), "duplicate": _nullable(BOOL),
            "error": _nullable(STR), "detail": {"type": "object"},
            "job": {"type": "object", "description": "On a bulk job's own record: its state and items' counts "
                                                     "(state, total, done, failed, skipped, cancelled, pending)."},
        },
    },
    **detail_schemas(),
    "EntryPage": {
        "type": "object", "required": ["entries", "next_cursor"],
        "properties": {"entries": {"type": "array", "items": _ref("ListedEntry")},
                       "next_cursor": {**_nullable(STR),
                                       "description": "Pass as cursor for the next page; null on the last."},
                       "search": SEARCH_LAG},
    },
    "ListedEntry": {"allOf": [_ref("Entry"), {"type": "object", "properties": {"fields": {
        "type": "object", "additionalProperties": _nullable(STR),
        "description": "With DLQ_LIST_FIELDS: each key field (label -> its value as text, or null where the "
                       "payload has none; \"•••\" where DLQ_MASK hides it from a viewer)."}}}],
                    "description": "An entry as the list and the JSON exports give it: with its key fields."},
    "ActedEntry": {"allOf": [_ref("Entry"), {"type": "object", "properties": {
        "history": {"type": "array", "items": _ref("HistoryEvent")},
        "actions": {"type": "array", "items": _ref("AuditRecord")}}}],
                   "description": "An entry as an action leaves it: with its delivery history and audit records."},
    "Group": {
        "type": "object",
        "required": ["id", "source", "subject", "reason", "label", "count", "by_status", "first_seen", "last_seen",
                     "filter", *openapi_groups.GROUP_STATE_REQUIRED],
        "description": "Entries of one source, subject and reason whose errors say the same thing.",
        "properties": {
            "id": INT, "source": {**STR, "description": "The source its entries were mirrored from (SPEC section 12)."},
            "subject": _nullable(STR), "reason": _nullable(STR),
            "label": {**STR, "description": "The normalized error (or schema path and rule) as one readable line."},
            "count": {**INT, "description": "Its entries under the filters."},
            "by_status": {"type": "object", "required": list(STATUSES),
                          "properties": {s: INT for s in STATUSES},
                          "description": "All its entries by status (the filters aside)."},
            "first_seen": _nullable(TIME), "last_seen": _nullable(TIME),
            "filter": {**_ref("Filter"), "required": ["group"], "properties": {"group": INT},
                       "description": ("The GET /api/entries parameters that list exactly its count entries: "
                                       "group its id, an integer as id is; the others text.")},
            **openapi_groups.GROUP_STATE_PROPERTIES,
        },
    },
    **openapi_groups.SCHEMAS,
    "AuditPage": {
        "type": "object", "required": ["actions", "next_cursor"],
        "properties": {"actions": {"type": "array", "items": _ref("AuditRecord")}, "next_cursor": _nullable(STR)},
    },
    "Me": {
        "type": "object", "required": ["name", "role", "grants", "via"],
        "properties": {
            "name": {**STR, "description": "As the audit names the caller (token:<name> for an API token)."},
            "role": {**STR, "enum": ["viewer", "operator", "admin"],
                     "description": "The highest role of the grants: what decides which routes may be used."},
            "grants": {"type": "array", "items": _ref("Grant")},
            "via": {**STR, "enum": ["password", "oidc", "token", "proxy"],
                    "description": "How the caller signed in: a password or single sign-on session, an API "
                                   "token, or a trusted proxy's user header (DLQ_TRUSTED_HEADER)."},
        },
    },
    "Grant": {
        "type": "object", "required": ["role", "scopes"],
        "properties": {
            "role": {**STR, "enum": ["viewer", "operator", "admin"]},
            "scopes": {"anyOf": [{"type": "array", "items": STR}, {"type": "null"}],
                       "description": "Subject patterns (NATS wildcards, or source:pattern) the role is "
                                      "limited to; null: every subject."},
        },
    },
    "Publish": {
        "type": "object", "required": ["msg_id", "stream", "seq", "duplicate"],
        "properties": {"msg_id": {**STR, "description": "The fresh Nats-Msg-Id sent."},
                       "stream": STR, "seq": INT,
                       "duplicate": {**BOOL, "description": "The broker had this msgId already."}},
    },
    "EntryResult": {
        "type": "object", "required": ["entry"], "properties": {"entry": _ref("ActedEntry")},
    },
    "RepublishResult": {
        "type": "object", "required": ["entry", "publish"],
        "properties": {"entry": _ref("ActedEntry"), "publish": _ref("Publish")},
    },
    "JobAccepted": {
        "type": "object", "required": ["job"], "properties": {"job": INT},
    },
    "JobItem": {
        "type": "object", "required": ["entry_id", "state"],
        "properties": {"entry_id": INT, "version": INT, "state": STR, "result": _nullable(STR)},
    },
    "Job": {
        "type": "object", "required": ["id", "action", "state", "total", "done", "failed"],
        "description": "A bulk job, its progress and (some of) its items' results.",
        "properties": {
            "id": INT, "action": {"type": "string", "enum": list(JOB_ACTIONS)},
            "actor": STR,
            "state": STR, "note": _nullable(STR), "selection": {"type": "object"},
            "patch": {**_nullable({"type": "array", "items": {"type": "object"}}),
                      "description": "The JSON Patch a patch job applies (null for other jobs)."},
            "total": INT, "done": INT, "failed": INT, "skipped": INT, "cancelled": INT, "pending": INT,
            "purged": {**INT, "description": "Items gone with their entries (retention): counted, not listed."},
            "percent": {"type": "number"}, "cancel_requested": BOOL, "created_at": TIME, "finished_at": _nullable(TIME),
            "started_at": _nullable(TIME), "cancelled_by": _nullable(STR), "cancelled_at": _nullable(TIME),
            "selection_text": {**STR, "description": "The selection in words: '3 selected entries', "
                                                     "'filter status=open', 'group <label>'."},
            "rate": {"type": ["number", "null"], "description": "Items settled a second since it started."},
            "eta_seconds": _nullable(INT), "eta_at": {**_nullable(TIME), "description": "A running job's end at its rate."},
            "waits_for": {"type": "array", "items": STR, "description": (
                "A job that needs NATS (republish, patch, repair; a close that deletes the DLQ message) only: the "
                "sources whose NATS does not answer while it has items of them to go (it waits for them).")},
            "rate_per_source": {**_nullable({"type": "number"}), "description": (
                "With several sources, a republishing job only: DLQ_REPUBLISH_RATE, which applies to each "
                "source; null: no limit.")},
            "items": {"type": "array", "items": _ref("JobItem")},
            "failure_reasons": {
                "type": "array", "description": "GET /api/jobs/<id> only: why its failed and skipped items ended so, "
                "most common first (five at most, counted over the first 10,000 of them); results that differ "
                "only in their values (an id, a number, a quoted value) are one reason, read with placeholders.",
                "items": {"type": "object", "required": ["reason", "count"],
                          "properties": {"reason": STR, "count": INT}}},
        },
    },
    "JobPage": {
        "type": "object", "required": ["jobs", "next_cursor"],
        "properties": {"jobs": {"type": "array", "items": _ref("Job")}, "next_cursor": _nullable(STR)},
    },
    "Targets": {
        "type": "object", "required": ["stream", "consumers", "error"],
        "description": "Where a republish of the entry would go.",
        "properties": {
            "stream": {**_nullable(STR), "description": "The stream that stores the original subject."},
            "consumers": {"type": "array", "items": {
                "type": "object", "required": ["name"],
                "properties": {"name": STR, "filters": {"type": "array", "items": STR}, "durable": BOOL}}},
            "error": {**_nullable(STR), "description": "Why there is no target (or it cannot be listed now)."},
        },
    },
    "Health": {
        "type": "object", "required": ["status", "nats", "mirror_lag"],
        "properties": {
            "status": {"type": "string", "enum": ["ok", "degraded"]},
            "nats": {"type": "object", "required": ["connected"],
                     "properties": {"connected": BOOL,
                                    "url": {**_nullable(STR), "description": "The server connected to (else those "
                                            "configured), without a user or password; for an admin only."},
                                    "last_error": {**_nullable(STR), "description": "Why NATS is not usable; "
                                                   "without a login only whether there is an error."},
                                    "unreachable_since": {**_nullable(STR), "format": "date-time",
                                                          "description": "Since when NATS has not answered."},
                                    "rtt_ms": {**_nullable({"type": "number"}),
                                               "description": "The liveness probe's last round trip."}}},
            "database": {"type": "object", "required": ["connected"],
                         "properties": {"connected": BOOL, "last_error": _nullable(STR),
                                        "unreachable_since": {**_nullable(TIME), "description": (
                                            "Since when the database has not answered the probe; null while "
                                            "it answers.")}}},
            "mirror_lag": {**_nullable(INT), "description": "Messages not yet mirrored, over every stream "
                           "the mirror follows (the DLQ stream and the advisories); null if unknown."},
            "mirror": {"type": "object", "required": ["leader", "streams"], "properties": {
                "leader": {**BOOL, "description": "Whether this process mirrors."},
                "streams": {"type": "object", "additionalProperties": {
                    "type": "object", "properties": {
                        "last_seq": _nullable(INT), "lag": _nullable(INT),
                        "error": {**_nullable(STR), "description": "Why the stream is stuck (a write failing, "
                                  "retried until it succeeds); null while it is not."},
                        "stuck_since": {**_nullable(STR), "format": "date-time"},
                        "behind_since": {**_nullable(STR), "format": "date-time",
                                         "description": "Since when the oldest message not yet mirrored waits."},
                        "missed": {**_nullable(INT), "description": (
                            "Messages the stream no longer held when the mirror came to them (removed by its "
                            "limits, a purge or a delete before they were mirrored), since this process "
                            "started; null where this process does not mirror.")}}}}}},
            "sources": openapi_sources.HEALTH_SOURCES,
            "search_lag": {**_nullable(SEARCH_LAG), "description": "How far the search index covers, over every "
                           "entry; null while the database does not answer. Lagging is not a degradation."},
        },
    },
}

_ERROR_TEXT = {
    400: "A parameter or body value is not valid; the error says which and what it accepts.",
    401: "No session and no valid API token.",
    403: "The caller's role may not do this.",
    404: "No such entry, job or failure group.",
    409: "The version sent is stale, or the entry's status does not allow the action.",
    413: "The body is larger than the dashboard takes (16 MB); nothing was done.",
    415: ("The body is not sent as Content-Type: application/json (in UTF-8: no charset, or charset=utf-8); "
          "nothing was done."),
    422: "The request is well-formed but cannot be carried out (e.g. no subject to republish to).",
    503: ("NATS or the database cannot be reached now, or the database did not answer in time; nothing was "
          "changed. For the database, Retry-After says when to ask again."),
}
RETRY_AFTER = {"Retry-After": {"schema": {**INT, "minimum": 1},
                               "description": "With the database away: seconds until it is asked again."}}


def _path_id(name: str, what: str) -> dict:
    return {"name": name, "in": "path", "required": True, "description": f"The {what}'s id.",
            "schema": {**INT, "minimum": 1, "maximum": INT64_MAX}, "example": 1}


PAGE_LIMIT = _query("limit", f"Entries per page, 1 to {MAX_LIMIT} (default 50).",
                    {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT})


def _entry_action(op_id: str, summary: str, body: str, result: str, codes: Iterable[int]) -> dict:
    return {
        "operationId": op_id, "tags": ["actions"], "summary": summary,
        "description": "Needs the operator role. Writes an audit record in the same transaction.",
        "parameters": [_path_id("entry_id", "entry")],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(body)}}},
        "responses": {"200": _json(_ref(result), "The entry after the action."), **_errors(*codes)},
    }


# (method, path) -> operation. The served document keeps those the app routes.
OPERATIONS: dict[tuple[str, str], dict] = {
    ("get", "/api/entries"): with_key_fields({
        "operationId": "listEntries", "tags": ["entries"], "summary": "One page of entries, newest first",
        "parameters": [*FILTER_PARAMETERS, PAGE_LIMIT, CURSOR],
        "responses": {"200": _json(_ref("EntryPage"), "A page and the cursor of the next."),
                      **_errors(400, 401, 403)},
    }),
    ("get", "/api/groups"): with_key_fields({
        "operationId": "listGroups", "tags": ["entries"],
        "summary": "Failure groups under the filters of GET /api/entries, largest first",
        "description": ("Every status unless `status` is given (the /groups page shows open entries by "
                        "default). Each group's `filter` lists exactly its `count` entries on GET /api/entries."),
        "parameters": [*FILTER_PARAMETERS, *openapi_groups.filter_parameters(_query),
                       _query("limit", "The most groups, 1 to 1000 (default 200).",
                              {"type": "integer", "minimum": 1, "maximum": 1000})],
        "responses": {"200": _json(_ref("GroupList"), "The groups, largest first."), **_errors(400, 401, 403)},
    }),
    ("get", "/api/summary"): with_key_fields({
        "operationId": "summarizeEntries", "tags": ["entries"],
        # The list's address sent as it is: its page's limit and cursor are read (a bad one is a 400), not counted by.
        "parameters": [*FILTER_PARAMETERS, *(dict(p, description=p["description"] + " Read as on GET /api/entries "
                                                  "(a bad one is a 400); it changes no count.")
                                             for p in (PAGE_LIMIT, CURSOR))],
        "summary": "Entries by status under the filters of GET /api/entries (the list's counts); exact or an estimate",
        "responses": {"200": _json(_ref("Summary"), "The counts."), **_errors(400, 401, 403)},
    }),
    **openapi_groups.operations(_json, _errors, _query, _path_id),
    ("get", "/api/entries/{entry_id}"): {
        "operationId": "getEntry", "tags": ["entries"], "summary": "One entry with its history and actions",
        "parameters": [_path_id("entry_id", "entry")],
        "responses": {"200": _json(_ref("EntryDetail"), "The entry."), **_errors(401, 403, 404)},
    },
    ("post", "/api/entries/{entry_id}/republish"): _entry_action(
        "republishEntry", "Publish the payload (or an edited one) to the original subject",
        "RepublishRequest", "RepublishResult", (400, 401, 403, 404, 409, 422, 503)),
    ("post", "/api/entries/{entry_id}/close"): _entry_action(
        "closeEntry", "Acknowledge and close, with a note", "CloseRequest", "EntryResult",
        (400, 401, 403, 404, 409, 422)),
    ("post", "/api/entries/{entry_id}/reopen"): _entry_action(
        "reopenEntry", "Undo a close", "ReopenRequest", "EntryResult", (400, 401, 403, 404, 409, 422)),
    ("post", "/api/bulk"): {
        "operationId": "startBulkJob", "tags": ["actions"],
        "summary": "Republish, close, patch and republish, or repair and republish many entries as a job",
        "description": "Needs the operator role. The job runs with a rate limit; poll GET /api/jobs/{job_id}.",
        "parameters": [{"name": "Idempotency-Key", "in": "header", "schema": {"type": "string", "maxLength": 64},
                        "description": "Sent again with the same key by the same user: the job the first made."}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("BulkRequest")}}},
        "responses": {"202": _json(_ref("JobAccepted"), "The job was started."), **_errors(400, 401, 403, 422, 503)},
    },
    ("get", "/api/entries/{entry_id}/targets"): {
        "operationId": "getTargets", "tags": ["entries"],
        "summary": "The stream and consumers a republish of the entry would reach",
        "parameters": [_path_id("entry_id", "entry")],
        "responses": {"200": _json(_ref("Targets"), "The targets, or why there are none."),
                      **_errors(401, 403, 404)},
    },
    ("get", "/api/jobs/{job_id}"): {
        "operationId": "getJob", "tags": ["actions"], "summary": "A bulk job's progress",
        "parameters": [_path_id("job_id", "job"),
                       _query("state", "Only items in this state (pending, done, failed, skipped, cancelled)."),
                       _query("limit", "Items to include, up to 1000 (default 200; more is taken as 1000).",
                              {**INT, "minimum": 0, "maximum": INT64_MAX})],
        "responses": {"200": _json(_ref("Job"), "The job."), **_errors(400, 401, 403, 404)},
    },
    ("get", "/api/jobs"): {
        "operationId": "listJobs", "tags": ["actions"], "summary": "Every bulk job, newest first (without items)",
        "parameters": [_query("state", "running (queued or running) or finished (done or cancelled)."),
                       _query("limit", "Jobs per page, 1 to 500 (default 50).", {**INT, "minimum": 1, "maximum": 500}),
                       CURSOR],
        "responses": {"200": _json(_ref("JobPage"), "A page of jobs."), **_errors(400, 401, 403)},
    },
    ("post", "/api/jobs/{job_id}/cancel"): {
        "operationId": "cancelJob", "tags": ["actions"], "summary": "Ask a bulk job to stop",
        "parameters": [_path_id("job_id", "job")],
        "description": "Needs the operator role. The job stops after its current window.",
        "responses": {"200": _json(_ref("Job"), "The job, cancel requested."), **_errors(401, 403, 404)},
    },
    ("get", "/api/audit"): {
        "operationId": "listAudit", "tags": ["actions"], "summary": "The audit, newest first",
        "parameters": [_query("entry", "Only records of this entry id.", {**INT, "minimum": 0, "maximum": INT64_MAX}),
                       _query("job", "Only records of this job id.", {**INT, "minimum": 0, "maximum": INT64_MAX}),
                       _query("actor", "Only records by this user or token:<name>."),
                       _query("action", "Only this action (republish, close, reopen, ...)."),
                       _query("fold", "1 (or another yes): a bulk job's item records are left out (its own record "
                                      "has their counts) unless entry or job is given; the page folds by default.",
                              FLAG),
                       _query("items", "1 (or another yes), with job: only the job's item records (what its folded "
                                       "row opens to).", FLAG),
                       _query("limit", "Records per page, 1 to 1000 (default 100).",
                              {**INT, "minimum": 1, "maximum": 1000}),
                       CURSOR],
        "responses": {"200": _json(_ref("AuditPage"), "A page of audit records."), **_errors(400, 401, 403)},
    },
    ("get", "/api/me"): {
        "operationId": "me", "tags": ["operations"], "summary": "Who is asking: name, role, grants and sign-in",
        "responses": {"200": _json(_ref("Me"), "The caller."), **_errors(401, 403)},
    },
    **EXPORT_OPERATIONS,
    ("get", "/healthz"): {
        "operationId": "health", "tags": ["operations"], "summary": "NATS connection and mirror lag",
        "security": [],
        "responses": {"200": _json(_ref("Health"), "All well."),
                      "503": _json(_ref("Health"), "Degraded: NATS or the database is down, or the lag is unknown.")},
    },
    ("get", "/metrics"): {
        "operationId": "metrics", "tags": ["operations"], "summary": "Prometheus text exposition",
        "security": [],
        "responses": {"200": {"description": "Metrics (no message data).",
                              "content": {"text/plain": {"schema": STR}}}},
    },
    ("get", "/api/openapi.json"): {
        "operationId": "openapi", "tags": ["operations"], "summary": "This document", "security": [],
        "responses": {"200": _json({"type": "object"}, "The OpenAPI 3.1 document.")},
    },
}

DESCRIPTION = """\
The dead-letter dashboard's JSON API. Every page of the dashboard is also JSON.

Authenticate with `Authorization: Bearer <token>` (create one with
`flask --app app tokens create NAME --role ROLE`) or a browser session. Roles:
`viewer` reads and exports, `operator` also acts, `admin` also manages users.
Errors are `{"error": "sentence"}` with the status code. Pages are newest first and
keyset-paginated: pass `next_cursor` back as `cursor`; new entries never shift a page."""


def route_key(rule: str) -> str:
    """A Flask rule or OpenAPI path with its parameter names dropped, for matching."""
    return re.sub(r"<[^>]*>|\{[^}]*\}", "{}", rule)


def routed_operations(app: Flask) -> dict[tuple[str, str], str]:
    """(method, normalised path) of every route the app serves -> its endpoint."""
    routed = {}
    for rule in app.url_map.iter_rules():
        for method in rule.methods or ():
            if method not in ("HEAD", "OPTIONS"):
                routed[(method.lower(), route_key(rule.rule))] = rule.endpoint
    return routed


def openapi_document(app: Flask) -> dict[str, Any]:
    """The OpenAPI 3.1 document for the operations ``app`` routes."""
    routed = routed_operations(app)
    paths: dict[str, dict] = {}
    for (method, path), operation in {**OPERATIONS, **DESK_OPERATIONS, **openapi_sources.OPERATIONS,
                                      **openapi_views.OPERATIONS}.items():
        endpoint = routed.get((method, route_key(path)))
        if endpoint is not None:
            view = app.view_functions[endpoint]
            paths.setdefault(path, {})[method] = general_answers(operation, from_memory=getattr(
                view, "from_memory", False))
    return {
        "openapi": "3.1.0",
        "info": {"title": "DLQ Dashboard API", "version": "1", "description": DESCRIPTION},
        "servers": [{"url": "/"}],
        "security": [{"bearerToken": []}, {"sessionCookie": []}],
        "tags": [{"name": "entries"}, {"name": "actions"}, {"name": "export"}, {"name": "operations"}],
        "paths": paths,
        "components": {
            "schemas": {**SCHEMAS, **openapi_requests.SCHEMAS, **DESK_SCHEMAS, **openapi_sources.SCHEMAS, **openapi_views.SCHEMAS},
            "responses": {f"E{code}": {**_json(_ref("Error"), text), **({"headers": RETRY_AFTER} if code == 503 else {})}
                          for code, text in _ERROR_TEXT.items()},
            "securitySchemes": {
                "bearerToken": {"type": "http", "scheme": "bearer",
                                "description": "An API token from `flask --app app tokens create`."},
                "sessionCookie": {"type": "apiKey", "in": "cookie", "name": "session",
                                  "description": "A browser session after /login."},
            },
        },
    }


@bp.route("/api/openapi.json")
@requires(None, from_memory=True)
def openapi_json():
    """The API document; open to all, it holds no data."""
    return jsonify(openapi_document(current_app))
