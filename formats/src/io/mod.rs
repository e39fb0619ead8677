//! I/O benchmark readers and their ingest kinds:
//! - `ior`: IOR JSON summaries and IOR human-readable outputs → `io_results`,
//!   `io_summary`; IOR per-rank CSVs (`access,rank,…` header) → `io_task_times`;
//! - `mdtest`: mdtest text output → `mdtest_summary`; mdtest per-rank CSVs
//!   (`rank,items,…` header) → `mdtest_results`;
//! - `pio`: pio result files (`benchlake-pio/1`) → `io_results`,
//!   `io_task_times`, `io_summary`.
//!
//! Files are recognised by content, not name, so raw object keys of any shape
//! work; a file that is none of the accepted kinds is an error naming it.
pub mod command;
pub mod ior;
pub mod ior_text;
pub mod mdtest;
pub mod pio;
pub mod rows;
pub mod text;

use benchlake_core::lake::TableOutput;

use crate::error::{FormatError, Position, Result};
use crate::ingest::{IngestContext, InputFile};
use rows::*;

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("").trim_end_matches('\r')
}

fn looks_like_json(s: &str) -> bool {
    s.trim_start().starts_with('{')
}

/// The `ior` ingest kind.
pub fn ingest_ior(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    let (mut results, mut tasks, mut summary) = (Vec::new(), Vec::new(), Vec::new());
    for input in inputs {
        let bytes = text::read_bounded(&input.path)?;
        ior_file(input, &bytes, &mut results, &mut tasks, &mut summary)
            .map_err(|e| e.with_offset(&bytes))?;
    }
    non_empty(vec![
        io_results(&ctx.run_id, &results)?,
        io_task_times(&ctx.run_id, &tasks)?,
        io_summary(&ctx.run_id, &summary)?,
    ])
}

/// The rows of one `ior` input file.
fn ior_file(
    input: &InputFile,
    bytes: &[u8],
    results: &mut Vec<IoResultRow>,
    tasks: &mut Vec<IoTaskRow>,
    summary: &mut Vec<IoSummaryRow>,
) -> Result<()> {
    {
        let s = text::utf8(&input.path, bytes)?;
        if looks_like_json(s) {
            let j = ior::parse_json(&input.path, bytes)?;
            ior_rows(&j, &input.source, results, summary);
        } else if first_line(s).starts_with("IOR-") {
            let t = ior_text::parse(&input.path, s)?;
            ior_text_rows(&t, &input.source, results, summary);
        } else if first_line(s).starts_with("access,rank") {
            for r in ior::parse_rank_csv(&input.path, s)? {
                tasks.push(IoTaskRow {
                    source: input.source.clone(),
                    iteration: r.iteration,
                    operation: r.access,
                    rank: r.rank,
                    open_time_s: None,
                    xfer_time_s: Some(r.runtime),
                    close_time_s: None,
                    total_time_s: Some(r.runtime_with_openclose),
                    bytes: None,
                    host: None,
                    test_id: None,
                });
            }
        } else {
            return Err(FormatError::malformed(
                &input.path,
                "ior input",
                Position::LineCol(1, 1),
                "not an IOR JSON summary, human-readable output or per-rank CSV",
            ));
        }
    }
    Ok(())
}

/// Drops tables without rows (e.g. `io_task_times` when no per-rank CSV was
/// given), so no empty Parquet objects are written.
fn non_empty(tables: Vec<TableOutput>) -> Result<Vec<TableOutput>> {
    Ok(tables.into_iter().filter(|t| t.rows() > 0).collect())
}

/// The `io_summary` row of one IOR summary line: the JSON summary
/// ([`ior::IorOpSummary`]) and the text one ([`ior_text::IorTextSummary`])
/// name these fields alike.
macro_rules! ior_summary_row {
    ($source:expr, $s:expr) => {{
        let s = $s;
        IoSummaryRow {
            source: $source.to_string(),
            tool: "ior".into(),
            test_id: s.test_id,
            operation: s.operation.clone(),
            api: s.api.clone(),
            num_tasks: s.num_tasks,
            iterations: s.repetitions,
            bytes: s
                .block_size
                .saturating_mul(s.segment_count)
                .saturating_mul(s.num_tasks),
            bw_max_mib_s: s.bw_max_mib,
            bw_min_mib_s: s.bw_min_mib,
            bw_mean_mib_s: s.bw_mean_mib,
            bw_std_mib_s: s.bw_std_mib,
            ops_max: Some(s.ops_max),
            ops_min: Some(s.ops_min),
            ops_mean: Some(s.ops_mean),
            ops_std: Some(s.ops_sd),
            mean_time_s: s.mean_time,
        }
    }};
}

/// Rows of one IOR JSON summary.
pub fn ior_rows(
    j: &ior::IorSummary,
    source: &str,
    results: &mut Vec<IoResultRow>,
    summary: &mut Vec<IoSummaryRow>,
) {
    for t in &j.tests {
        let p = &t.parameters;
        let n = t.num_tasks();
        let bytes = p
            .block_size
            .saturating_mul(p.segment_count)
            .saturating_mul(n);
        for (iteration, r) in t.iterations() {
            results.push(IoResultRow {
                source: source.to_string(),
                tool: "ior".into(),
                api: p.api.clone(),
                pattern: t.pattern().into(),
                file_per_proc: p.file_per_proc != 0,
                num_tasks: n,
                block_size: p.block_size,
                transfer_size: p.transfer_size,
                segments: p.segment_count,
                iteration,
                operation: r.access.clone(),
                bytes,
                bw_mib_s: r.bw_mib.unwrap_or(0.0),
                iops: r.iops,
                open_time_s: r.open_time,
                xfer_time_s: r.wr_rd_time,
                close_time_s: r.close_time,
                total_time_s: r.total_time,
                fsync: p.fsync != 0,
                collective: p.collective != 0,
                test_id: Some(t.test_id),
                verify_errors: None,
                cache_mode: None,
            });
        }
    }
    summary.extend(j.summary.iter().map(|s| ior_summary_row!(source, s)));
}

/// Rows of one IOR human-readable output. The test's sizes come from its
/// `Summary of all tests` line (bytes); fsync from the command line (`-e`),
/// which the setup block does not print.
pub fn ior_text_rows(
    t: &ior_text::IorText,
    source: &str,
    results: &mut Vec<IoResultRow>,
    summary: &mut Vec<IoSummaryRow>,
) {
    for test in &t.tests {
        let sm = t.summary.iter().find(|s| s.test_id == test.test_id);
        let opt = |k: &str| test.options.get(k).map(String::as_str).unwrap_or("");
        let num = |k: &str| opt(k).parse::<i64>().ok();
        let segments = sm
            .map(|s| s.segment_count)
            .or_else(|| num("segments"))
            .unwrap_or(1);
        let num_tasks = sm
            .map(|s| s.num_tasks)
            .or_else(|| num("tasks"))
            .unwrap_or(0);
        let random = opt("ordering in a file") == "random";
        let pattern = match (random, segments > 1) {
            (true, false) => "random_offset",
            (true, true) => "random_offset_strided",
            (false, false) => "segmented",
            (false, true) => "strided",
        };
        for r in &test.results {
            // Without a summary line, sizes come from the Results columns (KiB).
            let block = sm
                .map(|s| s.block_size)
                .unwrap_or((r.block_kib * 1024.0).round() as i64);
            let xfer = sm
                .map(|s| s.transfer_size)
                .unwrap_or((r.xfer_kib * 1024.0).round() as i64);
            results.push(IoResultRow {
                source: source.to_string(),
                tool: "ior".into(),
                api: sm
                    .map(|s| s.api.clone())
                    .unwrap_or_else(|| opt("api").to_string()),
                pattern: pattern.into(),
                file_per_proc: sm
                    .map(|s| s.file_per_proc)
                    .unwrap_or(opt("access") == "file-per-process"),
                num_tasks,
                block_size: block,
                transfer_size: xfer,
                segments,
                iteration: r.iteration,
                operation: r.access.clone(),
                bytes: block.saturating_mul(segments).saturating_mul(num_tasks),
                bw_mib_s: r.bw_mib,
                iops: Some(r.iops),
                open_time_s: Some(r.open),
                xfer_time_s: Some(r.wr_rd),
                close_time_s: Some(r.close),
                total_time_s: r.total,
                fsync: t.fsync(),
                collective: opt("type") == "collective",
                test_id: Some(test.test_id),
                verify_errors: None,
                cache_mode: None,
            });
        }
    }
    summary.extend(t.summary.iter().map(|s| ior_summary_row!(source, s)));
}

/// The `mdtest` ingest kind.
pub fn ingest_mdtest(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    let (mut results, mut summary) = (Vec::new(), Vec::new());
    for input in inputs {
        let bytes = text::read_bounded(&input.path)?;
        mdtest_file(input, &bytes, &mut results, &mut summary)
            .map_err(|e| e.with_offset(&bytes))?;
    }
    non_empty(vec![
        mdtest_results(&ctx.run_id, &results)?,
        mdtest_summary(&ctx.run_id, &summary)?,
    ])
}

/// The rows of one `mdtest` input file.
fn mdtest_file(
    input: &InputFile,
    bytes: &[u8],
    results: &mut Vec<MdtestRow>,
    summary: &mut Vec<MdtestSummaryRow>,
) -> Result<()> {
    {
        let s = text::utf8(&input.path, bytes)?;
        if first_line(s).starts_with("rank,items") {
            let csv = mdtest::parse_rank_csv(&input.path, s)?;
            for f in csv.figures {
                results.push(MdtestRow {
                    source: input.source.clone(),
                    operation: f.operation,
                    iteration: f.iteration,
                    num_tasks: csv.num_tasks,
                    items: f.items,
                    rate_per_s: f.rate,
                    time_s: Some(f.time),
                    rank: f.rank,
                });
            }
        } else {
            let t = mdtest::parse_text(&input.path, s)?;
            for sm in t.summaries {
                for l in sm.lines {
                    summary.push(MdtestSummaryRow {
                        source: input.source.clone(),
                        operation: l.operation,
                        statistic: sm.statistic.clone(),
                        unit: if sm.statistic == "rate" { "ops/s" } else { "s" }.into(),
                        num_tasks: sm.num_tasks,
                        iterations: sm.iterations,
                        items: sm.items,
                        max: l.max,
                        min: l.min,
                        mean: l.mean,
                        stddev: l.stddev,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Rows of one pio result.
pub fn pio_rows(
    r: &pio::PioResult,
    source: &str,
    results: &mut Vec<IoResultRow>,
    tasks: &mut Vec<IoTaskRow>,
    summary: &mut Vec<IoSummaryRow>,
) {
    let n = i64::from(r.num_tasks);
    let sat = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for p in &r.phases {
        results.push(IoResultRow {
            source: source.to_string(),
            tool: "pio".into(),
            api: r.api.clone(),
            pattern: r.pattern.clone(),
            file_per_proc: r.file_per_proc,
            num_tasks: n,
            block_size: sat(r.block_size),
            transfer_size: sat(r.transfer_size),
            segments: sat(r.segments),
            iteration: i64::from(p.iteration),
            operation: p.operation.clone(),
            bytes: sat(p.bytes),
            bw_mib_s: p.bw_mib_s,
            iops: Some(p.iops),
            open_time_s: Some(p.open_time_s),
            xfer_time_s: Some(p.xfer_time_s),
            close_time_s: Some(p.close_time_s),
            total_time_s: p.total_time_s,
            fsync: r.fsync,
            collective: r.collective,
            test_id: Some(0),
            verify_errors: p.verify_errors.map(sat),
            cache_mode: (p.operation == "read").then(|| r.cache_mode.clone()),
        });
        for t in &p.tasks {
            tasks.push(IoTaskRow {
                source: source.to_string(),
                iteration: i64::from(p.iteration),
                operation: p.operation.clone(),
                rank: i32::try_from(t.rank).unwrap_or(i32::MAX),
                open_time_s: Some(t.open_stop - t.open_start),
                xfer_time_s: Some(t.xfer_stop - t.xfer_start),
                close_time_s: Some(t.close_stop - t.close_start),
                total_time_s: Some(t.close_stop - t.open_start),
                bytes: Some(sat(t.bytes)),
                host: r.hosts.get(t.rank as usize).cloned(),
                test_id: Some(0),
            });
        }
    }
    for s in &r.summary {
        summary.push(IoSummaryRow {
            source: source.to_string(),
            tool: "pio".into(),
            test_id: 0,
            operation: s.operation.clone(),
            api: r.api.clone(),
            num_tasks: n,
            iterations: sat(s.iterations),
            bytes: sat(s.bytes),
            bw_max_mib_s: s.bw_mib_s.max,
            bw_min_mib_s: s.bw_mib_s.min,
            bw_mean_mib_s: s.bw_mib_s.mean,
            bw_std_mib_s: s.bw_mib_s.stddev,
            ops_max: Some(s.iops.max),
            ops_min: Some(s.iops.min),
            ops_mean: Some(s.iops.mean),
            ops_std: Some(s.iops.stddev),
            mean_time_s: s.total_time_s.mean,
        });
    }
}

/// The `pio` ingest kind.
pub fn ingest_pio(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    let (mut results, mut tasks, mut summary) = (Vec::new(), Vec::new(), Vec::new());
    for input in inputs {
        let bytes = text::read_bounded(&input.path)?;
        let r = pio::parse(&input.path, &bytes).map_err(|e| e.with_offset(&bytes))?;
        pio_rows(&r, &input.source, &mut results, &mut tasks, &mut summary);
    }
    non_empty(vec![
        io_results(&ctx.run_id, &results)?,
        io_task_times(&ctx.run_id, &tasks)?,
        io_summary(&ctx.run_id, &summary)?,
    ])
}
