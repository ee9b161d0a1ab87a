"""A failure group as the pages and the API show it: entries of one subject and reason whose
errors say the same thing (the key is computed at ingest: ingest/grouping.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..times import format_time


@dataclass
class Group:
    """Entries of one subject and reason whose errors normalize to the same text."""

    subject: str | None
    reason: str | None
    key: str
    count: int
    first_seen: datetime | None
    last_seen: datetime | None

    def filter_args(self) -> dict[str, str]:
        """The list filter that shows this group's entries."""
        args = {"group": self.key}
        if self.subject:
            args["subject"] = self.subject
        if self.reason:
            args["reason"] = self.reason
        return args

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "reason": self.reason, "error": self.key, "count": self.count,
                "first_seen": format_time(self.first_seen), "last_seen": format_time(self.last_seen)}
