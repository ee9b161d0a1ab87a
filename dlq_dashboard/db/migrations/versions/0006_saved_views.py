"""Saved views: the filters of the list or the groups page under a name, per person, shared by
an admin with everyone.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "saved_views",
        sa.Column("id", big_id, primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("page", sa.String(16), nullable=False),
        sa.Column("query", sa.Text, nullable=False),
        sa.Column("shared", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("owner", "page", "name", name="uq_saved_views_owner_page_name"),
    )
    op.create_index("ix_saved_views_shared", "saved_views", ["shared"])


def downgrade() -> None:
    op.drop_index("ix_saved_views_shared", "saved_views")
    op.drop_table("saved_views")
