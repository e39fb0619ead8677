//! The user commands: runs, schedules, agents, tables (through the coordinator's
//! gRPC API), offline ingest and the probes used by built-in benchmarks.
use benchlake_core::{out, outln};
use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use benchlake_proto::client::{Auth, channel_with};
use benchlake_proto::v1 as pb;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Ch = InterceptedService<Channel, Auth>;

/// How to reach the coordinator.
#[derive(Debug, Clone, Args)]
pub struct Conn {
    /// Coordinator address, `host:port` or `https://host:port`; or a
    /// comma-separated list of the coordinators sharing one state database
    /// (`host1:7700,host2:7700`, all https:// or none): the leader is found
    /// by connecting, and found again when it changes.
    #[arg(long, env = "BENCHLAKE_COORDINATOR", default_value = "127.0.0.1:7700")]
    pub coordinator: String,
    /// User (or admin) token.
    #[arg(long, env = "BENCHLAKE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub tls: Box<crate::opts::ClientTlsArgs>,
    /// TLS settings used instead of `tls` (`benchlake up`'s own clients).
    #[arg(skip)]
    pub client_tls: Option<std::sync::Arc<benchlake_proto::client::ClientTls>>,
}

/// The coordinator address the command's clients were made for, so that an
/// unreachable coordinator is reported with its address ([`unreachable`]).
static CONTACTED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The message for a call the coordinator did not answer (`Unavailable`):
/// which address was tried and where it comes from. None when no client was
/// made.
pub fn unreachable(status: &tonic::Status) -> Option<String> {
    // A coordinator that answers UNAVAILABLE itself (its lake or state store
    // failing) was reached: only a transport failure is "cannot reach".
    let m = status.message();
    let transport = std::error::Error::source(status).is_some()
        || m.contains("connect error")
        || m.contains("transport error")
        || m.contains("error trying to connect");
    if status.code() != tonic::Code::Unavailable || !transport {
        return None;
    }
    let addr = CONTACTED.get()?;
    Some(format!(
        "cannot reach the coordinator at {addr}: {} (is it running and listening there? \
         set --coordinator or BENCHLAKE_COORDINATOR)",
        status.message()
    ))
}

impl Conn {
    fn ch(&self) -> anyhow::Result<(Channel, Auth)> {
        let _ = CONTACTED.set(self.coordinator.clone());
        Ok((
            channel_with(
                &self.coordinator,
                &match &self.client_tls {
                    Some(t) => (**t).clone(),
                    None => self.tls.load()?,
                },
            )
            .map_err(anyhow::Error::msg)?,
            Auth::new(self.token.as_deref()).map_err(anyhow::Error::msg)?,
        ))
    }
    pub fn runs(&self) -> anyhow::Result<pb::run_service_client::RunServiceClient<Ch>> {
        let (c, a) = self.ch()?;
        Ok(pb::run_service_client::RunServiceClient::with_interceptor(
            c, a,
        ))
    }
    pub fn schedules(
        &self,
    ) -> anyhow::Result<pb::schedule_service_client::ScheduleServiceClient<Ch>> {
        let (c, a) = self.ch()?;
        Ok(pb::schedule_service_client::ScheduleServiceClient::with_interceptor(c, a))
    }
    pub fn cluster(&self) -> anyhow::Result<pb::cluster_service_client::ClusterServiceClient<Ch>> {
        let (c, a) = self.ch()?;
        Ok(pb::cluster_service_client::ClusterServiceClient::with_interceptor(c, a))
    }
}

/// A benchmark spec from flags.
#[derive(Debug, Clone, Args)]
pub struct SpecArgs {
    /// Benchmark name from the agents' catalog.
    pub benchmark: String,
    /// Parameters, KEY=VALUE (repeatable).
    #[arg(short = 'p', long = "param")]
    pub params: Vec<String>,
    /// Agents by name (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub agents: Vec<String>,
    /// Required agent labels, KEY=VALUE (repeatable).
    #[arg(long = "label")]
    pub labels: Vec<String>,
    /// Number of agents.
    #[arg(long, default_value_t = 0)]
    pub count: u32,
    /// Launcher: local, mpirun, srun or sbatch (Slurm batch mode) (default: the benchmark's).
    #[arg(long)]
    pub launcher: Option<String>,
    /// Attempts per task.
    #[arg(long, default_value_t = 0)]
    pub max_attempts: u32,
    /// Timeout in seconds (0 = the catalog's).
    #[arg(long, default_value_t = 0)]
    pub timeout: u64,
    #[command(flatten)]
    pub slurm: Box<SlurmArgs>,
}

/// Slurm options of a run with `--launcher srun` or `sbatch` (docs/slurm.md).
#[derive(Debug, Clone, Default, Args)]
pub struct SlurmArgs {
    /// srun, sbatch: number of Slurm nodes (-N).
    #[arg(
        short = 'N',
        long = "nodes",
        default_value_t = 0,
        help_heading = "Slurm (--launcher srun|sbatch)"
    )]
    pub nodes: u32,
    /// srun, sbatch: tasks per node.
    #[arg(
        long,
        default_value_t = 0,
        help_heading = "Slurm (--launcher srun|sbatch)"
    )]
    pub ntasks_per_node: u32,
    /// srun, sbatch: partition.
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub partition: Option<String>,
    /// srun, sbatch: time limit in minutes.
    #[arg(
        long,
        default_value_t = 0,
        help_heading = "Slurm (--launcher srun|sbatch)"
    )]
    pub time_limit: u32,
    /// srun, sbatch: Slurm node names or ranges (comma-separated: n1,n[2-3]); default: Slurm places the tasks.
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub nodelist: Option<String>,
    /// srun, sbatch: account.
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub account: Option<String>,
    /// srun, sbatch: quality of service.
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub qos: Option<String>,
    /// srun, sbatch: reservation.
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub reservation: Option<String>,
    /// srun, sbatch: node features the nodes must have (-C: ib&nvme, a|b).
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub constraint: Option<String>,
    /// sbatch: longest wait in Slurm's queue in seconds before the job is
    /// cancelled (0: one day); the run's timeout counts from its start.
    #[arg(
        long,
        default_value_t = 0,
        help_heading = "Slurm (--launcher srun|sbatch)"
    )]
    pub queue_timeout: u32,
}

impl SlurmArgs {
    /// The protocol message (None when no option is given).
    pub fn to_pb(&self) -> Option<pb::SlurmOptions> {
        benchlake_proto::launcher::slurm_to_pb(&benchlake_core::slurm::SlurmOptions {
            nodes: self.nodes,
            ntasks_per_node: self.ntasks_per_node,
            partition: self.partition.clone().unwrap_or_default(),
            time_limit_min: self.time_limit,
            nodelist: self
                .nodelist
                .as_deref()
                .map(split_nodelist)
                .unwrap_or_default(),
            account: self.account.clone().unwrap_or_default(),
            qos: self.qos.clone().unwrap_or_default(),
            reservation: self.reservation.clone().unwrap_or_default(),
            constraint: self.constraint.clone().unwrap_or_default(),
            queue_timeout_s: self.queue_timeout,
        })
    }
}

/// Splits a Slurm node list at the commas outside brackets
/// (`n1,n[2-3,5]` → `n1`, `n[2-3,5]`).
fn split_nodelist(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0u32;
    for c in s.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                if !cur.trim().is_empty() {
                    out.push(cur.trim().to_string());
                }
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn kv(items: &[String], what: &str) -> anyhow::Result<HashMap<String, String>> {
    items
        .iter()
        .map(|i| {
            i.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.to_string()))
                .with_context(|| format!("{what} '{i}' is not KEY=VALUE"))
        })
        .collect()
}

impl SpecArgs {
    pub fn spec(&self) -> anyhow::Result<pb::BenchmarkSpec> {
        let launcher = match self.launcher.as_deref() {
            None => pb::Launcher::Unspecified as i32,
            Some(o) => match benchlake_proto::launcher::parse_to_pb(o) {
                Some(v) => v,
                None => bail!(
                    "unknown launcher '{o}' ({})",
                    benchlake_core::bench::LauncherKind::known()
                ),
            },
        };
        Ok(pb::BenchmarkSpec {
            benchmark: self.benchmark.clone(),
            params: kv(&self.params, "parameter")?,
            nodes: Some(pb::NodeSelector {
                names: self.agents.clone(),
                labels: kv(&self.labels, "label")?,
                count: self.count,
            }),
            launcher,
            max_attempts: self.max_attempts,
            timeout_s: self.timeout,
            slurm: self.slurm.to_pb(),
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum RunCmd {
    /// Submit a run.
    Submit {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        spec: SpecArgs,
        /// A repeated submit with the same key returns the same run.
        #[arg(long, default_value = "")]
        idempotency_key: String,
        /// A notifier of the coordinator told when the run ends FAILED or
        /// with the verdict FAIL or ERROR (repeatable; docs/notifications.md).
        #[arg(long = "notify", value_name = "NAME")]
        notify: Vec<String>,
        /// Watch it until it ends.
        #[arg(long)]
        watch: bool,
    },
    /// List runs.
    List {
        #[command(flatten)]
        conn: Conn,
        /// Only runs of this schedule (id).
        #[arg(long, default_value = "")]
        schedule: String,
        /// Only runs of this benchmark.
        #[arg(long, default_value = "")]
        benchmark: String,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Show a run with its tasks and jobs.
    Show {
        #[command(flatten)]
        conn: Conn,
        run_id: String,
    },
    /// Follow a run's state changes until it ends.
    Watch {
        #[command(flatten)]
        conn: Conn,
        run_id: String,
    },
    /// Cancel a run.
    Cancel {
        #[command(flatten)]
        conn: Conn,
        run_id: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Re-run only the failed tasks of a run.
    RerunFailed {
        #[command(flatten)]
        conn: Conn,
        run_id: String,
    },
    /// Print the stdout and stderr tails of a run's tasks, with their state,
    /// exit code and failure reason.
    Logs {
        #[command(flatten)]
        conn: Conn,
        run_id: String,
        /// Only this task (its id, or its rank).
        #[arg(long)]
        task: Option<String>,
    },
}

/// A task's exit code as users should read it: only a task whose process
/// ended has one (a queued, running or cancelled task has none, `-`).
fn exit_text(t: &pb::Task) -> String {
    match pb::TaskState::try_from(t.state) {
        Ok(pb::TaskState::Done) => t.exit_code.to_string(),
        Ok(pb::TaskState::Failed) if t.exit_code >= 0 => t.exit_code.to_string(),
        _ => "-".into(),
    }
}

/// The last `n` lines of `text`.
fn last_lines(text: &str, n: usize) -> Vec<&str> {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

pub(crate) fn state_name(v: i32) -> String {
    pb::RunState::try_from(v)
        .map(|s| s.as_str_name().trim_start_matches("RUN_STATE_").to_string())
        .unwrap_or_else(|_| v.to_string())
}
fn task_state(v: i32) -> String {
    pb::TaskState::try_from(v)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("TASK_STATE_")
                .to_string()
        })
        .unwrap_or_else(|_| v.to_string())
}
fn job_state(v: i32) -> String {
    pb::JobState::try_from(v)
        .map(|s| s.as_str_name().trim_start_matches("JOB_STATE_").to_string())
        .unwrap_or_else(|_| v.to_string())
}

/// `ms` as a UTC time that says so (every printed instant names its zone;
/// a schedule's instants are shown in the schedule's zone, [`fmt_ms_in`]).
pub fn fmt_ms(ms: i64) -> String {
    if ms == 0 {
        return "-".into();
    }
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}

fn run_line(r: &pb::Run) -> String {
    format!(
        "{}  {:<10} {:<7} {:<16} {:<23} {}",
        r.run_id,
        state_name(r.state),
        if r.verdict.is_empty() {
            "-"
        } else {
            r.verdict.as_str()
        },
        r.benchmark,
        fmt_ms(r.submitted_at_ms),
        if r.error.is_empty() {
            String::new()
        } else {
            format!("error: {}", r.error)
        }
    )
}

fn json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// A JSON view of protocol messages (prost types are not serde).
fn run_json(r: &pb::Run) -> serde_json::Value {
    serde_json::json!({
        "run_id": r.run_id, "schedule_id": r.schedule_id, "benchmark": r.benchmark, "kind": r.kind,
        "state": state_name(r.state), "params": serde_json::from_str::<serde_json::Value>(&r.params_json).unwrap_or_default(),
        "submitted_at_ms": r.submitted_at_ms, "started_at_ms": r.started_at_ms, "finished_at_ms": r.finished_at_ms,
        "scheduled_for_ms": r.scheduled_for_ms, "agents": r.agents, "error": r.error,
        "verdict": (!r.verdict.is_empty()).then_some(r.verdict.as_str()),
        "queued": r.queued,
        "owner": (!r.owner.is_empty()).then_some(r.owner.as_str()),
    })
}

fn detail_json(d: &pb::RunDetail) -> serde_json::Value {
    serde_json::json!({
        "run": d.run.as_ref().map(run_json),
        "tasks": d.tasks.iter().map(|t| serde_json::json!({
            "task_id": t.task_id, "agent": t.agent, "rank": t.rank, "state": task_state(t.state),
            "attempt": t.attempt, "max_attempts": t.max_attempts, "exit_code": t.exit_code, "error": t.error,
            "progress": t.progress, "slurm_job_id": t.slurm_job_id, "slurm_nodes": t.slurm_nodes,
            "outputs": t.outputs.iter().map(|o| serde_json::json!({"key": o.key, "bytes": o.bytes, "sha256": o.sha256, "format": o.format})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "jobs": d.jobs.iter().map(|j| serde_json::json!({
            "job_id": j.job_id, "kind": j.kind, "state": job_state(j.state), "attempt": j.attempt,
            "error": j.error, "committed_keys": j.committed_keys,
        })).collect::<Vec<_>>(),
        "notifications": d.notifications.iter().map(|n| serde_json::json!({
            "notifier": n.notifier, "state": n.state, "delivery_id": n.delivery_id, "event": n.event,
            "attempts": n.attempts, "last_error": n.last_error,
            "next_attempt_ms": n.next_attempt_ms, "delivered_at_ms": n.delivered_at_ms,
        })).collect::<Vec<_>>(),
        "checks": d.checks.iter().map(crate::run_checks::check_json).collect::<Vec<_>>(),
        "failing_nodes": crate::run_checks::failing_nodes(d),
    })
}

/// A task's Slurm job and what its agent last said (`slurm job 7 on
/// n[1-3]: Slurm job 7 RUNNING on n[1-3]`; sbatch launcher), or its
/// progress message alone; None when there is neither. An ended task's last
/// progress message is stale (`PENDING` of a job that has since failed) and
/// is not shown: its state and error say how it ended.
fn slurm_line(t: &pb::Task) -> Option<String> {
    let ended = matches!(
        task_state(t.state).as_str(),
        "DONE" | "FAILED" | "CANCELLED"
    );
    let said = (!t.progress.is_empty() && !ended).then_some(t.progress.as_str());
    match (t.slurm_job_id.is_empty(), said) {
        (true, None) => None,
        (true, Some(p)) => Some(format!("progress: {p}")),
        (false, said) => {
            let mut s = format!("slurm job {}", t.slurm_job_id);
            if !t.slurm_nodes.is_empty() {
                s.push_str(&format!(" on {}", t.slurm_nodes));
            }
            if let Some(p) = said {
                s.push_str(&format!(": {p}"));
            }
            Some(s)
        }
    }
}

pub fn print_detail(d: &pb::RunDetail) {
    if let Some(r) = &d.run {
        outln!("run        {}", r.run_id);
        outln!("benchmark  {} ({})", r.benchmark, r.kind);
        outln!("state      {}", state_name(r.state));
        outln!(
            "verdict    {}",
            if r.verdict.is_empty() {
                "- (no check ran)"
            } else {
                r.verdict.as_str()
            }
        );
        outln!("params     {}", r.params_json);
        if !r.owner.is_empty() {
            outln!("owner      {}", r.owner);
        }
        outln!(
            "submitted  {}   started {}   finished {}",
            fmt_ms(r.submitted_at_ms),
            fmt_ms(r.started_at_ms),
            fmt_ms(r.finished_at_ms)
        );
        if !r.schedule_id.is_empty() {
            let name = if d.schedule_name.is_empty() {
                "(deleted)"
            } else {
                d.schedule_name.as_str()
            };
            outln!(
                "schedule   {name} ({}) for {}",
                r.schedule_id,
                fmt_ms(r.scheduled_for_ms)
            );
        }
        if !r.error.is_empty() {
            outln!("error      {}", r.error);
        }
        if r.queued {
            outln!("queued     behind the schedule's active run (placed when it has ended)");
        }
    }
    crate::run_checks::print_checks(d);
    outln!("tasks:");
    for t in &d.tasks {
        outln!(
            "  {} rank {:<3} {:<10} {:<9} attempt {}/{} exit {} {}",
            t.task_id,
            t.rank,
            t.agent,
            task_state(t.state),
            t.attempt,
            t.max_attempts,
            exit_text(t),
            t.error
        );
        if let Some(s) = slurm_line(t) {
            outln!("      {s}");
        }
        // A failed task's own words: the cause is usually on its stderr.
        if pb::TaskState::try_from(t.state) == Ok(pb::TaskState::Failed)
            && !t.stderr_tail.trim().is_empty()
        {
            outln!(
                "      stderr (last lines; all: benchlake run logs {}):",
                t.run_id
            );
            for l in last_lines(&t.stderr_tail, 8) {
                outln!("      | {l}");
            }
        }
        for o in &t.outputs {
            outln!(
                "      {} ({} bytes, {}, sha256 {})",
                o.key,
                o.bytes,
                o.format,
                o.sha256.get(..12).unwrap_or("")
            );
        }
    }
    outln!("jobs:");
    for j in &d.jobs {
        outln!(
            "  {} {:<8} {:<9} attempt {} {}",
            j.job_id,
            j.kind,
            job_state(j.state),
            j.attempt,
            j.error
        );
        for k in &j.committed_keys {
            outln!("      {k}");
        }
    }
    if !d.notifications.is_empty() {
        outln!("notifications:");
        for n in &d.notifications {
            let when = match n.state.as_str() {
                "DELIVERED" => format!("at {}", fmt_ms(n.delivered_at_ms)),
                "PENDING" => format!("next {}", fmt_ms(n.next_attempt_ms)),
                _ => String::new(),
            };
            outln!(
                "  {:<16} {:<9} {} attempts {} {} {}",
                n.notifier,
                n.state,
                n.event,
                n.attempts,
                when,
                n.last_error
            );
        }
    }
}

fn settled(d: &pb::RunDetail) -> bool {
    let fin = |s: i32| {
        matches!(
            pb::RunState::try_from(s),
            Ok(pb::RunState::Succeeded | pb::RunState::Failed | pb::RunState::Cancelled)
        )
    };
    d.run.as_ref().is_some_and(|r| fin(r.state))
        && d.jobs.iter().all(|j| {
            matches!(
                pb::JobState::try_from(j.state),
                Ok(pb::JobState::Done | pb::JobState::Failed | pb::JobState::Cancelled)
            )
        })
}

/// Follows a run with a spinner until it has settled; returns its last detail.
pub async fn watch(conn: &Conn, run_id: &str, quiet: bool) -> anyhow::Result<pb::RunDetail> {
    let mut c = conn.runs()?;
    let mut stream = c
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.to_string(),
        })
        .await?
        .into_inner();
    let pb_bar = if quiet || conn.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner()
    };
    pb_bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb_bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let mut last = None;
    while let Some(ev) = stream.message().await? {
        let d = pb::RunDetail {
            run: ev.run.clone(),
            tasks: ev.tasks.clone(),
            jobs: ev.jobs.clone(),
            notifications: Vec::new(),
            checks: Vec::new(),
            schedule_name: String::new(),
        };
        if let Some(r) = &ev.run {
            let tasks_done = ev
                .tasks
                .iter()
                .filter(|t| {
                    matches!(
                        pb::TaskState::try_from(t.state),
                        Ok(pb::TaskState::Done | pb::TaskState::Failed | pb::TaskState::Cancelled)
                    )
                })
                .count();
            let jobs_done = ev
                .jobs
                .iter()
                .filter(|j| {
                    matches!(
                        pb::JobState::try_from(j.state),
                        Ok(pb::JobState::Done | pb::JobState::Failed | pb::JobState::Cancelled)
                    )
                })
                .count();
            let msg = format!(
                "{} {}  tasks {}/{}  jobs {}/{}",
                r.run_id,
                state_name(r.state),
                tasks_done,
                ev.tasks.len(),
                jobs_done,
                ev.jobs.len()
            );
            if !quiet && !conn.json {
                pb_bar.println(format!(
                    "{} {}",
                    chrono::Local::now().format("%H:%M:%S"),
                    msg
                ));
            }
            pb_bar.set_message(msg);
        }
        let done = settled(&d);
        last = Some(d);
        if done {
            break;
        }
    }
    pb_bar.finish_and_clear();
    let last = last.context("the watch stream ended without an event")?;
    // The final word comes from GetRun: it adds the run's checks and
    // notifications, which the watch stream does not carry. The coordinator
    // reads committed checks files just after their commit, so a run that
    // committed some is asked again briefly until its verdict shows.
    let wrote_checks = last.jobs.iter().any(|j| {
        j.committed_keys
            .iter()
            .any(|k| k.starts_with("tables/checks/") || k.starts_with("tables/node_health/"))
    });
    let mut best = last;
    for _ in 0..20 {
        match c
            .get_run(pb::GetRunRequest {
                run_id: run_id.to_string(),
            })
            .await
        {
            Ok(d) => best = d.into_inner(),
            Err(_) => break,
        }
        if !wrote_checks || !best.checks.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(best)
}

pub async fn run_cmd(c: RunCmd) -> anyhow::Result<()> {
    match c {
        RunCmd::Submit {
            conn,
            spec,
            idempotency_key,
            notify,
            watch: w,
        } => {
            let run = conn
                .runs()?
                .submit_run(pb::SubmitRunRequest {
                    spec: Some(spec.spec()?),
                    idempotency_key,
                    notify,
                })
                .await?
                .into_inner();
            if conn.json && !w {
                return json(&run_json(&run));
            }
            outln!("{}", run_line(&run));
            if w {
                let d = watch(&conn, &run.run_id, false).await?;
                if conn.json {
                    return json(&detail_json(&d));
                }
                print_detail(&d);
                if d.run.as_ref().map(|r| r.state) != Some(pb::RunState::Succeeded as i32) {
                    bail!("run {} did not succeed", run.run_id);
                }
            }
        }
        RunCmd::List {
            conn,
            schedule,
            benchmark,
            limit,
        } => {
            let runs = conn
                .runs()?
                .list_runs(pb::ListRunsRequest {
                    schedule_id: schedule,
                    state: 0,
                    limit,
                    benchmark,
                })
                .await?
                .into_inner()
                .runs;
            if conn.json {
                return json(&runs.iter().map(run_json).collect::<Vec<_>>());
            }
            for r in &runs {
                outln!("{}", run_line(r));
            }
        }
        RunCmd::Show { conn, run_id } => {
            let d = conn
                .runs()?
                .get_run(pb::GetRunRequest { run_id })
                .await?
                .into_inner();
            if conn.json {
                return json(&detail_json(&d));
            }
            print_detail(&d);
        }
        RunCmd::Watch { conn, run_id } => {
            let d = watch(&conn, &run_id, false).await?;
            if conn.json {
                return json(&detail_json(&d));
            }
            print_detail(&d);
        }
        RunCmd::Cancel {
            conn,
            run_id,
            reason,
        } => {
            let r = conn
                .runs()?
                .cancel_run(pb::CancelRunRequest { run_id, reason })
                .await?
                .into_inner();
            outln!("{}", run_line(&r));
        }
        RunCmd::Logs { conn, run_id, task } => {
            let d = conn
                .runs()?
                .get_run(pb::GetRunRequest {
                    run_id: run_id.clone(),
                })
                .await?
                .into_inner();
            let tasks: Vec<&pb::Task> = d
                .tasks
                .iter()
                .filter(|t| {
                    task.as_deref()
                        .is_none_or(|w| t.task_id == w || t.rank.to_string() == w)
                })
                .collect();
            if let Some(w) = &task
                && tasks.is_empty()
            {
                bail!("run {run_id} has no task '{w}' (give a task id or a rank)");
            }
            if conn.json {
                return json(
                    &tasks
                        .iter()
                        .map(|t| {
                            serde_json::json!({
                                "task_id": t.task_id, "rank": t.rank, "agent": t.agent,
                                "state": task_state(t.state), "attempt": t.attempt,
                                "exit_code": (exit_text(t) != "-").then_some(t.exit_code),
                                "error": t.error, "stdout_tail": t.stdout_tail,
                                "stderr_tail": t.stderr_tail, "progress": t.progress,
                                "slurm_job_id": t.slurm_job_id, "slurm_nodes": t.slurm_nodes,
                            })
                        })
                        .collect::<Vec<_>>(),
                );
            }
            for t in tasks {
                outln!(
                    "== task {} rank {} on {}: {}, attempt {}/{}, exit {}",
                    t.task_id,
                    t.rank,
                    t.agent,
                    task_state(t.state),
                    t.attempt,
                    t.max_attempts,
                    exit_text(t)
                );
                if !t.error.is_empty() {
                    outln!("reason: {}", t.error);
                }
                if let Some(s) = slurm_line(t) {
                    outln!("{s}");
                }
                for (name, tail) in [("stdout", &t.stdout_tail), ("stderr", &t.stderr_tail)] {
                    if tail.is_empty() {
                        outln!("-- {name}: (empty)");
                    } else {
                        outln!("-- {name} (last {} bytes):", tail.len());
                        outln!("{}", tail.trim_end());
                    }
                }
            }
        }
        RunCmd::RerunFailed { conn, run_id } => {
            let r = conn
                .runs()?
                .rerun_failed(pb::RerunFailedRequest { run_id })
                .await?
                .into_inner();
            outln!("{}", run_line(&r));
        }
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCmd {
    /// Create a schedule.
    Create {
        #[command(flatten)]
        conn: Conn,
        /// Schedule name (unique).
        name: String,
        /// Cron expression: "minute hour day-of-month month day-of-week" (or 6 fields with seconds first).
        #[arg(long)]
        cron: String,
        /// IANA time zone of the cron expression.
        #[arg(long, default_value = "UTC")]
        tz: String,
        /// What to do with instants missed while the coordinator was down: none, latest or all.
        #[arg(long, default_value = "latest")]
        catch_up: String,
        /// Cap for --catch-up all.
        #[arg(long, default_value_t = 0)]
        max_catch_up: u32,
        /// Allow a new run while the previous one is active (backfilled
        /// runs then start together instead of one after another).
        #[arg(long)]
        allow_overlap: bool,
        /// What to do with the Slurm nodes the node checks of its runs find
        /// failing: `off`, `dry-run` (log what would be done) or `on` (drain
        /// them; resume the ones benchlake drained once a later run passes;
        /// docs/slurm.md).
        #[arg(long, value_enum, default_value_t = DrainFailing::Off)]
        drain_failing: DrainFailing,
        /// A notifier of the coordinator (`--webhook NAME=URL` there) told when
        /// a run ends FAILED or with the verdict FAIL or ERROR (repeatable).
        #[arg(long = "notify", value_name = "NAME")]
        notify: Vec<String>,
        #[command(flatten)]
        spec: SpecArgs,
    },
    /// List schedules.
    List {
        #[command(flatten)]
        conn: Conn,
    },
    /// One schedule: its spec, cron and zone, the next instants in its zone,
    /// its last runs with their verdicts, notify targets and drain mode.
    Show {
        #[command(flatten)]
        conn: Conn,
        /// Schedule name or id.
        schedule: String,
        /// How many next instants and last runs to show.
        #[arg(long, default_value_t = 5)]
        count: u32,
    },
    /// Change a schedule in place (same id, so its runs stay its history):
    /// cron, zone, parameters, notify targets, drain mode; what is not given
    /// stays as it is.
    Edit {
        #[command(flatten)]
        conn: Conn,
        /// Schedule name or id.
        schedule: String,
        /// New cron expression.
        #[arg(long)]
        cron: Option<String>,
        /// New IANA time zone.
        #[arg(long)]
        tz: Option<String>,
        /// Set a parameter, KEY=VALUE (repeatable).
        #[arg(short = 'p', long = "param")]
        params: Vec<String>,
        /// Remove a parameter, back to the catalog's default (repeatable).
        #[arg(long = "unset-param")]
        unset_params: Vec<String>,
        /// Replace the notify targets with these (repeatable).
        #[arg(long)]
        notify: Vec<String>,
        /// Remove every notify target of the schedule.
        #[arg(long, conflicts_with = "notify")]
        no_notify: bool,
        /// New drain mode: off, dry-run or on (dry-run and on need an admin).
        #[arg(long, value_enum)]
        drain_failing: Option<DrainFailing>,
    },
    /// Pause a schedule.
    Pause {
        #[command(flatten)]
        conn: Conn,
        schedule: String,
    },
    /// Resume a paused schedule (instants missed while paused are skipped).
    Resume {
        #[command(flatten)]
        conn: Conn,
        schedule: String,
    },
    /// Delete a schedule (its runs stay).
    Delete {
        #[command(flatten)]
        conn: Conn,
        schedule: String,
    },
    /// Fire a schedule now.
    Trigger {
        #[command(flatten)]
        conn: Conn,
        schedule: String,
    },
    /// One run per cron instant in [FROM, TO) (RFC 3339 or YYYY-MM-DD, UTC).
    /// Unless the schedule allows overlap, the runs queue (PENDING) and run
    /// one after another in date order.
    Backfill {
        #[command(flatten)]
        conn: Conn,
        schedule: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        #[arg(long, default_value_t = 100)]
        max_runs: u32,
    },
}

fn parse_time(s: &str) -> anyhow::Result<i64> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    let d = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .with_context(|| format!("'{s}' is neither RFC 3339 nor YYYY-MM-DD"))?;
    Ok(d.and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc().timestamp_millis())
        .unwrap_or(0))
}

/// `schedule create --drain-failing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DrainFailing {
    Off,
    DryRun,
    On,
}

/// A schedule's node action as `schedule create --drain-failing` takes it.
pub(crate) fn node_action_name(v: i32) -> &'static str {
    match pb::NodeAction::try_from(v) {
        Ok(pb::NodeAction::Drain) => "on",
        Ok(pb::NodeAction::DryRun) => "dry-run",
        _ => "off",
    }
}

/// One schedule as a line: [`schedule_line_base`] and its node action.
fn schedule_line(s: &pb::Schedule) -> String {
    match node_action_name(s.node_action) {
        "off" => schedule_line_base(s),
        a => format!("{}  drain-failing {a}", schedule_line_base(s)),
    }
}

fn schedule_line_base(s: &pb::Schedule) -> String {
    format!(
        "{}  {:<20} {:<14} {:<16} {:<16} {:<7} next {}{}",
        s.schedule_id,
        s.name,
        s.spec.as_ref().map(|x| x.benchmark.as_str()).unwrap_or("-"),
        s.cron,
        s.time_zone,
        pb::CatchUp::try_from(s.catch_up)
            .map(|c| c
                .as_str_name()
                .trim_start_matches("CATCH_UP_")
                .to_lowercase())
            .unwrap_or_default(),
        fmt_ms_in(s.next_fire_ms, &s.time_zone),
        if s.paused { "  (paused)" } else { "" }
    ) + &if s.last_run_id.is_empty() {
        "  last -".to_string()
    } else {
        format!(
            "  last {} {}",
            state_name(s.last_run_state),
            if s.last_verdict.is_empty() {
                "-"
            } else {
                &s.last_verdict
            }
        )
    } + &if s.notify.is_empty() {
        String::new()
    } else {
        format!("  notify {}", s.notify.join(","))
    }
}

/// `ms` in the IANA zone `tz` with the zone's abbreviation (UTC when the zone
/// is unknown, labelled so).
pub(crate) fn fmt_ms_in(ms: i64, tz: &str) -> String {
    if ms == 0 {
        return "-".into();
    }
    let Some(t) = chrono::DateTime::from_timestamp_millis(ms) else {
        return ms.to_string();
    };
    match tz.parse::<chrono_tz::Tz>() {
        Ok(z) => t
            .with_timezone(&z)
            .format("%Y-%m-%d %H:%M:%S %Z")
            .to_string(),
        Err(_) => t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    }
}

pub(crate) fn schedule_json(s: &pb::Schedule) -> serde_json::Value {
    let ts = |ms: i64| {
        (ms != 0)
            .then(|| chrono::DateTime::from_timestamp_millis(ms).map(|t| t.to_rfc3339()))
            .flatten()
    };
    serde_json::json!({
        "schedule_id": s.schedule_id, "name": s.name, "cron": s.cron, "time_zone": s.time_zone,
        "catch_up": pb::CatchUp::try_from(s.catch_up)
            .map(|c| c.as_str_name().trim_start_matches("CATCH_UP_").to_lowercase())
            .unwrap_or_default(),
        "max_catch_up": s.max_catch_up, "allow_overlap": s.allow_overlap, "paused": s.paused,
        "benchmark": s.spec.as_ref().map(|p| p.benchmark.clone()),
        "next_fire": ts(s.next_fire_ms), "next_fire_local": fmt_ms_in(s.next_fire_ms, &s.time_zone),
        "last_fire": ts(s.last_fire_ms), "created_at": ts(s.created_at_ms),
        "notify": s.notify,
        "drain_failing": node_action_name(s.node_action),
        "owner": (!s.owner.is_empty()).then_some(s.owner.as_str()),
        "last_run_id": (!s.last_run_id.is_empty()).then_some(s.last_run_id.as_str()),
        "last_run_state": (!s.last_run_id.is_empty()).then(|| state_name(s.last_run_state)),
        "last_verdict": (!s.last_verdict.is_empty()).then_some(s.last_verdict.as_str()),
    })
}

/// The schedule named `which` or with that id (None: no such schedule).
pub(crate) async fn find_schedule(
    conn: &Conn,
    which: &str,
) -> anyhow::Result<Option<pb::Schedule>> {
    Ok(conn
        .schedules()?
        .list_schedules(pb::ListSchedulesRequest {})
        .await?
        .into_inner()
        .schedules
        .into_iter()
        .find(|s| s.schedule_id == which || s.name == which))
}

/// Prints one schedule as a line, or as JSON with `--json`.
fn print_schedule(conn: &Conn, s: &pb::Schedule) -> anyhow::Result<()> {
    if conn.json {
        json(&schedule_json(s))
    } else {
        outln!("{}", schedule_line(s));
        Ok(())
    }
}

pub async fn schedule_cmd(c: ScheduleCmd) -> anyhow::Result<()> {
    match c {
        ScheduleCmd::Create {
            conn,
            drain_failing,
            name,
            cron,
            tz,
            catch_up,
            max_catch_up,
            allow_overlap,
            notify,
            spec,
        } => {
            // The coordinator checks again (with its clock for "never fires").
            benchlake_coordinator::cron::normalize(&cron)
                .map_err(|e| anyhow::anyhow!("--cron: {e}"))?;
            let catch_up = match catch_up.as_str() {
                "none" => pb::CatchUp::None,
                "latest" => pb::CatchUp::Latest,
                "all" => pb::CatchUp::All,
                o => bail!("--catch-up '{o}': use none, latest or all"),
            };
            let node_action = match drain_failing {
                DrainFailing::On => pb::NodeAction::Drain,
                DrainFailing::DryRun => pb::NodeAction::DryRun,
                DrainFailing::Off => pb::NodeAction::Off,
            };
            let s = conn
                .schedules()?
                .create_schedule(pb::CreateScheduleRequest {
                    schedule: Some(pb::Schedule {
                        name,
                        cron,
                        time_zone: tz,
                        catch_up: catch_up as i32,
                        max_catch_up,
                        allow_overlap,
                        spec: Some(spec.spec()?),
                        node_action: node_action as i32,
                        notify,
                        ..Default::default()
                    }),
                })
                .await?
                .into_inner();
            print_schedule(&conn, &s)?;
        }
        ScheduleCmd::List { conn } => {
            let all = conn
                .schedules()?
                .list_schedules(pb::ListSchedulesRequest {})
                .await?
                .into_inner()
                .schedules;
            if conn.json {
                return json(&all.iter().map(schedule_json).collect::<Vec<_>>());
            }
            for s in all {
                outln!("{}", schedule_line(&s));
            }
        }
        ScheduleCmd::Show {
            conn,
            schedule,
            count,
        } => crate::schedule_show::show(&conn, &schedule, count).await?,
        ScheduleCmd::Edit {
            conn,
            schedule,
            cron,
            tz,
            params,
            unset_params,
            notify,
            no_notify,
            drain_failing,
        } => {
            if let Some(c) = &cron {
                benchlake_coordinator::cron::normalize(c)
                    .map_err(|e| anyhow::anyhow!("--cron: {e}"))?;
            }
            let node_action = match drain_failing {
                None => pb::NodeAction::Unspecified,
                Some(DrainFailing::On) => pb::NodeAction::Drain,
                Some(DrainFailing::DryRun) => pb::NodeAction::DryRun,
                Some(DrainFailing::Off) => pb::NodeAction::Off,
            };
            let s = conn
                .schedules()?
                .update_schedule(pb::UpdateScheduleRequest {
                    schedule_id: schedule,
                    cron,
                    time_zone: tz,
                    set_params: kv(&params, "--param")?,
                    unset_params,
                    replace_notify: no_notify || !notify.is_empty(),
                    notify,
                    node_action: node_action as i32,
                })
                .await?
                .into_inner();
            print_schedule(&conn, &s)?;
        }
        ScheduleCmd::Pause { conn, schedule } => {
            let s = conn
                .schedules()?
                .pause_schedule(pb::PauseScheduleRequest {
                    schedule_id: schedule,
                    paused: true,
                })
                .await?
                .into_inner();
            print_schedule(&conn, &s)?;
        }
        ScheduleCmd::Resume { conn, schedule } => {
            let s = conn
                .schedules()?
                .pause_schedule(pb::PauseScheduleRequest {
                    schedule_id: schedule,
                    paused: false,
                })
                .await?
                .into_inner();
            print_schedule(&conn, &s)?;
        }
        ScheduleCmd::Delete { conn, schedule } => {
            conn.schedules()?
                .delete_schedule(pb::DeleteScheduleRequest {
                    schedule_id: schedule.clone(),
                })
                .await?;
            if conn.json {
                return json(&serde_json::json!({ "deleted": schedule }));
            }
            outln!("deleted {schedule}");
        }
        ScheduleCmd::Trigger { conn, schedule } => {
            let r = conn
                .schedules()?
                .trigger_schedule(pb::TriggerScheduleRequest {
                    schedule_id: schedule.clone(),
                })
                .await?
                .into_inner();
            // A paused schedule runs when triggered by hand, but its user should
            // know it still fires on nothing on its own.
            let paused = find_schedule(&conn, &schedule).await?.filter(|s| s.paused);
            if let Some(s) = &paused {
                eprintln!(
                    "note: schedule '{}' is paused: this run was started by hand; it fires on its own again after `benchlake schedule resume {}`",
                    s.name, s.name
                );
            }
            if conn.json {
                let mut v = run_json(&r);
                v["schedule_paused"] = serde_json::Value::Bool(paused.is_some());
                return json(&v);
            }
            outln!("{}", run_line(&r));
        }
        ScheduleCmd::Backfill {
            conn,
            schedule,
            from,
            to,
            max_runs,
        } => {
            let runs = conn
                .schedules()?
                .backfill(pb::BackfillRequest {
                    schedule_id: schedule,
                    from_ms: parse_time(&from)?,
                    to_ms: parse_time(&to)?,
                    max_runs,
                })
                .await?
                .into_inner()
                .runs;
            if conn.json {
                return json(&runs.iter().map(run_json).collect::<Vec<_>>());
            }
            for r in &runs {
                outln!("{}", run_line(r));
            }
            outln!("{} run(s) created", runs.len());
        }
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum AgentsCmd {
    /// List agents.
    List {
        #[command(flatten)]
        conn: Conn,
    },
    /// Stop giving new tasks to an agent (admin).
    Drain {
        #[command(flatten)]
        conn: Conn,
        name: String,
        /// Reverse a drain.
        #[arg(long)]
        undrain: bool,
    },
}

pub async fn agents_cmd(c: AgentsCmd) -> anyhow::Result<()> {
    match c {
        AgentsCmd::List { conn } => {
            let agents = conn
                .cluster()?
                .list_agents(pb::ListAgentsRequest {})
                .await?
                .into_inner()
                .agents;
            if conn.json {
                return json(&agents
                    .iter()
                    .map(|a| serde_json::json!({"name": a.name, "state": a.state, "hostname": a.hostname, "cores": a.cores,
                        "memory_bytes": a.memory_bytes, "labels": a.labels, "benchmarks": a.benchmarks,
                        "running_tasks": a.running_tasks, "last_heartbeat_ms": a.last_heartbeat_ms,
                        "refused": a.refused.iter().map(|r| serde_json::json!({"name": r.name, "reason": r.reason})).collect::<Vec<_>>()}))
                    .collect::<Vec<_>>());
            }
            for a in agents {
                outln!(
                    "{:<20} {:<9} {:<20} {:>3} cores {:>7.1} GiB  running {}  last seen {}  [{}]",
                    a.name,
                    a.state,
                    a.hostname,
                    a.cores,
                    a.memory_bytes as f64 / (1u64 << 30) as f64,
                    a.running_tasks,
                    fmt_ms(a.last_heartbeat_ms),
                    a.benchmarks.join(", ")
                );
                // What the agent will not run, and why (it is never placed there).
                for r in &a.refused {
                    outln!("  refuses {}: {}", r.name, r.reason);
                }
            }
        }
        AgentsCmd::Drain {
            conn,
            name,
            undrain,
        } => {
            let a = conn
                .cluster()?
                .drain_agent(pb::DrainAgentRequest { name, undrain })
                .await?
                .into_inner();
            if conn.json {
                return json(&serde_json::json!({ "name": a.name, "state": a.state }));
            }
            outln!("{} {}", a.name, a.state);
        }
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum TablesCmd {
    /// The tables with their files, rows and sizes.
    List {
        #[command(flatten)]
        conn: Conn,
    },
    /// Print docs/tables.md (generated from the catalog).
    Docs,
}

pub async fn tables_cmd(c: TablesCmd) -> anyhow::Result<()> {
    match c {
        TablesCmd::Docs => out!("{}", benchlake_core::catalog::markdown()),
        TablesCmd::List { conn } => {
            let r = conn
                .cluster()?
                .list_tables(pb::ListTablesRequest {})
                .await?
                .into_inner();
            if conn.json {
                return json(&r
                    .tables
                    .iter()
                    .map(|t| serde_json::json!({"name": t.name, "files": t.files, "rows": t.rows, "bytes": t.bytes, "columns": t.columns}))
                    .collect::<Vec<_>>());
            }
            outln!("lake: {}", r.lake_root);
            for t in r.tables {
                outln!(
                    "{:<22} {:>6} files {:>12} rows {:>12} bytes",
                    t.name,
                    t.files,
                    t.rows,
                    t.bytes
                );
            }
        }
    }
    Ok(())
}

/// `benchlake ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
    /// Ingest kind (see --list).
    #[arg(required_unless_present = "list")]
    pub kind: Option<String>,
    /// Input files or directories (directories are read recursively).
    pub paths: Vec<PathBuf>,
    /// Where the lake layout is written: a directory, file:///dir or
    /// s3://bucket[/prefix] (with the --s3-* settings).
    #[arg(long, required_unless_present = "list")]
    pub out: Option<String>,
    #[command(flatten)]
    pub s3: crate::opts::S3Args,
    /// Run id of the rows (default: a new id).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Date partition (default: today, UTC).
    #[arg(long)]
    pub date: Option<String>,
    /// List the known kinds.
    #[arg(long)]
    pub list: bool,
}

fn expand(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let md = std::fs::metadata(p).with_context(|| format!("{}", p.display()))?;
        if md.is_dir() {
            expand_dir(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// The files under directory `dir`, recursively, in name order. An entry's
/// type comes from the directory listing (no stat per file); symbolic links
/// are followed as before.
fn expand_dir(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<(PathBuf, bool)> = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let Ok(e) = e else { continue };
        let path = e.path();
        let is_dir = match e.file_type() {
            Ok(t) if !t.is_symlink() => t.is_dir(),
            _ => std::fs::metadata(&path)
                .with_context(|| format!("{}", path.display()))?
                .is_dir(),
        };
        entries.push((path, is_dir));
    }
    entries.sort();
    for (path, is_dir) in entries {
        if is_dir {
            expand_dir(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

pub async fn ingest(a: IngestArgs) -> anyhow::Result<()> {
    if a.list {
        for (k, d) in benchlake_formats::kinds() {
            outln!("{k:<12} {d}");
        }
        return Ok(());
    }
    let (Some(kind), Some(out)) = (a.kind, a.out) else {
        bail!("give KIND, PATHS and --out");
    };
    if a.paths.is_empty() {
        bail!("no input paths");
    }
    // The counts ingest skips unrelated files (logs, COMMANDS.txt) found inside
    // the directories it is given, but a file named on the command line is meant
    // to be read: one that is not a profiler file is an error (docs/counts.md).
    if kind == "counts" {
        for p in a.paths.iter().filter(|p| p.is_file()) {
            if benchlake_formats::counts::classify(p).is_none() {
                return Err(benchlake_formats::counts::tables::not_a_profiler_file(
                    &benchlake_formats::InputFile::from_path(p),
                )
                .into());
            }
        }
    }
    let files = expand(&a.paths)?;
    benchlake_core::mem::keep_heap_headroom_for_many_files(files.len());
    let inputs: Vec<benchlake_formats::InputFile> = files
        .iter()
        .map(benchlake_formats::InputFile::from_path)
        .collect();
    let run_id = a.run_id.unwrap_or_else(benchlake_core::ids::new_id);
    benchlake_core::ids::validate_id("run_id", &run_id)?;
    let date = a
        .date
        .unwrap_or_else(|| chrono::Utc::now().format("%Y-%m-%d").to_string());
    let started = std::time::Instant::now();
    let lake = benchlake_core::lake::Lake::open(&a.s3.store_at(&out))?;
    // A large table of a local lake is written to a temporary file in the
    // lake's directory and renamed into place (no buffer the size of the
    // file); one left by a killed ingest is named `.benchlake-*.parquet.tmp`.
    let spill = match lake.local_dir() {
        Some(d) => {
            std::fs::create_dir_all(d)
                .with_context(|| format!("cannot create the lake directory {}", d.display()))?;
            Some(d.to_path_buf())
        }
        None => None,
    };
    // Read and encode in one go: the LinkTest reader streams its pair times
    // into the Parquet file a row group at a time.
    // The summary tables (`linktest_host_summary`, `io_node_summary`) are
    // derived from the encoded tables as the worker's ingest job derives them
    // (default slow-pair rule: offline ingests have no run parameters).
    let tables = tokio::task::spawn_blocking({
        let run_id = run_id.clone();
        move || -> anyhow::Result<Vec<benchlake_core::lake::EncodedTable>> {
            let mut tables = benchlake_formats::ingest_encoded_in(
                &kind,
                &inputs,
                &benchlake_formats::IngestContext {
                    run_id: run_id.clone(),
                },
                spill.as_deref(),
            )?;
            let summaries = benchlake_analysis::summaries::derive(
                &kind,
                &run_id,
                &tables,
                &[],
                &Default::default(),
            )?;
            for t in &summaries {
                tables.push(benchlake_core::lake::EncodedTable::encode(t)?);
            }
            Ok(tables)
        }
    })
    .await??;
    let job = benchlake_core::ids::new_id();
    let keys = lake
        .write_final_encoded(&tables, &date, &run_id, &job)
        .await?;
    let root = lake.root().trim_end_matches('/').to_string();
    for (t, k) in tables.iter().zip(&keys) {
        outln!("{:<22} {:>10} rows  {root}/{k}", t.table, t.rows);
    }
    eprintln!(
        "{} file(s) in {:.3} s; read them with: duckdb -c \"SELECT * FROM read_parquet('{}/{}', hive_partitioning=true) LIMIT 10\"",
        files.len(),
        started.elapsed().as_secs_f64(),
        root,
        benchlake_core::layout::table_glob(
            tables.first().map(|t| t.table.as_str()).unwrap_or("TABLE")
        )?
    );
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum ProbeCmd {
    /// Replay a labelled synthetic history (nightly hostinfo, pio and
    /// LinkTest runs of a scenario's nodes, with its faults and events)
    /// through the ingest, checks and record jobs, and score the verdicts:
    /// recall, attribution, detection delay, false alarms (docs/verdicts.md).
    Year(crate::year::YearArgs),
    /// Write a synthetic LinkTest 2.1.17 result file (SION) of N ranks, to test
    /// a pipeline at scale: pair times of 2–12 µs, one host 4× slower, and the
    /// pair 1 → N−1 the slowest (317 µs, retested at 4.2 µs). Deterministic per
    /// seed; the ingest bench measures the same generator.
    Linktest {
        /// Number of ranks (2–65536; 4,096 ranks make 285 MB).
        #[arg(long)]
        ranks: usize,
        /// Ranks per host (host names node0000, node0001, …).
        #[arg(long, default_value_t = 48)]
        ranks_per_host: usize,
        /// Seed of the pair times.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Bytes per message: each pair's time gains size / bandwidth (10 GB/s
        /// between hosts, 40 GB/s within one), so files at several sizes
        /// calibrate like a real sweep (`replay calibrate`). Without it, the
        /// file says 1 MiB and its times do not depend on it.
        #[arg(long)]
        message_size: Option<u64>,
        /// The file to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Write this node's facts (kernel, CPU, memory, load) as JSON.
    Host {
        #[arg(long)]
        out: PathBuf,
        /// In a Slurm task, insert the Slurm node name into the file name
        /// (`host.json` → `host-n2.json`), so the tasks of one `srun` on
        /// several nodes sharing a directory write one file each.
        #[arg(long)]
        per_node: bool,
    },
    /// Write a small synthetic alltoallv profiler output (compact count files in
    /// the profiler's format version 9 grammar) of two lead ranks: lead 0 on an
    /// 8-rank communicator (12 calls cycling over a ring, a dense and a
    /// one-to-all pattern) and lead 4 on a 4-rank one (2 dense calls). The
    /// `a2av-demo` benchmark of `benchlake up --demo`.
    Counts {
        #[arg(long)]
        out: PathBuf,
    },
    /// Write a synthetic Dimemas trace (.dim): the 1-D periodic halo of the
    /// reference runs (shared/data/replay/dimemas/tools/synth.py), per rank and
    /// iteration a compute burst, 2 Irecv, 2 Isend and 2 Wait, with an 8-byte
    /// Allreduce every 10 iterations. 1,024 ranks × 1,000 iterations make
    /// 7.3 M records (182 MB), the size `bench/replay_speed.py` replays.
    Dimemas {
        /// Number of ranks (2–65536).
        #[arg(long)]
        ranks: u32,
        /// Iterations (1–1000000).
        #[arg(long, default_value_t = 100)]
        iters: u32,
        /// The file to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Write the same halo as a Bandela trace directory (`bandela.<rank>.txt`,
    /// per iteration a burst, 2 irecv, 2 isend and 4 waits; the Allreduce is a
    /// barrier) and the replaympi input to replay it with
    /// (`DIR/replaympi.input`: one host, 2 µs, 800 MB/s):
    /// `benchlake replay bandela DIR --input DIR/replaympi.input`.
    Bandela {
        /// Number of ranks (2–65536).
        #[arg(long)]
        ranks: u32,
        /// Iterations (1–1000000).
        #[arg(long, default_value_t = 100)]
        iters: u32,
        /// The directory to write (created if needed).
        #[arg(long)]
        out: PathBuf,
    },
}

/// Rank lists as the profiler writes them (`0-3, 5`).
fn rank_list(ids: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j] + 1 == ids[j + 1] {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", ids[i], ids[j])
        } else {
            ids[i].to_string()
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// One block of a compact count file.
fn counts_block(out: &mut String, dt: u64, header: &str, calls: &[usize], m: &[Vec<u64>]) {
    use std::fmt::Write;
    let _ = write!(
        out,
        "# Raw counters\n\nNumber of ranks: {}\nDatatype size: {dt}\nAlltoallv calls {header}\nCount: {} calls - {}\n\n\nBEGINNING DATA\n",
        m.len(),
        calls.len(),
        rank_list(calls)
    );
    // Ranks with identical rows share one row, ordered by their first rank.
    let mut groups: Vec<(&Vec<u64>, Vec<usize>)> = Vec::new();
    for (r, row) in m.iter().enumerate() {
        match groups.iter_mut().find(|g| g.0 == row) {
            Some(g) => g.1.push(r),
            None => groups.push((row, vec![r])),
        }
    }
    for (row, ranks) in groups {
        let _ = write!(out, "Rank(s) {}: ", rank_list(&ranks));
        for c in row {
            let _ = write!(out, "{c} ");
        }
        out.push('\n');
    }
    out.push_str("END DATA\n");
}

/// Writes the demo's compact count files into `dir`.
pub fn write_demo_counts(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let ring = |n: usize| -> Vec<Vec<u64>> {
        (0..n)
            .map(|r| {
                (0..n)
                    .map(|j| if j == (r + 1) % n { 1 + r as u64 } else { 0 })
                    .collect()
            })
            .collect()
    };
    let dense = |n: usize, c: u64| -> Vec<Vec<u64>> { vec![vec![c; n]; n] };
    let one_to_all = |n: usize| -> Vec<Vec<u64>> {
        (0..n)
            .map(|r| {
                (0..n)
                    .map(|j| if r == 0 && j != 0 { 100 } else { 0 })
                    .collect()
            })
            .collect()
    };
    let transpose = |m: &Vec<Vec<u64>>| -> Vec<Vec<u64>> {
        (0..m.len())
            .map(|i| m.iter().map(|row| row[i]).collect())
            .collect()
    };
    let lead0 = [ring(8), dense(8, 10), one_to_all(8)];
    let (mut send0, mut recv0) = (String::new(), String::new());
    for (p, m) in lead0.iter().enumerate() {
        let calls: Vec<usize> = (0..12).filter(|c| c % 3 == p).collect();
        counts_block(&mut send0, 4, "0-11", &calls, m);
        counts_block(&mut recv0, 4, "0-11", &calls, &transpose(m));
    }
    let m = dense(4, 5);
    let (mut send4, mut recv4) = (String::new(), String::new());
    counts_block(&mut send4, 8, "0-13", &[12, 13], &m);
    counts_block(&mut recv4, 8, "0-13", &[12, 13], &transpose(&m));
    for (name, text) in [
        ("send-counters.job0.rank0.txt", send0),
        ("recv-counters.job0.rank0.txt", recv0),
        ("send-counters.job0.rank4.txt", send4),
        ("recv-counters.job0.rank4.txt", recv4),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| p.display().to_string())?;
    }
    Ok(())
}

/// The synthetic halo of `probe dimemas` and `probe bandela`, its size
/// checked.
fn halo(ranks: u32, iters: u32) -> anyhow::Result<benchlake_replay::synth::Halo> {
    if !(2..=65_536).contains(&ranks) {
        bail!("--ranks {ranks}: give 2 to 65536 ranks");
    }
    if !(1..=1_000_000).contains(&iters) {
        bail!("--iters {iters}: give 1 to 1000000 iterations");
    }
    Ok(benchlake_replay::synth::Halo::new(ranks, iters))
}

pub fn probe(c: ProbeCmd) -> anyhow::Result<()> {
    match c {
        ProbeCmd::Linktest {
            ranks,
            ranks_per_host,
            seed,
            message_size,
            out,
        } => {
            if !(2..=65_536).contains(&ranks) {
                bail!("--ranks {ranks}: give 2 to 65536 ranks");
            }
            if ranks_per_host == 0 || ranks_per_host > ranks {
                bail!("--ranks-per-host {ranks_per_host}: give 1 to --ranks ({ranks})");
            }
            let t = std::time::Instant::now();
            let mut run =
                benchlake_formats::linktest::synth::synthetic_run(ranks, ranks_per_host, seed);
            if let Some(b) = message_size {
                if !(1..=1 << 30).contains(&b) {
                    bail!("--message-size {b}: give 1 to 1073741824 bytes");
                }
                run = benchlake_formats::linktest::synth::with_message_size(run, b);
            }
            benchlake_formats::linktest::v2::write_file(
                &run,
                &out,
                &benchlake_formats::sion::SionWriteOptions::default(),
            )
            .with_context(|| format!("writing {}", out.display()))?;
            let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
            outln!(
                "{}: LinkTest 2.1.17, {ranks} ranks on {} hosts, {} pair times, {:.1} MB in {:.2} s",
                out.display(),
                ranks.div_ceil(ranks_per_host),
                ranks * (ranks - 1),
                bytes as f64 / 1e6,
                t.elapsed().as_secs_f64()
            );
        }
        ProbeCmd::Dimemas { ranks, iters, out } => {
            let t = std::time::Instant::now();
            let records = halo(ranks, iters)?
                .write_dim(&out)
                .with_context(|| format!("writing {}", out.display()))?;
            let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
            outln!(
                "{}: Dimemas halo trace, {ranks} ranks, {iters} iterations, {records} records, {:.1} MB in {:.2} s",
                out.display(),
                bytes as f64 / 1e6,
                t.elapsed().as_secs_f64()
            );
        }
        ProbeCmd::Bandela { ranks, iters, out } => {
            let t = std::time::Instant::now();
            let records = halo(ranks, iters)?
                .write_bandela(&out)
                .with_context(|| format!("writing {}", out.display()))?;
            outln!(
                "{}: Bandela halo trace, {ranks} rank files, {iters} iterations, {records} records, input {} in {:.2} s",
                out.display(),
                out.join("replaympi.input").display(),
                t.elapsed().as_secs_f64()
            );
        }
        ProbeCmd::Host { out, per_node } => {
            let f = benchlake_formats::hostinfo::collect();
            let out = match (&f.node, per_node) {
                (Some(node), true) => {
                    let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned());
                    let ext = out.extension().map(|s| s.to_string_lossy().into_owned());
                    let name = match (stem, ext) {
                        (Some(s), Some(e)) => format!("{s}-{node}.{e}"),
                        (Some(s), None) => format!("{s}-{node}"),
                        _ => format!("host-{node}.json"),
                    };
                    out.with_file_name(name)
                }
                _ => out,
            };
            std::fs::write(&out, serde_json::to_string_pretty(&f)?)
                .with_context(|| format!("{}", out.display()))?;
        }
        ProbeCmd::Counts { out } => write_demo_counts(&out)?,
        ProbeCmd::Year(a) => crate::year::run(a)?,
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum AnalyzeCmd {
    /// alltoallv pattern analysis. Offline, of a profiler output directory: the
    /// Go tools' text reports in OUT/reports and the analysis tables in OUT's lake
    /// layout. Through the cluster, of a run id: an analysis run fanned out over
    /// the workers, whose reports are downloaded to OUT.
    Counts {
        /// The profiler output directory, or the id of a run whose `counts`
        /// outputs are analysed through the cluster.
        dir: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Messages of at most this many bytes are small.
        #[arg(long, default_value_t = 200)]
        size_threshold: u64,
        /// Fix the Go tools' quirks instead of reproducing them (see docs/counts.md).
        #[arg(long)]
        no_reference_compat: bool,
        /// Run id of the rows (default: a new id; offline only).
        #[arg(long)]
        run_id: Option<String>,
        /// Split compact pairs larger than this many bytes into parts (block
        /// ranges); per-call files are grouped into parts of about this size.
        #[arg(long)]
        max_part_bytes: Option<u64>,
        /// Threads of an offline analysis (default: the cores available). With
        /// 2 or more the files of a compact pair are read side by side (the
        /// recv file cut at block starts into chunks the threads share), and the
        /// reports are written on their own thread while the tables are built
        /// and written; the outputs are the same whatever the number.
        #[arg(long, env = benchlake_analysis::counts::THREADS_ENV, value_parser = clap::value_parser!(u32).range(1..=1024))]
        threads: Option<u32>,
        #[command(flatten)]
        conn: Conn,
    },
}

pub async fn analyze(c: AnalyzeCmd) -> anyhow::Result<()> {
    match c {
        AnalyzeCmd::Counts {
            dir,
            out,
            size_threshold,
            no_reference_compat,
            run_id,
            max_part_bytes,
            threads,
            conn,
        } => {
            if !dir.exists()
                && let Some(id) = dir.to_str()
                && benchlake_core::ids::validate_id("run_id", id).is_ok()
            {
                let mut options = std::collections::HashMap::new();
                options.insert("size_threshold".to_string(), size_threshold.to_string());
                options.insert(
                    "reference_compat".to_string(),
                    (!no_reference_compat).to_string(),
                );
                if let Some(m) = max_part_bytes {
                    options.insert("max_part_bytes".to_string(), m.to_string());
                }
                return analyze_counts_remote(&conn, id, options, &out).await;
            }
            if !dir.is_dir() {
                anyhow::bail!("{}: neither a directory nor a run id", dir.display());
            }
            let mut opts = benchlake_analysis::counts::Options {
                size_threshold,
                reference_compat: !no_reference_compat,
                ..Default::default()
            };
            if let Some(m) = max_part_bytes {
                opts.max_part_bytes = m.max(1);
            }
            let reports = out.join("reports");
            std::fs::create_dir_all(&reports).with_context(|| reports.display().to_string())?;
            let run_id = run_id.unwrap_or_else(benchlake_core::ids::new_id);
            benchlake_core::ids::validate_id("run_id", &run_id)?;
            let threads =
                threads.map_or_else(benchlake_analysis::counts::default_threads, |n| n as usize);
            let started = std::time::Instant::now();
            let (d, r, rid) = (dir.clone(), reports.clone(), run_id.clone());
            let (tables, reports_thread) =
                tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
                    use benchlake_analysis::counts::{report, tables};
                    let a = std::sync::Arc::new(benchlake_analysis::counts::analyze_input_dir(
                        &d, &opts, threads,
                    )?);
                    if threads < 2 {
                        report::write_all(&a, &r)?;
                        return Ok((tables::tables(&a, &rid)?, None));
                    }
                    // The reports (two of them 117 MB at 1,024 ranks and 5,000
                    // calls) are written while the tables are built and encoded.
                    let shared = a.clone();
                    let h = std::thread::Builder::new()
                        .name("counts-reports".into())
                        .spawn(move || report::write_all(&shared, &r))?;
                    match tables::tables(&a, &rid) {
                        Ok(t) => Ok((t, Some(h))),
                        Err(e) => {
                            let _ = h.join();
                            Err(e.into())
                        }
                    }
                })
                .await??;
            let lake = benchlake_core::lake::Lake::local(&out)?;
            let date = chrono::Utc::now().format("%Y-%m-%d").to_string();
            let written = lake
                .write_final(&tables, &date, &run_id, &benchlake_core::ids::new_id())
                .await;
            if let Some(h) = reports_thread {
                tokio::task::spawn_blocking(move || h.join())
                    .await?
                    .map_err(|_| anyhow::anyhow!("the reports thread panicked"))??;
            }
            let keys = written?;
            for (t, k) in tables.iter().zip(&keys) {
                outln!(
                    "{:<24} {:>10} rows  {}",
                    t.table,
                    t.rows(),
                    out.join(k).display()
                );
            }
            outln!("reports in {}", reports.display());
            eprintln!("analysed in {:.3} s", started.elapsed().as_secs_f64());
        }
    }
    Ok(())
}

/// `benchlake inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A SION file (file 0 of a multi-file set).
    pub file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn inspect(a: InspectArgs) -> anyhow::Result<()> {
    let i = benchlake_formats::linktest::inspect_file(&a.file)?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&i)?);
    } else {
        out!("{}", i.to_text());
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum ReportCmd {
    /// LinkTest report page (SVG and PNG): rank×rank time matrix with host
    /// boundaries, histogram, summary table with the slowest pairs and retests,
    /// host pairs above a threshold, host×host matrix, and the run's checks.
    Linktest(LinktestReportArgs),
}

/// `benchlake report linktest`.
#[derive(Debug, Args)]
pub struct LinktestReportArgs {
    /// A LinkTest SION file (1.x, 2.1.17 or netprobe), or the id of a run whose
    /// linktest tables are in the lake (`--lake`).
    pub target: String,
    /// Output: a `.svg` file (the PNG is written beside it, same name `.png`), or
    /// a directory (created; `linktest-<run id or file name>.svg/.png` in it).
    #[arg(long, default_value = "linktest-report.svg")]
    pub out: PathBuf,
    /// Host pairs whose maximum time is above this many microseconds are listed
    /// (default: 2 × the median pair time).
    #[arg(long, env = "BENCHLAKE_REPORT_THRESHOLD_US")]
    pub threshold_us: Option<f64>,
    /// Rank permutation to draw.
    #[arg(long, default_value_t = 0)]
    pub permutation: usize,
    /// Slowest pairs listed.
    #[arg(long, default_value_t = 10)]
    pub top_pairs: usize,
    /// With a run id holding several LinkTest files: the `source` to draw (default:
    /// the first in sort order).
    #[arg(long)]
    pub source: Option<String>,
    /// Skip the PNG.
    #[arg(long)]
    pub no_png: bool,
    #[command(flatten)]
    pub lake: crate::opts::LakeArgs,
}

pub async fn report(c: ReportCmd) -> anyhow::Result<()> {
    use benchlake_analysis::{linktest_lake, linktest_report as lr};
    match c {
        ReportCmd::Linktest(a) => {
            let path = PathBuf::from(&a.target);
            let (run, name, checks, title) = if path.exists() {
                let run = benchlake_formats::linktest::read_file(&path)?;
                let name = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "file".into());
                (run, name, Vec::new(), format!("{}", path.display()))
            } else {
                benchlake_core::ids::validate_id("run_id", &a.target)
                    .with_context(|| format!("'{}' is neither a file nor a run id", a.target))?;
                if a.lake.lake.is_none() {
                    bail!(
                        "a run id needs the lake: give --lake DIR|s3://bucket (or BENCHLAKE_LAKE)"
                    );
                }
                let lake = benchlake_core::lake::Lake::open(&a.lake.store(""))?;
                let (run, source) =
                    linktest_lake::load_run(&lake, &a.target, a.source.as_deref()).await?;
                let checks = linktest_lake::load_checks(&lake, &a.target).await?;
                (
                    run,
                    a.target.clone(),
                    checks,
                    format!("run {} ({source})", a.target),
                )
            };
            let opts = lr::ReportOptions {
                permutation: a.permutation,
                threshold_s: a.threshold_us.map(|t| t * 1e-6),
                top_pairs: a.top_pairs,
                title,
                ..Default::default()
            };
            let mut summary = lr::summarize(&run, &opts)?;
            summary.checks = checks;
            let svg_path = if a.out.is_dir() || a.out.extension().is_none() {
                std::fs::create_dir_all(&a.out).with_context(|| a.out.display().to_string())?;
                a.out.join(format!("linktest-{name}.svg"))
            } else {
                a.out.clone()
            };
            let svg = lr::render_svg(&summary);
            std::fs::write(&svg_path, &svg).with_context(|| svg_path.display().to_string())?;
            outln!("wrote {}", svg_path.display());
            if !a.no_png {
                let png_path = svg_path.with_extension("png");
                std::fs::write(&png_path, lr::render_png(&svg)?)
                    .with_context(|| png_path.display().to_string())?;
                outln!("wrote {}", png_path.display());
            }
            outln!(
                "{} ranks on {} hosts: min {}, avg {}, max {}; {} host pairs above {}; {} checks ({} not passed)",
                summary.num_tasks,
                summary.hosts.len(),
                lr::fmt::time(summary.min_s),
                lr::fmt::time(summary.avg_s),
                lr::fmt::time(summary.max_s),
                summary.hot_host_pairs.len(),
                lr::fmt::time(summary.threshold_s),
                summary.checks.len(),
                summary.checks.iter().filter(|c| c.status != "PASS").count()
            );
        }
    }
    Ok(())
}

/// `benchlake analyze counts RUN_ID --out DIR`: asks the coordinator for an
/// analysis run (`AnalyzeRun`), follows it with a progress line, then
/// downloads its reports (`DownloadReports`) into `out`.
async fn analyze_counts_remote(
    conn: &Conn,
    run_id: &str,
    options: std::collections::HashMap<String, String>,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    let r = conn
        .runs()?
        .analyze_run(pb::AnalyzeRunRequest {
            run_id: run_id.to_string(),
            analysis: "counts".into(),
            options,
        })
        .await?
        .into_inner();
    eprintln!(
        "analysis run {} of run {run_id} (plan job {})",
        r.run_id,
        r.job_ids.join(", ")
    );
    let d = watch(conn, &r.run_id, false).await?;
    let ok = d.run.as_ref().map(|x| x.state) == Some(pb::RunState::Succeeded as i32);
    if !ok {
        print_detail(&d);
        anyhow::bail!(
            "analysis run {} did not succeed: {}",
            r.run_id,
            d.run.as_ref().map(|x| x.error.clone()).unwrap_or_default()
        );
    }
    let prefix = benchlake_core::layout::reports_rel(&r.run_id, &r.reports_prefix)
        .unwrap_or_default()
        .to_string();
    std::fs::create_dir_all(out).with_context(|| out.display().to_string())?;
    let mut stream = conn
        .runs()?
        .download_reports(pb::DownloadReportsRequest {
            run_id: r.run_id.clone(),
            prefix,
        })
        .await?
        .into_inner();
    let mut files = 0usize;
    let mut bytes = 0u64;
    let mut cur: Option<(String, std::fs::File)> = None;
    while let Some(c) = stream.message().await? {
        use std::io::Write;
        // Names come from the coordinator; keep them plain file names under `out`.
        benchlake_core::layout::validate_name("report", &c.name)?;
        if cur.as_ref().map(|x| x.0.as_str()) != Some(c.name.as_str()) {
            let p = out.join(&c.name);
            let f = std::fs::File::create(&p).with_context(|| p.display().to_string())?;
            cur = Some((c.name.clone(), f));
            files += 1;
        }
        if let Some((_, f)) = cur.as_mut() {
            f.write_all(&c.data)?;
        }
        bytes += c.data.len() as u64;
    }
    outln!(
        "analysis run {}: {files} report files ({bytes} bytes) in {}",
        r.run_id,
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod slurm_args_tests {
    use super::*;

    #[test]
    fn node_lists_split_outside_brackets() {
        assert_eq!(split_nodelist("n1,n[2-3,5], x "), ["n1", "n[2-3,5]", "x"]);
        assert!(split_nodelist("").is_empty());
        assert_eq!(SlurmArgs::default().to_pb(), None);
    }

    #[test]
    fn an_ended_task_shows_no_stale_progress() {
        let mut t = pb::Task {
            slurm_job_id: "7".into(),
            slurm_nodes: "n[1-3]".into(),
            progress: "Slurm job 7 PENDING (Resources)".into(),
            state: pb::TaskState::Running as i32,
            ..Default::default()
        };
        assert_eq!(
            slurm_line(&t).as_deref(),
            Some("slurm job 7 on n[1-3]: Slurm job 7 PENDING (Resources)")
        );
        t.state = pb::TaskState::Failed as i32;
        assert_eq!(slurm_line(&t).as_deref(), Some("slurm job 7 on n[1-3]"));
        t.slurm_job_id.clear();
        assert_eq!(slurm_line(&t), None);
    }
}
