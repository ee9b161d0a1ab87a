"""The main navigation: its items and the pages each one stands for, by endpoint, so the item of
the page shown is marked (``aria-current="page"``) whatever its URL looks like. An item that
needs a role is shown to that role and above only."""

from __future__ import annotations

from dataclasses import dataclass

from ...scopes import RANK


@dataclass(frozen=True)
class NavItem:
    """One link of the main navigation."""

    label: str
    endpoint: str  # where it leads
    # The other endpoints whose pages belong to it; "blueprint.*" stands for every endpoint of a blueprint.
    covers: tuple[str, ...] = ()
    role: str | None = None  # the least role that sees it (None: everyone signed in)

    def shown_to(self, role: str | None) -> bool:
        """True when a reader of ``role`` sees this item."""
        return self.role is None or (role is not None and RANK[role] >= RANK[self.role])

    def marks(self, endpoint: str | None) -> bool:
        """True when a page answered by ``endpoint`` belongs to this item."""
        if not endpoint:
            return False
        blueprint = endpoint.rpartition(".")[0]
        return endpoint == self.endpoint or endpoint in self.covers or f"{blueprint}.*" in self.covers


MAIN_NAV = (
    # An entry's page and its confirmations (republish, edit) are reached from the list.
    NavItem("Dead letters", "pages.index", ("pages.entry", "pages.newer", "pages.payload_download", "pages.summary",
                                            "actions.*", "repair.*", "row_actions.*")),
    # A group's own page (and its triage forms) belong with the groups.
    NavItem("Groups", "pages.groups", ("groups.*",)),
    NavItem("Views", "views.index", ("views.*",)),
    # A bulk preview and a job's page belong with the jobs.
    NavItem("Jobs", "bulk.jobs", ("bulk.*",)),
    NavItem("Audit", "audit.audit", ("audit.*",)),
    # The alert outbox: what was sent to the webhooks, what waits, and why.
    NavItem("Alerts", "alert_outbox.alerts", ("alert_outbox.*",), role="operator"),
    NavItem("Users", "admin.users", ("admin.*",), role="admin"),
)

#: Shown after the groups only while the dashboard mirrors several sources (SPEC section 12): with
#: one, every page's nav is as it was before sources existed.
SOURCES_NAV = NavItem("Sources", "sources.sources_page", ("sources.*",))


def nav_items(several: bool = False) -> tuple[NavItem, ...]:
    """The items of the main navigation; ``several``: the dashboard mirrors several sources."""
    return MAIN_NAV[:2] + (SOURCES_NAV,) + MAIN_NAV[2:] if several else MAIN_NAV


@dataclass(frozen=True)
class NavLink:
    """A nav item as a page renders it."""

    label: str
    endpoint: str
    current: bool


def main_nav(endpoint: str | None, role: str | None = None, several: bool = False) -> tuple[NavLink, ...]:
    """The main navigation for a page answered by ``endpoint`` (``request.endpoint``), as a reader
    of ``role`` sees it (``several``: with the Sources item): at most one item current, the first
    that claims the page."""
    items = nav_items(several)
    current = next((item for item in items if item.marks(endpoint)), None)
    return tuple(NavLink(item.label, item.endpoint, item is current) for item in items if item.shown_to(role))
