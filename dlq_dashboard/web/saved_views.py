"""Saved views over HTTP: save the filters of the list or the groups page under a name, list
one's own and the shared ones (the /views page and GET /api/views), delete one's own (an admin
any), share (admins).

A view belongs to whoever saved it: a user (by session or a trusted proxy) or an API token
(``token:<name>``, as the audit names it). Saving a name again on the same page replaces its
filters.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from flask import Blueprint, jsonify, render_template, request, url_for
from sqlalchemy.exc import IntegrityError

from ..entries.filters import EntryFilter
from ..entries.saved_views import clean_view, delete_view, get_view, save_view, share_view, views_for
from ..entries.source_names import filter_sources
from ..errors import Forbidden, NotFound, NotSaved
from ..flags import flag
from ..times import utcnow
from . import current_runtime, params
from .auth import current_identity, requires
from ..access import visible
from .data import current_reader, list_fields
from .responses import after_post

bp = Blueprint("views", __name__)
ENDPOINTS = {"list": "pages.index", "groups": "pages.groups"}


def view_url(view) -> str:
    """Where a saved view opens: its page with its filters."""
    return url_for(ENDPOINTS[view.page]) + (f"?{view.query}" if view.query else "")


def view_filters(view) -> list[tuple[str, str]]:
    """A saved view's filters as a person reads them: each name with its value decoded
    (``subject=orders.*``, not ``subject=orders.%2A``), an empty one as "any"."""
    return [(name, value or "any") for name, value in parse_qsl(view.query or "", keep_blank_values=True)]


def saved_views(page: str) -> list:
    """The views of a page this request's identity sees (its own and the shared ones)."""
    identity = current_identity()
    if identity is None:
        return []
    rt = current_runtime()
    return visible.views(current_reader(), rt.store, views_for(rt.engine, identity.name, page), identity.name,
                         list_fields())


def _owned_view_or_404(view_id: int):
    view = get_view(current_runtime().engine, view_id)
    identity = current_identity()
    # Another person's unshared view is as unknown as a missing one.
    if view is None or (view.owner != identity.name and not view.shared and not identity.may("admin")) or \
            not visible.views(current_reader(), current_runtime().store, [view], identity.name, list_fields()):
        raise NotFound(f"There is no saved view {view_id}.")
    return view


def shown_views() -> list:
    """The views of every page /views shows this request's identity: its own, and the shared
    ones it may see (visible.views), by page and name."""
    identity = current_identity()
    rt = current_runtime()
    return visible.views(current_reader(), rt.store, views_for(rt.engine, identity.name), identity.name,
                         list_fields())


def view_json(view) -> dict:
    """A saved view as GET /api/views answers it: what /views shows of it, its filters decoded
    (an empty value, "any" on the page, is ""), and the link that opens it."""
    return {"id": view.id, "name": view.name, "owner": view.owner, "shared": view.shared, "page": view.page,
            "filters": dict(parse_qsl(view.query or "", keep_blank_values=True)), "query": view.query,
            "url": view_url(view)}


@bp.route("/views")
@requires("viewer")
def index():
    """One's own saved views and the shared ones."""
    return render_template("views.html", views=shown_views(), view_url=view_url, view_filters=view_filters)


@bp.route("/api/views")
@requires("viewer")
def views_json():
    """What /views shows the caller, as JSON."""
    return jsonify(views=[view_json(v) for v in shown_views()])


@bp.route("/views", methods=["POST"])
@requires("viewer")
def save():
    """Save the filters sent with a name and a page; then open the view."""
    form, rt = request.form, current_runtime()
    filters = {k: v for k, v in form.items() if k not in ("name", "page", "csrf_token")}
    # Saved with a misspelt filter left out ("subjet") or a group that is none (or not theirs), the
    # view would open as every entry, or as a 400, to everyone it is shared with.
    params.refuse_misspelt(filters, (*params.GROUPS_PARAMETERS, "window") if form.get("page") == "groups"
                           else params.LIST_PARAMETERS)
    name, page, query = clean_view(form.get("name", ""), form.get("page", "list"), filters, list_fields(),
                                   tuple(rt.feeds))
    reader = current_reader()
    rt.store.check_group(visible.scoped(reader, EntryFilter.from_args(
        filters, key_fields=list_fields(), sources=filter_sources(rt.engine, rt.feeds, filters, reader.reads))))
    try:
        view = save_view(rt.engine, current_identity().name, name, page, query, utcnow())
    except IntegrityError:
        raise NotSaved(f"A view named {name!r} was saved at the same moment; save it again.") from None
    return after_post(view_url(view))


@bp.route("/views/<int:view_id>/delete", methods=["POST"])
@requires("viewer")
def delete(view_id: int):
    """Delete a view: one's own, or as an admin anyone's."""
    view = _owned_view_or_404(view_id)
    identity = current_identity()
    if view.owner != identity.name and not identity.may("admin"):
        raise Forbidden(f"The view {view.name!r} is {view.owner}'s; only they or an admin may delete it.")
    delete_view(current_runtime().engine, view.id)
    return after_post(url_for("views.index"))


@bp.route("/views/<int:view_id>/share", methods=["POST"])
@requires("admin")
def share(view_id: int):
    """Share a view with everyone (``shared=false``: stop sharing it)."""
    view = _owned_view_or_404(view_id)
    shared = flag(request.form.get("shared"), "shared", default=True)
    share_view(current_runtime().engine, view.id, shared)
    return after_post(url_for("views.index"))
