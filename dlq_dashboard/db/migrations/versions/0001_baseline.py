"""v1, the baseline: entries, their history, the audit, republish intents, jobs, users, tokens,
mirror positions and leases, and SQLite's full-text index. Frozen: this is the schema the first
migration wrote; every change since is a later revision.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "entries",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("dlq_stream", sa.String(255)),
        sa.Column("dlq_epoch", sa.String(64)),
        sa.Column("dlq_seq", sa.Integer),
        sa.Column("original_subject", sa.String(1024)),
        sa.Column("original_stream", sa.String(255)),
        sa.Column("original_seq", sa.Integer),
        sa.Column("consumer", sa.String(255)),
        sa.Column("original_msg_id", sa.String(1024)),
        sa.Column("reason", sa.String(255)),
        sa.Column("error", sa.Text),
        sa.Column("schema_errors", sa.Text),
        sa.Column("deliveries", sa.Integer),
        sa.Column("failed_at", sa.DateTime),
        sa.Column("received_at", sa.DateTime, nullable=False),
        sa.Column("headers", sa.Text, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("payload_available", sa.Boolean, nullable=False),
        sa.Column("replay_of", sa.String(255)),
        sa.Column("sources", sa.String(32), nullable=False),
        sa.Column("notes", sa.Text, nullable=False),
        sa.Column("closed_by", sa.String(255)),
        sa.Column("closed_at", sa.DateTime),
        sa.Column("close_note", sa.Text),
        sa.Column("updated_at", sa.DateTime),
        sa.UniqueConstraint("dlq_stream", "dlq_epoch", "dlq_seq", name="uq_entries_dlq_message"),
    )
    op.create_index("ix_entries_original", "entries", ["original_stream", "original_seq"])
    op.create_index("ix_entries_status_id", "entries", ["status", "id"])
    op.create_index("ix_entries_subject_id", "entries", ["original_subject", "id"])
    op.create_index("ix_entries_reason_id", "entries", ["reason", "id"])
    op.create_index("ix_entries_received_at", "entries", ["received_at"])
    op.create_index("ix_entries_replay_of", "entries", ["replay_of"])

    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("original_stream", sa.String(255), nullable=False),
        sa.Column("original_seq", sa.Integer, nullable=False),
        sa.Column("consumer", sa.String(255)),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("deliveries", sa.Integer),
        sa.Column("at", sa.DateTime, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("source_key", sa.String(255), nullable=False, unique=True),
    )
    op.create_index("ix_events_original", "events", ["original_stream", "original_seq"])

    op.create_table(
        "actions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("entry_id", sa.Integer, sa.ForeignKey("entries.id")),
        sa.Column("job_id", sa.Integer),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("at", sa.DateTime, nullable=False),
        sa.Column("note", sa.Text),
        sa.Column("version", sa.Integer),
        sa.Column("msg_id", sa.String(255)),
        sa.Column("publish_stream", sa.String(255)),
        sa.Column("publish_seq", sa.Integer),
        sa.Column("duplicate", sa.Boolean),
        sa.Column("error", sa.Text),
        sa.Column("detail", sa.Text, nullable=False),
    )
    for column in ("entry_id", "job_id", "at"):
        op.create_index(f"ix_actions_{column}", "actions", [column])

    op.create_table(
        "republishes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("entry_id", sa.Integer, sa.ForeignKey("entries.id"), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("msg_id", sa.String(255), nullable=False, unique=True),
        sa.Column("subject", sa.String(1024), nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("headers", sa.Text, nullable=False),
        sa.Column("edited", sa.Boolean, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("job_id", sa.Integer),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("published_at", sa.DateTime),
        sa.Column("stream", sa.String(255)),
        sa.Column("seq", sa.Integer),
        sa.Column("duplicate", sa.Boolean),
        sa.Column("error", sa.Text),
    )
    for column in ("entry_id", "state", "job_id"):
        op.create_index(f"ix_republishes_{column}", "republishes", [column])

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("note", sa.Text),
        sa.Column("selection", sa.Text, nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("done", sa.Integer, nullable=False),
        sa.Column("failed", sa.Integer, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime),
    )
    op.create_table(
        "job_items",
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("entry_id", sa.Integer, sa.ForeignKey("entries.id"), primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("result", sa.Text),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("password_hash", sa.String(512), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("disabled", sa.Boolean, nullable=False),
        sa.Column("session_generation", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("token_hash", sa.String(128), nullable=False, unique=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("revoked_at", sa.DateTime),
        sa.Column("last_used_at", sa.DateTime),
    )
    op.create_table(
        "mirror_state",
        sa.Column("stream", sa.String(255), primary_key=True),
        sa.Column("epoch", sa.String(64)),
        sa.Column("last_seq", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.DateTime),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("expires_at", sa.DateTime, nullable=False),
    )

    if op.get_bind().dialect.name == "sqlite":
        # A full-text index over subject, error and payload text; rowid = entries.id. Triggers
        # keep it in the transaction of every write. Only the first 64 KiB of a payload is
        # indexed: enough to find it, bounded in size.
        op.execute("CREATE VIRTUAL TABLE entries_fts USING fts5("
                   "subject, error, payload, tokenize='unicode61 remove_diacritics 2')")
        indexed = ("new.original_subject, new.error, "
                   "CASE WHEN new.payload_available THEN substr(CAST(new.payload AS TEXT), 1, 65536) END")
        op.execute("CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries BEGIN "
                   f"INSERT INTO entries_fts(rowid, subject, error, payload) VALUES (new.id, {indexed}); END")
        op.execute("CREATE TRIGGER entries_fts_update AFTER UPDATE OF original_subject, error, payload "
                   "ON entries BEGIN DELETE FROM entries_fts WHERE rowid = old.id; "
                   f"INSERT INTO entries_fts(rowid, subject, error, payload) VALUES (new.id, {indexed}); END")
        op.execute("CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries BEGIN "
                   "DELETE FROM entries_fts WHERE rowid = old.id; END")


def downgrade() -> None:
    raise NotImplementedError("the baseline is not undone: restore a backup instead")
