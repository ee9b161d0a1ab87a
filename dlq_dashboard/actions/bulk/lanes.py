"""A bulk republish's items by source (SPEC section 12): a lane a source, each with its own
windows, pacing, publishing process and wait for its NATS.

With one source a job has one lane over all its items, exactly as before sources. With several,
a republish job has a lane for each source its pending items are of: each lane reads its own
windows (its items in entry order), takes from its own token bucket (DLQ_REPUBLISH_RATE applies
to each source separately), publishes through its own source's connection, and while its
source's NATS is unreachable its items wait and the other lanes go on. The job takes the lanes
in turn, so two sources' items proceed side by side at the rate each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from ...db.models import Entry, JobItem
from ...sources import acting_source, source_settings, sources_of
from ..context import ActionContext
from .pacing import TokenBucket

ITEMS, ENTRIES = JobItem.__table__, Entry.__table__


def source_names(rt: ActionContext) -> list[str]:
    """The sources this dashboard has, in DLQ_CONFIG's order."""
    return [s.name for s in sources_of(rt.settings)]


def several_sources(rt: ActionContext) -> bool:
    """Whether this dashboard has more than one source (then a republish job goes by lanes)."""
    return len(sources_of(rt.settings)) > 1


def connected(rt: ActionContext, source: str) -> bool:
    """Whether the NATS of ``source`` is usable now."""
    bridge = rt.bridge_for(source)
    return bridge is not None and bridge.state.connected


def not_configured(source: str, entry_id: int) -> str:
    """Why an item of a source this dashboard no longer has is not republished."""
    return (f"Source '{source}' is not configured here (DLQ_CONFIG names no such source), so entry {entry_id} "
            "cannot be republished from this dashboard.")


@dataclass
class Lane:
    """One source's share of a job. ``source`` None: the one lane of a job with one source (or
    a close), over every item. ``after``: the last entry id its pass has taken; ``resume_at``:
    until then it waits (its last window's republishes wait for NATS)."""

    source: str | None
    configured: bool = True
    after: int = 0
    bucket: TokenBucket | None = None
    publisher: Any = None  # Publisher, False (could not be started) or None (not yet)
    resume_at: float = 0.0
    # The source whose connection its items go through: ``source``, or the source whose
    # renamed_from gives ``source`` (an old name's entries keep it). None: ``source``.
    via: str | None = None

    def where(self) -> list:
        """What narrows the job's items to this lane's (a join with entries; none for the one lane)."""
        return [] if self.source is None else [ENTRIES.c.source == self.source]

    def wait_a_second(self) -> None:
        """Its republishes wait for NATS: a second, then a new pass from its first item."""
        self.after = 0
        self.resume_at = time.monotonic() + 1.0


@dataclass
class Lanes:
    """A job's lanes and whose turn is next."""

    lanes: list[Lane]
    several: bool  # a lane a source (a republish on a dashboard of several sources)
    _next: int = field(default=0)

    @classmethod
    def of_job(cls, rt: ActionContext, conn, job, republishing: bool, rate: int, size: int) -> "Lanes":
        """The lanes of a job as it is now: one, or (a republish with several sources) one for
        each source its pending items are of, configured ones first in their order."""
        def bucket(source: str | None) -> TokenBucket | None:
            return TokenBucket(rate, size, name=source) if rate > 0 else None

        if not (republishing and several_sources(rt)):
            return cls([Lane(None, bucket=bucket(None))], several=False)
        found = set(conn.execute(select(ENTRIES.c.source).distinct().select_from(
            ITEMS.join(ENTRIES, ENTRIES.c.id == ITEMS.c.entry_id))
            .where(ITEMS.c.job_id == job["id"], ITEMS.c.state == "pending")).scalars())
        names = source_names(rt)
        ordered = [n for n in names if n in found] + sorted(found - set(names))
        # An old name of a renamed_from goes through the source that gives it (its NATS, its settings).
        vias = {n: acting_source(rt.settings, n) for n in ordered}
        return cls([Lane(n, configured=vias[n] in names, bucket=bucket(n), via=vias[n]) for n in ordered],
                   several=True)

    def __len__(self) -> int:
        return len(self.lanes)

    def __iter__(self):
        return iter(self.lanes)

    def usable(self, rt: ActionContext, lane: Lane) -> bool:
        """Whether a lane may take a window now: its source's NATS is connected (an unconfigured
        source's items are failed, so it needs none) and it is not waiting."""
        if not self.several:
            return True  # the one lane: the job's turn checks NATS as a whole
        if lane.resume_at > time.monotonic():
            return False
        return not lane.configured or connected(rt, lane.source)

    def pick(self, rt: ActionContext) -> Lane | None:
        """The next lane in turn that may take a window; None when none may (they all wait).
        A lane passed over because its NATS is away starts its next pass from its first item."""
        count = len(self.lanes)
        for k in range(count):
            index = (self._next + k) % count
            lane = self.lanes[index]
            if self.usable(rt, lane):
                self._next = (index + 1) % count
                return lane
            lane.after = 0
        return None

    def drop(self, lane: Lane) -> None:
        """A lane whose pass from its first item found nothing pending: its items are settled."""
        self.lanes.remove(lane)
        self._next = self._next % len(self.lanes) if self.lanes else 0

    def waiting(self, rt: ActionContext) -> list[str]:
        """The sources whose lanes wait for their NATS now."""
        return list(dict.fromkeys(lane.via or lane.source for lane in self.lanes
                                  if self.several and lane.configured and not connected(rt, lane.source)))


def publisher_settings(rt: ActionContext, lane: Lane):
    """The settings a lane's publishing process connects with: its source's NATS."""
    if lane.source is None:
        return rt.settings
    source = next(s for s in sources_of(rt.settings) if s.name == (lane.via or lane.source))
    return source_settings(rt.settings, source)


def read_window(conn, job_id: int, lane: Lane | None, size: int) -> list[tuple]:
    """A lane's next window: (entry id, version) of its pending items after ``lane.after``."""
    if lane is None:
        return []
    query = select(ITEMS.c.entry_id, ITEMS.c.version).where(
        ITEMS.c.job_id == job_id, ITEMS.c.state == "pending", ITEMS.c.entry_id > lane.after)
    if lane.source is not None:
        query = query.select_from(ITEMS.join(ENTRIES, ENTRIES.c.id == ITEMS.c.entry_id)).where(*lane.where())
    # Plain tuples, which the garbage collector stops tracking: rows kept from one window to the
    # next would be scanned again by every full collection.
    return [tuple(r) for r in conn.execute(query.order_by(ITEMS.c.entry_id).limit(size))]


def pending_sources(conn, job_id: int, sources: list[str]) -> list[str]:
    """Which of ``sources`` a job still has pending items of (in the order given)."""
    if not sources:
        return []
    found = set(conn.execute(select(ENTRIES.c.source).distinct().select_from(
        ITEMS.join(ENTRIES, ENTRIES.c.id == ITEMS.c.entry_id))
        .where(ITEMS.c.job_id == job_id, ITEMS.c.state == "pending", ENTRIES.c.source.in_(sources))).scalars())
    return [s for s in sources if s in found]
