"""Key fields (DLQ_LIST_FIELDS) stored where they can be indexed: entry_fields holds (field,
value, entry) for every entry whose payload has a value at a key field's pointer, so the list's
``field.<label>`` filter and its summary look values up instead of reading every payload.

- Each configured label and pointer is a row of key_fields (``record_key_fields``, when the
  dashboard's mirror starts). Entries are filled as they are written, in the writing
  transaction, by one INSERT ... SELECT a field a batch (``fill_key_fields``: every path that
  inserts entries calls it beside ``index_new_entries``, and a payload that changes is filled
  again). The value is the expression entries/fields.py shows and filters by, so what is stored
  is what a filter of the payload would find.
- A label added, or its pointer changed, leaves the entries written before it unfilled:
  ``pending_below`` is the highest id not filled, lowered to 0 by ``backfill_step`` a bounded
  batch at a time (``KeyFieldBackfill``, a thread beside the mirror). Until then the filter reads
  the payloads of the entries not filled yet (entries/fields.py ``field_condition``), so its
  answers are the same before, during and after the backfill.
- A label dropped or re-pointed is retired: its values are deleted in batches, then its row.

Payloads that are not JSON, or have nothing at the pointer, store nothing; a value longer than
MAX_VALUE is not stored either (a filter by such a value reads the payloads).
"""

from __future__ import annotations

import json
import logging
import threading

from sqlalchemy import Connection, Engine, and_, case, cast, false, func, insert, literal, literal_column, or_, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DataError, DBAPIError
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.types import LargeBinary, Text

from ..db.failing import FailureLog
from ..db.engine import write_transaction
from ..db.json_node import NAME as JSON_NODE, TEXT as VALUE_TEXT
from ..db.models import Entry, EntryField, KeyFieldState
from ..masking import parse_pointer

log = logging.getLogger(__name__)

ENTRIES = Entry.__table__
KEY_FIELDS = KeyFieldState.__table__
ENTRY_FIELDS = EntryField.__table__
#: The longest value stored (characters); a longer one is found by reading the payloads.
MAX_VALUE = 256
#: Entries filled or values deleted in one backfill transaction.
BACKFILL_BATCH = 5_000
#: Half a UTF-16 pair as json_extract (SQLite) writes it, in the hex of its bytes: ED A0-BF at a
#: byte's start (an even offset).
HALF_PAIR_HEX = "^(?:..)*ED[AB]"
# One lock key for "the key fields' configuration" (PostgreSQL advisory locks): an insert path
# holds it shared while it reads the configuration and fills, a change of the configuration
# exclusively, so no transaction fills by a configuration older than the pending_below it sees.
_LOCK = 0x6B6579

# --- the value of a pointer, as SQL -------------------------------------------------------------


def _sqlite_readings(tokens: tuple[str, ...]) -> list[tuple[str, bool]]:
    """SQLite JSON paths for a pointer, each with whether its numeric tokens are indexes: a
    numeric token is an array index first, a key second."""
    def path(as_index: bool) -> str:
        parts = []
        for token in tokens:
            if as_index and token.isascii() and token.isdigit():
                parts.append(f"[{int(token)}]")
            else:
                parts.append(f'."{token}"')  # config refuses a token holding '"' or '\'
        return "$" + "".join(parts)
    readings = [(path(True), True), (path(False), False)]
    return readings[:1] if readings[0][0] == readings[1][0] else readings


def _sqlite_value(text, path: str):
    """The value at ``path`` of the JSON ``text`` as the key fields write it (SQLite)."""
    # json_extract gives 1 and 0 for true and false; PostgreSQL and JSON say true and false.
    # CASE <json_type> WHEN ...: the type is read once (CASE WHEN kind = ... reads it thrice).
    # An integer past 64 bits is written as the payload writes it (json_extract made it a
    # float: 9.22337203685478e+18); a string holding a NUL or half a UTF-16 pair as an
    # escape is written as its JSON text (json_extract cut it at the NUL, or gave bytes no
    # UTF-8 text holds, which no read of the column could decode: the list was a 503).
    # (Half a pair: its escape is in the JSON text, and json_extract's bytes hold ED A0-BF,
    # which UTF-8 never does; a whole pair's character, U+10000 and above, is kept. The
    # bytes are looked for at a byte's start in their hex: "2EDB8C", ".ی", holds "EDB".)
    written, extracted = text.op("->")(literal(path)), func.json_extract(text, path)
    escaped = or_(written.op("GLOB")(literal(r"*\u0000*")),
                  and_(written.op("GLOB")(literal(r"*\u[dD][89a-fA-F]*")),
                       func.hex(extracted).regexp_match(HALF_PAIR_HEX)))
    return case({"true": literal("true"), "false": literal("false"), "null": None,
                 "integer": written,
                 "text": case((escaped, func.substr(written, 2, func.length(written) - 2)),
                              else_=extracted)},
                value=func.json_type(text, path), else_=cast(extracted, Text))


def may_repeat(text, tokens: tuple[str, ...]):
    """Whether ``text`` may hold a key of the pointer more than once: one of its tokens is
    written twice as a JSON string (a key, or a string value that reads the same)."""
    def twice(token: str):
        quoted = f'"{token}"'
        return func.instr(func.substr(text, func.instr(text, quoted) + len(quoted)), quoted) > 0
    return or_(*(twice(token) for token in dict.fromkeys(tokens)))


def value_expression(sqlite: bool, tokens: tuple[str, ...], payload=ENTRIES.c.payload):
    """The value at ``tokens`` of ``payload`` as text (NULL where it has none): on SQLite
    ``json_extract``, on PostgreSQL the bytes read as LATIN-1 and ``::jsonb #>>`` (entries/fields.py
    says why). A key given more than once in one object is its last value, as JSON parsers read
    it (PostgreSQL's jsonb keeps the last; on SQLite a payload writing a token of the pointer twice
    is walked by db/json_node.py, json_extract taking the first). On SQLite the value's bytes are
    read as UTF-8, or as LATIN-1 where they are not (db/json_node.py ``value_text``): the text
    PostgreSQL's expression and ``shown_value`` give, stored, shown and filtered by alike."""
    if sqlite:
        text = cast(payload, Text)
        readings = _sqlite_readings(tokens)
        direct = [_sqlite_value(text, path) for path, _ in readings]
        walked = [_sqlite_value(cast(getattr(func, JSON_NODE)(cast(payload, LargeBinary), literal(json.dumps(tokens)),
                                                                  literal(int(as_index))), Text), "$")
                  for _, as_index in readings]
        value, last = (v[0] if len(v) == 1 else func.coalesce(*v) for v in (direct, walked))
        found = case((func.json_valid(text) != 1, None), (may_repeat(text, tokens), last), else_=value)
        # Read as bytes and made text (UTF-8, else LATIN-1, as on PostgreSQL): json_extract
        # answers a payload's bytes as they are, and bytes that are not UTF-8 (a payload in
        # LATIN-1) were a value no read of it could decode: every list holding it was a 503.
        return getattr(func, VALUE_TEXT)(cast(found, LargeBinary), type_=Text)
    document = literal_column(pg_document(f"{payload.table.name}.{payload.name}"), JSONB)
    # (The payload named as a column too: a query selecting only this reads it FROM its table.)
    return case((payload.is_not(None), document.op("#>>", return_type=Text)(literal(list(tokens), ARRAY(Text)))))


#: The most brackets ('{' and '[') a payload read as JSON on PostgreSQL may hold: its parser
#: recurses, and a payload nested past about 12,000 (measured; max_stack_depth 2 MB) fails its
#: statement ("stack depth limit exceeded"): a list of such entries, or the batch storing them.
#: Nesting is at most the brackets' count, and a payload of fewer bytes is never looked at.
MAX_BRACKETS = 10_000
#: The escapes jsonb refuses though JSON has them: a NUL, and half a UTF-16 pair (a high one not
#: followed by a low one, a low one not after a high one). Each is kept as its text (a backslash
#: before it), as SQLite's key fields keep it: "a\u0000b" is then the value a\u0000b.
_UNSTORABLE = (r"\\u0000|\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
               r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def pg_document(payload: str) -> str:
    """SQL reading ``payload`` (a bytea column) as jsonb on PostgreSQL, NULL where it is none. Its
    bytes are read as LATIN-1, which never fails (entries/fields.py says why). CASE tries its
    conditions in order (AND does not): no conversion of a payload with a NUL byte (text cannot
    hold one), nor of one too deep (MAX_BRACKETS), no cast of one that is not JSON; one that is
    JSON but for the escapes jsonb refuses (_UNSTORABLE) is read with those kept as text."""
    text = f"convert_from({payload}, 'LATIN1')"
    kept = f"regexp_replace({text}, '{_UNSTORABLE}', '\\\\\\&', 'g')"
    return (f"CASE WHEN position('\\x00'::bytea in {payload}) > 0 THEN NULL "
            f"WHEN octet_length({payload}) > {MAX_BRACKETS} AND length({text}) - "
            f"length(replace(replace({text}, '{{', ''), '[', '')) > {MAX_BRACKETS} THEN NULL "
            f"WHEN pg_input_is_valid({text}, 'jsonb') THEN {text}::jsonb "
            f"WHEN position('\\u' in {text}) > 0 AND pg_input_is_valid({kept}, 'jsonb') THEN {kept}::jsonb END")


# --- filling -----------------------------------------------------------------------------------

def _insert_ignoring(conn: Connection, query):
    columns = ["field_id", "value", "entry_id"]
    if conn.dialect.name == "sqlite":
        return insert(ENTRY_FIELDS).prefix_with("OR IGNORE").from_select(columns, query)
    return postgresql.insert(ENTRY_FIELDS).from_select(columns, query).on_conflict_do_nothing()


def _fill(conn: Connection, field_id: int, pointer: str, *where) -> None:
    value = value_expression(conn.dialect.name == "sqlite", parse_pointer(pointer)).label("value")
    found = select(ENTRIES.c.id, value).where(*where).subquery()
    query = select(literal(field_id), found.c.value, found.c.id).where(
        found.c.value.is_not(None), func.length(found.c.value) <= MAX_VALUE)
    conn.execute(_insert_ignoring(conn, query))


def _fill_postgresql(conn: Connection, fields: list[tuple[int, str]], where: str, params: dict) -> None:
    # One statement for every field: each payload is read as JSON once (checked, then cast), not
    # once a field; the value is value_expression's (the same CASE, then #>> a field).
    pairs = ", ".join(f"(%(f{i})s, d.doc #>> %(p{i})s::text[])" for i in range(len(fields)))
    for i, (field_id, pointer) in enumerate(fields):
        params[f"f{i}"], params[f"p{i}"] = field_id, list(parse_pointer(pointer))
    conn.exec_driver_sql(
        "INSERT INTO entry_fields (field_id, value, entry_id) SELECT f.field_id, f.value, d.id FROM ("
        f"SELECT id, {pg_document('payload')} AS doc "
        f"FROM entries WHERE {where}) d CROSS JOIN LATERAL (VALUES {pairs}) AS f(field_id, value) "
        f"WHERE d.doc IS NOT NULL AND f.value IS NOT NULL AND length(f.value) <= {MAX_VALUE} "
        "ON CONFLICT DO NOTHING", params)


def _each_alone_if_refused(conn: Connection, fill, where: str, params: dict) -> None:
    """``fill(where, params)`` in a savepoint (PostgreSQL). A payload the server cannot read as
    JSON fails the whole statement (nested deeper than its stack: "stack depth limit exceeded";
    the batch was then kept apart, its payload, subject and headers lost): then each entry is
    filled alone, and one that fails stores no values (a filter by its fields reads nothing)."""
    try:
        with conn.begin_nested():
            fill(where, dict(params))
        return
    except DBAPIError as exc:
        if not _refused_payload(exc):
            raise  # a timeout, a deadlock, the server away: the batch's write fails and is retried
        log.warning("storing key fields failed for a batch (%s); each entry alone", str(exc).splitlines()[0])
    for (entry_id,) in conn.exec_driver_sql(f"SELECT id FROM entries WHERE {where} ORDER BY id", dict(params)).all():
        try:
            with conn.begin_nested():
                fill("id = %(id)s", {"id": entry_id})
        except DBAPIError as exc:
            if not _refused_payload(exc):
                raise
            log.warning("entry %d: its key fields are not stored (%s)", entry_id, str(exc).splitlines()[0])


def _refused_payload(exc: DBAPIError) -> bool:
    """A failure a payload's content makes (a data exception, class 22; its depth, 54001), not
    the server's state: only such a one costs an entry its values."""
    return isinstance(exc, DataError) or getattr(exc.orig, "sqlstate", None) == "54001"


def _configured(conn: Connection, *, exclusive: bool = False) -> list:
    if conn.dialect.name != "sqlite":
        lock = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        conn.exec_driver_sql(f"SELECT {lock}({_LOCK})")
    return conn.execute(select(KEY_FIELDS.c.id, KEY_FIELDS.c.label, KEY_FIELDS.c.pointer,
                               KEY_FIELDS.c.pending_below).where(KEY_FIELDS.c.retired == false())).all()


def fill_key_fields(conn: Connection, after_id: int | None = None, *, ids: list[int] | None = None) -> None:
    """Store the key fields of the entries with an id above ``after_id`` (or of ``ids``, whose
    payload changed: their old values go first), in ``conn``'s transaction. Every code path that
    inserts entries calls it; without key fields recorded it costs one small query."""
    fields = _configured(conn)
    if ids is not None:
        if not ids:
            return
        conn.execute(ENTRY_FIELDS.delete().where(ENTRY_FIELDS.c.entry_id.in_(ids)))
    if not fields:
        return
    if conn.dialect.name != "sqlite":
        where, params = ("id = ANY(%(ids)s)", {"ids": list(ids)}) if ids is not None else \
            ("id > %(after)s", {"after": after_id})
        pairs = [(f.id, f.pointer) for f in fields]
        _each_alone_if_refused(conn, lambda w, p: _fill_postgresql(conn, pairs, w, p), where, params)
        return
    where = ENTRIES.c.id.in_(ids) if ids is not None else ENTRIES.c.id > after_id
    for field_id, _, pointer, _ in fields:
        _fill(conn, field_id, pointer, where)


# --- the configuration and the backfill ----------------------------------------------------------

def record_key_fields(engine: Engine, configured: tuple[tuple[str, str], ...]) -> None:
    """Make key_fields say ``configured`` (settings.list_fields: label, pointer): a new label, or
    one whose pointer changed, is filled from now on and waits for the backfill for the entries
    stored before; a label no longer configured (or its old pointer) is retired."""
    wanted = dict(configured)
    with write_transaction(engine) as conn:
        kept = set()
        for field_id, label, pointer, _ in _configured(conn, exclusive=True):
            if wanted.get(label) == pointer and (label, pointer) not in kept:
                kept.add((label, pointer))
            else:
                conn.execute(update(KEY_FIELDS).where(KEY_FIELDS.c.id == field_id).values(retired=True))
        top = conn.execute(select(func.coalesce(func.max(ENTRIES.c.id), 0))).scalar()
        for label, pointer in configured:
            if (label, pointer) not in kept:
                conn.execute(insert(KEY_FIELDS).values(label=label, pointer=pointer, pending_below=top, retired=False))
                if top:
                    log.info("key field %s (%s): filling the entries stored before it in the background",
                             label, pointer)
                else:
                    log.info("key field %s (%s): no entries stored before it to fill", label, pointer)


def backfill_step(engine: Engine, batch: int = BACKFILL_BATCH) -> bool:
    """One bounded transaction of the backfill: delete up to ``batch`` values of a retired
    field, or fill up to ``batch`` entries of a field below its ``pending_below``. Returns
    whether there was work (False: every field is filled and nothing retired is left)."""
    with write_transaction(engine) as conn:
        retired = conn.execute(select(KEY_FIELDS.c.id).where(KEY_FIELDS.c.retired == True)  # noqa: E712
                               .limit(1)).scalar()
        if retired is not None:
            chunk = select(ENTRY_FIELDS.c.entry_id).where(ENTRY_FIELDS.c.field_id == retired).limit(batch)
            gone = conn.execute(ENTRY_FIELDS.delete().where(ENTRY_FIELDS.c.field_id == retired,
                                                            ENTRY_FIELDS.c.entry_id.in_(chunk))).rowcount
            if not gone:
                conn.execute(KEY_FIELDS.delete().where(KEY_FIELDS.c.id == retired))
            return True
        pending = [f for f in _configured(conn) if f.pending_below > 0]
        if not pending:
            return False
        field_id, _, pointer, below = max(pending, key=lambda f: f.pending_below)
        low = max(below - batch, 0)
        if conn.dialect.name == "sqlite":
            _fill(conn, field_id, pointer, ENTRIES.c.id > low, ENTRIES.c.id <= below)
        else:
            _each_alone_if_refused(conn, lambda w, p: _fill_postgresql(conn, [(field_id, pointer)], w, p),
                                   "id > %(low)s AND id <= %(below)s", {"low": low, "below": below})
        conn.execute(update(KEY_FIELDS).where(KEY_FIELDS.c.id == field_id, KEY_FIELDS.c.pending_below == below)
                     .values(pending_below=low))
        return True


def backfill(engine: Engine, batch: int = BACKFILL_BATCH) -> int:
    """Run the backfill to its end (the benchmark, the tests); returns its transactions."""
    steps = 0
    while backfill_step(engine, batch):
        steps += 1
    return steps


class KeyFieldBackfill:
    """The key fields' thread beside the mirror: it records ``configured`` (settings.list_fields),
    then runs the backfill, a step, a pause for the mirror's writes, the next, until nothing is
    left; a failed attempt is tried again after a while (logged once a failure). Entries the
    mirror writes before the configuration is recorded are below the ``pending_below`` it
    records, so the backfill fills them. Started and stopped with the runtime."""

    def __init__(self, engine: Engine, configured: tuple[tuple[str, str], ...], *, pause: float = 0.05,
                 retry: float = 10.0):
        self.engine, self.configured, self.pause, self.retry = engine, configured, pause, retry
        self._recorded = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "KeyFieldBackfill":
        self._thread = threading.Thread(target=self._run, name="key-field-backfill", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def _run(self) -> None:
        failures = FailureLog(log, "filling key fields", f"trying again every {self.retry:.0f} s")
        while not self._stop.is_set():
            try:
                if not self._recorded:
                    record_key_fields(self.engine, self.configured)
                    self._recorded = True
                more = backfill_step(self.engine)
                failures.worked()
                if not more:
                    return
            except Exception as exc:  # the database away: the next attempt carries on
                failures.failed(exc)
                self._stop.wait(self.retry)
                continue
            self._stop.wait(self.pause)


def pending_condition(label: str, pointer: str):
    """The key_fields row of (label, pointer) as the filter reads it: configured, not retired."""
    return and_(KEY_FIELDS.c.label == label, KEY_FIELDS.c.pointer == pointer, KEY_FIELDS.c.retired == false())
