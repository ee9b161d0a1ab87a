"""The data functions a page and its JSON twin share, as Datasette's RowView does: one lookup,
then an HTML or a JSON renderer, so the two cannot drift apart."""

from __future__ import annotations

from typing import Mapping

from ..entries.filters import EntryFilter
from ..entries.view import EntryView, Page
from ..errors import EntryNotFound
from . import current_runtime


def get_entry_or_404(entry_id: int, *, with_history: bool = True) -> EntryView:
    """The entry with this id (with its history and actions); EntryNotFound, a 404, otherwise."""
    entry = current_runtime().store.get_entry(entry_id, with_history=with_history)
    if entry is None:
        raise EntryNotFound(entry_id)
    return entry


def entries_page(args: Mapping[str, str]) -> tuple[EntryFilter, Page]:
    """The filter of a request and the page of entries it selects; FilterError, a 400, for a bad one."""
    flt = EntryFilter.from_args(args)
    return flt, current_runtime().store.list_entries(flt)
