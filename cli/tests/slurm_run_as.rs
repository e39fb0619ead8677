//! An agent running as root with `--run-as USER` (the setup docs/slurm.md
//! shows for a login node) on a real Slurm cluster of three nodes
//! (`common/slurm.rs`): a benchmark through `sbatch`, `srun` and `local`
//! each SUCCEEDS as that user, and the task directory, its stdout/stderr and
//! the benchmark's outputs belong to the user. Before, slurmd (running the
//! batch job as the user) could not open the stdout.txt the agent had made as
//! root, and every sbatch task failed (issue 35).
mod common;
#[path = "common/slurm.rs"]
mod slurm;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use benchlake_coordinator::Tokens;
use benchlake_core::bench::Catalog;
use benchlake_proto::v1 as pb;
use common::*;
use slurm::SlurmCluster;

/// The user the benchmarks run as (created by the test when missing).
const USER: &str = "benchlake-run";

/// Writes who ran it into the output directory (one file per Slurm rank)
/// and says it on stdout.
const WHO: &str = r#"
[[benchmark]]
name = "who"
kind = "noop"
command = ["sh", "-c", "r=$SLURM_PROCID; [ -n \"$r\" ] || r=0; id -un > \"$0/who-$r.txt\"; id -un", "{out_dir}"]
launchers = ["sbatch", "srun", "local"]
timeout_s = 120
[[benchmark.output]]
file = "who-*.txt"
format = "text"
required = true
"#;

/// The user `USER`, created with `useradd --system` when missing; None
/// (after `unavailable`) when that fails.
fn run_as_user() -> Option<benchlake_agent::contain::RunAs> {
    if let Ok(u) = benchlake_agent::contain::lookup_user(USER) {
        return Some(u);
    }
    let out = std::process::Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            USER,
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            unavailable(
                &this_test(),
                &format!(
                    "cannot create the user {USER}: useradd: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
            );
            return None;
        }
        Err(e) => {
            unavailable(
                &this_test(),
                &format!("cannot create the user {USER}: useradd: {e}"),
            );
            return None;
        }
    }
    match benchlake_agent::contain::lookup_user(USER) {
        Ok(u) => Some(u),
        Err(e) => {
            unavailable(&this_test(), &e);
            None
        }
    }
}

fn owner(p: &Path) -> (u32, u32) {
    let md = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (md.uid(), md.mode() & 0o7777)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_root_agent_runs_benchmarks_as_its_run_as_user_with_sbatch_srun_and_local() {
    let Some(sl) = SlurmCluster::start() else {
        return;
    };
    let Some(user) = run_as_user() else {
        return;
    };
    assert_eq!(
        benchlake_agent::contain::euid(),
        0,
        "the Slurm cluster runs as root"
    );
    // The user reaches slurm.conf and munge, and the agent's work directory.
    sl.open_to_users();
    let mut c = Cluster::start(Tokens::default()).await;
    std::fs::set_permissions(c.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = sl.env();
    c.add_agent_with("login", move |cfg| {
        let mut cat = Catalog::from_toml(WHO).unwrap();
        for d in &mut cat.benchmarks {
            d.env.extend(env.iter().cloned());
        }
        cfg.catalog = cat;
        cfg.run_as = Some(USER.into());
        cfg.keep_work = true;
        cfg.address = "127.0.0.1".into();
    })
    .await;
    c.add_worker("w1", None);
    for launcher in [
        pb::Launcher::Sbatch,
        pb::Launcher::Srun,
        pb::Launcher::Local,
    ] {
        let run = c
            .submit_spec(pb::BenchmarkSpec {
                launcher: launcher as i32,
                max_attempts: 1,
                ..bench_spec("who", &[])
            })
            .await
            .unwrap();
        let d = c.wait_settled(&run.run_id, 120).await;
        let t = &d.tasks[0];
        assert_eq!(
            state(&d),
            pb::RunState::Succeeded,
            "{launcher:?}: {}\n{d:#?}\n{}",
            t.error,
            sl.logs()
        );
        assert_eq!(t.stdout_tail.trim(), USER, "{launcher:?} ran as {USER}");
        let dir = c
            .dir
            .path()
            .join("work/login")
            .join(&run.run_id)
            .join(format!("{}-{}", t.task_id, t.attempt));
        assert_eq!(
            owner(&dir),
            (user.uid, 0o700),
            "{launcher:?}: {}",
            dir.display()
        );
        for f in ["stdout.txt", "stderr.txt", "who-0.txt"] {
            assert_eq!(
                owner(&dir.join(f)).0,
                user.uid,
                "{launcher:?}: {f} belongs to {USER}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(dir.join("who-0.txt"))
                .unwrap()
                .trim(),
            USER
        );
        if launcher == pb::Launcher::Sbatch {
            // Slurm's own record: the job was the user's.
            let out = sl.run_ok("scontrol", &["show", "job", &t.slurm_job_id, "-o"]);
            assert!(
                out.contains(&format!("UserId={USER}({})", user.uid)),
                "{out}"
            );
        }
    }
}
