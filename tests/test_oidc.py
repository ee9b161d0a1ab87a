"""Single sign-on against a real OpenID Connect provider (node-oidc-provider, tests/oidc/): the
flow, the groups' grants read at every sign-in, every failure on the way back ending on the
login page with one sentence and no session, and RP-initiated logout."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qs, urlsplit

import pytest
from flask import jsonify
from sqlalchemy import func, select, update

from dlq_dashboard.accounts import AccountError, create_token, create_user, set_disabled
from dlq_dashboard.db.models import Action, LoginSession, User
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import Grant, Scope, grants_from_json
from dlq_dashboard.sign_in import parse_rules
from dlq_dashboard.times import utcnow
from dlq_dashboard.web import oidc

from . import support

ALICE = {"email": "alice@example.com", "email_verified": True, "groups": ["team-orders", "staff"]}
ROLES = "dlq-admins=admin; team-orders=operator:orders.>,billing.>; *=viewer"


def add_grants_probe(app):
    """/probe/grants: the grants, role and name of whoever asks."""
    from dlq_dashboard.web.auth import current_identity, requires

    @requires("viewer")
    def grants():
        identity = current_identity()
        return jsonify(name=identity.name, role=identity.role, grants=[g.to_dict() for g in identity.grants or ()])

    app.add_url_rule("/probe/grants", "probe_grants", grants)
    return app


ACCOUNTS = {"alice": ALICE, "bob": {"email": "bob@example.com", "groups": ["other"]},
            "root": {"email": "root@example.com", "groups": ["dlq-admins"]}}


@pytest.fixture
def idp(identity_provider):
    return identity_provider(accounts=ACCOUNTS)


@pytest.fixture
def own_idp(identity_provider):
    """A provider of this test alone (it is stopped, or never started)."""
    return identity_provider(shared=False, accounts=ACCOUNTS)


@pytest.fixture
def sso_app(idp, make_app):
    app = add_grants_probe(make_app(**idp.settings(roles=ROLES)))
    idp.start()
    return app


def sessions(app) -> list:
    with runtime_of(app).engine.connect() as conn:
        return conn.execute(select(LoginSession.__table__)).all()


def user_rows(app) -> list:
    with runtime_of(app).engine.connect() as conn:
        return conn.execute(select(User.__table__).where(User.via == "oidc")).all()


#: The sentences of a provider that cannot be reached or is not set up right: the login page's, as a 503.
PROVIDER_AWAY = (oidc.UNREACHABLE, oidc.UNAVAILABLE, oidc.NOT_ANSWERING.partition("{")[0], oidc.MISCONFIGURED)


def refused_with(answer, sentence: str, app) -> None:
    """The answer is the login page with ``sentence``, and no session was made: a 503 while the
    provider cannot be reached (a 401 said the caller's credentials were wrong), else no 5xx."""
    html = answer.get_data(as_text=True)
    if sentence.startswith(PROVIDER_AWAY):
        assert answer.status_code == 503, (answer.status_code, html[:300])
    else:
        assert answer.status_code < 500 and answer.status_code != 302, (answer.status_code, html[:300])
    assert f'<p class="error" role="alert">{sentence.replace(chr(39), "&#39;")}</p>' in html, html
    assert sessions(app) == []


# --- signing in --------------------------------------------------------------------------------

@pytest.mark.both_databases
def test_a_member_of_a_group_signs_in_and_holds_the_grants_of_every_rule_that_names_a_group_of_theirs(
        database_url, sso_app, idp):
    client = sso_app.test_client()
    answer = idp.sign_in(client, "alice")
    assert answer.status_code == 302 and answer.headers["Location"] == "/"
    me = client.get("/probe/grants").get_json()
    assert me == {"name": "alice@example.com", "role": "operator", "grants": [
        {"role": "operator", "scopes": ["billing.>", "orders.>"]}, {"role": "viewer", "scopes": None}]}

    [user] = user_rows(sso_app)
    assert (user.name, user.via, user.oidc_subject, user.role) == (
        "alice@example.com", "oidc", f"{idp.issuer} alice", "operator")
    assert user.last_sign_in_at is not None and user.scopes == '["billing.>", "orders.>"]'
    [row] = sessions(sso_app)
    assert row.via == "oidc" and row.id_token.count(".") == 2
    assert grants_from_json(row.grants) == (Grant("operator", (Scope("billing.>"), Scope("orders.>"))),
                                            Grant("viewer"))
    assert timedelta(hours=11, minutes=59) < row.expires_at - row.created_at <= timedelta(hours=12)


def test_the_flow_is_a_code_flow_with_pkce_s256_state_and_nonce(sso_app):
    answer = sso_app.test_client().get("/login/oidc")
    query = parse_qs(urlsplit(answer.headers["Location"]).query)
    assert query["response_type"] == ["code"] and query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) == 43 and query["state"][0] and query["nonce"][0]
    assert query["redirect_uri"] == ["http://localhost/login/oidc/callback"]
    assert query["scope"] == ["openid email profile groups"]


def test_the_login_page_offers_the_provider_beside_the_password_form(sso_app):
    html = sso_app.test_client().get("/login?next=/groups").get_data(as_text=True)
    assert '<a class="button" id="sso" href="/login/oidc?next=/groups">Sign in with Test IdP</a>' in html
    assert 'name="password"' in html


def test_after_signing_in_the_browser_goes_where_it_was_going(sso_app, idp):
    client = sso_app.test_client()
    answer = idp.sign_in(client, "alice", start="/login/oidc?next=/groups")
    assert answer.headers["Location"] == "/groups"
    # An address of another site is not followed.
    client = sso_app.test_client()
    assert idp.sign_in(client, "alice", start="/login/oidc?next=//evil.example").headers["Location"] == "/"


@pytest.mark.both_databases
def test_groups_are_read_at_every_sign_in_so_leaving_a_group_leaves_its_access(database_url, sso_app, idp):
    client = sso_app.test_client()
    idp.sign_in(client, "alice")
    assert client.get("/probe/grants").get_json()["role"] == "operator"
    idp.set_account("alice", email="alice@example.com", groups=["staff"])
    later = sso_app.test_client()
    idp.sign_in(later, "alice")
    assert later.get("/probe/grants").get_json()["grants"] == [{"role": "viewer", "scopes": None}]
    [user] = user_rows(sso_app)
    assert user.role == "viewer" and user.scopes is None  # the same row, brought up to date
    # Joining the admins' group gives an admin grant, never scoped.
    idp.set_account("alice", email="alice@example.com", groups=["dlq-admins", "team-orders"])
    third = sso_app.test_client()
    idp.sign_in(third, "alice")
    assert third.get("/probe/grants").get_json()["role"] == "admin"
    # Each change of the user is in the audit, as the user's own doing at sign-in; a sign-in
    # that changes nothing adds nothing.
    idp.sign_in(sso_app.test_client(), "alice")
    with runtime_of(sso_app).engine.connect() as conn:
        records = conn.execute(select(Action.action, Action.actor, Action.note).order_by(Action.id)).all()
    name = user.name
    assert [(r.action, r.actor) for r in records] == [("user_create", name), ("user_grant", name), ("user_grant", name)]
    assert records[0].note.startswith(f"{name}: operator") and records[0].note.endswith("(at their first single sign-on)")
    assert records[1].note.startswith(f"{name}: viewer over every subject (was operator")
    # Every grant the sign-in gave (in the order of ROLES' rules), not only the highest.
    assert records[2].note == (f"{name}: admin over every subject; operator over billing.>, orders.>; viewer over "
                               "every subject (was viewer over every subject; DLQ_OIDC_ROLES at sign-in)")


@pytest.mark.both_databases
def test_an_admin_is_shown_every_grant_of_a_users_last_sign_in_not_only_the_highest(database_url, idp, make_app):
    # mia reads billing as a viewer besides acting on orders: /admin/users and users list named
    # only the operator grant, so an admin asking who may read billing missed her.
    app = make_app(**idp.settings(roles="team-orders=operator:orders.>; team-billing-view=viewer:billing.>"))
    idp.start()
    idp.set_account("mia", email="mia@example.com", groups=["team-orders", "team-billing-view"])
    assert idp.sign_in(app.test_client(), "mia").status_code == 302
    admin = support.logged_in(app, "admin")
    listed = app.test_cli_runner()

    def shown() -> tuple[str, list[list[str]]]:
        page = admin.get("/admin/users").get_data(as_text=True)
        row = re.search(r'<tr data-user="mia@example.com">(.*?)</tr>', page, re.S).group(1)
        lines = [line.split() for line in listed.invoke(args=["users", "list"]).output.splitlines()]
        return " ".join(re.sub(r"<[^>]+>", " ", row).split()), [line[:5] for line in lines if line[0] == "mia@example.com"]

    cell, lines = shown()
    assert "operator over orders.&gt;; viewer over billing.&gt; from DLQ_OIDC_ROLES at their last sign-in (" in cell
    assert lines == [["mia@example.com", "operator", "orders.>", "oidc", "active"],
                     ["mia@example.com", "viewer", "billing.>", "oidc", "active"]]
    # The grants are read again at each sign-in: out of the billing group, out of the list.
    idp.set_account("mia", email="mia@example.com", groups=["team-orders"])
    idp.sign_in(app.test_client(), "mia")
    cell, lines = shown()
    assert "operator over orders.&gt; from DLQ_OIDC_ROLES" in cell and "billing" not in cell
    assert lines == [["mia@example.com", "operator", "orders.>", "oidc", "active"]]
    # ...and the audit says so, though her highest grant stayed what it was.
    with runtime_of(app).engine.connect() as conn:
        said = conn.execute(select(Action.note).where(Action.action.in_(("user_create", "user_grant")))
                            .order_by(Action.id)).scalars().all()
    assert said[-2:] == ["mia@example.com: operator over orders.>; viewer over billing.> (at their first single sign-on)",
                         "mia@example.com: operator over orders.> (was operator over orders.>; viewer over billing.>; "
                         "DLQ_OIDC_ROLES at sign-in)"]
    # A local user is shown as before: one role over their scopes.
    assert [line.split()[:3] for line in listed.invoke(args=["users", "list"]).output.splitlines()
            if line.startswith("admin-user")] == [["admin-user", "admin", "all"]]


def test_a_user_in_no_group_a_rule_names_may_not_use_the_dashboard(idp, make_app):
    app = make_app(**idp.settings(roles="team-orders=operator:orders.>"))
    idp.start()
    refused_with(idp.sign_in(app.test_client(), "bob"), oidc.NO_GRANT, app)
    assert user_rows(app) == []


def test_without_rules_nobody_may_sign_in(idp, make_app):
    app = make_app(**idp.settings(roles=None))
    idp.start()
    refused_with(idp.sign_in(app.test_client(), "alice"), oidc.NO_GRANT, app)


def test_the_groups_claim_is_found_by_a_dotted_path_in_the_id_token(identity_provider, make_app):
    # Keycloak's realm roles; this provider puts them in the ID token itself.
    idp = identity_provider(accounts={"kc": {"preferred_username": "kc-user",
                                             "realm_access": {"roles": ["dlq-ops"]}}},
                            conform_id_token_claims=False)
    app = add_grants_probe(make_app(**idp.settings(roles="dlq-ops=operator", oidc_groups_claim="realm_access.roles")))
    idp.start()
    client = app.test_client()
    idp.sign_in(client, "kc")
    # No e-mail: the name is preferred_username.
    assert client.get("/probe/grants").get_json() == {"name": "kc-user", "role": "operator",
                                                     "grants": [{"role": "operator", "scopes": None}]}


def test_a_group_given_as_one_string_counts_and_the_name_falls_back_to_sub(identity_provider, make_app):
    idp = identity_provider(accounts={"u-1234": {"groups": "team-orders"}})
    app = add_grants_probe(make_app(**idp.settings(roles="team-orders=viewer:orders.>")))
    idp.start()
    client = app.test_client()
    idp.sign_in(client, "u-1234")
    assert client.get("/probe/grants").get_json() == {"name": "u-1234", "role": "viewer",
                                                     "grants": [{"role": "viewer", "scopes": ["orders.>"]}]}


def test_a_public_client_signs_in_with_pkce_alone(identity_provider, make_app):
    idp = identity_provider(accounts={"alice": ALICE}, public=True)
    app = make_app(**idp.settings(roles=ROLES))
    assert app.extensions[oidc.EXTENSION].client.client_secret is None
    idp.start()
    client = app.test_client()
    assert idp.sign_in(client, "alice").status_code == 302
    assert client.get("/").status_code == 200


@pytest.mark.parametrize("seconds", [30, 60])
def test_an_access_token_that_lives_a_minute_or_less_still_reads_the_userinfo(identity_provider, make_app, seconds):
    # This provider puts the e-mail and the groups in the userinfo answer only, which is read with
    # the access token at once; Authlib took one under its 60 s refresh margin for expired, a 500.
    idp = identity_provider(accounts=ACCOUNTS, ttl={"AccessToken": seconds})
    app = add_grants_probe(make_app(**idp.settings(roles=ROLES)))
    idp.start()
    client = app.test_client()
    assert idp.sign_in(client, "alice").status_code == 302
    assert client.get("/probe/grants").get_json()["name"] == "alice@example.com"


def test_signing_in_again_is_silent_while_the_providers_session_lasts(sso_app, idp):
    idp.sign_in(sso_app.test_client(), "alice")
    again = sso_app.test_client()
    # No login form this time (login=None would fail if the provider showed one).
    assert idp.sign_in(again, None).status_code == 302
    assert len(sessions(sso_app)) == 2


# --- what else the account must be ---------------------------------------------------------------

def test_a_name_a_local_user_holds_is_not_taken_over(sso_app, idp):
    create_user(runtime_of(sso_app).engine, "alice@example.com", support.PASSWORD, "admin")
    answer = idp.sign_in(sso_app.test_client(), "alice")
    refused_with(answer, oidc.ACCOUNT_REFUSED.format(
        reason="the name 'alice@example.com' belongs to another user of this dashboard"), sso_app)


def test_a_name_differing_from_a_local_users_only_in_case_is_not_taken(sso_app, idp):
    create_user(runtime_of(sso_app).engine, "Alice@Example.com", support.PASSWORD, "admin")
    answer = idp.sign_in(sso_app.test_client(), "alice")
    refused_with(answer, oidc.ACCOUNT_REFUSED.format(
        reason="the name 'alice@example.com' belongs to another user of this dashboard"), sso_app)


def test_a_local_user_named_as_a_single_sign_on_user_in_another_case_is_not_made_and_locks_nobody_out(sso_app, idp):
    engine = runtime_of(sso_app).engine
    assert idp.sign_in(sso_app.test_client(), "alice").status_code == 302
    with pytest.raises(AccountError, match="'ALICE@example.com' is taken: user 'alice@example.com' holds it"):
        create_user(engine, "ALICE@example.com", support.PASSWORD, "viewer")
    # A user so named before the dashboard refused it (revision 0026 keeps them) locks Alice out
    # no more: she holds her name since before them.
    with engine.begin() as conn:
        conn.execute(User.__table__.insert().values(
            name="Alice@Example.com", name_key="alice@example.com:99", password_hash="x", role="viewer",
            disabled=False, created_at=utcnow(), via="password"))
    again = idp.sign_in(sso_app.test_client(), "alice")
    assert again.status_code == 302, again.get_data(as_text=True)
    assert [u.name for u in user_rows(sso_app)] == ["alice@example.com"]


def test_a_name_the_dashboards_own_work_has_in_the_audit_ends_on_the_login_page(identity_provider, make_app):
    # No e-mail: the name is preferred_username, the name the audit gives the first admin's maker.
    idp = identity_provider(accounts={"svc-1": {"preferred_username": "dashboard", "groups": ["staff"]}})
    app = make_app(**idp.settings(roles=ROLES))
    idp.start()
    refused_with(idp.sign_in(app.test_client(), "svc-1"), oidc.ACCOUNT_REFUSED.format(
        reason="user name 'dashboard' is reserved, in any case, for the dashboard's own work in the audit"), app)
    assert user_rows(app) == []


def test_a_renamed_user_takes_their_views_and_groups_and_the_next_holder_of_the_name_finds_none(sso_app, idp):
    from dlq_dashboard.db.models import FailureGroup, SavedView
    from dlq_dashboard.entries.saved_views import save_view, views_for

    engine = runtime_of(sso_app).engine
    idp.sign_in(sso_app.test_client(), "alice")
    save_view(engine, "alice@example.com", "my incident", "list", "status=open", utcnow())
    support.dead_letter(sso_app, 1, "orders.created")
    with engine.begin() as conn:
        conn.execute(update(FailureGroup).values(state="investigating", assignee="alice@example.com"))
    # The provider gives Alice another address, then the old one to someone else.
    idp.set_account("alice", **{**ALICE, "email": "alice.smith@example.com"})
    assert idp.sign_in(sso_app.test_client(), "alice").status_code == 302
    idp.set_account("bob", email="alice@example.com", email_verified=True, groups=["team-orders"])
    idp.browser.cookies.clear()  # another person at the provider
    bobs = idp.sign_in(sso_app.test_client(), "bob")
    assert bobs.status_code == 302, bobs.get_data(as_text=True)
    assert sorted(u.name for u in user_rows(sso_app)) == ["alice.smith@example.com", "alice@example.com"]
    assert [v.name for v in views_for(engine, "alice.smith@example.com")] == ["my incident"]
    assert views_for(engine, "alice@example.com") == []
    with engine.connect() as conn:
        assert conn.execute(select(FailureGroup.assignee)).scalars().all() == ["alice.smith@example.com"]
        assert conn.execute(select(func.count()).select_from(SavedView)).scalar() == 1
        renamed = conn.execute(select(Action.note).where(Action.action == "user_rename")).scalars().all()
    assert renamed == ["alice@example.com is now alice.smith@example.com (the identity provider's name; 1 saved "
                       "views and 1 assigned groups follow)"]


def test_a_disabled_single_sign_on_user_cannot_sign_in(sso_app, idp):
    idp.sign_in(sso_app.test_client(), "alice")
    set_disabled(runtime_of(sso_app).engine, "alice@example.com", True)
    with runtime_of(sso_app).engine.begin() as conn:
        conn.execute(LoginSession.__table__.delete())
    refused_with(idp.sign_in(sso_app.test_client(), "alice"),
                 oidc.ACCOUNT_REFUSED.format(reason="this account is disabled on this dashboard"), sso_app)


def test_a_single_sign_on_user_has_no_password(sso_app, idp):
    idp.sign_in(sso_app.test_client(), "alice")
    for password in ("", "!single-sign-on", support.PASSWORD):
        assert support.login(sso_app.test_client(), "alice@example.com", password).status_code == 401


def test_entra_ids_group_overage_counts_as_no_groups_and_the_page_says_why(identity_provider, make_app):
    # Over 200 groups, Entra ID sends a pointer to them (_claim_names) instead of the list.
    overage = {"email": "many@example.com", "_claim_names": {"groups": "src1"},
               "_claim_sources": {"src1": {"endpoint": "https://graph.microsoft.com/v1.0/users/x/getMemberObjects"}}}
    idp = identity_provider(accounts={"many": overage}, claims={"groups": ["groups", "_claim_names", "_claim_sources"]},
                            conform_id_token_claims=False)
    app = add_grants_probe(make_app(**idp.settings(roles="team-orders=operator")))
    idp.start()
    refused_with(idp.sign_in(app.test_client(), "many"), oidc.TOO_MANY_GROUPS, app)


def test_an_overage_user_still_holds_what_every_signed_in_user_holds(identity_provider, make_app):
    idp = identity_provider(accounts={"many": {"email": "many@example.com", "hasgroups": True}},
                            claims={"groups": ["groups", "hasgroups"]}, conform_id_token_claims=False)
    app = add_grants_probe(make_app(**idp.settings(roles="team-orders=operator; *=viewer")))
    idp.start()
    client = app.test_client()
    idp.sign_in(client, "many")
    assert client.get("/probe/grants").get_json()["grants"] == [{"role": "viewer", "scopes": None}]


# --- every failure on the way back ---------------------------------------------------------------

def test_a_tampered_state_ends_on_the_login_page(sso_app, idp):
    client = sso_app.test_client()
    path = idp.callback_path(client, "alice")
    tampered = path.replace("state=", "state=x")
    refused_with(client.get(tampered), oidc.BAD_STATE, sso_app)
    # Nor does the real one work in another browser (the state lives in this one's session).
    refused_with(sso_app.test_client().get(path), oidc.BAD_STATE, sso_app)


def test_a_missing_state_ends_on_the_login_page(sso_app, idp):
    client = sso_app.test_client()
    path = idp.callback_path(client, "alice")
    query = parse_qs(urlsplit(path).query)
    refused_with(client.get(f"/login/oidc/callback?code={query['code'][0]}"), oidc.BAD_STATE, sso_app)
    refused_with(client.get("/login/oidc/callback"), oidc.BAD_STATE, sso_app)


def test_a_code_used_twice_ends_on_the_login_page(sso_app, idp):
    first = sso_app.test_client()
    path = idp.callback_path(first, "alice")
    # A copy of the browser's cookie as it was, so the state checks out the second time too.
    second = sso_app.test_client()
    second.set_cookie("session", first.get_cookie("session").value, domain="localhost")
    assert first.get(path).status_code == 302
    with runtime_of(sso_app).engine.begin() as conn:
        conn.execute(LoginSession.__table__.delete())
    refused_with(second.get(path), oidc.CODE_REFUSED, sso_app)


def started(client) -> str:
    """Start a sign-in in ``client``'s browser; its state, as the provider would send it back."""
    answer = client.get("/login/oidc")
    return parse_qs(urlsplit(answer.headers["Location"]).query)["state"][0]


def test_an_error_from_the_provider_ends_on_the_login_page(sso_app, idp):
    client = sso_app.test_client()
    state = started(client)
    refused_with(client.get(f"/login/oidc/callback?error=access_denied&state={state}"),
                 oidc.PROVIDER_SAID_NO, sso_app)


def test_a_browser_keeps_its_newest_three_sign_ins_begun_and_its_cookie_stays_small(sso_app, idp):
    client = sso_app.test_client()
    for _ in range(40):  # begun and left at the provider
        started(client)
    # Each was about 180 bytes of the cookie; a browser refuses one over 4 KB (test_oidc_browser.py).
    assert len(client.get_cookie("session").value) < 1500
    flows = []
    for _ in range(4):
        # Each in a provider session of its own: within one, this provider refuses the code of an
        # earlier authorization once it has given a later one (invalid_grant), whatever the dashboard keeps.
        idp.browser.cookies.clear()
        flows.append(idp.callback_path(client, "alice"))
    refused_with(client.get(flows[0]), oidc.BAD_STATE, sso_app)  # the fourth newest is dropped
    assert client.get(flows[1]).status_code == 302  # the third newest still finishes: two tabs do


@pytest.mark.parametrize("more", ["&state=x&code=b", "&code=b", "&state={state}", "&session_state=%FF"])
def test_an_answer_not_well_formed_ends_on_the_login_page_without_its_values(sso_app, idp, more):
    # Refused before the callback runs (a parameter given twice, text that is not UTF-8), it was
    # the generic 400 page, which repeated the state given.
    client = sso_app.test_client()
    path = idp.callback_path(client, "alice")
    state = parse_qs(urlsplit(path).query)["state"][0]
    answer = client.get(path + more.format(state=state))
    refused_with(answer, oidc.NOT_WELL_FORMED, sso_app)
    assert answer.status_code == 400 and state not in answer.get_data(as_text=True)
    # Nothing of the flow was used: the provider's answer as it came still finishes it.
    assert client.get(path).status_code == 302


def test_a_start_given_its_next_twice_ends_on_the_login_page(sso_app):
    answer = sso_app.test_client().get("/login/oidc?next=/groups&next=/jobs")
    assert answer.status_code == 400 and 'id="sso"' in answer.get_data(as_text=True)
    assert "next is given 2 times (&#39;/groups&#39;, &#39;/jobs&#39;): give it once" in answer.get_data(as_text=True)


@pytest.mark.parametrize("more", ["", "&session_state=abc"])
def test_a_state_sent_back_without_a_code_ends_on_the_login_page(sso_app, idp, more):
    # Authlib refuses it itself (missing_code), before asking the provider: an error of its own
    # OAuth 2 classes, not of the client's, which was a 500.
    client = sso_app.test_client()
    state = started(client)
    refused_with(client.get(f"/login/oidc/callback?state={state}{more}"), oidc.NO_CODE, sso_app)
    # The state is used up: the same answer again is one this browser did not start.
    refused_with(client.get(f"/login/oidc/callback?state={state}{more}"), oidc.BAD_STATE, sso_app)


@pytest.mark.parametrize("tamper,sentence", [
    ({"nonce": "another sign-in's nonce"}, oidc.WRONG_NONCE),
    ({"iss": "http://127.0.0.1:1"}, oidc.WRONG_ISSUER),
    ({"aud": "another-application"}, oidc.WRONG_AUDIENCE),
    ({"exp_offset": -3600}, oidc.EXPIRED),
    ({"bad_signature": True}, oidc.BAD_SIGNATURE),
])
def test_an_id_token_that_fails_its_checks_ends_on_the_login_page(sso_app, idp, tamper, sentence):
    idp.tamper(**tamper)
    refused_with(idp.sign_in(sso_app.test_client(), "alice"), sentence, sso_app)
    assert user_rows(sso_app) == []
    idp.tamper()
    assert idp.sign_in(sso_app.test_client(), "alice").status_code == 302  # the same flow, untouched


def test_a_provider_that_cannot_be_reached_at_the_callback_ends_on_the_login_page(own_idp, make_app):
    app = make_app(**own_idp.settings(roles=ROLES))
    own_idp.start()
    client = app.test_client()
    path = own_idp.callback_path(client, "alice")
    own_idp.stop()
    refused_with(client.get(path), oidc.UNREACHABLE, app)


def test_a_provider_that_cannot_be_reached_at_start_does_not_stop_the_dashboard(own_idp, make_app):
    # The provider is never started: its port is closed.
    app = make_app(**own_idp.settings(roles=ROLES))
    client = app.test_client()
    html = client.get("/login").get_data(as_text=True)
    assert oidc.UNAVAILABLE in html and 'id="sso"' not in html
    answer = client.get("/login/oidc")
    refused_with(answer, oidc.UNAVAILABLE, app)
    assert answer.get_data(as_text=True).count(oidc.UNAVAILABLE) == 1  # the error alone, not the notice too
    # The password form still works.
    assert support.logged_in(app, "viewer").get("/").status_code == 200


def not_answering(issuer: str, local_login: bool = True) -> str:
    return oidc.NOT_ANSWERING.format(issuer=issuer) + (oidc.WITH_PASSWORD if local_login else "") + "."


@pytest.mark.parametrize("local_login", [True, False], ids=["passwords", "no passwords"])
def test_a_provider_down_since_its_discovery_is_asked_before_the_browser_is_sent_there(own_idp, make_app,
                                                                                       local_login):
    # Before, the button led to the provider's address (its discovery document kept an hour),
    # and the browser showed its own connection error page.
    app = make_app(**own_idp.settings(roles=ROLES), local_login=local_login)
    own_idp.start()
    client = app.test_client()
    assert 'id="sso"' in client.get("/login").get_data(as_text=True)  # its discovery document kept
    own_idp.stop()
    refused_with(client.get("/login/oidc"), not_answering(own_idp.issuer, local_login), app)
    own_idp.start()
    assert own_idp.sign_in(client, "alice").status_code == 302


def test_a_provider_that_does_not_answer_in_time_is_not_where_the_browser_is_sent(own_idp, make_app):
    app = make_app(**own_idp.settings(roles=ROLES))
    own_idp.start()
    client = app.test_client()
    assert 'id="sso"' in client.get("/login").get_data(as_text=True)
    with support.stopped(own_idp.process.pid):  # its port open, nothing answers
        refused_with(client.get("/login/oidc"), not_answering(own_idp.issuer), app)
    assert own_idp.sign_in(client, "alice").status_code == 302


def test_a_discovery_document_naming_another_issuer_is_not_used_and_the_page_says_it_is_set_up_wrong(
        idp, make_app, caplog):
    """It said the provider could not be reached and to try again later (twice on /login/oidc's
    page), though it answered and trying again could not help: only the log told the cause."""
    app = make_app(**idp.settings(roles=ROLES, oidc_issuer=idp.issuer.replace("127.0.0.1", "localhost")))
    idp.start()
    client = app.test_client()
    for _ in range(2):  # the second within RETRY_AFTER, from the failure kept
        html = client.get("/login").get_data(as_text=True)
        assert oidc.MISCONFIGURED in html and oidc.UNAVAILABLE not in html and 'id="sso"' not in html
        answer = client.get("/login/oidc")
        refused_with(answer, oidc.MISCONFIGURED, app)
        assert answer.get_data(as_text=True).count(oidc.MISCONFIGURED) == 1
    assert f"names the issuer '{idp.issuer}', not DLQ_OIDC_ISSUER" in caplog.text


# --- password sign-in turned off -----------------------------------------------------------------

def test_with_local_login_off_the_page_offers_the_provider_alone_and_refuses_passwords(idp, make_app):
    app = make_app(**idp.settings(roles=ROLES, local_login=False))
    idp.start()
    support.ensure_user(app, "local", "admin")
    client = app.test_client()
    html = client.get("/login").get_data(as_text=True)
    assert 'id="sso"' in html and 'name="password"' not in html
    token = re.search(r'name="csrf-token" content="([^"]+)"', html).group(1)
    answer = client.post("/login", data={"username": "local", "password": support.PASSWORD, "csrf_token": token})
    assert answer.status_code == 403 and "turned off" in answer.get_data(as_text=True)
    assert sessions(app) == []
    # API tokens still work.
    api = create_token(runtime_of(app).engine, "script", "viewer")
    assert client.get("/api/entries", headers=support.bearer(api)).status_code == 200
    assert idp.sign_in(client, "alice").status_code == 302


# --- sessions and logout -------------------------------------------------------------------------

def test_logout_ends_this_session_only_and_continues_to_the_providers_logout(sso_app, idp):
    client, other = sso_app.test_client(), sso_app.test_client()
    idp.sign_in(client, "alice")
    idp.sign_in(other, "alice")
    answer = client.post("/logout", data={"csrf_token": support.csrf_token(client, "/")})
    location = answer.headers["Location"]
    query = parse_qs(urlsplit(location).query)
    assert location.startswith(f"{idp.issuer}/session/end")
    assert query["post_logout_redirect_uri"] == ["http://localhost/login"]
    assert query["id_token_hint"][0] in {row.id_token for row in sessions(sso_app)}
    assert client.get("/").status_code == 302
    assert other.get("/").status_code == 200  # the other session goes on
    # The provider asks, ends its own session, and sends the browser back to /login.
    assert idp.log_out(location) == "http://localhost/login"
    # So the next sign-in shows the provider's login form again (login=None would fail).
    with pytest.raises(AssertionError, match="no form to fill|showed no form"):
        idp.sign_in(sso_app.test_client(), None)


def test_a_password_session_logs_out_to_the_login_page(sso_app):
    client = support.logged_in(sso_app, "viewer")
    answer = client.post("/logout", data={"csrf_token": support.csrf_token(client, "/")})
    assert answer.headers["Location"] == "/login"


def expire_sessions(app) -> None:
    with runtime_of(app).engine.begin() as conn:
        conn.execute(update(LoginSession.__table__).values(expires_at=utcnow() - timedelta(seconds=1)))


def cookie_expires(response) -> datetime:
    """When the session cookie an answer sets expires (its Expires, to the second)."""
    [cookie] = support.session_cookies(response)
    return parsedate_to_datetime(re.search(r"Expires=([^;]+)", cookie).group(1))


def now() -> datetime:
    return datetime.now(timezone.utc)


def test_a_single_sign_on_session_ends_after_the_session_hours(idp, make_app):
    app = make_app(**idp.settings(roles=ROLES, session_hours=0.5))
    idp.start()
    client = app.test_client()
    before = now()
    signed_in = idp.sign_in(client, "alice")
    [row] = sessions(app)
    assert row.expires_at - row.created_at == timedelta(minutes=30)
    # The cookie ends with the session, not 12 hours (the idle limit) ahead.
    assert before + timedelta(minutes=30, seconds=-1) <= cookie_expires(signed_in) <= now() + timedelta(minutes=30)
    assert client.get("/").status_code == 200
    expire_sessions(app)
    assert client.get("/").status_code == 302


def test_a_password_session_ends_after_the_session_hours_too(make_app):
    app = make_app(session_hours=2)
    client = support.logged_in(app, "viewer")
    [row] = sessions(app)
    assert row.expires_at - row.created_at == timedelta(hours=2) and row.via == "password" and row.grants is None
    assert client.get("/").status_code == 200
    expire_sessions(app)
    answer = client.get("/")
    assert answer.status_code == 302 and answer.headers["Location"].startswith("/login")


@pytest.mark.parametrize("hours, lasts", [(0.001, timedelta(seconds=3.6)), (2, timedelta(hours=2)),
                                          (24, timedelta(hours=12))])
def test_the_session_cookie_expires_when_the_session_ends_or_sooner_when_idle(make_app, hours, lasts):
    # DLQ_SESSION_HOURS=0.001 gave a cookie that said 12 hours; past 12 the idle limit decides.
    app = make_app(session_hours=hours)
    support.ensure_user(app, "vera", "viewer")
    client = app.test_client()
    support.csrf_token(client)
    before = now()
    signed_in = support.login(client, "vera", support.PASSWORD)
    assert signed_in.status_code == 302
    ends = cookie_expires(signed_in)
    assert before + lasts - timedelta(seconds=1) <= ends <= now() + lasts
    assert not [h for h in signed_in.headers.getlist("Set-Cookie") if h.startswith("remember_token=")]
    if hours >= 1:  # a page load renews an idle cookie, never past the session's end
        renewed = client.get("/")
        assert renewed.status_code == 200
        assert cookie_expires(renewed) <= (ends if hours < 12 else now() + lasts)


def test_a_session_row_without_an_end_time_ends_the_session_hours_after_it_began(make_app):
    app = make_app(session_hours=1)
    client = support.logged_in(app, "viewer")
    with runtime_of(app).engine.begin() as conn:
        conn.execute(update(LoginSession.__table__).values(expires_at=None))
    assert client.get("/").status_code == 200
    with runtime_of(app).engine.begin() as conn:
        conn.execute(update(LoginSession.__table__).values(created_at=utcnow() - timedelta(hours=1, seconds=1)))
    assert client.get("/").status_code == 302


def test_no_single_sign_on_route_answers_without_an_issuer(make_app):
    client = make_app().test_client()
    assert client.get("/login/oidc").status_code == 404
    assert client.get("/login/oidc/callback?code=x&state=y").status_code == 404
    assert 'id="sso"' not in client.get("/login").get_data(as_text=True)
    with runtime_of(client.application).engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(LoginSession)).scalar() == 0


def test_the_single_sign_on_routes_are_open_to_anyone(sso_app):
    for endpoint in ("oidc.start", "oidc.callback"):
        assert sso_app.view_functions[endpoint].required_role is None


def test_an_issuer_without_rules_is_told_in_the_log(make_app, caplog):
    make_app(oidc_issuer="http://127.0.0.1:1", oidc_client_id="dlq")
    assert "DLQ_OIDC_ROLES is not set: nobody may sign in with single sign-on" in caplog.text


def test_a_rule_scoped_to_a_source_this_dashboard_does_not_have_is_told_in_the_log(make_app, caplog):
    make_app(oidc_issuer="http://127.0.0.1:1", oidc_client_id="dlq",
             oidc_roles=parse_rules("team-orders=operator:nosuch:orders.>; *=viewer:default:orders.>"))
    assert ("DLQ_OIDC_ROLES, the rule of team-orders: scope 'nosuch:orders.>' names the source 'nosuch', which "
            "this dashboard does not have: its sources are default") in caplog.text
    assert "the rule of *" not in caplog.text


def test_the_pages_form_action_lets_the_logout_reach_the_provider_and_nowhere_else(sso_app, idp):
    policy = sso_app.test_client().get("/login").headers["Content-Security-Policy"]
    assert f"form-action 'self' {idp.issuer};" in policy


def test_the_provider_returns_to_the_public_url_where_it_is_set(idp, make_app):
    app = make_app(**idp.settings(roles=ROLES, public_url="https://dlq.example.com"))
    idp.start()
    client = app.test_client()
    query = parse_qs(urlsplit(client.get("/login/oidc").headers["Location"]).query)
    assert query["redirect_uri"] == ["https://dlq.example.com/login/oidc/callback"]
    sso = app.extensions[oidc.EXTENSION]
    with app.test_request_context("/logout"):
        query = parse_qs(urlsplit(sso.logout_url("a.b.c")).query)
    assert query == {"id_token_hint": ["a.b.c"], "post_logout_redirect_uri": ["https://dlq.example.com/login"],
                     "client_id": ["dlq-dashboard"]}
