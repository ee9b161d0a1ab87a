"""Bulk jobs over HTTP: preview a selection, start a job, follow and cancel it (pages and JSON)."""

from __future__ import annotations

from flask import Blueprint, jsonify, render_template, request, url_for

from ..actions.bulk.jobs import cancel_job, create_job, job_status, select_items
from ..actions.bulk.listing import JOBS_LIMIT, JOBS_MAX, list_jobs
from ..actions.republish import republish_targets
from ..errors import DashboardError, InvalidRequest
from ..numbers import whole_number
from . import current_runtime, params
from .auth import actor_name, requires
from .data import jobs_as_seen
from .errors import status_of
from .responses import after_post, page_or_fragment

bp = Blueprint("bulk", __name__)
PREVIEW_ROWS = 20
MAX_ITEMS_SHOWN = 1000


JOB_STATES = ("running", "finished")


def jobs_page(args) -> tuple[dict, dict[str, str]]:
    """One page of jobs under the request's ``state``, ``cursor`` and ``limit``, and those
    arguments as the page's links keep them; InvalidRequest, a 400, for a bad one."""
    state = (args.get("state") or "").strip() or None
    if state is not None and state not in JOB_STATES:
        raise InvalidRequest(f"state {state!r} is not valid: use running or finished, or leave it out")
    raw = (args.get("limit") or "").strip()
    limit = whole_number(raw, "limit", low=1, high=JOBS_MAX, what="jobs a page") if raw else JOBS_LIMIT
    page = list_jobs(current_runtime().engine, cursor=(args.get("cursor") or "").strip() or None,
                     limit=limit, state=state)
    jobs_as_seen(page["jobs"])
    kept = {k: v for k, v in (("state", state), ("limit", raw)) if v}
    return page, kept


# --- JSON ----------------------------------------------------------------------------------------

@bp.route("/api/jobs")
@requires("viewer")
def api_jobs():
    """Every bulk job, newest first: who, what, the selection, progress, rate, ETA, result
    (``state`` running or finished narrows them; ``cursor`` and ``limit`` page them)."""
    return jsonify(jobs_page(request.args)[0])


@bp.route("/api/bulk", methods=["POST"])
@requires("operator")
def api_bulk():
    """Start a bulk republish or close over ids or a filter; 202 with the job's id."""
    body = params.json_body()
    job_id = create_job(current_runtime(), str(body.get("action")), actor=actor_name(), note=body.get("note"),
                        force=bool(body.get("force")), **params.bulk_selection(body))
    response = jsonify(job=job_id)
    response.headers["Location"] = url_for("bulk.api_job", job_id=job_id)
    return response, 202


@bp.route("/api/jobs/<int:job_id>")
@requires("viewer")
def api_job(job_id: int):
    """A job's progress and its items' results (``state`` narrows the items, ``limit`` up to 1000)."""
    raw = request.args.get("limit", "").strip()
    limit = min(whole_number(raw, "limit", what="items to include"), MAX_ITEMS_SHOWN) if raw else 200
    status = job_status(current_runtime(), job_id, item_state=request.args.get("state") or None, limit=limit)
    return jsonify(jobs_as_seen([status])[0])


@bp.route("/api/jobs/<int:job_id>/cancel", methods=["POST"])
@requires("operator")
def api_cancel_job(job_id: int):
    """Cancel a job after its current window."""
    cancel_job(current_runtime(), job_id, actor=actor_name())
    return jsonify(job_status(current_runtime(), job_id, limit=0))


# --- pages ---------------------------------------------------------------------------------------

@bp.route("/bulk/preview", methods=["POST"])
@requires("operator")
def bulk_preview():
    """How many entries a bulk action would take, before it starts."""
    rt = current_runtime()
    action = request.form.get("action", "republish")
    try:
        selection = params.form_selection()
        items, summary = select_items(rt, **selection)
        error = None if items else "No entries match; nothing to do."
    except DashboardError as exc:
        items, summary, selection, error = [], {}, {}, str(exc)
    # A republish reaches every consumer of its subject: show them before the job starts.
    targets = {subject: republish_targets(rt, subject) for subject in list(summary.get("subjects", {}))[:5]
               if subject} if action == "republish" else {}
    return render_template("job.html", preview=True, action=action, items=items[:PREVIEW_ROWS], summary=summary,
                           targets=targets, selection=selection, form=request.form, error=error, job=None), \
        (400 if error else 200)


@bp.route("/bulk", methods=["POST"])
@requires("operator")
def bulk_create():
    """Start the bulk job the preview showed; the preview again with the reason if it cannot start."""
    try:
        job_id = create_job(current_runtime(), request.form.get("action", ""), actor=actor_name(),
                            note=request.form.get("note"), force=request.form.get("force") == "on",
                            **params.form_selection())
    except DashboardError as exc:
        return render_template("job.html", preview=True, action=request.form.get("action"), items=[], targets={},
                               summary={}, selection={}, form=request.form, error=str(exc), job=None), \
            status_of(exc)
    return after_post(url_for("bulk.job_page", job_id=job_id))


@bp.route("/jobs")
@requires("viewer")
def jobs():
    """Running and finished jobs, newest first; the table polls itself while one runs."""
    page, kept = jobs_page(request.args)
    return page_or_fragment("jobs.html", "jobs", page=page, kept=kept,
                            running=any(j["state"] not in ("done", "cancelled") for j in page["jobs"]))


@bp.route("/jobs/<int:job_id>")
@requires("viewer")
def job_page(job_id: int):
    """A job's progress; the widget polls itself through htmx until the job ends."""
    status = jobs_as_seen([job_status(current_runtime(), job_id, item_state=request.args.get("state") or None)])[0]
    return page_or_fragment("job.html", "progress", job=status, preview=False, state=request.args.get("state"))


@bp.route("/jobs/<int:job_id>/cancel", methods=["POST"])
@requires("operator")
def job_cancel(job_id: int):
    """Cancel a job; its page shows it stop."""
    cancel_job(current_runtime(), job_id, actor=actor_name())
    return after_post(url_for("bulk.job_page", job_id=job_id))
