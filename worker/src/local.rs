//! Jobs run in this process against a lake, without a coordinator: the
//! executor the worker would run, its tables written straight to their final
//! keys ([`Lake::write_final`], as the coordinator's commit would place
//! them). `benchlake probe year` replays a synthetic history through the
//! ingest, checks and record executors this way (docs/verdicts.md).
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use benchlake_core::lake::{Lake, TableOutput};

use crate::{ExecError, ExecOutput, Executor, JobContext};

/// One job to run.
pub struct LocalJob<'a> {
    pub job_id: String,
    pub run_id: String,
    /// The run's date partition.
    pub run_date: String,
    pub spec_json: String,
    pub executor: &'a dyn Executor,
}

/// What a local job made: the keys it wrote, its tables (still as batches,
/// for the caller to read) and the jobs it asked to follow it.
pub struct LocalOutput {
    pub keys: Vec<String>,
    pub tables: Vec<TableOutput>,
    pub follow_ups: Vec<benchlake_core::jobs::FollowUp>,
}

/// Runs `job` on this thread (not a thread of `rt`) and writes its tables.
pub fn run(
    lake: &Lake,
    rt: &tokio::runtime::Handle,
    scratch: &std::path::Path,
    job: LocalJob<'_>,
) -> Result<LocalOutput, ExecError> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("job-{}-", job.job_id))
        .tempdir_in(scratch)
        .map_err(|e| ExecError::Retryable(format!("scratch directory: {e}")))?;
    let ctx = JobContext {
        job_id: job.job_id.clone(),
        run_id: job.run_id.clone(),
        kind: job.executor.kind().to_string(),
        attempt: 1,
        spec_json: job.spec_json,
        run_date: job.run_date.clone(),
        lake: lake.clone(),
        scratch: dir.path().to_path_buf(),
        rt: rt.clone(),
        cancel: Arc::new(AtomicBool::new(false)),
    };
    let ExecOutput {
        tables,
        encoded,
        follow_ups,
        bundled: _,
    } = job.executor.execute(&ctx)?;
    let mut keys =
        rt.block_on(lake.write_final(&tables, &job.run_date, &job.run_id, &job.job_id))?;
    keys.extend(rt.block_on(lake.write_final_encoded(
        &encoded,
        &job.run_date,
        &job.run_id,
        &job.job_id,
    ))?);
    Ok(LocalOutput {
        keys,
        tables,
        follow_ups,
    })
}
