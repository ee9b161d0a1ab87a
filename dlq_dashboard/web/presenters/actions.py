"""The actions the pages offer, declared as data: the entry page's action bar and the bulk bar's
choices. Each is rendered by one macro (``_entry_actions.html``, ``_bulk_actions.html``), so a
button's disabled-with-reason state and its need for NATS are written once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...actions.bulk.jobs import CHANGES, JOB_ACTIONS, REPUBLISHING
from ...actions.decisions import REPUBLISHABLE
from ...controls import shown
from ...entries.shape import STATUSES


@dataclass(frozen=True)
class EntryAction:
    """One form of the entry page's action bar."""

    name: str  # its data-action; "<name>-reason" is the id of the sentence saying why it cannot work
    label: str
    endpoint: str  # takes entry_id
    # "get" leads to a confirmation page first (republish, edit); "post" acts at once.
    method: str = "get"
    # Disabled while NATS is unreachable (static/app.js follows the status banner's poll).
    needs_nats: bool = False
    # What the note beside such actions calls it while NATS is unreachable ("Republishing ... is unavailable").
    nats_note: str = ""
    # Why it cannot work (actions/decisions.py: the sentence a request would be refused with): the
    # button is then disabled and says why.
    reason: str | None = None
    # Close takes a note, joined to its button as one control.
    takes_note: bool = False

    @property
    def waits_for_nats(self) -> bool:
        """It could work, once NATS answers: marked data-needs-nats."""
        return self.needs_nats and not self.reason


@dataclass(frozen=True)
class Reason:
    """The sentence beside a disabled button, which the button's aria-describedby points at."""

    id: str
    text: str
    shown: bool  # False when the same sentence is already shown for another button: kept for screen readers


@dataclass(frozen=True)
class EntryActionBar:
    """The entry page's action bar: its buttons, the reasons of those disabled, and the notes that
    appear while NATS is unreachable (one per kind of action that needs it)."""

    actions: tuple[EntryAction, ...]
    reasons: tuple[Reason, ...]
    nats_notes: tuple[str, ...]


def entry_action_bar(entry: Any, republish_reason: str | None, edit_reason: str | None,
                     close_needs_nats: bool, repairable: bool = True) -> EntryActionBar:
    """The actions an entry's status allows: Republish and Edit while it may be republished,
    Close unless it is closed, Reopen unless it is open. Repair by schema beside Edit only when
    ``repairable``: the current schema finds the payload invalid (a payload that passes, or that
    no schema covers, has nothing the repair could change)."""
    actions = []
    if entry.status in REPUBLISHABLE:
        actions += [EntryAction("republish", "Republish", "actions.confirm_republish", needs_nats=True,
                                nats_note="Republishing", reason=republish_reason or None),
                    EntryAction("edit", "Edit and republish", "actions.edit", needs_nats=True,
                                nats_note="Republishing", reason=edit_reason or None)]
        if repairable:
            # Beside Edit: the payload coerced by its schema (entries/repair.py), shown as a diff first.
            actions.append(EntryAction("repair", "Repair by schema", "repair.entry_repair", needs_nats=True,
                                       nats_note="Republishing", reason=edit_reason or None))
    if entry.status != "closed":
        # Closing is the database's decision; only DLQ_DELETE_ON_CLOSE makes it a NATS call too.
        actions.append(EntryAction("close", "Close", "actions.close", method="post", needs_nats=close_needs_nats,
                                   nats_note="Closing (which deletes the DLQ message)", takes_note=True))
    if entry.status != "open":
        actions.append(EntryAction("reopen", "Reopen", "actions.reopen", method="post"))
    reasons, said = [], set()
    for action in actions:
        if action.reason:
            reasons.append(Reason(f"{action.name}-reason", action.reason if action.reason in said
                                  else f"{action.label} is not possible: {action.reason}",
                                  shown=action.reason not in said))
            said.add(action.reason)
    notes = tuple(dict.fromkeys(a.nats_note for a in actions if a.waits_for_nats))
    return EntryActionBar(tuple(actions), tuple(reasons), notes)


@dataclass(frozen=True)
class BulkChoice:
    """One choice of the bulk bar's action <select>: a bulk job's action."""

    value: str  # actions/bulk/jobs.py JOB_ACTIONS
    label: str
    needs_nats: bool


BULK_LABELS = {"republish": "republish", "close": "close", "patch": "patch and republish",
               "repair": "repair by schema and republish", "reopen": "reopen"}


def bulk_choices(close_needs_nats: bool, status: str | None = None) -> tuple[BulkChoice, ...]:
    """The bulk jobs' actions, in the order of JOB_ACTIONS; those that publish need NATS, and
    closing does when it deletes the DLQ message (DLQ_DELETE_ON_CLOSE). A list filtered to one
    ``status`` offers only the actions that change entries of that status (CHANGES: a closed list
    offers reopen alone; the job would refuse the others)."""
    return tuple(BulkChoice(action, BULK_LABELS[action],
                            action in REPUBLISHING or (action == "close" and bool(close_needs_nats)))
                 for action in JOB_ACTIONS if status not in STATUSES or status in CHANGES[action])


@dataclass(frozen=True)
class RowAction:
    """One action on a row of the list: a button that asks first, naming the entry (``row_confirm``)."""

    name: str  # republish or close: web/row_actions.py ROW_ACTIONS
    label: str
    needs_nats: bool


def row_actions(entry: Any, close_needs_nats: bool) -> tuple[RowAction, ...]:
    """What a list row offers an operator: Republish while its status allows it, Close unless it is closed
    (the entry page's rules; the request itself is judged by the same functions)."""
    found = []
    if entry.status in REPUBLISHABLE:
        found.append(RowAction("republish", "Republish", True))
    if entry.status != "closed":
        found.append(RowAction("close", "Close", bool(close_needs_nats)))
    return tuple(found)


def row_confirm(action: str, entry: Any) -> str:
    """The question a row's action asks, naming the entry by its id and subject (and, for one
    republished already, that it would go out again)."""
    verb = {"republish": "Republish", "close": "Close"}[action]
    question = f"{verb} entry {entry.id} ({shown(entry.original_subject or 'no subject')})"
    if action == "republish" and entry.status == "republished":
        return f"{question} again? It was republished before; this sends it once more."
    return f"{question}?"
