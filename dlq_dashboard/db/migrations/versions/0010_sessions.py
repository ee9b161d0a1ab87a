"""Sessions kept in the database: logout ends one session, not every session of the user.

Each login is a row; the cookie carries a random key whose SHA-256 is the row's id. The
users' session generation (raised at logout, which ended every session) is gone.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Dropped before the new table refers to users: on SQLite the batch copies the table.
    with op.batch_alter_table("users") as batch:
        batch.drop_column("session_generation")
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("last_seen_at", sa.DateTime, nullable=False),
        sa.Column("ended_at", sa.DateTime, nullable=True),
    )
    op.create_index("ix_sessions_user_id", "sessions", ["user_id"])
    op.create_index("ix_sessions_last_seen_at", "sessions", ["last_seen_at"])


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
