"""Repair by the schema: a payload's type mismatches coerced as its current schema says.

The rules (docs/repair.md), and nothing beyond them:

- a string holding a number as JSON writes one, where a ``number`` is wanted (a whole one where an
  ``integer`` is), becomes that number with its digits as written (``"12.50"`` -> ``12.50``);
- ``"true"`` / ``"false"`` where a ``boolean`` is wanted become the boolean;
- one value (a string, a number or a boolean) where an ``array`` is wanted becomes an array of it;
- surrounding whitespace is trimmed where a number is then read (above), and where a string
  fails its ``pattern``, ``enum``, ``const`` or ``format`` and the trimmed string meets it;
- ``anyOf`` / ``oneOf`` are repaired by the one alternative the value can be repaired to.

Anything else is left as it is: a text that is not a JSON number (``"1,5"``, ``"12abc"``,
``"+3"``, ``"012"``), an object where an array is wanted, two rules that could both apply, two
alternatives that would both accept the value. The payload is edited as JSON text at each repaired
value's position, so every other byte stays as it was and numbers keep their written digits.
Reasons name the place (a JSON Pointer) and the rule, never the value: viewers read them (DLQ_MASK).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Iterable

from jsonschema.exceptions import ValidationError
from referencing.exceptions import Unresolvable

from dlq_consumer.validation import NotJSON, json_pointer, json_text, jsonschema_validator, loads_json, one_value_a_key

#: The outcomes: already passes; repaired and passes; repaired but still fails; cannot be repaired.
VALID, REPAIRED, STILL_FAILS, CANNOT = "valid", "repaired", "still_fails", "cannot"
#: Repairs that reveal another (a value wrapped into an array, then its item) take rounds; a
#: payload that needs more has not settled and is left as it is.
MAX_ROUNDS = 8
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WHITESPACE = " \t\r\n"
_STRING_RULES = ("pattern", "enum", "const", "format")


@dataclass(frozen=True)
class Change:
    """One repaired value: where (a JSON Pointer) and by which rule, in words."""

    path: str
    rule: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "rule": self.rule}


@dataclass(frozen=True)
class Repair:
    """What repair by the schema makes of one payload: the outcome, the payload after it (the same
    bytes unless repaired), the changes made and, unless it passes, why not (one sentence)."""

    outcome: str
    payload: bytes
    changes: tuple[Change, ...] = field(default=())
    reason: str | None = None

    @property
    def passes(self) -> bool:
        return self.outcome in (VALID, REPAIRED)


class _Ambiguous(Exception):
    """A value no rule (or more than one) repairs; the message says where and why."""


def schema_validator(schema: dict) -> Any:
    """The jsonschema validator of a schema (Draft 2020-12 unless it says otherwise), as the
    consumer library validates with it (no format assertions)."""
    return jsonschema_validator(schema, check=False)  # checked when its file was loaded


def repair_payload(validator: Any, payload: bytes) -> Repair:
    """Repair ``payload`` (JSON bytes) by the schema of ``validator`` (a jsonschema validator)."""
    try:
        text = json_text(payload)
        document = _load(text)
    except NotJSON as exc:
        return Repair(CANNOT, bytes(payload), reason=f"The payload is not JSON: {exc}.")
    except ValueError as exc:
        reason = str(exc) if isinstance(exc, _Unreadable) else "The payload is not JSON."
        return Repair(CANNOT, bytes(payload), reason=reason)
    except RecursionError:
        return Repair(CANNOT, bytes(payload), reason="The payload is nested too deeply to repair.")
    try:
        if validator.is_valid(document):
            return Repair(VALID, bytes(payload))
        repaired, changes, errors = _repair_text(validator, text, document)
    except _Ambiguous as exc:
        return Repair(CANNOT, bytes(payload), reason=str(exc))
    except Unresolvable:  # a reference of the schema nothing resolves (it is never fetched)
        return Repair(CANNOT, bytes(payload), reason="The schema could not be applied: a reference of it does not resolve.")
    except RecursionError:
        return Repair(CANNOT, bytes(payload), reason="The payload is nested too deeply to repair.")
    if not changes:
        return Repair(CANNOT, bytes(payload), reason="No rule repairs it: " + _words(errors[0]))
    after = repaired.encode("utf-8")
    if errors:
        return Repair(STILL_FAILS, after, tuple(changes), "Repaired, it still fails: " + _words(errors[0]))
    return Repair(REPAIRED, after, tuple(changes))


# --- the rounds ----------------------------------------------------------------------------------

def _repair_text(validator: Any, text: str, document: Any) -> tuple[str, list[Change], list[ValidationError]]:
    """The text with every repair applied, round after round until none applies; the changes
    made and the errors left. _Ambiguous when a value is one no rule can decide."""
    changes: list[Change] = []
    for _ in range(MAX_ROUNDS):
        errors = _errors(validator, document)
        if not errors:
            return text, changes, []
        edits: dict[tuple, tuple[str, str]] = {}  # path -> (new text for the old text's place, rule)
        # Where each failing value is written, found in one reading of the text: one reading a
        # value took 67 s for a payload of 8,000 items, each failing (the text read from its
        # start for every one).
        spans = _spans(text, {tuple(error.absolute_path) for error in errors})
        for error in errors:
            fix = _fix(validator, error, text, spans)
            if fix is None:
                continue
            path = tuple(error.absolute_path)
            if path in edits and edits[path][0] != fix[0]:
                raise _Ambiguous(f"{_where(path)}: two rules of the schema would repair it differently.")
            edits[path] = fix
        if not edits:
            return text, changes, errors
        if any(path[:k] in edits for path in edits for k in range(len(path))):  # a prefix of another
            # One value and one inside it in the same round: cannot be a type mismatch of each.
            raise _Ambiguous("Two repairs, one inside the other, in one step; repair it by hand.")
        pieces, at = [], 0  # the text made again once, not once an edit (a copy of it each)
        for (start, end), path in sorted((spans[path], path) for path in edits):
            new, rule = edits[path]
            pieces += (text[at:start], new)
            at = end
            changes.append(Change(_where(path), rule))
        text = "".join(pieces) + text[at:]
        document = _load(text)
    raise _Ambiguous(f"The repairs did not settle within {MAX_ROUNDS} steps; repair it by hand.")


def _errors(validator: Any, document: Any) -> list[ValidationError]:
    return sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])


def _fix(validator: Any, error: ValidationError, text: str, spans: dict[tuple, tuple[int, int]]) -> tuple[str, str] | None:
    """The new text of the error's value and the rule, None if no rule is about this error;
    _Ambiguous if one is about it and cannot decide. ``spans``: where each failing value is written."""
    value, where = error.instance, _where(error.absolute_path)
    old = text[slice(*spans[tuple(error.absolute_path)])]
    if error.validator == "type":
        wanted = [error.validator_value] if isinstance(error.validator_value, str) else list(error.validator_value)
        return _coerce(value, wanted, where, old)
    if error.validator in _STRING_RULES and isinstance(value, str) and value != value.strip(_WHITESPACE):
        trimmed = value.strip(_WHITESPACE)
        if not validator.evolve(schema=error.schema).is_valid(trimmed):
            return None  # trimmed it fails all the same: left for the errors that remain
        return json.dumps(trimmed, ensure_ascii=False), "surrounding whitespace trimmed"
    if error.validator in ("anyOf", "oneOf") and not _matches_several(validator, error):
        return _one_alternative(validator, error, old, where)
    return None


def _coerce(value: Any, wanted: list[str], where: str, old: str) -> tuple[str, str] | None:
    candidates: list[tuple[str, str]] = []
    if isinstance(value, str):
        trimmed = value.strip(_WHITESPACE)
        if "number" in wanted or "integer" in wanted:
            number = _number(trimmed, integer="number" not in wanted, where=where)
            if number is not None:
                candidates.append((number, "a number written as text"))
        if "boolean" in wanted and trimmed in ("true", "false"):
            candidates.append((trimmed, f'"{trimmed}" as a boolean'))
    if "array" in wanted:
        if isinstance(value, (str, int, float)):  # bool is an int
            candidates.append(("[" + old + "]", "one value where a list is wanted"))
        elif isinstance(value, dict):
            raise _Ambiguous(f"{where}: an object where the schema wants an array; which list it means is a guess.")
    if len(candidates) > 1:
        raise _Ambiguous(f"{where}: it could be repaired as {' or as '.join(c[1] for c in candidates)}.")
    if candidates:
        return candidates[0]
    if isinstance(value, str) and ("number" in wanted or "integer" in wanted):
        raise _Ambiguous(f"{where}: the text is not a number as JSON writes one "
                         "(a comma, letters, a sign or leading zeros are not guessed at).")
    if isinstance(value, str) and "boolean" in wanted:
        raise _Ambiguous(f'{where}: only "true" and "false" are read as a boolean.')
    return None


def _number(text: str, *, integer: bool, where: str) -> str | None:
    """``text`` if it is a JSON number (a whole one when ``integer``), None if it is not one at all."""
    if not _NUMBER.fullmatch(text):
        return None
    if float(text) in (float("inf"), float("-inf")):
        raise _Ambiguous(f"{where}: the number is too large to write as JSON numbers are read.")
    if integer:
        try:
            whole = Decimal(text) == Decimal(text).to_integral_value()
        except InvalidOperation:
            whole = False
        if not whole:
            raise _Ambiguous(f"{where}: the schema wants a whole number and the text is not one.")
    return text


def _matches_several(validator: Any, error: ValidationError) -> bool:
    if error.validator == "oneOf" and "is valid under each of" in error.message:
        raise _Ambiguous(f"{_where(error.absolute_path)}: several alternatives of oneOf already match.")
    return False


def _one_alternative(validator: Any, error: ValidationError, old: str, where: str) -> tuple[str, str] | None:
    """The value (written ``old``) repaired by the one alternative of its anyOf/oneOf that a
    repair makes it pass."""
    found = set()
    for alternative in error.validator_value:
        branch = validator.evolve(schema=alternative)
        try:
            repaired, changes, left = _repair_text(branch, old, _load(old))
        except _Ambiguous:
            continue
        if changes and not left:
            found.add(repaired)
    if len(found) > 1:
        raise _Ambiguous(f"{where}: several alternatives of {error.validator} would accept it once repaired.")
    if not found:
        return None
    return found.pop(), f"repaired to the one alternative of {error.validator} it fits"


# --- the JSON text -------------------------------------------------------------------------------

class _Unreadable(ValueError):
    """A payload that cannot be edited as it was written: the message says why."""


def _load(text: str) -> Any:
    # The strict reader of every verdict (NaN, Infinity, 1e400 are not JSON numbers).
    return loads_json(text, object_pairs_hook=_one_key_each)


# Which of a repeated key's values the schema means is a guess.
_one_key_each = one_value_a_key(lambda key: _Unreadable("The payload repeats a key in an object."))


_DECODER = json.JSONDecoder()


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


_LEAF = object()  # marks a path's own end in the tree _spans walks


def _spans(text: str, paths: set[tuple]) -> dict[tuple, tuple[int, int]]:
    """Where the value at each of ``paths`` is written in ``text``: path -> (start, end), in one
    reading of the text. Only the containers on the paths are entered; every other value is
    passed over by the JSON decoder (C) in one call."""
    tree: dict = {}
    for path in paths:
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        node[_LEAF] = True
    found: dict[tuple, tuple[int, int]] = {}

    def walk(start: int, node: dict, path: tuple) -> int:
        # The value written at ``start``: its end, each path below it found on the way.
        if len(node) == (_LEAF in node):  # no path goes further in
            end = _DECODER.raw_decode(text, start)[1]
        else:
            close, index = ("}", None) if text[start] == "{" else ("]", 0)
            at = _skip(text, start + 1)
            while text[at] != close:
                if index is None:  # an object: the key, then past the colon
                    part, at = json.decoder.scanstring(text, at + 1)
                    at = _skip(text, _skip(text, at) + 1)
                else:
                    part, index = index, index + 1
                below = node.get(part)
                at = _skip(text, walk(at, below, (*path, part)) if below is not None
                           else _DECODER.raw_decode(text, at)[1])
                if text[at] == ",":
                    at = _skip(text, at + 1)
            end = at + 1
        if _LEAF in node:
            found[path] = (start, end)
        return end

    walk(_skip(text, 0), tree, ())
    return found


def _where(path: Iterable) -> str:
    return json_pointer(path) or "/"


_REQUIRED = re.compile(r"^'(.*)' is a required property$", re.S)


def _words(error: ValidationError) -> str:
    """An error in words that name the place and the schema's rule, not the payload's value; a
    missing property by its own place ("/customer_id: missing; the schema requires it")."""
    where = _where(error.absolute_path)
    if error.validator == "required":
        missing = _REQUIRED.match(error.message)
        if missing:
            return f"{json_pointer([*error.absolute_path, missing.group(1)])}: missing; the schema requires it."
        return f"{where}: {error.message}."
    if error.validator == "type":
        return f"{where}: the schema wants {' or '.join(_as_list(error.validator_value))}."
    rule = json.dumps(error.validator_value, ensure_ascii=False) if not isinstance(error.validator_value, (dict, list)) \
        else None
    return f"{where}: fails the schema's {error.validator}" + (f" {rule}" if rule and len(rule) <= 60 else "") + "."


def _as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]
