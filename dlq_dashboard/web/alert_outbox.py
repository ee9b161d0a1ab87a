"""The alert outbox over HTTP (admins and operators): /alerts and GET /api/alerts, one data
function for both, and "send again" for a failed alert (audited, CSRF, POST-redirect-GET)."""

from __future__ import annotations

from flask import Blueprint, jsonify, render_template, request, url_for

from ..alerts.listing import GROUPS, LIMIT, MAX_LIMIT, STATES, list_alerts, send_again
from ..alerts.outbox import AlertRule
from ..entries.groups import group_label
from ..entries.scoping import scope_condition
from ..numbers import whole_number
from ..times import format_time
from . import current_runtime, params
from .auth import actor_name, requires
from .data import current_reader
from .responses import after_post

bp = Blueprint("alert_outbox", __name__)


def _within(acting: bool = False):
    """The reader's scopes (``acting``: those they may act on) as a condition on the alerts'
    groups (None: every alert)."""
    reader = current_reader()
    return scope_condition(GROUPS.c.subject, reader.acts if acting else reader.reads)


def outbox(args) -> tuple[dict, dict[str, str]]:
    """The outbox under the request's ``state``, ``before`` and ``limit`` (a 400 for a bad one),
    and those arguments as the page's links keep them."""
    state = params.one_of(args.get("state"), "state", STATES)
    raw_limit, raw_before = (args.get("limit") or "").strip(), (args.get("before") or "").strip()
    limit = whole_number(raw_limit, "limit", low=1, high=MAX_LIMIT, what="alerts a page") if raw_limit else LIMIT
    before = whole_number(raw_before, "before", low=1, what="the alert id to page from") if raw_before else None
    found = list_alerts(current_runtime().engine, state=state, limit=limit, before=before, within=_within(),
                        acting=_within(acting=True))
    # Two groups of one subject differ by their error: each alert names its group's label, the
    # key as one line as /groups shows it (null once the group is gone).
    found["alerts"] = [{**{k: v for k, v in a.items() if k != "group_key"},
                        "group_label": group_label(a["group_key"]) if a["group_key"] is not None else None}
                       for a in found["alerts"]]
    return found, {k: v for k, v in (("state", state), ("limit", raw_limit)) if v}


@bp.route("/alerts")
@requires("operator")
def alerts():
    """The alert outbox, newest first: state, attempts, last error, next try, target."""
    found, kept = outbox(request.args)
    # Whether any alert can be raised here (an empty outbox says why it is empty).
    raising = AlertRule.from_settings(current_runtime().settings) is not None
    return render_template("alerts.html", found=found, kept=kept, states=STATES, raising=raising)


@bp.route("/api/alerts")
@requires("operator")
def api_alerts():
    """The alert outbox as JSON (``state`` narrows it, ``before`` and ``limit`` page it)."""
    found, _ = outbox(request.args)
    times = ("created_at", "next_attempt_at", "sent_at")
    return jsonify({**found, "alerts": [{**{k: v for k, v in a.items() if k != "actable"},
                                         **{k: format_time(a[k]) for k in times}} for a in found["alerts"]]})


@bp.route("/alerts/<int:alert_id>/send-again", methods=["POST"])
@requires("operator")
def alert_send_again(alert_id: int):
    """Make a failed alert due now; the sender sends it with the same id. Back to the outbox."""
    send_again(current_runtime().engine, alert_id, actor=actor_name(), within=_within(),
               acting=_within(acting=True))
    return after_post(url_for("alert_outbox.alerts", **{k: v for k, v in request.form.items()
                                                        if k == "state" and v in STATES}))
