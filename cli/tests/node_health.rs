//! Per-node health and node actions on a real Slurm cluster of three nodes
//! (n1, n2, n3 on this host; `common/slurm.rs` starts and stops it), through
//! the real coordinator, agents, worker, `scontrol` and the `benchlake`
//! binary's `node-check`:
//!
//! - a `hostinfo` run of a schedule with `--drain-failing on` through srun on
//!   n2, expecting more cores than the node has: `node_health` names n2 with
//!   `node.cores` FAIL, the run's verdict is FAIL, and `scontrol show node n2`
//!   shows DRAIN with `benchlake: node.cores C vs 4096 (run RUN)`; the drain
//!   is recorded; `node-check n2` exits 1, `node-check n1` 2 (no verdict);
//! - a node drained by hand (n3, another reason) is left alone by a failing
//!   run and never resumed by a passing one;
//! - a later passing run on n2 (an agent on the node, local launcher)
//!   resumes n2 and forgets the record; `node-check n2` exits 0;
//! - an administrator who changed the reason of a benchlake drain keeps the
//!   node drained: the record is forgotten instead; one who resumed a
//!   benchlake drain by hand leaves a stale record, and the next failing run
//!   drains the node again;
//! - `schedule create --drain-failing dry-run` and `schedule list` show the
//!   node actions, a bad value is refused, a node name like an option too;
//! - a dry-run schedule failing n1 drains nothing, and node-check shows what
//!   it would have done; then slurmd itself runs deploy/slurm/healthcheck as
//!   its HealthCheckProgram, which drains n1 with the same reason format
//!   (reading only BENCHLAKE_*/SLURM_CONF lines of its env file, executing
//!   nothing), and `node-check --drain` does not drain it again; resumed by
//!   hand, n1 is not drained again for the same failing run;
//! - a restarted coordinator reads the node verdicts back from the lake and
//!   keeps benchlake's drain records;
//! - node-check's latency as a whole process (median of 9) is printed;
//! - pio through srun on three nodes: each node's write and read bandwidth
//!   gets its own `node_health` rows (n1, n2, n3), an impossible per-node
//!   bound fails every node and the run, and an on-demand run (no schedule)
//!   drains nothing.
mod common;
#[path = "common/slurm.rs"]
mod slurm;

use std::time::{Duration, Instant};

use arrow::array::{Array, StringArray};
use benchlake_coordinator::Tokens;
use benchlake_core::bench::{ArgTemplate, BenchmarkDef, Catalog};
use benchlake_core::scontrol::{NodeStatus, parse_show_node};
use benchlake_proto::v1 as pb;
use common::*;
use slurm::SlurmCluster;

/// The built-in `hostinfo` entry with `{self_exe}` pointing at the binary and
/// the Slurm cluster's environment.
fn hostinfo(env: &[(String, String)]) -> BenchmarkDef {
    builtin("hostinfo", env)
}

/// A built-in entry with `{self_exe}` pointing at the binary and the Slurm
/// cluster's environment.
fn builtin(name: &str, env: &[(String, String)]) -> BenchmarkDef {
    let cat = benchlake_agent::builtin_catalog().unwrap();
    let mut def = cat.get(name).expect("built in").clone();
    for a in def.command.iter_mut() {
        if let ArgTemplate::Arg(s) = a {
            *s = s.replace("{self_exe}", &bin());
        }
    }
    def.env.extend(env.iter().cloned());
    def
}

fn with_hostinfo(cfg: &mut benchlake_agent::AgentConfig, env: &[(String, String)]) {
    let mut cat = Catalog::from_toml(&catalog(&bin())).unwrap();
    cat.benchmarks.retain(|b| b.name != "hostinfo");
    cat.benchmarks.push(hostinfo(env));
    cfg.catalog = cat;
    cfg.address = "127.0.0.1".into();
}

fn show(sl: &SlurmCluster, node: &str) -> NodeStatus {
    let out = sl
        .command("scontrol")
        .args(["show", "node", node])
        .output()
        .unwrap();
    parse_show_node(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|| panic!("scontrol show node {node}: {out:?}"))
}

fn scontrol(sl: &SlurmCluster, args: &[&str]) {
    let st = sl.command("scontrol").args(args).status().unwrap();
    assert!(st.success(), "scontrol {args:?}");
}

/// Polls `scontrol show node` until `pred` holds (node actions run after the
/// commit, off the request path).
async fn wait_node(
    sl: &SlurmCluster,
    node: &str,
    what: &str,
    pred: impl Fn(&NodeStatus) -> bool,
) -> NodeStatus {
    let t = Instant::now();
    loop {
        let s = show(sl, node);
        if pred(&s) {
            return s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{node} never became {what}: {s:?}\n{}",
            sl.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `benchlake node-check NODE --json` against `c`: exit status and output.
fn node_check(
    c: &Cluster,
    sl: &SlurmCluster,
    node: &str,
    extra: &[&str],
) -> (i32, serde_json::Value) {
    let out = std::process::Command::new(bin())
        .args(["node-check", node, "--json", "--coordinator", &c.addr])
        .args(extra)
        .env("SLURM_CONF", sl.conf())
        .env("BENCHLAKE_NODE_CHECK_STATE", c.dir.path().join("cli-state"))
        .env_remove("SLURMD_NODENAME")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "node-check output {text:?}: {e}; stderr {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

/// Polls `node-check NODE --json` until `pred` holds: a node action runs after
/// its run commits, off the request path, later still on a loaded machine.
async fn wait_check(
    c: &Cluster,
    sl: &SlurmCluster,
    node: &str,
    what: &str,
    pred: impl Fn(i32, &serde_json::Value) -> bool,
) -> (i32, serde_json::Value) {
    let t = Instant::now();
    loop {
        let (code, v) = node_check(c, sl, node, &[]);
        if pred(code, &v) {
            return (code, v);
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{node}: never {what}: exit {code}, {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create_schedule(
    c: &Cluster,
    name: &str,
    spec: pb::BenchmarkSpec,
    action: pb::NodeAction,
) -> String {
    c.schedules()
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(pb::Schedule {
                name: name.into(),
                cron: "0 0 1 1 *".into(),
                time_zone: "UTC".into(),
                spec: Some(spec),
                node_action: action as i32,
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .schedule_id
}

/// Triggers the schedule and waits for its run (and all its jobs) to end.
async fn run_schedule(c: &Cluster, id: &str) -> pb::RunDetail {
    let run = c
        .schedules()
        .trigger_schedule(pb::TriggerScheduleRequest {
            schedule_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner();
    let d = c.wait_settled(&run.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    d
}

fn srun_on(node: &str, expect_cores: i64) -> pb::BenchmarkSpec {
    pb::BenchmarkSpec {
        launcher: pb::Launcher::Srun as i32,
        max_attempts: 1,
        slurm: Some(pb::SlurmOptions {
            nodes: 1,
            nodelist: vec![node.into()],
            ..Default::default()
        }),
        nodes: Some(pb::NodeSelector {
            names: vec!["login".into()],
            ..Default::default()
        }),
        ..bench_spec("hostinfo", &expect_ref(&expect(expect_cores)))
    }
}

/// What the hostinfo specs expect: `cores`, and this machine's memory (every
/// test node is this machine); without it memory would be judged against
/// the node's own history, NO_REFERENCE on a new schedule (docs/slurm.md).
fn expect(cores: i64) -> [(&'static str, String); 2] {
    [
        ("expect_cores", cores.to_string()),
        (
            "expect_memory_bytes",
            benchlake_formats::hostinfo::collect()
                .memory_bytes
                .to_string(),
        ),
    ]
}

fn expect_ref<'a>(e: &'a [(&'static str, String); 2]) -> [(&'static str, &'a str); 2] {
    [(e[0].0, e[0].1.as_str()), (e[1].0, e[1].1.as_str())]
}

fn local_on(agent: &str, expect_cores: i64) -> pb::BenchmarkSpec {
    pb::BenchmarkSpec {
        max_attempts: 1,
        nodes: Some(pb::NodeSelector {
            names: vec![agent.into()],
            ..Default::default()
        }),
        ..bench_spec("hostinfo", &expect_ref(&expect(expect_cores)))
    }
}

/// The `node_health` rows (node, check, status) of a run in the lake.
fn node_rows(c: &Cluster, run_id: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for b in table_batches(&c.lake_dir(), "node_health", Some(run_id)) {
        let s = |n: &str| {
            b.column_by_name(n)
                .unwrap()
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap()
                .clone()
        };
        let (node, check, status) = (s("node"), s("check"), s("status"));
        for i in 0..b.num_rows() {
            assert!(node.is_valid(i));
            // These specs expect cores only: memory is judged against the
            // node's own history (NO_REFERENCE on a new schedule, PASS
            // later; docs/slurm.md), which these tests are not about.
            if check.value(i) == "node.memory_bytes" && status.value(i) != "FAIL" {
                continue;
            }
            out.push((
                node.value(i).to_string(),
                check.value(i).to_string(),
                status.value(i).to_string(),
            ));
        }
    }
    out.sort();
    out
}

fn verdict(d: &pb::RunDetail) -> String {
    d.run.as_ref().unwrap().verdict.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failing_nodes_are_drained_and_resumed_only_by_benchlake() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let env = sl.env();
    let conf = sl.conf().to_path_buf();
    let mut c = Cluster::start_with(Tokens::default(), |cfg| {
        cfg.scontrol.env = vec![("SLURM_CONF".into(), conf.display().to_string())];
    })
    .await;
    let cores = std::thread::available_parallelism().unwrap().get() as i64;
    for name in ["login", "n2", "n3"] {
        let env = env.clone();
        c.add_agent_with(name, move |cfg| with_hostinfo(cfg, &env))
            .await;
    }
    c.add_worker("w1", None);

    // 1. A failing node is drained, with the check, value, bound and run.
    let drain = create_schedule(&c, "nodes-n2", srun_on("n2", 4096), pb::NodeAction::Drain).await;
    let d = run_schedule(&c, &drain).await;
    let run1 = d.run.as_ref().unwrap().run_id.clone();
    assert_eq!(
        node_rows(&c, &run1),
        [(
            "n2".to_string(),
            "node.cores".to_string(),
            "FAIL".to_string()
        )]
    );
    let want = format!("benchlake: node.cores {cores} vs 4096 (run {run1})");
    let st = wait_node(&sl, "n2", "drained", |s| s.drained()).await;
    assert_eq!(st.reason.as_deref(), Some(want.as_str()), "{st:?}");
    assert_eq!(
        verdict(&c.detail(&run1).await),
        "FAIL",
        "a failing node fails the run"
    );
    let (code, v) = node_check(&c, &sl, "n2", &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["checks"][0]["check"], "node.cores");
    assert_eq!(v["checks"][0]["value"], cores as f64);
    assert_eq!(v["drain"]["reason"], want.as_str());
    // `run show` names the failing node and the figure that failed it.
    let out = std::process::Command::new(bin())
        .args(["run", "show", &run1, "--coordinator", &c.addr])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("verdict    FAIL"), "{text}");
    assert!(
        // node.cores FAILs; node.memory_bytes (this machine's) PASSes.
        text.contains("checks     1 FAIL, 0 ERROR, 1 PASS"),
        "{text}"
    );
    assert!(text.contains("failing nodes  n2\n"), "{text}");
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("FAIL  node.cores"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.contains(" n2 ") && row.contains(&format!("{cores} cores vs 4096 cores")),
        "{row}"
    );
    let out = std::process::Command::new(bin())
        .args(["run", "show", &run1, "--json", "--coordinator", &c.addr])
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["failing_nodes"], serde_json::json!(["n2"]), "{j}");
    assert_eq!(j["checks"][0]["node"], "n2", "{j}");
    assert_eq!(j["checks"][0]["reference"], 4096.0, "{j}");
    let (code, v) = node_check(&c, &sl, "n1", &[]);
    assert_eq!(code, 2, "no verdict for n1: cannot tell: {v}");
    assert_eq!(v["health"], "unknown");

    // 2. A node drained by hand for another reason is never touched.
    scontrol(
        &sl,
        &[
            "update",
            "nodename=n3",
            "state=drain",
            "reason=admin: PSU swap",
        ],
    );
    let n3_fail = create_schedule(&c, "n3-fail", local_on("n3", 4096), pb::NodeAction::Drain).await;
    let n3_pass =
        create_schedule(&c, "n3-pass", local_on("n3", cores), pb::NodeAction::Drain).await;
    run_schedule(&c, &n3_fail).await;
    run_schedule(&c, &n3_pass).await;
    let (_, v) = wait_check(&c, &sl, "n3", "saw the admin's drain", |_, v| {
        v["events"].to_string().contains("already")
    })
    .await;
    let st = show(&sl, "n3");
    assert!(st.drained(), "{st:?}");
    assert_eq!(st.reason.as_deref(), Some("admin: PSU swap"));
    assert!(v["drain"].is_null(), "benchlake never recorded n3: {v}");
    let events = v["events"].to_string();
    assert!(
        events.contains("already") && events.contains("admin: PSU swap"),
        "{events}"
    );

    // 3. A later passing run resumes the node benchlake drained.
    let n2_pass =
        create_schedule(&c, "n2-pass", local_on("n2", cores), pb::NodeAction::Drain).await;
    let d = run_schedule(&c, &n2_pass).await;
    assert_eq!(verdict(&d), "PASS");
    wait_node(&sl, "n2", "resumed", |s| !s.drained()).await;
    let (code, v) = node_check(&c, &sl, "n2", &[]);
    assert_eq!(code, 0, "{v}");
    assert!(v["drain"].is_null(), "{v}");
    assert!(v["events"].to_string().contains("resumed n2"), "{v}");

    // 4. An administrator who changed a benchlake drain's reason keeps it.
    run_schedule(&c, &drain).await;
    wait_node(&sl, "n2", "drained again", |s| s.drained()).await;
    scontrol(
        &sl,
        &[
            "update",
            "nodename=n2",
            "state=drain",
            "reason=admin: keep out",
        ],
    );
    run_schedule(&c, &n2_pass).await;
    let (code, v) = wait_check(&c, &sl, "n2", "left the admin's drain", |_, v| {
        v["events"].to_string().contains("not benchlake's")
    })
    .await;
    let st = show(&sl, "n2");
    assert!(st.drained(), "{st:?}");
    assert_eq!(st.reason.as_deref(), Some("admin: keep out"));
    assert_eq!(code, 0, "n2 passes: {v}");
    assert!(v["drain"].is_null(), "the record is forgotten: {v}");
    assert!(v["events"].to_string().contains("not benchlake's"), "{v}");

    // 4b. A benchlake drain an administrator resumed by hand is stale: the
    //     next failing run drains the node again and records that drain.
    scontrol(&sl, &["update", "nodename=n2", "state=resume"]);
    let d = run_schedule(&c, &drain).await;
    let first = d.run.as_ref().unwrap().run_id.clone();
    wait_node(&sl, "n2", "drained by benchlake", |s| {
        s.reason
            .as_deref()
            .is_some_and(|r| r.ends_with(&format!("(run {first})")))
    })
    .await;
    scontrol(&sl, &["update", "nodename=n2", "state=resume"]);
    let d = run_schedule(&c, &drain).await;
    let again = d.run.as_ref().unwrap().run_id.clone();
    wait_node(&sl, "n2", "drained again", |s| {
        s.reason.as_deref()
            == Some(format!("benchlake: node.cores {cores} vs 4096 (run {again})").as_str())
    })
    .await;
    let (_, v) = node_check(&c, &sl, "n2", &[]);
    assert_eq!(v["drain"]["run_id"], again.as_str(), "{v}");

    // 5. A dry run changes nothing and says what it would do.
    // Made with the CLI, as users do; `schedule list` shows the node actions.
    let out = std::process::Command::new(bin())
        .args([
            "schedule",
            "create",
            "dry-n1",
            "--cron",
            "0 0 1 1 *",
            "--drain-failing",
            "dry-run",
        ])
        .args([
            "--json",
            "--coordinator",
            &c.addr,
            "hostinfo",
            "--launcher",
            "srun",
            "-N",
            "1",
        ])
        .args([
            "--nodelist",
            "n1",
            "--agents",
            "login",
            "--max-attempts",
            "1",
        ])
        .args(["-p", "expect_cores=4096"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["drain_failing"], "dry-run");
    let dry = created["schedule_id"].as_str().unwrap().to_string();
    let out = std::process::Command::new(bin())
        .args(["schedule", "list", "--coordinator", &c.addr])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        list.lines()
            .find(|l| l.contains(name))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("dry-n1").ends_with("drain-failing dry-run"), "{list}");
    assert!(line("nodes-n2").ends_with("drain-failing on"), "{list}");
    let out = std::process::Command::new(bin())
        .args([
            "schedule",
            "create",
            "x",
            "--cron",
            "0 0 1 1 *",
            "--drain-failing",
            "yes",
        ])
        .args(["--coordinator", &c.addr, "hostinfo"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("dry-run"));
    // A node name that could be an option never reaches anything.
    let out = std::process::Command::new(bin())
        .args(["node-check", "--coordinator", &c.addr, "--", "-n1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("starts with '-'"));
    let d = run_schedule(&c, &dry).await;
    let run5 = d.run.as_ref().unwrap().run_id.clone();
    let (code, v) = wait_check(&c, &sl, "n1", "recorded the dry run", |_, v| {
        v["events"][0]["dry_run"] == true
    })
    .await;
    assert!(!show(&sl, "n1").drained());
    assert_eq!(code, 1, "{v}");
    let e = &v["events"][0];
    assert_eq!(e["dry_run"], true, "{v}");
    assert_eq!(
        e["detail"],
        format!("would drain n1: benchlake: node.cores {cores} vs 4096 (run {run5})").as_str()
    );

    // 6. Slurm's HealthCheckProgram (deploy/slurm/healthcheck, run by slurmd
    //    itself on each node) drains the failing node with the same reason;
    //    node-check --drain never drains a drained node again.
    let dir = c.dir.path();
    let envf = dir.join("healthcheck.env");
    std::fs::write(
        &envf,
        format!(
            "BENCHLAKE={}\nBENCHLAKE_COORDINATOR={}\nSLURM_CONF={}\nBENCHLAKE_NODE_CHECK_STATE={}\nPATH=/nowhere\nBENCHLAKE_X;touch {}=1\n",
            bin(),
            c.addr,
            sl.conf().display(),
            dir.join("hc-state").display(),
            dir.join("pwned").display()
        ),
    )
    .unwrap();
    let wrapper = dir.join("healthcheck-wrapper");
    write_script(
        &wrapper,
        &format!(
            "#!/bin/sh\nBENCHLAKE_HEALTHCHECK_ENV='{}' exec '{}'\n",
            envf.display(),
            concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/slurm/healthcheck")
        ),
    );
    let mut conf = std::fs::read_to_string(sl.conf()).unwrap();
    conf.push_str(&format!(
        "HealthCheckProgram={}\nHealthCheckInterval=1\nHealthCheckNodeState=ANY\n",
        wrapper.display()
    ));
    std::fs::write(sl.conf(), conf).unwrap();
    scontrol(&sl, &["reconfigure"]);
    let st = wait_node(&sl, "n1", "drained by the HealthCheckProgram", |s| {
        s.drained()
    })
    .await;
    assert_eq!(
        st.reason,
        Some(format!(
            "benchlake: node.cores {cores} vs 4096 (run {run5})"
        ))
    );
    assert!(
        !dir.join("pwned").exists(),
        "the env file is never executed"
    );
    let (code, v) = node_check(&c, &sl, "n1", &["--drain"]);
    assert_eq!(code, 1);
    assert!(
        v["drain_action"]
            .as_str()
            .unwrap()
            .starts_with("not drained again"),
        "{v}"
    );
    // An administrator resumes n1: the HealthCheckProgram (every second)
    // does not drain it again for the same failing run.
    assert_eq!(
        std::fs::read_to_string(dir.join("hc-state").join("n1.drained")).unwrap(),
        run5
    );
    scontrol(&sl, &["update", "nodename=n1", "state=resume"]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!show(&sl, "n1").drained(), "{:?}", show(&sl, "n1"));
    let (_, v) = node_check(
        &c,
        &sl,
        "n1",
        &[
            "--drain",
            "--state-dir",
            &dir.join("hc-state").display().to_string(),
        ],
    );
    assert!(
        v["drain_action"]
            .as_str()
            .unwrap()
            .starts_with("not drained again: drained once for run"),
        "{v}"
    );
    // The drains of n2 (benchlake's) and n3 (the admin's) stay as they were.
    assert_eq!(
        show(&sl, "n2").reason,
        Some(format!(
            "benchlake: node.cores {cores} vs 4096 (run {again})"
        ))
    );
    assert_eq!(show(&sl, "n3").reason.as_deref(), Some("admin: PSU swap"));

    // 7. A restarted coordinator answers from the lake and the state store:
    //    the newest verdicts are read back, benchlake's drain record kept.
    c.stop_coordinator().await;
    c.restart_coordinator(Tokens::default()).await;
    let t = Instant::now();
    let v = loop {
        let (code, v) = node_check(&c, &sl, "n2", &[]);
        if v["complete"] == true {
            assert_eq!(code, 1, "{v}\n{:?}", c.coord.verdicts().load_report());
            break v;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(v["checks"][0]["run_id"], again.as_str(), "{v}");
    assert_eq!(v["drain"]["run_id"], again.as_str(), "{v}");
    let (code, v) = node_check(&c, &sl, "n1", &[]);
    assert_eq!(
        (code, &v["checks"][0]["run_id"]),
        (1, &serde_json::json!(run5)),
        "{v}"
    );

    // node-check as a whole process, as slurmd would run it.
    let mut times = Vec::new();
    for _ in 0..9 {
        let t = Instant::now();
        let st = std::process::Command::new(bin())
            .args(["node-check", "n1", "--coordinator", &c.addr])
            .output()
            .unwrap();
        times.push(t.elapsed().as_secs_f64());
        assert_eq!(st.status.code(), Some(1));
    }
    times.sort_by(f64::total_cmp);
    eprintln!(
        "node-check latency: median {:.1} ms, max {:.1} ms",
        times[4] * 1e3,
        times[8] * 1e3
    );
    assert!(times[4] < 1.0, "node-check median {:.3} s", times[4]);
    for n in ["n1", "n2", "n3"] {
        // Some are not drained any more: resume refuses those, harmlessly.
        let _ = sl
            .command("scontrol")
            .args(["update", &format!("nodename={n}"), "state=resume"])
            .output();
    }
    c.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pio_bandwidth_is_judged_per_slurm_node() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let env = sl.env();
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_agent_with("login", move |cfg| {
        with_hostinfo(cfg, &env);
        cfg.catalog.benchmarks.retain(|b| b.name != "pio");
        cfg.catalog.benchmarks.push(builtin("pio", &env));
    })
    .await;
    c.add_worker("w1", None);
    let spec = pb::BenchmarkSpec {
        launcher: pb::Launcher::Srun as i32,
        max_attempts: 1,
        slurm: Some(pb::SlurmOptions {
            nodes: 3,
            ..Default::default()
        }),
        ..bench_spec(
            "pio",
            &[
                ("np", "3"),
                ("block_size", "4MiB"),
                ("transfer_size", "1MiB"),
                ("iterations", "1"),
                ("check_node_write_bw_mib_s", "1000000000"),
            ],
        )
    };
    let run = c.submit_spec(spec).await.unwrap();
    let d = c.wait_settled(&run.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}\n{}", sl.logs());
    let rows = node_rows(&c, &run.run_id);
    let bound: Vec<_> = rows
        .iter()
        .filter(|r| r.1 == "node.write_bw_mib_s")
        .map(|r| (r.0.as_str(), r.2.as_str()))
        .collect();
    assert_eq!(
        bound,
        [("n1", "FAIL"), ("n2", "FAIL"), ("n3", "FAIL")],
        "{rows:?}"
    );
    for op in ["write", "read"] {
        let vs: Vec<_> = rows
            .iter()
            .filter(|r| r.1 == format!("node.{op}_bw_of_median"))
            .map(|r| r.0.as_str())
            .collect();
        assert_eq!(vs, ["n1", "n2", "n3"], "{rows:?}");
    }
    assert_eq!(verdict(&c.detail(&run.run_id).await), "FAIL");
    // An on-demand run has no schedule, hence no node action.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for n in ["n1", "n2", "n3"] {
        assert!(!show(&sl, n).drained(), "{n}");
    }
    let (code, v) = node_check(&c, &sl, "n2", &[]);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["drain"].is_null() && v["events"].as_array().unwrap().is_empty(),
        "{v}"
    );
    c.shutdown();
}

/// node-check is a user call like any other: a user token answers, an
/// agent's token or none is refused (exit 2, saying why). No Slurm needed:
/// an agent on the node runs `hostinfo` with the local launcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_check_needs_a_user_token() {
    let tok = |r: &str| format!("{r}-token-0123456789abcdef");
    let tokens = Tokens {
        admin: vec![tok("admin")],
        user: vec![tok("user")],
        agent: vec![tok("agent")],
        worker: vec![tok("worker")],
    };
    let mut c = Cluster::start(tokens).await;
    c.token = Some(tok("admin"));
    let agent_token = tok("agent");
    c.add_agent_with("n7", move |cfg| {
        with_hostinfo(cfg, &[]);
        cfg.token = Some(agent_token);
    })
    .await;
    c.add_worker("w1", Some(&tok("worker")));
    let cores = std::thread::available_parallelism().unwrap().get() as i64;
    let run = c.submit_spec(local_on("n7", cores)).await.unwrap();
    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(verdict(&d), "PASS", "{d:#?}");
    assert_eq!(
        node_rows(&c, &run.run_id),
        [(
            "n7".to_string(),
            "node.cores".to_string(),
            "PASS".to_string()
        )]
    );
    let check = |token: Option<String>| {
        let mut cmd = std::process::Command::new(bin());
        cmd.args(["node-check", "n7", "--coordinator", &c.addr])
            .env_remove("BENCHLAKE_TOKEN");
        if let Some(t) = token {
            cmd.env("BENCHLAKE_TOKEN", t);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, out) = check(Some(tok("user")));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("n7: healthy"), "{out}");
    assert!(
        out.contains("node.cores") && out.contains(&run.run_id),
        "{out}"
    );
    let (code, out) = check(Some(tok("agent")));
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("did not answer") && out.to_lowercase().contains("permission"),
        "{out}"
    );
    let (code, out) = check(None);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.to_lowercase().contains("unauthenticated") || out.contains("token"),
        "{out}"
    );
    c.shutdown();
}

/// LinkTest's slow links pinned on a host through the whole pipeline: an
/// agent "runs LinkTest" (benchlake's synthetic LinkTest 2.1.17 file of 32
/// ranks on 8 hosts, every link of node0001 4x slower), the worker ingests
/// it and writes one `node_health` row per host, only node0001 FAIL; the run
/// FAILs; a dry-run schedule says it would drain node0001 and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn linktest_slow_links_are_pinned_on_their_host() {
    let mut c = Cluster::start(Tokens::default()).await;
    let toml = format!(
        r#"
[[benchmark]]
name = "linktest-synthetic"
kind = "linktest"
command = ["{bin}", "probe", "linktest", "--ranks", "32", "--ranks-per-host", "4", "--seed", "5", "--out", "{{out_dir}}/pingpong_results_bin.sion"]
timeout_s = 120
[[benchmark.param]]
name = "check_node_slow_pair_fraction"
type = "float"
optional = true
min = 0
max = 1
[[benchmark.output]]
file = "pingpong_results_bin.sion"
format = "linktest"
required = true
"#,
        bin = bin()
    );
    c.add_agent_with_catalog("login", &toml).await;
    c.add_worker("w1", None);
    let spec = pb::BenchmarkSpec {
        max_attempts: 1,
        ..bench_spec("linktest-synthetic", &[])
    };
    let id = create_schedule(&c, "links", spec, pb::NodeAction::DryRun).await;
    let d = run_schedule(&c, &id).await;
    let run_id = d.run.as_ref().unwrap().run_id.clone();
    let rows = node_rows(&c, &run_id);
    assert_eq!(rows.len(), 8, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r.1 == "node.linktest_slow_pair_fraction")
    );
    let failing: Vec<&str> = rows
        .iter()
        .filter(|r| r.2 == "FAIL")
        .map(|r| r.0.as_str())
        .collect();
    assert_eq!(failing, ["node0001"], "{rows:?}");
    assert_eq!(verdict(&d), "FAIL");
    let t = Instant::now();
    let v = loop {
        let out = std::process::Command::new(bin())
            .args(["node-check", "node0001", "--json", "--coordinator", &c.addr])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if !v["events"].as_array().is_none_or(|e| e.is_empty()) {
            assert_eq!(out.status.code(), Some(1), "{v}");
            break v;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let detail = v["events"][0]["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("would drain node0001: benchlake: node.linktest_slow_pair_fraction 0.")
            && detail.ends_with(&format!("vs 0.50 (run {run_id})")),
        "{detail}"
    );
    let out = std::process::Command::new(bin())
        .args(["node-check", "node0002", "--json", "--coordinator", &c.addr])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert!(v["events"].as_array().unwrap().is_empty(), "{v}");
    c.shutdown();
}

/// A webhook receiver on loopback: answers 200 and keeps each body.
struct Hook {
    url: String,
    got: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

impl Hook {
    async fn start() -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", l.local_addr().unwrap());
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let g = got.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let g = g.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 8192];
                    loop {
                        let n = s.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).to_string();
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if buf.len() < end + 4 + len {
                            continue;
                        }
                        let body = &buf[end + 4..end + 4 + len];
                        g.lock()
                            .unwrap()
                            .push(serde_json::from_slice(body).unwrap_or_default());
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                            .await;
                        return;
                    }
                });
            }
        });
        Self { url, got }
    }

    fn bodies(&self) -> Vec<serde_json::Value> {
        self.got.lock().unwrap().clone()
    }
}

/// `benchlake ARGS… --coordinator C` (auth off: the anonymous admin): exit
/// status, stdout, stderr.
fn cli(c: &Cluster, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin())
        .args(args)
        .args(["--coordinator", &c.addr])
        .env_remove("BENCHLAKE_TOKEN")
        .env_remove("SLURMD_NODENAME")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Sends the due outbox rows as the leader's delivery loop does (the test
/// coordinator runs no background loop) and returns the run's notification.
async fn notify_now(
    c: &Cluster,
    outbox: &benchlake_coordinator::notify::Outbox,
    run: &str,
) -> pb::Notification {
    for _ in 0..50 {
        outbox.deliver_due(&c.coord).await.unwrap();
        let d = c.detail(run).await;
        if let Some(n) = d.notifications.first()
            && n.state != "PENDING"
        {
            return n.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the notification of {run} stayed pending: {:#?}",
        c.detail(run).await.notifications
    );
}

/// Issue 37 item 7 on the three-node Slurm cluster, with a webhook receiver:
///
/// - n2 fails `node.cores` under a `--drain-failing on` schedule; an admin
///   acknowledged it (until a time, with a comment): the `node_health` row
///   is recorded as measured (FAIL, and the run's verdict FAIL), but n2 is
///   not drained, the receiver gets nothing, the outbox row is SKIPPED
///   saying which finding was silenced and why, and `node-check n2` exits 0
///   printing the acknowledgement;
/// - once the acknowledgement expired (the coordinator's clock moved past
///   it), `node-check n2` exits 1 again, and the next failing run drains n2
///   and is notified (`verdict.fail`);
/// - `ack` through the CLI: list, `--json`, remove; bad fields are refused
///   naming the field;
/// - a maintenance window `n[1-3]` declared with the CLI: the same silence
///   (no drain, SKIPPED naming the window, node-check 0 and "in
///   maintenance"); after `maintenance remove` the next run drains and
///   notifies again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_and_in_maintenance_findings_are_neither_notified_nor_drained() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let env = sl.env();
    let conf = sl.conf().to_path_buf();
    let hook = Hook::start().await;
    let url = hook.url.clone();
    let mut c = Cluster::start_with(Tokens::default(), |cfg| {
        cfg.scontrol.env = vec![("SLURM_CONF".into(), conf.display().to_string())];
        cfg.notify.webhooks = vec![benchlake_coordinator::notify::Webhook {
            name: "ops".into(),
            url: url.parse().unwrap(),
            secret: None,
        }];
        cfg.notify.defaults = vec!["ops".into()];
    })
    .await;
    let outbox = benchlake_coordinator::notify::Outbox::new(&c.coord.config().notify).unwrap();
    let cores = std::thread::available_parallelism().unwrap().get() as i64;
    let env2 = env.clone();
    c.add_agent_with("login", move |cfg| with_hostinfo(cfg, &env2))
        .await;
    c.add_worker("w1", None);
    let drain = create_schedule(&c, "nodes-n2", srun_on("n2", 4096), pb::NodeAction::Drain).await;

    // 1. Acknowledged: recorded, not drained, not notified, node-check 0.
    let expires = c.clock_now() + 600_000;
    let ack = c
        .cluster()
        .acknowledge_check(pb::AcknowledgeCheckRequest {
            node: "n2".into(),
            check: "node.cores".into(),
            comment: "DIMM on order".into(),
            expires_ms: expires,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        ack.author, "anonymous",
        "authentication off: the anonymous admin"
    );
    let until = benchlake_coordinator::silence::fmt_time(expires);
    let d = run_schedule(&c, &drain).await;
    let run1 = d.run.as_ref().unwrap().run_id.clone();
    assert_eq!(
        node_rows(&c, &run1),
        [(
            "n2".to_string(),
            "node.cores".to_string(),
            "FAIL".to_string()
        )],
        "recorded exactly as measured"
    );
    assert_eq!(verdict(&d), "FAIL", "the run's verdict is as measured");
    let (code, v) = wait_check(&c, &sl, "n2", "saw the silenced finding", |_, v| {
        v["events"].to_string().contains("silenced")
    })
    .await;
    assert_eq!(code, 0, "an acknowledged FAIL does not fail the node: {v}");
    let why = format!("acknowledged by anonymous until {until}: DIMM on order");
    assert_eq!(v["checks"][0]["status"], "FAIL", "{v}");
    assert_eq!(v["checks"][0]["silenced"], why.as_str(), "{v}");
    assert!(v["drain"].is_null(), "{v}");
    let events = v["events"].to_string();
    assert!(
        events.contains("not acted on: n2 node.cores FAIL") && events.contains("DIMM on order"),
        "{events}"
    );
    let st = show(&sl, "n2");
    assert!(!st.drained(), "an acknowledged node is not drained: {st:?}");
    let (code, out, _) = cli(&c, &["node-check", "n2"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        // Its memory PASSes; its cores FAIL, acknowledged.
        out.starts_with("n2: healthy (1 finding(s) silenced"),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.contains("node.cores"))
        .unwrap_or_default();
    assert!(
        line.trim_start().starts_with("FAIL  node.cores") && line.ends_with(&format!("({why})")),
        "{out}"
    );
    let n = notify_now(&c, &outbox, &run1).await;
    assert_eq!(n.state, "SKIPPED", "{n:?}");
    assert_eq!(
        n.last_error,
        format!("silenced: n2 node.cores FAIL ({why})")
    );
    assert!(
        hook.bodies().is_empty(),
        "nothing sent: {:?}",
        hook.bodies()
    );

    // 2. Expired: failing again; the next run drains and is notified.
    c.advance_with_heartbeats(600_001).await;
    let (code, v) = node_check(&c, &sl, "n2", &[]);
    assert_eq!(code, 1, "the acknowledgement expired: {v}");
    assert!(v["checks"][0]["silenced"].is_null(), "{v}");
    let (_, list, _) = cli(&c, &["ack", "list"]);
    assert_eq!(list.trim(), "no acknowledgement in force", "{list}");
    let (_, list, _) = cli(&c, &["ack", "list", "--all", "--json"]);
    let l: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(l[0]["id"], ack.id.as_str(), "kept for the record: {l}");
    assert_eq!(l[0]["expired"], true, "{l}");
    let d = run_schedule(&c, &drain).await;
    let run2 = d.run.as_ref().unwrap().run_id.clone();
    let want = format!("benchlake: node.cores {cores} vs 4096 (run {run2})");
    let st = wait_node(&sl, "n2", "drained", |s| s.drained()).await;
    assert_eq!(st.reason.as_deref(), Some(want.as_str()));
    let n = notify_now(&c, &outbox, &run2).await;
    assert_eq!(
        (n.state.as_str(), n.event.as_str()),
        ("DELIVERED", "verdict.fail"),
        "{n:?}"
    );
    let bodies = hook.bodies();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert_eq!(bodies[0]["run"]["run_id"], run2.as_str());
    assert_eq!(bodies[0]["failing_nodes"][0]["node"], "n2");
    assert!(bodies[0].get("silenced").is_none(), "{}", bodies[0]);
    scontrol(&sl, &["update", "nodename=n2", "state=resume"]);

    // 3. The CLI: ack, list, remove; refusals name the field.
    let soon = benchlake_coordinator::silence::fmt_time(c.clock_now() + 3_600_000);
    let (code, out, err) = cli(
        &c,
        &[
            "ack",
            "n3",
            "node.",
            "--comment",
            "PSU swap",
            "--expires",
            &soon,
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let a: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (a["node"].as_str(), a["check"].as_str()),
        (Some("n3"), Some("node."))
    );
    let (_, list, _) = cli(&c, &["ack", "list"]);
    assert!(
        list.contains("n3") && list.contains("node.") && list.contains("PSU swap"),
        "{list}"
    );
    let (code, _, err) = cli(
        &c,
        &[
            "ack",
            "n3",
            "node.cores",
            "--comment",
            "x",
            "--expires",
            "2001-01-01",
        ],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("expires_ms") && err.contains("not in the future"),
        "{err}"
    );
    let (code, _, err) = cli(
        &c,
        &[
            "ack",
            "n3",
            "node cores",
            "--comment",
            "x",
            "--expires",
            &soon,
        ],
    );
    assert!(code != 0 && err.contains("check:"), "{err}");
    // Scoped to a schedule (by name), for a run-level check on every node.
    let (code, _, err) = cli(
        &c,
        &[
            "ack",
            "*",
            "io.",
            "--schedule",
            "nope",
            "--comment",
            "x",
            "--expires",
            &soon,
        ],
    );
    assert!(
        code != 0 && err.contains("schedule: no schedule 'nope'"),
        "{err}"
    );
    let (code, out, err) = cli(
        &c,
        &[
            "ack",
            "*",
            "io.",
            "--schedule",
            "nodes-n2",
            "--comment",
            "slow disks",
            "--expires",
            &soon,
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let scoped: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(scoped["schedule_id"], drain.as_str(), "{scoped}");
    assert_eq!(scoped["schedule"], "nodes-n2", "{scoped}");
    let (code, _, err) = cli(&c, &["ack", "remove", scoped["id"].as_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&c, &["ack", "remove", a["id"].as_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("removed "), "{out}");
    let (_, list, _) = cli(&c, &["ack", "list", "--all"]);
    assert!(!list.contains("PSU swap"), "removed: {list}");

    // 4. A maintenance window: silenced alike, until it is removed.
    let start = benchlake_coordinator::silence::fmt_time(c.clock_now() - 60_000);
    let (code, out, err) = cli(
        &c,
        &[
            "maintenance",
            "add",
            "n[1-3]",
            "--start",
            &start,
            "--end",
            "2h",
            "--reason",
            "firmware",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let w: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(w["node_names"], serde_json::json!(["n1", "n2", "n3"]));
    assert_eq!(w["state"], "ACTIVE");
    let (code, _, err) = cli(
        &c,
        &[
            "maintenance",
            "add",
            "n[3-1]",
            "--end",
            "2h",
            "--reason",
            "x",
        ],
    );
    assert!(
        code != 0 && err.contains("nodes:") && err.contains("backwards"),
        "{err}"
    );
    let d = run_schedule(&c, &drain).await;
    let run3 = d.run.as_ref().unwrap().run_id.clone();
    assert_eq!(verdict(&d), "FAIL");
    let n = notify_now(&c, &outbox, &run3).await;
    assert_eq!(n.state, "SKIPPED", "{n:?}");
    assert!(
        n.last_error
            .starts_with("silenced: n2 node.cores FAIL (maintenance n[1-3] "),
        "{n:?}"
    );
    assert!(n.last_error.ends_with("by anonymous: firmware)"), "{n:?}");
    let (code, v) = wait_check(&c, &sl, "n2", "saw the window", |_, v| {
        v["events"].as_array().is_some_and(|e| {
            e.iter()
                .any(|e| e["run_id"] == run3.as_str() && e["action"] == "silenced")
        })
    })
    .await;
    assert_eq!(code, 0, "{v}");
    assert!(
        v["maintenance"]
            .as_str()
            .unwrap_or_default()
            .starts_with("maintenance n[1-3]"),
        "{v}"
    );
    assert!(!show(&sl, "n2").drained(), "no drain in maintenance");
    assert_eq!(hook.bodies().len(), 1, "nothing more sent");
    let (_, list, _) = cli(&c, &["maintenance", "list"]);
    assert!(
        list.contains("ACTIVE") && list.contains("n[1-3]") && list.contains("firmware"),
        "{list}"
    );
    let (code, _, err) = cli(&c, &["maintenance", "remove", w["id"].as_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let d = run_schedule(&c, &drain).await;
    let run4 = d.run.as_ref().unwrap().run_id.clone();
    wait_node(&sl, "n2", "drained after the window", |s| {
        s.reason.as_deref()
            == Some(format!("benchlake: node.cores {cores} vs 4096 (run {run4})").as_str())
    })
    .await;
    let n = notify_now(&c, &outbox, &run4).await;
    assert_eq!(n.state, "DELIVERED", "{n:?}");
    assert_eq!(hook.bodies().len(), 2);
    scontrol(&sl, &["update", "nodename=n2", "state=resume"]);
    c.shutdown();
}
