//! The agent: registers with the coordinator (name, labels, host facts, its
//! catalog), heartbeats on its own task so benchmark work never delays it, pulls
//! tasks, runs them through [`runner`] (only benchmarks of its own catalog, with
//! parameters validated again locally, never through a shell), streams progress
//! and uploads the outputs. Slurm batch jobs it submitted ([`batch`]) outlive
//! it: a restarted agent offers their tasks back and follows them again.
//!
//! [`run`] is the entry point of `benchlake agent`.
pub mod batch;
pub mod contain;
pub mod health;
pub mod host;
pub mod launcher;
pub mod runner;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use benchlake_core::bench::{BenchmarkDef, Catalog};
use benchlake_proto::client::{Auth, channel_with};
use benchlake_proto::retry::RetryPolicy;
use benchlake_proto::v1 as pb;
use pb::agent_service_client::AgentServiceClient;
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// The client type the agent uses.
pub type Client = AgentServiceClient<InterceptedService<Channel, Auth>>;

/// Errors of the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Bad configuration or catalog.
    #[error("{0}")]
    Config(String),
    /// The coordinator refused us for good (protocol mismatch, auth).
    #[error("coordinator refused the agent: {0}")]
    Refused(String),
    /// The coordinator could not be reached for the whole `--retry-for` budget.
    #[error(
        "cannot register with the coordinator at {address} for {waited_s} s (--retry-for): {last}"
    )]
    Unreachable {
        address: String,
        waited_s: u64,
        last: String,
    },
    /// A call failed.
    #[error("coordinator: {0}")]
    Rpc(#[from] tonic::Status),
    /// Local I/O.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl AgentError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        match self {
            AgentError::Rpc(s) => benchlake_proto::retry::is_transient(s),
            AgentError::Io { .. } => true,
            _ => false,
        }
    }
}

/// Result alias of the agent.
pub type Result<T, E = AgentError> = std::result::Result<T, E>;

/// Agent settings (flags / `BENCHLAKE_*` variables of `benchlake agent`).
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Coordinator address (`host:port` or URL), or a comma-separated list
    /// of them (the leader is found by connecting; see
    /// [`benchlake_proto::client::channel_with`]).
    pub coordinator: String,
    /// Agent-role token.
    pub token: Option<String>,
    /// Agent name (unique in the cluster; defaults to the hostname).
    pub name: String,
    /// Labels for node selection.
    pub labels: BTreeMap<String, String>,
    /// The catalog (TOML text); None = the built-in catalog.
    pub catalog: Catalog,
    /// Where task output directories are made.
    pub work_dir: PathBuf,
    /// Tasks run at once.
    pub slots: u32,
    /// Host/IP other agents reach this one on (netprobe); defaults to the hostname.
    pub address: String,
    /// The `mpirun` program and fixed arguments.
    pub mpirun: Vec<String>,
    /// The `srun` program and fixed arguments (default `srun --mpi=pmix`;
    /// see docs/slurm.md).
    pub srun: Vec<String>,
    /// The `sbatch` program and fixed arguments (default `sbatch`); squeue,
    /// scontrol, scancel and sacct are taken from its directory (see
    /// [`batch::SlurmTools`] and docs/slurm.md).
    pub sbatch: Vec<String>,
    /// Idle poll period.
    pub poll_interval: Duration,
    /// Keep task directories after upload (debugging).
    pub keep_work: bool,
    /// How long every call to the coordinator (poll, heartbeat, upload,
    /// completion) is retried through an outage before it gives up
    /// (`--retry-for`; see [`benchlake_proto::retry`]).
    pub retry_for: Duration,
    /// The user benchmarks run as when their catalog entry names none (an
    /// agent running as root refuses entries without one; `root` allows it).
    pub run_as: Option<String>,
    /// Where the applications of `traced` runs must live (`{apps_dir}`, a root
    /// of path parameters); None allows none.
    pub apps_dir: Option<PathBuf>,
    /// A scratch directory benchmarks may name in path parameters (`{scratch_dir}`).
    pub scratch_dir: Option<PathBuf>,
    /// TLS to an `https://` coordinator: CA and client certificate.
    pub tls: benchlake_proto::client::ClientTls,
    /// Catalog entries the agent refuses, with the reason (filled by [`run`]
    /// from [`contain::offered_catalog`]; sent at registration).
    pub refused: Vec<contain::Refused>,
}

impl AgentConfig {
    /// Settings with the built-in catalog and this host's facts.
    pub fn new(coordinator: impl Into<String>, work_dir: impl Into<PathBuf>) -> Result<Self> {
        let hostname = host::hostname();
        Ok(Self {
            coordinator: coordinator.into(),
            token: None,
            name: hostname.clone(),
            labels: BTreeMap::new(),
            catalog: builtin_catalog()?,
            work_dir: work_dir.into(),
            slots: 1,
            address: hostname,
            mpirun: vec!["mpirun".into()],
            srun: vec!["srun".into(), "--mpi=pmix".into()],
            sbatch: vec!["sbatch".into()],
            poll_interval: Duration::from_millis(1000),
            keep_work: false,
            retry_for: benchlake_proto::retry::DEFAULT_RETRY_FOR,
            run_as: None,
            apps_dir: None,
            scratch_dir: None,
            tls: Default::default(),
            refused: Vec::new(),
        })
    }
}

/// The built-in catalog's file, as shipped (`benchlake benchmarks builtin`
/// prints it to start a site's own).
pub const BUILTIN_CATALOG_TOML: &str = include_str!("builtin.toml");

/// The catalog shipped with the agent.
pub fn builtin_catalog() -> Result<Catalog> {
    Catalog::from_toml(BUILTIN_CATALOG_TOML).map_err(|e| AgentError::Config(e.to_string()))
}

/// Loads a catalog file and checks it ([`Catalog::from_toml`]), and that
/// every `run_as` user exists on this node: any error names the file, the
/// benchmark and the field, and the agent does not start.
pub fn load_catalog(path: &std::path::Path) -> Result<Catalog> {
    let text = std::fs::read_to_string(path).map_err(|source| AgentError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let c = Catalog::from_toml(&text)
        .map_err(|e| AgentError::Config(format!("{}: {e}", path.display())))?;
    for b in &c.benchmarks {
        if let Some(u) = b.run_as.as_deref().filter(|u| *u != "root") {
            contain::lookup_user(u).map_err(|e| {
                AgentError::Config(format!(
                    "{}: catalog: benchmark '{}': run_as: {e}",
                    path.display(),
                    b.name
                ))
            })?;
        }
    }
    Ok(c)
}

/// Whether `prog` names an executable file: a path (with a `/`) is checked
/// as is, a bare name is looked up in `PATH`.
pub fn find_program(prog: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if prog.is_empty() {
        return None;
    }
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        return executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| executable(p))
}

/// The catalog entries this node can run: an entry whose program is missing
/// (e.g. `ior` on a node where the site has not built IOR) is left out, so the
/// coordinator never places a run on a node that would fail with "cannot
/// start". Returns the kept catalog and one message per entry left out.
pub fn runnable_catalog(catalog: &Catalog) -> (Catalog, Vec<String>) {
    let mut kept = Catalog::default();
    let mut dropped = Vec::new();
    for b in &catalog.benchmarks {
        match missing_program(b) {
            None => kept.benchmarks.push(b.clone()),
            Some(why) => dropped.push(format!("benchmark '{}' not offered: {why}", b.name)),
        }
    }
    (kept, dropped)
}

/// Why `b` cannot start on this node (its program is not an executable
/// file), or None when it can or when only a task's values name the program.
pub fn missing_program(b: &BenchmarkDef) -> Option<String> {
    let self_exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "benchlake".into());
    let builtins: BTreeMap<String, String> = [("self_exe".to_string(), self_exe)].into();
    match b.program(&builtins) {
        // The program depends on a task value: it can only be checked at run time.
        None => None,
        // Launcher options first (`traced`: `-x LD_PRELOAD=…`): the program is a
        // parameter further on, checked at run time.
        Some(p) if p.starts_with('-') => None,
        Some(p) if find_program(&p).is_some() => None,
        Some(p) => Some(format!(
            "its program '{p}' is not an executable file{}",
            if p.contains('/') { "" } else { " on PATH" }
        )),
    }
}

/// Connects a client to the coordinator.
pub fn client(cfg: &AgentConfig) -> Result<Client> {
    let ch = channel_with(&cfg.coordinator, &cfg.tls).map_err(AgentError::Config)?;
    let auth = Auth::new(cfg.token.as_deref()).map_err(AgentError::Config)?;
    Ok(AgentServiceClient::with_interceptor(ch, auth)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20))
}

/// Registration request for this agent.
pub fn register_request(cfg: &AgentConfig) -> pb::RegisterRequest {
    pb::RegisterRequest {
        protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
        name: cfg.name.clone(),
        labels: cfg.labels.clone().into_iter().collect(),
        hostname: host::hostname(),
        cores: host::cores(),
        memory_bytes: host::memory_bytes(),
        benchmarks: cfg
            .catalog
            .benchmarks
            .iter()
            .map(|b| b.name.clone())
            .collect(),
        version: env!("CARGO_PKG_VERSION").into(),
        address: cfg.address.clone(),
        catalog: cfg
            .catalog
            .benchmarks
            .iter()
            .map(|b| benchlake_proto::catalog::benchmark_def(&b.info()))
            .collect(),
        slots: cfg.slots.max(1),
        held_tasks: Vec::new(),
        refused: cfg
            .refused
            .iter()
            .map(|r| pb::RefusedBenchmark {
                name: r.name.clone(),
                reason: r.reason.clone(),
            })
            .collect(),
    }
}

/// Tasks running on this agent: id → cancel switch.
pub(crate) type Running = Arc<Mutex<HashMap<String, watch::Sender<runner::Stop>>>>;

/// Registers, retrying transient failures with backoff for `cfg.retry_for`
/// in all (`--retry-for`, the same budget as every other call): a coordinator
/// away longer than that ends the agent with [`AgentError::Unreachable`]
/// naming the address (a service manager restarts it; see deploy/systemd).
async fn register(
    client: &mut Client,
    cfg: &AgentConfig,
    held: &[pb::HeldTask],
    shutdown: &mut watch::Receiver<bool>,
) -> Result<pb::RegisterResponse> {
    let mut delay = Duration::from_millis(200);
    let started = tokio::time::Instant::now();
    let deadline = started + cfg.retry_for;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let req = pb::RegisterRequest {
            held_tasks: held.to_vec(),
            ..register_request(cfg)
        };
        let last = match client.register(req).await {
            Ok(r) => return Ok(r.into_inner()),
            Err(s)
                if matches!(
                    s.code(),
                    tonic::Code::FailedPrecondition
                        | tonic::Code::Unauthenticated
                        | tonic::Code::PermissionDenied
                        | tonic::Code::InvalidArgument
                ) =>
            {
                return Err(AgentError::Refused(s.message().to_string()));
            }
            Err(s) => format!("{:?}: {}", s.code(), s.message()),
        };
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(AgentError::Unreachable {
                address: cfg.coordinator.clone(),
                waited_s: now.duration_since(started).as_secs(),
                last,
            });
        }
        tracing::warn!(
            coordinator = %cfg.coordinator,
            attempt,
            error = %last,
            "cannot register yet; retrying until --retry-for is spent"
        );
        let sleep = delay.min(deadline - now);
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = shutdown.changed() => return Err(AgentError::Config("shut down before registering".into())),
        }
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

/// Runs the agent until `shutdown` turns true. Running tasks are killed on
/// shutdown (their leases then expire and the coordinator retries them).
pub async fn run(cfg: AgentConfig, mut shutdown: watch::Receiver<bool>) -> Result<()> {
    std::fs::create_dir_all(&cfg.work_dir).map_err(|source| AgentError::Io {
        path: cfg.work_dir.clone(),
        source,
    })?;
    let mut cfg = cfg;
    // The mark of this agent's task processes names the absolute work directory.
    if let Ok(abs) = std::fs::canonicalize(&cfg.work_dir) {
        cfg.work_dir = abs;
    }
    let killed = contain::kill_leftovers(&cfg.work_dir);
    if !killed.is_empty() {
        tracing::warn!(pids = ?killed, "killed processes an earlier run of this agent left");
    }
    // Slurm batch jobs an earlier life submitted run on: their directories stay.
    let book = batch::JobBook::new(&cfg.work_dir);
    let held = book.load().map_err(AgentError::Config)?;
    if !cfg.keep_work {
        let keep: Vec<PathBuf> = held.iter().map(|e| e.dir.clone()).collect();
        let n = contain::remove_stale_dirs(&cfg.work_dir, &keep);
        if n > 0 {
            tracing::info!(
                runs = n,
                "removed task directories an earlier run of this agent left"
            );
        }
    }
    for d in [&mut cfg.apps_dir, &mut cfg.scratch_dir]
        .into_iter()
        .flatten()
    {
        if let Ok(abs) = std::fs::canonicalize(&*d) {
            *d = abs;
        }
    }
    // Only what the agent will run is offered; the rest is named with why.
    let (offered, refused) = contain::offered_catalog(&cfg.catalog, cfg.run_as.as_deref());
    for r in &refused {
        tracing::warn!(benchmark = %r.name, reason = %r.reason, "refusing benchmark '{}': {}; not offered", r.name, r.reason);
    }
    cfg.catalog = offered;
    cfg.refused = refused;
    let cfg = Arc::new(cfg);
    let mut c = client(&cfg)?;
    let held_tasks: Vec<pb::HeldTask> = held
        .iter()
        .map(|e| pb::HeldTask {
            task_id: e.task_id.clone(),
            lease_id: e.lease_id.clone(),
        })
        .collect();
    let reg = register(&mut c, &cfg, &held_tasks, &mut shutdown).await?;
    health::metrics()
        .registered
        .store(true, std::sync::atomic::Ordering::Relaxed);
    health::contact();
    tracing::info!(agent = %cfg.name, coordinator = %cfg.coordinator, benchmarks = cfg.catalog.benchmarks.len(), "agent registered");
    let running: Running = Arc::new(Mutex::new(HashMap::new()));
    let draining = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    // Re-attach to the batch jobs the coordinator still gives us; the others
    // are not ours any more (their attempt ended while we were away).
    for e in held {
        let t = match e.task() {
            Ok(t) if reg.kept_task_ids.contains(&e.task_id) => t,
            Ok(_) | Err(_) => {
                tracing::warn!(task = %e.task_id, job = ?e.job_id, "the coordinator no longer gives this task to the agent; cancelling its Slurm job");
                batch::abandon(&cfg, &e).await;
                if let Err(err) = book.remove(&e.task_id) {
                    tracing::warn!(error = %err, "cannot update the Slurm job book");
                }
                if !cfg.keep_work {
                    let _ = std::fs::remove_dir_all(&e.dir);
                }
                continue;
            }
        };
        let (tx, rx) = watch::channel(runner::Stop::Run);
        running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(t.task_id.clone(), tx);
        let (cfg, c2, running) = (cfg.clone(), c.clone(), running.clone());
        tasks.spawn(async move {
            let id = t.task_id.clone();
            let m = health::metrics();
            m.running.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            runner::run_task(&cfg, c2, t, rx, Some(e)).await;
            m.running.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        });
    }

    // Heartbeats on their own task: never behind a poll, an upload or a benchmark.
    let hb = {
        let cfg = cfg.clone();
        let running = running.clone();
        let draining = draining.clone();
        let mut shutdown = shutdown.clone();
        let c = c.clone();
        let every = Duration::from_millis(reg.heartbeat_interval_ms.max(50));
        let policy = RetryPolicy::new(cfg.retry_for);
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(every);
            iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = iv.tick() => {}
                    _ = shutdown.changed() => return,
                }
                // Retried through an outage; each attempt lists the tasks running then.
                let beat = policy.call("heartbeat", || {
                    let mut c = c.clone();
                    let req = pb::HeartbeatRequest {
                        name: cfg.name.clone(),
                        running_task_ids: running
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .keys()
                            .cloned()
                            .collect(),
                    };
                    async move { c.heartbeat(req).await }
                });
                let res = tokio::select! {
                    r = beat => r,
                    _ = shutdown.changed() => return,
                };
                match res {
                    Ok(r) => {
                        let r = r.into_inner();
                        health::contact();
                        health::metrics()
                            .draining
                            .store(r.drain, std::sync::atomic::Ordering::Relaxed);
                        draining.store(r.drain, std::sync::atomic::Ordering::Relaxed);
                        let map = running.lock().unwrap_or_else(|p| p.into_inner());
                        for id in r.cancel_task_ids {
                            if let Some(tx) = map.get(&id) {
                                tracing::warn!(task = %id, "coordinator cancelled the task");
                                let _ = tx.send(runner::Stop::Cancel);
                            }
                        }
                    }
                    Err(s) if s.code() == tonic::Code::NotFound => {
                        // The coordinator lost us (e.g. a fresh state database).
                        let again = policy.call("register", || {
                            let mut c = c.clone();
                            let req = register_request(&cfg);
                            async move { c.register(req).await }
                        });
                        let res = tokio::select! {
                            r = again => r,
                            _ = shutdown.changed() => return,
                        };
                        if let Err(e) = res {
                            tracing::warn!(error = %e.message(), "re-registration failed");
                        }
                    }
                    Err(s) => tracing::error!(
                        code = ?s.code(),
                        error = %s.message(),
                        "heartbeat failed (retried for the whole budget if transient)"
                    ),
                }
            }
        })
    };

    let slots = cfg.slots.max(1) as usize;
    let policy = RetryPolicy::new(cfg.retry_for);
    loop {
        if *shutdown.borrow() {
            break;
        }
        while tasks.try_join_next().is_some() {}
        let busy = running.lock().unwrap_or_else(|p| p.into_inner()).len();
        let mut got = false;
        // A long poll: the coordinator answers as soon as a task is queued for
        // this agent, or after one poll interval (an older coordinator at
        // once; the rest of the interval is slept below).
        let polled = tokio::time::Instant::now();
        if busy < slots && !draining.load(std::sync::atomic::Ordering::Relaxed) {
            let poll = policy.call("poll", || {
                let mut c = c.clone();
                let req = pb::PollTaskRequest {
                    name: cfg.name.clone(),
                    free_slots: (slots - busy) as u32,
                    wait_ms: u32::try_from(cfg.poll_interval.as_millis()).unwrap_or(u32::MAX),
                };
                async move { c.poll_task(req).await }
            });
            let res = tokio::select! {
                r = poll => r,
                _ = shutdown.changed() => continue,
            };
            match res {
                Ok(r) => {
                    if let Some(t) = r.into_inner().task {
                        got = true;
                        let (tx, rx) = watch::channel(runner::Stop::Run);
                        running
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(t.task_id.clone(), tx);
                        let (cfg, c2, running) = (cfg.clone(), c.clone(), running.clone());
                        tasks.spawn(async move {
                            let id = t.task_id.clone();
                            let m = health::metrics();
                            m.running.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            runner::run_task(&cfg, c2, t, rx, None).await;
                            m.running.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                            running
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .remove(&id);
                        });
                    }
                }
                Err(s) if s.code() == tonic::Code::NotFound => {
                    let _ = c.register(register_request(&cfg)).await;
                }
                Err(s) => tracing::error!(
                    code = ?s.code(),
                    error = %s.message(),
                    "poll failed (retried for the whole budget if transient)"
                ),
            }
        }
        if !got {
            tokio::select! {
                _ = tokio::time::sleep_until(polled + cfg.poll_interval) => {}
                _ = shutdown.changed() => {}
            }
        }
    }
    // Shutting down: stop every running benchmark.
    for tx in running.lock().unwrap_or_else(|p| p.into_inner()).values() {
        let _ = tx.send(runner::Stop::Shutdown);
    }
    while tasks.join_next().await.is_some() {}
    hb.abort();
    tracing::info!(agent = %cfg.name, "agent stopped");
    Ok(())
}
