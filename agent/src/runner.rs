//! Runs one task: checks it against the agent's own catalog, builds the argument
//! vector (and the `mpirun` wrapper), executes it in its own process group with
//! stdout/stderr captured to files, streams progress, enforces the timeout and
//! cancellation by killing the whole group, then uploads the declared outputs
//! and the logs with their SHA-256 and reports completion. Tasks of the
//! `sbatch` launcher are submitted and followed by [`crate::batch`] instead of
//! run as a child; their outputs are collected the same way.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use benchlake_core::bench::LauncherKind;
use benchlake_proto::v1 as pb;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::watch;

use crate::{AgentConfig, Client};

/// What the agent wants of a running task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Keep running.
    Run,
    /// The coordinator cancelled it: kill and report.
    Cancel,
    /// The agent is stopping: kill and leave the task to its lease.
    Shutdown,
}

/// Upload chunk size.
const CHUNK: usize = 1 << 20;
/// Log tail sent with progress and completion.
const TAIL: u64 = 4096;

/// How a task ended.
struct Outcome {
    success: bool,
    /// Failed outside the benchmark (an upload that did not land): the
    /// coordinator starts a new attempt.
    retryable: bool,
    exit_code: i32,
    error: String,
    outputs: Vec<pb::RawFile>,
    /// The Slurm job of an `sbatch` task and its nodes (else empty).
    slurm_job_id: String,
    slurm_nodes: String,
}

/// Runs `t` to completion and reports it (unless the agent shuts down).
/// `resume` is the book entry of a Slurm batch job an earlier life of this
/// agent submitted for `t`: the job is followed, not submitted again.
pub async fn run_task(
    cfg: &AgentConfig,
    mut c: Client,
    t: pb::TaskAssignment,
    stop: watch::Receiver<Stop>,
    resume: Option<crate::batch::Entry>,
) {
    let started = Instant::now();
    let dir = match &resume {
        Some(e) => e.dir.clone(),
        None => cfg
            .work_dir
            .join(&t.run_id)
            .join(format!("{}-{}", t.task_id, t.attempt)),
    };
    let earlier_s = resume
        .as_ref()
        .map(|e| (crate::batch::now_ms() - e.submitted_ms).max(0) as f64 / 1000.0)
        .unwrap_or(0.0);
    if resume.is_some() {
        tracing::info!(task = %t.task_id, benchmark = %t.benchmark, attempt = t.attempt, "re-attaching to the task's Slurm job");
    } else {
        tracing::info!(task = %t.task_id, benchmark = %t.benchmark, attempt = t.attempt, "task starting");
    }
    let mut shutdown = stop.clone();
    let res = execute(cfg, &mut c, &t, stop, &dir, resume.as_ref()).await;
    let Some(o) = res else {
        tracing::warn!(task = %t.task_id, "agent stopping; task abandoned to its lease");
        crate::health::task(&t.benchmark, "abandoned");
        return;
    };
    let req = pb::CompleteTaskRequest {
        task_id: t.task_id.clone(),
        lease_id: t.lease_id.clone(),
        success: o.success,
        retryable: o.retryable,
        exit_code: o.exit_code,
        error: o.error.clone(),
        outputs: o.outputs,
        stdout_tail: read_tail(
            &dir.join(
                cfg.catalog
                    .get(&t.benchmark)
                    .map(stdout_file)
                    .unwrap_or("stdout.txt"),
            ),
        )
        .await,
        stderr_tail: read_tail(&dir.join("stderr.txt")).await,
        wall_s: earlier_s + started.elapsed().as_secs_f64(),
        slurm_job_id: o.slurm_job_id.clone(),
        slurm_nodes: o.slurm_nodes.clone(),
    };
    // Completion is retried through a coordinator outage (the retry policy):
    // losing it would leave the task to lease expiry. An agent shutting down
    // stops retrying and leaves the task to its lease.
    let policy = benchlake_proto::retry::RetryPolicy::new(cfg.retry_for);
    let complete = policy.call("complete", || {
        let mut c = c.clone();
        let req = req.clone();
        async move { c.complete_task(req).await }
    });
    let res = tokio::select! {
        r = complete => Some(r),
        _ = shutdown.wait_for(|s| *s == Stop::Shutdown) => None,
    };
    match res {
        Some(Ok(_)) => {
            let outcome = if o.success { "succeeded" } else { "failed" };
            crate::health::task(&t.benchmark, outcome);
        }
        Some(Err(s)) => {
            tracing::warn!(task = %t.task_id, code = ?s.code(), error = %s.message(), "completion refused");
            crate::health::task(&t.benchmark, "unreported");
        }
        None => {
            tracing::warn!(task = %t.task_id, "agent stopping; completion abandoned to the lease");
            crate::health::task(&t.benchmark, "abandoned");
            return;
        }
    }
    // Reported (or refused for good): a restarted agent has nothing to
    // re-attach to.
    if let Err(e) = crate::batch::JobBook::new(&cfg.work_dir).remove(&t.task_id) {
        tracing::warn!(task = %t.task_id, error = %e, "cannot update the Slurm job book");
    }
    if o.success {
        tracing::info!(task = %t.task_id, "task finished");
    } else {
        tracing::warn!(task = %t.task_id, error = %o.error, "task failed");
    }
    if !cfg.keep_work {
        let _ = tokio::fs::remove_dir_all(&dir).await;
    }
}

fn fail(msg: impl Into<String>) -> Option<Outcome> {
    Some(Outcome {
        success: false,
        retryable: false,
        exit_code: -1,
        error: msg.into(),
        outputs: Vec::new(),
        slurm_job_id: String::new(),
        slurm_nodes: String::new(),
    })
}

/// The argument vector of a task (the launcher wrapper included).
pub fn build_argv(
    cfg: &AgentConfig,
    t: &pb::TaskAssignment,
    out_dir: &Path,
) -> Result<(Vec<String>, BTreeMap<String, String>), String> {
    build_task(cfg, t, out_dir).map(|b| (b.argv, b.env))
}

/// What a task runs: argument vector (launcher included), environment,
/// launcher, processes and Slurm options.
pub struct Built {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub launcher: LauncherKind,
    pub np: u32,
    pub slurm: benchlake_core::slurm::SlurmOptions,
}

/// Checks `t` against the catalog and builds what it runs ([`Built`]).
pub fn build_task(
    cfg: &AgentConfig,
    t: &pb::TaskAssignment,
    out_dir: &Path,
) -> Result<Built, String> {
    let def = cfg
        .catalog
        .get(&t.benchmark)
        .ok_or_else(|| format!("benchmark '{}' is not in this agent's catalog", t.benchmark))?;
    let params: BTreeMap<String, String> = t.params.clone().into_iter().collect();
    let params = def.validate_params(&params, "params")?;
    // An unknown value is refused, never run as another launcher; UNSPECIFIED
    // is the catalog entry's default (the coordinator always names one).
    let launcher = match benchlake_proto::launcher::from_pb(t.launcher) {
        Ok(Some(l)) => l,
        Ok(None) => *def.launchers.first().unwrap_or(&LauncherKind::Local),
        Err(e) => {
            return Err(format!(
                "task {}: {e}: refusing to run benchmark '{}' with a launcher this agent does not know",
                t.task_id, def.name
            ));
        }
    };
    if !def.launchers.contains(&launcher) {
        return Err(format!(
            "benchmark '{}' does not allow launcher '{}'",
            def.name,
            launcher.as_str()
        ));
    }
    let hosts: Vec<String> = t
        .peers
        .iter()
        .map(|p| {
            if p.hostname.is_empty() {
                p.name.clone()
            } else {
                p.hostname.clone()
            }
        })
        .collect();
    let slurm = crate::launcher::slurm_options(
        &benchlake_proto::launcher::slurm_from_pb(t.slurm.as_ref()),
        def.slurm.as_ref(),
    );
    let np = params
        .get("np")
        .cloned()
        .unwrap_or_else(|| crate::launcher::default_np(launcher, hosts.len(), &slurm).to_string());
    let self_exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "benchlake".into());
    let builtins: BTreeMap<String, String> = [
        ("out_dir", out_dir.display().to_string()),
        ("rank", t.rank.to_string()),
        ("num_tasks", t.num_tasks.to_string()),
        ("hosts", hosts.join(",")),
        ("np", np.clone()),
        ("run_id", t.run_id.clone()),
        ("task_id", t.task_id.clone()),
        ("agent", cfg.name.clone()),
        ("tracer_lib", tracer_lib()),
        ("self_exe", self_exe),
        ("addresses", peer_addresses(t)),
        ("apps_dir", dir_builtin(cfg.apps_dir.as_deref())),
        ("scratch_dir", dir_builtin(cfg.scratch_dir.as_deref())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    def.check_paths(&params, &builtins)?;
    if def.uses_builtin("tracer_lib") {
        let lib = &builtins["tracer_lib"];
        if !Path::new(lib).is_file() {
            return Err(format!(
                "the tracer library {lib} does not exist: build it (cargo build -p benchlake-tracer) \
                 or set BENCHLAKE_TRACER_LIB; a traced run never starts untraced"
            ));
        }
    }
    let argv = def.argv(&params, &builtins)?;
    let np: u32 = np.parse().unwrap_or(1);
    let argv = crate::launcher::wrap(
        launcher,
        &crate::launcher::Programs {
            mpirun: &cfg.mpirun,
            srun: &cfg.srun,
        },
        &crate::launcher::Task {
            benchmark: &def.name,
            np,
            hosts: &hosts,
            slurm: &slurm,
        },
        argv,
    )
    .map_err(|e| format!("task {}: {e}", t.task_id))?;
    let env = def.environment(&params, &builtins)?;
    Ok(Built {
        argv,
        env,
        launcher,
        np,
        slurm,
    })
}

/// A directory built-in: the path, or empty when the agent has none (a root
/// naming it then admits nothing).
fn dir_builtin(d: Option<&Path>) -> String {
    d.map(|d| d.display().to_string()).unwrap_or_default()
}

/// The `addresses` built-in: each peer's advertised address (`--address` of
/// its agent), else its host name, else its agent name; comma-separated in
/// rank order.
fn peer_addresses(t: &pb::TaskAssignment) -> String {
    t.peers
        .iter()
        .map(|p| {
            [&p.address, &p.hostname, &p.name]
                .into_iter()
                .find(|s| !s.is_empty())
                .cloned()
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Where the program's stdout goes (a plain name in the output directory).
fn stdout_file(def: &benchlake_core::bench::BenchmarkDef) -> &str {
    def.stdout.as_deref().unwrap_or("stdout.txt")
}

fn kill_group(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a negative pid signals the process group we created for
    // the child (process_group(0)); it has no memory-safety preconditions.
    unsafe {
        libc::kill(-(pid as i32), sig);
    }
}

async fn execute(
    cfg: &AgentConfig,
    c: &mut Client,
    t: &pb::TaskAssignment,
    mut stop: watch::Receiver<Stop>,
    dir: &Path,
    resume: Option<&crate::batch::Entry>,
) -> Option<Outcome> {
    if let Some(e) = resume {
        return execute_batch(cfg, c, t, stop, dir, None, Some(e)).await;
    }
    let Some(def) = cfg.catalog.get(&t.benchmark) else {
        return fail(format!(
            "benchmark '{}' is not in this agent's catalog",
            t.benchmark
        ));
    };
    let run_as = match crate::contain::run_as_for(def, cfg.run_as.as_deref()) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let stdout_name = stdout_file(def);
    // The directory and its log files belong to the user the task runs as
    // (slurmd opens a batch job's logs as that user).
    let (out, err) = match crate::contain::task_dir(dir, stdout_name, run_as.as_ref()) {
        Ok(f) => f,
        Err(e) => return fail(e.to_string()),
    };
    let (argv, env) = match build_argv(cfg, t, dir) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    // build_argv refused unknown launchers already.
    let launcher = benchlake_proto::launcher::from_pb(t.launcher)
        .ok()
        .flatten()
        .unwrap_or_else(|| *def.launchers.first().unwrap_or(&LauncherKind::Local));
    let gentle = crate::launcher::terminate_first(launcher);
    let timeout = match def.effective_timeout(t.timeout_s) {
        Ok(s) => Duration::from_secs(s),
        Err(e) => return fail(e),
    };
    let Some((prog, args)) = argv.split_first() else {
        return fail("empty command");
    };
    if launcher == LauncherKind::Sbatch {
        drop((out, err));
        return execute_batch(cfg, c, t, stop, dir, run_as.as_ref(), None).await;
    }
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .envs(&env)
        .env("BENCHLAKE_RUN_ID", &t.run_id)
        .env("BENCHLAKE_TASK_ID", &t.task_id)
        .env("BENCHLAKE_OUT_DIR", dir)
        // The node its results are recorded under when Slurm names none
        // (benchlake_core::node).
        .env(benchlake_core::node::AGENT_VAR, &cfg.name);
    crate::contain::contain(&mut cmd, &cfg.work_dir, run_as.as_ref());
    tracing::debug!(task = %t.task_id, argv = ?argv, "exec");
    let mut child = match cmd.spawn() {
        Ok(ch) => ch,
        Err(e) => return fail(format!("cannot start '{prog}': {e}")),
    };
    let pid = child.id().unwrap_or(0);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut progress = tokio::time::interval(Duration::from_secs(2));
    let mut stopped: Option<Stop> = None;
    let mut timed_out = false;
    let status = loop {
        tokio::select! {
            st = child.wait() => break st,
            _ = tokio::time::sleep_until(deadline), if !timed_out => {
                timed_out = true;
                tracing::warn!(task = %t.task_id, "timeout; terminating the process group");
                kill_group(pid, libc::SIGTERM);
                let grace = tokio::time::sleep(Duration::from_secs(5));
                tokio::pin!(grace);
                tokio::select! {
                    st = child.wait() => break st,
                    _ = &mut grace => { kill_group(pid, libc::SIGKILL); }
                }
            }
            r = stop.changed() => {
                let v = if r.is_ok() { *stop.borrow() } else { Stop::Shutdown };
                if v != Stop::Run {
                    stopped = Some(v);
                    if gentle {
                        // srun cancels its step or pending job on SIGTERM.
                        kill_group(pid, libc::SIGTERM);
                        if let Ok(st) = tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
                            break st;
                        }
                    }
                    kill_group(pid, libc::SIGKILL);
                }
            }
            _ = progress.tick() => {
                let req = pb::ReportProgressRequest {
                    task_id: t.task_id.clone(),
                    lease_id: t.lease_id.clone(),
                    phase: "running".into(),
                    fraction: -1.0,
                    stdout_tail: read_tail(&dir.join(stdout_name)).await,
                    stderr_tail: read_tail(&dir.join("stderr.txt")).await,
                    message: String::new(),
                    ..Default::default()
                };
                match c.report_progress(req).await {
                    Ok(r) if r.get_ref().cancel => {
                        stopped = Some(Stop::Cancel);
                        if gentle {
                            kill_group(pid, libc::SIGTERM);
                            if let Ok(st) = tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
                                break st;
                            }
                        }
                        kill_group(pid, libc::SIGKILL);
                    }
                    Ok(_) => {}
                    Err(s) => tracing::warn!(task = %t.task_id, error = %s.message(), "progress report failed"),
                }
            }
        }
    };
    // Whatever the child left behind in its group goes too.
    kill_group(pid, libc::SIGKILL);
    match stopped {
        Some(Stop::Shutdown) => return None,
        Some(Stop::Cancel) => return fail("cancelled"),
        _ => {}
    }
    let (exit_code, mut error) = match status {
        Ok(st) => match st.code() {
            Some(0) => (0, String::new()),
            Some(code) => (code, format!("'{prog}' exited with code {code}")),
            None => {
                use std::os::unix::process::ExitStatusExt;
                let sig = st.signal().unwrap_or(0);
                (128 + sig, format!("'{prog}' was killed by signal {sig}"))
            }
        },
        Err(e) => (-1, format!("waiting for '{prog}': {e}")),
    };
    if timed_out {
        error = format!("timed out after {} s", timeout.as_secs());
    }
    if !error.is_empty() {
        // What srun said (an allocation refused, a job still queued) is the
        // reason users need, not only its exit code.
        let stderr = read_tail(&dir.join("stderr.txt")).await;
        if let Some(why) = crate::launcher::failure_reason(launcher, &stderr) {
            error = format!("{error}: {why}");
        }
    }
    collect(
        cfg,
        c,
        t,
        stop,
        dir,
        def,
        exit_code,
        error,
        (String::new(), String::new()),
    )
    .await
}

/// A task of the `sbatch` launcher: submitted (or, with `resume`, found
/// again), followed until the job ends, then collected like any task.
async fn execute_batch(
    cfg: &AgentConfig,
    c: &mut Client,
    t: &pb::TaskAssignment,
    stop: watch::Receiver<Stop>,
    dir: &Path,
    run_as: Option<&crate::contain::RunAs>,
    resume: Option<&crate::batch::Entry>,
) -> Option<Outcome> {
    use crate::batch;
    let built = match build_task(cfg, t, dir) {
        Ok(b) => b,
        Err(e) => {
            // The catalog changed under a job an earlier life submitted:
            // nobody can follow it, so it goes.
            if let Some(entry) = resume {
                batch::abandon(cfg, entry).await;
            }
            return fail(e);
        }
    };
    let Some(def) = cfg.catalog.get(&t.benchmark) else {
        return fail("benchmark vanished from the catalog");
    };
    let timeout = match def.effective_timeout(t.timeout_s) {
        Ok(s) => Duration::from_secs(s),
        Err(e) => return fail(e),
    };
    let stdout_name = stdout_file(def);
    let env: Vec<(String, String)> = built.env.clone().into_iter().collect();
    let sched = batch::scheduler(cfg);
    let queue_timeout = Duration::from_secs(built.slurm.queue_timeout());
    let (job, deadline_ms, queue_deadline_ms, submitted_ms) = match resume {
        Some(e) => {
            crate::health::metrics()
                .slurm_reattached
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let job = match e.job_id {
                Some(j) => Some(j),
                None => sched.find_job(&env, &t.task_id).await.unwrap_or_else(|err| {
                    tracing::warn!(task = %t.task_id, error = %err, "cannot look the job up by its name");
                    None
                }),
            };
            let Some(job) = job else {
                return fail(format!(
                    "the agent restarted while submitting the task to Slurm and Slurm has no job named {}",
                    batch::job_name(&t.task_id)
                ));
            };
            (job, e.deadline_ms, e.queue_deadline_ms, e.submitted_ms)
        }
        None => {
            let sub = batch::Submission {
                t,
                dir,
                argv: &built.argv,
                env: &env,
                slurm: &built.slurm,
                np: built.np,
                stdout: stdout_name,
                run_as,
                timeout,
                queue_timeout,
            };
            match batch::submit(cfg, sched.as_ref(), &sub).await {
                Ok(j) => {
                    let now = batch::now_ms();
                    let queue_end = now + queue_timeout.as_millis() as i64;
                    (j, queue_end + timeout.as_millis() as i64, queue_end, now)
                }
                Err(e) => return fail(e),
            }
        }
    };
    let f = batch::Follow {
        t,
        dir,
        stdout: stdout_name,
        env: &env,
        job,
        deadline_ms,
        queue_deadline_ms,
        submitted_ms,
        timeout,
    };
    let ended = batch::follow(cfg, c, &f, stop.clone()).await?;
    let ids = (ended.job_id.to_string(), ended.nodes.clone());
    if ended.cancelled {
        return Some(Outcome {
            success: false,
            retryable: false,
            exit_code: ended.exit_code,
            error: ended.error,
            outputs: Vec::new(),
            slurm_job_id: ids.0,
            slurm_nodes: ids.1,
        });
    }
    let mut error = ended.error;
    if !error.is_empty() {
        let stderr = read_tail(&dir.join("stderr.txt")).await;
        if let Some(why) = crate::launcher::failure_reason(LauncherKind::Sbatch, &stderr) {
            error = format!("{error}: {why}");
        }
    }
    collect(cfg, c, t, stop, dir, def, ended.exit_code, error, ids).await
}

/// Uploads the declared outputs and the logs of a task that ended; the
/// outcome to report.
#[allow(clippy::too_many_arguments)]
async fn collect(
    cfg: &AgentConfig,
    c: &mut Client,
    t: &pb::TaskAssignment,
    mut stop: watch::Receiver<Stop>,
    dir: &Path,
    def: &benchlake_core::bench::BenchmarkDef,
    exit_code: i32,
    mut error: String,
    (slurm_job_id, slurm_nodes): (String, String),
) -> Option<Outcome> {
    let stdout_name = stdout_file(def);
    // Declared outputs, then the logs.
    let mut files: Vec<(PathBuf, String, String)> = Vec::new();
    let names = list_dir(dir).await;
    for o in &def.outputs {
        let matched: Vec<&String> = names.iter().filter(|n| wildcard(&o.file, n)).collect();
        if matched.is_empty() && o.required && error.is_empty() {
            error = format!("required output '{}' was not written", o.file);
        }
        for n in matched {
            if !files.iter().any(|f| &f.1 == n) {
                files.push((dir.join(n), n.clone(), o.format.clone()));
            }
        }
    }
    for log in [stdout_name, "stderr.txt"] {
        if !files.iter().any(|f| f.1 == log) {
            files.push((dir.join(log), log.to_string(), "log".into()));
        }
    }
    let mut outputs = Vec::new();
    let mut retryable = false;
    let policy = benchlake_proto::retry::RetryPolicy::new(cfg.retry_for);
    for (path, name, format) in files {
        // Retried through a coordinator outage; an agent shutting down stops
        // and leaves the task to its lease.
        let res = tokio::select! {
            r = upload(c, t, &path, &name, &format, &policy) => r,
            _ = stop.wait_for(|s| *s == Stop::Shutdown) => return None,
        };
        match res {
            Ok(rf) => outputs.push(rf),
            Err(e) => {
                // A benchmark that ran and failed keeps its own error.
                retryable = error.is_empty() && e.transient;
                error = format!("upload of {name} failed: {}", e.message);
                break;
            }
        }
    }
    Some(Outcome {
        success: error.is_empty(),
        retryable,
        exit_code,
        error,
        outputs,
        slurm_job_id,
        slurm_nodes,
    })
}

/// Streams one file to the coordinator; returns the stored object's record.
///
/// Retried under `policy` while the failure is transient (the coordinator
/// down or restarting): every attempt streams the file again from its first
/// byte, and the coordinator writes it afresh under the same key (the object
/// appears only when complete and its SHA-256 matches), so a repeated upload
/// replaces the object, never duplicates it.
pub async fn upload(
    c: &mut Client,
    t: &pb::TaskAssignment,
    path: &Path,
    name: &str,
    format: &str,
    policy: &benchlake_proto::retry::RetryPolicy,
) -> Result<pb::RawFile, UploadFailed> {
    let transient = |e: &UploadError| match e {
        // RESOURCE_EXHAUSTED is the coordinator's upload size limit here.
        UploadError::Rpc(s) => {
            s.code() != tonic::Code::ResourceExhausted && benchlake_proto::retry::is_transient(s)
        }
        UploadError::Local(_) => false,
    };
    policy
        .retry(&format!("upload of {name}"), transient, || {
            let mut c = c.clone();
            async move { upload_once(&mut c, t, path, name, format).await }
        })
        .await
        .map_err(|e| UploadFailed {
            transient: transient(&e),
            message: e.to_string(),
        })
}

/// An upload that did not land, after retries.
#[derive(Debug)]
pub struct UploadFailed {
    /// The last failure was one that goes away (the coordinator or the
    /// lake away, a full disk) but outlasted `--retry-for`.
    pub transient: bool,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for UploadFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Why one upload attempt failed.
#[derive(Debug)]
enum UploadError {
    /// Reading the local file.
    Local(String),
    /// The call.
    Rpc(tonic::Status),
}

impl std::fmt::Display for UploadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UploadError::Local(m) => f.write_str(m),
            UploadError::Rpc(s) => f.write_str(s.message()),
        }
    }
}

/// One attempt of [`upload`]: the whole file, from its first byte.
async fn upload_once(
    c: &mut Client,
    t: &pb::TaskAssignment,
    path: &Path,
    name: &str,
    format: &str,
) -> Result<pb::RawFile, UploadError> {
    let mut f = open_output(path)
        .await
        .map_err(|e| UploadError::Local(format!("{}: {e}", path.display())))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<pb::UploadChunk>(4);
    let (task_id, lease_id, name_s, format_s) = (
        t.task_id.clone(),
        t.lease_id.clone(),
        name.to_string(),
        format.to_string(),
    );
    let path_s = path.display().to_string();
    let reader = tokio::spawn(async move {
        let mut h = sha2::Sha256::new();
        let mut first = true;
        loop {
            let mut buf = vec![0u8; CHUNK];
            let mut n = 0;
            while n < CHUNK {
                match f.read(&mut buf[n..]).await {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) => return Err(format!("{path_s}: {e}")),
                }
            }
            buf.truncate(n);
            h.update(&buf);
            let last = n < CHUNK;
            let chunk = pb::UploadChunk {
                task_id: if first {
                    task_id.clone()
                } else {
                    String::new()
                },
                lease_id: if first {
                    lease_id.clone()
                } else {
                    String::new()
                },
                file_name: if first { name_s.clone() } else { String::new() },
                format: if first {
                    format_s.clone()
                } else {
                    String::new()
                },
                data: buf,
                sha256: if last {
                    hex::encode(h.clone().finalize())
                } else {
                    String::new()
                },
            };
            first = false;
            if tx.send(chunk).await.is_err() {
                return Ok(());
            }
            if last {
                return Ok(());
            }
        }
    });
    let res = c
        .upload_output(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await;
    match reader.await {
        Ok(Err(e)) => return Err(UploadError::Local(e)),
        Err(e) => return Err(UploadError::Local(e.to_string())),
        Ok(Ok(())) => {}
    }
    let mut rf = res.map_err(UploadError::Rpc)?.into_inner();
    rf.format = format.to_string();
    Ok(rf)
}

async fn list_dir(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(mut rd) = tokio::fs::read_dir(dir).await {
        while let Ok(Some(e)) = rd.next_entry().await {
            if e.file_type().await.map(|t| t.is_file()).unwrap_or(false)
                && let Some(n) = e.file_name().to_str()
            {
                out.push(n.to_string());
            }
        }
    }
    out.sort();
    out
}

/// `*` matches any run of characters; everything else matches itself.
pub fn wildcard(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first)
        || !name[first.len()..].ends_with(last)
        || name.len() < first.len() + last.len()
    {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

/// Opens a file of a task directory for reading. The directory belongs to
/// the user the task ran as, so a symbolic link (to a file only the agent may
/// read) or a FIFO (which would block) is refused: only regular files.
async fn open_output(path: &Path) -> std::io::Result<tokio::fs::File> {
    let f = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .await?;
    if !f.metadata().await?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

pub(crate) async fn read_tail(path: &Path) -> String {
    let Ok(mut f) = open_output(path).await else {
        return String::new();
    };
    let len = f.metadata().await.map(|m| m.len()).unwrap_or(0);
    if len > TAIL {
        let _ = f.seek(std::io::SeekFrom::Start(len - TAIL)).await;
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf).await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// The benchlake tracer library for `traced` benchmarks (docs/tracer.md): the
/// one lookup of [`benchlake_tracer::library_path`] (environment, install
/// layout, beside the executable, build output); when none exists, the first
/// place searched, so the task fails naming it.
fn tracer_lib() -> String {
    benchlake_tracer::library_path()
        .or_else(|| benchlake_tracer::search_path().into_iter().next())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| benchlake_tracer::LIBRARY_NAME.into())
}

// The tests' helper for a test that cannot run (docs/testing.md, "Skips and CI").
#[cfg(test)]
#[path = "../../tests/support/unavailable.rs"]
mod unavailable;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(wildcard("counts.rank*_call*.md", "counts.rank0_call12.md"));
        assert!(!wildcard("counts.rank*_call*.md", "counts.rank0.md"));
        assert!(wildcard("*.sion", "a.sion"));
        assert!(wildcard("out.json", "out.json"));
        assert!(!wildcard("a*a", "a"));
    }

    fn task(launcher: pb::Launcher, params: &[(&str, &str)]) -> pb::TaskAssignment {
        pb::TaskAssignment {
            task_id: "T".into(),
            run_id: "R".into(),
            benchmark: "sleep".into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            launcher: launcher as i32,
            peers: vec![
                pb::PeerAgent {
                    rank: 0,
                    name: "a".into(),
                    hostname: "n1".into(),
                    ..Default::default()
                },
                pb::PeerAgent {
                    rank: 1,
                    name: "b".into(),
                    hostname: "n2".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn traced_runs_the_application_under_the_tracer_through_mpirun() {
        let mut cfg = AgentConfig::new("127.0.0.1:1", "/tmp/x").unwrap();
        cfg.catalog = crate::builtin_catalog().unwrap();
        cfg.mpirun = vec!["mpirun".into(), "--oversubscribe".into()];
        let mut t = task(pb::Launcher::Mpirun, &[("app", "/apps/ring"), ("np", "4")]);
        t.benchmark = "traced".into();
        // No applications directory: no application is allowed.
        let e = build_argv(&cfg, &t, Path::new("/o")).unwrap_err();
        assert!(e.contains("params.app") && e.contains("outside"), "{e}");
        cfg.apps_dir = Some("/apps".into());
        let lib = super::tracer_lib();
        if !Path::new(&lib).is_file() {
            // The tracer was not built (no mpicc): the run must not start untraced.
            let e = build_argv(&cfg, &t, Path::new("/o")).unwrap_err();
            assert!(e.contains("does not exist"), "{e}");
            unavailable::unavailable(
                "traced_runs_the_application_under_the_tracer_through_mpirun",
                &format!(
                    "the tracer library was not built ({lib} missing; install libopenmpi-dev)"
                ),
            );
            return;
        }
        let (argv, _) = build_argv(&cfg, &t, Path::new("/o")).unwrap();
        assert!(lib.ends_with("libbenchlake_tracer.so"));
        assert_eq!(
            argv,
            [
                "mpirun".to_string(),
                "--oversubscribe".into(),
                "-np".into(),
                "4".into(),
                "--host".into(),
                "n1:2,n2:2".into(),
                "-x".into(),
                format!("LD_PRELOAD={lib}"),
                "-x".into(),
                "BENCHLAKE_TRACE_DIR=/o".into(),
                "-x".into(),
                "BANDELA_LATENCY=2".into(),
                "-x".into(),
                "BANDELA_BANDWIDTH=700".into(),
                "-x".into(),
                "BANDELA_BARRIER_LATENCY=10".into(),
                "/apps/ring".into(),
            ]
        );
    }

    #[test]
    fn argv_is_built_from_the_catalog_never_a_shell() {
        let mut cfg = AgentConfig::new("127.0.0.1:1", "/tmp/x").unwrap();
        cfg.catalog = benchlake_core::bench::Catalog::from_toml(
            r#"
[[benchmark]]
name = "sleep"
kind = "noop"
command = ["sleep", "{seconds}"]
launchers = ["local", "mpirun"]
[[benchmark.param]]
name = "seconds"
type = "float"
default = "1"
"#,
        )
        .unwrap();
        cfg.mpirun = vec!["mpirun".into(), "--oversubscribe".into()];
        let (argv, _) = build_argv(
            &cfg,
            &task(pb::Launcher::Local, &[("seconds", "2")]),
            Path::new("/o"),
        )
        .unwrap();
        assert_eq!(argv, ["sleep", "2"]);
        let (argv, _) =
            build_argv(&cfg, &task(pb::Launcher::Mpirun, &[]), Path::new("/o")).unwrap();
        assert_eq!(
            argv,
            [
                "mpirun",
                "--oversubscribe",
                "-np",
                "2",
                "--host",
                "n1:1,n2:1",
                "sleep",
                "1"
            ]
        );
        let e = build_argv(
            &cfg,
            &task(pb::Launcher::Local, &[("seconds", "1; rm -rf /")]),
            Path::new("/o"),
        )
        .unwrap_err();
        assert!(e.contains("params.seconds"), "{e}");
        let mut t = task(pb::Launcher::Local, &[]);
        t.benchmark = "evil".into();
        assert!(
            build_argv(&cfg, &t, Path::new("/o"))
                .unwrap_err()
                .contains("not in this agent's catalog")
        );
    }

    #[test]
    fn a_task_with_an_unknown_launcher_is_refused_not_run_locally() {
        let mut cfg = AgentConfig::new("127.0.0.1:1", "/tmp/x").unwrap();
        cfg.catalog = benchlake_core::bench::Catalog::from_toml(
            r#"
[[benchmark]]
name = "sleep"
kind = "noop"
command = ["sleep", "1"]
launchers = ["mpirun", "local"]
"#,
        )
        .unwrap();
        cfg.mpirun = vec!["mpirun".into()];
        let mut t = task(pb::Launcher::Local, &[]);
        t.launcher = 7;
        let e = build_argv(&cfg, &t, Path::new("/o")).unwrap_err();
        assert!(
            e.contains("unknown launcher value 7") && e.contains("refusing"),
            "{e}"
        );
        assert!(e.contains("known: local, mpirun, srun"), "{e}");
        // UNSPECIFIED is the catalog entry's default (its first launcher).
        t.launcher = pb::Launcher::Unspecified as i32;
        let (argv, _) = build_argv(&cfg, &t, Path::new("/o")).unwrap();
        assert_eq!(argv[0], "mpirun", "{argv:?}");
    }

    #[test]
    fn builtin_netprobe_gets_the_peers_addresses_in_rank_order() {
        let cfg = AgentConfig::new("127.0.0.1:1", "/tmp/x").unwrap();
        let mut t = task(pb::Launcher::Local, &[("num_messages", "7")]);
        t.benchmark = "netprobe".into();
        t.rank = 1;
        t.num_tasks = 2;
        // An advertised address wins; without one the host name is used.
        t.peers[0].address = "10.0.0.5".into();
        let (argv, _) = build_argv(&cfg, &t, Path::new("/o")).unwrap();
        assert_eq!(argv[1], "netprobe");
        for want in [
            "--rank=1",
            "--num-tasks=2",
            "--hosts=10.0.0.5,n2",
            "--run-id=R",
            "--out=/o/pingpong_results_bin.sion",
            "--num-messages=7",
            "--direction=pingpong",
            "--barriers=true",
        ] {
            assert!(argv.iter().any(|a| a == want), "{want} in {argv:?}");
        }
        assert!(!argv.iter().any(|a| a.starts_with("--seed")), "{argv:?}");
        assert!(argv.iter().any(|a| a == "--local-ranks=1"), "{argv:?}");
        assert!(
            !argv.iter().any(|a| a.starts_with("--message-sizes")),
            "{argv:?}"
        );
        // The calibration sweep of one agent (the demo's): two local ranks
        // at three sizes.
        let t = task_named(
            "netprobe",
            &[("local_ranks", "2"), ("message_sizes", "8,64k,1MiB")],
        );
        let (argv, _) = build_argv(&cfg, &t, Path::new("/o")).unwrap();
        for want in ["--local-ranks=2", "--message-sizes=8,64k,1MiB"] {
            assert!(argv.iter().any(|a| a == want), "{want} in {argv:?}");
        }
        for (k, v) in [("local_ranks", "65"), ("message_sizes", "8;rm")] {
            let e =
                build_argv(&cfg, &task_named("netprobe", &[(k, v)]), Path::new("/o")).unwrap_err();
            assert!(e.contains(&format!("params.{k}")), "{e}");
        }
        let e = build_argv(
            &cfg,
            &task_named("netprobe", &[("message_size", "2GiB")]),
            Path::new("/o"),
        )
        .unwrap_err();
        assert!(e.contains("params.message_size"), "{e}");
    }

    fn task_named(bench: &str, params: &[(&str, &str)]) -> pb::TaskAssignment {
        let mut t = task(pb::Launcher::Local, params);
        t.benchmark = bench.into();
        t
    }

    #[test]
    fn shipped_ior_catalog_maps_parameters_to_ior_flags_and_hints() {
        let mut cfg = AgentConfig::new("127.0.0.1:1", "/tmp/x").unwrap();
        cfg.catalog =
            benchlake_core::bench::Catalog::from_toml(include_str!("../catalogs/ior.toml"))
                .unwrap();
        let mut t = task(
            pb::Launcher::Mpirun,
            &[
                ("np", "4"),
                ("block_size", "4m"),
                ("transfer_size", "256k"),
                ("file_per_proc", "true"),
                ("reorder_shift", "1"),
                ("dir", "/lustre/health"),
                ("striping_factor", "4"),
                ("hints", "romio_ds_write=disable"),
                ("check_window", "5"),
            ],
        );
        t.benchmark = "ior".into();
        t.run_id = "R1".into();
        // The test directory lies outside the task directory: only with a scratch root.
        let e = build_argv(&cfg, &t, Path::new("/o")).unwrap_err();
        assert!(e.contains("params.dir: '/lustre/health' is outside"), "{e}");
        cfg.scratch_dir = Some("/lustre".into());
        let (argv, env) = build_argv(&cfg, &t, Path::new("/o")).unwrap();
        let tail: Vec<&str> = argv.iter().skip(5).map(String::as_str).collect();
        assert_eq!(&argv[..5], ["mpirun", "-np", "4", "--host", "n1:2,n2:2"]);
        assert_eq!(
            tail,
            [
                "ior",
                "-a",
                "POSIX",
                "-b",
                "4194304",
                "-t",
                "262144",
                "-s",
                "1",
                "-i",
                "3",
                "-w",
                "-r",
                "-F",
                "-e",
                "-C",
                "-Q",
                "1",
                "-o",
                "/lustre/health/ior.testfile.R1",
                "-O",
                "summaryFormat=JSON",
                "-O",
                "summaryFile=/o/ior-summary.json",
                "-O",
                "saveRankPerformanceDetailsCSV=/o/ior-ranks.csv",
            ]
        );
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            env,
            [
                ("IOR_HINT__MPI__romio_ds_write", "disable"),
                ("IOR_HINT__MPI__striping_factor", "4"),
            ]
        );
        t.benchmark = "mdtest".into();
        t.params = [("items", "10"), ("files_only", "true")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (argv, _) = build_argv(&cfg, &t, Path::new("/o")).unwrap();
        assert_eq!(
            &argv[5..],
            [
                "mdtest",
                "-n",
                "10",
                "-i",
                "3",
                "-u",
                "-F",
                "--saveRankPerformanceDetails=/o/mdtest-ranks.csv"
            ]
        );
        assert_eq!(
            cfg.catalog.get("mdtest").unwrap().stdout.as_deref(),
            Some("mdtest.txt")
        );
    }

    #[test]
    fn the_shipped_osu_entries_run_two_ranks_over_mpirun() {
        let mut cfg = AgentConfig::new("127.0.0.1:1", "/tmp/x").unwrap();
        cfg.catalog =
            benchlake_core::bench::Catalog::from_toml(include_str!("../catalogs/osu.toml"))
                .unwrap();
        for (name, sizes, iters) in [
            ("osu_latency", "0:4194304", "10000"),
            ("osu_bw", "1:4194304", "100"),
            ("osu_bibw", "1:4194304", "100"),
        ] {
            let b = cfg.catalog.get(name).unwrap();
            assert_eq!(b.kind, "osu");
            assert_eq!(b.stdout.as_deref(), Some(format!("{name}.txt").as_str()));
            // Uploaded as the `osu` ingest kind, which has checks.
            assert_eq!(b.outputs[0].format, "osu");
            let mut t = task(pb::Launcher::Mpirun, &[("np", "2")]);
            t.benchmark = name.into();
            let (argv, _) = build_argv(&cfg, &t, Path::new("/o")).unwrap();
            assert_eq!(&argv[..5], ["mpirun", "-np", "2", "--host", "n1:1,n2:1"]);
            assert_eq!(
                &argv[5..],
                [
                    name,
                    "-m",
                    sizes,
                    "-i",
                    iters,
                    "-x",
                    if name == "osu_latency" { "1000" } else { "10" }
                ]
            );
        }
        // Three ranks are refused: the point-to-point tests take two.
        let mut t = task(pb::Launcher::Mpirun, &[("np", "3")]);
        t.benchmark = "osu_bw".into();
        assert!(build_argv(&cfg, &t, Path::new("/o")).is_err());
    }

    #[test]
    fn entries_whose_program_is_missing_are_not_offered() {
        let cat = benchlake_core::bench::Catalog::from_toml(
            r#"
[[benchmark]]
name = "here"
kind = "noop"
command = ["sh", "-c", "true"]
[[benchmark]]
name = "ior"
kind = "io"
command = ["ior-not-installed-here"]
[[benchmark]]
name = "abs"
kind = "io"
command = ["/nonexistent/bin/mdtest"]
[[benchmark]]
name = "self"
kind = "noop"
command = ["{self_exe}", "probe"]
"#,
        )
        .unwrap();
        let (kept, dropped) = crate::runnable_catalog(&cat);
        let names: Vec<&str> = kept.benchmarks.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["here", "self"]);
        assert_eq!(dropped.len(), 2);
        assert!(
            dropped[0].contains("'ior'") && dropped[0].contains("on PATH"),
            "{}",
            dropped[0]
        );
        assert!(
            dropped[1].contains("/nonexistent/bin/mdtest"),
            "{}",
            dropped[1]
        );
        // The built-in catalog is offered whole: `traced` starts with mpirun's `-x`.
        let builtin = crate::builtin_catalog().unwrap();
        let (kept, _) = crate::runnable_catalog(&builtin);
        assert!(kept.benchmarks.iter().any(|b| b.name == "traced"));
    }
}
