"""ReplayService.TriggerReplay from a Python gRPC client: an uploaded Dimemas
trace swept over latency x bandwidth, one worker job per point; the predictions
that land in `replays` equal Dimemas 5.5's for the configurations the grid
contains."""
import json
import subprocess
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
    # Models come from the replay registry: an unknown one is refused listing the
    # known ones; a Bandela replay needs its input and knows its parameters.
    with pytest.raises(grpc.RpcError) as e:
        stub.TriggerReplay(rp.TriggerReplayRequest(trace=req.trace, model="booksim"), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'booksim' is not a model (dimemas, bandela)" in e.value.details()
    prefix = rp.TraceRef(raw_key=f"raw/{r.run_id}/")
    with pytest.raises(grpc.RpcError) as e:
        stub.TriggerReplay(rp.TriggerReplayRequest(trace=prefix, model="bandela"), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "params.input: the Bandela model needs the replaympi input text" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.TriggerReplay(rp.TriggerReplayRequest(trace=prefix, model="bandela",
                                                   params={"input": "NUMBER_OF_HOSTS 1\n"},
                                                   sweep=[rp.SweepAxis(param="latency", values=["1"])]),
                           timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'latency'" in e.value.details() and "input, topology, timeline" in e.value.details()


def test_bandela_offline_cli_prints_replaympi_summary_and_writes_outputs(tmp_path):
    """`benchlake replay bandela DIR --input F --out OUT`: replaympi's per-CPU summary on
    stdout, the tables and the side outputs (column_data, transfers, timelines) in OUT.
    The case is hand-computed in replay/tests/replay_bandela.rs (buffered send)."""
    from conftest import BIN
    t = tmp_path / "trace"
    t.mkdir()
    (t / "bandela.0.txt").write_text("H 0 2 0\nC 0.001\nK 0 MPI_Send isend 1 1 5 1000 1 0\nK 1 MPI_Send wait 1\n")
    (t / "bandela.1.txt").write_text("H 1 2 0\nC 0.002\nK 0 MPI_Recv irecv 0 1 5 1000 1 0\nK 1 MPI_Recv wait 1\n")
    inp = tmp_path / "input"
    inp.write_text("NUMBER_OF_HOSTS 1\nHOST_TYPE 0\nmpi_buffer_max 2048\nINTRA_HOST_BANDWIDTH_PEAK 800.00\n"
                   "INTRA_HOST_LATENCY 2.0\nINTRA_HOST_BARRIER_LATENCY 10.00\nBLOCK_HOST 0\n"
                   "NUMBER_OF_PROCS 2\nMPI_RANKS 0-1\nADAPTERS 0\n")
    out = tmp_path / "out"
    r = subprocess.run([BIN, "replay", "bandela", str(t), "--input", str(inp), "--out", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # Receiver: 0.002 s computation + 2 latencies (4 µs) + 1000 B at 800 MB/s (1.25 µs).
    assert " CPU 1 Total  Time              :     0.002005 s" in r.stdout, r.stdout
    side = out / "replay-outputs"
    assert "1,MPI_Recv,0.000000000,0.000004000,0.000001250,0.000000000" in (side / "column_data.csv").read_text()
    events = json.loads((side / "timeline.json").read_text())
    assert events, "empty Chrome trace"
    assert (side / "timeline.prv").read_text().startswith("#Paraver")
    rows = duckdb.sql(f"SELECT rank, round(total_s, 9) FROM read_parquet('{out}/tables/replay_ranks/**/*.parquet') "
                      "ORDER BY rank").fetchall()
    assert rows == [(0, 0.001004625), (1, 0.00200525)], rows
