//! The `linktest` ingest straight to Parquet (`benchlake ingest linktest`):
//! the pair times of a one-permutation 2.1.17 file go from the mapped file
//! into a row group of at most [`ROW_GROUP_ROWS`] rows, which is encoded and
//! its memory reused for the next one, instead of becoming n × n matrices
//! and then 16.8 M-row columns (4,096 ranks: about 540 MB of fresh memory,
//! most of the CLI's time went into faulting it in and copying it).
//!
//! Files of other shapes (1.x, several permutations) are decoded as usual and
//! their rows go through the same row groups. The other four tables are
//! gathered as in [`super::ingest_linktest`]. The `run_id` and `source`
//! columns reach the encoder as runs (one run id; a file's name over its
//! rows), made into strings only where it needs them (more than 4,096 names
//! in a row group). The files are those `encode_parquet` writes for
//! [`super::ingest_linktest`]'s batches: the same rows, row groups and bytes.
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, Int32Array};
use arrow::buffer::ScalarBuffer;
use benchlake_core::lake::{
    BULK_ROWS, EncodedTable, FloatPages, GroupColumn, IntRuns, ParquetEncoder, ROW_GROUP_ROWS,
};

use super::LinkTestRun;
use super::tables::{Gather, TIMING_BATCH_ROWS, is_continuation_of_given, reserve_for};
use super::v2::RankSlots;
use crate::error::Result;
use crate::ingest::{IngestContext, InputFile};
use crate::sion::SionSet;

const TABLE: &str = "linktest_timings";

/// [`super::ingest_linktest`] encoded: the five tables as Parquet files.
pub fn ingest_linktest_encoded(
    inputs: &[InputFile],
    ctx: &IngestContext,
) -> Result<Vec<EncodedTable>> {
    ingest_linktest_encoded_in(inputs, ctx, None)
}

/// [`ingest_linktest_encoded`], a large `linktest_timings` file written to a
/// temporary file in `spill_dir` (see `crate::ingest_encoded_in`).
pub fn ingest_linktest_encoded_in(
    inputs: &[InputFile],
    ctx: &IngestContext,
    spill_dir: Option<&Path>,
) -> Result<Vec<EncodedTable>> {
    let given: HashSet<&Path> = inputs.iter().map(|i| i.path.as_path()).collect();
    let mut g = Gather::for_files(inputs.len());
    let mut timings = TimingGroups::new(&ctx.run_id, &ctx.date);
    timings.spill_dir = spill_dir.map(Path::to_path_buf);
    for (i, input) in inputs.iter().enumerate() {
        if is_continuation_of_given(&input.path, &given) {
            tracing::debug!(path = %input.path.display(), "part of a multi-file set given as input; read with file 0");
            continue;
        }
        let set = SionSet::open_whole(&input.path)?;
        let n = set.ntasks();
        timings.expected = timings
            .expected
            .saturating_add(n.saturating_mul(n.saturating_sub(1)));
        timings.reserve(reserve_for(
            n.saturating_mul(n.saturating_sub(1)),
            inputs.len(),
            i,
        ));
        let src = timings.source(&input.source);
        let run = {
            let mut sink = |r: usize, slots: &RankSlots<'_>| {
                if r == 0 {
                    timings
                        .hosts
                        .start_file(slots.hosts().iter().map(String::as_str));
                }
                timings.push_rank(src, 0, r, slots)
            };
            super::decode_with(&set, Some(&mut sink))?
        };
        drop(set);
        // Files whose matrices were filled (1.x, several permutations).
        timings
            .hosts
            .start_file(run.ranks.iter().map(|r| r.hostname.as_str()));
        timings.push_matrices(src, &run)?;
        g.add_without_timings(&run, &input.source)?;
    }
    let timings = timings.finish()?;
    // In TABLES order: timings third.
    let mut out = g.finish_encoded(&ctx.run_id, &ctx.date)?;
    out.insert(2.min(out.len()), timings);
    debug_assert!(
        out.iter()
            .map(|t| t.table.as_str())
            .eq(super::tables::TABLES)
    );
    Ok(out)
}

/// The `linktest_timings` row group being filled, and the file it goes to.
struct TimingGroups {
    run_id: String,
    /// The date partition, the file's `date` column.
    date: String,
    /// Rows per batch of the run_id column (see [`per_value`]).
    run_id_per: usize,
    sources: Vec<String>,
    /// The permutation, sender and partner columns follow from the ranks
    /// and slots: held as runs, never as 16.8 M values.
    perm: IntRuns,
    from: IntRuns,
    to: IntRuns,
    step: Vec<i32>,
    /// The times of a table that may stay small (arrow-rs writes it).
    time: Vec<f64>,
    /// The times of a large table (known once it has [`BULK_ROWS`] rows),
    /// split into pages as they come: a file's times go there without
    /// being copied into a column first.
    pages: Option<FloatPages>,
    /// Times on their way to `pages` that could not go there directly.
    to_pages: Vec<f64>,
    /// (source, rows) of the group's rows.
    spans: Vec<(usize, usize)>,
    enc: Option<ParquetEncoder>,
    /// Rows the files so far may have (sizes the file buffer).
    expected: usize,
    /// Where a large file is written instead of memory.
    spill_dir: Option<std::path::PathBuf>,
    /// Slots of one rank, for files decoded into matrices.
    scratch_t: Vec<f64>,
    scratch_s: Vec<i32>,
    /// The `from_host` and `to_host` columns of the group, as runs.
    hosts: HostRuns,
}

/// The `from_host`/`to_host` columns of a row group as runs of host numbers
/// (a rank's rows share its host; its partners' hosts change once per host
/// block), made into (name, rows) runs only for the encoder.
#[derive(Default)]
pub(super) struct HostRuns {
    names: Vec<String>,
    index: HashMap<String, u32>,
    /// Host number of each rank of the file being read.
    of_rank: Vec<u32>,
    /// For each rank, the first later rank on another host (the end of its
    /// block of ranks): a rank's partners go in whole blocks.
    block_end: Vec<usize>,
    from: Vec<(u32, usize)>,
    to: Vec<(u32, usize)>,
}

impl HostRuns {
    /// The hostnames of the next file's ranks, by rank.
    pub(super) fn start_file<'a>(&mut self, hosts: impl Iterator<Item = &'a str>) {
        self.of_rank.clear();
        for h in hosts {
            let k = match self.index.get(h) {
                Some(k) => *k,
                None => {
                    let k = self.names.len() as u32;
                    self.names.push(h.to_string());
                    self.index.insert(h.to_string(), k);
                    k
                }
            };
            self.of_rank.push(k);
        }
        let n = self.of_rank.len();
        self.block_end.clear();
        self.block_end.resize(n, n);
        for r in (0..n.saturating_sub(1)).rev() {
            self.block_end[r] = if self.of_rank[r + 1] == self.of_rank[r] {
                self.block_end[r + 1]
            } else {
                r + 1
            };
        }
    }

    /// The host number of `rank` (that of "" for a rank the file does not
    /// list, as [`super::tables::host_of`] gives it).
    fn of(&mut self, rank: usize) -> u32 {
        if let Some(k) = self.of_rank.get(rank) {
            return *k;
        }
        match self.index.get("") {
            Some(k) => *k,
            None => {
                let k = self.names.len() as u32;
                self.names.push(String::new());
                self.index.insert(String::new(), k);
                k
            }
        }
    }

    fn push(runs: &mut Vec<(u32, usize)>, host: u32, rows: usize) {
        match runs.last_mut() {
            Some((h, n)) if *h == host => *n += rows,
            _ if rows == 0 => {}
            _ => runs.push((host, rows)),
        }
    }

    /// `rows` rows initiated by `rank`.
    fn push_from(&mut self, rank: usize, rows: usize) {
        let h = self.of(rank);
        Self::push(&mut self.from, h, rows);
    }

    /// One row toward `partner`.
    fn push_to(&mut self, partner: usize) {
        let h = self.of(partner);
        Self::push(&mut self.to, h, 1);
    }

    /// Rows toward the ranks `ranks`, in order.
    fn push_to_range(&mut self, ranks: std::ops::Range<usize>) {
        let mut p = ranks.start;
        while p < ranks.end {
            match (self.of_rank.get(p), self.block_end.get(p)) {
                (Some(&h), Some(&end)) => {
                    let e = end.min(ranks.end).max(p + 1);
                    Self::push(&mut self.to, h, e - p);
                    p = e;
                }
                _ => {
                    self.push_to(p);
                    p += 1;
                }
            }
        }
    }

    /// The host names, by number.
    fn values(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    fn clear_group(&mut self) {
        self.from.clear();
        self.to.clear();
    }
}

impl TimingGroups {
    fn new(run_id: &str, date: &str) -> Self {
        Self {
            run_id: run_id.to_string(),
            date: date.to_string(),
            run_id_per: per_value(run_id),
            sources: Vec::new(),
            perm: IntRuns::new(),
            from: IntRuns::new(),
            to: IntRuns::new(),
            step: Vec::new(),
            time: Vec::new(),
            pages: None,
            to_pages: Vec::new(),
            spans: Vec::new(),
            enc: None,
            expected: 0,
            spill_dir: None,
            scratch_t: Vec::new(),
            scratch_s: Vec::new(),
            hosts: HostRuns::default(),
        }
    }

    /// Room for `rows` more rows in the group being filled (times only up
    /// to [`BULK_ROWS`]: from there they go to pages).
    fn reserve(&mut self, rows: usize) {
        let rows = rows.min(ROW_GROUP_ROWS - self.step.len());
        self.step.reserve(rows);
        if self.pages.is_none() {
            self.time
                .reserve(rows.min(BULK_ROWS.saturating_sub(self.time.len())));
        }
    }

    fn source(&mut self, s: &str) -> usize {
        self.sources.push(s.to_string());
        self.sources.len() - 1
    }

    /// Appends rank `r`'s measured pairs of permutation `perm` (slot k is
    /// partner k for k < r, k + 1 otherwise; a pair whose time and step are
    /// both 0 was not measured), flushing full row groups. The slots go
    /// straight into the row group's columns and are checked there, while
    /// they are still in cache.
    fn push_rank(&mut self, src: usize, perm: i32, r: usize, slots: &impl Slots) -> Result<()> {
        let n = slots.len();
        let partner = |k: usize| (if k < r { k } else { k + 1 }) as i32;
        let mut k = 0;
        while k < n {
            self.start_pages_if_large()?;
            let take = (ROW_GROUP_ROWS - self.step.len()).min(n - k);
            let at = self.step.len();
            slots.steps_to(k..k + take, &mut self.step)?;
            // With no step 0 no pair can be unmeasured: the file's times go
            // to the pages as they are.
            let direct = match (&mut self.pages, slots.times_le(k..k + take)) {
                (Some(pages), Some(raw)) if !self.step[at..].contains(&0) => {
                    pages.push_le(raw)?;
                    true
                }
                _ => false,
            };
            let rows = if direct {
                self.push_partners(r, k, take);
                take
            } else {
                // The times into the column, or into a scratch column on
                // their way to the pages.
                let times = if self.pages.is_some() {
                    self.to_pages.clear();
                    &mut self.to_pages
                } else {
                    &mut self.time
                };
                let t_at = times.len();
                slots.times_to(k..k + take, times);
                let unmeasured = times[t_at..]
                    .iter()
                    .zip(&self.step[at..])
                    .fold(false, |any, (t, s)| any | ((*t == 0.0) & (*s == 0)));
                let rows = if unmeasured {
                    let mut kept = 0;
                    for i in 0..take {
                        let (t, s) = (times[t_at + i], self.step[at + i]);
                        if t == 0.0 && s == 0 {
                            continue;
                        }
                        times[t_at + kept] = t;
                        self.step[at + kept] = s;
                        self.to.push(partner(k + i));
                        self.hosts.push_to(partner(k + i) as usize);
                        kept += 1;
                    }
                    times.truncate(t_at + kept);
                    self.step.truncate(at + kept);
                    kept
                } else {
                    self.push_partners(r, k, take);
                    take
                };
                if let Some(pages) = &mut self.pages {
                    pages.push(&self.to_pages)?;
                }
                rows
            };
            if rows > 0 {
                self.note_rows(src, rows);
                self.perm.push_run(perm, rows, 0);
                self.from.push_run(r as i32, rows, 0);
                self.hosts.push_from(r, rows);
            }
            k += take;
            if self.step.len() == ROW_GROUP_ROWS {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// The partners of rank `r`'s slots `k..k + take`, all measured.
    fn push_partners(&mut self, r: usize, k: usize, take: usize) {
        let (a, b) = (k.min(r), (k + take).min(r));
        self.to.push_run(a as i32, b - a, 1);
        self.hosts.push_to_range(a..b);
        let (a, b) = (k.max(r), (k + take).max(r));
        self.to.push_run(a as i32 + 1, b - a, 1);
        self.hosts.push_to_range(a + 1..b + 1);
    }

    /// Starts making pages of the times once the table is sure to be large
    /// (a full group was written, or this one has [`BULK_ROWS`] rows): the
    /// times so far move to the pages.
    fn start_pages_if_large(&mut self) -> Result<()> {
        if self.pages.is_none() && (self.enc.is_some() || self.time.len() >= BULK_ROWS) {
            let mut pages = FloatPages::new_bulk(false);
            pages.push(&self.time)?;
            self.time = Vec::new();
            self.pages = Some(pages);
        }
        Ok(())
    }

    /// The rows of a run decoded into matrices (nothing when they are empty,
    /// i.e. its pairs went through [`Self::push_rank`]).
    fn push_matrices(&mut self, src: usize, run: &LinkTestRun) -> Result<()> {
        let n = run.num_tasks;
        for (p, pm) in run.permutations.iter().enumerate() {
            if pm.times.len() != n * n || pm.steps.len() != n * n {
                continue;
            }
            let rows = pm
                .times
                .chunks_exact(n.max(1))
                .zip(pm.steps.chunks_exact(n.max(1)));
            let (mut t, mut s) = (
                std::mem::take(&mut self.scratch_t),
                std::mem::take(&mut self.scratch_s),
            );
            for (i, (trow, srow)) in rows.enumerate() {
                t.clear();
                t.extend_from_slice(&trow[..i]);
                t.extend_from_slice(&trow[i + 1..]);
                s.clear();
                s.extend_from_slice(&srow[..i]);
                s.extend_from_slice(&srow[i + 1..]);
                self.push_rank(src, p as i32, i, &(t.as_slice(), s.as_slice()))?;
            }
            self.scratch_t = t;
            self.scratch_s = s;
        }
        Ok(())
    }

    fn note_rows(&mut self, src: usize, rows: usize) {
        match self.spans.last_mut() {
            Some((s, r)) if *s == src => *r += rows,
            _ => self.spans.push((src, rows)),
        }
    }

    /// Encodes the filled rows as one row group and keeps their memory.
    fn flush(&mut self) -> Result<()> {
        let rows = self.step.len();
        if rows == 0 {
            return Ok(());
        }
        if self.enc.is_none() {
            // A full group means the table has at least ROW_GROUP_ROWS rows
            // (bulk settings); a first group that is the last one has all of them.
            let total = if rows == ROW_GROUP_ROWS {
                ROW_GROUP_ROWS.max(BULK_ROWS)
            } else {
                rows
            };
            self.enc = Some(ParquetEncoder::new_in(
                TABLE,
                &self.date,
                total,
                self.expected,
                self.spill_dir.as_deref(),
            )?);
        }
        let step = Int32Array::new(ScalarBuffer::from(std::mem::take(&mut self.step)), None);
        let time = Float64Array::new(ScalarBuffer::from(std::mem::take(&mut self.time)), None);
        let (step_col, time_col): (ArrayRef, ArrayRef) =
            (Arc::new(step.clone()), Arc::new(time.clone()));
        // The value columns are cut in batches as the string columns were
        // (their offsets are i32; the small-table writer's pages depend on
        // the cuts). The string columns themselves go as runs: one run_id,
        // and a file's name over its rows.
        let spans = std::mem::take(&mut self.spans);
        let name = |src: usize| {
            self.sources
                .get(src)
                .map(String::as_str)
                .unwrap_or_default()
        };
        let per = match spans.as_slice() {
            [(src, _)] => self.run_id_per.min(per_value(name(*src))),
            _ => self.run_id_per,
        }
        .max(1);
        let cuts: Vec<(usize, usize)> = (0..rows)
            .step_by(per)
            .map(|at| (at, per.min(rows - at)))
            .collect();
        let cut = |c: &ArrayRef| -> Vec<ArrayRef> {
            cuts.iter().map(|(at, len)| c.slice(*at, *len)).collect()
        };
        let sources: Vec<(&str, usize)> = spans.iter().map(|(src, n)| (name(*src), *n)).collect();
        let mut columns = [
            GroupColumn::Utf8Runs(vec![(self.run_id.as_str(), rows)]),
            GroupColumn::Utf8Runs(sources),
            GroupColumn::Int32Runs(&self.perm),
            GroupColumn::Int32Runs(&self.from),
            GroupColumn::Int32Runs(&self.to),
            GroupColumn::Arrays(cut(&step_col)),
            match &mut self.pages {
                Some(pages) => GroupColumn::Float64Pages(pages),
                None => GroupColumn::Arrays(cut(&time_col)),
            },
            GroupColumn::Utf8Keys {
                values: self.hosts.values(),
                keys: &self.hosts.from,
            },
            GroupColumn::Utf8Keys {
                values: self.hosts.values(),
                keys: &self.hosts.to,
            },
        ];
        if let Some(enc) = self.enc.as_mut() {
            enc.write_row_group_columns(&mut columns)?;
        }
        drop(columns);
        drop((step_col, time_col));
        self.perm.clear();
        self.from.clear();
        self.to.clear();
        self.hosts.clear_group();
        // Take the column memory back for the next group (the arrays are no
        // longer shared); fresh vectors if that fails.
        self.step = reuse(step.into_parts().1, rows);
        if self.pages.is_none() {
            self.time = reuse(time.into_parts().1, rows);
        }
        Ok(())
    }

    /// Encodes the last group and returns the file.
    fn finish(mut self) -> Result<EncodedTable> {
        self.flush()?;
        let enc = match self.enc {
            Some(e) => e,
            None => ParquetEncoder::new(TABLE, &self.date, 0, 0)?,
        };
        Ok(enc.finish_table("")?)
    }
}

/// Rows per batch of a column repeating `value`: [`TIMING_BATCH_ROWS`], fewer
/// when the batch's bytes would pass the 2 GiB of i32 string offsets.
fn per_value(value: &str) -> usize {
    TIMING_BATCH_ROWS.min((i32::MAX as usize / value.len().max(1)).max(1))
}

/// A rank's pair slots: as the file holds them, or a row of decoded matrices
/// with its diagonal left out.
trait Slots {
    fn len(&self) -> usize;
    fn times_to(&self, slots: std::ops::Range<usize>, out: &mut Vec<f64>);
    /// The little-endian bytes of the times of `slots`, where the slots
    /// hold them so.
    fn times_le(&self, _slots: std::ops::Range<usize>) -> Option<&[u8]> {
        None
    }
    fn steps_to(&self, slots: std::ops::Range<usize>, out: &mut Vec<i32>) -> Result<()>;
}

impl Slots for RankSlots<'_> {
    fn len(&self) -> usize {
        RankSlots::len(self)
    }
    fn times_to(&self, slots: std::ops::Range<usize>, out: &mut Vec<f64>) {
        RankSlots::times_to(self, slots, out)
    }
    fn times_le(&self, slots: std::ops::Range<usize>) -> Option<&[u8]> {
        RankSlots::times_le(self, slots)
    }
    fn steps_to(&self, slots: std::ops::Range<usize>, out: &mut Vec<i32>) -> Result<()> {
        RankSlots::steps_to(self, slots, out)
    }
}

impl Slots for (&[f64], &[i32]) {
    fn len(&self) -> usize {
        self.0.len().min(self.1.len())
    }
    fn times_to(&self, slots: std::ops::Range<usize>, out: &mut Vec<f64>) {
        out.extend_from_slice(&self.0[slots]);
    }
    fn steps_to(&self, slots: std::ops::Range<usize>, out: &mut Vec<i32>) -> Result<()> {
        out.extend_from_slice(&self.1[slots]);
        Ok(())
    }
}

/// The vector behind an unshared column buffer, emptied (a new one when the
/// buffer is still shared).
fn reuse<T: arrow::datatypes::ArrowNativeType>(b: ScalarBuffer<T>, rows: usize) -> Vec<T> {
    match b.into_inner().into_vec::<T>() {
        Ok(mut v) => {
            v.clear();
            v
        }
        Err(_) => Vec::with_capacity(rows),
    }
}
