//! Slurm batch mode (the `sbatch` launcher, docs/slurm.md) on a real Slurm
//! cluster of three nodes (n1, n2, n3 on this host; `common/slurm.rs` starts
//! and stops it). One agent plays the login node: it submits each task with
//! `sbatch`, follows the job with `scontrol` and collects its outputs from
//! the task directory. Through the real coordinator, agent and worker:
//! - pio as a batch job on three nodes: the rows of `io_task_times` name n1,
//!   n2, n3, the task records the Slurm job id and node list (`run show`
//!   prints them), `raw_files` carries them, nothing is left in Slurm;
//! - a job Slurm cannot start (more nodes than exist) shows Slurm's state and
//!   reason to users while the task stays LEASED; `run cancel` scancels it;
//!   a task timeout scancels a pending job and says what Slurm said;
//! - a job past its Slurm time limit fails the task with TIMEOUT;
//! - the agent (a real `benchlake agent` process) killed with SIGKILL while
//!   its job runs and started again re-attaches to the job: the run
//!   SUCCEEDS on its first attempt with its rows.
mod common;
#[path = "common/slurm.rs"]
mod slurm;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use arrow::array::{Array, RecordBatch, StringArray};
use benchlake_coordinator::Tokens;
use benchlake_core::bench::{ArgTemplate, BenchmarkDef, Catalog, LauncherKind};
use benchlake_proto::v1 as pb;
use common::*;
use slurm::SlurmCluster;

fn col<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> &'a T {
    b.column_by_name(name)
        .unwrap_or_else(|| panic!("column {name}"))
        .as_any()
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("type of {name}"))
}

/// A built-in entry with `{self_exe}` pointing at the benchlake binary
/// (in-process agents' own executable is the test binary).
fn builtin(name: &str) -> BenchmarkDef {
    let cat = benchlake_agent::builtin_catalog().unwrap();
    let mut def = cat.get(name).expect("built in").clone();
    assert!(
        def.launchers.contains(&LauncherKind::Sbatch),
        "the built-in {name} entry offers sbatch"
    );
    for a in def.command.iter_mut() {
        if let ArgTemplate::Arg(s) = a {
            *s = s.replace("{self_exe}", &bin());
        }
    }
    def
}

/// A `sleep` entry for batch mode.
fn slow() -> BenchmarkDef {
    Catalog::from_toml(
        r#"
[[benchmark]]
name = "slow"
kind = "noop"
command = ["sleep", "{seconds}"]
launchers = ["sbatch"]
[[benchmark.param]]
name = "seconds"
type = "float"
default = "1"
min = 0
max = 3600
"#,
    )
    .unwrap()
    .get("slow")
    .unwrap()
    .clone()
}

/// Starts the test cluster's "login node" agent offering `defs` (with the
/// Slurm cluster's environment), plus a worker.
async fn login_node(sl: &SlurmCluster, defs: Vec<BenchmarkDef>) -> Cluster {
    let mut c = Cluster::start(Tokens::default()).await;
    let env = sl.env();
    c.add_agent_with("login", move |cfg| {
        let mut cat = Catalog::from_toml(&catalog(&bin())).unwrap();
        for mut d in defs {
            d.env.extend(env.iter().cloned());
            cat.benchmarks.retain(|b| b.name != d.name);
            cat.benchmarks.push(d);
        }
        cfg.catalog = cat;
        cfg.address = "127.0.0.1".into();
    })
    .await;
    c.add_worker("w1", None);
    c
}

fn sbatch_spec(bench: &str, params: &[(&str, &str)], slurm: pb::SlurmOptions) -> pb::BenchmarkSpec {
    pb::BenchmarkSpec {
        launcher: pb::Launcher::Sbatch as i32,
        max_attempts: 1,
        slurm: Some(slurm),
        ..bench_spec(bench, params)
    }
}

fn nodes(n: u32) -> pb::SlurmOptions {
    pb::SlurmOptions {
        nodes: n,
        ..Default::default()
    }
}

fn task_state(t: &pb::Task) -> pb::TaskState {
    pb::TaskState::try_from(t.state).unwrap()
}

/// What `scontrol show job ID -o` says of `field` (`JobState`, `Reason`).
fn scontrol_field(sl: &SlurmCluster, job: &str, field: &str) -> String {
    let out = sl
        .command("scontrol")
        .args(["show", "job", job, "-o"])
        .output()
        .expect("scontrol");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{field}=")).map(String::from))
        .unwrap_or_default()
}

/// `benchlake run show RUN` against the test coordinator.
fn run_show(c: &Cluster, run_id: &str, json: bool) -> String {
    let mut cmd = std::process::Command::new(bin());
    cmd.args(["run", "show", run_id, "--coordinator", &c.addr]);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("benchlake run show");
    assert!(
        out.status.success(),
        "run show: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pio_runs_as_a_batch_job_and_records_the_job_and_its_nodes() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let c = login_node(&sl, vec![builtin("pio"), builtin("hostinfo")]).await;
    let params = [
        ("np", "3"),
        ("block_size", "4MiB"),
        ("transfer_size", "1MiB"),
        ("iterations", "1"),
    ];
    let run = c
        .submit_spec(sbatch_spec("pio", &params, nodes(3)))
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 120).await;
    let t = &d.tasks[0];
    assert_eq!(
        state(&d),
        pb::RunState::Succeeded,
        "{}: {d:#?}\n{}",
        t.error,
        sl.logs()
    );
    assert_eq!(d.tasks.len(), 1, "one task on the login agent");
    assert_eq!(t.attempt, 1);
    let job: u64 = t
        .slurm_job_id
        .parse()
        .unwrap_or_else(|_| panic!("job id '{}'", t.slurm_job_id));
    assert!(job > 0);
    assert_eq!(t.slurm_nodes, "n[1-3]", "the job's node list");
    assert_eq!(t.exit_code, 0);
    // Slurm's own record of the job agrees.
    assert_eq!(
        scontrol_field(&sl, &t.slurm_job_id, "JobState"),
        "COMPLETED"
    );
    assert_eq!(scontrol_field(&sl, &t.slurm_job_id, "NodeList"), "n[1-3]");
    assert_eq!(
        scontrol_field(&sl, &t.slurm_job_id, "JobName"),
        format!("benchlake-{}", t.task_id)
    );
    let lake = c.lake_dir();
    let mut hosts = BTreeSet::new();
    for b in table_batches(&lake, "io_task_times", Some(&run.run_id)) {
        let host = col::<StringArray>(&b, "host");
        for i in 0..b.num_rows() {
            hosts.insert(host.value(i).to_string());
        }
    }
    assert_eq!(
        hosts,
        BTreeSet::from(["n1".to_string(), "n2".into(), "n3".into()]),
        "io_task_times hosts are the Slurm nodes"
    );
    assert!(table_rows(&lake, "io_results", Some(&run.run_id)) >= 2);
    // raw_files rows carry the job and its nodes.
    let mut raw = 0;
    for b in table_batches(&lake, "raw_files", Some(&run.run_id)) {
        let id = col::<StringArray>(&b, "slurm_job_id");
        let ns = col::<StringArray>(&b, "slurm_nodes");
        for i in 0..b.num_rows() {
            assert_eq!(id.value(i), t.slurm_job_id);
            assert_eq!(ns.value(i), "n[1-3]");
            raw += 1;
        }
    }
    assert!(raw >= 3, "pio-result.json and the two logs: {raw}");
    // Users see the job: run show and its JSON.
    let show = run_show(&c, &run.run_id, false);
    assert!(
        show.contains(&format!("slurm job {job} on n[1-3]")),
        "{show}"
    );
    let js: serde_json::Value = serde_json::from_str(&run_show(&c, &run.run_id, true)).unwrap();
    assert_eq!(js["tasks"][0]["slurm_job_id"], t.slurm_job_id.as_str());
    assert_eq!(js["tasks"][0]["slurm_nodes"], "n[1-3]");
    let out = std::process::Command::new(bin())
        .args(["run", "logs", &run.run_id, "--coordinator", &c.addr])
        .output()
        .expect("benchlake run logs");
    let logs = String::from_utf8_lossy(&out.stdout);
    assert!(
        logs.contains(&format!("slurm job {job} on n[1-3]")),
        "{logs}"
    );

    // hostinfo as a batch job on three nodes (one task per node from its
    // catalog entry): node_facts names each Slurm node once.
    let run = c
        .submit_spec(sbatch_spec("hostinfo", &[], nodes(3)))
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 120).await;
    assert_eq!(
        state(&d),
        pb::RunState::Succeeded,
        "{}: {d:#?}",
        d.tasks[0].error
    );
    let mut facts = Vec::new();
    for b in table_batches(&lake, "node_facts", Some(&run.run_id)) {
        let node = col::<StringArray>(&b, "node");
        for i in 0..b.num_rows() {
            facts.push(node.value(i).to_string());
        }
    }
    facts.sort();
    assert_eq!(facts, ["n1", "n2", "n3"], "node_facts.node");
    assert_eq!(sl.queue(), "", "no job left in Slurm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pending_job_shows_slurms_reason_and_cancel_or_timeout_scancels_it() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let c = login_node(&sl, vec![slow()]).await;
    // Four nodes of a three-node cluster: Slurm queues the job.
    let run = c
        .submit_spec(sbatch_spec("slow", &[("seconds", "1")], nodes(4)))
        .await
        .unwrap();
    let d = c
        .wait_run(&run.run_id, 60, |d| {
            d.tasks
                .first()
                .is_some_and(|t| t.progress.contains("PENDING ("))
        })
        .await;
    let t = &d.tasks[0];
    assert_eq!(
        task_state(t),
        pb::TaskState::Leased,
        "a queued job does not start the task"
    );
    let reason = scontrol_field(&sl, &t.slurm_job_id, "Reason");
    assert!(!reason.is_empty() && reason != "None", "Slurm's reason");
    assert_eq!(
        t.progress,
        format!("Slurm job {} PENDING ({reason})", t.slurm_job_id),
        "users see Slurm's state and reason"
    );
    assert!(sl.queue().contains(&format!("{} PENDING", t.slurm_job_id)));
    let show = run_show(&c, &run.run_id, false);
    assert!(show.contains(&format!("PENDING ({reason})")), "{show}");
    // run cancel → scancel: the job leaves Slurm's queue.
    c.runs()
        .cancel_run(pb::CancelRunRequest {
            run_id: run.run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let job = t.slurm_job_id.clone();
    let d = c.wait_settled(&run.run_id, 60).await;
    assert_eq!(state(&d), pb::RunState::Cancelled);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while sl.queue().contains(&job) {
        assert!(
            std::time::Instant::now() < deadline,
            "job {job} still queued: {}",
            sl.queue()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(scontrol_field(&sl, &job, "JobState"), "CANCELLED");

    // The queue wait has its own limit (slurm.queue_timeout_s): a job that
    // never starts is scancelled, naming Slurm's state.
    let run = c
        .submit_spec(sbatch_spec(
            "slow",
            &[("seconds", "1")],
            pb::SlurmOptions {
                nodes: 4,
                queue_timeout_s: 4,
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 60).await;
    let t = &d.tasks[0];
    assert_eq!(state(&d), pb::RunState::Failed, "{d:#?}");
    assert!(
        t.error.starts_with(
            "waited 4 s in Slurm's queue without starting (slurm.queue_timeout_s): Slurm job "
        ) && t.error.contains(" PENDING (")
            && t.error.contains("scancelled"),
        "{}",
        t.error
    );
    assert_eq!(
        scontrol_field(&sl, &t.slurm_job_id, "JobState"),
        "CANCELLED"
    );

    // The run's timeout counts from when Slurm starts the job, not from the
    // submission: a 1 s job with a 3 s timeout waits ~8 s behind a job that
    // holds every node and still succeeds.
    let out = sl.run_ok(
        "sbatch",
        &[
            "-N3",
            "--exclusive",
            "--wrap",
            "sleep 300",
            "-o",
            "/dev/null",
        ],
    );
    let blocker = out
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string();
    assert!(blocker.parse::<u64>().is_ok(), "sbatch said: {out}");
    let run = c
        .submit_spec(pb::BenchmarkSpec {
            timeout_s: 3,
            ..sbatch_spec("slow", &[("seconds", "1")], nodes(1))
        })
        .await
        .unwrap();
    let d = c
        .wait_run(&run.run_id, 60, |d| {
            d.tasks
                .first()
                .is_some_and(|t| t.progress.contains("PENDING ("))
        })
        .await;
    assert_eq!(task_state(&d.tasks[0]), pb::TaskState::Leased);
    tokio::time::sleep(Duration::from_secs(8)).await;
    sl.run_ok("scancel", &[&blocker]);
    let d = c.wait_settled(&run.run_id, 90).await;
    assert_eq!(
        state(&d),
        pb::RunState::Succeeded,
        "queued 8 s with a 3 s timeout: {}",
        d.tasks[0].error
    );

    // A run's timeout shorter than its queue wait no longer cancels it while
    // it waits (the queue has its own limit, one day by default).
    let run = c
        .submit_spec(pb::BenchmarkSpec {
            timeout_s: 4,
            ..sbatch_spec("slow", &[("seconds", "1")], nodes(4))
        })
        .await
        .unwrap();
    let d = c
        .wait_run(&run.run_id, 60, |d| {
            d.tasks
                .first()
                .is_some_and(|t| t.progress.contains("PENDING ("))
        })
        .await;
    let job = d.tasks[0].slurm_job_id.clone();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let d = c
        .runs()
        .get_run(pb::GetRunRequest {
            run_id: run.run_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        task_state(&d.tasks[0]),
        pb::TaskState::Leased,
        "still queued past its 4 s timeout"
    );
    c.runs()
        .cancel_run(pb::CancelRunRequest {
            run_id: run.run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    c.wait_settled(&run.run_id, 60).await;
    // The agent scancels as the run ends: Slurm says so a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while scontrol_field(&sl, &job, "JobState") != "CANCELLED" {
        assert!(
            std::time::Instant::now() < deadline,
            "job {job}: {}",
            scontrol_field(&sl, &job, "JobState")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // What sbatch refuses fails the task with sbatch's words.
    let run = c
        .submit_spec(sbatch_spec(
            "slow",
            &[("seconds", "1")],
            pb::SlurmOptions {
                partition: "nosuchpartition".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 60).await;
    let t = &d.tasks[0];
    assert_eq!(state(&d), pb::RunState::Failed);
    assert!(
        t.error.starts_with("sbatch refused the job")
            && t.error.contains("Invalid partition name specified"),
        "{}",
        t.error
    );
    assert_eq!(t.slurm_job_id, "", "no job was made");
    assert_eq!(sl.queue(), "", "no job left in Slurm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_past_its_slurm_time_limit_fails_with_timeout() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let c = login_node(&sl, vec![slow()]).await;
    // One minute of Slurm time for a 10-minute sleep (Slurm checks limits
    // about every 30 s: the job ends 60–100 s after it started).
    let run = c
        .submit_spec(sbatch_spec(
            "slow",
            &[("seconds", "600")],
            pb::SlurmOptions {
                nodes: 1,
                time_limit_min: 1,
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 150).await;
    let t = &d.tasks[0];
    assert_eq!(state(&d), pb::RunState::Failed, "{d:#?}");
    assert!(
        t.error
            .starts_with(&format!("Slurm job {} TIMEOUT", t.slurm_job_id)),
        "{}",
        t.error
    );
    assert!(t.error.contains("TimeLimit"), "Slurm's reason: {}", t.error);
    assert_eq!(scontrol_field(&sl, &t.slurm_job_id, "JobState"), "TIMEOUT");
    assert_eq!(sl.queue(), "");
}

/// Waits until the run's first task says its Slurm job is RUNNING; the task.
async fn wait_running(c: &Cluster, run_id: &str) -> pb::Task {
    let d = c
        .wait_run(run_id, 60, |d| {
            d.tasks
                .first()
                .is_some_and(|t| t.progress.contains(" RUNNING"))
        })
        .await;
    d.tasks[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_failure_or_a_preemption_fails_the_task_with_slurms_state() {
    // Jobs of partition `low` are cancelled when a job of `high` needs their
    // node (Slurm's partition-priority preemption, PreemptMode=CANCEL).
    let Some(sl) = SlurmCluster::start_with(
        "PreemptType=preempt/partition_prio\n\
         PreemptMode=CANCEL\n\
         PartitionName=low Nodes=n1 PriorityTier=1 MaxTime=INFINITE State=UP\n\
         PartitionName=high Nodes=n1 PriorityTier=10 MaxTime=INFINITE State=UP\n",
    ) else {
        return;
    };
    let c = login_node(&sl, vec![slow()]).await;

    // 1. The node under the job goes down: NODE_FAIL.
    let (run, t) = start_slow(
        &c,
        pb::SlurmOptions {
            nodes: 1,
            nodelist: vec!["n2".into()],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(t.slurm_nodes, "n2");
    sl.run_ok(
        "scontrol",
        &["update", "nodename=n2", "state=down", "reason=test: PSU"],
    );
    fails_with(&c, &sl, &run, "NODE_FAIL").await;
    assert!(run_show(&c, &run, false).contains("NODE_FAIL"));

    // 2. A job of a higher-priority partition takes the node: PREEMPTED.
    let (run, t) = start_slow(
        &c,
        pb::SlurmOptions {
            nodes: 1,
            partition: "low".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(t.slurm_nodes, "n1");
    sl.run_ok(
        "sbatch",
        &[
            "-p",
            "high",
            "--exclusive",
            "-N",
            "1",
            "-w",
            "n1",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 1",
        ],
    );
    fails_with(&c, &sl, &run, "PREEMPTED").await;
}

/// Submits `slow` for ten minutes as a batch job with `opts` and waits until
/// it runs; the run id and its task.
async fn start_slow(c: &Cluster, opts: pb::SlurmOptions) -> (String, pb::Task) {
    let run = c
        .submit_spec(sbatch_spec("slow", &[("seconds", "600")], opts))
        .await
        .unwrap();
    let t = wait_running(c, &run.run_id).await;
    (run.run_id, t)
}

/// Waits until the run has settled and checks that its task failed with
/// Slurm's `slurm_state`, as Slurm itself says.
async fn fails_with(c: &Cluster, sl: &SlurmCluster, run_id: &str, slurm_state: &str) {
    let d = c.wait_settled(run_id, 90).await;
    let t = &d.tasks[0];
    assert_eq!(state(&d), pb::RunState::Failed, "{d:#?}");
    let want = format!("Slurm job {} {slurm_state}", t.slurm_job_id);
    assert!(t.error.starts_with(&want), "{}", t.error);
    assert_eq!(scontrol_field(sl, &t.slurm_job_id, "JobState"), slurm_state);
}

/// A catalog for the agent process: pio started after a pause, so the agent
/// can be killed while the job runs.
const SLOW_PIO: &str = r#"
[[benchmark]]
name = "slowpio"
kind = "io"
command = ["sh", "-c", "sleep \"$0\"; exec \"$@\"", "{seconds}", "{self_exe}", "pio",
  "--np={np}", "--block_size=1048576", "--transfer_size=1048576", "--iterations=1",
  "--output={out_dir}/pio-result.json"]
launchers = ["sbatch"]
[[benchmark.param]]
name = "np"
type = "int"
default = "1"
min = 1
max = 64
[[benchmark.param]]
name = "seconds"
type = "float"
default = "0"
min = 0
max = 600
[[benchmark.output]]
file = "pio-result.json"
format = "pio"
required = true
"#;

/// A `benchlake agent` process of `c`, as the login node.
fn agent_process(c: &Cluster, sl: &SlurmCluster, dir: &Path) -> std::process::Child {
    agent_process_with(c, sl, dir, &[])
}

/// [`agent_process`] with more arguments.
fn agent_process_with(
    c: &Cluster,
    sl: &SlurmCluster,
    dir: &Path,
    more: &[&str],
) -> std::process::Child {
    std::process::Command::new(bin())
        .args(["agent", "--coordinator", &c.addr, "--name", "login"])
        .args(more)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .arg("--catalog")
        .arg(dir.join("catalog.toml"))
        .args(["--run-as", &benchlake_agent::contain::current_user_name()])
        .args(["--poll-ms", "50"])
        .envs(sl.env())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
        .spawn()
        .expect("start benchlake agent")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_killed_while_its_job_runs_re_attaches_and_the_run_succeeds() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_worker("w1", None);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("catalog.toml"), SLOW_PIO).unwrap();
    let mut agent = agent_process(&c, &sl, dir.path());
    let run = submit_when_registered(
        &c,
        sbatch_spec("slowpio", &[("np", "3"), ("seconds", "6")], nodes(3)),
    )
    .await;
    let d = c
        .wait_run(&run.run_id, 60, |d| {
            d.tasks
                .first()
                .is_some_and(|t| t.progress.contains(" RUNNING"))
        })
        .await;
    let job = d.tasks[0].slurm_job_id.clone();
    // SIGKILL: no goodbye, no scancel.
    agent.kill().unwrap();
    agent.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        sl.queue().contains(&format!("{job} RUNNING")),
        "the job runs on without its agent: {}",
        sl.queue()
    );
    let book = std::fs::read_to_string(dir.path().join("work/slurm-jobs.json")).unwrap();
    assert!(book.contains(&d.tasks[0].task_id), "{book}");
    let http = format!("127.0.0.1:{}", slurm::free_port());
    let mut agent = agent_process_with(&c, &sl, dir.path(), &["--http-addr", &http]);
    let d = c.wait_settled(&run.run_id, 120).await;
    let log = std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default();
    let metrics = http_get(&http, "/metrics");
    let _ = agent.kill();
    let _ = agent.wait();
    let t = &d.tasks[0];
    assert_eq!(
        state(&d),
        pb::RunState::Succeeded,
        "{}\n{d:#?}\n{log}",
        t.error
    );
    assert_eq!(t.attempt, 1, "re-attached, not retried");
    for line in [
        "benchlake_agent_slurm_reattached_total 1",
        "benchlake_agent_slurm_jobs_total{state=\"COMPLETED\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} in the agent's /metrics:\n{metrics}"
        );
    }
    assert_eq!(t.slurm_job_id, job, "the same Slurm job");
    assert!(log.contains("re-attaching"), "{log}");
    let mut hosts = BTreeSet::new();
    for b in table_batches(&c.lake_dir(), "io_task_times", Some(&run.run_id)) {
        let host = col::<StringArray>(&b, "host");
        for i in 0..b.num_rows() {
            hosts.insert(host.value(i).to_string());
        }
    }
    assert_eq!(
        hosts,
        BTreeSet::from(["n1".to_string(), "n2".into(), "n3".into()])
    );
    let book = std::fs::read_to_string(dir.path().join("work/slurm-jobs.json")).unwrap();
    assert!(
        !book.contains(&t.task_id),
        "the book forgot the job: {book}"
    );
    assert_eq!(sl.queue(), "");
}

/// The body of `GET path` from `addr` (plain HTTP/1.0).
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(out)
}

/// Submits `spec` once the agent process has registered.
async fn submit_when_registered(c: &Cluster, spec: pb::BenchmarkSpec) -> pb::Run {
    let mut tries = 0;
    loop {
        match c.submit_spec(spec.clone()).await {
            Ok(r) => return r,
            Err(_) if tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("submit: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_back_after_its_lease_cancels_its_old_job_and_the_retry_runs() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_worker("w1", None);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("catalog.toml"), SLOW_PIO).unwrap();
    let mut agent = agent_process(&c, &sl, dir.path());
    let run = submit_when_registered(
        &c,
        pb::BenchmarkSpec {
            max_attempts: 2,
            ..sbatch_spec("slowpio", &[("np", "2"), ("seconds", "4")], nodes(2))
        },
    )
    .await;
    let d = c
        .wait_run(&run.run_id, 60, |d| {
            d.tasks
                .first()
                .is_some_and(|t| t.progress.contains(" RUNNING"))
        })
        .await;
    let old = d.tasks[0].slurm_job_id.clone();
    agent.kill().unwrap();
    agent.wait().unwrap();
    // The agent stays away past its lease: the coordinator ends the attempt.
    c.advance(11_000);
    c.tick();
    let d = c.detail(&run.run_id).await;
    assert_eq!(
        (task_state(&d.tasks[0]), d.tasks[0].attempt),
        (pb::TaskState::Queued, 2),
        "{d:#?}"
    );
    let mut agent = agent_process(&c, &sl, dir.path());
    let d = c.wait_settled(&run.run_id, 120).await;
    let log = std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default();
    let _ = agent.kill();
    let _ = agent.wait();
    let t = &d.tasks[0];
    assert_eq!(
        state(&d),
        pb::RunState::Succeeded,
        "{}\n{d:#?}\n{log}",
        t.error
    );
    assert_eq!(t.attempt, 2);
    assert_ne!(t.slurm_job_id, old, "the retry is a new Slurm job");
    // Nobody would have collected the old job: the restarted agent scancelled it.
    assert_eq!(scontrol_field(&sl, &old, "JobState"), "CANCELLED", "{log}");
    assert!(log.contains("no longer gives this task"), "{log}");
    assert_eq!(sl.queue(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_slurm_forgot_while_its_agent_was_away_is_collected_by_its_exit_status() {
    // slurmctld forgets ended jobs after 2 s (purged about once a minute) and
    // has no accounting: only the script's exit status tells how it ended.
    let Some(sl) = SlurmCluster::start_with("MinJobAge=2\n") else {
        return;
    };
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_worker("w1", None);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("catalog.toml"), SLOW_PIO).unwrap();
    let mut agent = agent_process(&c, &sl, dir.path());
    let run = submit_when_registered(
        &c,
        sbatch_spec("slowpio", &[("np", "2"), ("seconds", "2")], nodes(2)),
    )
    .await;
    let d = c
        .wait_run(&run.run_id, 60, |d| {
            d.tasks
                .first()
                .is_some_and(|t| t.progress.contains(" RUNNING"))
        })
        .await;
    let job = d.tasks[0].slurm_job_id.clone();
    agent.kill().unwrap();
    agent.wait().unwrap();
    // Wait (real time, the coordinator's clock stands still) until Slurm
    // no longer knows the job.
    let deadline = std::time::Instant::now() + Duration::from_secs(150);
    loop {
        let out = sl
            .command("scontrol")
            .args(["show", "job", &job, "-o"])
            .output()
            .expect("scontrol");
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        if said.contains("Invalid job id") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "slurmctld still knows job {job}: {said}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut agent = agent_process(&c, &sl, dir.path());
    let d = c.wait_settled(&run.run_id, 60).await;
    let log = std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default();
    let _ = agent.kill();
    let _ = agent.wait();
    let t = &d.tasks[0];
    assert_eq!(
        state(&d),
        pb::RunState::Succeeded,
        "{}\n{d:#?}\n{log}",
        t.error
    );
    assert_eq!((t.attempt, t.slurm_job_id.as_str()), (1, job.as_str()));
    assert_eq!(t.slurm_nodes, "n[1-2]", "the nodes seen while it ran");
    assert!(
        log.contains("exit status from benchlake-exit-status"),
        "{log}"
    );
    assert_eq!(
        table_rows(&c.lake_dir(), "io_task_times", Some(&run.run_id)),
        4
    );
}

const DEPLOY_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/slurm/linktest-nightly.sbatch"
);

/// deploy/slurm/linktest-nightly.sbatch submitted to the test cluster: with a
/// stand-in for LinkTest (netprobe, benchlake's LinkTest-compatible TCP
/// benchmark, one rank per Slurm task), the job writes the SION file, the
/// report (SVG and PNG) and lands the linktest tables in a lake whose ranks
/// name the Slurm nodes.
#[test]
fn the_deploy_linktest_batch_script_runs_on_the_cluster_and_fills_a_lake() {
    let st = std::process::Command::new("bash")
        .args(["-n", DEPLOY_SCRIPT])
        .status()
        .expect("bash -n");
    assert!(st.success(), "bash -n {DEPLOY_SCRIPT}");
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let stand_in = tmp.path().join("linktest");
    write_script(
        &stand_in,
        &format!(
            "#!/bin/sh\n{}",
            srun_netprobe_lines(
                "job$SLURM_JOB_ID",
                "--num-messages=5 --message-size=4096 --warmup-messages=1"
            )
        ),
    );
    let results = tmp.path().join("results");
    let lake = tmp.path().join("lake");
    // Command-line options override the script's #SBATCH lines (4 nodes).
    let out = sl
        .command("sbatch")
        .args(["--wait", "--nodes=3", "--parsable"])
        .arg(format!("--output={}/job.out", tmp.path().display()))
        .arg(DEPLOY_SCRIPT)
        .current_dir(tmp.path())
        .envs(sl.env())
        .env("BENCHLAKE", bin())
        .env("LINKTEST", &stand_in)
        .env("LINKTEST_ARGS", "")
        .env("RESULTS_DIR", &results)
        .env("BENCHLAKE_LAKE", &lake)
        .output()
        .expect("sbatch");
    let log = std::fs::read_to_string(tmp.path().join("job.out")).unwrap_or_default();
    assert!(
        out.status.success(),
        "sbatch --wait: {}\n{}\n{log}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        sl.logs()
    );
    assert!(log.contains("benchlake-linktest: done"), "{log}");
    assert_eq!(
        std::fs::read_to_string(results.join("nodes.txt")).unwrap(),
        "n1\nn2\nn3\n"
    );
    for f in ["linktest-report.svg", "linktest-report.png"] {
        let len = std::fs::metadata(results.join(f))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 1000, "{f}: {len} bytes");
    }
    let mut hosts = BTreeSet::new();
    for b in table_batches(&lake, "linktest_ranks", None) {
        let h = col::<StringArray>(&b, "hostname");
        for i in 0..b.num_rows() {
            hosts.insert(h.value(i).to_string());
        }
    }
    assert_eq!(
        hosts,
        BTreeSet::from(["n1".to_string(), "n2".into(), "n3".into()]),
        "linktest_ranks.hostname in the lake"
    );
    assert_eq!(
        table_rows(&lake, "linktest_timings", None),
        6,
        "3×2 ordered pairs"
    );
}
