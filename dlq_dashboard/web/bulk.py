"""Bulk jobs over HTTP: preview a selection, start a job, follow and cancel it (pages and JSON)."""

from __future__ import annotations

from flask import Blueprint, jsonify, render_template, request, url_for

from ..actions.bulk.jobs import JobError, NothingMatches, Selection, cancel_job, check_job, create_job, select_items
from ..actions.bulk.listing import JOB_STATES, JOBS_LIMIT, JOBS_MAX, REASON_ITEMS
from ..actions.bulk.patching import parse_patch, patch_text, preview_patch
from ..actions.bulk.refusals import republish_refusals
from ..actions.republish import republish_targets
from ..db.models import ITEM_STATES
from ..errors import DashboardError, Forbidden, JobNotFound
from ..flags import flag
from ..numbers import whole_number
from . import current_runtime, params
from .auth import actor_name, requires
from ..access import visible
from .data import acting, current_reader, list_fields
from .presenters.payloads import line_diff
from .repair import bulk_repair_page
from .errors import status_of
from .responses import after_post, page_or_fragment

bp = Blueprint("bulk", __name__)
PREVIEW_ROWS = 20
MAX_ITEMS_SHOWN = 1000


def jobs_page(args) -> tuple[dict, dict[str, str]]:
    """One page of jobs under the request's ``state``, ``cursor`` and ``limit``, and those
    arguments as the page's links keep them; InvalidRequest, a 400, for a bad one."""
    state = params.one_of(args.get("state"), "state", JOB_STATES)
    raw = (args.get("limit") or "").strip()
    limit = whole_number(raw, "limit", low=1, high=JOBS_MAX, what="jobs a page") if raw else JOBS_LIMIT
    page = visible.read_jobs(current_reader(), current_runtime().store, list_fields(),
                             cursor=(args.get("cursor") or "").strip() or None, limit=limit, state=state)
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
    """Start a bulk republish, close, patch (one JSON Patch, then republish), repair (each payload
    by its current schema, then republish those that pass) or reopen over ids or a filter; 202
    with the job's id."""
    body = params.json_body(*params.BULK_FIELDS)
    action, selection = str(body.get("action")), params.bulk_selection(body)
    if action == "patch":  # only those that pass the schema once patched, unless told otherwise
        selection["only_valid"] = flag(body.get("only_valid"), "only_valid", default=True)
    job_id = create_job(current_runtime(), action, actor=actor_name(), note=body.get("note"),
                        force=flag(body.get("force"), "force"), patch=body.get("patch"),
                        **acting(), request_key=request.headers.get("Idempotency-Key"),
                        **selection)
    response = jsonify(job=job_id)
    response.headers["Location"] = url_for("bulk.api_job", job_id=job_id)
    return response, 202


@bp.route("/api/jobs/<int:job_id>")
@requires("viewer")
def api_job(job_id: int):
    """A job's progress and its items' results (``state`` narrows the items, ``limit`` up to 1000)."""
    raw = request.args.get("limit", "").strip()
    limit = min(whole_number(raw, "limit", what="items to include"), MAX_ITEMS_SHOWN) if raw else 200
    return jsonify(seen_job(job_id, item_state=item_state(), limit=limit))


def seen_job(job_id: int, **options) -> dict:
    """A job's progress and its items' results (job_status) as this request's reader sees them."""
    return visible.read_job(current_reader(), current_runtime(), job_id, list_fields(), **options)


def item_state() -> str | None:
    """The ``state`` a job's page and its JSON narrow the items to, if any."""
    return params.one_of(request.args.get("state"), "state", ITEM_STATES)


@bp.route("/api/jobs/<int:job_id>/cancel", methods=["POST"])
@requires("operator")
def api_cancel_job(job_id: int):
    """Cancel a job after its current window."""
    cancel(job_id)
    return jsonify(seen_job(job_id, limit=0))


def cancel(job_id: int) -> bool:
    """Cancel a job as the reader: JobNotFound when they may not see it, Forbidden (a 403 saying
    why) when they may see it but not act on all its entries (a single sign-on's grants may let
    one read more than act on)."""
    try:
        return cancel_job(current_runtime(), job_id, actor=actor_name(), scopes=current_reader().acts)
    except JobNotFound:
        visible.check_job(current_reader(), current_runtime().engine, job_id)  # not even seen: JobNotFound again
        raise Forbidden(f"You may see job {job_id} but not cancel it: some of its entries are outside the "
                        "subjects you may act on.") from None


def may_cancel(job_id: int) -> bool:
    """Whether the reader may cancel the job (the page offers Cancel job only then)."""
    try:
        check_job(current_runtime().engine, job_id, current_reader().acts)
    except JobNotFound:
        return False
    return True


# --- pages ---------------------------------------------------------------------------------------

@bp.route("/bulk/preview", methods=["GET", "POST"])
@requires("operator")
def bulk_preview():
    """How many entries a bulk action would take, before it starts. The list's and the groups'
    forms ask by GET (params.bulk_form); a POST is answered the same."""
    rt = current_runtime()
    form = params.bulk_form()
    action = form.get("action", "republish")
    if action == "patch":
        return _patch_preview()
    if action == "repair":
        return bulk_repair_page()
    # The address alone (a bookmark, a link): a page saying how to choose, not a bad request.
    bare = request.method != "POST" and not (form.get("by") or form.get("ids"))
    try:
        if bare:
            raise JobError("Nothing is selected: tick entries on the list, or set filters and preview "
                           "everything matching them.")
        selection = params.form_selection()
        items, summary = select_items(rt, **acting(), action=action, **selection)
        error, status = (None, 200) if items else (str(NothingMatches()), 400)
    except DashboardError as exc:
        items, summary, selection, error = Selection(), {}, {}, str(exc)
        status = 200 if bare else status_of(exc)  # a group read but not acted on: a 403
    # A republish reaches every consumer of its subject: show them before the job starts; and
    # what the job would refuse (no stream, the schema without the override), before Start.
    # (The entries with no subject go nowhere: the refusals below count them.)
    subjects = [(source, subject, n) for source, subject, n in summary.get("source_subjects", []) if subject]
    targets = [{"source": source, "subject": subject, "count": n, **republish_targets(rt, subject, source)}
               for source, subject, n in subjects[:5]] if action == "republish" else []
    refusals = republish_refusals(rt, items.ids, only_valid=bool(selection.get("only_valid"))) \
        if action == "republish" and items else None
    return render_template("job.html", preview=True, action=action, items=items.ids[:PREVIEW_ROWS].tolist(),
                           summary=summary, targets=targets, more_subjects=max(len(subjects) - len(targets), 0),
                           refusals=refusals, selection=selection, form=form,
                           error=error, job=None), status


@bp.route("/bulk", methods=["POST"])
@requires("operator")
def bulk_create():
    """Start the bulk job the preview showed; the preview again with the reason if it cannot start."""
    patching = request.form.get("action") == "patch"
    try:
        selection = params.form_selection()
        if patching:
            selection["only_valid"] = flag(request.form.get("only_valid"), "only_valid")
        job_id = create_job(current_runtime(), request.form.get("action", ""), actor=actor_name(),
                            note=request.form.get("note"), force=flag(request.form.get("force"), "force"),
                            patch=request.form.get("patch") if patching else None,
                            **acting(), request_key=request.form.get("request_key"), **selection)
    except DashboardError as exc:
        if patching:
            return _patch_page(error=str(exc), status=status_of(exc))
        if request.form.get("action") == "repair":
            return bulk_repair_page(error=str(exc), status=status_of(exc))
        return render_template("job.html", preview=True, action=request.form.get("action"), items=[], targets=[],
                               refusals=None, summary={}, selection={}, form=request.form, error=str(exc),
                               job=None), \
            status_of(exc)
    return after_post(url_for("bulk.job_page", job_id=job_id))


def _patch_page(*, error: str | None = None, status: int = 200, summary: dict | None = None,
                preview: dict | None = None):
    """The patch form: the selection, the patch and the option; with the preview once a patch is given."""
    form = params.bulk_form()
    # The option is on unless the form that brought the patch said otherwise.
    only_valid = flag(form.get("only_valid"), "only_valid") if "patch" in form else True
    return render_template("bulk_patch.html", form=form, error=error, summary=summary or {}, preview=preview,
                           only_valid=only_valid, patch=form.get("patch", "")), status


def _patch_preview():
    """The patch form for a selection; given a patch, what it would do to the selected entries."""
    rt, summary = current_runtime(), {}
    try:
        items, summary = select_items(rt, **acting(),
                                      **{**params.form_selection(), "only_valid": False})
        if not items:
            raise NothingMatches()
        form = params.bulk_form()
        if "patch" not in form:  # arrived from the list or a group: the form first
            return _patch_page(summary=summary)
        ops = parse_patch(form.get("patch"))
    except DashboardError as exc:
        return _patch_page(error=str(exc), status=status_of(exc), summary=summary)
    preview = preview_patch(rt, ops, items.ids)
    for example in preview["examples"]:  # the editor's line diff of the pretty forms, numbers as written
        if "after" in example:
            example["diff"] = line_diff(example.pop("before"), example.pop("after"), ("before", "after"))
    return _patch_page(summary=summary, preview=preview)


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
    state = item_state()
    status = seen_job(job_id, item_state=state)
    running = status["state"] not in ("done", "cancelled")
    # Cancel and "Reopen what it closed" only where the reader may act on every entry it took.
    acts = current_reader().may("operator") and may_cancel(job_id)
    return page_or_fragment("job.html", "progress", job=status, preview=False, state=state,
                            may_cancel=running and acts, may_act=acts, patch_text=patch_text(status["patch"]),
                            item_states=ITEM_STATES, reason_items=REASON_ITEMS)


@bp.route("/jobs/<int:job_id>/cancel", methods=["POST"])
@requires("operator")
def job_cancel(job_id: int):
    """Cancel a job; its page shows it stop."""
    cancel(job_id)
    return after_post(url_for("bulk.job_page", job_id=job_id))
