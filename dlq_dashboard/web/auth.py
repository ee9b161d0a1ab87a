"""Who is asking and what they may do: sessions (Flask-Login), API tokens, roles per route."""

from __future__ import annotations

import functools
import hashlib
import secrets
from dataclasses import dataclass
from typing import Callable

from flask import Blueprint, current_app, g, jsonify, redirect, request, url_for
from flask_login import LoginManager, UserMixin, current_user
from sqlalchemy import select, update

from ..contract import utcnow
from ..models import ApiToken, User

ROLES = ("viewer", "operator", "admin")
_RANK = {role: i for i, role in enumerate(ROLES)}

bp = Blueprint("auth", __name__)
login_manager = LoginManager()


@dataclass(frozen=True)
class Identity:
    """The person or token behind a request."""

    name: str
    role: str
    via: str  # "session" or "token"

    def may(self, role: str) -> bool:
        return _RANK[self.role] >= _RANK[role]


class SessionUser(UserMixin):
    """A logged-in user as Flask-Login sees them."""

    def __init__(self, user_id: int, name: str, role: str, generation: int):
        self.id, self.name, self.role, self.generation = user_id, name, role, generation

    def get_id(self) -> str:
        # The generation is part of the id: raising it (logout, password change) ends
        # every session issued before.
        return f"{self.id}:{self.generation}"


@login_manager.user_loader
def load_user(session_id: str):
    try:
        user_id, generation = (int(x) for x in session_id.split(":"))
    except ValueError:
        return None
    engine = current_app.extensions["dlq"].engine
    with engine.connect() as conn:
        row = conn.execute(select(User.id, User.name, User.role, User.session_generation, User.disabled)
                           .where(User.id == user_id)).first()
    if row is None or row.disabled or row.session_generation != generation:
        return None
    return SessionUser(row.id, row.name, row.role, row.session_generation)


def hash_token(token: str) -> str:
    """API tokens are random (high entropy), so a fast hash is enough to store them."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh API token to show once."""
    return "dlq_" + secrets.token_urlsafe(32)


def _token_identity(header: str) -> Identity | None:
    token = header[len("Bearer "):].strip()
    if not token:
        return None
    engine = current_app.extensions["dlq"].engine
    digest = hash_token(token)
    with engine.begin() as conn:
        row = conn.execute(select(ApiToken.id, ApiToken.name, ApiToken.role)
                           .where(ApiToken.token_hash == digest, ApiToken.revoked_at.is_(None))).first()
        if row is None:
            return None
        conn.execute(update(ApiToken.__table__).where(ApiToken.id == row.id).values(last_used_at=utcnow()))
    return Identity(name=f"token:{row.name}", role=row.role, via="token")


def current_identity() -> Identity | None:
    """The identity of this request (bearer token first, then the session), or None."""
    if "identity" in g:
        return g.identity
    identity = None
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        identity = _token_identity(header)
    elif current_user.is_authenticated:
        identity = Identity(name=current_user.name, role=current_user.role, via="session")
    g.identity = identity
    return identity


def actor_name() -> str:
    """The name written into the audit for this request."""
    identity = current_identity()
    return identity.name if identity else "anonymous"


def wants_json() -> bool:
    """API and export routes answer errors as JSON, pages as HTML."""
    return request.path.startswith("/api/") or request.headers.get("Authorization", "").startswith("Bearer ")


def requires(role: str | None) -> Callable:
    """Decorate a view with the least role it needs (None: open to anyone, e.g. /healthz).

    The role is also kept on the view function, so a test can check every route has one.
    """
    if role is not None and role not in _RANK:
        raise ValueError(f"unknown role {role!r}")

    def decorate(view):
        @functools.wraps(view)
        def wrapped(*args, **kwargs):
            if role is not None:
                identity = current_identity()
                if identity is None:
                    if wants_json():
                        return jsonify(error="Log in or send an API token (Authorization: Bearer ...)."), 401
                    return redirect(url_for("auth.login", next=request.full_path.rstrip("?")))
                if not identity.may(role):
                    message = f"This needs the {role} role; {identity.name} has {identity.role}."
                    if wants_json():
                        return jsonify(error=message), 403
                    return current_app.response_class(message, status=403, mimetype="text/plain")
            return view(*args, **kwargs)

        wrapped.required_role = role
        return wrapped

    return decorate


# --- login and logout -------------------------------------------------------------------------

def _safe_next(target: str | None) -> str:
    # Only a local path: an open redirect would hand a logged-in session to another site.
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return url_for("pages.index")


@bp.route("/login", methods=["GET", "POST"])
@requires(None)
def login():
    """The login form; a failed login says nothing about which part was wrong."""
    from flask import render_template, session
    from flask_login import login_user

    from ..accounts import verify_password

    error = None
    if request.method == "POST":
        engine = current_app.extensions["dlq"].engine
        user = verify_password(engine, request.form.get("username", ""), request.form.get("password", ""))
        if user is not None:
            session.clear()  # a fresh session at login: no fixation
            login_user(SessionUser(user.id, user.name, user.role, user.session_generation))
            return redirect(_safe_next(request.args.get("next")))
        error = "Unknown user name or wrong password."
    return render_template("login.html", error=error), (401 if error else 200)


@bp.route("/logout", methods=["POST"])
@requires("viewer")
def logout():
    """End this session and every other session of the user."""
    from flask import session
    from flask_login import logout_user

    from ..accounts import end_sessions

    if current_user.is_authenticated:
        end_sessions(current_app.extensions["dlq"].engine, current_user.id)
    logout_user()
    session.clear()
    return redirect(url_for("auth.login"))
