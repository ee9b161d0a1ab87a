"""The mirror's report: what the process that mirrors a source knows of each of its streams and
keeps in memory only (why a stream is stuck and since when, since when its oldest message waits
unmirrored, the stream's last sequence), told to every other process, a replica that does not
mirror, for its banner and /sources.

The process that mirrors writes it with each renewal of its mirror lease (every 5 s: the
lease's ``report``, ingest/mirror.py); every process reads the reports of the leases held now
once a second with its database probe (db/liveness.py) and keeps them in memory
(Runtime.reports), so the banner still never asks the database. A report says when it was
made and how often they come: one older than that allows (``late``: a holder frozen, or its
renewals failing) is not told as current, though its lease holds for 15 s; nor one whose lease
has expired (a holder that died: another process may take over).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from sqlalchemy import Connection, select

from ..times import utcnow
from .leases import RELEASED
from .models import Lease

LEASES = Lease.__table__
#: How much later than its interval a report may come and still be current: the probe reads
#: them once a second, and a renewal's write takes a moment.
REPORT_GRACE = 2.5


@dataclass(frozen=True)
class StreamReport:
    """One stream as the process that mirrors it reported it last. Read as a StreamProgress is
    (``error``, ``stuck_since``, ``lag``, ``behind_since()``) by the banner's and /sources' code;
    ``until``: when the lease it came with expires (not told after)."""

    source: str
    stream: str
    last_seq: int
    stream_last_seq: int
    error: str | None
    stuck_since: datetime | None
    behind: datetime | None
    until: datetime
    holder: str = ""  # the lease's holder: a process's own, from a mirror of its that has ended, tells nothing
    head_known: bool = True  # whether the mirror could read the stream's last sequence (StreamProgress)
    reported_at: datetime | None = None  # when the holder made it (None: a replica of before said not)
    every: float | None = None  # how often the holder reports (seconds)

    def late(self, now: datetime) -> bool:
        """Whether a newer report should have come by ``now``: this one is older than the holder's
        interval allows (a holder frozen or failing to renew), so it is not told as current."""
        if self.reported_at is None or self.every is None:
            return False
        return (now - self.reported_at).total_seconds() > self.every + REPORT_GRACE

    def current(self, now: datetime) -> bool:
        """Whether it is told as what the mirror knows now: its lease holds and it is not late."""
        return self.until > now and not self.late(now)

    @property
    def lag(self) -> int:
        return max(self.stream_last_seq - self.last_seq, 0)

    @property
    def known_lag(self) -> int | None:
        return self.lag if self.head_known else None

    def behind_since(self) -> datetime | None:
        return self.behind


def encode_report(source: str, streams: Iterable, every: float | None = None) -> str:
    """A lease's report of ``source``: each of ``streams`` read as a StreamReport is (the mirror's
    StreamProgress: ``stream``, ``last_seq``, ``stream_last_seq``, ``error``, ``stuck_since``,
    ``behind_since()``, ``head_known``), the times naive UTC as every time in the database, with
    when it was made and ``every``: how often the holder reports. Taken on the bridge's thread,
    which alone changes the progress."""
    def at(value: datetime | None) -> str | None:
        return None if value is None else value.isoformat()

    return json.dumps({"source": source, "at": at(utcnow()), "every": every, "streams": [
        {"stream": s.stream, "last_seq": s.last_seq, "stream_last_seq": s.stream_last_seq, "error": s.error,
         "stuck_since": at(s.stuck_since), "behind": at(s.behind_since()), "head_known": s.head_known}
        for s in streams]})


def read_reports(conn: Connection, leases: list[str]) -> dict[str, tuple[StreamReport, ...]]:
    """The reports of these leases (the mirror's of each source), by source: those held now, and
    those whose lease ran out without being given up (its holder stopped renewing it: a replica
    that died), each with its ``until``; a lease given up (release_lease) carries none."""
    def at(value: str | None) -> datetime | None:
        return None if value is None else datetime.fromisoformat(value)

    found: dict[str, tuple[StreamReport, ...]] = {}
    rows = conn.execute(select(LEASES.c.report, LEASES.c.expires_at, LEASES.c.holder)
                        .where(LEASES.c.name.in_(leases), LEASES.c.report.is_not(None), LEASES.c.expires_at > RELEASED))
    for report, until, holder in rows:
        told = json.loads(report)
        found[told["source"]] = tuple(
            StreamReport(told["source"], s["stream"], s["last_seq"], s["stream_last_seq"], s["error"],
                         at(s["stuck_since"]), at(s["behind"]), until, holder, s.get("head_known", True),
                         at(told.get("at")), told.get("every"))
            for s in told["streams"])
    return found
