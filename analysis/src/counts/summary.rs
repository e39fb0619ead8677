//! Per-block analysis: what one count block (all calls sharing one pair of send
//! and receive matrices) contributes to patterns, statistics and heat maps. A
//! block is analysed once, whatever its number of calls; the figures are then
//! weighted by that number where the reference counts per call.
use std::collections::BTreeMap;

use benchlake_formats::counts::ranklist::{self, CallList, Span};
use serde::{Deserialize, Serialize};

/// Send or receive side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Direction {
    /// Row i = what rank i sends to each peer.
    Send,
    /// Row i = what rank i receives from each peer.
    Recv,
}

impl Direction {
    /// `send` / `recv`.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Send => "send",
            Direction::Recv => "recv",
        }
    }
}

/// The figures of one side (send or recv) of one block, for a single call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SideStats {
    /// Datatype size in bytes.
    pub datatype_size: u64,
    /// non-zero counts in a row → number of ranks with such a row (all-zero rows
    /// are not counted): "X ranks sent to Y other ranks" with Y the key.
    pub patterns: BTreeMap<u64, u64>,
    /// zero counts in a row → number of ranks (rows with at least one zero).
    pub zeros_per_rank: BTreeMap<u64, u64>,
    /// Zero entries of the N×N matrix.
    pub total_zero: u64,
    /// Non-zero entries of the N×N matrix.
    pub total_nonzero: u64,
    /// Smallest count (zeros included).
    pub min: u64,
    /// Largest count.
    pub max: u64,
    /// Smallest non-zero count (0 when all are zero); the reference never prints it.
    pub min_nonzero: u64,
    /// Entries with `count × datatype size <= threshold`.
    pub small: u64,
    /// Small entries that are not zero.
    pub small_nonzero: u64,
    /// Entries with `count × datatype size > threshold`.
    pub large: u64,
    /// Sum of the counts of each distinct row, not weighted by its ranks (the
    /// reference's `Sum`, kept for compatibility).
    pub row_sum_unweighted: u64,
    /// Bytes per communicator rank (row sum × datatype size).
    pub rank_bytes: Vec<u64>,
}

/// Accumulates the rows of one side of a block.
#[derive(Debug)]
pub struct SideAcc {
    s: SideStats,
    n: u64,
    small_limit: u64,
    first: bool,
}

impl SideAcc {
    /// Starts a side of an `n`-rank block with the given datatype size and
    /// small-message threshold in bytes.
    pub fn new(n: u64, datatype_size: u64, threshold: u64) -> Self {
        let small_limit = threshold.checked_div(datatype_size).unwrap_or(u64::MAX);
        Self {
            s: SideStats {
                datatype_size,
                rank_bytes: vec![0; usize::try_from(n).unwrap_or(0)],
                ..SideStats::default()
            },
            n,
            small_limit,
            first: true,
        }
    }

    /// Adds one row shared by `ranks`.
    pub fn add_row(&mut self, ranks: &[Span], counts: &[u64]) {
        let w = ranklist::count(ranks);
        let mut nonzero = 0u64;
        let mut small = 0u64;
        let mut small_nz = 0u64;
        let mut sum = 0u64;
        let mut min = u64::MAX;
        let mut max = 0u64;
        let mut min_nz = u64::MAX;
        let lim = self.small_limit;
        // Hot loop, kept branch-free. Counts come from the readers (at most
        // i32::MAX each, at most 2^24 per row), so the sum cannot overflow; the
        // wrapping add only keeps arbitrary callers from panicking.
        for &c in counts {
            let nz = c != 0;
            nonzero += u64::from(nz);
            small += u64::from(c <= lim);
            small_nz += u64::from(nz & (c <= lim));
            sum = sum.wrapping_add(c);
            min = min.min(c);
            max = max.max(c);
            min_nz = min_nz.min(if nz { c } else { u64::MAX });
        }
        let len = counts.len() as u64;
        let zeros = len - nonzero;
        let s = &mut self.s;
        if nonzero > 0 {
            *s.patterns.entry(nonzero).or_default() += w;
        }
        if zeros > 0 {
            *s.zeros_per_rank.entry(zeros).or_default() += w;
        }
        s.total_zero = s.total_zero.saturating_add(zeros.saturating_mul(w));
        s.total_nonzero = s.total_nonzero.saturating_add(nonzero.saturating_mul(w));
        s.small = s.small.saturating_add(small.saturating_mul(w));
        s.small_nonzero = s.small_nonzero.saturating_add(small_nz.saturating_mul(w));
        s.large = s.large.saturating_add((len - small).saturating_mul(w));
        s.row_sum_unweighted = s.row_sum_unweighted.saturating_add(sum);
        if len > 0 {
            if self.first {
                s.min = min;
                s.max = max;
            } else {
                s.min = s.min.min(min);
                s.max = s.max.max(max);
            }
            if min_nz != u64::MAX && (s.min_nonzero == 0 || min_nz < s.min_nonzero) {
                s.min_nonzero = min_nz;
            }
            self.first = false;
        }
        let bytes = sum.saturating_mul(s.datatype_size);
        for &(a, b) in ranks {
            for r in a..=b.min(self.n.saturating_sub(1)) {
                if let Some(x) = s.rank_bytes.get_mut(r as usize) {
                    *x = bytes;
                }
            }
        }
    }

    /// The figures.
    pub fn finish(self) -> SideStats {
        self.s
    }
}

/// How the calls of a block map communicator ranks to world ranks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallMapping {
    /// The calls of the block that use this mapping.
    pub calls: CallList,
    /// World rank of each communicator rank; `None` when no location file
    /// covers these calls (communicator ranks are then used as world ranks).
    pub world_ranks: Option<Vec<u64>>,
}

/// One block's contribution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSummary {
    /// Block index in its file (or group index for per-call input).
    pub index: u64,
    /// Communicator size.
    pub comm_size: u64,
    /// `Alltoallv calls S-E` of the block (compact input only).
    pub header_calls: Option<(u64, u64)>,
    /// The calls with these matrices.
    pub calls: CallList,
    /// Send side.
    pub send: SideStats,
    /// Receive side.
    pub recv: SideStats,
    /// World-rank mappings of the block's calls.
    pub mappings: Vec<CallMapping>,
}

impl BlockSummary {
    /// The side for `d`.
    pub fn side(&self, d: Direction) -> &SideStats {
        match d {
            Direction::Send => &self.send,
            Direction::Recv => &self.recv,
        }
    }
}

/// Dense rank×rank byte accumulator of one lead rank and direction.
#[derive(Debug, Clone)]
pub struct HeatAcc {
    /// Matrix side (largest world rank + 1).
    pub dim: u64,
    /// Row-major bytes.
    pub bytes: Vec<u64>,
}

/// Largest heat-map side held densely (4096² × 8 B = 128 MiB).
pub const MAX_HEAT_DIM: u64 = 4096;

impl HeatAcc {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self {
            dim: 0,
            bytes: Vec::new(),
        }
    }

    fn grow(&mut self, dim: u64) -> bool {
        if dim <= self.dim {
            return true;
        }
        if dim > MAX_HEAT_DIM {
            return false;
        }
        let old = std::mem::take(&mut self.bytes);
        let od = self.dim as usize;
        let nd = dim as usize;
        let mut v = vec![0u64; nd * nd];
        for i in 0..od {
            for j in 0..od {
                if let (Some(dst), Some(src)) = (v.get_mut(i * nd + j), old.get(i * od + j)) {
                    *dst = *src;
                }
            }
        }
        self.bytes = v;
        self.dim = dim;
        true
    }

    /// Adds `weight × datatype size × counts[j]` to (world(r), world(j)) for every
    /// rank r of `ranks`. Returns `false` (adding nothing) when the matrix would
    /// exceed [`MAX_HEAT_DIM`].
    pub fn add_row(
        &mut self,
        ranks: &[Span],
        counts: &[u64],
        world: Option<&[u64]>,
        factor: u64,
    ) -> bool {
        let need = match world {
            Some(w) => w.iter().copied().max().map_or(0, |m| m + 1),
            None => counts.len() as u64,
        };
        if !self.grow(need) {
            return false;
        }
        let d = self.dim as usize;
        // Products cannot overflow when both factors fit in 32 bits.
        let small_products =
            factor <= u64::from(u32::MAX) && counts.iter().all(|&c| c <= u64::from(u32::MAX));
        for &(a, b) in ranks {
            for r in a..=b {
                let wr = match world {
                    Some(w) => match w.get(r as usize) {
                        Some(x) => *x as usize,
                        None => continue,
                    },
                    None => r as usize,
                };
                let base = wr * d;
                match world {
                    None => {
                        if let Some(row) = self.bytes.get_mut(base..base + counts.len()) {
                            if small_products {
                                // No product can overflow: plain multiply, saturating sum.
                                for (x, &c) in row.iter_mut().zip(counts) {
                                    *x = x.saturating_add(c.wrapping_mul(factor));
                                }
                            } else {
                                for (x, &c) in row.iter_mut().zip(counts) {
                                    *x = x.saturating_add(c.saturating_mul(factor));
                                }
                            }
                        }
                    }
                    Some(w) => {
                        for (j, &c) in counts.iter().enumerate() {
                            if c == 0 {
                                continue;
                            }
                            if let Some(x) = w
                                .get(j)
                                .and_then(|wj| self.bytes.get_mut(base + *wj as usize))
                            {
                                *x = x.saturating_add(c.saturating_mul(factor));
                            }
                        }
                    }
                }
            }
        }
        true
    }

    /// Non-zero entries `(rank, peer, bytes)`.
    pub fn sparse(&self) -> Vec<(u64, u64, u64)> {
        let d = self.dim.max(1);
        self.bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b != 0)
            .map(|(i, b)| (i as u64 / d, i as u64 % d, *b))
            .collect()
    }
}

impl Default for HeatAcc {
    fn default() -> Self {
        Self::new()
    }
}
