//! Every state transition of runs, tasks and jobs (DESIGN.md §6), one module
//! per entity, written over the store's [`Tx`](crate::store::Tx) primitives so
//! that each transition is part of one transaction:
//!
//! - run ([`run`]): `PENDING → RUNNING → PROCESSING → SUCCEEDED | FAILED | CANCELLED`
//! - task ([`task`]): `QUEUED → LEASED → RUNNING → DONE | FAILED | CANCELLED`; an
//!   attempt that ends without a result (lost lease, restarted agent) returns it
//!   to QUEUED with backoff while attempts remain
//! - job ([`job`]): `QUEUED → LEASED → DONE | FAILED | CANCELLED`; a retryable
//!   failure returns it to QUEUED with backoff
//! - agent ([`agent`]): registration (ONLINE), drain, `ONLINE ⇄ LOST` from
//!   the heartbeats
//!
//! When every task of a run has ended, the run's raw outputs become `ingest`
//! jobs; when every job has ended, the run's outcome is decided and a `record`
//! job writes its rows to the `runs` and `raw_files` tables; when that lands
//! the run is final.
//!
//! Nothing else writes a run's, task's or job's state. An operation refuses a
//! transition the entity's state does not allow (a lease-guarded one with
//! [`CoordError::LeaseLost`](crate::CoordError::LeaseLost), which is what a
//! caller whose lease ended sees) and returns its [`Effects`]: what has to
//! happen outside the store once the transaction commits. The caller hands
//! them to [`Coordinator::apply`] after the commit, never inside the
//! transaction, so no watcher or worker is woken to read a state that was then
//! rolled back.
pub mod agent;
pub mod job;
pub mod run;
pub mod task;

#[cfg(test)]
mod tests;

use crate::Coordinator;
use crate::config::CoordinatorConfig;

/// What committed transitions ask of the world outside the store.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[must_use = "effects are applied with Coordinator::apply once the transaction commits"]
pub struct Effects {
    /// Runs whose run, task or job rows changed, once each, in order:
    /// `WatchRun` streams of these runs read them again.
    pub runs_changed: Vec<String>,
    /// Jobs were queued or became due: long-polling `LeaseJob` calls look again.
    pub wake_workers: bool,
    /// Per worker, the change of the number of jobs it holds (`ListWorkers`).
    pub worker_jobs: Vec<(String, i32)>,
    /// Task attempts that ended without a result and were queued again
    /// (`benchlake_retries_total{entity="task"}`).
    pub task_retries: u32,
    /// Job attempts queued again after a retryable failure or an expired lease.
    pub job_retries: u32,
    /// Notifications were queued: the outbox sends them ([`crate::notify`]).
    pub notifications: bool,
}

impl Effects {
    /// Only a wake of the workers (the tick: backoffs may have ended).
    pub fn wake_workers() -> Self {
        Self {
            wake_workers: true,
            ..Self::default()
        }
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.runs_changed.is_empty()
            && !self.wake_workers
            && self.worker_jobs.is_empty()
            && self.task_retries == 0
            && self.job_retries == 0
            && !self.notifications
    }

    /// Adds the effects of another transition of the same transaction.
    pub fn merge(&mut self, other: Effects) {
        for r in other.runs_changed {
            self.run_changed(&r);
        }
        self.wake_workers |= other.wake_workers;
        self.worker_jobs.extend(other.worker_jobs);
        self.task_retries += other.task_retries;
        self.job_retries += other.job_retries;
        self.notifications |= other.notifications;
    }

    pub(crate) fn run_changed(&mut self, run_id: &str) {
        // A transaction touches a handful of runs: a linear check is cheaper
        // than a set, and keeps the order.
        if !self.runs_changed.iter().any(|r| r == run_id) {
            self.runs_changed.push(run_id.to_string());
        }
    }

    pub(crate) fn jobs_queued(&mut self) {
        self.wake_workers = true;
    }

    pub(crate) fn worker_jobs(&mut self, worker: Option<&str>, delta: i32) {
        if let Some(w) = worker {
            self.worker_jobs.push((w.to_string(), delta));
        }
    }
}

impl Coordinator {
    /// The one dispatcher of [`Effects`]: called by every handler and by the
    /// background tick once the transaction that produced them committed.
    pub(crate) fn apply(&self, fx: Effects) {
        if fx.is_empty() {
            return;
        }
        if fx.task_retries > 0 {
            self.metrics
                .retries
                .add(&["task"], u64::from(fx.task_retries));
        }
        if fx.job_retries > 0 {
            self.metrics
                .retries
                .add(&["job"], u64::from(fx.job_retries));
        }
        let now = self.now();
        for (w, delta) in &fx.worker_jobs {
            self.worker_seen(w, now, *delta);
        }
        for r in fx.runs_changed {
            // No subscriber is not an error: nobody watches that run.
            let _ = self.events.send(r);
        }
        if fx.wake_workers {
            self.job_notify.notify_waiters();
        }
        if fx.notifications {
            self.outbox_wake.notify_one();
        }
    }

    /// Records that worker `name` was seen at `now` and adds `delta` to the
    /// jobs it holds (in memory: `ListWorkers`).
    pub(crate) fn worker_seen(&self, name: &str, now: i64, delta: i32) {
        let mut w = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        let e = w.entry(name.to_string()).or_default();
        e.last_seen_ms = now;
        e.leased_jobs = (e.leased_jobs as i64 + delta as i64).max(0) as u32;
    }
}

/// Exponential retry backoff: base · 2^(attempt−1), capped.
pub fn backoff_ms(cfg: &CoordinatorConfig, attempt: u32) -> i64 {
    let exp = attempt.saturating_sub(1).min(20);
    (cfg.retry_backoff_ms.saturating_mul(1u64 << exp)).min(cfg.retry_backoff_max_ms) as i64
}

/// Largest delay between two attempts of a `record` job (5 min). Record jobs
/// retry retryable failures without limit (see [`job::retry_or_fail`]); this
/// keeps a long outage (a full lake) from stretching the retries to hours.
/// TODO: a `CoordinatorConfig` knob.
pub const RECORD_RETRY_MAX_MS: u64 = 5 * 60_000;

/// Backoff of a `record` job after `attempt`: base · 2^(attempt−1), capped at
/// [`RECORD_RETRY_MAX_MS`] (or the configured cap when that is larger).
pub fn record_backoff_ms(cfg: &CoordinatorConfig, attempt: u32) -> i64 {
    let exp = attempt.saturating_sub(1).min(30);
    let cap = RECORD_RETRY_MAX_MS.max(cfg.retry_backoff_max_ms);
    (cfg.retry_backoff_ms.max(1).saturating_mul(1u64 << exp)).min(cap) as i64
}
