//! Batch mode (the `sbatch` launcher, docs/slurm.md): for sites where
//! no benchlake daemon may run on compute nodes, the agent on a login node
//! submits each task as a batch job and follows it to its end.
//!
//! This module owns the job's life on the agent's side:
//! - **submit** ([`submit`]): the fixed batch script ([`SCRIPT`]) gets the
//!   benchmark's argument vector as its arguments (`exec "$@"`; no value is
//!   ever written into shell text), sbatch the options of
//!   [`SlurmOptions::batch_args`] (`--parsable`, job name
//!   `benchlake-<task id>`, the task directory for the job's stdout/stderr);
//! - **follow** ([`follow`]): `scontrol show job ID -o` with backoff, `sacct`
//!   once slurmctld has forgotten the job (where accounting runs); each state
//!   change (and every [`REPORT_EVERY`]) reaches the coordinator as progress
//!   with Slurm's state and reason (`Slurm job 7 PENDING (Resources)`); a
//!   pending job keeps the task LEASED;
//! - **stop**: a cancelled run or the task's timeout `scancel`s the job; an
//!   agent that stops leaves its jobs running;
//! - **re-attach** ([`JobBook`]): every submitted job is written (atomically)
//!   to `slurm-jobs.json` in the work directory with its task, lease and
//!   directory; a restarted agent offers those tasks back at registration and
//!   follows the jobs the coordinator lets it keep (the others it scancels).
//!
//! The scheduler itself is a [`BatchScheduler`]: how a job is submitted,
//! found by its name, looked at and cancelled. Slurm ([`slurm::SlurmTools`])
//! is the one there is; the script, the book, the follow loop, timeouts,
//! progress and re-attaching are the scheduler's users and are written once
//! (docs/slurm.md, "Other batch schedulers": what PBS or Flux would take).
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use benchlake_core::slurm::{JobPhase, JobStatus, SlurmOptions};
use benchlake_proto::prost::Message;
use benchlake_proto::v1 as pb;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::contain::RunAs;
use crate::runner::Stop;
use crate::{AgentConfig, Client};

pub mod slurm;

pub use slurm::SlurmTools;

/// A boxed future of a [`BatchScheduler`] call.
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A batch scheduler the agent submits tasks to. Implementations own the
/// scheduler's commands and their output formats; everything else of batch
/// mode (the fixed script, the job book, following the job with backoff,
/// queue and run timeouts, progress reports, cancelling, re-attaching after
/// a restart) is written once in this module over this trait.
pub trait BatchScheduler: Send + Sync {
    /// The scheduler's name in messages (`Slurm`).
    fn name(&self) -> &'static str;
    /// The submit command's argument vector for `s`: the command, its
    /// options (job name [`job_name`], the task directory, stdout/stderr,
    /// the task count), then the batch script [`SCRIPT_NAME`] in the task
    /// directory and the benchmark's argument vector as the script's
    /// arguments.
    fn submit_argv(&self, s: &Submission<'_>) -> Result<Vec<String>, String>;
    /// The job id the submit command printed when it accepted the job.
    fn job_id(&self, stdout: &str) -> Option<u64>;
    /// The job named [`job_name`] of `task_id`, if the scheduler has one (a
    /// submission the agent was killed in the middle of).
    fn find_job<'a>(
        &'a self,
        env: &'a [(String, String)],
        task_id: &'a str,
    ) -> Fut<'a, Result<Option<u64>, String>>;
    /// The job's status now. Err when the scheduler cannot be asked; an
    /// error starting with "Slurm no longer knows" (the scheduler has
    /// forgotten the job and nothing tells how it ended) ends the task.
    /// `dir` is the task directory, where the script leaves [`EXIT_FILE`].
    fn status<'a>(
        &'a self,
        env: &'a [(String, String)],
        job: u64,
        dir: Option<&'a Path>,
    ) -> Fut<'a, Result<JobStatus, String>>;
    /// Asks the scheduler to cancel `job` (without waiting for it to end).
    fn cancel<'a>(&'a self, env: &'a [(String, String)], job: u64) -> Fut<'a, Result<(), String>>;
}

/// The scheduler of an agent's batch launcher: Slurm, with the agent's
/// `--sbatch` command. (The one place a second scheduler would be chosen,
/// by the task's launcher.)
pub fn scheduler(cfg: &AgentConfig) -> Box<dyn BatchScheduler> {
    Box::new(SlurmTools::new(&cfg.sbatch))
}

/// The batch script every task is submitted with: it runs its arguments
/// (the argument vector the agent built and checked) as they are, and
/// leaves their exit status in [`EXIT_FILE`] for an agent that finds the job
/// forgotten by Slurm (no accounting to ask).
pub const SCRIPT: &str = "#!/bin/sh\n\
# benchlake batch task (docs/slurm.md): runs its arguments, the argument\n\
# vector the agent built from its catalog; nothing is interpolated here.\n\
\"$@\"\n\
rc=$?\n\
echo \"$rc\" > benchlake-exit-status\n\
exit \"$rc\"\n";

/// Where the script leaves the exit status, in the task directory.
pub const EXIT_FILE: &str = "benchlake-exit-status";

/// The script's file name in the task directory.
pub const SCRIPT_NAME: &str = "benchlake-batch.sh";

/// The job book's file name in the agent's work directory.
pub const BOOK_NAME: &str = "slurm-jobs.json";

/// Progress is reported at least this often while a job's state stays the same.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Shortest and longest pause between two looks at a job.
const POLL_MIN: Duration = Duration::from_millis(500);
const POLL_MAX: Duration = Duration::from_secs(5);

/// How long a Slurm command may take (slurmctld retries its own connection).
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// One submitted job, as the book keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub task_id: String,
    pub run_id: String,
    pub lease_id: String,
    /// The Slurm job; None while sbatch has not answered yet (found again by
    /// its job name after a restart).
    pub job_id: Option<u64>,
    /// The task directory (outputs and the job's stdout/stderr).
    pub dir: PathBuf,
    /// When the job was submitted and when the task times out (Unix ms):
    /// with `queue_deadline_ms` set, `deadline_ms` is only the end of the
    /// queue wait plus the run's timeout (the run's own deadline starts when
    /// Slurm starts the job).
    pub submitted_ms: i64,
    pub deadline_ms: i64,
    /// When the job is cancelled if Slurm has not started it (Unix ms; 0 in
    /// books written before the queue wait counted apart).
    #[serde(default)]
    pub queue_deadline_ms: i64,
    /// The task assignment (protobuf, hex): what a restarted agent needs to
    /// follow the job, collect its outputs and complete the task.
    pub assignment: String,
}

impl Entry {
    /// The task assignment this entry was made for.
    pub fn task(&self) -> Result<pb::TaskAssignment, String> {
        let bytes = hex::decode(&self.assignment)
            .map_err(|e| format!("{BOOK_NAME}: task {}: {e}", self.task_id))?;
        pb::TaskAssignment::decode(bytes.as_slice())
            .map_err(|e| format!("{BOOK_NAME}: task {}: {e}", self.task_id))
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Book {
    jobs: Vec<Entry>,
}

/// The agent's record of its Slurm jobs (`{work_dir}/slurm-jobs.json`),
/// rewritten whole through a temporary file and a rename at every change.
#[derive(Debug, Clone)]
pub struct JobBook {
    path: PathBuf,
}

/// One writer of any book at a time (an agent's tasks run concurrently).
static BOOK_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl JobBook {
    /// The book of the agent working in `work_dir`.
    pub fn new(work_dir: &Path) -> Self {
        JobBook {
            path: work_dir.join(BOOK_NAME),
        }
    }

    /// Every job in the book. A missing book is empty; an unreadable one is
    /// an error (the agent refuses to start rather than forget its jobs).
    pub fn load(&self) -> Result<Vec<Entry>, String> {
        match std::fs::read(&self.path) {
            Ok(b) => serde_json::from_slice::<Book>(&b)
                .map(|b| b.jobs)
                .map_err(|e| format!("{}: {e}", self.path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(format!("{}: {e}", self.path.display())),
        }
    }

    fn update(&self, f: impl FnOnce(&mut Vec<Entry>)) -> Result<(), String> {
        let _g = BOOK_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let mut jobs = self.load()?;
        f(&mut jobs);
        let text = serde_json::to_vec_pretty(&Book { jobs }).map_err(|e| e.to_string())?;
        let tmp = self.path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        };
        write().map_err(|e| format!("{}: {e}", self.path.display()))
    }

    /// Adds or replaces the entry of `e.task_id`.
    pub fn put(&self, e: Entry) -> Result<(), String> {
        self.update(|jobs| {
            jobs.retain(|x| x.task_id != e.task_id);
            jobs.push(e);
        })
    }

    /// Forgets the job of `task_id` (no write when the book does not have it).
    pub fn remove(&self, task_id: &str) -> Result<(), String> {
        if !self.path.exists() || !self.load()?.iter().any(|x| x.task_id == task_id) {
            return Ok(());
        }
        self.update(|jobs| jobs.retain(|x| x.task_id != task_id))
    }
}

/// How a batch job ended, for the task's completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The batch script's exit code (128 + signal when killed, -1 unknown).
    pub exit_code: i32,
    /// Empty when the job COMPLETED; else why the task failed.
    pub error: String,
    /// Whether the coordinator cancelled the task.
    pub cancelled: bool,
    pub job_id: u64,
    /// The job's nodes (Slurm's compact form), empty if it never ran.
    pub nodes: String,
}

/// What [`submit`] needs.
pub struct Submission<'a> {
    pub t: &'a pb::TaskAssignment,
    pub dir: &'a Path,
    /// What the job runs (srun and the benchmark's argument vector).
    pub argv: &'a [String],
    /// The benchmark's environment (sbatch exports it to the job).
    pub env: &'a [(String, String)],
    pub slurm: &'a SlurmOptions,
    pub np: u32,
    pub stdout: &'a str,
    pub run_as: Option<&'a RunAs>,
    pub timeout: Duration,
    /// The longest wait in Slurm's queue (`slurm.queue_timeout_s`).
    pub queue_timeout: Duration,
}

/// The batch job name of a task (how a job is found again by its task).
pub fn job_name(task_id: &str) -> String {
    format!("benchlake-{task_id}")
}

/// Writes the batch script, records the submission in the book and submits
/// the job; returns its id.
pub async fn submit(
    cfg: &AgentConfig,
    sched: &dyn BatchScheduler,
    s: &Submission<'_>,
) -> Result<u64, String> {
    let argv = sched.submit_argv(s)?;
    let script = s.dir.join(SCRIPT_NAME);
    {
        // The task directory may already belong to the run-as user: the
        // script is created new, never through a link planted there.
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&script)
            .and_then(|mut f| {
                use std::os::unix::fs::PermissionsExt;
                f.write_all(SCRIPT.as_bytes())?;
                // Whatever the umask: the job's user reads and runs it.
                f.set_permissions(std::fs::Permissions::from_mode(0o755))
            })
            .map_err(|e| format!("{}: {e}", script.display()))?;
    }
    let now = now_ms();
    let book = JobBook::new(&cfg.work_dir);
    let mut entry = Entry {
        task_id: s.t.task_id.clone(),
        run_id: s.t.run_id.clone(),
        lease_id: s.t.lease_id.clone(),
        job_id: None,
        dir: s.dir.to_path_buf(),
        submitted_ms: now,
        deadline_ms: now + s.queue_timeout.as_millis() as i64 + s.timeout.as_millis() as i64,
        queue_deadline_ms: now + s.queue_timeout.as_millis() as i64,
        assignment: hex::encode(s.t.encode_to_vec()),
    };
    // Written before sbatch runs: an agent killed while sbatch answers finds
    // the job again by its name.
    book.put(entry.clone())?;
    let Some((prog, args)) = argv.split_first() else {
        return Err("empty sbatch command".into());
    };
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args)
        .current_dir(s.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .envs(s.env.iter().map(|(k, v)| (k, v)))
        .env("BENCHLAKE_RUN_ID", &s.t.run_id)
        .env("BENCHLAKE_TASK_ID", &s.t.task_id)
        .env("BENCHLAKE_OUT_DIR", s.dir)
        // Slurm names the job's nodes (SLURMD_NODENAME); the agent's own
        // node is not theirs (benchlake_core::node).
        .env_remove(benchlake_core::node::AGENT_VAR)
        // The agent's mark would make a restarted agent on a compute node
        // kill the job's processes (crate::contain::kill_leftovers).
        .env_remove(crate::contain::MARK_VAR)
        .kill_on_drop(true);
    if let Some(ra) = s.run_as {
        // The job belongs to the user the benchmark runs as.
        cmd.uid(ra.uid)
            .gid(ra.gid)
            .env("USER", &ra.name)
            .env("LOGNAME", &ra.name)
            .env("HOME", &ra.home);
    }
    tracing::debug!(task = %s.t.task_id, argv = ?argv, "sbatch");
    let res = tokio::time::timeout(COMMAND_TIMEOUT, cmd.output()).await;
    let out = match res {
        Err(_) => {
            let _ = book.remove(&s.t.task_id);
            return Err(format!(
                "'{prog}' did not answer in {} s",
                COMMAND_TIMEOUT.as_secs()
            ));
        }
        Ok(Err(e)) => {
            let _ = book.remove(&s.t.task_id);
            return Err(format!("cannot start '{prog}': {e}"));
        }
        Ok(Ok(o)) => o,
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let id = out
        .status
        .success()
        .then(|| sched.job_id(&stdout))
        .flatten();
    let Some(id) = id else {
        let _ = book.remove(&s.t.task_id);
        crate::health::metrics().slurm_jobs.inc(&["REFUSED"]);
        let said = last_said(&out.stderr);
        return Err(format!(
            "{} refused the job ({}): {}",
            Path::new(prog)
                .file_name()
                .map_or(prog.as_str().into(), |n| n.to_string_lossy()),
            out.status,
            if said.is_empty() {
                format!("it printed '{}'", stdout.trim())
            } else {
                said
            }
        ));
    };
    entry.job_id = Some(id);
    book.put(entry)?;
    tracing::info!(task = %s.t.task_id, job = id, scheduler = sched.name(), "submitted");
    Ok(id)
}

/// The exit status the batch script left in `dir`, if it finished.
pub(crate) fn exit_status_in(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join(EXIT_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Asks the scheduler to cancel `job`, then waits (up to 10 s) until it names a final state.
pub async fn cancel(
    sched: &dyn BatchScheduler,
    env: &[(String, String)],
    job: u64,
) -> Option<JobStatus> {
    if let Err(e) = sched.cancel(env, job).await {
        tracing::warn!(job, error = %e, scheduler = sched.name(), "cancel failed");
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut last = None;
    while tokio::time::Instant::now() < until {
        match sched.status(env, job, None).await {
            Ok(s) if matches!(s.phase(), JobPhase::Ended | JobPhase::Completed) => return Some(s),
            Ok(s) => last = Some(s),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    last
}

/// Cancels the job of a book entry whose task the agent no longer holds
/// (the coordinator ended its attempt while the agent was away): nobody
/// would collect its outputs.
pub async fn abandon(cfg: &AgentConfig, e: &Entry) {
    let sched = scheduler(cfg);
    let env: Vec<(String, String)> = e
        .task()
        .ok()
        .and_then(|t| crate::runner::build_task(cfg, &t, &e.dir).ok())
        .map(|b| b.env.into_iter().collect())
        .unwrap_or_default();
    let job = match e.job_id {
        Some(j) => Some(j),
        None => sched.find_job(&env, &e.task_id).await.ok().flatten(),
    };
    if job.is_some() {
        crate::health::metrics().slurm_jobs.inc(&["SCANCELLED"]);
    }
    if let Some(job) = job
        && let Some(s) = cancel(sched.as_ref(), &env, job).await
    {
        tracing::info!(task = %e.task_id, job, state = %s.describe(job), "abandoned Slurm job");
    }
}

/// The last three non-empty lines a scheduler command wrote to stderr,
/// joined with "; " (what its error messages quote).
pub(crate) fn last_said(stderr: &[u8]) -> String {
    let err = String::from_utf8_lossy(stderr);
    let said: Vec<&str> = err
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    said[said.len().saturating_sub(3)..].join("; ")
}

/// Wall-clock time in Unix milliseconds (the book's times).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// What [`follow`] reports progress with.
pub struct Follow<'a> {
    pub t: &'a pb::TaskAssignment,
    pub dir: &'a Path,
    pub stdout: &'a str,
    pub env: &'a [(String, String)],
    pub job: u64,
    /// When the task times out (Unix ms) if the queue wait is not counted
    /// apart (books of older agents).
    pub deadline_ms: i64,
    /// When the job is cancelled if Slurm has not started it (Unix ms; 0:
    /// not counted apart, `deadline_ms` covers both).
    pub queue_deadline_ms: i64,
    /// When the job was submitted (Unix ms): the queue wait a cancelled job
    /// reports counts from here.
    pub submitted_ms: i64,
    /// The run's timeout, from when Slurm starts the job.
    pub timeout: Duration,
}

/// Follows the job until it ends, reporting its state to the coordinator;
/// scancels it when the task is cancelled or times out. None when the agent
/// stops (the job keeps running; a restarted agent re-attaches).
pub async fn follow(
    cfg: &AgentConfig,
    c: &mut Client,
    f: &Follow<'_>,
    mut stop: watch::Receiver<Stop>,
) -> Option<Ended> {
    let sched = scheduler(cfg);
    let tools = sched.as_ref();
    let env = f.env;
    let job = f.job;
    let mut pause = POLL_MIN;
    let mut last: Option<JobStatus> = None;
    let mut last_report: Option<tokio::time::Instant> = None;
    let mut last_error = String::new();
    let at = |ms: i64| {
        tokio::time::Instant::now() + Duration::from_millis((ms - now_ms()).max(0) as u64)
    };
    // While the job waits in the queue, the queue's deadline; from the
    // moment Slurm runs it, the run's own timeout (docs/slurm.md, "Timeouts").
    let queue_apart = f.queue_deadline_ms > 0;
    let mut deadline = if queue_apart {
        at(f.queue_deadline_ms)
    } else {
        at(f.deadline_ms)
    };
    let mut started: Option<tokio::time::Instant> = None;
    let ended = |s: &JobStatus, error: String, cancelled: bool| Ended {
        exit_code: match (s.exit_code, s.signal) {
            (_, sig) if sig != 0 => 128 + sig,
            (Some(c), _) => c,
            (None, _) => -1,
        },
        error,
        cancelled,
        job_id: job,
        nodes: s.nodes.clone(),
    };
    loop {
        // First look at once, then with backoff.
        let st = tools.status(env, job, Some(f.dir)).await;
        match st {
            Ok(s) => {
                last_error.clear();
                let changed = last.as_ref() != Some(&s);
                if changed {
                    pause = POLL_MIN;
                    tracing::info!(task = %f.t.task_id, job, state = %s.describe(job), "Slurm job");
                }
                let mut s = s;
                if s.nodes.is_empty()
                    && let Some(l) = &last
                {
                    s.nodes = l.nodes.clone();
                }
                if queue_apart && started.is_none() && s.phase() == JobPhase::Running {
                    let now = tokio::time::Instant::now();
                    started = Some(now);
                    deadline = now + f.timeout;
                    tracing::info!(task = %f.t.task_id, job, timeout_s = f.timeout.as_secs(), "Slurm started the job; its timeout runs from now");
                }
                match s.phase() {
                    JobPhase::Completed => {
                        crate::health::metrics().slurm_jobs.inc(&[&s.state]);
                        return Some(ended(&s, String::new(), false));
                    }
                    JobPhase::Ended => {
                        crate::health::metrics().slurm_jobs.inc(&[&s.state]);
                        let why = s.describe(job);
                        return Some(ended(&s, why, false));
                    }
                    _ => {}
                }
                let due = last_report.is_none_or(|at| at.elapsed() >= REPORT_EVERY);
                if changed || due {
                    last_report = Some(tokio::time::Instant::now());
                    let cancel = report(c, f, &s).await;
                    last = Some(s);
                    if cancel {
                        let s = cancel_job(tools, env, job, last.as_ref()).await;
                        return Some(ended(&s, format!("cancelled: {}", s.describe(job)), true));
                    }
                }
            }
            Err(e) => {
                if e.starts_with("Slurm no longer knows") {
                    return Some(Ended {
                        exit_code: -1,
                        error: e,
                        cancelled: false,
                        job_id: job,
                        nodes: last.map(|s| s.nodes).unwrap_or_default(),
                    });
                }
                if e != last_error {
                    tracing::warn!(task = %f.t.task_id, job, error = %e, "cannot ask Slurm about the job; trying again");
                    last_error = e;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = tokio::time::sleep_until(deadline) => {
                let before = last.as_ref().map(|s| s.describe(job)).unwrap_or_else(|| format!("Slurm job {job}"));
                let why = if queue_apart && started.is_none() {
                    tracing::warn!(task = %f.t.task_id, job, "queue wait over; cancelling the Slurm job");
                    format!(
                        "waited {} s in Slurm's queue without starting (slurm.queue_timeout_s): {before}; scancelled",
                        (now_ms() - f.submitted_ms).max(0) / 1000
                    )
                } else {
                    tracing::warn!(task = %f.t.task_id, job, "timeout; cancelling the Slurm job");
                    format!("timed out after {} s: {before}; scancelled", f.timeout.as_secs())
                };
                let s = cancel_job(tools, env, job, last.as_ref()).await;
                return Some(ended(&s, why, false));
            }
            r = stop.changed() => {
                let v = if r.is_ok() { *stop.borrow() } else { Stop::Shutdown };
                match v {
                    Stop::Run => {}
                    // The job runs on without the agent; the book keeps it.
                    Stop::Shutdown => return None,
                    Stop::Cancel => {
                        let s = cancel_job(tools, env, job, last.as_ref()).await;
                        return Some(ended(&s, format!("cancelled: {}", s.describe(job)), true));
                    }
                }
            }
        }
        pause = (pause * 2).min(POLL_MAX);
    }
}

/// scancels `job`; the state Slurm then names (or the last one seen).
async fn cancel_job(
    tools: &dyn BatchScheduler,
    env: &[(String, String)],
    job: u64,
    last: Option<&JobStatus>,
) -> JobStatus {
    crate::health::metrics().slurm_jobs.inc(&["SCANCELLED"]);
    match cancel(tools, env, job).await {
        Some(s) => s,
        None => last.cloned().unwrap_or_default(),
    }
}

/// Reports the job's state as the task's progress; true when the
/// coordinator says the task is cancelled.
async fn report(c: &mut Client, f: &Follow<'_>, s: &JobStatus) -> bool {
    let req = pb::ReportProgressRequest {
        task_id: f.t.task_id.clone(),
        lease_id: f.t.lease_id.clone(),
        phase: if s.phase() == JobPhase::Waiting {
            "pending".into()
        } else {
            "running".into()
        },
        fraction: -1.0,
        stdout_tail: crate::runner::read_tail(&f.dir.join(f.stdout)).await,
        stderr_tail: crate::runner::read_tail(&f.dir.join("stderr.txt")).await,
        message: s.describe(f.job),
        slurm_job_id: f.job.to_string(),
        slurm_nodes: s.nodes.clone(),
    };
    match c.report_progress(req).await {
        Ok(r) => r.get_ref().cancel,
        Err(e) => {
            tracing::warn!(task = %f.t.task_id, error = %e.message(), "progress report failed");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::slurm::sbatch_argv;
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_tools_live_next_to_sbatch() {
        let t = SlurmTools::new(&s(&["/opt/slurm/bin/sbatch", "--cluster=a"]));
        assert_eq!(t.scontrol, "/opt/slurm/bin/scontrol");
        assert_eq!(t.scancel, "/opt/slurm/bin/scancel");
        assert_eq!(t.sbatch, ["/opt/slurm/bin/sbatch", "--cluster=a"]);
        let t = SlurmTools::new(&s(&["sbatch"]));
        assert_eq!((t.squeue.as_str(), t.sacct.as_str()), ("squeue", "sacct"));
    }

    #[test]
    fn sbatch_gets_options_then_the_fixed_script_then_the_argv() {
        let t = pb::TaskAssignment {
            task_id: "01TASK".into(),
            ..Default::default()
        };
        let slurm = SlurmOptions {
            nodes: 3,
            partition: "debug".into(),
            ..Default::default()
        };
        let argv = s(&[
            "srun",
            "--ntasks=6",
            "pio",
            "--np=6",
            "--output=/w/x; rm -rf /",
        ]);
        let sub = Submission {
            t: &t,
            dir: Path::new("/w/R/01TASK-1"),
            argv: &argv,
            env: &[],
            slurm: &slurm,
            np: 6,
            stdout: "stdout.txt",
            run_as: None,
            timeout: Duration::from_secs(60),
            queue_timeout: Duration::from_secs(86_400),
        };
        let a = sbatch_argv(&SlurmTools::new(&s(&["sbatch"])), &sub).unwrap();
        assert_eq!(
            a,
            s(&[
                "sbatch",
                "--parsable",
                "--job-name=benchlake-01TASK",
                "--chdir=/w/R/01TASK-1",
                "--output=/w/R/01TASK-1/stdout.txt",
                "--error=/w/R/01TASK-1/stderr.txt",
                "--no-requeue",
                "--export=ALL",
                "--ntasks=6",
                "--nodes=3",
                "--partition=debug",
                "/w/R/01TASK-1/benchlake-batch.sh",
                "srun",
                "--ntasks=6",
                "pio",
                "--np=6",
                "--output=/w/x; rm -rf /",
            ])
        );
        // The script never holds a value: it runs its arguments.
        assert!(SCRIPT.contains("\n\"$@\"\n") && !SCRIPT.contains("pio"));
        let bad = SlurmOptions {
            reservation: "r;id".into(),
            ..Default::default()
        };
        let e = sbatch_argv(
            &SlurmTools::new(&s(&["sbatch"])),
            &Submission { slurm: &bad, ..sub },
        )
        .unwrap_err();
        assert!(e.contains("slurm.reservation"), "{e}");
    }

    #[test]
    fn the_script_passes_arguments_through_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join(SCRIPT_NAME);
        std::fs::write(&script, SCRIPT).unwrap();
        let out = std::process::Command::new("sh")
            .arg(&script)
            .args(["printf", "%s|", "a b", "$(id)", "'q'", "*", "-n"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|$(id)|'q'|*|-n|");
        assert_eq!(exit_status_in(dir.path()), Some(0));
        let st = std::process::Command::new("sh")
            .arg(&script)
            .args(["sh", "-c", "exit 3"])
            .current_dir(dir.path())
            .status()
            .unwrap();
        assert_eq!(
            st.code(),
            Some(3),
            "the script exits with the program's status"
        );
        assert_eq!(exit_status_in(dir.path()), Some(3));
        let st = std::process::Command::new("sh")
            .arg("-n")
            .arg(&script)
            .status()
            .unwrap();
        assert!(st.success());
    }

    #[test]
    fn the_book_survives_a_restart_and_forgets_what_ended() {
        let dir = tempfile::tempdir().unwrap();
        let book = JobBook::new(dir.path());
        assert!(book.load().unwrap().is_empty());
        let t = pb::TaskAssignment {
            task_id: "T1".into(),
            lease_id: "L1".into(),
            benchmark: "pio".into(),
            params: [("np".to_string(), "3".to_string())].into(),
            ..Default::default()
        };
        let e = Entry {
            task_id: "T1".into(),
            run_id: "R".into(),
            lease_id: "L1".into(),
            job_id: Some(7),
            dir: dir.path().join("R/T1-1"),
            submitted_ms: 1,
            deadline_ms: 2,
            queue_deadline_ms: 0,
            assignment: hex::encode(t.encode_to_vec()),
        };
        book.put(e.clone()).unwrap();
        book.put(Entry {
            task_id: "T2".into(),
            job_id: None,
            ..e.clone()
        })
        .unwrap();
        let again = JobBook::new(dir.path()).load().unwrap();
        assert_eq!(again.len(), 2);
        assert_eq!(again[0], e);
        assert_eq!(again[0].task().unwrap(), t);
        book.remove("T1").unwrap();
        let left = book.load().unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].task_id, "T2");
        assert!(!dir.path().join("slurm-jobs.json.tmp").exists());
        std::fs::write(dir.path().join(BOOK_NAME), "{not json").unwrap();
        let err = book.load().unwrap_err();
        assert!(err.contains(BOOK_NAME), "{err}");
    }
}
