"""The pages in a real browser (Debian's Chromium through Playwright) against a live server, a
real nats-server and the mirror: what a support person sees and clicks."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.runtime import runtime_of

from . import support
from .browser_support import COUNTED_SUMMARY

ORDER_SCHEMA = {"x-subjects": ["orders.*"], "type": "object", "required": ["order_id"],
                "properties": {"items": {"type": "array", "items": {"properties": {"price": {"type": "number"}}}}}}


@pytest.fixture
def app(tmp_path, make_app):
    """The running app (bridge and mirror) with a schema folder, for this module's live server."""
    folder = tmp_path / "schemas"
    folder.mkdir()
    (folder / "orders.json").write_text(json.dumps(ORDER_SCHEMA))
    return make_app(online=True, schemas_dir=str(folder))


def dead_letter_and_wait(app, nats_server, messages: list[tuple[str, bytes, dict]]) -> None:
    """Publish dead letters to the DLQ stream and wait until the mirror has stored them."""
    store = runtime_of(app).store
    before = len(list(store.iter_entries(EntryFilter())))
    support.run(support.publish_many(nats_server.url, messages), timeout=30)
    support.wait_for(lambda: len(list(store.iter_entries(EntryFilter()))) >= before + len(messages), timeout=15,
                     message="the mirror to store the dead letters")
    support.search_indexed(runtime_of(app).engine)  # the search pass runs behind the mirror


def rows(page):
    return page.locator("#entry-rows tr:not(.more)")


def test_the_list_shows_a_mirrored_dead_letter_and_search_narrows_it(app, nats_server, live_server, page):
    dead_letter_and_wait(app, nats_server, [
        ("dlq.orders.created", b'{"order_id": "o-1", "customer": "zebulon"}',
         support.dlq_headers("orders.created", Dlq_Reason="fatal", Dlq_Error="inventory unavailable")),
        ("dlq.payments.captured", b'{"customer": "quentin"}',
         support.dlq_headers("payments.captured", Dlq_Reason="max_deliveries", Dlq_Error="gateway timeout")),
    ])
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/")
    assert rows(page).count() == 2
    assert "orders.created" in rows(page).nth(1).inner_text()
    counts = page.locator(f"{COUNTED_SUMMARY} .counts")  # the counts and the chart arrive after the page
    counts.wait_for()
    assert "2" in counts.inner_text()

    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "q"
    page.keyboard.type("zebul")
    expect(rows(page)).to_have_count(1)
    assert "orders.created" in rows(page).first.inner_text()
    page.wait_for_url(lambda url: "q=zebul" in url)


def test_new_dead_letters_are_announced_and_shown_on_request(app, nats_server, live_server, page):
    dead_letter_and_wait(app, nats_server, [("dlq.orders.created", b"{}", support.dlq_headers("orders.created"))])
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/")
    assert rows(page).count() == 1
    dead_letter_and_wait(app, nats_server, [("dlq.orders.updated", b"{}", support.dlq_headers("orders.updated"))])
    announcement = page.get_by_text("1 new — show")
    announcement.wait_for(timeout=15_000)
    assert rows(page).count() == 1  # nothing moved under the reader
    announcement.click()
    expect(rows(page)).to_have_count(2)


def test_the_detail_shows_the_schema_error_beside_the_payload_with_the_field_marked(app, nats_server, live_server, page):
    payload = json.dumps({"order_id": "o-7", "items": [{"sku": "gizmo", "price": "12.50"}]}).encode()
    errors = json.dumps([{"path": "/items/0/price", "message": "'12.50' is not of type 'number'"}])
    dead_letter_and_wait(app, nats_server, [("dlq.orders.created", payload, support.dlq_headers(
        "orders.created", Dlq_Reason="schema_invalid", Dlq_Schema_Errors=errors))])
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/")
    rows(page).first.locator("a").first.click()
    page.wait_for_url(lambda url: "/entries/" in url)
    mark = page.locator(".payload mark#mark-0")
    assert '"price": "12.50"' in mark.inner_text()
    error = page.locator(".why .schema-errors li").first
    assert "/items/0/price" in error.inner_text() and "is not of type 'number'" in error.inner_text()
    payload_box = page.locator("section.payload").bounding_box()
    errors_box = page.locator("section.why").bounding_box()
    assert payload_box["x"] + payload_box["width"] <= errors_box["x"] + 1  # side by side at 1280 px
    assert abs(payload_box["y"] - errors_box["y"]) < 5
    error.locator("a").click()
    page.wait_for_url(lambda url: url.endswith("#mark-0"))


HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(2)>', "</textarea><img src=x onerror=alert(3)>",
           "{{7*7}}", '<div hx-get="/logout" hx-trigger="load">gone</div>', '<a hx-on:click="alert(4)" id="evil">x</a>',
           "<svg onload=alert(5)>"]


def test_hostile_dead_letters_trigger_no_dialog_and_no_request(app, nats_server, live_server, page):
    messages = []
    for i, evil in enumerate(HOSTILE):
        headers = support.dlq_headers(evil, Dlq_Reason=evil, Dlq_Error=evil, Dlq_Consumer=evil, X_Evil=evil,
                              Dlq_Schema_Errors=json.dumps([{"path": "/" + evil, "message": evil}]))
        messages.append((f"dlq.evil.{i}", json.dumps({"order_id": evil, evil: [evil]}).encode(), headers))
    messages.append(("dlq.evil.raw", HOSTILE[1].encode() + b"\xff", support.dlq_headers("orders.created")))
    dead_letter_and_wait(app, nats_server, messages)
    support.sign_in(page, live_server, app, "viewer")

    dialogs, requests, violations = [], [], []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None)
    visited = ["/", "/?q=alert", "/groups?status="] + [
        f"/entries/{e.id}" for e in runtime_of(app).store.list_entries(EntryFilter()).entries]
    for path in visited:
        page.goto(f"{live_server}{path}")
        page.wait_for_load_state("networkidle")
    assert dialogs == []
    assert violations == []
    for url in requests:
        assert url.startswith(live_server), url
        path = url[len(live_server):]
        assert not path.startswith("/logout") and path.split("?")[0] not in ("/x", "/entries/x"), path
    assert page.evaluate("document.getElementById('evil')") is None
    page.goto(f"{live_server}/?q=7")
    assert "{{7*7}}" in page.locator("#entry-rows").inner_text()


@pytest.mark.parametrize("path, list_path", [("/", "/"), ("/groups", "/groups")])
def test_changing_the_status_sends_one_request_and_adds_one_history_entry(app, nats_server, live_server, page,
                                                                          path, list_path):
    dead_letter_and_wait(app, nats_server, [("dlq.orders.created", b"{}", support.dlq_headers("orders.created"))])
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}{path}")
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.url.split("?")[0] == f"{live_server}{list_path}" else None)
    went_back = False
    for value, back in (("closed", False), ("open", False), ("republished", True), ("", False)):
        sent.clear()
        length = page.evaluate("history.length")
        with page.expect_response(lambda r: r.url.split("?")[0] == f"{live_server}{list_path}"):
            page.select_option("select[name=status]", value)
        # htmx pushes the address after it swapped the answer in.
        page.wait_for_url(lambda url: parse_qs(urlsplit(url).query).get("status", [""])[0] == value)
        page.wait_for_load_state("networkidle")
        assert len(sent) == 1, f"status {value!r} sent {sent}"
        assert f"status={value}" in sent[0]
        # One entry pushed; after going back it takes the place of the one ahead.
        assert page.evaluate("history.length") == length + (0 if went_back else 1)
        went_back = back
        if back:  # a page restored from history sends one request a change too
            with page.expect_response(lambda r: r.url.split("?")[0] == f"{live_server}{list_path}"):
                page.go_back()
            page.wait_for_url(lambda url: parse_qs(urlsplit(url).query).get("status", [""])[0] == "open")
            # The address changes before the restored page is swapped in (the answer's headers can
            # be in before its body), and the load state of this document is reached already: a
            # choice made on the page going away is lost with it. The restored choice says it is in.
            page.wait_for_function("document.querySelector('select[name=status]').value === 'open'")
            page.wait_for_load_state("networkidle")


@pytest.mark.parametrize("path", ["/", "/groups"])
def test_arrow_keys_walking_the_status_choice_send_one_request_for_where_they_stop(app, nats_server, live_server,
                                                                                 page, path):
    """Arrow keys on the status choice change it at each press: the list was asked once a press
    (each answer thrown away for the next), a burst of work on a big desk for one choice."""
    dead_letter_and_wait(app, nats_server, [("dlq.orders.created", b"{}", support.dlq_headers("orders.created"))])
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}{path}")
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.url.split("?")[0] == f"{live_server}{path}" else None)
    choices = page.eval_on_selector_all("select[name=status] option", "options => options.map(o => o.value)")
    chosen = choices[3]
    with page.expect_response(lambda r: r.url.split("?")[0] == f"{live_server}{path}"):
        # Three presses as the browser gives them (a change each), at once: a test's key presses
        # can be further apart than a person's under a loaded machine.
        page.eval_on_selector("select[name=status]", """select => { select.selectedIndex = 0;
            for (let i = 1; i <= 3; i++) { select.selectedIndex = i; select.dispatchEvent(new Event("change", {bubbles: true})); } }""")
    page.wait_for_url(lambda url: parse_qs(urlsplit(url).query).get("status", [""])[0] == chosen)
    page.wait_for_load_state("networkidle")
    assert len(sent) == 1 and f"status={chosen}" in sent[0], sent


def test_a_filter_typed_and_entered_adds_one_history_entry_and_the_exports_follow_it(app, nats_server, live_server,
                                                                                     page):
    """Typing a reason and pressing Enter sent two requests and pushed two history entries (the
    field's change and the form's submit): Back stayed on the same list. And the exports' links,
    outside the results htmx swaps, still exported every entry."""
    dead_letter_and_wait(app, nats_server, [
        ("dlq.orders.created", b"{}", support.dlq_headers("orders.created", Dlq_Reason="fatal")),
        ("dlq.orders.created", b"{}", support.dlq_headers("orders.created", Dlq_Reason="schema_invalid"))])
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/")
    page.wait_for_load_state("networkidle")
    length = page.evaluate("history.length")
    page.fill("input[name=reason]", "fatal")
    page.press("input[name=reason]", "Enter")
    page.wait_for_url(lambda url: parse_qs(urlsplit(url).query).get("reason") == ["fatal"])
    page.wait_for_load_state("networkidle")
    assert page.evaluate("history.length") == length + 1
    expect(rows(page)).to_have_count(1)
    href = page.get_by_role("link", name="CSV").get_attribute("href")
    assert parse_qs(urlsplit(href).query).get("reason") == ["fatal"], href
    expect(page.get_by_role("link", name="Clear filters")).to_be_visible()
    with page.expect_download() as download:
        page.get_by_role("link", name="CSV").click()
    assert download.value.path().read_text().count("\n") == 2  # the header and the one entry
    page.go_back()
    page.wait_for_url(lambda url: "reason" not in url)
