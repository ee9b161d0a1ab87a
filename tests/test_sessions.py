"""Logout ends one session (a row of the sessions table). On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from dlq_dashboard.accounts import end_sessions, get_user, set_password
from dlq_dashboard.db.models import LoginSession

from . import support
from .test_auth import add_probes

pytestmark = pytest.mark.both_databases


@pytest.fixture
def probe_app(offline_app):
    """The offline app with the probe routes of test_auth."""
    return add_probes(offline_app)


@pytest.fixture
def engine(probe_app):
    return probe_app.extensions["dlq"].engine


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
