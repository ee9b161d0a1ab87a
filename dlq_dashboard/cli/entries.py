"""``flask --app app entries list|show|republish|close|reopen|export``: what the API does, on the
server, through the same functions as the web routes (web/data.py, web/export.py and the
actions), read as an admin (``--as viewer``: as a viewer reads, access/visible.py) and audited as
``cli:<os user>``.

An action acts on the entry's current version unless ``--version`` names the one the operator
saw: without it, a change made meanwhile is not noticed (the web's 409 cannot happen).
"""

from __future__ import annotations

import functools
from pathlib import Path

import click
from flask import current_app
from flask.cli import AppGroup

from ..access import visible
from ..access.reader import Reader
from ..accounts import ROLES
from ..actions.close import close_entry, reopen_entry
from ..actions.republish import republish_entry
from ..entries.filters import FILTERS
from ..errors import DashboardError, InvalidRequest
from ..masking import PAYLOAD_HIDDEN, PAYLOAD_REPEATED
from ..runtime import runtime_of
from ..scopes import Grant, ScopeError, parse_scopes
from ..sources import renamed_sources, sources_of
from ..times import format_time
from ..unpacking import compression_of, decompressed_whole
from ..web.data import entries_page, entry_detail, list_fields
from ..web.export import MEDIA_TYPES, export_body
from ..web.params import single_values
from .output import BAD_INPUT, FAILED, ID, VERSION, CommandError, cli_actor, echo_json, nats_connected, table

entries = AppGroup("entries", help="List, show, republish, close, reopen and export dead-letter entries.")

#: Why DLQ_MASK hides a payload whole: the note the entry as seen carries (masking.py hidden_because).
HIDDEN_REASONS = (PAYLOAD_REPEATED, PAYLOAD_HIDDEN)

#: The filters of GET /api/entries (entries/filters.py), by the name click gives the option that
#: gives each: status for --status, msg_id for --msg-id, field for --field LABEL=VALUE.
FILTER_OPTIONS = {declared.option[0][2:].replace("-", "_"): declared for declared in FILTERS}


def _filter_options(command):
    # multiple=True: click keeps the last of a repeated option silently; the API's rule refuses it.
    for declared in reversed(FILTERS):
        flag, metavar, text = declared.option
        command = click.option(flag, metavar=metavar, multiple=True, help=text)(command)
    return command


def _reader_option(command):
    """``--as ROLE``: read as that role would (``--as viewer``: through DLQ_MASK, to hand the
    output on); the command line on the server reads as an admin by default. ``--scope
    PATTERN`` (repeatable): read as a user of that role scoped to those patterns would."""
    command = click.option("--scope", "scopes", metavar="PATTERN", multiple=True,
                           help=("Show what a user scoped to this subject pattern sees (NATS wildcards; "
                                 "give it once for each pattern, with --as viewer or operator)."))(command)
    return click.option("--as", "as_role", type=click.Choice(ROLES), default="admin", show_default=True,
                        help="Show what this role sees (viewer: values DLQ_MASK hides read \"•••\").")(command)


def _reader(role: str, scopes: tuple[str, ...] = ()) -> Reader:
    """Who the command line reads as (``scopes``: the --scope patterns, for a scoped reader)."""
    if not scopes:
        return Reader.of(role, runtime_of(current_app).mask)
    if role == "admin":
        raise InvalidRequest("--scope reads as a scoped user: give --as viewer or --as operator with it "
                             "(an admin is never scoped)")
    try:
        grant = Grant(role, parse_scopes(scopes))
    except ScopeError as exc:
        raise InvalidRequest(f"--scope: {exc}") from None
    rt = runtime_of(current_app)
    return Reader.of(role, rt.mask, (grant,), renamed_sources(sources_of(rt.settings)))


def _refusals(command):
    """Answer the project's errors as one line and an exit code: 2 for a bad request, 1 otherwise."""
    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except InvalidRequest as exc:
            raise CommandError(str(exc), BAD_INPUT) from None
        except DashboardError as exc:  # not found, a conflict, a refusal, NATS down
            raise CommandError(str(exc), FAILED) from None
    return run


def _args(options: dict) -> dict[str, str]:
    """The options as the API's parameters, by the API's rule (web/params.py): each given once
    (``--field Customer=C-42`` is ``field.Customer=C-42``)."""
    fields = list_fields()
    pairs = []
    for name, values in options.items():
        declared = FILTER_OPTIONS.get(name)
        pairs += [declared.from_option(str(v), fields) if declared else (name, str(v)) for v in values]
    return single_values(pairs)



def _one_line(text: str | None, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[:width - 1] + "…"


@entries.command("list")
@_filter_options
@click.option("--limit", metavar="N", multiple=True, help="Entries a page (as in the API).")
@click.option("--cursor", metavar="CURSOR", multiple=True, help="Continue after a page: its next_cursor.")
@click.option("--json", "as_json", is_flag=True, help="The API's JSON: {\"entries\": [...], \"next_cursor\"}.")
@_reader_option
@_refusals
def list_entries(as_json: bool, as_role: str, scopes: tuple[str, ...], **options) -> None:
    """One page of entries, newest first, under the list's filters."""
    _, page = entries_page(_args(options), reader=_reader(as_role, scopes))
    if as_json:
        echo_json(page.to_dict())
        return
    if not page.entries:
        click.echo("No entries match.")
        return
    if runtime_of(current_app).settings.sources:  # several sources (DLQ_CONFIG): say whose each entry is
        table([(e.id, e.source, e.status, e.version, e.original_subject or "-", e.reason or "-",
                _one_line(e.error, 60), format_time(e.received_at)) for e in page.entries],
              ("ID", "SOURCE", "STATUS", "VERSION", "SUBJECT", "REASON", "ERROR", "RECEIVED"))
    else:
        table([(e.id, e.status, e.version, e.original_subject or "-", e.reason or "-", _one_line(e.error, 60),
                format_time(e.received_at)) for e in page.entries],
              ("ID", "STATUS", "VERSION", "SUBJECT", "REASON", "ERROR", "RECEIVED"))
    if page.next_cursor:
        click.echo(f"More: --cursor {page.next_cursor}", err=True)


@entries.command("show")
@click.argument("entry_id", type=ID)
@click.option("--json", "as_json", is_flag=True, help="The API's JSON: GET /api/entries/<id>.")
@_reader_option
@_refusals
def show_entry(entry_id: int, as_json: bool, as_role: str, scopes: tuple[str, ...]) -> None:
    """One entry with its payload, failure group, the current schema's verdict, delivery history
    and audit: the value the entry page and GET /api/entries/<id> show."""
    detail = entry_detail(entry_id, _reader(as_role, scopes))
    body = detail.to_dict()
    if as_json:
        echo_json(body)
        return
    entry = detail.entry
    facts = ("id", "status", "version", "original_subject", "reason", "error", "deliveries", "consumer",
             "original_stream", "original_seq", "dlq_stream", "dlq_seq", "failed_at", "received_at",
             "replay_of", "closed_by", "closed_at", "close_note", "trace_id", "trace_url")
    if runtime_of(current_app).settings.sources:  # several sources (DLQ_CONFIG): say whose it is
        facts = ("id", "source") + facts[1:]
    for name in facts:
        if body.get(name) is not None:
            click.echo(f"{name + ':':<18}{body[name]}")
    if detail.group:
        click.echo(f"{'group:':<18}{detail.group.label} (group {detail.group.id})")
    if detail.failed_again:
        click.echo(f"{'failed again:':<18}entry {detail.failed_again.id}")
    for error in body.get("schema_errors") or []:
        click.echo(f"{'schema error:':<18}{error.get('path') or '/'}: {error.get('message')}")
    click.echo(f"{'current schema:':<18}{_verdict_line(detail.current_schema)}")
    if detail.current_schema.decompressed:  # compressed bytes that fail: the text inside judged too
        click.echo(f"{'decompressed:':<18}{_decompressed_line(detail.current_schema.decompressed)}")
    for note in entry.notes:  # the entry page's notes (a hidden payload's reason among them), a line each
        click.echo(f"{'note:':<18}{_one_line_note(note)}")
    click.echo("payload:")
    # Compressed, shown decompressed as the entry page shows it (never one hidden from the reader).
    how = None if entry.payload_hidden else compression_of(entry.headers, entry.payload)
    unpacked = decompressed_whole(entry.payload) if how else None
    if entry.payload_hidden:  # DLQ_MASK hides it whole: the reason its note gives, as the API's
        click.echo(f"(hidden) {next((n for n in entry.notes if n in HIDDEN_REASONS), PAYLOAD_HIDDEN)}")
    elif unpacked is not None:
        click.echo(f"(compressed: {how}, {len(entry.payload):,} bytes; shown decompressed, {len(unpacked):,} bytes)")
        click.echo(unpacked.decode("utf-8", "replace"))
    else:
        click.echo(entry.payload_text if entry.payload_text is not None else f"(not UTF-8; base64) {entry.payload_base64}")
    for event in body.get("history") or []:
        click.echo(f"history:          {event.get('at')} {event.get('kind')} {event.get('deliveries') or ''}".rstrip())
    for action in body.get("actions") or []:
        click.echo(f"audit:            {action.get('at')} {action.get('action')} by {action.get('actor')}")


def _one_line_note(note: str) -> str:
    # A note is one line of the list: a line break it quotes is written as JSON writes it, as
    # ``shown`` writes what a terminal would obey.
    return note.replace("\r", "\\r").replace("\n", "\\n")


def _verdict_line(verdict) -> str:
    if verdict.error:
        return verdict.error
    if verdict.schema is None:
        return "no schema in DLQ_SCHEMAS covers the subject"
    if verdict.valid:
        return f"valid against {verdict.schema}"
    return f"invalid against {verdict.schema}: " + _errors_line(verdict.errors)


def _decompressed_line(unpacked) -> str:
    if unpacked.valid:
        return f"({unpacked.compression}) passes: only its compression failed"
    return f"({unpacked.compression}) fails too: " + _errors_line(unpacked.errors)


def _errors_line(errors) -> str:
    return "; ".join(f"{e.get('path') or '/'}: {e.get('message')}" for e in errors)


def _version(entry_id: int, version: int | None, *, again: bool | None = None) -> int:
    # Without --version the command acts on the entry as it is now (documented above). A republish
    # of one republished already, run again from the history or after a dropped connection, asks
    # for --again first, as the pages ask before sending once more (``again``: a republish's flag).
    if version is not None:
        return version
    found = visible.lookup(_reader("admin"), runtime_of(current_app).store, entry_id, with_history=False)
    if again is False and found.status == "republished":
        raise CommandError(f"Entry {entry_id} was republished already (it is at version {found.version}): this would "
                           "send it once more. Run it with --again to, or with --version "
                           f"{found.version}; nothing was republished.", FAILED)
    return found.version


@entries.command("republish")
@click.argument("entry_id", type=ID)
@click.option("--version", type=VERSION, help="The version you saw; a change since then refuses it. "
                                          "Default: the current one.")
@click.option("--payload-file", type=click.File("rb"), help="Publish this file's bytes instead (- reads stdin).")
@click.option("--force", is_flag=True, help="Publish a payload the current schema refuses.")
@click.option("--again", is_flag=True, help="Send an entry republished already once more (without --version).")
@click.option("--json", "as_json", is_flag=True, help="The API's answer: {\"entry\", \"publish\"}.")
@_refusals
def republish(entry_id: int, version: int | None, payload_file, force: bool, again: bool, as_json: bool) -> None:
    """Republish an entry to its original subject, exactly once (needs NATS)."""
    rt = runtime_of(current_app)
    payload = payload_file.read() if payload_file is not None else None
    if payload == b"":
        # `jq ... | flask entries republish N --payload-file -` with jq failing reads nothing: refused as
        # republish_entry would (actions/decisions.py), before NATS is asked, as bad input (exit 2).
        name = getattr(payload_file, "name", "<stdin>")
        raise CommandError(f"--payload-file {name} is empty; nothing was republished.", BAD_INPUT)
    seen = _version(entry_id, version, again=again)
    with nats_connected(rt):
        outcome = republish_entry(rt, entry_id, seen, actor=cli_actor(), payload=payload, force=force)
    if as_json:
        echo_json(outcome.to_dict())
        return
    published = outcome.publish
    where = f"stream {published.stream}, seq {published.seq}" + (" (a duplicate)" if published.duplicate else "")
    click.echo(f"Republished entry {entry_id} to {outcome.entry.original_subject} as {published.msg_id}: "
               f"{where}. It is at version {outcome.entry.version}.")


@entries.command("close")
@click.argument("entry_id", type=ID)
@click.option("--note", help="Why it is closed (kept with the entry and in the audit).")
@click.option("--version", type=VERSION, help="The version you saw; default: the current one.")
@click.option("--json", "as_json", is_flag=True, help="The API's answer: {\"entry\"}.")
@_refusals
def close(entry_id: int, note: str | None, version: int | None, as_json: bool) -> None:
    """Acknowledge and close an entry (with DLQ_DELETE_ON_CLOSE, also delete its DLQ message)."""
    rt = runtime_of(current_app)
    seen = _version(entry_id, version)
    if rt.settings.delete_on_close:
        with nats_connected(rt):
            outcome = close_entry(rt, entry_id, seen, actor=cli_actor(), note=note)
    else:
        outcome = close_entry(rt, entry_id, seen, actor=cli_actor(), note=note)
    if as_json:
        echo_json(outcome.to_dict())
        return
    click.echo(f"Closed entry {entry_id}; it is at version {outcome.entry.version}.")


@entries.command("reopen")
@click.argument("entry_id", type=ID)
@click.option("--version", type=VERSION, help="The version you saw; default: the current one.")
@click.option("--json", "as_json", is_flag=True, help="The API's answer: {\"entry\"}.")
@_refusals
def reopen(entry_id: int, version: int | None, as_json: bool) -> None:
    """Reopen a closed or republished entry."""
    outcome = reopen_entry(runtime_of(current_app), entry_id, _version(entry_id, version), actor=cli_actor())
    if as_json:
        echo_json(outcome.to_dict())
        return
    click.echo(f"Reopened entry {entry_id}; it is at version {outcome.entry.version}.")


@entries.command("export")
@_filter_options
@click.option("--format", "fmt", type=click.Choice(sorted(MEDIA_TYPES)), default="json", show_default=True)
@click.option("--limit", metavar="N", multiple=True, help="Export at most N entries.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=Path),
              help="Write to this file (default: standard output).")
@_reader_option
@_refusals
def export(fmt: str, output: Path | None, as_role: str, scopes: tuple[str, ...], **options) -> None:
    """Every entry under the filters as JSON, NDJSON or CSV, streamed as the API streams it."""
    _, body = export_body(_args(options), fmt, _reader(as_role, scopes))
    if output is None:
        out = click.get_binary_stream("stdout")
        for chunk in body:
            out.write(chunk)
        out.flush()
        return
    # Written beside the file and moved over it once complete: a failed export leaves no half file.
    partial = output.with_name(output.name + ".partial")
    if not output.parent.is_dir():
        raise CommandError(f"-o {output}: the folder {output.parent} does not exist; nothing was exported.", BAD_INPUT)
    try:
        with partial.open("wb") as out:
            for chunk in body:
                out.write(chunk)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(output)
