"""The data functions a page and its JSON twin share, as Datasette's RowView does: one lookup,
then an HTML or a JSON renderer, so the two cannot drift apart.

They are also where an entry becomes visible to a person, so they are where DLQ_MASK applies:
a viewer gets every entry through ``shown`` (masking.py), an operator or admin as it is.
"""

from __future__ import annotations

import itertools
from typing import Iterable, Iterator, Mapping, NamedTuple

from flask import has_request_context

from ..entries.fields import KeyField, hidden_by, key_fields
from ..entries.filters import EntryFilter, FilterError
from ..actions.bulk.listing import describe_selection
from ..entries.detail import EntryDetail, build_entry_detail
from ..entries.groups import Group
from ..masking import MASKED, Mask
from ..entries.tallies import Tallies, Tally
from ..entries.view import EntryView, Page
from ..errors import EntryNotFound
from . import current_runtime
from .auth import current_identity


def viewer_mask() -> Mask | None:
    """The mask this request sees entries through: DLQ_MASK for a viewer, None for an operator,
    an admin, the command line on the server (no request), or when nothing is masked."""
    mask = current_runtime().mask
    if not has_request_context():
        return None
    identity = current_identity()
    if not mask or (identity is not None and identity.may("operator")):
        return None
    return mask


def shown(entry: EntryView) -> EntryView:
    """The entry as this request may see it."""
    mask = viewer_mask()
    return mask.entry(entry) if mask else entry


def entry_detail(entry_id: int) -> EntryDetail:
    """The entry page's, GET /api/entries/<id>'s and the command line's show's one value: the
    entry as this request may see it, with its verdict, group, replays and republishes
    (entries/detail.py); EntryNotFound, a 404, when there is none."""
    rt = current_runtime()
    return build_entry_detail(rt.store, rt.schemas, entry_id, viewer_mask())


def failed_again(entries: list[EntryView]) -> dict[int, int]:
    """{entry id: the newest entry whose message was a republish of it}, for those of ``entries``
    whose republish failed again (whatever their status now), in one query."""
    refs = {e.dlq_ref: e.id for e in entries if e.dlq_ref}
    return {refs[ref]: newest for ref, newest in current_runtime().store.failed_again(list(refs)).items()}


def get_entry_or_404(entry_id: int, *, with_history: bool = True, masked: bool = True) -> EntryView:
    """The entry with this id (with its history and actions) as this request may see it
    (``masked=False``: as stored); EntryNotFound, a 404, otherwise."""
    entry = current_runtime().store.get_entry(entry_id, with_history=with_history)
    if entry is None:
        raise EntryNotFound(entry_id)
    return shown(entry) if masked else entry


def jobs_as_seen(jobs: list[dict]) -> list[dict]:
    """Jobs as this request may see them: for a viewer under DLQ_MASK, the selection as
    selection_as_seen shows it, and in words without a group's label (a group's label is its
    entries' error, which may quote a masked value: the group's id instead)."""
    mask = viewer_mask()
    if mask:
        for job in jobs:
            job["selection"] = selection_as_seen(job["selection"], mask)
            job["patch"] = job["selection"].get("patch")
            job["selection_text"] = describe_selection(job["selection"])
    return jobs


def audit_as_seen(page: dict) -> dict:
    """An audit page as this request may see it: a bulk job's selection (its own record's
    detail) and a patch's values as selection_as_seen shows them (the notes are the operators'
    own words, shown as written)."""
    mask = viewer_mask()
    if mask:
        for record in page["actions"]:
            if isinstance(record.get("detail"), dict):
                record["detail"] = selection_as_seen(record["detail"], mask)
    return page


def selection_as_seen(selection: dict, mask: Mask) -> dict:
    """A job's selection (or an audit record's detail) for a viewer: a patch's value for a field
    the mask hides, and a key-field filter's value for such a field, read "•••" (a viewer may not
    filter by that field either: request_filter)."""
    selection = mask.mask_record({"detail": selection})["detail"]
    flt = selection.get("filter")
    if isinstance(flt, dict):
        hidden = {f.param for f in list_fields() if hidden_by(mask, f)}
        selection = {**selection, "filter": {k: (MASKED if k in hidden else v) for k, v in flt.items()}}
    return selection


def list_fields() -> tuple[KeyField, ...]:
    """The key fields the list shows and filters by (DLQ_LIST_FIELDS)."""
    return key_fields(current_runtime().settings.list_fields)


def request_filter(args: Mapping[str, str], **options) -> EntryFilter:
    """The filter of a request's arguments (FilterError, a 400, for a bad one). A viewer may not
    filter by a key field DLQ_MASK hides: which entries match would tell its value."""
    flt = EntryFilter.from_args(args, key_fields=list_fields(), **options)
    current_runtime().store.check_group(flt)
    mask = viewer_mask()
    for field, _ in flt.field_values:
        if hidden_by(mask, field):
            raise FilterError(f"{field.param} cannot be filtered by: DLQ_MASK hides this field from viewers")
    return flt


def entries_page(args: Mapping[str, str], *, rows: bool = False) -> tuple[EntryFilter, Page]:
    """The filter of a request and the page of entries it selects; FilterError, a 400, for a bad one.

    ``rows``: for the list's rows, which show a snippet of each payload, not all of it: the
    payloads are read only that far (all of them when a viewer's mask must be applied first).
    With DLQ_LIST_FIELDS, each entry gets its key fields' values, hidden where DLQ_MASK hides them."""
    flt = request_filter(args)
    mask = viewer_mask()
    store = current_runtime().store
    fields = list_fields()
    page = store.list_entries(flt, mask=mask, payload_prefix=None if mask and mask.pointers or not rows
                              else ROW_PAYLOAD_BYTES)
    if fields:
        attach_key_fields(store, page.entries, fields, mask)
    if mask:
        page.entries = [mask.entry(e) for e in page.entries]
    return flt, page


def attach_key_fields(store, entries: list[EntryView], fields: tuple[KeyField, ...], mask: Mask | None) -> None:
    """Give each entry (as stored) its key fields' values, "•••" where ``mask`` hides the field."""
    values = store.field_values([e.id for e in entries], fields)
    for entry in entries:
        got = values.get(entry.id, {})
        entry.key_fields = {f.label: (MASKED if got.get(f.label) is not None and hidden_by(mask, f)
                                      else got.get(f.label)) for f in fields}


def with_key_fields(entries: Iterable[EntryView], fields: tuple[KeyField, ...], mask: Mask | None,
                    batch: int = 500) -> Iterator[EntryView]:
    """``entries`` (as stored) with their key fields, looked up ``batch`` entries at a time."""
    store = current_runtime().store

    def attached() -> Iterator[EntryView]:
        it = iter(entries)
        while chunk := list(itertools.islice(it, batch)):
            attach_key_fields(store, chunk, fields, mask)
            yield from chunk
    return attached()


#: How much of each payload the list reads for its snippet (whitespace runs count as one).
ROW_PAYLOAD_BYTES = 512


def shown_groups(groups: list[Group] | None) -> list[Group] | None:
    """Groups as this request may see them: for a viewer, a value masked in the group's newest
    entry is hidden in the group's text too (a group's text is its entries' common error)."""
    mask = viewer_mask()
    if not mask or not groups:
        return groups
    newest = current_runtime().store.newest_of_groups([g.id for g in groups])
    for group in groups:
        entry = newest.get(group.id)
        if entry is not None:
            group.key = mask.mask_text(group.key, mask.values_of(entry))
    return groups


#: Groups in one answer unless ``limit`` asks for fewer or more (up to GROUPS_MAX).
GROUPS_LIMIT, GROUPS_MAX = 200, 1000


class FailureGroups(NamedTuple):
    """The failure groups of a request (failure_groups)."""

    filter: EntryFilter  # the request's filter
    groups: list[Group]  # the groups under it, largest first
    tally: Tally  # how they were counted
    base: dict[str, str]  # the filters that list a group's entries besides its id


def failure_groups(args: Mapping[str, str]) -> FailureGroups:
    """The filter of a request, the failure groups under it (largest first), how they were
    counted, and the filters that list a group's entries besides its id (its subject and reason
    go without saying); FilterError, a 400, for a bad one."""
    flt = request_filter(args, max_limit=GROUPS_MAX)
    if flt.cursor:
        raise FilterError(f"cursor does not apply to groups: they come in one answer, largest first "
                          f"(limit takes up to {GROUPS_MAX:,})")
    limit = flt.limit if (args.get("limit") or "").strip() else GROUPS_LIMIT
    found, tally = Tallies(current_runtime().store, viewer_mask()).groups(flt, limit=limit)
    found = shown_groups(found)
    base = {k: v for k, v in flt.to_args().items() if k not in ("group", "subject", "reason")}
    return FailureGroups(flt, found, tally, base)
