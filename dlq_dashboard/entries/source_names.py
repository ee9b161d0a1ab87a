"""The names the ``source`` filter takes (SPEC section 12): the configured sources, and a name
entries carry that is no longer configured (a source renamed or removed: its entries keep its
name and stay findable)."""

from __future__ import annotations

from typing import Iterable, Mapping

from sqlalchemy import Engine, select

from ..db.models import Entry


def filter_sources(engine: Engine, configured: Iterable[str], args: Mapping[str, str]) -> tuple[str, ...]:
    """The configured names, and the filter's own ``source`` if it is none of them but entries
    carry it (one row looked up by ix_entries_source_id, only then). A name neither configured nor
    stored is left out: the filter's 400 lists the configured ones."""
    names = tuple(configured)
    wanted = str(args.get("source") or "").strip()
    if not wanted or wanted in names or len(wanted) > 40:
        return names
    with engine.connect() as conn:
        stored = conn.execute(select(Entry.id).where(Entry.source == wanted).limit(1)).first() is not None
    return names + (wanted,) if stored else names
