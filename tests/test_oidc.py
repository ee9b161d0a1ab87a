"""Single sign-on against a real OpenID Connect provider (node-oidc-provider, tests/oidc/)."""

from __future__ import annotations

from dlq_dashboard.runtime import runtime_of


def test_a_member_of_a_group_signs_in_through_the_provider(identity_provider, make_app):
    idp = identity_provider(accounts={"alice": {"email": "alice@example.com", "email_verified": True,
                                                "groups": ["team-orders"]}})
    app = make_app(**idp.settings(roles="team-orders=operator:orders.>"))
    idp.start()
    client = app.test_client()
    answer = idp.sign_in(client, "alice")
    assert answer.status_code == 302, answer.get_data(as_text=True)
    page = client.get("/")
    assert page.status_code == 200
    assert "alice@example.com" in page.get_data(as_text=True)
