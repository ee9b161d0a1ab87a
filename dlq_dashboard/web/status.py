"""Whether what the pages show may be stale: NATS or the database unreachable, or the mirror
stuck on a stream (a write failing, retried until it succeeds) or behind it; with several
sources (SPEC section 12), for each source on its own.

Every page polls ``/status/banner`` (base.html). It answers from what each bridge's liveness
probe, the database probe and each mirror keep in memory, never asking NATS or the database, so
it answers at once when either is frozen. A process that does not mirror a source tells what the
one that does reported last (db/mirror_reports.py, read by the database probe). The same state
renders the actions that need NATS disabled (templating.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from flask import Blueprint, make_response, render_template

from ..db.liveness import DatabaseState
from ..db.mirror_reports import StreamReport
from ..ingest.progress import StreamProgress
from ..runtime import Feed, Runtime
from ..times import format_time, utcnow
from . import current_runtime
from .auth import requires

bp = Blueprint("status", __name__)

NOT_STARTED = "the dashboard's background services are not running"

#: A source's state, worst first (docs/sources.md says what each means).
SOURCE_STATES = ("unreachable", "stuck", "lagging", "ok")


@dataclass(frozen=True)
class StreamLag:
    """A stream the mirror is behind on: messages not yet mirrored, and since when the oldest waits."""

    stream: str
    messages: int
    since: datetime


@dataclass(frozen=True)
class StreamStuck:
    """A stream the mirror cannot write: why, since when, and how many messages wait."""

    stream: str
    error: str
    since: datetime
    messages: int


def source_state(nats_usable: bool, progress: Iterable[StreamProgress | StreamReport] | None, stale_after: float,
                 now: datetime) -> str:
    """A source's state from its bridge's liveness and its mirror's progress (None: unknown here,
    neither mirrored by this process nor reported lately by the one that does), worst first:
    "unreachable" while its NATS does not answer, "stuck" while writing one of its streams fails,
    "lagging" once the oldest message not yet mirrored has waited ``stale_after`` seconds, else
    "ok"."""
    if not nats_usable:
        return "unreachable"
    streams = list(progress or ())
    if any(p.error is not None for p in streams):
        return "stuck"
    if any((behind := p.behind_since()) is not None and (now - behind).total_seconds() >= stale_after
           for p in streams):
        return "lagging"
    return "ok"


@dataclass(frozen=True)
class SourceStatus:
    """One source's NATS liveness and mirror state as this process knows them now."""

    name: str
    nats_usable: bool
    nats_since: datetime | None
    nats_error: str | None
    lagging: tuple[StreamLag, ...] = ()
    stuck: tuple[StreamStuck, ...] = ()
    # Whether this process mirrors the source (holds its lease); another replica knows NATS only.
    mirrored_here: bool = False
    state: str = "ok"
    # When the lease of the process that mirrored it ran out, while no process mirrors it (a
    # replica died; another takes the lease over within seconds): its streams wait meanwhile.
    unmirrored_since: datetime | None = None
    # When the last report of the process that mirrors it was made, while that report is late (no
    # newer one came within its interval: the holder frozen, or failing to renew its lease).
    report_late_since: datetime | None = None

    @property
    def well(self) -> bool:
        return self.state == "ok"

    @property
    def nats_down(self) -> str | None:
        """Why actions that need this source's NATS cannot be done now (a sentence), or None."""
        if self.nats_usable:
            return None
        return f"NATS is not reachable ({self.nats_error or 'connecting'})"


@dataclass(frozen=True)
class ServiceStatus:
    """NATS's liveness and the mirror's state as this process knows them now: the fields of the
    main source (the first), and with several sources each one in ``sources``."""

    nats_usable: bool
    nats_since: datetime | None
    nats_error: str | None
    lagging: tuple[StreamLag, ...]
    stuck: tuple[StreamStuck, ...] = ()
    database: DatabaseState = DatabaseState()
    # Every source, the main one first; empty or one: the dashboard of one source, told as before.
    sources: tuple[SourceStatus, ...] = ()
    unmirrored_since: datetime | None = None  # the main source's (SourceStatus)
    report_late_since: datetime | None = None  # the main source's (SourceStatus)

    @property
    def several(self) -> bool:
        """Whether the banner names the source of each line (more than one source)."""
        return len(self.sources) > 1

    @property
    def stale(self) -> bool:
        """True while the pages may show old data."""
        main = not self.nats_usable or bool(self.lagging) or bool(self.stuck) or not self.database.reachable \
            or self.unmirrored_since is not None or self.report_late_since is not None
        return main or any(not s.well for s in self.sources)

    @property
    def nats_down(self) -> str | None:
        """Why actions that need NATS cannot be done now (a sentence), or None."""
        if self.nats_usable:
            return None
        return f"NATS is not reachable ({self.nats_error or 'connecting'})"

    def to_dict(self) -> dict[str, Any]:
        return {"stale": self.stale,
                "nats": {"usable": self.nats_usable, "unreachable_since": format_time(self.nats_since),
                         "last_error": self.nats_error},
                "lagging": [{"stream": lag.stream, "messages": lag.messages, "since": format_time(lag.since)}
                            for lag in self.lagging],
                "stuck": [{"stream": s.stream, "error": s.error, "since": format_time(s.since),
                           "messages": s.messages} for s in self.stuck],
                "unmirrored_since": format_time(self.unmirrored_since),
                "database": self.database.to_dict()}


def feed_status(rt: Runtime, feed: Feed, now: datetime | None = None) -> SourceStatus:
    """One source's status from memory: its bridge's state and its mirror's progress, where this
    process mirrors it, or else as the process that mirrors it reported it last (read by the
    database probe); the main source's: the runtime's own bridge and mirror.

    A lag counts once its oldest message has waited ``mirror_stale_after`` seconds, so a mirror
    that keeps up with a busy stream (always a batch behind) does not raise the banner. A stuck
    stream counts at once, and is told as stuck (with its error) rather than as behind.
    """
    now = now or utcnow()
    main = feed.name == rt.main_source
    bridge, mirror = (rt.bridge, rt.mirror) if main else (feed.bridge, feed.mirror)
    if bridge is None:
        usable, since, error = False, None, NOT_STARTED
    else:
        state = bridge.state
        usable, since, error = state.connected, state.unreachable_since, state.last_error
    lagging, stuck, progress, unmirrored_since, late_since = [], [], None, None, None
    mirrored_here = mirror is not None and mirror.leader
    if mirrored_here:
        progress = list(mirror.progress.values())
    else:
        # Another process mirrors it: what that one reported last (db/mirror_reports.py), if current.
        progress = fresh_reports(rt, feed.name, now) or None
        reports = rt.reports.get(feed.name, ())
        late = [r for r in reports if r.until > now and r.late(now)]
        if progress is None and late:  # its lease holds, its reports stopped coming: how far it is is not known
            late_since = max(r.reported_at for r in late)
        elif progress is None:  # one did, and its lease has run out: none does until another takes it
            unmirrored_since = max((r.until for r in reports), default=None)
    if progress is not None:
        for p in progress:
            failed, failed_since = p.error, p.stuck_since
            behind = p.behind_since()
            if failed is not None and failed_since is not None:
                stuck.append(StreamStuck(p.stream, failed, failed_since, p.known_lag or 0))
            elif behind is not None and (now - behind).total_seconds() >= rt.settings.mirror_stale_after:
                lagging.append(StreamLag(p.stream, p.lag, behind))
    state = source_state(usable, progress, rt.settings.mirror_stale_after, now)
    return SourceStatus(feed.name, usable, since, error, tuple(lagging), tuple(stuck), mirrored_here,
                        "stuck" if state == "ok" and (unmirrored_since or late_since) else state, unmirrored_since,
                        late_since)


def fresh_reports(rt: Runtime, source: str, now: datetime) -> tuple[StreamReport, ...]:
    """The report of ``source``'s mirror that the database probe read last, while it is current:
    not once the lease it came with has expired (its holder may be gone; another process may take
    over), nor once it is older than its holder's interval allows (StreamReport.late: the holder
    frozen; its lag then counts NATS's head against what is committed, web/sources.py, as /healthz)."""
    return tuple(r for r in rt.reports.get(source, ()) if r.current(now))


def service_status(rt: Runtime) -> ServiceStatus:
    """The status from memory: each source's bridge state and, on the process that mirrors it, its
    progress (feed_status); the top fields are the main source's."""
    now = utcnow()
    sources = tuple(feed_status(rt, feed, now) for feed in rt.feeds.values())
    main = sources[0]
    database = rt.database.state if rt.database is not None else DatabaseState()
    return ServiceStatus(main.nats_usable, main.nats_since, main.nats_error, main.lagging, main.stuck, database,
                         sources if len(sources) > 1 else (), main.unmirrored_since, main.report_late_since)


@bp.route("/status/banner")
@requires("viewer", fragment=True, from_memory=True)
def banner():
    """The stale-data banner (an htmx fragment every page polls); empty while all is well."""
    response = make_response(render_template("_status_banner.html", service=service_status(current_runtime())))
    response.headers["Cache-Control"] = "no-store"
    return response
