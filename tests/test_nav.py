"""The main navigation marks the item of the page shown, by the page's endpoint
(web/presenters/nav.py): generated over the route map and over the nav's own endpoints."""

from __future__ import annotations

import re
from html import unescape

import pytest
from flask import url_for

from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.web.presenters.nav import MAIN_NAV, main_nav

from . import support

# Every page that shows the nav, and the item it belongs to (None: none). A new page fails the generated test
# until it is named here (and, unless it stands alone, covered by an item of MAIN_NAV).
PAGES = {
    "pages.index": "Dead letters", "pages.entry": "Dead letters", "actions.confirm_republish": "Dead letters",
    "actions.edit": "Dead letters", "pages.groups": "Groups", "groups.group_page": "Groups", "views.index": "Views",
    "bulk.jobs": "Jobs", "bulk.job_page": "Jobs", "bulk.bulk_preview": "Jobs", "audit.audit": "Audit", "admin.users": "Users",
    "repair.entry_repair": "Dead letters", "row_actions.confirm": "Dead letters", "pages.summary": "Dead letters", "alert_outbox.alerts": "Alerts",
    "auth.login": None,  # signed in already: the form again, under no item
    "sources.sources_page": None,  # one source: no Sources item (tests/test_sources_desk.py: several)
}


def nav_of(html: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The main nav's links (label, href) and the labels marked as the current page."""
    nav = re.search(r'<nav aria-label="Main">(.*?)</nav>', html, re.S)
    assert nav, "the page has no main nav"
    links = re.findall(r'<a href="([^"]*)"( aria-current="page")?>([^<]*)</a>', nav.group(1))
    return [(label, unescape(href)) for href, _, label in links], [label for _, current, label in links if current]


@pytest.fixture
def nav_pages(offline_app):
    """An admin's client (every page opens for it) and the URL of every GET route, with a real
    entry and job in its path."""
    entry_id = support.dead_letter(offline_app, 1, payload=b'{"order_id": 1}')
    job_id = jobs.create_job(runtime_of(offline_app), "close", actor="ann", ids=[entry_id], start=False)
    values = {"entry_id": entry_id, "job_id": job_id, "group_id": 1, "action": "republish"}
    urls = {}
    with offline_app.test_request_context():
        for rule in offline_app.url_map.iter_rules():
            if "GET" in rule.methods and rule.endpoint != "static":
                urls[rule.endpoint] = url_for(rule.endpoint, **{k: values[k] for k in rule.arguments})
    return support.logged_in(offline_app, "admin"), urls


def test_every_page_with_the_nav_marks_the_one_item_it_belongs_to(offline_app, nav_pages):
    client, urls = nav_pages
    with offline_app.test_request_context():
        links = [(item.label, url_for(item.endpoint)) for item in MAIN_NAV]
    shown = set()
    for endpoint, url in sorted(urls.items()):
        with client.get(url) as response:  # closed: an export streams
            if response.mimetype != "text/html":
                continue  # JSON, a download, an icon
            body = response.get_data(as_text=True)
        if '<nav aria-label="Main">' not in body:
            continue  # a fragment
        assert response.status_code == 200, (url, response.status_code)
        assert endpoint in PAGES, f"{endpoint} ({url}) shows the nav: name the item it belongs to in PAGES"
        found, current = nav_of(body)
        assert found == links, url
        assert current == ([PAGES[endpoint]] if PAGES[endpoint] else []), (url, current)
        shown.add(endpoint)
    assert shown == set(PAGES)


@pytest.mark.parametrize("item", MAIN_NAV, ids=lambda item: item.label)
def test_each_nav_items_own_page_marks_that_item_and_only_it(offline_app, nav_pages, item):
    client, urls = nav_pages
    _, current = nav_of(client.get(urls[item.endpoint]).get_data(as_text=True))
    assert current == [item.label]


def test_the_pages_a_nav_item_stands_for_exist_under_those_names(offline_app):
    endpoints = set(offline_app.view_functions)
    blueprints = set(offline_app.blueprints)
    for item in MAIN_NAV:
        assert item.endpoint in endpoints, item
        for covered in item.covers:
            if covered.endswith(".*"):
                assert covered[:-2] in blueprints, (item.label, covered)
            else:
                assert covered in endpoints, (item.label, covered)


def test_a_page_answered_by_a_post_or_an_error_is_marked_by_its_endpoint_too(offline_app, nav_pages):
    client, _ = nav_pages
    token = support.csrf_token(client, "/")
    # The bulk preview (POST /bulk/preview) belongs with the jobs.
    preview = client.post("/bulk/preview", data={"csrf_token": token, "by": "filter", "action": "close", "status": "open"})
    assert preview.status_code == 200
    assert nav_of(preview.get_data(as_text=True))[1] == ["Jobs"]
    # An entry that is not there: its page's 404 still stands under the dead letters.
    missing = client.get("/entries/999999")
    assert missing.status_code == 404
    assert nav_of(missing.get_data(as_text=True))[1] == ["Dead letters"]


def test_a_viewer_is_not_offered_the_items_above_its_role(offline_app):
    viewer = support.logged_in(offline_app, "viewer")
    labels = [label for label, _ in nav_of(viewer.get("/").get_data(as_text=True))[0]]
    assert labels == [item.label for item in MAIN_NAV if item.role is None] and "Alerts" not in labels


def test_at_most_one_item_is_current_and_none_for_a_page_outside_the_nav():
    # The counts are a page too when followed without script (a <noscript> link of the list).
    for endpoint in ("pages.index", "actions.edit", "bulk.bulk_preview", "audit.job_items", "views.save",
                     "pages.summary"):
        assert sum(link.current for link in main_nav(endpoint)) == 1, endpoint
    for endpoint in (None, "auth.login", "status.banner"):
        assert not any(link.current for link in main_nav(endpoint)), endpoint


def test_the_users_item_is_shown_to_admins_only(offline_app):
    labels = {role: [label for label, _ in nav_of(support.logged_in(offline_app, role).get("/").get_data(as_text=True))[0]]
              for role in ("viewer", "operator", "admin")}
    assert "Users" not in labels["viewer"] and "Users" not in labels["operator"]
    assert labels["admin"][-1] == "Users" and labels["admin"][:-1] == labels["operator"]
    assert [link.label for link in main_nav("pages.index", "operator")] == labels["operator"]
