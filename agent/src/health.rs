//! The agent's health and metrics (`benchlake agent --http-addr`): what
//! `/readyz` checks and what `/metrics` shows, served by
//! [`benchlake_proto::obs::router`].
//!
//! The counters are process-wide: tasks by benchmark and outcome, tasks
//! running, registration and the last heartbeat the coordinator answered;
//! the retry counters of the calls to the coordinator come from
//! [`benchlake_proto::obs::retry_metrics`].
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use benchlake_proto::obs::{
    BoxFuture, CounterVec, Exposition, Kind, LastContact, Probe, Readiness, write_check,
};

/// An agent whose heartbeats have not been answered for this long is not ready.
pub const CONTACT_STALE: Duration = Duration::from_secs(60);

/// The agent's process-wide metrics.
#[derive(Debug, Default)]
pub struct AgentMetrics {
    /// Tasks by benchmark and outcome (`succeeded`, `failed`, `abandoned`:
    /// left to its lease at shutdown, `unreported`: the completion was refused).
    pub tasks: CounterVec,
    /// Tasks running now.
    pub running: AtomicI64,
    /// Slurm batch jobs by how they ended (Slurm's final state, `REFUSED`
    /// by sbatch, `SCANCELLED` by the agent; docs/slurm.md).
    pub slurm_jobs: CounterVec,
    /// Slurm batch jobs followed again after an agent restart.
    pub slurm_reattached: AtomicI64,
    /// Registered with the coordinator.
    pub registered: AtomicBool,
    /// The coordinator asked this agent to drain.
    pub draining: AtomicBool,
    /// When the coordinator last answered a heartbeat or registration.
    pub last_contact: LastContact,
}

/// The process's [`AgentMetrics`].
pub fn metrics() -> &'static AgentMetrics {
    static M: OnceLock<AgentMetrics> = OnceLock::new();
    M.get_or_init(AgentMetrics::default)
}

/// Records that the coordinator answered.
pub fn contact() {
    metrics().last_contact.touch();
}

/// Records a handled task.
pub fn task(benchmark: &str, outcome: &str) {
    metrics().tasks.inc(&[benchmark, outcome]);
}

/// `/readyz` and `/metrics` of an agent.
pub struct AgentProbe {
    /// Where task outputs go (must be writable).
    pub work_dir: PathBuf,
    /// The coordinator address (for the readiness message).
    pub coordinator: String,
}

impl Probe for AgentProbe {
    fn ready(&self) -> BoxFuture<'_, Readiness> {
        Box::pin(async move {
            let m = metrics();
            let mut r = Readiness::default();
            r.check(
                "coordinator",
                if !m.registered.load(Ordering::Relaxed) || m.last_contact.ms() == 0 {
                    Err(format!("not registered with {} yet", self.coordinator))
                } else {
                    let drain = if m.draining.load(Ordering::Relaxed) {
                        " (draining: no new tasks)"
                    } else {
                        ""
                    };
                    m.last_contact
                        .age(&self.coordinator, CONTACT_STALE)
                        .map(|s| {
                            format!(
                                "registered with {}, answered {s} s ago{drain}",
                                self.coordinator
                            )
                        })
                },
            );
            let probe = self.work_dir.join(".readyz");
            let write = async {
                tokio::fs::write(&probe, b"ok\n").await?;
                tokio::fs::remove_file(&probe).await
            };
            let dir = self.work_dir.display();
            r.check(
                "work_dir",
                write_check(
                    write,
                    Duration::from_secs(5),
                    format!("writable ({dir})"),
                    &format!("{dir}: "),
                )
                .await,
            );
            r
        })
    }

    fn metrics(&self, e: &mut Exposition) {
        let m = metrics();
        e.single(
            "benchlake_agent_up",
            "1 while the agent process runs.",
            Kind::Gauge,
            1.0,
        );
        e.single(
            "benchlake_agent_registered",
            "1 once the agent registered with the coordinator.",
            Kind::Gauge,
            if m.registered.load(Ordering::Relaxed) {
                1.0
            } else {
                0.0
            },
        );
        e.single(
            "benchlake_agent_draining",
            "1 while the coordinator asks this agent to drain (no new tasks).",
            Kind::Gauge,
            if m.draining.load(Ordering::Relaxed) {
                1.0
            } else {
                0.0
            },
        );
        e.counter_vec(
            "benchlake_agent_tasks_total",
            "Tasks handled by benchmark and outcome (succeeded, failed, abandoned, unreported).",
            &["benchmark", "outcome"],
            &m.tasks,
        );
        e.counter_vec(
            "benchlake_agent_slurm_jobs_total",
            "Slurm batch jobs by how they ended: Slurm's state (COMPLETED, FAILED, TIMEOUT, NODE_FAIL, ...), REFUSED by sbatch, SCANCELLED by the agent.",
            &["state"],
            &m.slurm_jobs,
        );
        e.single(
            "benchlake_agent_slurm_reattached_total",
            "Slurm batch jobs followed again after an agent restart.",
            Kind::Counter,
            m.slurm_reattached.load(Ordering::Relaxed) as f64,
        );
        e.single(
            "benchlake_agent_tasks_running",
            "Tasks running now.",
            Kind::Gauge,
            m.running.load(Ordering::Relaxed) as f64,
        );
        e.single(
            "benchlake_agent_last_contact_timestamp_seconds",
            "When the coordinator last answered a heartbeat (Unix time; 0: never).",
            Kind::Gauge,
            m.last_contact.ms() as f64 / 1000.0,
        );
    }
}
