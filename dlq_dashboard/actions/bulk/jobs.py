"""Bulk jobs: republish, close or reopen a set of entries fixed at creation, paced, cancellable, resumable.

The set is written as JobItems (entry and the version it was selected at) when the job is
made, so entries that arrive later are never swept in and every item is judged by the same
optimistic concurrency as a single action. A job thread works through the items in windows:
republish windows go through the same intents as a single republish (actions/intents.py), published
with ``publish_async`` so a window costs one round trip, and the outcome of a window is
committed with the items' results. A crash leaves intents pending; they are finished with their
own msgIds, and the job resumes with the items not yet done.

This module selects, creates, cancels and reports on jobs; runner.py runs them (a JobWork from
work.py each), paced as pacing.py says; with several sources by lanes, a source each (lanes.py).
"""

from __future__ import annotations

import hashlib
import json
from array import array
from dataclasses import replace
from typing import Any, Iterator

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from ...db.engine import write_transaction
from ...db.models import Action, Entry, Job, JobItem, Republish
from ...db.rows import insert_rows
from ...entries.fields import key_fields
from ...entries.blanks import nothing_named
from ...entries.filters import EntryFilter, FilterError, encode_cursor
from ...entries.scoping import jobs_within, scope_condition
from ...entries.source_names import filter_sources
from ...errors import Forbidden, InvalidRequest, JobNotFound
from ...scopes import Scope
from ...times import utcnow
from ...unpacking import judged
from ..close import close_note
from ..errors import Refused
from ..context import ActionContext
from ..intents import Published
from ..triage import record_job
from .lanes import connected, pending_sources, several_sources, source_names
from .listing import failure_reason_texts, group_labels, job_summary
from .patching import parse_patch
from .refusals import PREVIEW_BOUND

JOBS, ITEMS = Job.__table__, JobItem.__table__
ENTRIES, INTENTS, ACTIONS = Entry.__table__, Republish.__table__, Action.__table__
#: patch: apply one JSON Patch to each entry's payload and republish the result (patching.py);
#: repair: coerce each payload by its current schema and republish those that then pass (repairing.py);
#: reopen: open again what was closed or republished (a mistaken bulk close undone at once).
JOB_ACTIONS = ("republish", "close", "patch", "repair", "reopen")
#: The actions whose items are republished.
REPUBLISHING = ("republish", "patch", "repair")
#: The status a job by filter takes when the filter names none (or "any"): what its action can change.
DEFAULT_STATUS = {"reopen": "closed"}
#: The statuses each action can change (decisions.py: a closed entry is reopened before it is
#: republished or closed, an open one is not reopened): by filter a job takes no other status.
CHANGES = {action: ("closed", "republished") if action == "reopen" else ("open", "republished")
           for action in JOB_ACTIONS}
#: Why a reopen takes no "only those that pass": it judges nothing, and reopened them all (13 of
#: 13, 9 of them failing the schema) when asked for only those that pass.
REOPEN_JUDGES_NOTHING = ("only_valid (only those that pass the current schema) does not go with reopen, which "
                         "judges no payload: leave it out (untick it).")
#: A job in one of these states has ended; its items are settled.
FINISHED = ("done", "cancelled")


class JobError(InvalidRequest):
    """A bulk request that cannot be made; the message says why."""


class NothingMatches(JobError):
    """A selection that takes no entry: a 400 to a request, as any JobError, but exit 1 on the
    command line, where the request was right and there is nothing to do it to (docs/cli.md)."""

    def __init__(self) -> None:
        super().__init__("No entries match; nothing to do.")


class KeyReused(Refused):
    """A start's key sent again with another request (a 422, as for an Idempotency-Key)."""


def ack_sentence(publish: Published | None) -> str:
    """An item's result when its entry is (or already was) republished: where the PubAck put it."""
    if publish is None:
        return "Republished earlier."
    copy = " (a duplicate the broker had already stored)" if publish.duplicate else ""
    return f"Published to {publish.stream} seq {publish.seq}{copy}, msgId {publish.msg_id}."


# --- selecting -------------------------------------------------------------------------------

class Selection:
    """The entries a job would take (select_items), by id from the oldest, with the version each
    is taken at: two arrays of 8-byte numbers, 16 bytes an entry. A tuple an entry with its
    status, subject and source cost about 200 bytes (a close job of a million entries held
    200 MB in the request that made it); those are counted as the rows arrive instead."""

    __slots__ = ("ids", "versions")

    def __init__(self) -> None:
        self.ids, self.versions = array("q"), array("q")

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, first: int, last: int) -> Iterator[tuple[int, int]]:
        """(id, version) of the ``first``-th to the ``last``-th entry."""
        return zip(self.ids[first:last], self.versions[first:last])


def _wanted(ids) -> dict[int, int | None]:
    """{entry id: version seen or None}: as web/params.entry_ids reads a request's ids, or from
    plain ids given by code."""
    return dict(ids) if isinstance(ids, dict) else {int(i): None for i in ids}


#: A job's items written a statement at a time, as rows built for it alone.
ITEMS_A_STATEMENT = 10_000
#: Payloads ``only_valid`` judges while the entries are chosen (the newest): a preview or a start
#: answers within seconds however many are selected. The job judges the others as it reaches
#: them, as it judges every payload it republishes, and leaves out those that fail (work.py).
JUDGED_NOW = PREVIEW_BOUND


def _passes(rt: ActionContext, subject: str | None, payload, available: bool, headers) -> bool:
    """Whether an entry's payload is there and passes its subject's schema (``only_valid``)."""
    return bool(available) and rt.schemas.validate(subject, judged(headers, bytes(payload or b""))).valid


def _check_action(action: str) -> None:
    if action not in JOB_ACTIONS:
        raise JobError(f"action {action[:40]!r} is not valid: use {', '.join(JOB_ACTIONS[:-1])} or {JOB_ACTIONS[-1]}")


def _check_status(action: str, status: str | None) -> None:
    """JobError for a status named by filter that ``action`` cannot change (CHANGES): such a job
    was made, and skipped every item."""
    takes = CHANGES[action]
    if status not in takes:
        raise JobError(f"A {action} job by filter takes {' or '.join(takes)} entries, not {status} ones: name "
                       f"one of those statuses, or none for the {DEFAULT_STATUS.get(action, 'open')} ones.")


def select_items(rt: ActionContext, *, ids=None, filter_args: dict | None = None, only_valid: bool = False,
                 upto: int | None = None, scopes: tuple[Scope, ...] | None = None, reads=...,
                 action: str = "republish") -> tuple[Selection, dict[str, Any]]:
    """The entries a job would take (a Selection, by id), and a summary of the choice.

    By filter without a status, or with "any", only open entries are taken (closed ones to ``reopen``:
    DEFAULT_STATUS); a status named is taken as named, and one the action cannot change (CHANGES) is
    a JobError. ``upto`` (the newest id a preview
    showed) keeps entries that arrived after the preview out of the job. ``scopes`` (what a
    scoped operator may act on; None: everything): by filter only the entries they cover are
    taken; by ids one they do not cover is left out as an id that names no entry is (``missing``).
    ``reads`` (what they may read; by default ``scopes``): a filter's group or job they may read
    but not act on is a Forbidden saying so, one they may not read a FilterError as an unknown one.
    ``only_valid``: the newest JUDGED_NOW payloads are judged now, those that fail left out
    (``left_out_invalid``); the others are taken unjudged (``unjudged``), the job leaving out
    those that fail as it reaches them.
    """
    _check_action(action)  # a preview of "republsh" said it would close them
    if (ids is None) == (filter_args is None):
        raise JobError("Choose the entries either by ids or by filter.")
    if filter_args is not None and (why := nothing_named(filter_args)):
        raise JobError(why)  # every open entry, by a filter that names none (web/params.py bulk_selection)
    if only_valid and action == "reopen":
        raise JobError(REOPEN_JUDGES_NOTHING)
    summary: dict[str, Any] = {"only_valid": only_valid}
    items = Selection()
    by_status: dict[str, int] = {}
    pairs: dict[tuple[str, str], int] = {}

    def take(entry_id: int, version: int, status: str, subject: str | None, source: str) -> None:
        # Every path reads the rows newest first: reversed at the end, the arrays are by id.
        items.ids.append(entry_id)
        items.versions.append(version)
        by_status[status] = by_status.get(status, 0) + 1
        pair = (source, subject or "")
        pairs[pair] = pairs.get(pair, 0) + 1

    if ids is not None:
        wanted = _wanted(ids)
        if not wanted:
            raise JobError("No entries were selected.")
        with rt.engine.connect() as conn:
            # The payloads only where they are judged (only_valid).
            judging = (ENTRIES.c.payload, ENTRIES.c.payload_available, ENTRIES.c.headers) if only_valid else ()
            rows = conn.execute(select(ENTRIES.c.id, ENTRIES.c.version, ENTRIES.c.status, ENTRIES.c.original_subject,
                                       ENTRIES.c.source, *judging)
                                .where(ENTRIES.c.id.in_(list(wanted)),
                                       *([] if scopes is None else [scope_condition(ENTRIES.c.original_subject,
                                                                                    scopes)]))).all()
        summary.update(ids=len(wanted), missing=len(wanted) - len(rows))
        rows.sort(key=lambda r: -r.id)  # the newest judged now, as by filter
        to_judge, invalid = (min(len(rows), JUDGED_NOW) if only_valid else 0), 0
        for n, r in enumerate(rows):
            if n < to_judge and not _passes(rt, r.original_subject, r.payload, r.payload_available, r.headers):
                invalid += 1
                continue
            take(r.id, wanted[r.id] if wanted[r.id] is not None else r.version, r.status, r.original_subject, r.source)
        unjudged = len(rows) - to_judge if only_valid else 0
    else:
        args = {k: v for k, v in filter_args.items() if k not in ("limit", "cursor")}
        if str(args.get("status") or "").strip() in ("", "any"):
            # "any" is the list's word for no status: by filter it too takes what the action can
            # change, or an edited address previewed and republished the republished entries again.
            args["status"] = DEFAULT_STATUS.get(action, "open")
        flt = replace(EntryFilter.from_args(args, key_fields=key_fields(rt.settings.list_fields),
                                            sources=filter_sources(rt.engine, rt.feeds, args, scopes if reads is ... else reads)), scopes=scopes)
        _check_status(action, flt.status)
        _check_named(rt, flt, scopes if reads is ... else reads)
        if upto is not None:
            flt = replace(flt, cursor=encode_cursor(int(upto) + 1))
        # A preset ("since=1h") as the time it meant when the entries were chosen: the job keeps those.
        summary["filter"] = replace(flt, since_ago=None, until_ago=None).to_args()
        invalid = unjudged = 0
        if only_valid:
            # The newest payloads judged as they are read and not kept: the selection of a million
            # entries held every payload at once (about 500 MB of them) and judged each in the
            # request (about 150 µs a demo order: minutes).
            for e in rt.store.iter_entries(flt):
                if _passes(rt, e.original_subject, e.payload, e.payload_available, e.headers):
                    take(e.id, e.version, e.status, e.original_subject, e.source)
                else:
                    invalid += 1
                if len(items) + invalid >= JUDGED_NOW:
                    # The rest unjudged: no payloads needed, read from below the last one judged.
                    flt = replace(flt, cursor=encode_cursor(e.id))
                    break
            else:
                flt = None
        if flt is not None:  # no payloads needed: narrow rows, a batch at a time
            taken_judged = len(items)
            for r in rt.store.iter_rows(flt, ENTRIES.c.id, ENTRIES.c.version, ENTRIES.c.status,
                                        ENTRIES.c.original_subject, ENTRIES.c.source, batch=ITEMS_A_STATEMENT):
                take(*r)
            unjudged = len(items) - taken_judged if only_valid else 0
    items.ids.reverse()
    items.versions.reverse()
    summary.update(count=len(items), left_out_invalid=invalid, unjudged=unjudged,
                   upto=items.ids[-1] if items else None)
    summary["by_status"] = by_status
    subjects: dict[str, int] = {}
    for (_, subject), n in pairs.items():
        subjects[subject] = subjects.get(subject, 0) + n
    summary["subjects"] = dict(sorted(subjects.items(), key=lambda kv: -kv[1])[:10])
    # Where they go is a question to each source (SPEC section 12): the subjects by source too.
    summary["source_subjects"] = [[source, subject, n] for (source, subject), n
                                  in sorted(pairs.items(), key=lambda kv: -kv[1])[:10]]
    return items, summary


def create_job(rt: ActionContext, action: str, *, actor: str, ids=None, filter_args: dict | None = None,
               only_valid: bool = False, upto: int | None = None, note: str | None = None,
               force: bool = False, start: bool = True, patch=None, scopes: tuple[Scope, ...] | None = None,
               reads=..., request_key: str | None = None) -> int:
    """Make a job over the selected entries (fixed now, with their versions) and start it.

    ``request_key`` names the start (the preview form's key, an API client's Idempotency-Key): the
    same key sent again by the same actor is the job it made, returned, not a second job.

    A ``patch`` job takes every selected entry and judges each one when it runs: ``only_valid``
    then means "only those that pass the schema once patched", the others are skipped with the
    reason (the patch is kept in the job's selection, and so in its audit record). ``scopes``:
    what the operator may act on, ``reads`` what they may read (select_items)."""
    _check_action(action)
    _fitting(action, patch=patch, force=force)
    note = close_note(note)
    request_key = _request_key(request_key)
    asked = _fingerprint(action, ids, filter_args, only_valid, upto, note, force, patch) if request_key else None
    if request_key and (started := _started(rt.engine, actor, request_key, asked)) is not None:
        return started
    ops = parse_patch(patch) if action == "patch" else None
    items, summary = select_items(rt, ids=ids, filter_args=filter_args,
                                  only_valid=only_valid and action in ("republish", "close", "reopen"), upto=upto,
                                  scopes=scopes, reads=reads, action=action)
    if not items:
        raise NothingMatches()
    if ops is not None:
        summary.update(patch=ops, only_valid=bool(only_valid))
    if action == "repair":  # only those that pass once repaired are republished
        summary.update(repair=True, only_valid=True)
    if asked:
        summary["request"] = asked  # what the key stands for: the same key with another request is refused
    # Only those that pass, or the override: asked for both, a payload the schema fails is left out.
    summary["force"] = bool(force) and not summary.get("only_valid")
    now = utcnow()
    try:
        with write_transaction(rt.engine) as conn:
            job_id = _insert_job(conn, items, summary, action=action, actor=actor, note=note, now=now,
                                 filter_args=filter_args, request_key=request_key)
    except IntegrityError:  # the same start, made meanwhile by another request
        if request_key and (started := _started(rt.engine, actor, request_key, asked)) is not None:
            return started
        raise
    if start:
        rt.jobs.submit(job_id)
    return job_id


def _insert_job(conn, items: "Selection", summary: dict, *, action: str, actor: str, note: str | None, now,
                filter_args: dict | None, request_key: str | None) -> int:
    """Write a job, its items and its audit record; a start's key already used is an IntegrityError
    (the unique index ix_jobs_request_key)."""
    job_id = conn.execute(insert(JOBS).values(
        action=action, actor=actor, state="queued", note=note, request_key=request_key,
        selection=json.dumps(summary), total=len(items), done=0, failed=0, cancel_requested=False,
        created_at=now)).inserted_primary_key[0]
    for first in range(0, len(items), ITEMS_A_STATEMENT):  # a statement's rows at a time, not all
        insert_rows(conn, ITEMS, [{"job_id": job_id, "entry_id": entry_id, "version": version, "state": "pending"}
                                  for entry_id, version in items.rows(first, first + ITEMS_A_STATEMENT)])
    conn.execute(insert(ACTIONS).values(job_id=job_id, action=f"bulk_{action}", actor=actor, at=now,
                                        note=note,
                                        detail=json.dumps({"total": len(items), **summary})))
    record_job(conn, filter_args, job_id, action, len(items), actor, now)  # in its group's activity
    return job_id


def _fitting(action: str, *, patch, force: bool) -> None:
    """JobError for a part of the request its action would leave out without a word: a patch not
    applied, an override with nothing to republish ("only those that pass" on a reopen: select_items)."""
    if patch is not None and action != "patch":
        raise JobError(f"A patch goes with the action patch only: send action patch, or leave the patch out "
                       f"(a {action} job would not apply it).")
    if force and action not in ("republish", "patch"):
        raise JobError(f"force (republish payloads the current schema refuses) goes with republish and patch "
                       f"only: leave it out of a {action} job.")


def _request_key(key: str | None) -> str | None:
    """A start's key as given, or JobError: up to 64 printable ASCII characters."""
    key = (key or "").strip()
    if len(key) > 64 or not all("!" <= c <= "~" for c in key):
        raise JobError("The request key (Idempotency-Key) must be up to 64 printable ASCII characters, "
                       "without blanks.")
    return key or None


def _fingerprint(*request) -> str:
    """What a start asked for, in a few bytes: its action, selection, note, override and patch."""
    return hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _started(engine, actor: str, request_key: str, asked: str | None) -> int | None:
    """The job ``actor`` started with ``request_key``, if any; KeyReused when that start asked
    for something else (a key names one start, as an Idempotency-Key does)."""
    with engine.connect() as conn:
        row = conn.execute(select(JOBS.c.id, JOBS.c.selection).where(
            JOBS.c.actor == actor, JOBS.c.request_key == request_key)).first()
    if row is None:
        return None
    if json.loads(row.selection or "{}").get("request") != asked:
        raise KeyReused(f"This request key was used for another start (job {row.id}), with another action, "
                        "selection, note or patch: send a new key for a new start (a new preview has one).")
    return row.id


def check_job(engine, job_id: int, scopes: tuple[Scope, ...] | None = None) -> None:
    """JobNotFound for an unknown job, or one outside ``scopes`` (jobs_within); nothing else read."""
    with engine.connect() as conn:
        if conn.execute(select(JOBS.c.id).where(JOBS.c.id == job_id, *_within(scopes))).first() is None:
            raise JobNotFound(job_id)


def check_filter_job(engine, flt: EntryFilter) -> None:
    """FilterError, a 400, when the filter's ``job`` names no job within its scopes (an unknown
    id would list nothing, as if the job had no such items), as Store.check_group for its group."""
    if flt.job is None:
        return
    try:
        check_job(engine, flt.job.id, flt.scopes)
    except JobNotFound:
        raise FilterError(f"job {flt.job.id} is not a bulk job: use a job's id from /jobs or GET /api/jobs") from None


#: Why an operator may read a failure group or a job and not act on its entries in bulk (a 403).
GROUP_NOT_YOURS = ("Group {group} is outside the scopes you may act on (your operator grants): you may read it, "
                   "but not republish, edit, close or reopen its entries.")
JOB_NOT_YOURS = ("Job {job} took entries outside the scopes you may act on (your operator grants): you may read "
                 "it, but not republish, edit, close or reopen its entries.")


def _check_named(rt: ActionContext, flt: EntryFilter, reads: tuple[Scope, ...] | None) -> None:
    """The filter's ``group`` and ``job`` checked within ``flt.scopes`` (what the operator may act
    on): FilterError, a 400, for one outside ``reads`` too (as unknown as none: its existence is
    not told); Forbidden, a 403 saying so, for one they may read."""
    try:
        rt.store.check_group(flt)
    except FilterError:
        if reads == flt.scopes:
            raise
        rt.store.check_group(replace(flt, scopes=reads))  # unknown to them as well: the FilterError again
        raise Forbidden(GROUP_NOT_YOURS.format(group=flt.group)) from None
    try:
        check_filter_job(rt.engine, flt)
    except FilterError:
        if reads == flt.scopes:
            raise
        check_filter_job(rt.engine, replace(flt, scopes=reads))
        raise Forbidden(JOB_NOT_YOURS.format(job=flt.job.id)) from None


def cancel_job(rt: ActionContext, job_id: int, *, actor: str, scopes: tuple[Scope, ...] | None = None,
               note: str | None = None, detail: dict | None = None, unless_asked: bool = False) -> bool:
    """Ask a job to stop after its current window; False if it had already finished (or, with
    ``unless_asked``, had been asked to stop already: then nothing is written).
    ``scopes``: a job outside them (jobs_within) is as unknown as none. ``note`` says why (a cancel
    in the dashboard's own name does: the job's "Cancelled by" and its audit record carry it);
    ``detail`` goes to the audit record."""
    with write_transaction(rt.engine) as conn:
        # Locked (PostgreSQL; SQLite's transaction holds the write lock): two cancels at once, a
        # person's and the job watch's, are one after the other.
        job = conn.execute(select(JOBS.c.state, JOBS.c.cancel_requested).where(
            JOBS.c.id == job_id, *_within(scopes)).with_for_update()).first()
        if job is None:
            raise JobNotFound(job_id)
        if job.state in FINISHED or (unless_asked and job.cancel_requested):
            return False
        now = utcnow()
        # The first to cancel is the one named: a second click changes nothing.
        conn.execute(update(JOBS).where(JOBS.c.id == job_id, JOBS.c.cancelled_by.is_(None))
                     .values(cancelled_by=(f"{actor} ({note})" if note else actor)[:255], cancelled_at=now))
        conn.execute(update(JOBS).where(JOBS.c.id == job_id).values(cancel_requested=True))
        conn.execute(insert(ACTIONS).values(job_id=job_id, action="cancel_job", actor=actor, at=now,
                                            note=note, detail=json.dumps(detail or {})))
    rt.jobs.wake(job_id)
    return True


def _within(scopes: tuple[Scope, ...] | None) -> list:
    return [] if scopes is None else [jobs_within(scopes)]


def _source_facts(rt: ActionContext, conn, job) -> dict[str, Any]:
    """A job's facts about its sources' NATS: ``waits_for``, the sources whose NATS is unreachable
    while the job has items of them to go and needs it (a republish, a close that deletes the DLQ
    message); with several sources the others go on, and ``rate_per_source`` is
    DLQ_REPUBLISH_RATE, which applies to each source (None: no limit)."""
    needs_nats = job.action in REPUBLISHING or (job.action == "close" and rt.settings.delete_on_close)
    if not needs_nats:
        return {}
    down = [] if job.state in FINISHED else [name for name in source_names(rt) if not connected(rt, name)]
    facts: dict[str, Any] = {"waits_for": pending_sources(conn, job.id, down)}
    if several_sources(rt) and job.action in REPUBLISHING:
        facts["rate_per_source"] = rt.settings.republish_rate or None
    return facts


def job_status(rt: ActionContext, job_id: int, *, item_state: str | None = None, limit: int = 200,
               scopes: tuple[Scope, ...] | None = None) -> dict[str, Any]:
    """A job's progress and the results of (some of) its items; JobNotFound for an unknown id,
    or one outside ``scopes`` (a scoped reader's: jobs_within). ``failure_reasons`` holds its
    failed and skipped items' results by exact text (listing.failure_reason_texts), which
    access/visible.py job masks and merges for the reader."""
    with rt.engine.connect() as conn:
        job = conn.execute(select(JOBS).where(JOBS.c.id == job_id, *_within(scopes))).first()
        if job is None:
            raise JobNotFound(job_id)
        counts = dict(conn.execute(select(ITEMS.c.state, func.count()).where(ITEMS.c.job_id == job_id)
                                   .group_by(ITEMS.c.state)).all())
        # An item this job published keeps no sentence of its own: its intent has the PubAck.
        published = ITEMS.outerjoin(INTENTS, and_(INTENTS.c.job_id == ITEMS.c.job_id,
                                                  INTENTS.c.entry_id == ITEMS.c.entry_id,
                                                  INTENTS.c.state == "published", ITEMS.c.result.is_(None)))
        query = (select(ITEMS.c.entry_id, ITEMS.c.version, ITEMS.c.state, ITEMS.c.result, INTENTS.c.msg_id,
                        INTENTS.c.stream, INTENTS.c.seq, INTENTS.c.duplicate)
                 .select_from(published).where(ITEMS.c.job_id == job_id))
        if item_state:
            query = query.where(ITEMS.c.state == item_state)
        items = conn.execute(query.order_by(ITEMS.c.entry_id).limit(limit)).all()
        labels = group_labels(conn, [json.loads(job.selection or "{}")])
        sources = _source_facts(rt, conn, job)
        reasons = failure_reason_texts(conn, job_id) if counts.get("failed") or counts.get("skipped") else []
    return {
        **job_summary(job._mapping, counts, labels), **sources, "failure_reasons": reasons,
        "items": [{"entry_id": r.entry_id, "version": r.version, "state": r.state,
                   "result": r.result or (ack_sentence(Published(r.msg_id, r.stream, r.seq, r.duplicate))
                                          if r.msg_id else None)} for r in items],
    }
