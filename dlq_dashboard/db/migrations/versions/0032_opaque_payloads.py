"""v32, entries.payload_opaque: whether DLQ_MASK, holding a pointer, hides an entry's payload whole
from viewers (masking.py Mask.hides_whole: not UTF-8 JSON, or a key given twice in one object).

A key field's filter (``field.<label>``) reads the values stored at ingest (entry_fields), which
nothing told apart for such a payload: a viewer shown "•••" for its key fields found the entry by
their value (``field.order_id=dup-1``), in the list, the API, the exports, the counts and the
groups. The mark is set as each entry is stored from now on, and a viewer's key-field filter skips
the entries it marks (entries/filters.py); operators filter as before. This revision adds the
column (false) and sets it for the entries stored before, reading their payloads in batches.

Revision ID: 0032
Revises: 0031
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dlq_dashboard.masking import Mask

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

#: Entries whose payload one transaction's batch reads.
BATCH = 1_000

ENTRIES = sa.table("entries", sa.column("id", sa.BigInteger), sa.column("payload", sa.LargeBinary),
                   sa.column("payload_available", sa.Boolean), sa.column("payload_opaque", sa.Boolean))


def upgrade() -> None:
    op.add_column("entries", sa.Column("payload_opaque", sa.Boolean, nullable=False, server_default=sa.false()))
    conn = op.get_bind()
    after = 0
    while rows := conn.execute(sa.select(ENTRIES.c.id, ENTRIES.c.payload).where(
            ENTRIES.c.id > after, ENTRIES.c.payload_available == sa.true(), sa.func.length(ENTRIES.c.payload) > 0)
            .order_by(ENTRIES.c.id).limit(BATCH)).all():
        opaque = [entry_id for entry_id, payload in rows if Mask.hides_whole(bytes(payload))]
        if opaque:
            conn.execute(sa.update(ENTRIES).where(ENTRIES.c.id.in_(opaque)).values(payload_opaque=True))
        after = rows[-1][0]


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
