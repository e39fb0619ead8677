//! The dashboard over real HTTP on loopback (no browser; the browser test is
//! tests/e2e/test_dashboard.py): sessions and redirects, the failure budget,
//! input validation, security headers, and escaping of attacker-influenced
//! text from the state store.
use std::sync::Arc;

use benchlake_coordinator::http::Http;
use benchlake_coordinator::model::*;
use benchlake_coordinator::{Coordinator, CoordinatorConfig, Tokens};
use benchlake_core::clock::SystemClock;
use benchlake_core::lake::StoreConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const USER: &str = "dashboard-user-token-0123";
const ADMIN: &str = "dashboard-admin-token-0123";
const AGENT: &str = "dashboard-agent-token-0123";

struct Resp {
    status: u16,
    head: String,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// A request as the dashboard's own pages send it: a POST carries the
/// dashboard's origin, as a browser's does.
async fn req(addr: &str, method: &str, path: &str, cookie: Option<&str>, body: &str) -> Resp {
    let origin = format!("http://{addr}");
    let extra: &[(&str, &str)] = if method == "GET" {
        &[]
    } else {
        &[("Origin", &origin)]
    };
    req_with(addr, method, path, cookie, body, extra).await
}

async fn req_with(
    addr: &str,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    body: &str,
    extra: &[(&str, &str)],
) -> Resp {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in extra {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(c) = cookie {
        r.push_str(&format!("Cookie: benchlake_session={c}\r\n"));
    }
    if method != "GET" {
        r.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    r.push_str("\r\n");
    r.push_str(body);
    s.write_all(r.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    Resp {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

async fn start(tokens: Tokens) -> (tempfile::TempDir, Arc<Coordinator>, String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = CoordinatorConfig {
        state_path: dir.path().join("state.db"),
        store: StoreConfig {
            url: dir.path().join("lake").display().to_string(),
            ..Default::default()
        },
        tokens,
        background: false,
        ..Default::default()
    };
    let coord = Coordinator::open(cfg.clone(), Arc::new(SystemClock)).unwrap();
    let http = Http::new(&cfg);
    http.set_serving(coord.clone(), false);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let _ = http.serve(&cfg, l, std::future::pending()).await;
    });
    (dir, coord, addr)
}

fn tokens() -> Tokens {
    Tokens {
        admin: vec![ADMIN.into()],
        user: vec![USER.into()],
        agent: vec![AGENT.into()],
        ..Default::default()
    }
}

fn session_of(r: &Resp) -> String {
    let c = r.header("set-cookie").expect("a cookie");
    assert!(c.contains("HttpOnly"), "{c}");
    assert!(c.contains("SameSite=Strict"), "{c}");
    assert!(c.contains("Path=/"), "{c}");
    assert!(!c.contains("Secure"), "no TLS here: {c}");
    let id = c
        .strip_prefix("benchlake_session=")
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_string();
    assert_eq!(id.len(), 64);
    assert!(!c.contains(USER) && !c.contains(ADMIN));
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_redirects_and_validation() {
    let (_dir, _c, addr) = start(tokens()).await;
    // No session: pages redirect to the login page, JSON is 401.
    let r = req(&addr, "GET", "/runs?status=FAILED", None, "").await;
    assert_eq!(r.status, 303);
    assert_eq!(
        r.header("location").as_deref(),
        Some("/login?next=/runs%3Fstatus%3DFAILED")
    );
    let r = req(
        &addr,
        "GET",
        "/api/runs/01JD3Q6Z5YV9C2M4T8N0R7K1PX",
        None,
        "",
    )
    .await;
    assert_eq!(r.status, 401);
    // Unknown session ids are no sessions.
    let r = req(&addr, "GET", "/", Some(&"a".repeat(64)), "").await;
    assert_eq!(r.status, 303);
    // The login page, with the security headers.
    let r = req(&addr, "GET", "/login", None, "").await;
    assert_eq!(r.status, 200);
    let csp = r.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(
        r.header("x-content-type-options").as_deref(),
        Some("nosniff")
    );
    assert_eq!(r.header("referrer-policy").as_deref(), Some("same-origin"));
    assert!(!r.body.contains("<script>"), "no inline script");
    // Wrong token, agent token: refused.
    let r = req(
        &addr,
        "POST",
        "/login",
        None,
        "token=wrong-token-xyz&next=/",
    )
    .await;
    assert_eq!(r.status, 401);
    assert!(r.header("set-cookie").is_none());
    let r = req(
        &addr,
        "POST",
        "/login",
        None,
        &format!("token={AGENT}&next=/"),
    )
    .await;
    assert_eq!(r.status, 403);
    // A user token: a session; `next` stays on the site.
    let r = req(
        &addr,
        "POST",
        "/login",
        None,
        &format!("token={USER}&next=%2Fruns%3Fstatus%3DFAILED"),
    )
    .await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location").as_deref(), Some("/runs?status=FAILED"));
    let sid = session_of(&r);
    let r = req(
        &addr,
        "POST",
        "/login",
        None,
        &format!("token={ADMIN}&next=%2F%2Fevil.example%2F"),
    )
    .await;
    assert_eq!(r.header("location").as_deref(), Some("/"));
    for path in ["/", "/runs", "/runs?verdict=FAIL&status=SUCCEEDED"] {
        let r = req(&addr, "GET", path, Some(&sid), "").await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert!(r.header("content-security-policy").is_some());
    }
    // Bad inputs: 400; a valid id that does not exist: 404.
    for path in [
        "/runs/not-a-ulid",
        "/runs/01jd3q6z5yv9c2m4t8n0r7k1px",
        "/runs?status=BOGUS",
        "/runs?verdict=%3Cscript%3E",
        "/runs?before=..%2F..",
        "/runs?q=01JD%3C",
        "/api/runs/%3Cscript%3E",
    ] {
        let r = req(&addr, "GET", path, Some(&sid), "").await;
        assert_eq!(r.status, 400, "{path}");
        assert!(!r.body.contains("<script>"), "{path}: {}", r.body);
    }
    let r = req(
        &addr,
        "GET",
        "/runs/01JD3Q6Z5YV9C2M4T8N0R7K1PX",
        Some(&sid),
        "",
    )
    .await;
    assert_eq!(r.status, 404);
    // Static assets.
    let r = req(&addr, "GET", "/static/dashboard.js", None, "").await;
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/javascript")
    );
    // Logout ends the session.
    let r = req(&addr, "POST", "/logout", Some(&sid), "").await;
    assert_eq!(r.status, 303);
    let r = req(&addr, "GET", "/", Some(&sid), "").await;
    assert_eq!(r.status, 303);
}

/// Login CSRF: a POST from another origin (or from nowhere a browser would
/// name) is refused with 403 before `/login` or `/logout` runs; the
/// dashboard's own origin passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_origin_posts_are_refused() {
    let (_dir, _c, addr) = start(tokens()).await;
    let own = format!("http://{addr}");
    let login = format!("token={USER}&next=/");
    let refused = |r: &Resp, what: &str| {
        assert_eq!(r.status, 403, "{what}: {}", r.body);
        assert!(r.header("set-cookie").is_none(), "{what}: no session");
        assert!(
            r.body.contains("cross-site request refused"),
            "{what}: {}",
            r.body
        );
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("text/plain; charset=utf-8")
        );
    };
    for (what, extra) in [
        ("foreign Origin", vec![("Origin", "https://evil.example")]),
        ("Origin null", vec![("Origin", "null")]),
        (
            "foreign Referer",
            vec![("Referer", "https://evil.example/page")],
        ),
        ("neither Origin nor Referer", vec![]),
        (
            "Sec-Fetch-Site cross-site",
            vec![("Origin", own.as_str()), ("Sec-Fetch-Site", "cross-site")],
        ),
        ("other port", vec![("Origin", "http://127.0.0.1:1")]),
    ] {
        let r = req_with(&addr, "POST", "/login", None, &login, &extra).await;
        refused(&r, what);
    }
    let r = req_with(
        &addr,
        "POST",
        "/login",
        None,
        &login,
        &[("Origin", "https://evil.example")],
    )
    .await;
    assert!(
        r.body
            .contains("Origin 'https://evil.example' is not this dashboard's origin"),
        "{}",
        r.body
    );
    // Refused before the handler: a wrong token from afar spends no budget,
    // and PUT, DELETE and PATCH are checked as POST is.
    for m in ["PUT", "DELETE", "PATCH"] {
        let r = req_with(
            &addr,
            m,
            "/logout",
            None,
            "",
            &[("Origin", "https://evil.example")],
        )
        .await;
        assert_eq!(r.status, 403, "{m}");
    }
    // The own origin logs in (Origin, or a Referer when Origin is absent).
    let r = req_with(&addr, "POST", "/login", None, &login, &[("Origin", &own)]).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let sid = session_of(&r);
    let referer = format!("{own}/login?next=/");
    let r = req_with(
        &addr,
        "POST",
        "/login",
        None,
        &login,
        &[("Referer", &referer)],
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let sid2 = session_of(&r);
    // A foreign logout ends nothing.
    let r = req_with(
        &addr,
        "POST",
        "/logout",
        Some(&sid),
        "",
        &[("Origin", "https://evil.example")],
    )
    .await;
    refused(&r, "foreign logout");
    let r = req(&addr, "GET", "/", Some(&sid), "").await;
    assert_eq!(r.status, 200, "the session lives on");
    let r = req_with(&addr, "POST", "/logout", Some(&sid), "", &[]).await;
    refused(&r, "logout with neither header");
    // The own origin logs out.
    let r = req_with(
        &addr,
        "POST",
        "/logout",
        Some(&sid),
        "",
        &[("Origin", &own)],
    )
    .await;
    assert_eq!(r.status, 303);
    assert!(r.header("set-cookie").unwrap().contains("Max-Age=0"));
    let r = req(&addr, "GET", "/", Some(&sid), "").await;
    assert_eq!(r.status, 303, "logged out");
    let r = req(&addr, "GET", "/", Some(&sid2), "").await;
    assert_eq!(r.status, 200, "the other session lives on");
    // GETs are never checked: a link from anywhere still opens a page.
    let r = req_with(
        &addr,
        "GET",
        "/login",
        None,
        "",
        &[
            ("Origin", "https://evil.example"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
    )
    .await;
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_spend_the_peer_budget() {
    let (_dir, _c, addr) = start(tokens()).await;
    let mut codes = Vec::new();
    for i in 0..40 {
        let r = req(
            &addr,
            "POST",
            "/login",
            None,
            &format!("token=wrong-{i:04}"),
        )
        .await;
        codes.push(r.status);
    }
    assert_eq!(codes[0], 401);
    assert_eq!(codes[39], 429);
    // Blocked: even the right token is refused now.
    let r = req(&addr, "POST", "/login", None, &format!("token={USER}")).await;
    assert_eq!(r.status, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tokens_no_login_and_text_is_escaped() {
    let (_dir, c, addr) = start(Tokens::default()).await;
    let evil = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    let spec: Spec = serde_json::from_value(serde_json::json!({
        "benchmark": "pio",
        "params": {"note": evil},
        "nodes": {"names": [], "labels": {}, "count": 1},
        "launcher": "local", "max_attempts": 1, "timeout_s": 60,
    }))
    .unwrap();
    let id = benchlake_core::ids::new_id();
    let mut run = RunRow::new(id.clone(), spec, "io", Origin::default(), c.now());
    run.state = RunState::Failed;
    run.error = Some(format!("failed: {evil}"));
    let task: TaskRow = serde_json::from_value(serde_json::json!({
        "task_id": benchlake_core::ids::new_id(), "run_id": id, "agent": "n<b>1</b>",
        "rank": 0, "num_tasks": 1, "state": "Failed", "attempt": 1, "max_attempts": 1,
        "lease_id": null, "lease_expires_ms": null, "not_before_ms": 0,
        "error": evil, "exit_code": 3, "stdout_tail": evil, "stderr_tail": evil,
        "outputs": [], "started_at_ms": null, "finished_at_ms": null, "peers": [],
    }))
    .unwrap();
    let (r2, t2) = (run.clone(), task.clone());
    c.db(move |tx| {
        tx.insert_run(&r2)?;
        tx.insert_task(&t2)
    })
    .await
    .unwrap();
    c.verdicts().record(
        &id,
        "tables/checks/k.parquet",
        &["n<b>1</b>".to_string()],
        vec![benchlake_coordinator::verdicts::CheckRow {
            check: "io.<i>x</i>".into(),
            status: "FAIL".into(),
            value: Some(1.0),
            reference: Some(2.0),
            unit: "<u>".into(),
            message: evil.into(),
            ..Default::default()
        }],
    );
    for path in [
        format!("/runs/{id}"),
        "/runs".to_string(),
        "/".to_string(),
        "/runs?verdict=FAIL".to_string(),
    ] {
        let r = req(&addr, "GET", &path, None, "").await;
        assert_eq!(r.status, 200, "{path}");
        for bad in ["<script>alert", "<img", "<b>1", "<i>x", "<u>"] {
            assert!(!r.body.contains(bad), "{path} holds {bad}");
        }
    }
    let r = req(&addr, "GET", &format!("/runs/{id}"), None, "").await;
    assert!(r.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(r.body.contains("io.&lt;i&gt;x&lt;/i&gt;"));
    let r = req(&addr, "GET", "/runs?verdict=FAIL", None, "").await;
    assert!(r.body.contains(&id), "the FAIL filter lists the run");
    let r = req(&addr, "GET", "/", None, "").await;
    assert!(
        r.body.contains("n&lt;b&gt;1&lt;/b&gt;"),
        "the node is listed"
    );
    // The JSON of a run.
    let r = req(&addr, "GET", &format!("/api/runs/{id}"), None, "").await;
    let j: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(j["state"], "FAILED");
    assert_eq!(j["verdict"], "FAIL");
    assert_eq!(j["final"], true);
    // /login without tokens sends to the page.
    let r = req(&addr, "GET", "/login?next=%2Fruns", None, "").await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location").as_deref(), Some("/runs"));
}

/// A `checks` object as a worker writes it.
fn checks_parquet(run_id: &str, rows: &[(&str, &str, f64)]) -> bytes::Bytes {
    use arrow::array::{ArrayRef, Float64Array, StringArray};
    let s = |v: Vec<&str>| Arc::new(StringArray::from(v)) as ArrayRef;
    let n = rows.len();
    let batch = arrow::array::RecordBatch::try_from_iter([
        ("run_id", s(vec![run_id; n])),
        ("source", s(vec!["raw/x"; n])),
        ("check", s(rows.iter().map(|r| r.0).collect())),
        ("status", s(rows.iter().map(|r| r.1).collect())),
        (
            "value",
            Arc::new(Float64Array::from(
                rows.iter().map(|r| r.2).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
        (
            "reference",
            Arc::new(Float64Array::from(vec![None::<f64>; n])) as ArrayRef,
        ),
        ("unit", s(vec!["MiB/s"; n])),
        ("message", s(vec!["m"; n])),
    ])
    .unwrap();
    let mut buf = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    bytes::Bytes::from(buf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_are_read_back_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = CoordinatorConfig {
        state_path: dir.path().join("state.db"),
        store: StoreConfig {
            url: dir.path().join("lake").display().to_string(),
            ..Default::default()
        },
        background: false,
        ..Default::default()
    };
    let id = benchlake_core::ids::new_id();
    let committed_key;
    {
        let c = Coordinator::open(cfg.clone(), Arc::new(SystemClock)).unwrap();
        // Its start (layout check, verdicts of an empty lake) is over before
        // the file is committed: otherwise its own load could meet the file
        // put aside below and hold the store while it retries.
        while !c.verdicts().loaded() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let spec: Spec = serde_json::from_value(serde_json::json!({
            "benchmark": "pio", "params": {}, "nodes": {"names": [], "labels": {}, "count": 1},
            "launcher": "local", "max_attempts": 1, "timeout_s": 60,
        }))
        .unwrap();
        let mut run = RunRow::new(id.clone(), spec, "io", Origin::default(), c.now());
        run.state = RunState::Succeeded;
        let task: TaskRow = serde_json::from_value(serde_json::json!({
            "task_id": benchlake_core::ids::new_id(), "run_id": id, "agent": "n7",
            "rank": 0, "num_tasks": 1, "state": "Done", "attempt": 1, "max_attempts": 1,
            "lease_id": null, "lease_expires_ms": null, "not_before_ms": 0, "error": null,
            "exit_code": 0, "stdout_tail": "", "stderr_tail": "", "outputs": [],
            "started_at_ms": null, "finished_at_ms": null, "peers": [],
        }))
        .unwrap();
        let key = benchlake_core::layout::table_key(
            "checks",
            &run.date,
            &id,
            &benchlake_core::ids::new_id(),
            "",
        )
        .unwrap();
        committed_key = key.clone();
        let data = checks_parquet(
            &id,
            &[
                ("io.write_bw_mib_s", "FAIL", 12.5),
                ("io.read_bw_mib_s", "PASS", 99.0),
            ],
        );
        let bytes = data.len() as u64;
        c.lake().put(&key, data).await.unwrap();
        let f = CommittedFile {
            key,
            table: "checks".into(),
            run_id: id.clone(),
            job_id: "J".into(),
            date: run.date.clone(),
            rows: 2,
            bytes,
            committed_ms: c.now(),
            merged: None,
        };
        c.db(move |tx| {
            tx.insert_run(&run)?;
            tx.insert_task(&task)?;
            tx.upsert_committed(&f)
        })
        .await
        .unwrap();
    }
    // The committed file cannot be read when the new coordinator starts (a
    // lake not answering yet): the load is not complete until it is read.
    let file = dir.path().join("lake").join(&committed_key);
    let aside = dir.path().join("aside.parquet");
    std::fs::rename(&file, &aside).unwrap();
    // A new coordinator on the same state and lake (the first one's store
    // lock goes with its last handle).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let c = loop {
        match Coordinator::open(cfg.clone(), Arc::new(SystemClock)) {
            Ok(c) => break c,
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("reopen: {e}"),
        }
    };
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert!(
        !c.verdicts().loaded(),
        "complete while a committed file is unreadable"
    );
    let report = c.verdicts().load_report();
    assert_eq!((report.listed, report.read), (1, 0), "{report:?}");
    assert!(report.unreadable[0].0 == committed_key, "{report:?}");
    assert!(c.verdicts().run(&id).is_none());
    // The node page meanwhile: a node only verdicts name is not "unknown"
    // while they are being read (it was a 404 for seconds after a restart).
    let http = Http::new(&cfg);
    http.set_serving(c.clone(), false);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let serve_cfg = cfg.clone();
    tokio::spawn(async move {
        let _ = http.serve(&serve_cfg, l, std::future::pending()).await;
    });
    let r = req(&addr, "GET", "/nodes/n7", None, "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("id=\"verdicts-loading\""), "{}", r.body);
    std::fs::rename(&aside, &file).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !c.verdicts().loaded() {
        assert!(
            std::time::Instant::now() < deadline,
            "the start-up load did not finish"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let v = c.verdicts().run(&id).expect("the run's verdicts");
    assert_eq!(v.verdict(), Some("FAIL"));
    assert_eq!(v.agents, ["n7"]);
    let node = c.verdicts().node("n7");
    assert_eq!(node["io.write_bw_mib_s"].status, "FAIL");
    assert_eq!(node["io.write_bw_mib_s"].value, Some(12.5));
    assert_eq!(node["io.read_bw_mib_s"].status, "PASS");
    assert_eq!(c.verdicts().runs_with("FAIL", None, 10), [id]);
    // Loaded: the page shows the node's history, and a node nothing names
    // is not found.
    let r = req(&addr, "GET", "/nodes/n7", None, "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.body.contains("verdicts-loading"), "{}", r.body);
    assert!(r.body.contains("io.write_bw_mib_s"), "{}", r.body);
    let r = req(&addr, "GET", "/nodes/n8", None, "").await;
    assert_eq!(r.status, 404, "{}", r.body);
}
