"""How nats-py's connections are logged here: one line per change of state, never a traceback
per reconnect attempt.

nats-py reports every failed reconnect attempt to its ``error_cb``, about once a second while a
server is down; without one, its default callback logs each with a 28-line traceback. Every
client of the dashboard passes ConnectionLog's callbacks (the bridge has its own, alike), and
``quiet_nats_tracebacks`` turns what reaches nats-py's default callback anyway into one line,
logged once until the error changes.
"""

from __future__ import annotations

import logging
from typing import Any

NATS_LOGGER = "nats.aio.client"


def describe_error(exc: BaseException) -> str:
    """An error of nats-py in one line: ``ConnectionRefusedError: [Errno 111] Connect call failed ...``."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ConnectionLog:
    """``error_cb``, ``disconnected_cb`` and ``reconnected_cb`` for ``nats.connect`` that log one
    line per change: the disconnect, each different error until the next reconnect, the reconnect."""

    def __init__(self, logger: logging.Logger, name: str):
        self.log = logger
        self.name = name
        # Set by the owner before it closes the connection: nats-py reports a close as a disconnect.
        self.closing = False
        self._last_error: str | None = None

    def options(self) -> dict[str, Any]:
        """The callbacks as ``nats.connect`` keyword arguments."""
        return {"error_cb": self.error, "disconnected_cb": self.disconnected, "reconnected_cb": self.reconnected}

    def seen(self, exc: BaseException) -> bool:
        """Whether an error reads like the last one logged (so it is not logged again)."""
        text = describe_error(exc)
        if text == self._last_error:
            return True
        self._last_error = text
        return False

    def reset(self) -> None:
        """Connected again: the next error is logged whatever it is."""
        self._last_error = None

    async def error(self, exc: BaseException) -> None:
        if self.closing or self.seen(exc):
            self.log.debug("%s: %s", self.name, describe_error(exc))
        else:
            self.log.warning("%s: %s", self.name, describe_error(exc))

    async def disconnected(self) -> None:
        if self.closing:
            return
        self.log.warning("%s: disconnected from NATS; reconnecting", self.name)

    async def reconnected(self) -> None:
        self.reset()
        self.log.info("%s: reconnected to NATS", self.name)


class _OneLineErrors(logging.Filter):
    """nats-py's default error callback's records as one line each, and a repeat of the last not at all."""

    def __init__(self):
        super().__init__()
        self._last: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.funcName != "_default_error_callback" or not record.exc_info:
            return True  # anything else of nats-py's (an error in its read loop) keeps its traceback
        text = f"nats: {describe_error(record.exc_info[1])}"
        record.exc_info, record.exc_text, record.msg, record.args = None, None, "%s", (text,)
        if text == self._last:
            return False
        self._last = text
        return True


def quiet_nats_tracebacks() -> None:
    """Install the one-line filter on nats-py's logger (once)."""
    logger = logging.getLogger(NATS_LOGGER)
    if not any(isinstance(f, _OneLineErrors) for f in logger.filters):
        logger.addFilter(_OneLineErrors())
