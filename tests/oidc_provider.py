"""A real OpenID Connect provider for the single sign-on tests: node-oidc-provider (tests/oidc/,
installed by `npm ci` there; .ci/run does it) on 127.0.0.1 and a free port, started by the
``identity_provider`` fixture of conftest.py and ended by its PID.

A test makes it, points the app at it, then starts it with the dashboard's addresses (the
provider checks each redirect URI against its client's)::

    idp = identity_provider(accounts={"alice": {"email": "alice@example.com", "groups": ["team-orders"]}})
    app = make_app(**idp.settings(roles="team-orders=operator:orders.>"))
    idp.start()                                  # http://localhost, the test client's address
    response = idp.sign_in(app.test_client(), "alice")   # the flow, through the provider's login form

``sign_in`` drives the provider's own pages (its development login form takes any password)
with ``requests``; ``start(bases=[live_url])`` registers a live server's address for a browser.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import warnings
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import requests

from dlq_dashboard.nats.server import free_port, listens_on

from . import support

FOLDER = Path(__file__).resolve().parent / "oidc"
SCRIPT = FOLDER / "provider.mjs"
CLIENT_ID, CLIENT_SECRET = "dlq-dashboard", "a secret for the test provider only"
# The test client's address: Flask's test client answers at http://localhost.
TEST_CLIENT_BASE = "http://localhost"
_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)
_INPUT = re.compile(r'<input[^>]*?name="([^"]+)"(?:[^>]*?value="([^"]*)")?[^>]*>')


class ProviderPool:
    """The providers a test worker keeps running between tests, one for each set of options
    (starting node and the provider takes seconds; its accounts and tampering are reset for
    each test that takes it). Ended by their PIDs at the end of the session."""

    def __init__(self):
        self.running: dict[str, "IdentityProvider"] = {}

    def stop(self) -> None:
        for provider in self.running.values():
            provider._end()


def installed() -> None:
    """node-oidc-provider in tests/oidc/node_modules, installed from the committed lockfile
    (``npm ci``) the first time a test needs it, once for every test worker (a file lock)."""
    if (FOLDER / "node_modules" / "oidc-provider").is_dir():
        return
    if shutil.which("npm") is None:
        raise AssertionError("npm is missing: the single sign-on tests need Node.js 20 or later and npm "
                             "(apt-get install -y nodejs npm; .ci/run does)")
    with open(FOLDER / ".npm-ci.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (FOLDER / "node_modules" / "oidc-provider").is_dir():
            done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=FOLDER,
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise AssertionError(f"npm ci in {FOLDER} failed:\n{done.stdout}{done.stderr}")


class IdentityProvider:
    """A node-oidc-provider process: its accounts, its one client, its log.

    ``shared`` (the default): a process of the worker's pool started for the same options is
    taken over, and left running after the test; ``shared=False`` for a test that stops the
    provider, never starts it (a closed port), or starts it with other bases (a live server)."""

    def __init__(self, folder: Path, *, accounts: dict | None = None, public: bool = False,
                 ttl: dict | None = None, conform_id_token_claims: bool = True, claims: dict | None = None,
                 shared: bool = True, pool: ProviderPool | None = None):
        installed()
        self.folder = Path(folder)
        self.pool = pool if shared else None
        self.key = json.dumps([public, ttl, conform_id_token_claims, claims], sort_keys=True)
        running = self.pool.running.get(self.key) if self.pool else None
        self.port = running.port if running else free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.accounts = dict(accounts or {})
        self.public, self.ttl, self.claims = public, dict(ttl or {}), claims
        self.conform = conform_id_token_claims
        self.process: subprocess.Popen | None = None
        self.log_path = self.folder / f"oidc-provider-{self.port}.log"
        # The provider's own cookies (its session) for the requests driver: signing in again
        # while they last asks for no login, as a browser's would.
        self.browser = requests.Session()

    # --- the app's side -----------------------------------------------------------------------

    def settings(self, roles: str | None = "*=viewer", **more) -> dict:
        """The Settings fields that point an app at this provider (make_app's keyword arguments)."""
        values = dict(oidc_issuer=self.issuer, oidc_client_id=CLIENT_ID,
                      oidc_client_secret=None if self.public else CLIENT_SECRET,
                      oidc_scopes=("openid", "email", "profile", "groups"), oidc_name="Test IdP")
        if roles is not None:
            from dlq_dashboard.sign_in import parse_rules

            values["oidc_roles"] = parse_rules(roles)
        values.update(more)
        return values

    # --- the process --------------------------------------------------------------------------

    def start(self, bases: list[str] | tuple[str, ...] = (TEST_CLIENT_BASE,), timeout: float = 60.0):
        """Start the provider, with a client whose redirect URIs are each base's callback (and
        /login after logout); return once its discovery document answers. A shared provider
        already running gets this test's accounts and no tampering instead."""
        running = self.pool.running.get(self.key) if self.pool else None
        if self.pool is not None and tuple(bases) != (TEST_CLIENT_BASE,):
            raise AssertionError("a shared provider serves the test client only: use shared=False")
        if running is not None:
            self.process, self.log_path = running.process, running.log_path
            self.tamper()
            for account, claims in self.accounts.items():
                self.set_account(account, **claims)
            return self
        client = {"client_id": CLIENT_ID, "grant_types": ["authorization_code"], "response_types": ["code"],
                  "redirect_uris": [f"{b}/login/oidc/callback" for b in bases],
                  "post_logout_redirect_uris": [f"{b}/login" for b in bases]}
        if self.public:
            client["token_endpoint_auth_method"] = "none"
        else:
            client.update(client_secret=CLIENT_SECRET, token_endpoint_auth_method="client_secret_basic")
        config = {"port": self.port, "issuer": self.issuer, "clients": [client], "accounts": self.accounts,
                  "ttl": self.ttl, "conformIdTokenClaims": self.conform}
        if self.claims:
            config["claims"] = self.claims
        path = self.folder / f"oidc-provider-{self.port}.json"
        path.write_text(json.dumps(config))
        # Started again once, on the same port (the app already knows the issuer), if the first
        # process neither answers nor ends within half the time: seen once in CI, a provider that
        # ran a minute without listening; what it was doing is kept in a warning and the error.
        earlier = ""
        for attempt, wait in enumerate((timeout / 2, timeout)):
            self._spawn(path)
            try:
                support.wait_for(self._answers, timeout=wait, interval=0.05)
                break
            except AssertionError:
                said = self._state()
                if attempt == 0 and self.process.poll() is None:
                    earlier = f"; the first process did not answer within {wait} s either: {said}"
                    warnings.warn(f"the identity provider at {self.issuer} was started again: {said}", stacklevel=2)
                    self._end()
                    continue
                # Said in full, since the log is gone with the machine that ran the test.
                raise AssertionError(
                    f"the identity provider at {self.issuer} did not serve its discovery document (waited "
                    f"up to {wait} s): {said}{earlier}") from None
        if self.pool is not None:
            self.pool.running[self.key] = self
        return self

    def _spawn(self, config: Path) -> None:
        node = shutil.which("node") or "/usr/bin/node"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([node, str(SCRIPT), str(config)], cwd=FOLDER, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True,
                                            preexec_fn=support.ends_with_this_process())
        self._why = "not asked yet"

    def _state(self) -> str:
        """What the process is doing (whether it runs, its scheduler state, the CPU time it has had,
        where it waits), what the last try of the discovery document met, and its log's tail."""
        pid = self.process.pid
        if self.process.poll() is not None:
            alive = f"the process ended ({self.process.returncode})"
        else:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                ticks = os.sysconf("SC_CLK_TCK")
                threads = sorted(Path(f"/proc/{pid}/task/{task.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
                                 for task in Path(f"/proc/{pid}/task").iterdir())
                wchan = Path(f"/proc/{pid}/wchan").read_text() or "-"
                alive = (f"the process (pid {pid}) is running: state {fields[0]}, threads {''.join(threads)}, "
                         f"{(int(fields[11]) + int(fields[12])) / ticks:.2f} s of CPU, waiting in {wchan}")
            except (OSError, IndexError, ValueError) as error:
                alive = f"the process (pid {pid}) is running ({error} reading /proc)"
        return (f"{alive}; the last try: {self._why}; its log ({self.log_path}):\n"
                f"{self.log_path.read_text(errors='replace')[-2000:]}")

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError("ended")  # start's error says the rest
        try:
            answer = requests.get(f"{self.issuer}/.well-known/openid-configuration", timeout=2)
        except requests.RequestException as error:
            self._why = f"{type(error).__name__}: {error}"
            return False
        # Another server on the port answers too, but not with the provider's document; another
        # provider would (the port taken before this one bound it): not this process.
        self._why = f"HTTP {answer.status_code} from {answer.headers.get('Server', 'a server that names none')}"
        if answer.ok and listens_on(self.process.pid, self.port) is False:
            self._why = f"another process listens on port {self.port}"
            return False
        return answer.ok

    def release(self) -> None:
        """After the test: end the provider unless the pool keeps it (a shared one that did not
        start is ended too, not kept)."""
        if self.pool is None:
            self.stop()
        elif self.pool.running.get(self.key) is None:
            self._end()

    def stop(self) -> None:
        """End the provider (by its PID) and wait until it has gone."""
        if self.pool is not None:
            raise AssertionError("a shared provider is not stopped by a test: use shared=False")
        self._end()

    def _end(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        os.kill(self.process.pid, signal.SIGCONT)  # a stopped process acts on SIGTERM once continued
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    # --- changing it while it runs ------------------------------------------------------------

    def set_account(self, account: str, **claims) -> None:
        """Give ``account`` these claims from now on (its groups, say)."""
        self.accounts[account] = claims
        requests.put(f"{self.issuer}/_test/accounts/{account}", json=claims, timeout=5).raise_for_status()

    def tamper(self, **claims) -> None:
        """ID tokens issued from now on carry these claims (``aud``, ``iss``, ``nonce``,
        ``exp_offset`` seconds from now, ``bad_signature=True``, ``kid`` in their header);
        ``tamper()`` stops it."""
        requests.put(f"{self.issuer}/_test/tamper", json=claims, timeout=5).raise_for_status()

    def rotate_key(self, kid: str | None = None) -> None:
        """Sign ID tokens from now on with a new key under the same kid (or ``kid``), which the
        provider's JWKS serves instead of the old one. The provider's own checks of its ID tokens (the
        id_token_hint at logout) know the first key only: a test that rotates uses a provider of
        its own (shared=False)."""
        if self.pool is not None:
            raise AssertionError("a shared provider's key is not rotated by a test: use shared=False")
        requests.put(f"{self.issuer}/_test/rotate", json={"kid": kid} if kid else {}, timeout=5).raise_for_status()

    def jwks_reads(self) -> int:
        """How many times the provider's JWKS (its jwks_uri) has been read since it started."""
        answer = requests.get(f"{self.issuer}/_test/jwks_reads", timeout=5)
        answer.raise_for_status()
        return answer.json()["reads"]

    # --- the browser's side, with requests ----------------------------------------------------

    def authorize(self, url: str, login: str | None) -> str:
        """Follow the dashboard's redirect to the provider through its pages (its login form
        filled with ``login`` and any password, when it asks) until it sends the browser back;
        return that address (the dashboard's callback with its code and state)."""
        for _ in range(20):
            if not url.startswith(self.issuer):
                return url
            answer = self.browser.get(url, allow_redirects=False, timeout=10)
            if answer.is_redirect:
                url = urljoin(url, answer.headers["Location"])
                continue
            form = _FORM.search(answer.text)
            assert form and login is not None, f"the provider showed no form to fill: {answer.text[:500]}"
            fields = {name: value or "" for name, value in _INPUT.findall(form.group(2))}
            fields.update(login=login, password="any password")
            answer = self.browser.post(urljoin(url, form.group(1)), data=fields, allow_redirects=False, timeout=10)
            assert answer.is_redirect, answer.text[:500]
            url = urljoin(url, answer.headers["Location"])
        raise AssertionError(f"the provider did not send the browser back: {url}")

    def sign_in(self, client, login: str | None, start: str = "/login/oidc"):
        """Sign a Flask test client in through the provider: the dashboard's answer to the callback."""
        return client.get(self.callback_path(client, login, start))

    def callback_path(self, client, login: str | None, start: str = "/login/oidc") -> str:
        """The callback the provider sends the browser back to (not yet followed)."""
        answer = client.get(start)
        assert answer.status_code == 302, answer.get_data(as_text=True)
        back = self.authorize(answer.headers["Location"], login)
        parts = urlsplit(back)
        return f"{parts.path}?{parts.query}"

    def log_out(self, url: str) -> str:
        """Follow the dashboard's redirect to the provider's end_session_endpoint, confirm the
        provider's question, and return where it sends the browser."""
        answer = self.browser.get(url, allow_redirects=False, timeout=10)
        form = re.search(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', answer.text, re.S)
        assert form, answer.text[:500]
        fields = {name: value or "" for name, value in _INPUT.findall(form.group(2))}
        fields["logout"] = "yes"
        answer = self.browser.post(urljoin(url, form.group(1)), data=fields, allow_redirects=False, timeout=10)
        for _ in range(5):
            if not answer.is_redirect:
                break
            location = urljoin(answer.url, answer.headers["Location"])
            if not location.startswith(self.issuer):
                return location
            answer = self.browser.get(location, allow_redirects=False, timeout=10)
        raise AssertionError(f"the provider did not return after logout: {answer.status_code} {answer.text[:300]}")
