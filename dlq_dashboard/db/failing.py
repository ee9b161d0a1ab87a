"""A background loop's failures as an operator reads them in the log (docs/deploy.md, "A database
outage"): one line when a run of failures begins, with its traceback only when the database is
not simply away (``is_unavailable``: the database probe has said so in a line of its own), nothing
more while the run goes on, and one line when the loop works again. Through an outage each loop
(the search pass, the triage pass, the jobs' recovery, the retention purge, the alerts, the key
fields) so writes two lines, not a traceback every few seconds."""

from __future__ import annotations

import logging

from .liveness import describe, is_unavailable


class FailureLog:
    """The log lines of one loop's failures: ``failed(exc)`` at each, ``worked()`` after each pass
    that did its work."""

    def __init__(self, logger: logging.Logger, what: str, retry: str = "retrying", again: str | None = None):
        self.log, self.what, self.retry = logger, what, retry
        self.again = again or f"{what} works again"
        self.failing = False

    def failed(self, exc: BaseException) -> None:
        if self.failing:
            self.log.debug("%s failed again (%s: %s)", self.what, type(exc).__name__, exc)
            return
        self.failing = True
        if is_unavailable(exc):
            self.log.warning("%s failed (%s); %s", self.what, describe(exc), self.retry)
        else:  # not the database away: what a person needs to find the cause
            self.log.warning("%s failed; %s", self.what, self.retry, exc_info=exc)

    def worked(self) -> None:
        if self.failing:
            self.failing = False
            self.log.warning("%s", self.again)
