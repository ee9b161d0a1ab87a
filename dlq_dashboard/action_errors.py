"""Why an operator action was not done: each error carries the HTTP status the edge answers with.

Raised by the actions (actions.py), the republish machinery (intents.py) and bulk jobs alike,
so it sits below all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .intents import Published


class ActionError(Exception):
    """An action that was not done; the message is a sentence for the operator."""

    status = 400

    def __init__(self, message: str, *, entry_id: int | None = None, seen_version: int | None = None,
                 publish: "Published | None" = None, errors: list[dict] | None = None):
        super().__init__(message)
        self.entry_id, self.seen_version, self.publish = entry_id, seen_version, publish
        self.errors = errors or []


class EntryNotFound(ActionError):
    status = 404


class Conflict(ActionError):
    """The entry is not at the version the operator saw, or not in a state that allows this."""

    status = 409


class AlreadyRepublished(Conflict):
    """This decision (entry and version) was republished before; ``publish`` says where."""


class InFlight(Conflict):
    """Another request, job or recovery is publishing this very intent right now."""


class Refused(ActionError):
    """The request cannot be done as asked (no subject, no stream, an invalid payload)."""

    status = 422


class NatsDown(ActionError):
    """NATS is unreachable or did not answer; ``in_doubt`` when the message may still arrive."""

    status = 503

    def __init__(self, message: str, *, in_doubt: bool = False, **kw):
        super().__init__(message, **kw)
        self.in_doubt = in_doubt
