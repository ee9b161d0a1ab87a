"""Whether who started a bulk job may still do what it does, asked at each turn of its loop
(work.py): a job acts in its actor's name, so what stops the person stops the job (SPEC section
10). A user disabled, a token revoked or deleted, a role below operator: the job is cancelled, in
the dashboard's name, saying why. Scopes narrowed: the pending items of entries outside them are
skipped, saying why; the others go on. A single sign-on's grants are read at each sign-in, so
for such a user only disabling or removing counts here; a name the dashboard does not keep (a
trusted proxy's user, the command line's) is not checked.

One row is read a turn; the job's items are looked at again only when that row has changed (and
once when a runner takes the job, as a change may have come while no runner had it).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, exists, not_, select, update

from ...actors import JOB_WATCH
from ...db.engine import write_transaction
from ...db.models import ApiToken, User
from ...entries.scoping import scope_condition
from ...scopes import RANK, Scope, scopes_from_json
from ..context import ActionContext
from ..intents import ENTRIES, INTENTS
from .jobs import ITEMS, JOBS, cancel_job

USERS, TOKENS = User.__table__, ApiToken.__table__


@dataclass(frozen=True)
class Standing:
    """What a job's actor may do now: act at all (``why`` not, when not), and on what."""

    may_act: bool
    scopes: tuple[Scope, ...] | None = None
    why: str = ""


def standing_of(conn, actor: str) -> Standing | None:
    """The standing of ``actor`` as the dashboard keeps it; None for a name it does not keep."""
    if actor.startswith("token:"):
        row = conn.execute(select(TOKENS.c.role, TOKENS.c.scopes, TOKENS.c.revoked_at)
                           .where(TOKENS.c.name == actor[len("token:"):])).first()
        if row is None or row.revoked_at is not None:
            return Standing(False, why="its token was revoked" if row is not None else "its token was deleted")
        return _of_role(row.role, row.scopes)
    row = conn.execute(select(USERS.c.role, USERS.c.scopes, USERS.c.disabled, USERS.c.via)
                       .where(USERS.c.name == actor)).first()
    if row is None:
        return None
    if row.disabled:
        return Standing(False, why="the user was disabled")
    if row.via == "oidc":  # the grants are the sign-in's: only disabling counts here
        return Standing(True)
    return _of_role(row.role, row.scopes)


def _of_role(role: str, scopes: str | None) -> Standing:
    if RANK.get(role, -1) < RANK["operator"]:
        return Standing(False, why=f"its role is {role} now")
    return Standing(True, scopes_from_json(scopes))


class ActorWatch:
    """A job's actor, looked at each turn (``settle``)."""

    def __init__(self, rt: ActionContext, job_id: int):
        self.rt, self.job_id = rt, job_id
        self.actor: str | None = None
        self.seen: Standing | None | bool = False  # False: not looked at yet

    def settle(self) -> bool:
        """Look at the actor's standing; when it changed, cancel the job or skip the items it no
        longer covers. True when the job or its items were changed (read them again)."""
        with self.rt.engine.connect() as conn:
            if self.actor is None:
                self.actor = conn.execute(select(JOBS.c.actor).where(JOBS.c.id == self.job_id)).scalar_one()
            standing = standing_of(conn, self.actor)
        if standing == self.seen:
            return False
        self.seen = standing
        if standing is None or (standing.may_act and standing.scopes is None):
            return False
        if not standing.may_act:
            return self._cancel(standing.why)
        return self._skip_outside(standing.scopes)

    def _cancel(self, why: str) -> bool:
        # Not when it was cancelled already (by whom it was says so), as read in the cancel's own
        # transaction, with the job's row locked: a person's cancel meanwhile is seen.
        return cancel_job(self.rt, self.job_id, actor=JOB_WATCH, note=f"{self.actor} may no longer act: {why}.",
                          detail={"actor": self.actor}, unless_asked=True)

    def _skip_outside(self, scopes: tuple[Scope, ...]) -> bool:
        """Skip the pending items of entries outside ``scopes``; not those whose republish is
        already out (an intent of this job pending: its outcome is recorded as it comes)."""
        outside = select(ENTRIES.c.id).where(not_(scope_condition(ENTRIES.c.original_subject, scopes)))
        in_flight = exists().where(INTENTS.c.entry_id == ITEMS.c.entry_id, INTENTS.c.job_id == self.job_id,
                                   INTENTS.c.state == "pending")
        result = (f"Skipped: outside {self.actor}'s scopes now ({', '.join(map(str, scopes)) or 'none'}); "
                  "they were narrowed after the job started.")
        with write_transaction(self.rt.engine) as conn:
            skipped = conn.execute(update(ITEMS).where(and_(
                ITEMS.c.job_id == self.job_id, ITEMS.c.state == "pending", ITEMS.c.entry_id.in_(outside),
                not_(in_flight))).values(state="skipped", result=result)).rowcount
            if skipped:
                conn.execute(update(JOBS).where(JOBS.c.id == self.job_id).values(failed=JOBS.c.failed + skipped))
        return bool(skipped)
