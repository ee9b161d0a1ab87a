"""Key fields stored at ingest (issue 27): key_fields (each configured label and pointer, and how
far its backfill has come) and entry_fields (field, value, entry), so that a ``field.<label>``
filter and its summary look values up instead of reading every payload. Empty at first: the
dashboard records DLQ_LIST_FIELDS when its mirror starts, and fills older entries in batches
(ingest/key_fields.py); until then the filter reads the payloads it has not filled. A deleted
entry's values go with it (a trigger).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "key_fields",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("label", sa.String(255), nullable=False),
        sa.Column("pointer", sa.String(1024), nullable=False),
        sa.Column("pending_below", BIG, nullable=False, server_default="0"),
        sa.Column("retired", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.create_table(
        "entry_fields",
        sa.Column("field_id", sa.Integer, nullable=False),
        sa.Column("value", sa.String(256), nullable=False),
        sa.Column("entry_id", BIG, nullable=False),
        sa.PrimaryKeyConstraint("field_id", "value", "entry_id"),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_entry_fields_entry", "entry_fields", ["entry_id"])
    # A deleted entry (the purge) takes its values with it. A trigger rather than a foreign key,
    # which would check every insert of the mirror; on PostgreSQL once a statement, over the
    # deleted rows together.
    if op.get_bind().dialect.name == "sqlite":
        op.execute("CREATE TRIGGER entry_fields_delete AFTER DELETE ON entries BEGIN "
                   "DELETE FROM entry_fields WHERE entry_id = old.id; END")
    else:
        op.execute("CREATE FUNCTION entry_fields_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                   "DELETE FROM entry_fields WHERE entry_id IN (SELECT id FROM gone); RETURN NULL; END $$")
        op.execute("CREATE TRIGGER entry_fields_delete AFTER DELETE ON entries REFERENCING OLD TABLE AS gone "
                   "FOR EACH STATEMENT EXECUTE FUNCTION entry_fields_delete()")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS entry_fields_delete")
    else:
        op.execute("DROP TRIGGER IF EXISTS entry_fields_delete ON entries")
        op.execute("DROP FUNCTION IF EXISTS entry_fields_delete()")
    op.drop_table("entry_fields")
    op.drop_table("key_fields")
