"""Subject patterns and grants: what part of the dead letters a person or a token may reach.

A **scope** is a NATS subject pattern (``orders.>``, ``orders.*.created``, ``billing.invoice``),
optionally limited to one source (``default:orders.>``; SPEC section 12). A **grant** is a role,
optionally limited to scopes; a grant without scopes covers everything. A user or token holds one
or more grants (a single sign-on user holds one per rule of DLQ_OIDC_ROLES whose group they are
in; a local user and a token hold one). Team patterns (DLQ_TEAMS) use the same matching.

Pure functions only: stored as JSON text by accounts/, applied to reads by access/visible.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Sequence

ROLES = ("viewer", "operator", "admin")
RANK = {role: i for i, role in enumerate(ROLES)}
#: The source every entry belongs to until several sources are configured (SPEC section 12).
DEFAULT_SOURCE = "default"
_SOURCE_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class ScopeError(ValueError):
    """A pattern, a scope or a grant that is not valid; the message says why, in one sentence."""


def check_pattern(pattern: str) -> str:
    """The subject pattern, stripped, if NATS would take it as a subscription subject: tokens
    separated by ``.``, none empty, ``*`` a whole token, ``>`` a whole token and only the last;
    no spaces. Otherwise ScopeError."""
    pattern = (pattern or "").strip()
    if not pattern:
        raise ScopeError("a subject pattern is empty")
    if any(c.isspace() for c in pattern):
        raise ScopeError(f"subject pattern {pattern!r} has a space in it")
    tokens = pattern.split(".")
    for i, token in enumerate(tokens):
        if not token:
            raise ScopeError(f"subject pattern {pattern!r} has an empty token (two dots, or a dot at an end)")
        if token == ">" and i != len(tokens) - 1:
            raise ScopeError(f"subject pattern {pattern!r} has '>' before its last token")
        if token not in ("*", ">") and ("*" in token or ">" in token):
            raise ScopeError(f"subject pattern {pattern!r}: a wildcard must be a whole token")
    return pattern


def subject_matches(pattern: str, subject: str | None) -> bool:
    """Whether NATS would deliver a message of ``subject`` to a subscription on ``pattern``."""
    if not subject:
        return False
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(have) == len(want)


def pattern_within(inner: str, outer: str) -> bool:
    """Whether every subject the NATS pattern ``inner`` matches, ``outer`` matches too."""
    want, have = outer.split("."), inner.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or have[i] == ">" or (token != "*" and (have[i] == "*" or token != have[i])):
            return False
    return len(have) == len(want)


@dataclass(frozen=True)
class Scope:
    """A subject pattern, limited to one source when ``source`` is set. Scopes sort by pattern,
    the one of every source before those of one source."""

    pattern: str
    source: str | None = None

    def __lt__(self, other: "Scope") -> bool:
        return (self.pattern, self.source or "") < (other.pattern, other.source or "")

    @classmethod
    def parse(cls, text: str) -> "Scope":
        """``orders.>`` or ``default:orders.>``; ScopeError when either part is not valid."""
        text = (text or "").strip()
        source, sep, pattern = text.partition(":")
        if not sep:
            return cls(check_pattern(text))
        source = source.strip()
        if not source or not set(source) <= _SOURCE_CHARS:
            raise ScopeError(f"scope {text!r}: the source before ':' must be letters, digits, '_' or '-'")
        return cls(check_pattern(pattern), source)

    def covers(self, subject: str | None, source: str | None = DEFAULT_SOURCE) -> bool:
        """Whether an entry of ``subject`` (in ``source``) is inside this scope."""
        if self.source is not None and self.source != (source or DEFAULT_SOURCE):
            return False
        return subject_matches(self.pattern, subject)

    def __str__(self) -> str:
        return f"{self.source}:{self.pattern}" if self.source else self.pattern


def parse_scopes(texts: Iterable[str] | None) -> tuple[Scope, ...] | None:
    """The scopes written in ``texts`` (each may hold several, separated by ','), sorted and
    without duplicates; None (everything) for no texts at all. ScopeError for a bad one, and for
    texts that name no pattern (``--scope ""``, a script's empty variable): read as everything,
    they would widen a grant that was meant to narrow it."""
    if texts is None:
        return None
    texts = list(texts)
    found = {Scope.parse(part) for text in texts for part in str(text).split(",") if part.strip()}
    if not found and texts:
        raise ScopeError(f"{', '.join(repr(str(t)) for t in texts)[:60]} names no subject pattern (such as "
                         "orders.>); every subject is given by leaving the scopes out")
    return tuple(sorted(found)) or None


def check_sources(scopes: Iterable[Scope] | None, known: Iterable[str]) -> None:
    """ScopeError for a scope of one source that is not among ``known`` (the sources this
    dashboard is configured with, DLQ_CONFIG): it would reach nothing, and its holder would see
    an empty dashboard with nothing saying why (``nosuch:orders.>``, a typo of ``billing``)."""
    known = tuple(known)
    for scope in scopes or ():
        if scope.source is not None and scope.source not in known:
            raise ScopeError(f"scope {str(scope)!r} names the source {scope.source!r}, which this dashboard does "
                             f"not have: its sources are {', '.join(known)} (DLQ_CONFIG names them)")


@dataclass(frozen=True)
class Grant:
    """A role, over everything (``scopes`` None) or over the entries its scopes cover. An admin
    grant is never scoped."""

    role: str
    scopes: tuple[Scope, ...] | None = None

    def __post_init__(self) -> None:
        if self.role not in RANK:
            raise ScopeError(f"role {self.role!r} is not valid: use one of {', '.join(ROLES)}")
        if self.role == "admin" and self.scopes is not None:
            raise ScopeError("an admin is never scoped: give the admin role without scopes")

    def covers(self, subject: str | None, source: str | None = DEFAULT_SOURCE) -> bool:
        """Whether this grant reaches an entry of ``subject`` in ``source``."""
        return self.scopes is None or any(scope.covers(subject, source) for scope in self.scopes)

    def to_dict(self) -> dict:
        """The grant as GET /api/me shows it: ``{"role", "scopes": [...] or null}``."""
        return {"role": self.role, "scopes": None if self.scopes is None else [str(s) for s in self.scopes]}

    @classmethod
    def from_dict(cls, data: dict) -> "Grant":
        return cls(data["role"], parse_scopes(data.get("scopes")))


def highest_role(grants: Sequence[Grant]) -> str | None:
    """The highest role among ``grants`` (what decides which routes may be used), or None."""
    return max((g.role for g in grants), key=RANK.__getitem__, default=None)


def scopes_for(grants: Sequence[Grant], role: str) -> tuple[Scope, ...] | None | bool:
    """What the grants of ``role`` or above cover together: None for everything, a tuple of
    scopes for part of it, False when no grant reaches ``role`` at all."""
    reaching = [g for g in grants if RANK[g.role] >= RANK[role]]
    if not reaching:
        return False
    if any(g.scopes is None for g in reaching):
        return None
    return tuple(sorted({scope for g in reaching for scope in g.scopes}))


def grants_to_json(grants: Sequence[Grant]) -> str:
    """The grants as stored in a session row."""
    return json.dumps([g.to_dict() for g in grants], separators=(",", ":"))


def grants_from_json(text: str) -> tuple[Grant, ...]:
    """The grants a session row stores."""
    return tuple(Grant.from_dict(item) for item in json.loads(text))


def scopes_to_json(scopes: tuple[Scope, ...] | None) -> str | None:
    """Scopes as stored on a user or a token (None: unscoped)."""
    return None if scopes is None else json.dumps([str(s) for s in scopes])


def scopes_from_json(text: str | None) -> tuple[Scope, ...] | None:
    """The scopes a user or token row stores."""
    return None if text is None else parse_scopes(json.loads(text))
