"""Logout ends one session (a row of the sessions table), a poll of an ended session never
navigates, and the page after login is never a fragment. On SQLite and PostgreSQL."""

from __future__ import annotations


import pytest
from sqlalchemy import select

from dlq_dashboard.accounts import create_user, end_sessions, get_user, set_password
from dlq_dashboard.db.models import LoginSession
from dlq_dashboard.web.auth import safe_next
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases

# Answer headers that would take the browser (or htmx) away from the page.
NAVIGATING = {"HX-Redirect", "HX-Location", "HX-Refresh", "Location"}


@pytest.fixture
def engine(probe_app):
    return runtime_of(probe_app).engine


# --- logout -------------------------------------------------------------------------------------

def test_logout_ends_this_session_only_and_the_users_other_sessions_go_on(probe_app, auth):
    laptop = auth.client("viewer")
    phone = auth.client("viewer")
    assert auth.logout(laptop).status_code == 302
    assert laptop.get("/probe/viewer").status_code == 302
    assert phone.get("/probe/viewer").status_code == 200


def test_a_copy_of_the_cookie_is_refused_after_logout_while_the_other_session_still_works(probe_app, auth):
    laptop = auth.client("viewer")
    phone = auth.client("viewer")
    copy = probe_app.test_client()
    copy.set_cookie("session", laptop.get_cookie("session").value)
    assert copy.get("/probe/viewer").status_code == 200
    auth.logout(laptop)
    assert copy.get("/probe/viewer").status_code == 302
    assert copy.get("/api/probe").status_code == 401
    assert phone.get("/probe/viewer").status_code == 200


def test_each_login_is_a_session_row_and_logout_ends_only_its_own(probe_app, engine, auth):
    laptop = auth.client("viewer")
    auth.client("viewer")
    auth.logout(laptop)
    with engine.connect() as conn:
        rows = conn.execute(select(LoginSession.user_id, LoginSession.ended_at)).all()
    user = get_user(engine, "viewer-user")
    assert [r.user_id for r in rows] == [user.id, user.id]
    assert sorted(r.ended_at is None for r in rows) == [False, True]


def test_a_new_password_and_ending_sessions_end_every_session_of_the_user(probe_app, engine, auth):
    laptop, phone = auth.client("viewer"), auth.client("viewer")
    set_password(engine, "viewer-user", support.PASSWORD)
    assert laptop.get("/probe/viewer").status_code == 302 and phone.get("/probe/viewer").status_code == 302
    laptop, phone = auth.client("viewer"), auth.client("viewer")
    assert end_sessions(engine, get_user(engine, "viewer-user").id) == 2
    assert laptop.get("/probe/viewer").status_code == 302 and phone.get("/probe/viewer").status_code == 302


# --- the cookie a page's own requests leave ------------------------------------------------------

def test_a_poll_answered_after_a_forms_answer_leaves_the_cookie_and_its_message_to_the_next_page(probe_app, auth):
    """The banner's poll (every 2 s) may be sent before a form's answer and answered after it: it
    must not put back the cookie it was sent with, or the message the form left for the next page
    (a flash, "Closed entry 1 ...") is lost. A page load still renews the cookie (the idle end)."""
    entry_id = support.dead_letter(probe_app, 1)
    operator = auth.client("operator")
    token = support.csrf_token(operator, f"/entries/{entry_id}")
    sent_before = operator.get_cookie("session").value
    closed = operator.post(f"/entries/{entry_id}/close", data={"version": "1", "note": "known", "csrf_token": token})
    assert closed.status_code in (302, 303) and support.session_cookies(closed)  # the message is in the new cookie
    poll = probe_app.test_client()
    poll.set_cookie("session", sent_before)
    for path in ("/status/banner", "/", f"/entries/{entry_id}"):
        answer = poll.get(path, headers={"HX-Request": "true"})
        assert answer.status_code == 200 and support.session_cookies(answer) == [], path
    page = operator.get(f"/entries/{entry_id}")
    assert f"Closed entry {entry_id}: it is acknowledged and no longer open." in page.get_data(as_text=True)
    assert support.session_cookies(page)  # a page load renews it
    assert support.session_cookies(operator.get("/", headers={"HX-Request": "true"})) == []


def test_no_signed_in_route_asked_by_htmx_writes_the_cookie_it_was_sent_with(probe_app, auth):
    """The class of the poll above: whatever a page asks by itself (any route of the pages, GET,
    and the editor's check, a POST) leaves the cookie alone unless it changed the session."""
    entry_id = support.dead_letter(probe_app, 1)
    client = auth.client("admin")
    token = support.csrf_token(client, "/")
    checked = 0
    for rule, path in support.signed_in_routes(probe_app, entry_id):
        if rule.rule.startswith("/api/") or "GET" not in rule.methods:
            continue
        answer = client.get(path, headers={"HX-Request": "true"})
        assert support.session_cookies(answer) == [], (path, answer.status_code)
        checked += 1
    assert checked > 20
    check = client.post(f"/entries/{entry_id}/validate", data={"payload": "{}", "csrf_token": token},
                        headers={"HX-Request": "true", "X-CSRFToken": token})
    assert check.status_code == 200 and support.session_cookies(check) == []


# --- htmx requests of an ended session ---------------------------------------------------------

def test_a_poll_of_an_ended_session_gets_401_with_a_sentence_and_nothing_that_navigates(probe_app, auth):
    client = auth.client("viewer")
    auth.logout(client)
    for path in ("/status/banner", "/summary", "/entries/new?after=1", "/jobs", "/jobs/1", "/probe/viewer"):
        response = client.get(path, headers={"HX-Request": "true"})
        assert response.status_code == 401, path
        assert "You were signed out" in response.get_data(as_text=True)
        assert not NAVIGATING & set(response.headers.keys()), path


def test_an_htmx_post_of_an_ended_session_gets_401_signed_out_not_a_csrf_refusal(probe_app, auth):
    client = auth.client("operator")
    token = support.csrf_token(client, "/")
    auth.logout(client)
    response = client.post("/entries/1/validate", data={"payload": "{}", "csrf_token": token},
                           headers={"HX-Request": "true", "X-CSRFToken": token})
    assert response.status_code == 401 and "You were signed out" in response.get_data(as_text=True)


def test_a_form_posted_after_the_session_ended_says_so_and_signs_in_back_to_its_page(probe_app, auth):
    client = auth.client("operator")
    token = support.csrf_token(client, "/")
    auth.logout(client)
    response = client.post("/entries/1/republish", data={"version": "1", "csrf_token": token},
                           headers={"Referer": "http://localhost/entries/1/edit"})
    html = response.get_data(as_text=True)
    assert response.status_code == 401 and "You were signed out, so nothing was done" in html
    assert 'href="/login?next=/entries/1/edit"' in html


def test_a_signed_in_form_without_its_csrf_token_is_still_refused(probe_app, auth):
    client = auth.client("operator")
    response = client.post("/entries/1/republish", data={"version": "1"})
    assert response.status_code == 400 and "CSRF" in response.get_data(as_text=True)


def test_every_route_asked_by_htmx_after_the_session_ended_answers_401_and_never_navigates(probe_app, auth):
    client = auth.client("admin")
    token = support.csrf_token(client, "/")
    auth.logout(client)
    checked = 0
    for rule, path in support.signed_in_routes(probe_app):
        if rule.rule.startswith("/api/"):
            continue
        for method in sorted(rule.methods & {"GET", "POST"}):
            response = client.open(path, method=method, data={"csrf_token": token},
                                   headers={"HX-Request": "true", "X-CSRFToken": token})
            assert response.status_code == 401, (method, path, response.status_code)
            assert "You were signed out" in response.get_data(as_text=True), (method, path)
            assert not NAVIGATING & set(response.headers.keys()), (method, path)
            checked += 1
    assert checked > 20


# --- the page after login ----------------------------------------------------------------------

def test_signing_in_with_next_naming_the_banner_fragment_lands_on_the_list(probe_app, engine):
    create_user(engine, "erin", support.PASSWORD, "viewer")
    client = probe_app.test_client()
    response = client.post("/login?next=/status/banner", data={
        "username": "erin", "password": support.PASSWORD, "csrf_token": support.csrf_token(client)})
    assert response.status_code == 302 and response.location == "/"


def test_a_fragment_opened_without_a_session_is_not_named_in_the_login_link(probe_app):
    client = probe_app.test_client()
    for path in ("/status/banner", "/summary", "/entries/new?after=3", "/audit/jobs/1/items"):
        response = client.get(path)
        assert response.status_code == 302 and response.location == "/login?next=/", path


@pytest.mark.parametrize("target", ["/status/banner", "/summary?status=open", "/entries/new?after=1",
                                    "/audit/jobs/3/items", "/api/entries", "/healthz", "/login", "/logout",
                                    "/entries/1/validate", "/no/such/page"])
def test_the_page_after_login_is_never_a_fragment_json_a_post_target_or_unknown(probe_app, target):
    with probe_app.test_request_context():
        assert safe_next(target) == "/"


@pytest.mark.parametrize("target", ["/", "/entries/4?tab=history", "/entries/4/edit", "/jobs/2?state=failed",
                                    "/groups?subject=orders.created", "/audit", "/views"])
def test_the_page_after_login_may_be_any_page(probe_app, target):
    with probe_app.test_request_context():
        assert safe_next(target) == target
