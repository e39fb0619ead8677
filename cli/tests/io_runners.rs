//! I/O runners and health checks through an in-process cluster (real gRPC,
//! real Open MPI `mpirun`, real Parquet lake):
//! - IOR and mdtest from the shipped catalog `agent/catalogs/ior.toml`, with
//!   stand-in `ior`/`mdtest` programs (real IOR/mdtest cannot be installed
//!   here) that record their argv/environment and, on rank 0, write the real
//!   outputs of `../shared/data/io`; the lake must hold those outputs' values;
//! - a schedule running pio several times: `checks` rows per run against the
//!   rolling median of the schedule's earlier runs and an absolute bound.
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow::array::{Array, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use benchlake_proto::v1 as pb;
use common::*;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/io");

/// Every batch of `table` for `run_id` in a local lake.
fn read_table(lake: &Path, table: &str, run_id: &str) -> Vec<RecordBatch> {
    table_batches(lake, table, Some(run_id))
}

fn strs(b: &RecordBatch, c: &str) -> Vec<Option<String>> {
    let a = b.column_by_name(c).unwrap();
    let a = a.as_any().downcast_ref::<StringArray>().unwrap();
    (0..a.len())
        .map(|i| (!a.is_null(i)).then(|| a.value(i).to_string()))
        .collect()
}
fn f64s(b: &RecordBatch, c: &str) -> Vec<Option<f64>> {
    let a = b.column_by_name(c).unwrap();
    let a = a.as_any().downcast_ref::<Float64Array>().unwrap();
    (0..a.len())
        .map(|i| (!a.is_null(i)).then(|| a.value(i)))
        .collect()
}
fn i64s(b: &RecordBatch, c: &str) -> Vec<Option<i64>> {
    let a = b.column_by_name(c).unwrap();
    let a = a.as_any().downcast_ref::<Int64Array>().unwrap();
    (0..a.len())
        .map(|i| (!a.is_null(i)).then(|| a.value(i)))
        .collect()
}

/// `checks` rows of a run: check → (status, value, reference, message).
type CheckMap = BTreeMap<String, (String, Option<f64>, Option<f64>, String)>;
fn checks(lake: &Path, run_id: &str) -> CheckMap {
    let mut out = BTreeMap::new();
    for b in read_table(lake, "checks", run_id) {
        let (c, s, v, r, m) = (
            strs(&b, "check"),
            strs(&b, "status"),
            f64s(&b, "value"),
            f64s(&b, "reference"),
            strs(&b, "message"),
        );
        for i in 0..b.num_rows() {
            let prev = out.insert(
                c[i].clone().unwrap(),
                (s[i].clone().unwrap(), v[i], r[i], m[i].clone().unwrap()),
            );
            assert!(prev.is_none(), "one row per check: {:?}", c[i]);
        }
    }
    out
}

async fn add_agent_with(c: &mut Cluster, name: &str, catalog: &str, mpirun: Vec<String>) {
    let mut cfg =
        benchlake_agent::AgentConfig::new(&c.addr, c.dir.path().join("work").join(name)).unwrap();
    cfg.name = name.to_string();
    cfg.catalog = benchlake_core::bench::Catalog::from_toml(catalog).unwrap();
    cfg.poll_interval = Duration::from_millis(30);
    cfg.mpirun = mpirun;
    cfg.run_as = Some(benchlake_agent::contain::current_user_name());
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if let Err(e) = benchlake_agent::run(cfg, rx).await {
            eprintln!("agent ended: {e}");
        }
    });
    c.agents.insert(name.to_string(), tx);
    for _ in 0..200 {
        let listed = c
            .cluster()
            .list_agents(pb::ListAgentsRequest {})
            .await
            .map(|r| r.into_inner().agents.iter().any(|a| a.name == name))
            .unwrap_or(false);
        if listed {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("agent {name} did not register");
}

fn spec(bench: &str, params: &[(&str, &str)], launcher: pb::Launcher) -> pb::BenchmarkSpec {
    pb::BenchmarkSpec {
        launcher: launcher as i32,
        ..bench_spec(bench, params)
    }
}

/// Stand-ins that behave like IOR's and mdtest's interfaces: every rank records
/// argv and the `IOR_HINT*` environment; rank 0 writes the real outputs of a
/// reference case where the command line asks for them.
fn stand_ins(dir: &Path, rec: &Path) -> (PathBuf, PathBuf) {
    let ior = dir.join("ior");
    write_script(
        &ior,
        &format!(
            r#"#!/usr/bin/env python3
import json, os, shutil, sys
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
env = {{k: v for k, v in os.environ.items() if k.startswith("IOR_HINT")}}
with open(os.path.join("{rec}", "ior-rank%d.json" % rank), "w") as f:
    json.dump({{"argv": sys.argv[1:], "env": env, "size": size}}, f)
if rank == 0:
    opts = dict(a.split("=", 1) for prev, a in zip(sys.argv, sys.argv[1:]) if prev == "-O")
    case = "{data}/segmented_posix_shared_np4"
    shutil.copy(case + "/summary.json", opts["summaryFile"])
    shutil.copy(case + "/rank_details.csv", opts["saveRankPerformanceDetailsCSV"])
    print("IOR stand-in wrote", opts["summaryFile"])
"#,
            rec = rec.display(),
            data = DATA
        ),
    );
    let mdtest = dir.join("mdtest");
    write_script(
        &mdtest,
        &format!(
            r#"#!/usr/bin/env python3
import json, os, shutil, sys
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
with open(os.path.join("{rec}", "mdtest-rank%d.json" % rank), "w") as f:
    json.dump({{"argv": sys.argv[1:]}}, f)
if rank == 0:
    case = "{data}/mdtest_files_dirs_np4"
    csv = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--saveRankPerformanceDetails=")][0]
    shutil.copy(case + "/rank_details.csv", csv)
    sys.stdout.write(open(case + "/human.txt").read())
"#,
            rec = rec.display(),
            data = DATA
        ),
    );
    (ior, mdtest)
}

fn mpirun() -> Vec<String> {
    vec![
        "mpirun".into(),
        "--allow-run-as-root".into(),
        "--oversubscribe".into(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ior_and_mdtest_from_the_shipped_catalog_land_in_the_lake() {
    let mut c = Cluster::start(Default::default()).await;
    let bin_dir = c.dir.path().join("bin");
    let rec = c.dir.path().join("rec");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::fs::create_dir_all(&rec).unwrap();
    let (ior, mdtest) = stand_ins(&bin_dir, &rec);
    // The site points the shipped entries at its installation; the test at the
    // stand-ins. One more threshold parameter exercises the ERROR verdict.
    let catalog = include_str!("../../agent/catalogs/ior.toml")
        .replace("  \"ior\",\n", &format!("  \"{}\",\n", ior.display()))
        .replace("  \"mdtest\",\n", &format!("  \"{}\",\n", mdtest.display()))
        + r#"[[benchmark.param]]
name = "check_mdtest_file_rename_rate"
type = "float"
optional = true
"#;
    add_agent_with(&mut c, "io1", &catalog, mpirun()).await;
    c.add_worker("w1", None);

    // --- IOR ---
    let run = c
        .submit_spec(spec(
            "ior",
            &[
                ("np", "4"),
                ("block_size", "4m"),
                ("transfer_size", "256k"),
                ("iterations", "3"),
                ("fsync", "false"),
                ("reorder", "false"),
                ("striping_factor", "4"),
                ("romio_cb_write", "enable"),
                ("hints", "cb_buffer_size=16777216"),
                ("check_io_write_bw_mib_s", "100000"),
                ("check_io_read_bw_mib_s", "1000"),
            ],
            pb::Launcher::Mpirun,
        ))
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    assert_eq!(d.tasks.len(), 1, "the mpirun launcher runs one task");

    // Four ranks ran; every one saw the same argv; rank 0 the hints.
    let ranks: Vec<serde_json::Value> = (0..4)
        .map(|r| {
            let p = rec.join(format!("ior-rank{r}.json"));
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
        })
        .collect();
    assert!(ranks.iter().all(|r| r["size"] == 4));
    let argv: Vec<String> = serde_json::from_value(ranks[0]["argv"].clone()).unwrap();
    let task_dir = argv
        .iter()
        .find_map(|a| a.strip_prefix("summaryFile=").map(String::from))
        .unwrap();
    let out_dir = task_dir.trim_end_matches("/ior-summary.json");
    assert_eq!(
        argv,
        [
            "-a",
            "POSIX",
            "-b",
            "4194304",
            "-t",
            "262144",
            "-s",
            "1",
            "-i",
            "3",
            "-w",
            "-r",
            "-O",
            "summaryFormat=JSON",
            "-O",
            &format!("summaryFile={out_dir}/ior-summary.json"),
            "-O",
            &format!("saveRankPerformanceDetailsCSV={out_dir}/ior-ranks.csv"),
        ]
    );
    assert!(out_dir.contains(&run.run_id), "{out_dir}");
    let env: BTreeMap<String, String> = serde_json::from_value(ranks[0]["env"].clone()).unwrap();
    assert_eq!(
        env,
        [
            ("IOR_HINT__MPI__cb_buffer_size", "16777216"),
            ("IOR_HINT__MPI__romio_cb_write", "enable"),
            ("IOR_HINT__MPI__striping_factor", "4"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<BTreeMap<_, _>>()
    );

    // The lake holds the reference output's values.
    let lake = c.lake_dir();
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{DATA}/segmented_posix_shared_np4/summary.json"))
            .unwrap(),
    )
    .unwrap();
    let results = reference["tests"][0]["Results"].as_array().unwrap();
    let io = read_table(&lake, "io_results", &run.run_id);
    let mut got: Vec<(String, i64, f64, f64)> = Vec::new();
    for b in &io {
        let (op, it, bw, tot) = (
            strs(b, "operation"),
            i64s(b, "iteration"),
            f64s(b, "bw_mib_s"),
            f64s(b, "total_time_s"),
        );
        for i in 0..b.num_rows() {
            got.push((
                op[i].clone().unwrap(),
                it[i].unwrap(),
                bw[i].unwrap(),
                tot[i].unwrap(),
            ));
        }
    }
    let mut want: Vec<(String, i64, f64, f64)> = Vec::new();
    let mut seen: BTreeMap<String, i64> = BTreeMap::new();
    for r in results {
        let op = r["access"].as_str().unwrap().to_string();
        let it = seen.entry(op.clone()).or_insert(0);
        want.push((
            op.clone(),
            *it,
            r["bwMiB"].as_f64().unwrap(),
            r["totalTime"].as_f64().unwrap(),
        ));
        *it += 1;
    }
    want.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    got.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    assert_eq!(got.len(), 6);
    assert_eq!(got, want);
    let rank_lines = std::fs::read_to_string(format!(
        "{DATA}/segmented_posix_shared_np4/rank_details.csv"
    ))
    .unwrap()
    .lines()
    .skip(1)
    .filter(|l| !l.trim().is_empty())
    .count();
    let task_rows: usize = read_table(&lake, "io_task_times", &run.run_id)
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(task_rows, rank_lines);

    // Verdicts: the write bound fails, the read bound passes; no history.
    let ck = checks(&lake, &run.run_id);
    let write_mean = want
        .iter()
        .filter(|w| w.0 == "write")
        .map(|w| w.2)
        .sum::<f64>()
        / 3.0;
    let w = &ck["io.write_bw_mib_s"];
    assert_eq!((w.0.as_str(), w.2), ("FAIL", Some(100000.0)));
    assert!((w.1.unwrap() - write_mean).abs() < 1e-9, "{w:?}");
    let r = &ck["io.read_bw_mib_s"];
    assert_eq!((r.0.as_str(), r.2), ("PASS", Some(1000.0)));
    // No history: NO_REFERENCE, never a green PASS.
    let rel = &ck["io.write_bw_mib_s.vs_median"];
    assert_eq!((rel.0.as_str(), rel.2), ("NO_REFERENCE", None));
    assert!(rel.3.contains("no reference yet: 0 of 5"), "{}", rel.3);
    assert!(!ck.contains_key("io.verify_errors"), "IOR did not verify");

    // --- mdtest ---
    let run = c
        .submit_spec(spec(
            "mdtest",
            &[
                ("np", "4"),
                ("items", "1000"),
                ("iterations", "3"),
                ("check_mdtest_file_creation_rate", "5000"),
                ("check_mdtest_file_rename_rate", "1"),
            ],
            pb::Launcher::Mpirun,
        ))
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let md: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rec.join("mdtest-rank0.json")).unwrap())
            .unwrap();
    let argv: Vec<String> = serde_json::from_value(md["argv"].clone()).unwrap();
    assert_eq!(&argv[..5], ["-n", "1000", "-i", "3", "-u"]);
    assert!(argv[5].starts_with("--saveRankPerformanceDetails=/"));
    // stdout was captured into mdtest.txt and uploaded as format mdtest.
    let outs = &d.tasks[0].outputs;
    assert!(
        outs.iter()
            .any(|o| o.key.ends_with("/mdtest.txt") && o.format == "mdtest"),
        "{outs:?}"
    );
    let summary = read_table(&lake, "mdtest_summary", &run.run_id);
    let mut file_creation = None;
    for b in &summary {
        let (op, stat, mean) = (strs(b, "operation"), strs(b, "statistic"), f64s(b, "mean"));
        for i in 0..b.num_rows() {
            if op[i].as_deref() == Some("File creation") && stat[i].as_deref() == Some("rate") {
                file_creation = mean[i];
            }
        }
    }
    // human.txt: "File creation  8276.107  942.524  3446.117  4183.832".
    assert_eq!(file_creation, Some(3446.117));
    let results = read_table(&lake, "mdtest_results", &run.run_id);
    let mut all_creation = None;
    for b in &results {
        let (op, rate) = (strs(b, "operation"), f64s(b, "rate_per_s"));
        let rank = b
            .column_by_name("rank")
            .unwrap()
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap()
            .clone();
        for i in 0..b.num_rows() {
            if rank.is_null(i) && op[i].as_deref() == Some("File creation") {
                all_creation = rate[i];
            }
        }
    }
    // rank_details.csv's `all` line: File creation 8.2761067430e+03.
    assert_eq!(all_creation, Some(8.2761067430e+03));
    let ck = checks(&lake, &run.run_id);
    let fc = &ck["mdtest.file_creation_rate"];
    assert_eq!(
        (fc.0.as_str(), fc.1, fc.2),
        ("FAIL", Some(3446.117), Some(5000.0))
    );
    let missing = &ck["mdtest.file_rename_rate"];
    assert_eq!((missing.0.as_str(), missing.1), ("ERROR", None));
    assert_eq!(ck["mdtest.tree_removal_rate.vs_median"].0, "NO_REFERENCE");
    c.shutdown();
}

/// Mean write bandwidth of a run from its `io_results` (the figure the checks use).
fn write_mean(lake: &Path, run_id: &str) -> f64 {
    let mut xs = Vec::new();
    for b in read_table(lake, "io_results", run_id) {
        let (op, bw) = (strs(&b, "operation"), f64s(&b, "bw_mib_s"));
        for i in 0..b.num_rows() {
            if op[i].as_deref() == Some("write") {
                xs.push(bw[i].unwrap());
            }
        }
    }
    assert!(!xs.is_empty(), "run {run_id} has write rows");
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pio_schedule_gets_verdicts_against_its_rolling_median() {
    let mut c = Cluster::start(Default::default()).await;
    let catalog = include_str!("../../agent/src/builtin.toml").replace("{self_exe}", &bin());
    add_agent_with(&mut c, "io1", &catalog, mpirun()).await;
    c.add_worker("w1", None);
    let mut s = c.schedules();
    let params = [
        ("np", "1"),
        ("block_size", "256k"),
        ("transfer_size", "64k"),
        ("iterations", "2"),
        ("fsync", "false"),
        ("read_cache", "none"),
        // An absolute bound no disk reaches (must FAIL) and one every disk
        // passes; a short history window.
        ("check_io_write_bw_mib_s", "1000000000"),
        ("check_io_read_bw_mib_s", "0.001"),
        ("check_window", "2"),
        ("check_min_history", "2"),
    ];
    let sched = s
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(pb::Schedule {
                name: "nightly-pio".into(),
                cron: "0 3 * * *".into(),
                time_zone: "UTC".into(),
                allow_overlap: true,
                spec: Some(spec("pio", &params, pb::Launcher::Local)),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    // An on-demand run of the same benchmark is not part of the schedule's history.
    let lone = c
        .submit_spec(spec("pio", &params, pb::Launcher::Local))
        .await
        .unwrap();
    let d = c.wait_settled(&lone.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");

    let lake = c.lake_dir();
    let mut runs: Vec<String> = Vec::new();
    for n in 0..4 {
        let run = s
            .trigger_schedule(pb::TriggerScheduleRequest {
                schedule_id: sched.schedule_id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let d = c.wait_settled(&run.run_id, 120).await;
        assert_eq!(state(&d), pb::RunState::Succeeded, "run {n}: {d:#?}");
        let ck = checks(&lake, &run.run_id);
        let value = write_mean(&lake, &run.run_id);
        // Absolute bounds: write FAILs, read PASSes, every run; a run whose
        // own spread was far above usual (a loaded machine) makes the write
        // FAIL INCONCLUSIVE instead, saying so (docs/io.md, "Outcomes").
        let w = &ck["io.write_bw_mib_s"];
        assert_eq!(w.2, Some(1e9), "{w:?}");
        assert!(
            w.0 == "FAIL"
                || (w.0 == "INCONCLUSIVE"
                    && w.3.starts_with("disturbed:")
                    && w.3.contains("is below the bound")),
            "{w:?}"
        );
        assert!((w.1.unwrap() - value).abs() <= 1e-9 * value);
        assert_eq!(ck["io.read_bw_mib_s"].0, "PASS");
        // pio verified every byte: 0 errors PASS.
        let v = &ck["io.verify_errors"];
        assert_eq!((v.0.as_str(), v.1, v.2), ("PASS", Some(0.0), Some(0.0)));
        // Relative: the reference learned from the last 2 scheduled runs
        // once 2 exist (NO_REFERENCE before).
        let rel = &ck["io.write_bw_mib_s.vs_median"];
        if runs.len() < 2 {
            assert_eq!(
                (rel.0.as_str(), rel.2),
                ("NO_REFERENCE", None),
                "run {n}: {rel:?}"
            );
            assert!(rel.3.contains("no reference yet"), "{}", rel.3);
        } else {
            let prev: Vec<f64> = runs[runs.len() - 2..]
                .iter()
                .map(|r| write_mean(&lake, r))
                .collect();
            let m = median(prev.clone());
            let reference = rel.2.expect("a reference");
            assert!(
                (reference - m).abs() <= 1e-9 * m,
                "run {n}: reference {reference} vs median {m} of the schedule's last 2 runs"
            );
            // median − max(5 scaled MADs, 5 %): a FAIL, or INCONCLUSIVE
            // when the run's own spread (io.write_bw_cv) was far above usual.
            use benchlake_analysis::io_checks::Better;
            use benchlake_analysis::reference::{Learned, judge};
            let learned = Learned {
                window: 2,
                min_history: 2,
                rel_floor: 0.05,
                ..Learned::default()
            };
            if judge(value, &prev, Better::Higher, &learned).fails() {
                assert!(
                    matches!(rel.0.as_str(), "FAIL" | "INCONCLUSIVE"),
                    "run {n}: {rel:?}"
                );
            } else {
                assert_eq!(rel.0, "PASS", "run {n}: {rel:?}");
            }
        }
        runs.push(run.run_id.clone());
    }
    c.shutdown();
}
