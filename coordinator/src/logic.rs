//! Lifecycle rules (DESIGN.md §6), written once over the store's [`Tx`]
//! primitives so that each transition is one transaction:
//!
//! - run: `PENDING → RUNNING → PROCESSING → SUCCEEDED | FAILED | CANCELLED`
//! - task: `QUEUED → LEASED → RUNNING → DONE | FAILED` (expired lease → QUEUED while
//!   attempts remain)
//! - job: `QUEUED → LEASED → DONE | FAILED` (retryable failure → QUEUED with backoff)
//!
//! When every task of a run has ended, the run's raw outputs become `ingest` jobs;
//! when every job has ended, the run's outcome is decided and a `record` job writes
//! its rows to the `runs` and `raw_files` tables; when that lands the run is final.
use std::collections::BTreeMap;

use benchlake_core::bench::{BenchmarkInfo, LauncherKind};
use benchlake_core::{ids, layout};

use crate::config::CoordinatorConfig;
use crate::error::{CoordError, Result};
use crate::model::*;
use crate::store::Tx;

pub use benchlake_core::jobs::*;

/// Exponential retry backoff: base · 2^(attempt−1), capped.
pub fn backoff_ms(cfg: &CoordinatorConfig, attempt: u32) -> i64 {
    let exp = attempt.saturating_sub(1).min(20);
    (cfg.retry_backoff_ms.saturating_mul(1u64 << exp)).min(cfg.retry_backoff_max_ms) as i64
}

/// Largest delay between two attempts of a `record` job (5 min). Record jobs
/// retry retryable failures without limit (see [`retry_or_fail_job`]); this
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

/// Where a run comes from.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub schedule_id: Option<String>,
    pub scheduled_for_ms: Option<i64>,
    pub idempotency_key: Option<String>,
    pub rerun_of: Option<String>,
}

/// The catalog entry of `benchmark` as registered by agents (first agent that has it).
pub fn find_benchmark(agents: &[AgentRow], benchmark: &str) -> Option<BenchmarkInfo> {
    agents
        .iter()
        .flat_map(|a| a.catalog.iter())
        .find(|b| b.name == benchmark)
        .cloned()
}

/// Validates a user spec against the registered catalogs; returns the canonical spec
/// and the benchmark's kind. Errors name the field.
pub fn validate_spec(
    cfg: &CoordinatorConfig,
    agents: &[AgentRow],
    raw: &benchlake_proto::v1::BenchmarkSpec,
) -> Result<(Spec, String)> {
    validate_spec_with(
        cfg,
        raw,
        |b| find_benchmark(agents, b),
        || {
            let mut known: Vec<_> = agents
                .iter()
                .flat_map(|a| a.catalog.iter().map(|b| b.name.clone()))
                .collect();
            known.sort();
            known.dedup();
            known
        },
        |n| agents.iter().any(|a| a.name == n),
    )
}

/// [`validate_spec`] against the store's placement index when it keeps one
/// (no agent row read or decoded), else against every agent row.
pub fn validate_spec_tx(
    cfg: &CoordinatorConfig,
    tx: &mut dyn Tx,
    raw: &benchlake_proto::v1::BenchmarkSpec,
) -> Result<(Spec, String)> {
    if let Some(v) = tx.placement() {
        return validate_spec_with(
            cfg,
            raw,
            |b| v.benchmark(b),
            || v.known_benchmarks(),
            |n| v.agent(n).is_some(),
        );
    }
    let agents = tx.list_agents()?;
    validate_spec(cfg, &agents, raw)
}

fn validate_spec_with(
    cfg: &CoordinatorConfig,
    raw: &benchlake_proto::v1::BenchmarkSpec,
    find: impl Fn(&str) -> Option<BenchmarkInfo>,
    known: impl Fn() -> Vec<String>,
    exists: impl Fn(&str) -> bool,
) -> Result<(Spec, String)> {
    if raw.benchmark.is_empty() {
        return Err(CoordError::invalid("spec.benchmark", "is required"));
    }
    let info = find(&raw.benchmark).ok_or_else(|| {
        let known = known();
        CoordError::invalid(
            "spec.benchmark",
            format!(
                "unknown benchmark '{}' (no registered agent offers it; known: {})",
                raw.benchmark,
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            ),
        )
    })?;
    let params: BTreeMap<String, String> = raw.params.clone().into_iter().collect();
    let params = info
        .validate_params(&params, "spec.params")
        .map_err(CoordError::Invalid)?;
    let launcher = match benchlake_proto::v1::Launcher::try_from(raw.launcher) {
        Ok(benchlake_proto::v1::Launcher::Unspecified) => {
            *info.launchers.first().unwrap_or(&LauncherKind::Local)
        }
        Ok(benchlake_proto::v1::Launcher::Local) => LauncherKind::Local,
        Ok(benchlake_proto::v1::Launcher::Mpirun) => LauncherKind::Mpirun,
        Ok(benchlake_proto::v1::Launcher::Srun) => LauncherKind::Srun,
        Err(_) => {
            return Err(CoordError::invalid(
                "spec.launcher",
                format!("unknown launcher value {}", raw.launcher),
            ));
        }
    };
    if !info.launchers.contains(&launcher) {
        return Err(CoordError::invalid(
            "spec.launcher",
            format!(
                "benchmark '{}' does not support launcher '{}' (supported: {})",
                info.name,
                launcher.as_str(),
                info.launchers
                    .iter()
                    .map(|l| l.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let timeout_s = info
        .effective_timeout(raw.timeout_s)
        .map_err(CoordError::Invalid)?;
    let max_attempts = match raw.max_attempts {
        0 => cfg.task_max_attempts,
        n if n <= 20 => n,
        n => {
            return Err(CoordError::invalid(
                "spec.max_attempts",
                format!("{n} is above 20"),
            ));
        }
    };
    let sel = raw.nodes.clone().unwrap_or_default();
    if sel.names.len() > 10_000 {
        return Err(CoordError::invalid(
            "spec.nodes.names",
            "more than 10000 names",
        ));
    }
    for n in &sel.names {
        if !exists(n) {
            return Err(CoordError::invalid(
                "spec.nodes.names",
                format!("unknown agent '{n}'"),
            ));
        }
    }
    if sel.count > 100_000 {
        return Err(CoordError::invalid(
            "spec.nodes.count",
            format!("{} is absurd", sel.count),
        ));
    }
    Ok((
        Spec {
            benchmark: info.name.clone(),
            params,
            nodes: Nodes {
                names: sel.names,
                labels: sel.labels.into_iter().collect(),
                count: sel.count,
            },
            launcher,
            max_attempts,
            timeout_s,
        },
        info.kind,
    ))
}

/// Whether an agent can take a new task of `spec` (liveness is the tick's job: a
/// silent agent is LOST before its tasks expire).
fn eligible(a: &AgentRow, spec: &Spec) -> bool {
    a.state == AgentState::Online
        && !a.drain
        && a.catalog.iter().any(|b| b.name == spec.benchmark)
        && spec
            .nodes
            .labels
            .iter()
            .all(|(k, v)| a.labels.get(k) == Some(v))
}

/// Chooses the agents of a run. `exclude` are agents that must not be chosen.
///
/// With the store's placement index (the SQLite store keeps one) this reads no
/// row: named agents are looked up, and the least loaded eligible ones are
/// picked among the agents offering the benchmark with their in-memory loads.
/// [`select_agents_from_rows`] is the same rule over every agent row.
pub fn select_agents(tx: &mut dyn Tx, spec: &Spec, exclude: &[String]) -> Result<Vec<String>> {
    let Some(v) = tx.placement() else {
        return select_agents_from_rows(tx, spec, exclude);
    };
    if !spec.nodes.names.is_empty() {
        let mut out = Vec::new();
        for n in &spec.nodes.names {
            let a = v.agent(n).ok_or_else(|| {
                CoordError::invalid("spec.nodes.names", format!("unknown agent '{n}'"))
            })?;
            if !a.eligible(spec) {
                return Err(not_eligible(n, a.state, a.drain, spec));
            }
            out.push(n.clone());
        }
        return named_count(spec, out);
    }
    let want = spec.nodes.count.max(1) as usize;
    let cands = v.candidates(spec, exclude, want);
    least_loaded(spec, want, cands)
}

/// Why named agent `n` cannot take a run of `spec`.
fn not_eligible(n: &str, state: AgentState, drain: bool, spec: &Spec) -> CoordError {
    CoordError::FailedPrecondition(format!(
        "spec.nodes.names: agent '{n}' cannot take the run (state {}, draining {drain}, or it lacks benchmark '{}' or the labels)",
        state.as_str(),
        spec.benchmark
    ))
}

/// The first `spec.nodes.count` of the named agents (all when 0).
fn named_count(spec: &Spec, mut out: Vec<String>) -> Result<Vec<String>> {
    let want = if spec.nodes.count == 0 {
        out.len()
    } else {
        spec.nodes.count as usize
    };
    if want > out.len() {
        return Err(CoordError::invalid(
            "spec.nodes.count",
            format!("{want} agents requested but only {} named", out.len()),
        ));
    }
    out.truncate(want);
    Ok(out)
}

/// The `want` least loaded of `(load, name)` candidates, ties by name.
fn least_loaded(spec: &Spec, want: usize, mut cands: Vec<(usize, String)>) -> Result<Vec<String>> {
    if cands.len() < want {
        return Err(CoordError::FailedPrecondition(format!(
            "spec.nodes.count: {want} agent(s) requested, {} eligible (online, not draining, offering '{}', matching labels)",
            cands.len(),
            spec.benchmark
        )));
    }
    // Least loaded first, then by name, so repeated runs spread over the agents.
    if want < cands.len() {
        cands.select_nth_unstable(want);
        cands.truncate(want);
    }
    cands.sort_unstable();
    Ok(cands.into_iter().map(|c| c.1).collect())
}

/// [`select_agents`] over every agent row, counting each eligible agent's tasks
/// in SQL (stores without a placement index; the tests compare both).
pub fn select_agents_from_rows(
    tx: &mut dyn Tx,
    spec: &Spec,
    exclude: &[String],
) -> Result<Vec<String>> {
    let agents = tx.list_agents()?;
    if !spec.nodes.names.is_empty() {
        let mut out = Vec::new();
        for n in &spec.nodes.names {
            let a = agents.iter().find(|a| &a.name == n).ok_or_else(|| {
                CoordError::invalid("spec.nodes.names", format!("unknown agent '{n}'"))
            })?;
            if !eligible(a, spec) {
                return Err(not_eligible(n, a.state, a.drain, spec));
            }
            out.push(n.clone());
        }
        return named_count(spec, out);
    }
    let want = spec.nodes.count.max(1) as usize;
    let mut cands: Vec<(usize, String)> = Vec::new();
    for a in agents
        .iter()
        .filter(|a| eligible(a, spec) && !exclude.contains(&a.name))
    {
        let load = tx
            .tasks_of_agent(
                &a.name,
                &[TaskState::Queued, TaskState::Leased, TaskState::Running],
            )?
            .len();
        cands.push((load, a.name.clone()));
    }
    least_loaded(spec, want, cands)
}

/// Creates a run and its tasks (one per agent for `local`; one on the first agent,
/// naming all, for `mpirun`/`srun`).
#[allow(clippy::too_many_arguments)]
pub fn create_run(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    spec: Spec,
    kind: String,
    origin: Origin,
    agents: Vec<String>,
    now: i64,
) -> Result<RunRow> {
    let run_id = ids::new_id_at(now);
    let date = layout::date_of_ms(origin.scheduled_for_ms.unwrap_or(now));
    let run = RunRow {
        run_id: run_id.clone(),
        schedule_id: origin.schedule_id,
        benchmark: spec.benchmark.clone(),
        kind,
        state: RunState::Pending,
        spec: spec.clone(),
        submitted_at_ms: now,
        started_at_ms: None,
        finished_at_ms: None,
        scheduled_for_ms: origin.scheduled_for_ms,
        error: None,
        idempotency_key: origin.idempotency_key,
        rerun_of: origin.rerun_of,
        date,
        outcome: None,
    };
    tx.insert_run(&run)?;
    let per_agent = spec.launcher == LauncherKind::Local;
    let task_agents: Vec<&String> = if per_agent {
        agents.iter().collect()
    } else {
        agents.first().into_iter().collect()
    };
    let n = task_agents.len() as u32;
    for (rank, agent) in task_agents.into_iter().enumerate() {
        tx.insert_task(&new_task(
            &run_id,
            agent,
            rank as u32,
            n,
            &spec,
            agents.clone(),
            now,
        ))?;
    }
    let _ = cfg;
    Ok(run)
}

fn new_task(
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
    }
}

/// A new run with only the failed tasks of `old` (same agents and ranks).
pub fn rerun_failed(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    old_id: &str,
    now: i64,
) -> Result<RunRow> {
    let old = tx
        .get_run(old_id)?
        .ok_or_else(|| CoordError::NotFound(format!("run_id: no run '{old_id}'")))?;
    if !old.state.is_final() {
        return Err(CoordError::FailedPrecondition(format!(
            "run {old_id} is {}; only a finished run can be re-run",
            old.state.as_str()
        )));
    }
    let failed: Vec<TaskRow> = tx
        .tasks_of_run(old_id)?
        .into_iter()
        .filter(|t| t.state == TaskState::Failed)
        .collect();
    if failed.is_empty() {
        return Err(CoordError::FailedPrecondition(format!(
            "run {old_id} has no failed tasks"
        )));
    }
    let run_id = ids::new_id_at(now);
    let run = RunRow {
        run_id: run_id.clone(),
        state: RunState::Pending,
        submitted_at_ms: now,
        started_at_ms: None,
        finished_at_ms: None,
        error: None,
        idempotency_key: None,
        rerun_of: Some(old_id.to_string()),
        date: layout::date_of_ms(old.scheduled_for_ms.unwrap_or(now)),
        outcome: None,
        ..old.clone()
    };
    tx.insert_run(&run)?;
    for t in failed {
        let mut nt = new_task(
            &run_id,
            &t.agent,
            t.rank,
            t.num_tasks,
            &old.spec,
            t.peers.clone(),
            now,
        );
        nt.max_attempts = old.spec.max_attempts.max(1);
        tx.insert_task(&nt)?;
    }
    let _ = cfg;
    Ok(run)
}

/// Moves a run forward after any change of its tasks or jobs. Idempotent; returns
/// whether the run changed.
pub fn advance_run(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run_id: &str,
    now: i64,
) -> Result<bool> {
    let Some(mut run) = tx.get_run(run_id)? else {
        return Ok(false);
    };
    let before = run.clone();
    let tasks = tx.tasks_of_run(run_id)?;
    // Targeted queries: a run may have thousands of jobs (sweeps), and this runs
    // after every one of them.
    let record = tx.job_of_kind(run_id, RECORD_JOB)?;
    let record = record.as_ref();

    if run.state == RunState::Cancelled {
        if run.outcome.is_some() {
            match record {
                None => insert_record_job(tx, cfg, &run, &tasks, now)?,
                Some(j) if j.state.is_final() => run.outcome = None,
                Some(_) => {}
            }
        }
    } else if !run.state.is_final() {
        if run.state == RunState::Pending
            && tasks
                .iter()
                .any(|t| matches!(t.state, TaskState::Leased | TaskState::Running))
        {
            run.state = RunState::Running;
            run.started_at_ms.get_or_insert(now);
        }
        let tasks_done = tasks.iter().all(|t| t.state.is_final());
        if tasks_done && matches!(run.state, RunState::Pending | RunState::Running) {
            if run.started_at_ms.is_none() {
                run.started_at_ms = Some(now);
            }
            run.state = RunState::Processing;
            for j in ingest_jobs(&run, &tasks, cfg, now) {
                tx.insert_job(&j)?;
            }
        }
        if run.state == RunState::Processing {
            let work_done = tx.count_open_jobs(run_id, RECORD_JOB)? == 0;
            if work_done {
                match (run.outcome, record) {
                    (None, _) => {
                        let failed = tx.failed_jobs(run_id)?;
                        let (mut outcome, mut error) = decide(&tasks, &failed);
                        // An error set at creation (a scheduled run that could not be
                        // placed) fails the run.
                        if let Some(pre) = run.error.take() {
                            outcome = RunState::Failed;
                            error = Some(match error {
                                Some(e) => format!("{pre}; {e}"),
                                None => pre,
                            });
                        }
                        run.outcome = Some(outcome);
                        run.error = error;
                        run.finished_at_ms = Some(now);
                        insert_record_job(tx, cfg, &run, &tasks, now)?;
                    }
                    (Some(outcome), Some(j)) if j.state.is_final() => {
                        run.state = outcome;
                        run.outcome = None;
                        if j.state == JobState::Failed {
                            let e = format!(
                                "run record not written: {}",
                                j.error.clone().unwrap_or_default()
                            );
                            run.error = Some(match run.error.take() {
                                Some(prev) => format!("{prev}; {e}"),
                                None => e,
                            });
                            run.state = RunState::Failed;
                        }
                    }
                    (Some(_), None) => insert_record_job(tx, cfg, &run, &tasks, now)?,
                    (Some(_), Some(_)) => {}
                }
            }
        }
    }
    if run != before {
        tx.update_run(&run)?;
        return Ok(true);
    }
    Ok(false)
}

/// The run's outcome once its tasks and work jobs have ended.
fn decide(tasks: &[TaskRow], jobs: &[JobRow]) -> (RunState, Option<String>) {
    let mut errors = Vec::new();
    for t in tasks.iter().filter(|t| t.state == TaskState::Failed) {
        errors.push(format!(
            "task {} (rank {}, agent {}) failed: {}",
            t.task_id,
            t.rank,
            t.agent,
            t.error.clone().unwrap_or_default()
        ));
    }
    for j in jobs
        .iter()
        .filter(|j| j.kind != RECORD_JOB && j.state == JobState::Failed)
    {
        errors.push(format!(
            "{} job {} failed: {}",
            j.kind,
            j.job_id,
            j.error.clone().unwrap_or_default()
        ));
    }
    if errors.is_empty() {
        (RunState::Succeeded, None)
    } else {
        (RunState::Failed, Some(errors.join("; ")))
    }
}

fn ingest_jobs(run: &RunRow, tasks: &[TaskRow], cfg: &CoordinatorConfig, now: i64) -> Vec<JobRow> {
    let known: Vec<&str> = benchlake_formats::kinds().iter().map(|k| k.0).collect();
    let mut out = Vec::new();
    for t in tasks.iter().filter(|t| t.state == TaskState::Done) {
        let mut by_format: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for o in &t.outputs {
            if known.contains(&o.format.as_str()) {
                by_format.entry(&o.format).or_default().push(o.key.clone());
            }
        }
        for (format, keys) in by_format {
            let spec = IngestSpec {
                format: format.to_string(),
                keys,
                task_id: t.task_id.clone(),
                agent: t.agent.clone(),
            };
            // The run's schedule and parameters ride along for the checks follow-up.
            let info = benchlake_core::jobs::IngestRunInfo {
                schedule_id: run.schedule_id.clone(),
                benchmark: Some(run.benchmark.clone()),
                params: run.spec.params.clone(),
                kind: Some(run.kind.clone()),
            };
            out.push(new_job(
                run,
                INGEST_JOB,
                benchlake_core::jobs::ingest_spec_json(&spec, &info),
                cfg,
                now,
            ));
        }
    }
    out
}

/// A new QUEUED job of `run`.
pub fn new_job(
    run: &RunRow,
    kind: &str,
    spec_json: String,
    cfg: &CoordinatorConfig,
    now: i64,
) -> JobRow {
    JobRow {
        job_id: ids::new_id_at(now),
        run_id: run.run_id.clone(),
        kind: kind.to_string(),
        state: JobState::Queued,
        attempt: 1,
        max_attempts: cfg.job_max_attempts,
        spec_json,
        error: None,
        lease_id: None,
        leased_by: None,
        lease_expires_ms: None,
        not_before_ms: now,
        created_ms: now,
        committed_keys: Vec::new(),
        date: run.date.clone(),
    }
}

fn insert_record_job(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run: &RunRow,
    tasks: &[TaskRow],
    now: i64,
) -> Result<()> {
    let status = run.outcome.unwrap_or(run.state);
    let mut agents: Vec<String> = tasks.iter().flat_map(|t| t.peers.iter().cloned()).collect();
    agents.sort();
    agents.dedup();
    let raw_files = tasks
        .iter()
        .flat_map(|t| {
            t.outputs.iter().map(|o| RecordRawFile {
                task_id: t.task_id.clone(),
                agent: t.agent.clone(),
                key: o.key.clone(),
                bytes: o.bytes,
                sha256: o.sha256.clone(),
                format: o.format.clone(),
            })
        })
        .collect();
    let spec = RecordSpec {
        run_id: run.run_id.clone(),
        schedule_id: run.schedule_id.clone(),
        benchmark: run.benchmark.clone(),
        kind: run.kind.clone(),
        status: status.as_str().to_string(),
        params: run.spec.params.clone(),
        submitted_at_ms: run.submitted_at_ms,
        started_at_ms: run.started_at_ms,
        finished_at_ms: run.finished_at_ms.or(Some(now)),
        agents,
        error: run.error.clone(),
        raw_files,
    };
    tx.insert_job(&new_job(
        run,
        RECORD_JOB,
        serde_json::to_string(&spec)?,
        cfg,
        now,
    ))
}

/// Cancels a run: queued and running tasks and queued jobs end as CANCELLED.
pub fn cancel_run(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run_id: &str,
    reason: &str,
    now: i64,
) -> Result<RunRow> {
    let mut run = tx
        .get_run(run_id)?
        .ok_or_else(|| CoordError::NotFound(format!("run_id: no run '{run_id}'")))?;
    if run.state.is_final() {
        return Ok(run);
    }
    for mut t in tx.tasks_of_run(run_id)? {
        if !t.state.is_final() {
            t.state = TaskState::Cancelled;
            t.lease_expires_ms = None;
            t.finished_at_ms = Some(now);
            t.error = Some(format!("cancelled: {reason}"));
            tx.update_task(&t)?;
        }
    }
    for mut j in tx.jobs_of_run(run_id)? {
        if !j.state.is_final() && j.kind != RECORD_JOB {
            j.state = JobState::Cancelled;
            j.lease_expires_ms = None;
            j.error = Some(format!("cancelled: {reason}"));
            tx.update_job(&j)?;
        }
    }
    run.state = RunState::Cancelled;
    run.outcome = Some(RunState::Cancelled);
    run.finished_at_ms = Some(now);
    run.error = Some(if reason.is_empty() {
        "cancelled".into()
    } else {
        format!("cancelled: {reason}")
    });
    tx.update_run(&run)?;
    advance_run(tx, cfg, run_id, now)?;
    tx.get_run(run_id)?
        .ok_or_else(|| CoordError::NotFound(format!("run_id: no run '{run_id}'")))
}

/// Ends a task's attempt that lost its lease (or whose agent restarted): retried
/// with backoff while attempts remain — on another eligible agent when the agent
/// is gone and the run did not name its agents — else FAILED.
pub fn retry_or_fail_task(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    mut t: TaskRow,
    reason: &str,
    agent_gone: bool,
    now: i64,
) -> Result<()> {
    t.lease_id = None;
    t.lease_expires_ms = None;
    if t.attempt < t.max_attempts {
        t.attempt += 1;
        t.state = TaskState::Queued;
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
    let run_id = t.run_id.clone();
    tx.update_task(&t)?;
    advance_run(tx, cfg, &run_id, now)?;
    Ok(())
}

/// Ends a job attempt: retried with backoff while attempts remain (and the failure
/// is retryable), else FAILED.
///
/// A `record` job (the run's row in `runs`) never runs out of attempts on a
/// retryable failure or an expired lease: it is retried with
/// [`record_backoff_ms`] for as long as its run exists, so a run that ended
/// while the lake was full or unreachable still gets its row once the lake is
/// back; the run stays PROCESSING with its decided outcome meanwhile. A
/// non-retryable failure fails it at once, and the run with it.
pub fn retry_or_fail_job(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    mut j: JobRow,
    reason: &str,
    retryable: bool,
    now: i64,
) -> Result<()> {
    j.lease_id = None;
    j.leased_by = None;
    j.lease_expires_ms = None;
    let record_retry = retryable && j.kind == RECORD_JOB && tx.get_run(&j.run_id)?.is_some();
    if record_retry {
        j.attempt = j.attempt.saturating_add(1);
        j.state = JobState::Queued;
        j.not_before_ms = now + record_backoff_ms(cfg, j.attempt - 1);
        j.error = Some(format!(
            "attempt {} ended: {reason} (record jobs retry until they succeed)",
            j.attempt - 1
        ));
        tracing::warn!(job = %j.job_id, run = %j.run_id, attempt = j.attempt - 1,
            retry_in_ms = j.not_before_ms - now, error = %reason, "run record not written; retrying");
    } else if retryable && j.attempt < j.max_attempts {
        j.attempt += 1;
        j.state = JobState::Queued;
        j.not_before_ms = now + backoff_ms(cfg, j.attempt - 1);
        j.error = Some(format!("attempt {} ended: {reason}", j.attempt - 1));
    } else {
        j.state = JobState::Failed;
        j.error = Some(if retryable {
            format!("{reason} (after {} attempt(s))", j.attempt)
        } else {
            reason.to_string()
        });
    }
    let run_id = j.run_id.clone();
    tx.update_job(&j)?;
    if j.state == JobState::Failed {
        job_ended(tx, cfg, &j, now)?;
    }
    advance_run(tx, cfg, &run_id, now)?;
    Ok(())
}

/// The job, if `lease_id` still holds it.
pub fn leased_job(tx: &mut dyn Tx, job_id: &str, lease_id: &str) -> Result<JobRow> {
    let j = tx
        .get_job(job_id)?
        .ok_or_else(|| CoordError::NotFound(format!("job_id: no job '{job_id}'")))?;
    if j.lease_id.as_deref() != Some(lease_id) || j.state != JobState::Leased {
        return Err(CoordError::LeaseLost(format!(
            "job {job_id}: lease {lease_id} is no longer valid (job is {})",
            j.state.as_str()
        )));
    }
    Ok(j)
}

/// Checks a job group name (`FollowUp::group`, `FollowUp::wait_for`).
pub fn check_group_name(field: &str, g: &str) -> Result<()> {
    let ok = !g.is_empty()
        && g.len() <= 128
        && g.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(CoordError::invalid(
            field,
            format!("'{g}' must be 1-128 characters of [A-Za-z0-9._-]"),
        ))
    }
}

/// Queues the follow-up jobs of a committed job. A follow-up with `wait_for`
/// is parked (`not_before_ms = store::PARKED`) until every job of that group of
/// the run has ended; a waiting job whose group is already over (or empty) is
/// released (or failed) at once.
pub fn insert_follow_ups(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run: &RunRow,
    follow_ups: &[FollowUp],
    now: i64,
) -> Result<()> {
    let mut waited: Vec<&str> = Vec::new();
    for f in follow_ups {
        let mut j = new_job(run, &f.kind, f.spec.to_string(), cfg, now);
        if let Some(w) = f.wait_for.as_deref() {
            j.not_before_ms = crate::store::PARKED;
            if !waited.contains(&w) {
                waited.push(w);
            }
        }
        tx.insert_job(&j)?;
        if f.group.is_some() || f.wait_for.is_some() {
            tx.set_job_group(&j.job_id, f.group.as_deref(), f.wait_for.as_deref())?;
        }
    }
    for g in waited {
        release_waiting(tx, cfg, &run.run_id, g, now)?;
    }
    Ok(())
}

/// Called when `job` has ended (DONE, FAILED or CANCELLED): if it belongs to a
/// group, the jobs waiting for that group may go.
pub fn job_ended(tx: &mut dyn Tx, cfg: &CoordinatorConfig, job: &JobRow, now: i64) -> Result<()> {
    if let (Some(g), _) = tx.job_group(&job.job_id)? {
        release_waiting(tx, cfg, &job.run_id, &g, now)?;
    }
    Ok(())
}

/// Releases the jobs of `run_id` waiting for `group` once no job of the group
/// is queued or leased: they become due now, or — when a job of the group
/// failed or was cancelled — they fail with that job named, so a merge never
/// runs on partial inputs. A waiting job that fails this way ends its own group
/// in turn. Returns the number of jobs released.
pub fn release_waiting(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run_id: &str,
    group: &str,
    now: i64,
) -> Result<usize> {
    let _ = cfg;
    let mut released = 0;
    let mut todo = vec![group.to_string()];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(g) = todo.pop() {
        if !seen.insert(g.clone()) || tx.open_jobs_in_group(run_id, &g)? > 0 {
            continue;
        }
        let failed = tx.failed_jobs_in_group(run_id, &g)?;
        for mut w in tx.jobs_waiting_for(run_id, &g)? {
            if w.not_before_ms != crate::store::PARKED {
                continue;
            }
            if let Some(f) = failed.first() {
                let more = if failed.len() > 1 {
                    format!(" (and {} more job(s) of the group)", failed.len() - 1)
                } else {
                    String::new()
                };
                w.state = JobState::Failed;
                w.not_before_ms = now;
                w.error = Some(format!(
                    "not run: it waits for job group '{g}', whose {} job {} {}: {}{more}",
                    f.kind,
                    f.job_id,
                    if f.state == JobState::Cancelled {
                        "was cancelled"
                    } else {
                        "failed"
                    },
                    f.error.clone().unwrap_or_default()
                ));
                tx.update_job(&w)?;
                if let (Some(wg), _) = tx.job_group(&w.job_id)? {
                    todo.push(wg);
                }
            } else {
                w.not_before_ms = now;
                tx.update_job(&w)?;
                released += 1;
            }
        }
    }
    Ok(released)
}

#[cfg(test)]
mod record_retry_tests {
    use std::sync::Arc;

    use benchlake_core::clock::ManualClock;
    use benchlake_core::lake::Lake;

    use super::*;
    use crate::Coordinator;
    use crate::store::{SqliteStore, StateStore};

    const T0: i64 = 1_795_392_000_000;

    fn cfg() -> CoordinatorConfig {
        CoordinatorConfig {
            job_max_attempts: 3,
            retry_backoff_ms: 1_000,
            retry_backoff_max_ms: 10_000,
            job_lease_timeout_ms: 10_000,
            background: false,
            ..Default::default()
        }
    }

    /// A coordinator on a manual clock with one run whose work has ended, so
    /// its record job is queued; returns the run id.
    fn setup(dir: &std::path::Path) -> (Arc<Coordinator>, ManualClock, String) {
        let clock = ManualClock::new(T0);
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
        let lake = Lake::local(dir).unwrap();
        let c = Coordinator::new(store, lake, Arc::new(clock.clone()), cfg()).unwrap();
        let run = RunRow {
            run_id: ids::new_id_at(T0),
            schedule_id: None,
            benchmark: "b".into(),
            kind: "noop".into(),
            state: RunState::Processing,
            spec: Spec {
                benchmark: "b".into(),
                params: BTreeMap::new(),
                nodes: Nodes::default(),
                launcher: LauncherKind::Local,
                max_attempts: 1,
                timeout_s: 60,
            },
            submitted_at_ms: T0,
            started_at_ms: Some(T0),
            finished_at_ms: None,
            scheduled_for_ms: None,
            error: None,
            idempotency_key: None,
            rerun_of: None,
            date: "2026-11-23".into(),
            outcome: None,
        };
        let id = run.run_id.clone();
        c.store()
            .transact(|tx| {
                tx.insert_run(&run)?;
                advance_run(tx, &cfg(), &run.run_id, T0)
            })
            .unwrap();
        (c, clock, id)
    }

    fn record(c: &Coordinator, run_id: &str) -> JobRow {
        c.store()
            .transact(|tx| tx.job_of_kind(run_id, RECORD_JOB))
            .unwrap()
            .unwrap()
    }

    fn run(c: &Coordinator, run_id: &str) -> RunRow {
        c.store()
            .transact(|tx| tx.get_run(run_id))
            .unwrap()
            .unwrap()
    }

    /// Leases the record job at `now` (as `LeaseJob` does).
    fn lease(c: &Coordinator, run_id: &str, now: i64) -> JobRow {
        let mut j = record(c, run_id);
        assert_eq!(j.state, JobState::Queued);
        assert!(j.not_before_ms <= now, "leased before its backoff ended");
        j.state = JobState::Leased;
        j.lease_id = Some(ids::new_id_at(now));
        j.leased_by = Some("w".into());
        j.lease_expires_ms = Some(now + 10_000);
        c.store().transact(|tx| tx.update_job(&j)).unwrap();
        j
    }

    #[test]
    fn record_backoff_doubles_up_to_five_minutes() {
        let cfg = cfg();
        assert_eq!(record_backoff_ms(&cfg, 1), 1_000);
        assert_eq!(record_backoff_ms(&cfg, 2), 2_000);
        assert_eq!(record_backoff_ms(&cfg, 9), 256_000);
        assert_eq!(record_backoff_ms(&cfg, 10), RECORD_RETRY_MAX_MS as i64);
        assert_eq!(
            record_backoff_ms(&cfg, u32::MAX),
            RECORD_RETRY_MAX_MS as i64
        );
        // Other jobs keep the configured cap.
        assert_eq!(backoff_ms(&cfg, 10), 10_000);
    }

    #[test]
    fn a_record_job_retries_past_max_attempts_until_it_lands() {
        let dir = tempfile::tempdir().unwrap();
        let (c, clock, id) = setup(dir.path());
        let cfg = cfg();
        assert_eq!(run(&c, &id).outcome, Some(RunState::Succeeded));
        // The lake is full: the record fails retryably 8 times (max_attempts 3),
        // and once its lease expires on a killed worker.
        for attempt in 1..=8u32 {
            let now = clock_now(&clock);
            let j = lease(&c, &id, now);
            assert_eq!(j.attempt, attempt);
            c.store()
                .transact(|tx| {
                    retry_or_fail_job(tx, &cfg, j, "lake: no space left on device", true, now)
                })
                .unwrap();
            let j = record(&c, &id);
            assert_eq!(j.state, JobState::Queued, "attempt {attempt}: {j:?}");
            assert_eq!(j.attempt, attempt + 1);
            assert_eq!(j.not_before_ms, now + record_backoff_ms(&cfg, attempt));
            assert!(
                j.error.as_deref().unwrap().contains("no space left"),
                "{j:?}"
            );
            let r = run(&c, &id);
            assert_eq!(r.state, RunState::Processing);
            assert_eq!(r.outcome, Some(RunState::Succeeded));
            clock.advance(record_backoff_ms(&cfg, attempt));
        }
        let j = lease(&c, &id, clock_now(&clock));
        clock.advance(10_001);
        assert_eq!(c.tick().unwrap().expired_jobs, 1);
        let j2 = record(&c, &id);
        assert_eq!((j2.state, j2.attempt), (JobState::Queued, j.attempt + 1));
        assert_eq!(run(&c, &id).state, RunState::Processing);

        // Space came back: the record lands and the run ends as decided.
        clock.advance(RECORD_RETRY_MAX_MS as i64);
        let now = clock_now(&clock);
        let mut j = lease(&c, &id, now);
        c.store()
            .transact(|tx| {
                j.state = JobState::Done;
                j.lease_id = None;
                tx.update_job(&j)?;
                advance_run(tx, &cfg, &id, now)
            })
            .unwrap();
        let r = run(&c, &id);
        assert_eq!(
            (r.state, r.outcome, r.error),
            (RunState::Succeeded, None, None)
        );
        let jobs = c.store().transact(|tx| tx.jobs_of_run(&id)).unwrap();
        assert_eq!(jobs.len(), 1, "one record job: {jobs:?}");
    }

    #[test]
    fn a_non_retryable_record_failure_still_fails_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let (c, clock, id) = setup(dir.path());
        let now = clock_now(&clock);
        let j = lease(&c, &id, now);
        c.store()
            .transact(|tx| retry_or_fail_job(tx, &cfg(), j, "record: bad schema", false, now))
            .unwrap();
        assert_eq!(record(&c, &id).state, JobState::Failed);
        let r = run(&c, &id);
        assert_eq!(r.state, RunState::Failed);
        assert!(
            r.error
                .as_deref()
                .unwrap()
                .contains("run record not written: record: bad schema"),
            "{r:?}"
        );
    }

    fn clock_now(c: &ManualClock) -> i64 {
        use benchlake_core::clock::Clock;
        c.now_ms()
    }
}
