//! IOR's human-readable output (the default `summaryFormat`): the `Options:`
//! setup, the `Results:` table (one line per access and iteration, with an
//! explicit `iter` column and 6-decimal times, more precise than the JSON's
//! `%.4f`) and the `Summary of all tests:` table (statistics plus the test's
//! parameters). A `remove` line (verbose ≥ 1) is skipped like in the JSON.
use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{FormatError, Position, Result};
use crate::io::text::{self, Field};

/// One `Results:` line.
#[derive(Debug, Clone, PartialEq)]
pub struct IorTextResult {
    pub access: String,
    pub bw_mib: f64,
    pub iops: f64,
    pub latency: f64,
    pub block_kib: f64,
    pub xfer_kib: f64,
    pub open: f64,
    pub wr_rd: f64,
    pub close: f64,
    pub total: f64,
    pub iteration: i64,
}

/// One `Summary of all tests:` line.
#[derive(Debug, Clone, PartialEq)]
pub struct IorTextSummary {
    pub operation: String,
    pub bw_max_mib: f64,
    pub bw_min_mib: f64,
    pub bw_mean_mib: f64,
    pub bw_std_mib: f64,
    pub ops_max: f64,
    pub ops_min: f64,
    pub ops_mean: f64,
    pub ops_sd: f64,
    pub mean_time: f64,
    pub test_id: i64,
    pub num_tasks: i64,
    pub tasks_per_node: i64,
    pub repetitions: i64,
    pub file_per_proc: bool,
    pub segment_count: i64,
    pub block_size: i64,
    pub transfer_size: i64,
    pub aggregate_mib: f64,
    pub api: String,
}

/// One test block (from `TestID` to its results).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IorTextTest {
    pub test_id: i64,
    /// `key : value` lines of the block (`api`, `tasks`, `type`, …).
    pub options: BTreeMap<String, String>,
    pub results: Vec<IorTextResult>,
}

/// A whole human-readable output.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IorText {
    pub version: String,
    pub command_line: String,
    pub tests: Vec<IorTextTest>,
    pub summary: Vec<IorTextSummary>,
}

impl IorText {
    /// Whether the command line asked for fsync (`-e`), which the human
    /// output's setup does not print.
    pub fn fsync(&self) -> bool {
        self.command_line
            .split_whitespace()
            .any(|t| t == "-e" || t.eq_ignore_ascii_case("fsync=1"))
    }
}

const SUMMARY_COLS: usize = 27;

/// Parses IOR's human-readable output.
pub fn parse(path: &Path, input: &str) -> Result<IorText> {
    let mut out = IorText::default();
    let mut lines = input.lines().enumerate().peekable();
    match lines.peek() {
        Some((_, l)) if l.starts_with("IOR-") => {
            out.version = l
                .trim_start_matches("IOR-")
                .split(':')
                .next()
                .unwrap_or("")
                .to_string();
        }
        _ => {
            return Err(FormatError::malformed(
                path,
                "banner",
                Position::LineCol(1, 1),
                "expected 'IOR-<version>: MPI Coordinated Test of Parallel I/O'",
            ));
        }
    }
    // A last line without its newline was cut short: say so before its
    // fields are read as numbers.
    text::require_complete(path, input, "line")?;
    // Whether IOR's closing 'Finished : DATE' line follows the last test.
    let mut finished = false;
    while let Some((i, raw)) = lines.next() {
        let line_no = i as u64 + 1;
        let line = raw.trim_end_matches('\r');
        let t = line.trim();
        if t == "Results:" {
            // Blank, header, dashes, then rows until a blank line.
            let test = out.tests.last_mut().ok_or_else(|| {
                FormatError::malformed(
                    path,
                    "Results",
                    Position::LineCol(line_no, 1),
                    "results before any TestID",
                )
            })?;
            while lines.peek().is_some_and(|(_, l)| {
                l.trim().is_empty() || l.starts_with("access") || l.starts_with("------")
            }) {
                lines.next();
            }
            while let Some((j, row)) = lines.peek().copied() {
                if row.trim().is_empty() {
                    break;
                }
                lines.next();
                if let Some(r) = result_row(path, row.trim_end_matches('\r'), j as u64 + 1)? {
                    test.results.push(r);
                }
            }
            continue;
        }
        if t == "Summary of all tests:" {
            let Some((h, header)) = lines.next() else {
                break;
            };
            let cols = text::split_ws(header, h as u64 + 1);
            if cols.first().map(|f| f.text) != Some("Operation") || cols.len() != SUMMARY_COLS {
                return Err(FormatError::malformed(
                    path,
                    "Summary header",
                    Position::LineCol(h as u64 + 1, 1),
                    format!("expected {SUMMARY_COLS} columns starting with 'Operation'"),
                ));
            }
            while let Some((j, row)) = lines.peek().copied() {
                let r = row.trim();
                if r.is_empty() || r.starts_with("Finished") {
                    break;
                }
                lines.next();
                out.summary.push(summary_row(path, row, j as u64 + 1)?);
            }
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let key = k.trim();
        let value = v.trim();
        if key.is_empty() || k.len() < 2 {
            continue;
        }
        match key {
            "Command line" => out.command_line = value.to_string(),
            "Finished" => finished = true,
            "TestID" => {
                finished = false;
                let id = value.parse::<i64>().map_err(|_| {
                    FormatError::malformed(
                        path,
                        "TestID",
                        Position::LineCol(line_no, k.len() as u64 + 2),
                        format!("'{value}' is not an integer"),
                    )
                })?;
                out.tests.push(IorTextTest {
                    test_id: id,
                    ..Default::default()
                });
            }
            _ => {
                if let Some(test) = out.tests.last_mut() {
                    test.options.insert(key.to_string(), value.to_string());
                }
            }
        }
    }
    if out.tests.is_empty() {
        return Err(FormatError::malformed(
            path,
            "TestID",
            Position::None,
            "no test in the output",
        ));
    }
    // IOR closes its output with 'Finished : DATE' (after the summary): without
    // it the output was cut short or the run died, and its tables would be
    // missing rows.
    if !finished {
        return Err(FormatError::malformed(
            path,
            "Finished",
            Position::Offset(input.len() as u64),
            format!(
                "the output ends at byte {} without IOR's closing 'Finished : DATE' line: it is cut short (IOR run with -q does not print it and is not accepted)",
                input.len()
            ),
        ));
    }
    Ok(out)
}

fn result_row(path: &Path, row: &str, line_no: u64) -> Result<Option<IorTextResult>> {
    let f = text::split_ws(row, line_no);
    let Some(access) = f.first() else {
        return Ok(None);
    };
    match access.text {
        "write" | "read" => {}
        "remove" => return Ok(None),
        other => return Err(access.err(path, "access", format!("unknown access '{other}'"))),
    }
    if f.len() != 11 {
        return Err(access.err(
            path,
            "Results row",
            format!("{} fields, expected 11", f.len()),
        ));
    }
    let n = |k: usize, name: &str| -> Result<f64> {
        let fld: &Field<'_> = f.get(k).ok_or_else(|| access.err(path, name, "missing"))?;
        let v = fld.f64(path, name)?;
        if !v.is_finite() || v < 0.0 {
            return Err(fld.err(path, name, "negative or not finite"));
        }
        Ok(v)
    };
    Ok(Some(IorTextResult {
        access: access.text.to_string(),
        bw_mib: n(1, "bw(MiB/s)")?,
        iops: n(2, "IOPS")?,
        latency: n(3, "Latency(s)")?,
        block_kib: n(4, "block(KiB)")?,
        xfer_kib: n(5, "xfer(KiB)")?,
        open: n(6, "open(s)")?,
        wr_rd: n(7, "wr/rd(s)")?,
        close: n(8, "close(s)")?,
        total: n(9, "total(s)")?,
        iteration: f
            .get(10)
            .ok_or_else(|| access.err(path, "iter", "missing"))?
            .i64(path, "iter")?,
    }))
}

fn summary_row(path: &Path, row: &str, line_no: u64) -> Result<IorTextSummary> {
    let f = text::split_ws(row, line_no);
    if f.len() != SUMMARY_COLS {
        return Err(FormatError::malformed(
            path,
            "Summary row",
            Position::LineCol(line_no, 1),
            format!("{} fields, expected {SUMMARY_COLS}", f.len()),
        ));
    }
    let get = |k: usize| -> Result<Field<'_>> {
        f.get(k).copied().ok_or_else(|| {
            FormatError::malformed(
                path,
                "Summary row",
                Position::LineCol(line_no, 1),
                "short row",
            )
        })
    };
    let x = |k: usize, name: &str| get(k).and_then(|fld| fld.f64(path, name));
    let i = |k: usize, name: &str| get(k).and_then(|fld| fld.i64(path, name));
    let op = get(0)?;
    if !matches!(op.text, "write" | "read") {
        return Err(op.err(
            path,
            "Operation",
            format!("unknown operation '{}'", op.text),
        ));
    }
    Ok(IorTextSummary {
        operation: op.text.to_string(),
        bw_max_mib: x(1, "Max(MiB)")?,
        bw_min_mib: x(2, "Min(MiB)")?,
        bw_mean_mib: x(3, "Mean(MiB)")?,
        bw_std_mib: x(4, "StdDev")?,
        ops_max: x(5, "Max(OPs)")?,
        ops_min: x(6, "Min(OPs)")?,
        ops_mean: x(7, "Mean(OPs)")?,
        ops_sd: x(8, "StdDev")?,
        mean_time: x(9, "Mean(s)")?,
        // 10, 11: stonewall figures ("NA" without -D).
        test_id: i(12, "Test#")?,
        num_tasks: i(13, "#Tasks")?,
        tasks_per_node: i(14, "tPN")?,
        repetitions: i(15, "reps")?,
        file_per_proc: i(16, "fPP")? != 0,
        // 17-20: reord, reordoff, reordrand, seed.
        segment_count: i(21, "segcnt")?,
        block_size: i(22, "blksiz")?,
        transfer_size: i(23, "xsize")?,
        aggregate_mib: x(24, "aggs(MiB)")?,
        api: get(25)?.text.to_string(),
    })
}
