"""Admin commands: ``flask --app app users ...`` and ``tokens ...`` (here), ``entries ...``
(entries.py) and ``purge`` (purge.py)."""

from __future__ import annotations

import sys

import click
from flask import Flask, current_app
from flask.cli import AppGroup

from .. import accounts
from ..accounts import ROLES, AccountError
from ..runtime import runtime_of
from ..times import format_time
from .entries import entries
from .groups import groups
from .output import table as _table
from .purge import purge

users = AppGroup("users", help="Create, list, disable and enable the people who log in.")
tokens = AppGroup("tokens", help="Create, list and revoke API tokens for scripts.")


def init_app(app: Flask) -> None:
    """Register the ``users``, ``tokens``, ``entries`` and ``groups`` command groups and ``purge``."""
    app.cli.add_command(users)
    app.cli.add_command(tokens)
    app.cli.add_command(entries)
    app.cli.add_command(groups)
    app.cli.add_command(purge)


def _engine():
    return runtime_of(current_app).engine


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        # One line, without its line ending: `echo "$PW" | flask ... --password-stdin`.
        return sys.stdin.readline().rstrip("\r\n")
    return click.prompt("Password", hide_input=True, confirmation_prompt=True)


def _done(call, *args):
    try:
        return call(*args)
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None


_role = click.option("--role", required=True, type=click.Choice(ROLES), help="viewer, operator or admin")
_stdin = click.option("--password-stdin", is_flag=True,
                      help="Read the password from the first line of standard input instead of a prompt.")


@users.command("create")
@click.argument("name")
@_role
@_stdin
def create_user(name: str, role: str, password_stdin: bool) -> None:
    """Create user NAME with a role; the password comes from a prompt or --password-stdin."""
    _done(accounts.check_name, name)
    password = _read_password(password_stdin)
    user = _done(accounts.create_user, _engine(), name, password, role)
    click.echo(f"Created user {user.name} ({user.role}).")


@users.command("list")
def list_users() -> None:
    """List every user with their role and whether they are disabled."""
    found = accounts.list_users(_engine())
    if not found:
        click.echo("No users yet.")
        return
    _table([(u.name, u.role, "disabled" if u.disabled else "active") for u in found], ("NAME", "ROLE", "STATE"))


@users.command("disable")
@click.argument("name")
def disable_user(name: str) -> None:
    """Disable user NAME; their sessions end at once."""
    _done(accounts.set_disabled, _engine(), name, True)
    click.echo(f"Disabled user {name}; their sessions have ended.")


@users.command("enable")
@click.argument("name")
def enable_user(name: str) -> None:
    """Enable user NAME again."""
    _done(accounts.set_disabled, _engine(), name, False)
    click.echo(f"Enabled user {name}.")


@users.command("set-password")
@click.argument("name")
@_stdin
def set_password(name: str, password_stdin: bool) -> None:
    """Give user NAME a new password; their sessions end."""
    if accounts.get_user(_engine(), name) is None:
        raise click.ClickException(f"no user named {name!r}")
    password = _read_password(password_stdin)
    _done(accounts.set_password, _engine(), name, password)
    click.echo(f"Changed the password of {name}; their sessions have ended.")


@tokens.command("create")
@click.argument("name")
@_role
def create_token(name: str, role: str) -> None:
    """Create API token NAME with a role and print it once (only its hash is kept)."""
    token = _done(accounts.create_token, _engine(), name, role)
    # The token alone on standard output, so `TOKEN=$(flask --app app tokens create ...)` works.
    click.echo(f"API token {name} ({role}); shown once, store it now:", err=True)
    click.echo(token)


@tokens.command("list")
def list_tokens() -> None:
    """List API tokens: name, role, created, last used, revoked."""
    found = accounts.list_tokens(_engine())
    if not found:
        click.echo("No API tokens yet.")
        return
    _table([(t.name, t.role, format_time(t.created_at), format_time(t.last_used_at) or "never",
             format_time(t.revoked_at) or "active") for t in found],
           ("NAME", "ROLE", "CREATED", "LAST USED", "REVOKED"))


@tokens.command("revoke")
@click.argument("name")
def revoke_token(name: str) -> None:
    """Revoke API token NAME; it stops working at once."""
    _done(accounts.revoke_token, _engine(), name)
    click.echo(f"Revoked API token {name}.")
