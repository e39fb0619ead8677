"""Dashboard sign-in through a real OpenID provider (issue 35, item 14):
the certified `oidc-provider` package (npm, under Debian's node; installed
by scripts/test.sh into OIDC_PROVIDER_DIR, default ~/.cache/benchlake-oidc)
runs tests/e2e/oidc_provider.mjs on 127.0.0.1, and Debian's chromium,
driven by Playwright, signs in through it.

The coordinator runs the command docs/dashboard.md shows, as written, with
the example's issuer, secret file and dashboard address replaced by the
test's own. Checked: the login page offers "Sign in with Keycloak" beside
the token form; alice (group bench-admins) lands on the page she asked for
as admin, bob (staff) as user, carol (visitors: mapped to nothing) is
refused with 403 and a page saying why, and gets no session; a wrong
password stays at the provider; a callback is used once and only by the
browser that started it; logout ends the session server-side; the token
login still works. Screenshots are kept in target/dashboard-screenshots/."""
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import BIN, ROOT, free_port

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
NODE = shutil.which("node") or "/usr/bin/node"
PROVIDER_DIR = Path(os.environ.get("OIDC_PROVIDER_DIR", Path.home() / ".cache" / "benchlake-oidc"))
ADMIN = "oidc-e2e-admin-token-0123456789"
# The documented command's stand-ins (docs/dashboard.md).
DOC_ISSUER = "https://sso.example.org/realms/hpc"
DOC_SECRET = "/etc/benchlake/oidc-client-secret"
DOC_DASHBOARD = "127.0.0.1:8080"

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover
    sync_playwright = None


def _require():
    missing = []
    if sync_playwright is None:
        missing.append("the playwright Python package")
    if not os.path.exists(CHROMIUM):
        missing.append(CHROMIUM)
    if not os.path.exists(NODE):
        missing.append("node (Debian's nodejs)")
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider" / "package.json").exists():
        missing.append(f"the oidc-provider npm package in {PROVIDER_DIR}")
    if missing:
        pytest.skip("OpenID Connect test needs " + " and ".join(missing)
                    + " (scripts/test.sh installs them)")  # a failure under CI=true (conftest.py)


def documented_command():
    """The coordinator command of docs/dashboard.md's OpenID Connect
    section (the fenced block after the marker line)."""
    text = (ROOT / "docs" / "dashboard.md").read_text()
    m = re.search(r"<!-- oidc-command -->\s*```sh\n(.*?)```", text, re.S)
    assert m, "docs/dashboard.md lost its OpenID Connect command"
    return m.group(1).replace("\\\n", " ").strip()


def _wait_http(url, proc, log, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited: {Path(log).read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer: {Path(log).read_text()}")


def _stop(p):
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The provider and a coordinator started with the documented command."""
    _require()
    tmp = tmp_path_factory.mktemp("oidc")
    idp_port, http_port, grpc_port, up_http = free_port(), free_port(), free_port(), free_port()
    issuer = f"http://127.0.0.1:{idp_port}"
    dashboard = f"127.0.0.1:{http_port}"
    secret = tmp / "oidc-client-secret"
    secret.write_text("e2e-client-secret-0123456789abcdef\n")
    secret.chmod(0o600)
    idp_log = tmp / "idp.log"
    idp = subprocess.Popen(
        [NODE, str(ROOT / "tests" / "e2e" / "oidc_provider.mjs"), str(idp_port), "benchlake-dashboard",
         str(secret), f"http://{dashboard}/login/oidc/callback,http://127.0.0.1:{up_http}/login/oidc/callback"],
        stdout=open(idp_log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "OIDC_PROVIDER_DIR": str(PROVIDER_DIR)})
    coord = None
    try:
        _wait_http(f"{issuer}/.well-known/openid-configuration", idp, idp_log)
        cmd = documented_command()
        for old, new in ((DOC_ISSUER, issuer), (DOC_SECRET, str(secret)), (DOC_DASHBOARD, dashboard)):
            assert old in cmd, (old, cmd)
            cmd = cmd.replace(old, new)
        argv = shlex.split(cmd)
        assert argv[0] == "benchlake", argv
        coord_log = tmp / "coordinator.log"
        env = {**os.environ, "ADMIN_TOKEN": ADMIN, "BENCHLAKE_LISTEN": f"127.0.0.1:{grpc_port}",
               "BENCHLAKE_LOG": "info"}
        # The command as a shell runs it ("$ADMIN_TOKEN" expands), with the binary under test.
        coord = subprocess.Popen(["bash", "-c", shlex.join([BIN]) + " " + cmd.split(" ", 1)[1]],
                                 cwd=tmp, stdout=open(coord_log, "w"), stderr=subprocess.STDOUT,
                                 env=env, start_new_session=True)
        _wait_http(f"http://{dashboard}/healthz", coord, coord_log)
        shots = tmp / "screenshots"
        shots.mkdir()
        yield {"base": f"http://{dashboard}", "issuer": issuer, "shots": shots, "log": coord_log,
               "idp_log": idp_log, "secret": secret, "up_http": up_http, "tmp": tmp}
    finally:
        if coord is not None:
            _stop(coord)
        _stop(idp)
        stable = ROOT / "target" / "dashboard-screenshots"
        stable.mkdir(parents=True, exist_ok=True)
        for f in (tmp / "screenshots").glob("*.png"):
            shutil.copy(f, stable / f.name)


@pytest.fixture(scope="module")
def pw():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Session:
    """One browser context (its own cookies)."""

    def __init__(self, browser, site):
        self.ctx = browser.new_context(viewport={"width": 1300, "height": 800})
        self.page = self.ctx.new_page()
        self.site = site
        self.errors = []
        # Console errors on the dashboard's pages (the provider's are its own).
        self.page.on("console", lambda m: self.errors.append(m.text)
                     if m.type == "error" and self.page.url.startswith(site["base"]) else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.callbacks = []
        self.page.on("request", lambda r: self.callbacks.append(r.url)
                     if "/login/oidc/callback" in r.url else None)

    def shot(self, name):
        self.page.screenshot(path=str(self.site["shots"] / f"{name}.png"), full_page=True)

    def sign_in(self, user, password=None, path="/", shot=None):
        """Opens `path`, is sent to /login, clicks "Sign in with Keycloak"
        and signs in at the provider; returns the response of the callback."""
        self.page.goto(self.site["base"] + path)
        assert "/login?next=" in self.page.url, self.page.url
        with self.page.expect_navigation(url=re.compile(r".*/interaction/.*")):
            self.page.click("#oidc-login")
        assert self.page.url.startswith(self.site["issuer"] + "/interaction/"), self.page.url
        self.page.fill("#username", user)
        self.page.fill("#password", password or f"{user}-password")
        if shot:
            self.shot(shot)
        if password is not None:
            self.page.click("#idp-submit")
            self.page.wait_for_load_state("load")
            return None
        with self.page.expect_response(lambda r: "/login/oidc/callback" in r.url) as cb:
            self.page.click("#idp-submit")
        self.page.wait_for_load_state("load")
        return cb.value

    def landed(self, path):
        """Waits until the page after the callback has refreshed to `path`."""
        self.page.wait_for_url(self.site["base"] + path, timeout=15_000)
        self.page.wait_for_load_state("load")

    def session_cookie(self):
        return [c for c in self.ctx.cookies() if c["name"] == "benchlake_session"]

    def close(self):
        self.ctx.close()


def test_login_page_offers_provider_and_token(site, pw):
    s = Session(pw, site)
    try:
        s.page.goto(site["base"] + "/login")
        s.shot("oidc-login")
        link = s.page.locator("#oidc-login")
        assert link.inner_text() == "Sign in with Keycloak"
        assert link.get_attribute("href") == "/login/oidc?next=/"
        assert s.page.locator("#token").count() == 1
        assert s.errors == []
    finally:
        s.close()


def test_admin_and_user_sign_in_and_logout(site, pw):
    s = Session(pw, site)
    try:
        cb = s.sign_in("alice", path="/runs?status=FAILED", shot="oidc-provider-login")
        assert cb.status == 200, cb.status
        s.landed("/runs?status=FAILED")
        s.shot("oidc-signed-in-admin")
        assert s.page.inner_text("#who") == "alice admin"
        cookies = s.session_cookie()
        assert len(cookies) == 1 and cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict"
        assert re.fullmatch(r"[0-9a-f]{64}", cookies[0]["value"])
        assert not [c for c in s.ctx.cookies() if c["name"] == "benchlake_oidc"], s.ctx.cookies()
        assert "FAILED" in s.page.inner_text("main")
        # The session works for the other pages and the JSON.
        s.page.goto(site["base"] + "/")
        assert s.page.url == site["base"] + "/"
        assert s.page.inner_text("#who") == "alice admin"
        # A callback is used once: the same URL again is refused.
        used = s.callbacks[-1]
        r = s.page.request.get(used)
        assert r.status == 400 and "used already" in r.text(), (r.status, r.text()[:500])
        # Logout ends the session on the server, not just the cookie.
        old = cookies[0]["value"]
        s.page.click("form.logout button")
        s.page.wait_for_load_state("load")
        assert "/login" in s.page.url
        s.ctx.add_cookies([{"name": "benchlake_session", "value": old, "url": site["base"]}])
        s.page.goto(site["base"] + "/")
        assert "/login" in s.page.url
        assert s.errors == []
    finally:
        s.close()
    s = Session(pw, site)
    try:
        s.sign_in("bob")
        s.landed("/")
        s.shot("oidc-signed-in-user")
        assert s.page.inner_text("#who") == "bob user"
        assert s.errors == []
    finally:
        s.close()
    log = site["log"].read_text()
    signed = [l for l in log.splitlines() if "dashboard sign-in (OpenID Connect)" in l]
    assert any("alice" in l and "admin" in l for l in signed), log[-2000:]
    assert any("bob" in l and "user" in l for l in signed), log[-2000:]
    assert "e2e-client-secret" not in log


def test_unmapped_user_is_refused(site, pw):
    s = Session(pw, site)
    try:
        cb = s.sign_in("carol")
        assert cb.status == 403
        s.page.wait_for_load_state("load")
        s.shot("oidc-refused")
        msg = s.page.inner_text("#login-error")
        assert msg == ("carol has no benchlake role: the claim 'groups' holds 'visitors', "
                       "and none of these is given a role here"), msg
        assert s.session_cookie() == []
        s.page.goto(site["base"] + "/")
        assert "/login" in s.page.url
    finally:
        s.close()


def test_wrong_password_stays_at_the_provider(site, pw):
    s = Session(pw, site)
    try:
        s.sign_in("alice", password="not-her-password")
        assert s.page.url.startswith(site["issuer"])
        assert "Wrong username or password" in s.page.inner_text("#idp-error")
        assert s.callbacks == [] and s.session_cookie() == []
    finally:
        s.close()


def test_callback_only_in_the_browser_that_started(site, pw):
    a = Session(pw, site)
    b = Session(pw, site)
    try:
        # Browser A starts a sign-in and passes the provider's login; its
        # context's own request client (same cookies) stops before the
        # callback, which Playwright cannot hold back once redirects began.
        a.page.goto(site["base"] + "/login")
        a.page.click("#oidc-login")
        a.page.wait_for_url(re.compile(r".*/interaction/.*"))
        action = a.page.locator("form").get_attribute("action")
        r = a.ctx.request.post(site["issuer"] + action, max_redirects=0,
                               form={"username": "alice", "password": "alice-password"})
        assert r.status in (302, 303), (r.status, r.text()[:300])
        r = a.ctx.request.get(r.headers["location"], max_redirects=0)
        assert r.status in (302, 303), (r.status, r.text()[:300])
        callback = r.headers["location"]
        assert callback.startswith(site["base"] + "/login/oidc/callback?code="), callback
        # Browser B (no binding cookie) opens A's callback: refused, no session.
        r = b.page.goto(callback)
        assert r.status == 400
        assert "started in another browser" in b.page.inner_text("#login-error")
        assert b.session_cookie() == []
        # A's sign-in is spent too (a state is used once).
        r = a.page.goto(callback)
        assert r.status == 400 and "used already" in a.page.inner_text("#login-error")
        assert a.session_cookie() == []
    finally:
        a.close()
        b.close()


def test_token_login_still_works(site, pw):
    s = Session(pw, site)
    try:
        s.page.goto(site["base"] + "/login")
        s.page.fill("#token", ADMIN)
        s.page.click("button[type=submit]")
        s.page.wait_for_load_state("load")
        assert s.page.url == site["base"] + "/"
        assert s.page.inner_text("#who") == "token admin"
        assert s.errors == []
    finally:
        s.close()


def test_up_offers_sign_in(site, pw):
    """`benchlake up` takes the same flags and says how to sign in."""
    tmp = site["tmp"] / "up"
    tmp.mkdir()
    log = tmp / "up.log"
    base = f"http://127.0.0.1:{site['up_http']}"
    p = subprocess.Popen(
        [BIN, "up", "--data", str(tmp / "data"), "--listen", f"127.0.0.1:{free_port()}",
         "--http-addr", f"127.0.0.1:{site['up_http']}", "--user-tokens", "oidc-e2e-user-token-0123456789",
         "--oidc-issuer", site["issuer"], "--oidc-client-id", "benchlake-dashboard",
         "--oidc-scopes", "openid,profile,groups", "--oidc-role-map", "bench-admins=admin,staff=user"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "BENCHLAKE_OIDC_CLIENT_SECRET": site["secret"].read_text().strip()})
    try:
        deadline = time.time() + 60
        while "dashboard sign-in:" not in log.read_text() and time.time() < deadline:
            assert p.poll() is None, log.read_text()
            time.sleep(0.2)
        line = next(l for l in log.read_text().splitlines() if l.startswith("dashboard sign-in:"))
        assert line == (f'dashboard sign-in: "Sign in with OpenID Connect" ({site["issuer"]}; '
                        "roles from the claim 'groups'), or an admin or user token"), line
        s = Session(pw, {**site, "base": base})
        try:
            s.sign_in("bob")
            s.landed("/")
            assert s.page.inner_text("#who") == "bob user"
        finally:
            s.close()
    finally:
        _stop(p)
    assert "oidc-e2e-user-token" not in log.read_text()


def test_unreachable_provider_and_bad_settings(site, pw, tmp_path):
    """A provider that does not answer: the login page says so (502); a
    bad flag stops the start with a message naming it."""
    http = free_port()
    dead = free_port()
    env = {**os.environ, "BENCHLAKE_OIDC_CLIENT_SECRET": "x" * 20}
    p = subprocess.Popen(
        [BIN, "coordinator", "--listen", f"127.0.0.1:{free_port()}", "--state", str(tmp_path / "s.db"),
         "--lake", str(tmp_path / "lake"), "--http-addr", f"127.0.0.1:{http}",
         "--oidc-issuer", f"http://127.0.0.1:{dead}", "--oidc-client-id", "c", "--oidc-role-map", "*=user"],
        stdout=open(tmp_path / "c.log", "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{http}/healthz", p, tmp_path / "c.log")
        s = Session(pw, {**site, "base": f"http://127.0.0.1:{http}"})
        try:
            s.page.goto(f"http://127.0.0.1:{http}/login")
            # No tokens: only the provider's button.
            assert s.page.locator("#token").count() == 0
            with s.page.expect_response(lambda r: "/login/oidc" in r.url) as resp:
                s.page.click("#oidc-login")
            assert resp.value.status == 502
            assert "could not be reached" in s.page.inner_text("#login-error")
        finally:
            s.close()
    finally:
        _stop(p)
    assert f"127.0.0.1:{dead}" in (tmp_path / "c.log").read_text()
    for flags, msg in [
        (["--oidc-issuer", "http://sso.example.org", "--oidc-client-id", "c", "--oidc-role-map", "a=user",
          "--http-addr", "127.0.0.1:1"], "--oidc-issuer: 'http://sso.example.org' must be https://"),
        (["--oidc-issuer", "https://sso.example.org", "--oidc-client-id", "c", "--oidc-role-map", "a=root",
          "--http-addr", "127.0.0.1:1"], "the role 'root' is not admin or user"),
        (["--oidc-issuer", "https://sso.example.org", "--oidc-client-id", "c", "--oidc-role-map", "a=user"],
         "--oidc-issuer needs --oidc-redirect-url"),
    ]:
        r = subprocess.run([BIN, "coordinator", "--listen", "127.0.0.1:0", "--state", str(tmp_path / "t.db"),
                            "--lake", str(tmp_path / "lake2"), *flags],
                           capture_output=True, text=True, timeout=30, env=env)
        assert r.returncode != 0 and msg in r.stderr, (flags, r.stderr)
