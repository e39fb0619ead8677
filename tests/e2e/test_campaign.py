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

Short form in the suite (BENCHLAKE_CAMPAIGN_RUNS, default 40); the long form is
`bash scripts/fault-campaign.sh [RUNS] [SEED]`. Figures go to stdout (and
docs/testing.md)."""
import os
import random
import time

import socket

from conftest import ROOT, Api, HaApi, free_port

RUNS = int(os.environ.get("BENCHLAKE_CAMPAIGN_RUNS", "40"))
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
    start_agent = lambda a: cluster.agent(a, {"BENCHLAKE_TOKEN": secret(a)})  # noqa: E731
    start_worker = lambda w: cluster.worker(w, {"BENCHLAKE_TOKEN": secret(w)}, concurrency=None)  # noqa: E731
    standby = cluster.state.startswith("postgres://")
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
