"""A hostile payload is only ever text: entries whose payload, subject, headers and errors are
XSS and htmx-injection strings, opened in Chromium on the list, groups and detail pages."""

from __future__ import annotations

import json
from urllib.parse import urlencode, urlsplit

import pytest

from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.runtime import runtime_of

from . import support

ELSEWHERE = "http://127.0.0.1:9"  # nothing listens there; a request to it would be an injection
CORPUS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "'><svg onload=alert(3)>",
    "</textarea><script>alert(4)</script>",
    "</pre><script>alert(5)</script><pre>",
    "</td></tr></table><script>alert(6)</script>",
    "{{7*7}} ${7*7} {% if 1 %}49{% endif %}",
    f'<div hx-get="{ELSEWHERE}/htmx" hx-trigger="load">htmx get</div>',
    '<a hx-on:click="alert(7)" hx-trigger="load" href="#">hx-on</a>',
    '<button hx-post="/logout" hx-trigger="load">logout</button>',
    '<div hx-get="/api/entries?stolen=1" hx-trigger="load" hx-target="body">same origin</div>',
    "javascript:alert(8)",
    '<a href="javascript:alert(9)">link</a>',
    f'<iframe src="{ELSEWHERE}/frame"></iframe>',
    f'<img src="{ELSEWHERE}/img.png">',
    f"<style>@import '{ELSEWHERE}/css';</style>",
    f'<base href="{ELSEWHERE}/">',
    f'<meta http-equiv="refresh" content="0;url={ELSEWHERE}/meta">',
    f'<form action="{ELSEWHERE}/form"><button>go</button></form>',
    "<!-- unclosed comment",
    "<![CDATA[ ]]> &lt;escaped&gt; &amp;amp;",
    '<math><mtext><table><mglyph><style><img src=x onerror=alert(10)>',
]
# Subjects cannot contain spaces, so these are space-free.
HOSTILE_SUBJECT = "orders.<svg/onload=alert(11)>"
HOSTILE_REASON = '<b/onmouseover=alert(12)>fatal</b>'
# Long enough that the groups page lets it break after its dots.
LONG_HOSTILE_SUBJECT = "orders.<img/src=x/onerror=alert(15)>.<svg/onload=alert(16)>.created"


@pytest.fixture
def settings(tmp_path, nats_server):
    """The test's settings plus a schema for orders.*, so the detail page shows schema errors, and
    key fields, so the list shows payload values as columns."""
    return support.make_settings(tmp_path, nats_server.url, list_fields=(("customer", "/customer_id"), ("note", "/note")),
                                 schemas_dir=support.orders_schema_folder(tmp_path, {
        "$schema": "https://json-schema.org/draft/2020-12/schema", "x-subjects": ["orders.*"],
        "type": "object", "required": ["customer_id"],
        "properties": {"customer_id": {"type": "integer"}, "note": {"type": "string", "maxLength": 3}},
    }))


def message(seq: int, subject: str, payload: bytes, **headers: str) -> StreamMessage:
    return StreamMessage(seq, f"dlq.{subject}", {"Dlq-Original-Subject": subject, **headers}, payload, None)


@pytest.fixture
def hostile_entries(app):
    """One entry per corpus string as its error, one carrying everything, one JSON payload."""
    messages = [message(i + 1, "orders.created", f"payload {i}".encode(), **{"Dlq-Error": text,
                                                                             "Dlq-Reason": "fatal"})
                for i, text in enumerate(CORPUS)]
    everything = {f"X-Hostile-{i}": text for i, text in enumerate(CORPUS)}
    everything.update({"Dlq-Error": CORPUS[1], "Dlq-Reason": HOSTILE_REASON, "Dlq-Consumer": CORPUS[2],
                       "Dlq-Original-Msg-Id": CORPUS[7], "Dlq-Replay-Of": CORPUS[3],
                       "X-<svg/onload=alert(13)>": CORPUS[0]})
    big = len(CORPUS) + 1
    messages.append(message(big, HOSTILE_SUBJECT, "\n".join(CORPUS).encode(), **everything))
    payload = json.dumps({"customer_id": CORPUS[1], "note": CORPUS[3], CORPUS[0]: CORPUS[9]}).encode()
    schema_errors = json.dumps([{"path": "/customer_id", "message": CORPUS[0]},
                                {"path": "/<img src=x onerror=alert(14)>", "message": CORPUS[7]}])
    messages.append(message(big + 1, "orders.created", payload, **{
        "Dlq-Reason": "schema_invalid", "Dlq-Error": CORPUS[5], "Dlq-Schema-Errors": schema_errors}))
    messages.append(message(big + 2, LONG_HOSTILE_SUBJECT, b"{}", **{"Dlq-Error": CORPUS[0]}))
    engine = runtime_of(app).engine
    ingest_dlq_batch(engine, "XSS", "e1", messages)
    entries = runtime_of(app).store.list_entries(EntryFilter(limit=100)).entries
    by_seq = {e.dlq_seq: e.id for e in entries}
    return {"everything": by_seq[big], "json": by_seq[big + 1], "first": by_seq[1]}


class Watch:
    """What a page did: dialogs, requests, and CSP complaints."""

    def __init__(self, page, app, base_url: str):
        self.dialogs, self.requests, self.csp = [], [], []
        self.app, self.base = app, urlsplit(base_url)
        page.on("dialog", self._dialog)
        page.on("request", lambda r: self.requests.append((r.method, r.url)))
        page.on("console", lambda m: self.csp.append(m.text) if "Content Security Policy" in m.text else None)

    def _dialog(self, dialog):
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def unexpected_requests(self) -> list[str]:
        """Requests that are not a same-origin GET of one of the app's own routes."""
        adapter = self.app.url_map.bind(self.base.netloc)
        bad = []
        for method, url in self.requests:
            parts = urlsplit(url)
            if parts.scheme == "data":
                continue
            if method != "GET" or parts.netloc != self.base.netloc or "stolen" in url:
                bad.append(f"{method} {url}")
                continue
            try:
                adapter.match(parts.path, method="GET")
            except Exception:
                if parts.path != "/favicon.ico":
                    bad.append(f"{method} {url}")
        return bad


# Elements or attributes that exist only if a payload became markup.
INJECTED = """() => [...document.querySelectorAll(
  'script:not([src]):not([type="application/json"]), iframe, base, meta[http-equiv], [onerror], [onload],' +
  ' [onclick], [onmouseover], img[src="x"], [hx-on\\\\:click], [hx-get^="http"], [hx-get*="stolen"],' +
  ' [hx-post="/logout"][hx-trigger], math, a[href^="javascript:"], form[action^="http"]'
)].map(e => e.outerHTML.slice(0, 120))"""


def visit(page, watch: Watch, url: str) -> str:
    page.goto(url, wait_until="networkidle")
    assert urlsplit(page.url).netloc == watch.base.netloc, f"{url}: the page navigated to {page.url}"
    assert "/login" not in page.url, f"{url} sent the browser to log in"
    injected = page.evaluate(INJECTED)
    assert injected == [], f"{url}: payload became markup: {injected}"
    assert watch.dialogs == [], f"{url}: a dialog opened: {watch.dialogs}"
    assert watch.unexpected_requests() == [], f"{url}: unexpected requests"
    assert watch.csp == [], f"{url}: the Content-Security-Policy blocked something: {watch.csp}"
    return page.evaluate("document.body.innerText")


def test_hostile_entries_are_only_text_on_the_list_page(app, live_server, page, hostile_entries):
    support.sign_in(page, live_server, app, "operator")
    watch = Watch(page, app, live_server)
    text = visit(page, watch, f"{live_server}/?limit=100")
    for raw in CORPUS:
        assert raw[:24] in text, f"the list does not show {raw!r} as text"
    assert HOSTILE_SUBJECT in text
    # Key fields, the payload snippet, the consumer and the msgId are text too, and filter as text.
    row = page.locator(f'tr[data-id="{hostile_entries["json"]}"]')
    assert row.locator("td.key-field").all_text_contents() == [CORPUS[1], CORPUS[3]]
    assert CORPUS[1].replace('"', '\\"') in row.locator("td.snippet").text_content()
    everything = page.locator(f'tr[data-id="{hostile_entries["everything"]}"]')
    assert everything.locator("td.consumer").text_content() == CORPUS[2]
    assert everything.locator("td.msg-id").text_content() == CORPUS[7]
    visit(page, watch, f"{live_server}/?" + urlencode({"field.note": CORPUS[3]}))
    assert page.locator("tr[data-row-url]").count() == 1
    assert page.locator('#filters input[name="field.note"]').input_value() == CORPUS[3]


def test_hostile_entries_are_only_text_on_the_groups_page(app, live_server, page, hostile_entries):
    support.sign_in(page, live_server, app, "operator")
    watch = Watch(page, app, live_server)
    text = visit(page, watch, f"{live_server}/groups?status=")
    assert HOSTILE_SUBJECT in text and HOSTILE_REASON in text and LONG_HOSTILE_SUBJECT in text
    # A group shows its label: the error with numbers and quoted values left out, as text; the
    # key itself in a details element.
    from dlq_dashboard.entries.groups import group_label
    from dlq_dashboard.ingest.grouping import normalize_error_text

    keys = page.evaluate("[...document.querySelectorAll('.error-text')].map(e => e.querySelector('.group-key code')"
                         "?.textContent ?? e.querySelector('.group-label').textContent)")
    for raw in CORPUS:
        assert group_label(normalize_error_text(raw))[:24] in text, f"the groups do not show {raw!r} as text"
        assert normalize_error_text(raw) in keys
    # The operator's Republish, Close, Patch (and, on a group of schema failures, Repair) forms
    # carry the group's filter, and nothing else.
    rows = page.locator("table.groups tbody tr")
    schema_rows = rows.filter(has=page.locator("td", has_text="schema_invalid")).count()
    assert page.locator("form[action='/bulk/preview']").count() == 3 * rows.count() + schema_rows
    assert page.locator("form[action='/bulk/preview']:has(input[value=repair])").count() == schema_rows


def test_a_hostile_patch_its_preview_and_its_job_are_only_text(app, live_server, page, hostile_entries):
    from dlq_dashboard.actions.bulk import jobs

    patch = [{"op": "add", "path": "/" + CORPUS[0].replace("/", "~1"), "value": CORPUS[1]},
             {"op": "add", "path": "/note", "value": CORPUS[4]}]
    support.sign_in(page, live_server, app, "operator")
    watch = Watch(page, app, live_server)
    visit(page, watch, f"{live_server}/?status=open&reason=schema_invalid")  # the JSON entry
    by_filter = page.locator("form:has(input[name=by][value=filter])")
    by_filter.locator("select[name=action]").select_option("patch")
    by_filter.get_by_role("button", name="Preview for all matching").click()
    page.get_by_label("JSON Patch (RFC 6902)").fill(json.dumps(patch))
    page.get_by_role("button", name="Preview the patch").click()
    page.locator(".patch-preview").wait_for()
    text = page.evaluate("document.body.innerText")
    assert page.evaluate(INJECTED) == [] and watch.dialogs == [] and watch.csp == []
    assert json.dumps(CORPUS[4]) in text and json.dumps(CORPUS[0]) in text  # the diff of the JSON entry
    # The preview of the list's form is asked by GET (it writes nothing), the patch's by POST.
    previews = [r for r in watch.requests if r[1].split("?")[0] == f"{live_server}/bulk/preview"]
    assert [r[0] for r in previews] == ["GET", "POST"]
    watch.requests.clear()
    job_id = jobs.create_job(runtime_of(app), "patch", actor=CORPUS[2], ids=[hostile_entries["json"]],
                             patch=patch, note=CORPUS[9], only_valid=False, start=False)
    text = visit(page, watch, f"{live_server}/jobs/{job_id}")
    assert CORPUS[2] in text and CORPUS[9] in text and json.dumps(CORPUS[4]) in text


def test_a_hostile_entry_is_only_text_on_its_detail_page(app, live_server, page, hostile_entries):
    support.sign_in(page, live_server, app, "operator")
    watch = Watch(page, app, live_server)
    text = visit(page, watch, f"{live_server}/entries/{hostile_entries['everything']}")
    for raw in CORPUS:  # every payload line and every header value, verbatim
        assert raw in text, f"the detail page does not show {raw!r} as text"
    for raw in (HOSTILE_SUBJECT, HOSTILE_REASON, "X-<svg/onload=alert(13)>"):
        assert raw in text
    shown = page.evaluate("""(payload) => [...document.querySelectorAll('pre, code, textarea')]
                              .some(e => (e.value ?? e.textContent) === payload)""", "\n".join(CORPUS))
    assert shown, "no element shows the payload exactly as it arrived"


def test_hostile_schema_errors_and_json_fields_are_only_text(app, live_server, page, hostile_entries):
    support.sign_in(page, live_server, app, "operator")
    watch = Watch(page, app, live_server)
    text = visit(page, watch, f"{live_server}/entries/{hostile_entries['json']}")
    assert CORPUS[5] in text  # the error
    # Both schema errors the message carried, each path beside its message, verbatim as text
    # (the headers table shows the header too, JSON-escaped: not what is checked here).
    shown = page.locator("h3:has-text('Schema errors in the message') + ol > li").all_inner_texts()
    assert len(shown) == 2, shown
    for item, (path, message) in zip(shown, [("/customer_id", CORPUS[0]),
                                             ("/<img src=x onerror=alert(14)>", CORPUS[7])]):
        assert path in item and message in item, f"the schema error {path!r}: {message!r} is not text in {item!r}"


def test_the_edit_form_keeps_a_hostile_payload_inside_its_textarea(app, live_server, page, hostile_entries):
    support.sign_in(page, live_server, app, "operator")
    watch = Watch(page, app, live_server)
    visit(page, watch, f"{live_server}/entries/{hostile_entries['everything']}/edit")
    values = page.evaluate("[...document.querySelectorAll('textarea')].map(t => t.value)")
    assert "\n".join(CORPUS) in values


def test_a_hostile_nats_error_in_the_stale_data_banner_and_the_disabled_buttons_is_only_text(
        app, live_server, page, hostile_entries, monkeypatch):
    # The banner shows the bridge's last error; it comes from nats-py and the configured URLs, not
    # from a payload, but it is server text all the same. Here it is hostile, and stays text
    # through the first render, the poll's swap and the buttons' titles that static/app.js sets.
    from dlq_dashboard.times import utcnow
    from dlq_dashboard.web import status, templating

    hostile = " ".join(CORPUS)
    down = status.ServiceStatus(False, utcnow(), hostile, (status.StreamLag("DLQ", 7, utcnow()),))
    monkeypatch.setattr(status, "service_status", lambda rt: down)
    monkeypatch.setattr(templating, "service_status", lambda rt: down)
    support.sign_in(page, live_server, app, "operator")
    watch = Watch(page, app, live_server)
    text = visit(page, watch, f"{live_server}/entries/{hostile_entries['first']}")
    assert hostile in text and "The list is behind NATS" in text
    # Take the titles away: the next poll's swap and app.js put them back, from the marker's text.
    page.evaluate("document.querySelectorAll('[data-needs-nats]').forEach(e => e.removeAttribute('title'))")
    support.wait_for(lambda: page.evaluate("[...document.querySelectorAll('[data-needs-nats]')].every(e => e.title)"),
                     timeout=10, message="the poll to disable the buttons again")
    assert page.evaluate(INJECTED) == [] and watch.dialogs == [] and watch.csp == []
    assert watch.unexpected_requests() == []
    assert hostile in page.evaluate("document.body.innerText")
    title = page.get_by_role("button", name="Republish", exact=True).get_attribute("title")
    assert title == f"NATS is not reachable ({hostile})"
    reasons = page.evaluate("[...document.querySelectorAll('[data-needs-nats-reason]')].map(e => e.textContent)")
    assert reasons and all(r == f"NATS is not reachable ({hostile})" for r in reasons)


def test_hostile_saved_view_names_and_filters_are_only_text(app, live_server, page):
    from urllib.parse import urlencode

    from dlq_dashboard.entries.saved_views import save_view, share_view
    from dlq_dashboard.times import utcnow

    engine = runtime_of(app).engine
    for i, text in enumerate(CORPUS):
        for view_page in ("list", "groups"):
            view = save_view(engine, "someone", text[:100], view_page, urlencode({"q": text}), utcnow())
            share_view(engine, view.id, True)
    support.sign_in(page, live_server, app, "admin")
    watch = Watch(page, app, live_server)
    for path in ("/", "/groups", "/views", f"/?{urlencode({'q': CORPUS[1]})}"):
        text = visit(page, watch, live_server + path)
        for raw in CORPUS:
            assert raw[:24] in text, f"{path} does not show the view named {raw!r} as text"


def test_a_hostile_edit_is_only_text_in_the_editor_the_diff_and_the_timeline(app, live_server, page, hostile_entries,
                                                                             nats_server):
    from dlq_dashboard.actions.republish import republish_entry
    from dlq_dashboard.web.presenters.payloads import display_form

    support.make_orders_stream(nats_server.url)
    entry_id = hostile_entries["json"]
    support.sign_in(page, live_server, app, "operator")
    watch = Watch(page, app, live_server)
    visit(page, watch, f"{live_server}/entries/{entry_id}/edit")
    sent = json.dumps({"customer_id": 1, "note": CORPUS, CORPUS[0]: "\n".join(CORPUS)}, ensure_ascii=False).encode()
    page.locator("#payload").fill(sent.decode())
    page.locator("#payload-check .diff").wait_for()
    diff = page.evaluate("document.querySelector('#payload-check .diff').textContent")
    assert json.dumps(CORPUS[3], ensure_ascii=False) in diff and page.evaluate(INJECTED) == []

    posts = [r for r in watch.requests if r[0] == "POST"]
    assert posts and set(posts) == {("POST", f"{live_server}/entries/{entry_id}/validate")}
    watch.requests.clear()  # the editor's own check, nothing else

    republish_entry(runtime_of(app), entry_id, 1, actor=CORPUS[1], payload=sent, force=True)
    text = visit(page, watch, f"{live_server}/entries/{entry_id}")
    assert CORPUS[1] in text and "Edited and republished" in text
    shown = page.evaluate("document.querySelector('.sent-payload pre').textContent")
    assert shown == display_form(sent)
    diff = page.evaluate("document.querySelector('.edit-diff .diff').textContent")
    assert f'+    {json.dumps(CORPUS[7], ensure_ascii=False)},' in diff


def test_hostile_jobs_audit_rows_and_list_context_are_only_text(app, live_server, page, hostile_entries, monkeypatch):
    from dlq_dashboard.actions.bulk import jobs

    rt = runtime_of(app)
    # The runner's recovery starts every queued job every few seconds: not this one before its cancel.
    monkeypatch.setattr(rt.jobs, "resume_unfinished", lambda: None)
    done = jobs.create_job(rt, "close", actor=CORPUS[1], note=CORPUS[0], filter_args={"reason": HOSTILE_REASON})
    cancelled = jobs.create_job(rt, "close", actor=CORPUS[7], ids=[hostile_entries["json"]], start=False)
    jobs.cancel_job(rt, cancelled, actor=CORPUS[9])
    rt.jobs.submit(cancelled)
    support.wait_for(lambda: all(jobs.job_status(rt, j, limit=0)["state"] in jobs.FINISHED for j in (done, cancelled)),
                     message="the jobs to end")
    support.sign_in(page, live_server, app, "operator")
    watch = Watch(page, app, live_server)
    text = visit(page, watch, f"{live_server}/jobs")
    assert CORPUS[1] in text and CORPUS[7] in text and CORPUS[9] in text and HOSTILE_REASON in text
    text = visit(page, watch, f"{live_server}/jobs/{done}")
    assert CORPUS[0] in text and HOSTILE_REASON in text
    visit(page, watch, f"{live_server}/audit")
    page.locator(f'tr.audit-job[data-job="{done}"] + tr summary').click()
    page.locator(".job-items-page").first.wait_for()
    assert page.evaluate(INJECTED) == [] and watch.unexpected_requests() == [] and watch.csp == []
    # The list's filters ride to the entry page: its crumbs and links show them as text.
    query = "&".join(f"{k}={v}" for k, v in (("q", "script"), ("reason", HOSTILE_REASON)))
    text = visit(page, watch, f"{live_server}/entries/{hostile_entries['first']}?{query}")
    assert f"reason={HOSTILE_REASON}" in text


def test_a_group_page_with_hostile_notes_and_names_is_only_text_and_its_forms_work(app, live_server, page,
                                                                                   hostile_entries):
    from dlq_dashboard.actions.triage import add_note, change_state, parse_state_change
    from dlq_dashboard.times import utcnow

    engine = runtime_of(app).engine
    group_id = runtime_of(app).store.group_of(hostile_entries["everything"])[0]
    for text in CORPUS:
        add_note(engine, group_id, text, actor=CORPUS[1][:40])
    change_state(engine, group_id, 1, parse_state_change({"state": "resolved", "resolved_in": CORPUS[0],
                                                          "note": CORPUS[9]}, utcnow()), actor="ops")
    support.sign_in(page, live_server, app, "operator")
    watch = Watch(page, app, live_server)
    text = visit(page, watch, f"{live_server}/groups/{group_id}")
    for raw in CORPUS:
        assert raw.strip()[:24] in text, f"the group page does not show {raw!r} as text"
    assert HOSTILE_SUBJECT in text and CORPUS[0] in text
    # Assign to me, through the page's own form (with its CSRF token), back on the page.
    page.get_by_role("button", name="Assign to me").click()
    page.wait_for_load_state("networkidle")
    assert page.locator(".group-state-now .assignee").text_content() == "operator-browser"
    text = visit(page, Watch(page, app, live_server), f"{live_server}/groups/{group_id}")  # after its own POST
    assert "investigating" in text
