"""Trace links end to end: a dead letter whose headers carry a W3C traceparent, mirrored from a
real nats-server, shows its trace on the entry page, in its JSON, the exports and the command
line; an invalid one nowhere; a viewer under DLQ_MASK=traceparent nowhere; and the timeline shows
the trace of the message a republish sent."""

from __future__ import annotations

import csv
import io
import itertools
import json
from html.parser import HTMLParser

import pytest

from dlq_dashboard.accounts import create_token
from dlq_dashboard.runtime import runtime_of

from . import support

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"
TEMPLATE = "https://tempo.example/trace/{trace_id}"
URL = f"https://tempo.example/trace/{TRACE}"
HOSTILE = '"><script>alert(1)</script>'
VALID = json.dumps({"customer_id": "c-1"}).encode()


class Page(HTMLParser):
    """The trace links of a page (<a class="trace-link">), the trace ids shown as text, and
    every element a page's text could have smuggled in."""

    def __init__(self, html: str):
        super().__init__()
        self.links: list[dict] = []
        self.ids: list[str] = []
        self.scripts = 0
        self._in_id = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "a" and "trace-link" in classes:
            self.links.append(attrs)
        self._in_id = tag == "code" and "trace-id" in classes
        if tag == "script" and "src" not in attrs:
            self.scripts += 1

    def handle_data(self, data):
        if self._in_id:
            self.ids.append(data)
            self._in_id = False


_TOKENS = itertools.count(1)


def token(app, role: str) -> str:
    return create_token(runtime_of(app).engine, f"trace-{role}-{next(_TOKENS)}", role)


def api(app, role: str = "viewer"):
    client, given = app.test_client(), token(app, role)
    return lambda path: client.get(path, headers=support.bearer(given))


def republish(app, entry_id: int) -> None:
    response = app.test_client().post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                                      headers=support.bearer(token(app, "operator")))
    assert response.status_code == 200, response.get_json()


def exported(get, fmt: str) -> list[dict]:
    response = get(f"/api/export.{fmt}")
    assert response.status_code == 200
    body = response.get_data(as_text=True)
    return list(csv.DictReader(io.StringIO(body))) if fmt == "csv" else json.loads(body)


def cli(app, *args):
    result = app.test_cli_runner().invoke(args=["entries", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.both_databases
def test_a_valid_traceparent_links_its_trace_on_the_page_in_the_json_the_exports_and_the_command_line(
        make_app, nats_server, database_url):
    app = make_app(online=True, trace_url=TEMPLATE)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID], headers={"traceparent": TRACEPARENT})
    get = api(app)

    page = Page(support.logged_in(app, "viewer").get(f"/entries/{entry_id}").get_data(as_text=True))
    [link] = page.links
    assert link["href"] == URL and link["target"] == "_blank" and link["rel"] == "noopener noreferrer"
    detail = get(f"/api/entries/{entry_id}").get_json()
    assert (detail["trace_id"], detail["trace_url"]) == (TRACE, URL)
    [listed] = get("/api/entries").get_json()["entries"]
    assert (listed["trace_id"], listed["trace_url"]) == (TRACE, URL)
    for fmt in ("json", "csv"):
        [row] = exported(get, fmt)
        assert (row["trace_id"], row["trace_url"]) == (TRACE, URL), fmt
    shown = cli(app, "show", str(entry_id))
    assert f"trace_id:         {TRACE}" in shown and f"trace_url:        {URL}" in shown
    as_json = json.loads(cli(app, "show", str(entry_id), "--json"))
    assert (as_json["trace_id"], as_json["trace_url"]) == (TRACE, URL)


def test_the_link_text_names_the_trace_by_its_short_id(make_app, nats_server):
    app = make_app(online=True, trace_url=TEMPLATE)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID], headers={"TraceParent": TRACEPARENT})
    html = support.logged_in(app, "viewer").get(f"/entries/{entry_id}").get_data(as_text=True)

    assert f">Trace {TRACE[:8]}</a>" in html


def test_without_dlq_trace_url_the_trace_id_is_shown_as_text_and_trace_url_is_null(make_app, nats_server):
    app = make_app(online=True)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID], headers={"traceparent": TRACEPARENT})

    page = Page(support.logged_in(app, "viewer").get(f"/entries/{entry_id}").get_data(as_text=True))
    assert page.links == [] and page.ids == [TRACE]
    detail = api(app)(f"/api/entries/{entry_id}").get_json()
    assert (detail["trace_id"], detail["trace_url"]) == (TRACE, None)


@pytest.mark.parametrize("headers", [
    {"traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01"},
    {"traceparent": TRACEPARENT.upper()},
    {"traceparent": TRACEPARENT + "-extra"},
    {"traceparent": HOSTILE},
    {"X-Other": "1"},
], ids=["zero trace id", "upper case", "version 00 with a fifth part", "markup", "none"])
def test_an_invalid_or_missing_traceparent_shows_no_trace_anywhere(make_app, nats_server, headers):
    app = make_app(online=True, trace_url=TEMPLATE)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID], headers=headers)
    get = api(app)

    html = support.logged_in(app, "viewer").get(f"/entries/{entry_id}").get_data(as_text=True)
    page = Page(html)
    assert page.links == [] and page.ids == [] and "trace-link" not in html
    detail = get(f"/api/entries/{entry_id}").get_json()
    assert (detail["trace_id"], detail["trace_url"]) == (None, None)
    [row] = exported(get, "csv")
    assert (row["trace_id"], row["trace_url"]) == ("", "")
    assert "trace_id:" not in cli(app, "show", str(entry_id))


def test_a_hostile_traceparent_never_renders_as_markup(make_app, nats_server):
    # A later version may carry anything after the flags: the trace is valid, the rest is text.
    app = make_app(online=True, trace_url=TEMPLATE)
    later = f"cc-{TRACE}-00f067aa0ba902b7-01-{HOSTILE}"
    hostile, future = support.dead_letter_orders(app, nats_server.url, [VALID], headers={"traceparent": HOSTILE}) + \
        support.dead_letter_orders(app, nats_server.url, [VALID], headers={"traceparent": later})
    viewer = support.logged_in(app, "viewer")

    for entry_id in (hostile, future):
        html = viewer.get(f"/entries/{entry_id}").get_data(as_text=True)
        assert HOSTILE not in html and "<script>alert" not in html
        assert Page(html).scripts == 0
    [link] = Page(viewer.get(f"/entries/{future}").get_data(as_text=True)).links
    assert link["href"] == URL


@pytest.mark.both_databases
def test_a_viewer_does_not_see_a_trace_dlq_mask_hides_and_an_operator_does(make_app, nats_server, database_url):
    support.make_orders_stream(nats_server.url)
    app = make_app(online=True, trace_url=TEMPLATE, mask=("Traceparent",))
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID], headers={
        "traceparent": TRACEPARENT, "Dlq-Error": f"payment failed (trace {TRACE})"})
    operator_api = api(app, "operator")
    republish(app, entry_id)
    viewer, operator = support.logged_in(app, "viewer"), support.logged_in(app, "operator")
    get = api(app)

    html = viewer.get(f"/entries/{entry_id}").get_data(as_text=True)
    assert TRACE not in html and Page(html).links == [] and "Trace of the message sent" not in html
    detail = get(f"/api/entries/{entry_id}").get_json()
    assert (detail["trace_id"], detail["trace_url"]) == (None, None)
    assert detail["error"] == "payment failed (trace •••)" and TRACE not in json.dumps(detail)
    [listed] = get("/api/entries").get_json()["entries"]
    assert (listed["trace_id"], listed["trace_url"]) == (None, None)
    for fmt in ("json", "csv"):
        [row] = exported(get, fmt)
        assert row["trace_id"] in (None, "") and row["trace_url"] in (None, ""), fmt
        assert TRACE not in json.dumps(row)

    seen = Page(operator.get(f"/entries/{entry_id}").get_data(as_text=True))
    assert [a["href"] for a in seen.links] == [URL, URL]  # the entry's, and the republish's
    assert operator_api(f"/api/entries/{entry_id}").get_json()["trace_id"] == TRACE


def test_the_timeline_shows_the_trace_of_the_message_a_republish_sent(make_app, nats_server):
    support.make_orders_stream(nats_server.url)
    app = make_app(online=True, trace_url=TEMPLATE)
    traced, untraced = (support.dead_letter_orders(app, nats_server.url, [VALID], headers=headers)[0]
                        for headers in ({"traceparent": TRACEPARENT}, {"X-Tenant": "acme"}))
    for entry_id in (traced, untraced):
        republish(app, entry_id)
    sent = {m.headers.get("Dlq-Replay-Of"): m.headers for m in support.stream_messages(nats_server.url)}
    assert sent[f"DLQ:{traced}"]["traceparent"] == TRACEPARENT
    viewer = support.logged_in(app, "viewer")

    html = viewer.get(f"/entries/{traced}").get_data(as_text=True)
    timeline = html[html.index('id="timeline-title"'):]
    assert "Trace of the message sent" in timeline
    assert [a["href"] for a in Page(timeline).links] == [URL]
    other = viewer.get(f"/entries/{untraced}").get_data(as_text=True)
    assert "Trace of the message sent" not in other and Page(other).links == []


def test_an_entry_with_a_trace_matches_the_openapi_document(make_app, nats_server):
    import jsonschema

    from dlq_dashboard.web.openapi import openapi_document

    app = make_app(online=True, trace_url=TEMPLATE)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [VALID], headers={"traceparent": TRACEPARENT})
    detail = api(app)(f"/api/entries/{entry_id}").get_json()
    doc = openapi_document(app)

    validator = jsonschema.Draft202012Validator({**doc, "$ref": "#/components/schemas/EntryDetail"},
                                                format_checker=jsonschema.FormatChecker())
    validator.validate(detail)
    assert doc["components"]["schemas"]["Entry"]["properties"]["trace_url"]["type"] == ["string", "null"]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**detail, "trace_id": "not-a-trace-id"})
