//! Calibrations in the lake, end to end through the in-process cluster
//! (docs/replay.md, "Calibrations in the lake"): an agent named after the
//! synthetic LinkTest hosts (`node0000`) runs a LinkTest benchmark
//! (`probe linktest`: 8 ranks on node0000 and node0001, times that grow with
//! the message size at 10 GB/s between hosts and 40 GB/s within one) at
//! 64 bytes, then at 4 KiB, then at 1 MiB. Each run's `linktest` ingest is
//! followed by a `calibrate` job:
//!
//! - the first (one size) records why nothing was fitted, and the run
//!   succeeds;
//! - the second (two sizes) fits, but the quality gate rejects the fit
//!   (fewer than 3 sizes): stored with its reason, never `latest`;
//! - the third combines its 1 MiB medians with the earlier runs' 64-byte and
//!   4 KiB ones and fits: the `replay_calibrations` rows and the document
//!   equal what `benchlake replay calibrate` fits from the three files, and
//!   the model inputs sit under `calibrations/{run}/`.
//!
//! Then replays name it through gRPC (`TriggerReplay.calibration`): by id and
//! as `latest`, its values land in the replay's params JSON and change the
//! predicted time to exactly what the Dimemas model gives with those
//! parameters; bad names are refused before any job exists. Last (where
//! mpicc and mpirun exist), a traced run on node0000: both default replays
//! (Bandela and Dimemas) use the calibration, and their predicted times are
//! the calibrated ones.
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use arrow::array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use benchlake_coordinator::Tokens;
use benchlake_proto::client::{Auth, channel};
use benchlake_proto::v1 as pb;
use benchlake_replay::calibrations::CalibrationDoc;
use common::*;

fn lt_catalog() -> String {
    format!(
        r#"{}
[[benchmark]]
name = "lt-synth"
kind = "linktest"
command = ["{bin}", "probe", "linktest", "--ranks", "8", "--ranks-per-host", "4", "--seed", "3", "--message-size", "{{message_size}}", "--out", "{{out_dir}}/pingpong_results_bin.sion"]
timeout_s = 120
[[benchmark.param]]
name = "message_size"
type = "int"
default = "1024"
min = 1
max = 1073741824
[[benchmark.output]]
file = "pingpong_results_bin.sion"
format = "linktest"
required = true
"#,
        catalog(&bin()),
        bin = bin()
    )
}

fn strs<'a>(b: &'a RecordBatch, c: &str) -> &'a StringArray {
    b.column_by_name(c)
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap()
}
fn f64s<'a>(b: &'a RecordBatch, c: &str) -> &'a Float64Array {
    b.column_by_name(c)
        .unwrap()
        .as_any()
        .downcast_ref::<Float64Array>()
        .unwrap()
}

fn doc(lake: &Path, run: &str) -> CalibrationDoc {
    let p = lake.join(format!("calibrations/{run}/calibration.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / a.abs().max(b.abs()).max(1e-300)
}

/// (params JSON, predicted time) of every replay of `run`, by replay id.
fn replays(lake: &Path, run: &str) -> BTreeMap<String, (String, serde_json::Value, f64)> {
    let mut out = BTreeMap::new();
    for b in table_batches(lake, "replays", Some(run)) {
        for i in 0..b.num_rows() {
            out.insert(
                strs(&b, "replay_id").value(i).to_string(),
                (
                    strs(&b, "model").value(i).to_string(),
                    serde_json::from_str(strs(&b, "params").value(i)).unwrap(),
                    f64s(&b, "predicted_time_s").value(i),
                ),
            );
        }
    }
    out
}

async fn trigger(
    c: &Cluster,
    trace: &[u8],
    calibration: &str,
) -> Result<pb::TriggerReplayResponse, tonic::Status> {
    let mut rc = pb::replay_service_client::ReplayServiceClient::with_interceptor(
        channel(&c.addr).unwrap(),
        Auth::new(None).unwrap(),
    );
    rc.trigger_replay(pb::TriggerReplayRequest {
        trace: Some(pb::TraceRef {
            source: Some(pb::trace_ref::Source::Uploaded(pb::UploadedTrace {
                file_name: "halo.dim".into(),
                data: trace.to_vec(),
            })),
        }),
        model: "dimemas".into(),
        params: [("tasks_per_node".to_string(), "2".to_string())].into(),
        sweep: Vec::new(),
        calibration: calibration.into(),
    })
    .await
    .map(|r| r.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn linktest_runs_calibrate_and_replays_use_the_calibration() {
    let mut c = Cluster::start(Tokens::default()).await;
    let exe_dir = tempfile::tempdir().unwrap();
    let has_mpi = ["mpicc", "mpirun"].iter().all(|t| {
        Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) && benchlake_tracer::library_path().is_some();
    let cat = benchlake_core::bench::Catalog::from_toml(&lt_catalog()).unwrap();
    let mut builtin = benchlake_agent::builtin_catalog().unwrap();
    builtin.benchmarks.retain(|b| b.name == "traced");
    let dir = exe_dir.path().to_path_buf();
    c.add_agent_with("node0000", move |cfg| {
        cfg.catalog = cat;
        cfg.catalog.benchmarks.extend(builtin.benchmarks);
        cfg.apps_dir = Some(dir);
        cfg.address = "127.0.0.1".into();
        cfg.mpirun = ["mpirun", "--oversubscribe", "--allow-run-as-root"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    })
    .await;
    c.add_worker("w1", None);
    c.add_worker("w2", None);
    let lake = c.lake_dir();

    // 1. One message size: the calibration says why it cannot fit.
    let r1 = c
        .submit("lt-synth", &[("message_size", "64")], 1)
        .await
        .unwrap();
    let d = c.wait_settled(&r1.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let cal_jobs: Vec<_> = d.jobs.iter().filter(|j| j.kind == "calibrate").collect();
    assert_eq!(cal_jobs.len(), 1, "{d:#?}");
    assert_eq!(
        pb::JobState::try_from(cal_jobs[0].state).unwrap(),
        pb::JobState::Done
    );
    let d1 = doc(&lake, &r1.run_id);
    assert!(!d1.fitted, "{d1:?}");
    let why = d1.reason.clone().unwrap();
    assert!(why.contains("size"), "{why}");
    assert_eq!(d1.measurements.len(), 2, "intra and inter at 64 B: {d1:?}");
    assert_eq!(
        d1.nodes.iter().cloned().collect::<Vec<_>>(),
        ["node0000", "node0001"]
    );
    assert_eq!(
        table_rows(&lake, "replay_calibrations", Some(&r1.run_id)),
        0
    );
    assert!(
        !lake
            .join(format!("calibrations/{}/calibration.cfg", r1.run_id))
            .exists()
    );

    // 2. A second size of the same nodes: fitted, but rejected (2 sizes).
    c.advance(1000);
    let r1b = c
        .submit("lt-synth", &[("message_size", "4096")], 1)
        .await
        .unwrap();
    let d = c.wait_settled(&r1b.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let d1b = doc(&lake, &r1b.run_id);
    assert!(d1b.fitted, "{d1b:?}");
    assert!(
        d1b.rejected
            .as_deref()
            .is_some_and(|r| r.contains("2 message sizes")),
        "{d1b:?}"
    );
    let rejected_col: Vec<Option<String>> =
        table_batches(&lake, "replay_calibrations", Some(&r1b.run_id))
            .iter()
            .flat_map(|b| {
                let c = strs(b, "rejected");
                (0..b.num_rows())
                    .map(|i| c.is_valid(i).then(|| c.value(i).to_string()))
                    .collect::<Vec<_>>()
            })
            .collect();
    assert_eq!(rejected_col.len(), 2, "stored: {rejected_col:?}");
    assert!(rejected_col.iter().all(Option::is_some), "{rejected_col:?}");
    let tmp0 = tempfile::tempdir().unwrap();
    let dim0 = tmp0.path().join("halo.dim");
    benchlake_replay::synth::Halo::new(4, 20)
        .write_dim(&dim0)
        .unwrap();
    let e = trigger(&c, &std::fs::read(&dim0).unwrap(), "latest")
        .await
        .unwrap_err();
    assert!(
        e.message().contains("no fitted calibration"),
        "a rejected fit is never latest: {e}"
    );

    // 3. A third size: fitted over 3 sizes with the earlier medians, accepted.
    c.advance(1000);
    let r2 = c
        .submit("lt-synth", &[("message_size", "1048576")], 1)
        .await
        .unwrap();
    let d = c.wait_settled(&r2.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let d2 = doc(&lake, &r2.run_id);
    assert!(d2.fitted, "{d2:?}");
    assert_eq!(d2.rejected, None, "{d2:?}");
    assert_eq!(d2.combined, vec![r1b.run_id.clone(), r1.run_id.clone()]);
    for f in ["calibration.cfg", "calibration.bandela"] {
        let p = lake.join(format!("calibrations/{}/{f}", r2.run_id));
        assert!(p.is_file(), "{}", p.display());
    }
    // What the offline command fits from both raw files.
    let raw = |d: &pb::RunDetail| {
        let k = &d.tasks[0]
            .outputs
            .iter()
            .find(|o| o.format == "linktest")
            .unwrap()
            .key;
        lake.join(k)
    };
    let d1r = c.detail(&r1.run_id).await;
    let d1br = c.detail(&r1b.run_id).await;
    let o = Command::new(bin())
        .args(["replay", "calibrate", "--json"])
        .arg(raw(&d1r))
        .arg(raw(&d1br))
        .arg(raw(&d))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let offline: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let want: BTreeMap<String, String> = serde_json::from_value(offline["params"].clone()).unwrap();
    assert_eq!(d2.params, want, "the worker's fit equals the offline one");
    // The generator's bandwidths: 10 GB/s between hosts, 40 GB/s within one.
    let bw = |k: &str| d2.params[k].parse::<f64>().unwrap() * (1u64 << 20) as f64;
    assert!(rel(bw("bandwidth"), 10e9) < 0.02, "{:?}", d2.params);
    assert!(rel(bw("intra_bandwidth"), 40e9) < 0.02, "{:?}", d2.params);
    // The table rows carry the same fit.
    let mut rows = BTreeMap::new();
    for b in table_batches(&lake, "replay_calibrations", Some(&r2.run_id)) {
        let sizes = b
            .column_by_name("sizes")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        for i in 0..b.num_rows() {
            rows.insert(
                strs(&b, "class").value(i).to_string(),
                (
                    f64s(&b, "latency_s").value(i),
                    f64s(&b, "bandwidth_mb_s").value(i),
                    sizes.value(i),
                    strs(&b, "nodes").value(i).to_string(),
                ),
            );
        }
    }
    assert_eq!(rows.len(), 2, "{rows:?}");
    let inter = &rows["inter"];
    assert_eq!(inter.2, 3, "three sizes");
    assert_eq!(inter.3, "node0000,node0001");
    assert!(rel(inter.1, d2.params["bandwidth"].parse().unwrap()) < 1e-5);
    assert!(rel(inter.0, d2.params["latency"].parse().unwrap()) < 1e-5);

    // 4. Replays name it: by id and as `latest`.
    let tmp = tempfile::tempdir().unwrap();
    let dim = tmp.path().join("halo.dim");
    benchlake_replay::synth::Halo::new(4, 20)
        .write_dim(&dim)
        .unwrap();
    let trace = std::fs::read(&dim).unwrap();
    let plain = trigger(&c, &trace, "").await.unwrap();
    let by_id = trigger(&c, &trace, &r2.run_id).await.unwrap();
    let latest = trigger(&c, &trace, "latest").await.unwrap();
    for bad in ["../x", "01ARZ3NDEKTSV4RRFFQ69G5FA", "nope"] {
        let e = trigger(&c, &trace, bad).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}: {e}");
        assert!(e.message().contains("calibration"), "{e}");
    }
    let e = trigger(&c, &trace, "01ARZ3NDEKTSV4RRFFQ69G5FAV")
        .await
        .unwrap_err();
    assert!(e.message().contains("no calibration"), "{e}");
    let e = trigger(&c, &trace, &r1.run_id).await.unwrap_err();
    assert!(e.message().contains("not fitted"), "{e}");
    let mut predicted = Vec::new();
    for r in [&plain, &by_id, &latest] {
        let d = c.wait_settled(&r.run_id, 120).await;
        assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
        let reps = replays(&lake, &r.run_id);
        assert_eq!(reps.len(), 1);
        let (_, params, t) = reps.into_values().next().unwrap();
        predicted.push((params, t));
    }
    // Offline, the same trace with the calibration's parameters by hand.
    let mut p: BTreeMap<String, String> = d2.params.clone();
    p.insert("tasks_per_node".into(), "2".into());
    let by_hand = benchlake_replay::models::DIMEMAS
        .replay(&dim, &p)
        .unwrap()
        .predicted_time_s;
    let default = benchlake_replay::models::DIMEMAS
        .replay(
            &dim,
            &[("tasks_per_node".to_string(), "2".to_string())].into(),
        )
        .unwrap()
        .predicted_time_s;
    assert!(predicted[0].0.get("calibration").is_none());
    assert_eq!(predicted[0].1, default);
    for (params, t) in &predicted[1..] {
        assert_eq!(params["calibration"]["id"], r2.run_id.as_str(), "{params}");
        assert_eq!(
            params["calibration"]["params"]["latency"],
            d2.params["latency"].as_str()
        );
        assert_eq!(*t, by_hand, "the calibrated prediction");
    }
    assert_ne!(by_hand, default, "the calibration changes the prediction");
    // The CLI names it the same way.
    let o = Command::new(bin())
        .args(["replay", "submit", "--coordinator", &c.addr, "--trace"])
        .arg(&dim)
        .args([
            "-p",
            "tasks_per_node=2",
            "--calibration",
            "latest",
            "--watch",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let cli_run = out
        .split_whitespace()
        .skip_while(|w| *w != "run")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    let d = c.wait_settled(&cli_run, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let (_, params, t) = replays(&lake, &cli_run).into_values().next().unwrap();
    assert_eq!(params["calibration"]["id"], r2.run_id.as_str(), "{params}");
    assert_eq!(t, by_hand);
    let o = Command::new(bin())
        .args(["replay", "submit", "--coordinator", &c.addr, "--trace"])
        .arg(&dim)
        .args(["--calibration", "../../etc"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("neither 'latest' nor a calibration id"),
        "{err}"
    );
    eprintln!("halo 4 ranks: default {default:.6} s, calibrated {by_hand:.6} s");

    // 5. A traced run on node0000: both default replays use the calibration.
    if !has_mpi {
        unavailable(
            &this_test(),
            "traced part: mpicc/mpirun or the tracer library missing",
        );
        return;
    }
    let src = exe_dir.path().join("ring.c");
    std::fs::write(
        &src,
        r#"#include <mpi.h>
static volatile double sink;
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n; char buf[65536];
    MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int it = 0; it < 20; it++) {
        double x = 0; for (int i = 0; i < 20000; i++) x += i * 0.5; sink = x;
        MPI_Sendrecv_replace(buf, sizeof buf, MPI_CHAR, (r + 1) % n, 0, (r + n - 1) % n, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}
"#,
    )
    .unwrap();
    let exe = exe_dir.path().join("ring");
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
    c.advance(1000);
    let run = c
        .submit_spec(pb::BenchmarkSpec {
            launcher: pb::Launcher::Mpirun as i32,
            max_attempts: 1,
            ..bench_spec("traced", &[("np", "2"), ("app", exe.to_str().unwrap())])
        })
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 300).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let reps = replays(&lake, &run.run_id);
    assert_eq!(reps.len(), 2, "{reps:?}");
    let task = &d.tasks[0];
    let prefix = task
        .outputs
        .iter()
        .find(|o| o.format == "bandela")
        .map(|o| o.key.rsplit_once('/').unwrap().0.to_string())
        .unwrap();
    let trace_dir = lake.join(&prefix);
    let cal = d2.calibration();
    for (id, (model, params, t)) in &reps {
        assert_eq!(params["calibration"]["id"], r2.run_id.as_str(), "{params}");
        // The same replay offline, with and without the calibration.
        let (with, without) = if model == "bandela" {
            let input_key = format!(
                "_work/{}/traced/{}/replaympi.input",
                run.run_id,
                id.trim_end_matches("-default")
            );
            let text = std::fs::read_to_string(lake.join(input_key)).unwrap();
            let cal_in = tmp.path().join("cal.input");
            std::fs::write(
                &cal_in,
                benchlake_replay::calibrations::apply_to_bandela_input(&text, &cal),
            )
            .unwrap();
            let plain_in = tmp.path().join("plain.input");
            std::fs::write(&plain_in, &text).unwrap();
            let run_with = |p: &Path| {
                benchlake_replay::models::BANDELA
                    .replay(
                        &trace_dir,
                        &[("input".to_string(), p.display().to_string())].into(),
                    )
                    .unwrap()
                    .predicted_time_s
            };
            assert!(
                params["intra_latency_us"].as_f64().unwrap()
                    == d2.params["intra_latency"].parse::<f64>().unwrap() * 1e6
                    || rel(
                        params["intra_latency_us"].as_f64().unwrap(),
                        d2.params["intra_latency"].parse::<f64>().unwrap() * 1e6
                    ) < 1e-5,
                "{params}"
            );
            (run_with(&cal_in), run_with(&plain_in))
        } else {
            let dim = lake.join(format!("{prefix}/trace.dim"));
            let base: BTreeMap<String, String> = [
                ("nodes".to_string(), "1".to_string()),
                ("tasks_per_node".to_string(), "2".to_string()),
            ]
            .into();
            let mut base = base;
            // Ranks beyond the agent's cores slow the bursts down.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            if cores < 2 {
                base.insert("cpu_ratio".into(), (cores as f64 / 2.0).to_string());
            }
            let mut p = d2.params.clone();
            p.extend(base.clone());
            let mut plain = base;
            plain.insert("intra_latency".into(), "2e-6".into());
            plain.insert("intra_bandwidth".into(), (700e6 / 1048576.0).to_string());
            let m = &benchlake_replay::models::DIMEMAS;
            (
                m.replay(&dim, &p).unwrap().predicted_time_s,
                m.replay(&dim, &plain).unwrap().predicted_time_s,
            )
        };
        eprintln!("traced {model}: calibrated {t:.6} s (uncalibrated {without:.6} s)");
        assert_eq!(*t, with, "{model}: the calibrated prediction");
        assert_ne!(with, without, "{model}: the calibration changes it");
    }
    // Both models' comparisons, and `replay validate` names the calibration.
    let o = Command::new(bin())
        .args(["replay", "validate", "--json", &run.run_id, "--lake"])
        .arg(&lake)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{v}");
    for r in runs {
        assert_eq!(r["calibration"], r2.run_id.as_str(), "{v}");
    }
}
