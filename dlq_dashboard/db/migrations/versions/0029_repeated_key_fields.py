"""v29, the key fields of a payload holding a key more than once, filled again on SQLite. Its
json_extract read such a key's first value ({"customer_id": "A", "customer_id": "B"} stored A)
where the entry page, the schema check and PostgreSQL's jsonb read the last (B): the list showed
A, and a ``field.<label>`` filter and its summary found the entry by A. Key fields now read the
last value on SQLite too (ingest/key_fields.py); this revision fills again, in batches, the
stored values of every entry whose payload writes a token of a recorded key field's pointer
twice (the entries that reading may change). PostgreSQL already read the last: nothing to do.

Revision ID: 0029
Revises: 0028
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import cast, false, or_, select
from sqlalchemy.types import Text

from dlq_dashboard.ingest.key_fields import ENTRIES, KEY_FIELDS, fill_key_fields, may_repeat
from dlq_dashboard.masking import parse_pointer

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

BATCH = 5_000


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "sqlite":
        return
    pointers = set(conn.execute(select(KEY_FIELDS.c.pointer).where(KEY_FIELDS.c.retired == false())).scalars())
    if not pointers:
        return
    text = cast(ENTRIES.c.payload, Text)
    twice = or_(*(may_repeat(text, parse_pointer(pointer)) for pointer in sorted(pointers)))
    after = 0
    while ids := list(conn.execute(select(ENTRIES.c.id).where(ENTRIES.c.id > after, twice)
                                   .order_by(ENTRIES.c.id).limit(BATCH)).scalars()):
        fill_key_fields(conn, ids=ids)  # their values deleted, then read again
        after = ids[-1]


def downgrade() -> None:
    pass  # the values read by the last value stay right for the older reading's filter too
