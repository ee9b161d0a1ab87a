"""Sources (SPEC section 12): the dead-letter streams one dashboard mirrors, each over its own
NATS connection, so that a source can be another stream, another account or another cluster.

``DLQ_CONFIG`` names a TOML file with one ``[[sources]]`` table a source::

    [[sources]]
    name = "orders"
    nats_url = "nats://nats-a:4222"          # or a list of URLs (a cluster)
    creds = "/etc/dlq/orders.creds"           # or user/password, or token
    tls_ca = "/etc/dlq/ca.pem"
    stream = "DLQ"
    subjects = ["dlq.orders.>"]
    capture_advisories = true
    advisory_stream = "DLQ_ADVISORIES"
    renamed_from = "orders-old"               # or a list: the names it had before (its positions)

Without the file there is one source, ``default``, made of NATS_URL, DLQ_STREAM and the rest of
section 3 (:func:`sources_of`). Pure parsing and the settings one source's parts run with; the
runtime starts a bridge and a mirror per source.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from .files import read_toml
from .redaction import scrub
from .scopes import DEFAULT_SOURCE

# A source's name is in scopes (``name:pattern``), URLs and lease names: short, no ':'.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
_STREAM = re.compile(r"[A-Za-z0-9_-]{1,255}")
_URL_SCHEMES = ("nats", "tls", "ws", "wss")
_KEYS = {"name", "nats_url", "creds", "user", "password", "token", "tls_ca", "stream", "subjects",
         "capture_advisories", "advisory_stream", "renamed_from"}
_SHAPE = "use a TOML file of [[sources]] tables, each with name, nats_url and stream"


class SourcesError(ValueError):
    """The sources file cannot be used; the message names the source and the key, in one line."""


@dataclass(frozen=True)
class Source:
    """One dead-letter stream and the NATS connection it is read and republished through."""

    name: str = DEFAULT_SOURCE
    nats_urls: tuple[str, ...] = ()
    creds: str | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None
    tls_ca: str | None = None
    stream: str = "DLQ"
    subjects: tuple[str, ...] = ("dlq.>",)
    capture_advisories: bool = True
    advisory_stream: str = "DLQ_ADVISORIES"
    # The names this source had before: it goes on where they stopped (ingest/takeover.py), and
    # their entries are republished through its connection.
    renamed_from: tuple[str, ...] = ()

    def describe(self) -> str:
        """Where the source is, for logs and pages: its stream and servers, without passwords."""
        return f"{self.stream} on {', '.join(scrub(u) for u in self.nats_urls) or 'the bundled nats-server'}"


def default_source(settings: Any) -> Source:
    """The one source of a dashboard without DLQ_CONFIG: section 3's NATS settings."""
    return Source(name=DEFAULT_SOURCE, nats_urls=tuple(settings.nats_urls), creds=settings.nats_creds,
                  user=settings.nats_user, password=settings.nats_password, token=settings.nats_token,
                  tls_ca=settings.nats_tls_ca, stream=settings.dlq_stream, subjects=tuple(settings.dlq_subjects),
                  capture_advisories=settings.capture_advisories, advisory_stream=settings.advisory_stream)


def sources_of(settings: Any) -> tuple[Source, ...]:
    """The sources the dashboard mirrors, in the file's order (the first is the main one: the CLI
    and the bundled server use it); without DLQ_CONFIG, the default source alone."""
    return tuple(settings.sources) or (default_source(settings),)


#: Section 3's variables that a DLQ_CONFIG source's own keys replace, with their Settings field.
REPLACED_VARIABLES = {"NATS_URL": "nats_urls", "NATS_CREDS": "nats_creds", "NATS_USER": "nats_user",
                      "NATS_PASSWORD": "nats_password", "NATS_TOKEN": "nats_token", "NATS_TLS_CA": "nats_tls_ca",
                      "DLQ_STREAM": "dlq_stream", "DLQ_SUBJECTS": "dlq_subjects",
                      "DLQ_CAPTURE_ADVISORIES": "capture_advisories"}


def unused_variables(settings: Any, defaults: Any) -> list[str]:
    """The variables of REPLACED_VARIABLES given a value beside DLQ_CONFIG (their field differs from
    ``defaults``, a Settings()): the file's sources win, so these are not used (the start warns)."""
    if not settings.sources:
        return []
    return [variable for variable, name in REPLACED_VARIABLES.items()
            if getattr(settings, name) != getattr(defaults, name)]


def source_settings(settings: Any, source: Source) -> Any:
    """``settings`` with section 3's NATS fields taken from ``source``: what one source's bridge,
    stream setup and mirror run with."""
    return replace(settings, nats_urls=source.nats_urls, nats_creds=source.creds, nats_user=source.user,
                   nats_password=source.password, nats_token=source.token, nats_tls_ca=source.tls_ca,
                   dlq_stream=source.stream, dlq_subjects=source.subjects,
                   capture_advisories=source.capture_advisories, advisory_stream=source.advisory_stream,
                   sources=())


def load_sources(path: str) -> tuple[Source, ...]:
    """The sources of the TOML file at ``path``; SourcesError naming the source and the key."""
    data = read_toml(path, SourcesError, _SHAPE)
    return parse_sources(data, Path(path).parent)


def parse_sources(data: dict, folder: Path = Path(".")) -> tuple[Source, ...]:
    """The sources of a parsed file (relative file paths from ``folder``); SourcesError naming
    the source and the key that is wrong."""
    unknown = [key for key in data if key != "sources"]
    if unknown:
        raise SourcesError(f"the key {unknown[0]!r} is not known; {_SHAPE}")
    tables = data.get("sources")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise SourcesError(f"it has no [[sources]] table; {_SHAPE}")
    sources: list[Source] = []
    for index, table in enumerate(tables, start=1):
        source = _source(table, index, folder)
        for other_index, other in enumerate(sources, start=1):
            if other.name == source.name:
                raise SourcesError(f"source {source.name!r}, key 'name': the name is used twice "
                                   f"(the [[sources]] tables {other_index} and {index})")
        for other in sources:
            # The same server and the same user: the same account. Another user (creds, user or
            # token) may be another account, whose stream of the same name is another stream.
            if set(other.nats_urls) & set(source.nats_urls) and _identity(other) == _identity(source):
                if other.stream == source.stream:
                    raise SourcesError(f"source {source.name!r}, key 'stream': source {other.name!r} already "
                                       f"mirrors stream {source.stream!r} on the same server")
        sources.append(source)
    _check_renames(sources)
    return tuple(sources)


def _check_renames(sources: list[Source]) -> None:
    """An old name of renamed_from is no configured source's and is claimed by one source alone:
    the positions it left, and its entries' republishes, have one heir."""
    names = {source.name for source in sources}
    claimed: dict[str, str] = {}
    for source in sources:
        for old in source.renamed_from:
            if old in names:
                raise SourcesError(f"source {source.name!r}, key 'renamed_from': {old!r} is a configured source; "
                                   "name a source no longer in this file")
            if old in claimed:
                raise SourcesError(f"source {source.name!r}, key 'renamed_from': source {claimed[old]!r} already "
                                   f"names {old!r}; an old name goes to one source")
            claimed[old] = source.name


def renamed_sources(sources: Iterable[Source]) -> dict[str, str]:
    """Each old name of a renamed_from, with the source that now has it."""
    return {old: source.name for source in sources for old in source.renamed_from}


def acting_source(settings: Any, name: str) -> str:
    """The source an entry of source ``name`` acts through (its republishes, its delete on close):
    the source whose renamed_from gives ``name``, or ``name`` itself."""
    return renamed_sources(sources_of(settings)).get(name, name)


def _identity(source: Source) -> tuple:
    """Who a source signs in as: two sources of one server and one identity share an account."""
    return source.creds, source.user, source.token


def _source(table: dict, index: int, folder: Path) -> Source:
    name = table.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SourcesError(f"source {index}, key 'name': use 1 to 40 letters, digits, '_' or '-'")
    where = f"source {name!r}"
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise SourcesError(f"{where}, key {unknown[0]!r}: not a key of a source (known: {', '.join(sorted(_KEYS))})")
    values: dict[str, Any] = {"name": name, "nats_urls": _urls(where, table.get("nats_url"))}
    for key in ("creds", "tls_ca"):
        if key in table:
            values[key] = _file(where, key, table[key], folder)
    for key in ("user", "password", "token"):
        if key in table:
            if not isinstance(table[key], str) or not table[key]:
                raise SourcesError(f"{where}, key {key!r}: use a string")
            values[key] = table[key]
    if "token" in values and ("user" in values or "password" in values):
        raise SourcesError(f"{where}, key 'token': use a token or a user and password, not both")
    if ("user" in values) != ("password" in values):
        raise SourcesError(f"{where}, key {'password' if 'user' in values else 'user'!r}: "
                           "a user needs a password and a password a user")
    for key in ("stream", "advisory_stream"):
        if key in table:
            if not isinstance(table[key], str) or not _STREAM.fullmatch(table[key]):
                raise SourcesError(f"{where}, key {key!r}: use a stream name of letters, digits, '-' and '_'")
            values[key] = table[key]
    if "stream" not in values:
        raise SourcesError(f"{where}, key 'stream': name the dead-letter stream it mirrors")
    if "subjects" in table:
        subjects = table["subjects"]
        if isinstance(subjects, str):
            subjects = [subjects]
        if (not isinstance(subjects, list) or not subjects
                or not all(isinstance(s, str) and s.strip() and " " not in s.strip() for s in subjects)):
            raise SourcesError(f"{where}, key 'subjects': use a list of NATS subjects such as [\"dlq.>\"]")
        values["subjects"] = tuple(s.strip() for s in subjects)
    if "capture_advisories" in table:
        if not isinstance(table["capture_advisories"], bool):
            raise SourcesError(f"{where}, key 'capture_advisories': use true or false")
        values["capture_advisories"] = table["capture_advisories"]
    if "renamed_from" in table:
        old = table["renamed_from"]
        old = [old] if isinstance(old, str) else old
        if (not isinstance(old, list) or not old
                or not all(isinstance(n, str) and _NAME.fullmatch(n) for n in old)):
            raise SourcesError(f"{where}, key 'renamed_from': use the source's old name or a list of them, "
                               "each 1 to 40 letters, digits, '_' or '-'")
        if len(set(old)) != len(old):
            raise SourcesError(f"{where}, key 'renamed_from': a name is given twice")
        values["renamed_from"] = tuple(old)
    source = Source(**values)
    if source.stream == source.advisory_stream:
        raise SourcesError(f"{where}, key 'stream': {source.stream!r} is taken by the advisory stream")
    return source


def nats_url_problem(url: str) -> str | None:
    """What is wrong with one NATS server URL, or None: its scheme, a host, a port within range
    ("nats://host:99999" and "nats://:4222" were taken, to fail at every connection attempt)."""
    from urllib.parse import urlsplit

    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in _URL_SCHEMES:
        return "it is not a nats://, tls://, ws:// or wss:// URL"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "its port is not a number from 1 to 65535"
    if not parts.hostname:
        return "it names no host"
    if port == 0:
        return "its port is not a number from 1 to 65535"
    return None


def _urls(where: str, raw: Any) -> tuple[str, ...]:
    urls = [raw] if isinstance(raw, str) else raw
    if not isinstance(urls, list) or not urls:
        raise SourcesError(f"{where}, key 'nats_url': name the NATS server, such as \"nats://host:4222\"")
    found = []
    for url in urls:
        if not isinstance(url, str):
            raise SourcesError(f"{where}, key 'nats_url': {scrub(str(url))!r} is not a nats:// URL")
        for one in (u.strip() for u in url.split(",") if u.strip()):
            problem = nats_url_problem(one)
            if problem:
                raise SourcesError(f"{where}, key 'nats_url': {scrub(one)!r} is not valid: {problem}")
            found.append(one)
    if not found:
        raise SourcesError(f"{where}, key 'nats_url': name the NATS server, such as \"nats://host:4222\"")
    return tuple(found)


def _file(where: str, key: str, raw: Any, folder: Path) -> str:
    if not isinstance(raw, str) or not raw:
        raise SourcesError(f"{where}, key {key!r}: use the path of a file")
    path = Path(raw) if Path(raw).is_absolute() else folder / raw
    shown = repr(raw) if path == Path(raw) else f"{raw!r} ({path})"  # a relative path: where it was looked for
    if not path.is_file():
        raise SourcesError(f"{where}, key {key!r}: {shown} is not a file")
    if not os.access(path, os.R_OK):
        raise SourcesError(f"{where}, key {key!r}: {shown} cannot be read by this process")
    return str(path)
