"""The suite's memo of werkzeug's route parsing and URL builders (conftest.py
``_url_builders_compiled_once``) gives each app the routes werkzeug itself would: the same
matches and the same URLs, with converters bound to that app's own map."""

from __future__ import annotations

import pytest
from werkzeug.exceptions import NotFound
from werkzeug.routing import Rule

from dlq_dashboard import create_app

from . import support


def _answers(application):
    """Each route's URL for sample values, and what each of those URLs matches."""
    adapter = application.url_map.bind("dash.example", url_scheme="http")
    built, matched = {}, {}
    for rule in application.url_map.iter_rules():
        values = {name: 7 if name.endswith("id") else "x-1" for name in rule.arguments}
        try:
            url = adapter.build(rule.endpoint, values, method=sorted(rule.methods or {"GET"})[0])
        except Exception as error:  # a route whose converters refuse the sample: compare the refusal
            built[rule.rule, rule.endpoint] = type(error).__name__
            continue
        built[rule.rule, rule.endpoint] = url
        try:
            matched[url] = adapter.match(url, method=sorted(rule.methods or {"GET"})[0])
        except Exception as error:
            matched[url] = type(error).__name__
    return built, matched


def test_memoized_routes_build_and_match_as_werkzeugs_own(tmp_path, monkeypatch):
    settings = support.make_settings(tmp_path, None, database_url=support.migrated_sqlite(tmp_path / "a.sqlite3"))
    memoized = [create_app({"SETTINGS": settings, "TESTING": True}) for _ in range(2)]
    assert Rule.compile.__name__ == "compile_once", "the suite's memo is not in place"
    with monkeypatch.context() as patch:  # werkzeug's own, unmemoized
        patch.setattr(Rule, "compile", Rule.compile.original)
        patch.setattr(Rule, "_compile_builder", Rule._compile_builder.original)
        own = create_app({"SETTINGS": settings, "TESTING": True})
    expected = _answers(own)
    assert len(expected[0]) > 50 and any("/entries/7" in url for url in expected[0].values())
    for application in memoized:
        assert _answers(application) == expected
        for rule in application.url_map.iter_rules():
            assert all(converter.map is application.url_map for converter in rule._converters.values())


def test_an_id_beyond_what_the_database_stores_is_still_refused_by_a_memoized_route(tmp_path):
    settings = support.make_settings(tmp_path, None, database_url=support.migrated_sqlite(tmp_path / "a.sqlite3"))
    create_app({"SETTINGS": settings, "TESTING": True})
    application = create_app({"SETTINGS": settings, "TESTING": True})
    adapter = application.url_map.bind("dash.example")
    assert adapter.match("/entries/7")[1] == {"entry_id": 7}
    with pytest.raises(NotFound):
        adapter.match(f"/entries/{2**63}")
