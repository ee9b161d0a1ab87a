"""Republish intents: exactly what a republish will publish (or did), and its recorded outcome.

A republish is committed as an intent (a Republish row with a msgId derived from the entry and
the version the operator saw) before anything is published. publishing.py publishes it and
records the outcome here: the PubAck, status ``republished``, the version raised and the audit
record; or, when nothing can have been stored, the failure and its audit record. Bulk jobs
record whole windows of intents the same way. docs/actions.md explains the design.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Mapping

from sqlalchemy import Connection, DateTime, insert, literal, select, update

from dlq_consumer import headers as contract

from ..db.counts import STATUS_COLUMNS, Change, bucket, count_changes
from ..db.models import Action, Entry, Job, Republish
from ..db.rows import UNCACHED, among, insert_rows, update_rows, update_rows_returning
from ..scopes import DEFAULT_SOURCE
from ..surrogates import loads_kept
from ..times import utcnow

ENTRIES, INTENTS, ACTIONS = Entry.__table__, Republish.__table__, Action.__table__
JOBS = Job.__table__


@dataclass(frozen=True)
class Published:
    """The broker's answer to a republish."""

    msg_id: str
    stream: str | None
    seq: int | None
    duplicate: bool | None

    def to_dict(self) -> dict[str, Any]:
        return {"msg_id": self.msg_id, "stream": self.stream, "seq": self.seq, "duplicate": self.duplicate}


@dataclass(slots=True)
class Intent:
    """A republish intent as committed: exactly what will be (or was) published."""

    id: int | None
    entry_id: int
    version: int
    msg_id: str
    subject: str
    payload: bytes
    headers: dict[str, str | list[str]]  # a list: a name given more than once
    edited: bool
    actor: str
    job_id: int | None
    created_at: datetime
    state: str = "pending"
    error: str | None = None
    forced: bool = False
    stream: str | None = None
    seq: int | None = None
    duplicate: bool | None = None
    # Published before (a retry, a recovery): an earlier attempt may have been stored, so a
    # failure now never counts as "nothing was stored" unless the broker itself said so.
    resumed: bool = False
    # The source it goes out through: the entry's (SPEC section 12), over that source's connection.
    source: str = DEFAULT_SOURCE

    @classmethod
    def from_row(cls, row) -> "Intent":
        m = row._mapping
        return cls(id=m["id"], entry_id=m["entry_id"], version=m["version"], msg_id=m["msg_id"],
                   subject=m["subject"], payload=bytes(m["payload"]), headers=loads_kept(m["headers"] or "{}"),
                   edited=bool(m["edited"]), actor=m["actor"], job_id=m["job_id"],
                   created_at=m["created_at"], state=m["state"], error=m["error"], stream=m["stream"],
                   seq=m["seq"], duplicate=m["duplicate"], source=m.get("source") or DEFAULT_SOURCE)


def entry_ref(entry: Mapping[str, Any]) -> str:
    """``<dlq stream>:<seq>`` (Dlq-Replay-Of); an advisory-only entry is named by its original message."""
    if entry["dlq_stream"] and entry["dlq_seq"]:
        return f"{entry['dlq_stream']}:{entry['dlq_seq']}"
    return f"{entry['original_stream']}:{entry['original_seq']}"


def republish_msg_id(entry: Mapping[str, Any], version: int, installation: str) -> str:
    """The msgId of the decision to republish ``entry`` as seen at ``version``, in the database
    whose installation id is ``installation`` (db/installation.py).

    Different from every earlier republish (each raises the version), from another database's
    (entry ids and versions are each database's own: the installation id tells them apart) and
    from the message's own ids (``<stream>:<seq>:dlq``, the service's), which never start with
    ``dlq-dashboard:``. A retried request or a recovery sends the msgId stored with its intent.
    """
    return f"dlq-dashboard:{installation}:{entry_ref(entry)}:e{entry['id']}:v{version}"


def decision_intent(intents: list[Intent]) -> Intent | None:
    """Of the intents of one entry at one version (one decision), the one a request for that
    decision continues: the published or pending one (it may have reached NATS, under the msgId
    it was first sent with, one from before the installation id too), else the newest failed one."""
    going = [i for i in intents if i.state != "failed"]
    chosen = going or intents
    return max(chosen, key=lambda i: i.id or 0) if chosen else None


def republish_headers(headers: Mapping[str, list[str]], msg_id: str,
                      replay_of: str) -> dict[str, str | list[str]]:
    """Original headers minus Dlq-* and Nats-*, plus a fresh Nats-Msg-Id and Dlq-Replay-Of; a name
    given more than once keeps all of its values (a list, sent a line each: nats/headers.py outgoing).

    A leftover Nats-Msg-Id would make the republish a silent duplicate and Nats-Stream-Source is
    refused (err 10227); the Dlq-* headers describe the failure, not the message.
    """
    result: dict[str, str | list[str]] = {}
    for name, values in headers.items():
        if values and _kept(name):
            result[name] = values[0] if len(values) == 1 else list(values)
    result[contract.NATS_MSG_ID] = msg_id
    result[contract.REPLAY_OF] = replay_of
    return result


@lru_cache(maxsize=1024)
def _kept(name: str) -> bool:
    """Whether a republish keeps a header of this name (the names repeat from entry to entry)."""
    low = name.lower()
    return not (low.startswith(contract.CONTRACT_PREFIX) or low.startswith(contract.SERVER_PREFIX))


class Flights:
    """The intents this runtime is publishing right now: a concurrent request for one of them
    is a double-click (409), not a retry of an abandoned publish. One per runtime."""

    def __init__(self) -> None:
        self._msg_ids: set[str] = set()
        self._lock = threading.Lock()
        # The pending intents (msgIds) recovery has said wait for NATS, and the sources whose
        # search it has: each said once while it waits, and once when it ends (recovery.py).
        self.told: set[str] = set()

    def start(self, intents: list[Intent]) -> None:
        """Note that these intents are being published now."""
        with self._lock:
            self._msg_ids.update(i.msg_id for i in intents)

    def end(self, intents: list[Intent]) -> None:
        """Note that these publishes have ended (answered, failed or abandoned)."""
        with self._lock:
            self._msg_ids.difference_update(i.msg_id for i in intents)

    def __contains__(self, intent: Intent) -> bool:
        with self._lock:
            return intent.msg_id in self._msg_ids

    def busy(self, intent: Intent, *, request_timeout: float, other_processes: bool = True) -> bool:
        """True when this runtime is publishing ``intent``, or (``other_processes``) another
        process may be: a young pending intent without a recorded failure."""
        if intent in self:
            return True
        if not other_processes:
            return False
        age = (utcnow() - intent.created_at).total_seconds()
        return intent.error is None and age < request_timeout + 5


# --- outcomes ----------------------------------------------------------------------------------

def set_status(conn: Connection, ids: list[int], status: str, **values) -> list[Change]:
    """Give these entries ``status`` (and ``values``) and raise their version; returns the changes
    to count. One UPDATE for each status they had, most likely first, its RETURNING naming the
    entries it changed (locked as they change): a window of open entries is one statement,
    where reading them first and updating them took two."""
    left, changes = set(ids), []
    values = {"status": status, "version": ENTRIES.c.version + 1, **values}
    for old in sorted(STATUS_COLUMNS, key=lambda s: (s != "open", s != status)):
        if not left:
            break
        rows = conn.execute(update(ENTRIES).where(among(conn, ENTRIES.c.id, sorted(left)), ENTRIES.c.status == old)
                            .values(values).returning(ENTRIES.c.id, ENTRIES.c.group_id, ENTRIES.c.received_at),
                            execution_options=UNCACHED).all()
        left.difference_update(r.id for r in rows)
        # Counted a group and minute at a time: the counts' hour of a minute's start is the hour
        # of every moment in that minute, and a window's entries share a few minutes.
        alike = Counter((r.group_id, bucket(r.received_at, 60)) for r in rows)
        changes.extend(Change(group, group, minute, old, status, n) for (group, minute), n in alike.items())
    if left:  # a status the counts do not know: changed, not counted
        conn.execute(update(ENTRIES).where(among(conn, ENTRIES.c.id, sorted(left))).values(values),
                     execution_options=UNCACHED)
    return changes


#: What _job_patches gives for a repair job: its republishes' audit says "repaired", not a patch.
REPAIR = "repair"


@lru_cache(maxsize=256)
def _audit_detail(subject: str, edited: bool, forced: bool, recovered: bool, patch: str | None = None) -> str:
    detail: dict[str, Any] = {"subject": subject, "edited": edited}
    if forced:
        detail["forced"] = True
    if recovered:
        detail["recovered"] = True
    if patch == REPAIR:
        detail["repaired"] = True  # by the schema, in a repair job (actions/bulk/repairing.py)
    elif patch:
        detail["patch"] = json.loads(patch)
    return json.dumps(detail)


def _job_patches(conn: Connection, intents: list[Intent]) -> dict[int, str]:
    """{job id: its JSON Patch as JSON text, or REPAIR} for the patch and repair jobs among these
    intents' (the audit of each republish a patch made carries the patch, of a repair
    ``repaired``; a plain job's window costs no query)."""
    job_ids = {i.job_id for i in intents if i.job_id is not None and i.edited}
    if not job_ids:
        return {}
    rows = conn.execute(select(JOBS.c.id, JOBS.c.action, JOBS.c.selection).where(
        JOBS.c.id.in_(sorted(job_ids)), JOBS.c.action.in_(("patch", "repair")))).all()
    return {r.id: REPAIR if r.action == "repair" else json.dumps(json.loads(r.selection or "{}").get("patch"))
            for r in rows}


def _audit(intent: Intent, action: str, now: datetime, *, recovered: bool, patches: dict[int, str],
           **values) -> dict[str, Any]:
    return {"entry_id": intent.entry_id, "job_id": intent.job_id, "action": action, "actor": intent.actor,
            "at": now, "note": None, "version": intent.version, "msg_id": intent.msg_id,
            "publish_stream": None, "publish_seq": None, "duplicate": None, "error": None,
            "detail": _audit_detail(intent.subject, intent.edited, intent.forced, recovered,
                                    patches.get(intent.job_id)), **values}


def record_published(conn: Connection, results: list[tuple[Intent, Any]], *, recovered: bool = False) -> list[Intent]:
    """Record PubAcks: intent published, entry ``republished`` (version raised), one audit row each."""
    acks = {i.msg_id: ack for i, ack in results}
    now = utcnow()
    # Only the first outcome counts: another thread or process may have finished some already.
    changed = update_rows_returning(conn, INTENTS, "msg_id", [
        {"msg_id": msg_id, "stream": ack.stream, "seq": ack.seq, "duplicate": bool(ack.duplicate)}
        for msg_id, ack in acks.items()], constants={"state": "published", "published_at": now, "error": None},
        match={"state": "pending"}, returning="id")
    done = [i for i, _ in results if i.msg_id in changed]
    if not done:
        return done
    count_changes(conn, set_status(conn, [i.entry_id for i in done], "republished", updated_at=now))
    # The audit rows are copied from the intents just recorded (entry, job, actor, version, msgId
    # and PubAck), one statement for each kind of detail, rather than sent row by row.
    by_detail: dict[str, list[int]] = {}
    patches = _job_patches(conn, done)
    for i in done:
        detail = _audit_detail(i.subject, i.edited, i.forced, recovered, patches.get(i.job_id))
        by_detail.setdefault(detail, []).append(changed[i.msg_id])
    for detail, ids in by_detail.items():
        copied = select(INTENTS.c.entry_id, INTENTS.c.job_id, literal("republish"), INTENTS.c.actor,
                        literal(now, DateTime()), INTENTS.c.version, INTENTS.c.msg_id, INTENTS.c.stream,
                        INTENTS.c.seq, INTENTS.c.duplicate, literal(detail)) \
            .where(among(conn, INTENTS.c.id, ids)).order_by(INTENTS.c.id)
        conn.execute(insert(ACTIONS).from_select(_AUDIT_COPIED, copied), execution_options=UNCACHED)
    return done


_AUDIT_COPIED = ["entry_id", "job_id", "action", "actor", "at", "version", "msg_id", "publish_stream", "publish_seq",
                 "duplicate", "detail"]


def record_failed(conn: Connection, results: list[tuple[Intent, str]], *, recovered: bool = False) -> list[Intent]:
    """Record publishes that cannot have stored anything. The entry was never changed, so it is
    as it was, and the same request retried (same version) reuses the msgId."""
    errors = {i.msg_id: e for i, e in results}
    changed = update_rows(conn, INTENTS, "msg_id", [{"msg_id": i.msg_id, "error": e} for i, e in results],
                          constants={"state": "failed"}, match={"state": "pending"})
    done = [i for i, _ in results if i.msg_id in changed]
    patches = _job_patches(conn, done)
    insert_rows(conn, ACTIONS, [_audit(i, "republish_failed", utcnow(), recovered=recovered, patches=patches,
                                       error=errors[i.msg_id]) for i in done])
    return done


def mark_in_doubt(conn: Connection, intents: list[Intent], error: str) -> None:
    """Note on pending intents that their publish got no answer; recovery completes them."""
    for intent in intents:
        intent.error = error
        conn.execute(update(INTENTS).where(INTENTS.c.msg_id == intent.msg_id, INTENTS.c.state == "pending")
                     .values(error=error))
