"""Reading what the mirror receives: a DLQ message's contract headers (SPEC section 4) into an
entry's columns, and JetStream's consumer advisories (SPEC section 5).

Parsing never raises: a malformed field is kept raw in the headers and explained in
``notes``, so that no message can crash or stall the mirror.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from datetime import datetime, timedelta
from typing import Any, Mapping

import orjson

from dlq_consumer import headers as contract

from ..masking import Mask
from ..nats.headers import MORE, UNREAD
from ..nats.streams import ADVISORY_PREFIX
from ..surrogates import dumps_kept, shown
from ..times import format_time, parse_time
from .grouping import group_key, schema_key

# The contract's names as they are compared: header names match case-insensitively.
H_ORIGINAL_SUBJECT = contract.ORIGINAL_SUBJECT.lower()
H_ORIGINAL_STREAM = contract.ORIGINAL_STREAM.lower()
H_ORIGINAL_SEQ = contract.ORIGINAL_SEQ.lower()
H_CONSUMER = contract.CONSUMER.lower()
H_ORIGINAL_MSG_ID = contract.ORIGINAL_MSG_ID.lower()
H_REASON = contract.REASON.lower()
H_ERROR = contract.ERROR.lower()
H_SCHEMA_ERRORS = contract.SCHEMA_ERRORS.lower()
H_DELIVERIES = contract.DELIVERIES.lower()
H_FAILED_AT = contract.FAILED_AT.lower()
#: The note of a copy without Dlq-Original-Subject (left out where its advisory names the subject: merge.py).
NO_SUBJECT = f"No {contract.ORIGINAL_SUBJECT} header: it cannot be republished."
H_REPLAY_OF = contract.REPLAY_OF.lower()
H_NATS_MSG_ID = contract.NATS_MSG_ID.lower()


def normalize_headers(headers: Mapping[str, Any] | None, notes: list[str] | None = None) -> dict[str, list[str]]:
    """Headers as name -> list of values, names as given (nats-py keeps one value a name: the
    others of a name given more than once come under nats/headers.py MORE). What reading the
    header block left out or changed (nats/headers.py UNREAD) is not a header: it is a note,
    added to ``notes``."""
    result: dict[str, list[str]] = {}
    more: dict[str, list[str]] = {}
    for name, value in (headers or {}).items():
        if name == UNREAD:
            if notes is not None:
                notes.append(f"Some header lines could not be read as they came ({value}); the stream holds the "
                             "message as it came.")
            continue
        if name == MORE:
            more = json.loads(value)
            continue
        values = value if isinstance(value, list) else [value]
        result.setdefault(str(name), []).extend(str(v) for v in values)
    for name, values in more.items():
        if name in result:
            result[name] = values
    return result


#: The largest value each column takes on every database (a sequence is 64-bit, a count 32-bit):
#: a header past it is kept as given with a note, never a write that fails for ever.
SEQ_MAX, COUNT_MAX = 2**63 - 1, 2**31 - 1


def _int_field(first: Mapping[str, str], name: str, label: str, notes: list[str],
               high: int = SEQ_MAX) -> int | None:
    raw = first.get(name)
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    digits = text[1:] if text[:1] == "-" else text
    # ASCII digits only: Python's int() also reads "٣", "1_000" and "+5", none of which the
    # contract's producers write (a header so written is kept as given, with a note).
    try:
        value = int(text) if digits.isascii() and digits.isdigit() else None
    except ValueError:  # more digits than int() reads
        value = None
    if value is None:
        notes.append(f"{label} {raw[:40]!r} is not a whole number; kept as given in the headers.")
        return None
    if value < 0:
        notes.append(f"{label} {raw!r} is negative; kept as given in the headers.")
        return None
    if value > high:
        shown = raw if len(raw) <= 40 else raw[:40] + "…"
        notes.append(f"{label} {shown!r} is larger than {high:,}; kept as given in the headers.")
        return None
    return value


def parse_schema_errors(raw: str | None, notes: list[str]) -> list[dict] | None:
    """Parse a ``Dlq-Schema-Errors`` value into [{"path", "message"}], noting what is malformed."""
    if raw is None or raw.strip() == "":
        return None
    errors, noted, _, _ = _schema_errors(raw)
    notes.extend(noted)
    return [dict(error) for error in errors] if errors is not None else None


_CACHED_SCHEMA_ERRORS = 4096  # characters: a longer value is read each time, never kept


def _schema_errors(raw: str) -> tuple[tuple[dict, ...] | None, tuple[str, ...], str | None, str | None]:
    """(the errors, the notes about them, their JSON for the column, their group key or None)."""
    if len(raw) <= _CACHED_SCHEMA_ERRORS:
        return _schema_errors_kept(raw)
    return _read_schema_errors_whole(raw)


def _read_schema_errors_whole(raw: str) -> tuple[tuple[dict, ...] | None, tuple[str, ...], str | None, str | None]:
    notes: list[str] = []
    errors = _read_schema_errors(raw, notes)
    if errors is None:
        return None, tuple(notes), None, None
    return tuple(errors), tuple(notes), orjson.dumps(errors).decode(), schema_key(errors)


# The failures of one cause repeat their schema errors: each text is read once (its JSON for the
# column and its group key too). Callers never change what is kept: they copy the errors.
_schema_errors_kept = lru_cache(maxsize=4096)(_read_schema_errors_whole)


def _read_schema_errors(raw: str, notes: list[str]) -> list[dict] | None:
    try:
        value = orjson.loads(raw)
    except ValueError:
        try:  # what orjson refuses and Python's json reads: NaN, numbers past 64 bits, "\udcff"
            value = json.loads(raw)
        except RecursionError:
            notes.append(f"{contract.SCHEMA_ERRORS} nests too deep to read; kept as given in the headers.")
            return None
        except ValueError:
            notes.append(f"{contract.SCHEMA_ERRORS} is not valid JSON; kept as given in the headers.")
            return None
    if not isinstance(value, list):
        notes.append(f"{contract.SCHEMA_ERRORS} is not a JSON array; kept as given in the headers.")
        return None
    errors = []
    for item in value:
        if isinstance(item, dict) and isinstance(item.get("message"), str):
            path = item.get("path", "")
            errors.append({"path": _shown(path if isinstance(path, str) else _json_text(path), notes),
                           "message": _shown(item["message"], notes)})
        else:
            errors.append({"path": "", "message": _json_text(item)})
            notes.append(f"A {contract.SCHEMA_ERRORS} item is not {{\"path\", \"message\"}}; shown as given.")
    return errors


def _json_text(value: Any) -> str:
    """A value of the header's JSON as JSON text (ASCII: its escapes say what no column keeps)."""
    try:
        return json.dumps(value)
    except RecursionError:
        return "(nested too deep to show)"


def _shown(text: str, notes: list[str]) -> str:
    """A schema error's text as a column keeps it on every database: a NUL or half a UTF-16 pair
    (JSON's "\\u0000", "\\udcff") as U+FFFD, said once; the header keeps them as given. Neither
    could be stored (PostgreSQL's text holds no NUL; no database stores half a pair)."""
    if "\x00" not in text and not _SURROGATE.search(text):
        return text
    told = (f"{contract.SCHEMA_ERRORS} held characters no text column keeps (a NUL, half a UTF-16 pair): "
            "shown as U+FFFD; kept as given in the headers.")
    if told not in notes:
        notes.append(told)
    return _SURROGATE.sub("\ufffd", text.replace("\x00", "\ufffd"))


_CONTRACT_NAMES = frozenset({H_ORIGINAL_SUBJECT, H_ORIGINAL_STREAM, H_ORIGINAL_SEQ, H_CONSUMER, H_ORIGINAL_MSG_ID,
                             H_REASON, H_ERROR, H_SCHEMA_ERRORS, H_DELIVERIES, H_FAILED_AT, H_REPLAY_OF})


def _contract_names(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(contract header name in lower case, the first of ``names`` that is it), for the contract's
    names among a message's header names. The producers of a stream send the same names message
    after message: each set of names is looked at once."""
    if len(names) > 64:
        return _find_contract_names(names)
    return _contract_names_kept(names)


def _find_contract_names(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    for name in names:
        lowered = name.lower()
        if lowered in _CONTRACT_NAMES:
            found.setdefault(lowered, name)
    return tuple(found.items())


_contract_names_kept = lru_cache(maxsize=1024)(_find_contract_names)


@lru_cache(maxsize=1024)
def _names_twice(names: tuple[str, ...]) -> bool:
    """Whether a contract name is among ``names`` more than once (in other cases: "Dlq-Reason",
    "dlq-reason"); each set of names is looked at once."""
    lowered = [name.lower() for name in names if name.lower() in _CONTRACT_NAMES]
    return len(lowered) != len(set(lowered))


def given_twice(normalized: Mapping[str, list[str]], notes: list[str]) -> None:
    """A note for each contract header given more than once (under one name or in other cases):
    SPEC section 4 gives each one value, and the first is the one read. Dlq-Original-Subject
    with different values is also said to keep the entry from a republish (actions/decisions.py
    subjects_given refuses it): where it would go is not certain."""
    given: dict[str, list[str]] = {}
    for name, values in normalized.items():
        if name.lower() in _CONTRACT_NAMES:
            given.setdefault(name.lower(), []).extend(values)
    for name, values in given.items():
        if len(values) < 2:
            continue
        title = next(c for c in contract.CONTRACT_HEADERS if c.lower() == name)
        distinct = list(dict.fromkeys(values))
        if len(distinct) == 1:
            notes.append(f"{title} was given {len(values)} times, each {_quoted(values[0])}.")
            continue
        listed = ", ".join(_quoted(v) for v in distinct[:5]) + (f" and {len(distinct) - 5} more" if len(distinct) > 5 else "")
        notes.append(f"{title} was given {len(values)} times ({listed}): the first, {_quoted(values[0])}, is used"
                     + ("; where to republish it is not certain, so it is not republished." if name == H_ORIGINAL_SUBJECT
                        else "."))


def _quoted(value: str) -> str:
    return repr(shown(value) if len(value) <= 80 else shown(value[:80]) + "…")


#: The most of a contract header's value an entry's column holds, in UTF-8 bytes: the column's
#: length on PostgreSQL (which an insert of arrays would cut silently, so that a failure group
#: named by the whole value was never found again), and within an index row's 2,704 bytes for
#: the columns a key is made of. Past it, a name is kept by no column (a part of it would name
#: another subject, stream, consumer or message); a reason is cut.
COLUMN_BYTES = ((H_ORIGINAL_SUBJECT, 1024), (H_ORIGINAL_STREAM, 255), (H_CONSUMER, 255),
                (H_ORIGINAL_MSG_ID, 1024), (H_REPLAY_OF, 255), (H_REASON, 255))


def within_columns(first: dict[str, str], notes: list[str]) -> dict[str, str]:
    """``first`` (lowercased contract names -> values) with each value its column holds, noted."""
    bounded = None
    for name, limit in COLUMN_BYTES:
        value = first.get(name)
        if value is None or len(value) <= limit // 4 or len(value.encode()) <= limit:
            continue
        bounded = bounded if bounded is not None else dict(first)
        if name == H_REASON:
            bounded[name] = value.encode()[:limit].decode("utf-8", "ignore")
            notes.append(f"{name.title()} is longer than {limit} bytes: its start is kept (the headers keep it whole).")
        else:
            del bounded[name]
            notes.append(f"{name.title()} is longer than {limit:,} bytes: not kept as a field (the headers keep it)"
                         + (", so it cannot be republished." if name == H_ORIGINAL_SUBJECT else "."))
    return first if bounded is None else bounded


def _without_nul(first: dict[str, str], notes: list[str]) -> dict[str, str]:
    # PostgreSQL's text holds no NUL: a value with one would fail its batch's write for ever.
    found = sorted(name.title() for name, value in first.items() if "\x00" in value)
    if not found:
        return first
    notes.append(f"{', '.join(found)} held NUL characters, shown as \ufffd here (the headers keep them).")
    return {name: value.replace("\x00", "\ufffd") for name, value in first.items()}


# Dlq-Replay-Of: a stream's name (no blank, no "." or wildcard, as NATS names streams) and a sequence.
_REF = re.compile(r"[^\s.*>:]+:(?!0\d)\d{1,19}", re.ASCII)
# A leap second's seconds field, read as the last microsecond of its minute (times.py).
_LEAP_SECOND = re.compile(r"[Tt ]\d\d:\d\d:60(?=[.,Zz+-]|$)")
#: How far past the time the stream stored a message its Dlq-Failed-At may lie without a note.
FUTURE_SLACK = timedelta(days=1)


def _odd_time(raw: str, failed_at: datetime, stored_at: datetime | None, notes: list[str]) -> None:
    """A note when Dlq-Failed-At read as a time other than it says: a leap second (no time here
    has a 60th second), or one later than the stream stored the message."""
    if ":60" in raw and _LEAP_SECOND.search(raw):
        notes.append(f"{contract.FAILED_AT} {raw!r} is a leap second, read as {format_time(failed_at)} (the last "
                     "microsecond of its minute, in UTC); kept as given in the headers.")
    if stored_at is not None and failed_at > stored_at and failed_at > stored_at + FUTURE_SLACK:
        notes.append(f"{contract.FAILED_AT} {raw!r} ({format_time(failed_at)}) is after the DLQ stream stored the "
                     f"message ({format_time(stored_at)}): the sender's clock or header is wrong.")


def entry_from_dlq_message(
    *, stream: str, epoch: str, seq: int, headers: Mapping[str, Any] | None, payload: bytes,
    stored_at: datetime | None, received_at: datetime,
) -> dict[str, Any]:
    """Turn one DLQ-stream message into the column values of an entry, and three values that are
    no column: ``group_key`` (its failure group's key), ``failed_at_given`` (whether
    ``failed_at`` is its Dlq-Failed-At; without one it is the time the stream stored it) and
    ``stored_at`` (when the DLQ stream stored it: db/triage.py judges a regression by it)."""
    notes: list[str] = []
    if headers and (UNREAD in headers or MORE in headers):  # what the block's reading set apart
        headers = normalize_headers(headers, notes)
    # This runs for every mirrored message: nats-py hands over one string a name, so the
    # common case skips the general normalisation.
    if headers and all(type(v) is str for v in headers.values()):
        normalized = {str(k): [v] for k, v in headers.items()}
        # A name given twice in other cases (rare): the first one counts, as below.
        names = tuple(headers)
        first = {lowered: headers[name] for lowered, name in _contract_names(names)}
        repeated = _names_twice(names)  # one value a name here: only other cases can repeat one
    else:
        normalized = normalize_headers(headers)
        first = {}
        for name, values in normalized.items():
            if values:
                first.setdefault(name.lower(), values[0])
        repeated = any(len(v) > 1 for v in normalized.values()) or _names_twice(tuple(normalized))
    if not normalized:
        notes.append("The message has no headers: it was not dead-lettered by the contract.")
    elif first and repeated:
        given_twice(normalized, notes)
    try:
        headers_json = orjson.dumps(normalized).decode()
    except TypeError:  # bytes that are not UTF-8, kept for a republish (nats/headers.py): escapes here
        headers_json = dumps_kept(normalized)
        first = {name: shown(value) for name, value in first.items()}  # a column holds them as shown
    if "\\u0000" in headers_json:  # a NUL (JSON escapes it): one search, not a look at each value
        first = _without_nul(first, notes)
    given, first = first, within_columns(first, notes)
    subject = first.get(H_ORIGINAL_SUBJECT)
    if subject is not None and subject.strip() == "":
        subject = None
    if subject is None and (first is given or H_ORIGINAL_SUBJECT not in given):  # not one too long: said
        notes.append(NO_SUBJECT)
    reason = first.get(H_REASON)
    reason = reason.strip() if reason and reason.strip() else None
    failed_raw = first.get(H_FAILED_AT)
    failed_at = parse_time(failed_raw)
    if failed_raw and failed_at is None:
        notes.append(f"{contract.FAILED_AT} {failed_raw!r} is not an RFC 3339 time; kept as given in the headers.")
    elif failed_at is not None:
        _odd_time(failed_raw, failed_at, stored_at, notes)
    schema_raw = first.get(H_SCHEMA_ERRORS)
    schema_json, schema_group = None, None
    if schema_raw is not None and schema_raw.strip() != "":
        _, noted, schema_json, schema_group = _schema_errors(schema_raw)
        notes.extend(noted)
    error = first.get(H_ERROR)
    replay_of = first.get(H_REPLAY_OF)
    if replay_of is not None and not _REF.fullmatch(replay_of.strip()):
        notes.append(f"{contract.REPLAY_OF} {_quoted(replay_of)} is not <dlq stream>:<seq>, so it names no entry "
                     "this one is a republish of; kept as given in the headers.")
    original_seq = _int_field(first, H_ORIGINAL_SEQ, contract.ORIGINAL_SEQ, notes)
    original_stream = first.get(H_ORIGINAL_STREAM)
    return {
        "status": "open",
        "version": 1,
        "dlq_stream": stream,
        "dlq_epoch": epoch,
        "dlq_seq": seq,
        "original_subject": subject,
        "original_stream": original_stream.strip() if original_stream else None,
        "original_seq": original_seq,
        "consumer": first.get(H_CONSUMER),
        "original_msg_id": first.get(H_ORIGINAL_MSG_ID),
        "reason": reason,
        "error": error,
        "schema_errors": schema_json,
        "deliveries": _int_field(first, H_DELIVERIES, contract.DELIVERIES, notes, COUNT_MAX),
        "failed_at": failed_at or stored_at,
        "failed_at_given": failed_at is not None,
        "stored_at": stored_at,
        "received_at": received_at,
        "headers": headers_json,
        "payload": payload,
        "payload_available": True,
        "payload_opaque": Mask.hides_whole(payload),
        "replay_of": replay_of,
        "sources": "dlq",
        "notes": orjson.dumps(notes).decode() if notes else "[]",
        "closed_by": None,
        "closed_at": None,
        "close_note": None,
        "updated_at": received_at,
        "group_key": schema_group if schema_group is not None else group_key(error, None),
    }


def given_failed_at(headers: Mapping[str, list[str]]) -> datetime | None:
    """The Dlq-Failed-At of a stored entry's headers (name -> values, as stored) as its parse read
    it: the first value of the first name that is it, None without one that reads as a time."""
    raw = next((values[0] for name, values in headers.items() if name.lower() == H_FAILED_AT and values), None)
    return parse_time(raw)


# --- advisories ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Advisory:
    """A parsed consumer advisory: a nak, a max-deliveries or a termination."""

    kind: str  # "nak", "max_deliveries" or "terminated"
    id: str
    at: datetime
    stream: str
    consumer: str | None
    stream_seq: int
    deliveries: int | None
    reason: str | None
    raw: dict


_KIND_BY_SUBJECT = {"MAX_DELIVERIES": "max_deliveries", "MSG_TERMINATED": "terminated",
                    "MSG_NAKED": "nak"}


def parse_advisory(subject: str, data: bytes, fallback_id: str, received_at: datetime) -> Advisory | None:
    """Parse an advisory message; None when it is not one this dashboard understands."""
    if not subject.startswith(ADVISORY_PREFIX):
        return None
    kind = _KIND_BY_SUBJECT.get(subject[len(ADVISORY_PREFIX):].split(".", 1)[0])
    if kind is None:
        return None
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("stream"), str):
        return None
    try:
        stream_seq = int(body.get("stream_seq"))
    except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity
        return None
    if not 0 <= stream_seq <= SEQ_MAX:  # not a sequence of a stream: no entry it could name
        return None
    deliveries = body.get("deliveries")
    if type(deliveries) is not int or not 0 <= deliveries <= COUNT_MAX:
        deliveries = None
    if "\x00" in body["stream"] or _SURROGATE.search(body["stream"]) or len(body["stream"].encode()) > 255:
        return None  # names no stream (a stream's name holds no NUL nor half a character, and is short)
    consumer = body.get("consumer")
    if not isinstance(consumer, str) or len(consumer.encode("utf-8", "replace")) > 255:
        consumer = None
    return Advisory(
        kind=kind,
        id=_text(str(body.get("id") or fallback_id)),
        at=parse_time(body.get("timestamp")) or received_at,
        stream=body["stream"],
        consumer=_text(consumer) if consumer is not None else None,
        stream_seq=stream_seq,
        deliveries=deliveries,
        reason=_text(body["reason"]) if isinstance(body.get("reason"), str) else None,
        raw=body,
    )


def _text(value: str) -> str:
    """A text an advisory gives, as a column holds it on every database: no NUL, and no half of a
    UTF-16 pair (JSON's "\\udcff" reads as one, and no database stores it), each as U+FFFD."""
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    return _SURROGATE.sub("\ufffd", value)


# Half of a UTF-16 pair, as JSON's "\udcff" reads: text no database stores, nor UTF-8 encodes.
_SURROGATE = re.compile("[\ud800-\udfff]")
