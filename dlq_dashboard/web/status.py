"""Whether what the pages show may be stale: NATS or the database unreachable, or the mirror
stuck on a stream (a write failing, retried until it succeeds) or behind it.

Every page polls ``/status/banner`` (base.html). It answers from what the bridge's liveness
probe, the database probe and the mirror keep in memory, never asking NATS or the database, so
it answers at once when either is frozen. The same state renders the actions that need NATS disabled (templating.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import Blueprint, make_response, render_template

from ..db.liveness import DatabaseState
from ..runtime import Runtime
from ..times import format_time, utcnow
from . import current_runtime
from .auth import requires

bp = Blueprint("status", __name__)

NOT_STARTED = "the dashboard's background services are not running"


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


@dataclass(frozen=True)
class ServiceStatus:
    """NATS's liveness and the mirror's state as this process knows them now."""

    nats_usable: bool
    nats_since: datetime | None
    nats_error: str | None
    lagging: tuple[StreamLag, ...]
    stuck: tuple[StreamStuck, ...] = ()
    database: DatabaseState = DatabaseState()

    @property
    def stale(self) -> bool:
        """True while the pages may show old data."""
        return not self.nats_usable or bool(self.lagging) or bool(self.stuck) or not self.database.reachable

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
                "database": self.database.to_dict()}


def service_status(rt: Runtime) -> ServiceStatus:
    """The status from memory: the bridge's state and, on the process that mirrors, its progress.

    A lag counts once its oldest message has waited ``mirror_stale_after`` seconds, so a mirror
    that keeps up with a busy stream (always a batch behind) does not raise the banner. A stuck
    stream counts at once, and is told as stuck (with its error) rather than as behind.
    """
    bridge = rt.bridge
    if bridge is None:
        usable, since, error = False, None, NOT_STARTED
    else:
        state = bridge.state
        usable, since, error = state.connected, state.unreachable_since, state.last_error
    lagging, stuck = [], []
    mirror = rt.mirror
    if mirror is not None and mirror.leader:
        now = utcnow()
        for name, progress in list(mirror.progress.items()):
            failed, failed_since = progress.error, progress.stuck_since
            behind = progress.behind_since()
            if failed is not None and failed_since is not None:
                stuck.append(StreamStuck(name, failed, failed_since, progress.lag))
            elif behind is not None and (now - behind).total_seconds() >= rt.settings.mirror_stale_after:
                lagging.append(StreamLag(name, progress.lag, behind))
    database = rt.database.state if rt.database is not None else DatabaseState()
    return ServiceStatus(usable, since, error, tuple(lagging), tuple(stuck), database)


@bp.route("/status/banner")
@requires("viewer", fragment=True, from_memory=True)
def banner():
    """The stale-data banner (an htmx fragment every page polls); empty while all is well."""
    response = make_response(render_template("_status_banner.html", service=service_status(current_runtime())))
    response.headers["Cache-Control"] = "no-store"
    return response
