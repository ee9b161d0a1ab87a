"""Publishing a committed republish intent with its own msgId, and recording what NATS answered.

A failure is told apart by whether anything can have been stored: if not, the intent is
recorded as failed and the entry is as it was; if maybe (no answer), the intent stays pending
and recovery.py completes it with the same msgId, which the stream's duplicate window absorbs.

Only a stream stores a republish, and only a stream's PubAck says it did: the subject's stream
is asked before publishing (actions/streams.py, as the entry page asks), and a subject no stream
stores is refused; a publish answered by anyone else (a core-NATS responder), or not answered
while NATS says no stream stores the subject (one removed since it was asked), ends failed with
that reason instead of waiting for an answer no stream will give.
"""

from __future__ import annotations

import nats.errors
import nats.js.errors

from dlq_consumer import headers as contract

from ..db.engine import write_transaction
from ..nats.bridge import NatsUnavailable
from ..nats.headers import outgoing
from ..nats.pubacks import NotPubAck, publish_acked
from ..redaction import scrub
from ..sources import acting_source
from .context import ActionContext
from .errors import ActionError, NatsDown, Refused
from .intents import Intent, Published, mark_in_doubt, record_failed, record_published
from .stored import SEARCH_SECONDS, find_stored
from .streams import stream_of


class NotAnswered(Exception):
    """A publish answered by "no responders" while a stream stores its subject (or while that
    could not be asked): NATS not answering, not the "no stream" refusal."""


class NoStreamAfterAll(Exception):
    """A publish no stream answered in time, whose subject no stream stores (asked of NATS after
    it): nothing was stored, though a core-NATS subscriber of the subject may have received it."""


#: What a publish with no answer in time raises (through the bridge, or from nats-py).
UNANSWERED = (NatsUnavailable, TimeoutError, nats.errors.TimeoutError)
#: The key of ``as_answered``'s ``asked`` under which NATS did not answer a lookup.
_NOT_ASKED = ("", "")


def fault_point(stage: str, intent: Intent) -> None:
    """A no-op hook between the steps of a republish ("after_intent", "after_publish"): the tests
    replace it to crash there. Bulk jobs look it up here too."""


def several_sources(rt: ActionContext) -> bool:
    """Whether this dashboard has more than one source (then every sentence about NATS names one)."""
    return len(rt.feeds) > 1


def of_source(rt: ActionContext, source: str | None, sentence: str) -> str:
    """``sentence`` about NATS, naming ``source`` when there are several (with one, as it was)."""
    if source is None or not several_sources(rt):
        return sentence
    if sentence.startswith("NATS "):
        return f"NATS of source '{source}' {sentence[len('NATS '):]}"
    return f"Source '{source}': {sentence}"


def not_configured(source: str) -> str:
    """Why nothing can be done through ``source``: this dashboard has no such source (an entry
    mirrored before the source was taken out of DLQ_CONFIG)."""
    return f"Source '{source}' is not configured here (DLQ_CONFIG names no such source)"


def nats_unreachable(rt: ActionContext, source: str | None = None) -> str | None:
    """Why the NATS of ``source`` (None: the main source) cannot be used now (a sentence), or
    None when it is connected. With several sources the sentence names the source."""
    if source is not None and acting_source(rt.settings, source) not in rt.feeds:
        return not_configured(source)
    bridge = rt.bridge if source is None else rt.bridge_for(source)
    if bridge is None:
        return of_source(rt, source, "NATS is not connected (the dashboard's background services are not running)")
    state = bridge.state
    return None if state.connected else of_source(rt, source, state.reason())


def subject_refusal(subject: str) -> str | None:
    """Why a message cannot be republished to ``subject``, its Dlq-Original-Subject (a sentence),
    or None. A dead letter's headers are anyone's who can publish to the DLQ: a subject in NATS's
    reserved namespace ($JS.API...) would make Republish a command to the server, a wildcard
    would be stored as a literal subject its subscribers match, and one NATS cannot parse fails."""
    if subject.startswith("$"):
        return (f"Its {contract.ORIGINAL_SUBJECT} {subject} is in NATS's reserved namespace ($JS, $SYS, ...): "
                "a publish there is a command to the server, not a message, so it is not republished.")
    tokens = subject.split(".")
    if any(not t or t.strip() != t or any(c.isspace() or ord(c) < 32 for c in t) for t in tokens):
        return (f"Its {contract.ORIGINAL_SUBJECT} {subject!r} is not a subject a message can be published to "
                "(an empty token, a space or a control character), so it is not republished.")
    if any(t in ("*", ">") for t in tokens):
        return (f"Its {contract.ORIGINAL_SUBJECT} {subject} holds a wildcard: a message is published to one "
                "subject, so it is not republished.")
    return None


def as_answered(rt: ActionContext, exc: BaseException, intent: Intent,
                asked: dict | None = None) -> BaseException:
    """What a publish's exception means, asking NATS now (not a remembered answer) which stream
    stores the subject. nats-py reports a "no responders" status as NoStreamResponseError, and a
    cluster recovering (a frozen node back, a stream leader being elected) answers so for a
    while although its stream stores the subject: it is the permanent "no stream" refusal only
    when no stream stores the subject; otherwise NotAnswered, which waits for NATS like a publish
    with no answer. A publish with no answer whose subject no stream stores is NoStreamAfterAll
    (nothing stored: a stream removed between the check and the publish, or a core-NATS
    subscriber that took it and did not answer). ``asked``: the answers of the same window
    (source and subject), so a window asks once a subject, and not again once NATS did not answer."""
    if not isinstance(exc, (nats.js.errors.NoStreamResponseError, *UNANSWERED)):
        return exc
    asked = {} if asked is None else asked
    key = (intent.source, intent.subject)
    if _NOT_ASKED in asked:
        known, stream = False, None
    elif key in asked:
        known, stream = asked[key]
    else:
        known, stream = asked[key] = stream_of(rt, intent.subject, intent.source, fresh=True)
        if not known:
            asked[_NOT_ASKED] = (False, None)
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return exc if known and stream is None else NotAnswered()
    return NoStreamAfterAll() if known and stream is None else exc


def as_answered_all(rt: ActionContext, answers: list, intents: list[Intent]) -> list:
    """``as_answered`` of each of a window's answers (a PubAck is kept), asking once a subject."""
    asked: dict = {}
    return [as_answered(rt, a, i, asked) if isinstance(a, BaseException) else a for a, i in zip(answers, intents)]


def no_stream_refusal(rt: ActionContext, intent: Intent) -> str | None:
    """Why ``intent`` is not published: no stream stores its subject (a sentence), or None when
    one does or NATS could not be asked now (the publish's answer says then). A remembered stream
    is taken (one removed since is told by the publish's answer, as_answered); "no stream" is
    asked of NATS again, so a stream added a moment ago is seen. A resumed intent (recovery, a
    retried request) is asked of NATS now."""
    known, stream = stream_of(rt, intent.subject, intent.source, fresh=intent.resumed)
    if known and stream is None and not intent.resumed:
        known, stream = stream_of(rt, intent.subject, intent.source, fresh=True)
    if known and stream is None:
        return f"No stream stores subject {intent.subject}, so nothing was republished."
    return None


def classify_failure(exc: BaseException, intent: Intent) -> tuple[bool, ActionError]:
    """(nothing can have been stored, the error to report) for an exception from publishing ``intent``."""
    nothing_stored, error = _classify(exc, intent.subject)
    if nothing_stored and isinstance(error, NatsDown) and intent.resumed:
        # This attempt was not sent, but an earlier one may have been stored.
        return False, NatsDown(f"{str(error).split(';')[0]}. The republish may have been stored by an earlier "
                               "attempt; it will be completed with the same msgId once NATS answers.",
                               entry_id=intent.entry_id)
    return nothing_stored, error


#: What a core-NATS subscriber of a subject no stream stores may have done with a republish.
CORE_COPY = "a core-NATS subscriber of the subject may have received it"


def _classify(exc: BaseException, subject: str) -> tuple[bool, ActionError]:
    if isinstance(exc, NotPubAck):
        return True, Refused(f"The subject {subject} answered, but not as a JetStream stream: {exc} is not a "
                             f"PubAck. No stream stored the republish, so it is not recorded as done ({CORE_COPY}).")
    if isinstance(exc, NoStreamAfterAll):
        return True, Refused(f"No JetStream stream answered the publish to {subject}, and none stores the "
                             f"subject, so nothing was stored and the republish is not recorded as done ({CORE_COPY}).")
    if isinstance(exc, NotAnswered):
        # Nobody took the message, but the publish keeps its msgId: completed with it later.
        return False, NatsDown(f"NATS did not answer the publish to {subject} (no responders: a stream stores "
                               "the subject, JetStream was not answering). It will be completed with the same "
                               "msgId once NATS answers, and nothing is published twice.")
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return True, Refused(f"No stream stores subject {subject}, so nothing was republished.")
    if isinstance(exc, nats.js.errors.ServiceUnavailableError):
        return True, NatsDown(f"JetStream is temporarily unavailable ({exc.description}); nothing was republished.")
    if isinstance(exc, nats.js.errors.APIError):
        return True, Refused(f"NATS refused the message ({exc.description}, error {exc.err_code}).")
    if isinstance(exc, nats.errors.MaxPayloadError):
        return True, Refused(f"The message is larger than this NATS server accepts ({scrub(str(exc))}); "
                             "nothing was republished.")
    if isinstance(exc, (nats.errors.BadHeaderError, nats.errors.BadSubjectError)):
        # The message itself, not NATS: sending it again would fail the same way.
        return True, Refused(f"NATS cannot send this message ({type(exc).__name__}: {scrub(str(exc))}); "
                             "nothing was republished.")
    if isinstance(exc, (nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError)):
        return True, NatsDown(f"The message could not be sent ({type(exc).__name__}: {scrub(str(exc))}); "
                              "nothing was republished.")
    reason = scrub(str(exc)) if isinstance(exc, NatsUnavailable) else f"no answer from NATS ({type(exc).__name__})"
    return False, NatsDown(f"{reason}. The republish may still arrive; it will be completed with the same "
                           "msgId once NATS answers, and nothing is published twice.")


def _already_stored(rt: ActionContext, bridge, intent: Intent) -> Published | None:
    """A resumed intent's message found in its stream, recorded as published (the broker's
    duplicate answer, as a publish within the window would have had); None when it is not there."""
    try:
        stored = bridge.call(lambda: find_stored(bridge.js, intent), rt.settings.request_timeout + SEARCH_SECONDS)
    except Exception as exc:  # NATS went away while asked: completed later, with its msgId
        raise NatsDown(f"NATS did not answer whether the republish (msgId {intent.msg_id}) was stored "
                       f"({type(exc).__name__}); it is completed with that msgId when NATS answers, and "
                       "nothing is published twice.", entry_id=intent.entry_id) from None
    if stored is None:
        return None
    with write_transaction(rt.engine) as conn:
        record_published(conn, [(intent, stored)], recovered=True)
    return Published(intent.msg_id, stored.stream, stored.seq, True)


def publish_intent(rt: ActionContext, intent: Intent, *, recovered: bool = False, searched: bool = False) -> Published:
    """Publish a committed intent with its msgId through its source's NATS and record the
    outcome; raise Refused or NatsDown. A resumed intent (one that may have been sent: a crash,
    an unanswered publish) is looked for in its stream first, past half its duplicate window
    (stored.py), unless the caller has (``searched``): published again there, it would be stored
    twice."""
    rt.flights.start([intent])
    try:
        fault_point("after_intent", intent)
        source = intent.source
        if acting_source(rt.settings, source) not in rt.feeds:
            # Nothing is recorded: an earlier attempt may have been stored, and the intent is
            # completed with its msgId if the source is configured again.
            raise Refused(f"{not_configured(source)}; the republish of entry {intent.entry_id} (msgId "
                          f"{intent.msg_id}) was not sent and waits for that source.", entry_id=intent.entry_id)
        refused = subject_refusal(intent.subject)
        if refused:
            # An intent written before its subject was refused (a pending one recovery completes).
            with write_transaction(rt.engine) as conn:
                record_failed(conn, [(intent, refused)], recovered=recovered)
            raise Refused(refused, entry_id=intent.entry_id)
        down = nats_unreachable(rt, source)
        if down and intent.resumed:
            raise NatsDown(f"{down}. The republish (msgId {intent.msg_id}) is completed with that msgId "
                           "when NATS is back; nothing is published twice.", entry_id=intent.entry_id)
        if down:
            with write_transaction(rt.engine) as conn:
                record_failed(conn, [(intent, down)], recovered=recovered)
            raise NatsDown(f"{down}; nothing was republished and entry {intent.entry_id} is as it was. "
                           "Try again when NATS is back.", entry_id=intent.entry_id)
        missing = no_stream_refusal(rt, intent)
        if missing:
            missing = of_source(rt, source, missing)
            with write_transaction(rt.engine) as conn:
                record_failed(conn, [(intent, missing)], recovered=recovered)
            raise Refused(f"{missing} Entry {intent.entry_id} is as it was.", entry_id=intent.entry_id)
        bridge = rt.bridge_for(source)
        timeout = rt.settings.request_timeout
        if intent.resumed and not searched:
            found = _already_stored(rt, bridge, intent)
            if found is not None:
                return found
        try:
            ack = bridge.call(lambda: publish_acked(bridge.nc, intent.subject, intent.payload,
                                                    headers=outgoing(intent.headers), timeout=timeout),
                              timeout + 1.0)
        except Exception as exc:
            nothing_stored, error = classify_failure(as_answered(rt, exc, intent), intent)
            error = type(error)(of_source(rt, source, str(error)), entry_id=intent.entry_id)
            with write_transaction(rt.engine) as conn:
                if nothing_stored:
                    record_failed(conn, [(intent, str(error))], recovered=recovered)
                else:
                    mark_in_doubt(conn, [intent], str(error))
            sentence = str(error) + (f" Entry {intent.entry_id} is as it was." if nothing_stored else "")
            raise type(error)(sentence, entry_id=intent.entry_id) from None
        fault_point("after_publish", intent)
        with write_transaction(rt.engine) as conn:
            record_published(conn, [(intent, ack)], recovered=recovered)
        return Published(intent.msg_id, ack.stream, ack.seq, bool(ack.duplicate))
    finally:
        rt.flights.end([intent])
