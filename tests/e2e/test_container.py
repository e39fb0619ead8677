"""deploy/container: the image made by build.sh (the binary and the libraries
it needs on an empty base, no registry) runs the coordinator, a worker and an
agent as three containers with host networking, and a run submitted from the
host lands in the lake they share."""
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, Api, duck_count, free_port

ROOT = Path(__file__).resolve().parents[2]
UID = 10001  # the image's user


@pytest.fixture
def docker(tmp_path):
    """A Docker engine of its own (socket, data and exec root under a temp
    directory), stopped afterwards with everything it ran."""
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        # a failure under CI=true (conftest.py's pytest_runtest_makereport)
        pytest.skip("needs dockerd (docker.io; scripts/test.sh installs it) and root")
    base = Path(f"/tmp/bl-docker-{os.getpid()}-{int(time.time() * 1000) % 100000}")
    base.mkdir()
    sock = base / "docker.sock"
    log = open(tmp_path / "dockerd.log", "wb")
    p = subprocess.Popen([dockerd, "--iptables=false", "--ip6tables=false", "--bridge=none",
                          f"--data-root={base / 'data'}", f"--exec-root={base / 'exec'}",
                          f"--pidfile={base / 'docker.pid'}", "-H", f"unix://{sock}"],
                         stdout=log, stderr=log, start_new_session=True)
    env = dict(os.environ, DOCKER_HOST=f"unix://{sock}")
    try:
        deadline = time.time() + 60
        while subprocess.run(["docker", "info"], env=env, capture_output=True).returncode != 0:
            assert p.poll() is None and time.time() < deadline, (tmp_path / "dockerd.log").read_text()
            time.sleep(0.3)
        yield env
    finally:
        ids = subprocess.run(["docker", "ps", "-aq"], env=env, capture_output=True, text=True).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], env=env, capture_output=True, timeout=60)
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        log.close()
        # dockerd leaves its network namespace mounted under the exec root.
        subprocess.run(["umount", str(base / "exec" / "netns" / "default")], capture_output=True)
        subprocess.run(["umount", "-R", str(base / "data")], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_image_runs_coordinator_worker_and_agent(tmp_path, pb, docker):
    tag = "benchlake:e2e"
    r = subprocess.run(["bash", str(ROOT / "deploy" / "container" / "build.sh"), "--from", str(Path(BIN).parent),
                        "--tag", tag], env=docker, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    size = int(subprocess.run(["docker", "image", "inspect", tag, "--format", "{{.Size}}"], env=docker,
                              capture_output=True, text=True, check=True).stdout)
    print(f"image {tag}: {size / 1e6:.0f} MB")
    # The shared directory: state, lake, work; owned by the image's user.
    data = tmp_path / "shared"
    for d in ("", "lake", "work", "scratch"):
        (data / d).mkdir(exist_ok=True)
        os.chown(data / d, UID, UID)
    port = free_port()
    addr = f"127.0.0.1:{port}"
    run = ["docker", "run", "-d", "--network", "host", "-v", f"{data}:/var/lib/benchlake"]
    names = {}
    names["coordinator"] = subprocess.run(
        run + ["--name", "bl-coord", tag, "coordinator", "--listen", addr,
               "--state", "/var/lib/benchlake/state.db", "--lake", "/var/lib/benchlake/lake"],
        env=docker, capture_output=True, text=True, check=True).stdout.strip()
    names["worker"] = subprocess.run(
        run + ["--name", "bl-worker", tag, "worker", "--coordinator", addr, "--name", "ctr-worker",
               "--lake", "/var/lib/benchlake/lake", "--scratch", "/var/lib/benchlake/scratch"],
        env=docker, capture_output=True, text=True, check=True).stdout.strip()
    names["agent"] = subprocess.run(
        run + ["--name", "bl-agent", tag, "agent", "--coordinator", addr, "--name", "ctr-agent",
               "--work-dir", "/var/lib/benchlake/work"],
        env=docker, capture_output=True, text=True, check=True).stdout.strip()

    def logs():
        return "\n".join(
            f"--- {n}\n" + subprocess.run(["docker", "logs", cid], env=docker, capture_output=True,
                                          text=True).stderr[-3000:]
            for n, cid in names.items())

    api = Api(pb, addr)
    try:
        api.wait_agents(1, timeout=60)
    except Exception:
        raise AssertionError(logs())
    h = api.submit("hostinfo")
    d = api.wait(h.run_id, timeout=120)
    assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED, (d, logs())
    # The rows landed in the lake the containers share, read on the host.
    assert duck_count(data / "lake", "node_facts", h.run_id) == 1
    assert duck_count(data / "lake", "runs", h.run_id) == 1
    # The host's CLI sees the containers' agent.
    r = subprocess.run([BIN, "agents", "list", "--coordinator", addr], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "ctr-agent" in r.stdout, r.stdout + r.stderr
    # The processes run as the image's unprivileged user: what they wrote is its.
    assert (data / "state.db").stat().st_uid == UID
    parts = list((data / "lake" / "tables" / "node_facts").rglob("*.parquet"))
    assert parts and all(p.stat().st_uid == UID for p in parts), parts
