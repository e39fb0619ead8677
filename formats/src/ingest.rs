//! The ingest entry points: an ingest kind (`linktest`, `counts`, `ior`, ...)
//! read through its descriptor's reader ([`crate::kinds`]).
use std::path::PathBuf;

use benchlake_core::lake::TableOutput;

use crate::error::{FormatError, Result};
use crate::kinds as registry;

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
    /// The run's date partition, `YYYY-MM-DD` (the files' `date` column).
    pub date: String,
}

/// The tables ingest kind `kind` writes; `None` for an unknown kind.
pub fn tables(kind: &str) -> Option<&'static [&'static str]> {
    registry::get(kind).map(|k| k.tables)
}

/// The names and descriptions of the known ingest kinds.
pub fn kinds() -> Vec<(&'static str, &'static str)> {
    registry::KINDS.iter().map(|k| (k.name, k.reads)).collect()
}

/// [`ingest`] with every table encoded as a Parquet file (what
/// `benchlake ingest` writes). A kind with an encoding reader (`linktest`
/// streams its pair times into the file a row group at a time) uses it;
/// other kinds encode [`ingest`]'s batches.
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
    if let Some(encode) = descriptor(kind)?.encoded_reader {
        return encode(inputs, ctx, spill_dir);
    }
    ingest(kind, inputs, ctx)?
        .iter()
        .map(|t| benchlake_core::lake::EncodedTable::encode(t, &ctx.date).map_err(Into::into))
        .collect()
}

/// Reads `inputs` as `kind` and returns the tables they yield.
pub fn ingest(kind: &str, inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    (descriptor(kind)?.reader)(inputs, ctx)
}

/// The descriptor of `kind`, or the error naming the known kinds.
pub fn descriptor(kind: &str) -> Result<&'static registry::KindDescriptor> {
    registry::get(kind).ok_or_else(|| FormatError::UnknownKind(kind.to_string(), registry::known()))
}
