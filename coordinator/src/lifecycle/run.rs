//! Run transitions: `PENDING → RUNNING → PROCESSING → SUCCEEDED | FAILED | CANCELLED`.
//!
//! A run is created with its tasks ([`create`]; PENDING), or without tasks
//! when a schedule could not place it ([`create_unplaced`]), or — for derived
//! work, replays and analyses — with its jobs, already PROCESSING
//! ([`create_processing`]). After every change of its tasks or jobs the run is
//! moved on ([`advance`]): RUNNING when a task is leased; PROCESSING when every
//! task has ended (the outputs become `ingest` jobs); once every work job has
//! ended the outcome is decided and kept on the run while a `record` job
//! writes the run's rows; when that lands the run takes its outcome.
//! [`cancel`] ends what has not ended; [`rerun_failed`] is a new run of the
//! failed tasks of a finished one. A backfilled run of a schedule without
//! `allow_overlap` is created queued ([`create_queued`]) and placed when the
//! schedule's earlier runs have ended ([`start_next_queued`]), so the runs of
//! such a schedule never overlap.
use std::collections::BTreeMap;

use benchlake_core::bench::LauncherKind;
use benchlake_core::ids;
use benchlake_core::jobs::{INGEST_JOB, IngestSpec, RECORD_JOB, RecordRawFile, RecordSpec};

use super::{Effects, job, task};
use crate::config::CoordinatorConfig;
use crate::error::{CoordError, Result};
use crate::model::*;
use crate::store::Tx;

/// Creates a PENDING run of `spec` and its tasks: one per agent for the
/// `local` launcher; one on the first agent, naming all, for `mpirun` and
/// `srun`.
pub fn create(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    spec: Spec,
    kind: String,
    origin: Origin,
    agents: Vec<String>,
    now: i64,
) -> Result<(RunRow, Effects)> {
    let mut fx = Effects::default();
    let run = RunRow::new(ids::new_id_at(now), spec, kind, origin, now);
    tx.insert_run(&run)?;
    fx.run_changed(&run.run_id);
    insert_tasks(tx, &run, &agents, now)?;
    settle(tx, cfg, run, now, fx)
}

/// The tasks of `run` on `agents`: one per agent for the `local` launcher;
/// one on the first agent, naming all, for `mpirun` and `srun`.
fn insert_tasks(tx: &mut dyn Tx, run: &RunRow, agents: &[String], now: i64) -> Result<()> {
    let per_agent = run.spec.launcher == LauncherKind::Local;
    let task_agents: Vec<&String> = if per_agent {
        agents.iter().collect()
    } else {
        agents.first().into_iter().collect()
    };
    let n = task_agents.len() as u32;
    for (rank, agent) in task_agents.into_iter().enumerate() {
        tx.insert_task(&task::new(
            &run.run_id,
            agent,
            rank as u32,
            n,
            &run.spec,
            agents.to_vec(),
            now,
        ))?;
    }
    Ok(())
}

/// A run of a schedule that waits for the schedule's earlier runs (a
/// backfill of a schedule without `allow_overlap`): PENDING and queued,
/// without tasks. [`start_next_queued`] places it — chooses its agents and
/// creates its tasks — once no other run of the schedule is active, the
/// queued runs in the order of the instants they stand for.
pub fn create_queued(
    tx: &mut dyn Tx,
    spec: Spec,
    kind: String,
    origin: Origin,
    now: i64,
) -> Result<(RunRow, Effects)> {
    let mut fx = Effects::default();
    let mut run = RunRow::new(ids::new_id_at(now), spec, kind, origin, now);
    run.queued = true;
    tx.insert_run(&run)?;
    fx.run_changed(&run.run_id);
    Ok((run, fx))
}

/// Starts the next queued run of schedule `schedule_id` (the one of the
/// earliest instant) when none of the schedule's runs is active: the one
/// place a queued run leaves the queue. Called when a run of the schedule
/// ends (its final transition, a cancel) and by the scheduler's tick (runs
/// whose predecessor ended in a concurrent transaction). A run that cannot be
/// placed now fails through its record job like an unplaced scheduled run,
/// and the next one starts when it has ended.
pub fn start_next_queued(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    schedule_id: &str,
    now: i64,
    fx: &mut Effects,
) -> Result<Option<String>> {
    let active = tx.active_runs_of_schedule(schedule_id)?;
    if active.iter().any(|r| !r.queued) {
        return Ok(None);
    }
    let Some(mut run) = active.into_iter().filter(|r| r.queued).min_by(|a, b| {
        let at = |r: &RunRow| r.scheduled_for_ms.unwrap_or(r.submitted_at_ms);
        at(a).cmp(&at(b)).then_with(|| a.run_id.cmp(&b.run_id))
    }) else {
        return Ok(None);
    };
    run.queued = false;
    match crate::logic::select_agents(tx, &run.spec, &[]) {
        Ok(agents) => insert_tasks(tx, &run, &agents, now)?,
        Err(e) => {
            tracing::warn!(run = %run.run_id, error = %e, "queued run could not be placed");
            run.error = Some(format!("could not place the run: {e}"));
        }
    }
    tx.update_run(&run)?;
    fx.run_changed(&run.run_id);
    tracing::info!(run = %run.run_id, schedule = %schedule_id, "queued run of the schedule starts");
    advance_into(tx, cfg, &run.run_id, now, fx)?;
    Ok(Some(run.run_id))
}

/// A run of a schedule that could not be placed (no eligible agent, unknown
/// benchmark): created without tasks, with `reason` as its error, and moved
/// on at once, so it fails — visibly, in `runs` — through its record job.
pub fn create_unplaced(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    spec: Spec,
    kind: String,
    origin: Origin,
    reason: String,
    now: i64,
) -> Result<(RunRow, Effects)> {
    let mut fx = Effects::default();
    let mut run = RunRow::new(ids::new_id_at(now), spec, kind, origin, now);
    run.error = Some(reason);
    tx.insert_run(&run)?;
    fx.run_changed(&run.run_id);
    settle(tx, cfg, run, now, fx)
}

/// A run of derived work (a replay, an analysis) that has no tasks: run
/// `benchmark` (`replay-dimemas`, `analyze-counts`) of `kind` with `params`,
/// PROCESSING from the start, its `jobs` (kind, spec JSON) queued with it in
/// order. `run_id` is chosen by the caller, which may have written the run's
/// inputs under it already.
#[allow(clippy::too_many_arguments)]
pub fn create_processing(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run_id: String,
    benchmark: String,
    kind: &str,
    params: BTreeMap<String, String>,
    jobs: Vec<(String, String)>,
    owner: Option<String>,
    now: i64,
) -> Result<(RunRow, Vec<JobRow>, Effects)> {
    let mut fx = Effects::default();
    let spec = Spec {
        benchmark,
        params,
        nodes: Nodes::default(),
        launcher: LauncherKind::Local,
        max_attempts: 1,
        timeout_s: 0,
        slurm: Default::default(),
    };
    let origin = Origin {
        owner,
        ..Default::default()
    };
    let mut run = RunRow::new(run_id, spec, kind, origin, now);
    run.state = RunState::Processing;
    run.started_at_ms = Some(now);
    tx.insert_run(&run)?;
    fx.run_changed(&run.run_id);
    let mut rows = Vec::with_capacity(jobs.len());
    for (kind, spec_json) in jobs {
        let j = job::new(&run, &kind, spec_json, cfg, now);
        job::insert(tx, &j, &mut fx)?;
        rows.push(j);
    }
    Ok((run, rows, fx))
}

/// Moves a new run on and returns it as stored.
fn settle(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run: RunRow,
    now: i64,
    mut fx: Effects,
) -> Result<(RunRow, Effects)> {
    if advance_into(tx, cfg, &run.run_id, now, &mut fx)? {
        let id = run.run_id.clone();
        let run = tx.get_run(&id)?.unwrap_or(run);
        return Ok((run, fx));
    }
    Ok((run, fx))
}

/// A new run of the failed tasks of the finished run `old_id` (same agents,
/// ranks and spec), linked to it by `rerun_of`.
pub fn rerun_failed(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    old_id: &str,
    now: i64,
) -> Result<(RunRow, Effects)> {
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
    let origin = Origin {
        schedule_id: old.schedule_id.clone(),
        scheduled_for_ms: old.scheduled_for_ms,
        idempotency_key: None,
        rerun_of: Some(old_id.to_string()),
        notify: old.notify.clone(),
        owner: old.owner.clone(),
    };
    let run = RunRow::new(
        ids::new_id_at(now),
        old.spec.clone(),
        old.kind.clone(),
        origin,
        now,
    );
    tx.insert_run(&run)?;
    let mut fx = Effects::default();
    fx.run_changed(&run.run_id);
    for t in failed {
        let mut nt = task::new(
            &run.run_id,
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
    Ok((run, fx))
}

/// Moves a run forward after any change of its tasks or jobs. Idempotent:
/// a run with nothing to do is left as it is.
pub fn advance(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run_id: &str,
    now: i64,
) -> Result<Effects> {
    let mut fx = Effects::default();
    advance_into(tx, cfg, run_id, now, &mut fx)?;
    Ok(fx)
}

/// [`advance`] adding to the caller's effects; returns whether the run
/// changed.
pub(super) fn advance_into(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run_id: &str,
    now: i64,
    fx: &mut Effects,
) -> Result<bool> {
    let Some(mut run) = tx.get_run(run_id)? else {
        return Ok(false);
    };
    if run.queued {
        // Waits for the schedule's earlier runs: see `start_next_queued`.
        return Ok(false);
    }
    let before = run.clone();
    // Targeted queries, each made only when the branch needs it: a run may
    // have thousands of jobs (sweeps), and this runs after every one of them
    // (with a database over the network, each query is a round trip).
    let mut tasks_read = None;
    if run.state == RunState::Cancelled {
        if run.outcome.is_some() {
            match tx.job_of_kind(run_id, RECORD_JOB)?.as_ref() {
                None => {
                    let tasks = tasks_of(tx, run_id, &mut tasks_read)?;
                    insert_record_job(tx, cfg, &run, tasks, now, fx)?
                }
                Some(j) if j.state.is_final() => run.outcome = None,
                Some(_) => {}
            }
        }
    } else if !run.state.is_final() {
        if matches!(run.state, RunState::Pending | RunState::Running) {
            let tasks = tasks_of(tx, run_id, &mut tasks_read)?;
            let started = tasks
                .iter()
                .any(|t| matches!(t.state, TaskState::Leased | TaskState::Running));
            let tasks_done = tasks.iter().all(|t| t.state.is_final());
            if run.state == RunState::Pending && started {
                run.state = RunState::Running;
                run.started_at_ms.get_or_insert(now);
            }
            if tasks_done {
                if run.started_at_ms.is_none() {
                    run.started_at_ms = Some(now);
                }
                run.state = RunState::Processing;
                // The agents' cores (traced runs' default Dimemas replay)
                // and host names (node identity of rows naming hosts).
                let mut agents = BTreeMap::new();
                for t in tasks {
                    if !agents.contains_key(&t.agent)
                        && let Some(a) = tx.get_agent(&t.agent)?
                    {
                        agents.insert(t.agent.clone(), (a.cores, a.hostname.clone()));
                    }
                }
                for j in ingest_jobs(&run, tasks, &agents, cfg, now) {
                    job::insert(tx, &j, fx)?;
                }
            }
        }
        if run.state == RunState::Processing {
            let work_done = tx.count_open_jobs(run_id, RECORD_JOB)? == 0;
            if work_done {
                let record = tx.job_of_kind(run_id, RECORD_JOB)?;
                match (run.outcome, record.as_ref()) {
                    (None, _) => {
                        let failed = tx.failed_jobs(run_id)?;
                        let tasks = tasks_of(tx, run_id, &mut tasks_read)?;
                        let (mut outcome, mut error) = decide(tasks, &failed);
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
                        insert_record_job(tx, cfg, &run, tasks, now, fx)?;
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
                    (Some(_), None) => {
                        let tasks = tasks_of(tx, run_id, &mut tasks_read)?;
                        insert_record_job(tx, cfg, &run, tasks, now, fx)?
                    }
                    (Some(_), Some(_)) => {}
                }
            }
        }
    }
    if run != before {
        tx.update_run(&run)?;
        fx.run_changed(run_id);
        if run.state.is_final() && !before.state.is_final() {
            fx.notifications |= crate::notify::enqueue(tx, &cfg.notify, &run, now)?;
            if let Some(s) = &run.schedule_id {
                start_next_queued(tx, cfg, s, now, fx)?;
            }
        }
        return Ok(true);
    }
    Ok(false)
}

/// The run's tasks, read once per [`advance_into`] and only when needed.
fn tasks_of<'a>(
    tx: &mut dyn Tx,
    run_id: &str,
    read: &'a mut Option<Vec<TaskRow>>,
) -> Result<&'a [TaskRow]> {
    if read.is_none() {
        *read = Some(tx.tasks_of_run(run_id)?);
    }
    Ok(read.get_or_insert_with(Vec::new))
}

/// Cancels a run: its tasks and jobs that have not ended end as CANCELLED
/// (agents learn it from their next heartbeat or progress report), and the
/// run is recorded as CANCELLED. A final run is returned as it is.
pub fn cancel(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run_id: &str,
    reason: &str,
    now: i64,
) -> Result<(RunRow, Effects)> {
    let mut run = tx
        .get_run(run_id)?
        .ok_or_else(|| CoordError::NotFound(format!("run_id: no run '{run_id}'")))?;
    let mut fx = Effects::default();
    // Watchers read the run again either way (as before this module existed).
    fx.run_changed(run_id);
    if run.state.is_final() {
        return Ok((run, fx));
    }
    for t in tx.tasks_of_run(run_id)? {
        task::cancel(tx, t, reason, now)?;
    }
    for j in tx.jobs_of_run(run_id)? {
        job::cancel(tx, j, reason)?;
    }
    run.state = RunState::Cancelled;
    run.outcome = Some(RunState::Cancelled);
    run.finished_at_ms = Some(now);
    run.queued = false;
    run.error = Some(if reason.is_empty() {
        "cancelled".into()
    } else {
        format!("cancelled: {reason}")
    });
    tx.update_run(&run)?;
    advance_into(tx, cfg, run_id, now, &mut fx)?;
    if let Some(s) = &run.schedule_id {
        start_next_queued(tx, cfg, s, now, &mut fx)?;
    }
    let run = tx
        .get_run(run_id)?
        .ok_or_else(|| CoordError::NotFound(format!("run_id: no run '{run_id}'")))?;
    Ok((run, fx))
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

/// One `ingest` job per (finished task, output format that is an ingest kind).
fn ingest_jobs(
    run: &RunRow,
    tasks: &[TaskRow],
    agents: &BTreeMap<String, (u32, String)>,
    cfg: &CoordinatorConfig,
    now: i64,
) -> Vec<JobRow> {
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
                agent_hostname: agents
                    .get(&t.agent)
                    .map(|a| a.1.clone())
                    .filter(|h| !h.is_empty()),
            };
            // The run's schedule and parameters ride along for the checks follow-up.
            let info = benchlake_core::jobs::IngestRunInfo {
                schedule_id: run.schedule_id.clone(),
                benchmark: Some(run.benchmark.clone()),
                params: run.spec.params.clone(),
                kind: Some(run.kind.clone()),
                cores: benchlake_formats::kinds::run_kind_wants_cores(&run.kind)
                    .then(|| agents.get(&t.agent).map(|a| a.0))
                    .flatten()
                    .filter(|c| *c > 0),
            };
            out.push(job::new(
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

/// The `record` job writing the run's row (its decided outcome) to `runs`
/// and its raw outputs to `raw_files`.
fn insert_record_job(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run: &RunRow,
    tasks: &[TaskRow],
    now: i64,
    fx: &mut Effects,
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
                slurm_job_id: Some(t.report.slurm_job_id.clone()).filter(|s| !s.is_empty()),
                slurm_nodes: Some(t.report.slurm_nodes.clone()).filter(|s| !s.is_empty()),
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
        scheduled_for_ms: run.scheduled_for_ms,
    };
    let j = job::new(run, RECORD_JOB, serde_json::to_string(&spec)?, cfg, now);
    job::insert(tx, &j, fx)
}
