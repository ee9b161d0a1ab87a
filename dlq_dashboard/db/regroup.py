"""Move stored entries to the failure groups that changed grouping rules name, with their kept
counts: what a revision does when ingest/grouping.py's rules change (revision 0004 for version 2,
0011 for version 3).

Entries are read in chunks of :data:`BATCH` by id, so a million entries never sit in memory at
once. Each entry whose group changes is moved with :func:`counts.count_changes` (its group's
counts and its arrival buckets move with it), the first and last seen of every group touched are
counted again from its entries, and the groups left without an entry are deleted.
"""

from __future__ import annotations

from typing import Callable

from sqlalchemy import Connection, bindparam, delete, func, select, update

from .counts import ARRIVALS, ENTRIES, GROUPS, Change, count_changes, group_ids, group_of

BATCH = 5000


def regroup_entries(conn: Connection, key_of: Callable[[str | None, str | None], str]) -> int:
    """Give every entry the group ``key_of(error, schema_errors)`` names now; return how many moved."""
    touched: set[int] = set()
    moved = 0
    after = 0
    while True:
        rows = conn.execute(select(ENTRIES.c.id, ENTRIES.c.original_subject, ENTRIES.c.reason, ENTRIES.c.error,
                                   ENTRIES.c.schema_errors, ENTRIES.c.received_at, ENTRIES.c.status,
                                   ENTRIES.c.group_id)
                            .where(ENTRIES.c.id > after).order_by(ENTRIES.c.id).limit(BATCH)).all()
        if not rows:
            break
        named = {r.id: group_of(r.original_subject, r.reason, key_of(r.error, r.schema_errors)) for r in rows}
        ids = group_ids(conn, named.values())
        changed = [(r, ids[named[r.id]]) for r in rows if r.group_id != ids[named[r.id]]]
        if changed:
            conn.execute(update(ENTRIES).where(ENTRIES.c.id == bindparam("b_id"))
                         .values(group_id=bindparam("b_group")),
                         [{"b_id": r.id, "b_group": new} for r, new in changed])
            count_changes(conn, [Change(r.group_id, new, r.received_at, r.status, r.status) for r, new in changed])
            touched.update(new for _, new in changed)
            touched.update(r.group_id for r, _ in changed if r.group_id is not None)
            moved += len(changed)
        after = rows[-1].id
    _recount_seen(conn, sorted(touched))
    return moved


def _recount_seen(conn: Connection, touched: list[int]) -> None:
    """First and last seen of the groups entries moved from or to, from their entries; a group left
    without an entry is deleted with its arrival buckets."""
    for start in range(0, len(touched), 500):
        chunk = touched[start:start + 500]
        seen = {group_id: (first, last) for group_id, first, last in conn.execute(
            select(ENTRIES.c.group_id, func.min(ENTRIES.c.received_at), func.max(ENTRIES.c.received_at))
            .where(ENTRIES.c.group_id.in_(chunk)).group_by(ENTRIES.c.group_id))}
        if seen:
            conn.execute(update(GROUPS).where(GROUPS.c.id == bindparam("b_id"))
                         .values(first_seen=bindparam("b_first"), last_seen=bindparam("b_last")),
                         [{"b_id": g, "b_first": first, "b_last": last} for g, (first, last) in seen.items()])
        empty = [g for g in chunk if g not in seen]
        if empty:
            conn.execute(delete(ARRIVALS).where(ARRIVALS.c.group_id.in_(empty)))
            conn.execute(delete(GROUPS).where(GROUPS.c.id.in_(empty)))
