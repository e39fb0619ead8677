//! The in-process cluster: a coordinator on a manual clock, three agents and two
//! workers over real gRPC on loopback. Covers a multi-agent run landing in the
//! lake, schedule firing and catch-up, lease expiry and retry, drain, cancel,
//! rerun-failed, a worker losing its job lease, auth refusals and bad input.
mod common;

use std::time::Duration;

use benchlake_coordinator::Tokens;
use benchlake_proto::v1 as pb;
use common::*;

/// `scheduled_for`, `logical_at` and `submitted_at` (µs) of a run's `runs` row.
fn run_times(lake: &std::path::Path, run_id: &str) -> (Option<i64>, Option<i64>, i64) {
    use arrow::array::{Array, TimestampMicrosecondArray};
    let b = table_batches(lake, "runs", Some(run_id));
    let col = |n: &str| {
        let a = b[0]
            .column_by_name(n)
            .unwrap_or_else(|| panic!("runs.{n}"))
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap_or_else(|| panic!("runs.{n} is a timestamp"))
            .clone();
        (!a.is_null(0)).then(|| a.value(0))
    };
    (
        col("scheduled_for"),
        col("logical_at"),
        col("submitted_at").expect("submitted_at"),
    )
}

async fn cluster3() -> Cluster {
    let mut c = Cluster::start(Tokens::default()).await;
    for a in ["a1", "a2", "a3"] {
        c.add_agent(a, None).await;
    }
    c.add_worker("w1", None);
    c.add_worker("w2", None);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_on_three_agents_lands_in_the_lake() {
    let c = cluster3().await;
    let run = c.submit("hostinfo", &[], 3).await.unwrap();
    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    assert_eq!(d.tasks.len(), 3);
    let mut agents: Vec<_> = d.tasks.iter().map(|t| t.agent.clone()).collect();
    agents.sort();
    assert_eq!(agents, ["a1", "a2", "a3"]);
    // One ingest job per task, then the record job.
    let kinds: Vec<_> = d.jobs.iter().map(|j| j.kind.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "ingest").count(),
        3,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "record").count(),
        1,
        "{kinds:?}"
    );
    for t in &d.tasks {
        // host.json + stdout.txt + stderr.txt, each with a SHA-256.
        assert_eq!(t.outputs.len(), 3, "{t:?}");
        assert!(t.outputs.iter().all(|o| {
            o.sha256.len() == 64
                && o.key
                    .starts_with(&format!("raw/{}/{}/", run.run_id, t.task_id))
        }));
    }
    let lake = c.lake_dir();
    assert_eq!(table_rows(&lake, "node_facts", Some(&run.run_id)), 3);
    assert_eq!(table_rows(&lake, "runs", Some(&run.run_id)), 1);
    // On demand: no cron instant; it counts at its submission.
    let (scheduled, logical, submitted) = run_times(&lake, &run.run_id);
    assert_eq!((scheduled, logical), (None, Some(submitted)));
    assert_eq!(table_rows(&lake, "raw_files", Some(&run.run_id)), 9);
    // Nothing is left in staging (deleted right after each commit's transaction).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while lake.join("_staging").exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !lake.join("_staging").exists(),
        "staging is removed after the commits"
    );
    // The run's day is its UTC day on the coordinator's clock: in the
    // month's directory and the file name.
    let runs = table_files(&lake, "runs", Some(&run.run_id));
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(
        runs[0].starts_with(lake.join("tables/runs/year=2026/month=11"))
            && runs[0].to_string_lossy().contains("/part-2026-11-23-"),
        "{runs:?}"
    );
    // ListTables reports what landed.
    let t = c
        .cluster()
        .list_tables(pb::ListTablesRequest {})
        .await
        .unwrap()
        .into_inner();
    let nf = t.tables.iter().find(|t| t.name == "node_facts").unwrap();
    assert_eq!((nf.files, nf.rows), (3, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schedules_fire_and_catch_up_by_policy() {
    let c = cluster3().await;
    let mk = |name: &str, cron: &str, catch_up: pb::CatchUp, max: u32| pb::CreateScheduleRequest {
        schedule: Some(pb::Schedule {
            name: name.into(),
            cron: cron.into(),
            time_zone: "Europe/Berlin".into(),
            catch_up: catch_up as i32,
            max_catch_up: max,
            allow_overlap: true,
            spec: Some(pb::BenchmarkSpec {
                benchmark: "sleep".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    let mut s = c.schedules();
    let every5 = s
        .create_schedule(mk("latest", "*/5 * * * *", pb::CatchUp::Latest, 0))
        .await
        .unwrap()
        .into_inner();
    s.create_schedule(mk("all", "*/5 * * * *", pb::CatchUp::All, 3))
        .await
        .unwrap();
    s.create_schedule(mk("none", "*/5 * * * *", pb::CatchUp::None, 0))
        .await
        .unwrap();
    assert_eq!(every5.next_fire_ms, T0 + 5 * 60_000);

    // On time: each schedule fires once.
    c.advance(5 * 60_000);
    let r = c.tick();
    assert_eq!(r.fired.len(), 3, "{r:?}");
    // An hour with the coordinator "down": 12 instants missed, the last 90 s late.
    c.advance(60 * 60_000 + 90_000);
    let r = c.tick();
    let runs = c
        .runs()
        .list_runs(pb::ListRunsRequest {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .runs;
    let count = |name: &str| {
        let id =
            futures::executor::block_on(c.schedules().list_schedules(pb::ListSchedulesRequest {}))
                .unwrap()
                .into_inner()
                .schedules
                .into_iter()
                .find(|s| s.name == name)
                .unwrap()
                .schedule_id;
        runs.iter().filter(|r| r.schedule_id == id).count()
    };
    assert_eq!(r.fired.len(), 1 + 3, "{r:?}");
    assert_eq!(count("latest"), 2);
    assert_eq!(count("all"), 4);
    assert_eq!(count("none"), 1, "late instants are skipped");
    // The catch-up run of `latest` stands for the most recent instant.
    let latest_runs: Vec<_> = runs
        .iter()
        .filter(|r| r.schedule_id == every5.schedule_id)
        .collect();
    assert!(
        latest_runs
            .iter()
            .any(|r| r.scheduled_for_ms == T0 + 65 * 60_000),
        "{latest_runs:?}"
    );

    // Pause stops firing; resume skips what passed meanwhile.
    s.pause_schedule(pb::PauseScheduleRequest {
        schedule_id: "latest".into(),
        paused: true,
    })
    .await
    .unwrap();
    c.advance(10 * 60_000);
    let r = c.tick();
    assert_eq!(r.fired.len(), 2, "{r:?}");
    let resumed = s
        .pause_schedule(pb::PauseScheduleRequest {
            schedule_id: "latest".into(),
            paused: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resumed.next_fire_ms > c.clock_now());
    // Manual trigger and backfill.
    let t = s
        .trigger_schedule(pb::TriggerScheduleRequest {
            schedule_id: "latest".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(t.scheduled_for_ms, c.clock_now());
    let b = s
        .backfill(pb::BackfillRequest {
            schedule_id: "none".into(),
            from_ms: T0 - 3_600_000,
            to_ms: T0,
            max_runs: 100,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(b.runs.len(), 12);
    assert!(
        b.runs
            .iter()
            .all(|r| r.scheduled_for_ms < T0 && r.scheduled_for_ms >= T0 - 3_600_000)
    );
    let e = s
        .backfill(pb::BackfillRequest {
            schedule_id: "none".into(),
            from_ms: T0 - 3_600_000,
            to_ms: T0,
            max_runs: 5,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    s.delete_schedule(pb::DeleteScheduleRequest {
        schedule_id: "none".into(),
    })
    .await
    .unwrap();
    let e = s
        .delete_schedule(pb::DeleteScheduleRequest {
            schedule_id: "none".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_fires_are_skipped_unless_allowed() {
    let c = cluster3().await;
    c.schedules()
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(pb::Schedule {
                name: "slow".into(),
                cron: "* * * * *".into(),
                time_zone: "UTC".into(),
                spec: Some(pb::BenchmarkSpec {
                    benchmark: "sleep".into(),
                    params: [("seconds".to_string(), "30".to_string())].into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    c.advance_with_heartbeats(60_000).await;
    assert_eq!(c.tick().fired.len(), 1);
    c.advance_with_heartbeats(60_000).await;
    assert_eq!(c.tick().fired.len(), 0, "the first run is still active");
    let e = c
        .schedules()
        .trigger_schedule(pb::TriggerScheduleRequest {
            schedule_id: "slow".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
}

/// Queued runs of one schedule are placed one after another: a run that has
/// tasks follows a run that has ended. Read from the last run back, so a
/// hand-over between two reads cannot make an ordered queue look unordered.
async fn placed_one_after_another(c: &Cluster, ids: &[String]) {
    let mut later_placed = false;
    for id in ids.iter().rev() {
        let d = c.detail(id).await;
        let ended = matches!(
            state(&d),
            pb::RunState::Succeeded | pb::RunState::Failed | pb::RunState::Cancelled
        );
        if later_placed {
            assert!(
                ended,
                "a later run was placed while {id} had not ended: {d:#?}"
            );
        }
        if d.tasks.is_empty() {
            assert_eq!(state(&d), pb::RunState::Pending, "{d:#?}");
        }
        later_placed = !d.tasks.is_empty();
    }
}

/// Issue 18 item 8: backfilled runs of a schedule without `allow_overlap`
/// queue one after another in date order (each placed only when the previous
/// one has ended, its record included); with `allow_overlap` they start
/// together.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backfilled_runs_queue_one_after_another_unless_overlap_is_allowed() {
    let c = cluster3().await;
    let mk = |name: &str, overlap: bool| pb::CreateScheduleRequest {
        schedule: Some(pb::Schedule {
            name: name.into(),
            cron: "0 2 * * *".into(),
            time_zone: "UTC".into(),
            allow_overlap: overlap,
            spec: Some(pb::BenchmarkSpec {
                benchmark: "hostinfo".into(),
                nodes: Some(pb::NodeSelector {
                    names: vec!["a1".into()],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    let mut s = c.schedules();
    s.create_schedule(mk("serial", false)).await.unwrap();
    s.create_schedule(mk("overlapping", true)).await.unwrap();
    let day = 86_400_000;
    let backfill = |name: &str| pb::BackfillRequest {
        schedule_id: name.into(),
        from_ms: T0 - 3 * day,
        to_ms: T0,
        max_runs: 10,
    };
    let b = s.backfill(backfill("serial")).await.unwrap().into_inner();
    assert_eq!(b.runs.len(), 3);
    let ids: Vec<String> = b.runs.iter().map(|r| r.run_id.clone()).collect();
    let mut instants: Vec<i64> = b.runs.iter().map(|r| r.scheduled_for_ms).collect();
    assert!(instants.is_sorted(), "{instants:?}");
    instants.dedup();
    assert_eq!(instants.len(), 3);
    // Only the first run has tasks; the later ones wait without any (or,
    // on a quick machine, the first has already ended and handed on).
    assert_eq!(c.detail(&ids[0]).await.tasks.len(), 1);
    placed_one_after_another(&c, &ids).await;
    // Each ends before the next is placed (the clock moves on between them,
    // so the times are distinct).
    let mut settled = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let d = c.wait_settled(id, 60).await;
        assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
        if let Some(next) = ids.get(i + 1) {
            let n = c.detail(next).await;
            assert_eq!(n.tasks.len(), 1, "the next run is placed once {id} ended");
            placed_one_after_another(&c, &ids[i + 1..]).await;
        }
        settled.push(d.run.unwrap());
        c.advance(1_000);
    }
    // The `runs` rows carry the night each run stands for, not the moment
    // it was backfilled (the dashboard's I/O trends plot them by it).
    for r in &settled {
        let (scheduled, logical, submitted) = run_times(&c.lake_dir(), &r.run_id);
        assert_eq!(scheduled, Some(r.scheduled_for_ms * 1000));
        assert_eq!(logical, scheduled);
        assert!(submitted > r.scheduled_for_ms * 1000, "backfilled later");
    }
    for w in settled.windows(2) {
        assert!(
            w[1].started_at_ms >= w[0].finished_at_ms && w[0].finished_at_ms > 0,
            "runs overlap: {:?} then {:?}",
            (w[0].started_at_ms, w[0].finished_at_ms),
            (w[1].started_at_ms, w[1].finished_at_ms)
        );
        assert!(w[0].scheduled_for_ms < w[1].scheduled_for_ms, "date order");
    }
    // The nightly instant is skipped while a backfilled run waits: covered by
    // `overlapping_fires_are_skipped_unless_allowed`; with overlap allowed the
    // three start together.
    let b = s
        .backfill(backfill("overlapping"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(b.runs.len(), 3);
    for r in &b.runs {
        assert_eq!(c.detail(&r.run_id).await.tasks.len(), 1, "{r:?}");
    }
    for r in &b.runs {
        let d = c.wait_settled(&r.run_id, 60).await;
        assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    }
}

/// Cancelling the active run of a schedule starts its next queued run; a
/// queued run cancelled before it started never gets tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_run_hands_the_schedule_to_its_next_queued_run() {
    let c = cluster3().await;
    c.schedules()
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(pb::Schedule {
                name: "slow".into(),
                cron: "0 2 * * *".into(),
                time_zone: "UTC".into(),
                spec: Some(pb::BenchmarkSpec {
                    benchmark: "sleep".into(),
                    params: [("seconds".to_string(), "30".to_string())].into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let b = c
        .schedules()
        .backfill(pb::BackfillRequest {
            schedule_id: "slow".into(),
            from_ms: T0 - 3 * 86_400_000,
            to_ms: T0,
            max_runs: 10,
        })
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<String> = b.runs.iter().map(|r| r.run_id.clone()).collect();
    assert_eq!(ids.len(), 3);
    let cancel = |id: &str| pb::CancelRunRequest {
        run_id: id.into(),
        reason: "test".into(),
    };
    // The second (queued) one first: it ends without tasks.
    c.runs().cancel_run(cancel(&ids[1])).await.unwrap();
    let d = c.detail(&ids[1]).await;
    assert_eq!(state(&d), pb::RunState::Cancelled, "{d:#?}");
    assert!(d.tasks.is_empty());
    assert!(
        c.detail(&ids[2]).await.tasks.is_empty(),
        "the first still runs"
    );
    // Then the first: the third is placed at once.
    c.runs().cancel_run(cancel(&ids[0])).await.unwrap();
    let d = c.detail(&ids[2]).await;
    assert_eq!(d.tasks.len(), 1, "{d:#?}");
    c.runs().cancel_run(cancel(&ids[2])).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_agent_loses_its_task_and_it_is_retried_elsewhere() {
    let mut c = cluster3().await;
    let run = c.submit("sleep", &[("seconds", "2")], 1).await.unwrap();
    let d = c
        .wait_run(&run.run_id, 20, |d| {
            d.tasks[0].state == pb::TaskState::Running as i32
        })
        .await;
    let first = d.tasks[0].agent.clone();
    c.stop_agent(&first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Past the lease: the silent agent is LOST (the others heartbeat at the new
    // time) and the task goes back to the queue.
    c.advance(10_001);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = c.tick();
    assert_eq!(r.lost_agents, vec![first.clone()]);
    assert_eq!(r.expired_tasks, 1);
    let d = c.detail(&run.run_id).await;
    assert_eq!(d.tasks[0].attempt, 2);
    assert_ne!(d.tasks[0].agent, first, "retried on another agent");
    assert!(
        d.tasks[0].error.contains("lease expired"),
        "{:?}",
        d.tasks[0].error
    );
    let d = c.wait_settled(&run.run_id, 30).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let agents = c
        .cluster()
        .list_agents(pb::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .agents;
    assert_eq!(
        agents.iter().find(|a| a.name == first).unwrap().state,
        "LOST"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attempts_run_out_and_the_run_fails_with_the_reason() {
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_agent("solo", None).await;
    c.add_worker("w1", None);
    let run = c
        .submit_spec(pb::BenchmarkSpec {
            benchmark: "sleep".into(),
            params: [("seconds".to_string(), "60".to_string())].into(),
            nodes: Some(pb::NodeSelector {
                names: vec!["solo".into()],
                ..Default::default()
            }),
            max_attempts: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    c.wait_run(&run.run_id, 20, |d| {
        d.tasks[0].state == pb::TaskState::Running as i32
    })
    .await;
    c.stop_agent("solo");
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.advance(10_001);
    c.tick();
    let d = c.wait_settled(&run.run_id, 20).await;
    assert_eq!(state(&d), pb::RunState::Failed);
    assert!(d.run.unwrap().error.contains("stopped heartbeating"));
    assert_eq!(
        table_rows(&c.lake_dir(), "runs", Some(&run.run_id)),
        1,
        "a failed run is recorded too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drained_agents_get_no_new_tasks() {
    let c = cluster3().await;
    let mut cl = c.cluster();
    let a = cl
        .drain_agent(pb::DrainAgentRequest {
            name: "a3".into(),
            undrain: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(a.state.starts_with("DRAIN"), "{a:?}");
    let e = c.submit("sleep", &[], 3).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
    assert!(e.message().contains("2 eligible"), "{e}");
    let run = c.submit("sleep", &[], 2).await.unwrap();
    let d = c.wait_settled(&run.run_id, 30).await;
    assert!(d.tasks.iter().all(|t| t.agent != "a3"));
    let agents = cl
        .list_agents(pb::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .agents;
    assert_eq!(
        agents.iter().find(|a| a.name == "a3").unwrap().state,
        "DRAINED"
    );
    cl.drain_agent(pb::DrainAgentRequest {
        name: "a3".into(),
        undrain: true,
    })
    .await
    .unwrap();
    let run = c.submit("sleep", &[], 3).await.unwrap();
    assert_eq!(
        state(&c.wait_settled(&run.run_id, 30).await),
        pb::RunState::Succeeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_kills_the_benchmark_and_records_the_run() {
    let c = cluster3().await;
    let run = c.submit("sleep", &[("seconds", "120")], 2).await.unwrap();
    c.wait_run(&run.run_id, 20, |d| {
        d.tasks
            .iter()
            .all(|t| t.state == pb::TaskState::Running as i32)
    })
    .await;
    let started = std::time::Instant::now();
    let r = c
        .runs()
        .cancel_run(pb::CancelRunRequest {
            run_id: run.run_id.clone(),
            reason: "maintenance".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.state, pb::RunState::Cancelled as i32);
    let d = c.wait_settled(&run.run_id, 20).await;
    assert!(
        d.tasks
            .iter()
            .all(|t| t.state == pb::TaskState::Cancelled as i32)
    );
    assert!(d.run.as_ref().unwrap().error.contains("maintenance"));
    // The agents stop the processes (heartbeat or progress tells them) and poll again:
    // a new run is placed on them promptly.
    let next = c.submit("sleep", &[], 3).await.unwrap();
    assert_eq!(
        state(&c.wait_settled(&next.run_id, 20).await),
        pb::RunState::Succeeded
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(table_rows(&c.lake_dir(), "runs", Some(&run.run_id)), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rerun_failed_reruns_only_the_failed_tasks() {
    let c = cluster3().await;
    let run = c.submit("rank0-only", &[], 3).await.unwrap();
    let d = c.wait_settled(&run.run_id, 30).await;
    assert_eq!(state(&d), pb::RunState::Failed);
    let failed: Vec<_> = d
        .tasks
        .iter()
        .filter(|t| t.state == pb::TaskState::Failed as i32)
        .collect();
    assert_eq!(failed.len(), 2);
    assert!(
        failed
            .iter()
            .all(|t| t.exit_code == 1 && t.error.contains("exited with code 1"))
    );
    let again = c
        .runs()
        .rerun_failed(pb::RerunFailedRequest {
            run_id: run.run_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let d2 = c.wait_settled(&again.run_id, 30).await;
    assert_eq!(d2.tasks.len(), 2);
    let mut ranks: Vec<_> = d2.tasks.iter().map(|t| (t.rank, t.agent.clone())).collect();
    ranks.sort();
    let mut want: Vec<_> = failed.iter().map(|t| (t.rank, t.agent.clone())).collect();
    want.sort();
    assert_eq!(ranks, want, "same ranks on the same agents");
    let ok = c.submit("sleep", &[], 1).await.unwrap();
    c.wait_settled(&ok.run_id, 30).await;
    let e = c
        .runs()
        .rerun_failed(pb::RerunFailedRequest { run_id: ok.run_id })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_that_stops_renewing_loses_its_job_without_duplicating_rows() {
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_agent("a1", None).await;
    let run = c.submit("hostinfo", &[], 1).await.unwrap();
    let d = c.wait_run(&run.run_id, 30, |d| !d.jobs.is_empty()).await;
    assert_eq!(d.jobs[0].kind, "ingest");
    // A "worker" leases the ingest job and goes silent.
    let mut ghost = c.workers_client(None);
    let lease = |kinds: Vec<String>| pb::LeaseJobRequest {
        protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
        worker: "ghost".into(),
        kinds,
        wait_ms: 0,
    };
    let job = ghost
        .lease_job(lease(vec!["ingest".into()]))
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    c.advance(10_001);
    let r = c.tick();
    assert_eq!(r.expired_jobs, 1);
    // Its late completion is refused; a real worker finishes the job.
    let e = ghost
        .complete_job(pb::CompleteJobRequest {
            job_id: job.job_id.clone(),
            lease_id: job.lease_id.clone(),
            files: vec![],
            result_json: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Aborted, "{e}");
    c.add_worker("w1", None);
    let d = c.wait_settled(&run.run_id, 30).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let ingest = d.jobs.iter().find(|j| j.kind == "ingest").unwrap();
    assert_eq!(ingest.attempt, 2);
    assert_eq!(
        table_rows(&c.lake_dir(), "node_facts", Some(&run.run_id)),
        1
    );
    // A worker with the wrong protocol version is refused clearly.
    let mut bad = lease(vec![]);
    bad.protocol_version = 99;
    let e = ghost.lease_job(bad).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(e.message().contains("protocol_version"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_is_refused_with_the_field_named() {
    let c = cluster3().await;
    let e = c.submit("nope", &[], 1).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("spec.benchmark") && e.message().contains("nope"),
        "{e}"
    );
    let e = c
        .submit("sleep", &[("seconds", "601")], 1)
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("spec.params.seconds") && e.message().contains("maximum"),
        "{e}"
    );
    let e = c
        .submit("sleep", &[("seconds", "1; rm -rf /")], 1)
        .await
        .unwrap_err();
    assert!(e.message().contains("spec.params.seconds"), "{e}");
    let e = c
        .submit("sleep", &[("colour", "red")], 1)
        .await
        .unwrap_err();
    assert!(
        e.message().contains("spec.params.colour") && e.message().contains("unknown parameter"),
        "{e}"
    );
    let e = c.submit("sleep", &[], 7).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    let e = c
        .runs()
        .get_run(pb::GetRunRequest {
            run_id: benchlake_core::ids::new_id(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    let e = c
        .runs()
        .get_run(pb::GetRunRequest {
            run_id: "../etc".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("run_id"), "{e}");
    let e = c
        .schedules()
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(pb::Schedule {
                name: "x".into(),
                cron: "61 * * * *".into(),
                spec: Some(pb::BenchmarkSpec {
                    benchmark: "sleep".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert!(e.message().contains("schedule.cron"), "{e}");
    let e = c
        .schedules()
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(pb::Schedule {
                name: "x".into(),
                cron: "0 2 * * *".into(),
                time_zone: "Mars/Olympus".into(),
                spec: Some(pb::BenchmarkSpec {
                    benchmark: "sleep".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert!(e.message().contains("schedule.time_zone"), "{e}");
    // Oversized requests are refused before they are decoded.
    let big = "x".repeat(20 << 20);
    let e = c
        .runs()
        .submit_run(pb::SubmitRunRequest {
            spec: Some(pb::BenchmarkSpec {
                benchmark: big,
                ..Default::default()
            }),
            idempotency_key: String::new(),
            notify: Vec::new(),
        })
        .await
        .unwrap_err();
    // RESOURCE_EXHAUSTED, as documented (tonic's decoder says OUT_OF_RANGE).
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
    // The idempotency key returns the same run.
    let k = |key: &str| pb::SubmitRunRequest {
        spec: Some(pb::BenchmarkSpec {
            benchmark: "sleep".into(),
            ..Default::default()
        }),
        idempotency_key: key.into(),
        notify: Vec::new(),
    };
    let r1 = c
        .runs()
        .submit_run(k("nightly-2026-11-23"))
        .await
        .unwrap()
        .into_inner();
    let r2 = c
        .runs()
        .submit_run(k("nightly-2026-11-23"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r1.run_id, r2.run_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn roles_are_enforced() {
    let tok = |s: &str| format!("{s}-token-0123456789");
    let tokens = Tokens {
        admin: vec![tok("admin")],
        user: vec![tok("user")],
        agent: vec![tok("agent")],
        worker: vec![tok("worker")],
    };
    let mut c = Cluster::start(tokens).await;
    c.token = Some(tok("admin"));
    c.add_agent("a1", Some(&tok("agent"))).await;
    c.add_worker("w1", Some(&tok("worker")));
    // No token, a wrong token.
    c.token = None;
    let e = c.submit("sleep", &[], 1).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    c.token = Some("not-a-real-token-at-all".into());
    assert_eq!(
        c.submit("sleep", &[], 1).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    // An agent token cannot submit runs; a user token cannot register agents.
    c.token = Some(tok("agent"));
    assert_eq!(
        c.submit("sleep", &[], 1).await.unwrap_err().code(),
        tonic::Code::PermissionDenied
    );
    let mut ag = c.agents_client(Some(&tok("user")));
    let e = ag
        .register(pb::RegisterRequest {
            protocol_version: 1,
            name: "evil".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let mut wk = c.workers_client(Some(&tok("user")));
    let e = wk
        .lease_job(pb::LeaseJobRequest {
            protocol_version: 1,
            worker: "x".into(),
            kinds: vec![],
            wait_ms: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    // A user submits; draining is for admins.
    c.token = Some(tok("user"));
    let run = c.submit("sleep", &[], 1).await.unwrap();
    assert_eq!(
        state(&c.wait_settled(&run.run_id, 30).await),
        pb::RunState::Succeeded
    );
    let e = c
        .cluster()
        .drain_agent(pb::DrainAgentRequest {
            name: "a1".into(),
            undrain: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    c.token = Some(tok("admin"));
    c.cluster()
        .drain_agent(pb::DrainAgentRequest {
            name: "a1".into(),
            undrain: false,
        })
        .await
        .unwrap();
    // A mismatched protocol version is refused with a clear status.
    let mut ag = c.agents_client(Some(&tok("agent")));
    let e = ag
        .register(pb::RegisterRequest {
            protocol_version: 7,
            name: "old".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(e.message().contains("protocol_version: 7"), "{e}");
}

/// `schedule edit` changes a schedule in place: its id and its runs stay,
/// only what is given changes, and a refused value changes nothing (issue
/// 35, item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_schedule_is_edited_in_place_and_keeps_its_runs() {
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_agent("a1", None).await;
    let mut s = c.schedules();
    let created = s
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(pb::Schedule {
                name: "nightly".into(),
                cron: "0 2 * * *".into(),
                time_zone: "Europe/Berlin".into(),
                spec: Some(bench_spec("sleep", &[("seconds", "0")])),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let b = s
        .backfill(pb::BackfillRequest {
            schedule_id: "nightly".into(),
            from_ms: T0 - 3 * 86_400_000,
            to_ms: T0,
            max_runs: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(b.runs.len(), 3);
    let edit = |args: &[&str]| {
        let out = std::process::Command::new(bin())
            .args(["schedule", "edit", "nightly", "--coordinator", &c.addr])
            .args(args)
            .env_remove("BENCHLAKE_CONFIG")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = edit(&[
        "--cron",
        "30 3 * * *",
        "--tz",
        "UTC",
        "-p",
        "seconds=1",
        "--drain-failing",
        "dry-run",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("30 3 * * *") && out.contains("drain-failing dry-run"),
        "{out}"
    );
    let find = |all: Vec<pb::Schedule>| all.into_iter().find(|x| x.name == "nightly").unwrap();
    let after = find(
        s.list_schedules(pb::ListSchedulesRequest {})
            .await
            .unwrap()
            .into_inner()
            .schedules,
    );
    assert_eq!(after.schedule_id, created.schedule_id);
    assert_eq!(
        (after.cron.as_str(), after.time_zone.as_str()),
        ("30 3 * * *", "UTC")
    );
    assert_eq!(after.spec.as_ref().unwrap().params["seconds"], "1");
    assert_eq!(after.node_action, pb::NodeAction::DryRun as i32);
    let runs = c
        .runs()
        .list_runs(pb::ListRunsRequest {
            schedule_id: created.schedule_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .runs;
    assert_eq!(runs.len(), 3, "the history stays the schedule's");
    // `schedule list` shows the benchmark and the newest run's state and verdict.
    let out = std::process::Command::new(bin())
        .args(["schedule", "list", "--coordinator", &c.addr])
        .env_remove("BENCHLAKE_CONFIG")
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    let line = list
        .lines()
        .find(|l| l.contains("nightly"))
        .unwrap_or_default();
    assert!(
        line.contains(" sleep ") && line.contains("  last "),
        "{list}"
    );
    // `run show` names the schedule, not only its id.
    assert_eq!(c.detail(&runs[0].run_id).await.schedule_name, "nightly");
    let out = std::process::Command::new(bin())
        .args(["run", "show", &runs[0].run_id, "--coordinator", &c.addr])
        .env_remove("BENCHLAKE_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "schedule   nightly ({}) for ",
            created.schedule_id
        )) && text.contains(" UTC"),
        "{text}"
    );
    // A refused value changes nothing, the cron given with it included.
    let (code, _, err) = edit(&["--cron", "0 2 * * *", "-p", "seconds=-5"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("seconds"), "{err}");
    let again = find(
        s.list_schedules(pb::ListSchedulesRequest {})
            .await
            .unwrap()
            .into_inner()
            .schedules,
    );
    assert_eq!(again.cron, "30 3 * * *");
}

/// Every row of `table` of `run_id` under a local lake, each as its columns'
/// values joined by `|`, sorted.
fn rows_as_text(lake: &std::path::Path, table: &str, run_id: &str) -> Vec<String> {
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    let mut rows = Vec::new();
    for b in table_batches(lake, table, Some(run_id)) {
        let opts = FormatOptions::default();
        // Timestamps without their zone (the formatter knows offsets only).
        let plain: Vec<arrow::array::ArrayRef> = b
            .columns()
            .iter()
            .map(|c| match c.data_type() {
                arrow::datatypes::DataType::Timestamp(u, Some(_)) => {
                    arrow::compute::cast(c, &arrow::datatypes::DataType::Timestamp(*u, None))
                        .unwrap()
                }
                _ => c.clone(),
            })
            .collect();
        let cols: Vec<ArrayFormatter> = plain
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for i in 0..b.num_rows() {
            let r: Vec<String> = cols.iter().map(|c| c.value(i).to_string()).collect();
            rows.push(r.join("|"));
        }
    }
    rows.sort();
    rows
}

/// Every file under `dir`, recursively, relative to it, with its size.
fn files_under(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().to_string();
                out.push((rel, e.metadata().unwrap().len()));
            }
        }
    }
    out.sort();
    out
}

/// Issue 40, item 4: a hostinfo run of three nodes ends with one raw object
/// (`raw/RUN/bundle.tar.zst`) instead of nine (host.json, stdout, stderr
/// per node); the state store, `run show`'s outputs and `raw_files` name
/// the bundle; the offline `benchlake ingest` of the bundle and the worker's
/// ingest job run again over a lake holding only the bundle give the same
/// `node_facts` rows as the run's own ingest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostinfo_run_keeps_one_raw_object_and_reingests_from_it() {
    let c = cluster3().await;
    let run = c.submit("hostinfo", &[], 3).await.unwrap();
    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let lake = c.lake_dir();
    let bundle = format!("raw/{}/bundle.tar.zst", run.run_id);
    // One raw object for the run, and nothing else under raw/.
    let raw = files_under(&lake.join("raw"));
    assert_eq!(raw.len(), 1, "{raw:?}");
    assert_eq!(raw[0].0, format!("{}/bundle.tar.zst", run.run_id));
    let bundle_bytes = raw[0].1;
    // The state store records it on every output (GetRun reads the store).
    let outputs: Vec<&pb::RawFile> = d.tasks.iter().flat_map(|t| &t.outputs).collect();
    assert_eq!(outputs.len(), 9);
    assert!(outputs.iter().all(|o| o.bundle == bundle), "{outputs:#?}");
    let member_bytes: u64 = outputs.iter().map(|o| o.bytes).sum();
    eprintln!("3 nodes: 9 raw objects of {member_bytes} bytes -> 1 bundle of {bundle_bytes} bytes");
    // raw_files keeps a row per file, each naming the bundle.
    let rf = rows_as_text(&lake, "raw_files", &run.run_id);
    assert_eq!(rf.len(), 9);
    assert!(
        rf.iter().all(|r| r.contains(&format!("|{bundle}|"))),
        "{rf:#?}"
    );
    // The bundle holds the nine files as they were uploaded.
    let data = std::fs::read(lake.join(&bundle)).unwrap();
    let members = benchlake_core::lake::bundle::read(&bundle, &data, |_, _| Ok(())).unwrap();
    let mut got: Vec<(String, u64, String)> = members
        .into_iter()
        .map(|m| (m.key, m.bytes, m.sha256))
        .collect();
    let mut want: Vec<(String, u64, String)> = outputs
        .iter()
        .map(|o| (o.key.clone(), o.bytes, o.sha256.clone()))
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);

    let facts = rows_as_text(&lake, "node_facts", &run.run_id);
    assert_eq!(facts.len(), 3, "{facts:#?}");
    let key = table_files(&lake, "node_facts", Some(&run.run_id))[0]
        .strip_prefix(&lake)
        .unwrap()
        .to_string_lossy()
        .to_string();
    let date = benchlake_core::layout::parse_table_key(&key)
        .unwrap()
        .date
        .to_string();

    // Offline re-ingest of the bundle: the same rows.
    let out = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(bin())
        .args(["ingest", "hostinfo"])
        .arg(lake.join(&bundle))
        .arg("--out")
        .arg(out.path())
        .args(["--run-id", &run.run_id, "--date", &date])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(rows_as_text(out.path(), "node_facts", &run.run_id), facts);

    // The worker's ingest jobs, run again over a lake holding only the
    // bundle (their raw objects are gone): the same rows.
    let again = tempfile::tempdir().unwrap();
    let copy = again.path().join(&bundle);
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(lake.join(&bundle), &copy).unwrap();
    let lake2 = benchlake_core::lake::Lake::local(again.path()).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Handle::current();
    let ingests: Vec<&pb::Job> = d.jobs.iter().filter(|j| j.kind == "ingest").collect();
    assert_eq!(ingests.len(), 3);
    tokio::task::block_in_place(|| {
        for j in &ingests {
            benchlake_worker::local::run(
                &lake2,
                &rt,
                scratch.path(),
                benchlake_worker::local::LocalJob {
                    job_id: j.job_id.clone(),
                    run_id: run.run_id.clone(),
                    run_date: date.clone(),
                    spec_json: j.spec_json.clone(),
                    executor: &benchlake_worker::executors::Ingest,
                },
            )
            .unwrap();
        }
    });
    assert_eq!(rows_as_text(again.path(), "node_facts", &run.run_id), facts);
}
