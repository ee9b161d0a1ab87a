"""Republish and Close on a row of the list, for operators: a confirmation that names the entry,
then the same exactly-once actions as the entry page (republish_entry, close_entry). htmx gets
the row again (the ``entry_row`` block of index.html) to swap in; without script the
confirmation page posts and the answer leads back to the list."""

from __future__ import annotations

from flask import Blueprint, render_template, request

from ..access import visible
from ..actions.close import close_entry
from ..actions.errors import ActionError, Refused
from ..actions.republish import republish_entry
from ..entries.filters import EntryFilter, encode_cursor
from ..errors import EntryNotFound, InvalidRequest
from . import current_runtime, params
from .auth import actor_name, requires, safe_next
from .data import current_reader, entry_to_act_on, list_fields, row_context
from .responses import after_post, htmx, render_block

bp = Blueprint("row_actions", __name__)
#: The actions a row offers (web/presenters/actions.py row_actions).
ROW_ACTIONS = ("republish", "close")
#: The event a row's action raises in the page (HX-Trigger): index.html's summary listens for it.
ENTRIES_CHANGED = "entries-changed"


def _action(action: str) -> str:
    if action not in ROW_ACTIONS:
        raise InvalidRequest(f"action {action!r} is not one a row offers: use republish or close.")
    return action


def _back() -> str:
    """Where the list was: a page of this site (the list's URL with its filters), else the list;
    checked as a sign-in's ``next`` is (auth.safe_next: "/\t/evil" is "//evil" to a browser)."""
    return safe_next((request.values.get("back") or "").strip())


@bp.route("/entries/<int:entry_id>/row/<action>")
@requires("operator")
def confirm(entry_id: int, action: str):
    """The question a row's action asks (naming the entry: id and subject), as a page of its own."""
    entry = entry_to_act_on(entry_id, with_history=False)
    seen = request.args.get("version", "").strip()
    return render_template("row_confirm.html", entry=entry, action=_action(action), back=_back(),
                           version=params.version(seen) if seen else entry.version)


@bp.route("/entries/<int:entry_id>/row/<action>", methods=["POST"])
@requires("operator")
def act(entry_id: int, action: str):
    """Republish or close the entry at the version the row showed, exactly once (a second click
    is answered as a conflict and publishes nothing); htmx gets the row as it is now."""
    action, rt = _action(action), current_runtime()
    entry_to_act_on(entry_id, with_history=False)  # 404 outside the reader's scopes, 403 outside their acts
    version = params.version(request.form.get("version"))
    try:
        if action == "republish":
            outcome = republish_entry(rt, entry_id, version, actor=actor_name())
            publish = outcome.publish
            text = f"Republished entry {entry_id}" + (f" to {publish.stream} seq {publish.seq}." if publish else ".")
        else:
            close_entry(rt, entry_id, version, actor=actor_name(), note=request.form.get("note"))
            text = f"Closed entry {entry_id}."
        message = {"text": text, "error": False}
    except ActionError as exc:
        if not htmx:
            raise  # the conflict or refusal page, as the entry page's actions answer
        # The row as it is now, with the reason in it: htmx swaps a 200 and a 422 (base.html's
        # responseHandling), not a 503, and the row must say why nothing was done.
        return _row(entry_id, {"text": str(exc), "error": True}), 422 if isinstance(exc, Refused) else 200
    if not htmx:
        return after_post(_back())
    # The counts above the list (its summary block) fetch themselves again: an entry changed status.
    return _row(entry_id, message), 200, {"HX-Trigger": ENTRIES_CHANGED}


def _row(entry_id: int, message: dict) -> str:
    """The entry's row of the list, as this reader sees it now, with a sentence on what was done."""
    reader = current_reader()
    found = visible.page(reader, current_runtime().store, EntryFilter(cursor=encode_cursor(entry_id + 1), limit=1),
                         list_fields(), rows=True).entries
    if not found or found[0].id != entry_id:
        raise EntryNotFound(entry_id)
    back = _back()
    return render_block("index.html", "entry_row", e=found[0], can_act=True, filter_args={}, row_back=back,
                        row_message=message, **row_context(found))
