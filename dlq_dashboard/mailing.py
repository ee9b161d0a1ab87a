"""The mail server alert e-mails go through (DLQ_SMTP_URL), and what an e-mail address may be.

``smtp://user:pass@host:port`` speaks plain SMTP (port 25 unless given), ``?starttls=true``
upgrades it with STARTTLS before signing in (port 587 unless given), ``smtps://`` speaks TLS
from the first byte (port 465 unless given). A user name or password holding ``@``, ``:`` or
``/`` is written percent-encoded (``%40``). Pure parsing only: alerts/mail.py sends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from .flags import truth

PLAIN, STARTTLS, TLS = "plain", "starttls", "tls"
_DEFAULT_PORTS = {PLAIN: 25, STARTTLS: 587, TLS: 465}
# One address, nothing a header could be split on: no space or control character, no list or
# display-name punctuation, exactly one '@' with something on each side.
_ADDRESS = re.compile(r"^[^@\s<>,;:\"()\[\]\\]+@[^@\s<>,;:\"()\[\]\\]+$")


class MailError(ValueError):
    """A mail setting that cannot be used; the message says why, in one sentence (no password)."""


def check_address(raw: str) -> str:
    """The address, stripped, if it is one plain ``name@domain``; MailError otherwise."""
    address = (raw or "").strip() if isinstance(raw, str) else raw
    # ASCII only: an address that needs SMTPUTF8 would be refused by most servers at every attempt.
    if not isinstance(address, str) or not _ADDRESS.fullmatch(address) or not address.isascii():
        raise MailError(f"{raw!r} is not an e-mail address (write it as name@example.com)")
    return address


@dataclass(frozen=True)
class SmtpServer:
    """Where alert e-mails go and how to sign in there; ``shown`` is the URL without credentials."""

    host: str
    port: int
    security: str = PLAIN
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def shown(self) -> str:
        scheme = "smtps" if self.security == TLS else "smtp"
        query = "?starttls=true" if self.security == STARTTLS else ""
        return f"{scheme}://{self.host}:{self.port}{query}"


def parse_smtp_url(raw: str) -> SmtpServer:
    """DLQ_SMTP_URL as a SmtpServer; MailError saying what is wrong (never quoting a password)."""
    try:
        parts = urlsplit(raw.strip())
        port = parts.port
    except ValueError:
        raise MailError("it is not a URL with a host and a port number") from None
    if parts.scheme not in ("smtp", "smtps") or not parts.hostname or any(c.isspace() for c in raw.strip()):
        raise MailError("it is not an smtp:// or smtps:// URL with a host")
    if parts.path not in ("", "/") or parts.fragment:
        raise MailError("it has a path; only ?starttls=true may follow the host and port")
    security = TLS if parts.scheme == "smtps" else PLAIN
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key != "starttls" or truth(value) is None:
            raise MailError(f"{key}={value} is not understood; only ?starttls=true may follow the host and port")
        if truth(value):
            if security == TLS:
                raise MailError("smtps:// is TLS already; starttls=true goes with smtp://")
            security = STARTTLS
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    return SmtpServer(host=parts.hostname, port=port or _DEFAULT_PORTS[security], security=security, user=user,
                      password=password)


def mail_sender(teams, smtp: SmtpServer | None, mail_from: str | None, teams_file: str | None) -> str | None:
    """The address alert e-mails come from (DLQ_MAIL_FROM, else the SMTP account's own address
    where its user name is one); MailError with the setting's sentence when e-mails are wanted
    but cannot be sent: a team's e-mails with no server would wait in the outbox for ever."""
    mailing = next((t for t in teams if t.emails), None)
    if mailing is not None and smtp is None:
        raise MailError(f"DLQ_TEAMS={teams_file!r} is not valid: [teams.{mailing.name}] emails: DLQ_SMTP_URL is "
                        "not set, so no e-mail can be sent; set it or remove the emails")
    if smtp is None or mail_from:
        return mail_from
    try:
        return check_address(smtp.user or "")
    except MailError:
        raise MailError(f"DLQ_SMTP_URL={smtp.shown!r} is not valid without DLQ_MAIL_FROM: "
                        "use DLQ_MAIL_FROM to name the address alert e-mails come from") from None
