"""v21, PostgreSQL's search vectors analysed with statistics target 1000 (100 by default), so that
a search for a rare word beside a common one is planned from the index (SQLite: nothing).

ANALYZE keeps the common words of entry_search.search and how often each occurs; any other word
is estimated from the rarest it kept. With the default target it kept 22 words at 200,000 dead
letters, each in every entry (the "o" of "o-41703", a currency, field names), so a search for an
order id ("o-41703": every entry has "o", one has 41703) was estimated at 2% of the entries: the
planner walked them newest first, testing each, 370-750 ms at 1,000,000 entries instead of 9-11
ms from the index. With 1000 it keeps 1,018, down to a customer's number (0.1% of the entries)
(docs/PERFORMANCE.md "A search's plan"). ANALYZE of entry_search then takes longer: 1.2-1.5 s
against 0.4-0.8 s at a million.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

#: The statistics target of entry_search.search (PostgreSQL's default is 100).
SEARCH_STATISTICS = 1000


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE entry_search ALTER COLUMN search SET STATISTICS {SEARCH_STATISTICS}")


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
