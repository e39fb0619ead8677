"""kill -9 of the coordinator, a worker and an agent in the middle of a run:
the run completes after the restart and the lake holds no duplicate rows
(DuckDB COUNT over the hive-partitioned tables)."""
import os
import signal
import time
from pathlib import Path

from conftest import Api, duck_count


def _start(cluster, pb, agents=("a1", "a2")):
    cluster.coordinator()
    for a in agents:
        cluster.agent(a)
    api = Api(pb, cluster.addr)
    api.wait_agents(len(agents))
    return api


def test_coordinator_killed_mid_run(cluster, pb):
    api = _start(cluster, pb)
    cluster.worker("w1")
    run = api.submit("sleep", {"seconds": "2"}, count=2)
    api.wait(run.run_id, pred=lambda d: d.run.state == pb["common"].RUN_STATE_RUNNING)
    cluster.kill9("coordinator")
    time.sleep(0.5)
    cluster.coordinator()
    d = api.wait(run.run_id, timeout=90)
    assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED, d
    h = api.submit("hostinfo", count=2)
    api.wait(h.run_id)
    assert duck_count(cluster.lake, "runs", run.run_id) == 1
    assert duck_count(cluster.lake, "node_facts", h.run_id) == 2
    assert duck_count(cluster.lake, "raw_files", run.run_id) == 4


def test_coordinator_killed_during_processing(cluster, pb):
    api = _start(cluster, pb)
    # The worker holds every job for 1.5 s between staging and commit.
    cluster.worker("w1", {"BENCHLAKE_FAULT_COMMIT_DELAY_MS": "1500"})
    run = api.submit("hostinfo", count=2)
    api.wait(run.run_id, pred=lambda d: d.run.state == pb["common"].RUN_STATE_PROCESSING)
    time.sleep(0.3)
    cluster.kill9("coordinator")
    time.sleep(0.5)
    cluster.coordinator()
    d = api.wait(run.run_id, timeout=90)
    assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED, d
    assert duck_count(cluster.lake, "node_facts", run.run_id) == 2
    assert duck_count(cluster.lake, "runs", run.run_id) == 1


def test_worker_killed_mid_job(cluster, pb):
    api = _start(cluster, pb)
    cluster.worker("slow", {"BENCHLAKE_FAULT_COMMIT_DELAY_MS": "60000"})
    run = api.submit("hostinfo", count=2)
    # The slow worker has staged its first job's Parquet and waits: kill it there.
    deadline = time.time() + 30
    staging = None
    while time.time() < deadline:
        staged = list((cluster.tmp / "lake" / "_staging").rglob("*.parquet")) if (cluster.tmp / "lake" / "_staging").exists() else []
        if staged:
            staging = staged
            break
        time.sleep(0.05)
    assert staging, cluster.log("slow")
    cluster.kill9("slow")
    cluster.worker("w2")
    d = api.wait(run.run_id, timeout=60)
    assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED, d
    assert max(j.attempt for j in d.jobs if j.kind == "ingest") == 2
    assert duck_count(cluster.lake, "node_facts", run.run_id) == 2
    assert duck_count(cluster.lake, "runs", run.run_id) == 1


def test_agent_killed_mid_task(cluster, pb):
    api = _start(cluster, pb, agents=("a1",))
    cluster.worker("w1")
    run = api.submit("sleep", {"seconds": "1"}, names=["a1"])
    api.wait(run.run_id, pred=lambda d: d.tasks[0].state == pb["common"].TASK_STATE_RUNNING)
    cluster.kill9("a1")
    time.sleep(0.3)
    cluster.agent("a1")
    d = api.wait(run.run_id, timeout=60)
    assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED, d
    assert d.tasks[0].attempt == 2
    assert duck_count(cluster.lake, "runs", run.run_id) == 1
    assert duck_count(cluster.lake, "raw_files", run.run_id) == 2


FORKER = """
[[benchmark]]
name = "forker"
kind = "noop"
description = "a benchmark whose processes outlive their parent: sh and two sleeps"
command = ["sh", "-c", "sleep 300 & sleep 300 & wait"]
timeout_s = 600
"""


def _marked(work_dir):
    """(pid, out_dir) of the processes carrying the agent's work-directory mark."""
    mark = f"BENCHLAKE_AGENT_WORK={work_dir}".encode()
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in env:
            out = [e for e in env if e.startswith(b"BENCHLAKE_OUT_DIR=")]
            found.append((int(p.name), out[0].decode() if out else ""))
    return found


def test_benchmark_processes_die_with_their_agent(cluster, pb):
    """kill -9 of an agent: its task's first process dies with it (parent-death
    signal), and the restarted agent kills what is left of the task (the
    grandchildren) and removes the dead attempt's directory."""
    with open(cluster.tmp / "catalog.toml", "a") as f:
        f.write(FORKER)
    api = _start(cluster, pb, agents=("a1",))
    cluster.worker("w1")
    # One attempt: the restarted agent must not start the task again.
    c = pb["common"]
    spec = c.BenchmarkSpec(benchmark="forker", nodes=c.NodeSelector(names=["a1"]), max_attempts=1)
    run = api.runs.SubmitRun(pb["runs"].SubmitRunRequest(spec=spec), metadata=api.md, timeout=10)
    api.wait(run.run_id, pred=lambda d: d.tasks[0].state == pb["common"].TASK_STATE_RUNNING)
    work = (cluster.tmp / "work" / "a1").resolve()
    deadline = time.time() + 10
    while time.time() < deadline and len(_marked(work)) < 3:
        time.sleep(0.05)
    before = _marked(work)
    assert len(before) >= 3, before  # sh and both sleeps
    run_dir = work / run.run_id
    assert run_dir.is_dir()
    cluster.kill9("a1")
    time.sleep(0.5)
    left = _marked(work)
    # The shell (the task's first process) went with the agent.
    assert len(left) < len(before), (before, left)
    cluster.agent("a1")
    deadline = time.time() + 10
    while time.time() < deadline and (_marked(work) or run_dir.exists()):
        time.sleep(0.1)
    assert _marked(work) == [], _marked(work)
    assert not run_dir.exists(), list(run_dir.rglob("*"))
    d = api.wait(run.run_id, timeout=60)
    assert d.run.state == pb["common"].RUN_STATE_FAILED, d
    assert "restarted" in d.tasks[0].error, d
    for pid, _ in _marked(work):
        os.kill(pid, signal.SIGKILL)
