"""v30, this database's installation id (db/installation.py): a random id made once, which every
msgId the dashboard makes names from now on. Entry ids and versions are one database's own, so
two dashboards on one NATS (or a database made again from nothing) made the same msgId
``dlq-dashboard:<dlq stream>:<seq>:e<id>:v<version>`` for two different messages: within the
broker's duplicate window the second was dropped as a duplicate and never reached its subject.
A database upgraded gets its id here; a republish pending from before keeps the msgId it was
first sent with (it is stored with its intent).

Revision ID: 0030
Revises: 0029
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table("installation",
                            sa.Column("id", sa.Integer(), primary_key=True),
                            sa.Column("installation_id", sa.String(64), nullable=False))
    op.get_bind().execute(table.insert().values(id=1, installation_id=secrets.token_hex(8)))


def downgrade() -> None:
    op.drop_table("installation")
