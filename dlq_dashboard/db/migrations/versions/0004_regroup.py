"""v4, failure groups by cause: every stored entry regrouped with the grouping rules of this
release (ingest/grouping.py, GROUPING_VERSION 2), its counts moved with it, and the groups the old
rules made that no entry is left in deleted. No table changes.

The rules are the live module's, so this revision stands for version 2 of them: a release that
changes the rules raises GROUPING_VERSION and adds a revision of its own that regroups again
(tests/test_db.py fails until it does). Run by rules newer than 2, this revision leaves the work
to that newer revision instead of doing it twice.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

from dlq_dashboard.db.regroup import regroup_entries
from dlq_dashboard.ingest.grouping import GROUPING_VERSION, error_group

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

#: The version of the grouping rules this revision regroups by.
RULES = 2


def upgrade() -> None:
    if GROUPING_VERSION != RULES:
        return
    regroup_entries(op.get_bind(), error_group)


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
