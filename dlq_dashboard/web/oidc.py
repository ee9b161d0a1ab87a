"""Single sign-on with OpenID Connect (SPEC section 10, docs/security.md): Authlib's Flask client
does the authorization code flow with PKCE (S256), ``state`` and ``nonce``, and verifies the ID
token's signature, issuer, audience and expiry; the groups it names are given their grants by
the DLQ_OIDC_ROLES rules at every sign-in.

Every failure on the way back ends on the login page with one sentence and no session. The
provider's discovery document is read when first needed, not at start: a provider that cannot be
reached does not stop the dashboard, whose login page then says single sign-on is unavailable.
"""

from __future__ import annotations

import logging
import threading
import time
from urllib.parse import urlencode, urlsplit

import requests
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.base_client import MismatchingStateError, OAuthError
from authlib.integrations.flask_client import FlaskIntegration, FlaskOAuth2App, OAuth
from authlib.integrations.requests_client import OAuth2Auth
from flask import Blueprint, Flask, current_app, redirect, request, session, url_for
from flask_login import login_user
from joserfc.errors import BadSignatureError, ClaimError, ExpiredTokenError, InvalidKeyIdError, JoseError

from ..accounts import AccountError, sign_in_oidc_user, start_session
from ..errors import InvalidRequest
from ..runtime import runtime_of
from ..scopes import ScopeError, check_sources, highest_role
from ..sign_in import claim_at, grants_for, groups_in
from . import current_runtime
from .auth import SINGLE_SIGN_ON, SessionUser, login_page, requires, safe_next
from .security import keep_session

log = logging.getLogger(__name__)
bp = Blueprint("oidc", __name__)
EXTENSION = SINGLE_SIGN_ON

# How long one request to the provider may take (discovery, keys, token, userinfo).
PROVIDER_TIMEOUT = 5.0
# The discovery document is read again after this long (keys are read again on an unknown kid,
# and on a signature that fails against the keys kept: KEYS_READ_AGAIN_AFTER).
METADATA_KEPT = 3600.0
# An ID token naming a kid the keys kept lack, or whose signature fails against them, has them
# read again from the provider's jwks_uri, since a provider may rotate its key to a new kid or
# under the same one; but at most once in this long, so that a stream of forged tokens has the
# provider's keys read twice a minute at most, not once for each token.
KEYS_READ_AGAIN_AFTER = 30.0
# How long the provider has to answer before a sign-in is sent to it: the discovery document is
# kept an hour, so a provider down since had the button lead to the browser's own connection
# error page; asked first, it lands on the login page with NOT_ANSWERING instead.
ANSWER_TIMEOUT = 2.0
# After a failed discovery the login page says single sign-on is unavailable for this long
# before the provider is asked again (so that an anonymous page view waits on it rarely).
RETRY_AFTER = 30.0
# The sign-ins begun in one browser and not finished that it keeps: the newest three, so that a
# sign-in begun again (another tab, a retry) while an older one waits at the provider finishes;
# once one finishes, the others are void (the session starts anew). Each is about 180 bytes of
# the session cookie, and a
# browser refuses a cookie over 4 KB: kept without a bound, abandoned starts had the twentieth
# or so start's cookie refused, and every sign-in after it was "not started in this browser".
PENDING_KEPT = 3

UNAVAILABLE = "Single sign-on is unavailable: the identity provider could not be reached. Try again later."
UNREACHABLE = "The identity provider could not be reached to finish the sign-in. Try again later."
# The provider answers, but its discovery document names another issuer than DLQ_OIDC_ISSUER
# (http://localhost:8080 set, http://127.0.0.1:8080 in the document): trying again will not help.
MISCONFIGURED = ("Single sign-on is not set up right: the identity provider names another issuer than this "
                 "dashboard expects. An admin must correct DLQ_OIDC_ISSUER.")
NOT_ANSWERING = "The identity provider at {issuer} did not answer; try again"
WITH_PASSWORD = ", or sign in with a password if you have one"
BAD_STATE = "The sign-in could not be finished: it was not started in this browser, or it was started again since. Sign in again."
NOT_WELL_FORMED = ("The sign-in could not be finished: the address the identity provider sent you back to "
                   "is not well formed. Sign in again.")
NO_CODE = "The identity provider's answer carried no code to finish the sign-in with. Sign in again."
CODE_REFUSED = "The identity provider refused to finish the sign-in (its code was used already or has expired). Sign in again."
PROVIDER_SAID_NO = "The identity provider did not sign you in. Sign in again, or ask an admin."
NO_ID_TOKEN = "The identity provider sent no ID token. Ask an admin to check the single sign-on set-up."
WRONG_NONCE = "The identity provider's answer was not made for this sign-in (its nonce differs). Sign in again."
WRONG_ISSUER = "The identity provider's answer names another issuer. Sign in again."
WRONG_AUDIENCE = "The identity provider's answer was made for another application. Sign in again."
EXPIRED = "The identity provider's answer has expired. Sign in again."
BAD_SIGNATURE = "The identity provider's answer does not carry its signature. Sign in again."
NOT_VERIFIED = "The identity provider's answer could not be verified. Sign in again."
NO_GRANT = "Your account may not use this dashboard."
# Microsoft Entra ID sends no groups, only a pointer to them, to a user in more than 200
# (150 in a SAML token): they count as no groups, and the page says why.
TOO_MANY_GROUPS = ("Your account may not use this dashboard: the identity provider did not list your groups "
                   "(you are in too many of them); ask an admin.")
ACCOUNT_REFUSED = "Your account cannot sign in to this dashboard: {reason}."
_CLAIM_SENTENCES = {"nonce": WRONG_NONCE, "iss": WRONG_ISSUER, "aud": WRONG_AUDIENCE, "azp": WRONG_AUDIENCE}


class PendingSignIns(FlaskIntegration):
    """Authlib's Flask integration, keeping the newest PENDING_KEPT sign-ins begun in a browser.

    Authlib keeps each flow's state, nonce, PKCE verifier and addresses in the Flask session under
    ``_state_<client name>_<state>`` (base_client/framework_integration.py) until its callback
    or its expiry an hour later, however many a browser begins."""

    def set_state_data(self, session, state, data):
        """Keep this flow, and the newest PENDING_KEPT - 1 begun before it."""
        prefix = f"_state_{self.name}_"
        begun = sorted((key for key in session if key.startswith(prefix)), key=lambda key: _expiry(session[key]))
        for key in begun[:max(0, len(begun) - (PENDING_KEPT - 1))]:
            session.pop(key)
        super().set_state_data(session, state, data)


def _expiry(value) -> float:
    # Each flow expires an hour after it began: the latest expiry is the newest flow.
    return (value.get("exp") or 0.0) if isinstance(value, dict) else 0.0


class KeysReadAgain(FlaskOAuth2App):
    """Authlib's Flask OAuth 2 client, reading the provider's keys again when an ID token names
    a kid they lack or its signature fails against them, at most once in KEYS_READ_AGAIN_AFTER.

    Authlib reads them again only for a kid it does not know (base_client/sync_openid.py), and
    then for each such token, without a bound: a stream of forged tokens naming kids the
    provider never had had its keys read for each. And a provider that rotates its key under
    the same kid had every sign-in refused until the discovery document was read again, up to
    METADATA_KEPT later. The same token response is verified again: its code has been exchanged
    already, and cannot be twice."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._keys_lock = threading.Lock()
        # When the keys were last read again, for an unknown kid or a failed signature
        # (time.monotonic()).
        self.keys_read_again_at: float | None = None

    def fetch_jwk_set(self, force=False):
        """The keys kept (read when first needed); read again on ``force`` (Authlib's, for an
        unknown kid) only when the bound allows, else the keys kept, which the token is then
        refused against (InvalidKeyIdError)."""
        if force and not self._may_read_keys_again():
            return super().fetch_jwk_set()
        if force:
            log.info("single sign-on: an ID token names a key id the keys kept lack; reading them again")
        return super().fetch_jwk_set(force)

    def parse_id_token(self, token, *args, **kwargs):
        try:
            return super().parse_id_token(token, *args, **kwargs)
        except BadSignatureError:
            if not self._may_read_keys_again():
                raise
        log.info("single sign-on: an ID token's signature fails against the keys kept; reading them again")
        super().fetch_jwk_set(force=True)
        return super().parse_id_token(token, *args, **kwargs)

    def _may_read_keys_again(self) -> bool:
        # Taken before the keys are asked for, so that a reading that fails counts too.
        now = time.monotonic()
        with self._keys_lock:
            if self.keys_read_again_at is not None and now - self.keys_read_again_at < KEYS_READ_AGAIN_AFTER:
                return False
            self.keys_read_again_at = now
            return True


class BoundedOAuth(OAuth):
    """Authlib's Flask registry whose clients keep a few sign-ins begun, not all, and read the
    provider's keys again, within a bound, when a token names a kid they lack or a signature
    fails against them."""

    framework_integration_cls = PendingSignIns
    oauth2_client_cls = KeysReadAgain


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read; the message says why (for the log)."""

    #: What the login page says of it.
    sentence = UNAVAILABLE


class ProviderMisconfigured(ProviderUnavailable):
    """The provider's discovery document names another issuer than DLQ_OIDC_ISSUER: read again, it
    will say the same until an admin corrects the setting."""

    sentence = MISCONFIGURED


class SingleSignOn:
    """The OpenID Connect client of one app and the provider's discovery document."""

    def __init__(self, settings, client):
        self.settings, self.client = settings, client
        self._lock = threading.Lock()
        self._metadata: dict | None = None
        self._loaded_at = 0.0
        self._failed_at: float | None = None
        self._failure: ProviderUnavailable | None = None  # why the last reading failed

    def metadata(self) -> dict:
        """The provider's discovery document (read again each hour, kept while a new reading
        fails); ProviderUnavailable when it was never read and cannot be now."""
        now = time.monotonic()
        with self._lock:
            if self._metadata is not None and now - self._loaded_at < METADATA_KEPT:
                return self._metadata
            if self._metadata is None and self._failed_at is not None and now - self._failed_at < RETRY_AFTER:
                # The same kind of failure as that reading's, so that the page says the same.
                raise type(self._failure)(f"the last reading failed moments ago: {self._failure}")
        try:
            document = self._discover()
        except ProviderUnavailable as exc:
            log.warning("single sign-on: the discovery document of %s could not be read: %s",
                        self.settings.oidc_issuer, exc)
            with self._lock:
                self._failed_at, self._failure = now, exc
                if self._metadata is None:
                    raise
                return self._metadata
        with self._lock:
            self._metadata, self._loaded_at, self._failed_at = document, now, None
            # Authlib reads the endpoints from here, and keeps the provider's keys in it.
            self.client.server_metadata = {**document, "_loaded_at": time.time()}
        return document

    def _discover(self) -> dict:
        url = self.settings.oidc_issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            answer = requests.get(url, timeout=PROVIDER_TIMEOUT, headers={"Accept": "application/json"})
            answer.raise_for_status()
            document = answer.json()
        except (requests.RequestException, ValueError) as exc:
            raise ProviderUnavailable(f"{url}: {exc.__class__.__name__}") from None
        if not isinstance(document, dict):
            raise ProviderUnavailable(f"{url}: not a JSON object")
        # OpenID Connect Discovery section 4.3: the document must name the issuer it was read
        # from, or a provider could speak for another one.
        if str(document.get("issuer", "")).rstrip("/") != self.settings.oidc_issuer.rstrip("/"):
            raise ProviderMisconfigured(f"{url} names the issuer {document.get('issuer')!r}, not DLQ_OIDC_ISSUER")
        missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not document.get(k)]
        if missing:
            raise ProviderUnavailable(f"{url} has no {', '.join(missing)}")
        return document

    def not_answering(self) -> str | None:
        """Why the provider is taken for down (for the log) when its discovery document does not
        come within ANSWER_TIMEOUT (no connection, no answer, a 5xx such as a gateway in front of
        a provider that is down gives), else None. Any other answer counts: whatever it says,
        the browser will reach the provider."""
        url = self.settings.oidc_issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            with requests.get(url, timeout=ANSWER_TIMEOUT, headers={"Accept": "application/json"},
                              stream=True) as answer:
                if answer.status_code < 500:
                    return None
                return f"{url}: HTTP {answer.status_code}"
        except requests.RequestException as exc:
            return f"{url}: {exc.__class__.__name__}"

    def offer(self) -> dict:
        """What the login page shows: the button's words, where it leads, and whether single
        sign-on is unavailable."""
        try:
            self.metadata()
            unavailable = None
        except ProviderUnavailable as exc:
            unavailable = exc.sentence
        return {"name": self.settings.oidc_name, "unavailable": unavailable,
                "url": url_for("oidc.start", next=request.args.get("next") or None)}

    def allow_logout_redirect(self, response):
        """Let the logout form's redirect reach the provider: browsers hold a form's redirects to
        the page's CSP form-action ('self'), so the provider's logout origin is added to it."""
        policy = response.headers.get("Content-Security-Policy")
        if policy and "form-action 'self'" in policy:
            origins = {_origin(self.settings.oidc_issuer)}
            if self._metadata and self._metadata.get("end_session_endpoint"):
                origins.add(_origin(self._metadata["end_session_endpoint"]))
            response.headers["Content-Security-Policy"] = policy.replace(
                "form-action 'self'", " ".join(["form-action 'self'", *sorted(o for o in origins if o)]))
        return response

    def logout_url(self, id_token: str) -> str | None:
        """The provider's end_session_endpoint for this session's ID token, returning to /login;
        None when the provider has none or cannot be reached."""
        try:
            endpoint = self.metadata().get("end_session_endpoint")
        except ProviderUnavailable:
            return None
        if not endpoint:
            return None
        query = urlencode({"id_token_hint": id_token, "post_logout_redirect_uri": _own_url("auth.login"),
                           "client_id": self.settings.oidc_client_id})
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"


def init_app(app: Flask) -> None:
    """With DLQ_OIDC_ISSUER set, give the app its OpenID Connect client and its two routes
    (without it they do not exist: a 404)."""
    settings = runtime_of(app).settings
    if not settings.single_sign_on:
        return
    confidential = bool(settings.oidc_client_secret)
    client = BoundedOAuth(app).register(
        "oidc", client_id=settings.oidc_client_id, client_secret=settings.oidc_client_secret or None,
        client_kwargs={"scope": " ".join(settings.oidc_scopes), "code_challenge_method": "S256",
                       "token_endpoint_auth_method": "client_secret_basic" if confidential else "none",
                       "default_timeout": PROVIDER_TIMEOUT})
    sso = app.extensions[EXTENSION] = SingleSignOn(settings, client)
    app.register_blueprint(bp)
    # Registered before web/security.py's headers, so it runs after them (Flask runs these in
    # reverse order) and finds the policy to widen.
    app.after_request(sso.allow_logout_redirect)
    if not settings.oidc_roles:
        log.warning("DLQ_OIDC_ROLES is not set: nobody may sign in with single sign-on (%s)", settings.oidc_issuer)
    for rule in settings.oidc_roles:  # told, not refused: the rules and DLQ_CONFIG may change apart
        try:
            check_sources(rule.grant.scopes, runtime_of(app).feeds)
        except ScopeError as exc:
            log.warning("DLQ_OIDC_ROLES, the rule of %s: %s; that scope reaches nothing", rule.group, exc)


def single_sign_on() -> SingleSignOn:
    """This app's client (its routes exist only where it does)."""
    return current_app.extensions[EXTENSION]


def _origin(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c in parts.netloc for c in " ;,'\""):
        return None
    return f"{parts.scheme}://{parts.netloc}"


def _own_url(endpoint: str) -> str:
    # The provider sends the browser back here, so the address must be the one people open:
    # DLQ_PUBLIC_URL where set (the one registered with the provider).
    public = current_runtime().settings.public_url
    return public + url_for(endpoint) if public else url_for(endpoint, _external=True)


def _refused(sentence: str, status: int = 401, detail: str = ""):
    """The login page with ``sentence``: a 401 for a sign-in refused, a 400 for an answer that is not
    well formed, a 503 while the identity provider cannot be reached (the provider is down, not
    the caller's credentials wrong: a monitor reads it so)."""
    log.warning("single sign-on refused: %s%s", sentence, f" ({detail})" if detail else "")
    return login_page(sentence, status)


@bp.errorhandler(InvalidRequest)
def not_well_formed(exc: InvalidRequest):
    """A request to these routes that the rules of every request refuse (web/params.py: a
    parameter given twice, text that is not UTF-8) ends on the login page too; on the way back
    with a sentence of its own, which does not repeat the values (the state is one)."""
    if request.endpoint != "oidc.callback":
        return login_page(str(exc), 400)
    repeated = sorted(name for name, values in request.args.lists() if len(values) > 1)
    return _refused(NOT_WELL_FORMED, 400, f"given more than once: {', '.join(repeated)}" if repeated
                    else "not UTF-8 text, or a NUL character")


@bp.route("/login/oidc")
@requires(None)
def start():
    """Send the browser to the identity provider (authorization code, PKCE S256, state, nonce),
    once it has answered within ANSWER_TIMEOUT: else the login page says it did not."""
    sso = single_sign_on()
    try:
        sso.metadata()
    except ProviderUnavailable as exc:
        return _refused(exc.sentence, 503, str(exc))
    down = sso.not_answering()
    if down:
        local = current_runtime().settings.local_login
        return _refused(NOT_ANSWERING.format(issuer=sso.settings.oidc_issuer) + (WITH_PASSWORD if local else "") + ".",
                        503, down)
    session["oidc_next"] = safe_next(request.args.get("next"))
    return sso.client.authorize_redirect(_own_url("oidc.callback"))


@bp.route("/login/oidc/callback")
@requires(None)
def callback():
    """The provider's answer: verified, turned into grants, and a session, or the login page
    with one sentence."""
    sso = single_sign_on()
    settings = current_runtime().settings
    try:
        sso.metadata()
    except ProviderMisconfigured as exc:
        return _refused(exc.sentence, 503, str(exc))
    except ProviderUnavailable as exc:
        return _refused(UNREACHABLE, 503, str(exc))
    try:
        token = sso.client.authorize_access_token()
    except MismatchingStateError:
        return _refused(BAD_STATE, 400)
    except OAuthError as exc:
        if exc.error == "invalid_grant":
            return _refused(CODE_REFUSED, 400, exc.description or "")
        return _refused(PROVIDER_SAID_NO, 400, f"{exc.error}: {exc.description or ''}")
    except AuthlibBaseError as exc:
        # Authlib's own checks of the answer, before or after asking the provider (its OAuth 2
        # errors: missing_code when the state came back without a code, say). Caught as a class,
        # so that one Authlib names later is a sentence too, never a 500.
        sentence = NO_CODE if exc.error == "missing_code" else NOT_VERIFIED
        return _refused(sentence, 400, f"{exc.error}: {exc.description or ''}")
    except requests.RequestException as exc:
        return _refused(UNREACHABLE, 503, exc.__class__.__name__)
    except ExpiredTokenError:
        return _refused(EXPIRED, 400)
    except ClaimError as exc:
        return _refused(_CLAIM_SENTENCES.get(exc.claim, NOT_VERIFIED), 400, f"claim {exc.claim}")
    except BadSignatureError:
        return _refused(BAD_SIGNATURE, 400)
    except InvalidKeyIdError as exc:  # signed with a key the provider does not publish (now)
        return _refused(BAD_SIGNATURE, 400, f"{exc.__class__.__name__}: {exc}")
    except (JoseError, ValueError, KeyError) as exc:
        return _refused(NOT_VERIFIED, 400, f"{exc.__class__.__name__}: {exc}")
    claims = token.get("userinfo")
    if not claims or not token.get("id_token"):
        return _refused(NO_ID_TOKEN, 400)
    claims = dict(claims)
    try:
        claims = _with_userinfo(sso, token, claims)
    except requests.RequestException as exc:
        return _refused(UNREACHABLE, 503, f"userinfo: {exc.__class__.__name__}")
    except AuthlibBaseError as exc:  # a token type Authlib cannot send, say
        return _refused(NOT_VERIFIED, 400, f"userinfo: {exc.error}: {exc.description or ''}")
    groups_value = claim_at(claims, settings.oidc_groups_claim)
    grants = grants_for(settings.oidc_roles, groups_in(groups_value))
    if not grants:
        sentence = TOO_MANY_GROUPS if groups_value is None and _groups_left_out(claims) else NO_GRANT
        return _refused(sentence, 403, f"sub {claims['sub']!r}")
    try:
        user = sign_in_oidc_user(current_runtime().engine, f"{claims['iss']} {claims['sub']}",
                                 _name_of(claims), grants)
    except AccountError as exc:
        return _refused(ACCOUNT_REFUSED.format(reason=exc), 403)
    target = session.get("oidc_next")
    session.clear()  # a fresh session (and CSRF token) at sign-in: nothing carries over
    keep_session(settings.session_hours)  # the cookie ends with the session
    key = start_session(current_runtime().engine, user.id, hours=settings.session_hours, via="oidc",
                        grants=grants, id_token=token["id_token"])
    login_user(SessionUser(user.id, user.name, highest_role(grants), key, grants))
    log.info("single sign-on: %s signed in with %s", user.name,
             ", ".join(f"{g.role}{'' if g.scopes is None else ' over ' + ','.join(map(str, g.scopes))}"
                       for g in grants))
    return redirect(safe_next(target))


def _with_userinfo(sso: SingleSignOn, token: dict, claims: dict) -> dict:
    """The ID token's claims, completed from the userinfo endpoint when they lack the groups
    claim or a name (a provider may put scope claims there only, as OpenID Connect Core 5.4
    says for the code flow). The ID token's own claims win."""
    settings = sso.settings
    lacking = claim_at(claims, settings.oidc_groups_claim) is None and not _groups_left_out(claims)
    if not (lacking or not (claims.get("email") or claims.get("preferred_username"))):
        return claims
    endpoint = (sso.client.server_metadata or {}).get("userinfo_endpoint")
    if not endpoint:
        return claims
    # The token is sent as it came, moments ago: Authlib's own sending would first hold it to its
    # 60 seconds of refresh margin, and refuse one that lives a minute or less (InvalidTokenError).
    answer = sso.client.get(endpoint, withhold_token=True, auth=OAuth2Auth(token), timeout=PROVIDER_TIMEOUT)
    answer.raise_for_status()
    info = answer.json()
    # Core 5.3.2: the userinfo's sub must be the ID token's, or it speaks of someone else.
    if not isinstance(info, dict) or info.get("sub") != claims["sub"]:
        return claims
    return {**info, **claims}


def _groups_left_out(claims: dict) -> bool:
    """True when the provider left the groups out for their number: Entra ID's overage claim
    (``_claim_names`` naming ``groups``) or its implicit flow's ``hasgroups``."""
    names = claims.get("_claim_names")
    return (isinstance(names, dict) and "groups" in names) or claims.get("hasgroups") in (True, "true")


def _name_of(claims: dict) -> str:
    """The name shown and audited: the e-mail address (unless the provider says it is not
    verified), else preferred_username, else sub."""
    email = claims.get("email")
    if isinstance(email, str) and email and claims.get("email_verified") not in (False, "false"):
        return email
    username = claims.get("preferred_username")
    if isinstance(username, str) and username:
        return username
    return str(claims["sub"])
