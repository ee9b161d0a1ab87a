"""Web security around every request: response headers, Secure cookies over HTTPS, refusing
cross-site writes, CSRF refusals as sentences, the login throttle and the trusted proxy."""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import OrderedDict, deque
from datetime import timedelta
from typing import Callable

from flask import Flask, current_app, has_request_context, request
from flask.sessions import SecureCookieSessionInterface
from flask_wtf.csrf import CSRFError

from . import current_runtime
from .responses import refusal

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

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# Sec-Fetch-Site values of a request another site started. "same-site" is a sibling
# subdomain, a different origin all the same.
FOREIGN_SITES = frozenset({"cross-site", "same-site"})
# Idle sessions end after this long (each request renews the cookie).
SESSION_IDLE = timedelta(hours=12)


def init_app(app: Flask) -> None:
    """Install the headers, the cookie policy, the cross-site refusal and the login throttle."""
    app.session_interface = HttpsAwareSessionInterface()
    if app.config.get("PERMANENT_SESSION_LIFETIME") == timedelta(days=31):  # Flask's default
        app.config["PERMANENT_SESSION_LIFETIME"] = SESSION_IDLE
    app.extensions["dlq_login_throttle"] = LoginThrottle(
        per_user=app.config.get("LOGIN_FAILURES_PER_USER", 5),
        per_address=app.config.get("LOGIN_FAILURES_PER_ADDRESS", 20),
        window=app.config.get("LOGIN_FAILURE_WINDOW", 300.0),
    )
    app.before_request(refuse_cross_site_writes)
    app.after_request(add_security_headers)
    app.register_error_handler(CSRFError, csrf_refused)


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
    within a sliding ``window`` of seconds. In-process: each server process counts its own."""

    def __init__(self, per_user: int = 5, per_address: int = 20, window: float = 300.0,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = 10_000):
        self.per_user, self.per_address, self.window = per_user, per_address, window
        self.clock, self.max_keys = clock, max_keys
        self._failures: OrderedDict[str, deque] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def user_key(name: str) -> str:
        """User names are counted case-insensitively, so 'Admin' shares 'admin''s budget."""
        return "user:" + (name or "").strip().lower()

    @staticmethod
    def address_key(address: str) -> str:
        """An IPv6 client owns a whole /64, so it is counted as one address."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return "addr:" + address
        if ip.version == 6:
            if ip.ipv4_mapped:
                return "addr:" + str(ip.ipv4_mapped)
            return "addr:" + str(ipaddress.ip_network(f"{ip}/64", strict=False))
        return "addr:" + str(ip)

    def _recent(self, key: str, now: float) -> deque:
        failures = self._failures.get(key)
        if failures is None:
            return deque()
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        return failures

    def retry_after(self, name: str, address: str) -> int:
        """Seconds until another attempt for this name from this address is allowed (0: now)."""
        now = self.clock()
        wait = 0.0
        with self._lock:
            for key, limit in ((self.user_key(name), self.per_user),
                               (self.address_key(address), self.per_address)):
                failures = self._recent(key, now)
                if len(failures) >= limit:
                    wait = max(wait, failures[len(failures) - limit] + self.window - now)
        return math.ceil(wait) if wait > 0 else 0

    def failed(self, name: str, address: str) -> None:
        """Count a failed login against the name and the address."""
        now = self.clock()
        with self._lock:
            for key in (self.user_key(name), self.address_key(address)):
                failures = self._recent(key, now)
                failures.append(now)
                self._failures[key] = failures
                self._failures.move_to_end(key)
            while len(self._failures) > self.max_keys:
                self._failures.popitem(last=False)  # the least recently failing key

    def succeeded(self, name: str) -> None:
        """Forget the name's failures (not the address's: one good account must not reset it)."""
        with self._lock:
            self._failures.pop(self.user_key(name), None)


def login_throttle() -> LoginThrottle:
    """The app's login throttle."""
    return current_app.extensions["dlq_login_throttle"]
