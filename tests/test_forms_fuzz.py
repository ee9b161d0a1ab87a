"""The HTML routes fuzzed as anyone could call them: whatever the query, the form fields and the
ids in the path, every page and form answers without a server error, and no GET changes the
database. test_openapi.py does the same for the JSON API from its document.

The examples are the same on every run (the "ci" hypothesis profile); ``HYPOTHESIS_PROFILE=long``
runs many more random ones (README: "A longer random run").
"""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlq_dashboard.runtime import runtime_of

from .support import FUZZ_SCALE, LONG_RUN, csrf_token, dead_letter, jobs_settled, logged_in, make_orders_stream
from .test_openapi import snapshot

# What the forms and links of the pages send, and a few names they do not.
NAMES = ("status", "subject", "reason", "stream", "consumer", "q", "since", "until", "limit", "cursor", "group",
         "after", "version", "note", "payload", "encoding", "force", "ids", "action", "upto", "only_valid",
         "entry", "job", "actor", "by", "state", "viewport", "username", "password", "next", "filter", "id",
         "patch", "name", "role", "scopes", "assignee", "assign", "until", "until_count", "resolved_in", "text")
HUGE = (2**31, 2**63 - 1, 2**63, 2**64, 10**30)
NUMBERS = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from((0, 1, 2, -1) + HUGE)).map(str)
WORDS = st.sampled_from(("", "open", "closed", "republished", "any", "fatal", "max_deliveries", "orders.*",
                         "orders.>", "orders..x", ">", "*", "2026-11-29T10:00:00Z", "9999-12-31T23:59:59Z",
                         "0001-01-01T00:00:00+14:00", "2026-02-30", "republish", "close", "reopen", "base64",
                         "text", "on", "1:1", "1:" + str(2**64), "<script>alert(1)</script>", "' OR 1=1 --",
                         "%00", "\x00", "é" * 300, "a" * 5000, "{}", '{"a": [1, {"b": null}]}'))
VALUES = st.one_of(NUMBERS, WORDS, st.text(st.characters(exclude_categories=("Cs",)), max_size=60))
# Bytes that are not UTF-8, as a hand-made URL or form may carry them.
NOT_UTF8 = "&q=%FF%FE&subject=%C0%AF&note=%E2%82"
# Fields a real form would send, so that examples also get past the first check and act.
FORMS = st.sampled_from((
    (), (("version", "1"),), (("version", "2"), ("note", "seen")), (("version", "1"), ("force", "on")),
    (("version", "1"), ("payload", '{"order_id": 2}')), (("action", "close"), ("ids", "1"), ("note", "n")),
    (("action", "republish"), ("ids", "2"), ("ids", "3:1")), (("action", "close"), ("by", "filter"), ("status", "open")),
    (("action", "republish"), ("by", "filter"), ("subject", "orders.*"), ("upto", "4"), ("only_valid", "on")),
    (("action", "patch"), ("by", "filter"), ("subject", "orders.*"), ("only_valid", "on"),
     ("patch", '[{"op": "replace", "path": "/order_id", "value": 1}]')),
    (("action", "patch"), ("ids", "1"), ("patch", '[{"op": "test", "path": "/x", "value": 1}]')),
    (("status", "open"), ("subject", "orders.>"), ("q", "order")), (("after", "1"), ("status", "open")),
    (("group", "1"),), (("entry", "1"), ("job", "1")), (("state", "failed"),),
    (("version", "1"), ("state", "investigating"), ("assign", "me")), (("version", "1"), ("state", "ignored"),
                                                                      ("until", "2h")),
    (("version", "1"), ("state", "ignored"), ("until_count", "3")), (("text", "a note"),)))
FIELDS = st.builds(lambda form, extra: list(form) + extra, FORMS,
                   st.lists(st.tuples(st.sampled_from(NAMES), VALUES), max_size=6))


def routes(app) -> list[tuple[str, str]]:
    """Every HTML route (method, rule): the JSON ones are fuzzed from their document."""
    found = []
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith(("/api/", "/static/")):
            continue
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            found.append((method, rule.rule))
    return sorted(found)


@pytest.fixture
def site(app, nats_server):
    """The app with NATS, a stream to republish to, entries of each kind and a finished job."""
    make_orders_stream(nats_server.url)
    ids = [dead_letter(app, seq, payload=payload, Dlq_Reason="fatal", Dlq_Error=f"order {seq} not found")
           for seq, payload in enumerate([b'{"order_id": 1}', b"\xff\xfe not text", b"[]"], start=1)]
    ids.append(dead_letter(app, 4, subject=None, Dlq_Reason="max_deliveries"))
    ids.append(dead_letter(app, 5, Dlq_Reason="fatal"))
    client = logged_in(app, "operator")
    client.post("/bulk", data={"action": "close", "ids": [str(ids[-1])], "note": "a job to look at",
                               "csrf_token": csrf_token(client, "/")})
    jobs_settled(runtime_of(app).engine)
    return app, ids


def test_the_html_routes_answer_every_input_without_a_server_error(site):
    app, ids = site
    engine = runtime_of(app).engine
    operator = logged_in(app, "operator")
    operator_token = csrf_token(operator, "/")
    # /admin/... as an admin (an operator only meets its 403).
    admin = logged_in(app, "admin")
    admin_token = csrf_token(admin, "/admin/users")
    known = list(ids) + [1, 0]
    all_routes = routes(app)
    assert ("POST", "/bulk/preview") in all_routes and ("GET", "/groups") in all_routes

    @settings(deadline=None, database=None, suppress_health_check=list(HealthCheck),
              derandomize=not LONG_RUN, max_examples=400 * FUZZ_SCALE)
    @given(route=st.sampled_from(all_routes), fields=FIELDS,
           entry_id=st.one_of(st.sampled_from(known), st.integers(0, 2**70)),
           with_token=st.sampled_from((True, True, True, False)), htmx=st.booleans(),
           not_utf8=st.sampled_from((False, False, False, True)),
           account=st.sampled_from(("operator-user", "ghost", "a.b@example.com", "x" * 80, "%00", "..")),
           row_action=st.sampled_from(("republish", "close", "explode")))
    def call(route, fields, entry_id, with_token, htmx, not_utf8, account, row_action):
        method, rule = route
        path = rule.replace("<action>", row_action)  # a list row's action (web/row_actions.py)
        for name in ("entry_id", "job_id", "view_id", "alert_id", "group_id"):
            path = path.replace(f"<int:{name}>", str(entry_id))
        path = path.replace("<name>", account)
        client, token = (admin, admin_token) if path.startswith("/admin/") else (operator, operator_token)
        assert "<" not in path, f"a path parameter the fuzz does not fill: {rule}"
        if path == "/logout":
            return  # would end the session every later example needs
        headers = {"HX-Request": "true"} if htmx else {}
        if method == "GET":
            jobs_settled(engine)
            before = snapshot(engine)
            query = urlencode(fields) + (NOT_UTF8 if not_utf8 else "")
            response = client.get(path, query_string=query, headers=headers)
            assert response.status_code < 500, (method, path, fields, response.get_data(as_text=True)[:300])
            if path not in ("/login",):
                assert snapshot(engine) == before, f"GET {path} {fields} changed the database"
        else:
            data = list(fields) + ([("csrf_token", token)] if with_token else [])
            body = urlencode(data) + (NOT_UTF8 if not_utf8 else "")
            response = client.post(path, data=body.encode(), headers=headers,
                                   content_type="application/x-www-form-urlencoded")
            assert response.status_code < 500, (method, path, fields, response.get_data(as_text=True)[:300])
        response.close()

    call()
