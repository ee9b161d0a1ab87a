"""The value a JSON Pointer reaches in a payload, read as JSON parsers read it: a key given more
than once in one object is its last value (json.loads, the schema check, the entry page and
PostgreSQL's jsonb agree; SQLite's json_extract takes the first). Registered on every SQLite
connection as ``dlq_json_node`` (db/engine.py), the key fields' SQL (ingest/key_fields.py) asks
it for a payload holding a key of its pointer more than once, and reads its answer as it reads
the payload.

It works on the payload's bytes, each read as one character (LATIN-1, which never fails), and
answers the bytes of the value as the payload writes them, or NULL: nothing there, or a payload
it cannot walk (the caller has checked it is JSON)."""

from __future__ import annotations

import json
import re
from json.decoder import JSONDecoder, scanstring

#: The SQL function's name.
NAME = "dlq_json_node"

_DECODER = JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def json_node(payload, tokens: str, as_index: int):
    """The bytes at ``tokens`` (a JSON array of a pointer's tokens) in ``payload``: a token of
    digits is an array's index when ``as_index`` (else a key, as SQLite's paths read them: an
    index never reads an object, a key never an array); None where there is none."""
    if payload is None:
        return None
    try:
        text = bytes(payload).decode("latin-1") if not isinstance(payload, str) else payload
        start = _SPACE.match(text, 0).end()
        end = None
        for token in json.loads(tokens):
            span = _step(text, start, token, bool(as_index))
            if span is None:
                return None
            start, end = span
        if end is None:  # the empty pointer: the whole payload
            end = _DECODER.raw_decode(text, start)[1]
        return text[start:end].encode("latin-1")
    except (ValueError, IndexError, RecursionError, UnicodeEncodeError):
        return None


def _step(text: str, at: int, token: str, as_index: bool) -> tuple[int, int] | None:
    """The span of the value ``token`` reaches in the object or array at ``at``."""
    opening = text[at]
    index = as_index and token.isascii() and token.isdigit()
    if opening == "[" and index:
        wanted, count = int(token), 0
    elif opening == "{" and not index:
        # A key's bytes as the payload holds them (UTF-8 read as LATIN-1), or written as escapes.
        wanted, count = {token, token.encode("utf-8").decode("latin-1")}, None
    else:
        return None
    closing = "]" if opening == "[" else "}"
    i = _SPACE.match(text, at + 1).end()
    if text[i] == closing:
        return None
    found = None
    while True:
        if count is None:
            key, i = scanstring(text, i + 1)
            i = _SPACE.match(text, i).end()
            if text[i] != ":":
                raise ValueError("not an object")
            i = _SPACE.match(text, i + 1).end()
        end = _DECODER.raw_decode(text, i)[1]
        if count is None:
            if key in wanted:
                found = (i, end)  # a later one of the same key takes its place
        elif count == wanted:
            return i, end
        else:
            count += 1
        i = _SPACE.match(text, end).end()
        if text[i] == ",":
            i = _SPACE.match(text, i + 1).end()
            continue
        if text[i] != closing:
            raise ValueError("not JSON")
        return found


#: The SQL function reading a key field's value (its bytes) as text (``value_text``).
TEXT = "dlq_value_text"


def value_text(value):
    """The bytes of a key field's value as text: UTF-8, or LATIN-1 (every byte a character) where
    they are not UTF-8, as PostgreSQL reads a payload's bytes (ingest/key_fields.py). SQLite's
    json_extract answers a payload's bytes as they are, and text that is not UTF-8 is text no
    reader of the column can decode: one payload in LATIN-1 made every list holding it fail."""
    if value is None:
        return None
    data = bytes(value) if not isinstance(value, str) else value.encode("utf-8", "surrogateescape")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")
