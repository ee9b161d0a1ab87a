"""A real SMTP server for the alert e-mail tests (aiosmtpd, from requirements-dev.txt) on
127.0.0.1 and a free port: it records each message it takes, and answers each delivery with the
next of ``answers``: an SMTP reply such as ``"451 4.3.0 try again later"`` (refused), ``"drop"``
(the connection is cut after the message was sent, before any answer), ``"hang"`` (no answer
for 30 seconds), then ``250``.
With ``user`` and ``password`` it offers AUTH PLAIN and LOGIN without TLS and records each sign-in.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import threading
from email.message import EmailMessage

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from dlq_dashboard.nats.server import free_port


class MailServer:
    """The SMTP server; ``messages`` are (envelope recipients, parsed message) of each taken."""

    def __init__(self, answers=(), *, user: str | None = None, password: str | None = None):
        self.answers = list(answers)
        self.messages: list[tuple[list[str], EmailMessage]] = []
        self.deliveries = 0  # every DATA received, taken or not
        self.sign_ins: list[tuple[str, bool]] = []
        self.user, self.password = user, password
        self._lock = threading.Lock()
        kwargs = {}
        if user is not None:
            kwargs = {"authenticator": self._authenticate, "auth_require_tls": False}
        self.port = free_port()
        self._controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port, **kwargs)
        self._controller.start()

    @property
    def url(self) -> str:
        """DLQ_SMTP_URL for this server, with its credentials when it asks for them."""
        credentials = f"{self.user}:{self.password}@" if self.user is not None else ""
        return f"smtp://{credentials}127.0.0.1:{self.port}"

    def received(self) -> list[EmailMessage]:
        with self._lock:
            return [message for _, message in self.messages]

    def _authenticate(self, server, session, envelope, mechanism, auth_data):
        ok = (isinstance(auth_data, LoginPassword) and auth_data.login.decode() == self.user
              and auth_data.password.decode() == self.password)
        with self._lock:
            self.sign_ins.append((auth_data.login.decode() if isinstance(auth_data, LoginPassword) else "?", ok))
        return AuthResult(success=ok)

    def close(self) -> None:
        self._controller.stop()


class _Handler:
    def __init__(self, mail: MailServer):
        self.mail = mail

    async def handle_DATA(self, server, session, envelope):
        mail = self.mail
        with mail._lock:
            mail.deliveries += 1
            answer = mail.answers.pop(0) if mail.answers else "250 Message accepted for delivery"
        if answer == "drop":
            server.transport.abort()  # the message was sent; no answer ever comes
            return "250 never sent"
        if answer == "hang":
            await asyncio.sleep(30)  # a server that takes the message and never says so
            return "451 4.3.0 too late"
        if answer.startswith("250"):
            message = email.message_from_bytes(envelope.original_content or envelope.content,
                                               policy=email.policy.default)
            with mail._lock:
                mail.messages.append((list(envelope.rcpt_tos), message))
        return answer
