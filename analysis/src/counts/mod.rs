//! alltoallv count analysis: per-call send/receive patterns, grouping of calls
//! with equal patterns, the 1→N / N→1 / N→N summary classes, the statistics of
//! the Go `srcountsanalyzer`, and rank×rank / host×host heat maps of bytes.
//!
//! The work is split for fan-out: [`plan`] cuts a profiler output into
//! [`PartSpec`]s (one per lead rank, or per range of blocks — i.e. of calls —
//! of a big file pair, or per range of per-call files), [`analyze_part`] turns
//! one into a [`PartResult`] and [`merge`] combines any set of part results into
//! exactly the [`Analysis`] of the whole. [`analyze_dir`] does it all locally and
//! writes the reports and tables.
//!
//! Modules: [`summary`] (one block's figures), [`locations`] (comm → world ranks
//! and hosts), [`fanout`] (plan/part/merge), [`report`] (the Go tools' text
//! files), [`tables`] (Arrow tables).
pub mod fanout;
pub mod locations;
pub mod report;
pub mod summary;
pub mod tables;

use std::collections::BTreeMap;
use std::path::PathBuf;

use benchlake_formats::counts::ranklist::CallList;
use serde::{Deserialize, Serialize};

pub use fanout::{
    PartInput, PartResult, PartSpec, analyze_dir, analyze_files_threads, analyze_input_dir,
    analyze_part, analyze_part_threads, merge, plan,
};
pub use summary::{BlockSummary, Direction, SideStats};

/// The environment variable giving the threads of an offline analysis
/// (`benchlake analyze counts --threads` reads it too).
pub const THREADS_ENV: &str = "BENCHLAKE_COUNTS_THREADS";

/// The threads an offline analysis uses when nobody says:
/// `BENCHLAKE_COUNTS_THREADS` when it holds a positive number, else the cores
/// available to the process.
pub fn default_threads() -> usize {
    benchlake_core::threads::from_env(THREADS_ENV)
}

/// Errors of the counts analysis.
#[derive(Debug, thiserror::Error)]
pub enum CountsError {
    /// A profiler file is malformed or unreadable.
    #[error(transparent)]
    Format(#[from] benchlake_formats::FormatError),
    /// Writing an output failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Building a table failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// A catalog error.
    #[error(transparent)]
    Core(#[from] benchlake_core::Error),
    /// The inputs are inconsistent (e.g. a send file without its recv file).
    #[error("{0}")]
    Input(String),
}

/// Analysis options (missing JSON fields take their defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Options {
    /// Messages with `count × datatype size <= size_threshold` bytes are small
    /// (the Go tools' `-size-threshold`, default 200).
    pub size_threshold: u64,
    /// Reproduce the Go tools' results, quirks included (default). When false:
    /// patterns cover every call (not only IDs below the header's `E-S+1`), the
    /// summary lists a pattern once per class, "min (excluding zero)" is the real
    /// smallest non-zero count, and heat maps map ranks with the lead rank's own
    /// location files. See docs/counts.md.
    pub reference_compat: bool,
    /// Compact file pairs larger than this (bytes, both files) are split into
    /// several parts at block boundaries; per-call files are grouped into parts
    /// of about this size.
    pub max_part_bytes: u64,
    /// Write the per-call heat-map text files (`alltoallv_heat-map.rank<L>-*.md`),
    /// which have one line per call and rank.
    pub call_heatmaps: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            size_threshold: 200,
            reference_compat: true,
            max_part_bytes: 256 << 20,
            call_heatmaps: true,
        }
    }
}

/// A communication pattern and the calls that follow it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pattern {
    /// Index in order of creation (first call).
    pub id: u64,
    /// peers → ranks ("ranks sent to peers other ranks").
    pub send: BTreeMap<u64, u64>,
    /// peers → ranks ("ranks recv'd from peers other ranks").
    pub recv: BTreeMap<u64, u64>,
    /// The calls.
    pub calls: CallList,
}

/// Summary class of a pattern (computed over the send map).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Class {
    /// `peers > 100 × ranks`.
    OneToN,
    /// `100 × peers < ranks`.
    NToOne,
    /// `0.9 × peers <= ranks <= 1.1 × peers`.
    NToN,
}

/// The statistics of one lead rank (the Go `stats-…` file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// The denominator the reference prints (`E-S+1` of the header).
    pub num_calls: u64,
    /// Calls actually loaded.
    pub loaded_calls: u64,
    /// Send datatype size → calls.
    pub send_datatypes: BTreeMap<u64, u64>,
    /// Recv datatype size → calls.
    pub recv_datatypes: BTreeMap<u64, u64>,
    /// Communicator size → calls.
    pub comm_sizes: BTreeMap<u64, u64>,
    /// Large send messages.
    pub large: u64,
    /// Small send messages.
    pub small: u64,
    /// Small, non-zero send messages.
    pub small_nonzero: u64,
    /// Zero send counts per call → calls.
    pub send_sparsity: BTreeMap<u64, u64>,
    /// Zero recv counts per call → calls.
    pub recv_sparsity: BTreeMap<u64, u64>,
    /// Send min → calls.
    pub send_min: BTreeMap<u64, u64>,
    /// Recv min → calls.
    pub recv_min: BTreeMap<u64, u64>,
    /// Send min excluding zero → calls (always {0: all} in reference mode).
    pub send_min_nonzero: BTreeMap<u64, u64>,
    /// Recv min excluding zero → calls.
    pub recv_min_nonzero: BTreeMap<u64, u64>,
    /// Send max → calls.
    pub send_max: BTreeMap<u64, u64>,
    /// Recv max → calls.
    pub recv_max: BTreeMap<u64, u64>,
}

/// Everything computed for one lead rank.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeadAnalysis {
    /// Profiler job (0 for per-call input).
    pub job: u64,
    /// Lead rank.
    pub lead: u64,
    /// Where the counts came from (file names).
    pub source: String,
    /// Patterns in creation order.
    pub patterns: Vec<Pattern>,
    /// Pattern ids per class, with the reference's repetitions (one per
    /// qualifying send-map entry) in reference mode.
    pub classes: BTreeMap<Class, Vec<u64>>,
    /// Statistics.
    pub stats: Stats,
    /// The block summaries (sorted by first call).
    pub blocks: Vec<BlockSummary>,
    /// World rank → bytes over all calls, per direction.
    pub rank_bytes: BTreeMap<Direction, BTreeMap<u64, u64>>,
    /// Rank×rank bytes `(rank, peer, bytes)` per direction, sorted.
    pub heat: BTreeMap<Direction, Vec<(u64, u64, u64)>>,
    /// Problems that did not stop the analysis.
    pub warnings: Vec<String>,
}

/// The whole analysis.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Analysis {
    /// Per lead rank, sorted by (job, lead).
    pub leads: Vec<LeadAnalysis>,
    /// World rank → host (from location files).
    pub hosts: BTreeMap<u64, String>,
    /// The options used.
    pub options: Options,
}
