"""The data functions a page and its JSON twin share, as Datasette's RowView does: one lookup,
then an HTML or a JSON renderer, so the two cannot drift apart.

What a reader may see is decided below the web, in ``access/visible.py``; this module only says
who the reader of the current request is (``current_reader``) and reads the request's arguments.
Each function takes ``reader`` for a caller outside a request (the command line builds its own).
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

from ..access import visible
from ..access.reader import Reader
from ..actions.bulk.jobs import check_filter_job
from ..entries.fields import KeyField, key_fields
from ..entries.filters import EntryFilter, FilterError
from ..entries.groups import Group
from ..entries.source_names import filter_sources
from ..entries.tallies import Tally
from ..entries.triage import GroupStateFilter
from ..access.detail import EntryDetail, build_entry_detail
from ..entries.view import EntryView, Page
from ..sources import renamed_sources, sources_of
from . import current_runtime
from .presenters.rows import snippet
from .responses import IdUrls
from .auth import current_identity


def current_reader() -> Reader:
    """Who is asking in this request: its identity's role, under DLQ_MASK."""
    identity = current_identity()
    if identity is None:
        return Reader.of(None, current_runtime().mask)
    rt = current_runtime()
    return Reader.of(identity.role, rt.mask, identity.grants, renamed_sources(sources_of(rt.settings)))


def acting() -> dict:
    """What a bulk selection of this request's reader takes (select_items, create_job): ``scopes``,
    what their operator grants cover; ``reads``, what they may read (a group or a job they may
    read and not act on is refused saying so, another is unknown)."""
    reader = current_reader()
    return {"scopes": reader.acts, "reads": reader.reads}


def entry_detail(entry_id: int, reader: Reader | None = None) -> EntryDetail:
    """The entry page's, GET /api/entries/<id>'s and the command line's show's one value: the
    entry as the reader (by default this request's) may see it, with its verdict, group, replays
    and republishes (access/detail.py); EntryNotFound, a 404, when there is none."""
    rt = current_runtime()
    return build_entry_detail(rt.store, rt.schemas, entry_id, reader or current_reader())


def failed_again(entries: list[EntryView]) -> dict[int, int]:
    """The list's "failed again" marker of ``entries``, as this request's reader may see it
    (access/visible.py ``failed_again``)."""
    return visible.failed_again(current_reader(), current_runtime().store, entries)


def row_context(entries: list[EntryView]) -> dict:
    """What the list's rows (index.html's ``entry_row`` block) need beside each entry: the key
    fields, the payload snippet, which failed again, each entry's group state. The list and a row
    rendered alone (web/row_actions.py) take it from here, so neither can miss a part. Their links
    to an entry are made by ``row_url`` (url_for's arguments, each route built once a page)."""
    return {"fields": list_fields(), "snippet": snippet, "failed_again": failed_again(entries),
            "group_states": visible.entry_group_states(current_reader(), current_runtime().store, entries),
            "row_url": IdUrls()}


def get_entry_or_404(entry_id: int, *, with_history: bool = True) -> EntryView:
    """The entry with this id (with its history and actions) as this request's reader may see
    it; EntryNotFound, a 404, otherwise."""
    reader = current_reader()
    return visible.entry(reader, visible.lookup(reader, current_runtime().store, entry_id, with_history=with_history))


def entry_to_act_on(entry_id: int, *, with_history: bool = True) -> EntryView:
    """The entry an action of this request's reader is about to change (an operator sees it as
    stored): EntryNotFound, a 404, when they may not read it; Forbidden, a 403 with its
    sentence, when their operator grants do not cover it (access/visible.py acting_on)."""
    return visible.acting_on(current_reader(), current_runtime().store, entry_id, with_history=with_history)


def list_fields() -> tuple[KeyField, ...]:
    """The key fields the list shows and filters by (DLQ_LIST_FIELDS)."""
    return key_fields(current_runtime().settings.list_fields)


def request_filter(args: Mapping[str, str], *, reader: Reader | None = None, **options) -> EntryFilter:
    """The filter of a request's arguments, as the reader may filter (FilterError, a 400, for a
    bad one, one by a key field DLQ_MASK hides from it, or a source that is not one of this
    dashboard's)."""
    reader = reader or current_reader()
    flt = visible.check_filter(reader, EntryFilter.from_args(
        args, key_fields=list_fields(),
        sources=filter_sources(current_runtime().engine, current_runtime().feeds, args, reader.reads), **options))
    current_runtime().store.check_group(flt)  # within the reader's scopes: another group is unknown
    check_filter_job(current_runtime().engine, flt)  # and another's job
    return flt


def entries_page(args: Mapping[str, str], *, rows: bool = False,
                 reader: Reader | None = None) -> tuple[EntryFilter, Page]:
    """The filter of a request and the page of entries it selects as the reader sees them
    (visible.page; ``rows``: for the list's rows); FilterError, a 400, for a bad one."""
    reader = reader or current_reader()
    flt = request_filter(args, reader=reader)
    return flt, visible.page(reader, current_runtime().store, flt, list_fields(), rows=rows)


#: Groups in one answer unless ``limit`` asks for fewer or more (up to GROUPS_MAX).
GROUPS_LIMIT, GROUPS_MAX = 200, 1000


class FailureGroups(NamedTuple):
    """The failure groups of a request (failure_groups)."""

    filter: EntryFilter  # the request's filter
    groups: list[Group]  # the groups under it, largest first
    tally: Tally  # how they were counted
    base: dict[str, str]  # the filters that list a group's entries besides its id
    triage: GroupStateFilter = GroupStateFilter()  # the groups' own filters (state, assignee, team)


def failure_groups(args: Mapping[str, str], *, reader: Reader | None = None, me: str | None = None) -> FailureGroups:
    """The filter of a request, the failure groups under it (largest first) as its reader sees
    them, how they were counted, and the filters that list a group's entries besides its id (its
    source, subject and reason go without saying); FilterError, a 400, for a bad one. ``reader`` and ``me``
    (who ``assignee=me`` is) for a caller outside a request (the command line)."""
    reader = reader or current_reader()
    if (args.get("cursor") or "").strip():  # before the filter reads it as a list's cursor
        raise FilterError(f"cursor does not apply to groups: they come in one answer, largest first "
                          f"(limit takes up to {GROUPS_MAX:,})")
    flt = request_filter(args, reader=reader, max_limit=GROUPS_MAX)
    triage = GroupStateFilter.from_args(args, me=me or caller_name())
    limit = flt.limit if (args.get("limit") or "").strip() else GROUPS_LIMIT
    store = current_runtime().store
    found, tally = visible.tallies(reader, store).groups(flt, limit=limit, where=triage.conditions())
    base = {k: v for k, v in flt.to_args().items() if k not in ("group", "source", "subject", "reason")}
    return FailureGroups(flt, visible.groups(reader, store, found), tally, base, triage)


def caller_name() -> str | None:
    """The signed-in caller's name (what ``assignee=me`` means), None for nobody."""
    identity = current_identity()
    return identity.name if identity is not None else None
