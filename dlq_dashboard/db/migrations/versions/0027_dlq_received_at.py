"""v27, when a DLQ copy joined an entry its advisory made first: ``entries.dlq_received_at`` (null
for every other entry, whose ``received_at`` is when its one report or its first, the DLQ copy,
arrived). The entry page's timeline told the copy at the advisory's time, ten seconds before the
copy existed. Nullable and without a default: adding it rewrites no row on either database.

Revision ID: 0027
Revises: 0026
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("entries", sa.Column("dlq_received_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
