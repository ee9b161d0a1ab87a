"""The JSON API: entries, and /healthz."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request

from ..bridge import NatsUnavailable
from ..ingest import read_position
from ..store import EntryFilter, FilterError
from .auth import requires

bp = Blueprint("api", __name__)


def runtime():
    """The app's Runtime (database, store, bridge, mirror)."""
    return current_app.extensions["dlq"]


def error(message: str, status: int):
    """An error answer: {"error": sentence} with its status code."""
    return jsonify(error=message), status


@bp.errorhandler(FilterError)
def _bad_filter(exc: FilterError):
    return error(str(exc), 400)


@bp.route("/api/entries")
@requires("viewer")
def list_entries():
    """One page of entries under the list's filters, newest first."""
    flt = EntryFilter.from_args(request.args)
    return jsonify(runtime().store.list_entries(flt).to_dict())


@bp.route("/api/entries/<int:entry_id>")
@requires("viewer")
def get_entry(entry_id: int):
    """One entry with its delivery history and its actions."""
    entry = runtime().store.get_entry(entry_id)
    if entry is None:
        return error(f"No entry {entry_id}.", 404)
    return jsonify(entry.to_dict())


def health() -> tuple[dict, int]:
    """The NATS connection and the mirror's lag; 'degraded' while either is not well."""
    rt = runtime()
    nats = {"connected": False, "last_error": "not started"}
    lag = None
    if rt.bridge is not None:
        nats = rt.bridge.state.to_dict()
        stream = rt.settings.dlq_stream
        try:
            info = rt.bridge.call(lambda: rt.bridge.js.stream_info(stream), timeout=2.0)
            _, position = read_position(rt.engine, stream)
            lag = max(info.state.last_seq - position, 0) if position <= info.state.last_seq else 0
        except NatsUnavailable as exc:
            nats["last_error"] = nats.get("last_error") or str(exc)
        except Exception as exc:  # a missing stream is reported, not raised
            nats["last_error"] = f"{type(exc).__name__}: {exc}"
    mirror = None
    if rt.mirror is not None:
        mirror = {"leader": rt.mirror.leader,
                  "streams": {name: {"last_seq": p.last_seq, "lag": p.lag, "error": p.error}
                              for name, p in rt.mirror.progress.items()}}
    ok = nats.get("connected") and lag is not None
    body = {"status": "ok" if ok else "degraded", "nats": nats, "mirror_lag": lag, "mirror": mirror}
    return body, 200 if ok else 503


@bp.route("/healthz")
@requires(None)
def healthz():
    """Health for load balancers and people; no payloads, no login."""
    body, status = health()
    return jsonify(body), status
