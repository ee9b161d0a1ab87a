"""Settings from the environment (flags override), validated once at start."""

from __future__ import annotations

import logging
import os
import re
import secrets
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Mapping

from .files import FILE_MODE, private_file, private_folder
from .flags import truth
from .mailing import MailError, SmtpServer, check_address, mail_sender, parse_smtp_url
from .sign_in import (GroupRule, SettingError, button_words, check_single_sign_on, claim_path, issuer, oidc_roles,
                      oidc_scopes, session_hours)
from .redaction import scrub
from .sources import Source, SourcesError, load_sources, nats_url_problem
from .teams import Team, TeamsError, load_teams
from .times import LONGEST, format_duration, parse_duration


class ConfigError(ValueError):
    """A setting has a value it cannot take; the message is one line for the operator."""


_TOKEN_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _bool(name: str, raw: str) -> bool:
    # The words a request's flags accept (flags.py), with the operator's error instead of a 400.
    value = truth(raw)
    if value is None:
        raise ConfigError(f"{name}={raw!r} is not valid: use true or false")
    return value


def _positive_int(name: str, raw: str, allow_zero: bool = False, highest: int | None = None) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    lowest = 0 if allow_zero else 1
    if value < lowest or (highest is not None and value > highest):
        accepted = f"of {lowest} or more" if highest is None else f"from {lowest} to {highest}"
        raise ConfigError(f"{name}={raw!r} is not valid: use a whole number {accepted}")
    return value


def _retention(name: str, raw: str) -> int:
    seconds = parse_duration(raw)
    # At most 100 years: a longer one would put the cut-off before the year 1 (use 0: forever).
    if seconds is None or seconds > LONGEST:
        raise ConfigError(f"{name}={raw!r} is not valid: use a duration such as 30d, 12h or 90s, "
                          "or 0 to keep resolved entries forever")
    return seconds


def _database_timeout(name: str, raw: str) -> float:
    seconds = parse_duration(raw)
    if not seconds or seconds > 3600:
        raise ConfigError(f"{name}={raw!r} is not valid: use a duration from 1s to 1h, such as 5s")
    return float(seconds)


def _login_seconds(name: str, raw: str, highest: int) -> float:
    seconds = parse_duration(raw)
    if not seconds or seconds > highest:
        raise ConfigError(f"{name}={raw!r} is not valid: use a duration from 1s to {format_duration(highest)}, "
                          "such as 30s or 5m")
    return float(seconds)


def _stream_name(name: str, raw: str) -> str:
    value = raw.strip()
    if not value or not set(value) <= _TOKEN_CHARS:
        raise ConfigError(
            f"{name}={raw!r} is not valid: use a stream name of letters, digits, '-' and '_'"
        )
    return value


def _subjects(name: str, raw: str) -> tuple[str, ...]:
    subjects = tuple(s.strip() for s in raw.split(",") if s.strip())
    for subject in subjects:
        tokens = subject.split(".")
        if any(t == "" or " " in t for t in tokens) or ">" in tokens[:-1] or any(
            (">" in t or "*" in t) and len(t) > 1 for t in tokens
        ):
            raise ConfigError(
                f"{name}={raw!r} is not valid: use comma-separated NATS subjects such as dlq.>"
            )
    if not subjects:
        raise ConfigError(f"{name}={raw!r} is not valid: name at least one subject, e.g. dlq.>")
    return subjects


def _nats_urls(name: str, raw: str) -> tuple[str, ...]:
    urls = tuple(u.strip() for u in raw.split(",") if u.strip())
    for url in urls:
        problem = nats_url_problem(url)
        if problem:
            which = f"{scrub(url)!r}: " if len(urls) > 1 else ""
            raise ConfigError(f"{name}={scrub(raw)!r} is not valid: {which}{problem}; use comma-separated URLs "
                              "such as nats://host:4222")
    if not urls:
        raise ConfigError(f"{name}={scrub(raw)!r} is not valid: name at least one nats:// URL")
    return urls


def _http_urls(name: str, raw: str) -> tuple[str, ...]:
    from urllib.parse import urlsplit

    urls = tuple(u.strip() for u in raw.split(",") if u.strip())
    for url in urls:
        try:
            parts = urlsplit(url)
            valid = parts.scheme in ("http", "https") and bool(parts.hostname) and " " not in url
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            valid = False
        if not valid:
            raise ConfigError(f"{name}={scrub(raw)!r} is not valid: use comma-separated URLs such as "
                              "https://hooks.slack.com/services/...")
    if not urls:
        raise ConfigError(f"{name}={scrub(raw)!r} is not valid: name at least one http:// or https:// URL")
    return urls


def _public_url(name: str, raw: str) -> str:
    url = raw.strip()
    try:
        valid = len(_http_urls(name, url)) == 1 and "?" not in url and "#" not in url
    except ConfigError:
        valid = False
    if not valid:
        raise ConfigError(f"{name}={scrub(raw)!r} is not valid: use the dashboard's address as its users open it, "
                          "such as https://dlq.example.com")
    return url.rstrip("/")


def _trace_url(name: str, raw: str) -> str:
    """DLQ_TRACE_URL: an http(s) address with ``{trace_id}`` where the trace id goes, and no
    other braces (it is filled in by replacement, so a stray ``{x}`` would stay in every link)."""
    from urllib.parse import urlsplit

    url = raw.strip()
    rest = url.replace("{trace_id}", "")
    try:
        parts = urlsplit(url.replace("{trace_id}", "0" * 32))
        valid = (rest != url and "{" not in rest and "}" not in rest and parts.scheme in ("http", "https")
                 and bool(parts.hostname) and not any(c.isspace() or not c.isprintable() for c in url))
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        valid = False
    if not valid:
        raise ConfigError(f"{name}={scrub(raw)!r} is not valid: use an http:// or https:// address with "
                          "{trace_id} where the trace id goes, such as https://tempo.example/trace/{trace_id}")
    return url


def _existing_file(name: str, raw: str) -> str:
    if not Path(raw).is_file():
        raise ConfigError(f"{name}={raw!r} is not valid: use the path of a readable file")
    return raw


def _existing_dir(name: str, raw: str) -> str:
    if not Path(raw).is_dir():
        raise ConfigError(f"{name}={raw!r} is not valid: use the path of a folder of JSON Schema files")
    return raw


def _database_url(name: str, raw: str) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:  # SQLite and PostgreSQL (psycopg 3) only: "mysql://" was a traceback about its driver
        driver = make_url(raw).drivername
    except ArgumentError:
        driver = None
    if driver not in ("sqlite", "sqlite+pysqlite", "postgresql", "postgres", "postgresql+psycopg"):
        raise ConfigError(f"{name}={scrub(raw)!r} is not valid: use sqlite:///path (one machine) or "
                          "postgresql://user:password@host/database (several replicas)")
    return raw


def _header_name(name: str, raw: str) -> str:
    value = raw.strip()
    if not value or not all(c.isascii() and (c.isalnum() or c == "-") for c in value):
        raise ConfigError(f"{name}={raw!r} is not valid: use a header name such as X-Forwarded-User")
    return value


def _networks(name: str, raw: str) -> tuple[str, ...]:
    import ipaddress

    networks = tuple(n.strip() for n in raw.split(",") if n.strip())
    try:
        for network in networks:
            ipaddress.ip_network(network, strict=False)
    except ValueError:
        networks = ()
    if not networks:
        raise ConfigError(f"{name}={raw!r} is not valid: use comma-separated addresses or networks "
                          "such as 10.0.0.5,10.1.0.0/16")
    return networks


# RFC 7230's token characters: what a header name may hold.
_HEADER_CHARS = set("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_POINTER_ESCAPE = re.compile(r"~(?![01])")


def _mask(name: str, raw: str) -> tuple[str, ...]:
    """DLQ_MASK: JSON Pointers (they start with '/') and header names, comma-separated.

    Only the spelling is checked here; what a pointer means is masking.py's business.
    """
    items = tuple(dict.fromkeys(item.strip() for item in raw.split(",") if item.strip()))
    for item in items:
        if item.startswith("/"):
            if _POINTER_ESCAPE.search(item):
                raise ConfigError(f"{name}={raw!r} is not valid: {item!r} is not a JSON Pointer ('~' must be "
                                  "followed by 0 or 1); use pointers such as /customer/email and header "
                                  "names such as X-Card")
        elif not set(item) <= _HEADER_CHARS:
            raise ConfigError(f"{name}={raw!r} is not valid: {item!r} is neither a JSON Pointer (they start "
                              "with '/') nor a header name; use pointers such as /customer/email and header "
                              "names such as X-Card")
    return items


_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


def _list_fields(name: str, raw: str) -> tuple[tuple[str, str], ...]:
    """DLQ_LIST_FIELDS: the payload fields the list shows as columns and filters by, each
    ``Label=/json/pointer`` or ``/json/pointer`` (labelled by its last token), comma-separated."""
    from .masking import parse_pointer  # both are base modules; masking needs nothing of this one

    found: dict[str, str] = {}
    for item in (i.strip() for i in raw.split(",")):
        if not item:
            continue
        label, equals, pointer = ("", "", item) if item.startswith("/") else item.partition("=")
        label, pointer = label.strip(), pointer.strip()
        if not item.startswith("/") and not (equals and pointer):  # "order_id", "order_id=": the item quoted
            lacks = "no JSON Pointer after its '='" if equals else "no '=' and is not a JSON Pointer (they start with '/')"
            raise ConfigError(f"{name}={raw!r} is not valid: the item {item!r} has {lacks}; write Label=/pointer or /pointer")
        try:
            tokens = parse_pointer(pointer)
        except ValueError:
            tokens = None
        if not tokens or any('"' in t or "\\" in t or t == "*" for t in tokens):
            raise ConfigError(f"{name}={raw!r} is not valid: {pointer!r} is not a JSON Pointer to a field (use "
                              "pointers such as /customer/id, with no '*', '\"' or '\\' in a token), written "
                              "Label=/pointer or /pointer")
        label = label or tokens[-1]
        if not _LABEL.match(label):
            raise ConfigError(f"{name}={raw!r} is not valid: the label {label!r} must be 1 to 40 letters, digits, "
                              "'-' or '_' (write Label=/pointer to name the column)")
        if label in found:
            raise ConfigError(f"{name}={raw!r} is not valid: the label {label!r} is used twice")
        found[label] = pointer
    return tuple(found.items())


def _refusing(parse, error: type[Exception], hint: str = ""):
    """A parser of one value (teams.py, mailing.py) whose ``error`` is a one-line ConfigError
    naming the variable and its value (without a URL's password)."""
    def parse_setting(name: str, raw: str):
        try:
            return parse(raw)
        except error as exc:
            raise ConfigError(f"{name}={scrub(raw)!r} is not valid: {exc}{hint}") from None
    return parse_setting


def _sign_in(parse):
    """A parser of sign_in.py, its one-line SettingError as a ConfigError."""
    def parse_setting(name: str, raw: str):
        try:
            return parse(name, raw)
        except SettingError as exc:
            raise ConfigError(str(exc)) from None
    return parse_setting


@dataclass(frozen=True)
class Settings:
    """Everything the dashboard is configured with (SPEC section 3)."""

    nats_urls: tuple[str, ...] = ()
    nats_creds: str | None = None
    nats_user: str | None = None
    nats_password: str | None = None
    nats_token: str | None = None
    nats_tls_ca: str | None = None
    database_url: str = "sqlite:///instance/dlq.sqlite3"
    dlq_stream: str = "DLQ"
    dlq_subjects: tuple[str, ...] = ("dlq.>",)
    capture_advisories: bool = True
    schemas_dir: str | None = None
    delete_on_close: bool = False
    republish_rate: int = 200
    secret_key: str | None = None
    # Replicas of the streams the dashboard creates; JetStream allows at most 5.
    stream_replicas: int = 1
    instance_path: str = "instance"
    advisory_stream: str = "DLQ_ADVISORIES"
    # How long the bridge waits for its first connection before it reports the outage and
    # keeps retrying in the background (nats-py alone would block for minutes).
    connect_timeout: float = 5.0
    request_timeout: float = 5.0
    # Liveness: a ping every probe_interval; no answer for nats_answer_limit seconds and NATS is
    # declared unreachable (a frozen server keeps its TCP connection, so nats-py would not notice
    # for minutes). A request never waits on NATS longer than the two together.
    probe_interval: float = 0.25
    nats_answer_limit: float = 0.75
    # The database (docs/deploy.md, "Timeouts"): how long a connection may take to open, and how
    # long one statement of a web request may run (PostgreSQL's statement_timeout; SQLite waits
    # that long for the write lock). The mirror, jobs, purges and migrations are not cut short.
    database_connect_timeout: float = 5.0
    database_statement_timeout: float = 5.0
    # The mirror "lags" (pages say so) once a message NATS holds has waited this long unmirrored.
    mirror_stale_after: float = 10.0
    # Single sign-on: a reverse proxy's user header, believed only from these addresses.
    trusted_header: str | None = None
    trusted_proxies: tuple[str, ...] = ()
    # Alerts (section 9): where they go, what signs them, what makes a spike, and the address
    # their links start with (unset: links are paths, /groups/<id>).
    webhook_urls: tuple[str, ...] = ()
    webhook_secret: str | None = None
    alert_threshold: int = 100
    public_url: str | None = None
    # How often the sender looks for due alerts, how long it waits for a webhook's answer, and
    # the first retry's delay (doubling to 10 minutes).
    alert_poll: float = 1.0
    alert_timeout: float = 5.0
    alert_first_retry: float = 5.0
    # DLQ_TEAMS: the teams, in the file's order (a new group gets the first covering its subject).
    teams: tuple[Team, ...] = ()
    # DLQ_SMTP_URL and DLQ_MAIL_FROM: where alert e-mails go, and whom they come from.
    smtp: SmtpServer | None = None
    mail_from: str | None = None
    # Resolved entries older than this are purged, in seconds (DLQ_RETENTION; 0: kept forever).
    retention: int = 30 * 86400
    # How often the replica that mirrors runs the purge (and once when it takes the mirror).
    purge_interval: float = 3600.0
    # How often that replica opens again the ignored groups whose time has come (SPEC section 11).
    reopen_interval: float = 5.0
    # DLQ_MASK: JSON Pointers into payloads and header names, hidden from viewers.
    mask: tuple[str, ...] = ()
    # DLQ_LIST_FIELDS: (label, JSON Pointer) of each payload field the list shows and filters by.
    list_fields: tuple[tuple[str, str], ...] = ()
    # DLQ_TRACE_URL: where a trace opens, {trace_id} filled in (an entry's traceparent header).
    trace_url: str | None = None
    # The login throttle (docs/security.md): failures of one name from one address before that
    # pair waits for the window; free failures of one address, and of one name, before each
    # attempt is slowed (1, 2, 4 ... seconds, at most login_slowdown_max); the window in seconds.
    login_failures_per_name_and_address: int = 5
    login_failures_per_address: int = 20
    login_failures_per_name: int = 20
    login_slowdown_max: float = 30.0
    login_failure_window: float = 300.0
    # Single sign-on with OpenID Connect (SPEC section 10, docs/security.md): the issuer (unset:
    # none), the client, the scopes asked for, the claim holding groups (a dotted path), the
    # rules giving groups their grants (none: nobody may sign in) and the button's words.
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    oidc_scopes: tuple[str, ...] = ("openid", "email", "profile")
    oidc_groups_claim: str = "groups"
    oidc_roles: tuple[GroupRule, ...] = ()
    oidc_name: str = "single sign-on"
    # DLQ_LOCAL_LOGIN=false: no password form and no password sign-in (tokens still work).
    local_login: bool = True
    # Every session (password or single sign-on) ends this many hours after its sign-in.
    session_hours: float = 12.0
    # DLQ_CONFIG's [[sources]] (SPEC section 12); none: one source made of the fields above (sources.py).
    sources: tuple[Source, ...] = ()

    @property
    def single_sign_on(self) -> bool:
        """True when DLQ_OIDC_ISSUER is set."""
        return bool(self.oidc_issuer)

    @property
    def bundled_nats(self) -> bool:
        """True when no NATS_URL (nor DLQ_CONFIG) is set and the dashboard runs its own nats-server."""
        return not self.nats_urls and not self.sources

    def with_overrides(self, **changes) -> "Settings":
        """A copy with the given fields replaced (flags override the environment)."""
        known = {f.name for f in fields(self)}
        return replace(self, **{k: v for k, v in changes.items() if k in known and v is not None})


# variable -> (field, parser)
_PARSERS = {
    "NATS_URL": ("nats_urls", _nats_urls),
    "NATS_CREDS": ("nats_creds", _existing_file),
    "NATS_USER": ("nats_user", lambda n, r: r),
    "NATS_PASSWORD": ("nats_password", lambda n, r: r),
    "NATS_TOKEN": ("nats_token", lambda n, r: r),
    "NATS_TLS_CA": ("nats_tls_ca", _existing_file),
    "DATABASE_URL": ("database_url", _database_url),
    "DLQ_DB_CONNECT_TIMEOUT": ("database_connect_timeout", _database_timeout),
    "DLQ_DB_STATEMENT_TIMEOUT": ("database_statement_timeout", _database_timeout),
    "DLQ_STREAM": ("dlq_stream", _stream_name),
    "DLQ_SUBJECTS": ("dlq_subjects", _subjects),
    "DLQ_CAPTURE_ADVISORIES": ("capture_advisories", _bool),
    "DLQ_SCHEMAS": ("schemas_dir", _existing_dir),
    "DLQ_DELETE_ON_CLOSE": ("delete_on_close", _bool),
    "DLQ_REPUBLISH_RATE": ("republish_rate", lambda n, r: _positive_int(n, r, allow_zero=True)),
    "SECRET_KEY": ("secret_key", lambda n, r: r),
    "DLQ_REPLICAS": ("stream_replicas", lambda n, r: _positive_int(n, r, highest=5)),
    "DLQ_TRUSTED_HEADER": ("trusted_header", _header_name),
    "DLQ_TRUSTED_PROXIES": ("trusted_proxies", _networks),
    "DLQ_WEBHOOK_URL": ("webhook_urls", _http_urls),
    "DLQ_WEBHOOK_SECRET": ("webhook_secret", lambda n, r: r),
    "DLQ_ALERT_THRESHOLD": ("alert_threshold", _positive_int),
    "DLQ_PUBLIC_URL": ("public_url", _public_url),
    "DLQ_TEAMS": ("teams", _refusing(load_teams, TeamsError)),
    "DLQ_CONFIG": ("sources", _refusing(load_sources, SourcesError)),
    "DLQ_SMTP_URL": ("smtp", _refusing(parse_smtp_url, MailError, "; use smtp://user:pass@host:587?starttls=true "
                                                                  "or smtps://user:pass@host:465")),
    "DLQ_MAIL_FROM": ("mail_from", _refusing(check_address, MailError,
                                             "; use the address alert e-mails come from")),
    "DLQ_RETENTION": ("retention", _retention),
    "DLQ_MASK": ("mask", _mask),
    "DLQ_LIST_FIELDS": ("list_fields", _list_fields),
    "DLQ_TRACE_URL": ("trace_url", _trace_url),
    "DLQ_LOGIN_FAILURES_PER_NAME_AND_ADDRESS": ("login_failures_per_name_and_address", _positive_int),
    "DLQ_LOGIN_FAILURES_PER_ADDRESS": ("login_failures_per_address", _positive_int),
    "DLQ_LOGIN_FAILURES_PER_NAME": ("login_failures_per_name", _positive_int),
    "DLQ_LOGIN_SLOWDOWN_MAX": ("login_slowdown_max", lambda n, r: _login_seconds(n, r, 3600)),
    "DLQ_LOGIN_FAILURE_WINDOW": ("login_failure_window", lambda n, r: _login_seconds(n, r, 86400)),
    "DLQ_OIDC_ISSUER": ("oidc_issuer", _sign_in(issuer)),
    "DLQ_OIDC_CLIENT_ID": ("oidc_client_id", lambda n, r: r.strip()),
    "DLQ_OIDC_CLIENT_SECRET": ("oidc_client_secret", lambda n, r: r),
    "DLQ_OIDC_SCOPES": ("oidc_scopes", _sign_in(oidc_scopes)),
    "DLQ_OIDC_GROUPS_CLAIM": ("oidc_groups_claim", _sign_in(claim_path)),
    "DLQ_OIDC_ROLES": ("oidc_roles", _sign_in(oidc_roles)),
    "DLQ_OIDC_NAME": ("oidc_name", _sign_in(button_words)),
    "DLQ_LOCAL_LOGIN": ("local_login", _bool),
    "DLQ_SESSION_HOURS": ("session_hours", _sign_in(session_hours)),
}


#: DLQ_LOG_LEVEL's words (read before the settings, so that loading them can log).
LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def log_level(environ: Mapping[str, str] | None = None) -> int:
    """DLQ_LOG_LEVEL as a logging level (info when unset); ConfigError for another word."""
    raw = (os.environ if environ is None else environ).get("DLQ_LOG_LEVEL", "").strip().lower() or "info"
    if raw not in LOG_LEVELS:
        raise ConfigError(f"DLQ_LOG_LEVEL={raw!r} is not one of {', '.join(LOG_LEVELS)}")
    return LOG_LEVELS[raw]


def load_settings(environ: Mapping[str, str] | None = None, **overrides) -> Settings:
    """Read and validate the settings; raise ConfigError naming the first bad variable."""
    environ = os.environ if environ is None else environ
    values = {}
    for variable, (name, parse) in _PARSERS.items():
        raw = environ.get(variable)
        if raw is None or raw == "":
            continue
        values[name] = parse(variable, raw)
    settings = Settings(**values).with_overrides(**overrides)
    if settings.dlq_stream == settings.advisory_stream:
        raise ConfigError(f"DLQ_STREAM={settings.dlq_stream!r} is not valid: that name is taken by the advisory stream")
    if settings.trusted_header and not settings.trusted_proxies:
        raise ConfigError(f"DLQ_TRUSTED_HEADER={settings.trusted_header!r} is not valid without "
                          "DLQ_TRUSTED_PROXIES: list the proxy addresses allowed to send it")
    try:
        settings = replace(settings, mail_from=mail_sender(settings.teams, settings.smtp, settings.mail_from,
                                                           environ.get("DLQ_TEAMS")))
        check_single_sign_on(settings)
    except (MailError, SettingError) as exc:
        raise ConfigError(str(exc)) from None
    return settings


def ensure_secret_key(settings: Settings) -> Settings:
    """Return settings with a secret key, generating one into the instance folder once."""
    if settings.secret_key:
        return settings
    path = private_folder(settings.instance_path) / "secret_key"
    if not path.exists():
        # Written with 0600 before the key goes in, so it is never readable by others.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    private_file(path)  # a key written by an earlier release may be readable by all
    return replace(settings, secret_key=path.read_text().strip())
