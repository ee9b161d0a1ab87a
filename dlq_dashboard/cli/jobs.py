"""``flask --app app jobs list|show|start|cancel``: bulk jobs on the server, as ``POST /api/bulk``
and ``GET /api/jobs`` make and read them (actions/bulk/jobs.py, access/visible.py), read as an
admin (``--as viewer``: as a viewer reads) and audited as ``cli:<os user>``.

``jobs start`` makes the job and leaves it to the dashboard's process, which runs every queued
job within seconds, as it runs one started from a page; ``--wait`` follows it to its end, and
runs it from the command itself (through NATS) when no dashboard is running to. ``--dry-run``
says what it would take, as a page's preview does, and makes nothing.
"""

from __future__ import annotations

import shlex
import time
from contextlib import nullcontext

import click
from flask import current_app
from flask.cli import AppGroup

from ..access import visible
from ..actions.bulk.jobs import (FINISHED, JOB_ACTIONS, REPUBLISHING, NothingMatches, cancel_job, create_job,
                                 select_items)
from ..actions.bulk.listing import JOB_STATES, JOBS_LIMIT, JOBS_MAX
from ..actions.bulk.refusals import republish_refusals
from ..db.leases import held
from ..db.models import ITEM_STATES
from ..entries.fields import FIELD_PREFIX
from ..entries.blanks import blank_filters
from ..ingest.mirror import LEASE_NAME
from ..errors import InvalidRequest
from ..runtime import runtime_of
from ..web.data import list_fields
from .entries import _args, _filter_options, _reader, _reader_option, _refusals
from .output import FAILED, ID, CommandError, cli_actor, echo_json, nats_connected, table

jobs = AppGroup("jobs", help="List, show, start and cancel bulk jobs: republish, close, patch, repair or reopen many "
                             "entries at once.")

#: How often ``jobs start --wait`` reads the job's progress.
POLL_SECONDS = 1.0
#: How long --wait leaves a queued job to a running dashboard before it runs the job itself (the
#: dashboard takes queued jobs at its recovery pass, every 5 seconds).
DASHBOARD_GRACE = 15.0


def _progress(job: dict) -> str:
    """One line of a job's progress, as its page's."""
    state = "finished" if job["state"] == "done" else job["state"]
    cancelled = f", {job['cancelled']:,} cancelled" if job.get("cancelled") else ""
    return (f"{state}: {job['done']:,} done, {job['failed']:,} failed, {job['skipped']:,} skipped{cancelled}, "
            f"{job['pending']:,} to go, of {job['total']:,}")


@jobs.command("list")
@click.option("--state", type=click.Choice(JOB_STATES), help="Only running or only finished jobs.")
@click.option("--limit", type=click.IntRange(1, JOBS_MAX), default=JOBS_LIMIT, show_default=True,
              help="The most jobs, newest first.")
@click.option("--json", "as_json", is_flag=True, help="The API's JSON: {\"jobs\": [...], \"next_cursor\"}.")
@_reader_option
@_refusals
def list_jobs(state: str | None, limit: int, as_json: bool, as_role: str, scopes: tuple[str, ...]) -> None:
    """Bulk jobs, newest first: who started which action on what, and how far it is."""
    page = visible.read_jobs(_reader(as_role, scopes), runtime_of(current_app).store, list_fields(),
                             cursor=None, limit=limit, state=state)
    if as_json:
        echo_json(page)
        return
    if not page["jobs"]:
        click.echo("No jobs.")
        return
    # Each item is done, failed, skipped, cancelled or pending: the columns add up to TOTAL.
    table([(j["id"], j["action"], j["state"], j["done"], j["failed"], j["skipped"], j["cancelled"], j["pending"],
            j["total"], j["actor"], j["selection_text"]) for j in page["jobs"]],
          ("ID", "ACTION", "STATE", "DONE", "FAILED", "SKIPPED", "CANCELLED", "PENDING", "TOTAL", "BY", "SELECTION"))


@jobs.command("show")
@click.argument("job_id", type=ID)
@click.option("--state", type=click.Choice(ITEM_STATES), help="Only its items in this state.")
@click.option("--limit", type=click.IntRange(0, 1000), default=50, show_default=True, help="Items to show.")
@click.option("--json", "as_json", is_flag=True, help="The API's JSON of GET /api/jobs/<id>.")
@_reader_option
@_refusals
def show(job_id: int, state: str | None, limit: int, as_json: bool, as_role: str, scopes: tuple[str, ...]) -> None:
    """A job's progress, why its items failed, and its items' results."""
    job = visible.read_job(_reader(as_role, scopes), runtime_of(current_app), job_id, list_fields(),
                           item_state=state, limit=limit)
    if as_json:
        echo_json(job)
        return
    click.echo(f"Job {job['id']}: bulk {job['action']} by {job['actor']}, {_progress(job)}.")
    click.echo(f"Selection: {job['selection_text']}.")
    if job["failure_reasons"]:
        click.echo("Why items failed or were skipped:")
        for reason in job["failure_reasons"]:
            click.echo(f"  {reason['count']:,}: {reason['reason']}")
        for unsettled in ("failed", "skipped"):
            if job[unsettled]:
                click.echo(f"The {unsettled} ones are a selection of their own: --job {job['id']}:{unsettled}")
    if job["items"]:
        table([(i["entry_id"], i["version"], i["state"], i["result"] or "") for i in job["items"]],
              ("ENTRY", "VERSION", "STATE", "RESULT"))


def _selection(ids: tuple[int, ...], options: dict) -> dict:
    """The entries a job takes, as create_job and select_items take them: --id, or the filters."""
    filters = _args(options)
    if ids and filters:
        raise InvalidRequest("Choose the entries either by --id or by filters, not both.")
    # As POST /api/bulk: no filter, or only blank ones (--subject "", as an unset variable gives
    # it), would take every open entry.
    blank = None if ids else blank_filters(filters)
    if blank is not None:
        given = " and ".join(_as_option(name, value) for name, value in blank.items())
        said = f": {given} {'is' if len(blank) == 1 else 'are'} blank, which is no filter and would take every " \
               "open entry" if blank else ""
        raise InvalidRequest(f"Choose the entries by --id or by at least one filter{said} (--status open for every "
                             "open entry).")
    return {"ids": list(ids)} if ids else {"filter_args": filters}


def _as_option(name: str, value: str) -> str:
    """A filter's parameter and value as its option is written (``--field Customer=``)."""
    if name.startswith(FIELD_PREFIX):
        return f"--field {shlex.quote(name[len(FIELD_PREFIX):] + '=' + value)}"
    return f"--{name.replace('_', '-')} {shlex.quote(value)}"


@jobs.command("start")
@click.argument("action", type=click.Choice(JOB_ACTIONS))
@_filter_options
@click.option("--id", "ids", type=ID, multiple=True, help="An entry's id, instead of filters; give it once for each.")
@click.option("--only-valid", is_flag=True, help="Only those that pass the current schema (a patch: once patched, "
                                                  "which a patch job does unless --all-patched).")
@click.option("--all-patched", is_flag=True, help="A patch job republishes every patched payload, passing or not.")
@click.option("--patch-file", type=click.File("r"), help="A patch job's JSON Patch (RFC 6902); - reads stdin.")
@click.option("--note", help="A close job's note (kept with each entry and in the audit).")
@click.option("--force", is_flag=True, help="Also republish payloads the current schema refuses.")
@click.option("--dry-run", is_flag=True, help="Say what the job would take, and make nothing.")
@click.option("--wait", is_flag=True, help="Follow the job to its end (running it here, through NATS, when no "
                                            "dashboard runs it); exit code 1 when any item failed.")
@click.option("--json", "as_json", is_flag=True, help="The job's JSON (GET /api/jobs/<id>) once made or finished.")
@_refusals
def start(action: str, ids: tuple[int, ...], only_valid: bool, all_patched: bool, patch_file, note: str | None,
          force: bool, dry_run: bool, wait: bool, as_json: bool, **options) -> None:
    """Start a bulk job over the entries the filters select (open ones unless --status says
    otherwise; closed ones to reopen) or the entries --id names: republish, close, patch
    (--patch-file), repair or reopen."""
    rt = runtime_of(current_app)
    selection = _selection(ids, options)
    if action == "patch":
        if patch_file is None:
            raise InvalidRequest("A patch job needs --patch-file: a JSON Patch (RFC 6902), e.g. "
                                 '[{"op": "replace", "path": "/currency", "value": "EUR"}]')
        only_valid = not all_patched
    elif patch_file is not None or all_patched:
        raise InvalidRequest("--patch-file and --all-patched are for a patch job.")
    if dry_run:
        _dry_run(rt, action, selection, only_valid and action in ("republish", "close"))
        return
    patch = patch_file.read() if patch_file is not None else None

    def make() -> int:
        try:
            return create_job(rt, action, actor=cli_actor(), note=note, force=force, only_valid=only_valid,
                              patch=patch, start=False, **selection)
        except NothingMatches as exc:  # the request is right, as for no such entry: exit 1, not 2
            raise CommandError(str(exc), FAILED) from None

    reader = _reader("admin")
    if not wait:
        job = visible.read_job(reader, rt, make(), list_fields(), limit=0)
        if as_json:
            echo_json(job)
            return
        click.echo(f"Made job {job['id']}: bulk {action} of {job['total']:,} ({job['selection_text']}). The "
                   f"dashboard runs it; follow it with: jobs show {job['id']}")
        return
    # NATS first, for a job that needs it: without it the job is not made (nothing to leave behind).
    # One that does not (a close that deletes nothing, a reopen) never asks for it.
    needs_nats = action in REPUBLISHING or (action == "close" and rt.settings.delete_on_close)
    with nats_connected(rt) if needs_nats else nullcontext():
        job_id = make()
        job = _follow(rt, job_id, quiet=as_json)
    if as_json:
        echo_json(visible.read_job(reader, rt, job_id, list_fields(), limit=0))
    else:
        click.echo(f"Job {job_id}: {_progress(job)}.")
    if job["failed"]:
        raise CommandError(f"{job['failed']:,} items of job {job_id} failed: jobs show {job_id} --state failed "
                           "says why", FAILED)


def _follow(rt, job_id: int, *, quiet: bool) -> dict:
    """Read the job's progress until it ends, a line each time it moves unless ``quiet``. A
    running dashboard (one holds the mirror's lease) runs it, with its own settings (its schemas,
    its sources), within seconds; without one, or when it has not taken the job after
    DASHBOARD_GRACE seconds, it runs here (a dashboard taking it meanwhile keeps it: its lease)."""
    reader, last, queued_since = _reader("admin"), None, time.monotonic()
    here = not held(rt.engine, LEASE_NAME)
    if here:
        rt.jobs.submit(job_id)
    while True:
        job = visible.read_job(reader, rt, job_id, limit=0)
        if not here and job["state"] == "queued" and time.monotonic() - queued_since > DASHBOARD_GRACE:
            here = True
            rt.jobs.submit(job_id)
        line = _progress(job)
        if line != last and not quiet:
            click.echo(f"Job {job_id}: {line}", err=True)
        last = line
        if job["state"] in FINISHED:
            rt.jobs.join(job_id)
            return job
        time.sleep(POLL_SECONDS)


def _dry_run(rt, action: str, selection: dict, only_valid: bool) -> None:
    """What a job would take (select_items' summary), and for a republish what it would refuse."""
    items, summary = select_items(rt, only_valid=only_valid, action=action, **selection)
    if not items:
        raise CommandError(str(NothingMatches()), FAILED)
    upto = "up to " if summary.get("unjudged") else ""
    click.echo(f"Would {action} {upto}{len(items):,} {'entry' if len(items) == 1 else 'entries'}"
               + (f" ({summary['missing']:,} of the ids not found)" if summary.get("missing") else "") + ":")
    for status, n in summary["by_status"].items():
        click.echo(f"  {n:,} {status}")
    for subject, n in summary["subjects"].items():
        click.echo(f"  {n:,} of {subject or '(no subject)'}")
    if summary.get("left_out_invalid"):
        click.echo(f"  {summary['left_out_invalid']:,} left out: they do not pass the current schema")
    if action == "republish":
        with nats_connected(rt, required=False):  # which subjects a stream stores: asked when it answers
            refusals = republish_refusals(rt, items.ids, only_valid=only_valid)
        for sentence, n in refusals["reasons"].items():
            click.echo(f"  {n:,} would be refused: {sentence}")
        if refusals["lifted"]:
            click.echo(f"  With --force, the {refusals['lifted']:,} that only the current schema refuses are "
                       "republished as they are.")
        if refusals["note"]:
            click.echo(f"  {refusals['note']}")
    click.echo("Nothing was made (--dry-run).")


@jobs.command("cancel")
@click.argument("job_id", type=ID)
@_refusals
def cancel(job_id: int) -> None:
    """Cancel a job after its current window (its items not reached end cancelled)."""
    rt = runtime_of(current_app)
    if cancel_job(rt, job_id, actor=cli_actor()):
        click.echo(f"Cancelling job {job_id}: it stops after its current window.")
    else:
        click.echo(f"Job {job_id} had already finished; nothing was cancelled.")
