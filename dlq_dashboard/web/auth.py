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
from werkzeug.exceptions import HTTPException

from ..access.reader import Reader
from ..accounts import ROLES, end_session, find_token, get_user, load_session_user, start_session, verify_password
from ..actors import ANONYMOUS
from ..db.liveness import UNREACHABLE, describe, is_unavailable, sentence
from ..errors import DatabaseUnavailable, Forbidden
from ..scopes import Grant
from ..times import wait_in_words
from . import current_runtime
from .responses import bearer_token, wants_json
from .security import client_address, is_trusted_proxy, keep_session, login_throttle

_RANK = {role: i for i, role in enumerate(ROLES)}
log = logging.getLogger(__name__)

bp = Blueprint("auth", __name__)
login_manager = LoginManager()

LOGIN_FAILED = "Unknown user name or wrong password."
NO_PASSWORDS = "Signing in with a password is turned off here: use single sign-on."
# web/oidc.py's client, where DLQ_OIDC_ISSUER is set (its offer() and logout_url(); it imports
# this module, so it is found through the app rather than imported).
SINGLE_SIGN_ON = "dlq_single_sign_on"
# The answer to an htmx request whose session has ended (static/app.js shows it in the banner).
SIGNED_OUT = "You were signed out. Sign in again in another tab; this page keeps what you typed."
#: A form's fields a person types in (an edited payload, a bulk patch, a close's or a group's note),
#: shown back on the page that says a POST was not done because the session had ended.
TYPED_FIELDS = (("payload", "Your edit, not sent"), ("patch", "Your patch, not sent"),
                ("note", "Your note, not saved"), ("text", "Your note, not saved"))


@dataclass(frozen=True)
class Identity:
    """The person or token behind a request."""

    name: str
    role: str
    via: str  # "session", "token" or "proxy"
    # What the identity holds (scopes.py): one grant of ``role`` over the user's or token's
    # scopes; a single sign-on session holds the grants its sign-in gave. None: unscoped.
    grants: tuple[Grant, ...] | None = None

    def may(self, role: str) -> bool:
        """True when this identity's role is ``role`` or above it."""
        return _RANK[self.role] >= _RANK[role]


class SessionUser(UserMixin):
    """A logged-in user as Flask-Login sees them, in one session."""

    def __init__(self, user_id: int, name: str, role: str, session_key: str,
                 grants: tuple[Grant, ...] | None = None):
        self.id, self.name, self.role, self.session_key = user_id, name, role, session_key
        self.grants = grants

    def get_id(self) -> str:
        # The login id is the session's key (a row of the sessions table), not the user's: the
        # cookie stays validly signed after logout, so the row decides whether it still works.
        return self.session_key


@login_manager.user_loader
def load_user(session_key: str):
    """The session's user, if the session has not ended and the user exists and is enabled."""
    user = _ask_database(functools.partial(load_session_user, hours=current_runtime().settings.session_hours),
                         session_key)
    if user is None:
        return None
    return SessionUser(user.id, user.name, user.role, session_key, user.grants)


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
    return Identity(name=f"token:{found.name}", role=found.role, via="token", grants=found.grants)


def _proxy_identity(name: str) -> Identity | None:
    # The proxy vouches for who it is; the role still comes from the users table, so an
    # unknown or disabled name gets nothing.
    user = _ask_database(get_user, name)
    if user is None or user.disabled:
        return None
    return Identity(name=user.name, role=user.role, via="proxy", grants=user.grants)


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
        identity = Identity(name=current_user.name, role=current_user.role, via="session",
                            grants=current_user.grants)
    g.identity = identity
    return identity


def reading_check(reader: Reader) -> Callable[[], str | None]:
    """For an answer still being sent after its view returned (a streamed export): a function
    that asks again, as the caller's next request would be asked (their token, session or
    proxy's user looked up anew, one query), whether they may still read what ``reader`` (this
    request's) reads. It returns None while they may, else the sentence why not: the token
    revoked or deleted, the session ended (signed out, the password changed, the user disabled
    or their sessions ended), or a role or scopes narrowed so they would see less."""
    identity, engine, rt = current_identity(), current_runtime().engine, current_runtime()
    if identity is None:
        return lambda: None
    if identity.via == "token":
        token = bearer_token()
        look, gone = functools.partial(find_token, engine, token), \
            "the API token was revoked or deleted, or its user disabled"
    elif identity.via == "proxy":
        def look():
            user = get_user(engine, identity.name)
            return None if user is None or user.disabled else user
        gone = "the user was disabled or deleted"
    else:
        look = functools.partial(load_session_user, engine, current_user.session_key,
                                 hours=rt.settings.session_hours)
        gone = "the session ended (signed out, the password changed, or the user disabled)"

    def why_not() -> str | None:
        now = look()
        if now is None:
            return gone
        if not Reader.of(now.role, rt.mask, now.grants).sees_all_of(reader):
            return f"{identity.name} may read less now (their role or scopes were narrowed)"
        return None

    return why_not


def wants_a_session() -> bool:
    """True when this request's route needs a role and nobody is signed in.

    ``requires`` answers it (the login page; 401 for htmx) before the view does anything, so its
    CSRF check is skipped: it would refuse the token of a session that ended (a form or an
    editor's live check after logout elsewhere) with "reload the page", and htmx would swap
    that sentence into the page.
    """
    view = current_app.view_functions.get(request.endpoint) if request.endpoint else None
    return getattr(view, "required_role", None) is not None and current_identity() is None


def actor_name() -> str:
    """The name written into the audit: the user's name, or ``token:<name>`` for an API token."""
    identity = current_identity()
    return identity.name if identity else ANONYMOUS


# --- the role of every route ------------------------------------------------------------------

def _login_url() -> str:
    if request.method in ("GET", "HEAD"):
        target = request.full_path.rstrip("?")
    else:
        # A form's POST target cannot be opened with GET: return to the page the form was on.
        referrer = urlsplit(request.referrer or "")
        same_site = referrer.netloc == request.host
        target = (referrer.path + (f"?{referrer.query}" if referrer.query else "")) if same_site else "/"
    return url_for("auth.login", next=safe_next(target))


def _signed_out_page():
    """A form posted after its session ended (logout in another tab, an expired session): nothing
    was done (the view never runs, as without a CSRF check nothing may), and the page says so with
    what was typed in it, to copy before signing in again; a redirect to the login page threw the
    form away."""
    typed = [(title, value) for name, title in TYPED_FIELDS if (value := request.form.get(name) or "").strip()]
    return render_template("signed_out.html", typed=typed, login_url=_login_url()), 401


def requires(role: str | None, *, fragment: bool = False, from_memory: bool = False) -> Callable:
    """Decorate a view with the least role it needs (None: open to anyone, e.g. /healthz).

    The role is also kept on the view function, so a test can check every route has one.
    ``fragment`` marks a view that answers only a piece of a page (an htmx poll): it is never
    the page to return to after login. ``from_memory``: the view answers from memory alone (the
    status banner), so it answers while the database is unreachable too, to a caller who
    presents a session or a token that cannot be checked meanwhile (it tells no more than
    /healthz tells anyone).
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
                    if bearer_token() is not None:  # one sent, and not one of ours (or no longer)
                        return jsonify(error="The API token is not valid: unknown, revoked, or its user "
                                             "disabled. Send a valid one (Authorization: Bearer ...)."), 401
                    if wants_json():
                        return jsonify(error="Log in or send an API token (Authorization: Bearer ...)."), 401
                    if request.headers.get("HX-Request"):
                        # Neither a redirect (htmx would swap the login page into a fragment) nor
                        # HX-Redirect (it would navigate away from what the person typed): the
                        # page stays, and static/app.js says in the banner that the session ended.
                        return current_app.response_class(SIGNED_OUT + "\n", status=401, mimetype="text/plain")
                    if request.method not in ("GET", "HEAD"):
                        return _signed_out_page()
                    return redirect(_login_url())
                if not identity.may(role):
                    raise Forbidden(f"This needs the {role} role; {identity.name} has {identity.role}.")
            return view(*args, **kwargs)

        wrapped.required_role = role
        wrapped.fragment = fragment
        wrapped.from_memory = from_memory
        return wrapped

    return decorate


# --- login and logout -------------------------------------------------------------------------

#: The longest page address kept to go back to after signing in: it rides in the session cookie,
#: which a browser refuses past 4 KB (a crafted link's sign-in could then never finish).
NEXT_MAX = 1024


def safe_next(target: str | None) -> str:
    """``target`` if it is a page of this site, else the list page: no open redirect, and never
    a fragment, a JSON route or a form's POST target (shown bare after login), nor an address
    longer than NEXT_MAX."""
    # Browsers drop tabs and newlines and read '\' as '/', so "/\t/evil" would become "//evil".
    if target and len(target) <= NEXT_MAX and target.startswith("/") and target.isprintable() and " " not in target \
            and "\\" not in target:
        parts = urlsplit(target)
        if not parts.scheme and not parts.netloc and not target.startswith("//") and _is_page(parts.path):
            return target
    return url_for("pages.index")


def _is_page(path: str) -> bool:
    """True when a GET of ``path`` answers a whole page that needs a login."""
    if path.startswith("/api/"):
        return False
    try:
        endpoint, _ = current_app.create_url_adapter(request).match(path, method="GET")
    except HTTPException:  # unknown, POST only, or a redirect to another path
        return False
    view = current_app.view_functions.get(endpoint)
    return (view is not None and getattr(view, "required_role", None) is not None
            and not getattr(view, "fragment", False))


def login_page(error: str | None = None, status: int = 200, username: str = ""):
    """The login page: the password form (unless DLQ_LOCAL_LOGIN=false), the single sign-on
    button where configured, and ``error``'s one sentence; ``username`` stays in its box after
    a refused try (the password does not)."""
    sso = current_app.extensions.get(SINGLE_SIGN_ON)
    return render_template("login.html", error=error, sso=sso.offer() if sso else None, username=username[:200],
                           local_login=current_runtime().settings.local_login), status


@bp.route("/login", methods=["GET", "POST"])
@requires(None)
def login():
    """The login form; a failed login says nothing about which part was wrong. Only a POST is a
    login attempt: a HEAD (a health check, a link checker) answers as the GET does."""
    if request.method != "POST":
        return login_page()
    if not current_runtime().settings.local_login:
        return login_page(NO_PASSWORDS, 403)
    name = request.form.get("username", "")
    address = client_address()
    throttle = login_throttle()
    refused = throttle.check(name, address)
    if refused:
        # Checked before the password: while throttled, guessing learns nothing.
        message = f"{refused.message} Try again in {wait_in_words(refused.seconds)}."
        return *login_page(message, 429, name), {"Retry-After": str(refused.seconds)}
    user = verify_password(current_runtime().engine, name, request.form.get("password", ""))
    if user is None:
        throttle.failed(name, address)
        return login_page(LOGIN_FAILED, 401, name)
    throttle.succeeded(name, address)
    session.clear()  # a fresh session (and CSRF token) at login: nothing carries over
    keep_session(current_runtime().settings.session_hours)  # the cookie ends with the session
    key = start_session(current_runtime().engine, user.id, hours=current_runtime().settings.session_hours)
    login_user(SessionUser(user.id, user.name, user.role, key, user.grants))
    return redirect(safe_next(request.args.get("next")))


@bp.route("/logout", methods=["POST"])
@requires("viewer")
def logout():
    """End this session only (a copy of its cookie too); the user's other sessions go on. A
    single sign-on session continues to the provider's logout, which returns to /login."""
    id_token = None
    if current_user.is_authenticated:
        id_token = end_session(current_runtime().engine, current_user.session_key)
    logout_user()
    session.clear()
    sso = current_app.extensions.get(SINGLE_SIGN_ON)
    provider_logout = sso.logout_url(id_token) if sso and id_token else None
    return redirect(provider_logout or url_for("auth.login"))
