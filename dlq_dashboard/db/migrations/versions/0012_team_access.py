"""Team access: scopes on users and tokens, single sign-on users, and sessions that carry the
grants of their sign-in (SPEC section 10).

- users.scopes, api_tokens.scopes: JSON lists of scopes (``orders.>``, ``default:billing.*``);
  NULL for unscoped, as every user and token was before.
- users.via: ``password`` for a local user, ``oidc`` for one made by a single sign-on; with
  users.oidc_subject (the issuer and ``sub`` that identify them) and users.last_sign_in_at.
- sessions.via, sessions.grants (the grants a single sign-on gave, JSON, read again at every
  sign-in; NULL: the user's own role and scopes), sessions.expires_at (DLQ_SESSION_HOURS) and
  sessions.id_token (the ``id_token_hint`` of the provider's logout).
- failure_groups.team: the team (DLQ_TEAMS, section 11) a new group is given; NULL for none.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("scopes", sa.Text, nullable=True))
        batch.add_column(sa.Column("via", sa.String(16), nullable=False, server_default="password"))
        batch.add_column(sa.Column("oidc_subject", sa.String(512), nullable=True))
        batch.add_column(sa.Column("last_sign_in_at", sa.DateTime, nullable=True))
        batch.create_unique_constraint("uq_users_oidc_subject", ["oidc_subject"])
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("scopes", sa.Text, nullable=True))
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("via", sa.String(16), nullable=False, server_default="password"))
        batch.add_column(sa.Column("grants", sa.Text, nullable=True))
        batch.add_column(sa.Column("expires_at", sa.DateTime, nullable=True))
        batch.add_column(sa.Column("id_token", sa.Text, nullable=True))
    with op.batch_alter_table("failure_groups") as batch:
        batch.add_column(sa.Column("team", sa.String(64), nullable=True))
    op.create_index("ix_failure_groups_team", "failure_groups", ["team"])


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
