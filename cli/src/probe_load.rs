//! `benchlake probe load`: load a running coordinator as a large site does
//! and measure what its people and agents wait (issue 39 item 9). Simulated
//! agents register and heartbeat once a second, submitters submit one-agent
//! runs of the probe's own benchmark as fast as they can, pollers ask for
//! tasks as the simulated agents, and readers do what a terminal or a
//! dashboard does (`run list`, `run show`, `schedule list`). Prints each
//! call's latency percentiles and exits 1 when a call failed.
//!
//! The simulated agents offer only the probe's benchmark (`PREFIXnoop`), so
//! no other run is placed on them; they stay registered (OFFLINE once the
//! probe ends) and the probe's runs stay queued on them until the
//! coordinator gives up on those agents. Meant for a test deployment or the
//! fault campaign (tests/e2e/test_campaign.py), not a production one.
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use benchlake_core::outln;
use benchlake_proto::client::Auth;
use benchlake_proto::v1 as pb;
use clap::Args;

use crate::user::Conn;

/// What to load the coordinator with.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// Admin token the simulated agents register and heartbeat with (they
    /// need a name of their own each, which only an admin credential may
    /// take); the submitters and readers use `--token`.
    #[arg(long, env = "BENCHLAKE_PROBE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Simulated agents, each heartbeating once a second.
    #[arg(long, default_value_t = 1000)]
    pub agents: u64,
    /// Clients submitting one-agent runs as fast as they can.
    #[arg(long, default_value_t = 200)]
    pub submitters: u64,
    /// Clients each making one read every 100 ms: `run list`, `run show`,
    /// `schedule list` in turn.
    #[arg(long, default_value_t = 4)]
    pub readers: u64,
    /// Clients each calling PollTask every 100 ms as the simulated agents in
    /// turn (`wait_ms` 0: the cost of an answer).
    #[arg(long, default_value_t = 4)]
    pub pollers: u64,
    /// Seconds of load (1 to 600).
    #[arg(long, default_value_t = 30)]
    pub secs: u64,
    /// Names of the simulated agents (`PREFIX00001`, …) and of their
    /// benchmark (`PREFIXnoop`).
    #[arg(long, default_value = "load-")]
    pub prefix: String,
}

/// Latencies in µs of one kind of call, and its failures.
#[derive(Default)]
struct Calls {
    lat: Mutex<Vec<u64>>,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Calls {
    fn record<T>(&self, t: Instant, r: &Result<T, tonic::Status>) {
        match r {
            Ok(_) => self
                .lat
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(t.elapsed().as_micros() as u64),
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut f = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
                if f.is_none() {
                    *f = Some(format!("{}: {}", e.code(), e.message()));
                }
            }
        }
    }

    /// (answered, failed, p50, p99, max) in ms.
    fn figures(&self) -> (usize, u64, f64, f64, f64) {
        let mut v = self.lat.lock().unwrap_or_else(|p| p.into_inner()).clone();
        v.sort_unstable();
        let pct = |p: f64| -> f64 {
            if v.is_empty() {
                return 0.0;
            }
            let i = ((v.len() as f64 - 1.0) * p).round() as usize;
            v[i.min(v.len() - 1)] as f64 / 1000.0
        };
        (
            v.len(),
            self.failed.load(Ordering::Relaxed),
            pct(0.5),
            pct(0.99),
            pct(1.0),
        )
    }
}

fn catalog(prefix: &str) -> Vec<pb::BenchmarkDef> {
    vec![pb::BenchmarkDef {
        name: format!("{prefix}noop"),
        kind: "noop".into(),
        description: "benchlake probe load: a benchmark only the probe's simulated agents offer"
            .into(),
        timeout_s: 60,
        max_timeout_s: 60,
        launchers: vec!["local".into()],
        ..Default::default()
    }]
}

/// Runs the probe.
pub async fn run(a: LoadArgs) -> anyhow::Result<()> {
    if !(1..=600).contains(&a.secs) {
        bail!("--secs {}: give 1 to 600 seconds", a.secs);
    }
    if !(1..=100_000).contains(&a.agents) {
        bail!("--agents {}: give 1 to 100000", a.agents);
    }
    if a.prefix.is_empty()
        || a.prefix.len() > 64
        || !a
            .prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        bail!(
            "--prefix '{}': give 1 to 64 letters, digits, - or _",
            a.prefix
        );
    }
    // A connection per client, as every agent and person has their own.
    let (_, user) = a.conn.ch()?;
    let conn = a.conn.clone();
    let ch = move || conn.ch().map(|(c, _)| c);
    let admin = Auth::new(a.admin_token.as_deref()).map_err(anyhow::Error::msg)?;
    let agent = |c: tonic::transport::Channel| {
        pb::agent_service_client::AgentServiceClient::with_interceptor(c, admin.clone())
    };
    let name = |i: u64| format!("{}{i:05}", a.prefix);
    let bench = format!("{}noop", a.prefix);

    // Register every simulated agent (8 clients).
    let t = Instant::now();
    let mut regs = Vec::new();
    for g in 0..8u64 {
        let mut ac = agent(ch()?);
        let (n, prefix) = (a.agents, a.prefix.clone());
        regs.push(tokio::spawn(async move {
            for i in (0..n).filter(|i| i % 8 == g) {
                ac.register(pb::RegisterRequest {
                    protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
                    name: format!("{prefix}{i:05}"),
                    hostname: format!("{prefix}{i:05}"),
                    cores: 1,
                    labels: [("probe".to_string(), "load".to_string())].into(),
                    catalog: catalog(&prefix),
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("register {prefix}{i:05}: {}: {}", e.code(), e.message()))?;
            }
            Ok::<(), String>(())
        }));
    }
    for r in regs {
        r.await
            .context("a registering client stopped")?
            .map_err(anyhow::Error::msg)?;
    }
    let reg_s = t.elapsed().as_secs_f64();

    let stop = Arc::new(AtomicBool::new(false));
    let (hb, sub, poll) = (
        Arc::new(Calls::default()),
        Arc::new(Calls::default()),
        Arc::new(Calls::default()),
    );
    let reads: Arc<[Calls; 3]> = Arc::new(Default::default());
    let leased = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();

    // Heartbeats: 20 clients, each agent once a second.
    let hb_clients = 20u64.min(a.agents);
    for g in 0..hb_clients {
        let (stop, hb, mut ac) = (stop.clone(), hb.clone(), agent(ch()?));
        let mine: Vec<String> = (0..a.agents)
            .filter(|i| i % hb_clients == g)
            .map(name)
            .collect();
        tasks.push(tokio::spawn(async move {
            let mut iv =
                tokio::time::interval(Duration::from_secs_f64(1.0 / mine.len().max(1) as f64));
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                iv.tick().await;
                let t = Instant::now();
                let r = ac
                    .heartbeat(pb::HeartbeatRequest {
                        name: mine[k % mine.len()].clone(),
                        running_task_ids: vec![],
                    })
                    .await;
                hb.record(t, &r);
                k += 1;
            }
        }));
    }
    // The heartbeats settle for a second before the rest starts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = Instant::now();
    for _ in 0..a.submitters {
        let (stop, sub, bench) = (stop.clone(), sub.clone(), bench.clone());
        let mut rc =
            pb::run_service_client::RunServiceClient::with_interceptor(ch()?, user.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r = rc
                    .submit_run(pb::SubmitRunRequest {
                        spec: Some(pb::BenchmarkSpec {
                            benchmark: bench.clone(),
                            nodes: Some(pb::NodeSelector {
                                count: 1,
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .await;
                let failed = r.is_err();
                sub.record(t, &r);
                if failed {
                    // Do not spin on a refusal.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }));
    }
    for g in 0..a.pollers {
        let (stop, poll, leased, mut ac) =
            (stop.clone(), poll.clone(), leased.clone(), agent(ch()?));
        let (n, pollers, prefix) = (a.agents, a.pollers, a.prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut iv = tokio::time::interval(Duration::from_millis(100));
            let mut k = g;
            while !stop.load(Ordering::Relaxed) {
                iv.tick().await;
                let t = Instant::now();
                let r = ac
                    .poll_task(pb::PollTaskRequest {
                        name: format!("{prefix}{:05}", k % n),
                        free_slots: 1,
                        wait_ms: 0,
                    })
                    .await;
                poll.record(t, &r);
                if let Ok(r) = r
                    && r.into_inner().task.is_some()
                {
                    leased.fetch_add(1, Ordering::Relaxed);
                }
                k += pollers;
            }
        }));
    }
    for g in 0..a.readers {
        let (stop, reads) = (stop.clone(), reads.clone());
        let mut rc =
            pb::run_service_client::RunServiceClient::with_interceptor(ch()?, user.clone());
        let mut sc = pb::schedule_service_client::ScheduleServiceClient::with_interceptor(
            ch()?,
            user.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut iv = tokio::time::interval(Duration::from_millis(100));
            let mut last = String::new();
            let mut k = g as usize;
            while !stop.load(Ordering::Relaxed) {
                iv.tick().await;
                let call = k % 3;
                k += 1;
                let t = Instant::now();
                match call {
                    0 => {
                        let r = rc.list_runs(pb::ListRunsRequest::default()).await;
                        reads[0].record(t, &r);
                        if let Ok(r) = r
                            && let Some(x) = r.into_inner().runs.first()
                        {
                            last = x.run_id.clone();
                        }
                    }
                    1 if !last.is_empty() => {
                        let r = rc
                            .get_run(pb::GetRunRequest {
                                run_id: last.clone(),
                            })
                            .await;
                        reads[1].record(t, &r);
                    }
                    1 => {}
                    _ => {
                        let r = sc.list_schedules(pb::ListSchedulesRequest::default()).await;
                        reads[2].record(t, &r);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(a.secs)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }

    let rows: Vec<(&str, &Calls)> = vec![
        ("SubmitRun", &sub),
        ("Heartbeat", &hb),
        ("PollTask", &poll),
        ("ListRuns", &reads[0]),
        ("GetRun", &reads[1]),
        ("ListSchedules", &reads[2]),
    ];
    let mut failed = 0;
    let mut out = Vec::new();
    for (call, c) in &rows {
        let (n, f, p50, p99, max) = c.figures();
        failed += f;
        let err = c
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        out.push((call.to_string(), n, f, p50, p99, max, err));
    }
    let submitted = sub.figures().0;
    if a.conn.json {
        let calls: Vec<serde_json::Value> = out
            .iter()
            .map(|(call, n, f, p50, p99, max, err)| {
                serde_json::json!({
                    "call": call, "answered": n, "failed": f,
                    "p50_ms": p50, "p99_ms": p99, "max_ms": max, "first_error": err,
                })
            })
            .collect();
        outln!(
            "{}",
            serde_json::json!({
                "agents": a.agents, "registered_s": reg_s, "submitters": a.submitters,
                "readers": a.readers, "pollers": a.pollers, "secs": elapsed,
                "submits_per_s": submitted as f64 / elapsed,
                "tasks_leased": leased.load(Ordering::Relaxed), "calls": calls,
            })
        );
    } else {
        outln!(
            "probe load: {} agents (registered in {reg_s:.1} s) heartbeating once a second, {} submitters, {} pollers, {} readers, {elapsed:.1} s; {:.0} submits/s, {} tasks leased",
            a.agents,
            a.submitters,
            a.pollers,
            a.readers,
            submitted as f64 / elapsed,
            leased.load(Ordering::Relaxed)
        );
        outln!(
            "{:<14} {:>9} {:>7} {:>9} {:>9} {:>9}",
            "call",
            "answered",
            "failed",
            "p50 ms",
            "p99 ms",
            "max ms"
        );
        for (call, n, f, p50, p99, max, err) in &out {
            outln!("{call:<14} {n:>9} {f:>7} {p50:>9.2} {p99:>9.2} {max:>9.2}");
            if let Some(e) = err {
                outln!("  first failure: {e}");
            }
        }
    }
    if failed > 0 {
        bail!("{failed} calls failed under load (first failures above)");
    }
    Ok(())
}
