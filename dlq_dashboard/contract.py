"""The dead-letter header contract (SPEC section 4) and JetStream advisories, both directions.

Parsing never raises: a malformed field is kept raw in the headers and explained in
``notes``, so that no message can crash or stall the mirror.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

KNOWN_REASONS = ("schema_invalid", "max_deliveries", "fatal", "terminated")

H_ORIGINAL_SUBJECT = "dlq-original-subject"
H_ORIGINAL_STREAM = "dlq-original-stream"
H_ORIGINAL_SEQ = "dlq-original-seq"
H_CONSUMER = "dlq-consumer"
H_ORIGINAL_MSG_ID = "dlq-original-msg-id"
H_REASON = "dlq-reason"
H_ERROR = "dlq-error"
H_SCHEMA_ERRORS = "dlq-schema-errors"
H_DELIVERIES = "dlq-deliveries"
H_FAILED_AT = "dlq-failed-at"
H_REPLAY_OF = "dlq-replay-of"

# Headers the server sets or that would make a republish fail or vanish: a leftover
# Nats-Msg-Id makes it a silent duplicate, Nats-Stream-Source is refused (err 10227).
_SERVER_HEADER_PREFIX = "nats-"
_CONTRACT_HEADER_PREFIX = "dlq-"


def utcnow() -> datetime:
    """The current time, naive UTC (how times are stored)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def parse_time(raw: str | None) -> datetime | None:
    """Parse an RFC 3339 time to naive UTC; None if absent or unparseable."""
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw.strip())
        if parsed.tzinfo is None:
            return parsed
        return parsed.astimezone(timezone.utc).replace(tzinfo=None)
    except (ValueError, OverflowError):  # OverflowError: year 1 or 9999 moved across midnight
        return None


def format_time(value: datetime | None) -> str | None:
    """Format a stored (naive UTC) time as RFC 3339 UTC with a Z."""
    if value is None:
        return None
    return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def normalize_headers(headers: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """Headers as name -> list of values, names as given (nats-py keeps one value a name)."""
    result: dict[str, list[str]] = {}
    for name, value in (headers or {}).items():
        values = value if isinstance(value, list) else [value]
        result.setdefault(str(name), []).extend(str(v) for v in values)
    return result


def _int_field(first: Mapping[str, str], name: str, label: str, notes: list[str]) -> int | None:
    raw = first.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        notes.append(f"{label} {raw!r} is not a whole number; kept as given in the headers.")
        return None
    if value < 0:
        notes.append(f"{label} {raw!r} is negative; kept as given in the headers.")
        return None
    return value


def parse_schema_errors(raw: str | None, notes: list[str]) -> list[dict] | None:
    """Parse a Dlq-Schema-Errors value into [{"path", "message"}], noting what is malformed."""
    if raw is None or raw.strip() == "":
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        notes.append("Dlq-Schema-Errors is not valid JSON; kept as given in the headers.")
        return None
    if not isinstance(value, list):
        notes.append("Dlq-Schema-Errors is not a JSON array; kept as given in the headers.")
        return None
    errors = []
    for item in value:
        if isinstance(item, dict) and isinstance(item.get("message"), str):
            path = item.get("path", "")
            errors.append({"path": path if isinstance(path, str) else json.dumps(path),
                           "message": item["message"]})
        else:
            errors.append({"path": "", "message": json.dumps(item)})
            notes.append("A Dlq-Schema-Errors item is not {\"path\", \"message\"}; shown as given.")
    return errors


def decode_text(payload: bytes) -> str | None:
    """The payload as text, or None when it is not UTF-8."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return None


def entry_from_dlq_message(
    *, stream: str, epoch: str, seq: int, headers: Mapping[str, Any] | None, payload: bytes,
    stored_at: datetime | None, received_at: datetime,
) -> dict[str, Any]:
    """Turn one DLQ-stream message into the column values of an entry."""
    # This runs for every mirrored message: nats-py hands over one string a name, so the
    # common case skips the general normalisation.
    if headers and all(type(v) is str for v in headers.values()):
        normalized = {str(k): [v] for k, v in headers.items()}
    else:
        normalized = normalize_headers(headers)
    first = {}
    for name, values in normalized.items():
        if values:
            first.setdefault(name.lower(), values[0])
    notes: list[str] = []
    if not normalized:
        notes.append("The message has no headers: it was not dead-lettered by the contract.")
    subject = first.get(H_ORIGINAL_SUBJECT)
    if subject is not None and subject.strip() == "":
        subject = None
    if subject is None:
        notes.append("No Dlq-Original-Subject header: it cannot be republished.")
    reason = first.get(H_REASON)
    reason = reason.strip() if reason and reason.strip() else None
    failed_raw = first.get(H_FAILED_AT)
    failed_at = parse_time(failed_raw)
    if failed_raw and failed_at is None:
        notes.append(f"Dlq-Failed-At {failed_raw!r} is not an RFC 3339 time; kept as given in the headers.")
    schema_errors = parse_schema_errors(first.get(H_SCHEMA_ERRORS), notes)
    original_seq = _int_field(first, H_ORIGINAL_SEQ, "Dlq-Original-Seq", notes)
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
        "error": first.get(H_ERROR),
        "schema_errors": json.dumps(schema_errors) if schema_errors is not None else None,
        "deliveries": _int_field(first, H_DELIVERIES, "Dlq-Deliveries", notes),
        "failed_at": failed_at or stored_at,
        "received_at": received_at,
        "headers": json.dumps(normalized, ensure_ascii=False),
        "payload": payload,
        "payload_available": True,
        "replay_of": first.get(H_REPLAY_OF),
        "sources": "dlq",
        "notes": json.dumps(notes) if notes else "[]",
        "closed_by": None,
        "closed_at": None,
        "close_note": None,
        "updated_at": received_at,
    }


def republish_headers(headers: Mapping[str, list[str]], msg_id: str, replay_of: str) -> dict[str, str]:
    """Original headers minus Dlq-* and Nats-*, plus a fresh Nats-Msg-Id and Dlq-Replay-Of."""
    result: dict[str, str] = {}
    for name, values in headers.items():
        low = name.lower()
        if low.startswith(_CONTRACT_HEADER_PREFIX) or low.startswith(_SERVER_HEADER_PREFIX):
            continue
        if values:
            # nats-py sends one value a header name; the last one wins as it did on receipt.
            result[name] = values[-1]
    result["Nats-Msg-Id"] = msg_id
    result["Dlq-Replay-Of"] = replay_of
    return result


# --- advisories ------------------------------------------------------------------------------

ADVISORY_PREFIX = "$JS.EVENT.ADVISORY.CONSUMER."
ADVISORY_KINDS = ("MAX_DELIVERIES", "MSG_TERMINATED", "MSG_NAKED")


def advisory_subjects() -> list[str]:
    """The advisory subjects the capture stream listens to (SPEC section 5)."""
    return [f"{ADVISORY_PREFIX}{kind}.>" for kind in ADVISORY_KINDS]


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
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("stream"), str):
        return None
    try:
        stream_seq = int(body.get("stream_seq"))
    except (TypeError, ValueError):
        return None
    deliveries = body.get("deliveries")
    return Advisory(
        kind=kind,
        id=str(body.get("id") or fallback_id),
        at=parse_time(body.get("timestamp")) or received_at,
        stream=body["stream"],
        consumer=body.get("consumer") if isinstance(body.get("consumer"), str) else None,
        stream_seq=stream_seq,
        deliveries=deliveries if isinstance(deliveries, int) else None,
        reason=body.get("reason") if isinstance(body.get("reason"), str) else None,
        raw=body,
    )
