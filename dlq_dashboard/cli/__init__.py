"""Admin commands: ``flask --app app users ...`` and ``tokens ...`` (here), ``entries ...``
(entries.py), ``groups ...`` (groups.py), ``jobs ...`` (jobs.py) and ``purge`` (purge.py).

Users and tokens change through the functions /admin/users calls (accounts/), audited with the
actor ``cli:<os user>``. ``--scope PATTERN`` (repeated, or several separated by ',') limits a role
to the subjects the patterns cover; without it a role covers every subject. ``users scope`` and
``tokens scope`` change them: ``--scope`` sets new ones, ``--all`` removes them (every subject);
one of the two, or ``--role`` alone (the scopes stay), must be given, so that a forgotten option
never widens anyone's reach."""

from __future__ import annotations

import sys

import click
from flask import Flask, current_app
from flask.cli import AppGroup

from .. import accounts
from ..accounts import ROLES, AccountError
from ..runtime import runtime_of
from ..scopes import ScopeError, check_sources
from ..times import format_time
from .entries import entries
from .groups import groups
from .jobs import jobs
from .output import BAD_INPUT, CommandError, cli_actor, utf8_arguments
from .output import table as _table
from .purge import purge

users = AppGroup("users", help="Create, list, scope, disable and enable the people who log in; end their sessions.")
tokens = AppGroup("tokens", help="Create, list, scope and revoke API tokens for scripts.")
#: Every admin command, as ``flask --app app`` and ``python app.py`` (cli/main.py) run them.
ADMIN_COMMANDS = (users, tokens, entries, groups, jobs, purge)


def init_app(app: Flask) -> None:
    """Register the admin commands (ADMIN_COMMANDS): the ``users``, ``tokens``, ``entries``,
    ``groups`` and ``jobs`` command groups and ``purge``."""
    for command in ADMIN_COMMANDS:
        app.cli.add_command(command)


def _engine():
    return runtime_of(current_app).engine


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        # One line, without its line ending: `echo "$PW" | flask ... --password-stdin`.
        return sys.stdin.readline().rstrip("\r\n")
    return click.prompt("Password", hide_input=True, confirmation_prompt=True)


def _done(call, *args, **kwargs):
    try:
        return call(*args, **kwargs)
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None


def _scopes(texts: tuple[str, ...], held=None):
    """The --scope options as scopes (None without any); each was read as the option was
    (_scope_patterns), so a bad one never reaches here. A new one (not among those ``held``
    already) naming a source this dashboard does not have is a usage error too (exit code 2,
    the usage and the sentence): it would reach nothing."""
    try:
        scopes = accounts.read_scopes(texts or None)
        check_sources(sorted(set(scopes or ()) - set(held or ())), runtime_of(current_app).feeds)
    except (AccountError, ScopeError) as exc:
        raise click.BadParameter(f"{exc}; nothing was changed.", click.get_current_context(),
                                 param_hint="'--scope'") from None
    return scopes


def _scope_patterns(ctx, param, texts: tuple[str, ...]) -> tuple[str, ...]:
    """The --scope option's check: one that is not a subject pattern is a usage error (exit code
    2 with the command's usage and the sentence, as a bad --role is), before anything is done."""
    try:
        accounts.read_scopes(texts or None)
    except AccountError as exc:
        raise click.BadParameter(f"{exc}; nothing was changed.", ctx, param) from None
    return texts


def _grant(role: str, scopes) -> str:
    # "operator", or "operator over orders.>, billing.>".
    return role if scopes is None else accounts.describe_grant(role, scopes)


def _shown(scopes) -> str:
    # One word, so that a column of `users list` stays one word wide.
    return ",".join(map(str, scopes)) if scopes else "all"


_role = click.option("--role", required=True, type=click.Choice(ROLES), help="viewer, operator or admin")
_scope = click.option("--scope", "scope", multiple=True, metavar="PATTERN", callback=_scope_patterns,
                      help="A subject pattern the role is limited to (NATS wildcards, or source:pattern); "
                           "repeat it for more. Without it: every subject.")
_new_role = click.option("--role", type=click.Choice(ROLES), help="A new role (the scopes stay unless given).")
_everything = click.option("--all", "everything", is_flag=True, help="Remove the scopes: every subject.")
_stdin = click.option("--password-stdin", is_flag=True,
                      help="Read the password from the first line of standard input instead of a prompt.")


def _changed_grant(role: str | None, scope: tuple[str, ...], everything: bool, old_role: str, old_scopes):
    """The role and scopes ``users scope`` / ``tokens scope`` ask for, from the old ones."""
    if scope and everything:
        raise CommandError("give --scope or --all, not both; nothing was changed.", BAD_INPUT)
    if not (scope or everything or role):
        raise CommandError("say what to change: --scope PATTERN (repeat it for more), --all for every "
                           "subject, or --role; nothing was changed.", BAD_INPUT)
    scopes = None if everything else (_scopes(scope, old_scopes) if scope else old_scopes)
    return role or old_role, scopes


@users.command("create")
@click.argument("name")
@_role
@_scope
@_stdin
def create_user(name: str, role: str, scope: tuple[str, ...], password_stdin: bool) -> None:
    """Create user NAME with a role (limited to --scope patterns); the password comes from a
    prompt or --password-stdin."""
    _done(accounts.check_name, name)
    scopes = _scopes(scope)
    _done(accounts.check_grant, role, scopes)  # before the password is asked for
    password = _read_password(password_stdin)
    user = _done(accounts.create_user, _engine(), name, password, role, scopes, actor=cli_actor())
    click.echo(f"Created user {user.name} ({_grant(user.role, user.scopes)}).")


@users.command("list")
def list_users() -> None:
    """List every user: role, scopes, how they sign in, state and last sign-in. A single sign-on
    user has a line for each grant their last sign-in gave (the sign-in's time is when
    DLQ_OIDC_ROLES was read), so that a grep for a subject finds every grant over it."""
    found = accounts.list_users(_engine())
    if not found:
        click.echo("No users yet.")
        return
    _table([(u.name, g.role, _shown(g.scopes), u.via, "disabled" if u.disabled else "active",
             format_time(u.last_sign_in_at) or "never") for u in found for g in u.given],
           ("NAME", "ROLE", "SCOPES", "VIA", "STATE", "LAST SIGN-IN"))


@users.command("scope")
@click.argument("name")
@_new_role
@_scope
@_everything
def scope_user(name: str, role: str | None, scope: tuple[str, ...], everything: bool) -> None:
    """Change the scopes (and with --role the role) of user NAME, from their next request."""
    user = accounts.get_user(_engine(), name)
    if user is None:
        raise click.ClickException(f"no user named {name!r}")
    role, scopes = _changed_grant(role, scope, everything, user.role, user.scopes)
    user = _done(accounts.set_role_and_scopes, _engine(), name, role, scopes, actor=cli_actor())
    click.echo(f"User {user.name} is now {accounts.describe_grant(user.role, user.scopes)}.")


@users.command("disable")
@click.argument("name")
def disable_user(name: str) -> None:
    """Disable user NAME; their sessions end at once."""
    _done(accounts.set_disabled, _engine(), name, True, actor=cli_actor())
    click.echo(f"Disabled user {name}; their sessions have ended.")


@users.command("enable")
@click.argument("name")
def enable_user(name: str) -> None:
    """Enable user NAME again."""
    _done(accounts.set_disabled, _engine(), name, False, actor=cli_actor())
    click.echo(f"Enabled user {name}.")


@users.command("end-sessions")
@click.argument("name")
def end_user_sessions(name: str) -> None:
    """End every session of user NAME (they sign in again); the user stays enabled."""
    ended = _done(accounts.end_user_sessions, _engine(), name, actor=cli_actor())
    click.echo(f"Ended {ended} session{'' if ended == 1 else 's'} of {name}.")


@users.command("set-password")
@click.argument("name")
@_stdin
def set_password(name: str, password_stdin: bool) -> None:
    """Give user NAME a new password; their sessions end. A single sign-on user has none."""
    user = accounts.get_user(_engine(), name)
    if user is None:
        raise click.ClickException(f"no user named {name!r}")
    _done(accounts.check_has_password, user)  # before the password is asked for
    password = _read_password(password_stdin)
    _done(accounts.set_password, _engine(), name, password, actor=cli_actor())
    click.echo(f"Changed the password of {name}; their sessions have ended.")


@tokens.command("create")
@click.argument("name")
@_role
@_scope
def create_token(name: str, role: str, scope: tuple[str, ...]) -> None:
    """Create API token NAME with a role (limited to --scope patterns) and print it once (only
    its hash is kept)."""
    scopes = _scopes(scope)
    token = _done(accounts.create_token, _engine(), name, role, scopes, actor=cli_actor())
    # The token alone on standard output, so `TOKEN=$(flask --app app tokens create ...)` works.
    click.echo(f"API token {name} ({_grant(role, scopes)}); shown once, store it now:", err=True)
    click.echo(token)


@tokens.command("list")
def list_tokens() -> None:
    """List API tokens: name, role, scopes, created, last used, revoked."""
    found = accounts.list_tokens(_engine())
    if not found:
        click.echo("No API tokens yet.")
        return
    _table([(t.name, t.role, _shown(t.scopes), format_time(t.created_at), format_time(t.last_used_at) or "never",
             format_time(t.revoked_at) or "active") for t in found],
           ("NAME", "ROLE", "SCOPES", "CREATED", "LAST USED", "REVOKED"))


@tokens.command("scope")
@click.argument("name")
@_new_role
@_scope
@_everything
def scope_token(name: str, role: str | None, scope: tuple[str, ...], everything: bool) -> None:
    """Change the scopes (and with --role the role) of API token NAME, from its next call."""
    token = next((t for t in accounts.list_tokens(_engine()) if t.name == name and t.revoked_at is None), None)
    if token is None:
        raise click.ClickException(f"no active token named {name!r}")
    role, scopes = _changed_grant(role, scope, everything, token.role, token.scopes)
    token = _done(accounts.set_token_role_and_scopes, _engine(), name, role, scopes, actor=cli_actor())
    click.echo(f"API token {token.name} is now {accounts.describe_grant(token.role, token.scopes)}.")


@tokens.command("revoke")
@click.argument("name")
def revoke_token(name: str) -> None:
    """Revoke API token NAME; it stops working at once."""
    _done(accounts.revoke_token, _engine(), name, actor=cli_actor())
    click.echo(f"Revoked API token {name}.")


# Once every command above is defined: an argument that is not UTF-8 is one line, exit code 2.
for _command in ADMIN_COMMANDS:
    utf8_arguments(_command)
