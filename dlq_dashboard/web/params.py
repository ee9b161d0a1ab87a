"""Reading request parameters (query strings, JSON bodies and forms) into values; a bad one is
an InvalidRequest, answered 400 with a sentence.

One rule for every page, the API, the export and the command line: a parameter is given once
(``refuse_repeated_parameters`` before every request; the CLI's options through
``single_values``), and a value that is not one of the allowed ones is refused with a sentence
(``one_of``; the list's filters in entries/filters.py and the failure group in Store.check_group),
never ignored: ``/?status=open&status=closed`` dropped a filter, ``/jobs/1?state=bogus`` and
``/?group=abc`` answered 200 as if nothing were wrong.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
import re
import sys
from typing import Any, Iterable, Mapping
from urllib.parse import unquote_to_bytes

from flask import Flask, request

from dlq_consumer.validation import one_value_a_key

from ..actions.triage import STATE_FIELDS
from ..entries.blanks import nothing_named
from ..entries.filters import FILTERS, FilterError, filter_of
from ..entries.triage import GroupStateFilter
from ..errors import InvalidRequest, UnsupportedBody
from ..flags import flag
from ..numbers import QUOTED, VERSION_MAX, quoted, whole_number
from .data import list_fields


def single_values(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """(name, value) pairs as one value a name; InvalidRequest names a parameter given more than once."""
    found: dict[str, list[Any]] = {}
    for name, value in pairs:
        found.setdefault(name, []).append(value)
    for name, values in found.items():
        if len(values) > 1:
            shown = ", ".join(repr(v if not isinstance(v, str) or len(v) <= 40 else v[:40] + "…") for v in values[:5])
            raise InvalidRequest(f"{name} is given {len(values)} times ({shown}{', …' if len(values) > 5 else ''}): "
                                 "give it once")
    return {name: values[0] for name, values in found.items()}


#: The form fields that are lists: a bulk form's ticked entries.
MULTI_VALUED = ("ids",)


def refuse_repeated_parameters() -> None:
    """Before every request: no query parameter, and no form field but a list's, is given twice
    (the bulk preview's ``ids`` come once a ticked row in its query too: it is asked by GET)."""
    listed = MULTI_VALUED if request.endpoint == "bulk.bulk_preview" else ()
    single_values((k, v) for k, v in request.args.items(multi=True) if k not in listed)
    if request.mimetype == "application/x-www-form-urlencoded":
        single_values((k, v) for k, v in request.form.items(multi=True) if k not in MULTI_VALUED)


def refuse_text_that_is_not_utf8() -> None:
    """Before every request (and its CSRF check): the query string and a form body are UTF-8.
    Other bytes were read as U+FFFD (a note changed without a word) or lost the whole form, which
    was then refused as "The CSRF token is missing"."""
    _utf8_parameters(request.query_string, "The query string")
    if request.mimetype == "application/x-www-form-urlencoded":
        # Cached: the form is parsed from the same bytes afterwards.
        _utf8_parameters(request.get_data(cache=True), "The form")


def _utf8_parameters(raw: bytes, what: str) -> None:
    """Each name and value UTF-8, and without a NUL character (no text a database stores holds one:
    PostgreSQL refuses it, a 500), but for an edited payload's bytes (the editor's ``payload``)."""
    for pair in raw.split(b"&"):
        parts = [unquote_to_bytes(part.replace(b"+", b" ")) for part in pair.split(b"=", 1)]
        name = parts[0].decode("utf-8", "replace")[:40]
        for part in parts:
            try:
                part.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidRequest(f"{what} is not UTF-8 text (at {name!r}): send it encoded as UTF-8.") from None
        if any(b"\0" in part for part in parts) and parts[0] != b"payload":
            raise InvalidRequest(f"{what} holds a NUL character (U+0000) at {name!r}: no text here may hold one.")


def init_app(app: Flask) -> None:
    """Hold every request to the rules above."""
    app.before_request(refuse_text_that_is_not_utf8)
    app.before_request(refuse_repeated_parameters)


def one_of(raw: Any, name: str, allowed: Iterable[str]) -> str | None:
    """``raw`` (trimmed) when it is one of ``allowed``, None when it is empty or missing;
    InvalidRequest with the allowed values otherwise."""
    value = raw.strip() if isinstance(raw, str) else raw
    if value in (None, ""):
        return None
    allowed = tuple(allowed)
    if value not in allowed:
        raise InvalidRequest(f"{name} {quoted(value)} is not valid: use one of {', '.join(allowed)}, or leave it out")
    return value


def version(raw: Any) -> int:
    """The entry version an operator saw, from a form field (text)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise InvalidRequest("version is required: send the entry's version as you saw it (a whole number).")
    return whole_number(raw, "version", high=VERSION_MAX, what="the entry's version as you saw it")


def json_version(raw: Any, seen: str = "the entry's version as you saw it") -> int:
    """The version a JSON body sends: a JSON whole number, as docs/api.md and the OpenAPI document
    say (3.0 is one, as JSON Schema reads it). Text ("1"), a fraction or a boolean is a 400 (Python
    takes true for 1); a form sends its version as text (``version``)."""
    if raw is None:
        raise InvalidRequest(f"version is required: send {seen} (a whole number).")
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)  # 3.0 is the integer 3 to JSON Schema, as the OpenAPI document reads it
    if isinstance(raw, bool) or not isinstance(raw, int):
        shown = json.dumps(raw)
        shown = shown if len(shown) <= QUOTED else shown[:QUOTED] + "…"
        raise InvalidRequest(f"version {shown} is not valid: send {seen} as a JSON whole number "
                             f"from 0 to {VERSION_MAX:,} (3, not \"3\").")
    return whole_number(raw, "version", high=VERSION_MAX, what=seen)


#: The fields of each JSON request (json_body): what each takes, and all of them together.
REPUBLISH_FIELDS, CLOSE_FIELDS = ("version", "payload_base64", "force"), ("version", "note")
REOPEN_FIELDS = ("version",)
SELECTION_FIELDS = ("ids", "filter", "only_valid", "upto")  # what a bulk request selects by (bulk_selection)
BULK_FIELDS = ("action", *SELECTION_FIELDS, "note", "force", "patch")
REPAIR_PREVIEW_FIELDS = ("action", *SELECTION_FIELDS)
GROUP_STATE_FIELDS, GROUP_NOTE_FIELDS = ("version", *STATE_FIELDS), ("text",)
API_FIELDS = frozenset((*REPUBLISH_FIELDS, *CLOSE_FIELDS, *REOPEN_FIELDS, *BULK_FIELDS, *REPAIR_PREVIEW_FIELDS,
                        *GROUP_STATE_FIELDS, *GROUP_NOTE_FIELDS))

#: The query parameters of the list's page and of a saved view (the JSON routes' are those the
#: OpenAPI document lists, web/query_parameters.py): the filters (and ``field.<label>``), the page.
LIST_PARAMETERS = (*(declared.name for declared in FILTERS if not declared.family), "limit", "cursor")
#: The groups': the list's and the triage filters (the page's "window" beside them).
GROUPS_PARAMETERS = (*LIST_PARAMETERS, *GroupStateFilter.PARAMETERS)
#: A bulk form's (the preview asked by GET: bulk_form, form_selection): its own fields and the
#: list's filters (``field.<label>`` too), which it takes for a job by filter.
BULK_FORM_PARAMETERS = ("by", "action", "ids", "only_valid", "upto", "patch", *(declared.name for declared in FILTERS))


#: A parameter's other name, as a person may write it on a route that takes the one and not the
#: other: a job's or an alert's "state" asked for as "status" ("/api/jobs?staus=failed"), an
#: entry's "status" as "state".
OTHER_NAMES = {"status": "state", "state": "status"}


def refuse_misspelt(args: Mapping[str, str], known: Iterable[str], *, fields: bool = True) -> None:
    """A query parameter a request does not take is left out (a cache-buster, a client's own),
    unless it reads as a misspelling of one it takes: "subjet" would answer every entry as if
    filtered, and a script acting on those ids would act on all of them. A 400 that names it (a
    FilterError: a page shows it where its list would be, as a filter's bad value). ``fields``:
    the request takes key fields' filters (``field.<label>``), so "Customer" means one of them."""
    known = tuple(known)
    others = {other: meant for other, meant in OTHER_NAMES.items() if meant in known and other not in known}
    labels: dict[str, str] | None = None
    for name in args:
        if name in known or name.startswith("field."):
            continue
        close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.8) or [
            others[other] for other in difflib.get_close_matches(name.lower(), others, n=1, cutoff=0.8)]
        if not close and fields:
            # A key field's filter written otherwise ("Field.Customer", "fields.Customer",
            # "Customer"): left out, the answer would be every entry.
            if labels is None:
                labels = {f.label.lower(): f.label for f in list_fields()}
            stem, dot, rest = name.partition(".")
            if dot and stem.lower() in ("field", "fields"):
                close = [f"field.{labels.get(rest.lower(), rest)[:40]}"]
            elif name.lower() in labels:
                close = [f"field.{labels[name.lower()]}"]
        if close:
            raise FilterError(f"{name[:40]!r} is not a parameter of this request: did you mean {close[0]!r}? "
                                 "(one it does not take is left out, and the answer would not be filtered by it)")


#: What the audit takes (its page says a misspelt one where its records would be).
AUDIT_PARAMETERS = ("entry", "job", "actor", "action", "items", "fold", "limit", "cursor")

#: The filters a bulk request's ``filter`` may name, as its 400 lists them.
FILTER_NAMES = ", ".join(declared.name for declared in FILTERS)


def json_body(*fields: str) -> dict:
    """The request's JSON object, of the ``fields`` this request takes. A field no request of the
    API takes is refused, not left out: a typo ("paylod_base64", "nte") would otherwise republish
    the original payload, or close an entry without its note. One that another request takes
    ("version" sent to /api/bulk: one body for several requests) is left out, as before."""
    _check_media_type()
    body = _read_json(request.get_data(cache=True))
    if not isinstance(body, dict):
        raise InvalidRequest("Send a JSON object as the request body.")
    unknown = sorted(str(name) for name in body if name not in fields and name not in API_FIELDS)
    if unknown:
        raise InvalidRequest(f"{unknown[0][:60]!r} is not a field of this request: use {', '.join(fields)}.")
    return body


def _check_media_type() -> None:
    """UnsupportedBody (a 415) unless the body is sent as ``application/json``, with no charset
    or UTF-8's (RFC 8259: JSON is UTF-8). A form a browser posts cross-site is never read as JSON,
    nor a body of another JSON type (application/merge-patch+json: not what the request takes)
    or of another charset (latin-1's bytes would be read as UTF-8's)."""
    if request.mimetype != "application/json":
        sent = f" (it is sent as {request.mimetype[:60]!r})" if request.mimetype else ""
        raise UnsupportedBody(f"Send a JSON object as the request body (Content-Type: application/json){sent}.")
    charset = request.mimetype_params.get("charset")
    if charset is not None and charset.strip().lower() not in ("utf-8", "utf8"):
        raise UnsupportedBody(f"The request body is sent in charset {charset[:40]!r}: JSON is read as UTF-8 only; "
                              "send it as UTF-8 (Content-Type: application/json, or charset=utf-8).")


#: How deep a request's JSON may nest: every body the API takes is a few levels deep (a patch's
#: values the deepest), and a deeper one would be walked by recursive code further on.
BODY_DEPTH = 64
# Half of a UTF-16 pair, as JSON's "\ud800" reads: no text a database stores or compares.
_SURROGATE = re.compile("[\ud800-\udfff]")
_ASCII_WHITESPACE = re.compile("[ \t\n\r\f\v]+")


class _NamedTwice(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class _TooManyDigits(Exception):
    pass


#: The most digits an integer of a body may have: Python's own bound on reading one
#: (sys.get_int_max_str_digits), past which int() refuses it; the JSON itself is valid.
_DIGITS_MAX = sys.get_int_max_str_digits() or 4300


def _whole_number(text: str) -> int:
    if len(text) - text.startswith("-") > _DIGITS_MAX:
        raise _TooManyDigits
    return int(text)


# A name given twice ({"note": "a", "note": "b"}): JSON leaves which counts to the reader.
_once_each = one_value_a_key(_NamedTwice)


def _read_json(data: bytes) -> Any:
    """A request body's JSON, read by the standard library (numbers of any size stay exact: a
    patch's value is republished as sent); refused with where and why when it is empty, not
    UTF-8, not JSON, deeper than BODY_DEPTH or holds a lone surrogate."""
    if not data.strip():
        raise InvalidRequest("Send a JSON object as the request body (it is empty).")
    try:
        body = json.loads(data.decode("utf-8"), object_pairs_hook=_once_each, parse_int=_whole_number)
    except _NamedTwice as twice:
        raise InvalidRequest(f"The request body names {twice.name[:60]!r} twice in one object: send each once "
                             "(which one would count is not said by JSON).") from None
    except UnicodeDecodeError as bad:
        raise InvalidRequest(f"The request body is not UTF-8 (byte {bad.start:,} is not): send JSON.") from None
    except RecursionError:
        raise InvalidRequest(f"The request body nests deeper than {BODY_DEPTH} levels.") from None
    except _TooManyDigits:
        raise InvalidRequest(f"A number in the request body has more than {_DIGITS_MAX:,} digits, more than "
                             "is read.") from None
    except ValueError as exc:
        raise InvalidRequest(f"The request body is not JSON: {exc}.") from None
    # A NUL is refused in text a database stores (PostgreSQL refuses it: a 500); a patch's values
    # become payload bytes, which may hold one.
    # Each value with the body's field it is in (None: the body itself).
    stack = [*((k, 1, True, k) for k in body), *((v, 2, k != "patch", k) for k, v in body.items())] \
        if isinstance(body, dict) else [(body, 1, True, None)]
    while stack:
        value, depth, text, field = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                raise InvalidRequest(f"The request body holds a lone surrogate escape in {ascii(value)[:60]}: "
                                     "send the text itself, as UTF-8.")
            if text and "\0" in value:
                raise InvalidRequest(f"The request body holds a NUL character (U+0000) in {ascii(field)[:60]}: "
                                     "no text here may hold one.")
            continue
        if depth > BODY_DEPTH:
            raise InvalidRequest(f"The request body nests deeper than {BODY_DEPTH} levels.")
        if isinstance(value, dict):
            stack.extend((k, depth, text, field) for k in value)
            stack.extend((v, depth + 1, text, field) for v in value.values() if isinstance(v, (str, dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1, text, field) for v in value if isinstance(v, (str, dict, list)))
    return body


def base64_payload(raw: Any, name: str = "payload_base64") -> bytes:
    """Bytes from base64 text. ASCII whitespace in it is skipped, as RFC 2045 readers do: the
    lines of 76 characters ``base64`` and Python's base64.encodebytes write, a CRLF, a space;
    any other character outside the alphabet is refused."""
    try:
        return base64.b64decode(_ASCII_WHITESPACE.sub("", str(raw)), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{name} is not valid base64.") from None


def bulk_selection(source: dict) -> dict[str, Any]:
    """What a bulk request selects: ``ids`` or a ``filter`` (the list's filters), ``only_valid``,
    and ``upto`` (the newest id a preview showed), as create_job and select_items take them."""
    flt = source.get("filter")
    if flt is not None and not isinstance(flt, dict):
        raise InvalidRequest("filter must be an object of the list's filters, e.g. {\"subject\": \"orders.*\"}.")
    ids = source.get("ids")
    if ids is not None and not isinstance(ids, list):
        raise InvalidRequest("ids must be a list of entry ids.")
    upto = source.get("upto")
    selection = {"ids": entry_ids(ids) if ids is not None else None,
                 "filter_args": filter_values(flt) if flt is not None else None,
                 "only_valid": flag(source.get("only_valid"), "only_valid"),
                 "upto": whole_number(upto, "upto", what="the newest entry id the preview showed")
                 if upto not in (None, "") else None}
    # The pages offer "everything matching these filters" only while a filter is set; an empty
    # one (a script's filter built from nothing, or of blank values: {"subject": ""}, as an unset
    # variable writes it) would take every open entry without a word.
    if selection["filter_args"] is not None and ids is None and (why := nothing_named(selection["filter_args"])):
        raise InvalidRequest(why)
    return selection


def filter_values(flt: Mapping[Any, Any]) -> dict[str, str]:
    """A bulk request's ``filter`` as the list's query arguments. A name that is no filter of the
    list is refused, not left out: a typo ("subjet") or a page's ``limit`` would otherwise widen
    the job to every open entry. A null value is no filter; a number or a boolean is read as JSON
    writes it (a group's id as /api/groups gives it, ``true`` as a key field's value); a list or an
    object is refused."""
    values = {}
    for name, value in flt.items():
        if filter_of(str(name)) is None:
            raise InvalidRequest(f"filter {str(name)[:60]!r} is not one of the list's filters: use {FILTER_NAMES} "
                                 "(a bulk job takes every entry they match: no limit or cursor)")
        if isinstance(value, (list, dict)):
            raise InvalidRequest(f"filter {str(name)[:60]}: give one value as text, not {type(value).__name__}")
        if value is not None:
            values[str(name)] = value if isinstance(value, str) else json.dumps(value)
    return values


def entry_ids(raw: list) -> dict[int, int | None]:
    """{entry id: the version seen, or None} from ids as a form sends them ("12", or "12:3" with
    the version seen) or JSON (12, or {"id": 12, "version": 3})."""
    wanted: dict[int, int | None] = {}
    for item in raw:
        if isinstance(item, dict) and "id" in item:  # JSON alone: its version is a JSON number
            entry_id, seen = item["id"], item.get("version")
            seen = json_version(seen) if seen is not None else None
        elif isinstance(item, str) and ":" in item:
            entry_id, seen = item.split(":", 1)
        elif isinstance(item, (int, str)) and not isinstance(item, bool):
            entry_id, seen = item, None
        else:
            raise InvalidRequest(f"{quoted(item)} is not an entry id: use numbers, or objects with id and version.")
        wanted[whole_number(entry_id, "id", low=1, what="an entry id")] = (
            whole_number(seen, "version", high=VERSION_MAX, what="the entry's version as you saw it")
            if seen is not None else None)
    return wanted


def form_filter(form: Mapping[str, str]) -> dict[str, str]:
    """The list's filters a bulk form carries (``by=filter``): every one of entries/filters.py's
    FILTERS, key fields (``field.<label>``) too; leaving one out would take more entries than the
    list showed. The preview and the job's confirmation pass the same on (a template global)."""
    return {k: form[k] for k in form if form.get(k) and filter_of(k) is not None}


def bulk_form() -> Mapping[str, str]:
    """What a bulk form sent: a preview arrives by GET (nothing is written until Start, and Back
    from the job's page opens it again), the job's Start by POST."""
    return request.form if request.method == "POST" else request.args


def form_selection() -> dict[str, Any]:
    """A bulk form's selection: the checked rows (``ids``) or the list's filters (``by=filter``)."""
    form = bulk_form()
    if form.get("by") == "filter":
        return bulk_selection({"filter": form_filter(form), "only_valid": form.get("only_valid"),
                               "upto": form.get("upto")})
    return bulk_selection({"ids": form.getlist("ids"), "upto": form.get("upto")})
