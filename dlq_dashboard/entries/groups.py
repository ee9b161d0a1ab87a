"""Failure groups: entries of one subject and reason whose errors say the same thing.

An error text is normalized so that the parts that differ from message to message (ids,
numbers, quoted values) do not split a group: "order 17 not found" and "order 42 not found"
are one group, and so are 500 schema failures "/items/0/price: 'abc' is not of type 'number'"
with different wrong values. The normalized text is the group's key and what the list filters
by (``group=``), computed by the same Python function in both places through an SQL function.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, event, func

from ..times import format_time

SQL_FUNCTION = "dlq_error_group"
NO_ERROR = "(no error text)"
_MAX_KEY = 300

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


def normalize_error_text(text: str) -> str:
    """An error text with ids, numbers and quoted values replaced by placeholders."""
    text = _UUID.sub("<id>", text)
    text = _HEX_ID.sub("<id>", text)
    text = _QUOTED.sub("'…'", text)
    text = _DIGITS_IN_WORD.sub("<n>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACES.sub(" ", text).strip()[:_MAX_KEY]


def normalize_schema_message(message: str) -> str:
    """A schema error message with its failing value left out, its rule kept."""
    message = _SPACES.sub(" ", message).strip()
    if message.endswith("is a required property"):
        return message[:_MAX_KEY]
    return _LEADING_VALUE.sub("… ", message)[:_MAX_KEY]


@lru_cache(maxsize=65536)
def error_group(error: str | None, schema_errors: str | None) -> str:
    """The group key of an entry from its stored error text and schema errors (JSON text).

    Schema failures group by each failing path and rule; other failures by the normalized text.
    """
    if schema_errors:
        try:
            items = json.loads(schema_errors)
        except ValueError:
            items = None
        if isinstance(items, list) and items:
            parts = []
            for item in items:
                if isinstance(item, dict):
                    path = item.get("path") if isinstance(item.get("path"), str) else ""
                    parts.append(f"{path or '(root)'}: {normalize_schema_message(str(item.get('message', '')))}")
            if parts:
                return "; ".join(sorted(set(parts)))[:_MAX_KEY]
    if error and error.strip():
        return normalize_error_text(error)
    return NO_ERROR


def register_sql_function(engine: Engine) -> None:
    """Make ``dlq_error_group(error, schema_errors)`` available on every SQLite connection."""
    if engine.dialect.name != "sqlite" or event.contains(engine, "checkout", _on_checkout):
        return
    event.listen(engine, "checkout", _on_checkout)


def _on_checkout(dbapi_connection, record, _proxy) -> None:
    # On checkout rather than connect: connections pooled before the store existed
    # (the migration's) need the function too. Registered once per connection.
    if not record.info.get(SQL_FUNCTION):
        dbapi_connection.create_function(SQL_FUNCTION, 2, error_group, deterministic=True)
        record.info[SQL_FUNCTION] = True


def group_expression(engine: Engine, error_column, schema_errors_column):
    """An entry's group key as SQL (on other databases than SQLite: the raw texts)."""
    if engine.dialect.name == "sqlite":
        return getattr(func, SQL_FUNCTION)(error_column, schema_errors_column)
    return func.coalesce(schema_errors_column, error_column, NO_ERROR)


@dataclass
class Group:
    """Entries of one subject and reason whose errors normalize to the same text."""

    subject: str | None
    reason: str | None
    key: str
    count: int
    first_seen: datetime | None
    last_seen: datetime | None

    def filter_args(self) -> dict[str, str]:
        """The list filter that shows this group's entries."""
        args = {"group": self.key}
        if self.subject:
            args["subject"] = self.subject
        if self.reason:
            args["reason"] = self.reason
        return args

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "reason": self.reason, "error": self.key, "count": self.count,
                "first_seen": format_time(self.first_seen), "last_seen": format_time(self.last_seen)}
