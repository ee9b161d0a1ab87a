"""A search on PostgreSQL is planned for its own words, however often its statement ran.

psycopg prepares a statement once a connection has run it five times, and after five more
executions the server may keep a generic plan, made without the parameters' values. With the
words bound, the list's search was one statement whatever the words, and the plan right for a
word in every entry (walk the entries newest first, testing each) reads the whole table for a
word in a handful: an order id's page went from 15 ms to 550-870 ms at 200,000 entries once a
common word had been searched on the same connection (docs/PERFORMANCE.md "A search's plan").
A search's words are written into its statement (entries/search.py), so no plan is shared
between searches for other words.
"""

from __future__ import annotations

import re

from sqlalchemy import event, text

from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.entries.search import tsquery
from dlq_dashboard.entries.store import Store
from dlq_dashboard.ingest.search_index import index_pending

from . import support

#: Entries whose payload holds an order id ("o-<n>": the word "o" in every one) and one of a
#: thousand customers ("c-<n % 1000>"), as a busy dead-letter stream has them.
ENTRIES = 20_000
_WORDS = re.compile(r"to_tsquery\('dlq_search'::regconfig, ([^)]*)\)")


def _fill(url: str) -> None:
    engine = create_db_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO entries (id, status, version, dlq_stream, dlq_epoch, dlq_seq, original_subject, "
                "original_stream, original_seq, consumer, reason, error, received_at, headers, payload, "
                "payload_available, sources, notes, source) "
                "SELECT g, 'open', 1, 'DLQ', 'e', g, 'orders.created', 'ORDERS', g, 'billing', 'schema_invalid', "
                "'price is a string', now() - (:n - g) * interval '1 ms', '{}', "
                "convert_to(format('{\"order_id\": \"o-%s\", \"customer_id\": \"c-%s\", \"items\": [{\"sku\": \"SKU-1\", "
                "\"qty\": 2, \"price\": \"12.50\"}], \"currency\": \"EUR\"}', g, g % 1000), 'UTF8'), "
                "true, 'dlq', '[]', 'default' FROM generate_series(1, :n) AS g"), {"n": ENTRIES})
            conn.execute(text("SELECT setval(pg_get_serial_sequence('entries', 'id'), :n)"), {"n": ENTRIES})
        while index_pending(engine, ENTRIES).more:
            pass
    finally:
        dispose_quietly(engine)


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def test_a_search_is_planned_for_its_words_however_often_the_statement_ran(postgres_server):
    url = postgres_server.create_database(migrated=True)
    _fill(url)
    # One connection, as a busy replica's pooled one: every search below runs on it.
    engine = create_db_engine(url, pool_size=1, max_overflow=0)
    try:
        store = Store(engine)
        newest = list(range(ENTRIES, ENTRIES - 50, -1))
        # A word in every entry, asked often enough for psycopg to prepare the statement and for
        # the server to weigh a generic plan; then a word in one entry, then the first again.
        for q in ["o"] * 15 + ["o-17321"] + ["o"] * 5:
            found = [e.id for e in store.list_entries(EntryFilter(q=q)).entries]
            assert found == ([17321] if q == "o-17321" else newest), q
        with engine.connect() as conn:
            prepared = conn.execute(text(
                "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE '%@@ to_tsquery%' AND statement NOT LIKE '%pg_prepared_statements%'")).all()
        assert prepared, "no search was prepared on this connection"
        for statement, runs in prepared:
            # The words are the statement's own: a plan made for them serves only them.
            words = _WORDS.search(statement).group(1)
            assert words == _quoted(tsquery("o")), f"the words reach the server as {words}: one plan for any words"
            assert runs >= 5
    finally:
        dispose_quietly(engine)
        postgres_server.drop_database(url, later=True)


def test_words_written_into_the_statement_are_quoted_and_still_find_what_they_name(postgres_server):
    url = postgres_server.create_database(migrated=True)
    _fill(url)
    engine = create_db_engine(url)
    try:
        store = Store(engine)
        assert [e.id for e in store.list_entries(EntryFilter(q="c-417 o-19417")).entries] == [19417]
        newest = list(range(ENTRIES, ENTRIES - 50, -1))
        # customer c-417, and order ids starting with 417 (o-417, o-4170 ... o-4179)
        customer_417 = [g for g in range(ENTRIES, 0, -1) if g % 1000 == 417 or str(g).startswith("417")][:50]
        # Each is searched as its words alone (quotes, backslashes and percent signs are not words).
        for hostile, found in [("o'--", newest), ("o\\' c' 417", customer_417),
                               ("%s o %(q)s", []), ("o'); DROP TABLE entries; --", [])]:
            assert [e.id for e in store.list_entries(EntryFilter(q=hostile)).entries] == found, hostile
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM entries").scalar() == ENTRIES
    finally:
        dispose_quietly(engine)
        postgres_server.drop_database(url, later=True)


def _index_names(plan: dict) -> set[str]:
    return {node["Index Name"] for node in support.plan_nodes(plan) if "Index Name" in node}


def test_once_analysed_a_rare_word_beside_a_common_one_is_read_from_the_search_index(postgres_server):
    url = postgres_server.create_database(migrated=True)
    _fill(url)
    engine = create_db_engine(url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for table in ("entries", "entry_search"):  # as autovacuum does once a table has grown
                conn.exec_driver_sql(f"VACUUM ANALYZE {table}")
        seen: list[tuple[str, dict]] = []

        def capture(conn, cursor, statement, parameters, context, executemany):
            if "@@ to_tsquery" in statement:
                seen.append((statement, parameters))

        event.listen(engine, "before_cursor_execute", capture)
        found = Store(engine).list_entries(EntryFilter(q="o-1732")).entries
        event.remove(engine, "before_cursor_execute", capture)
        assert [e.id for e in found] == [*range(17329, 17319, -1), 1732]  # o-1732, o-17320 ... o-17329
        (statement, parameters), = seen
        with engine.connect() as conn:
            plan = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters).scalar()[0]["Plan"]
        # "o" is in every entry and a word starting 1732 in eleven: read from the vectors' GIN
        # index, not found by walking the entries newest first and testing each.
        assert "ix_entry_search_search" in _index_names(plan), plan
    finally:
        dispose_quietly(engine)
        postgres_server.drop_database(url, later=True)


def test_the_search_lag_is_counted_from_the_position_on_in_a_generic_plan(postgres_server):
    """A search's page counts the entries not indexed yet, after the search position. Its read
    transaction commits, so psycopg prepares the count once a connection has run it five times,
    and the server may then keep a generic plan. For ``id > $1 LIMIT $2`` on a table without
    statistics (a backlog just mirrored, autovacuum not yet come) that plan was a walk of the
    whole table, testing each id: 40 ms at 200,000 entries, every search while the statistics
    were missing (seen with auto_explain under bench_readers.py). In id order it reads the
    primary key from the position on."""
    url = postgres_server.create_database(migrated=True)
    _fill(url)  # every entry indexed; the table never analysed
    engine = create_db_engine(url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:  # the one pooled connection, from now on planned generically
            conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
            conn.commit()
        for _ in range(7):  # prepared after five runs
            assert Store(engine).search_lag(EntryFilter(q="o")).pending == 0
        with engine.connect() as conn:
            (name, statement), = conn.execute(text(
                "SELECT name, statement FROM pg_prepared_statements WHERE statement ILIKE '%count(%FROM entries%' "
                "AND statement NOT LIKE '%pg_prepared_statements%'")).all()
            plan = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {name}({ENTRIES}, 10001)"
                                        ).scalar()[0]["Plan"]
        walks = [node for node in support.plan_nodes(plan) if node["Node Type"] == "Seq Scan"]
        assert not walks and "entries_pkey" in _index_names(plan), (statement, plan)
    finally:
        dispose_quietly(engine)
        postgres_server.drop_database(url, later=True)
