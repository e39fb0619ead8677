//! Nothing is left behind, and every finished run gets its `runs` row (issue
//! 13, items 8 and 9), on the in-process cluster (see `common`):
//!
//! - a real `benchlake worker` process killed with SIGKILL between staging and
//!   commit leaves `_staging/` objects; the job's lease expires, another worker
//!   finishes it, and the coordinator's reconciler (a tick a minute of clock
//!   time later) removes them, with the table's rows exactly once;
//! - `_work/{run}/` of a run that has ended goes, that of a running run stays;
//! - a `record` job that fails retryably more often than `job_max_attempts`
//!   is retried until it lands, and the run gets its row exactly once.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use benchlake_coordinator::Tokens;
use benchlake_coordinator::reconcile::{RECONCILE_EVERY_MS, WORK_KEEP_MS};
use benchlake_core::layout;
use benchlake_proto::v1 as pb;
use benchlake_worker::{ExecError, ExecOutput, Executor, Executors, JobContext};
use common::*;

/// Every file under `dir` (recursively), relative to `root`, sorted.
fn files_under(root: &Path, dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.join(dir)];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

fn job_state(j: &pb::Job) -> pb::JobState {
    pb::JobState::try_from(j.state).unwrap()
}

/// A `benchlake worker` process that stops for 10 minutes between staging
/// and its commit request (the fault-injection flag).
fn slow_worker_process(c: &Cluster, name: &str) -> std::process::Child {
    let scratch: PathBuf = c.dir.path().join(format!("scratch-{name}"));
    Command::new(bin())
        .args(["worker", "--coordinator", &c.addr, "--name", name])
        .args(["--concurrency", "1", "--lake"])
        .arg(c.lake_dir())
        .arg("--scratch")
        .arg(&scratch)
        .args(["--fault-commit-delay-ms", "600000"])
        .env_remove("BENCHLAKE_TOKEN")
        .env_remove("BENCHLAKE_LAKE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("benchlake worker starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_between_staging_and_commit_leaves_nothing_behind() {
    let mut c = Cluster::start(Tokens::default()).await;
    let lake = c.lake_dir();
    // The reconciler's first pass (the first tick ever), so the next is a
    // minute of clock time away.
    c.tick();
    c.add_agent("a1", None).await;
    let mut doomed = slow_worker_process(&c, "doomed");
    let run = c.submit("hostinfo", &[], 1).await.unwrap();

    // The worker has staged the ingest job's Parquet and waits to commit.
    let deadline = Instant::now() + Duration::from_secs(60);
    let staged = loop {
        let f = files_under(&lake, layout::STAGING);
        if !f.is_empty() {
            break f;
        }
        assert!(Instant::now() < deadline, "nothing was staged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // kill -9.
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    let (job_id, attempt) = layout::parse_staging_key(&staged[0]).unwrap();
    let (job_id, attempt) = (job_id.to_string(), attempt);
    assert_eq!(attempt, 1, "{staged:?}");

    // Its lease expires; another worker runs the job again and commits.
    c.advance_with_heartbeats(10_001).await;
    assert_eq!(c.tick().expired_jobs, 1);
    c.add_worker("w1", None);
    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let ingest = d.jobs.iter().find(|j| j.job_id == job_id).unwrap();
    assert_eq!((ingest.kind.as_str(), ingest.attempt), ("ingest", 2));
    // The dead attempt's objects are still there: a commit removes only its
    // own staging (right after its transaction: wait for the record job's).
    let prefix = layout::staging_prefix(&job_id, 1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let left = loop {
        let left = files_under(&lake, layout::STAGING);
        if left.iter().all(|k| k.starts_with(&prefix)) || Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        !left.is_empty() && left.iter().all(|k| k.starts_with(&prefix)),
        "{left:?}"
    );

    // A minute of clock time later the tick's reconciler pass removes them.
    c.advance_with_heartbeats(RECONCILE_EVERY_MS).await;
    c.tick();
    assert_eq!(
        files_under(&lake, layout::STAGING),
        Vec::<String>::new(),
        "staging left behind"
    );
    assert!(
        !lake.join(layout::STAGING).exists(),
        "emptied directories go too"
    );
    // Exactly the expected rows: one node's facts, one run record.
    assert_eq!(table_rows(&lake, "node_facts", Some(&run.run_id)), 1);
    assert_eq!(table_rows(&lake, "runs", Some(&run.run_id)), 1);
    assert_eq!(table_files(&lake, "node_facts", Some(&run.run_id)).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_scratch_of_an_ended_run_goes_and_that_of_a_running_run_stays() {
    let mut c = Cluster::start(Tokens::default()).await;
    let lake = c.lake_dir();
    c.tick();
    c.add_agent("a1", None).await;
    c.add_worker("w1", None);
    let ended = c.submit("hostinfo", &[], 1).await.unwrap();
    c.wait_settled(&ended.run_id, 60).await;
    let running = c.submit("sleep", &[("seconds", "600")], 1).await.unwrap();
    c.wait_run(&running.run_id, 30, |d| {
        d.tasks
            .iter()
            .all(|t| pb::TaskState::try_from(t.state).unwrap() == pb::TaskState::Running)
    })
    .await;
    // Scratch objects as the counts analysis and traced runs leave them.
    let write = |run: &str, rel: &str| {
        let key = format!("{}{rel}", layout::work_prefix(run).unwrap());
        let p = lake.join(&key);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"scratch").unwrap();
        key
    };
    write(
        &ended.run_id,
        "counts/01M82V7M0060P4BH3YA8HB23B4/part-00000.json",
    );
    write(
        &ended.run_id,
        "traced/01M82V7M0060P4BH3YA8HB23B4/replaympi.input",
    );
    let kept = write(&running.run_id, "counts/x/part-00000.json");

    // Kept for WORK_KEEP_MS after the run finished (a pass is due: the last was at T0).
    c.advance_with_heartbeats(RECONCILE_EVERY_MS).await;
    c.tick();
    assert_eq!(files_under(&lake, layout::WORK).len(), 3);

    c.advance_with_heartbeats(WORK_KEEP_MS).await;
    c.tick();
    assert_eq!(files_under(&lake, layout::WORK), [kept.as_str()]);
    assert!(!lake.join(layout::WORK).join(&ended.run_id).exists());
    // The running run is untouched: its task still runs.
    let d = c.detail(&running.run_id).await;
    assert_eq!(state(&d), pb::RunState::Running, "{d:#?}");

    // Once it ends (cancelled here) and its record landed, its scratch goes too.
    c.runs()
        .cancel_run(pb::CancelRunRequest {
            run_id: running.run_id.clone(),
            reason: "test".into(),
        })
        .await
        .unwrap();
    c.wait_settled(&running.run_id, 60).await;
    c.advance_with_heartbeats(WORK_KEEP_MS).await;
    c.tick();
    assert_eq!(files_under(&lake, layout::WORK), Vec::<String>::new());
    assert_eq!(table_rows(&lake, "runs", Some(&running.run_id)), 1);
}

/// The `record` executor behind a lake that is full for its first `fail` attempts.
struct FullLakeRecord {
    fail: u32,
    seen: AtomicU32,
}

impl Executor for FullLakeRecord {
    fn kind(&self) -> &'static str {
        "record"
    }
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        if self.seen.fetch_add(1, Ordering::SeqCst) < self.fail {
            return Err(ExecError::Retryable(
                "lake: No space left on device (os error 28)".into(),
            ));
        }
        benchlake_worker::executors::Record.execute(ctx)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_record_job_is_retried_until_the_run_has_its_row() {
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_agent("a1", None).await;
    let max_attempts = c.coord.config().job_max_attempts;
    let fail = max_attempts + 2;
    let mut ex = Executors::builtin();
    ex.add(FullLakeRecord {
        fail,
        seen: AtomicU32::new(0),
    });
    c.add_worker_with("w1", ex);
    let run = c.submit("hostinfo", &[], 1).await.unwrap();

    // While the record keeps failing the run stays PROCESSING with its outcome.
    let d = c
        .wait_run(&run.run_id, 60, |d| {
            d.jobs
                .iter()
                .any(|j| j.kind == "record" && j.attempt > max_attempts)
        })
        .await;
    let rec = d.jobs.iter().find(|j| j.kind == "record").unwrap();
    if job_state(rec) != pb::JobState::Done {
        assert!(
            rec.error.contains("No space left on device"),
            "{}",
            rec.error
        );
        assert_eq!(state(&d), pb::RunState::Processing, "{d:#?}");
    }

    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let recs: Vec<_> = d.jobs.iter().filter(|j| j.kind == "record").collect();
    assert_eq!(recs.len(), 1);
    assert_eq!(job_state(recs[0]), pb::JobState::Done);
    assert_eq!(recs[0].attempt, fail + 1);
    let lake = c.lake_dir();
    assert_eq!(table_rows(&lake, "runs", Some(&run.run_id)), 1);
    assert_eq!(table_rows(&lake, "node_facts", Some(&run.run_id)), 1);
}
