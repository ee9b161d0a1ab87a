"""SQLAlchemy 2.0 typed models: entries, their delivery history, the audit, and mirror state."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (BigInteger, Boolean, DateTime, ForeignKey, Index, Integer, LargeBinary, String, Text,
                        UniqueConstraint, false, text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Ids and stream sequences: 64-bit on PostgreSQL; SQLite's INTEGER is 64-bit already, and an
# INTEGER PRIMARY KEY is the table's rowid (which "BIGINT PRIMARY KEY" would not be).
BigInt = BigInteger().with_variant(Integer(), "sqlite")
# SQLite AUTOINCREMENT: a deleted row's id (a purged entry, a merged group) is never given again (0033).
NOT_REUSED = {"sqlite_autoincrement": True}


class Base(DeclarativeBase):
    """Declarative base of every table."""


class Entry(Base):
    """One dead-lettered failure: a DLQ message, an advisory, or both merged."""

    __tablename__ = "entries"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    status: Mapped[str] = mapped_column(String(16), default="open")
    version: Mapped[int] = mapped_column(Integer, default=1)
    dlq_stream: Mapped[str | None] = mapped_column(String(255))
    # The DLQ stream's creation time: sequences restart at 1 when a stream is recreated, so (source,
    # stream, epoch, seq) identifies a DLQ message (a copy of a stream's store has its epoch: 0031).
    dlq_epoch: Mapped[str | None] = mapped_column(String(64))
    dlq_seq: Mapped[int | None] = mapped_column(BigInt)
    original_subject: Mapped[str | None] = mapped_column(String(1024))
    original_stream: Mapped[str | None] = mapped_column(String(255))
    original_seq: Mapped[int | None] = mapped_column(BigInt)
    consumer: Mapped[str | None] = mapped_column(String(255))
    original_msg_id: Mapped[str | None] = mapped_column(String(1024))
    reason: Mapped[str | None] = mapped_column(String(255))
    error: Mapped[str | None] = mapped_column(Text)
    # JSON text: the parsed list, or null when the header was absent or malformed (see notes).
    schema_errors: Mapped[str | None] = mapped_column(Text)
    deliveries: Mapped[int | None] = mapped_column(Integer)
    failed_at: Mapped[datetime | None] = mapped_column(DateTime)
    received_at: Mapped[datetime] = mapped_column(DateTime)
    headers: Mapped[str] = mapped_column(Text, default="{}")
    payload: Mapped[bytes] = mapped_column(LargeBinary, default=b"")
    payload_available: Mapped[bool] = mapped_column(Boolean, default=True)
    payload_opaque: Mapped[bool] = mapped_column(Boolean, server_default=false())  # Mask.hides_whole (0032)
    replay_of: Mapped[str | None] = mapped_column(String(255))
    # "dlq", "advisory" or "dlq,advisory": which sources reported this failure.
    sources: Mapped[str] = mapped_column(String(32), default="dlq")
    # JSON list of sentences about fields that could not be parsed and were kept raw.
    notes: Mapped[str] = mapped_column(Text, default="[]")
    closed_by: Mapped[str | None] = mapped_column(String(255))
    closed_at: Mapped[datetime | None] = mapped_column(DateTime)
    close_note: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime)
    # The failure group (ingest/grouping.py), chosen once when the entry is written.
    group_id: Mapped[int | None] = mapped_column(BigInt)
    # The source (SPEC section 12, sources.py) the entry was mirrored from.
    source: Mapped[str] = mapped_column(String(40), default="default", server_default="default")
    dlq_received_at: Mapped[datetime | None] = mapped_column(DateTime)  # its DLQ copy's, after its advisory (0027)

    __table_args__ = (
        UniqueConstraint("source", "dlq_stream", "dlq_epoch", "dlq_seq", name="uq_entries_dlq_message"),
        Index("ix_entries_original", "original_stream", "original_seq"),
        # Entries made from an advisory alone, waiting for their DLQ copy: the mirror looks
        # every batch up in this small index instead of the whole table.
        Index("ix_entries_advisory_only", "original_stream", "original_seq",
              sqlite_where=text("dlq_seq IS NULL"), postgresql_where=text("dlq_seq IS NULL")),
        Index("ix_entries_status_id", "status", "id"),
        Index("ix_entries_subject_id", "original_subject", "id"),
        Index("ix_entries_reason_id", "reason", "id"),
        Index("ix_entries_msg_id", "original_msg_id", "id"),  # the list's msg_id filter (revision 0022)
        Index("ix_entries_received_at", "received_at"),
        # Only entries that are a republished message failing again: every reader asks for a
        # value (revision 0019). /metrics reads the kept counts, not an index (status, reason).
        Index("ix_entries_replay_of", "replay_of", sqlite_where=text("replay_of IS NOT NULL"),
              postgresql_where=text("replay_of IS NOT NULL")),
        # "this is a republish of <stream>:<seq>" looks an entry up without its epoch.
        Index("ix_entries_dlq_ref", "dlq_stream", "dlq_seq"),
        Index("ix_entries_group_id", "group_id", "id"),
        Index("ix_entries_source_id", "source", "id"),
        # The purge reads the resolved entries in the order they were resolved (updated_at).
        Index("ix_entries_status_updated", "status", "updated_at", "id"), NOT_REUSED)


class Event(Base):
    """A fact in a failure's delivery history (a nak, a max-deliveries or termination advisory).

    Keyed by the original message, not by entry: naks arrive before the failure that makes
    the entry, and one history serves every entry of that message.
    """

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    original_stream: Mapped[str] = mapped_column(String(255))
    original_seq: Mapped[int] = mapped_column(BigInt)
    consumer: Mapped[str | None] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(32))
    deliveries: Mapped[int | None] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(DateTime)
    detail: Mapped[str] = mapped_column(Text, default="{}")
    # The advisory's id: a redelivered advisory is stored once.
    source_key: Mapped[str] = mapped_column(String(255), unique=True)
    # The source whose advisory stream told it (two sources may have streams of the same name).
    source: Mapped[str] = mapped_column(String(40), default="default", server_default="default")

    __table_args__ = (Index("ix_events_original", "original_stream", "original_seq"),)


class Action(Base):
    """The audit: one row for every action, written in the transaction of the change."""

    __tablename__ = "actions"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    # No foreign key: the audit outlives the entries it names (a purge keeps it).
    entry_id: Mapped[int | None] = mapped_column(BigInt, index=True)
    job_id: Mapped[int | None] = mapped_column(BigInt, index=True)
    action: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime] = mapped_column(DateTime, index=True)
    note: Mapped[str | None] = mapped_column(Text)
    version: Mapped[int | None] = mapped_column(Integer)
    msg_id: Mapped[str | None] = mapped_column(String(255))
    publish_stream: Mapped[str | None] = mapped_column(String(255))
    publish_seq: Mapped[int | None] = mapped_column(BigInt)
    duplicate: Mapped[bool | None] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[str] = mapped_column(Text, default="{}")


class Republish(Base):
    """A republish intent, committed with its msgId before anything is published."""

    __tablename__ = "republishes"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    # No foreign key (revision 0018): checked a row at a time it was a tenth of a bulk
    # republish's database time; the intent is written beside the entry it read, and the purge
    # deletes an entry's intents with it.
    entry_id: Mapped[int] = mapped_column(BigInt, index=True)
    version: Mapped[int] = mapped_column(Integer)
    msg_id: Mapped[str] = mapped_column(String(255), unique=True)
    subject: Mapped[str] = mapped_column(String(1024))
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    headers: Mapped[str] = mapped_column(Text, default="{}")
    edited: Mapped[bool] = mapped_column(Boolean, default=False)
    state: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    actor: Mapped[str] = mapped_column(String(255))
    job_id: Mapped[int | None] = mapped_column(BigInt, index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    published_at: Mapped[datetime | None] = mapped_column(DateTime)
    stream: Mapped[str | None] = mapped_column(String(255))
    seq: Mapped[int | None] = mapped_column(BigInt)
    duplicate: Mapped[bool | None] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)
    # The source it is published through: the entry's (SPEC section 12).
    source: Mapped[str] = mapped_column(String(40), default="default", server_default="default")


class Job(Base):
    """A bulk republish or close over a fixed set of entries."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    action: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16), default="queued")
    note: Mapped[str | None] = mapped_column(Text)
    selection: Mapped[str] = mapped_column(Text, default="{}")
    total: Mapped[int] = mapped_column(Integer, default=0)
    done: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    # When a runner first took it (a job's rate is measured from then), and who asked it to stop.
    started_at: Mapped[datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    cancelled_by: Mapped[str | None] = mapped_column(String(255))
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime)
    purged: Mapped[str | None] = mapped_column(Text)  # its items' counts a purge took, by state (JSON; 0023)
    request_key: Mapped[str | None] = mapped_column(String(64))  # its start's key, once an actor's (0024)
    __table_args__ = (Index("ix_jobs_request_key", "actor", "request_key", unique=True),)


#: The states of a job's items (``state`` on a job's page, its JSON and the list's ``job`` filter).
ITEM_STATES = ("done", "failed", "skipped", "cancelled", "pending")


class JobItem(Base):
    """One entry of a job, with the version it was selected at and its result."""

    __tablename__ = "job_items"

    # No foreign keys (revision 0018), as for republishes; on PostgreSQL the table has
    # fillfactor 50, so that an item's result is a heap-only update (no index holds state).
    job_id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    entry_id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), default="pending")
    result: Mapped[str | None] = mapped_column(Text)

    # Deleting an entry looks its items up by entry (the purge's test for a pending item).
    __table_args__ = (Index("ix_job_items_entry_id", "entry_id"),)


class User(Base):
    """A person who logs in; the password is stored as a slow hash."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    name_key: Mapped[str] = mapped_column(String(255), unique=True)  # the name in lower case (revision 0026)
    password_hash: Mapped[str] = mapped_column(String(512))
    role: Mapped[str] = mapped_column(String(16))
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    scopes: Mapped[str | None] = mapped_column(Text)  # JSON (scopes.py) limiting the role; NULL: unscoped (admins)
    # "password": made with the CLI or /admin/users; "oidc": made by a single sign-on (oidc_subject).
    via: Mapped[str] = mapped_column(String(16), default="password", server_default="password")
    oidc_subject: Mapped[str | None] = mapped_column(String(512), unique=True)
    last_sign_in_at: Mapped[datetime | None] = mapped_column(DateTime)
    # Every grant (JSON) the last single sign-on gave (revision 0028): role and scopes hold the highest.
    grants: Mapped[str | None] = mapped_column(Text)


class LoginSession(Base):
    """A login in one browser. The cookie carries a random key; only its SHA-256 is stored (the
    id), so the table cannot be turned back into cookies. Ended by logout (this row only), a new
    password or disabling the user (every row of the user); a copy of the cookie ends with it."""

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(Integer, ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime)
    # Written at most once a minute, so a page polling every second costs no write per poll.
    last_seen_at: Mapped[datetime] = mapped_column(DateTime)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime)
    via: Mapped[str] = mapped_column(String(16), default="password", server_default="password")
    # A single sign-on's grants (JSON, scopes.py), read at its sign-in; NULL: the user's own role and scopes.
    grants: Mapped[str | None] = mapped_column(Text)
    # DLQ_SESSION_HOURS after the sign-in; NULL for rows written before it existed.
    expires_at: Mapped[datetime | None] = mapped_column(DateTime)
    # The provider's ID token, sent back as id_token_hint when the session logs out.
    id_token: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_sessions_user_id", "user_id"), Index("ix_sessions_last_seen_at", "last_seen_at"))


class ApiToken(Base):
    """An API token for scripts; only its hash is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime)
    # Scopes (JSON, scopes.py) limiting the role; NULL: unscoped.
    scopes: Mapped[str | None] = mapped_column(Text)


class MirrorState(Base):
    """How far the mirror has read a stream, committed with the rows it read."""

    __tablename__ = "mirror_state"

    source: Mapped[str] = mapped_column(String(40), primary_key=True, default="default", server_default="default")
    stream: Mapped[str] = mapped_column(String(255), primary_key=True)
    epoch: Mapped[str | None] = mapped_column(String(64))
    last_seq: Mapped[int] = mapped_column(BigInt, default=0)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime)


class SearchPosition(Base):
    """How far the search pass has indexed entries (ingest/search_index.py): every entry with an
    id up to ``last_id`` is in the full-text index; newer ones may not be yet. One row, ``entries``."""

    __tablename__ = "search_position"

    name: Mapped[str] = mapped_column(String(40), primary_key=True)
    last_id: Mapped[int] = mapped_column(BigInt, default=0)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime)


class Lease(Base):
    """A named lease so that the mirror runs once per database, whatever the process count."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    expires_at: Mapped[datetime] = mapped_column(DateTime)
    # A mirror lease's: what its holder knows of each stream, for the others (db/mirror_reports.py).
    report: Mapped[str | None] = mapped_column(Text)


class FailureGroup(Base):
    """Entries of one subject and reason whose errors say the same thing, with how many of them
    have each status and when the first and the last arrived. The counts are kept in the
    transaction of every change (db/counts.py), so /groups reads groups, not entries."""

    __tablename__ = "failure_groups"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    # '' where the entries have no subject or reason: a unique key needs values, not NULLs.
    subject: Mapped[str] = mapped_column(String(1024))
    reason: Mapped[str] = mapped_column(String(255))
    key: Mapped[str] = mapped_column(String(300))
    open_count: Mapped[int] = mapped_column(BigInt, default=0)
    republished_count: Mapped[int] = mapped_column(BigInt, default=0)
    closed_count: Mapped[int] = mapped_column(BigInt, default=0)
    first_seen: Mapped[datetime | None] = mapped_column(DateTime)
    last_seen: Mapped[datetime | None] = mapped_column(DateTime)
    # The team (DLQ_TEAMS, SPEC section 11) whose subject patterns covered its subject when made; NULL: none.
    team: Mapped[str | None] = mapped_column(String(64))
    # Triage (SPEC section 11, db/triage.py): the state people share, changed by them with the
    # version they saw, and by the mirror (a resolved group failing again, an ignored one's end).
    # Defaults in the database only: the regrouping revisions make groups before these columns exist.
    state: Mapped[str] = mapped_column(String(16), server_default="open")
    assignee: Mapped[str | None] = mapped_column(String(255))
    resolved_in: Mapped[str | None] = mapped_column(String(255))
    ignored_until: Mapped[datetime | None] = mapped_column(DateTime)
    ignored_until_count: Mapped[int | None] = mapped_column(BigInt)
    # New failures counted since the group was ignored (against ignored_until_count).
    ignored_seen: Mapped[int] = mapped_column(BigInt, server_default="0")
    version: Mapped[int] = mapped_column(Integer, server_default="1")
    state_changed_at: Mapped[datetime | None] = mapped_column(DateTime)
    note_count: Mapped[int] = mapped_column(Integer, server_default="0")
    # A group belongs to one source (SPEC section 12): the same failure in two sources is two groups.
    source: Mapped[str] = mapped_column(String(40), server_default="default")

    __table_args__ = (UniqueConstraint("source", "subject", "reason", "key", name="uq_failure_groups"),
                      Index("ix_failure_groups_team", "team"),
                      Index("ix_failure_groups_state", "state", "assignee"), NOT_REUSED)


class GroupActivity(Base):
    """A failure group's activity log: a state change (``kind`` "state", ``state`` the new one),
    a note, or a bulk job over its entries, with its time and actor; an alert sent once the purge
    forgot it in ``alerts`` (``kind`` "alert"). Written in the transaction of what it records."""

    __tablename__ = "group_activity"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    group_id: Mapped[int] = mapped_column(BigInt)
    at: Mapped[datetime] = mapped_column(DateTime)
    actor: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    state: Mapped[str | None] = mapped_column(String(16))
    text: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[str] = mapped_column(Text, default="{}", server_default="{}")

    __table_args__ = (Index("ix_group_activity_group", "group_id", "id"), NOT_REUSED)


class Arrival(Base):
    """How many entries of a group and status arrived in a minute (width 60) or an hour (3600):
    the chart of failures over time, read without reading the entries. Group 0 is every group
    together (what a chart without a subject, reason or group filter reads)."""

    __tablename__ = "arrivals"

    width: Mapped[int] = mapped_column(Integer, primary_key=True)
    bucket: Mapped[datetime] = mapped_column(DateTime, primary_key=True)
    group_id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    count: Mapped[int] = mapped_column(BigInt, default=0)

    # Stored in key order on SQLite: a chart reads a range of buckets without a lookup a row.
    __table_args__ = {"sqlite_with_rowid": False}


class LoginFailure(Base):
    """A failed login, counted against a user name and an address by every replica alike."""

    __tablename__ = "login_failures"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    key: Mapped[str] = mapped_column(String(300))
    at: Mapped[datetime] = mapped_column(DateTime)

    __table_args__ = (Index("ix_login_failures_key_at", "key", "at"),)


class Alert(Base):
    """An alert (``group.new``, ``group.spike``) for one webhook URL: written in the transaction
    that raised it, then sent by the replica holding the ``alerts`` lease, retried with backoff
    until a 2xx answer. The body is stored as sent, so every attempt carries the same id and
    signature (an outbox; alerts/outbox.py writes it, alerts/sender.py sends it)."""

    __tablename__ = "alerts"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    # The event's id: the body's "id" and the X-Dlq-Event-Id header, the same at every URL.
    event_id: Mapped[str] = mapped_column(String(64))
    url: Mapped[str] = mapped_column(String(2048))
    event: Mapped[str] = mapped_column(String(32))
    group_id: Mapped[int] = mapped_column(BigInt)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime)
    last_error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        # A group.new id is derived from its group: the key makes it once, whichever writer races.
        UniqueConstraint("event_id", "url", name="uq_alerts_event_url"),
        # What the sender looks for every second: the unsent, by when they are due.
        Index("ix_alerts_due", "next_attempt_at", sqlite_where=text("sent_at IS NULL"),
              postgresql_where=text("sent_at IS NULL")),
        # A spike looks for the group's last one.
        Index("ix_alerts_group_event", "group_id", "event", "created_at"), NOT_REUSED)


class Purge(Base):
    """One run of the retention purge (periodic or ``flask --app app purge``): what it removed,
    raised in the transaction of each batch it deletes, so /metrics adds up what every replica
    and every command ever purged."""

    __tablename__ = "purges"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    actor: Mapped[str] = mapped_column(String(255))
    # The age it purged at, in seconds since an entry was resolved.
    older_than: Mapped[int] = mapped_column(BigInt)
    republished: Mapped[int] = mapped_column(BigInt, default=0)
    closed: Mapped[int] = mapped_column(BigInt, default=0)
    messages_deleted: Mapped[int] = mapped_column(BigInt, default=0)
    # Entries left for the next run because their DLQ message could not be deleted (NATS down).
    deferred: Mapped[int] = mapped_column(BigInt, default=0)
    # The failed attempts of the delivered alerts it forgot, still counted by /metrics (0023).
    alert_attempts: Mapped[int] = mapped_column(BigInt, default=0, server_default="0")


class SavedView(Base):
    """The filters of the list or the groups page saved under a name by a person; an admin may
    share one with everyone."""

    __tablename__ = "saved_views"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    # The name of who saved it (a user, or a trusted proxy's user): views are per person.
    owner: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(100))
    page: Mapped[str] = mapped_column(String(16))  # "list" or "groups"
    # The filters as a query string, as EntryFilter.to_args() writes them.
    query: Mapped[str] = mapped_column(Text, default="")
    shared: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime)

    __table_args__ = (UniqueConstraint("owner", "page", "name", name="uq_saved_views_owner_page_name"),
                      Index("ix_saved_views_shared", "shared"), NOT_REUSED)


class KeyFieldState(Base):
    """A key field (DLQ_LIST_FIELDS) as the database stores its values (ingest/key_fields.py):
    its label and pointer, and ``pending_below``: the entries with an id at or below it are not
    yet filled (the backfill lowers it to 0); entries written after it were filled as they were
    written. A label whose pointer changed, or that is no longer configured, is ``retired``: its
    values are deleted in batches, then the row."""

    __tablename__ = "key_fields"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    label: Mapped[str] = mapped_column(String(255))
    pointer: Mapped[str] = mapped_column(String(1024))
    pending_below: Mapped[int] = mapped_column(BigInt, default=0)
    retired: Mapped[bool] = mapped_column(Boolean, default=False)


class EntryField(Base):
    """One key field's value in one entry's payload, as entries/fields.py reads it: the list's
    ``field.<label>`` filter finds its entries in this key instead of reading every payload."""

    __tablename__ = "entry_fields"

    field_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[str] = mapped_column(String(256), primary_key=True)
    entry_id: Mapped[int] = mapped_column(BigInt, primary_key=True)

    # The key is the filter's lookup (field, value) in entry order; the entry_id index serves a
    # merged payload's refill and the trigger (migration 0017) that deletes a deleted entry's values.
    # A trigger, not a foreign key: a key checks every insert (a third of the mirror's cost of a
    # key field, measured), the trigger runs only when entries are deleted.
    __table_args__ = (Index("ix_entry_fields_entry", "entry_id"), {"sqlite_with_rowid": False})
