"""The dead-letter header contract (SPEC section 4): the one spelling of the ``Dlq-*`` names.

A service dead-letters a message by publishing its payload, byte for byte, to a subject of the
DLQ stream with these headers. The lifecycle in this package writes them; the dashboard's
ingest reads them (names are matched case-insensitively, so it compares ``name.lower()``).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

ORIGINAL_SUBJECT = "Dlq-Original-Subject"
ORIGINAL_STREAM = "Dlq-Original-Stream"
ORIGINAL_SEQ = "Dlq-Original-Seq"
CONSUMER = "Dlq-Consumer"
ORIGINAL_MSG_ID = "Dlq-Original-Msg-Id"
REASON = "Dlq-Reason"
ERROR = "Dlq-Error"
SCHEMA_ERRORS = "Dlq-Schema-Errors"
DELIVERIES = "Dlq-Deliveries"
FAILED_AT = "Dlq-Failed-At"
REPLAY_OF = "Dlq-Replay-Of"

#: Every contract header, in the order SPEC section 4 lists them.
CONTRACT_HEADERS = (ORIGINAL_SUBJECT, ORIGINAL_STREAM, ORIGINAL_SEQ, CONSUMER, ORIGINAL_MSG_ID, REASON,
                    ERROR, SCHEMA_ERRORS, DELIVERIES, FAILED_AT, REPLAY_OF)
CONTRACT_PREFIX = "dlq-"

#: The broker's deduplication header; ``Nats-*`` headers are set by the server.
NATS_MSG_ID = "Nats-Msg-Id"
SERVER_PREFIX = "nats-"

REASON_SCHEMA_INVALID = "schema_invalid"
REASON_MAX_DELIVERIES = "max_deliveries"
REASON_FATAL = "fatal"
REASON_TERMINATED = "terminated"
#: The reasons the contract names; any other word is kept as given.
REASONS = (REASON_SCHEMA_INVALID, REASON_MAX_DELIVERIES, REASON_FATAL, REASON_TERMINATED)

MAX_ERROR_CHARS = 1000
MAX_SCHEMA_ERRORS = 50

# Half a UTF-16 pair (text decoded with "surrogateescape" or "surrogatepass" holds them): no
# character, so UTF-8 cannot encode it and a header holding one could not be sent.
_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``\\ud800``), so it encodes as UTF-8."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def one_line(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Collapse whitespace runs (newlines would end a NATS header), write lone surrogates as
    escapes (UTF-8 cannot encode them) and cut to ``limit`` chars."""
    flat = " ".join(escape_surrogates(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def describe_error(exc: BaseException) -> str:
    """``Type: message`` on one line, for ``Dlq-Error``."""
    text = str(exc)
    return one_line(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def rfc3339_now() -> str:
    """The current UTC time as RFC 3339 with milliseconds and a ``Z`` (``Dlq-Failed-At``)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def carried(name: str) -> bool:
    """Whether a header of the original message travels with its DLQ copy (SPEC section 4: "all
    other headers"): not the server's ``Nats-*`` (a copied Nats-Msg-Id would make the DLQ publish
    a silent duplicate, a Nats-Stream-Source one is refused, err 10227), nor the ``Dlq-*`` of an
    earlier failure, which would describe the wrong one; save ``Dlq-Replay-Of``, the link back to
    the dashboard entry that was republished."""
    lower = name.lower()
    if lower.startswith(SERVER_PREFIX):
        return False
    return not lower.startswith(CONTRACT_PREFIX) or lower == REPLAY_OF.lower()


def dead_letter_msg_id(stream: str, seq: int) -> str:
    """The deterministic ``Nats-Msg-Id`` of a DLQ copy, so a retried dead-lettering is stored once."""
    return f"{stream}:{seq}:dlq"
