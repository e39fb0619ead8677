//! Where each client's transfers land in the file(s), for the four patterns of
//! the consortium proposal. Pure and deterministic: every process computes the
//! same layout from the configuration, so a reader can find (and verify) the
//! data another client wrote without any communication.
//!
//! With `n` clients per file (n for a shared file, 1 per file for
//! file-per-process), block size B, transfer size T, padding P and header H:
//! - stride S = n·B + P (the segment plus its padding);
//! - segment s starts at H + s·S;
//! - SEGMENTED / STRIDED: client c's block in segment s starts at c·B within the
//!   segment, transfer j at j·T within the block;
//! - RANDOM / GENERAL: each block still has B/T transfers, but each transfer's
//!   size is drawn in [min_transfer, T] from a generator keyed by (seed, segment,
//!   client, j); blocks are packed in client order inside the segment, so block
//!   sizes vary and the rest of the nominal segment becomes extra padding.
//!   GENERAL additionally has H > 0, which skews every block's alignment.
use std::path::PathBuf;

use crate::params::{Config, Pattern};

/// One I/O call: file offset and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    pub offset: u64,
    pub len: u64,
}

/// A client's precomputed block starts (see [`Layout::plan`]).
#[derive(Debug, Clone)]
pub struct Plan {
    client: u64,
    slot: u64,
    starts: Option<Vec<u64>>,
}

/// The layout of a run.
#[derive(Debug, Clone)]
pub struct Layout {
    pattern: Pattern,
    /// Clients sharing one file (n, or 1 for file-per-process).
    per_file: u64,
    clients: u64,
    file_per_proc: bool,
    filename: PathBuf,
    block: u64,
    transfer: u64,
    min_transfer: u64,
    segments: u64,
    header: u64,
    stride: u64,
    seed: u64,
}

/// SplitMix64: a small, well-mixed generator; the same on every process.
pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl Layout {
    /// The layout of `cfg` with `clients` processes. Sizes are checked by
    /// `Config::validate`; arithmetic saturates so absurd values give absurd
    /// (not wrapped) offsets, which the file system then rejects.
    pub fn new(cfg: &Config, clients: u32) -> Layout {
        let clients = u64::from(clients.max(1));
        let per_file = if cfg.file_per_proc { 1 } else { clients };
        let padding = if cfg.pattern == Pattern::Segmented {
            0
        } else {
            cfg.padding
        };
        Layout {
            pattern: cfg.pattern,
            per_file,
            clients,
            file_per_proc: cfg.file_per_proc,
            filename: cfg.filename.clone(),
            block: cfg.block_size,
            transfer: cfg.transfer_size,
            min_transfer: if cfg.pattern.random_sizes() {
                cfg.min_transfer_size
            } else {
                cfg.transfer_size
            },
            segments: cfg.segments,
            header: cfg.header_bytes,
            // An explicit stride replaces padding; `check` refuses one shorter
            // than the segment.
            stride: cfg.stride.unwrap_or_else(|| {
                per_file
                    .saturating_mul(cfg.block_size)
                    .saturating_add(padding)
            }),
            seed: cfg.seed,
        }
    }

    /// Checks what depends on the number of clients: an explicit stride must
    /// hold a whole segment.
    pub fn check(&self) -> Result<(), String> {
        let segment = self.per_file.saturating_mul(self.block);
        if self.stride < segment {
            return Err(format!(
                "stride {} is shorter than the segment ({} clients × block_size {} = {segment})",
                self.stride, self.per_file, self.block
            ));
        }
        Ok(())
    }

    /// Distance between segment starts.
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// Transfers per block.
    pub fn transfers_per_block(&self) -> u64 {
        self.block / self.transfer.max(1)
    }

    /// The file client `c` writes (and whose data a reader of `c` reads).
    pub fn file_of(&self, c: u32) -> PathBuf {
        if self.file_per_proc {
            let mut s = self.filename.clone().into_os_string();
            s.push(format!(".{c:08}"));
            PathBuf::from(s)
        } else {
            self.filename.clone()
        }
    }

    /// Every distinct file of the run.
    pub fn files(&self) -> Vec<PathBuf> {
        if self.file_per_proc {
            (0..self.clients as u32).map(|c| self.file_of(c)).collect()
        } else {
            vec![self.filename.clone()]
        }
    }

    /// Size of transfer j of client c in segment s.
    fn size(&self, s: u64, c: u64, j: u64) -> u64 {
        if self.pattern.random_sizes() {
            let span = self.transfer - self.min_transfer + 1;
            let h =
                splitmix(self.seed ^ splitmix(s ^ splitmix(c ^ splitmix(j.wrapping_add(0x5EED)))));
            self.min_transfer + h % span
        } else {
            self.transfer
        }
    }

    /// Length of client c's block in segment s.
    pub fn block_len(&self, s: u64, c: u64) -> u64 {
        if self.pattern.random_sizes() {
            (0..self.transfers_per_block())
                .map(|j| self.size(s, c, j))
                .sum()
        } else {
            self.block
        }
    }

    /// Where client `c`'s block starts in each segment. Closed form for the
    /// fixed-size patterns; for random sizes the blocks of the clients before
    /// `c` are summed once here, so callers can do it before timing starts.
    pub fn plan(&self, c: u32) -> Plan {
        let c = u64::from(c);
        let slot = if self.file_per_proc { 0 } else { c };
        let starts = self.pattern.random_sizes().then(|| {
            (0..self.segments)
                .map(|s| {
                    let seg_start = self.header.saturating_add(s.saturating_mul(self.stride));
                    // Blocks of the clients before this one, packed; in file-per-
                    // process there are none (the file holds one client).
                    let before: u64 = (0..slot).map(|k| self.block_len(s, k)).sum();
                    seg_start.saturating_add(before)
                })
                .collect()
        });
        Plan {
            client: c,
            slot,
            starts,
        }
    }

    /// Calls `f` with each transfer of a planned client, in order.
    pub fn for_each_planned<E>(
        &self,
        plan: &Plan,
        mut f: impl FnMut(Transfer) -> Result<(), E>,
    ) -> Result<(), E> {
        let c = plan.client;
        for s in 0..self.segments {
            let block_start = match &plan.starts {
                Some(v) => v.get(s as usize).copied().unwrap_or(u64::MAX),
                None => self
                    .header
                    .saturating_add(s.saturating_mul(self.stride))
                    .saturating_add(plan.slot.saturating_mul(self.block)),
            };
            let mut off = block_start;
            for j in 0..self.transfers_per_block() {
                let len = self.size(s, c, j);
                f(Transfer { offset: off, len })?;
                off = off.saturating_add(len);
            }
        }
        Ok(())
    }

    /// Calls `f` with each transfer of client `c`, in order.
    pub fn for_each_transfer<E>(
        &self,
        c: u32,
        f: impl FnMut(Transfer) -> Result<(), E>,
    ) -> Result<(), E> {
        self.for_each_planned(&self.plan(c), f)
    }

    /// Bytes client `c` moves in one phase.
    pub fn bytes_of(&self, c: u32) -> u64 {
        let mut n = 0u64;
        let _ = self.for_each_transfer::<()>(c, |t| {
            n = n.saturating_add(t.len);
            Ok(())
        });
        n
    }

    /// Expected size of a file after the write phase: the end of its last byte,
    /// i.e. the end of the last client's block in the last segment (blocks are
    /// contiguous or packed). Padding after the last segment is not written.
    pub fn file_size(&self, c: u32) -> u64 {
        let last = self.segments.saturating_sub(1);
        let seg_start = self.header.saturating_add(last.saturating_mul(self.stride));
        let blocks: u64 = if self.file_per_proc {
            self.block_len(last, u64::from(c))
        } else {
            (0..self.clients).map(|k| self.block_len(last, k)).sum()
        };
        seg_start.saturating_add(blocks)
    }

    /// Whether every offset and length is a multiple of `align` (O_DIRECT).
    pub fn aligned(&self, align: u64) -> bool {
        if self.pattern.random_sizes() && self.min_transfer != self.transfer {
            return false;
        }
        self.header.is_multiple_of(align)
            && self.transfer.is_multiple_of(align)
            && self.block.is_multiple_of(align)
            && self.stride.is_multiple_of(align)
    }

    /// Number of clients.
    pub fn clients(&self) -> u32 {
        self.clients as u32
    }

    /// Clients per file.
    pub fn per_file(&self) -> u64 {
        self.per_file
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{parse_cli, resolve};

    fn cfg(args: &[&str]) -> Config {
        let a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        resolve(&parse_cli(&a).unwrap(), |_| None).unwrap()
    }

    fn all(l: &Layout, c: u32) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        l.for_each_transfer::<()>(c, |t| {
            v.push((t.offset, t.len));
            Ok(())
        })
        .unwrap();
        v
    }

    #[test]
    fn segmented_client_c_at_c_times_x() {
        let l = Layout::new(&cfg(&["--block_size=8", "--transfer_size=4"]), 3);
        assert_eq!(all(&l, 0), [(0, 4), (4, 4)]);
        assert_eq!(all(&l, 2), [(16, 4), (20, 4)]);
        assert_eq!(l.file_size(0), 24);
    }

    #[test]
    fn strided_repeats_segment_with_padding_and_header() {
        let l = Layout::new(
            &cfg(&[
                "--pattern=strided",
                "--block_size=8",
                "--transfer_size=4",
                "--segments=3",
                "--padding=3",
                "--header_bytes=5",
            ]),
            2,
        );
        assert_eq!(l.stride(), 19);
        assert_eq!(
            all(&l, 1),
            [(13, 4), (17, 4), (32, 4), (36, 4), (51, 4), (55, 4)]
        );
        assert_eq!(l.file_size(0), 59);
        assert_eq!(l.bytes_of(1), 24);
    }

    #[test]
    fn explicit_stride_replaces_padding() {
        let c = cfg(&[
            "--pattern=strided",
            "--block_size=16",
            "--transfer_size=8",
            "--segments=2",
            "--stride=100",
        ]);
        let l = Layout::new(&c, 2);
        assert_eq!(all(&l, 1), [(16, 8), (24, 8), (116, 8), (124, 8)]);
        assert_eq!(l.file_size(0), 132);
        assert!(l.check().is_ok());
        // Four clients need 64 bytes per segment: a stride of 40 is refused.
        let short = cfg(&[
            "--pattern=strided",
            "--block_size=16",
            "--transfer_size=8",
            "--segments=2",
            "--stride=40",
        ]);
        assert!(
            Layout::new(&short, 4)
                .check()
                .unwrap_err()
                .contains("shorter than the segment")
        );
        assert!(Layout::new(&short, 2).check().is_ok());
    }

    #[test]
    fn file_per_proc_has_one_client_per_file() {
        let l = Layout::new(
            &cfg(&[
                "--pattern=strided",
                "--block_size=8",
                "--transfer_size=8",
                "--segments=2",
                "--file_per_proc=1",
                "--filename=/x/f",
            ]),
            4,
        );
        assert_eq!(all(&l, 3), [(0, 8), (8, 8)]);
        assert_eq!(l.file_of(3), PathBuf::from("/x/f.00000003"));
        assert_eq!(l.files().len(), 4);
    }

    #[test]
    fn random_sizes_are_bounded_packed_and_disjoint() {
        let l = Layout::new(
            &cfg(&[
                "--pattern=general",
                "--block_size=64k",
                "--transfer_size=4k",
                "--min_transfer_size=100",
                "--segments=3",
                "--header_bytes=7",
            ]),
            4,
        );
        let mut spans: Vec<(u64, u64)> = (0..4).flat_map(|c| all(&l, c)).collect();
        assert!(spans.iter().all(|(_, n)| (100..=4096).contains(n)));
        let sizes: std::collections::HashSet<u64> = spans.iter().map(|s| s.1).collect();
        assert!(sizes.len() > 10, "sizes vary");
        spans.sort();
        assert_eq!(spans[0].0, 7);
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "overlap {:?}", w);
        }
        // Within a segment the blocks are packed: client 1 starts where client 0 ends.
        let c0 = all(&l, 0);
        let c1 = all(&l, 1);
        assert_eq!(c1[0].0, c0[15].0 + c0[15].1);
        assert_eq!(
            all(&l, 2)[16].0,
            7 + l.stride() + l.block_len(1, 0) + l.block_len(1, 1)
        );
        assert!(!l.aligned(4096));
    }

    proptest::proptest! {
        /// For any pattern, client count and sizes: transfers never overlap,
        /// sizes stay in bounds, and the file size is the end of the last byte.
        #[test]
        fn layouts_are_disjoint_and_bounded(
            pat in 0usize..4, n in 1u32..6, t in 1u64..64, k in 1u64..5, segs in 1u64..4,
            pad in 0u64..50, header in 0u64..20, min_frac in 1u64..=4, fpp in proptest::bool::ANY,
        ) {
            let pattern = ["segmented", "strided", "random", "general"][pat];
            let segs = if pat == 0 { 1 } else { segs };
            let pad = if pat == 0 { 0 } else { pad };
            let min_t = (t * min_frac / 4).max(1);
            let args = [
                format!("--pattern={pattern}"), format!("--transfer_size={t}"), format!("--block_size={}", t * k),
                format!("--segments={segs}"), format!("--padding={pad}"), format!("--header_bytes={header}"),
                format!("--min_transfer_size={min_t}"), format!("--file_per_proc={}", u8::from(fpp)),
            ];
            let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
            let l = Layout::new(&cfg(&a), n);
            let mut per_file: std::collections::HashMap<PathBuf, Vec<(u64, u64)>> = Default::default();
            for c in 0..n {
                let v = all(&l, c);
                proptest::prop_assert_eq!(v.len() as u64, k * segs);
                let lo = if pat >= 2 { min_t } else { t };
                for (o, len) in &v {
                    proptest::prop_assert!(*len >= lo && *len <= t);
                    proptest::prop_assert!(*o >= header);
                }
                per_file.entry(l.file_of(c)).or_default().extend(v);
            }
            for c in 0..n {
                let spans = per_file.get_mut(&l.file_of(c)).unwrap();
                spans.sort();
                for w in spans.windows(2) {
                    proptest::prop_assert!(w[0].0 + w[0].1 <= w[1].0);
                }
                let end = spans.iter().map(|(o, len)| o + len).max().unwrap();
                proptest::prop_assert_eq!(l.file_size(c), end);
            }
        }
    }
}
