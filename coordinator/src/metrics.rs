//! The coordinator's Prometheus metrics (served on `/metrics` by [`crate::http`]).
//!
//! Two kinds:
//!
//! - gauges read from the state store at each scrape, in one read
//!   transaction ([`crate::store::Tx::state_counts`]: one aggregate query over
//!   runs, tasks and jobs, plus the agent rows): runs, tasks and jobs by
//!   state, queue depths, agents by state;
//! - counters and histograms kept in memory since the process started,
//!   updated where the event happens: lease expiries (the tick), retries
//!   (the lifecycle's [`crate::lifecycle::Effects`], counted by
//!   [`crate::Coordinator::apply`]), commits (latency, files and bytes written
//!   to the lake: [`crate::commit`]), verdicts by check (the `checks` rows a
//!   commit wrote) and RPC latency by method ([`RpcLayer`] on the tonic server).
//!
//! A restarted coordinator starts its counters at zero, as Prometheus expects
//! of counters (`rate()` and `increase()` handle the reset).
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use benchlake_proto::obs::{Counter, CounterVec, Exposition, HistogramVec, Kind, LATENCY_BUCKETS};

use crate::model::{AgentRow, AgentState};

/// Run, task and job states, in lifecycle order (every one is exposed, 0 included).
pub const RUN_STATES: &[&str] = &[
    "PENDING",
    "RUNNING",
    "PROCESSING",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
];
/// Task states.
pub const TASK_STATES: &[&str] = &["QUEUED", "LEASED", "RUNNING", "DONE", "FAILED", "CANCELLED"];
/// Job states.
pub const JOB_STATES: &[&str] = &["QUEUED", "LEASED", "DONE", "FAILED", "CANCELLED"];

/// The in-memory metrics of one coordinator process.
#[derive(Debug)]
pub struct Metrics {
    /// gRPC handling time by method (until the response headers).
    pub rpc: HistogramVec,
    /// Commit of a job's outputs (checks, copy, record), successful ones.
    pub commit: HistogramVec,
    /// Commits that failed, by reason class.
    pub commit_failed: CounterVec,
    /// Leases that expired, by entity (`task`, `job`).
    pub lease_expiries: CounterVec,
    /// Attempts ended without a result and queued again, by entity.
    pub retries: CounterVec,
    /// `checks` verdicts committed, by check and status.
    pub verdicts: CounterVec,
    /// Notification outcomes (`delivered`, `retried`, `rejected`,
    /// `gave_up`, `skipped`: [`crate::notify`]).
    pub notifications: CounterVec,
    /// Node actions on Slurm nodes, by action and dry run
    /// ([`crate::node_actions`]).
    pub node_actions: CounterVec,
    /// Objects past their retention rule, by target and mode
    /// ([`crate::retention`]).
    pub retention_objects: CounterVec,
    /// Their bytes.
    pub retention_bytes: CounterVec,
    /// Compaction by table and event (`scheduled`: jobs queued; `merged`:
    /// parts committed into merged files; `retired`: replaced objects
    /// deleted) ([`crate::compaction`]).
    pub compaction: CounterVec,
    /// Time a transaction of async code waited in the store thread's queue,
    /// by queue (`interactive`, `normal`: [`crate::turns::Executor`]).
    pub store_wait: HistogramVec,
    /// Time it then ran on the store thread (its turn included), by queue.
    pub store_run: HistogramVec,
    /// Bytes of Parquet committed to the lake's tables.
    pub lake_bytes: Counter,
    /// Files committed to the lake's tables.
    pub lake_files: Counter,
    started: Instant,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            rpc: HistogramVec::new(LATENCY_BUCKETS),
            commit: HistogramVec::new(LATENCY_BUCKETS),
            commit_failed: CounterVec::default(),
            lease_expiries: CounterVec::default(),
            retries: CounterVec::default(),
            verdicts: CounterVec::default(),
            notifications: CounterVec::default(),
            node_actions: CounterVec::default(),
            retention_objects: CounterVec::default(),
            retention_bytes: CounterVec::default(),
            compaction: CounterVec::default(),
            store_wait: HistogramVec::new(LATENCY_BUCKETS),
            store_run: HistogramVec::new(LATENCY_BUCKETS),
            lake_bytes: Counter::default(),
            lake_files: Counter::default(),
            started: Instant::now(),
        }
    }
}

/// What one scrape read from the state store.
#[derive(Debug, Default, Clone)]
pub struct StoreCounts {
    /// (entity, state, count): entity `run`, `task`, `job`, or `task_due` /
    /// `job_due` (QUEUED and past their backoff).
    pub counts: Vec<(String, String, u64)>,
    /// The agents.
    pub agents: Vec<AgentRow>,
}

impl StoreCounts {
    fn get(&self, entity: &str, state: &str) -> u64 {
        self.counts
            .iter()
            .filter(|(e, s, _)| e == entity && s == state)
            .map(|c| c.2)
            .sum()
    }
}

impl Metrics {
    /// Writes the page: `role` is `leader` or `single`; `store` what the
    /// scrape read (None when the store could not be read: the store gauges
    /// are left out and `benchlake_state_store_up` is 0).
    pub fn expose(&self, e: &mut Exposition, role: &str, store: Option<&StoreCounts>) {
        expose_role(e, role);
        e.single(
            "benchlake_uptime_seconds",
            "Seconds since this coordinator started.",
            Kind::Gauge,
            self.started.elapsed().as_secs_f64(),
        );
        e.single(
            "benchlake_state_store_up",
            "1 when this scrape could read the state store, else 0.",
            Kind::Gauge,
            if store.is_some() { 1.0 } else { 0.0 },
        );
        if let Some(s) = store {
            for (name, entity, states, help) in [
                (
                    "benchlake_runs",
                    "run",
                    RUN_STATES,
                    "Runs in the state store by state.",
                ),
                (
                    "benchlake_tasks",
                    "task",
                    TASK_STATES,
                    "Tasks in the state store by state.",
                ),
                (
                    "benchlake_jobs",
                    "job",
                    JOB_STATES,
                    "Worker jobs in the state store by state.",
                ),
            ] {
                e.labelled(
                    name,
                    help,
                    Kind::Gauge,
                    &["state"],
                    states
                        .iter()
                        .map(|st| (vec![*st], s.get(entity, st) as f64)),
                );
            }
            e.labelled(
                "benchlake_queue_depth",
                "QUEUED work whose retry backoff has ended: tasks waiting for their agent, jobs waiting for a worker.",
                Kind::Gauge,
                &["queue"],
                [
                    (vec!["tasks"], s.get("task_due", "QUEUED") as f64),
                    (vec!["jobs"], s.get("job_due", "QUEUED") as f64),
                ],
            );
            let n = |st: AgentState| s.agents.iter().filter(|a| a.state == st).count() as f64;
            e.labelled(
                "benchlake_agents",
                "Registered agents by state (ONLINE, LOST; DRAINING: drained and still heartbeating).",
                Kind::Gauge,
                &["state"],
                [
                    (vec!["ONLINE"], n(AgentState::Online)),
                    (vec!["DRAINING"], n(AgentState::Draining)),
                    (vec!["LOST"], n(AgentState::Lost)),
                ],
            );
            e.single(
                "benchlake_agents_drained",
                "Agents marked drained (they get no new tasks), whatever their liveness.",
                Kind::Gauge,
                s.agents.iter().filter(|a| a.drain).count() as f64,
            );
        }
        e.counter_vec(
            "benchlake_lease_expiries_total",
            "Task and job leases that expired (agent or worker silent).",
            &["entity"],
            &self.lease_expiries,
        );
        e.counter_vec(
            "benchlake_retries_total",
            "Task and job attempts that ended without a result and were queued again.",
            &["entity"],
            &self.retries,
        );
        e.histogram_vec(
            "benchlake_commit_duration_seconds",
            "Time to commit a job's staged outputs (verify, copy, record), successful commits.",
            &[],
            &self.commit,
        );
        e.counter_vec(
            "benchlake_commit_failures_total",
            "Commits that failed, by error class.",
            &["reason"],
            &self.commit_failed,
        );
        e.single(
            "benchlake_lake_written_bytes_total",
            "Bytes of Parquet committed to the lake's tables.",
            Kind::Counter,
            self.lake_bytes.get() as f64,
        );
        e.single(
            "benchlake_lake_written_files_total",
            "Parquet files committed to the lake's tables.",
            Kind::Counter,
            self.lake_files.get() as f64,
        );
        e.counter_vec(
            "benchlake_verdicts_total",
            "Health verdicts committed to the checks table, by check and status (OK, WARN, FAIL, ERROR, ...).",
            &["check", "status"],
            &self.verdicts,
        );
        e.counter_vec(
            "benchlake_notifications_total",
            "Notification attempts and outcomes by result: delivered, retried, rejected (4xx), gave_up, skipped (the run ended well, or its findings are silenced).",
            &["result"],
            &self.notifications,
        );
        e.counter_vec(
            "benchlake_node_actions_total",
            "What the node actions did to Slurm nodes (crate::node_actions): drain, resume, left-alone, forgot, error, silenced (acknowledged or in maintenance); dry_run true when only logged.",
            &["action", "dry_run"],
            &self.node_actions,
        );
        e.counter_vec(
            "benchlake_retention_objects_total",
            "Lake objects past their retention rule (crate::retention), by target (raw or the table) and mode (dry-run: counted only; delete: deleted).",
            &["target", "mode"],
            &self.retention_objects,
        );
        e.counter_vec(
            "benchlake_retention_bytes_total",
            "Bytes of the lake objects past their retention rule, by target and mode.",
            &["target", "mode"],
            &self.retention_bytes,
        );
        e.counter_vec(
            "benchlake_compaction_total",
            "Compaction of the lake's tables (crate::compaction), by table and event: scheduled (compact jobs queued), merged (parts committed into a merged file), retired (replaced objects deleted after the grace period).",
            &["table", "event"],
            &self.compaction,
        );
        e.histogram_vec(
            "benchlake_rpc_duration_seconds",
            "gRPC handling time by method, until the response headers (streams: until they start).",
            &["method"],
            &self.rpc,
        );
        e.histogram_vec(
            "benchlake_store_wait_seconds",
            "Time a transaction waited in the state store thread's queue before it ran, by queue (interactive: reads people wait for and leases of queued tasks; normal: the rest).",
            &["queue"],
            &self.store_wait,
        );
        e.histogram_vec(
            "benchlake_store_transaction_seconds",
            "Time a transaction then took on the state store thread, by queue.",
            &["queue"],
            &self.store_run,
        );
    }
}

/// The method label of a gRPC path: `/package.Service/Method` of the
/// services served here, `other` for anything else (a client cannot grow the
/// label set).
pub fn method_label(path: &str) -> &str {
    const SERVICES: &[&str] = &[
        "/benchlake.v1.",
        "/arrow.flight.protocol.FlightService/",
        "/grpc.health.v1.Health/",
        "/grpc.reflection.v1.ServerReflection/",
        "/grpc.reflection.v1alpha.ServerReflection/",
    ];
    let known = path.len() <= 128
        && SERVICES.iter().any(|s| path.starts_with(s))
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._".contains(&b));
    if known { path } else { "other" }
}

/// A tower layer timing every gRPC call into [`Metrics::rpc`].
#[derive(Clone)]
pub struct RpcLayer(pub Arc<Metrics>);

impl<S> tower::Layer<S> for RpcLayer {
    type Service = RpcTimed<S>;
    fn layer(&self, inner: S) -> RpcTimed<S> {
        RpcTimed {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// The service of [`RpcLayer`].
#[derive(Clone)]
pub struct RpcTimed<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B> tower::Service<http::Request<B>> for RpcTimed<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send + 'static>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = method_label(req.uri().path()).to_string();
        let metrics = self.metrics.clone();
        let t0 = Instant::now();
        let f = self.inner.call(req);
        Box::pin(async move {
            let r = f.await;
            metrics.rpc.observe(&[&method], t0.elapsed().as_secs_f64());
            r
        })
    }
}

/// `benchlake_up` and `benchlake_coordinator_role`: all a coordinator that
/// does not lead (starting, standby) exposes, and the start of a leader's page.
pub fn expose_role(e: &mut Exposition, role: &str) {
    e.single(
        "benchlake_up",
        "1 while the coordinator process serves.",
        Kind::Gauge,
        1.0,
    );
    e.labelled(
        "benchlake_coordinator_role",
        "The coordinator's role: leader (PostgreSQL, it leads), single (SQLite) or standby.",
        Kind::Gauge,
        &["role"],
        [(vec![role], 1.0)],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_labels_are_bounded() {
        assert_eq!(
            method_label("/benchlake.v1.RunService/SubmitRun"),
            "/benchlake.v1.RunService/SubmitRun"
        );
        assert_eq!(method_label("/evil/x"), "other");
        assert_eq!(method_label("/benchlake.v1.X/a b"), "other");
    }

    #[test]
    fn store_gauges_list_every_state() {
        let m = Metrics::default();
        let s = StoreCounts {
            counts: vec![
                ("run".into(), "SUCCEEDED".into(), 2),
                ("job_due".into(), "QUEUED".into(), 5),
            ],
            agents: Vec::new(),
        };
        let mut e = Exposition::new();
        m.expose(&mut e, "single", Some(&s));
        let page = e.finish();
        assert!(
            page.contains("benchlake_runs{state=\"SUCCEEDED\"} 2\n"),
            "{page}"
        );
        assert!(
            page.contains("benchlake_runs{state=\"PENDING\"} 0\n"),
            "{page}"
        );
        assert!(
            page.contains("benchlake_queue_depth{queue=\"jobs\"} 5\n"),
            "{page}"
        );
        assert!(page.contains("# TYPE benchlake_commit_duration_seconds histogram\n"));
    }
}
