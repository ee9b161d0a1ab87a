"""Move stored entries to the failure groups that changed grouping rules name, with their kept
counts: what a revision does when ingest/grouping.py's rules change (revision 0004 for version 2,
0011 for version 3, 0025 for version 4).

Entries are read in chunks of :data:`BATCH` by id, so a million entries never sit in memory at
once. Each entry whose group changes moves to a group of its own source with
:func:`counts.count_changes` (its group's counts and its arrival buckets move with it), and the
first and last seen of the groups entries joined or left are counted again from their entries.
A group the regrouping makes takes the team and the triage of the group its first entry came
from (:data:`INHERITED`: the same subject, so the team DLQ_TEAMS gave that one, as a revision has
no settings to ask; an ignored cause stays ignored, an assigned one with its person). The groups
entries left are the caller's to settle, as a move at ingest does (ingest/merge.py
retire_emptied).
"""

from __future__ import annotations

from typing import Callable

from sqlalchemy import Connection, bindparam, func, select, update

from .counts import ENTRIES, GROUPS, Change, count_changes, group_ids, group_of

BATCH = 5000


def regroup_entries(conn: Connection, key_of: Callable[[str | None, str | None], str],
                    left: set[int] | None = None) -> int:
    """Give every entry the group ``key_of(error, schema_errors)`` names now, in the entry's
    source; return how many moved. ``left`` receives the groups entries moved out of.

    Needs a database of revision 0015 or later (sources, a team a group): the revisions before it
    that regroup (0004, 0011) stand for rules no longer in use and never call it now."""
    touched: set[int] = set()
    moved = 0
    after = 0
    while True:
        rows = conn.execute(select(ENTRIES.c.id, ENTRIES.c.source, ENTRIES.c.original_subject, ENTRIES.c.reason,
                                   ENTRIES.c.error, ENTRIES.c.schema_errors, ENTRIES.c.received_at,
                                   ENTRIES.c.status, ENTRIES.c.group_id)
                            .where(ENTRIES.c.id > after).order_by(ENTRIES.c.id).limit(BATCH)).all()
        if not rows:
            break
        changed = []
        # A group belongs to one source: the same key in two sources is two groups.
        for source in sorted({r.source for r in rows}):
            of_source = [r for r in rows if r.source == source]
            named = {r.id: group_of(r.original_subject, r.reason, key_of(r.error, r.schema_errors))
                     for r in of_source}
            made: set[int] = set()
            ids = group_ids(conn, named.values(), made=made, source=source)
            moves = [(r, ids[named[r.id]]) for r in of_source if r.group_id != ids[named[r.id]]]
            _inherit(conn, made, moves)
            changed += moves
        if changed:
            conn.execute(update(ENTRIES).where(ENTRIES.c.id == bindparam("b_id"))
                         .values(group_id=bindparam("b_group")),
                         [{"b_id": r.id, "b_group": new} for r, new in changed])
            count_changes(conn, [Change(r.group_id, new, r.received_at, r.status, r.status) for r, new in changed])
            left_groups = {r.group_id for r, _ in changed if r.group_id is not None}
            touched.update(new for _, new in changed)
            touched.update(left_groups)
            if left is not None:
                left.update(left_groups)
            moved += len(changed)
        after = rows[-1].id
    _recount_seen(conn, sorted(touched))
    return moved


#: What a group a regrouping makes takes from the group its first entry came from: its team (the
#: same subject: the team DLQ_TEAMS gave that one) and its triage (an ignored cause stays ignored,
#: an assigned one stays with its person). Its notes and activity stay with the old group.
INHERITED = ("team", "state", "assignee", "resolved_in", "ignored_until", "ignored_until_count", "ignored_seen",
             "state_changed_at")


def _inherit(conn: Connection, made: set[int], moves: list) -> None:
    """Each group just made takes INHERITED from the group its first entry moved from."""
    first_from: dict[int, int] = {}
    for r, new in moves:
        if new in made and r.group_id is not None:
            first_from.setdefault(new, r.group_id)
    if not first_from:
        return
    columns = [GROUPS.c[name] for name in INHERITED]
    old = {row.id: row for row in conn.execute(select(GROUPS.c.id, *columns).where(
        GROUPS.c.id.in_(sorted(set(first_from.values())))))}
    given = [{"b_id": new, **{f"b_{name}": getattr(old[was], name) for name in INHERITED}}
             for new, was in sorted(first_from.items()) if was in old]
    if given:
        conn.execute(update(GROUPS).where(GROUPS.c.id == bindparam("b_id"))
                     .values(**{name: bindparam(f"b_{name}") for name in INHERITED}), given)


def _recount_seen(conn: Connection, touched: list[int]) -> None:
    """First and last seen of the groups entries moved from or to, from their entries; a group
    left without an entry keeps its own, as a purge leaves them."""
    for start in range(0, len(touched), 500):
        chunk = touched[start:start + 500]
        seen = {group_id: (first, last) for group_id, first, last in conn.execute(
            select(ENTRIES.c.group_id, func.min(ENTRIES.c.received_at), func.max(ENTRIES.c.received_at))
            .where(ENTRIES.c.group_id.in_(chunk)).group_by(ENTRIES.c.group_id))}
        if seen:
            conn.execute(update(GROUPS).where(GROUPS.c.id == bindparam("b_id"))
                         .values(first_seen=bindparam("b_first"), last_seen=bindparam("b_last")),
                         [{"b_id": g, "b_first": first, "b_last": last} for g, (first, last) in seen.items()])
