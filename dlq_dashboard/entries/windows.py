"""The ids of the entries received in a time window, for SQLite's selections.

SQLite keeps no statistics of the times here, so for a time filter it walked the entries by id
(the list's order) from the newest, or along another filter's ``(value, id)`` index, testing
each entry's time: through every entry received after the window to reach it (a chart bar's hour
three days back: half a million at a million entries), and on to the oldest when it had not
found what it wanted (a page of a selective filter; the summary and groups of ``since=1h``,
which count up to tallies.BOUND entries). ``window_ids`` looks up the least and the greatest id
of the window's entries, and Store bounds the ids it walks by them: the walk starts at the
window and stops at its end (docs/PERFORMANCE.md, "A time window")."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, DateTime, Select, bindparam, func, select

from ..db.models import Entry

#: The most entries a window may hold for its ids to be looked up: the most the summaries and
#: groups count of a filter (tallies.BOUND), which walked the whole table for a smaller window;
#: the lookup read that many entries of the time index in 8-16 ms at a million entries.
WINDOW_IDS_CAP = 100_000
#: How many entries received after a window make its ids worth looking up: fewer, and the
#: walk from the newest entry reaches the window about as soon.
WINDOW_AFTER = 1_000
#: The entries as the window's ids are looked up in them.
_BY_TIME = Entry.__table__.alias("by_time")
_NEWEST = select(func.max(_BY_TIME.c.id)).scalar_subquery() + 1  # past the greatest id
_SINCE, _UNTIL = bindparam("since", type_=DateTime), bindparam("until", type_=DateTime)


def _id_from(at):
    """The id of the first entry of the time index at or after ``at`` (past the greatest id when
    there is none): one step down the index. Where ids ascend with time, as one writer gives
    them, the entries received from ``at`` on have about the ids from this one on."""
    first = (select(_BY_TIME.c.id).where(_BY_TIME.c.received_at >= at)
             .order_by(_BY_TIME.c.received_at).limit(1).scalar_subquery())
    return func.coalesce(first, _NEWEST, 1)


def _statements(since: bool, until: bool) -> tuple[Select, Select]:
    """For a window with these ends: (how many ids it spans, how many come after it), and
    (how many entries it holds up to the cap + 1, their least id, their greatest id)."""
    start, end = _id_from(_SINCE) if since else 1, _id_from(_UNTIL) if until else _NEWEST
    inside = ([_BY_TIME.c.received_at >= _SINCE] if since else []) + ([_BY_TIME.c.received_at < _UNTIL] if until else [])
    window = select(_BY_TIME.c.id).where(*inside).limit(bindparam("cap")).subquery()
    return (select(end - start, _NEWEST - end),
            select(func.count(), func.min(window.c.id), func.max(window.c.id)))


# Built once, the times bound at each lookup (a lookup a request: building them cost more than
# reading a window of a few thousand entries).
_BUILT = {(since, until): _statements(since, until) for since in (False, True) for until in (False, True)}


def window_ids(conn: Connection, since: datetime | None, until: datetime | None) -> tuple[int, int | None] | None:
    """The least and the greatest id of the entries received in [``since``, ``until``) (either
    may be None: open that way), read in ``conn``'s transaction; the greatest is None without
    ``until`` (the walk starts at the newest entry, and one received later belongs to the
    window too); (0, 0) for an empty window. Exact whatever the order of times and ids (a clock
    set back, another replica's clock).

    None where the lookup does not pay, as two steps down the time index tell first (_id_from:
    how many ids a window spans, the entries it holds where ids ascend with time): a window of
    more than WINDOW_IDS_CAP entries (the scan is capped there too, whatever the guess), and one
    whose ``until`` has fewer than WINDOW_AFTER entries received after it (``until=<now>``, as
    an export frozen at its start asks). A selection then walks as it would without them: bounds
    that hold nothing back would still draw SQLite's plan to another index's walk."""
    if since is None and until is None:
        return None
    spans, reads = _BUILT[(since is not None, until is not None)]
    times = {"since": since, "until": until}
    span, after = conn.execute(spans, times).one()
    if span is None or span > WINDOW_IDS_CAP or (until is not None and after < WINDOW_AFTER):
        return None  # span None: no entry at all
    count, low, high = conn.execute(reads, {**times, "cap": WINDOW_IDS_CAP + 1}).one()
    if count > WINDOW_IDS_CAP:
        return None
    if not count:
        return 0, 0
    return low, high if until is not None else None
