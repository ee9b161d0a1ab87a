"""Users, their login sessions and API tokens: create, list, disable, revoke, end (used by the CLI,
the login and the first start)."""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from werkzeug.security import check_password_hash, generate_password_hash

from .db.bounds import Bounds, bounded
from .db.engine import write_transaction
from .db.liveness import describe
from .db.models import ApiToken, LoginSession, User
from .scopes import (ROLES, Grant, Scope, ScopeError, grants_from_json, grants_to_json, highest_role, scopes_for,
                     scopes_from_json, scopes_to_json)
from .times import utcnow

MIN_PASSWORD_LENGTH = 8
# Letters, digits and . _ @ + - (e-mail addresses from single sign-on fit). No ':' so that no
# user can be named like a token in the audit ("token:<name>"), no spaces or markup.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
# A hash of a random password, checked when the user does not exist, so that a login for
# an unknown name takes as long as one for a known name.
_DUMMY_HASH = generate_password_hash(secrets.token_hex(16))
# How often a token's last use is written: a script polling every second must not turn
# every read into a database write.
_LAST_USED_EVERY = timedelta(minutes=1)
# A session row ended, or not seen, this long ago is deleted at the next login: its cookie has
# expired long before (the idle lifetime is 12 hours unless configured otherwise).
SESSION_ROWS_KEPT = timedelta(days=30)
# The password hash of a user made by single sign-on: no password matches it.
NO_PASSWORD = "!single-sign-on"

SESSIONS = LoginSession.__table__
# The write waits at most this long (for SQLite's write lock, PostgreSQL's row lock): a token's
# request is not held up behind the mirror's writes for a timestamp.
_LAST_USE_BOUNDS = Bounds(statement=1.0)
# The engines whose last write of a token's last use failed (logged once until one succeeds).
_LAST_USE_FAILING: weakref.WeakSet[Engine] = weakref.WeakSet()
log = logging.getLogger(__name__)


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
    # The grants of the session this user was loaded for, when its sign-in gave them (single
    # sign-on: sessions.grants); None: the user's own role and scopes.
    session_grants: tuple[Grant, ...] | None = field(default=None, compare=False)

    @property
    def grants(self) -> tuple[Grant, ...]:
        """What the user holds: their session's grants where its sign-in gave them, else what
        their own role and scopes grant."""
        if self.session_grants is not None:
            return self.session_grants
        return (Grant(self.role, self.scopes),)


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
    """The name, stripped, if it is 1-64 letters, digits or . _ @ + - ; otherwise AccountError."""
    name = (name or "").strip()
    if not _NAME.fullmatch(name):
        raise AccountError(f"{what} name {name!r} is not valid: use 1-64 letters, digits or . _ @ + -, "
                           "starting with a letter or digit")
    return name


def _check_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountError(f"the password is too short: use {MIN_PASSWORD_LENGTH} characters or more")


def check_grant(role: str, scopes: tuple[Scope, ...] | None) -> Grant:
    """The grant of ``role`` over ``scopes``; AccountError for a bad role or a scoped admin."""
    check_role(role)
    try:
        return Grant(role, scopes)
    except ScopeError as exc:
        raise AccountError(str(exc)) from None


def _user_info(row) -> UserInfo:
    return UserInfo(row.id, row.name, row.role, bool(row.disabled), scopes_from_json(row.scopes), row.via)


# --- users ------------------------------------------------------------------------------------

def create_user(engine: Engine, name: str, password: str, role: str,
                scopes: tuple[Scope, ...] | None = None) -> UserInfo:
    """Create a user with a slow password hash (werkzeug's scrypt), its role limited to
    ``scopes`` when given (scopes.parse_scopes)."""
    check_grant(role, scopes)
    name = check_name(name)
    _check_password(password)
    password_hash = generate_password_hash(password)
    try:
        with write_transaction(engine) as conn:
            if conn.execute(select(User.id).where(User.name == name)).first():
                raise AccountError(f"user {name!r} exists already")
            result = conn.execute(User.__table__.insert().values(
                name=name, password_hash=password_hash, role=role, disabled=False, created_at=utcnow(),
                scopes=scopes_to_json(scopes), via="password"))
    except IntegrityError:  # another process created the same name between check and insert
        raise AccountError(f"user {name!r} exists already") from None
    return UserInfo(result.inserted_primary_key[0], name, role, False, scopes)


def get_user(engine: Engine, name: str) -> UserInfo | None:
    """The user of that name, or None."""
    with engine.connect() as conn:
        row = conn.execute(select(User.__table__).where(User.name == (name or "").strip())).first()
    return _user_info(row) if row else None


def verify_password(engine: Engine, name: str, password: str) -> UserInfo | None:
    """The user if the name and password match and the user is enabled, else None.

    Unknown, disabled and wrong-password cases cost the same hash, so timing tells nothing.
    """
    with engine.connect() as conn:
        user = conn.execute(select(User.__table__).where(User.name == (name or "").strip())).first()
    if user is None or user.via != "password":
        # A single sign-on user has no password: signing in as one needs the provider.
        check_password_hash(_DUMMY_HASH, password)
        return None
    if not check_password_hash(user.password_hash, password) or user.disabled:
        return None
    return _user_info(user)


# --- sessions ---------------------------------------------------------------------------------

def start_session(engine: Engine, user_id: int, *, hours: float = 12.0, via: str = "password",
                  grants: tuple[Grant, ...] | None = None, id_token: str | None = None) -> str:
    """A new session of the user, ending ``hours`` after now (DLQ_SESSION_HOURS); returns the
    random key the cookie carries (only its hash is stored). A single sign-on session keeps the
    grants its sign-in gave and the ID token its logout sends back. Rows long ended or unseen
    are deleted on the way."""
    key = secrets.token_urlsafe(32)
    now = utcnow()
    with write_transaction(engine) as conn:
        conn.execute(delete(SESSIONS).where(or_(SESSIONS.c.ended_at < now - SESSION_ROWS_KEPT,
                                                SESSIONS.c.last_seen_at < now - SESSION_ROWS_KEPT)))
        conn.execute(SESSIONS.insert().values(
            id=hash_token(key), user_id=user_id, created_at=now, last_seen_at=now, ended_at=None, via=via,
            grants=None if grants is None else grants_to_json(grants), expires_at=now + timedelta(hours=hours),
            id_token=id_token))
    return key


def load_session_user(engine: Engine, session_key: str, *, hours: float = 12.0) -> UserInfo | None:
    """The user of the session ``session_key`` names, if the session has neither ended nor
    expired and the user exists and is enabled, holding the session's grants where its sign-in
    gave them; records that the session was seen (at most once a minute). A row written before
    sessions expired expires ``hours`` after it was made."""
    if not session_key:
        return None
    session_id = hash_token(session_key)
    with engine.connect() as conn:
        row = conn.execute(select(User.__table__, SESSIONS.c.last_seen_at, SESSIONS.c.created_at.label("since"),
                                  SESSIONS.c.expires_at, SESSIONS.c.grants.label("session_grants"))
                           .join(SESSIONS, SESSIONS.c.user_id == User.id)
                           .where(SESSIONS.c.id == session_id, SESSIONS.c.ended_at.is_(None))).first()
    if row is None or row.disabled:
        return None
    now = utcnow()
    if now >= (row.expires_at or row.since + timedelta(hours=hours)):
        return None
    if now - row.last_seen_at >= _LAST_USED_EVERY:
        try:
            with write_transaction(engine) as conn:
                conn.execute(update(SESSIONS).where(SESSIONS.c.id == session_id).values(last_seen_at=now))
        except SQLAlchemyError as exc:
            # Only a record: a database that reads but cannot write (a full disk) must not
            # fail the request of a valid session.
            log.warning("a session's last use could not be written: %s", exc.__class__.__name__)
    user = _user_info(row)
    if row.session_grants is None:
        return user
    grants = grants_from_json(row.session_grants)
    if not grants:
        return None
    return UserInfo(user.id, user.name, highest_role(grants), user.disabled, user.scopes, user.via,
                    session_grants=grants)


def end_session(engine: Engine, session_key: str) -> str | None:
    """End one session (logout): its cookie, and every copy of it, stops working. Returns the
    ID token of a single sign-on session (for the provider's logout), else None."""
    session_id = hash_token(session_key)
    with write_transaction(engine) as conn:
        id_token = conn.execute(select(SESSIONS.c.id_token).where(SESSIONS.c.id == session_id)).scalar()
        conn.execute(update(SESSIONS).where(SESSIONS.c.id == session_id,
                                            SESSIONS.c.ended_at.is_(None)).values(ended_at=utcnow()))
    return id_token


def end_sessions(engine: Engine, user_id: int) -> int:
    """End every session of a user (an admin's action); returns how many were open."""
    with write_transaction(engine) as conn:
        return _end_all_sessions(conn, user_id)


def _end_all_sessions(conn, user_id: int) -> int:
    done = conn.execute(update(SESSIONS).where(SESSIONS.c.user_id == user_id, SESSIONS.c.ended_at.is_(None))
                        .values(ended_at=utcnow()))
    return done.rowcount


# --- single sign-on users ---------------------------------------------------------------------

def sign_in_oidc_user(engine: Engine, subject: str, name: str, grants: tuple[Grant, ...]) -> UserInfo:
    """The user a single sign-on identifies by ``subject`` (issuer + sub), made at its first
    sign-in and brought up to date at every one: name, role (the highest grant), the scopes of
    that role's grants, and the time. AccountError for a disabled user, a name that cannot be
    used, or one a local user holds already."""
    role = highest_role(grants)
    if role is None:
        raise AccountError("no grant to sign in with")
    covered = scopes_for(grants, role)
    # A user row holds one grant: the highest role over what its grants cover (a part of what
    # the session holds, never more), for the channels that read the row (a proxy's header).
    scopes = None if covered is None or covered is False else covered
    name = check_name(name)
    now = utcnow()
    values = dict(name=name, role=role, scopes=scopes_to_json(scopes), last_sign_in_at=now)
    try:
        with write_transaction(engine) as conn:
            row = conn.execute(select(User.__table__).where(User.oidc_subject == subject)).first()
            holder = conn.execute(select(User.oidc_subject).where(User.name == name)).first()
            if holder is not None and holder.oidc_subject != subject:
                raise AccountError(f"the name {name!r} belongs to another user of this dashboard")
            if row is None:
                result = conn.execute(User.__table__.insert().values(
                    **values, password_hash=NO_PASSWORD, disabled=False, created_at=now, via="oidc",
                    oidc_subject=subject))
                user_id, disabled = result.inserted_primary_key[0], False
            else:
                user_id, disabled = row.id, bool(row.disabled)
                if not disabled:
                    conn.execute(update(User.__table__).where(User.id == row.id).values(**values))
    except IntegrityError:  # another sign-in of the same person, or the same name, at the same time
        raise AccountError(f"the name {name!r} belongs to another user of this dashboard") from None
    if disabled:
        raise AccountError("this account is disabled on this dashboard")
    return UserInfo(user_id, name, role, False, scopes, "oidc")


# --- passwords and disabling -------------------------------------------------------------------

def set_password(engine: Engine, name: str, password: str) -> None:
    """Give a user a new password; every session they had ends."""
    _check_password(password)
    password_hash = generate_password_hash(password)
    with write_transaction(engine) as conn:
        user_id = conn.execute(select(User.id).where(User.name == name)).scalar()
        if user_id is None:
            raise AccountError(f"no user named {name!r}")
        conn.execute(update(User.__table__).where(User.id == user_id).values(password_hash=password_hash))
        _end_all_sessions(conn, user_id)


def list_users(engine: Engine) -> list[UserInfo]:
    """Every user, by name."""
    with engine.connect() as conn:
        rows = conn.execute(select(User.__table__).order_by(User.name)).all()
    return [_user_info(u) for u in rows]


def set_disabled(engine: Engine, name: str, disabled: bool) -> None:
    """Disable (or enable) a user; either way their sessions end."""
    with write_transaction(engine) as conn:
        user_id = conn.execute(select(User.id).where(User.name == name)).scalar()
        if user_id is None:
            raise AccountError(f"no user named {name!r}")
        conn.execute(update(User.__table__).where(User.id == user_id).values(disabled=disabled))
        _end_all_sessions(conn, user_id)


def count_users(engine: Engine) -> int:
    """How many users exist (disabled ones included)."""
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(User)).scalar_one()


def ensure_first_admin(engine: Engine) -> str | None:
    """With no user at all, create ``admin`` with a random password and return the password."""
    if count_users(engine):
        return None
    password = secrets.token_urlsafe(12)
    try:
        create_user(engine, "admin", password, "admin")
    except AccountError:  # another process created it first
        return None
    return password


# --- API tokens -------------------------------------------------------------------------------

def hash_token(token: str) -> str:
    """API tokens are random (256 bits), so a fast hash is enough to store them."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh API token to show once."""
    return "dlq_" + secrets.token_urlsafe(32)


def create_token(engine: Engine, name: str, role: str, scopes: tuple[Scope, ...] | None = None) -> str:
    """Create an API token, its role limited to ``scopes`` when given, and return it; only its
    hash is stored.

    A revoked token's name may be used again: the revoked row is renamed, not deleted, so
    its history stays readable.
    """
    check_grant(role, scopes)
    name = check_name(name, "token")
    token = new_token()
    try:
        with write_transaction(engine) as conn:
            old = conn.execute(select(ApiToken.id, ApiToken.revoked_at).where(ApiToken.name == name)).first()
            if old is not None and old.revoked_at is None:
                raise AccountError(f"a token named {name!r} exists already")
            if old is not None:
                conn.execute(update(ApiToken.__table__).where(ApiToken.id == old.id)
                             .values(name=f"{name}:revoked:{old.id}"))
            conn.execute(ApiToken.__table__.insert().values(
                name=name, token_hash=hash_token(token), role=role, created_at=utcnow(),
                scopes=scopes_to_json(scopes)))
    except IntegrityError:
        raise AccountError(f"a token named {name!r} exists already") from None
    return token


def revoke_token(engine: Engine, name: str) -> None:
    """Revoke a token by name; it stops working at once."""
    with write_transaction(engine) as conn:
        done = conn.execute(update(ApiToken.__table__)
                            .where(ApiToken.name == name, ApiToken.revoked_at.is_(None))
                            .values(revoked_at=utcnow()))
        if done.rowcount == 0:
            raise AccountError(f"no active token named {name!r}")


_TOKEN_COLUMNS = (ApiToken.id, ApiToken.name, ApiToken.role, ApiToken.created_at, ApiToken.revoked_at,
                  ApiToken.last_used_at, ApiToken.scopes)


def _token_info(row) -> TokenInfo:
    return TokenInfo(*row[:-1], scopes=scopes_from_json(row.scopes))


def list_tokens(engine: Engine) -> list[TokenInfo]:
    """Every token (active and revoked), by name."""
    with engine.connect() as conn:
        rows = conn.execute(select(*_TOKEN_COLUMNS).order_by(ApiToken.name)).all()
    return [_token_info(row) for row in rows]


def find_token(engine: Engine, token: str) -> TokenInfo | None:
    """The active token matching ``token``, or None; records its last use (at most once a minute)."""
    if not token:
        return None
    digest = hash_token(token)
    with engine.connect() as conn:
        row = conn.execute(select(*_TOKEN_COLUMNS)
                           .where(ApiToken.token_hash == digest, ApiToken.revoked_at.is_(None))).first()
    if row is None:
        return None
    now = utcnow()
    if row.last_used_at is None or now - row.last_used_at >= _LAST_USED_EVERY:
        _record_last_use(engine, row.id, now)
    return _token_info(row)


def _record_last_use(engine: Engine, token_id: int, now: datetime) -> None:
    # Best effort: a token that was found answers its request even when the write cannot be done
    # (a full disk, a read-only file, the write lock held past the request's bound). Logged once
    # until a write succeeds again, not at every request.
    try:
        with bounded(_LAST_USE_BOUNDS), write_transaction(engine) as conn:
            conn.execute(update(ApiToken.__table__).where(ApiToken.id == token_id).values(last_used_at=now))
    except SQLAlchemyError as exc:
        if engine not in _LAST_USE_FAILING:
            _LAST_USE_FAILING.add(engine)
            log.warning("a token's last use could not be recorded (%s); its requests are answered meanwhile",
                        describe(exc))
    else:
        _LAST_USE_FAILING.discard(engine)
