"""/admin/users (web/admin.py): admins only, CSRF on every form, a confirmation before each
dangerous action, every change in the database and in the audit, bad input answered with one
sentence and the values sent, names and patterns shown as text."""

from __future__ import annotations

import html
import json
import re

import pytest
from sqlalchemy import select

from dlq_dashboard import accounts
from dlq_dashboard.db.models import Action
from dlq_dashboard.runtime import runtime_of

from . import support

ADMIN = "admin-user"  # support.logged_in(app, "admin")'s name


@pytest.fixture
def engine(offline_app):
    return runtime_of(offline_app).engine


@pytest.fixture
def admin(offline_app):
    """An admin's client and a CSRF token of its session."""
    client = support.logged_in(offline_app, "admin")
    client.token = support.csrf_token(client, "/admin/users")
    return client


def post(client, path: str, htmx: bool = False, **form):
    headers = {"HX-Request": "true"} if htmx else {}
    return client.post(path, data={"csrf_token": client.token, **form}, headers=headers)


def audit(engine) -> list[tuple[str, str, dict]]:
    with engine.connect() as conn:
        return [(r.action, r.actor, json.loads(r.detail)) for r in conn.execute(select(Action.__table__)
                                                                               .order_by(Action.id))]


def text(response) -> str:
    """The page's words, without markup, one space between."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", response.get_data(as_text=True))).split())


def signed_in_as(app, name: str, role: str = "viewer", scopes=None):
    accounts.create_user(runtime_of(app).engine, name, support.PASSWORD, role, scopes)
    client = app.test_client()
    assert support.login(client, name, support.PASSWORD).status_code == 302
    return client


# --- who may ------------------------------------------------------------------------------------

ROUTES = [("get", "/admin/users"), ("post", "/admin/users"), ("post", "/admin/tokens"),
          ("post", "/admin/users/pat/grant"), ("post", "/admin/users/pat/disable"),
          ("post", "/admin/users/pat/enable"), ("post", "/admin/users/pat/end-sessions"),
          ("post", "/admin/tokens/bot/grant"), ("post", "/admin/tokens/bot/revoke"), ("get", "/api/admin/users")]


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_a_viewer_or_an_operator_gets_403_on_every_route_and_changes_nothing(offline_app, engine, role):
    accounts.create_user(engine, "pat", support.PASSWORD, "viewer")
    accounts.create_token(engine, "bot", "viewer")
    client = support.logged_in(offline_app, role)
    token = support.csrf_token(client, "/")
    before = (accounts.list_users(engine), accounts.list_tokens(engine), accounts.open_sessions(engine))
    for method, path in ROUTES:
        form = {"csrf_token": token, "confirmed": "yes", "name": "new", "role": "admin"}
        response = client.get(path) if method == "get" else client.post(path, data=form)
        assert response.status_code == 403, (method, path, response.status_code)
        assert "This needs the admin role" in text(response)
    assert (accounts.list_users(engine), accounts.list_tokens(engine), accounts.open_sessions(engine)) == before
    assert audit(engine) == []


def test_a_form_without_its_csrf_token_is_refused_and_nothing_is_made(offline_app, engine, admin):
    response = admin.post("/admin/users", data={"name": "sly", "role": "viewer"})
    assert response.status_code == 400 and "CSRF" in text(response)
    response = admin.post("/admin/users/admin-user/end-sessions", data={"confirmed": "yes", "csrf_token": "forged"})
    assert response.status_code == 400
    assert accounts.get_user(engine, "sly") is None and audit(engine) == []
    assert admin.get("/admin/users").status_code == 200  # the admin's session did not end


def test_only_an_admin_sees_the_users_link_and_the_page_lists_users_and_tokens(offline_app, engine, admin):
    accounts.create_user(engine, "quinn", support.PASSWORD, "operator", accounts.read_scopes(["orders.>"]))
    accounts.create_token(engine, "bot", "viewer", accounts.read_scopes(["pay.*"]))
    accounts.create_token(engine, "old", "viewer")
    accounts.revoke_token(engine, "old")
    page = admin.get("/admin/users")
    assert page.status_code == 200 and page.headers["Cache-Control"] == "no-store"
    words = text(page)
    assert "quinn operator" not in words  # the role is a form's choice, the scopes its value
    body = page.get_data(as_text=True)
    assert re.search(r'data-user="quinn".*?value="orders.&gt;"', body, re.S)
    assert re.search(r'data-token="bot".*?value="pay.\*"', body, re.S)
    assert re.search(r'data-user="admin-user">\s*<th scope="row">admin-user <span class="muted">\(you\)', body)
    assert "revoked" in re.search(r'data-token="old" class="disabled">.*?</tr>', body, re.S).group(0)
    # The admin signed in a moment ago: the last sign-in is a time, quinn's is "never".
    assert re.search(r'data-user="admin-user".*?<time datetime=', body, re.S)
    assert "never" in re.search(r'data-user="quinn".*?</tr>', body, re.S).group(0)


def test_get_api_admin_users_answers_what_the_page_shows_and_never_a_hash_or_a_token(offline_app, engine, admin):
    accounts.create_user(engine, "quinn", support.PASSWORD, "operator", accounts.read_scopes(["orders.>"]))
    accounts.set_disabled(engine, "quinn", True)
    bot = accounts.create_token(engine, "bot", "viewer", accounts.read_scopes(["pay.*"]))
    accounts.create_token(engine, "old", "viewer")
    accounts.revoke_token(engine, "old")
    response = admin.get("/api/admin/users")
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    body = response.get_json()
    me, quinn = body["users"]
    assert me["name"] == ADMIN and me["via"] == "password" and me["sessions"] == 1 and me["state"] == "active"
    assert me["last_sign_in_at"].endswith("Z") and me["grants"] == [{"role": "admin", "scopes": None}]
    assert quinn == {"name": "quinn", "role": "operator", "scopes": ["orders.>"],
                     "grants": [{"role": "operator", "scopes": ["orders.>"]}], "via": "password",
                     "last_sign_in_at": None, "sessions": 0, "state": "disabled"}
    assert [(t["name"], t["role"], t["scopes"], t["state"]) for t in body["tokens"]] == [
        ("bot", "viewer", ["pay.*"], "active"), ("old", "viewer", None, "revoked")]
    assert body["tokens"][1]["revoked_at"].endswith("Z") and body["tokens"][0]["revoked_at"] is None
    hashes = [row.password_hash for row in accounts_rows(engine)]
    raw = response.get_data(as_text=True)
    assert bot not in raw and "password" not in json.dumps(list(body["users"][0])) and all(h not in raw for h in hashes)
    assert offline_app.test_client().get("/api/admin/users").status_code == 401


def accounts_rows(engine):
    from dlq_dashboard.db.models import User

    with engine.connect() as conn:
        return conn.execute(select(User.__table__)).all()


def test_a_rows_buttons_and_links_name_what_they_act_on(offline_app, engine, admin):
    """/admin/users' "Save", "Disable", "End sessions" and /groups' "Open group", "Show entries"
    were read out of their row with nothing to tell one from the next."""
    accounts.create_user(engine, "quinn", support.PASSWORD, "operator")
    accounts.create_token(engine, "bot", "viewer")
    body = admin.get("/admin/users").get_data(as_text=True)
    row = re.search(r'data-user="quinn".*?</tr>', body, re.S).group(0)
    for label in ("Save", "Disable", "End sessions"):
        assert f'aria-label="{label} quinn">{label}</button>' in row
    assert 'aria-label="Revoke the token bot">Revoke</button>' in body
    support.dead_letter(offline_app, 1, Dlq_Reason="fatal", Dlq_Error="boom")
    groups = admin.get("/groups").get_data(as_text=True)
    label_id = re.search(r'id="(group-\d+-label)"', groups).group(1)
    for link in ("Open group", "Show entries"):
        assert re.search(rf'<a href="[^"]*" aria-describedby="{label_id}">{link}</a>', groups)


# --- users ------------------------------------------------------------------------------------

def test_creating_a_user_without_a_password_shows_a_made_one_once_and_it_signs_in(offline_app, engine, admin):
    response = post(admin, "/admin/users", name="rae", role="operator", scopes="orders.>, billing.*")
    assert response.status_code == 200
    password = re.search(r'<code class="secret" data-secret>([^<]+)</code>', response.get_data(as_text=True)).group(1)
    assert "Created user rae (operator over billing.*, orders.>)" in text(response)
    assert support.login(offline_app.test_client(), "rae", html.unescape(password)).status_code == 302
    assert password not in admin.get("/admin/users").get_data(as_text=True)  # shown once
    assert accounts.get_user(engine, "rae").grants[0].to_dict() == {"role": "operator",
                                                                    "scopes": ["billing.*", "orders.>"]}
    assert audit(engine) == [("user_create", ADMIN, {"user": "rae", "role": "operator",
                                                     "scopes": ["billing.*", "orders.>"]})]


def test_creating_a_user_with_a_password_shows_none(offline_app, engine, admin):
    response = post(admin, "/admin/users", name="sam", role="viewer", password="a good long password")
    assert response.status_code == 200 and "data-secret" not in response.get_data(as_text=True)
    assert accounts.verify_password(engine, "sam", "a good long password").scopes is None


@pytest.mark.parametrize("form, sentence", [
    ({"name": "tia", "role": "viewer", "scopes": "orders..x"}, "Subject pattern 'orders..x' has an empty token"),
    ({"name": "tia", "role": "admin", "scopes": "orders.>"}, "An admin is never scoped"),
    ({"name": "tia", "role": "root", "scopes": ""}, "Role 'root' is not valid"),
    ({"name": "two words", "role": "viewer", "scopes": ""}, "User name 'two words' is not valid"),
    ({"name": "tia", "role": "viewer", "password": "short"}, "The password is too short"),
    ({"name": ADMIN, "role": "viewer", "scopes": ""}, f"User '{ADMIN}' exists already"),
    ({"name": ADMIN.upper(), "role": "viewer", "scopes": ""},
     f"The name '{ADMIN.upper()}' is taken: user '{ADMIN}' holds it, and names that differ only in case are one "
     "name here."),
    ({"name": "Dashboard", "role": "viewer", "scopes": ""},
     "User name 'Dashboard' is reserved, in any case, for the dashboard's own work in the audit."),
    ({"name": "tia", "role": "operator", "scopes": " , "}, "' , ' names no subject pattern (such as orders.>)"),
])
def test_bad_input_for_a_new_user_is_one_sentence_with_the_values_kept_and_nothing_made(engine, admin, form, sentence):
    before = accounts.list_users(engine)
    response = post(admin, "/admin/users", **form)
    assert response.status_code == 400
    assert sentence in text(response)
    new_user = re.search(r'<form [^>]*id="new-user">.*?</form>', response.get_data(as_text=True), re.S).group(0)
    assert f'value="{html.escape(form["name"])}"' in new_user
    if form.get("scopes"):
        assert f'value="{html.escape(form["scopes"])}"' in new_user
    assert accounts.list_users(engine) == before and audit(engine) == []


def test_disabling_asks_first_then_ends_the_users_session_at_once(offline_app, engine, admin):
    victim = signed_in_as(offline_app, "uma")
    asked = post(admin, "/admin/users/uma/disable")
    assert asked.status_code == 200
    assert "Disable uma? Their one session will end at once" in text(asked)
    assert not accounts.get_user(engine, "uma").disabled and victim.get("/").status_code == 200
    done = post(admin, "/admin/users/uma/disable", confirmed="yes")
    assert done.status_code == 303 and done.location.endswith("/admin/users")
    assert "Disabled uma; 1 session ended." in text(admin.get("/admin/users"))
    assert accounts.get_user(engine, "uma").disabled
    assert victim.get("/").status_code == 302  # signed out at once
    assert support.login(offline_app.test_client(), "uma", support.PASSWORD).status_code == 401
    assert audit(engine) == [("user_disable", ADMIN, {"user": "uma", "sessions_ended": 1})]
    row = re.search(r"<tr>\s*<td class=.when.><time[^>]*>[^<]*</time></td>\s*<td class=.who.>admin-user</td>\s*<td class=.what.>user_disable: user uma",
                    admin.get("/audit?action=user_disable").get_data(as_text=True))
    assert row, "the audit page names who did what to whom"
    assert "uma: disabled, 1 session ended" in text(admin.get("/audit"))
    assert post(admin, "/admin/users/uma/enable").status_code == 303
    assert support.login(offline_app.test_client(), "uma", support.PASSWORD).status_code == 302
    assert audit(engine)[-1] == ("user_enable", ADMIN, {"user": "uma", "sessions_ended": 0})


def test_ending_sessions_asks_first_then_signs_the_user_out_everywhere(offline_app, engine, admin):
    laptop, phone = signed_in_as(offline_app, "val"), offline_app.test_client()
    support.login(phone, "val", support.PASSWORD)
    asked = post(admin, "/admin/users/val/end-sessions")
    assert "End every session of val? Their 2 sessions will end at once" in text(asked)
    assert laptop.get("/").status_code == 200
    assert post(admin, "/admin/users/val/end-sessions", confirmed="yes").status_code == 303
    assert laptop.get("/").status_code == 302 and phone.get("/").status_code == 302
    assert not accounts.get_user(engine, "val").disabled
    assert audit(engine) == [("user_end_sessions", ADMIN, {"user": "val", "sessions_ended": 2})]


def test_a_role_and_scopes_change_at_once_and_to_admin_only_once_confirmed(offline_app, engine, admin):
    client = signed_in_as(offline_app, "wes", "viewer")
    done = post(admin, "/admin/users/wes/grant", role="operator", scopes="orders.> billing.*")
    assert done.status_code == 303
    me = client.get("/api/me").get_json()  # the same session, from its next request
    assert me["role"] == "operator" and me["grants"] == [{"role": "operator", "scopes": ["billing.*", "orders.>"]}]
    asked = post(admin, "/admin/users/wes/grant", role="admin", scopes="")
    assert "Make wes admin over every subject? They may then manage every user and token" in text(asked)
    assert accounts.get_user(engine, "wes").role == "operator"
    confirm = re.search(r'<form method="post" action="/admin/users/wes/grant"[^>]*data-confirm>.*?</form>',
                        asked.get_data(as_text=True), re.S).group(0)
    assert 'name="role" value="admin"' in confirm and 'name="confirmed" value="yes"' in confirm
    assert post(admin, "/admin/users/wes/grant", role="admin", scopes="", confirmed="yes").status_code == 303
    assert accounts.get_user(engine, "wes").role == "admin"
    assert [(a, d["role"], d["was_role"]) for a, _, d in audit(engine)] == [("user_grant", "operator", "viewer"),
                                                                             ("user_grant", "admin", "operator")]


def test_a_bad_pattern_for_a_row_keeps_what_was_typed_in_that_row(offline_app, engine, admin):
    accounts.create_user(engine, "xia", support.PASSWORD, "viewer", accounts.read_scopes(["orders.>"]))
    response = post(admin, "/admin/users/xia/grant", role="operator", scopes="orders.>, pay..x")
    assert response.status_code == 400
    assert "Subject pattern 'pay..x' has an empty token" in text(response)
    row = re.search(r'data-user="xia".*?</tr>', response.get_data(as_text=True), re.S).group(0)
    assert 'value="orders.&gt;, pay..x"' in row and '<option value="operator" selected>' in row
    assert accounts.get_user(engine, "xia").grants[0].to_dict() == {"role": "viewer", "scopes": ["orders.>"]}
    assert audit(engine) == []


def test_an_admin_may_not_disable_or_demote_themselves_and_an_unknown_user_is_a_404(engine, admin):
    assert "You cannot disable your own account" in text(post(admin, "/admin/users/admin-user/disable",
                                                               confirmed="yes"))
    refused = post(admin, "/admin/users/admin-user/grant", role="viewer", scopes="", confirmed="yes")
    assert refused.status_code == 400 and "You cannot take the admin role from yourself" in text(refused)
    assert accounts.get_user(engine, ADMIN).role == "admin" and not accounts.get_user(engine, ADMIN).disabled
    for action in ("disable", "enable", "end-sessions", "grant"):
        missing = post(admin, f"/admin/users/ghost/{action}", confirmed="yes", role="viewer")
        assert missing.status_code == 404 and "There is no user named 'ghost'." in text(missing), action
    assert audit(engine) == []


def test_a_scope_naming_a_source_this_dashboard_does_not_have_is_refused_unless_held_already(offline_app, engine,
                                                                                         admin):
    sentence = ("Scope 'nosuch:orders.>' names the source 'nosuch', which this dashboard does not have: its sources "
                "are default (DLQ_CONFIG names them).")
    for path in ("/admin/users", "/admin/tokens"):
        refused = post(admin, path, name="zz1", role="viewer", scopes="nosuch:orders.>")
        assert refused.status_code == 400 and sentence in text(refused), text(refused)
    assert accounts.get_user(engine, "zz1") is None and accounts.list_tokens(engine) == []
    accounts.create_user(engine, "kim", support.PASSWORD, "viewer", accounts.read_scopes(["gone:orders.>"]))
    refused = post(admin, "/admin/users/kim/grant", role="viewer", scopes="gone:orders.> nosuch:orders.>")
    assert refused.status_code == 400 and sentence in text(refused)
    # Held already (its source since removed from DLQ_CONFIG): kept when the role changes.
    assert post(admin, "/admin/users/kim/grant", role="operator", scopes="gone:orders.>").status_code == 303
    assert accounts.get_user(engine, "kim").grants[0].to_dict() == {"role": "operator", "scopes": ["gone:orders.>"]}


def test_a_single_sign_on_users_grants_are_not_changed_here(offline_app, engine, admin):
    from sqlalchemy import update

    from dlq_dashboard.db.engine import write_transaction
    from dlq_dashboard.db.models import User

    accounts.create_user(engine, "yan@example.com", support.PASSWORD, "viewer")
    with write_transaction(engine) as conn:
        conn.execute(update(User.__table__).where(User.name == "yan@example.com").values(via="oidc"))
    row = re.search(r'data-user="yan@example.com".*?</tr>', admin.get("/admin/users").get_data(as_text=True),
                    re.S).group(0)
    assert "single sign-on" in row and "DLQ_OIDC_ROLES" in row and "/grant" not in row and "/disable" in row
    refused = post(admin, "/admin/users/yan@example.com/grant", role="operator", scopes="")
    # The sentence begins with the name, as it is: it said "Yan@example.com signs in ...".
    assert refused.status_code == 400 and "yan@example.com signs in with single sign-on" in text(refused)
    assert "Yan@example.com" not in text(refused)


# --- tokens -----------------------------------------------------------------------------------

def test_a_new_token_is_shown_once_works_and_a_revoke_asks_first(offline_app, engine, admin):
    response = post(admin, "/admin/tokens", name="etl", role="viewer", scopes="orders.>")
    token = re.search(r'data-secret>([^<]+)</code>', response.get_data(as_text=True)).group(1)
    assert "Created the API token etl (viewer over orders.>)" in text(response)
    api = offline_app.test_client()
    assert api.get("/api/me", headers=support.bearer(token)).get_json()["grants"] == [
        {"role": "viewer", "scopes": ["orders.>"]}]
    assert token not in admin.get("/admin/users").get_data(as_text=True)
    asked = post(admin, "/admin/tokens/etl/revoke")
    assert "Revoke the API token etl?" in text(asked)
    assert api.get("/api/me", headers=support.bearer(token)).status_code == 200
    assert post(admin, "/admin/tokens/etl/revoke", confirmed="yes").status_code == 303
    assert api.get("/api/me", headers=support.bearer(token)).status_code == 401
    assert [(a, actor, d["token"]) for a, actor, d in audit(engine)] == [("token_create", ADMIN, "etl"),
                                                                          ("token_revoke", ADMIN, "etl")]
    assert "There is no active API token named 'etl'." in text(post(admin, "/admin/tokens/etl/revoke"))


def test_a_tokens_role_and_scopes_change_and_a_duplicate_name_is_a_sentence(offline_app, engine, admin):
    token = accounts.create_token(engine, "bot", "viewer")
    assert post(admin, "/admin/tokens/bot/grant", role="operator", scopes="pay.*").status_code == 303
    assert accounts.find_token(engine, token).grants[0].to_dict() == {"role": "operator", "scopes": ["pay.*"]}
    asked = post(admin, "/admin/tokens/bot/grant", role="admin", scopes="")
    assert "Make the API token bot admin over every subject?" in text(asked)
    assert accounts.find_token(engine, token).role == "operator"
    taken = post(admin, "/admin/tokens", name="bot", role="viewer")
    assert taken.status_code == 400 and "A token named 'bot' exists already." in text(taken)
    assert [a for a, _, _ in audit(engine)] == ["token_grant"]


def test_a_token_named_as_the_dashboards_own_work_is_a_sentence_and_nothing_is_made(engine, admin):
    refused = post(admin, "/admin/tokens", name="Mirror", role="viewer", scopes="")
    assert refused.status_code == 400
    assert "Token name 'Mirror' is reserved, in any case, for the dashboard's own work in the audit." in text(refused)
    assert accounts.list_tokens(engine) == [] and audit(engine) == []


@pytest.mark.parametrize("scopes", [" , ", ",", "\n,\n", " "])
def test_scopes_that_name_no_pattern_are_refused_on_every_form_and_widen_nobody(engine, admin, scopes):
    # Read as every subject, a field holding only separators would make an operator over all;
    # an empty field is every subject, as the form's placeholder says.
    accounts.create_user(engine, "pat", support.PASSWORD, "viewer", accounts.read_scopes(["orders.>"]))
    accounts.create_token(engine, "bot", "viewer", accounts.read_scopes(["orders.>"]))
    before = (accounts.list_users(engine), accounts.list_tokens(engine))
    for path, form in (("/admin/users", {"name": "opo", "role": "operator"}),
                       ("/admin/tokens", {"name": "etl", "role": "operator"}),
                       ("/admin/users/pat/grant", {"role": "operator"}),
                       ("/admin/tokens/bot/grant", {"role": "operator"})):
        refused = post(admin, path, scopes=scopes, **form)
        assert refused.status_code == 400, (path, refused.status_code)
        assert f"{scopes!r} names no subject pattern (such as orders.>)" in text(refused), path
    assert (accounts.list_users(engine), accounts.list_tokens(engine)) == before and audit(engine) == []
    assert post(admin, "/admin/users", name="opo", role="operator", scopes="").status_code == 200
    assert accounts.get_user(engine, "opo").scopes is None  # an empty field: every subject


# --- htmx, and what the page shows ------------------------------------------------------------

def test_with_htmx_a_dangerous_action_answers_its_confirmation_alone_and_a_done_one_redirects(offline_app, engine,
                                                                                              admin):
    accounts.create_user(engine, "zoe", support.PASSWORD, "viewer")
    asked = post(admin, "/admin/users/zoe/disable", htmx=True)
    body = asked.get_data(as_text=True)
    assert asked.status_code == 200 and "<html" not in body and "data-confirm" in body
    assert 'name="csrf_token"' in body and "HX-Request" in asked.headers.get("Vary", "")
    refused = post(admin, "/admin/users/zoe/grant", htmx=True, role="viewer", scopes="a..b")
    assert refused.status_code == 400 and "<html" not in refused.get_data(as_text=True)
    assert "has an empty token" in text(refused)
    done = post(admin, "/admin/users/zoe/disable", htmx=True, confirmed="yes")
    assert done.status_code == 204 and done.headers["HX-Redirect"] == "/admin/users"
    assert accounts.get_user(engine, "zoe").disabled


HOSTILE = "orders.<svg/onload=alert(1)"  # no '>' and no space: a pattern NATS would take


def test_names_and_patterns_are_shown_as_text_never_as_markup(offline_app, engine, admin):
    accounts.create_user(engine, "amy", support.PASSWORD, "viewer", accounts.read_scopes([HOSTILE]))
    accounts.create_token(engine, "bot", "viewer", accounts.read_scopes(['pay."onfocus="alert(2)']))
    pages = [admin.get("/admin/users"), post(admin, "/admin/users/amy/disable"),
             post(admin, "/admin/users", name="<img src=x onerror=alert(3)>", role="viewer"),
             post(admin, "/admin/users/amy/grant", role="admin", scopes=HOSTILE + ",x..y")]
    for response in pages:
        body = response.get_data(as_text=True)
        assert "<svg" not in body and "<img src=x" not in body and '"onfocus=' not in body, response.request.path
    assert 'value="orders.&lt;svg/onload=alert(1)"' in pages[0].get_data(as_text=True)
    assert 'value="pay.&#34;onfocus=&#34;alert(2)"' in pages[0].get_data(as_text=True)
    assert "User name '<img src=x onerror=alert(3)>' is not valid" in text(pages[2])


@pytest.mark.both_databases
def test_a_name_no_account_can_have_is_a_404_on_both_databases(make_app, database_url):
    app = make_app(database_url=database_url)
    client = support.logged_in(app, "admin")
    client.token = support.csrf_token(client, "/admin/users")
    for path in ("/admin/users/a%00b/disable", "/admin/tokens/a%00b/revoke", "/admin/users/" + "x" * 300 + "/grant"):
        assert post(client, path, role="viewer").status_code == 404, path


def test_saving_a_role_and_scopes_unchanged_changes_and_audits_nothing(offline_app, engine, admin):
    accounts.create_user(engine, "ada", support.PASSWORD, "operator", accounts.read_scopes(["orders.>"]))
    assert post(admin, "/admin/users/ada/grant", role="operator", scopes="orders.>").status_code == 303
    assert "ada is operator over orders.> already; nothing was changed." in text(admin.get("/admin/users"))
    assert audit(engine) == []


@pytest.mark.both_databases
def test_every_action_of_the_page_on_both_databases(make_app, database_url):
    app = make_app(database_url=database_url)
    engine = runtime_of(app).engine
    client = support.logged_in(app, "admin")
    client.token = support.csrf_token(client, "/admin/users")
    assert post(client, "/admin/users", name="bea", role="viewer", scopes="orders.>").status_code == 200
    member = app.test_client()
    assert support.login(member, "bea", support.PASSWORD).status_code == 401  # a made password, not this one
    accounts.set_password(engine, "bea", support.PASSWORD)
    assert support.login(member, "bea", support.PASSWORD).status_code == 302
    assert post(client, "/admin/users/bea/grant", role="operator", scopes="orders.>, pay.*").status_code == 303
    assert member.get("/api/me").get_json()["grants"] == [{"role": "operator", "scopes": ["orders.>", "pay.*"]}]
    assert post(client, "/admin/users/bea/end-sessions", confirmed="yes").status_code == 303
    assert member.get("/api/me").status_code == 401
    assert post(client, "/admin/users/bea/disable", confirmed="yes").status_code == 303
    assert post(client, "/admin/users/bea/enable").status_code == 303
    assert post(client, "/admin/tokens", name="bot", role="viewer", scopes="").status_code == 200
    assert post(client, "/admin/tokens/bot/grant", role="operator", scopes="x.>").status_code == 303
    assert post(client, "/admin/tokens/bot/revoke", confirmed="yes").status_code == 303
    assert [a for a, _, _ in audit(engine)] == ["user_create", "user_grant", "user_end_sessions", "user_disable",
                                                "user_enable", "token_create", "token_grant", "token_revoke"]
