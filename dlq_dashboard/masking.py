"""DLQ_MASK: the payload fields and headers a viewer sees as "•••" (SPEC section 9).

``Mask`` is built once from the settings. Who sees through it is decided by the reader
(``access/reader.py``): every channel reads entries through ``access/visible.py``, which shows a
viewer ``mask.entry(view)`` instead of the entry; the alerts (written below that layer, in the
mirror's transactions) use ``group_key`` the same way. Operators and admins never go through it.

What an item of DLQ_MASK means:

- one that starts with ``/`` is a JSON Pointer (RFC 6901) into the payload; a token ``*``
  also stands for every element of an array and every member of an object
  (``/items/*/card``). A pointer that reaches nothing in a payload hides nothing there.
- anything else is a header name, matched case-insensitively; every value of it is hidden.

A masked field keeps its place: the payload stays JSON, the field's value (whatever it was,
an object too) becomes the string "•••". A payload that is not JSON cannot have a pointer
applied, so while DLQ_MASK holds a pointer such a payload is hidden from viewers entirely; so is
a JSON payload holding a key more than once in one object (at any depth): readers differ on which
of its values counts, and the text keeps them all, so no rewrite of one hides them exactly.

The values hidden are also replaced wherever the entry's own texts quote them (the error, the
schema errors, notes, the close note, the history and the audit), as whole words, ignoring
case. A value the service changed before quoting it (shortened, reformatted, encoded) is not
recognised, nor are booleans and nulls (they would replace every "true" in a text).
"""

from __future__ import annotations

import dataclasses
import json
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Protocol, TypeVar

from .surrogates import escape_lone_surrogates
from .unpacking import decompressed_whole


class MaskedEntry(Protocol):
    """What the mask reads of an entry: entries/view.py's EntryView has it all (a dataclass, so a
    masked copy is made with ``dataclasses.replace``; this module sits below it)."""

    payload: bytes
    payload_available: bool
    headers: dict[str, list[str]]
    original_subject: str | None
    error: str | None
    close_note: str | None
    schema_errors: list | None
    notes: list[str]
    history: list[dict] | None
    actions: list[dict] | None

    @property
    def payload_text(self) -> str | None: ...


Entry = TypeVar("Entry", bound=MaskedEntry)

#: What a viewer sees instead of a masked value.
MASKED = "•••"
PAYLOAD_HIDDEN = ("The payload is hidden: DLQ_MASK names fields of JSON payloads, and this payload is not "
                  "JSON, so they cannot be picked out of it.")
PAYLOAD_REPEATED = ("The payload is hidden: DLQ_MASK names fields of JSON payloads, and this payload holds a "
                    "key more than once in one object, so which of its values a field is cannot be told.")
# The payload text the search index holds (migration 0003, the SQLite index alike).
_SEARCHED_CHARS = 65536
_WORD_PART = re.compile(r"[^\W_]+")
_QUERY_WORD = re.compile(r"\w+")


def parse_pointer(pointer: str) -> tuple[str, ...]:
    """A JSON Pointer's reference tokens, unescaped ('' -> (), '/a~1b/0' -> ('a/b', '0'))."""
    if not pointer:
        return ()
    if not pointer.startswith("/") or re.search(r"~(?![01])", pointer):
        raise ValueError(f"{pointer!r} is not a JSON Pointer")
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/"))


@dataclass(frozen=True)
class Mask:
    """The payload pointers and header names DLQ_MASK hides from viewers."""

    pointers: tuple[tuple[str, ...], ...] = ()
    header_names: frozenset[str] = frozenset()  # lower case

    @classmethod
    def parse(cls, items: Iterable[str]) -> "Mask":
        """From DLQ_MASK's items: '/...' a JSON Pointer, anything else a header name."""
        pointers, names = [], set()
        for item in items:
            if item.startswith("/"):
                pointers.append(parse_pointer(item))
            else:
                names.add(item.lower())
        return cls(tuple(pointers), frozenset(names))

    @classmethod
    def from_settings(cls, settings: Any) -> "Mask":
        """The mask of ``settings.mask`` (DLQ_MASK)."""
        return cls.parse(getattr(settings, "mask", ()))

    def __bool__(self) -> bool:
        return bool(self.pointers or self.header_names)

    # --- the pieces -----------------------------------------------------------------------------

    def mask_payload(self, payload: bytes) -> tuple[bytes | None, list[str]]:
        """The payload with every field a pointer reaches set to "•••", and the values hidden.

        None instead of the payload when pointers are set and the payload is not JSON, or holds
        a key more than once in one object (it is hidden whole); the payload as it was when
        nothing matched.
        """
        if not self.pointers or not payload:
            return payload, []
        try:
            text = payload.decode("utf-8")
            document = json.loads(text, object_pairs_hook=_unique_keys)
        except _RepeatedKey:
            # Hidden whole: the last value of a key is the one a rewrite would mask, and the
            # others stay in the bytes. Every value a pointer reaches, in each of them, is hidden
            # in the entry's texts.
            return None, _values_everywhere(self, text)
        except (ValueError, RecursionError):
            # Hidden whole. Gzip bytes no header declares still hold the values its error, schema
            # errors and notes may quote: found in it decompressed, so those texts hide them too.
            return None, self._values_compressed(payload)
        document, replaced = self._masked(document)
        if not replaced:
            return payload, []
        try:
            # ensure_ascii=False writes half a UTF-16 pair as it is, which UTF-8 cannot hold.
            return escape_lone_surrogates(json.dumps(document, ensure_ascii=False)).encode("utf-8"), _values(replaced)
        except RecursionError:
            return None, []

    def _masked(self, document: Any) -> tuple[Any, list[Any]]:
        replaced: list[Any] = []
        for tokens in self.pointers:
            document = _mask_at(document, tokens, replaced)
        return document, replaced

    def _values_compressed(self, payload: bytes) -> list[str]:
        """The values the pointers reach in a compressed JSON payload (unpacking.py's bound)."""
        unpacked = decompressed_whole(payload)
        if unpacked is None:
            return []
        try:
            return _values_everywhere(self, unpacked.decode("utf-8"))
        except (ValueError, RecursionError):
            return []

    @staticmethod
    def hides_whole(payload: bytes | None) -> bool:
        """Whether a mask holding a pointer hides ``payload`` whole (mask_payload's None): it is not
        UTF-8 JSON, or it holds a key more than once in one object. Stored with each entry
        (``entries.payload_opaque``), so a key field's filter finds none of them for a viewer."""
        if not payload:
            return False
        try:
            json.loads(payload.decode("utf-8"), object_pairs_hook=_unique_keys)
        except (ValueError, RecursionError):
            return True
        return False

    @staticmethod
    def hidden_because(payload: bytes | None) -> str:
        """Why a payload mask_payload hides whole is hidden (PAYLOAD_REPEATED or PAYLOAD_HIDDEN)."""
        try:
            json.loads((payload or b"").decode("utf-8"), object_pairs_hook=_unique_keys)
        except _RepeatedKey:
            return PAYLOAD_REPEATED
        except (ValueError, RecursionError):
            pass
        return PAYLOAD_HIDDEN

    def mask_headers(self, headers: dict[str, list[str]]) -> tuple[dict[str, list[str]], list[str]]:
        """The headers with every value of a masked name set to "•••", and the values hidden."""
        if not self.header_names:
            return headers, []
        shown, hidden = {}, []
        for name, values in headers.items():
            if name.lower() in self.header_names:
                hidden.extend(v for v in values if isinstance(v, str))
                if name.lower() == "traceparent":
                    # What is read from it is hidden with it: its trace id and parent id, which
                    # a text may quote alone ("trace 4bf92f35..."); entries/traces.py reads them.
                    hidden.extend(part for v in values if isinstance(v, str)
                                  for part in v.split("-")[1:3] if len(part) >= 16)
                shown[name] = [MASKED] * len(values)
            else:
                shown[name] = values
        return shown, hidden

    @staticmethod
    def mask_text(text: str | None, values: Iterable[str]) -> str | None:
        """``text`` with each of ``values`` (as a whole word, any case) replaced by "•••"."""
        if not text:
            return text
        pattern = _pattern(tuple(values))
        return pattern.sub(MASKED, text) if pattern else text

    def covers(self, tokens: tuple[str, ...] | str | None) -> bool:
        """Whether a pointer (its tokens, or its text) reaches a field a pointer hides, or a field
        holding one: ``/customer`` and ``/customer/email`` both, under ``/customer/email``. A text
        that is no JSON Pointer counts as covered (nothing can be said of what it reaches)."""
        if not self.pointers:
            return False
        if not isinstance(tokens, tuple):
            try:
                tokens = parse_pointer(tokens) if isinstance(tokens, str) else None
            except ValueError:
                tokens = None
            if tokens is None:
                return True
        for masked in self.pointers:
            shorter = min(len(masked), len(tokens))
            if all(a == b or a == "*" for a, b in zip(masked[:shorter], tokens[:shorter])):
                return True
        return False

    def mask_patch(self, ops: Any) -> Any:
        """A JSON Patch as a viewer sees it: the ``value`` of an operation on a field this mask
        hides (or one holding it) is "•••" (a ``test`` or ``replace`` may quote the hidden value)."""
        if not self.pointers or not isinstance(ops, list):
            return ops
        return [{**op, "value": MASKED} if isinstance(op, dict) and "value" in op and self.covers(op.get("path"))
                else op for op in ops]

    # --- an entry ---------------------------------------------------------------------------------

    def entry(self, view: Entry, also: Iterable[str] = ()) -> Entry:
        """The entry as a viewer sees it: a copy with the masked fields and their quotes hidden
        (and ``also``'s values in its texts: those of the entry it is a republish of)."""
        if not self:
            return view
        payload, hidden = self.mask_payload(view.payload) if view.payload_available else (view.payload, [])
        headers, header_values = self.mask_headers(view.headers)
        values = tuple(dict.fromkeys([*hidden, *header_values, *also]))
        notes = [self.mask_text(n, values) for n in view.notes]
        changes: dict[str, Any] = {}
        if payload is None:
            payload = b""
            changes["payload_available"] = False
            changes["payload_hidden"] = True
            notes.append(self.hidden_because(view.payload))
        if values:
            def text(value):
                return self.mask_text(value, values)
            # The Dlq-* headers (and any other) may quote a value too: Dlq-Error is the error.
            headers = {name: [text(v) for v in values_] for name, values_ in headers.items()}
            changes.update(
                error=text(view.error), close_note=text(view.close_note),
                schema_errors=_mask_strings(view.schema_errors, text),
                history=_mask_strings(view.history, text), actions=_mask_strings(view.actions, text))
        if self.pointers and view.actions:
            # A bulk patch's record carries the patch: its values for a masked field are hidden
            # whatever they are (a new value is not one of the entry's own).
            changes["actions"] = [self.mask_record(a) for a in changes.get("actions", view.actions)]
        return dataclasses.replace(view, payload=payload, headers=headers, notes=notes, hidden_values=values,
                                   **changes)

    def mask_record(self, record: Any) -> Any:
        """An audit record (or a job's selection) with its ``detail.patch`` through mask_patch."""
        detail = record.get("detail") if isinstance(record, dict) else None
        if not isinstance(detail, dict) or not detail.get("patch"):
            return record
        return {**record, "detail": {**detail, "patch": self.mask_patch(detail["patch"])}}

    def values_of(self, view: MaskedEntry) -> tuple[str, ...]:
        """The values of an entry this mask hides (to hide them in texts about it, e.g. a group)."""
        return self.values_in(view.payload, view.payload_available, view.headers)

    def values_in(self, payload: bytes | None, payload_available: bool, headers: Any) -> tuple[str, ...]:
        """The values this mask hides in a payload and headers (an entry's stored columns)."""
        _, hidden = self.mask_payload(payload or b"") if payload_available else (None, [])
        return tuple(hidden + self.mask_headers(headers if isinstance(headers, dict) else {})[1])

    def group_key(self, key: str, newest: MaskedEntry | None) -> str:
        """A failure group's text as a viewer sees it: a group's text is its entries' common
        error, so what the mask hides in its newest entry is hidden in it too (pages, alerts)."""
        return self.mask_text(key, self.values_of(newest)) if self and newest is not None else key

    def patch_values(self, ops: Any) -> tuple[str, ...]:
        """The values a JSON Patch writes into (or tests against) a field this mask hides: what
        ``mask_patch`` shows as "•••", to hide them where a result quotes them too."""
        if not self.pointers or not isinstance(ops, list):
            return ()
        return tuple(_values([op["value"] for op in ops if isinstance(op, dict) and "value" in op
                              and self.covers(op.get("path"))]))

    def texts(self, value: Any, values: Iterable[str]) -> Any:
        """``value`` (a text, or lists and dicts of them: a job item, an audit record) with each
        of ``values`` hidden in every string inside it, as mask_text does; a copy."""
        values = tuple(values)
        return _mask_strings(value, lambda text: self.mask_text(text, values)) if values else value

    def finds(self, view: MaskedEntry, q: str) -> bool:
        """Whether a search for ``q`` finds the entry in what a viewer sees of it: every word,
        the last as a prefix, in its subject, error or payload, case and accents ignored."""
        if not self:
            return True
        seen = self.entry(view)
        payload = (seen.payload_text or "")[:_SEARCHED_CHARS] if seen.payload_available else ""
        words = set(_words(" ".join((seen.original_subject or "", seen.error or "", payload))))
        wanted = _words(" ".join(_QUERY_WORD.findall(q)))
        if not wanted:
            return False
        *whole, last = wanted
        return all(w in words for w in whole) and any(w.startswith(last) for w in words)


# --- helpers ----------------------------------------------------------------------------------------

class _RepeatedKey(ValueError):
    """A JSON object holds a key more than once."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # dlq_consumer.validation.one_value_a_key's rule, which this base module may not import.
    value = dict(pairs)
    if len(value) != len(pairs):
        raise _RepeatedKey("a key given more than once")
    return value


class _Pairs(list):
    """A JSON object as its (key, value) pairs, every one of a repeated key kept."""


def _values_everywhere(mask: Mask, text: str) -> list[str]:
    """The values ``mask``'s pointers reach in a JSON text, in every value of a repeated key
    (ValueError or RecursionError if it is not JSON)."""
    document = json.loads(text, object_pairs_hook=_Pairs)
    found: list[Any] = []
    for tokens in mask.pointers:
        _reached(document, tokens, found)
    return _values(found)


def _reached(node: Any, tokens: tuple[str, ...], found: list) -> None:
    """What ``tokens`` reach in ``node`` (objects as _Pairs, each pair of a matching key), into ``found``."""
    if not tokens:
        found.append(node)
        return
    token, rest = tokens[0], tokens[1:]
    if isinstance(node, _Pairs):
        for key, value in node:
            if token in ("*", key):
                _reached(value, rest, found)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            if token == "*" or token == str(index):
                _reached(value, rest, found)


def _mask_at(node: Any, tokens: tuple[str, ...], replaced: list) -> Any:
    """``node`` with what ``tokens`` reach set to MASKED; the values it held go to ``replaced``."""
    if not tokens:
        replaced.append(node)
        return MASKED
    token, rest = tokens[0], tokens[1:]
    if isinstance(node, dict):
        keys = list(node) if token == "*" else ([token] if token in node else [])
        for key in keys:
            node[key] = _mask_at(node[key], rest, replaced)
    elif isinstance(node, list):
        if token == "*":
            indexes = range(len(node))
        elif token.isascii() and token.isdigit() and (token == "0" or not token.startswith("0")) and int(token) < len(node):
            indexes = [int(token)]
        else:
            indexes = []
        for index in indexes:
            node[index] = _mask_at(node[index], rest, replaced)
    return node


def _values(replaced: list) -> list[str]:
    """The text of every string and number inside the values replaced."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, _Pairs):
            for _, item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            if value and value != MASKED:
                out.append(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(json.dumps(value))

    walk(replaced)
    return out


def _variants(value: str) -> list[str]:
    """How a text may quote a value: as it is, JSON-escaped, Python-escaped."""
    found = [value, json.dumps(value, ensure_ascii=False)[1:-1], json.dumps(value)[1:-1], repr(value)[1:-1]]
    return list(dict.fromkeys(v for v in found if v))


@lru_cache(maxsize=1024)
def _pattern(values: tuple[str, ...]) -> re.Pattern | None:
    alternatives = sorted({v for value in values for v in _variants(value)}, key=len, reverse=True)
    pattern = None
    if alternatives:
        # A word character next to the value means it is part of a longer word, not the value.
        pattern = re.compile("|".join(_bounded(a) for a in alternatives), re.IGNORECASE)
    return pattern


def _bounded(value: str) -> str:
    # A word character beside a value that starts or ends with one makes it part of a longer
    # word ("12" in "2012"), not the value; a value that starts with "@" needs no such edge.
    before = r"(?<!\w)" if re.match(r"\w", value) else ""
    after = r"(?!\w)" if re.search(r"\w$", value) else ""
    return before + re.escape(value) + after


def _mask_strings(value: Any, text) -> Any:
    """Every string inside ``value`` (lists and dicts of them) passed through ``text``."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, list):
        return [_mask_strings(v, text) for v in value]
    if isinstance(value, dict):
        return {k: _mask_strings(v, text) for k, v in value.items()}
    return value


def _words(text: str) -> list[str]:
    """Words as the search index cuts them: runs of letters and digits, case and accents folded."""
    # Accents are folded word by word, and only in words that are not ASCII: most are, and a
    # character-by-character fold of the whole text is most of the time a search spends.
    return [w if w.isascii() else _fold(w) for w in _WORD_PART.findall(text.casefold())]


def _fold(word: str) -> str:
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c))
