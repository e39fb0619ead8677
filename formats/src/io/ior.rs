//! IOR outputs: the JSON summary (`-O summaryFormat=JSON`) and the per-rank CSV
//! (`-O saveRankPerformanceDetailsCSV=F`). Schema and pitfalls: reference io.md §2.
//!
//! The JSON is read with typed serde structs, so a missing or mistyped field is
//! reported with its line and column. Numbers are IOR's `%.4f` prints (values
//! below 0.1 ms read as 0); the per-rank CSV (`%.10e`) is the precise source of
//! per-process times.
use std::path::Path;

use serde::Deserialize;

use crate::error::{FormatError, Position, Result};
use crate::io::text::{self, Field};

/// The whole JSON summary file.
#[derive(Debug, Clone, Deserialize)]
pub struct IorSummary {
    #[serde(rename = "Version")]
    pub version: String,
    #[serde(rename = "Began", default)]
    pub began: String,
    #[serde(rename = "Command line", default)]
    pub command_line: String,
    #[serde(rename = "Machine", default)]
    pub machine: String,
    pub tests: Vec<IorTest>,
    #[serde(default)]
    pub summary: Vec<IorOpSummary>,
    #[serde(rename = "Finished", default)]
    pub finished: String,
}

/// One test (one `-f` script section; normally exactly one).
#[derive(Debug, Clone, Deserialize)]
pub struct IorTest {
    #[serde(rename = "TestID")]
    pub test_id: i64,
    #[serde(rename = "StartTime", default)]
    pub start_time: String,
    #[serde(rename = "Path", default)]
    pub path: String,
    #[serde(rename = "Parameters")]
    pub parameters: IorParameters,
    #[serde(rename = "Options")]
    pub options: Option<IorOptions>,
    #[serde(rename = "Results", default)]
    pub results: Vec<IorResult>,
}

/// The `Parameters` block (the integers this reader needs; others are ignored).
/// Sizes and the API are required; flags absent in other IOR versions read as 0.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IorParameters {
    pub api: String,
    #[serde(default)]
    pub test_file_name: String,
    #[serde(default)]
    pub nodes: i64,
    #[serde(default)]
    pub tasks_per_node: i64,
    #[serde(default)]
    pub repetitions: i64,
    #[serde(default)]
    pub fsync: i64,
    #[serde(default)]
    pub fsyncperwrite: i64,
    #[serde(default)]
    pub file_per_proc: i64,
    #[serde(default)]
    pub reorder_tasks: i64,
    #[serde(default)]
    pub reorder_tasks_random: i64,
    #[serde(default)]
    pub random_offset: i64,
    #[serde(default)]
    pub collective: i64,
    /// `-D`: a write phase stopped after this many seconds moves fewer
    /// bytes than the parameters say.
    #[serde(default)]
    pub deadline_for_stonewall: i64,
    pub segment_count: i64,
    pub transfer_size: i64,
    pub block_size: i64,
}

/// The `Options` block (human-style setup; only the task count is used).
#[derive(Debug, Clone, Deserialize)]
pub struct IorOptions {
    pub api: String,
    pub tasks: i64,
    pub nodes: i64,
    pub access: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(rename = "ordering in a file", default)]
    pub ordering_in_file: String,
}

/// One `Results[]` record: one access of one iteration.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IorResult {
    pub access: String,
    #[serde(rename = "bwMiB", default)]
    pub bw_mib: Option<f64>,
    #[serde(rename = "blockKiB", default)]
    pub block_kib: Option<f64>,
    #[serde(rename = "xferKiB", default)]
    pub xfer_kib: Option<f64>,
    #[serde(default)]
    pub iops: Option<f64>,
    #[serde(default)]
    pub latency: Option<f64>,
    #[serde(default)]
    pub open_time: Option<f64>,
    #[serde(default)]
    pub wr_rd_time: Option<f64>,
    #[serde(default)]
    pub close_time: Option<f64>,
    pub total_time: f64,
}

/// One `summary[]` record: one test × operation over all iterations.
#[derive(Debug, Clone, Deserialize)]
pub struct IorOpSummary {
    pub operation: String,
    #[serde(rename = "API")]
    pub api: String,
    #[serde(rename = "TestID")]
    pub test_id: i64,
    #[serde(rename = "segmentCount")]
    pub segment_count: i64,
    #[serde(rename = "blockSize")]
    pub block_size: i64,
    #[serde(rename = "transferSize")]
    pub transfer_size: i64,
    #[serde(rename = "numTasks")]
    pub num_tasks: i64,
    #[serde(rename = "repetitions")]
    pub repetitions: i64,
    #[serde(rename = "bwMaxMIB")]
    pub bw_max_mib: f64,
    #[serde(rename = "bwMinMIB")]
    pub bw_min_mib: f64,
    #[serde(rename = "bwMeanMIB")]
    pub bw_mean_mib: f64,
    #[serde(rename = "bwStdMIB")]
    pub bw_std_mib: f64,
    #[serde(rename = "OPsMax")]
    pub ops_max: f64,
    #[serde(rename = "OPsMin")]
    pub ops_min: f64,
    #[serde(rename = "OPsMean")]
    pub ops_mean: f64,
    #[serde(rename = "OPsSD")]
    pub ops_sd: f64,
    #[serde(rename = "MeanTime")]
    pub mean_time: f64,
    #[serde(rename = "xsizeMiB")]
    pub xsize_mib: f64,
}

impl IorTest {
    /// Number of processes: `Options.tasks`, else `nodes × tasksPerNode`.
    pub fn num_tasks(&self) -> i64 {
        match &self.options {
            Some(o) if o.tasks > 0 => o.tasks,
            _ => self
                .parameters
                .nodes
                .saturating_mul(self.parameters.tasks_per_node),
        }
    }

    /// The access pattern in the seed's vocabulary where IOR has one: `-s 1` is
    /// SEGMENTED, `-s k` STRIDED (no padding). IOR's `-z` shuffles offsets, which
    /// is not the seed's RANDOM (random sizes), so it gets its own name.
    pub fn pattern(&self) -> &'static str {
        match (
            self.parameters.random_offset != 0,
            self.parameters.segment_count > 1,
        ) {
            (true, false) => "random_offset",
            (true, true) => "random_offset_strided",
            (false, false) => "segmented",
            (false, true) => "strided",
        }
    }

    /// The `(iteration, record)` pairs of write/read records; IOR stores no
    /// iteration index, so it is the record's rank among records of its access.
    /// `remove` records (verbose ≥ 1, only a total time) are left out.
    pub fn iterations(&self) -> Vec<(i64, &IorResult)> {
        let (mut w, mut r) = (0i64, 0i64);
        let mut out = Vec::new();
        for rec in &self.results {
            let counter = match rec.access.as_str() {
                "write" => &mut w,
                "read" => &mut r,
                _ => continue,
            };
            out.push((*counter, rec));
            *counter += 1;
        }
        out
    }
}

/// Parses an IOR JSON summary.
pub fn parse_json(path: &Path, bytes: &[u8]) -> Result<IorSummary> {
    let s: IorSummary =
        serde_json::from_slice(bytes).map_err(|e| text::json_err(path, "IOR JSON summary", &e))?;
    validate(&s).map_err(|(field, msg)| {
        FormatError::malformed(
            path,
            field.clone(),
            Position::Offset(text::json_offset(bytes, &field)),
            msg,
        )
    })?;
    Ok(s)
}

/// The highest aggregate bandwidth accepted, MiB/s: 10^9 MiB/s, about a
/// PiB/s, a hundred times the fastest file systems of 2026.
pub const MAX_BW_MIB_S: f64 = 1e9;

/// Half a unit of IOR's `%.4f` prints, and a hair for the binary fraction.
const ROUND4: f64 = 0.00005 + 1e-12;

/// Rejects values no IOR run can print (negative sizes, unknown accesses), and
/// figures that disagree with the others IOR derives them with: the
/// bandwidth is the test's bytes over the total time, the IOPS its transfers
/// over the transfer time, the summary the statistics of the results, each
/// to the `%.4f` rounding of its print. The error is (JSON path, message).
fn validate(s: &IorSummary) -> Result<(), (String, String)> {
    let bad = |field: String, msg: String| Err((field, msg));
    // IOR prints at least one test with at least one result; a summary without
    // them is not a run's output (and would land as a run without rows).
    if s.tests.is_empty() {
        return bad("tests".to_string(), "no test in the summary".to_string());
    }
    for (ti, t) in s.tests.iter().enumerate() {
        if t.results.is_empty() {
            return bad(format!("tests[{ti}].Results"), "no result".to_string());
        }
        let p = &t.parameters;
        for (name, v) in [
            ("segmentCount", p.segment_count),
            ("transferSize", p.transfer_size),
            ("blockSize", p.block_size),
        ] {
            if v <= 0 {
                return bad(
                    format!("tests[{ti}].Parameters.{name}"),
                    format!("{v} is not positive"),
                );
            }
        }
        if p.block_size % p.transfer_size != 0 {
            return bad(
                format!("tests[{ti}].Parameters.blockSize"),
                format!(
                    "{} is not a multiple of transferSize {}, which IOR requires",
                    p.block_size, p.transfer_size
                ),
            );
        }
        if t.num_tasks() <= 0 {
            return bad(
                format!("tests[{ti}].Options.tasks"),
                "no task count".to_string(),
            );
        }
        if let Some(o) = &t.options
            && p.nodes > 0
            && p.tasks_per_node > 0
            && p.nodes.checked_mul(p.tasks_per_node) != Some(o.tasks)
        {
            return bad(
                format!("tests[{ti}].Options.tasks"),
                format!(
                    "{}, but Parameters say {} nodes of {} tasks",
                    o.tasks, p.nodes, p.tasks_per_node
                ),
            );
        }
        let n = t.num_tasks();
        let bytes = p
            .block_size
            .checked_mul(p.segment_count)
            .and_then(|b| b.checked_mul(n))
            .ok_or_else(|| {
                (
                    format!("tests[{ti}].Parameters.blockSize"),
                    "blockSize × segmentCount × tasks overflows".to_string(),
                )
            })? as f64;
        for (ri, r) in t.results.iter().enumerate() {
            let at = |f: &str| format!("tests[{ti}].Results[{ri}].{f}");
            if !matches!(r.access.as_str(), "write" | "read" | "remove") {
                return bad(at("access"), format!("unknown access '{}'", r.access));
            }
            let figures = [
                ("totalTime", Some(r.total_time)),
                ("bwMiB", r.bw_mib),
                ("iops", r.iops),
                ("latency", r.latency),
                ("openTime", r.open_time),
                ("wrRdTime", r.wr_rd_time),
                ("closeTime", r.close_time),
                ("blockKiB", r.block_kib),
                ("xferKiB", r.xfer_kib),
            ];
            for (name, v) in figures {
                if let Some(v) = v
                    && (!v.is_finite() || v < 0.0)
                {
                    return bad(at(name), format!("{v}: negative or not finite"));
                }
            }
            if r.access == "remove" {
                continue;
            }
            let Some(bw) = r.bw_mib else {
                return bad(at("bwMiB"), "missing".to_string());
            };
            if bw > MAX_BW_MIB_S {
                return bad(
                    at("bwMiB"),
                    format!("{bw} MiB/s: above {MAX_BW_MIB_S} MiB/s, no file system's"),
                );
            }
            for (name, v) in [
                ("openTime", r.open_time),
                ("wrRdTime", r.wr_rd_time),
                ("closeTime", r.close_time),
                ("latency", r.latency),
            ] {
                if let Some(v) = v
                    && v > r.total_time + 2.0 * ROUND4
                {
                    return bad(
                        at(name),
                        format!("{v} s, longer than the totalTime {} s", r.total_time),
                    );
                }
            }
            for (name, v, want) in [
                ("blockKiB", r.block_kib, p.block_size),
                ("xferKiB", r.xfer_kib, p.transfer_size),
            ] {
                if let Some(v) = v
                    && (v * 1024.0 - want as f64).abs() > 1024.0 * ROUND4
                {
                    return bad(
                        at(name),
                        format!("{v} KiB, but the parameters say {want} bytes"),
                    );
                }
            }
            // A stonewalled phase moves fewer bytes than the parameters say.
            if p.deadline_for_stonewall == 0 {
                let implied = bytes / 1048576.0 / bw;
                if !(implied - r.total_time)
                    .abs()
                    .le(&(ROUND4 + 1e-6 * implied))
                {
                    return bad(
                        at("bwMiB"),
                        format!(
                            "{bw} MiB/s: the test's {bytes} bytes in the totalTime {} s make {:.4}",
                            r.total_time,
                            bytes / 1048576.0 / r.total_time
                        ),
                    );
                }
                if let (Some(iops), Some(xfer)) = (r.iops, r.wr_rd_time) {
                    let implied = bytes / p.transfer_size as f64 / iops;
                    if !(implied - xfer).abs().le(&(ROUND4 + 1e-6 * implied)) {
                        return bad(
                            at("iops"),
                            format!(
                                "{iops}: the test's transfers in the wrRdTime {xfer} s make {:.4}",
                                bytes / p.transfer_size as f64 / xfer
                            ),
                        );
                    }
                }
            }
        }
    }
    for (si, m) in s.summary.iter().enumerate() {
        let at = |f: &str| format!("summary[{si}].{f}");
        let Some(t) = s.tests.iter().find(|t| t.test_id == m.test_id) else {
            return bad(at("TestID"), format!("no test {}", m.test_id));
        };
        let p = &t.parameters;
        for (name, v, want) in [
            ("segmentCount", m.segment_count, p.segment_count),
            ("blockSize", m.block_size, p.block_size),
            ("transferSize", m.transfer_size, p.transfer_size),
            ("numTasks", m.num_tasks, t.num_tasks()),
        ] {
            if v != want {
                return bad(at(name), format!("{v}, but the test's is {want}"));
            }
        }
        let bws: Vec<f64> = t
            .results
            .iter()
            .filter(|r| r.access == m.operation)
            .filter_map(|r| r.bw_mib)
            .collect();
        let times: Vec<f64> = t
            .results
            .iter()
            .filter(|r| r.access == m.operation)
            .map(|r| r.total_time)
            .collect();
        if m.repetitions != bws.len() as i64 {
            return bad(
                at("repetitions"),
                format!(
                    "{}, but the test has {} '{}' results",
                    m.repetitions,
                    bws.len(),
                    m.operation
                ),
            );
        }
        if bws.is_empty() {
            continue;
        }
        let k = bws.len() as f64;
        let mean = bws.iter().sum::<f64>() / k;
        let sd = (bws.iter().map(|b| (b - mean) * (b - mean)).sum::<f64>() / k).sqrt();
        let max = bws.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let min = bws.iter().copied().fold(f64::INFINITY, f64::min);
        let ops = 1048576.0 / m.transfer_size as f64;
        let xsize =
            (p.block_size as f64) * (p.segment_count as f64) * (t.num_tasks() as f64) / 1048576.0;
        for (name, v, want, tol) in [
            ("bwMaxMIB", m.bw_max_mib, max, 2.0 * ROUND4),
            ("bwMinMIB", m.bw_min_mib, min, 2.0 * ROUND4),
            ("bwMeanMIB", m.bw_mean_mib, mean, 3.0 * ROUND4),
            ("bwStdMIB", m.bw_std_mib, sd, 4.0 * ROUND4),
            ("OPsMax", m.ops_max, max * ops, ROUND4 * (1.0 + 2.0 * ops)),
            ("OPsMin", m.ops_min, min * ops, ROUND4 * (1.0 + 2.0 * ops)),
            (
                "OPsMean",
                m.ops_mean,
                mean * ops,
                ROUND4 * (1.0 + 3.0 * ops),
            ),
            ("OPsSD", m.ops_sd, sd * ops, ROUND4 * (1.0 + 4.0 * ops)),
            (
                "MeanTime",
                m.mean_time,
                times.iter().sum::<f64>() / k,
                3.0 * ROUND4,
            ),
            ("xsizeMiB", m.xsize_mib, xsize, 2.0 * ROUND4),
        ] {
            let stonewalled = name == "xsizeMiB" && p.deadline_for_stonewall != 0;
            if !stonewalled && !(v - want).abs().le(&(tol + 1e-9 * want.abs())) {
                return bad(
                    at(name),
                    format!("{v}, but the test's {} results give {want:.4}", m.operation),
                );
            }
        }
    }
    Ok(())
}

/// The header of IOR's per-rank CSV.
pub const RANK_CSV_HEADER: &str =
    "access,rank,runtime-with-openclose,runtime,throughput-withopenclose,throughput";

/// One line of the per-rank CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct IorRankRecord {
    pub access: String,
    pub rank: i32,
    /// Iteration index: IOR appends one block of lines per iteration, so this is
    /// the line's rank among lines of the same access and rank.
    pub iteration: i64,
    /// Open start to close stop (s).
    pub runtime_with_openclose: f64,
    /// Transfer phase (s).
    pub runtime: f64,
    /// Bytes/s including open and close.
    pub throughput_with_openclose: f64,
    /// Bytes/s of the transfer phase.
    pub throughput: f64,
}

/// Parses the per-rank CSV.
pub fn parse_rank_csv(path: &Path, text: &str) -> Result<Vec<IorRankRecord>> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim_end() == RANK_CSV_HEADER => {}
        _ => {
            return Err(FormatError::malformed(
                path,
                "header",
                Position::LineCol(1, 1),
                format!("expected '{RANK_CSV_HEADER}'"),
            ));
        }
    }
    text::require_complete(path, text, "row")?;
    let mut seen: std::collections::HashMap<(String, i32), i64> = Default::default();
    let mut out = Vec::new();
    // Each row's rank and four figures, for the checks across rows.
    let mut at: Vec<[Field<'_>; 5]> = Vec::new();
    for (i, line) in lines {
        let line_no = i as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        let f = text::split_fields(line.trim_end_matches('\r'), line_no, ',');
        if f.len() != 6 {
            return Err(FormatError::malformed(
                path,
                "row",
                Position::LineCol(line_no, 1),
                format!("{} fields, expected 6", f.len()),
            ));
        }
        let get = |k: usize| -> Result<Field<'_>> {
            f.get(k).copied().ok_or_else(|| {
                FormatError::malformed(path, "row", Position::LineCol(line_no, 1), "short row")
            })
        };
        let access = get(0)?;
        if !matches!(access.text, "write" | "read") {
            return Err(access.err(path, "access", format!("unknown access '{}'", access.text)));
        }
        let rank_f = get(1)?;
        let rank = i32::try_from(rank_f.i64(path, "rank")?)
            .ok()
            .filter(|r| *r >= 0)
            .ok_or_else(|| rank_f.err(path, "rank", "rank out of range"))?;
        let mut nums = [0.0f64; 4];
        for (k, name) in [
            "runtime-with-openclose",
            "runtime",
            "throughput-withopenclose",
            "throughput",
        ]
        .iter()
        .enumerate()
        {
            let fld = get(k + 2)?;
            let v = fld.f64(path, name)?;
            if v < 0.0 {
                return Err(fld.err(path, name, "negative"));
            }
            if let Some(slot) = nums.get_mut(k) {
                *slot = v;
            }
        }
        at.push([rank_f, get(2)?, get(3)?, get(4)?, get(5)?]);
        let counter = seen.entry((access.text.to_string(), rank)).or_insert(0);
        let iteration = *counter;
        *counter += 1;
        let [
            runtime_with_openclose,
            runtime,
            throughput_with_openclose,
            throughput,
        ] = nums;
        out.push(IorRankRecord {
            access: access.text.to_string(),
            rank,
            iteration,
            runtime_with_openclose,
            runtime,
            throughput_with_openclose,
            throughput,
        });
    }
    if out.is_empty() {
        return Err(text::no_rows(path, text, "row", "per-rank row"));
    }
    // IOR writes one row per rank, in rank order, for every access of every
    // repetition: a last group shorter than the one before was cut short.
    text::check_last_group(
        path,
        text,
        out.iter().map(|r| (r.access.as_str(), i64::from(r.rank))),
    )?;
    check_rank_rows(path, &out, &at)?;
    Ok(out)
}

/// The checks across the per-rank rows: every group of rows is ranks
/// 0..n-1 in order; a transfer phase lies within its open-to-close time;
/// and every throughput × its time is the same number of bytes, each
/// rank's share of the test (blockSize × segmentCount), to the `%.10e`
/// precision of the prints. The share is the figure most rows agree on.
fn check_rank_rows(path: &Path, out: &[IorRankRecord], at: &[[Field<'_>; 5]]) -> Result<()> {
    let n = out
        .iter()
        .map(|r| r.rank)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    for (k, (r, f)) in out.iter().zip(at).enumerate() {
        if usize::try_from(r.rank).ok() != Some(k % n) {
            return Err(f[0].err(
                path,
                "rank",
                format!(
                    "rank {} where the rows of {n} ranks put rank {}",
                    r.rank,
                    k % n
                ),
            ));
        }
        if r.runtime > r.runtime_with_openclose * (1.0 + 1e-9) {
            return Err(f[2].err(
                path,
                "runtime",
                format!(
                    "{} s, longer than the open-to-close time {} s",
                    r.runtime, r.runtime_with_openclose
                ),
            ));
        }
        for (v, fld) in [(r.throughput_with_openclose, &f[3]), (r.throughput, &f[4])] {
            if v > MAX_BW_MIB_S * 1048576.0 {
                return Err(fld.err(
                    path,
                    "throughput",
                    format!("{v} B/s: above {MAX_BW_MIB_S} MiB/s, no file system's"),
                ));
            }
        }
    }
    // Per group of n rows (one access of one iteration of one test: tests
    // of other sizes may follow).
    for (rows, fields) in out.chunks(n.max(1)).zip(at.chunks(n.max(1))) {
        let mut shares: Vec<(f64, &Field<'_>)> = Vec::new();
        for (r, f) in rows.iter().zip(fields) {
            for (thr, time, fld) in [
                (r.throughput_with_openclose, r.runtime_with_openclose, &f[3]),
                (r.throughput, r.runtime, &f[4]),
            ] {
                if thr.is_finite() && time > 0.0 {
                    shares.push((thr * time, fld));
                }
            }
        }
        let mut sorted: Vec<f64> = shares.iter().map(|s| s.0).collect();
        sorted.sort_by(f64::total_cmp);
        if let Some(&want) = sorted.get(sorted.len() / 2) {
            for (got, fld) in &shares {
                if (got - want).abs() > 1e-6 * want {
                    return Err(fld.err(
                        path,
                        "throughput",
                        format!(
                            "throughput × time = {got} bytes, where the other rows of its group move {want:.0} per rank"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}
