"""Operator actions over HTTP: republish (plain or edited), close, reopen, bulk jobs and the audit.

Each route parses its parameters, calls the domain API (actions.py, jobs.py) and answers:
JSON for /api/..., and for pages a redirect after the POST (an htmx request gets HX-Redirect),
the conflict page on 409, or the form again with the error.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
from typing import Any

from flask import Blueprint, current_app, jsonify, make_response, redirect, render_template, request, url_for
from sqlalchemy import select

from ..action_errors import ActionError
from ..actions import close_entry, reopen_entry, republish_entry, republish_targets
from ..contract import decode_text, format_time
from ..jobs import JobError, cancel_job, create_job, job_status, select_items
from ..models import Action
from ..store import FilterError, decode_cursor, encode_cursor
from .auth import actor_name, requires

bp = Blueprint("actions", __name__)
AUDIT_LIMIT = 100


def runtime():
    """The app's Runtime."""
    return current_app.extensions["dlq"]


class BadRequest(ValueError):
    """A parameter that does not parse (400)."""


def _version(raw: Any) -> int:
    if isinstance(raw, bool) or raw is None or not str(raw).strip().lstrip("-").isdigit():
        raise BadRequest("version is required: send the entry's version as you saw it (a whole number).")
    return int(str(raw).strip())


def _json_body() -> dict:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise BadRequest("Send a JSON object as the request body.")
    return body


def _api_error(exc: Exception):
    if isinstance(exc, (BadRequest, JobError, FilterError)):
        return jsonify(error=str(exc)), 400
    body: dict[str, Any] = {"error": str(exc)}
    if exc.entry_id is not None and exc.status == 409:
        current = runtime().store.get_entry(exc.entry_id)
        body["entry"] = current.to_dict() if current else None
    if exc.publish is not None:
        body["publish"] = exc.publish.to_dict()
    if exc.errors:
        body["schema_errors"] = exc.errors
    return jsonify(body), exc.status


# --- JSON ----------------------------------------------------------------------------------------

@bp.route("/api/entries/<int:entry_id>/republish", methods=["POST"])
@requires("operator")
def api_republish(entry_id: int):
    """Republish with the version seen; ``payload_base64`` sends an edited payload, ``force`` an invalid one."""
    try:
        body = _json_body()
        payload = None
        if body.get("payload_base64") is not None:
            try:
                payload = base64.b64decode(str(body["payload_base64"]), validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest("payload_base64 is not valid base64.") from None
        outcome = republish_entry(runtime(), entry_id, _version(body.get("version")), actor=actor_name(),
                                  payload=payload, force=bool(body.get("force")))
    except (ActionError, BadRequest) as exc:
        return _api_error(exc)
    return jsonify(outcome.to_dict())


@bp.route("/api/entries/<int:entry_id>/close", methods=["POST"])
@requires("operator")
def api_close(entry_id: int):
    """Acknowledge and close with an optional note."""
    try:
        body = _json_body()
        outcome = close_entry(runtime(), entry_id, _version(body.get("version")), actor=actor_name(),
                              note=body.get("note") if isinstance(body.get("note"), str) else None)
    except (ActionError, BadRequest) as exc:
        return _api_error(exc)
    return jsonify(outcome.to_dict())


@bp.route("/api/entries/<int:entry_id>/reopen", methods=["POST"])
@requires("operator")
def api_reopen(entry_id: int):
    """Reopen a closed or republished entry."""
    try:
        outcome = reopen_entry(runtime(), entry_id, _version(_json_body().get("version")), actor=actor_name())
    except (ActionError, BadRequest) as exc:
        return _api_error(exc)
    return jsonify(outcome.to_dict())


@bp.route("/api/entries/<int:entry_id>/targets")
@requires("viewer")
def api_targets(entry_id: int):
    """The stream and consumers a republish of this entry would reach."""
    entry = runtime().store.get_entry(entry_id, with_history=False)
    if entry is None:
        return jsonify(error=f"No entry {entry_id}."), 404
    return jsonify(republish_targets(runtime(), entry.original_subject))


def _bulk_args(source: dict) -> dict[str, Any]:
    flt = source.get("filter")
    if flt is not None and not isinstance(flt, dict):
        raise BadRequest("filter must be an object of the list's filters, e.g. {\"subject\": \"orders.*\"}.")
    ids = source.get("ids")
    if ids is not None and not isinstance(ids, list):
        raise BadRequest("ids must be a list of entry ids.")
    upto = source.get("upto")
    return {"ids": ids, "filter_args": {k: str(v) for k, v in flt.items()} if flt is not None else None,
            "only_valid": bool(source.get("only_valid")), "upto": int(upto) if upto not in (None, "") else None}


@bp.route("/api/bulk", methods=["POST"])
@requires("operator")
def api_bulk():
    """Start a bulk republish or close over ids or a filter; 202 with the job's id."""
    try:
        body = _json_body()
        job_id = create_job(runtime(), str(body.get("action")), actor=actor_name(), note=body.get("note"),
                            force=bool(body.get("force")), **_bulk_args(body))
    except (ActionError, BadRequest, JobError, FilterError) as exc:
        return _api_error(exc)
    response = jsonify(job=job_id)
    response.headers["Location"] = url_for("actions.api_job", job_id=job_id)
    return response, 202


@bp.route("/api/jobs/<int:job_id>")
@requires("viewer")
def api_job(job_id: int):
    """A job's progress and its items' results (``state`` narrows the items, ``limit`` up to 1000)."""
    limit = min(int(request.args.get("limit", "200")) if request.args.get("limit", "").isdigit() else 200, 1000)
    status = job_status(runtime(), job_id, item_state=request.args.get("state") or None, limit=limit)
    if status is None:
        return jsonify(error=f"No job {job_id}."), 404
    return jsonify(status)


@bp.route("/api/jobs/<int:job_id>/cancel", methods=["POST"])
@requires("operator")
def api_cancel_job(job_id: int):
    """Cancel a job after its current window."""
    try:
        cancel_job(runtime(), job_id, actor=actor_name())
    except ActionError as exc:
        return jsonify(error=str(exc)), 404
    return jsonify(job_status(runtime(), job_id, limit=0))


def audit_page(args) -> dict[str, Any]:
    """One page of the audit, newest first, narrowed by entry, job, actor or action."""
    table = Action.__table__
    query = select(table).order_by(table.c.id.desc())
    for name, column in (("entry", table.c.entry_id), ("job", table.c.job_id)):
        if args.get(name):
            if not str(args[name]).isdigit() or int(args[name]) >= 2**63:
                raise BadRequest(f"{name} must be a whole number below 2^63.")
            query = query.where(column == int(args[name]))
    for name, column in (("actor", table.c.actor), ("action", table.c.action)):
        if args.get(name):
            query = query.where(column == args[name])
    if args.get("cursor"):
        query = query.where(table.c.id < decode_cursor(args["cursor"]))
    raw = args.get("limit") or str(AUDIT_LIMIT)
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise BadRequest("limit must be a whole number from 1 to 1000.")
    with runtime().engine.connect() as conn:
        rows = conn.execute(query.limit(int(raw) + 1)).all()
    records = [{**r._mapping, "at": format_time(r.at), "detail": json.loads(r.detail or "{}")} for r in rows[:int(raw)]]
    return {"actions": records,
            "next_cursor": encode_cursor(records[-1]["id"]) if len(rows) > int(raw) else None}


@bp.route("/api/audit")
@requires("viewer")
def api_audit():
    """The audit as JSON (read-only: no route changes it)."""
    try:
        return jsonify(audit_page(request.args))
    except (BadRequest, FilterError) as exc:
        return _api_error(exc)


# --- pages ---------------------------------------------------------------------------------------

def _after_post(url: str):
    """POST-redirect-GET; htmx follows HX-Redirect instead of swapping a redirect in."""
    if request.headers.get("HX-Request"):
        response = make_response("", 204)
        response.headers["HX-Redirect"] = url
        return response
    return redirect(url, 303)


def _action_failed(exc: ActionError, entry_id: int):
    """The conflict page (what changed since the version seen) or the reason it was refused."""
    store = runtime().store
    entry = store.get_entry(entry_id)
    seen = exc.seen_version
    since = [a for a in (entry.actions if entry else []) if seen is not None and (a["version"] or 0) >= seen]
    republishes = [r for r in store.republishes_of(entry_id) if seen is not None and r["version"] >= seen]
    return render_template("conflict.html", error=exc, entry=entry, seen=seen, since=since,
                           republishes=republishes), exc.status


def _editor(entry, *, editing: bool, payload_text: str | None = None, error: ActionError | None = None,
            force: bool = False, status: int = 200):
    rt = runtime()
    # The version the operator saw on the page they came from: a change since then is a 409.
    seen = request.values.get("version", "")
    version = int(seen) if seen.isdigit() else entry.version
    text_payload = entry.payload_text
    encoding = "text" if text_payload is not None else "base64"
    original = text_payload if text_payload is not None else base64.b64encode(entry.payload).decode()
    current = payload_text if payload_text is not None else original
    return render_template("edit.html", entry=entry, version=version, editing=editing, encoding=encoding,
                           original=original,
                           payload=current, check=check_payload(entry, current, encoding), force=force,
                           targets=republish_targets(rt, entry.original_subject), error=error), status


def _form_payload(entry) -> bytes | None:
    """The edited payload of a form, or None for the original (a plain Republish sends none)."""
    if "payload" not in request.form:
        return None
    raw = request.form["payload"]
    if request.form.get("encoding") == "base64":
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest("The payload is not valid base64.") from None
    # Browsers send a textarea's line breaks as CRLF; keep the original's own line breaks.
    if b"\r\n" not in entry.payload:
        raw = raw.replace("\r\n", "\n")
    return raw.encode("utf-8")


def check_payload(entry, text: str, encoding: str) -> dict[str, Any]:
    """The current schema's verdict on an edited payload and its diff from the original."""
    if encoding == "base64":
        try:
            body = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return {"errors": [{"path": "", "message": "not valid base64"}], "schema": None, "diff": [],
                    "changed": True}
    else:
        body = (text.replace("\r\n", "\n") if b"\r\n" not in entry.payload else text).encode("utf-8")
    verdict = runtime().schemas.validate(entry.original_subject, body)
    before = decode_text(entry.payload) or base64.b64encode(entry.payload).decode()
    after = decode_text(body) if encoding == "text" else text
    diff = list(difflib.unified_diff(before.splitlines(), (after or "").splitlines(), "original", "edited",
                                     lineterm="", n=2))
    return {"errors": [e.to_dict() for e in verdict.errors], "schema": verdict.schema, "diff": diff,
            "changed": body != entry.payload}


def _entry_or_404(entry_id: int):
    entry = runtime().store.get_entry(entry_id)
    if entry is None:
        return None, (render_template("error.html", title="No such entry",
                                      message=f"There is no entry {entry_id}."), 404)
    return entry, None


@bp.route("/entries/<int:entry_id>/republish", methods=["GET"])
@requires("operator")
def confirm_republish(entry_id: int):
    """Confirm a republish: where it goes and which consumers will receive it."""
    entry, missing = _entry_or_404(entry_id)
    return missing or _editor(entry, editing=False)


@bp.route("/entries/<int:entry_id>/edit")
@requires("operator")
def edit(entry_id: int):
    """The payload editor: validated against the current schema as the operator types."""
    entry, missing = _entry_or_404(entry_id)
    return missing or _editor(entry, editing=True)


@bp.route("/entries/<int:entry_id>/validate", methods=["POST"])
@requires("operator")
def validate(entry_id: int):
    """The editor's live check (an htmx fragment): schema errors and the diff from the original."""
    from .pages import render_block

    entry, missing = _entry_or_404(entry_id)
    if missing:
        return missing
    encoding = "base64" if request.form.get("encoding") == "base64" else "text"
    return render_block("edit.html", "check", entry=entry,
                        check=check_payload(entry, request.form.get("payload", ""), encoding))


@bp.route("/entries/<int:entry_id>/republish", methods=["POST"])
@requires("operator")
def republish(entry_id: int):
    """Republish from the confirm page or the editor; back to the entry's timeline."""
    entry, missing = _entry_or_404(entry_id)
    if missing:
        return missing
    force = request.form.get("force") == "on"
    try:
        payload = _form_payload(entry)
        republish_entry(runtime(), entry_id, _version(request.form.get("version")), actor=actor_name(),
                        payload=payload, force=force)
    except BadRequest as exc:
        return _editor(entry, editing=True, payload_text=request.form.get("payload"),
                       error=ActionError(str(exc)), force=force, status=400)
    except ActionError as exc:
        if exc.status == 409:
            return _action_failed(exc, entry_id)
        return _editor(entry, editing="payload" in request.form, payload_text=request.form.get("payload"),
                       error=exc, force=force, status=exc.status)
    return _after_post(url_for("pages.entry", entry_id=entry_id))


@bp.route("/entries/<int:entry_id>/close", methods=["POST"])
@requires("operator")
def close(entry_id: int):
    """Acknowledge and close with a note."""
    try:
        close_entry(runtime(), entry_id, _version(request.form.get("version")), actor=actor_name(),
                    note=request.form.get("note"))
    except (ActionError, BadRequest) as exc:
        return _action_failed(exc if isinstance(exc, ActionError) else ActionError(str(exc)), entry_id)
    return _after_post(url_for("pages.entry", entry_id=entry_id))


@bp.route("/entries/<int:entry_id>/reopen", methods=["POST"])
@requires("operator")
def reopen(entry_id: int):
    """Reopen a closed or republished entry."""
    try:
        reopen_entry(runtime(), entry_id, _version(request.form.get("version")), actor=actor_name())
    except (ActionError, BadRequest) as exc:
        return _action_failed(exc if isinstance(exc, ActionError) else ActionError(str(exc)), entry_id)
    return _after_post(url_for("pages.entry", entry_id=entry_id))


@bp.route("/audit")
@requires("viewer")
def audit():
    """Who did what, when, to which entry, with the msgId and the broker's answer."""
    try:
        page, error = audit_page(request.args), None
    except (BadRequest, FilterError) as exc:
        page, error = {"actions": [], "next_cursor": None}, str(exc)
    args = {k: v for k, v in request.args.items() if k != "cursor"}
    return render_template("audit.html", page=page, error=error, args=args), (400 if error else 200)


def _form_selection() -> dict[str, Any]:
    form = request.form
    if form.get("by") == "filter":
        keys = ("status", "subject", "stream", "consumer", "reason", "q", "since", "until", "group")
        return _bulk_args({"filter": {k: form[k] for k in keys if form.get(k)}, "only_valid": form.get("only_valid"),
                           "upto": form.get("upto")})
    return _bulk_args({"ids": form.getlist("ids"), "upto": form.get("upto")})


@bp.route("/bulk/preview", methods=["POST"])
@requires("operator")
def bulk_preview():
    """How many entries a bulk action would take, before it starts."""
    action = request.form.get("action", "republish")
    try:
        selection = _form_selection()
        items, summary = select_items(runtime(), **selection)
        error = None if items else "No entries match; nothing to do."
    except (BadRequest, JobError, FilterError) as exc:
        items, summary, selection, error = [], {}, {}, str(exc)
    # A republish reaches every consumer of its subject: show them before the job starts.
    targets = {subject: republish_targets(runtime(), subject) for subject in list(summary.get("subjects", {}))[:5]
               if subject} if action == "republish" else {}
    return render_template("job.html", preview=True, action=action, items=items[:20], summary=summary,
                           targets=targets, selection=selection, form=request.form, error=error, job=None), \
        (400 if error else 200)


@bp.route("/bulk", methods=["POST"])
@requires("operator")
def bulk_create():
    """Start the bulk job the preview showed."""
    try:
        job_id = create_job(runtime(), request.form.get("action", ""), actor=actor_name(),
                            note=request.form.get("note"), force=request.form.get("force") == "on",
                            **_form_selection())
    except (BadRequest, JobError, FilterError, ActionError) as exc:
        return render_template("job.html", preview=True, action=request.form.get("action"), items=[], targets={},
                               summary={}, selection={}, form=request.form, error=str(exc), job=None), 400
    return _after_post(url_for("actions.job_page", job_id=job_id))


@bp.route("/jobs/<int:job_id>")
@requires("viewer")
def job_page(job_id: int):
    """A job's progress; the widget polls itself through htmx until the job ends."""
    from .pages import page_or_fragment

    status = job_status(runtime(), job_id, item_state=request.args.get("state") or None)
    if status is None:
        return render_template("error.html", title="No such job", message=f"There is no job {job_id}."), 404
    return page_or_fragment("job.html", "progress", job=status, preview=False, state=request.args.get("state"))


@bp.route("/jobs/<int:job_id>/cancel", methods=["POST"])
@requires("operator")
def job_cancel(job_id: int):
    """Cancel a job; its page shows it stop."""
    try:
        cancel_job(runtime(), job_id, actor=actor_name())
    except ActionError as exc:
        return render_template("error.html", title="No such job", message=str(exc)), 404
    return _after_post(url_for("actions.job_page", job_id=job_id))
