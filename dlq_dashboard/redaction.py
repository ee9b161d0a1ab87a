"""URLs as they may be shown: without the user name and password a NATS or database URL can carry.

Every text that can reach a reader (health, the banner, an action's refusal, a log line, the
CLI) is made of the bridge's state and of nats-py's, SQLAlchemy's and the drivers' error texts;
those are passed through ``scrub`` where they are recorded, so no later reader can forget it.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# scheme://userinfo@ in free text. The userinfo runs to the last '@' before the host ends (a
# password may hold an unencoded '@'), never across whitespace or into the path.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#]*@")


def without_userinfo(url: str) -> str:
    """``url`` with its ``user:password@`` part removed (``nats://a:b@host:4222`` -> ``nats://host:4222``)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL we can take apart: strip it as text
        return scrub(url)
    if "@" not in parts.netloc:
        return scrub(url)
    return scrub(urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])))


def scrub(text: str | None) -> str | None:
    """``text`` with the userinfo of every URL it quotes removed (None stays None)."""
    if not text:
        return text
    return _USERINFO.sub(lambda m: m.group("scheme"), str(text))
