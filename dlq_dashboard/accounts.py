"""Users and API tokens: create, list, disable, revoke (used by the CLI and the first start)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy import Engine, func, select, update
from werkzeug.security import check_password_hash, generate_password_hash

from .contract import utcnow
from .db import write_transaction
from .models import ApiToken, User

ROLES = ("viewer", "operator", "admin")
# A hash of a random password, checked when the user does not exist, so that a login for
# an unknown name takes as long as one for a known name.
_DUMMY_HASH = generate_password_hash(secrets.token_hex(16))


class AccountError(ValueError):
    """A user or token request that cannot be done; the message says why."""


@dataclass(frozen=True)
class UserInfo:
    id: int
    name: str
    role: str
    disabled: bool
    session_generation: int


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise AccountError(f"role {role!r} is not valid: use one of {', '.join(ROLES)}")


def create_user(engine: Engine, name: str, password: str, role: str) -> UserInfo:
    """Create a user with a slow password hash (scrypt)."""
    _check_role(role)
    name = name.strip()
    if not name:
        raise AccountError("the user name is empty")
    if len(password) < 8:
        raise AccountError("the password is too short: use 8 characters or more")
    with write_transaction(engine) as conn:
        if conn.execute(select(User.id).where(User.name == name)).first():
            raise AccountError(f"user {name!r} exists already")
        result = conn.execute(User.__table__.insert().values(
            name=name, password_hash=generate_password_hash(password), role=role, disabled=False,
            session_generation=0, created_at=utcnow()))
        return UserInfo(result.inserted_primary_key[0], name, role, False, 0)


def verify_password(engine: Engine, name: str, password: str) -> UserInfo | None:
    """The user if the name and password match and the user is enabled, else None."""
    with engine.connect() as conn:
        user = conn.execute(select(User.__table__).where(User.name == name.strip())).first()
    if user is None:
        check_password_hash(_DUMMY_HASH, password)
        return None
    if not check_password_hash(user.password_hash, password) or user.disabled:
        return None
    return UserInfo(user.id, user.name, user.role, user.disabled, user.session_generation)


def end_sessions(engine: Engine, user_id: int) -> None:
    """Invalidate every session of a user (logout, password change, disable)."""
    with write_transaction(engine) as conn:
        conn.execute(update(User.__table__).where(User.id == user_id)
                     .values(session_generation=User.session_generation + 1))


def list_users(engine: Engine) -> list[UserInfo]:
    """Every user, by name."""
    with engine.connect() as conn:
        rows = conn.execute(select(User.__table__).order_by(User.name)).all()
    return [UserInfo(u.id, u.name, u.role, u.disabled, u.session_generation) for u in rows]


def set_disabled(engine: Engine, name: str, disabled: bool) -> None:
    """Disable (or enable) a user; disabling ends their sessions."""
    with write_transaction(engine) as conn:
        done = conn.execute(update(User.__table__).where(User.name == name)
                            .values(disabled=disabled, session_generation=User.session_generation + 1))
        if done.rowcount == 0:
            raise AccountError(f"no user named {name!r}")


def count_users(engine: Engine) -> int:
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


def create_token(engine: Engine, name: str, role: str) -> str:
    """Create an API token and return it; only its hash is stored."""
    from .web.auth import hash_token, new_token

    _check_role(role)
    token = new_token()
    with write_transaction(engine) as conn:
        if conn.execute(select(ApiToken.id).where(ApiToken.name == name)).first():
            raise AccountError(f"a token named {name!r} exists already")
        conn.execute(ApiToken.__table__.insert().values(
            name=name, token_hash=hash_token(token), role=role, created_at=utcnow()))
    return token


def revoke_token(engine: Engine, name: str) -> None:
    """Revoke a token by name; it stops working at once."""
    with write_transaction(engine) as conn:
        done = conn.execute(update(ApiToken.__table__)
                            .where(ApiToken.name == name, ApiToken.revoked_at.is_(None))
                            .values(revoked_at=utcnow()))
        if done.rowcount == 0:
            raise AccountError(f"no active token named {name!r}")
