"""v2, what the first release added after its baseline: three indexes, the mirror indexing new
entries for search itself, and the failure-group table.

A database made by the first release already has some of this (its start created today's
tables then), so every step checks first.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_INDEXES = {
    # Entries made from an advisory alone, waiting for their DLQ copy: the mirror looks every
    # batch up in this small index instead of the whole table.
    "ix_entries_advisory_only": (["original_stream", "original_seq"], "dlq_seq IS NULL"),
    # /metrics counts entries by status and reason at every scrape.
    "ix_entries_status_reason": (["status", "reason"], None),
    # "this is a republish of <stream>:<seq>" looks an entry up without its epoch.
    "ix_entries_dlq_ref": (["dlq_stream", "dlq_seq"], None),
}


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    existing = {index["name"] for index in inspector.get_indexes("entries")}
    for name, (columns, where) in _INDEXES.items():
        if name not in existing:
            partial = {"sqlite_where": sa.text(where), "postgresql_where": sa.text(where)} if where else {}
            op.create_index(name, "entries", columns, **partial)

    if bind.dialect.name == "sqlite":
        # The mirror adds a batch's new entries to the full-text index with one set-based
        # INSERT (twice the rows a second of a per-row trigger, measured); with the trigger
        # too, every entry would be indexed twice.
        op.execute("DROP TRIGGER IF EXISTS entries_fts_insert")

    if not inspector.has_table("entry_groups"):
        op.create_table(
            "entry_groups",
            sa.Column("entry_id", sa.Integer, primary_key=True),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("key", sa.String(300), nullable=False),
        )


def downgrade() -> None:
    op.drop_table("entry_groups")
    for name in _INDEXES:
        op.drop_index(name, "entries")
