"""The OpenAPI operations of the exports, merged into web/openapi.py's document: every entry the
list's filters and search match, streamed as one JSON array, newline-delimited JSON or CSV."""

from __future__ import annotations

from ..entries.shape import STR
from ..entries.shape import schema_ref as _ref
from .openapi_parts import CURSOR, FILTER_PARAMETERS
from .openapi_parts import errors as _errors
from .openapi_parts import query as _query
from .openapi_parts import with_key_fields

INT64_MAX = 2**63 - 1

CSV_DESCRIPTION = ("A header row, then one row per entry with the Entry fields as columns; headers, "
                   "schema_errors, sources and notes as JSON text; text cells that a spreadsheet would "
                   "take for a formula (starting with = + - @ tab or CR) get a leading apostrophe, "
                   "payload_base64 is always exact.")


def _export(fmt: str, media_type: str, body_schema: dict, what: str) -> dict:
    return with_key_fields({
        "operationId": f"export{fmt.capitalize()}", "tags": ["export"],
        "summary": f"Every matching entry as {what}, streamed",
        "description": ("The filters and search of GET /api/entries, newest first. `limit` caps the "
                        "export (no upper bound); `cursor` starts after that entry. Payloads are base64 "
                        "(exact) and text where UTF-8. Entries arriving during an export are not in it."),
        "parameters": [*FILTER_PARAMETERS, CURSOR,
                       _query("limit", "The most entries to export (default: all).",
                              {"type": "integer", "minimum": 1, "maximum": INT64_MAX})],
        "responses": {
            "200": {"description": f"An attachment named dlq-entries-<UTC time>-<filter>.{fmt}.",
                    "headers": {"Content-Disposition": {"schema": STR, "description": "attachment; filename=..."}},
                    "content": {media_type: {"schema": body_schema}}},
            **_errors(400, 401, 403),
        },
    })


# (method, path) -> operation, as web/openapi.py's OPERATIONS.
EXPORT_OPERATIONS: dict[tuple[str, str], dict] = {
    ("get", "/api/export.json"): _export("json", "application/json",
                                         {"type": "array", "items": _ref("ListedEntry")}, "one JSON array"),
    ("get", "/api/export.ndjson"): _export("ndjson", "application/x-ndjson",
                                           {"type": "string", "description": "One ListedEntry object (its key fields in fields) per line."},
                                           "newline-delimited JSON"),
    ("get", "/api/export.csv"): _export("csv", "text/csv", {"type": "string", "description": CSV_DESCRIPTION},
                                        "CSV"),
}
