"""Every fragment htmx asks for answers, for every role, while a bulk job runs.

A block rendered alone for htmx once missed what its page binds outside its blocks (a macro
imported at the top of job.html), so the job page's own progress poll answered 500 while a
job ran and the operator saw "0 done" until it ended. The test finds the fragments the way a
browser does: it opens every page, reads each hx-get and hx-post in it (and in the fragments
those answer), and asks for each as htmx would; and it checks that every hx-get and hx-post the
templates spell was among them.
"""

from __future__ import annotations

import re
import threading
from html import unescape
from html.parser import HTMLParser
from urllib.parse import urlencode, urlsplit

import pytest
from werkzeug.exceptions import MethodNotAllowed, NotFound

from dlq_dashboard.actions import publishing
from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.runtime import runtime_of

from . import support

ROLES = ("viewer", "operator", "admin")
TEMPLATES = support.Path(__file__).resolve().parent.parent / "templates"
# Pages that are no page: files, the login and logout, machine formats.
NOT_PAGES = ("static", "pages.favicon", "pages.payload_download", "metrics.metrics", "auth.login", "auth.logout")


class Fragments(HTMLParser):
    """The elements of a page that htmx requests from: (verb, url, swap, target, element id,
    the fields htmx sends with it)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[dict] = []
        self._forms: list[list[tuple[str, str]]] = []
        self._textarea: tuple[str, list[str]] | None = None
        self._select: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = {k: (v or "") for k, v in attrs}
        if tag == "form":
            self._forms.append([])
        fields = self._forms[-1] if self._forms else None
        if fields is not None and attrs.get("name"):
            if tag == "input" and (attrs.get("type") not in ("checkbox", "radio") or "checked" in attrs):
                fields.append((attrs["name"], attrs.get("value", "")))
            elif tag == "textarea":
                self._textarea = (attrs["name"], [])
            elif tag == "select":
                self._select = attrs["name"]
        if tag == "option" and self._select and "selected" in attrs and fields is not None:
            fields.append((self._select, attrs.get("value", "")))
        for verb in ("get", "post"):
            if f"hx-{verb}" in attrs:
                self.found.append({"verb": verb, "url": unescape(attrs[f"hx-{verb}"]),
                                   "swap": attrs.get("hx-swap", "innerHTML"), "target": attrs.get("hx-target"),
                                   "id": attrs.get("id"), "tag": tag,
                                   "form": fields if fields is not None else []})

    def handle_data(self, data):
        if self._textarea:
            self._textarea[1].append(data)

    def handle_endtag(self, tag):
        if tag == "textarea" and self._textarea and self._forms:
            self._forms[-1].append((self._textarea[0], "".join(self._textarea[1])))
            self._textarea = None
        elif tag == "select":
            self._select = None
        elif tag == "form" and self._forms:
            self._forms.pop()


def hx_elements(html: str) -> list[dict]:
    parser = Fragments()
    parser.feed(html)
    return parser.found


def endpoints_the_templates_request() -> set[str]:
    """The endpoint of every hx-get and hx-post the templates write with url_for or list_url."""
    found = set()
    for path in TEMPLATES.glob("*.html"):
        for verb_value in re.findall(r'hx-(?:get|post)="([^"]*)"', path.read_text()):
            named = re.search(r"(?:url_for|list_url)\(\s*'([\w.]+)'", verb_value)
            if named:
                found.add(named.group(1))
            elif "list_url(" in verb_value:
                found.add("pages.index")  # list_url's default endpoint
            # else: "{{ request.full_path }}", the page's own address (found by opening it)
    return found


@pytest.fixture
def running_job(app, nats_server, monkeypatch):
    """Entries of every kind and a bulk republish held running (its first window waits)."""
    rt = runtime_of(app)
    assert rt.jobs.recovered.wait(10)
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": %d}' % i for i in range(60)])
    support.dead_letter(app, 900, payload=b"\xff not text", Dlq_Reason="fatal")
    release, reached = threading.Event(), threading.Event()

    def hold(stage, intent):
        if stage == "after_publish":
            reached.set()
            release.wait(60)
    monkeypatch.setattr(publishing, "fault_point", hold)
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=ids)
    assert reached.wait(30), "the job did not start publishing"
    yield {"entry": ids[0], "job": job_id, "total": len(ids), "rt": rt}
    release.set()
    support.jobs_settled(rt.engine)


def start_pages(app, ids: dict) -> list[str]:
    """Every HTML page a role may open, with real ids in its path."""
    values = {"entry_id": ids["entry"], "job_id": ids["job"]}
    pages = []
    for rule in app.url_map.iter_rules():
        if "GET" not in rule.methods or rule.rule.startswith("/api/") or rule.endpoint in NOT_PAGES \
                or rule.rule in ("/healthz",):
            continue
        if not set(rule.arguments) <= set(values):
            continue
        with app.test_request_context():
            from flask import url_for
            pages.append(url_for(rule.endpoint, **{k: values[k] for k in rule.arguments}))
    return sorted(set(pages))


def endpoint_of(app, url: str, method: str) -> str:
    adapter = app.url_map.bind("localhost")
    try:
        return adapter.match(urlsplit(url).path, method=method.upper())[0]
    except (NotFound, MethodNotAllowed):
        return "?"


@pytest.mark.both_databases
@pytest.mark.parametrize("role", ROLES)
def test_every_fragment_htmx_requests_answers_200_for_every_role_while_a_bulk_job_runs(app, running_job, role):
    client = support.logged_in(app, role)
    token = support.csrf_token(client, "/")
    asked: dict[tuple[str, str], dict] = {}
    queue: list[dict] = []
    for url in start_pages(app, running_job):
        response = client.get(url)
        if response.status_code == 403:  # not this role's page (users and tokens: admins)
            continue
        assert response.status_code == 200, (url, response.status_code, response.get_data(as_text=True)[:500])
        queue.extend(hx_elements(response.get_data(as_text=True)))
    seen_endpoints = set()
    while queue:
        element = queue.pop(0)
        verb, url = element["verb"], element["url"]
        if verb == "get" and element["tag"] == "form":  # htmx sends a GET form's fields in the query
            query = urlencode(element["form"])
            url = url + ("&" if "?" in url else "?") + query if query else url
        if (verb, url) in asked:
            continue
        asked[(verb, url)] = element
        headers = {"HX-Request": "true", "HX-Current-URL": "http://localhost/"}
        if verb == "get":
            response = client.get(url, headers=headers)
        else:
            data = dict(element["form"])
            data["csrf_token"] = token
            response = client.post(url, data=data, headers=headers)
        body = response.get_data(as_text=True)
        assert response.status_code == 200, (role, verb, url, response.status_code, body[:500])
        seen_endpoints.add(endpoint_of(app, url, verb))
        # The content: an element that replaces itself (or its target) comes back whole, with its id.
        if element["swap"] == "outerHTML":
            assert body.strip(), (role, url, "an empty answer would remove the element")
            target = element["target"]
            wanted = target[1:] if target and target.startswith("#") else (element["id"] if not target else None)
            if wanted:
                assert f'id="{wanted}"' in body, (role, url, f"the fragment lacks #{wanted}")
        queue.extend(hx_elements(body))

    missing = endpoints_the_templates_request() - seen_endpoints
    # The editor's live check is an operator's; a viewer never opens the editor.
    if role == "viewer":
        missing -= {"actions.validate"}
    assert not missing, f"no page led to these fragments: {sorted(missing)}"
    # The routes that answer HX-Request with a block (web/responses.py page_or_fragment) were asked so.
    assert {"pages.index", "pages.groups", "bulk.jobs", "bulk.job_page"} <= seen_endpoints
    # The job page's own poll was among them, answered while the job ran, with its progress.
    poll = next(url for verb, url in asked if url.startswith(f"/jobs/{running_job['job']}"))
    fragment = client.get(poll, headers={"HX-Request": "true"}).get_data(as_text=True)
    assert 'hx-trigger="every 1s"' in fragment
    assert f"to go, of {running_job['total']}" in fragment
    assert jobs.job_status(running_job["rt"], running_job["job"], limit=0)["state"] == "running"
    if role != "viewer":
        assert "Cancel job" in fragment
