"""Web security around every request: the hosts answered, response headers, Secure cookies over
HTTPS, refusing cross-site writes, the login throttle and the trusted proxy. Refusals are raised
(RequestRefused) and answered by web/errors.py, which answers a wrong CSRF token too."""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable
from urllib.parse import urlsplit

from flask import Flask, current_app, has_request_context, request, session
from flask.sessions import SecureCookieSessionInterface
from sqlalchemy import Engine, delete, func, insert, select
from werkzeug.sansio.utils import host_is_trusted

from ..db.engine import read_transaction, write_transaction
from ..db.models import LoginFailure
from ..errors import ForeignSite, RequestRefused
from ..runtime import runtime_of
from ..times import utcnow
from . import current_runtime

FAILURES = LoginFailure.__table__

# No 'unsafe-inline' and no 'unsafe-eval': a payload that slipped into the markup still could
# not run. htmx 2 needs neither when configured from a <meta> tag with allowEval false and
# includeIndicatorStyles false.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "object-src 'none'",
    "frame-ancestors 'none'",
    "form-action 'self'",
    "base-uri 'none'",
])

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate CSP 2
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
}

# Besides DLQ_PUBLIC_URL's host, the names a check on the machine itself uses (a container's
# health check): a link built from them leads nowhere but the reader's own machine.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1")
# Answered whatever the Host: probes and scrapers call a pod by its address, and these answers
# build no URL from the Host.
ANY_HOST_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# Sec-Fetch-Site values of a request another site started. "same-site" is a sibling
# subdomain, a different origin all the same.
FOREIGN_SITES = frozenset({"cross-site", "same-site"})
# Idle sessions end after this long (each page load or form renews the cookie; the page's own
# htmx requests do not: HttpsAwareSessionInterface).
SESSION_IDLE = timedelta(hours=12)
# The end of the session (seconds since the epoch, DLQ_SESSION_HOURS after its sign-in) that
# its signed cookie carries: the cookie's Expires is never later, however often it is renewed.
SESSION_ENDS = "_ends"


def init_app(app: Flask) -> None:
    """Install the trusted hosts, the headers, the cookie policy, the cross-site refusal and the
    login throttle."""
    app.extensions["dlq_trusted_hosts"] = trusted_hosts(runtime_of(app).settings.public_url)
    app.before_request(refuse_untrusted_host)
    app.session_interface = HttpsAwareSessionInterface()
    if app.config.get("PERMANENT_SESSION_LIFETIME") == timedelta(days=31):  # Flask's default
        app.config["PERMANENT_SESSION_LIFETIME"] = SESSION_IDLE
    settings = runtime_of(app).settings
    app.extensions["dlq_login_throttle"] = LoginThrottle(
        runtime_of(app).engine,
        per_pair=settings.login_failures_per_name_and_address,
        per_address=settings.login_failures_per_address,
        per_name=settings.login_failures_per_name,
        max_delay=settings.login_slowdown_max,
        window=settings.login_failure_window,
    )
    app.before_request(refuse_cross_site_writes)
    app.after_request(add_security_headers)


def trusted_hosts(public_url: str | None) -> list[str] | None:
    """The Host header values answered (as Flask's TRUSTED_HOSTS would list them): DLQ_PUBLIC_URL's
    host and the loopback names; None (any host) without DLQ_PUBLIC_URL."""
    if not public_url:
        return None
    return [urlsplit(public_url).hostname, *LOOPBACK_HOSTS]


def refuse_untrusted_host():
    """With DLQ_PUBLIC_URL, a request for another Host is a 400, so nothing the dashboard builds
    from the Host (a redirect, a link) can point at a host the client made up.

    Checked here rather than by Flask's TRUSTED_HOSTS, which would refuse /healthz and /metrics
    too; it runs before the route's answer (and before a routing redirect is raised)."""
    hosts = current_app.extensions.get("dlq_trusted_hosts")
    # A host name is one name in any case; werkzeug compares them as written (DLQ_PUBLIC_URL's
    # host is read lower-case, as the loopback names are written).
    if not hosts or request.path in ANY_HOST_PATHS or host_is_trusted(request.host.lower(), hosts):
        return None
    raise RequestRefused(f"Refused: this dashboard answers at {current_runtime().settings.public_url} "
                         "(DLQ_PUBLIC_URL), not at the host this request named.")


# --- proxies and HTTPS ------------------------------------------------------------------------

#: What waitress is given wherever it serves the app (cli/main.py, the tests' servers,
#: docs/screenshots.py). Waitress 3 removes X-Forwarded-* and Forwarded from every request
#: before the app sees them, unless their peer is its own ``trusted_proxy``; the app then never
#: learnt that a trusted proxy spoke HTTPS or for which client. The app decides itself which peers
#: to believe (DLQ_TRUSTED_PROXIES, below), so waitress hands the headers through untouched: its
#: ``trusted_proxy`` takes one address where DLQ_TRUSTED_PROXIES takes networks, and it would
#: rewrite REMOTE_ADDR and wsgi.url_scheme, so that the peer the rule below checks would be the
#: client rather than the proxy.
WAITRESS_OPTIONS = {"clear_untrusted_proxy_headers": False}


def _networks() -> list:
    settings = current_runtime().settings
    return [ipaddress.ip_network(n, strict=False) for n in settings.trusted_proxies]


def is_trusted_proxy(address: str | None) -> bool:
    """True when ``address`` is one of DLQ_TRUSTED_PROXIES."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _networks())


def client_address() -> str:
    """The client's address: the peer, or behind trusted proxies the last hop they vouch for."""
    address = request.remote_addr or ""
    if is_trusted_proxy(address):
        hops = [h.strip() for h in request.headers.get("X-Forwarded-For", "").split(",") if h.strip()]
        # Walk from the right: each trusted proxy names the one before it; the first untrusted
        # hop is the client (anything left of it could be made up by that client).
        for hop in reversed(hops):
            address = hop
            if not is_trusted_proxy(hop):
                break
    return address


def request_is_https() -> bool:
    """True over HTTPS, directly or through a trusted proxy that says so."""
    if request.is_secure:
        return True
    return (request.headers.get("X-Forwarded-Proto", "").lower() == "https"
            and is_trusted_proxy(request.remote_addr))


def keep_session(hours: float) -> None:
    """At sign-in, before the session's row is written: the cookie outlives the browser, and
    expires after SESSION_IDLE without a page load, or ``hours`` from now, whichever is sooner
    (the row ends the session then too: accounts.start_session)."""
    session.permanent = True
    session[SESSION_ENDS] = datetime.now(timezone.utc).timestamp() + hours * 3600


class HttpsAwareSessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, with the Secure flag whenever the request came over HTTPS,
    renewed by what the person does, not by what the page asks on its own, and expiring when
    the session ends (keep_session)."""

    def get_expiration_time(self, app: Flask, session) -> datetime | None:
        expires = super().get_expiration_time(app, session)
        ends = session.get(SESSION_ENDS)
        if expires is None or not isinstance(ends, (int, float)):
            return expires
        return min(expires, datetime.fromtimestamp(ends, timezone.utc))

    def get_cookie_secure(self, app: Flask) -> bool:
        if super().get_cookie_secure(app):
            return True
        return has_request_context() and request_is_https()

    def should_set_cookie(self, app: Flask, session) -> bool:
        # A request the page makes by itself (htmx: the banner's poll every 2 s, the list's and a
        # job's polls, the editor's check) writes the cookie only when it changed the session.
        # Renewed, its copy of the session (read when it was sent) replaced a newer cookie when
        # its answer came after a form's: the message the form's answer set for the next page
        # ("Republished entry 7 ...", a flash) was lost, or shown a second time.
        if session.modified:
            return True
        return super().should_set_cookie(app, session) and not request.headers.get("HX-Request")


# --- every request ----------------------------------------------------------------------------

def refuse_cross_site_writes():
    """Refuse a state-changing request that a browser says another site started."""
    if request.method in SAFE_METHODS:
        return None
    if request.headers.get("Sec-Fetch-Site", "").lower() in FOREIGN_SITES:
        raise ForeignSite("Refused: this request was started by another site. "
                          "Open the dashboard itself and try again.")
    return None


def add_security_headers(response):
    """The security headers on every response, whatever produced it."""
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
    if request_is_https():
        response.headers.setdefault("Strict-Transport-Security", "max-age=31536000")
    if request.endpoint != "static" and "Cache-Control" not in response.headers:
        # Pages and JSON carry customer payloads: no shared cache or disk cache keeps them.
        response.headers["Cache-Control"] = "no-store"
    return response


# --- the login throttle -----------------------------------------------------------------------

@dataclass(frozen=True)
class ThrottleRefusal:
    """Why a login may not be tried now, and for how many seconds (``Retry-After``)."""

    seconds: int
    message: str


class LoginThrottle:
    """Failed logins within a sliding ``window`` of seconds, counted three ways:

    - one user name from one address: ``per_pair`` failures lock that pair until the oldest
      leaves the window (a guesser at one account from one place);
    - one address, whatever the names: ``per_address`` failures are free; after each further
      one the next attempt from it waits 1, 2, 4 ... seconds (at most ``max_delay``) from that
      failure. It is slowed, never locked: the colleagues behind the same proxy still get in;
    - one user name, from every address: the same growing delay after ``per_name`` failures
      (many addresses guessing one password).

    The failures are rows in the database, so every replica counts every failure (a guesser
    gains nothing by spreading attempts)."""

    def __init__(self, engine: Engine, per_pair: int = 5, per_address: int = 20, per_name: int = 20,
                 max_delay: float = 30.0, window: float = 300.0, clock: Callable[[], datetime] = utcnow):
        self.engine, self.per_pair, self.per_address, self.per_name = engine, per_pair, per_address, per_name
        self.max_delay, self.window, self.clock = max_delay, timedelta(seconds=window), clock

    @staticmethod
    def user_key(name: str) -> str:
        """User names are counted case-insensitively, so 'Admin' shares 'admin''s budget."""
        return "user:" + (name or "").strip().lower()[:200]

    @staticmethod
    def address_key(address: str) -> str:
        """An IPv6 client owns a whole /64, so it is counted as one address."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return "addr:" + address[:80]
        if ip.version == 6:
            if ip.ipv4_mapped:
                return "addr:" + str(ip.ipv4_mapped)
            return "addr:" + str(ipaddress.ip_network(f"{ip}/64", strict=False))
        return "addr:" + str(ip)

    @classmethod
    def pair_key(cls, name: str, address: str) -> str:
        """One user name from one address."""
        return "pair:" + cls.address_key(address)[5:] + "|" + cls.user_key(name)[5:]

    def check(self, name: str, address: str) -> ThrottleRefusal | None:
        """Why an attempt for this name from this address must wait, or None: it may go ahead."""
        now = self.clock()
        since = now - self.window
        with read_transaction(self.engine) as conn:
            # The per_pair-th newest failure of the pair: when it leaves the window, one more try.
            oldest = conn.execute(select(FAILURES.c.at).where(FAILURES.c.key == self.pair_key(name, address),
                                                              FAILURES.c.at > since)
                                  .order_by(FAILURES.c.at.desc()).offset(self.per_pair - 1).limit(1)).scalar()
            if oldest is not None:
                return ThrottleRefusal(_seconds(oldest + self.window - now),
                                       "Too many failed logins for this user name from this address.")
            for key, free, message in (
                    (self.address_key(address), self.per_address,
                     "Many failed logins came from this address, so each attempt from it waits a little longer."),
                    (self.user_key(name), self.per_name,
                     "Many failed logins were made for this user name, so each attempt waits a little longer.")):
                count, latest = conn.execute(select(func.count(), func.max(FAILURES.c.at))
                                             .where(FAILURES.c.key == key, FAILURES.c.at > since)).one()
                if count > free:
                    delay = timedelta(seconds=min(2.0 ** (count - free - 1), self.max_delay))
                    if latest + delay > now:
                        return ThrottleRefusal(_seconds(latest + delay - now), message)
        return None

    def failed(self, name: str, address: str) -> None:
        """Count a failed login against the pair, the address and the name; forget failures past
        the window."""
        now = self.clock()
        with write_transaction(self.engine) as conn:
            conn.execute(delete(FAILURES).where(FAILURES.c.at <= now - self.window))
            conn.execute(insert(FAILURES), [{"key": self.pair_key(name, address), "at": now},
                                            {"key": self.address_key(address), "at": now},
                                            {"key": self.user_key(name), "at": now}])

    def succeeded(self, name: str, address: str) -> None:
        """Forget the name's failures (not the address's: one good account must not reset it)."""
        with write_transaction(self.engine) as conn:
            conn.execute(delete(FAILURES).where(FAILURES.c.key.in_([self.pair_key(name, address),
                                                                    self.user_key(name)])))


def _seconds(wait: timedelta) -> int:
    """A wait as whole seconds for Retry-After, never 0 while there is one."""
    return max(1, math.ceil(wait.total_seconds()))


def login_throttle() -> LoginThrottle:
    """The app's login throttle."""
    return current_app.extensions["dlq_login_throttle"]
