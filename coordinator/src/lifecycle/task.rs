//! Task transitions: `QUEUED → LEASED → RUNNING → DONE | FAILED | CANCELLED`.
//!
//! An agent leases its oldest due task ([`lease`]), reports progress (the
//! first report starts it: [`progress`]) and completes it ([`complete`]); a
//! benchmark that ran and failed is a result, not retried. An attempt that
//! ends without a result — the lease expired on a silent agent, the agent
//! never got its lease, the agent restarted — goes back to QUEUED with backoff
//! while attempts remain ([`retry_or_fail`]). Heartbeats keep leases alive
//! ([`heartbeat`]); cancelling a run cancels its tasks ([`super::run::cancel`]).
use std::collections::{HashMap, HashSet};

use benchlake_core::bench::LauncherKind;
use benchlake_core::ids;

use super::{Effects, backoff_ms, run};
use crate::config::CoordinatorConfig;
use crate::error::{CoordError, Result};
use crate::logic::select_agents;
use crate::model::*;
use crate::store::Tx;

/// Largest stdout/stderr tail kept per task (the last 8 KiB).
pub const TAIL_BYTES: usize = 8 << 10;

/// A new QUEUED task of run `run_id` (attempt 1).
pub fn new(
    run_id: &str,
    agent: &str,
    rank: u32,
    num_tasks: u32,
    spec: &Spec,
    peers: Vec<String>,
    now: i64,
) -> TaskRow {
    TaskRow {
        task_id: ids::new_id_at(now),
        run_id: run_id.to_string(),
        agent: agent.to_string(),
        rank,
        num_tasks,
        state: TaskState::Queued,
        attempt: 1,
        max_attempts: spec.max_attempts,
        lease_id: None,
        lease_expires_ms: None,
        not_before_ms: now,
        error: None,
        exit_code: None,
        stdout_tail: String::new(),
        stderr_tail: String::new(),
        outputs: Vec::new(),
        started_at_ms: None,
        finished_at_ms: None,
        peers,
        report: TaskReport::default(),
    }
}

/// The task, if `lease_id` still holds it (LEASED or RUNNING under that lease).
pub fn leased(tx: &mut dyn Tx, task_id: &str, lease_id: &str) -> Result<TaskRow> {
    let t = tx
        .get_task(task_id)?
        .ok_or_else(|| CoordError::NotFound(format!("task_id: no task '{task_id}'")))?;
    if t.lease_id.as_deref() != Some(lease_id) || !held(&t) {
        return Err(CoordError::LeaseLost(format!(
            "task {task_id}: lease {lease_id} is no longer valid (task is {})",
            t.state.as_str()
        )));
    }
    Ok(t)
}

/// Whether an agent holds the task (LEASED or RUNNING).
fn held(t: &TaskRow) -> bool {
    matches!(t.state, TaskState::Leased | TaskState::Running)
}

/// Refuses a transition that needs the task held by its agent.
fn must_be_held(t: &TaskRow, what: &str) -> Result<()> {
    if held(t) {
        Ok(())
    } else {
        Err(CoordError::LeaseLost(format!(
            "task {}: cannot {what}: the task is {}",
            t.task_id,
            t.state.as_str()
        )))
    }
}

/// QUEUED → LEASED: the oldest task of `agent` whose backoff has ended, with
/// its run (what the agent needs to run it). None when there is none.
pub fn lease(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    agent: &str,
    now: i64,
) -> Result<(Option<(TaskRow, RunRow)>, Effects)> {
    let mut fx = Effects::default();
    let Some(mut t) = tx.next_task_for_agent(agent, now)? else {
        return Ok((None, fx));
    };
    if t.state != TaskState::Queued {
        return Err(CoordError::FailedPrecondition(format!(
            "task {}: cannot lease a {} task",
            t.task_id,
            t.state.as_str()
        )));
    }
    let run = tx
        .get_run(&t.run_id)?
        .ok_or_else(|| CoordError::NotFound(format!("run of task {}", t.task_id)))?;
    t.state = TaskState::Leased;
    t.lease_id = Some(ids::new_id_at(now));
    t.lease_expires_ms = Some(now + cfg.lease_timeout_ms as i64);
    tx.update_task(&t)?;
    fx.run_changed(&t.run_id);
    run::advance_into(tx, cfg, &t.run_id, now, &mut fx)?;
    Ok((Some((t, run)), fx))
}

/// A progress report of the agent holding `t` (from [`leased`]): LEASED →
/// RUNNING on the first one (RUNNING stays RUNNING); keeps the output tails
/// and renews the lease.
pub fn progress(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    t: TaskRow,
    stdout_tail: &str,
    stderr_tail: &str,
    now: i64,
) -> Result<Effects> {
    let p = Progress {
        stdout_tail,
        stderr_tail,
        ..Default::default()
    };
    progress_with(tx, cfg, t, &p, now)
}

/// A progress report with what the agent says beyond the tails.
#[derive(Debug, Clone, Default)]
pub struct Progress<'a> {
    pub stdout_tail: &'a str,
    pub stderr_tail: &'a str,
    /// The task waits in a queue outside benchlake (a PENDING Slurm batch
    /// job): it stays LEASED, only its message and lease change.
    pub pending: bool,
    /// Message, Slurm job and nodes; an empty field keeps the stored one.
    pub report: TaskReport,
}

/// [`progress`] with a message, the Slurm job, and the pending case (a
/// queued job does not start the task).
pub fn progress_with(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    mut t: TaskRow,
    p: &Progress<'_>,
    now: i64,
) -> Result<Effects> {
    must_be_held(&t, "report progress")?;
    let mut fx = Effects::default();
    if t.state == TaskState::Leased && !p.pending {
        t.state = TaskState::Running;
        t.started_at_ms = Some(now);
    }
    merge_report(&mut t.report, &p.report);
    t.stdout_tail = tail(p.stdout_tail);
    t.stderr_tail = tail(p.stderr_tail);
    t.lease_expires_ms = Some(now + cfg.lease_timeout_ms as i64);
    tx.update_task(&t)?;
    fx.run_changed(&t.run_id);
    run::advance_into(tx, cfg, &t.run_id, now, &mut fx)?;
    Ok(fx)
}

/// How an agent says a task ended.
#[derive(Debug, Clone, Default)]
pub struct Completion {
    /// The benchmark exited 0 and left its required outputs.
    pub success: bool,
    pub exit_code: i32,
    /// Why it failed (empty: the exit code says it).
    pub error: String,
    /// Uploaded outputs, already checked against the lake.
    pub outputs: Vec<RawFileRow>,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// The Slurm job (sbatch launcher) and its nodes; empty keeps the stored.
    pub slurm_job_id: String,
    pub slurm_nodes: String,
}

/// Sets the non-empty fields of `new` on `r` (a bounded copy of each).
fn merge_report(r: &mut TaskReport, new: &TaskReport) {
    let cut = |s: &str| tail(s).chars().take(1024).collect::<String>();
    for (have, got) in [
        (&mut r.message, &new.message),
        (&mut r.slurm_job_id, &new.slurm_job_id),
        (&mut r.slurm_nodes, &new.slurm_nodes),
    ] {
        if !got.is_empty() {
            *have = cut(got);
        }
    }
}

/// LEASED | RUNNING → DONE, or FAILED. A benchmark that ran and failed is
/// not retried automatically (its failure is the result); `RerunFailed`
/// re-runs it on request.
pub fn complete(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    mut t: TaskRow,
    c: Completion,
    now: i64,
) -> Result<Effects> {
    must_be_held(&t, "complete")?;
    let mut fx = Effects::default();
    merge_report(
        &mut t.report,
        &TaskReport {
            message: String::new(),
            slurm_job_id: c.slurm_job_id.clone(),
            slurm_nodes: c.slurm_nodes.clone(),
        },
    );
    t.outputs = c.outputs;
    t.exit_code = Some(c.exit_code);
    t.stdout_tail = tail(&c.stdout_tail);
    t.stderr_tail = tail(&c.stderr_tail);
    t.lease_id = None;
    t.lease_expires_ms = None;
    t.finished_at_ms = Some(now);
    t.started_at_ms.get_or_insert(now);
    if c.success {
        t.state = TaskState::Done;
        t.error = None;
    } else {
        t.state = TaskState::Failed;
        t.error = Some(if c.error.is_empty() {
            format!("exit code {}", c.exit_code)
        } else {
            c.error
        });
    }
    tx.update_task(&t)?;
    fx.run_changed(&t.run_id);
    run::advance_into(tx, cfg, &t.run_id, now, &mut fx)?;
    Ok(fx)
}

/// Ends an attempt that has no result (its lease expired, its agent restarted
/// or never got it): QUEUED again with backoff while attempts remain — on
/// another eligible agent when `agent_gone` and the run did not name its
/// agents — else FAILED.
pub fn retry_or_fail(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    mut t: TaskRow,
    reason: &str,
    agent_gone: bool,
    now: i64,
) -> Result<Effects> {
    must_be_held(&t, "end its attempt")?;
    let mut fx = Effects::default();
    t.lease_id = None;
    t.lease_expires_ms = None;
    if t.attempt < t.max_attempts {
        t.attempt += 1;
        t.state = TaskState::Queued;
        fx.task_retries += 1;
        t.not_before_ms = now + backoff_ms(cfg, t.attempt - 1);
        t.error = Some(format!("attempt {} ended: {reason}", t.attempt - 1));
        if agent_gone
            && let Some(run) = tx.get_run(&t.run_id)?
            && run.spec.nodes.names.is_empty()
            && run.spec.launcher == LauncherKind::Local
        {
            let busy: Vec<String> = tx
                .tasks_of_run(&t.run_id)?
                .into_iter()
                .map(|x| x.agent)
                .collect();
            if let Ok(mut alt) = select_agents(
                tx,
                &Spec {
                    nodes: Nodes {
                        count: 1,
                        ..run.spec.nodes.clone()
                    },
                    ..run.spec.clone()
                },
                &busy,
            ) && let Some(a) = alt.pop()
            {
                for p in t.peers.iter_mut() {
                    if *p == t.agent {
                        *p = a.clone();
                    }
                }
                t.agent = a;
            }
        }
    } else {
        t.state = TaskState::Failed;
        t.finished_at_ms = Some(now);
        t.error = Some(format!("{reason} (after {} attempt(s))", t.attempt));
    }
    tx.update_task(&t)?;
    fx.run_changed(&t.run_id);
    run::advance_into(tx, cfg, &t.run_id, now, &mut fx)?;
    Ok(fx)
}

/// An agent registered (again): every task leased to an earlier incarnation
/// is unknown to it, so those attempts are over.
pub fn agent_restarted(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    agent: &str,
    now: i64,
) -> Result<Effects> {
    agent_restarted_keeping(tx, cfg, agent, &[], now).map(|(fx, _)| fx)
}

/// [`agent_restarted`], except for the tasks the agent says it still holds
/// (`held`: task id and lease id; the Slurm batch jobs a restarted agent
/// re-attaches to): a task it holds under that very lease stays LEASED or
/// RUNNING with its lease renewed. Returns the ids of the tasks kept.
pub fn agent_restarted_keeping(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    agent: &str,
    held: &[(String, String)],
    now: i64,
) -> Result<(Effects, Vec<String>)> {
    let mut fx = Effects::default();
    let mut kept = Vec::new();
    let stale = tx.tasks_of_agent(agent, &[TaskState::Leased, TaskState::Running])?;
    for mut t in stale {
        let holds = held
            .iter()
            .any(|(id, lease)| *id == t.task_id && t.lease_id.as_deref() == Some(lease.as_str()));
        if holds {
            t.lease_expires_ms = Some(now + cfg.lease_timeout_ms as i64);
            tx.update_task(&t)?;
            kept.push(t.task_id);
            continue;
        }
        fx.merge(retry_or_fail(
            tx,
            cfg,
            t,
            &format!("agent '{agent}' restarted"),
            false,
            now,
        )?);
    }
    Ok((fx, kept))
}

/// Whether a lease ending at `lease_expires_ms` is more than half used at
/// `at`. Heartbeats extend a lease only then: one write per half lease per
/// task, not one per heartbeat.
pub fn lease_half_used(cfg: &CoordinatorConfig, lease_expires_ms: Option<i64>, at: i64) -> bool {
    lease_expires_ms.unwrap_or(0) - at < cfg.lease_timeout_ms as i64 / 2
}

/// A heartbeat of `agent` at `at` that lists task `task_id` as running:
/// renews the lease to `at + lease_timeout_ms` when it is more than half
/// used. False when the agent does not hold the task (not its task, or not
/// LEASED or RUNNING any more): the agent is told to stop it.
pub fn heartbeat(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    agent: &str,
    task_id: &str,
    at: i64,
) -> Result<bool> {
    match tx.get_task(task_id)? {
        Some(mut t) if t.agent == agent && held(&t) => {
            if lease_half_used(cfg, t.lease_expires_ms, at) {
                t.lease_expires_ms = Some(at + cfg.lease_timeout_ms as i64);
                tx.update_task(&t)?;
            }
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// What the coordinator knows of its agents in memory, for [`expire_leases`].
#[derive(Debug, Clone, Copy)]
pub struct Liveness<'a> {
    /// Agent → time of its last heartbeat.
    pub heartbeats: &'a HashMap<String, i64>,
    /// Agent → (time, task ids) of its last heartbeat: the tasks it runs.
    pub running: &'a HashMap<String, (i64, HashSet<String>)>,
}

/// Ends the task leases that expired before `now`; returns how many attempts
/// ended. A task whose agent still heartbeats keeps its lease (heartbeats
/// extend leases lazily), unless a heartbeat sent a heartbeat period after
/// the lease was granted does not list it: that agent never got the task
/// (its `PollTask` reply was lost), and the attempt is over.
pub fn expire_leases(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    live: Liveness<'_>,
    now: i64,
) -> Result<(usize, Effects)> {
    let mut fx = Effects::default();
    let mut ended = 0;
    let lease_ms = cfg.lease_timeout_ms as i64;
    for t in tx.expired_tasks(now)? {
        let last = live.heartbeats.get(&t.agent).copied().unwrap_or(0);
        // The lease was granted (or last extended) a lease period before it
        // ends; a heartbeat one heartbeat period after that which does not
        // list the task comes from an agent that never got it.
        let granted = t.lease_expires_ms.unwrap_or(0) - lease_ms;
        let unknown_to_agent = live.running.get(&t.agent).is_some_and(|(at, ids)| {
            *at > granted + cfg.heartbeat_interval_ms as i64 && !ids.contains(&t.task_id)
        });
        if unknown_to_agent {
            ended += 1;
            let reason = format!(
                "lease expired: agent '{}' heartbeats but does not run the task (its lease reply was lost)",
                t.agent
            );
            fx.merge(retry_or_fail(tx, cfg, t, &reason, false, now)?);
            continue;
        }
        if now - last <= lease_ms {
            let mut t = t;
            t.lease_expires_ms = Some(last + lease_ms);
            tx.update_task(&t)?;
            continue;
        }
        ended += 1;
        let agent_gone = now - last > cfg.agent_lost_after_ms as i64;
        let reason = format!("lease expired: agent '{}' stopped heartbeating", t.agent);
        fx.merge(retry_or_fail(tx, cfg, t, &reason, agent_gone, now)?);
    }
    Ok((ended, fx))
}

/// Ends a task that has not ended because its run is cancelled (called by
/// [`super::run::cancel`], which owns the run's effects).
pub(super) fn cancel(tx: &mut dyn Tx, mut t: TaskRow, reason: &str, now: i64) -> Result<()> {
    if t.state.is_final() {
        return Ok(());
    }
    t.state = TaskState::Cancelled;
    t.lease_expires_ms = None;
    t.finished_at_ms = Some(now);
    t.error = Some(format!("cancelled: {reason}"));
    tx.update_task(&t)
}

/// Keeps the last [`TAIL_BYTES`] of a log tail (on a char boundary).
fn tail(s: &str) -> String {
    if s.len() <= TAIL_BYTES {
        return s.to_string();
    }
    let mut start = s.len() - TAIL_BYTES;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}
