//! The admins' dashboard actions over real HTTP on loopback (the browser test
//! is tests/e2e/test_dashboard_actions.py): buttons only for admins, the form
//! token (missing, wrong, another session's: 403), the admin role (a user's
//! POST: 403), each action's effect in the state store and its audit row,
//! and a Slurm drain and resume through a stand-in scontrol.
use std::sync::Arc;

use benchlake_coordinator::audit::AuditRow;
use benchlake_coordinator::http::Http;
use benchlake_coordinator::model::*;
use benchlake_coordinator::{Coordinator, CoordinatorConfig, Tokens};
use benchlake_core::clock::SystemClock;
use benchlake_core::lake::StoreConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ADMIN: &str = "alice:actions-admin-token-0123";
const USER: &str = "bob:actions-user-token-0123";

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

/// A request as the dashboard's pages send it (POSTs carry its origin).
async fn req(addr: &str, method: &str, path: &str, cookie: Option<&str>, body: &str) -> Resp {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if method != "GET" {
        r.push_str(&format!(
            "Origin: http://{addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    if let Some(c) = cookie {
        r.push_str(&format!("Cookie: benchlake_session={c}\r\n"));
    }
    r.push_str("\r\n");
    r.push_str(body);
    s.write_all(r.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Resp {
        status: head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0),
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// A stand-in scontrol keeping each node's state and reason in files of
/// `dir` (as the node actions' unit tests do).
fn fake_scontrol(dir: &std::path::Path) -> benchlake_core::scontrol::Scontrol {
    let prog = dir.join("scontrol");
    std::fs::write(
        &prog,
        format!(
            r#"#!/bin/sh
d='{}'
case "$1" in
show)
  n=$3; st=$(cat "$d/$n.state" 2>/dev/null || echo IDLE)
  echo "NodeName=$n Arch=x86_64"
  echo "   State=$st ThreadsPerCore=1"
  if [ -f "$d/$n.reason" ]; then echo "   Reason=$(cat "$d/$n.reason") [root@2026-11-24T00:00:00]"; fi ;;
update)
  n=${{2#nodename=}}
  case "$3" in
  state=drain) echo IDLE+DRAIN > "$d/$n.state"; printf '%s' "${{4#reason=}}" > "$d/$n.reason" ;;
  state=resume) echo IDLE > "$d/$n.state"; rm -f "$d/$n.reason" ;;
  esac ;;
esac
"#,
            dir.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    benchlake_core::scontrol::Scontrol {
        program: vec![prog.display().to_string()],
        ..Default::default()
    }
}

async fn start(tokens: Tokens) -> (tempfile::TempDir, Arc<Coordinator>, Http, String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = CoordinatorConfig {
        state_path: dir.path().join("state.db"),
        store: StoreConfig {
            url: dir.path().join("lake").display().to_string(),
            ..Default::default()
        },
        tokens,
        background: false,
        scontrol: fake_scontrol(dir.path()),
        ..Default::default()
    };
    let coord = Coordinator::open(cfg.clone(), Arc::new(SystemClock)).unwrap();
    let http = Http::new(&cfg);
    http.set_serving(coord.clone(), false);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h2 = http.clone();
    tokio::spawn(async move {
        let _ = h2.serve(&cfg, l, std::future::pending()).await;
    });
    (dir, coord, http, addr)
}

fn spec() -> Spec {
    serde_json::from_value(serde_json::json!({
        "benchmark": "hostinfo", "params": {},
        "nodes": {"names": [], "labels": {}, "count": 1},
        "launcher": "local", "max_attempts": 1, "timeout_s": 60,
    }))
    .unwrap()
}

fn schedule(name: &str, owner: &str, now: i64) -> ScheduleRow {
    ScheduleRow {
        schedule_id: benchlake_core::ids::new_id(),
        name: name.into(),
        cron: "0 2 * * *".into(),
        time_zone: "UTC".into(),
        catch_up: CatchUp::None,
        max_catch_up: 0,
        allow_overlap: true,
        paused: false,
        spec: spec(),
        next_fire_ms: Some(now + 3_600_000),
        last_fire_ms: None,
        node_action: Default::default(),
        created_ms: now,
        notify: Vec::new(),
        owner: Some(owner.into()),
    }
}

fn run(state: RunState, owner: &str, now: i64) -> RunRow {
    let origin = Origin {
        owner: Some(owner.into()),
        ..Default::default()
    };
    let mut r = RunRow::new(benchlake_core::ids::new_id(), spec(), "facts", origin, now);
    r.state = state;
    r
}

fn failed_task(run_id: &str) -> TaskRow {
    serde_json::from_value(serde_json::json!({
        "task_id": benchlake_core::ids::new_id(), "run_id": run_id, "agent": "n1",
        "rank": 0, "num_tasks": 1, "state": "Failed", "attempt": 1, "max_attempts": 1,
        "lease_id": null, "lease_expires_ms": null, "not_before_ms": 0,
        "error": "exit 3", "exit_code": 3, "stdout_tail": "", "stderr_tail": "",
        "outputs": [], "started_at_ms": null, "finished_at_ms": null, "peers": [],
    }))
    .unwrap()
}

async fn login(addr: &str, token: &str) -> String {
    let r = req(
        addr,
        "POST",
        "/login",
        None,
        &format!("token={token}&next=/"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let c = r.header("set-cookie").expect("a session cookie");
    c.strip_prefix("benchlake_session=")
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_string()
}

/// The form token in a page's action forms.
fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("an action form with a token")
        + "name=\"csrf\" value=\"".len();
    page[at..at + 64].to_string()
}

async fn audit(c: &Coordinator) -> Vec<AuditRow> {
    c.audit_rows(100, None).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_act_with_the_form_token_users_are_refused_and_all_is_audited() {
    let (_dir, c, http, addr) = start(Tokens {
        admin: vec![ADMIN.into()],
        user: vec![USER.into()],
        ..Default::default()
    })
    .await;
    let now = c.now();
    let nightly = schedule("nightly", "bob", now);
    let pending = run(RunState::Pending, "bob", now);
    let failed = run(RunState::Failed, "bob", now);
    let task = failed_task(&failed.run_id);
    let (n2, p2, f2) = (nightly.clone(), pending.clone(), failed.clone());
    c.db(move |tx| {
        tx.insert_schedule(&n2)?;
        tx.insert_run(&p2)?;
        tx.insert_run(&f2)?;
        tx.insert_task(&task)
    })
    .await
    .unwrap();

    let admin = login(&addr, ADMIN.split_once(':').unwrap().1).await;
    let user = login(&addr, USER.split_once(':').unwrap().1).await;

    // Users see no buttons and no audit entry; admins do.
    let page = req(&addr, "GET", "/", Some(&user), "").await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("class=\"action\""), "{}", page.body);
    assert!(!page.body.contains("href=\"/audit\""));
    let r = req(
        &addr,
        "GET",
        &format!("/runs/{}", pending.run_id),
        Some(&user),
        "",
    )
    .await;
    assert!(!r.body.contains("cancel-run"));
    let r = req(&addr, "GET", "/audit", Some(&user), "").await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("needs the admin role"), "{}", r.body);
    let page = req(&addr, "GET", "/", Some(&admin), "").await;
    assert!(
        page.body.contains("id=\"trigger-nightly\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("id=\"pause-nightly\""));
    assert!(page.body.contains("href=\"/audit\""));
    let token = csrf_of(&page.body);
    let user_token = http.sessions().identity(&user).unwrap().1;
    assert_ne!(token, user_token);

    // The form token: missing, wrong, or the user's: 403, nothing done.
    let trigger = "/schedules/nightly/trigger";
    let r = req(&addr, "POST", trigger, Some(&admin), "").await;
    assert_eq!(r.status, 403);
    assert!(
        r.body.contains("form token (csrf) is missing"),
        "{}",
        r.body
    );
    let r = req(
        &addr,
        "POST",
        trigger,
        Some(&admin),
        &format!("csrf={}", "0".repeat(64)),
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("not this session"), "{}", r.body);
    let r = req(
        &addr,
        "POST",
        trigger,
        Some(&admin),
        &format!("csrf={user_token}"),
    )
    .await;
    assert_eq!(r.status, 403);
    // A user with their own valid token: the admin role is needed.
    let r = req(
        &addr,
        "POST",
        trigger,
        Some(&user),
        &format!("csrf={user_token}"),
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("need the admin role"), "{}", r.body);
    // No session at all.
    let r = req(&addr, "POST", trigger, None, &format!("csrf={token}")).await;
    assert_eq!(r.status, 401);
    let sid = nightly.schedule_id.clone();
    let runs_of = |c: Arc<Coordinator>, sid: String| async move {
        c.db(move |tx| {
            tx.list_runs(&benchlake_coordinator::store::RunFilter {
                schedule_id: Some(sid),
                limit: 10,
                ..Default::default()
            })
        })
        .await
        .unwrap()
    };
    assert!(runs_of(c.clone(), sid.clone()).await.is_empty());
    assert!(audit(&c).await.is_empty(), "refused before acting: no row");

    // Trigger: a run of the schedule, owned by its owner; the audit row.
    let r = req(
        &addr,
        "POST",
        trigger,
        Some(&admin),
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let made = runs_of(c.clone(), sid.clone()).await;
    assert_eq!(made.len(), 1);
    assert_eq!(made[0].owner.as_deref(), Some("bob"));
    assert_eq!(
        r.header("location").as_deref(),
        Some(format!("/runs/{}", made[0].run_id).as_str())
    );
    let a = audit(&c).await;
    assert_eq!(
        (
            a[0].who.as_str(),
            a[0].role.as_str(),
            a[0].via.as_str(),
            a[0].action.as_str(),
            a[0].target.as_str(),
            a[0].outcome.as_str()
        ),
        (
            "alice",
            "admin",
            "dashboard",
            "schedule.trigger",
            "nightly",
            "ok"
        )
    );
    assert_eq!(a[0].detail, format!("run {}", made[0].run_id));

    // Pause, then resume.
    let r = req(
        &addr,
        "POST",
        "/schedules/nightly/pause",
        Some(&admin),
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let s2 = sid.clone();
    let paused = |c: Arc<Coordinator>, s: String| async move {
        c.db(move |tx| tx.get_schedule(&s))
            .await
            .unwrap()
            .unwrap()
            .paused
    };
    assert!(paused(c.clone(), s2.clone()).await);
    let page = req(&addr, "GET", "/", Some(&admin), "").await;
    assert!(page.body.contains("id=\"resume-nightly\""));
    let r = req(
        &addr,
        "POST",
        "/schedules/nightly/resume",
        Some(&admin),
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 303);
    assert!(!paused(c.clone(), s2).await);

    // Cancel a run from its page (the button asks first).
    let page = req(
        &addr,
        "GET",
        &format!("/runs/{}", pending.run_id),
        Some(&admin),
        "",
    )
    .await;
    assert!(page.body.contains("id=\"cancel-run\""), "{}", page.body);
    assert!(page.body.contains("data-confirm=\"Cancel run"));
    let r = req(
        &addr,
        "POST",
        &format!("/runs/{}/cancel", pending.run_id),
        Some(&admin),
        &format!("csrf={token}&reason=wrong+parameters"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let id = pending.run_id.clone();
    let st = c.db(move |tx| tx.get_run(&id)).await.unwrap().unwrap();
    assert_eq!(st.state, RunState::Cancelled);
    let a = audit(&c).await;
    assert_eq!(
        (a[0].action.as_str(), a[0].detail.as_str()),
        ("run.cancel", "CANCELLED: wrong parameters")
    );
    // Cancelling it again changes nothing (it is final) and says so.
    let r = req(
        &addr,
        "POST",
        &format!("/runs/{}/cancel", pending.run_id),
        Some(&admin),
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(
        audit(&c).await[0].detail,
        "CANCELLED: cancelled from the dashboard by alice"
    );

    // Re-run the failed run's failed tasks.
    let page = req(
        &addr,
        "GET",
        &format!("/runs/{}", failed.run_id),
        Some(&admin),
        "",
    )
    .await;
    assert!(page.body.contains("id=\"rerun-run\""), "{}", page.body);
    let r = req(
        &addr,
        "POST",
        &format!("/runs/{}/rerun", failed.run_id),
        Some(&admin),
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let new = r
        .header("location")
        .unwrap()
        .trim_start_matches("/runs/")
        .to_string();
    let n2 = new.clone();
    let nr = c.db(move |tx| tx.get_run(&n2)).await.unwrap().unwrap();
    assert_eq!(nr.rerun_of.as_deref(), Some(failed.run_id.as_str()));
    assert_eq!(nr.spec, failed.spec);
    assert_eq!(audit(&c).await[0].detail, format!("run {new}"));

    // An unknown schedule: 404, recorded as failed.
    let r = req(
        &addr,
        "POST",
        "/schedules/nope/trigger",
        Some(&admin),
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let a = audit(&c).await;
    assert_eq!(
        (a[0].target.as_str(), a[0].outcome.as_str()),
        ("nope", "failed")
    );

    // The audit page lists them, newest first, to admins.
    let r = req(&addr, "GET", "/audit", Some(&admin), "").await;
    assert_eq!(r.status, 200);
    let actions: Vec<&str> = r
        .body
        .split("data-action=\"")
        .skip(1)
        .filter_map(|p| p.split('"').next())
        .collect();
    assert_eq!(
        actions,
        [
            "schedule.trigger",
            "run.rerun",
            "run.cancel",
            "run.cancel",
            "schedule.resume",
            "schedule.pause",
            "schedule.trigger"
        ],
        "newest first"
    );
    assert!(r.body.contains("<td>alice</td>"));
}

/// A Slurm node drained and resumed by hand through benchlake's node
/// actions; an agent drained and resumed; another's drain is not resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_and_agents_drain_and_resume_through_benchlake() {
    // Without tokens: the anonymous admin, the process's form token.
    let (dir, c, http, addr) = start(Tokens::default()).await;
    let token = http.sessions().anonymous_csrf().to_string();
    let agent: AgentRow = serde_json::from_value(serde_json::json!({
        "name": "n1", "labels": {}, "hostname": "n1.example", "cores": 4,
        "memory_bytes": 1u64 << 30, "address": "", "version": "0", "slots": 1,
        "catalog": [], "state": "Online", "drain": false, "registered_ms": 0,
        "last_heartbeat_ms": c.now(), "credential": "", "refused": [],
    }))
    .unwrap();
    c.db(move |tx| tx.upsert_agent(&agent)).await.unwrap();
    let page = req(&addr, "GET", "/nodes/n1", None, "").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("id=\"drain-agent\""), "{}", page.body);
    assert!(page.body.contains("id=\"drain-node\""), "{}", page.body);
    assert_eq!(csrf_of(&page.body), token);
    // A wrong token is refused here too.
    let r = req(&addr, "POST", "/nodes/n1/drain", None, "csrf=x").await;
    assert_eq!(r.status, 403);
    assert!(!dir.path().join("n1.state").exists());

    // The Slurm node: drained with benchlake's reason and recorded.
    let r = req(
        &addr,
        "POST",
        "/nodes/n1/drain",
        None,
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.header("location").as_deref(), Some("/nodes/n1"));
    let state = std::fs::read_to_string(dir.path().join("n1.state")).unwrap();
    assert_eq!(state.trim(), "IDLE+DRAIN");
    let reason = std::fs::read_to_string(dir.path().join("n1.reason")).unwrap();
    assert_eq!(reason, "benchlake: drained by hand by anonymous");
    let rec = c.db(|tx| tx.get_node_drain("n1")).await.unwrap().unwrap();
    assert_eq!(rec.reason, reason);
    let page = req(&addr, "GET", "/nodes/n1", None, "").await;
    assert!(page.body.contains("(by hand)"), "{}", page.body);
    assert!(page.body.contains("id=\"resume-node\""));
    // Drained already: a second drain is refused (409), Slurm untouched.
    let r = req(
        &addr,
        "POST",
        "/nodes/n1/drain",
        None,
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.body);
    // Resumed through benchlake: Slurm IDLE, the record gone.
    let r = req(
        &addr,
        "POST",
        "/nodes/n1/resume",
        None,
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let state = std::fs::read_to_string(dir.path().join("n1.state")).unwrap();
    assert_eq!(state.trim(), "IDLE");
    assert!(c.db(|tx| tx.get_node_drain("n1")).await.unwrap().is_none());
    // A node someone else drained: benchlake neither drains nor resumes it.
    std::fs::write(dir.path().join("n1.state"), "IDLE+DRAIN").unwrap();
    std::fs::write(dir.path().join("n1.reason"), "admin: PSU").unwrap();
    let r = req(
        &addr,
        "POST",
        "/nodes/n1/resume",
        None,
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("no drain of n1 on record"), "{}", r.body);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("n1.reason")).unwrap(),
        "admin: PSU"
    );

    // The agent: drained (no new tasks), then resumed.
    let r = req(
        &addr,
        "POST",
        "/agents/n1/drain",
        None,
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(c.db(|tx| tx.get_agent("n1")).await.unwrap().unwrap().drain);
    let r = req(
        &addr,
        "POST",
        "/agents/n1/resume",
        None,
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, 303);
    assert!(!c.db(|tx| tx.get_agent("n1")).await.unwrap().unwrap().drain);

    let a = audit(&c).await;
    let got: Vec<(&str, &str)> = a
        .iter()
        .rev()
        .map(|r| (r.action.as_str(), r.outcome.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("node.drain", "ok"),
            ("node.drain", "failed"),
            ("node.resume", "ok"),
            ("node.resume", "failed"),
            ("agent.drain", "ok"),
            ("agent.resume", "ok"),
        ]
    );
    assert!(
        a.iter()
            .all(|r| r.who == "anonymous" && r.via == "dashboard")
    );
    assert_eq!(
        a[3].detail,
        "resumed n1 (drained: benchlake: drained by hand by anonymous)"
    );
}
