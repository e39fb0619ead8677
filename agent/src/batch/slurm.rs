//! Slurm, the batch scheduler of the `sbatch` launcher (docs/slurm.md): its
//! commands (`sbatch`, `squeue`, `scontrol`, `sacct`, `scancel`) behind
//! [`super::BatchScheduler`]. Every Slurm command runs as an argument vector
//! with a time limit, never through a shell.
use std::path::Path;
use std::process::Stdio;

use benchlake_core::slurm::{BatchJob, JobStatus};

use super::{
    BatchScheduler, COMMAND_TIMEOUT, EXIT_FILE, Fut, SCRIPT_NAME, Submission, exit_status_in,
    job_name, last_said,
};

/// The Slurm commands of an agent: `sbatch` and its fixed arguments
/// (`--sbatch`), and `squeue`, `scontrol`, `scancel`, `sacct` from the same
/// directory when sbatch is given as a path, else from `PATH`.
#[derive(Debug, Clone)]
pub struct SlurmTools {
    pub sbatch: Vec<String>,
    pub squeue: String,
    pub scontrol: String,
    pub scancel: String,
    pub sacct: String,
}

impl SlurmTools {
    /// The tools next to `sbatch[0]`.
    pub fn new(sbatch: &[String]) -> Self {
        let dir = sbatch
            .first()
            .and_then(|p| p.rsplit_once('/'))
            .map(|(d, _)| format!("{d}/"))
            .unwrap_or_default();
        let t = |n: &str| format!("{dir}{n}");
        SlurmTools {
            sbatch: sbatch.to_vec(),
            squeue: t("squeue"),
            scontrol: t("scontrol"),
            scancel: t("scancel"),
            sacct: t("sacct"),
        }
    }
}

/// Runs a Slurm command (argv, never a shell) with a time limit; stdout or
/// a message with its stderr.
async fn slurm_cmd(argv: &[String], env: &[(String, String)]) -> Result<String, String> {
    let Some((prog, args)) = argv.split_first() else {
        return Err("empty Slurm command".into());
    };
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove(crate::contain::MARK_VAR)
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(COMMAND_TIMEOUT, cmd.output())
        .await
        .map_err(|_| format!("'{prog}' did not answer in {} s", COMMAND_TIMEOUT.as_secs()))?
        .map_err(|e| format!("cannot start '{prog}': {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "'{prog}' exited with {}: {}",
            out.status,
            last_said(&out.stderr)
        ))
    }
}

/// The sbatch argument vector of a submission (script and arguments last).
pub fn sbatch_argv(tools: &SlurmTools, s: &Submission<'_>) -> Result<Vec<String>, String> {
    s.slurm
        .validate("slurm.")
        .map_err(|e| format!("task {}: {e}", s.t.task_id))?;
    let name = job_name(&s.t.task_id);
    let mut argv = tools.sbatch.clone();
    argv.extend(s.slurm.batch_args(&BatchJob {
        name: &name,
        dir: s.dir,
        stdout: s.stdout,
        stderr: "stderr.txt",
        ntasks: s.np,
    }));
    argv.push(s.dir.join(SCRIPT_NAME).display().to_string());
    argv.extend(s.argv.iter().cloned());
    Ok(argv)
}

/// The job of a task whose submission the book recorded without an id: the
/// one job named after the task (`squeue --name`), if Slurm has it.
async fn find_job(
    tools: &SlurmTools,
    env: &[(String, String)],
    task_id: &str,
) -> Result<Option<u64>, String> {
    let out = slurm_cmd(
        &[
            tools.squeue.clone(),
            "-h".into(),
            format!("--name={}", job_name(task_id)),
            "-o".into(),
            "%i".into(),
        ],
        env,
    )
    .await?;
    Ok(out.lines().find_map(|l| l.trim().parse().ok()))
}

/// The job's status now: `scontrol show job`, or `sacct` once slurmctld no
/// longer keeps it (MinJobAge), or, where neither knows it (no
/// accounting), the exit status the batch script left in `dir`
/// ([`EXIT_FILE`]). Err when none of them tells or Slurm cannot be asked;
/// the message says which.
async fn status(
    tools: &SlurmTools,
    env: &[(String, String)],
    job: u64,
    dir: Option<&Path>,
) -> Result<JobStatus, String> {
    let sc = slurm_cmd(
        &[
            tools.scontrol.clone(),
            "show".into(),
            "job".into(),
            job.to_string(),
            "-o".into(),
        ],
        env,
    )
    .await;
    let forgotten = match &sc {
        Ok(out) => {
            if let Some(line) = out.lines().find(|l| l.contains("JobState=")) {
                return JobStatus::parse_scontrol(line).map_err(|e| e.to_string());
            }
            true
        }
        Err(e) => e.contains("Invalid job id"),
    };
    if !forgotten {
        return Err(sc.err().unwrap_or_default());
    }
    let sacct = |fields: &str| -> Vec<String> {
        [
            &tools.sacct,
            "-j",
            &job.to_string(),
            "-X",
            "-n",
            "-P",
            "-o",
            fields,
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let mut acct = slurm_cmd(&sacct("State,ExitCode,NodeList,Reason"), env).await;
    // A sacct without the Reason field still tells the state.
    if acct.as_ref().is_err_and(|e| e.contains("Invalid field")) {
        acct = slurm_cmd(&sacct("State,ExitCode,NodeList"), env).await;
    }
    let why = match acct {
        Ok(out) => match out.lines().find(|l| !l.trim().is_empty()) {
            Some(line) => return JobStatus::parse_sacct(line).map_err(|e| e.to_string()),
            None => format!("Slurm no longer knows job {job} (not in slurmctld, not in sacct)"),
        },
        Err(e) => {
            format!("Slurm no longer knows job {job} and its accounting cannot be asked: {e}")
        }
    };
    match dir.and_then(exit_status_in) {
        Some(rc) => Ok(JobStatus {
            state: if rc == 0 { "COMPLETED" } else { "FAILED" }.into(),
            reason: format!("Slurm forgot the job; exit status from {EXIT_FILE}"),
            exit_code: Some(rc),
            ..Default::default()
        }),
        None => Err(why),
    }
}

impl BatchScheduler for SlurmTools {
    fn name(&self) -> &'static str {
        "Slurm"
    }

    fn submit_argv(&self, s: &Submission<'_>) -> Result<Vec<String>, String> {
        sbatch_argv(self, s)
    }

    fn job_id(&self, stdout: &str) -> Option<u64> {
        benchlake_core::slurm::parse_job_id(stdout)
    }

    fn find_job<'a>(
        &'a self,
        env: &'a [(String, String)],
        task_id: &'a str,
    ) -> Fut<'a, Result<Option<u64>, String>> {
        Box::pin(find_job(self, env, task_id))
    }

    fn status<'a>(
        &'a self,
        env: &'a [(String, String)],
        job: u64,
        dir: Option<&'a Path>,
    ) -> Fut<'a, Result<JobStatus, String>> {
        Box::pin(status(self, env, job, dir))
    }

    fn cancel<'a>(&'a self, env: &'a [(String, String)], job: u64) -> Fut<'a, Result<(), String>> {
        Box::pin(async move {
            slurm_cmd(&[self.scancel.clone(), job.to_string()], env)
                .await
                .map(|_| ())
        })
    }
}
