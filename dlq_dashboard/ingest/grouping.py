"""Failure groups: which entries failed for the same reason, as a key computed once per entry
when the mirror writes it.

An error text is normalized so that the parts that differ from message to message (ids,
numbers, quoted values) do not split a group: "order 17 not found" and "order 42 not found"
are one group, and so are 500 schema failures "/items/0/price: 'abc' is not of type 'number'"
with different wrong values. An entry belongs to the failure group of its subject, reason and
key (db/counts.py keeps each group's counts); the list filters by it (``group=``).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

NO_ERROR = "(no error text)"
MAX_KEY = 300

_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HEX_ID = re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{12,}\b")
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
_DIGITS_IN_WORD = re.compile(r"(?<=[A-Za-z_-])\d{3,}\b")
_SPACES = re.compile(r"\s+")
# The value a JSON Schema message starts with ("'abc' is not of type 'number'", "-1 is less
# than the minimum of 0") is the failing instance, which differs per message; the rule after it
# does not. A required-property message starts with the property's name, which is the rule.
_LEADING_VALUE = re.compile(
    r"^(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|True|False|None|"
    r"true|false|null|\{.*\}|\[.*\])\s+(?=(?:is|are|does|should|has|was|must|cannot)\b)", re.DOTALL)


@lru_cache(maxsize=65536)
def normalize_error_text(text: str) -> str:
    """An error text with ids, numbers and quoted values replaced by placeholders."""
    text = _UUID.sub("<id>", text)
    text = _HEX_ID.sub("<id>", text)
    text = _QUOTED.sub("'…'", text)
    text = _DIGITS_IN_WORD.sub("<n>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACES.sub(" ", text).strip()[:MAX_KEY]


@lru_cache(maxsize=4096)
def normalize_schema_message(message: str) -> str:
    """A schema error message with its failing value left out, its rule kept."""
    message = _SPACES.sub(" ", message).strip()
    if message.endswith("is a required property"):
        return message[:MAX_KEY]
    return _LEADING_VALUE.sub("… ", message)[:MAX_KEY]


def error_group(error: str | None, schema_errors: str | None) -> str:
    """The group key of an entry from its stored error text and schema errors (JSON text)."""
    items = None
    if schema_errors:
        try:
            items = json.loads(schema_errors)
        except ValueError:
            items = None
    return group_key(error, items)


def group_key(error: str | None, schema_errors: list | None) -> str:
    """The group key of an entry from its error text and its parsed schema errors.

    Schema failures group by each failing path and rule; other failures by the normalized text.
    """
    if schema_errors:
        items = schema_errors
        if isinstance(items, list) and items:
            parts = []
            for item in items:
                if isinstance(item, dict):
                    path = item.get("path") if isinstance(item.get("path"), str) else ""
                    parts.append(f"{path or '(root)'}: {normalize_schema_message(str(item.get('message', '')))}")
            if parts:
                return "; ".join(sorted(set(parts)))[:MAX_KEY]
    if error and error.strip():
        return normalize_error_text(error)
    return NO_ERROR
