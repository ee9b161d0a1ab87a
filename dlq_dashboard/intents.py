"""Republish intents: what a republish will publish, its publish, its outcome and its recovery.

A republish is committed as an intent (a Republish row with a msgId derived from the entry and
the version the operator saw) before anything is published; actions.py decides and commits it,
this module publishes it and records the outcome: the PubAck, status ``republished``, the
version raised and the audit record; or, when nothing can have been stored, the failure and its
audit record. Bulk jobs (jobwork.py) publish windows of intents and record them the same way.

A crash between the commit and the outcome, or a publish whose answer never came, leaves the
intent pending; ``recover_pending`` publishes it again with the same msgId and payload, and the
broker's duplicate window absorbs the copy. docs/actions.md explains the design.
"""

from __future__ import annotations

import json
import logging
import threading
from functools import lru_cache
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

import nats.errors
import nats.js.errors
from sqlalchemy import Connection, select, update

from .action_errors import NatsDown, Refused
from .bridge import NatsUnavailable
from .contract import utcnow
from .db import write_transaction
from .models import Action, Entry, Republish
from .multirow import insert_rows, update_rows

log = logging.getLogger(__name__)

ENTRIES, INTENTS, ACTIONS = Entry.__table__, Republish.__table__, Action.__table__


# --- values ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Published:
    """The broker's answer to a republish."""

    msg_id: str
    stream: str | None
    seq: int | None
    duplicate: bool | None

    def to_dict(self) -> dict[str, Any]:
        return {"msg_id": self.msg_id, "stream": self.stream, "seq": self.seq, "duplicate": self.duplicate}


@dataclass
class Intent:
    """A republish intent as committed: exactly what will be (or was) published."""

    id: int | None
    entry_id: int
    version: int
    msg_id: str
    subject: str
    payload: bytes
    headers: dict[str, str]
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

    @classmethod
    def from_row(cls, row) -> "Intent":
        m = row._mapping
        return cls(id=m["id"], entry_id=m["entry_id"], version=m["version"], msg_id=m["msg_id"],
                   subject=m["subject"], payload=bytes(m["payload"]), headers=json.loads(m["headers"] or "{}"),
                   edited=bool(m["edited"]), actor=m["actor"], job_id=m["job_id"],
                   created_at=m["created_at"], state=m["state"], error=m["error"], stream=m["stream"],
                   seq=m["seq"], duplicate=m["duplicate"])


def entry_ref(entry: Mapping[str, Any]) -> str:
    """``<dlq stream>:<seq>`` (Dlq-Replay-Of); an advisory-only entry is named by its original message."""
    if entry["dlq_stream"] and entry["dlq_seq"]:
        return f"{entry['dlq_stream']}:{entry['dlq_seq']}"
    return f"{entry['original_stream']}:{entry['original_seq']}"


def republish_msg_id(entry: Mapping[str, Any], version: int) -> str:
    """The msgId of the decision to republish ``entry`` as seen at ``version``.

    The same for a retried request or a recovery; different from every earlier republish
    (each raises the version) and from the message's own ids (``<stream>:<seq>:dlq``, the
    service's), which never start with ``dlq-dashboard:``.
    """
    return f"dlq-dashboard:{entry_ref(entry)}:e{entry['id']}:v{version}"


# Tests replace this to simulate a crash at "after_intent" or "after_publish".
def fault_point(stage: str, intent: Intent) -> None:
    """A no-op hook between the steps of a republish."""


# Intents this process is publishing right now: a concurrent request for one of them is a
# double-click (409), not a retry of an abandoned publish.
_in_flight: set[str] = set()
_in_flight_lock = threading.Lock()


def start_flight(intents: list[Intent]) -> None:
    """Note that this process is publishing these intents now."""
    with _in_flight_lock:
        _in_flight.update(i.msg_id for i in intents)


def end_flight(intents: list[Intent]) -> None:
    """Note that these publishes have ended (answered, failed or abandoned)."""
    with _in_flight_lock:
        _in_flight.difference_update(i.msg_id for i in intents)


def is_in_flight(intent: Intent, rt, *, other_processes: bool = True) -> bool:
    with _in_flight_lock:
        if intent.msg_id in _in_flight:
            return True
    if not other_processes:
        return False
    # Another process may be publishing it: a young pending intent without a recorded failure.
    age = (utcnow() - intent.created_at).total_seconds()
    return intent.error is None and age < rt.settings.request_timeout + 5


# --- outcomes ----------------------------------------------------------------------------------

@lru_cache(maxsize=256)
def _audit_detail(subject: str, edited: bool, forced: bool, recovered: bool) -> str:
    detail: dict[str, Any] = {"subject": subject, "edited": edited}
    if forced:
        detail["forced"] = True
    if recovered:
        detail["recovered"] = True
    return json.dumps(detail)


def _audit(intent: Intent, action: str, now: datetime, *, recovered: bool, **values) -> dict[str, Any]:
    return {"entry_id": intent.entry_id, "job_id": intent.job_id, "action": action, "actor": intent.actor,
            "at": now, "note": None, "version": intent.version, "msg_id": intent.msg_id,
            "publish_stream": None, "publish_seq": None, "duplicate": None, "error": None,
            "detail": _audit_detail(intent.subject, intent.edited, intent.forced, recovered), **values}


def record_published(conn: Connection, results: list[tuple[Intent, Any]], *, recovered: bool = False) -> list[Intent]:
    """Record PubAcks: intent published, entry ``republished`` (version raised), one audit row each."""
    acks = {i.msg_id: ack for i, ack in results}
    now = utcnow()
    # Only the first outcome counts: another thread or process may have finished some already.
    changed = update_rows(conn, INTENTS, "msg_id", [
        {"msg_id": i.msg_id, "stream": ack.stream, "seq": ack.seq, "duplicate": bool(ack.duplicate)}
        for i, ack in results], constants={"state": "published", "published_at": now, "error": None},
        match={"state": "pending"})
    done = [i for i, _ in results if i.msg_id in changed]
    if not done:
        return done
    conn.execute(update(ENTRIES).where(ENTRIES.c.id.in_([i.entry_id for i in done]))
                 .values(status="republished", version=ENTRIES.c.version + 1, updated_at=now))
    insert_rows(conn, ACTIONS, [_audit(i, "republish", now, recovered=recovered, publish_stream=acks[i.msg_id].stream,
                                       publish_seq=acks[i.msg_id].seq, duplicate=bool(acks[i.msg_id].duplicate))
                                for i in done])
    return done


def record_failed(conn: Connection, results: list[tuple[Intent, str]], *, recovered: bool = False) -> list[Intent]:
    """Record publishes that cannot have stored anything. The entry was never changed, so it is
    as it was, and the same request retried (same version) reuses the msgId."""
    errors = {i.msg_id: e for i, e in results}
    changed = update_rows(conn, INTENTS, "msg_id", [{"msg_id": i.msg_id, "error": e} for i, e in results],
                          constants={"state": "failed"}, match={"state": "pending"})
    done = [i for i, _ in results if i.msg_id in changed]
    insert_rows(conn, ACTIONS, [_audit(i, "republish_failed", utcnow(), recovered=recovered, error=errors[i.msg_id])
                                for i in done])
    return done


def mark_in_doubt(conn: Connection, intents: list[Intent], error: str) -> None:
    """Note on pending intents that their publish got no answer; recovery completes them."""
    for intent in intents:
        intent.error = error
        conn.execute(update(INTENTS).where(INTENTS.c.msg_id == intent.msg_id, INTENTS.c.state == "pending")
                     .values(error=error))


def classify_failure(exc: BaseException, intent: Intent) -> tuple[bool, int, str]:
    """(nothing was stored, HTTP status, sentence) for an exception from publishing ``intent``."""
    nothing_stored, status, sentence = _classify(exc, intent.subject)
    if nothing_stored and status == 503 and intent.resumed:
        # This attempt was not sent, but an earlier one may have been stored.
        return False, 503, (f"{sentence.split(';')[0]}. The republish may have been stored by an earlier "
                            "attempt; it will be completed with the same msgId once NATS answers.")
    return nothing_stored, status, sentence


def _classify(exc: BaseException, subject: str) -> tuple[bool, int, str]:
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return True, 422, f"No stream stores subject {subject}, so nothing was republished."
    if isinstance(exc, nats.js.errors.ServiceUnavailableError):
        return True, 503, f"JetStream is temporarily unavailable ({exc.description}); nothing was republished."
    if isinstance(exc, nats.js.errors.APIError):
        return True, 422, f"NATS refused the message ({exc.description}, error {exc.err_code})."
    if isinstance(exc, (nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError,
                        nats.errors.MaxPayloadError, nats.errors.BadHeaderError, nats.errors.BadSubjectError)):
        return True, 503, f"The message could not be sent ({type(exc).__name__}: {exc}); nothing was republished."
    reason = str(exc) if isinstance(exc, NatsUnavailable) else f"no answer from NATS ({type(exc).__name__})"
    return False, 503, (f"{reason}. The republish may still arrive; it will be completed with the same "
                        "msgId once NATS answers, and nothing is published twice.")


# --- the publish -------------------------------------------------------------------------------

def nats_unreachable(rt) -> str | None:
    """Why NATS cannot be used now (a sentence), or None when it is connected."""
    if rt.bridge is None:
        return "NATS is not connected (the dashboard's background services are not running)"
    if not rt.bridge.state.connected:
        return f"NATS is not reachable ({rt.bridge.state.last_error or 'connecting'})"
    return None


def publish_intent(rt, intent: Intent, *, recovered: bool = False) -> Published:
    """Publish a committed intent with its msgId and record the outcome; raise Refused or NatsDown."""
    start_flight([intent])
    try:
        fault_point("after_intent", intent)
        down = nats_unreachable(rt)
        if down and intent.resumed:
            raise NatsDown(f"{down}. The republish (msgId {intent.msg_id}) is completed with that msgId "
                           "when NATS is back; nothing is published twice.", in_doubt=True, entry_id=intent.entry_id)
        if down:
            with write_transaction(rt.engine) as conn:
                record_failed(conn, [(intent, down)], recovered=recovered)
            raise NatsDown(f"{down}; nothing was republished and entry {intent.entry_id} is as it was. "
                           "Try again when NATS is back.", entry_id=intent.entry_id)
        timeout = rt.settings.request_timeout
        try:
            ack = rt.bridge.call(lambda: rt.bridge.js.publish(intent.subject, intent.payload,
                                                              headers=dict(intent.headers), timeout=timeout),
                                 timeout + 1.0)
        except Exception as exc:
            nothing_stored, status, sentence = classify_failure(exc, intent)
            with write_transaction(rt.engine) as conn:
                if nothing_stored:
                    record_failed(conn, [(intent, sentence)], recovered=recovered)
                else:
                    mark_in_doubt(conn, [intent], sentence)
            error = (Refused if status == 422 else NatsDown)
            if nothing_stored:
                sentence += f" Entry {intent.entry_id} is as it was."
            raise error(sentence, entry_id=intent.entry_id) from None
        fault_point("after_publish", intent)
        with write_transaction(rt.engine) as conn:
            record_published(conn, [(intent, ack)], recovered=recovered)
        return Published(intent.msg_id, ack.stream, ack.seq, bool(ack.duplicate))
    finally:
        end_flight([intent])


# --- recovery ----------------------------------------------------------------------------------

def recover_pending(rt, *, older_than: float = 0.0) -> int:
    """Finish intents left pending (a crash, an unanswered publish) with their own msgId.

    Returns how many were finished. Past the target stream's duplicate window the broker no
    longer recognises the msgId, so the stream is searched for it before publishing.
    """
    if nats_unreachable(rt):
        return 0
    cutoff = utcnow() - timedelta(seconds=older_than)
    with rt.engine.connect() as conn:
        rows = conn.execute(select(INTENTS).where(INTENTS.c.state == "pending", INTENTS.c.created_at <= cutoff)
                            .order_by(INTENTS.c.id)).all()
    finished = 0
    for intent in map(Intent.from_row, rows):
        intent.resumed = True  # whether it was sent before the crash is unknown
        with _in_flight_lock:
            if intent.msg_id in _in_flight:
                continue
        try:
            found = rt.bridge.call(lambda: find_stored(rt.bridge.js, intent), rt.settings.request_timeout + 30)
            if found is not None:
                with write_transaction(rt.engine) as conn:
                    record_published(conn, [(intent, found)], recovered=True)
            else:
                publish_intent(rt, intent, recovered=True)
            finished += 1
        except Refused as exc:
            log.warning("republish %s could not be completed: %s", intent.msg_id, exc)
            finished += 1
        except (NatsDown, NatsUnavailable) as exc:
            log.warning("republish %s is still waiting for NATS: %s", intent.msg_id, exc)
            break
    return finished


async def find_stored(js, intent: Intent):
    """The PubAck of an intent's message if its stream holds it and the duplicate window has
    passed (within the window a publish with the same msgId is the safe, cheaper check)."""
    import asyncio

    from nats.js.api import ConsumerConfig, DeliverPolicy, PubAck

    try:
        stream = await js.find_stream_name_by_subject(intent.subject)
        info = await js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return None
    window = info.config.duplicate_window or 120.0
    if (utcnow() - intent.created_at).total_seconds() < window / 2:
        return None
    since = (intent.created_at - timedelta(seconds=5)).replace(tzinfo=timezone.utc)
    sub = await js.subscribe(intent.subject, stream=stream, ordered_consumer=True, config=ConsumerConfig(
        deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since, headers_only=True))
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                return None
            if (msg.headers or {}).get("Nats-Msg-Id") == intent.msg_id:
                return PubAck(stream=stream, seq=msg.metadata.sequence.stream, duplicate=True)
            if msg.metadata.num_pending == 0:
                return None
    finally:
        await sub.unsubscribe()
