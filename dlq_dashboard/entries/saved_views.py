"""Saved views: a person's named filters of the list or the groups page, and those an admin shared.

A view stores its filters as the query string ``EntryFilter.to_args()`` writes, so opening one
is opening a URL, and a filter the list would refuse is refused when it is saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Mapping
from urllib.parse import parse_qsl, urlencode

from sqlalchemy import Engine, bindparam, delete, insert, or_, select, update

from ..db.engine import read_transaction, write_transaction
from ..db.models import SavedView
from ..errors import InvalidRequest
from .fields import KeyField
from .filters import EntryFilter
from .triage import GroupStateFilter

VIEWS = SavedView.__table__
#: The pages a view can be saved from.
PAGES = ("list", "groups")
MAX_NAME = 100


@dataclass(frozen=True)
class View:
    """A saved view as the pages show it."""

    id: int
    owner: str
    name: str
    page: str
    query: str
    shared: bool
    created_at: datetime

    @property
    def args(self) -> dict[str, str]:
        """The filters as query arguments."""
        return dict(parse_qsl(self.query))

    def to_dict(self) -> dict:
        return {"id": self.id, "owner": self.owner, "name": self.name, "page": self.page,
                "query": self.query, "shared": self.shared}


def _view(row) -> View:
    m = row._mapping
    return View(m["id"], m["owner"], m["name"], m["page"], m["query"], bool(m["shared"]), m["created_at"])


def clean_view(name: str, page: str, filters: Mapping[str, str], key_fields: tuple[KeyField, ...] = (),
               sources: tuple[str, ...] | None = None) -> tuple[str, str, str]:
    """(name, page, query string) of a view to save; InvalidRequest (400) with a sentence when
    the name is empty or too long, the page unknown or a filter does not parse (FilterError;
    ``sources``: the names ``source`` may take)."""
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise InvalidRequest(f"A view's name is 1 to {MAX_NAME} printable characters.")
    if page not in PAGES:
        raise InvalidRequest(f"page {page!r} is not valid: use list or groups")
    flt = EntryFilter.from_args(filters, key_fields=key_fields, sources=sources)
    args = flt.to_args()
    if page == "groups" and "status" not in args and filters.get("status") in ("", "any"):
        args["status"] = ""  # the groups page reads no status as "open"; '' keeps "any"
    if page == "groups":
        # The groups' own filters (triage); "me" stays "me": whoever opens the view.
        args.update(GroupStateFilter.from_args(filters, me="me").to_args(me="me"))
    return name, page, urlencode(args)


def save_view(engine: Engine, owner: str, name: str, page: str, query: str, now: datetime) -> View:
    """Save the owner's view; one of the same name on the same page gets the new filters."""
    with write_transaction(engine) as conn:
        found = conn.execute(select(VIEWS.c.id).where(
            VIEWS.c.owner == owner, VIEWS.c.page == page, VIEWS.c.name == name)).scalar()
        if found is None:
            found = conn.execute(insert(VIEWS).values(owner=owner, name=name, page=page, query=query,
                                                      shared=False, created_at=now)).inserted_primary_key[0]
        else:
            conn.execute(update(VIEWS).where(VIEWS.c.id == found).values(query=query))
        return _view(conn.execute(select(VIEWS).where(VIEWS.c.id == found)).one())


# The views a person sees, asked by every list and groups page: built once (built at each call,
# the statement cost more to build and to key than to run), the owner and the page bound.
_SEEN = select(VIEWS).where(or_(VIEWS.c.owner == bindparam("owner"), VIEWS.c.shared.is_(True)))
_SEEN_ALL = _SEEN.order_by(VIEWS.c.page, VIEWS.c.name, VIEWS.c.id)
_SEEN_OF_PAGE = _SEEN.where(VIEWS.c.page == bindparam("page")).order_by(VIEWS.c.page, VIEWS.c.name, VIEWS.c.id)


def views_for(engine: Engine, owner: str, page: str | None = None) -> list[View]:
    """The owner's views and the shared ones (of one page, or all), by page and name."""
    with read_transaction(engine) as conn:
        if page is None:
            rows = conn.execute(_SEEN_ALL, {"owner": owner}).all()
        else:
            rows = conn.execute(_SEEN_OF_PAGE, {"owner": owner, "page": page}).all()
    return [_view(r) for r in rows]


def get_view(engine: Engine, view_id: int) -> View | None:
    """One view by id."""
    with read_transaction(engine) as conn:
        row = conn.execute(select(VIEWS).where(VIEWS.c.id == view_id)).first()
    return _view(row) if row else None


def delete_view(engine: Engine, view_id: int) -> None:
    """Delete a view."""
    with write_transaction(engine) as conn:
        conn.execute(delete(VIEWS).where(VIEWS.c.id == view_id))


def share_view(engine: Engine, view_id: int, shared: bool) -> None:
    """Share a view with everyone, or stop sharing it."""
    with write_transaction(engine) as conn:
        conn.execute(update(VIEWS).where(VIEWS.c.id == view_id).values(shared=shared))
