//! Which world ranks (and hosts) the calls of a lead rank ran on, from the
//! profiler's location files, and the span arithmetic used to split a block's
//! calls by communicator.
//!
//! Two lookup modes (docs/counts.md): the reference mode reproduces the Go
//! `profile` tool, which indexes locations by call ID across *all* lead ranks
//! (a later lead rank's communicator wins for a call ID that several lead ranks
//! used), and the per-lead mode only looks at the lead rank's own files, which is
//! what the data means.
use std::collections::BTreeMap;
use std::path::PathBuf;

use benchlake_formats::counts::meta::{self, Location};
use benchlake_formats::counts::ranklist::{CallList, Span, coalesce};
use benchlake_formats::counts::{FileKind, classify};

use super::CountsError;
use super::summary::CallMapping;

/// The location files of a run, ordered by (lead rank, communicator).
#[derive(Debug, Clone, Default)]
pub struct LocationIndex {
    entries: Vec<(u64, Location)>,
}

impl LocationIndex {
    /// Reads every location file among `files` (others are ignored).
    pub fn load(files: &[PathBuf]) -> Result<Self, CountsError> {
        let mut entries = Vec::new();
        for f in files {
            if let Some(FileKind::Location { lead, .. }) = classify(f) {
                for loc in meta::read_locations(f)? {
                    entries.push((lead, loc));
                }
            }
        }
        entries.sort_by_key(|(lead, l)| (*lead, l.comm_id));
        Ok(Self { entries })
    }

    /// No location data.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// World rank → host, over all location files (first seen wins).
    pub fn hosts(&self) -> BTreeMap<u64, String> {
        let mut m = BTreeMap::new();
        for (_, l) in &self.entries {
            for (w, h) in l.world_ranks.iter().zip(&l.hosts) {
                m.entry(*w).or_insert_with(|| h.clone());
            }
        }
        m
    }

    /// Splits `calls` (of a block of `comm_size` ranks led by `lead`) by the
    /// communicator each call ran on.
    pub fn mappings(
        &self,
        lead: u64,
        comm_size: u64,
        calls: &CallList,
        reference: bool,
    ) -> Vec<CallMapping> {
        let mut remaining = calls.0.clone();
        let mut out = Vec::new();
        // Highest priority first: in reference mode the last (lead, comm) wins.
        for (l, loc) in self.entries.iter().rev() {
            if remaining.is_empty() {
                break;
            }
            if (!reference && *l != lead) || loc.world_ranks.len() as u64 != comm_size {
                continue;
            }
            let inter = intersect(&remaining, &loc.calls.0);
            if inter.is_empty() {
                continue;
            }
            remaining = subtract(&remaining, &inter);
            out.push(CallMapping {
                calls: CallList(inter),
                world_ranks: Some(loc.world_ranks.clone()),
            });
        }
        if !remaining.is_empty() {
            out.push(CallMapping {
                calls: CallList(remaining),
                world_ranks: None,
            });
        }
        out
    }
}

/// Intersection of two span lists (result coalesced).
pub fn intersect(a: &[Span], b: &[Span]) -> Vec<Span> {
    let a = coalesce(a.to_vec());
    let b = coalesce(b.to_vec());
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while let (Some(&(a0, a1)), Some(&(b0, b1))) = (a.get(i), b.get(j)) {
        let lo = a0.max(b0);
        let hi = a1.min(b1);
        if lo <= hi {
            out.push((lo, hi));
        }
        if a1 < b1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// `a` without the integers of `b`.
pub fn subtract(a: &[Span], b: &[Span]) -> Vec<Span> {
    let b = coalesce(b.to_vec());
    let mut out = Vec::new();
    for &(mut lo, hi) in &coalesce(a.to_vec()) {
        let mut alive = true;
        for &(b0, b1) in &b {
            if b1 < lo || b0 > hi {
                continue;
            }
            if b0 > lo {
                out.push((lo, b0 - 1));
            }
            if b1 >= hi {
                alive = false;
                break;
            }
            lo = b1 + 1;
        }
        if alive {
            out.push((lo, hi));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_arithmetic() {
        assert_eq!(
            intersect(&[(0, 10), (15, 15)], &[(5, 20)]),
            vec![(5, 10), (15, 15)]
        );
        assert_eq!(
            subtract(&[(0, 10)], &[(3, 4), (8, 12)]),
            vec![(0, 2), (5, 7)]
        );
        assert_eq!(subtract(&[(0, 3)], &[(0, 3)]), Vec::<Span>::new());
        assert_eq!(subtract(&[(2, 5)], &[(0, 1)]), vec![(2, 5)]);
    }
}
