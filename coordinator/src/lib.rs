//! The coordinator: gRPC services (runs, schedules, cluster, agents, workers,
//! replay), the cron scheduler, durable state, task and job leasing, the commit
//! of staged outputs, and Arrow Flight over the lake's tables.
//!
//! [`run`] is the service entry point used by `benchlake coordinator` and
//! `benchlake up`; [`Coordinator`] holds the state and the background loop
//! (schedule firing, lease expiry, lost-agent detection) that tests can also
//! drive tick by tick on a manual clock.
pub mod auth;
pub mod commit;
pub mod config;
pub mod error;
pub mod flight;
pub mod grpc;
pub mod logic;
pub mod model;
pub mod reconcile;
pub mod scheduler;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use benchlake_core::clock::{SharedClock, SystemClock};
use benchlake_core::lake::Lake;
use tokio::net::TcpListener;
use tokio::sync::{Notify, broadcast};

pub use config::{CoordinatorConfig, Role, Tokens};
pub use error::{CoordError, Result};
use model::*;
use store::{SqliteStore, StateStore};

/// What a background tick did (tests assert on it).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TickReport {
    /// Runs created by schedules.
    pub fired: Vec<String>,
    /// Tasks whose lease expired.
    pub expired_tasks: usize,
    /// Jobs whose lease expired.
    pub expired_jobs: usize,
    /// Agents newly marked LOST.
    pub lost_agents: Vec<String>,
}

/// Liveness of a worker as last seen (in memory).
#[derive(Debug, Clone, Default)]
pub struct WorkerSeen {
    pub last_seen_ms: i64,
    pub leased_jobs: u32,
}

/// The coordinator's state and logic, shared by the gRPC services.
pub struct Coordinator {
    pub(crate) store: Arc<dyn StateStore>,
    pub(crate) lake: Lake,
    pub(crate) clock: SharedClock,
    pub(crate) cfg: CoordinatorConfig,
    /// Wakes long-polling workers when jobs are queued.
    pub(crate) job_notify: Notify,
    /// Run ids whose state changed (WatchRun).
    pub(crate) events: broadcast::Sender<String>,
    /// Agent name → last heartbeat (ms). Heartbeats only touch this map, so
    /// thousands of agents do not cost a database write each.
    pub(crate) heartbeats: Mutex<HashMap<String, i64>>,
    pub(crate) workers: Mutex<HashMap<String, WorkerSeen>>,
    /// Names of draining agents (mirrors the stored flag; read by every heartbeat).
    pub(crate) draining: Mutex<std::collections::HashSet<String>>,
    /// Agent name → fingerprint of the credential it registered with (mirrors
    /// the stored rows; read by every agent call).
    pub(crate) credentials: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("lake", &self.lake)
            .finish()
    }
}

impl Coordinator {
    /// A coordinator over an opened store and lake.
    pub fn new(
        store: Arc<dyn StateStore>,
        lake: Lake,
        clock: SharedClock,
        cfg: CoordinatorConfig,
    ) -> Result<Arc<Self>> {
        let (events, _) = broadcast::channel(1024);
        let now = clock.now_ms();
        // After a restart every known agent gets one lease period of grace: its
        // heartbeats were not persisted one by one.
        let agents = store.transact(|tx| tx.list_agents())?;
        let heartbeats = agents
            .iter()
            .map(|a| (a.name.clone(), now.max(a.last_heartbeat_ms)))
            .collect();
        let draining = agents
            .iter()
            .filter(|a| a.drain)
            .map(|a| a.name.clone())
            .collect();
        let credentials = agents
            .iter()
            .map(|a| (a.name.clone(), a.credential.clone()))
            .collect();
        let c = Arc::new(Self {
            store,
            lake,
            clock,
            cfg,
            job_notify: Notify::new(),
            events,
            heartbeats: Mutex::new(heartbeats),
            workers: Mutex::new(HashMap::new()),
            draining: Mutex::new(draining),
            credentials: Mutex::new(credentials),
        });
        // Runs left mid-transition by a crash are moved on now.
        let ids = c.store.transact(|tx| tx.unfinished_runs())?;
        for id in ids {
            c.store
                .transact(|tx| logic::advance_run(tx, &c.cfg, &id, now))?;
        }
        Ok(c)
    }

    /// Opens the SQLite store and the lake named in `cfg`.
    pub fn open(cfg: CoordinatorConfig, clock: SharedClock) -> Result<Arc<Self>> {
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::open(&cfg.state_path)?);
        let lake = Lake::open(&cfg.store)?;
        Self::new(store, lake, clock, cfg)
    }

    /// The lake.
    pub fn lake(&self) -> &Lake {
        &self.lake
    }

    /// The settings.
    pub fn config(&self) -> &CoordinatorConfig {
        &self.cfg
    }

    /// Now, from the coordinator's clock.
    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The state store.
    pub fn store(&self) -> &dyn StateStore {
        self.store.as_ref()
    }

    pub(crate) fn notify_run(&self, run_id: &str) {
        let _ = self.events.send(run_id.to_string());
    }

    pub(crate) fn last_heartbeat(&self, agent: &str) -> Option<i64> {
        self.heartbeats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(agent)
            .copied()
    }

    /// One round of background work at the current clock time: fire due schedules,
    /// expire task and job leases, mark silent agents LOST, and every minute of
    /// clock time remove leftover lake objects ([`Coordinator::reconcile`]).
    pub fn tick(&self) -> Result<TickReport> {
        let now = self.now();
        let cfg = &self.cfg;
        let mut report = TickReport::default();

        // Agents: persist heartbeats and mark silent ones LOST.
        let hb: HashMap<String, i64> = self
            .heartbeats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let lost = self.store.transact(|tx| {
            let mut lost = Vec::new();
            for mut a in tx.list_agents()? {
                let last = hb.get(&a.name).copied().unwrap_or(a.last_heartbeat_ms);
                let mut changed = last != a.last_heartbeat_ms;
                a.last_heartbeat_ms = last;
                let silent = now - last > cfg.agent_lost_after_ms as i64;
                if a.state != AgentState::Lost && silent {
                    a.state = AgentState::Lost;
                    lost.push(a.name.clone());
                    changed = true;
                } else if a.state == AgentState::Lost && !silent {
                    tracing::info!(agent = %a.name, "agent is heartbeating again");
                    a.state = AgentState::Online;
                    changed = true;
                }
                if changed {
                    tx.upsert_agent(&a)?;
                }
            }
            Ok(lost)
        })?;
        for a in &lost {
            tracing::warn!(agent = %a, "agent stopped heartbeating; marked LOST");
        }
        report.lost_agents = lost;

        // Task leases. A task whose agent still heartbeats keeps its lease: the
        // heartbeat extends leases lazily, so only silent agents' tasks expire here.
        let touched = self.store.transact(|tx| {
            let mut runs = Vec::new();
            for t in tx.expired_tasks(now)? {
                let last = hb.get(&t.agent).copied().unwrap_or(0);
                if now - last <= cfg.lease_timeout_ms as i64 {
                    let mut t = t;
                    t.lease_expires_ms = Some(last + cfg.lease_timeout_ms as i64);
                    tx.update_task(&t)?;
                    continue;
                }
                runs.push(t.run_id.clone());
                let agent_gone = now - last > cfg.agent_lost_after_ms as i64;
                let reason = format!("lease expired: agent '{}' stopped heartbeating", t.agent);
                logic::retry_or_fail_task(tx, cfg, t, &reason, agent_gone, now)?;
            }
            Ok(runs)
        })?;
        report.expired_tasks = touched.len();
        for r in touched {
            self.notify_run(&r);
        }

        // Job leases.
        let touched = self.store.transact(|tx| {
            let mut runs = Vec::new();
            for j in tx.expired_jobs(now)? {
                runs.push(j.run_id.clone());
                let reason = format!(
                    "lease expired: worker '{}' stopped renewing",
                    j.leased_by.clone().unwrap_or_default()
                );
                logic::retry_or_fail_job(tx, cfg, j, &reason, true, now)?;
            }
            Ok(runs)
        })?;
        report.expired_jobs = touched.len();
        if !touched.is_empty() {
            self.job_notify.notify_waiters();
        }
        for r in touched {
            self.notify_run(&r);
        }

        // Schedules.
        let fired = self
            .store
            .transact(|tx| scheduler::fire_due(tx, cfg, now))?;
        for r in &fired {
            self.notify_run(&r.run_id);
            report.fired.push(r.run_id.clone());
        }
        // Lake garbage: staging of ended job attempts, scratch of ended runs
        // (a pass every `reconcile::RECONCILE_EVERY_MS` of clock time).
        self.reconcile_if_due(now);
        // Retries whose backoff ended and new jobs may be waiting.
        self.job_notify.notify_waiters();
        Ok(report)
    }

    /// Runs [`Coordinator::tick`] every `tick_ms` until `shutdown`.
    pub async fn background(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut iv =
            tokio::time::interval(std::time::Duration::from_millis(self.cfg.tick_ms.max(10)));
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = iv.tick() => {
                    let c = self.clone();
                    match tokio::task::spawn_blocking(move || c.tick()).await {
                        Ok(Err(e)) => tracing::error!(error = %e, "background tick failed"),
                        Err(e) => tracing::error!(error = %e, "background tick panicked"),
                        Ok(Ok(_)) => {}
                    }
                }
                _ = shutdown.changed() => break,
            }
        }
    }
}

/// Serves the coordinator on `listener` until `shutdown` resolves: all gRPC
/// services, reflection (v1 and v1alpha) and Arrow Flight, behind the token
/// interceptor; starts the background loop when the config asks for it.
pub async fn serve(
    coord: Arc<Coordinator>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let bg = if coord.cfg.background {
        Some(tokio::spawn(coord.clone().background(stop_rx)))
    } else {
        None
    };
    let router = grpc::router(coord.clone())?;
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let res = router
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|e| CoordError::Setup(format!("gRPC server: {e}")));
    let _ = stop_tx.send(true);
    if let Some(bg) = bg {
        let _ = bg.await;
    }
    res
}

/// Opens state and lake from `cfg` and serves until `shutdown` (the entry point of
/// `benchlake coordinator`).
pub async fn run(
    cfg: CoordinatorConfig,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let coord = Coordinator::open(cfg, Arc::new(SystemClock))?;
    tracing::info!(
        addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        lake = %coord.lake.root(),
        auth = coord.cfg.tokens.enabled(),
        "coordinator listening"
    );
    serve(coord, listener, shutdown).await
}
