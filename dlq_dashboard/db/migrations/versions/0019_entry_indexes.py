"""v19, fewer index entries a write of an entry: every insert by the mirror and, on PostgreSQL,
every status change (an entry's UPDATE writes a new entry into each of its table's indexes).

- ix_entries_status_reason goes: /metrics was its one reader (entries by status and reason at
  every scrape, a walk of the whole index), and now reads the counts kept by failure group.
- ix_entries_replay_of holds only the entries that have a replay_of (a republished message that
  failed again): its readers always ask for a value, which such a partial index answers, and
  most entries have none.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_entries_status_reason", table_name="entries")
    op.drop_index("ix_entries_replay_of", table_name="entries")
    op.create_index("ix_entries_replay_of", "entries", ["replay_of"], sqlite_where=sa.text("replay_of IS NOT NULL"),
                    postgresql_where=sa.text("replay_of IS NOT NULL"))


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
