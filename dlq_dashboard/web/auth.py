"""Who is asking and what they may do: sessions (Flask-Login), API tokens, a trusted proxy's
user header, and the least role of every route."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

from flask import Blueprint, current_app, g, jsonify, redirect, render_template, request, session, url_for
from flask_login import LoginManager, UserMixin, current_user, login_user, logout_user

from ..accounts import ROLES, end_sessions, find_token, get_user, load_session_user, verify_password
from ..db.liveness import UNREACHABLE, describe, is_unavailable, sentence
from ..errors import DatabaseUnavailable
from . import current_runtime
from .responses import bearer_token, refusal, wants_json
from .security import client_address, is_trusted_proxy, login_throttle

_RANK = {role: i for i, role in enumerate(ROLES)}
log = logging.getLogger(__name__)

bp = Blueprint("auth", __name__)
login_manager = LoginManager()

LOGIN_FAILED = "Unknown user name or wrong password."


@dataclass(frozen=True)
class Identity:
    """The person or token behind a request."""

    name: str
    role: str
    via: str  # "session", "token" or "proxy"

    def may(self, role: str) -> bool:
        """True when this identity's role is ``role`` or above it."""
        return _RANK[self.role] >= _RANK[role]


class SessionUser(UserMixin):
    """A logged-in user as Flask-Login sees them."""

    def __init__(self, user_id: int, name: str, role: str, generation: int):
        self.id, self.name, self.role, self.generation = user_id, name, role, generation

    def get_id(self) -> str:
        # The generation is part of the id: raising it (logout, password change, disable)
        # ends every session issued before, although the cookie itself stays validly signed.
        return f"{self.id}:{self.generation}"


@login_manager.user_loader
def load_user(session_id: str):
    """The session's user, if they still exist, are enabled and the session is current."""
    try:
        user_id, generation = (int(x) for x in session_id.split(":"))
    except ValueError:
        return None
    user = _ask_database(load_session_user, user_id, generation)
    if user is None:
        return None
    return SessionUser(user.id, user.name, user.role, user.session_generation)


# --- identity ---------------------------------------------------------------------------------

def _ask_database(lookup: Callable, *args):
    """``lookup(engine, *args)``; while the database cannot be asked, DatabaseUnavailable (a 503:
    who is asking is not known, which is neither a refusal nor anonymous)."""
    try:
        return lookup(current_runtime().engine, *args)
    except Exception as exc:
        if is_unavailable(exc):
            log.warning("%s %s: who is asking could not be looked up: %s", request.method, request.path,
                        describe(exc))
            raise DatabaseUnavailable(sentence(exc)) from exc
        raise


def _database_known_down() -> bool:
    probe = current_runtime().database
    return probe is not None and not probe.state.reachable


def _presents_credentials() -> bool:
    # A signed session that names a user, or a token: what would be checked if the database answered.
    return bearer_token() is not None or "_user_id" in session


def identity_unknown() -> None:
    """For the rest of this request, who is asking is not known (the database cannot be asked):
    templates see no identity and no user, and nothing tries the lookup again."""
    g.identity, g.database_down = None, True
    # The banner (NATS's and the mirror's state) goes to a caller with a session or a token, as
    # the polled banner does; an anonymous caller is told the sentence alone.
    g.banner_unverified = _presents_credentials()
    g._login_user = login_manager.anonymous_user()  # Flask-Login's cache of the user: not loaded again


def _token_identity(token: str) -> Identity | None:
    found = _ask_database(find_token, token)
    if found is None:
        return None
    return Identity(name=f"token:{found.name}", role=found.role, via="token")


def _proxy_identity(name: str) -> Identity | None:
    # The proxy vouches for who it is; the role still comes from the users table, so an
    # unknown or disabled name gets nothing.
    user = _ask_database(get_user, name)
    if user is None or user.disabled:
        return None
    return Identity(name=user.name, role=user.role, via="proxy")


def current_identity() -> Identity | None:
    """The identity of this request, or None.

    A bearer token decides alone (such requests skip CSRF, so the cookie must not count);
    then a trusted proxy's user header; then the login session.
    """
    if "identity" in g:
        return g.identity
    identity = None
    token = bearer_token()
    settings = current_runtime().settings
    if token is not None:
        identity = _token_identity(token) if token else None
    elif settings.trusted_header and is_trusted_proxy(request.remote_addr) \
            and request.headers.get(settings.trusted_header):
        identity = _proxy_identity(request.headers[settings.trusted_header])
    elif current_user.is_authenticated:
        identity = Identity(name=current_user.name, role=current_user.role, via="session")
    g.identity = identity
    return identity


def actor_name() -> str:
    """The name written into the audit: the user's name, or ``token:<name>`` for an API token."""
    identity = current_identity()
    return identity.name if identity else "anonymous"


# --- the role of every route ------------------------------------------------------------------

def _login_url() -> str:
    if request.method == "GET":
        target = request.full_path.rstrip("?")
    else:
        # A form's POST target cannot be opened with GET: return to the page the form was on.
        referrer = urlsplit(request.referrer or "")
        same_site = referrer.netloc == request.host
        target = (referrer.path + (f"?{referrer.query}" if referrer.query else "")) if same_site else "/"
    return url_for("auth.login", next=safe_next(target))


def requires(role: str | None, *, from_memory: bool = False) -> Callable:
    """Decorate a view with the least role it needs (None: open to anyone, e.g. /healthz).

    The role is also kept on the view function, so a test can check every route has one.
    ``from_memory``: the view answers from memory alone (the status banner), so it answers while
    the database is unreachable too, to a caller who presents a session or a token that cannot
    be checked meanwhile (it tells no more than /healthz tells anyone).
    """
    if role is not None and role not in _RANK:
        raise ValueError(f"unknown role {role!r}")

    def decorate(view):
        @functools.wraps(view)
        def wrapped(*args, **kwargs):
            if role is not None:
                unverifiable = from_memory and _presents_credentials()
                try:
                    if unverifiable and _database_known_down():
                        raise DatabaseUnavailable(UNREACHABLE)  # not asked: the probe knows
                    identity = current_identity()
                except DatabaseUnavailable:
                    if not unverifiable:
                        raise
                    identity_unknown()
                    return view(*args, **kwargs)
                if identity is None:
                    if wants_json():
                        return jsonify(error="Log in or send an API token (Authorization: Bearer ...)."), 401
                    if request.headers.get("HX-Request"):
                        # htmx would follow a redirect and swap the login page into a fragment.
                        response = current_app.response_class("Log in first.\n", status=401, mimetype="text/plain")
                        response.headers["HX-Redirect"] = _login_url()
                        return response
                    return redirect(_login_url())
                if not identity.may(role):
                    return refusal(f"This needs the {role} role; {identity.name} has {identity.role}.", 403)
            return view(*args, **kwargs)

        wrapped.required_role = role
        wrapped.from_memory = from_memory
        return wrapped

    return decorate


# --- login and logout -------------------------------------------------------------------------

def safe_next(target: str | None) -> str:
    """``target`` if it is a path on this site, else the list page (no open redirect)."""
    # Browsers drop tabs and newlines and read '\' as '/', so "/\t/evil" would become "//evil".
    if target and target.startswith("/") and target.isprintable() and " " not in target \
            and "\\" not in target:
        parts = urlsplit(target)
        if not parts.scheme and not parts.netloc and not target.startswith("//"):
            return target
    return url_for("pages.index")


@bp.route("/login", methods=["GET", "POST"])
@requires(None)
def login():
    """The login form; a failed login says nothing about which part was wrong."""
    if request.method == "GET":
        return render_template("login.html", error=None)
    name = request.form.get("username", "")
    address = client_address()
    throttle = login_throttle()
    wait = throttle.retry_after(name, address)
    if wait:
        # Checked before the password: while throttled, guessing learns nothing.
        message = (f"Too many failed logins for this user name or from this address. "
                   f"Try again in {wait} seconds.")
        return render_template("login.html", error=message), 429, {"Retry-After": str(wait)}
    user = verify_password(current_runtime().engine, name, request.form.get("password", ""))
    if user is None:
        throttle.failed(name, address)
        return render_template("login.html", error=LOGIN_FAILED), 401
    throttle.succeeded(name)
    session.clear()  # a fresh session (and CSRF token) at login: nothing carries over
    login_user(SessionUser(user.id, user.name, user.role, user.session_generation))
    session.permanent = True  # expires after PERMANENT_SESSION_LIFETIME without a request
    return redirect(safe_next(request.args.get("next")))


@bp.route("/logout", methods=["POST"])
@requires("viewer")
def logout():
    """End this session and every other session of the user."""
    if current_user.is_authenticated:
        end_sessions(current_runtime().engine, current_user.id)
    logout_user()
    session.clear()
    return redirect(url_for("auth.login"))
