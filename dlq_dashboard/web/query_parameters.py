"""The query parameters each GET route takes, and the rule every one of them holds to: a
parameter that reads as a misspelling of one the route takes is a 400 naming the one meant
(params.refuse_misspelt). "/api/alerts?stat=failed" answered every alert, and a person read
the answer as the failed ones.

A JSON route's parameters are those its operation in the OpenAPI document lists (web/openapi.py
and its parts), so the document and the rule cannot part. A page takes what the JSON route it
shows takes, with its own beside them (PAGES). A GET route that is in neither is an error of the
code, which tests/test_query_parameters.py finds.
"""

from __future__ import annotations

from functools import lru_cache

from flask import Flask, request

from . import openapi_sources, openapi_views, params
from .openapi import OPERATIONS, route_key
from .openapi_parts import DESK_OPERATIONS

#: Every page that takes query parameters, or none: (the JSON route whose parameters it takes,
#: or None, and its own). An entry's pages carry the list's filters on, so that Previous and
#: Next walk that list still.
PAGES: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "pages.index": ("/api/entries", ()),
    "pages.summary": ("/api/entries", ()),
    "pages.newer": ("/api/entries", ("after",)),
    "pages.entry": ("/api/entries", ()),
    "pages.payload_download": (None, ()),
    "pages.favicon": (None, ()),
    "actions.edit": ("/api/entries", ("version",)),
    "actions.confirm_republish": ("/api/entries", ("version",)),
    "repair.entry_repair": ("/api/entries", ("version",)),
    "row_actions.confirm": ("/api/entries", ("version",)),
    "pages.groups": ("/api/groups", ("window",)),
    "pages.groups_newer": ("/api/groups", ("window", "after")),
    "groups.group_page": (None, ()),
    # A bulk form asked by GET (params.form_selection): its own fields and the list's filters.
    "bulk.bulk_preview": (None, params.BULK_FORM_PARAMETERS),
    "bulk.jobs": ("/api/jobs", ()),
    "bulk.job_page": ("/api/jobs/{job_id}", ()),
    "audit.audit": ("/api/audit", ()),
    "audit.job_items": ("/api/audit", ()),
    "alert_outbox.alerts": ("/api/alerts", ()),
    "sources.sources_page": ("/api/sources", ()),
    "views.index": (None, ()),
    "status.banner": (None, ()),
    "admin.users": (None, ()),
    "auth.login": (None, ("next",)),
    # Single sign-on's routes answer a bad request on the login page (oidc.not_well_formed), and
    # the callback's parameters are the identity provider's to choose.
    "oidc.start": (None, ()),
    "oidc.callback": (None, ()),
    "static": (None, ()),
}

#: Pages that refuse a misspelt parameter themselves, so as to say it where their list would be
#: (beside the filters that are set), not on the error page.
SAID_IN_PLACE = frozenset({"pages.index", "pages.groups", "audit.audit"})


def _operation_parameters(path: str) -> tuple[str, ...] | None:
    """The query parameters the OpenAPI document lists for GET ``path``; None: no such operation."""
    wanted = route_key(path)
    for (method, operation_path), operation in {**OPERATIONS, **DESK_OPERATIONS, **openapi_sources.OPERATIONS,
                                                **openapi_views.OPERATIONS}.items():
        if method == "get" and route_key(operation_path) == wanted:
            # The key fields' filters (field.<label>) are no parameter of the document's: it names their family.
            family = (operation["x-key-field-filters"],) if "x-key-field-filters" in operation else ()
            return (*(p["name"] for p in operation.get("parameters", ()) if p.get("in") == "query"), *family)
    return None


@lru_cache(maxsize=None)
def parameters_of(endpoint: str, rule: str) -> tuple[str, ...] | None:
    """The query parameters GET ``rule`` (served by ``endpoint``) takes; None when it declares none."""
    found = _operation_parameters(rule)
    if found is not None:
        return found
    if endpoint not in PAGES:
        return None
    shown, own = PAGES[endpoint]
    return (*(_operation_parameters(shown) or () if shown else ()), *own)


def takes_key_fields(known: tuple[str, ...]) -> bool:
    """Whether a route with these parameters takes the key fields' filters (``field.<label>``)."""
    return any(name.startswith("field.") for name in known)


def refuse_misspelt_parameters() -> None:
    """Before every GET: a parameter that reads as a misspelling of one the route takes is a 400."""
    if request.method not in ("GET", "HEAD") or request.url_rule is None or not request.args:
        return
    endpoint = request.endpoint or ""
    if endpoint in SAID_IN_PLACE:
        return
    known = parameters_of(endpoint, request.url_rule.rule) or ()
    if known:
        # ``field.<label>`` stands for every key field: refuse_misspelt knows the family itself.
        params.refuse_misspelt(request.args, [n for n in known if not n.startswith("field.")],
                               fields=takes_key_fields(known))


def init_app(app: Flask) -> None:
    """Hold every GET route to the rule (after the rules of every request, web/params.py)."""
    app.before_request(refuse_misspelt_parameters)
