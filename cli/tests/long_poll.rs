//! `PollTask` as a long poll (issue 40): an agent's poll waits up to
//! `wait_ms` and is answered as soon as a task is queued for it, so a queued
//! backfill's next run starts when the previous one ends, not at the agent's
//! next poll. Real gRPC on loopback, in process (see `common`).
mod common;

use std::time::{Duration, Instant};

use benchlake_coordinator::Tokens;
use benchlake_proto::v1 as pb;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_poll_is_answered_when_a_task_is_queued() {
    let c = Cluster::start(Tokens::default()).await;
    let mut cfg = benchlake_agent::AgentConfig::new(&c.addr, c.dir.path().join("lp")).unwrap();
    cfg.name = "lp".into();
    cfg.catalog = benchlake_core::bench::Catalog::from_toml(&catalog(&bin())).unwrap();
    let mut ag = c.agents_client(None);
    ag.register(benchlake_agent::register_request(&cfg))
        .await
        .unwrap();
    let req = |wait_ms| pb::PollTaskRequest {
        name: "lp".into(),
        free_slots: 1,
        wait_ms,
    };
    // Nothing queued: without wait_ms the answer comes at once, with it
    // after the wait.
    let t = Instant::now();
    let r = ag.poll_task(req(0)).await.unwrap().into_inner();
    assert!(r.task.is_none());
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let r = ag.poll_task(req(800)).await.unwrap().into_inner();
    assert!(r.task.is_none());
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(750) && waited < Duration::from_millis(3000),
        "{waited:?}"
    );
    // A poll waiting up to 5 s, and a run submitted 300 ms into it: the
    // poll is answered with the run's task when the submit commits.
    let mut ag2 = ag.clone();
    let t = Instant::now();
    let poll = tokio::spawn(async move { ag2.poll_task(req(5000)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let run = c.submit("sleep", &[("seconds", "0")], 1).await.unwrap();
    let got = poll.await.unwrap().unwrap().into_inner();
    let answered = t.elapsed();
    let task = got.task.expect("the poll is answered with the task");
    assert_eq!(task.run_id, run.run_id);
    assert!(
        answered < Duration::from_millis(2500),
        "answered after {answered:?}, not when the task was queued"
    );
}
