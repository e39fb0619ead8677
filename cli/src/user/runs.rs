//! `benchlake run`: submit, list, show, watch, cancel and re-run runs.
use super::*;

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

pub(crate) fn run_line(r: &pb::Run) -> String {
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

pub(crate) fn json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// A JSON view of protocol messages (prost types are not serde).
pub(crate) fn run_json(r: &pb::Run) -> serde_json::Value {
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
            "outputs": t.outputs.iter().map(|o| serde_json::json!({"key": o.key, "bytes": o.bytes, "sha256": o.sha256, "format": o.format, "bundle": (!o.bundle.is_empty()).then_some(&o.bundle)})).collect::<Vec<_>>(),
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
pub(crate) fn slurm_line(t: &pb::Task) -> Option<String> {
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
                "      {} ({} bytes, {}, sha256 {}{})",
                o.key,
                o.bytes,
                o.format,
                o.sha256.get(..12).unwrap_or(""),
                if o.bundle.is_empty() {
                    String::new()
                } else {
                    format!(", in {}", o.bundle)
                }
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
