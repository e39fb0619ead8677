//! Dashboard page times (`cargo bench -p benchlake --bench dashboard`): a
//! coordinator with SQLite state on disk holding BENCH_RUNS (10,000) runs
//! (one task each, half of them from 20 schedules) and BENCH_AGENTS (1,000)
//! registered agents with six catalog entries each, and verdicts of three
//! checks for every finished run in the in-memory verdict index (as the
//! start-up load leaves it). The coordinator's HTTP router serves on
//! loopback; each page is fetched BENCH_REPEAT (9) times over HTTP/1.1 after
//! one warm-up, and the median and maximum wall times are printed with the
//! body size. Target (issue 15): `/` and `/runs` at most 300 ms each.
//!
//! Then a LinkTest run of BENCH_LT_RANKS (4,096; 0 skips it) synthetic ranks
//! (`probe linktest`'s generator, 48 ranks per host) committed to the lake
//! and recorded in the state store, with its per-host summary
//! (`linktest_host_summary`, as the ingest job writes it; BENCH_LT_SUMMARY=0
//! leaves it out, as for runs ingested before it existed): the page's first
//! request (from the summary; without it, the view derived from 16.8 M pair
//! rows and cached), the page again, then the pair view (`?matrix=1`) first
//! and again, the matrix image and the hover's pair lookup.
use std::sync::Arc;
use std::time::{Duration, Instant};

use benchlake_coordinator::config::CoordinatorConfig;
use benchlake_coordinator::http::Http;
use benchlake_coordinator::model::*;
use benchlake_coordinator::verdicts::CheckRow;
use benchlake_coordinator::{Coordinator, store::StateStore};
use benchlake_core::clock::SystemClock;
use benchlake_core::lake::{Lake, StoreConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

fn spec(bench: &str) -> Spec {
    serde_json::from_value(serde_json::json!({
        "benchmark": bench,
        "params": {"np": "4", "block_size": "16777216", "dir": "/scratch/bench"},
        "nodes": {"names": [], "labels": {}, "count": 1},
        "launcher": "local",
        "max_attempts": 3,
        "timeout_s": 600,
    }))
    .expect("spec")
}

fn agent(i: u64, now: i64) -> AgentRow {
    let catalog: Vec<serde_json::Value> = ["hostinfo", "sleep", "pio", "netprobe", "ior", "mdtest"]
        .iter()
        .map(|b| {
            serde_json::json!({
                "name": b, "kind": b, "description": format!("{b} of the bench catalog"),
                "timeout_s": 600, "launchers": ["local", "mpirun"],
                "params": [
                    {"name": "np", "type": "int", "default": "1", "description": "ranks"},
                    {"name": "block_size", "type": "size", "default": "1M", "description": "block"},
                ],
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "name": format!("node{i:04}"),
        "labels": {"rack": format!("r{}", i / 40)},
        "hostname": format!("node{i:04}.cluster"),
        "cores": 128, "memory_bytes": 512u64 << 30,
        "address": format!("10.0.{}.{}:7701", i / 250, i % 250),
        "version": "bench", "slots": 1,
        "catalog": catalog,
        "state": if i.is_multiple_of(97) { "Lost" } else { "Online" },
        "drain": i.is_multiple_of(211),
        "registered_ms": now - 86_400_000, "last_heartbeat_ms": now,
    }))
    .expect("agent")
}

async fn get(addr: &str, path: &str) -> (Duration, usize, u16) {
    let t0 = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::with_capacity(1 << 20);
    s.read_to_end(&mut buf).await.expect("read");
    let dt = t0.elapsed();
    let status = std::str::from_utf8(&buf[..buf.len().min(12)])
        .ok()
        .and_then(|l| l.get(9..12))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (dt, buf.len(), status)
}

async fn bench() {
    let n_runs = env("BENCH_RUNS", 10_000);
    let n_agents = env("BENCH_AGENTS", 1_000);
    let repeat = env("BENCH_REPEAT", 9).max(1) as usize;
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
    let now = chrono::Utc::now().timestamp_millis();
    let t_fill = Instant::now();
    let mut ids = ulid::Generator::new();
    let mut finished = Vec::new();
    store
        .transact(|tx| {
            for i in 0..n_agents {
                tx.upsert_agent(&agent(i, now))?;
            }
            let mut schedules = Vec::new();
            for s in 0..20u64 {
                let row: ScheduleRow = serde_json::from_value(serde_json::json!({
                    "schedule_id": ulid::Ulid::new().to_string(),
                    "name": format!("nightly-{s:02}"),
                    "cron": "0 2 * * *", "time_zone": "UTC", "catch_up": "Latest",
                    "max_catch_up": 1, "allow_overlap": false, "paused": false,
                    "spec": spec(if s % 2 == 0 { "pio" } else { "netprobe" }),
                    "next_fire_ms": now + 3_600_000, "last_fire_ms": now, "created_ms": now,
                }))
                .expect("schedule");
                tx.insert_schedule(&row)?;
                schedules.push(row.schedule_id);
            }
            for i in 0..n_runs {
                let t = now - ((n_runs - i) as i64) * 60_000;
                let id = ids
                    .generate_from_datetime(
                        std::time::UNIX_EPOCH + Duration::from_millis(t as u64),
                    )
                    .expect("ulid")
                    .to_string();
                let bench = ["pio", "netprobe", "hostinfo", "ior"][(i % 4) as usize];
                let origin = Origin {
                    schedule_id: (i % 2 == 0).then(|| schedules[(i / 2 % 20) as usize].clone()),
                    ..Default::default()
                };
                let mut r = RunRow::new(id.clone(), spec(bench), "io", origin, t);
                let running = i + 50 >= n_runs;
                r.state = if running {
                    RunState::Running
                } else if i % 37 == 0 {
                    RunState::Failed
                } else {
                    RunState::Succeeded
                };
                r.started_at_ms = Some(t + 1_000);
                if !running {
                    r.finished_at_ms = Some(t + 30_000);
                    finished.push((id.clone(), format!("node{:04}", i % n_agents)));
                }
                if r.state == RunState::Failed {
                    r.error = Some("task failed: exit code 1".into());
                }
                tx.insert_run(&r)?;
                let task: TaskRow = serde_json::from_value(serde_json::json!({
                    "task_id": ulid::Ulid::new().to_string(), "run_id": id,
                    "agent": format!("node{:04}", i % n_agents), "rank": 0, "num_tasks": 1,
                    "state": if running { "Running" } else { "Done" },
                    "attempt": 1, "max_attempts": 3, "lease_id": null, "lease_expires_ms": null,
                    "not_before_ms": 0, "error": null, "exit_code": if running { None } else { Some(0) },
                    "stdout_tail": "ok\n", "stderr_tail": "", "outputs": [],
                    "started_at_ms": t + 1_000, "finished_at_ms": if running { None } else { Some(t + 30_000) },
                    "peers": [],
                }))
                .expect("task");
                tx.insert_task(&task)?;
            }
            Ok(())
        })
        .expect("fill");
    let lake = Lake::open(&cfg.store).expect("lake");
    let lt_ranks = env("BENCH_LT_RANKS", 4096) as usize;
    let lt_run = if lt_ranks >= 2 {
        Some(linktest_run(&store, &lake, lt_ranks, now).await)
    } else {
        None
    };
    let coord =
        Coordinator::new(store, lake, Arc::new(SystemClock), cfg.clone()).expect("coordinator");
    for (k, (id, node)) in finished.iter().enumerate() {
        let status = |bad: bool| if bad { "FAIL" } else { "PASS" };
        let rows = [
            "io.write_bw_mib_s",
            "io.read_bw_mib_s",
            "linktest.max_time_s",
        ]
        .iter()
        .enumerate()
        .map(|(c, check)| CheckRow {
            check: (*check).into(),
            status: status((k + c) % 53 == 0).into(),
            value: Some(1000.0 + k as f64),
            reference: Some(900.0),
            unit: "MiB/s".into(),
            message: "bench".into(),
            ..Default::default()
        })
        .collect();
        coord.verdicts().record(
            id,
            &format!("tables/checks/x/run_id={id}/part-x.parquet"),
            std::slice::from_ref(node),
            rows,
        );
    }
    coord.verdicts().set_loaded();
    let fill = t_fill.elapsed();

    let http = Http::new(&cfg);
    http.set_serving(coord.clone(), false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let cfg2 = cfg.clone();
    tokio::spawn(async move {
        let _ = http.serve(&cfg2, listener, std::future::pending()).await;
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    println!(
        "dashboard bench: {n_runs} runs, {n_agents} agents, 20 schedules, {} runs with verdicts (filled in {:.1} s)",
        finished.len(),
        fill.as_secs_f64()
    );
    let deep = finished
        .get(finished.len() / 2)
        .map(|f| f.0.clone())
        .unwrap_or_default();
    let pages = [
        "/".to_string(),
        "/runs".to_string(),
        "/runs?status=FAILED".to_string(),
        "/runs?verdict=FAIL".to_string(),
        format!("/runs?before={deep}"),
        format!("/runs/{deep}"),
    ];
    println!(
        "{:<44} {:>10} {:>10} {:>10} {:>6}",
        "page", "median ms", "max ms", "bytes", "status"
    );
    for p in &pages {
        let _ = get(&addr, p).await;
        page_times(&addr, p, repeat).await;
    }
    if let Some(id) = lt_run {
        let page = format!("/runs/{id}/linktest");
        let (dt, n, st) = get(&addr, &page).await;
        println!(
            "{:<44} {:>10.1} {:>10} {:>10} {:>6}",
            format!("{page} (first: derive + cache)")
                .chars()
                .take(44)
                .collect::<String>(),
            dt.as_secs_f64() * 1e3,
            "",
            n,
            st
        );
        page_times(&addr, &page, repeat).await;
        let matrix = format!("{page}?matrix=1");
        let (dt, n, st) = get(&addr, &matrix).await;
        println!(
            "{:<44} {:>10.1} {:>10} {:>10} {:>6}",
            "?matrix=1 (first: derive + cache)",
            dt.as_secs_f64() * 1e3,
            "",
            n,
            st
        );
        for p in [
            matrix.clone(),
            format!("{page}/matrix.png"),
            format!("/api/runs/{id}/linktest/pair?from=1&to={}", lt_ranks - 1),
        ] {
            page_times(&addr, &p, repeat).await;
        }
    }
}

/// Fetches `p` `repeat` times and prints the median and maximum.
async fn page_times(addr: &str, p: &str, repeat: usize) {
    let mut times = Vec::new();
    let (mut size, mut status) = (0, 0);
    for _ in 0..repeat {
        let (dt, n, st) = get(addr, p).await;
        times.push(dt.as_secs_f64() * 1e3);
        size = n;
        status = st;
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let shown: String = p.chars().take(44).collect();
    println!(
        "{shown:<44} {:>10.1} {:>10.1} {:>10} {:>6}",
        times[times.len() / 2],
        times[times.len() - 1],
        size,
        status
    );
}

/// A LinkTest run of `ranks` synthetic ranks: its tables written to `lake`
/// and recorded as committed in `store`, as a worker's ingest leaves them.
async fn linktest_run(store: &Arc<dyn StateStore>, lake: &Lake, ranks: usize, now: i64) -> String {
    let t0 = Instant::now();
    let id = ulid::Ulid::new().to_string();
    let job = ulid::Ulid::new().to_string();
    let run = benchlake_formats::linktest::synth::synthetic_run(ranks, 48, 7);
    let source = format!("raw/{id}/{job}/pingpong_results_bin.sion");
    let mut outputs =
        benchlake_formats::linktest::into_run_tables(run, &id, &source).expect("linktest tables");
    if env("BENCH_LT_SUMMARY", 1) == 1 {
        let t = Instant::now();
        let summary = benchlake_analysis::summaries::derive(
            "linktest",
            &id,
            &[],
            &outputs,
            &Default::default(),
        )
        .expect("linktest_host_summary");
        println!(
            "linktest_host_summary derived in {:.3} s",
            t.elapsed().as_secs_f64()
        );
        outputs.extend(summary);
    }
    let mut r = RunRow::new(
        id.clone(),
        spec("netprobe"),
        "netprobe",
        Origin::default(),
        now,
    );
    r.state = RunState::Succeeded;
    r.started_at_ms = Some(now);
    r.finished_at_ms = Some(now + 60_000);
    let keys = lake
        .write_final(&outputs, &r.date, &id, &job)
        .await
        .expect("write linktest tables");
    let mut files = Vec::new();
    for (o, key) in outputs.iter().zip(&keys) {
        let bytes = lake.size(key).await.expect("size").unwrap_or(0);
        files.push(CommittedFile {
            key: key.clone(),
            table: o.table.clone(),
            run_id: id.clone(),
            job_id: job.clone(),
            date: r.date.clone(),
            rows: o.rows() as u64,
            bytes,
            committed_ms: now,
            merged: None,
        });
    }
    store
        .transact(|tx| {
            tx.insert_run(&r)?;
            for f in &files {
                tx.upsert_committed(f)?;
            }
            Ok(())
        })
        .expect("record the linktest run");
    println!(
        "linktest run {id}: {ranks} ranks, {} pair rows, {} MB of Parquet, written in {:.1} s",
        outputs
            .iter()
            .filter(|o| o.table == "linktest_timings")
            .map(|o| o.rows())
            .sum::<usize>(),
        files.iter().map(|f| f.bytes).sum::<u64>() / 1_000_000,
        t0.elapsed().as_secs_f64()
    );
    id
}
