//! LinkTest result files: the payload LinkTest stores in a SION container.
//!
//! Two payload layouts exist and both decode into one model, [`LinkTestRun`]:
//! - [`v1`]: LinkTest 1.x ("LKTST", every rank carries a small header; rank 0
//!   adds statistics and the serial retests);
//! - [`v2`]: LinkTest 2.1.17 ("LinkTest" file header in rank 0's stream, per-rank
//!   hostname and core id, N−1 timings per rank and permutation, "END_BLOCK").
//!   [`v2`] also writes this layout (netprobe and the round-trip tests use it).
//!
//! [`tables`] turns a run into the five `linktest_*` catalog tables and registers
//! the `linktest` ingest kind; [`inspect`] describes a file for `benchlake inspect`.
//! Every decision where the 2.1.17 document is ambiguous is written down in
//! `docs/linktest.md`.
use std::path::Path;

use serde::Serialize;

use crate::error::{FormatError, Position, Result};
use crate::sion::{ByteOrder, SionSet, TaskStream};

mod bulk;
pub mod inspect;
mod stream;
pub mod synth;
pub mod tables;
pub mod v1;
pub mod v2;

pub use inspect::{Inspection, inspect_file, inspect_set};
pub use stream::{ingest_linktest_encoded, ingest_linktest_encoded_in};
pub use tables::{ingest_linktest, into_run_tables, run_tables};

/// Which payload layout a file has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PayloadFormat {
    /// LinkTest 1.x, "LKTST".
    V1,
    /// LinkTest 2.1.17, "LinkTest".
    V2,
}

/// Test options recorded as flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Flags {
    /// All-to-all phase run.
    pub all_to_all: bool,
    /// Bidirectional tests (2.x).
    pub bidirectional: bool,
    /// Unidirectional tests (2.x).
    pub unidirectional: bool,
    /// Bisection test (2.x).
    pub bisection: bool,
    /// Step order randomized (2.x).
    pub randomize_steps: bool,
    /// Serial test mode.
    pub serial: bool,
    /// No SION file was written (2.x; always false in a file).
    pub no_sion_file: bool,
    /// SION file written in parallel (2.x).
    pub parallel_sion: bool,
    /// Messages in GPU memory (2.x).
    pub gpu_memory: bool,
    /// Several message buffers (2.x).
    pub multi_buffer: bool,
    /// Randomized message buffers (2.x).
    pub randomize_buffers: bool,
    /// Buffers checked after each step (2.x).
    pub check_buffers: bool,
    /// Ranks mixed in random order (1.x `-M`).
    pub mix_ranks: bool,
}

/// One rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankInfo {
    /// Rank.
    pub rank: usize,
    /// Host it ran on.
    pub hostname: String,
    /// Core it was bound to (2.x).
    pub core_id: Option<i32>,
    /// Machine coordinates (1.x `mapping[4]`; `(rank,0,0,0)` on Linux).
    pub coords: Option<[i32; 4]>,
}

/// An all-to-all time of one rank.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AllToAllTime {
    /// Rank.
    pub rank: usize,
    /// Step (1.x records one time per step; 2.x one per rank).
    pub step: Option<i32>,
    /// Seconds.
    pub time_s: f64,
}

/// One of the slowest pairs and its serial retest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SlowLink {
    /// Initiating rank.
    pub from_rank: usize,
    /// Partner.
    pub to_rank: usize,
    /// Time in the main test (s).
    pub time_s: f64,
    /// Time in the serial retest (s).
    pub retest_time_s: Option<f64>,
}

/// The results of one rank permutation (1.x files have exactly one).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Permutation {
    /// Start time string as stored (2.x).
    pub start_time: Option<String>,
    /// End time string as stored (2.x).
    pub end_time: Option<String>,
    /// Minimum pair time (s).
    pub min_time_s: f64,
    /// Average pair time (s).
    pub avg_time_s: f64,
    /// Maximum pair time (s).
    pub max_time_s: f64,
    /// All-to-all (min, avg, max), when run.
    pub a2a: Option<[f64; 3]>,
    /// `times[from * n + to]`: time per message of the ping-pong `from` initiated
    /// toward `to`; 0 on the diagonal and for pairs not measured.
    #[serde(skip)]
    pub times: Vec<f64>,
    /// `steps[from * n + to]`: step in which the pair was measured; 0 on the diagonal.
    #[serde(skip)]
    pub steps: Vec<i32>,
    /// All-to-all times.
    #[serde(skip)]
    pub alltoall: Vec<AllToAllTime>,
    /// Slowest pairs with their retests.
    pub slow_links: Vec<SlowLink>,
}

/// Raw statistics block of a 1.x file (rank 0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct V1Stats {
    /// `statdata[10]`: nmsg, msglen, alltoall, 1, serial, mix, 0, 0, 0, VERSION.
    pub statdata: [i32; 10],
    /// `stat[10]`: min, max, avg, a2a min, a2a max, a2a avg, 0….
    pub stat: [f64; 10],
}

/// A decoded LinkTest file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkTestRun {
    /// Payload layout.
    pub format: PayloadFormat,
    /// LinkTest major, minor, patch.
    pub version: [u32; 3],
    /// Git hash (2.x).
    pub git_hash: Option<String>,
    /// Transport mode ("MPI" for 1.x).
    pub mode: String,
    /// Ranks.
    pub num_tasks: usize,
    /// Messages per measurement.
    pub num_messages: u64,
    /// Bytes per message.
    pub message_size: u64,
    /// Warm-up messages (2.x).
    pub num_warmup_messages: Option<u64>,
    /// Serial retests of the slowest pairs (2.x header; 1.x: entries used).
    pub num_serial_retests: u64,
    /// Buffers (2.x).
    pub num_multi_buffers: Option<u64>,
    /// Buffer randomization seed (2.x).
    pub buffer_seed: Option<u64>,
    /// Randomized-task iterations (2.x header; 1.x: 1 with `-M`, else 0).
    pub num_randomized_tasks: Option<u64>,
    /// Task randomization seed (2.x).
    pub task_seed: Option<u64>,
    /// Memory allocator type code (2.x).
    pub memory_allocator: Option<u8>,
    /// Option flags.
    pub flags: Flags,
    /// 1.x raw statistics.
    pub v1_stats: Option<V1Stats>,
    /// Per-rank host information.
    pub ranks: Vec<RankInfo>,
    /// Results per permutation.
    pub permutations: Vec<Permutation>,
}

impl LinkTestRun {
    /// "1.2p1" for 1.x, "2.1.17" for 2.x (the projects' own spellings).
    pub fn version_string(&self) -> String {
        let [a, b, c] = self.version;
        match self.format {
            PayloadFormat::V1 => format!("{a}.{b}p{c}"),
            PayloadFormat::V2 => format!("{a}.{b}.{c}"),
        }
    }

    /// Minimum, average, maximum pair time over all permutations (the average of
    /// the permutations' averages: each has the same number of pairs).
    pub fn summary(&self) -> (f64, f64, f64) {
        summarize(
            self.permutations
                .iter()
                .map(|p| [p.min_time_s, p.avg_time_s, p.max_time_s]),
        )
    }

    /// All-to-all minimum, average, maximum over all permutations.
    pub fn a2a_summary(&self) -> Option<(f64, f64, f64)> {
        if self.permutations.iter().any(|p| p.a2a.is_none()) || self.permutations.is_empty() {
            return None;
        }
        Some(summarize(self.permutations.iter().filter_map(|p| p.a2a)))
    }
}

fn summarize(it: impl Iterator<Item = [f64; 3]>) -> (f64, f64, f64) {
    let (mut min, mut sum, mut max, mut n) = (f64::INFINITY, 0.0, f64::NEG_INFINITY, 0usize);
    for [a, b, c] in it {
        min = min.min(a);
        sum += b;
        max = max.max(c);
        n += 1;
    }
    if n == 0 {
        return (0.0, 0.0, 0.0);
    }
    (min, sum / n as f64, max)
}

/// Reads the LinkTest file set whose file 0 is `path`.
pub fn read_file(path: &Path) -> Result<LinkTestRun> {
    let set = SionSet::open(path)?;
    decode(&set)
}

/// Decodes the payload of an opened SION set, choosing the layout from rank 0's
/// first bytes.
pub fn decode(set: &SionSet) -> Result<LinkTestRun> {
    decode_with(set, None)
}

/// [`decode`], handing a 2.1.17 file's pair times to `sink` when it has one
/// permutation (see `v2::decode_with`; its matrices then stay empty).
pub(crate) fn decode_with(set: &SionSet, sink: Option<v2::RankSink<'_>>) -> Result<LinkTestRun> {
    let r0 = set.task(0).ok_or_else(|| {
        FormatError::malformed(set.path(), "ntasks", Position::Offset(24), "no rank 0")
    })?;
    let head = r0.contiguous();
    if head.starts_with(v2::ID) {
        v2::decode_with(set, sink)
    } else if head.starts_with(v1::ID) {
        v1::decode(set)
    } else {
        Err(FormatError::malformed(
            r0.path,
            "rank 0: LinkTest ID",
            Position::Offset(r0.file_offset(0)),
            format!(
                "expected \"LKTST\" or \"LinkTest\", found {:?}",
                String::from_utf8_lossy(head.get(..8.min(head.len())).unwrap_or_default())
            ),
        ))
    }
}

/// Byte order of the payload: LinkTest copies native values, and the writer's
/// native order is the order of the container metadata.
pub(crate) fn payload_order(set: &SionSet) -> ByteOrder {
    set.files()
        .first()
        .map(|f| f.header.byte_order)
        .unwrap_or(ByteOrder::Little)
}

/// Reads a task's payload field by field; errors name the rank, the field and
/// the file offset of the failing byte.
pub(crate) struct Cursor<'s, 'a> {
    data: &'s [u8],
    pos: usize,
    order: ByteOrder,
    stream: &'s TaskStream<'a>,
}

impl<'s, 'a> Cursor<'s, 'a> {
    pub(crate) fn new(data: &'s [u8], order: ByteOrder, stream: &'s TaskStream<'a>) -> Self {
        Self {
            data,
            pos: 0,
            order,
            stream,
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    pub(crate) fn err_at(&self, pos: usize, field: &str, msg: impl Into<String>) -> FormatError {
        FormatError::malformed(
            self.stream.path,
            format!("rank {}: {field}", self.stream.rank),
            Position::Offset(self.stream.file_offset(pos as u64)),
            msg,
        )
    }

    pub(crate) fn take(&mut self, n: usize, field: &str) -> Result<&'s [u8]> {
        let s = self
            .pos
            .checked_add(n)
            .and_then(|e| self.data.get(self.pos..e))
            .ok_or_else(|| {
                self.err_at(
                    self.pos,
                    field,
                    format!(
                        "needs {n} bytes, the rank's data has {} left (truncated?)",
                        self.remaining()
                    ),
                )
            })?;
        self.pos += n;
        Ok(s)
    }

    fn arr<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        if self.order == ByteOrder::Big {
            a.reverse();
        }
        Ok(a)
    }

    pub(crate) fn u8(&mut self, field: &str) -> Result<u8> {
        Ok(self.arr::<1>(field)?[0])
    }
    pub(crate) fn i32(&mut self, field: &str) -> Result<i32> {
        Ok(i32::from_le_bytes(self.arr(field)?))
    }
    pub(crate) fn u32(&mut self, field: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr(field)?))
    }
    pub(crate) fn u64(&mut self, field: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr(field)?))
    }
    pub(crate) fn f64(&mut self, field: &str) -> Result<f64> {
        Ok(f64::from_le_bytes(self.arr(field)?))
    }

    /// `out.len()` doubles into `out`.
    pub(crate) fn f64s(&mut self, out: &mut [f64], field: &str) -> Result<()> {
        let order = self.order;
        let b = self.take(out.len() * 8, field)?;
        for (o, c) in out.iter_mut().zip(b.chunks_exact(8)) {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            *o = match order {
                ByteOrder::Little => f64::from_le_bytes(a),
                ByteOrder::Big => f64::from_be_bytes(a),
            };
        }
        Ok(())
    }

    /// `n` i32 values.
    pub(crate) fn i32s(&mut self, out: &mut [i32], field: &str) -> Result<()> {
        let order = self.order;
        let b = self.take(out.len() * 4, field)?;
        for (o, c) in out.iter_mut().zip(b.chunks_exact(4)) {
            let mut a = [0u8; 4];
            a.copy_from_slice(c);
            *o = match order {
                ByteOrder::Little => i32::from_le_bytes(a),
                ByteOrder::Big => i32::from_be_bytes(a),
            };
        }
        Ok(())
    }

    /// A NUL-padded string field of `n` bytes (text up to the first NUL).
    pub(crate) fn cstr(&mut self, n: usize, field: &str) -> Result<String> {
        let b = self.take(n, field)?;
        let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
        Ok(String::from_utf8_lossy(b.get(..end).unwrap_or_default()).into_owned())
    }

    /// Fails unless the whole stream was consumed.
    pub(crate) fn finish(&self, what: &str) -> Result<()> {
        if self.remaining() != 0 {
            return Err(self.err_at(
                self.pos,
                what,
                format!(
                    "{} unexpected bytes after the end of the payload",
                    self.remaining()
                ),
            ));
        }
        Ok(())
    }
}
