"""A failure group as the pages and the API show it: entries of one source, subject and reason whose
errors say the same thing (which group an entry joins is decided at ingest: ingest/grouping.py;
its counts are kept in failure_groups: db/counts.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime
from typing import Any, Mapping

from dlq_consumer import headers as contract

from ..ingest import grouping
from ..scopes import DEFAULT_SOURCE
from ..times import format_time

#: The longest label shown; the full key stays available beside it.
LABEL_LENGTH = grouping.MAX_LABEL
_SPACES = re.compile(r"\s+")


def group_label(key: str) -> str:
    """A group's key as one readable line (ingest/grouping.py says how its keys read): the
    placeholders stay (``customer <id> not found`` says what varied), several schema failures read
    as the first and how many more, and a long key is cut at a word."""
    return grouping.group_label(_SPACES.sub(" ", key or "").strip(), LABEL_LENGTH)


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
    # The source (SPEC section 12) its entries were mirrored from: a group belongs to one.
    source: str = DEFAULT_SOURCE
    # Triage (SPEC section 11): the state people share, who has it, its team, and its version.
    state: str = "open"
    assignee: str | None = None
    team: str | None = None
    version: int = 1
    notes: int = 0
    resolved_in: str | None = None
    until: datetime | None = None
    until_count: int | None = None
    # An ignored group's new failures since it was ignored (what until_count is counted against).
    ignored_seen: int | None = None
    state_changed_at: datetime | None = None

    @cached_property
    def label(self) -> str:
        """The key as one readable line."""
        return group_label(self.key)

    @property
    def repairable(self) -> bool:
        """Whether its entries are JSON payloads their schema failed: the group Repair by schema
        is offered on (a timeout's or a fatal error's payloads, and payloads that are not JSON,
        have nothing the repair could change)."""
        return self.reason == contract.REASON_SCHEMA_INVALID and not grouping.unread_payloads(self.key)

    def filter_args(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The list filter that shows this group's entries: ``base`` (the other filters the
        group was counted under) with this group's id."""
        return {**(base or {}), "group": str(self.id)}

    def to_dict(self, base: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The group as /api/groups answers it; ``filter`` lists exactly its ``count`` entries
        when ``base`` holds the filters it was counted under. Its ``group`` is the id as ``id``
        gives it, an integer (SPEC: ``"filter": {"group": id}``); the other filters stay text."""
        return {"id": self.id, "source": self.source, "subject": self.subject, "reason": self.reason,
                "label": self.label, "count": self.count, "by_status": self.by_status, "first_seen": format_time(self.first_seen),
                "last_seen": format_time(self.last_seen), "filter": {**self.filter_args(base), "group": self.id},
                **self.state_dict()}

    def state_dict(self) -> dict[str, Any]:
        """Its triage fields as the API answers them."""
        return {"state": self.state, "assignee": self.assignee, "team": self.team, "version": self.version,
                "notes": self.notes, "resolved_in": self.resolved_in, "until": format_time(self.until),
                "until_count": self.until_count, "ignored_seen": self.ignored_seen,
                "state_changed_at": format_time(self.state_changed_at)}
