"""``flask --app app purge``: the retention purge, run by hand (SPEC section 9)."""

from __future__ import annotations

from contextlib import nullcontext

import click
from flask import current_app
from flask.cli import with_appcontext
from sqlalchemy.exc import DBAPIError

from ..actions.purge import RESOLVED, purge_entries
from ..redaction import scrub
from ..times import LONGEST, format_duration, parse_duration
from ..runtime import runtime_of
from .output import BAD_INPUT, CommandError, cli_actor, nats_connected


@click.command("purge")
@click.option("--older-than", metavar="DURATION",
              help="Purge entries resolved longer ago than this (90s, 12h, 7d); default DLQ_RETENTION.")
@click.option("--status", "statuses", multiple=True, metavar="STATUS",
              help="Only closed or only republished entries (repeat for both; the default).")
@click.option("--dry-run", is_flag=True, help="Say what would be purged, and change nothing.")
@with_appcontext
def purge(older_than: str | None, statuses: tuple[str, ...], dry_run: bool) -> None:
    """Remove resolved entries older than DLQ_RETENTION, with their history, search index and
    DLQ stream messages; the audit is kept. Open entries are never purged."""
    rt = runtime_of(current_app)
    for status in statuses:
        if status == "open":
            raise CommandError("open entries are never purged: close or republish them first, "
                               "or choose --status closed or --status republished", BAD_INPUT)
        if status not in RESOLVED:
            raise CommandError(f"--status {status!r} is not valid: use closed or republished", BAD_INPUT)
    if older_than is None:
        seconds = rt.settings.retention
        if not seconds:
            click.echo("DLQ_RETENTION is 0: resolved entries are kept forever, so nothing was purged. "
                       "Give --older-than to purge anyway.")
            return
    else:
        seconds = parse_duration(older_than)
        if not seconds or seconds > LONGEST:
            raise CommandError(f"--older-than {older_than!r} is not valid: use a duration above zero "
                               "such as 90s, 12h or 7d, at most 100 years", BAD_INPUT)
    chosen = tuple(s for s in RESOLVED if s in statuses) or RESOLVED
    age = format_duration(seconds)
    if dry_run:
        report = purge_entries(rt, older_than=seconds, statuses=chosen, actor=cli_actor(), dry_run=True)
        click.echo(f"Would purge {_entries(report.total)} resolved more than {age} ago: {_by_status(report)}; "
                   f"{report.with_messages} of them have a DLQ stream message to delete. Nothing was changed.")
        return
    # NATS only for what has a DLQ stream message to delete: a purge of nothing (or of entries
    # without one) waited out the connect timeout and said NATS was away, to no end.
    needs_nats = purge_entries(rt, older_than=seconds, statuses=chosen, actor=cli_actor(), dry_run=True).with_messages
    with nats_connected(rt, required=False) if needs_nats else nullcontext(True) as connected:
        if not connected:
            click.echo("NATS is not reachable: entries whose DLQ stream message cannot be deleted are kept "
                       "for the next purge.", err=True)
        try:
            report = purge_entries(rt, older_than=seconds, statuses=chosen, actor=cli_actor())
        except DBAPIError as exc:  # one line, not a traceback: the batches before it stay purged
            raise CommandError(f"the purge stopped: the database refused it ({scrub(str(exc.orig))}); the batches "
                               "purged before it stay purged, the rest is kept for the next purge") from None
    click.echo(f"Purged {_entries(report.total)} resolved more than {age} ago: {_by_status(report)}; "
               f"deleted {report.messages_deleted} DLQ stream messages.")
    if report.deferred:
        click.echo(f"Kept {report.deferred} entries for the next purge: {report.deferred_reason}.", err=True)


def _by_status(report) -> str:
    return ", ".join(f"{report.purged.get(s, 0)} {s}" for s in report.statuses)


def _entries(n: int) -> str:
    return f"{n} {'entry' if n == 1 else 'entries'}"
