"""The search index, written by a pass of its own behind the mirror (docs/ARCHITECTURE.md,
"Search behind the mirror"): the mirror's commit path no longer pays for it.

The position (``search_position``, one row) is the last entry id indexed: every entry up to it
is in the index (SQLite's FTS5 ``entries_fts``, PostgreSQL's ``entry_search``), newer ones may
not be yet, and searches lack them until the pass comes (``search_lag`` says how many). The pass
(``index_pending``) indexes the entries above the position in one bounded transaction and moves
it; ``SearchPass`` runs it in a thread of the mirror's writer process, after each write and at
its start. Writes on an engine without a pass (the tests' direct ingests, an import) index their
new entries inline (``index_new_entries``), through the same position, so nothing is indexed
twice. Updates of indexed columns re-index in their own transaction (triggers, migration 0016).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.exc import DBAPIError

from ..db.failing import FailureLog
from ..db.engine import write_transaction
from ..db.models import Entry

log = logging.getLogger(__name__)

#: The most entries one run of the pass indexes: one transaction, so the write lock (SQLite) is
#: held a few tens of milliseconds at most.
BATCH = 2000
#: How long the pass waits for writers of ``entries`` in progress (PostgreSQL) before it indexes
#: what it sees without moving the position past them.
WRITERS_WAIT = 5.0
POSITION = "entries"

# What PostgreSQL indexes of an entry (as migration 0003's generated column did, and 0016's trigger).
PG_VECTOR = ("to_tsvector('dlq_search'::regconfig, "
             "dlq_search_text(e.original_subject, e.error, e.payload, e.payload_available))")
_SQLITE_TEXT = ("e.original_subject, e.error, "
                "CASE WHEN e.payload_available THEN substr(CAST(e.payload AS TEXT), 1, 65536) END")

# Engines whose search index a SearchPass writes: their writes leave it to the pass.
_PASSED: weakref.WeakSet = weakref.WeakSet()


def _p(conn: Connection) -> str:
    return "?" if conn.dialect.name == "sqlite" else "%s"


def _position(conn: Connection, lock: str = "") -> int | None:
    return conn.exec_driver_sql(f"SELECT last_id FROM search_position WHERE name = '{POSITION}'{lock}").scalar()


def search_position(conn: Connection) -> int:
    """The last entry id the search index covers (every older entry is in it)."""
    return _position(conn) or 0


def _move(conn: Connection, last_id: int) -> None:
    conn.exec_driver_sql(f"UPDATE search_position SET last_id = {_p(conn)}, updated_at = CURRENT_TIMESTAMP "
                         f"WHERE name = '{POSITION}'", (last_id,))


def _upper(conn: Connection, after: int, limit: int | None) -> tuple[int | None, int]:
    """The id of the ``limit``-th entry above ``after`` (or of the newest) and how many entries
    that range holds; (None, 0) if there is none."""
    p = _p(conn)
    if limit is None:
        return conn.exec_driver_sql(f"SELECT MAX(id), 0 FROM entries WHERE id > {p}", (after,)).one()
    return tuple(conn.exec_driver_sql(f"SELECT MAX(id), COUNT(*) FROM (SELECT id FROM entries WHERE id > {p} "
                                      f"ORDER BY id LIMIT {p}) AS batch", (after, limit)).one())


def _index_range(conn: Connection, low: int, high: int) -> int:
    """Index the entries with ``low < id <= high`` not indexed yet; return how many."""
    if conn.dialect.name == "sqlite":
        # Exact: writers are serialised and the position says which ids are in the index.
        return conn.exec_driver_sql(
            f"INSERT INTO entries_fts(rowid, subject, error, payload) SELECT e.id, {_SQLITE_TEXT} "
            "FROM entries AS e WHERE e.id > ? AND e.id <= ?", (low, high)).rowcount
    # An entry may be indexed already: by an update's trigger, or by an inline write. NOT EXISTS
    # spares its vector; ON CONFLICT covers one indexed meanwhile.
    return conn.exec_driver_sql(
        f"INSERT INTO entry_search (entry_id, search) SELECT e.id, {PG_VECTOR} FROM entries AS e "
        "WHERE e.id > %s AND e.id <= %s AND NOT EXISTS (SELECT 1 FROM entry_search AS s WHERE s.entry_id = e.id) "
        "ON CONFLICT (entry_id) DO NOTHING", (low, high)).rowcount


# PostgreSQL assigns ids when rows are inserted but shows them when their transaction commits,
# so a lower id may still appear after a higher one was seen (two sources' writers, an advisory
# beside a batch). Every transaction writing entries holds a RowExclusiveLock on the table from
# before it takes an id until it ends: once the ones holding it after the pass saw the newest id
# have ended, no id below that can still appear.
_WRITERS = ("SELECT DISTINCT virtualtransaction FROM pg_locks WHERE relation = 'entries'::regclass "
            "AND mode = 'RowExclusiveLock' AND granted AND pid <> pg_backend_pid()")


def _writers(conn: Connection) -> set[str]:
    return set(conn.exec_driver_sql(_WRITERS).scalars())


def _writers_end(conn: Connection, writers: set[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while writers:
        writers &= _writers(conn)
        if not writers:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@dataclass(frozen=True)
class Indexed:
    """What one run of the pass did: entries indexed, the position after it, and whether more
    may be pending (the run took a whole batch)."""

    entries: int
    position: int
    more: bool = False


def index_pending(engine: Engine, limit: int = BATCH) -> Indexed:
    """Index up to ``limit`` entries above the search position in one transaction and move the
    position past them. Returns what it did (``entries`` 0: nothing was pending)."""
    with write_transaction(engine) as conn:
        sqlite = conn.dialect.name == "sqlite"
        position = _position(conn, "" if sqlite else " FOR UPDATE") or 0  # one pass at a time
        high, count = _upper(conn, position, limit)
        if high is None:
            return Indexed(0, position)
        settled = sqlite or _writers_end(conn, _writers(conn), WRITERS_WAIT)
        made = _index_range(conn, position, high)  # a statement after the writers ended: it sees their rows
        if not settled:
            return Indexed(made, position)
        _move(conn, high)
        return Indexed(made, high, count >= limit)


def index_new_entries(conn: Connection, after_id: int = 0) -> None:
    """Index new entries in ``conn``'s transaction, unless a search pass writes this engine's
    index (the mirror's writer process): every code path that inserts entries calls it.

    On SQLite everything above the position is indexed and the position moved (writers are
    serialised, so that is exact). On PostgreSQL the entries above ``after_id`` are indexed, and
    the position moved only when no other transaction is writing entries (a lower id of one in
    progress would be skipped); the pass takes it further, skipping what is indexed.
    """
    if conn.engine in _PASSED:
        return
    if conn.dialect.name == "sqlite":
        position = _position(conn) or 0
        high, _ = _upper(conn, position, None)
        if high is not None:
            _index_range(conn, position, high)
            _move(conn, high)
        return
    high, _ = _upper(conn, after_id, None)
    if high is None:
        return
    # NOWAIT: a pass holding the position waits for this transaction to end.
    try:
        with conn.begin_nested():
            position = _position(conn, " FOR UPDATE NOWAIT") or 0
    except DBAPIError:  # a pass has it, and waits for this transaction
        position = None
    if position is not None and not _writers(conn):
        _index_range(conn, position, high)
        _move(conn, max(high, position))
    else:
        _index_range(conn, after_id, high)


@dataclass(frozen=True)
class SearchLag:
    """How far search is behind the list: the newest entry indexed (``position``) and how many
    entries are newer (``pending``, counted up to ``cap``; ``more``: there are more)."""

    position: int
    pending: int
    more: bool = False

    def to_dict(self) -> dict:
        return {"indexed_through": self.position, "not_indexed": self.pending, "more": self.more}


def lag_of(conn: Connection, cap: int = 10_000, conditions: tuple = ()) -> SearchLag:
    """The search lag in ``conn``'s transaction: the search position and how many entries newer
    than it (and under ``conditions``, a reader's filter) a search does not find yet, counted up
    to ``cap``."""
    position = search_position(conn)
    # In id order, so that the plan reads the primary key from the position on whatever the
    # server knows of the table: without statistics (a backlog just mirrored, autovacuum not yet
    # come) PostgreSQL guesses a third of the rows above any id, and its plan for
    # ``id > $1 LIMIT $2``, generic or not, walked the whole table to find none: 40 ms a search at
    # 200,000 entries (docs/PERFORMANCE.md "The search lag's count").
    newer = select(Entry.id).where(Entry.id > position, *conditions).order_by(Entry.id).limit(cap + 1)
    pending = conn.execute(select(func.count()).select_from(newer.subquery())).scalar_one()
    return SearchLag(position, min(pending, cap), pending > cap)


def search_lag(engine: Engine, cap: int = 10_000) -> SearchLag:
    """The search lag of every entry (on PostgreSQL a few of the newer ones may be searchable
    already, indexed by a write of their own or an update)."""
    with engine.connect() as conn:
        return lag_of(conn, cap)


class SearchPass:
    """The pass as a thread: it catches up at its start, then runs after each ``poke`` (a write
    committed) and every ``interval`` seconds, in bounded batches, until ``stop``."""

    def __init__(self, engine: Engine, interval: float = 1.0, batch: int = BATCH):
        self.engine = engine
        self.interval = interval
        self.batch = batch
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        _PASSED.add(engine)

    def start(self) -> "SearchPass":
        self._thread = threading.Thread(target=self._run, name="search-pass", daemon=True)
        self._thread.start()
        return self

    def poke(self) -> None:
        """Something was written: run soon."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        failures = FailureLog(log, "the search pass", again="the search pass indexes again")
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                while not self._stopping.is_set() and index_pending(self.engine, self.batch).more:
                    pass  # behind: the next batch at once
                failures.worked()
            except Exception as exc:  # the database is away: the position stays, the next run resumes
                failures.failed(exc)
            self._wake.wait(self.interval)
