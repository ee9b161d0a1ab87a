"""Subject patterns as SQL (entries/scoping.py): the condition a scope adds to a query selects
exactly the subjects scopes.subject_matches matches, and with sources exactly the rows
Scope.covers covers, on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Column, Integer, MetaData, Table, Text, create_engine, insert, select

from dlq_dashboard.entries.scoping import like_escape, scope_condition, scope_pattern_regex, subject_condition
from dlq_dashboard.scopes import Scope, check_pattern, subject_matches

pytestmark = pytest.mark.both_databases

# Characters that trip a careless translation: LIKE's metacharacters and its escape, a capital
# (SQLite's LIKE ignores case), a newline (a regex's "$" allows one after it), a non-ASCII letter.
LITERAL = st.text(alphabet="ab_%\\éA", min_size=1, max_size=3)
PATTERN = st.lists(st.one_of(LITERAL, st.just("*"), st.just("*")), min_size=1, max_size=4).flatmap(
    lambda tokens: st.sampled_from([tokens, tokens + [">"]])).map(".".join)
SUBJECT = st.lists(st.text(alphabet="ab_%\\éA*>\n ", max_size=3), min_size=1, max_size=5).map(".".join)


@pytest.fixture
def probe(database_url):
    """A table of subjects on the test's database: (engine, table)."""
    engine = create_engine(database_url)
    meta = MetaData()
    table = Table("scope_probe", meta, Column("id", Integer, primary_key=True), Column("subject", Text))
    meta.create_all(engine)
    yield engine, table
    meta.drop_all(engine)
    engine.dispose()


@pytest.fixture
def sourced_probe(database_url):
    """A table of subjects and their sources, as entries and failure_groups have: (engine, table)."""
    engine = create_engine(database_url)
    meta = MetaData()
    table = Table("scope_source_probe", meta, Column("id", Integer, primary_key=True), Column("subject", Text),
                  Column("source", Text))
    meta.create_all(engine)
    yield engine, table
    meta.drop_all(engine)
    engine.dispose()


def _matched(engine, table, condition, subjects: list[str | None]) -> set[int]:
    with engine.begin() as conn:
        conn.execute(table.delete())
        conn.execute(insert(table), [{"id": i, "subject": s} for i, s in enumerate(subjects)])
        return set(conn.execute(select(table.c.id).where(condition)).scalars())


@settings(max_examples=150, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(pattern=PATTERN, subjects=st.lists(SUBJECT, min_size=1, max_size=12))
def test_a_pattern_selects_in_sql_what_subject_matches_matches(probe, pattern, subjects):
    engine, table = probe
    check_pattern(pattern)  # every generated pattern is one a scope may hold
    # The subjects that match, built from the pattern, so that matches are not rare.
    subjects = subjects + [pattern.replace("*", "x").replace(">", "y.z"), pattern.replace(">", "q")]
    expected = {i for i, s in enumerate(subjects) if subject_matches(pattern, s)}
    assert _matched(engine, table, subject_condition(table.c.subject, pattern), subjects) == expected


@pytest.mark.parametrize("pattern, subject, matches", [
    ("orders.>", "orders.created", True), ("orders.>", "orders", False), ("orders.>", "ORDERS.created", False),
    ("orders.*", "orders.eu.created", False), ("or_ers.*", "orders.created", False),
    ("100%.*", "100x.a", False), ("100%.*", "100%.a", True), ("a\\b.>", "a\\b.c", True),
    ("orders.created", "orders.created\n", False), ("*", "", False), (">", "", False), ("*.>", "a.b.c", True),
    ("*.b.>", "x.y.b.z", False), ("*.b.>", "x.b.z", True),
])
def test_the_translation_of_edge_cases(probe, pattern, subject, matches):
    engine, table = probe
    assert subject_matches(pattern, subject) is matches
    assert _matched(engine, table, subject_condition(table.c.subject, pattern), [subject]) == ({0} if matches else set())


def test_scopes_cover_together_and_none_covers_nothing(probe):
    engine, table = probe
    subjects = ["orders.created", "billing.paid", "audit.x", None, ""]
    scopes = (Scope("orders.>"), Scope("billing.paid"))
    assert _matched(engine, table, scope_condition(table.c.subject, scopes), subjects) == {0, 1}
    assert _matched(engine, table, scope_condition(table.c.subject, ()), subjects) == set()
    assert scope_condition(table.c.subject, None) is None
    # Every entry is of the source "default" until sources exist: another source covers none.
    assert _matched(engine, table, scope_condition(table.c.subject, (Scope("orders.>", "east"),)), subjects) == set()
    assert _matched(engine, table, scope_condition(table.c.subject, (Scope("orders.>", "default"),)),
                    subjects) == {0}


def test_like_metacharacters_are_escaped_and_the_regex_is_anchored():
    assert like_escape("a_b%c\\") == "a\\_b\\%c\\\\"
    assert scope_pattern_regex("a.*.>") == r"\Aa\.[^.]*\.(.|\n)*\Z"


SOURCES = ("default", "east", "west")
SCOPE = st.tuples(PATTERN, st.one_of(st.none(), st.sampled_from(SOURCES))).map(lambda ps: Scope(*ps))


@settings(max_examples=100, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(scopes=st.lists(SCOPE, max_size=3).map(tuple),
       rows=st.lists(st.tuples(SUBJECT, st.sampled_from(SOURCES)), min_size=1, max_size=12))
def test_scopes_select_in_sql_what_scope_covers_covers_source_and_subject_alike(sourced_probe, scopes, rows):
    engine, table = sourced_probe
    # Rows that match each scope's pattern, in every source, so that matches are not rare.
    rows = rows + [(s.pattern.replace("*", "x").replace(">", "y.z"), source) for s in scopes for source in SOURCES]
    expected = {i for i, (subject, source) in enumerate(rows) if any(s.covers(subject, source) for s in scopes)}
    with engine.begin() as conn:
        conn.execute(table.delete())
        conn.execute(insert(table), [{"id": i, "subject": subject, "source": source}
                                     for i, (subject, source) in enumerate(rows)])
        # The source column is the subject column's table's own (entries.source, failure_groups.source).
        found = set(conn.execute(select(table.c.id).where(scope_condition(table.c.subject, scopes))).scalars())
    assert found == expected


def test_a_scope_of_a_source_keeps_that_sources_rows_only(sourced_probe):
    engine, table = sourced_probe
    rows = [("orders.created", "billing"), ("orders.created", "default"), ("billing.paid", "billing")]
    with engine.begin() as conn:
        conn.execute(insert(table), [{"id": i, "subject": s, "source": src} for i, (s, src) in enumerate(rows)])
        def kept(*scopes):
            return set(conn.execute(select(table.c.id).where(scope_condition(table.c.subject, scopes))).scalars())
        assert kept(Scope("orders.>", "billing")) == {0}
        assert kept(Scope("orders.>")) == {0, 1}  # no source: every source
        assert kept(Scope("orders.>", "default"), Scope("billing.>", "billing")) == {1, 2}
