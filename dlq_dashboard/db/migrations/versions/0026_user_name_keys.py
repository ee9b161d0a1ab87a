"""users.name_key: a user's name in lower case, unique, so that no two users' names differ only in
case ("viewer1" and "Viewer1", which nobody reading the audit can tell apart; a local user named
like a single sign-on user in another case locked that user out). The check the dashboard makes
before creating a user sits in the creating transaction; this index also refuses what another
transaction made meanwhile (PostgreSQL's read committed does not see it).

A database may hold such names already (made before this revision): no row is lost or renamed.
Of each set of names equal in any case, the user made first (the lowest id) holds the name in
lower case; each other holds ``<name in lower case>:<id>``, which no name can be (names have no
':'), and keeps its name, its password and its sessions. The names are logged. A name given to a
new user, or a single sign-on user's new name, is then refused while any of them holds it.

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)
KEY_LENGTH = 255


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("name_key", sa.String(KEY_LENGTH), nullable=True))
    conn = op.get_bind()
    users = sa.table("users", sa.column("id", sa.Integer), sa.column("name", sa.String),
                     sa.column("name_key", sa.String))
    first: dict[str, str] = {}  # a name in lower case -> the name of the first user holding it
    for user_id, name in conn.execute(sa.select(users.c.id, users.c.name).order_by(users.c.id)).all():
        key = name.lower()
        if key in first:
            log.warning("users %r and %r have names that differ only in case: both are kept, and no new user may "
                        "take that name in any case", first[key], name)
            suffix = f":{user_id}"
            key = key[:KEY_LENGTH - len(suffix)] + suffix
        else:
            first[key] = name
        conn.execute(users.update().where(users.c.id == user_id).values(name_key=key))
    with op.batch_alter_table("users") as batch:
        batch.alter_column("name_key", existing_type=sa.String(KEY_LENGTH), nullable=False)
        batch.create_unique_constraint("uq_users_name_key", ["name_key"])


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
