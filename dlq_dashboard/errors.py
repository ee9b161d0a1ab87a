"""What the dashboard could not do, as exceptions that carry a sentence for a person.

These know nothing of HTTP: the web layer maps each kind to a status code in one place
(``web/errors.py``), the CLI prints the sentence. A refusal (Forbidden, NotSaved, RequestRefused)
is answered with its sentence alone, whatever the route was about to do.
"""

from __future__ import annotations


class DashboardError(Exception):
    """A request that was not done; the message says why, as a sentence for a person."""


class InvalidRequest(DashboardError, ValueError):
    """A parameter that does not parse or is out of bounds."""


class UnsupportedBody(InvalidRequest):
    """A request body sent as a media type the request does not read (only application/json, in
    UTF-8): answered 415."""


class NotFound(DashboardError, LookupError):
    """The thing asked for does not exist (an unknown entry or job id)."""


class EntryNotFound(NotFound):
    """No entry has this id."""

    def __init__(self, entry_id: int):
        super().__init__(f"There is no entry {entry_id}.")
        self.entry_id = entry_id


class JobNotFound(NotFound):
    """No bulk job has this id."""

    def __init__(self, job_id: int):
        super().__init__(f"There is no job {job_id}.")
        self.job_id = job_id


class Forbidden(DashboardError, PermissionError):
    """Who is asking may not do this: their role is below the one it needs, or the thing is
    another person's."""


class Hidden(Forbidden):
    """What is asked for is hidden from who is asking (DLQ_MASK hides payloads from viewers)."""


class NotSaved(DashboardError):
    """A save that met another of the same name at the same moment; saving again works."""


class RequestRefused(DashboardError):
    """A request refused before its route ran: for a host the dashboard does not answer at, or
    without a valid CSRF token."""


class ForeignSite(RequestRefused):
    """A request that changes something, started (the browser says) by another site."""


class DatabaseUnavailable(DashboardError):
    """The database cannot be used now (stopped, frozen, unreachable, out of disk space): nothing
    that needs it can be done until it answers again."""
