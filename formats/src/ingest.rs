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

/// One ingest kind: its name, what it reads, its reader and the tables it
/// writes (the coordinator refuses an ingest job's commit of any other).
struct Kind {
    name: &'static str,
    reads: &'static str,
    reader: IngestFn,
    tables: &'static [&'static str],
}

/// The I/O tables; `io_node_summary` is derived from `io_task_times` by the
/// ingest job (`benchlake_analysis::summaries`), not by the reader.
const IO_TABLES: &[&str] = &[
    "io_results",
    "io_task_times",
    "io_summary",
    "io_node_summary",
];

/// Registered kinds.
const KINDS: &[Kind] = &[
    Kind {
        name: "counts",
        reads: "alltoallv profiler outputs: compact/per-call count files, timings, locations, backtraces",
        reader: crate::counts::ingest,
        tables: &[
            "alltoallv_calls",
            "alltoallv_count_rows",
            "alltoallv_call_times",
            "alltoallv_locations",
            "alltoallv_comms",
            "alltoallv_backtraces",
        ],
    },
    Kind {
        name: "hostinfo",
        reads: "node facts JSON written by `benchlake probe host` → node_facts",
        reader: crate::hostinfo::ingest,
        tables: &["node_facts"],
    },
    Kind {
        name: "ior",
        reads: "IOR JSON summaries and per-rank CSVs",
        reader: crate::io::ingest_ior,
        tables: IO_TABLES,
    },
    Kind {
        name: "mdtest",
        reads: "mdtest text output and per-rank CSVs",
        reader: crate::io::ingest_mdtest,
        tables: &["mdtest_results", "mdtest_summary"],
    },
    Kind {
        name: "pio",
        reads: "pio result files (benchlake-pio/1)",
        reader: crate::io::ingest_pio,
        tables: IO_TABLES,
    },
    Kind {
        name: "dimemas",
        reads: "Dimemas .dim MPI traces -> mpi_trace_records",
        reader: crate::dimemas::ingest::ingest,
        tables: &["mpi_trace_records"],
    },
    Kind {
        name: "bandela",
        reads: "Bandela text traces (one file per rank) -> mpi_trace_records",
        reader: crate::bandela::ingest::ingest,
        // The rank map beside the rank files (worker: traced runs).
        tables: &["mpi_trace_records", "mpi_trace_ranks"],
    },
    Kind {
        name: "linktest",
        reads: "LinkTest SION result files (1.x and 2.1.17; netprobe)",
        reader: crate::linktest::ingest_linktest,
        tables: &[
            "linktest_runs",
            "linktest_ranks",
            "linktest_timings",
            "linktest_alltoall",
            "linktest_slow_links",
            // Derived from the pairs by the ingest job
            // (`benchlake_analysis::summaries`), not by the reader.
            "linktest_host_summary",
        ],
    },
];

/// The tables ingest kind `kind` writes; `None` for an unknown kind.
pub fn tables(kind: &str) -> Option<&'static [&'static str]> {
    KINDS.iter().find(|k| k.name == kind).map(|k| k.tables)
}

/// The names and descriptions of the known ingest kinds.
pub fn kinds() -> Vec<(&'static str, &'static str)> {
    KINDS.iter().map(|k| (k.name, k.reads)).collect()
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
    match KINDS.iter().find(|k| k.name == kind) {
        Some(k) => (k.reader)(inputs, ctx),
        None => Err(FormatError::UnknownKind(
            kind.to_string(),
            KINDS.iter().map(|k| k.name).collect::<Vec<_>>().join(", "),
        )),
    }
}
