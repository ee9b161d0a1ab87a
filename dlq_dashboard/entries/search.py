"""Full-text search: what a person typed as a query for SQLite's FTS5 (``entries_fts``) and for
PostgreSQL's ``to_tsquery`` over ``entry_search`` (both indexes made by migrations, beside the
models, and written by the search pass: ingest/search_index.py), and the conditions built from
it: the list's ``q`` filter, and a search's newest matches read from the index alone."""

from __future__ import annotations

import re

from sqlalchemy import Engine, Select, String, column, exists, false, func, literal, literal_column, select, table, text

from ..db.engine import is_sqlite
from ..db.models import Entry

# The search indexes, tables beside the models: SQLite's FTS5 table (its rowid is the entry's id)
# and PostgreSQL's search vectors (migration 0016).
FTS = table("entries_fts", column("rowid"))
SEARCH = table("entry_search", column("entry_id"), column("search"))
#: PostgreSQL's text search configuration for entries (migration 0003): words as SQLite's
#: tokenizer makes them, case and (where the server has unaccent) diacritics ignored.
PG_SEARCH_CONFIG = "dlq_search"

_WORD = re.compile(r"\w+", re.UNICODE)


def fts_query(q: str) -> str | None:
    """Turn what a person typed into a safe FTS5 query: every word must match, the last as a prefix."""
    words = _WORD.findall(q)
    if not words:
        return None
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    quoted[-1] += "*"
    return " AND ".join(quoted)


def tsquery(q: str) -> str | None:
    """The same query for PostgreSQL's to_tsquery: every word must match, the last as a prefix."""
    words = _WORD.findall(q)
    if not words:
        return None
    quoted = ["'" + w.replace("'", "''") + "'" for w in words]  # \w+ holds no quote; kept safe anyway
    quoted[-1] += ":*"
    return " & ".join(quoted)


def fts_match(q: str):
    """SQLite: the condition on entries_fts of ``q`` (false when it holds no word)."""
    match = fts_query(q)
    return text("entries_fts MATCH :fts_q").bindparams(fts_q=match) if match else false()


def _pg_match(q: str):
    """PostgreSQL: the condition on entry_search of ``q`` (false when it holds no word)."""
    query = tsquery(q)
    if query is None:
        return false()
    config = literal_column(f"'{PG_SEARCH_CONFIG}'::regconfig")
    # The words are written into the statement, not bound: a search is then planned for its own
    # words every time, never with a plan made for other words. psycopg prepares a statement run
    # five times on a connection and the server may then keep a generic plan; the one right for a
    # word in every entry (the entries newest first, each tested) reads the whole table for a word
    # in a handful (an order id: 15 ms, then 550-870 ms at 200,000 entries; docs/PERFORMANCE.md
    # "A search's plan"). tsquery() leaves nothing but words, quotes doubled, "&" and ":*".
    return SEARCH.c.search.op("@@")(func.to_tsquery(config, literal(query, String(), literal_execute=True)))


def search_condition(engine: Engine, q: str):
    """The list's ``q`` filter as a condition on entries."""
    if is_sqlite(engine):
        return Entry.id.in_(select(FTS.c.rowid).where(fts_match(q)))
    # EXISTS, not IN: with the table analysed it plans as a semi-join either way, a little faster.
    return exists().where(SEARCH.c.entry_id == Entry.id, _pg_match(q))


def newest_matches(engine: Engine, q: str, limit: int) -> Select:
    """The ids (``entry_id``) of the newest ``limit`` entries ``q`` matches, from the search index
    alone, newest first: a search's window (Store.search_window). On PostgreSQL this reads
    ``limit`` entries where the semi-join of ``search_condition`` read every match before
    sorting them (a rare word's 11,000 at a million entries: 113 ms against 30;
    docs/PERFORMANCE.md)."""
    if is_sqlite(engine):
        return select(FTS.c.rowid.label("entry_id")).where(fts_match(q)).order_by(FTS.c.rowid.desc()).limit(limit)
    return select(SEARCH.c.entry_id).where(_pg_match(q)).order_by(SEARCH.c.entry_id.desc()).limit(limit)
