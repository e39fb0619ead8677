//! A decoded LinkTest run as the five `linktest_*` catalog tables, and the
//! `linktest` ingest kind.
//!
//! Row rules: `linktest_timings` has one row per ordered pair (from ≠ to) that was
//! measured, `from_rank` being the rank that initiated the ping-pong and `step`
//! the access-pattern step; a pair whose time and step are both 0 was not
//! measured (bisection) and has no row. Large tables are cut into batches of at
//! most [`BATCH_ROWS`] rows ([`TIMING_BATCH_ROWS`] for `linktest_timings`).
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};
use arrow::record_batch::RecordBatch;
use benchlake_core::catalog;
use benchlake_core::lake::{
    EncodedTable, GroupColumn, ParquetEncoder, ROW_GROUP_ROWS, TableOutput,
};
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
///
/// Rows of many files are gathered into one batch per table (see
/// [`Gather`]), so a thousand small files cost a thousand decodes and five
/// batches, not five thousand batches; a file with many pair times keeps
/// its own `linktest_timings` batches. The rows and their order are those of
/// [`into_run_tables`] for each file in turn.
pub fn ingest_linktest(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    let given: HashSet<&Path> = inputs.iter().map(|i| i.path.as_path()).collect();
    let mut g = Gather::for_files(inputs.len());
    for input in inputs {
        if is_continuation_of_given(&input.path, &given) {
            tracing::debug!(path = %input.path.display(), "part of a multi-file set given as input; read with file 0");
            continue;
        }
        let run = read_file(&input.path)?;
        g.add(run, &ctx.run_id, &input.source)?;
    }
    g.finish(&ctx.run_id)
}

/// True when `p` is `base.NNNNNN` and `base` is also an input.
pub(super) fn is_continuation_of_given(p: &Path, given: &HashSet<&Path>) -> bool {
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
            timings_batches_of(cols, run_id, source, &rank_hosts(&run))?,
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
pub(super) fn repeated(s: &str, len: usize) -> ArrayRef {
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
    let mut cols = vec![repeated(run_id, 1), repeated(source, 1)];
    cols.extend(runs_columns(&[RunRow::of(run)]));
    batch("linktest_runs", cols)
}

/// The `linktest_runs` values of one run (all but run_id and source).
struct RunRow {
    version: String,
    git_hash: Option<String>,
    mode: String,
    /// num_tasks, num_messages, message_size, num_serial_retests.
    ints: [i64; 4],
    opt_ints: [Option<u64>; 3],
    flags: [bool; 6],
    start: Option<i64>,
    end: Option<i64>,
    summary: [f64; 3],
    a2a: Option<(f64, f64, f64)>,
}

impl RunRow {
    fn of(run: &LinkTestRun) -> Self {
        let (min, avg, max) = run.summary();
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
        let fl = &run.flags;
        RunRow {
            version: run.version_string(),
            git_hash: run.git_hash.clone(),
            mode: run.mode.clone(),
            ints: [
                run.num_tasks as i64,
                run.num_messages as i64,
                run.message_size as i64,
                run.num_serial_retests as i64,
            ],
            opt_ints: [
                run.num_warmup_messages,
                run.num_multi_buffers,
                run.num_randomized_tasks,
            ],
            flags: [
                fl.all_to_all,
                fl.bidirectional,
                fl.unidirectional,
                fl.bisection,
                fl.randomize_steps,
                fl.serial,
            ],
            start,
            end,
            summary: [min, avg, max],
            a2a: run.a2a_summary(),
        }
    }
}

/// The `linktest_runs` columns after run_id and source, one row per run.
fn runs_columns(rows: &[RunRow]) -> Vec<ArrayRef> {
    let i64o = |f: &dyn Fn(&RunRow) -> Option<u64>| -> ArrayRef {
        Arc::new(Int64Array::from_iter(
            rows.iter().map(|r| f(r).map(|x| x as i64)),
        ))
    };
    let b = |k: usize| -> ArrayRef {
        Arc::new(BooleanArray::from_iter(
            rows.iter().map(|r| Some(r.flags[k])),
        ))
    };
    let f = |k: usize| -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(
            rows.iter().map(|r| r.summary[k]),
        ))
    };
    let fo = |g: &dyn Fn(&(f64, f64, f64)) -> f64| -> ArrayRef {
        Arc::new(Float64Array::from_iter(
            rows.iter().map(|r| r.a2a.as_ref().map(g)),
        ))
    };
    let ts = |g: &dyn Fn(&RunRow) -> Option<i64>| -> ArrayRef {
        Arc::new(TimestampMicrosecondArray::from_iter(rows.iter().map(g)).with_timezone("UTC"))
    };
    let i64c = |k: usize| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.ints[k])))
    };
    vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.version.as_str()),
        )),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.git_hash.as_deref()),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.mode.as_str()),
        )),
        i64c(0),
        i64c(1),
        i64c(2),
        i64o(&|r| r.opt_ints[0]),
        i64c(3),
        i64o(&|r| r.opt_ints[1]),
        i64o(&|r| r.opt_ints[2]),
        b(0),
        b(1),
        b(2),
        b(3),
        b(4),
        b(5),
        ts(&|r| r.start),
        ts(&|r| r.end),
        f(0),
        f(1),
        f(2),
        fo(&|a| a.0),
        fo(&|a| a.1),
        fo(&|a| a.2),
    ]
}

fn ranks_batch(run: &LinkTestRun, run_id: &str, source: &str) -> Result<RecordBatch> {
    let mut rows = RankRows::default();
    rows.add(run)?;
    let mut cols = vec![
        repeated(run_id, rows.rank.len()),
        repeated(source, rows.rank.len()),
    ];
    cols.extend(rows.columns());
    batch("linktest_ranks", cols)
}

/// `linktest_ranks` values (all but run_id and source).
#[derive(Default)]
struct RankRows {
    rank: Vec<i32>,
    host_offsets: Vec<i32>,
    host_bytes: Vec<u8>,
    core: Vec<Option<i32>>,
}

impl RankRows {
    fn add(&mut self, run: &LinkTestRun) -> Result<()> {
        if self.host_offsets.is_empty() {
            self.host_offsets.push(0);
        }
        for r in &run.ranks {
            self.host_bytes.extend_from_slice(r.hostname.as_bytes());
            let end = i32::try_from(self.host_bytes.len()).map_err(|_| {
                crate::error::FormatError::malformed(
                    "<linktest ingest>",
                    "hostname",
                    crate::error::Position::None,
                    "the hostnames of one batch exceed 2 GiB",
                )
            })?;
            self.host_offsets.push(end);
        }
        self.rank.extend(run.ranks.iter().map(|r| r.rank as i32));
        self.core.extend(run.ranks.iter().map(|r| r.core_id));
        Ok(())
    }

    fn bytes(&self) -> usize {
        self.host_bytes.len()
    }

    fn columns(self) -> Vec<ArrayRef> {
        let hosts: ArrayRef = if self.host_offsets.is_empty() {
            Arc::new(StringArray::from(Vec::<&str>::new()))
        } else {
            // Every hostname came from a `String`, so the bytes are UTF-8.
            Arc::new(StringArray::new(
                arrow::buffer::OffsetBuffer::new(self.host_offsets.into()),
                self.host_bytes.into(),
                None,
            ))
        };
        vec![
            Arc::new(Int32Array::from(self.rank)),
            hosts,
            Arc::new(Int32Array::from(self.core)),
        ]
    }
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
    timings_batches_of(timing_columns(run), run_id, source, &rank_hosts(run))
}

/// Every rank's hostname, by rank: the `from_host`/`to_host` of its pairs.
pub(super) fn rank_hosts(run: &LinkTestRun) -> Vec<&str> {
    let mut out = vec![""; run.num_tasks];
    for r in &run.ranks {
        if let Some(h) = out.get_mut(r.rank) {
            *h = r.hostname.as_str();
        }
    }
    out
}

/// The hostname of `rank` ("" for a rank the file does not list).
pub(super) fn host_of<'a>(hosts: &[&'a str], rank: i32) -> &'a str {
    usize::try_from(rank)
        .ok()
        .and_then(|r| hosts.get(r))
        .copied()
        .unwrap_or("")
}

/// The hosts of `ranks` as a `Utf8` column (built from runs: the ranks of a
/// host are usually neighbours).
fn host_column(ranks: &ArrayRef, hosts: &[&str]) -> Result<ArrayRef> {
    use arrow::array::AsArray;
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for r in ranks.as_primitive::<arrow::datatypes::Int32Type>().values() {
        let h = host_of(hosts, *r);
        match runs.last_mut() {
            Some((v, n)) if *v == h => *n += 1,
            _ => runs.push((h, 1)),
        }
    }
    benchlake_core::lake::utf8_runs_array(&runs).ok_or_else(|| {
        crate::error::FormatError::malformed(
            "<linktest ingest>",
            "hostname",
            crate::error::Position::None,
            "the host names of one batch exceed 2 GiB",
        )
    })
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
fn timings_batches_of(
    cols: TimingColumns,
    run_id: &str,
    source: &str,
    hosts: &[&str],
) -> Result<Vec<RecordBatch>> {
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
                host_column(&from.slice(at, len), hosts)?,
                host_column(&to.slice(at, len), hosts)?,
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
    let mut rows = AllToAllRows::default();
    rows.add(run);
    batches("linktest_alltoall", run_id, source, rows.columns())
}

/// `linktest_alltoall` values (all but run_id and source).
#[derive(Default)]
struct AllToAllRows {
    perm: Vec<i32>,
    rank: Vec<i32>,
    step: Vec<Option<i32>>,
    time: Vec<f64>,
}

impl AllToAllRows {
    fn reserve(&mut self, rows: usize) {
        self.perm.reserve(rows);
        self.rank.reserve(rows);
        self.step.reserve(rows);
        self.time.reserve(rows);
    }

    fn add(&mut self, run: &LinkTestRun) {
        for (p, pm) in run.permutations.iter().enumerate() {
            for a in &pm.alltoall {
                self.perm.push(p as i32);
                self.rank.push(a.rank as i32);
                self.step.push(a.step);
                self.time.push(a.time_s);
            }
        }
    }

    fn columns(self) -> Vec<ArrayRef> {
        vec![
            Arc::new(Int32Array::from(self.perm)),
            Arc::new(Int32Array::from(self.rank)),
            Arc::new(Int32Array::from(self.step)),
            Arc::new(Float64Array::from(self.time)),
        ]
    }
}

fn slow_batches(run: &LinkTestRun, run_id: &str, source: &str) -> Result<Vec<RecordBatch>> {
    let mut rows = SlowRows::default();
    rows.add(run);
    batches("linktest_slow_links", run_id, source, rows.columns())
}

/// `linktest_slow_links` values (all but run_id and source).
#[derive(Default)]
struct SlowRows {
    perm: Vec<i32>,
    kind: Vec<&'static str>,
    from: Vec<i32>,
    to: Vec<i32>,
    time: Vec<f64>,
    retest: Vec<Option<f64>>,
    from_host: Vec<String>,
    to_host: Vec<String>,
}

impl SlowRows {
    fn add(&mut self, run: &LinkTestRun) {
        let hosts = rank_hosts(run);
        for (p, pm) in run.permutations.iter().enumerate() {
            for s in &pm.slow_links {
                let host = |r: usize| host_of(&hosts, i32::try_from(r).unwrap_or(-1)).to_string();
                self.from_host.push(host(s.from_rank));
                self.to_host.push(host(s.to_rank));
                self.perm.push(p as i32);
                self.kind.push(if s.retest_time_s.is_some() {
                    "retested"
                } else {
                    "slowest"
                });
                self.from.push(s.from_rank as i32);
                self.to.push(s.to_rank as i32);
                self.time.push(s.time_s);
                self.retest.push(s.retest_time_s);
            }
        }
    }

    fn columns(self) -> Vec<ArrayRef> {
        vec![
            Arc::new(Int32Array::from(self.perm)),
            Arc::new(StringArray::from(self.kind)),
            Arc::new(Int32Array::from(self.from)),
            Arc::new(Int32Array::from(self.to)),
            Arc::new(Float64Array::from(self.time)),
            Arc::new(Float64Array::from(self.retest)),
            Arc::new(StringArray::from(self.from_host)),
            Arc::new(StringArray::from(self.to_host)),
        ]
    }
}

/// `linktest_timings` values of files too small for their own batches.
#[derive(Default)]
struct TimingRows {
    perm: Vec<i32>,
    from: Vec<i32>,
    to: Vec<i32>,
    step: Vec<i32>,
    time: Vec<f64>,
    /// Runs of the host columns (their values are made at the end).
    from_host: Vec<(String, usize)>,
    to_host: Vec<(String, usize)>,
}

/// Appends `rows` rows of `host` to the runs `runs`.
fn push_host_run(runs: &mut Vec<(String, usize)>, host: &str, rows: usize) {
    match runs.last_mut() {
        Some((h, n)) if h == host => *n += rows,
        _ => runs.push((host.to_string(), rows)),
    }
}

impl TimingRows {
    /// The rows of `timing_columns`: per permutation and initiating rank, the
    /// measured partners in order.
    fn add(&mut self, run: &LinkTestRun) {
        let hosts = rank_hosts(run);
        let before = self.from.len();
        self.add_values(run);
        for (f, t) in self.from[before..].iter().zip(&self.to[before..]) {
            push_host_run(&mut self.from_host, host_of(&hosts, *f), 1);
            push_host_run(&mut self.to_host, host_of(&hosts, *t), 1);
        }
    }

    fn add_values(&mut self, run: &LinkTestRun) {
        let n = run.num_tasks;
        for (p, pm) in run.permutations.iter().enumerate() {
            let rows = pm
                .times
                .chunks_exact(n.max(1))
                .zip(pm.steps.chunks_exact(n.max(1)));
            for (i, (trow, srow)) in rows.enumerate() {
                for (j, (t, s)) in trow.iter().zip(srow).enumerate() {
                    if i == j || (*t == 0.0 && *s == 0) {
                        continue;
                    }
                    self.perm.push(p as i32);
                    self.from.push(i as i32);
                    self.to.push(j as i32);
                    self.step.push(*s);
                    self.time.push(*t);
                }
            }
        }
    }

    fn columns(self) -> Result<Vec<ArrayRef>> {
        Ok(vec![
            Arc::new(Int32Array::from(self.perm)),
            Arc::new(Int32Array::from(self.from)),
            Arc::new(Int32Array::from(self.to)),
            Arc::new(Int32Array::from(self.step)),
            Arc::new(Float64Array::from(self.time)),
            host_runs_column(&self.from_host)?,
            host_runs_column(&self.to_host)?,
        ])
    }
}

/// A `Utf8` column of host runs.
fn host_runs_column(runs: &[(String, usize)]) -> Result<ArrayRef> {
    let runs: Vec<(&str, usize)> = runs.iter().map(|(h, n)| (h.as_str(), *n)).collect();
    benchlake_core::lake::utf8_runs_array(&runs).ok_or_else(|| {
        crate::error::FormatError::malformed(
            "<linktest ingest>",
            "hostname",
            crate::error::Position::None,
            "the host names of the gathered pairs exceed 2 GiB",
        )
    })
}

/// Files whose `linktest_timings` may reach this many rows (ranks × (ranks
/// minus one) × permutations) keep their own batches (built in place, see
/// [`into_run_tables`]); smaller ones are gathered.
const OWN_TIMING_ROWS: usize = TIMING_BATCH_ROWS;

/// Rows to reserve in a gathered column before adding `rows` rows of file
/// `done` (counted from 0) of `files`: as many for each file still to come,
/// at most [`RESERVE_ROWS`]. A thousand files of 240 rows made the columns
/// grow by doubling, copying them into fresh memory about ten times; capacity
/// not filled is only address space.
pub(super) fn reserve_for(rows: usize, files: usize, done: usize) -> usize {
    rows.saturating_mul(files.saturating_sub(done).max(1))
        .min(RESERVE_ROWS.max(rows))
}

/// Most rows reserved ahead (48 MB of `linktest_alltoall` values).
const RESERVE_ROWS: usize = 1 << 21;

/// Which rows came from which file: (index in `Gather::sources`, rows).
#[derive(Default)]
struct Spans(Vec<(usize, usize)>);

impl Spans {
    fn push(&mut self, source: usize, rows: usize) {
        match self.0.last_mut() {
            Some((s, r)) if *s == source => *r += rows,
            _ if rows == 0 => {}
            _ => self.0.push((source, rows)),
        }
    }

    fn rows(&self) -> usize {
        self.0.iter().map(|s| s.1).sum()
    }
}

/// Rows of the five tables gathered over the files of one ingest, in file
/// order; each table becomes a few batches at the end instead of one or more
/// per file. The `source` column is built from spans of rows per file.
#[derive(Default)]
pub(super) struct Gather {
    sources: Vec<String>,
    runs: (Spans, Vec<RunRow>),
    ranks: (Spans, RankRows),
    timings: (Spans, TimingRows),
    alltoall: (Spans, AllToAllRows),
    slow: (Spans, SlowRows),
    /// `linktest_timings` batches already made (gathered rows flushed before
    /// a large file's own batches, to keep the file order).
    timing_batches: Vec<RecordBatch>,
    /// Files this ingest was given (sizes the columns, see [`reserve_for`]).
    files: usize,
}

impl Gather {
    /// A gather of the rows of `files` files.
    pub(super) fn for_files(files: usize) -> Self {
        Self {
            files,
            ..Self::default()
        }
    }

    fn add(&mut self, mut run: LinkTestRun, run_id: &str, source: &str) -> Result<()> {
        let src = self.add_without_timings(&run, source)?;
        let n = run.num_tasks;
        let bound = n
            .saturating_mul(n.saturating_sub(1))
            .saturating_mul(run.permutations.len());
        if bound >= OWN_TIMING_ROWS {
            self.flush_timings(run_id)?;
            let own = match timing_columns_owned(&mut run) {
                Some(cols) => timings_batches_of(cols, run_id, source, &rank_hosts(&run))?,
                None => timings_batches(&run, run_id, source)?,
            };
            self.timing_batches.extend(own);
        } else {
            let before = self.timings.1.perm.len();
            self.timings.1.add(&run);
            self.timings.0.push(src, self.timings.1.perm.len() - before);
        }
        Ok(())
    }

    /// The rows of every table but `linktest_timings`; returns the file's
    /// index in `sources`.
    pub(super) fn add_without_timings(&mut self, run: &LinkTestRun, source: &str) -> Result<usize> {
        let src = self.sources.len();
        self.sources.push(source.to_string());
        self.runs.0.push(src, 1);
        self.runs.1.push(RunRow::of(run));
        if self.ranks.1.bytes() > GATHER_BYTES {
            return Err(crate::error::FormatError::malformed(
                source,
                "hostname",
                crate::error::Position::None,
                "the hostnames of the inputs exceed 1 GiB",
            ));
        }
        self.ranks.1.add(run)?;
        self.ranks.0.push(src, run.ranks.len());
        let before = self.alltoall.1.perm.len();
        let rows: usize = run.permutations.iter().map(|p| p.alltoall.len()).sum();
        self.alltoall.1.reserve(reserve_for(rows, self.files, src));
        self.alltoall.1.add(run);
        self.alltoall
            .0
            .push(src, self.alltoall.1.perm.len() - before);
        let before = self.slow.1.perm.len();
        self.slow.1.add(run);
        self.slow.0.push(src, self.slow.1.perm.len() - before);
        Ok(src)
    }

    fn flush_timings(&mut self, run_id: &str) -> Result<()> {
        let (spans, rows) = std::mem::take(&mut self.timings);
        let rid = run_id_column(run_id, spans.rows());
        self.timing_batches.extend(gathered(
            "linktest_timings",
            &rid,
            &self.sources,
            &spans,
            rows.columns()?,
        )?);
        Ok(())
    }

    pub(super) fn finish(mut self, run_id: &str) -> Result<Vec<TableOutput>> {
        self.flush_timings(run_id)?;
        // One run_id column for every table, sliced.
        let rid = run_id_column(run_id, self.longest());
        let s = &self.sources;
        let (spans, rows) = self.runs;
        let runs = gathered("linktest_runs", &rid, s, &spans, runs_columns(&rows))?;
        let (spans, rows) = self.ranks;
        let ranks = gathered("linktest_ranks", &rid, s, &spans, rows.columns())?;
        let (spans, rows) = self.alltoall;
        let a2a = gathered("linktest_alltoall", &rid, s, &spans, rows.columns())?;
        let (spans, rows) = self.slow;
        let slow = gathered("linktest_slow_links", &rid, s, &spans, rows.columns())?;
        Ok(vec![
            TableOutput::new("linktest_runs", runs),
            TableOutput::new("linktest_ranks", ranks),
            TableOutput::new("linktest_timings", self.timing_batches),
            TableOutput::new("linktest_alltoall", a2a),
            TableOutput::new("linktest_slow_links", slow),
        ])
    }

    /// Rows of the longest of the four tables other than `linktest_timings`.
    fn longest(&self) -> usize {
        [
            self.runs.0.rows(),
            self.ranks.0.rows(),
            self.alltoall.0.rows(),
            self.slow.0.rows(),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    /// The four tables other than `linktest_timings` (runs, ranks, alltoall,
    /// slow links), encoded: the bytes [`Self::finish`]'s batches encode to.
    /// For gathers without timing rows (the streamed ingest writes those
    /// itself).
    pub(super) fn finish_encoded(self, run_id: &str, date: &str) -> Result<Vec<EncodedTable>> {
        debug_assert!(self.timings.0.0.is_empty() && self.timing_batches.is_empty());
        // The length of `finish`'s run_id column: its batches' most rows.
        let per = self.longest().min(run_id_per(run_id));
        let s = &self.sources;
        Ok(vec![
            encode_gathered(
                "linktest_runs",
                run_id,
                date,
                per,
                s,
                &self.runs.0,
                runs_columns(&self.runs.1),
            )?,
            encode_gathered(
                "linktest_ranks",
                run_id,
                date,
                per,
                s,
                &self.ranks.0,
                self.ranks.1.columns(),
            )?,
            encode_gathered(
                "linktest_alltoall",
                run_id,
                date,
                per,
                s,
                &self.alltoall.0,
                self.alltoall.1.columns(),
            )?,
            encode_gathered(
                "linktest_slow_links",
                run_id,
                date,
                per,
                s,
                &self.slow.0,
                self.slow.1.columns(),
            )?,
        ])
    }
}

/// Rows per gathered batch of the run_id column: [`BATCH_ROWS`], fewer when
/// the repeated run_id would pass the 2 GiB of i32 string offsets.
fn run_id_per(run_id: &str) -> usize {
    BATCH_ROWS.min((i32::MAX as usize / run_id.len().max(1)).max(1))
}

/// The run_id column sliced by gathered batches: as long as the longest batch
/// of `rows` rows ([`BATCH_ROWS`], fewer when the repeated run_id would pass
/// the 2 GiB of i32 string offsets).
fn run_id_column(run_id: &str, rows: usize) -> ArrayRef {
    repeated(run_id, rows.min(run_id_per(run_id)))
}

/// Bytes of `source` values (and of hostnames) per gathered batch.
const GATHER_BYTES: usize = 1 << 30;

/// Batches of gathered rows: at most `rid.len()` rows and about
/// [`GATHER_BYTES`] of `source` values each, the `source` of every row taken
/// from its file's span; one empty batch when there are no rows.
fn gathered(
    table: &str,
    rid: &ArrayRef,
    sources: &[String],
    spans: &Spans,
    cols: Vec<ArrayRef>,
) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    let mut at = 0;
    for len in batch_lengths(table, rid.len().max(1), sources, spans)? {
        let source = utf8_array(table, &source_runs(sources, spans, at, len))?;
        let mut v = vec![rid.slice(0, len), source];
        v.extend(cols.iter().map(|c| c.slice(at, len)));
        out.push(batch(table, v)?);
        at += len;
    }
    if out.is_empty() {
        // As for one file: an empty table still has its (empty) batch.
        let mut v = vec![rid.slice(0, 0), repeated("", 0)];
        v.extend(cols.iter().map(|c| c.slice(0, 0)));
        out.push(batch(table, v)?);
    }
    Ok(out)
}

/// [`gathered`]'s table encoded: the bytes `encode_parquet` writes for its
/// batches, without making the `run_id` and `source` columns (they go to the
/// encoder as runs; 1,000 files of 240 rows each made 17 MB of file names per
/// table, only for the encoder to find their runs again). `per` is the
/// length of [`gathered`]'s `rid`.
#[allow(clippy::too_many_arguments)]
fn encode_gathered(
    table: &str,
    run_id: &str,
    date: &str,
    per: usize,
    sources: &[String],
    spans: &Spans,
    cols: Vec<ArrayRef>,
) -> Result<EncodedTable> {
    let total = spans.rows();
    let mut enc = ParquetEncoder::new(table, date, total, total)?;
    // The batches' pieces in each row group, as `encode_parquet` cuts them.
    let mut group: Vec<(usize, usize)> = Vec::new();
    let mut group_rows = 0;
    let mut write = |group: &[(usize, usize)], rows: usize| -> Result<()> {
        let Some(&(first, _)) = group.first() else {
            return Ok(());
        };
        let mut columns = vec![
            GroupColumn::Utf8Runs(vec![(run_id, rows)]),
            GroupColumn::Utf8Runs(source_runs(sources, spans, first, rows)),
        ];
        columns
            .extend(cols.iter().map(|c| {
                GroupColumn::Arrays(group.iter().map(|(a, n)| c.slice(*a, *n)).collect())
            }));
        enc.write_row_group_columns(&mut columns)?;
        Ok(())
    };
    let mut at = 0;
    for len in batch_lengths(table, per.max(1), sources, spans)? {
        let mut b = 0;
        while b < len {
            let take = (ROW_GROUP_ROWS - group_rows).min(len - b);
            group.push((at + b, take));
            group_rows += take;
            b += take;
            if group_rows == ROW_GROUP_ROWS {
                write(&group, group_rows)?;
                group.clear();
                group_rows = 0;
            }
        }
        at += len;
    }
    write(&group, group_rows)?;
    Ok(enc.finish_table("")?)
}

/// The row counts of [`gathered`]'s batches: at most `per` rows each, a
/// batch ending early once its `source` values reach [`GATHER_BYTES`] or
/// would pass the 2 GiB of i32 offsets.
fn batch_lengths(table: &str, per: usize, sources: &[String], spans: &Spans) -> Result<Vec<usize>> {
    let total = spans.rows();
    let mut out = Vec::new();
    let mut at = 0;
    let mut pending = spans
        .0
        .iter()
        .map(|(s, r)| (sources.get(*s).map_or(0, String::len), *r));
    let mut carry: Option<(usize, usize)> = None;
    while at < total {
        let mut bytes = 0usize;
        let mut len = 0;
        while len < per {
            let Some((w, rows)) = carry.take().or_else(|| pending.next()) else {
                break;
            };
            // Rows of this span that fit the batch (at least one).
            let room = (GATHER_BYTES.saturating_sub(bytes) / w.max(1)).max(1);
            let take = rows.min(per - len).min(room);
            if bytes.saturating_add(w.saturating_mul(take)) > i32::MAX as usize {
                carry = Some((w, rows));
                break;
            }
            bytes += w * take;
            len += take;
            if take < rows {
                carry = Some((w, rows - take));
                if bytes >= GATHER_BYTES {
                    break;
                }
            }
        }
        if len == 0 {
            return Err(crate::error::FormatError::malformed(
                table,
                "source",
                crate::error::Position::None,
                "a source name longer than 2 GiB",
            ));
        }
        out.push(len);
        at += len;
    }
    Ok(out)
}

/// The `source` values of rows `at..at + len`, as (value, rows) runs.
fn source_runs<'a>(
    sources: &'a [String],
    spans: &Spans,
    at: usize,
    len: usize,
) -> Vec<(&'a str, usize)> {
    let mut out = Vec::new();
    let (end, mut start) = (at + len, 0);
    for (s, rows) in &spans.0 {
        let (a, b) = (start.max(at), (start + rows).min(end));
        if a < b {
            out.push((sources.get(*s).map_or("", String::as_str), b - a));
        }
        start += rows;
        if start >= end {
            break;
        }
    }
    out
}

/// A string column of `runs` (their bytes fit i32 offsets: see
/// [`batch_lengths`]).
fn utf8_array(table: &str, runs: &[(&str, usize)]) -> Result<ArrayRef> {
    benchlake_core::lake::utf8_runs_array(runs).ok_or_else(|| {
        crate::error::FormatError::malformed(
            table,
            "source",
            crate::error::Position::None,
            "the source names of one batch exceed 2 GiB",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gathered batches and row groups take a file's name for each of its
    /// rows: rows `at..at + len` as runs, across spans and batches.
    #[test]
    fn source_runs_and_batch_lengths_follow_the_spans() {
        let sources = vec!["a".to_string(), "bb".to_string()];
        let mut spans = Spans::default();
        for (s, r) in [(0, 5), (1, 3), (1, 0), (0, 4)] {
            spans.push(s, r);
        }
        assert_eq!(spans.rows(), 12);
        assert_eq!(
            source_runs(&sources, &spans, 4, 6),
            [("a", 1), ("bb", 3), ("a", 2)]
        );
        assert_eq!(
            source_runs(&sources, &spans, 0, 12),
            [("a", 5), ("bb", 3), ("a", 4)]
        );
        assert_eq!(source_runs(&sources, &spans, 8, 4), [("a", 4)]);
        assert_eq!(source_runs(&sources, &spans, 5, 0), []);
        assert_eq!(batch_lengths("t", 5, &sources, &spans).unwrap(), [5, 5, 2]);
        assert_eq!(batch_lengths("t", 100, &sources, &spans).unwrap(), [12]);
        let empty = Spans::default();
        assert!(batch_lengths("t", 5, &sources, &empty).unwrap().is_empty());
        let a = utf8_array("t", &source_runs(&sources, &spans, 4, 6)).unwrap();
        let a = a.as_any().downcast_ref::<StringArray>().unwrap();
        let got: Vec<&str> = a.iter().map(|v| v.unwrap()).collect();
        assert_eq!(got, ["a", "bb", "bb", "bb", "a", "a"]);
    }
}
