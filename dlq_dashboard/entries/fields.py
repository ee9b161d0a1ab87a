"""Key fields (DLQ_LIST_FIELDS): payload values the list shows as columns and filters by.

A key field is a label and a JSON Pointer. Its value is read by the database, with the same
expression for the column and for the filter, so what a row shows is what a filter finds:

- SQLite: ``json_extract`` of the payload as text, for payloads ``json_valid`` accepts.
- PostgreSQL: the payload (bytes) read as LATIN-1, which never fails (every byte is a
  character; a payload holding a NUL byte is skipped), checked with ``pg_input_is_valid``
  and taken apart with ``::jsonb #>>``. Characters beyond ASCII then come back as their
  UTF-8 bytes read one by one: ``shown_value`` turns them back, and a filter compares with
  both spellings of its value.

A payload that is not JSON, or holds nothing at the pointer, has no value there (NULL); no
payload makes a query fail. Strings compare as they are, numbers and booleans as JSON writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, case, cast, func, literal, literal_column, or_
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.exc import DBAPIError
from sqlalchemy.types import Text

from ..config import ConfigError
from ..db.engine import is_sqlite
from ..db.models import Entry
from ..masking import Mask, parse_pointer


@dataclass(frozen=True)
class KeyField:
    """One key field: the column label and filter name, and its JSON Pointer."""

    label: str
    pointer: str

    @property
    def tokens(self) -> tuple[str, ...]:
        return parse_pointer(self.pointer)

    @property
    def param(self) -> str:
        """The request parameter that filters by it: ``field.<label>``."""
        return FIELD_PREFIX + self.label


#: Filter parameters of key fields are ``field.<label>=<value>``.
FIELD_PREFIX = "field."


def key_fields(configured: tuple[tuple[str, str], ...]) -> tuple[KeyField, ...]:
    """The key fields of ``settings.list_fields`` (label, pointer), in their configured order."""
    return tuple(KeyField(label, pointer) for label, pointer in configured)


def _sqlite_paths(tokens: tuple[str, ...]) -> list[str]:
    """SQLite JSON paths for a pointer: a numeric token is an array index first, a key second."""
    def path(as_index: bool) -> str:
        parts = []
        for token in tokens:
            if as_index and token.isascii() and token.isdigit():
                parts.append(f"[{int(token)}]")
            else:
                parts.append(f'."{token}"')  # config refuses a token holding '"' or '\'
        return "$" + "".join(parts)
    return list(dict.fromkeys([path(True), path(False)]))


def check_database(engine: Engine, configured: tuple[tuple[str, str], ...]) -> None:
    """ConfigError (one line at start) when key fields are set and the database cannot read
    them: PostgreSQL before 16 has no pg_input_is_valid, SQLite without JSON functions."""
    if not configured:
        return
    with engine.connect() as conn:
        if is_sqlite(engine):
            try:
                conn.exec_driver_sql("SELECT json_valid('1')")
                return
            except DBAPIError:
                raise ConfigError("DLQ_LIST_FIELDS needs SQLite's JSON functions, which this SQLite lacks") from None
        version = conn.dialect.server_version_info or (0,)
    if version < (16,):
        raise ConfigError(f"DLQ_LIST_FIELDS needs PostgreSQL 16 or newer (this server is "
                          f"{'.'.join(map(str, version))}): unset it, or upgrade the server")


def field_expression(engine: Engine, field: KeyField):
    """The field's value as text (NULL where the payload has none), for a SELECT or a WHERE."""
    if is_sqlite(engine):
        text = cast(Entry.payload, Text)
        values = []
        for path in _sqlite_paths(field.tokens):
            kind = func.json_type(text, path)
            # json_extract gives 1 and 0 for true and false; PostgreSQL and JSON say true and false.
            values.append(case((kind == "true", literal("true")), (kind == "false", literal("false")),
                               (kind == "null", None), else_=cast(func.json_extract(text, path), Text)))
        value = values[0] if len(values) == 1 else func.coalesce(*values)
        return case((func.json_valid(text) == 1, value), else_=None)
    text = func.convert_from(Entry.payload, literal_column("'LATIN1'"))
    value = cast(text, JSONB).op("#>>", return_type=Text)(literal(list(field.tokens), ARRAY(Text)))
    # CASE tries its conditions in order (AND does not): no conversion of a payload with a NUL
    # byte (text cannot hold one), no cast of one that is not JSON.
    has_nul = literal_column("position('\\x00'::bytea in entries.payload)") > 0
    return case((has_nul, None), (func.pg_input_is_valid(text, literal_column("'jsonb'")), value), else_=None)


def field_condition(engine: Engine, field: KeyField, value: str):
    """Entries whose field's value is ``value``."""
    expression = field_expression(engine, field)
    if is_sqlite(engine):
        return expression == value
    return or_(expression == value, expression == as_latin1(value))


def as_latin1(value: str) -> str:
    """``value``'s UTF-8 bytes read as LATIN-1: how PostgreSQL's expression spells it."""
    return value.encode("utf-8").decode("latin-1")


def shown_value(engine: Engine, raw: str | None) -> str | None:
    """A value as the expression returned it, as text (PostgreSQL: back from LATIN-1)."""
    if raw is None or is_sqlite(engine):
        return raw
    try:
        return raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):  # written as a \\u escape in the JSON
        return raw


def hidden_by(mask: Mask | None, field: KeyField) -> bool:
    """Whether DLQ_MASK hides the field (or part of it) from whoever sees through ``mask``."""
    return bool(mask) and mask.covers(field.tokens)
