"""Real clients against a running cluster: a Python client generated with
grpcio-tools, grpcurl through server reflection, DuckDB reading the lake with
hive partitions, pyarrow.flight streaming a table, and the CLI."""
import json
import os
import re
import subprocess
import time

import duckdb
import pyarrow.flight as flight
import pytest

from conftest import Api, duck_count, require_under_ci


@pytest.fixture
def running(cluster, pb):
    cluster.coordinator()
    cluster.agent("a1")
    cluster.agent("a2")
    cluster.worker("w1")
    api = Api(pb, cluster.addr)
    api.wait_agents(2)
    return cluster, api


def test_python_grpc_client_submits_and_watches_a_run(running, pb):
    cluster, api = running
    run = api.submit("hostinfo", count=2)
    assert len(run.run_id) == 26
    events = list(api.runs.WatchRun(pb["runs"].WatchRunRequest(run_id=run.run_id), timeout=60))
    assert events[0].message == "current state"
    last = events[-1]
    assert last.run.state == pb["common"].RUN_STATE_SUCCEEDED, last
    assert sorted(t.agent for t in last.tasks) == ["a1", "a2"]
    # DuckDB over the lake with hive partitions: one row per node, typed date.
    lake = cluster.lake
    assert duck_count(lake, "node_facts", run.run_id) == 2
    rows = duckdb.sql(
        f"SELECT typeof(date), run_id, hostname, cores FROM read_parquet('{lake}/tables/node_facts/**/*.parquet', "
        f"hive_partitioning=true) WHERE run_id = '{run.run_id}'").fetchall()
    assert rows[0][0] == "DATE" and rows[0][3] >= 1
    st = duckdb.sql(f"SELECT status, benchmark, len(agents) FROM read_parquet('{lake}/tables/runs/**/*.parquet', "
                    f"hive_partitioning=true) WHERE run_id = '{run.run_id}'").fetchall()
    assert st == [("SUCCEEDED", "hostinfo", 2)]
    # Errors come back as gRPC status codes with the field named.
    import grpc
    with pytest.raises(grpc.RpcError) as e:
        api.submit("hostinfo", params={"bogus": "1"})
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.params.bogus" in e.value.details()


def test_grpcurl_lists_services_and_submits(running):
    cluster, api = running
    out = subprocess.run(["grpcurl", "-plaintext", cluster.addr, "list"], capture_output=True, text=True, check=True).stdout
    for svc in ["benchlake.v1.RunService", "benchlake.v1.ScheduleService", "benchlake.v1.AgentService",
                "benchlake.v1.WorkerService", "benchlake.v1.ReplayService", "arrow.flight.protocol.FlightService"]:
        if svc.startswith("arrow"):
            continue  # Flight's descriptors are not registered for reflection
        assert svc in out, out
    r = subprocess.run(["grpcurl", "-plaintext", "-d", '{"spec": {"benchmark": "sleep", "params": {"seconds": "0.1"}}}',
                        cluster.addr, "benchlake.v1.RunService/SubmitRun"], capture_output=True, text=True, check=True)
    run = json.loads(r.stdout)
    assert run["state"] == "RUN_STATE_PENDING" and run["benchmark"] == "sleep"
    d = api.wait(run["runId"])
    assert d.run.state == api.pb["common"].RUN_STATE_SUCCEEDED


def test_flight_streams_tables_filtered_by_run(running, pb):
    cluster, api = running
    r1 = api.submit("hostinfo", count=2)
    r2 = api.submit("hostinfo", count=1)
    api.wait(r1.run_id)
    api.wait(r2.run_id)
    client = flight.connect(f"grpc://{cluster.addr}")
    names = {json.loads(f.descriptor.command)["table"] for f in client.list_flights()}
    assert {"node_facts", "runs", "raw_files"} <= names
    info = client.get_flight_info(flight.FlightDescriptor.for_path("node_facts"))
    assert info.total_records == 3
    t = client.do_get(info.endpoints[0].ticket).read_all()
    assert t.num_rows == 3 and "date" in t.column_names and "hostname" in t.column_names
    only = flight.FlightDescriptor.for_command(json.dumps({"table": "node_facts", "run_id": r1.run_id}))
    t = client.do_get(client.get_flight_info(only).endpoints[0].ticket).read_all()
    assert t.num_rows == 2 and set(t.column("run_id").to_pylist()) == {r1.run_id}
    none = flight.FlightDescriptor.for_command(json.dumps({"table": "node_facts", "date_from": "2000-01-01", "date_to": "2000-01-02"}))
    assert client.do_get(client.get_flight_info(none).endpoints[0].ticket).read_all().num_rows == 0
    # NOT_FOUND arrives in pyarrow as ArrowKeyError (a KeyError).
    with pytest.raises(KeyError, match="no_such_table"):
        client.get_flight_info(flight.FlightDescriptor.for_path("no_such_table"))
    # The same rows as DuckDB reads from the files.
    assert duck_count(cluster.lake, "node_facts") == 3


def test_cli_commands(running, tmp_path):
    cluster, api = running
    out = cluster.cli("run", "submit", "hostinfo", "--count", "2", "--watch").stdout
    assert "SUCCEEDED" in out and "tables/node_facts/year=" in out
    run_id = out.split()[0]
    assert run_id in cluster.cli("run", "list").stdout
    shown = json.loads(cluster.cli("run", "show", run_id, "--json").stdout)
    assert shown["run"]["state"] == "SUCCEEDED" and len(shown["tasks"]) == 2
    agents = json.loads(cluster.cli("agents", "list", "--json").stdout)
    assert {a["name"] for a in agents} == {"a1", "a2"}
    cluster.cli("schedule", "create", "nightly", "--cron", "0 2 * * *", "--tz", "Europe/Berlin", "sleep", "-p", "seconds=0")
    listed = cluster.cli("schedule", "list").stdout
    # The next instant prints in the schedule's zone, labelled (02:00 Berlin time).
    assert "nightly" in listed and " 02:00:00 CE" in listed, listed
    [sched] = json.loads(cluster.cli("schedule", "list", "--json").stdout)
    assert sched["name"] == "nightly" and sched["time_zone"] == "Europe/Berlin" and not sched["paused"]
    assert sched["next_fire_local"].endswith(("CET", "CEST")), sched
    assert "(paused)" in cluster.cli("schedule", "pause", "nightly").stdout
    assert json.loads(cluster.cli("schedule", "resume", "nightly", "--json").stdout)["paused"] is False
    drained = json.loads(cluster.cli("agents", "drain", "a2", "--json").stdout)
    assert drained["name"] == "a2", drained
    cluster.cli("agents", "drain", "a2", "--undrain")
    out = cluster.cli("schedule", "backfill", "nightly", "--from", "2026-11-01", "--to", "2026-11-04").stdout
    assert "3 run(s) created" in out
    for line in out.splitlines()[:-1]:
        api.wait(line.split()[0])
    trig = json.loads(cluster.cli("schedule", "trigger", "nightly", "--json").stdout)["run_id"]
    api.wait(trig)
    # Triggering a paused schedule runs it and says the schedule is paused.
    cluster.cli("schedule", "pause", "nightly")
    r = cluster.cli("schedule", "trigger", "nightly")
    assert "note: schedule 'nightly' is paused" in r.stderr and r.stdout.split()[1] == "PENDING", r.stdout + r.stderr
    api.wait(r.stdout.split()[0])
    assert json.loads(cluster.cli("schedule", "delete", "nightly", "--json").stdout) == {"deleted": "nightly"}
    tables = json.loads(cluster.cli("tables", "list", "--json").stdout)
    assert any(t["name"] == "node_facts" and t["rows"] >= 2 for t in tables)
    r = cluster.cli("run", "submit", "nope", check=False)
    assert r.returncode != 0 and "spec.benchmark" in r.stderr
    # Offline ingest writes the same layout without a cluster.
    facts = tmp_path / "host.json"
    cluster.cli("probe", "host", "--out", str(facts))
    out_dir = tmp_path / "offline"
    cluster.cli("ingest", "hostinfo", str(facts), "--out", str(out_dir))
    assert duck_count(out_dir, "node_facts") == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1,\n "hostname": [}')
    r = cluster.cli("ingest", "hostinfo", str(bad), "--out", str(tmp_path / "o2"), check=False)
    assert r.returncode != 0 and "bad.json" in r.stderr and "line 2" in r.stderr
    assert not (tmp_path / "o2" / "tables").exists()


def test_up_demo(demo):
    r, data, took = demo
    assert r.returncode == 0, r.stdout + r.stderr
    assert "landed" in r.stdout and "duckdb" in r.stdout
    # The replay-only binary built beside benchlake replays the demo's halo
    # offline, to the prediction of the replay in benchlake's process.
    assert re.search(r"^offline replay \(benchlake-replay dimemas, 16 ranks x 200 iterations\): "
                     r"predicted 36\.81372\d ms, as in this process$", r.stdout, re.M), r.stdout
    # The terminal stays readable: log lines go to the data directory's log
    # file; only warnings (the refused pio run's) reach stderr, uncoloured.
    log = data / "benchlake.log"
    assert f"logs: {log}" in r.stderr, r.stderr
    assert " INFO " not in r.stderr and "\x1b[" not in r.stderr + r.stdout, r.stderr
    assert len(r.stderr.splitlines()) <= 6, r.stderr
    text = log.read_text()
    assert "coordinator listening" in text and "job committed" in text, text[:2000]
    assert "\x1b[" not in text
    lake = data / "lake"
    # The traced run (2 ranks, 20 alltoallv calls) runs where MPI is installed.
    traced = "submitted traced run" in r.stdout
    assert traced or "skipping the traced demo run" in r.stdout, r.stdout
    require_under_ci(traced, "the demo ran no traced run (MPI or the tracer library missing): "
                     + "\n".join(l for l in r.stdout.splitlines() if "traced" in l))
    # Two hostinfo runs: one expecting 4096 cores (a node.cores FAIL on this
    # node), then one expecting this machine (PASS: node-check answers healthy).
    assert duck_count(lake, "node_facts") == 2
    import duckdb
    health = duckdb.sql(f"SELECT \"check\", status, value, reference FROM read_parquet('{lake}/tables/node_health/**/*.parquet', "
                        "hive_partitioning=true) WHERE \"check\" NOT LIKE 'node.linktest%' ORDER BY run_id, \"check\"").fetchall()
    cores = os.cpu_count()
    assert health[0] == ("node.cores", "FAIL", cores, 4096.0 if cores != 4096 else 8192.0), health
    # The first run expects only cores: its memory is judged against the
    # node's history and peers, which an on-demand run has none of.
    assert [h[:2] for h in health[1:]] == [("node.memory_bytes", "NO_REFERENCE"), ("node.cores", "PASS"),
                                           ("node.kernel", "PASS"), ("node.memory_bytes", "PASS")], health
    assert "verdict FAIL on node " in r.stdout and "node.cores " in r.stdout, r.stdout
    assert re.search(r"^node-check \S+: exit 0, healthy", r.stdout, re.M), r.stdout
    # The demo's pio run with dir=/proc/sys is refused by the agent (a FAILED run).
    assert "pio -p dir=/proc/sys run" in r.stdout and "refused, as it must be" in r.stdout, r.stdout
    assert duck_count(lake, "runs") == 7 + traced
    # Calibration: the netprobe run (2 local ranks, 5 message sizes, one file
    # each) is fitted by the worker's calibrate job into replay_calibrations
    # (one intra-node row), and the demo prints the fit.
    np_run = re.search(r"^submitted netprobe run (\S+)$", r.stdout, re.M).group(1)
    cal = duckdb.sql(f"SELECT run_id, class, latency_s, bandwidth_mb_s, r2, sizes, rejected FROM read_parquet("
                     f"'{lake}/tables/replay_calibrations/**/*.parquet', hive_partitioning=true)").fetchall()
    assert len(cal) == 1, cal
    run_id, cls, lat, bw, r2, sizes, rejected = cal[0]
    assert (run_id, cls, sizes) == (np_run, "intra", 5), cal
    # A fit of a busy machine (rejected below) may come out at latency 0.
    assert (0 < lat if rejected is None else 0 <= lat) and lat < 1e-3 and bw > 0 and r2 <= 1, cal
    assert re.search(rf"^calibration {np_run} of node \S+ \(intra\): latency [0-9.]+ us, bandwidth [0-9]+ MB/s "
                     r"\(2\^20 B\), r2 -?[0-9.]+ over 5 sizes", r.stdout, re.M), r.stdout
    # The quality gate (r2 >= 0.9, >= 3 sizes, not disturbed): the demo prints
    # the fit's quality; a rejected fit (a busy machine) is stored with its
    # reason and not used by the default replays, and the demo says so.
    assert (rejected is None) == (r2 >= 0.9), cal
    assert re.search(rf"^calibration {np_run} quality: intra r² -?[0-9.]+ over 5 sizes: "
                     + ("accepted" if rejected is None else "rejected"), r.stdout, re.M), r.stdout
    if rejected is not None:
        assert f"calibration {np_run} is rejected (" in r.stdout, r.stdout
    # Its checks: no slow pair (each size's pairs against their own median).
    slow = duckdb.sql(f"SELECT status, value FROM read_parquet('{lake}/tables/checks/**/*.parquet', hive_partitioning=true) "
                      f"WHERE run_id = '{np_run}' AND \"check\" = 'linktest.slow_pairs'").fetchall()
    assert slow == [("PASS", 0.0)], slow
    # The sweep's 6 points, and a traced run's default Bandela and Dimemas replays.
    assert duck_count(lake, "replays") == 6 + 2 * traced
    assert duck_count(lake, "io_results") == 4
    # a2av-demo: ingest, then the pattern analysis (2 lead ranks = 2 part jobs
    # and a merge): lead 0 has 3 patterns, lead 4 one, each a send and a recv row.
    # The traced run adds one pattern (each rank to the other one), send and recv.
    assert duck_count(lake, "alltoallv_calls") == 14 + 20 * traced
    assert duck_count(lake, "alltoallv_patterns") == 8 + 2 * traced
    if traced:
        # rank x {MPI_Irecv, MPI_Isend, MPI_Waitall, MPI_Bcast, MPI_Alltoallv, MPI_Barrier, all}
        assert duck_count(lake, "trace_comparison") >= 2 * 7
        # Both default replays of the traced run name the netprobe calibration
        # (replays.params) and use its figures; the demo prints each one's
        # predicted against measured time.
        t_run = re.search(r"^submitted traced run (\S+)$", r.stdout, re.M).group(1)
        reps = duckdb.sql(f"SELECT model, params FROM read_parquet('{lake}/tables/replays/**/*.parquet', "
                          f"hive_partitioning=true) WHERE run_id = '{t_run}' ORDER BY model").fetchall()
        assert [m for m, _ in reps] == ["bandela", "dimemas"], reps
        for model, params in reps:
            c = json.loads(params)["calibration"]
            if rejected is None:
                assert c["id"] == np_run, (model, c)
                assert float(c["params"]["intra_latency"]) == pytest.approx(lat, rel=1e-5), (model, c)
            else:
                # A rejected fit is never used by default.
                assert c["id"] != np_run, (model, c)
            used = np_run if rejected is None else r"\S+"
            m = re.search(rf"^traced run {t_run} {model} replay: predicted ([0-9.]+) ms, measured ([0-9.]+) ms "
                          rf"\(([-+][0-9.]+) %\), calibration {used}$", r.stdout, re.M)
            assert m, r.stdout
            whole = duckdb.sql(f"SELECT max(measured_total_s), max(modelled_total_s) FROM read_parquet("
                               f"'{lake}/tables/trace_comparison/**/*.parquet', hive_partitioning=true) "
                               f"WHERE run_id = '{t_run}' AND model = '{model}' AND function = 'all'").fetchall()[0]
            assert float(m.group(2)) == pytest.approx(whole[0] * 1e3, abs=6e-4), (m.group(0), whole)
            assert float(m.group(1)) == pytest.approx(whole[1] * 1e3, abs=6e-4), (m.group(0), whole)
    reports = list((data / "lake" / "reports").glob("*/counts/*/patterns-job0-rank0.md"))
    assert len(reports) == 1 + traced, reports
    assert any("## Pattern #2 (4/12 alltoallv calls)" in p.read_text() for p in reports)
    # Every DuckDB query the demo prints runs as printed (shell quoting included).
    import duckdb
    import shlex
    queries = [shlex.split(line.strip())[2] for line in r.stdout.splitlines() if line.strip().startswith("duckdb -c ")]
    assert len(queries) >= 5, r.stdout
    for q in queries:
        rows = duckdb.sql(q).fetchall()
        assert rows, q
    print(f"demo took {took:.1f} s")


def test_json_logs_and_quiet_user_commands(tmp_path):
    """`--log-format json` writes one JSON object per line (here to a file);
    user commands log only warnings by default."""
    import json
    import socket

    from conftest import BIN, free_port
    port = free_port()
    logf = tmp_path / "coord.jsonl"
    p = subprocess.Popen([BIN, "--log-format", "json", "--log-file", str(logf), "coordinator",
                          "--listen", f"127.0.0.1:{port}", "--state", str(tmp_path / "state.db"),
                          "--lake", str(tmp_path / "lake")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.time() < deadline and p.poll() is None, p.stderr.read() if p.poll() is not None else "timeout"
                time.sleep(0.1)
        r = subprocess.run([BIN, "run", "list", "--coordinator", f"127.0.0.1:{port}"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stderr == "", r.stdout + r.stderr
    finally:
        p.terminate()
        _, err = p.communicate(timeout=30)
    lines = [json.loads(line) for line in logf.read_text().splitlines()]
    listening = [x for x in lines if x["fields"].get("message") == "coordinator listening"]
    assert len(listening) == 1 and listening[0]["level"] == "INFO", lines
    assert listening[0]["fields"]["addr"] == f"127.0.0.1:{port}"
    assert any(x["fields"].get("message") == "shutting down" for x in lines), lines
    # Everything went to the file.
    assert err == "", err


def test_config_file_sets_every_command(tmp_path):
    """One TOML file configures the coordinator and the user commands; the
    environment and flags override it; `config show` says where each value
    came from and hides secrets."""
    import socket

    from conftest import BIN, free_port
    port = free_port()
    cfg = tmp_path / "site.toml"
    cfg.write_text(f"""
log = "info"
[all]
coordinator = "127.0.0.1:{port}"
[coordinator]
listen = "127.0.0.1:{port}"
state = "{tmp_path / 'state.db'}"
lake = "{tmp_path / 'lake'}"
user_tokens = "u-secret-0123456789abcdef"
admin_tokens = "a-secret-0123456789abcdef"
log_file = "{tmp_path / 'coord.log'}"
[run.list]
token = "u-secret-0123456789abcdef"
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHLAKE_")}
    env["BENCHLAKE_CONFIG"] = str(cfg)
    p = subprocess.Popen([BIN, "coordinator"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.time() < deadline and p.poll() is None, p.communicate()
                time.sleep(0.1)
        # The user command finds the coordinator and its token in the file.
        r = subprocess.run([BIN, "run", "list"], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        # Without the token (it is in another command's table), refused.
        r = subprocess.run([BIN, "agents", "list"], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "Unauthenticated" in r.stderr, r.stdout + r.stderr
        # A flag wins over the file.
        r = subprocess.run([BIN, "run", "list", "--token", "wrong"], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode != 0 and "Unauthenticated" in r.stderr, r.stderr
    finally:
        p.terminate()
        p.communicate(timeout=30)
    assert "coordinator listening" in (tmp_path / "coord.log").read_text()
    show = subprocess.run([BIN, "config", "show", "coordinator"], env=dict(env, BENCHLAKE_TICK_MS="250"),
                          capture_output=True, text=True, timeout=60)
    assert show.returncode == 0, show.stderr
    out = show.stdout
    assert f"# benchlake coordinator: effective configuration (file {cfg})" in out, out
    assert f'listen = "127.0.0.1:{port}"  # file' in out, out
    # No value of the file's secret; the word itself only in flag names.
    names = (out.replace("s3_secret", "").replace("webhook_secret_file", "").replace("WEBHOOK_SECRET_FILES", "")
             .replace("oidc_client_secret_file", "").replace("OIDC_CLIENT_SECRET_FILE", ""))
    assert 'user_tokens = "***"  # file' in out and "secret" not in names, out
    assert "tick_ms = 250  # environment" in out, out
    assert "lease_timeout_ms = 30000  # default" in out, out
    # A typo is an error naming the file and the key.
    bad = tmp_path / "bad.toml"
    bad.write_text("[coordinator]\nlisten_addr = 1\n")
    r = subprocess.run([BIN, "--config", str(bad), "coordinator"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert f"{bad}: coordinator.listen_addr: `benchlake coordinator` has no --listen-addr" in r.stderr, r.stderr


def test_shell_completions_and_manual_pages(tmp_path):
    """Completions and manual pages come from the same flag definitions: bash
    completes subcommands and flags; every command gets a page with its flags,
    defaults and environment variables."""
    import shutil

    from conftest import BIN
    script = subprocess.run([BIN, "completions", "bash"], capture_output=True, text=True, timeout=60, check=True).stdout
    (tmp_path / "benchlake.bash").write_text(script)

    def complete(*words):
        line = " ".join(words)
        prog = (f"source {tmp_path / 'benchlake.bash'}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
                f"_benchlake benchlake {words[-1]} {words[-2]}; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
        r = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    assert complete("benchlake", "run", "su") == ["submit"]
    assert set(complete("benchlake", "coordinator", "--lea")) == {"--lease-timeout-ms", "--leader-lease-ms"}
    assert "--config" in complete("benchlake", "agent", "--con")
    zsh = subprocess.run([BIN, "completions", "zsh"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert zsh.startswith("#compdef benchlake")
    # Closing the pipe early is no error (no panic on a broken pipe).
    r = subprocess.run(f"{BIN} completions bash | head -1", shell=True, capture_output=True, text=True, timeout=60)
    assert r.stdout.startswith("_benchlake()") and "panicked" not in r.stderr, r.stderr

    out = tmp_path / "man"
    r = subprocess.run([BIN, "man", "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    pages = {p.name for p in out.iterdir()}
    for page in ("benchlake.1", "benchlake-coordinator.1", "benchlake-run-submit.1", "benchlake-config-show.1",
                 "benchlake-replay-dimemas.1"):
        assert page in pages, sorted(pages)
    coord = (out / "benchlake-coordinator.1").read_text()
    assert ".TH benchlake-coordinator 1" in coord
    assert r"\fB\-\-leader\-lease\-ms\fR \fI<LEADER_LEASE_MS>\fR [default: 3000]" in coord
    assert "BENCHLAKE_LEADER_LEASE_MS" in coord
    if shutil.which("man"):
        r = subprocess.run(["man", "-l", str(out / "benchlake-run-submit.1")], capture_output=True, text=True,
                           env=dict(os.environ, MANWIDTH="100", MANPAGER="cat"), timeout=60)
        assert r.returncode == 0 and "benchlake-run-submit - Submit a run" in r.stdout, r.stdout[:2000]


def test_failed_run_shows_its_cause_and_run_logs_prints_tails(tmp_path, pb):
    """A failed run's cause is on the task's stderr: `run submit --watch` shows
    its last lines, `run logs` the whole tails with state, exit code and
    reason; tasks that did not exit show no exit code."""
    from conftest import BIN, Cluster
    c = Cluster(tmp_path)
    (tmp_path / "catalog.toml").write_text((tmp_path / "catalog.toml").read_text() + """
[[benchmark]]
name = "breaks"
kind = "noop"
command = ["sh", "-c", "echo starting; echo 'open /scratch/x: disk quota exceeded' >&2; exit 3"]
timeout_s = 60
""")
    try:
        c.coordinator()
        c.agent("a1")
        c.worker("w1")
        api = Api(pb, c.addr)
        api.wait_agents(1)
        r = subprocess.run([BIN, "run", "submit", "breaks", "--max-attempts", "1", "--watch",
                            "--coordinator", c.addr], capture_output=True, text=True, timeout=120)
        assert r.returncode != 0, r.stdout
        assert "FAILED    attempt 1/1 exit 3" in r.stdout, r.stdout
        assert "| open /scratch/x: disk quota exceeded" in r.stdout, r.stdout
        run_id = r.stdout.split()[0]
        logs = subprocess.run([BIN, "run", "logs", run_id, "--coordinator", c.addr],
                              capture_output=True, text=True, timeout=60)
        assert logs.returncode == 0, logs.stderr
        assert "FAILED, attempt 1/1, exit 3" in logs.stdout, logs.stdout
        assert "-- stdout (last" in logs.stdout and "starting" in logs.stdout, logs.stdout
        assert "disk quota exceeded" in logs.stdout.split("-- stderr")[1], logs.stdout
        js = json.loads(subprocess.run([BIN, "run", "logs", run_id, "--task", "0", "--json", "--coordinator",
                                        c.addr], capture_output=True, text=True, timeout=60, check=True).stdout)
        assert js[0]["exit_code"] == 3 and "disk quota" in js[0]["stderr_tail"], js
        bad = subprocess.run([BIN, "run", "logs", run_id, "--task", "9", "--coordinator", c.addr],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0 and "no task '9'" in bad.stderr, bad.stderr
        # A running task has no exit code yet; a cancelled one never gets one.
        s = api.submit("sleep", {"seconds": "30"})
        api.wait(s.run_id, pred=lambda d: d.tasks and d.tasks[0].state == pb["common"].TASK_STATE_RUNNING)
        show = subprocess.run([BIN, "run", "show", s.run_id, "--coordinator", c.addr], capture_output=True,
                              text=True, timeout=60, check=True).stdout
        assert "RUNNING" in show and "exit -" in show and "exit 0" not in show, show
        subprocess.run([BIN, "run", "cancel", s.run_id, "--coordinator", c.addr], check=True, timeout=60,
                       capture_output=True)
        api.wait(s.run_id, pred=lambda d: d.tasks[0].state == pb["common"].TASK_STATE_CANCELLED)
        show = subprocess.run([BIN, "run", "show", s.run_id, "--coordinator", c.addr], capture_output=True,
                              text=True, timeout=60, check=True).stdout
        assert "CANCELLED" in show and "exit -" in show and "exit 0" not in show, show
    finally:
        c.stop()


def test_probe_linktest_writes_a_file_the_ingest_reads(tmp_path):
    """`probe linktest` writes a synthetic LinkTest 2.1.17 file (the generator
    the ingest bench measures) that the ingest turns into the linktest tables,
    with the planted slow host and slowest pair where the generator put them."""
    import duckdb

    from conftest import BIN
    f = tmp_path / "lt.sion"
    r = subprocess.run([BIN, "probe", "linktest", "--ranks", "96", "--ranks-per-host", "16", "--seed", "3",
                        "--out", str(f)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "96 ranks on 6 hosts, 9120 pair times" in r.stdout, r.stdout + r.stderr
    (tmp_path / "again").mkdir()
    again = tmp_path / "again" / "lt.sion"  # the SION header holds the file name
    subprocess.run([BIN, "probe", "linktest", "--ranks", "96", "--ranks-per-host", "16", "--seed", "3",
                    "--out", str(again)], check=True, capture_output=True, timeout=120)
    assert f.read_bytes() == again.read_bytes()  # deterministic per seed
    lake = tmp_path / "lake"
    r = subprocess.run([BIN, "ingest", "linktest", str(f), "--out", str(lake), "--run-id",
                        "01JPR0BE000000000000000001"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    t = f"read_parquet('{lake}/tables/linktest_timings/**/*.parquet', hive_partitioning=true)"
    assert duckdb.sql(f"SELECT count(*) FROM {t}").fetchall()[0][0] == 96 * 95
    slowest = duckdb.sql(f"SELECT from_rank, to_rank, time_s FROM {t} ORDER BY time_s DESC LIMIT 1").fetchall()[0]
    assert slowest[:2] == (1, 95) and abs(slowest[2] - 3.1744451958333334e-4) < 1e-9, slowest
    # Every link of the second host (ranks 16..31) is about 4x slower.
    ranks = f"read_parquet('{lake}/tables/linktest_ranks/**/*.parquet', hive_partitioning=true)"
    assert duckdb.sql(f"SELECT hostname FROM {ranks} WHERE rank = 20").fetchall()[0][0] == "node0001"
    slow, fast = duckdb.sql(
        f"SELECT avg(time_s) FILTER (WHERE from_rank BETWEEN 16 AND 31 AND to_rank >= 32), "
        f"avg(time_s) FILTER (WHERE from_rank >= 32 AND to_rank >= 32) FROM {t}").fetchall()[0]
    assert 3.0 < slow / fast < 5.0, (slow, fast)
    # The pairs carry their ranks' hosts (rank r on node{r // 16}).
    assert duckdb.sql(f"SELECT count(*) FROM {t} WHERE from_host = printf('node%04d', from_rank // 16) "
                      "AND to_host = printf('node%04d', to_rank // 16)").fetchall()[0][0] == 96 * 95
    # The ingest wrote the per-host summary: 6 hosts × (intra, inter); the
    # slow host has the most slow pairs.
    hs = f"read_parquet('{lake}/tables/linktest_host_summary/**/*.parquet', hive_partitioning=true)"
    rows = duckdb.sql(f"SELECT host, pair_class, pairs, slow_pairs FROM {hs} "
                      "ORDER BY slow_pairs DESC, host, pair_class").fetchall()
    assert len(rows) == 12 and rows[0][:2] == ("node0001", "inter") and rows[0][3] > 0, rows
    assert {r[2] for r in rows if r[1] == "intra"} == {16 * 15}, rows
    assert {r[2] for r in rows if r[1] == "inter"} == {16 * 80 * 2}, rows
    # A file written before the host columns (the same pairs without them)
    # reads beside the new one with union_by_name=true: its hosts are NULL.
    import pyarrow.parquet as pq
    new = next((lake / "tables" / "linktest_timings").rglob("*.parquet"))
    pq.write_table(pq.read_table(new).drop_columns(["from_host", "to_host"]), new.parent / "part-old.parquet")
    both = t.replace("hive_partitioning=true", "hive_partitioning=true, union_by_name=true")
    assert duckdb.sql(f"SELECT count(*), count(from_host) FROM {both}").fetchall()[0] == (2 * 96 * 95, 96 * 95)
    bad = subprocess.run([BIN, "probe", "linktest", "--ranks", "1", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--ranks 1" in bad.stderr and not (tmp_path / "x").exists(), bad.stderr


def test_run_verdict_in_api_cli_and_lake(tmp_path):
    """A run's overall verdict (the worst of its checks) is in GetRun/ListRuns,
    `run show`, `run list` and the `runs` table's `verdict` column; a run
    without checks has none."""
    import socket

    import duckdb

    from conftest import BIN, free_port
    port = free_port()
    addr = f"127.0.0.1:{port}"
    data = tmp_path / "data"
    up = subprocess.Popen([BIN, "up", "--data", str(data), "--listen", addr], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while True:
            r = subprocess.run([BIN, "agents", "list", "--json", "--coordinator", addr], capture_output=True,
                               text=True, timeout=30)
            if r.returncode == 0 and json.loads(r.stdout):
                break
            assert time.time() < deadline and up.poll() is None, r.stderr
            time.sleep(0.2)
        # pio with a write-bandwidth bound no disk meets: the run succeeds, its check fails.
        r = subprocess.run([BIN, "run", "submit", "pio", "-p", "block_size=4194304", "-p",
                            "check_io_write_bw_mib_s=100000000", "--watch", "--coordinator", addr],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        pio = r.stdout.split()[0]
        assert "state      SUCCEEDED" in r.stdout and "verdict    FAIL" in r.stdout, r.stdout
        # A run with no checks at all (hostinfo has them: cores and memory
        # against the node's history, NO_REFERENCE at first).
        h = subprocess.run([BIN, "run", "submit", "sleep", "--watch", "--coordinator", addr],
                           capture_output=True, text=True, timeout=180)
        assert h.returncode == 0 and "verdict    - (no check ran)" in h.stdout, h.stdout
        host = h.stdout.split()[0]
        runs = {x["run_id"]: x for x in json.loads(subprocess.run(
            [BIN, "run", "list", "--json", "--coordinator", addr], capture_output=True, text=True, timeout=60,
            check=True).stdout)}
        assert runs[pio]["verdict"] == "FAIL" and runs[host]["verdict"] is None, runs
        lines = subprocess.run([BIN, "run", "list", "--coordinator", addr], capture_output=True, text=True,
                               timeout=60, check=True).stdout.splitlines()
        assert any(line.startswith(pio) and line.split()[1:3] == ["SUCCEEDED", "FAIL"] for line in lines), lines
        assert any(line.startswith(host) and line.split()[1:3] == ["SUCCEEDED", "-"] for line in lines), lines
    finally:
        up.terminate()
        up.communicate(timeout=60)
    t = f"read_parquet('{data}/lake/tables/runs/**/*.parquet', hive_partitioning=true)"
    got = dict(duckdb.sql(f"SELECT run_id, verdict FROM {t}").fetchall())
    assert got == {pio: "FAIL", host: None}, got
