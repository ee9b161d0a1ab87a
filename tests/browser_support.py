"""What the browser tests share besides conftest's ``browser`` and ``page``: the wait for htmx to
settle, and one running site (nats-server, database, app, web server) for a module's many
read-only checks, with a signed-in page a viewport kept for them.

A page-by-page check (every page, both widths, both colour schemes) is one test a page, so that
the xdist workers share the checks; each worker builds the module's site once, as the single
test built it once for all of its pages.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import pytest

from dlq_dashboard import create_app
from dlq_dashboard.nats.server import NatsServer
from dlq_dashboard.runtime import runtime_of

from . import support

# Loaded parts replace themselves (hx-trigger="load"); no request of htmx is still running.
SETTLED = "() => !document.querySelector('[hx-trigger^=\"load\"], .htmx-request')"
#: How wide the page is, the window's width, and the first five parts reaching past its right edge.
MEASURE_WIDTH = """() => {
  const width = window.innerWidth;
  const wide = [...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > width + 1)
    .slice(0, 5).map(e => e.tagName.toLowerCase() + (e.className ? '.' + String(e.className).split(' ').join('.') : ''));
  return {scroll: document.documentElement.scrollWidth, width, wide};
}"""


def too_wide(page, *, scripts: bool = True) -> str | None:
    """None when the page fits its window's width; otherwise a sentence: how wide it is and the
    parts that reach past the window. Measured once the page has loaded: a page reached by a click
    shows its text before its stylesheet applies, and measured then its tokens stand unbroken (a
    conflict page once measured 2801 px wide at 390, a bulk patch's preview wider than 1440 at
    1440). With ``scripts``, also once htmx has settled (without scripts nothing loads later)."""
    page.wait_for_load_state("load")
    if scripts:
        page.wait_for_function(SETTLED)
    found = page.evaluate(MEASURE_WIDTH)
    if found["scroll"] <= found["width"]:
        return None
    return f"{found['scroll']} px wide at {found['width']} px, too wide: {found['wide']}"


def assert_fits(page, where: str = "the page", *, scripts: bool = True) -> None:
    """The page never scrolls sideways at its window's width (too_wide)."""
    wide = too_wide(page, scripts=scripts)
    assert wide is None, f"{where} scrolls sideways: {wide}"


#: The shown fields whose hint (placeholder) is wider than the room inside them: cut, it reads as
#: another hint ("note: why it needs n", "empty: one is made for y"). A text area's hint wraps.
CUT_HINTS = """() => {
  const context = document.createElement('canvas').getContext('2d');
  return [...document.querySelectorAll('input[placeholder]')]
    .filter(field => field.placeholder && field.getClientRects().length)
    .map(field => {
      const style = getComputedStyle(field);
      context.font = style.font;
      const room = field.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
      return {name: field.name || field.id, hint: field.placeholder, needs: Math.ceil(context.measureText(field.placeholder).width),
              room: Math.floor(room)};
    })
    .filter(field => field.needs > field.room);
}"""
#: The shown fields whose hint (placeholder) could be taken for a value typed in: a hint is
#: slanted (its own style, not the field's) and a word or more with a space ("e.g. 2h", "any"),
#: never a bare value ("2h", "100", "me": the group page's "Ignore for" read as already filled).
VALUE_LIKE_HINTS = """() => [...document.querySelectorAll('input[placeholder]')]
  .filter(field => field.placeholder && field.getClientRects().length)
  .filter(field => getComputedStyle(field, '::placeholder').fontStyle !== 'italic'
                   || getComputedStyle(field, '::placeholder').color === getComputedStyle(field).color
                   || !/\\s/.test(field.placeholder.trim()))
  .map(field => `${field.name || field.id}: "${field.placeholder}"`)"""
#: The shown text fields and choices less than 24 px tall (WCAG 2.2's least target size): left
#: to the browser's own look, the login's and the view name's were 21.
SMALL_FIELDS = """() => [...document.querySelectorAll('input:not([type=hidden]):not([type=checkbox]):not([type=radio]), select')]
  .filter(field => field.getClientRects().length && field.getBoundingClientRect().height < 24)
  .map(field => `${field.tagName.toLowerCase()}[name=${field.name}]: ${field.getBoundingClientRect().height} px`)"""
#: The cells of a table's rows (rows shown as rows) that are not a table's cells: a cell made a
#: flex box stands outside its row's lines (the users' actions did).
LOOSE_CELLS = """() => [...document.querySelectorAll('tr')]
  .filter(row => row.getClientRects().length && getComputedStyle(row).display === 'table-row')
  .flatMap(row => [...row.cells])
  .filter(cell => !['table-cell', 'none'].includes(getComputedStyle(cell).display))
  .slice(0, 5).map(cell => `${cell.tagName.toLowerCase()}.${cell.className}: ${getComputedStyle(cell).display}`)"""


def cut_hints(page) -> list[dict]:
    """The shown fields whose placeholder does not fit inside them (CUT_HINTS)."""
    return page.evaluate(CUT_HINTS)


def value_like_hints(page) -> list[str]:
    """The shown fields whose placeholder could read as a value (VALUE_LIKE_HINTS)."""
    return page.evaluate(VALUE_LIKE_HINTS)


def small_fields(page) -> list[str]:
    """The shown text fields and choices less than 24 px tall (SMALL_FIELDS)."""
    return page.evaluate(SMALL_FIELDS)


#: The boxes that scroll (their content wider or taller than they are, and overflow auto or scroll)
#: that the keyboard cannot reach: no tabindex of 0 or more, not a field. Tab must stop on one for
#: its arrow keys to scroll it (WCAG 2.1.1; axe's scrollable-region-focusable passes a box holding
#: a link, yet the text past the link stays out of reach).
UNREACHABLE_SCROLLERS = """() => [...document.querySelectorAll('body *')].filter(box => {
  if (!box.getClientRects().length || box.matches('textarea, select, input')) return false;
  const style = getComputedStyle(box);
  const across = /auto|scroll/.test(style.overflowX) && box.scrollWidth > box.clientWidth + 1;
  const down = /auto|scroll/.test(style.overflowY) && box.scrollHeight > box.clientHeight + 1;
  return (across || down) && !(box.tabIndex >= 0 && box.hasAttribute('tabindex'));
}).map(box => box.tagName.toLowerCase() + (box.id ? '#' + box.id : '') +
          (box.className && typeof box.className === 'string' ? '.' + box.className.trim().split(/\\s+/).join('.') : ''))"""


def unreachable_scrollers(page) -> list[str]:
    """The boxes that scroll and that the keyboard cannot reach (UNREACHABLE_SCROLLERS)."""
    return page.evaluate(UNREACHABLE_SCROLLERS)


def loose_cells(page) -> list[str]:
    """The cells of rows shown as rows that are not laid out as a table's cells (LOOSE_CELLS)."""
    return page.evaluate(LOOSE_CELLS)


# The list's summary once its counts have arrived (until then it stands in their place, pending).
COUNTED_SUMMARY = ".summary:not([aria-busy])"
#: The list's first row's top at every frame the page draws once it has loaded, in
#: ``window.firstRowTops`` (installed before a page loads, ``page.add_init_script``): from then on
#: a person may aim at a row. Before, static/app.js folds the parts as they were left, at
#: DOMContentLoaded.
SAMPLE_FIRST_ROW = """window.firstRowTops = [];
window.addEventListener("load", () => (function sample() {
  const row = document.querySelector('#entry-rows tr[data-id]');
  if (row) window.firstRowTops.push(row.getBoundingClientRect().top + window.scrollY);
  requestAnimationFrame(sample);
})());"""


@dataclass
class Site:
    """A started app over its own nats-server and SQLite file, served on 127.0.0.1."""

    app: object
    base: str
    nats_server: NatsServer
    ids: dict = field(default_factory=dict)


@contextmanager
def served_site(tmp_path, **changes) -> Iterator[Site]:
    """What conftest's ``app`` and ``live_server`` give a test, for a longer scope: a fresh
    nats-server, a migrated SQLite copy, the app started (bridge and mirror) with the Settings
    ``changes``, and waitress serving it; all stopped afterwards."""
    nats_server = NatsServer(store_dir=tmp_path / "nats", log_path=tmp_path / "nats.log").start()
    try:
        settings = support.make_settings(tmp_path, nats_server.url,
                                         database_url=support.migrated_sqlite(tmp_path / "dlq.sqlite3"), **changes)
        app = create_app({"SETTINGS": settings, "TESTING": True})
        try:
            support.start(app)
            server, thread = support.serve_in_thread(app)
            try:
                yield Site(app, f"http://127.0.0.1:{server.effective_port}", nats_server)
            finally:
                support.stop_serving(server, thread)
        finally:
            runtime_of(app).stop()
    finally:
        nats_server.stop()


class SignedInPages:
    """A page of a (width, height, colour scheme), signed in as ``role`` on first use and kept
    for the module's next checks at the same size and scheme, as one test walking every page kept
    one. One is open at a time (an open page polls the banner): asked for another size or scheme,
    it closes the one it kept. Closed at the end."""

    def __init__(self, browser, site: Site, role: str):
        self.browser, self.site, self.role = browser, site, role
        self._pages: dict[tuple, object] = {}

    def __call__(self, width: int, height: int, scheme: str = "light"):
        key = (width, height, scheme)
        if key not in self._pages:
            self.close()
            context = self.browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme)
            page = context.new_page()
            support.sign_in(page, self.site.base, self.site.app, self.role)
            self._pages[key] = page
        return self._pages[key]

    def close(self) -> None:
        for page in self._pages.values():
            page.context.close()
        self._pages.clear()


def module_site(name: str, entries: Callable[[object, NatsServer], dict]):
    """A module's ``site`` fixture, for its checks that only read: ``served_site`` once a worker,
    its ``ids`` made by ``entries(app, nats_server)``."""
    @pytest.fixture(scope="module")
    def site(tmp_path_factory):
        with served_site(tmp_path_factory.mktemp(name)) as served:
            served.ids = entries(served.app, served.nats_server)
            yield served
    return site


@pytest.fixture(scope="module")
def operator_pages(browser, site):
    """An operator's signed-in pages on the module's ``site`` (SignedInPages), closed at its end."""
    pages = SignedInPages(browser, site, "operator")
    yield pages
    pages.close()
