"""v33, SQLite gives no id twice: entries, failure groups, their activity, alerts and saved views
are AUTOINCREMENT tables, the next id above every id ever used; a search index missing entries is
rebuilt.

An ``INTEGER PRIMARY KEY`` without AUTOINCREMENT takes the largest id stored plus one: once the
retention purge had removed the newest entries, the next dead letter got the id of one purged.
The search pass took it as indexed already (its position only grows), so it was never found; the
search index's delete trigger then told the index to remove text it never held, which corrupted
it ("database disk image is malformed": every purge after failed); the audit kept under the purged
entry's id showed on the new one; and a page read before the purge acted on the new entry with
the old one's id and version. A group merged away (ingest/merge.py), an alert or an activity row
forgotten, a saved view deleted gave their ids again the same way, to rows that links, alerts,
activity and saved views (``group=``) name. PostgreSQL's sequences never give an id twice: nothing
changes there.

Each table is copied by batch mode (as 0031 did), the triggers on them and the search index's
view of it made again as they were; ``sqlite_sequence`` is set to the largest id stored anywhere
that names the table's rows (the audit, job items, intents, key fields, the search position for
entries; entries, activity, alerts, arrivals and saved views for groups), so an id a purge already
removed is not given either. A database where ids were given twice has entries at or below the
search position that the index lacks (``entries_fts_docsize`` has a row for each entry indexed),
or an index that was told to remove one of them (it counts fewer rows than it holds): its index
is rebuilt from the entries, and the position set to the newest entry.

The rows an earlier holder of an id left under it (its audit records, and the job items and
republish intents a purge that deleted rows by hand did not take) are told from the entry's own
by their time: written before the entry existed (its received_at, the arrival of its first
report, advisory or DLQ copy). They are moved to a new id of their own, one for each id given
twice, that no entry holds or will hold: they read as those of an entry the purge removed (the
audit lists them; DLQ_MASK hides their texts, access/unread.py) and no longer show on the new
entry. The new ids are above every id used, and ``sqlite_sequence`` above them.

Revision ID: 0033
Revises: 0032
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from alembic import op
from sqlalchemy import text

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

#: Each table made AUTOINCREMENT, with the columns elsewhere that hold its ids.
TABLES = {
    "entries": ("entries.id", "actions.entry_id", "job_items.entry_id", "republishes.entry_id",
                "entry_fields.entry_id", "search_position.last_id", "key_fields.pending_below"),
    "failure_groups": ("failure_groups.id", "entries.group_id", "group_activity.group_id", "alerts.group_id",
                       "arrivals.group_id"),
    "group_activity": ("group_activity.id",),
    "alerts": ("alerts.id",),
    "saved_views": ("saved_views.id",),
}


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    # The triggers on a table go with the copy batch mode replaces it by, and a view reading it
    # (the search index's entries_search_text) would refuse the copy's rename: made again after.
    views = bind.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY name").all()
    for name, _ in views:
        bind.exec_driver_sql(f'DROP VIEW "{name}"')
    triggers = list(bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN "
        f"({', '.join(repr(t) for t in TABLES)}) ORDER BY name").scalars())
    seeds = {table: _largest(bind, table, columns) for table, columns in TABLES.items()}
    seeds["entries"] = _detach_earlier_holders(bind, seeds["entries"])
    for table in TABLES:
        with op.batch_alter_table(table, recreate="always", table_kwargs={"sqlite_autoincrement": True}):
            pass
    for sql in [sql for _, sql in views] + triggers:
        bind.exec_driver_sql(sql)
    for table, seed in seeds.items():
        bind.exec_driver_sql("DELETE FROM sqlite_sequence WHERE name = ?", (table,))
        bind.exec_driver_sql("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, seed))
    _repair_search_index(bind)


def _largest(bind, table: str, columns: tuple[str, ...]) -> int:
    found = [bind.exec_driver_sql(f"SELECT COALESCE(MAX({c.split('.')[1]}), 0) FROM {c.split('.')[0]}").scalar()
             for c in columns]
    if table == "failure_groups":  # a saved view of the list or the groups page filtered by group
        for (query,) in bind.exec_driver_sql("SELECT query FROM saved_views WHERE query LIKE '%group=%'"):
            found += [int(v) for k, v in parse_qsl(query or "") if k == "group" and v.isdigit()]
    return max(int(n or 0) for n in found)


#: When an entry began to exist: its first report's arrival (an advisory's entry merged with its
#: DLQ copy later keeps the advisory's received_at; dlq_received_at is the copy's).
_FIRST = ("MIN(julianday(e.received_at), COALESCE(julianday(e.dlq_received_at), julianday(e.received_at)))")
#: The rows keyed by entry id, each with the time it was written (a job item's is its job's).
_KEYED = {
    "actions": "SELECT 1 FROM actions AS r WHERE r.entry_id = e.id AND julianday(r.at) < {first}",
    "republishes": "SELECT 1 FROM republishes AS r WHERE r.entry_id = e.id AND julianday(r.created_at) < {first}",
    "job_items": "SELECT 1 FROM job_items AS r JOIN jobs AS j ON j.id = r.job_id "
                 "WHERE r.entry_id = e.id AND julianday(j.created_at) < {first}",
}


def _detach_earlier_holders(bind, largest: int) -> int:
    """Move the rows written under an entry's id before the entry existed (an earlier holder's,
    purged) to a new id above ``largest``, one for each such entry; the largest id given."""
    held = bind.exec_driver_sql(
        "SELECT e.id FROM entries AS e WHERE "
        + " OR ".join(f"EXISTS ({sql.format(first=_FIRST)})" for sql in _KEYED.values())
        + " ORDER BY e.id").scalars().all()
    for entry_id in held:
        largest += 1
        first = f"(SELECT {_FIRST} FROM entries AS e WHERE e.id = :entry)"
        bind.execute(text(f"UPDATE actions SET entry_id = :new WHERE entry_id = :entry AND julianday(at) < {first}"),
                     {"new": largest, "entry": entry_id})
        bind.execute(text(f"UPDATE republishes SET entry_id = :new WHERE entry_id = :entry "
                          f"AND julianday(created_at) < {first}"), {"new": largest, "entry": entry_id})
        bind.execute(text(f"UPDATE job_items SET entry_id = :new WHERE entry_id = :entry AND job_id IN "
                          f"(SELECT id FROM jobs WHERE julianday(created_at) < {first})"),
                     {"new": largest, "entry": entry_id})
    return largest


def _repair_search_index(bind) -> None:
    position = bind.exec_driver_sql("SELECT last_id FROM search_position WHERE name = 'entries'").scalar() or 0
    # An entry the position covers that the index lacks (an id given again): a join of integer keys.
    missing = bind.exec_driver_sql(
        "SELECT EXISTS (SELECT 1 FROM entries AS e WHERE e.id <= ? AND NOT EXISTS "
        "(SELECT 1 FROM entries_fts_docsize AS d WHERE d.id = e.id))", (position,)).scalar()
    # The index told to remove an entry it never held (the delete trigger, for such an entry) counts
    # one row fewer than it has: the row count its averages record starts with against its rows.
    averages = bind.exec_driver_sql("SELECT block FROM entries_fts_data WHERE id = 1").scalar()
    rows = bind.exec_driver_sql("SELECT COUNT(*) FROM entries_fts_docsize").scalar()
    if missing or (averages is not None and _varint(averages) != rows):
        bind.exec_driver_sql("INSERT INTO entries_fts(entries_fts) VALUES ('rebuild')")  # every entry stored
        bind.exec_driver_sql("UPDATE search_position SET last_id = (SELECT COALESCE(MAX(id), 0) FROM entries), "
                             "updated_at = CURRENT_TIMESTAMP WHERE name = 'entries'")


def _varint(data: bytes) -> int:
    """The first of SQLite's variable-length integers in ``data`` (FTS5 writes its counts so)."""
    value = 0
    for i, byte in enumerate(data[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    return value


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
