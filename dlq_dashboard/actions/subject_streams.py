"""The streams of subjects one runtime has looked up, remembered a while (actions/streams.py asks).
Known by source and subject: the same subject is stored by another stream (or none) in another
source's account or cluster."""

from __future__ import annotations

import threading

#: How long an answer is remembered: a stream removed shows within this.
REMEMBER_SECONDS = 30.0
#: How long "no stream stores it" is remembered: that answer is what makes a person add the
#: stream, and they look again at once (the preview refused the stream made a moment before).
REMEMBER_MISSING_SECONDS = 2.0
#: How long a source whose NATS did not answer a lookup is not asked again (answered "cannot be
#: told now" at once): a window of a bulk job, or a page, does not wait half a second a subject.
REMEMBER_UNANSWERED_SECONDS = 1.0
#: Subjects remembered at most (they are few; a flood of distinct ones must not grow it for ever).
REMEMBER_MOST = 10_000


class SubjectStreams:
    """The remembered answers of one runtime: (source, subject) -> (when asked, stream or '')."""

    def __init__(self) -> None:
        self._known: dict[tuple[str | None, str], tuple[float, str]] = {}
        self._unanswered: dict[str | None, float] = {}
        self._lock = threading.Lock()

    def unanswered(self, now: float, source: str | None = None) -> bool:
        """Whether ``source``'s NATS did not answer a lookup a moment ago."""
        with self._lock:
            since = self._unanswered.get(source)
        return since is not None and now - since < REMEMBER_UNANSWERED_SECONDS

    def put_unanswered(self, now: float, source: str | None = None) -> None:
        """Remember that ``source``'s NATS did not answer a lookup."""
        with self._lock:
            self._unanswered[source] = now

    def get(self, subject: str, now: float, source: str | None = None) -> str | None:
        """The remembered stream ('' for none) of ``subject`` in ``source`` while still fresh, else None."""
        with self._lock:
            found = self._known.get((source, subject))
        if found is None or now - found[0] >= (REMEMBER_SECONDS if found[1] else REMEMBER_MISSING_SECONDS):
            return None
        return found[1]

    def put(self, subject: str, now: float, stream: str, source: str | None = None) -> None:
        """Remember an answer about ``subject`` in ``source``."""
        with self._lock:
            if len(self._known) >= REMEMBER_MOST:
                self._known.clear()
            self._known[(source, subject)] = (now, stream)
