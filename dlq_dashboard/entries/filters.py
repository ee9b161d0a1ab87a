"""What entries are selected by: the list's filters, declared once (FILTERS), and EntryFilter,
the filter of the list, the API, the export and bulk jobs made from them; NATS subject
wildcards, full-text queries and keyset cursors."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable, ClassVar, Mapping, NamedTuple

from sqlalchemy import Engine, false, or_, select

from dlq_consumer import headers as contract

from ..db.models import ITEM_STATES, Entry, FailureGroup, JobItem
from ..errors import InvalidRequest
from ..masking import Mask
from ..numbers import whole_number
from ..scopes import Scope
from ..times import format_time, parse_duration, parse_time, utcnow
from .fields import FIELD_PREFIX, KeyField, field_condition
from .scoping import scope_condition, subject_condition
from .search import search_condition
from .shape import STATUSES, STR

GROUPS = FailureGroup.__table__
DEFAULT_LIMIT = 50
MAX_LIMIT = 500


class FilterError(InvalidRequest):
    """A filter value that does not parse; the message says which and what it accepts."""


# --- NATS subject wildcards -------------------------------------------------------------------

_SUBJECT_TOKEN = re.compile(r"^[^\s.]+$")


def validate_subject_pattern(pattern: str) -> str:
    """Return the pattern, or raise FilterError when it is not a NATS subject or wildcard. As for
    NATS, ``*`` and ``>`` are wildcards as whole tokens only: inside one (``probe.<b>``, ``a*b``)
    they are its characters, and a subject holding them is stored and republished as any other."""
    tokens = pattern.split(".")
    for i, token in enumerate(tokens):
        if not _SUBJECT_TOKEN.match(token) or (token == ">" and i != len(tokens) - 1):
            raise FilterError(
                f"subject {pattern!r} is not a NATS subject: use tokens separated by dots, "
                "'*' for one token and '>' at the end for the rest (e.g. orders.* or orders.>)"
            )
    return pattern


# --- the filter -------------------------------------------------------------------------------

#: A time a request gives: an RFC 3339 time, or a duration (times.parse_duration: 15m, 1h, 7d).
TIME_OR_DURATION = {"type": "string", "anyOf": [{"format": "date-time"},
                                                {"pattern": r"^\s*[0-9]+[smhdSMHD]\s*$"}]}
#: What encode_cursor makes: base64url without its padding.
CURSOR_SCHEMA = {"type": "string", "pattern": "^[A-Za-z0-9_-]*$"}


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


# --- the filters, declared once ---------------------------------------------------------------
#
# Each of the list's filters is one declaration in FILTERS (as Datasette's filters.py gives each
# filter its SQL, its words and its form field): how its value is read and the sentence of a bad
# one, the SQL it adds, its words in a job's selection, its OpenAPI parameter and its command-line
# option. EntryFilter, the bulk forms' allow-list (web/params.py), the API document
# (web/openapi.py), the command line (cli/entries.py) and describe_selection are made from it,
# so a filter declared here is in all of them. Paging (limit, cursor) is not a filter.

def _clean(raw: object) -> str | None:
    """A parameter's value trimmed; None when it is missing or blank (blank is no filter)."""
    return raw.strip() if isinstance(raw, str) and raw.strip() else None


def _status(raw: str) -> str | None:
    if raw == "any":  # what the status select calls no status filter
        return None
    if raw not in STATUSES:
        raise FilterError(f"status {raw!r} is not valid: use one of {', '.join(STATUSES)}")
    return raw


def _time_sentence(name: str, raw: str, more: str = "") -> FilterError:
    return FilterError(f"{name} {raw!r} is not valid: use an RFC 3339 time such as 2026-11-29T10:00:00Z{more}")


def _named_group(group: str):
    # isascii: "²" is a digit to str.isdigit, but no number to int().
    if group.isascii() and group.isdigit() and int(group) < 2**63:
        return GROUPS.c.id == int(group)
    return GROUPS.c.key == group  # a link made before groups had ids


def _group_words(name: str, value: str, labels: Mapping[int, str]) -> str:
    text = str(value)
    label = labels.get(int(text)) if text.isascii() and text.isdigit() else None
    return f"group {label or text}"


class JobPart(NamedTuple):
    """``job``'s value: a bulk job's id, and the state of its items to keep (None: all of them)."""

    id: int
    state: str | None = None

    def __str__(self) -> str:
        return f"{self.id}:{self.state}" if self.state else str(self.id)


def _job_part(raw: str) -> JobPart:
    number, colon, state = raw.partition(":")
    # isascii: "²" is a digit to str.isdigit, but no number to int().
    if not (number.isascii() and number.isdigit() and 0 < int(number) < 2**63) or (colon and state not in ITEM_STATES):
        raise FilterError(f"job {raw[:40]!r} is not valid: use a job's id from /jobs, alone or with the state of "
                          f"its items (e.g. 12:failed; the states are {', '.join(ITEM_STATES)})")
    return JobPart(int(number), state or None)


def _job_items(engine: Engine, part: JobPart) -> list:
    items = select(JobItem.entry_id).where(JobItem.job_id == part.id)  # the items' primary key leads by job
    return [Entry.id.in_(items.where(JobItem.state == part.state) if part.state else items)]


def _job_words(name: str, value: str, labels: Mapping[int, str]) -> str:
    number, _, state = str(value).partition(":")
    return f"the {state} items of job {number}" if state else f"the entries of job {number}"


def _one(column) -> Callable[[Engine, Any], list]:
    return lambda engine, value: [column == value]


@dataclass(frozen=True)
class ListFilter:
    """One filter of the list: the parameter ``name`` (the EntryFilter attribute of the same
    name, and the option ``--name``), read by ``parse`` from its trimmed text (FilterError with
    the sentence of a 400; None is no filter), applied by ``where`` (SQL conditions on entries)
    and ``on_groups`` (on failure_groups), documented by ``description`` and ``schema`` in the
    API and the command line. ``kept``: the kept counts hold it (entries/tallies.py), so groups,
    counts and the chart under it need not read the entries."""

    name: str
    description: str
    parse: Callable[[str], Any] = str  # as given
    where: Callable[[Engine, Any], list] = lambda engine, value: []
    on_groups: Callable[[Any], list] | None = None
    kept: bool = False
    schema: Mapping[str, Any] = field(default_factory=lambda: dict(STR))
    #: Its words in a job's selection (default ``name=value``); a filter with ``leads`` is named
    #: first ("group <label>, status=open").
    words: Callable[[str, str, Mapping[int, str]], str] | None = None
    leads: bool = False
    #: Full text: applied last (the other conditions narrow first), left out by conditions(search=False).
    search: bool = False
    metavar: str | None = None
    #: A family of parameters (``field.<label>``), not one of that name.
    family: ClassVar[bool] = False

    def takes(self, param: str) -> bool:
        """Whether ``param`` is this filter's parameter."""
        return param == self.name

    def read(self, args: Mapping[str, str], key_fields: tuple[KeyField, ...],
             sources: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The EntryFilter attributes that ``args`` give this filter (``key_fields`` and
        ``sources``: what the dashboard is configured with, for the filters that name them)."""
        raw = _clean(args.get(self.name))
        return {self.name: None if raw is None else self.parse(raw)}

    def blank(self, raw: object) -> bool:
        """Whether ``raw`` gives this filter no value: missing, '' or spaces (no filter)."""
        return _clean(raw) is None

    def write(self, flt: "EntryFilter") -> dict[str, str]:
        """The query arguments that give ``flt``'s value of this filter back (none without one)."""
        value = getattr(flt, self.name)
        if value is None:
            return {}
        return {self.name: format_time(value) if isinstance(value, datetime) else str(value)}

    def conditions(self, flt: "EntryFilter", engine: Engine) -> list:
        """The SQL conditions on entries of ``flt``'s value."""
        value = getattr(flt, self.name)
        return [] if value is None else self.where(engine, value)

    def group_conditions(self, flt: "EntryFilter") -> list:
        """The SQL conditions on failure_groups, for a filter the kept counts hold."""
        value = getattr(flt, self.name)
        return [] if value is None or self.on_groups is None else self.on_groups(value)

    def keeps_statement(self, flt: "EntryFilter") -> bool:
        """Whether ``flt``'s statement holds its value alone, so Store.statement_for may keep it."""
        return True

    def selection_words(self, param: str, value: str, labels: Mapping[int, str]) -> str:
        """``param=value`` in a job's selection, as a person reads it."""
        return self.words(param, value, labels) if self.words else f"{param}={value}"

    @property
    def option(self) -> tuple[str, str, str]:
        """The command-line option: (flag, metavar, help); ``--msg-id`` for msg_id, as options are written."""
        return f"--{self.name.replace('_', '-')}", self.metavar or self.name.upper(), self.description

    def from_option(self, text: str, key_fields: tuple[KeyField, ...]) -> tuple[str, str]:
        """The (parameter, value) that the option's ``text`` stands for."""
        return self.name, text


class AgoFilter(ListFilter):
    """``since`` and ``until``: an RFC 3339 time, or a duration back from now (15m, 1h, 1d, 7d)
    that is kept as given (``since_ago``, ``until_ago``), so that a link or saved view stays "the
    last hour" (or "older than a week") instead of the hour it was made."""

    @property
    def ago(self) -> str:
        """The EntryFilter attribute that keeps the duration as given."""
        return f"{self.name}_ago"

    def read(self, args: Mapping[str, str], key_fields: tuple[KeyField, ...],
             sources: tuple[str, ...] | None = None) -> dict[str, Any]:
        raw = _clean(args.get(self.name))
        at = parse_time(raw) if raw else None
        if raw is None or at is not None:
            return {self.name: at, self.ago: None}
        ago = parse_duration(raw)
        if ago and ago <= 36500 * 86400:  # a longer one would reach before the year 1
            return {self.name: utcnow() - timedelta(seconds=ago), self.ago: raw.lower()}
        raise _time_sentence(self.name, raw, " or a duration back from now such as 15m, 1h or 7d")

    def write(self, flt: "EntryFilter") -> dict[str, str]:
        ago = getattr(flt, self.ago)
        return {self.name: ago} if ago else super().write(flt)

    def keeps_statement(self, flt: "EntryFilter") -> bool:
        return getattr(flt, self.ago) is None  # a duration back from now is a new time at each request


class SourceFilter(ListFilter):
    """``source``: one of the dashboard's sources (SPEC section 12, DLQ_CONFIG's names; ``default``
    without it). Given ``sources`` (the configured ones, and the name given if entries carry it:
    source_names.filter_sources), another name is a 400 that lists them; without them (a job's
    stored selection read again) any well-formed name is taken."""

    def read(self, args: Mapping[str, str], key_fields: tuple[KeyField, ...],
             sources: tuple[str, ...] | None = None) -> dict[str, Any]:
        raw = _clean(args.get(self.name))
        if raw is None:
            return {self.name: None}
        if sources is not None and raw not in sources:
            raise FilterError(f"source {raw[:40]!r} is not valid: use one of {', '.join(sources)}")
        if len(raw) > 40 or not set(raw) <= _SOURCE_CHARS:
            raise FilterError(f"source {raw[:40]!r} is not valid: a source's name is 1 to 40 letters, digits, "
                              "'_' or '-'")
        return {self.name: raw}


_SOURCE_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class KeyFieldFilters(ListFilter):
    """``field.<label>=<value>``: one filter for each key field (DLQ_LIST_FIELDS, given as
    ``key_fields``), each keeping the entries whose payload has exactly that value there (untrimmed)."""

    family = True

    def takes(self, param: str) -> bool:
        return isinstance(param, str) and param.startswith(FIELD_PREFIX)

    def read(self, args: Mapping[str, str], key_fields: tuple[KeyField, ...],
             sources: tuple[str, ...] | None = None) -> dict[str, Any]:
        by_label = {f.label: f for f in key_fields}
        found = []
        for name in args:
            if not self.takes(name):
                continue
            label = name[len(FIELD_PREFIX):]
            if label not in by_label:
                raise _not_a_key_field(name, by_label)
            value = args.get(name)
            if value:  # matched exactly as given (" C-9" is not "C-9"): only an empty one is no filter
                found.append((by_label[label], value))
        return {"field_values": tuple(found)}

    def blank(self, raw: object) -> bool:
        return raw is None or raw == ""  # spaces are a value here

    def selection_words(self, param: str, value: str, labels: Mapping[int, str]) -> str:
        return f"{param}={value!r}" if value != value.strip() else f"{param}={value}"  # its spaces seen

    def write(self, flt: "EntryFilter") -> dict[str, str]:
        return {f.param: value for f, value in flt.field_values}

    def conditions(self, flt: "EntryFilter", engine: Engine) -> list:
        found = [field_condition(engine, f, value) for f, value in flt.field_values]
        return found + [Entry.payload_opaque == false()] if found and flt.hidden_payloads else found

    def group_conditions(self, flt: "EntryFilter") -> list:
        return []

    def keeps_statement(self, flt: "EntryFilter") -> bool:
        return not flt.field_values  # the query depends on how far the backfill has come (Store._selection)

    @property
    def option(self) -> tuple[str, str, str]:
        return "--field", "LABEL=VALUE", ("A key field's exact value, as LABEL=VALUE (DLQ_LIST_FIELDS names the "
                                          "labels); give it once for each field.")

    def from_option(self, text: str, key_fields: tuple[KeyField, ...]) -> tuple[str, str]:
        label, equals, value = text.partition("=")
        if not equals or not label:
            raise FilterError(f"--field {text!r} is not LABEL=VALUE: give a key field's label, '=' and the "
                              f"value (e.g. --field {key_fields[0].label if key_fields else 'Customer'}=C-42)")
        if label not in {f.label for f in key_fields}:
            raise _not_a_key_field(f"--field {label}", {f.label: f for f in key_fields})
        return FIELD_PREFIX + label, value


def _not_a_key_field(name: str, by_label: Mapping[str, KeyField]) -> FilterError:
    known = ", ".join(by_label) if by_label else "none (DLQ_LIST_FIELDS is not set)"
    return FilterError(f"{name} is not a key field: the key fields are {known}")


#: The list's filters, in the order their parameters are written (links, saved views, jobs).
FILTERS: tuple[ListFilter, ...] = (
    # A group belongs to one source, so the kept counts hold it.
    SourceFilter("source", "Only entries of this source (DLQ_CONFIG's [[sources]] names; \"default\" without it).",
                 where=_one(Entry.source), on_groups=lambda value: [GROUPS.c.source == value], kept=True,
                 metavar="NAME"),
    ListFilter("status", "Only entries with this status.", parse=_status, where=_one(Entry.status), kept=True,
               schema={"type": "string", "enum": list(STATUSES)}),
    ListFilter("subject", "Original subject; NATS wildcards: '*' one token, '>' the rest.",
               parse=validate_subject_pattern,
               where=lambda engine, value: [subject_condition(Entry.original_subject, value)],
               on_groups=lambda value: [subject_condition(GROUPS.c.subject, value)], kept=True),
    ListFilter("stream", "Original stream or DLQ stream.",
               where=lambda engine, value: [or_(Entry.original_stream == value, Entry.dlq_stream == value)]),
    ListFilter("consumer", "Durable consumer that gave up.", where=_one(Entry.consumer)),
    # An order's id from a ticket, where the payload is bytes a search cannot read (revision 0022).
    ListFilter("msg_id", f"The original message's Nats-Msg-Id ({contract.ORIGINAL_MSG_ID}), exactly.",
               where=_one(Entry.original_msg_id), metavar="MSGID"),
    # A group's reason is '' where its entries have none, as is its subject.
    ListFilter("reason", f"{contract.REASON}: schema_invalid, max_deliveries, fatal, terminated, or as given.",
               where=_one(Entry.reason), on_groups=lambda value: [GROUPS.c.reason == value], kept=True),
    ListFilter("q", "Full text over payload, error and subject; every word must match, the last as a prefix.",
               where=lambda engine, value: [search_condition(engine, value)], search=True, metavar="WORDS"),
    AgoFilter("since", "Received at or after: an RFC 3339 time, or a duration back from now (15m, 1h, 1d, 7d).",
              where=lambda engine, value: [Entry.received_at >= value], metavar="TIME", schema=TIME_OR_DURATION),
    AgoFilter("until", "Received before: an RFC 3339 time, or a duration back from now (1h, 7d: what is older).",
              where=lambda engine, value: [Entry.received_at < value], metavar="TIME", schema=TIME_OR_DURATION),
    # Its id as /groups links it (or, from older links, its key text).
    ListFilter("group", "A failure group's id, as GET /api/groups and /groups give it.",
               where=lambda engine, value: [Entry.group_id.in_(select(GROUPS.c.id).where(_named_group(value)))],
               on_groups=lambda value: [_named_group(value)], kept=True, words=_group_words, leads=True,
               metavar="ID"),
    # A job's failures are listed, and acted on, as any selection is (its page links them).
    ListFilter("job", f"A bulk job's id (GET /api/jobs): the entries it took; ID:STATE those of its items in that "
                      f"state ({', '.join(ITEM_STATES)}), e.g. 12:failed.",
               parse=_job_part, where=_job_items, words=_job_words, leads=True, metavar="ID[:STATE]"),
    KeyFieldFilters("field.<label>", "A key field's exact value (DLQ_LIST_FIELDS names the labels; an unknown "
                                     "one is a 400)."),
)


def filter_of(param: str) -> ListFilter | None:
    """The declaration whose parameter ``param`` is (``field.<label>`` for every label), or None."""
    return next((declared for declared in FILTERS if declared.takes(param)), None)


@dataclass(frozen=True)
class EntryFilter:
    """What the list, the API, the export and bulk jobs select entries by: a value for each of
    FILTERS (None where it is not given), and the page."""

    source: str | None = None
    status: str | None = None
    subject: str | None = None
    stream: str | None = None
    consumer: str | None = None
    msg_id: str | None = None
    reason: str | None = None
    q: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None
    group: str | None = None
    job: JobPart | None = None
    # ``since`` and ``until`` as given when they are a duration back from now (AgoFilter).
    since_ago: str | None = None
    until_ago: str | None = None
    # Key fields (DLQ_LIST_FIELDS) and the value each must have: field.<label>=<value>.
    field_values: tuple[tuple[KeyField, str], ...] = ()
    # What the reader may reach (access/visible.py puts a scoped reader's scopes here): None for
    # everything. Not a filter of the list: never in to_args, links or a job's selection words.
    scopes: tuple[Scope, ...] | None = None
    # Whether the reader's DLQ_MASK hides some payloads whole (it holds a pointer): then a key
    # field's value finds none of those (entries.payload_opaque), whose key fields read "•••" to
    # them; a filter by it would tell the value. Set as ``scopes`` is (``seen_through``).
    hidden_payloads: bool = False

    @classmethod
    def from_args(cls, args: Mapping[str, str], *, max_limit: int = MAX_LIMIT,
                  key_fields: tuple[KeyField, ...] = (), sources: tuple[str, ...] | None = None) -> "EntryFilter":
        """Parse request arguments; raise FilterError with a sentence for a bad value.

        ``key_fields`` are those ``field.<label>`` may name (settings.list_fields), ``sources``
        the names ``source`` may take (the runtime's feeds; None: any well-formed one)."""
        values: dict[str, Any] = {}
        for declared in FILTERS:
            values.update(declared.read(args, key_fields, sources))
        limit_raw = _clean(args.get("limit"))
        limit = DEFAULT_LIMIT
        if limit_raw is not None:
            try:
                limit = whole_number(limit_raw, "limit", low=1, high=max_limit)
            except InvalidRequest as exc:
                raise FilterError(str(exc)) from None
        cursor = _clean(args.get("cursor"))
        if cursor is not None:
            decode_cursor(cursor)
        return cls(**values, limit=limit, cursor=cursor)

    def to_args(self) -> dict[str, str]:
        """The filter as query arguments (for URLs that share a view), without paging."""
        args: dict[str, str] = {}
        for declared in FILTERS:
            args.update(declared.write(self))
        return args

    def seen_through(self, mask: Mask | None) -> "EntryFilter":
        """The filter as a reader who sees entries through ``mask`` filters (``hidden_payloads``)."""
        hidden = bool(mask and mask.pointers and self.field_values)
        return replace(self, hidden_payloads=True) if hidden and not self.hidden_payloads else self

    @property
    def filtered(self) -> bool:
        """True when anything narrows the selection (paging aside)."""
        return bool(self.to_args())

    @property
    def keeps_statement(self) -> bool:
        """Whether Store.statement_for may keep this filter's statement (each of FILTERS says)."""
        return all(declared.keeps_statement(self) for declared in FILTERS)

    def conditions(self, engine: Engine, *, search: bool = True) -> list:
        """SQL conditions for everything but paging (``search=False``: without ``q``)."""
        conds = [c for declared in FILTERS if not declared.search for c in declared.conditions(self, engine)]
        if self.scopes is not None:
            conds.append(scope_condition(Entry.original_subject, self.scopes))
        if search:
            conds += [c for declared in FILTERS if declared.search for c in declared.conditions(self, engine)]
        return conds

    def group_conditions(self) -> list:
        """SQL conditions on failure_groups for the filters the kept counts hold (source, subject,
        reason, group; a group's subject and reason are '' where its entries have none)."""
        conds = [c for declared in FILTERS for c in declared.group_conditions(self)]
        if self.scopes is not None:  # a group is of one subject and source: a scope covers all or none of it
            conds.append(scope_condition(GROUPS.c.subject, self.scopes))
        return conds

    def _group_condition(self):
        """The failure_groups condition of ``group`` (Store.check_group looks for the group by it)."""
        return _named_group(self.group)
