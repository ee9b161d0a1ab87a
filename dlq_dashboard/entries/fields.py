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
payload makes a query fail. The values are stored at ingest (ingest/key_fields.py), and the
filter looks them up there, reading the payload only of entries not filled yet. Strings compare as they are, numbers and booleans as JSON writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Engine, and_, func, or_, select, union_all
from sqlalchemy.exc import DBAPIError

from ..config import ConfigError
from ..db.engine import is_sqlite
from ..db.models import Entry
from ..ingest.key_fields import ENTRY_FIELDS, KEY_FIELDS, MAX_VALUE, pending_condition, value_expression
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
#: The pending_below of a field not recorded in key_fields: every entry is read from its payload.
UNRECORDED = 2**62


def key_fields(configured: tuple[tuple[str, str], ...]) -> tuple[KeyField, ...]:
    """The key fields of ``settings.list_fields`` (label, pointer), in their configured order."""
    return tuple(KeyField(label, pointer) for label, pointer in configured)


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


def field_expression(engine: Engine, field: KeyField, payload=Entry.payload):
    """The field's value as text (NULL where the payload has none), for a SELECT or a WHERE."""
    return value_expression(is_sqlite(engine), field.tokens, payload)


def _spellings(engine: Engine, value: str) -> list[str]:
    return [value] if is_sqlite(engine) else list(dict.fromkeys([value, as_latin1(value)]))


def payload_condition(engine: Engine, field: KeyField, value: str, payload=Entry.payload):
    """Entries whose payload has ``value`` at the field's pointer, read from the payload."""
    expression = field_expression(engine, field, payload)
    spellings = _spellings(engine, value)
    return expression == spellings[0] if len(spellings) == 1 else or_(*(expression == s for s in spellings))


def field_condition(engine: Engine, field: KeyField, value: str):
    """Entries whose field's value is ``value``: those entry_fields holds it for
    (ingest/key_fields.py), and those it has not filled yet (an id at or below the field's
    ``pending_below``, every entry while the field is not recorded) whose payload has it."""
    spellings = _spellings(engine, value)
    if any(len(s) > MAX_VALUE for s in spellings):  # never stored: read from the payloads
        return payload_condition(engine, field, value)
    recorded = pending_condition(field.label, field.pointer)
    stored = select(ENTRY_FIELDS.c.entry_id).where(
        ENTRY_FIELDS.c.field_id == select(KEY_FIELDS.c.id).where(recorded).scalar_subquery(),
        ENTRY_FIELDS.c.value.in_(spellings))
    unfilled = Entry.__table__.alias("unfilled")
    below = func.coalesce(select(KEY_FIELDS.c.pending_below).where(recorded).scalar_subquery(), UNRECORDED)
    pending = select(unfilled.c.id).where(unfilled.c.id <= below,
                                          payload_condition(engine, field, value, unfilled.c.payload))
    return Entry.id.in_(union_all(stored, pending))


def stored_lookup(conn: Connection, field: KeyField, value: str):
    """The condition on entry_fields rows that finds exactly the entries whose field's value is
    ``value``, when entry_fields holds that value for every entry (the field recorded, nothing
    left to backfill, the value short enough to store); None when a filter by it must read
    payloads too (``field_condition``). A query can then be driven by those rows, in entry order
    (the key's last column), and stop at its page instead of collecting every match first."""
    spellings = _spellings(conn.engine, value)
    if any(len(s) > MAX_VALUE for s in spellings):
        return None
    field_id = conn.execute(select(KEY_FIELDS.c.id).where(pending_condition(field.label, field.pointer),
                                                         KEY_FIELDS.c.pending_below == 0)
                            .order_by(KEY_FIELDS.c.id).limit(1)).scalar()
    if field_id is None:
        return None
    return and_(ENTRY_FIELDS.c.field_id == field_id, ENTRY_FIELDS.c.value.in_(spellings))


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
