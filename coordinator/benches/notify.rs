//! Notification outbox speed (`cargo bench -p benchlake-coordinator --bench
//! notify`): a coordinator with SQLite state on disk and one signed webhook
//! pointing at a local HTTP receiver (axum on loopback, answering 200).
//!
//! 1. enqueue: BENCH_RUNS (2,000) transactions, each writing the outbox rows
//!    of one FAILED run for two notifiers (what a run's final transition
//!    adds to its transaction); the median and 99th percentile per
//!    transaction.
//! 2. delivery: BENCH_DELIVERIES (2,000) PENDING rows with their payload built
//!    (1.1 kB of JSON, as a pio FAIL has) sent by `Outbox::deliver_due`
//!    until none is due; deliveries per second and the time to drain, and
//!    the receiver's count (every one arrives once).
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use benchlake_coordinator::Coordinator;
use benchlake_coordinator::config::CoordinatorConfig;
use benchlake_coordinator::model::*;
use benchlake_coordinator::notify::{NotifyConfig, Outbox, Webhook, enqueue, parse_url};
use benchlake_core::clock::SystemClock;
use benchlake_core::lake::{Lake, StoreConfig};

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

fn spec() -> Spec {
    serde_json::from_value(serde_json::json!({
        "benchmark": "pio",
        "params": {"np": "4", "check_io_write_bw_mib_s": "2000"},
        "nodes": {"names": [], "labels": {}, "count": 1},
        "launcher": "local",
        "max_attempts": 3,
        "timeout_s": 600,
    }))
    .expect("spec")
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn bench() {
    let runs = env("BENCH_RUNS", 2_000);
    let deliveries = env("BENCH_DELIVERIES", 2_000);
    let dir = tempfile::tempdir().expect("tempdir");

    // The receiver.
    let received = Arc::new(AtomicU64::new(0));
    let r2 = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: http::HeaderMap, body: bytes::Bytes| {
            let r = r2.clone();
            async move {
                if headers.contains_key("x-benchlake-signature") && !body.is_empty() {
                    r.fetch_add(1, Ordering::Relaxed);
                }
                http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let mut notify = NotifyConfig {
        webhooks: vec![Webhook {
            name: "ops".into(),
            url: parse_url("bench", &format!("http://{addr}/hook")).expect("url"),
            secret: Some(b"bench-secret-0123456789".to_vec()),
        }],
        ..Default::default()
    };
    notify.webhooks.push(Webhook {
        name: "team".into(),
        ..notify.webhooks[0].clone()
    });
    let cfg = CoordinatorConfig {
        state_path: dir.path().join("state.db"),
        store: StoreConfig {
            url: dir.path().join("lake").display().to_string(),
            ..Default::default()
        },
        background: false,
        notify,
        ..Default::default()
    };
    let lake = Lake::open(&cfg.store).expect("lake");
    let store: Arc<dyn benchlake_coordinator::store::StateStore> =
        Arc::new(benchlake_coordinator::store::SqliteStore::open(&cfg.state_path).expect("store"));
    let c = Coordinator::new(store, lake, Arc::new(SystemClock), cfg.clone()).expect("coordinator");

    // 1. Enqueue in the final transition's transaction.
    let mut times = Vec::with_capacity(runs as usize);
    for i in 0..runs {
        let mut run = RunRow::new(
            format!("01RUN{i:021}"),
            spec(),
            "io",
            Origin {
                notify: vec!["team".into()],
                ..Default::default()
            },
            c.now(),
        );
        run.state = RunState::Failed;
        let mut cfg = cfg.clone();
        cfg.notify.defaults = vec!["ops".into()];
        let t0 = Instant::now();
        let wrote = c
            .store()
            .transact(|tx| enqueue(tx, &cfg.notify, &run, run.submitted_at_ms))
            .expect("enqueue");
        times.push(t0.elapsed().as_secs_f64() * 1e6);
        assert!(wrote);
    }
    println!(
        "enqueue: {runs} transactions of 2 outbox rows: median {:.0} us, p99 {:.0} us",
        percentile(&mut times, 0.5),
        percentile(&mut times, 0.99)
    );
    // Those rows have no payload yet (their runs are not in the store): mark
    // them sent, so only the prepared rows below are delivered.
    c.store()
        .transact(|tx| {
            for n in tx.due_notifications(i64::MAX, 100_000)? {
                let mut n = n;
                n.state = NotificationState::Skipped;
                tx.update_notification(&n)?;
            }
            Ok(())
        })
        .expect("clear");

    // 2. Delivery of prepared rows.
    let body = serde_json::json!({
        "event": "verdict.fail", "delivery_id": "x", "notifier": "ops", "time": "2026-11-24T05:36:54.216Z",
        "run": {"run_id": "01M860X70CMB5V232CWPBV4E2K", "status": "SUCCEEDED", "verdict": "FAIL", "benchmark": "pio",
                "kind": "io", "params": {"np": "4", "block_size": "4194304", "check_io_write_bw_mib_s": "2000",
                "file_per_proc": "false", "fsync": "true", "iterations": "1", "pattern": "segmented"},
                "agents": ["node17"], "error": null, "date": "2026-11-24", "submitted_at": "2026-11-24T05:36:53.772Z",
                "started_at": "2026-11-24T05:36:53.919Z", "finished_at": "2026-11-24T05:36:54.135Z", "scheduled_for": null},
        "schedule": null,
        "failing_checks": [{"check": "io.write_bw_mib_s", "status": "FAIL", "value": 261.73, "reference": 2000.0,
                            "unit": "MiB/s", "message": "261.7310 MiB/s is below the bound 2000"}],
        "failing_nodes": [{"node": "node17", "checks": [{"check": "io.write_bw_mib_s", "status": "FAIL", "value": 261.73,
                            "reference": 2000.0, "unit": "MiB/s", "message": "261.7310 MiB/s is below the bound 2000"}]}],
        "links": {"run": "https://benchlake.example.org/runs/01M860X70CMB5V232CWPBV4E2K"},
    })
    .to_string();
    let now = c.now();
    c.store()
        .transact(|tx| {
            for i in 0..deliveries {
                let mut n = NotificationRow::new(&format!("01DEL{i:021}"), "ops", now);
                n.event = Some("verdict.fail".into());
                n.body = Some(body.clone());
                tx.insert_notification(&n)?;
            }
            Ok(())
        })
        .expect("rows");
    let outbox = Outbox::new(&c.config().notify).expect("outbox");
    let t0 = Instant::now();
    let mut rounds = 0;
    while outbox.deliver_due(&c).await.expect("deliver") > 0 {
        rounds += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    let got = received.load(Ordering::Relaxed);
    println!(
        "delivery: {deliveries} signed webhooks of {} bytes in {secs:.2} s ({:.0}/s, {rounds} rounds of up to 32); receiver got {got}",
        body.len(),
        deliveries as f64 / secs
    );
    assert_eq!(got, deliveries, "every delivery arrives once");
    let delivered = c.metrics().notifications.get(&["delivered"]);
    assert_eq!(delivered, deliveries);
}
