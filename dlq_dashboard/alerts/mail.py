"""Alert e-mails: an outbox row whose target is ``mailto:<address>`` becomes one plain-text
message (the alert's text as its subject, the link to the group on a line of its own, so any
client shows it as a link), sent through DLQ_SMTP_URL by the alert sender.

Every attempt sends the same message: the same ``X-Dlq-Event-Id`` and a ``Message-ID`` made of
the event id, so a mail client that got it twice (a server that delivered and then dropped the
connection before saying so) shows it once.
"""

from __future__ import annotations

import json
import smtplib
import socket
import ssl
from email.message import EmailMessage
from email.utils import formatdate

from ..mailing import STARTTLS, TLS, SmtpServer
from ..redaction import scrub

_MAX_ERROR = 300
# The e-mail's signature. Delivery is at least once (docs/alerts.md): a server that took the
# message and dropped the connection before answering is sent it again, so the footer promises
# no more than that, and says how to tell the second copy.
FOOTER = ("-- ",
          "Sent by DLQ Dashboard, which mails each alert to each address until a mail",
          "server accepts it. A copy may come twice if the server drops the connection",
          "before it answers; both copies carry the same Message-ID.")
# What the alert text escapes for Slack (outbox.alert_text), read back for a mail client.
_UNESCAPE = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))


def _plain(text: str) -> str:
    for escaped, char in _UNESCAPE:
        text = text.replace(escaped, char)
    return text


def alert_message(body: str, event_id: str, to: str, sender: str) -> EmailMessage:
    """The e-mail of an alert whose stored JSON is ``body``, for ``to``, from ``sender``."""
    alert = json.loads(body)
    group = alert.get("group") or {}
    link = alert.get("url") or ""
    message = EmailMessage()
    # One line whatever a group's text holds: a header may not break.
    message["Subject"] = " ".join(_plain(alert.get("text") or alert.get("event") or "DLQ Dashboard alert").split())
    message["From"] = sender
    message["To"] = to
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = f"<{event_id}@dlq-dashboard>"
    message["X-Dlq-Event-Id"] = event_id
    message["X-Dlq-Event"] = alert.get("event") or ""
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no out-of-office answers to it
    if link.startswith(("http://", "https://")):
        opening = f"Open the group in the dashboard:\n{link}"
    else:  # no DLQ_PUBLIC_URL: the path alone, to be opened on the dashboard's own address
        opening = f"Open the group in the dashboard at the path {link} (DLQ_PUBLIC_URL is not set)."
    spike = alert.get("spike")
    lines = [_plain(alert.get("text") or ""), "", opening, "",
             f"Subject:     {group.get('subject') or '(no subject)'}",
             f"Reason:      {group.get('reason') or '(no reason)'}",
             f"Error:       {group.get('key') or ''}",
             f"Entries:     {group.get('count')}",
             f"First seen:  {group.get('first_seen') or ''}",
             f"Last seen:   {group.get('last_seen') or ''}"]
    if spike:
        lines.append(f"Spike:       {spike.get('count')} new entries within {spike.get('minutes')} minutes "
                     f"(threshold {spike.get('threshold')})")
    lines += ["", f"Event {alert.get('event')}, id {event_id}.", "", *FOOTER]
    message.set_content("\n".join(lines) + "\n")
    return message


def send_message(server: SmtpServer, message: EmailMessage, to: str, sender: str, timeout: float) -> str | None:
    """Send one message to ``to``; None when the server accepted it, else what went wrong, in one
    line (never the password)."""
    client, stage = None, "before it took the message"
    try:
        if server.security == TLS:
            client = smtplib.SMTP_SSL(server.host, server.port, timeout=timeout,
                                      context=ssl.create_default_context())
        else:
            client = smtplib.SMTP(server.host, server.port, timeout=timeout)
        if server.security == STARTTLS:
            client.starttls(context=ssl.create_default_context())
        if server.user:
            stage = "while signing in (are the user name and password right?)"
            client.login(server.user, server.password or "")
            stage = "before it took the message"
        client.send_message(message, from_addr=sender, to_addrs=[to])
    except smtplib.SMTPRecipientsRefused as exc:
        code, answer = next(iter(exc.recipients.values()), (0, b""))
        return _line(server, f"SMTP {code} {_text(answer)}")
    except smtplib.SMTPResponseException as exc:
        return _line(server, f"SMTP {exc.smtp_code} {_text(exc.smtp_error)}")
    except smtplib.SMTPServerDisconnected as exc:
        # smtplib reports a read that timed out as a connection closed ("Connection unexpectedly
        # closed: The read operation timed out"): the server is there and silent, not gone.
        if isinstance(exc.__context__, (TimeoutError, socket.timeout)):
            return f"no answer within {timeout:g} s"
        return f"the mail server closed the connection {stage}"
    except socket.gaierror as exc:
        return _line(server, f"the host name does not resolve ({exc.strerror or exc})")
    except (TimeoutError, socket.timeout):
        return f"no answer within {timeout:g} s"
    except ConnectionRefusedError:
        return "connection refused"
    except (OSError, smtplib.SMTPException, ValueError) as exc:
        return _line(server, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    finally:
        if client is not None:
            _quit(client)
    return None


def _quit(client: smtplib.SMTP) -> None:
    # The message is taken once DATA is answered 250: a server that then drops the connection
    # has still got it, so the goodbye's outcome changes nothing.
    try:
        client.quit()
    except (OSError, smtplib.SMTPException):
        client.close()


def _text(answer) -> str:
    return answer.decode("utf-8", "replace") if isinstance(answer, bytes) else str(answer)


def _line(server: SmtpServer, text: str) -> str:
    text = scrub(" ".join(text.split())) or ""
    if server.password:
        text = text.replace(server.password, "•••")
    return text[:_MAX_ERROR]
