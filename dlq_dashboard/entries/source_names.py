"""The names the ``source`` filter takes (SPEC section 12): the configured sources, and a name
entries carry that is no longer configured (a source renamed or removed: its entries keep its
name and stay findable)."""

from __future__ import annotations

from typing import Iterable, Mapping

from sqlalchemy import Engine, select

from ..db.models import Entry
from ..scopes import Scope
from .scoping import scope_condition


def filter_sources(engine: Engine, configured: Iterable[str], args: Mapping[str, str],
                   scopes: tuple[Scope, ...] | None = None) -> tuple[str, ...]:
    """The configured names, and the filter's own ``source`` if it is none of them but entries
    carry it (one row looked up by ix_entries_source_id, only then). A name neither configured nor
    stored is left out: the filter's 400 lists the configured ones. For a scoped reader
    (``scopes``) only entries inside their scopes count: whether a name outside them was ever
    stored is not told (a 400, as for a name never seen)."""
    names = tuple(configured)
    wanted = str(args.get("source") or "").strip()
    if not wanted or wanted in names or len(wanted) > 40:
        return names
    with engine.connect() as conn:
        within = scope_condition(Entry.original_subject, scopes)
        stored = conn.execute(select(Entry.id).where(Entry.source == wanted, *(() if within is None else (within,)))
                              .limit(1)).first() is not None
    return names + (wanted,) if stored else names
