"""Single sign-on in Debian's Chromium, end to end: the dashboard's button, the identity
provider's own login form (node-oidc-provider), back signed in with the grants of the person's
groups, then a republish inside their scope and a refusal outside it."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from dlq_dashboard.runtime import runtime_of

from . import support

EXPECT_TIMEOUT = 10_000


def make_stream(url: str, name: str, subjects: list[str]) -> None:
    import nats

    async def create():
        nc = await nats.connect(url)
        try:
            await nc.jetstream().add_stream(name=name, subjects=subjects)
        finally:
            await nc.close()

    support.run(create())


@pytest.fixture
def served():
    """Serve apps with waitress on 127.0.0.1 and a free port; yields a function app -> base URL."""
    servers = []

    def serve(app) -> str:
        server, thread = support.serve_in_thread(app)
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.effective_port}"

    yield serve
    for server, thread in servers:
        support.stop_serving(server, thread)


def test_a_team_member_signs_in_through_the_providers_form_and_republishes_within_their_scope_only(
        identity_provider, make_app, served, page, nats_server):
    idp = identity_provider(shared=False, accounts={"alice": {"email": "alice@example.com", "email_verified": True,
                                                "groups": ["team-orders"]}})
    app = make_app(online=True, **idp.settings(roles="team-orders=operator:orders.>"))
    base = served(app)
    idp.start(bases=[base])
    support.make_orders_stream(nats_server.url)
    make_stream(nats_server.url, "PAYMENTS", ["payments.>"])
    [inside] = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-1"}'])
    [outside] = support.dead_letter_orders(app, nats_server.url, [b'{"payment_id": "p-1"}'],
                                           subject="payments.captured")

    page.goto(f"{base}/entries/{inside}")
    page.wait_for_url(re.compile(r"/login\?next="))
    page.get_by_role("link", name="Sign in with Test IdP").click()
    # The provider's own development login form: any password, the login is the account.
    page.wait_for_url(re.compile(rf"^{re.escape(idp.issuer)}/interaction/"))
    page.locator('input[name="login"]').fill("alice")
    page.locator('input[name="password"]').fill("any password")
    page.get_by_role("button", name="Sign-in").click()
    page.wait_for_url(f"{base}/entries/{inside}")
    expect(page.locator("body")).to_contain_text("alice@example.com")

    # Inside the scope: republished.
    page.get_by_role("button", name="Republish", exact=True).click()
    expect(page.get_by_role("heading", name=f"Republish entry {inside}")).to_be_visible()
    page.get_by_role("button", name="Republish", exact=True).click()
    page.wait_for_url(re.compile(rf"/entries/{inside}$"))
    expect(page.locator("section.timeline")).to_contain_text("Republished to orders.created", timeout=EXPECT_TIMEOUT)
    assert len(support.stream_messages(nats_server.url)) == 1

    # Outside every grant (SPEC section 10): the entry answers 404 on its page, its confirmation
    # and its republish, and nothing reaches the stream. This part needs the scopes' enforcement.
    token = page.locator('meta[name="csrf-token"]').get_attribute("content")
    assert page.goto(f"{base}/entries/{outside}").status == 404
    assert page.goto(f"{base}/entries/{outside}/republish").status == 404
    refused = page.request.post(f"{base}/entries/{outside}/republish", form={"csrf_token": token, "version": "1"},
                                headers={"Origin": base, "Referer": f"{base}/entries/{outside}"})
    assert refused.status == 404
    assert support.stream_messages(nats_server.url, "PAYMENTS") == []
    with runtime_of(app).engine.connect() as conn:
        from sqlalchemy import text

        assert conn.execute(text("SELECT status FROM entries WHERE id = :id"), {"id": outside}).scalar() == "open"


def test_logout_in_the_browser_continues_to_the_providers_logout_and_back_to_the_login_page(
        identity_provider, make_app, served, page):
    idp = identity_provider(shared=False, accounts={"alice": {"email": "alice@example.com", "groups": ["staff"]}})
    app = make_app(**idp.settings(roles="staff=viewer"))
    base = served(app)
    idp.start(bases=[base])
    page.goto(f"{base}/login")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    page.locator('input[name="login"]').fill("alice")
    page.locator('input[name="password"]').fill("any password")
    page.get_by_role("button", name="Sign-in").click()
    page.wait_for_url(f"{base}/")

    # The logout form's redirect to the provider is allowed by the page's form-action.
    page.get_by_role("button", name="Logout").click()
    page.wait_for_url(re.compile(rf"^{re.escape(idp.issuer)}/session/end"))
    page.get_by_role("button", name="Yes, sign me out").click()
    page.wait_for_url(f"{base}/login")
    expect(page.get_by_role("link", name="Sign in with Test IdP")).to_be_visible()
    # The provider's session has ended too: signing in again shows its login form.
    page.get_by_role("link", name="Sign in with Test IdP").click()
    expect(page.locator('input[name="login"]')).to_be_visible()


def test_sign_ins_begun_and_left_do_not_stop_the_next_one_from_finishing(identity_provider, make_app, served, page):
    # Each start kept its flow in the session cookie. Chromium refuses a cookie over 4 KB: after
    # about twenty starts the new flows were no longer kept, and the sign-in that followed ended
    # on "not started in this browser" until the old ones expired an hour later.
    idp = identity_provider(shared=False, accounts={"alice": {"email": "alice@example.com", "groups": ["staff"]}})
    app = make_app(**idp.settings(roles="staff=viewer", local_login=False))
    base = served(app)
    idp.start(bases=[base])
    page.goto(f"{base}/login")
    # Each start as the button's link makes it, in Chromium's own cookie jar, and left there
    # (not followed to the provider, whose pages take a second each).
    page.evaluate("""async () => {
        for (let i = 0; i < 40; i++) await fetch('/login/oidc', {redirect: 'manual', credentials: 'same-origin'});
    }""")
    [cookie] = [c for c in page.context.cookies(base) if c["name"] == "session"]

    page.goto(f"{base}/login")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    page.locator('input[name="login"]').fill("alice")
    page.locator('input[name="password"]').fill("any password")
    page.get_by_role("button", name="Sign-in").click()
    # Back signed in at /, or refused on the callback's login page.
    page.wait_for_url(re.compile(rf"^{re.escape(base)}/(login/oidc/callback\?.*)?$"))
    assert page.url == f"{base}/", page.locator("p.error").all_text_contents()
    expect(page.locator("body")).to_contain_text("alice@example.com")
    # Well under the 4 KB a browser takes, whatever the number of starts.
    assert len(cookie["value"]) < 1500, len(cookie["value"])


def test_the_button_of_a_provider_that_went_down_lands_on_the_login_page_not_the_browsers_error_page(
        identity_provider, make_app, served, page):
    idp = identity_provider(shared=False, accounts={"alice": {"email": "alice@example.com", "groups": ["team-orders"]}})
    app = make_app(**idp.settings(roles="team-orders=operator:orders.>"))
    base = served(app)
    idp.start(bases=[base])
    page.goto(f"{base}/login")  # the discovery document read, and kept
    button = page.get_by_role("link", name="Sign in with Test IdP")
    expect(button).to_be_visible()
    idp.stop()
    button.click()
    # Before, the browser went to the provider's address and showed its own connection error.
    page.wait_for_url(f"{base}/login/oidc")
    expect(page.locator('p.error[role="alert"]')).to_have_text(
        f"The identity provider at {idp.issuer} did not answer; try again, or sign in with a password if you have one.")
    expect(page.get_by_label("User name")).to_be_visible()
