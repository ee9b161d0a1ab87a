"""What entries are selected by: the filter of the list, the API, the export and bulk jobs,
NATS subject wildcards, full-text queries and keyset cursors."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Mapping

from sqlalchemy import Engine, func, literal_column, or_, select, text

from ..config import parse_duration
from ..db.engine import is_sqlite
from ..db.models import Entry, FailureGroup
from ..errors import InvalidRequest
from ..numbers import whole_number
from ..times import format_time, parse_time, utcnow
from .fields import FIELD_PREFIX, KeyField, field_condition
from .shape import STATUSES

GROUPS = FailureGroup.__table__
DEFAULT_LIMIT = 50
MAX_LIMIT = 500


class FilterError(InvalidRequest):
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


#: PostgreSQL's text search configuration for entries (migration 0003): words as SQLite's
#: tokenizer makes them, case and (where the server has unaccent) diacritics ignored.
PG_SEARCH_CONFIG = "dlq_search"


def tsquery(q: str) -> str | None:
    """The same query for PostgreSQL's to_tsquery: every word must match, the last as a prefix."""
    words = _WORD.findall(q)
    if not words:
        return None
    quoted = ["'" + w.replace("'", "''") + "'" for w in words]  # \w+ holds no quote; kept safe anyway
    quoted[-1] += ":*"
    return " & ".join(quoted)


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
        if not 0 <= value < 2**63:  # what the database stores
            raise ValueError
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
    # A failure group: its id as /groups links it (or, from older links, its key text).
    group: str | None = None
    # ``since`` as given when it is a duration back from now (15m, 1h, 1d, 7d): kept so a
    # link or saved view stays "the last hour" instead of the hour it was made.
    since_ago: str | None = None
    # Key fields (DLQ_LIST_FIELDS) and the value each must have: field.<label>=<value>.
    field_values: tuple[tuple[KeyField, str], ...] = ()

    @classmethod
    def from_args(cls, args: Mapping[str, str], *, max_limit: int = MAX_LIMIT,
                  key_fields: tuple[KeyField, ...] = ()) -> "EntryFilter":
        """Parse request arguments; raise FilterError with a sentence for a bad value.

        ``key_fields`` are those ``field.<label>`` may name (settings.list_fields)."""
        def clean(name):
            value = args.get(name)
            return value.strip() if isinstance(value, str) and value.strip() else None

        status = clean("status")
        if status == "any":  # what the status select calls no status filter
            status = None
        if status is not None and status not in STATUSES:
            raise FilterError(f"status {status!r} is not valid: use one of {', '.join(STATUSES)}")
        subject = clean("subject")
        if subject is not None:
            validate_subject_pattern(subject)
        times, since_ago = {}, None
        for name in ("since", "until"):
            raw = clean(name)
            times[name] = parse_time(raw) if raw else None
            ago = parse_duration(raw) if raw and times[name] is None and name == "since" else None
            if ago and ago <= 36500 * 86400:  # a longer one would reach before the year 1
                times[name], since_ago = utcnow() - timedelta(seconds=ago), raw.lower()
            elif raw and times[name] is None:
                more = " or a duration back from now such as 15m, 1h or 7d" if name == "since" else ""
                raise FilterError(f"{name} {raw!r} is not valid: use an RFC 3339 time such as "
                                  f"2026-11-29T10:00:00Z{more}")
        limit_raw = clean("limit")
        limit = DEFAULT_LIMIT
        if limit_raw is not None:
            try:
                limit = whole_number(limit_raw, "limit", low=1, high=max_limit)
            except InvalidRequest as exc:
                raise FilterError(str(exc)) from None
        cursor = clean("cursor")
        if cursor is not None:
            decode_cursor(cursor)
        return cls(status=status, subject=subject, stream=clean("stream"), consumer=clean("consumer"),
                   reason=clean("reason"), q=clean("q"), since=times["since"], until=times["until"],
                   limit=limit, cursor=cursor, group=clean("group"), since_ago=since_ago,
                   field_values=_field_values(args, key_fields))

    def to_args(self) -> dict[str, str]:
        """The filter as query arguments (for URLs that share a view), without paging."""
        args = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("limit", "cursor", "since_ago", "field_values") or value is None:
                continue
            args[f.name] = format_time(value) if isinstance(value, datetime) else str(value)
        if self.since_ago:
            args["since"] = self.since_ago
        for field, value in self.field_values:
            args[field.param] = value
        return args

    @property
    def filtered(self) -> bool:
        """True when anything narrows the selection (paging aside)."""
        return bool(self.to_args())

    def conditions(self, engine: Engine, *, search: bool = True) -> list:
        """SQL conditions for everything but paging (``search=False``: without ``q``)."""
        conds = []
        if self.status:
            conds.append(Entry.status == self.status)
        if self.subject:
            conds.extend(_subject_conditions(Entry.original_subject, self.subject))
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
        if self.group:
            conds.append(Entry.group_id.in_(select(GROUPS.c.id).where(self._group_condition())))
        for field, value in self.field_values:
            conds.append(field_condition(engine, field, value))
        if self.q and search:
            conds.append(_search_condition(engine, self.q))
        return conds

    def group_conditions(self) -> list:
        """SQL conditions on failure_groups for the filters the kept counts hold (subject,
        reason, group; a group's subject and reason are '' where its entries have none)."""
        conds = []
        if self.subject:
            conds.extend(_subject_conditions(GROUPS.c.subject, self.subject))
        if self.reason:
            conds.append(GROUPS.c.reason == self.reason)
        if self.group:
            conds.append(self._group_condition())
        return conds

    def _group_condition(self):
        # isascii: "²" is a digit to str.isdigit, but no number to int().
        if self.group.isascii() and self.group.isdigit() and int(self.group) < 2**63:
            return GROUPS.c.id == int(self.group)
        return GROUPS.c.key == self.group  # a link made before groups had ids


def _field_values(args: Mapping[str, str], key_fields: tuple[KeyField, ...]) -> tuple[tuple[KeyField, str], ...]:
    """The ``field.<label>=<value>`` arguments, each naming a key field (empty ones ignored)."""
    by_label = {f.label: f for f in key_fields}
    found = []
    for name in args:
        if not isinstance(name, str) or not name.startswith(FIELD_PREFIX):
            continue
        raw = args.get(name)
        value = raw.strip() if isinstance(raw, str) else ""
        label = name[len(FIELD_PREFIX):]
        if label not in by_label:
            known = ", ".join(by_label) if by_label else "none (DLQ_LIST_FIELDS is not set)"
            raise FilterError(f"{name} is not a key field: the key fields are {known}")
        if value:
            found.append((by_label[label], value))
    return tuple(found)


def _subject_conditions(column, pattern: str) -> list:
    if "*" in pattern or ">" in pattern.split("."):
        conds = []
        prefix = _literal_prefix(pattern)
        if prefix:
            # The prefix lets the subject index narrow the rows the regex must look at.
            conds.append(column.like(_like_escape(prefix) + "%", escape="\\"))
        conds.append(column.regexp_match(subject_pattern_regex(pattern)))
        return conds
    return [column == pattern]


def _search_condition(engine: Engine, q: str):
    if is_sqlite(engine):
        match = fts_query(q)
        if match is None:
            return literal_column("0") == 1
        return Entry.id.in_(select(literal_column("rowid")).select_from(text("entries_fts"))
                            .where(text("entries_fts MATCH :fts_q").bindparams(fts_q=match)))
    # PostgreSQL: the GIN-indexed tsvector column the migration added beside the models.
    query = tsquery(q)
    if query is None:
        return literal_column("0") == 1
    config = literal_column(f"'{PG_SEARCH_CONFIG}'::regconfig")
    return literal_column("entries.search").op("@@")(func.to_tsquery(config, query))
