//! The worker: leases jobs from the coordinator, runs the [`Executor`] of the
//! job's kind on a blocking thread (so lease renewal never waits behind the
//! work), writes the resulting tables as Parquet under the job's `_staging/`
//! prefix, and asks the coordinator to commit them. Executors are registered in
//! an [`Executors`] table; the format, replay and analysis crates add theirs.
//!
//! [`run`] is the entry point of `benchlake worker`.
pub mod analyze;
pub mod calibrate;
pub mod checks;
pub mod executors;
pub mod health;
pub mod local;
pub mod memo;
pub mod traced;
pub mod traced_dimemas;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use benchlake_core::jobs::FollowUp;
use benchlake_core::lake::{EncodedTable, Lake, StoreConfig, TableOutput};
use benchlake_proto::client::{Auth, ClientTls, channel_with};
use benchlake_proto::retry::RetryPolicy;
use benchlake_proto::v1 as pb;
use pb::worker_service_client::WorkerServiceClient;
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// The client type the worker uses.
pub type Client = WorkerServiceClient<InterceptedService<Channel, Auth>>;

/// Why a job failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The input is bad: retrying cannot help.
    #[error("{0}")]
    Permanent(String),
    /// A transient failure (I/O, lake): worth another attempt.
    #[error("{0}")]
    Retryable(String),
    /// The coordinator took the job away (cancelled or lease lost).
    #[error("job cancelled")]
    Cancelled,
}

impl ExecError {
    /// Whether another attempt may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ExecError::Retryable(_))
    }
}

impl From<benchlake_formats::FormatError> for ExecError {
    fn from(e: benchlake_formats::FormatError) -> Self {
        if e.is_retryable() {
            ExecError::Retryable(e.to_string())
        } else {
            ExecError::Permanent(e.to_string())
        }
    }
}

impl From<benchlake_core::Error> for ExecError {
    fn from(e: benchlake_core::Error) -> Self {
        if e.is_retryable() {
            ExecError::Retryable(e.to_string())
        } else {
            ExecError::Permanent(e.to_string())
        }
    }
}

/// Everything an executor may use.
pub struct JobContext {
    pub job_id: String,
    pub run_id: String,
    pub kind: String,
    pub attempt: u32,
    pub spec_json: String,
    /// The run's date partition.
    pub run_date: String,
    pub lake: Lake,
    /// A scratch directory, removed after the job.
    pub scratch: PathBuf,
    rt: tokio::runtime::Handle,
    cancel: Arc<AtomicBool>,
}

impl JobContext {
    /// Whether the coordinator has taken the job away; long executors check it.
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Downloads a raw object into the scratch directory; returns its path.
    /// A raw output whose run's outputs were bundled comes from the bundle
    /// (`Lake::download_raw`).
    pub fn fetch(&self, key: &str) -> Result<PathBuf, ExecError> {
        let name = key.rsplit('/').next().unwrap_or("object");
        let dir = self.scratch.join(format!(
            "{:04}",
            std::fs::read_dir(&self.scratch)
                .map(|d| d.count())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| ExecError::Retryable(format!("{}: {e}", dir.display())))?;
        let dest = dir.join(name);
        self.rt.block_on(self.lake.download_raw(key, &dest))?;
        Ok(dest)
    }

    /// Runs a future of the lake on the worker's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }
}

/// What an executor produced.
#[derive(Debug, Default)]
pub struct ExecOutput {
    /// Tables to commit.
    pub tables: Vec<TableOutput>,
    /// Tables to commit that the executor encoded itself (a LinkTest ingest
    /// streams its pair times into Parquet a row group at a time instead of
    /// holding them as batches).
    pub encoded: Vec<EncodedTable>,
    /// Jobs to queue after this one commits.
    pub follow_ups: Vec<FollowUp>,
    /// Raw outputs packed into the run's bundle (`record` jobs; the
    /// coordinator records it on the run's tasks).
    pub bundled: Vec<String>,
}

/// Turns a job into tables.
pub trait Executor: Send + Sync + 'static {
    /// The job kind it serves.
    fn kind(&self) -> &'static str;
    /// Runs the job (on a blocking thread).
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError>;
}

/// The executors a worker offers, by kind.
#[derive(Clone, Default)]
pub struct Executors(BTreeMap<&'static str, Arc<dyn Executor>>);

impl Executors {
    /// The built-in executors (ingest, record, noop, replay).
    pub fn builtin() -> Self {
        let mut e = Self::default();
        e.add(executors::Ingest);
        e.add(executors::Record);
        e.add(executors::Noop);
        e.add(executors::Replay);
        e.add(analyze::AnalyzePlan);
        e.add(analyze::AnalyzePart);
        e.add(analyze::AnalyzeMerge);
        e.add(checks::Checks);
        e.add(traced::TraceCompare);
        e.add(calibrate::Calibrate);
        e.add(executors::Compact);
        e
    }
    /// Adds (or replaces) an executor.
    pub fn add(&mut self, x: impl Executor) {
        self.0.insert(x.kind(), Arc::new(x));
    }
    /// Kinds served.
    pub fn kinds(&self) -> Vec<String> {
        self.0.keys().map(|k| k.to_string()).collect()
    }
    fn get(&self, kind: &str) -> Option<Arc<dyn Executor>> {
        self.0.get(kind).cloned()
    }
}

/// Worker settings (flags / `BENCHLAKE_*` variables of `benchlake worker`).
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Coordinator address (`host:port` or URL), or a comma-separated list
    /// of them (the leader is found by connecting; see
    /// [`benchlake_proto::client::channel_with`]).
    pub coordinator: String,
    pub token: Option<String>,
    /// Unique worker name.
    pub name: String,
    /// The lake (the worker reads raw objects and writes staging objects directly).
    pub store: StoreConfig,
    /// Jobs run at once.
    pub concurrency: usize,
    /// Scratch space for downloads.
    pub scratch_dir: PathBuf,
    /// Long-poll wait per lease request.
    pub lease_wait: Duration,
    /// Fault injection for tests: wait this long between staging and the commit
    /// request (the window in which a killed worker leaves staged objects behind).
    pub commit_delay: Duration,
    /// How long calls to the coordinator (lease, renew, complete, fail) and
    /// staging writes to the lake are retried through an outage before they
    /// give up (`--retry-for`; see [`benchlake_proto::retry`]).
    pub retry_for: Duration,
}

/// Connects a client (default TLS settings for an `https://` coordinator).
pub fn client(cfg: &WorkerConfig) -> Result<Client, String> {
    client_with(cfg, &ClientTls::default())
}

/// Connects a client with `tls` for an `https://` coordinator.
pub fn client_with(cfg: &WorkerConfig, tls: &ClientTls) -> Result<Client, String> {
    let ch = channel_with(&cfg.coordinator, tls)?;
    Ok(
        WorkerServiceClient::with_interceptor(ch, Auth::new(cfg.token.as_deref())?)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20),
    )
}

/// Runs the worker until `shutdown` turns true. A job in flight at shutdown is
/// abandoned to its lease (the coordinator retries it).
pub async fn run(
    cfg: WorkerConfig,
    executors: Executors,
    shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    run_with_tls(cfg, ClientTls::default(), executors, shutdown).await
}

/// [`run`] with `tls` (CA, client certificate) for an `https://` coordinator.
pub async fn run_with_tls(
    cfg: WorkerConfig,
    tls: ClientTls,
    executors: Executors,
    shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let lake = Lake::open(&cfg.store).map_err(|e| format!("lake: {e}"))?;
    std::fs::create_dir_all(&cfg.scratch_dir)
        .map_err(|e| format!("{}: {e}", cfg.scratch_dir.display()))?;
    let c = client_with(&cfg, &tls)?;
    tracing::info!(worker = %cfg.name, kinds = ?executors.kinds(), concurrency = cfg.concurrency, "worker started");
    let mut slots = tokio::task::JoinSet::new();
    for slot in 0..cfg.concurrency.max(1) {
        let (cfg, ex, lake, c, sd) = (
            cfg.clone(),
            executors.clone(),
            lake.clone(),
            c.clone(),
            shutdown.clone(),
        );
        slots.spawn(async move { slot_loop(slot, cfg, ex, lake, c, sd).await });
    }
    while slots.join_next().await.is_some() {}
    tracing::info!(worker = %cfg.name, "worker stopped");
    Ok(())
}

async fn slot_loop(
    slot: usize,
    cfg: WorkerConfig,
    ex: Executors,
    lake: Lake,
    mut c: Client,
    mut shutdown: watch::Receiver<bool>,
) {
    let name = if cfg.concurrency > 1 {
        format!("{}.{slot}", cfg.name)
    } else {
        cfg.name.clone()
    };
    let kinds = ex.kinds();
    let policy = RetryPolicy::new(cfg.retry_for);
    loop {
        if *shutdown.borrow() {
            return;
        }
        let lease = policy.call("lease", || {
            let mut c = c.clone();
            let req = pb::LeaseJobRequest {
                protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
                worker: name.clone(),
                kinds: kinds.clone(),
                wait_ms: cfg.lease_wait.as_millis() as u32,
            };
            async move { c.lease_job(req).await }
        });
        let res = tokio::select! {
            r = lease => r,
            _ = shutdown.changed() => return,
        };
        match res {
            Ok(r) => {
                health::contact();
                if let Some(job) = r.into_inner().job {
                    let sd = shutdown.clone();
                    let m = health::metrics();
                    m.running.fetch_add(1, Ordering::Relaxed);
                    run_job(&cfg, &ex, &lake, &mut c, job, sd).await;
                    m.running.fetch_sub(1, Ordering::Relaxed);
                }
            }
            Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                tracing::error!(error = %s.message(), "coordinator refused the worker");
                return;
            }
            Err(s) => {
                // Transient failures were retried for the whole budget: the
                // worker stays up and starts over (it has no job to lose).
                tracing::error!(code = ?s.code(), error = %s.message(), "lease request failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(policy.max_delay) => {}
                    _ = shutdown.changed() => return,
                }
            }
        }
    }
}

/// Runs one leased job end to end.
pub async fn run_job(
    cfg: &WorkerConfig,
    ex: &Executors,
    lake: &Lake,
    c: &mut Client,
    job: pb::JobAssignment,
    mut shutdown: watch::Receiver<bool>,
) {
    let cancel = Arc::new(AtomicBool::new(false));
    let policy = RetryPolicy::new(cfg.retry_for);
    // Set when renewal failed for good: the lease is as good as gone, so the
    // job is abandoned to it (not committed, not failed) and runs again.
    let lost = Arc::new(AtomicBool::new(false));
    // Lease renewal on its own task, every third of the lease; each renewal
    // is retried through a coordinator outage.
    let renew = {
        let c = c.clone();
        let (job_id, lease_id) = (job.job_id.clone(), job.lease_id.clone());
        let (cancel, lost) = (cancel.clone(), lost.clone());
        let every = Duration::from_millis((job.lease_timeout_ms / 3).max(20));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let res = policy
                    .call("renew", || {
                        let mut c = c.clone();
                        let req = pb::RenewLeaseRequest {
                            job_id: job_id.clone(),
                            lease_id: lease_id.clone(),
                        };
                        async move { c.renew_lease(req).await }
                    })
                    .await;
                match res {
                    Ok(r) if r.get_ref().cancel => {
                        cancel.store(true, Ordering::Relaxed);
                        return;
                    }
                    Ok(_) => {}
                    Err(s) => {
                        tracing::error!(job = %job_id, code = ?s.code(), error = %s.message(), "lease renewal failed for good; abandoning the job");
                        lost.store(true, Ordering::Relaxed);
                        cancel.store(true, Ordering::Relaxed);
                        return;
                    }
                }
            }
        })
    };
    let Some(executor) = ex.get(&job.kind) else {
        renew.abort();
        fail(
            c,
            &job,
            &format!("this worker has no executor for job kind '{}'", job.kind),
            false,
            &policy,
        )
        .await;
        health::job(&job.kind, "failed");
        return;
    };
    let scratch = match tempfile::Builder::new()
        .prefix(&format!("job-{}-", job.job_id))
        .tempdir_in(&cfg.scratch_dir)
    {
        Ok(d) => d,
        Err(e) => {
            renew.abort();
            fail(c, &job, &format!("scratch directory: {e}"), true, &policy).await;
            health::job(&job.kind, "failed");
            return;
        }
    };
    let ctx = JobContext {
        job_id: job.job_id.clone(),
        run_id: job.run_id.clone(),
        kind: job.kind.clone(),
        attempt: job.attempt,
        spec_json: job.spec_json.clone(),
        run_date: job.run_date.clone(),
        lake: lake.clone(),
        scratch: scratch.path().to_path_buf(),
        rt: tokio::runtime::Handle::current(),
        cancel: cancel.clone(),
    };
    let started = std::time::Instant::now();
    let handle = tokio::task::spawn_blocking(move || {
        let r = executor.execute(&ctx);
        (r, ctx)
    });
    let res = tokio::select! {
        r = handle => r,
        _ = shutdown.changed() => {
            renew.abort();
            tracing::warn!(job = %job.job_id, "worker stopping; job abandoned to its lease");
            health::job(&job.kind, "abandoned");
            return;
        }
    };
    let out = match res {
        Ok((r, _ctx)) => r,
        Err(e) => Err(ExecError::Permanent(format!("executor panicked: {e}"))),
    };
    if lost.load(Ordering::Relaxed) {
        renew.abort();
        tracing::warn!(job = %job.job_id, "lease renewal failed for good; job abandoned to its lease");
        health::job(&job.kind, "abandoned");
        return;
    }
    let result = match out {
        Ok(out) => {
            let commit = stage_and_commit(lake, c, &job, out, cfg.commit_delay, &policy);
            tokio::select! {
                r = commit => r,
                _ = shutdown.changed() => {
                    renew.abort();
                    tracing::warn!(job = %job.job_id, "worker stopping; job abandoned to its lease");
                    health::job(&job.kind, "abandoned");
                    return;
                }
            }
        }
        Err(e) => Err(e),
    };
    renew.abort();
    drop(scratch);
    if lost.load(Ordering::Relaxed) && result.is_err() {
        tracing::warn!(job = %job.job_id, "lease renewal failed for good; job abandoned to its lease");
        health::job(&job.kind, "abandoned");
        return;
    }
    match result {
        Ok(keys) => {
            tracing::info!(job = %job.job_id, kind = %job.kind, files = keys.len(), secs = started.elapsed().as_secs_f64(), "job done");
            health::job(&job.kind, "done");
            health::metrics()
                .job_seconds
                .observe(&[&job.kind], started.elapsed().as_secs_f64());
        }
        Err(ExecError::Cancelled) => {
            tracing::warn!(job = %job.job_id, "job cancelled by the coordinator");
            health::job(&job.kind, "cancelled");
        }
        Err(e) => {
            tracing::warn!(job = %job.job_id, kind = %job.kind, error = %e, "job failed");
            health::job(&job.kind, "failed");
            fail(c, &job, &e.to_string(), e.is_retryable(), &policy).await;
        }
    }
}

/// Reports a failed job, retried through a coordinator outage (if that fails
/// too, the job's lease expires and it is retried).
async fn fail(
    c: &mut Client,
    job: &pb::JobAssignment,
    error: &str,
    retryable: bool,
    policy: &RetryPolicy,
) {
    let req = pb::FailJobRequest {
        job_id: job.job_id.clone(),
        lease_id: job.lease_id.clone(),
        error: error.to_string(),
        retryable,
    };
    let res = policy
        .call("fail", || {
            let mut c = c.clone();
            let req = req.clone();
            async move { c.fail_job(req).await }
        })
        .await;
    if let Err(s) = res {
        tracing::warn!(job = %job.job_id, code = ?s.code(), error = %s.message(), "could not report the failure; the job is left to its lease");
    }
}

/// Puts one encoded table under the job's staging prefix.
async fn stage(
    lake: &Lake,
    job: &pb::JobAssignment,
    t: &EncodedTable,
    policy: &RetryPolicy,
) -> Result<pb::StagedFile, ExecError> {
    let key = benchlake_core::layout::staged_key(&job.staging_prefix, &t.table, &t.part)
        .map_err(|e| ExecError::Permanent(e.to_string()))?;
    // A full lake disk (ENOSPC) or a flaky store is retried in place
    // before the job fails (retryably).
    policy
        .retry(
            &format!("staging write {key}"),
            benchlake_core::Error::is_retryable,
            || lake.put(&key, t.data.clone()),
        )
        .await?;
    Ok(pb::StagedFile {
        staged_key: key,
        table: t.table.clone(),
        rows: t.rows as u64,
        bytes: t.data.len() as u64,
        part: t.part.clone(),
    })
}

/// Encodes every table, puts it under the staging prefix and asks for the commit.
async fn stage_and_commit(
    lake: &Lake,
    c: &mut Client,
    job: &pb::JobAssignment,
    out: ExecOutput,
    delay: Duration,
    policy: &RetryPolicy,
) -> Result<Vec<String>, ExecError> {
    let mut files = Vec::new();
    // Batches are encoded one table at a time, so only one table's Parquet
    // bytes are held at once.
    for t in &out.tables {
        let e = EncodedTable::encode(t, &job.run_date)
            .map_err(|e| ExecError::Permanent(e.to_string()))?;
        files.push(stage(lake, job, &e, policy).await?);
    }
    for e in &out.encoded {
        files.push(stage(lake, job, e, policy).await?);
    }
    let result_json = serde_json::to_string(&benchlake_core::jobs::JobResult {
        follow_ups: out.follow_ups,
        bundled: out.bundled,
    })
    .map_err(|e| ExecError::Permanent(e.to_string()))?;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let req = pb::CompleteJobRequest {
        job_id: job.job_id.clone(),
        lease_id: job.lease_id.clone(),
        files,
        result_json,
    };
    // Retried through an outage (and through the coordinator's own lake
    // failures, ENOSPC included, which it reports as UNAVAILABLE): the commit
    // is idempotent under one lease (deterministic final keys).
    let res = policy
        .call("complete", || {
            let mut c = c.clone();
            let req = req.clone();
            async move { c.complete_job(req).await }
        })
        .await;
    match res {
        Ok(r) => Ok(r.into_inner().committed_keys),
        Err(s) if s.code() == tonic::Code::Aborted => Err(ExecError::Cancelled),
        Err(s) if s.code() == tonic::Code::InvalidArgument => Err(ExecError::Permanent(format!(
            "commit refused: {}",
            s.message()
        ))),
        Err(s) => Err(ExecError::Retryable(format!(
            "commit failed: {}",
            s.message()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ENOSPC from the lake (a full disk) is transient: retried in place by the
    /// retry policy, and reported as retryable if the budget runs out.
    #[test]
    fn a_full_lake_disk_is_retryable() {
        let io = benchlake_core::Error::Io {
            path: "/lake/_staging/x.parquet".into(),
            source: std::io::Error::from_raw_os_error(28),
        };
        assert!(io.is_retryable());
        assert!(ExecError::from(io).is_retryable());
    }
}
