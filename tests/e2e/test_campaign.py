"""Fault campaign: runs of mixed kinds (sleep, hostinfo, pio, the alltoallv
counts demo with its fanned-out analysis) while the coordinator, a worker and an
agent are each killed with -9 at random moments and restarted. Afterwards,
through the API and DuckDB over the lake: every run is final and SUCCEEDED,
every run has exactly one `runs` row, no table holds a duplicated row of a
run, and no `_staging/` object is left once the reconciler has passed.

Authentication is on as a site runs it: a bound token per agent and per
worker (`NAME:TOKEN`), the workers at their default concurrency (one job
slot per core, leasing as `w1.0`, `w1.1`, ...), and the client with a bound
user token.

On PostgreSQL (BENCHLAKE_E2E_STATE=postgres) two coordinators share the
state, one leading and one standing by; every process and the client get
both addresses; a coordinator kill hits whichever leads, the standby takes
over, and the killed one comes back as the new standby.

Two probes follow the kills (issue 39 item 9):
- **A full disk.** The lake is a tmpfs of its own (root mounts it; under
  CI=true a test that cannot fails); once the kills are over it is filled to
  the last byte, hostinfo runs are submitted and the disk stays full longer
  than the agents' `--retry-for` (restarted with 2 s for this): an attempt
  whose output could not land is retried as a new attempt, the coordinator
  logs the refused writes, and once space is back every run SUCCEEDS with one
  `runs` row.
- **Load.** `benchlake probe load` registers 1,000 simulated agents that
  heartbeat once a second, with 200 submitters, 4 pollers and 4 readers,
  against the same coordinator(s) (BENCHLAKE_CAMPAIGN_LOAD_SECS, default 15):
  no call may fail, and a real run submitted during the load SUCCEEDS. Its
  latency figures are printed (docs/testing.md gives a release build's).

Short form in the suite (BENCHLAKE_CAMPAIGN_RUNS, default 40); the long form is
`bash scripts/fault-campaign.sh [RUNS] [SEED]`. Figures go to stdout (and
docs/testing.md)."""
import errno
import json
import os
import random
import subprocess
import threading
import time

import socket

from conftest import BIN, ROOT, Api, HaApi, free_port, require_under_ci

RUNS = int(os.environ.get("BENCHLAKE_CAMPAIGN_RUNS", "40"))
LOAD_SECS = int(os.environ.get("BENCHLAKE_CAMPAIGN_LOAD_SECS", "15"))
SEED = int(os.environ.get("BENCHLAKE_CAMPAIGN_SEED", "13"))

KINDS = [
    ("sleep", {"seconds": "0.5"}, 2),
    ("hostinfo", {}, 2),
    ("pio", {"np": "1", "block_size": "4MiB", "transfer_size": "1MiB", "fsync": "false"}, 1),
    ("a2av-demo", {}, 1),
]

# Rows one run writes per table never repeat these columns together.
UNIQUE = {
    "runs": ["run_id"],
    "raw_files": ["run_id", "key"],
    "node_facts": ["run_id", "source"],
    "io_results": ["run_id", "source", "iteration", "operation"],
    "alltoallv_calls": ["run_id", "source", "job", "lead_rank", "call_id"],
    "alltoallv_patterns": ["run_id", "source", "lead_rank", "pattern_id", "direction"],
}


def duck(q):
    import duckdb

    return duckdb.sql(q).fetchall()


def table(lake, name):
    return f"read_parquet('{lake}/tables/{name}/**/*.parquet', hive_partitioning=true)"


def secret(name):
    return f"campaign-{name}-token-0123456789"


def test_fault_campaign(cluster, pb):
    rng = random.Random(SEED)
    # The agents run the built-in catalog (pio and the counts demo included).
    (cluster.tmp / "catalog.toml").write_text((ROOT / "agent" / "src" / "builtin.toml").read_text())
    agents = ["a1", "a2"]
    workers = ["w1", "w2"]
    cluster.env.update({
        "BENCHLAKE_USER_TOKENS": f"campaign:{secret('user')}",
        "BENCHLAKE_AGENT_TOKENS": ",".join(f"{a}:{secret(a)}" for a in agents),
        "BENCHLAKE_WORKER_TOKENS": ",".join(f"{w}:{secret(w)}" for w in workers),
    })
    start_agent = lambda a, extra=None: cluster.agent(a, {"BENCHLAKE_TOKEN": secret(a), **(extra or {})})  # noqa: E731
    start_worker = lambda w: cluster.worker(w, {"BENCHLAKE_TOKEN": secret(w)}, concurrency=None)  # noqa: E731
    standby = cluster.state.startswith("postgres://")
    cluster.env["BENCHLAKE_ADMIN_TOKENS"] = secret("admin")
    # The lake on a small filesystem of its own, for the full-disk probe.
    os.makedirs(cluster.lake, exist_ok=True)
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", cluster.lake]).returncode == 0
    require_under_ci(mounted, "the full-disk probe mounts a tmpfs for the lake, which needs root")
    try:
        _campaign(cluster, pb, rng, agents, workers, start_agent, start_worker, standby, mounted)
    finally:
        cluster.stop()
        if mounted:
            subprocess.run(["umount", "-l", cluster.lake])


def _campaign(cluster, pb, rng, agents, workers, start_agent, start_worker, standby, mounted):
    ports = {"coordinator": cluster.port, "coordinator-b": free_port()} if standby else {}

    def listening(name):
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", ports[name])) == 0

    def start_coord(name):
        return cluster._spawn(name, ["coordinator", "--listen", f"127.0.0.1:{ports[name]}", "--state",
                                     cluster.state, "--lake", cluster.lake, "--leader-lease-ms", "1000"])

    if standby:
        start_coord("coordinator")
        cluster.wait_port()
        start_coord("coordinator-b")
        # Agents, workers and the client follow whichever coordinator leads.
        cluster.addr = ",".join(f"127.0.0.1:{p}" for p in ports.values())
    else:
        cluster.coordinator()
    for a in agents:
        start_agent(a)
    for w in workers:
        start_worker(w)
    if standby:
        api = HaApi(pb, "ipv4:" + cluster.addr, token=secret("user"))
    else:
        api = Api(pb, cluster.addr, token=secret("user"))
    api.wait_agents(len(agents))
    takeovers = 0

    started = time.time()
    submitted = []
    kills = {"coordinator": 0, "worker": 0, "agent": 0}
    i = 0
    while len(submitted) < RUNS:
        bench, params, count = KINDS[i % len(KINDS)]
        i += 1
        try:
            r = api.submit(bench, params, count=count, key=f"campaign-{SEED}-{i}")
            submitted.append((bench, count, r.run_id))
        except Exception:  # the coordinator is down: the same key goes again
            i -= 1
            time.sleep(0.2)
            continue
        # About one kill every three runs, of a random role at a random moment.
        if rng.random() < 0.35:
            role = rng.choice(["coordinator", "worker", "agent"])
            time.sleep(rng.uniform(0.0, 1.5))
            if role == "coordinator" and standby:
                leader = next((n for n in ports if listening(n)), None)
                if leader is None:  # a takeover is under way: kill nobody
                    continue
                cluster.kill9(leader)
                time.sleep(rng.uniform(0.2, 2.0))
                start_coord(leader)  # back as the standby
                takeovers += 1
            elif role == "coordinator":
                cluster.kill9("coordinator")
                time.sleep(rng.uniform(0.2, 2.0))
                cluster.coordinator()
            elif role == "worker":
                w = rng.choice(workers)
                cluster.kill9(w)
                time.sleep(rng.uniform(0.1, 1.0))
                start_worker(w)
            else:
                a = rng.choice(agents)
                cluster.kill9(a)
                time.sleep(rng.uniform(0.1, 1.0))
                start_agent(a)
            kills[role] += 1
        else:
            time.sleep(rng.uniform(0.0, 0.3))

    # Every run final and SUCCEEDED.
    final = {}
    for bench, count, run_id in submitted:
        d = api.wait(run_id, timeout=240)
        final[run_id] = d
        assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED, (bench, d)
    elapsed = time.time() - started
    lake = cluster.lake
    ids = [r for _, _, r in submitted]
    id_list = ",".join(f"'{r}'" for r in ids)

    # One `runs` row per run, and the expected rows of each kind.
    rows = dict(duck(f"SELECT run_id, count(*) FROM {table(lake, 'runs')} WHERE run_id IN ({id_list}) GROUP BY 1"))
    assert sorted(rows) == sorted(ids), set(ids) ^ set(rows)
    assert set(rows.values()) == {1}, rows
    status = duck(f"SELECT DISTINCT status FROM {table(lake, 'runs')} WHERE run_id IN ({id_list})")
    assert status == [("SUCCEEDED",)], status
    for bench, count, run_id in submitted:
        if bench == "hostinfo":
            n = duck(f"SELECT count(*) FROM {table(lake, 'node_facts')} WHERE run_id = '{run_id}'")[0][0]
            assert n == count, (run_id, n)
    # No duplicated rows anywhere.
    dup = {}
    for name, cols in UNIQUE.items():
        c = ", ".join(f'"{x}"' for x in cols)
        dup[name] = duck(
            f"SELECT count(*) FROM (SELECT {c}, count(*) n FROM {table(lake, name)} "
            f"WHERE run_id IN ({id_list}) GROUP BY ALL HAVING n > 1)"
        )[0][0]
    assert all(v == 0 for v in dup.values()), dup

    # No staging leftovers once the reconciler has passed (every 60 s).
    staging = cluster.tmp / "lake" / "_staging"
    deadline = time.time() + 150
    left = []
    while time.time() < deadline:
        left = [p for p in staging.rglob("*") if p.is_file()] if staging.exists() else []
        if not left:
            break
        time.sleep(1)
    assert left == [], left[:10]
    attempts = sum(t.attempt - 1 for d in final.values() for t in d.tasks)
    print(
        f"\nfault campaign: {len(submitted)} runs (seed {SEED}) in {elapsed:.1f} s, "
        f"kill -9: {kills}; all SUCCEEDED, {len(rows)} runs rows, duplicates {sum(dup.values())}, "
        f"staging leftovers 0, task retries {attempts}"
        + (f", leader killed {takeovers} times with a standby beside it" if standby else "")
    )
    if standby:
        # Both coordinators alive; exactly one leads.
        for n in ports:
            assert cluster.procs[n].poll() is None, cluster.log(n)[-3000:]
        assert sum(listening(n) for n in ports) == 1, [cluster.log(n)[-2000:] for n in ports]

    if mounted:
        _full_disk(cluster, api, pb, agents, start_agent)
    _load(cluster, api, pb)


def _full_disk(cluster, api, pb, agents, start_agent):
    """The lake's filesystem full for longer than the agents' --retry-for."""
    for a in agents:  # a short --retry-for, so the probe stays short
        cluster.kill9(a)
        start_agent(a, {"BENCHLAKE_RETRY_FOR": "2"})
    api.wait_agents(len(agents))
    filler = os.path.join(cluster.lake, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096, 1):  # to the last byte
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)
    full_at = time.time()
    ids = [api.submit("hostinfo", {}, count=1, key=f"disk-{i}-{full_at}").run_id for i in range(4)]
    time.sleep(5.0)
    full_s = time.time() - full_at
    os.remove(filler)
    final = [api.wait(r, timeout=240) for r in ids]
    states = [d.run.state for d in final]
    assert states == [pb["common"].RUN_STATE_SUCCEEDED] * len(ids), [(d.run.state, d.run.error) for d in final]
    retried = sum(t.attempt > 1 for d in final for t in d.tasks)
    logs = "".join(cluster.log(n) for n in ("coordinator", "coordinator-b") if (cluster.tmp / f"{n}.log").exists())
    assert "cannot write a raw output to the lake" in logs
    id_list = ",".join(f"'{r}'" for r in ids)
    rows = dict(duck(f"SELECT run_id, count(*) FROM {table(cluster.lake, 'runs')} WHERE run_id IN ({id_list}) GROUP BY 1"))
    assert rows == {r: 1 for r in ids}, rows
    facts = duck(f"SELECT count(*) FROM {table(cluster.lake, 'node_facts')} WHERE run_id IN ({id_list})")[0][0]
    assert facts == len(ids), facts
    assert retried >= 1, "no attempt was retried: the disk was not full when the outputs were uploaded"
    print(f"full disk: lake full for {full_s:.1f} s (agents' --retry-for 2 s); {len(ids)} hostinfo runs, "
          f"{retried} retried as a new attempt, all SUCCEEDED with one runs row each")


def _load(cluster, api, pb):
    """`benchlake probe load` against the campaign's coordinator(s)."""
    env = dict(cluster.env)
    cmd = [BIN, "probe", "load", "--coordinator", cluster.addr, "--token", secret("user"),
           "--admin-token", secret("admin"), "--agents", "1000", "--submitters", "200",
           "--pollers", "4", "--readers", "4", "--secs", str(LOAD_SECS), "--json"]
    out = {}

    def probe():
        out["p"] = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=LOAD_SECS + 300)

    t = threading.Thread(target=probe)
    t.start()
    time.sleep(min(5, LOAD_SECS / 2))
    real = api.submit("sleep", {"seconds": "0.5"}, count=1, key=f"under-load-{time.time()}").run_id
    t.join()
    p = out["p"]
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    j = json.loads(p.stdout)
    calls = {c["call"]: c for c in j["calls"]}
    assert all(c["failed"] == 0 for c in calls.values()), calls
    # The simulated agents were heard from throughout (a client that waits for
    # slow answers sends fewer: half the due heartbeats at least, so no agent
    # went unheard for anywhere near the 30 s after which it is LOST).
    assert calls["Heartbeat"]["answered"] >= 0.5 * 1000 * LOAD_SECS, calls["Heartbeat"]
    d = api.wait(real, timeout=240)
    assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED, d
    print(f"load: 1000 agents, 200 submitters, {LOAD_SECS} s: {j['submits_per_s']:.0f} submits/s, "
          + "; ".join(f"{k} p50/p99 {c['p50_ms']:.0f}/{c['p99_ms']:.0f} ms" for k, c in calls.items())
          + "; a real run submitted meanwhile SUCCEEDED")
