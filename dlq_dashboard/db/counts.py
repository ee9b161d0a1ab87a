"""Counts kept beside the entries, so that the groups and the summary read no more rows as the
table grows: each failure group with its entries per status and its first and last arrival
(failure_groups), and arrivals per minute and per hour by group and status (arrivals).

Every write that adds an entry, moves one to another group, changes its status or purges it
calls :func:`count_changes` in its own transaction, so the counts are exactly as true as the
entries.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable

from sqlalchemy import Connection, DateTime, bindparam, case, func, select, tuple_, update

from ..teams import Team, team_for
from .models import Arrival, Entry, FailureGroup
from .rows import add_to_counts, insert_rows

GROUPS, ARRIVALS, ENTRIES = FailureGroup.__table__, Arrival.__table__, Entry.__table__
#: Bucket widths in seconds: minutes for short charts, hours for long ones.
WIDTHS = (60, 3600)
#: The group_id of the arrivals of every group together: what an unfiltered chart reads.
ALL_GROUPS = 0
STATUS_COLUMNS = {"open": "open_count", "republished": "republished_count", "closed": "closed_count"}


def status_sums() -> list:
    """The entries of the groups a query selects, summed by status: one column a status, in
    STATUS_COLUMNS' order (0 where no group is selected)."""
    return [func.coalesce(func.sum(GROUPS.c[column]), 0) for column in STATUS_COLUMNS.values()]
_EPOCH = datetime(1970, 1, 1)


def bucket(at: datetime, width: int) -> datetime:
    """The start of the ``width``-second bucket ``at`` falls in."""
    if width == 60:
        return at.replace(second=0, microsecond=0)
    if width == 3600:
        return at.replace(minute=0, second=0, microsecond=0)
    return _EPOCH + timedelta(seconds=(int((at - _EPOCH).total_seconds()) // width) * width)


def group_of(subject: str | None, reason: str | None, key: str) -> tuple[str, str, str]:
    """How a group is named in failure_groups: no subject or reason is ''."""
    return subject or "", reason or "", key


def group_ids(conn: Connection, groups: Iterable[tuple[str, str, str]], made: set[int] | None = None,
              teams: tuple[Team, ...] = (), source: str | None = None) -> dict[tuple[str, str, str], int]:
    """The id of each group (as group_of names it) of ``source``, made when it is new; ``made``
    receives the ids of the groups this call made (what raises a group.new alert). A group made is
    given the first of ``teams`` covering its subject (DLQ_TEAMS) in the insert that makes it.
    ``source`` None: a database before revision 0015 (the regrouping revisions), of one source."""
    wanted = set(groups)
    if not wanted:
        return {}
    existing: dict[tuple, int] = {}
    if made is not None or teams:  # with teams, so that only a group really made is matched to them
        existing = _find_groups(conn, wanted, source)
        if len(existing) == len(wanted):
            return existing  # nothing to make: the usual batch, one query
    # The team only when teams are set: the revisions that regroup (0003, 0011) run this before
    # revision 0012 adds the column.
    insert_rows(conn, GROUPS, [{"subject": s, "reason": r, "key": k, "open_count": 0, "republished_count": 0,
                                "closed_count": 0, **({"team": team_for(teams, s)} if teams else {}),
                                **({"source": source} if source is not None else {})}
                               for s, r, k in sorted(wanted - set(existing))],
                skip_duplicates=True)
    found = _find_groups(conn, wanted, source)
    if made is not None:
        made.update(group_id for group, group_id in found.items() if group not in existing)
    return found


def _find_groups(conn: Connection, wanted: set[tuple[str, str, str]],
                 source: str | None = None) -> dict[tuple[str, str, str], int]:
    found: dict[tuple, int] = {}
    ordered = sorted(wanted)
    for start in range(0, len(ordered), 500):
        chunk = ordered[start:start + 500]
        for group_id, s, r, k in conn.execute(
                select(GROUPS.c.id, GROUPS.c.subject, GROUPS.c.reason, GROUPS.c.key)
                .where(tuple_(GROUPS.c.subject, GROUPS.c.reason, GROUPS.c.key).in_(chunk),
                       *([GROUPS.c.source == source] if source is not None else []))):
            found[(s, r, k)] = group_id
    return found


@dataclass(frozen=True)
class Change:
    """An entry counted somewhere new: written (``old_group`` None), moved to another group,
    given another status, or purged (``new_group`` None); ``count`` entries that changed alike."""

    old_group: int | None
    new_group: int | None
    received_at: datetime
    old_status: str | None
    new_status: str | None
    count: int = 1


def count_changes(conn: Connection, changes: Iterable[Change]) -> dict[int, int]:
    """Move the counts of these entries from where they were counted to where they are now;
    return how many new entries (changes without an ``old_group``) each group received."""
    arrived: dict[int, int] = defaultdict(int)
    per_group: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    per_bucket: dict[tuple, int] = defaultdict(int)
    seen: dict[int, list[datetime]] = {}
    for c in changes:
        if c.old_group == c.new_group and c.old_status == c.new_status:
            continue
        n = c.count
        if c.old_group is not None:
            per_group[c.old_group][c.old_status] -= n
            for width in WIDTHS:
                at = bucket(c.received_at, width)
                per_bucket[(width, at, c.old_group, c.old_status)] -= n
                per_bucket[(width, at, ALL_GROUPS, c.old_status)] -= n
        else:
            arrived[c.new_group] += n
        if c.new_group is not None and c.new_group != c.old_group:  # new, or moved here: seen here now
            first_last = seen.setdefault(c.new_group, [c.received_at, c.received_at])
            first_last[0], first_last[1] = min(first_last[0], c.received_at), max(first_last[1], c.received_at)
        if c.new_group is None:
            continue  # purged: counted nowhere any more
        per_group[c.new_group][c.new_status] += n
        for width in WIDTHS:
            at = bucket(c.received_at, width)
            per_bucket[(width, at, c.new_group, c.new_status)] += n
            per_bucket[(width, at, ALL_GROUPS, c.new_status)] += n
    if not per_group:
        return dict(arrived)
    deltas = [{"b_id": group_id, **{f"b_{column}": by_status.get(status, 0)
                                    for status, column in STATUS_COLUMNS.items()},
               "b_first": seen.get(group_id, (None, None))[0], "b_last": seen.get(group_id, (None, None))[1]}
              for group_id, by_status in sorted(per_group.items())]  # rows locked in one order
    first, last = bindparam("b_first", type_=DateTime()), bindparam("b_last", type_=DateTime())
    conn.execute(update(GROUPS).where(GROUPS.c.id == bindparam("b_id")).values(
        **{column: GROUPS.c[column] + bindparam(f"b_{column}") for column in STATUS_COLUMNS.values()},
        first_seen=case((first.is_(None), GROUPS.c.first_seen), (GROUPS.c.first_seen.is_(None), first),
                        (first < GROUPS.c.first_seen, first), else_=GROUPS.c.first_seen),
        last_seen=case((last.is_(None), GROUPS.c.last_seen), (GROUPS.c.last_seen.is_(None), last),
                       (last > GROUPS.c.last_seen, last), else_=GROUPS.c.last_seen)), deltas)
    add_to_counts(conn, ARRIVALS, [{"width": w, "bucket": b, "group_id": g, "status": s, "count": n}
                                   for (w, b, g, s), n in sorted(per_bucket.items()) if n],
                  key=["width", "bucket", "group_id", "status"], count="count")
    return dict(arrived)
