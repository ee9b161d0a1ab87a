"""API tokens for scripts: create, scope, revoke, find (only a token's hash is stored)."""

from __future__ import annotations

import logging
import secrets
import weakref
from datetime import datetime, timedelta

from sqlalchemy import Engine, bindparam, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from ..db.bounds import Bounds, bounded
from ..db.engine import read_transaction, write_transaction
from ..db.liveness import describe
from ..db.models import ApiToken
from ..scopes import Scope, scopes_from_json, scopes_to_json
from ..times import utcnow
from .core import AccountError, TokenInfo, audit, check_grant, check_name, describe_grant, hash_token, texts

TOKENS = ApiToken.__table__
# How often a token's last use is written: a script polling every second must not turn
# every read into a database write.
_LAST_USED_EVERY = timedelta(minutes=1)
# The write waits at most this long (for SQLite's write lock, PostgreSQL's row lock): a token's
# request is not held up behind the mirror's writes for a timestamp.
_LAST_USE_BOUNDS = Bounds(statement=1.0)
# The engines whose last write of a token's last use failed (logged once until one succeeds).
_LAST_USE_FAILING: weakref.WeakSet[Engine] = weakref.WeakSet()
log = logging.getLogger(__name__)


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
            audit(conn, actor, "token_create", f"{name}: {describe_grant(role, scopes)}", token=name, role=role,
                   scopes=texts(scopes))
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
        audit(conn, actor, "token_revoke", f"{name}: revoked", token=name)


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
        audit(conn, actor, "token_grant", f"{name}: {describe_grant(role, scopes)} "
               f"(was {describe_grant(row.role, was)})", token=name, role=role, scopes=texts(scopes),
               was_role=row.role, was_scopes=texts(was))
        return _token_info(conn.execute(select(*_TOKEN_COLUMNS).where(ApiToken.id == row.id)).first())


_TOKEN_COLUMNS = (ApiToken.id, ApiToken.name, ApiToken.role, ApiToken.created_at, ApiToken.revoked_at,
                  ApiToken.last_used_at, ApiToken.scopes)
# The active token of a hash, asked at every call that carries a token: built once (a statement
# built at each call cost more than its query, as accounts/__init__.py's session lookup).
_ACTIVE_TOKEN = select(*_TOKEN_COLUMNS).where(ApiToken.token_hash == bindparam("digest"),
                                               ApiToken.revoked_at.is_(None))


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
    with read_transaction(engine) as conn:
        row = conn.execute(_ACTIVE_TOKEN, {"digest": digest}).first()
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
