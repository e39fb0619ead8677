//! A `traced` run end to end through the in-process cluster: the test builds a
//! small MPI program with `mpicc`, submits the built-in `traced` benchmark
//! through the gRPC API (real Open MPI `mpirun --oversubscribe`, the tracer
//! preloaded by the agent), and waits for the run and every follow-up: the
//! ingests (bandela, dimemas, counts), the counts pattern analysis, the default
//! replay (Bandela model) and the `trace_compare` job. It then checks the
//! uploaded outputs, the program's counts in the count tables and patterns,
//! the replay rows, and that every `trace_comparison` row equals the values
//! recomputed here from the uploaded `bandela_stats` file and the replay rows.
//! Where mpicc/mpirun or the tracer library are missing the test is
//! `common::unavailable`: it fails under `CI=true` and is skipped (logged)
//! elsewhere.
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use arrow::array::{Array, Float64Array, Int32Array, Int64Array, ListArray, RecordBatch};
use arrow::array::{AsArray, StringArray};
use benchlake_coordinator::Tokens;
use benchlake_proto::v1 as pb;
use common::*;

const NP: usize = 4;
const ITERS: i64 = 3;

/// The program: per iteration a ring exchange (Isend of 800·(r+1) bytes to
/// r+1, Irecv from r−1, Waitall), a 4096-byte Bcast from rank 0, an
/// Alltoallv of c(r,p) = (r+1)(p+1) ints (0 to itself) and a Barrier, with
/// some computation in between.
const PROGRAM: &str = r#"
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
static volatile double sink;
static void work(int n) { double x = 0; for (int i = 0; i < n; i++) x += i * 0.5; sink = x; }
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    char *sbuf = calloc(8000, 1), *rbuf = calloc(8000, 1), bbuf[4096];
    int *a2s = calloc(4096, sizeof(int)), *a2r = calloc(4096, sizeof(int));
    int sc[64], sd[64], rc[64], rd[64];
    for (int p = 0, so = 0, ro = 0; p < n; p++) {
        sc[p] = p == r ? 0 : (r + 1) * (p + 1); sd[p] = so; so += sc[p];
        rc[p] = p == r ? 0 : (p + 1) * (r + 1); rd[p] = ro; ro += rc[p];
    }
    for (int it = 0; it < 3; it++) {
        work(200000);
        MPI_Request q[2];
        int right = (r + 1) % n, left = (r + n - 1) % n;
        MPI_Irecv(rbuf, 8000, MPI_CHAR, left, 7, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(sbuf, 800 * (r + 1), MPI_CHAR, right, 7, MPI_COMM_WORLD, &q[1]);
        MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        work(100000);
        memset(bbuf, it, sizeof bbuf);
        MPI_Bcast(bbuf, 4096, MPI_CHAR, 0, MPI_COMM_WORLD);
        work(100000);
        MPI_Alltoallv(a2s, sc, sd, MPI_INT, a2r, rc, rd, MPI_INT, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    free(sbuf); free(rbuf); free(a2s); free(a2r);
    MPI_Finalize();
    return 0;
}
"#;

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Every batch of `table` for `run_id`.
fn batches(lake: &Path, table: &str, run_id: &str) -> Vec<RecordBatch> {
    table_batches(lake, table, Some(run_id))
}

fn f64s(b: &RecordBatch, c: &str) -> Float64Array {
    b.column_by_name(c)
        .unwrap()
        .as_any()
        .downcast_ref::<Float64Array>()
        .unwrap()
        .clone()
}
fn i64s(b: &RecordBatch, c: &str) -> Int64Array {
    b.column_by_name(c)
        .unwrap()
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .clone()
}
fn i32s(b: &RecordBatch, c: &str) -> Int32Array {
    b.column_by_name(c)
        .unwrap()
        .as_any()
        .downcast_ref::<Int32Array>()
        .unwrap()
        .clone()
}
fn strs(b: &RecordBatch, c: &str) -> StringArray {
    b.column_by_name(c)
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap()
        .clone()
}

fn jobs_of<'a>(d: &'a pb::RunDetail, kind: &str) -> Vec<&'a pb::Job> {
    d.jobs.iter().filter(|j| j.kind == kind).collect()
}

/// (rank, function) → (calls, measured comm, modelled comm, measured comp, modelled comp).
type Rows = BTreeMap<(i32, String), (i64, f64, f64, f64, Option<f64>)>;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn traced_run_is_ingested_analysed_replayed_and_compared() {
    const TEST: &str = "traced_run_is_ingested_analysed_replayed_and_compared";
    if !have("mpicc") || !have("mpirun") {
        unavailable(
            TEST,
            "mpicc/mpirun not found (install openmpi-bin and libopenmpi-dev)",
        );
        return;
    }
    let Some(lib) = benchlake_tracer::library_path() else {
        unavailable(
            TEST,
            "the tracer library was not built (mpicc missing at build time)",
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("ring.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe: PathBuf = tmp.path().join("ring");
    let out = Command::new("mpicc")
        .arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut c = Cluster::start(Tokens::default()).await;
    c.add_agent_with("a1", |cfg| {
        cfg.catalog = benchlake_agent::builtin_catalog().unwrap();
        cfg.apps_dir = exe.parent().map(|p| p.to_path_buf());
        cfg.address = "127.0.0.1".into();
        cfg.mpirun = ["mpirun", "--oversubscribe", "--allow-run-as-root"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    })
    .await;
    c.add_worker("w1", None);
    c.add_worker("w2", None);
    let np = NP.to_string();
    let params = [
        ("np", np.as_str()),
        ("app", exe.to_str().unwrap()),
        // Not the defaults, to see the run's figures reach the replay.
        ("replay_latency_us", "3"),
        ("replay_bandwidth_mbs", "500"),
    ];
    let run = c
        .submit_spec(pb::BenchmarkSpec {
            launcher: pb::Launcher::Mpirun as i32,
            max_attempts: 1,
            ..bench_spec("traced", &params)
        })
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 300).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    for j in &d.jobs {
        assert_eq!(
            pb::JobState::try_from(j.state).unwrap(),
            pb::JobState::Done,
            "{j:?}"
        );
    }
    // Every output uploaded with its format (the library found by the agent).
    assert!(lib.is_file());
    assert_eq!(d.tasks.len(), 1);
    let t = &d.tasks[0];
    let has = |fmt: &str, name: &str| {
        t.outputs
            .iter()
            .any(|o| o.format == fmt && o.key.ends_with(&format!("/{name}")))
    };
    for r in 0..NP {
        assert!(has("bandela", &format!("bandela.{r}.txt")), "{t:#?}");
    }
    assert!(has("dimemas", "trace.dim"), "{t:#?}");
    assert!(has("tracer_stats", "bandela_stats"), "{t:#?}");
    assert!(has("counts", "send-counters.job0.rank0.txt"), "{t:#?}");
    assert!(has("counts", "recv-counters.job0.rank0.txt"), "{t:#?}");
    // The follow-ups: three ingests, the counts analysis, the replay, the comparison.
    let mut formats: Vec<String> = jobs_of(&d, "ingest")
        .iter()
        .map(|j| {
            serde_json::from_str::<serde_json::Value>(&j.spec_json).unwrap()["format"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    formats.sort();
    assert_eq!(formats, ["bandela", "counts", "dimemas"]);
    assert_eq!(jobs_of(&d, "analyze_plan").len(), 1);
    assert_eq!(jobs_of(&d, "analyze_merge").len(), 1);
    // The default replays (Bandela and Dimemas) and their comparisons.
    assert_eq!(jobs_of(&d, "replay").len(), 2);
    assert_eq!(jobs_of(&d, "trace_compare").len(), 2);

    let lake = c.lake_dir();
    let id = run.run_id.as_str();
    // Traces ingested: every rank's records.
    let recs = batches(&lake, "mpi_trace_records", id);
    assert!(recs.iter().map(|b| b.num_rows()).sum::<usize>() > 0);

    // The rank map: every rank on this machine, its node the agent's
    // (no SLURMD_NODENAME under mpirun), read from the uploaded file.
    assert!(has("tracer_ranks", "bandela_ranks"), "{t:#?}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let mut placed = Vec::new();
    for b in batches(&lake, "mpi_trace_ranks", id) {
        let (rk, h, n, src) = (
            i32s(&b, "rank"),
            strs(&b, "hostname"),
            strs(&b, "node"),
            strs(&b, "source"),
        );
        for i in 0..b.num_rows() {
            assert!(src.value(i).ends_with("/bandela_ranks"), "{}", src.value(i));
            placed.push((rk.value(i), h.value(i).to_string(), n.value(i).to_string()));
        }
    }
    placed.sort();
    let want: Vec<(i32, String, String)> = (0..NP as i32)
        .map(|r| (r, host.clone(), "a1".to_string()))
        .collect();
    // One node identity: the host name is kept as a fact, the node is the
    // agent's (BENCHLAKE_NODE), as everywhere else.
    assert_eq!(placed, want, "mpi_trace_ranks");
    // One node: no rank is compared with another node's, no node_health rows.
    assert!(batches(&lake, "node_health", id).is_empty());

    // The count files hold the program's matrix, 3 identical calls.
    let calls = batches(&lake, "alltoallv_calls", id);
    let mut n_calls = 0;
    for b in &calls {
        let (cs, ss) = (i64s(b, "comm_size"), i64s(b, "send_datatype_size"));
        for i in 0..b.num_rows() {
            assert_eq!(cs.value(i), NP as i64);
            assert_eq!(ss.value(i), 4);
            n_calls += 1;
        }
    }
    assert_eq!(n_calls, ITERS);
    let mut send_rows: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for b in batches(&lake, "alltoallv_count_rows", id) {
        let dir = strs(&b, "direction");
        let ranks = b.column_by_name("ranks").unwrap().as_list::<i32>().clone();
        let counts: ListArray = b.column_by_name("counts").unwrap().as_list::<i32>().clone();
        for i in 0..b.num_rows() {
            if dir.value(i) != "send" {
                continue;
            }
            let rk = ranks.value(i);
            let rk = rk.as_any().downcast_ref::<Int32Array>().unwrap();
            let cnt = counts.value(i);
            let cnt = cnt.as_any().downcast_ref::<Int64Array>().unwrap();
            for k in 0..rk.len() {
                send_rows.insert(rk.value(k), cnt.values().to_vec());
            }
        }
    }
    for r in 0..NP as i32 {
        let want: Vec<i64> = (0..NP as i64)
            .map(|p| {
                if p == r as i64 {
                    0
                } else {
                    (r as i64 + 1) * (p + 1)
                }
            })
            .collect();
        assert_eq!(send_rows.get(&r), Some(&want), "send counts of rank {r}");
    }
    // The pattern analysis: 4 ranks send to (receive from) 3 others, in 3 calls.
    let mut patterns = Vec::new();
    for b in batches(&lake, "alltoallv_patterns", id) {
        let (dir, nr, np_, nc) = (
            strs(&b, "direction"),
            i64s(&b, "num_ranks"),
            i64s(&b, "num_peers"),
            i64s(&b, "num_calls"),
        );
        for i in 0..b.num_rows() {
            patterns.push((
                dir.value(i).to_string(),
                nr.value(i),
                np_.value(i),
                nc.value(i),
            ));
        }
    }
    patterns.sort();
    assert_eq!(
        patterns,
        [
            ("recv".to_string(), NP as i64, NP as i64 - 1, ITERS),
            ("send".to_string(), NP as i64, NP as i64 - 1, ITERS),
        ]
    );

    // The default replay: Bandela, with the run's latency and bandwidth.
    let replays = batches(&lake, "replays", id);
    assert_eq!(replays.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
    let rb = replays
        .iter()
        .find(|b| strs(b, "model").value(0) == "bandela")
        .unwrap();
    let dim = replays
        .iter()
        .find(|b| strs(b, "model").value(0) == "dimemas")
        .expect("the default Dimemas replay");
    let dim_id = strs(dim, "replay_id").value(0).to_string();
    assert!(f64s(dim, "predicted_time_s").value(0) > 0.0);
    // Ranks beyond the agent's cores: bursts slowed by cores / ranks.
    let cores = benchlake_agent::host::cores() as usize;
    let dp: serde_json::Value = serde_json::from_str(strs(dim, "params").value(0)).unwrap();
    let want = if NP > cores {
        cores as f64 / NP as f64
    } else {
        1.0
    };
    assert_eq!(dp["cpu_ratio"].as_f64(), Some(want), "{dp}");
    // No calibration in the lake: both say so in their params.
    for b in [rb, dim] {
        let p: serde_json::Value = serde_json::from_str(strs(b, "params").value(0)).unwrap();
        assert!(p["calibration"]["id"].is_null(), "{p}");
        assert!(
            p["calibration"]["note"]
                .as_str()
                .unwrap()
                .contains("no fitted calibration"),
            "{p}"
        );
    }
    let replay_id = strs(rb, "replay_id").value(0).to_string();
    assert!(f64s(rb, "predicted_time_s").value(0) > 0.0);
    let input_key = format!(
        "_work/{id}/traced/{}/replaympi.input",
        replay_id.trim_end_matches("-default")
    );
    let input = std::fs::read_to_string(lake.join(&input_key)).unwrap();
    assert!(input.contains("INTRA_HOST_LATENCY 3\n"), "{input}");
    // Every rank ran on this machine: one host holds them all.
    assert!(
        input.contains("NUMBER_OF_HOSTS 1\nHOST_TYPE 0\n"),
        "{input}"
    );
    assert!(input.contains("MPI_RANKS 0-3\n"), "{input}");
    assert!(input.contains("INTRA_HOST_BANDWIDTH_PEAK 500\n"), "{input}");
    // The Bandela default replay slows the bursts by the same factor.
    if NP > cores {
        assert!(input.contains(&format!("cpu_boost {want}\n")), "{input}");
    } else {
        assert!(!input.contains("cpu_boost"), "{input}");
    }

    // Modelled figures, read from the replay rows.
    let mut func: BTreeMap<(i32, String), f64> = BTreeMap::new();
    for b in batches(&lake, "replay_functions", id) {
        let (rid, rk, f) = (
            strs(&b, "replay_id"),
            i32s(&b, "rank"),
            strs(&b, "function"),
        );
        let (w, l, s, g) = (
            f64s(&b, "wait_s"),
            f64s(&b, "latency_s"),
            f64s(&b, "small_transfer_s"),
            f64s(&b, "big_transfer_s"),
        );
        for i in 0..b.num_rows() {
            if rid.value(i) != replay_id {
                assert_eq!(rid.value(i), dim_id);
                continue;
            }
            *func
                .entry((rk.value(i), f.value(i).to_string()))
                .or_default() += w.value(i) + l.value(i) + s.value(i) + g.value(i);
        }
    }
    let mut ranks: BTreeMap<i32, (f64, f64)> = BTreeMap::new();
    for b in batches(&lake, "replay_ranks", id) {
        let (rid, rk, comm, comp) = (
            strs(&b, "replay_id"),
            i32s(&b, "rank"),
            f64s(&b, "communication_s"),
            f64s(&b, "computation_s"),
        );
        for i in (0..b.num_rows()).filter(|&i| rid.value(i) == replay_id) {
            ranks.insert(rk.value(i), (comm.value(i), comp.value(i)));
        }
    }
    assert_eq!(ranks.len(), NP);
    // The model moves exactly the traced bytes (the statistics' receive matrix).
    let stats_key = t
        .outputs
        .iter()
        .find(|o| o.format == "tracer_stats")
        .unwrap()
        .key
        .clone();
    let stats = benchlake_tracer::stats::read(&lake.join(&stats_key)).unwrap();
    assert_eq!(stats.ranks, NP);
    assert_eq!(stats.latency_us, 3.0, "the run's figures reach the tracer");
    assert_eq!(stats.bandwidth_mbps, 500.0);
    let mut moved = vec![vec![0u64; NP]; NP];
    for b in batches(&lake, "replay_transfers", id) {
        let (rid, rv, sd, by) = (
            strs(&b, "replay_id"),
            i32s(&b, "receiver"),
            i32s(&b, "sender"),
            i64s(&b, "bytes"),
        );
        for i in (0..b.num_rows()).filter(|&i| rid.value(i) == replay_id) {
            moved[rv.value(i) as usize][sd.value(i) as usize] += by.value(i) as u64;
        }
    }
    assert_eq!(moved, stats.recv);

    // The comparison: one row per (rank, routine called or charged) plus `all`.
    let mut want: Rows = BTreeMap::new();
    for r in 0..NP {
        let rank = r as i32;
        let mut total = 0i64;
        for (i, name) in stats.routines.iter().enumerate() {
            let rs = &stats.routine[r][i];
            total += rs.calls as i64;
            let m = func.get(&(rank, name.clone())).copied();
            if rs.calls == 0 && m.is_none() {
                continue;
            }
            want.insert(
                (rank, name.clone()),
                (
                    rs.calls as i64,
                    rs.comm_s,
                    m.unwrap_or(0.0),
                    rs.comp_s,
                    None,
                ),
            );
        }
        for ((fr, name), v) in &func {
            if *fr == rank && !want.contains_key(&(rank, name.clone())) {
                want.insert((rank, name.clone()), (0, 0.0, *v, 0.0, None));
            }
        }
        let p = &stats.per_rank[r];
        let (comm, comp) = ranks[&rank];
        want.insert(
            (rank, "all".into()),
            (
                total,
                p.wait_s + p.latency_s + p.transfer_s,
                comm,
                p.comput_s,
                Some(comp),
            ),
        );
    }
    // The program's own call counts, per rank.
    for r in 0..NP as i32 {
        for f in [
            "MPI_Isend",
            "MPI_Irecv",
            "MPI_Waitall",
            "MPI_Bcast",
            "MPI_Alltoallv",
            "MPI_Barrier",
        ] {
            assert_eq!(want[&(r, f.to_string())].0, ITERS, "rank {r} {f}");
        }
        // Everything the program does is modelled as communication somewhere.
        assert!(want[&(r, "all".to_string())].2 > 0.0, "rank {r}");
    }
    let mut got: Rows = BTreeMap::new();
    let mut n = 0;
    // The Dimemas replay's comparison: an `all` row per rank with both totals.
    let mut dim_all = 0;
    for b in batches(&lake, "trace_comparison", id) {
        let (rid, model, f, pt) = (
            strs(&b, "replay_id"),
            strs(&b, "model"),
            strs(&b, "function"),
            f64s(&b, "modelled_total_s"),
        );
        for i in (0..b.num_rows()).filter(|&i| model.value(i) == "dimemas") {
            assert_eq!(rid.value(i), dim_id);
            if f.value(i) == "all" {
                assert!(pt.value(i) > 0.0);
                dim_all += 1;
            }
        }
    }
    assert_eq!(dim_all, NP, "one Dimemas `all` row per rank");
    for b in batches(&lake, "trace_comparison", id) {
        let (rid, model, rk, f, calls) = (
            strs(&b, "replay_id"),
            strs(&b, "model"),
            i32s(&b, "rank"),
            strs(&b, "function"),
            i64s(&b, "calls"),
        );
        let (mc, dc, diff, ratio, mp, dp, src) = (
            f64s(&b, "measured_comm_s"),
            f64s(&b, "modelled_comm_s"),
            f64s(&b, "diff_s"),
            f64s(&b, "ratio"),
            f64s(&b, "measured_comp_s"),
            f64s(&b, "modelled_comp_s"),
            strs(&b, "stats_source"),
        );
        let (mt, pt) = (f64s(&b, "measured_total_s"), f64s(&b, "modelled_total_s"));
        for i in (0..b.num_rows()).filter(|&i| model.value(i) == "bandela") {
            n += 1;
            // The whole-run figures: on `all` rows only, measured = the
            // rank's computation + communication, predicted ≥ its modelled
            // communication.
            if f.value(i) == "all" {
                assert!(close(mt.value(i), mc.value(i) + mp.value(i)), "row {i}");
                assert!(pt.value(i) >= dc.value(i) && pt.value(i) > 0.0, "row {i}");
            } else {
                assert!(mt.is_null(i) && pt.is_null(i), "row {i}");
            }
            assert_eq!(rid.value(i), replay_id);
            assert_eq!(model.value(i), "bandela");
            assert_eq!(src.value(i), stats_key);
            assert!(close(diff.value(i), dc.value(i) - mc.value(i)));
            if mc.value(i) > 0.0 {
                assert!(close(ratio.value(i), dc.value(i) / mc.value(i)));
            } else {
                assert!(ratio.is_null(i));
            }
            got.insert(
                (rk.value(i), f.value(i).to_string()),
                (
                    calls.value(i),
                    mc.value(i),
                    dc.value(i),
                    mp.value(i),
                    (!dp.is_null(i)).then(|| dp.value(i)),
                ),
            );
        }
    }
    for ((r, f), g) in &got {
        eprintln!(
            "trace_comparison rank {r} {f:<14} calls {:>2} measured {:>10.3} us modelled {:>10.3} us",
            g.0,
            g.1 * 1e6,
            g.2 * 1e6
        );
    }
    assert_eq!(n, want.len(), "one row per key");
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, w) in &want {
        let g = &got[k];
        assert_eq!(g.0, w.0, "{k:?} calls");
        assert!(close(g.1, w.1), "{k:?} measured {} vs {}", g.1, w.1);
        assert!(close(g.2, w.2), "{k:?} modelled {} vs {}", g.2, w.2);
        assert!(close(g.3, w.3), "{k:?} computation {} vs {}", g.3, w.3);
        match (g.4, w.4) {
            (Some(a), Some(b)) => assert!(close(a, b), "{k:?}"),
            (a, b) => assert_eq!(a, b, "{k:?}"),
        }
    }

    // `replay validate` judges the run from those rows: the largest rank's
    // measured and predicted times, and their relative difference.
    let (mut meas, mut pred) = (0f64, 0f64);
    for b in batches(&lake, "trace_comparison", id) {
        let (f, m, mt, pt) = (
            strs(&b, "function"),
            strs(&b, "model"),
            f64s(&b, "measured_total_s"),
            f64s(&b, "modelled_total_s"),
        );
        for i in (0..b.num_rows()).filter(|&i| f.value(i) == "all" && m.value(i) == "bandela") {
            meas = meas.max(mt.value(i));
            pred = pred.max(pt.value(i));
        }
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_benchlake"))
        .args(["replay", "validate", "--json", "--lake"])
        .arg(&lake)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // One line per model: Bandela, then Dimemas.
    assert_eq!(v["runs"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["runs"][1]["model"], "dimemas", "{v}");
    assert_eq!(v["runs"][1]["calibration"], "-", "{v}");
    let r = &v["runs"][0];
    assert_eq!(r["run_id"], id, "{v}");
    assert_eq!(r["model"], "bandela");
    assert_eq!(r["ranks"], NP);
    assert!(close(r["measured_s"].as_f64().unwrap(), meas), "{v}");
    assert!(close(r["predicted_s"].as_f64().unwrap(), pred), "{v}");
    let err = (pred - meas) / meas * 100.0;
    assert!(close(r["error_pct"].as_f64().unwrap(), err), "{v}");
    let dim_err = v["runs"][1]["error_pct"].as_f64().unwrap().abs();
    let mid = (err.abs() + dim_err) / 2.0;
    assert!(
        close(v["median_abs_error_pct"].as_f64().unwrap(), mid),
        "{v}"
    );
    eprintln!("replay validate: measured {meas:.6} s, predicted {pred:.6} s, error {err:.1} %");
}
