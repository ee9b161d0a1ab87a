"""v34, the key fields SQLite stored as text that is not UTF-8, filled again. Its json_extract
answered a payload's bytes as they are: a payload in LATIN-1 (``{"customer": {"id": "C\\xe9"}}``)
stored ``C\\xe9``, text no read of it can decode, and a ``field.<label>`` filter by what the list
now shows (``Cé``: the bytes read as LATIN-1, ingest/key_fields.py) did not find the entry. This
revision fills again, in batches, the values of every entry holding such a value. PostgreSQL read
such bytes as LATIN-1 already: nothing to do. No schema change.

Revision ID: 0034
Revises: 0033
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import cast, func, select
from sqlalchemy.types import LargeBinary

from dlq_dashboard.db.json_node import TEXT as VALUE_TEXT
from dlq_dashboard.ingest.key_fields import ENTRY_FIELDS, KEY_FIELDS, fill_key_fields

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

BATCH = 5_000


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "sqlite" or conn.execute(select(KEY_FIELDS.c.id).limit(1)).first() is None:
        return
    raw = cast(ENTRY_FIELDS.c.value, LargeBinary)
    unreadable = raw != cast(getattr(func, VALUE_TEXT)(raw), LargeBinary)  # UTF-8 reads back the same
    after = 0
    while ids := list(conn.execute(select(ENTRY_FIELDS.c.entry_id).where(ENTRY_FIELDS.c.entry_id > after, unreadable)
                                   .distinct().order_by(ENTRY_FIELDS.c.entry_id).limit(BATCH)).scalars()):
        fill_key_fields(conn, ids=ids)  # their values deleted, then read again
        after = ids[-1]


def downgrade() -> None:
    pass  # values that are text: the older release reads them too
