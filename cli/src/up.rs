//! `benchlake up`: the whole system in one process on the embedded defaults —
//! the coordinator (SQLite state, local lake), one worker and one agent on this
//! machine. `--demo` then submits the demo runs, waits until they have landed,
//! prints where the tables are and how to query them, and exits.
use benchlake_core::outln;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use benchlake_proto::v1 as pb;
use clap::Args;

use crate::opts::{
    ClientTlsArgs, CoordTuning, HttpArgs, LakeArgs, ServerTlsArgs, TokenArgs, shutdown_signal,
    until,
};
use crate::user::{self, Conn};

#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// Submit the demo runs, wait until they have landed, print the tables, exit.
    #[arg(long)]
    pub demo: bool,
    /// With --demo: keep running after the demo (until Ctrl-C), so the
    /// dashboard and the other endpoints can be looked at.
    #[arg(long, env = "BENCHLAKE_KEEP", requires = "demo")]
    pub keep: bool,
    /// Data directory (state database, lake, agent and worker scratch).
    #[arg(long, env = "BENCHLAKE_DATA", default_value = "benchlake-data")]
    pub data: PathBuf,
    /// State database: default DATA/state.db (SQLite); `postgres://USER@HOST:PORT/DB`
    /// keeps it in PostgreSQL.
    #[arg(long, env = "BENCHLAKE_STATE")]
    pub state: Option<String>,
    /// Address to listen on (the demo picks a free port when not given).
    #[arg(long, env = "BENCHLAKE_LISTEN")]
    pub listen: Option<String>,
    /// Worker concurrency.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Agent catalog file (default: the built-in catalog).
    #[arg(long, env = "BENCHLAKE_CATALOG")]
    pub catalog: Option<PathBuf>,
    #[command(flatten)]
    pub lake: LakeArgs,
    #[command(flatten)]
    pub tokens: TokenArgs,
    #[command(flatten)]
    pub tuning: CoordTuning,
    #[command(flatten)]
    pub tls: ServerTlsArgs,
    /// /healthz, /readyz, /metrics and the dashboard (default: a free
    /// 127.0.0.1 port, printed as `metrics: http://HOST:PORT/metrics` and
    /// `dashboard: http://HOST:PORT/`).
    #[command(flatten)]
    pub http: HttpArgs,
    /// With --tls-client-ca: the certificate (--tls-client-cert/--tls-client-key)
    /// up's own agent, worker and demo present. They trust exactly the
    /// certificate of --tls-cert (pinned), so --tls-ca is not needed.
    #[command(flatten)]
    pub client_tls: ClientTlsArgs,
    #[command(flatten)]
    pub notify: crate::opts::NotifyArgs,
    /// Dashboard sign-in with OpenID Connect (needs a fixed --http-addr
    /// port or --oidc-redirect-url).
    #[command(flatten)]
    pub oidc: crate::opts::OidcArgs,
}

pub async fn up(a: UpArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    std::fs::create_dir_all(&a.data).with_context(|| format!("creating {}", a.data.display()))?;
    let data = a
        .data
        .canonicalize()
        .with_context(|| a.data.display().to_string())?;
    let listen = a.listen.clone().unwrap_or_else(|| {
        if a.demo {
            "127.0.0.1:0".into()
        } else {
            "127.0.0.1:7700".into()
        }
    });
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| {
            format!("cannot listen on {listen} (is another benchlake running? use --listen)")
        })?;
    let addr = listener.local_addr()?.to_string();
    // up's own clients: https:// with the server certificate pinned when the
    // port speaks TLS.
    let (client_addr, client_tls) = match &a.tls.tls_cert {
        Some(cert) => {
            let mut t = a.client_tls.load()?;
            if t.ca.take().is_some() {
                tracing::warn!(
                    "--tls-ca is not used by up: its own clients trust --tls-cert itself"
                );
            }
            t.pinned =
                Some(std::fs::read(cert).with_context(|| format!("reading {}", cert.display()))?);
            (format!("https://{addr}"), t)
        }
        None => (addr.clone(), Default::default()),
    };

    let state = a
        .state
        .clone()
        .unwrap_or_else(|| data.join("state.db").display().to_string());
    let coord_args = crate::opts::CoordinatorArgs {
        listen: addr.clone(),
        state: state.clone(),
        lake: a.lake.clone(),
        scontrol: "scontrol".into(),
        // One user's own cluster: nothing is deleted.
        retention: Vec::new(),
        retention_mode: "off".into(),
        compaction: Default::default(),
        tokens: a.tokens.clone(),
        tuning: CoordTuning {
            // One process: agent and worker are next door, so react quickly.
            heartbeat_ms: a.tuning.heartbeat_ms.min(2_000),
            ..a.tuning.clone()
        },
        tls: a.tls.clone(),
        http: a.http.clone(),
        notify: a.notify.clone(),
        oidc: a.oidc.clone(),
    };
    let lake_default = data.join("lake").display().to_string();
    let mut cfg = coord_args.config(&lake_default)?;
    let store = cfg.store.clone();
    let tokens = cfg.tokens.clone();
    let pick = |v: &Vec<String>| v.first().cloned().or_else(|| tokens.admin.first().cloned());
    let (agent_token, worker_token, user_token) = (
        pick(&tokens.agent),
        pick(&tokens.worker),
        pick(&tokens.user),
    );

    let sd = shutdown_signal();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // The HTTP endpoints always run under `up`: on --http-addr, else a free port.
    let http_listener = {
        let at = a.http.http_addr.as_deref().unwrap_or("127.0.0.1:0");
        tokio::net::TcpListener::bind(at)
            .await
            .with_context(|| format!("cannot listen on --http-addr {at}"))?
    };
    let http_base = format!(
        "{}://{}",
        if cfg.tls_cert.is_some() {
            "https"
        } else {
            "http"
        },
        http_listener.local_addr()?
    );
    let metrics_url = format!("{http_base}/metrics");
    if a.notify.dashboard_url.is_none() {
        cfg.notify.dashboard_url = Some(http_base.clone());
    }
    let sign_in = cfg.oidc.clone();
    let tokens_on = cfg.tokens.enabled();
    let coord = tokio::spawn(benchlake_coordinator::run_with(
        cfg,
        listener,
        Some(http_listener),
        {
            let mut s = stop_rx.clone();
            async move {
                let _ = s.wait_for(|v| *v).await;
            }
        },
    ));

    let mut agent = benchlake_agent::AgentConfig::new(&client_addr, data.join("work"))?;
    agent.token = agent_token;
    agent.tls = client_tls.clone();
    agent.poll_interval = Duration::from_millis(200);
    // `up` is one user's own cluster: benchmarks run as that user (root
    // included), and traced runs start applications under DATA/apps.
    agent.run_as = Some(benchlake_agent::contain::current_user_name());
    let apps = data.join("apps");
    std::fs::create_dir_all(&apps).with_context(|| format!("creating {}", apps.display()))?;
    agent.apps_dir = Some(apps.clone());
    let apps = std::fs::canonicalize(&apps).unwrap_or(apps);
    if a.demo {
        agent.mpirun = demo_mpirun();
    }
    if let Some(p) = &a.catalog {
        agent.catalog = benchlake_agent::load_catalog(p)?;
    }
    let agent_name = agent.name.clone();
    let agent_task = tokio::spawn(benchlake_agent::run(agent, stop_rx.clone()));

    let worker = benchlake_worker::WorkerConfig {
        coordinator: client_addr.clone(),
        token: worker_token,
        name: format!("worker-{agent_name}"),
        store: store.clone(),
        concurrency: a.workers.max(1),
        scratch_dir: data.join("scratch"),
        lease_wait: Duration::from_secs(5),
        commit_delay: Duration::ZERO,
        retry_for: benchlake_proto::retry::DEFAULT_RETRY_FOR,
    };
    let worker_task = tokio::spawn(benchlake_worker::run_with_tls(
        worker,
        client_tls.clone(),
        benchlake_worker::Executors::builtin(),
        stop_rx.clone(),
    ));

    eprintln!(
        "benchlake is up: coordinator {client_addr}, lake {}, state {}",
        store.url,
        benchlake_coordinator::store_pg::redact(&state)
    );
    eprintln!("metrics: {metrics_url}");
    eprintln!("dashboard: {http_base}/");
    if let Some(o) = &sign_in {
        eprintln!(
            "dashboard sign-in: \"Sign in with {}\" ({}; roles from the claim '{}'){}",
            o.display_name,
            o.issuer,
            o.mapping.roles_claim,
            if tokens_on {
                ", or an admin or user token"
            } else {
                ""
            }
        );
    }
    let result = if a.demo {
        let r = demo(
            &client_addr,
            &agent_name,
            client_tls,
            user_token,
            &store,
            &apps,
            started,
        )
        .await;
        if a.keep {
            if let Err(e) = &r {
                eprintln!("demo failed: {}", crate::error_text(e));
            }
            eprintln!("demo done; still up (--keep): dashboard {http_base}/   (Ctrl-C stops)");
            until(sd).await;
        }
        r
    } else {
        eprintln!(
            "try: benchlake run submit hostinfo --watch --coordinator {client_addr}   (Ctrl-C stops)"
        );
        until(sd).await;
        Ok(())
    };
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let _ = agent_task.await;
        let _ = worker_task.await;
        let _ = coord.await;
    })
    .await;
    result
}

/// Waits until the local agent has registered.
async fn wait_for_agent(conn: &Conn) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut c) = conn.cluster()
            && let Ok(r) = c.list_agents(pb::ListAgentsRequest {}).await
            && r.get_ref().agents.iter().any(|a| a.state == "ONLINE")
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the local agent did not register within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The labelled history the demo replays (`benchlake probe year`).
const DEMO_YEAR: &str = include_str!("../../scenarios/demo-12.toml");

async fn demo(
    addr: &str,
    agent_name: &str,
    tls: benchlake_proto::client::ClientTls,
    token: Option<String>,
    store: &benchlake_core::lake::StoreConfig,
    apps: &std::path::Path,
    started: Instant,
) -> anyhow::Result<()> {
    let lake = store.url.as_str();
    let conn = Conn {
        coordinator: addr.to_string(),
        token,
        json: false,
        tls: Default::default(),
        client_tls: Some(std::sync::Arc::new(tls.clone())),
    };
    wait_for_agent(&conn).await?;
    // The demo runs: one per capability that exists.
    // Node health: hostinfo judged against what this machine is (PASS
    // rows in `node_health`) after a run expecting 4,096 cores (a FAIL on
    // this node, as a node with missing cores would get); the newer run's
    // verdicts are the node's, so node-check answers healthy at the end.
    let facts = benchlake_formats::hostinfo::collect();
    let wrong_cores = if facts.cores == 4096 { 8192 } else { 4096 };
    let kv = |v: &[(&str, String)]| -> Vec<(String, String)> {
        v.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    };
    let runs: [(&str, Vec<(String, String)>); 5] = [
        // Calibration: netprobe's ping-pongs between two ranks of this node
        // at five message sizes (one run, one file per size); the worker's
        // calibrate job fits latency and bandwidth, which the traced run's
        // default replays then use (docs/replay.md).
        (
            "netprobe",
            kv(&DEMO_NETPROBE.map(|(k, v)| (k, v.to_string()))),
        ),
        ("hostinfo", kv(&[("expect_cores", wrong_cores.to_string())])),
        (
            "hostinfo",
            kv(&[
                ("expect_cores", facts.cores.to_string()),
                // Without it, memory would be judged against the node's own
                // history and peers: none for an on-demand run, NO_REFERENCE.
                ("expect_memory_bytes", facts.memory_bytes.to_string()),
                ("expect_kernel", facts.kernel_release.clone()),
            ]),
        ),
        // Ingest of alltoallv count files, then the pattern analysis fanned out
        // as one part job per lead rank and a merge job waiting for them.
        ("a2av-demo", vec![]),
        (
            "pio",
            [
                ("np", "2"),
                ("block_size", "16MiB"),
                ("transfer_size", "1MiB"),
                ("iterations", "2"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ),
    ];
    let mut specs: Vec<(&str, pb::BenchmarkSpec)> = runs
        .into_iter()
        .map(|(bench, params)| {
            let spec = pb::BenchmarkSpec {
                benchmark: bench.to_string(),
                params: params.into_iter().collect(),
                ..Default::default()
            };
            (bench, spec)
        })
        .collect();
    // A traced MPI run: the tracer's traces, counts and statistics are ingested,
    // the counts analysed, the trace replayed and compared with the measurement.
    let traced = traced_demo_app(apps);
    if let Some(app) = &traced {
        let spec = pb::BenchmarkSpec {
            benchmark: "traced".into(),
            params: [
                ("np".to_string(), "2".to_string()),
                ("app".to_string(), app.display().to_string()),
            ]
            .into_iter()
            .collect(),
            launcher: pb::Launcher::Mpirun as i32,
            ..Default::default()
        };
        // Right after the netprobe run (see the submission loop).
        specs.insert(1.min(specs.len()), ("traced", spec));
    }
    let mut ids: Vec<(&str, String)> = Vec::new();
    for (bench, spec) in specs {
        let r = conn
            .runs()?
            .submit_run(pb::SubmitRunRequest {
                spec: Some(spec),
                idempotency_key: String::new(),
                notify: Vec::new(),
            })
            .await
            .with_context(|| format!("submitting the {bench} demo run"))?
            .into_inner();
        outln!("submitted {bench} run {}", r.run_id);
        if bench == "netprobe" || bench == "traced" {
            // The netprobe run (and its calibrate job), then the traced run,
            // land before anything else starts: both are timed, and on cores
            // the other runs share their times vary (the fit from 0.11 to
            // 0.83 us, the traced run from 1.3 to 3.3 ms); the traced run's
            // default replays look for the newest calibration of its node
            // when its trace is ingested.
            let d = user::watch(&conn, &r.run_id, false).await?;
            if d.run.as_ref().map(|r| r.state) != Some(pb::RunState::Succeeded as i32) {
                user::print_detail(&d);
            }
        }
        ids.push((bench, r.run_id));
    }
    // A what-if sweep: a synthetic 16-rank halo exchange under 3 latencies x 2
    // bandwidths, one worker job per point.
    let trace =
        std::env::temp_dir().join(format!("benchlake-demo-halo-{}.dim", std::process::id()));
    benchlake_replay::synth::Halo::new(16, 200).write_dim(&trace)?;
    let data = std::fs::read(&trace)?;
    let offline = offline_replay(&trace);
    let _ = std::fs::remove_file(&trace);
    offline?;
    let axis = |p: &str, v: &[&str]| pb::SweepAxis {
        param: p.into(),
        values: v.iter().map(|x| x.to_string()).collect(),
    };
    let (ch, auth) = (
        benchlake_proto::client::channel_with(addr, &tls).map_err(anyhow::Error::msg)?,
        benchlake_proto::client::Auth::new(conn.token.as_deref()).map_err(anyhow::Error::msg)?,
    );
    let r = pb::replay_service_client::ReplayServiceClient::with_interceptor(ch, auth)
        .trigger_replay(pb::TriggerReplayRequest {
            trace: Some(pb::TraceRef {
                source: Some(pb::trace_ref::Source::Uploaded(pb::UploadedTrace {
                    file_name: "halo16.dim".into(),
                    data,
                })),
            }),
            model: benchlake_replay::models::DIMEMAS.name.into(),
            params: Default::default(),
            sweep: vec![
                axis("latency", &["1e-6", "5e-6", "2e-5"]),
                axis("bandwidth", &["1000", "10000"]),
            ],
            calibration: String::new(),
        })
        .await
        .context("triggering the demo replay sweep")?
        .into_inner();
    outln!("submitted replay sweep {} ({} points)", r.run_id, r.points);
    ids.push(("replay sweep", r.run_id));

    let mut failed = Vec::new();
    let mut hostinfo = Vec::new();
    for (bench, id) in &ids {
        let d = user::watch(&conn, id, false).await?;
        let state = d.run.as_ref().map(|r| r.state).unwrap_or_default();
        if state != pb::RunState::Succeeded as i32 {
            user::print_detail(&d);
            failed.push(format!("{bench} ({id})"));
        } else {
            outln!("{bench} run {id} landed");
        }
        if *bench == "hostinfo" {
            hostinfo.push(d);
        }
    }
    if let Err(e) = demo_node_health(&conn, agent_name, wrong_cores, &hostinfo).await {
        failed.push(format!("node health: {}", crate::error_text(&e)));
    }
    let run_of = |b: &str| ids.iter().find(|(x, _)| *x == b).map(|(_, id)| id.as_str());
    if let Some(np) = run_of("netprobe")
        && let Err(e) = demo_calibration(store, np, run_of("traced")).await
    {
        failed.push(format!("calibration: {}", crate::error_text(&e)));
    }
    if let Some(dir) = traced.as_ref().and_then(|p| p.parent()) {
        let _ = std::fs::remove_dir_all(dir);
    }
    // What a user token may not do: a path outside the directories the catalog
    // entry allows is refused by the agent before anything runs.
    let r = conn
        .runs()?
        .submit_run(pb::SubmitRunRequest {
            spec: Some(pb::BenchmarkSpec {
                benchmark: "pio".into(),
                params: [("dir".to_string(), "/proc/sys".to_string())]
                    .into_iter()
                    .collect(),
                max_attempts: 1,
                ..Default::default()
            }),
            idempotency_key: String::new(),
            notify: Vec::new(),
        })
        .await
        .context("submitting the refused demo run")?
        .into_inner();
    let d = user::watch(&conn, &r.run_id, false).await?;
    let refused = d
        .tasks
        .iter()
        .map(|t| t.error.as_str())
        .find(|e| !e.is_empty())
        .unwrap_or_default()
        .to_string();
    if d.run.as_ref().map(|r| r.state) == Some(pb::RunState::Failed as i32)
        && refused.contains("outside the directories")
    {
        outln!(
            "pio -p dir=/proc/sys run {} refused, as it must be: {refused}",
            r.run_id
        );
    } else {
        user::print_detail(&d);
        failed.push(format!("refused pio ({}): it was not refused", r.run_id));
    }
    let tables = conn
        .cluster()?
        .list_tables(pb::ListTablesRequest {})
        .await?
        .into_inner();
    outln!("\nTables in the lake at {}:", tables.lake_root);
    for t in tables.tables.iter().filter(|t| t.files > 0) {
        outln!("  {:<22} {:>4} files {:>10} rows", t.name, t.files, t.rows);
    }
    let root = if lake.starts_with("s3://") {
        lake.to_string()
    } else {
        tables.lake_root.clone()
    };
    let glob = |table: &str| -> anyhow::Result<String> {
        Ok(format!(
            "{root}/{}",
            benchlake_core::layout::table_glob(table)?
        ))
    };
    // Verdicts measured (docs/verdicts.md): a small labelled history of 12
    // nodes through the same ingest and checks jobs, scored against what was
    // injected, in a lake of its own beside this one.
    if !lake.starts_with("s3://") {
        let dir = std::path::Path::new(&tables.lake_root)
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("probe-year");
        if dir.exists() {
            // Ours, from an earlier demo in this data directory.
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        let out = dir.clone();
        let o = tokio::task::spawn_blocking(move || {
            // Its own runtime: on a thread of its own.
            std::thread::spawn(move || {
                crate::year::replay_to("scenarios/demo-12.toml (built in)", DEMO_YEAR, &out, 0, 2)
            })
            .join()
        })
        .await?
        .map_err(|_| anyhow::anyhow!("probe year: the replay thread panicked"))??;
        outln!(
            "\nprobe year (labelled history, docs/verdicts.md): {}; score: {}",
            crate::year::summary(&o),
            o.score_file.display()
        );
        if o.score.recall < 1.0 || o.score.false_alarms > 0 {
            failed.push(format!(
                "probe year: recall {:.3}, {} false alarms",
                o.score.recall, o.score.false_alarms
            ));
        }
    }
    outln!("\nRead them with DuckDB, for example:");
    outln!(
        "  duckdb -c \"SELECT hostname, kernel_release, cores, memory_bytes, date FROM read_parquet('{}', hive_partitioning=true)\"",
        glob("node_facts")?
    );
    outln!(
        "  duckdb -c \"SELECT run_id, node, \\\"check\\\", status, value, reference, message FROM read_parquet('{}', hive_partitioning=true) ORDER BY run_id, \\\"check\\\"\"",
        glob("node_health")?
    );
    outln!(
        "  duckdb -c \"SELECT tool, pattern, num_tasks, iteration, operation, round(bw_mib_s, 1) AS mib_s, cache_mode FROM read_parquet('{}', hive_partitioning=true) ORDER BY iteration, operation\"",
        glob("io_results")?
    );
    outln!(
        "  duckdb -c \"SELECT \\\"check\\\", status, round(value, 3) AS value, reference, unit, message FROM read_parquet('{}', hive_partitioning=true) ORDER BY \\\"check\\\"\"",
        glob("checks")?
    );
    outln!(
        "  duckdb -c \"SELECT point, round(predicted_time_s, 6) AS predicted_s FROM read_parquet('{}', hive_partitioning=true) ORDER BY predicted_s\"",
        glob("replays")?
    );
    outln!(
        "  duckdb -c \"SELECT lead_rank, pattern_id, direction, num_ranks, num_peers, num_calls FROM read_parquet('{}', hive_partitioning=true) ORDER BY lead_rank, pattern_id, direction\"",
        glob("alltoallv_patterns")?
    );
    outln!(
        "  duckdb -c \"SELECT run_id, class, round(latency_s * 1e6, 2) AS latency_us, round(bandwidth_mb_s) AS mb_s, round(r2, 3) AS r2, sizes FROM read_parquet('{}', hive_partitioning=true)\"",
        glob("replay_calibrations")?
    );
    // Last night without reading a pair: the per-host summary, its last
    // date from the summary itself (docs/linktest.md, "Last night and one
    // node's history").
    let hs = glob("linktest_host_summary")?;
    outln!(
        "  duckdb -c \"SELECT date, host, pair_class, pairs, slow_pairs, median_time_s, max_time_s FROM read_parquet('{hs}', hive_partitioning=true) WHERE date = (SELECT max(date) FROM read_parquet('{hs}', hive_partitioning=true)) ORDER BY slow_pairs DESC, max_time_s DESC LIMIT 10\""
    );
    if traced.is_some() {
        outln!(
            "  duckdb -c \"SELECT rank, function, calls, round(measured_comm_s * 1e6, 1) AS measured_us, round(modelled_comm_s * 1e6, 1) AS modelled_us, round(ratio, 2) AS ratio FROM read_parquet('{}', hive_partitioning=true) ORDER BY rank, function\"",
            glob("trace_comparison")?
        );
    }
    outln!(
        "  duckdb -c \"SELECT run_id, benchmark, status, finished_at FROM read_parquet('{}', hive_partitioning=true) ORDER BY finished_at\"",
        glob("runs")?
    );
    outln!(
        "\ndemo finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        bail!("demo runs did not succeed: {}", failed.join(", "));
    }
    Ok(())
}

/// The demo's netprobe run: two ranks of the one agent as threads, their
/// ping-pongs through shared memory (as the traced run's MPI ranks talk) at
/// five sizes (8 B to 1 MiB), 200 timed messages per size, no serial
/// retests (one pair).
const DEMO_NETPROBE: [(&str, &str); 5] = [
    ("local_ranks", "2"),
    ("message_sizes", "8,1k,16k,128k,1MiB"),
    ("num_messages", "200"),
    ("warmup_messages", "10"),
    ("serial_retests", "0"),
];

/// The demo's halo replayed offline by the replay-only binary beside this one
/// (docs/replay.md, "The replay-only binary"), checked against the same replay
/// in this process. Skipped, saying so, where the binary was not built (`cargo
/// run` builds `benchlake` alone).
fn offline_replay(trace: &std::path::Path) -> anyhow::Result<()> {
    let lean = std::env::current_exe()
        .context("this binary's path")?
        .with_file_name("benchlake-replay");
    if !lean.is_file() {
        outln!(
            "skipping the offline replay: no {} (cargo build --release builds it)",
            lean.display()
        );
        return Ok(());
    }
    let o = std::process::Command::new(&lean)
        .args(["dimemas", "--threads", "1", "--json"])
        .arg(trace)
        .output()
        .with_context(|| lean.display().to_string())?;
    if !o.status.success() {
        bail!(
            "{} dimemas: {}",
            lean.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .with_context(|| format!("{} dimemas --json: not JSON", lean.display()))?;
    let got = v["predicted_time_s"]
        .as_f64()
        .with_context(|| format!("{} dimemas --json: no predicted_time_s", lean.display()))?;
    let here = benchlake_replay::models::DIMEMAS.replay(trace, &Default::default())?;
    // JSON's decimal text round-trips to within an ulp, not always to it.
    if (got - here.predicted_time_s).abs() > 1e-12 * here.predicted_time_s.abs() {
        bail!(
            "benchlake-replay predicted {got} s, this process {} s",
            here.predicted_time_s
        );
    }
    outln!(
        "offline replay (benchlake-replay dimemas, 16 ranks x 200 iterations): predicted {:.6} ms, \
         as in this process",
        got * 1e3
    );
    Ok(())
}

/// The demo's calibration: prints the fit of the netprobe run (latency,
/// bandwidth, r²) and, for the traced run, each default replay's predicted
/// against measured time and the calibration it used, and the fit's
/// quality (a rejected fit is not used: the demo says so). An error when the
/// netprobe run fitted nothing, a traced replay did not use an accepted fit
/// or used a rejected one.
async fn demo_calibration(
    store: &benchlake_core::lake::StoreConfig,
    netprobe: &str,
    traced: Option<&str>,
) -> anyhow::Result<()> {
    use benchlake_core::lake::{Lake, RunRows};
    use benchlake_replay::{calibrate, calibrations};
    let lake = Lake::open(store)?;
    let doc = calibrations::load(&lake, netprobe).await?;
    if !doc.fitted {
        bail!(
            "netprobe run {netprobe} fitted no calibration: {}",
            doc.reason.as_deref().unwrap_or("no reason recorded")
        );
    }
    let nodes = doc.nodes.iter().cloned().collect::<Vec<_>>().join(",");
    for f in &doc.fits {
        outln!(
            "calibration {} of node {nodes} ({}): latency {:.2} us, bandwidth {:.0} MB/s (2^20 B), r2 {:.3} over {} sizes{}",
            doc.id,
            f.class.as_str(),
            f.latency_s * 1e6,
            f.bandwidth_mb_s,
            f.r2,
            f.medians.len(),
            f.eager_limit
                .map(|e| format!(", eager limit {e} B"))
                .unwrap_or_default()
        );
    }
    // The quality gate: a rejected fit is stored but never used by default.
    outln!("calibration {} quality: {}", doc.id, doc.quality());
    if let Some(r) = &doc.rejected {
        outln!(
            "calibration {} is rejected ({r}): the traced run's default replays use no calibration from it",
            doc.id
        );
    }
    let Some(run) = traced else {
        return Ok(());
    };
    let rows = lake
        .read_run_rows(RunRows::new("trace_comparison", run))
        .await?;
    let whole = calibrate::whole_runs(&rows)?;
    let replays = lake.read_run_rows(RunRows::new("replays", run)).await?;
    let used = calibrate::calibrations_used(&replays);
    if whole.is_empty() {
        bail!("traced run {run}: no trace_comparison rows");
    }
    let mut wrong = Vec::new();
    for w in &whole {
        let cal = used.get(&w.model).map(String::as_str).unwrap_or("-");
        outln!(
            "traced run {run} {} replay: predicted {:.3} ms, measured {:.3} ms ({:+.1} %), calibration {cal}",
            w.model,
            w.predicted_s * 1e3,
            w.measured_s * 1e3,
            (w.predicted_s - w.measured_s) / w.measured_s * 100.0
        );
        if cal == "-" {
            outln!(
                "traced run {run} {} replay used no calibration: the model's default parameters",
                w.model
            );
        }
        match (&doc.rejected, cal == doc.id) {
            (None, false) => wrong.push(format!("{} used {cal}", w.model)),
            (Some(_), true) => wrong.push(format!("{} used the rejected {cal}", w.model)),
            _ => {}
        }
    }
    if !wrong.is_empty() {
        bail!(
            "the traced run's default replays did not use calibration {} as its quality says: {}",
            doc.id,
            wrong.join(", ")
        );
    }
    Ok(())
}

/// The demo's node-health part: the first hostinfo run (expecting
/// `wrong_cores`) must FAIL on `node` with the `node.cores` figure, the
/// second must PASS, and node-check (Slurm's HealthCheckProgram, docs/slurm.md)
/// must answer healthy from the newer verdicts.
async fn demo_node_health(
    conn: &Conn,
    node: &str,
    wrong_cores: i64,
    runs: &[pb::RunDetail],
) -> anyhow::Result<()> {
    let [bad, good] = runs else {
        bail!("expected two hostinfo runs, got {}", runs.len());
    };
    let id = |d: &pb::RunDetail| d.run.as_ref().map(|r| r.run_id.clone()).unwrap_or_default();
    let verdict = |d: &pb::RunDetail| {
        d.run
            .as_ref()
            .map(|r| r.verdict.clone())
            .unwrap_or_default()
    };
    let fail = bad
        .checks
        .iter()
        .find(|c| c.check == "node.cores" && c.status == "FAIL" && c.node == node)
        .with_context(|| {
            format!(
                "hostinfo -p expect_cores={wrong_cores} run {} has no node.cores FAIL on {node} (verdict '{}')",
                id(bad),
                verdict(bad)
            )
        })?;
    outln!(
        "hostinfo -p expect_cores={wrong_cores} run {}: verdict {} on node {node}: {} {} vs {}, as it must be",
        id(bad),
        verdict(bad),
        fail.check,
        crate::nodecheck::fmt_value(fail.value, &fail.unit),
        crate::nodecheck::fmt_value(fail.reference, &fail.unit)
    );
    if verdict(good) != "PASS" {
        bail!(
            "hostinfo run {} expecting this machine: verdict '{}', not PASS",
            id(good),
            verdict(good)
        );
    }
    let h = conn
        .cluster()?
        .get_node_health(pb::GetNodeHealthRequest {
            node: node.to_string(),
        })
        .await?
        .into_inner();
    let (code, why) = crate::nodecheck::judge(&h);
    if code != 0 {
        bail!("node-check {node}: exit {code}: {why}");
    }
    let checks: Vec<String> = h
        .checks
        .iter()
        .map(|c| match c.value {
            Some(_) => format!(
                "{} {}",
                c.check,
                crate::nodecheck::fmt_value(c.value, &c.unit)
            ),
            None => format!("{} {}", c.check, c.status),
        })
        .collect();
    outln!(
        "node-check {node}: exit 0, {why}: the newer run {} passed {} (benchlake node-check serves as Slurm's HealthCheckProgram)",
        id(good),
        checks.join(", ")
    );
    Ok(())
}

/// The demo agent's `mpirun`: `$BENCHLAKE_MPIRUN` when set, else `mpirun
/// --oversubscribe` (plus `--allow-run-as-root` when running as root, which
/// Open MPI otherwise refuses).
fn demo_mpirun() -> Vec<String> {
    if let Ok(v) = std::env::var("BENCHLAKE_MPIRUN") {
        let w: Vec<String> = v.split_whitespace().map(String::from).collect();
        if !w.is_empty() {
            return w;
        }
    }
    let mut w = vec!["mpirun".to_string(), "--oversubscribe".to_string()];
    let root = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    };
    if root {
        w.push("--allow-run-as-root".into());
    }
    w
}

/// The traced demo's MPI program: per iteration a ring exchange, a Bcast, an
/// Alltoallv (so count files exist) and a Barrier, with some computation.
const TRACED_DEMO_C: &str = r#"#include <mpi.h>
static volatile double sink;
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n, sc[64], sd[64], rc[64], rd[64], a[256], b[256];
    char s[4096], q[4096];
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int p = 0; p < n && p < 64; p++) { sc[p] = rc[p] = 2; sd[p] = rd[p] = 2 * p; }
    for (int it = 0; it < 20; it++) {
        double x = 0;
        for (int i = 0; i < 100000; i++) x += i * 0.5;
        sink = x;
        MPI_Request rq[2];
        MPI_Irecv(q, 4096, MPI_CHAR, (r + n - 1) % n, 1, MPI_COMM_WORLD, &rq[0]);
        MPI_Isend(s, 1024 * (r + 1), MPI_CHAR, (r + 1) % n, 1, MPI_COMM_WORLD, &rq[1]);
        MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
        MPI_Bcast(s, 2048, MPI_CHAR, 0, MPI_COMM_WORLD);
        MPI_Alltoallv(a, sc, sd, MPI_INT, b, rc, rd, MPI_INT, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}
"#;

/// Builds the traced demo's program with `mpicc` in `apps/traced_demo/` (the
/// agent's applications directory); `None` (with the reason printed) when the
/// tracer library, `mpicc` or `mpirun` is missing.
fn traced_demo_app(apps: &std::path::Path) -> Option<PathBuf> {
    match benchlake_tracer::library_path() {
        Some(lib) => outln!("tracer library: {}", lib.display()),
        None => {
            outln!(
                "skipping the traced demo run: no tracer library (searched {}; mpicc was missing at build time, or it was not installed)",
                benchlake_tracer::search_path()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return None;
        }
    }
    for tool in ["mpicc", "mpirun"] {
        let ok = std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            outln!(
                "skipping the traced demo run: {tool} not found (install openmpi-bin and libopenmpi-dev)"
            );
            return None;
        }
    }
    let dir = std::fs::canonicalize(apps)
        .unwrap_or_else(|_| apps.to_path_buf())
        .join("traced_demo");
    let src = dir.join("traced_demo.c");
    let exe = dir.join("traced_demo");
    let built = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(&src, TRACED_DEMO_C))
        .and_then(|_| {
            std::process::Command::new("mpicc")
                .arg("-O1")
                .arg("-o")
                .arg(&exe)
                .arg(&src)
                .output()
        });
    match built {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => {
            outln!(
                "skipping the traced demo run: mpicc failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            None
        }
        Err(e) => {
            outln!("skipping the traced demo run: {}: {e}", dir.display());
            None
        }
    }
}
