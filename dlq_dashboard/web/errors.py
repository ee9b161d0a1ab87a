"""Errors as answers, in one place: each kind of DashboardError gets its status code here, as
JSON (``{"error": ...}``) for the API and bearer-token calls and as a page otherwise.

The domain raises; no view repeats a try/except to translate. A view that answers an error
its own way (the editor shows the form again) catches only that error.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, jsonify, make_response, render_template, request
from werkzeug.exceptions import HTTPException

from ..actions.errors import ActionError, Conflict, NatsDown, Refused
from ..errors import DashboardError, EntryNotFound, InvalidRequest, JobNotFound, NotFound
from . import current_runtime
from .responses import wants_json

# The first class an error is an instance of decides; DashboardError itself is a 400.
STATUSES: tuple[tuple[type[DashboardError], int], ...] = (
    (NotFound, 404), (InvalidRequest, 400), (Conflict, 409), (Refused, 422), (NatsDown, 503),
    (DashboardError, 400),
)
TITLES = {EntryNotFound: "No such entry", JobNotFound: "No such job", NotFound: "Not found",
          InvalidRequest: "Not valid", DashboardError: "Not done"}


def status_of(exc: DashboardError) -> int:
    """The HTTP status an error is answered with."""
    return next(status for kind, status in STATUSES if isinstance(exc, kind))


def init_app(app: Flask) -> None:
    """Answer DashboardErrors and, under /api/, HTTP errors (an unknown path, a wrong method)."""
    app.register_error_handler(DashboardError, dashboard_error)
    app.register_error_handler(HTTPException, http_error)


def error_body(exc: DashboardError) -> dict[str, Any]:
    """The JSON of an error: the sentence, and what an action error knows besides."""
    body: dict[str, Any] = {"error": str(exc)}
    if isinstance(exc, ActionError):
        if isinstance(exc, Conflict) and exc.entry_id is not None:
            current = current_runtime().store.get_entry(exc.entry_id)
            body["entry"] = current.to_dict() if current else None
        if exc.publish is not None:
            body["publish"] = exc.publish.to_dict()
        if exc.errors:
            body["schema_errors"] = exc.errors
    return body


def dashboard_error(exc: DashboardError):
    """JSON for the API; for a page, the entry acted on with why it was not done, or an error page."""
    status = status_of(exc)
    if wants_json():
        return jsonify(error_body(exc)), status
    entry_id = exc.entry_id if isinstance(exc, ActionError) else None
    if entry_id is None and request.method == "POST":
        entry_id = (request.view_args or {}).get("entry_id")
    if entry_id is not None:
        return not_done_page(exc, entry_id, status)
    title = next(title for kind, title in TITLES.items() if isinstance(exc, kind))
    return make_response(render_template("error.html", title=title, message=str(exc)), status)


def not_done_page(exc: DashboardError, entry_id: int, status: int):
    """Why an action on an entry was not done; for a conflict, what changed since the version seen."""
    store = current_runtime().store
    entry = store.get_entry(entry_id)
    seen = exc.seen_version if isinstance(exc, ActionError) else None
    since = [a for a in (entry.actions if entry else []) if seen is not None and (a["version"] or 0) >= seen]
    republishes = [r for r in store.republishes_of(entry_id) if seen is not None and r["version"] >= seen]
    return make_response(render_template(
        "conflict.html", error=exc, conflict=isinstance(exc, Conflict), entry=entry, seen=seen, since=since,
        republishes=republishes), status)


def http_error(exc: HTTPException):
    """An unknown API path or method answers like every other API error."""
    if request.path.startswith("/api/") and exc.code and exc.code >= 400:
        return jsonify(error=exc.description or exc.name), exc.code
    return exc
