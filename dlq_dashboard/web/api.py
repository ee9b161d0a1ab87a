"""The JSON API: entries (the list's and the detail page's data, as JSON), and /healthz."""

from __future__ import annotations

from flask import Blueprint, jsonify, request
from sqlalchemy.exc import SQLAlchemyError

from ..db.liveness import DatabaseState, describe
from ..ingest.writes import read_position
from ..nats.bridge import NatsUnavailable
from ..times import format_time
from . import current_runtime
from .auth import requires
from .data import entries_page, entry_detail, failure_groups

bp = Blueprint("api", __name__)
# The longest /healthz waits for the stream's answer (seconds).
HEALTH_TIMEOUT = 0.8


@bp.route("/api/entries")
@requires("viewer")
def list_entries():
    """One page of entries under the list's filters, newest first."""
    _, page = entries_page(request.args)
    return jsonify(page.to_dict())


@bp.route("/api/entries/<int:entry_id>")
@requires("viewer")
def get_entry(entry_id: int):
    """One entry with its delivery history, its actions, the payload last sent with the current
    schema's verdict on it (null before any republish), and ``failed_again``: the id of the newest
    entry whose message was a republish of this one (its republish failed again), or null."""
    return jsonify(entry_detail(entry_id))


@bp.route("/api/groups")
@requires("viewer")
def list_groups():
    """Failure groups under the list's filters (every status unless one is given), largest first;
    each with the filter of /api/entries that lists exactly its entries."""
    _, found, tally, base = failure_groups(request.args)
    return jsonify(groups=[g.to_dict(base) for g in found], exact=tally.whole)


def health() -> tuple[dict, int]:
    """The NATS connection, the database and the mirror's lag; 'degraded' while any is not well."""
    rt = current_runtime()
    stream = rt.settings.dlq_stream
    # From memory (the database probe): while it knows the database unreachable nothing here
    # waits on it; otherwise the position is read under the request's bounds.
    database = rt.database.state.to_dict() if rt.database is not None else DatabaseState().to_dict()
    position = None
    if database["connected"]:
        try:
            _, position = read_position(rt.engine, stream)
        except SQLAlchemyError as exc:
            database.update(connected=False, last_error=describe(exc))
    nats = {"connected": False, "last_error": "not started"}
    lag = None
    if rt.bridge is not None:
        # While the liveness probe says NATS is unreachable this answers at once from memory;
        # otherwise the stream is asked, for at most HEALTH_TIMEOUT (cut short if the probe gives
        # up meanwhile), so a load balancer's check never hangs on a frozen server.
        nats = rt.bridge.state.to_dict()
        try:
            info = rt.bridge.call(lambda: rt.bridge.js.stream_info(stream),
                                  timeout=HEALTH_TIMEOUT)
            if position is not None:
                lag = max(info.state.last_seq - position, 0)
        except NatsUnavailable as exc:
            nats["last_error"] = nats.get("last_error") or str(exc)
        except Exception as exc:  # a missing stream is reported, not raised
            nats["last_error"] = f"{type(exc).__name__}: {exc}"
    mirror = None
    if rt.mirror is not None:
        mirror = {"leader": rt.mirror.leader,
                  "streams": {name: {"last_seq": p.last_seq, "lag": p.lag, "error": p.error,
                                     "behind_since": format_time(p.behind_since())}
                              for name, p in rt.mirror.progress.items()}}
    # The process that mirrors also says whether it is mirroring: a follower that failed (a
    # stream leader being elected, the database gone) resumes by itself, degraded meanwhile.
    following = not (rt.mirror is not None and rt.mirror.leader
                     and any(p.error for p in rt.mirror.progress.values()))
    ok = nats.get("connected") and database["connected"] and lag is not None and following
    body = {"status": "ok" if ok else "degraded", "nats": nats, "database": database, "mirror_lag": lag,
            "mirror": mirror}
    return body, 200 if ok else 503


@bp.route("/healthz")
@requires(None, from_memory=True)
def healthz():
    """Health for load balancers and people; no payloads, no login."""
    body, status = health()
    return jsonify(body), status
