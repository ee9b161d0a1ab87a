"""v7, retention: the audit keeps naming entries that a purge removed (its foreign key to
entries is dropped), a record of each purge (purges), an index the purge reads resolved
entries by (status, then when they were resolved), and bulk items found by entry.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# SQLite names no foreign key; batch mode finds this one by the name this convention gives it.
_SQLITE_NAMES = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        # SQLite cannot drop a constraint: batch mode copies the table without it.
        with op.batch_alter_table("actions", naming_convention=_SQLITE_NAMES, recreate="always") as batch:
            batch.drop_constraint("fk_actions_entry_id_entries", type_="foreignkey")
    else:
        for fk in sa.inspect(bind).get_foreign_keys("actions"):
            if fk["referred_table"] == "entries":
                op.drop_constraint(fk["name"], "actions", type_="foreignkey")

    # The purge ages a resolved entry by updated_at (set by the close or republish that
    # resolved it); a database of an older release may have left it empty.
    entries = sa.table("entries", sa.column("status"), sa.column("updated_at", sa.DateTime),
                       sa.column("closed_at", sa.DateTime), sa.column("received_at", sa.DateTime))
    op.execute(sa.update(entries).where(entries.c.updated_at.is_(None))
               .values(updated_at=sa.func.coalesce(entries.c.closed_at, entries.c.received_at)))
    op.create_index("ix_entries_status_updated", "entries", ["status", "updated_at", "id"])
    # Deleting an entry looks up its bulk items by entry (the foreign key's check and the
    # purge's "no pending item" test); the key (job_id, entry_id) cannot serve that.
    op.create_index("ix_job_items_entry_id", "job_items", ["entry_id"])

    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "purges",
        sa.Column("id", big_id, primary_key=True),
        sa.Column("started_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("older_than", big_id, nullable=False),
        sa.Column("republished", big_id, nullable=False),
        sa.Column("closed", big_id, nullable=False),
        sa.Column("messages_deleted", big_id, nullable=False),
        sa.Column("deferred", big_id, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
