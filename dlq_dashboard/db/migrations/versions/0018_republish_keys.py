"""v18, a bulk republish's writes: no foreign keys from republishes and job_items to entries and
jobs, and room in job_items' pages for their items' results.

- A foreign key is checked one row at a time (on PostgreSQL a query and a lock on the entry's
  row for each intent and each bulk item; on SQLite a lookup each): 9 us of the server's CPU
  an intent, and twice that a bulk item, measured. Every writer of these rows has just read the
  entries (or the job) it names in the same transaction, and the purge deletes an entry's
  intents and items with it (actions/purge.py), as it keeps the audit, whose key 0007 dropped.
- job_items on PostgreSQL: fillfactor 50, so that an item's move out of pending (its state, no
  index holds it) is written beside the row, without a new entry in each of its indexes.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# SQLite names no foreign key; batch mode finds these by the names this convention gives them.
_SQLITE_NAMES = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}
#: (table, the column holding the key, the table it refers to)
_KEYS = [("republishes", "entry_id", "entries"), ("job_items", "job_id", "jobs"), ("job_items", "entry_id", "entries")]


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        # SQLite cannot drop a constraint: batch mode copies each table without it.
        for table in ("republishes", "job_items"):
            with op.batch_alter_table(table, naming_convention=_SQLITE_NAMES, recreate="always") as batch:
                for name, column, referred in _KEYS:
                    if name == table:
                        batch.drop_constraint(f"fk_{table}_{column}_{referred}", type_="foreignkey")
        return
    for table in ("republishes", "job_items"):
        for fk in sa.inspect(bind).get_foreign_keys(table):
            if (table, fk["constrained_columns"][0], fk["referred_table"]) in _KEYS:
                op.drop_constraint(fk["name"], table, type_="foreignkey")
    # Only pages written from now on keep the room; a job's items are new pages.
    op.execute("ALTER TABLE job_items SET (fillfactor = 50)")


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
