"""v24, a bulk job is started once a request: ``jobs.request_key``, the key its start was sent with
(the preview form's, or an API client's ``Idempotency-Key``), unique for its actor. The same start
sent again (a second click, a retried request) is the job the first one made, not a second job
over the same entries.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("request_key", sa.String(64), nullable=True))
    op.create_index("ix_jobs_request_key", "jobs", ["actor", "request_key"], unique=True)


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
