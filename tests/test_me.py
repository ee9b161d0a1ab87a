"""GET /api/me: who is asking, their grants and how they signed in (SPEC section 10)."""

from __future__ import annotations

from sqlalchemy import update

from dlq_dashboard import accounts
from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.db.models import LoginSession
from dlq_dashboard.runtime import runtime_of

from . import support


def test_a_password_session_answers_its_name_role_grants_and_via(offline_app):
    client = support.logged_in(offline_app, "operator")
    assert client.get("/api/me").get_json() == {"name": "operator-user", "role": "operator",
                                                "grants": [{"role": "operator", "scopes": None}], "via": "password"}


def test_a_scoped_user_and_a_scoped_token_answer_their_scopes(offline_app):
    engine = runtime_of(offline_app).engine
    accounts.create_user(engine, "team", support.PASSWORD, "operator", accounts.read_scopes(["orders.>", "east:pay.*"]))
    client = offline_app.test_client()
    support.login(client, "team", support.PASSWORD)
    assert client.get("/api/me").get_json()["grants"] == [{"role": "operator", "scopes": ["orders.>", "east:pay.*"]}]
    token = accounts.create_token(engine, "etl", "viewer", accounts.read_scopes(["orders.created"]))
    me = offline_app.test_client().get("/api/me", headers=support.bearer(token)).get_json()
    assert me == {"name": "token:etl", "role": "viewer", "grants": [{"role": "viewer", "scopes": ["orders.created"]}],
                  "via": "token"}


def test_a_single_sign_on_session_answers_oidc_as_its_row_says(offline_app):
    client = support.logged_in(offline_app, "viewer")
    with write_transaction(runtime_of(offline_app).engine) as conn:
        conn.execute(update(LoginSession.__table__).values(via="oidc"))
    assert client.get("/api/me").get_json()["via"] == "oidc"


def test_a_trusted_proxys_user_answers_proxy(make_app):
    app = make_app(trusted_header="X-Forwarded-User", trusted_proxies=("10.0.0.0/24",))
    accounts.create_user(runtime_of(app).engine, "sso@example.com", support.PASSWORD, "viewer")
    me = app.test_client().get("/api/me", headers={"X-Forwarded-User": "sso@example.com"},
                               environ_base={"REMOTE_ADDR": "10.0.0.7"}).get_json()
    assert me == {"name": "sso@example.com", "role": "viewer", "grants": [{"role": "viewer", "scopes": None}],
                  "via": "proxy"}


def test_nobody_signed_in_gets_401_json(offline_app):
    response = offline_app.test_client().get("/api/me")
    assert response.status_code == 401 and "error" in response.get_json()
    assert offline_app.test_client().get("/api/me", headers=support.bearer("dlq_wrong")).status_code == 401
