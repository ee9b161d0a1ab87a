"""Times as the dashboard stores them (naive UTC) and as it shows them (RFC 3339 with a Z)."""

from __future__ import annotations

from datetime import datetime, timezone


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


def as_time(value) -> datetime | None:
    """A time read back from the database: min()/max() over a DateTime column come back from
    SQLite as text, not as datetime."""
    if value is None or isinstance(value, datetime):
        return value
    return parse_time(str(value).replace(" ", "T"))
