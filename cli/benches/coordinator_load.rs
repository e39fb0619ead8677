//! Coordinator load benchmark (`cargo bench -p benchlake --bench coordinator_load`):
//! 1,000 simulated agents heartbeat once a second while worker clients lease and
//! complete no-op jobs as fast as they can, all over real gRPC on loopback
//! against a coordinator with SQLite state on disk. Prints the lease+complete
//! round trips per second and the lease latency percentiles.
//!
//! Knobs (environment): BENCH_AGENTS (10000), BENCH_WORKERS (16 concurrent
//! worker clients), BENCH_SECS (10), BENCH_JOBS (150000 pre-queued jobs),
//! BENCH_STATE (`sqlite`, or `postgres`: a PostgreSQL server the bench starts
//! with initdb/pg_ctl and its default durability, the coordinator leading
//! with a fencing token as in production).
//!
//! `BENCH_MODE=submit`: for each count of BENCH_REGISTERED (`1000,10000`)
//! registered agents (each offering 6 benchmarks), a fresh coordinator with
//! SQLite on disk and its background loop; BENCH_HEARTBEATING (1000) of the
//! agents heartbeat once a second while BENCH_SUBMITTERS (8) concurrent user
//! clients submit one-agent runs (`sleep`, least loaded of all eligible agents)
//! as fast as they can for BENCH_SECS (10, at most 30). With BENCH_HB_TASKS=1
//! every heartbeat also lists a running task (an unknown id, so the coordinator
//! answers "cancel it"). With BENCH_READERS=N (0), N user clients meanwhile
//! do what people at a terminal or a dashboard do, each once every
//! BENCH_READ_MS (100): `run list` (ListRuns, 100 newest), `run show` of one
//! of them (GetRun) and `schedule list` (ListSchedules), round robin; with
//! BENCH_POLLERS=N (0), N agent clients each call PollTask (`wait_ms` 0) every
//! BENCH_POLL_MS (100) as the registered agents in turn. Prints submits per
//! second and submit, heartbeat, poll and read latency percentiles.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use benchlake_coordinator::model::*;
use benchlake_coordinator::store::{SqliteStore, StateStore};
use benchlake_coordinator::{Coordinator, CoordinatorConfig, lifecycle};
use benchlake_core::bench::LauncherKind;
use benchlake_core::clock::SystemClock;
use benchlake_core::lake::{Lake, StoreConfig};
use benchlake_proto::client::{Auth, channel};
use benchlake_proto::v1 as pb;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)] as f64 / 1000.0
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if std::env::var("BENCH_MODE").as_deref() == Ok("submit") {
        rt.block_on(bench_submit());
    } else {
        rt.block_on(bench());
    }
}

/// A catalog like a real agent's: six benchmarks with typed parameters.
fn catalog() -> Vec<pb::BenchmarkDef> {
    let p = |name: &str, ty: &str, default: &str| pb::ParamDef {
        name: name.into(),
        r#type: ty.into(),
        default: Some(default.into()),
        description: format!("the {name} parameter"),
        ..Default::default()
    };
    ["hostinfo", "sleep", "pio", "netprobe", "ior", "mdtest"]
        .iter()
        .map(|b| pb::BenchmarkDef {
            name: (*b).into(),
            kind: (*b).into(),
            description: format!("{b}: a benchmark of the load test's catalog"),
            params: vec![
                p("seconds", "int", "1"),
                p("size", "size", "1M"),
                p("verify", "bool", "false"),
            ],
            outputs: vec![pb::OutputDef {
                file: "out.json".into(),
                format: (*b).into(),
                required: false,
            }],
            timeout_s: 60,
            max_timeout_s: 600,
            launchers: vec!["local".into()],
            run_as: None,
        })
        .collect()
}

async fn bench_submit() {
    let counts: Vec<u64> = std::env::var("BENCH_REGISTERED")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    for n in counts {
        submit_scenario(n).await;
    }
}

async fn submit_scenario(registered: u64) {
    let heartbeating = env("BENCH_HEARTBEATING", 1000).min(registered);
    let submitters = env("BENCH_SUBMITTERS", 8);
    let secs = env("BENCH_SECS", 10).min(30);
    let hb_with_task = env("BENCH_HB_TASKS", 0) == 1;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = CoordinatorConfig {
        state_path: dir.path().join("state.db"),
        store: StoreConfig {
            url: dir.path().join("lake").display().to_string(),
            ..Default::default()
        },
        heartbeat_interval_ms: 1000,
        ..Default::default()
    };
    let coord = Coordinator::open(cfg, Arc::new(SystemClock)).expect("coordinator");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(benchlake_coordinator::serve(coord, listener, async {
        let _ = stop_rx.await;
    }));

    // Register every agent (8 concurrent clients).
    let t = Instant::now();
    let mut regs = Vec::new();
    for g in 0..8u64 {
        let mut ac = pb::agent_service_client::AgentServiceClient::with_interceptor(
            channel(&addr).expect("ch"),
            Auth::default(),
        );
        regs.push(tokio::spawn(async move {
            for i in (0..registered).filter(|i| i % 8 == g) {
                ac.register(pb::RegisterRequest {
                    protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
                    name: format!("sim-{i:05}"),
                    hostname: format!("node{i:05}"),
                    cores: 128,
                    labels: [
                        ("rack".to_string(), format!("r{}", i % 40)),
                        ("partition".to_string(), "batch".to_string()),
                    ]
                    .into_iter()
                    .collect(),
                    catalog: catalog(),
                    ..Default::default()
                })
                .await
                .expect("register");
            }
        }));
    }
    for r in regs {
        r.await.expect("register task");
    }
    let reg_s = t.elapsed().as_secs_f64();

    let stop = Arc::new(AtomicBool::new(false));
    let hb_lat = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    // Latency from the time the heartbeat was due (a client that waits for a
    // slow answer sends its next heartbeats late: those count too).
    let hb_due = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let hb_err = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    let hb_tasks = 20u64;
    for g in 0..hb_tasks {
        let (stop, hb_lat, hb_due, hb_err) =
            (stop.clone(), hb_lat.clone(), hb_due.clone(), hb_err.clone());
        let mut ac = pb::agent_service_client::AgentServiceClient::with_interceptor(
            channel(&addr).expect("ch"),
            Auth::default(),
        );
        // Spread over the registered agents.
        let step = (registered / heartbeating).max(1);
        let mine: Vec<u64> = (0..heartbeating)
            .filter(|i| i % hb_tasks == g)
            .map(|i| i * step)
            .collect();
        handles.push(tokio::spawn(async move {
            let gap = Duration::from_secs_f64(1.0 / mine.len().max(1) as f64);
            let mut iv = tokio::time::interval(gap);
            let mut lat = Vec::new();
            let mut due_lat = Vec::new();
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let due = iv.tick().await;
                let name = format!("sim-{:05}", mine[k % mine.len()]);
                k += 1;
                let running_task_ids = if hb_with_task {
                    vec![benchlake_core::ids::new_id()]
                } else {
                    vec![]
                };
                let t = Instant::now();
                match ac
                    .heartbeat(pb::HeartbeatRequest {
                        name,
                        running_task_ids,
                    })
                    .await
                {
                    Ok(_) => {
                        lat.push(t.elapsed().as_micros() as u64);
                        due_lat.push(due.elapsed().as_micros() as u64);
                    }
                    Err(_) => {
                        hb_err.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            hb_lat.lock().expect("lock").extend(lat);
            hb_due.lock().expect("lock").extend(due_lat);
        }));
    }
    // Let the heartbeats settle for a second before the submits start.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let sub_lat = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let start = Instant::now();
    let mut subs = Vec::new();
    for _ in 0..submitters {
        let (stop, done, failed, sub_lat) =
            (stop.clone(), done.clone(), failed.clone(), sub_lat.clone());
        let mut rc = pb::run_service_client::RunServiceClient::with_interceptor(
            channel(&addr).expect("ch"),
            Auth::default(),
        );
        subs.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r = rc
                    .submit_run(pb::SubmitRunRequest {
                        spec: Some(pb::BenchmarkSpec {
                            benchmark: "sleep".into(),
                            params: [("seconds".to_string(), "1".to_string())]
                                .into_iter()
                                .collect(),
                            nodes: Some(pb::NodeSelector {
                                count: 1,
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .await;
                lat.push(t.elapsed().as_micros() as u64);
                match r {
                    Ok(_) => done.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("submit failed: {e}");
                        }
                        0
                    }
                };
            }
            sub_lat.lock().expect("lock").extend(lat);
        }));
    }
    let readers = env("BENCH_READERS", 0);
    let read_gap = Duration::from_millis(env("BENCH_READ_MS", 100).max(1));
    // (call, latency µs) of every read.
    let read_lat = Arc::new(std::sync::Mutex::new(Vec::<(usize, u64)>::new()));
    let read_err = Arc::new(AtomicU64::new(0));
    for g in 0..readers {
        let (stop, read_lat, read_err) = (stop.clone(), read_lat.clone(), read_err.clone());
        let ch = channel(&addr).expect("ch");
        let mut rc =
            pb::run_service_client::RunServiceClient::with_interceptor(ch.clone(), Auth::default());
        let mut sc = pb::schedule_service_client::ScheduleServiceClient::with_interceptor(
            ch,
            Auth::default(),
        );
        subs.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut iv = tokio::time::interval(read_gap);
            let mut last_run = String::new();
            let mut k = g as usize;
            while !stop.load(Ordering::Relaxed) {
                iv.tick().await;
                let call = k % 3;
                k += 1;
                let t = Instant::now();
                let ok = match call {
                    0 => match rc.list_runs(pb::ListRunsRequest::default()).await {
                        Ok(r) => {
                            if let Some(x) = r.into_inner().runs.first() {
                                last_run = x.run_id.clone();
                            }
                            true
                        }
                        Err(_) => false,
                    },
                    1 if !last_run.is_empty() => rc
                        .get_run(pb::GetRunRequest {
                            run_id: last_run.clone(),
                        })
                        .await
                        .is_ok(),
                    1 => continue,
                    _ => sc
                        .list_schedules(pb::ListSchedulesRequest::default())
                        .await
                        .is_ok(),
                };
                if ok {
                    lat.push((call, t.elapsed().as_micros() as u64));
                } else {
                    read_err.fetch_add(1, Ordering::Relaxed);
                }
            }
            read_lat.lock().expect("lock").extend(lat);
        }));
    }
    // BENCH_POLLERS=N (0): N agent clients each ask for a task every
    // BENCH_POLL_MS (100) as one of the registered agents in turn, with
    // `wait_ms` 0 (the cost of an answer, not the long poll's hold); a task
    // they get is left running (its run stays RUNNING).
    let pollers = env("BENCH_POLLERS", 0);
    let poll_gap = Duration::from_millis(env("BENCH_POLL_MS", 100).max(1));
    let poll_lat = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let poll_err = Arc::new(AtomicU64::new(0));
    let leased = Arc::new(AtomicU64::new(0));
    for g in 0..pollers {
        let (stop, poll_lat, poll_err, leased) = (
            stop.clone(),
            poll_lat.clone(),
            poll_err.clone(),
            leased.clone(),
        );
        let mut ac = pb::agent_service_client::AgentServiceClient::with_interceptor(
            channel(&addr).expect("ch"),
            Auth::default(),
        );
        subs.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut iv = tokio::time::interval(poll_gap);
            let mut k = g;
            while !stop.load(Ordering::Relaxed) {
                iv.tick().await;
                let name = format!("sim-{:05}", k % registered);
                k += pollers;
                let t = Instant::now();
                match ac
                    .poll_task(pb::PollTaskRequest {
                        name,
                        free_slots: 1,
                        wait_ms: 0,
                    })
                    .await
                {
                    Ok(r) => {
                        lat.push(t.elapsed().as_micros() as u64);
                        if r.into_inner().task.is_some() {
                            leased.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(_) => {
                        poll_err.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            poll_lat.lock().expect("lock").extend(lat);
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    for h in subs.into_iter().chain(handles) {
        let _ = h.await;
    }
    let _ = stop_tx.send(());
    let _ = server.await;
    let n = done.load(Ordering::Relaxed);
    let mut sl = sub_lat.lock().expect("lock").clone();
    let mut hl = hb_lat.lock().expect("lock").clone();
    let mut hd = hb_due.lock().expect("lock").clone();
    println!(
        "submit load: {registered} registered agents (registered in {reg_s:.1} s), {heartbeating} heartbeating at 1/s{}, {submitters} submitters, {elapsed:.1} s, SQLite on disk",
        if hb_with_task {
            " with a running task"
        } else {
            ""
        }
    );
    println!(
        "  submits: {n} = {:.0} /s ({} failed); latency ms p50 {:.2} p99 {:.2} max {:.2}",
        n as f64 / elapsed,
        failed.load(Ordering::Relaxed),
        pct(&mut sl, 0.50),
        pct(&mut sl, 0.99),
        pct(&mut sl, 1.0)
    );
    println!(
        "  heartbeats: {} answered ({} failed); latency ms p50 {:.2} p99 {:.2} max {:.2}; from due time p50 {:.2} p99 {:.2} max {:.2}",
        hl.len(),
        hb_err.load(Ordering::Relaxed),
        pct(&mut hl, 0.50),
        pct(&mut hl, 0.99),
        pct(&mut hl, 1.0),
        pct(&mut hd, 0.50),
        pct(&mut hd, 0.99),
        pct(&mut hd, 1.0)
    );
    if pollers > 0 {
        let mut v = poll_lat.lock().expect("lock").clone();
        println!(
            "  PollTask: {} answered ({} failed, {} with a task); latency ms p50 {:.2} p99 {:.2} max {:.2} ({pollers} pollers, one call each every {} ms)",
            v.len(),
            poll_err.load(Ordering::Relaxed),
            leased.load(Ordering::Relaxed),
            pct(&mut v, 0.50),
            pct(&mut v, 0.99),
            pct(&mut v, 1.0),
            poll_gap.as_millis()
        );
    }
    if readers > 0 {
        let all = read_lat.lock().expect("lock").clone();
        for (i, name) in ["ListRuns (100 newest)", "GetRun", "ListSchedules"]
            .iter()
            .enumerate()
        {
            let mut v: Vec<u64> = all.iter().filter(|(c, _)| *c == i).map(|x| x.1).collect();
            println!(
                "  {name}: {} answered; latency ms p50 {:.2} p99 {:.2} max {:.2}",
                v.len(),
                pct(&mut v, 0.50),
                pct(&mut v, 0.99),
                pct(&mut v, 1.0)
            );
        }
        println!(
            "  reads failed: {} ({readers} readers, one call each every {} ms)",
            read_err.load(Ordering::Relaxed),
            read_gap.as_millis()
        );
    }
}

async fn bench() {
    let agents = env("BENCH_AGENTS", 10_000);
    let workers = env("BENCH_WORKERS", 16);
    let secs = env("BENCH_SECS", 10);
    let jobs = env("BENCH_JOBS", 150_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = CoordinatorConfig {
        state_path: dir.path().join("state.db"),
        store: StoreConfig {
            url: dir.path().join("lake").display().to_string(),
            ..Default::default()
        },
        heartbeat_interval_ms: 1000,
        background: std::env::var("BENCH_TICK").as_deref() != Ok("0"),
        ..Default::default()
    };
    let postgres = std::env::var("BENCH_STATE").as_deref() == Ok("postgres");
    let mut _pg = None;
    let store: Arc<dyn StateStore> = if postgres {
        let pg = benchlake_coordinator::pg_testing::PgServer::start_with(true).expect("postgres");
        let url = pg.fresh_db().expect("database");
        _pg = Some(pg);
        let sync = std::env::var("BENCH_PG_SYNC").as_deref() == Ok("1");
        let store = benchlake_coordinator::store_pg::PgStore::open_with(
            &url,
            &benchlake_coordinator::store_pg::PgOptions {
                synchronous_commit: sync,
                ..Default::default()
            },
        )
        .expect("store");
        let mut el = benchlake_coordinator::leader::Elector::new(&url, "bench", 10_000);
        let token = el.try_acquire().expect("elect").expect("leads");
        store.set_fence(benchlake_coordinator::store_pg::Fence {
            holder: el.holder().to_string(),
            token,
        });
        Arc::new(store)
    } else {
        Arc::new(SqliteStore::open(&cfg.state_path).expect("store"))
    };
    let state = if !postgres {
        "SQLite on disk"
    } else if std::env::var("BENCH_PG_SYNC").as_deref() == Ok("1") {
        "PostgreSQL, synchronous commit"
    } else {
        "PostgreSQL"
    };
    println!("state: {state}");
    let lake = Lake::open(&cfg.store).expect("lake");
    let now = chrono::Utc::now().timestamp_millis();
    // Queue no-op jobs, 60 per run (like a sweep per run).
    let per_run = 60u64;
    store
        .transact(|tx| {
            for r in 0..jobs.div_ceil(per_run) {
                let spec = Spec {
                    benchmark: "noop".into(),
                    params: Default::default(),
                    nodes: Default::default(),
                    launcher: LauncherKind::Local,
                    max_attempts: 1,
                    timeout_s: 60,
                    slurm: Default::default(),
                };
                let id = benchlake_core::ids::new_id_at(now + r as i64);
                let mut run = RunRow::new(id, spec, "noop", Origin::default(), now);
                run.state = RunState::Processing;
                run.started_at_ms = Some(now);
                tx.insert_run(&run)?;
                for _ in 0..per_run {
                    tx.insert_job(&lifecycle::job::new(
                        &run,
                        "noop",
                        "{}".into(),
                        &CoordinatorConfig::default(),
                        now,
                    ))?;
                }
            }
            Ok(())
        })
        .expect("queue jobs");
    let coord = Coordinator::new(store, lake, Arc::new(SystemClock), cfg).expect("coordinator");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(benchlake_coordinator::serve(
        coord,
        listener,
        std::future::pending(),
    ));

    // Agents: register, then heartbeat every second (spread over the second).
    let ch = channel(&addr).expect("channel");
    let mut ac =
        pb::agent_service_client::AgentServiceClient::with_interceptor(ch.clone(), Auth::default());
    let t = Instant::now();
    for i in 0..agents {
        ac.register(pb::RegisterRequest {
            protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
            name: format!("sim-{i:05}"),
            hostname: format!("node{i:05}"),
            cores: 128,
            ..Default::default()
        })
        .await
        .expect("register");
    }
    println!(
        "registered {agents} agents in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let hb_count = Arc::new(AtomicU64::new(0));
    let hb_lat = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let hb_tasks = 20u64;
    let mut handles = Vec::new();
    for g in 0..hb_tasks {
        let (stop, hb_count, hb_lat) = (stop.clone(), hb_count.clone(), hb_lat.clone());
        let mut ac = pb::agent_service_client::AgentServiceClient::with_interceptor(
            channel(&addr).expect("ch"),
            Auth::default(),
        );
        let mine: Vec<u64> = (0..agents).filter(|i| i % hb_tasks == g).collect();
        handles.push(tokio::spawn(async move {
            let gap = Duration::from_secs_f64(1.0 / mine.len().max(1) as f64);
            let mut iv = tokio::time::interval(gap);
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                iv.tick().await;
                let name = format!("sim-{:05}", mine[k % mine.len()]);
                k += 1;
                let t = Instant::now();
                if ac
                    .heartbeat(pb::HeartbeatRequest {
                        name,
                        running_task_ids: vec![],
                    })
                    .await
                    .is_ok()
                {
                    hb_count.fetch_add(1, Ordering::Relaxed);
                    hb_lat
                        .lock()
                        .expect("lock")
                        .push(t.elapsed().as_micros() as u64);
                }
            }
        }));
    }

    // Workers: lease + complete no-op jobs.
    let done = Arc::new(AtomicU64::new(0));
    let lease_lat = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let rt_lat = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let start = Instant::now();
    for w in 0..workers {
        let (stop, done, lease_lat, rt_lat) = (
            stop.clone(),
            done.clone(),
            lease_lat.clone(),
            rt_lat.clone(),
        );
        let mut wc = pb::worker_service_client::WorkerServiceClient::with_interceptor(
            channel(&addr).expect("ch"),
            Auth::default(),
        );
        handles.push(tokio::spawn(async move {
            let mut ll = Vec::new();
            let mut rl = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r = wc
                    .lease_job(pb::LeaseJobRequest {
                        protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
                        worker: format!("bench-{w}"),
                        kinds: vec![],
                        wait_ms: 0,
                    })
                    .await;
                ll.push(t.elapsed().as_micros() as u64);
                let Ok(r) = r else { continue };
                let Some(job) = r.into_inner().job else { break };
                wc.complete_job(pb::CompleteJobRequest {
                    job_id: job.job_id,
                    lease_id: job.lease_id,
                    files: vec![],
                    result_json: String::new(),
                })
                .await
                .expect("complete");
                rl.push(t.elapsed().as_micros() as u64);
                done.fetch_add(1, Ordering::Relaxed);
            }
            lease_lat.lock().expect("lock").extend(ll);
            rt_lat.lock().expect("lock").extend(rl);
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    for h in handles {
        let _ = h.await;
    }
    let n = done.load(Ordering::Relaxed);
    let mut ll = lease_lat.lock().expect("lock").clone();
    let mut rl = rt_lat.lock().expect("lock").clone();
    let mut hl = hb_lat.lock().expect("lock").clone();
    println!(
        "coordinator load: {agents} agents heartbeating at 1/s, {workers} worker clients, {elapsed:.1} s, {state}"
    );
    println!(
        "  lease+complete round trips: {n} = {:.0} /s",
        n as f64 / elapsed
    );
    println!(
        "  LeaseJob latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
        pct(&mut ll, 0.50),
        pct(&mut ll, 0.90),
        pct(&mut ll, 0.99),
        pct(&mut ll, 1.0)
    );
    println!(
        "  round trip latency ms: p50 {:.2}  p99 {:.2}",
        pct(&mut rl, 0.50),
        pct(&mut rl, 0.99)
    );
    println!(
        "  heartbeats: {} = {:.0} /s, latency ms p50 {:.2} p99 {:.2}",
        hb_count.load(Ordering::Relaxed),
        hb_count.load(Ordering::Relaxed) as f64 / elapsed,
        pct(&mut hl, 0.50),
        pct(&mut hl, 0.99)
    );
}
