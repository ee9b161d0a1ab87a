"""Exports: every entry under the list's filters as JSON, NDJSON or CSV, streamed row by row.

The rows come from ``Store.iter_entries`` (keyset batches), are encoded one at a time and
leave in chunks of about 64 KiB, so an export of any size needs the memory of one batch.

An export goes on after its request was let in, so between its chunks, at most once every
CHECK_SECONDS, it asks whether its caller may still read what it streams (auth.reading_check:
a token revoked, a session ended, a role or scopes narrowed); when not, it stops: an NDJSON
export's last line is ``{"error": "..."}``, and the connection is cut without the chunked
body's end, so the client sees an incomplete transfer rather than a complete-looking file.
"""

from __future__ import annotations

import csv
import io
import itertools
import logging
import re
import time
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator

import orjson
from flask import Blueprint, Response, request, stream_with_context

from ..entries.filters import EntryFilter
from ..entries.shape import CSV_COLUMNS
from ..entries.view import EntryView
from ..numbers import whole_number
from ..access import visible
from ..access.reader import Reader
from . import current_runtime
from .auth import reading_check, requires
from .data import current_reader, list_fields, request_filter

bp = Blueprint("export", __name__)
log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
#: The most seconds between two asks of whether an export's caller may still read it.
CHECK_SECONDS = 1.0
MEDIA_TYPES = {
    "json": "application/json",
    "ndjson": "application/x-ndjson",
    "csv": "text/csv; charset=utf-8",
}
# A spreadsheet reads a cell that starts with one of these as a formula; message data must
# never run as one (OWASP "CSV injection"), so such text cells get a leading apostrophe.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def export_request(args, reader: Reader) -> tuple[EntryFilter, int | None]:
    """The filter of /api/entries and the most rows to export (None: every matching entry).

    ``limit`` caps the export instead of sizing a page, so it has no upper bound;
    ``cursor`` starts after the entry it names, as on the list.
    """
    limit_raw = (args.get("limit") or "").strip()
    max_rows = whole_number(limit_raw, "limit", low=1, what="the most entries to export") if limit_raw else None
    rest = {k: v for k, v in args.items() if k != "limit"}
    return request_filter(rest, reader=reader), max_rows


def export_filename(flt: EntryFilter, fmt: str, now: datetime | None = None) -> str:
    """``dlq-entries-<UTC time>[-<filter>].<fmt>``: safe in any file system and header."""
    now = now or datetime.now(timezone.utc)
    parts = []
    for name, value in flt.to_args().items():
        value = value.replace("*", "any").replace(">", "all")
        value = re.sub(r"[^A-Za-z0-9.-]+", "-", value).strip("-.")
        parts.append(f"{name}-{value}" if value else name)
    label = "_".join(parts)[:120].strip("-._")
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    return f"dlq-entries-{stamp}{'-' + label if label else ''}.{fmt}"


# --- encoders: entries -> pieces of the body ---------------------------------------------------
# orjson writes an entry about five times faster than json.dumps, which is what keeps an
# export close to the speed of reading the rows at all (bench/bench_export.py).

def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return orjson.dumps(value).decode()
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def _chunks(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """Join pieces into chunks of about CHUNK_BYTES; the first piece leaves at once."""
    buffer: list[bytes] = []
    size = 0
    first = True
    for piece in pieces:
        buffer.append(piece)
        size += len(piece)
        if first or size >= CHUNK_BYTES:
            yield b"".join(buffer)
            buffer, size, first = [], 0, False
    if buffer:
        yield b"".join(buffer)


class ExportStopped(Exception):
    """An export's caller may no longer read what it streams: raised between two chunks, so the
    server cuts the connection before the body's end."""


def while_allowed(chunks: Iterable[bytes], fmt: str, why_not: Callable[[], str | None],
                  every: float | None = None) -> Iterator[bytes]:
    """``chunks``, asking ``why_not`` before each but the first, at most once every ``every``
    seconds (CHECK_SECONDS); when it gives a reason, nothing more of the export is sent: an
    NDJSON export gets ``{"error": ...}`` as its last line, and ExportStopped ends the body."""
    every = CHECK_SECONDS if every is None else every
    asked = time.monotonic()
    for i, chunk in enumerate(chunks):
        if i and time.monotonic() - asked >= every:
            why = why_not()
            asked = time.monotonic()
            if why:
                message = f"The export stopped: {why}."
                log.warning("%s: %s", request.path, message)
                if fmt == "ndjson":
                    yield orjson.dumps({"error": message}, option=orjson.OPT_APPEND_NEWLINE)
                raise ExportStopped(message)
        yield chunk


def json_pieces(entries: Iterable[EntryView]) -> Iterator[bytes]:
    """A JSON array written element by element, never held whole."""
    dumps = orjson.dumps
    yield b"["
    separator = b"\n"
    for entry in entries:
        yield separator + dumps(entry.to_dict())
        separator = b",\n"
    yield b"\n]\n"


def ndjson_pieces(entries: Iterable[EntryView]) -> Iterator[bytes]:
    """One JSON object per line."""
    dumps, newline = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    for entry in entries:
        yield dumps(entry.to_dict(), option=newline)


def csv_pieces(entries: Iterable[EntryView], labels: tuple[str, ...] = ()) -> Iterator[bytes]:
    """A header row (the entry's JSON fields, then ``field.<label>`` for each key field of
    DLQ_LIST_FIELDS), then one row per entry; lists and objects (headers) as JSON text."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")

    def take() -> bytes:
        text = out.getvalue()
        out.seek(0)
        out.truncate()
        # Lone surrogates cannot come from the database's UTF-8 text; "replace" only keeps
        # one impossible character from ending an export half-way.
        return text.encode("utf-8", "replace")

    writer.writerow((*CSV_COLUMNS, *(f"field.{label}" for label in labels)))
    yield take()
    for entry in entries:
        row = entry.to_dict()
        fields = row.get("fields") or {}
        writer.writerow([*(_csv_cell(row[name]) for name in CSV_COLUMNS), *(_csv_cell(fields.get(label))
                                                                            for label in labels)])
        yield take()


ENCODERS: dict[str, Callable[[Iterable[EntryView]], Iterator[bytes]]] = {
    "json": json_pieces, "ndjson": ndjson_pieces, "csv": csv_pieces,
}


def export_body(args, fmt: str, reader: Reader) -> tuple[EntryFilter, Iterator[bytes]]:
    """The filter of ``args`` and every entry it selects encoded in ``fmt``, in chunks (the
    route and ``flask --app app entries export`` alike), as ``reader`` sees them (visible.entries,
    each with its key fields: "fields", in CSV field.<label>). The first batch is read here, so a
    failing query raises before anything is sent."""
    flt, max_rows = export_request(args, reader)
    fields = list_fields()
    entries = visible.entries(reader, current_runtime().store, flt, fields, max_rows=max_rows)
    head = list(itertools.islice(entries, 1))
    entries = itertools.chain(head, entries)
    pieces = csv_pieces(entries, tuple(f.label for f in fields)) if fmt == "csv" else ENCODERS[fmt](entries)
    return flt, _chunks(pieces)


def export_response(fmt: str) -> Response:
    """Stream every entry under the request's filters in ``fmt``."""
    # A failing query is an error status rather than a 200 that breaks off (export_body).
    reader = current_reader()
    flt, body = export_body(request.args, fmt, reader)
    body = while_allowed(body, fmt, reading_check(reader))
    response = Response(stream_with_context(body), content_type=MEDIA_TYPES[fmt])
    response.headers["Content-Disposition"] = f'attachment; filename="{export_filename(flt, fmt)}"'
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


@bp.route("/api/export.json")
@requires("viewer")
def export_json():
    """Every matching entry as one JSON array, streamed."""
    return export_response("json")


@bp.route("/api/export.ndjson")
@requires("viewer")
def export_ndjson():
    """Every matching entry as newline-delimited JSON, streamed."""
    return export_response("ndjson")


@bp.route("/api/export.csv")
@requires("viewer")
def export_csv():
    """Every matching entry as one CSV row, streamed."""
    return export_response("csv")
