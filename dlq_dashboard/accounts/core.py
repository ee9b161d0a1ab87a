"""What the account modules share: the values they return, the checks of names, roles and scopes,
the audit record of a change, and the hash a token or a session key is stored as."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime

from ..actors import SYSTEM_ACTORS
from ..db.models import Action
from ..scopes import ROLES, Grant, Scope, ScopeError, parse_scopes
from ..times import utcnow

# Letters, digits and . _ @ + - (e-mail addresses from single sign-on fit). No ':' so that no
# user can be named like a token or a command in the audit ("token:<name>", "cli:<os user>"), no
# spaces or markup; and none of the names the dashboard's own work has there (actors.py).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
ACTIONS = Action.__table__
MIN_PASSWORD_LENGTH = 8


class AccountError(ValueError):
    """A user or token request that cannot be done; the message says why."""


@dataclass(frozen=True)
class UserInfo:
    """A user as the rest of the app sees it (never the password hash)."""

    id: int
    name: str
    role: str
    disabled: bool
    scopes: tuple[Scope, ...] | None = None  # None: unscoped
    via: str = "password"  # or "oidc": made by a single sign-on
    last_sign_in_at: datetime | None = None
    # The grants of the session this user was loaded for, when its sign-in gave them (single
    # sign-on: sessions.grants); None: the user's own role and scopes.
    session_grants: tuple[Grant, ...] | None = field(default=None, compare=False)
    # Every grant the last single sign-on gave (users.grants); None for a local user. What an
    # admin is shown, since the role and scopes hold only the highest of them.
    signed_in_grants: tuple[Grant, ...] | None = field(default=None, compare=False)

    @property
    def grants(self) -> tuple[Grant, ...]:
        """What the user holds: their session's grants where its sign-in gave them, else what
        their own role and scopes grant."""
        if self.session_grants is not None:
            return self.session_grants
        return (Grant(self.role, self.scopes),)

    @property
    def given(self) -> tuple[Grant, ...]:
        """What /admin/users and ``users list`` show: every grant of the last single sign-on
        where one gave them (read again at each sign-in), else the user's own role and scopes."""
        return self.signed_in_grants or (Grant(self.role, self.scopes),)


@dataclass(frozen=True)
class TokenInfo:
    """An API token's name, role, scopes and state (never the token or its hash)."""

    id: int
    name: str
    role: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None
    scopes: tuple[Scope, ...] | None = None  # None: unscoped

    @property
    def grants(self) -> tuple[Grant, ...]:
        return (Grant(self.role, self.scopes),)


def check_role(role: str) -> str:
    """The role if it is one of ROLES; otherwise AccountError."""
    if role not in ROLES:
        raise AccountError(f"role {role!r} is not valid: use one of {', '.join(ROLES)}")
    return role


def check_name(name: str, what: str = "user") -> str:
    """The name, stripped, if it is 1-64 ASCII letters, digits or . _ @ + - and, in any case,
    none of the dashboard's own actors (actors.SYSTEM_ACTORS); otherwise AccountError."""
    name = (name or "").strip()
    if not _NAME.fullmatch(name):
        raise AccountError(f"{what} name {name!r} is not valid: use 1-64 ASCII letters (a-z, A-Z), digits or . _ @ + -, "
                           "starting with a letter or digit")
    if name.lower() in SYSTEM_ACTORS:
        raise AccountError(f"{what} name {name!r} is reserved, in any case, for the dashboard's own work in the audit")
    return name


def check_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountError(f"the password is too short: use {MIN_PASSWORD_LENGTH} characters or more")


def check_grant(role: str, scopes: tuple[Scope, ...] | None) -> Grant:
    """The grant of ``role`` over ``scopes``; AccountError for a bad role or a scoped admin."""
    check_role(role)
    try:
        return Grant(role, scopes)
    except ScopeError as exc:
        raise AccountError(str(exc)) from None


def read_scopes(texts) -> tuple[Scope, ...] | None:
    """The scopes written in ``texts`` (scopes.parse_scopes: None for none at all); AccountError
    with the sentence of the first bad one."""
    try:
        return parse_scopes(texts)
    except ScopeError as exc:
        raise AccountError(str(exc)) from None


def describe_grant(role: str, scopes: tuple[Scope, ...] | None) -> str:
    """A role and its scopes in words, as the audit and the commands say them."""
    return f"{role} over {', '.join(map(str, scopes)) if scopes else 'every subject'}"


def audit(conn, actor: str | None, action: str, note: str, **detail) -> None:
    # The account audited is named in the detail (``user`` or ``token``), the actor as for the entries.
    if actor is not None:
        conn.execute(ACTIONS.insert().values(action=action, actor=actor, at=utcnow(), note=note,
                                             detail=json.dumps(detail, separators=(",", ":"))))


def texts(scopes: tuple[Scope, ...] | None) -> list[str] | None:
    return None if scopes is None else [str(s) for s in scopes]


def hash_token(token: str) -> str:
    """API tokens are random (256 bits), so a fast hash is enough to store them."""
    return hashlib.sha256(token.encode()).hexdigest()

