"""The role matrix, built from app.url_map: anonymous, viewer, operator and admin, by session and
by API token, against every route and method. A route without a declared role fails here."""

from __future__ import annotations

import re

import pytest

from dlq_dashboard.accounts import AccountError, create_token, create_user
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of

from . import support

IDENTITIES = (None, "viewer", "operator", "admin")  # None: anonymous
RANK = {role: i for i, role in enumerate(IDENTITIES)}
EXEMPT = {"static"}  # Flask's own static files: no data, no role
CHECKED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def routes(app):
    """(endpoint, rule, method) for every checked method of every non-exempt route."""
    for rule in app.url_map.iter_rules():
        if rule.endpoint in EXEMPT:
            continue
        for method in CHECKED_METHODS:
            if method in rule.methods:
                yield rule.endpoint, rule, method


def fill(rule, entry_id: int) -> str:
    """The rule as a URL: every int converter gets a real entry id, other converters a word."""
    path = re.sub(r"<int:[^>]+>", str(entry_id), rule.rule)
    return re.sub(r"<[^>]+>", "x", path)


def refused(response) -> bool:
    """401, 403, or the guard's redirect to the login page (which always names the page to return
    to; a bare /login is the logout's own answer)."""
    if response.status_code in (401, 403):
        return True
    return response.status_code in (301, 302, 303, 307, 308) and "/login?next=" in response.location


def snapshot(app) -> dict:
    """Every row of every table the requests could change (support.table_rows), and the ORDERS
    stream's message count."""
    state = support.table_rows(runtime_of(app).engine)
    bridge = runtime_of(app).bridge
    state["ORDERS messages"] = bridge.call(lambda: bridge.js.stream_info("ORDERS"), timeout=5).state.messages
    return state


@pytest.fixture
def world(app, auth):
    """An entry to act on, a stream its republish would land in, and a session and token per role."""
    bridge = runtime_of(app).bridge
    bridge.call(lambda: bridge.js.add_stream(name="ORDERS", subjects=["orders.>"]), timeout=5)
    engine = runtime_of(app).engine
    ingest_dlq_batch(engine, "MATRIX", "e1", [
        StreamMessage(1, "dlq.orders.created", support.dlq_headers("orders.created", **{"Dlq-Error": "boom"}),
                      b'{"id": 1}', None)])
    entry_id = runtime_of(app).store.list_entries(EntryFilter()).entries[0].id
    sessions = {None: app.test_client()}
    sessions.update({role: auth.client(role) for role in IDENTITIES[1:]})
    tokens = {role: create_token(engine, f"matrix-{role}", role) for role in IDENTITIES[1:]}
    return {"entry_id": entry_id, "sessions": sessions, "tokens": tokens}


def call(app, client, method: str, path: str, *, token: str | None = None, htmx: bool = False):
    """One request as a browser form, an htmx call, a JSON call with its CSRF header, or a token."""
    response = _send(client, method, path, token=token, htmx=htmx)
    response.get_data()  # a streamed answer (exports) finishes and pops its request context
    response.close()
    return response


def _send(client, method: str, path: str, *, token: str | None, htmx: bool):
    headers = {}
    if htmx:
        headers["HX-Request"] = "true"
    if token:
        headers.update(support.bearer(token))
    if method == "GET":
        return client.get(path, headers=headers)
    if path.startswith("/api/"):
        if not token:
            headers["X-CSRFToken"] = support.csrf_token(client)
        return client.open(path, method=method, json={"version": 1}, headers=headers)
    data = {"version": "1"}
    if not token:
        data["csrf_token"] = support.csrf_token(client)
    return client.open(path, method=method, data=data, headers=headers)


def session_for(app, world, who, method):
    """The shared session for reads; for a write a fresh login of a second user of that role,
    because one of the writes is the logout, which ends every session of its user."""
    if method == "GET" or who is None:
        return world["sessions"][who]
    name = f"writer-{who}"
    try:
        create_user(runtime_of(app).engine, name, support.PASSWORD, who)
    except AccountError:
        pass
    client = app.test_client()
    assert support.login(client, name, support.PASSWORD).status_code == 302
    return client


def test_every_route_declares_its_least_role(app):
    missing = sorted({endpoint for endpoint, _, _ in routes(app)
                      if not hasattr(app.view_functions[endpoint], "required_role")})
    assert missing == [], f"routes without @requires(...): {missing}"


def test_no_route_lets_a_lower_role_in_or_changes_anything_for_it(app, world):
    problems = []
    for endpoint, rule, method in routes(app):
        role = getattr(app.view_functions[endpoint], "required_role", "admin")
        path = fill(rule, world["entry_id"])
        lower = [who for who in IDENTITIES if RANK[who] < RANK[role]]
        if not lower:
            continue
        before = snapshot(app)
        for who in lower:
            attempts = [("session", call(app, world["sessions"][who], method, path)),
                        ("htmx", call(app, world["sessions"][who], method, path, htmx=True))]
            if who is not None:
                attempts.append(("token", call(app, app.test_client(), method, path, token=world["tokens"][who])))
            for via, response in attempts:
                if not refused(response):
                    problems.append(f"{method} {path} ({role}) let {who or 'anonymous'} in by {via}: "
                                    f"{response.status_code}")
        if snapshot(app) != before:
            problems.append(f"{method} {path} ({role}) changed something for a lower role")
    assert problems == [], "\n".join(problems)


def test_every_role_at_or_above_a_routes_role_gets_through(app, world):
    problems = []
    checked = 0
    for endpoint, rule, method in routes(app):
        role = getattr(app.view_functions[endpoint], "required_role", "admin")
        path = fill(rule, world["entry_id"])
        for who in IDENTITIES:
            if RANK[who] < RANK[role]:
                continue
            attempts = [("session", call(app, session_for(app, world, who, method), method, path))]
            if who is not None:
                attempts.append(("token", call(app, app.test_client(), method, path, token=world["tokens"][who])))
            for via, response in attempts:
                checked += 1
                # An open route is never refused by the guard; its own 401 (a wrong password
                # at /login) is its answer, not a refusal.
                if refused(response) and not (role is None and response.status_code == 401):
                    problems.append(f"{method} {path} ({role}) refused {who or 'anonymous'} by {via}: "
                                    f"{response.status_code}")
    assert problems == [], "\n".join(problems)
    assert checked > 20
