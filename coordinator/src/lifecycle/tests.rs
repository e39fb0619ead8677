//! Every transition of runs, tasks and jobs on a manual clock over an
//! in-memory store: resulting states, attempts, lease times, effects, and
//! the transitions that are refused.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use benchlake_core::bench::{BenchmarkInfo, LauncherKind};
use benchlake_core::clock::{Clock, ManualClock};
use benchlake_core::ids;
use benchlake_core::jobs::{FollowUp, INGEST_JOB, RECORD_JOB};
use benchlake_core::lake::Lake;

use super::*;
use crate::error::CoordError;
use crate::model::*;
use crate::store::{PARKED, SqliteStore, StateStore, Tx};

/// 2026-11-23T00:00:00Z.
const T0: i64 = 1_795_392_000_000;
const LEASE: i64 = 10_000;
const JOB_LEASE: i64 = 20_000;

fn cfg() -> CoordinatorConfig {
    CoordinatorConfig {
        lease_timeout_ms: LEASE as u64,
        heartbeat_interval_ms: 1_000,
        agent_lost_after_ms: 30_000,
        task_max_attempts: 3,
        job_max_attempts: 3,
        retry_backoff_ms: 1_000,
        retry_backoff_max_ms: 10_000,
        job_lease_timeout_ms: JOB_LEASE as u64,
        background: false,
        ..Default::default()
    }
}

/// A coordinator on a manual clock at [`T0`] over an in-memory store, with
/// agents `a1`, `a2` and `a3` offering benchmark `b` (local launcher).
struct World {
    c: Arc<Coordinator>,
    clock: ManualClock,
    cfg: CoordinatorConfig,
    _dir: tempfile::TempDir,
}

impl World {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
        let lake = Lake::local(dir.path()).unwrap();
        let c = Coordinator::new(store, lake, Arc::new(clock.clone()), cfg()).unwrap();
        let w = Self {
            c,
            clock,
            cfg: cfg(),
            _dir: dir,
        };
        for a in ["a1", "a2", "a3"] {
            w.tx(|tx| tx.upsert_agent(&agent(a)));
        }
        w
    }

    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    fn tx<T: Send>(&self, f: impl FnOnce(&mut dyn Tx) -> crate::Result<T> + Send) -> T {
        self.c.store().transact(f).unwrap()
    }

    fn try_tx<T: Send>(
        &self,
        f: impl FnOnce(&mut dyn Tx) -> crate::Result<T> + Send,
    ) -> crate::Result<T> {
        self.c.store().transact(f)
    }

    fn run(&self, id: &str) -> RunRow {
        self.tx(|tx| tx.get_run(id)).unwrap()
    }

    fn tasks(&self, run_id: &str) -> Vec<TaskRow> {
        self.tx(|tx| tx.tasks_of_run(run_id))
    }

    fn task(&self, id: &str) -> TaskRow {
        self.tx(|tx| tx.get_task(id)).unwrap()
    }

    fn jobs(&self, run_id: &str) -> Vec<JobRow> {
        self.tx(|tx| tx.jobs_of_run(run_id))
    }

    fn job(&self, id: &str) -> JobRow {
        self.tx(|tx| tx.get_job(id)).unwrap()
    }

    /// A PENDING run of `b` on `agents`.
    fn submit(&self, agents: &[&str]) -> (RunRow, Effects) {
        let now = self.now();
        let agents = agents.iter().map(|a| a.to_string()).collect();
        self.tx(|tx| {
            run::create(
                tx,
                &self.cfg,
                spec(),
                "noop".into(),
                Origin::default(),
                agents,
                now,
            )
        })
    }

    /// Leases the next task of `agent` (it must have one).
    fn lease_task(&self, agent: &str) -> (TaskRow, Effects) {
        let now = self.now();
        let (got, fx) = self.tx(|tx| task::lease(tx, &self.cfg, agent, now));
        (got.expect("a task to lease").0, fx)
    }

    fn complete_task(&self, t: &TaskRow, c: task::Completion) -> Effects {
        let now = self.now();
        self.tx(|tx| {
            let t = task::leased(tx, &t.task_id, t.lease_id.as_deref().unwrap_or_default())?;
            task::complete(tx, &self.cfg, t, c, now)
        })
    }

    /// Leases the next due job for worker `w` (there must be one).
    fn lease_job(&self, w: &str) -> (JobRow, Effects) {
        let now = self.now();
        let (j, fx) = self.tx(|tx| job::lease(tx, &self.cfg, w, &[], now));
        (j.expect("a job to lease"), fx)
    }

    fn complete_job(&self, j: &JobRow, follow_ups: &[FollowUp]) -> Effects {
        let now = self.now();
        self.tx(|tx| {
            let j = job::leased(tx, &j.job_id, j.lease_id.as_deref().unwrap_or_default())?;
            job::complete(tx, &self.cfg, j, Vec::new(), follow_ups, now)
        })
    }

    fn fail_job(&self, j: &JobRow, reason: &str, retryable: bool) -> Effects {
        let now = self.now();
        self.tx(|tx| {
            let j = job::leased(tx, &j.job_id, j.lease_id.as_deref().unwrap_or_default())?;
            job::retry_or_fail(tx, &self.cfg, j, reason, retryable, now)
        })
    }
}

fn agent(name: &str) -> AgentRow {
    AgentRow {
        name: name.into(),
        labels: BTreeMap::new(),
        hostname: format!("{name}.example"),
        cores: 4,
        memory_bytes: 1 << 30,
        address: String::new(),
        version: "test".into(),
        slots: 1,
        catalog: vec![BenchmarkInfo {
            name: "b".into(),
            kind: "noop".into(),
            description: String::new(),
            params: Vec::new(),
            outputs: Vec::new(),
            timeout_s: 60,
            max_timeout_s: 0,
            launchers: vec![LauncherKind::Local],
            run_as: None,
        }],
        state: AgentState::Online,
        drain: false,
        registered_ms: T0,
        last_heartbeat_ms: T0,
        credential: String::new(),
        refused: Vec::new(),
    }
}

fn spec() -> Spec {
    Spec {
        benchmark: "b".into(),
        params: BTreeMap::new(),
        nodes: Nodes::default(),
        launcher: LauncherKind::Local,
        max_attempts: 3,
        timeout_s: 60,
        slurm: Default::default(),
    }
}

fn ok(outputs: Vec<RawFileRow>) -> task::Completion {
    task::Completion {
        success: true,
        exit_code: 0,
        outputs,
        stdout_tail: "done".into(),
        ..Default::default()
    }
}

fn counts_output(t: &TaskRow) -> RawFileRow {
    RawFileRow {
        key: format!("raw/{}/{}/counts.txt", t.run_id, t.task_id),
        bytes: 10,
        sha256: "00".into(),
        format: "counts".into(),
        bundle: None,
    }
}

fn runs(fx: &Effects) -> Vec<&str> {
    fx.runs_changed.iter().map(String::as_str).collect()
}

fn lease_lost<T: std::fmt::Debug>(r: crate::Result<T>) -> String {
    match r {
        Err(CoordError::LeaseLost(m)) => m,
        other => panic!("expected LeaseLost, got {other:?}"),
    }
}

#[test]
fn run_new_is_pending_and_dated_by_its_instant() {
    let r = RunRow::new("r".into(), spec(), "noop", Origin::default(), T0 + 5);
    assert_eq!(r.state, RunState::Pending);
    assert_eq!((r.benchmark.as_str(), r.kind.as_str()), ("b", "noop"));
    assert_eq!(r.submitted_at_ms, T0 + 5);
    assert_eq!((r.started_at_ms, r.finished_at_ms), (None, None));
    assert_eq!(r.date, "2026-11-23");
    let scheduled = Origin {
        schedule_id: Some("s".into()),
        scheduled_for_ms: Some(T0 - 1),
        ..Default::default()
    };
    let r = RunRow::new("r".into(), spec(), "noop", scheduled, T0 + 5);
    assert_eq!(r.date, "2026-11-22", "the day of the cron instant");
    assert_eq!(r.schedule_id.as_deref(), Some("s"));
}

#[test]
fn a_run_goes_from_pending_to_succeeded_through_its_tasks_and_jobs() {
    let w = World::new();
    let (r, fx) = w.submit(&["a1", "a2"]);
    assert_eq!(r.state, RunState::Pending);
    assert_eq!(runs(&fx), [r.run_id.as_str()]);
    assert!(!fx.wake_workers, "no job yet");
    let tasks = w.tasks(&r.run_id);
    assert_eq!(tasks.len(), 2, "one task per agent (local)");
    for (i, t) in tasks.iter().enumerate() {
        assert_eq!(
            (t.state, t.attempt, t.rank, t.num_tasks),
            (TaskState::Queued, 1, i as u32, 2)
        );
        assert_eq!(t.peers, ["a1", "a2"]);
        assert_eq!(t.not_before_ms, T0);
    }

    // QUEUED → LEASED; the run is RUNNING.
    w.clock.advance(100);
    let (t1, fx) = w.lease_task("a1");
    assert_eq!(t1.state, TaskState::Leased);
    assert!(t1.lease_id.is_some());
    assert_eq!(t1.lease_expires_ms, Some(T0 + 100 + LEASE));
    assert_eq!(runs(&fx), [r.run_id.as_str()]);
    let run = w.run(&r.run_id);
    assert_eq!(
        (run.state, run.started_at_ms),
        (RunState::Running, Some(T0 + 100))
    );
    let (none, fx) = w.tx(|tx| task::lease(tx, &w.cfg, "a1", T0 + 100));
    assert!(none.is_none() && fx.is_empty(), "a1 has no other task");

    // LEASED → RUNNING on the first progress report; the lease is renewed.
    w.clock.advance(1_000);
    let fx = w.tx(|tx| {
        let t = task::leased(tx, &t1.task_id, t1.lease_id.as_deref().unwrap())?;
        task::progress(tx, &w.cfg, t, "out", "err", T0 + 1_100)
    });
    assert_eq!(runs(&fx), [r.run_id.as_str()]);
    let t = w.task(&t1.task_id);
    assert_eq!(t.state, TaskState::Running);
    assert_eq!(t.started_at_ms, Some(T0 + 1_100));
    assert_eq!(t.lease_expires_ms, Some(T0 + 1_100 + LEASE));
    assert_eq!(
        (t.stdout_tail.as_str(), t.stderr_tail.as_str()),
        ("out", "err")
    );

    // RUNNING → DONE with an output to ingest; the run waits for a2.
    let fx = w.complete_task(&t, ok(vec![counts_output(&t)]));
    assert_eq!(runs(&fx), [r.run_id.as_str()]);
    assert!(!fx.wake_workers, "no job until every task has ended");
    let t = w.task(&t1.task_id);
    assert_eq!(
        (t.state, t.exit_code, t.error.clone()),
        (TaskState::Done, Some(0), None)
    );
    assert_eq!((t.lease_id.clone(), t.lease_expires_ms), (None, None));
    assert_eq!(t.finished_at_ms, Some(T0 + 1_100));
    assert_eq!(w.run(&r.run_id).state, RunState::Running);

    // LEASED → DONE without a progress report: started = finished.
    let (t2, _) = w.lease_task("a2");
    let fx = w.complete_task(&t2, ok(Vec::new()));
    assert!(fx.wake_workers, "the ingest job is queued");
    let t2 = w.task(&t2.task_id);
    assert_eq!(t2.started_at_ms, t2.finished_at_ms);
    let run = w.run(&r.run_id);
    assert_eq!(run.state, RunState::Processing);
    assert_eq!(run.outcome, None);
    let jobs = w.jobs(&r.run_id);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        (jobs[0].kind.as_str(), jobs[0].state),
        (INGEST_JOB, JobState::Queued)
    );

    // The ingest job: QUEUED → LEASED → DONE; the outcome is decided and the
    // record job queued.
    let (j, fx) = w.lease_job("w1");
    assert_eq!(j.state, JobState::Leased);
    assert_eq!(j.leased_by.as_deref(), Some("w1"));
    assert_eq!(j.lease_expires_ms, Some(w.now() + JOB_LEASE));
    assert_eq!(fx.worker_jobs, [("w1".to_string(), 1)]);
    assert_eq!(runs(&fx), [r.run_id.as_str()]);
    w.clock.advance(500);
    let fx = w.complete_job(&j, &[]);
    assert_eq!(fx.worker_jobs, [("w1".to_string(), -1)]);
    assert!(fx.wake_workers, "the record job is queued");
    assert_eq!(w.job(&j.job_id).state, JobState::Done);
    let run = w.run(&r.run_id);
    assert_eq!(
        (run.state, run.outcome, run.finished_at_ms),
        (
            RunState::Processing,
            Some(RunState::Succeeded),
            Some(w.now())
        )
    );

    // The record lands: the run takes its outcome.
    let (rec, _) = w.lease_job("w1");
    assert_eq!(rec.kind, RECORD_JOB);
    let fx = w.complete_job(&rec, &[]);
    assert_eq!(runs(&fx), [r.run_id.as_str()]);
    let run = w.run(&r.run_id);
    assert_eq!(
        (run.state, run.outcome, run.error),
        (RunState::Succeeded, None, None)
    );

    // Final: moving it on again changes nothing.
    let fx = w.tx(|tx| run::advance(tx, &w.cfg, &r.run_id, w.now()));
    assert!(fx.is_empty(), "{fx:?}");
}

#[test]
fn a_failed_benchmark_fails_the_task_at_once_and_the_run() {
    let w = World::new();
    let (r, _) = w.submit(&["a1"]);
    let (t, _) = w.lease_task("a1");
    let fx = w.complete_task(
        &t,
        task::Completion {
            success: false,
            exit_code: 3,
            ..Default::default()
        },
    );
    assert!(fx.wake_workers, "the record job is queued");
    let t = w.task(&t.task_id);
    assert_eq!((t.state, t.attempt), (TaskState::Failed, 1), "not retried");
    assert_eq!(t.error.as_deref(), Some("exit code 3"));
    let run = w.run(&r.run_id);
    assert_eq!(run.outcome, Some(RunState::Failed));
    assert!(
        run.error
            .as_deref()
            .unwrap()
            .contains("failed: exit code 3"),
        "{run:?}"
    );
    let (rec, _) = w.lease_job("w");
    let _ = w.complete_job(&rec, &[]);
    assert_eq!(w.run(&r.run_id).state, RunState::Failed);
}

#[test]
fn illegal_task_transitions_are_refused_and_change_nothing() {
    let w = World::new();
    let (r, _) = w.submit(&["a1"]);
    let queued = w.tasks(&r.run_id).remove(0);
    let now = w.now();
    // A QUEUED task has no lease: no progress, completion or ended attempt.
    let m = lease_lost(w.try_tx(|tx| task::progress(tx, &w.cfg, queued.clone(), "", "", now)));
    assert!(m.contains("is QUEUED"), "{m}");
    lease_lost(w.try_tx(|tx| task::complete(tx, &w.cfg, queued.clone(), ok(vec![]), now)));
    lease_lost(w.try_tx(|tx| task::retry_or_fail(tx, &w.cfg, queued.clone(), "x", false, now)));
    assert_eq!(w.task(&queued.task_id), queued);

    // A lease that is not the task's is refused.
    let (t, _) = w.lease_task("a1");
    lease_lost(w.try_tx(|tx| task::leased(tx, &t.task_id, "not-the-lease")));
    assert!(matches!(
        w.try_tx(|tx| task::leased(tx, "no-such-task", "x")),
        Err(CoordError::NotFound(_))
    ));

    // A DONE task is final: nothing moves it.
    let _ = w.complete_task(&t, ok(vec![]));
    let done = w.task(&t.task_id);
    lease_lost(w.try_tx(|tx| task::leased(tx, &t.task_id, t.lease_id.as_deref().unwrap())));
    lease_lost(w.try_tx(|tx| task::progress(tx, &w.cfg, done.clone(), "", "", now)));
    lease_lost(w.try_tx(|tx| task::complete(tx, &w.cfg, done.clone(), ok(vec![]), now)));
    lease_lost(w.try_tx(|tx| task::retry_or_fail(tx, &w.cfg, done.clone(), "x", true, now)));
    assert!(!w.tx(|tx| task::heartbeat(tx, &w.cfg, "a1", &done.task_id, now)));
    assert_eq!(w.task(&t.task_id), done);
}

#[test]
fn an_expired_lease_requeues_the_task_with_backoff_until_attempts_run_out() {
    let w = World::new();
    let (r, _) = w.submit(&["a1"]);
    let silent: HashMap<String, i64> = [("a1".to_string(), T0)].into();
    let running = HashMap::new();
    let live = task::Liveness {
        heartbeats: &silent,
        running: &running,
    };
    for attempt in 1..=3u32 {
        let (t, _) = w.lease_task("a1");
        assert_eq!(t.attempt, attempt);
        let leased_at = w.now();
        // Not expired yet.
        w.clock.set(leased_at + LEASE);
        let (n, fx) = w.tx(|tx| task::expire_leases(tx, &w.cfg, live, leased_at + LEASE));
        assert_eq!((n, fx.is_empty()), (0, true));
        w.clock.set(leased_at + LEASE + 1);
        let now = w.now();
        let (n, fx) = w.tx(|tx| task::expire_leases(tx, &w.cfg, live, now));
        assert_eq!(n, 1);
        assert_eq!(runs(&fx), [r.run_id.as_str()]);
        let t = w.task(&t.task_id);
        assert_eq!((t.lease_id.clone(), t.lease_expires_ms), (None, None));
        if attempt < 3 {
            assert_eq!((t.state, t.attempt), (TaskState::Queued, attempt + 1));
            assert_eq!(t.not_before_ms, now + backoff_ms(&w.cfg, attempt));
            assert_eq!(
                t.error.as_deref(),
                Some(
                    format!(
                        "attempt {attempt} ended: lease expired: agent 'a1' stopped heartbeating"
                    )
                    .as_str()
                )
            );
            // Not leased before its backoff ends.
            let (none, _) = w.tx(|tx| task::lease(tx, &w.cfg, "a1", now));
            assert!(none.is_none());
            w.clock.set(t.not_before_ms);
        } else {
            assert_eq!((t.state, t.finished_at_ms), (TaskState::Failed, Some(now)));
            assert!(
                t.error
                    .as_deref()
                    .unwrap()
                    .ends_with("(after 3 attempt(s))"),
                "{t:?}"
            );
            assert!(fx.wake_workers, "the run's record job is queued");
        }
    }
    let run = w.run(&r.run_id);
    assert_eq!(
        (run.state, run.outcome),
        (RunState::Processing, Some(RunState::Failed))
    );
}

#[test]
fn a_heartbeating_agent_keeps_its_lease_and_a_lost_reply_ends_the_attempt() {
    let w = World::new();
    let (_, _) = w.submit(&["a1"]);
    let (t, _) = w.lease_task("a1");
    let expiry = T0 + LEASE + 1;
    // a1 heartbeats (at expiry - 100) listing the task: the lease follows the
    // heartbeat.
    let hb: HashMap<String, i64> = [("a1".to_string(), expiry - 100)].into();
    let listing: HashMap<String, (i64, HashSet<String>)> =
        [("a1".to_string(), (expiry - 100, [t.task_id.clone()].into()))].into();
    let live = task::Liveness {
        heartbeats: &hb,
        running: &listing,
    };
    let (n, fx) = w.tx(|tx| task::expire_leases(tx, &w.cfg, live, expiry));
    assert_eq!(n, 0);
    assert!(fx.is_empty());
    let kept = w.task(&t.task_id);
    assert_eq!((kept.state, kept.attempt), (TaskState::Leased, 1));
    assert_eq!(kept.lease_expires_ms, Some(expiry - 100 + LEASE));

    // A heartbeat a heartbeat period after the grant that does not list the
    // task: a1 never got it.
    let expiry = expiry - 100 + LEASE + 1;
    let hb: HashMap<String, i64> = [("a1".to_string(), expiry - 50)].into();
    let empty: HashMap<String, (i64, HashSet<String>)> =
        [("a1".to_string(), (expiry - 50, HashSet::new()))].into();
    let live = task::Liveness {
        heartbeats: &hb,
        running: &empty,
    };
    let (n, _) = w.tx(|tx| task::expire_leases(tx, &w.cfg, live, expiry));
    assert_eq!(n, 1);
    let t = w.task(&t.task_id);
    assert_eq!(
        (t.state, t.attempt, t.agent.as_str()),
        (TaskState::Queued, 2, "a1")
    );
    assert!(
        t.error
            .as_deref()
            .unwrap()
            .contains("its lease reply was lost"),
        "{t:?}"
    );
}

#[test]
fn a_task_of_a_lost_agent_is_retried_on_another_eligible_agent() {
    let w = World::new();
    let (r, _) = w.submit(&["a1", "a2"]);
    let (t, _) = w.lease_task("a1");
    // a1 has been silent for longer than agent_lost_after_ms.
    let now = T0 + 31_000;
    w.clock.set(now);
    let hb: HashMap<String, i64> = [("a1".to_string(), T0)].into();
    let running = HashMap::new();
    let live = task::Liveness {
        heartbeats: &hb,
        running: &running,
    };
    let (n, _) = w.tx(|tx| task::expire_leases(tx, &w.cfg, live, now));
    assert_eq!(n, 1);
    let moved = w.task(&t.task_id);
    // a2 runs the run's other task: a3 is the free eligible agent.
    assert_eq!(
        (moved.state, moved.agent.as_str()),
        (TaskState::Queued, "a3")
    );
    assert_eq!(moved.peers, ["a3", "a2"]);
    assert_eq!(w.tasks(&r.run_id).len(), 2);
}

#[test]
fn heartbeats_renew_a_lease_only_when_half_of_it_is_used() {
    let w = World::new();
    let _ = w.submit(&["a1"]);
    let (t, _) = w.lease_task("a1");
    let granted = t.lease_expires_ms.unwrap();
    // Less than half used: no write.
    assert!(w.tx(|tx| task::heartbeat(tx, &w.cfg, "a1", &t.task_id, T0 + LEASE / 2)));
    assert_eq!(w.task(&t.task_id).lease_expires_ms, Some(granted));
    // More than half used: renewed from the heartbeat.
    let at = T0 + LEASE / 2 + 1;
    assert!(task::lease_half_used(&w.cfg, Some(granted), at));
    assert!(w.tx(|tx| task::heartbeat(tx, &w.cfg, "a1", &t.task_id, at)));
    assert_eq!(w.task(&t.task_id).lease_expires_ms, Some(at + LEASE));
    // Another agent's task, or an unknown one: the agent is told to stop it.
    assert!(!w.tx(|tx| task::heartbeat(tx, &w.cfg, "a2", &t.task_id, at)));
    assert!(!w.tx(|tx| task::heartbeat(tx, &w.cfg, "a1", "unknown", at)));
}

#[test]
fn a_restarted_agent_loses_the_attempts_of_its_earlier_incarnation() {
    let w = World::new();
    let (r, _) = w.submit(&["a1"]);
    let (t, _) = w.lease_task("a1");
    w.clock.advance(2_000);
    let now = w.now();
    let fx = w.tx(|tx| task::agent_restarted(tx, &w.cfg, "a1", now));
    assert_eq!(runs(&fx), [r.run_id.as_str()]);
    let t = w.task(&t.task_id);
    assert_eq!(
        (t.state, t.attempt, t.lease_id.clone()),
        (TaskState::Queued, 2, None)
    );
    assert_eq!(t.not_before_ms, now + backoff_ms(&w.cfg, 1));
    assert_eq!(
        t.error.as_deref(),
        Some("attempt 1 ended: agent 'a1' restarted")
    );
    // Nothing held by a2: no effect.
    let fx = w.tx(|tx| task::agent_restarted(tx, &w.cfg, "a2", now));
    assert!(fx.is_empty());
}

#[test]
fn a_restarted_agent_keeps_the_slurm_jobs_it_still_holds_under_their_lease() {
    let w = World::new();
    let (r1, _) = w.submit(&["a1"]);
    let (t1, _) = w.lease_task("a1");
    let (_r2, _) = w.submit(&["a1"]);
    let (t2, _) = w.lease_task("a1");
    let (_r3, _) = w.submit(&["a1"]);
    let (t3, _) = w.lease_task("a1");
    // t1's Slurm job is pending: the report keeps it LEASED with Slurm's words.
    let p = task::Progress {
        pending: true,
        report: TaskReport {
            message: "Slurm job 7 PENDING (Resources)".into(),
            slurm_job_id: "7".into(),
            slurm_nodes: String::new(),
        },
        ..Default::default()
    };
    let now = w.now();
    let _ = w.tx(|tx| {
        let t = task::leased(tx, &t1.task_id, t1.lease_id.as_deref().unwrap())?;
        task::progress_with(tx, &w.cfg, t, &p, now)
    });
    let t = w.task(&t1.task_id);
    assert_eq!((t.state, t.started_at_ms), (TaskState::Leased, None));
    assert_eq!(t.report.message, "Slurm job 7 PENDING (Resources)");
    assert_eq!(t.report.slurm_job_id, "7");
    w.clock.advance(2_000);
    let now = w.now();
    // The agent comes back naming t1 (right lease) and t2 (a stale lease);
    // t3 it does not name.
    let held = vec![
        (t1.task_id.clone(), t1.lease_id.clone().unwrap()),
        (t2.task_id.clone(), "not-the-lease".to_string()),
    ];
    let (_, kept) = w.tx(|tx| task::agent_restarted_keeping(tx, &w.cfg, "a1", &held, now));
    assert_eq!(kept, std::slice::from_ref(&t1.task_id));
    let t = w.task(&t1.task_id);
    assert_eq!(
        (t.state, t.attempt, t.lease_id.clone(), t.lease_expires_ms),
        (TaskState::Leased, 1, t1.lease_id.clone(), Some(now + LEASE)),
        "kept under the same lease, renewed"
    );
    for id in [&t2.task_id, &t3.task_id] {
        let t = w.task(id);
        assert_eq!((t.state, t.attempt), (TaskState::Queued, 2), "{id}");
    }
    // It completes under its lease with the job's nodes.
    let t = w.task(&t1.task_id);
    let _ = w.complete_task(
        &t,
        task::Completion {
            slurm_job_id: "7".into(),
            slurm_nodes: "n[1-3]".into(),
            ..ok(Vec::new())
        },
    );
    let t = w.task(&t1.task_id);
    assert_eq!(t.state, TaskState::Done);
    assert_eq!(
        (
            t.report.slurm_job_id.as_str(),
            t.report.slurm_nodes.as_str()
        ),
        ("7", "n[1-3]")
    );
    assert_eq!(w.run(&r1.run_id).state, RunState::Processing);
}

/// A run whose only task is done (no outputs): PROCESSING with its record
/// job queued. Returns the run id.
fn processing_run(w: &World) -> String {
    let (r, _) = w.submit(&["a1"]);
    let (t, _) = w.lease_task("a1");
    let _ = w.complete_task(&t, ok(Vec::new()));
    r.run_id
}

/// A queued `noop` job of run `run_id`.
fn queue_job(w: &World, run_id: &str) -> JobRow {
    let run = w.run(run_id);
    let now = w.now();
    let j = job::new(&run, "noop", "{}".into(), &w.cfg, now);
    let mut fx = Effects::default();
    w.tx(|tx| job::insert(tx, &j, &mut fx));
    assert!(fx.wake_workers);
    assert_eq!(runs(&fx), [run_id]);
    j
}

#[test]
fn a_failed_job_is_retried_with_backoff_then_fails_and_fails_the_run() {
    let w = World::new();
    let (r, _) = w.submit(&["a1"]);
    let t = w.lease_task("a1").0;
    let _ = w.complete_task(&t, ok(vec![counts_output(&t)]));
    for attempt in 1..=3u32 {
        let (j, _) = w.lease_job("w1");
        assert_eq!((j.kind.as_str(), j.attempt), (INGEST_JOB, attempt));
        let now = w.now();
        let fx = w.fail_job(&j, "lake unreachable", true);
        assert_eq!(fx.worker_jobs, [("w1".to_string(), -1)]);
        let j = w.job(&j.job_id);
        assert_eq!((j.lease_id.clone(), j.leased_by.clone()), (None, None));
        if attempt < 3 {
            assert!(fx.wake_workers);
            assert_eq!((j.state, j.attempt), (JobState::Queued, attempt + 1));
            assert_eq!(j.not_before_ms, now + backoff_ms(&w.cfg, attempt));
            assert_eq!(
                j.error.as_deref(),
                Some(format!("attempt {attempt} ended: lake unreachable").as_str())
            );
            w.clock.set(j.not_before_ms);
        } else {
            assert_eq!(j.state, JobState::Failed);
            assert_eq!(
                j.error.as_deref(),
                Some("lake unreachable (after 3 attempt(s))")
            );
            assert!(fx.wake_workers, "the record job is queued");
        }
    }
    let run = w.run(&r.run_id);
    assert_eq!(run.outcome, Some(RunState::Failed));
    assert!(
        run.error.as_deref().unwrap().contains("ingest job"),
        "{run:?}"
    );
}

#[test]
fn a_non_retryable_job_failure_fails_at_once_and_an_expired_job_lease_is_retried() {
    let w = World::new();
    let run_id = processing_run(&w);
    // A millisecond apart: the queue is ordered by creation time.
    w.clock.advance(1);
    let a = queue_job(&w, &run_id);
    w.clock.advance(1);
    let b = queue_job(&w, &run_id);
    // The record job came first; lease it out of the way.
    let (rec, _) = w.lease_job("w0");
    assert_eq!(rec.kind, RECORD_JOB);
    let (ja, _) = w.lease_job("w1");
    let (jb, _) = w.lease_job("w2");
    assert_eq!(
        (ja.job_id.as_str(), jb.job_id.as_str()),
        (a.job_id.as_str(), b.job_id.as_str())
    );
    let _ = w.fail_job(&ja, "bad input at byte 3", false);
    let ja = w.job(&ja.job_id);
    assert_eq!((ja.state, ja.attempt), (JobState::Failed, 1));
    assert_eq!(ja.error.as_deref(), Some("bad input at byte 3"));

    // jb's worker stops renewing.
    w.clock.advance(JOB_LEASE + 1);
    let now = w.now();
    let (n, fx) = w.tx(|tx| job::expire_leases(tx, &w.cfg, now));
    assert_eq!(n, 2, "jb and the record job");
    assert!(fx.wake_workers);
    let mut held: Vec<_> = fx.worker_jobs.clone();
    held.sort();
    assert_eq!(held, [("w0".to_string(), -1), ("w2".to_string(), -1)]);
    let jb = w.job(&jb.job_id);
    assert_eq!((jb.state, jb.attempt), (JobState::Queued, 2));
    assert_eq!(
        jb.error.as_deref(),
        Some("attempt 1 ended: lease expired: worker 'w2' stopped renewing")
    );
}

#[test]
fn illegal_job_transitions_are_refused_and_change_nothing() {
    let w = World::new();
    let run_id = processing_run(&w);
    let queued = w.jobs(&run_id).remove(0);
    let now = w.now();
    lease_lost(w.try_tx(|tx| job::complete(tx, &w.cfg, queued.clone(), vec![], &[], now)));
    lease_lost(w.try_tx(|tx| job::renew(tx, &w.cfg, queued.clone(), now)));
    lease_lost(w.try_tx(|tx| job::retry_or_fail(tx, &w.cfg, queued.clone(), "x", true, now)));
    lease_lost(w.try_tx(|tx| job::record_intent(tx, &mut queued.clone(), vec!["k".into()])));
    assert_eq!(w.job(&queued.job_id), queued);

    let (j, _) = w.lease_job("w1");
    lease_lost(w.try_tx(|tx| job::leased(tx, &j.job_id, "not-the-lease")));
    // The commit's intent is kept on the leased job, which stays LEASED.
    let keys = vec!["tables/t/date=2026-11-23/run_id=r/part-j.parquet".to_string()];
    w.tx(|tx| job::record_intent(tx, &mut j.clone(), keys.clone()));
    let held = w.job(&j.job_id);
    assert_eq!(
        (held.state, held.committed_keys.clone()),
        (JobState::Leased, keys)
    );
    // Renewing a held lease moves its end.
    w.clock.advance(1_000);
    let now = w.now();
    w.tx(|tx| {
        let j = job::leased(tx, &j.job_id, j.lease_id.as_deref().unwrap())?;
        job::renew(tx, &w.cfg, j, now)
    });
    assert_eq!(w.job(&j.job_id).lease_expires_ms, Some(now + JOB_LEASE));
    let _ = w.complete_job(&j, &[]);
    let done = w.job(&j.job_id);
    assert_eq!(done.state, JobState::Done);
    lease_lost(w.try_tx(|tx| job::leased(tx, &j.job_id, j.lease_id.as_deref().unwrap())));
    lease_lost(w.try_tx(|tx| job::complete(tx, &w.cfg, done.clone(), vec![], &[], now)));
    lease_lost(w.try_tx(|tx| job::retry_or_fail(tx, &w.cfg, done.clone(), "x", false, now)));
    assert_eq!(w.job(&j.job_id), done);
}

fn follow_up(group: Option<&str>, wait_for: Option<&str>) -> FollowUp {
    FollowUp {
        kind: "part".into(),
        spec: serde_json::json!({}),
        group: group.map(str::to_string),
        wait_for: wait_for.map(str::to_string),
    }
}

#[test]
fn a_job_waiting_for_a_group_is_parked_until_the_group_has_ended() {
    let w = World::new();
    let run_id = processing_run(&w);
    let _ = w.lease_job("w0");
    let _ = queue_job(&w, &run_id);
    let (plan, _) = w.lease_job("w1");
    let fx = w.complete_job(
        &plan,
        &[
            follow_up(Some("parts"), None),
            follow_up(Some("parts"), None),
            follow_up(None, Some("parts")),
        ],
    );
    assert!(fx.wake_workers);
    let jobs = w.jobs(&run_id);
    let waiting = jobs
        .iter()
        .find(|j| j.not_before_ms == PARKED)
        .unwrap()
        .clone();
    assert_eq!(waiting.state, JobState::Queued);
    let (p1, _) = w.lease_job("w1");
    let (p2, _) = w.lease_job("w2");
    assert_ne!(p1.job_id, waiting.job_id);
    assert_ne!(p2.job_id, waiting.job_id);
    let none = w
        .tx(|tx| job::lease(tx, &w.cfg, "w3", &[], T0 + 1_000_000))
        .0;
    assert!(none.is_none(), "the parked job is not leased");
    let _ = w.complete_job(&p1, &[]);
    assert_eq!(
        w.job(&waiting.job_id).not_before_ms,
        PARKED,
        "p2 still runs"
    );
    w.clock.advance(10);
    let fx = w.complete_job(&p2, &[]);
    assert!(fx.wake_workers);
    assert_eq!(w.job(&waiting.job_id).not_before_ms, w.now(), "released");
}

#[test]
fn a_job_waiting_for_a_group_with_a_failed_job_fails_naming_it() {
    let w = World::new();
    let run_id = processing_run(&w);
    let _ = w.lease_job("w0");
    let _ = queue_job(&w, &run_id);
    let (plan, _) = w.lease_job("w1");
    let _ = w.complete_job(
        &plan,
        &[
            follow_up(Some("parts"), None),
            follow_up(None, Some("parts")),
        ],
    );
    let (part, _) = w.lease_job("w1");
    let _ = w.fail_job(&part, "corrupt count file", false);
    let waiting = w
        .jobs(&run_id)
        .into_iter()
        .find(|j| j.error.as_deref().is_some_and(|e| e.starts_with("not run")))
        .expect("the waiting job failed");
    assert_eq!(waiting.state, JobState::Failed);
    assert!(
        waiting.error.as_deref().unwrap().contains(&format!(
            "job group 'parts', whose part job {} failed: corrupt count file",
            part.job_id
        )),
        "{waiting:?}"
    );
    assert!(job::check_group_name("g", "parts.1_a-b").is_ok());
    assert!(matches!(
        job::check_group_name("g", "a/b"),
        Err(CoordError::Invalid(_))
    ));
}

#[test]
fn cancelling_a_run_ends_its_tasks_and_jobs_and_records_it() {
    let w = World::new();
    let (r, _) = w.submit(&["a1", "a2"]);
    let (t1, _) = w.lease_task("a1");
    w.clock.advance(100);
    let now = w.now();
    let (run, fx) = w.tx(|tx| run::cancel(tx, &w.cfg, &r.run_id, "operator", now));
    assert_eq!(runs(&fx), [r.run_id.as_str()]);
    assert!(fx.wake_workers, "the record job is queued");
    assert_eq!(
        (run.state, run.outcome, run.finished_at_ms),
        (RunState::Cancelled, Some(RunState::Cancelled), Some(now))
    );
    assert_eq!(run.error.as_deref(), Some("cancelled: operator"));
    for t in w.tasks(&r.run_id) {
        assert_eq!(
            (t.state, t.finished_at_ms),
            (TaskState::Cancelled, Some(now))
        );
        assert_eq!(t.error.as_deref(), Some("cancelled: operator"));
    }
    // The agent holding t1 learns it: its lease is no longer valid.
    lease_lost(w.try_tx(|tx| task::leased(tx, &t1.task_id, t1.lease_id.as_deref().unwrap())));
    let jobs = w.jobs(&r.run_id);
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        (jobs[0].kind.as_str(), jobs[0].state),
        (RECORD_JOB, JobState::Queued)
    );
    let (rec, _) = w.lease_job("w");
    let _ = w.complete_job(&rec, &[]);
    let run = w.run(&r.run_id);
    assert_eq!((run.state, run.outcome), (RunState::Cancelled, None));
    // Cancelling a final run changes nothing.
    let (again, _) = w.tx(|tx| run::cancel(tx, &w.cfg, &r.run_id, "twice", now + 1));
    assert_eq!(again, run);
    assert!(matches!(
        w.try_tx(|tx| run::cancel(tx, &w.cfg, "nope", "", now)),
        Err(CoordError::NotFound(_))
    ));
}

#[test]
fn an_unplaced_scheduled_run_fails_through_its_record() {
    let w = World::new();
    let origin = Origin {
        schedule_id: Some("s1".into()),
        scheduled_for_ms: Some(T0),
        ..Default::default()
    };
    let now = w.now();
    let (run, fx) = w.tx(|tx| {
        run::create_unplaced(
            tx,
            &w.cfg,
            spec(),
            "noop".into(),
            origin,
            "no agent".into(),
            now,
        )
    });
    assert!(fx.wake_workers);
    assert_eq!(run.state, RunState::Processing);
    assert_eq!(run.outcome, Some(RunState::Failed));
    assert!(w.tasks(&run.run_id).is_empty());
    let (rec, _) = w.lease_job("w");
    let _ = w.complete_job(&rec, &[]);
    let run = w.run(&run.run_id);
    assert_eq!(
        (run.state, run.error.as_deref()),
        (RunState::Failed, Some("no agent"))
    );
}

#[test]
fn a_processing_run_is_created_with_its_jobs() {
    let w = World::new();
    let now = w.now();
    let id = ids::new_id_at(now);
    let (run, jobs, fx) = w.tx(|tx| {
        run::create_processing(
            tx,
            &w.cfg,
            id.clone(),
            "replay-x".into(),
            "replay",
            BTreeMap::from([("points".to_string(), "2".to_string())]),
            vec![
                ("replay".into(), "{}".into()),
                ("replay".into(), "{}".into()),
            ],
            None,
            now,
        )
    });
    assert_eq!(runs(&fx), [id.as_str()]);
    assert!(fx.wake_workers);
    assert_eq!(run.run_id, id);
    assert_eq!(
        (run.state, run.started_at_ms),
        (RunState::Processing, Some(now))
    );
    assert_eq!(
        (run.benchmark.as_str(), run.kind.as_str()),
        ("replay-x", "replay")
    );
    assert_eq!(w.run(&id), run);
    assert_eq!(jobs.len(), 2);
    assert_eq!(w.jobs(&id).len(), 2);
    for _ in &jobs {
        let (j, _) = w.lease_job("w");
        let _ = w.complete_job(&j, &[]);
    }
    assert_eq!(w.run(&id).outcome, Some(RunState::Succeeded));
}

#[test]
fn rerun_failed_runs_exactly_the_failed_tasks_again() {
    let w = World::new();
    let origin = Origin {
        scheduled_for_ms: Some(T0 - 1),
        schedule_id: Some("s".into()),
        ..Default::default()
    };
    let now = w.now();
    let (r, _) = w.tx(|tx| {
        run::create(
            tx,
            &w.cfg,
            spec(),
            "noop".into(),
            origin,
            vec!["a1".into(), "a2".into()],
            now,
        )
    });
    // Not final yet: refused.
    assert!(matches!(
        w.try_tx(|tx| run::rerun_failed(tx, &w.cfg, &r.run_id, now)),
        Err(CoordError::FailedPrecondition(_))
    ));
    let (t1, _) = w.lease_task("a1");
    let (t2, _) = w.lease_task("a2");
    let _ = w.complete_task(&t1, ok(vec![]));
    let _ = w.complete_task(
        &t2,
        task::Completion {
            success: false,
            exit_code: 1,
            error: "timed out".into(),
            ..Default::default()
        },
    );
    let (rec, _) = w.lease_job("w");
    let _ = w.complete_job(&rec, &[]);
    assert_eq!(w.run(&r.run_id).state, RunState::Failed);
    w.clock.advance(1_000);
    let now = w.now();
    let (new, fx) = w.tx(|tx| run::rerun_failed(tx, &w.cfg, &r.run_id, now));
    assert_eq!(runs(&fx), [new.run_id.as_str()]);
    assert_eq!(new.rerun_of.as_deref(), Some(r.run_id.as_str()));
    assert_eq!((new.state, new.submitted_at_ms), (RunState::Pending, now));
    assert_eq!(
        (new.schedule_id.clone(), new.date.as_str()),
        (Some("s".into()), "2026-11-22")
    );
    let tasks = w.tasks(&new.run_id);
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        (tasks[0].agent.as_str(), tasks[0].rank, tasks[0].num_tasks),
        ("a2", 1, 2)
    );
    assert_eq!((tasks[0].state, tasks[0].attempt), (TaskState::Queued, 1));
    assert_eq!(tasks[0].peers, ["a1", "a2"]);
}

#[test]
fn effects_merge_once_per_run_and_the_dispatcher_applies_them() {
    let mut a = Effects::default();
    a.run_changed("r1");
    a.run_changed("r2");
    a.run_changed("r1");
    let mut b = Effects::default();
    b.run_changed("r2");
    b.run_changed("r3");
    b.jobs_queued();
    b.worker_jobs(Some("w"), 1);
    b.worker_jobs(None, 1);
    a.merge(b);
    assert_eq!(a.runs_changed, ["r1", "r2", "r3"]);
    assert!(a.wake_workers);
    assert_eq!(a.worker_jobs, [("w".to_string(), 1)]);
    assert!(Effects::default().is_empty());
    assert!(!Effects::wake_workers().is_empty());

    let w = World::new();
    let mut rx = w.c.events.subscribe();
    w.c.apply(a);
    let mut got = Vec::new();
    while let Ok(r) = rx.try_recv() {
        got.push(r);
    }
    assert_eq!(got, ["r1", "r2", "r3"]);
    let workers = w.c.workers.lock().unwrap().clone();
    assert_eq!(workers["w"].leased_jobs, 1);
    assert_eq!(workers["w"].last_seen_ms, T0);
}

// The record job's retries (docs/architecture.md, "Record jobs retry until
// they succeed").

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

fn record(w: &World, run_id: &str) -> JobRow {
    w.tx(|tx| tx.job_of_kind(run_id, RECORD_JOB)).unwrap()
}

#[test]
fn a_record_job_retries_past_max_attempts_until_it_lands() {
    let w = World::new();
    let id = processing_run(&w);
    assert_eq!(w.run(&id).outcome, Some(RunState::Succeeded));
    // The lake is full: the record fails retryably 8 times (max_attempts 3),
    // and once its lease expires on a killed worker.
    for attempt in 1..=8u32 {
        let now = w.now();
        let (j, _) = w.lease_job("w");
        assert_eq!((j.kind.as_str(), j.attempt), (RECORD_JOB, attempt));
        let _ = w.fail_job(&j, "lake: no space left on device", true);
        let j = record(&w, &id);
        assert_eq!(j.state, JobState::Queued, "attempt {attempt}: {j:?}");
        assert_eq!(j.attempt, attempt + 1);
        assert_eq!(j.not_before_ms, now + record_backoff_ms(&w.cfg, attempt));
        assert!(
            j.error.as_deref().unwrap().contains("no space left"),
            "{j:?}"
        );
        let r = w.run(&id);
        assert_eq!(
            (r.state, r.outcome),
            (RunState::Processing, Some(RunState::Succeeded))
        );
        w.clock.advance(record_backoff_ms(&w.cfg, attempt));
    }
    let (j, _) = w.lease_job("w");
    w.clock.advance(JOB_LEASE + 1);
    assert_eq!(w.c.tick().unwrap().expired_jobs, 1);
    let j2 = record(&w, &id);
    assert_eq!((j2.state, j2.attempt), (JobState::Queued, j.attempt + 1));
    assert_eq!(w.run(&id).state, RunState::Processing);

    // Space came back: the record lands and the run ends as decided.
    w.clock.advance(RECORD_RETRY_MAX_MS as i64);
    let (j, _) = w.lease_job("w");
    let _ = w.complete_job(&j, &[]);
    let r = w.run(&id);
    assert_eq!(
        (r.state, r.outcome, r.error),
        (RunState::Succeeded, None, None)
    );
    assert_eq!(w.jobs(&id).len(), 1, "one record job");
}

#[test]
fn a_non_retryable_record_failure_still_fails_the_run() {
    let w = World::new();
    let id = processing_run(&w);
    let (j, _) = w.lease_job("w");
    let _ = w.fail_job(&j, "record: bad schema", false);
    assert_eq!(record(&w, &id).state, JobState::Failed);
    let r = w.run(&id);
    assert_eq!(r.state, RunState::Failed);
    assert!(
        r.error
            .as_deref()
            .unwrap()
            .contains("run record not written: record: bad schema"),
        "{r:?}"
    );
}

fn registrant(credential: &str, last_seen_ms: Option<i64>) -> agent::Registrant<'_> {
    agent::Registrant {
        credential,
        admin: false,
        last_seen_ms,
    }
}

#[test]
fn registering_keeps_the_drain_flag_and_ends_an_earlier_incarnations_attempts() {
    let w = World::new();
    let (r, _) = w.submit(&["a1"]);
    let t = w.tasks(&r.run_id).remove(0);
    let now = w.now();
    let (leased, _) = w.tx(|tx| task::lease(tx, &w.cfg, "a1", now));
    assert_eq!(leased.unwrap().0.task_id, t.task_id);
    w.tx(|tx| agent::set_drain(tx, "a1", true));
    w.clock.advance(5_000);
    let now = w.now();
    // a1 restarts: ONLINE again, still draining, its leased attempt is over.
    let mut row = agent("a1");
    row.hostname = "new-host".into();
    row.state = AgentState::Lost;
    let (fx, drain) = w.tx(|tx| agent::register(tx, &w.cfg, row, &registrant("", None), now));
    assert!(drain);
    let a = w.tx(|tx| tx.get_agent("a1")).unwrap();
    assert_eq!(
        (
            a.state,
            a.drain,
            a.hostname.as_str(),
            a.registered_ms,
            a.last_heartbeat_ms
        ),
        (AgentState::Online, true, "new-host", now, now)
    );
    let t = w.task(&t.task_id);
    assert_eq!((t.state, t.attempt), (TaskState::Queued, 2), "{t:?}");
    assert_eq!(runs(&fx), [r.run_id.as_str()]);
    // Undrain.
    let a = w.tx(|tx| agent::set_drain(tx, "a1", false));
    assert!(!a.drain);
    let e = w
        .try_tx(|tx| agent::set_drain(tx, "nobody", true))
        .unwrap_err();
    assert!(matches!(e, CoordError::NotFound(_)), "{e}");
}

#[test]
fn a_live_agents_name_is_not_taken_with_another_credential() {
    let w = World::new();
    let now = w.now();
    let _ = w.tx(|tx| agent::register(tx, &w.cfg, agent("x1"), &registrant("fp-1", None), now));
    w.clock.advance(10_000);
    let now = w.now();
    // Heard from 10 s ago (lost after 30 s): refused, the row untouched.
    let e = w
        .try_tx(|tx| agent::register(tx, &w.cfg, agent("x1"), &registrant("fp-2", Some(T0)), now))
        .unwrap_err();
    assert!(matches!(e, CoordError::PermissionDenied(_)), "{e}");
    assert_eq!(w.tx(|tx| tx.get_agent("x1")).unwrap().credential, "fp-1");
    // The same credential re-registers; an admin may take the name over.
    let _ = w.tx(|tx| agent::register(tx, &w.cfg, agent("x1"), &registrant("fp-1", Some(T0)), now));
    let admin = agent::Registrant {
        credential: "fp-admin",
        admin: true,
        last_seen_ms: Some(now),
    };
    let _ = w.tx(|tx| agent::register(tx, &w.cfg, agent("x1"), &admin, now));
    assert_eq!(
        w.tx(|tx| tx.get_agent("x1")).unwrap().credential,
        "fp-admin"
    );
    // Silent past agent_lost_after_ms: another credential may have it.
    w.clock.advance(31_000);
    let now = w.now();
    let _ = w.tx(|tx| {
        agent::register(
            tx,
            &w.cfg,
            agent("x1"),
            &registrant("fp-3", Some(now - 31_000)),
            now,
        )
    });
    assert_eq!(w.tx(|tx| tx.get_agent("x1")).unwrap().credential, "fp-3");
}

#[test]
fn silent_agents_become_lost_and_come_back_online() {
    let w = World::new();
    let mut hb: HashMap<String, i64> = ["a1", "a2", "a3"]
        .iter()
        .map(|a| (a.to_string(), T0))
        .collect();
    // Nothing to write while everyone is fresh.
    let now = w.now();
    let ch = w.tx(|tx| agent::check_liveness(tx, &w.cfg, &hb, now));
    assert_eq!(ch, agent::LivenessChanges::default());
    // a1 and a2 heartbeat on; a3 falls silent past 30 s.
    w.clock.advance(30_001);
    let now = w.now();
    hb.insert("a1".into(), now);
    hb.insert("a2".into(), now - 1_000);
    let ch = w.tx(|tx| agent::check_liveness(tx, &w.cfg, &hb, now));
    assert_eq!(ch.lost, ["a3"]);
    assert!(ch.back.is_empty());
    // Only a3's row changes: a1's and a2's last-seen lag less than a minute.
    assert_eq!(ch.written, 1);
    assert_eq!(
        w.tx(|tx| tx.get_agent("a3")).unwrap().state,
        AgentState::Lost
    );
    assert_eq!(w.tx(|tx| tx.get_agent("a1")).unwrap().last_heartbeat_ms, T0);
    // a3 heartbeats again; a minute on, a1's last-seen is persisted.
    w.clock.advance(30_000);
    let now = w.now();
    hb.insert("a1".into(), now);
    hb.insert("a2".into(), now);
    hb.insert("a3".into(), now);
    let ch = w.tx(|tx| agent::check_liveness(tx, &w.cfg, &hb, now));
    assert_eq!(
        (ch.lost.len(), ch.back.as_slice()),
        (0, &["a3".to_string()][..])
    );
    assert_eq!(ch.written, 3);
    let a3 = w.tx(|tx| tx.get_agent("a3")).unwrap();
    assert_eq!((a3.state, a3.last_heartbeat_ms), (AgentState::Online, now));
    assert_eq!(
        w.tx(|tx| tx.get_agent("a1")).unwrap().last_heartbeat_ms,
        now
    );
}

/// An agent row that refuses `b` (a root agent without run_as) and offers nothing.
fn refusing(name: &str) -> AgentRow {
    AgentRow {
        catalog: Vec::new(),
        refused: vec![RefusedBenchmark {
            name: "b".into(),
            reason: "running as root without run_as".into(),
        }],
        ..agent(name)
    }
}

#[test]
fn a_benchmark_only_refused_is_not_placed_and_the_error_says_who_refuses_it() {
    let w = World::new();
    let raw = benchlake_proto::v1::BenchmarkSpec {
        benchmark: "b".into(),
        ..Default::default()
    };
    // Only a1, which refuses it: no agent offers `b`.
    w.tx(|tx| {
        for a in ["a2", "a3"] {
            let mut row = tx.get_agent(a)?.expect("agent");
            row.catalog.clear();
            tx.upsert_agent(&row)?;
        }
        tx.upsert_agent(&refusing("a1"))
    });
    let e = w
        .try_tx(|tx| crate::logic::validate_spec_tx(&w.cfg, tx, &raw))
        .unwrap_err();
    assert!(matches!(e, CoordError::FailedPrecondition(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "spec.benchmark: no agent offers 'b': a1 refuses it: running as root without run_as"
    );
    // a2 offers it again but is LOST: placement (index and rows alike)
    // fails and names the refusal too, as a scheduled firing records it.
    w.tx(|tx| {
        tx.upsert_agent(&AgentRow {
            state: AgentState::Lost,
            ..agent("a2")
        })
    });
    let (spec, _) = w.tx(|tx| crate::logic::validate_spec_tx(&w.cfg, tx, &raw));
    for e in [
        w.try_tx(|tx| crate::logic::select_agents(tx, &spec, &[])),
        w.try_tx(|tx| crate::logic::select_agents_from_rows(tx, &spec, &[])),
    ] {
        let e = e.unwrap_err().to_string();
        assert!(
            e.starts_with("spec.nodes.count: 1 agent(s) requested, 0 eligible")
                && e.ends_with("; a1 refuses it: running as root without run_as"),
            "{e}"
        );
    }
    // An unknown benchmark stays INVALID_ARGUMENT.
    let e = w
        .try_tx(|tx| {
            crate::logic::validate_spec_tx(
                &w.cfg,
                tx,
                &benchlake_proto::v1::BenchmarkSpec {
                    benchmark: "zz".into(),
                    ..Default::default()
                },
            )
        })
        .unwrap_err();
    assert!(matches!(e, CoordError::Invalid(_)), "{e:?}");
}

/// A backfill of a year of nights of a schedule without overlap: the first
/// night is placed, the other 364 queue in order behind it, and the
/// schedule's active runs are read once for the whole year (it was once per
/// night, each read decoding every run queued so far: 66,000 decodes).
#[test]
fn a_year_of_backfill_reads_the_schedules_active_runs_once() {
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let s: &dyn StateStore = store.as_ref();
    s.transact(|tx| tx.upsert_agent(&agent("a1"))).unwrap();
    let sched = ScheduleRow {
        schedule_id: "s1".into(),
        name: "nightly".into(),
        cron: "0 2 * * *".into(),
        time_zone: "UTC".into(),
        catch_up: CatchUp::Latest,
        max_catch_up: 0,
        allow_overlap: false,
        paused: false,
        spec: spec(),
        next_fire_ms: None,
        last_fire_ms: None,
        node_action: Default::default(),
        created_ms: T0,
        notify: Vec::new(),
        owner: None,
    };
    s.transact(|tx| tx.insert_schedule(&sched)).unwrap();
    let day = 86_400_000;
    let instants: Vec<i64> = (0..365).map(|d| T0 - (365 - d) * day).collect();
    let (runs, _) = s
        .transact(|tx| crate::scheduler::backfill(tx, &cfg(), &sched, &instants, T0))
        .unwrap();
    assert_eq!(runs.len(), 365);
    assert!(!runs[0].queued, "the first night is placed");
    assert_eq!(
        s.transact(|tx| tx.tasks_of_run(&runs[0].run_id))
            .unwrap()
            .len(),
        1
    );
    assert!(
        runs[1..]
            .iter()
            .all(|r| r.queued && r.state == RunState::Pending && r.kind == "noop")
    );
    let at: Vec<i64> = runs.iter().filter_map(|r| r.scheduled_for_ms).collect();
    assert_eq!(at, instants);
    assert_eq!(
        store.statement_runs(crate::store::ACTIVE_RUNS_OF_SCHEDULE),
        1,
        "the schedule's active runs are read once per backfill"
    );
}
