"""Trace links: the W3C Trace Context ``traceparent`` a message carries, and where to open it.

Services built on the seeds' pattern pass the trace context in their headers; an entry whose
headers hold a valid ``traceparent`` shows its trace id, and with DLQ_TRACE_URL a link to it
(``https://tempo.example/trace/{trace_id}``).

The rules are the W3C Trace Context's (Recommendation, section 3.2):

- ``version-traceid-parentid-flags``, each part lowercase hex: version 2 digits, trace id 32,
  parent id 16, flags 2;
- version ``ff`` is invalid; a trace id or parent id of all zeros is invalid;
- version ``00`` has exactly these four parts (55 characters); a later version may carry more
  parts after the flags, each after a ``-``, which a reader of version 00 skips;
- a message with more than one ``traceparent`` value (names match in any case) has none.

Anything else has no trace: an invalid ``traceparent`` is ignored, never shown.

A viewer sees an entry through DLQ_MASK (masking.py): when it names ``traceparent`` the header's
value reads "•••" in what a viewer gets, so no trace is read from it either. That is why the trace
is always read from the headers as shown, never kept beside them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

#: The header's name (matched case-insensitively) and the field a template names.
TRACEPARENT = "traceparent"
TRACE_ID_FIELD = "{trace_id}"

_HEX = "[0-9a-f]"
_VERSION_00 = re.compile(rf"00-({_HEX}{{32}})-({_HEX}{{16}})-({_HEX}{{2}})")
_LATER = re.compile(rf"({_HEX}{{2}})-({_HEX}{{32}})-({_HEX}{{16}})-({_HEX}{{2}})(-.*)?", re.DOTALL)
_ZEROS_32, _ZEROS_16 = "0" * 32, "0" * 16


@dataclass(frozen=True)
class TraceParent:
    """A valid ``traceparent``: its version, trace id, parent (span) id and flags, as hex."""

    version: str
    trace_id: str
    parent_id: str
    flags: str

    @property
    def sampled(self) -> bool:
        """The ``sampled`` flag (the lowest bit)."""
        return bool(int(self.flags, 16) & 1)


def parse_traceparent(value: object) -> TraceParent | None:
    """The trace context of one ``traceparent`` value, or None when it is not valid."""
    if not isinstance(value, str):
        return None
    if value.startswith("00"):
        found = _VERSION_00.fullmatch(value)
        parts = (("00",) + found.groups()) if found else None
    else:
        found = _LATER.fullmatch(value)
        parts = found.groups()[:4] if found and found.group(1) != "ff" else None
    if parts is None or parts[1] == _ZEROS_32 or parts[2] == _ZEROS_16:
        return None
    return TraceParent(*parts)


def traceparent_of(headers: Mapping[str, Iterable[str]] | None) -> TraceParent | None:
    """The trace context of a message's headers (name -> list of values), or None: none, more
    than one, or not valid."""
    values: list = []
    for name, given in (headers or {}).items():
        if isinstance(name, str) and name.lower() == TRACEPARENT:
            values.extend([given] if isinstance(given, str) else given)
    return parse_traceparent(values[0]) if len(values) == 1 else None


def trace_id_of(headers: Mapping[str, Iterable[str]] | None) -> str | None:
    """The trace id of a message's headers, or None (see traceparent_of)."""
    found = traceparent_of(headers)
    return found.trace_id if found else None


def trace_url(template: str | None, trace_id: str | None) -> str | None:
    """The address of a trace: DLQ_TRACE_URL with ``{trace_id}`` filled in; None without either.

    A plain replacement, not ``str.format``: the template has no other fields (config.py), and
    a trace id is 32 hex digits, so nothing in the result needs escaping."""
    if not template or not trace_id:
        return None
    return template.replace(TRACE_ID_FIELD, trace_id)


def short_trace_id(trace_id: str) -> str:
    """The first 8 hex digits of a trace id, as a link's text names it."""
    return trace_id[:8]
