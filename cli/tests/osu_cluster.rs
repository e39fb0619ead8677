//! The OSU micro-benchmarks through an in-process cluster (real gRPC, real
//! Open MPI `mpirun`, real Parquet lake): the shipped entry
//! `agent/catalogs/osu.toml` with a stand-in `osu_bw` (OMB cannot be installed
//! here) that records its argv on every rank and prints, on rank 0, osu_bw's
//! text output. Its stdout lands as `osu_bw.txt` (format `osu`), the `osu`
//! kind's descriptor ingests it into `osu_results` and queues its checks,
//! which judge the bandwidth at the largest size against the run's bound
//! (docs/architecture.md, "Adding a benchmark kind").
mod common;

use std::path::Path;

use arrow::array::{Array, Float64Array, Int64Array, StringArray};
use benchlake_proto::v1 as pb;
use common::*;

fn mpirun() -> Vec<String> {
    vec![
        "mpirun".into(),
        "--allow-run-as-root".into(),
        "--oversubscribe".into(),
    ]
}

/// A stand-in with osu_bw's interface: every rank records its argv; rank 0
/// prints the output of OMB 7.3 (bandwidth 1.5 MB/s per byte up to 8 KiB,
/// 12,000 MB/s at the largest size).
fn stand_in(dir: &Path, rec: &Path) -> std::path::PathBuf {
    let p = dir.join("osu_bw");
    write_script(
        &p,
        &format!(
            r##"#!/usr/bin/env python3
import json, os, sys
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
with open(os.path.join("{rec}", "osu-rank%d.json" % rank), "w") as f:
    json.dump({{"argv": sys.argv[1:], "size": size}}, f)
if rank == 0:
    lo, hi = (int(x) for x in sys.argv[sys.argv.index("-m") + 1].split(":"))
    print("# OSU MPI Bandwidth Test v7.3")
    print("# Datatype: MPI_CHAR.")
    print("# Size      Bandwidth (MB/s)")
    s = max(lo, 1)
    while s <= hi:
        bw = 12000.0 if s == hi else min(1.5 * s, 11000.0)
        print("%-10d%18.2f" % (s, bw))
        s *= 2
"##,
            rec = rec.display()
        ),
    );
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn osu_bw_from_the_shipped_catalog_is_ingested_and_judged() {
    let mut c = Cluster::start(Default::default()).await;
    let bin_dir = c.dir.path().join("bin");
    let rec = c.dir.path().join("rec");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::fs::create_dir_all(&rec).unwrap();
    let osu_bw = stand_in(&bin_dir, &rec);
    let catalog = include_str!("../../agent/catalogs/osu.toml")
        .replace("  \"osu_bw\",\n", &format!("  \"{}\",\n", osu_bw.display()));
    c.add_agent_with("n1", |cfg| {
        cfg.catalog = benchlake_core::bench::Catalog::from_toml(&catalog).unwrap();
        cfg.mpirun = mpirun();
    })
    .await;
    c.add_worker("w1", None);

    let run = c
        .submit_spec(pb::BenchmarkSpec {
            launcher: pb::Launcher::Mpirun as i32,
            ..bench_spec(
                "osu_bw",
                &[("max_size", "1MiB"), ("check_osu_bw_mb_s", "13000")],
            )
        })
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");

    // Two ranks ran the catalog's command line.
    for r in 0..2 {
        let v: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(rec.join(format!("osu-rank{r}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(v["size"], 2);
        assert_eq!(
            v["argv"],
            serde_json::json!(["-m", "1:1048576", "-i", "100", "-x", "10"])
        );
    }

    // osu_results: one row per size, 1 B to 1 MiB.
    let lake = c.lake_dir();
    let batches = table_batches(&lake, "osu_results", Some(&run.run_id));
    let mut rows: Vec<(i64, f64, String, String)> = Vec::new();
    for b in &batches {
        let col = |n: &str| b.column_by_name(n).unwrap().clone();
        let (size, value) = (col("size_bytes"), col("value"));
        let size = size.as_any().downcast_ref::<Int64Array>().unwrap();
        let value = value.as_any().downcast_ref::<Float64Array>().unwrap();
        let (bench, unit) = (col("benchmark"), col("unit"));
        let bench = bench.as_any().downcast_ref::<StringArray>().unwrap();
        let unit = unit.as_any().downcast_ref::<StringArray>().unwrap();
        for i in 0..b.num_rows() {
            rows.push((
                size.value(i),
                value.value(i),
                bench.value(i).to_string(),
                unit.value(i).to_string(),
            ));
        }
    }
    rows.sort_by_key(|r| r.0);
    assert_eq!(rows.len(), 21, "{rows:?}");
    assert_eq!(rows[0], (1, 1.5, "osu_bw".into(), "MB/s".into()));
    assert_eq!(rows[20].0, 1 << 20);
    assert_eq!(rows[20].1, 12000.0);

    // The checks the descriptor queued: the bound FAILs, the learned
    // reference has no history yet.
    let mut checks: Vec<(String, String, Option<f64>)> = Vec::new();
    for b in table_batches(&lake, "checks", Some(&run.run_id)) {
        let col = |n: &str| b.column_by_name(n).unwrap().clone();
        let (check, status, value) = (col("check"), col("status"), col("value"));
        let check = check.as_any().downcast_ref::<StringArray>().unwrap();
        let status = status.as_any().downcast_ref::<StringArray>().unwrap();
        let value = value.as_any().downcast_ref::<Float64Array>().unwrap();
        for i in 0..b.num_rows() {
            checks.push((
                check.value(i).to_string(),
                status.value(i).to_string(),
                (!value.is_null(i)).then(|| value.value(i)),
            ));
        }
    }
    checks.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        checks,
        [
            ("osu.bw_mb_s".to_string(), "FAIL".to_string(), Some(12000.0)),
            (
                "osu.bw_mb_s.vs_median".to_string(),
                "NO_REFERENCE".to_string(),
                Some(12000.0)
            ),
        ]
    );
    assert_eq!(d.run.as_ref().unwrap().verdict, "FAIL");
}
