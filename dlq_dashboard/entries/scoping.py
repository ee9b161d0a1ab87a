"""What a scoped reader may reach, as SQL: scopes as conditions on entries (original_subject and
source) and failure_groups (subject and source) that select exactly what scopes.Scope.covers
covers, on SQLite and PostgreSQL (tests/test_scoping.py compares them), and the jobs whose every
entry a reader's scopes cover."""

from __future__ import annotations

import re

from sqlalchemy import and_, exists, false, not_, or_, select

from ..db.models import Entry, FailureGroup, Job, JobItem
from ..scopes import DEFAULT_SOURCE, Scope

ENTRIES, GROUPS, JOBS, ITEMS = Entry.__table__, FailureGroup.__table__, Job.__table__, JobItem.__table__


def literal_prefix(pattern: str) -> str:
    """The tokens before the first wildcard, with the dot after them."""
    literal = []
    for token in pattern.split("."):
        if token in ("*", ">"):
            break
        literal.append(token)
    return ".".join(literal) + ("." if literal else "")


def like_escape(value: str) -> str:
    """``value`` as a LIKE pattern's literal text (ESCAPE '\\'): its ``\\``, ``%`` and ``_`` escaped."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def scope_pattern_regex(pattern: str) -> str:
    """A regular expression that both PostgreSQL (``~``) and Python's ``re`` (SQLite's REGEXP)
    read alike, matching a subject exactly when scopes.subject_matches(pattern, subject) does:
    tokens split on ``.`` (an empty one too), ``*`` any one token, ``>`` at least one more; ``\\A``
    and ``\\Z`` anchor the whole text (``$`` would allow a newline after it)."""
    tokens = pattern.split(".")
    parts = []
    for i, token in enumerate(tokens):
        if token == ">" and i == len(tokens) - 1:
            parts.append(r"(.|\n)*")
        elif token == "*":
            parts.append(r"[^.]*")
        else:
            parts.append(re.escape(token))
    return r"\A" + r"\.".join(parts) + r"\Z"


def subject_condition(column, pattern: str):
    """``column`` (a subject) matches the NATS subject pattern exactly as
    scopes.subject_matches does, on SQLite and PostgreSQL: a literal pattern by equality; one
    with wildcards by its literal prefix (LIKE with its metacharacters escaped, which lets the
    subject index narrow the rows) and the exact expression of scope_pattern_regex. An empty or
    NULL subject never matches."""
    if "*" not in pattern.split(".") and ">" not in pattern.split("."):
        return column == pattern
    conds = [column != ""]
    prefix = literal_prefix(pattern)
    if prefix:
        conds.append(column.like(like_escape(prefix) + "%", escape="\\"))
    conds.append(column.regexp_match(scope_pattern_regex(pattern)))
    return and_(*conds)


def scope_condition(column, scopes: tuple[Scope, ...] | None, source=None):
    """The condition on ``column`` (entries.original_subject or failure_groups.subject) that
    keeps what ``scopes`` cover (None: everything, so None is returned: no condition; ``()``:
    nothing). A scope limited to a source (``billing:orders.>``) keeps only that source's rows:
    ``source`` is the column they are compared with, by default the ``source`` column of
    ``column``'s table (entries.source, failure_groups.source); a text names the one source of
    every row (a table without one: the default source)."""
    if scopes is None:
        return None
    if source is None:
        table = getattr(getattr(column, "expression", column), "table", None)
        source = table.c.source if table is not None and "source" in table.c else DEFAULT_SOURCE
    conds = []
    for scope in scopes:
        matched = subject_condition(column, scope.pattern)
        if scope.source is None:
            conds.append(matched)
        elif isinstance(source, str):
            if scope.source == source:
                conds.append(matched)
        else:
            conds.append(and_(source == scope.source, matched))
    return or_(*conds) if conds else false()


def covered_groups(scopes: tuple[Scope, ...]):
    """The ids of the failure groups ``scopes`` cover, as a subquery: a group is of one subject
    and one source (db/counts.py group_of), so its entries are covered exactly when it is."""
    return select(GROUPS.c.id).where(scope_condition(GROUPS.c.subject, scopes))


def jobs_within(scopes: tuple[Scope, ...] | None):
    """The condition on jobs that keeps those whose every item's entry ``scopes`` cover (None:
    no condition). Judged by the entries' groups (covered_groups, read once), so a job of a
    million items costs index lookups, not a pattern match each.

    A job a purge took entries of is kept from a scoped reader: what it took can no longer be
    told to lie inside. A purge deletes the items with their entries and counts them in
    ``jobs.purged`` (actions/purge.py), so the items left say nothing of the ones gone, and a job
    with none left would pass "no item outside" for every reader; a job with no item at all is
    kept too (every job is made with at least one, so its items went some other way)."""
    if scopes is None:
        return None
    outside = (select(ITEMS.c.job_id).select_from(ITEMS.outerjoin(ENTRIES, ENTRIES.c.id == ITEMS.c.entry_id))
               .where(ITEMS.c.job_id == JOBS.c.id,
                      or_(ENTRIES.c.group_id.is_(None), ENTRIES.c.group_id.not_in(covered_groups(scopes)))))
    return and_(JOBS.c.purged.is_(None), exists().where(ITEMS.c.job_id == JOBS.c.id), not_(exists(outside)))


def entries_within(scopes: tuple[Scope, ...] | None):
    """The ids of the entries ``scopes`` cover, as a subquery (None: no condition)."""
    if scopes is None:
        return None
    return select(ENTRIES.c.id).where(scope_condition(ENTRIES.c.original_subject, scopes))
