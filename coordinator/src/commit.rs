//! The commit of a job's staged outputs (DESIGN.md §2 step 5).
//!
//! 1. In one transaction: check the lease, compute every final key
//!    (`tables/{table}/date=…/run_id=…/part-{job_id}[-part].parquet`, deterministic
//!    per table, run and job) and record them on the job as its intent.
//! 2. Copy each staged object to its final key (atomic per object on every store).
//! 3. Delete keys an earlier attempt of the same job committed but this one did not
//!    produce, so a retried job never leaves stale rows beside its new ones.
//! 4. In one transaction: check the lease again, record the committed files, mark
//!    the job DONE, queue its follow-up jobs and move the run on.
//! 5. Delete the staging prefix.
//!
//! A crash between any two steps leaves the job LEASED; its lease expires, the job
//! runs again and writes the same keys, so rows are never duplicated.
use std::collections::BTreeSet;

use benchlake_core::layout;
use benchlake_proto::v1 as pb;

use std::sync::Arc;

use crate::Coordinator;
use crate::error::{CoordError, Result};
use benchlake_core::jobs::{self, JobResult, RECORD_JOB};

use crate::lifecycle::{Effects, job};
use crate::model::*;

/// Commits `req`'s staged files; returns the final keys. `holds` refuses a
/// caller that may not act on the job (another worker's lease); it is checked
/// in every transaction that reads the lease, and before any staged object is
/// read. Its latency, the files and bytes it wrote and the verdicts of the
/// `checks` rows it committed go to the metrics ([`crate::metrics`]).
pub async fn commit_job(
    c: &Coordinator,
    req: pb::CompleteJobRequest,
    holds: Holds,
) -> Result<Vec<String>> {
    let t0 = std::time::Instant::now();
    let res = commit_job_inner(c, req, holds).await;
    let m = &c.metrics;
    match &res {
        Ok(w) => {
            m.commit.observe(&[], t0.elapsed().as_secs_f64());
            m.lake_files.add(w.files.len() as u64);
            m.lake_bytes.add(w.files.iter().map(|f| f.1).sum());
            // A merge rewrites rows already counted when their parts came.
            let checks: Vec<String> = w
                .files
                .iter()
                .filter(|_| !w.merge)
                .filter(|f| f.2 == "checks" || f.2 == "node_health")
                .map(|f| f.0.clone())
                .collect();
            if !checks.is_empty() {
                count_verdicts(c, w.run_id.clone(), checks).await;
            }
        }
        Err(e) => {
            let reason = match e {
                CoordError::Invalid(_) => "invalid",
                CoordError::LeaseLost(_) => "lease_lost",
                CoordError::PermissionDenied(_) => "permission_denied",
                CoordError::NotFound(_) => "not_found",
                CoordError::Lake(_) => "lake",
                CoordError::Store { .. } => "state_store",
                CoordError::Fenced(_) => "fenced",
                _ => "other",
            };
            m.commit_failed.inc(&[reason]);
        }
    }
    res.map(|w| w.files.into_iter().map(|f| f.0).collect())
}

/// Refuses a caller that may not act on a job (another worker's lease).
/// Shared, as the transactions that check it run on the store's thread.
pub type Holds = std::sync::Arc<dyn Fn(&JobRow) -> Result<()> + Send + Sync>;

/// What a commit wrote: (final key, bytes, table) per file, of `run_id`.
struct Written {
    run_id: String,
    files: Vec<(String, u64, String)>,
    /// A compact job's merged file ([`crate::compaction`]).
    merge: bool,
}

/// Counts the verdicts of committed `checks` and `node_health` files into
/// `benchlake_verdicts_total` and records them for the dashboard
/// ([`crate::verdicts`]) off the request path (one small read each; a file
/// that cannot be read is logged and not counted); then, when `node_health`
/// rows came, the run's schedule's node action ([`crate::node_actions`]).
async fn count_verdicts(c: &Coordinator, run_id: String, keys: Vec<String>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let id = run_id.clone();
    let agents = c
        .db(move |tx| {
            let mut a: Vec<String> = tx.tasks_of_run(&id)?.into_iter().map(|t| t.agent).collect();
            a.sort();
            a.dedup();
            Ok(a)
        })
        .await
        .unwrap_or_default();
    let (lake, metrics, index) = (c.lake.clone(), c.metrics.clone(), c.verdicts.clone());
    let (store, actions, now) = (c.store.clone(), c.node_actions.clone(), c.now());
    rt.spawn(async move {
        let mut node_rows = false;
        for key in keys {
            match lake.read_parquet(&key).await {
                Ok(batches) if crate::verdicts::is_node_health(&key) => {
                    let rows = crate::verdicts::node_rows(&batches);
                    for (_, r) in &rows {
                        metrics.verdicts.inc(&[&r.check, &r.status]);
                    }
                    index.record_nodes(&run_id, &key, rows);
                    node_rows = true;
                }
                Ok(batches) => {
                    let rows = crate::verdicts::check_rows(&batches);
                    for r in &rows {
                        metrics.verdicts.inc(&[&r.check, &r.status]);
                    }
                    index.record(&run_id, &key, &agents, rows);
                }
                Err(e) => {
                    tracing::warn!(key = %key, error = %e, "cannot read committed checks for the verdict metrics")
                }
            }
        }
        if node_rows {
            crate::node_actions::after_node_rows(store, index, actions, metrics, run_id, now)
                .await;
        }
    });
}

async fn commit_job_inner(
    c: &Coordinator,
    req: pb::CompleteJobRequest,
    holds: Holds,
) -> Result<Written> {
    if req.files.len() > 10_000 {
        return Err(CoordError::invalid("files", "more than 10000 staged files"));
    }
    let result: JobResult = if req.result_json.trim().is_empty() {
        JobResult::default()
    } else {
        serde_json::from_str(&req.result_json).map_err(|e| CoordError::invalid("result_json", e))?
    };
    for (i, f) in result.follow_ups.iter().enumerate() {
        let ok = !f.kind.is_empty()
            && f.kind.len() <= 64
            && f.kind
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        // Only the coordinator schedules compaction (`crate::compaction`).
        if !ok || f.kind == RECORD_JOB || f.kind == jobs::COMPACT_JOB {
            return Err(CoordError::invalid(
                &format!("result_json.follow_ups[{i}].kind"),
                format!("'{}' is not a job kind", f.kind),
            ));
        }
        if let Some(g) = &f.group {
            job::check_group_name(&format!("result_json.follow_ups[{i}].group"), g)?;
        }
        if let Some(g) = &f.wait_for {
            job::check_group_name(&format!("result_json.follow_ups[{i}].wait_for"), g)?;
        }
    }
    if result.follow_ups.len() > 10_000 {
        return Err(CoordError::invalid(
            "result_json.follow_ups",
            "more than 10000",
        ));
    }
    let req = Arc::new(req);
    let result = Arc::new(result);
    let leased = if req.files.is_empty() {
        None
    } else {
        let (r, h) = (req.clone(), holds.clone());
        Some(
            c.db(move |tx| {
                let j = job::leased(tx, &r.job_id, &r.lease_id)?;
                h(&j)?;
                Ok(j)
            })
            .await?,
        )
    };
    // A merge the coordinator planned commits through its own path.
    if let Some(j) = &leased
        && j.kind == jobs::COMPACT_JOB
    {
        let (key, bytes) = crate::compaction::commit(c, &req, j, holds.clone()).await?;
        let table = req.files[0].table.clone();
        return Ok(Written {
            run_id: j.run_id.clone(),
            files: vec![(key, bytes, table)],
            merge: true,
        });
    }
    // Every staged object is checked before anything is recorded: a worker
    // cannot commit bytes that readers of the table would choke on, rows of
    // another run, or a table its job kind does not write. The final keys
    // follow from the job and the files alone (the lease pins the attempt),
    // so they are computed here once.
    let mut pairs = Vec::with_capacity(req.files.len());
    if let Some(j) = &leased {
        let staging = layout::staging_prefix(&j.job_id, j.attempt)?;
        let mut finals = BTreeSet::new();
        for (i, f) in req.files.iter().enumerate() {
            if !f.staged_key.starts_with(&staging) || f.staged_key.contains("..") {
                return Err(CoordError::invalid(
                    &format!("files[{i}].staged_key"),
                    format!(
                        "'{}' is not under the job's staging prefix {staging}",
                        f.staged_key
                    ),
                ));
            }
            if benchlake_core::catalog::get(&f.table).is_none() {
                return Err(CoordError::invalid(
                    &format!("files[{i}].table"),
                    format!("unknown table '{}'", f.table),
                ));
            }
            may_write(j, &f.table)
                .map_err(|m| CoordError::invalid(&format!("files[{i}].table"), m))?;
            let key = final_key(&f.table, &j.date, &j.run_id, &j.job_id, &f.part)
                .map_err(|e| CoordError::invalid(&format!("files[{i}]"), e))?;
            if !finals.insert(key.clone()) {
                return Err(CoordError::invalid(
                    &format!("files[{i}]"),
                    format!("two files map to {key}; give them distinct parts"),
                ));
            }
            c.lake
                .verify_parquet(&f.staged_key, &f.table, f.rows, &j.run_id, &j.date)
                .await
                .map_err(|e| match e {
                    benchlake_core::Error::Invalid { message, .. } => {
                        CoordError::invalid(&format!("files[{i}] (table {})", f.table), message)
                    }
                    e => CoordError::from(e),
                })?;
            pairs.push((f.clone(), key));
        }
    }
    let now = c.now();

    // A job that staged nothing and never committed anything (no-op, record-less
    // work) has nothing to copy or delete: intent and record are one transaction.
    if req.files.is_empty() {
        let (cfg, r, res, h) = (c.cfg.clone(), req.clone(), result.clone(), holds.clone());
        let done = c
            .db(move |tx| {
                let j = job::leased(tx, &r.job_id, &r.lease_id)?;
                h(&j)?;
                if j.kind == jobs::COMPACT_JOB {
                    return Err(CoordError::invalid(
                        "files",
                        "a compact job commits its merged file",
                    ));
                }
                if !j.committed_keys.is_empty() {
                    return Ok(None);
                }
                record(tx, &cfg, &r, &res, &[], &[], &[], now, &*h).map(Some)
            })
            .await?;
        if let Some(done) = done {
            finish(c, &req.job_id, done, &[]);
            return Ok(Written {
                run_id: String::new(),
                files: Vec::new(),
                merge: false,
            });
        }
    }

    // 1. Intent (the lease again: it may have been lost while the files
    // were checked).
    let pairs = Arc::new(pairs);
    let (r, h, p) = (req.clone(), holds.clone(), pairs.clone());
    let (job, stale) = c
        .db(move |tx| {
            let mut j = job::leased(tx, &r.job_id, &r.lease_id)?;
            h(&j)?;
            let finals: BTreeSet<&String> = p.iter().map(|(_, k)| k).collect();
            let stale: Vec<String> = j
                .committed_keys
                .iter()
                .filter(|k| !finals.contains(k))
                .cloned()
                .collect();
            let mut intent: BTreeSet<String> = j.committed_keys.iter().cloned().collect();
            intent.extend(finals.into_iter().cloned());
            let intent: Vec<String> = intent.into_iter().collect();
            job::record_intent(tx, &mut j, intent)?;
            Ok((j, stale))
        })
        .await?;

    // 2. Copy.
    let mut sizes = Vec::with_capacity(pairs.len());
    for (f, key) in pairs.iter() {
        c.lake.copy(&f.staged_key, key).await?;
        sizes.push(c.lake.size(key).await?.unwrap_or(f.bytes));
    }
    // 3. Stale keys of earlier attempts.
    for k in &stale {
        c.lake.delete(k).await?;
    }

    // 4. Record.
    let keys: Vec<String> = pairs.iter().map(|p| p.1.clone()).collect();
    let staged_any = !req.files.is_empty();
    let (cfg, p, sz) = (c.cfg.clone(), pairs.clone(), sizes.clone());
    let done = c
        .db(move |tx| record(tx, &cfg, &req, &result, &p, &sz, &stale, now, &*holds))
        .await?;

    // 5. Staging is only garbage now (a job that staged nothing left none).
    if staged_any
        && let Ok(prefix) = layout::staging_prefix(&job.job_id, job.attempt)
        && let Err(e) = c.lake.delete_prefix(&prefix).await
    {
        tracing::warn!(job = %job.job_id, error = %e, "could not delete staging objects");
    }
    finish(c, &job.job_id, done, &keys);
    Ok(Written {
        run_id: job.run_id.clone(),
        files: pairs
            .iter()
            .zip(&sizes)
            .map(|((f, key), bytes)| (key.clone(), *bytes, f.table.clone()))
            .collect(),
        merge: false,
    })
}

/// Step 4 inside a transaction: checks the lease again, records the committed
/// files, and completes the job ([`job::complete`]: DONE, its follow-ups
/// queued, the run moved on). Returns the worker that held the lease, the
/// job's run and the effects to apply once committed.
#[allow(clippy::too_many_arguments)]
fn record(
    tx: &mut dyn crate::store::Tx,
    cfg: &crate::CoordinatorConfig,
    req: &pb::CompleteJobRequest,
    result: &JobResult,
    pairs: &[(pb::StagedFile, String)],
    sizes: &[u64],
    stale: &[String],
    now: i64,
    holds: &(dyn Fn(&JobRow) -> Result<()> + Sync),
) -> Result<Done> {
    let j = job::leased(tx, &req.job_id, &req.lease_id)?;
    holds(&j)?;
    let worker = j.leased_by.clone().unwrap_or_default();
    for k in stale {
        tx.delete_committed(k)?;
    }
    for ((f, key), bytes) in pairs.iter().zip(sizes) {
        tx.upsert_committed(&CommittedFile {
            key: key.clone(),
            table: f.table.clone(),
            run_id: j.run_id.clone(),
            job_id: j.job_id.clone(),
            date: j.date.clone(),
            rows: f.rows,
            bytes: *bytes,
            committed_ms: now,
            merged: None,
        })?;
    }
    if j.kind == RECORD_JOB && !result.bundled.is_empty() {
        record_bundle(tx, &j.run_id, &result.bundled)?;
    }
    let run_id = j.run_id.clone();
    let keys = pairs.iter().map(|p| p.1.clone()).collect();
    let effects = job::complete(tx, cfg, j, keys, &result.follow_ups, now)?;
    Ok(Done {
        worker,
        run_id,
        effects,
    })
}

/// Records on the run's tasks that their raw outputs `bundled` (a record
/// job's `JobResult::bundled`) are now members of the run's bundle. The key
/// is the layout's, never the worker's; a key that is not an output of the
/// run changes nothing.
fn record_bundle(tx: &mut dyn crate::store::Tx, run_id: &str, bundled: &[String]) -> Result<()> {
    let bundle = layout::raw_bundle_key(run_id)?;
    let wanted: BTreeSet<&str> = bundled.iter().map(String::as_str).collect();
    let mut found = 0usize;
    for mut t in tx.tasks_of_run(run_id)? {
        let mut changed = false;
        for o in t.outputs.iter_mut() {
            if wanted.contains(o.key.as_str()) {
                found += 1;
                if o.bundle.as_deref() != Some(bundle.as_str()) {
                    o.bundle = Some(bundle.clone());
                    changed = true;
                }
            }
        }
        if changed {
            tx.update_task(&t)?;
        }
    }
    if found != wanted.len() {
        // Nothing to record for a key that is no output of the run (the
        // worker's list is only ever matched against the run's own).
        tracing::warn!(run = %run_id, found, reported = wanted.len(), "a record job reported bundled files that are not raw outputs of its run");
    }
    tracing::info!(run = %run_id, %bundle, files = found, "the run's raw outputs are bundled");
    Ok(())
}

/// What step 4 did.
struct Done {
    worker: String,
    run_id: String,
    effects: Effects,
}

/// After a commit: log, and apply the completion's effects (the worker's
/// slot, watchers, pollers).
fn finish(c: &Coordinator, job_id: &str, done: Done, keys: &[String]) {
    tracing::info!(job = %job_id, run = %done.run_id, worker = %done.worker, files = keys.len(), "job committed");
    c.apply(done.effects);
}

/// Refuses a table job `j`'s kind does not write ([`jobs::job_tables`]).
fn may_write(j: &JobRow, table: &str) -> std::result::Result<(), String> {
    let allowed: Vec<&str> = match jobs::job_tables(&j.kind) {
        Some(jobs::JobTables::Fixed(t)) => t.to_vec(),
        Some(jobs::JobTables::OfIngestFormat) => {
            let spec: jobs::IngestSpec = serde_json::from_str(&j.spec_json)
                .map_err(|e| format!("job {}: its ingest spec does not decode: {e}", j.job_id))?;
            benchlake_formats::ingest::tables(&spec.format)
                .unwrap_or(&[])
                .to_vec()
        }
        Some(jobs::JobTables::OfCompactSpec) => {
            let spec: jobs::CompactSpec = serde_json::from_str(&j.spec_json)
                .map_err(|e| format!("job {}: its compact spec does not decode: {e}", j.job_id))?;
            return if spec.table == table {
                Ok(())
            } else {
                Err(format!(
                    "a compact job of '{}' writes no '{table}'",
                    spec.table
                ))
            };
        }
        Some(jobs::JobTables::OfFollowUp) => {
            // A checks job names the format it judges: that kind's tables.
            #[derive(serde::Deserialize)]
            struct Of {
                format: Option<String>,
            }
            let of: Of = serde_json::from_str(&j.spec_json)
                .map_err(|e| format!("job {}: its spec does not decode: {e}", j.job_id))?;
            benchlake_formats::kinds::follow_up_tables(&j.kind, of.format.as_deref())
                .unwrap_or_default()
        }
        None => Vec::new(),
    };
    if allowed.contains(&table) {
        Ok(())
    } else if allowed.is_empty() {
        Err(format!(
            "job kind '{}' writes no table, not '{table}'",
            j.kind
        ))
    } else {
        Err(format!(
            "job kind '{}' writes only {}, not '{table}'",
            j.kind,
            allowed.join(", ")
        ))
    }
}

/// The final key of a committed file: deterministic per (table, run, job,
/// part), so a retried job overwrites instead of adding rows.
fn final_key(table: &str, date: &str, run_id: &str, job_id: &str, part: &str) -> Result<String> {
    Ok(layout::table_key(table, date, run_id, job_id, part)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(kind: &str, spec: &str) -> JobRow {
        JobRow {
            job_id: "j".into(),
            run_id: "r".into(),
            kind: kind.into(),
            state: JobState::Leased,
            attempt: 1,
            max_attempts: 3,
            spec_json: spec.into(),
            error: None,
            lease_id: None,
            leased_by: None,
            lease_expires_ms: None,
            not_before_ms: 0,
            created_ms: 0,
            committed_keys: Vec::new(),
            date: "2026-12-06".into(),
        }
    }

    #[test]
    fn each_job_kind_writes_only_its_own_tables() {
        // The campaign's forgery: a `record` job committing node_facts.
        let e = may_write(&job("record", "{}"), "node_facts").unwrap_err();
        assert_eq!(
            e,
            "job kind 'record' writes only runs, raw_files, not 'node_facts'"
        );
        assert!(may_write(&job("record", "{}"), "runs").is_ok());
        let ingest = |format: &str| {
            job(
                "ingest",
                &format!(r#"{{"format":"{format}","keys":[],"task_id":"t","agent":"a"}}"#),
            )
        };
        assert!(may_write(&ingest("hostinfo"), "node_facts").is_ok());
        assert!(may_write(&ingest("pio"), "node_facts").is_err());
        assert!(may_write(&ingest("bandela"), "mpi_trace_ranks").is_ok());
        assert!(may_write(&ingest("linktest"), "linktest_timings").is_ok());
        // The summaries the ingest job derives (issue 40), each only by its formats.
        assert!(may_write(&ingest("linktest"), "linktest_host_summary").is_ok());
        assert!(may_write(&ingest("pio"), "io_node_summary").is_ok());
        assert!(may_write(&ingest("ior"), "io_node_summary").is_ok());
        assert!(may_write(&ingest("mdtest"), "io_node_summary").is_err());
        assert!(may_write(&ingest("hostinfo"), "linktest_host_summary").is_err());
        assert!(may_write(&job("checks", "{}"), "linktest_host_summary").is_err());
        assert!(may_write(&ingest("nosuch"), "node_facts").is_err());
        assert!(may_write(&job("checks", "{}"), "node_health").is_ok());
        assert!(may_write(&job("checks", "{}"), "runs").is_err());
        // A checks job writes the tables its format's descriptor declares.
        let checks = |format: &str| job("checks", &format!(r#"{{"format":"{format}"}}"#));
        assert!(may_write(&checks("linktest"), "link_health").is_ok());
        let e = may_write(&checks("pio"), "link_health").unwrap_err();
        assert_eq!(
            e,
            "job kind 'checks' writes only checks, node_health, not 'link_health'"
        );
        assert!(may_write(&checks("pio"), "node_health").is_ok());
        assert!(may_write(&checks("counts"), "checks").is_err());
        assert!(may_write(&job("calibrate", "{}"), "replay_calibrations").is_ok());
        assert!(may_write(&job("analyze_merge", "{}"), "alltoallv_stats").is_ok());
        assert!(may_write(&job("analyze_part", "{}"), "alltoallv_stats").is_err());
        let e = may_write(&job("analyze_plan", "{}"), "alltoallv_stats").unwrap_err();
        assert!(e.contains("writes no table"), "{e}");
        assert!(may_write(&job("evil", "{}"), "runs").is_err());
    }
}
