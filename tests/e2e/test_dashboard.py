"""The web dashboard in a real browser: Debian's chromium driven by Playwright
(PyPI; never `playwright install`), against `benchlake up --demo --keep` with
admin and user tokens, so the lake and the state hold the demo's runs.

Checked: every page loads with no console error and shows what the lake and
the state hold (run ids, states, a verdict, a node name); filters, run-id
search and drill-down from the overview to a run page; login with a user
token, a wrong token refused, pages without a session redirect to /login,
logout; attacker-influenced text (a parameter, a failure reason, a log tail
holding <script>) is shown as text and never runs; the security headers; a
running run's page updates by itself. Screenshots of every page are kept in
the test's tmp dir and copied to target/dashboard-screenshots/."""
import datetime
import getpass
import json
import math
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, ROOT, free_port, require_under_ci

try:
    import duckdb
except ImportError:  # pragma: no cover
    duckdb = None

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
ADMIN = "dash-admin-token-0123456789"
USER = "dash-user-token-0123456789"
ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")
XSS = "<script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\">"

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover
    sync_playwright = None


def _require_browser():
    missing = []
    if sync_playwright is None:
        missing.append("the playwright Python package")
    if not os.path.exists(CHROMIUM):
        missing.append(CHROMIUM)
    if missing:
        msg = "dashboard browser test needs " + " and ".join(missing) + " (scripts/test.sh installs them)"
        pytest.skip(msg)  # a failure under CI=true (conftest.py)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`benchlake up --demo --keep` with tokens; yields (base URL, gRPC
    address, data dir, shots dir)."""
    _require_browser()
    tmp = tmp_path_factory.mktemp("dashboard")
    data = tmp / "data"
    http = free_port()
    listen = free_port()
    env = dict(os.environ)
    log = open(tmp / "up.log", "w")
    p = subprocess.Popen(
        [BIN, "up", "--demo", "--keep", "--data", str(data), "--listen", f"127.0.0.1:{listen}",
         "--http-addr", f"127.0.0.1:{http}", "--admin-tokens", ADMIN, "--user-tokens", USER],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.time() + 240
    text = ""
    while time.time() < deadline:
        text = (tmp / "up.log").read_text()
        if "still up (--keep)" in text:
            break
        if p.poll() is not None:
            raise AssertionError(f"benchlake up exited: {text}")
        time.sleep(0.2)
    else:
        p.kill()
        raise AssertionError(f"the demo did not finish: {text}")
    m = re.search(r"^dashboard: (http://\S+)/$", text, re.M)
    assert m, text
    shots = tmp / "screenshots"
    shots.mkdir()
    yield {"base": m.group(1), "addr": f"127.0.0.1:{listen}", "data": data, "shots": shots, "log": text}
    os.killpg(p.pid, signal.SIGINT)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
    stable = ROOT / "target" / "dashboard-screenshots"
    stable.mkdir(parents=True, exist_ok=True)
    for f in shots.glob("*.png"):
        shutil.copy(f, stable / f.name)


def submit(demo, bench, *params):
    args = [BIN, "run", "submit", bench, "--coordinator", demo["addr"], "--token", USER]
    for kv in params:
        args += ["-p", kv]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    m = ULID.search(r.stdout + r.stderr)
    assert m, r.stdout + r.stderr
    return m.group(0)


def lake_rows(demo, sql):
    con = duckdb.connect()
    lake = demo["data"] / "lake" / "tables"
    return con.execute(sql.replace("LAKE", str(lake))).fetchall()


class Browser:
    def __init__(self, pw, demo):
        self.b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        self.ctx = self.b.new_context(viewport={"width": 1400, "height": 900})
        self.page = self.ctx.new_page()
        self.errors = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.errors.append("dialog: " + d.message), d.dismiss()))
        # Everything a page loads comes from the coordinator (no CDN, no fonts).
        self.page.on("request", lambda r: None if r.url.startswith(demo["base"] + "/")
                     else self.errors.append("external request: " + r.url))
        self.base = demo["base"]
        self.shots = demo["shots"]

    def go(self, path, shot=None, expect_errors=False):
        before = len(self.errors)
        resp = self.page.goto(self.base + path)
        self.page.wait_for_load_state("load")
        if shot:
            self.page.screenshot(path=str(self.shots / f"{shot}.png"), full_page=True)
        if not expect_errors:
            assert self.errors[before:] == [], (path, self.errors[before:])
        return resp

    def login(self, token):
        self.go("/login")
        self.page.fill("#token", token)
        self.page.click("button[type=submit]")
        self.page.wait_for_load_state("load")

    def close(self):
        self.b.close()


@pytest.fixture(scope="module")
def browser(demo):
    with sync_playwright() as pw:
        b = Browser(pw, demo)
        yield b
        b.close()


def test_login_session_and_redirects(demo, browser):
    # No session: every page and its JSON refuse.
    r = browser.go("/runs?status=FAILED")
    assert browser.page.url.startswith(demo["base"] + "/login?next=")
    assert r.status == 200
    api = browser.page.request.get(demo["base"] + "/api/runs/01JD3Q6Z5YV9C2M4T8N0R7K1PX")
    assert api.status == 401
    # A wrong token is refused with the form again.
    browser.go("/login", shot="login")
    browser.page.fill("#token", "not-a-token-at-all-xx")
    with browser.page.expect_response(lambda r: r.url.endswith("/login") and r.request.method == "POST") as resp:
        browser.page.click("button[type=submit]")
    assert resp.value.status == 401
    assert "Wrong token" in browser.page.inner_text("#login-error")
    assert browser.ctx.cookies() == []
    # The user token logs in; the cookie is a random id, never the token.
    browser.login(USER)
    assert browser.page.url == demo["base"] + "/"
    cookies = browser.ctx.cookies()
    assert len(cookies) == 1, cookies
    c = cookies[0]
    assert c["name"] == "benchlake_session" and c["httpOnly"] and c["sameSite"] == "Strict"
    assert USER not in c["value"] and ADMIN not in c["value"] and len(c["value"]) == 64
    # Logout ends the session server-side: the old cookie no longer works.
    old = c["value"]
    browser.page.click("form.logout button")
    browser.page.wait_for_load_state("load")
    assert "/login" in browser.page.url
    browser.ctx.add_cookies([{"name": "benchlake_session", "value": old, "url": demo["base"]}])
    browser.go("/")
    assert "/login" in browser.page.url
    # Admin tokens work too.
    browser.ctx.clear_cookies()
    browser.login(ADMIN)
    assert browser.page.url == demo["base"] + "/"


def test_pages_show_the_lake(demo, browser):
    browser.ctx.clear_cookies()
    browser.login(USER)
    # A FAIL verdict (an impossible write-bandwidth bound) beside the demo's PASS.
    failing = submit(demo, "pio", "np=1", "block_size=4MiB", "transfer_size=1MiB", "iterations=1",
                     "check_io_write_bw_mib_s=100000000")
    deadline = time.time() + 120
    while time.time() < deadline:
        j = browser.page.request.get(f"{demo['base']}/api/runs/{failing}").json()
        if j["final"] and j["verdict"]:
            break
        time.sleep(0.5)
    assert j["verdict"] == "FAIL", j

    runs = lake_rows(demo, "SELECT run_id, benchmark, status FROM read_parquet('LAKE/runs/**/*.parquet', hive_partitioning=true)")
    checks = lake_rows(demo, "SELECT run_id, \"check\", status FROM read_parquet('LAKE/checks/**/*.parquet', hive_partitioning=true)")
    hosts = {r[0] for r in lake_rows(demo, "SELECT coalesce(node, hostname) FROM read_parquet('LAKE/node_facts/**/*.parquet', hive_partitioning=true, union_by_name=true)")}
    assert runs and checks and hosts

    # Overview: the node (failing first), its verdicts, the strips.
    browser.go("/", shot="overview")
    nodes = browser.page.inner_text("#nodes")
    assert any(h in nodes for h in hosts), (nodes, hosts)
    first_row = browser.page.locator("#nodes tbody tr").first.inner_text()
    assert "FAIL" in first_row
    fail_checks = {c for (rid, c, s) in checks if rid == failing and s == "FAIL"}
    # Columns are readable names grouped by family, the raw check name is the header's title.
    assert fail_checks and any(browser.page.locator(f"#nodes th.check[title='{c}']").count() == 1
                               for c in fail_checks), nodes
    assert "I/O" in browser.page.inner_text("#nodes thead") and "write bandwidth" in nodes
    assert browser.page.locator("#adhoc a.sc").count() >= len(runs)

    # Runs list: every run of the lake's runs table with its status.
    browser.go("/runs", shot="runs")
    table = browser.page.inner_text("#runs")
    for rid, bench, status in runs:
        assert rid in table and bench in table
    for rid, bench, status in runs:
        row = browser.page.locator(f"#runs tr:has(a[href='/runs/{rid}'])").inner_text()
        assert status in row, (rid, status, row)

    # Filters through the form.
    browser.page.select_option("select[name=status]", "FAILED")
    browser.page.click("#filters button[type=submit]")
    browser.page.wait_for_load_state("load")
    assert "status=FAILED" in browser.page.url
    rows = browser.page.locator("#runs tbody tr")
    assert rows.count() >= 1
    for i in range(rows.count()):
        assert "FAILED" in rows.nth(i).inner_text()
    browser.go("/runs?verdict=FAIL", shot="runs-verdict-fail")
    ids = ULID.findall(browser.page.inner_text("#runs"))
    # The demo's hostinfo run expecting 4096 cores fails on its node too.
    node_fail = {r[0] for r in lake_rows(demo, "SELECT run_id FROM read_parquet('LAKE/node_health/**/*.parquet', "
                                               "hive_partitioning=true) WHERE status <> 'PASS'")}
    assert len(node_fail) == 1 and sorted(ids) == sorted([failing, *node_fail]), (ids, node_fail)
    pio_runs = {r[0] for r in runs if r[1] == "pio"}
    # A run's verdict is the worst of its checks (FAIL > REGRESSION > ERROR >
    # INCONCLUSIVE > NO_REFERENCE > PASS): the demo's pio run has no history, so
    # its relative checks say NO_REFERENCE and it is listed under that verdict, not PASS.
    order = ["FAIL", "REGRESSION", "ERROR", "INCONCLUSIVE", "NO_REFERENCE", "PASS"]
    statuses = {}
    for (rid, c, s) in checks:
        statuses.setdefault(rid, []).append(s)
    worst = {rid: min(sts, key=order.index) for rid, sts in statuses.items()}
    for verdict in ("PASS", "NO_REFERENCE"):
        browser.go(f"/runs?verdict={verdict}&benchmark=pio")
        want = {rid for rid, w in worst.items() if w == verdict} & pio_runs
        if want:
            assert set(ULID.findall(browser.page.inner_text("#runs"))) == want, verdict
        else:
            assert browser.page.locator("#no-runs").count() == 1, verdict
    assert any(w == "NO_REFERENCE" for rid, w in worst.items() if rid in pio_runs), worst
    browser.go("/runs?benchmark=hostinfo")
    assert {r[0] for r in runs if r[1] == "hostinfo"} == set(ULID.findall(browser.page.inner_text("#runs")))
    # Run-id search: a prefix lists, a whole id opens the run.
    rid = runs[0][0]
    browser.go(f"/runs?q={rid[:20]}")
    assert rid in ULID.findall(browser.page.inner_text("#runs"))
    browser.go(f"/runs?q={rid}")
    assert browser.page.url == f"{demo['base']}/runs/{rid}"
    # Bad inputs are 400, not a page.
    assert browser.go("/runs/not-a-run-id", expect_errors=True).status == 400
    assert browser.go("/runs?status=BOGUS", expect_errors=True).status == 400
    assert browser.page.request.get(demo["base"] + "/api/runs/..%2F..%2Fetc").status in (400, 404)

    # Drill-down: the overview's FAIL cell opens the failing run's page.
    browser.go("/")
    browser.page.locator("#nodes a.v-FAIL").first.click()
    browser.page.wait_for_load_state("load")
    assert browser.page.url == f"{demo['base']}/runs/{failing}"
    browser.page.screenshot(path=str(demo["shots"] / "run-fail.png"), full_page=True)
    assert browser.page.inner_text("#run-verdict") == "FAIL"
    verdicts = browser.page.inner_text("#verdicts")
    for c in fail_checks:
        assert c in verdicts
    tables = browser.page.inner_text("#tables")
    assert "io_results" in tables and "checks" in tables
    assert browser.page.inner_text("#run-state") == "SUCCEEDED"
    assert any(h in browser.page.inner_text("#tasks") for h in hosts)

    # The node-level FAIL (hostinfo expecting 4096 cores): the run page lists
    # its node_health rows, each node linked to the node's page.
    (nf,) = node_fail
    node_rows = lake_rows(demo, "SELECT node, \"check\", status FROM read_parquet('LAKE/node_health/**/*.parquet', "
                                f"hive_partitioning=true) WHERE run_id = '{nf}'")
    bad_node = next(n for n, c, st in node_rows if st == "FAIL")
    browser.go(f"/runs/{nf}", shot="run-node-fail")
    assert "No checks ran" not in browser.page.inner_text("main")
    per_node = browser.page.inner_text("#node-verdicts")
    assert bad_node in per_node and "node.cores" in per_node and "FAIL" in per_node
    browser.page.locator(f"#node-verdicts a[href='/nodes/{bad_node}']").first.click()
    browser.page.wait_for_load_state("load")
    assert browser.page.url == f"{demo['base']}/nodes/{bad_node}"
    browser.page.screenshot(path=str(demo["shots"] / "node.png"), full_page=True)
    assert bad_node in browser.page.inner_text("#identity")
    cores = browser.page.locator(".series-fig[data-check='node.cores']")
    # The failing run is a red point of the series (a later run may pass).
    assert cores.count() == 1 and cores.locator("circle.pt.v-FAIL").count() >= 1
    assert "-" not in cores.locator("svg text").first.text_content()
    families = browser.page.locator("main h3").all_inner_texts()
    assert "Node" in families and "I/O" in families, families
    # The overview links each node to its page; an unknown or bad name is a 404.
    browser.go("/")
    assert browser.page.locator(f"#nodes a[href='/nodes/{bad_node}']").count() == 1
    assert browser.go("/nodes/no-such-node", expect_errors=True).status == 404
    assert browser.go("/nodes/bad%2Fname", expect_errors=True).status in (400, 404)


def _xss_catalog():
    # TOML basic string: escape backslashes and double quotes.
    toml = XSS.replace("\\", "\\\\").replace('"', '\\"')
    return (
        "[[benchmark]]\n"
        'name = "shout"\n'
        'kind = "noop"\n'
        'command = ["sh", "-c", "echo \\"$1\\"; echo \\"$1\\" >&2; exit 3", "shout", "{text}"]\n'
        "timeout_s = 60\n"
        "[[benchmark.param]]\n"
        'name = "text"\n'
        'type = "choice"\n'
        f'choices = ["plain", "{toml}"]\n'
    )


def test_script_in_run_data_is_text(demo, browser, tmp_path):
    browser.ctx.clear_cookies()
    browser.login(USER)
    # String parameters are [A-Za-z0-9._,:=+@/-] only, but a site's catalog may
    # list any choice: a second agent offers one holding <script>, and its
    # benchmark prints it to stdout and stderr and fails (log tails, failure
    # reason).
    (tmp_path / "catalog.toml").write_text(_xss_catalog())
    agent = subprocess.Popen(
        [BIN, "agent", "--coordinator", demo["addr"], "--token", ADMIN, "--name", "xss-node",
         "--catalog", str(tmp_path / "catalog.toml"), "--work-dir", str(tmp_path / "work"),
         "--poll-ms", "100", "--run-as", getpass.getuser()],
        stdout=open(tmp_path / "agent.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 60
        rid = None
        while time.time() < deadline and rid is None:
            r = subprocess.run([BIN, "run", "submit", "shout", "-p", f"text={XSS}", "--agents", "xss-node",
                                "--max-attempts", "1", "--coordinator", demo["addr"], "--token", USER],
                               capture_output=True, text=True, timeout=60)
            m = ULID.search(r.stdout + r.stderr) if r.returncode == 0 else None
            rid = m.group(0) if m else None
            if rid is None:
                time.sleep(0.5)  # the agent has not registered yet
        assert rid, r.stderr
        deadline = time.time() + 60
        while time.time() < deadline:
            if browser.page.request.get(f"{demo['base']}/api/runs/{rid}").json()["final"]:
                break
            time.sleep(0.3)
        browser.go(f"/runs/{rid}", shot="run-xss")
        assert browser.page.evaluate("() => window.__xss") is None
        assert XSS in browser.page.inner_text("#params")
        assert browser.page.inner_text("#run-state") == "FAILED"
        # A failed task's log tails are open.
        tails = browser.page.inner_text("#tasks pre.tail")
        assert XSS in tails
        # Only the one script of the page: /static/dashboard.js; no injected element.
        srcs = browser.page.evaluate("() => Array.from(document.scripts).map(s => s.src)")
        assert srcs == [demo["base"] + "/static/dashboard.js"], srcs
        assert browser.page.locator("img").count() == 0
        for path in ("/", "/runs", "/runs?benchmark=shout"):
            browser.go(path)
            assert browser.page.evaluate("() => window.__xss") is None
        h = browser.page.request.get(f"{demo['base']}/runs/{rid}").headers
        assert "default-src 'self'" in h["content-security-policy"]
        assert "frame-ancestors 'none'" in h["content-security-policy"]
        assert h["x-content-type-options"] == "nosniff"
        assert h["referrer-policy"] == "same-origin"
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(timeout=20)


def test_running_run_updates_live(demo, browser):
    browser.ctx.clear_cookies()
    browser.login(USER)
    rid = submit(demo, "sleep", "seconds=5")
    browser.go(f"/runs/{rid}")
    state = browser.page.inner_text("#run-state")
    assert state in ("PENDING", "RUNNING"), state
    assert browser.page.get_attribute("body", "data-live") == f"/api/runs/{rid}"
    browser.page.screenshot(path=str(demo["shots"] / "run-live.png"), full_page=True)
    # No reload by the test: the page's script polls and reloads itself.
    before = len(browser.errors)
    deadline = time.time() + 60
    state = None
    while time.time() < deadline:
        try:
            state = browser.page.inner_text("#run-state", timeout=2000)
        except Exception:  # the page is reloading
            state = None
        if state == "SUCCEEDED":
            break
        time.sleep(0.3)
    assert state == "SUCCEEDED"
    assert browser.page.get_attribute("body", "data-live") is None
    assert browser.errors[before:] == [], browser.errors[before:]


def test_schedule_strip(demo, browser):
    browser.ctx.clear_cookies()
    browser.login(USER)
    base = [BIN, "schedule"]
    conn = ["--coordinator", demo["addr"], "--token", USER]
    r = subprocess.run(base + ["create", "nightly-io", "pio", "--cron", "0 2 * * *", "--tz", "Europe/Berlin",
                               "-p", "np=1", "-p", "block_size=4MiB", "-p", "transfer_size=1MiB",
                               "-p", "iterations=1"] + conn, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    fired = []
    for _ in range(2):
        r = subprocess.run(base + ["trigger", "nightly-io"] + conn, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        m = ULID.findall(r.stdout + r.stderr)
        assert m, r.stdout + r.stderr
        rid = m[-1]
        fired.append(rid)
        deadline = time.time() + 120
        while time.time() < deadline:
            j = browser.page.request.get(f"{demo['base']}/api/runs/{rid}").json()
            if j["final"] and j["verdict"]:
                break
            time.sleep(0.3)
        # A new schedule has no history: NO_REFERENCE, never a green PASS.
        assert j["verdict"] == "NO_REFERENCE", j
    browser.go("/", shot="overview-schedule")
    row = browser.page.locator("#schedules tbody tr", has_text="nightly-io")
    assert "Europe/Berlin" in row.inner_text()
    cells = row.locator("a.sc")
    assert [cells.nth(i).get_attribute("href") for i in range(cells.count())] == [f"/runs/{x}" for x in fired]
    assert all("v-NO_REFERENCE" in cells.nth(i).get_attribute("class") for i in range(cells.count()))
    # Shown grey, never green.
    colour = browser.page.evaluate("e => getComputedStyle(e).backgroundColor", cells.first.element_handle())
    assert colour == "rgb(125, 135, 147)", colour
    # The schedule's name leads to its runs.
    before = len(browser.errors)
    row.locator("a", has_text="nightly-io").click()
    browser.page.wait_for_load_state("load")
    assert "schedule=" in browser.page.url
    assert set(ULID.findall(browser.page.inner_text("#runs"))) == set(fired)
    assert browser.page.locator("select[name=schedule] option[selected]").inner_text() == "nightly-io"
    assert browser.errors[before:] == [], browser.errors[before:]
    # The strip's newest cell opens that run.
    browser.go("/")
    browser.page.locator("#schedules tbody tr", has_text="nightly-io").locator("a.sc").last.click()
    browser.page.wait_for_load_state("load")
    assert browser.page.url == f"{demo['base']}/runs/{fired[-1]}"
    assert "nightly-io" in browser.page.inner_text("dl.facts")


def _wait_final(demo, browser, rid, verdict=True, timeout=120):
    deadline = time.time() + timeout
    j = {}
    while time.time() < deadline:
        j = browser.page.request.get(f"{demo['base']}/api/runs/{rid}").json()
        if j["final"] and (j["verdict"] or not verdict):
            return j
        time.sleep(0.3)
    raise AssertionError(f"run {rid} did not finish: {j}")


def _png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_linktest_page(demo, browser, tmp_path):
    """A netprobe run (LinkTest 2.1.17 file from 3 agents) through the cluster:
    the run page links its LinkTest view, which answers from the per-host
    summary (the lake's linktest_host_summary rows) and links the pair view;
    the pair view shows the lake's slowest pair and retests; hovering the
    matrix shows the pair's time."""
    browser.ctx.clear_cookies()
    browser.login(USER)
    agents = []
    try:
        for i in range(3):
            agents.append(subprocess.Popen(
                [BIN, "agent", "--coordinator", demo["addr"], "--token", ADMIN, "--name", f"lt-node{i}",
                 "--address", "127.0.0.1", "--work-dir", str(tmp_path / f"w{i}"), "--poll-ms", "100",
                 "--run-as", getpass.getuser()],
                stdout=open(tmp_path / f"agent{i}.log", "w"), stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.time() + 60
        rid = None
        while time.time() < deadline and rid is None:
            r = subprocess.run([BIN, "run", "submit", "netprobe", "--agents", "lt-node0,lt-node1,lt-node2",
                                "-p", "num_messages=40", "-p", "serial_retests=2", "-p", "port_base=47300",
                                "--coordinator", demo["addr"], "--token", USER],
                               capture_output=True, text=True, timeout=60)
            m = ULID.search(r.stdout + r.stderr) if r.returncode == 0 else None
            rid = m.group(0) if m else None
            if rid is None:
                time.sleep(0.5)  # the agents have not registered yet
        assert rid, r.stderr
        j = _wait_final(demo, browser, rid)
        assert j["state"] == "SUCCEEDED", j
    finally:
        for a in agents:
            os.killpg(a.pid, signal.SIGTERM)
            a.wait(timeout=20)

    t = "read_parquet('LAKE/linktest_{}/**/*.parquet', hive_partitioning=true)"
    (n,) = lake_rows(demo, f"SELECT max(num_tasks) FROM {t.format('runs')} WHERE run_id = '{rid}'")[0]
    slow_from, slow_to, slow_t = lake_rows(
        demo, f"SELECT from_rank, to_rank, time_s FROM {t.format('timings')} WHERE run_id = '{rid}' "
              "ORDER BY time_s DESC LIMIT 1")[0]
    retests = {(f, to): (ts, rt) for f, to, ts, rt in lake_rows(
        demo, f"SELECT from_rank, to_rank, time_s, retest_time_s FROM {t.format('slow_links')} "
              f"WHERE run_id = '{rid}' AND kind = 'retested'")}
    hosts = {h for (h,) in lake_rows(demo, f"SELECT hostname FROM {t.format('ranks')} WHERE run_id = '{rid}'")}
    assert n == 3 and retests
    # One node identity: the ranks are recorded under their agents' node
    # names (BENCHLAKE_NODE), not the host name the three agents share.
    assert hosts == {"lt-node0", "lt-node1", "lt-node2"}, hosts

    # Drill-down: run page → its LinkTest view.
    browser.go(f"/runs/{rid}")
    browser.page.locator("#reports a", has_text="LinkTest").click()
    browser.page.wait_for_load_state("load")
    assert browser.page.url == f"{demo['base']}/runs/{rid}/linktest"
    before = len(browser.errors)
    browser.go(f"/runs/{rid}/linktest", shot="linktest-summary")
    # The run has its per-host summary: the page shows its rows, not the pairs.
    assert browser.page.inner_text("#lt-ranks") == str(n)
    assert float(browser.page.get_attribute("#lt-max", "data-value")) == slow_t
    summary = {(h, c): s for h, c, s in lake_rows(
        demo, f"SELECT host, pair_class, slow_pairs FROM {t.format('host_summary')} WHERE run_id = '{rid}'")}
    rows = browser.page.locator("#lt-hosts tbody tr")
    shown = {(rows.nth(i).get_attribute("data-host"), rows.nth(i).get_attribute("data-class")):
             int(rows.nth(i).get_attribute("data-slow")) for i in range(rows.count())}
    assert shown == summary and {h for h, _ in shown} == hosts, (shown, summary)
    assert browser.page.locator("#lt-matrix").count() == 0
    # The pair view on demand.
    browser.page.click("#lt-matrix-link")
    browser.page.wait_for_load_state("load")
    assert browser.page.url == f"{demo['base']}/runs/{rid}/linktest?matrix=1"
    browser.go(f"/runs/{rid}/linktest?matrix=1", shot="linktest")
    assert browser.page.inner_text("#lt-ranks") == str(n)
    assert float(browser.page.get_attribute("#lt-max", "data-value")) == slow_t
    # The slowest pairs: the lake's retested pairs with their retest times, then the slowest.
    rows = browser.page.locator("#lt-slowest tbody tr")
    listed = {}
    for i in range(rows.count()):
        row = rows.nth(i)
        key = (int(row.get_attribute("data-from")), int(row.get_attribute("data-to")))
        rt = row.get_attribute("data-retest-s")
        listed[key] = (float(row.get_attribute("data-time-s")), float(rt) if rt else None)
    for k, v in retests.items():
        assert listed[k] == v, (k, listed.get(k), v)
    assert listed[(slow_from, slow_to)][0] == slow_t
    assert rows.count() == n * (n - 1)  # every measured pair of 3 ranks
    assert any(h in browser.page.inner_text("#lt-slowest") for h in hosts)
    # Hover: the pointer over the slowest pair's cell shows its values.
    m = browser.page.locator("#lt-matrix")
    m.scroll_into_view_if_needed()
    box = m.bounding_box()
    browser.page.mouse.move(box["x"] + box["width"] * (slow_to + 0.5) / n,
                            box["y"] + box["height"] * (slow_from + 0.5) / n)
    browser.page.wait_for_selector(f"#lt-hover[data-pair='{slow_from},{slow_to}']", timeout=5000)
    text = browser.page.inner_text("#lt-hover")
    assert f"from rank {slow_from}" in text and f"to rank {slow_to}" in text, text
    assert ("µs" in text or "ms" in text) and "B/s" in text, text
    browser.page.screenshot(path=str(demo["shots"] / "linktest-hover.png"), full_page=False)
    api = f"{demo['base']}/api/runs/{rid}/linktest/pair"
    j = browser.page.request.get(f"{api}?from={slow_from}&to={slow_to}").json()
    assert abs(j["time_s"] - slow_t) <= 1e-6 * slow_t, (j, slow_t)  # kept as f32
    assert j["from_host"] in hosts
    assert browser.page.request.get(f"{api}?from={slow_from}&to={slow_from}").json()["time_s"] is None
    assert browser.page.request.get(f"{api}?from=99&to=0").status == 400
    assert browser.page.request.get(f"{api}?from=x&to=0").status == 400
    # The matrix image: one pixel per pair.
    img = browser.page.request.get(f"{demo['base']}/runs/{rid}/linktest/matrix.png")
    assert img.status == 200 and img.headers["content-type"] == "image/png"
    assert _png_size(img.body()) == (n, n)
    assert browser.errors[before:] == [], browser.errors[before:]
    # A run without LinkTest tables, a file that is not the run's: 404, not a page.
    pio = lake_rows(demo, "SELECT run_id FROM read_parquet('LAKE/io_results/**/*.parquet', hive_partitioning=true) LIMIT 1")[0][0]
    assert browser.page.request.get(f"{demo['base']}/runs/{pio}/linktest").status == 404
    r = browser.page.request.get(f"{demo['base']}/runs/{rid}/linktest?source=%3Cscript%3E")
    assert r.status == 404 and "<script>" not in r.text()
    # Without a session: the page redirects, the image and the JSON refuse.
    browser.ctx.clear_cookies()
    assert browser.page.request.get(f"{api}?from=0&to=1").status == 401
    assert browser.page.request.get(f"{demo['base']}/runs/{rid}/linktest/matrix.png").status == 401


def test_failing_links_on_the_run_and_node_pages(demo, browser, tmp_path):
    """A netprobe schedule of three agents whose link check is set to fail at
    the smallest deviation (issue 37 item 8): the run page lists the run's
    `link_health` rows as the lake has them, slowest first, each host linked
    to its node page, and the node page lists the failing links naming it."""
    browser.ctx.clear_cookies()
    browser.login(USER)
    conn = ["--coordinator", demo["addr"], "--token", USER]
    names = [f"fl-node{i}" for i in range(3)]
    agents = []
    try:
        for i, name in enumerate(names):
            agents.append(subprocess.Popen(
                [BIN, "agent", "--coordinator", demo["addr"], "--token", ADMIN, "--name", name,
                 "--address", "127.0.0.1", "--work-dir", str(tmp_path / f"w{i}"), "--poll-ms", "100",
                 "--run-as", getpass.getuser()],
                stdout=open(tmp_path / f"agent{i}.log", "w"), stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.time() + 60
        while True:
            r = subprocess.run([BIN, "schedule", "create", "links", "netprobe", "--cron", "0 4 * * *",
                                "--agents", ",".join(names), "-p", "num_messages=40", "-p", "port_base=47400",
                                "-p", "check_link_min_history=1", "-p", "check_link_mads=0.001",
                                "-p", "check_link_floor=0.001", "-p", "check_link_persist=1"] + conn,
                               capture_output=True, text=True, timeout=60)
            if r.returncode == 0 or time.time() > deadline:
                break
            time.sleep(0.5)  # the agents have not registered yet
        assert r.returncode == 0, r.stderr
        fired = []
        for _ in range(3):
            r = subprocess.run([BIN, "schedule", "trigger", "links"] + conn, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            rid = ULID.findall(r.stdout + r.stderr)[-1]
            j = _wait_final(demo, browser, rid)
            assert j["state"] == "SUCCEEDED", j
            fired.append(rid)
    finally:
        for a in agents:
            os.killpg(a.pid, signal.SIGTERM)
            a.wait(timeout=20)
    ids = ",".join(f"'{x}'" for x in fired)
    links = lake_rows(demo, "SELECT run_id, node_a, node_b, value FROM "
                            "read_parquet('LAKE/link_health/**/*.parquet', hive_partitioning=true) "
                            f"WHERE run_id IN ({ids}) ORDER BY run_id")
    # The first run has no history; with bounds this small a later one fails
    # at least one of the three links (equal deviations to the last bit are
    # what it would take not to).
    assert links and {r[0] for r in links} <= set(fired[1:]), links
    rid = links[-1][0]
    mine = [r for r in links if r[0] == rid]
    browser.go(f"/runs/{rid}", shot="run-links")
    rows = browser.page.locator("#link-verdicts tbody tr")
    assert rows.count() == len(mine), browser.page.inner_text("#link-verdicts")
    assert f"Failing links ({len(mine)})" in browser.page.inner_text("main")
    text = browser.page.inner_text("#link-verdicts")
    for _, a, b, _ in mine:
        assert a in text and b in text, text
    a = mine[0][1]
    browser.page.locator(f"#link-verdicts a[href='/nodes/{a}']").first.click()
    browser.page.wait_for_load_state("load")
    assert browser.page.url == f"{demo['base']}/nodes/{a}"
    browser.go(f"/nodes/{a}", shot="node-links")
    listed = browser.page.inner_text("#node-links")
    assert rid in listed and a in listed, listed
    assert browser.page.locator(f"#node-links a[href='/runs/{rid}']").count() >= 1


def test_io_trends(demo, browser):
    """Five runs of a pio schedule: /io lists the series; its charts show each
    run's mean bandwidth as the lake's io_results give it, the rolling median
    the checks compared with, and the read bound."""
    browser.ctx.clear_cookies()
    browser.login(USER)
    conn = ["--coordinator", demo["addr"], "--token", USER]
    # On the demo's own agent (agents other tests started may have stopped).
    demo_pio = lake_rows(demo, "SELECT run_id FROM read_parquet('LAKE/runs/**/*.parquet', hive_partitioning=true) "
                               "WHERE benchmark = 'pio' AND status = 'SUCCEEDED' ORDER BY run_id LIMIT 1")[0][0]
    agent = browser.page.request.get(f"{demo['base']}/api/runs/{demo_pio}").json()["tasks"][0]["agent"]
    r = subprocess.run([BIN, "schedule", "create", "trend-io", "pio", "--cron", "0 3 * * *", "--agents", agent, "-p", "np=1",
                        "-p", "block_size=4MiB", "-p", "transfer_size=1MiB", "-p", "iterations=2",
                        "-p", "check_io_read_bw_mib_s=1", "-p", "check_min_history=3"] + conn,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    fired = []
    for _ in range(5):
        r = subprocess.run([BIN, "schedule", "trigger", "trend-io"] + conn, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        rid = ULID.findall(r.stdout + r.stderr)[-1]
        _wait_final(demo, browser, rid)
        fired.append(rid)
    # Three past nights backfilled now (issue 35): they are plotted at their
    # nights (03:00), before the triggered runs, not at the backfill's time.
    today = datetime.datetime.now(datetime.timezone.utc).date()
    r = subprocess.run([BIN, "schedule", "backfill", "trend-io", "--from", str(today - datetime.timedelta(days=3)),
                        "--to", str(today), "--json"] + conn, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    backfilled = [x["run_id"] for x in sorted(json.loads(r.stdout), key=lambda x: x["scheduled_for_ms"])]
    assert len(backfilled) == 3, r.stdout
    for rid in backfilled:
        _wait_final(demo, browser, rid)
    nights = [f"{today - datetime.timedelta(days=d)} 03:00:00" for d in (3, 2, 1)]
    ids = ",".join(f"'{x}'" for x in fired)
    io = "read_parquet('LAKE/io_results/**/*.parquet', hive_partitioning=true)"
    means = {(rid, op): bw for rid, op, bw in lake_rows(
        demo, f"SELECT run_id, operation, avg(bw_mib_s) FROM {io} WHERE run_id IN ({ids}) GROUP BY ALL")}
    checks = {(rid, c): ref for rid, c, ref in lake_rows(
        demo, "SELECT run_id, \"check\", reference FROM read_parquet('LAKE/checks/**/*.parquet', hive_partitioning=true) "
              f"WHERE run_id IN ({ids})")}
    assert len(means) == 10, means

    # The navigation leads to the series, the series to its charts.
    browser.go("/")
    browser.page.click("header nav a:has-text('I/O trends')")
    browser.page.wait_for_load_state("load")
    browser.page.screenshot(path=str(demo["shots"] / "io-index.png"), full_page=True)
    browser.page.locator("#io-series a", has_text="trend-io").click()
    browser.page.wait_for_load_state("load")
    assert "/io?schedule=" in browser.page.url
    before = len(browser.errors)
    browser.go(browser.page.url.removeprefix(demo["base"]), shot="io-trends")
    for op in ("write", "read"):
        rows = browser.page.locator(f"#io-{op}-runs tbody tr")
        assert rows.count() == 8
        # Newest first by logical time: the triggered runs, then the nights.
        assert [rows.nth(i).get_attribute("data-run") for i in range(5, 8)] == backfilled[::-1]
        assert [rows.nth(i).locator("td").nth(1).inner_text() for i in range(5, 8)] == nights[::-1]
        xs = [float(browser.page.locator(f"#io-{op} circle.pt[data-run='{rid}']").get_attribute("cx")) for rid in backfilled]
        first = float(browser.page.locator(f"#io-{op} circle.pt[data-run='{fired[0]}']").get_attribute("cx"))
        assert xs[0] < xs[1] < xs[2] < first, (xs, first)
        assert xs[2] - xs[1] == pytest.approx(xs[1] - xs[0], abs=0.2), xs  # a night apart
        for i in range(5):
            row = rows.nth(i)
            rid = row.get_attribute("data-run")
            assert rid == fired[4 - i]  # newest first
            assert abs(float(row.get_attribute("data-value")) - means[(rid, op)]) <= 1e-9 * means[(rid, op)]
        # The rolling median the page draws is the one the checks compared with.
        newest = rows.first
        ref = checks[(fired[-1], f"io.{op}_bw_mib_s.vs_median")]
        assert ref is not None and float(newest.get_attribute("data-median")) == pytest.approx(ref, rel=1e-12)
        assert browser.page.locator(f"#io-{op} a circle.pt").count() == 8
        # Two stretches of band: the nights (created after the five, so they
        # have their median) and the newer triggered runs; the first three
        # triggered runs had too few earlier runs.
        assert browser.page.locator(f"#io-{op} polygon.band").count() == 2
    # The read bound of the checks (1 MiB/s) is on the rows and named on the chart.
    assert float(browser.page.locator("#io-read-runs tbody tr").first.get_attribute("data-bound")) == checks[(fired[-1], "io.read_bw_mib_s")] == 1.0
    assert browser.page.locator("#io-read line.thr").count() == 8 + 1  # one step per run, and the legend
    # The runs table has each run's logical time: the nights for the backfill.
    logical = {rid: str(t) for rid, t in lake_rows(
        demo, "SELECT run_id, strftime(logical_at AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S') "
              "FROM read_parquet('LAKE/runs/**/*.parquet', hive_partitioning=true, union_by_name=true) "
              f"WHERE run_id IN ({','.join(repr(x) for x in backfilled)})")}
    assert [logical[rid] for rid in backfilled] == nights, logical
    assert browser.errors[before:] == [], browser.errors[before:]
    # A point opens its run; the run page links back to the series.
    browser.page.locator(f"#io-write a:has(circle[data-run='{fired[-1]}'])").click()
    browser.page.wait_for_load_state("load")
    assert browser.page.url == f"{demo['base']}/runs/{fired[-1]}"
    browser.page.locator("#reports a", has_text="I/O trends").click()
    browser.page.wait_for_load_state("load")
    assert "/io?schedule=" in browser.page.url
    # The form shows fewer runs: the newest 20 is all five here; 2 keeps the newest two.
    browser.go(browser.page.url.removeprefix(demo["base"]))
    browser.page.select_option("#io-form select[name=runs]", "20")
    browser.page.click("#io-form button[type=submit]")
    browser.page.wait_for_load_state("load")
    assert "runs=20" in browser.page.url and "schedule=" in browser.page.url
    assert browser.page.locator("#io-write-runs tbody tr").count() == 8
    browser.go(browser.page.url.removeprefix(demo["base"]).replace("runs=20", "runs=2"))
    assert [browser.page.locator("#io-write-runs tbody tr").nth(i).get_attribute("data-run") for i in range(2)] == fired[:2:-1][:2]
    assert browser.page.locator("#io-write-runs tbody tr").count() == 2
    assert browser.go("/io?schedule=%3Cx%3E", expect_errors=True).status == 400
    assert browser.go("/io?runs=1", expect_errors=True).status == 400


def test_replay_page(demo, browser):
    """The demo's what-if sweep (halo16 under 3 latencies x 2 bandwidths) and
    its traced run: sweep curves and the points with the lake's predicted
    times, a point's per-rank breakdown, measured against modelled per
    routine."""
    browser.ctx.clear_cookies()
    browser.login(USER)
    rp = "read_parquet('LAKE/{}/**/*.parquet', hive_partitioning=true)"
    sweep = lake_rows(demo, f"SELECT run_id FROM {rp.format('replays')} GROUP BY run_id HAVING count(*) = 6")
    assert len(sweep) == 1, sweep
    rid = sweep[0][0]
    points = {r: t for r, t in lake_rows(demo, f"SELECT replay_id, predicted_time_s FROM {rp.format('replays')} WHERE run_id = '{rid}'")}
    browser.go(f"/runs/{rid}")
    browser.page.locator("#reports a", has_text="replay").click()
    browser.page.wait_for_load_state("load")
    assert browser.page.url == f"{demo['base']}/runs/{rid}/replay"
    before = len(browser.errors)
    browser.go(f"/runs/{rid}/replay", shot="replay-sweep")
    rows = browser.page.locator("#replays tbody tr")
    shown = {rows.nth(i).get_attribute("data-replay"): float(rows.nth(i).get_attribute("data-predicted-s"))
             for i in range(rows.count())}
    assert shown == points
    for axis in ("latency", "bandwidth"):
        assert browser.page.locator(f"#sweep-{axis} circle.sw").count() == 6
    assert browser.page.locator("#sweep-latency polyline").count() == 2  # one line per bandwidth
    # The fastest point (no other point under it) opens its breakdown: one bar
    # per rank of replay_ranks.
    slow = min(points, key=points.get)
    browser.page.locator(f"#sweep-latency circle[data-replay='{slow}']").click()
    browser.page.wait_for_load_state("load")
    assert browser.page.url.endswith(f"/runs/{rid}/replay?replay={slow}")
    assert browser.page.inner_text("#replay-chosen") == slow
    (nranks,) = lake_rows(demo, f"SELECT count(*) FROM {rp.format('replay_ranks')} WHERE run_id = '{rid}' AND replay_id = '{slow}'")[0]
    assert nranks == 16 and browser.page.locator("#replay-ranks g.rk").count() == nranks
    assert browser.errors[before:] == [], browser.errors[before:]
    assert browser.page.request.get(f"{demo['base']}/runs/{rid}/replay?replay=%3Cx%3E").status == 400
    assert browser.page.request.get(f"{demo['base']}/runs/{rid}/replay?replay=nope").status == 404
    pio = lake_rows(demo, "SELECT run_id FROM read_parquet('LAKE/io_results/**/*.parquet', hive_partitioning=true) LIMIT 1")[0][0]
    assert browser.page.request.get(f"{demo['base']}/runs/{pio}/replay").status == 404

    # A traced run: measured against modelled per routine, as trace_comparison sums them.
    traced = lake_rows(demo, f"SELECT DISTINCT run_id FROM {rp.format('trace_comparison')}")
    if not require_under_ci(traced, "the demo ran no traced run (no MPI tracer here)"):
        pytest.skip("the demo ran no traced run (no MPI tracer here)")
    tid = traced[0][0]
    browser.go(f"/runs/{tid}/replay", shot="replay-traced")
    # Predicted against measured: one row per default replay (Bandela and
    # Dimemas), the whole run's figures as the `all` rows give them, and the
    # calibration each used (the demo's netprobe run, fitted before the
    # traced run).
    (cal_id, rejected) = lake_rows(demo, "SELECT run_id, rejected FROM read_parquet('LAKE/replay_calibrations/**/*.parquet', "
                                          "hive_partitioning=true)")[0]
    totals = {r: (m, p) for r, m, p in lake_rows(
        demo, f"SELECT replay_id, max(measured_total_s), max(modelled_total_s) FROM {rp.format('trace_comparison')} "
              f"WHERE run_id = '{tid}' AND function = 'all' GROUP BY replay_id")}
    models = {r: m for r, m in lake_rows(demo, f"SELECT replay_id, model FROM {rp.format('replays')} WHERE run_id = '{tid}'")}
    assert sorted(models.values()) == ["bandela", "dimemas"], models
    trows = browser.page.locator("#totals tbody tr")
    assert trows.count() == len(totals) == 2
    for i in range(trows.count()):
        r = trows.nth(i)
        rid_ = r.get_attribute("data-replay")
        assert r.get_attribute("data-model") == models[rid_]
        assert float(r.get_attribute("data-measured-s")) == pytest.approx(totals[rid_][0], rel=1e-12)
        assert float(r.get_attribute("data-predicted-s")) == pytest.approx(totals[rid_][1], rel=1e-12)
        # The demo's netprobe run calibrated both (its id on every row), unless
        # the quality gate rejected its fit (a busy machine: r² below 0.9),
        # when neither used it and the row says why.
        if rejected is None:
            assert cal_id in r.inner_text(), r.inner_text()
        else:
            assert cal_id not in r.inner_text() and "rejected fits left out" in r.inner_text(), r.inner_text()
    assert browser.page.locator("#replay-totals g.total").count() == 2
    if rejected is None:
        assert cal_id in browser.page.inner_text("#replay-calibration")
    # Per routine, the chosen replay's rows.
    chosen = browser.page.inner_text("#replay-chosen")
    sums = {f: (m, o) for f, m, o in lake_rows(
        demo, f"SELECT function, sum(measured_comm_s), sum(modelled_comm_s) FROM {rp.format('trace_comparison')} "
              f"WHERE run_id = '{tid}' AND replay_id = '{chosen}' GROUP BY function")}
    rows = browser.page.locator("#routines tbody tr")
    assert rows.count() == len(sums)
    for i in range(rows.count()):
        r = rows.nth(i)
        m, o = sums[r.get_attribute("data-function")]
        assert float(r.get_attribute("data-measured-s")) == pytest.approx(m, rel=1e-12)
        assert float(r.get_attribute("data-modelled-s")) == pytest.approx(o, rel=1e-12)
    assert browser.page.locator("#replay-routines g.routine").count() == len(sums) - 1  # all but the total


def test_alltoallv_page(demo, browser):
    """The demo's alltoallv counts run: per lead rank its patterns and the
    heat maps of its count blocks, with the lake's values."""
    browser.ctx.clear_cookies()
    browser.login(USER)
    pat = "read_parquet('LAKE/alltoallv_patterns/**/*.parquet', hive_partitioning=true)"
    rows = "read_parquet('LAKE/alltoallv_count_rows/**/*.parquet', hive_partitioning=true)"
    rid = lake_rows(demo, f"SELECT run_id FROM {pat} GROUP BY run_id ORDER BY count(*) DESC LIMIT 1")[0][0]
    leads = [r for (r,) in lake_rows(demo, f"SELECT DISTINCT lead_rank FROM {pat} WHERE run_id = '{rid}' ORDER BY 1")]
    browser.go(f"/runs/{rid}")
    browser.page.locator("#reports a", has_text="alltoallv").click()
    browser.page.wait_for_load_state("load")
    assert browser.page.url == f"{demo['base']}/runs/{rid}/alltoallv"
    before = len(browser.errors)
    browser.go(f"/runs/{rid}/alltoallv", shot="alltoallv")
    assert [int(x) for x in browser.page.locator("#a2a-leads tbody tr").evaluate_all(
        "rs => rs.map(r => r.getAttribute('data-lead'))")] == leads
    for lead in leads:
        browser.go(f"/runs/{rid}/alltoallv?lead={lead}")
        assert browser.page.inner_text("#a2a-lead") == str(lead)
        want = {(p, d): n for p, d, n in lake_rows(
            demo, f"SELECT pattern_id, direction, num_calls FROM {pat} WHERE run_id = '{rid}' AND lead_rank = {lead}")}
        trs = browser.page.locator("#a2a-patterns tbody tr")
        got = {(int(trs.nth(i).get_attribute("data-pattern")), trs.nth(i).get_attribute("data-direction")):
               int(trs.nth(i).get_attribute("data-calls")) for i in range(trs.count())}
        assert got == want
        # Each send block's heat map has a cell per non-zero count of the lake's rows.
        for blk, nonzero in lake_rows(
                demo, f"SELECT block, sum(len(ranks) * len(list_filter(counts, lambda c: c <> 0))) FROM {rows} "
                      f"WHERE run_id = '{rid}' AND lead_rank = {lead} AND direction = 'send' GROUP BY block"):
            assert browser.page.locator(f"#a2a-send-{blk} rect.hc").count() == nonzero, (lead, blk)
    # A cell's tooltip holds its count: the lake's largest send count of lead 0.
    top = lake_rows(demo, f"SELECT max(list_max(counts)) FROM {rows} WHERE run_id = '{rid}' AND lead_rank = {leads[0]} AND direction = 'send'")[0][0]
    browser.go(f"/runs/{rid}/alltoallv?lead={leads[0]}")
    titles = browser.page.locator("[id^=a2a-send-] rect.hc title").evaluate_all("ts => ts.map(t => t.textContent)")
    assert any(t.endswith(f": {top:,}") for t in titles), (top, titles[:5])
    assert browser.errors[before:] == [], browser.errors[before:]
    # The image heat map (what communicators above 64 ranks get): one pixel per rank pair.
    (size,) = lake_rows(demo, f"SELECT max(len(counts)) FROM {rows} WHERE run_id = '{rid}' AND lead_rank = {leads[0]}")[0]
    hm = f"{demo['base']}/runs/{rid}/alltoallv/heatmap.png"
    img = browser.page.request.get(f"{hm}?lead={leads[0]}&direction=send&block=0")
    assert img.status == 200 and _png_size(img.body()) == (size, size)
    assert browser.page.request.get(f"{hm}?lead={leads[0]}&direction=send").status == 400
    assert browser.page.request.get(f"{hm}?lead={leads[0]}&direction=send&block=99").status == 404
    assert browser.page.request.get(f"{demo['base']}/runs/{rid}/alltoallv?lead=999").status == 404
    assert browser.page.request.get(f"{demo['base']}/runs/{rid}/alltoallv?direction=both").status == 400
    pio = lake_rows(demo, "SELECT run_id FROM read_parquet('LAKE/io_results/**/*.parquet', hive_partitioning=true) LIMIT 1")[0][0]
    assert browser.page.request.get(f"{demo['base']}/runs/{pio}/alltoallv").status == 404


def test_linktest_at_4096_ranks(demo, browser, tmp_path):
    """A 4,096-rank LinkTest file (the `probe linktest` generator, run as an
    agent's benchmark, ingested by the cluster): the page shows the lake's
    slowest pair; the matrix is 586 pixels a side of 7x7-rank blocks; the
    hover names a block's slowest pair; a click zooms in, where the slow pair
    is its own pixel and ringed."""
    browser.ctx.clear_cookies()
    browser.login(USER)
    (tmp_path / "catalog.toml").write_text(
        "[[benchmark]]\n"
        'name = "lt4096"\n'
        'kind = "netprobe"\n'
        'description = "synthetic 4,096-rank LinkTest file"\n'
        f'command = ["{BIN}", "probe", "linktest", "--ranks", "4096", "--ranks-per-host", "48", "--seed", "7", '
        '"--out", "{out_dir}/pingpong_results_bin.sion"]\n'
        "timeout_s = 600\n"
        "[[benchmark.output]]\n"
        'file = "pingpong_results_bin.sion"\n'
        'format = "linktest"\n')
    agent = subprocess.Popen(
        [BIN, "agent", "--coordinator", demo["addr"], "--token", ADMIN, "--name", "big-node",
         "--catalog", str(tmp_path / "catalog.toml"), "--work-dir", str(tmp_path / "work"),
         "--poll-ms", "100", "--run-as", getpass.getuser()],
        stdout=open(tmp_path / "agent.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 60
        rid = None
        while time.time() < deadline and rid is None:
            r = subprocess.run([BIN, "run", "submit", "lt4096", "--agents", "big-node",
                                "--coordinator", demo["addr"], "--token", USER],
                               capture_output=True, text=True, timeout=60)
            m = ULID.search(r.stdout + r.stderr) if r.returncode == 0 else None
            rid = m.group(0) if m else None
            if rid is None:
                time.sleep(0.5)
        assert rid, r.stderr
        j = _wait_final(demo, browser, rid, timeout=300)
        assert j["state"] == "SUCCEEDED", j
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(timeout=20)
    t = "read_parquet('LAKE/linktest_timings/**/*.parquet', hive_partitioning=true)"
    f, to, slow = lake_rows(demo, f"SELECT from_rank, to_rank, time_s FROM {t} WHERE run_id = '{rid}' ORDER BY time_s DESC LIMIT 1")[0]

    before = len(browser.errors)
    browser.page.set_default_timeout(120_000)  # the first request derives the view (debug build: ~10 s)
    browser.go(f"/runs/{rid}/linktest?matrix=1", shot="linktest-4096")
    browser.page.set_default_timeout(30_000)
    assert browser.page.inner_text("#lt-ranks") == "4,096"
    assert float(browser.page.get_attribute("#lt-max", "data-value")) == slow
    m = browser.page.locator("#lt-matrix")
    n, bin_, side = (int(m.get_attribute(a)) for a in ("data-n", "data-bin", "data-side"))
    assert (n, bin_, side) == (4096, 7, 586)
    img = browser.page.request.get(f"{demo['base']}/runs/{rid}/linktest/matrix.png")
    assert _png_size(img.body()) == (side, side)
    m.scroll_into_view_if_needed()
    box = m.bounding_box()

    def hover(px, py):
        # The pointer on image pixel (px, py): a pixel is about 1 CSS px here,
        # and events carry whole CSS pixels, so take the first whole
        # coordinate inside it.
        def inside(start, size, k):
            a, z = start + size * k / side, start + size * (k + 1) / side
            c = math.ceil(a)
            assert c < z, (a, z)
            return c
        browser.page.mouse.move(inside(box["x"], box["width"], px), inside(box["y"], box["height"], py))

    # The pixel holding the slowest pair names it as its block's slowest.
    hover(to // bin_, f // bin_)
    browser.page.wait_for_selector(f"#lt-hover[data-pair='{f},{to}']", timeout=10_000)
    assert "slowest: from rank" in browser.page.inner_text("#lt-hover")
    # A click there zooms into a window holding the pair, one pixel per pair.
    browser.page.click("#lt-matrix", position={"x": box["width"] * (to // bin_ + 0.5) / side,
                                              "y": box["height"] * (f // bin_ + 0.5) / side})
    browser.page.wait_for_selector("#lt-zoom")
    m = browser.page.locator("#lt-matrix")
    r0, c0, span, zbin = (int(m.get_attribute(a)) for a in ("data-r0", "data-c0", "data-n", "data-bin"))
    assert zbin == 1 and span == 512 and r0 <= f < r0 + span and c0 <= to < c0 + span
    assert browser.page.locator("circle.slowmark").count() >= 1
    browser.page.screenshot(path=str(demo["shots"] / "linktest-4096-zoom.png"), full_page=True)
    m.scroll_into_view_if_needed()
    box = m.bounding_box()
    side = span
    hover(to - c0, f - r0)
    browser.page.wait_for_selector(f"#lt-hover[data-pair='{f},{to}']", timeout=10_000)
    text = browser.page.inner_text("#lt-hover")
    assert text.startswith(f"from rank {f} (") and f"to rank {to} (" in text, text
    assert browser.errors[before:] == [], browser.errors[before:]


def test_acknowledged_cells_and_silences_page(demo, browser):
    """Issue 37 item 7: an admin acknowledges the demo's failing node check
    and declares a maintenance window on the node; the overview outlines the
    cell (the comment and expiry in its tooltip) and marks the node; the
    /silences page lists both; a user token may list but not acknowledge."""
    node, check = lake_rows(demo, "SELECT node, \"check\" FROM read_parquet('LAKE/node_health/**/*.parquet', "
                                  "hive_partitioning=true) WHERE status = 'FAIL' LIMIT 1")[0]
    conn = ["--coordinator", demo["addr"]]
    r = subprocess.run([BIN, "ack", node, check, "--comment", "DIMM on order <b>x</b>", "--expires", "7d",
                        "--token", USER] + conn, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "needs the admin role" in r.stderr, r.stderr
    r = subprocess.run([BIN, "ack", node, check, "--comment", "DIMM on order <b>x</b>", "--expires", "7d",
                        "--token", ADMIN, "--json"] + conn, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ack = json.loads(r.stdout)
    assert ack["node"] == node and ack["check"] == check and not ack["expired"], ack
    r = subprocess.run([BIN, "maintenance", "add", node, "--end", "4h", "--reason", "firmware update",
                        "--token", ADMIN, "--json"] + conn, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    window = json.loads(r.stdout)
    assert window["state"] == "ACTIVE" and window["node_names"] == [node], window
    r = subprocess.run([BIN, "ack", "list", "--token", USER] + conn, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and ack["id"] in r.stdout and "DIMM on order" in r.stdout, r.stdout + r.stderr

    browser.ctx.clear_cookies()
    browser.login(USER)
    browser.go("/", shot="overview-ack")
    row = browser.page.locator("#nodes tbody tr", has=browser.page.locator(f"td.node a:text-is('{node}')"))
    assert "maintenance" in row.inner_text()
    cell = row.locator("a.v.ack")
    assert cell.count() == 1, row.inner_html()
    title = cell.get_attribute("title")
    assert "ack: acknowledged by token:" in title, title  # an unbound token: its fingerprint
    assert "DIMM on order <b>x</b>" in title and "until " in title, title
    # The cell keeps the newest verdict as measured (the demo's second
    # hostinfo run passes), only outlined.
    newest = lake_rows(demo, "SELECT status FROM read_parquet('LAKE/node_health/**/*.parquet', hive_partitioning=true) "
                             f"WHERE node = '{node}' AND \"check\" = '{check}' ORDER BY run_id DESC LIMIT 1")[0][0]
    assert cell.get_attribute("class") == f"v v-{newest} ack", cell.get_attribute("class")
    outline = browser.page.evaluate("e => getComputedStyle(e).outlineStyle", cell.element_handle())
    assert outline == "dashed", outline
    browser.go("/silences", shot="silences")
    acks = browser.page.inner_text("#acks")
    assert node in acks and check in acks and "DIMM on order <b>x</b>" in acks and ack["id"] in acks, acks
    windows = browser.page.inner_text("#windows")
    assert "ACTIVE" in windows and "firmware update" in windows and window["id"] in windows, windows
    assert browser.page.locator("#acks b").count() == 0, "the comment is text"
    # Removed: gone from the page and the overview.
    for cmd in (["ack", "remove", ack["id"]], ["maintenance", "remove", window["id"]]):
        r = subprocess.run([BIN, *cmd, "--token", ADMIN] + conn, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    browser.go("/silences")
    assert browser.page.locator("#acks-none").count() == 1 and browser.page.locator("#windows-none").count() == 1
    browser.go("/")
    assert browser.page.locator("#nodes a.v.ack").count() == 0
