"""The support-staff pages: the list with its search, chart and counts, the failure groups,
and an entry's detail page (payload beside its schema errors, headers, timeline).

Each page's data is gathered once and rendered either as the full page or, for an htmx
request, as a named block of the same template (``Vary: HX-Request`` on both). The list and an
entry share their data functions with the JSON API (data.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from flask import Blueprint, current_app, make_response, render_template, request, send_from_directory, url_for
from markupsafe import Markup

from dlq_consumer import headers as contract

from ..actions.decisions import no_stream_sentence, republish_refusal, source_verdict
from ..actions.streams import stream_of
from ..entries.filters import DEFAULT_LIMIT, EntryFilter, FilterError
from ..access import visible
from ..errors import Hidden
from ..masking import MASKED, PAYLOAD_HIDDEN, PAYLOAD_REPEATED
from ..entries.tallies import Tallies, served_by_kept_counts
from ..db.triage import STATES
from ..entries.triage import GroupStateFilter
from ..numbers import whole_number
from ..unpacking import compression_of
from ..times import utcnow
from . import current_runtime, params, status
from .auth import current_identity, requires
from .data import (caller_name, current_reader, entries_page, entry_detail, failure_groups, get_entry_or_404,
                   list_fields, request_filter, row_context)
from .presenters.charts import build_chart, build_sparkline, chart_bounds, describe_size
from .presenters.payloads import mark_indexes, view_payload
from .presenters.timeline import build_timeline
from .saved_views import saved_views, view_url
from .responses import IdUrls, htmx, list_url, page_or_fragment, render_block

bp = Blueprint("pages", __name__)
NEW_CAP = 1000
#: The longest search a msgId is looked for by (a msgId of the dashboard's own is about 60).
MSG_ID_HINT_LENGTH = 200


def parse_filter(args, **defaults) -> tuple[EntryFilter, str | None]:
    """The filter of a request, or an empty filter and the sentence saying what is wrong."""
    try:
        return request_filter({**defaults, **args.to_dict()}), None
    except FilterError as exc:
        return EntryFilter(), str(exc)


def example_command() -> str:
    """A NATS CLI command that dead-letters one message into the DLQ stream, for the empty page."""
    pattern = current_runtime().settings.dlq_subjects[0]
    subject = ".".join("orders" if t == "*" else ("orders.created" if t == ">" else t) for t in pattern.split("."))
    return (f"nats pub {subject} '{{\"order_id\": 1}}' -H \"{contract.ORIGINAL_SUBJECT}:orders.created\" "
            f"-H \"{contract.REASON}:{contract.REASON_FATAL}\" -H \"{contract.ERROR}:example failure\"")


# --- the list ---------------------------------------------------------------------------------

#: The list's time presets: ``since`` as a duration back from now, and what its link says.
TIME_PRESETS = (("15m", "15 minutes"), ("1h", "hour"), ("1d", "day"), ("7d", "week"))


@bp.route("/")
@requires("viewer")
def index():
    """The list of entries, newest first, under the filters in the URL."""
    try:
        params.refuse_misspelt(request.args, params.LIST_PARAMETERS)
        (flt, page), filter_error = entries_page(request.args, rows=True), None
    except FilterError as exc:
        flt, page, filter_error = EntryFilter(), None, str(exc)
    top_id = page.entries[0].id if page and page.entries and not flt.cursor else None
    msg_id_hint = _msg_id_hint(flt) if page else None
    # The group filter's chip reads as the group does on its own page, not as its number.
    group_label = visible.group(current_reader(), current_runtime().store, int(flt.group)).label \
        if page and flt.group and flt.group.isascii() and flt.group.isdigit() else None
    response = page_or_fragment(
        "index.html", "results", 400 if filter_error else 200,
        page=page, flt=flt, args=request.args, filter_error=filter_error, top_id=top_id, msg_id_hint=msg_id_hint,
        group_label=group_label,
        filter_args=flt.to_args(), example_command=example_command(), saved=saved_views("list"), view_url=view_url,
        paging={"limit": flt.limit} if flt.limit != DEFAULT_LIMIT else {},
        presets=TIME_PRESETS, **row_context(page.entries if page else []), **pending_summary(flt))
    if htmx and not flt.cursor and not filter_error:
        # The form sends its empty fields too; the address bar gets the tidy, shareable URL.
        response.headers["HX-Push-Url"] = list_url(**flt.to_args())
    return response


def _msg_id_hint(flt: EntryFilter) -> str | None:
    """A search of one word that is the msgId of a dead letter the reader may read (a ticket's
    order id): the ``msg_id`` filter finds it even where its payload is bytes a search cannot read."""
    word = (flt.q or "").strip()
    if not word or flt.msg_id or len(word) > MSG_ID_HINT_LENGTH or any(c.isspace() for c in word):
        return None
    return word if visible.has_msg_id(current_reader(), current_runtime().store, word) else None


def kept_for() -> str | None:
    """How long resolved entries are kept, in words (None: forever), for the summary's retention line."""
    retention = current_runtime().settings.retention
    return describe_size(timedelta(seconds=retention)) if retention else None


def pending_summary(flt: EntryFilter) -> dict:
    """What the list's page renders the summary block with before its counts arrive (/summary):
    the same parts, so that it takes the place the counted one will."""
    return {"summary_pending": True, "chart": build_chart([], []), "kept_for": kept_for(),
            "counted_by_rows": not served_by_kept_counts(flt)}


@bp.route("/summary")
@requires("viewer", fragment=True)
def summary():
    """Counts by status and the chart of failures over time, for the list's filters."""
    flt, filter_error = parse_filter(request.args)
    counts, chart, tally, stored = None, None, None, 0
    if not filter_error:
        tallies = visible.tallies(current_reader(), current_runtime().store)
        counts, tally = tallies.counts_by_status(flt)
        bounds = chart_bounds(*tallies.received_range(flt))
        totals, _ = tallies.received_between(flt, bounds)
        chart = build_chart(bounds, totals)
        # Every entry stored, whatever the filters: what the retention line speaks of.
        stored = sum((counts if not flt.filtered else tallies.counts_by_status(EntryFilter())[0]).values())
    block = render_block("index.html", "summary", flt=flt, counts=counts, chart=chart, tally=tally,
                         filter_error=filter_error, filter_args=flt.to_args(), stored=stored, kept_for=kept_for(),
                         bar_size=describe_size(chart.bar_size) if chart else "")
    if not request.headers.get("HX-Request"):  # followed without script (the list's <noscript> link): a page
        block = render_template("summary.html", summary=Markup(block), filter_args=flt.to_args())
    response = make_response(block, 400 if filter_error else 200)
    response.vary.add("HX-Request")
    return response


@bp.route("/entries/new")
@requires("viewer", fragment=True)
def newer():
    """How many entries under the filters arrived after the first one on the page."""
    flt = request_filter(request.args)
    after = request.args.get("after", "").strip()
    count = 0
    if after:
        after_id = whole_number(after, "after", what="the newest entry id on the page")
        count = visible.count_newer(current_reader(), current_runtime().store, flt, after_id, NEW_CAP)
    return render_block("index.html", "new_entries", new_count=count, cap=NEW_CAP,
                        filter_args=flt.to_args())


@bp.route("/favicon.ico")
@requires(None, from_memory=True)
def favicon():
    """The icon a browser asks for at the root (the pages link the same file)."""
    return send_from_directory(current_app.static_folder, "favicon.ico", mimetype="image/vnd.microsoft.icon",
                               max_age=86400)


# --- groups -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrendWindow:
    """The span of the groups' trends and what one bar counts (the kept arrivals' widths)."""

    name: str
    label: str
    width: int  # seconds a bar counts: db/counts.py WIDTHS
    buckets: int
    unit: str


TREND_WINDOWS = (TrendWindow("1h", "last hour, per minute", 60, 60, "min"),
                 TrendWindow("24h", "last 24 hours, per hour", 3600, 24, "h"))


def trend_window(raw: str | None, flt: EntryFilter) -> TrendWindow:
    """The window asked for (``window=1h|24h``, a 400 for another), or the one that fits the
    filter's time: per minute when it looks at the last hour or less."""
    name = params.one_of(raw, "window", [w.name for w in TREND_WINDOWS])
    if name is None:
        recent = flt.since is not None and utcnow() - flt.since <= timedelta(hours=1, seconds=1)
        name = "1h" if recent else "24h"
    return next(w for w in TREND_WINDOWS if w.name == name)


@bp.route("/groups")
@requires("viewer")
def groups():
    """Failures grouped by subject, reason and normalized error, each with its trend over the last
    24 hours; a group opens the filtered list, or (operators) a bulk preview of its entries."""
    args = {**({} if "status" in request.args else {"status": "open"}), **request.args.to_dict()}
    found, tally, base, trends, filter_error, triage_args = None, None, {}, {}, None, {}
    try:
        params.refuse_misspelt(request.args, (*params.GROUPS_PARAMETERS, "window"))
        answer = failure_groups(args)
        flt, found, tally, base = answer.filter, answer.groups, answer.tally, answer.base
        triage_args = answer.triage.to_args(caller_name())
    except FilterError as exc:
        flt, filter_error = EntryFilter(), str(exc)
    window = trend_window(request.args.get("window"), flt)
    # The newest entry the reader finds under the filters: the page asks every 5 s how many came
    # after it (groups_newer), as the list does.
    top_id = None
    if not filter_error:
        top = visible.page(current_reader(), current_runtime().store, replace(flt, limit=1, cursor=None), list_fields())
        top_id = top.entries[0].id if top.entries else 0
    if found:
        _, counts = Tallies(current_runtime().store).arrivals([g.id for g in found], width=window.width,
                                                              buckets=window.buckets)
        trends = {group_id: build_sparkline(n, window.unit) for group_id, n in counts.items()}
    response = page_or_fragment("groups.html", "results", 400 if filter_error else 200,
                                groups=found, tally=tally, flt=flt, args=args,
                                filter_error=filter_error, base_args=base, trends=trends,
                                filter_args={**flt.to_args(), **triage_args}, saved=saved_views("groups"),
                                view_url=view_url, group_states=STATES, fields=list_fields(), presets=TIME_PRESETS,
                                window=window, windows=TREND_WINDOWS, group_url=IdUrls("group_id"), top_id=top_id)
    if htmx and not filter_error:
        # The tidy address, as the list's; "status=" stays, as it means any status here.
        shown = {**flt.to_args(), **triage_args, **({"status": ""} if not flt.status else {}),
                 **({"window": window.name} if request.args.get("window") else {})}
        response.headers["HX-Push-Url"] = url_for("pages.groups", **shown)
    return response


@bp.route("/groups/new")
@requires("viewer", fragment=True)
def groups_newer():
    """How many entries under the groups page's filters arrived after the newest one it found
    (``after``), with a link that shows the page again under the same filters, trend window and
    triage filters."""
    params.refuse_misspelt(request.args, (*params.GROUPS_PARAMETERS, "window", "after"))
    kept = ("after", "window", *GroupStateFilter.PARAMETERS)
    flt = request_filter({k: v for k, v in request.args.items() if k not in kept})
    GroupStateFilter.from_args(request.args)  # the link's triage filters: a bad one is a 400 here too
    trend_window(request.args.get("window"), flt)
    after, count = request.args.get("after", "").strip(), 0
    if after:  # as /entries/new: without it, nothing is counted
        after_id = whole_number(after, "after", what="the newest entry id the page found")
        count = visible.count_newer(current_reader(), current_runtime().store, flt, after_id, NEW_CAP)
    shown = {k: v for k, v in request.args.items() if k != "after"}
    return render_block("groups.html", "new_failures", new_count=count, cap=NEW_CAP,
                        show_url=url_for("pages.groups", **shown))


# --- one entry --------------------------------------------------------------------------------

@bp.route("/entries/<int:entry_id>")
@requires("viewer")
def entry(entry_id: int):
    """One entry: payload beside its schema errors, headers, the timeline, the actions; the
    JSON of GET /api/entries/<id> is made from the same value (access/detail.py)."""
    detail = entry_detail(entry_id)
    found = detail.entry
    # Hidden from a viewer (DLQ_MASK, a payload that is not JSON) it is not opened either.
    compressed = None if found.payload_hidden else compression_of(found.headers, found.payload)
    marks = mark_indexes(detail.pointers)  # the decompressed verdict's too, in the payload shown decompressed
    payload = view_payload(found.payload, found.payload_available, marks, compressed)
    if found.hidden_values and payload.kind == "json" and payload.note is None and MASKED.encode() in found.payload:
        # A viewer reading "•••" in the payload (not only in a header) learns why, and that the
        # value is there for an operator.
        payload.note = "Fields DLQ_MASK hides from viewers read •••; an operator sees their values."
    return render_template(
        "entry.html", detail=detail, entry=found, marks=marks, payload=payload,
        schema_problems=current_runtime().schemas.problems,
        timeline=build_timeline(found, detail.republishes, detail.replays), **_entry_context(detail))


def _entry_context(detail):
    """The entry page's head and action bar: the list it was opened from (its filters ride in
    the URL) with the entries before and after it there, and why Republish or Edit cannot work,
    if they cannot."""
    rt = current_runtime()
    params.refuse_misspelt(request.args, params.LIST_PARAMETERS)  # "staus": its neighbours would be any entry's
    flt = request_filter(request.args)  # a bad one is a 400, as on the list itself
    list_args = flt.to_args()
    entry = detail.entry
    reader = current_reader()
    newer, older = visible.neighbours(reader, rt.store, flt, entry.id)
    republish_reason = edit_reason = None
    identity = current_identity()
    # Outside the operator's acting scopes the bar is not offered (a request would be a 403).
    outside_acts = visible.NOT_YOURS.format(id=entry.id) if reader.may("operator") and not visible.may_act_on(
        reader, entry.original_subject, entry.source) else None
    if identity is not None and identity.may("operator") and not outside_acts:
        # An operator sees entries unmasked, so ``entry`` is the entry as stored, the one the
        # action would refuse.
        # About the entry's own source: its actions go out through it (SPEC section 12).
        by_source = source_verdict(rt, entry.source, entry.id, entry.original_subject)
        republish_reason = republish_refusal(entry, status=True) or by_source
        edit_reason = republish_refusal(entry, status=True, edit=True) or by_source
        nats_down = by_source if len(rt.feeds) > 1 else status.service_status(rt).nats_down
        if (republish_reason is None or edit_reason is None) and not nats_down:
            # Asked only while the source's NATS answers (the page's own verdict, from memory), half
            # a second at most, remembered a while; while it is down the buttons say so instead.
            known, stream = stream_of(rt, entry.original_subject, entry.source)
            if known and stream is None:
                republish_reason = republish_reason or no_stream_sentence(entry.original_subject)
                edit_reason = edit_reason or no_stream_sentence(entry.original_subject)
    return {"list_args": list_args, "newer_id": newer, "older_id": older,
            "republish_reason": republish_reason, "edit_reason": edit_reason, "outside_acts": outside_acts}


@bp.route("/entries/<int:entry_id>/payload")
@requires("viewer")
def payload_download(entry_id: int):
    """The payload's bytes as a download, never rendered by the browser."""
    found = get_entry_or_404(entry_id, with_history=False)
    if found.payload_hidden:
        raise Hidden(PAYLOAD_REPEATED if PAYLOAD_REPEATED in found.notes else PAYLOAD_HIDDEN)
    response = make_response(found.payload)
    response.headers["Content-Type"] = "application/octet-stream"
    response.headers["Content-Disposition"] = f'attachment; filename="entry-{entry_id}-payload.bin"'
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
