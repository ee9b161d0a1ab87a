"""The names the dashboard itself writes as the actor of the audit and of a group's activity,
beside people's names, ``token:<name>`` and the command line's ``cli:<os user>``.

No user or token may take one of these names, in any case (accounts/core.py ``check_name``):
the audit could not tell that person from the dashboard. Every module that writes such an actor
takes its name from here, so that the set below is the whole list."""

from __future__ import annotations

#: The first admin (and the demo's operator), made by the dashboard at its first start.
FIRST_START = "dashboard"
#: A bulk job cancelled because its actor may no longer act (the job's "Cancelled by").
JOB_WATCH = "dlq-dashboard"
#: A group's state changed by what the mirror wrote (a resolved group failing again).
MIRROR = "mirror"
#: An alert sent about a group.
ALERTS = "alerts"
#: The retention purge (DLQ_RETENTION).
RETENTION = "retention"
#: A request made with nobody signed in.
ANONYMOUS = "anonymous"

#: Every name above: refused as a user's or a token's name, in any case.
SYSTEM_ACTORS = frozenset({FIRST_START, JOB_WATCH, MIRROR, ALERTS, RETENTION, ANONYMOUS})
