"""Repair by the schema over HTTP: one entry's repair (its line diff, then Republish), the
preview over a selection, a filter or a group (a page and its JSON twin). The job itself is
started as every bulk job is (``POST /bulk``, ``POST /api/bulk`` with ``action: repair``)."""

from __future__ import annotations

import hashlib

from flask import Blueprint, jsonify, render_template, request, url_for

from ..actions.bulk.jobs import NothingMatches, select_items
from ..actions.bulk.repairing import ALREADY_PASSES, preview_repair, repair_entry
from ..actions.decisions import edited_from
from ..actions.errors import Conflict, NatsDown, Refused
from ..actions.republish import republish_entry, republish_targets
from ..entries.repair import REPAIRED, VALID
from ..errors import DashboardError, InvalidRequest
from . import current_runtime, params
from .auth import actor_name, requires
from .actions import done, kept_list_args, republished_sentence
from .data import acting, entry_to_act_on
from .errors import status_of
from .presenters.payloads import line_diff
from .responses import after_post

bp = Blueprint("repair", __name__)


def digest(payload: bytes) -> str:
    """What the repair page shows, in short: a Republish of another repair (the schema changed) is refused."""
    return hashlib.sha256(payload).hexdigest()[:32]


# --- one entry -----------------------------------------------------------------------------------

def _diff(entry, repaired: bytes) -> list:
    """The repair's line diff from the stored payload, or from gzip bytes no header declares
    decompressed (the repair's first change)."""
    base, unpacked = edited_from(entry)
    return line_diff(base, repaired, ("stored, decompressed" if unpacked else "stored", "repaired"))


def _entry_page(entry, *, error: Exception | str | None = None, status: int = 200):
    rt = current_runtime()
    seen = request.values.get("version", "").strip()
    result = repair_entry(rt, entry)
    return render_template(
        "repair.html", entry=entry, version=params.version(seen) if seen else entry.version, result=result,
        repaired=result.outcome == REPAIRED, already=ALREADY_PASSES if result.outcome == VALID else None,
        diff=_diff(entry, result.payload) if result.outcome == REPAIRED else [],
        digest=digest(result.payload), targets=republish_targets(rt, entry.original_subject, entry.source), error=error,
        list_args=kept_list_args()), status


@bp.route("/entries/<int:entry_id>/repair")
@requires("operator")
def entry_repair(entry_id: int):
    """The entry's payload repaired by its current schema, as a line diff, with Republish."""
    return _entry_page(entry_to_act_on(entry_id))


@bp.route("/entries/<int:entry_id>/repair", methods=["POST"])
@requires("operator")
def entry_repair_republish(entry_id: int):
    """Republish the repaired payload the page showed (the same exactly-once republish as the
    editor's: a second click publishes nothing more); back to the entry's timeline."""
    entry = entry_to_act_on(entry_id)
    version = params.version(request.form.get("version"))
    result = repair_entry(current_runtime(), entry)
    if result.outcome != REPAIRED:
        return _entry_page(entry, error=result.reason or ALREADY_PASSES, status=422)
    if request.form.get("digest") != digest(result.payload):
        raise Conflict("The repair changed since the page was shown (the schema or the entry changed): "
                       "look at it again before republishing.", entry_id=entry_id, seen_version=version)
    try:
        outcome = republish_entry(current_runtime(), entry_id, version, actor=actor_name(), payload=result.payload)
    except (InvalidRequest, Refused, NatsDown) as exc:
        return _entry_page(entry, error=exc, status=status_of(exc))
    # As the editor's: what was sent where, said on the entry's page, which walks the list still.
    done(republished_sentence(entry, outcome.publish, "repaired"), "See it in the timeline")
    return after_post(url_for("pages.entry", entry_id=entry_id, **kept_list_args()))


# --- many entries --------------------------------------------------------------------------------

def _preview(selection: dict) -> tuple[dict, dict]:
    """The selection's summary and what repairing it would do; NothingMatches when nothing is selected."""
    rt = current_runtime()
    # Only what the reader's operator grants cover (by ids, another id is left out as unknown).
    items, summary = select_items(rt, **acting(), **{**selection, "only_valid": False})
    if not items:
        raise NothingMatches()
    preview = preview_repair(rt, items.ids)
    for example in preview["examples"]:  # the editor's line diff of the pretty forms, numbers as written
        example["diff"] = line_diff(example.pop("before"), example.pop("after"),
                                    ("stored, decompressed" if example["decompressed"] else "stored", "repaired"))
    return summary, preview


def bulk_repair_page(*, error: str | None = None, status: int | None = None):
    """The preview page of a repair job (/bulk/preview with action=repair), and the page again
    with the reason when its job cannot start."""
    summary, preview = {}, None
    if error is None:
        try:
            summary, preview = _preview(params.form_selection())
        except DashboardError as exc:
            error, status = str(exc), status_of(exc)
    return render_template("bulk_repair.html", form=params.bulk_form(), error=error, summary=summary,
                           preview=preview), status or (400 if error else 200)


@bp.route("/api/repair/preview", methods=["POST"])
@requires("operator")
def api_repair_preview():
    """What repair by the schema would do to entries chosen by ``ids`` or ``filter`` (as
    ``POST /api/bulk`` takes them): would pass, still fail, cannot be repaired, by reason with
    examples, and the line diff of the first few. ``POST /api/bulk`` with ``action: repair`` starts it."""
    selection = params.bulk_selection(params.json_body(*params.REPAIR_PREVIEW_FIELDS))
    summary, preview = _preview(selection)
    return jsonify({"count": summary.get("count", 0), "upto": summary.get("upto"),
                    "filter": summary.get("filter"), **preview})
