//! mdtest outputs: the text printed by rank 0 (the `SUMMARY rate|time` tables)
//! and the per-rank CSV (`--saveRankPerformanceDetails=F`).
//!
//! The text holds only statistics over iterations (max/min/mean/sample SD;
//! the "time (in ms/op)" table actually shows seconds, reference io.md §3).
//! Per-iteration figures exist only in the CSV: its first data line (`all`) is
//! the aggregate of the **first** iteration (mdtest passes its results array,
//! whose first element is iteration 0), then one line per rank per iteration
//! with that rank's rate and time before the closing barrier.
use std::path::Path;

use crate::error::{FormatError, Position, Result};
use crate::io::text::{self, Field};

/// The operations mdtest reports (the rows of its SUMMARY tables, the
/// columns of its per-rank CSV).
pub const OPERATIONS: [&str; 11] = [
    "Directory creation",
    "Directory stat",
    "Directory read",
    "Directory rename",
    "Directory removal",
    "File creation",
    "File stat",
    "File read",
    "File removal",
    "Tree creation",
    "Tree removal",
];

/// The longest phase accepted (s): 10^7 s, 116 days, longer than any batch
/// system lets a job run.
pub const MAX_PHASE_S: f64 = 1e7;

/// One SUMMARY table line.
#[derive(Debug, Clone, PartialEq)]
pub struct MdtestSummaryLine {
    pub operation: String,
    pub max: f64,
    pub min: f64,
    pub mean: f64,
    pub stddev: f64,
}

/// One SUMMARY table (`rate` in ops/s or `time` in s).
#[derive(Debug, Clone, PartialEq)]
pub struct MdtestSummary {
    /// `rate` or `time`.
    pub statistic: String,
    pub iterations: i64,
    pub num_tasks: i64,
    /// Items over all tasks (from "N tasks, M files/directories"), if printed.
    pub items: Option<i64>,
    pub lines: Vec<MdtestSummaryLine>,
}

/// The parsed text output.
#[derive(Debug, Clone, PartialEq)]
pub struct MdtestText {
    pub version: Option<String>,
    pub num_tasks: Option<i64>,
    pub num_nodes: Option<i64>,
    pub summaries: Vec<MdtestSummary>,
}

/// Parses mdtest's text output.
pub fn parse_text(path: &Path, text: &str) -> Result<MdtestText> {
    let mut out = MdtestText {
        version: None,
        num_tasks: None,
        num_nodes: None,
        summaries: Vec::new(),
    };
    // The current "N tasks, M items" context (mdtest prints one per task count).
    let mut ctx: Option<(i64, Option<i64>)> = None;
    let mut lines = text.lines().enumerate().peekable();
    let mut saw_mdtest = false;
    // An mdtest output whose last line has no newline was cut short: say so
    // before its fields are read as numbers (foreign text gets the banner error).
    if text.contains("mdtest-") {
        text::require_complete(path, text, "line")?;
    }
    // Whether the closing '-- finished at DATE --' line follows the last table.
    let mut finished = false;
    // `-i` and `-n` of the command line, when it shows them (and `-n` only
    // when no option changes what it counts).
    let (mut cmd_iters, mut cmd_items): (Option<i64>, Option<i64>) = (None, None);
    while let Some((i, raw)) = lines.next() {
        let line_no = i as u64 + 1;
        let line = raw.trim_end_matches('\r');
        let t = line.trim();
        if t.starts_with("-- finished at ") {
            finished = true;
            continue;
        }
        if let Some(rest) = t.strip_prefix("mdtest-") {
            saw_mdtest = true;
            // "mdtest-4.1.0+dev was launched with 4 total task(s) on 1 node(s)"
            let w = text::split_ws(rest, line_no);
            out.version = w.first().map(|f| f.text.to_string());
            let nums: Vec<_> = w
                .iter()
                .skip(1)
                .filter(|f| f.text.parse::<i64>().is_ok())
                .collect();
            if let (Some(t), Some(n)) = (nums.first(), nums.get(1)) {
                out.num_tasks = Some(t.i64(path, "total tasks")?);
                out.num_nodes = Some(n.i64(path, "nodes")?);
            }
            continue;
        }
        if let Some(cmd) = t.strip_prefix("Command line used:") {
            let words: Vec<&str> = cmd
                .split_whitespace()
                .map(|w| w.trim_matches('\''))
                .collect();
            let opt = |o: &str| {
                words
                    .iter()
                    .position(|w| *w == o)
                    .and_then(|i| words.get(i + 1))
                    .and_then(|v| v.parse::<i64>().ok())
            };
            cmd_iters = opt("-i");
            let tree = ["-b", "-z", "-I", "-L", "-N", "-w", "-e"]
                .iter()
                .any(|o| words.contains(o));
            cmd_items = if tree { None } else { opt("-n") };
            continue;
        }
        if let Some((n, rest)) = t.split_once(" tasks, ") {
            let at = |msg: String| {
                FormatError::malformed(
                    path,
                    "tasks",
                    Position::LineCol(line_no, 1 + line.len() as u64 - t.len() as u64),
                    msg,
                )
            };
            let n = n
                .trim()
                .parse::<i64>()
                .map_err(|_| at(format!("'{}' is not a task count", n.trim())))?;
            let x = rest.split_whitespace().next().unwrap_or("");
            let items = Some(
                x.parse::<i64>()
                    .ok()
                    .filter(|v| *v >= 0)
                    .ok_or_else(|| at(format!("'{x}' is not an item count")))?,
            );
            let at = |msg: String| {
                FormatError::malformed(
                    path,
                    "tasks",
                    Position::LineCol(line_no, 1 + line.len() as u64 - t.len() as u64),
                    msg,
                )
            };
            if n < 1 || out.num_tasks.is_some_and(|b| b != n) {
                return Err(at(format!(
                    "{n} tasks, but mdtest was launched with {}",
                    out.num_tasks.unwrap_or(0)
                )));
            }
            if let (Some(per), Some(all)) = (cmd_items, items)
                && per.checked_mul(n) != Some(all)
            {
                return Err(at(format!(
                    "{all} items, but {n} tasks of '-n {per}' make {}",
                    per.saturating_mul(n)
                )));
            }
            ctx = Some((n, items));
            continue;
        }
        let Some(rest) = t.strip_prefix("SUMMARY ") else {
            continue;
        };
        let statistic = if rest.starts_with("rate") {
            "rate"
        } else if rest.starts_with("time") {
            "time"
        } else {
            let (l, c) = (line_no, 1 + line.len() as u64 - t.len() as u64);
            return Err(FormatError::malformed(
                path,
                "SUMMARY",
                Position::LineCol(l, c),
                "expected 'SUMMARY rate' or 'SUMMARY time'",
            ));
        };
        let iterations = rest
            .split_once("(of ")
            .and_then(|(_, r)| r.split_whitespace().next())
            .and_then(|n| n.parse::<i64>().ok())
            .ok_or_else(|| {
                FormatError::malformed(
                    path,
                    "SUMMARY iterations",
                    Position::LineCol(line_no, 1),
                    "no '(of N iterations)'",
                )
            })?;
        if iterations < 1 || cmd_iters.is_some_and(|i| i != iterations) {
            return Err(FormatError::malformed(
                path,
                "SUMMARY iterations",
                Position::LineCol(line_no, 1 + line.len() as u64 - t.len() as u64),
                format!(
                    "{iterations} iterations, but the command line says -i {}",
                    cmd_iters.unwrap_or(0)
                ),
            ));
        }
        let (num_tasks, items) = match (ctx, out.num_tasks) {
            (Some((n, items)), _) => (n, items),
            (None, Some(n)) => (n, None),
            (None, None) => {
                return Err(FormatError::malformed(
                    path,
                    "tasks",
                    Position::LineCol(line_no, 1),
                    "SUMMARY before any task count",
                ));
            }
        };
        // Header and dashes, then rows until a blank or "--" line.
        let mut rows = Vec::new();
        for _ in 0..2 {
            match lines.next() {
                Some((_, h))
                    if h.trim_start().starts_with("Operation")
                        || h.trim_start().starts_with("---") => {}
                Some((j, _)) => {
                    return Err(FormatError::malformed(
                        path,
                        "SUMMARY header",
                        Position::LineCol(j as u64 + 1, 1),
                        "expected the column header and its underline",
                    ));
                }
                None => break,
            }
        }
        while let Some((j, row)) = lines.peek().copied() {
            let row = row.trim_end_matches('\r');
            if row.trim().is_empty() || row.trim_start().starts_with("--") {
                break;
            }
            lines.next();
            rows.push(parse_summary_row(path, row, j as u64 + 1, iterations)?);
        }
        if rows.is_empty() {
            return Err(FormatError::malformed(
                path,
                "SUMMARY",
                Position::LineCol(line_no, 1),
                "table has no rows",
            ));
        }
        finished = false;
        out.summaries.push(MdtestSummary {
            statistic: statistic.to_string(),
            iterations,
            num_tasks,
            items,
            lines: rows,
        });
    }
    if !saw_mdtest && out.summaries.is_empty() {
        return Err(FormatError::malformed(
            path,
            "mdtest output",
            Position::LineCol(1, 1),
            "no 'mdtest-' banner and no SUMMARY table",
        ));
    }
    // mdtest ends every line with a newline, prints its SUMMARY tables, then
    // '-- finished at DATE --': an output without them was cut short (or the run
    // died), and must not land as a run without results.
    text::require_complete(path, text, "line")?;
    if out.summaries.is_empty() {
        return Err(text::no_rows(path, text, "SUMMARY", "SUMMARY table"));
    }
    if !finished {
        return Err(FormatError::malformed(
            path,
            "-- finished at",
            Position::Offset(text.len() as u64),
            format!(
                "the output ends at byte {} without mdtest's closing '-- finished at DATE --' line: it is cut short",
                text.len()
            ),
        ));
    }
    Ok(out)
}

/// "   Directory creation   20405.025   2223.961   9563.715   9582.977": the
/// name has spaces, the figures are the last four fields (with
/// `--showRankStatistics` three per-rank figures come first and are skipped).
fn parse_summary_row(
    path: &Path,
    row: &str,
    line_no: u64,
    iterations: i64,
) -> Result<MdtestSummaryLine> {
    let f = text::split_ws(row, line_no);
    let numeric = f
        .iter()
        .rev()
        .take_while(|x| x.text.parse::<f64>().is_ok())
        .count();
    let name_len = f.len().saturating_sub(numeric);
    if numeric < 4 || name_len == 0 {
        let at = f.first().map(|x| x.col).unwrap_or(1);
        return Err(FormatError::malformed(
            path,
            "SUMMARY row",
            Position::LineCol(line_no, at),
            "expected an operation name and four numbers",
        ));
    }
    let name: Vec<&str> = f.iter().take(name_len).map(|x| x.text).collect();
    let op = name.join(" ");
    if !OPERATIONS.contains(&op.as_str()) {
        return Err(f[0].err(
            path,
            "SUMMARY row",
            format!("'{op}' is not an operation mdtest reports"),
        ));
    }
    let last4: Vec<Field<'_>> = f.iter().rev().take(4).rev().copied().collect();
    let num = |k: usize, n: &str| -> Result<f64> {
        last4
            .get(k)
            .ok_or_else(|| {
                FormatError::malformed(path, n, Position::LineCol(line_no, 1), "missing")
            })
            .and_then(|x| x.f64(path, n))
    };
    let line = MdtestSummaryLine {
        operation: op,
        max: num(0, "Max")?,
        min: num(1, "Min")?,
        mean: num(2, "Mean")?,
        stddev: num(3, "Std Dev")?,
    };
    let at = |k: usize| last4.get(k).copied().unwrap_or(f[0]);
    if let Some((k, msg)) = summary_inconsistency(&line, iterations) {
        return Err(at(k).err(path, ["Max", "Min", "Mean", "Std Dev"][k], msg));
    }
    Ok(line)
}

/// Why the four statistics of a SUMMARY row cannot be those of `n`
/// iterations (column index, message), `None` when they can. mdtest prints
/// them with 3 decimals: the checks allow for that rounding. `inf` (a phase
/// timed at 0 s) leaves the row unchecked.
pub fn summary_inconsistency(l: &MdtestSummaryLine, n: i64) -> Option<(usize, String)> {
    let v = [l.max, l.min, l.mean, l.stddev];
    if let Some(k) = v.iter().position(|x| *x < 0.0) {
        return Some((k, "negative".into()));
    }
    if v.iter().any(|x| x.is_infinite()) {
        return None;
    }
    let (max, min, mean, sd) = (l.max, l.min, l.mean, l.stddev);
    // Rounding of one printed figure, and of sums of a few.
    let tol = |x: f64| 0.002 + 1e-9 * x.abs();
    if min > max + tol(max) {
        return Some((1, format!("Min {min} above Max {max}")));
    }
    if mean > max + tol(max) || mean < min - tol(min) {
        return Some((2, format!("Mean {mean} outside Min {min}..Max {max}")));
    }
    let nf = n as f64;
    match n {
        ..=0 => Some((0, format!("{n} iterations"))),
        1 => (max - min > tol(max) || sd > tol(0.0)).then(|| {
            (
                3,
                "one iteration with different Min and Max or a deviation".into(),
            )
        }),
        2 | 3 => {
            // Min and Max are two of the values; with 3 the third is
            // 3 × Mean − Min − Max, and the sample deviation follows.
            let xs: Vec<f64> = if n == 2 {
                if (max + min - 2.0 * mean).abs() > 4.0 * tol(max) {
                    return Some((
                        2,
                        format!("Mean {mean} of 2 iterations is not (Min + Max) / 2"),
                    ));
                }
                vec![min, max]
            } else {
                let mid = 3.0 * mean - min - max;
                if mid < min - 8.0 * tol(mean) || mid > max + 8.0 * tol(mean) {
                    return Some((
                        2,
                        format!("Mean {mean} puts the third iteration at {mid}, outside Min..Max"),
                    ));
                }
                vec![min, mid, max]
            };
            let m = xs.iter().sum::<f64>() / nf;
            let want = (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (nf - 1.0)).sqrt();
            ((sd - want).abs() > 0.01 + 1e-6 * want).then(|| {
                (
                    3,
                    format!("Std Dev {sd}, but Min, Max and Mean of {n} iterations give {want:.3}"),
                )
            })
        }
        _ => {
            // Max and Min are among the values (a lower bound on the
            // sample variance), and no series within Min..Max with this
            // Mean varies more than (Max − Mean)(Mean − Min) (Bhatia–Davis).
            let lo = ((max - mean).powi(2) + (mean - min).powi(2)) / (nf - 1.0);
            let hi = (max - mean) * (mean - min) * nf / (nf - 1.0);
            let (lo, hi) = (lo.max(0.0).sqrt(), hi.max(0.0).sqrt());
            (sd < lo - 0.01 - 1e-6 * lo || sd > hi + 0.01 + 1e-6 * hi).then(|| {
                (3, format!("Std Dev {sd} outside {lo:.3}..{hi:.3}, what Min, Max and Mean of {n} iterations allow"))
            })
        }
    }
}

/// One figure of the per-rank CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct MdtestRankFigure {
    /// `None` for the `all` line (aggregate of the first iteration).
    pub rank: Option<i32>,
    pub iteration: i64,
    pub operation: String,
    /// Items per process (`-n`), taken from the `all` line.
    pub items: Option<i64>,
    /// ops/s as printed (`inf` when mdtest timed 0 s).
    pub rate: f64,
    pub time: f64,
}

/// The parsed per-rank CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct MdtestRankCsv {
    /// Operation names from the header, in column order.
    pub operations: Vec<String>,
    /// Distinct ranks seen.
    pub num_tasks: i64,
    pub figures: Vec<MdtestRankFigure>,
}

/// Parses the per-rank CSV. Empty `rate,time` pairs (phase not run) give no figure.
pub fn parse_rank_csv(path: &Path, text: &str) -> Result<MdtestRankCsv> {
    let mut lines = text.lines().enumerate();
    let header = match lines.next() {
        Some((_, h)) if h.starts_with("rank,items") => h.trim_end_matches('\r'),
        _ => {
            return Err(FormatError::malformed(
                path,
                "header",
                Position::LineCol(1, 1),
                "expected 'rank,items,rate-…,time-…'",
            ));
        }
    };
    let hf = text::split_fields(header, 1, ',');
    let mut operations = Vec::new();
    for pair in hf.get(2..).unwrap_or_default().chunks(2) {
        let (Some(r), Some(t)) = (pair.first(), pair.get(1)) else {
            let at = pair.first().map_or(1, |f| f.col);
            return Err(FormatError::malformed(
                path,
                "header",
                Position::LineCol(1, at),
                "unpaired rate/time column",
            ));
        };
        let (Some(op), Some(op2)) = (r.text.strip_prefix("rate-"), t.text.strip_prefix("time-"))
        else {
            return Err(r.err(path, "header", "expected 'rate-OP,time-OP'"));
        };
        if op != op2 {
            return Err(t.err(path, "header", format!("'{}' after 'rate-{op}'", t.text)));
        }
        if !OPERATIONS.contains(&op) {
            return Err(r.err(
                path,
                "header",
                format!("'{op}' is not an operation mdtest reports"),
            ));
        }
        operations.push(op.to_string());
    }
    text::require_complete(path, text, "row")?;
    let mut figures = Vec::new();
    let mut items: Option<i64> = None;
    let mut per_rank: std::collections::BTreeMap<i32, i64> = Default::default();
    let mut ranks: Vec<i32> = Vec::new();
    // Where each rank line's rank is, and each figure's rate.
    let mut rank_at: Vec<Field<'_>> = Vec::new();
    let mut rate_at: Vec<Field<'_>> = Vec::new();
    let mut items_at: Option<Field<'_>> = None;
    for (i, raw) in lines {
        let line_no = i as u64 + 1;
        let line = raw.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let f = text::split_fields(line, line_no, ',');
        let Some(first) = f.first() else { continue };
        let rank = if first.text == "all" {
            None
        } else {
            let r = first.i64(path, "rank")?;
            Some(
                i32::try_from(r)
                    .ok()
                    .filter(|r| *r >= 0)
                    .ok_or_else(|| first.err(path, "rank", "rank out of range"))?,
            )
        };
        if let Some(it) = f.get(1).filter(|x| !x.text.is_empty()) {
            let v = it.i64(path, "items")?;
            if rank.is_none() {
                if v < 1 {
                    return Err(it.err(path, "items", format!("{v} items per process")));
                }
                items = Some(v);
                items_at = Some(*it);
            }
        }
        // mdtest writes fewer pairs on rank lines (no tree phases); more than the
        // header announces is malformed.
        let pairs = f.len().saturating_sub(2);
        if !pairs.is_multiple_of(2) || pairs / 2 > operations.len() {
            return Err(FormatError::malformed(
                path,
                "row",
                Position::LineCol(line_no, 1),
                format!(
                    "{} fields do not match the header's {} operations",
                    f.len(),
                    operations.len()
                ),
            ));
        }
        let iteration = match rank {
            None => 0,
            Some(r) => {
                ranks.push(r);
                rank_at.push(*first);
                let c = per_rank.entry(r).or_insert(0);
                let it = *c;
                *c += 1;
                it
            }
        };
        for (k, op) in operations.iter().enumerate() {
            let (Some(rf), Some(tf)) = (f.get(2 + 2 * k), f.get(3 + 2 * k)) else {
                break;
            };
            if rf.text.is_empty() && tf.text.is_empty() {
                continue;
            }
            let rate = rf.f64(path, &format!("rate-{op}"))?;
            let time = tf.f64(path, &format!("time-{op}"))?;
            if rate < 0.0 || time < 0.0 || !time.is_finite() || time > MAX_PHASE_S {
                return Err(rf.err(
                    path,
                    op,
                    format!("rate {rate}, time {time}: negative, or longer than {MAX_PHASE_S} s"),
                ));
            }
            // mdtest prints inf for a phase it timed at 0 s, and only then.
            if rate.is_infinite() != (time == 0.0) {
                return Err(rf.err(
                    path,
                    &format!("rate-{op}"),
                    format!("rate {rate} for a time of {time} s"),
                ));
            }
            rate_at.push(*rf);
            figures.push(MdtestRankFigure {
                rank,
                iteration,
                operation: op.clone(),
                items: None,
                rate,
                time,
            });
        }
    }
    if figures.is_empty() || ranks.is_empty() {
        return Err(text::no_rows(path, text, "row", "per-rank row"));
    }
    // One line per rank, in rank order, per iteration: a last group shorter
    // than the one before was cut short.
    text::check_last_group(path, text, ranks.iter().map(|r| ("", i64::from(*r))))?;
    // Every group is ranks 0..n-1, in order.
    let n = per_rank.len();
    for (k, (r, at)) in ranks.iter().zip(&rank_at).enumerate() {
        if usize::try_from(*r).ok() != Some(k % n) || !ranks.len().is_multiple_of(n) {
            return Err(at.err(
                path,
                "rank",
                format!(
                    "rank {r} where the rank lines of {n} ranks put rank {}",
                    k % n
                ),
            ));
        }
    }
    // The tree created is the tree removed: the same number of directories.
    let tree = |op: &str| {
        figures
            .iter()
            .zip(&rate_at)
            .find(|(f, _)| f.rank.is_none() && f.operation == op && f.time > 0.0)
            .map(|(f, at)| (f.rate * f.time, at))
    };
    if let (Some((c, _)), Some((r, at))) = (tree("Tree creation"), tree("Tree removal"))
        && (c - r).abs() > 1e-6 * c.max(r)
    {
        return Err(at.err(
            path,
            "rate-Tree removal",
            format!("{r} directories removed, {c} created"),
        ));
    }
    // rate × time is the items of the phase: `-n` (the `all` line's items)
    // on a rank line, that times the ranks on the `all` line (the tree
    // phases, `all` line only, count directories of the tree: unchecked).
    if let Some(items) = items {
        for (f, at) in figures.iter().zip(&rate_at) {
            if f.time == 0.0 {
                continue;
            }
            if f.operation.starts_with("Tree") {
                // The directories of the tree: a whole number.
                let got = f.rate * f.time;
                if got < 0.5 || (got - got.round()).abs() > (1e-9 * got).max(1e-6) {
                    return Err(at.err(
                        path,
                        &format!("rate-{}", f.operation),
                        format!(
                            "rate {} × time {} = {got} directories: not a whole number",
                            f.rate, f.time
                        ),
                    ));
                }
                continue;
            }
            let want = match f.rank {
                Some(_) => items as f64,
                None => items as f64 * n as f64,
            };
            let got = f.rate * f.time;
            if (got - want).abs() > 1e-6 * want {
                return Err(at.err(
                    path,
                    &format!("rate-{}", f.operation),
                    format!(
                        "rate {} × time {} = {got} items, where the file's {items} items per rank make {want}{}",
                        f.rate,
                        f.time,
                        items_at.map_or(String::new(), |i| format!(" (items at line {}, column {})", i.line, i.col))
                    ),
                ));
            }
        }
    }
    for f in &mut figures {
        f.items = items;
    }
    Ok(MdtestRankCsv {
        operations,
        num_tasks: per_rank.len() as i64,
        figures,
    })
}
