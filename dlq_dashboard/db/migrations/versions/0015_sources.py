"""Sources (SPEC section 12): several dead-letter streams, each over its own NATS connection.

- entries.source, events.source, republishes.source: the source an entry was mirrored from, a
  history fact's source, the source a republish goes out through; every row of an older database
  is of the one source it had, ``default``. An index on (source, id) for the list's source filter.
- failure_groups.source: a group belongs to one source; its unique key is (source, subject,
  reason, key), so the same failure in two sources makes two groups.
- mirror_state keyed by (source, stream): two sources may both have a stream called DLQ (in two
  accounts or clusters), each mirrored from its own position.

The entries' unique key stays (dlq_stream, dlq_epoch, dlq_seq): a stream's epoch is its creation
time to the microsecond, so it names one stream wherever it lives, and a stream reachable as two
sources (a mistake) is still stored once.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _source() -> sa.Column:
    return sa.Column("source", sa.String(40), nullable=False, server_default="default")


def upgrade() -> None:
    op.add_column("entries", _source())
    op.create_index("ix_entries_source_id", "entries", ["source", "id"])
    op.add_column("events", _source())
    op.add_column("republishes", _source())
    with op.batch_alter_table("failure_groups") as batch:
        batch.add_column(_source())
        batch.drop_constraint("uq_failure_groups", type_="unique")
        batch.create_unique_constraint("uq_failure_groups", ["source", "subject", "reason", "key"])
    op.create_table(
        "mirror_state_new",
        _source(),
        sa.Column("stream", sa.String(255), nullable=False),
        sa.Column("epoch", sa.String(64), nullable=True),
        sa.Column("last_seq", BIG, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=True),
        sa.PrimaryKeyConstraint("source", "stream", name="pk_mirror_state"),
    )
    op.execute("INSERT INTO mirror_state_new (source, stream, epoch, last_seq, updated_at) "
               "SELECT 'default', stream, epoch, last_seq, updated_at FROM mirror_state")
    op.drop_table("mirror_state")
    op.rename_table("mirror_state_new", "mirror_state")


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
