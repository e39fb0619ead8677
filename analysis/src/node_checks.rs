//! Node-level health checks: the rows of the `node_health` table
//! (docs/slurm.md, "Per-node health").
//!
//! Where [`crate::io_checks`] judges a run as a whole, these judge each node
//! it ran on, so a failing node can be named (and drained, by the
//! coordinator's node actions):
//!
//! - **node facts** (`hostinfo` runs, `node_facts` table) against the
//!   expected values a run or schedule gives: `expect_cores` (exact),
//!   `expect_memory_bytes` (± `expect_memory_tolerance`, default 5 %),
//!   `expect_kernel` (exact `uname -r`), like NHC's `check_hw_cpuinfo`,
//!   `check_hw_physmem` and `check_cmd_output uname -r`;
//! - **I/O bandwidth per node** (`pio` runs, `io_task_times`, whose `host` is
//!   the Slurm node name under srun): each node's mean process bandwidth
//!   against an absolute bound (`check_node_write_bw_mib_s`,
//!   `check_node_read_bw_mib_s`) and against the run's median node
//!   (`check_node_min_fraction`, default 0.5: a node at less than half the
//!   median node's bandwidth fails);
//! - **slow links attributed to hosts** (LinkTest and netprobe runs,
//!   `linktest_ranks` and `linktest_timings`): the share of a host's measured
//!   pairs that are slow (the run-level `linktest.slow_pairs` rule: slower
//!   than `check_slow_pair_factor` × the run's median pair time, or than
//!   `check_slow_pair_time_s`); a host in more than
//!   `check_node_slow_pair_fraction` (default 0.5) of its pairs is the
//!   suspect: a bad host is slow with every peer, its peers only with it.
//!   With two hosts a slow link cannot be pinned on either, and both fail.
//!
//! - **slow ranks of traced runs** (`traced.rank_time`; `mpi_trace_ranks` and
//!   the tracer's `bandela_stats`): each rank's measured computation time
//!   against the ranks **on other nodes doing the same work** (the same
//!   number of calls of every MPI routine): their median plus the largest of
//!   `check_rank_time_mads` (default 5) scaled median absolute deviations,
//!   `check_rank_time_min_excess` (default 0.5) × the median and
//!   `check_rank_time_min_excess_s` (default 0.01 s). A node fails when one
//!   of its ranks is over its bound, passes when all of its judged ranks are
//!   within. Computation, not total time: ranks wait for a slow one, so in
//!   a synchronising program every rank's total grows with it, while only
//!   the slow node's ranks compute longer. Comparing only with other nodes'
//!   ranks doing the same work keeps an application's own imbalance (a
//!   root's extra work) and a node's own slowness out of the reference.
//!
//! Every node the run measured gets a row for every check that applies to it,
//! PASS included: a later passing run is what lets a drained node return.
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, RecordBatch, StringArray};
use arrow::datatypes::DataType;
use benchlake_core::catalog;

/// One `node_health` row (without `run_id` and `source`).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub node: String,
    pub check: String,
    pub status: String,
    pub value: Option<f64>,
    pub reference: Option<f64>,
    pub unit: String,
    pub message: String,
    /// The change point of a REGRESSION of the node's series.
    pub regression: Option<crate::changepoint::Regression>,
}

impl NodeRow {
    fn new(
        node: &str,
        check: &str,
        pass: bool,
        value: Option<f64>,
        reference: Option<f64>,
    ) -> Self {
        Self {
            node: node.to_string(),
            check: check.to_string(),
            status: if pass { "PASS" } else { "FAIL" }.to_string(),
            value,
            reference,
            unit: String::new(),
            message: String::new(),
            regression: None,
        }
    }
    fn unit(mut self, u: &str) -> Self {
        self.unit = u.to_string();
        self
    }
    fn status(mut self, s: &str) -> Self {
        self.status = s.to_string();
        self
    }
    fn message(mut self, m: String) -> Self {
        self.message = m;
        self
    }
}

/// The parameters of the per-node I/O checks (skipped by the run-level
/// `check_*` parser).
pub const NODE_IO_PARAMS: &[&str] = &[
    "check_node_write_bw_mib_s",
    "check_node_read_bw_mib_s",
    "check_node_min_fraction",
    "check_node_slow_pair_fraction",
];

/// Default of `check_node_slow_pair_fraction`.
pub const DEFAULT_SLOW_PAIR_FRACTION: f64 = 0.5;

/// Default of `check_node_min_fraction`.
pub const DEFAULT_MIN_FRACTION: f64 = 0.5;
/// Default of `expect_memory_tolerance`.
pub const DEFAULT_MEMORY_TOLERANCE: f64 = 0.05;

fn num(params: &BTreeMap<String, String>, k: &str) -> Result<Option<f64>, String> {
    match params.get(k) {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Ok(None),
        Some(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .map(Some)
            .ok_or_else(|| format!("params.{k}: '{v}' is not a non-negative number")),
    }
}

fn int(params: &BTreeMap<String, String>, k: &str) -> Result<Option<i64>, String> {
    match params.get(k) {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Ok(None),
        Some(v) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|x| *x > 0)
            .map(Some)
            .ok_or_else(|| format!("params.{k}: '{v}' is not a positive integer")),
    }
}

/// What a node's facts are expected to be.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FactsExpect {
    pub cores: Option<i64>,
    pub memory_bytes: Option<i64>,
    pub memory_tolerance: f64,
    pub kernel: Option<String>,
}

impl FactsExpect {
    /// From a run's (canonical) parameters; an error names the parameter.
    pub fn from_params(params: &BTreeMap<String, String>) -> Result<Self, String> {
        let tol = num(params, "expect_memory_tolerance")?.unwrap_or(DEFAULT_MEMORY_TOLERANCE);
        if tol > 1.0 {
            return Err(format!("params.expect_memory_tolerance: {tol} is above 1"));
        }
        Ok(Self {
            cores: int(params, "expect_cores")?,
            memory_bytes: int(params, "expect_memory_bytes")?,
            memory_tolerance: tol,
            kernel: params
                .get("expect_kernel")
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
        })
    }

    /// Whether any expectation is set.
    pub fn is_empty(&self) -> bool {
        self.cores.is_none() && self.memory_bytes.is_none() && self.kernel.is_none()
    }
}

/// The facts of one node, as the checks read them.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    pub node: String,
    pub cores: i64,
    pub memory_bytes: i64,
    pub kernel_release: String,
    /// The CPU model: nodes of one model are each other's peers.
    pub cpu_model: String,
}

pub(crate) fn text_col(b: &RecordBatch, n: &str) -> Option<StringArray> {
    b.column_by_name(n)
        .and_then(|a| arrow::compute::cast(a, &DataType::Utf8).ok())
        .and_then(|a| a.as_any().downcast_ref::<StringArray>().cloned())
}

pub(crate) fn f64_col(b: &RecordBatch, n: &str) -> Option<Float64Array> {
    b.column_by_name(n)
        .and_then(|a| arrow::compute::cast(a, &DataType::Float64).ok())
        .and_then(|a| a.as_any().downcast_ref::<Float64Array>().cloned())
}

/// The rows of `node_facts` batches. A row's node is its `node` column (the
/// Slurm node name) when set, else `agent` (the agent that ran the task: the
/// agent's node) when not empty, else its `hostname`.
pub fn node_facts(batches: &[RecordBatch], agent: &str) -> Result<Vec<NodeFacts>, String> {
    let mut out = Vec::new();
    for b in batches {
        let need = |n: &str| format!("node_facts: no column '{n}'");
        let host = text_col(b, "hostname").ok_or_else(|| need("hostname"))?;
        let kernel = text_col(b, "kernel_release").ok_or_else(|| need("kernel_release"))?;
        let cores = f64_col(b, "cores").ok_or_else(|| need("cores"))?;
        let mem = f64_col(b, "memory_bytes").ok_or_else(|| need("memory_bytes"))?;
        let node = text_col(b, "node");
        let model = text_col(b, "cpu_model");
        for i in 0..b.num_rows() {
            let slurm = node
                .as_ref()
                .filter(|a| a.is_valid(i) && !a.value(i).is_empty())
                .map(|a| a.value(i).to_string());
            let name = slurm.unwrap_or_else(|| {
                if agent.is_empty() {
                    host.value(i).to_string()
                } else {
                    agent.to_string()
                }
            });
            out.push(NodeFacts {
                node: name,
                cores: cores.value(i) as i64,
                memory_bytes: mem.value(i) as i64,
                kernel_release: kernel.value(i).to_string(),
                cpu_model: model
                    .as_ref()
                    .filter(|m| m.is_valid(i))
                    .map(|m| m.value(i).to_string())
                    .unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

fn gib(b: f64) -> String {
    format!("{:.2} GiB", b / (1u64 << 30) as f64)
}

/// The facts checks of every node (none when nothing is expected).
pub fn facts_checks(facts: &[NodeFacts], e: &FactsExpect) -> Vec<NodeRow> {
    let mut out = Vec::new();
    for f in facts {
        if let Some(want) = e.cores {
            let ok = f.cores == want;
            out.push(
                NodeRow::new(
                    &f.node,
                    "node.cores",
                    ok,
                    Some(f.cores as f64),
                    Some(want as f64),
                )
                .unit("cores")
                .message(if ok {
                    format!("{} cores as expected", f.cores)
                } else {
                    format!("{} cores online, expected {want}", f.cores)
                }),
            );
        }
        if let Some(want) = e.memory_bytes {
            let (lo, hi) = (
                want as f64 * (1.0 - e.memory_tolerance),
                want as f64 * (1.0 + e.memory_tolerance),
            );
            let have = f.memory_bytes as f64;
            let ok = have >= lo && have <= hi;
            let pct = e.memory_tolerance * 100.0;
            out.push(
                NodeRow::new(
                    &f.node,
                    "node.memory_bytes",
                    ok,
                    Some(have),
                    Some(want as f64),
                )
                .unit("bytes")
                .message(if ok {
                    format!("{} within {pct}% of {}", gib(have), gib(want as f64))
                } else {
                    format!(
                        "{} of memory, expected {} ± {pct}%",
                        gib(have),
                        gib(want as f64)
                    )
                }),
            );
        }
        if let Some(want) = &e.kernel {
            let ok = &f.kernel_release == want;
            out.push(
                NodeRow::new(&f.node, "node.kernel", ok, None, None).message(if ok {
                    format!("kernel {want} as expected")
                } else {
                    format!("kernel {}, expected {want}", f.kernel_release)
                }),
            );
        }
    }
    out
}

/// Previous values a node's own usual cores and memory are taken over.
pub const FACTS_WINDOW: usize = 20;
/// Previous values needed for a node's own usual.
pub const FACTS_MIN_HISTORY: usize = 3;
/// Peers (same CPU model, the same night) needed for a peer reference.
pub const FACTS_MIN_PEERS: usize = 3;

/// The reference of a learned fact: the node's own usual value (the median
/// of its last [`FACTS_WINDOW`] values, at least [`FACTS_MIN_HISTORY`]),
/// else, for a node without that history (a new or returning node), the
/// value most of its peers have tonight (nodes of its CPU model, at least
/// [`FACTS_MIN_PEERS`], more than half of them agreeing). With a text
/// saying which.
fn learned_reference(own: Option<&Vec<f64>>, peers: &[f64]) -> Option<(f64, String)> {
    if let Some(h) = own.filter(|h| h.len() >= FACTS_MIN_HISTORY) {
        let n = h.len().min(FACTS_WINDOW);
        let recent = &h[h.len() - n..];
        return crate::reference::median(recent)
            .map(|m| (m, format!("its usual (median of its last {n} runs)")));
    }
    if peers.len() < FACTS_MIN_PEERS {
        return None;
    }
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for p in peers {
        *counts.entry(*p as i64).or_default() += 1;
    }
    let (value, k) = counts.into_iter().max_by_key(|(_, k)| *k)?;
    (2 * k > peers.len()).then(|| {
        (
            value as f64,
            format!(
                "its peers' ({k} of {} nodes of its CPU model tonight)",
                peers.len()
            ),
        )
    })
}

/// The learned facts checks (docs/slurm.md, "Per-node health"): the cores
/// and memory a node has no expectation for, against its own usual value,
/// else its peers'. Fewer cores than the reference, or memory more than
/// `memory_tolerance` below it, FAIL; more is no fault. Without a reference
/// the row is NO_REFERENCE. `history` maps (node, check) to the node's
/// earlier values, oldest first.
pub fn learned_facts_checks(
    facts: &[NodeFacts],
    e: &FactsExpect,
    history: &BTreeMap<(String, String), Vec<f64>>,
) -> Vec<NodeRow> {
    let mut peers: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for f in facts {
        let p = peers.entry(f.cpu_model.as_str()).or_default();
        p.0.push(f.cores as f64);
        p.1.push(f.memory_bytes as f64);
    }
    let mut out = Vec::new();
    for f in facts {
        let (pc, pm) = peers
            .get(f.cpu_model.as_str())
            .map(|(c, m)| (c.as_slice(), m.as_slice()))
            .unwrap_or_default();
        let own = |check: &str| history.get(&(f.node.clone(), check.to_string()));
        if e.cores.is_none() {
            let have = f.cores as f64;
            let row = match learned_reference(own("node.cores"), pc) {
                Some((r, why)) => {
                    let ok = have >= r;
                    NodeRow::new(&f.node, "node.cores", ok, Some(have), Some(r)).message(
                        if ok {
                            format!("{} cores online, {why} {r}", f.cores)
                        } else {
                            format!("{} cores online, {why} is {r}", f.cores)
                        },
                    )
                }
                None => NodeRow::new(&f.node, "node.cores", true, Some(have), None)
                    .status(verdict_no_reference())
                    .message(format!(
                        "{} cores online; no reference yet (fewer than {FACTS_MIN_HISTORY} earlier runs, fewer than {FACTS_MIN_PEERS} peers agreeing)",
                        f.cores
                    )),
            };
            out.push(row.unit("cores"));
        }
        if e.memory_bytes.is_none() {
            let have = f.memory_bytes as f64;
            let pct = e.memory_tolerance * 100.0;
            let row = match learned_reference(own("node.memory_bytes"), pm) {
                Some((r, why)) => {
                    let ok = have >= r * (1.0 - e.memory_tolerance);
                    NodeRow::new(&f.node, "node.memory_bytes", ok, Some(have), Some(r)).message(
                        format!(
                            "{} of memory, {} {pct}% of {why} {}",
                            gib(have),
                            if ok { "within" } else { "more than" },
                            gib(r)
                        ),
                    )
                }
                None => NodeRow::new(&f.node, "node.memory_bytes", true, Some(have), None)
                    .status(verdict_no_reference())
                    .message(format!("{} of memory; no reference yet", gib(have))),
            };
            out.push(row.unit("bytes"));
        }
    }
    out
}

fn verdict_no_reference() -> &'static str {
    benchlake_core::verdict::NO_REFERENCE
}

/// Thresholds of the per-node I/O checks.
#[derive(Debug, Clone, PartialEq)]
pub struct IoNodeConfig {
    pub write_min: Option<f64>,
    pub read_min: Option<f64>,
    /// Fraction of the median node's bandwidth below which a node fails
    /// (0 = off).
    pub min_fraction: f64,
}

impl Default for IoNodeConfig {
    fn default() -> Self {
        Self {
            write_min: None,
            read_min: None,
            min_fraction: DEFAULT_MIN_FRACTION,
        }
    }
}

impl IoNodeConfig {
    /// From a run's parameters; an error names the parameter.
    pub fn from_params(params: &BTreeMap<String, String>) -> Result<Self, String> {
        let f = num(params, "check_node_min_fraction")?.unwrap_or(DEFAULT_MIN_FRACTION);
        if f > 1.0 {
            return Err(format!("params.check_node_min_fraction: {f} is above 1"));
        }
        Ok(Self {
            write_min: num(params, "check_node_write_bw_mib_s")?,
            read_min: num(params, "check_node_read_bw_mib_s")?,
            min_fraction: f,
        })
    }
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// One process's bandwidth (MiB/s, 2^20) from its `io_task_times` row:
/// bytes moved over its transfer time; `None` unless the time is positive
/// and both are finite (the per-node checks and `io_node_summary`).
pub fn process_bw_mib_s(bytes: f64, xfer_time_s: f64) -> Option<f64> {
    let usable = xfer_time_s.is_finite() && xfer_time_s > 0.0 && bytes.is_finite() && bytes >= 0.0;
    usable.then(|| bytes / xfer_time_s / (1u64 << 20) as f64)
}

/// Each node's mean process bandwidth (MiB/s) per operation from
/// `io_task_times` rows that name a host and moved bytes in a positive
/// transfer time: operation → node → MiB/s. Rows without a host (IOR's)
/// are left out.
pub fn node_bandwidths(batches: &[RecordBatch]) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut acc: BTreeMap<String, BTreeMap<String, (f64, u64)>> = BTreeMap::new();
    for b in batches {
        let (Some(op), Some(host), Some(bytes), Some(xfer)) = (
            text_col(b, "operation"),
            text_col(b, "host"),
            f64_col(b, "bytes"),
            f64_col(b, "xfer_time_s"),
        ) else {
            continue;
        };
        for i in 0..b.num_rows() {
            if !(op.is_valid(i) && host.is_valid(i) && bytes.is_valid(i) && xfer.is_valid(i)) {
                continue;
            }
            let Some(bw) = process_bw_mib_s(bytes.value(i), xfer.value(i)) else {
                continue;
            };
            if host.value(i).is_empty() {
                continue;
            }
            let e = acc
                .entry(op.value(i).to_string())
                .or_default()
                .entry(host.value(i).to_string())
                .or_default();
            e.0 += bw;
            e.1 += 1;
        }
    }
    acc.into_iter()
        .map(|(op, nodes)| {
            let m = nodes
                .into_iter()
                .map(|(n, (sum, k))| (n, sum / k as f64))
                .collect();
            (op, m)
        })
        .collect()
}

/// The per-node I/O checks of a run's `io_task_times` rows.
pub fn io_node_checks(batches: &[RecordBatch], cfg: &IoNodeConfig) -> Vec<NodeRow> {
    let mut out = Vec::new();
    for (op, nodes) in node_bandwidths(batches) {
        let bound = match op.as_str() {
            "write" => cfg.write_min,
            "read" => cfg.read_min,
            _ => continue,
        };
        let mut all: Vec<f64> = nodes.values().copied().collect();
        let med = median(&mut all);
        for (node, bw) in &nodes {
            if let Some(min) = bound {
                let ok = *bw >= min;
                out.push(
                    NodeRow::new(
                        node,
                        &format!("node.{op}_bw_mib_s"),
                        ok,
                        Some(*bw),
                        Some(min),
                    )
                    .unit("MiB/s")
                    .message(format!(
                        "{op} {bw:.1} MiB/s per process {} the bound {min} MiB/s",
                        if ok { "meets" } else { "is below" }
                    )),
                );
            }
            if let Some(m) = med.filter(|_| nodes.len() >= 2 && cfg.min_fraction > 0.0) {
                let r = cfg.min_fraction * m;
                let ok = *bw >= r;
                out.push(
                    NodeRow::new(
                        node,
                        &format!("node.{op}_bw_of_median"),
                        ok,
                        Some(*bw),
                        Some(r),
                    )
                    .unit("MiB/s")
                    .message(format!(
                        "{op} {bw:.1} MiB/s per process, {} {} × the median node's {m:.1} MiB/s",
                        if ok { "at least" } else { "below" },
                        cfg.min_fraction
                    )),
                );
            }
        }
    }
    out
}

/// `check_node_slow_pair_fraction` of a run's parameters.
pub fn slow_pair_fraction(params: &BTreeMap<String, String>) -> Result<f64, String> {
    let f = num(params, "check_node_slow_pair_fraction")?.unwrap_or(DEFAULT_SLOW_PAIR_FRACTION);
    if f > 1.0 {
        return Err(format!(
            "params.check_node_slow_pair_fraction: {f} is above 1"
        ));
    }
    Ok(f)
}

/// The per-host LinkTest check: each host's share of slow pairs among the
/// pairs it took part in (`linktest_ranks` names the host of each rank of
/// each source file). A pair is slow against the median pair of its own
/// file (a size sweep writes one file per message size). None of the rows
/// when no rank names a host.
pub fn linktest_node_checks(
    ranks: &[RecordBatch],
    timings: &[RecordBatch],
    slow: &crate::linktest_checks::SlowPair,
    max_fraction: f64,
) -> Vec<NodeRow> {
    // Hosts and sources as small numbers: a 512-rank run has 261,632 pairs.
    let mut hosts: Vec<String> = Vec::new();
    let mut host_ix: std::collections::HashMap<String, usize> = Default::default();
    let mut sources: Vec<String> = Vec::new();
    // source → rank → host number.
    let mut host_of: std::collections::HashMap<String, std::collections::HashMap<i64, usize>> =
        Default::default();
    for b in ranks {
        let (Some(src), Some(rank), Some(host)) = (
            text_col(b, "source"),
            f64_col(b, "rank"),
            text_col(b, "hostname"),
        ) else {
            continue;
        };
        for i in 0..b.num_rows() {
            if src.is_valid(i) && rank.is_valid(i) && host.is_valid(i) && !host.value(i).is_empty()
            {
                let name = host.value(i);
                let h = match host_ix.get(name) {
                    Some(&h) => h,
                    None => {
                        hosts.push(name.to_string());
                        host_ix.insert(name.to_string(), hosts.len() - 1);
                        hosts.len() - 1
                    }
                };
                host_of
                    .entry(src.value(i).to_string())
                    .or_default()
                    .insert(rank.value(i) as i64, h);
            }
        }
    }
    if host_of.is_empty() {
        return Vec::new();
    }
    // (host a, host b, time, source) per measured pair.
    let mut pairs: Vec<(usize, usize, f64, usize)> = Vec::new();
    for b in timings {
        let (Some(src), Some(from), Some(to), Some(t)) = (
            text_col(b, "source"),
            f64_col(b, "from_rank"),
            f64_col(b, "to_rank"),
            f64_col(b, "time_s"),
        ) else {
            continue;
        };
        let mut last: Option<(usize, &std::collections::HashMap<i64, usize>)> = None;
        for i in 0..b.num_rows() {
            if !(src.is_valid(i) && from.is_valid(i) && to.is_valid(i) && t.is_valid(i)) {
                continue;
            }
            let name = src.value(i);
            let (sx, map) = match last {
                Some((sx, m)) if sources.get(sx).is_some_and(|x| x == name) => (sx, m),
                _ => {
                    let Some(m) = host_of.get(name) else {
                        continue;
                    };
                    let sx = match sources.iter().position(|x| x == name) {
                        Some(k) => k,
                        None => {
                            sources.push(name.to_string());
                            sources.len() - 1
                        }
                    };
                    last = Some((sx, m));
                    (sx, m)
                }
            };
            let (Some(&a), Some(&h)) = (
                map.get(&(from.value(i) as i64)),
                map.get(&(to.value(i) as i64)),
            ) else {
                continue;
            };
            pairs.push((a, h, t.value(i), sx));
        }
    }
    let mut by_source: Vec<Vec<f64>> = vec![Vec::new(); sources.len()];
    for p in &pairs {
        by_source[p.3].push(p.2);
    }
    let mut threshold_of: Vec<Option<f64>> = vec![None; sources.len()];
    let mut medians = Vec::new();
    for (k, times) in by_source.iter_mut().enumerate() {
        let Some(med) = median(times) else {
            continue;
        };
        medians.push(med);
        threshold_of[k] = Some(slow.threshold(med));
    }
    if medians.is_empty() {
        return Vec::new();
    }
    let rule = match (slow.time_s, medians.as_slice()) {
        (Some(t), _) => format!("slower than {t} s"),
        (None, [med]) => format!(
            "slower than {} × the median pair ({med:.3e} s)",
            slow.factor
        ),
        (None, _) => format!(
            "slower than {} × the median pair of their file ({} files)",
            slow.factor,
            medians.len()
        ),
    };
    let mut per_host: Vec<(u64, u64)> = vec![(0, 0); hosts.len()];
    for &(a, b, t, src) in &pairs {
        let is_slow = threshold_of[src].is_some_and(|th| t > th);
        let mut count = |h: usize| {
            let e = &mut per_host[h];
            e.0 += 1;
            e.1 += u64::from(is_slow);
        };
        count(a);
        if b != a {
            count(b);
        }
    }
    let mut named: Vec<(&str, (u64, u64))> = hosts
        .iter()
        .map(String::as_str)
        .zip(per_host)
        .filter(|(_, (total, _))| *total > 0)
        .collect();
    named.sort_by(|x, y| x.0.cmp(y.0));
    named
        .into_iter()
        .map(|(h, (total, slow_n))| {
            let f = slow_n as f64 / total as f64;
            let ok = f <= max_fraction;
            NodeRow::new(
                h,
                "node.linktest_slow_pair_fraction",
                ok,
                Some(f),
                Some(max_fraction),
            )
            .unit("fraction")
            .message(format!(
                "{slow_n} of its {total} pairs {rule}{}",
                if ok { "" } else { ": the host is the suspect" }
            ))
        })
        .collect()
}

/// Parameters of the traced runs' rank-time check (skipped by the run-level
/// `check_*` parser).
pub const RANK_TIME_PARAMS: &[&str] = &[
    "check_rank_time_mads",
    "check_rank_time_min_excess",
    "check_rank_time_min_excess_s",
];

/// Name of the traced runs' rank-time check.
pub const RANK_TIME_CHECK: &str = "traced.rank_time";

/// Default of `check_rank_time_mads`.
pub const DEFAULT_RANK_TIME_MADS: f64 = 5.0;
/// Default of `check_rank_time_min_excess`.
pub const DEFAULT_RANK_TIME_MIN_EXCESS: f64 = 0.5;
/// Default of `check_rank_time_min_excess_s`.
pub const DEFAULT_RANK_TIME_MIN_EXCESS_S: f64 = 0.01;

/// The bound of the rank-time check: a rank is slow when its computation
/// exceeds the reference median by more than the largest of `mads` scaled
/// MADs (1.4826 × MAD, the normal-consistent spread), `min_excess` × the
/// median and `min_excess_s`.
#[derive(Debug, Clone, PartialEq)]
pub struct RankTimeConfig {
    pub mads: f64,
    pub min_excess: f64,
    pub min_excess_s: f64,
}

impl Default for RankTimeConfig {
    fn default() -> Self {
        Self {
            mads: DEFAULT_RANK_TIME_MADS,
            min_excess: DEFAULT_RANK_TIME_MIN_EXCESS,
            min_excess_s: DEFAULT_RANK_TIME_MIN_EXCESS_S,
        }
    }
}

impl RankTimeConfig {
    /// From a run's parameters; an error names the parameter.
    pub fn from_params(params: &BTreeMap<String, String>) -> Result<Self, String> {
        Ok(Self {
            mads: num(params, "check_rank_time_mads")?.unwrap_or(DEFAULT_RANK_TIME_MADS),
            min_excess: num(params, "check_rank_time_min_excess")?
                .unwrap_or(DEFAULT_RANK_TIME_MIN_EXCESS),
            min_excess_s: num(params, "check_rank_time_min_excess_s")?
                .unwrap_or(DEFAULT_RANK_TIME_MIN_EXCESS_S),
        })
    }
}

/// One rank of a traced run as the rank-time check reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct RankWork {
    pub rank: u32,
    /// The rank's node (`mpi_trace_ranks.node`).
    pub node: String,
    /// Measured computation in the traced window (s).
    pub comp_s: f64,
    /// What the rank did: its number of calls of every MPI routine (ranks
    /// with equal vectors are compared).
    pub work: Vec<u64>,
}

/// The `rank → node` map of `mpi_trace_ranks` batches.
pub fn trace_rank_nodes(batches: &[RecordBatch]) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for b in batches {
        let (Some(rank), Some(node)) = (f64_col(b, "rank"), text_col(b, "node")) else {
            continue;
        };
        for i in 0..b.num_rows() {
            if rank.is_valid(i) && node.is_valid(i) && !node.value(i).is_empty() {
                let r = rank.value(i);
                if r >= 0.0 && r <= u32::MAX as f64 {
                    out.insert(r as u32, node.value(i).to_string());
                }
            }
        }
    }
    out
}

/// The rank-time check of a traced run: one row per node with a judged
/// rank (value: the computation of its rank furthest over or nearest to its
/// bound, reference: that bound), none when the ranks ran on one node, one
/// ERROR row on `*` when they ran on several but no rank could be compared
/// with a rank of another node doing the same work.
pub fn rank_time_checks(ranks: &[RankWork], cfg: &RankTimeConfig) -> Vec<NodeRow> {
    let nodes: std::collections::BTreeSet<&str> = ranks.iter().map(|r| r.node.as_str()).collect();
    if nodes.len() < 2 {
        return Vec::new();
    }
    // node → (worst ratio, rank, comp, bound, median, reference ranks, over, judged)
    struct Worst {
        ratio: f64,
        rank: u32,
        comp: f64,
        bound: f64,
        median: f64,
        refs: usize,
        over: usize,
        judged: usize,
    }
    let mut per_node: BTreeMap<&str, Worst> = BTreeMap::new();
    for r in ranks.iter().filter(|r| r.comp_s.is_finite()) {
        let mut refs: Vec<f64> = ranks
            .iter()
            .filter(|o| o.node != r.node && o.work == r.work && o.comp_s.is_finite())
            .map(|o| o.comp_s)
            .collect();
        let n_refs = refs.len();
        let Some(med) = median(&mut refs) else {
            continue;
        };
        let mut dev: Vec<f64> = refs.iter().map(|v| (v - med).abs()).collect();
        let mad = median(&mut dev).unwrap_or(0.0);
        let excess = (cfg.mads * 1.4826 * mad)
            .max(cfg.min_excess * med)
            .max(cfg.min_excess_s);
        let bound = med + excess;
        let ratio = if bound > 0.0 { r.comp_s / bound } else { 0.0 };
        let over = r.comp_s > bound;
        let w = per_node.entry(r.node.as_str()).or_insert(Worst {
            ratio: f64::NEG_INFINITY,
            rank: r.rank,
            comp: r.comp_s,
            bound,
            median: med,
            refs: n_refs,
            over: 0,
            judged: 0,
        });
        w.judged += 1;
        w.over += usize::from(over);
        if ratio > w.ratio {
            (w.ratio, w.rank, w.comp, w.bound, w.median, w.refs) =
                (ratio, r.rank, r.comp_s, bound, med, n_refs);
        }
    }
    if per_node.is_empty() {
        return vec![NodeRow {
            node: "*".into(),
            check: RANK_TIME_CHECK.into(),
            status: "ERROR".into(),
            value: None,
            reference: None,
            unit: "s".into(),
            message: format!(
                "no rank could be compared: the ranks of the {} nodes do different work (different MPI call counts)",
                nodes.len()
            ),
            regression: None,
        }];
    }
    per_node
        .into_iter()
        .map(|(node, w)| {
            let ok = w.over == 0;
            NodeRow::new(node, RANK_TIME_CHECK, ok, Some(w.comp), Some(w.bound))
                .unit("s")
                .message(format!(
                    "{} of its {} ranks over the bound; rank {} computed {:.4} s, bound {:.4} s (median {:.4} s of {} ranks of other nodes doing the same work + max({} MADs, {} × median, {} s))",
                    w.over, w.judged, w.rank, w.comp, w.bound, w.median, w.refs,
                    cfg.mads, cfg.min_excess, cfg.min_excess_s
                ))
        })
        .collect()
}

/// An ERROR row of the rank-time check that could not be evaluated (its
/// inputs unreadable): on the node `*`, like [`config_error`].
pub fn rank_time_error(message: String) -> NodeRow {
    NodeRow {
        check: RANK_TIME_CHECK.into(),
        ..config_error(message)
    }
}

/// An ERROR row for a node-level check that could not be evaluated (bad
/// parameters): it names no node (`*`), so it counts toward the run's
/// verdict and never drains one.
pub fn config_error(message: String) -> NodeRow {
    NodeRow {
        node: "*".into(),
        check: "node.config".into(),
        status: "ERROR".into(),
        value: None,
        reference: None,
        unit: String::new(),
        message,
        regression: None,
    }
}

/// The `node_health` batch of `rows`.
pub fn to_batch(
    run_id: &str,
    source: &str,
    rows: &[NodeRow],
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let s = |f: &dyn Fn(&NodeRow) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(f)))
    };
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|_| run_id))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|_| source))),
        s(&|r| &r.node),
        s(&|r| &r.check),
        s(&|r| &r.status),
        Arc::new(rows.iter().map(|r| r.value).collect::<Float64Array>()),
        Arc::new(rows.iter().map(|r| r.reference).collect::<Float64Array>()),
        s(&|r| &r.unit),
        s(&|r| &r.message),
    ];
    cols.extend(crate::changepoint::columns(
        rows.iter().map(|r| r.regression.as_ref()),
    ));
    let schema = catalog::schema("node_health")
        .map_err(|e| arrow::error::ArrowError::SchemaError(e.to_string()))?;
    RecordBatch::try_new(schema, cols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{Field, Schema};

    fn p(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn facts(node: &str, cores: i64, mem: i64, kernel: &str) -> NodeFacts {
        NodeFacts {
            cpu_model: "EPYC".into(),
            node: node.into(),
            cores,
            memory_bytes: mem,
            kernel_release: kernel.into(),
        }
    }

    #[test]
    fn facts_against_expectations_pass_and_fail_per_node() {
        let e = FactsExpect::from_params(&p(&[
            ("expect_cores", "64"),
            ("expect_memory_bytes", "274877906944"),
            ("expect_kernel", "6.1.0-18-amd64"),
        ]))
        .unwrap();
        assert_eq!(e.memory_tolerance, 0.05);
        let gb = 1i64 << 30;
        let rows = facts_checks(
            &[
                facts("n1", 64, 256 * gb, "6.1.0-18-amd64"),
                facts("n2", 62, 250 * gb, "6.1.0-18-amd64"),
                facts("n3", 64, 128 * gb, "6.1.0-17-amd64"),
            ],
            &e,
        );
        assert_eq!(rows.len(), 9, "three checks per node, PASS rows included");
        let st = |n: &str, c: &str| {
            rows.iter()
                .find(|r| r.node == n && r.check == c)
                .map(|r| r.status.as_str())
                .unwrap()
        };
        assert_eq!(st("n1", "node.cores"), "PASS");
        assert_eq!(st("n2", "node.cores"), "FAIL");
        // 250 GiB is within 5 % of 256 GiB; 128 GiB is not.
        assert_eq!(st("n2", "node.memory_bytes"), "PASS");
        assert_eq!(st("n3", "node.memory_bytes"), "FAIL");
        assert_eq!(st("n3", "node.kernel"), "FAIL");
        let r = rows
            .iter()
            .find(|r| r.node == "n2" && r.check == "node.cores")
            .unwrap();
        assert_eq!((r.value, r.reference), (Some(62.0), Some(64.0)));
        assert_eq!(r.message, "62 cores online, expected 64");
        assert!(facts_checks(&[facts("n1", 1, 1, "k")], &FactsExpect::default()).is_empty());
    }

    #[test]
    fn bad_expectations_name_the_parameter() {
        for (k, v) in [
            ("expect_cores", "many"),
            ("expect_cores", "0"),
            ("expect_memory_bytes", "-5"),
            ("expect_memory_tolerance", "2"),
        ] {
            let e = FactsExpect::from_params(&p(&[(k, v)])).unwrap_err();
            assert!(e.contains(k), "{e}");
        }
        let e = IoNodeConfig::from_params(&p(&[("check_node_min_fraction", "x")])).unwrap_err();
        assert!(e.contains("check_node_min_fraction"), "{e}");
    }

    fn facts_batch(rows: &[(&str, Option<&str>, i64)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("hostname", DataType::Utf8, false),
            Field::new("kernel_release", DataType::Utf8, false),
            Field::new("cores", DataType::Int64, false),
            Field::new("memory_bytes", DataType::Int64, false),
            Field::new("node", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|_| "k"))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|_| 1))),
                Arc::new(rows.iter().map(|r| r.1).collect::<StringArray>()),
            ],
        )
        .unwrap()
    }

    #[test]
    fn the_slurm_node_name_wins_then_the_agent_then_the_host() {
        let b = facts_batch(&[("host", Some("n2"), 4), ("host", None, 8)]);
        let f = node_facts(std::slice::from_ref(&b), "agent-a").unwrap();
        assert_eq!(f[0].node, "n2");
        assert_eq!(f[1].node, "agent-a");
        assert_eq!(f[1].cores, 8);
        let f = node_facts(&[b], "").unwrap();
        assert_eq!(f[1].node, "host");
    }

    fn times(rows: &[(&str, Option<&str>, i64, f64)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("operation", DataType::Utf8, false),
            Field::new("host", DataType::Utf8, true),
            Field::new("bytes", DataType::Int64, true),
            Field::new("xfer_time_s", DataType::Float64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(rows.iter().map(|r| r.1).collect::<StringArray>()),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
                Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.3))),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_slow_node_fails_against_the_median_node_and_the_bound() {
        let mib = 1i64 << 20;
        // Two processes per node; n3 writes at a quarter of the others' speed.
        let b = times(&[
            ("write", Some("n1"), 100 * mib, 1.0),
            ("write", Some("n1"), 100 * mib, 0.5),
            ("write", Some("n2"), 100 * mib, 1.0),
            ("write", Some("n2"), 100 * mib, 1.0),
            ("write", Some("n3"), 100 * mib, 4.0),
            ("write", Some("n3"), 100 * mib, 4.0),
            ("write", None, 100 * mib, 4.0),
            ("read", Some("n1"), 100 * mib, 0.0),
        ]);
        let bw = node_bandwidths(std::slice::from_ref(&b));
        assert_eq!(bw["write"]["n1"], 150.0);
        assert_eq!(bw["write"]["n3"], 25.0);
        assert!(!bw.contains_key("read"), "no positive transfer time");
        let cfg = IoNodeConfig::from_params(&p(&[("check_node_write_bw_mib_s", "30")])).unwrap();
        let rows = io_node_checks(&[b], &cfg);
        let get = |n: &str, c: &str| rows.iter().find(|r| r.node == n && r.check == c).unwrap();
        let r = get("n3", "node.write_bw_of_median");
        assert_eq!(r.status, "FAIL");
        assert_eq!((r.value, r.reference), (Some(25.0), Some(50.0)));
        assert_eq!(get("n1", "node.write_bw_of_median").status, "PASS");
        assert_eq!(get("n3", "node.write_bw_mib_s").status, "FAIL");
        assert_eq!(get("n2", "node.write_bw_mib_s").status, "PASS");
        assert_eq!(rows.len(), 6);
    }

    #[test]
    fn one_node_is_not_compared_with_itself() {
        let b = times(&[("write", Some("n1"), 1 << 20, 1.0)]);
        assert!(io_node_checks(&[b], &IoNodeConfig::default()).is_empty());
    }

    #[test]
    fn the_slow_host_of_a_linktest_run_is_the_suspect() {
        use benchlake_formats::linktest::{synth, tables};
        // 32 ranks on 8 hosts; synth makes every link of node0001 4x slower.
        let run = synth::synthetic_run(32, 4, 5);
        let out = tables::run_tables(&run, "R", "raw/R/t/x.sion").unwrap();
        let get = |n: &str| {
            out.iter()
                .find(|t| t.table == n)
                .map(|t| t.batches.clone())
                .unwrap()
        };
        let rows = linktest_node_checks(
            &get("linktest_ranks"),
            &get("linktest_timings"),
            &crate::linktest_checks::SlowPair::default(),
            DEFAULT_SLOW_PAIR_FRACTION,
        );
        assert_eq!(rows.len(), 8, "one row per host");
        let failing: Vec<&str> = rows
            .iter()
            .filter(|r| r.status == "FAIL")
            .map(|r| r.node.as_str())
            .collect();
        assert_eq!(failing, ["node0001"]);
        let bad = rows.iter().find(|r| r.node == "node0001").unwrap();
        assert!(bad.value.unwrap() > 0.7, "{bad:?}");
        for r in rows.iter().filter(|r| r.node != "node0001") {
            assert!(r.value.unwrap() < 0.25, "{r:?}");
        }
        // An absolute threshold above every pair: nobody is slow.
        let rows = linktest_node_checks(
            &get("linktest_ranks"),
            &get("linktest_timings"),
            &crate::linktest_checks::SlowPair {
                factor: 2.0,
                time_s: Some(1.0),
            },
            0.5,
        );
        assert!(
            rows.iter()
                .all(|r| r.status == "PASS" && r.value == Some(0.0))
        );
        assert!(
            linktest_node_checks(&[], &get("linktest_timings"), &Default::default(), 0.5)
                .is_empty()
        );
        let e = slow_pair_fraction(&p(&[("check_node_slow_pair_fraction", "1.5")])).unwrap_err();
        assert!(e.contains("check_node_slow_pair_fraction"), "{e}");
    }

    /// A size sweep (netprobe's `message_sizes`: one file per size): a pair
    /// is judged against the median of its own file, so the larger size's
    /// pairs do not all count as slow.
    #[test]
    fn a_sweep_judges_each_file_against_its_own_median() {
        use benchlake_formats::linktest::{synth, tables};
        let small = synth::synthetic_run(32, 4, 5);
        let mut large = small.clone();
        for p in &mut large.permutations {
            for t in &mut p.times {
                *t *= 100.0;
            }
        }
        let mut ranks = Vec::new();
        let mut timings = Vec::new();
        for (run, src) in [
            (small, "raw/R/t/pp_8B.sion"),
            (large, "raw/R/t/pp_1048576B.sion"),
        ] {
            for t in tables::run_tables(&run, "R", src).unwrap() {
                match t.table.as_str() {
                    "linktest_ranks" => ranks.extend(t.batches),
                    "linktest_timings" => timings.extend(t.batches),
                    _ => {}
                }
            }
        }
        let rows = linktest_node_checks(
            &ranks,
            &timings,
            &crate::linktest_checks::SlowPair::default(),
            DEFAULT_SLOW_PAIR_FRACTION,
        );
        let failing: Vec<&str> = rows
            .iter()
            .filter(|r| r.status == "FAIL")
            .map(|r| r.node.as_str())
            .collect();
        assert_eq!(failing, ["node0001"], "{rows:?}");
        for r in rows.iter().filter(|r| r.node != "node0001") {
            assert!(r.value.unwrap() < 0.25, "{r:?}");
            assert!(r.message.contains("of their file (2 files)"), "{r:?}");
        }
    }

    fn rw(rank: u32, node: &str, comp_s: f64, work: &[u64]) -> RankWork {
        RankWork {
            rank,
            node: node.into(),
            comp_s,
            work: work.to_vec(),
        }
    }

    #[test]
    fn a_slow_rank_fails_its_node_against_other_nodes_doing_the_same_work() {
        let cfg = RankTimeConfig::default();
        // Two ranks per node; n3's rank 5 computes 3x longer. Rank 0 (a
        // root with other call counts) computes more by design: never judged
        // against the others, and alone of its kind.
        let ranks = [
            rw(0, "n1", 9.0, &[1, 3]),
            rw(1, "n1", 1.00, &[3, 3]),
            rw(2, "n2", 1.02, &[3, 3]),
            rw(3, "n2", 0.98, &[3, 3]),
            rw(4, "n3", 1.01, &[3, 3]),
            rw(5, "n3", 3.0, &[3, 3]),
        ];
        let rows = rank_time_checks(&ranks, &cfg);
        let st: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.node.as_str(), r.status.as_str()))
            .collect();
        assert_eq!(st, [("n1", "PASS"), ("n2", "PASS"), ("n3", "FAIL")]);
        let n3 = &rows[2];
        // Reference of rank 5: ranks 1-3 (1.00, 1.02, 0.98): median 1.00,
        // MAD 0.02 → 5 × 1.4826 × 0.02 = 0.148 < 0.5 × 1.00: bound 1.5.
        assert_eq!(n3.value, Some(3.0));
        assert!((n3.reference.unwrap() - 1.5).abs() < 1e-12, "{n3:?}");
        assert!(
            n3.message
                .starts_with("1 of its 2 ranks over the bound; rank 5"),
            "{}",
            n3.message
        );
        assert_eq!(n3.check, "traced.rank_time");
        assert_eq!(n3.unit, "s");
        // n1: only rank 1 is judged (rank 0's work is unique).
        assert!(
            rows[0].message.starts_with("0 of its 1 ranks"),
            "{}",
            rows[0].message
        );
        // A wide spread widens the bound: 5 MADs of (1, 2, 3) = 5 × 1.4826.
        let spread = [
            rw(0, "a", 1.0, &[1]),
            rw(1, "b", 2.0, &[1]),
            rw(2, "c", 3.0, &[1]),
            rw(3, "d", 8.0, &[1]),
        ];
        let rows = rank_time_checks(&spread, &cfg);
        let d = rows.iter().find(|r| r.node == "d").unwrap();
        assert_eq!(d.status, "PASS", "{d:?}");
        assert!((d.reference.unwrap() - (2.0 + 5.0 * 1.4826)).abs() < 1e-9);
        let tight = RankTimeConfig {
            mads: 1.0,
            ..cfg.clone()
        };
        let rows = rank_time_checks(&spread, &tight);
        assert_eq!(rows.iter().find(|r| r.node == "d").unwrap().status, "FAIL");
    }

    #[test]
    fn rank_time_needs_two_nodes_and_comparable_work() {
        let cfg = RankTimeConfig::default();
        // One node: nothing to compare with.
        assert!(
            rank_time_checks(&[rw(0, "n1", 1.0, &[1]), rw(1, "n1", 9.0, &[1])], &cfg).is_empty()
        );
        // Two nodes whose ranks do different work: one ERROR on `*`.
        let rows = rank_time_checks(&[rw(0, "n1", 1.0, &[1]), rw(1, "n2", 1.0, &[2])], &cfg);
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].node.as_str(), rows[0].status.as_str()),
            ("*", "ERROR")
        );
        // Two nodes: the slow one fails, the other passes; tiny times stay
        // under the absolute floor.
        let rows = rank_time_checks(&[rw(0, "n1", 1.0, &[1]), rw(1, "n2", 2.0, &[1])], &cfg);
        assert_eq!(rows[0].status, "PASS");
        assert_eq!(rows[1].status, "FAIL");
        let rows = rank_time_checks(&[rw(0, "n1", 0.001, &[1]), rw(1, "n2", 0.004, &[1])], &cfg);
        assert!(rows.iter().all(|r| r.status == "PASS"), "{rows:?}");
        let e = RankTimeConfig::from_params(&p(&[("check_rank_time_mads", "-1")])).unwrap_err();
        assert!(e.contains("check_rank_time_mads"), "{e}");
        let c = RankTimeConfig::from_params(&p(&[("check_rank_time_min_excess", "0.25")])).unwrap();
        assert_eq!((c.mads, c.min_excess, c.min_excess_s), (5.0, 0.25, 0.01));
    }

    #[test]
    fn rows_make_a_node_health_batch() {
        let rows = facts_checks(
            &[facts("n1", 2, 1, "k")],
            &FactsExpect {
                cores: Some(4),
                ..Default::default()
            },
        );
        let b = to_batch("R", "raw/x", &rows).unwrap();
        assert_eq!(b.num_rows(), 1);
        assert_eq!(b.schema().field(2).name(), "node");
    }
}
