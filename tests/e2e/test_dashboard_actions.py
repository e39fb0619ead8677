"""The admins' dashboard actions in a real browser (Debian's chromium driven by
Playwright) against `benchlake up` with admin and user tokens: an admin
triggers a schedule from the overview and cancels a running run from its
page (confirming the dialog); a user sees no action button, and a forged
POST from the user's session (same origin, with a made-up form token or the
user's real one) is refused with 403; the /audit page lists the admin's
actions and a cancel made through the API (the CLI). Screenshots are kept in
target/dashboard-screenshots/ (actions-*.png)."""
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from conftest import BIN, ROOT, free_port

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
ADMIN = "act-admin-token-0123456789"
USER = "act-user-token-0123456789"
ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover
    sync_playwright = None


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    missing = [m for m, ok in (("the playwright Python package", sync_playwright is not None),
                               (CHROMIUM, os.path.exists(CHROMIUM))) if not ok]
    if missing:
        # a failure under CI=true (conftest.py)
        pytest.skip("needs " + " and ".join(missing) + " (scripts/test.sh installs them)")
    tmp = tmp_path_factory.mktemp("actions")
    http, listen = free_port(), free_port()
    log = open(tmp / "up.log", "w")
    p = subprocess.Popen(
        [BIN, "up", "--data", str(tmp / "data"), "--listen", f"127.0.0.1:{listen}",
         "--http-addr", f"127.0.0.1:{http}", "--admin-tokens", ADMIN, "--user-tokens", USER],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    addr = f"127.0.0.1:{listen}"
    base = None
    deadline = time.time() + 120
    while time.time() < deadline:
        text = (tmp / "up.log").read_text()
        m = re.search(r"^dashboard: (http://\S+)/$", text, re.M)
        if m:
            base = m.group(1)
            r = cli("agents", "list", addr=addr)
            if r.returncode == 0 and "ONLINE" in r.stdout:
                break
        if p.poll() is not None:
            raise AssertionError(f"benchlake up exited: {text}")
        time.sleep(0.3)
    else:
        os.killpg(p.pid, signal.SIGKILL)
        raise AssertionError("benchlake up did not start: " + (tmp / "up.log").read_text())
    shots = tmp / "screenshots"
    shots.mkdir()
    yield {"base": base, "addr": addr, "shots": shots}
    os.killpg(p.pid, signal.SIGINT)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
    stable = ROOT / "target" / "dashboard-screenshots"
    stable.mkdir(parents=True, exist_ok=True)
    for f in shots.glob("*.png"):
        shutil.copy(f, stable / f.name)


def cli(*args, addr, token=USER):
    return subprocess.run([BIN, *args, "--coordinator", addr, "--token", token],
                          capture_output=True, text=True, timeout=60)


def run_id(r):
    assert r.returncode == 0, r.stdout + r.stderr
    ids = ULID.findall(r.stdout + r.stderr)
    assert ids, r.stdout + r.stderr
    return ids[0]


def test_admin_triggers_and_cancels_user_is_refused(up):
    base, addr, shots = up["base"], up["addr"], up["shots"]
    r = cli("schedule", "create", "actions-nightly", "hostinfo", "--cron", "0 2 * * *", addr=addr)
    assert r.returncode == 0, r.stderr
    long_run = run_id(cli("run", "submit", "sleep", "-p", "seconds=300", addr=addr))
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = b.new_context(viewport={"width": 1400, "height": 900})
        page = ctx.new_page()
        errors, dialogs = [], []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))

        def answer(d):
            dialogs.append(d.message)
            d.accept()
        page.on("dialog", answer)

        def login(token):
            ctx.clear_cookies()
            page.goto(base + "/login")
            page.fill("#token", token)
            page.click("button[type=submit]")
            page.wait_for_load_state("load")
            assert page.url == base + "/", page.url

        # The user: no buttons anywhere, no audit page, and forged POSTs refused.
        login(USER)
        page.goto(base + "/")
        assert page.locator("#schedules tbody tr", has_text="actions-nightly").count() == 1
        assert page.locator("form.action").count() == 0
        assert page.locator("nav a[href='/audit']").count() == 0
        page.screenshot(path=str(shots / "actions-user-overview.png"), full_page=True)
        page.goto(f"{base}/runs/{long_run}")
        assert page.locator("form.action").count() == 0
        assert errors == [], errors
        assert page.goto(base + "/audit").status == 403
        errors.clear()  # chromium logs the 403 it was given
        origin = {"Origin": base}
        for path in ["/schedules/actions-nightly/trigger", f"/runs/{long_run}/cancel"]:
            forged = page.request.post(base + path, form={"csrf": "0" * 64}, headers=origin)
            assert forged.status == 403, (path, forged.status, forged.text())
            assert "form token (csrf) is not this session" in forged.text()
            bare = page.request.post(base + path, form={}, headers=origin)
            assert bare.status == 403 and "missing" in bare.text()
        # Still untouched.
        r = cli("run", "show", long_run, addr=addr)
        assert "CANCELLED" not in r.stdout, r.stdout

        # The admin: trigger from the overview, cancel from the run page.
        login(ADMIN)
        page.goto(base + "/")
        row = page.locator("#schedules tbody tr", has_text="actions-nightly")
        page.screenshot(path=str(shots / "actions-admin-overview.png"), full_page=True)
        with page.expect_navigation():
            row.locator("#trigger-actions-nightly").click()
        m = re.fullmatch(re.escape(base) + r"/runs/([0-9A-HJKMNP-TV-Z]{26})", page.url)
        assert m, page.url
        triggered = m.group(1)
        assert "actions-nightly" in page.inner_text("dl.facts")
        page.goto(f"{base}/runs/{long_run}")
        page.screenshot(path=str(shots / "actions-admin-run.png"), full_page=True)
        # Dismissing the confirmation sends nothing.
        page.remove_listener("dialog", answer)
        page.once("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.click("#cancel-run")
        time.sleep(0.5)
        assert page.inner_text("#run-state") in ("PENDING", "RUNNING")
        page.on("dialog", answer)
        with page.expect_navigation():
            page.click("#cancel-run")
        assert page.url == f"{base}/runs/{long_run}"
        deadline = time.time() + 30
        while page.inner_text("#run-state") != "CANCELLED" and time.time() < deadline:
            time.sleep(0.5)
            page.reload()
        assert page.inner_text("#run-state") == "CANCELLED"
        assert dialogs == [f"Cancel run {long_run}? Its tasks are stopped."] * 2, dialogs

        # A cancel through the API (the user's own run) is audited as well.
        other = run_id(cli("run", "submit", "sleep", "-p", "seconds=300", addr=addr))
        r = cli("run", "cancel", other, addr=addr)
        assert r.returncode == 0, r.stderr

        page.goto(base + "/audit")
        page.screenshot(path=str(shots / "actions-audit.png"), full_page=True)
        rows = page.locator("#audit tbody tr")
        got = [[rows.nth(i).locator("td").nth(j).inner_text() for j in (2, 3, 4, 5, 6)]
               for i in range(rows.count())]
        # The schedule's creation through the API is in the trail too.
        assert got == [
            ["user", "api", "run.cancel", other, "ok"],
            ["admin", "dashboard", "run.cancel", long_run, "ok"],
            ["admin", "dashboard", "schedule.trigger", "actions-nightly", "ok"],
            ["user", "api", "schedule.create", "actions-nightly", "ok"],
        ], got
        assert triggered in rows.nth(2).inner_text()
        assert errors == [], errors
        b.close()
