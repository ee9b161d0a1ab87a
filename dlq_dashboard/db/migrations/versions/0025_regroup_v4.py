"""v4 of the grouping rules: every stored entry regrouped with the rules of ingest/grouping.py,
GROUPING_VERSION 4, its counts moved with it. Version 4 reads a hex id as an id whatever its last
letter: one of digits then d, b or B was read as a duration or a size ("refund 6705176d rejected"
made "refund <duration> rejected", "refund 575142eb rejected" "refund <id> rejected": two groups,
two group.new alerts, for one cause). No table changes.

Unlike revisions 0004 and 0011, this one meets sources, teams and triage: an entry stays in a
group of its own source, a group it makes takes the team of the group its entries came from, and
a group left empty is settled as a move at ingest settles it (ingest/merge.py retire_emptied):
its alerts not sent yet are withdrawn, and it goes unless something was done with it (a state,
an assignee, a note or other activity, an alert sent), which it keeps.

As revisions 0004 and 0011 do for versions 2 and 3, this revision stands for version 4 of the
rules: run by newer rules, it leaves the work to the newer revision that regroups by them.

Revision ID: 0025
Revises: 0024
"""

from __future__ import annotations

from alembic import op

from dlq_dashboard.db.regroup import regroup_entries
from dlq_dashboard.ingest.grouping import GROUPING_VERSION, error_group
from dlq_dashboard.ingest.merge import retire_emptied

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

#: The version of the grouping rules this revision regroups by.
RULES = 4


def upgrade() -> None:
    if GROUPING_VERSION != RULES:
        return
    conn = op.get_bind()
    left: set[int] = set()
    regroup_entries(conn, error_group, left)
    retire_emptied(conn, left)


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
