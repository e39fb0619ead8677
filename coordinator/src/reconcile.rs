//! The reconciler: removes lake objects that nothing will read again.
//!
//! - `_staging/{job}/{attempt}/` of a job that has ended (DONE, FAILED,
//!   CANCELLED) or of an attempt older than the job's current one. The commit
//!   deletes its own staging, but a worker killed between staging and commit, a
//!   failed attempt or a commit that lost its lease leaves objects behind. The
//!   live attempt of a job (LEASED, or QUEUED for its next attempt) is never
//!   touched, nor a job the state does not know.
//! - `_work/{run}/` (jobs' scratch: analysis part results, generated replay
//!   inputs) of a run that is final and whose jobs have all ended, once
//!   [`WORK_KEEP_MS`] have passed since the run finished (time to look at them).
//!
//! Both rules only ever grow: a job that has ended stays ended and attempts only
//! go up, so a prefix judged garbage from the state read after the listing is
//! garbage for good; objects written after the listing wait for the next pass.
//!
//! The background tick starts a pass every [`RECONCILE_EVERY_MS`] of the
//! coordinator's clock (the time of the last pass is kept in the state's `meta`
//! table); [`Coordinator::reconcile`] runs one at once.
use std::collections::BTreeMap;
use std::future::Future;

use benchlake_core::layout;

use crate::Coordinator;
use crate::error::Result;
use crate::model::*;

/// Clock time between two passes started by the background tick.
/// TODO: a `CoordinatorConfig` knob.
pub const RECONCILE_EVERY_MS: i64 = 60_000;

/// How long `_work/{run}/` is kept after its run finished.
/// TODO: a `CoordinatorConfig` knob.
pub const WORK_KEEP_MS: i64 = 10 * 60_000;

/// `meta` key of the clock time of the last pass started by the tick.
const LAST_PASS_KEY: &str = "reconciled_at_ms";

/// What one pass removed (and left alone).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ReconcileReport {
    /// `_staging/{job}/{attempt}/` prefixes removed.
    pub staging_prefixes: usize,
    /// Objects under them (as listed).
    pub staging_objects: usize,
    /// Their bytes (as listed).
    pub staging_bytes: u64,
    /// `_work/{run}/` prefixes removed.
    pub work_runs: usize,
    /// Objects under them (as listed).
    pub work_objects: usize,
    /// Their bytes (as listed).
    pub work_bytes: u64,
    /// Prefixes kept: live attempts, unfinished runs, runs finished too recently.
    pub kept: usize,
    /// Prefixes of jobs or runs the state does not know (or keys of another
    /// shape): left alone.
    pub unknown: usize,
}

/// Whether `_staging/{job}/{attempt}/` is garbage given the job's current row:
/// the job has ended, or the attempt is older than the job's current one.
pub fn staging_is_garbage(job: &JobRow, attempt: u32) -> bool {
    job.state.is_final() || attempt < job.attempt
}

/// Whether `_work/{run}/` is garbage at `now`: the run is final (its record
/// has landed), none of its jobs is queued or leased, and it finished at least
/// [`WORK_KEEP_MS`] ago.
pub fn work_is_garbage(run: &RunRow, open_jobs: u64, now: i64) -> bool {
    run.state.is_final()
        && run.outcome.is_none()
        && open_jobs == 0
        && run.finished_at_ms.unwrap_or(run.submitted_at_ms) + WORK_KEEP_MS <= now
}

#[derive(Default)]
struct Group {
    objects: usize,
    bytes: u64,
}

impl Coordinator {
    /// One reconciler pass now (the tick runs one every
    /// [`RECONCILE_EVERY_MS`]): removes the staging objects of ended job
    /// attempts and the scratch objects of ended runs. Logs and returns what it
    /// removed. A prefix that cannot be deleted is logged and retried next pass.
    pub async fn reconcile(&self) -> Result<ReconcileReport> {
        let now = self.now();
        let mut rep = ReconcileReport::default();

        // 1. Staging, grouped by (job, attempt).
        let mut staged: BTreeMap<(String, u32), Group> = BTreeMap::new();
        for (key, bytes) in self.lake.list(layout::STAGING).await? {
            match layout::parse_staging_key(&key) {
                Some((job, attempt)) => {
                    let g = staged.entry((job.to_string(), attempt)).or_default();
                    g.objects += 1;
                    g.bytes += bytes;
                }
                None => rep.unknown += 1,
            }
        }
        // A worker killed in the middle of a put in a local lake leaves
        // object_store's upload file (`name#N`), which listings skip: its
        // attempt's directory is found on disk.
        if let Some(root) = self.lake.local_dir() {
            for (job, attempt) in local_staging_dirs(root) {
                staged.entry((job, attempt)).or_default();
            }
        }
        let jobs: BTreeMap<String, Option<JobRow>> = {
            let ids: std::collections::BTreeSet<String> =
                staged.keys().map(|(j, _)| j.clone()).collect();
            self.db(move |tx| {
                let mut out = BTreeMap::new();
                for id in ids {
                    let j = tx.get_job(&id)?;
                    out.insert(id, j);
                }
                Ok(out)
            })
            .await?
        };
        for ((job, attempt), g) in &staged {
            match jobs.get(job).and_then(|j| j.as_ref()) {
                None => rep.unknown += 1,
                Some(j) if staging_is_garbage(j, *attempt) => {
                    let prefix = layout::staging_prefix(job, *attempt)?;
                    match self.lake.delete_prefix(&prefix).await {
                        Ok(()) => {
                            // What listings cannot see (interrupted uploads)
                            // goes with the attempt's directory.
                            if let Some(root) = self.lake.local_dir() {
                                let _ = std::fs::remove_dir_all(
                                    root.join(prefix.trim_end_matches('/')),
                                );
                                prune_local_dirs(self.lake.root(), &prefix);
                            }
                            tracing::debug!(%prefix, job_state = j.state.as_str(), job_attempt = j.attempt,
                                objects = g.objects, bytes = g.bytes, "reconciler removed staging");
                            rep.staging_prefixes += 1;
                            rep.staging_objects += g.objects;
                            rep.staging_bytes += g.bytes;
                        }
                        Err(e) => {
                            tracing::warn!(%prefix, error = %e, "reconciler could not remove staging")
                        }
                    }
                }
                Some(_) => rep.kept += 1,
            }
        }

        // 2. Scratch of runs, grouped by run.
        let mut work: BTreeMap<String, Group> = BTreeMap::new();
        for (key, bytes) in self.lake.list(layout::WORK).await? {
            match layout::parse_work_key(&key) {
                Some(run) => {
                    let g = work.entry(run.to_string()).or_default();
                    g.objects += 1;
                    g.bytes += bytes;
                }
                None => rep.unknown += 1,
            }
        }
        let runs: BTreeMap<String, Option<bool>> = {
            let ids: Vec<String> = work.keys().cloned().collect();
            self.db(move |tx| {
                let mut out = BTreeMap::new();
                for id in ids {
                    let garbage = match tx.get_run(&id)? {
                        Some(r) => Some(work_is_garbage(&r, tx.count_open_jobs(&id, "")?, now)),
                        None => None,
                    };
                    out.insert(id, garbage);
                }
                Ok(out)
            })
            .await?
        };
        for (run, g) in &work {
            match runs.get(run).copied().flatten() {
                None => rep.unknown += 1,
                Some(true) => {
                    let prefix = layout::work_prefix(run)?;
                    match self.lake.delete_prefix(&prefix).await {
                        Ok(()) => {
                            prune_local_dirs(self.lake.root(), &prefix);
                            tracing::debug!(%prefix, objects = g.objects, bytes = g.bytes, "reconciler removed run scratch");
                            rep.work_runs += 1;
                            rep.work_objects += g.objects;
                            rep.work_bytes += g.bytes;
                        }
                        Err(e) => {
                            tracing::warn!(%prefix, error = %e, "reconciler could not remove run scratch")
                        }
                    }
                }
                Some(false) => rep.kept += 1,
            }
        }

        if rep.staging_prefixes > 0 || rep.work_runs > 0 {
            tracing::info!(
                staging_prefixes = rep.staging_prefixes,
                staging_objects = rep.staging_objects,
                staging_bytes = rep.staging_bytes,
                work_runs = rep.work_runs,
                work_objects = rep.work_objects,
                work_bytes = rep.work_bytes,
                kept = rep.kept,
                unknown = rep.unknown,
                "reconciler removed leftover lake objects"
            );
        } else if rep.unknown > 0 {
            tracing::debug!(
                unknown = rep.unknown,
                "reconciler left objects of unknown jobs or runs alone"
            );
        }
        Ok(rep)
    }

    /// Whether the tick should start a pass at `now`; if so, records `now` as
    /// the last pass (so a failing pass is not retried every tick).
    pub(crate) fn reconcile_due(&self, now: i64) -> Result<bool> {
        self.store.transact(|tx| {
            let last = tx
                .get_meta(LAST_PASS_KEY)?
                .and_then(|v| v.parse::<i64>().ok());
            // A clock that went back (a system clock reset) must not stall the passes.
            let due = match last {
                Some(t) => now >= t.saturating_add(RECONCILE_EVERY_MS) || now < t,
                None => true,
            };
            if due {
                tx.set_meta(LAST_PASS_KEY, &now.to_string())?;
            }
            Ok(due)
        })
    }

    /// The tick's part: a pass when one is due, run to completion (errors are
    /// logged, never fail the tick). Returns the report of a pass that ran.
    pub(crate) fn reconcile_if_due(&self, now: i64) -> Option<ReconcileReport> {
        match self.reconcile_due(now) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "reconciler: cannot read its last pass");
                return None;
            }
        }
        let out = match block_on(self.reconcile()) {
            Ok(rep) => Some(rep),
            Err(e) => {
                tracing::warn!(error = %e, "reconciler pass failed; retried next pass");
                None
            }
        };
        let r = &self.cfg.retention;
        if r.mode != crate::retention::RetentionMode::Off && !r.rules.is_empty() {
            match self.retention_due(now) {
                Ok(true) => {
                    if let Err(e) = block_on(self.apply_retention(r, now)) {
                        tracing::warn!(error = %e, "retention pass failed; retried next pass");
                    }
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "retention: cannot read its last pass"),
            }
        }
        out
    }
}

/// The (job, attempt) directories under a local lake's staging, whatever
/// they hold; names that are not a staging key's are left alone.
fn local_staging_dirs(root: &std::path::Path) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let Ok(jobs) = std::fs::read_dir(root.join(layout::STAGING.trim_end_matches('/'))) else {
        return out;
    };
    for j in jobs.flatten() {
        let Ok(attempts) = std::fs::read_dir(j.path()) else {
            continue;
        };
        let job = j.file_name().to_string_lossy().into_owned();
        for a in attempts.flatten() {
            let key = format!(
                "{}/{job}/{}/x",
                layout::STAGING.trim_end_matches('/'),
                a.file_name().to_string_lossy()
            );
            if let Some((jb, at)) = layout::parse_staging_key(&key) {
                out.push((jb.to_string(), at));
            }
        }
    }
    out
}

/// In a local lake (`root` is its directory), removes the empty directories
/// under and above `prefix` (up to the lake's own) that deleting a prefix with
/// subdirectories leaves behind: object_store deletes files only, and
/// `Lake::delete_prefix` prunes upwards from the prefix only. A directory a
/// writer still uses is not empty and stays; one removed under a writer's feet
/// is created again by its put. Nothing to do for S3 (`s3://…`).
fn prune_local_dirs(root: &str, prefix: &str) {
    fn prune(dir: &std::path::Path) {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    prune(&e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    let root = std::path::Path::new(root);
    if !root.is_absolute() || !root.is_dir() {
        return;
    }
    let mut dir = root.join(prefix.trim_end_matches('/'));
    prune(&dir);
    while let Some(parent) = dir.parent().map(|p| p.to_path_buf()) {
        if parent == root || !parent.starts_with(root) || std::fs::remove_dir(&parent).is_err() {
            break;
        }
        dir = parent;
    }
}

/// Runs a future of the lake to completion from synchronous code (the tick):
/// on the current multi-threaded runtime (from one of its workers or a
/// blocking thread), else on a one-off runtime on a scoped thread (no runtime,
/// or a current-thread runtime that must not be blocked).
pub(crate) fn block_on<T: Send>(f: impl Future<Output = T> + Send) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if let Ok(h) = Handle::try_current()
        && h.runtime_flavor() == RuntimeFlavor::MultiThread
    {
        return tokio::task::block_in_place(|| h.block_on(f));
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime")
                .block_on(f)
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use benchlake_core::clock::{Clock, ManualClock};
    use benchlake_core::ids::new_id_at;
    use benchlake_core::lake::Lake;
    use bytes::Bytes;

    use crate::CoordinatorConfig;
    use crate::store::{SqliteStore, StateStore};

    const T0: i64 = 1_795_392_000_000;

    fn coordinator(dir: &std::path::Path) -> (Arc<Coordinator>, ManualClock) {
        let clock = ManualClock::new(T0);
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
        let lake = Lake::local(&dir.join("lake")).unwrap();
        let cfg = CoordinatorConfig {
            background: false,
            ..Default::default()
        };
        let c = Coordinator::new(store, lake, Arc::new(clock.clone()), cfg).unwrap();
        (c, clock)
    }

    fn run(state: RunState, finished: Option<i64>) -> RunRow {
        let spec = Spec {
            benchmark: "b".into(),
            params: Default::default(),
            nodes: Nodes::default(),
            launcher: benchlake_core::bench::LauncherKind::Local,
            max_attempts: 1,
            timeout_s: 60,
            slurm: Default::default(),
        };
        let mut r = RunRow::new(new_id_at(T0), spec, "noop", Origin::default(), T0);
        r.state = state;
        r.started_at_ms = Some(T0);
        r.finished_at_ms = finished;
        r
    }

    fn job(run: &RunRow, state: JobState, attempt: u32) -> JobRow {
        let cfg = CoordinatorConfig::default();
        let mut j = crate::lifecycle::job::new(run, "ingest", "{}".into(), &cfg, T0);
        j.state = state;
        j.attempt = attempt;
        j
    }

    async fn put(c: &Coordinator, key: &str) {
        c.lake()
            .put(key, Bytes::from_static(b"0123456789"))
            .await
            .unwrap();
    }

    async fn keys(c: &Coordinator, prefix: &str) -> Vec<String> {
        c.lake()
            .list(prefix)
            .await
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    #[test]
    fn garbage_rules() {
        let r = run(RunState::Processing, None);
        assert!(!staging_is_garbage(&job(&r, JobState::Leased, 2), 2));
        assert!(!staging_is_garbage(&job(&r, JobState::Queued, 2), 2));
        assert!(staging_is_garbage(&job(&r, JobState::Leased, 2), 1));
        assert!(staging_is_garbage(&job(&r, JobState::Queued, 3), 2));
        for s in [JobState::Done, JobState::Failed, JobState::Cancelled] {
            assert!(staging_is_garbage(&job(&r, s, 2), 2));
        }
        let now = T0 + WORK_KEEP_MS;
        assert!(!work_is_garbage(&r, 0, now));
        let mut fin = run(RunState::Succeeded, Some(T0));
        assert!(work_is_garbage(&fin, 0, now));
        assert!(!work_is_garbage(&fin, 0, now - 1), "kept for WORK_KEEP_MS");
        assert!(!work_is_garbage(&fin, 1, now), "a job is still open");
        fin.state = RunState::Cancelled;
        fin.outcome = Some(RunState::Cancelled);
        assert!(
            !work_is_garbage(&fin, 0, now),
            "its record has not landed yet"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pass_removes_ended_attempts_and_runs_and_keeps_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (c, clock) = coordinator(dir.path());
        let live_run = run(RunState::Processing, None);
        let done_run = run(RunState::Succeeded, Some(T0));
        let leased = job(&live_run, JobState::Leased, 2);
        let done = job(&done_run, JobState::Done, 1);
        let queued = job(&live_run, JobState::Queued, 3);
        c.store()
            .transact(|tx| {
                tx.insert_run(&live_run)?;
                tx.insert_run(&done_run)?;
                tx.insert_job(&leased)?;
                tx.insert_job(&done)?;
                tx.insert_job(&queued)
            })
            .unwrap();
        let st = |j: &JobRow, a: u32, n: &str| {
            format!("{}{n}", layout::staging_prefix(&j.job_id, a).unwrap())
        };
        let stranger = new_id_at(T0);
        for k in [
            st(&leased, 1, "a.parquet"),
            st(&leased, 2, "a.parquet"),
            st(&done, 1, "a.parquet"),
            st(&done, 1, "b.parquet"),
            st(&queued, 2, "a.parquet"),
            format!("_staging/{stranger}/1/a.parquet"),
            format!(
                "{}counts/p/part-00000.json",
                layout::work_prefix(&done_run.run_id).unwrap()
            ),
            format!("{}x", layout::work_prefix(&live_run.run_id).unwrap()),
        ] {
            put(&c, &k).await;
        }

        // Within WORK_KEEP_MS of the run's end its scratch stays; staging goes.
        let rep = c.reconcile().await.unwrap();
        assert_eq!(
            (rep.staging_prefixes, rep.staging_objects, rep.staging_bytes),
            (3, 4, 40),
            "{rep:?}"
        );
        assert_eq!(rep.work_runs, 0, "{rep:?}");
        assert_eq!(
            keys(&c, layout::STAGING).await,
            [
                st(&leased, 2, "a.parquet"),
                format!("_staging/{stranger}/1/a.parquet")
            ]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
        );
        assert_eq!(rep.unknown, 1);

        clock.advance(WORK_KEEP_MS);
        let rep = c.reconcile().await.unwrap();
        assert_eq!((rep.work_runs, rep.work_objects), (1, 1), "{rep:?}");
        assert_eq!(
            keys(&c, layout::WORK).await,
            [format!(
                "{}x",
                layout::work_prefix(&live_run.run_id).unwrap()
            )]
        );
        // The emptied directories of a local lake go too.
        assert!(
            !dir.path()
                .join("lake/_work")
                .join(&done_run.run_id)
                .exists()
        );
        assert!(!dir.path().join("lake/_staging").join(&done.job_id).exists());
        assert_eq!(c.reconcile().await.unwrap().staging_prefixes, 0);
    }

    /// A worker killed while object_store was writing a staged file leaves
    /// only its upload file (`name#1`), which a listing does not show: the
    /// pass still removes the ended attempt's directory, and nothing of a
    /// live one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_interrupted_upload_of_an_ended_attempt_goes_too() {
        let dir = tempfile::tempdir().unwrap();
        let (c, _clock) = coordinator(dir.path());
        let r = run(RunState::Processing, None);
        let retried = job(&r, JobState::Leased, 2);
        c.store()
            .transact(|tx| {
                tx.insert_run(&r)?;
                tx.insert_job(&retried)
            })
            .unwrap();
        let lake = dir.path().join("lake");
        let at = |a: u32| {
            lake.join(
                layout::staging_prefix(&retried.job_id, a)
                    .unwrap()
                    .trim_end_matches('/'),
            )
        };
        for a in [1, 2] {
            std::fs::create_dir_all(at(a)).unwrap();
            std::fs::write(at(a).join("node_facts.parquet#1"), b"half").unwrap();
        }
        assert!(c.lake().list(layout::STAGING).await.unwrap().is_empty());
        let rep = c.reconcile().await.unwrap();
        assert_eq!(rep.staging_prefixes, 1, "{rep:?}");
        assert!(!at(1).exists(), "the dead attempt's directory goes");
        assert!(
            at(2).join("node_facts.parquet#1").exists(),
            "the live attempt's upload stays"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_tick_runs_a_pass_every_minute_of_clock_time() {
        let dir = tempfile::tempdir().unwrap();
        let (c, clock) = coordinator(dir.path());
        let r = run(RunState::Processing, None);
        let j = job(&r, JobState::Failed, 1);
        c.store()
            .transact(|tx| {
                tx.insert_run(&r)?;
                tx.insert_job(&j)
            })
            .unwrap();
        let key = format!("{}t.parquet", layout::staging_prefix(&j.job_id, 1).unwrap());
        // The first tick ever runs a pass.
        c.tick().unwrap();
        put(&c, &key).await;
        clock.advance(RECONCILE_EVERY_MS - 1);
        c.tick().unwrap();
        assert_eq!(
            keys(&c, layout::STAGING).await,
            [key.as_str()],
            "not due yet"
        );
        clock.advance(1);
        c.tick().unwrap();
        assert!(keys(&c, layout::STAGING).await.is_empty());
        assert_eq!(clock.now_ms(), T0 + RECONCILE_EVERY_MS);
    }

    #[test]
    fn the_tick_reconciles_without_a_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let (c, _clock) = coordinator(dir.path());
        assert!(c.reconcile_if_due(c.now()).is_some());
        assert!(c.reconcile_if_due(c.now()).is_none(), "rate-limited");
    }
}
