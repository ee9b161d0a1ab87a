"""The audit, as a page and as JSON: who did what, when, to which entry, with the msgId and the
broker's answer. Read-only: no route changes it."""

from __future__ import annotations

from flask import Blueprint, jsonify, render_template, request

from ..entries.audit import audit_page
from ..errors import InvalidRequest
from . import current_runtime
from .auth import requires

bp = Blueprint("audit", __name__)


@bp.route("/audit")
@requires("viewer")
def audit():
    """One page of the audit, newest first, narrowed by entry, job, actor or action."""
    try:
        page, error = audit_page(current_runtime().engine, request.args), None
    except InvalidRequest as exc:
        page, error = {"actions": [], "next_cursor": None}, str(exc)
    args = {k: v for k, v in request.args.items() if k != "cursor"}
    return render_template("audit.html", page=page, error=error, args=args), (400 if error else 200)


@bp.route("/api/audit")
@requires("viewer")
def api_audit():
    """The audit as JSON."""
    return jsonify(audit_page(current_runtime().engine, request.args))
