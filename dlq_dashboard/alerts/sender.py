"""The alert sender: a thread in the dashboard's process that POSTs the outbox to the webhooks
and mails its ``mailto:`` rows through DLQ_SMTP_URL (mail.py) while this process holds the
``alerts`` lease, so one replica sends whatever their number.

Each row is sent as stored (the same body, ``id`` and ``X-Dlq-Event-Id`` at every attempt);
a 2xx answer marks it sent, anything else (refused, timed out, a name that does not resolve,
a 500, a redirect) keeps it pending with the error and the time of its next attempt: 5 seconds,
doubling to 10 minutes, for as long as it takes. An e-mail is sent when the mail server takes
it (250 after the message), and retried alike after a refusal (4xx or 5xx), a dropped
connection or a timeout; with no DLQ_SMTP_URL in this process it is kept, each attempt
recording that it cannot be sent here. The sender never runs on the mirror's thread
or process, so a webhook that hangs delays alerts only, never ingest.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from types import SimpleNamespace
from datetime import datetime, timedelta
from urllib.parse import unquote, urlsplit, urlunsplit

from sqlalchemy import Engine, func, select, update

from ..config import Settings
from ..db.failing import FailureLog
from ..db.engine import read_transaction, write_transaction
from ..db.leases import acquire_lease, new_holder, release_lease
from ..db.models import Alert, Purge
from ..times import as_time, utcnow
from .mail import alert_message, send_message
from .outbox import MAILTO, masked_body

log = logging.getLogger(__name__)

ALERTS, PURGES = Alert.__table__, Purge.__table__
LEASE_NAME = "alerts"
LEASE_SECONDS = 15.0
#: Rows taken at a time; the lease is renewed between them.
BATCH = 20
_MAX_ERROR = 300


def backoff(failures: int, first: float = 5.0, longest: float = 600.0) -> float:
    """Seconds before the next attempt after ``failures`` failed ones: 5, 10, 20 ... 600."""
    return min(first * 2 ** max(failures - 1, 0), longest)


def signature(secret: str, body: bytes) -> str:
    """The X-Dlq-Signature of a body: ``sha256=`` and the hex HMAC-SHA256 with the secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A webhook that redirects did not take the alert: urllib would follow a POST's 302 as a GET.
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def without_credentials(url: str) -> tuple[str, str | None]:
    """The URL to connect to and its ``Authorization`` header: a ``user:password@`` in a webhook's
    URL is sent as HTTP Basic authentication (percent-decoded, as curl sends it), not as part of
    the host name, which urllib would try to resolve ("user:pw@hooks.example.com")."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    return urlunsplit(parts._replace(netloc=host)), "Basic " + base64.b64encode(pair.encode()).decode("ascii")


def post_alert(url: str, body: bytes, event_id: str, secret: str | None, timeout: float) -> str | None:
    """POST one alert; None when the webhook answered 2xx, else what went wrong, in one line."""
    headers = {"Content-Type": "application/json", "X-Dlq-Event-Id": event_id, "User-Agent": "dlq-dashboard"}
    if secret:
        headers["X-Dlq-Signature"] = signature(secret, body)
    url, authorization = without_credentials(url)
    if authorization:
        headers["Authorization"] = authorization
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            response.read(65536)
        return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} {exc.reason}".strip()
    except urllib.error.URLError as exc:
        return _describe(exc.reason, timeout)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return _describe(exc, timeout)


def _describe(reason, timeout: float) -> str:
    if isinstance(reason, socket.gaierror):
        text = f"the host name does not resolve ({reason.strerror or reason})"
    elif isinstance(reason, (TimeoutError, socket.timeout)):
        text = f"no answer within {timeout:g} s"
    elif isinstance(reason, ConnectionRefusedError):
        text = "connection refused"
    elif isinstance(reason, BaseException):
        text = f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__
    else:
        text = str(reason)
    return " ".join(text.split())[:_MAX_ERROR]


@dataclass(frozen=True)
class Outbox:
    """The outbox as /metrics shows it."""

    pending: dict[str, int]
    sent: dict[str, int]
    failed_attempts: int
    oldest_pending: datetime | None


def outbox_summary(engine: Engine) -> Outbox:
    """Alerts pending and sent by event, the failed attempts made, and the oldest unsent."""
    with read_transaction(engine) as conn:
        rows = conn.execute(select(ALERTS.c.event, ALERTS.c.sent_at.is_(None), func.count(),
                                   func.coalesce(func.sum(ALERTS.c.attempts), 0), func.min(ALERTS.c.created_at))
                            .group_by(ALERTS.c.event, ALERTS.c.sent_at.is_(None))).all()
        # Those of the delivered alerts the purges forgot: the total is a counter, never lower.
        forgotten = conn.execute(select(func.coalesce(func.sum(PURGES.c.alert_attempts), 0))).scalar()
    pending, sent, failed, oldest = {}, {}, int(forgotten), None
    for event, unsent, count, attempts, first in rows:
        if unsent:
            pending[event] = count
            failed += attempts
            oldest = min(oldest, first) if oldest else first
        else:
            sent[event] = count
            failed += attempts - count  # every attempt but the one that was answered
    return Outbox(pending, sent, int(failed), as_time(oldest))


class AlertSender:
    """Sends due alerts every ``alert_poll`` seconds while this process holds the alerts lease."""

    def __init__(self, engine: Engine, settings: Settings, *, longest_retry: float = 600.0):
        self.engine, self.secret, self.mask = engine, settings.webhook_secret, tuple(settings.mask)
        self.smtp, self.mail_from = settings.smtp, settings.mail_from
        self.poll, self.timeout = settings.alert_poll, settings.alert_timeout
        self.first_retry, self.longest_retry = settings.alert_first_retry, longest_retry
        self.holder = new_holder()
        self.leader = False
        self._asked_at = -LEASE_SECONDS
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> AlertSender:
        """Start the sender's thread (returns at once)."""
        self._thread = threading.Thread(target=self._run, name="alert-sender", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the POST in progress (at most its timeout) and give the lease up."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 10)
        if self.leader:
            try:
                release_lease(self.engine, LEASE_NAME, self.holder)
            except Exception:
                log.warning("releasing the alerts lease failed", exc_info=True)
            self.leader = False

    def _run(self) -> None:
        failures = FailureLog(log, "sending alerts", again="alerts are sent again")
        while not self._stop.is_set():
            asked = self._asked_at
            try:
                self.send_due()
                # A pass that asked the database nothing (no lease held, and not yet time to ask
                # for it) tells nothing of it: taken for one that worked, it wrote "alerts are sent
                # again" at the next poll after each failed asking, through a whole outage.
                if self.leader or self._asked_at != asked:
                    failures.worked()
            except Exception as exc:  # the database is unreachable: the rows wait, nothing is lost
                failures.failed(exc)
            self._stop.wait(self.poll)

    def _hold_lease(self) -> bool:
        # Renewed (or, by a replica without it, asked for) a third into its term: a sender that
        # lost it stops before another takes over, and the others write once every 5 s, not at
        # every poll.
        if time.monotonic() - self._asked_at >= LEASE_SECONDS / 3:
            self._asked_at = time.monotonic()
            held = acquire_lease(self.engine, LEASE_NAME, self.holder, LEASE_SECONDS)
            if held and not self.leader:
                log.info("this process sends the alerts")
            self.leader = held
        return self.leader

    def send_due(self) -> int:
        """Send the alerts that are due, while the lease is held; returns how many were delivered."""
        delivered = 0
        while not self._stop.is_set() and self._hold_lease():
            with read_transaction(self.engine) as conn:
                due = conn.execute(select(ALERTS.c.id, ALERTS.c.event_id, ALERTS.c.url, ALERTS.c.body,
                                          ALERTS.c.attempts, ALERTS.c.group_id)
                                   .where(ALERTS.c.sent_at.is_(None), ALERTS.c.next_attempt_at <= utcnow())
                                   .order_by(ALERTS.c.next_attempt_at, ALERTS.c.id).limit(BATCH)).all()
            if not due:
                return delivered
            for row in due:
                if self._stop.is_set() or not self._hold_lease():
                    return delivered
                row = self._as_masked(row)
                error = self._deliver(row)
                self._record(row, error)
                delivered += error is None
        return delivered

    def _as_masked(self, row):
        """The row with its body as DLQ_MASK now lets it be sent (outbox.masked_body): a body queued
        before the mask named a field its group's key quotes is made again with the value hidden,
        and stored so, so that every later attempt sends the same bytes."""
        if not self.mask:
            return row
        with read_transaction(self.engine) as conn:
            body = masked_body(conn, self.mask, row.body, row.group_id)
        if body == row.body:
            return row
        with write_transaction(self.engine) as conn:
            conn.execute(update(ALERTS).where(ALERTS.c.id == row.id, ALERTS.c.body == row.body, ALERTS.c.sent_at.is_(None))
                         .values(body=body))
        return SimpleNamespace(**{**row._asdict(), "body": body})

    def _deliver(self, row) -> str | None:
        """Send one outbox row: mail a ``mailto:`` target, POST to any other."""
        if not row.url.startswith(MAILTO):
            return post_alert(row.url, row.body.encode(), row.event_id, self.secret, self.timeout)
        if self.smtp is None or not self.mail_from:
            return "not sendable here: DLQ_SMTP_URL is not set (the e-mail waits for a sender that has it)"
        to = row.url[len(MAILTO):]
        try:
            message = alert_message(row.body, row.event_id, to, self.mail_from)
        except (ValueError, TypeError) as exc:  # a body no release wrote: kept, said once an attempt
            return f"the alert's body cannot be mailed ({type(exc).__name__})"
        return send_message(self.smtp, message, to, self.mail_from, self.timeout)

    def _record(self, row, error: str | None) -> None:
        now = utcnow()
        if error is None:
            values = {"sent_at": now}  # last_error stays: what the attempts before met
        else:
            log.warning("alert %s to %s not delivered (attempt %d): %s", row.event_id, _host(row.url),
                        row.attempts + 1, error)
            wait = backoff(row.attempts + 1, self.first_retry, self.longest_retry)
            values = {"last_error": error, "next_attempt_at": now + timedelta(seconds=wait)}
        with write_transaction(self.engine) as conn:
            # Only the attempt this sender read: a sender that lost its lease meanwhile changes nothing.
            conn.execute(update(ALERTS).where(ALERTS.c.id == row.id, ALERTS.c.attempts == row.attempts,
                                              ALERTS.c.sent_at.is_(None))
                         .values(attempts=row.attempts + 1, **values))


def _host(url: str) -> str:
    # Webhook URLs carry their secret in the path (Slack's do): the log names the host only.
    if url.startswith(MAILTO):
        return url
    return urlsplit(url).hostname or "?"
