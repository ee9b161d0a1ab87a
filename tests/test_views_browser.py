"""Saved views and DLQ_MASK in a real browser: a viewer sees "•••" for a masked field, and a view
saved from the list opens with its filters from its name beside them."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect


from . import support

EMAIL = "quentin.private@example.com"


@pytest.fixture
def app(make_app):
    """The app with DLQ_MASK set, over a database the tests fill directly (no NATS needed)."""
    return make_app(mask=("/customer/email",))


def test_a_viewers_detail_page_shows_dots_for_a_masked_field(app, live_server, page):
    payload = json.dumps({"order_id": 1, "customer": {"email": EMAIL, "name": "Quentin"}}).encode()
    entry_id = support.dead_letter(app, 1, payload=payload, Dlq_Error=f"no account for {EMAIL}")
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/entries/{entry_id}")
    shown = page.locator(".payload pre").inner_text()
    assert '"email": "•••"' in shown and "Quentin" in shown
    assert EMAIL not in page.evaluate("document.documentElement.outerHTML")
    assert "no account for •••" in page.locator(".facts").inner_text()


def test_a_view_saved_from_the_list_opens_with_its_filters_from_its_name(app, live_server, page):
    support.dead_letter(app, 1, subject="orders.created", Dlq_Reason="fatal", Dlq_Error="stock gone")
    support.dead_letter(app, 2, subject="payments.captured", Dlq_Reason="fatal", Dlq_Error="card declined")
    support.sign_in(page, live_server, app, "viewer")
    page.goto(f"{live_server}/")
    rows = page.locator("#entry-rows tr:not(.more)")
    expect(rows).to_have_count(2)
    page.fill("#filters input[name=subject]", "payments.*")
    page.locator("#filters input[name=subject]").dispatch_event("change")
    expect(rows).to_have_count(1)
    page.fill(".save-view input[name=name]", "Payments")
    # Leaving the subject box sends the filters once more; the name typed stays (hx-preserve).
    page.wait_for_load_state("networkidle")
    assert page.locator(".save-view input[name=name]").input_value() == "Payments"
    page.click(".save-view button")
    page.wait_for_url(lambda url: "subject=payments" in url and "name=" not in url)
    expect(page.get_by_role("navigation", name="Saved views")).to_contain_text("Payments")

    page.goto(f"{live_server}/")
    expect(rows).to_have_count(2)
    page.get_by_role("navigation", name="Saved views").get_by_role("link", name="Payments").click()
    page.wait_for_url(lambda url: "subject=payments" in url)
    expect(rows).to_have_count(1)
    assert page.locator("#filters input[name=subject]").input_value() == "payments.*"
    assert "payments.captured" in rows.first.inner_text()
