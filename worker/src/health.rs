//! The worker's health and metrics (`benchlake worker --http-addr`): what
//! `/readyz` checks and what `/metrics` shows, served by
//! [`benchlake_proto::obs::router`].
//!
//! The counters are process-wide (every worker of a process adds to them):
//! jobs by kind and outcome, jobs running, job durations, the last time the
//! coordinator answered; the retry counters of the calls to the coordinator
//! come from [`benchlake_proto::obs::retry_metrics`].
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use benchlake_core::lake::Lake;
use benchlake_proto::obs::{
    BoxFuture, CounterVec, Exposition, HistogramVec, Kind, LastContact, Probe, Readiness, now_ms,
    write_check,
};

/// Buckets of job durations (seconds): 10 ms to 1 h.
const JOB_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// A worker that has not heard from its coordinator for this long is not ready.
pub const CONTACT_STALE: Duration = Duration::from_secs(60);

/// The worker's process-wide metrics.
#[derive(Debug)]
pub struct WorkerMetrics {
    /// Jobs handled by kind and outcome (`done`, `failed`, `cancelled`, `abandoned`).
    pub jobs: CounterVec,
    /// Durations of jobs done (execute, stage, commit) by kind.
    pub job_seconds: HistogramVec,
    /// Jobs running now.
    pub running: AtomicI64,
    /// When the coordinator last answered a lease call.
    pub last_contact: LastContact,
}

/// The process's [`WorkerMetrics`].
pub fn metrics() -> &'static WorkerMetrics {
    static M: OnceLock<WorkerMetrics> = OnceLock::new();
    M.get_or_init(|| WorkerMetrics {
        jobs: CounterVec::default(),
        job_seconds: HistogramVec::new(JOB_BUCKETS),
        running: AtomicI64::new(0),
        last_contact: LastContact::default(),
    })
}

/// Records that the coordinator answered.
pub fn contact() {
    metrics().last_contact.touch();
}

/// Records a handled job.
pub fn job(kind: &str, outcome: &str) {
    metrics().jobs.inc(&[kind, outcome]);
}

/// `/readyz` and `/metrics` of a worker.
pub struct WorkerProbe {
    /// The lake the worker stages to.
    pub lake: Lake,
    /// The worker's name (its lake probe object is `_health/worker-NAME`).
    pub name: String,
    /// The coordinator address (for the readiness message).
    pub coordinator: String,
}

impl Probe for WorkerProbe {
    fn ready(&self) -> BoxFuture<'_, Readiness> {
        Box::pin(async move {
            let mut r = Readiness::default();
            r.check(
                "coordinator",
                metrics()
                    .last_contact
                    .age(&self.coordinator, CONTACT_STALE)
                    .map(|s| format!("{} answered {s} s ago", self.coordinator)),
            );
            let key = format!("_health/worker-{}", self.name);
            let put = self
                .lake
                .put(&key, bytes::Bytes::from(format!("{}\n", now_ms())));
            let ok = format!("writable ({})", self.lake.root());
            r.check(
                "lake",
                write_check(put, Duration::from_secs(5), ok, "").await,
            );
            r
        })
    }

    fn metrics(&self, e: &mut Exposition) {
        let m = metrics();
        e.single(
            "benchlake_worker_up",
            "1 while the worker process runs.",
            Kind::Gauge,
            1.0,
        );
        e.counter_vec(
            "benchlake_worker_jobs_total",
            "Jobs handled by kind and outcome (done, failed, cancelled, abandoned: left to its lease).",
            &["kind", "outcome"],
            &m.jobs,
        );
        e.single(
            "benchlake_worker_jobs_running",
            "Jobs running now.",
            Kind::Gauge,
            m.running.load(Ordering::Relaxed) as f64,
        );
        e.histogram_vec(
            "benchlake_worker_job_duration_seconds",
            "Time from lease to commit of jobs done, by kind.",
            &["kind"],
            &m.job_seconds,
        );
        e.single(
            "benchlake_worker_last_contact_timestamp_seconds",
            "When the coordinator last answered (Unix time; 0: never).",
            Kind::Gauge,
            m.last_contact.ms() as f64 / 1000.0,
        );
    }
}
