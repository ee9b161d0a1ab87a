"""The admin commands: ``flask --app app users ...`` and ``flask --app app tokens ...``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlq_dashboard.accounts import get_user, list_tokens, set_role_and_scopes, verify_password
from dlq_dashboard.scopes import parse_scopes
from dlq_dashboard.runtime import runtime_of

from . import support

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def cli(offline_app):
    # Click 8.2+: result.output has both streams, result.stdout only standard output.
    runner = offline_app.test_cli_runner()
    return lambda *args, input=None: runner.invoke(args=list(args), input=input)


@pytest.fixture
def engine(offline_app):
    return runtime_of(offline_app).engine


def test_users_create_reads_the_password_from_stdin(cli, engine):
    result = cli("users", "create", "alice", "--role", "operator", "--password-stdin", input=support.PASSWORD + "\n")
    assert result.exit_code == 0, result.output
    assert "Created user alice (operator)." in result.output
    assert verify_password(engine, "alice", support.PASSWORD).role == "operator"


def test_users_create_prompts_for_the_password_twice(cli, engine):
    result = cli("users", "create", "bob", "--role", "viewer", input=f"{support.PASSWORD}\n{support.PASSWORD}\n")
    assert result.exit_code == 0, result.output
    assert support.PASSWORD not in result.output  # the prompt does not echo it
    assert verify_password(engine, "bob", support.PASSWORD) is not None


def test_users_create_refuses_a_bad_role_a_short_password_and_a_taken_name(cli):
    assert cli("users", "create", "carol", "--role", "root", "--password-stdin", input=support.PASSWORD).exit_code == 2
    short = cli("users", "create", "carol", "--role", "viewer", "--password-stdin", input="short\n")
    assert short.exit_code == 1 and "too short" in short.output
    cli("users", "create", "carol", "--role", "viewer", "--password-stdin", input=support.PASSWORD)
    taken = cli("users", "create", "carol", "--role", "admin", "--password-stdin", input=support.PASSWORD)
    assert taken.exit_code == 1 and "exists already" in taken.output


def test_users_list_shows_names_roles_and_states(cli):
    assert cli("users", "list").output.strip() == "No users yet."
    cli("users", "create", "zed", "--role", "admin", "--password-stdin", input=support.PASSWORD)
    cli("users", "create", "amy", "--role", "viewer", "--password-stdin", input=support.PASSWORD)
    cli("users", "disable", "zed")
    lines = [line.split() for line in cli("users", "list").output.strip().splitlines()]
    assert lines == [["NAME", "ROLE", "SCOPES", "VIA", "STATE", "LAST", "SIGN-IN"],
                     ["amy", "viewer", "all", "password", "active", "never"],
                     ["zed", "admin", "all", "password", "disabled", "never"]]


def test_users_disable_stops_the_login_and_enable_restores_it(cli, engine, offline_app):
    from . import support

    cli("users", "create", "dan", "--role", "viewer", "--password-stdin", input=support.PASSWORD)
    assert "Disabled user dan" in cli("users", "disable", "dan").output
    assert support.login(offline_app.test_client(), "dan", support.PASSWORD).status_code == 401
    cli("users", "enable", "dan")
    assert support.login(offline_app.test_client(), "dan", support.PASSWORD).status_code == 302
    missing = cli("users", "disable", "ghost")
    assert missing.exit_code == 1 and "no user named 'ghost'" in missing.output


def test_users_set_password_replaces_the_password(cli, engine):
    cli("users", "create", "eve", "--role", "viewer", "--password-stdin", input=support.PASSWORD)
    result = cli("users", "set-password", "eve", "--password-stdin", input="a brand new password\n")
    assert result.exit_code == 0, result.output
    assert verify_password(engine, "eve", support.PASSWORD) is None
    assert verify_password(engine, "eve", "a brand new password") is not None


def test_tokens_create_prints_a_working_token_once_and_keeps_only_its_hash(cli, engine, offline_app):
    result = cli("tokens", "create", "ci", "--role", "viewer")
    assert result.exit_code == 0, result.output
    token = result.stdout.strip().splitlines()[-1]
    assert token.startswith("dlq_")
    response = offline_app.test_client().get("/api/entries", headers=support.bearer(token))
    assert response.status_code == 200
    listing = cli("tokens", "list").output
    assert "ci" in listing and "viewer" in listing and token not in listing


def test_tokens_revoke_stops_the_token_at_once(cli, offline_app):
    token = cli("tokens", "create", "ci", "--role", "viewer").stdout.strip().splitlines()[-1]
    assert cli("tokens", "revoke", "ci").exit_code == 0
    assert offline_app.test_client().get("/api/entries", headers=support.bearer(token)).status_code == 401
    again = cli("tokens", "revoke", "ci")
    assert again.exit_code == 1 and "no active token named 'ci'" in again.output
    assert [t.revoked_at is not None for t in list_tokens(runtime_of(offline_app).engine)] == [True]


@pytest.mark.slow
def test_flask_app_finds_the_app_without_starting_anything(tmp_path):
    """`flask --app app users ...` as the README says, in a fresh process with the repo on its path."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path}/cli.sqlite3", "SECRET_KEY": "cli-test",
           "PYTHONPATH": str(REPO)}
    env.pop("NATS_URL", None)
    flask = [sys.executable, "-m", "flask", "--app", "app"]

    def invoke(*args, stdin=""):
        return subprocess.run([*flask, *args], cwd=tmp_path, env=env, input=stdin, capture_output=True,
                              text=True, timeout=60)

    created = invoke("users", "create", "root", "--role", "admin", "--password-stdin", stdin=support.PASSWORD + "\n")
    assert created.returncode == 0, created.stderr
    listed = invoke("users", "list")
    assert listed.returncode == 0, listed.stderr
    assert "root" in listed.stdout and "admin" in listed.stdout
    token = invoke("tokens", "create", "ops", "--role", "operator")
    assert token.stdout.strip().startswith("dlq_") and "shown once" in token.stderr
    # No bundled nats-server was started: it would have made instance/nats in the working folder.
    assert not (tmp_path / "instance").exists()


def test_the_first_admin_exists_for_the_cli_to_see(offline_app, cli):
    from dlq_dashboard.accounts import ensure_first_admin

    password = ensure_first_admin(runtime_of(offline_app).engine)
    assert password and "admin" in cli("users", "list").output
    assert get_user(runtime_of(offline_app).engine, "admin").role == "admin"


# --- scopes, ending sessions, the audit ---------------------------------------------------------

def _audit(engine):
    from sqlalchemy import select

    from dlq_dashboard.db.models import Action

    with engine.connect() as conn:
        return [(r.action, r.actor, r.note) for r in conn.execute(select(Action.__table__).order_by(Action.id))]


def test_users_create_takes_scopes_and_users_list_shows_them(cli, engine):
    result = cli("users", "create", "ops", "--role", "operator", "--scope", "orders.>", "--scope", "billing.>",
                 "--password-stdin", input=support.PASSWORD)
    assert result.exit_code == 0, result.output
    assert "Created user ops (operator over billing.>, orders.>)." in result.output
    assert [g.to_dict() for g in get_user(engine, "ops").grants] == [{"role": "operator",
                                                                      "scopes": ["billing.>", "orders.>"]}]
    [_, row] = [line.split() for line in cli("users", "list").output.strip().splitlines()]
    assert row == ["ops", "operator", "billing.>,orders.>", "password", "active", "never"]


@pytest.mark.parametrize("args", [("users", "create", "bad", "--role", "viewer", "--scope", "orders..x",
                                   "--password-stdin"),
                                  ("users", "create", "bad", "--role", "admin", "--scope", "orders.>", "--password-stdin"),
                                  ("tokens", "create", "bad", "--role", "viewer", "--scope", "orders.>.x"),
                                  ("tokens", "create", "bad", "--role", "viewer", "--scope", ""),
                                  ("users", "create", "bad", "--role", "operator", "--scope", " , ", "--password-stdin")])
def test_a_bad_pattern_or_a_scoped_admin_is_refused_with_a_non_zero_exit_and_nothing_stored(cli, engine, args):
    """A bad pattern is a usage error (the usage, then the sentence: exit 2); a scoped admin one line."""
    result = cli(*args, input=support.PASSWORD)
    assert result.exit_code != 0
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("Error: ") and ("subject pattern" in line or "an admin is never scoped" in line), line
    if "--role" in args and args[args.index("--role") + 1] == "admin":
        assert result.output.strip() == line
    else:
        assert result.exit_code == 2 and result.output.startswith("Usage: ")
    assert get_user(engine, "bad") is None and list_tokens(engine) == [] and _audit(engine) == []


def test_users_scope_sets_new_scopes_removes_them_with_all_and_keeps_them_for_a_role_alone(cli, engine):
    cli("users", "create", "kim", "--role", "viewer", "--password-stdin", input=support.PASSWORD)
    result = cli("users", "scope", "kim", "--scope", "orders.*,billing.>")
    assert result.exit_code == 0, result.output
    assert "User kim is now viewer over billing.>, orders.*." in result.output
    assert cli("users", "scope", "kim", "--role", "operator").exit_code == 0
    assert get_user(engine, "kim").grants[0].to_dict() == {"role": "operator", "scopes": ["billing.>", "orders.*"]}
    assert "now operator over every subject" in cli("users", "scope", "kim", "--all").output
    assert get_user(engine, "kim").scopes is None


def test_users_scope_refuses_nothing_to_change_both_options_a_bad_pattern_and_an_unknown_user(cli, engine):
    cli("users", "create", "lee", "--role", "operator", "--scope", "orders.>", "--password-stdin",
        input=support.PASSWORD)
    for args, words in ((("users", "scope", "lee"), "say what to change"),
                        (("users", "scope", "lee", "--all", "--scope", "x.>"), "not both"),
                        (("users", "scope", "lee", "--scope", "a b"), "has a space"),
                        # A script's empty variable (--scope "$TEAM") read as every subject widened the grant.
                        (("users", "scope", "lee", "--scope", ""), "names no subject pattern"),
                        (("users", "scope", "lee", "--scope", ","), "names no subject pattern"),
                        (("users", "scope", "lee", "--role", "admin"), "an admin is never scoped"),
                        (("users", "scope", "ghost", "--all"), "no user named 'ghost'")):
        result = cli(*args)
        assert result.exit_code != 0 and words in result.output, (args, result.output)
    assert get_user(engine, "lee").grants[0].to_dict() == {"role": "operator", "scopes": ["orders.>"]}
    assert cli("users", "scope", "lee", "--role", "admin", "--all").exit_code == 0
    assert get_user(engine, "lee").grants[0].to_dict() == {"role": "admin", "scopes": None}


@pytest.mark.parametrize("command", [("users", "create", "zz1", "--role", "viewer", "--password-stdin"),
                                     ("tokens", "create", "zz1", "--role", "viewer"),
                                     ("users", "scope", "lee")], ids=" ".join)
@pytest.mark.parametrize("pattern, sentence", [("a b", "subject pattern 'a b' has a space in it"),
                                               ("orders..x", "subject pattern 'orders..x' has an empty token")])
def test_a_scope_that_is_not_a_subject_pattern_is_a_usage_error_as_a_bad_role_is(cli, engine, command, pattern,
                                                                                  sentence):
    """It was the sentence alone (exit 2), where docs/security.md says the command's usage and
    the sentence, as a bad --role gives."""
    cli("users", "create", "lee", "--role", "operator", "--scope", "orders.>", "--password-stdin",
        input=support.PASSWORD)
    result = cli(*command, "--scope", "orders.>", "--scope", pattern, input=support.PASSWORD)
    assert result.exit_code == 2, result.output
    assert "Usage: " in result.output and f"{' '.join(command[:2])} [OPTIONS] NAME" in result.output, result.output
    assert f"Invalid value for '--scope': {sentence}" in result.output and "nothing was changed." in result.output
    assert get_user(engine, "zz1") is None and list_tokens(engine) == []
    assert get_user(engine, "lee").grants[0].to_dict() == {"role": "operator", "scopes": ["orders.>"]}


def test_a_scope_naming_a_source_this_dashboard_does_not_have_is_a_usage_error_unless_held_already(cli, engine):
    """--scope 'nosuch:orders.>' (only the default source here) was taken, and its holder saw
    nothing. One the account holds already (its source removed from DLQ_CONFIG since) stays."""
    unknown = ("names the source 'nosuch', which this dashboard does not have: its sources are default "
               "(DLQ_CONFIG names them); nothing was changed.")
    cli("users", "create", "lee", "--role", "operator", "--scope", "orders.>", "--password-stdin",
        input=support.PASSWORD)
    for command in (("users", "create", "zz1", "--role", "viewer", "--password-stdin"),
                    ("tokens", "create", "zz1", "--role", "viewer"), ("users", "scope", "lee")):
        result = cli(*command, "--scope", "nosuch:orders.>", input=support.PASSWORD)
        assert result.exit_code == 2 and result.output.startswith("Usage: "), result.output
        assert f"Invalid value for '--scope': scope 'nosuch:orders.>' {unknown}" in result.output, result.output
    assert get_user(engine, "zz1") is None and list_tokens(engine) == []
    assert get_user(engine, "lee").grants[0].to_dict() == {"role": "operator", "scopes": ["orders.>"]}
    assert cli("users", "scope", "lee", "--scope", "default:orders.>").exit_code == 0
    set_role_and_scopes(engine, "lee", "operator", parse_scopes(["gone:orders.>"]))
    kept = cli("users", "scope", "lee", "--scope", "gone:orders.>", "--scope", "billing.>")
    assert kept.exit_code == 0, kept.output
    assert get_user(engine, "lee").grants[0].to_dict() == {"role": "operator", "scopes": ["billing.>", "gone:orders.>"]}


def test_tokens_take_scopes_on_create_and_scope_and_tokens_list_shows_them(cli, engine, offline_app):
    created = cli("tokens", "create", "etl", "--role", "viewer", "--scope", "orders.>")
    assert created.exit_code == 0 and "API token etl (viewer over orders.>)" in created.output
    token = created.stdout.strip().splitlines()[-1]
    assert cli("tokens", "scope", "etl", "--role", "operator", "--scope", "orders.>", "--scope", "pay.*").exit_code == 0
    from dlq_dashboard.accounts import find_token

    assert find_token(engine, token).grants[0].to_dict() == {"role": "operator", "scopes": ["orders.>", "pay.*"]}
    [header, row] = [line.split() for line in cli("tokens", "list").output.strip().splitlines()]
    assert header[:3] == ["NAME", "ROLE", "SCOPES"] and row[:3] == ["etl", "operator", "orders.>,pay.*"]
    assert "no active token named 'ghost'" in cli("tokens", "scope", "ghost", "--all").output


def test_users_end_sessions_signs_the_user_out_everywhere_and_leaves_them_enabled(cli, engine, offline_app):
    cli("users", "create", "max", "--role", "viewer", "--password-stdin", input=support.PASSWORD)
    clients = [offline_app.test_client() for _ in range(2)]
    for client in clients:
        assert support.login(client, "max", support.PASSWORD).status_code == 302
        assert client.get("/").status_code == 200
    result = cli("users", "end-sessions", "max")
    assert result.exit_code == 0 and "Ended 2 sessions of max." in result.output
    assert all(client.get("/").status_code == 302 for client in clients)
    assert support.login(offline_app.test_client(), "max", support.PASSWORD).status_code == 302
    assert cli("users", "end-sessions", "ghost").exit_code == 1


def test_every_change_the_cli_makes_is_audited_as_cli_and_the_os_user(cli, engine):
    from dlq_dashboard.cli.output import cli_actor

    cli("users", "create", "ned", "--role", "viewer", "--password-stdin", input=support.PASSWORD)
    cli("users", "scope", "ned", "--scope", "orders.>")
    cli("users", "disable", "ned")
    cli("users", "enable", "ned")
    cli("users", "end-sessions", "ned")
    cli("users", "set-password", "ned", "--password-stdin", input="a brand new password\n")
    cli("tokens", "create", "bot", "--role", "viewer")
    cli("tokens", "scope", "bot", "--scope", "pay.>")
    cli("tokens", "revoke", "bot")
    audited = _audit(engine)
    assert [a for a, _, _ in audited] == ["user_create", "user_grant", "user_disable", "user_enable",
                                          "user_end_sessions", "user_password", "token_create", "token_grant",
                                          "token_revoke"]
    assert {actor for _, actor, _ in audited} == {cli_actor()}
    assert audited[1][2] == "ned: viewer over orders.> (was viewer over every subject)"


def test_python_app_py_runs_every_admin_command_flask_runs(offline_app, capsys):
    # `python app.py groups list` started the server's argument parser, which refused "groups".
    from dlq_dashboard.cli import main as cli_main

    registered = {name for name in offline_app.cli.commands if name not in ("run", "shell", "routes")}
    assert set(cli_main.ADMIN_COMMANDS) == registered == {"users", "tokens", "entries", "groups", "jobs", "purge"}
    for name in cli_main.ADMIN_COMMANDS:
        assert cli_main.main([name, "--help"]) == 0, name
        assert f"Usage: dlq-dashboard {name}" in capsys.readouterr().out


def test_users_create_refuses_a_name_another_user_holds_in_any_case_in_one_line(cli, engine):
    from dlq_dashboard.accounts import sign_in_oidc_user
    from dlq_dashboard.scopes import Grant

    sign_in_oidc_user(engine, "iss ops1", "ops1@example.com", (Grant("viewer"),))
    cli("users", "create", "viewer1", "--role", "viewer", "--password-stdin", input=support.PASSWORD)
    for name, holder in (("OPS1@EXAMPLE.COM", "ops1@example.com"), ("Viewer1", "viewer1")):
        result = cli("users", "create", name, "--role", "viewer", "--password-stdin", input=support.PASSWORD)
        assert result.exit_code == 1
        assert result.output.strip().splitlines() == [
            f"Error: the name {name!r} is taken: user {holder!r} holds it, and names that differ only in case are "
            "one name here"]
        assert get_user(engine, name) is None


@pytest.mark.parametrize("args", [("users", "create", "Dashboard", "--role", "admin", "--password-stdin"),
                                  ("users", "create", "mirror", "--role", "viewer", "--password-stdin"),
                                  ("tokens", "create", "RETENTION", "--role", "viewer"),
                                  ("tokens", "create", "dlq-dashboard", "--role", "operator")])
def test_a_name_the_dashboards_own_work_has_in_the_audit_is_refused_in_one_line(cli, engine, args):
    result = cli(*args, input=support.PASSWORD)
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert line == (f"Error: {args[0][:-1]} name {args[2]!r} is reserved, in any case, for the dashboard's own work "
                    "in the audit")
    assert get_user(engine, args[2]) is None and list_tokens(engine) == [] and _audit(engine) == []


def test_users_set_password_refuses_a_single_sign_on_user_in_one_line_and_changes_nothing(cli, engine):
    from sqlalchemy import text

    from dlq_dashboard.accounts import NO_PASSWORD, load_session_user, sign_in_oidc_user, start_session
    from dlq_dashboard.scopes import Grant

    user = sign_in_oidc_user(engine, "iss ops1", "ops1@example.com", (Grant("viewer"),))
    key = start_session(engine, user.id, via="oidc", grants=(Grant("viewer"),))
    before = _audit(engine)
    result = cli("users", "set-password", "ops1@example.com", "--password-stdin", input="longpassword1\n")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: ops1@example.com signs in with single sign-on: they have no password on this dashboard, and nothing "
        "was changed"]
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT password_hash FROM users WHERE name = 'ops1@example.com'")).scalar()
    assert stored == NO_PASSWORD and load_session_user(engine, key) is not None and _audit(engine) == before
    assert verify_password(engine, "ops1@example.com", "longpassword1") is None
    # Asked on the terminal, it is refused before a password is asked for.
    prompted = cli("users", "set-password", "ops1@example.com", input="longpassword1\nlongpassword1\n")
    assert prompted.exit_code == 1 and "Password" not in prompted.output
    assert "signs in with single sign-on" in prompted.output
