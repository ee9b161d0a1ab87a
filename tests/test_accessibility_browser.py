"""Every page of the layout test (tests/test_layout_browser.py PAGES), light and dark, has no
violation of the WCAG 2.1 A and AA rules as axe-core checks them in Chromium; every action is
reached by Tab and shows where the focus is; j/k on an entry's page walk to the next or previous
entry of its list.

axe-core is the npm registry's package, vendored (with its licences) as static/vendor/axe-core-<version>.min.js
and loaded from the app itself, so the pages' CSP lets it run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from . import browser_support, support
from .test_layout_browser import PAGES, _entries

AXE_VERSION = "4.14.1"
AXE = f"/static/vendor/axe-core-{AXE_VERSION}.min.js"
WCAG = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
SETTLED = browser_support.SETTLED
RUN = """async (tags) => {
  const found = await axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']});
  return found.violations.map(v => ({id: v.id, help: v.help,
    nodes: v.nodes.slice(0, 3).map(n => n.target.join(' ') + ': ' + (n.failureSummary || '').split('\\n').slice(1, 2).join(''))}));
}"""


def _violations(page, where: str) -> list[str]:
    page.wait_for_function(SETTLED)
    # What a <details> holds is checked too, as if opened.
    page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.add_script_tag(url=AXE)
    return [f"{where}: {v['id']} ({v['help']}) at {v['nodes']}" for v in page.evaluate(RUN, WCAG)]


def test_the_vendored_axe_core_is_the_pinned_version_with_its_licence():
    static = Path(__file__).resolve().parent.parent / "static" / "vendor"
    head = (static / f"axe-core-{AXE_VERSION}.min.js").read_text(encoding="utf-8")[:200]
    assert f"axe v{AXE_VERSION}" in head
    assert "Mozilla Public License" in (static / f"axe-core-{AXE_VERSION}.LICENSE").read_text(encoding="utf-8")


WIDTHS = ((1440, 900), (390, 844))  # a desk and a phone, as the list's layout test measures
SCHEMES = ("light", "dark")
KEYS_DIALOG = "the keys' dialog"
#: What is checked at each width and scheme: the login page (signed out), every page of the layout
#: test (signed in as an operator), and the keys' dialog, opened by "?" on the list.
CHECKED = ["/login", *PAGES, KEYS_DIALOG]
# Width and scheme outermost, as the single test walked them: a worker's run of checks keeps one
# signed-in page.
CHECKS = [(width, height, scheme, path) for width, height in WIDTHS for scheme in SCHEMES for path in CHECKED]


# The entries of _entries on one running site for this module's checks, which only read.
site = browser_support.module_site("accessibility", _entries)
operator_pages = browser_support.operator_pages


@pytest.mark.parametrize("width, height, scheme, path", CHECKS, ids=[f"{w}px-{s}-{p}" for w, _, s, p in CHECKS])
def test_every_page_has_no_wcag_21_a_or_aa_violation_in_light_and_dark_at_both_widths(site, operator_pages, browser,
                                                                                     path, width, height, scheme):
    """One page at one width in one scheme a test (the xdist workers share them); together, every
    page of CHECKED at both widths in both schemes, as one test walked them before."""
    where = f"({scheme}, {width} px)"
    if path == "/login":
        context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme)
        try:
            page = context.new_page()
            page.goto(f"{site.base}/login")
            found = _violations(page, f"/login {where}")
        finally:
            context.close()
    elif path == KEYS_DIALOG:
        page = operator_pages(width, height, scheme)
        page.goto(f"{site.base}/")
        page.keyboard.press("?")
        expect(page.locator("#keys-help")).to_be_visible()
        found = _violations(page, f"{KEYS_DIALOG} {where}")
    else:
        page = operator_pages(width, height, scheme)
        url = path.format(**site.ids)
        response = page.goto(site.base + url)
        assert response.ok, f"{url}: {response.status}"
        found = _violations(page, f"{url} {where}")
    assert not found, f"{len(found)} axe-core violations:\n" + "\n".join(found)


FOCUSABLE = """() => [...document.querySelectorAll(
    'a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]:not([tabindex="-1"])')]
  .filter(e => !e.disabled && e.checkVisibility({visibilityProperty: true, contentVisibilityAuto: true}))
  .map((e, i) => { e.dataset.focusable = String(i); return i; }).length"""
FOCUSED = """() => {
  const e = document.activeElement;
  if (!e || e === document.body) return null;
  const style = getComputedStyle(e), box = e.getBoundingClientRect();
  // What the page shows at its middle: another element there (the status banner, a bar that stays
  // at the window's bottom) covers it (WCAG 2.2's "focus not obscured").
  const top = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
  return {index: e.dataset.focusable ?? null, tag: e.tagName.toLowerCase(), text: (e.textContent || e.name || '').trim().slice(0, 40),
          outline: style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0,
          shown: box.width > 0 && box.height > 0 && box.bottom > 0 && box.top < window.innerHeight,
          covered_by: !top || e.contains(top) || top.contains(e) || top.control === e ? null
                      : top.tagName.toLowerCase() + (top.className ? '.' + top.className : '')};
}"""


def _tab_through(page, where: str) -> list[str]:
    """Tab from the top of the page until the focus leaves it; what was not reached, or not shown."""
    page.wait_for_function(SETTLED)
    total = page.evaluate(FOCUSABLE)
    reached, problems = set(), []
    for _ in range(total + 5):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED)
        if focused is None:
            break
        if focused["index"] is not None:
            reached.add(int(focused["index"]))
        if not (focused["outline"] and focused["shown"]) or focused["covered_by"]:
            problems.append(f"{where}: {focused['tag']} {focused['text']!r} has the focus unseen "
                            f"(outline {focused['outline']}, in view {focused['shown']}, "
                            f"covered by {focused['covered_by'] or 'nothing'})")
    missed = page.evaluate("(reached) => [...document.querySelectorAll('[data-focusable]')]"
                           ".filter(e => !reached.includes(Number(e.dataset.focusable)))"
                           ".map(e => e.tagName.toLowerCase() + ' ' + (e.textContent || e.name || '').trim().slice(0, 40))",
                           sorted(reached))
    return problems + [f"{where}: never reached by Tab: {m}" for m in missed]


@pytest.mark.parametrize("path", ["/?status=open", "/entries/{edited}", "/entries/{conflict}/edit", "/groups", "/jobs"])
def test_every_action_is_reached_by_tab_and_shows_where_the_focus_is(site, operator_pages, browser, path):
    """One page a test, on the module's site (Tab and a tick in the browser change nothing on it),
    at 1280×900 in the light scheme as conftest's ``page``; together, the five pages one test
    tabbed through before."""
    page = operator_pages(1280, 900)
    url = path.format(**site.ids)
    page.goto(site.base + url)
    if path.startswith("/?"):
        # Ticked without a click, so the Tab order starts at the top: the bulk bar shows.
        page.evaluate("() => { document.querySelector('#entry-rows input[name=ids]').checked = true; }")
    problems = _tab_through(page, url)
    assert not problems, "\n".join(problems)


def test_j_and_k_on_an_entrys_page_open_the_next_and_the_previous_entry(app, live_server, page):
    first, second, third = (support.dead_letter(app, seq, payload=b'{"n": %d}' % seq) for seq in (1, 2, 3))
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/entries/{second}?status=open")
    page.keyboard.press("j")
    page.wait_for_url(re.compile(rf"/entries/{first}\?status=open$"))
    page.keyboard.press("k")
    page.wait_for_url(re.compile(rf"/entries/{second}\?status=open$"))
    page.keyboard.press("k")
    page.wait_for_url(re.compile(rf"/entries/{third}\?status=open$"))
    # The newest has no previous entry: k stays.
    page.keyboard.press("k")
    expect(page.locator("h1")).to_contain_text(f"Entry {third}")
    # Typing a j in a field is typing.
    page.goto(f"{live_server}/entries/{second}/edit")
    editor = page.locator("#payload")
    editor.press("Control+End")
    editor.type("j")
    expect(editor).to_have_value(re.compile("j$"))
    assert f"/entries/{second}/edit" in page.url
