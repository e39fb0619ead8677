//! The report's numbers ([`super::summarize`]) from pairs streamed in passes,
//! in memory bounded by the picture, not by the pair count (issue 40): the
//! dashboard's pair view of a 6,000-rank run (36 M pairs) never holds the
//! pairs.
//!
//! The caller hands a `pass` function that streams every pair of the
//! permutation (rank `from`, rank `to`, time, step) into a sink, in any order
//! (row-major gives the same ties as [`super::summarize`]), and may be called
//! several times:
//! - pass 1: count, min, max, sum, the binned matrix (the slowest pair of
//!   each cell and which pair it is), the host × host aggregates, the
//!   slowest pairs (periodic selection), and a radix histogram of the times
//!   (the top 16 bits of each time's order key);
//! - pass 2 and on: the histogram of pair times (its edges need the min and
//!   max), and the median by radix selection: each pass narrows the median's
//!   bucket by 16 bits until it holds at most [`COLLECT_MAX`] times, which
//!   the next pass collects and selects from (two passes for any realistic
//!   run; at most five);
//! - runs with more than [`HOST_AGG_MAX`] hosts: two more passes for the
//!   slow host pairs (which host pairs are above the threshold, and the
//!   count and mean of the [`HOT_KEEP`] slowest of them).
//!
//! Memory: the matrix (`side`² cells × 16 bytes; side ≤ the option's
//! `max_matrix_cells`), the host aggregates (`hosts`² × 24 bytes up to
//! [`HOST_AGG_MAX`] hosts; beyond, a bit per host pair), 512 KiB of radix
//! histogram, at most [`COLLECT_MAX`] collected times (8 MiB), the slowest
//! pairs' candidates, and per rank its host (4 bytes).
//!
//! A pair stored twice is counted twice (a dense matrix keeps the last);
//! the lake's tables hold each pair once.
use std::collections::HashMap;

use benchlake_formats::linktest::LinkTestRun;

use super::{HostLayout, HostPair, ReportError, ReportOptions, SlowPair, Summary};

/// Times collected in memory to select the median from (8 MiB).
pub const COLLECT_MAX: u64 = 1 << 20;
/// Host × host aggregates are kept as matrices up to this many hosts (24 MiB).
pub const HOST_AGG_MAX: usize = 1024;
/// Beyond [`HOST_AGG_MAX`] hosts, the slow host pairs listed (with their
/// count and mean); the rest are counted.
pub const HOT_KEEP: usize = 200;

/// A sink of measured and unmeasured pairs: `(from, to, time_s, step)`.
pub type Sink<'a> = dyn FnMut(usize, usize, f64, i32) + 'a;

/// Errors of the streamed summary.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The pass could not read the pairs.
    #[error("{0}")]
    Read(String),
    /// The report's own error.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// A rank outside `0..num_tasks`.
    #[error("pair {0} → {1}: ranks are 0..{2}")]
    Rank(usize, usize, usize),
}

/// The summary and, per matrix cell, the pair that coloured it.
#[derive(Debug, Clone)]
pub struct Streamed {
    /// Equal to [`super::summarize`] of the same run, except that beyond
    /// [`HOST_AGG_MAX`] hosts `host_matrix_*` are empty and
    /// `hot_host_pairs` holds the [`HOT_KEEP`] slowest.
    pub summary: Summary,
    /// `(from, to)` of each cell's slowest pair (`summary.matrix` layout;
    /// `u32::MAX` where nothing was measured).
    pub slowest_of_cell: Vec<(u32, u32)>,
    /// Host pairs above the threshold (all of them, also beyond `HOT_KEEP`).
    pub hot_total: usize,
    /// Passes over the pairs.
    pub passes: usize,
}

/// The order key of a time: unsigned keys compare like [`f64::total_cmp`].
fn key(t: f64) -> u64 {
    let b = t.to_bits();
    if b >> 63 == 1 { !b } else { b | 1 << 63 }
}

fn unkey(k: u64) -> f64 {
    f64::from_bits(if k >> 63 == 1 { k & !(1 << 63) } else { !k })
}

/// The radix selection of the time of one rank (0-based, in total order).
#[derive(Debug)]
struct Finder {
    rank: u64,
    prefix: u64,
    bits: u32,
    state: Find,
}

#[derive(Debug)]
enum Find {
    Hist(Vec<u64>),
    Collect(Vec<u64>),
    Done(u64),
}

impl Finder {
    fn new() -> Self {
        Self {
            rank: 0,
            prefix: 0,
            bits: 0,
            state: Find::Hist(vec![0; 1 << 16]),
        }
    }

    fn done(&self) -> Option<f64> {
        match self.state {
            Find::Done(k) => Some(unkey(k)),
            _ => None,
        }
    }

    fn mine(&self, k: u64) -> bool {
        self.bits == 0 || k >> (64 - self.bits) == self.prefix
    }

    #[inline]
    fn feed(&mut self, k: u64) {
        if !self.mine(k) {
            return;
        }
        match &mut self.state {
            Find::Hist(h) => h[((k >> (48 - self.bits)) & 0xffff) as usize] += 1,
            Find::Collect(v) => v.push(k),
            Find::Done(_) => {}
        }
    }

    /// After a pass: narrows the bucket (or selects from the collected keys).
    fn next(&mut self) {
        match &mut self.state {
            Find::Hist(h) => {
                let mut before = 0u64;
                let mut pick = (0usize, 0u64);
                for (b, c) in h.iter().enumerate() {
                    if before + c > self.rank {
                        pick = (b, *c);
                        break;
                    }
                    before += c;
                }
                self.rank -= before;
                self.prefix = self.prefix << 16 | pick.0 as u64;
                self.bits += 16;
                self.state = if self.bits == 64 {
                    Find::Done(self.prefix)
                } else if pick.1 <= COLLECT_MAX {
                    Find::Collect(Vec::with_capacity(pick.1 as usize))
                } else {
                    Find::Hist(vec![0; 1 << 16])
                };
            }
            Find::Collect(v) => {
                let r = (self.rank as usize).min(v.len().saturating_sub(1));
                let k = if v.is_empty() {
                    self.prefix << (64 - self.bits)
                } else {
                    *v.select_nth_unstable(r).1
                };
                self.state = Find::Done(k);
            }
            Find::Done(_) => {}
        }
    }

    fn with(&self, rank: u64) -> Self {
        let state = match &self.state {
            Find::Hist(h) => Find::Hist(h.clone()),
            Find::Collect(_) | Find::Done(_) => Find::Hist(vec![0; 1 << 16]),
        };
        Self {
            rank,
            prefix: self.prefix,
            bits: self.bits,
            state,
        }
    }
}

/// The report's numbers of `run` (its ranks, hosts, slow links and figures;
/// the pairs are not read from it) from the pairs `pass` streams.
pub fn summarize_streamed(
    run: &LinkTestRun,
    opts: &ReportOptions,
    mut pass: impl FnMut(&mut Sink<'_>) -> Result<(), String>,
) -> Result<Streamed, StreamError> {
    let n = run.num_tasks;
    let p = run
        .permutations
        .get(opts.permutation)
        .ok_or(ReportError::NoPermutation(
            opts.permutation,
            run.permutations.len(),
        ))?;
    let HostLayout {
        host_of,
        hosts,
        host_idx,
        host_boundaries,
    } = HostLayout::of(run);
    let host_no: Vec<u32> = host_of
        .iter()
        .map(|h| host_idx.get(h).copied().unwrap_or(0) as u32)
        .collect();
    let nh = hosts.len();
    let agg = nh <= HOST_AGG_MAX;
    let measured = |i: usize, j: usize, t: f64, s: i32| i != j && !(t == 0.0 && s == 0);
    let mut bad: Option<(usize, usize)> = None;
    let mut passes = 0;

    // Pass 1.
    let cells = opts.max_matrix_cells.max(1);
    let bin = n.div_ceil(cells).max(1);
    let side = n.div_ceil(bin);
    let mut mat = vec![f64::NAN; side * side];
    let mut arg = vec![(u32::MAX, u32::MAX); side * side];
    let hn = if agg { nh * nh } else { 0 };
    let (mut hsum, mut hmax, mut hcnt) = (vec![0f64; hn], vec![f64::NAN; hn], vec![0usize; hn]);
    let (mut pairs, mut min_s, mut max_s, mut sum) =
        (0usize, f64::INFINITY, f64::NEG_INFINITY, 0f64);
    let mut radix = Finder::new();
    let keep = opts.top_pairs + p.slow_links.len();
    let want_slowest = p.slow_links.len() < opts.top_pairs;
    let slower = |a: &(f64, usize, usize), b: &(f64, usize, usize)| {
        b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2))
    };
    let mut cand: Vec<(f64, usize, usize)> = Vec::with_capacity(4 * keep + 1);
    pass(&mut |i, j, t, s| {
        if i >= n || j >= n {
            bad.get_or_insert((i, j));
            return;
        }
        if !measured(i, j, t, s) {
            return;
        }
        pairs += 1;
        min_s = min_s.min(t);
        max_s = max_s.max(t);
        sum += t;
        radix.feed(key(t));
        let k = (i / bin) * side + j / bin;
        if let Some(c) = mat.get_mut(k)
            && (c.is_nan() || t > *c)
        {
            *c = t;
            arg[k] = (i as u32, j as u32);
        }
        if agg {
            let k = host_no[i] as usize * nh + host_no[j] as usize;
            hsum[k] += t;
            hcnt[k] += 1;
            hmax[k] = if hmax[k].is_nan() { t } else { hmax[k].max(t) };
        }
        if want_slowest {
            cand.push((t, i, j));
            if cand.len() > 4 * keep {
                cand.select_nth_unstable_by(keep, slower);
                cand.truncate(keep);
            }
        }
    })
    .map_err(StreamError::Read)?;
    passes += 1;
    if let Some((i, j)) = bad {
        return Err(StreamError::Rank(i, j, n));
    }
    let (min_s, max_s) = if pairs == 0 {
        (0.0, 0.0)
    } else {
        (min_s, max_s)
    };
    let avg_s = if p.avg_time_s.is_finite() && p.avg_time_s >= min_s && p.avg_time_s <= max_s {
        p.avg_time_s
    } else if pairs > 0 {
        sum / pairs as f64
    } else {
        0.0
    };
    let log_scale = min_s > 0.0 && max_s >= super::LOG_SCALE_RATIO * min_s;
    let nbins = opts.histogram_bins.max(1);
    let edges: Vec<f64> = (0..=nbins)
        .map(|k| {
            let f = k as f64 / nbins as f64;
            if log_scale {
                min_s * (max_s / min_s).powf(f)
            } else if max_s > min_s {
                min_s + (max_s - min_s) * f
            } else {
                min_s + 1e-9 * k as f64
            }
        })
        .collect();
    let mut counts = vec![0usize; nbins];

    // Pass 2 on: the histogram, and the median's bucket narrowed until found.
    let k = pairs as u64;
    let mut finders: Vec<Finder> = match k {
        0 => Vec::new(),
        k if k % 2 == 1 => vec![radix.with(k / 2)],
        k => vec![radix.with(k / 2), radix.with(k / 2 - 1)],
    };
    drop(radix);
    for f in &mut finders {
        f.next();
    }
    let mut histogram_done = pairs == 0;
    while !histogram_done || finders.iter().any(|f| f.done().is_none()) {
        if passes >= 8 {
            return Err(StreamError::Read(
                "the median was not found in 8 passes".into(),
            ));
        }
        let hist = !histogram_done;
        pass(&mut |i, j, t, s| {
            if i >= n || j >= n || !measured(i, j, t, s) {
                return;
            }
            if hist {
                let f = if log_scale {
                    (t / min_s).ln() / (max_s / min_s).ln()
                } else if max_s > min_s {
                    (t - min_s) / (max_s - min_s)
                } else {
                    0.0
                };
                let b = ((f * nbins as f64) as usize).min(nbins - 1);
                if let Some(c) = counts.get_mut(b) {
                    *c += 1;
                }
            }
            let kt = key(t);
            for f in finders.iter_mut() {
                f.feed(kt);
            }
        })
        .map_err(StreamError::Read)?;
        passes += 1;
        histogram_done = true;
        for f in &mut finders {
            f.next();
        }
    }
    let median_s = match finders.as_slice() {
        [] => 0.0,
        [hi] => hi.done().unwrap_or(0.0),
        [hi, lo, ..] => {
            let (hi, lo) = (hi.done().unwrap_or(0.0), lo.done().unwrap_or(0.0));
            (lo + hi) / 2.0
        }
    };
    drop(finders);

    let threshold_s = opts.threshold_s.unwrap_or(2.0 * median_s);
    let hmean: Vec<f64> = hsum
        .iter()
        .zip(&hcnt)
        .map(|(s, c)| if *c > 0 { s / *c as f64 } else { f64::NAN })
        .collect();
    let (mut hot_host_pairs, hot_total) = if agg {
        let hot: Vec<HostPair> = (0..nh * nh)
            .filter(|k| hcnt[*k] > 0 && hmax[*k] > threshold_s)
            .map(|k| HostPair {
                from_host: hosts[k / nh].clone(),
                to_host: hosts[k % nh].clone(),
                pairs: hcnt[k],
                mean_s: hmean[k],
                max_s: hmax[k],
            })
            .collect();
        let total = hot.len();
        (hot, total)
    } else {
        let (hot, total, more) = hot_host_pairs_streamed(&host_no, &hosts, threshold_s, |f| {
            pass(&mut |i, j, t, s| {
                if i < n && j < n && measured(i, j, t, s) {
                    f(i, j, t, s)
                }
            })
        })?;
        passes += more;
        (hot, total)
    };
    hot_host_pairs.sort_by(|a, b| b.max_s.total_cmp(&a.max_s));

    // Slowest pairs: the recorded retests, then the slowest matrix entries.
    let mut slowest: Vec<SlowPair> = p
        .slow_links
        .iter()
        .map(|s| SlowPair {
            from_rank: s.from_rank,
            to_rank: s.to_rank,
            from_host: host_of.get(s.from_rank).unwrap_or(&"?").to_string(),
            to_host: host_of.get(s.to_rank).unwrap_or(&"?").to_string(),
            time_s: s.time_s,
            retest_time_s: s.retest_time_s,
        })
        .collect();
    cand.sort_by(slower);
    for (t, i, j) in cand {
        if slowest.len() >= opts.top_pairs {
            break;
        }
        if slowest.iter().any(|s| s.from_rank == i && s.to_rank == j) {
            continue;
        }
        slowest.push(SlowPair {
            from_rank: i,
            to_rank: j,
            from_host: host_of[i].to_string(),
            to_host: host_of[j].to_string(),
            time_s: t,
            retest_time_s: None,
        });
    }
    let summary = Summary {
        title: opts.title.clone(),
        version: run.version_string(),
        mode: run.mode.clone(),
        num_tasks: n,
        num_messages: run.num_messages,
        message_size: run.message_size,
        all_to_all: run.flags.all_to_all,
        serial: run.flags.serial,
        pairs,
        min_s,
        avg_s,
        max_s,
        median_s,
        a2a: p.a2a.map(|[a, b, c]| (a, b, c)),
        hosts,
        host_boundaries,
        histogram: super::Histogram {
            edges,
            counts,
            log: log_scale,
        },
        log_scale,
        slowest,
        threshold_s,
        hot_host_pairs,
        host_matrix_max: hmax,
        host_matrix_mean: hmean,
        matrix: (side, bin, mat),
        checks: Vec::new(),
    };
    Ok(Streamed {
        summary,
        slowest_of_cell: arg,
        hot_total,
        passes,
    })
}

/// Beyond [`HOST_AGG_MAX`] hosts: the [`HOT_KEEP`] host pairs with the
/// slowest pairs above `threshold` (with their count and mean), how many
/// host pairs are above it, and the passes taken. One pass finds the host
/// pairs (a bit per host pair, and the slowest kept by periodic selection
/// over distinct host pairs), a second adds up the kept ones' pairs.
fn hot_host_pairs_streamed(
    host_no: &[u32],
    hosts: &[String],
    threshold: f64,
    mut pass: impl FnMut(&mut Sink<'_>) -> Result<(), String>,
) -> Result<(Vec<HostPair>, usize, usize), StreamError> {
    let nh = hosts.len() as u64;
    let mut seen = vec![0u64; (nh * nh).div_ceil(64) as usize];
    let mut total = 0usize;
    // (slowest, host pair), distinct host pairs after each compaction.
    let mut cand: Vec<(f64, u64)> = Vec::with_capacity(8 * HOT_KEEP);
    let compact = |cand: &mut Vec<(f64, u64)>| {
        cand.sort_by(|a, b| a.1.cmp(&b.1).then(b.0.total_cmp(&a.0)));
        cand.dedup_by_key(|c| c.1);
        if cand.len() > HOT_KEEP {
            cand.select_nth_unstable_by(HOT_KEEP, |a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            cand.truncate(HOT_KEEP);
        }
    };
    pass(&mut |i, j, t, _| {
        if t <= threshold {
            return;
        }
        let k = u64::from(host_no[i]) * nh + u64::from(host_no[j]);
        let (w, b) = ((k / 64) as usize, k % 64);
        if seen[w] >> b & 1 == 0 {
            seen[w] |= 1 << b;
            total += 1;
        }
        cand.push((t, k));
        if cand.len() >= 8 * HOT_KEEP {
            compact(&mut cand);
        }
    })
    .map_err(StreamError::Read)?;
    drop(seen);
    compact(&mut cand);
    cand.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let index: HashMap<u64, usize> = cand.iter().enumerate().map(|(x, c)| (c.1, x)).collect();
    let mut acc = vec![(0usize, 0f64, f64::NAN); cand.len()];
    if !index.is_empty() {
        pass(&mut |i, j, t, _| {
            let k = u64::from(host_no[i]) * nh + u64::from(host_no[j]);
            if let Some(x) = index.get(&k) {
                let a = &mut acc[*x];
                a.0 += 1;
                a.1 += t;
                a.2 = if a.2.is_nan() { t } else { a.2.max(t) };
            }
        })
        .map_err(StreamError::Read)?;
    }
    let hot = cand
        .iter()
        .zip(&acc)
        .map(|((_, k), (c, s, m))| HostPair {
            from_host: hosts[(k / nh) as usize].clone(),
            to_host: hosts[(k % nh) as usize].clone(),
            pairs: *c,
            mean_s: if *c > 0 { s / *c as f64 } else { f64::NAN },
            max_s: *m,
        })
        .collect();
    Ok((hot, total, 1 + usize::from(!index.is_empty())))
}

/// A window of the matrix: ranks `r0..r0+span` (rows, initiating) ×
/// `c0..c0+span`, `bin` ranks a cell on `side` cells a side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cells {
    pub r0: usize,
    pub c0: usize,
    pub span: usize,
    pub bin: usize,
    pub side: usize,
}

/// A window's cells and the pair of each cell.
pub type WindowOut = (Vec<f64>, Vec<(u32, u32)>);

/// The window's cells (`side`², row-major; the slowest pair of each
/// `bin`×`bin` block, NaN where nothing was measured) and each cell's
/// slowest pair, from one pass: memory `side`² × 16 bytes.
pub fn window_streamed(
    n: usize,
    w: Cells,
    mut pass: impl FnMut(&mut Sink<'_>) -> Result<(), String>,
) -> Result<WindowOut, StreamError> {
    let mut m = vec![f64::NAN; w.side * w.side];
    let mut arg = vec![(u32::MAX, u32::MAX); w.side * w.side];
    let bin = w.bin.max(1);
    pass(&mut |i, j, t, s| {
        if i >= n
            || j >= n
            || i == j
            || (t == 0.0 && s == 0)
            || i < w.r0
            || j < w.c0
            || i >= w.r0 + w.span
            || j >= w.c0 + w.span
        {
            return;
        }
        let k = ((i - w.r0) / bin) * w.side + (j - w.c0) / bin;
        if let Some(c) = m.get_mut(k)
            && (c.is_nan() || t > *c)
        {
            *c = t;
            arg[k] = (i as u32, j as u32);
        }
    })
    .map_err(StreamError::Read)?;
    Ok((m, arg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linktest_report::summarize;

    /// Streams the dense matrices of `run` (row-major), as the lake would.
    fn pass_of(run: &LinkTestRun, perm: usize) -> impl FnMut(&mut Sink<'_>) -> Result<(), String> {
        let p = run.permutations[perm].clone();
        let n = run.num_tasks;
        move |f| {
            for i in 0..n {
                for j in 0..n {
                    if i != j {
                        f(i, j, p.times[i * n + j], p.steps[i * n + j]);
                    }
                }
            }
            Ok(())
        }
    }

    fn same(a: &Summary, b: &Summary) {
        assert_eq!(
            serde_json::to_value(a).unwrap(),
            serde_json::to_value(b).unwrap()
        );
    }

    #[test]
    fn the_streamed_summary_equals_the_dense_one() {
        for (n, per_host, cells, top) in [
            (12, 4, 256, 10),
            (96, 8, 40, 20),
            (200, 48, 640, 5),
            (301, 1, 64, 10),
        ] {
            let run = benchlake_formats::linktest::synth::synthetic_run(n, per_host, 7);
            let opts = ReportOptions {
                max_matrix_cells: cells,
                top_pairs: top,
                ..Default::default()
            };
            let dense = summarize(&run, &opts).unwrap();
            let s = summarize_streamed(&run, &opts, pass_of(&run, 0)).unwrap();
            same(&s.summary, &dense);
            assert_eq!(s.hot_total, dense.hot_host_pairs.len());
            assert_eq!(s.passes, 2, "n {n}");
            // Every cell's pair is the slowest of its block, and inside it.
            let (side, bin, m) = &s.summary.matrix;
            for (k, (i, j)) in s.slowest_of_cell.iter().enumerate() {
                if m[k].is_nan() {
                    continue;
                }
                let (i, j) = (*i as usize, *j as usize);
                assert_eq!((i / bin, j / bin), (k / side, k % side));
                assert_eq!(run.permutations[0].times[i * n + j], m[k]);
            }
        }
    }

    #[test]
    fn real_files_stream_to_the_same_report() {
        let dir = std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/linktest/v1.2p1"
        ));
        let mut seen = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let f = e.unwrap().path().join("pingpong_results_bin.sion");
            if !f.exists() {
                continue;
            }
            let run = benchlake_formats::linktest::read_file(&f).unwrap();
            let opts = ReportOptions::default();
            let dense = summarize(&run, &opts).unwrap();
            let s = summarize_streamed(&run, &opts, pass_of(&run, 0)).unwrap();
            same(&s.summary, &dense);
            seen += 1;
        }
        assert!(seen >= 3, "{seen} real files");
    }

    #[test]
    fn a_crowded_median_takes_more_passes_and_stays_exact() {
        // 2,000 ranks, every time equal but a few: the median's bucket holds
        // almost every pair (4 M > COLLECT_MAX), so it is narrowed first.
        let n = 2000;
        let mut run = benchlake_formats::linktest::synth::synthetic_run(n, 50, 3);
        let p = &mut run.permutations[0];
        for (k, t) in p.times.iter_mut().enumerate() {
            if k / n != k % n {
                *t = 1e-6 + (k % 3) as f64 * 1e-15;
            }
        }
        p.times[5] = 9e-3;
        let opts = ReportOptions::default();
        let dense = summarize(&run, &opts).unwrap();
        let s = summarize_streamed(&run, &opts, pass_of(&run, 0)).unwrap();
        same(&s.summary, &dense);
        assert!(s.passes >= 3, "{}", s.passes);
    }

    #[test]
    fn many_hosts_list_the_slowest_host_pairs_and_count_them_all() {
        // One rank per host beyond HOST_AGG_MAX hosts: no host matrices; the
        // slow host pairs are the dense report's, the slowest HOT_KEEP of them.
        let n = HOST_AGG_MAX + 60;
        let run = benchlake_formats::linktest::synth::synthetic_run(n, 1, 11);
        let opts = ReportOptions::default();
        let dense = summarize(&run, &opts).unwrap();
        let s = summarize_streamed(&run, &opts, pass_of(&run, 0)).unwrap();
        assert!(s.summary.host_matrix_max.is_empty());
        assert_eq!(s.hot_total, dense.hot_host_pairs.len());
        assert!(s.hot_total > HOT_KEEP, "{}", s.hot_total);
        assert_eq!(s.summary.hot_host_pairs.len(), HOT_KEEP);
        for (a, b) in s.summary.hot_host_pairs.iter().zip(&dense.hot_host_pairs) {
            assert_eq!((a.max_s, a.pairs), (b.max_s, b.pairs));
            assert_eq!(a.mean_s, b.mean_s);
        }
        assert_eq!(s.summary.median_s, dense.median_s);
        assert_eq!(s.passes, 4);
    }

    #[test]
    fn a_window_is_the_slowest_pair_of_each_block() {
        let n = 100;
        let run = benchlake_formats::linktest::synth::synthetic_run(n, 10, 5);
        let w = Cells {
            r0: 10,
            c0: 60,
            span: 40,
            bin: 4,
            side: 10,
        };
        let (m, arg) = window_streamed(n, w, pass_of(&run, 0)).unwrap();
        let t = &run.permutations[0].times;
        for r in 0..10 {
            for c in 0..10 {
                let mut best = f64::NAN;
                for i in 10 + 4 * r..14 + 4 * r {
                    for j in 60 + 4 * c..64 + 4 * c {
                        if i != j {
                            best = if best.is_nan() {
                                t[i * n + j]
                            } else {
                                best.max(t[i * n + j])
                            };
                        }
                    }
                }
                assert_eq!(m[r * 10 + c], best);
                let (i, j) = arg[r * 10 + c];
                assert_eq!(t[i as usize * n + j as usize], best);
            }
        }
        // Ranks outside the run are an error.
        let e = summarize_streamed(&run, &ReportOptions::default(), |f| {
            f(0, n, 1e-6, 1);
            Ok(())
        })
        .unwrap_err();
        assert!(e.to_string().contains("ranks are 0..100"), "{e}");
    }

    #[test]
    fn order_keys_keep_the_total_order() {
        let v = [-1.5, -0.0, 0.0, 1e-300, 2e-6, 3.0, f64::MAX];
        for w in v.windows(2) {
            assert!(key(w[0]) < key(w[1]), "{w:?}");
        }
        for x in v {
            assert_eq!(unkey(key(x)).to_bits(), x.to_bits());
        }
    }
}
