"""Single sign-on's settings and rules (sign_in.py): DLQ_OIDC_ROLES read into grants, the groups
claim found by a dotted path, and every wrong DLQ_OIDC_* value refused at start in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dlq_dashboard.config import ConfigError, load_settings
from dlq_dashboard.scopes import Grant, Scope
from dlq_dashboard.sign_in import GroupRule, claim_at, grants_for, groups_in, parse_rules

SSO = {"DLQ_OIDC_ISSUER": "https://idp.example.com/realms/main", "DLQ_OIDC_CLIENT_ID": "dlq"}


def test_the_specs_example_reads_as_four_rules():
    rules = parse_rules("dlq-admins=admin; dlq-ops=operator; team-orders=operator:orders.>,billing.>; *=viewer")
    assert rules == (GroupRule("dlq-admins", Grant("admin")), GroupRule("dlq-ops", Grant("operator")),
                     GroupRule("team-orders", Grant("operator", (Scope("billing.>"), Scope("orders.>")))),
                     GroupRule("*", Grant("viewer")))


def test_a_rule_may_limit_a_pattern_to_a_source_and_a_group_may_hold_slashes():
    [rule] = parse_rules(" /teams/orders = viewer:east:orders.* ;")
    assert rule == GroupRule("/teams/orders", Grant("viewer", (Scope("orders.*", "east"),)))


def test_grants_come_from_every_rule_naming_a_group_of_the_user_and_star_from_every_user():
    rules = parse_rules("a=operator:orders.>; b=viewer; a=operator:orders.>; *=viewer")
    assert grants_for(rules, frozenset({"a"})) == (Grant("operator", (Scope("orders.>"),)), Grant("viewer"))
    assert grants_for(rules, frozenset()) == (Grant("viewer"),)
    assert grants_for(parse_rules("a=admin"), frozenset({"b"})) == ()


def test_the_groups_claim_is_found_by_a_dotted_path_or_by_a_name_with_dots():
    claims = {"realm_access": {"roles": ["ops"]}, "https://example.com/groups": ["x"], "groups": "one"}
    assert claim_at(claims, "realm_access.roles") == ["ops"]
    assert claim_at(claims, "https://example.com/groups") == ["x"]
    assert claim_at(claims, "realm_access.missing") is None and claim_at(claims, "groups.x") is None
    assert groups_in(claims["groups"]) == {"one"} and groups_in(["a", 7, {"x": 1}, None, True]) == {"a", "7"}
    assert groups_in(None) == frozenset() and groups_in("  ") == frozenset()


def test_the_settings_are_read_with_their_defaults():
    s = load_settings({})
    assert (s.oidc_issuer, s.oidc_client_id, s.oidc_client_secret, s.oidc_roles) == (None, None, None, ())
    assert s.oidc_scopes == ("openid", "email", "profile") and s.oidc_groups_claim == "groups"
    assert s.oidc_name == "single sign-on" and s.local_login is True and s.session_hours == 12.0
    assert s.single_sign_on is False
    s = load_settings({**SSO, "DLQ_OIDC_CLIENT_SECRET": "x", "DLQ_OIDC_SCOPES": "openid email groups",
                       "DLQ_OIDC_GROUPS_CLAIM": "realm_access.roles", "DLQ_OIDC_ROLES": "ops=operator",
                       "DLQ_OIDC_NAME": "Keycloak", "DLQ_LOCAL_LOGIN": "false", "DLQ_SESSION_HOURS": "0.5"})
    assert s.single_sign_on and s.oidc_client_secret == "x" and s.oidc_scopes == ("openid", "email", "groups")
    assert s.oidc_groups_claim == "realm_access.roles" and s.oidc_roles == (GroupRule("ops", Grant("operator")),)
    assert (s.oidc_name, s.local_login, s.session_hours) == ("Keycloak", False, 0.5)


@pytest.mark.parametrize("environ,variable", [
    ({"DLQ_OIDC_ISSUER": "idp.example.com", "DLQ_OIDC_CLIENT_ID": "dlq"}, "DLQ_OIDC_ISSUER"),
    ({"DLQ_OIDC_ISSUER": "ftp://idp.example.com", "DLQ_OIDC_CLIENT_ID": "dlq"}, "DLQ_OIDC_ISSUER"),
    ({"DLQ_OIDC_ISSUER": "https://idp.example.com/?x=1", "DLQ_OIDC_CLIENT_ID": "dlq"}, "DLQ_OIDC_ISSUER"),
    ({"DLQ_OIDC_ISSUER": "https://idp.example.com"}, "DLQ_OIDC_ISSUER"),  # no client id
    ({"DLQ_OIDC_CLIENT_ID": "dlq"}, "DLQ_OIDC_CLIENT_ID"),  # no issuer
    ({"DLQ_OIDC_CLIENT_SECRET": "s"}, "DLQ_OIDC_CLIENT_SECRET"),
    ({"DLQ_OIDC_ROLES": "ops=operator"}, "DLQ_OIDC_ROLES"),
    ({**SSO, "DLQ_OIDC_ROLES": "ops"}, "DLQ_OIDC_ROLES"),
    ({**SSO, "DLQ_OIDC_ROLES": "=viewer"}, "DLQ_OIDC_ROLES"),
    ({**SSO, "DLQ_OIDC_ROLES": "ops=boss"}, "DLQ_OIDC_ROLES"),
    ({**SSO, "DLQ_OIDC_ROLES": "ops=admin:orders.>"}, "DLQ_OIDC_ROLES"),  # admin is never scoped
    ({**SSO, "DLQ_OIDC_ROLES": "ops=operator:orders..x"}, "DLQ_OIDC_ROLES"),
    ({**SSO, "DLQ_OIDC_ROLES": "ops=operator:"}, "DLQ_OIDC_ROLES"),
    ({**SSO, "DLQ_OIDC_SCOPES": "email profile"}, "DLQ_OIDC_SCOPES"),
    ({**SSO, "DLQ_OIDC_GROUPS_CLAIM": "realm_access..roles"}, "DLQ_OIDC_GROUPS_CLAIM"),
    ({**SSO, "DLQ_OIDC_GROUPS_CLAIM": "my groups"}, "DLQ_OIDC_GROUPS_CLAIM"),
    ({**SSO, "DLQ_OIDC_NAME": "x" * 61}, "DLQ_OIDC_NAME"),
    ({**SSO, "DLQ_LOCAL_LOGIN": "perhaps"}, "DLQ_LOCAL_LOGIN"),
    ({"DLQ_LOCAL_LOGIN": "false"}, "DLQ_LOCAL_LOGIN"),  # nobody could sign in
    ({"DLQ_SESSION_HOURS": "0"}, "DLQ_SESSION_HOURS"),
    ({"DLQ_SESSION_HOURS": "-1"}, "DLQ_SESSION_HOURS"),
    ({"DLQ_SESSION_HOURS": "twelve"}, "DLQ_SESSION_HOURS"),
    ({"DLQ_SESSION_HOURS": "nan"}, "DLQ_SESSION_HOURS"),
    ({"DLQ_SESSION_HOURS": "9000"}, "DLQ_SESSION_HOURS"),
])
def test_a_wrong_single_sign_on_value_is_refused_in_one_line_naming_the_variable(environ, variable):
    with pytest.raises(ConfigError) as raised:
        load_settings(environ)
    message = str(raised.value)
    assert message.startswith(f"{variable}=") and "\n" not in message and " is not valid" in message


def test_the_client_secret_is_not_shown_when_it_is_refused():
    with pytest.raises(ConfigError) as raised:
        load_settings({"DLQ_OIDC_CLIENT_SECRET": "hunter2"})
    assert "hunter2" not in str(raised.value)


def test_a_bad_rule_says_which_rule_and_why():
    with pytest.raises(ConfigError) as raised:
        load_settings({**SSO, "DLQ_OIDC_ROLES": "dlq-admins=admin; ops=admin:orders.>"})
    assert str(raised.value) == (
        "DLQ_OIDC_ROLES='dlq-admins=admin; ops=admin:orders.>' is not valid: rule 'ops=admin:orders.>': an admin "
        "is never scoped: give the admin role without scopes; write rules such as "
        "'dlq-admins=admin; team-orders=operator:orders.>; *=viewer'")


@pytest.mark.slow
@pytest.mark.parametrize("environ,line", [
    ({**SSO, "DLQ_OIDC_ROLES": "ops=operator:orders.>.x"},
     "error: DLQ_OIDC_ROLES='ops=operator:orders.>.x' is not valid: rule 'ops=operator:orders.>.x'"),
    ({"DLQ_OIDC_ISSUER": "https://idp.example.com"},
     "error: DLQ_OIDC_ISSUER='https://idp.example.com' is not valid without DLQ_OIDC_CLIENT_ID"),
    ({"DLQ_SESSION_HOURS": "0"}, "error: DLQ_SESSION_HOURS='0' is not valid"),
])
def test_the_app_refuses_to_start_with_a_wrong_single_sign_on_value(tmp_path, environ, line):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "app.py"], env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **environ},
                            capture_output=True, text=True, timeout=60, cwd=root)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(line), result.stderr
