//! Agents and workers ride out a coordinator outage (issue 13, item 6): the
//! coordinator's server is stopped while tasks run, a new coordinator starts
//! on the same address over the same state file and lake a few seconds later,
//! and the runs still succeed with their rows in the lake exactly once. Real
//! gRPC on loopback, in process (see `common`).
mod common;

use std::time::{Duration, Instant};

use benchlake_coordinator::Tokens;
use benchlake_proto::v1 as pb;
use common::*;

/// `hostinfo` that first sleeps, so its output is uploaded during the outage.
fn slow_hostinfo(bin: &str) -> String {
    format!(
        r#"
[[benchmark]]
name = "slow-hostinfo"
kind = "noop"
command = ["sh", "-c", "sleep 2 && exec \"$0\" probe host --out \"$1\"", "{bin}", "{{out_dir}}/host.json"]
timeout_s = 60
[[benchmark.output]]
file = "host.json"
format = "hostinfo"
required = true
"#
    )
}

fn task_states(d: &pb::RunDetail) -> Vec<pb::TaskState> {
    d.tasks
        .iter()
        .map(|t| pb::TaskState::try_from(t.state).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agents_and_workers_ride_out_a_coordinator_restart() {
    let t0 = Instant::now();
    let mut c = Cluster::start(Tokens::default()).await;
    let toml = catalog(&bin()) + &slow_hostinfo(&bin());
    c.add_agent_with("a1", |cfg| {
        cfg.catalog = benchlake_core::bench::Catalog::from_toml(&toml).unwrap();
        cfg.slots = 2;
    })
    .await;
    c.add_worker("w1", None);

    let sleep = c.submit("sleep", &[("seconds", "2")], 1).await.unwrap();
    let facts = c.submit("slow-hostinfo", &[], 1).await.unwrap();
    for r in [&sleep, &facts] {
        c.wait_run(&r.run_id, 30, |d| {
            task_states(d) == [pb::TaskState::Running]
        })
        .await;
    }

    // The outage: both benchmarks end, and their outputs are due for upload,
    // while nothing listens on the coordinator's address.
    let down = Instant::now();
    c.stop_coordinator().await;
    let stopped_in = down.elapsed();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    c.restart_coordinator(Tokens::default()).await;
    let outage = down.elapsed();

    let back = Instant::now();
    let ds = c.wait_settled(&sleep.run_id, 120).await;
    let df = c.wait_settled(&facts.run_id, 120).await;
    let settled_after = back.elapsed();
    eprintln!(
        "server stopped in {stopped_in:?}; outage {outage:?}; runs settled {settled_after:?} after the restart; test {:?}",
        t0.elapsed()
    );
    for d in [&ds, &df] {
        assert_eq!(state(d), pb::RunState::Succeeded, "{d:#?}");
        // Ridden out: the first attempt of each task succeeded, nothing was retried.
        assert_eq!(d.tasks.len(), 1);
        let t = &d.tasks[0];
        assert_eq!(
            (pb::TaskState::try_from(t.state).unwrap(), t.attempt),
            (pb::TaskState::Done, 1),
            "{t:#?}"
        );
        assert!(d.jobs.iter().all(|j| j.state == pb::JobState::Done as i32));
    }
    // Outputs uploaded once each (host.json, stdout.txt, stderr.txt).
    let names = |d: &pb::RunDetail| {
        let mut n: Vec<String> = d.tasks[0]
            .outputs
            .iter()
            .map(|o| o.key.rsplit('/').next().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&df), ["host.json", "stderr.txt", "stdout.txt"]);
    assert_eq!(names(&ds), ["stderr.txt", "stdout.txt"]);

    // The rows landed exactly once.
    let lake = c.lake_dir();
    assert_eq!(table_rows(&lake, "node_facts", Some(&facts.run_id)), 1);
    assert_eq!(table_rows(&lake, "runs", Some(&facts.run_id)), 1);
    assert_eq!(table_rows(&lake, "runs", Some(&sleep.run_id)), 1);
    assert_eq!(table_rows(&lake, "raw_files", Some(&facts.run_id)), 3);
    assert_eq!(table_rows(&lake, "raw_files", Some(&sleep.run_id)), 2);
}

/// A task whose PollTask reply never reached the agent (the coordinator
/// committed the lease, the answer was lost): the agent keeps heartbeating
/// without it, and when the lease ends the task is retried instead of being
/// extended for ever because its agent is alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_whose_lease_reply_was_lost_is_retried() {
    let c = Cluster::start(Tokens::default()).await;
    let mut cfg = benchlake_agent::AgentConfig::new(&c.addr, c.dir.path().join("ghost")).unwrap();
    cfg.name = "ghost".into();
    cfg.catalog = benchlake_core::bench::Catalog::from_toml(&catalog(&bin())).unwrap();
    let mut ag = c.agents_client(None);
    ag.register(benchlake_agent::register_request(&cfg))
        .await
        .unwrap();
    let run = c.submit("sleep", &[("seconds", "1")], 1).await.unwrap();
    let lost = ag
        .poll_task(pb::PollTaskRequest {
            name: "ghost".into(),
            free_slots: 1,
            wait_ms: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .task
        .expect("the task is leased");
    // 12 s of heartbeats that do not list the task (the lease is 10 s).
    for _ in 0..12 {
        c.advance(1_000);
        ag.heartbeat(pb::HeartbeatRequest {
            name: "ghost".into(),
            running_task_ids: vec![],
        })
        .await
        .unwrap();
        c.tick();
    }
    let d = c.detail(&run.run_id).await;
    let t = &d.tasks[0];
    assert_eq!(t.task_id, lost.task_id);
    assert!(t.attempt >= 2, "{d:#?}");
    assert!(
        t.error.contains("heartbeats but does not run the task"),
        "{}",
        t.error
    );
}

/// An attempt whose outputs could not be handed in (the lake's disk full for
/// longer than `--retry-for`: issue 39, item 9) is not the benchmark's
/// failure: the agent completes it as retryable and the coordinator queues a
/// new attempt while attempts remain, then fails the task on the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attempt_whose_outputs_could_not_land_is_retried() {
    let c = Cluster::start(Tokens::default()).await;
    let mut cfg = benchlake_agent::AgentConfig::new(&c.addr, c.dir.path().join("full")).unwrap();
    cfg.name = "full".into();
    cfg.catalog = benchlake_core::bench::Catalog::from_toml(&catalog(&bin())).unwrap();
    let mut ag = c.agents_client(None);
    ag.register(benchlake_agent::register_request(&cfg))
        .await
        .unwrap();
    let run = c.submit("sleep", &[("seconds", "1")], 1).await.unwrap();
    let mut attempts = Vec::new();
    for _ in 0..10 {
        let Some(t) = ag
            .poll_task(pb::PollTaskRequest {
                name: "full".into(),
                free_slots: 1,
                wait_ms: 0,
            })
            .await
            .unwrap()
            .into_inner()
            .task
        else {
            // Backoff before the next attempt.
            c.advance(60_000);
            c.tick();
            continue;
        };
        attempts.push(t.attempt);
        ag.complete_task(pb::CompleteTaskRequest {
            task_id: t.task_id.clone(),
            lease_id: t.lease_id.clone(),
            success: false,
            retryable: true,
            exit_code: 0,
            error: "upload of host.json failed: lake: No space left on device (os error 28)".into(),
            ..Default::default()
        })
        .await
        .unwrap();
        if c.detail(&run.run_id).await.tasks[0].state == pb::TaskState::Failed as i32 {
            break;
        }
    }
    let d = c.detail(&run.run_id).await;
    assert_eq!(attempts, [1, 2, 3], "{d:#?}");
    let t = &d.tasks[0];
    assert_eq!(t.state, pb::TaskState::Failed as i32, "{d:#?}");
    // The run is failed (its record job writes the `runs` row next).
    assert!(
        matches!(state(&d), pb::RunState::Failed | pb::RunState::Processing),
        "{d:#?}"
    );
    assert_eq!(t.attempt, 3);
    assert!(t.error.contains("No space left on device"), "{}", t.error);
}

/// An agent whose coordinator never answers gives up registering once
/// `--retry-for` is spent (issue 39, item 8): it exits non-zero naming the
/// address instead of retrying for ever (a service manager restarts it).
#[test]
fn an_agent_stops_registering_when_retry_for_is_spent() {
    // A port nobody listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("http://127.0.0.1:{port}");
    let work = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_benchlake"))
        .args([
            "agent",
            "--coordinator",
            &addr,
            "--retry-for",
            "3s",
            "--name",
            "a1",
        ])
        .arg("--work-dir")
        .arg(work.path())
        .env_remove("BENCHLAKE_CONFIG")
        .env("BENCHLAKE_TOKEN", "t")
        .output()
        .unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("cannot register with the coordinator at {addr}"))
            && err.contains("--retry-for"),
        "{err}"
    );
    // Within the budget plus one attempt's connect time, not for ever.
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(20),
        "{took:?}"
    );
}

/// A user command whose coordinator does not answer names the address it
/// tried and where the address comes from (issue 35, item 9).
#[test]
fn an_unreachable_coordinator_is_named() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_benchlake"))
        .args(["run", "list", "--coordinator", &addr])
        .env_remove("BENCHLAKE_CONFIG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot reach the coordinator at {addr}"))
            && err.contains("BENCHLAKE_COORDINATOR"),
        "{err}"
    );
}
