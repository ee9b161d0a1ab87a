"""``flask --app app groups list|show|assign|resolve|ignore|reopen|note``: a failure group's
triage on the server (SPEC section 11), through the functions the routes use (web/data.py,
access/visible.py, actions/triage.py), read as an admin (``--as viewer``: as a viewer reads) and
audited as ``cli:<os user>``.

A change acts on the group's current version unless ``--version`` names the one seen: without it,
a change made meanwhile is not noticed (the web's 409 cannot happen).
"""

from __future__ import annotations


import click
from flask import current_app
from flask.cli import AppGroup

from ..access import visible
from ..access.reader import Reader
from ..actions.triage import add_note, change_state, parse_state_change
from ..db.triage import IGNORED, INVESTIGATING, OPEN, RESOLVED
from ..runtime import runtime_of
from ..times import utcnow
from ..web.data import failure_groups
from .entries import _reader, _reader_option, _refusals
from .output import BAD_INPUT, ID, VERSION, CommandError, cli_actor, echo_json, table

groups = AppGroup("groups", help="List and show failure groups; assign, resolve, ignore, reopen them; add notes.")



@groups.command("list")
@click.option("--state", help="One or more states, separated by commas (open, investigating, resolved, ignored, "
                              "regressed).")
@click.option("--assignee", help="Only groups assigned to this name (me: the command's own user, cli:<os user>).")
@click.option("--team", help="Only groups of this team.")
@click.option("--status", default="", help="Count only entries of this status (default: every status).")
@click.option("--subject", help="Only groups of subjects matching this (NATS wildcards).")
@click.option("--source", help="Only groups of this source (DLQ_CONFIG's [[sources]] names).")
@click.option("--limit", default="200", help="The most groups (up to 1000).")
@click.option("--json", "as_json", is_flag=True, help="The API's JSON: {\"groups\": [...]}.")
@_reader_option
@_refusals
def list_groups(state, assignee, team, status, subject, source, limit, as_json: bool, as_role: str,
                scopes: tuple[str, ...]) -> None:
    """Failure groups, largest first, with their state and assignee."""
    args = {k: v for k, v in {"state": state, "assignee": assignee, "team": team, "status": status,
                              "subject": subject, "source": source, "limit": limit}.items() if v}
    answer = failure_groups(args, reader=_reader(as_role, scopes), me=cli_actor())
    if as_json:
        echo_json({"groups": [g.to_dict(answer.base) for g in answer.groups]})
        return
    if not answer.groups:
        click.echo("No groups match.")
        return
    if runtime_of(current_app).settings.sources:  # several sources (DLQ_CONFIG): say whose each group is
        table([(g.id, g.source, g.state, g.assignee or "-", g.team or "-", g.count, g.subject or "-", g.label[:60])
               for g in answer.groups], ("ID", "SOURCE", "STATE", "ASSIGNEE", "TEAM", "ENTRIES", "SUBJECT", "ERROR"))
        return
    table([(g.id, g.state, g.assignee or "-", g.team or "-", g.count, g.subject or "-", g.label[:60])
           for g in answer.groups], ("ID", "STATE", "ASSIGNEE", "TEAM", "ENTRIES", "SUBJECT", "ERROR"))


@groups.command("show")
@click.argument("group_id", type=ID)
@click.option("--json", "as_json", is_flag=True, help="The API's JSON: GET /api/groups/<id>.")
@_reader_option
@_refusals
def show_group(group_id: int, as_json: bool, as_role: str, scopes: tuple[str, ...]) -> None:
    """One group with its state, counts and activity log."""
    reader, store = _reader(as_role, scopes), runtime_of(current_app).store
    found = visible.group(reader, store, group_id)
    activity = visible.group_activity(reader, store, group_id)
    if as_json:
        echo_json({**found.to_dict(), "activity": activity})
        return
    body = found.to_dict()
    for name in ("id", "source", "state", "assignee", "resolved_in", "until", "until_count", "ignored_seen", "team",
                 "version", "subject", "reason", "label", "count", "first_seen", "last_seen", "notes"):
        if body.get(name) is not None:
            click.echo(f"{name + ':':<14}{body[name]}")
    click.echo(f"{'key:':<14}{found.key}")
    click.echo(f"{'by status:':<14}" + ", ".join(f"{s} {n}" for s, n in found.by_status.items()))
    for a in activity:
        what = a["kind"] + (f" {a['state']}" if a.get("state") else "")
        if a["kind"] == "alert":
            what += f" {a['detail'].get('event')}"
        elif a["kind"] == "purge":
            what += f": {a['detail'].get('entries')} removed by the retention purge"
        click.echo(f"{'activity:':<14}{a['at']} {a['actor']}: {what}" + (f": {a['text']}" if a.get("text") else ""))


def _change(group_id: int, version: int | None, body: dict) -> None:
    rt = runtime_of(current_app)
    seen = version if version is not None else visible.group(Reader.of("admin", None), rt.store, group_id).version
    change_state(rt.engine, group_id, seen, parse_state_change(body, utcnow(), me=cli_actor()), actor=cli_actor())
    found = visible.group(Reader.of("admin", None), rt.store, group_id)
    extra = f" ({found.assignee})" if found.assignee else ""
    click.echo(f"Group {group_id} is {found.state}{extra}, at version {found.version}.")


_version_option = click.option("--version", type=VERSION, help="The version you saw; a change since then refuses it. "
                                                           "Default: the current one.")
_note_option = click.option("--note", help="Why (kept in the group's activity and the audit).")


@groups.command("assign")
@click.argument("group_id", type=ID)
@click.argument("name", required=False)
@_version_option
@_note_option
@_refusals
def assign(group_id: int, name: str | None, version: int | None, note: str | None) -> None:
    """Mark a group investigating by NAME (default, or me: you, cli:<os user>)."""
    _change(group_id, version, {"state": INVESTIGATING, "assignee": name or cli_actor(), "note": note})


@groups.command("resolve")
@click.argument("group_id", type=ID)
@click.option("--in", "resolved_in", help="The release that fixes it (v2): a new failure regresses it.")
@_version_option
@_note_option
@_refusals
def resolve(group_id: int, resolved_in: str | None, version: int | None, note: str | None) -> None:
    """Mark a group resolved; a new failure makes it regressed (and raises group.regressed)."""
    _change(group_id, version, {"state": RESOLVED, "resolved_in": resolved_in, "note": note})


@groups.command("ignore")
@click.argument("group_id", type=ID)
@click.option("--until", help="Until this time (RFC 3339) or for this long (2h, 7d).")
@click.option("--count", "until_count", type=VERSION, help="Until this many more failures.")
@click.option("--for-good", is_flag=True, help="For good (neither a time nor a count).")
@_version_option
@_note_option
@_refusals
def ignore(group_id: int, until: str | None, until_count: int | None, for_good: bool, version: int | None,
           note: str | None) -> None:
    """Ignore a group: its failures raise no alert until its time or count is reached."""
    if for_good == bool(until or until_count):
        raise CommandError("Give one of --until, --count or --for-good.", BAD_INPUT)
    _change(group_id, version, {"state": IGNORED, "until": until, "until_count": until_count, "note": note})


@groups.command("reopen")
@click.argument("group_id", type=ID)
@_version_option
@_note_option
@_refusals
def reopen(group_id: int, version: int | None, note: str | None) -> None:
    """Make a group open again."""
    _change(group_id, version, {"state": OPEN, "note": note})


@groups.command("note")
@click.argument("group_id", type=ID)
@click.argument("text")
@_refusals
def note(group_id: int, text: str) -> None:
    """Add a note to a group's activity."""
    added = add_note(runtime_of(current_app).engine, group_id, text, actor=cli_actor())
    click.echo(f"Noted on group {group_id} at {added['at']}.")
