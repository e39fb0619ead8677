//! Issue 13's security reproductions, each against a real in-process cluster
//! over gRPC: a user token cannot make an agent run an arbitrary program or
//! write outside the directories its catalog entry declares; benchmarks do not
//! run as root unless said; one agent's credential cannot act as another
//! agent; failed authentications are budgeted per peer.
mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use benchlake_coordinator::Tokens;
use benchlake_proto::v1 as pb;
use common::*;

fn task_error(d: &pb::RunDetail) -> String {
    d.tasks
        .iter()
        .map(|t| t.error.clone())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Runs `traced` once (mpirun, one attempt) with `params` and waits for it to end.
async fn traced_once(c: &Cluster, params: &[(&str, &str)]) -> pb::RunDetail {
    let run = c
        .submit_spec(pb::BenchmarkSpec {
            launcher: pb::Launcher::Mpirun as i32,
            max_attempts: 1,
            ..bench_spec("traced", params)
        })
        .await
        .unwrap();
    c.wait_settled(&run.run_id, 60).await
}

fn euid() -> u32 {
    benchlake_agent::contain::euid()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn user_tokens_cannot_run_programs_or_paths_the_catalog_does_not_allow() {
    let mut c = Cluster::start(Tokens::default()).await;
    let apps = c.dir.path().join("apps");
    std::fs::create_dir_all(&apps).unwrap();
    let marker = c.dir.path().join("touched");
    c.add_agent_with("a1", |cfg| {
        cfg.catalog = benchlake_agent::builtin_catalog().unwrap();
        cfg.apps_dir = Some(apps.clone());
    })
    .await;
    c.add_worker("w1", None);
    // `traced` with a system program: refused by the agent before anything runs.
    for (app, arg) in [("/usr/bin/id", None), ("/usr/bin/touch", Some(&marker))] {
        let mut params = vec![("app", app), ("np", "1")];
        let arg_s = arg.map(|p| p.display().to_string());
        if let Some(a) = &arg_s {
            params.push(("arg", a.as_str()));
        }
        let d = traced_once(&c, &params).await;
        assert_eq!(state(&d), pb::RunState::Failed, "{d:#?}");
        let e = task_error(&d);
        assert!(
            e.contains("params.app") && e.contains("outside the directories"),
            "{e}"
        );
        assert!(!e.contains("uid="), "{e}");
    }
    assert!(!marker.exists(), "the refused program ran");
    // A symbolic link inside the apps directory that leads out of it.
    std::os::unix::fs::symlink("/usr/bin/id", apps.join("id")).unwrap();
    let app = apps.join("id").display().to_string();
    let d = traced_once(&c, &[("app", &app), ("np", "1")]).await;
    assert!(
        task_error(&d).contains("resolves to '/usr/bin/id'"),
        "{d:#?}"
    );

    // pio's test directory stays inside the task directory (no --scratch-dir).
    for dir in ["/proc/sys", "/etc", "/tmp"] {
        let run = c
            .submit_spec(pb::BenchmarkSpec {
                max_attempts: 1,
                ..bench_spec("pio", &[("dir", dir), ("np", "1")])
            })
            .await
            .unwrap();
        let d = c.wait_settled(&run.run_id, 60).await;
        assert_eq!(state(&d), pb::RunState::Failed);
        let e = task_error(&d);
        assert!(e.contains("params.dir") && e.contains(dir), "{e}");
    }
    // Relative paths and `..` are refused at submission already.
    for dir in ["x/y", "/tmp/../etc"] {
        let e = c
            .submit_spec(bench_spec("pio", &[("dir", dir)]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{dir}");
        assert!(e.message().contains("params.dir"), "{}", e.message());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_tracer_library_fails_the_run() {
    // SAFETY (env): this test binary's other tests do not read the variable.
    unsafe {
        std::env::set_var(
            "BENCHLAKE_TRACER_LIB",
            "/nonexistent/libbenchlake_tracer.so",
        )
    };
    let mut c = Cluster::start(Tokens::default()).await;
    let apps = c.dir.path().join("apps");
    std::fs::create_dir_all(&apps).unwrap();
    std::fs::copy("/bin/true", apps.join("app")).unwrap();
    c.add_agent_with("a1", |cfg| {
        cfg.catalog = benchlake_agent::builtin_catalog().unwrap();
        cfg.apps_dir = Some(apps.clone());
    })
    .await;
    c.add_worker("w1", None);
    let app = apps.join("app").display().to_string();
    let d = traced_once(&c, &[("app", &app), ("np", "1")]).await;
    unsafe { std::env::remove_var("BENCHLAKE_TRACER_LIB") };
    assert_eq!(state(&d), pb::RunState::Failed);
    let e = task_error(&d);
    assert!(
        e.contains("tracer library /nonexistent/libbenchlake_tracer.so does not exist"),
        "{e}"
    );
}

const WHO: &str = r#"
[[benchmark]]
name = "who"
kind = "noop"
command = ["id", "-u"]
run_as = "nobody"
timeout_s = 60

[[benchmark]]
name = "who-default"
kind = "noop"
command = ["id", "-u"]
timeout_s = 60
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn benchmarks_run_as_their_catalog_user_never_root_by_default() {
    if euid() != 0 {
        unavailable(
            "benchmarks_run_as_their_catalog_user_never_root_by_default",
            "switching users needs root",
        );
        return;
    }
    let mut c = Cluster::start(Tokens::default()).await;
    // The user `nobody` must reach its task directory.
    std::fs::set_permissions(c.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    c.add_agent_with("a1", |cfg| {
        cfg.catalog = benchlake_core::bench::Catalog::from_toml(WHO).unwrap();
        // No default user: entries without `run_as` are refused as root.
        cfg.run_as = None;
    })
    .await;
    c.add_worker("w1", None);
    let nobody = benchlake_agent::contain::lookup_user("nobody").unwrap();
    let run = c.submit("who", &[], 1).await.unwrap();
    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    assert_eq!(d.tasks[0].stdout_tail.trim(), nobody.uid.to_string());
    // The agent does not even offer it: the submission is refused, saying why.
    let e = c.submit("who-default", &[], 1).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert_eq!(
        e.message(),
        "spec.benchmark: no agent offers 'who-default': a1 refuses it: running as root without run_as"
    );
    // The agent's --run-as gives the default; `root` is allowed when said.
    c.stop_agent("a1");
    c.add_agent_with("a2", |cfg| {
        cfg.catalog = benchlake_core::bench::Catalog::from_toml(WHO).unwrap();
        cfg.run_as = Some("root".into());
    })
    .await;
    let run = c
        .submit_spec(pb::BenchmarkSpec {
            nodes: Some(pb::NodeSelector {
                names: vec!["a2".into()],
                ..Default::default()
            }),
            ..bench_spec("who-default", &[])
        })
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    assert_eq!(d.tasks[0].stdout_tail.trim(), "0");
}

const REFUSING: &str = r#"
[[benchmark]]
name = "ok"
kind = "noop"
command = ["true"]
timeout_s = 60

[[benchmark]]
name = "ghost"
kind = "noop"
command = ["true"]
run_as = "benchlake-no-such-user"
timeout_s = 60
"#;

/// `benchlake agents list` against `c` (with `more` arguments): its stdout.
fn agents_list(c: &Cluster, more: &[&str]) -> String {
    let out = std::process::Command::new(bin())
        .args(["agents", "list", "--coordinator", &c.addr])
        .args(more)
        .output()
        .expect("benchlake agents list");
    assert!(
        out.status.success(),
        "agents list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_does_not_offer_what_it_refuses_and_agents_list_says_why() {
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_agent_with_catalog("a1", REFUSING).await;
    c.add_worker("w1", None);
    let why = "run_as user 'benchlake-no-such-user' does not exist on this node";
    // Submitting it, or a schedule of it, is refused with the agent's reason.
    let e = c.submit("ghost", &[], 1).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert_eq!(
        e.message(),
        format!("spec.benchmark: no agent offers 'ghost': a1 refuses it: {why}")
    );
    let e = c
        .schedules()
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(pb::Schedule {
                name: "ghostly".into(),
                cron: "0 2 * * *".into(),
                time_zone: "UTC".into(),
                spec: Some(bench_spec("ghost", &[])),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert!(
        e.message()
            .contains("no agent offers 'ghost': a1 refuses it"),
        "{e:?}"
    );
    // What it offers runs.
    let run = c.submit("ok", &[], 1).await.unwrap();
    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    // `agents list` shows what each agent refuses and why; --json has `refused`.
    let text = agents_list(&c, &[]);
    assert!(
        text.contains(&format!("\n  refuses ghost: {why}\n")),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&agents_list(&c, &["--json"])).unwrap();
    assert_eq!(json[0]["name"], "a1");
    assert_eq!(json[0]["benchmarks"], serde_json::json!(["ok"]));
    assert_eq!(
        json[0]["refused"],
        serde_json::json!([{"name": "ghost", "reason": why}])
    );
    // The catalog as the coordinator knows it (issue 35, item 7).
    let bench = |args: &[&str]| {
        let out = std::process::Command::new(bin())
            .arg("benchmarks")
            .args(args)
            .args(["--coordinator", &c.addr])
            .output()
            .expect("benchlake benchmarks");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, text, err) = bench(&["list"]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("ghost ") && lines[0].ends_with("offered by no agent; refused by a1"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("ok ") && lines[1].ends_with("offered by a1"),
        "{text}"
    );
    let (code, text, err) = bench(&["show", "ok"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(text.starts_with("ok (noop)\n"), "{text}");
    assert!(text.contains("timeout: 60 s\n"), "{text}");
    assert!(text.contains("offered by: a1\n"), "{text}");
    // Who it runs as: the entry names none, so the agent's --run-as (the
    // test cluster's agent runs benchmarks as the user running the tests).
    let me = benchlake_agent::contain::current_user_name();
    assert!(text.contains(&format!("runs as: {me}\n")), "{text}");
    let (code, text, _) = bench(&["show", "ghost"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("offered by: no agent\n"), "{text}");
    assert!(text.contains(&format!("refused by a1: {why}\n")), "{text}");
    let (code, text, err) = bench(&["show", "ok", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (&j["name"], &j["agents"], &j["timeout_s"]),
        (
            &serde_json::json!("ok"),
            &serde_json::json!(["a1"]),
            &serde_json::json!(60)
        )
    );
    assert_eq!(j["run_as"], serde_json::json!(me));
    let (code, _, err) = bench(&["show", "nope"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("no agent's catalog has a benchmark 'nope'"),
        "{err}"
    );
}

/// `benchmarks builtin` prints the built-in catalog, a file an agent loads
/// as it is (the start of a site's own).
#[test]
fn the_builtin_catalog_prints_as_a_loadable_file() {
    let out = std::process::Command::new(bin())
        .args(["benchmarks", "builtin"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let cat = benchlake_core::bench::Catalog::from_toml(&text).unwrap();
    let names: Vec<&str> = cat.benchmarks.iter().map(|b| b.name.as_str()).collect();
    assert!(
        names.contains(&"hostinfo") && names.contains(&"pio"),
        "{names:?}"
    );
}

const A1: &str = "a1:agent-one-token-0123456789";
const A2: &str = "a2:agent-two-token-0123456789";
const S1: &str = "shared-agent-token-one-0123";
const S2: &str = "shared-agent-token-two-0123";
const USER: &str = "user-token-0123456789abc";
const W1: &str = "w1:worker-one-token-0123456789";

/// Registers `name` with host name "evil" using `token`; the refusal.
async fn register_evil(c: &Cluster, token: &str, name: &str) -> tonic::Status {
    c.agents_client(Some(token))
        .register(pb::RegisterRequest {
            protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
            name: name.into(),
            hostname: "evil".into(),
            ..Default::default()
        })
        .await
        .unwrap_err()
}

fn secret(bound: &str) -> &str {
    bound.split_once(':').map(|x| x.1).unwrap_or(bound)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_agents_credential_cannot_act_as_another_agent() {
    let tokens = Tokens {
        user: vec![USER.into()],
        agent: vec![A1.into(), A2.into(), S1.into(), S2.into()],
        worker: vec![W1.into()],
        ..Default::default()
    };
    let mut c = Cluster::start(tokens).await;
    c.token = Some(USER.into());
    c.add_agent("a1", Some(secret(A1))).await;
    let run = c.submit("sleep", &[("seconds", "30")], 1).await.unwrap();
    c.wait_run(&run.run_id, 30, |d| {
        d.tasks
            .iter()
            .any(|t| t.state == pb::TaskState::Running as i32)
    })
    .await;
    // a2's token registers as a1: refused, a1 keeps its task, host and catalog.
    let mut evil = c.agents_client(Some(secret(A2)));
    let e = register_evil(&c, secret(A2), "a1").await;
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    assert!(e.message().contains("not to agent 'a1'"), "{}", e.message());
    for e in [
        evil.heartbeat(pb::HeartbeatRequest {
            name: "a1".into(),
            running_task_ids: vec![],
        })
        .await
        .unwrap_err(),
        evil.poll_task(pb::PollTaskRequest {
            name: "a1".into(),
            free_slots: 1,
            wait_ms: 0,
        })
        .await
        .unwrap_err(),
    ] {
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    }
    // A shared token other than the one a1 registered with is refused too.
    let e = register_evil(&c, S1, "a1").await;
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let d = c.detail(&run.run_id).await;
    assert_eq!(d.tasks[0].state, pb::TaskState::Running as i32, "{d:#?}");
    let agents = c
        .cluster()
        .list_agents(pb::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .agents;
    let a1 = agents.iter().find(|a| a.name == "a1").unwrap();
    assert_ne!(a1.hostname, "evil");
    assert!(a1.benchmarks.iter().any(|b| b == "sleep"), "{a1:?}");

    // Two agents on shared tokens: a live name is not taken over by the other token.
    c.add_agent("b1", Some(S1)).await;
    let e = register_evil(&c, S2, "b1").await;
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    assert!(
        e.message().contains("alive with another credential"),
        "{}",
        e.message()
    );

    // A bound worker token leases only as its worker.
    let e = c
        .workers_client(Some(secret(W1)))
        .lease_job(pb::LeaseJobRequest {
            protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
            worker: "w2".into(),
            kinds: vec![],
            wait_ms: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    c.runs()
        .cancel_run(pb::CancelRunRequest {
            run_id: run.run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_authentications_are_budgeted_per_peer() {
    let tokens = Tokens {
        user: vec![USER.into()],
        ..Default::default()
    };
    let mut c = Cluster::start(tokens).await;
    c.token = Some("wrong-token-0123456789".into());
    let started = std::time::Instant::now();
    let mut unauth = 0;
    let mut exhausted = 0;
    for _ in 0..300 {
        let code = c.submit("sleep", &[], 1).await.unwrap_err().code();
        match code {
            tonic::Code::Unauthenticated => unauth += 1,
            tonic::Code::ResourceExhausted => exhausted += 1,
            other => panic!("{other:?}"),
        }
        if exhausted == 1 {
            // Blocked: the right token is refused as well, so guessing learns nothing.
            let wrong = c.token.replace(USER.into());
            assert_eq!(
                c.submit("sleep", &[], 1).await.unwrap_err().code(),
                tonic::Code::ResourceExhausted
            );
            c.token = wrong;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    // 30 at once, then 2 per second of the loop's own time (a blocked peer
    // regains calls once half the budget has refilled).
    let allowed = 30.0 + 2.0 * secs + 1.0;
    assert!(
        unauth as f64 <= allowed && unauth >= 29 && exhausted > 0,
        "{unauth} guesses answered in {secs:.2} s, {exhausted} refused"
    );
    eprintln!("{unauth} of 300 wrong tokens answered in {secs:.2} s");
    // The budget refills.
    c.token = Some(USER.into());
    tokio::time::sleep(Duration::from_millis(9_000)).await;
    c.runs()
        .list_runs(pb::ListRunsRequest::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_cannot_commit_objects_that_are_not_the_tables_parquet() {
    use benchlake_core::lake::{Lake, encode_parquet};
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_agent("a1", None).await;
    let run = c.submit("hostinfo", &[], 1).await.unwrap();
    c.wait_run(&run.run_id, 30, |d| !d.jobs.is_empty()).await;
    let mut w = c.workers_client(None);
    let job = w
        .lease_job(pb::LeaseJobRequest {
            protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
            worker: "rogue".into(),
            kinds: vec!["ingest".into()],
            wait_ms: 5_000,
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .expect("the ingest job");
    let lake = Lake::local(&c.lake_dir()).unwrap();
    let put = |name: &str, data: Vec<u8>| {
        let key = format!("{}{name}", job.staging_prefix);
        let lake = lake.clone();
        async move {
            lake.put(&key, data.into()).await.unwrap();
            key
        }
    };
    let junk = put("junk.parquet", b"not parquet".to_vec()).await;
    let empty = encode_parquet(
        "node_facts",
        "2026-11-22",
        &[arrow::array::RecordBatch::new_empty(
            benchlake_core::catalog::schema("node_facts").unwrap(),
        )],
    )
    .unwrap();
    let empty = put("empty.parquet", empty.to_vec()).await;
    let other = encode_parquet(
        "linktest_ranks",
        "2026-11-22",
        &[arrow::array::RecordBatch::new_empty(
            benchlake_core::catalog::schema("linktest_ranks").unwrap(),
        )],
    )
    .unwrap();
    let other = put("other.parquet", other.to_vec()).await;
    // Schema-valid node_facts rows of another run (cores = 999999): a job
    // commits rows of its own run only.
    let host = c.dir.path().join("host.json");
    let out = std::process::Command::new(bin())
        .args(["probe", "host", "--out"])
        .arg(&host)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut facts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&host).unwrap()).unwrap();
    facts["cores"] = serde_json::json!(999_999);
    std::fs::write(&host, facts.to_string()).unwrap();
    let other_run = "01KFORGEDRUN0000000000000A";
    let forged = benchlake_formats::ingest(
        "hostinfo",
        &[benchlake_formats::InputFile::from_path(&host)],
        &benchlake_formats::IngestContext {
            run_id: other_run.into(),
            date: "2026-11-22".into(),
        },
    )
    .unwrap();
    let forged = encode_parquet("node_facts", "2026-11-23", &forged[0].batches).unwrap();
    let forged = put("forged.parquet", forged.to_vec()).await;
    // Rows of the run, but of another day than the run's (2026-11-23): the
    // file's `date` column must be the run's day in every row group.
    let shifted = benchlake_formats::ingest(
        "hostinfo",
        &[benchlake_formats::InputFile::from_path(&host)],
        &benchlake_formats::IngestContext {
            run_id: run.run_id.clone(),
            date: "2026-11-22".into(),
        },
    )
    .unwrap();
    let shifted = encode_parquet("node_facts", "2026-11-22", &shifted[0].batches).unwrap();
    let shifted = put("shifted.parquet", shifted.to_vec()).await;
    for (key, table, rows, want) in [
        (
            &junk,
            "node_facts",
            123,
            "11 bytes is too small for a Parquet file (no footer)".to_string(),
        ),
        (
            &empty,
            "node_facts",
            123,
            "holds 0 rows (0 in its row groups), the worker claimed 123".to_string(),
        ),
        (
            &other,
            "node_facts",
            0,
            "does not match the catalog schema".to_string(),
        ),
        (
            &other,
            "linktest_ranks",
            0,
            "job kind 'ingest' writes only node_facts, not 'linktest_ranks'".to_string(),
        ),
        (
            &forged,
            "node_facts",
            1,
            format!("holds rows of run '{other_run}'"),
        ),
        (
            &shifted,
            "node_facts",
            1,
            "column 'date': row group 0".to_string(),
        ),
    ] {
        let e = w
            .complete_job(pb::CompleteJobRequest {
                job_id: job.job_id.clone(),
                lease_id: job.lease_id.clone(),
                files: vec![pb::StagedFile {
                    staged_key: key.clone(),
                    table: table.into(),
                    rows,
                    bytes: 11,
                    part: String::new(),
                }],
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(want.as_str()), "{}", e.message());
        if table == "node_facts" {
            assert!(e.message().contains(key.as_str()), "{}", e.message());
        }
    }
    // Nothing was committed: no node_facts file exists.
    let tables = c.lake_dir().join("tables").join("node_facts");
    assert!(!tables.exists(), "a refused commit left {tables:?}");
    // A real worker takes the job over once the rogue's lease expires.
    w.fail_job(pb::FailJobRequest {
        job_id: job.job_id.clone(),
        lease_id: job.lease_id.clone(),
        error: "giving up".into(),
        retryable: true,
    })
    .await
    .unwrap();
    c.add_worker("w1", None);
    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let rows: usize = table_batches(&c.lake_dir(), "node_facts", Some(&run.run_id))
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(rows, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bound_worker_token_serves_every_slot_of_its_worker() {
    // The documented form: BENCHLAKE_WORKER_TOKENS=w1:TOKEN and a worker
    // `--name w1` at its default concurrency (2 slots: w1.0, w1.1).
    let tokens = Tokens {
        user: vec![USER.into()],
        agent: vec![A1.into()],
        worker: vec![W1.into()],
        ..Default::default()
    };
    let mut c = Cluster::start(tokens).await;
    c.token = Some(USER.into());
    c.add_agent("a1", Some(secret(A1))).await;
    c.add_worker_slots("w1", Some(secret(W1)), 2);
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(c.submit("hostinfo", &[], 1).await.unwrap().run_id);
    }
    for id in &ids {
        let d = c.wait_settled(id, 60).await;
        assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
        assert_eq!(table_rows(&c.lake_dir(), "node_facts", Some(id)), 1);
    }
    // The slots are the bound worker's only: not another worker's name,
    // nor a name that merely starts like it.
    for name in ["w10", "w2.0", "w1.x", "w1."] {
        let e = c
            .workers_client(Some(secret(W1)))
            .lease_job(pb::LeaseJobRequest {
                protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
                worker: name.into(),
                kinds: vec![],
                wait_ms: 0,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{name}: {e:?}");
    }
}
