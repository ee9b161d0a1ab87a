"""Jobs you can find: when a bulk job started working, and who cancelled it and when.

Revision ID: 0009
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("started_at", sa.DateTime, nullable=True))
        batch.add_column(sa.Column("cancelled_by", sa.String(255), nullable=True))
        batch.add_column(sa.Column("cancelled_at", sa.DateTime, nullable=True))


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
