"""Security around every request: headers, Secure cookies over HTTPS, cross-site refusals,
CSRF refusals, the login throttle, and what /healthz and /metrics do not tell."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from flask import jsonify
from sqlalchemy import select

from dlq_dashboard import create_app
from dlq_dashboard.accounts import create_user
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.web.auth import requires
from dlq_dashboard.db.models import LoginFailure
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.web.security import CONTENT_SECURITY_POLICY, LoginThrottle

from . import support

EXPECTED_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def security_app(tmp_path, **settings):
    app = create_app({"SETTINGS": support.make_settings(tmp_path, trusted_proxies=("10.0.0.0/24",), **settings),
                      "TESTING": True})
    app.add_url_rule("/api/probe", "api_probe", requires("viewer")(lambda: jsonify(ok=True)), methods=["POST"])
    app.add_url_rule("/probe/form", "probe_form", requires("viewer")(lambda: "done"), methods=["POST"])
    return app


@pytest.fixture
def web(tmp_path):
    app = security_app(tmp_path)
    yield app
    runtime_of(app).stop()


def assert_security_headers(response, what):
    for name, value in EXPECTED_HEADERS.items():
        assert response.headers.get(name) == value, f"{what}: {name} is {response.headers.get(name)!r}"


# --- headers ----------------------------------------------------------------------------------

def test_the_content_security_policy_allows_no_inline_code_no_eval_and_no_framing():
    policy = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY and "unsafe-eval" not in CONTENT_SECURITY_POLICY
    assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'"
    assert policy["style-src"] == "'self'" and policy["img-src"] == "'self' data:"
    assert policy["frame-ancestors"] == "'none'" and policy["form-action"] == "'self'"
    assert policy["base-uri"] == "'none'" and policy["object-src"] == "'none'"


def test_every_get_route_answers_with_the_security_headers(app, auth):
    """Every GET route of app.url_map, anonymous and as admin (entry ids filled in)."""
    engine = runtime_of(app).engine
    ingest_dlq_batch(engine, "HDR", "e1", [StreamMessage(1, "dlq.orders.created", support.dlq_headers(), b"{}", None)])
    clients = {"anonymous": app.test_client(), "admin": auth.client("admin")}
    get_rules = [rule.rule for rule in app.url_map.iter_rules() if "GET" in rule.methods]
    checked = []
    for rule in app.url_map.iter_rules():
        if "GET" not in rule.methods:
            continue
        path = re.sub(r"<int:[^>]+>", "1", rule.rule)
        path = re.sub(r"<(?:path:|string:)?[^>]+>", "app.css" if rule.endpoint == "static" else "x", path)
        for who, client in clients.items():
            response = client.get(path)
            response.get_data()  # a streamed export finishes and pops its request context
            response.close()
            assert_security_headers(response, f"GET {path} as {who}")
            checked.append((rule.rule, who))
    assert len(checked) == len(get_rules) * len(clients)
    assert sorted(checked) == sorted((rule, who) for rule in get_rules for who in clients)
    assert {"/", "/login", "/entries/<int:entry_id>", "/api/entries", "/api/openapi.json", "/healthz",
            "/metrics", "/static/<path:filename>"} <= set(get_rules)


def test_error_answers_carry_the_headers_too(web):
    client = web.test_client()
    assert_security_headers(client.get("/no/such/page"), "404")
    assert_security_headers(client.post("/login"), "CSRF refusal")
    assert_security_headers(client.post("/probe/form", headers={"Sec-Fetch-Site": "cross-site"}), "cross-site")


def test_pages_with_payloads_are_not_cached_but_static_files_may_be(web):
    client = support.logged_in(web, "viewer")
    assert client.get("/").headers["Cache-Control"] == "no-store"
    assert client.get("/static/app.css").headers.get("Cache-Control") != "no-store"


# --- cookies over HTTPS -----------------------------------------------------------------------

def https_login(app, environ=None, base_url="https://dash.example"):
    create_user(runtime_of(app).engine, "tls", support.PASSWORD, "viewer")
    client = app.test_client()
    environ = environ or {}
    page = client.get("/login", base_url=base_url, environ_base=environ)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.get_data(as_text=True)).group(1)
    # Over HTTPS Flask-WTF also checks that the Referer is this site.
    return client.post("/login", base_url=base_url, environ_base=environ,
                       headers={"Referer": f"{base_url}/login", "X-Forwarded-Proto": "https"},
                       data={"username": "tls", "password": support.PASSWORD, "csrf_token": token})


def session_cookie(response) -> str:
    return support.session_cookies(response)[0]


def test_the_session_cookie_is_secure_when_served_over_https(web):
    response = https_login(web)
    assert response.status_code == 302
    assert "Secure" in session_cookie(response)
    assert response.headers["Strict-Transport-Security"] == "max-age=31536000"


def test_a_trusted_proxy_terminating_tls_also_gets_a_secure_cookie(web):
    response = https_login(web, environ={"REMOTE_ADDR": "10.0.0.9"}, base_url="http://dash.example")
    assert response.status_code == 302
    assert "Secure" in session_cookie(response)


def test_a_forwarded_proto_from_anyone_else_is_not_believed(web):
    client = web.test_client()
    response = client.get("/login", headers={"X-Forwarded-Proto": "https"}, environ_base={"REMOTE_ADDR": "192.0.2.4"})
    assert "Secure" not in session_cookie(response)
    assert "Strict-Transport-Security" not in response.headers


# --- cross-site and CSRF refusals -------------------------------------------------------------

@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_a_state_changing_request_started_by_another_site_is_refused_even_with_a_token(web, site):
    client = support.logged_in(web, "viewer")
    response = client.post("/logout", data={"csrf_token": support.csrf_token(client)}, headers={"Sec-Fetch-Site": site})
    assert response.status_code == 403
    assert "started by another site" in response.get_data(as_text=True)
    assert client.get("/").status_code == 200  # still logged in: the logout did not happen


def test_a_cross_site_api_call_is_refused_as_json(web):
    client = support.logged_in(web, "viewer")
    response = client.post("/api/probe", json={}, headers={"Sec-Fetch-Site": "cross-site",
                                                           "X-CSRFToken": support.csrf_token(client)})
    assert response.status_code == 403 and "another site" in response.json["error"]


def test_same_origin_and_user_started_requests_pass(web):
    client = support.logged_in(web, "viewer")
    for site in ("same-origin", "none"):
        response = client.post("/probe/form", data={"csrf_token": support.csrf_token(client)}, headers={"Sec-Fetch-Site": site})
        assert response.status_code == 200, site


def test_a_form_without_its_csrf_token_is_refused_with_a_sentence(web):
    client = support.logged_in(web, "viewer")
    response = client.post("/probe/form")
    assert response.status_code == 400
    assert "CSRF token is missing" in response.get_data(as_text=True)


def test_an_api_call_with_a_session_and_no_csrf_header_is_refused_as_json(web):
    client = support.logged_in(web, "viewer")
    response = client.post("/api/probe", json={})
    assert response.status_code == 400 and "CSRF" in response.json["error"]
    assert client.post("/api/probe", json={}, headers={"X-CSRFToken": support.csrf_token(client)}).status_code == 200


def test_another_sessions_csrf_token_is_refused(web):
    mallory = support.logged_in(web, "viewer")
    victim = support.logged_in(web, "operator")
    response = victim.post("/probe/form", data={"csrf_token": support.csrf_token(mallory)})
    assert response.status_code == 400


def test_a_bearer_call_needs_no_csrf_token(web):
    from dlq_dashboard.accounts import create_token

    token = create_token(runtime_of(web).engine, "script", "viewer")
    assert web.test_client().post("/api/probe", json={}, headers=support.bearer(token)).status_code == 200


# --- the login throttle -----------------------------------------------------------------------

def test_after_five_failures_a_name_is_refused_from_that_address_for_a_while_even_with_the_right_password(web):
    create_user(runtime_of(web).engine, "target", support.PASSWORD, "viewer")
    client = web.test_client()
    for _ in range(5):
        assert support.login(client, "target", "guess-guess").status_code == 401
    response = support.login(client, "target", support.PASSWORD)
    assert response.status_code == 429
    assert 0 < int(response.headers["Retry-After"]) <= 300
    assert "Too many failed logins for this user name from this address." in response.get_data(as_text=True)


def test_an_unknown_name_is_throttled_like_a_known_one(web):
    client = web.test_client()
    for _ in range(5):
        support.login(client, "nobody-here", "guess-guess")
    assert support.login(client, "nobody-here", "guess-guess").status_code == 429


def test_a_throttled_name_does_not_lock_out_other_names(web):
    create_user(runtime_of(web).engine, "colleague", support.PASSWORD, "viewer")
    client = web.test_client()
    for _ in range(5):
        support.login(client, "target", "guess-guess")
    assert support.login(web.test_client(), "colleague", support.PASSWORD).status_code == 302


def test_one_address_trying_many_names_is_slowed_down(tmp_path):
    app = security_app(tmp_path, login_failures_per_address=3)
    now = [datetime(2026, 11, 30, 12)]
    app.extensions["dlq_login_throttle"].clock = lambda: now[0]
    create_user(runtime_of(app).engine, "real", support.PASSWORD, "viewer")
    attacker = {"REMOTE_ADDR": "198.51.100.7"}
    client = app.test_client()
    for name in ("a1", "a2", "a3", "a4"):
        token = support.csrf_token(client)
        assert client.post("/login", data={"username": name, "password": "guess-guess", "csrf_token": token},
                           environ_base=attacker).status_code == 401
    token = support.csrf_token(client)
    refused = client.post("/login", data={"username": "real", "password": support.PASSWORD, "csrf_token": token},
                          environ_base=attacker)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    assert support.login(app.test_client(), "real", support.PASSWORD).status_code == 302  # from another address
    now[0] += timedelta(seconds=1)
    token = support.csrf_token(client)
    assert client.post("/login", data={"username": "real", "password": support.PASSWORD, "csrf_token": token},
                       environ_base=attacker).status_code == 302
    runtime_of(app).stop()


def _throttle(offline_app, clock, **limits) -> LoginThrottle:
    return LoginThrottle(runtime_of(offline_app).engine, clock=clock, **limits)


def _wait(throttle, name, address) -> int:
    refused = throttle.check(name, address)
    return refused.seconds if refused else 0


def test_the_throttle_window_slides(offline_app):
    now = [datetime(2026, 11, 30, 12, 0, 0)]
    throttle = _throttle(offline_app, lambda: now[0], per_pair=3, per_address=100, window=60)
    for step in (0, 10, 20):
        now[0] = datetime(2026, 11, 30, 12, 0, step)
        throttle.failed("eve", "192.0.2.1")
    assert _wait(throttle, "eve", "192.0.2.1") == 40  # until the first failure is 60 s old
    now[0] = datetime(2026, 11, 30, 12, 1, 0, 500000)
    assert _wait(throttle, "eve", "192.0.2.1") == 0
    throttle.failed("eve", "192.0.2.1")
    assert _wait(throttle, "EVE ", "192.0.2.1") == 10  # names count case-insensitively


def test_a_good_login_forgets_the_names_failures_but_not_the_addresss(offline_app):
    now = [datetime(2026, 11, 30, 12)]
    throttle = _throttle(offline_app, lambda: now[0], per_pair=2, per_address=3, per_name=3, window=60)
    throttle.failed("frank", "192.0.2.1")
    throttle.failed("frank", "192.0.2.1")
    assert _wait(throttle, "frank", "192.0.2.1") == 60
    throttle.succeeded("frank", "192.0.2.1")
    assert _wait(throttle, "frank", "192.0.2.1") == 0
    throttle.failed("other", "192.0.2.1")
    throttle.failed("third", "192.0.2.1")
    assert _wait(throttle, "anyone", "192.0.2.1") == 1  # the address's four failures are still counted


def test_an_ipv6_client_is_counted_by_its_64_network():
    assert LoginThrottle.address_key("2001:db8:1:2::1") == LoginThrottle.address_key("2001:db8:1:2:ffff::9")
    assert LoginThrottle.address_key("::ffff:192.0.2.1") == LoginThrottle.address_key("192.0.2.1")


def test_the_throttle_forgets_failures_older_than_its_window(offline_app):
    now = [datetime(2026, 11, 30, 12)]
    throttle = _throttle(offline_app, lambda: now[0], window=60)
    for i in range(50):
        throttle.failed(f"user{i}", "192.0.2.1")
    now[0] += timedelta(seconds=61)
    throttle.failed("late", "192.0.2.2")
    with runtime_of(offline_app).engine.connect() as conn:
        kept = conn.execute(select(LoginFailure.key).order_by(LoginFailure.key)).scalars().all()
    assert kept == ["addr:192.0.2.2", "pair:192.0.2.2|late", "user:late"]


def test_behind_a_trusted_proxy_the_forwarded_client_address_is_counted(web):
    from dlq_dashboard.web.security import client_address

    with web.test_request_context("/", environ_base={"REMOTE_ADDR": "10.0.0.2"},
                                  headers={"X-Forwarded-For": "203.0.113.5, 10.0.0.3"}):
        assert client_address() == "203.0.113.5"
    with web.test_request_context("/", environ_base={"REMOTE_ADDR": "192.0.2.9"},
                                  headers={"X-Forwarded-For": "203.0.113.5"}):
        assert client_address() == "192.0.2.9"


# --- what the open routes do not tell ---------------------------------------------------------

SECRET = "card-4111-1111-1111-1111"


@pytest.mark.parametrize("path", ["/healthz", "/metrics"])
def test_an_open_route_answers_without_login_and_reveals_no_payload(app, path):
    if path not in {r.rule for r in app.url_map.iter_rules()}:
        pytest.skip(f"{path} is not a route of this app yet")
    view = app.view_functions[next(r.endpoint for r in app.url_map.iter_rules() if r.rule == path)]
    assert view.required_role is None
    engine = runtime_of(app).engine
    headers = support.dlq_headers(f"orders.{SECRET}", **{"Dlq-Error": f"bad {SECRET}", "X-Customer": SECRET})
    ingest_dlq_batch(engine, "OPEN", "e1", [StreamMessage(1, f"dlq.orders.{SECRET}", headers,
                                                          f'{{"card": "{SECRET}"}}'.encode(), None)])
    response = app.test_client().get(path)
    assert response.status_code in (200, 503)
    assert "4111-1111" not in response.get_data(as_text=True)


def test_a_raw_payload_download_is_an_attachment_never_a_page(web):
    downloads = [r.rule for r in web.url_map.iter_rules() if r.rule.endswith("/payload") and "GET" in r.methods]
    if not downloads:
        pytest.skip("there is no raw payload download in this app yet")
    engine = runtime_of(web).engine
    ingest_dlq_batch(engine, "DL", "e1", [StreamMessage(1, "dlq.orders.created", support.dlq_headers(),
                                                        b"<script>alert(1)</script>", None)])
    client = support.logged_in(web, "viewer")
    response = client.get(re.sub(r"<int:[^>]+>", "1", downloads[0]))
    assert response.status_code == 200
    assert response.headers["Content-Disposition"].startswith("attachment")
    assert response.mimetype != "text/html"
    assert_security_headers(response, "the payload download")
