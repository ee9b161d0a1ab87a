"""One failure group's page and its JSON twin, and the triage actions on it (SPEC section 11):
assign, resolve, ignore, reopen, notes. Each action parses its parameters, makes one call into
actions/triage.py and answers: JSON for /api/..., a redirect back to the group for a form.
Every read goes through access/visible.py with the request's reader.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from flask import Blueprint, jsonify, render_template, request, url_for

from ..access import visible
from ..actions.triage import GroupConflict, add_note, change_state, parse_state_change
from ..entries.filters import EntryFilter
from ..db.counts import GROUPS
from ..entries import triage
from ..entries.groups import Group
from ..entries.scoping import scope_condition
from ..errors import InvalidRequest
from ..numbers import VERSION_MAX, whole_number
from ..times import utcnow
from . import current_runtime, params
from .auth import actor_name, requires
from .data import current_reader, list_fields
from .errors import status_of
from .presenters.charts import build_chart, chart_bounds, describe_size
from .presenters.rows import snippet
from .actions import done
from .responses import after_post

bp = Blueprint("groups", __name__)
#: The newest entries the page lists (the rest are a link to the list filtered by the group).
NEWEST = 10


def trend_bounds(first: datetime | None, last: datetime | None) -> list[datetime]:
    """Bar edges that fit a group's span: a bar a minute for a burst of up to an hour, a bar an
    hour for up to two days (at least a day shown), the list's chart widths beyond."""
    if first is None or last is None:
        return []
    if last - first <= timedelta(hours=1):
        return chart_bounds(first, last, max_bars=61)  # the smallest width: one minute
    if last - first <= timedelta(days=2):
        end = last.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        hours = max(math.ceil((end - first) / timedelta(hours=1)), 24)
        return [end - timedelta(hours=hours - i) for i in range(hours + 1)]
    return chart_bounds(first, last)


def group_data(group_id: int, *, with_activity: bool = True) -> dict[str, Any]:
    """The group as the reader sees it, with its activity: the page's and the JSON's one value."""
    reader, store = current_reader(), current_runtime().store
    found = visible.group(reader, store, group_id)
    return {"group": found,
            "activity": visible.group_activity(reader, store, group_id) if with_activity else []}


def group_json(found: Group, activity: list[dict] | None = None) -> dict[str, Any]:
    """A group as GET /api/groups/<id> answers it (``activity`` when read)."""
    body = found.to_dict()
    if activity is not None:
        body["activity"] = activity
    return body


# --- the page ------------------------------------------------------------------------------------

@bp.route("/groups/<int:group_id>")
@requires("viewer")
def group_page(group_id: int):
    """A failure group: its label and key, state with its actions, notes and activity, the trend
    at a resolution that fits its span, its counts, who is involved, its newest entries."""
    return _group_page(group_id)


#: The group page's boxes a refused state change can name, by the field the API names ("until
#: 'soon' is not valid"): the page says the box's label (its aria-label in group.html), not the
#: field's name ("until" is also the next box's visible word: "until ... more failures").
STATE_BOXES = {"until": "Ignore for", "until_count": "Ignore until this many more failures",
               "assignee": "Assign to", "resolved_in": "Resolved in release"}


def _state_refusal(exc: Exception) -> tuple[str, str | None]:
    """The sentence a refused change says on the page, and the box it speaks of (or None)."""
    sentence = str(exc)
    for field, label in STATE_BOXES.items():
        if sentence.startswith(field + " ") and request.form.get(field):
            return label + sentence[len(field):], field
    return sentence, None


def _changed_sentence(group_id: int, state: str, assignee: str | None) -> str:
    """What a state change from the page did, said on the page it leads back to."""
    if state == "investigating":
        return f"Group {group_id} is assigned to {assignee}."
    return f"Group {group_id} is {'open again' if state == 'open' else state}."


def _group_page(group_id: int, *, state_error: str | None = None, kept: Any = None, status: int = 200,
                error_field: str | None = None):
    """The group's page; with ``state_error``, a state change refused, the form's values ``kept``."""
    rt, reader = current_runtime(), current_reader()
    data = group_data(group_id)
    found: Group = data["group"]
    flt = EntryFilter(group=str(group_id))
    tallies = visible.tallies(reader, rt.store)
    bounds = trend_bounds(found.first_seen, found.last_seen)
    totals, _ = tallies.received_between(flt, bounds)
    chart = build_chart(bounds, totals)
    newest = visible.page(reader, rt.store, EntryFilter(group=str(group_id), limit=NEWEST), list_fields(), rows=True)
    return render_template(
        "group.html", g=found, activity=data["activity"], chart=chart,
        bar_size=describe_size(chart.bar_size) if chart.bars else "",
        involved=visible.group_involved(reader, rt.store, group_id), newest=newest.entries,
        more=newest.next_cursor is not None, filter_args=found.filter_args(), snippet=snippet,
        notes=[a for a in data["activity"] if a["text"]], state_error=state_error, kept=kept or {},
        error_field=error_field, outside_acts=None if visible.may_act_on(reader, found.subject, found.source)
        or not reader.may("operator") else visible.GROUP_NOT_YOURS.format(id=found.id),
        assignees=triage.assignee_names(rt.engine, scope_condition(GROUPS.c.subject, reader.reads))
        if reader.may("operator") else []), status


GROUP_SEEN = "the group's version as you saw it"


def group_version(raw: Any) -> int:
    """The group's version as seen, from a form field (a 400 with a sentence); JSON's is
    params.json_version's."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise InvalidRequest(f"version is required: send {GROUP_SEEN} (a whole number).")
    return whole_number(raw, "version", high=VERSION_MAX, what=GROUP_SEEN)


def _form_body() -> dict[str, Any]:
    form = request.form
    body = {k: form.get(k) for k in ("state", "assignee", "note", "until", "until_count", "resolved_in")}
    if form.get("assign") == "me":
        body["assignee"] = actor_name()
    return body


@bp.route("/groups/<int:group_id>/state", methods=["POST"])
@requires("operator")
def group_state_form(group_id: int):
    """A state change from the group's page (the version seen rides in the form)."""
    visible.group_to_change(current_reader(), current_runtime().store, group_id)
    try:
        change = parse_state_change(_form_body(), utcnow(), me=actor_name())
        assignee = change_state(current_runtime().engine, group_id, group_version(request.form.get("version")),
                                change, actor=actor_name())
    except (InvalidRequest, GroupConflict) as exc:
        # The group's page again, as it is now (who changed it shows in its activity), with why
        # and what was typed: a page of its own lost both ("tomorrow", a release's name).
        sentence, field = _state_refusal(exc)
        return _group_page(group_id, state_error=sentence, kept=request.form, status=status_of(exc), error_field=field)
    done(_changed_sentence(group_id, change.state, assignee), "See its activity", "activity-heading")
    return after_post(url_for("groups.group_page", group_id=group_id))


@bp.route("/groups/<int:group_id>/notes", methods=["POST"])
@requires("operator")
def group_note_form(group_id: int):
    """A note from the group's page."""
    visible.group_to_change(current_reader(), current_runtime().store, group_id)
    add_note(current_runtime().engine, group_id, request.form.get("text"), actor=actor_name())
    return after_post(url_for("groups.group_page", group_id=group_id) + "#notes")


# --- JSON ------------------------------------------------------------------------------------------

@bp.route("/api/groups/<int:group_id>")
@requires("viewer")
def api_group(group_id: int):
    """One group with its state and its activity log."""
    data = group_data(group_id)
    return jsonify(group_json(data["group"], data["activity"]))


@bp.route("/api/groups/<int:group_id>/state", methods=["POST"])
@requires("operator")
def api_group_state(group_id: int):
    """Change a group's state with the version seen; a stale one is a 409."""
    visible.group_to_change(current_reader(), current_runtime().store, group_id)
    body = params.json_body(*params.GROUP_STATE_FIELDS)
    change = parse_state_change(body, utcnow(), me=actor_name())
    change_state(current_runtime().engine, group_id, params.json_version(body.get("version"), GROUP_SEEN), change,
                 actor=actor_name())
    return jsonify(group=group_json(group_data(group_id, with_activity=False)["group"]))


@bp.route("/api/groups/<int:group_id>/notes", methods=["POST"])
@requires("operator")
def api_group_note(group_id: int):
    """Add a note to a group's activity."""
    visible.group_to_change(current_reader(), current_runtime().store, group_id)
    text = params.json_body(*params.GROUP_NOTE_FIELDS).get("text")
    note = add_note(current_runtime().engine, group_id, text, actor=actor_name())
    return jsonify(note=note), 201
