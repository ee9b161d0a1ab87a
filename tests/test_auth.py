"""Login, logout, sessions, API tokens, the trusted proxy header and the audit identity."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select

from dlq_dashboard.accounts import create_token, create_user, revoke_token, set_disabled
from dlq_dashboard.db.models import Action, Entry
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.web.auth import LOGIN_FAILED, actor_name, requires, safe_next
from dlq_dashboard.runtime import runtime_of

from . import support


@pytest.fixture
def engine(probe_app):
    return runtime_of(probe_app).engine


# --- login and logout -------------------------------------------------------------------------

def test_a_correct_login_goes_to_the_page_asked_for(probe_app, engine):
    create_user(engine, "alice", support.PASSWORD, "viewer")
    client = probe_app.test_client()
    first = client.get("/probe/viewer?x=1")
    assert first.status_code == 302 and first.location == "/login?next=/probe/viewer?x%3D1"
    response = client.post(first.location, data={"username": "alice", "password": support.PASSWORD,
                                                 "csrf_token": support.csrf_token(client)})
    assert response.status_code == 302 and response.location == "/probe/viewer?x=1"
    assert client.get("/probe/viewer").json == {"actor": "alice", "role": "viewer", "via": "session"}


def test_a_failed_login_says_the_same_for_an_unknown_name_a_wrong_password_and_a_disabled_user(
        probe_app, engine, auth):
    create_user(engine, "bob", support.PASSWORD, "viewer")
    create_user(engine, "off", support.PASSWORD, "viewer")
    set_disabled(engine, "off", True)
    answers = []
    for name, password in (("nobody", support.PASSWORD), ("bob", "wrong password"), ("off", support.PASSWORD)):
        client = probe_app.test_client()
        response = auth.login(client, name, password)
        body = re.sub(r'(csrf[-_]token" (?:value|content)=")[^"]+', r"\1", response.get_data(as_text=True))
        answers.append((response.status_code, body.replace(name, "NAME")))
    assert answers[0][0] == 401
    assert LOGIN_FAILED in answers[0][1]
    assert answers[0] == answers[1] == answers[2]


def test_a_refused_login_keeps_the_name_in_its_box_as_text_and_never_the_password(probe_app, auth):
    """A wrong password emptied the name too: typed again under pressure, on a phone."""
    client = probe_app.test_client()
    body = auth.login(client, "someone-unknown", "whatever1").get_data(as_text=True)
    assert 'name="username" value="someone-unknown"' in body and "whatever1" not in body
    assert re.search(r'name="password"[^>]* autofocus', body)  # the password is what to type again
    hostile = auth.login(client, '"><img src=x onerror=alert(1)>', "whatever1").get_data(as_text=True)
    assert "<img" not in hostile and 'value="&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"' in hostile


def test_a_login_renews_the_session_so_a_token_from_before_is_refused(probe_app, engine):
    create_user(engine, "carol", support.PASSWORD, "viewer")
    client = probe_app.test_client()
    before = support.csrf_token(client)
    cookie_before = client.get_cookie("session").value
    client.post("/login", data={"username": "carol", "password": support.PASSWORD, "csrf_token": before})
    assert client.get_cookie("session").value != cookie_before
    assert client.post("/probe/viewer", data={"csrf_token": before}).status_code == 400
    assert client.post("/probe/viewer", data={"csrf_token": support.csrf_token(client)}).status_code == 200


def test_the_session_cookie_is_httponly_and_samesite_lax(probe_app, engine, auth):
    create_user(engine, "dora", support.PASSWORD, "viewer")
    client = probe_app.test_client()
    response = auth.login(client, "dora")
    cookie = support.session_cookies(response)[0]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert "Secure" not in cookie  # plain HTTP here; see test_security for HTTPS
    assert "Expires=" in cookie  # an idle session ends (PERMANENT_SESSION_LIFETIME)


def test_logout_ends_the_session_even_for_a_copy_of_its_cookie(probe_app, auth):
    client = auth.client("viewer")
    replay = probe_app.test_client()
    replay.set_cookie("session", client.get_cookie("session").value)
    assert client.get("/probe/viewer").status_code == 200
    assert replay.get("/probe/viewer").status_code == 200

    response = auth.logout(client)

    assert response.status_code == 302 and response.location == "/login"
    assert client.get("/probe/viewer").status_code == 302
    assert replay.get("/probe/viewer").status_code == 302


def test_logout_needs_a_post_with_a_csrf_token(probe_app, auth):
    client = auth.client("viewer")
    assert client.get("/logout").status_code == 405
    assert client.post("/logout").status_code == 400
    assert client.get("/probe/viewer").status_code == 200


def test_disabling_a_user_ends_their_session_at_once(probe_app, engine, auth):
    client = auth.client("operator")
    assert client.get("/probe/operator").status_code == 200
    set_disabled(engine, "operator-user", True)
    assert client.get("/probe/operator").status_code == 302


@pytest.mark.parametrize("target", ["//evil.example/x", "/\\evil.example", "/\t/evil.example", "/\n/evil.example",
                                    "http://evil.example/", "javascript:alert(1)", "evil", "", None])
def test_the_page_after_login_is_never_on_another_site(probe_app, target):
    with probe_app.test_request_context():
        assert safe_next(target) == "/"


def test_a_local_page_after_login_is_kept(probe_app):
    with probe_app.test_request_context():
        assert safe_next("/entries/4?tab=history") == "/entries/4?tab=history"


def test_a_page_address_too_long_for_the_session_cookie_is_the_list_page(probe_app):
    """It rides in the cookie, which a browser refuses past 4 KB: a crafted link of 3 KB made
    its sign-in end on "not started in this browser"."""
    with probe_app.test_request_context():
        kept = "/?q=" + "a" * 1000
        assert safe_next(kept) == kept
        assert safe_next("/?q=" + "a" * 3000) == "/"


# --- refusals by role -------------------------------------------------------------------------

def test_anonymous_pages_go_to_login_the_api_says_401_and_htmx_gets_401_without_a_redirect(probe_app):
    client = probe_app.test_client()
    assert client.get("/probe/viewer").status_code == 302
    api = client.get("/api/probe")
    assert api.status_code == 401 and "Log in" in api.json["error"]
    fragment = client.get("/probe/viewer", headers={"HX-Request": "true"})
    assert fragment.status_code == 401 and "You were signed out" in fragment.get_data(as_text=True)
    assert "HX-Redirect" not in fragment.headers and "Location" not in fragment.headers


def test_a_head_of_a_page_answers_as_its_get_does(probe_app, auth):
    # Signed out: the same way to the login page, back to the page asked for (not to the list).
    client = probe_app.test_client()
    head, get = client.head("/probe/viewer?x=1"), client.get("/probe/viewer?x=1")
    assert head.status_code == get.status_code == 302 and head.location == get.location == \
        "/login?next=/probe/viewer?x%3D1"
    # The bulk preview's bare address (a bookmark) is the page saying how to choose, not a 400.
    operator = auth.client("operator")
    head, get = operator.head("/bulk/preview"), operator.get("/bulk/preview")
    assert head.status_code == get.status_code == 200 and head.get_data() == b""


def test_a_lower_role_is_refused_with_a_sentence_naming_the_role(probe_app, auth):
    client = auth.client("viewer")
    response = client.get("/probe/operator")
    assert response.status_code == 403
    assert "needs the operator role" in response.get_data(as_text=True)


def test_requires_refuses_an_unknown_role_when_the_route_is_declared():
    with pytest.raises(ValueError, match="unknown role"):
        requires("superuser")


# --- API tokens -------------------------------------------------------------------------------

def test_a_valid_token_reads_the_api_as_token_name(probe_app, engine):
    token = create_token(engine, "ci", "viewer")
    response = probe_app.test_client().get("/api/probe", headers=support.bearer(token))
    assert response.status_code == 200 and response.json == {"actor": "token:ci"}


def test_the_bearer_scheme_is_matched_case_insensitively(probe_app, engine):
    token = create_token(engine, "ci", "viewer")
    response = probe_app.test_client().get("/api/probe", headers={"Authorization": f"bearer {token}"})
    assert response.status_code == 200 and response.json == {"actor": "token:ci"}


def test_a_revoked_or_unknown_token_gets_401(probe_app, engine):
    token = create_token(engine, "ci", "viewer")
    client = probe_app.test_client()
    assert client.get("/api/probe", headers=support.bearer(token)).status_code == 200
    revoke_token(engine, "ci")
    assert client.get("/api/probe", headers=support.bearer(token)).status_code == 401
    made_up = client.get("/api/probe", headers=support.bearer("dlq_made_up"))
    assert made_up.status_code == 401 and made_up.json["error"].startswith("The API token is not valid")
    assert client.get("/api/probe", headers={"Authorization": "Bearer "}).status_code == 401


def test_a_token_with_a_lower_role_gets_403_as_json(probe_app, engine):
    token = create_token(engine, "reader", "viewer")
    response = probe_app.test_client().get("/probe/operator", headers=support.bearer(token))
    assert response.status_code == 403
    assert response.json == {"error": "This needs the operator role; token:reader has viewer."}


def test_a_token_request_needs_no_csrf_token(probe_app, engine):
    token = create_token(engine, "writer", "viewer")
    response = probe_app.test_client().post("/api/probe", json={}, headers=support.bearer(token))
    assert response.status_code == 200 and response.json == {"actor": "token:writer"}


def test_a_bad_token_is_not_rescued_by_the_session_cookie(probe_app, auth):
    # Bearer requests skip CSRF, so the cookie must never count for them.
    client = auth.client("admin")
    assert client.post("/api/probe", json={}, headers=support.bearer("dlq_forged")).status_code == 401
    assert client.get("/probe/viewer", headers=support.bearer("dlq_forged")).status_code == 401


# --- the audit identity -----------------------------------------------------------------------

def test_actor_name_is_the_user_the_token_or_anonymous(probe_app, engine, auth):
    session_client = auth.client("operator")
    assert session_client.get("/probe/operator").get_data(as_text=True) == "operator-user"
    token = create_token(engine, "deploy-bot", "operator")
    assert probe_app.test_client().get("/probe/operator", headers=support.bearer(token)).get_data(as_text=True) \
        == "token:deploy-bot"
    with probe_app.test_request_context("/"):
        assert actor_name() == "anonymous"


# --- a reverse proxy's user header (single sign-on) ---------------------------------------------

@pytest.fixture
def proxied_app(make_app):
    app = support.add_probes(make_app(trusted_header="X-Forwarded-User", trusted_proxies=("10.0.0.0/24",)))
    create_user(runtime_of(app).engine, "sso.user@example.com", support.PASSWORD, "operator")
    return app


def test_the_user_header_is_believed_from_a_trusted_proxy(proxied_app):
    client = proxied_app.test_client()
    response = client.get("/probe/operator", headers={"X-Forwarded-User": "sso.user@example.com"},
                          environ_base={"REMOTE_ADDR": "10.0.0.7"})
    assert response.status_code == 200 and response.get_data(as_text=True) == "sso.user@example.com"


def test_the_user_header_is_ignored_from_any_other_address(proxied_app):
    client = proxied_app.test_client()
    response = client.get("/probe/operator", headers={"X-Forwarded-User": "sso.user@example.com"},
                          environ_base={"REMOTE_ADDR": "192.0.2.1"})
    assert response.status_code == 302 and response.location.startswith("/login")


def test_an_unknown_or_disabled_name_from_the_proxy_gets_nothing(proxied_app):
    client = proxied_app.test_client()
    proxy = {"REMOTE_ADDR": "10.0.0.7"}
    assert client.get("/api/probe", headers={"X-Forwarded-User": "stranger"}, environ_base=proxy).status_code == 401
    set_disabled(runtime_of(proxied_app).engine, "sso.user@example.com", True)
    assert client.get("/api/probe", headers={"X-Forwarded-User": "sso.user@example.com"},
                      environ_base=proxy).status_code == 401


def test_a_proxied_form_still_needs_its_csrf_token(proxied_app):
    client = proxied_app.test_client()
    response = client.post("/probe/viewer", headers={"X-Forwarded-User": "sso.user@example.com"},
                           environ_base={"REMOTE_ADDR": "10.0.0.7"})
    assert response.status_code == 400


def test_the_audit_records_the_user_or_the_token_that_acted(probe_app, engine, auth):
    ingest_dlq_batch(engine, "AUDIT", "e1", [StreamMessage(1, "dlq.orders.created", support.dlq_headers(), b"{}", None)])
    with engine.connect() as conn:
        entry_id = conn.execute(select(Entry.id)).scalar_one()
    token = create_token(engine, "night-shift", "operator")
    closed = probe_app.test_client().post(f"/api/entries/{entry_id}/close", json={"version": 1, "note": "known"},
                                          headers=support.bearer(token))
    assert closed.status_code == 200, closed.get_data(as_text=True)
    person = auth.client("operator")
    reopened = person.post(f"/api/entries/{entry_id}/reopen", json={"version": closed.json["entry"]["version"]},
                           headers={"X-CSRFToken": support.csrf_token(person)})
    assert reopened.status_code == 200, reopened.get_data(as_text=True)
    with engine.connect() as conn:
        actors = conn.execute(select(Action.action, Action.actor).where(Action.entry_id == entry_id)
                              .order_by(Action.id)).all()
    assert [tuple(a) for a in actors] == [("close", "token:night-shift"), ("reopen", "operator-user")]
