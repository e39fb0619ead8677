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
    validate(path, &s)?;
    Ok(s)
}

/// Rejects values no IOR run can print (negative sizes, unknown accesses), so
/// they never reach the lake as plausible numbers.
fn validate(path: &Path, s: &IorSummary) -> Result<()> {
    let bad =
        |field: String, msg: String| Err(FormatError::malformed(path, field, Position::None, msg));
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
        if t.num_tasks() <= 0 {
            return bad(
                format!("tests[{ti}].Options.tasks"),
                "no task count".to_string(),
            );
        }
        for (ri, r) in t.results.iter().enumerate() {
            if !matches!(r.access.as_str(), "write" | "read" | "remove") {
                return bad(
                    format!("tests[{ti}].Results[{ri}].access"),
                    format!("unknown access '{}'", r.access),
                );
            }
            let times = [r.total_time, r.bw_mib.unwrap_or(0.0)];
            if times.iter().any(|v| !v.is_finite() || *v < 0.0) {
                return bad(
                    format!("tests[{ti}].Results[{ri}]"),
                    "negative or non-finite time or bandwidth".to_string(),
                );
            }
            if r.access != "remove" && r.bw_mib.is_none() {
                return bad(
                    format!("tests[{ti}].Results[{ri}].bwMiB"),
                    "missing".to_string(),
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
    Ok(out)
}
