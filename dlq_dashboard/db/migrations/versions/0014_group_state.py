"""Triage (SPEC section 11): a failure group's shared state and its activity log.

- failure_groups.state (``open``, ``investigating``, ``resolved``, ``ignored``, ``regressed``;
  every group is ``open`` at first), assignee, resolved_in, ignored_until, ignored_until_count
  with ignored_seen (the failures counted since it was ignored), version (raised by every state
  change), state_changed_at and note_count; an index on state for the groups filtered by it.
- group_activity: a group's state changes, notes and the bulk jobs over it, each with its time
  and actor (the alerts sent are read from ``alerts``).

Revision ID: 0014
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("failure_groups") as batch:
        batch.add_column(sa.Column("state", sa.String(16), nullable=False, server_default="open"))
        batch.add_column(sa.Column("assignee", sa.String(255), nullable=True))
        batch.add_column(sa.Column("resolved_in", sa.String(255), nullable=True))
        batch.add_column(sa.Column("ignored_until", sa.DateTime, nullable=True))
        batch.add_column(sa.Column("ignored_until_count", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                                   nullable=True))
        batch.add_column(sa.Column("ignored_seen", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                                   nullable=False, server_default="0"))
        batch.add_column(sa.Column("version", sa.Integer, nullable=False, server_default="1"))
        batch.add_column(sa.Column("state_changed_at", sa.DateTime, nullable=True))
        batch.add_column(sa.Column("note_count", sa.Integer, nullable=False, server_default="0"))
    op.create_index("ix_failure_groups_state", "failure_groups", ["state", "assignee"])
    op.create_table(
        "group_activity",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("group_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.DateTime, nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=True),
        sa.Column("text", sa.Text, nullable=True),
        sa.Column("detail", sa.Text, nullable=False, server_default="{}"),
    )
    op.create_index("ix_group_activity_group", "group_activity", ["group_id", "id"])


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
