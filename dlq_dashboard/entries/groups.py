"""A failure group as the pages and the API show it: entries of one subject and reason whose
errors say the same thing (which group an entry joins is decided at ingest: ingest/grouping.py;
its counts are kept in failure_groups: db/counts.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..times import format_time


@dataclass
class Group:
    """A failure group: its entries under the filter (``count``) and by status."""

    id: int
    subject: str | None
    reason: str | None
    key: str
    count: int
    first_seen: datetime | None
    last_seen: datetime | None
    by_status: dict[str, int] = field(default_factory=dict)

    def filter_args(self) -> dict[str, str]:
        """The list filter that shows this group's entries."""
        return {"group": str(self.id)}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "subject": self.subject, "reason": self.reason, "label": self.key,
                "count": self.count, "by_status": self.by_status, "first_seen": format_time(self.first_seen),
                "last_seen": format_time(self.last_seen), "filter": self.filter_args()}
