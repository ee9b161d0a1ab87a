"""The JSON API: entries (the list's and the detail page's data, as JSON), who is asking
(/api/me), and /healthz."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from flask import Blueprint, jsonify, request
from flask_login import current_user
from sqlalchemy.exc import SQLAlchemyError

from ..accounts import session_via
from ..db.bounds import Bounds, bounded
from ..db.liveness import DatabaseState, describe
from ..ingest.progress import failure_text, mirrored_streams
from ..ingest.search_index import search_lag
from ..ingest.writes import read_position
from ..nats.bridge import NatsUnavailable
from ..redaction import scrub
from ..scopes import Grant
from ..times import format_time, utcnow
from . import current_runtime
from .auth import Identity, current_identity, requires
from ..access import visible
from .status import fresh_reports
from .data import current_reader, entries_page, entry_detail, failure_groups, request_filter

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
    """One entry with its delivery history and actions, and what its page shows beside it, from
    the same value (access/detail.py): the current schema's verdict, its failure group, the
    replays (``failed_again``: the newest of them, or null), the payload last sent with the verdict
    on it (null before any republish) and, for a replay, the original's id."""
    return jsonify(entry_detail(entry_id).to_dict())


@bp.route("/api/groups")
@requires("viewer")
def list_groups():
    """Failure groups under the list's filters (every status unless one is given), largest first;
    each with the filter of /api/entries that lists exactly its entries. Not ``exact``: counted
    over the newest ``bound`` matches only (of ``matched`` in all, where a key field's index tells)."""
    answer = failure_groups(request.args)
    tally = answer.tally
    return jsonify(groups=[g.to_dict(answer.base) for g in answer.groups], exact=tally.exact,
                   bound=None if tally.exact else tally.bound, matched=None if tally.exact else tally.matched)


@bp.route("/api/summary")
@requires("viewer")
def list_summary():
    """The list's summary as JSON: entries by status under the list's filters (their status
    aside), the first and last received, and whether the numbers are exact (a search's or a key
    field's are of its newest matches only, beyond a bound: an estimate, each number at least
    what it says); ``matched``, every match counted, where that is known."""
    flt = request_filter(request.args)
    tallies = visible.tallies(current_reader(), current_runtime().store)
    counts, tally = tallies.counts_by_status(flt)
    first, last = tallies.received_range(flt)
    total = sum(counts.values())
    return jsonify(counts=counts, total=total, exact=tally.exact, bound=None if tally.exact else tally.bound,
                   matched=total if tally.exact else tally.matched,
                   first_received=format_time(first) if first else None,
                   last_received=format_time(last) if last else None)


@bp.route("/api/me")
@requires("viewer")
def me():
    """Who is asking: the name, the role, the grants (each a role over its scopes, or null for
    every subject) and how they signed in."""
    return jsonify(who_is_asking(current_identity()))


def who_is_asking(identity: Identity) -> dict:
    """GET /api/me's answer for ``identity``. ``via`` is "password" or "oidc" for a session (as
    its row says), "token" for an API token and "proxy" for a trusted proxy's user header."""
    via = identity.via
    if via == "session":
        # The session's own row says how it was signed in to (the single sign-on writes "oidc").
        via = session_via(current_runtime().engine, current_user.session_key) or "password"
    grants = identity.grants or (Grant(identity.role),)
    return {"name": identity.name, "role": identity.role, "grants": [g.to_dict() for g in grants], "via": via}


def health() -> tuple[dict, int]:
    """The NATS connection, the database and the mirror's lag; 'degraded' while any is not well.
    The top ``nats`` and ``mirror`` are the main source's, ``mirror_lag`` counts every stream of
    every source (SPEC section 6; null while one is unknown); with several sources ``sources``
    holds each one's (its NATS state, mirror streams and lag), and one not well degrades the whole."""
    rt = current_runtime()
    # From memory (the database probe): while it knows the database unreachable nothing here
    # waits on it; otherwise the positions are read under the request's bounds.
    database = rt.database.state.to_dict() if rt.database is not None else DatabaseState().to_dict()
    feeds = list(rt.feeds.values())
    positions: dict[str, dict[str, int] | None] = {feed.name: None for feed in feeds}
    if database["connected"]:
        try:
            positions = {feed.name: committed_positions(rt, feed) for feed in feeds}
        except SQLAlchemyError as exc:
            database.update(connected=False, last_error=describe(exc))
    bridges = [rt.bridge if feed.name == rt.main_source else feed.bridge for feed in feeds]
    if len(feeds) == 1:
        answers = [stream_heads(bridges[0], feeds[0].settings)]
    else:
        # Each source's streams are asked at once, on its own connection: together they take at
        # most HEALTH_TIMEOUT, and a source that does not answer delays none of the others.
        with ThreadPoolExecutor(max_workers=len(feeds), thread_name_prefix="healthz") as pool:
            answers = list(pool.map(stream_heads, bridges, [feed.settings for feed in feeds]))
    reports = {}
    for feed, (nats, heads) in zip(feeds, answers):
        mirror, lag, following = mirror_health(rt, heads, positions[feed.name], feed)
        well = bool(nats.get("connected")) and lag is not None and following
        reports[feed.name] = {"status": "ok" if well else "degraded", "nats": nats, "mirror_lag": lag,
                              "mirror": mirror}
    main = reports[rt.main_source]
    ok = database["connected"] and all(report["status"] == "ok" for report in reports.values())
    lags = [report["mirror_lag"] for report in reports.values()]
    body = {"status": "ok" if ok else "degraded", "nats": main["nats"], "database": database,
            "mirror_lag": None if None in lags else sum(lags), "mirror": main["mirror"], "search_lag": None}
    if database["connected"]:
        # Search lags the list by design (ingest/search_index.py): told, not a degradation.
        try:
            body["search_lag"] = search_lag(rt.engine).to_dict()
        except SQLAlchemyError:
            pass
    if len(feeds) > 1:
        body["sources"] = reports
    return body, 200 if ok else 503


def committed_positions(rt, feed) -> dict[str, int]:
    """The sequence committed to the database of each stream ``feed``'s mirror follows, read within
    the bound of the streams' answer (/healthz and /metrics ask it; a page's bound is 5 s)."""
    with bounded(Bounds(statement=HEALTH_TIMEOUT)):
        return {name: read_position(rt.engine, name, feed.name)[1] for name in mirrored_streams(feed.settings)}


def stream_heads(bridge, settings) -> tuple[dict, dict[str, int] | None]:
    """(the connection's state, each mirrored stream's last sequence as NATS answers now, or None).
    While the liveness probe says NATS is unreachable this answers at once from memory; otherwise
    the streams are asked, for at most HEALTH_TIMEOUT together (cut short if the probe gives up
    meanwhile), so a load balancer's check never hangs on a frozen server."""
    if bridge is None:
        return {"connected": False, "last_error": "not started"}, None
    nats, heads = bridge.state.to_dict(), None
    try:
        heads = bridge.call(lambda: _stream_heads(bridge.js, mirrored_streams(settings)), timeout=HEALTH_TIMEOUT)
    except NatsUnavailable as exc:
        nats["last_error"] = nats.get("last_error") or scrub(str(exc))
    except Exception as exc:  # a missing stream is reported, not raised (JetStream missing: a sentence)
        nats["last_error"] = failure_text(exc)
    return nats, heads


# What an anonymous caller reads instead of an error text (which may name servers and addresses).
HIDDEN_ERROR = "not well; an admin sees why"


def anonymous_health(body: dict) -> dict:
    """``body`` as anyone may read it: the statuses without a server's URL or an error's text."""
    def hide(value):
        if isinstance(value, dict):
            return {key: (HIDDEN_ERROR if item else item) if key in ("last_error", "error") else hide(item)
                    for key, item in value.items() if key != "url"}
        return value
    return hide(body)


def _caller_is_admin() -> bool:
    # Only a request that brings a token or a session is looked up: a load balancer's check never
    # waits on the database, and a database that cannot say who is asking shows the public body.
    trusted = current_runtime().settings.trusted_header
    if not (request.headers.get("Authorization") or request.cookies or (trusted and request.headers.get(trusted))):
        return False
    try:
        identity = current_identity()
    except Exception:  # noqa: BLE001 - health answers whoever asks, the database away or not
        return False
    return identity is not None and identity.may("admin")


async def _stream_heads(js, streams: list[str]) -> dict[str, int]:
    return {name: (await js.stream_info(name)).state.last_seq for name in streams}


def mirror_health(rt, heads: dict[str, int] | None, positions: dict[str, int] | None,
                  feed=None) -> tuple[dict, int | None, bool]:
    """(the mirror's state per stream, ``mirror_lag`` over every mirrored stream, whether it is
    well) of ``feed``'s source (None: the main one). The process that mirrors answers from memory:
    how far each stream is committed, and whether one is stuck (a write failing, retried until it
    succeeds) or behind (its oldest message waiting ``mirror_stale_after`` seconds). Another
    replica knows only the committed positions in the database (``positions``); its lag is None
    while NATS or the database does not answer."""
    feed = feed or rt.feeds[rt.main_source]
    mirror = rt.mirror if feed.name == rt.main_source else feed.mirror
    streams = mirrored_streams(feed.settings)
    leader = mirror is not None and mirror.leader
    if leader:
        # From memory, which knows a commit first; until the mirror has read its position (NATS
        # away since the start) memory says 0, the database what is committed (as /metrics).
        committed = {name: max(mirror.progress[name].last_seq, (positions or {}).get(name) or 0) for name in streams}
    else:
        committed = {name: (positions or {}).get(name) for name in streams}
    now, well, report = utcnow(), True, {}
    for name in streams:
        last_seq = committed[name]
        # Unknown (and so degraded) while a stream does not answer, for instance while a
        # clustered stream elects a leader, even before the mirror notices.
        lag = None if heads is None or last_seq is None else max(heads[name] - last_seq, 0)
        state = {"last_seq": last_seq, "lag": lag, "error": None, "stuck_since": None, "behind_since": None,
                 "missed": None}
        if leader:
            progress = mirror.progress[name]
            behind = progress.behind_since()
            state.update(error=progress.error, stuck_since=format_time(progress.stuck_since),
                         behind_since=format_time(behind), missed=progress.missed)
            stale = behind is not None and (now - behind).total_seconds() >= rt.settings.mirror_stale_after
            well = well and progress.error is None and not stale
        report[name] = state
    lags = [state["lag"] for state in report.values()]
    total = None if None in lags else sum(lags)
    if not leader and total:
        # Messages wait and no process mirrors them: not this one (its mirror's process is being
        # replaced, or it has not taken the lease yet), nor another replica (none reports under a
        # lease that holds, save this process's own ended mirror).
        own = getattr(mirror, "holder", None)
        well = well and any(r.holder != own for r in fresh_reports(rt, feed.name, now))
    return {"leader": leader, "streams": report}, total, well


@bp.route("/healthz")
@requires(None, from_memory=True)
def healthz():
    """Health for load balancers and people; no payloads, no login. Only an admin reads the
    server's (redacted) URL and the error texts."""
    # Its reads get the bound of the streams' answer, not a page's (DLQ_DB_STATEMENT_TIMEOUT): a
    # table locked by hand held every probe for the whole statement timeout (5 s), which a load
    # balancer's check gives up on long before. What they could not read is null.
    with bounded(Bounds(statement=HEALTH_TIMEOUT)):
        body, status = health()
    if not _caller_is_admin():
        body = anonymous_health(body)
    return jsonify(body), status


@bp.route("/readyz")
@requires(None, from_memory=True)
def readyz():
    """Readiness for a load balancer: whether this replica can serve the pages, that is whether
    the database answers (from memory, the database probe). A mirror behind or stuck, and NATS
    away, leave it ready: the pages say so, and /healthz reports them. Were those to take it
    out, every replica of a desk would leave the rotation together during the incident they
    are there for (a burst the mirror catches up, a replica that takes the mirror over)."""
    rt = current_runtime()
    state = rt.database.state if rt.database is not None else DatabaseState()
    if state.reachable:
        return jsonify(status="ready"), 200
    return jsonify(status="not ready", database={"connected": False,
                                                 "unreachable_since": format_time(state.unreachable_since)}), 503
