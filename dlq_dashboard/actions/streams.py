"""Which stream stores a subject, as the entry page asks it to say whether a republish can
work: a NATS request, so it is asked only while NATS answers, waits half a second at most, and
is remembered for a while (on the runtime) so that paging through entries of one subject asks
once."""

from __future__ import annotations

import time

import nats.errors
import nats.js.errors

from ..nats.bridge import NatsUnavailable
from .context import ActionContext

#: The most the page waits for the answer; beyond it, nothing is said.
LOOKUP_TIMEOUT = 0.5
_MISSING = ""  # remembered for "no stream stores it"


def stream_of(rt: ActionContext, subject: str | None) -> tuple[bool, str | None]:
    """(known, stream): the stream that stores ``subject`` (None: no stream does), or
    known=False when it cannot be told now (no subject, NATS unreachable or slow)."""
    bridge = rt.bridge
    if not subject or bridge is None or not bridge.state.connected:
        return False, None
    now = time.monotonic()
    remembered = rt.subject_streams.get(subject, now)
    if remembered is not None:
        return True, remembered or None

    async def look_up():
        try:
            return await bridge.js.find_stream_name_by_subject(subject)
        except nats.js.errors.NotFoundError:
            return _MISSING

    try:
        stream = bridge.call(look_up, min(LOOKUP_TIMEOUT, rt.settings.request_timeout))
    except (NatsUnavailable, nats.errors.Error, TimeoutError):
        return False, None
    rt.subject_streams.put(subject, now, stream)
    return True, stream or None
