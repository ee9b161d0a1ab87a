"""v22, entries found by their original message's msgId: an index of (original_msg_id, id), which
the list's ``msg_id`` filter reads newest first (an order's id from a ticket finds its dead letter
when its payload is bytes the search cannot read, or when a search would match every mention of
it). Built once here; each entry written adds one entry to it.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_entries_msg_id", "entries", ["original_msg_id", "id"])


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
