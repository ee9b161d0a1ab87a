"""Parts of the OpenAPI document (web/openapi.py) about what two pages show as JSON: GET
/api/views (the saved views /views shows the caller: web/saved_views.py) and GET
/api/admin/users (the users and API tokens /admin/users shows an admin: web/admin.py)."""

from __future__ import annotations

from ..entries.shape import BOOL, INT, STR
from ..entries.shape import schema_ref as _ref
from .openapi_parts import errors as _errors
from .openapi_parts import json_answer as _json

_DATE = {"type": ["string", "null"], "format": "date-time"}
_ROLE = {**STR, "enum": ["viewer", "operator", "admin"]}
_SCOPES = {"anyOf": [{"type": "array", "items": STR}, {"type": "null"}],
           "description": "Subject patterns (NATS wildcards, or source:pattern) the role is limited to; null: "
                          "every subject."}

SCHEMAS: dict[str, dict] = {
    "SavedView": {
        "type": "object", "required": ["id", "name", "owner", "shared", "page", "filters", "query", "url"],
        "properties": {
            "id": INT, "name": STR,
            "owner": {**STR, "description": "Who saved it: a user, or token:<name> for an API token."},
            "shared": {**BOOL, "description": "Shared by an admin with everyone whose scopes it stays within."},
            "page": {**STR, "enum": ["list", "groups"], "description": "list: the dead letters (/); groups: /groups."},
            "filters": {"type": "object", "additionalProperties": STR,
                        "description": "Its filters, decoded; an empty value (any status) is \"\"."},
            "query": {**STR, "description": "Its filters as the page's query string."},
            "url": {**STR, "description": "The page with its filters: where the view opens."},
        },
    },
    "SavedViewList": {"type": "object", "required": ["views"],
                      "properties": {"views": {"type": "array", "items": _ref("SavedView")}}},
    "AdminUser": {
        "type": "object",
        "required": ["name", "role", "scopes", "grants", "via", "last_sign_in_at", "sessions", "state"],
        "properties": {
            "name": STR, "role": _ROLE, "scopes": _SCOPES,
            "grants": {"type": "array", "items": _ref("Grant"),
                       "description": "What the page shows: every grant the last single sign-on gave (from "
                                      "DLQ_OIDC_ROLES, read again at each), else the role over its scopes."},
            "via": {**STR, "enum": ["password", "oidc"], "description": "How the user signs in."},
            "last_sign_in_at": _DATE,
            "sessions": {**INT, "description": "Sessions open now."},
            "state": {**STR, "enum": ["active", "disabled"]},
        },
    },
    "AdminToken": {
        "type": "object", "required": ["name", "role", "scopes", "created_at", "last_used_at", "revoked_at", "state"],
        "properties": {
            "name": STR, "role": _ROLE, "scopes": _SCOPES, "created_at": _DATE, "last_used_at": _DATE,
            "revoked_at": _DATE, "state": {**STR, "enum": ["active", "revoked"]},
        },
    },
    "AdminUsers": {
        "type": "object", "required": ["users", "tokens"],
        "description": "Never a password, a password hash, a token or a token's hash.",
        "properties": {"users": {"type": "array", "items": _ref("AdminUser")},
                       "tokens": {"type": "array", "items": _ref("AdminToken")}},
    },
}

OPERATIONS: dict[tuple[str, str], dict] = {
    ("get", "/api/views"): {
        "operationId": "listSavedViews", "tags": ["entries"],
        "summary": "The saved views /views shows the caller: their own and the shared ones",
        "description": ("By page and name. A scoped caller sees their own and the shared views whose filters stay "
                        "within their scopes; a caller with a mask, no shared view whose filters name what it hides."),
        "responses": {"200": _json(_ref("SavedViewList"), "The views."), **_errors(401, 403)},
    },
    ("get", "/api/admin/users"): {
        "operationId": "listUsersAndTokens", "tags": ["operations"],
        "summary": "Every user and API token as /admin/users shows them (admin only)",
        "description": "Users and tokens by name, revoked tokens too. Needs the admin role.",
        "responses": {"200": _json(_ref("AdminUsers"), "The users and tokens."), **_errors(401, 403)},
    },
}
