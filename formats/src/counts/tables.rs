//! The `counts` ingest: reads the files of a profiler output directory (see
//! [`super::files::expand_dir`]) and yields `alltoallv_calls`,
//! `alltoallv_count_rows`, `alltoallv_call_times`, `alltoallv_locations`,
//! `alltoallv_comms` and `alltoallv_backtraces`.
//!
//! Compact and non-compact files of the same run give the same `alltoallv_calls`
//! and `alltoallv_count_rows` rows (apart from `source`): per-call files are
//! grouped into the blocks the compact writer would have written. When a lead
//! rank has a compact pair, its per-call files are skipped (they would duplicate
//! every row).
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Builder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
};
use arrow::record_batch::RecordBatch;
use benchlake_core::catalog;
use benchlake_core::lake::TableOutput;

use super::compact::{CompactReader, Row};
use super::files::{FileKind, classify};
use super::meta;
use super::percall;
use super::ranklist::{self, Span};
use super::timings;
use crate::error::{FormatError, Position, Result};
use crate::ingest::{IngestContext, InputFile};

/// Most calls one count file may expand to in `alltoallv_calls` (bounds memory
/// on hostile `Count:` lines such as `0-9223372036854775806`).
pub const MAX_CALLS_PER_FILE: u64 = 1 << 24;

/// Rows per record batch.
const BATCH_ROWS: usize = 1 << 16;

fn finish(table: &str, cols: Vec<ArrayRef>) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(catalog::schema(table)?, cols)?)
}

/// Builder of `alltoallv_calls`.
struct Calls {
    run_id: String,
    batches: Vec<RecordBatch>,
    rows: usize,
    source: StringBuilder,
    job: Int64Builder,
    lead: Int64Builder,
    call: Int64Builder,
    comm_size: Int64Builder,
    sdt: Int64Builder,
    rdt: Int64Builder,
    sblock: Int64Builder,
    rblock: Int64Builder,
}

impl Calls {
    fn new(run_id: &str) -> Self {
        Self {
            run_id: run_id.to_string(),
            batches: Vec::new(),
            rows: 0,
            source: StringBuilder::new(),
            job: Int64Builder::new(),
            lead: Int64Builder::new(),
            call: Int64Builder::new(),
            comm_size: Int64Builder::new(),
            sdt: Int64Builder::new(),
            rdt: Int64Builder::new(),
            sblock: Int64Builder::new(),
            rblock: Int64Builder::new(),
        }
    }
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        source: &str,
        job: u64,
        lead: u64,
        call: u64,
        n: u64,
        sdt: u64,
        rdt: u64,
        sb: u64,
        rb: u64,
    ) -> Result<()> {
        self.source.append_value(source);
        self.job.append_value(job as i64);
        self.lead.append_value(lead as i64);
        self.call.append_value(call as i64);
        self.comm_size.append_value(n as i64);
        self.sdt.append_value(sdt as i64);
        self.rdt.append_value(rdt as i64);
        self.sblock.append_value(sb as i64);
        self.rblock.append_value(rb as i64);
        self.rows += 1;
        if self.rows == BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let n = self.rows;
        self.rows = 0;
        let run = Arc::new(arrow::array::StringArray::from(vec![
            self.run_id.as_str();
            n
        ]));
        let b = finish(
            "alltoallv_calls",
            vec![
                run,
                Arc::new(self.source.finish()),
                Arc::new(self.job.finish()),
                Arc::new(self.lead.finish()),
                Arc::new(self.call.finish()),
                Arc::new(self.comm_size.finish()),
                Arc::new(self.sdt.finish()),
                Arc::new(self.rdt.finish()),
                Arc::new(self.sblock.finish()),
                Arc::new(self.rblock.finish()),
            ],
        )?;
        self.batches.push(b);
        Ok(())
    }
}

/// Builder of `alltoallv_count_rows`.
struct CountRows {
    run_id: String,
    batches: Vec<RecordBatch>,
    rows: usize,
    values: usize,
    source: StringBuilder,
    job: Int64Builder,
    lead: Int64Builder,
    dir: StringBuilder,
    block: Int64Builder,
    ranks: ListBuilder<Int32Builder>,
    counts: ListBuilder<Int64Builder>,
}

impl CountRows {
    fn new(run_id: &str) -> Self {
        Self {
            run_id: run_id.to_string(),
            batches: Vec::new(),
            rows: 0,
            values: 0,
            source: StringBuilder::new(),
            job: Int64Builder::new(),
            lead: Int64Builder::new(),
            dir: StringBuilder::new(),
            block: Int64Builder::new(),
            ranks: ListBuilder::new(Int32Builder::new()),
            counts: ListBuilder::new(Int64Builder::new()),
        }
    }
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        source: &str,
        job: u64,
        lead: u64,
        dir: &str,
        block: u64,
        ranks: &[Span],
        counts: &[u64],
    ) -> Result<()> {
        self.source.append_value(source);
        self.job.append_value(job as i64);
        self.lead.append_value(lead as i64);
        self.dir.append_value(dir);
        self.block.append_value(block as i64);
        for &(a, b) in ranks {
            // Ranks are below MAX_COMM_SIZE (2^24), so they fit in i32.
            for r in a..=b {
                self.ranks.values().append_value(r as i32);
            }
        }
        self.ranks.append(true);
        for &c in counts {
            self.counts.values().append_value(c as i64);
        }
        self.counts.append(true);
        self.rows += 1;
        self.values += counts.len();
        if self.rows == BATCH_ROWS || self.values >= 1 << 22 {
            self.flush()?;
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let n = self.rows;
        self.rows = 0;
        self.values = 0;
        let run = Arc::new(arrow::array::StringArray::from(vec![
            self.run_id.as_str();
            n
        ]));
        let b = finish(
            "alltoallv_count_rows",
            vec![
                run,
                Arc::new(self.source.finish()),
                Arc::new(self.job.finish()),
                Arc::new(self.lead.finish()),
                Arc::new(self.dir.finish()),
                Arc::new(self.block.finish()),
                Arc::new(self.ranks.finish()),
                Arc::new(self.counts.finish()),
            ],
        )?;
        self.batches.push(b);
        Ok(())
    }
}

fn expand_calls(
    file: &std::path::Path,
    line: u64,
    calls: &[Span],
    budget: &mut u64,
) -> Result<Vec<u64>> {
    let n = ranklist::count(calls);
    if n > *budget {
        return Err(FormatError::malformed(
            file,
            "Count",
            Position::LineCol(line, 1),
            format!("more than {MAX_CALLS_PER_FILE} calls in one file"),
        ));
    }
    *budget -= n;
    Ok(calls.iter().flat_map(|&(a, b)| a..=b).collect())
}

/// Ingests one compact pair, reading both files block by block in lockstep.
fn ingest_pair(
    send: &InputFile,
    recv: &InputFile,
    job: u64,
    lead: u64,
    known: &mut BTreeMap<u64, BTreeSet<u64>>,
    calls_t: &mut Calls,
    rows_t: &mut CountRows,
) -> Result<()> {
    let mut s = CompactReader::open(&send.path)?;
    let mut r = CompactReader::open(&recv.path)?;
    let mut row = Row::default();
    let mut budget = MAX_CALLS_PER_FILE;
    let mut seen_calls: BTreeSet<u64> = BTreeSet::new();
    loop {
        let hs = s.next_block()?;
        let hr = r.next_block()?;
        let (hs, hr) = match (hs, hr) {
            (None, None) => break,
            (Some(h), None) => {
                return Err(FormatError::malformed(
                    &recv.path,
                    "block",
                    Position::None,
                    format!("ends before block {} of {}", h.index, send.path.display()),
                ));
            }
            (None, Some(h)) => {
                return Err(FormatError::malformed(
                    &send.path,
                    "block",
                    Position::None,
                    format!("ends before block {} of {}", h.index, recv.path.display()),
                ));
            }
            (Some(a), Some(b)) => (a, b),
        };
        if hs.calls != hr.calls || hs.comm_size != hr.comm_size {
            return Err(FormatError::malformed(
                &recv.path,
                "Count",
                Position::LineCol(hr.line, 1),
                format!(
                    "block {} does not match block {} of {} (calls or communicator size differ)",
                    hr.index,
                    hs.index,
                    send.path.display()
                ),
            ));
        }
        for c in expand_calls(&send.path, hs.line, &hs.calls.0, &mut budget)? {
            known.entry(lead).or_default().insert(c);
            if !seen_calls.insert(c) {
                return Err(FormatError::malformed(
                    &send.path,
                    "Count",
                    Position::LineCol(hs.line, 1),
                    format!("call {c} appears in two blocks"),
                ));
            }
            calls_t.push(
                &send.source,
                job,
                lead,
                c,
                hs.comm_size,
                hs.datatype_size,
                hr.datatype_size,
                hs.index,
                hr.index,
            )?;
        }
        while s.next_row(&mut row)? {
            rows_t.push(
                &send.source,
                job,
                lead,
                "send",
                hs.index,
                &row.ranks,
                &row.counts,
            )?;
        }
        while r.next_row(&mut row)? {
            rows_t.push(
                &recv.source,
                job,
                lead,
                "recv",
                hr.index,
                &row.ranks,
                &row.counts,
            )?;
        }
    }
    Ok(())
}

/// Ingests the per-call files of one lead rank (job 0: the files carry none).
fn ingest_percall(
    files: &[(u64, &InputFile)],
    lead: u64,
    calls_t: &mut Calls,
    rows_t: &mut CountRows,
) -> Result<()> {
    let list: Vec<(u64, PathBuf)> = files.iter().map(|(c, f)| (*c, f.path.clone())).collect();
    let source_of: BTreeMap<u64, &str> =
        files.iter().map(|(c, f)| (*c, f.source.as_str())).collect();
    let groups = percall::group_files(&list)?;
    for (block, g) in groups.iter().enumerate() {
        let block = block as u64;
        let n = &g.counts;
        let first = g.calls.first().unwrap_or_default();
        let src = source_of.get(&first).copied().unwrap_or_default();
        for &(a, b) in &g.calls.0 {
            for c in a..=b {
                let s = source_of.get(&c).copied().unwrap_or_default();
                calls_t.push(
                    s,
                    0,
                    lead,
                    c,
                    n.comm_size,
                    n.send_datatype_size,
                    n.recv_datatype_size,
                    block,
                    block,
                )?;
            }
        }
        for (dir, recv) in [("send", false), ("recv", true)] {
            for (ranks, counts) in g.grouped_rows(recv) {
                rows_t.push(src, 0, lead, dir, block, &ranks, counts)?;
            }
        }
    }
    Ok(())
}

/// A compact send file and its recv file, as found so far.
type Pair<'a> = (Option<&'a InputFile>, Option<&'a InputFile>);

/// Reads the inputs of the `counts` ingest kind.
pub fn ingest(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    // Errors found by line (a block header, the end of a file) get their
    // byte offset too.
    ingest_files(inputs, ctx).map_err(FormatError::located)
}

fn ingest_files(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    let mut pairs: BTreeMap<(u64, u64), Pair<'_>> = BTreeMap::new();
    let mut percall: BTreeMap<u64, Vec<(u64, &InputFile)>> = BTreeMap::new();
    let mut exec = Vec::new();
    let mut late = Vec::new();
    let mut locations = Vec::new();
    let mut backtraces = Vec::new();
    let mut comm_data = Vec::new();
    for f in inputs {
        // Classify by the local path, else by the source name (a worker may hold
        // objects under temporary names).
        let kind = classify(&f.path).or_else(|| classify(std::path::Path::new(&f.source)));
        match kind {
            Some(FileKind::SendCounters { job, lead }) => {
                pairs.entry((job, lead)).or_default().0 = Some(f)
            }
            Some(FileKind::RecvCounters { job, lead }) => {
                pairs.entry((job, lead)).or_default().1 = Some(f)
            }
            Some(FileKind::PerCall { lead, call }) => {
                percall.entry(lead).or_default().push((call, f))
            }
            Some(FileKind::ExecTimes { lead, .. }) => exec.push((lead, f)),
            Some(FileKind::LateArrival { lead, .. }) => late.push((lead, f)),
            Some(FileKind::Location { comm, lead }) => locations.push((lead, comm, f)),
            Some(FileKind::Backtrace { lead, trace }) => backtraces.push((lead, trace, f)),
            Some(FileKind::CommData { lead }) => comm_data.push((lead, f)),
            Some(FileKind::ProfileSummary { .. }) => {
                tracing::debug!(file = %f.source, "profile summary skipped: its figures are compiled out")
            }
            None => tracing::debug!(file = %f.source, "not a profiler file, skipped"),
        }
    }
    // Unrelated files next to the profiler's (a run's logs, `COMMANDS.txt`) are
    // skipped, but an input with no profiler file at all is a foreign format or
    // the wrong path, never an ingest of nothing.
    let recognised = |f: &InputFile| {
        classify(&f.path)
            .or_else(|| classify(std::path::Path::new(&f.source)))
            .is_some()
    };
    if let Some(first) = inputs.first()
        && !inputs.iter().any(recognised)
    {
        return Err(not_a_profiler_file(first));
    }
    let run = ctx.run_id.as_str();
    let mut calls_t = Calls::new(run);
    let mut rows_t = CountRows::new(run);
    let mut compact_leads = BTreeSet::new();
    // The calls of each lead rank, from its count files.
    let mut known: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for (&(job, lead), (s, r)) in &pairs {
        match (s, r) {
            (Some(s), Some(r)) => {
                ingest_pair(s, r, job, lead, &mut known, &mut calls_t, &mut rows_t)?;
                compact_leads.insert(lead);
            }
            (Some(f), None) | (None, Some(f)) => {
                return Err(FormatError::malformed(
                    &f.path,
                    "file pair",
                    Position::None,
                    "the matching send-counters/recv-counters file is missing",
                ));
            }
            (None, None) => {}
        }
    }
    for (lead, files) in &percall {
        if compact_leads.contains(lead) {
            tracing::info!(
                lead,
                "per-call files skipped: the lead rank has compact files"
            );
            continue;
        }
        ingest_percall(files, *lead, &mut calls_t, &mut rows_t)?;
    }
    calls_t.flush()?;
    rows_t.flush()?;
    let mut out = Vec::new();
    let mut push = |table: &str, batches: Vec<RecordBatch>| {
        if batches.iter().any(|b| b.num_rows() > 0) {
            out.push(TableOutput::new(table, batches));
        }
    };
    push("alltoallv_calls", calls_t.batches);
    push("alltoallv_count_rows", rows_t.batches);
    push(
        "alltoallv_call_times",
        call_times(run, &exec, &late, &known)?,
    );
    let (loc, comms) = location_tables(run, &locations, &comm_data)?;
    push("alltoallv_locations", loc);
    push("alltoallv_comms", comms);
    push("alltoallv_backtraces", backtrace_table(run, &backtraces)?);
    if out.is_empty()
        && let Some(first) = inputs.iter().find(|f| recognised(f))
    {
        return Err(FormatError::malformed(
            &first.path,
            "file name",
            Position::None,
            "the profiler files given yield no rows (profile summaries, \
             profile_alltoallv_job<J>.rank<L>.md, carry no figures: the profiler compiles them out)",
        ));
    }
    Ok(out)
}

/// Refuses a file named on the command line that is not a profiler file:
/// the reader skips unrelated files (logs, COMMANDS.txt) found inside the
/// directories it is given, but a file named is meant to be read
/// (docs/counts.md).
pub fn check_named_file(f: &InputFile) -> Result<()> {
    match classify(&f.path) {
        Some(_) => Ok(()),
        None => Err(not_a_profiler_file(f)),
    }
}

/// The error of an input that is not a profiler output file.
pub fn not_a_profiler_file(f: &InputFile) -> FormatError {
    FormatError::malformed(
        &f.path,
        "file name",
        Position::None,
        "not an alltoallv profiler file (counts reads send-counters.job<J>.rank<L>.txt, \
         recv-counters…, counts.rank<L>_call<C>.md and alltoallv_*.md files by name; \
         see docs/counts.md)",
    )
}

type Times = BTreeMap<(u64, u64, u64), (Option<f64>, Option<f64>, usize)>;

/// Joins execution times and late-arrival times on (lead rank, call, rank).
fn call_times(
    run: &str,
    exec: &[(u64, &InputFile)],
    late: &[(u64, &InputFile)],
    known: &BTreeMap<u64, BTreeSet<u64>>,
) -> Result<Vec<RecordBatch>> {
    let mut map: Times = BTreeMap::new();
    let mut sources: Vec<&str> = Vec::new();
    for (is_late, files) in [(false, exec), (true, late)] {
        for (lead, f) in files {
            let si = sources.len();
            sources.push(&f.source);
            timings::read_file_of(&f.path, known.get(lead), |call, rank, v| {
                let e = map.entry((*lead, call, rank)).or_insert((None, None, si));
                if is_late {
                    e.1 = Some(v);
                } else {
                    e.0 = Some(v);
                }
            })?;
        }
    }
    if map.is_empty() {
        return Ok(Vec::new());
    }
    let mut src = StringBuilder::new();
    let mut lead_b = Int64Builder::new();
    let mut call_b = Int64Builder::new();
    let mut rank_b = Int64Builder::new();
    let mut exec_b = Float64Builder::new();
    let mut late_b = Float64Builder::new();
    for ((lead, call, rank), (e, l, si)) in &map {
        src.append_value(sources.get(*si).copied().unwrap_or_default());
        lead_b.append_value(*lead as i64);
        call_b.append_value(*call as i64);
        rank_b.append_value(*rank as i64);
        exec_b.append_option(*e);
        late_b.append_option(*l);
    }
    let run_a = Arc::new(arrow::array::StringArray::from(vec![run; map.len()]));
    Ok(vec![finish(
        "alltoallv_call_times",
        vec![
            run_a,
            Arc::new(src.finish()),
            Arc::new(lead_b.finish()),
            Arc::new(call_b.finish()),
            Arc::new(rank_b.finish()),
            Arc::new(exec_b.finish()),
            Arc::new(late_b.finish()),
        ],
    )?])
}

fn call_list(
    b: &mut ListBuilder<Int64Builder>,
    calls: &[Span],
    file: &std::path::Path,
) -> Result<()> {
    if ranklist::count(calls) > MAX_CALLS_PER_FILE {
        return Err(FormatError::malformed(
            file,
            "Calls",
            Position::None,
            "too many calls",
        ));
    }
    for &(a, z) in calls {
        for c in a..=z {
            b.values().append_value(c as i64);
        }
    }
    b.append(true);
    Ok(())
}

type LocationFile<'a> = (u64, u64, &'a InputFile);

fn location_tables(
    run: &str,
    locations: &[LocationFile<'_>],
    comm_data: &[(u64, &InputFile)],
) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>)> {
    let (mut ls, mut ll, mut lc, mut lr, mut lw, mut lp, mut lh) = (
        StringBuilder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        StringBuilder::new(),
    );
    let (mut cs, mut cl, mut cc, mut cn) = (
        StringBuilder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
    );
    let mut ccalls = ListBuilder::new(Int64Builder::new());
    let (mut nloc, mut ncomm) = (0usize, 0usize);
    for (lead, comm, f) in locations {
        for loc in meta::read_locations(&f.path)? {
            if loc.comm_id != *comm {
                tracing::warn!(file = %f.source, "communicator ID {} differs from the file name's comm{comm}", loc.comm_id);
            }
            for (i, w) in loc.world_ranks.iter().enumerate() {
                ls.append_value(&f.source);
                ll.append_value(*lead as i64);
                lc.append_value(loc.comm_id as i64);
                lr.append_value(i as i64);
                lw.append_value(*w as i64);
                lp.append_option(loc.pids.get(i).map(|p| *p as i64));
                lh.append_option(loc.hosts.get(i));
                nloc += 1;
            }
            cs.append_value(&f.source);
            cl.append_value(*lead as i64);
            cc.append_value(loc.comm_id as i64);
            cn.append_value(loc.world_ranks.len() as i64);
            call_list(&mut ccalls, &loc.calls.0, &f.path)?;
            ncomm += 1;
        }
    }
    for (lead, f) in comm_data {
        for (k, w) in meta::read_comm_data(&f.path)? {
            if w != *lead {
                tracing::warn!(file = %f.source, "world rank {w} differs from the file name's rank{lead}");
            }
            cs.append_value(&f.source);
            cl.append_value(*lead as i64);
            cc.append_value(k as i64);
            cn.append_null();
            ccalls.append(false);
            ncomm += 1;
        }
    }
    let mut loc_b = Vec::new();
    if nloc > 0 {
        loc_b.push(finish(
            "alltoallv_locations",
            vec![
                Arc::new(arrow::array::StringArray::from(vec![run; nloc])),
                Arc::new(ls.finish()),
                Arc::new(ll.finish()),
                Arc::new(lc.finish()),
                Arc::new(lr.finish()),
                Arc::new(lw.finish()),
                Arc::new(lp.finish()),
                Arc::new(lh.finish()),
            ],
        )?);
    }
    let mut comm_b = Vec::new();
    if ncomm > 0 {
        comm_b.push(finish(
            "alltoallv_comms",
            vec![
                Arc::new(arrow::array::StringArray::from(vec![run; ncomm])),
                Arc::new(cs.finish()),
                Arc::new(cl.finish()),
                Arc::new(cc.finish()),
                Arc::new(cn.finish()),
                Arc::new(ccalls.finish()),
            ],
        )?);
    }
    Ok((loc_b, comm_b))
}

fn backtrace_table(run: &str, files: &[(u64, u64, &InputFile)]) -> Result<Vec<RecordBatch>> {
    let mut src = StringBuilder::new();
    let (mut lead_b, mut trace_b, mut pid_b, mut ctx_b, mut comm_b, mut crank_b, mut wrank_b) = (
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
    );
    let mut exe_b = StringBuilder::new();
    let mut calls_b = ListBuilder::new(Int64Builder::new());
    let mut frames_b = ListBuilder::new(StringBuilder::new());
    let mut n = 0usize;
    for (lead, trace, f) in files {
        let bt = meta::read_backtrace(&f.path)?;
        for c in &bt.contexts {
            src.append_value(&f.source);
            lead_b.append_value(*lead as i64);
            trace_b.append_value(*trace as i64);
            exe_b.append_value(&bt.executable);
            pid_b.append_value(bt.pid as i64);
            ctx_b.append_value(c.context_id as i64);
            comm_b.append_value(c.comm_id as i64);
            crank_b.append_value(c.comm_rank as i64);
            wrank_b.append_value(c.world_rank as i64);
            call_list(&mut calls_b, &c.calls.0, &f.path)?;
            for fr in &bt.frames {
                frames_b.values().append_value(fr);
            }
            frames_b.append(true);
            n += 1;
        }
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    Ok(vec![finish(
        "alltoallv_backtraces",
        vec![
            Arc::new(arrow::array::StringArray::from(vec![run; n])),
            Arc::new(src.finish()),
            Arc::new(lead_b.finish()),
            Arc::new(trace_b.finish()),
            Arc::new(exe_b.finish()),
            Arc::new(pid_b.finish()),
            Arc::new(ctx_b.finish()),
            Arc::new(comm_b.finish()),
            Arc::new(crank_b.finish()),
            Arc::new(wrank_b.finish()),
            Arc::new(calls_b.finish()),
            Arc::new(frames_b.finish()),
        ],
    )?])
}
