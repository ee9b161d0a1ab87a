"""The alert outbox as people read it (the /alerts page and GET /api/alerts): each alert's state,
attempts, last error, next try and target, and "send again" for one that failed.

A target is shown without its ``user:password@`` and its query (a webhook's secret often rides in
either); the error text is scrubbed the same way. Sending again only makes the row due now: the
sender (sender.py) sends it as stored, with the same event id and body (its key masked again if
DLQ_MASK now hides more of it: outbox.masked_body), and the audit says who asked.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import Engine, case, func, insert, literal, select, update

from ..db.engine import write_transaction
from ..db.models import Action, Alert, FailureGroup
from ..errors import Forbidden, InvalidRequest, NotFound
from ..redaction import scrub, without_userinfo
from ..times import utcnow

ALERTS, ACTIONS, GROUPS = Alert.__table__, Action.__table__, FailureGroup.__table__
#: An alert is sent (a 2xx answer), failed (its last attempt did not get one; it is tried again at
#: its next try), or pending (not tried yet).
STATES = ("failed", "pending", "sent")
LIMIT, MAX_LIMIT = 100, 500
#: Why an operator may see an alert and not send it again (a 403), as a group's state (visible.py).
ALERT_NOT_YOURS = ("Alert {id} is of a group outside the scopes you may act on (your operator grants): you may "
                   "read it, but not send it again.")
_IN_STATE = {"failed": (ALERTS.c.sent_at.is_(None), ALERTS.c.attempts > 0),
             "pending": (ALERTS.c.sent_at.is_(None), ALERTS.c.attempts == 0),
             "sent": (ALERTS.c.sent_at.is_not(None),)}


class AlertNotFound(NotFound):
    """No alert has this id."""

    def __init__(self, alert_id: int):
        super().__init__(f"There is no alert {alert_id}.")


class NotFailed(InvalidRequest):
    """Only an alert whose last attempt failed is sent again."""


def shown_target(url: str) -> str:
    """A webhook URL as the page shows it: no user and password, no query or fragment."""
    bare = without_userinfo(url) or ""
    try:
        parts = urlsplit(bare)
    except ValueError:
        return bare.split("?", 1)[0]
    query = "?…" if parts.query else ""
    return urlunsplit(parts._replace(query="", fragment="")) + query


def origins_only(records: list[dict]) -> list[dict]:
    """Audit records as a reader below operator reads them: a sent-again alert's target as its
    origin alone (``https://hooks.slack.com/…``). Such a reader is not shown /alerts, and an
    incoming webhook's secret is its path (Slack's, Mattermost's)."""
    def origin(target: str) -> str:
        parts = urlsplit(target)
        return f"{parts.scheme}://{parts.netloc}/…" if parts.scheme and parts.netloc else "…"

    return [{**r, "detail": {**r["detail"], "target": origin(r["detail"]["target"])}}
            if r.get("action") == "send_alert_again" and (r.get("detail") or {}).get("target") else r
            for r in records]


def state_of(row) -> str:
    """sent, failed or pending (STATES)."""
    if row.sent_at is not None:
        return "sent"
    return "failed" if row.attempts else "pending"


def list_alerts(engine: Engine, *, state: str | None = None, limit: int = LIMIT,
                before: int | None = None, within=None, acting=None) -> dict[str, Any]:
    """The outbox, newest first: ``state`` narrows it to one of STATES, ``before`` (an id) pages it.
    Also how many are in each state. ``within``: a condition on the groups' subject (a scoped
    reader's, entries/scoping.py), which leaves out the alerts of every other group; ``acting``:
    the one of the scopes the reader may act on, which an alert's ``actable`` tells (send_again)."""
    joined = ALERTS.outerjoin(GROUPS, GROUPS.c.id == ALERTS.c.group_id)
    scoped = () if within is None else (within,)
    query = (select(ALERTS.c.id, ALERTS.c.event_id, ALERTS.c.url, ALERTS.c.event, ALERTS.c.group_id,
                    ALERTS.c.created_at, ALERTS.c.attempts, ALERTS.c.next_attempt_at, ALERTS.c.sent_at,
                    ALERTS.c.last_error, GROUPS.c.subject, GROUPS.c.key, _actable(acting))
             .select_from(joined).where(*scoped))
    if state:
        query = query.where(*_IN_STATE[state])
    if before is not None:
        query = query.where(ALERTS.c.id < before)
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(ALERTS.c.id.desc()).limit(limit + 1)).all()
        counts = {name: conn.execute(select(func.count()).select_from(joined).where(*where, *scoped)).scalar()
                  for name, where in _IN_STATE.items()}
    alerts = [{"id": r.id, "event_id": r.event_id, "event": r.event, "group_id": r.group_id,
               # The key, which web/alert_outbox.py shows as the group's label (entries/groups.py).
               "group_subject": r.subject, "group_key": r.key, "target": shown_target(r.url), "state": state_of(r),
               "attempts": r.attempts, "last_error": scrub(r.last_error), "created_at": r.created_at,
               "next_attempt_at": None if r.sent_at is not None else r.next_attempt_at, "sent_at": r.sent_at,
               "actable": bool(r.actable)}
              for r in rows[:limit]]
    return {"alerts": alerts, "counts": counts,
            "next_before": alerts[-1]["id"] if len(rows) > limit else None}


def _actable(acting):
    """Whether the reader may act on an alert's group (``acting``: the scopes an operator may act
    on, as a condition on the group; None: every group), as the column ``actable``."""
    return (literal(True) if acting is None else case((acting, True), else_=False)).label("actable")


def send_again(engine: Engine, alert_id: int, *, actor: str, within=None, acting=None) -> None:
    """Make a failed alert due now (the sender then sends it as stored, with the same id), with
    an audit record in the same transaction; NotFailed for one that is sent or not tried yet;
    AlertNotFound for one of a group outside ``within`` (as list_alerts) as for an unknown id;
    Forbidden for one of a group outside ``acting`` (the scopes an operator may act on)."""
    now = utcnow()
    with write_transaction(engine) as conn:
        row = conn.execute(select(ALERTS, _actable(acting)).select_from(
            ALERTS.outerjoin(GROUPS, GROUPS.c.id == ALERTS.c.group_id))
            .where(ALERTS.c.id == alert_id, *(() if within is None else (within,)))).first()
        if row is None:
            raise AlertNotFound(alert_id)
        if not row.actable:
            raise Forbidden(ALERT_NOT_YOURS.format(id=alert_id))
        if state_of(row) != "failed":
            raise NotFailed(f"Alert {alert_id} is {state_of(row)}: only a failed alert is sent again.")
        conn.execute(update(ALERTS).where(ALERTS.c.id == alert_id, ALERTS.c.sent_at.is_(None))
                     .values(next_attempt_at=now))
        conn.execute(insert(ACTIONS).values(action="send_alert_again", actor=actor, at=now, detail=json.dumps(
            {"alert": alert_id, "event_id": row.event_id, "event": row.event, "target": shown_target(row.url)})))
