"""The one query layer: pages, single entries, counts and groups as plain values with
to_dict(). What selects entries (EntryFilter and friends) lives in filters.py, the shape of an
entry in view.py and shape.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

from sqlalchemy import Connection, Engine, Integer, Select, and_, bindparam, false, func, literal, or_, select

from ..db.engine import is_sqlite, read_transaction, serial_plans
from ..db.models import Action, Entry, Event, FailureGroup, JobItem, Republish
from ..ingest.key_fields import ENTRY_FIELDS
from ..ingest.search_index import SearchLag, lag_of
from ..numbers import ID_MAX
from ..scopes import Scope
from ..surrogates import loads_shown
from ..times import format_time
from .audit import audit_record
from .fields import KeyField, field_expression, shown_value, stored_lookup
from . import replays
from .filters import DEFAULT_LIMIT, EntryFilter, FilterError, decode_cursor, encode_cursor, scope_condition
from .search import FTS, fts_match, newest_matches
from .sizes import Sizes
from .windows import window_ids
from ..masking import Mask
from .view import EntryView, Page

#: The most search matches read for one page, count or tally when a viewer's search must skip
#: the entries it matched by a masked value only (Store.list_entries).
MASKED_SEARCH_SCAN = 10_000
#: The search matches read each way for a viewer's previous and next entry (Store.neighbours).
MASKED_NEIGHBOURS = 200
#: The most statements a store keeps built for the filters it was asked (Store.statement_for).
KEPT_STATEMENTS = 512


def _event_dict(row) -> dict[str, Any]:
    m = row._mapping
    return {"kind": m["kind"], "at": format_time(m["at"]), "deliveries": m["deliveries"],
            "consumer": m["consumer"], "detail": json.loads(m["detail"] or "{}")}


ENTRIES = Entry.__table__
_GROUPS = FailureGroup.__table__


# The statements of one entry's page and of the list's rows, built once: their values are bound
# parameters. Built at each call, a statement cost more than running it (its construction and a
# new cache key, about 130 µs, against 70 µs to run one on SQLite).
_ENTRY = select(ENTRIES).where(Entry.id == bindparam("entry_id"))
_ACTIONS = select(Action.__table__).where(Action.entry_id == bindparam("entry_id")).order_by(Action.id)
_EVENTS = select(Event.__table__).where(Event.source == bindparam("source"),
                                        Event.original_stream == bindparam("stream"),
                                        Event.original_seq == bindparam("seq"))
# An entry's history: its original message's events, of its consumer (or of none) where it names one.
_HISTORY = _EVENTS.order_by(Event.at, Event.id)
_CONSUMER_HISTORY = _EVENTS.where(or_(Event.consumer == bindparam("consumer"), Event.consumer.is_(None))) \
    .order_by(Event.at, Event.id)
_GROUP_OF = (select(_GROUPS.c.id, _GROUPS.c.key).join(ENTRIES, ENTRIES.c.group_id == _GROUPS.c.id)
             .where(Entry.id == bindparam("entry_id")))
_REPLAYS = select(ENTRIES).where(Entry.replay_of == bindparam("ref")).order_by(Entry.id)
_REPUBLISHES = select(Republish.__table__).where(Republish.entry_id == bindparam("entry_id")).order_by(Republish.id)


def _prefix_columns(size: int) -> list:
    """Every column of entries, in table order, the payload cut to its first ``size`` bytes,
    and the whole payload's size as ``payload_size``."""
    return [func.substr(c, 1, size).label("payload") if c.name == "payload" else c for c in ENTRIES.columns] + [
        func.length(ENTRIES.c.payload).label("payload_size")]


@dataclass
class Store(Sizes):
    """Read queries over the database; writes live with the code that owns them."""

    engine: Engine
    # DLQ_TRACE_URL: every entry read carries it, so its JSON has its trace_url wherever it goes.
    trace_template: str | None = None
    _built: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def statement_for(self, build: Callable[..., Select], *key) -> Select:
        """``build(*key)``, built once for each key asked (a filter, the key fields). A page, its
        neighbours and the new-entries poll cost more to build (and to key for SQLAlchemy's
        cache) than to run, and a filter (the list unfiltered, its status links) is asked again
        and again; what a request brings besides it (a cursor, an entry id) is a bound
        parameter. A filter whose statement holds more than its values (since=1h, a new time at
        each request; a key field's, how far its backfill has come) is built each time: each
        filter says which (EntryFilter.keeps_statement); so is a time filter's on SQLite, which
        holds its window's ids (_selection)."""
        if any(isinstance(k, EntryFilter) and not self.keeps(k) for k in key):
            return build(*key)
        found = self._built.get((build, *key))
        if found is None:
            if len(self._built) >= KEPT_STATEMENTS:
                self._built.clear()  # the filters asked most are built again at their next request
            found = self._built[(build, *key)] = build(*key)
        return found

    def _view(self, row) -> EntryView:
        return EntryView.from_row(row, self.trace_template)

    def _searching(self, flt: EntryFilter) -> bool:
        return bool(flt.q) and is_sqlite(self.engine)

    def keeps(self, flt: EntryFilter) -> bool:
        """Whether a statement built for ``flt`` holds its values alone, so statement_for keeps it."""
        return flt.keeps_statement and not self._timed(flt)

    def _selection(self, flt: EntryFilter, *columns, conn: Connection | None = None) -> tuple[Select, Any]:
        """The SELECT for a filter, newest first, without limit or cursor, and the id column its
        keyset compares (the one the rows are read in the order of); ``conn``: the transaction
        to look the key fields and a time window's ids up in (else one of its own).

        A search is driven from the full-text index in rowid order (rowid = entry id), and a key
        field's value from its rows of entry_fields in entry order, so a page reads its 50
        matches and stops, however many rows match in all. On SQLite the ids walked are also
        bounded by those of a time filter's window (windows.py), so the statement of one is
        built at each request (statement_for).
        """
        if conn is None and (self._timed(flt) or flt.field_values):
            with read_transaction(self.engine) as own:
                return self._selection(flt, *columns, conn=own)
        columns = columns or (ENTRIES,)
        if self._searching(flt):
            query, key = (select(*columns).select_from(FTS.join(ENTRIES, ENTRIES.c.id == FTS.c.rowid))
                          .where(fts_match(flt.q), *flt.conditions(self.engine, search=False))), FTS.c.rowid
        elif (stored := self._stored_field(flt, conn)) is not None:
            lookup, rest = stored
            # Not Entry.id < cursor: PostgreSQL does not carry a range across the join's equality.
            query, key = (select(*columns)
                          .select_from(ENTRY_FIELDS.join(ENTRIES, ENTRIES.c.id == ENTRY_FIELDS.c.entry_id))
                          .where(lookup, *rest.conditions(self.engine))), ENTRY_FIELDS.c.entry_id
        else:
            query, key = select(*columns).where(and_(True, *flt.conditions(self.engine))), Entry.id
        window = self.window_of(flt, conn)
        if window is not None:
            low, high = window
            query = query.where(key >= low) if high is None else query.where(key >= low, key <= high)
        return query.order_by(key.desc()), key

    def _timed(self, flt: EntryFilter) -> bool:
        """Whether the selection of ``flt`` is bounded by its time window's ids (windows.py)."""
        return (flt.since is not None or flt.until is not None) and is_sqlite(self.engine)

    def window_of(self, flt: EntryFilter, conn: Connection) -> tuple[int, int | None] | None:
        """The ids of ``flt``'s time window on SQLite (windows.window_ids) in ``conn``'s
        transaction; None where a selection is not bounded by them."""
        return window_ids(conn, flt.since, flt.until) if self._timed(flt) else None

    def select_entries(self, flt: EntryFilter, *columns, conn: Connection | None = None) -> Select:
        """The SELECT for a filter, newest first, without limit or cursor (``_selection``)."""
        return self._selection(flt, *columns, conn=conn)[0]

    def search_window(self, flt: EntryFilter, *columns, limit: int, conn: Connection) -> Select:
        """A search's window, newest first: the newest ``limit`` matches of ``flt.q`` alone
        (search.newest_matches), each as (the match's id, the entry's id, ``columns``) where the
        entry passes the filter's other conditions and (id, NULL, NULLs) where it does not. Its
        time is that of ``limit`` matches whatever the other filters (Tallies: a search's counts);
        without parallel workers on PostgreSQL (``conn``'s transaction), whose start costs more
        than such a read."""
        serial_plans(conn)
        window = newest_matches(self.engine, flt.q, limit).subquery()
        passes = and_(ENTRIES.c.id == window.c.entry_id, *flt.conditions(self.engine, search=False))
        return (select(window.c.entry_id, ENTRIES.c.id, *columns).select_from(window.outerjoin(ENTRIES, passes))
                .order_by(window.c.entry_id.desc()))

    def _stored_field(self, flt: EntryFilter, conn: Connection) -> tuple[Any, EntryFilter] | None:
        """The lookup in entry_fields of the first of the filter's key-field values that it holds
        for every entry (fields.stored_lookup, in ``conn``'s transaction), and the filter without
        that value; None when there is none (no key field, or each still read from payloads)."""
        if not flt.field_values:
            return None
        for i, (key_field, value) in enumerate(flt.field_values):
            if (lookup := stored_lookup(conn, key_field, value)) is not None:
                if flt.hidden_payloads:  # the entries' own column: the query joins them
                    lookup = and_(lookup, ENTRIES.c.payload_opaque == false())
                return lookup, replace(flt, field_values=flt.field_values[:i] + flt.field_values[i + 1:])
        return None

    def count_key_field(self, flt: EntryFilter, cap: int, conn: Connection) -> int | None:
        """How many entries match ``flt`` when one key field's value is all it selects by (no
        other filter, no scopes), counted in entry_fields alone (in ``conn``'s transaction), up
        to ``cap``; None beyond it, and for any other filter."""
        stored = self._stored_field(flt, conn)
        if stored is None or stored[1].filtered or flt.scopes is not None or flt.hidden_payloads:
            return None
        # Rows of the index alone (no column of them read): a tight step from one to the next.
        found = select(literal(1)).select_from(ENTRY_FIELDS).where(stored[0]).limit(cap + 1).subquery()
        count = conn.execute(select(func.count()).select_from(found)).scalar_one()
        return count if count <= cap else None

    def list_entries(self, flt: EntryFilter, mask: Mask | None = None, *, payload_prefix: int | None = None) -> Page:
        """One page of entries matching the filter, newest first (keyset pagination).

        With a ``mask`` (a viewer's), a search keeps only the entries it finds in what the
        viewer sees of them; see _list_seen. With ``payload_prefix``, each payload is read only
        that many bytes far, and ``payload_size`` tells its whole size (the list's snippets).
        """
        page = self._list(flt, mask, payload_prefix)
        if flt.q:
            page.search = self.search_lag(flt)
        return page

    def search_lag(self, flt: EntryFilter, cap: int = 10_000) -> SearchLag:
        """How far the search index covers: its position, and how many newer entries under the
        filter's other conditions a search does not find yet (counted up to ``cap``)."""
        with read_transaction(self.engine) as conn:
            return lag_of(conn, cap, tuple(flt.conditions(self.engine, search=False)))

    def _list(self, flt: EntryFilter, mask: Mask | None, payload_prefix: int | None) -> Page:
        if mask and flt.q:
            return self._list_seen(flt, mask)
        query = self.statement_for(self._page_query, replace(flt, cursor=None), flt.cursor is not None,
                                   payload_prefix)
        with read_transaction(self.engine) as conn:
            rows = conn.execute(query, {"before": decode_cursor(flt.cursor)} if flt.cursor else {}).all()
        entries = [self._view(r) for r in rows[: flt.limit]]
        if payload_prefix:
            for view, row in zip(entries, rows):
                view.payload_size = row._mapping["payload_size"]
        next_cursor = encode_cursor(entries[-1].id) if len(rows) > flt.limit else None
        return Page(entries, next_cursor)

    def _page_query(self, flt: EntryFilter, after_cursor: bool, payload_prefix: int | None) -> Select:
        """A page under ``flt`` and one more row (there is a next page), older than the bound
        ``before`` when ``after_cursor``."""
        query, key = self._selection(flt, *(_prefix_columns(payload_prefix) if payload_prefix else ()))
        if after_cursor:
            query = query.where(key < bindparam("before", type_=Integer))
        return query.limit(flt.limit + 1)

    def field_values(self, ids: list[int], fields: tuple[KeyField, ...]) -> dict[int, dict[str, str | None]]:
        """The key fields' values of these entries, by id and label (None where there is none)."""
        if not ids or not fields:
            return {}
        with read_transaction(self.engine) as conn:
            rows = conn.execute(self.statement_for(self._field_values_query, fields), {"ids": ids}).all()
        return {r[0]: {f.label: shown_value(self.engine, r[i + 1]) for i, f in enumerate(fields)} for r in rows}

    def _field_values_query(self, fields: tuple[KeyField, ...]) -> Select:
        """The key fields' values of the bound ``ids``."""
        columns = [field_expression(self.engine, f).label(f"f{i}") for i, f in enumerate(fields)]
        return select(Entry.id, *columns).where(Entry.id.in_(bindparam("ids", expanding=True)))

    def _list_seen(self, flt: EntryFilter, mask: Mask) -> Page:
        """A page of a viewer's search: the index's matches, read in order, less those matched
        by a masked value only. Reading stops when the page is full, the matches run out, or
        MASKED_SEARCH_SCAN were read; then the cursor names the last one read, so the next page
        carries on after it (a page may hold fewer entries than the limit, never skip one)."""
        kept: list[EntryView] = []
        last_read, scanned = None, 0
        for view in self.iter_entries(flt, batch=min(flt.limit * 4, 1000)):
            scanned += 1
            last_read = view.id
            if mask.finds(view, flt.q):
                kept.append(view)
                if len(kept) > flt.limit:
                    return Page(kept[:flt.limit], encode_cursor(kept[flt.limit - 1].id))
            if scanned >= MASKED_SEARCH_SCAN:
                return Page(kept, encode_cursor(last_read))
        return Page(kept, None)

    def seen_ids(self, flt: EntryFilter, mask: Mask, *, after_id: int | None = None,
                 scan: int = MASKED_SEARCH_SCAN) -> tuple[list[int], bool]:
        """The ids of a viewer's search matches (newer than ``after_id``), from the newest
        ``scan`` of the index's matches, and whether those were all of them."""
        query, key = self._selection(flt)
        if after_id is not None:
            query = query.where(key > after_id)
        with read_transaction(self.engine) as conn:
            rows = conn.execute(query.limit(scan + 1)).all()
        views = [self._view(r) for r in rows[:scan]]
        return [v.id for v in views if mask.finds(v, flt.q)], len(rows) <= scan

    def iter_entries(self, flt: EntryFilter, batch: int = 1000, mask: Mask | None = None) -> Iterator[EntryView]:
        """Every matching entry, newest first, read in keyset batches (constant memory).

        With a ``mask``, a search skips the entries matched by a masked value only."""
        if mask and flt.q:
            yield from (v for v in self.iter_entries(flt, batch) if mask.finds(v, flt.q))
            return
        for row in self.iter_rows(flt, batch=batch):
            yield self._view(row)

    def iter_rows(self, flt: EntryFilter, *columns, batch: int = 1000) -> Iterator[Any]:
        """The rows of ``columns`` (the entry's ``id`` among them; every column by default) of
        every matching entry, newest first, in keyset batches: each a transaction of its own, so
        memory stays constant without a server-side cursor (which the statement timeout's SET
        LOCAL cannot share a statement with)."""
        last_id = decode_cursor(flt.cursor) if flt.cursor else None
        every = key = None
        while True:
            with read_transaction(self.engine) as conn:
                if every is None:
                    # A time window's ids looked up once, not at each batch: an entry received
                    # later has a greater id than any batch's, above the keyset, as without them.
                    every, key = self._selection(flt, *columns, conn=conn)
                query = every.where(key < last_id) if last_id is not None else every
                rows = conn.execute(query.limit(batch)).all()
            if not rows:
                return
            yield from rows
            last_id = rows[-1]._mapping["id"]

    def count_newer(self, flt: EntryFilter, after_id: int, cap: int = 1000, mask: Mask | None = None) -> int:
        """How many entries under the filter are newer than ``after_id`` (counted up to ``cap``)."""
        if mask and flt.q:
            return min(len(self.seen_ids(flt, mask, after_id=after_id)[0]), cap)
        with read_transaction(self.engine) as conn:
            return conn.execute(self.statement_for(self._newer_count_query, replace(flt, cursor=None), cap),
                                {"after": after_id}).scalar_one()

    def _newer_count_query(self, flt: EntryFilter, cap: int) -> Select:
        """How many entries under ``flt`` are newer than the bound ``after``, counted up to ``cap``."""
        query, key = self._selection(flt, Entry.id)
        query = query.where(key > bindparam("after", type_=Integer))
        return select(func.count()).select_from(query.limit(cap).subquery())

    def neighbours(self, flt: EntryFilter, entry_id: int, mask: Mask | None = None) -> tuple[int | None, int | None]:
        """(newer, older): the ids beside ``entry_id`` in the list under ``flt``, in its order
        (newest first), one keyset query each way. With a ``mask``, a search skips the entries
        matched by a masked value only, among the next MASKED_NEIGHBOURS each way."""
        seen = bool(mask and flt.q)
        flt = replace(flt, cursor=None, limit=DEFAULT_LIMIT)  # neither changes the neighbours
        found: list[int | None] = []
        with read_transaction(self.engine) as conn:
            for newer in (True, False):
                query = self.statement_for(self._neighbour_query, flt, newer, seen)
                if not seen:
                    found.append(conn.execute(query, {"entry_id": entry_id}).scalar())
                    continue
                views = (self._view(r) for r in conn.execute(query, {"entry_id": entry_id}))
                found.append(next((v.id for v in views if mask.finds(v, flt.q)), None))
        return found[0], found[1]

    def _neighbour_query(self, flt: EntryFilter, newer: bool, seen: bool) -> Select:
        """The entry beside the bound ``entry_id`` under ``flt``: the next newer one, or the next
        older; ``seen``: whole rows of the next MASKED_NEIGHBOURS, for a viewer's search."""
        query, key = self._selection(flt, *(() if seen else (Entry.id,)))
        entry_id = bindparam("entry_id", type_=Integer)
        query = query.order_by(None).where(key > entry_id).order_by(key.asc()) if newer else query.where(key < entry_id)
        return query.limit(MASKED_NEIGHBOURS if seen else 1)

    def check_group(self, flt: EntryFilter) -> None:
        """FilterError (a 400) when the filter's ``group`` names no failure group: an id from
        /groups, or the key text of a link made before groups had ids ("abc" matched nothing
        and the list said so, as if the group were empty)."""
        if not flt.group:
            return
        with read_transaction(self.engine) as conn:
            query = select(_GROUPS.c.id).where(flt._group_condition())
            if flt.scopes is not None:  # a group outside the reader's scopes is as unknown as none
                query = query.where(scope_condition(_GROUPS.c.subject, flt.scopes))
            found = conn.execute(query.limit(1)).first()
        if found is None:
            raise FilterError(f"group {flt.group!r} is not a failure group: use a group's id from /groups "
                              "or /api/groups")

    def group_of(self, entry_id: int) -> tuple[int, str] | None:
        """The failure group of an entry: its id and key."""
        with read_transaction(self.engine) as conn:
            row = conn.execute(_GROUP_OF, {"entry_id": entry_id}).first()
        return (row.id, row.key) if row else None

    def group_subjects(self, group_ids: list[int]) -> dict[int, tuple[str | None, str]]:
        """The subject (None where its entries have none) and the source of each of these failure
        groups."""
        if not group_ids:
            return {}
        with read_transaction(self.engine) as conn:
            rows = conn.execute(select(_GROUPS.c.id, _GROUPS.c.subject, _GROUPS.c.source)
                                .where(_GROUPS.c.id.in_(group_ids))).all()
        return {r.id: (r.subject or None, r.source) for r in rows}

    def get_entry(self, entry_id: int, *, with_history: bool = True) -> EntryView | None:
        """One entry, with its delivery history and its actions."""
        with read_transaction(self.engine) as conn:
            row = conn.execute(_ENTRY, {"entry_id": entry_id}).first()
            if row is None:
                return None
            entry = self._view(row)
            if with_history:
                entry.history = self._history(conn, entry)
                entry.actions = [audit_record(r) for r in conn.execute(_ACTIONS, {"entry_id": entry_id})]
        return entry

    def job_entry_ids(self, job_ids, per_job: int) -> dict[int, list[int]]:
        """The first ``per_job`` entries (by id) of each of these bulk jobs, by job id."""
        items = JobItem.__table__
        ranked = select(items.c.job_id, items.c.entry_id, func.row_number().over(
            partition_by=items.c.job_id, order_by=items.c.entry_id).label("n")).where(
            items.c.job_id.in_(sorted({int(j) for j in job_ids}))).subquery()
        found: dict[int, list[int]] = {}
        with read_transaction(self.engine) as conn:
            for job_id, entry_id in conn.execute(select(ranked.c.job_id, ranked.c.entry_id)
                                                 .where(ranked.c.n <= per_job)):
                found.setdefault(job_id, []).append(entry_id)
        return found

    def entries_by_id(self, entry_ids) -> dict[int, EntryView]:
        """The entries with these ids (without history), by id; a purged one is left out."""
        ids = sorted({int(i) for i in entry_ids if i is not None})
        if not ids:
            return {}
        with read_transaction(self.engine) as conn:
            rows = conn.execute(select(ENTRIES).where(Entry.id.in_(ids))).all()
        return {r._mapping["id"]: self._view(r) for r in rows}

    def newest_of_groups(self, group_ids: list[int]) -> dict[int, EntryView]:
        """The newest entry of each of these failure groups, by group id."""
        if not group_ids:
            return {}
        newest = select(func.max(Entry.id)).where(Entry.group_id.in_(group_ids)).group_by(Entry.group_id)
        with read_transaction(self.engine) as conn:
            rows = conn.execute(select(ENTRIES).where(Entry.id.in_(newest))).all()
        return {r._mapping["group_id"]: self._view(r) for r in rows}

    def entry_by_dlq_ref(self, ref: str, source: str | None = None) -> EntryView | None:
        """The entry a ``<dlq stream>:<seq>`` reference names (the newest, if the stream was
        recreated), of ``source`` (None: of any): a republish goes out through its entry's source,
        and another source may have a DLQ stream of the same name."""
        stream, _, seq = ref.rpartition(":")
        if not stream or not (seq.isascii() and seq.isdigit()) or int(seq) > ID_MAX:
            return None  # names no message a stream holds (Dlq-Replay-Of is a header anyone writes)
        query = select(ENTRIES).where(Entry.dlq_stream == stream, Entry.dlq_seq == int(seq))
        if source is not None:
            query = query.where(Entry.source == source)
        with read_transaction(self.engine) as conn:
            row = conn.execute(query.order_by(Entry.id.desc()).limit(1)).first()
        return self._view(row) if row else None

    def _history(self, conn, entry: EntryView) -> list[dict]:
        if entry.original_stream is None or entry.original_seq is None:
            return []
        # Within the entry's source: two sources may both have a stream ORDERS and its seq 7.
        values = {"source": entry.source, "stream": entry.original_stream, "seq": entry.original_seq}
        if entry.consumer:
            rows = conn.execute(_CONSUMER_HISTORY, {**values, "consumer": entry.consumer})
        else:
            rows = conn.execute(_HISTORY, values)
        return [_event_dict(r) for r in rows]

    def replays_of(self, ref: str, source: str | None = None) -> list[EntryView]:
        """Entries whose message was a republish of the entry named ``<stream>:<seq>`` in ``source``
        (None: in any): its republish went out through that source, so it failed again there."""
        # By replay_of alone, the source checked here: with the source in the query, SQLite
        # without statistics (no ANALYZE, as in a fresh deployment) walks its (source, id)
        # index for the order, every entry of the source, to find the few replays (the entry
        # page took 110 ms of CPU at 200,000 entries). A message has few replays.
        with read_transaction(self.engine) as conn:
            rows = conn.execute(_REPLAYS, {"ref": ref}).all()
        if source is not None:
            rows = [r for r in rows if r.source == source]
        return [self._view(r) for r in rows]

    def replays_of_entry(self, entry: EntryView) -> list[EntryView]:
        """The entries whose message was a republish of ``entry``, oldest first (replays.py: by
        the msgId the republish was sent with, else by its Dlq-Replay-Of among the entries of that
        reference republished before it arrived; each epoch of a DLQ stream made again has its seq 7)."""
        with read_transaction(self.engine) as conn:
            ids = replays.replays_of(conn, [(entry.id, entry.dlq_ref)]).get(entry.id, [])
            rows = conn.execute(select(ENTRIES).where(Entry.id.in_(ids)).order_by(Entry.id)).all() if ids else []
        return [self._view(r) for r in rows]

    def original_of(self, entry: EntryView) -> EntryView | None:
        """The entry ``entry``'s message was a republish of (replays.py), None when it is none or
        this database does not hold it."""
        replay = replays.Replay(entry.id, entry.source, entry.replay_of, entry.original_msg_id, entry.received_at)
        with read_transaction(self.engine) as conn:
            found = replays.originals(conn, [replay]).get(entry.id)
        return self.entries_by_id([found]).get(found) if found is not None else None

    def failed_again(self, entries: list[tuple[int, str | None]],
                     scopes: tuple[Scope, ...] | None = None) -> dict[int, int]:
        """For each (id, ``<stream>:<seq>``) of an entry, the newest entry whose message was a
        republish of it (its republish failed again; replays.py); only those ``scopes`` cover (a
        replay to another team's subject is not told to this one)."""
        if not entries:
            return {}
        condition = None if scopes is None else scope_condition(Entry.original_subject, scopes)
        with read_transaction(self.engine) as conn:
            found = replays.replays_of(conn, entries, condition)
        return {entry_id: ids[-1] for entry_id, ids in found.items()}

    def republishes_of(self, entry_id: int) -> list[dict]:
        """The republish intents of an entry, oldest first, each with the payload it sends,
        whether that was edited (by hand or by a bulk job's patch), and the headers it sends
        (name -> list of values, as an entry's: one value a name, as nats-py sends them)."""
        with read_transaction(self.engine) as conn:
            rows = conn.execute(_REPUBLISHES, {"entry_id": entry_id}).all()
        return [{"msg_id": r.msg_id, "state": r.state, "version": r.version, "stream": r.stream,
                 "seq": r.seq, "duplicate": r.duplicate, "error": r.error, "actor": r.actor,
                 "payload": bytes(r.payload or b""), "edited": bool(r.edited), "job_id": r.job_id,
                 "created_at": format_time(r.created_at), "published_at": format_time(r.published_at),
                 "headers": {name: value if isinstance(value, list) else [value]  # a list: sent a line each
                             for name, value in loads_shown(r.headers or "{}").items()}}
                for r in rows]
