"""Times as the dashboard stores them (naive UTC) and as it shows them (RFC 3339 with a Z)."""

from __future__ import annotations

import re
from datetime import datetime, timezone


def utcnow() -> datetime:
    """The current time, naive UTC (how times are stored)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def parse_time(raw: str | None) -> datetime | None:
    """Parse an RFC 3339 time to naive UTC; None if absent, not text (an advisory's JSON may hold
    a number) or unparseable."""
    if not raw or not isinstance(raw, str):
        return None
    try:
        if raw[-1:] == "Z" and raw[-2:-1].isdigit() and raw[10:11] == "T":
            # The usual form (UTC, "Z"), read without the aware value and its conversion.
            parsed = _iso(raw[:-1])
            if parsed.tzinfo is None:
                return parsed
        parsed = _iso(raw.strip())
        if parsed.tzinfo is None:
            return parsed
        return parsed.astimezone(timezone.utc).replace(tzinfo=None)
    except (ValueError, OverflowError):  # OverflowError: year 1 or 9999 moved across midnight
        return None


#: A leap second's seconds field (RFC 3339 section 5.7: "23:59:60Z").
_LEAP = re.compile(r"(?<=[Tt ]\d\d:\d\d:)60(?=[.,Zz+-]|$)")


def _iso(raw: str) -> datetime:
    """``datetime.fromisoformat`` with what RFC 3339 also allows: a lowercase ``t`` and ``z``
    (section 5.6's note) and a leap second, read as the last microsecond of its minute (Python's
    times have no 60th second; the order among the minute's times is kept)."""
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        fixed = raw.upper()
        leap = _LEAP.search(fixed) is not None
        parsed = datetime.fromisoformat(_LEAP.sub("59", fixed) if leap else fixed)
        return parsed.replace(microsecond=999_999) if leap else parsed


def format_time(value: datetime | None) -> str | None:
    """Format a stored (naive UTC) time as RFC 3339 UTC with a Z."""
    if value is None:
        return None
    return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def as_time(value) -> datetime | None:
    """A time read back from the database: min()/max() over a DateTime column come back from
    SQLite as text, not as datetime."""
    if value is None or isinstance(value, datetime):
        return value
    return parse_time(str(value).replace(" ", "T"))


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


#: The longest duration a setting or a request may give (100 years): a retention, a purge's age,
#: an ignore. Further, a time from now or before it leaves the years a date holds.
LONGEST = 36500 * 86400


def parse_duration(raw: str) -> int | None:
    """Seconds in a duration such as ``90s`` or ``30d`` (SPEC section 3; ``0`` alone is zero),
    or None when it does not parse."""
    value = raw.strip().lower()
    if value == "0":
        return 0
    if len(value) < 2 or value[-1] not in _DURATION_UNITS or not (value[:-1].isascii() and value[:-1].isdigit()):
        return None
    return int(value[:-1]) * _DURATION_UNITS[value[-1]]


def format_duration(seconds: int) -> str:
    """The shortest way to write ``seconds`` as a duration: ``30d``, ``36h``, ``90s``."""
    for unit in ("d", "h", "m"):
        if seconds and seconds % _DURATION_UNITS[unit] == 0:
            return f"{seconds // _DURATION_UNITS[unit]}{unit}"
    return f"{seconds}s"


def wait_in_words(seconds: int) -> str:
    """How long to wait, as a person would say it: "30 seconds" under two minutes, then whole
    minutes rounded up ("5 minutes" for 299 seconds), so it is never shorter than the wait."""
    if seconds < 120:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    return f"{-(-seconds // 60)} minutes"
