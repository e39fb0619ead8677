//! A decoded LinkTest run as the five `linktest_*` catalog tables, and the
//! `linktest` ingest kind.
//!
//! Row rules: `linktest_timings` has one row per ordered pair (from ≠ to) that was
//! measured, `from_rank` being the rank that initiated the ping-pong and `step`
//! the access-pattern step; a pair whose time and step are both 0 was not
//! measured (bisection) and has no row. Large tables are cut into batches of at
//! most [`BATCH_ROWS`] rows ([`TIMING_BATCH_ROWS`] for `linktest_timings`).
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};
use arrow::record_batch::RecordBatch;
use benchlake_core::catalog;
use benchlake_core::lake::TableOutput;
use chrono::{DateTime, NaiveDateTime};

use super::bulk::ColumnBuf;
use super::{LinkTestRun, read_file};
use crate::error::Result;
use crate::ingest::{IngestContext, InputFile};

/// Rows per batch of the large tables.
pub const BATCH_ROWS: usize = 1 << 20;

/// Rows per batch of `linktest_timings` (its row groups are still 2^20 rows:
/// the lake cuts row groups itself).
pub const TIMING_BATCH_ROWS: usize = 1 << 16;

/// The table names, in output order.
pub const TABLES: [&str; 5] = [
    "linktest_runs",
    "linktest_ranks",
    "linktest_timings",
    "linktest_alltoall",
    "linktest_slow_links",
];

/// The `linktest` ingest kind: every input is file 0 of a LinkTest SION set
/// (`name.000001`, … beside it are read with it and skipped as inputs).
pub fn ingest_linktest(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    let given: HashSet<PathBuf> = inputs.iter().map(|i| i.path.clone()).collect();
    let mut out: Vec<TableOutput> = TABLES
        .iter()
        .map(|t| TableOutput::new(*t, Vec::new()))
        .collect();
    for input in inputs {
        if is_continuation_of_given(&input.path, &given) {
            tracing::debug!(path = %input.path.display(), "part of a multi-file set given as input; read with file 0");
            continue;
        }
        let run = read_file(&input.path)?;
        for (acc, t) in out
            .iter_mut()
            .zip(into_run_tables(run, &ctx.run_id, &input.source)?)
        {
            acc.batches.extend(t.batches);
        }
    }
    Ok(out)
}

/// True when `p` is `base.NNNNNN` and `base` is also an input.
fn is_continuation_of_given(p: &Path, given: &HashSet<PathBuf>) -> bool {
    let s = p.as_os_str().to_string_lossy();
    match s.rsplit_once('.') {
        Some((base, suffix)) if suffix.len() == 6 && suffix.bytes().all(|b| b.is_ascii_digit()) => {
            given.contains(Path::new(base))
        }
        _ => false,
    }
}

/// The five tables of one run, consuming it: the timing matrices become the
/// `linktest_timings` columns in place where possible (see
/// `timing_columns_owned`), which saves copying and zeroing hundreds of MB
/// for thousands of ranks. Same rows as [`run_tables`].
pub fn into_run_tables(
    mut run: LinkTestRun,
    run_id: &str,
    source: &str,
) -> Result<Vec<TableOutput>> {
    let Some(cols) = timing_columns_owned(&mut run) else {
        return run_tables(&run, run_id, source);
    };
    Ok(vec![
        TableOutput::new("linktest_runs", vec![runs_batch(&run, run_id, source)?]),
        TableOutput::new("linktest_ranks", vec![ranks_batch(&run, run_id, source)?]),
        TableOutput::new(
            "linktest_timings",
            timings_batches_of(cols, run_id, source)?,
        ),
        TableOutput::new("linktest_alltoall", alltoall_batches(&run, run_id, source)?),
        TableOutput::new("linktest_slow_links", slow_batches(&run, run_id, source)?),
    ])
}

/// The five tables of one run.
pub fn run_tables(run: &LinkTestRun, run_id: &str, source: &str) -> Result<Vec<TableOutput>> {
    Ok(vec![
        TableOutput::new("linktest_runs", vec![runs_batch(run, run_id, source)?]),
        TableOutput::new("linktest_ranks", vec![ranks_batch(run, run_id, source)?]),
        TableOutput::new("linktest_timings", timings_batches(run, run_id, source)?),
        TableOutput::new("linktest_alltoall", alltoall_batches(run, run_id, source)?),
        TableOutput::new("linktest_slow_links", slow_batches(run, run_id, source)?),
    ])
}

/// A string column repeating `s`, `len` times (offsets computed, bytes
/// repeated: no per-value builder).
fn repeated(s: &str, len: usize) -> ArrayRef {
    let w = s.len();
    let total = w.checked_mul(len).filter(|t| *t <= i32::MAX as usize);
    match total {
        Some(_) => {
            let offsets = arrow::buffer::OffsetBuffer::new(
                (0..=len)
                    .map(|i| (i * w) as i32)
                    .collect::<Vec<i32>>()
                    .into(),
            );
            let values = arrow::buffer::Buffer::from(s.as_bytes().repeat(len));
            Arc::new(StringArray::new(offsets, values, None))
        }
        None => Arc::new(StringArray::from_iter_values(std::iter::repeat_n(s, len))),
    }
}

fn batch(table: &str, cols: Vec<ArrayRef>) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(catalog::schema(table)?, cols)?)
}

/// Cuts columns (without run_id/source) into batches, prefixing the constant columns.
fn batches(
    table: &str,
    run_id: &str,
    source: &str,
    cols: Vec<ArrayRef>,
) -> Result<Vec<RecordBatch>> {
    let rows = cols.first().map(|c| c.len()).unwrap_or(0);
    // Utf8 offsets are i32: keep a batch's constant string bytes below 2 GiB.
    let widest = run_id.len().max(source.len()).max(1);
    let per = BATCH_ROWS.min((i32::MAX as usize / widest).max(1));
    let first = rows.min(per);
    let rid = repeated(run_id, first);
    let src = repeated(source, first);
    let mut out = Vec::with_capacity(rows.div_ceil(per.max(1)).max(1));
    let mut at = 0;
    loop {
        let len = per.min(rows - at);
        let mut v = vec![rid.slice(0, len), src.slice(0, len)];
        v.extend(cols.iter().map(|c| c.slice(at, len)));
        out.push(batch(table, v)?);
        at += len;
        if at >= rows {
            break;
        }
    }
    Ok(out)
}

/// Parses a 2.x start/end time string; `None` when its format is not known.
/// LinkTest does not document the format, so the common ones are tried and naive
/// times are taken as UTC.
pub fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_micros());
    }
    for f in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%a %b %e %H:%M:%S %Y",
        "%Y-%m-%d_%H:%M:%S",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, f) {
            return Some(t.and_utc().timestamp_micros());
        }
    }
    for f in ["%Y-%m-%d %H:%M:%S %z", "%a %b %e %H:%M:%S %z %Y"] {
        if let Ok(t) = DateTime::parse_from_str(s, f) {
            return Some(t.timestamp_micros());
        }
    }
    None
}

fn runs_batch(run: &LinkTestRun, run_id: &str, source: &str) -> Result<RecordBatch> {
    let (min, avg, max) = run.summary();
    let a2a = run.a2a_summary();
    let start = run
        .permutations
        .first()
        .and_then(|p| p.start_time.as_deref())
        .and_then(parse_time);
    let end = run
        .permutations
        .last()
        .and_then(|p| p.end_time.as_deref())
        .and_then(parse_time);
    let i64c = |v: i64| -> ArrayRef { Arc::new(Int64Array::from(vec![v])) };
    let i64o =
        |v: Option<u64>| -> ArrayRef { Arc::new(Int64Array::from(vec![v.map(|x| x as i64)])) };
    let b = |v: bool| -> ArrayRef { Arc::new(BooleanArray::from(vec![v])) };
    let f = |v: f64| -> ArrayRef { Arc::new(Float64Array::from(vec![v])) };
    let fo = |v: Option<f64>| -> ArrayRef { Arc::new(Float64Array::from(vec![v])) };
    let ts = |v: Option<i64>| -> ArrayRef {
        Arc::new(TimestampMicrosecondArray::from(vec![v]).with_timezone("UTC"))
    };
    let fl = &run.flags;
    batch(
        "linktest_runs",
        vec![
            repeated(run_id, 1),
            repeated(source, 1),
            repeated(&run.version_string(), 1),
            Arc::new(StringArray::from(vec![run.git_hash.as_deref()])),
            repeated(&run.mode, 1),
            i64c(run.num_tasks as i64),
            i64c(run.num_messages as i64),
            i64c(run.message_size as i64),
            i64o(run.num_warmup_messages),
            i64c(run.num_serial_retests as i64),
            i64o(run.num_multi_buffers),
            i64o(run.num_randomized_tasks),
            b(fl.all_to_all),
            b(fl.bidirectional),
            b(fl.unidirectional),
            b(fl.bisection),
            b(fl.randomize_steps),
            b(fl.serial),
            ts(start),
            ts(end),
            f(min),
            f(avg),
            f(max),
            fo(a2a.map(|a| a.0)),
            fo(a2a.map(|a| a.1)),
            fo(a2a.map(|a| a.2)),
        ],
    )
}

fn ranks_batch(run: &LinkTestRun, run_id: &str, source: &str) -> Result<RecordBatch> {
    let n = run.ranks.len();
    batch(
        "linktest_ranks",
        vec![
            repeated(run_id, n),
            repeated(source, n),
            Arc::new(Int32Array::from_iter_values(
                run.ranks.iter().map(|r| r.rank as i32),
            )),
            Arc::new(StringArray::from_iter_values(
                run.ranks.iter().map(|r| r.hostname.as_str()),
            )),
            Arc::new(Int32Array::from(
                run.ranks.iter().map(|r| r.core_id).collect::<Vec<_>>(),
            )),
        ],
    )
}

/// The value columns of `linktest_timings` and the row at which each
/// permutation starts (one more entry: the row count).
struct TimingColumns {
    from: ArrayRef,
    to: ArrayRef,
    step: ArrayRef,
    time: ArrayRef,
    perm_start: Vec<usize>,
}

/// True when every off-diagonal pair of the n × n matrices was measured.
fn all_measured(n: usize, times: &[f64], steps: &[i32]) -> bool {
    times
        .chunks_exact(n.max(1))
        .zip(steps.chunks_exact(n.max(1)))
        .enumerate()
        .all(|(i, (trow, srow))| {
            !trow
                .iter()
                .zip(srow)
                .enumerate()
                .any(|(j, (t, s))| j != i && *t == 0.0 && *s == 0)
        })
}

/// Removes the diagonal of an n × n row-major matrix in place: row i's
/// off-diagonal entries end up at `i * (n - 1)..(i + 1) * (n - 1)`.
fn drop_diagonal<T: Copy>(m: &mut Vec<T>, n: usize) {
    for i in 0..n {
        let dst = i * (n - 1);
        let row = i * n;
        // Entries before the diagonal, then after it; both move left, so
        // copying front to back never overwrites what is still to be read.
        m.copy_within(row..row + i, dst);
        m.copy_within(row + i + 1..row + n, dst + i);
    }
    m.truncate(n * n.saturating_sub(1));
}

/// The timing columns built by taking the decoded matrices out of `run`: with
/// one permutation in which every pair was measured (the normal case), the
/// time and step matrices become the Arrow columns in place (their diagonal
/// dropped), with no new memory. `None` otherwise (`run` is left untouched).
fn timing_columns_owned(run: &mut LinkTestRun) -> Option<TimingColumns> {
    let n = run.num_tasks;
    let [pm] = run.permutations.as_mut_slice() else {
        return None;
    };
    if n < 2 || pm.times.len() != n * n || pm.steps.len() != n * n {
        return None;
    }
    if !all_measured(n, &pm.times, &pm.steps) {
        return None;
    }
    let mut times = std::mem::take(&mut pm.times);
    let mut steps = std::mem::take(&mut pm.steps);
    drop_diagonal(&mut times, n);
    drop_diagonal(&mut steps, n);
    let rows = n * (n - 1);
    let mut from_buf = ColumnBuf::<i32>::zeroed(rows);
    let mut to_buf = ColumnBuf::<i32>::zeroed(rows);
    {
        let (from, to) = (from_buf.as_mut_slice(), to_buf.as_mut_slice());
        let all_ranks: Vec<i32> = (0..n as i32).collect();
        for i in 0..n {
            let k = i * (n - 1);
            from[k..k + n - 1].fill(i as i32);
            to[k..k + i].copy_from_slice(&all_ranks[..i]);
            to[k + i..k + n - 1].copy_from_slice(&all_ranks[i + 1..]);
        }
    }
    Some(TimingColumns {
        from: Arc::new(Int32Array::new(from_buf.into_scalar(rows), None)),
        to: Arc::new(Int32Array::new(to_buf.into_scalar(rows), None)),
        step: Arc::new(Int32Array::new(steps.into(), None)),
        time: Arc::new(Float64Array::new(times.into(), None)),
        perm_start: vec![0, rows],
    })
}

fn timings_batches(run: &LinkTestRun, run_id: &str, source: &str) -> Result<Vec<RecordBatch>> {
    timings_batches_of(timing_columns(run), run_id, source)
}

/// The timing columns copied out of the run's matrices.
fn timing_columns(run: &LinkTestRun) -> TimingColumns {
    let n = run.num_tasks;
    // Upper bound of the rows; the columns are filled in place (see `bulk`) and
    // the untouched tail of a mapping costs nothing.
    let cap = n * n.saturating_sub(1) * run.permutations.len();
    let mut from_buf = ColumnBuf::<i32>::zeroed(cap);
    let mut to_buf = ColumnBuf::<i32>::zeroed(cap);
    let mut step_buf = ColumnBuf::<i32>::zeroed(cap);
    let mut time_buf = ColumnBuf::<f64>::zeroed(cap);
    // Row where each permutation starts, for the permutation column.
    let mut perm_start = Vec::with_capacity(run.permutations.len() + 1);
    let mut k = 0;
    {
        let (from, to) = (from_buf.as_mut_slice(), to_buf.as_mut_slice());
        let (step, time) = (step_buf.as_mut_slice(), time_buf.as_mut_slice());
        let all_ranks: Vec<i32> = (0..n as i32).collect();
        for pm in &run.permutations {
            perm_start.push(k);
            let rows = pm
                .times
                .chunks_exact(n.max(1))
                .zip(pm.steps.chunks_exact(n.max(1)));
            for (i, (trow, srow)) in rows.enumerate() {
                let unmeasured =
                    |(j, (t, s)): (usize, (&f64, &i32))| j != i && *t == 0.0 && *s == 0;
                if !trow.iter().zip(srow).enumerate().any(unmeasured) && k + n - 1 <= cap {
                    // Every off-diagonal pair measured (the normal case): bulk copies.
                    let end = k + n - 1;
                    from[k..end].fill(i as i32);
                    for part in [0..i, i + 1..n] {
                        let len = part.len();
                        to[k..k + len].copy_from_slice(&all_ranks[part.clone()]);
                        step[k..k + len].copy_from_slice(&srow[part.clone()]);
                        time[k..k + len].copy_from_slice(&trow[part]);
                        k += len;
                    }
                    continue;
                }
                for (j, (t, s)) in trow.iter().zip(srow).enumerate() {
                    if i == j || (*t == 0.0 && *s == 0) || k >= cap {
                        continue;
                    }
                    from[k] = i as i32;
                    to[k] = j as i32;
                    step[k] = *s;
                    time[k] = *t;
                    k += 1;
                }
            }
        }
        perm_start.push(k);
    }
    let rows = k;
    TimingColumns {
        from: Arc::new(Int32Array::new(from_buf.into_scalar(rows), None)),
        to: Arc::new(Int32Array::new(to_buf.into_scalar(rows), None)),
        step: Arc::new(Int32Array::new(step_buf.into_scalar(rows), None)),
        time: Arc::new(Float64Array::new(time_buf.into_scalar(rows), None)),
        perm_start,
    }
}

/// Cuts the timing columns into batches of at most [`TIMING_BATCH_ROWS`] rows with
/// the constant run_id, source and permutation columns.
fn timings_batches_of(cols: TimingColumns, run_id: &str, source: &str) -> Result<Vec<RecordBatch>> {
    let TimingColumns {
        from,
        to,
        step,
        time,
        perm_start,
    } = cols;
    let rows = from.len();

    // The constant columns: one array of a batch's length, sliced by every
    // batch. Batches of this table are kept small (TIMING_BATCH_ROWS) so the
    // repeated run_id/source strings stay a few MB; encode_parquet regroups
    // batches into row groups of its own size anyway.
    let widest = run_id.len().max(source.len()).max(1);
    let per = TIMING_BATCH_ROWS.min((i32::MAX as usize / widest).max(1));
    let first = rows.min(per);
    let rid = repeated(run_id, first);
    let src = repeated(source, first);
    let mut shared_perm: Vec<(i32, ArrayRef)> = Vec::new();
    let mut out = Vec::with_capacity(rows.div_ceil(per).max(1));
    let mut at = 0;
    loop {
        let len = per.min(rows - at);
        // The permutations this batch covers.
        let mut spans = Vec::new();
        for (p, w) in perm_start.windows(2).enumerate() {
            let (s, e) = (w[0].max(at), w[1].min(at + len));
            if s < e {
                spans.push((p as i32, e - s));
            }
        }
        let perm: ArrayRef = match spans.as_slice() {
            [(p, _)] => {
                let shared = match shared_perm.iter().find(|(q, _)| q == p) {
                    Some((_, a)) => a.clone(),
                    None => {
                        let a: ArrayRef = Arc::new(Int32Array::from(vec![*p; first]));
                        shared_perm.push((*p, a.clone()));
                        a
                    }
                };
                shared.slice(0, len)
            }
            _ => Arc::new(Int32Array::from_iter_values(
                spans.iter().flat_map(|(p, l)| std::iter::repeat_n(*p, *l)),
            )),
        };
        out.push(batch(
            "linktest_timings",
            vec![
                rid.slice(0, len),
                src.slice(0, len),
                perm,
                from.slice(at, len),
                to.slice(at, len),
                step.slice(at, len),
                time.slice(at, len),
            ],
        )?);
        at += len;
        if at >= rows {
            break;
        }
    }
    Ok(out)
}

fn alltoall_batches(run: &LinkTestRun, run_id: &str, source: &str) -> Result<Vec<RecordBatch>> {
    let mut perm = Vec::new();
    let mut rank = Vec::new();
    let mut step = Vec::new();
    let mut time = Vec::new();
    for (p, pm) in run.permutations.iter().enumerate() {
        for a in &pm.alltoall {
            perm.push(p as i32);
            rank.push(a.rank as i32);
            step.push(a.step);
            time.push(a.time_s);
        }
    }
    batches(
        "linktest_alltoall",
        run_id,
        source,
        vec![
            Arc::new(Int32Array::from(perm)),
            Arc::new(Int32Array::from(rank)),
            Arc::new(Int32Array::from(step)),
            Arc::new(Float64Array::from(time)),
        ],
    )
}

fn slow_batches(run: &LinkTestRun, run_id: &str, source: &str) -> Result<Vec<RecordBatch>> {
    let mut perm = Vec::new();
    let mut kind = Vec::new();
    let mut from = Vec::new();
    let mut to = Vec::new();
    let mut time = Vec::new();
    let mut retest = Vec::new();
    for (p, pm) in run.permutations.iter().enumerate() {
        for s in &pm.slow_links {
            perm.push(p as i32);
            kind.push(if s.retest_time_s.is_some() {
                "retested"
            } else {
                "slowest"
            });
            from.push(s.from_rank as i32);
            to.push(s.to_rank as i32);
            time.push(s.time_s);
            retest.push(s.retest_time_s);
        }
    }
    batches(
        "linktest_slow_links",
        run_id,
        source,
        vec![
            Arc::new(Int32Array::from(perm)),
            Arc::new(StringArray::from(kind)),
            Arc::new(Int32Array::from(from)),
            Arc::new(Int32Array::from(to)),
            Arc::new(Float64Array::from(time)),
            Arc::new(Float64Array::from(retest)),
        ],
    )
}
