//! The `srun` launcher on a real Slurm cluster of three nodes (n1, n2, n3 on
//! this host; `common/slurm.rs` starts and stops it). One agent plays the
//! login node: it runs `srun --mpi=pmix --ntasks=N --nodes=3 …` and Slurm
//! places the tasks. Through the real coordinator, agent and worker:
//! - pio on three Slurm nodes: every process's row in `io_task_times` names
//!   its Slurm node (the fake nodes share one host name, so only the node
//!   name tells them apart), the run SUCCEEDED, bandwidths are positive;
//! - LinkTest (the shipped `agent/catalogs/linktest.toml` entry; LinkTest
//!   itself is not installable here, so a stand-in runs netprobe, benchlake's
//!   LinkTest-compatible TCP benchmark, in each Slurm task): the SION file's
//!   ranks name n1, n2, n3 in `linktest_ranks`, every pair has a time;
//! - failures: a partition Slurm does not know fails the task with Slurm's
//!   own error; more nodes than exist leave the job queued, and the task's
//!   timeout ends it with "queued and waiting for resources" and no job left
//!   behind in Slurm; bad names never reach srun (refused at submit).
mod common;
#[path = "common/slurm.rs"]
mod slurm;

use std::collections::BTreeSet;
use std::path::Path;

use arrow::array::{Array, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use benchlake_coordinator::Tokens;
use benchlake_core::bench::{ArgTemplate, BenchmarkDef, Catalog};
use benchlake_proto::v1 as pb;
use common::*;
use slurm::SlurmCluster;

const LINKTEST_CATALOG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../agent/catalogs/linktest.toml"
);

fn col<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> &'a T {
    b.column_by_name(name)
        .unwrap_or_else(|| panic!("column {name}"))
        .as_any()
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("type of {name}"))
}

/// A built-in entry with `{self_exe}` pointing at the benchlake binary
/// (in-process agents' own executable is the test binary).
fn builtin(name: &str) -> BenchmarkDef {
    let cat = benchlake_agent::builtin_catalog().unwrap();
    let mut def = cat.get(name).expect("built in").clone();
    for a in def.command.iter_mut() {
        if let ArgTemplate::Arg(s) = a {
            *s = s.replace("{self_exe}", &bin());
        }
    }
    def
}

/// Starts the test cluster and the "login node" agent offering `defs`
/// (with the Slurm cluster's environment), plus a worker.
async fn login_node(sl: &SlurmCluster, defs: Vec<BenchmarkDef>) -> Cluster {
    let mut c = Cluster::start(Tokens::default()).await;
    let env = sl.env();
    c.add_agent_with("login", move |cfg| {
        let mut cat = Catalog::from_toml(&catalog(&bin())).unwrap();
        for mut d in defs {
            d.env.extend(env.iter().cloned());
            cat.benchmarks.push(d);
        }
        cfg.catalog = cat;
        cfg.address = "127.0.0.1".into();
    })
    .await;
    c.add_worker("w1", None);
    c
}

fn srun_spec(bench: &str, params: &[(&str, &str)], slurm: pb::SlurmOptions) -> pb::BenchmarkSpec {
    pb::BenchmarkSpec {
        launcher: pb::Launcher::Srun as i32,
        max_attempts: 1,
        slurm: Some(slurm),
        ..bench_spec(bench, params)
    }
}

fn three_nodes() -> pb::SlurmOptions {
    pb::SlurmOptions {
        nodes: 3,
        ..Default::default()
    }
}

fn run_error(d: &pb::RunDetail) -> String {
    d.tasks
        .iter()
        .map(|t| t.error.clone())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pio_runs_on_three_slurm_nodes_and_rows_name_them() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let c = login_node(&sl, vec![builtin("pio")]).await;
    let params = [
        ("np", "3"),
        ("block_size", "4MiB"),
        ("transfer_size", "1MiB"),
        ("iterations", "1"),
    ];
    let run = c
        .submit_spec(srun_spec("pio", &params, three_nodes()))
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 120).await;
    assert_eq!(
        state(&d),
        pb::RunState::Succeeded,
        "{}\n{d:#?}\n{}",
        run_error(&d),
        sl.logs()
    );
    assert_eq!(d.tasks.len(), 1, "srun: one task on the login agent");
    let lake = c.lake_dir();
    // Every process's row names its Slurm node; all three nodes ran one.
    let mut nodes = BTreeSet::new();
    let mut rows = 0;
    for b in table_batches(&lake, "io_task_times", Some(&run.run_id)) {
        let host = col::<StringArray>(&b, "host");
        let rank = col::<Int32Array>(&b, "rank");
        for i in 0..b.num_rows() {
            assert!(!host.is_null(i), "rank {} has no host", rank.value(i));
            nodes.insert(host.value(i).to_string());
            rows += 1;
        }
    }
    assert_eq!(
        nodes,
        BTreeSet::from(["n1".to_string(), "n2".into(), "n3".into()]),
        "io_task_times hosts"
    );
    assert_eq!(rows, 6, "3 ranks × write and read");
    let mut ops = BTreeSet::new();
    for b in table_batches(&lake, "io_results", Some(&run.run_id)) {
        let bw = col::<Float64Array>(&b, "bw_mib_s");
        let n = col::<Int64Array>(&b, "num_tasks");
        let op = col::<StringArray>(&b, "operation");
        for i in 0..b.num_rows() {
            assert!(
                bw.value(i) > 0.0 && bw.value(i).is_finite(),
                "bw {}",
                bw.value(i)
            );
            assert_eq!(n.value(i), 3, "num_tasks");
            ops.insert(op.value(i).to_string());
        }
    }
    assert_eq!(ops, BTreeSet::from(["read".to_string(), "write".into()]));
    assert_eq!(sl.queue(), "", "no job left in Slurm");
}

/// A stand-in for LinkTest 2.x (not installable here) for Slurm tasks: it
/// records its argv and Slurm node, then runs netprobe, benchlake's
/// LinkTest-compatible TCP benchmark, as this Slurm task's rank; rank 0
/// writes `pingpong_results_bin.sion` into the working directory, as
/// LinkTest does.
fn stand_in(dir: &Path, record: &Path) -> String {
    let p = dir.join("linktest");
    let script = format!(
        "#!/bin/sh\n\
         r=$SLURM_PROCID\n\
         printf '%s\\n' \"$@\" > '{rec}/argv.rank'$r\n\
         echo \"$SLURMD_NODENAME\" > '{rec}/node.rank'$r\n\
         hosts=127.0.0.1; i=1\n\
         while [ $i -lt $SLURM_NTASKS ]; do hosts=$hosts,127.0.0.1; i=$((i+1)); done\n\
         exec '{bin}' netprobe --rank=$r --num-tasks=$SLURM_NTASKS --hosts=$hosts \
         --run-id=$BENCHLAKE_RUN_ID --out=pingpong_results_bin.sion \
         --num-messages=5 --message-size=4096 --warmup-messages=1\n",
        rec = record.display(),
        bin = bin(),
    );
    std::fs::write(&p, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn linktest_runs_through_srun_and_ranks_name_their_slurm_nodes() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record");
    std::fs::create_dir(&record).unwrap();
    let shipped = Catalog::from_toml(&std::fs::read_to_string(LINKTEST_CATALOG).unwrap()).unwrap();
    let mut def = shipped.get("linktest").unwrap().clone();
    assert!(
        def.launchers
            .contains(&benchlake_core::bench::LauncherKind::Srun)
    );
    def.command[0] = ArgTemplate::Arg(stand_in(tmp.path(), &record));
    let c = login_node(&sl, vec![def]).await;
    let params = [
        ("np", "3"),
        ("num_messages", "5"),
        ("size_messages", "4KiB"),
    ];
    let run = c
        .submit_spec(srun_spec("linktest", &params, three_nodes()))
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 120).await;
    assert_eq!(
        state(&d),
        pb::RunState::Succeeded,
        "{}\n{d:#?}\n{}",
        run_error(&d),
        sl.logs()
    );
    // Slurm placed one task per node; each got LinkTest's options.
    let mut seen = BTreeSet::new();
    for r in 0..3 {
        let argv = std::fs::read_to_string(record.join(format!("argv.rank{r}"))).unwrap();
        assert_eq!(
            argv.lines().take(8).collect::<Vec<_>>(),
            [
                "--mode",
                "mpi",
                "--num-warmup-messages",
                "3",
                "--num-messages",
                "5",
                "--size-messages",
                "4096"
            ],
            "rank {r}"
        );
        let node = std::fs::read_to_string(record.join(format!("node.rank{r}"))).unwrap();
        seen.insert(node.trim().to_string());
    }
    assert_eq!(seen.len(), 3, "one task per Slurm node: {seen:?}");
    // The lake: the ranks carry the Slurm node names, every ordered pair a time.
    let lake = c.lake_dir();
    let mut hosts = BTreeSet::new();
    for b in table_batches(&lake, "linktest_ranks", Some(&run.run_id)) {
        let h = col::<StringArray>(&b, "hostname");
        for i in 0..b.num_rows() {
            hosts.insert(h.value(i).to_string());
        }
    }
    assert_eq!(
        hosts,
        BTreeSet::from(["n1".to_string(), "n2".into(), "n3".into()]),
        "linktest_ranks.hostname"
    );
    let mut pairs = BTreeSet::new();
    for b in table_batches(&lake, "linktest_timings", Some(&run.run_id)) {
        let (from, to) = (
            col::<Int32Array>(&b, "from_rank"),
            col::<Int32Array>(&b, "to_rank"),
        );
        let t = col::<Float64Array>(&b, "time_s");
        for i in 0..b.num_rows() {
            assert!(
                t.value(i) > 0.0 && t.value(i) < 1.0,
                "time {} s of {}→{}",
                t.value(i),
                from.value(i),
                to.value(i)
            );
            pairs.insert((from.value(i), to.value(i)));
        }
    }
    assert_eq!(pairs.len(), 6, "3×3 minus self pairs: {pairs:?}");
    assert_eq!(sl.queue(), "", "no job left in Slurm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slurm_refusals_fail_the_task_with_slurms_reason() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let c = login_node(&sl, vec![builtin("pio")]).await;
    let params = [("np", "2"), ("block_size", "1MiB"), ("iterations", "1")];

    // A partition Slurm does not know: Slurm's error is the failure reason.
    let run = c
        .submit_spec(srun_spec(
            "pio",
            &params,
            pb::SlurmOptions {
                partition: "nosuchpartition".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(state(&d), pb::RunState::Failed, "{d:#?}");
    let e = run_error(&d);
    assert!(
        e.contains("Invalid partition name specified") && e.contains("exited with code"),
        "{e}"
    );

    // More nodes than the cluster has (one task each): Slurm queues the job;
    // the task's timeout ends it with srun's last word, and srun (SIGTERM)
    // revokes the job, so nothing stays queued.
    let run = c
        .submit_spec(pb::BenchmarkSpec {
            timeout_s: 4,
            ..srun_spec(
                "pio",
                &[("np", "4"), ("block_size", "1MiB"), ("iterations", "1")],
                pb::SlurmOptions {
                    nodes: 4,
                    ..Default::default()
                },
            )
        })
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(state(&d), pb::RunState::Failed, "{d:#?}");
    let e = run_error(&d);
    assert!(
        e.contains("timed out after 4 s") && e.contains("queued and waiting for resources"),
        "{e}"
    );
    assert_eq!(sl.queue(), "", "the pending job was revoked");

    // Names that are not Slurm names never reach srun; Slurm options need srun.
    for (slurm, launcher, field) in [
        (
            pb::SlurmOptions {
                partition: "debug;id".into(),
                ..Default::default()
            },
            pb::Launcher::Srun,
            "spec.slurm.partition",
        ),
        (
            pb::SlurmOptions {
                nodelist: vec!["n1 --uid=0".into()],
                ..Default::default()
            },
            pb::Launcher::Srun,
            "spec.slurm.nodelist",
        ),
        (three_nodes(), pb::Launcher::Local, "spec.slurm"),
    ] {
        let e = c
            .submit_spec(pb::BenchmarkSpec {
                launcher: launcher as i32,
                slurm: Some(slurm),
                ..bench_spec("pio", &params)
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(field), "{}", e.message());
    }
}
