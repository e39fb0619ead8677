//! One conformance suite for every state backend: each primitive operation of
//! `Tx` (runs, tasks, leases, jobs, job groups, agents, schedules, commits,
//! meta), transaction rollback, the placement index, and the schema's
//! versioning, run against SQLite and against a real PostgreSQL server that
//! the test starts (initdb + pg_ctl on a free port).
use std::sync::Arc;

use benchlake_coordinator::model::*;
use benchlake_coordinator::pg_testing::PgServer;
use benchlake_coordinator::store::{PARKED, RunFilter, SqliteStore, StateStore};
use benchlake_coordinator::store_pg::{Fence, PgStore};
use benchlake_core::bench::LauncherKind;

fn spec(bench: &str) -> Spec {
    Spec {
        benchmark: bench.into(),
        params: Default::default(),
        nodes: Nodes::default(),
        launcher: LauncherKind::Local,
        max_attempts: 3,
        timeout_s: 60,
        slurm: Default::default(),
    }
}

fn run(id: &str, state: RunState, schedule: Option<&str>, bench: &str) -> RunRow {
    RunRow {
        run_id: id.into(),
        schedule_id: schedule.map(String::from),
        benchmark: bench.into(),
        kind: "linktest".into(),
        state,
        spec: spec(bench),
        submitted_at_ms: 1_000,
        started_at_ms: None,
        finished_at_ms: None,
        scheduled_for_ms: None,
        error: None,
        idempotency_key: None,
        rerun_of: None,
        date: "2026-11-23".into(),
        outcome: None,
        queued: false,
        notify: Vec::new(),
        owner: Some("alice".into()),
    }
}

fn task(id: &str, run: &str, agent: &str, rank: u32, state: TaskState, nb: i64) -> TaskRow {
    TaskRow {
        report: Default::default(),
        task_id: id.into(),
        run_id: run.into(),
        agent: agent.into(),
        rank,
        num_tasks: 2,
        state,
        attempt: 1,
        max_attempts: 3,
        lease_id: None,
        lease_expires_ms: None,
        not_before_ms: nb,
        error: None,
        exit_code: None,
        stdout_tail: String::new(),
        stderr_tail: "ünïcode tail".into(),
        outputs: vec![],
        started_at_ms: None,
        finished_at_ms: None,
        peers: vec![],
    }
}

fn job(id: &str, run: &str, kind: &str, state: JobState, nb: i64, created: i64) -> JobRow {
    JobRow {
        job_id: id.into(),
        run_id: run.into(),
        kind: kind.into(),
        state,
        attempt: 1,
        max_attempts: 3,
        spec_json: "{\"x\":1}".into(),
        error: None,
        lease_id: None,
        leased_by: None,
        lease_expires_ms: None,
        not_before_ms: nb,
        created_ms: created,
        committed_keys: vec![],
        date: "2026-11-23".into(),
    }
}

fn agent(name: &str) -> AgentRow {
    AgentRow {
        name: name.into(),
        labels: [("rack".to_string(), "r1".to_string())].into(),
        hostname: format!("{name}.cluster"),
        cores: 8,
        memory_bytes: 1 << 30,
        address: String::new(),
        version: "test".into(),
        slots: 2,
        catalog: vec![],
        state: AgentState::Online,
        drain: false,
        registered_ms: 5,
        last_heartbeat_ms: 6,
        credential: "fp".into(),
        // Kept through both backends (JSON in the row, no column).
        refused: vec![RefusedBenchmark {
            name: "ior".into(),
            reason: "running as root without run_as".into(),
        }],
    }
}

fn schedule(id: &str, name: &str, paused: bool, next: Option<i64>) -> ScheduleRow {
    ScheduleRow {
        schedule_id: id.into(),
        name: name.into(),
        cron: "0 3 * * *".into(),
        time_zone: "Europe/Berlin".into(),
        catch_up: CatchUp::Latest,
        max_catch_up: 1,
        allow_overlap: false,
        paused,
        spec: spec("linktest"),
        next_fire_ms: next,
        last_fire_ms: None,
        created_ms: 1,
        node_action: Default::default(),
        notify: Vec::new(),
        owner: Some("alice".into()),
    }
}

fn ids<T>(v: &[T], f: impl Fn(&T) -> &str) -> Vec<String> {
    v.iter().map(|x| f(x).to_string()).collect()
}

/// Every case, against one backend.
fn conformance(s: &dyn StateStore) {
    runs(s);
    tasks(s);
    jobs(s);
    groups(s);
    agents_and_placement(s);
    schedules(s);
    committed_and_meta(s);
    node_drains(s);
    audit_log(s);
    silences(s);
    notifications(s);
    counts(s);
    rollback(s);
}

/// The notification outbox: one row per (run, notifier), due rows in time
/// order, updates by delivery id, the next due time.
fn notifications(s: &dyn StateStore) {
    let n = |id: &str, run: &str, notifier: &str, next: i64| {
        let mut r = NotificationRow::new(run, notifier, next);
        r.delivery_id = id.into();
        r
    };
    s.transact(|tx| {
        assert_eq!(tx.next_notification_ms()?, None);
        tx.insert_notification(&n("d2", "r1", "ops", 200))?;
        tx.insert_notification(&n("d1", "r1", "mail", 100))?;
        tx.insert_notification(&n("d3", "r2", "ops", 300))?;
        // The same run and notifier again: nothing is added.
        tx.insert_notification(&n("d9", "r1", "ops", 50))
    })
    .unwrap();
    s.transact(|tx| {
        assert_eq!(tx.next_notification_ms()?, Some(100));
        assert_eq!(
            ids(&tx.due_notifications(250, 10)?, |r| &r.delivery_id),
            ["d1", "d2"]
        );
        assert_eq!(
            ids(&tx.due_notifications(1_000, 1)?, |r| &r.delivery_id),
            ["d1"]
        );
        assert_eq!(
            ids(&tx.notifications_of_run("r1")?, |r| &r.notifier),
            ["mail", "ops"]
        );
        let mut d1 = tx.notifications_of_run("r1")?.remove(0);
        d1.state = NotificationState::Delivered;
        d1.attempt = 3;
        d1.body = Some("{\"event\":\"verdict.fail\"}".into());
        tx.update_notification(&d1)?;
        let mut d2 = tx.notifications_of_run("r1")?.remove(1);
        d2.next_ms = 5_000;
        d2.attempt = 1;
        tx.update_notification(&d2)
    })
    .unwrap();
    s.transact(|tx| {
        assert_eq!(
            ids(&tx.due_notifications(1_000, 10)?, |r| &r.delivery_id),
            ["d3"]
        );
        assert_eq!(tx.next_notification_ms()?, Some(300));
        let r1 = tx.notifications_of_run("r1")?;
        assert_eq!(r1[0].state, NotificationState::Delivered);
        assert_eq!(r1[0].attempt, 3);
        assert_eq!(r1[0].body.as_deref(), Some("{\"event\":\"verdict.fail\"}"));
        assert_eq!((r1[1].next_ms, r1[1].attempt), (5_000, 1));
        // Pruning takes ended rows only: d1 (DELIVERED, due at 100), not the
        // PENDING d2 and d3.
        assert_eq!(tx.prune_notifications(10_000)?, 1);
        assert_eq!(
            ids(&tx.notifications_of_run("r1")?, |r| &r.delivery_id),
            ["d2"]
        );
        assert_eq!(tx.prune_notifications(10_000)?, 0);
        Ok(())
    })
    .unwrap();
}

/// `state_counts` (the metrics' one aggregate query): rows by kind and state,
/// and the due part of the queues, as deltas over what earlier cases left.
fn counts(s: &dyn StateStore) {
    let now = 10_000;
    let map = |v: Vec<(String, String, u64)>| -> std::collections::BTreeMap<(String, String), u64> {
        v.into_iter().map(|(k, st, n)| ((k, st), n)).collect()
    };
    let before = map(s.transact(|tx| tx.state_counts(now)).unwrap());
    s.transact(|tx| {
        tx.insert_run(&run("cnt-r1", RunState::Running, None, "x"))?;
        tx.insert_run(&run("cnt-r2", RunState::Succeeded, None, "x"))?;
        tx.insert_task(&task(
            "cnt-t1",
            "cnt-r1",
            "ghost",
            0,
            TaskState::Queued,
            now - 1,
        ))?;
        tx.insert_task(&task(
            "cnt-t2",
            "cnt-r1",
            "ghost",
            1,
            TaskState::Queued,
            now + 60_000,
        ))?;
        tx.insert_job(&job("cnt-j1", "cnt-r1", "ingest", JobState::Queued, now, 1))?;
        tx.insert_job(&job(
            "cnt-j2",
            "cnt-r1",
            "ingest",
            JobState::Queued,
            now + 1,
            2,
        ))?;
        tx.insert_job(&job("cnt-j3", "cnt-r1", "ingest", JobState::Done, 0, 3))
    })
    .unwrap();
    let after = map(s.transact(|tx| tx.state_counts(now)).unwrap());
    let delta = |k: &str, st: &str| {
        let key = (k.to_string(), st.to_string());
        after.get(&key).copied().unwrap_or(0) - before.get(&key).copied().unwrap_or(0)
    };
    assert_eq!(delta("run", "RUNNING"), 1, "{after:?}");
    assert_eq!(delta("run", "SUCCEEDED"), 1, "{after:?}");
    assert_eq!(delta("task", "QUEUED"), 2, "{after:?}");
    assert_eq!(delta("task_due", "QUEUED"), 1, "{after:?}");
    assert_eq!(delta("job", "QUEUED"), 2, "{after:?}");
    assert_eq!(delta("job", "DONE"), 1, "{after:?}");
    assert_eq!(delta("job_due", "QUEUED"), 1, "{after:?}");
}

fn runs(s: &dyn StateStore) {
    s.transact(|tx| {
        tx.insert_run(&run("r1", RunState::Pending, Some("s1"), "linktest"))?;
        let mut r2 = run("r2", RunState::Running, Some("s1"), "ior");
        r2.idempotency_key = Some("k-2".into());
        tx.insert_run(&r2)?;
        tx.insert_run(&run("r3", RunState::Succeeded, None, "ior"))?;
        let mut r4 = run("r4", RunState::Failed, None, "ior");
        // Final state but an outcome still to act on: unfinished.
        r4.outcome = Some(RunState::Failed);
        tx.insert_run(&r4)
    })
    .unwrap();
    s.transact(|tx| {
        let r = tx.get_run("r2")?.unwrap();
        assert_eq!(r.state, RunState::Running);
        assert_eq!(r.spec.benchmark, "ior");
        assert_eq!(tx.run_by_idempotency_key("k-2")?.unwrap().run_id, "r2");
        assert!(tx.run_by_idempotency_key("nope")?.is_none());
        assert!(tx.get_run("missing")?.is_none());
        let all = tx.list_runs(&RunFilter::default())?;
        assert_eq!(ids(&all, |r| &r.run_id), ["r4", "r3", "r2", "r1"]);
        let f = RunFilter {
            schedule_id: Some("s1".into()),
            ..Default::default()
        };
        assert_eq!(ids(&tx.list_runs(&f)?, |r| &r.run_id), ["r2", "r1"]);
        let f = RunFilter {
            state: Some(RunState::Succeeded),
            ..Default::default()
        };
        assert_eq!(ids(&tx.list_runs(&f)?, |r| &r.run_id), ["r3"]);
        let f = RunFilter {
            benchmark: Some("ior".into()),
            limit: 2,
            ..Default::default()
        };
        assert_eq!(ids(&tx.list_runs(&f)?, |r| &r.run_id), ["r4", "r3"]);
        let f = RunFilter {
            before: Some("r3".into()),
            ..Default::default()
        };
        assert_eq!(ids(&tx.list_runs(&f)?, |r| &r.run_id), ["r2", "r1"]);
        let mut active = ids(&tx.active_runs_of_schedule("s1")?, |r| &r.run_id);
        active.sort();
        assert_eq!(active, ["r1", "r2"]);
        let mut unf = tx.unfinished_runs()?;
        unf.sort();
        assert_eq!(unf, ["r1", "r2", "r4"]);
        let mut r1 = tx.get_run("r1")?.unwrap();
        r1.state = RunState::Cancelled;
        r1.error = Some("cancelled by 'alice'".into());
        tx.update_run(&r1)?;
        Ok(())
    })
    .unwrap();
    s.transact(|tx| {
        let r1 = tx.get_run("r1")?.unwrap();
        assert_eq!(r1.state, RunState::Cancelled);
        assert_eq!(r1.error.as_deref(), Some("cancelled by 'alice'"));
        assert!(tx.active_runs_of_schedule("s1")?.len() == 1);
        Ok(())
    })
    .unwrap();
    // A duplicate idempotency key is an error (the caller looks it up first),
    // and the store stays usable.
    let mut dup = run("r9", RunState::Pending, None, "x");
    dup.idempotency_key = Some("k-2".into());
    let e = s.transact(|tx| tx.insert_run(&dup)).unwrap_err();
    assert!(e.to_string().contains("state store"), "{e}");
    assert!(s.transact(|tx| tx.get_run("r9")).unwrap().is_none());
}

fn tasks(s: &dyn StateStore) {
    s.transact(|tx| {
        tx.insert_task(&task("t2", "r2", "a1", 1, TaskState::Queued, 100))?;
        tx.insert_task(&task("t1", "r2", "a1", 0, TaskState::Queued, 50))?;
        tx.insert_task(&task("t3", "r2", "a2", 2, TaskState::Queued, 10))?;
        let mut t4 = task("t4", "r3", "a1", 0, TaskState::Running, 0);
        t4.lease_expires_ms = Some(500);
        tx.insert_task(&t4)?;
        let mut t5 = task("t5", "r3", "a2", 1, TaskState::Leased, 0);
        t5.lease_expires_ms = Some(5_000);
        tx.insert_task(&t5)
    })
    .unwrap();
    s.transact(|tx| {
        // Ranked order, whatever the ids.
        let of_run = tx.tasks_of_run("r2")?;
        assert_eq!(ids(&of_run, |t| &t.task_id), ["t1", "t2", "t3"]);
        assert_eq!(of_run[2].stderr_tail, "ünïcode tail");
        // Oldest due task of the agent.
        assert_eq!(tx.next_task_for_agent("a1", 60)?.unwrap().task_id, "t1");
        assert!(tx.next_task_for_agent("a1", 49)?.is_none());
        assert!(tx.next_task_for_agent("a9", 1_000)?.is_none());
        assert_eq!(ids(&tx.expired_tasks(1_000)?, |t| &t.task_id), ["t4"]);
        // In no particular order.
        let mut exp = ids(&tx.expired_tasks(10_000)?, |t| &t.task_id);
        exp.sort();
        assert_eq!(exp, ["t4", "t5"]);
        let mut a1 = ids(
            &tx.tasks_of_agent("a1", &[TaskState::Queued, TaskState::Running])?,
            |t| &t.task_id,
        );
        a1.sort();
        assert_eq!(a1, ["t1", "t2", "t4"]);
        // A lease: QUEUED -> LEASED, moved to another agent.
        let mut t1 = tx.get_task("t1")?.unwrap();
        t1.state = TaskState::Leased;
        t1.agent = "a2".into();
        t1.lease_id = Some("L1".into());
        t1.lease_expires_ms = Some(9_000);
        // Outputs, one of them recorded as a member of its run's bundle
        // (issue 40 item 4: JSON in the row, no column).
        t1.outputs = vec![
            RawFileRow {
                key: "raw/r1/t1/host.json".into(),
                bytes: 267,
                sha256: "ab".repeat(32),
                format: "hostinfo".into(),
                bundle: Some("raw/r1/bundle.tar.zst".into()),
            },
            RawFileRow {
                key: "raw/r1/t1/big.sion".into(),
                bytes: 1 << 30,
                sha256: "cd".repeat(32),
                format: "linktest".into(),
                bundle: None,
            },
        ];
        tx.update_task(&t1)?;
        Ok(())
    })
    .unwrap();
    s.transact(|tx| {
        let t1 = tx.get_task("t1")?.unwrap();
        let bundles: Vec<Option<&str>> = t1.outputs.iter().map(|o| o.bundle.as_deref()).collect();
        assert_eq!(bundles, [Some("raw/r1/bundle.tar.zst"), None]);
        assert_eq!(t1.outputs[1].bytes, 1 << 30);
        assert_eq!((t1.state, t1.agent.as_str()), (TaskState::Leased, "a2"));
        assert_eq!(t1.lease_id.as_deref(), Some("L1"));
        assert_eq!(tx.next_task_for_agent("a1", 1_000)?.unwrap().task_id, "t2");
        assert!(tx.tasks_of_agent("a2", &[TaskState::Leased])?.len() == 2);
        Ok(())
    })
    .unwrap();
}

fn jobs(s: &dyn StateStore) {
    s.transact(|tx| {
        tx.insert_job(&job("j1", "r2", "ingest", JobState::Queued, 0, 30))?;
        tx.insert_job(&job("j2", "r2", "ingest", JobState::Queued, 0, 20))?;
        tx.insert_job(&job("j3", "r2", "replay", JobState::Queued, 0, 10))?;
        tx.insert_job(&job("j4", "r2", "commit", JobState::Queued, 500, 5))?;
        tx.insert_job(&job("j5", "r2", "ingest", JobState::Failed, 0, 1))?;
        tx.insert_job(&job("j6", "r2", "ingest", JobState::Queued, PARKED, 0))
    })
    .unwrap();
    s.transact(|tx| {
        // Oldest due first; a kind filter; a parked job is never due.
        assert_eq!(tx.next_job(&[], 100)?.unwrap().job_id, "j3");
        assert_eq!(tx.next_job(&["ingest".into()], 100)?.unwrap().job_id, "j2");
        assert_eq!(
            tx.next_job(&["commit".into(), "nope".into()], 100)?
                .map(|j| j.job_id),
            None
        );
        assert_eq!(tx.next_job(&["commit".into()], 500)?.unwrap().job_id, "j4");
        assert_eq!(tx.queued_job_count()?, 5);
        assert_eq!(tx.job_of_kind("r2", "ingest")?.unwrap().job_id, "j6");
        assert!(tx.job_of_kind("r2", "report")?.is_none());
        assert_eq!(tx.count_open_jobs("r2", "commit")?, 4);
        assert_eq!(ids(&tx.failed_jobs("r2")?, |j| &j.job_id), ["j5"]);
        assert_eq!(
            ids(&tx.jobs_of_run("r2")?, |j| &j.job_id),
            ["j6", "j5", "j4", "j3", "j2", "j1"]
        );
        // A lease.
        let mut j = tx.get_job("j3")?.unwrap();
        j.state = JobState::Leased;
        j.lease_id = Some("JL".into());
        j.leased_by = Some("w1".into());
        j.lease_expires_ms = Some(700);
        tx.update_job(&j)?;
        Ok(())
    })
    .unwrap();
    s.transact(|tx| {
        assert_eq!(tx.queued_job_count()?, 4);
        assert_eq!(tx.next_job(&[], 100)?.unwrap().job_id, "j2");
        assert!(tx.expired_jobs(700)?.is_empty());
        assert_eq!(ids(&tx.expired_jobs(701)?, |j| &j.job_id), ["j3"]);
        assert_eq!(tx.get_job("j3")?.unwrap().leased_by.as_deref(), Some("w1"));
        Ok(())
    })
    .unwrap();
}

fn groups(s: &dyn StateStore) {
    s.transact(|tx| {
        tx.insert_job(&job("g1", "r5", "part", JobState::Queued, 0, 1))?;
        tx.insert_job(&job("g2", "r5", "part", JobState::Failed, 0, 2))?;
        tx.insert_job(&job("g3", "r5", "merge", JobState::Queued, PARKED, 3))?;
        tx.set_job_group("g1", Some("parts"), None)?;
        tx.set_job_group("g2", Some("parts"), None)?;
        tx.set_job_group("g3", None, Some("parts"))
    })
    .unwrap();
    s.transact(|tx| {
        assert_eq!(tx.job_group("g1")?, (Some("parts".into()), None));
        assert_eq!(tx.job_group("g3")?, (None, Some("parts".into())));
        assert_eq!(tx.job_group("missing")?, (None, None));
        assert_eq!(tx.open_jobs_in_group("r5", "parts")?, 1);
        assert_eq!(
            ids(&tx.failed_jobs_in_group("r5", "parts")?, |j| &j.job_id),
            ["g2"]
        );
        assert_eq!(
            ids(&tx.jobs_waiting_for("r5", "parts")?, |j| &j.job_id),
            ["g3"]
        );
        assert!(tx.jobs_waiting_for("r2", "parts")?.is_empty());
        Ok(())
    })
    .unwrap();
}

fn agents_and_placement(s: &dyn StateStore) {
    s.transact(|tx| {
        tx.upsert_agent(&agent("b2"))?;
        tx.upsert_agent(&agent("b1"))?;
        let mut b2 = agent("b2");
        b2.drain = true;
        b2.state = AgentState::Draining;
        tx.upsert_agent(&b2)?;
        // The transaction sees its own writes in the index.
        let v = tx.placement().expect("placement index");
        assert!(v.agent("b2").unwrap().drain);
        Ok(())
    })
    .unwrap();
    s.transact(|tx| {
        assert_eq!(ids(&tx.list_agents()?, |a| &a.name), ["b1", "b2"]);
        let b2 = tx.get_agent("b2")?.unwrap();
        assert_eq!((b2.state, b2.drain), (AgentState::Draining, true));
        assert_eq!(b2.labels.get("rack").map(String::as_str), Some("r1"));
        assert_eq!(b2.refused, agent("b2").refused, "what the agent refuses");
        assert!(tx.get_agent("zz")?.is_none());
        Ok(())
    })
    .unwrap();
    let p = s.placement().expect("placement index");
    let p = p.read().unwrap();
    assert!(p.agent("b2").unwrap().drain);
    // Tasks not ended are indexed with their lease: t1 moved to a2.
    let t1 = p.task("t1").unwrap();
    assert_eq!((t1.agent.as_str(), t1.state), ("a2", TaskState::Leased));
    assert_eq!(p.load("a2"), 3);
}

fn schedules(s: &dyn StateStore) {
    s.transact(|tx| {
        tx.insert_schedule(&schedule("s1", "nightly", false, Some(100)))?;
        tx.insert_schedule(&schedule("s2", "hourly", true, Some(50)))?;
        tx.insert_schedule(&schedule("s3", "later", false, Some(900)))?;
        tx.insert_schedule(&schedule("s4", "never", false, None))
    })
    .unwrap();
    s.transact(|tx| {
        assert_eq!(
            ids(&tx.list_schedules()?, |x| &x.name),
            ["hourly", "later", "never", "nightly"]
        );
        assert_eq!(ids(&tx.due_schedules(100)?, |x| &x.schedule_id), ["s1"]);
        assert_eq!(
            ids(&tx.due_schedules(1_000)?, |x| &x.schedule_id),
            ["s1", "s3"]
        );
        assert_eq!(tx.schedule_by_name("later")?.unwrap().schedule_id, "s3");
        let mut s2 = tx.get_schedule("s2")?.unwrap();
        assert_eq!(s2.time_zone, "Europe/Berlin");
        s2.paused = false;
        s2.name = "every-hour".into();
        tx.update_schedule(&s2)?;
        assert!(tx.delete_schedule("s4")?);
        assert!(!tx.delete_schedule("s4")?);
        Ok(())
    })
    .unwrap();
    s.transact(|tx| {
        assert_eq!(
            ids(&tx.due_schedules(100)?, |x| &x.schedule_id),
            ["s2", "s1"]
        );
        assert!(tx.schedule_by_name("hourly")?.is_none());
        assert!(tx.get_schedule("s4")?.is_none());
        Ok(())
    })
    .unwrap();
    // Names are unique.
    let e = s
        .transact(|tx| tx.insert_schedule(&schedule("s9", "later", false, None)))
        .unwrap_err();
    assert!(e.to_string().contains("state store"), "{e}");
}

fn committed_and_meta(s: &dyn StateStore) {
    let f = |key: &str, table: &str, run: &str, rows: u64| CommittedFile {
        key: key.into(),
        table: table.into(),
        run_id: run.into(),
        job_id: "j1".into(),
        date: "2026-11-23".into(),
        rows,
        bytes: 10 * rows,
        committed_ms: 7,
        merged: None,
    };
    s.transact(|tx| {
        tx.upsert_committed(&f("tables/b/x.parquet", "b", "r2", 5))?;
        tx.upsert_committed(&f("tables/a/y.parquet", "a", "r2", 3))?;
        tx.upsert_committed(&f("tables/a/x.parquet", "a", "r1", 4))?;
        // The same key again: its counts change, no second row.
        tx.upsert_committed(&f("tables/b/x.parquet", "b", "r2", 6_000_000_000))?;
        tx.set_meta("reconcile_ms", "1")?;
        tx.set_meta("reconcile_ms", "2")
    })
    .unwrap();
    s.transact(|tx| {
        let all = tx.committed_files(None)?;
        assert_eq!(
            ids(&all, |c| &c.key),
            [
                "tables/a/x.parquet",
                "tables/a/y.parquet",
                "tables/b/x.parquet"
            ]
        );
        assert_eq!(all[2].rows, 6_000_000_000);
        assert_eq!(all[2].bytes, 60_000_000_000);
        assert_eq!(tx.committed_files(Some("a"))?.len(), 2);
        assert_eq!(
            ids(&tx.committed_files_of_run("r2")?, |c| &c.key),
            ["tables/a/y.parquet", "tables/b/x.parquet"]
        );
        // Counted per table by the database (ListTables, ListFlights).
        let t = |table: &str, files, rows, bytes| TableTotals {
            table: table.into(),
            files,
            rows,
            bytes,
        };
        assert_eq!(
            tx.table_totals()?,
            [t("a", 2, 7, 70), t("b", 1, 6_000_000_000, 60_000_000_000)]
        );
        tx.delete_committed("tables/a/x.parquet")?;
        assert_eq!(tx.committed_files(Some("a"))?.len(), 1);
        assert_eq!(tx.table_totals()?[0], t("a", 1, 3, 30));
        assert_eq!(tx.get_meta("reconcile_ms")?.as_deref(), Some("2"));
        assert!(tx.get_meta("nothing")?.is_none());
        // Merged by compaction: the part keeps its key and learns its place;
        // the table counts one object for two parts in one merged file.
        let merged = |first| {
            Some(MergedIn {
                object: "tables/a/m.parquet".into(),
                first_group: first,
                groups: 2,
            })
        };
        tx.upsert_committed(&CommittedFile {
            merged: merged(0),
            ..f("tables/a/y.parquet", "a", "r2", 3)
        })?;
        tx.upsert_committed(&CommittedFile {
            merged: merged(2),
            ..f("tables/a/z.parquet", "a", "r3", 1)
        })?;
        let a = tx.committed_files(Some("a"))?;
        assert_eq!(a[0].merged, merged(0));
        assert_eq!(a[1].merged, merged(2));
        assert_eq!(a[1].object(), "tables/a/m.parquet");
        assert_eq!(a[1].row_groups(), Some((2, 2)));
        assert_eq!(tx.committed_files_of_run("r3")?[0].merged, merged(2));
        assert_eq!(tx.table_totals()?[0], t("a", 1, 4, 40));
        Ok(())
    })
    .unwrap();
}

/// Acknowledgements and maintenance windows: insert, list by id, delete,
/// prune the ones that ended before a time; a rollback keeps nothing.
fn silences(s: &dyn StateStore) {
    use benchlake_coordinator::silence::{Ack, Maintenance};
    let ack = |id: &str, exp: i64| Ack {
        id: id.into(),
        node: "n3".into(),
        check: "node.".into(),
        comment: "DIMM on order — ünïcode".into(),
        author: "alice".into(),
        created_ms: 10,
        expires_ms: exp,
        schedule_id: Some("s1".into()),
        schedule_name: Some("nightly".into()),
    };
    let win = |id: &str, end: i64| Maintenance {
        id: id.into(),
        nodes: "n[1-2]".into(),
        node_names: vec!["n1".into(), "n2".into()],
        start_ms: 5,
        end_ms: end,
        reason: "firmware".into(),
        author: "bob".into(),
        created_ms: 1,
    };
    s.transact(|tx| {
        tx.insert_ack(&ack("01B", 200))?;
        tx.insert_ack(&ack("01A", 100))?;
        tx.insert_maintenance(&win("01D", 300))?;
        tx.insert_maintenance(&win("01C", 50))
    })
    .unwrap();
    s.transact(|tx| {
        assert_eq!(tx.list_acks()?, [ack("01A", 100), ack("01B", 200)]);
        assert_eq!(tx.list_maintenance()?, [win("01C", 50), win("01D", 300)]);
        assert_eq!(tx.prune_acks(150)?, 1);
        assert_eq!(tx.prune_maintenance(50)?, 0, "ended at 50: not before 50");
        assert_eq!(tx.prune_maintenance(51)?, 1);
        assert_eq!(ids(&tx.list_acks()?, |a| &a.id), ["01B"]);
        assert_eq!(ids(&tx.list_maintenance()?, |w| &w.id), ["01D"]);
        assert!(tx.delete_ack("01B")?);
        assert!(!tx.delete_ack("01B")?);
        assert!(tx.delete_maintenance("01D")?);
        assert!(!tx.delete_maintenance("01D")?);
        Ok(())
    })
    .unwrap();
    let _ = s.transact(|tx| {
        tx.insert_ack(&ack("01E", 1))?;
        tx.insert_maintenance(&win("01F", 1))?;
        Err::<(), _>(benchlake_coordinator::CoordError::Invalid(
            "roll back".into(),
        ))
    });
    s.transact(|tx| {
        assert!(tx.list_acks()?.is_empty());
        assert!(tx.list_maintenance()?.is_empty());
        Ok(())
    })
    .unwrap();
}

/// The drains benchlake made: upsert by node, get, list by name, delete.
/// The audit trail: rows come back newest first, paged by id.
fn audit_log(s: &dyn StateStore) {
    use benchlake_coordinator::audit::AuditRow;
    let row = |id: &str, action: &str| AuditRow {
        id: id.into(),
        at_ms: 7,
        who: "alice".into(),
        role: "admin".into(),
        via: "dashboard".into(),
        action: action.into(),
        target: "nightly".into(),
        outcome: "ok".into(),
        detail: "run 01X".into(),
    };
    s.transact(|tx| {
        tx.insert_audit(&row("01A", "schedule.trigger"))?;
        tx.insert_audit(&row("01C", "run.cancel"))?;
        tx.insert_audit(&row("01B", "schedule.pause"))
    })
    .unwrap();
    let all = s.transact(|tx| tx.list_audit(10, None)).unwrap();
    assert_eq!(
        all.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["01C", "01B", "01A"]
    );
    assert_eq!(all[0], row("01C", "run.cancel"));
    let page = s.transact(|tx| tx.list_audit(1, Some("01C"))).unwrap();
    assert_eq!(page, [row("01B", "schedule.pause")]);
    assert!(
        s.transact(|tx| tx.list_audit(5, Some("01A")))
            .unwrap()
            .is_empty()
    );
}

fn node_drains(s: &dyn StateStore) {
    use benchlake_coordinator::node_actions::NodeDrain;
    let d = |node: &str, run: &str| NodeDrain {
        node: node.into(),
        reason: format!("benchlake: node.cores 2 vs 64 (run {run})"),
        run_id: run.into(),
        check: "node.cores".into(),
        schedule_id: Some("s1".into()),
        drained_ms: 7,
    };
    s.transact(|tx| {
        tx.upsert_node_drain(&d("n2", "01A"))?;
        tx.upsert_node_drain(&d("n10", "01A"))?;
        tx.upsert_node_drain(&d("n2", "01B"))
    })
    .unwrap();
    s.transact(|tx| {
        assert_eq!(tx.get_node_drain("n2")?, Some(d("n2", "01B")));
        assert_eq!(tx.get_node_drain("n3")?, None);
        assert_eq!(ids(&tx.list_node_drains()?, |x| &x.node), ["n10", "n2"]);
        assert!(tx.delete_node_drain("n2")?);
        assert!(!tx.delete_node_drain("n2")?);
        Ok(())
    })
    .unwrap();
    // A rolled-back transaction leaves no record.
    let _ = s.transact(|tx| {
        tx.upsert_node_drain(&d("n4", "01C"))?;
        Err::<(), _>(benchlake_coordinator::CoordError::Invalid(
            "roll back".into(),
        ))
    });
    s.transact(|tx| {
        assert_eq!(ids(&tx.list_node_drains()?, |x| &x.node), ["n10"]);
        assert!(tx.delete_node_drain("n10")?);
        Ok(())
    })
    .unwrap();
}

fn rollback(s: &dyn StateStore) {
    let e = s
        .transact(|tx| -> benchlake_coordinator::Result<()> {
            tx.insert_run(&run("rb", RunState::Pending, None, "x"))?;
            tx.upsert_agent(&agent("ghost"))?;
            let mut t = task("tb", "rb", "ghost", 0, TaskState::Queued, 0);
            t.lease_expires_ms = Some(1);
            tx.insert_task(&t)?;
            Err(benchlake_coordinator::CoordError::Invalid("no".into()))
        })
        .unwrap_err();
    assert_eq!(e.to_string(), "no");
    s.transact(|tx| {
        assert!(tx.get_run("rb")?.is_none());
        assert!(tx.get_agent("ghost")?.is_none());
        assert!(tx.get_task("tb")?.is_none());
        Ok(())
    })
    .unwrap();
    // Nor in the index.
    let p = s.placement().unwrap();
    let p = p.read().unwrap();
    assert!(p.agent("ghost").is_none());
    assert!(p.task("tb").is_none());
    drop(p);

    // A write the database refuses fails its transaction, even when the
    // backend sends writes late (PostgreSQL: with the COMMIT): nothing of it
    // lands, and the next transaction works.
    s.transact(|tx| tx.insert_run(&run("dup", RunState::Pending, None, "x")))
        .unwrap();
    let e = s
        .transact(|tx| {
            tx.set_meta("before_dup", "1")?;
            tx.upsert_agent(&agent("ghost2"))?;
            tx.insert_run(&run("dup", RunState::Pending, None, "x"))?;
            tx.set_meta("after_dup", "1")
        })
        .unwrap_err();
    assert!(
        matches!(
            e,
            benchlake_coordinator::CoordError::Store {
                retryable: false,
                ..
            }
        ),
        "{e}"
    );
    s.transact(|tx| {
        assert_eq!(tx.get_meta("before_dup")?, None);
        assert_eq!(tx.get_meta("after_dup")?, None);
        assert!(tx.get_agent("ghost2")?.is_none());
        tx.set_meta("after_dup", "2")
    })
    .unwrap();
    assert!(
        s.placement()
            .unwrap()
            .read()
            .unwrap()
            .agent("ghost2")
            .is_none()
    );
    // A failed write read back in the same transaction is not hidden either.
    let e = s
        .transact(|tx| {
            tx.insert_run(&run("dup", RunState::Pending, None, "x"))?;
            tx.get_run("dup").map(|_| ())
        })
        .unwrap_err();
    assert!(
        matches!(e, benchlake_coordinator::CoordError::Store { .. }),
        "{e}"
    );
    assert_eq!(
        s.transact(|tx| tx.get_meta("after_dup"))
            .unwrap()
            .as_deref(),
        Some("2")
    );
}

#[test]
fn sqlite_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let s: Arc<dyn StateStore> = Arc::new(SqliteStore::open(&dir.path().join("s.db")).unwrap());
    conformance(s.as_ref());
}

#[test]
fn postgres_conforms_and_fences_an_old_leader() {
    let pg = PgServer::start().expect("PostgreSQL test server");
    let url = pg.fresh_db().unwrap();
    let s = Arc::new(PgStore::open(&url).unwrap());
    conformance(s.as_ref() as &dyn StateStore);

    // Reopening runs no migration twice and reloads the same index.
    let again = PgStore::open(&url).unwrap();
    let p = StateStore::placement(&again).unwrap();
    assert_eq!(p.read().unwrap().load("a2"), 3);

    // Fencing: two coordinators; the first leads, then loses its lease to
    // the second; its next write is refused and nothing of it lands.
    let mut e1 = benchlake_coordinator::leader::Elector::new(&url, "c1", 300);
    let mut e2 = benchlake_coordinator::leader::Elector::new(&url, "c2", 300);
    let t1 = e1.try_acquire().unwrap().expect("c1 leads");
    assert_eq!(
        e2.try_acquire().unwrap(),
        None,
        "c2 must wait for c1's lease"
    );
    assert_eq!(
        e1.try_acquire().unwrap(),
        Some(t1),
        "renewal keeps the token"
    );
    s.set_fence(Fence {
        holder: e1.holder().to_string(),
        token: t1,
    });
    let ds: &dyn StateStore = s.as_ref();
    ds.transact(|tx| tx.set_meta("written_by", "c1")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(350));
    let t2 = e2.try_acquire().unwrap().expect("c2 takes over");
    assert!(t2 > t1);
    assert_eq!(e1.try_acquire().unwrap(), None, "c1 may not take it back");
    let cur = e2.current().unwrap();
    assert_eq!((cur.holder.as_str(), cur.token), (e2.holder(), t2));
    let err = ds
        .transact(|tx| {
            tx.insert_run(&run("late", RunState::Pending, None, "x"))?;
            tx.set_meta("written_by", "c1-late")
        })
        .unwrap_err();
    assert!(
        matches!(err, benchlake_coordinator::CoordError::Fenced(_)),
        "{err}"
    );
    assert!(err.to_string().contains("no longer the leader"), "{err}");
    // Reads take no lock and need no lead: the old leader may still read.
    assert_eq!(
        ds.transact(|tx| tx.get_meta("written_by"))
            .unwrap()
            .as_deref(),
        Some("c1")
    );
    let s2 = PgStore::open(&url).unwrap();
    s2.set_fence(Fence {
        holder: e2.holder().to_string(),
        token: t2,
    });
    (&s2 as &dyn StateStore)
        .transact(|tx| {
            assert!(tx.get_run("late")?.is_none());
            assert_eq!(tx.get_meta("written_by")?.as_deref(), Some("c1"));
            Ok(())
        })
        .unwrap();
    // A clean stop hands the lead over at once.
    e2.release().unwrap();
    assert!(e1.try_acquire().unwrap().unwrap() > t2);
}

#[test]
fn postgres_refuses_a_newer_schema() {
    let pg = PgServer::start().expect("PostgreSQL test server");
    let url = pg.fresh_db().unwrap();
    drop(PgStore::open(&url).unwrap());
    let admin = PgStore::open(&url).unwrap();
    (&admin as &dyn StateStore)
        .transact(|tx| tx.set_meta("schema_version", "99"))
        .unwrap();
    let e = PgStore::open(&url).unwrap_err().to_string();
    assert!(e.contains("schema version 99"), "{e}");
}

#[test]
fn postgres_a_leader_frozen_mid_transaction_does_not_block_the_takeover() {
    let pg = PgServer::start().expect("PostgreSQL test server");
    let url = pg.fresh_db().unwrap();
    let s = Arc::new(
        PgStore::open_with(
            &url,
            &benchlake_coordinator::store_pg::PgOptions {
                stall_ms: 300,
                synchronous_commit: true,
            },
        )
        .unwrap(),
    );
    let mut e1 = benchlake_coordinator::leader::Elector::new(&url, "c1", 300);
    let mut e2 = benchlake_coordinator::leader::Elector::new(&url, "c2", 300);
    let t1 = e1.try_acquire().unwrap().unwrap();
    s.set_fence(Fence {
        holder: e1.holder().to_string(),
        token: t1,
    });
    // c1 opens a transaction (it holds the leader row FOR SHARE) and stalls.
    let stalled = {
        let s = s.clone();
        std::thread::spawn(move || {
            (s.as_ref() as &dyn StateStore).transact(|tx| {
                // The first write takes the leader row FOR SHARE.
                tx.set_meta("early", "c1")?;
                std::thread::sleep(std::time::Duration::from_millis(1_500));
                tx.set_meta("late", "c1")
            })
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    let t0 = std::time::Instant::now();
    let t2 = loop {
        // Refused while the lease runs, or failed on the row lock: try again.
        if let Ok(Some(t)) = e2.try_acquire() {
            break t;
        }
        assert!(
            t0.elapsed().as_millis() < 1_300,
            "c2 waited for the stalled c1"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let took = t0.elapsed();
    assert!(t2 > t1);
    // The server ended c1's stalled session: its write never lands.
    assert!(stalled.join().unwrap().is_err());
    let check = PgStore::open(&url).unwrap();
    assert!(
        (&check as &dyn StateStore)
            .transact(|tx| tx.get_meta("late"))
            .unwrap()
            .is_none()
    );
    assert!(
        (&check as &dyn StateStore)
            .transact(|tx| tx.get_meta("early"))
            .unwrap()
            .is_none()
    );
    println!("takeover past a stalled leader's open transaction: {took:?}");
}

/// `Coordinator::open` honours `state_postgres`: it opens PostgreSQL, takes
/// the lead (a second coordinator is refused while the lease runs), fences
/// its store with it, and hands the lead on when dropped.
#[test]
fn postgres_coordinator_open_takes_the_lead_and_hands_it_on() {
    use benchlake_coordinator::{CoordError, Coordinator, CoordinatorConfig};
    let pg = PgServer::start().expect("PostgreSQL test server");
    let url = pg.fresh_db().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = CoordinatorConfig {
        state_path: dir.path().join("unused.db"),
        state_postgres: Some(url.clone()),
        leader_lease_ms: 60_000,
        store: benchlake_core::lake::StoreConfig {
            url: dir.path().join("lake").display().to_string(),
            ..Default::default()
        },
        background: false,
        ..Default::default()
    };
    let clock = Arc::new(benchlake_core::clock::ManualClock::new(1_795_392_000_000));
    let c1 = Coordinator::open(cfg.clone(), clock.clone()).unwrap();
    c1.store()
        .transact(|tx| tx.set_meta("written_by", "c1"))
        .unwrap();
    assert!(!dir.path().join("unused.db").exists(), "SQLite was opened");
    let mut el = benchlake_coordinator::leader::Elector::new(&url, "probe", 1_000);
    let led = el.current().unwrap();
    assert!(led.token >= 1 && led.expires_in_ms > 50_000, "{led:?}");
    let e = Coordinator::open(cfg.clone(), clock.clone()).unwrap_err();
    assert!(matches!(e, CoordError::Fenced(_)), "{e}");
    assert!(e.to_string().contains("another coordinator leads"), "{e}");
    // Dropped: the lead is free at once, and the next one takes it over the
    // same rows with a newer token.
    drop(c1);
    let c2 = Coordinator::open(cfg, clock).unwrap();
    let by = c2.store().transact(|tx| tx.get_meta("written_by")).unwrap();
    assert_eq!(by.as_deref(), Some("c1"));
    assert!(el.current().unwrap().token > led.token);
}
