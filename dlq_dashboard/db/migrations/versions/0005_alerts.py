"""Alerts: an outbox of webhook deliveries (group.new, group.spike), written in the transaction
that raised them and sent after, one row a URL.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    big = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "alerts",
        sa.Column("id", big, primary_key=True),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("group_id", big, nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=False),
        sa.Column("sent_at", sa.DateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.UniqueConstraint("event_id", "url", name="uq_alerts_event_url"),
    )
    op.create_index("ix_alerts_due", "alerts", ["next_attempt_at"], sqlite_where=sa.text("sent_at IS NULL"),
                    postgresql_where=sa.text("sent_at IS NULL"))
    op.create_index("ix_alerts_group_event", "alerts", ["group_id", "event", "created_at"])


def downgrade() -> None:
    op.drop_table("alerts")
