"""v20, the mirror's report: a mirror lease carries what its holder knows of each stream (stuck
and why, behind since when, the stream's last sequence), written at each renewal, so that every
other process's banner and /sources tell it too (db/mirror_reports.py).

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("leases", sa.Column("report", sa.Text(), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
