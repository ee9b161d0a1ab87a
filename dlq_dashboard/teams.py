"""Teams (DLQ_TEAMS, SPEC section 11): which team a new failure group belongs to, by the subject
patterns each team names, and where that team's alerts go besides DLQ_WEBHOOK_URL.

The file is TOML, one table a team::

    [teams.orders]
    subjects = ["orders.>", "billing.>"]
    webhooks = ["https://hooks.example/orders"]
    emails = ["orders-oncall@example.com"]

A new group gets the first team, in the order of the file, one of whose patterns covers its
subject (NATS wildcards, scopes.subject_matches): patterns may overlap, the earlier team wins.
A group keeps the team it was given when the file changes later.

Pure parsing only; config.py reads the file at start, ingest gives new groups their team, and
alerts/outbox.py sends a team's alerts to its webhooks and e-mails.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Sequence
from urllib.parse import urlsplit

from .files import read_toml
from .mailing import MailError, check_address
from .redaction import scrub
from .scopes import ScopeError, check_pattern, subject_matches

_NAME = re.compile(r"[a-z0-9_-]{1,64}")
_KEYS = ("subjects", "webhooks", "emails")
_SHAPE = "use a TOML file of [teams.<name>] tables, each with subjects and optional webhooks and emails"


class TeamsError(ValueError):
    """The teams file cannot be used; the message names the team and the key, in one line."""


@dataclass(frozen=True)
class Team:
    """A team: the subject patterns of its groups, and where its groups' alerts go."""

    name: str
    subjects: tuple[str, ...]
    webhooks: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()

    def covers(self, subject: str | None) -> bool:
        """Whether one of the team's patterns covers ``subject``."""
        return any(subject_matches(pattern, subject) for pattern in self.subjects)


def team_for(teams: Sequence[Team], subject: str | None) -> str | None:
    """The name of the first team covering ``subject``, in the file's order; None if none does."""
    return next((team.name for team in teams if team.covers(subject)), None)


def team_named(teams: Sequence[Team], name: str | None) -> Team | None:
    """The team called ``name``; None for no name, or a team the file no longer has."""
    return next((team for team in teams if name is not None and team.name == name), None)


def load_teams(path: str) -> tuple[Team, ...]:
    """The teams of the TOML file at ``path``, in its order; TeamsError when it cannot be used."""
    data = read_toml(path, TeamsError, _SHAPE)
    return parse_teams(data)


def parse_teams(data: dict) -> tuple[Team, ...]:
    """The teams of a parsed teams file; TeamsError naming the team and the key that is wrong."""
    unknown = [key for key in data if key != "teams"]
    if unknown:
        raise TeamsError(f"the key {unknown[0]!r} is not known; {_SHAPE}")
    tables = data.get("teams")
    if not isinstance(tables, dict) or not tables:
        raise TeamsError(f"it names no team; {_SHAPE}")
    return tuple(_team(name, table) for name, table in tables.items())


def _team(name: str, table) -> Team:
    if not _NAME.fullmatch(name):
        # As TOML quotes such a key, so the line stays one line whatever the name holds.
        where = f"[teams.{json.dumps(name)}]"
        raise TeamsError(f"{where}: the team name must be 1 to 64 of a-z, 0-9, '_' and '-'")
    where = f"[teams.{name}]"
    if not isinstance(table, dict):
        raise TeamsError(f"{where}: a team is a table with subjects and optional webhooks and emails")
    for key in table:
        if key not in _KEYS:
            raise TeamsError(f"{where}: the key {key!r} is not known; use subjects, webhooks and emails")
    if "subjects" not in table:
        raise TeamsError(f"{where} subjects: missing; list the subject patterns of the team, such as \"orders.>\"")
    values = {key: _strings(where, key, table.get(key, [])) for key in _KEYS}
    if not values["subjects"]:
        raise TeamsError(f"{where} subjects: empty; list the subject patterns of the team, such as \"orders.>\"")
    try:
        subjects = tuple(dict.fromkeys(check_pattern(p) for p in values["subjects"]))
    except ScopeError as exc:
        raise TeamsError(f"{where} subjects: {exc}; use NATS subject patterns such as \"orders.>\"") from None
    for url in values["webhooks"]:
        if not _is_http_url(url):
            raise TeamsError(f"{where} webhooks: {scrub(url)!r} is not an http:// or https:// URL")
    emails: dict[str, str] = {}
    for raw in values["emails"]:
        try:
            address = check_address(raw)
        except MailError as exc:
            raise TeamsError(f"{where} emails: {exc}") from None
        emails.setdefault(address.lower(), address)  # the same mailbox in two spellings: once
    return Team(name=name, subjects=subjects, webhooks=tuple(dict.fromkeys(u.strip() for u in values["webhooks"])),
                emails=tuple(emails.values()))


def _strings(where: str, key: str, value) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TeamsError(f"{where} {key}: not a list of strings; write {key} = [\"...\", \"...\"]")
    return value


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not any(
        c.isspace() or not c.isprintable() for c in url.strip())
