"""The detail page's timeline: naks and advisories, the dead-lettering, each republish and
whether it failed again, and the operators' closes and reopens, in time order.

A republish whose payload was edited (by hand in the editor or by a bulk job's patch: the
Republish row says ``edited`` either way) shows the line diff from the original and the payload
it sent, both as the request may see them (web/data.py masks them for a viewer). A republish
whose headers carried a valid ``traceparent`` shows that trace (the headers sent are recorded
with its intent: the entry's own minus Dlq-* and Nats-*)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable

from ...controls import shown
from ...entries.traces import trace_id_of, trace_url
from ...entries.view import EntryView
from ...times import parse_time
from .payloads import TEXT_LIMIT, display_form, line_diff

#: What a republish's audit marks as repaired by the schema (a repair job's) stands for in place of a patch.
REPAIRED = "repaired"


@dataclass
class Moment:
    """One line of the timeline. Every text field is shown as text, never as markup."""

    at: datetime | None
    kind: str
    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    actor: str | None = None
    note: str | None = None
    entry_id: int | None = None  # a linked entry (the failure of a republished message)
    diff: list[str] = field(default_factory=list)  # an edited republish: original -> sent, pretty forms
    sent: str | None = None  # an edited republish: the payload it sent (pretty), None when not shown
    sent_note: str | None = None  # why the sent payload is not shown, or shown only in part
    trace_id: str | None = None  # a republish: the trace of the message it sent (its traceparent)
    trace_url: str | None = None  # ... and where it opens (DLQ_TRACE_URL)


def _time(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) or value is None else parse_time(str(value))


def _facts(*pairs: tuple[str, Any]) -> list[tuple[str, str]]:
    return [(label, str(value)) for label, value in pairs if value not in (None, "")]


def _history_moment(event: dict) -> Moment:
    kind = event.get("kind") or "event"
    deliveries = event.get("deliveries")
    reason = (event.get("detail") or {}).get("reason")
    if kind == "nak":
        title = f"Delivery {deliveries} was nak'ed" if deliveries else "A delivery was nak'ed"
    elif kind == "max_deliveries":
        title = f"Gave up after {deliveries} deliveries" if deliveries else "Reached the maximum deliveries"
    elif kind == "terminated":
        title = "Terminated by the consumer"
    else:
        title = kind
    return Moment(_time(event.get("at")), kind, title,
                  _facts(("consumer", event.get("consumer")), ("reason", reason)))


def _republish_moment(rep: dict, entry: EntryView, patch: Any = None) -> Moment:
    state = rep.get("state")
    edited = bool(rep.get("edited"))
    subject = entry.original_subject
    if state == "published":
        title = ("Repaired by the schema and republished" if patch == REPAIRED else
                 "Republished with a JSON Patch" if patch else "Edited and republished" if edited else "Republished")
        title = f"{title} to {shown(subject)}" if subject else title
    elif state == "failed":
        title = "Edited republish failed" if edited else "Republish failed"
    else:
        title = f"{'Edited republish' if edited else 'Republish'} {state or 'pending'}"
    duplicate = rep.get("duplicate")
    moment = Moment(_time(rep.get("published_at") or rep.get("created_at")), "republish", title,
                    _facts(("msgId", rep.get("msg_id")), ("stream", rep.get("stream")), ("seq", rep.get("seq")),
                           ("duplicate", None if duplicate is None else ("yes" if duplicate else "no")),
                           ("job", rep.get("job_id")), ("error", rep.get("error")),
                           # A bulk patch's republish: the patch its job applied (from the audit record).
                           ("patch", json.dumps(patch, ensure_ascii=False) if patch and patch != REPAIRED else None)),
                    actor=rep.get("actor"))
    # The headers it sent, as the request may see them (a viewer's mask hides a masked traceparent).
    moment.trace_id = trace_id_of(rep.get("headers"))
    moment.trace_url = trace_url(entry.trace_template, moment.trace_id)
    if edited:
        _show_edit(moment, rep, entry)
    return moment


def _show_edit(moment: Moment, rep: dict, entry: EntryView) -> None:
    """The diff from the original and the payload sent, when this request may see them."""
    sent = rep.get("payload")
    if sent is None or rep.get("payload_hidden"):
        moment.sent_note = "The payload sent is hidden from viewers (DLQ_MASK)."
        return
    if entry.payload_available:
        moment.diff = line_diff(entry.payload, sent, ("original", "sent"))
    text = display_form(sent)
    if len(text) > TEXT_LIMIT:
        text, moment.sent_note = text[:TEXT_LIMIT], "Only the start of the payload sent is shown."
    moment.sent = text


_ACTION_TITLES = {"close": "Closed", "reopen": "Reopened", "edit": "Payload edited", "republish": "Republished"}


def _action_moment(action: dict) -> Moment:
    name = action.get("action") or "action"
    title = _ACTION_TITLES.get(name, name.replace("_", " ").capitalize())
    return Moment(_time(action.get("at")), name, title,
                  _facts(("job", action.get("job_id")), ("msgId", action.get("msg_id")),
                         ("error", action.get("error"))),
                  actor=action.get("actor"), note=action.get("note"))


def build_timeline(entry: EntryView, republishes: Iterable[dict] = (),
                   replays: Iterable[EntryView] = ()) -> list[Moment]:
    """Every moment of an entry's life, oldest first (moments without a time last)."""
    moments = [_history_moment(e) for e in entry.history or []]
    moments.append(Moment(entry.failed_at, "failed", f"Failed: {entry.reason}" if entry.reason else "Failed",
                          _facts(("error", entry.error), ("deliveries", entry.deliveries),
                                 ("consumer", entry.consumer))))
    if entry.dlq_received_at is not None:
        # Its advisory came first, its DLQ copy later: each report at the time it arrived (the
        # copy told at the advisory's time named a DLQ message that did not exist yet).
        moments.append(Moment(entry.received_at, "mirrored", "Reported by JetStream's advisory and mirrored",
                              _facts(("stored as", "the advisory stream"))))
        moments.append(Moment(entry.dlq_received_at, "mirrored", "Dead-lettered and mirrored",
                              _facts(("stored as", entry.dlq_ref), ("sources", "dlq and advisory"))))
    else:
        where = entry.dlq_ref or ("the advisory stream" if "advisory" in entry.sources else None)
        moments.append(Moment(entry.received_at, "mirrored", "Dead-lettered and mirrored",
                              _facts(("stored as", where), ("sources", entry.sources.replace(",", " and ")))))
    republishes = list(republishes)
    patches = {a.get("msg_id"): a["detail"].get("patch") or REPAIRED for a in entry.actions or []
               if isinstance(a.get("detail"), dict) and (a["detail"].get("patch") or a["detail"].get("repaired"))}
    shown = [_republish_moment(r, entry, patches.get(r.get("msg_id"))) for r in republishes]
    moments.extend(shown)
    # A failure of a republished message comes after that republish, whatever the clocks say:
    # Dlq-Failed-At is the consumer's clock, often to the second or the millisecond, and was
    # listed above a republish of the same second.
    after: dict[int, datetime] = {}
    for replay in replays:
        moment = Moment(replay.failed_at or replay.received_at, "failed-again",
                        "The republished message failed again",
                        _facts(("reason", replay.reason), ("error", replay.error)),
                        entry_id=replay.id)
        followed = _republish_followed(replay, moment.at, republishes, shown)
        if followed is not None and followed.at is not None:
            after[id(moment)] = followed.at
        moments.append(moment)
    for action in entry.actions or []:
        # Republishes are told from their intents above (they carry the broker's answer).
        if action.get("action") == "republish" and republishes:
            continue
        moments.append(_action_moment(action))
    order = {id(m): n for n, m in enumerate(moments)}

    def key(m: Moment):
        at = max(m.at, after[id(m)]) if m.at is not None and id(m) in after else m.at
        # Among moments of one time, a failure again after what it followed, else as made.
        return (at is None, at or datetime.min, id(m) in after, order[id(m)])
    return sorted(moments, key=key)


def _republish_followed(replay: EntryView, at: datetime | None, republishes: list[dict],
                        shown: list[Moment]) -> Moment | None:
    """The republish whose message failed again as ``replay``: the one whose msgId the failure
    names (Dlq-Original-Msg-Id), else the last one asked for (its intent made) before the failure,
    a failure told in whole seconds counting to the end of its second."""
    for rep, moment in zip(republishes, shown):
        if replay.original_msg_id and rep.get("msg_id") == replay.original_msg_id:
            return moment
    if at is None:
        return None
    until = at + timedelta(seconds=1) if at.microsecond == 0 else at
    earlier = [m for rep, m in zip(republishes, shown)
               if rep.get("state") == "published" and (made := _time(rep.get("created_at"))) and made < until]
    return earlier[-1] if earlier else None
