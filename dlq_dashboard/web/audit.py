"""The audit, as a page and as JSON: who did what, when, to which entry, with the msgId and the
broker's answer. Read-only: no route changes it."""

from __future__ import annotations

from flask import Blueprint, jsonify, render_template, request

from ..entries.audit import audit_page, is_folded
from ..errors import InvalidRequest
from . import current_runtime
from .auth import requires
from .data import audit_as_seen
from .responses import render_block

bp = Blueprint("audit", __name__)


@bp.route("/audit")
@requires("viewer")
def audit():
    """One page of the audit, newest first, narrowed by entry, job, actor or action."""
    try:
        page, error = audit_as_seen(audit_page(current_runtime().engine, request.args, fold=True)), None
    except InvalidRequest as exc:
        page, error = {"actions": [], "next_cursor": None}, str(exc)
    args = {k: v for k, v in request.args.items() if k != "cursor"}
    return render_template("audit.html", page=page, error=error, args=args,
                           folded=is_folded(request.args, True)), (400 if error else 200)


@bp.route("/audit/jobs/<int:job_id>/items")
@requires("viewer", fragment=True)
def job_items(job_id: int):
    """A bulk job's item records, newest first, a page at a time: what its folded row opens to."""
    args = {**request.args.to_dict(), "job": str(job_id), "items": "1"}
    page = audit_as_seen(audit_page(current_runtime().engine, args))
    return render_block("audit.html", "job_items", page=page, job_id=job_id)


@bp.route("/api/audit")
@requires("viewer")
def api_audit():
    """The audit as JSON (``fold`` 1 folds a job's items into its record, as the page does)."""
    return jsonify(audit_as_seen(audit_page(current_runtime().engine, request.args)))
