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
    // The fields of every Results row (by test) and Summary row.
    let mut result_fields: Vec<Vec<Vec<Field<'_>>>> = Vec::new();
    let mut summary_fields: Vec<Vec<Field<'_>>> = Vec::new();
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
                    if let Some(v) = result_fields.last_mut() {
                        v.push(text::split_ws(row.trim_end_matches('\r'), j as u64 + 1));
                    }
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
                summary_fields.push(text::split_ws(row, j as u64 + 1));
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
                result_fields.push(Vec::new());
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
            Position::Offset(input.len() as u64),
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
    check(path, &out, &result_fields, &summary_fields)?;
    Ok(out)
}

/// Field `k` of a row (an empty one at its line's start when missing).
fn nth<'a>(v: &[Field<'a>], k: usize) -> Field<'a> {
    v.get(k).copied().unwrap_or(Field {
        text: "",
        line: v.first().map_or(1, |f| f.line),
        col: 1,
    })
}

/// Half a unit of the last digit printed in `f` (IOR prints figures with
/// as many decimals as fit its column); none for an exponent form.
fn half_unit(f: &Field<'_>) -> f64 {
    let t = f.text.trim();
    // IOR prints these columns as fixed-point: an exponent is not its print.
    if t.contains(['e', 'E']) {
        return 0.0;
    }
    let d = t.split_once('.').map_or(0, |(_, d)| d.len());
    0.5 * 10f64.powi(-(d as i32)) + 1e-12
}

/// The checks across rows: each Results row's bandwidth is the test's bytes
/// (the Summary row's blksiz × segcnt × #Tasks) over its total time, its
/// IOPS the transfers over its transfer time, its phase times within the
/// total, its sizes the test's; the Summary's statistics are those of the
/// Results rows (population deviation), each to the rounding of the prints.
fn check(
    path: &Path,
    out: &IorText,
    results: &[Vec<Vec<Field<'_>>>],
    summary: &[Vec<Field<'_>>],
) -> Result<()> {
    const MIB: f64 = 1048576.0;
    for (s, sf) in out.summary.iter().zip(summary) {
        let sat = |k: usize| nth(sf, k);
        let Some((ti, test)) = out
            .tests
            .iter()
            .enumerate()
            .find(|(_, t)| t.test_id == s.test_id)
        else {
            return Err(sat(12).err(path, "Test#", format!("no test {}", s.test_id)));
        };
        let rf = results.get(ti).map(Vec::as_slice).unwrap_or_default();
        if s.num_tasks < 1 || s.segment_count < 1 || s.block_size < 1 || s.transfer_size < 1 {
            return Err(sat(13).err(path, "Summary row", "a size or count below 1"));
        }
        if let Some(t) = test
            .options
            .get("tasks")
            .and_then(|t| t.parse::<i64>().ok())
            && t != s.num_tasks
        {
            return Err(sat(13).err(
                path,
                "#Tasks",
                format!("{}, but the test's setup says {t} tasks", s.num_tasks),
            ));
        }
        let bytes = (s.block_size as f64) * (s.segment_count as f64) * (s.num_tasks as f64);
        if (bytes / MIB - s.aggregate_mib).abs() > half_unit(&sat(24)) + 1e-9 {
            return Err(sat(24).err(
                path,
                "aggs(MiB)",
                format!(
                    "{}, but blksiz × segcnt × #Tasks is {} MiB",
                    s.aggregate_mib,
                    bytes / MIB
                ),
            ));
        }
        let ops = bytes / s.transfer_size as f64;
        let rows: Vec<(&IorTextResult, &Vec<Field<'_>>)> = test
            .results
            .iter()
            .zip(rf)
            .filter(|(r, _)| r.access == s.operation)
            .collect();
        if rows.len() as i64 != s.repetitions {
            return Err(sat(15).err(
                path,
                "reps",
                format!(
                    "{}, but the test has {} '{}' results",
                    s.repetitions,
                    rows.len(),
                    s.operation
                ),
            ));
        }
        for (k, (r, f)) in rows.iter().enumerate() {
            let at = |k: usize| nth(f, k);
            if r.iteration != k as i64 {
                return Err(at(10).err(
                    path,
                    "iter",
                    format!("{}, where the {} results put {k}", r.iteration, s.operation),
                ));
            }
            for (name, col, v, want) in [
                ("block(KiB)", 4, r.block_kib, s.block_size),
                ("xfer(KiB)", 5, r.xfer_kib, s.transfer_size),
            ] {
                if (v * 1024.0 - want as f64).abs() > 1024.0 * half_unit(&at(col)) {
                    return Err(at(col).err(
                        path,
                        name,
                        format!("{v} KiB, but the test's is {want} bytes"),
                    ));
                }
            }
            for (name, col, v) in [
                ("Latency(s)", 3, r.latency),
                ("open(s)", 6, r.open),
                ("wr/rd(s)", 7, r.wr_rd),
                ("close(s)", 8, r.close),
            ] {
                if v > r.total + 2e-6 {
                    return Err(at(col).err(
                        path,
                        name,
                        format!("{v} s, longer than the total {} s", r.total),
                    ));
                }
            }
            // Times are printed with 6 decimals: their rounding bounds the
            // rates' agreement.
            let rate_ok = |have: f64, amount: f64, time: f64, f: &Field<'_>| {
                if time <= 5e-7 {
                    return true;
                }
                let want = amount / time;
                let spread = amount * 5e-7 / (time * (time - 5e-7));
                (have - want).abs() <= spread + half_unit(f) + 1e-9 * want
            };
            if !rate_ok(r.bw_mib, bytes / MIB, r.total, &at(1)) {
                return Err(at(1).err(
                    path,
                    "bw(MiB/s)",
                    format!(
                        "{}, but the test's {bytes} bytes in {} s make {:.2}",
                        r.bw_mib,
                        r.total,
                        bytes / MIB / r.total
                    ),
                ));
            }
            if !rate_ok(r.iops, ops, r.wr_rd, &at(2)) {
                return Err(at(2).err(
                    path,
                    "IOPS",
                    format!(
                        "{}, but the test's {ops} transfers in {} s make {:.0}",
                        r.iops,
                        r.wr_rd,
                        ops / r.wr_rd
                    ),
                ));
            }
        }
        if rows.is_empty() {
            continue;
        }
        // Results print bandwidths rounded: the statistics of the rounded
        // values are within the largest rounding of the true ones.
        let bws: Vec<f64> = rows.iter().map(|(r, _)| r.bw_mib).collect();
        let round = rows
            .iter()
            .map(|(_, f)| half_unit(&nth(f, 1)))
            .fold(0.0, f64::max);
        let k = bws.len() as f64;
        let mean = bws.iter().sum::<f64>() / k;
        let sd = (bws.iter().map(|b| (b - mean) * (b - mean)).sum::<f64>() / k).sqrt();
        let max = bws.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let min = bws.iter().copied().fold(f64::INFINITY, f64::min);
        let times: Vec<f64> = rows.iter().map(|(r, _)| r.total).collect();
        let opsf = MIB / s.transfer_size as f64;
        for (name, col, v, want, tol) in [
            ("Max(MiB)", 1, s.bw_max_mib, max, round),
            ("Min(MiB)", 2, s.bw_min_mib, min, round),
            ("Mean(MiB)", 3, s.bw_mean_mib, mean, round),
            ("StdDev", 4, s.bw_std_mib, sd, 2.0 * round),
            ("Max(OPs)", 5, s.ops_max, max * opsf, round * opsf),
            ("Min(OPs)", 6, s.ops_min, min * opsf, round * opsf),
            ("Mean(OPs)", 7, s.ops_mean, mean * opsf, round * opsf),
            ("StdDev", 8, s.ops_sd, sd * opsf, 2.0 * round * opsf),
            (
                "Mean(s)",
                9,
                s.mean_time,
                times.iter().sum::<f64>() / k,
                5e-7,
            ),
        ] {
            let f = sat(col);
            if !(v - want)
                .abs()
                .le(&(tol + half_unit(&f) + 1e-9 * want.abs()))
            {
                return Err(f.err(
                    path,
                    name,
                    format!("{v}, but the test's {} results give {want:.4}", s.operation),
                ));
            }
        }
    }
    Ok(())
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
