//! What follows a `traced` run (docs/tracer.md, "After a traced run"):
//!
//! - the `bandela` ingest job of a run whose benchmark kind is `traced` asks,
//!   besides its own tables, for the run's **default replay**: one `replay` job
//!   (the Bandela model; the ranks on the hosts they ran on, by the tracer's
//!   rank map: one host holding every rank (host type 0) without a map or
//!   when all ran on one node, else one host per node (host type 2); latency,
//!   bandwidth and barrier latency from the run's `replay_*` parameters, whose
//!   defaults are the tracer's Bandelalight defaults; on one host whose ranks
//!   outnumber the agent's cores, `cpu_boost` = cores / ranks, as the default
//!   Dimemas replay's `cpu_ratio`) in the job group
//!   `traced-{ingest job}`, and one `trace_compare` job waiting for that group;
//! - `trace_compare` reads the tracer's `bandela_stats` file (measured) and the
//!   replay's committed `replay_functions` / `replay_ranks` rows (modelled) and
//!   writes the `trace_comparison` table: per rank and MPI routine, measured
//!   and modelled communication with their difference and ratio, plus one
//!   `all` row per rank.
//!
//! The count files' pattern analysis needs nothing here: every `counts` ingest
//! is followed by one (`analyze::follow_up_of_ingest`).
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use benchlake_core::catalog;
use benchlake_core::jobs::{
    FollowUp, IngestRunInfo, IngestSpec, REPLAY_JOB, ReplaySpec, TRACE_COMPARE_JOB,
};
use benchlake_core::lake::{RunRows, TableOutput};
use benchlake_core::layout;
use serde::{Deserialize, Serialize};

use crate::{ExecError, ExecOutput, Executor, JobContext};

/// The benchmark kind whose runs get a default replay and a comparison.
pub const TRACED_KIND: &str = benchlake_formats::kinds::TRACED_RUN_KIND;

/// The model of the default replay (the registry's default: the tracer
/// writes Bandela traces, which is what [`default_input`] is written for).
pub const DEFAULT_MODEL: &benchlake_replay::models::Model = benchlake_replay::models::DEFAULT;

/// The tracer's statistics file, beside the rank files of its task.
pub const STATS_FILE: &str = "bandela_stats";

/// `function` value of a rank's total row in `trace_comparison`.
pub const ALL_FUNCTIONS: &str = "all";

/// Run parameters of the default replay: (name, default, keyword of the
/// replaympi input it sets). The defaults are the tracer's own defaults for
/// `BANDELA_LATENCY`, `BANDELA_BANDWIDTH` and `BANDELA_BARRIER_LATENCY`, so the
/// replay models the machine the statistics file's estimates assume.
pub const REPLAY_PARAMS: &[(&str, &str, &str)] = &[
    ("replay_latency_us", "2", "INTRA_HOST_LATENCY"),
    ("replay_bandwidth_mbs", "700", "INTRA_HOST_BANDWIDTH_PEAK"),
    (
        "replay_barrier_latency_us",
        "10",
        "INTRA_HOST_BARRIER_LATENCY",
    ),
];

/// Run parameters of the default replay across nodes (ranks on different
/// nodes are on different hosts): (name, default, keyword). Plain defaults
/// until a calibration says otherwise (docs/tracer.md).
pub const INTER_REPLAY_PARAMS: &[(&str, &str, &str)] = &[
    ("replay_inter_latency_us", "5", "INTER_HOST_LATENCY"),
    (
        "replay_inter_bandwidth_mbs",
        "700",
        "INTER_HOST_BANDWIDTH_PEAKS",
    ),
    (
        "replay_inter_barrier_latency_us",
        "20",
        "INTER_HOST_BARRIER_LATENCY",
    ),
];

/// Spec of a `trace_compare` job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareSpec {
    /// Raw key of the tracer's `bandela_stats` file.
    pub stats_key: String,
    /// The default replay's id.
    pub replay_id: String,
    /// The replay's model.
    pub model: String,
}

/// The job group of a traced run's default replay.
pub fn group_of(ingest_job: &str) -> String {
    format!("traced-{ingest_job}")
}

/// A `replay_*` run parameter (or its default) as a number in range
/// (bandwidths > 0, latencies >= 0).
fn replay_param(
    params: &BTreeMap<String, String>,
    name: &str,
    default: &str,
) -> Result<f64, ExecError> {
    let raw = params.get(name).map(String::as_str).unwrap_or(default);
    let v: f64 = raw.trim().parse().map_err(|_| {
        ExecError::Permanent(format!("run parameter {name}: '{raw}' is not a number"))
    })?;
    let ok = v.is_finite()
        && if name.ends_with("bandwidth_mbs") {
            v > 0.0
        } else {
            v >= 0.0
        };
    if !ok {
        return Err(ExecError::Permanent(format!(
            "run parameter {name}: {raw} is out of range (bandwidth > 0, latencies >= 0)"
        )));
    }
    Ok(v)
}

/// The replaympi input of the default replay for `ranks` ranks on one host
/// with the run's parameters (`replay_*`, defaults in [`REPLAY_PARAMS`]).
pub fn default_input(ranks: usize, params: &BTreeMap<String, String>) -> Result<String, ExecError> {
    default_input_on(&vec![""; ranks], params)
}

/// `0-3,5,7-8`: a sorted rank list as replaympi's `MPI_RANKS`.
fn rank_ranges(ranks: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}-{}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    out.join(",")
}

/// The replaympi input of the default replay with rank `r` on node
/// `node_of_rank[r]`: one host per distinct node (in order of first rank).
/// One node: host type 0, as without a rank map. More: host type 2 (a
/// switch cluster, one adapter per host) with the `replay_inter_*`
/// parameters (defaults in [`INTER_REPLAY_PARAMS`]) between hosts.
pub fn default_input_on(
    node_of_rank: &[&str],
    params: &BTreeMap<String, String>,
) -> Result<String, ExecError> {
    default_input_with_cores(node_of_rank, params, None)
}

/// [`default_input_on`] knowing the agent's cores: when one host holds
/// every rank and they outnumber `cores`, the input's `cpu_boost` is
/// cores / ranks (replaympi divides every burst by it: bursts take longer
/// as if the ranks shared the cores evenly, as the default Dimemas replay's
/// `cpu_ratio`). Ranks on several nodes: the agent's cores say nothing of
/// theirs, so no factor.
pub fn default_input_with_cores(
    node_of_rank: &[&str],
    params: &BTreeMap<String, String>,
    cores: Option<u32>,
) -> Result<String, ExecError> {
    if node_of_rank.is_empty() {
        return Err(ExecError::Permanent(
            "traced run: no Bandela rank files to replay".into(),
        ));
    }
    let mut hosts: Vec<(&str, Vec<usize>)> = Vec::new();
    for (r, node) in node_of_rank.iter().enumerate() {
        match hosts.iter_mut().find(|h| h.0 == *node) {
            Some(h) => h.1.push(r),
            None => hosts.push((node, vec![r])),
        }
    }
    let multi = hosts.len() > 1;
    let mut text = format!(
        "# default replay of a traced run (benchlake worker, docs/tracer.md)\n\
         NUMBER_OF_HOSTS {}\nHOST_TYPE {}\n",
        hosts.len(),
        if multi { 2 } else { 0 }
    );
    if let Some(c) = cores.filter(|c| !multi && *c > 0 && (*c as usize) < node_of_rank.len()) {
        text.push_str(&format!(
            "cpu_boost {}\n",
            f64::from(c) / node_of_rank.len() as f64
        ));
    }
    for (name, default, keyword) in REPLAY_PARAMS {
        let v = replay_param(params, name, default)?;
        text.push_str(&format!("{keyword} {v}\n"));
    }
    if multi {
        for (name, default, keyword) in INTER_REPLAY_PARAMS {
            let v = replay_param(params, name, default)?;
            // Per link; no aggregate limit (-1: the degradation ratio, 1).
            let extra = if keyword.ends_with("PEAKS") {
                " -1"
            } else {
                ""
            };
            text.push_str(&format!("{keyword} {v}{extra}\n"));
        }
    }
    for (i, (node, ranks)) in hosts.iter().enumerate() {
        if multi {
            text.push_str(&format!("# node {node}\n"));
        }
        text.push_str(&format!(
            "BLOCK_HOST {i}\nNUMBER_OF_PROCS {}\nMPI_RANKS {}\nADAPTERS {}\n",
            ranks.len(),
            rank_ranges(ranks),
            u8::from(multi)
        ));
    }
    Ok(text)
}

/// The tracer's rank map of the task whose Bandela rank files `s` ingests
/// (`bandela_ranks` beside them): its raw key and rows, or `None` when the
/// task has none (traces of older tracers). A map whose rank count differs
/// from the rank files' is an error.
pub fn rank_map(
    ctx: &JobContext,
    s: &IngestSpec,
) -> Result<Option<(String, Vec<benchlake_formats::bandela::ranks::RankHost>)>, ExecError> {
    use benchlake_formats::bandela::ranks;
    let Some((run, task, _)) = s.keys.first().and_then(|k| layout::parse_raw_key(k)) else {
        return Ok(None);
    };
    let prefix = layout::raw_prefix(run, task)?;
    let key = layout::raw_key(run, task, ranks::FILE_NAME)?;
    let listed = ctx.block_on(ctx.lake.list(&prefix))?;
    if !listed.iter().any(|(k, _)| *k == key) {
        return Ok(None);
    }
    let path = ctx.fetch(&key)?;
    let rows = ranks::read(&path).map_err(|e| {
        ExecError::Permanent(e.to_string().replace(&path.display().to_string(), &key))
    })?;
    if rows.len() != s.keys.len() {
        return Err(ExecError::Permanent(format!(
            "{key}: {} ranks, but the task has {} Bandela rank files",
            rows.len(),
            s.keys.len()
        )));
    }
    Ok(Some((key, rows)))
}

/// The node of every rank (rank order) for the default replay: from the
/// rank map, or one unnamed node for all when the task has none.
fn replay_nodes(ctx: &JobContext, s: &IngestSpec) -> Result<Vec<String>, ExecError> {
    Ok(match rank_map(ctx, s)? {
        Some((_, rows)) => rows.into_iter().map(|r| r.node).collect(),
        None => vec![String::new(); s.keys.len()],
    })
}

/// The follow-ups of an ingest job that belong to a traced run: for its
/// `bandela` ingest, the default replay and the comparison waiting for it.
/// Writes the replay's input to `_work/{run}/traced/{job}/replaympi.input`.
pub fn follow_up_of_ingest(
    ctx: &JobContext,
    s: &IngestSpec,
    info: &IngestRunInfo,
) -> Result<Vec<FollowUp>, ExecError> {
    if info.kind.as_deref() != Some(TRACED_KIND)
        || s.format != DEFAULT_MODEL.trace.format()
        || s.keys.is_empty()
    {
        return Ok(Vec::new());
    }
    // Every rank file of the task lies under the task's raw prefix.
    let Some((run, task, _)) = layout::parse_raw_key(&s.keys[0]) else {
        return Err(ExecError::Permanent(format!(
            "trace key {} is not a raw object key (raw/RUN/TASK/FILE)",
            s.keys[0]
        )));
    };
    let prefix = layout::raw_prefix(run, task)?;
    if let Some(k) = s.keys.iter().find(|k| !k.starts_with(&prefix)) {
        return Err(ExecError::Permanent(format!(
            "traced run: Bandela files in two directories ({} and {k})",
            s.keys[0]
        )));
    }
    let stats_key = layout::raw_key(run, task, STATS_FILE)?;
    let nodes = replay_nodes(ctx, s)?;
    let input = default_input_with_cores(
        &nodes.iter().map(String::as_str).collect::<Vec<_>>(),
        &info.params,
        info.cores,
    )?;
    let input_key = layout::traced_replay_input_key(&ctx.run_id, &ctx.job_id)?;
    ctx.block_on(ctx.lake.put(&input_key, bytes::Bytes::from(input)))?;
    // The newest calibration of the nodes the ranks ran on (docs/replay.md).
    let (calibration, calibration_note) =
        crate::calibrate::for_default_replay(ctx, &s.agent, Some(&nodes))?;
    // Deterministic per ingest job: a retried ingest names the same replay.
    let replay_id = format!("{}-default", ctx.job_id);
    let replay = ReplaySpec {
        model: DEFAULT_MODEL.name.into(),
        trace_key: prefix.clone(),
        files: [("input".to_string(), input_key)].into(),
        params: BTreeMap::new(),
        point: BTreeMap::new(),
        replay_id: replay_id.clone(),
        calibration,
        calibration_note,
    };
    let compare = CompareSpec {
        stats_key,
        replay_id,
        model: DEFAULT_MODEL.name.into(),
    };
    replay_then_compare(ctx, &replay, &compare)
}

/// The follow-ups of one default replay: the `replay` job in the ingest's
/// job group ([`group_of`]) and the `trace_compare` job waiting for it.
pub(crate) fn replay_then_compare(
    ctx: &JobContext,
    replay: &ReplaySpec,
    compare: &CompareSpec,
) -> Result<Vec<FollowUp>, ExecError> {
    let json = |v: serde_json::Result<serde_json::Value>| {
        v.map_err(|e| ExecError::Permanent(format!("traced follow-up spec: {e}")))
    };
    let group = group_of(&ctx.job_id);
    Ok(vec![
        FollowUp {
            kind: REPLAY_JOB.into(),
            spec: json(serde_json::to_value(replay))?,
            group: Some(group.clone()),
            wait_for: None,
        },
        FollowUp {
            kind: TRACE_COMPARE_JOB.into(),
            spec: json(serde_json::to_value(compare))?,
            group: None,
            wait_for: Some(group),
        },
    ])
}

/// Modelled figures of one replay, read back from the lake.
#[derive(Debug, Default)]
struct Modelled {
    /// (rank, function) → wait + latency + small + big transfer.
    functions: BTreeMap<(i32, String), f64>,
    /// rank → (communication_s, computation_s, total_s).
    ranks: BTreeMap<i32, (f64, f64, f64)>,
}

fn col<'a, T: 'static>(b: &'a RecordBatch, name: &str, table: &str) -> Result<&'a T, ExecError> {
    b.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| ExecError::Permanent(format!("{table}: column {name} missing or mistyped")))
}

/// Batches of `table` for this job's run (every committed part).
fn run_table(ctx: &JobContext, table: &str) -> Result<Vec<RecordBatch>, ExecError> {
    let q = RunRows::new(table, &ctx.run_id).on(&ctx.run_date);
    Ok(ctx.block_on(ctx.lake.read_run_rows(q))?)
}

fn modelled(ctx: &JobContext, replay_id: &str) -> Result<Modelled, ExecError> {
    let mut m = Modelled::default();
    for b in run_table(ctx, "replay_functions")? {
        let t = "replay_functions";
        let id = col::<StringArray>(&b, "replay_id", t)?;
        let rank = col::<Int32Array>(&b, "rank", t)?;
        let func = col::<StringArray>(&b, "function", t)?;
        let parts = [
            col::<Float64Array>(&b, "wait_s", t)?,
            col::<Float64Array>(&b, "latency_s", t)?,
            col::<Float64Array>(&b, "small_transfer_s", t)?,
            col::<Float64Array>(&b, "big_transfer_s", t)?,
        ];
        for i in 0..b.num_rows() {
            if id.value(i) != replay_id {
                continue;
            }
            let v: f64 = parts.iter().map(|p| p.value(i)).sum();
            *m.functions
                .entry((rank.value(i), func.value(i).to_string()))
                .or_default() += v;
        }
    }
    for b in run_table(ctx, "replay_ranks")? {
        let t = "replay_ranks";
        let id = col::<StringArray>(&b, "replay_id", t)?;
        let rank = col::<Int32Array>(&b, "rank", t)?;
        let comm = col::<Float64Array>(&b, "communication_s", t)?;
        let comp = col::<Float64Array>(&b, "computation_s", t)?;
        let total = col::<Float64Array>(&b, "total_s", t)?;
        for i in 0..b.num_rows() {
            if id.value(i) == replay_id {
                m.ranks.insert(
                    rank.value(i),
                    (comm.value(i), comp.value(i), total.value(i)),
                );
            }
        }
    }
    Ok(m)
}

/// One `trace_comparison` row.
#[derive(Debug, Clone, PartialEq)]
pub struct ComparisonRow {
    pub rank: i32,
    pub function: String,
    pub calls: i64,
    pub measured_comm_s: f64,
    pub modelled_comm_s: f64,
    pub measured_comp_s: f64,
    pub modelled_comp_s: Option<f64>,
    /// `all` rows: the rank's measured time in the window (computation +
    /// communication) and its predicted total.
    pub totals: Option<(f64, f64)>,
}

/// The routines a Dimemas trace records as its one kind of wait record: the
/// Dimemas model charges them all to `MPI_Wait`.
const WAIT_FAMILY: [&str; 3] = ["MPI_Waitall", "MPI_Waitany", "MPI_Waitsome"];

/// The measured routine a modelled `MPI_Wait` stands for on a rank that
/// never called `MPI_Wait` but called exactly one of [`WAIT_FAMILY`] (the
/// Dimemas trace format cannot tell them apart; docs/replay.md): that
/// routine's row then carries the modelled wait instead of two half-empty
/// rows. `None` when the rank called `MPI_Wait` itself, or several of them.
fn wait_stands_for(
    routines: &[String],
    calls: impl Fn(usize) -> u64,
    modelled_wait: bool,
) -> Option<&str> {
    if !modelled_wait {
        return None;
    }
    let called = |name: &str| {
        routines
            .iter()
            .position(|r| r == name)
            .is_some_and(|i| calls(i) > 0)
    };
    if called("MPI_Wait") {
        return None;
    }
    let mut it = WAIT_FAMILY.iter().filter(|n| called(n));
    match (it.next(), it.next()) {
        (Some(one), None) => routines.iter().find(|r| r == one).map(String::as_str),
        _ => None,
    }
}

/// The comparison rows of a statistics file and a replay's modelled figures:
/// per rank, one row per routine the rank called or the replay charged
/// (statistics order, then the replay's extra routines by name), then `all`.
/// A modelled `MPI_Wait` joins the rank's one `MPI_Wait*` routine
/// ([`wait_stands_for`]).
fn compare(
    stats: &benchlake_tracer::stats::Stats,
    m: &Modelled,
) -> Result<Vec<ComparisonRow>, ExecError> {
    let mut rows = Vec::new();
    for (r, per) in stats.per_rank.iter().enumerate() {
        let rank = i32::try_from(r)
            .map_err(|_| ExecError::Permanent(format!("bandela_stats: rank {r} too large")))?;
        let Some(&(comm, comp, total)) = m.ranks.get(&rank) else {
            return Err(ExecError::Permanent(format!(
                "the replay has no replay_ranks row for rank {rank} (the statistics file has {} ranks)",
                stats.ranks
            )));
        };
        let mut calls_total = 0i64;
        let mut seen = Vec::new();
        let wait = m.functions.get(&(rank, "MPI_Wait".to_string())).copied();
        let wait_as = wait_stands_for(
            &stats.routines,
            |i| {
                stats
                    .routine
                    .get(r)
                    .and_then(|v| v.get(i))
                    .map_or(0, |x| x.calls)
            },
            wait.is_some(),
        );
        if wait_as.is_some() {
            seen.push("MPI_Wait");
        }
        for (i, name) in stats.routines.iter().enumerate() {
            let Some(rs) = stats.routine.get(r).and_then(|v| v.get(i)) else {
                continue;
            };
            let calls = i64::try_from(rs.calls).unwrap_or(i64::MAX);
            calls_total = calls_total.saturating_add(calls);
            let mut modelled = m.functions.get(&(rank, name.clone())).copied();
            if wait_as == Some(name.as_str()) {
                modelled = Some(modelled.unwrap_or(0.0) + wait.unwrap_or(0.0));
            } else if wait_as.is_some() && name == "MPI_Wait" {
                // Moved to the routine it stands for.
                modelled = None;
            }
            if calls == 0 && modelled.is_none() {
                continue;
            }
            seen.push(name.as_str());
            rows.push(ComparisonRow {
                rank,
                function: name.clone(),
                calls,
                measured_comm_s: rs.comm_s,
                modelled_comm_s: modelled.unwrap_or(0.0),
                measured_comp_s: rs.comp_s,
                modelled_comp_s: None,
                totals: None,
            });
        }
        for ((fr, name), v) in m.functions.range((rank, String::new())..) {
            if *fr != rank {
                break;
            }
            if !seen.contains(&name.as_str()) {
                rows.push(ComparisonRow {
                    rank,
                    function: name.clone(),
                    calls: 0,
                    measured_comm_s: 0.0,
                    modelled_comm_s: *v,
                    measured_comp_s: 0.0,
                    modelled_comp_s: None,
                    totals: None,
                });
            }
        }
        let measured_comm = per.wait_s + per.latency_s + per.transfer_s;
        rows.push(ComparisonRow {
            rank,
            function: ALL_FUNCTIONS.into(),
            calls: calls_total,
            measured_comm_s: measured_comm,
            modelled_comm_s: comm,
            measured_comp_s: per.comput_s,
            modelled_comp_s: Some(comp),
            totals: Some((per.comput_s + measured_comm, total)),
        });
    }
    Ok(rows)
}

/// The `trace_comparison` batch of `rows`.
fn comparison_batch(
    run_id: &str,
    s: &CompareSpec,
    rows: &[ComparisonRow],
) -> Result<RecordBatch, ExecError> {
    let n = rows.len();
    let f = |g: &dyn Fn(&ComparisonRow) -> f64| -> ArrayRef {
        Arc::new(Float64Array::from(rows.iter().map(g).collect::<Vec<_>>()))
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![run_id; n])),
        Arc::new(StringArray::from(vec![s.replay_id.as_str(); n])),
        Arc::new(StringArray::from(vec![s.model.as_str(); n])),
        Arc::new(Int32Array::from(
            rows.iter().map(|r| r.rank).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            rows.iter().map(|r| r.function.as_str()).collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            rows.iter().map(|r| r.calls).collect::<Vec<_>>(),
        )),
        f(&|r| r.measured_comm_s),
        f(&|r| r.modelled_comm_s),
        f(&|r| r.modelled_comm_s - r.measured_comm_s),
        Arc::new(Float64Array::from(
            rows.iter()
                .map(|r| (r.measured_comm_s > 0.0).then(|| r.modelled_comm_s / r.measured_comm_s))
                .collect::<Vec<_>>(),
        )),
        f(&|r| r.measured_comp_s),
        Arc::new(Float64Array::from(
            rows.iter().map(|r| r.modelled_comp_s).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(vec![s.stats_key.as_str(); n])),
        Arc::new(Float64Array::from(
            rows.iter()
                .map(|r| r.totals.map(|t| t.0))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Float64Array::from(
            rows.iter()
                .map(|r| r.totals.map(|t| t.1))
                .collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(catalog::schema("trace_comparison")?, cols)
        .map_err(|e| ExecError::Permanent(format!("trace_comparison: {e}")))
}

/// Measured vs modelled communication of a traced run → `trace_comparison`.
pub struct TraceCompare;

impl Executor for TraceCompare {
    fn kind(&self) -> &'static str {
        TRACE_COMPARE_JOB
    }
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        let s: CompareSpec = serde_json::from_str(&ctx.spec_json)
            .map_err(|e| ExecError::Permanent(format!("{} job spec: {e}", ctx.kind)))?;
        let path = ctx.fetch(&s.stats_key)?;
        let stats = benchlake_tracer::stats::read(&path).map_err(|e| {
            ExecError::Permanent(
                e.to_string()
                    .replace(&path.display().to_string(), &s.stats_key),
            )
        })?;
        let m = modelled(ctx, &s.replay_id)?;
        if m.ranks.is_empty() {
            return Err(ExecError::Permanent(format!(
                "replay {} of run {} committed no replay_ranks rows",
                s.replay_id, ctx.run_id
            )));
        }
        let rows = compare(&stats, &m)?;
        let batch = comparison_batch(&ctx.run_id, &s, &rows)?;
        Ok(ExecOutput {
            encoded: Vec::new(),
            tables: vec![TableOutput::new("trace_comparison", vec![batch])],
            follow_ups: Vec::new(),
            bundled: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_input_reads_as_a_replaympi_input() {
        let params = [("replay_latency_us".to_string(), "3.5".to_string())].into();
        let text = default_input(4, &params).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in");
        std::fs::write(&p, &text).unwrap();
        let inp = benchlake_formats::bandela::BandelaInput::read(p.to_str().unwrap()).unwrap();
        assert_eq!(inp.hosts, 1, "{text}");
        assert!(text.contains("INTRA_HOST_LATENCY 3.5\n"), "{text}");
        assert!(text.contains("INTRA_HOST_BANDWIDTH_PEAK 700\n"), "{text}");
        assert!(text.contains("INTRA_HOST_BARRIER_LATENCY 10\n"), "{text}");
        assert!(text.contains("MPI_RANKS 0-3\n"), "{text}");
        for bad in ["x", "-1", "inf"] {
            let p = [("replay_latency_us".to_string(), bad.to_string())].into();
            let e = default_input(2, &p).unwrap_err().to_string();
            assert!(e.contains("replay_latency_us"), "{e}");
        }
        let p = [("replay_bandwidth_mbs".to_string(), "0".to_string())].into();
        assert!(default_input(2, &p).is_err());
        assert!(default_input(0, &BTreeMap::new()).is_err());
        // The follow-up's files are all the default model needs.
        assert_eq!(DEFAULT_MODEL.missing_file(["input"]), None);
    }

    #[test]
    fn ranks_of_different_nodes_are_on_different_hosts() {
        let params = [("replay_inter_latency_us".to_string(), "7".to_string())].into();
        let text = default_input_on(&["n2", "n1", "n2", "n3", "n1"], &params).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in");
        std::fs::write(&p, &text).unwrap();
        let inp = benchlake_formats::bandela::BandelaInput::read(p.to_str().unwrap()).unwrap();
        assert_eq!((inp.hosts, inp.host_type), (3, 2), "{text}");
        // Hosts in order of their first rank: n2 {0, 2}, n1 {1, 4}, n3 {3}.
        let hosts: Vec<Option<u32>> = (0..5).map(|r| inp.host_of(r)).collect();
        assert_eq!(
            hosts,
            [Some(0), Some(1), Some(0), Some(2), Some(1)],
            "{text}"
        );
        assert!(text.contains("INTER_HOST_LATENCY 7\n"), "{text}");
        assert!(
            text.contains("INTER_HOST_BANDWIDTH_PEAKS 700 -1\n"),
            "{text}"
        );
        assert!(text.contains("INTER_HOST_BARRIER_LATENCY 20\n"), "{text}");
        assert!(text.contains("MPI_RANKS 1,4\n"), "{text}");
        assert!(
            text.contains("# node n3\nBLOCK_HOST 2\nNUMBER_OF_PROCS 1\nMPI_RANKS 3\nADAPTERS 1\n"),
            "{text}"
        );
        // One node: the single-host input of a run without a rank map.
        assert_eq!(
            default_input_on(&["n1"; 4], &BTreeMap::new()).unwrap(),
            default_input(4, &BTreeMap::new()).unwrap()
        );
        let bad = [("replay_inter_bandwidth_mbs".to_string(), "0".to_string())].into();
        let e = default_input_on(&["a", "b"], &bad).unwrap_err().to_string();
        assert!(e.contains("replay_inter_bandwidth_mbs"), "{e}");
        assert_eq!(rank_ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    }

    /// 8 ranks on a 2-core agent: the default input slows bursts by 2 / 8
    /// (`cpu_boost 0.25`), and the Bandela model's prediction grows by
    /// exactly the slower computation; as many cores as ranks, or ranks on
    /// several nodes: no factor.
    #[test]
    fn ranks_outnumbering_the_cores_slow_the_bursts() {
        let ranks = 8;
        let plain = default_input_with_cores(&vec![""; ranks], &BTreeMap::new(), None).unwrap();
        let shared = default_input_with_cores(&vec![""; ranks], &BTreeMap::new(), Some(2)).unwrap();
        assert!(!plain.contains("cpu_boost"), "{plain}");
        assert!(shared.contains("cpu_boost 0.25\n"), "{shared}");
        for cores in [Some(8), Some(16), Some(0)] {
            assert_eq!(
                default_input_with_cores(&vec![""; ranks], &BTreeMap::new(), cores).unwrap(),
                plain
            );
        }
        let two_nodes = ["a", "a", "a", "a", "b", "b", "b", "b"];
        assert_eq!(
            default_input_with_cores(&two_nodes, &BTreeMap::new(), Some(2)).unwrap(),
            default_input_on(&two_nodes, &BTreeMap::new()).unwrap()
        );
        // A ring of 8 ranks: 1 ms of computation, then a 1000-byte message
        // to the right neighbour and one from the left, then a barrier.
        let dir = tempfile::tempdir().unwrap();
        for r in 0..ranks {
            let (right, left) = ((r + 1) % ranks, (r + ranks - 1) % ranks);
            std::fs::write(
                dir.path().join(format!("bandela.{r}.txt")),
                format!(
                    "H {r} {ranks} 0\nC 0.001\nK 0 MPI_Irecv irecv {left} 1 5 1000 1 0\n\
                     K 1 MPI_Isend isend {right} 1 5 1000 2 0\nK 2 MPI_Waitall wait 1\n\
                     K 3 MPI_Waitall wait 2\nK 4 MPI_Barrier barrier 1\n"
                ),
            )
            .unwrap();
        }
        let predict = |text: &str| {
            let p = dir.path().join("input");
            std::fs::write(&p, text).unwrap();
            let params = [("input".to_string(), p.display().to_string())].into();
            benchlake_replay::run_replay("bandela", dir.path(), &params)
                .unwrap()
                .predicted_time_s
        };
        let (t_plain, t_shared) = (predict(&plain), predict(&shared));
        // Only the computation changes: 1 ms becomes 4 ms on every rank.
        assert!(
            ((t_shared - t_plain) - 0.003).abs() < 1e-12,
            "{t_plain} -> {t_shared}"
        );
        assert!(t_plain > 0.001 && t_plain < 0.0011, "{t_plain}");
    }

    /// The start of a two-rank statistics file (header, receive matrix,
    /// per-rank counters); the tests add the request tables.
    const STATS_HEAD: &str = "Ranks: 2\nBandwidth (MB/s): 700\nLatency (us): 2\nBarrier latency (us): 10\nMPI_BUFFER_MAX: 1048575\n\n\
>>>> Receive Matrix (bytes) <<<<\nLines are receivers, columns are senders\nCPU 0 1\n0 0 8\n1 8 0\n\n\
rank 0 bytes_buffered=8 internal_requests=2 barrier_requests=0 bytes_sent=8 bytes_received=8 records=2\n\
rank 1 bytes_buffered=8 internal_requests=2 barrier_requests=0 bytes_sent=8 bytes_received=8 records=2\n\n";

    /// A Dimemas replay charges every wait to `MPI_Wait`; on a rank that
    /// called only `MPI_Waitall` the modelled wait sits on that row (one
    /// row, as Bandela's), and on a rank that called `MPI_Wait` too the two
    /// stay apart.
    #[test]
    fn a_modelled_wait_joins_the_ranks_one_waitall() {
        let text = format!(
            "{STATS_HEAD}>>>> Request times in seconds <<<<\nCPU Comput Wait Latency Transfer MPI_Wait MPI_Waitall\n\
0000 0.5 0.25 0.125 0.0625 0.1 0.3375\n0001 0.4 0.25 0.0 0.0 0.0 0.25\n\n\
>>>> Computation before requests in seconds <<<<\nCPU Trailing MPI_Wait MPI_Waitall\n0000 0.01 0.2 0.3\n0001 0.0 0.0 0.4\n\n\
>>>> Number of requests <<<<\nCPU MPI_Wait MPI_Waitall\n0000 1 1\n0001 0 2\n"
        );
        let stats = benchlake_tracer::stats::parse(&text).unwrap();
        let mut m = Modelled::default();
        m.functions.insert((0, "MPI_Wait".into()), 0.5);
        m.functions.insert((1, "MPI_Wait".into()), 0.125);
        m.ranks.insert(0, (0.5, 0.5, 1.0));
        m.ranks.insert(1, (0.125, 0.4, 1.0));
        let rows = compare(&stats, &m).unwrap();
        let short: Vec<(i32, &str, i64, f64, f64)> = rows
            .iter()
            .map(|r| {
                (
                    r.rank,
                    r.function.as_str(),
                    r.calls,
                    r.measured_comm_s,
                    r.modelled_comm_s,
                )
            })
            .collect();
        assert_eq!(
            short,
            vec![
                (0, "MPI_Wait", 1, 0.1, 0.5),
                (0, "MPI_Waitall", 1, 0.3375, 0.0),
                (0, "all", 2, 0.4375, 0.5),
                (1, "MPI_Waitall", 2, 0.25, 0.125),
                (1, "all", 2, 0.25, 0.125),
            ]
        );
        let routines: Vec<String> = ["MPI_Waitany", "MPI_Waitsome"].map(String::from).into();
        assert_eq!(wait_stands_for(&routines, |_| 1, true), None, "two of them");
        assert_eq!(
            wait_stands_for(&routines, |i| i as u64, true),
            Some("MPI_Waitsome")
        );
        assert_eq!(wait_stands_for(&routines, |i| i as u64, false), None);
    }

    #[test]
    fn rows_pair_measured_and_modelled_per_rank_and_routine() {
        let text = format!(
            "{STATS_HEAD}>>>> Request times in seconds <<<<\nCPU Comput Wait Latency Transfer MPI_Send MPI_Recv\n\
0000 0.5 0.25 0.125 0.0625 0.3 0.1375\n0001 0.4 0.0 0.0 0.0 0.0 0.0\n\n\
>>>> Computation before requests in seconds <<<<\nCPU Trailing MPI_Send MPI_Recv\n0000 0.01 0.2 0.3\n0001 0.0 0.0 0.0\n\n\
>>>> Number of requests <<<<\nCPU MPI_Send MPI_Recv\n0000 1 1\n0001 0 0\n"
        );
        let stats = benchlake_tracer::stats::parse(&text).unwrap();
        let mut m = Modelled::default();
        m.functions.insert((0, "MPI_Send".into()), 0.5);
        m.functions.insert((1, "MPI_Wait".into()), 0.25);
        m.ranks.insert(0, (0.75, 0.45, 1.25));
        m.ranks.insert(1, (0.25, 0.4, 1.25));
        let rows = compare(&stats, &m).unwrap();
        let short: Vec<(i32, &str, i64, f64, f64)> = rows
            .iter()
            .map(|r| {
                (
                    r.rank,
                    r.function.as_str(),
                    r.calls,
                    r.measured_comm_s,
                    r.modelled_comm_s,
                )
            })
            .collect();
        assert_eq!(
            short,
            vec![
                (0, "MPI_Send", 1, 0.3, 0.5),
                (0, "MPI_Recv", 1, 0.1375, 0.0),
                (0, "all", 2, 0.4375, 0.75),
                (1, "MPI_Wait", 0, 0.0, 0.25),
                (1, "all", 0, 0.0, 0.25),
            ]
        );
        assert_eq!(rows[2].measured_comp_s, 0.5);
        assert_eq!(rows[2].modelled_comp_s, Some(0.45));
        assert_eq!(rows[1].measured_comp_s, 0.3);
        let spec = CompareSpec {
            stats_key: "raw/r/t/bandela_stats".into(),
            replay_id: "x-default".into(),
            model: DEFAULT_MODEL.name.into(),
        };
        let b = comparison_batch("R", &spec, &rows).unwrap();
        let ratio = col::<Float64Array>(&b, "ratio", "t").unwrap();
        assert_eq!(ratio.value(0), 0.5 / 0.3);
        assert!(ratio.is_null(3), "nothing measured: no ratio");
        let diff = col::<Float64Array>(&b, "diff_s", "t").unwrap();
        assert_eq!(diff.value(1), -0.1375);
        // The whole-run figures sit on the `all` rows: rank 0 measured
        // 0.5 s of computation and 0.4375 s of communication.
        let mt = col::<Float64Array>(&b, "measured_total_s", "t").unwrap();
        let pt = col::<Float64Array>(&b, "modelled_total_s", "t").unwrap();
        assert_eq!(mt.value(2), 0.9375);
        assert_eq!(pt.value(2), 1.25);
        assert!(
            mt.is_null(0) && pt.is_null(1),
            "routine rows have no totals"
        );
        assert_eq!(mt.value(4), 0.4);
        // A replay without a rank of the statistics is an error naming it.
        m.ranks.remove(&1);
        let e = compare(&stats, &m).unwrap_err().to_string();
        assert!(e.contains("rank 1"), "{e}");
    }
}
