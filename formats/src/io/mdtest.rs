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
            let nums: Vec<_> = w.iter().filter(|f| f.text.parse::<i64>().is_ok()).collect();
            if let (Some(t), Some(n)) = (nums.first(), nums.get(1)) {
                out.num_tasks = Some(t.i64(path, "total tasks")?);
                out.num_nodes = Some(n.i64(path, "nodes")?);
            }
            continue;
        }
        if let Some((n, rest)) = t.split_once(" tasks, ")
            && let Ok(n) = n.trim().parse::<i64>()
        {
            let items = rest
                .split_whitespace()
                .next()
                .and_then(|x| x.parse::<i64>().ok());
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
            rows.push(parse_summary_row(path, row, j as u64 + 1)?);
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
fn parse_summary_row(path: &Path, row: &str, line_no: u64) -> Result<MdtestSummaryLine> {
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
    let last4: Vec<Field<'_>> = f.iter().rev().take(4).rev().copied().collect();
    let num = |k: usize, n: &str| -> Result<f64> {
        last4
            .get(k)
            .ok_or_else(|| {
                FormatError::malformed(path, n, Position::LineCol(line_no, 1), "missing")
            })
            .and_then(|x| x.f64(path, n))
    };
    Ok(MdtestSummaryLine {
        operation: name.join(" "),
        max: num(0, "Max")?,
        min: num(1, "Min")?,
        mean: num(2, "Mean")?,
        stddev: num(3, "Std Dev")?,
    })
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
        operations.push(op.to_string());
    }
    text::require_complete(path, text, "row")?;
    let mut figures = Vec::new();
    let mut items: Option<i64> = None;
    let mut per_rank: std::collections::BTreeMap<i32, i64> = Default::default();
    let mut ranks: Vec<i32> = Vec::new();
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
                items = Some(v);
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
            if rate < 0.0 || time < 0.0 || !time.is_finite() {
                return Err(rf.err(path, op, "negative rate or time"));
            }
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
    for f in &mut figures {
        f.items = items;
    }
    Ok(MdtestRankCsv {
        operations,
        num_tasks: per_rank.len() as i64,
        figures,
    })
}
