//! The result file of `pio`, benchlake's own parallel I/O benchmark: the format
//! is defined here (written by the `benchlake-pio` crate, read by the `pio`
//! ingest kind) so the writer and reader cannot drift apart.
//!
//! One JSON object, `"format": "benchlake-pio/1"`; documented field by field in
//! docs/io.md. Times are seconds; `*_start`/`*_stop` are Unix epoch seconds
//! from each process's real-time clock (cross-node figures assume synchronized
//! clocks, as IOR's gettimeofday does).
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{FormatError, Position, Result};
use crate::io::text;

/// The value of the `format` field this version writes and reads.
pub const FORMAT: &str = "benchlake-pio/1";

/// A whole pio result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioResult {
    /// Always [`FORMAT`].
    pub format: String,
    /// Version of the pio that wrote it.
    pub pio_version: String,
    /// RFC 3339 UTC.
    pub started_at: String,
    /// RFC 3339 UTC.
    pub finished_at: String,
    /// Every parameter with its resolved value and where it came from.
    pub params: Vec<PioParam>,
    /// `POSIX` (pio's only API).
    pub api: String,
    /// `segmented`, `strided`, `random` or `general`.
    pub pattern: String,
    pub file_per_proc: bool,
    pub num_tasks: u32,
    /// Host of each rank, by rank.
    pub hosts: Vec<String>,
    /// How processes were started: `fork`, `mpirun`, `slurm`, `single`.
    pub launcher: String,
    pub block_size: u64,
    pub transfer_size: u64,
    /// Smallest transfer of the random/general patterns (= transfer_size otherwise).
    pub min_transfer_size: u64,
    pub segments: u64,
    /// Distance between segment starts (bytes).
    pub stride: u64,
    pub header_bytes: u64,
    /// Expected size of each file after the write phase.
    pub file_size: u64,
    pub fsync: bool,
    pub collective: bool,
    pub iterations: u32,
    /// `o_direct`, `fadvise_dontneed`, `drop_caches` or `none`.
    pub cache_mode: String,
    /// Client c read the data written by client (c + shift) mod n.
    pub reorder_shift: u32,
    pub verify: bool,
    /// One per iteration and operation, in execution order.
    pub phases: Vec<PioPhase>,
    /// One per operation over all iterations.
    pub summary: Vec<PioSummary>,
    pub verification: PioVerification,
}

/// A parameter as resolved: CLI over environment over default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioParam {
    pub name: String,
    pub value: String,
    /// `cli`, `env` or `default`.
    pub source: String,
}

/// One iteration × operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioPhase {
    pub iteration: u32,
    /// `write` or `read`.
    pub operation: String,
    /// Aggregate bytes moved by all processes.
    pub bytes: u64,
    pub transfers: u64,
    /// Latest close stop − earliest open start.
    pub total_time_s: f64,
    /// Latest open stop − earliest open start (a span across processes).
    pub open_time_s: f64,
    /// Latest transfer stop − earliest transfer start (fsync included).
    pub xfer_time_s: f64,
    /// Latest close stop − earliest close start.
    pub close_time_s: f64,
    /// bytes / 2^20 / total_time_s.
    pub bw_mib_s: f64,
    /// transfers / total_time_s.
    pub iops: f64,
    /// Bytes that failed verification (reads only; None when not verified).
    pub verify_errors: Option<u64>,
    /// Open-start-to-close-stop time of each process in this phase:
    /// min/mean/max/deviation between processes (Ross 6.6).
    #[serde(default)]
    pub task_time_s: Option<Stats>,
    pub tasks: Vec<PioTaskTimes>,
}

/// The six timestamps and counters of one process in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioTaskTimes {
    pub rank: u32,
    pub open_start: f64,
    pub open_stop: f64,
    pub xfer_start: f64,
    pub xfer_stop: f64,
    pub close_start: f64,
    pub close_stop: f64,
    pub bytes: u64,
    pub transfers: u64,
    pub verify_errors: Option<u64>,
}

/// min/mean/max/population deviation of a series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: u64,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    /// Square root of the mean squared deviation (the seed's DEVIATION, ÷ n).
    pub stddev: f64,
}

impl Stats {
    /// Statistics of `xs`; `None` when empty.
    pub fn of(xs: &[f64]) -> Option<Stats> {
        if xs.is_empty() {
            return None;
        }
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        Some(Stats {
            n: xs.len() as u64,
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            mean,
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            stddev: var.sqrt(),
        })
    }
}

/// Statistics of one operation over all iterations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioSummary {
    pub operation: String,
    pub iterations: u64,
    /// Aggregate bytes of one iteration.
    pub bytes: u64,
    /// Aggregate bandwidth across iterations (max = the seed's MAXIMUM).
    pub bw_mib_s: Stats,
    /// Aggregate time across iterations.
    pub total_time_s: Stats,
    /// Transfers per second across iterations.
    pub iops: Stats,
    /// Each process's open-start-to-close-stop time, across iterations and processes.
    pub task_time_s: Stats,
    /// Each process's bandwidth (its bytes / its time), across iterations and processes.
    pub task_bw_mib_s: Stats,
}

/// The verdict of the read-back check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioVerification {
    /// `PASS`, `FAIL` or `SKIPPED` (verification off or no read phase).
    pub status: String,
    /// Bytes that differed from the expected pattern, over all reads.
    pub errors: u64,
    pub first_error: Option<PioCorruption>,
    /// Other problems found by the checks (e.g. a file size differing from the layout).
    #[serde(default)]
    pub messages: Vec<String>,
}

/// Where the first corrupted byte was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioCorruption {
    pub iteration: u32,
    /// Rank that read it.
    pub reader: u32,
    /// Rank whose data it should have been.
    pub writer: u32,
    pub file: String,
    pub offset: u64,
    pub expected: u8,
    pub found: u8,
}

/// Parses and validates a pio result file.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<PioResult> {
    let r: PioResult =
        serde_json::from_slice(bytes).map_err(|e| text::json_err(path, "pio result", &e))?;
    let bad = |field: String, msg: String| FormatError::malformed(path, field, Position::None, msg);
    if r.format != FORMAT {
        return Err(bad(
            "format".into(),
            format!("'{}', expected '{FORMAT}'", r.format),
        ));
    }
    if r.num_tasks == 0 || r.hosts.len() != r.num_tasks as usize {
        return Err(bad(
            "hosts".into(),
            format!("{} hosts for {} tasks", r.hosts.len(), r.num_tasks),
        ));
    }
    // Every iteration has a write and a read phase: a result without phases
    // is not a run's output (and would land as a run without rows).
    if r.phases.is_empty() {
        return Err(bad("phases".into(), "no phase in the result".into()));
    }
    for (i, p) in r.phases.iter().enumerate() {
        if !matches!(p.operation.as_str(), "write" | "read") {
            return Err(bad(
                format!("phases[{i}].operation"),
                format!("unknown '{}'", p.operation),
            ));
        }
        let figures = [
            p.total_time_s,
            p.open_time_s,
            p.xfer_time_s,
            p.close_time_s,
            p.bw_mib_s,
            p.iops,
        ];
        if figures.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(bad(
                format!("phases[{i}]"),
                "negative or non-finite figure".into(),
            ));
        }
        for (k, t) in p.tasks.iter().enumerate() {
            let ts = [
                t.open_start,
                t.open_stop,
                t.xfer_start,
                t.xfer_stop,
                t.close_start,
                t.close_stop,
            ];
            if ts.iter().any(|v| !v.is_finite()) || ts.windows(2).any(|w| w[1] < w[0]) {
                return Err(bad(
                    format!("phases[{i}].tasks[{k}]"),
                    "timestamps not finite and non-decreasing".into(),
                ));
            }
            if t.rank >= r.num_tasks {
                return Err(bad(
                    format!("phases[{i}].tasks[{k}].rank"),
                    format!("{} ≥ num_tasks", t.rank),
                ));
            }
        }
    }
    Ok(r)
}
