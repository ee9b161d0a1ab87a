"""The texts DLQ_MASK cannot be applied to, hidden from a masked viewer with a sentence saying why.

A note, an error or a group's text is masked with the values the mask hides in the entries it is
about (access/visible.py): an audit record's entry, a job's entries, a group's newest entries.
Where those entries are no longer stored (the retention purge removed them; the audit, the jobs and
the groups stay) or not all of them are looked at (a job or a group of more than NOTE_MASK_SCAN
entries), nothing tells which values the text may quote, so a masked viewer reads the sentence
instead (operators and admins read the text). The values are not kept past the purge: keeping them
would keep the very data retention removes.
"""

from __future__ import annotations

import itertools
from typing import Iterable

from ..entries.store import Store
from ..entries.triage import NOTE_MASK_SCAN
from ..masking import MASKED, Mask

#: Why a text is hidden: the entries it is about were removed.
GONE = ("Hidden: DLQ_MASK hides values this text may quote, and the entries they would be found in are no "
        "longer stored (the retention purge removed them), so which ones it quotes cannot be told.")
#: A group's text (its label: at most 120 characters) when the group holds no entry any more.
GROUP_GONE = "Hidden: this group's entries were purged, and its text may quote a value DLQ_MASK hides."
#: Why a text is hidden: it is about more entries than are looked at.
TOO_MANY = (f"Hidden: DLQ_MASK hides values this text may quote, and it is about more than {NOTE_MASK_SCAN:,} "
            "entries, more than are looked at for them, so which ones it quotes cannot be told.")
#: The texts of an audit record or an activity row that are hidden: what people typed and errors.
TEXTS = ("note", "error", "text")
#: A detail's member holding words a person typed (a group's "resolved in" release).
TYPED = ("resolved_in",)


def hidden(record: dict, why: str) -> dict:
    """``record`` (an audit record, a group's activity row) with its texts replaced by ``why``
    (None and empty texts stay) and what a detail holds that a person typed read "•••"."""
    shown = {k: (why if record[k] else record[k]) for k in TEXTS if k in record}
    detail = record.get("detail")
    if isinstance(detail, dict) and any(detail.get(k) for k in TYPED):
        shown["detail"] = {k: (MASKED if k in TYPED and v else v) for k, v in detail.items()}
    return {**record, **shown}


def groups_unread(store: Store, group_ids: Iterable[int]) -> dict[int, str]:
    """{group: why its notes cannot be masked} for those of ``group_ids`` with entries no longer
    stored (none left, or a purge's row in its activity) or more than NOTE_MASK_SCAN of them."""
    found = {}
    for group_id, (count, purged) in store.group_sizes(group_ids).items():
        if not count or purged:
            found[group_id] = GONE
        elif count > NOTE_MASK_SCAN:
            found[group_id] = TOO_MANY
    return found


def job_values(mask: Mask, store: Store, job_ids: Iterable[int]) -> tuple[dict[int, tuple[str, ...]], dict[int, str]]:
    """What ``mask`` hides in each job's entries (what its note, which each entry keeps as its own,
    may quote), and {job: why not} for the jobs whose entries cannot all be looked at: some were
    purged (the job counts its items a purge took), or it took more than NOTE_MASK_SCAN."""
    ids = sorted({int(j) for j in job_ids})
    if not ids:
        return {}, {}
    sizes = store.job_sizes(ids)
    unread = {j: GONE if purged else TOO_MANY for j, (total, purged) in sizes.items()
              if purged or total > NOTE_MASK_SCAN}
    taken = store.job_entry_ids([j for j in ids if j not in unread], NOTE_MASK_SCAN)
    stored = store.entries_by_id(itertools.chain.from_iterable(taken.values()))
    values: dict[int, tuple[str, ...]] = {j: () for j, (total, _) in sizes.items() if not total}
    for job_id, entry_ids in taken.items():
        if any(e not in stored for e in entry_ids):
            unread[job_id] = GONE
        else:
            values[job_id] = tuple(v for e in entry_ids for v in mask.values_of(stored[e]))
    # A job with no item left at all, or none known.
    unread.update({j: GONE for j in ids if j not in values and j not in unread})
    return values, unread
