"""ReplayService.TriggerReplay from a Python gRPC client: an uploaded Dimemas
trace swept over latency x bandwidth, one worker job per point; the predictions
that land in `replays` equal Dimemas 5.5's for the configurations the grid
contains."""
import json
from pathlib import Path

import duckdb

from conftest import Api

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "replay" / "dimemas"


def test_sweep_lands_one_replay_per_point(cluster, pb):
    cluster.coordinator()
    cluster.worker("w1")
    cluster.worker("w2")
    api = Api(pb, cluster.addr)
    rp = pb["replay"]
    stub = pb["replay_grpc"].ReplayServiceStub(api.ch)
    trace = DATA / "traces" / "halo_np4.dim"
    req = rp.TriggerReplayRequest(
        trace=rp.TraceRef(uploaded=rp.UploadedTrace(file_name=trace.name, data=trace.read_bytes())),
        model="dimemas",
        params={"config": (DATA / "configs" / "c1_base.cfg").read_text()},
        sweep=[rp.SweepAxis(param="latency", values=["5e-6", "5e-5"]),
               rp.SweepAxis(param="bandwidth", values=["100", "1000"])],
    )
    r = stub.TriggerReplay(req, timeout=30)
    assert r.points == 4
    d = api.wait(r.run_id, timeout=120)
    assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED, d
    assert sum(1 for j in d.jobs if j.kind == "replay") == 4
    rows = duckdb.sql(
        f"SELECT point, predicted_time_s, records FROM read_parquet('{cluster.lake}/tables/replays/**/*.parquet', "
        f"hive_partitioning=true) WHERE run_id = '{r.run_id}'").fetchall()
    assert len(rows) == 4
    got = {(json.loads(p)["latency"], json.loads(p)["bandwidth"]): t for p, t, _ in rows}
    ref = {x["config"]: x["execution_time_s"] for x in json.loads((DATA / "reference.json").read_text())["results"]
           if x["trace"] == "halo_np4"}
    assert abs(got[("5e-6", "1000")] - ref["c1_base"]) < 2e-9
    assert abs(got[("5e-5", "1000")] - ref["c2_lat50us"]) < 2e-9
    assert abs(got[("5e-6", "100")] - ref["c3_bw100"]) < 2e-9
    # The uploaded trace was ingested too.
    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{cluster.lake}/tables/mpi_trace_records/**/*.parquet', "
                   f"hive_partitioning=true) WHERE run_id = '{r.run_id}'").fetchall()[0][0]
    assert n > 0
    # Bad points are refused before any job exists, naming the parameter.
    import grpc
    import pytest
    bad = rp.TriggerReplayRequest(trace=rp.TraceRef(raw_key=f"raw/{r.run_id}/nope"), model="dimemas")
    with pytest.raises(grpc.RpcError) as e:
        stub.TriggerReplay(bad, timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    req.sweep[0].values[:] = ["fast"]
    with pytest.raises(grpc.RpcError) as e:
        stub.TriggerReplay(req, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "latency" in e.value.details()
