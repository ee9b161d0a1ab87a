"""The data functions a page and its JSON twin share, as Datasette's RowView does: one lookup,
then an HTML or a JSON renderer, so the two cannot drift apart."""

from __future__ import annotations

from typing import Mapping

from ..entries.filters import EntryFilter, FilterError
from ..entries.groups import Group
from ..entries.tallies import Tallies, Tally
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


#: Groups in one answer unless ``limit`` asks for fewer or more (up to GROUPS_MAX).
GROUPS_LIMIT, GROUPS_MAX = 200, 1000


def failure_groups(args: Mapping[str, str]) -> tuple[EntryFilter, list[Group], Tally, dict[str, str]]:
    """The filter of a request, the failure groups under it (largest first), how they were
    counted, and the filters that list a group's entries besides its id (its subject and reason
    go without saying); FilterError, a 400, for a bad one."""
    flt = EntryFilter.from_args(args, max_limit=GROUPS_MAX)
    if flt.cursor:
        raise FilterError(f"cursor does not apply to groups: they come in one answer, largest first "
                          f"(limit takes up to {GROUPS_MAX:,})")
    limit = flt.limit if (args.get("limit") or "").strip() else GROUPS_LIMIT
    found, tally = Tallies(current_runtime().store).groups(flt, limit=limit)
    base = {k: v for k, v in flt.to_args().items() if k not in ("group", "subject", "reason")}
    return flt, found, tally, base
