"""The audit, as a page and as JSON: who did what, when, to which entry, with the msgId and the
broker's answer. Read-only: no route changes it."""

from __future__ import annotations

from urllib.parse import urlsplit

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
    """One page of the audit (audit_page) as this request's reader sees it: a viewer, who is not
    shown /alerts, reads a sent-again alert's target as its origin alone (an incoming webhook's
    secret is its path: Slack's, Mattermost's)."""
    params.refuse_misspelt(args, params.AUDIT_PARAMETERS, fields=False)
    reader = current_reader()
    page = visible.read_audit(reader, current_runtime().store, args, fold=fold, fields=list_fields())
    if not reader.may("operator"):
        for record in page["actions"]:
            if record.get("action") == "send_alert_again" and (record.get("detail") or {}).get("target"):
                record["detail"] = {**record["detail"], "target": target_origin(record["detail"]["target"])}
    return page


def target_origin(target: str) -> str:
    """A webhook URL's scheme and host (``https://hooks.slack.com/…``), its path left out."""
    parts = urlsplit(target)
    return f"{parts.scheme}://{parts.netloc}/…" if parts.scheme and parts.netloc else "…"
