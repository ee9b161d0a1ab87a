"""v3, for several replicas, PostgreSQL and a million entries: failure groups as rows with their
counts kept (failure_groups, arrivals), each entry's group chosen once (old entries grouped and
counted here; the entry_groups cache dropped), failed logins in the database (every replica
counts them), and on PostgreSQL 64-bit ids and sequences and a full-text index.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dlq_dashboard.db.counts import Change, count_changes, group_ids, group_of
from dlq_dashboard.ingest.grouping import error_group

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

BATCH = 5000
# (table, column, is the table's id): 64-bit on PostgreSQL, where 0001 made them 32-bit.
_WIDENED = [("entries", "id", True), ("entries", "dlq_seq", False), ("entries", "original_seq", False),
            ("events", "id", True), ("events", "original_seq", False),
            ("actions", "id", True), ("actions", "entry_id", False), ("actions", "job_id", False),
            ("actions", "publish_seq", False),
            ("republishes", "id", True), ("republishes", "entry_id", False), ("republishes", "job_id", False),
            ("republishes", "seq", False),
            ("jobs", "id", True), ("job_items", "job_id", False), ("job_items", "entry_id", False),
            ("mirror_state", "last_seq", False)]

# What PostgreSQL searches, as SQLite does: subject, error and the first 64 Ki characters of the
# payload, cut into words as SQLite's unicode61 tokenizer cuts them (every run of letters, digits
# and '_'). A payload that is not UTF-8 still gives its ASCII words (its bytes escaped); a cut
# through a multibyte character is moved back to the character's start.
_SEARCH_TEXT = r"""
CREATE FUNCTION dlq_search_text(subject text, error text, payload bytea, available boolean)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  body text;
BEGIN
  IF available AND payload IS NOT NULL THEN
    FOR cut IN 0..3 LOOP
      BEGIN
        body := left(convert_from(substring(payload FROM 1 FOR 262144 - cut), 'UTF8'), 65536);
        EXIT;
      EXCEPTION WHEN others THEN
        body := NULL;
      END;
    END LOOP;
    IF body IS NULL THEN
      body := encode(substring(payload FROM 1 FOR 65536), 'escape');
    END IF;
  END IF;
  RETURN regexp_replace(coalesce(subject, '') || ' ' || coalesce(error, '') || ' ' || coalesce(body, ''),
                        '[^[:alnum:]_]+', ' ', 'g');
END $$
"""


def upgrade() -> None:
    bind = op.get_bind()
    postgresql = bind.dialect.name == "postgresql"
    if postgresql:
        for table, column, is_id in _WIDENED:
            op.alter_column(table, column, type_=sa.BigInteger(), existing_type=sa.Integer())
            if is_id:
                op.execute(f"ALTER SEQUENCE {table}_id_seq AS bigint")

    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "failure_groups",
        sa.Column("id", big_id, primary_key=True),
        sa.Column("subject", sa.String(1024), nullable=False),
        sa.Column("reason", sa.String(255), nullable=False),
        sa.Column("key", sa.String(300), nullable=False),
        sa.Column("open_count", big_id, nullable=False),
        sa.Column("republished_count", big_id, nullable=False),
        sa.Column("closed_count", big_id, nullable=False),
        sa.Column("first_seen", sa.DateTime),
        sa.Column("last_seen", sa.DateTime),
        sa.UniqueConstraint("subject", "reason", "key", name="uq_failure_groups"),
    )
    op.create_table(
        "arrivals",
        sa.Column("width", sa.Integer, primary_key=True),
        sa.Column("bucket", sa.DateTime, primary_key=True),
        sa.Column("group_id", big_id, primary_key=True),
        sa.Column("status", sa.String(16), primary_key=True),
        sa.Column("count", big_id, nullable=False),
        sqlite_with_rowid=False,
    )
    op.add_column("entries", sa.Column("group_id", big_id))
    _group_existing_entries(bind)
    op.create_index("ix_entries_group_id", "entries", ["group_id", "id"])
    # /groups read this cache of keys; an entry's group is now chosen when it is written.
    op.drop_table("entry_groups")

    op.create_table(
        "login_failures",
        sa.Column("id", big_id, primary_key=True),
        sa.Column("key", sa.String(300), nullable=False),
        sa.Column("at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_login_failures_key_at", "login_failures", ["key", "at"])

    if postgresql:
        _search_index(bind)


def _group_existing_entries(bind) -> None:
    """Group and count the entries of an older database, as the mirror does new ones."""
    entries = sa.table("entries", sa.column("id"), sa.column("original_subject"), sa.column("reason"),
                       sa.column("error"), sa.column("schema_errors"), sa.column("received_at", sa.DateTime),
                       sa.column("status"), sa.column("group_id"))
    after = 0
    while True:
        rows = bind.execute(sa.select(entries.c.id, entries.c.original_subject, entries.c.reason, entries.c.error,
                                      entries.c.schema_errors, entries.c.received_at, entries.c.status)
                            .where(entries.c.id > after).order_by(entries.c.id).limit(BATCH)).all()
        if not rows:
            return
        named = {r.id: group_of(r.original_subject, r.reason, error_group(r.error, r.schema_errors)) for r in rows}
        ids = group_ids(bind, named.values())
        bind.execute(sa.update(entries).where(entries.c.id == sa.bindparam("b_id"))
                     .values(group_id=sa.bindparam("b_group")),
                     [{"b_id": r.id, "b_group": ids[named[r.id]]} for r in rows])
        count_changes(bind, [Change(None, ids[named[r.id]], r.received_at, None, r.status) for r in rows])
        after = rows[-1].id


def _search_index(bind) -> None:
    op.execute("CREATE TEXT SEARCH CONFIGURATION dlq_search (COPY = pg_catalog.simple)")
    # Diacritics are ignored as on SQLite where the server has unaccent (a trusted extension
    # since PostgreSQL 13); without it the search still works, accents included.
    savepoint = bind.begin_nested()
    try:
        bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS unaccent")
        bind.exec_driver_sql("ALTER TEXT SEARCH CONFIGURATION dlq_search "
                             "ALTER MAPPING FOR word, hword, hword_part WITH unaccent, simple")
        savepoint.commit()
    except sa.exc.DBAPIError:
        savepoint.rollback()
    op.execute(_SEARCH_TEXT)
    op.execute("ALTER TABLE entries ADD COLUMN search tsvector GENERATED ALWAYS AS "
               "(to_tsvector('dlq_search'::regconfig, "
               "dlq_search_text(original_subject, error, payload, payload_available))) STORED")
    op.execute("CREATE INDEX ix_entries_search ON entries USING gin (search)")


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
