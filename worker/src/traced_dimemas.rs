//! A traced run's **default Dimemas replay** (docs/tracer.md, docs/replay.md):
//! the tracer writes a Dimemas trace (`trace.dim`) beside its Bandela rank
//! files, so the `dimemas` ingest of a traced run asks, like the Bandela one
//! ([`crate::traced`]), for one `replay` job (the Dimemas model) in the job
//! group `traced-{ingest job}` and one `trace_compare` job waiting for it.
//! The comparison rows carry `model = dimemas`, beside the Bandela ones.
//!
//! Platform: the ranks on the nodes they ran on, by the tracer's rank map
//! (`bandela_ranks`) when it places them in equal blocks of consecutive
//! ranks (Dimemas maps `k TASKS_PER_NODE` only); otherwise (no map, one node,
//! another placement) every rank on one node, `tasks_per_node` = the ranks,
//! and when they outnumber the agent's cores `cpu_ratio` = cores / ranks
//! (bursts take longer as if the ranks shared the cores evenly). With a
//! calibration covering that node (the newest, [`crate::calibrate`]), its
//! latencies and bandwidths; without, the run's `replay_latency_us` and
//! `replay_bandwidth_mbs` (the Bandela default replay's figures, converted to
//! the model's MB of 2^20 B) for intra-node messages, and the replay's
//! params say no calibration was found.
use std::collections::BTreeMap;

use benchlake_core::jobs::{FollowUp, IngestRunInfo, IngestSpec, ReplaySpec};
use benchlake_core::layout;
use benchlake_replay::models::DIMEMAS;

use crate::traced::{CompareSpec, INTER_REPLAY_PARAMS, REPLAY_PARAMS, STATS_FILE, TRACED_KIND};
use crate::{ExecError, JobContext};

/// The number of ranks of a traced task: its `bandela.<rank>[.txt]` objects.
fn ranks_of_task(ctx: &JobContext, prefix: &str) -> Result<usize, ExecError> {
    let listed = ctx.block_on(ctx.lake.list(prefix))?;
    Ok(listed
        .iter()
        .filter(|(k, _)| {
            let name = k.rsplit('/').next().unwrap_or("");
            name.strip_prefix("bandela.")
                .map(|r| r.strip_suffix(".txt").unwrap_or(r))
                .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
        })
        .count())
}

/// `(nodes, tasks per node)` when `node_of_rank` puts equal blocks of
/// consecutive ranks on distinct nodes (what Dimemas's `k TASKS_PER_NODE`
/// mapping expresses), else None.
pub fn block_placement(node_of_rank: &[String]) -> Option<(usize, usize)> {
    let mut blocks: Vec<(&str, usize)> = Vec::new();
    for n in node_of_rank {
        match blocks.last_mut() {
            Some((last, k)) if *last == n.as_str() => *k += 1,
            _ => {
                if blocks.iter().any(|(b, _)| *b == n.as_str()) {
                    return None;
                }
                blocks.push((n.as_str(), 1));
            }
        }
    }
    let k = blocks.first()?.1;
    blocks
        .iter()
        .all(|(_, n)| *n == k)
        .then_some((blocks.len(), k))
}

/// The node of each rank of a traced task, from its rank map, or None
/// without one (traces of older tracers) or when it does not read.
fn rank_nodes(ctx: &JobContext, run: &str, task: &str) -> Result<Option<Vec<String>>, ExecError> {
    use benchlake_formats::bandela::ranks;
    let key = layout::raw_key(run, task, ranks::FILE_NAME)?;
    if ctx.block_on(ctx.lake.size(&key))?.is_none() {
        return Ok(None);
    }
    let path = ctx.fetch(&key)?;
    // The bandela ingest reports a bad map; the replay goes on without it.
    Ok(ranks::read(&path)
        .ok()
        .map(|rows| rows.into_iter().map(|r| r.node).collect()))
}

/// The Dimemas parameters of the default replay of `ranks` ranks on one node:
/// the platform, and without a calibration the run's figures.
pub fn default_params(
    ranks: usize,
    cores: Option<u32>,
    params: &BTreeMap<String, String>,
    calibrated: bool,
) -> Result<BTreeMap<String, String>, ExecError> {
    let mut p = BTreeMap::new();
    p.insert("nodes".to_string(), "1".to_string());
    p.insert("tasks_per_node".to_string(), ranks.max(1).to_string());
    if let Some(c) = cores.filter(|c| *c > 0 && (*c as usize) < ranks) {
        p.insert(
            "cpu_ratio".to_string(),
            (f64::from(c) / ranks as f64).to_string(),
        );
    }
    if !calibrated {
        let num = |name: &str| -> Result<f64, ExecError> {
            let default = REPLAY_PARAMS
                .iter()
                .find(|(n, _, _)| *n == name)
                .map_or("0", |(_, d, _)| d);
            let raw = params.get(name).map(String::as_str).unwrap_or(default);
            raw.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    ExecError::Permanent(format!(
                        "run parameter {name}: '{raw}' is not a number >= 0"
                    ))
                })
        };
        let l = num("replay_latency_us")? * 1e-6;
        let bw = num("replay_bandwidth_mbs")? * 1e6 / (1u64 << 20) as f64;
        if bw <= 0.0 {
            return Err(ExecError::Permanent(
                "run parameter replay_bandwidth_mbs: must be > 0".into(),
            ));
        }
        p.insert("intra_latency".into(), format!("{l:e}"));
        p.insert("intra_bandwidth".into(), format!("{bw}"));
    }
    Ok(p)
}

/// The follow-ups of a traced run's `dimemas` ingest: the default Dimemas
/// replay and its comparison.
pub fn follow_up_of_ingest(
    ctx: &JobContext,
    s: &IngestSpec,
    info: &IngestRunInfo,
) -> Result<Vec<FollowUp>, ExecError> {
    if info.kind.as_deref() != Some(TRACED_KIND)
        || s.format != DIMEMAS.trace.format()
        || s.keys.len() != 1
    {
        return Ok(Vec::new());
    }
    let trace_key = &s.keys[0];
    let Some((run, task, _)) = layout::parse_raw_key(trace_key) else {
        return Err(ExecError::Permanent(format!(
            "trace key {trace_key} is not a raw object key (raw/RUN/TASK/FILE)"
        )));
    };
    let prefix = layout::raw_prefix(run, task)?;
    let ranks = ranks_of_task(ctx, &prefix)?;
    if ranks == 0 {
        // No Bandela statistics beside it: nothing to compare with.
        return Ok(Vec::new());
    }
    let nodes = rank_nodes(ctx, run, task)?.filter(|n| n.len() == ranks);
    let (calibration, calibration_note) =
        crate::calibrate::for_default_replay(ctx, &s.agent, nodes.as_deref())?;
    let mut params = default_params(ranks, info.cores, &info.params, calibration.is_some())?;
    if let Some((n, k)) = nodes.as_deref().and_then(block_placement)
        && n > 1
    {
        // Ranks on several nodes: the agent's cores say nothing of theirs.
        params.insert("nodes".into(), n.to_string());
        params.insert("tasks_per_node".into(), k.to_string());
        params.remove("cpu_ratio");
        if calibration.is_none() {
            // Between nodes, the Bandela default replay's figures.
            for (name, key, scale) in [
                ("replay_inter_latency_us", "latency", 1e-6),
                (
                    "replay_inter_bandwidth_mbs",
                    "bandwidth",
                    1e6 / (1u64 << 20) as f64,
                ),
            ] {
                let default = INTER_REPLAY_PARAMS
                    .iter()
                    .find(|(n, _, _)| *n == name)
                    .map_or("0", |(_, d, _)| d);
                let raw = info.params.get(name).map(String::as_str).unwrap_or(default);
                let v = raw
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && (*v > 0.0 || (*v == 0.0 && key == "latency")))
                    .ok_or_else(|| {
                        ExecError::Permanent(format!(
                            "run parameter {name}: '{raw}' is out of range (bandwidth > 0, latency >= 0)"
                        ))
                    })?;
                params.insert(key.into(), format!("{:e}", v * scale));
            }
        }
    }
    DIMEMAS
        .check_params(&params)
        .map_err(|e| ExecError::Permanent(e.to_string()))?;
    let replay_id = format!("{}-default", ctx.job_id);
    let replay = ReplaySpec {
        model: DIMEMAS.name.into(),
        trace_key: trace_key.clone(),
        files: BTreeMap::new(),
        params,
        point: BTreeMap::new(),
        replay_id: replay_id.clone(),
        calibration,
        calibration_note,
    };
    let compare = CompareSpec {
        stats_key: layout::raw_key(run, task, STATS_FILE)?,
        replay_id,
        model: DIMEMAS.name.into(),
    };
    crate::traced::replay_then_compare(ctx, &replay, &compare)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_blocks_of_consecutive_ranks_are_a_dimemas_placement() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(block_placement(&v(&["a", "a", "b", "b"])), Some((2, 2)));
        assert_eq!(block_placement(&v(&["a", "a", "a"])), Some((1, 3)));
        assert_eq!(block_placement(&v(&["a", "b", "a", "b"])), None);
        assert_eq!(block_placement(&v(&["a", "a", "b"])), None);
        assert_eq!(block_placement(&v(&[])), None);
    }

    #[test]
    fn default_params_put_every_rank_on_one_node_with_the_runs_figures() {
        let p = default_params(4, Some(4), &BTreeMap::new(), false).unwrap();
        assert_eq!(p["tasks_per_node"], "4");
        assert!(!p.contains_key("cpu_ratio"), "as many cores as ranks");
        assert_eq!(p["nodes"], "1");
        assert_eq!(p["intra_latency"], "2e-6");
        let bw: f64 = p["intra_bandwidth"].parse().unwrap();
        assert!((bw - 700e6 / 1048576.0).abs() < 1e-9, "{bw}");
        DIMEMAS.check_params(&p).unwrap();
        // A calibration sets the network: only the platform is given.
        let p = default_params(4, None, &BTreeMap::new(), true).unwrap();
        assert_eq!(p.len(), 2);
        // 8 ranks on 2 cores: bursts 4x longer.
        let p = default_params(8, Some(2), &BTreeMap::new(), true).unwrap();
        assert_eq!(p["cpu_ratio"], "0.25");
        DIMEMAS.check_params(&p).unwrap();
        let bad = [("replay_latency_us".to_string(), "x".to_string())].into();
        assert!(default_params(2, None, &bad, false).is_err());
    }
}
