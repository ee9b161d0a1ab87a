"""Why an operator action was not done. Raised by the actions, the republish machinery and bulk
jobs alike; the web layer maps each kind to a status code (web/errors.py), this module knows
nothing of HTTP."""

from __future__ import annotations

from ..errors import DashboardError
from .intents import Published


class ActionError(DashboardError):
    """An action that was not done; the message is a sentence for the operator."""

    def __init__(self, message: str, *, entry_id: int | None = None, seen_version: int | None = None,
                 publish: Published | None = None, errors: list[dict] | None = None):
        super().__init__(message)
        self.entry_id, self.seen_version, self.publish = entry_id, seen_version, publish
        self.errors = errors or []


class Conflict(ActionError):
    """The entry is not at the version the operator saw, or not in a state that allows this."""


class AlreadyRepublished(Conflict):
    """This decision (entry and version) was republished before; ``publish`` says where."""


class InFlight(Conflict):
    """Another request, job or recovery is publishing this very intent right now."""


class Refused(ActionError):
    """The request cannot be done as asked (no subject, no stream, an invalid payload)."""


class EmptyPayload(Refused):
    """An edited payload that is empty: never a fix. The message is the API's and the command
    line's; the editor says it in its own words (EDITOR_EMPTY)."""


#: The editor's sentence for an emptied payload: no API words ("send none") for a browser.
EDITOR_EMPTY = ("The payload is empty: nothing was republished. Type the payload to send, or use Republish on "
                "the entry's page to send the original.")


class SchemaRefused(Refused):
    """The payload does not pass its subject's current schema, and the override was not given;
    ``schema`` names the file, ``errors`` (ActionError) lists the failures."""

    def __init__(self, message: str, *, schema: str | None, unusable: str | None = None, **kwargs):
        super().__init__(message, **kwargs)
        self.schema = schema
        self.unusable = unusable  # why no schema judges it (schema None): the file that could not be loaded


class NatsDown(ActionError):
    """NATS is unreachable or did not answer; the message says whether anything may still arrive."""
