"""The search index written by a pass of its own behind the mirror (ingest/search_index.py).

- search_position: one row, the last entry id the pass has indexed; every older entry is in the
  index. Set to the newest entry here: an existing database's entries are all indexed already.
- PostgreSQL: the search vector leaves ``entries`` for ``entry_search(entry_id, search)`` with
  the GIN index (the vectors of existing rows move with it), so the mirror's INSERT and every
  UPDATE of an entry (a republish, a close, a bulk job) no longer compute ``to_tsvector``.
  Triggers keep an indexed entry's vector true when its subject, error or payload change, and
  remove it with the entry.
- SQLite: the FTS5 table becomes an external-content one over the view ``entries_search_text``
  (it no longer stores a copy of the text) and is rebuilt from it. Its update and delete
  triggers touch only entries the pass has indexed already (a newer entry is indexed by the
  pass as it then reads).

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# The same vector as ingest/search_index.py PG_VECTOR, of the trigger's NEW row.
_PG_TRIGGER = """
CREATE FUNCTION dlq_entry_search_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- An upsert, not an UPDATE: a pass indexing this entry concurrently read it before this change
  -- (its insert then does nothing), or has not committed yet (this waits for it, then updates).
  INSERT INTO entry_search (entry_id, search)
  VALUES (NEW.id, to_tsvector('dlq_search'::regconfig,
                              dlq_search_text(NEW.original_subject, NEW.error, NEW.payload, NEW.payload_available)))
  ON CONFLICT (entry_id) DO UPDATE SET search = EXCLUDED.search;
  RETURN NULL;
END $$
"""

def upgrade() -> None:
    bind = op.get_bind()
    op.create_table(
        "search_position",
        sa.Column("name", sa.String(40), primary_key=True),
        sa.Column("last_id", BIG, nullable=False),
        sa.Column("updated_at", sa.DateTime),
    )
    op.execute("INSERT INTO search_position (name, last_id, updated_at) "
               "SELECT 'entries', COALESCE(MAX(id), 0), CURRENT_TIMESTAMP FROM entries")
    if bind.dialect.name == "postgresql":
        # No foreign key: its check, a lookup of the entry a row, was 10-20 µs of the server's CPU
        # a row in the pass (bench/bench_search_pass.py); a removed entry's vector goes by trigger.
        op.execute("CREATE TABLE entry_search (entry_id bigint PRIMARY KEY, search tsvector NOT NULL)")
        op.execute("INSERT INTO entry_search (entry_id, search) SELECT id, search FROM entries")
        op.execute("CREATE INDEX ix_entry_search_search ON entry_search USING gin (search)")
        op.execute("DROP INDEX ix_entries_search")
        op.execute("ALTER TABLE entries DROP COLUMN search")
        op.execute(_PG_TRIGGER)
        op.execute("CREATE FUNCTION dlq_entry_search_delete() RETURNS trigger LANGUAGE plpgsql AS $$ "
                   "BEGIN DELETE FROM entry_search WHERE entry_id = OLD.id; RETURN NULL; END $$")
        op.execute("CREATE TRIGGER entry_search_delete AFTER DELETE ON entries FOR EACH ROW "
                   "EXECUTE FUNCTION dlq_entry_search_delete()")
        op.execute("CREATE TRIGGER entry_search_update AFTER UPDATE OF original_subject, error, payload, "
                   "payload_available ON entries FOR EACH ROW WHEN ("
                   "OLD.original_subject IS DISTINCT FROM NEW.original_subject OR OLD.error IS DISTINCT FROM NEW.error "
                   "OR OLD.payload_available IS DISTINCT FROM NEW.payload_available "
                   "OR OLD.payload IS DISTINCT FROM NEW.payload) EXECUTE FUNCTION dlq_entry_search_update()")
    else:
        _sqlite_external_content()


def _sqlite_external_content() -> None:
    # The FTS5 table reads its text from a view of entries instead of keeping a copy of it: the
    # pass writes a quarter less (measured, docs/PERFORMANCE.md) and the file holds the text once.
    # The queries fts_query makes (phrases of a quoted word's tokens) need detail=full, kept.
    for trigger in ("entries_fts_insert", "entries_fts_update", "entries_fts_delete"):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.execute("DROP TABLE IF EXISTS entries_fts")
    op.execute(f"CREATE VIEW entries_search_text AS SELECT id, {_indexed('')} FROM entries")
    op.execute("CREATE VIRTUAL TABLE entries_fts USING fts5(subject, error, payload, "
               "tokenize='unicode61 remove_diacritics 2', content='entries_search_text', content_rowid='id')")
    op.execute("INSERT INTO entries_fts(entries_fts) VALUES ('rebuild')")  # every entry: the position is the newest
    # Only an entry the pass has indexed is taken out (an external-content index is told the old
    # text, and told wrong it would be corrupted); a newer one is indexed by the pass as it then
    # reads. SQLite serialises writers, so the position read here is exact.
    indexed = "old.id <= (SELECT last_id FROM search_position WHERE name = 'entries')"
    remove = ("INSERT INTO entries_fts(entries_fts, rowid, subject, error, payload) "
              f"VALUES ('delete', old.id, {_indexed('old.', named=False)});")
    op.execute("CREATE TRIGGER entries_fts_update AFTER UPDATE OF original_subject, error, payload, "
               f"payload_available ON entries WHEN {indexed} BEGIN {remove} "
               f"INSERT INTO entries_fts(rowid, subject, error, payload) VALUES (new.id, {_indexed('new.', named=False)}); "
               "END")
    op.execute(f"CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries WHEN {indexed} BEGIN {remove} END")


def _indexed(row: str, named: bool = True) -> str:
    """What SQLite indexes of an entry: its subject, error and the first 64 KiB of its payload
    (as ingest/search_index.py's pass reads them)."""
    columns = [f"{row}original_subject", f"{row}error",
               f"CASE WHEN {row}payload_available THEN substr(CAST({row}payload AS TEXT), 1, 65536) END"]
    if named:
        columns = [f"{c} AS {n}" for c, n in zip(columns, ("subject", "error", "payload"))]
    return ", ".join(columns)


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
