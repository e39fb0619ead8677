//! `benchlake node-check` as Slurm's HealthCheckProgram meets it
//! (`cargo bench -p benchlake --bench node_check`): a coordinator with SQLite
//! state on disk whose verdict index holds the node-level verdicts of
//! BENCH_NODES (10,000) nodes — BENCH_RUNS_PER_NODE (5) runs of four node
//! checks each, as the start-up load leaves them — and a drain record for
//! every 50th node, serving gRPC on loopback. Timed: the whole `benchlake
//! node-check NODE` process (start, connect, one GetNodeHealth, print, exit)
//! BENCH_REPEAT (21) times after one warm-up, for a healthy and a drained
//! node, and the GetNodeHealth call alone from an open connection. Median
//! and maximum wall times are printed. Target (issue 18): well under a
//! second per process.
use std::sync::Arc;
use std::time::{Duration, Instant};

use benchlake_coordinator::Coordinator;
use benchlake_coordinator::config::CoordinatorConfig;
use benchlake_coordinator::node_actions::NodeDrain;
use benchlake_coordinator::store::StateStore;
use benchlake_coordinator::verdicts::CheckRow;
use benchlake_core::clock::SystemClock;
use benchlake_core::lake::{Lake, StoreConfig};
use benchlake_proto::v1 as pb;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(bench());
}

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() - 1])
}

async fn bench() {
    let n_nodes = env("BENCH_NODES", 10_000);
    let per_node = env("BENCH_RUNS_PER_NODE", 5);
    let repeat = env("BENCH_REPEAT", 21) as usize;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = CoordinatorConfig {
        state_path: dir.path().join("state.db"),
        store: StoreConfig {
            url: dir.path().join("lake").display().to_string(),
            ..Default::default()
        },
        background: false,
        ..Default::default()
    };
    let store: Arc<dyn StateStore> =
        Arc::new(benchlake_coordinator::store::SqliteStore::open(&cfg.state_path).expect("state"));
    let t_fill = Instant::now();
    store
        .transact(|tx| {
            for i in (0..n_nodes).step_by(50) {
                tx.upsert_node_drain(&NodeDrain {
                    node: format!("node{i:05}"),
                    reason: format!("benchlake: node.cores 62 vs 64 (run R{i})"),
                    run_id: format!("R{i}"),
                    check: "node.cores".into(),
                    schedule_id: Some("S".into()),
                    drained_ms: 0,
                })?;
            }
            Ok(())
        })
        .expect("drains");
    let lake = Lake::open(&cfg.store).expect("lake");
    let coord =
        Coordinator::new(store, lake, Arc::new(SystemClock), cfg.clone()).expect("coordinator");
    let checks = [
        ("node.cores", "cores"),
        ("node.memory_bytes", "bytes"),
        ("node.write_bw_of_median", "MiB/s"),
        ("node.linktest_slow_pair_fraction", "fraction"),
    ];
    // One committed node_health file per run, 100 nodes per run.
    let runs = n_nodes.div_ceil(100) * per_node;
    for r in 0..runs {
        let run_id = format!("01RUN{r:08}");
        let first = (r % n_nodes.div_ceil(100)) * 100;
        let rows: Vec<(String, CheckRow)> = (first..(first + 100).min(n_nodes))
            .flat_map(|n| {
                checks.iter().map(move |(c, unit)| {
                    let bad = n % 50 == 0 && *c == "node.cores";
                    (
                        format!("node{n:05}"),
                        CheckRow {
                            check: (*c).into(),
                            status: if bad { "FAIL" } else { "PASS" }.into(),
                            value: Some(if bad { 62.0 } else { 64.0 }),
                            reference: Some(64.0),
                            unit: (*unit).into(),
                            message: "bench".into(),
                            ..Default::default()
                        },
                    )
                })
            })
            .collect();
        coord.verdicts().record_nodes(
            &run_id,
            &format!("tables/node_health/date=d/run_id={run_id}/part-j.parquet"),
            rows,
        );
    }
    coord.verdicts().set_loaded();
    let fill = t_fill.elapsed();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let serving = coord.clone();
    tokio::spawn(async move {
        let _ = benchlake_coordinator::serve(serving, listener, std::future::pending()).await;
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!(
        "node-check bench: {n_nodes} nodes, {runs} node_health files, {} verdict rows, {} drain records (filled in {:.1} s)",
        runs * 100 * checks.len() as u64,
        n_nodes.div_ceil(50),
        fill.as_secs_f64()
    );
    println!(
        "{:<48} {:>10} {:>10} {:>5}",
        "what", "median ms", "max ms", "exit"
    );
    let bin = env!("CARGO_BIN_EXE_benchlake");
    for node in ["node00001", "node00050"] {
        let run = || {
            let t = Instant::now();
            let out = std::process::Command::new(bin)
                .args(["node-check", node, "--coordinator", &addr])
                .output()
                .expect("node-check");
            (
                t.elapsed().as_secs_f64() * 1e3,
                out.status.code().unwrap_or(-1),
            )
        };
        let _ = run();
        let mut times = Vec::new();
        let mut code = 0;
        for _ in 0..repeat {
            let (ms, c) = run();
            times.push(ms);
            code = c;
        }
        let (med, max) = stats(times);
        println!(
            "{:<48} {med:>10.1} {max:>10.1} {code:>5}",
            format!("benchlake node-check {node} (process)")
        );
    }
    let ch = benchlake_proto::client::channel(&addr).expect("channel");
    let mut c = pb::cluster_service_client::ClusterServiceClient::new(ch);
    let mut times = Vec::new();
    for i in 0..(repeat * 10) {
        let t = Instant::now();
        let h = c
            .get_node_health(pb::GetNodeHealthRequest {
                node: format!("node{:05}", (i * 37) % n_nodes as usize),
            })
            .await
            .expect("GetNodeHealth")
            .into_inner();
        times.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(h.checks.len(), checks.len());
    }
    let (med, max) = stats(times);
    println!(
        "{:<48} {med:>10.2} {max:>10.2} {:>5}",
        "GetNodeHealth (open connection)", "-"
    );
}
