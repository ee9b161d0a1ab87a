"""v28, every grant of a single sign-on user's last sign-in: ``users.grants`` (JSON, as
``sessions.grants``; null for a local user). The user row kept only the highest role and its
scopes, so /admin/users and ``users list`` showed someone given operator over ``orders.>`` and
viewer over ``billing.>`` as an operator over ``orders.>`` alone. A single sign-on user takes
the grants of their newest session that still has its row, the last sign-in's; one without
keeps null until they sign in again, and is shown with their role and scopes as before.

Revision ID: 0028
Revises: 0027
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("grants", sa.Text(), nullable=True))
    users = sa.table("users", sa.column("id", sa.Integer), sa.column("via", sa.String), sa.column("grants", sa.Text))
    sessions = sa.table("sessions", sa.column("user_id", sa.Integer), sa.column("created_at", sa.DateTime),
                        sa.column("grants", sa.Text))
    newest = (sa.select(sessions.c.grants)
              .where(sessions.c.user_id == users.c.id, sessions.c.grants.is_not(None))
              .order_by(sessions.c.created_at.desc()).limit(1).scalar_subquery())
    op.get_bind().execute(users.update().where(users.c.via == "oidc").values(grants=newest))


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
