//! The `checks` executor: a run's health verdicts. Queued by the `ingest`
//! executor as a follow-up of every ingest job whose kind declares checks
//! (`benchlake_formats::kinds`: `ior`, `pio`, `mdtest`, `linktest`,
//! `hostinfo`, `osu`, and `bandela` of traced runs), it reads the rows that
//! ingest job committed (the tables the kind's checks declaration names),
//! computes the figures and the verdicts with `benchlake_analysis`
//! (`io_checks`, `linktest_checks`, `osu_checks`; the kind's
//! [`CheckFamily`]) and writes `checks` rows, and the per-node verdicts
//! (`node_checks`: node facts against expected values, each node's I/O
//! bandwidth) as `node_health` rows. The `bandela` ingest of a traced run
//! gets node checks only: each rank's computation against the ranks of
//! other nodes (`traced.rank_time`, from `mpi_trace_ranks` and the tracer's
//! `bandela_stats`).
//!
//! The relative references come from the lake: `runs` maps earlier runs to
//! their schedule; the same figures are recomputed from the tables of the
//! last `window` succeeded runs of the same schedule (newest first by run id,
//! which is a ULID, i.e. creation order), so a change of thresholds applies
//! to the whole history at once. Thresholds are the run's `check_*`
//! parameters (see docs/io.md).
//!
//! Regressions (docs/io.md, "Regressions"): the same history, reaching back
//! `check_changepoint_window` runs and carrying each run's id and logical
//! night (coalesce(logical_at, submitted_at) of its `runs` row), goes through
//! the change-point detector (`benchlake_analysis::regressions`); per node,
//! the previous `node_health` rows of the schedule do. The current run's
//! night is its date partition (its `runs` row is written after its checks).
use std::collections::BTreeMap;

use arrow::array::{Array, RecordBatch, StringArray};
use benchlake_analysis::changepoint::{self, Point};
use benchlake_analysis::io_checks::{self, CheckRow, IoCheckConfig};
use benchlake_analysis::link_checks;
use benchlake_analysis::linktest_checks::{self, SlowPair};
use benchlake_analysis::node_checks::{self, NodeRow};
use benchlake_analysis::osu_checks;
use benchlake_analysis::regressions;
use benchlake_core::jobs::{CHECKS_JOB, ChecksSpec, FollowUp, IngestRunInfo, IngestSpec};
use benchlake_core::lake::{RunRows, TableOutput};
use benchlake_core::layout;
use benchlake_core::verdict;
use benchlake_formats::kinds::{CheckFamily, Checks as KindChecks, FollowUpJob};

use crate::{ExecError, ExecOutput, Executor, JobContext, memo};

/// At most this many earlier `runs` rows are read looking for the schedule's
/// history (bounds the work of a checks job in a lake with many schedules).
pub const MAX_HISTORY_SCAN: usize = 5000;

/// The checks an ingest kind declares (`benchlake_formats::kinds`).
fn checks_of(format: &str) -> Option<KindChecks> {
    benchlake_formats::kinds::get(format).and_then(|k| k.checks)
}

/// The `checks` follow-up of an ingest job (none for formats without checks,
/// or whose checks are not for the run's benchmark kind).
pub fn follow_up(spec: &IngestSpec, info: &IngestRunInfo, ingest_job_id: &str) -> Vec<FollowUp> {
    let declared = benchlake_formats::kinds::get(&spec.format)
        .and_then(|k| k.follow_up(FollowUpJob::Checks))
        .is_some_and(|f| f.applies_to(info.kind.as_deref()));
    if !declared {
        return Vec::new();
    }
    let c = ChecksSpec {
        format: spec.format.clone(),
        ingest_job_id: ingest_job_id.to_string(),
        source: spec.keys.join(" "),
        schedule_id: info.schedule_id.clone(),
        params: info.params.clone(),
        agent: spec.agent.clone(),
        agent_hostname: spec.agent_hostname.clone(),
    };
    match serde_json::to_value(&c) {
        Ok(v) => vec![FollowUp {
            kind: CHECKS_JOB.to_string(),
            spec: v,
            group: None,
            wait_for: None,
        }],
        Err(_) => Vec::new(),
    }
}

type Tables = BTreeMap<&'static str, Vec<RecordBatch>>;

/// The run-level figures of a family's checks from the tables its kind names.
fn figures(
    family: CheckFamily,
    t: &Tables,
    slow: &SlowPair,
) -> Result<BTreeMap<String, f64>, io_checks::IoCheckError> {
    let get = |n: &str| t.get(n).map(Vec::as_slice).unwrap_or(&[]);
    match family {
        CheckFamily::Mdtest => io_checks::mdtest_figures(get("mdtest_summary")),
        CheckFamily::Linktest => {
            linktest_checks::figures(get("linktest_runs"), get("linktest_timings"), slow)
        }
        CheckFamily::Osu => osu_checks::figures(get(benchlake_formats::osu::TABLE)),
        CheckFamily::Io | CheckFamily::NodeFacts | CheckFamily::TraceRankTime => {
            io_checks::figures_with_ranks(get("io_results"), get("io_task_times"))
        }
    }
}

/// Batches of `table` for one run (its date partition); only the parts of
/// `job` when given.
fn read_run_table(
    ctx: &JobContext,
    table: &str,
    date: &str,
    run_id: &str,
    job: Option<&str>,
) -> Result<Vec<RecordBatch>, ExecError> {
    let mut q = RunRows::new(table, run_id).on(date);
    q.job_id = job;
    Ok(ctx.block_on(ctx.lake.read_run_rows(q))?)
}

/// The `status` of every `checks` and `node_health` row of `run_id` (its
/// date partition): what the run's overall verdict is made of (a node that
/// fails makes the run FAIL). Empty when no check ran.
pub fn run_statuses(ctx: &JobContext, run_id: &str) -> Result<Vec<String>, ExecError> {
    let mut out = Vec::new();
    let mut batches = read_run_table(ctx, "checks", &ctx.run_date, run_id, None)?;
    batches.extend(read_run_table(
        ctx,
        "node_health",
        &ctx.run_date,
        run_id,
        None,
    )?);
    for b in batches {
        let col = b
            .schema()
            .index_of("status")
            .ok()
            .and_then(|i| b.column(i).as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| {
                ExecError::Permanent(format!("checks of run {run_id}: no text column 'status'"))
            })?;
        out.extend(
            (0..col.len())
                .filter(|i| col.is_valid(*i))
                .map(|i| col.value(i).to_string()),
        );
    }
    Ok(out)
}

/// `(run_id, date, object)` of every run in the `runs` objects (parts and
/// merged files), newest run first; listed once per job (its references
/// read the history several times).
fn runs_objects(ctx: &JobContext) -> Result<std::sync::Arc<memo::RunsObjects>, ExecError> {
    // By attempt: an attempt that failed on a file merged since its listing
    // ([`benchlake_core::Error::Gone`], retryable) lists again. (A run's
    // object merged away is read again where it is now: [`previous_runs`].)
    memo::listings().get_or(format!("{}#{}", ctx.job_id, ctx.attempt), || {
        let mut out = Vec::new();
        for f in ctx.block_on(ctx.lake.table_files("runs", None))? {
            let f = std::sync::Arc::new(f);
            for (run, date) in &f.runs {
                out.push((run.clone(), date.clone(), f.clone()));
            }
        }
        out.sort_by(|a, b| b.0.cmp(&a.0));
        Ok(out)
    })
}

/// The rows of a `runs` object that [`night_of`] needs.
fn runs_rows(batches: &[RecordBatch]) -> Vec<memo::RunsRow> {
    use arrow::array::TimestampMicrosecondArray;
    use arrow::datatypes::{DataType, TimeUnit};
    let mut out = Vec::new();
    for b in batches {
        let col = |n: &str| {
            b.schema()
                .index_of(n)
                .ok()
                .and_then(|i| b.column(i).as_any().downcast_ref::<StringArray>())
        };
        let ts = |n: &str| {
            b.column_by_name(n)
                .and_then(|a| {
                    arrow::compute::cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None)).ok()
                })
                .and_then(|a| {
                    a.as_any()
                        .downcast_ref::<TimestampMicrosecondArray>()
                        .cloned()
                })
        };
        let (Some(s), Some(st)) = (col("schedule_id"), col("status")) else {
            continue;
        };
        let (logical, submitted) = (ts("logical_at"), ts("submitted_at"));
        for i in 0..b.num_rows() {
            if st.is_null(i) {
                continue;
            }
            let at_us = [&logical, &submitted]
                .into_iter()
                .flatten()
                .find(|a| a.is_valid(i))
                .map(|a| a.value(i));
            out.push(memo::RunsRow {
                schedule: s.is_valid(i).then(|| s.value(i).to_string()),
                status: st.value(i).to_string(),
                at_us,
            });
        }
    }
    out
}

/// The logical night (`YYYY-MM-DD`) of the succeeded run of `schedule` a
/// `runs` object records: coalesce(logical_at, submitted_at) (files written
/// before 2026-12 lack `logical_at`), else the object's date partition.
/// None when the object records no succeeded run of the schedule.
fn night_of(rows: &[memo::RunsRow], schedule: &str, partition: &str) -> Option<String> {
    let r = rows
        .iter()
        .find(|r| r.schedule.as_deref() == Some(schedule) && r.status == "SUCCEEDED")?;
    let night = r
        .at_us
        .and_then(chrono::DateTime::from_timestamp_micros)
        .map(|t| t.format("%Y-%m-%d").to_string());
    Some(night.unwrap_or_else(|| partition.to_string()))
}

/// One earlier succeeded run of the schedule: id, date partition, logical night.
struct PrevRun {
    run_id: String,
    date: String,
    night: String,
}

/// Calls `visit` with the earlier succeeded runs of `schedule`, newest
/// first (by run id, a ULID), until it returns false; the current run is
/// left out. At most [`MAX_HISTORY_SCAN`] `runs` objects are read (each
/// once per worker process: [`memo::runs`]).
fn previous_runs(
    ctx: &JobContext,
    schedule: &str,
    mut visit: impl FnMut(&PrevRun) -> Result<bool, ExecError>,
) -> Result<(), ExecError> {
    let mut seen = std::collections::BTreeSet::new();
    for (run_id, date, file) in runs_objects(ctx)?.iter().take(MAX_HISTORY_SCAN).cloned() {
        if run_id == ctx.run_id || !seen.insert(run_id.clone()) {
            continue;
        }
        if ctx.cancelled() {
            return Err(ExecError::Cancelled);
        }
        let rows = memo::runs().get_or(format!("{}#{run_id}", file.key), || {
            let read = match ctx.block_on(ctx.lake.read_run_file(&file, &run_id, None)) {
                // Merged away since this job listed: the run's rows are
                // found again where they are now (not a failed attempt).
                Err(benchlake_core::Error::Gone { .. }) => {
                    ctx.block_on(ctx.lake.read_run_rows(
                        benchlake_core::lake::RunRows::new("runs", &run_id).on(&date),
                    ))
                }
                r => r,
            };
            match read {
                Ok(b) => Ok(runs_rows(&b)),
                Err(e @ benchlake_core::Error::Decode { .. }) => {
                    // One unreadable old object must not block every later verdict.
                    tracing::warn!(error = %e, "skipping an unreadable runs object");
                    Ok(Vec::new())
                }
                Err(e) => Err(ExecError::from(e)),
            }
        })?;
        let Some(night) = night_of(&rows, schedule, &date) else {
            continue;
        };
        if !visit(&PrevRun {
            run_id,
            date,
            night,
        })? {
            break;
        }
    }
    Ok(())
}

/// The figures of one earlier run (empty when it has none), remembered per
/// run and slow-pair rule ([`memo::figures`]).
fn run_figures(
    ctx: &JobContext,
    run: &PrevRun,
    format: &str,
    slow: &SlowPair,
) -> Result<std::sync::Arc<BTreeMap<String, f64>>, ExecError> {
    let Some(checks) = checks_of(format) else {
        return Ok(Default::default());
    };
    let key = (
        run.run_id.clone(),
        format.to_string(),
        format!("{}/{:?}", slow.factor, slow.time_s),
    );
    memo::figures().get_or(key, || {
        let mut t: Tables = BTreeMap::new();
        for table in checks.figure_tables {
            match read_run_table(ctx, table, &run.date, &run.run_id, None) {
                Ok(b) => {
                    t.insert(table, b);
                }
                Err(ExecError::Permanent(e)) => {
                    tracing::warn!(error = %e, run = %run.run_id, "skipping a run's unreadable table");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(match figures(checks.family, &t, slow) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, run = %run.run_id, "no figures for an earlier run");
                BTreeMap::new()
            }
        })
    })
}

/// Figure → its values of the last `window` succeeded runs of `schedule`
/// that have figures (oldest first, each with its run and logical night),
/// excluding the current run.
fn history(
    ctx: &JobContext,
    schedule: &str,
    format: &str,
    window: usize,
    slow: &SlowPair,
) -> Result<BTreeMap<String, Vec<Point>>, ExecError> {
    let mut found: Vec<(PrevRun, std::sync::Arc<BTreeMap<String, f64>>)> = Vec::new();
    previous_runs(ctx, schedule, |run| {
        if found.len() >= window {
            return Ok(false);
        }
        let f = run_figures(ctx, run, format, slow)?;
        if !f.is_empty() {
            found.push((
                PrevRun {
                    run_id: run.run_id.clone(),
                    date: run.date.clone(),
                    night: run.night.clone(),
                },
                f,
            ));
        }
        Ok(found.len() < window)
    })?;
    let mut out: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for (run, f) in found.into_iter().rev() {
        for (k, value) in f.iter() {
            out.entry(k.clone()).or_default().push(Point {
                run_id: run.run_id.clone(),
                date: run.night.clone(),
                value: *value,
            });
        }
    }
    Ok(out)
}

/// (node, check, value) of the `node_health` rows of one earlier run, for
/// the checks [`regressions::node_better`] watches ([`memo::node_values`]).
fn run_node_values(
    ctx: &JobContext,
    run: &PrevRun,
) -> Result<std::sync::Arc<memo::NodeValues>, ExecError> {
    memo::node_values().get_or(run.run_id.clone(), || {
        let batches = match read_run_table(ctx, "node_health", &run.date, &run.run_id, None) {
            Ok(b) => b,
            Err(ExecError::Permanent(e)) => {
                tracing::warn!(error = %e, run = %run.run_id, "skipping a run's unreadable node_health");
                return Ok(Vec::new());
            }
            Err(e) => return Err(e),
        };
        let mut vals = Vec::new();
        for b in &batches {
            let s = |n: &str| {
                b.column_by_name(n)
                    .and_then(|a| a.as_any().downcast_ref::<StringArray>())
            };
            let f = |n: &str| {
                b.column_by_name(n)
                    .and_then(|a| a.as_any().downcast_ref::<arrow::array::Float64Array>())
            };
            let (Some(node), Some(check), Some(v), Some(r)) =
                (s("node"), s("check"), f("value"), f("reference"))
            else {
                continue;
            };
            for i in 0..b.num_rows() {
                if !(node.is_valid(i)
                    && check.is_valid(i)
                    && v.is_valid(i)
                    && regressions::node_better(check.value(i)).is_some())
                {
                    continue;
                }
                let reference = r.is_valid(i).then(|| r.value(i));
                if let Some(x) =
                    regressions::node_series_value(check.value(i), v.value(i), reference)
                {
                    vals.push((node.value(i).to_string(), check.value(i).to_string(), x));
                }
            }
        }
        Ok(vals)
    })
}

/// (node, check) → the node's values of the check in the `node_health`
/// rows of the last `window` succeeded runs of `schedule` that have such
/// rows (oldest first), for the checks [`regressions::node_better`] watches.
fn node_history(
    ctx: &JobContext,
    schedule: &str,
    window: usize,
) -> Result<BTreeMap<(String, String), Vec<Point>>, ExecError> {
    let mut found: Vec<(String, String, std::sync::Arc<memo::NodeValues>)> = Vec::new();
    previous_runs(ctx, schedule, |run| {
        let vals = run_node_values(ctx, run)?;
        if !vals.is_empty() {
            found.push((run.run_id.clone(), run.night.clone(), vals));
        }
        Ok(found.len() < window)
    })?;
    let mut out: BTreeMap<(String, String), Vec<Point>> = BTreeMap::new();
    for (run_id, night, vals) in found.into_iter().rev() {
        for (node, check, value) in vals.iter() {
            out.entry((node.clone(), check.clone()))
                .or_default()
                .push(Point {
                    run_id: run_id.clone(),
                    date: night.clone(),
                    value: *value,
                });
        }
    }
    Ok(out)
}

fn error_row(check: &str, message: String) -> CheckRow {
    CheckRow {
        check: check.into(),
        status: "ERROR".into(),
        value: None,
        reference: None,
        unit: String::new(),
        message,
        regression: None,
    }
}

/// The verdict rows of one checks job.
pub fn check_rows(ctx: &JobContext, s: &ChecksSpec) -> Result<Vec<CheckRow>, ExecError> {
    let Some(checks) = checks_of(&s.format) else {
        return Err(ExecError::Permanent(format!(
            "checks: no checks for format '{}'",
            s.format
        )));
    };
    let tables = checks.figure_tables;
    if tables.is_empty() {
        // Node-level checks only (hostinfo).
        return Ok(Vec::new());
    }
    let slow = match SlowPair::from_params(&s.params) {
        Ok(x) => x,
        Err(e) => return Ok(vec![error_row("checks.config", e)]),
    };
    let mut current: Tables = BTreeMap::new();
    for table in tables {
        let b = read_run_table(
            ctx,
            table,
            &ctx.run_date,
            &ctx.run_id,
            Some(&s.ingest_job_id),
        )?;
        current.insert(table, b);
    }
    let figs = match figures(checks.family, &current, &slow) {
        Ok(f) => f,
        Err(e) => return Ok(vec![error_row("checks.input", e.to_string())]),
    };
    let mut cfg = match checks.family {
        CheckFamily::Mdtest => io_checks::mdtest_config(&figs),
        CheckFamily::Linktest => linktest_checks::default_config(),
        CheckFamily::Osu => osu_checks::default_config(),
        CheckFamily::Io | CheckFamily::NodeFacts | CheckFamily::TraceRankTime => {
            IoCheckConfig::default()
        }
    };
    let skip: Vec<&str> = linktest_checks::SLOW_PAIR_PARAMS
        .iter()
        .chain(node_checks::NODE_IO_PARAMS)
        .chain(node_checks::RANK_TIME_PARAMS)
        .chain(changepoint::PARAMS)
        .chain(link_checks::PARAMS)
        .copied()
        .collect();
    if let Err(e) = io_checks::apply_params(&mut cfg, &s.params, &skip) {
        return Ok(vec![error_row("checks.config", e)]);
    }
    let cp = match changepoint::Config::from_params(&s.params) {
        Ok(c) => c,
        Err(e) => return Ok(vec![error_row("checks.config", e)]),
    };
    // The change points look further back than the learned references
    // (which take the newest `cfg.window` of the same history).
    let window = if cp.enabled {
        cfg.window.max(cp.window.saturating_sub(1))
    } else {
        cfg.window
    };
    let series = match &s.schedule_id {
        Some(sched) => history(ctx, sched, &s.format, window, &slow)?,
        None => BTreeMap::new(),
    };
    let mut rows = io_checks::evaluate(&figs, &regressions::values(&series), &cfg);
    regressions::apply(
        &mut rows,
        &figs,
        &series,
        (&ctx.run_id, &ctx.run_date),
        &cfg,
        &cp,
    );
    // A FAIL on a night the whole machine was busy says nothing of the
    // machine: held, with that night's hostinfo as the reason.
    if rows.iter().any(|r| r.status == verdict::FAIL)
        && let Some(why) = busy_night(ctx)?
    {
        io_checks::hold_for(&mut rows, &cfg, &why);
    }
    Ok(rows)
}

/// Whether a hostinfo run of this run's night (its date partition) that has
/// landed saw the whole machine busy ([`io_checks::busy_machine`]): the
/// reason, naming that run. Each hostinfo run of the night is judged on its
/// own nodes; rows without a load or core count are left out.
fn busy_night(ctx: &JobContext) -> Result<Option<String>, ExecError> {
    use arrow::array::{Float64Array, Int64Array};
    let mut by_run: BTreeMap<String, Vec<(f64, i64)>> = BTreeMap::new();
    for f in ctx.block_on(ctx.lake.table_files("node_facts", Some(&ctx.run_date)))? {
        for (run, date) in &f.runs {
            if *run == ctx.run_id || *date != ctx.run_date {
                continue;
            }
            let facts = by_run.entry(run.clone()).or_default();
            for b in ctx.block_on(ctx.lake.read_run_file(&f, run, None))? {
                let load = b
                    .column_by_name("load_1m")
                    .and_then(|c| c.as_any().downcast_ref::<Float64Array>());
                let cores = b
                    .column_by_name("cores")
                    .and_then(|c| c.as_any().downcast_ref::<Int64Array>());
                let (Some(load), Some(cores)) = (load, cores) else {
                    continue;
                };
                facts.extend(
                    (0..b.num_rows())
                        .filter(|&i| load.is_valid(i) && cores.is_valid(i))
                        .map(|i| (load.value(i), cores.value(i))),
                );
            }
        }
    }
    // The newest hostinfo run of the night that shows it (ids sort by time).
    Ok(by_run.iter().rev().find_map(|(run, facts)| {
        io_checks::busy_machine(facts).map(|why| format!("{why} ({run})"))
    }))
}

/// The change points of a run's node rows against the node's earlier
/// `node_health` rows of the schedule (docs/io.md, "Regressions").
fn node_regressions(
    ctx: &JobContext,
    s: &ChecksSpec,
    mut rows: Vec<NodeRow>,
) -> Result<Vec<NodeRow>, ExecError> {
    let Some(sched) = &s.schedule_id else {
        return Ok(rows);
    };
    if !rows
        .iter()
        .any(|r| r.node != "*" && regressions::node_better(&r.check).is_some())
    {
        return Ok(rows);
    }
    let cp = match changepoint::Config::from_params(&s.params) {
        Ok(c) => c,
        Err(e) => {
            rows.push(node_checks::config_error(e));
            return Ok(rows);
        }
    };
    if !cp.enabled {
        return Ok(rows);
    }
    let hist = node_history(ctx, sched, cp.window.saturating_sub(1))?;
    regressions::apply_nodes(&mut rows, &hist, (&ctx.run_id, &ctx.run_date), &cp);
    Ok(rows)
}

/// The `node_health` rows of one checks job: the node-level checks of the
/// rows its ingest job committed (none for formats without any), with the
/// REGRESSIONs of each node's series.
pub fn node_rows(ctx: &JobContext, s: &ChecksSpec) -> Result<Vec<NodeRow>, ExecError> {
    let rows = node_rows_of_run(ctx, s)?;
    node_regressions(ctx, s, rows)
}

/// The node-level checks of the rows a checks job's ingest job committed.
fn node_rows_of_run(ctx: &JobContext, s: &ChecksSpec) -> Result<Vec<NodeRow>, ExecError> {
    let Some(checks) = checks_of(&s.format) else {
        return Ok(Vec::new());
    };
    let tables = checks.node_tables;
    if tables.is_empty() {
        return Ok(Vec::new());
    }
    let mut current: Tables = BTreeMap::new();
    for table in tables {
        let b = read_run_table(
            ctx,
            table,
            &ctx.run_date,
            &ctx.run_id,
            Some(&s.ingest_job_id),
        )?;
        current.insert(table, b);
    }
    let get = |n: &str| current.get(n).map(Vec::as_slice).unwrap_or(&[]);
    match checks.family {
        CheckFamily::TraceRankTime => rank_time_rows(ctx, s, get("mpi_trace_ranks")),
        CheckFamily::NodeFacts => {
            let expect = match node_checks::FactsExpect::from_params(&s.params) {
                Ok(e) => e,
                Err(e) => return Ok(vec![node_checks::config_error(e)]),
            };
            let facts = match node_checks::node_facts(get("node_facts"), &s.agent) {
                Ok(f) => f,
                Err(e) => return Ok(vec![node_checks::config_error(e)]),
            };
            let mut rows = node_checks::facts_checks(&facts, &expect);
            // Cores and memory without an expectation: learned from the
            // node's own earlier runs of the schedule, else its peers.
            if expect.cores.is_none() || expect.memory_bytes.is_none() {
                let hist = match &s.schedule_id {
                    Some(sched) => node_history(ctx, sched, node_checks::FACTS_WINDOW)?,
                    None => BTreeMap::new(),
                };
                rows.extend(node_checks::learned_facts_checks(
                    &facts,
                    &expect,
                    &regressions::node_values(&hist),
                ));
            }
            Ok(rows)
        }
        CheckFamily::Linktest => {
            let slow = SlowPair::from_params(&s.params);
            let fraction = node_checks::slow_pair_fraction(&s.params);
            match (slow, fraction) {
                (Ok(slow), Ok(f)) => Ok(node_checks::linktest_node_checks(
                    get("linktest_ranks"),
                    get("linktest_timings"),
                    &slow,
                    f,
                )),
                (Err(e), _) | (_, Err(e)) => Ok(vec![node_checks::config_error(e)]),
            }
        }
        // The OSU tests name no node (a pair of ranks): run-level checks only.
        CheckFamily::Osu => Ok(Vec::new()),
        CheckFamily::Io | CheckFamily::Mdtest => {
            match node_checks::IoNodeConfig::from_params(&s.params) {
                Ok(cfg) => Ok(node_checks::io_node_checks(get("io_task_times"), &cfg)),
                Err(e) => Ok(vec![node_checks::config_error(e)]),
            }
        }
    }
}

/// The `traced.rank_time` rows of a traced run's `bandela` ingest: its
/// ranks' nodes (`mpi_trace_ranks` of that ingest; none for traces without a
/// rank map) and each rank's computation and call counts from the tracer's
/// `bandela_stats` beside the rank files. Unreadable statistics, or ranks
/// the statistics lack, give one ERROR row on `*`.
fn rank_time_rows(
    ctx: &JobContext,
    s: &ChecksSpec,
    ranks: &[RecordBatch],
) -> Result<Vec<NodeRow>, ExecError> {
    let node_of = node_checks::trace_rank_nodes(ranks);
    if node_of.is_empty() {
        return Ok(Vec::new());
    }
    let cfg = match node_checks::RankTimeConfig::from_params(&s.params) {
        Ok(c) => c,
        Err(e) => return Ok(vec![node_checks::config_error(e)]),
    };
    let first = s.source.split(' ').next().unwrap_or_default();
    let Some((run, task, _)) = layout::parse_raw_key(first) else {
        return Ok(vec![node_checks::rank_time_error(format!(
            "trace key '{first}' is not a raw object key"
        ))]);
    };
    let key = layout::raw_key(run, task, crate::traced::STATS_FILE)?;
    let stats = match ctx.fetch(&key).and_then(|p| {
        benchlake_tracer::stats::read(&p).map_err(|e| {
            ExecError::Permanent(e.to_string().replace(&p.display().to_string(), &key))
        })
    }) {
        Ok(st) => st,
        Err(ExecError::Permanent(e)) => {
            return Ok(vec![node_checks::rank_time_error(format!(
                "the tracer's statistics: {e}"
            ))]);
        }
        Err(e) => return Err(e),
    };
    let mut work = Vec::with_capacity(node_of.len());
    for (&rank, node) in &node_of {
        let r = rank as usize;
        let (Some(per), Some(calls)) = (stats.per_rank.get(r), stats.routine.get(r)) else {
            return Ok(vec![node_checks::rank_time_error(format!(
                "{key} has {} ranks, the rank map names rank {rank}",
                stats.ranks
            ))]);
        };
        work.push(node_checks::RankWork {
            rank,
            node: node.clone(),
            comp_s: per.comput_s,
            work: calls.iter().map(|c| c.calls).collect(),
        });
    }
    Ok(node_checks::rank_time_checks(&work, &cfg))
}

/// The link verdicts of a LinkTest run (docs/verdicts.md, "Links"): each
/// link against its own earlier runs of the schedule, as `link_health` rows
/// of the failing links and one `linktest.slow_links` row for the run. None
/// for other formats and with `check_link = off`.
fn link_verdicts(
    ctx: &JobContext,
    s: &ChecksSpec,
) -> Result<Option<(Vec<link_checks::LinkRow>, CheckRow)>, ExecError> {
    if checks_of(&s.format).map(|c| c.family) != Some(CheckFamily::Linktest) {
        return Ok(None);
    }
    let cfg = match link_checks::LinkConfig::from_params(&s.params) {
        Ok(c) if !c.enabled => return Ok(None),
        Ok(c) => c,
        Err(e) => return Ok(Some((Vec::new(), error_row("checks.config", e)))),
    };
    let read = |table: &str, date: &str, run: &str, job: Option<&str>| {
        read_run_table(ctx, table, date, run, job)
    };
    let job = Some(s.ingest_job_id.as_str());
    let (ranks, timings) = (
        read("linktest_ranks", &ctx.run_date, &ctx.run_id, job)?,
        read("linktest_timings", &ctx.run_date, &ctx.run_id, job)?,
    );
    // Host numbers are the process's (remembered links keep theirs).
    let mut hosts = memo::hosts();
    let now = link_checks::run_links(&ranks, &timings, &mut hosts);
    let mut hist = Vec::new();
    if let Some(sched) = &s.schedule_id {
        previous_runs(ctx, sched, |run| {
            let l = memo::links().get_or(run.run_id.clone(), || {
                let tables = read("linktest_ranks", &run.date, &run.run_id, None).and_then(|r| {
                    read("linktest_timings", &run.date, &run.run_id, None).map(|t| (r, t))
                });
                match tables {
                    Ok((r, t)) => Ok(link_checks::run_links(&r, &t, &mut hosts).history()),
                    Err(ExecError::Permanent(e)) => {
                        tracing::warn!(error = %e, run = %run.run_id, "skipping a run's unreadable LinkTest tables");
                        Ok(link_checks::RunLinks::default())
                    }
                    Err(e) => Err(e),
                }
            })?;
            if !l.ratio.is_empty() {
                hist.push(l);
            }
            Ok(hist.len() < cfg.window)
        })?;
    }
    let hist: Vec<&link_checks::RunLinks> = hist.iter().map(|l| l.as_ref()).collect();
    let v = link_checks::judge(&now, &hist, &hosts, &cfg);
    let bound = v
        .bound
        .map(|b| format!("{:+.0} %", b * 100.0))
        .unwrap_or_default();
    let (status, message) = if v.judged == 0 {
        (
            verdict::NO_REFERENCE,
            format!(
                "no reference yet: none of the {} links has {} earlier runs of the schedule",
                v.links, cfg.min_history
            ),
        )
    } else if v.rows.is_empty() {
        (
            verdict::PASS,
            format!(
                "no link of {} judged slower than its usual by more than {bound}",
                v.judged
            ),
        )
    } else {
        let names: Vec<String> = v
            .rows
            .iter()
            .take(5)
            .map(|r| format!("{}:{}", r.node_a, r.node_b))
            .collect();
        (
            verdict::FAIL,
            format!(
                "{} of {} links slower than their usual by more than {bound}: {}{}",
                v.rows.len(),
                v.judged,
                names.join(", "),
                if v.rows.len() > names.len() {
                    ", …"
                } else {
                    ""
                }
            ),
        )
    };
    let row = CheckRow {
        check: link_checks::SLOW_LINKS_CHECK.into(),
        status: status.into(),
        value: Some(v.rows.len() as f64),
        reference: Some(0.0),
        unit: "links".into(),
        message,
        regression: None,
    };
    Ok(Some((v.rows, row)))
}

/// Node identity (benchlake_core::node): a row that names the kernel host
/// name of the agent that ran the task — a tool that records host names,
/// run by the agent outside Slurm — is the agent's node. Slurm node names
/// and other hosts' names are left as they are.
fn name_agent_host(rows: &mut [NodeRow], s: &ChecksSpec) {
    let Some(host) = s.agent_hostname.as_deref() else {
        return;
    };
    if host == s.agent || !benchlake_core::node::valid_name(&s.agent) {
        return;
    }
    for r in rows.iter_mut().filter(|r| r.node == host) {
        r.node = s.agent.clone();
    }
}

/// Computes and writes the `checks` and `node_health` rows of a run.
pub struct Checks;

impl Executor for Checks {
    fn kind(&self) -> &'static str {
        CHECKS_JOB
    }
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        let s: ChecksSpec = serde_json::from_str(&ctx.spec_json)
            .map_err(|e| ExecError::Permanent(format!("checks job spec: {e}")))?;
        let mut rows = check_rows(ctx, &s)?;
        let links = link_verdicts(ctx, &s)?;
        if let Some((_, row)) = &links {
            rows.push(row.clone());
        }
        let batch = io_checks::to_batch(&ctx.run_id, &s.source, &rows)
            .map_err(|e| ExecError::Permanent(format!("checks: {e}")))?;
        let mut tables = if batch.num_rows() > 0 {
            vec![TableOutput::new("checks", vec![batch])]
        } else {
            Vec::new()
        };
        let mut nodes = node_rows(ctx, &s)?;
        name_agent_host(&mut nodes, &s);
        if !nodes.is_empty() {
            let b = node_checks::to_batch(&ctx.run_id, &s.source, &nodes)
                .map_err(|e| ExecError::Permanent(format!("node checks: {e}")))?;
            tables.push(TableOutput::new("node_health", vec![b]));
        }
        if let Some((links, _)) = links.filter(|(l, _)| !l.is_empty()) {
            let b = link_checks::to_batch(&ctx.run_id, &s.source, &links)
                .map_err(|e| ExecError::Permanent(format!("link checks: {e}")))?;
            tables.push(TableOutput::new("link_health", vec![b]));
        }
        Ok(ExecOutput {
            encoded: Vec::new(),
            tables,
            follow_ups: Vec::new(),
            bundled: Vec::new(),
        })
    }
}

#[cfg(test)]
#[path = "checks_tests.rs"]
mod tests;
