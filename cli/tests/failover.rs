//! Coordinator address lists (`--coordinator a:7700,b:7700`): several
//! coordinators share one state database and only the leader listens, so a
//! client channel over the list connects to whichever address accepts, and
//! when that coordinator goes away the same channel finds the next one. Here
//! "the leader moves" is played with real coordinators, in process (see
//! `common`), over one state (a SQLite file, or with
//! `BENCHLAKE_TEST_STATE=postgres` one PostgreSQL database, where each
//! coordinator takes the lead as it starts and hands it on as it stops): the
//! one on B stops, then one on A starts (and later the reverse), while
//! clients, an agent and a worker keep their channels.
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use benchlake_coordinator::{Coordinator, CoordinatorConfig, Tokens};
use benchlake_core::clock::ManualClock;
use benchlake_proto::client::{Auth, ClientTls, channel_with};
use benchlake_proto::retry::RetryPolicy;
use benchlake_proto::v1 as pb;
use common::{
    T0, TestState, bin, catalog, config, open_coordinator, serve_coordinator, state, worker_config,
};
use tokio::sync::watch;

/// A loopback address nothing listens on (bound, then closed).
async fn dead_addr() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().to_string()
}

/// A coordinator serving on one address of the list.
struct Serving {
    coord: Arc<Coordinator>,
    stop: watch::Sender<bool>,
}

/// Starts a coordinator over `cfg`'s state file and lake on `addr` (retrying
/// the bind while the port is still held by a server that just stopped).
async fn serve_at(cfg: &CoordinatorConfig, clock: &ManualClock, addr: &str) -> Serving {
    let coord = open_coordinator(cfg.clone(), clock);
    let mut tries = 0;
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) if tries < 100 => {
                tries += 1;
                eprintln!("binding {addr}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("cannot bind {addr}: {e}"),
        }
    };
    let stop = serve_coordinator(coord.clone(), listener);
    Serving { coord, stop }
}

/// Stops `s`'s server (its listener closes, its connections are told to go
/// away) and waits until the coordinator is dropped, closing the state file.
async fn stop(s: Serving) {
    let _ = s.stop.send(true);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Arc::strong_count(&s.coord) > 1 {
        assert!(Instant::now() < deadline, "the coordinator did not stop");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

type Ch = tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Auth>;

/// The agents `cluster` lists, retried through a switch of coordinator.
async fn agents(cluster: &pb::cluster_service_client::ClusterServiceClient<Ch>) -> Vec<String> {
    RetryPolicy::new(Duration::from_secs(30))
        .call("list_agents", || {
            let mut c = cluster.clone();
            async move { c.list_agents(pb::ListAgentsRequest {}).await }
        })
        .await
        .unwrap()
        .into_inner()
        .agents
        .into_iter()
        .map(|a| a.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_channel_over_a_list_follows_the_coordinator_that_listens() {
    let dir = tempfile::tempdir().unwrap();
    let st = TestState::new();
    let cfg = config(dir.path(), &st, Tokens::default());
    let clock = ManualClock::new(T0);
    let a = dead_addr().await;
    let b = dead_addr().await;
    let on_b = serve_at(&cfg, &clock, &b).await;
    // A first: nothing listens there, so the channel goes on to B.
    let ch = channel_with(&format!("{a}, {b}"), &ClientTls::default()).unwrap();
    let auth = Auth::new(None).unwrap();
    let mut agent =
        pb::agent_service_client::AgentServiceClient::with_interceptor(ch.clone(), auth.clone());
    let cluster = pb::cluster_service_client::ClusterServiceClient::with_interceptor(ch, auth);
    agent
        .register(pb::RegisterRequest {
            protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
            name: "a1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(agents(&cluster).await, ["a1"]);

    // B goes away; A takes over the same state.
    stop(on_b).await;
    let down = Instant::now();
    let on_a = serve_at(&cfg, &clock, &a).await;
    // The same channel (its connection to B is gone) reconnects to A.
    assert_eq!(agents(&cluster).await, ["a1"]);
    eprintln!("served by A {:?} after B stopped", down.elapsed());
    agent
        .register(pb::RegisterRequest {
            protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
            name: "a2".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    // And back to B: the channel starts at A (the last that connected),
    // finds it gone, and goes around the list to B.
    stop(on_a).await;
    let _on_b = serve_at(&cfg, &clock, &b).await;
    let mut names = agents(&cluster).await;
    names.sort();
    assert_eq!(names, ["a1", "a2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_with_nothing_listening_names_every_address() {
    let (a, b, c) = (dead_addr().await, dead_addr().await, dead_addr().await);
    let list = format!("{a},http://{b},{c}");
    let ch = benchlake_proto::client::channel_with_wait(
        &list,
        &ClientTls::default(),
        Duration::from_millis(300),
    )
    .unwrap();
    let e = pb::cluster_service_client::ClusterServiceClient::new(ch)
        .list_agents(pb::ListAgentsRequest {})
        .await
        .unwrap_err();
    // UNAVAILABLE: what the retry policy retries.
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    let m = e.message();
    assert!(m.contains("any of the 3 addresses"), "{m}");
    for entry in [a, format!("http://{b}"), c] {
        assert!(m.contains(&format!("{entry}: ")), "{entry}: {m}");
    }
}

#[test]
fn a_list_mixing_http_and_https_is_refused() {
    let e = channel_with("https://coord1:7700,coord2:7700", &ClientTls::default()).unwrap_err();
    assert!(
        e.contains("'https://coord1:7700' is https:// but 'coord2:7700' is plaintext"),
        "{e}"
    );
    let e = channel_with("coord1:7700,,coord2:7700", &ClientTls::default()).unwrap_err();
    assert!(e.contains("entry 2 is empty"), "{e}");
    // The user commands say the same.
    let out = std::process::Command::new(bin())
        .args([
            "run",
            "list",
            "--coordinator",
            "http://c1:7700,https://c2:7700",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'https://c2:7700' is https:// but 'http://c1:7700' is plaintext"),
        "{err}"
    );
}

/// An agent and a worker given the list keep working when the coordinator
/// moves: a run submitted after the move lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_and_a_worker_given_a_list_follow_the_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let st = TestState::new();
    let cfg = config(dir.path(), &st, Tokens::default());
    let clock = ManualClock::new(T0);
    let a = dead_addr().await;
    let b = dead_addr().await;
    let list = format!("{a},{b}");
    let mut on = serve_at(&cfg, &clock, &b).await;

    let mut stops = Vec::new();
    let mut acfg =
        benchlake_agent::AgentConfig::new(&list, dir.path().join("work").join("a1")).unwrap();
    acfg.name = "a1".into();
    acfg.catalog = benchlake_core::bench::Catalog::from_toml(&catalog(&bin())).unwrap();
    acfg.poll_interval = Duration::from_millis(30);
    acfg.run_as = Some(benchlake_agent::contain::current_user_name());
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        if let Err(e) = benchlake_agent::run(acfg, rx).await {
            eprintln!("agent ended: {e}");
        }
    });
    stops.push(tx);
    let wcfg = worker_config(&list, "w1", dir.path());
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let _ = benchlake_worker::run(wcfg, benchlake_worker::Executors::builtin(), rx).await;
    });
    stops.push(tx);

    let ch = channel_with(&list, &ClientTls::default()).unwrap();
    let auth = Auth::new(None).unwrap();
    let cluster = pb::cluster_service_client::ClusterServiceClient::with_interceptor(
        ch.clone(),
        auth.clone(),
    );
    let runs = pb::run_service_client::RunServiceClient::with_interceptor(ch, auth);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !agents(&cluster).await.contains(&"a1".to_string()) {
        assert!(Instant::now() < deadline, "a1 did not register");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    for round in 0..2 {
        if round == 1 {
            // The coordinator moves from B to A.
            stop(on).await;
            on = serve_at(&cfg, &clock, &a).await;
        }
        let run = RetryPolicy::new(Duration::from_secs(30))
            .call("submit_run", || {
                let mut r = runs.clone();
                async move {
                    r.submit_run(pb::SubmitRunRequest {
                        spec: Some(common::bench_spec("hostinfo", &[])),
                        idempotency_key: format!("round-{round}"),
                        notify: Vec::new(),
                    })
                    .await
                }
            })
            .await
            .unwrap()
            .into_inner();
        let deadline = Instant::now() + Duration::from_secs(60);
        let d = loop {
            let d = runs
                .clone()
                .get_run(pb::GetRunRequest {
                    run_id: run.run_id.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            let done = d.jobs.iter().any(|j| j.kind == "record")
                && d.jobs.iter().all(|j| j.state == pb::JobState::Done as i32);
            if (state(&d) == pb::RunState::Succeeded && done) || state(&d) == pb::RunState::Failed {
                break d;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: the run did not land: {d:#?}"
            );
            clock.advance(20);
            on.coord.tick().unwrap();
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        assert_eq!(state(&d), pb::RunState::Succeeded, "round {round}: {d:#?}");
        assert_eq!(d.tasks[0].agent, "a1");
        let lake = dir.path().join("lake");
        assert_eq!(
            common::table_rows(&lake, "node_facts", Some(&run.run_id)),
            1,
            "round {round}"
        );
    }
    for s in stops {
        let _ = s.send(true);
    }
    let _ = on.stop.send(true);
}

/// A `benchlake coordinator` process, killed when dropped.
struct Process(std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `benchlake coordinator` on `addr` over `state` and `dir`'s lake.
/// On PostgreSQL a coordinator started while another's lease runs waits as
/// a standby; the lease is short so a killed leader's ends soon.
fn coordinator_process(dir: &std::path::Path, state: &TestState, addr: &str) -> Process {
    let child = std::process::Command::new(bin())
        .arg("coordinator")
        .args(["--listen", addr])
        .arg("--state")
        .arg(state.arg(dir))
        .args(["--leader-lease-ms", "1000"])
        .arg("--lake")
        .arg(dir.join("lake"))
        .env("BENCHLAKE_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    Process(child)
}

/// The coordinator process dies (SIGKILL: no goodbye to its clients) with a
/// call in flight; that call fails with a status the retry policy retries,
/// and the same channel reaches the coordinator started on the other address.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_coordinator_is_followed_to_the_next_address() {
    let dir = tempfile::tempdir().unwrap();
    let st = TestState::new();
    let a = dead_addr().await;
    let b = dead_addr().await;
    let mut on_b = coordinator_process(dir.path(), &st, &b);
    let ch = channel_with(&format!("{a},{b}"), &ClientTls::default()).unwrap();
    let auth = Auth::new(None).unwrap();
    let cluster = pb::cluster_service_client::ClusterServiceClient::with_interceptor(
        ch.clone(),
        auth.clone(),
    );
    let mut agent =
        pb::agent_service_client::AgentServiceClient::with_interceptor(ch.clone(), auth.clone());
    // Retried while the process starts.
    assert!(agents(&cluster).await.is_empty());
    agent
        .register(pb::RegisterRequest {
            protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
            name: "a1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // A long poll in flight when the process dies.
    let mut worker = pb::worker_service_client::WorkerServiceClient::with_interceptor(ch, auth);
    let in_flight = tokio::spawn(async move {
        worker
            .lease_job(pb::LeaseJobRequest {
                protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
                worker: "w1".into(),
                kinds: vec![],
                wait_ms: 20_000,
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    on_b.0.kill().unwrap();
    on_b.0.wait().unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), in_flight)
        .await
        .expect("the call in flight did not end with its coordinator")
        .unwrap()
        .unwrap_err();
    eprintln!("the call in flight: {:?}: {}", e.code(), e.message());
    assert!(benchlake_proto::retry::is_transient(&e), "{e:?}");
    let _on_a = coordinator_process(dir.path(), &st, &a);
    assert_eq!(agents(&cluster).await, ["a1"]);
}
