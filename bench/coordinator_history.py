#!/usr/bin/env python3
"""A coordinator with a long history: memory, read latency, backfill rate (issue 40).

Starts a coordinator (SQLite state, local lake), --agents agents (each with
--slots slots) and one worker as separate processes of the same binary, so the
coordinator's resident memory is its own. Then builds a history of --runs runs
of small benchmarks (`sleep 0`, and `hostinfo` for every --hostinfo-every-th
submitted run, which writes checks and node verdicts):

- a backfill of --nights nights (default 365) of each of --schedules nightly
  schedules, created with `benchlake schedule create` and filled with
  `benchlake schedule backfill` (runs of one schedule queue and run one after
  another in date order unless --overlap);
- --submitters clients submitting the rest of the runs at the same time, each
  as `run submit --watch` does (SubmitRun, then WatchRun until the run and its
  jobs have ended, then the next).

While the history grows, --readers readers each make one call every
--read-interval-ms, round robin: ListRuns of the 100 newest (`run list`),
GetRun of a recent run (`run show`), ListSchedules (`schedule list`), and an
HTTP GET of every dashboard page (`/`, `/runs`, `/runs/ID`, `/api/runs/ID`,
`/nodes/AGENT`, `/io`, `/silences`, `/audit`). Every 5 s it samples the
coordinator's VmRSS and its run counts (`/metrics`).

    python3 bench/coordinator_history.py [--bin PATH] [--runs 10000] [--schedules 4]
        [--nights 365] [--submitters 10] [--agents 4] [--slots 8]

It prints the RSS over time, each call's p50/p99 (over the whole build and over
its last quarter), the backfill's landing rate and how long the whole history
took, then exits 1 when a target is missed: RSS < --max-rss-mb (500) after the
last run, every p99 < --max-p99-ms (100), backfill >= --min-backfill-rate (10
runs/s). It needs `grpcio` and `grpcio-tools` (pip install grpcio grpcio-tools).
"""
import argparse
import getpass
import importlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CATALOG = """\
[[benchmark]]
name = "sleep"
kind = "noop"
description = "sleeps for a while"
command = ["sleep", "{seconds}"]
launchers = ["local"]
timeout_s = 60
[[benchmark.param]]
name = "seconds"
type = "float"
default = "0"
min = 0
max = 60

[[benchmark]]
name = "hostinfo"
kind = "noop"
description = "node facts"
command = ["{self_exe}", "probe", "host", "--per-node", "--out", "{out_dir}/host.json"]
launchers = ["local"]
timeout_s = 60
[[benchmark.output]]
file = "host*.json"
format = "hostinfo"
required = true
"""

FINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def stubs():
    """Python stubs of benchlake.v1, generated with grpcio-tools."""
    try:
        import grpc  # noqa: F401
        import grpc_tools  # noqa: F401
    except ImportError:
        sys.exit("this benchmark needs grpcio and grpcio-tools: pip install grpcio grpcio-tools")
    out = Path(tempfile.mkdtemp(prefix="bl-hist-pb-"))
    protos = sorted(str(p.relative_to(ROOT / "proto"))
                    for p in (ROOT / "proto" / "benchlake" / "v1").glob("*.proto"))
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'proto'}",
                    f"--python_out={out}", f"--grpc_python_out={out}", *protos], check=True)
    for d in (out / "benchlake", out / "benchlake" / "v1"):
        (d / "__init__.py").touch()
    sys.path.insert(0, str(out))
    return (importlib.import_module("benchlake.v1.common_pb2"),
            importlib.import_module("benchlake.v1.runs_pb2"),
            importlib.import_module("benchlake.v1.runs_pb2_grpc"), out)


def metrics_runs(http):
    """Runs by state from the coordinator's /metrics."""
    out = {}
    with urllib.request.urlopen(f"{http}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("benchlake_runs{state=\""):
                state = line.split('"')[1]
                out[state] = int(float(line.rsplit(" ", 1)[1]))
    return out


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "benchlake"))
    ap.add_argument("--runs", type=int, default=10000, help="runs in the history, backfill included")
    ap.add_argument("--schedules", type=int, default=4)
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--overlap", action="store_true", help="schedules allow overlap (backfilled runs start together)")
    ap.add_argument("--submitters", type=int, default=10)
    ap.add_argument("--hostinfo-every", type=int, default=10, help="every Nth submitted run is hostinfo (0: none)")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--poll-ms", type=int, default=0, help="agents' --poll-ms (0: the agent's default)")
    ap.add_argument("--worker-concurrency", type=int, default=4)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--read-interval-ms", type=float, default=100)
    ap.add_argument("--max-rss-mb", type=float, default=500)
    ap.add_argument("--max-p99-ms", type=float, default=100)
    ap.add_argument("--min-backfill-rate", type=float, default=10)
    ap.add_argument("--timeout-s", type=float, default=4 * 3600)
    ap.add_argument("--keep", action="store_true", help="keep the data directory (printed)")
    a = ap.parse_args()
    if a.schedules * a.nights > a.runs:
        sys.exit(f"--schedules x --nights ({a.schedules * a.nights}) is more than --runs ({a.runs})")
    if not Path(a.bin).is_file():
        sys.exit(f"{a.bin} not found: build it (cargo build --release -p benchlake) or pass --bin")
    common, runs_pb, runs_grpc, pb_dir = stubs()
    import grpc

    work = Path(tempfile.mkdtemp(prefix="bl-hist-"))
    (work / "cat.toml").write_text(CATALOG)
    port, hport = free_port(), free_port()
    addr, http = f"127.0.0.1:{port}", f"http://127.0.0.1:{hport}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHLAKE_")}
    env["BENCHLAKE_COORDINATOR"] = addr
    env.setdefault("RUST_LOG", "warn")
    lake = str(work / "lake")
    logs = []
    procs = []

    def start(name, args):
        log = open(work / f"{name}.log", "w")
        logs.append(log)
        p = subprocess.Popen([a.bin, *args], env=env, stdout=log, stderr=subprocess.STDOUT)
        procs.append(p)
        return p

    def cli(*args):
        p = subprocess.run([a.bin, *args], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"benchlake {' '.join(args)} failed: {p.stderr.strip()}")
        return p.stdout

    rc = 0
    try:
        coord = start("coordinator", ["coordinator", "--listen", addr, "--state", str(work / "state.db"),
                                      "--lake", lake, "--http-addr", f"127.0.0.1:{hport}"])
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{http}/readyz", timeout=2).read()
                break
            except OSError:
                if coord.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"the coordinator did not start (log: {work / 'coordinator.log'})")
                time.sleep(0.2)
        agents = [f"hist-agent-{i}" for i in range(a.agents)]
        for i, name in enumerate(agents):
            start(name, ["agent", "--name", name, "--catalog", str(work / "cat.toml"),
                         "--work-dir", str(work / f"agent-{i}"), "--slots", str(a.slots),
                         *(["--poll-ms", str(a.poll_ms)] if a.poll_ms else []),
                         "--run-as", getpass.getuser()])
        start("worker", ["worker", "--lake", lake, "--scratch", str(work / "scratch"),
                         "--concurrency", str(a.worker_concurrency), "--http-addr", "127.0.0.1:0"])
        deadline = time.monotonic() + 60
        while len([ln for ln in cli("agents", "list").splitlines() if "ONLINE" in ln]) < a.agents:
            if time.monotonic() > deadline:
                sys.exit("the agents did not register")
            time.sleep(0.5)
        chan = grpc.insecure_channel(addr)
        runs = runs_grpc.RunServiceStub(chan)
        scheds = runs_grpc.ScheduleServiceStub(chan)

        def spec(bench):
            return common.BenchmarkSpec(benchmark=bench, params={"seconds": "0"} if bench == "sleep" else {},
                                        launcher=common.LAUNCHER_LOCAL)

        # A first run, so that readers have a run to show.
        first = runs.SubmitRun(runs_pb.SubmitRunRequest(spec=spec("sleep"))).run_id
        stop = threading.Event()
        lat = {}
        lat_lock = threading.Lock()
        progress = {"created": 1, "t0": time.monotonic()}
        newest = {"run": first}

        def record(name, t_start, dt):
            with lat_lock:
                lat.setdefault(name, []).append((t_start - progress["t0"], dt * 1000))

        calls = [
            ("run list", lambda: runs.ListRuns(runs_pb.ListRunsRequest(limit=100), timeout=60)),
            ("run show", lambda: runs.GetRun(runs_pb.GetRunRequest(run_id=newest["run"]), timeout=60)),
            ("schedule list", lambda: scheds.ListSchedules(runs_pb.ListSchedulesRequest(), timeout=60)),
        ]
        pages = ["/", "/runs", "/runs/{run}", "/api/runs/{run}", f"/nodes/{agents[0]}", "/io",
                 "/silences", "/audit"]
        for p in pages:
            def get(p=p):
                with urllib.request.urlopen(http + p.format(run=newest["run"]), timeout=60) as r:
                    r.read()
                    if r.status != 200:
                        raise RuntimeError(f"GET {p}: {r.status}")
            calls.append((f"GET {p}", get))
        errors = []

        def reader(k):
            i = k
            while not stop.is_set():
                name, f = calls[i % len(calls)]
                i += 1
                t = time.monotonic()
                try:
                    f()
                    record(name, t, time.monotonic() - t)
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    errors.append(f"{name}: {e}")
                rest = a.read_interval_ms / 1000 - (time.monotonic() - t)
                if rest > 0:
                    stop.wait(rest)

        samples = []

        def sampler():
            while not stop.is_set():
                try:
                    m = metrics_runs(http)
                except OSError:
                    m = {}
                samples.append((time.monotonic() - progress["t0"], rss_mb(coord.pid), progress["created"],
                                sum(v for s, v in m.items() if s in FINAL), m.get("PENDING", 0)))
                stop.wait(5)

        threads = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(a.readers)]
        threads.append(threading.Thread(target=sampler, daemon=True))
        for t in threads:
            t.start()

        # The backfill: schedules created, each filled with --nights nights.
        backfill_ids = []
        t_bf = time.monotonic()
        for s in range(a.schedules):
            name = f"nightly-{s}"
            cli("schedule", "create", name, "--cron", f"{s} 2 * * *", "sleep", "-p", "seconds=0",
                *(["--allow-overlap"] if a.overlap else []))
        end_day = time.gmtime(time.time() - 86400 * 2)
        to = time.strftime("%Y-%m-%d", end_day)
        frm = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400 * (2 + a.nights)))
        for s in range(a.schedules):
            out = json.loads(cli("schedule", "backfill", f"nightly-{s}", "--from", frm, "--to", to,
                                 "--max-runs", str(a.nights), "--json"))
            backfill_ids.append([r["run_id"] for r in out])
            progress["created"] += len(out)
        n_backfill = sum(len(x) for x in backfill_ids)
        t_bf_created = time.monotonic() - t_bf
        print(f"backfill: {a.schedules} schedules x {len(backfill_ids[0]) if backfill_ids else 0} nights "
              f"= {n_backfill} runs created in {t_bf_created:.1f} s", flush=True)

        # Submitters: the rest of the history.
        to_submit = a.runs - n_backfill - 1
        counter = {"n": 0}
        c_lock = threading.Lock()

        def submitter():
            while not stop.is_set():
                with c_lock:
                    if counter["n"] >= to_submit:
                        return
                    counter["n"] += 1
                    n = counter["n"]
                bench = "hostinfo" if a.hostinfo_every and n % a.hostinfo_every == 0 else "sleep"
                try:
                    r = runs.SubmitRun(runs_pb.SubmitRunRequest(spec=spec(bench)), timeout=120)
                    newest["run"] = r.run_id
                    with c_lock:
                        progress["created"] += 1
                    # As `run submit --watch`: the next submit once this
                    # run and its jobs have ended.
                    for _ in runs.WatchRun(runs_pb.WatchRunRequest(run_id=r.run_id), timeout=600):
                        pass
                except grpc.RpcError as e:
                    errors.append(f"SubmitRun/WatchRun: {e.code()} {e.details()}")
                    time.sleep(1)

        subs = [threading.Thread(target=submitter, daemon=True) for _ in range(a.submitters)]
        for t in subs:
            t.start()

        # Wait for the backfill to land (its last run of each schedule final).
        bf_done = None
        deadline = time.monotonic() + a.timeout_s
        pending_bf = [ids[-1] for ids in backfill_ids if ids]
        while time.monotonic() < deadline:
            if pending_bf:
                pending_bf = [r for r in pending_bf
                              if common.RunState.Name(runs.GetRun(runs_pb.GetRunRequest(run_id=r)).run.state)
                              .removeprefix("RUN_STATE_") not in FINAL]
                if not pending_bf and bf_done is None:
                    bf_done = time.monotonic() - t_bf
                    print(f"backfill landed after {bf_done:.1f} s", flush=True)
            m = metrics_runs(http)
            final = sum(v for s, v in m.items() if s in FINAL)
            if not pending_bf and all(not t.is_alive() for t in subs) and final >= progress["created"]:
                break
            time.sleep(1)
        else:
            print("timed out before every run was final", file=sys.stderr)
            rc = 1
        t_all = time.monotonic() - progress["t0"]
        time.sleep(5)  # one more sample after the last run
        stop.set()
        for t in threads + subs:
            t.join(timeout=70)
        m = metrics_runs(http)
        final_rss = rss_mb(coord.pid)

        print()
        total = sum(m.values())
        print(f"history: {total} runs in the state ({n_backfill} backfilled, "
              f"{progress['created'] - n_backfill} submitted by {a.submitters} clients, "
              f"{total - progress['created']} fired by the schedules' own cron meanwhile) in {t_all:.0f} s "
              f"({total / t_all:.1f} runs/s); runs by state at the end: {m}")
        print()
        print("| time s | runs created | runs final | runs pending | coordinator RSS MB |")
        print("|---:|---:|---:|---:|---:|")
        step = max(1, len(samples) // 25)
        for t, r, c, f, p in samples[::step] + ([samples[-1]] if samples and len(samples) % step != 1 else []):
            print(f"| {t:.0f} | {c} | {f} | {p} | {r:.0f} |")
        print()
        print("| call | n | p50 ms | p99 ms | max ms | last quarter p50 / p99 ms |")
        print("|---|---:|---:|---:|---:|---:|")
        worst = 0.0
        for name, _ in calls:
            xs = lat.get(name, [])
            ds = [d for _, d in xs]
            late = [d for t, d in xs if t >= 0.75 * t_all]
            p99 = pct(ds, 99)
            worst = max(worst, p99 if ds else float("inf"))
            print(f"| {name} | {len(ds)} | {pct(ds, 50):.1f} | {p99:.1f} | {max(ds) if ds else float('nan'):.1f} "
                  f"| {pct(late, 50):.1f} / {pct(late, 99):.1f} |")
        print()
        bf_rate = n_backfill / bf_done if bf_done else 0.0
        print(f"backfill: {n_backfill} runs landed in {bf_done or float('nan'):.1f} s: {bf_rate:.1f} runs/s")
        print(f"coordinator RSS after {total} runs: {final_rss:.0f} MB "
              f"(max {max((s[1] for s in samples), default=float('nan')):.0f} MB)")
        if errors:
            print(f"{len(errors)} failed calls, e.g. {errors[:3]}", file=sys.stderr)
            rc = 1
        if final_rss >= a.max_rss_mb:
            print(f"MISSED: RSS {final_rss:.0f} MB >= {a.max_rss_mb:.0f} MB", file=sys.stderr)
            rc = 1
        if worst >= a.max_p99_ms:
            print(f"MISSED: a p99 of {worst:.1f} ms >= {a.max_p99_ms:.0f} ms", file=sys.stderr)
            rc = 1
        if bf_rate < a.min_backfill_rate:
            print(f"MISSED: backfill {bf_rate:.1f} runs/s < {a.min_backfill_rate} runs/s", file=sys.stderr)
            rc = 1
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()
        shutil.rmtree(pb_dir, ignore_errors=True)
        if a.keep:
            print(f"data kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
