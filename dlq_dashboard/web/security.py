"""Web security around every request: the hosts answered, response headers, Secure cookies over
HTTPS, refusing cross-site writes, CSRF refusals as sentences, the login throttle and the trusted
proxy."""

from __future__ import annotations

import ipaddress
import math
from datetime import datetime, timedelta
from typing import Callable
from urllib.parse import urlsplit

from flask import Flask, current_app, has_request_context, request
from flask.sessions import SecureCookieSessionInterface
from flask_wtf.csrf import CSRFError
from werkzeug.sansio.utils import host_is_trusted
from sqlalchemy import Engine, delete, insert, select

from ..db.engine import read_transaction, write_transaction
from ..db.models import LoginFailure
from ..runtime import runtime_of
from ..times import utcnow
from . import current_runtime
from .responses import refusal

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
ANY_HOST_PATHS = frozenset({"/healthz", "/metrics"})

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# Sec-Fetch-Site values of a request another site started. "same-site" is a sibling
# subdomain, a different origin all the same.
FOREIGN_SITES = frozenset({"cross-site", "same-site"})
# Idle sessions end after this long (each request renews the cookie).
SESSION_IDLE = timedelta(hours=12)


def init_app(app: Flask) -> None:
    """Install the trusted hosts, the headers, the cookie policy, the cross-site refusal and the
    login throttle."""
    app.extensions["dlq_trusted_hosts"] = trusted_hosts(runtime_of(app).settings.public_url)
    app.before_request(refuse_untrusted_host)
    app.session_interface = HttpsAwareSessionInterface()
    if app.config.get("PERMANENT_SESSION_LIFETIME") == timedelta(days=31):  # Flask's default
        app.config["PERMANENT_SESSION_LIFETIME"] = SESSION_IDLE
    app.extensions["dlq_login_throttle"] = LoginThrottle(
        runtime_of(app).engine,
        per_user=app.config.get("LOGIN_FAILURES_PER_USER", 5),
        per_address=app.config.get("LOGIN_FAILURES_PER_ADDRESS", 20),
        window=app.config.get("LOGIN_FAILURE_WINDOW", 300.0),
    )
    app.before_request(refuse_cross_site_writes)
    app.after_request(add_security_headers)
    app.register_error_handler(CSRFError, csrf_refused)


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
    if not hosts or request.path in ANY_HOST_PATHS or host_is_trusted(request.host, hosts):
        return None
    return refusal(f"Refused: this dashboard answers at {current_runtime().settings.public_url} "
                   "(DLQ_PUBLIC_URL), not at the host this request named.", 400, "Refused")


# --- proxies and HTTPS ------------------------------------------------------------------------

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


class HttpsAwareSessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, with the Secure flag whenever the request came over HTTPS."""

    def get_cookie_secure(self, app: Flask) -> bool:
        if super().get_cookie_secure(app):
            return True
        return has_request_context() and request_is_https()


# --- every request ----------------------------------------------------------------------------

def refuse_cross_site_writes():
    """Refuse a state-changing request that a browser says another site started."""
    if request.method in SAFE_METHODS:
        return None
    if request.headers.get("Sec-Fetch-Site", "").lower() in FOREIGN_SITES:
        return refusal("Refused: this request was started by another site. "
                       "Open the dashboard itself and try again.", 403, "Refused")
    return None


def csrf_refused(exc: CSRFError):
    """A missing or wrong CSRF token, as a sentence (JSON for the API)."""
    return refusal(f"Refused: {exc.description} Reload the page and try again.", 400, "Refused")


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

class LoginThrottle:
    """At most ``per_user`` failed logins per user name and ``per_address`` per client address
    within a sliding ``window`` of seconds. The failures are rows in the database, so every
    replica counts every failure (a guesser gains nothing by spreading attempts)."""

    def __init__(self, engine: Engine, per_user: int = 5, per_address: int = 20, window: float = 300.0,
                 clock: Callable[[], datetime] = utcnow):
        self.engine, self.per_user, self.per_address = engine, per_user, per_address
        self.window, self.clock = timedelta(seconds=window), clock

    @staticmethod
    def user_key(name: str) -> str:
        """User names are counted case-insensitively, so 'Admin' shares 'admin''s budget."""
        return "user:" + (name or "").strip().lower()[:250]

    @staticmethod
    def address_key(address: str) -> str:
        """An IPv6 client owns a whole /64, so it is counted as one address."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return "addr:" + address[:250]
        if ip.version == 6:
            if ip.ipv4_mapped:
                return "addr:" + str(ip.ipv4_mapped)
            return "addr:" + str(ipaddress.ip_network(f"{ip}/64", strict=False))
        return "addr:" + str(ip)

    def retry_after(self, name: str, address: str) -> int:
        """Seconds until another attempt for this name from this address is allowed (0: now)."""
        now = self.clock()
        wait = timedelta(0)
        with read_transaction(self.engine) as conn:
            for key, limit in ((self.user_key(name), self.per_user), (self.address_key(address), self.per_address)):
                # The limit-th newest failure in the window: when it leaves, one more try is allowed.
                oldest = conn.execute(select(FAILURES.c.at).where(FAILURES.c.key == key, FAILURES.c.at > now - self.window)
                                      .order_by(FAILURES.c.at.desc()).offset(limit - 1).limit(1)).scalar()
                if oldest is not None:
                    wait = max(wait, oldest + self.window - now)
        return math.ceil(wait.total_seconds()) if wait > timedelta(0) else 0

    def failed(self, name: str, address: str) -> None:
        """Count a failed login against the name and the address; forget failures past the window."""
        now = self.clock()
        with write_transaction(self.engine) as conn:
            conn.execute(delete(FAILURES).where(FAILURES.c.at <= now - self.window))
            conn.execute(insert(FAILURES), [{"key": self.user_key(name), "at": now},
                                            {"key": self.address_key(address), "at": now}])

    def succeeded(self, name: str) -> None:
        """Forget the name's failures (not the address's: one good account must not reset it)."""
        with write_transaction(self.engine) as conn:
            conn.execute(delete(FAILURES).where(FAILURES.c.key == self.user_key(name)))


def login_throttle() -> LoginThrottle:
    """The app's login throttle."""
    return current_app.extensions["dlq_login_throttle"]
