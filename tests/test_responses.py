"""How a view answers (web/responses.py): URLs built once (url_once) and those of many entries
built once a page (IdUrls) are exactly url_for's."""

from __future__ import annotations

import pytest
from flask import url_for
from werkzeug.routing import BuildError

from dlq_dashboard.web import responses
from dlq_dashboard.web.responses import IdUrls

IDS = (1, 9, 10, 42, 1234567, 2**63 - 1)
VALUES = ({}, {"status": "open"}, {"subject": "orders.*", "q": "a b&c=d/é", "since": "1h"},
          {"cursor": "MTIz", "limit": "10", "field.customer": "C-42"}, {"_anchor": "history"})


def test_an_entry_url_is_what_url_for_makes_for_every_id_and_query(offline_app):
    for base in ("http://localhost/", "http://localhost/dlq/"):
        with offline_app.test_request_context("/", base_url=base):
            urls = IdUrls()
            for values in VALUES:
                for entry_id in IDS:
                    assert urls("pages.entry", entry_id, **values) == url_for("pages.entry", entry_id=entry_id,
                                                                              **values)
            for action in ("republish", "close"):
                for endpoint in ("row_actions.confirm", "row_actions.act"):
                    assert urls(endpoint, 7, action=action) == url_for(endpoint, entry_id=7, action=action)
            assert urls("pages.entry", 5, _external=True) == url_for("pages.entry", entry_id=5, _external=True)
            groups = IdUrls("group_id")
            for group_id in IDS:
                assert groups("groups.group_page", group_id) == url_for("groups.group_page", group_id=group_id)
            # The same values in another order: the query string keeps the order given.
            assert urls("pages.entry", 6, status="open", q="x") == url_for("pages.entry", entry_id=6, status="open",
                                                                          q="x")
            assert urls("pages.entry", 6, q="x", status="open") == url_for("pages.entry", entry_id=6, q="x",
                                                                          status="open")


def test_a_query_that_holds_the_marker_is_built_by_url_for(offline_app):
    marker = str(responses._MARKER)
    with offline_app.test_request_context("/"):
        urls = IdUrls()
        assert urls("pages.entry", 3, q=marker) == url_for("pages.entry", entry_id=3, q=marker)
        assert urls("pages.entry", 4, q=marker) == f"/entries/4?q={marker}"


def test_a_url_built_once_is_what_url_for_makes_for_every_request(offline_app):
    from dlq_dashboard.web.responses import url_once

    asks = (("pages.index", {}), ("pages.index", {"status": "open", "q": "a&b"}),
            ("pages.index", {"q": "a&b", "status": "open"}), ("static", {"filename": "app.css"}),
            ("pages.groups", {"status": ""}), ("pages.index", {"_external": True}),
            ("pages.index", {"status": ["open", "closed"]}),  # a list: no key, built each time
            ("pages.index", {"page": 1}), ("pages.index", {"page": True}))  # equal keys, written apart
    for base in ("http://localhost/", "http://localhost/dlq/", "https://other.example/x/"):
        with offline_app.test_request_context("/", base_url=base):
            for _ in range(2):
                for endpoint, values in asks:
                    assert url_once(endpoint, **values) == url_for(endpoint, **values)
    # Kept by the app across requests: each request, whatever came before, gets url_for's answer
    # for where it came to (script root, host, scheme, method) and, for '.name', its blueprint.
    with offline_app.app_context():
        for _ in range(2):
            for base in ("http://localhost/", "http://localhost/dlq/", "https://localhost/", "http://other:8080/"):
                for method in ("GET", "POST"):
                    with offline_app.test_request_context("/groups", base_url=base, method=method):
                        relative = ((".groups", {}),) if method == "GET" else ()  # POST /groups: no route
                        for endpoint, values in asks + (("pages.entry", {"entry_id": 3, "_external": True}),
                                                        *relative):
                            assert url_once(endpoint, **values) == url_for(endpoint, **values)
        with offline_app.test_request_context("/api/me"):
            with pytest.raises(BuildError):
                url_once(".groups")  # another blueprint's: no such endpoint, as url_for says


def test_an_app_that_rendered_a_fragment_goes_when_nothing_else_holds_it(tmp_path):
    # A fragment's prelude (what its template binds outside its blocks) was kept module-wide by
    # its template, which the prelude's environment kept alive: every app that rendered one stayed.
    import gc
    import weakref

    from dlq_dashboard import create_app
    from dlq_dashboard.runtime import runtime_of

    from . import support

    database = support.migrated_sqlite(tmp_path / "dlq.sqlite3")
    app = create_app({"SETTINGS": support.make_settings(tmp_path, database_url=database), "TESTING": True})
    with app.test_request_context("/"):
        html = responses.render_block("groups.html", "new_failures", new_count=3, cap=100, url="/groups")
    assert "3 new" in html
    runtime_of(app).stop()
    gone = weakref.ref(app)
    del app
    gc.collect()
    assert gone() is None
