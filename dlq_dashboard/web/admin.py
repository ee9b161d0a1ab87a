"""/admin/users: the admin's page of users and API tokens (roles, scopes, how they sign in, last
sign-in or use; as JSON at GET /api/admin/users) and its actions: create, disable, enable, change a role and its scopes, revoke,
end every session of a user.

Each action is a short block over accounts/, the functions the CLI calls, which write the audit
record (who did what to whom) in the change's transaction. A dangerous action (disable, end
sessions, revoke, a role changed to or from admin) answers first with a confirmation, a form that
sends the same values again with ``confirmed``; the page's disable, end-sessions and revoke
buttons ask by htmx, so the confirmation appears on the page (without JavaScript, and for a role,
it is a page of its own). A change that is done answers POST-redirect-GET with a flashed
sentence. Bad input answers the page again with one sentence and every value that was sent (a
password aside), so nothing typed is lost.
"""

from __future__ import annotations

import re

from flask import Blueprint, flash, jsonify, make_response, render_template, request, url_for

from .. import accounts
from ..accounts import AccountError, describe_grant
from ..errors import NotFound
from ..scopes import ROLES, ScopeError, check_sources
from ..times import format_time
from . import current_runtime
from .auth import actor_name, current_identity, requires
from .responses import after_post, htmx, page_or_fragment

bp = Blueprint("admin", __name__)
TEMPLATE = "admin_users.html"


# --- reading ----------------------------------------------------------------------------------

def _page(status: int = 200, *, error: str | None = None, sent: dict | None = None, shown: dict | None = None,
          confirm: dict | None = None):
    """The page (or for htmx its ``confirm`` block: a confirmation or a refusal's sentence)."""
    engine = current_runtime().engine
    context = {"error": error, "sent": sent or {}, "shown": shown, "confirm": confirm, "roles": ROLES,
               "describe_grant": describe_grant}
    if htmx and (confirm or error) and not shown:
        # A row's form asked by htmx: the confirmation (or why not) appears above the tables,
        # and every form keeps what was typed in it.
        response = page_or_fragment(TEMPLATE, "confirm", status, **context)
    else:
        context.update(users=accounts.list_users(engine), sessions=accounts.open_sessions(engine),
                       tokens=accounts.list_tokens(engine))
        response = make_response(render_template(TEMPLATE, **context), status)
        response.vary.add("HX-Request")
    # A password or a token shown once is not kept by the browser's cache.
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.route("/admin/users")
@requires("admin")
def users():
    """Every user and token with their role, scopes, sign-in and state, and the forms that change them."""
    return _page()


@bp.route("/api/admin/users")
@requires("admin")
def users_json():
    """What /admin/users shows, as JSON: every user and token (never a password, a hash or a token)."""
    engine = current_runtime().engine
    sessions = accounts.open_sessions(engine)
    response = jsonify(users=[_user_json(u, sessions.get(u.id, 0)) for u in accounts.list_users(engine)],
                       tokens=[_token_json(t) for t in accounts.list_tokens(engine)])
    response.headers["Cache-Control"] = "no-store"
    return response


def _user_json(user: accounts.UserInfo, sessions: int) -> dict:
    return {"name": user.name, "role": user.role,
            "scopes": None if user.scopes is None else [str(s) for s in user.scopes],
            "grants": [g.to_dict() for g in user.given], "via": user.via,
            "last_sign_in_at": format_time(user.last_sign_in_at), "sessions": sessions,
            "state": "disabled" if user.disabled else "active"}


def _token_json(token: accounts.TokenInfo) -> dict:
    # A revoked token's row keeps its name with ":revoked:..." added; the page shows the name.
    return {"name": token.name if token.revoked_at is None else token.name.split(":revoked:")[0],
            "role": token.role, "scopes": None if token.scopes is None else [str(s) for s in token.scopes],
            "created_at": format_time(token.created_at), "last_used_at": format_time(token.last_used_at),
            "revoked_at": format_time(token.revoked_at), "state": "active" if token.revoked_at is None else "revoked"}


# --- what a form sends ------------------------------------------------------------------------

def _scopes_text(form) -> str:
    return form.get("scopes", "")


def _read_grant(form, held: tuple | None = None) -> tuple[str, tuple | None]:
    """The role and scopes a form sends (scopes separated by commas, spaces or lines; an empty
    field: every subject); AccountError for a bad one, and for a new scope naming a source this
    dashboard does not have (one the account ``held`` already stays: its source may have been
    removed from DLQ_CONFIG since, and its stored entries are still read)."""
    role = accounts.check_role(form.get("role", ""))
    written = _scopes_text(form)
    texts = [t for t in re.split(r"[\s,]+", written) if t]
    # A field that holds something but names no pattern (" , ") is refused, as the command
    # line's --scope " , " is: read as every subject, it would widen what was meant to narrow.
    scopes = accounts.read_scopes(texts or ([written] if written else None))
    try:  # a source this dashboard does not have: the scope would reach nothing
        check_sources(sorted(set(scopes or ()) - set(held or ())), current_runtime().feeds)
    except ScopeError as exc:
        raise AccountError(str(exc)) from None
    accounts.check_grant(role, scopes)
    return role, scopes


def _askable(name: str) -> bool:
    # A name from the path that no account can have (PostgreSQL refuses a NUL in a query's text).
    return name.isprintable() and len(name) <= 255


def _user_or_404(name: str) -> accounts.UserInfo:
    user = accounts.get_user(current_runtime().engine, name) if _askable(name) else None
    if user is None:
        raise NotFound(f"There is no user named {name!r}.")
    return user


def _token_or_404(name: str) -> accounts.TokenInfo:
    token = next((t for t in accounts.list_tokens(current_runtime().engine)
                  if t.name == name and t.revoked_at is None), None) if _askable(name) else None
    if token is None:
        raise NotFound(f"There is no active API token named {name!r}.")
    return token


def _confirmed() -> bool:
    return request.form.get("confirmed") == "yes"


def _confirm(sentence: str, button: str, action: str, **fields: str):
    """The confirmation of a dangerous action: its consequences in a sentence, and a form that
    posts the same values to ``action`` with ``confirmed``."""
    return _page(confirm={"sentence": sentence, "button": button, "action": action, "fields": fields})


def _done(message: str):
    flash(message)
    return after_post(url_for("admin.users"))


def _is_me(name: str) -> bool:
    identity = current_identity()
    return identity is not None and identity.via != "token" and identity.name == name


# --- users ------------------------------------------------------------------------------------

@bp.route("/admin/users", methods=["POST"])
@requires("admin")
def create_user():
    """Create a local user; without a password one is made and shown once."""
    form = request.form
    name = form.get("name", "").strip()
    sent = {"form": "new-user", "name": name, "role": form.get("role", ""), "scopes": _scopes_text(form)}
    given = form.get("password", "")
    password = given or accounts.new_password()
    try:
        role, scopes = _read_grant(form)
        user = accounts.create_user(current_runtime().engine, name, password, role, scopes, actor=actor_name())
    except AccountError as exc:
        return _page(400, error=_sentence(exc, name), sent=sent)
    shown = {"what": "user", "name": user.name, "grant": describe_grant(user.role, user.scopes),
             "secret": None if given else password}
    return _page(shown=shown)


@bp.route("/admin/users/<name>/grant", methods=["POST"])
@requires("admin")
def grant_user(name: str):
    """Change a user's role and scopes; to or from admin only once confirmed."""
    user = _user_or_404(name)
    sent = {"form": f"user:{user.name}", "role": request.form.get("role", ""), "scopes": _scopes_text(request.form)}
    try:
        role, scopes = _read_grant(request.form, user.scopes)
    except AccountError as exc:
        return _page(400, error=_sentence(exc, user.name), sent=sent)
    if (role, scopes) == (user.role, user.scopes):
        return _done(f"{user.name} is {describe_grant(role, scopes)} already; nothing was changed.")
    if _is_me(user.name) and role != "admin":
        return _page(400, error="You cannot take the admin role from yourself: another admin can.", sent=sent)
    if (role == "admin") != (user.role == "admin") and not _confirmed():
        consequence = ("may then manage every user and token" if role == "admin"
                       else "may then no longer manage users and tokens")
        return _confirm(f"Make {user.name} {describe_grant(role, scopes)}? They {consequence}, from their next "
                        "request.", f"Make {user.name} {role}", url_for("admin.grant_user", name=user.name),
                        role=role, scopes=", ".join(map(str, scopes or ())))
    try:
        changed = accounts.set_role_and_scopes(current_runtime().engine, user.name, role, scopes, actor=actor_name())
    except AccountError as exc:
        return _page(400, error=_sentence(exc, user.name), sent=sent)
    return _done(f"{changed.name} is now {describe_grant(changed.role, changed.scopes)}.")


@bp.route("/admin/users/<name>/disable", methods=["POST"])
@requires("admin")
def disable_user(name: str):
    """Disable a user once confirmed: their sessions end at once and they cannot sign in."""
    user = _user_or_404(name)
    if _is_me(user.name):
        return _page(400, error="You cannot disable your own account: another admin can.")
    if not _confirmed():
        return _confirm(f"Disable {user.name}? {_their_sessions(user)} end at once, and they cannot sign in "
                        "until an admin enables them again.", f"Disable {user.name}",
                        url_for("admin.disable_user", name=user.name))
    ended = accounts.set_disabled(current_runtime().engine, user.name, True, actor=actor_name())
    return _done(f"Disabled {user.name}; {_count(ended)} ended.")


@bp.route("/admin/users/<name>/enable", methods=["POST"])
@requires("admin")
def enable_user(name: str):
    """Enable a user again."""
    user = _user_or_404(name)
    accounts.set_disabled(current_runtime().engine, user.name, False, actor=actor_name())
    return _done(f"Enabled {user.name}; they may sign in again.")


@bp.route("/admin/users/<name>/end-sessions", methods=["POST"])
@requires("admin")
def end_sessions(name: str):
    """End every session of a user once confirmed; the user stays enabled and may sign in again."""
    user = _user_or_404(name)
    if not _confirmed():
        yours = " Yours in this browser too." if _is_me(user.name) else ""
        return _confirm(f"End every session of {user.name}? {_their_sessions(user)} end at once; they may sign "
                        f"in again.{yours}", f"End the sessions of {user.name}",
                        url_for("admin.end_sessions", name=user.name))
    ended = accounts.end_user_sessions(current_runtime().engine, user.name, actor=actor_name())
    return _done(f"Ended {_count(ended)} of {user.name}.")


def _their_sessions(user: accounts.UserInfo) -> str:
    n = accounts.open_sessions(current_runtime().engine).get(user.id, 0)
    return "Their one session will" if n == 1 else f"Their {n} sessions will"


# --- tokens -----------------------------------------------------------------------------------

@bp.route("/admin/tokens", methods=["POST"])
@requires("admin")
def create_token():
    """Create an API token and show it once."""
    form = request.form
    name = form.get("name", "").strip()
    sent = {"form": "new-token", "name": name, "role": form.get("role", ""), "scopes": _scopes_text(form)}
    try:
        role, scopes = _read_grant(form)
        token = accounts.create_token(current_runtime().engine, name, role, scopes, actor=actor_name())
    except AccountError as exc:
        return _page(400, error=_sentence(exc, name), sent=sent)
    return _page(shown={"what": "token", "name": name, "grant": describe_grant(role, scopes), "secret": token})


@bp.route("/admin/tokens/<name>/grant", methods=["POST"])
@requires("admin")
def grant_token(name: str):
    """Change a token's role and scopes; to or from admin only once confirmed."""
    token = _token_or_404(name)
    sent = {"form": f"token:{token.name}", "role": request.form.get("role", ""), "scopes": _scopes_text(request.form)}
    try:
        role, scopes = _read_grant(request.form, token.scopes)
    except AccountError as exc:
        return _page(400, error=_sentence(exc, token.name), sent=sent)
    if (role, scopes) == (token.role, token.scopes):
        return _done(f"The API token {token.name} is {describe_grant(role, scopes)} already; nothing was changed.")
    if (role == "admin") != (token.role == "admin") and not _confirmed():
        return _confirm(f"Make the API token {token.name} {describe_grant(role, scopes)}? It applies from its next "
                        "call.", f"Make {token.name} {role}", url_for("admin.grant_token", name=token.name),
                        role=role, scopes=", ".join(map(str, scopes or ())))
    try:
        changed = accounts.set_token_role_and_scopes(current_runtime().engine, token.name, role, scopes,
                                                     actor=actor_name())
    except AccountError as exc:
        return _page(400, error=_sentence(exc, token.name), sent=sent)
    return _done(f"The API token {changed.name} is now {describe_grant(changed.role, changed.scopes)}.")


@bp.route("/admin/tokens/<name>/revoke", methods=["POST"])
@requires("admin")
def revoke_token(name: str):
    """Revoke a token once confirmed; it stops working at once."""
    token = _token_or_404(name)
    if not _confirmed():
        return _confirm(f"Revoke the API token {token.name}? Every script that uses it is refused from its next "
                        "call; this cannot be undone (create a new token instead).", f"Revoke {token.name}",
                        url_for("admin.revoke_token", name=token.name))
    try:
        accounts.revoke_token(current_runtime().engine, token.name, actor=actor_name())
    except AccountError as exc:  # revoked meanwhile
        return _page(400, error=_sentence(exc, token.name))
    return _done(f"Revoked the API token {token.name}.")


def _count(n: int) -> str:
    return f"{n} session{'' if n == 1 else 's'}"


def _sentence(exc: Exception, name: str) -> str:
    """The error as a sentence of the page: its first letter a capital, unless it begins with
    ``name`` (the user's or the token's it is about), whose case is never changed: a sentence of
    alice@example.com's said "Alice@example.com signs in with single sign-on"."""
    text = str(exc)
    if not (name and text.startswith(name)):
        text = text[:1].upper() + text[1:]
    return text.rstrip(".") + "."
