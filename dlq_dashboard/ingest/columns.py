"""A parsed batch of DLQ messages written as it crosses the pipe, one tuple a row, without a dict
a row: the writer process's part of the mirror (writer.py ``ingest_dlq_parsed``).

The writer is the mirror's bottleneck; on SQLite a batch that no advisory's entry waits for (one
look at the partial index ``ix_entries_advisory_only``, as ``merge_into_advisory_entries`` looks)
is grouped, counted and inserted a column at a time, loops Python runs in C. Anything else (a
merge to make, PostgreSQL, a batch the database refuses and writes a message at a time) takes
``writes.ingest_dlq_rows``'s way with the same rows as dicts. Both commit the same rows, counts,
triage and alerts with the position, in one transaction.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from functools import partial

from sqlalchemy import Connection, Engine, func, select

from ..alerts.outbox import AlertRule, raise_alerts
from ..db.counts import Change, count_changes, group_ids, group_of
from ..db.engine import write_transaction
from ..db.models import Entry
from ..db.rows import insert_columns
from ..db.triage import apply_arrivals
from ..scopes import DEFAULT_SOURCE
from ..teams import Team
from ..times import utcnow
from .key_fields import fill_key_fields
from .search_index import index_new_entries
from .writes import (_COLUMNS, ENTRIES, _apart_if_refused, _check_position, _save_position, _stored,
                     _write_dlq_rows, _write_rows, count_new_entries)


def ingest_dlq_parsed(engine: Engine, stream: str, epoch: str, names: tuple[str, ...], values: list[tuple],
                      last_seq: int, after: int | None = None, alerts: AlertRule | None = None,
                      teams: tuple[Team, ...] = (), source: str = DEFAULT_SOURCE) -> int:
    """``writes.ingest_dlq_rows`` of a batch given as column ``names`` and one tuple a row
    (``writes.dlq_values``); how many new entries it made."""
    if not values:
        return 0
    return _apart_if_refused(partial(_write, engine, stream, epoch, names, values, last_seq, after, alerts, teams,
                                     source), stream, last_seq)


def _write(engine: Engine, stream: str, epoch: str, names: tuple[str, ...], values: list[tuple], last_seq: int,
           after: int | None, alerts: AlertRule | None, teams: tuple[Team, ...], source: str, *, apart: bool) -> int:
    if apart or engine.dialect.name != "sqlite" or not set(_COLUMNS) - {"group_id"} <= set(names):
        return _write_dlq_rows(engine, stream, epoch, [dict(zip(names, row)) for row in values], last_seq, after,
                               alerts, teams, source, apart=apart)
    now = utcnow()
    with write_transaction(engine) as conn:
        _check_position(conn, source, stream, epoch, after)
        new_groups: set[int] | None = set() if alerts is not None else None
        if _advisory_entries_wait(conn):  # the rows' way (``_write_dlq_rows``'s), which merges
            rows = [dict(zip(names, row)) for row in values]
            made, arrived = _write_rows(conn, rows, new_groups, teams, source)
            stored = _stored(rows)
        else:
            made, arrived, stored = _write_columns(conn, names, values, new_groups, teams, source)
        moved = apply_arrivals(conn, arrived, now, stored)
        if alerts is not None:
            raise_alerts(conn, alerts, new_groups, arrived, now, moved)
        _save_position(conn, source, stream, epoch, last_seq)
    return max(made, 0)


def _advisory_entries_wait(conn: Connection) -> bool:
    """Whether an entry made from an advisory alone may take a DLQ copy (merge.py's first look)."""
    return conn.execute(select(Entry.id).where(Entry.dlq_seq.is_(None), Entry.original_stream.is_not(None))
                        .limit(1)).first() is not None


def _write_columns(conn: Connection, names: tuple[str, ...], values: list[tuple], new_groups: set[int] | None,
                   teams: tuple[Team, ...], source: str) -> tuple[int, dict[int, int], dict[int, datetime]]:
    """Insert the rows in ``conn``'s transaction: (entries made, arrivals by group, when the stream
    stored the latest of each group's rows), as ``writes._write_rows`` and ``writes._stored``."""
    column = dict(zip(names, zip(*values)))
    named = list(zip(column["original_subject"], column["reason"], column["group_key"]))
    ids = group_ids(conn, {group_of(*n) for n in set(named)}, made=new_groups, teams=teams, source=source)
    id_of = {n: ids[group_of(*n)] for n in set(named)}
    column["group_id"] = group_col = tuple(map(id_of.__getitem__, named))
    newest = conn.execute(select(func.coalesce(func.max(Entry.id), 0))).scalar()
    # payload_opaque is named only for a batch holding such a payload, as in _write_rows.
    written = _COLUMNS + ["payload_opaque"] if any(column.get("payload_opaque", ())) else _COLUMNS
    made = insert_columns(conn, ENTRIES, written, [column[name] for name in written], skip_duplicates=True)
    index_new_entries(conn, newest)  # in the writer process the search pass does it, behind
    fill_key_fields(conn, newest)
    if made == len(values):  # every row is a new entry: counted as they are
        arrived = count_changes(conn, [Change(None, group_id, received_at, None, status, n)
                                       for (group_id, received_at, status), n in
                                       Counter(zip(group_col, column["received_at"], column["status"])).items()])
    else:
        arrived = count_new_entries(conn, newest)
    latest: dict[int, datetime] = {}
    for group_id, stored_at, failed_at in zip(group_col, column["stored_at"], column["failed_at"]):
        at = stored_at or failed_at
        if at is not None and (group_id not in latest or at > latest[group_id]):
            latest[group_id] = at
    return made, dict(+Counter(arrived)), latest  # as _write_rows: groups that received none left out
