"""What /sources counts of each source (SPEC section 12): its open entries, the entries that
arrived in each minute of the last hour, and its biggest open groups, all from the kept counts
(failure_groups, whose rows carry their source, and the minute buckets of arrivals), so the page
costs the same at a thousand entries and at a million. A scoped reader's counts hold only the
groups whose subject their scopes cover in that source (entries/scoping.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Engine, and_, func, or_, select

from ..db.counts import ARRIVALS, GROUPS, bucket
from ..db.engine import read_transaction
from ..scopes import Scope
from ..times import utcnow
from .groups import Group
from .scoping import scope_condition
from .tallies import group_from_row

#: The minutes of the trend: the last hour, the current minute last.
TREND_MINUTES = 60
#: The biggest open groups shown for each source.
TOP_GROUPS = 5


@dataclass
class SourceCounts:
    """One source's counts as a reader may see them."""

    name: str
    open: int = 0
    # Entries (any status now) that arrived in each of the last TREND_MINUTES minutes, the current one last.
    trend: list[int] = field(default_factory=lambda: [0] * TREND_MINUTES)
    trend_start: datetime | None = None
    groups: list[Group] = field(default_factory=list)  # the biggest open groups, largest first

    @property
    def last_hour(self) -> int:
        """Entries that arrived in the last hour (the trend's minutes together)."""
        return sum(self.trend)


def reaches(scopes: tuple[Scope, ...] | None, source: str) -> bool:
    """Whether a reader of ``scopes`` (None: everything) may read any entry of ``source``: a scope
    without a source reaches every source, one with a source that source only."""
    return scopes is None or any(s.source in (None, source) for s in scopes)


def _of_source(source: str, scopes: tuple[Scope, ...] | None):
    """The condition on failure_groups that keeps the groups of ``source`` the scopes cover."""
    cover = scope_condition(GROUPS.c.subject, scopes, source)
    return and_(GROUPS.c.source == source, *([cover] if cover is not None else []))


def source_counts(engine: Engine, names: list[str], scopes: tuple[Scope, ...] | None = None, *,
                  top: int = TOP_GROUPS, now: datetime | None = None) -> dict[str, SourceCounts]:
    """The counts of each source of ``names`` a reader of ``scopes`` reaches (``reaches``), in the
    order given: two queries over every source (open counts, the last hour's minute buckets) and
    one a source for its biggest open groups."""
    names = [name for name in names if reaches(scopes, name)]
    end = bucket(now or utcnow(), 60) + timedelta(minutes=1)
    start = end - timedelta(minutes=TREND_MINUTES)
    found = {name: SourceCounts(name, trend_start=start) for name in names}
    if not names:
        return found
    within = or_(*(_of_source(name, scopes) for name in names))
    with read_transaction(engine) as conn:
        for source, n in conn.execute(select(GROUPS.c.source, func.sum(GROUPS.c.open_count))
                                      .where(within).group_by(GROUPS.c.source)):
            found[source].open = int(n or 0)
        # The minute buckets of each group (not group 0, every group of every source together).
        minutes = (select(GROUPS.c.source, ARRIVALS.c.bucket, func.sum(ARRIVALS.c.count))
                   .select_from(ARRIVALS.join(GROUPS, GROUPS.c.id == ARRIVALS.c.group_id))
                   .where(ARRIVALS.c.width == 60, ARRIVALS.c.bucket >= start, ARRIVALS.c.bucket < end, within)
                   .group_by(GROUPS.c.source, ARRIVALS.c.bucket))
        for source, at, n in conn.execute(minutes):
            index = int((_as_datetime(at) - start).total_seconds() // 60)
            if 0 <= index < TREND_MINUTES:
                found[source].trend[index] += int(n)
        for name in names:
            if not found[name].open or top <= 0:
                continue
            rows = conn.execute(select(GROUPS).where(_of_source(name, scopes), GROUPS.c.open_count > 0)
                                .order_by(GROUPS.c.open_count.desc(), GROUPS.c.subject, GROUPS.c.id)
                                .limit(top)).all()
            found[name].groups = [group_from_row(r, r.open_count, r.first_seen, r.last_seen) for r in rows]
    return found


def _as_datetime(at) -> datetime:
    # SQLite may hand the bucket back as its stored text.
    return at if isinstance(at, datetime) else datetime.fromisoformat(str(at))
