"""v3 of the grouping rules: every stored entry regrouped with the rules of ingest/grouping.py,
GROUPING_VERSION 3, its counts moved with it. Version 3 drops the quoted value of a format
failure written in an error text ("/customer/email: 'user36@example' is not a 'email'" made a
group per address) and a code of letters and digits after a noun ("coupon SAVE11 expired" made a
group per coupon), and a dropped quoted value is ``'…'`` whichever quote it came in. No table
changes.

As revision 0004 does for version 2, this revision stands for version 3 of the rules: run by
newer rules, it leaves the work to the newer revision that regroups by them.

Revision ID: 0011
Revises: 0009
"""

from __future__ import annotations

from alembic import op

from dlq_dashboard.db.regroup import regroup_entries
from dlq_dashboard.ingest.grouping import GROUPING_VERSION, error_group

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

#: The version of the grouping rules this revision regroups by.
RULES = 3


def upgrade() -> None:
    if GROUPING_VERSION != RULES:
        return
    regroup_entries(op.get_bind(), error_group)


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
