"""/sources and GET /api/sources (SPEC section 12): each source's state (web/status.py, from
memory), its mirror's streams, and its counts as the reader may see them (access/visible.py
``sources``), made once by ``source_overview`` and rendered as a page or as JSON."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import Blueprint, jsonify, url_for
from sqlalchemy.exc import SQLAlchemyError

from ..access import visible
from ..access.reader import Reader
from ..entries.sources import SourceCounts
from ..ingest.progress import mirrored_streams
from ..ingest.writes import read_position
from ..runtime import Feed, Runtime
from ..times import format_time, utcnow
from . import current_runtime
from .api import stream_heads
from .auth import requires
from .data import current_reader
from .presenters.charts import Sparkline, build_sparkline
from .responses import page_or_fragment
from .status import SOURCE_STATES, SourceStatus, feed_status, fresh_reports

bp = Blueprint("sources", __name__)


@dataclass(frozen=True)
class SourceView:
    """One source as /sources and GET /api/sources show it."""

    status: SourceStatus
    counts: SourceCounts
    streams: list[dict]

    @property
    def name(self) -> str:
        return self.status.name

    @property
    def mirror_lag(self) -> int | None:
        """Messages not yet mirrored over its streams; None where this process does not mirror it."""
        lags = [s["lag"] for s in self.streams]
        return None if not lags or None in lags else sum(lags)

    @property
    def trend(self) -> Sparkline:
        return build_sparkline(self.counts.trend, "min")

    @property
    def burning(self) -> tuple:
        """Its place on the page, worst first: its state, then the most new entries, then the most open."""
        return SOURCE_STATES.index(self.status.state), -self.counts.last_hour, -self.counts.open

    def to_dict(self) -> dict[str, Any]:
        s, c = self.status, self.counts
        return {"name": s.name, "status": s.state, "mirror_lag": self.mirror_lag, "open": c.open,
                "last_hour": c.last_hour, "streams": self.streams,
                "nats": {"connected": s.nats_usable, "unreachable_since": format_time(s.nats_since),
                         "last_error": s.nats_error},
                "mirrored_here": s.mirrored_here,
                "trend": {"start": format_time(c.trend_start), "minutes": list(c.trend)},
                "groups": [{"id": g.id, "subject": g.subject, "reason": g.reason, "label": g.label, "open": g.count,
                            "state": g.state, "url": url_for("groups.group_page", group_id=g.id),
                            "entries_url": url_for("pages.index", group=g.id, status="open")} for g in c.groups],
                "entries_url": url_for("pages.index", source=s.name),
                "groups_url": url_for("pages.groups", source=s.name)}


def stream_states(rt: Runtime, feed: Feed, mirrored_here: bool, now: datetime | None = None,
                  nats_usable: bool = True) -> list[dict]:
    """Each stream the source's mirror follows: its committed sequence, the stream's last one, the
    lag and why it is stuck, from the mirror's memory where this process mirrors the source (the
    stream's last sequence and the lag unknown, null, while its NATS is not usable or the mirror
    could not read the stream, as /healthz says).
    Elsewhere the committed sequence is read from the database, and the rest is what the process
    that mirrors the source reported last (db/mirror_reports.py) while that report is current;
    without one (its reports stopped coming, or its lease ran out) the stream's last sequence is
    asked of NATS and the lag is it minus what is committed, as /healthz counts it (null while NATS
    does not answer)."""
    mirror = rt.mirror if feed.name == rt.main_source else feed.mirror
    reported = {} if mirrored_here else {r.stream: r for r in fresh_reports(rt, feed.name, now or utcnow())}
    heads = None
    if not mirrored_here and nats_usable and any(name not in reported for name in mirrored_streams(feed.settings)):
        try:
            heads = stream_heads(rt.bridge if feed.name == rt.main_source else feed.bridge, feed.settings)[1]
        except Exception:  # noqa: BLE001 - the page is answered; the lag stays unknown (null)
            heads = None
    found = []
    for name in mirrored_streams(feed.settings):
        if mirrored_here:
            p = mirror.progress[name]
            # Unknown (null) while its NATS is not usable, and while the mirror has not read the
            # stream (one JetStream will not make, JetStream not enabled): not 0, caught up.
            found.append({"name": name, "last_seq": p.last_seq,
                          "stream_last_seq": p.known_head if nats_usable else None,
                          "lag": p.known_lag if nats_usable else None, "error": p.error,
                          "stuck_since": format_time(p.stuck_since),
                          "behind_since": format_time(p.behind_since())})
            continue
        try:
            last_seq = read_position(rt.engine, name, feed.name)[1]
        except SQLAlchemyError:
            last_seq = None
        state = {"name": name, "last_seq": last_seq, "stream_last_seq": None, "lag": None, "error": None,
                 "stuck_since": None, "behind_since": None}
        report = reported.get(name)
        if report is None and heads is not None and last_seq is not None:
            state.update(stream_last_seq=max(heads[name], last_seq), lag=max(heads[name] - last_seq, 0))
        if report is not None:
            last_seq = report.last_seq if last_seq is None else max(last_seq, report.last_seq)
            head = max(report.stream_last_seq, last_seq) if report.head_known else None
            state.update(last_seq=last_seq, stream_last_seq=head, lag=None if head is None else head - last_seq,
                         error=report.error,
                         stuck_since=format_time(report.stuck_since), behind_since=format_time(report.behind_since()))
        found.append(state)
    return found


def source_overview(reader: Reader) -> list[SourceView]:
    """Every source the reader reaches, in DLQ_CONFIG's order, with its state and its counts."""
    rt = current_runtime()
    counts = visible.sources(reader, rt.store, list(rt.feeds))
    now, views = utcnow(), []
    for name, feed in rt.feeds.items():
        if name not in counts:
            continue  # no scope of the reader's reaches it: not even its counts are told
        status = feed_status(rt, feed, now)
        views.append(SourceView(status, counts[name], stream_states(rt, feed, status.mirrored_here, now,
                                                                    status.nats_usable)))
    return views


@bp.route("/sources")
@requires("viewer")
def sources_page():
    """Where it burns, at a glance: each source's state, open entries, the last hour's arrivals,
    mirror and biggest open groups, worst first; the block polls itself."""
    shown = sorted(source_overview(current_reader()), key=lambda v: v.burning)
    response = page_or_fragment("sources.html", "sources", sources=shown)
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.route("/api/sources")
@requires("viewer")
def api_sources():
    """Each source (DLQ_CONFIG's order): state, mirror lag and streams, open entries, arrivals in
    the last hour with their trend, biggest open groups and links."""
    return jsonify(sources=[view.to_dict() for view in source_overview(current_reader())])
