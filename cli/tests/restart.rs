//! Quick restarts: a `benchlake coordinator` told to stop (SIGTERM) releases
//! its gRPC and HTTP ports at once and ends its waiting calls, so one started
//! on the same ports (and state) 1 s later comes up; the ports are free even
//! while the first still drains a call that is doing work.
#[path = "common/ports.rs"]
mod ports;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use benchlake_proto::client::{Auth, channel};
use benchlake_proto::v1 as pb;

/// A `benchlake coordinator` process, killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process {
    fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

/// `benchlake coordinator` on `grpc` and `http` over `state`'s SQLite file
/// and lake; its log goes to `dir/log`.
fn coordinator(dir: &Path, state: &Path, grpc: u16, http: u16, log: &str) -> Process {
    let err = std::fs::File::create(dir.join(log)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_benchlake"))
        .arg("coordinator")
        .args(["--listen", &format!("127.0.0.1:{grpc}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .arg("--state")
        .arg(state.join("state.db"))
        .arg("--lake")
        .arg(state.join("lake"))
        .env("BENCHLAKE_LOG", "info")
        .env_remove("BENCHLAKE_STATE")
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    Process(child)
}

/// The status of `GET /healthz` on `port`, if anything answers.
fn healthz(port: u16) -> Option<u16> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    buf.get(9..12)?.parse().ok()
}

async fn list_agents(grpc: u16) -> Result<usize, tonic::Status> {
    let ch = channel(&format!("127.0.0.1:{grpc}")).map_err(tonic::Status::unavailable)?;
    let mut c = pb::cluster_service_client::ClusterServiceClient::with_interceptor(
        ch,
        Auth::new(None).map_err(tonic::Status::internal)?,
    );
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        c.list_agents(pb::ListAgentsRequest {}),
    )
    .await
    .map_err(|_| tonic::Status::deadline_exceeded("list_agents"))??;
    Ok(r.into_inner().agents.len())
}

/// Waits until the coordinator on `grpc`/`http` answers both, or `limit` passes.
async fn wait_up(p: &mut Process, grpc: u16, http: u16, limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < limit {
        if !p.alive() {
            return Err(format!("the coordinator exited: {:?}", p.0.try_wait()));
        }
        let h = tokio::task::spawn_blocking(move || healthz(http))
            .await
            .unwrap();
        match (h, list_agents(grpc).await) {
            (Some(200), Ok(0)) => return Ok(()),
            (h, g) => last = format!("healthz {h:?}, list_agents {g:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("not up after {limit:?}: {last}"))
}

fn sigterm(p: &Process) {
    let pid = p.0.id().to_string();
    let st = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(st.success(), "kill -TERM {pid}");
}

fn log_of(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// A restart on the same ports and the same state file 1 s after SIGTERM,
/// with a worker's 30 s long poll in flight: the poll ends at once (no job),
/// the first coordinator exits, and the second comes up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_one_second_after_sigterm_comes_up() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ports = ports::free_ports(2);
    let (grpc, http) = (ports[0], ports[1]);
    let mut first = coordinator(d, d, grpc, http, "first.log");
    wait_up(&mut first, grpc, http, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", log_of(d, "first.log")));
    let ch = channel(&format!("127.0.0.1:{grpc}")).unwrap();
    let mut worker = pb::worker_service_client::WorkerServiceClient::with_interceptor(
        ch,
        Auth::new(None).unwrap(),
    );
    let poll = tokio::spawn(async move {
        let t = Instant::now();
        let r = worker
            .lease_job(pb::LeaseJobRequest {
                protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
                worker: "w1".into(),
                kinds: vec![],
                wait_ms: 30_000,
            })
            .await;
        (t.elapsed(), r)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!poll.is_finished(), "the long poll waits");
    sigterm(&first);
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut second = coordinator(d, d, grpc, http, "second.log");
    assert!(stopped.elapsed() < Duration::from_secs(2));
    let up = wait_up(&mut second, grpc, http, Duration::from_secs(20)).await;
    let log = log_of(d, "second.log");
    assert!(up.is_ok(), "the restart did not come up: {up:?}\n{log}");
    assert!(!log.contains("in use"), "{log}");
    // The long poll ended with the stop, not after its 30 s.
    let (took, r) = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the long poll ended")
        .unwrap();
    assert!(
        took < Duration::from_secs(10),
        "the long poll took {took:?}"
    );
    assert_eq!(r.unwrap().into_inner().job, None);
    // The first one has exited cleanly.
    let t = Instant::now();
    while first.alive() && t.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let st = first
        .0
        .try_wait()
        .unwrap()
        .expect("the first coordinator exited");
    assert!(st.success(), "{st:?}\n{}", log_of(d, "first.log"));
    assert!(log_of(d, "first.log").contains("stopping: listener closed"));
}

/// The ports are free at once even while the first coordinator still
/// drains a call that is doing work (an upload whose client has not sent
/// its last chunk): a second coordinator (on a state of its own, the first
/// one still holds its state file) binds both ports 1 s after SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ports_are_free_while_the_old_coordinator_drains() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (s1, s2) = (d.join("one"), d.join("two"));
    std::fs::create_dir_all(&s1).unwrap();
    std::fs::create_dir_all(&s2).unwrap();
    let ports = ports::free_ports(2);
    let (grpc, http) = (ports[0], ports[1]);
    let mut first = coordinator(d, &s1, grpc, http, "first.log");
    wait_up(&mut first, grpc, http, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", log_of(d, "first.log")));
    // An upload stream that stays open: the server waits for its chunks.
    let ch = channel(&format!("127.0.0.1:{grpc}")).unwrap();
    let mut agent = pb::agent_service_client::AgentServiceClient::with_interceptor(
        ch,
        Auth::new(None).unwrap(),
    );
    let upload = tokio::spawn(async move {
        agent
            .upload_output(futures::stream::pending::<pb::UploadChunk>())
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!upload.is_finished(), "the upload is in flight");
    sigterm(&first);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut second = coordinator(d, &s2, grpc, http, "second.log");
    let up = wait_up(&mut second, grpc, http, Duration::from_secs(20)).await;
    let log = log_of(d, "second.log");
    assert!(up.is_ok(), "the restart did not come up: {up:?}\n{log}");
    assert!(!log.contains("in use"), "{log}");
    assert!(
        first.alive(),
        "the first coordinator still drains the upload:\n{}",
        log_of(d, "first.log")
    );
    // Ending the upload (the client goes) lets the first one finish.
    upload.abort();
    let t = Instant::now();
    while first.alive() && t.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!first.alive(), "{}", log_of(d, "first.log"));
}
