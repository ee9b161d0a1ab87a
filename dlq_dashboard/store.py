"""The one query layer: filters, pages and single entries as plain dataclasses with to_dict()."""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Iterator, Mapping

from sqlalchemy import Engine, Select, and_, func, literal_column, or_, select, text

from .contract import decode_text, format_time, parse_time
from .db import is_sqlite, read_transaction
from .models import Action, Entry, Event, Republish

STATUSES = ("open", "republished", "closed")
DEFAULT_LIMIT = 50
MAX_LIMIT = 500


class FilterError(ValueError):
    """A filter value that does not parse; the message says which and what it accepts."""


# --- NATS subject wildcards -------------------------------------------------------------------

_SUBJECT_TOKEN = re.compile(r"^[^\s.]+$")


def subject_pattern_regex(pattern: str) -> str:
    """Translate a NATS subject pattern (``*`` one token, ``>`` the rest) into an anchored regex."""
    tokens = pattern.split(".")
    parts = []
    for i, token in enumerate(tokens):
        if token == ">" and i == len(tokens) - 1:
            parts.append(r"[^.]+(\.[^.]+)*")
        elif token == "*":
            parts.append(r"[^.]+")
        else:
            parts.append(re.escape(token))
    return "^" + r"\.".join(parts) + "$"


def validate_subject_pattern(pattern: str) -> str:
    """Return the pattern, or raise FilterError when it is not a NATS subject or wildcard."""
    tokens = pattern.split(".")
    for i, token in enumerate(tokens):
        if not _SUBJECT_TOKEN.match(token) or (">" in token and (token != ">" or i != len(tokens) - 1)) \
                or ("*" in token and token != "*"):
            raise FilterError(
                f"subject {pattern!r} is not a NATS subject: use tokens separated by dots, "
                "'*' for one token and '>' at the end for the rest (e.g. orders.* or orders.>)"
            )
    return pattern


def _literal_prefix(pattern: str) -> str:
    literal = []
    for token in pattern.split("."):
        if token in ("*", ">"):
            break
        literal.append(token)
    return ".".join(literal) + ("." if literal else "")


def _like_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


# --- full-text queries ------------------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


def fts_query(q: str) -> str | None:
    """Turn what a person typed into a safe FTS5 query: every word must match, the last as a prefix."""
    words = _WORD.findall(q)
    if not words:
        return None
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    quoted[-1] += "*"
    return " AND ".join(quoted)


# --- the filter -------------------------------------------------------------------------------

def encode_cursor(entry_id: int) -> str:
    """An opaque cursor for keyset pagination (entries are listed newest first, by id)."""
    return base64.urlsafe_b64encode(f"e{entry_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The id a cursor stands for; FilterError when it was not made by encode_cursor."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if raw[0] != "e":
            raise ValueError
        value = int(raw[1:])
    except (ValueError, IndexError, UnicodeDecodeError, binascii.Error):
        raise FilterError(f"cursor {cursor!r} is not valid: use next_cursor from a previous page") from None
    return value


@dataclass(frozen=True)
class EntryFilter:
    """What the list, the API, the export and bulk jobs select entries by."""

    status: str | None = None
    subject: str | None = None
    stream: str | None = None
    consumer: str | None = None
    reason: str | None = None
    q: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None

    @classmethod
    def from_args(cls, args: Mapping[str, str], *, max_limit: int = MAX_LIMIT) -> "EntryFilter":
        """Parse request arguments; raise FilterError with a sentence for a bad value."""
        def clean(name):
            value = args.get(name)
            return value.strip() if isinstance(value, str) and value.strip() else None

        status = clean("status")
        if status is not None and status not in STATUSES:
            raise FilterError(f"status {status!r} is not valid: use one of {', '.join(STATUSES)}")
        subject = clean("subject")
        if subject is not None:
            validate_subject_pattern(subject)
        times = {}
        for name in ("since", "until"):
            raw = clean(name)
            times[name] = parse_time(raw) if raw else None
            if raw and times[name] is None:
                raise FilterError(f"{name} {raw!r} is not valid: use an RFC 3339 time such as 2026-11-29T10:00:00Z")
        limit_raw = clean("limit")
        limit = DEFAULT_LIMIT
        if limit_raw is not None:
            if not limit_raw.isdigit() or not 1 <= int(limit_raw) <= max_limit:
                raise FilterError(f"limit {limit_raw!r} is not valid: use a whole number from 1 to {max_limit}")
            limit = int(limit_raw)
        cursor = clean("cursor")
        if cursor is not None:
            decode_cursor(cursor)
        return cls(status=status, subject=subject, stream=clean("stream"), consumer=clean("consumer"),
                   reason=clean("reason"), q=clean("q"), since=times["since"], until=times["until"],
                   limit=limit, cursor=cursor)

    def to_args(self) -> dict[str, str]:
        """The filter as query arguments (for URLs that share a view), without paging."""
        args = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("limit", "cursor") or value is None:
                continue
            args[f.name] = format_time(value) if isinstance(value, datetime) else str(value)
        return args

    def conditions(self, engine: Engine) -> list:
        """SQL conditions for everything but paging."""
        conds = []
        if self.status:
            conds.append(Entry.status == self.status)
        if self.subject:
            if "*" in self.subject or ">" in self.subject.split("."):
                prefix = _literal_prefix(self.subject)
                if prefix:
                    # The prefix lets the subject index narrow the rows the regex must look at.
                    conds.append(Entry.original_subject.like(_like_escape(prefix) + "%", escape="\\"))
                conds.append(Entry.original_subject.regexp_match(subject_pattern_regex(self.subject)))
            else:
                conds.append(Entry.original_subject == self.subject)
        if self.stream:
            conds.append(or_(Entry.original_stream == self.stream, Entry.dlq_stream == self.stream))
        if self.consumer:
            conds.append(Entry.consumer == self.consumer)
        if self.reason:
            conds.append(Entry.reason == self.reason)
        if self.since:
            conds.append(Entry.received_at >= self.since)
        if self.until:
            conds.append(Entry.received_at < self.until)
        if self.q:
            conds.append(_search_condition(engine, self.q))
        return conds


def _search_condition(engine: Engine, q: str):
    if is_sqlite(engine):
        match = fts_query(q)
        if match is None:
            return literal_column("0") == 1
        return Entry.id.in_(select(literal_column("rowid")).select_from(text("entries_fts"))
                            .where(text("entries_fts MATCH :fts_q").bindparams(fts_q=match)))
    pattern = "%" + _like_escape(q) + "%"
    return or_(Entry.original_subject.ilike(pattern, escape="\\"), Entry.error.ilike(pattern, escape="\\"))


# --- what the store returns -------------------------------------------------------------------

@dataclass
class EntryView:
    """An entry as every renderer sees it."""

    id: int
    status: str
    version: int
    dlq_stream: str | None
    dlq_seq: int | None
    original_subject: str | None
    original_stream: str | None
    original_seq: int | None
    consumer: str | None
    original_msg_id: str | None
    reason: str | None
    error: str | None
    schema_errors: list | None
    deliveries: int | None
    failed_at: datetime | None
    received_at: datetime
    headers: dict[str, list[str]]
    payload: bytes
    payload_available: bool
    replay_of: str | None
    sources: str
    notes: list[str]
    closed_by: str | None
    closed_at: datetime | None
    close_note: str | None
    history: list[dict] | None = None
    actions: list[dict] | None = None

    @classmethod
    def from_row(cls, row) -> "EntryView":
        """Build from a row of the entries table."""
        m = row._mapping
        return cls(
            id=m["id"], status=m["status"], version=m["version"], dlq_stream=m["dlq_stream"],
            dlq_seq=m["dlq_seq"], original_subject=m["original_subject"],
            original_stream=m["original_stream"], original_seq=m["original_seq"],
            consumer=m["consumer"], original_msg_id=m["original_msg_id"], reason=m["reason"],
            error=m["error"], schema_errors=json.loads(m["schema_errors"]) if m["schema_errors"] else None,
            deliveries=m["deliveries"], failed_at=m["failed_at"], received_at=m["received_at"],
            headers=json.loads(m["headers"] or "{}"), payload=bytes(m["payload"] or b""),
            payload_available=bool(m["payload_available"]), replay_of=m["replay_of"],
            sources=m["sources"], notes=json.loads(m["notes"] or "[]"), closed_by=m["closed_by"],
            closed_at=m["closed_at"], close_note=m["close_note"],
        )

    @property
    def payload_text(self) -> str | None:
        """The payload as text, None when it is not UTF-8."""
        return decode_text(self.payload)

    @property
    def dlq_ref(self) -> str | None:
        """``<dlq stream>:<seq>``, how Dlq-Replay-Of names this entry."""
        return f"{self.dlq_stream}:{self.dlq_seq}" if self.dlq_stream and self.dlq_seq else None

    def to_dict(self) -> dict[str, Any]:
        """The entry's JSON shape (SPEC section 6)."""
        result = {
            "id": self.id, "status": self.status, "version": self.version,
            "dlq_stream": self.dlq_stream, "dlq_seq": self.dlq_seq,
            "original_subject": self.original_subject, "original_stream": self.original_stream,
            "original_seq": self.original_seq, "consumer": self.consumer,
            "original_msg_id": self.original_msg_id, "reason": self.reason, "error": self.error,
            "schema_errors": self.schema_errors, "deliveries": self.deliveries,
            "failed_at": format_time(self.failed_at), "received_at": format_time(self.received_at),
            "headers": self.headers, "payload_base64": base64.b64encode(self.payload).decode(),
            "payload_text": self.payload_text, "payload_available": self.payload_available,
            "replay_of": self.replay_of, "sources": self.sources.split(","), "notes": self.notes,
            "closed_by": self.closed_by, "closed_at": format_time(self.closed_at),
            "close_note": self.close_note,
        }
        if self.history is not None:
            result["history"] = self.history
        if self.actions is not None:
            result["actions"] = self.actions
        return result


@dataclass
class Page:
    """One page of entries and the cursor of the next (None on the last page)."""

    entries: list[EntryView]
    next_cursor: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"entries": [e.to_dict() for e in self.entries], "next_cursor": self.next_cursor}


def _event_dict(row) -> dict[str, Any]:
    m = row._mapping
    return {"kind": m["kind"], "at": format_time(m["at"]), "deliveries": m["deliveries"],
            "consumer": m["consumer"], "detail": json.loads(m["detail"] or "{}")}


def _action_dict(row) -> dict[str, Any]:
    m = row._mapping
    return {"id": m["id"], "entry_id": m["entry_id"], "job_id": m["job_id"], "action": m["action"],
            "actor": m["actor"], "at": format_time(m["at"]), "note": m["note"], "version": m["version"],
            "msg_id": m["msg_id"], "publish_stream": m["publish_stream"], "publish_seq": m["publish_seq"],
            "duplicate": m["duplicate"], "error": m["error"], "detail": json.loads(m["detail"] or "{}")}


@dataclass
class Store:
    """Read queries over the database; writes live with the code that owns them."""

    engine: Engine

    def select_entries(self, flt: EntryFilter) -> Select:
        """The SELECT for a filter, newest first, without limit or cursor."""
        return select(Entry.__table__).where(and_(True, *flt.conditions(self.engine))).order_by(Entry.id.desc())

    def list_entries(self, flt: EntryFilter) -> Page:
        """One page of entries matching the filter, newest first (keyset pagination)."""
        query = self.select_entries(flt)
        if flt.cursor:
            query = query.where(Entry.id < decode_cursor(flt.cursor))
        with read_transaction(self.engine) as conn:
            rows = conn.execute(query.limit(flt.limit + 1)).all()
        entries = [EntryView.from_row(r) for r in rows[: flt.limit]]
        next_cursor = encode_cursor(entries[-1].id) if len(rows) > flt.limit else None
        return Page(entries, next_cursor)

    def iter_entries(self, flt: EntryFilter, batch: int = 1000) -> Iterator[EntryView]:
        """Every matching entry, newest first, read in keyset batches (constant memory)."""
        last_id = decode_cursor(flt.cursor) if flt.cursor else None
        while True:
            query = self.select_entries(flt)
            if last_id is not None:
                query = query.where(Entry.id < last_id)
            with read_transaction(self.engine) as conn:
                rows = conn.execute(query.limit(batch)).all()
            if not rows:
                return
            for row in rows:
                yield EntryView.from_row(row)
            last_id = rows[-1]._mapping["id"]

    def get_entry(self, entry_id: int, *, with_history: bool = True) -> EntryView | None:
        """One entry, with its delivery history and its actions."""
        with read_transaction(self.engine) as conn:
            row = conn.execute(select(Entry.__table__).where(Entry.id == entry_id)).first()
            if row is None:
                return None
            entry = EntryView.from_row(row)
            if with_history:
                entry.history = self._history(conn, entry)
                entry.actions = [_action_dict(r) for r in conn.execute(
                    select(Action.__table__).where(Action.entry_id == entry_id).order_by(Action.id))]
        return entry

    def _history(self, conn, entry: EntryView) -> list[dict]:
        if entry.original_stream is None or entry.original_seq is None:
            return []
        query = select(Event.__table__).where(
            Event.original_stream == entry.original_stream, Event.original_seq == entry.original_seq)
        if entry.consumer:
            query = query.where(or_(Event.consumer == entry.consumer, Event.consumer.is_(None)))
        return [_event_dict(r) for r in conn.execute(query.order_by(Event.at, Event.id))]

    def counts_by_status(self, flt: EntryFilter | None = None) -> dict[str, int]:
        """How many entries each status has (under the filter, status aside)."""
        conds = []
        if flt is not None:
            conds = EntryFilter(**{**flt.__dict__, "status": None}).conditions(self.engine)
        with read_transaction(self.engine) as conn:
            rows = conn.execute(select(Entry.status, func.count()).where(and_(True, *conds))
                                .group_by(Entry.status)).all()
        counts = {s: 0 for s in STATUSES}
        counts.update({status: n for status, n in rows})
        return counts

    def replays_of(self, ref: str) -> list[EntryView]:
        """Entries whose message was a republish of the entry named ``<stream>:<seq>``."""
        with read_transaction(self.engine) as conn:
            rows = conn.execute(select(Entry.__table__).where(Entry.replay_of == ref).order_by(Entry.id)).all()
        return [EntryView.from_row(r) for r in rows]

    def republishes_of(self, entry_id: int) -> list[dict]:
        """The republish intents of an entry, oldest first."""
        with read_transaction(self.engine) as conn:
            rows = conn.execute(select(Republish.__table__).where(Republish.entry_id == entry_id)
                                .order_by(Republish.id)).all()
        return [{"msg_id": r.msg_id, "state": r.state, "version": r.version, "stream": r.stream,
                 "seq": r.seq, "duplicate": r.duplicate, "error": r.error, "actor": r.actor,
                 "created_at": format_time(r.created_at), "published_at": format_time(r.published_at)}
                for r in rows]
