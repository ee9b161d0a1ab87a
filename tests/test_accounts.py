"""Users and API tokens in the database: slow hashes, names, disabling, the first admin."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select, update

from dlq_dashboard import accounts
from dlq_dashboard.accounts import AccountError
from dlq_dashboard.db.engine import create_db_engine, write_transaction
from dlq_dashboard.db.migrate import migrate
from dlq_dashboard.db.models import Action, ApiToken, User
from dlq_dashboard.times import utcnow

PASSWORD = "correct horse battery"


@pytest.fixture
def engine(tmp_path):
    engine = create_db_engine(f"sqlite:///{tmp_path}/accounts.sqlite3")
    migrate(engine)
    yield engine
    engine.dispose()


def stored_user(engine, name):
    with engine.connect() as conn:
        return conn.execute(select(User.__table__).where(User.name == name)).first()


def test_a_new_user_is_stored_with_a_slow_hash_and_never_the_password(engine):
    accounts.create_user(engine, "alice", PASSWORD, "operator")
    row = stored_user(engine, "alice")
    assert row.role == "operator"
    assert row.password_hash.startswith(("scrypt:", "pbkdf2:"))
    assert PASSWORD not in row.password_hash


@pytest.mark.parametrize("name", ["", "   ", "bad name", "token:ci", "<b>x</b>", "-dash", "x" * 65, "a\nb", "zoë"])
def test_a_user_name_that_could_mislead_the_audit_or_the_markup_is_refused(engine, name):
    # "zoë" is refused as "letters" said it was not: the sentence says which letters.
    with pytest.raises(AccountError, match=r"not valid: use 1-64 ASCII letters \(a-z, A-Z\)"):
        accounts.create_user(engine, name, PASSWORD, "viewer")


def test_names_from_single_sign_on_such_as_email_addresses_are_accepted(engine):
    assert accounts.create_user(engine, "jane.doe+ops@example.com", PASSWORD, "viewer").name == "jane.doe+ops@example.com"


def test_a_short_password_an_unknown_role_and_a_taken_name_are_refused(engine):
    with pytest.raises(AccountError, match="too short"):
        accounts.create_user(engine, "bob", "short", "viewer")
    with pytest.raises(AccountError, match="role 'root' is not valid"):
        accounts.create_user(engine, "bob", PASSWORD, "root")
    accounts.create_user(engine, "bob", PASSWORD, "viewer")
    with pytest.raises(AccountError, match="exists already"):
        accounts.create_user(engine, "bob", PASSWORD, "admin")


def test_verify_password_accepts_only_the_right_password_of_an_enabled_user(engine):
    accounts.create_user(engine, "carol", PASSWORD, "viewer")
    assert accounts.verify_password(engine, "carol", PASSWORD).name == "carol"
    assert accounts.verify_password(engine, "carol", PASSWORD + "x") is None
    assert accounts.verify_password(engine, "nobody", PASSWORD) is None
    accounts.set_disabled(engine, "carol", True)
    assert accounts.verify_password(engine, "carol", PASSWORD) is None


def test_a_login_for_an_unknown_name_checks_a_password_hash_as_a_known_one_does(engine, monkeypatch):
    accounts.create_user(engine, "dora", PASSWORD, "viewer")
    checked = []
    check = accounts.check_password_hash
    monkeypatch.setattr(accounts, "check_password_hash", lambda hashed, password: checked.append(hashed)
                        or check(hashed, password))
    assert accounts.verify_password(engine, "nobody", PASSWORD) is None
    assert accounts.verify_password(engine, "dora", PASSWORD + "x") is None
    assert len(checked) == 2 and all(h.startswith(("scrypt:", "pbkdf2:")) for h in checked)
    assert checked[0] != stored_user(engine, "dora").password_hash


def test_importing_the_accounts_module_works_out_no_password_hash():
    """A scrypt hash costs a tenth of a second and 32 MB: a process start (each admin command's
    too) makes none until a login or a new password needs one."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import werkzeug.security as s; made = []; make = s.generate_password_hash; "
            "s.generate_password_hash = lambda *a, **k: made.append(1) or make(*a, **k); "
            "import dlq_dashboard.accounts; print(len(made))")
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                            capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "0"


def test_disabling_enabling_and_a_new_password_each_end_the_users_sessions(engine):
    user = accounts.create_user(engine, "dave", PASSWORD, "viewer")
    before_disabling = accounts.start_session(engine, user.id)
    accounts.set_disabled(engine, "dave", True)
    accounts.set_disabled(engine, "dave", False)
    assert accounts.load_session_user(engine, before_disabling) is None  # enabling does not bring it back
    before_new_password = accounts.start_session(engine, user.id)
    assert accounts.load_session_user(engine, before_new_password).name == "dave"
    accounts.set_password(engine, "dave", "another good password")
    assert accounts.load_session_user(engine, before_new_password) is None
    assert accounts.verify_password(engine, "dave", PASSWORD) is None
    assert accounts.verify_password(engine, "dave", "another good password") is not None


def test_changing_an_unknown_user_says_so(engine):
    with pytest.raises(AccountError, match="no user named 'ghost'"):
        accounts.set_disabled(engine, "ghost", True)
    with pytest.raises(AccountError, match="no user named 'ghost'"):
        accounts.set_password(engine, "ghost", PASSWORD)


def test_the_first_admin_is_created_once_with_a_random_password(engine):
    password = accounts.ensure_first_admin(engine)
    assert password and len(password) >= 12
    assert accounts.verify_password(engine, "admin", password).role == "admin"
    assert accounts.ensure_first_admin(engine) is None
    assert [u.name for u in accounts.list_users(engine)] == ["admin"]
    # In the audit, as every change of a user: made by the dashboard at its first start.
    with engine.connect() as conn:
        records = conn.execute(select(Action.action, Action.actor, Action.note)).all()
    assert [tuple(r) for r in records] == [("user_create", "dashboard", "admin: admin over every subject")]


def test_no_first_admin_is_made_when_any_user_exists(engine):
    accounts.create_user(engine, "erin", PASSWORD, "viewer")
    assert accounts.ensure_first_admin(engine) is None
    assert accounts.get_user(engine, "admin") is None


def test_no_first_admin_is_made_without_password_sign_in(engine):
    """DLQ_LOCAL_LOGIN=false: the first start printed an admin's password no form would take."""
    assert accounts.ensure_first_admin(engine, local_login=False) is None
    assert accounts.list_users(engine) == []


def test_an_api_token_is_shown_once_and_stored_only_as_a_hash(engine):
    token = accounts.create_token(engine, "ci", "viewer")
    with engine.connect() as conn:
        row = conn.execute(select(ApiToken.__table__)).one()
    assert token.startswith("dlq_") and len(token) > 40
    assert row.token_hash == accounts.hash_token(token) and token not in row.token_hash
    found = accounts.find_token(engine, token)
    assert (found.name, found.role) == ("ci", "viewer")
    assert accounts.find_token(engine, token + "x") is None
    assert accounts.find_token(engine, "") is None


def test_a_revoked_token_stops_working_and_its_name_can_be_given_again(engine):
    old = accounts.create_token(engine, "ci", "viewer")
    with pytest.raises(AccountError, match="exists already"):
        accounts.create_token(engine, "ci", "admin")
    accounts.revoke_token(engine, "ci")
    assert accounts.find_token(engine, old) is None
    with pytest.raises(AccountError, match="no active token named 'ci'"):
        accounts.revoke_token(engine, "ci")
    new = accounts.create_token(engine, "ci", "operator")
    assert accounts.find_token(engine, new).role == "operator"
    assert accounts.find_token(engine, old) is None
    listed = accounts.list_tokens(engine)
    assert [(t.role, t.revoked_at is None) for t in listed if t.name == "ci"] == [("operator", True)]
    assert len(listed) == 2  # the revoked one is kept, renamed


def test_a_tokens_last_use_is_written_at_most_once_a_minute(engine):
    token = accounts.create_token(engine, "poller", "viewer")
    accounts.find_token(engine, token)
    first = accounts.list_tokens(engine)[0].last_used_at
    assert first is not None
    accounts.find_token(engine, token)
    assert accounts.list_tokens(engine)[0].last_used_at == first
    with write_transaction(engine) as conn:  # pretend the last use was two minutes ago
        from datetime import timedelta
        conn.execute(update(ApiToken.__table__).values(last_used_at=first - timedelta(minutes=2)))
    accounts.find_token(engine, token)
    assert accounts.list_tokens(engine)[0].last_used_at > first


def test_each_session_key_and_token_finds_its_own_whatever_was_looked_up_before(engine):
    # The lookups are statements built once with the key as a parameter: none may keep a value.
    users = [accounts.create_user(engine, name, PASSWORD, role) for name, role in (("ann", "viewer"),
                                                                                  ("bob", "admin"))]
    keys = [accounts.start_session(engine, user.id) for user in users]
    tokens = [accounts.create_token(engine, name, role) for name, role in (("t1", "viewer"), ("t2", "operator"))]
    for _ in range(2):
        assert [accounts.load_session_user(engine, key).name for key in keys + keys[::-1]] == [
            "ann", "bob", "bob", "ann"]
        assert [accounts.find_token(engine, token).name for token in tokens + tokens[::-1]] == [
            "t1", "t2", "t2", "t1"]
    accounts.end_session(engine, keys[0])
    accounts.revoke_token(engine, "t1")
    assert accounts.load_session_user(engine, keys[0]) is None and accounts.load_session_user(engine, "nope") is None
    assert accounts.find_token(engine, tokens[0]) is None and accounts.find_token(engine, "dlq_nope") is None
    assert accounts.load_session_user(engine, keys[1]).role == "admin"
    assert accounts.find_token(engine, tokens[1]).role == "operator"


def test_a_token_name_and_role_are_checked_like_a_users(engine):
    with pytest.raises(AccountError, match="token name"):
        accounts.create_token(engine, "my token", "viewer")
    with pytest.raises(AccountError, match="role"):
        accounts.create_token(engine, "ok", "superuser")


# --- single sign-on users and their sessions ---------------------------------------------------

def test_a_single_sign_on_session_holds_the_grants_of_its_sign_in_and_gives_back_its_id_token(engine):
    from dlq_dashboard.scopes import Grant, Scope

    grants = (Grant("operator", (Scope("orders.>"),)), Grant("viewer"))
    user = accounts.sign_in_oidc_user(engine, "https://idp.example a-sub", "ann@example.com", grants)
    assert (user.role, user.scopes, user.via) == ("operator", (Scope("orders.>"),), "oidc")
    key = accounts.start_session(engine, user.id, hours=1, via="oidc", grants=grants, id_token="a.b.c")
    loaded = accounts.load_session_user(engine, key)
    assert loaded.grants == grants and loaded.role == "operator"
    password_key = accounts.start_session(engine, accounts.create_user(engine, "pat", PASSWORD, "viewer").id)
    assert accounts.load_session_user(engine, password_key).grants == (Grant("viewer"),)
    assert accounts.end_session(engine, key) == "a.b.c" and accounts.end_session(engine, password_key) is None
    assert accounts.load_session_user(engine, key) is None


def test_a_single_sign_on_user_is_found_by_subject_and_brought_up_to_date(engine):
    from dlq_dashboard.scopes import Grant

    first = accounts.sign_in_oidc_user(engine, "iss sub-1", "old@example.com", (Grant("admin"),))
    again = accounts.sign_in_oidc_user(engine, "iss sub-1", "new@example.com", (Grant("viewer"),))
    assert again.id == first.id and stored_user(engine, "new@example.com").role == "viewer"
    assert stored_user(engine, "old@example.com") is None
    with pytest.raises(AccountError, match="belongs to another user"):
        accounts.sign_in_oidc_user(engine, "iss sub-2", "new@example.com", (Grant("viewer"),))
    with pytest.raises(AccountError, match="not valid"):
        accounts.sign_in_oidc_user(engine, "iss sub-3", "a name with spaces", (Grant("viewer"),))
    assert accounts.verify_password(engine, "new@example.com", accounts.NO_PASSWORD) is None


# --- the admin's changes: roles, scopes, sessions, each audited ---------------------------------

def audit_rows(engine):
    with engine.connect() as conn:
        return [(r.action, r.actor, json.loads(r.detail), r.note)
                for r in conn.execute(select(Action.__table__).order_by(Action.id))]


def test_a_users_role_and_scopes_change_from_their_next_request_and_the_audit_says_who_did_it_to_whom(engine):
    user = accounts.create_user(engine, "fay", PASSWORD, "viewer", actor="cli:root")
    key = accounts.start_session(engine, user.id)
    changed = accounts.set_role_and_scopes(engine, "fay", "operator", accounts.read_scopes(["orders.>", "billing.*"]),
                                           actor="ann")
    assert (changed.role, [str(s) for s in changed.scopes]) == ("operator", ["billing.*", "orders.>"])
    seen = accounts.load_session_user(engine, key)  # the same session: no new sign-in needed
    assert [g.to_dict() for g in seen.grants] == [{"role": "operator", "scopes": ["billing.*", "orders.>"]}]
    accounts.set_role_and_scopes(engine, "fay", "admin", None, actor="ann")
    assert accounts.get_user(engine, "fay").grants[0].to_dict() == {"role": "admin", "scopes": None}
    assert audit_rows(engine) == [
        ("user_create", "cli:root", {"user": "fay", "role": "viewer", "scopes": None}, "fay: viewer over every subject"),
        ("user_grant", "ann", {"user": "fay", "role": "operator", "scopes": ["billing.*", "orders.>"],
                               "was_role": "viewer", "was_scopes": None},
         "fay: operator over billing.*, orders.> (was viewer over every subject)"),
        ("user_grant", "ann", {"user": "fay", "role": "admin", "scopes": None, "was_role": "operator",
                               "was_scopes": ["billing.*", "orders.>"]},
         "fay: admin over every subject (was operator over billing.*, orders.>)")]


def test_a_scoped_admin_a_bad_pattern_an_unknown_user_and_a_single_sign_on_user_are_refused_unchanged(engine):
    accounts.create_user(engine, "gil", PASSWORD, "operator")
    with pytest.raises(AccountError, match="an admin is never scoped"):
        accounts.set_role_and_scopes(engine, "gil", "admin", accounts.read_scopes(["orders.>"]), actor="ann")
    with pytest.raises(AccountError, match="'orders..x' has an empty token"):
        accounts.read_scopes(["orders..x"])
    with pytest.raises(AccountError, match="'>.orders' has '>' before its last token"):
        accounts.read_scopes(["ok.*", ">.orders"])
    with pytest.raises(AccountError, match="no user named 'ghost'"):
        accounts.set_role_and_scopes(engine, "ghost", "viewer", None, actor="ann")
    with write_transaction(engine) as conn:
        conn.execute(update(User.__table__).where(User.name == "gil").values(via="oidc"))
    with pytest.raises(AccountError, match="single sign-on.*DLQ_OIDC_ROLES"):
        accounts.set_role_and_scopes(engine, "gil", "viewer", None, actor="ann")
    assert accounts.get_user(engine, "gil").grants[0].to_dict() == {"role": "operator", "scopes": None}
    assert audit_rows(engine) == []  # made without an actor (as the first admin is), and nothing else done


def test_ending_a_users_sessions_ends_every_open_one_and_counts_them(engine):
    hal = accounts.create_user(engine, "hal", PASSWORD, "viewer")
    other = accounts.create_user(engine, "ivy", PASSWORD, "viewer")
    keys = [accounts.start_session(engine, hal.id) for _ in range(3)]
    accounts.end_session(engine, keys[0])  # a logout: already ended, not counted again
    kept = accounts.start_session(engine, other.id)
    assert accounts.open_sessions(engine) == {hal.id: 2, other.id: 1}
    assert accounts.end_user_sessions(engine, "hal", actor="ann") == 2
    assert all(accounts.load_session_user(engine, key) is None for key in keys)
    assert accounts.load_session_user(engine, kept).name == "ivy"
    assert not accounts.get_user(engine, "hal").disabled
    assert accounts.set_disabled(engine, "ivy", True, actor="ann") == 1
    assert [(a, detail) for a, _, detail, _ in audit_rows(engine)] == [
        ("user_end_sessions", {"user": "hal", "sessions_ended": 2}),
        ("user_disable", {"user": "ivy", "sessions_ended": 1})]
    with pytest.raises(AccountError, match="no user named 'ghost'"):
        accounts.end_user_sessions(engine, "ghost", actor="ann")


def test_a_sign_in_is_recorded_as_the_users_last(engine):
    user = accounts.create_user(engine, "jo", PASSWORD, "viewer")
    assert accounts.get_user(engine, "jo").last_sign_in_at is None
    key = accounts.start_session(engine, user.id)
    signed_in = accounts.get_user(engine, "jo").last_sign_in_at
    assert signed_in is not None and accounts.session_via(engine, key) == "password"
    assert accounts.session_via(engine, "no such key") is None


def test_a_tokens_role_and_scopes_change_from_its_next_call_and_a_revoke_is_audited(engine):
    token = accounts.create_token(engine, "etl", "viewer", accounts.read_scopes(["orders.>"]), actor="ann")
    assert accounts.find_token(engine, token).grants[0].to_dict() == {"role": "viewer", "scopes": ["orders.>"]}
    accounts.set_token_role_and_scopes(engine, "etl", "operator", accounts.read_scopes(["orders.>", "east:pay.*"]),
                                       actor="ann")
    assert accounts.find_token(engine, token).grants[0].to_dict() == {"role": "operator",
                                                                      "scopes": ["orders.>", "east:pay.*"]}
    with pytest.raises(AccountError, match="an admin is never scoped"):
        accounts.set_token_role_and_scopes(engine, "etl", "admin", accounts.read_scopes(["orders.>"]), actor="ann")
    accounts.revoke_token(engine, "etl", actor="ann")
    with pytest.raises(AccountError, match="no active token named 'etl'"):
        accounts.set_token_role_and_scopes(engine, "etl", "viewer", None, actor="ann")
    assert [(a, actor, detail.get("token")) for a, actor, detail, _ in audit_rows(engine)] == [
        ("token_create", "ann", "etl"), ("token_grant", "ann", "etl"), ("token_revoke", "ann", "etl")]


# --- names: one holder in any case, and none of the dashboard's own --------------------------------

def user_names(engine) -> list[str]:
    return [u.name for u in accounts.list_users(engine)]


def test_a_name_another_user_holds_in_any_case_is_refused_and_nothing_is_made(engine):
    from dlq_dashboard.scopes import Grant

    accounts.create_user(engine, "viewer1", PASSWORD, "viewer")
    with pytest.raises(AccountError, match=r"^the name 'Viewer1' is taken: user 'viewer1' holds it, and names that "
                                           r"differ only in case are one name here$"):
        accounts.create_user(engine, "Viewer1", PASSWORD, "admin")
    # A single sign-on user's name is theirs the same way: a local user named so in another case
    # would have locked them out at their next sign-in.
    accounts.sign_in_oidc_user(engine, "iss ops1", "ops1@example.com", (Grant("viewer"),))
    with pytest.raises(AccountError, match="'OPS1@EXAMPLE.COM' is taken: user 'ops1@example.com' holds it"):
        accounts.create_user(engine, "OPS1@EXAMPLE.COM", PASSWORD, "viewer")
    assert user_names(engine) == ["ops1@example.com", "viewer1"]
    assert accounts.sign_in_oidc_user(engine, "iss ops1", "ops1@example.com", (Grant("viewer"),)).name == \
        "ops1@example.com"


@pytest.mark.both_databases
def test_two_users_made_at_once_in_names_differing_only_in_case_cannot_both_be_made(database_url, monkeypatch):
    # Two creations at once both find the name free before either commits (PostgreSQL's read
    # committed sees no row not yet committed): the database's own index refuses the second.
    engine = create_db_engine(database_url)
    try:
        accounts.create_user(engine, "viewer1", PASSWORD, "viewer")
        monkeypatch.setattr(accounts, "_refuse_taken", lambda conn, name: None)
        with pytest.raises(AccountError, match="^user 'VIEWER1' exists already, in this case or another$"):
            accounts.create_user(engine, "VIEWER1", PASSWORD, "viewer")
        assert user_names(engine) == ["viewer1"]
    finally:
        engine.dispose()


def _made_before_names_were_one_in_any_case(engine, name: str, **values) -> None:
    # A user row as the dashboard let one be made before revision 0026 (and as the revision
    # keys it): beside a user whose name differs only in case.
    with write_transaction(engine) as conn:
        next_id = conn.execute(select(func.coalesce(func.max(User.id), 0) + 1)).scalar()
        conn.execute(User.__table__.insert().values(
            id=next_id, name=name, name_key=f"{name.lower()}:{next_id}", password_hash="x", role="viewer",
            disabled=False, created_at=utcnow(), **values))


def test_a_sign_in_is_never_refused_for_a_user_made_after_the_one_signing_in(engine):
    from dlq_dashboard.scopes import Grant

    ops1 = accounts.sign_in_oidc_user(engine, "iss ops1", "ops1@example.com", (Grant("viewer"),))
    _made_before_names_were_one_in_any_case(engine, "OPS1@example.com", via="password")
    again = accounts.sign_in_oidc_user(engine, "iss ops1", "ops1@example.com", (Grant("operator"),))
    assert (again.id, again.role) == (ops1.id, "operator")
    # The other way round the name is the first user's: nobody takes it over by signing in.
    accounts.create_user(engine, "Lee", PASSWORD, "admin")
    _made_before_names_were_one_in_any_case(engine, "lee", via="oidc", oidc_subject="iss lee")
    with pytest.raises(AccountError, match="the name 'lee' belongs to another user"):
        accounts.sign_in_oidc_user(engine, "iss lee", "lee", (Grant("viewer"),))
    # Nor does the provider's new name for a user take one a user made after them holds.
    accounts.sign_in_oidc_user(engine, "iss kim", "kim@example.com", (Grant("viewer"),))
    accounts.create_user(engine, "Kay@example.com", PASSWORD, "viewer")
    with pytest.raises(AccountError, match="the name 'kay@example.com' belongs to another user"):
        accounts.sign_in_oidc_user(engine, "iss kim", "kay@example.com", (Grant("viewer"),))
    assert accounts.get_user(engine, "kim@example.com") is not None


@pytest.mark.parametrize("name", ["dashboard", "Dashboard", "dlq-dashboard", "MIRROR", "alerts", "Retention",
                                  "anonymous"])
def test_a_name_the_dashboard_writes_as_its_own_actor_is_refused_for_users_and_tokens_in_any_case(engine, name):
    from dlq_dashboard.scopes import Grant

    reserved = f"name '{name}' is reserved, in any case, for the dashboard's own work in the audit"
    with pytest.raises(AccountError, match=f"^user {reserved}$"):
        accounts.create_user(engine, name, PASSWORD, "viewer")
    with pytest.raises(AccountError, match=f"^token {reserved}$"):
        accounts.create_token(engine, name, "viewer")
    with pytest.raises(AccountError, match=f"^user {reserved}$"):
        accounts.sign_in_oidc_user(engine, f"iss {name}", name, (Grant("viewer"),))
    assert accounts.list_users(engine) == [] and accounts.list_tokens(engine) == [] and audit_rows(engine) == []


def test_every_actor_the_dashboard_writes_itself_is_one_of_the_reserved_names():
    # An actor written as a literal ("retention") could be a user's name too: every such name is
    # declared in actors.py, whose set check_name refuses. The literal "actor" values, as a keyword
    # or a dict's key, are found in the code so that a new one cannot be added beside the set.
    import ast
    from pathlib import Path

    from dlq_dashboard import actors

    literal = []
    for path in sorted((Path(__file__).resolve().parent.parent / "dlq_dashboard").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            values = []
            if isinstance(node, ast.keyword) and node.arg == "actor":
                values.append(node.value)
            if isinstance(node, ast.Dict):
                values += [v for k, v in zip(node.keys, node.values)
                           if isinstance(k, ast.Constant) and k.value == "actor"]
            literal += [f"{path.name}:{v.lineno} {v.value!r}" for v in values
                        if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    assert literal == []
    assert {actors.FIRST_START, actors.JOB_WATCH, actors.MIRROR, actors.ALERTS, actors.RETENTION,
            actors.ANONYMOUS} == actors.SYSTEM_ACTORS
    assert all(name == name.lower() for name in actors.SYSTEM_ACTORS)


# --- a single sign-on user has no password ----------------------------------------------------

def test_a_new_password_for_a_single_sign_on_user_is_refused_and_nothing_changes(engine):
    from dlq_dashboard.scopes import Grant

    user = accounts.sign_in_oidc_user(engine, "iss ops1", "ops1@example.com", (Grant("viewer"),))
    key = accounts.start_session(engine, user.id, via="oidc", grants=(Grant("viewer"),))
    with pytest.raises(AccountError, match="^ops1@example.com signs in with single sign-on: they have no password "
                                           "on this dashboard, and nothing was changed$"):
        accounts.set_password(engine, "ops1@example.com", "longpassword1", actor="cli:root")
    assert stored_user(engine, "ops1@example.com").password_hash == accounts.NO_PASSWORD
    assert accounts.load_session_user(engine, key) is not None
    assert [action for action, *_ in audit_rows(engine)] == ["user_create"]  # the sign-in's, nothing since
