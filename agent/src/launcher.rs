//! The launchers, in one place: how a task's argument vector is wrapped for
//! `local` (as is), `mpirun` (Open MPI, the selected agents' hosts) and
//! `srun` (Slurm: node count, tasks, partition, time limit; docs/slurm.md)
//! and `sbatch` (what the batch job runs: srun inside the allocation;
//! submitting and following the job is [`crate::batch`]'s), how a task
//! started through a launcher is stopped, and what a launcher's failure
//! means for the user.
//!
//! `srun` never gets the agents' host names: Slurm knows its nodes by node
//! name, and an agent on a login node lets Slurm place the tasks unless the
//! spec (or the catalog entry) names Slurm nodes (`slurm.nodelist`).
use benchlake_core::bench::LauncherKind;
use benchlake_core::slurm::SlurmOptions;

/// Why a task cannot be launched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// A Slurm option with a value Slurm must not see.
    #[error(transparent)]
    Slurm(#[from] benchlake_core::slurm::InvalidSlurmOption),
    /// An `-x NAME=VALUE` export that srun's `--export` cannot carry.
    #[error("{0}")]
    Export(String),
    /// The launcher program is not configured.
    #[error("the {0} launcher has no program configured")]
    NoProgram(&'static str),
}

/// What the launchers need to know about the task.
#[derive(Debug, Clone)]
pub struct Task<'a> {
    /// The benchmark's name (the Slurm job name is `benchlake-NAME`).
    pub benchmark: &'a str,
    /// Processes to start (`np`).
    pub np: u32,
    /// The selected agents' host names, in rank order (mpirun only).
    pub hosts: &'a [String],
    /// The run's Slurm options, with the catalog entry's filled in.
    pub slurm: &'a SlurmOptions,
}

/// The launcher programs and fixed arguments of an agent.
#[derive(Debug, Clone)]
pub struct Programs<'a> {
    /// `mpirun` and its fixed arguments (`--mpirun`).
    pub mpirun: &'a [String],
    /// `srun` and its fixed arguments (`--srun`; default `srun --mpi=pmix`).
    pub srun: &'a [String],
}

/// Wraps the benchmark's argument vector `argv` for `launcher`.
pub fn wrap(
    launcher: LauncherKind,
    programs: &Programs<'_>,
    task: &Task<'_>,
    mut argv: Vec<String>,
) -> Result<Vec<String>, LaunchError> {
    match launcher {
        LauncherKind::Local => Ok(argv),
        LauncherKind::Mpirun => {
            if programs.mpirun.is_empty() {
                return Err(LaunchError::NoProgram("mpirun"));
            }
            let per_host = (task.np as usize).div_ceil(task.hosts.len().max(1)).max(1);
            let host_list: Vec<String> = task
                .hosts
                .iter()
                .map(|h| format!("{h}:{per_host}"))
                .collect();
            let mut w = programs.mpirun.to_vec();
            w.extend([
                "-np".to_string(),
                task.np.to_string(),
                "--host".to_string(),
                host_list.join(","),
            ]);
            w.append(&mut argv);
            Ok(w)
        }
        LauncherKind::Srun => {
            if programs.srun.is_empty() {
                return Err(LaunchError::NoProgram("srun"));
            }
            task.slurm.validate("slurm.")?;
            let (exports, mut rest) = mpirun_exports(argv)?;
            let mut w = programs.srun.to_vec();
            w.push(format!("--job-name=benchlake-{}", task.benchmark));
            w.push(format!("--ntasks={}", task.np.max(1)));
            w.extend(task.slurm.alloc_args());
            if !exports.is_empty() {
                w.push(format!("--export=ALL,{}", exports.join(",")));
            }
            w.append(&mut rest);
            Ok(w)
        }
        LauncherKind::Sbatch => {
            // What runs inside the batch job: srun starts the ranks in the
            // job's allocation (the allocation options went to sbatch, see
            // crate::batch).
            if programs.srun.is_empty() {
                return Err(LaunchError::NoProgram("srun"));
            }
            task.slurm.validate("slurm.")?;
            let (exports, mut rest) = mpirun_exports(argv)?;
            let mut w = programs.srun.to_vec();
            w.push(format!("--ntasks={}", task.np.max(1)));
            if !exports.is_empty() {
                w.push(format!("--export=ALL,{}", exports.join(",")));
            }
            w.append(&mut rest);
            Ok(w)
        }
    }
}

/// Takes the leading `-x NAME=VALUE` pairs (mpirun's way of exporting a
/// variable to every rank, used by catalog entries such as `traced`) off
/// `argv`; srun gets them as `--export=ALL,NAME=VALUE,…` instead, so they
/// reach the tasks and not srun itself (`LD_PRELOAD`).
fn mpirun_exports(argv: Vec<String>) -> Result<(Vec<String>, Vec<String>), LaunchError> {
    let mut exports = Vec::new();
    let mut it = argv.into_iter().peekable();
    while it.peek().map(String::as_str) == Some("-x") {
        it.next();
        let Some(kv) = it.next() else {
            return Err(LaunchError::Export("'-x' without a variable".into()));
        };
        let name = kv.split_once('=').map(|(n, _)| n).unwrap_or(&kv);
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(LaunchError::Export(format!(
                "'-x {kv}': not a variable name"
            )));
        }
        if kv.contains(',') {
            // srun's --export separates variables by commas, with no escape.
            return Err(LaunchError::Export(format!(
                "'-x {kv}': srun cannot export a value holding ','"
            )));
        }
        exports.push(kv);
    }
    Ok((exports, it.collect()))
}

/// Whether a task of `launcher` is stopped with SIGTERM first (and SIGKILL
/// after a grace period): srun cancels its job step, or its pending
/// allocation, on SIGTERM, while SIGKILL would leave a queued job behind.
pub fn terminate_first(launcher: LauncherKind) -> bool {
    launcher == LauncherKind::Srun
}

/// What the launcher itself said about a failure, from the task's stderr:
/// for srun its `srun: error:` / `srun: fatal:` lines (at most the last
/// three, e.g. `srun: error: Unable to allocate resources: Invalid partition
/// name specified`), or, when the job never started, the last things srun
/// said (`job 7 queued and waiting for resources`). None when it said
/// nothing.
pub fn failure_reason(launcher: LauncherKind, stderr: &str) -> Option<String> {
    if !launcher.is_slurm() {
        return None;
    }
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("srun: "))
        .collect();
    let mut errors: Vec<&str> = Vec::new();
    for l in lines
        .iter()
        .filter(|l| l.starts_with("srun: error:") || l.starts_with("srun: fatal:"))
    {
        if !errors.contains(l) {
            errors.push(l);
        }
    }
    if !errors.is_empty() {
        let from = errors.len().saturating_sub(3);
        return Some(errors[from..].join("; "));
    }
    // What srun said before it was stopped (the stop's own echo left out):
    // why the job waits, e.g. `Requested partition configuration not
    // available now; job 7 queued and waiting for resources`.
    let said: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.contains("has been revoked") && !l.contains("Force Terminated"))
        .collect();
    let from = said.len().saturating_sub(3);
    (!said.is_empty()).then(|| said[from..].join("; "))
}

/// The Slurm options of a task: the run's, with the catalog entry's filling
/// the unset ones.
pub fn slurm_options(run: &SlurmOptions, catalog: Option<&SlurmOptions>) -> SlurmOptions {
    match catalog {
        Some(c) => run.or(c),
        None => run.clone(),
    }
}

/// The `np` of a task when its benchmark has no `np` parameter: srun starts
/// one task per requested node (times `ntasks_per_node`), else one; the
/// other launchers one per selected agent.
pub fn default_np(launcher: LauncherKind, hosts: usize, slurm: &SlurmOptions) -> u32 {
    match launcher {
        LauncherKind::Srun | LauncherKind::Sbatch => {
            slurm.nodes.max(1) * slurm.ntasks_per_node.max(1)
        }
        _ => hosts.max(1) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn srun_gets_counts_and_options_never_agent_hosts() {
        let srun = s(&["srun", "--mpi=pmix"]);
        let hosts = s(&["login1"]);
        let slurm = SlurmOptions {
            nodes: 3,
            partition: "debug".into(),
            time_limit_min: 5,
            ..Default::default()
        };
        let p = Programs {
            mpirun: &[],
            srun: &srun,
        };
        let t = Task {
            benchmark: "linktest",
            np: 6,
            hosts: &hosts,
            slurm: &slurm,
        };
        let argv = wrap(
            LauncherKind::Srun,
            &p,
            &t,
            s(&["linktest", "--mode", "mpi"]),
        )
        .unwrap();
        assert_eq!(
            argv,
            [
                "srun",
                "--mpi=pmix",
                "--job-name=benchlake-linktest",
                "--ntasks=6",
                "--nodes=3",
                "--partition=debug",
                "--time=5",
                "linktest",
                "--mode",
                "mpi"
            ]
        );
        assert!(!argv.iter().any(|a| a.contains("login1")), "{argv:?}");
        // Named Slurm nodes go to --nodelist.
        let named = SlurmOptions {
            nodelist: s(&["n[1-2]", "n3"]),
            ..Default::default()
        };
        let argv = wrap(
            LauncherKind::Srun,
            &p,
            &Task {
                slurm: &named,
                ..t.clone()
            },
            s(&["x"]),
        )
        .unwrap();
        assert!(
            argv.contains(&"--nodelist=n[1-2],n3".to_string()),
            "{argv:?}"
        );
        // A bad partition never reaches srun.
        let bad = SlurmOptions {
            partition: "a b".into(),
            ..Default::default()
        };
        let e = wrap(
            LauncherKind::Srun,
            &p,
            &Task {
                slurm: &bad,
                ..t.clone()
            },
            s(&["x"]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("slurm.partition"), "{e}");
    }

    #[test]
    fn mpirun_exports_become_srun_exports() {
        let srun = s(&["srun"]);
        let p = Programs {
            mpirun: &[],
            srun: &srun,
        };
        let slurm = SlurmOptions::default();
        let t = Task {
            benchmark: "traced",
            np: 2,
            hosts: &[],
            slurm: &slurm,
        };
        let argv = wrap(
            LauncherKind::Srun,
            &p,
            &t,
            s(&["-x", "LD_PRELOAD=/l.so", "-x", "DIR=/o", "/apps/ring", "-x"]),
        )
        .unwrap();
        assert_eq!(
            argv,
            [
                "srun",
                "--job-name=benchlake-traced",
                "--ntasks=2",
                "--export=ALL,LD_PRELOAD=/l.so,DIR=/o",
                "/apps/ring",
                "-x"
            ]
        );
        let e = wrap(LauncherKind::Srun, &p, &t, s(&["-x", "A=1,2", "prog"])).unwrap_err();
        assert!(e.to_string().contains("','"), "{e}");
        let e = wrap(LauncherKind::Srun, &p, &t, s(&["-x", "A B=1", "prog"])).unwrap_err();
        assert!(e.to_string().contains("variable name"), "{e}");
    }

    #[test]
    fn srun_failures_name_slurms_error() {
        let err = "srun: error: invalid partition specified: nope\n\
                   srun: error: Unable to allocate resources: Invalid partition name specified\n";
        assert_eq!(
            failure_reason(LauncherKind::Srun, err).unwrap(),
            "srun: error: invalid partition specified: nope; \
             srun: error: Unable to allocate resources: Invalid partition name specified"
        );
        let pending = "srun: Requested partition configuration not available now\n\
                       srun: job 2 queued and waiting for resources\n\
                       srun: Job allocation 2 has been revoked\n\
                       srun: Force Terminated JobId=2\n";
        assert_eq!(
            failure_reason(LauncherKind::Srun, pending).unwrap(),
            "srun: Requested partition configuration not available now; \
             srun: job 2 queued and waiting for resources"
        );
        assert_eq!(failure_reason(LauncherKind::Srun, "app said no\n"), None);
        assert_eq!(failure_reason(LauncherKind::Mpirun, err), None);
    }

    #[test]
    fn np_defaults_follow_the_launcher() {
        let o = SlurmOptions {
            nodes: 3,
            ntasks_per_node: 2,
            ..Default::default()
        };
        assert_eq!(default_np(LauncherKind::Srun, 1, &o), 6);
        assert_eq!(
            default_np(LauncherKind::Srun, 1, &SlurmOptions::default()),
            1
        );
        assert_eq!(default_np(LauncherKind::Mpirun, 2, &o), 2);
    }
}
