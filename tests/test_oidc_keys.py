"""Single sign-on and the provider's signing keys, against a real provider (node-oidc-provider,
tests/oidc/): a key rotated under the same kid or to a new one is read again at the next
sign-in, and a forged signature or an unknown kid is still refused, with the keys read again at
most once in KEYS_READ_AGAIN_AFTER."""

from __future__ import annotations

import re

import pytest
import requests

from dlq_dashboard.web import oidc

from .test_oidc import ACCOUNTS, ROLES, refused_with, sessions


@pytest.fixture
def provider(identity_provider):
    """A provider of the test alone: its key is rotated, and its key set's readings are counted."""
    return identity_provider(shared=False, accounts=ACCOUNTS)


def published_keys(provider) -> list[dict]:
    """The keys the provider's discovery document points to (its jwks_uri)."""
    uri = requests.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=5).json()["jwks_uri"]
    return requests.get(uri, timeout=5).json()["keys"]


def said(answer) -> str:
    """The login page's sentence, or the answer's status when it shows none."""
    error = re.search(r'<p class="error" role="alert">(.*?)</p>', answer.get_data(as_text=True))
    return error.group(1) if error else f"HTTP {answer.status_code}"


def test_a_key_rotated_under_the_same_kid_is_read_again_and_the_next_sign_in_succeeds(provider, make_app):
    app = make_app(**provider.settings(roles=ROLES))
    provider.start()
    assert provider.sign_in(app.test_client(), "alice").status_code == 302
    [old] = published_keys(provider)
    provider.rotate_key()
    [new] = published_keys(provider)
    assert new["kid"] == old["kid"] and new["n"] != old["n"]
    assert set(new) == {"kty", "n", "e", "kid", "alg", "use"}  # the public members alone
    reads = provider.jwks_reads()
    # The dashboard keeps the old key under that kid: the signature fails against it, the keys
    # are read again once, and the same token verifies against the new one.
    answer = provider.sign_in(app.test_client(), "alice")
    assert answer.status_code == 302, said(answer)
    assert provider.jwks_reads() == reads + 1
    assert len(sessions(app)) == 2
    # The next sign-in verifies against the keys now kept, without reading them.
    assert provider.sign_in(app.test_client(), "alice").status_code == 302
    assert provider.jwks_reads() == reads + 1


@pytest.mark.parametrize("forged", [
    {"bad_signature": True},
    # Before, each token naming a kid the provider never had had the keys read again (Authlib's
    # own reading, without a bound).
    {"kid": "a-key-the-provider-never-had"},
], ids=["bad-signature", "unknown-kid"])
def test_a_forged_token_is_refused_and_has_the_keys_read_again_at_most_once_in_the_interval(
        provider, make_app, monkeypatch, forged):
    # An interval no run of this test outlasts, so that what it asserts does not hang on how long
    # the sign-ins take; its passing is made by moving the last reading back.
    monkeypatch.setattr(oidc, "KEYS_READ_AGAIN_AFTER", 3600.0)
    app = make_app(**provider.settings(roles=ROLES))
    provider.start()
    client = app.extensions[oidc.EXTENSION].client
    provider.tamper(**forged)
    reads = provider.jwks_reads()
    refused_with(provider.sign_in(app.test_client(), "alice"), oidc.BAD_SIGNATURE, app)
    # The keys were read when first needed, then once again for the forged token.
    assert provider.jwks_reads() == reads + 2
    for _ in range(3):
        refused_with(provider.sign_in(app.test_client(), "alice"), oidc.BAD_SIGNATURE, app)
    assert provider.jwks_reads() == reads + 2  # within the interval: the keys kept, not read again
    # Once the interval has passed, a forged token has them read again, once.
    client.keys_read_again_at -= oidc.KEYS_READ_AGAIN_AFTER
    refused_with(provider.sign_in(app.test_client(), "alice"), oidc.BAD_SIGNATURE, app)
    assert provider.jwks_reads() == reads + 3
    provider.tamper()
    assert provider.sign_in(app.test_client(), "alice").status_code == 302
    assert provider.jwks_reads() == reads + 3


def test_a_key_rotated_to_a_new_kid_is_read_again_and_a_second_rotation_within_the_interval_waits_for_it(
        provider, make_app, monkeypatch):
    monkeypatch.setattr(oidc, "KEYS_READ_AGAIN_AFTER", 3600.0)
    app = make_app(**provider.settings(roles=ROLES))
    provider.start()
    client = app.extensions[oidc.EXTENSION].client
    assert provider.sign_in(app.test_client(), "alice").status_code == 302
    reads = provider.jwks_reads()
    provider.rotate_key(kid="second-key")
    assert [key["kid"] for key in published_keys(provider)] == ["second-key"]
    answer = provider.sign_in(app.test_client(), "alice")
    assert answer.status_code == 302, said(answer)
    assert provider.jwks_reads() == reads + 2  # the dashboard's reading, and this test's own above
    provider.rotate_key(kid="third-key")
    assert [key["kid"] for key in published_keys(provider)] == ["third-key"]
    reads = provider.jwks_reads()
    # Read again moments ago: refused with the sentence a failed signature has, the keys not read.
    answer = provider.sign_in(app.test_client(), "alice")
    assert (answer.status_code, said(answer)) == (400, oidc.BAD_SIGNATURE.replace("'", "&#39;"))
    assert provider.jwks_reads() == reads and len(sessions(app)) == 2
    # Once the interval has passed, the next sign-in reads them and succeeds.
    client.keys_read_again_at -= oidc.KEYS_READ_AGAIN_AFTER
    answer = provider.sign_in(app.test_client(), "alice")
    assert answer.status_code == 302, said(answer)
    assert provider.jwks_reads() == reads + 1
