"""v23, what a purge takes is still counted: ``jobs.purged``, the states of a job's items a purge
took with their entries (JSON, ``{"done": 2999}``), added to the items still stored wherever the
job is shown (a purge of its entries made a finished job read "0 done ... of 2,999"); and
``purges.alert_attempts``, the failed attempts of the delivered alerts a purge forgot, which
``dlq_alert_failed_attempts_total`` adds to those still stored (it went down, a counter).

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
    with op.batch_alter_table("purges") as batch:
        batch.add_column(sa.Column("alert_attempts", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
