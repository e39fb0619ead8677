//! `benchlake schedule`: create, list, show, change, pause, trigger, backfill
//! and delete schedules.
use super::*;

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
