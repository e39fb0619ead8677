//! The coordinator: gRPC services (runs, schedules, cluster, agents, workers,
//! replay), the cron scheduler, durable state, task and job leasing, the commit
//! of staged outputs, and Arrow Flight over the lake's tables.
//!
//! [`run`] is the service entry point used by `benchlake coordinator` and
//! `benchlake up`; [`Coordinator`] holds the state and the background loop
//! (schedule firing, lease expiry, lost-agent detection) that tests can also
//! drive tick by tick on a manual clock.
pub mod access;
pub mod actions;
pub mod audit;
pub mod auth;
pub mod commit;
pub mod compaction;
pub mod config;
pub mod convert;
pub mod cron;
pub mod dashboard;
pub mod error;
pub mod flight;
pub mod grpc;
pub mod http;
pub mod layout_migration;
pub mod leader;
pub mod lifecycle;
pub mod listen;
pub mod logic;
pub mod metrics;
pub mod model;
pub mod node_actions;
pub mod notify;
pub mod oidc;
pub mod pg_testing;
pub mod placement;
pub mod reconcile;
pub mod retention;
pub mod scheduler;
pub mod silence;
pub mod store;
pub mod store_pg;
pub mod tls;
pub mod turns;
pub mod verdicts;

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
    /// Shared, so a transaction on the store's thread can hold it.
    pub(crate) cfg: Arc<CoordinatorConfig>,
    /// Wakes long-polling workers when jobs are queued.
    pub(crate) job_notify: Notify,
    /// Run ids whose state changed (WatchRun).
    pub(crate) events: broadcast::Sender<String>,
    /// Agent name → last heartbeat (ms). Heartbeats only touch this map, so
    /// thousands of agents do not cost a database write each.
    pub(crate) heartbeats: Mutex<HashMap<String, i64>>,
    /// Agent name → (time, task ids) of its last heartbeat: the tasks the
    /// agent says it runs. A leased task missing from a heartbeat sent well
    /// after the lease was granted is one the agent never got (its PollTask
    /// reply was lost), and it is retried when its lease ends.
    pub(crate) running_seen: Mutex<HashMap<String, (i64, std::collections::HashSet<String>)>>,
    pub(crate) workers: Mutex<HashMap<String, WorkerSeen>>,
    /// Names of draining agents (mirrors the stored flag; read by every heartbeat).
    pub(crate) draining: Mutex<std::collections::HashSet<String>>,
    /// Agent name → fingerprint of the credential it registered with (mirrors
    /// the stored rows; read by every agent call).
    pub(crate) credentials: Mutex<HashMap<String, String>>,
    /// The store's placement index (agents, loads, tasks not ended), when it
    /// keeps one: heartbeats check their running tasks against it, so they
    /// never wait for the store's lock.
    pub(crate) placement: Option<placement::SharedPlacement>,
    /// Task id → (agent, heartbeat time) of leases a heartbeat asked to
    /// extend, written by [`Coordinator::flush_lease_extensions`] off the
    /// request path (a blocking task, and every tick).
    pub(crate) lease_ext: Mutex<HashMap<String, (String, i64)>>,
    /// Whether a flush of `lease_ext` is already on its way.
    pub(crate) lease_flush_queued: std::sync::atomic::AtomicBool,
    /// Clock time of the next compaction pass ([`compaction`]).
    pub(crate) compaction_next_ms: std::sync::atomic::AtomicI64,
    /// The store's thread: every transaction of async code runs there
    /// ([`Coordinator::db`], [`turns::Executor`]).
    pub(crate) exec: turns::Executor,
    /// The lead [`Coordinator::open`] took on PostgreSQL, handed on when the
    /// coordinator is dropped.
    lead: Mutex<Option<leader::Elector>>,
    /// Counters and histograms of `/metrics` ([`metrics`]).
    pub(crate) metrics: Arc<metrics::Metrics>,
    /// The `checks` verdicts in memory, for the dashboard ([`verdicts`]).
    pub(crate) verdicts: Arc<verdicts::VerdictIndex>,
    /// Whether the lake's layout is up to date ([`layout_migration`]):
    /// `serve` starts once it is.
    pub(crate) layout_ready: tokio::sync::watch::Sender<bool>,
    /// Drains and resumes of Slurm nodes after node-level checks
    /// ([`node_actions`]).
    pub(crate) node_actions: Arc<node_actions::NodeActions>,
    /// Wakes the notification outbox when rows were queued ([`notify`]).
    pub(crate) outbox_wake: Notify,
    /// Raised when the server is told to stop ([`Coordinator::begin_stop`]):
    /// long polls and `WatchRun` streams end instead of holding the drain
    /// (and the state file) for their full length.
    stopping: tokio::sync::watch::Sender<bool>,
}

/// How far the stored `last_heartbeat_ms` of an agent may lag its in-memory
/// last heartbeat before the reaper writes it (state changes are written at
/// once). Nothing reads the stored value while the coordinator runs; after a
/// restart every agent gets a lease period of grace anyway.
pub const LAST_SEEN_PERSIST_MS: i64 = 60_000;

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("lake", &self.lake)
            .finish()
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        let lead = self.lead.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(mut elector) = lead.take() {
            // On a thread of its own: the last handle may go in any context
            // (an async task, a runtime shutting down), where the elector's
            // blocking client could not always wait.
            std::thread::scope(|s| {
                let _ = s.spawn(|| release_lead(&mut elector)).join();
            });
        }
    }
}

/// Gives the lead up (a clean stop): a standby takes over at once instead of
/// after the lease.
fn release_lead(elector: &mut leader::Elector) {
    if let Err(e) = elector.release() {
        tracing::warn!(error = %e, "could not release the leader lease");
    }
}

/// The store settings of `cfg` on PostgreSQL.
fn pg_options(cfg: &CoordinatorConfig) -> store_pg::PgOptions {
    store_pg::PgOptions {
        stall_ms: cfg.leader_lease_ms,
        synchronous_commit: cfg.state_synchronous_commit,
    }
}

/// This coordinator's name in the leader row, before the elector's unique
/// suffix: the host and `what` (the port it serves).
fn leader_label(what: &str) -> String {
    format!(
        "{}:{what}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "coordinator".into())
    )
}

impl Coordinator {
    /// A coordinator over an opened store and lake.
    pub fn new(
        store: Arc<dyn StateStore>,
        lake: Lake,
        clock: SharedClock,
        cfg: CoordinatorConfig,
    ) -> Result<Arc<Self>> {
        // Every transaction takes a turn, people's reads first (turns.rs).
        let store: Arc<dyn StateStore> = Arc::new(turns::Prioritized::new(store));
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
        let placement = store.placement();
        let metrics = Arc::new(metrics::Metrics::default());
        let exec = turns::Executor::new(store.clone(), metrics.clone())?;
        let c = Arc::new(Self {
            metrics,
            verdicts: Arc::new(verdicts::VerdictIndex::default()),
            layout_ready: tokio::sync::watch::channel(false).0,
            node_actions: Arc::new(node_actions::NodeActions::new(cfg.scontrol.clone())),
            outbox_wake: Notify::new(),
            lead: Mutex::new(None),
            exec,
            placement,
            lease_ext: Mutex::new(HashMap::new()),
            lease_flush_queued: std::sync::atomic::AtomicBool::new(false),
            compaction_next_ms: std::sync::atomic::AtomicI64::new(0),
            store,
            lake,
            clock,
            cfg: Arc::new(cfg),
            job_notify: Notify::new(),
            stopping: tokio::sync::watch::channel(false).0,
            events,
            heartbeats: Mutex::new(heartbeats),
            running_seen: Mutex::new(HashMap::new()),
            workers: Mutex::new(HashMap::new()),
            draining: Mutex::new(draining),
            credentials: Mutex::new(credentials),
        });
        // Runs left mid-transition by a crash are moved on now.
        let ids = c.store.transact(|tx| tx.unfinished_runs())?;
        for id in ids {
            let fx = c
                .store
                .transact(|tx| lifecycle::run::advance(tx, &c.cfg, &id, now))?;
            c.apply(fx);
        }
        // The lake's layout brought up to date (once, from a lake written
        // before 2026-12), then the dashboard's verdicts read off the lake,
        // in the background; `serve` waits for the first.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let c2 = c.clone();
            rt.spawn(async move {
                layout_migration::mark(&c2).await;
                if let Err(e) = layout_migration::migrate(&c2).await {
                    tracing::error!(error = %e, "lake layout: the move stopped; files of the old layout are left (fix the file named and restart)");
                }
                c2.layout_ready.send_replace(true);
                verdicts::load(c2).await
            });
        } else {
            c.layout_ready.send_replace(true);
            c.verdicts.set_loaded();
        }
        Ok(c)
    }

    /// The `checks` verdicts kept in memory ([`verdicts`]).
    pub fn verdicts(&self) -> &verdicts::VerdictIndex {
        &self.verdicts
    }

    /// Opens the state store and the lake named in `cfg`: the SQLite file at
    /// `state_path`, or the PostgreSQL database of `state_postgres`. On
    /// PostgreSQL the coordinator first takes the lead ([`leader`]) and fences
    /// its store with it, as [`run`] does, but once: it fails while another
    /// coordinator's lease runs, and it does not renew its own (waiting as a
    /// standby and renewing are [`run`]'s). Once its lease ended another
    /// coordinator may take over, and every later write of this one is
    /// refused. Dropping the coordinator hands the lead on at once.
    pub fn open(cfg: CoordinatorConfig, clock: SharedClock) -> Result<Arc<Self>> {
        let lake = Lake::open(&cfg.store)?;
        let Some(url) = cfg.state_postgres.clone() else {
            let store: Arc<dyn StateStore> = Arc::new(SqliteStore::open(&cfg.state_path)?);
            return Self::new(store, lake, clock, cfg);
        };
        let store = store_pg::PgStore::open_with(&url, &pg_options(&cfg))?;
        let mut elector = leader::Elector::new(&url, &leader_label("open"), cfg.leader_lease_ms);
        let Some(token) = elector.try_acquire()? else {
            let cur = elector.current()?;
            return Err(CoordError::Fenced(format!(
                "another coordinator leads the state database {} ({}, its lease ends in {} ms)",
                store_pg::redact(&url),
                cur.holder,
                cur.expires_in_ms
            )));
        };
        store.set_fence(store_pg::Fence {
            holder: elector.holder().to_string(),
            token,
        });
        // The rows may have changed between the store's load and the lead.
        let opened = store
            .reload_placement()
            .and_then(|()| Self::new(Arc::new(store), lake, clock, cfg));
        match opened {
            Ok(c) => {
                *c.lead.lock().unwrap_or_else(|p| p.into_inner()) = Some(elector);
                Ok(c)
            }
            Err(e) => {
                release_lead(&mut elector);
                Err(e)
            }
        }
    }

    /// Runs `f` in one store transaction from async code: on the store's
    /// thread ([`turns::Executor`]), so the async threads go on serving
    /// (heartbeats above all) while transactions queue; the future only
    /// waits for the answer.
    pub async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn store::Tx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.exec.run(turns::Priority::Normal, f).await
    }

    /// [`Self::db`] in the queue `p` ([`turns`]): an agent's lease of a task
    /// queued for it goes before new submits (work in flight first), so an
    /// idle agent gets its task while a flood of submits waits.
    pub async fn db_at<T: Send + 'static>(
        &self,
        p: turns::Priority,
        f: impl FnOnce(&mut dyn store::Tx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.exec.run(p, f).await
    }

    /// A read-only transaction someone is waiting for (a CLI listing, a
    /// page): it waits only for reads before it and the one transaction in
    /// progress, not for the queue of submits, leases and commits
    /// ([`turns`]). `f` must not write.
    pub async fn db_read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn store::Tx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.exec.run(turns::Priority::Interactive, f).await
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

    /// The in-memory metrics (counters and histograms of `/metrics`).
    pub fn metrics(&self) -> &metrics::Metrics {
        &self.metrics
    }

    pub(crate) fn last_heartbeat(&self, agent: &str) -> Option<i64> {
        self.heartbeats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(agent)
            .copied()
    }

    /// The running tasks of a heartbeat checked against the placement index:
    /// the ids to cancel (not this agent's, or not LEASED/RUNNING any more).
    /// Leases more than half used are queued for
    /// [`Coordinator::flush_lease_extensions`]. None without an index (the
    /// caller then uses the database).
    pub(crate) fn heartbeat_tasks(
        self: &Arc<Self>,
        agent: &str,
        ids: &[String],
        now: i64,
    ) -> Option<Vec<String>> {
        let p = self.placement.as_ref()?;
        let mut cancel = Vec::new();
        let mut extend = Vec::new();
        {
            let p = p.read().unwrap_or_else(|e| e.into_inner());
            for id in ids {
                match p.task(id) {
                    Some(t)
                        if t.agent == agent
                            && matches!(t.state, TaskState::Leased | TaskState::Running) =>
                    {
                        if lifecycle::task::lease_half_used(&self.cfg, t.lease_expires_ms, now) {
                            extend.push(id.clone());
                        }
                    }
                    _ => cancel.push(id.clone()),
                }
            }
        }
        if !extend.is_empty() {
            {
                let mut q = self.lease_ext.lock().unwrap_or_else(|e| e.into_inner());
                for id in extend {
                    q.insert(id, (agent.to_string(), now));
                }
            }
            use std::sync::atomic::Ordering;
            if !self.lease_flush_queued.swap(true, Ordering::AcqRel) {
                match tokio::runtime::Handle::try_current() {
                    Ok(rt) => {
                        let c = self.clone();
                        rt.spawn_blocking(move || {
                            // Cleared first: extensions queued from now on get
                            // another flush.
                            c.lease_flush_queued.store(false, Ordering::Release);
                            if let Err(e) = c.flush_lease_extensions() {
                                tracing::warn!(error = %e, "lease extension failed (the reaper retries)");
                            }
                        });
                    }
                    // No runtime (a caller driving the coordinator by hand):
                    // the next tick flushes.
                    Err(_) => self.lease_flush_queued.store(false, Ordering::Release),
                }
            }
        }
        Some(cancel)
    }

    /// Writes the lease extensions heartbeats queued: each task still held by
    /// that agent (LEASED or RUNNING) whose lease was more than half used at
    /// the heartbeat gets `heartbeat + lease_timeout_ms`, in one transaction.
    pub fn flush_lease_extensions(&self) -> Result<()> {
        let q = std::mem::take(&mut *self.lease_ext.lock().unwrap_or_else(|e| e.into_inner()));
        if q.is_empty() {
            return Ok(());
        }
        self.store.transact(|tx| {
            for (id, (agent, at)) in &q {
                // A task the agent no longer holds is refused at its next
                // heartbeat; nothing to do here.
                lifecycle::task::heartbeat(tx, &self.cfg, agent, id, *at)?;
            }
            Ok(())
        })
    }

    /// One round of background work at the current clock time: fire due schedules,
    /// expire task and job leases, mark silent agents LOST, and every minute of
    /// clock time remove leftover lake objects ([`Coordinator::reconcile`]).
    pub fn tick(&self) -> Result<TickReport> {
        let now = self.now();
        let cfg = &self.cfg;
        let mut report = TickReport::default();
        // Lease extensions heartbeats asked for and no flush has written yet.
        if let Err(e) = self.flush_lease_extensions() {
            tracing::warn!(error = %e, "lease extension failed");
        }

        // Agents: persist heartbeats and mark silent ones LOST.
        let hb: HashMap<String, i64> = self
            .heartbeats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let changes = self
            .store
            .transact(|tx| lifecycle::agent::check_liveness(tx, cfg, &hb, now))?;
        for a in &changes.back {
            tracing::info!(agent = %a, "agent is heartbeating again");
        }
        let lost = changes.lost;
        for a in &lost {
            tracing::warn!(agent = %a, "agent stopped heartbeating; marked LOST");
        }
        report.lost_agents = lost;

        // Task leases. A task whose agent still heartbeats keeps its lease: the
        // heartbeat extends leases lazily, so only silent agents' tasks expire here.
        let seen = self
            .running_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let live = lifecycle::task::Liveness {
            heartbeats: &hb,
            running: &seen,
        };
        let (n, fx) = self
            .store
            .transact(|tx| lifecycle::task::expire_leases(tx, cfg, live, now))?;
        report.expired_tasks = n;
        if n > 0 {
            self.metrics.lease_expiries.add(&["task"], n as u64);
        }
        self.apply(fx);

        // Job leases.
        let (n, fx) = self
            .store
            .transact(|tx| lifecycle::job::expire_leases(tx, cfg, now))?;
        report.expired_jobs = n;
        if n > 0 {
            self.metrics.lease_expiries.add(&["job"], n as u64);
        }
        self.apply(fx);

        // Schedules.
        let (fired, fx) = self
            .store
            .transact(|tx| scheduler::fire_due(tx, cfg, now))?;
        report.fired = fired.into_iter().map(|r| r.run_id).collect();
        self.apply(fx);
        // Lake garbage: staging of ended job attempts, scratch of ended runs
        // (a pass every `reconcile::RECONCILE_EVERY_MS` of clock time).
        self.reconcile_if_due(now);
        // Compaction: replaced objects whose grace ended, merges to plan.
        self.compaction_tick(now);
        // Retries whose backoff ended may be waiting.
        self.apply(lifecycle::Effects::wake_workers());
        Ok(report)
    }

    /// Marks the coordinator as stopping: waiting long polls return at once
    /// (with no job) and `WatchRun` streams end with UNAVAILABLE, so the
    /// server's drain after a SIGTERM takes no longer than the calls that
    /// are doing work.
    pub fn begin_stop(&self) {
        self.stopping.send_replace(true);
        self.job_notify.notify_waiters();
    }

    /// Whether [`Coordinator::begin_stop`] was called.
    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Resolves once [`Coordinator::begin_stop`] is called.
    pub(crate) fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.stopping.subscribe();
        async move {
            // An error means the coordinator is gone: stopped too.
            let _ = rx.wait_for(|s| *s).await;
        }
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
/// interceptor, over TLS when the config has a certificate ([`tls`]); starts
/// the background loop when the config asks for it.
pub async fn serve(
    coord: Arc<Coordinator>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let acceptor = tls::acceptor(&coord.cfg).map_err(CoordError::Setup)?;
    // A lake of the layout before 2026-12 is moved first (layout_migration).
    let _ = coord
        .layout_ready
        .subscribe()
        .wait_for(|ready| *ready)
        .await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let bg = if coord.cfg.background {
        Some(tokio::spawn(coord.clone().background(stop_rx.clone())))
    } else {
        None
    };
    // Only a serving coordinator sends notifications: on PostgreSQL, the leader.
    let outbox = if coord.cfg.background && coord.cfg.notify.enabled() {
        let o = notify::Outbox::new(&coord.cfg.notify).map_err(CoordError::Setup)?;
        Some(tokio::spawn(o.run(coord.clone(), stop_rx)))
    } else {
        None
    };
    let router = grpc::router(coord.clone())?;
    // The signal stops the listener (tonic drops it at once) and ends the
    // waiting calls, so the drain covers only calls doing work.
    let shutdown = {
        let c = coord.clone();
        async move {
            shutdown.await;
            tracing::info!("stopping: listener closed, draining the calls in flight");
            c.begin_stop();
        }
    };
    let res = match acceptor {
        Some(acceptor) => {
            router
                .serve_with_incoming_shutdown(tls::incoming(listener, acceptor), shutdown)
                .await
        }
        None => {
            // Without TCP_NODELAY a unary reply waits for the peer's delayed
            // ACK (40 ms on Linux): as the TLS path does, set it on each socket.
            let incoming = tokio_stream::StreamExt::map(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                |c| {
                    c.inspect(|tcp| {
                        let _ = tcp.set_nodelay(true);
                    })
                },
            );
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
    }
    .map_err(|e| CoordError::Setup(format!("gRPC server: {e}")));
    let _ = stop_tx.send(true);
    if let Some(bg) = bg {
        let _ = bg.await;
    }
    if let Some(o) = outbox {
        let _ = o.await;
    }
    res
}

/// Opens state and lake from `cfg` and serves until `shutdown` (the entry point of
/// `benchlake coordinator`). On PostgreSQL this coordinator first waits to
/// lead ([`leader`]), holding no port meanwhile, and when it loses the lead
/// stops serving and waits to lead again.
pub async fn run(
    cfg: CoordinatorConfig,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    run_with(cfg, listener, None, shutdown).await
}

/// [`run`], with the HTTP endpoints ([`http`]: `/healthz`, `/readyz`,
/// `/metrics`) on `http_listener` when given. They answer from the start,
/// while a PostgreSQL standby waits too, and stop when this returns.
pub async fn run_with(
    cfg: CoordinatorConfig,
    listener: TcpListener,
    http_listener: Option<TcpListener>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    // A TLS misconfiguration stops the start before anything is opened.
    tls::acceptor(&cfg).map_err(CoordError::Setup)?;
    if let Some(o) = &cfg.oidc {
        oidc::Provider::new(o.clone()).map_err(CoordError::Setup)?;
    }
    // One signal for both servers: on shutdown the gRPC and the HTTP
    // listener close at once, before the gRPC server drains its calls, so a
    // restarted coordinator can bind both ports while this one still drains.
    // Dropped when this returns: the HTTP server then stops too.
    let stop = listen::Stop::on(shutdown);
    let web = match http_listener {
        Some(l) => {
            let h = http::Http::new(&cfg);
            tls::http_acceptor(&cfg).map_err(CoordError::Setup)?;
            let (h2, cfg2, signal) = (h.clone(), cfg.clone(), stop.signal());
            tokio::spawn(async move {
                if let Err(e) = h2.serve(&cfg2, l, signal).await {
                    tracing::error!(error = %e, "HTTP endpoints stopped");
                }
            });
            Some(h)
        }
        None => None,
    };
    if let Some(url) = cfg.state_postgres.clone() {
        return run_ha(cfg, &url, listener, stop.signal(), web).await;
    }
    let coord = Coordinator::open(cfg, Arc::new(SystemClock))?;
    if let Some(h) = &web {
        h.set_serving(coord.clone(), false);
    }
    log_listening(&coord, &listener);
    serve(coord, listener, stop.signal()).await
}

fn log_listening(coord: &Coordinator, listener: &TcpListener) {
    tracing::info!(
        addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        lake = %coord.lake.root(),
        auth = coord.cfg.tokens.enabled(),
        tls = coord.cfg.tls_cert.is_some(),
        mutual_tls = coord.cfg.tls_client_ca.is_some(),
        "coordinator listening"
    );
}

/// [`run`] on PostgreSQL: wait for the lead, serve while it holds, and when
/// it is lost (a renewal that did not get through within the lease, a newer
/// fencing token) stop serving and stand by to lead again; only `shutdown`
/// (or an error before the first term) ends it. A coordinator that exits when
/// it cannot renew leaves the cluster without a leader once every standby has
/// met the same slow database (issue: two coordinators on a loaded host).
async fn run_ha(
    cfg: CoordinatorConfig,
    url: &str,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    web: Option<http::Http>,
) -> Result<()> {
    use futures::FutureExt;
    let addr = listener
        .local_addr()
        .map_err(|e| CoordError::Setup(format!("listen address: {e}")))?;
    // Binding proved the address usable; until this coordinator leads the
    // port stays closed, so no client connects to a standby (the kernel would
    // accept connections that nobody serves).
    drop(listener);
    let shutdown: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
        Box::pin(shutdown);
    let shutdown = shutdown.shared();
    let mut term = 0u64;
    loop {
        term += 1;
        match lead_term(&cfg, url, addr, shutdown.clone(), web.as_ref(), term).await {
            Ok(Term::Stopped) => return Ok(()),
            Ok(Term::Lost(why)) => {
                tracing::error!(
                    reason = %why,
                    "stopped leading: no longer serving; standing by to lead again"
                );
            }
            // A first term that cannot start (the database refuses the
            // schema, the lake cannot be opened) is a configuration error.
            Err(e) if term == 1 => return Err(e),
            Err(e) => {
                tracing::error!(error = %e, "could not lead; standing by to try again");
                let poll =
                    leader::poll_interval(std::time::Duration::from_millis(cfg.leader_lease_ms));
                tokio::select! {
                    _ = tokio::time::sleep(poll) => {}
                    _ = shutdown.clone() => return Ok(()),
                }
            }
        }
        if let Some(h) = &web {
            h.set_standby("");
        }
    }
}

/// How one term of leading ended.
enum Term {
    /// `shutdown`: the lead was handed on.
    Stopped,
    /// The lead was lost, for this reason.
    Lost(String),
}

/// One term: wait as a standby until this coordinator leads (a new name in
/// the leader row each term, so taking over from its own earlier term
/// increments the fencing token and fences whatever that term still had in
/// flight), then serve until the lead is lost or `shutdown`.
async fn lead_term(
    cfg: &CoordinatorConfig,
    url: &str,
    addr: std::net::SocketAddr,
    shutdown: futures::future::Shared<
        std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    >,
    web: Option<&http::Http>,
    term: u64,
) -> Result<Term> {
    use std::sync::Mutex as StdMutex;
    let store = {
        let url = url.to_string();
        let opts = pg_options(cfg);
        tokio::task::spawn_blocking(move || store_pg::PgStore::open_with(&url, &opts))
            .await
            .map_err(|e| CoordError::Setup(format!("state database: {e}")))??
    };
    let elector = Arc::new(StdMutex::new(leader::Elector::new(
        url,
        &leader_label(&addr.port().to_string()),
        cfg.leader_lease_ms,
    )));
    let (holder, lease) = {
        let g = elector.lock().unwrap_or_else(|p| p.into_inner());
        (g.holder().to_string(), g.lease())
    };
    let poll = leader::poll_interval(lease);
    let mut waiting_logged = false;
    let token = loop {
        match leader::with_elector(elector.clone(), |e| e.try_acquire()).await {
            Ok(Some(token)) => break token,
            Ok(None) => {
                if !std::mem::replace(&mut waiting_logged, true) {
                    // A standby holds no port: clients given every coordinator's
                    // address connect to the one that leads.
                    let cur = leader::with_elector(elector.clone(), |e| e.current()).await;
                    if let Some(h) = web {
                        h.set_standby(&cur.as_ref().map(|c| c.holder.clone()).unwrap_or_default());
                    }
                    tracing::info!(
                        me = %holder,
                        leader = %cur.as_ref().map(|c| c.holder.clone()).unwrap_or_default(),
                        "standby: another coordinator leads; waiting for its lease to end"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "leader election: state database unreachable"),
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = shutdown.clone() => return Ok(Term::Stopped),
        }
    };
    tracing::info!(me = %holder, token, term, "leading");
    store.set_fence(store_pg::Fence {
        holder: holder.clone(),
        token,
    });
    let store = {
        // The rows may have changed while this coordinator waited.
        tokio::task::spawn_blocking(move || store.reload_placement().map(|()| store))
            .await
            .map_err(|e| CoordError::Setup(format!("state database: {e}")))??
    };
    let fenced = store.fenced();
    let listener = rebind(addr).await?;
    let lake = Lake::open(&cfg.store)?;
    let coord = Coordinator::new(Arc::new(store), lake, Arc::new(SystemClock), cfg.clone())?;
    if let Some(h) = web {
        h.set_serving(coord.clone(), true);
    }
    log_listening(&coord, &listener);
    // Renews the lease; resolves when it is lost. Renewals use the elector's
    // own connection, whose statement deadline is the lease's (not that of
    // the store's statements), and a renewal that fails is tried again at
    // the next poll: the lead is lost only when none got through for a
    // whole lease (after which a standby may have taken it).
    let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<String>();
    let renew = {
        let elector = elector.clone();
        tokio::spawn(async move {
            let mut last_ok = std::time::Instant::now();
            loop {
                tokio::time::sleep(poll).await;
                match leader::with_elector(elector.clone(), |e| e.try_acquire()).await {
                    Ok(Some(t)) if t == token => last_ok = std::time::Instant::now(),
                    Ok(_) => {
                        let _ = lost_tx.send("another coordinator took the lead".into());
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot renew the leader lease");
                        if last_ok.elapsed() >= lease {
                            let _ = lost_tx.send(format!(
                                "the leader lease could not be renewed for {} ms: {e}",
                                lease.as_millis()
                            ));
                            return;
                        }
                    }
                }
            }
        })
    };
    let lost = async move {
        tokio::select! {
            r = lost_rx => r.unwrap_or_else(|_| "the lease renewal task ended".into()),
            _ = fenced.notified() => {
                "a write was refused: another coordinator holds a newer fencing token".into()
            }
        }
    };
    // A lost lead stops the server at once (no graceful drain: every write
    // would be refused anyway); dropping it closes the port and ends the
    // background loops (their stop channel closes).
    tokio::select! {
        res = serve(coord, listener, shutdown) => {
            renew.abort();
            // A clean stop hands the lead on at once.
            if let Err(e) = leader::with_elector(elector, |e| e.release()).await {
                tracing::warn!(error = %e, "could not release the leader lease");
            }
            res.map(|()| Term::Stopped)
        }
        why = lost => {
            renew.abort();
            Ok(Term::Lost(why))
        }
    }
}

/// Binds `addr` again once this coordinator leads (its port was released).
async fn rebind(addr: std::net::SocketAddr) -> Result<TcpListener> {
    let mut last = None;
    for _ in 0..50 {
        match listen::bind_one(addr) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(CoordError::Setup(format!(
        "cannot listen on {addr} after taking the lead: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    )))
}
