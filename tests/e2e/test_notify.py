"""Issue 18 items 7 and 8 end to end, against real `benchlake up` processes:

- webhooks: a real HTTP receiver (http.server on loopback) checks the
  HMAC-SHA256 signatures, the payload of a pio run over an impossible bound
  (run id, verdict FAIL, the failing check's name and value as the lake's
  `checks` table has them), the delivery retried after two 500s, a run that
  passed sending nothing, a schedule's own notifier, a 404 given up at once,
  and a delivery pending while the coordinator is killed (-9) delivered once
  after the restart, with the same delivery id;
- refusals: an unknown notifier name, a bad webhook URL, `config show`
  hiding a webhook URL's path;
- backfill: three backfilled days of a schedule without allow_overlap run one
  after another in date order (started_at/finished_at from the API), and with
  allow_overlap they are all placed at once.
"""
import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import duckdb
import pytest

from conftest import BIN, free_port
from test_tls import pki  # noqa: F401  (the CA and server certificate fixture)

SECRET = b"e2e-webhook-secret-0123456789"
IMPOSSIBLE = ["np=1", "block_size=4MiB", "transfer_size=1MiB", "iterations=1", "check_io_write_bw_mib_s=100000000"]
PASSING = ["np=1", "block_size=4MiB", "transfer_size=1MiB", "iterations=1"]


class Receiver:
    """A webhook receiver: answers each request with the next status of
    `plan` (then `default`) and records what came."""

    def __init__(self, plan=(), default=200):
        self.plan = list(plan)
        self.default = default
        self.got = []
        self.lock = threading.Lock()
        rec = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                with rec.lock:
                    status = rec.plan.pop(0) if rec.plan else rec.default
                    rec.got.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                    "body": body, "status": status, "at": time.time()})
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def requests(self):
        with self.lock:
            return list(self.got)

    def wait(self, pred, timeout=120, what="requests"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = self.requests()
            if pred(got):
                return got
            time.sleep(0.1)
        raise AssertionError(f"the receiver did not get the expected {what}: {self.requests()}")

    def close(self):
        self.server.shutdown()


class Up:
    """`benchlake up` (not the demo) with notifier flags, restartable on the
    same data directory and ports."""

    def __init__(self, tmp, flags):
        self.tmp = tmp
        self.data = tmp / "data"
        self.port = free_port()
        self.http = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.flags = flags
        self.p = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log = open(self.tmp / f"up{self.starts}.log", "w")
        self.p = subprocess.Popen(
            [BIN, "up", "--data", str(self.data), "--listen", self.addr, "--http-addr", f"127.0.0.1:{self.http}",
             "--tick-ms", "100", *self.flags],
            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, BENCHLAKE_LOG="info"), start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise AssertionError(f"benchlake up exited: {self.log()}")
            r = self.cli("agents", "list", "--json", check=False)
            if r.returncode == 0 and '"ONLINE"' in r.stdout:
                return self
            time.sleep(0.2)
        raise AssertionError(f"benchlake up did not come up: {self.log()}")

    def log(self):
        return (self.tmp / f"up{self.starts}.log").read_text(errors="replace")

    def kill9(self):
        os.killpg(self.p.pid, signal.SIGKILL)
        self.p.wait()

    def stop(self):
        if self.p and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGINT)
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)

    def cli(self, *args, check=True):
        r = subprocess.run([BIN, *args, "--coordinator", self.addr], capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise AssertionError(f"benchlake {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r

    def submit(self, bench, params):
        args = ["run", "submit", bench, "--json"]
        for kv in params:
            args += ["-p", kv]
        return json.loads(self.cli(*args).stdout)["run_id"]

    def show(self, run_id):
        return json.loads(self.cli("run", "show", run_id, "--json").stdout)

    def wait_final(self, run_id, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            d = self.show(run_id)
            if d["run"]["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                return d["run"]
            time.sleep(0.3)
        raise AssertionError(f"run {run_id} did not end: {self.show(run_id)}\n{self.log()}")

    def metric(self, name, labels):
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def lake(self, sql):
        return duckdb.connect().execute(sql.replace("LAKE", str(self.data / "lake" / "tables"))).fetchall()


@pytest.fixture
def secret_file(tmp_path):
    p = tmp_path / "ops.secret"
    p.write_bytes(SECRET + b"\n")
    return p


def verify(req, key=SECRET):
    """Checks both signatures the way a receiver would; returns the payload."""
    body = req["body"]
    want = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(req["headers"]["x-benchlake-signature"], want), req["headers"]
    ts = req["headers"]["x-benchlake-timestamp"]
    want_ts = "sha256=" + hmac.new(key, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(req["headers"]["x-benchlake-signature-timestamped"], want_ts)
    assert abs(int(ts) - req["at"]) < 30, (ts, req["at"])
    assert req["headers"]["content-type"] == "application/json"
    return json.loads(body)


def test_webhook_is_signed_carries_the_failure_and_is_retried(tmp_path, secret_file):
    rx = Receiver(plan=[500, 500])
    up = Up(tmp_path, ["--webhook", f"ops={rx.url}", "--webhook-secret-file", f"ops={secret_file}",
                       "--notify-default", "ops", "--notify-backoff-ms", "300"]).start()
    try:
        run_id = up.submit("pio", IMPOSSIBLE)
        run = up.wait_final(run_id)
        assert (run["state"], run["verdict"]) == ("SUCCEEDED", "FAIL"), run
        got = rx.wait(lambda g: any(r["status"] == 200 for r in g), what="a delivery answered 200")
        time.sleep(1.5)
        got = rx.requests()
        # Two 500s, then the third attempt is delivered; nothing after.
        assert [r["status"] for r in got] == [500, 500, 200], got
        assert len({r["headers"]["x-benchlake-delivery"] for r in got}) == 1
        assert len({r["body"] for r in got}) == 1, "every attempt sends the same bytes"
        gaps = [b["at"] - a["at"] for a, b in zip(got, got[1:])]
        assert all(g >= 0.14 for g in gaps), gaps  # backoff 300 ms, then 600 ms, jitter down to half
        p = verify(got[-1])
        assert got[-1]["headers"]["x-benchlake-event"] == "verdict.fail"
        assert p["event"] == "verdict.fail" and p["notifier"] == "ops"
        assert p["delivery_id"] == got[-1]["headers"]["x-benchlake-delivery"]
        assert p["run"]["run_id"] == run_id
        assert (p["run"]["status"], p["run"]["verdict"], p["run"]["benchmark"]) == ("SUCCEEDED", "FAIL", "pio")
        assert p["schedule"] is None
        assert p["links"]["run"] == f"http://127.0.0.1:{up.http}/runs/{run_id}"
        # The failing checks as the lake has them (FAIL, REGRESSION and ERROR;
        # NO_REFERENCE and INCONCLUSIVE rows are not failures and are not sent).
        rows = up.lake(f"SELECT \"check\", status, value, reference, unit FROM read_parquet('LAKE/checks/**/*.parquet', "
                       f"hive_partitioning=true) WHERE run_id = '{run_id}' AND status IN ('FAIL', 'REGRESSION', 'ERROR')")
        assert rows, "the run has a failing check"
        sent = {c["check"]: c for c in p["failing_checks"]}
        assert "io.write_bw_mib_s" in sent, p["failing_checks"]
        for check, status, value, reference, unit in rows:
            c = sent[check]
            assert (c["status"], c["unit"]) == (status, unit)
            assert c["value"] == pytest.approx(value) and c["reference"] == pytest.approx(reference)
        assert sent["io.write_bw_mib_s"]["reference"] == pytest.approx(1e8)
        assert 0 < sent["io.write_bw_mib_s"]["value"] < 1e8
        # Failing nodes: node_health's failing nodes, else the run's agents.
        nodes = {n for (n,) in up.lake(
            f"SELECT DISTINCT node FROM read_parquet('LAKE/node_health/**/*.parquet', hive_partitioning=true) "
            f"WHERE run_id = '{run_id}' AND status IN ('FAIL', 'ERROR')")} if (up.data / "lake" / "tables" / "node_health").exists() else set()
        assert {n["node"] for n in p["failing_nodes"]} == (nodes or set(run["agents"])), (p["failing_nodes"], nodes, run)

        # A run whose checks pass (or have no reference yet) sends nothing.
        ok = up.submit("pio", PASSING)
        assert up.wait_final(ok)["verdict"] in ("PASS", "NO_REFERENCE")
        deadline = time.time() + 10
        while time.time() < deadline and up.metric("benchlake_notifications_total", {"result": "skipped"}) < 1:
            time.sleep(0.2)
        assert up.metric("benchlake_notifications_total", {"result": "skipped"}) == 1
        assert up.metric("benchlake_notifications_total", {"result": "delivered"}) == 1
        assert up.metric("benchlake_notifications_total", {"result": "retried"}) == 2
        assert len(rx.requests()) == 3
        # run show tells how the notification went.
        n = up.show(run_id)["notifications"]
        assert [(x["notifier"], x["state"], x["event"], x["attempts"]) for x in n] == [("ops", "DELIVERED", "verdict.fail", 3)], n
        assert n[0]["delivery_id"] == got[-1]["headers"]["x-benchlake-delivery"]
        assert up.show(ok)["notifications"][0]["state"] == "SKIPPED"
        assert "notifications:" in up.cli("run", "show", run_id).stdout
        assert "notification failed; retrying" in up.log() and "notifier=ops" in up.log()
        assert SECRET.decode() not in up.log()
    finally:
        up.stop()
        rx.close()


def test_a_pending_delivery_survives_a_kill_and_is_delivered_once(tmp_path, secret_file):
    pending_delivery_survives_a_kill(tmp_path, secret_file, [])


def test_a_pending_delivery_survives_a_takeover_on_postgres(tmp_path, secret_file, postgres):
    """The state in PostgreSQL: the restarted coordinator leads once the
    killed one's lease ended, and sends what the killed one could not."""
    pending_delivery_survives_a_kill(tmp_path, secret_file, ["--state", postgres.url, "--leader-lease-ms", "1000"])
    assert postgres.sql("SELECT state || ' ' || notifier FROM notifications") == "DELIVERED ops"


def pending_delivery_survives_a_kill(tmp_path, secret_file, state):
    rx = Receiver(default=503)
    flags = ["--webhook", f"ops={rx.url}", "--webhook-secret-file", f"ops={secret_file}",
             "--notify-default", "ops", "--notify-backoff-ms", "500", *state]
    up = Up(tmp_path, flags).start()
    try:
        run_id = up.submit("pio", IMPOSSIBLE)
        up.wait_final(run_id)
        rx.wait(lambda g: len(g) >= 1, what="a first attempt")
        up.kill9()
        failed = len(rx.requests())
        rx.default = 200
        up.start()
        got = rx.wait(lambda g: any(r["status"] == 200 for r in g), what="the delivery after the restart")
        time.sleep(3)
        got = rx.requests()
        assert [r["status"] for r in got].count(200) == 1, got
        assert got[-1]["status"] == 200 and len(got) >= failed + 1
        assert len({r["headers"]["x-benchlake-delivery"] for r in got}) == 1, "the same delivery"
        p = verify(got[-1])
        assert p["run"]["run_id"] == run_id and p["run"]["verdict"] == "FAIL"
    finally:
        up.stop()
        rx.close()


def test_schedule_notifiers_refusals_and_a_refused_delivery(tmp_path, secret_file):
    ops = Receiver()
    team = Receiver(default=404)
    up = Up(tmp_path, ["--webhook", f"ops={ops.url}", "--webhook-secret-file", f"ops={secret_file}",
                       "--webhook", f"team={team.url}", "--notify-default", "ops"]).start()
    try:
        r = up.cli("schedule", "create", "io", "--cron", "0 3 * * *", "--notify", "nope", "pio", check=False)
        assert r.returncode != 0 and "schedule.notify" in r.stderr and "nope" in r.stderr, r.stderr
        args = ["schedule", "create", "io", "--cron", "0 3 * * *", "--notify", "team", "--json", "pio"]
        for kv in IMPOSSIBLE:
            args += ["-p", kv]
        s = json.loads(up.cli(*args).stdout)
        assert s["notify"] == ["team"], s
        assert "notify team" in up.cli("schedule", "list").stdout
        run = json.loads(up.cli("schedule", "trigger", "io", "--json").stdout)
        up.wait_final(run["run_id"])
        # Both: the schedule's notifier and the default.
        p = verify(ops.wait(lambda g: len(g) == 1, what="the default notifier's delivery")[0])
        assert p["schedule"] == {"schedule_id": s["schedule_id"], "name": "io"}
        assert p["run"]["scheduled_for"] is not None
        t = team.wait(lambda g: len(g) == 1, what="the schedule notifier's attempt")
        assert "x-benchlake-signature" not in t[0]["headers"], "team has no secret: unsigned"
        assert json.loads(t[0]["body"])["run"]["run_id"] == run["run_id"]
        time.sleep(2)
        assert len(team.requests()) == 1, "a 404 is not retried"
        assert up.metric("benchlake_notifications_total", {"result": "rejected"}) == 1
        assert "notification refused by the receiver" in up.log()
        # run submit --notify: an on-demand run names a notifier too.
        r = up.cli("run", "submit", "pio", "--notify", "nope", check=False)
        assert r.returncode != 0 and "notify" in r.stderr and "nope" in r.stderr, r.stderr
        args = ["run", "submit", "pio", "--notify", "team", "--json"]
        for kv in IMPOSSIBLE:
            args += ["-p", kv]
        adhoc = json.loads(up.cli(*args).stdout)["run_id"]
        up.wait_final(adhoc)
        t = team.wait(lambda g: len(g) == 2, what="the on-demand run's attempt")
        assert json.loads(t[1]["body"])["run"]["run_id"] == adhoc
        assert json.loads(t[1]["body"])["schedule"] is None
        ops.wait(lambda g: len(g) == 2, what="the default notifier's second delivery")
    finally:
        up.stop()
        ops.close()
        team.close()
    # Bad settings stop the start with the flag's name.
    r = subprocess.run([BIN, "up", "--data", str(tmp_path / "d2"), "--listen", "127.0.0.1:0",
                        "--webhook", "x=ftp://example.org/"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--webhook x" in r.stderr and "ftp" in r.stderr, r.stderr
    r = subprocess.run([BIN, "up", "--data", str(tmp_path / "d3"), "--listen", "127.0.0.1:0",
                        "--webhook", f"x={ops.url}", "--notify-default", "y"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "notify-default" in r.stderr and "'y'" in r.stderr, r.stderr
    # config show hides a webhook URL's path (a Slack-style URL is a secret).
    r = subprocess.run([BIN, "config", "show", "coordinator"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, BENCHLAKE_WEBHOOKS="chat=https://hooks.example.org/services/T0/SECRETPATH"))
    assert r.returncode == 0, r.stderr
    assert "SECRETPATH" not in r.stdout and "chat=https://hooks.example.org/" in r.stdout, r.stdout


def test_backfilled_runs_queue_in_date_order_unless_overlap_is_allowed(tmp_path):
    up = Up(tmp_path, []).start()
    try:
        for name, extra in (("serial", []), ("overlap", ["--allow-overlap"])):
            up.cli("schedule", "create", name, "--cron", "0 2 * * *", *extra, "hostinfo")
        out = json.loads(up.cli("schedule", "backfill", "serial", "--from", "2026-11-01", "--to", "2026-11-04",
                                "--json").stdout)
        assert [r["scheduled_for_ms"] for r in out] == sorted(r["scheduled_for_ms"] for r in out)
        assert len(out) == 3
        # Only the first is placed; the others wait without tasks.
        later = [up.show(r["run_id"]) for r in out[1:]]
        assert all(d["run"]["state"] == "PENDING" and d["run"]["queued"] and not d["tasks"] for d in later), later
        assert "queued     behind the schedule's active run" in up.cli("run", "show", out[2]["run_id"]).stdout
        runs = [up.wait_final(r["run_id"]) for r in out]
        assert all(r["state"] == "SUCCEEDED" for r in runs), runs
        for a, b in zip(runs, runs[1:]):
            assert a["scheduled_for_ms"] < b["scheduled_for_ms"]
            assert 0 < a["started_at_ms"] <= a["finished_at_ms"] <= b["started_at_ms"], (a, b)
        # With overlap allowed, all three are placed at once.
        out = json.loads(up.cli("schedule", "backfill", "overlap", "--from", "2026-11-01", "--to", "2026-11-04",
                                "--json").stdout)
        assert len(out) == 3
        assert all(up.show(r["run_id"])["tasks"] for r in out)
        for r in out:
            up.wait_final(r["run_id"])
    finally:
        up.stop()


class Mailbox:
    """An SMTP sink (aiosmtpd from PyPI) that requires STARTTLS and keeps
    what it was sent, with whether the session was encrypted."""

    def __init__(self, cert, key):
        import ssl
        from aiosmtpd.controller import Controller

        self.got = []
        box = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                box.got.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                                "data": envelope.content.decode("utf-8", "replace"),
                                "tls": session.ssl is not None})
                return "250 OK"

        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        self.port = free_port()
        self.ctl = Controller(Handler(), hostname="127.0.0.1", port=self.port, tls_context=ctx,
                              require_starttls=True)
        self.ctl.start()

    def stop(self):
        self.ctl.stop()


def test_email_through_smtp_with_starttls(tmp_path, pki):
    import email
    from email import policy

    box = Mailbox(pki["server"], pki["server_key"])
    smtp = ["--email", "mail=ops@example.org;oncall@example.org", "--smtp-url", f"smtp+starttls://127.0.0.1:{box.port}",
            "--smtp-from", "benchlake@example.org", "--notify-default", "mail", "--notify-backoff-ms", "300"]
    try:
        # A server certificate nobody vouches for: not sent, retried, the cause logged.
        (tmp_path / "a").mkdir()
        up = Up(tmp_path / "a", smtp).start()
        try:
            up.wait_final(up.submit("pio", IMPOSSIBLE))
            deadline = time.time() + 30
            while time.time() < deadline and "notification failed; retrying" not in up.log():
                time.sleep(0.2)
            log = up.log()
            assert "notification failed; retrying" in log and "notifier=mail" in log, log
            assert re.search(r"certificate|UnknownIssuer", log), log
            assert box.got == []
        finally:
            up.stop()
        # With --smtp-ca the mail goes out over STARTTLS.
        (tmp_path / "b").mkdir()
        up = Up(tmp_path / "b", smtp + ["--smtp-ca", pki["ca"]]).start()
        try:
            run_id = up.submit("pio", IMPOSSIBLE)
            up.wait_final(run_id)
            deadline = time.time() + 60
            while time.time() < deadline and not box.got:
                time.sleep(0.2)
            assert len(box.got) == 1, box.got
            m = box.got[0]
            assert m["tls"], "sent after STARTTLS"
            assert m["from"] == "benchlake@example.org"
            assert sorted(m["to"]) == ["oncall@example.org", "ops@example.org"]
            msg = email.message_from_string(m["data"], policy=policy.default)
            assert msg["Subject"] == f"[benchlake] FAIL: pio run {run_id}"
            assert msg["X-Benchlake-Event"] == "verdict.fail"
            delivery = msg["X-Benchlake-Delivery"]
            assert msg["Message-ID"] == f"<{delivery}@benchlake>"
            text = msg.get_body(("plain",)).get_content()
            assert f"Run {run_id} of pio ended SUCCEEDED with the verdict FAIL." in text
            assert "FAIL  io.write_bw_mib_s = " in text and "(reference 100000000 MiB/s)" in text, text
            assert f"/runs/{run_id}" in text
            time.sleep(1)
            assert len(box.got) == 1
            assert up.metric("benchlake_notifications_total", {"result": "delivered"}) == 1
        finally:
            up.stop()
    finally:
        box.stop()


def test_https_webhook_verifies_the_certificate(tmp_path, pki, secret_file):
    import ssl

    rx = Receiver()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki["server"], pki["server_key"])
    rx.server.socket = ctx.wrap_socket(rx.server.socket, server_side=True)
    url = f"https://127.0.0.1:{rx.port}/hook"
    flags = ["--webhook", f"ops={url}", "--webhook-secret-file", f"ops={secret_file}", "--notify-default", "ops",
             "--notify-backoff-ms", "300"]
    try:
        # A certificate of a CA the coordinator does not know: nothing delivered, the cause logged.
        (tmp_path / "a").mkdir()
        up = Up(tmp_path / "a", flags).start()
        try:
            up.wait_final(up.submit("pio", IMPOSSIBLE))
            deadline = time.time() + 30
            while time.time() < deadline and "notification failed; retrying" not in up.log():
                time.sleep(0.2)
            assert re.search(r"notification failed; retrying.*(certificate|UnknownIssuer)", up.log()), up.log()
            assert rx.requests() == []
        finally:
            up.stop()
        # With --webhook-ca it is delivered over TLS.
        (tmp_path / "b").mkdir()
        up = Up(tmp_path / "b", flags + ["--webhook-ca", pki["ca"]]).start()
        try:
            run_id = up.submit("pio", IMPOSSIBLE)
            up.wait_final(run_id)
            got = rx.wait(lambda g: len(g) == 1, what="the delivery over https")
            assert verify(got[0])["run"]["run_id"] == run_id
        finally:
            up.stop()
    finally:
        rx.close()
