"""Everything a reader reads of entries, as that reader may see it (DLQ_MASK, docs/security.md).

Each function takes the reader (reader.py) and what was read as stored, and returns what the
reader may see: a copy, never its argument changed. An operator or an admin (``reader.mask`` is
None) gets what was stored. The channels (web/pages.py, api.py, export.py, bulk.py, audit.py and
the command line) read through these and nothing else, so the rule is written once:

- an entry: its masked fields, and the values they held wherever its own texts quote them;
- a republish it sent, and an entry its republish became (a replay): masked as the entry;
- a failure group: its text with what the mask hides in its newest entry;
- a text whose entries are gone or too many to look at: hidden with a sentence (unread.py);
- a job: its selection (a key-field filter's value, and the words of a search, which name what
  it looked for), a patch's values for a masked field, and each item's result, masked with the
  values hidden in that item's entry and in the patch;
- an audit record: as a job's selection, and its texts masked with its entry's values (a
  group's record: with the values hidden in the group's newest entries);
- a group's triage: its notes and its activity's texts masked with the values the mask hides in
  the group's newest entries (entries/triage.py NOTE_MASK_SCAN of them).

A scoped reader (``reader.reads``, docs/scopes.md) reaches only the entries whose original subject
(in their source: ``billing:orders.>``) a scope of theirs covers: the filters of every list, count,
group, search and export carry the scopes (entries/scoping.py turns them into SQL), one entry
outside them is as unknown as an id that does not exist (EntryNotFound, the same 404), and acting
needs ``reader.acts``. A job is
shown when every entry it took is one the reader may read; an audit record when its entry is, or
its job; a shared saved view when what it selects lies inside the reader's scopes.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any, Iterable, Iterator, Mapping

from sqlalchemy import select

from ..actions.bulk.jobs import check_job as jobs_check, job_status
from ..actions.bulk.listing import describe_selection, failure_reasons, list_jobs
from ..actions.triage import GroupNotFound
from ..alerts.listing import origins_only
from ..db.models import Entry, Job
from ..entries import triage
from ..entries.audit import audit_page
from ..entries.fields import KeyField, hidden_by
from ..entries.filters import EntryFilter, FilterError
from ..entries.groups import Group, group_label
from ..entries.scoping import jobs_within
from ..entries.sources import SourceCounts, source_counts
from ..entries.store import Store
from ..entries.tallies import Tallies
from ..entries.view import EntryView, Page
from ..errors import EntryNotFound, Forbidden
from ..masking import MASKED, Mask
from ..scopes import Scope, pattern_within
from . import unread
from .reader import Reader

JOBS = Job.__table__

#: What a viewer reads for a job's search (``q``) while DLQ_MASK is set: the words searched for
#: are a masked value as often as not ("alice@example.com"), and beside the ids they matched.
SEARCH_HIDDEN = MASKED


# --- entries -------------------------------------------------------------------------------------

def covers(scopes: tuple[Scope, ...] | None, subject: str | None, source: str | None) -> bool:
    """Whether ``scopes`` (None: everything) cover ``subject`` of ``source`` (an entry's original
    subject and source, a group's subject and source): Scope.covers, as entries/scoping.py
    writes it in SQL."""
    return scopes is None or any(s.covers(subject, source) for s in scopes)


def covered(scopes: tuple[Scope, ...] | None, stored: EntryView) -> bool:
    """Whether ``scopes`` cover the entry (its original subject in its source)."""
    return covers(scopes, stored.original_subject, stored.source)


def lookup(reader: Reader, store: Store, entry_id: int, *, with_history: bool = True) -> EntryView:
    """The entry with this id as stored (with its history and actions), if the reader may read
    it; EntryNotFound, a 404, otherwise: one outside the reader's scopes is as unknown as none."""
    found = store.get_entry(entry_id, with_history=with_history)
    if found is None or not covered(reader.reads, found):
        raise EntryNotFound(entry_id)
    return found


#: Why an operator may read an entry and not act on it (a 403).
NOT_YOURS = ("Entry {id} is outside the scopes you may act on (your operator grants): you may read it, "
             "but not republish, edit, close or reopen it.")


def acting_on(reader: Reader, store: Store, entry_id: int, *, with_history: bool = True) -> EntryView:
    """The entry an action of the reader's is about to change, as stored: EntryNotFound (404)
    when the reader may not read it, Forbidden (403, NOT_YOURS) when they may read it but their
    operator grants do not cover it."""
    found = lookup(reader, store, entry_id, with_history=with_history)
    if not covered(reader.acts, found):
        raise Forbidden(NOT_YOURS.format(id=entry_id))
    return found


def may_act_on(reader: Reader, subject: str | None, source: str | None) -> bool:
    """Whether the reader's operator grants cover an entry of this original subject and source, or
    a group of them (no query: the list asks it of each row); pages offer their actions only then."""
    return reader.may("operator") and covers(reader.acts, subject, source)


def scoped(reader: Reader, flt: EntryFilter, *, acting: bool = False) -> EntryFilter:
    """``flt`` limited to what the reader may read (``acting``: act on)."""
    scopes = reader.acts if acting else reader.reads
    return (flt if scopes is None else replace(flt, scopes=scopes)).seen_through(reader.mask)


def has_msg_id(reader: Reader, store: Store, msg_id: str) -> bool:
    """Whether the reader may read a dead letter of this original msgId (a search points to it)."""
    flt = scoped(reader, EntryFilter(msg_id=msg_id, limit=1))
    return next(store.iter_rows(flt, Entry.id, batch=1), None) is not None


def entry(reader: Reader, stored: EntryView, *, also: Iterable[str] = ()) -> EntryView:
    """The entry as the reader sees it (``also``: more values to hide in its texts)."""
    return reader.mask.entry(stored, also) if reader.mask else stored


def republishes(reader: Reader, stored: list[dict]) -> list[dict]:
    """An entry's republishes (store.republishes_of) as the reader sees them: for a viewer the payload
    each sent masked like the entry's (None, with ``payload_hidden``, when the mask cannot pick fields
    out of it), the headers it sent, its error with the values hidden; ``hidden_values`` names them."""
    mask = reader.mask
    if not mask:
        return stored
    seen = []
    for rep in stored:
        payload, hidden = mask.mask_payload(rep.get("payload") or b"")
        headers, header_values = mask.mask_headers(rep.get("headers") or {})
        hidden = hidden + header_values
        seen.append({**rep, "payload": payload, "payload_hidden": payload is None, "hidden_values": tuple(hidden),
                     "headers": headers, "error": mask.mask_text(rep.get("error"), hidden)})
    return seen


def replays(reader: Reader, stored: list[EntryView], of: EntryView | None = None) -> list[EntryView]:
    """Entries whose message was a republish of ``of`` (store.replays_of; ``of`` as the reader
    sees it), as the reader sees them: only those the reader may read (a republish whose replay
    went to another team's subject names no entry of theirs), each masked as an entry, and what
    ``of`` hides hidden in their texts too (a republish that failed again quotes what it sent)."""
    also = of.hidden_values if of is not None else ()
    return [entry(reader, replay, also=also) for replay in stored if covered(reader.reads, replay)]


def jobs_shown(reader: Reader, store: Store, stored: EntryView,
               republishes: list[dict]) -> tuple[EntryView, list[dict]]:
    """An entry's actions and republishes (stored, before masking) with the job each came from
    only where the reader may see that job: a job that also took entries outside the reader's
    scopes is no job of theirs (its page is a 404, its audit record left out), so the entry's
    page names no such job; the action itself is the entry's, and stays."""
    ids = {a.get("job_id") for a in itertools.chain(stored.actions or [], republishes)} - {None}
    if reader.reads is None or not ids:
        return stored, republishes
    with store.engine.connect() as conn:
        hidden = ids - set(conn.execute(select(JOBS.c.id).where(JOBS.c.id.in_(sorted(ids)),
                                                                   jobs_within(reader.reads))).scalars())
    if not hidden:
        return stored, republishes

    def without(record: dict) -> dict:
        return {**record, "job_id": None} if record.get("job_id") in hidden else record

    actions = None if stored.actions is None else [without(a) for a in stored.actions]
    return replace(stored, actions=actions), [without(r) for r in republishes]


def failed_again(reader: Reader, store: Store, entries: list[EntryView]) -> dict[int, int]:
    """{entry id: the newest entry the reader may read whose message was a republish of it}, for
    those of ``entries`` whose republish failed again (whatever their status now; within each
    one's source; entries/replays.py), for the page at once: the list's "failed again" marker."""
    return store.failed_again([(e.id, e.dlq_ref) for e in entries], reader.reads)


def check_filter(reader: Reader, flt: EntryFilter) -> EntryFilter:
    """``flt`` if the reader may filter by it: not by a key field DLQ_MASK hides (which entries
    match would tell its value); FilterError, a 400, otherwise."""
    for field, _ in flt.field_values:
        if hidden_by(reader.mask, field):
            raise FilterError(f"{field.param} cannot be filtered by: DLQ_MASK hides this field from viewers")
    return scoped(reader, flt)


#: How much of each payload the list reads for its snippet (whitespace runs count as one).
ROW_PAYLOAD_BYTES = 512


def page(reader: Reader, store: Store, flt: EntryFilter, fields: tuple[KeyField, ...] = (), *,
         rows: bool = False) -> Page:
    """The page of entries ``flt`` selects as the reader sees them; a viewer's search keeps only
    what it finds in the masked text. ``rows``: for the list's rows, which show a snippet of each
    payload: the payloads are read only that far (whole when a mask must be applied first). With
    key fields (DLQ_LIST_FIELDS) each entry has their values, "•••" where the mask hides one."""
    mask, flt = reader.mask, scoped(reader, flt)
    found = store.list_entries(flt, mask=mask, payload_prefix=None if mask and mask.pointers or not rows
                               else ROW_PAYLOAD_BYTES)
    shown = _with_key_fields(reader, store, [entry(reader, e) for e in found.entries], fields)
    return Page(shown, found.next_cursor, found.search)


def entries(reader: Reader, store: Store, flt: EntryFilter, fields: tuple[KeyField, ...] = (), *,
            max_rows: int | None = None, batch: int = 500) -> Iterator[EntryView]:
    """Every entry ``flt`` selects (at most ``max_rows``), as the reader sees them, read in
    batches (the exports): with their key fields, looked up ``batch`` entries at a time."""
    found: Iterator[EntryView] = store.iter_entries(scoped(reader, flt), mask=reader.mask)
    if max_rows is not None:
        found = itertools.islice(found, max_rows)
    while chunk := list(itertools.islice(found, batch)):
        yield from _with_key_fields(reader, store, [entry(reader, stored) for stored in chunk], fields)


def _with_key_fields(reader: Reader, store: Store, seen: list[EntryView],
                     fields: tuple[KeyField, ...]) -> list[EntryView]:
    """``seen`` (entries as the reader sees them) with their key fields' values, "•••" where the
    reader's mask hides the field or the whole payload (a key given twice: which value is read?)."""
    if not fields:
        return seen
    values = store.field_values([e.id for e in seen], fields)
    return [replace(e, key_fields={f.label: (MASKED if got.get(f.label) is not None
                                             and (e.payload_hidden or hidden_by(reader.mask, f))
                                             else got.get(f.label)) for f in fields})
            for e in seen for got in (values.get(e.id, {}),)]


def tallies(reader: Reader, store: Store) -> Tallies:
    """The counts, the chart and the groups, counted as the reader's search finds entries."""
    return Tallies(store, reader.mask, reader.reads)


def count_newer(reader: Reader, store: Store, flt: EntryFilter, after_id: int, cap: int) -> int:
    """How many entries under ``flt`` arrived after ``after_id``, as the reader finds them."""
    return store.count_newer(scoped(reader, flt), after_id, cap=cap, mask=reader.mask)


def neighbours(reader: Reader, store: Store, flt: EntryFilter, entry_id: int) -> tuple[int | None, int | None]:
    """The entries before and after ``entry_id`` in the list ``flt`` makes, as the reader finds it."""
    return store.neighbours(scoped(reader, flt), entry_id, reader.mask)


# --- groups --------------------------------------------------------------------------------------

def groups(reader: Reader, store: Store, found: list[Group] | None) -> list[Group] | None:
    """Failure groups as the reader sees them: a group's text is its entries' common error, so
    for a viewer what the mask hides in the group's newest entry is hidden in it too."""
    if not reader.mask or not found:
        return found
    newest = store.newest_of_groups([g.id for g in found])
    # A group with no entry left (purged): nothing tells what its text quotes.
    return [replace(g, key=reader.mask.group_key(g.key, newest[g.id]) if g.id in newest else unread.GROUP_GONE)
            for g in found]


def group_of(reader: Reader, store: Store, seen: EntryView) -> dict | None:
    """The failure group of an entry as {"id", "label"}; ``seen``, the entry as the reader sees
    it: a value the mask hides in it is hidden in the label too."""
    found = store.group_of(seen.id)
    if found is None:
        return None
    group_id, key = found
    return {"id": group_id, "label": group_label(Mask.mask_text(key, seen.hidden_values) if reader.mask else key)}


#: Why an operator may read a group and not change its state or add a note (a 403).
GROUP_NOT_YOURS = ("Group {id} is outside the scopes you may act on (your operator grants): you may read it, "
                   "but not change its state, add a note, or republish or close its entries.")


def group(reader: Reader, store: Store, group_id: int) -> Group:
    """One failure group with its state as the reader sees it (its key as ``groups`` shows it);
    GroupNotFound, a 404, when there is none or its subject (in its source) is outside the
    reader's scopes (a group belongs to one subject and one source, so it is inside or outside as
    a whole)."""
    found = triage.find_group(store.engine, group_id)
    if found is None or not covers(reader.reads, found.subject, found.source):
        raise GroupNotFound(group_id)
    return groups(reader, store, [found])[0]


def group_to_change(reader: Reader, store: Store, group_id: int) -> Group:
    """The group a state change or a note of the reader's is about: GroupNotFound (404) when the
    reader may not read it, Forbidden (403, GROUP_NOT_YOURS) when their operator grants do not
    cover its subject."""
    found = group(reader, store, group_id)
    if not covers(reader.acts, found.subject, found.source):
        raise Forbidden(GROUP_NOT_YOURS.format(id=group_id))
    return found


def group_values(reader: Reader, store: Store, group_id: int) -> tuple[str, ...]:
    """What the reader's mask hides in the group's newest entries (what a note may quote)."""
    if not reader.mask:
        return ()
    stored = store.entries_by_id(triage.newest_entry_ids(store.engine, group_id))
    return tuple(v for e in stored.values() for v in reader.mask.values_of(e))


def group_activity(reader: Reader, store: Store, group_id: int, limit: int = 200) -> list[dict]:
    """A group's activity log (entries/triage.py activity) as the reader sees it: for a viewer each
    note and detail with the values the mask hides in the group's newest entries hidden."""
    group(reader, store, group_id)  # GroupNotFound outside the reader's scopes
    found = triage.activity(store.engine, group_id, limit)
    if not reader.mask or not found:
        return found
    why = unread.groups_unread(store, [group_id]).get(group_id)
    if why:
        return [unread.hidden(a, why) for a in found]
    values = group_values(reader, store, group_id)
    return [{**a, **reader.mask.texts({"text": a["text"], "detail": a["detail"]}, values)} for a in found]


def group_involved(reader: Reader, store: Store, group_id: int) -> dict:
    """The consumers and streams among a group's newest entries (columns no mask hides)."""
    group(reader, store, group_id)  # GroupNotFound outside the reader's scopes
    return triage.involved(store.engine, group_id)


def entry_group_states(reader: Reader, store: Store, shown: list[EntryView]) -> dict[int, str]:
    """{entry id: its group's state} for entries the reader was shown."""
    return triage.states_of_entries(store.engine, [e.id for e in shown])


def sources(reader: Reader, store: Store, names: list[str]) -> dict[str, SourceCounts]:
    """Each source's counts (entries/sources.py) as the reader sees them: a scoped reader's count
    only the groups their scopes cover, and a source no scope of theirs reaches is left out; the
    biggest groups' texts as ``groups`` shows them."""
    found = source_counts(store.engine, names, reader.reads)
    for counts in found.values():
        counts.groups = groups(reader, store, counts.groups) or []
    return found


# --- jobs and the audit --------------------------------------------------------------------------

def selection(reader: Reader, chosen: Mapping[str, Any], fields: tuple[KeyField, ...] = ()) -> dict:
    """A job's selection (or its audit record's detail) as the reader sees it: for a viewer a
    patch's value for a field the mask hides, a key-field filter's value for such a field, and a
    search's words (``q``) read "•••" (a viewer may not filter by such a field either:
    check_filter)."""
    mask = reader.mask
    if not mask:
        return dict(chosen)
    shown = mask.mask_record({"detail": dict(chosen)})["detail"]
    flt = shown.get("filter")
    if isinstance(flt, dict):
        hidden = {f.param for f in fields if hidden_by(mask, f)} | {"q"}
        shown["filter"] = {k: (SEARCH_HIDDEN if k == "q" else MASKED) if k in hidden and v else v
                           for k, v in flt.items()}
    return shown


def jobs(reader: Reader, store: Store, found: list[dict], fields: tuple[KeyField, ...] = ()) -> list[dict]:
    """Jobs (actions/bulk/listing.py job_summary) as the reader sees them: for a viewer the
    selection as ``selection`` shows it, and in words without a group's label (a group's label is
    its entries' error, which may quote a masked value: the group's id instead); its note with
    the values the mask hides in its patch and in its entries (unread.job_values: hidden with why where they cannot all be read)."""
    if not reader.mask:
        return found
    shown = []
    quoted, why = unread.job_values(reader.mask, store, [job["id"] for job in found if job.get("note")])
    for job in found:
        chosen = selection(reader, job["selection"], fields)
        note = why.get(job["id"]) or reader.mask.mask_text(
            job.get("note"), reader.mask.patch_values(job.get("patch")) + quoted.get(job["id"], ()))
        shown.append({**job, "selection": chosen, "patch": chosen.get("patch"),
                      "selection_text": describe_selection(chosen), "note": note})
    return shown


def job(reader: Reader, store: Store, status: dict, fields: tuple[KeyField, ...] = ()) -> dict:
    """A job and its items (actions/bulk/jobs.py job_status) as the reader sees them: the job as
    ``jobs`` shows it, and each item's result (a schema's or a patch's error, a refusal, which
    quote the payload) with the values the mask hides in that item's entry and in the patch; its
    failure reasons likewise, each text masked with the values of an entry it came from, then
    merged (listing.failure_reasons)."""
    texts = status.get("failure_reasons") or []
    if not reader.mask:
        return {**status, "failure_reasons": failure_reasons(texts)}
    shown = jobs(reader, store, [status], fields)[0]
    items = status.get("items")
    patched = reader.mask.patch_values(status.get("patch"))
    stored = store.entries_by_id(itertools.chain((i["entry_id"] for i in items or () if i.get("result")),
                                                 (t["entry_id"] for t in texts)))

    def masked(text: str | None, entry_id: int) -> str | None:
        if entry_id not in stored:  # purged: nothing tells what the text quotes
            return unread.GONE if text else text
        return reader.mask.mask_text(text, reader.mask.values_of(stored[entry_id]) + patched)

    if items:
        shown["items"] = [{**item, "result": masked(item.get("result"), item["entry_id"])} for item in items]
    shown["failure_reasons"] = failure_reasons([{**t, "reason": masked(t["reason"], t["entry_id"])} for t in texts])
    return shown


def audit(reader: Reader, store: Store, found: dict, fields: tuple[KeyField, ...] = ()) -> dict:
    """A page of the audit (entries/audit.py audit_page) as the reader sees it: a job's
    selection (its own record's detail) and a patch's values as ``selection`` shows them, and
    each record's texts (note, error, detail) with the values the mask hides in its entry and
    in its patch."""
    mask = reader.mask
    if not mask:
        return found
    stored = store.entries_by_id(r["entry_id"] for r in found["actions"] if r.get("entry_id"))
    named = {g for g in map(_group_of_record, found["actions"]) if g}
    unread_groups = unread.groups_unread(store, named)
    of_groups = {g: group_values(reader, store, g) for g in named - set(unread_groups)}
    # A job's own record (no entry): its note, with what the mask hides in the job's entries.
    of_jobs, unread_jobs = unread.job_values(mask, store, [r["job_id"] for r in found["actions"] if r.get("job_id")
                                                           and not r.get("entry_id") and r.get("note")])
    records = []
    for record in found["actions"]:
        detail, entry_id = record.get("detail"), record.get("entry_id")
        why = (unread.GONE if entry_id and entry_id not in stored
               else unread_groups.get(_group_of_record(record)) or (None if entry_id else unread_jobs.get(record.get("job_id"))))
        values = mask.patch_values(detail.get("patch")) if isinstance(detail, dict) else ()
        values += mask.values_of(stored[entry_id]) if entry_id in stored else ()
        values += of_groups.get(_group_of_record(record), ()) + of_jobs.get(record.get("job_id"), ())
        shown = mask.texts({k: v for k, v in record.items() if k in ("note", "error", "detail")}, values)
        if why:
            shown = unread.hidden({k: v for k, v in {**record, **shown}.items() if k in ("note", "error", "detail")}, why)
        if isinstance(shown.get("detail"), dict):
            shown["detail"] = selection(reader, shown["detail"], fields)
        records.append({**record, **shown})
    return {**found, "actions": records}


def _group_of_record(record: dict) -> int | None:
    """The group an audit record of a group's triage names (actions/triage.py), if it is one."""
    detail = record.get("detail")
    if str(record.get("action", "")).startswith("group_") and isinstance(detail, dict):
        group_id = detail.get("group")
        return group_id if isinstance(group_id, int) else None
    return None


# --- reads of jobs, the audit and saved views, within the reader's scopes ------------------------

def read_jobs(reader: Reader, store: Store, fields: tuple[KeyField, ...] = (), **options) -> dict:
    """One page of jobs (listing.list_jobs) as the reader sees it: a scoped reader's holds the
    jobs whose every entry they may read, each as ``jobs`` shows it."""
    found = list_jobs(store.engine, scopes=reader.reads, **options)
    return {**found, "jobs": jobs(reader, store, found["jobs"], fields)}


def read_job(reader: Reader, rt, job_id: int, fields: tuple[KeyField, ...] = (), **options) -> dict:
    """A job and its items (jobs.job_status) as the reader sees it; JobNotFound, a 404, for one
    that is not theirs to read (an entry it took is outside their scopes) as for an unknown id."""
    return job(reader, rt.store, job_status(rt, job_id, scopes=reader.reads, **options), fields)


def check_job(reader: Reader, engine, job_id: int) -> None:
    """JobNotFound, a 404, for a job read_job would refuse the reader (unknown, or not theirs)."""
    jobs_check(engine, job_id, scopes=reader.reads)


def read_audit(reader: Reader, store: Store, args: Mapping[str, str], *, fold: bool = False,
               fields: tuple[KeyField, ...] = ()) -> dict:
    """A page of the audit as the reader sees it: a scoped reader's holds the records of the entries
    they may read and of the jobs they may see (records_within); below operator, targets' origins."""
    found = audit(reader, store, audit_page(store.engine, args, fold=fold, scopes=reader.reads), fields)
    return found if reader.may("operator") else {**found, "actions": origins_only(found["actions"])}


def view_within(reader: Reader, store: Store, view) -> bool:
    """Whether a saved view selects only entries the reader may read, told by its filters alone:
    a subject pattern inside one of their scopes (a scope of one source: with the view's
    ``source`` that source), or a failure group they cover."""
    scopes = reader.reads
    if scopes is None:
        return True
    args = view.args
    subject, source = args.get("subject"), args.get("source")
    if subject and any(s.source in (None, source) and pattern_within(subject, s.pattern) for s in scopes):
        return True
    group = args.get("group")
    if group and group.isascii() and group.isdigit():
        found = store.group_subjects([int(group)]).get(int(group))
        return found is not None and covers(scopes, *found)
    return False


def views(reader: Reader, store: Store, found: list, owner: str | None, fields: tuple[KeyField, ...] = ()) -> list:
    """Saved views as the reader sees them: their own, and the shared ones that select only what
    they may read (view_within); a shared view of other scopes is not shown, nor, to a reader
    with a mask, one whose filters name what it hides (a search's words, a hidden key field's
    value: its link and its filters would show them, as a job's selection would)."""
    return [v for v in found if v.owner == owner or view_within(reader, store, v) and not _names_hidden(reader, v, fields)]


def _names_hidden(reader: Reader, view, fields: tuple[KeyField, ...]) -> bool:
    if not reader.mask:
        return False
    hidden = {"q"} | {f.param for f in fields if hidden_by(reader.mask, f)}
    return any(view.args.get(name) for name in hidden)
