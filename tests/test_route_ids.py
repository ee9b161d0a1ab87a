"""A path's id is ASCII digits only, on every route that takes one (built from app.url_map, as
test_routes_roles.py walks it): other scripts' digits (fullwidth, Arabic-Indic, Devanagari) match
no route, as a query's and a body's are refused (numbers.py), and reach no entry."""

from __future__ import annotations

import re

import pytest
from werkzeug.exceptions import NotFound

from dlq_dashboard.runtime import runtime_of

from . import support

#: 12 in other scripts' decimal digits, each of which Python's int() reads as 12.
OTHER_DIGITS = ("\uff11\uff12", "\u0661\u0662", "\u0967\u0968")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def id_routes(app):
    """(rule, method) of every route with an id in its path (an ``int`` converter)."""
    for rule in app.url_map.iter_rules():
        if "<int:" in rule.rule:
            for method in METHODS:
                if method in rule.methods:
                    yield rule, method


def filled(rule, digits: str) -> str:
    return re.sub(r"<[^>]+>", lambda m: digits if m.group().startswith("<int:") else "x", rule.rule)


def test_every_route_with_an_id_takes_ascii_digits_and_no_others(offline_app):
    adapter = offline_app.url_map.bind("localhost")
    checked = list(id_routes(offline_app))
    assert len(checked) >= 25  # entries, groups, jobs, views, alerts...
    for rule, method in checked:
        assert adapter.match(filled(rule, "12"), method=method)[0] == rule.endpoint
        for digits in OTHER_DIGITS:
            assert int(digits) == 12
            with pytest.raises(NotFound):
                adapter.match(filled(rule, digits), method=method)
                pytest.fail(f"{method} {filled(rule, digits)} matched {rule.endpoint}")


def test_an_entry_is_neither_read_nor_closed_through_an_id_in_other_digits(offline_app, tokens):
    entry_id = support.dead_letter(offline_app, 1)
    assert entry_id == 1
    viewer, operator = support.bearer(tokens["viewer"]), support.bearer(tokens["operator"])
    client = offline_app.test_client()
    for digits in ("\uff11", "\u0661"):
        got = client.get(f"/api/entries/{digits}", headers=viewer)
        assert got.status_code == 404 and "id" not in got.get_json()
        closed = client.post(f"/api/entries/{digits}/close", json={"version": 1, "note": "x"}, headers=operator)
        assert closed.status_code == 404
    assert runtime_of(offline_app).store.get_entry(entry_id, with_history=False).status == "open"
    assert client.get("/api/entries/1", headers=viewer).get_json()["id"] == 1
