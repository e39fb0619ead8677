//! The ingest registry: maps an ingest kind (`linktest`, `counts`, `ior`, ...) to
//! the reader that turns its input files into catalog tables.
use std::path::PathBuf;

use benchlake_core::lake::TableOutput;

use crate::error::{FormatError, Result};

/// One input file and the `source` value its rows carry.
#[derive(Debug, Clone)]
pub struct InputFile {
    /// Where the file is on local disk.
    pub path: PathBuf,
    /// The `source` column (raw object key, or the file name given by the user).
    pub source: String,
}

impl InputFile {
    /// An input whose source is its path as given.
    pub fn from_path(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let source = path.display().to_string();
        Self { path, source }
    }
}

/// What every ingest needs besides the files.
#[derive(Debug, Clone)]
pub struct IngestContext {
    /// The run the rows belong to (`run_id` column).
    pub run_id: String,
}

type IngestFn = fn(&[InputFile], &IngestContext) -> Result<Vec<TableOutput>>;

/// Registered kinds: (name, what it reads, reader).
const KINDS: &[(&str, &str, IngestFn)] = &[
    (
        "counts",
        "alltoallv profiler outputs: compact/per-call count files, timings, locations, backtraces",
        crate::counts::ingest,
    ),
    (
        "hostinfo",
        "node facts JSON written by `benchlake probe host` → node_facts",
        crate::hostinfo::ingest,
    ),
    (
        "ior",
        "IOR JSON summaries and per-rank CSVs",
        crate::io::ingest_ior,
    ),
    (
        "mdtest",
        "mdtest text output and per-rank CSVs",
        crate::io::ingest_mdtest,
    ),
    (
        "pio",
        "pio result files (benchlake-pio/1)",
        crate::io::ingest_pio,
    ),
    (
        "dimemas",
        "Dimemas .dim MPI traces -> mpi_trace_records",
        crate::dimemas::ingest::ingest,
    ),
    (
        "bandela",
        "Bandela text traces (one file per rank) -> mpi_trace_records",
        crate::bandela::ingest::ingest,
    ),
    (
        "linktest",
        "LinkTest SION result files (1.x and 2.1.17; netprobe)",
        crate::linktest::ingest_linktest,
    ),
];

/// The names and descriptions of the known ingest kinds.
pub fn kinds() -> Vec<(&'static str, &'static str)> {
    KINDS.iter().map(|(n, d, _)| (*n, *d)).collect()
}

/// [`ingest`] with every table encoded as a Parquet file (what
/// `benchlake ingest` writes). `linktest` streams its pair times into the file
/// a row group at a time (`linktest::ingest_linktest_encoded`); other kinds
/// encode [`ingest`]'s batches.
pub fn ingest_encoded(
    kind: &str,
    inputs: &[InputFile],
    ctx: &IngestContext,
) -> Result<Vec<benchlake_core::lake::EncodedTable>> {
    ingest_encoded_in(kind, inputs, ctx, None)
}

/// [`ingest_encoded`], writing the large tables (from
/// [`benchlake_core::lake::BULK_ROWS`] rows; `linktest_timings`) to temporary
/// files in `spill_dir` instead of memory when it is given: a directory on
/// the local lake's file system, so [`benchlake_core::lake::Lake::write_final_encoded`]
/// renames them into place. Nothing is left there when the ingest fails.
pub fn ingest_encoded_in(
    kind: &str,
    inputs: &[InputFile],
    ctx: &IngestContext,
    spill_dir: Option<&std::path::Path>,
) -> Result<Vec<benchlake_core::lake::EncodedTable>> {
    if kind == "linktest" {
        return crate::linktest::ingest_linktest_encoded_in(inputs, ctx, spill_dir);
    }
    ingest(kind, inputs, ctx)?
        .iter()
        .map(|t| benchlake_core::lake::EncodedTable::encode(t).map_err(Into::into))
        .collect()
}

/// Reads `inputs` as `kind` and returns the tables they yield.
pub fn ingest(kind: &str, inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    match KINDS.iter().find(|(n, _, _)| *n == kind) {
        Some((_, _, f)) => f(inputs, ctx),
        None => Err(FormatError::UnknownKind(
            kind.to_string(),
            KINDS.iter().map(|k| k.0).collect::<Vec<_>>().join(", "),
        )),
    }
}
