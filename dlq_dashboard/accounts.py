"""Users, their login sessions and API tokens: create, list, disable, revoke, end, change a role
and its scopes (used by the CLI, /admin/users, the login and the first start).

A change made with an ``actor`` (the CLI's ``cli:<os user>``, the admin signed in to /admin/users)
writes its audit record in the change's own transaction: who did what to which user or token."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from werkzeug.security import check_password_hash, generate_password_hash

from .db.bounds import Bounds, bounded
from .db.engine import write_transaction
from .db.liveness import describe
from .db.models import Action, ApiToken, LoginSession, User
from .scopes import ROLES, Grant, Scope, ScopeError, parse_scopes, scopes_from_json, scopes_to_json
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

SESSIONS = LoginSession.__table__
USERS, TOKENS, ACTIONS = User.__table__, ApiToken.__table__, Action.__table__
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
    last_sign_in_at: datetime | None = None

    @property
    def grants(self) -> tuple[Grant, ...]:
        """What the user's own role and scopes grant (a single sign-on session carries its own)."""
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


def _audit(conn, actor: str | None, action: str, note: str, **detail) -> None:
    # The account audited is named in the detail (``user`` or ``token``), the actor as for the entries.
    if actor is not None:
        conn.execute(ACTIONS.insert().values(action=action, actor=actor, at=utcnow(), note=note,
                                             detail=json.dumps(detail, separators=(",", ":"))))


def _user_info(row) -> UserInfo:
    return UserInfo(row.id, row.name, row.role, bool(row.disabled), scopes_from_json(row.scopes), row.via,
                    row.last_sign_in_at)


# --- users ------------------------------------------------------------------------------------

def create_user(engine: Engine, name: str, password: str, role: str,
                scopes: tuple[Scope, ...] | None = None, *, actor: str | None = None) -> UserInfo:
    """Create a user with a slow password hash (werkzeug's scrypt), its role limited to
    ``scopes`` when given (read_scopes)."""
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
            _audit(conn, actor, "user_create", f"{name}: {describe_grant(role, scopes)}", user=name, role=role,
                   scopes=_texts(scopes))
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
    if user is None:
        check_password_hash(_DUMMY_HASH, password)
        return None
    if not check_password_hash(user.password_hash, password) or user.disabled:
        return None
    return _user_info(user)


# --- sessions ---------------------------------------------------------------------------------

def start_session(engine: Engine, user_id: int) -> str:
    """A new session of the user; returns the random key the cookie carries (only its hash is
    stored). Rows long ended or unseen are deleted on the way."""
    key = secrets.token_urlsafe(32)
    now = utcnow()
    with write_transaction(engine) as conn:
        conn.execute(update(USERS).where(User.id == user_id).values(last_sign_in_at=now))
        conn.execute(delete(SESSIONS).where(or_(SESSIONS.c.ended_at < now - SESSION_ROWS_KEPT,
                                                SESSIONS.c.last_seen_at < now - SESSION_ROWS_KEPT)))
        conn.execute(SESSIONS.insert().values(id=hash_token(key), user_id=user_id, created_at=now,
                                              last_seen_at=now, ended_at=None))
    return key


def load_session_user(engine: Engine, session_key: str) -> UserInfo | None:
    """The user of the session ``session_key`` names, if the session has not ended and the user
    exists and is enabled; records that the session was seen (at most once a minute)."""
    if not session_key:
        return None
    session_id = hash_token(session_key)
    with engine.connect() as conn:
        row = conn.execute(select(User.__table__, SESSIONS.c.last_seen_at)
                           .join(SESSIONS, SESSIONS.c.user_id == User.id)
                           .where(SESSIONS.c.id == session_id, SESSIONS.c.ended_at.is_(None))).first()
    if row is None or row.disabled:
        return None
    now = utcnow()
    if now - row.last_seen_at >= _LAST_USED_EVERY:
        try:
            with write_transaction(engine) as conn:
                conn.execute(update(SESSIONS).where(SESSIONS.c.id == session_id).values(last_seen_at=now))
        except SQLAlchemyError as exc:
            # Only a record: a database that reads but cannot write (a full disk) must not
            # fail the request of a valid session.
            log.warning("a session's last use could not be written: %s", exc.__class__.__name__)
    return _user_info(row)


def end_session(engine: Engine, session_key: str) -> None:
    """End one session (logout): its cookie, and every copy of it, stops working."""
    with write_transaction(engine) as conn:
        conn.execute(update(SESSIONS).where(SESSIONS.c.id == hash_token(session_key),
                                            SESSIONS.c.ended_at.is_(None)).values(ended_at=utcnow()))


def end_sessions(engine: Engine, user_id: int) -> int:
    """End every session of a user (an admin's action); returns how many were open."""
    with write_transaction(engine) as conn:
        return _end_all_sessions(conn, user_id)


def _end_all_sessions(conn, user_id: int) -> int:
    done = conn.execute(update(SESSIONS).where(SESSIONS.c.user_id == user_id, SESSIONS.c.ended_at.is_(None))
                        .values(ended_at=utcnow()))
    return done.rowcount


# --- passwords and disabling -------------------------------------------------------------------

def _user_row(conn, name: str):
    row = conn.execute(select(USERS).where(User.name == (name or "").strip())).first()
    if row is None:
        raise AccountError(f"no user named {name!r}")
    return row


def set_password(engine: Engine, name: str, password: str, *, actor: str | None = None) -> None:
    """Give a user a new password; every session they had ends."""
    _check_password(password)
    password_hash = generate_password_hash(password)
    with write_transaction(engine) as conn:
        user = _user_row(conn, name)
        conn.execute(update(USERS).where(User.id == user.id).values(password_hash=password_hash))
        ended = _end_all_sessions(conn, user.id)
        _audit(conn, actor, "user_password", f"{user.name}: a new password", user=user.name, sessions_ended=ended)


def list_users(engine: Engine) -> list[UserInfo]:
    """Every user, by name."""
    with engine.connect() as conn:
        rows = conn.execute(select(User.__table__).order_by(User.name)).all()
    return [_user_info(u) for u in rows]


def set_disabled(engine: Engine, name: str, disabled: bool, *, actor: str | None = None) -> int:
    """Disable (or enable) a user; either way their sessions end. Returns how many were open."""
    with write_transaction(engine) as conn:
        user = _user_row(conn, name)
        conn.execute(update(USERS).where(User.id == user.id).values(disabled=disabled))
        ended = _end_all_sessions(conn, user.id)
        _audit(conn, actor, "user_disable" if disabled else "user_enable",
               f"{user.name}: {'disabled' if disabled else 'enabled'}, {_sessions(ended)} ended",
               user=user.name, sessions_ended=ended)
    return ended


def end_user_sessions(engine: Engine, name: str, *, actor: str | None = None) -> int:
    """End every session of the user named ``name`` (an admin's action); returns how many were open."""
    with write_transaction(engine) as conn:
        user = _user_row(conn, name)
        ended = _end_all_sessions(conn, user.id)
        _audit(conn, actor, "user_end_sessions", f"{user.name}: {_sessions(ended)} ended", user=user.name,
               sessions_ended=ended)
    return ended


def set_role_and_scopes(engine: Engine, name: str, role: str, scopes: tuple[Scope, ...] | None, *,
                        actor: str | None = None) -> UserInfo:
    """Give a local user ``role`` over ``scopes`` (None: every subject); it holds from their next
    request. A single sign-on user's grants come from DLQ_OIDC_ROLES at each sign-in instead."""
    check_grant(role, scopes)
    with write_transaction(engine) as conn:
        user = _user_row(conn, name)
        if user.via != "password":
            raise AccountError(f"{user.name} signs in with single sign-on: their role and scopes come from "
                               "DLQ_OIDC_ROLES at each sign-in")
        was = scopes_from_json(user.scopes)
        conn.execute(update(USERS).where(User.id == user.id).values(role=role, scopes=scopes_to_json(scopes)))
        _audit(conn, actor, "user_grant", f"{user.name}: {describe_grant(role, scopes)} "
               f"(was {describe_grant(user.role, was)})", user=user.name, role=role, scopes=_texts(scopes),
               was_role=user.role, was_scopes=_texts(was))
        return _user_info(conn.execute(select(USERS).where(User.id == user.id)).first())


def open_sessions(engine: Engine) -> dict[int, int]:
    """How many sessions each user has open (user id -> count; users with none left out)."""
    with engine.connect() as conn:
        rows = conn.execute(select(SESSIONS.c.user_id, func.count()).where(SESSIONS.c.ended_at.is_(None))
                            .group_by(SESSIONS.c.user_id)).all()
    return {user_id: n for user_id, n in rows}


def session_via(engine: Engine, session_key: str) -> str | None:
    """How the session ``session_key`` names was signed in to ("password" or "oidc"), or None."""
    with engine.connect() as conn:
        return conn.execute(select(SESSIONS.c.via).where(SESSIONS.c.id == hash_token(session_key))).scalar()


def new_password() -> str:
    """A random password for a new user, to show once."""
    return secrets.token_urlsafe(12)


def _texts(scopes: tuple[Scope, ...] | None) -> list[str] | None:
    return None if scopes is None else [str(s) for s in scopes]


def _sessions(n: int) -> str:
    return f"{n} session{'' if n == 1 else 's'}"


def count_users(engine: Engine) -> int:
    """How many users exist (disabled ones included)."""
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(User)).scalar_one()


def ensure_first_admin(engine: Engine) -> str | None:
    """With no user at all, create ``admin`` with a random password and return the password."""
    if count_users(engine):
        return None
    password = new_password()
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


def create_token(engine: Engine, name: str, role: str, scopes: tuple[Scope, ...] | None = None, *,
                 actor: str | None = None) -> str:
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
            _audit(conn, actor, "token_create", f"{name}: {describe_grant(role, scopes)}", token=name, role=role,
                   scopes=_texts(scopes))
    except IntegrityError:
        raise AccountError(f"a token named {name!r} exists already") from None
    return token


def revoke_token(engine: Engine, name: str, *, actor: str | None = None) -> None:
    """Revoke a token by name; it stops working at once."""
    with write_transaction(engine) as conn:
        done = conn.execute(update(TOKENS)
                            .where(ApiToken.name == name, ApiToken.revoked_at.is_(None))
                            .values(revoked_at=utcnow()))
        if done.rowcount == 0:
            raise AccountError(f"no active token named {name!r}")
        _audit(conn, actor, "token_revoke", f"{name}: revoked", token=name)


def set_token_role_and_scopes(engine: Engine, name: str, role: str, scopes: tuple[Scope, ...] | None, *,
                              actor: str | None = None) -> TokenInfo:
    """Give the active token ``name`` ``role`` over ``scopes`` (None: every subject), from its next call."""
    check_grant(role, scopes)
    with write_transaction(engine) as conn:
        row = conn.execute(select(*_TOKEN_COLUMNS)
                           .where(ApiToken.name == name, ApiToken.revoked_at.is_(None))).first()
        if row is None:
            raise AccountError(f"no active token named {name!r}")
        was = scopes_from_json(row.scopes)
        conn.execute(update(TOKENS).where(ApiToken.id == row.id).values(role=role, scopes=scopes_to_json(scopes)))
        _audit(conn, actor, "token_grant", f"{name}: {describe_grant(role, scopes)} "
               f"(was {describe_grant(row.role, was)})", token=name, role=role, scopes=_texts(scopes),
               was_role=row.role, was_scopes=_texts(was))
        return _token_info(conn.execute(select(*_TOKEN_COLUMNS).where(ApiToken.id == row.id)).first())


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
