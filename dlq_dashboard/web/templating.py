"""What every template may use: filters for times and numbers, the identity of the request, and
the domain's constants (statuses, reasons, what can be republished, the contract's header names),
so no template spells them."""

from __future__ import annotations

import secrets
from datetime import datetime

from flask import Flask, g, request
from markupsafe import Markup, escape

from dlq_consumer import headers as contract

from ..actions.close import NOTE_MAX
from ..access import visible
from ..controls import shown
from ..actions.decisions import REPUBLISHABLE
from ..entries.shape import STATUSES
from ..times import as_time, format_time, utcnow
from . import current_runtime
from .auth import current_identity
from .data import current_reader
from .params import form_filter
from .presenters.actions import bulk_choices, entry_action_bar, row_actions, row_confirm
from .presenters.nav import main_nav
from .presenters.rows import list_columns, shown_sources
from .responses import came_from, list_url, url_once
from .status import service_status


def _shown(value: object) -> object:
    """The |shown filter: a text with the characters a page would obey shown as escapes
    (controls.py); anything else (None: an entry with no subject) as it is."""
    return shown(value) if isinstance(value, str) else value


def reader_scopes() -> list[str] | None:
    """The subject patterns this request's reader may read, as written (``payments.>``); None
    when it reads every subject. A page empty for a scoped reader says where it looked."""
    reads = current_reader().reads
    return None if reads is None else [str(scope) for scope in reads]


def may_act_on(subject: str | None, source: str | None) -> bool:
    """Whether this request's reader may act on an entry of this original subject in this source
    (or a group of them): the list's rows and /groups offer their actions only then."""
    return visible.may_act_on(current_reader(), subject, source)


def when(value: datetime | str | None) -> str:
    """A time as every page shows it: '2026-11-29 10:00:05 UTC' (stored times are naive UTC;
    RFC 3339 text, as the JSON shapes carry it, is read first)."""
    value = as_time(value)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "—"


def rfc3339(value: datetime | str | None) -> str:
    """A stored time as RFC 3339 UTC (for <time datetime=...>)."""
    return format_time(as_time(value)) or ""


def ago(value: datetime | str | None) -> str:
    """How long ago, in the largest unit that fits ('3 min ago')."""
    value = as_time(value)
    if value is None:
        return "—"
    seconds = int((utcnow() - value).total_seconds())
    if seconds < 0:
        return "just now" if seconds > -60 else when(value)
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= length:
            return f"{seconds // length} {unit} ago"
    return f"{seconds} s ago"


# The two <time> filters below run for every row of a list: the time is read once and each part
# escaped by markupsafe's escape, which is what Markup.format does to each of its arguments (a
# third of the cost).

def timestamp(value: datetime | str | None) -> Markup:
    """A time as a <time> element in the one format of every page."""
    value = as_time(value)
    if value is None:
        return Markup("—")
    return Markup(f'<time datetime="{escape(rfc3339(value))}">{escape(when(value))}</time>')


def relative(value: datetime | str | None) -> Markup:
    """How long ago as a <time> element: '3 min ago' on the page, kept current by static/app.js
    (data-ago: a list left open said "2 s ago" long after), and the exact time
    '2026-11-29 10:00:05 UTC' on hover and, without hovering, to a screen reader."""
    value = as_time(value)
    if value is None:
        return Markup("—")
    exact = escape(when(value))
    return Markup(f'<time datetime="{escape(rfc3339(value))}" title="{exact}" data-ago><span data-ago-text>'
                  f'{escape(ago(value))}</span><span class="visually-hidden"> ({exact})</span></time>')


def number(value: int | float | None) -> str:
    """A count with its thousands separated: '1,234,567'."""
    if value is None:
        return "—"
    return f"{value:,}"


def init_app(app: Flask) -> None:
    """Register the filters and the context every template gets."""
    app.add_template_filter(when)
    app.add_template_filter(rfc3339)
    app.add_template_filter(ago)
    app.add_template_filter(timestamp)
    app.add_template_filter(relative)
    app.add_template_filter(number)
    # A subject (any text from a dead letter that sits in a sentence) with its controls and
    # bidirectional marks written as escapes: "orders.\u202edetaerc" never reads "orders.created".
    app.add_template_filter(_shown, "shown")
    app.add_template_global(entry_action_bar)
    app.add_template_global(bulk_choices)
    app.add_template_global(row_actions)
    app.add_template_global(row_confirm)
    app.add_template_global(list_columns)
    app.add_template_global(lambda: shown_sources(current_runtime(), current_reader().reads), "shown_sources")
    app.add_template_global(reader_scopes)
    app.add_template_global(may_act_on)
    app.add_template_global(came_from)
    # A bulk job's Start carries a key of its own: sent twice, it is the same job (create_job).
    # Hex: a random key in base64 holds any three letters now and then, which a page's words,
    # searched for a value (the scope tests do), should not be mistaken for.
    app.add_template_global(lambda: secrets.token_hex(16), "new_request_key")
    # Flask's url_for, each URL built once for the app (responses.url_once).
    app.add_template_global(url_once, "url_for")

    @app.context_processor
    def _context():
        identity = current_identity()
        rt = current_runtime()
        # Set by an answer made while the database is unreachable (web/errors.py): the banner then
        # shows without an identity, which could not be looked up.
        database_down = g.get("database_down", False)
        # From memory (the liveness probe, the mirror's progress): the banner's first render and
        # the actions that need NATS, rendered disabled while it is unreachable.
        status = service_status(rt) if identity or g.get("banner_unverified") else None
        return {"identity": identity, "database_down": database_down, "list_url": list_url, "statuses": STATUSES,
                "reasons": contract.REASONS, "republishable": REPUBLISHABLE, "contract": contract,
                "service": status, "nats_down": status.nats_down if status else None,
                "close_needs_nats": rt.settings.delete_on_close, "form_filter": form_filter,
                "note_max": NOTE_MAX, "nav": main_nav(request.endpoint, identity.role if identity else None,
                                                 len(rt.feeds) > 1)}
