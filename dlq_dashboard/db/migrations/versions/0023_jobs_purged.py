"""v23, a job keeps the counts of its items a purge took with their entries: ``jobs.purged``, the
items' states counted (JSON, ``{"done": 2999}``), added to the items still stored wherever the
job is shown. A purge of its entries made a finished job read "0 done ... of 2,999".

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("purged", sa.Text(), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
