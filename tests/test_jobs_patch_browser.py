"""One JSON Patch for many, as an operator clicks it in Debian's Chromium: the list's bulk bar,
the patch form, its preview, Start, and the job's page."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from . import browser_support, support

SCHEMA = {"x-subjects": ["orders.*"], "type": "object", "required": ["order_id", "price"],
          "properties": {"price": {"type": "number"}}}


@pytest.fixture
def settings(tmp_path, nats_server):
    """The orders schema with a numeric price."""
    return support.make_settings(tmp_path, nats_server.url, schemas_dir=support.orders_schema_folder(tmp_path, SCHEMA),
                                 republish_rate=500)


def test_an_operator_previews_a_patch_for_the_list_and_starts_it(app, live_server, page, nats_server):
    support.make_orders_stream(nats_server.url)
    # Long values: the preview's diff must wrap, never widen the page.
    payloads = [json.dumps({"order_id": f"o-{i}", "price": "12.50", "note": "x" * 400}).encode() for i in range(10)]
    ids = support.dead_letter_orders(app, nats_server.url, payloads + [b"not json"])
    support.sign_in(page, live_server, app, "operator")
    page.goto(f"{live_server}/?subject=orders.created")

    by_filter = page.locator("form:has(input[name=by][value=filter])")
    by_filter.locator("select[name=action]").select_option("patch")
    by_filter.get_by_role("button", name="Preview for all matching").click()
    expect(page.get_by_role("heading", name="Patch and republish")).to_be_visible()
    expect(page.locator("main")).to_contain_text("11 entries are selected")
    expect(page.get_by_label("only those that then pass the current schema")).to_be_checked()

    page.get_by_label("JSON Patch (RFC 6902)").fill('[{"op": "replace", "path": "/price", "value": 12.5}]')
    page.get_by_role("button", name="Preview the patch").click()
    preview = page.locator(".patch-preview")
    expect(preview).to_contain_text("10 would then pass the current schema and be republished")
    expect(preview).to_contain_text("1 cannot be patched and would be skipped")
    expect(preview.locator("pre.patch-diff .add").first).to_have_text('+  "price": 12.5,')
    expect(preview.locator("pre.patch-diff .del").first).to_have_text('-  "price": "12.50",')
    assert support.stream_messages(nats_server.url) == []
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        browser_support.assert_fits(page, "the preview")
    page.set_viewport_size({"width": 1280, "height": 900})

    preview.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    expect(page.locator(".job-state")).to_contain_text("Finished: 10 done, 0 failed, 1 skipped", timeout=20_000)
    expect(page.locator("pre.patch-text")).to_contain_text('"path": "/price"')
    expect(page.locator(".job-items")).to_contain_text("The payload is not JSON")
    published = support.stream_messages(nats_server.url)
    assert len(published) == 10 and all(json.loads(m.data)["price"] == 12.5 for m in published)

    page.goto(f"{live_server}/entries/{ids[0]}")
    expect(page.locator("section.timeline")).to_contain_text("Republished with a JSON Patch to orders.created")


def test_hostile_payloads_and_patches_are_only_text_on_the_preview_the_job_and_the_timeline(
        app, live_server, page, nats_server):
    from .test_xss_browser import CORPUS, INJECTED, Watch, visit

    support.make_orders_stream(nats_server.url)
    payloads = [json.dumps({"order_id": text, "price": "1"}).encode() for text in CORPUS[:6]]
    ids = support.dead_letter_orders(app, nats_server.url, payloads + ["\n".join(CORPUS).encode()])
    patch = [{"op": "replace", "path": "/price", "value": 1}, {"op": "add", "path": "/note", "value": CORPUS[1]},
             {"op": "add", "path": "/" + CORPUS[0].replace("/", "~1"), "value": CORPUS[3]}]
    support.sign_in(page, live_server, app, "operator")
    watch = Watch(page, app, live_server)
    visit(page, watch, f"{live_server}/?subject=orders.created")
    by_filter = page.locator("form:has(input[name=by][value=filter])")
    by_filter.locator("select[name=action]").select_option("patch")
    by_filter.get_by_role("button", name="Preview for all matching").click()
    page.get_by_label("JSON Patch (RFC 6902)").fill(json.dumps(patch))
    page.get_by_role("button", name="Preview the patch").click()
    expect(page.locator(".patch-preview")).to_contain_text("6 would then pass the current schema")

    def only_text() -> str:
        assert page.evaluate(INJECTED) == [], "a payload or the patch became markup"
        # The forms' own POSTs aside, nothing was requested that the page did not ask for.
        ours = (f"POST {live_server}/bulk/preview", f"POST {live_server}/bulk")
        assert [r for r in watch.unexpected_requests() if r not in ours] == []
        assert watch.dialogs == [] and watch.csp == []
        watch.requests.clear()
        return page.evaluate("document.body.innerText")

    text = only_text()
    assert CORPUS[0] in text and CORPUS[1] in text and CORPUS[3] in text
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    expect(page.locator(".job-state")).to_contain_text("Finished: 6 done, 0 failed, 1 skipped", timeout=20_000)
    only_text()
    assert CORPUS[1] in visit(page, watch, page.url)
    assert CORPUS[3] in visit(page, watch, f"{live_server}/entries/{ids[0]}")
