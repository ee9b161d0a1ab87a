"""Which stream stores a subject, as the entry page asks it to say whether a republish can
work: a NATS request, so it is asked only while NATS answers, waits half a second at most, and
is remembered for a while (on the runtime) so that paging through entries of one subject asks
once. Asked of the entry's source and remembered by source and subject."""

from __future__ import annotations

import time

import nats.errors
import nats.js.errors

from ..nats.bridge import NatsUnavailable
from .context import ActionContext

#: The most the page waits for the answer; beyond it, nothing is said.
LOOKUP_TIMEOUT = 0.5
_MISSING = ""  # remembered for "no stream stores it"


def stream_of(rt: ActionContext, subject: str | None, source: str | None = None, *,
              fresh: bool = False) -> tuple[bool, str | None]:
    """(known, stream): the stream that stores ``subject`` in ``source`` (None: the main source;
    stream None: no stream does), or known=False when it cannot be told now (no subject, the
    source's NATS unreachable or slow, a source not configured here). ``fresh``: asked of NATS
    now, not remembered (what ends a republish must not be a stream removed since)."""
    bridge = rt.bridge if source is None else rt.bridge_for(source)
    if not subject or bridge is None or not bridge.state.connected:
        return False, None
    source = source or rt.main_source  # the main source asked by its name or as None is one answer
    now = time.monotonic()
    remembered = None if fresh else rt.subject_streams.get(subject, now, source)
    if remembered is not None:
        return True, remembered or None
    if rt.subject_streams.unanswered(now, source):
        return False, None

    async def look_up():
        try:
            return await bridge.js.find_stream_name_by_subject(subject)
        except nats.js.errors.NotFoundError:
            return _MISSING

    try:
        stream = bridge.call(look_up, min(LOOKUP_TIMEOUT, rt.settings.request_timeout))
    except (NatsUnavailable, nats.errors.Error, TimeoutError):
        rt.subject_streams.put_unanswered(time.monotonic(), source)
        return False, None
    rt.subject_streams.put(subject, now, stream, source)
    return True, stream or None
