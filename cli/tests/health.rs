//! Health and metrics of a real `benchlake up` process: `/healthz`,
//! `/readyz` (ready, then not ready with the lake gone), `/metrics` with and
//! without a token and its values after a run, `grpc.health.v1` through
//! tonic-health's client, and a real Prometheus (Debian's `prometheus`)
//! scraping the coordinator with a bearer token, read back through its query
//! API. The Prometheus test is skipped (logged) when `prometheus` is not
//! installed, unless `CI` is set (then it fails): `unavailable`.
#[path = "common/ports.rs"]
mod ports;
use ports::free_port;
#[path = "../../tests/support/unavailable.rs"]
mod unavailable;
use unavailable::unavailable;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_benchlake");
const ADMIN: &str = "admin-token-0123456789abcdef";
const METRICS: &str = "metrics-token-0123456789abcdef";

/// A `benchlake up` child, stopped when dropped.
struct Up {
    child: Child,
    data: PathBuf,
    coordinator: String,
    /// HOST:PORT of the HTTP endpoints.
    http: String,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `benchlake up` under `dir` with an admin token and a metrics token;
/// returns once it printed its coordinator and metrics lines.
fn up(dir: &Path) -> Up {
    let data = dir.join("data");
    let mut child = Command::new(BIN)
        .args(["up", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .env("BENCHLAKE_ADMIN_TOKENS", ADMIN)
        .env("BENCHLAKE_METRICS_TOKENS", METRICS)
        .env_remove("BENCHLAKE_HTTP_ADDR")
        .env_remove("BENCHLAKE_LISTEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start benchlake up");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("up: {line}");
            let _ = tx.send(line);
        }
    });
    let (mut coordinator, mut metrics) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(60);
    while coordinator.is_none() || metrics.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("benchlake up printed its coordinator and metrics lines");
        if let Some(rest) = line.strip_prefix("benchlake is up: coordinator ") {
            coordinator = rest.split(',').next().map(String::from);
        }
        if let Some(url) = line.strip_prefix("metrics: ") {
            metrics = Some(url.trim().to_string());
        }
    }
    let url = metrics.unwrap_or_default();
    let http = url
        .strip_prefix("http://")
        .and_then(|s| s.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("metrics line: {url}"))
        .to_string();
    Up {
        child,
        data,
        coordinator: coordinator.unwrap_or_default(),
        http,
    }
}

/// GET `path` from `addr` (HTTP/1.0: no chunking); (status, body).
fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let code = buf
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {buf:?}"));
    let body = buf.split_once("\r\n\r\n").map(|b| b.1).unwrap_or("");
    (code, body.to_string())
}

/// The value of the sample `series` (name and labels exactly as exposed).
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Submits a hostinfo run through the CLI and waits for it.
fn run_hostinfo(u: &Up) {
    // `up` prints its lines before its agent has registered: wait for it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, page) = get(&u.http, "/metrics", Some(ADMIN));
        if code == 200 && sample(&page, "benchlake_agents{state=\"ONLINE\"}") == Some(1.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the local agent did not register: {page}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = Command::new(BIN)
        .args(["run", "submit", "hostinfo", "--watch", "--coordinator"])
        .arg(&u.coordinator)
        .env("BENCHLAKE_TOKEN", ADMIN)
        .output()
        .expect("benchlake run submit");
    assert!(
        out.status.success(),
        "run submit: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until `/metrics` shows `series` = `want` (commits and the run's
/// record land just after `--watch` returns).
fn wait_metric(u: &Up, series: &str, want: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, page) = get(&u.http, "/metrics", Some(METRICS));
        assert_eq!(code, 200, "{page}");
        if sample(&page, series) == Some(want) {
            return page;
        }
        assert!(
            Instant::now() < deadline,
            "{series} never became {want}:\n{page}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn healthz_readyz_metrics_and_grpc_health_of_a_running_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let u = up(dir.path());

    let (code, body) = get(&u.http, "/healthz", None);
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    let (code, body) = get(&u.http, "/readyz", None);
    assert_eq!(code, 200, "{body}");
    assert!(body.starts_with("ready\n"), "{body}");
    assert!(body.contains("role: single\n"), "{body}");
    assert!(body.contains("state: ok\n"), "{body}");
    assert!(body.contains("lake: writable"), "{body}");

    // /metrics needs a token: none, a wrong one and an agent-less guess are refused.
    let (code, _) = get(&u.http, "/metrics", None);
    assert_eq!(code, 401);
    let (code, _) = get(&u.http, "/metrics", Some("wrong-token-0123456789abcdef"));
    assert_eq!(code, 401);
    // The metrics token and the admin token may read it.
    let (code, page) = get(&u.http, "/metrics", Some(ADMIN));
    assert_eq!(code, 200, "{page}");
    assert_eq!(sample(&page, "benchlake_up"), Some(1.0), "{page}");

    // grpc.health.v1 on the coordinator's port, no token needed.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", u.coordinator))
            .unwrap()
            .connect()
            .await
            .expect("connect to the coordinator");
        let mut h = tonic_health::pb::health_client::HealthClient::new(ch);
        for service in ["", "benchlake.v1.RunService", "benchlake.v1.WorkerService"] {
            let r = h
                .check(tonic_health::pb::HealthCheckRequest {
                    service: service.into(),
                })
                .await
                .unwrap_or_else(|e| panic!("health check of '{service}': {e}"))
                .into_inner();
            assert_eq!(
                r.status,
                tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
                "{service}"
            );
        }
        let e = h
            .check(tonic_health::pb::HealthCheckRequest {
                service: "no.such.Service".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
    });

    run_hostinfo(&u);
    let page = wait_metric(&u, "benchlake_runs{state=\"SUCCEEDED\"}", 1.0);
    for (series, want) in [
        ("benchlake_runs{state=\"FAILED\"}", 0.0),
        ("benchlake_tasks{state=\"DONE\"}", 1.0),
        ("benchlake_agents{state=\"ONLINE\"}", 1.0),
        ("benchlake_queue_depth{queue=\"jobs\"}", 0.0),
        ("benchlake_state_store_up", 1.0),
        (
            "benchlake_rpc_duration_seconds_count{method=\"/benchlake.v1.RunService/SubmitRun\"}",
            1.0,
        ),
    ] {
        assert_eq!(sample(&page, series), Some(want), "{series}\n{page}");
    }
    // The hostinfo ingest and the run's record job committed Parquet.
    let jobs_done = sample(&page, "benchlake_jobs{state=\"DONE\"}").unwrap_or(0.0);
    assert!(jobs_done >= 2.0, "{page}");
    let commits = sample(&page, "benchlake_commit_duration_seconds_count").unwrap_or(0.0);
    assert!(commits >= 2.0, "{page}");
    let files = sample(&page, "benchlake_lake_written_files_total").unwrap_or(0.0);
    assert!(files >= 2.0, "{page}");
    let bytes = sample(&page, "benchlake_lake_written_bytes_total").unwrap_or(0.0);
    assert!(bytes > 1000.0, "{page}");
    assert!(page.contains("# TYPE benchlake_rpc_duration_seconds histogram\n"));
    assert!(page.contains("# HELP benchlake_runs "));
    // The handlers' transactions (the submit, the leases, the commits) went
    // through the store thread's queue and were timed there.
    let waits = sample(
        &page,
        "benchlake_store_wait_seconds_count{queue=\"normal\"}",
    )
    .unwrap_or(0.0);
    let runs = sample(
        &page,
        "benchlake_store_transaction_seconds_count{queue=\"normal\"}",
    )
    .unwrap_or(0.0);
    assert!(waits >= 5.0 && runs >= 5.0, "{page}");
    assert!(page.contains("# TYPE benchlake_store_wait_seconds histogram\n"));

    // The lake gone (its directory replaced by a file): not ready, and says why.
    let lake = u.data.join("lake");
    let away = u.data.join("lake.away");
    std::fs::rename(&lake, &away).unwrap();
    std::fs::write(&lake, b"not a directory").unwrap();
    let (code, body) = get(&u.http, "/readyz", None);
    std::fs::remove_file(&lake).unwrap();
    std::fs::rename(&away, &lake).unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(body.starts_with("not ready\n"), "{body}");
    assert!(body.contains("lake: FAILED: not writable"), "{body}");
    assert!(body.contains("state: ok\n"), "{body}");
    // Back: ready again.
    let (code, body) = get(&u.http, "/readyz", None);
    assert_eq!(code, 200, "{body}");
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_real_prometheus_scrapes_the_coordinator_with_a_bearer_token() {
    let found = Command::new("prometheus")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        unavailable(
            "a_real_prometheus_scrapes_the_coordinator_with_a_bearer_token",
            "prometheus is not installed: install Debian's prometheus (scripts/test.sh does)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let u = up(dir.path());
    run_hostinfo(&u);
    wait_metric(&u, "benchlake_runs{state=\"SUCCEEDED\"}", 1.0);

    let port = free_port();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: benchlake\n    authorization:\n      type: Bearer\n      credentials: {METRICS}\n    static_configs:\n      - targets: ['{}']\n",
            u.http
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let _prom = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    );
    let prom = format!("127.0.0.1:{port}");
    // `up` of the target (the scrape, token included, worked) and a benchlake series.
    let query = |q: &str| -> Option<String> {
        let enc: String = q
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b == b'_' {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let mut s = TcpStream::connect(&prom).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(s, "GET /api/v1/query?query={enc} HTTP/1.0\r\n\r\n").ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).ok()?;
        let body = buf.split_once("\r\n\r\n")?.1;
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        let r = v["data"]["result"].as_array()?.first()?.clone();
        r["value"][1].as_str().map(String::from)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut target_up, mut runs) = (None, None);
    while Instant::now() < deadline {
        target_up = query("up{job=\"benchlake\"}");
        runs = query("benchlake_runs{job=\"benchlake\",state=\"SUCCEEDED\"}");
        if target_up.as_deref() == Some("1") && runs.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    assert_eq!(target_up.as_deref(), Some("1"), "prometheus log:\n{log}");
    assert_eq!(runs.as_deref(), Some("1"), "prometheus log:\n{log}");
    // A histogram family arrives whole: its _count series is there too.
    let commits = query("benchlake_commit_duration_seconds_count{job=\"benchlake\"}");
    assert!(
        commits
            .as_deref()
            .and_then(|c| c.parse::<f64>().ok())
            .is_some_and(|c| c >= 2.0),
        "{commits:?}"
    );
}
