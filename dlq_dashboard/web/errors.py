"""Errors as answers, in one place: each kind of DashboardError gets its status code here, as
JSON (``{"error": ...}``) for the API and bearer-token calls and as a page otherwise.

The domain raises; no view repeats a try/except to translate. A view that answers an error
its own way (the editor shows the form again) catches only that error.

The database's outages are answered here too: every request's database work is bounded
(db/bounds.py), a request that arrives while the probe knows the database unreachable is
answered 503 before it waits on it, and an error of the database being unusable (stopped,
frozen, a full disk) raised by any route is a 503 with one sentence, never a 500.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, current_app, jsonify, make_response, render_template, request
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException

from ..access import visible
from ..actions.errors import ActionError, Conflict, NatsDown, Refused
from ..actions.triage import GroupConflict, GroupNotFound
from ..db.bounds import Bounds, set_bounds
from ..db.engine import hold_reads, release_reads
from ..db.liveness import UNAVAILABLE, UNREADABLE, describe, is_data_error, sentence
from ..errors import (
    DashboardError,
    DatabaseUnavailable,
    EntryNotFound,
    Forbidden,
    ForeignSite,
    Hidden,
    InvalidRequest,
    JobNotFound,
    NotFound,
    NotSaved,
    RequestRefused,
    UnsupportedBody,
)
from . import current_runtime
from .auth import identity_unknown
from .data import current_reader
from .responses import json_path, wants_json

log = logging.getLogger(__name__)
# Retry-After of a 503 for the database: about when the probe asks again.
DATABASE_RETRY_AFTER = 2

# The first class an error is an instance of decides; DashboardError itself is a 400.
STATUSES: tuple[tuple[type[DashboardError], int], ...] = (
    (NotFound, 404), (UnsupportedBody, 415), (InvalidRequest, 400), (Conflict, 409), (Refused, 422), (NatsDown, 503),
    (DatabaseUnavailable, 503), (Forbidden, 403), (NotSaved, 409), (ForeignSite, 403), (RequestRefused, 400),
    (DashboardError, 400),
)
TITLES = {EntryNotFound: "No such entry", JobNotFound: "No such job", NotFound: "Not found",
          InvalidRequest: "Not valid", DatabaseUnavailable: "The database cannot be used now",
          Hidden: "Hidden", Forbidden: "Not allowed", NotSaved: "Not saved", RequestRefused: "Refused",
          DashboardError: "Not done"}
#: Answered with their sentence alone (refusal), never with the entry the route was about to act on.
REFUSALS = (Forbidden, NotSaved, RequestRefused)


def status_of(exc: DashboardError) -> int:
    """The HTTP status an error is answered with."""
    return next(status for kind, status in STATUSES if isinstance(exc, kind))


def title_of(exc: DashboardError) -> str:
    """The heading of an error's page."""
    return next(title for kind, title in TITLES.items() if isinstance(exc, kind))


def init_app(app: Flask) -> None:
    """Answer DashboardErrors, the database's outages and, under /api/, HTTP errors (an unknown
    path, a wrong method); bound every request's database work."""
    app.register_error_handler(DashboardError, dashboard_error)
    app.register_error_handler(CSRFError, csrf_refused)
    app.register_error_handler(HTTPException, http_error)
    for kind in UNAVAILABLE:
        app.register_error_handler(kind, database_error)
    app.before_request(_bound_database_work)
    app.teardown_request(_end_database_work)


def answers_from_memory() -> bool:
    """True for a route that never asks the database (/healthz, the banner, static files)."""
    view = current_app.view_functions.get(request.endpoint or "")
    return request.endpoint == "static" or getattr(view, "from_memory", False)


def _bound_database_work() -> None:
    # A statement of a request runs for at most DLQ_DB_STATEMENT_TIMEOUT; and while the probe
    # knows the database unreachable, a request is answered at once instead of waiting on it.
    rt = current_runtime()
    set_bounds(Bounds(statement=rt.settings.database_statement_timeout))
    hold_reads()  # the request's reads share one connection
    probe = rt.database
    if probe is not None and not probe.state.reachable and request.endpoint and not answers_from_memory():
        raise DatabaseUnavailable(probe.state.reason())


def _end_database_work(_exc: BaseException | None) -> None:
    release_reads()
    set_bounds(None)


def database_error(exc: Exception):
    """A route's database work failed because the database cannot be used now: a 503. A value
    that could not be read (``is_data_error``) is no outage: a 500 that says so, and the log."""
    if is_data_error(exc):
        log.error("%s %s: a stored value could not be read: %s", request.method, request.path, describe(exc),
                  exc_info=exc)
        identity_unknown()  # the error page asks the database nothing more
        if wants_json():
            return jsonify(error=UNREADABLE), 500
        return current_app.response_class(UNREADABLE + "\n", status=500, mimetype="text/plain") \
            if request.headers.get("HX-Request") else \
            make_response(render_template("error.html", title="Not done", message=UNREADABLE), 500)
    log.warning("%s %s: the database could not be used: %s", request.method, request.path, describe(exc))
    return database_unavailable(DatabaseUnavailable(sentence(exc)))


def database_unavailable(exc: DatabaseUnavailable):
    """The sentence as JSON, as text for htmx, or the error page with the status banner; nothing
    on the way asks the database again (who is asking is not known: no identity)."""
    identity_unknown()
    headers = {"Retry-After": str(DATABASE_RETRY_AFTER)}
    if wants_json():
        return jsonify(error=str(exc)), 503, headers
    if request.headers.get("HX-Request"):
        return current_app.response_class(str(exc) + "\n", status=503, mimetype="text/plain", headers=headers)
    page = render_template("error.html", title=TITLES[DatabaseUnavailable], message=str(exc))
    return make_response(page, 503, headers)


def error_body(exc: DashboardError) -> dict[str, Any]:
    """The JSON of an error: the sentence, and what an action error knows besides."""
    body: dict[str, Any] = {"error": str(exc)}
    if isinstance(exc, ActionError):
        if isinstance(exc, Conflict) and exc.entry_id is not None:
            current = _readable(current_runtime().store.get_entry(exc.entry_id))
            body["entry"] = current.to_dict() if current else None
        if isinstance(exc, GroupConflict):  # the group as it is now, as an entry's conflict has the entry
            try:
                body["group"] = visible.group(current_reader(), current_runtime().store, exc.group_id).to_dict()
            except GroupNotFound:  # gone meanwhile (a purge): no group to show, still the 409
                body["group"] = None
        if exc.publish is not None:
            body["publish"] = exc.publish.to_dict()
        if exc.errors:
            body["schema_errors"] = exc.errors
    return body


def _readable(entry):
    """The entry if this request's reader may read it (its scopes cover it), else None."""
    return entry if entry is not None and visible.covered(current_reader().reads, entry) else None


def dashboard_error(exc: DashboardError):
    """JSON for the API; for a page, the entry acted on with why it was not done, or an error page."""
    if isinstance(exc, DatabaseUnavailable):
        return database_unavailable(exc)
    if isinstance(exc, REFUSALS):
        return refusal(exc)
    status = status_of(exc)
    if wants_json():
        return jsonify(error_body(exc)), status
    if request.endpoint == "actions.validate":  # the editor's check says it where its verdict was
        return current_app.response_class(str(exc) + "\n", status=status, mimetype="text/plain")
    entry_id = exc.entry_id if isinstance(exc, ActionError) else None
    if entry_id is None and request.method == "POST":
        entry_id = (request.view_args or {}).get("entry_id")
    if entry_id is not None:
        return not_done_page(exc, entry_id, status)
    return make_response(render_template("error.html", title=title_of(exc), message=str(exc)), status)


def refusal(exc: DashboardError):
    """A refusal as JSON for the API, its sentence for htmx (shown where the request was made),
    the error page for a browser."""
    status = status_of(exc)
    if wants_json():
        return jsonify(error=str(exc)), status
    if request.headers.get("HX-Request"):
        return current_app.response_class(str(exc) + "\n", status=status, mimetype="text/plain")
    return make_response(render_template("error.html", title=title_of(exc), message=str(exc)), status)


def csrf_refused(exc: CSRFError):
    """A missing or wrong CSRF token (Flask-WTF raises its own error): refused with a sentence."""
    return refusal(RequestRefused(f"Refused: {exc.description} Reload the page and try again."))


def not_done_page(exc: DashboardError, entry_id: int, status: int):
    """Why an action on an entry was not done; for a conflict, what changed since the version seen."""
    store = current_runtime().store
    entry = _readable(store.get_entry(entry_id))  # outside the reader's scopes: as an unknown id's page
    seen = exc.seen_version if isinstance(exc, ActionError) else None
    since = [a for a in (entry.actions if entry else []) if seen is not None and (a["version"] or 0) >= seen]
    republishes = [r for r in store.republishes_of(entry_id) if entry and seen is not None and r["version"] >= seen]
    return make_response(render_template(
        "conflict.html", error=exc, conflict=isinstance(exc, Conflict), entry=entry, seen=seen, since=since,
        republishes=republishes), status)


def http_error(exc: HTTPException):
    """An unknown API path or method answers like every other API error, with a sentence that
    says where the routes are (an unknown path) or which methods the path takes; a body too
    large says how large and what is taken, to the API and to a page."""
    if exc.code == 413:
        limit = f"{(request.max_content_length or 0) / 2 ** 20:g} MB"
        sent = f"is {request.content_length / 2 ** 20:,.1f} MB" if request.content_length else f"is over {limit}"
        sentence = (f"The request's body {sent}; the dashboard takes at most {limit} "
                    "(an edited payload, a bulk selection). Nothing was done.")
        if request.content_length and request.content_length <= (request.max_content_length or 0):
            field = request.max_form_memory_size or 0  # a body it takes, with a field larger than this form takes
            sentence = (f"A field of this form is larger than the {field:,} bytes it takes (only an edited "
                        "payload or a patch may be larger). Nothing was done.")
        if wants_json():
            return jsonify(error=sentence), 413
        if request.headers.get("HX-Request"):
            return current_app.response_class(sentence + "\n", status=413, mimetype="text/plain")
        return make_response(render_template("error.html", title="Too large", message=sentence), 413)
    if json_path(request.path) and exc.code and exc.code >= 400:
        sentence = exc.description or exc.name
        if exc.code == 404 and request.url_rule is None:
            sentence = (f"No route of the API answers {request.method} {request.path[:200]}: "
                        "/api/openapi.json lists them.")
        elif exc.code == 405:
            sentence = _method_refused(exc)
        return jsonify(error=sentence), exc.code
    if exc.code == 404 and request.url_rule is None and not request.headers.get("HX-Request"):
        # A page's address that names no page: the dashboard's own page, not the server's bare one.
        page = render_template("error.html", title="Not found",
                               message=f"There is no page at {request.path[:200]}.")
        return make_response(page, 404)
    if exc.code == 405 and not request.headers.get("HX-Request"):
        # A page's address asked with a method it does not take (PUT /views, DELETE /login): the
        # dashboard's own page, saying which it takes, as the API's sentence does.
        response = make_response(render_template("error.html", title="Method not allowed",
                                                  message=_method_refused(exc)), 405)
        response.headers["Allow"] = ", ".join(getattr(exc, "valid_methods", None) or ())
        return response
    return exc


def _method_refused(exc: HTTPException) -> str:
    """A 405's sentence: the method the path does not take, and those it does."""
    allowed = sorted(set(getattr(exc, "valid_methods", None) or ()) - {"HEAD", "OPTIONS"})
    return f"{request.path[:200]} does not take {request.method}" + (f": use {' or '.join(allowed)}." if allowed else ".")
