"""The HTML pages."""

from __future__ import annotations

from flask import Blueprint, abort, current_app, render_template, request

from ..store import EntryFilter, FilterError
from .auth import requires

bp = Blueprint("pages", __name__)


@bp.route("/")
@requires("viewer")
def index():
    """The list of entries, newest first, under the filters in the URL."""
    store = current_app.extensions["dlq"].store
    try:
        flt = EntryFilter.from_args(request.args)
        page, filter_error = store.list_entries(flt), None
    except FilterError as exc:
        flt, page, filter_error = EntryFilter(), None, str(exc)
    return render_template("index.html", page=page, flt=flt, filter_error=filter_error), (400 if filter_error else 200)


@bp.route("/entries/<int:entry_id>")
@requires("viewer")
def entry(entry_id: int):
    """One entry: payload, headers, history."""
    found = current_app.extensions["dlq"].store.get_entry(entry_id)
    if found is None:
        abort(404)
    return render_template("entry.html", entry=found)
