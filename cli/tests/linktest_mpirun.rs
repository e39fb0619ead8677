//! Real LinkTest through the agent's `mpirun` launcher, with the shipped
//! example entry `agent/catalogs/linktest.toml`. LinkTest itself cannot be
//! installed here, so the test writes a stand-in `linktest` that behaves like
//! its interface: every rank records its argv and working directory, and rank
//! 0 writes a real LinkTest SION file (np4, from ../shared/data/linktest) as
//! `pingpong_results_bin.sion` in its working directory. Real Open MPI
//! `mpirun --oversubscribe` starts it across the hosts of 2 agents; the file
//! lands in the linktest tables with the reference values.
mod common;

use std::path::Path;

use arrow::array::{Float64Array, Int32Array};
use benchlake_coordinator::Tokens;
use benchlake_core::bench::{ArgTemplate, Catalog};
use benchlake_proto::v1 as pb;
use common::*;

const REF_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/linktest/v1.2p1/np4_default"
);
const CATALOG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../agent/catalogs/linktest.toml"
);

fn stand_in(dir: &Path, record: &Path) -> String {
    let p = dir.join("linktest");
    let script = format!(
        "#!/bin/sh\n\
         # stand-in for LinkTest 2.x: records argv and cwd; rank 0 writes a real SION file\n\
         r=${{OMPI_COMM_WORLD_RANK:-0}}\n\
         printf '%s\\n' \"$@\" > '{rec}/argv.rank'$r\n\
         pwd > '{rec}/cwd.rank'$r\n\
         if [ \"$r\" = 0 ]; then cp '{src}/pingpong_results_bin.sion' pingpong_results_bin.sion; fi\n",
        rec = record.display(),
        src = REF_DIR
    );
    write_script(&p, &script);
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn linktest_runs_through_mpirun_and_lands_in_the_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record");
    std::fs::create_dir(&record).unwrap();
    let prog = stand_in(tmp.path(), &record);
    let text = std::fs::read_to_string(CATALOG).unwrap();
    let shipped = Catalog::from_toml(&text).unwrap();
    let mut def = shipped.get("linktest").unwrap().clone();
    assert_eq!(def.command[0], ArgTemplate::Arg("linktest".into()));
    def.command[0] = ArgTemplate::Arg(prog);
    let mut c = Cluster::start(Tokens::default()).await;
    for a in ["m0", "m1"] {
        let def = def.clone();
        c.add_agent_with(a, move |cfg| {
            let mut cat = Catalog::from_toml(&catalog(&bin())).unwrap();
            cat.benchmarks.push(def);
            cfg.catalog = cat;
            cfg.address = "127.0.0.1".into();
            cfg.mpirun = ["mpirun", "--oversubscribe", "--allow-run-as-root"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        })
        .await;
    }
    c.add_worker("w1", None);
    let params = [
        ("np", "4"),
        ("num_warmup_messages", "3"),
        ("num_messages", "25"),
        ("size_messages", "16MiB"),
        ("bidirectional", "true"),
        ("bisection", "true"),
    ];
    let run = c
        .submit_spec(pb::BenchmarkSpec {
            nodes: Some(pb::NodeSelector {
                count: 2,
                ..Default::default()
            }),
            launcher: pb::Launcher::Mpirun as i32,
            max_attempts: 1,
            ..bench_spec("linktest", &params)
        })
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    assert_eq!(d.tasks.len(), 1, "mpirun: one task, on the first agent");
    // Every rank got LinkTest's options, in the working directory of the task.
    let want = [
        "--mode",
        "mpi",
        "--num-warmup-messages",
        "3",
        "--num-messages",
        "25",
        "--size-messages",
        "16777216",
        "--bidirectional",
        "--bisection",
    ];
    for r in 0..4 {
        let argv = std::fs::read_to_string(record.join(format!("argv.rank{r}"))).unwrap();
        assert_eq!(argv.lines().collect::<Vec<_>>(), want, "rank {r}");
        let cwd = std::fs::read_to_string(record.join(format!("cwd.rank{r}"))).unwrap();
        assert!(cwd.contains(&run.run_id), "rank {r} ran in {cwd}");
    }
    let t = &d.tasks[0];
    assert!(
        t.outputs
            .iter()
            .any(|o| o.format == "linktest" && o.key.ends_with("/pingpong_results_bin.sion")),
        "{t:?}"
    );
    // The tables hold the reference reading's matrix bit for bit.
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{REF_DIR}/pingpong_results_bin.sion.sionref.json"))
            .unwrap(),
    )
    .unwrap();
    let ranks = reference["linktest_v1"]["ranks"].as_array().unwrap();
    let lake = c.lake_dir();
    assert_eq!(table_rows(&lake, "linktest_timings", Some(&run.run_id)), 12);
    assert_eq!(table_rows(&lake, "linktest_ranks", Some(&run.run_id)), 4);
    assert_eq!(table_rows(&lake, "linktest_runs", Some(&run.run_id)), 1);
    let mut seen = 0;
    let root = lake.join("tables/linktest_timings");
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if !p.to_string_lossy().contains(&run.run_id) {
                continue;
            }
            let f = std::fs::File::open(&p).unwrap();
            let rd = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
                .unwrap()
                .build()
                .unwrap();
            for b in rd {
                let b = b.unwrap();
                let col = |n: &str| b.column_by_name(n).unwrap().clone();
                let from = col("from_rank");
                let to = col("to_rank");
                let time = col("time_s");
                let from = from.as_any().downcast_ref::<Int32Array>().unwrap();
                let to = to.as_any().downcast_ref::<Int32Array>().unwrap();
                let time = time.as_any().downcast_ref::<Float64Array>().unwrap();
                for i in 0..b.num_rows() {
                    let want = ranks[from.value(i) as usize]["timings"][to.value(i) as usize]
                        .as_f64()
                        .unwrap();
                    assert_eq!(time.value(i).to_bits(), want.to_bits());
                    seen += 1;
                }
            }
        }
    }
    assert_eq!(seen, 12);
}
