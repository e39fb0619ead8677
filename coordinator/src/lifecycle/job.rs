//! Job transitions: `QUEUED → LEASED → DONE | FAILED | CANCELLED`.
//!
//! A worker leases the oldest due job ([`lease`]), renews the lease while it
//! works ([`renew`]) and either commits its outputs — the commit protocol
//! ([`crate::commit`]) ends with [`complete`] — or reports a failure
//! ([`retry_or_fail`]); an expired lease is a retryable failure
//! ([`expire_leases`]). A `record` job (the run's row in `runs`) retries
//! retryable failures without limit.
//!
//! Jobs may belong to a group and wait for a group of the same run
//! (docs/architecture.md, "Job dependencies"): a waiting job is parked
//! ([`crate::store::PARKED`]) until no job of its group is QUEUED or LEASED,
//! then released — or failed when a job of the group failed.
use benchlake_core::ids;
use benchlake_core::jobs::{FollowUp, RECORD_JOB};

use super::{Effects, backoff_ms, record_backoff_ms, run};
use crate::config::CoordinatorConfig;
use crate::error::{CoordError, Result};
use crate::model::*;
use crate::store::Tx;

/// A new QUEUED job of `run` (attempt 1), due now.
pub fn new(
    run: &RunRow,
    kind: &str,
    spec_json: String,
    cfg: &CoordinatorConfig,
    now: i64,
) -> JobRow {
    new_of(&run.run_id, &run.date, kind, spec_json, cfg, now)
}

/// A new QUEUED job that belongs to no run (`compact`): its run id is its
/// own id ([`crate::compaction`]); `date` is the day it is filed under.
pub fn new_unowned(
    kind: &str,
    spec_json: String,
    date: &str,
    cfg: &CoordinatorConfig,
    now: i64,
) -> JobRow {
    let mut j = new_of("", date, kind, spec_json, cfg, now);
    j.run_id = j.job_id.clone();
    j
}

fn new_of(
    run_id: &str,
    date: &str,
    kind: &str,
    spec_json: String,
    cfg: &CoordinatorConfig,
    now: i64,
) -> JobRow {
    JobRow {
        job_id: ids::new_id_at(now),
        run_id: run_id.to_string(),
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
        date: date.to_string(),
    }
}

/// Inserts a new job; workers are woken once the transaction commits.
pub(super) fn insert(tx: &mut dyn Tx, j: &JobRow, fx: &mut Effects) -> Result<()> {
    tx.insert_job(j)?;
    fx.run_changed(&j.run_id);
    if j.not_before_ms != crate::store::PARKED {
        fx.jobs_queued();
    }
    Ok(())
}

/// The job, if `lease_id` still holds it.
pub fn leased(tx: &mut dyn Tx, job_id: &str, lease_id: &str) -> Result<JobRow> {
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

/// Refuses a transition that needs the job leased.
fn must_be_leased(j: &JobRow, what: &str) -> Result<()> {
    if j.state == JobState::Leased {
        Ok(())
    } else {
        Err(CoordError::LeaseLost(format!(
            "job {}: cannot {what}: the job is {}",
            j.job_id,
            j.state.as_str()
        )))
    }
}

/// QUEUED → LEASED: the oldest due job of one of `kinds` (empty = any), for
/// `worker`, for `job_lease_timeout_ms`. None when there is none.
pub fn lease(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    worker: &str,
    kinds: &[String],
    now: i64,
) -> Result<(Option<JobRow>, Effects)> {
    let mut fx = Effects::default();
    let Some(mut j) = tx.next_job(kinds, now)? else {
        return Ok((None, fx));
    };
    if j.state != JobState::Queued {
        return Err(CoordError::FailedPrecondition(format!(
            "job {}: cannot lease a {} job",
            j.job_id,
            j.state.as_str()
        )));
    }
    j.state = JobState::Leased;
    j.lease_id = Some(ids::new_id_at(now));
    j.leased_by = Some(worker.to_string());
    j.lease_expires_ms = Some(now + cfg.job_lease_timeout_ms as i64);
    tx.update_job(&j)?;
    fx.run_changed(&j.run_id);
    fx.worker_jobs(Some(worker), 1);
    Ok((Some(j), fx))
}

/// Renews the lease of a job its worker holds (from [`leased`]) for another
/// `job_lease_timeout_ms`. No effect outside the store.
pub fn renew(tx: &mut dyn Tx, cfg: &CoordinatorConfig, mut j: JobRow, now: i64) -> Result<()> {
    must_be_leased(&j, "renew its lease")?;
    j.lease_expires_ms = Some(now + cfg.job_lease_timeout_ms as i64);
    tx.update_job(&j)
}

/// Commit step 1: records on a leased job the final keys it is about to
/// write (with those of earlier attempts), so a crash between copy and record
/// leaves the keys known. The job stays LEASED; a job that stages nothing new
/// has no intent to record (no write).
pub fn record_intent(tx: &mut dyn Tx, j: &mut JobRow, keys: Vec<String>) -> Result<()> {
    must_be_leased(j, "record its commit intent")?;
    if keys != j.committed_keys {
        j.committed_keys = keys;
        tx.update_job(j)?;
    }
    Ok(())
}

/// Forgets the intent of a QUEUED job whose keys an earlier attempt copied
/// and never recorded, once they are deleted (a compact job's merged file:
/// [`crate::compaction`]). Any other state is left as it is.
pub fn forget_intent(tx: &mut dyn Tx, mut j: JobRow) -> Result<()> {
    if j.state == JobState::Queued && !j.committed_keys.is_empty() {
        j.committed_keys.clear();
        tx.update_job(&j)?;
    }
    Ok(())
}

/// LEASED → DONE, the last step of the commit protocol once `committed_keys`
/// are in place and recorded: queues the job's follow-ups (unless its run has
/// ended), releases the jobs waiting for its group and moves the run on.
pub fn complete(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    mut j: JobRow,
    committed_keys: Vec<String>,
    follow_ups: &[FollowUp],
    now: i64,
) -> Result<Effects> {
    must_be_leased(&j, "complete")?;
    let mut fx = Effects::default();
    fx.worker_jobs(j.leased_by.as_deref(), -1);
    j.committed_keys = committed_keys;
    j.state = JobState::Done;
    j.error = None;
    j.lease_id = None;
    j.lease_expires_ms = None;
    tx.update_job(&j)?;
    fx.run_changed(&j.run_id);
    if let Some(run) = tx.get_run(&j.run_id)?
        && !run.state.is_final()
    {
        insert_follow_ups(tx, cfg, &run, follow_ups, now, &mut fx)?;
    }
    ended(tx, &j, now, &mut fx)?;
    run::advance_into(tx, cfg, &j.run_id, now, &mut fx)?;
    Ok(fx)
}

/// Ends a job attempt that failed (`retryable` as the worker says; an expired
/// lease is retryable): QUEUED again with backoff while attempts remain,
/// else FAILED.
///
/// A `record` job (the run's row in `runs`) never runs out of attempts on a
/// retryable failure or an expired lease: it is retried with
/// [`record_backoff_ms`] for as long as its run exists, so a run that ended
/// while the lake was full or unreachable still gets its row once the lake is
/// back; the run stays PROCESSING with its decided outcome meanwhile. A
/// non-retryable failure fails it at once, and the run with it.
pub fn retry_or_fail(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    mut j: JobRow,
    reason: &str,
    retryable: bool,
    now: i64,
) -> Result<Effects> {
    must_be_leased(&j, "end its attempt")?;
    let mut fx = Effects::default();
    fx.worker_jobs(j.leased_by.as_deref(), -1);
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
    tx.update_job(&j)?;
    fx.run_changed(&j.run_id);
    if j.state == JobState::Queued {
        fx.jobs_queued();
        fx.job_retries += 1;
    }
    if j.state == JobState::Failed {
        ended(tx, &j, now, &mut fx)?;
    }
    run::advance_into(tx, cfg, &j.run_id, now, &mut fx)?;
    Ok(fx)
}

/// Ends the job leases that expired before `now` (a retryable failure: the
/// worker stopped renewing); returns how many.
pub fn expire_leases(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    now: i64,
) -> Result<(usize, Effects)> {
    let mut fx = Effects::default();
    let mut n = 0;
    for j in tx.expired_jobs(now)? {
        n += 1;
        let reason = format!(
            "lease expired: worker '{}' stopped renewing",
            j.leased_by.clone().unwrap_or_default()
        );
        fx.merge(retry_or_fail(tx, cfg, j, &reason, true, now)?);
    }
    Ok((n, fx))
}

/// Ends a job that has not ended because its run is cancelled (called by
/// [`super::run::cancel`]). The run's `record` job is left to run: a
/// cancelled run is recorded too.
pub(super) fn cancel(tx: &mut dyn Tx, mut j: JobRow, reason: &str) -> Result<()> {
    if j.state.is_final() || j.kind == RECORD_JOB {
        return Ok(());
    }
    j.state = JobState::Cancelled;
    j.lease_expires_ms = None;
    j.error = Some(format!("cancelled: {reason}"));
    tx.update_job(&j)
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
fn insert_follow_ups(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    run: &RunRow,
    follow_ups: &[FollowUp],
    now: i64,
    fx: &mut Effects,
) -> Result<()> {
    let mut waited: Vec<&str> = Vec::new();
    for f in follow_ups {
        let mut j = new(run, &f.kind, f.spec.to_string(), cfg, now);
        if let Some(w) = f.wait_for.as_deref() {
            j.not_before_ms = crate::store::PARKED;
            if !waited.contains(&w) {
                waited.push(w);
            }
        }
        insert(tx, &j, fx)?;
        if f.group.is_some() || f.wait_for.is_some() {
            tx.set_job_group(&j.job_id, f.group.as_deref(), f.wait_for.as_deref())?;
        }
    }
    for g in waited {
        release_waiting(tx, &run.run_id, g, now, fx)?;
    }
    Ok(())
}

/// Called when `job` has ended (DONE, FAILED or CANCELLED): if it belongs to a
/// group, the jobs waiting for that group may go.
fn ended(tx: &mut dyn Tx, job: &JobRow, now: i64, fx: &mut Effects) -> Result<()> {
    if let (Some(g), _) = tx.job_group(&job.job_id)? {
        release_waiting(tx, &job.run_id, &g, now, fx)?;
    }
    Ok(())
}

/// Releases the jobs of `run_id` waiting for `group` once no job of the group
/// is queued or leased: they become due now, or — when a job of the group
/// failed or was cancelled — they fail with that job named, so a merge never
/// runs on partial inputs. A waiting job that fails this way ends its own group
/// in turn. Returns the number of jobs released.
fn release_waiting(
    tx: &mut dyn Tx,
    run_id: &str,
    group: &str,
    now: i64,
    fx: &mut Effects,
) -> Result<usize> {
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
                fx.run_changed(run_id);
                if let (Some(wg), _) = tx.job_group(&w.job_id)? {
                    todo.push(wg);
                }
            } else {
                w.not_before_ms = now;
                tx.update_job(&w)?;
                fx.run_changed(run_id);
                fx.jobs_queued();
                released += 1;
            }
        }
    }
    Ok(released)
}
