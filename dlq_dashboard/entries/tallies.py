"""What the groups page and the list's summary count: from the counts kept beside the entries
(db/counts.py) when the filter is one they hold (status, subject, reason, group), so the answer
costs the same at a thousand entries and at a million; otherwise from the matching entries
themselves, the newest of them at most (SEARCH_BOUND for a search, FIELD_BOUND for a key field,
BOUND for another filter), and the answer says so. A key field's value alone is also counted in
its index (entry_fields, up to BOUND), so an estimate of it carries the exact number of matches."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy import (Connection, Engine, Select, String, and_, bindparam, func, literal_column, or_, select,
                        type_coerce)

from ..db.counts import ALL_GROUPS, ARRIVALS, GROUPS, STATUS_COLUMNS, bucket, status_sums
from ..db.engine import is_sqlite, read_transaction, serial_plans
from ..db.models import Entry
from ..db.rows import UNCACHED, among
from ..ingest.grouping import NO_ERROR
from ..times import as_time, utcnow
from .filters import FILTERS, STATUSES, EntryFilter
from .groups import Group
from ..masking import Mask
from ..scopes import Scope
from .store import MASKED_SEARCH_SCAN, Store

#: The most matching entries counted when the kept counts cannot answer a filter.
BOUND = 100_000
#: The most matches of a search its counts and chart are made from: a search may match every
#: entry, and its summary answers in bounded time at any size (the newest matches, read once).
SEARCH_BOUND = 5_000
#: The same for a key field's filter (field.<label>): a value may be in every entry's payload.
#: Fewer than a search's: the summary is to answer within twice the kept counts' time, and each
#: match read is a lookup of its entry (docs/PERFORMANCE.md, "Summaries: key fields and search").
FIELD_BOUND = 1_000
# The filters the kept counts hold; any other one (stream, consumer, q, since, until) needs the entries.
_KEPT = {f.name for f in FILTERS if f.kept}
# How SQLAlchemy stores a DateTime in SQLite.
_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


@dataclass(frozen=True)
class Tally:
    """How counts were made: ``kept`` from the kept counts (exact at any size); otherwise from
    the entries, ``whole`` when every matching entry was counted (False: only the newest BOUND)."""

    kept: bool
    whole: bool = True
    bound: int = BOUND  # the most entries counted when not from the kept counts
    #: How many entries match in all, where the numbers are of the newest ``bound`` only but that
    #: total is known: a key field's value alone, counted in its index (Store.count_key_field).
    matched: int | None = None
    #: A search's: ``bound`` is of its newest matches, among which the entries that pass the
    #: other filters were counted (fewer than ``bound`` when those filters leave some out).
    window: bool = False

    @property
    def exact(self) -> bool:
        """Whether the numbers are every matching entry's (False: of the newest ``bound`` only,
        so each is at least what it says)."""
        return self.kept or self.whole


KEPT = Tally(kept=True)
#: Matching entries of one status received within one minute: (status, first, last, how many).
Run = tuple[str, datetime | None, datetime | None, int]


def served_by_kept_counts(flt: EntryFilter) -> bool:
    """True when every filter given is one the kept counts hold."""
    return set(flt.to_args()) <= _KEPT


class Tallies:
    """Groups, counts by status and arrivals over time, under a filter (with a viewer's
    ``mask``, a search counts only the entries it finds in what the viewer sees; with
    ``scopes``, a scoped reader's, only the entries they cover, counted from the kept counts
    of the groups whose subject they cover: a group is of one subject)."""

    def __init__(self, store: Store, mask: Mask | None = None, scopes: tuple[Scope, ...] | None = None):
        self.store, self.engine, self.mask, self.scopes = store, store.engine, mask, scopes
        self._searched: dict[EntryFilter, tuple[list[Run], Tally]] = {}

    def _scoped(self, flt: EntryFilter) -> EntryFilter:
        return (flt if self.scopes is None else replace(flt, scopes=self.scopes)).seen_through(self.mask)

    # --- groups --------------------------------------------------------------------------------

    def groups(self, flt: EntryFilter, limit: int = 200, where: tuple = ()) -> tuple[list[Group], Tally]:
        """Failure groups under the filter, largest first; ``where``: conditions on the groups
        themselves (their triage state, assignee, team: entries/triage.py GroupStateFilter)."""
        flt = self._scoped(flt)
        if served_by_kept_counts(flt):
            # Without conditions on the groups themselves (the page as it opens) the statement
            # is the filter's, kept by the store.
            query = self.store.statement_for(_kept_groups, flt, limit) if not where else \
                _kept_groups(flt, limit, where)
            with read_transaction(self.engine) as conn:
                rows = conn.execute(query).all()
            return [group_from_row(r, r.n, r.first_seen, r.last_seen) for r in rows], KEPT
        if not flt.q:
            return self._groups_of_newest(flt, limit, where)
        ids, tally = self._newest(flt)
        with read_transaction(self.engine) as conn:
            # A list of ids: one array on PostgreSQL, written out on SQLite, uncached.
            counted = (select(Entry.group_id, func.count().label("n"), func.min(Entry.received_at).label("first"),
                              func.max(Entry.received_at).label("last"))
                       .where(among(conn, Entry.id, ids)).group_by(Entry.group_id).subquery())
            rows = conn.execute(_counted_groups(counted, limit, where), execution_options=UNCACHED).all()
        return [group_from_row(r, r.n, as_time(r.first), as_time(r.last)) for r in rows], tally

    def _groups_of_newest(self, flt: EntryFilter, limit: int, where: tuple) -> tuple[list[Group], Tally]:
        """The groups of the newest BOUND entries under a filter the kept counts do not hold
        (FIELD_BOUND under a key field's, with how many match in all where its index tells, as
        the summary counts them), in one statement: those entries and one more are read once
        (the one more says whether there are more, and is not counted), the groups counted among
        them."""
        with read_transaction(self.engine) as conn:
            newest = _Newest(self.store, flt, conn, Entry.group_id, Entry.received_at)
            received = newest.c.received_at
            counted = (select(newest.c.group_id, func.count().label("n"), func.min(received).label("first"),
                              func.max(received).label("last"))
                       .where(newest.counted).group_by(newest.c.group_id).subquery())
            rows = conn.execute(_counted_groups(counted, limit, where).add_columns(newest.seen.label("seen"))).all()
            # No group at all: none matched, or the conditions on the groups left none out of many.
            tally = newest.tally(conn, rows[0].seen if rows else conn.execute(select(newest.seen)).scalar_one())
        return [group_from_row(r, r.n, as_time(r.first), as_time(r.last)) for r in rows], tally

    def hourly_arrivals(self, group_ids: list[int], *, hours: int = 24,
                        now: datetime | None = None) -> tuple[datetime, dict[int, list[int]]]:
        """Entries of each group (any status) that arrived in each of the last ``hours`` hours, the
        current hour last, from the hour buckets of the arrivals: one query for all the groups,
        a few rows each however many entries there are. Returns the first hour and the counts."""
        return self.arrivals(group_ids, width=3600, buckets=hours, now=now)

    def arrivals(self, group_ids: list[int], *, width: int, buckets: int,
                 now: datetime | None = None) -> tuple[datetime, dict[int, list[int]]]:
        """As hourly_arrivals, in the last ``buckets`` buckets of ``width`` seconds (db/counts.py
        WIDTHS: a minute or an hour), the current one last."""
        end = bucket(now or utcnow(), width) + timedelta(seconds=width)
        start = end - timedelta(seconds=width * buckets)
        hours = buckets
        trends = {group_id: [0] * hours for group_id in group_ids}
        if not group_ids:
            return start, trends
        hour_index: dict = {}
        for i in range(hours):
            at = start + timedelta(seconds=width * i)
            hour_index[at] = hour_index[at.strftime(_SQLITE_TIME)] = i
        with read_transaction(self.engine) as conn:
            for group_id, at, n in conn.execute(_ARRIVALS, {"width": width, "start": start, "end": end,
                                                            "group_ids": group_ids}):
                index = hour_index.get(at)
                if index is None:  # stored in another form: parse it
                    index = hour_index.get(as_time(at))
                if index is not None:
                    trends[group_id][index] += int(n)
        return start, trends

    # --- counts by status ----------------------------------------------------------------------

    def counts_by_status(self, flt: EntryFilter) -> tuple[dict[str, int], Tally]:
        """How many entries each status has under the filter (its status aside)."""
        flt = self._scoped(flt)
        others = EntryFilter(**{**flt.__dict__, "status": None, "cursor": None})
        if served_by_kept_counts(others):
            with read_transaction(self.engine) as conn:
                row = conn.execute(self.store.statement_for(_kept_counts, others)).one()
            return {status: int(n) for status, n in zip(STATUS_COLUMNS, row)}, KEPT
        if self._sampled(others):
            found, tally = self._search_matches(others)
            counted = Counter()
            for status, _, _, n in found:
                counted[status] += n
            return {status: counted.get(status, 0) for status in STATUSES}, tally
        newest, tally = self._newest(others)
        with read_transaction(self.engine) as conn:
            rows = dict(conn.execute(select(Entry.status, func.count()).where(Entry.id.in_(newest))
                                     .group_by(Entry.status)).all())
        return {status: rows.get(status, 0) for status in STATUSES}, tally

    # --- arrivals over time --------------------------------------------------------------------

    def received_range(self, flt: EntryFilter) -> tuple[datetime | None, datetime | None]:
        """When the first and the last entry under the filter arrived."""
        flt = self._scoped(flt)
        if served_by_kept_counts(flt):
            query = self.store.statement_for(_kept_range, flt)
        elif self._sampled(flt):
            runs = [(first, last) for _, first, last, _ in self._search_runs(flt) if first is not None]
            return (min(first for first, _ in runs), max(last for _, last in runs)) if runs else (None, None)
        else:
            newest, _ = self._newest(flt)
            query = select(func.min(Entry.received_at), func.max(Entry.received_at)).where(Entry.id.in_(newest))
        with read_transaction(self.engine) as conn:
            first, last = conn.execute(query).one()
        return as_time(first), as_time(last)

    def received_between(self, flt: EntryFilter, bounds: list[datetime]) -> tuple[list[int], Tally]:
        """Entries under the filter that arrived in each [bounds[i], bounds[i+1])."""
        flt = self._scoped(flt)
        totals = [0] * max(len(bounds) - 1, 0)
        if not totals:
            return totals, KEPT
        size = bounds[1] - bounds[0]
        if served_by_kept_counts(flt):
            # Hour buckets for bars of an hour or more (each bar a whole number of hours), else minutes.
            width = 3600 if size >= timedelta(hours=1) else 60
            query = self.store.statement_for(_kept_arrivals, flt, width)
            values = {"start": bounds[0], "end": bounds[-1]}
            tally = KEPT
        elif self._sampled(flt):
            for _, at, _, n in self._search_runs(flt):  # a run is of one minute: a bar holds it whole
                index = int((at - bounds[0]) / size) if at is not None and at >= bounds[0] else -1
                if 0 <= index < len(totals) and at < bounds[-1]:
                    totals[index] += n
            return totals, self._search_matches(replace(flt, status=None))[1]
        else:
            newest, tally = self._newest(flt)
            query = (select(_minute(self.engine).label("minute"), func.count())
                     .where(Entry.id.in_(newest), Entry.received_at >= bounds[0], Entry.received_at < bounds[-1])
                     .group_by(literal_column("minute")))
            values = {}
        with read_transaction(self.engine) as conn:
            for at, n in conn.execute(query, values):
                at = as_time(f"{at}:00" if isinstance(at, str) else at)  # SQLite's minute is text
                if at is not None:
                    index = int((at - bounds[0]) / size)
                    if 0 <= index < len(totals):
                        totals[index] += int(n)
        return totals, tally

    # --- the entries themselves, bounded ---------------------------------------------------------

    def _sampled(self, flt: EntryFilter) -> bool:
        """A filter the kept counts do not hold (but a viewer's search, whose matches are read
        again as masked: _newest): its summary is made from its newest matches, SEARCH_BOUND for
        a search and BOUND for another, read once for the counts, the range and the chart."""
        return not served_by_kept_counts(flt) and not (self.mask and flt.q)

    def _search_matches(self, flt: EntryFilter) -> tuple[list[Run], Tally]:
        """The newest matches of ``flt`` (its status aside) as runs (status, first and last
        received, how many), each of one status within one minute (a bar of the chart holds whole
        minutes), and whether they are all of them; one query for a whole summary. A search's are
        the entries that pass the other filters among its newest SEARCH_BOUND matches (its
        window: Store.search_window), so its time does not grow with how few of them pass;
        another filter's, its newest BOUND (FIELD_BOUND for a key field's), counted in SQL."""
        others = replace(flt, status=None, cursor=None)
        if others not in self._searched:
            # One transaction: on PostgreSQL each of its own costs round trips worth a millisecond.
            with read_transaction(self.engine) as conn:
                if others.q:
                    kept, tally = self._window(others, conn, Entry.status, Entry.received_at)
                    runs = [(status, (at := as_time(received)), at, 1) for status, received in kept]
                else:
                    newest = _Newest(self.store, others, conn, Entry.status, Entry.received_at)
                    minute = _minute(self.engine, newest.c.received_at)
                    rows = conn.execute(
                        select(newest.c.status, func.min(newest.c.received_at), func.max(newest.c.received_at),
                               func.count(), newest.seen).where(newest.counted).group_by(newest.c.status, minute)).all()
                    runs = [(status, as_time(first), as_time(last), int(n)) for status, first, last, n, _ in rows]
                    tally = newest.tally(conn, rows[0][-1] if rows else 0)  # no row: nothing matched
            self._searched[others] = (runs, tally)
        return self._searched[others]

    def _window(self, flt: EntryFilter, conn: Connection, *columns) -> tuple[list[tuple], Tally]:
        """``columns`` of the entries the other filters keep among the search's
        newest SEARCH_BOUND matches (Store.search_window), newest first, in one fetch; and
        whether the window held every match of the search."""
        query = self.store.search_window(flt, *columns, limit=SEARCH_BOUND + 1, conn=conn)
        window = conn.execute(query).all()  # one fetch, not one a row
        kept = [tuple(row[2:]) for row in window[:SEARCH_BOUND] if row[1] is not None]
        return kept, Tally(kept=False, whole=len(window) <= SEARCH_BOUND, bound=SEARCH_BOUND, window=True)

    def _search_runs(self, flt: EntryFilter) -> list[Run]:
        """_search_matches' runs of ``flt``'s status (all of them without one)."""
        found, _ = self._search_matches(flt)
        return [run for run in found if flt.status is None or run[0] == flt.status]

    def _newest(self, flt: EntryFilter) -> tuple[list[int], Tally]:
        """The ids of a search's newest matches as counted (a filter the kept counts do not hold
        has _search_matches, and _groups_of_newest for its groups): those its window keeps, or
        with a viewer's mask those found in what the viewer sees; and whether that is all of them."""
        if self.mask:
            # Each match is read and searched again as the viewer sees it: fewer of them.
            ids, whole = self.store.seen_ids(flt, self.mask)
            return ids, Tally(kept=False, whole=whole, bound=MASKED_SEARCH_SCAN)
        with read_transaction(self.engine) as conn:
            kept, tally = self._window(flt, conn, Entry.id)
        return [entry_id for (entry_id,) in kept], tally


class _Newest:
    """The newest matches of a filter the kept counts do not hold, and one more, as a common
    table expression read once in ``conn``'s transaction: BOUND of them (FIELD_BOUND under a key
    field's). ``counted`` is the condition that leaves the one more out (it only tells that more
    match), ``seen`` how many were read."""

    def __init__(self, store: Store, flt: EntryFilter, conn: Connection, *columns):
        self.store, self.flt = store, flt
        self.bound = FIELD_BOUND if flt.field_values else BOUND
        if flt.field_values:  # its newest matches read in a key's order: a worker costs more
            serial_plans(conn)
        newest = store.select_entries(flt, Entry.id, *columns, conn=conn).limit(self.bound + 1).cte("newest")
        self.c = newest.c
        self.seen = select(func.count()).select_from(newest).scalar_subquery()
        self.counted = or_(self.seen <= self.bound, self.c.id > select(func.min(self.c.id)).scalar_subquery())

    def tally(self, conn: Connection, seen: int) -> Tally:
        """How the counts were made, from how many matches were read (``seen``): with a key
        field's value alone, how many match in all (its index counts them, in ``conn``)."""
        whole = seen <= self.bound
        matched = None if whole or not self.flt.field_values else self.store.count_key_field(self.flt, BOUND, conn)
        return Tally(kept=False, whole=whole, bound=self.bound, matched=matched)


# The statements of the kept counts: the groups page, the list's summary and its chart ask them
# at every view, and built each time they cost more to build and to key than to run. Those of a
# filter are kept by the store (Store.statement_for); a request's times are bound parameters.

def _kept_groups(flt: EntryFilter, limit: int, where: tuple = ()) -> Select:
    """Failure groups with entries under ``flt``, largest first; ``where``: on the groups themselves."""
    count = _count_column(flt.status)
    return (select(GROUPS, count.label("n")).where(count > 0, *flt.group_conditions(), *where)
            .order_by(literal_column("n").desc(), GROUPS.c.subject, GROUPS.c.id).limit(limit))


def _counted_groups(counted, limit: int, where: tuple = ()) -> Select:
    """The groups of ``counted`` (a subquery of group_id, n, first, last), largest first;
    ``where``: on the groups themselves."""
    return (select(GROUPS, counted.c.n, counted.c.first, counted.c.last)
            .join(counted, counted.c.group_id == GROUPS.c.id).where(*where)
            .order_by(counted.c.n.desc(), GROUPS.c.subject, GROUPS.c.id).limit(limit))


def _kept_counts(flt: EntryFilter) -> Select:
    """Entries under ``flt`` (its status aside) by status, one column a status (STATUS_COLUMNS')."""
    return select(*status_sums()).where(and_(True, *flt.group_conditions()))


def _kept_range(flt: EntryFilter) -> Select:
    """When the first and the last entry under ``flt`` arrived."""
    return select(func.min(GROUPS.c.first_seen), func.max(GROUPS.c.last_seen)).where(
        _count_column(flt.status) > 0, *flt.group_conditions())


def _kept_arrivals(flt: EntryFilter, width: int) -> Select:
    """Entries under ``flt`` that arrived in each bucket of ``width`` seconds from the bound
    ``start`` to the bound ``end``."""
    query = (select(ARRIVALS.c.bucket, func.sum(ARRIVALS.c.count))
             .where(ARRIVALS.c.width == width, ARRIVALS.c.bucket >= bindparam("start"),
                    ARRIVALS.c.bucket < bindparam("end"))
             .group_by(ARRIVALS.c.bucket))
    if conditions := flt.group_conditions():
        query = query.where(ARRIVALS.c.group_id.in_(select(GROUPS.c.id).where(*conditions)))
    else:
        query = query.where(ARRIVALS.c.group_id == ALL_GROUPS)
    if flt.status:
        query = query.where(ARRIVALS.c.status == flt.status)
    return query


# The groups' trends: the bucket as the driver gives it (SQLite's stored text is matched as text,
# since parsing 24 times 200 of them into datetimes would cost more than the query).
_ARRIVALS = (select(ARRIVALS.c.group_id, type_coerce(ARRIVALS.c.bucket, String), func.sum(ARRIVALS.c.count))
             .where(ARRIVALS.c.width == bindparam("width"), ARRIVALS.c.bucket >= bindparam("start"),
                    ARRIVALS.c.bucket < bindparam("end"),
                    ARRIVALS.c.group_id.in_(bindparam("group_ids", expanding=True)))
             .group_by(ARRIVALS.c.bucket, ARRIVALS.c.group_id))


def _count_column(status: str | None):
    if status:
        return GROUPS.c[STATUS_COLUMNS[status]]
    return GROUPS.c.open_count + GROUPS.c.republished_count + GROUPS.c.closed_count


def group_from_row(row, count: int, first: datetime | None, last: datetime | None) -> Group:
    """A row of failure_groups as a Group counting ``count`` entries."""
    m = row._mapping
    return Group(id=m["id"], subject=m["subject"] or None, reason=m["reason"] or None, key=m["key"] or NO_ERROR,
                 count=int(count), by_status={s: int(m[STATUS_COLUMNS[s]]) for s in STATUSES},
                 first_seen=first, last_seen=last, source=m["source"], state=m["state"], assignee=m["assignee"],
                 team=m["team"], version=m["version"], notes=m["note_count"], resolved_in=m["resolved_in"],
                 until=as_time(m["ignored_until"]), until_count=m["ignored_until_count"],
                 ignored_seen=int(m["ignored_seen"] or 0) if m["state"] == "ignored" else None,
                 state_changed_at=as_time(m["state_changed_at"]))


def _minute(engine: Engine, column=Entry.received_at):
    if is_sqlite(engine):
        return func.substr(column, 1, 16)  # stored as 'YYYY-MM-DD HH:MM:SS...'
    return func.date_trunc("minute", column)
