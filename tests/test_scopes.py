"""Subject patterns, scopes and grants (dlq_dashboard/scopes.py): NATS's wildcard rules, the
sentence for a bad pattern, and what a set of grants covers for reading and for acting."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlq_dashboard.scopes import (
    Grant, Scope, ScopeError, check_pattern, grants_from_json, grants_to_json, highest_role, parse_scopes,
    scopes_for, scopes_from_json, scopes_to_json, subject_matches,
)


@pytest.mark.parametrize("pattern, subject, matches", [
    ("orders.>", "orders.created", True),
    ("orders.>", "orders.eu.created", True),
    ("orders.>", "orders", False),
    ("orders.*", "orders.created", True),
    ("orders.*", "orders.eu.created", False),
    ("orders.*.created", "orders.eu.created", True),
    ("orders.*.created", "orders.eu.deleted", False),
    ("*", "orders", True),
    ("*", "orders.created", False),
    (">", "orders.created", True),
    ("orders.created", "orders.created", True),
    ("orders.created", "orders.created.v2", False),
    ("orders", "ordersx", False),
    ("orders.>", None, False),
    ("orders.>", "", False),
])
def test_a_pattern_matches_the_subjects_nats_would_deliver_to_it(pattern, subject, matches):
    assert subject_matches(pattern, subject) is matches


def _reference(pattern: str, subject: str) -> bool:
    # The same rule written as a regular expression over whole tokens.
    parts = []
    for token in pattern.split("."):
        parts.append({"*": r"[^.]+", ">": r"[^.]+(?:\.[^.]+)*"}.get(token, re.escape(token)))
    return re.fullmatch(r"\.".join(parts), subject) is not None


_TOKENS = st.sampled_from(["a", "b", "orders", "x1"])


@settings(max_examples=300, derandomize=True)
@given(st.lists(st.one_of(_TOKENS, st.just("*")), min_size=1, max_size=4), st.booleans(),
       st.lists(_TOKENS, min_size=1, max_size=5))
def test_matching_agrees_with_a_regular_expression_of_the_same_rule(tokens, tail, subject_tokens):
    pattern = ".".join(tokens + ([">"] if tail else []))
    subject = ".".join(subject_tokens)
    assert subject_matches(pattern, subject) is _reference(pattern, subject)


@pytest.mark.parametrize("pattern, sentence", [
    ("", "empty"),
    ("orders..created", "empty token"),
    ("orders.", "empty token"),
    ("orders.>.created", "'>' before its last token"),
    ("orders.cre*", "whole token"),
    ("orders created", "space"),
])
def test_a_bad_pattern_is_refused_with_a_sentence_that_says_why(pattern, sentence):
    with pytest.raises(ScopeError, match=re.escape(sentence)):
        check_pattern(pattern)


def test_a_scope_may_name_its_source_and_covers_only_that_source():
    scope = Scope.parse("east:orders.>")
    assert (scope.source, scope.pattern, str(scope)) == ("east", "orders.>", "east:orders.>")
    assert scope.covers("orders.created", "east")
    assert not scope.covers("orders.created", "west")
    assert not scope.covers("orders.created")  # the default source
    assert Scope.parse("orders.>").covers("orders.created", "west")  # no source: every source
    with pytest.raises(ScopeError, match="source"):
        Scope.parse("e ast:orders.>")


def test_scopes_are_parsed_sorted_without_duplicates_and_survive_their_json():
    scopes = parse_scopes(["orders.>, billing.>", "orders.>"])
    assert [str(s) for s in scopes] == ["billing.>", "orders.>"]
    assert scopes_from_json(scopes_to_json(scopes)) == scopes
    assert parse_scopes(None) is None and parse_scopes([]) is None
    for empty in ([""], [" , "], ["", ","]):  # given, but naming nothing: never "every subject"
        with pytest.raises(ScopeError, match="names no subject pattern"):
            parse_scopes(empty)
    assert scopes_from_json(None) is None and scopes_to_json(None) is None


def test_a_pattern_given_for_every_source_and_for_one_source_sorts_beside_it():
    """``orders.>`` and ``billing:orders.>`` together (a user given both, or two grants reading
    together) were a TypeError: a scope without a source could not be ordered against one with."""
    scopes = parse_scopes(["orders.>", "billing:orders.>", "audit.>"])
    assert [str(s) for s in scopes] == ["audit.>", "orders.>", "billing:orders.>"]
    grants = (Grant("viewer", parse_scopes(["billing:orders.>"])), Grant("viewer", parse_scopes(["orders.>"])))
    assert [str(s) for s in scopes_for(grants, "viewer")] == ["orders.>", "billing:orders.>"]


def test_an_admin_grant_is_never_scoped_and_a_role_must_be_known():
    with pytest.raises(ScopeError, match="never scoped"):
        Grant("admin", parse_scopes(["orders.>"]))
    with pytest.raises(ScopeError, match="not valid"):
        Grant("superuser")


def test_reading_takes_every_grant_and_acting_only_the_operator_ones():
    grants = (Grant("viewer"), Grant("operator", parse_scopes(["orders.>"])))
    assert highest_role(grants) == "operator"
    assert scopes_for(grants, "viewer") is None  # the unscoped viewer grant reads everything
    assert [str(s) for s in scopes_for(grants, "operator")] == ["orders.>"]
    assert scopes_for(grants, "admin") is False
    assert grants_from_json(grants_to_json(grants)) == grants
    assert grants[1].covers("orders.created") and not grants[1].covers("billing.paid")
    assert grants[1].to_dict() == {"role": "operator", "scopes": ["orders.>"]}
