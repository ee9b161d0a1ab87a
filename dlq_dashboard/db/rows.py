"""Writing many rows at once, and the one place that knows each database's way to skip a row
whose key is taken or add to the one stored.

On SQLite each call is one multi-row statement per chunk: the driver's executemany gives the
GIL up and takes it back for every row, and with the bridge's loop busy in another thread that
costs several times the write itself (measured: 20 -> 94 us a row for the republish outcome).
On PostgreSQL, inserts and updates send one binary array a column to unnest(); inserts that
skip a taken key use SQLAlchemy's multi-row statements.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from itertools import chain
from operator import itemgetter

from sqlalchemy import BigInteger, Connection, any_, bindparam, insert, literal_column
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.elements import ColumnElement

_SQLITE_VARIABLES = 30000


def sqlite_values(rows: list[dict], names: list[str]) -> list[tuple]:
    """Rows as tuples in ``names`` order, times formatted as SQLAlchemy's SQLite DateTime
    stores them, so reads through it parse them (rows share a few times: each is formatted once)."""
    if not names:
        return [() for _ in rows]
    get = itemgetter(*names)
    result = [(v,) for v in map(get, rows)] if len(names) == 1 else list(map(get, rows))
    # Which columns hold times, found a column at a time (the types of a column as a set):
    # looking at every value of every row in Python cost more than the statement itself.
    columns = list(zip(*result))
    timed = [j for j, column in enumerate(columns) if _timed(column)]
    if not timed:
        return result
    for j in timed:
        columns[j] = tuple(map(_sqlite_time, columns[j]))
    return list(zip(*columns))


def _format_time(value):
    if isinstance(value, datetime):
        if value.tzinfo is None:  # entries keep naive UTC: the C formatter gives SQLAlchemy's text
            return value.isoformat(" ", "microseconds")
        return "%04d-%02d-%02d %02d:%02d:%02d.%06d" % (value.year, value.month, value.day, value.hour,
                                                       value.minute, value.second, value.microsecond)
    return value


# A batch's rows share a few times (the moment received, the failures' times): each is formatted
# once, and the cache is looked up without running Python code.
_sqlite_time = lru_cache(maxsize=4096)(_format_time)


def _chunks(rows: list, width: int):
    per = max(1, _SQLITE_VARIABLES // width)
    for start in range(0, len(rows), per):
        yield rows[start:start + per]


def insert_rows(conn: Connection, table, rows: list[dict], *, names: list[str] | None = None,
                skip_duplicates: bool = False) -> int:
    """INSERT rows (dicts with the same keys, or ``names``) in as few statements as the
    database allows; with ``skip_duplicates`` a row whose unique key is stored is skipped.
    Returns how many rows were inserted."""
    if not rows:
        return 0
    names = names or list(rows[0])
    if conn.dialect.name != "sqlite":
        defaulted = [c for c in table.c if c.name not in names and c.default is not None]
        if not defaulted:
            # One array a column (see _arrays), where a multi-row VALUES binds a parameter a value
            # and psycopg parses every such statement's new text again (two thirds of a
            # mirror batch's time, measured). The rows RETURNING names are the ones inserted.
            statement = f"INSERT INTO {table.name} ({', '.join(names)}) SELECT * FROM unnest({_arrays(conn, table, names)})"
            params = {f"col_{j}": [row.get(n) for row in rows] for j, n in enumerate(names)}
            if not skip_duplicates:
                conn.exec_driver_sql(statement, params)
                return len(rows)
            keys = ", ".join(c.name for c in table.primary_key.columns)
            return len(conn.exec_driver_sql(f"{statement} ON CONFLICT DO NOTHING RETURNING {keys}", params).all())
        params = [{n: row.get(n) for n in names} for row in rows]
        if not skip_duplicates:
            conn.execute(insert(table), params)
            return len(rows)
        statement = postgresql.insert(table).on_conflict_do_nothing().returning(*table.primary_key.columns)
        return len(conn.execute(statement, params).all())
    return _sqlite_insert(conn, "INSERT OR IGNORE" if skip_duplicates else "INSERT", table, rows, names)


def add_to_counts(conn: Connection, table, rows: list[dict], *, key: list[str], count: str) -> None:
    """INSERT rows, or where ``key`` is taken add their ``count`` to the stored row's."""
    if not rows:
        return
    names = list(rows[0])
    if conn.dialect.name != "sqlite":
        statement = postgresql.insert(table)
        conn.execute(statement.on_conflict_do_update(
            index_elements=[table.c[k] for k in key], set_={count: table.c[count] + statement.excluded[count]}),
            rows)
        return
    mark = "(" + ", ".join("?" * len(names)) + ")"
    for chunk in _chunks(sqlite_values(rows, names), len(names)):
        conn.exec_driver_sql(
            f"INSERT INTO {table.name} ({', '.join(names)}) VALUES {', '.join([mark] * len(chunk))} "
            f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {count} = {table.name}.{count} + excluded.{count}",
            tuple(chain.from_iterable(chunk)))


def insert_columns(conn: Connection, table, names: list[str], columns: list[tuple], *,
                   skip_duplicates: bool = False) -> int:
    """:func:`insert_rows` on SQLite of rows given a column at a time (``columns[j]``: every row's
    value of ``names[j]``), without a dict a row; how many rows were inserted. A column whose rows
    all hold one value (of one type) binds it once: a mirrored batch's rows share most of theirs
    (status, stream, epoch, source, group, when received), and each value bound costs the writer
    process CPU (docs/PERFORMANCE.md "Mirror ingest")."""
    columns = [tuple(map(_sqlite_time, column)) if _timed(column) else column for column in columns]
    count = len(columns[0]) if columns else 0
    same = tuple(count > 1 and len(set(map(type, column))) == 1 and column.count(column[0]) == count
                 for column in columns)
    if not any(same) or all(same):
        return _sqlite_insert_values(conn, "INSERT OR IGNORE" if skip_duplicates else "INSERT", table,
                                     list(zip(*columns)), names)
    shared = tuple(column[0] for column, one in zip(columns, same) if one)
    varying = [column for column, one in zip(columns, same) if not one]
    inserted = 0
    for chunk in _chunks(list(zip(*varying)), len(names)):
        inserted += conn.exec_driver_sql(
            _numbered(skip_duplicates, table.name, tuple(names), same, len(chunk)),
            shared + tuple(chain.from_iterable(chunk))).rowcount
    return inserted


@lru_cache(maxsize=64)
def _numbered(skip_duplicates: bool, table: str, names: tuple[str, ...], same: tuple[bool, ...], rows: int) -> str:
    """An INSERT of ``rows`` rows whose columns marked ``same`` take one parameter each (``?1``,
    ``?2``, ... in column order) and the others one a row, numbered after them."""
    shared, varying = sum(same), len(same) - sum(same)
    marks = []
    for r in range(rows):
        k, v, row = 0, shared + r * varying, []
        for one in same:
            if one:
                k += 1
                row.append(f"?{k}")
            else:
                v += 1
                row.append(f"?{v}")
        marks.append("(" + ", ".join(row) + ")")
    verb = "INSERT OR IGNORE" if skip_duplicates else "INSERT"
    return f"{verb} INTO {table} ({', '.join(names)}) VALUES {', '.join(marks)}"


def _timed(column) -> bool:
    return any(issubclass(t, datetime) for t in set(map(type, column)))


def _sqlite_insert(conn: Connection, verb: str, table, rows: list[dict], names: list[str]) -> int:
    return _sqlite_insert_values(conn, verb, table, sqlite_values(rows, names), names)


def _sqlite_insert_values(conn: Connection, verb: str, table, values: list[tuple], names: list[str]) -> int:
    mark = "(" + ", ".join("?" * len(names)) + ")"
    inserted = 0
    for chunk in _chunks(values, len(names)):
        inserted += conn.exec_driver_sql(
            f"{verb} INTO {table.name} ({', '.join(names)}) VALUES {', '.join([mark] * len(chunk))}",
            tuple(chain.from_iterable(chunk))).rowcount
    return inserted


def among(conn: Connection, column, values) -> ColumnElement:
    """``column IN values`` for many whole numbers: one array parameter on PostgreSQL, the numbers
    written out on SQLite. An expanding IN costs SQLAlchemy a bind parameter a value (about a
    microsecond each); the statement it is in is best run with :data:`UNCACHED`."""
    if conn.dialect.name == "postgresql":
        return column == any_(bindparam(None, [int(v) for v in values], type_=ARRAY(BigInteger)))
    return column.op("IN")(literal_column("(" + ",".join(map(str, map(int, values))) + ")"))


#: Execution options for a statement holding :func:`among`'s numbers: not kept in the compiled
#: statement cache, which one-off texts would otherwise fill.
UNCACHED = {"compiled_cache": None}


def update_rows(conn: Connection, table, key: str, rows: list[dict], *, constants: dict | None = None,
                match: dict | None = None) -> set:
    """UPDATE each row's own values, found by ``key``; ``constants`` are set on all of them, and
    ``match`` narrows them (column = value). Returns the keys of the rows it changed."""
    return set(update_rows_returning(conn, table, key, rows, constants=constants, match=match))


def update_rows_returning(conn: Connection, table, key: str, rows: list[dict], *, constants: dict | None = None,
                          match: dict | None = None, returning: str | None = None) -> dict:
    """As :func:`update_rows`; returns {key: the changed row's ``returning`` column (or None)}."""
    if not rows:
        return {}
    constants, match = constants or {}, match or {}
    names = list(rows[0])
    columns = [n for n in names if n != key]
    extra = f", {table.name}.{returning}" if returning else ""
    if conn.dialect.name != "sqlite":
        return _update_rows_postgresql(conn, table, key, rows, names, columns, constants, match, extra)
    sets = ", ".join([f"{c} = v.{c}" for c in columns] + [f"{c} = ?" for c in constants])
    where = "".join(f" AND {table.name}.{c} = ?" for c in match)
    tail = sqlite_values([{**constants, **{f"match_{c}": v for c, v in match.items()}}],
                        [*constants, *(f"match_{c}" for c in match)])[0]
    mark = "(" + ", ".join("?" * len(names)) + ")"
    changed: dict = {}
    for chunk in _chunks(sqlite_values(rows, names), len(names)):
        found = conn.exec_driver_sql(
            f"WITH v({', '.join(names)}) AS (VALUES {', '.join([mark] * len(chunk))}) "
            f"UPDATE {table.name} SET {sets} FROM v WHERE {table.name}.{key} = v.{key}{where} "
            f"RETURNING {table.name}.{key}{extra}",
            tuple(chain.from_iterable(chunk)) + tail).all()  # one fetch, not one a row
        changed.update((r[0], r[1]) if returning else (r[0], None) for r in found)
    return changed


def _arrays(conn: Connection, table, names: list[str]) -> str:
    """unnest()'s arguments for these columns (parameters ``col_<n>``, in psycopg's own syntax),
    each an array cast to its column's type: an array of NULLs would otherwise be taken for text.

    The arrays go in binary (``%b``): psycopg writes an array of text or bytea as text with a
    regular expression an element, 13-15 ms for 1,000 payloads, and in binary in under 1 ms. The
    statement's text is the same every time, so the server prepares it once.
    """
    return ", ".join(f"CAST(%(col_{j})b AS {table.c[n].type.compile(dialect=conn.dialect)}[])"
                     for j, n in enumerate(names))


def _update_rows_postgresql(conn: Connection, table, key: str, rows: list[dict], names: list[str],
                            columns: list[str], constants: dict, match: dict, extra: str) -> dict:
    # One UPDATE ... FROM unnest(one array a column) RETURNING: the rows it returns are the ones
    # this statement changed, even while another process updates the same rows (a row that no
    # longer matches once the other's change commits is not returned).
    sets = ", ".join([f"{c} = v.{c}" for c in columns] + [f"{c} = %(const_{c})s" for c in constants])
    where = "".join(f" AND {table.name}.{c} = %(match_{c})s" for c in match)
    params = {**{f"col_{j}": [row[n] for row in rows] for j, n in enumerate(names)},
              **{f"const_{c}": v for c, v in constants.items()}, **{f"match_{c}": v for c, v in match.items()}}
    result = conn.exec_driver_sql(
        f"UPDATE {table.name} SET {sets} FROM unnest({_arrays(conn, table, names)}) AS v ({', '.join(names)}) "
        f"WHERE {table.name}.{key} = v.{key}{where} RETURNING {table.name}.{key}{extra}", params)
    return {r[0]: r[1] if extra else None for r in result.all()}
