"""The audit, as a page and as JSON: who did what, when, to which entry, with the msgId and the
broker's answer. Read-only: no route changes it."""

from __future__ import annotations

from flask import Blueprint, jsonify, render_template, request

from ..entries.audit import is_folded
from ..errors import InvalidRequest
from . import current_runtime, params
from .auth import requires
from ..access import visible
from .data import current_reader, list_fields
from .responses import render_block

bp = Blueprint("audit", __name__)


@bp.route("/audit")
@requires("viewer")
def audit():
    """One page of the audit, newest first, narrowed by entry, job, actor or action."""
    try:
        page, error = seen_audit(request.args, fold=True), None
    except InvalidRequest as exc:
        page, error = {"actions": [], "next_cursor": None}, str(exc)
    args = {k: v for k, v in request.args.items() if k != "cursor"}
    return render_template("audit.html", page=page, error=error, args=args,
                           folded=is_folded(request.args, True)), (400 if error else 200)


@bp.route("/audit/jobs/<int:job_id>/items")
@requires("viewer", fragment=True)
def job_items(job_id: int):
    """A bulk job's item records, newest first, a page at a time: what its folded row opens to.
    A job that is not there (or not the reader's) is a 404, not "No item records yet."."""
    visible.check_job(current_reader(), current_runtime().engine, job_id)
    args = {**request.args.to_dict(), "job": str(job_id), "items": "1"}
    page = seen_audit(args)
    return render_block("audit.html", "job_items", page=page, job_id=job_id)


@bp.route("/api/audit")
@requires("viewer")
def api_audit():
    """The audit as JSON (``fold`` 1 folds a job's items into its record, as the page does)."""
    return jsonify(seen_audit(request.args))


def seen_audit(args, *, fold: bool = False) -> dict:
    """One page of the audit (audit_page) as this request's reader sees it."""
    params.refuse_misspelt(args, params.AUDIT_PARAMETERS, fields=False)
    return visible.read_audit(current_reader(), current_runtime().store, args, fold=fold, fields=list_fields())
