//! The alltoallv profiler's outputs (gvallee/collective_profiler, format version
//! 9): readers for every file kind and the `counts` ingest that turns a profiler
//! output directory into the `alltoallv_*` tables.
//!
//! - [`ranklist`]: the `0-3, 5` list notation;
//! - [`compact`]: streaming reader of `send-counters…`/`recv-counters…`;
//! - [`percall`]: non-compact `counts.rank<L>_call<C>.md` and their grouping into
//!   compact-equivalent blocks;
//! - [`timings`]: execution-time and late-arrival files;
//! - [`meta`]: location, backtrace and comm-data files;
//! - [`files`]: file-name classification and directory expansion;
//! - [`tables`]: the ingest proper.
pub mod compact;
pub mod files;
pub mod lines;
pub mod meta;
pub mod percall;
pub mod ranklist;
pub mod tables;
pub mod timings;

pub use files::{FileKind, classify, expand_dir};
pub use tables::ingest;
