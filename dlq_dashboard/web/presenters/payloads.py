"""How the pages show a payload: pretty JSON with the failing fields marked, plain text, or a
hex dump, truncated past a size limit; and the pretty form the editor holds and the line diffs
of the editor and the timeline compare.

The marked JSON is a list of (text, mark) segments built here and rendered by the template
with autoescape, so no payload byte ever becomes markup.

Numbers are written back exactly as they were written (``1.50`` stays ``1.50``, ``1e400`` stays
``1e400``): the pretty form must not change a value the operator did not touch.
"""

from __future__ import annotations

import base64
import difflib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from dlq_consumer.validation import one_value_a_key

from ...surrogates import escape_lone_surrogates, first_lone_surrogate
from ...unpacking import GZIP_BYTES, READABLE, UNPACK_LIMIT, decompress

# Beyond these the page shows the start and offers the whole payload as a download.
TEXT_LIMIT = 256 * 1024
HEX_LIMIT = 16 * 1024
_INDENT = "  "
NOT_JSON = "The payload is not JSON."


@dataclass
class Segment:
    """A run of payload text; ``mark`` is the index of the failing field it belongs to, or None."""

    text: str
    mark: int | None = None
    anchor: bool = False  # the first segment of its mark: where the error list links to


@dataclass
class PayloadView:
    """What the payload panel shows; ``kind`` is json, text, hex or missing."""

    kind: str
    size: int
    truncated: bool = False
    segments: list[Segment] = field(default_factory=list)
    text: str = ""
    hex_lines: list[tuple[str, str, str]] = field(default_factory=list)
    found: set[str] = field(default_factory=set)  # pointers that were marked
    note: str | None = None


def mark_indexes(pointers: Iterable[str]) -> dict[str, int]:
    """A number for each distinct JSON Pointer (the whole document, '', is never marked)."""
    return {p: i for i, p in enumerate(dict.fromkeys(p for p in pointers if p))}


def view_payload(payload: bytes, available: bool = True, pointers: Iterable[str] = (),
                 compressed: str | None = None) -> PayloadView:
    """Choose how to show a payload and mark the fields at ``pointers`` (JSON Pointers).
    ``compressed`` (decisions.compression_of: "gzip bytes", "Content-Encoding: gzip"): a gzip or
    zlib payload is shown decompressed, as far as UNPACK_LIMIT; the download stays as stored."""
    size = len(payload)
    if not available:
        return PayloadView("missing", 0)
    unpacked = decompress(payload, UNPACK_LIMIT) if compressed else None
    if unpacked is not None:
        data, ending = unpacked
        shown = view_payload(data, pointers=pointers)  # past TEXT_LIMIT: its start, unmarked
        said = f"The payload is compressed ({compressed}); shown decompressed, " + {
            "whole": f"{len(data):,} bytes.", "more": f"the first {UNPACK_LIMIT:,} bytes of more.",
            "cut": f"{len(data):,} bytes before its compressed data ends early."}[ending]
        if ending == "cut" and shown.note == NOT_JSON:
            shown.note = None  # what it would be is not known: its end is missing
        shown.size = size
        shown.note = f"{said} {shown.note}" if shown.note else said
        return shown
    if compressed:
        # Declared compressed, but not gzip or zlib data: the header and the bytes disagree (or
        # the encoding is one not read here). Shown as stored, saying so.
        shown, said = view_payload(payload, pointers=pointers), _undecompressed(compressed)
        shown.note = f"{said} {shown.note}" if shown.note else said
        return shown
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return PayloadView("hex", size, truncated=size > HEX_LIMIT, hex_lines=hex_dump(payload[:HEX_LIMIT]),
                           note="The payload is not UTF-8 text; shown as bytes.")
    if size > TEXT_LIMIT:
        head = payload[:TEXT_LIMIT].decode("utf-8", errors="ignore")
        return PayloadView("text", size, truncated=True, text=head,
                           note="The payload is large; the fields are not marked in a truncated view.")
    repeated: dict[str, None] = {}
    try:
        value = _parse(text, repeated)
    except (ValueError, RecursionError):
        return PayloadView("text", size, text=text, note=None if not text else NOT_JSON)
    order = mark_indexes(pointers)
    try:
        segments = _Printer(order).print(value)
    except RecursionError:
        return PayloadView("text", size, text=text, note="The payload nests too deeply to be laid out.")
    lone = _lone_surrogate(text, segments)
    if lone:
        return PayloadView("text", size, text=text, note=(
            f"The payload holds {lone}, half of a UTF-16 pair, which is no character: shown as written, "
            "its fields not marked."))
    found = {p for p, i in order.items() if any(s.mark == i for s in segments)}
    return PayloadView("json", size, segments=_merge(segments), found=found, note=_repeated_note(repeated))


def _repeated_note(repeated: dict[str, None]) -> str | None:
    # JSON does not say which of a key's values counts; Python's reader (this page, the schema
    # check, Python consumers) keeps the last, and the others are not shown: say so.
    if not repeated:
        return None
    names = [escape_lone_surrogates(json.dumps(k, ensure_ascii=False)) for k in list(repeated)[:5]]
    more = f" and {len(repeated) - 5:,} more" if len(repeated) > 5 else ""
    return (f"The payload holds a key more than once in one object ({', '.join(names)}{more}): only the last "
            "value of each is shown, the one the schema check reads.")


def _undecompressed(compressed: str) -> str:
    """Why a payload said to be compressed (compression_of) is shown as stored."""
    if compressed == GZIP_BYTES:
        return "The payload starts as gzip data does but does not decompress: shown as stored."
    if compressed.split(": ", 1)[-1].lower() in READABLE:
        return (f"The payload is said to be compressed ({compressed}) but does not decompress as gzip or zlib "
                "data: shown as stored.")
    return f"The payload is compressed ({compressed}), which is not decompressed here: shown as stored."


class _Printer:
    """Lays out JSON like ``json.dumps(indent=2)``, remembering which text belongs to which path."""

    def __init__(self, marks: dict[str, int]):
        self.marks = marks
        self.out: list[Segment] = []
        self.anchored: set[int] = set()

    def print(self, value: Any) -> list[Segment]:
        self._value(value, "", 0, None)
        return self.out

    def _emit(self, text: str, mark: int | None) -> None:
        anchor = mark is not None and mark not in self.anchored
        if anchor:
            self.anchored.add(mark)
        self.out.append(Segment(text, mark, anchor))

    def _value(self, value: Any, path: str, depth: int, mark: int | None) -> None:
        # A field is marked with its own error; inside a marked field, everything is marked.
        if mark is None:
            mark = self.marks.get(path)
        if isinstance(value, dict) and value:
            self._emit("{", mark)
            for i, (key, item) in enumerate(value.items()):
                child = path + "/" + str(key).replace("~", "~0").replace("/", "~1")
                child_mark = mark if mark is not None else self.marks.get(child)
                self._emit("\n" + _INDENT * (depth + 1), None)
                self._emit(json.dumps(key, ensure_ascii=False) + ": ", child_mark)
                self._value(item, child, depth + 1, child_mark)
                if i < len(value) - 1:
                    self._emit(",", None)
            self._emit("\n" + _INDENT * depth, None)
            self._emit("}", mark)
        elif isinstance(value, list) and value:
            self._emit("[", mark)
            for i, item in enumerate(value):
                self._emit("\n" + _INDENT * (depth + 1), None)
                self._value(item, f"{path}/{i}", depth + 1, mark)
                if i < len(value) - 1:
                    self._emit(",", None)
            self._emit("\n" + _INDENT * depth, None)
            self._emit("]", mark)
        else:
            self._emit(_scalar(value), mark)


def _lone_surrogate(text: str, segments: list[Segment]) -> str | None:
    # A "\ud800" escape without its other half is read as a character no UTF-8 page holds: the
    # payload is shown as it was written instead (its escape as it stands). Only a text with an
    # escape can hold one.
    return first_lone_surrogate("".join(s.text for s in segments)) if "\\u" in text else None


class _Number(str):
    """A JSON number as it was written."""


def _parse(text: str, repeated: dict[str, None]) -> Any:
    """A JSON document with its numbers kept as written (ValueError or RecursionError if not JSON);
    the keys an object holds more than once are put in ``repeated``, each once."""
    def one_value_a_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value = dict(pairs)
        if len(value) != len(pairs):
            seen: set[str] = set()
            repeated.update((k, None) for k, _ in pairs if k in seen or seen.add(k))
        return value

    return json.loads(text, parse_float=_Number, parse_int=_Number, object_pairs_hook=one_value_a_key)


def _scalar(value: Any) -> str:
    # A number as it was written; every other scalar as json.dumps writes it.
    return str.__str__(value) if isinstance(value, _Number) else json.dumps(value, ensure_ascii=False)


def _merge(segments: list[Segment]) -> list[Segment]:
    """Join neighbouring segments of the same mark, so the page has few elements."""
    merged: list[Segment] = []
    for seg in segments:
        if merged and merged[-1].mark == seg.mark and not seg.anchor:
            merged[-1].text += seg.text
        else:
            merged.append(Segment(seg.text, seg.mark, seg.anchor))
    return merged


def hex_dump(data: bytes, width: int = 16) -> list[tuple[str, str, str]]:
    """(offset, hex bytes, printable ASCII) per line, like ``hexdump -C``."""
    lines = []
    for offset in range(0, len(data), width):
        chunk = data[offset:offset + width]
        hex_part = " ".join(f"{b:02x}" for b in chunk)
        if len(chunk) > 8:
            hex_part = hex_part[:23] + " " + hex_part[23:]
        ascii_part = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append((f"{offset:08x}", hex_part, ascii_part))
    return lines


# --- the editor's pretty form and line diffs ----------------------------------------------------

#: Beyond this (in characters of either side) a diff is not computed line by line.
DIFF_LIMIT = 256 * 1024


# Laid out again, an object with a key twice would keep only the last: the editor would drop
# the first without saying so. Such a payload is edited as the text it is.
_no_repeated_keys = one_value_a_key(lambda key: ValueError(f"an object repeats the key {key!r}"))


def pretty_json(text: str) -> str | None:
    """``text`` laid out as JSON with 2-space indents, keys in their order, numbers as written;
    None when it is not JSON, repeats a key in an object, nests too deeply to lay out, or holds
    half a UTF-16 pair (edited as written then, as no UTF-8 text holds it read)."""
    try:
        value = json.loads(text, parse_float=_Number, parse_int=_Number, object_pairs_hook=_no_repeated_keys)
        segments = _Printer({}).print(value)
    except (ValueError, RecursionError):
        return None
    return None if _lone_surrogate(text, segments) else "".join(s.text for s in segments)


def editable(payload: bytes) -> tuple[str, str]:
    """The payload as the editor holds it and how it is encoded: ("text") pretty JSON, or the
    text itself when it is not JSON; ("base64") the bytes as base64 when they are not UTF-8."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(payload).decode(), "base64"
    return (pretty_json(text) or text) if len(text) <= DIFF_LIMIT else text, "text"


def display_form(payload: bytes) -> str:
    """What a diff compares: the pretty JSON, else the text, else the bytes as base64."""
    return editable(payload)[0]


def same_document(original: bytes, edited: bytes) -> bool:
    """Whether ``edited`` is ``original`` in another layout: the same bytes, or the same JSON
    document (same keys in the same order, same values as written)."""
    if original == edited:
        return True
    try:
        before, after = original.decode("utf-8"), edited.decode("utf-8")
    except UnicodeDecodeError:
        return False
    pretty = pretty_json(before)
    return pretty is not None and pretty == pretty_json(after)


def line_diff(before: bytes, after: bytes, names: tuple[str, str] = ("original", "edited")) -> list[str]:
    """A unified line diff of the pretty forms of two payloads (empty when they are the same)."""
    old, new = display_form(before), display_form(after)
    if old == new:
        return []
    if len(old) > DIFF_LIMIT or len(new) > DIFF_LIMIT:
        return [f"(too large to compare line by line: {len(before):,} bytes before, {len(after):,} after)"]
    return list(difflib.unified_diff(old.splitlines(), new.splitlines(), *names, lineterm="", n=2))
