//! What-if sweep fan-out benchmark (`cargo bench -p benchlake --bench sweep`): a
//! 64-point latency × bandwidth Dimemas sweep of a synthetic halo trace, triggered
//! through ReplayService over real gRPC, run once with 1 worker and once with 2
//! (each worker runs one job at a time), each against a fresh in-process
//! coordinator with SQLite state and a local lake. Prints both wall times and the
//! ratio (issue target: 2 workers ≤ 0.6 × 1 worker on this 2-core machine).
//!
//! Knobs (environment): BENCH_RANKS (64), BENCH_ITERS (400) shape the trace.
use std::sync::Arc;
use std::time::{Duration, Instant};

use benchlake_coordinator::store::{SqliteStore, StateStore};
use benchlake_coordinator::{Coordinator, CoordinatorConfig};
use benchlake_core::clock::SystemClock;
use benchlake_core::lake::{Lake, StoreConfig};
use benchlake_proto::client::{Auth, channel};
use benchlake_proto::v1 as pb;

fn env(name: &str, default: u32) -> u32 {
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
    let ranks = env("BENCH_RANKS", 64);
    let iters = env("BENCH_ITERS", 400);
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("halo.dim");
    let halo = benchlake_replay::synth::Halo::new(ranks, iters);
    halo.write_dim(&trace).expect("trace");
    let data = std::fs::read(&trace).expect("read trace");
    println!(
        "sweep bench: {ranks}-rank halo, {} records per point, 64 points (8 latencies x 8 bandwidths), load {}",
        halo.records(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let mut walls = Vec::new();
    for workers in [1usize, 2] {
        let wall = rt.block_on(sweep(workers, &data));
        println!("  {workers} worker(s): {wall:.2} s");
        walls.push(wall);
    }
    println!("  ratio 2 workers / 1 worker: {:.3}", walls[1] / walls[0]);
}

async fn sweep(workers: usize, trace: &[u8]) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let store_cfg = StoreConfig {
        url: dir.path().join("lake").display().to_string(),
        ..Default::default()
    };
    let cfg = CoordinatorConfig {
        state_path: dir.path().join("state.db"),
        store: store_cfg.clone(),
        ..Default::default()
    };
    let store: Arc<dyn StateStore> = Arc::new(SqliteStore::open(&cfg.state_path).expect("store"));
    let lake = Lake::open(&cfg.store).expect("lake");
    let coord = Coordinator::new(store, lake, Arc::new(SystemClock), cfg).expect("coordinator");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(benchlake_coordinator::serve(coord, listener, async {
        let _ = stop_rx.await;
    }));
    let mut stops = Vec::new();
    for w in 0..workers {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let wcfg = benchlake_worker::WorkerConfig {
            coordinator: addr.clone(),
            token: None,
            name: format!("bench-worker-{w}"),
            store: store_cfg.clone(),
            concurrency: 1,
            scratch_dir: dir.path().join(format!("scratch-{w}")),
            lease_wait: Duration::from_millis(500),
            commit_delay: Duration::ZERO,
            retry_for: benchlake_proto::retry::DEFAULT_RETRY_FOR,
        };
        tokio::spawn(async move {
            let _ = benchlake_worker::run(wcfg, benchlake_worker::Executors::builtin(), rx).await;
        });
        stops.push(tx);
    }
    let axis = |p: &str, v: Vec<String>| pb::SweepAxis {
        param: p.into(),
        values: v,
    };
    let lat: Vec<String> = (0..8).map(|i| format!("{}e-6", 1 + 3 * i)).collect();
    let bw: Vec<String> = (0..8).map(|i| format!("{}", 500 * (1 << i))).collect();
    let t = Instant::now();
    let mut rc = pb::replay_service_client::ReplayServiceClient::with_interceptor(
        channel(&addr).expect("ch"),
        Auth::default(),
    )
    .max_encoding_message_size(64 << 20);
    let r = rc
        .trigger_replay(pb::TriggerReplayRequest {
            trace: Some(pb::TraceRef {
                source: Some(pb::trace_ref::Source::Uploaded(pb::UploadedTrace {
                    file_name: "halo.dim".into(),
                    data: trace.to_vec(),
                })),
            }),
            model: benchlake_replay::models::DIMEMAS.name.into(),
            params: Default::default(),
            sweep: vec![axis("latency", lat), axis("bandwidth", bw)],
            calibration: String::new(),
        })
        .await
        .expect("trigger")
        .into_inner();
    assert_eq!(r.points, 64);
    let mut runs = pb::run_service_client::RunServiceClient::with_interceptor(
        channel(&addr).expect("ch"),
        Auth::default(),
    );
    loop {
        let d = runs
            .get_run(pb::GetRunRequest {
                run_id: r.run_id.clone(),
            })
            .await
            .expect("get run")
            .into_inner();
        let state = d.run.as_ref().map(|x| x.state).unwrap_or_default();
        if state == pb::RunState::Succeeded as i32 {
            break;
        }
        assert!(
            state != pb::RunState::Failed as i32 && state != pb::RunState::Cancelled as i32,
            "sweep run ended {state}: {:?}",
            d.run.map(|x| x.error)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wall = t.elapsed().as_secs_f64();
    for s in stops {
        let _ = s.send(true);
    }
    let _ = stop_tx.send(());
    wall
}
