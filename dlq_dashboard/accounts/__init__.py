"""Users and their login sessions: create, list, disable, end, change a role and its scopes, sign
in by password or single sign-on (used by the CLI, /admin/users, the login and the first start).
API tokens are in tokens.py, what both share in core.py; everything is imported from here.

A change made with an ``actor`` (the CLI's ``cli:<os user>``, the admin signed in to /admin/users)
writes its audit record in the change's own transaction: who did what to which user or token."""

from __future__ import annotations

import functools
import logging
import secrets
from dataclasses import replace
from datetime import timedelta

from sqlalchemy import Engine, bindparam, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from werkzeug.security import check_password_hash, generate_password_hash

from ..actors import FIRST_START
from ..db.engine import read_transaction, write_transaction
from ..db.models import FailureGroup, LoginSession, SavedView, User
from ..scopes import ROLES, Grant, Scope, grants_from_json, grants_to_json, highest_role, scopes_for, scopes_from_json, scopes_to_json
from ..times import utcnow
from .core import (MIN_PASSWORD_LENGTH, AccountError, TokenInfo, UserInfo, audit, check_grant, check_name,
                   check_password, check_role, describe_grant, hash_token, read_scopes, texts)
from .tokens import create_token, find_token, list_tokens, new_token, revoke_token, set_token_role_and_scopes


@functools.cache
def _dummy_hash() -> str:
    """A hash of a random password, checked when the user does not exist, so that a login for
    an unknown name takes as long as one for a known name. Made at the first login, known name
    or not, rather than at import: every process start (each admin command's too) paid a
    scrypt for it."""
    return generate_password_hash(secrets.token_hex(16))


# A session row ended, or not seen, this long ago is deleted at the next login: its cookie has
# expired long before (the idle lifetime is 12 hours unless configured otherwise).
SESSION_ROWS_KEPT = timedelta(days=30)
# How often a session's last use is written: a page polling every second must not turn every
# request into a database write.
_LAST_USED_EVERY = timedelta(minutes=1)
# The password hash of a user made by single sign-on: no password matches it.
NO_PASSWORD = "!single-sign-on"

SESSIONS = LoginSession.__table__
USERS = User.__table__
log = logging.getLogger(__name__)

# Who a session's key names, asked at every request that carries a session: built once, as a
# statement built at each call cost more than its query (its construction and its cache key,
# about 130 µs, against 75 µs to run it on SQLite).
_SESSION_USER = (select(USERS, SESSIONS.c.last_seen_at, SESSIONS.c.created_at.label("since"),
                        SESSIONS.c.expires_at, SESSIONS.c.grants.label("session_grants"))
                 .join(SESSIONS, SESSIONS.c.user_id == User.id)
                 .where(SESSIONS.c.id == bindparam("session_id"), SESSIONS.c.ended_at.is_(None)))

# What the rest of the app imports from here, the token functions (tokens.py) and the shared
# values and checks (core.py) included.
__all__ = [
    "FIRST_START", "MIN_PASSWORD_LENGTH", "NO_PASSWORD", "ROLES", "SESSION_ROWS_KEPT", "AccountError", "TokenInfo",
    "UserInfo", "check_grant", "check_has_password", "check_name", "check_password", "check_role", "count_users",
    "create_token", "create_user", "describe_grant", "end_session", "end_sessions", "end_user_sessions",
    "ensure_first_admin", "find_token", "get_user", "hash_token", "list_tokens", "list_users", "load_session_user",
    "new_password", "new_token", "open_sessions", "read_scopes", "revoke_token", "session_via",
    "set_disabled", "set_password", "set_role_and_scopes", "set_token_role_and_scopes", "sign_in_oidc_user",
    "start_session", "verify_password",
]



def _user_info(row) -> UserInfo:
    return UserInfo(row.id, row.name, row.role, bool(row.disabled), scopes_from_json(row.scopes), row.via,
                    row.last_sign_in_at, signed_in_grants=grants_from_json(row.grants) if row.grants else None)


# --- users ------------------------------------------------------------------------------------

def create_user(engine: Engine, name: str, password: str, role: str,
                scopes: tuple[Scope, ...] | None = None, *, actor: str | None = None) -> UserInfo:
    """Create a user with a slow password hash (werkzeug's scrypt), its role limited to
    ``scopes`` when given (read_scopes)."""
    check_grant(role, scopes)
    name = check_name(name)
    check_password(password)
    password_hash = generate_password_hash(password)
    try:
        with write_transaction(engine) as conn:
            _refuse_taken(conn, name)
            result = conn.execute(User.__table__.insert().values(
                name=name, name_key=name_key(name), password_hash=password_hash, role=role, disabled=False,
                created_at=utcnow(), scopes=scopes_to_json(scopes), via="password"))
            audit(conn, actor, "user_create", f"{name}: {describe_grant(role, scopes)}", user=name, role=role,
                   scopes=texts(scopes))
    except IntegrityError:  # another process created the same name, in some case, between check and insert
        raise AccountError(f"user {name!r} exists already, in this case or another") from None
    return UserInfo(result.inserted_primary_key[0], name, role, False, scopes)


def name_key(name: str) -> str:
    """What users.name_key holds for a user named ``name``: unique, so that no two users' names
    differ only in case (the audit could not tell them apart; revision 0026)."""
    return name.lower()


def _refuse_taken(conn, name: str) -> None:
    # In the creating transaction; users.name_key's unique index refuses what a concurrent one
    # made meanwhile (PostgreSQL's read committed sees no row not yet committed).
    held = conn.execute(select(User.name).where(User.name_key == name_key(name))).scalar()
    if held == name:
        raise AccountError(f"user {name!r} exists already")
    if held is not None:
        raise AccountError(f"the name {name!r} is taken: user {held!r} holds it, and names that differ only in "
                           "case are one name here")


def get_user(engine: Engine, name: str) -> UserInfo | None:
    """The user of that name, or None."""
    with engine.connect() as conn:
        row = conn.execute(select(User.__table__).where(User.name == (name or "").strip())).first()
    return _user_info(row) if row else None


def verify_password(engine: Engine, name: str, password: str) -> UserInfo | None:
    """The user if the name and password match and the user is enabled, else None.

    Unknown, disabled and wrong-password cases cost the same hash, so timing tells nothing.
    """
    dummy = _dummy_hash()  # before the lookup: the first login costs the same whoever it names
    with engine.connect() as conn:
        user = conn.execute(select(User.__table__).where(User.name == (name or "").strip())).first()
    if user is None or user.via != "password":
        # A single sign-on user has no password: signing in as one needs the provider.
        check_password_hash(dummy, password)
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
        conn.execute(update(USERS).where(User.id == user_id).values(last_sign_in_at=now))
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
    with read_transaction(engine) as conn:
        row = conn.execute(_SESSION_USER, {"session_id": session_id}).first()
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
    return replace(user, role=highest_role(grants), session_grants=grants)


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
    that role's grants, every grant (what an admin is shown), and the time. AccountError for a disabled user, a name that cannot be
    used, or one another user holds already, in any case ("ADMIN" beside "admin"); a name the
    user holds already is theirs whatever a user made after them is called. A name that changed
    at the provider takes what was kept under the old one (rename_holdings)."""
    role = highest_role(grants)
    if role is None:
        raise AccountError("no grant to sign in with")
    covered = scopes_for(grants, role)
    # The row's role and scopes are one grant: the highest role over what its grants cover (a
    # part of what the session holds, never more), for the channels that read the row (a proxy's
    # header). Every grant is kept beside them, for the admins who ask who may read what.
    scopes = None if covered is None or covered is False else covered
    name = check_name(name)
    now = utcnow()
    values = dict(name=name, role=role, scopes=scopes_to_json(scopes), last_sign_in_at=now,
                  grants=grants_to_json(grants))
    try:
        with write_transaction(engine) as conn:
            row = conn.execute(select(User.__table__).where(User.oidc_subject == subject)).first()
            # Names differing only in case would be told apart by nobody reading the audit. The
            # name this user has already is refused only for a user made before them: one made
            # after (before revision 0026 the dashboard let a local user be named so) locks
            # nobody out.
            keeps = row is not None and row.name.lower() == name.lower()
            others = [holder for holder in conn.execute(select(User.id).where(func.lower(User.name) == name.lower()))
                      .scalars() if row is None or holder != row.id]
            if any(not keeps or holder < row.id for holder in others):
                raise AccountError(f"the name {name!r} belongs to another user of this dashboard")
            # Made, or given another role or scopes, by the identity provider's groups: in the
            # audit as the user's own doing (they signed in), as every change of a user is.
            if row is None:
                result = conn.execute(User.__table__.insert().values(
                    **values, name_key=name_key(name), password_hash=NO_PASSWORD, disabled=False, created_at=now,
                    via="oidc", oidc_subject=subject))
                user_id, disabled = result.inserted_primary_key[0], False
                audit(conn, name, "user_create", f"{name}: {_described(grants)} (at their first single "
                      "sign-on)", user=name, role=role, scopes=texts(scopes), via="oidc")
            else:
                user_id, disabled = row.id, bool(row.disabled)
                if not disabled:
                    renamed = {} if keeps else {"name_key": name_key(name)}
                    conn.execute(update(User.__table__).where(User.id == row.id).values(**values, **renamed))
                    if row.name != name:
                        rename_holdings(conn, row.name, name)
                    # Any grant given or taken, not only the highest: a viewer grant over billing.>
                    # gained beside an operator one over orders.> changed what the user reads.
                    if (row.role, row.scopes) != (role, values["scopes"]) or \
                            (row.grants is not None and row.grants != values["grants"]):
                        was = scopes_from_json(row.scopes)
                        before = grants_from_json(row.grants) if row.grants else (Grant(row.role, was),)
                        audit(conn, name, "user_grant", f"{name}: {_described(grants)} (was "
                              f"{_described(before)}; DLQ_OIDC_ROLES at sign-in)", user=name, role=role,
                              scopes=texts(scopes), was_role=row.role, was_scopes=texts(was))
    except IntegrityError:  # another sign-in of the same person, or the same name, at the same time
        raise AccountError(f"the name {name!r} belongs to another user of this dashboard") from None
    if disabled:
        raise AccountError("this account is disabled on this dashboard")
    return UserInfo(user_id, name, role, False, scopes, "oidc", now, signed_in_grants=grants)


def _described(grants) -> str:
    """Grants as the audit says them: "operator over orders.>; viewer over billing.>"."""
    return "; ".join(describe_grant(g.role, g.scopes) for g in grants)


def rename_holdings(conn, old: str, new: str) -> None:
    """What is kept under a user's name (their saved views, the failure groups assigned to them)
    follows the user to ``new``: the next holder of ``old`` (another person, once the provider
    gives it out again) finds none of it. The audit keeps the names as they were."""
    moved_views = conn.execute(update(SavedView.__table__).where(SavedView.owner == old).values(owner=new)).rowcount
    moved_groups = conn.execute(update(FailureGroup.__table__).where(FailureGroup.assignee == old)
                                .values(assignee=new)).rowcount
    audit(conn, new, "user_rename", f"{old} is now {new} (the identity provider's name; {moved_views} saved views "
          f"and {moved_groups} assigned groups follow)", user=new, was=old)


# --- passwords and disabling -------------------------------------------------------------------

def _user_row(conn, name: str):
    row = conn.execute(select(USERS).where(User.name == (name or "").strip())).first()
    if row is None:
        raise AccountError(f"no user named {name!r}")
    return row


def set_password(engine: Engine, name: str, password: str, *, actor: str | None = None) -> None:
    """Give a local user a new password; every session they had ends. A single sign-on user has
    none (verify_password refuses them whatever is stored): AccountError, nothing changed."""
    check_password(password)
    password_hash = generate_password_hash(password)
    with write_transaction(engine) as conn:
        user = _user_row(conn, name)
        check_has_password(user)
        conn.execute(update(USERS).where(User.id == user.id).values(password_hash=password_hash))
        ended = _end_all_sessions(conn, user.id)
        audit(conn, actor, "user_password", f"{user.name}: a new password", user=user.name, sessions_ended=ended)


def check_has_password(user) -> None:
    """AccountError for a user who signs in with single sign-on: they have no password here."""
    if user.via != "password":
        raise AccountError(f"{user.name} signs in with single sign-on: they have no password on this dashboard, "
                           "and nothing was changed")


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
        audit(conn, actor, "user_disable" if disabled else "user_enable",
               f"{user.name}: {'disabled' if disabled else 'enabled'}, {_sessions(ended)} ended",
               user=user.name, sessions_ended=ended)
    return ended


def end_user_sessions(engine: Engine, name: str, *, actor: str | None = None) -> int:
    """End every session of the user named ``name`` (an admin's action); returns how many were open."""
    with write_transaction(engine) as conn:
        user = _user_row(conn, name)
        ended = _end_all_sessions(conn, user.id)
        audit(conn, actor, "user_end_sessions", f"{user.name}: {_sessions(ended)} ended", user=user.name,
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
        audit(conn, actor, "user_grant", f"{user.name}: {describe_grant(role, scopes)} "
               f"(was {describe_grant(user.role, was)})", user=user.name, role=role, scopes=texts(scopes),
               was_role=user.role, was_scopes=texts(was))
        return _user_info(conn.execute(select(USERS).where(User.id == user.id)).first())


def open_sessions(engine: Engine) -> dict[int, int]:
    """How many sessions each user has open (user id -> count; users with none left out)."""
    with engine.connect() as conn:
        rows = conn.execute(select(SESSIONS.c.user_id, func.count()).where(SESSIONS.c.ended_at.is_(None))
                            .group_by(SESSIONS.c.user_id)).all()
    return {user_id: n for user_id, n in rows}


# How a session was signed in to (GET /api/me asks at every call): built once, as _SESSION_USER.
_SESSION_VIA = select(SESSIONS.c.via).where(SESSIONS.c.id == bindparam("session_id"))


def session_via(engine: Engine, session_key: str) -> str | None:
    """How the session ``session_key`` names was signed in to ("password" or "oidc"), or None."""
    with engine.connect() as conn:
        return conn.execute(_SESSION_VIA, {"session_id": hash_token(session_key)}).scalar()


def new_password() -> str:
    """A random password for a new user, to show once."""
    return secrets.token_urlsafe(12)


def _sessions(n: int) -> str:
    return f"{n} session{'' if n == 1 else 's'}"


def count_users(engine: Engine) -> int:
    """How many users exist (disabled ones included)."""
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(User)).scalar_one()


def ensure_first_admin(engine: Engine, *, local_login: bool = True) -> str | None:
    """With no user at all, create ``admin`` with a random password and return the password.
    Without password sign-in (``local_login`` False: DLQ_LOCAL_LOGIN=false) none is made, as its
    password could not be used: admins come from single sign-on or the command line."""
    if not local_login or count_users(engine):
        return None
    password = new_password()
    try:
        # In the audit as every change of a user is, made by the dashboard itself at its first start.
        create_user(engine, "admin", password, "admin", actor=FIRST_START)
    except AccountError:  # another process created it first
        return None
    return password
