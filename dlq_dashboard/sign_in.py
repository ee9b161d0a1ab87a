"""Single sign-on's settings (read by config.py) and DLQ_OIDC_ROLES: which groups of the
identity provider hold which grants.

A rule is ``GROUP=ROLE[:PATTERN,PATTERN...]``; rules are separated by ``;`` and the group ``*``
matches every signed-in user. The rules are read at every sign-in, so a person removed from a
group holds less at their next sign-in. Pure functions: config.py parses the rules at start,
web/oidc.py applies them to the groups an ID token names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from urllib.parse import urlsplit

from .redaction import scrub
from .scopes import Grant, ScopeError, parse_scopes

EVERYONE = "*"


class SettingError(ValueError):
    """A DLQ_OIDC_* (or DLQ_LOCAL_LOGIN, DLQ_SESSION_HOURS) value that cannot be used; the
    message is one line naming the variable (config.py raises it as a ConfigError)."""


class RuleError(ValueError):
    """A rule that cannot be read; the message says which and why."""


@dataclass(frozen=True)
class GroupRule:
    """Members of ``group`` (every signed-in user for ``*``) hold ``grant``."""

    group: str
    grant: Grant

    def applies_to(self, groups: frozenset[str]) -> bool:
        return self.group == EVERYONE or self.group in groups


def parse_rules(text: str) -> tuple[GroupRule, ...]:
    """The rules written in ``text``; RuleError naming the first one that is not valid."""
    rules = []
    for raw in text.split(";"):
        rule = raw.strip()
        if not rule:
            continue
        group, sep, granted = rule.partition("=")
        group, granted = group.strip(), granted.strip()
        if not sep or not group or not granted:
            raise RuleError(f"rule {rule!r} is not GROUP=ROLE or GROUP=ROLE:PATTERN,PATTERN")
        role, colon, patterns = granted.partition(":")
        role = role.strip()
        try:
            scopes = parse_scopes([patterns]) if colon else None
            grant = Grant(role, scopes)
        except ScopeError as exc:
            raise RuleError(f"rule {rule!r}: {exc}") from None
        rules.append(GroupRule(group, grant))
    return tuple(rules)


def claim_at(claims: Mapping[str, Any], path: str) -> Any:
    """The value a dotted path reaches in the claims (``realm_access.roles``), or None.

    A claim whose own name holds dots (``https://example.com/groups``, as Auth0 and Okta name
    theirs) is found whole before the path is split."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def groups_in(value: Any) -> frozenset[str]:
    """The groups a claim's value names: a list of names, or one name as a string."""
    if isinstance(value, str):
        return frozenset([value]) if value.strip() else frozenset()
    if isinstance(value, (list, tuple)):
        return frozenset(str(v) for v in value if isinstance(v, (str, int)) and not isinstance(v, bool))
    return frozenset()


def grants_for(rules: Iterable[GroupRule], groups: frozenset[str]) -> tuple[Grant, ...]:
    """The grants of every rule whose group is among ``groups`` (no duplicates, in rule order);
    empty when none applies: such a person may not use the dashboard."""
    found: list[Grant] = []
    for rule in rules:
        if rule.applies_to(groups) and rule.grant not in found:
            found.append(rule.grant)
    return tuple(found)


# --- the settings (config.py's parsers: variable name, raw value -> value) --------------------

def issuer(name: str, raw: str) -> str:
    """DLQ_OIDC_ISSUER: one http(s) URL without query or fragment, kept as written (the ID
    token's ``iss`` must equal the issuer the provider's discovery document names)."""
    url = raw.strip()
    try:
        parts = urlsplit(url)
        valid = (parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.query
                 and not parts.fragment and "," not in url and not any(c.isspace() for c in url))
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        valid = False
    if not valid:
        raise SettingError(f"{name}={scrub(raw)!r} is not valid: use the identity provider's issuer URL, "
                           "such as https://keycloak.example.com/realms/main")
    return url


def oidc_roles(name: str, raw: str) -> tuple[GroupRule, ...]:
    """DLQ_OIDC_ROLES: the rules (parse_rules)."""
    try:
        return parse_rules(raw)
    except RuleError as exc:
        raise SettingError(f"{name}={raw!r} is not valid: {exc}; write rules such as "
                           "'dlq-admins=admin; team-orders=operator:orders.>; *=viewer'") from None


def oidc_scopes(name: str, raw: str) -> tuple[str, ...]:
    """DLQ_OIDC_SCOPES: scopes separated by spaces, ``openid`` among them."""
    scopes = tuple(dict.fromkeys(raw.replace(",", " ").split()))
    if "openid" not in scopes or not all(s.isprintable() and '"' not in s for s in scopes):
        raise SettingError(f"{name}={raw!r} is not valid: use scopes separated by spaces, openid among them, "
                           "such as 'openid email profile'")
    return scopes


def claim_path(name: str, raw: str) -> str:
    """DLQ_OIDC_GROUPS_CLAIM: a claim's name or a dotted path (``realm_access.roles``)."""
    path = raw.strip()
    if not path or any(c.isspace() for c in path) or "" in path.split("."):
        raise SettingError(f"{name}={raw!r} is not valid: use a claim's name, or a dotted path into it "
                           "such as realm_access.roles")
    return path


def button_words(name: str, raw: str) -> str:
    """DLQ_OIDC_NAME: the words after "Sign in with"."""
    words = raw.strip()
    if not words or len(words) > 60 or not words.isprintable():
        raise SettingError(f"{name}={raw!r} is not valid: use the provider's name as people know it, "
                           "1 to 60 characters, such as Okta")
    return words


def session_hours(name: str, raw: str) -> float:
    """DLQ_SESSION_HOURS: a number of hours above 0, at most a year."""
    try:
        hours = float(raw.strip())
    except ValueError:
        hours = 0.0
    if not 0 < hours <= 8760:  # NaN fails this too
        raise SettingError(f"{name}={raw!r} is not valid: use a positive number of hours, at most 8760, "
                           "such as 12 or 0.5")
    return hours


def check_single_sign_on(settings) -> None:
    """The single sign-on settings taken together (Settings): SettingError for a set that
    cannot work."""
    if settings.oidc_issuer and not settings.oidc_client_id:
        raise SettingError(f"DLQ_OIDC_ISSUER={settings.oidc_issuer!r} is not valid without DLQ_OIDC_CLIENT_ID: "
                           "give the client id the identity provider registered for the dashboard")
    if not settings.oidc_issuer:
        for variable, value in (("DLQ_OIDC_CLIENT_ID", settings.oidc_client_id),
                                ("DLQ_OIDC_CLIENT_SECRET", "..." if settings.oidc_client_secret else None),
                                ("DLQ_OIDC_ROLES", "; ".join(f"{r.group}={r.grant.role}" for r in settings.oidc_roles))):
            if value:
                raise SettingError(f"{variable}={value!r} is not valid without DLQ_OIDC_ISSUER: "
                                   "set the identity provider's issuer URL too")
        if not settings.local_login and not settings.trusted_header:
            raise SettingError("DLQ_LOCAL_LOGIN='false' is not valid without DLQ_OIDC_ISSUER: nobody could "
                               "sign in to the pages; set up single sign-on or keep the password form")
