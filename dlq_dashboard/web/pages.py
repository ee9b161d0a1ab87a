"""The support-staff pages: the list with its search, chart and counts, the failure groups,
and an entry's detail page (payload beside its schema errors, headers, timeline).

Each page's data is gathered once and rendered either as the full page or, for an htmx
request, as a named block of the same template (``Vary: HX-Request`` on both). The list and an
entry share their data functions with the JSON API (data.py).
"""

from __future__ import annotations

from datetime import timedelta

from flask import Blueprint, current_app, make_response, render_template, request, send_from_directory, url_for

from dlq_consumer import headers as contract

from ..actions.decisions import no_stream_sentence, republish_refusal
from ..actions.streams import stream_of
from ..entries.filters import DEFAULT_LIMIT, EntryFilter, FilterError
from ..access import visible
from ..masking import PAYLOAD_HIDDEN, Mask
from ..entries.tallies import Tallies
from ..numbers import whole_number
from . import current_runtime, status
from .auth import current_identity, requires
from .data import (current_reader, entries_page, failed_again, failure_groups, get_entry_or_404, list_fields,
                   republishes_and_last_sent, request_filter)
from .presenters.charts import build_chart, build_sparkline, chart_bounds, describe_size
from .presenters.payloads import mark_indexes, view_payload
from .presenters.rows import snippet
from .presenters.timeline import build_timeline
from .saved_views import saved_views, view_url
from .responses import htmx, list_url, page_or_fragment, refusal, render_block

bp = Blueprint("pages", __name__)
NEW_CAP = 1000


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
        (flt, page), filter_error = entries_page(request.args, rows=True), None
    except FilterError as exc:
        flt, page, filter_error = EntryFilter(), None, str(exc)
    top_id = page.entries[0].id if page and page.entries and not flt.cursor else None
    response = page_or_fragment(
        "index.html", "results", 400 if filter_error else 200,
        page=page, flt=flt, args=request.args, filter_error=filter_error, top_id=top_id,
        filter_args=flt.to_args(), example_command=example_command(), saved=saved_views("list"), view_url=view_url,
        paging={"limit": flt.limit} if flt.limit != DEFAULT_LIMIT else {},
        fields=list_fields(), snippet=snippet, presets=TIME_PRESETS,
        failed_again=failed_again(page.entries) if page else {})
    if htmx and not flt.cursor and not filter_error:
        # The form sends its empty fields too; the address bar gets the tidy, shareable URL.
        response.headers["HX-Push-Url"] = list_url(**flt.to_args())
    return response


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
    retention = current_runtime().settings.retention
    return make_response(render_block(
        "index.html", "summary", flt=flt, counts=counts, chart=chart, tally=tally,
        filter_error=filter_error, filter_args=flt.to_args(), stored=stored,
        kept_for=describe_size(timedelta(seconds=retention)) if retention else None,
        bar_size=describe_size(chart.bar_size) if chart else ""), 400 if filter_error else 200)


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

@bp.route("/groups")
@requires("viewer")
def groups():
    """Failures grouped by subject, reason and normalized error, each with its trend over the last
    24 hours; a group opens the filtered list, or (operators) a bulk preview of its entries."""
    args = {**({} if "status" in request.args else {"status": "open"}), **request.args.to_dict()}
    found, tally, base, trends, filter_error = None, None, {}, {}, None
    try:
        flt, found, tally, base = failure_groups(args)
    except FilterError as exc:
        flt, filter_error = EntryFilter(), str(exc)
    if found:
        _, hourly = Tallies(current_runtime().store).hourly_arrivals([g.id for g in found])
        trends = {group_id: build_sparkline(counts) for group_id, counts in hourly.items()}
    response = page_or_fragment("groups.html", "results", 400 if filter_error else 200,
                                groups=found, tally=tally, flt=flt, args=args,
                                filter_error=filter_error, base_args=base, trends=trends,
                                filter_args=flt.to_args(), saved=saved_views("groups"), view_url=view_url)
    if htmx and not filter_error:
        # The tidy address, as the list's; "status=" stays, as it means any status here.
        shown = {**flt.to_args(), **({"status": ""} if not flt.status else {})}
        response.headers["HX-Push-Url"] = url_for("pages.groups", **shown)
    return response


# --- one entry --------------------------------------------------------------------------------

def _schema_view(entry, seen):
    """The schema errors of the message's header and of the current schema, each with a mark.

    The stored payload is validated (a masked one would fail where "•••" stands); the messages
    are shown with what ``seen``, the entry as this request sees it, hides."""
    registry = current_runtime().schemas
    current, current_error = None, None
    if seen.payload_available:
        try:
            current = registry.validate(entry.original_subject, entry.payload)
        except RecursionError:
            current_error = "The payload nests too deeply to be validated."
    header_errors = [e for e in seen.schema_errors or [] if isinstance(e, dict)]
    current_errors = [e.to_dict() for e in current.errors] if current else []
    if seen.hidden_values:
        current_errors = [{**e, "message": Mask.mask_text(e.get("message"), seen.hidden_values)}
                          for e in current_errors]
    pointers = [e.get("path", "") for e in header_errors + current_errors]
    return registry, current, current_error, header_errors, current_errors, pointers


@bp.route("/entries/<int:entry_id>")
@requires("viewer")
def entry(entry_id: int):
    """One entry: payload beside its schema errors, headers, the timeline, the actions."""
    stored = get_entry_or_404(entry_id, masked=False)
    found = visible.entry(current_reader(), stored)
    store = current_runtime().store
    registry, current, current_error, header_errors, current_errors, pointers = _schema_view(stored, found)
    marks = mark_indexes(pointers)
    payload = view_payload(found.payload, found.payload_available, marks)
    replays = visible.replays(current_reader(), store.replays_of(found.dlq_ref), found) if found.dlq_ref else []
    republishes, sent = republishes_and_last_sent(stored)
    timeline = build_timeline(found, republishes, replays)
    original = store.entry_by_dlq_ref(found.replay_of) if found.replay_of else None
    return render_template(
        "entry.html", entry=found, payload=payload, marks=marks, header_errors=header_errors,
        current=current, current_errors=current_errors, current_error=current_error,
        schema_problems=registry.problems, timeline=timeline, original=original, last_sent=sent,
        failed_again=replays[-1] if replays else None, schema_errors_given=_carries(found, contract.SCHEMA_ERRORS),
        **_entry_context(stored, found))


def _carries(entry, header: str) -> bool:
    """Whether the message carries ``header`` (names match case-insensitively), read or not: a
    malformed Dlq-Schema-Errors is told by the entry's note, not as a header missing."""
    return any(name.lower() == header.lower() for name in entry.headers or {})


def _entry_context(stored, found):
    """The entry page's head and action bar: the list it was opened from (its filters ride in
    the URL) with the entries before and after it there, its failure group, and why Republish
    or Edit cannot work, if they cannot."""
    rt = current_runtime()
    flt = request_filter(request.args)  # a bad one is a 400, as on the list itself
    list_args = flt.to_args()
    newer, older = visible.neighbours(current_reader(), rt.store, flt, stored.id)
    republish_reason = edit_reason = None
    identity = current_identity()
    if identity is not None and identity.may("operator"):
        republish_reason = republish_refusal(stored, status=True)
        edit_reason = republish_refusal(stored, status=True, edit=True)
        if (republish_reason is None or edit_reason is None) and not status.service_status(rt).nats_down:
            # Asked only while NATS answers (the page's own verdict, from memory), half a second
            # at most, remembered a while; while it is down the buttons say so instead.
            known, stream = stream_of(rt, stored.original_subject)
            if known and stream is None:
                republish_reason = republish_reason or no_stream_sentence(stored.original_subject)
                edit_reason = edit_reason or no_stream_sentence(stored.original_subject)
    return {"list_args": list_args, "newer_id": newer, "older_id": older,
            "group": visible.group_of(current_reader(), rt.store, found),
            "republish_reason": republish_reason, "edit_reason": edit_reason}


@bp.route("/entries/<int:entry_id>/payload")
@requires("viewer")
def payload_download(entry_id: int):
    """The payload's bytes as a download, never rendered by the browser."""
    found = get_entry_or_404(entry_id, with_history=False)
    if found.payload_hidden:
        return refusal(PAYLOAD_HIDDEN, 403, "Hidden")
    response = make_response(found.payload)
    response.headers["Content-Type"] = "application/octet-stream"
    response.headers["Content-Disposition"] = f'attachment; filename="entry-{entry_id}-payload.bin"'
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
