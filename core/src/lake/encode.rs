//! Parquet encoding checked against the catalog: whole tables in memory
//! ([`encode_parquet`], [`EncodedTable`]) and row group by row group, spilling
//! to a local file past a size ([`ParquetEncoder`]), with the column chunk
//! writers of `chunks` for the big tables' shapes.
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::chunks::{
    ConstantCache, NumericScratch, constant_chunk, numeric_chunk, runs_chunk, runs_int_chunk,
    utf8_runs_chunk,
};
use super::*;

/// A table encoded as one Parquet object, ready to be put.
#[derive(Debug, Clone)]
pub struct EncodedTable {
    /// Catalog table name.
    pub table: String,
    /// Part suffix (see [`TableOutput::part`]).
    pub part: String,
    /// Rows in the file.
    pub rows: usize,
    /// The Parquet file (empty when it was spilled to a file).
    pub data: Bytes,
    /// The Parquet file, when it was written to a temporary file instead.
    pub spilled: Option<SpilledFile>,
}

impl EncodedTable {
    /// Encodes `o` with [`encode_parquet`], its rows of the date partition
    /// `date` (`YYYY-MM-DD`).
    pub fn encode(o: &TableOutput, date: &str) -> Result<Self> {
        Ok(Self {
            table: o.table.clone(),
            part: o.part.clone(),
            rows: o.rows(),
            data: encode_parquet(&o.table, date, &o.batches)?,
            spilled: None,
        })
    }
}

/// Whether the encoders end every file with the `date` column: yes since the
/// `year=/month=` layout, where no path names the date (docs/architecture.md,
/// "Compaction"). (Under the old `date=…/run_id=…/` paths a file column named
/// `date` broke pyarrow's hive datasets, which inferred the path's `date` as
/// a string.)
pub const FILES_CARRY_DATE: bool = true;

/// Checks the schema of a table file: the catalog's columns then `date`
/// ([`catalog::file_schema`]), as every file under the `year=/month=` layout
/// has.
pub fn check_file_schema(table: &str, schema: &SchemaRef) -> Result<()> {
    let n = schema.fields().len();
    match schema.fields().last() {
        Some(last) if last.name() == catalog::DATE_COLUMN => {
            if last.data_type() != &arrow::datatypes::DataType::Date32 || last.is_nullable() {
                return Err(Error::SchemaMismatch {
                    table: table.into(),
                    message: format!(
                        "column 'date: {}{}' where files have 'date: Date32' (not null)",
                        last.data_type(),
                        if last.is_nullable() { ", nullable" } else { "" }
                    ),
                });
            }
            let rows = Arc::new(arrow::datatypes::Schema::new(
                schema.fields()[..n - 1].to_vec(),
            ));
            check_schema(table, &rows)
        }
        _ => Err(Error::SchemaMismatch {
            table: table.into(),
            message: "no last column 'date: Date32': every table file carries the run's day \
                      (a file of the layout before 2026-12 is moved by `benchlake tables migrate`)"
                .into(),
        }),
    }
}

/// Checks that a batch matches the catalog schema of `table` (names, types, nullability).
pub fn check_schema(table: &str, schema: &SchemaRef) -> Result<()> {
    let want = catalog::schema(table)?;
    let got = schema;
    if want.fields().len() != got.fields().len() {
        return Err(Error::SchemaMismatch {
            table: table.into(),
            message: format!(
                "{} columns, catalog has {}",
                got.fields().len(),
                want.fields().len()
            ),
        });
    }
    for (w, g) in want.fields().iter().zip(got.fields()) {
        if w.name() != g.name() || w.data_type() != g.data_type() {
            return Err(Error::SchemaMismatch {
                table: table.into(),
                message: format!(
                    "column '{}: {}' where the catalog has '{}: {}'",
                    g.name(),
                    g.data_type(),
                    w.name(),
                    w.data_type()
                ),
            });
        }
        if g.is_nullable() && !w.is_nullable() {
            return Err(Error::SchemaMismatch {
                table: table.into(),
                message: format!("column '{}' is nullable, the catalog says not", g.name()),
            });
        }
    }
    Ok(())
}

/// Parquet writer settings of the lake: ZSTD(3), page statistics.
pub fn writer_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_max_row_group_row_count(Some(1 << 20))
        .build()
}

/// Rows per Parquet row group (every table).
pub const ROW_GROUP_ROWS: usize = 1 << 20;

/// Tables with at least this many rows are written with [`bulk_writer_properties`].
pub const BULK_ROWS: usize = 1 << 16;

/// Writer settings for large tables (millions of rows, e.g. `linktest_timings`):
/// the per-value dictionary hashing of arrow-rs dominated the encode time there,
/// so numeric columns skip dictionaries and use encodings that cost a few cycles
/// per value and compress well afterwards:
/// - floats: `BYTE_STREAM_SPLIT` (the bytes of equal significance together; times
///   stored as f32 widened to f64 leave whole byte streams of zeros) + ZSTD(1);
/// - integers: `DELTA_BINARY_PACKED` (rank and step columns are runs or
///   ascending sequences, which pack into a few bits per value) + ZSTD(1);
/// - strings keep dictionaries (ZSTD(3)); constant columns of any of these types
///   bypass the column encoder entirely (see `constant_chunk`).
///
/// All of these encodings are read by DuckDB, Spark and arrow-rs (checked in
/// docs/linktest.md).
pub fn bulk_writer_properties(schema: &arrow::datatypes::Schema) -> WriterProperties {
    use arrow::datatypes::DataType;
    use parquet::basic::Encoding;
    use parquet::schema::types::ColumnPath;
    let fast = Compression::ZSTD(ZstdLevel::try_new(1).unwrap_or_default());
    // Pages are cut by size (1 MiB) rather than every 20k rows, and values are
    // handed to the encoders 8k at a time: fewer page headers, statistics
    // merges and compressor calls per row.
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_data_page_row_count_limit(usize::MAX)
        .set_write_batch_size(8192);
    for f in schema.fields() {
        let col = ColumnPath::from(f.name().as_str());
        let encoding = match f.data_type() {
            DataType::Float64 | DataType::Float32 => Encoding::BYTE_STREAM_SPLIT,
            DataType::Int32 | DataType::Int64 => Encoding::DELTA_BINARY_PACKED,
            _ => continue,
        };
        b = b
            .set_column_dictionary_enabled(col.clone(), false)
            .set_column_encoding(col.clone(), encoding)
            .set_column_compression(col, fast);
    }
    b.build()
}

/// Encodes batches of `table` into one Parquet file (catalog schema enforced).
///
/// Row groups hold [`ROW_GROUP_ROWS`] rows whatever the batch sizes. Columns
/// that hold one non-null value throughout a row group (run_id, source, ...) are
/// written as a one-entry dictionary and a single run-length data page built
/// here, in constant time, instead of hashing every row; tables of
/// [`BULK_ROWS`] rows or more use [`bulk_writer_properties`], smaller ones
/// [`writer_properties`]. The files carry the Arrow schema, so arrow-rs reads
/// back the catalog types.
///
/// The file's last column is `date` ([`catalog::DATE_COLUMN`]): `date` on
/// every row.
pub fn encode_parquet(table: &str, date: &str, batches: &[RecordBatch]) -> Result<Bytes> {
    let schema = catalog::schema(table)?;
    for b in batches {
        check_schema(table, &b.schema())?;
    }
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let days = layout::date_days(date)?;
    encode_dated(
        table,
        schema,
        FILES_CARRY_DATE.then_some(days),
        batches,
        rows >= BULK_ROWS,
        chunks::PAGE_VALUES,
    )
}

/// [`encode_parquet`] for a schema already checked; `bulk` selects the large
/// table path (bulk properties, hand-written numeric chunks of `page_values`
/// values per page).
#[cfg(test)]
pub(super) fn encode_with_schema(
    table: &str,
    schema: SchemaRef,
    date_days: i32,
    batches: &[RecordBatch],
    bulk: bool,
    page_values: usize,
) -> Result<Bytes> {
    encode_dated(table, schema, Some(date_days), batches, bulk, page_values)
}

/// [`encode_with_schema`], with a `date` column of `date_days` last when
/// given.
fn encode_dated(
    table: &str,
    schema: SchemaRef,
    date_days: Option<i32>,
    batches: &[RecordBatch],
    bulk: bool,
    page_values: usize,
) -> Result<Bytes> {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let mut enc =
        ParquetEncoder::with_sink(table, schema, date_days, bulk, page_values, rows, None)?;

    // Cut the batches into row groups of ROW_GROUP_ROWS rows.
    let mut pending: Vec<RecordBatch> = Vec::new();
    let mut pending_rows = 0;
    for b in batches {
        let mut at = 0;
        while at < b.num_rows() {
            let take = (ROW_GROUP_ROWS - pending_rows).min(b.num_rows() - at);
            pending.push(b.slice(at, take));
            pending_rows += take;
            at += take;
            if pending_rows == ROW_GROUP_ROWS {
                enc.write_row_group(&std::mem::take(&mut pending))?;
                pending_rows = 0;
            }
        }
    }
    if pending_rows > 0 {
        enc.write_row_group(&pending)?;
    }
    enc.finish()
}

/// Where a [`ParquetEncoder`] writes: memory, or a temporary file (large
/// tables of a local lake: no buffer the size of the file, and the file is
/// renamed into place by [`Lake::write_final_encoded`]).
enum Sink {
    Memory(Vec<u8>),
    File(std::io::BufWriter<tempfile::NamedTempFile>),
}

/// Bytes a spilled table is written in. The Parquet writer hands over 8 KiB at
/// a time, and most of the kernel's cost of a buffered write is per call and per
/// page-cache folio, both fewer with larger writes: 53 MB took 30 ms of system
/// time in 8 KiB writes and 11 ms in 256 KiB ones (`dd` on this ext4; 1 MiB
/// gained nothing more, 4 MiB was slower).
const SPILL_WRITE_BYTES: usize = 256 << 10;

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Memory(v) => v.write(buf),
            Sink::File(f) => f.write(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Memory(v) => v.write_all(buf),
            Sink::File(f) => f.write_all(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Memory(_) => Ok(()),
            Sink::File(f) => f.flush(),
        }
    }
}

/// An encoded table written to a temporary file (deleted unless it is moved
/// into the lake).
#[derive(Debug, Clone)]
pub struct SpilledFile {
    /// The temporary file (removed when the last handle goes).
    pub path: Arc<tempfile::TempPath>,
    /// Its size in bytes.
    pub len: u64,
}

/// One column of a row group ([`ParquetEncoder::write_row_group_columns`]).
#[derive(Debug)]
pub enum GroupColumn<'a> {
    /// The column's arrays, in row order.
    Arrays(Vec<arrow::array::ArrayRef>),
    /// An `Int32` column held as runs.
    Int32Runs(&'a IntRuns),
    /// A `Float64` column of a large table whose pages were made as its
    /// values came; the encoder takes them (the builder is left empty).
    Float64Pages(&'a mut FloatPages),
    /// A non-null `Utf8` column given as runs of one value, (value, rows) in
    /// row order: a file's name over its rows, the run id over all of them.
    /// Encoded as arrays of those values would be, without making them.
    Utf8Runs(Vec<(&'a str, usize)>),
    /// A non-null `Utf8` column given as a dictionary and runs of indices
    /// into it ((index, rows) in row order): the host of each pair, numbered
    /// by the reader. The same bytes as [`Self::Utf8Runs`] of those values,
    /// without hashing them.
    Utf8Keys {
        values: Vec<&'a str>,
        keys: &'a [(u32, usize)],
    },
}

/// One Parquet file of a table written row group by row group, so a reader
/// can hand over its rows a group at a time and reuse the memory. The bytes
/// are those [`encode_parquet`] writes for the same rows when every group but
/// the last has [`ROW_GROUP_ROWS`] rows.
pub struct ParquetEncoder {
    table: String,
    /// The catalog's columns (what callers hand over); the file adds `date`.
    schema: SchemaRef,
    /// The `date` of every row, days since the epoch, when the file carries
    /// it ([`FILES_CARRY_DATE`]).
    date_days: Option<i32>,
    parquet_schema: parquet::schema::types::SchemaDescPtr,
    file: parquet::file::writer::SerializedFileWriter<Sink>,
    factory: parquet::arrow::arrow_writer::ArrowRowGroupWriterFactory,
    cache: ConstantCache,
    scratch: NumericScratch,
    bulk: bool,
    groups: usize,
    rows: usize,
}

impl std::fmt::Debug for ParquetEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetEncoder")
            .field("bulk", &self.bulk)
            .field("groups", &self.groups)
            .field("rows", &self.rows)
            .finish()
    }
}

impl ParquetEncoder {
    /// An encoder for `table` whose file will hold `rows` rows: the large-table
    /// settings apply from [`BULK_ROWS`] rows, as in [`encode_parquet`] (a
    /// caller that does not know the count yet passes any number from
    /// [`ROW_GROUP_ROWS`] once it has a full group). `expected` rows size the
    /// file buffer (address space reserved, touched only as it fills).
    /// Every row is of the date partition `date` (`YYYY-MM-DD`), the file's
    /// last column.
    pub fn new(table: &str, date: &str, rows: usize, expected: usize) -> Result<Self> {
        Self::new_in(table, date, rows, expected, None)
    }

    /// [`Self::new`], writing a large table (from [`BULK_ROWS`] rows) to a
    /// temporary file in `spill_dir` when one is given, rather than to memory.
    /// The directory must be on the lake's file system (it is renamed into
    /// place); [`Self::finish_table`] then returns it as a [`SpilledFile`].
    pub fn new_in(
        table: &str,
        date: &str,
        rows: usize,
        expected: usize,
        spill_dir: Option<&Path>,
    ) -> Result<Self> {
        let date_days = FILES_CARRY_DATE.then_some(layout::date_days(date)?);
        let bulk = rows >= BULK_ROWS;
        let spill = match spill_dir.filter(|_| bulk) {
            Some(dir) => Some(
                tempfile::Builder::new()
                    .prefix(".benchlake-")
                    .suffix(".parquet.tmp")
                    .tempfile_in(dir)
                    .map_err(|e| Error::Io {
                        path: dir.to_path_buf(),
                        source: e,
                    })?,
            ),
            None => None,
        };
        Self::with_sink(
            table,
            catalog::schema(table)?,
            date_days,
            bulk,
            chunks::PAGE_VALUES,
            expected.max(rows),
            spill,
        )
    }

    #[cfg(test)]
    pub(super) fn with_schema(
        table: &str,
        schema: SchemaRef,
        date_days: i32,
        bulk: bool,
        page_values: usize,
        rows: usize,
    ) -> Result<Self> {
        Self::with_sink(
            table,
            schema,
            Some(date_days),
            bulk,
            page_values,
            rows,
            None,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn with_sink(
        table: &str,
        schema: SchemaRef,
        date_days: Option<i32>,
        bulk: bool,
        page_values: usize,
        rows: usize,
        spill: Option<tempfile::NamedTempFile>,
    ) -> Result<Self> {
        use parquet::arrow::arrow_writer::ArrowRowGroupWriterFactory;
        use parquet::arrow::{ArrowSchemaConverter, add_encoded_arrow_schema_to_metadata};
        use parquet::file::writer::SerializedFileWriter;

        // The file's schema: the catalog's columns, then `date`.
        let file_schema = {
            let mut fields: Vec<arrow::datatypes::Field> =
                schema.fields().iter().map(|f| f.as_ref().clone()).collect();
            if date_days.is_some() {
                fields.push(catalog::date_field());
            }
            Arc::new(arrow::datatypes::Schema::new(fields))
        };
        let mut props = if bulk {
            bulk_writer_properties(&file_schema)
        } else {
            writer_properties()
        };
        add_encoded_arrow_schema_to_metadata(&file_schema, &mut props);
        let parquet_schema = ArrowSchemaConverter::new()
            .with_coerce_types(props.coerce_types())
            .convert(&file_schema)?;
        // Reserve what the file is likely to need up front: growing the buffer by
        // doubling copied it and faulted in fresh pages several times for large
        // tables. Untouched capacity is only address space.
        // (Half the fixed-width bytes of the rows; slices of shared arrays make
        // the arrays' own memory sizes useless here.)
        let row_bytes: usize = schema
            .fields()
            .iter()
            .map(|f| f.data_type().primitive_width().unwrap_or(16))
            .sum();
        let sink = match spill {
            Some(f) => Sink::File(std::io::BufWriter::with_capacity(SPILL_WRITE_BYTES, f)),
            None => {
                let mut buf = Vec::with_capacity(if bulk { rows * row_bytes / 2 } else { 0 });
                if bulk {
                    // The file is written into fresh memory: huge pages save
                    // ~13k faults for a 50 MB file.
                    crate::mem::advise_huge_pages(&mut buf);
                }
                Sink::Memory(buf)
            }
        };
        let file =
            SerializedFileWriter::new(sink, parquet_schema.root_schema_ptr(), Arc::new(props))?;
        let factory = ArrowRowGroupWriterFactory::new(&file, file_schema);
        Ok(Self {
            table: table.to_string(),
            schema,
            date_days,
            parquet_schema: Arc::new(parquet_schema),
            file,
            factory,
            cache: ConstantCache::default(),
            scratch: NumericScratch::new(page_values),
            bulk,
            groups: 0,
            rows: 0,
        })
    }

    /// Rows written so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Writes `group` (batches of the table's schema; nothing when they hold
    /// no rows) as the next row group.
    pub fn write_row_group(&mut self, group: &[RecordBatch]) -> Result<()> {
        let group_rows: usize = group.iter().map(|b| b.num_rows()).sum();
        if group_rows == 0 {
            return Ok(());
        }
        let schema = self.schema.clone();
        for b in group {
            if !Arc::ptr_eq(&b.schema(), &schema) && b.schema().fields() != schema.fields() {
                return Err(Error::SchemaMismatch {
                    table: self.table.clone(),
                    message: format!("a batch of schema {} in a row group", b.schema()),
                });
            }
        }
        let mut columns: Vec<GroupColumn<'_>> = (0..schema.fields().len())
            .map(|i| GroupColumn::Arrays(group.iter().map(|b| b.column(i).clone()).collect()))
            .collect();
        self.write_columns(&mut columns, group_rows)
    }

    /// Writes one row group given column by column: each column's arrays (in
    /// row order), an `Int32` column as [`IntRuns`], encoded without making
    /// its values, or a `Float64` column of a large table as [`FloatPages`]
    /// (the same bytes as [`Self::write_row_group`] of the values).
    /// Every column of the table, in schema order, with the same row count.
    pub fn write_row_group_columns(&mut self, columns: &mut [GroupColumn<'_>]) -> Result<()> {
        let fields = self.schema.fields().clone();
        let mismatch = |message: String| Error::SchemaMismatch {
            table: self.table.clone(),
            message,
        };
        if columns.len() != fields.len() {
            return Err(mismatch(format!(
                "{} columns for a table of {}",
                columns.len(),
                fields.len()
            )));
        }
        let mut rows = None;
        for (c, f) in columns.iter().zip(fields.iter()) {
            let n = match c {
                GroupColumn::Arrays(parts) => {
                    if let Some(p) = parts.iter().find(|p| p.data_type() != f.data_type()) {
                        return Err(mismatch(format!(
                            "column {} of type {} for {}",
                            f.name(),
                            p.data_type(),
                            f.data_type()
                        )));
                    }
                    if !f.is_nullable() && parts.iter().any(|p| p.null_count() > 0) {
                        return Err(mismatch(format!("nulls in column {}", f.name())));
                    }
                    parts.iter().map(|p| p.len()).sum()
                }
                GroupColumn::Int32Runs(r) => {
                    if f.data_type() != &arrow::datatypes::DataType::Int32 {
                        return Err(mismatch(format!(
                            "column {} as Int32 runs for {}",
                            f.name(),
                            f.data_type()
                        )));
                    }
                    r.len()
                }
                GroupColumn::Utf8Runs(runs) => {
                    if f.data_type() != &arrow::datatypes::DataType::Utf8 {
                        return Err(mismatch(format!(
                            "column {} as Utf8 runs for {}",
                            f.name(),
                            f.data_type()
                        )));
                    }
                    runs.iter().map(|r| r.1).sum()
                }
                GroupColumn::Utf8Keys { values, keys } => {
                    if f.data_type() != &arrow::datatypes::DataType::Utf8 {
                        return Err(mismatch(format!(
                            "column {} as Utf8 keys for {}",
                            f.name(),
                            f.data_type()
                        )));
                    }
                    if let Some((k, _)) = keys.iter().find(|(k, _)| *k as usize >= values.len()) {
                        return Err(mismatch(format!(
                            "column {}: key {k} of {} values",
                            f.name(),
                            values.len()
                        )));
                    }
                    keys.iter().map(|r| r.1).sum()
                }
                GroupColumn::Float64Pages(p) => {
                    if f.data_type() != &arrow::datatypes::DataType::Float64 || !self.bulk {
                        return Err(mismatch(format!(
                            "column {} as Float64 pages for {}{}",
                            f.name(),
                            f.data_type(),
                            if self.bulk { "" } else { " in a small table" }
                        )));
                    }
                    p.len()
                }
            };
            if *rows.get_or_insert(n) != n {
                return Err(mismatch(format!(
                    "column {} has {n} rows, the others {}",
                    f.name(),
                    rows.unwrap_or_default()
                )));
            }
        }
        match rows {
            Some(0) | None => Ok(()),
            Some(n) => self.write_columns(columns, n),
        }
    }

    fn write_columns(&mut self, columns: &mut [GroupColumn<'_>], group_rows: usize) -> Result<()> {
        use parquet::arrow::arrow_writer::compute_leaves;

        // How the arrays are cut (small tables' runs columns are cut the same way).
        let cuts: Vec<usize> = columns
            .iter()
            .find_map(|c| match c {
                GroupColumn::Arrays(p) => Some(p.iter().map(|a| a.len()).collect()),
                _ => None,
            })
            .unwrap_or_else(|| vec![group_rows]);

        let schema = self.schema.clone();
        // arrow-rs's column writers (each with its own ZSTD contexts) are made
        // only when a column of the group needs one: most columns of large
        // tables are written by `chunks`.
        let mut writers: Option<Vec<Option<parquet::arrow::arrow_writer::ArrowColumnWriter>>> =
            None;
        let mut rg = self.file.next_row_group()?;
        let parquet_schema = &self.parquet_schema;
        for ((i, field), column) in schema.fields().iter().enumerate().zip(columns.iter_mut()) {
            let descr = parquet_schema.column(i);
            let made: Vec<arrow::array::ArrayRef>;
            let cols: Vec<&arrow::array::ArrayRef> = match column {
                GroupColumn::Arrays(parts) => parts.iter().collect(),
                GroupColumn::Float64Pages(pages) => {
                    let (data, close) =
                        pages.take_chunk(descr.clone(), self.scratch.take_sink())?;
                    rg.append_column(&data, close)?;
                    self.scratch.recycle(data);
                    continue;
                }
                GroupColumn::Int32Runs(runs) => {
                    if let Some(v) = runs.constant()
                        && let Some((data, close)) = constant_chunk(
                            descr.clone(),
                            &chunks::ConstValue::Int32(v),
                            group_rows,
                        )?
                    {
                        rg.append_column(&data, close)?;
                        continue;
                    }
                    if self.bulk
                        && let Some((data, close)) =
                            runs_int_chunk(descr.clone(), runs, &mut self.scratch)?
                    {
                        rg.append_column(&data, close)?;
                        self.scratch.recycle(data);
                        continue;
                    }
                    // Small tables: the values, cut like the other columns'
                    // arrays (arrow-rs's pages depend on the cuts).
                    let all: arrow::array::ArrayRef = Arc::new(runs.to_array());
                    made = cut_array(&all, &cuts);
                    made.iter().collect()
                }
                GroupColumn::Utf8Runs(runs) => {
                    // What the arrays of these values would get: a constant
                    // chunk, a runs chunk, or arrow-rs's writer.
                    let mut values = runs.iter().filter(|r| r.1 > 0);
                    if let Some((first, _)) = values.next()
                        && values.all(|(v, _)| v == first)
                        && let Some((data, close)) = constant_chunk(
                            descr.clone(),
                            &chunks::ConstValue::Utf8(first.as_bytes().to_vec()),
                            group_rows,
                        )?
                    {
                        rg.append_column(&data, close)?;
                        continue;
                    }
                    if let Some((data, close)) = utf8_runs_chunk(descr.clone(), runs, group_rows)? {
                        rg.append_column(&data, close)?;
                        continue;
                    }
                    made = utf8_runs_arrays(&self.table, field.name(), runs, &cuts)?;
                    made.iter().collect()
                }
                GroupColumn::Utf8Keys { values, keys } => {
                    // As Utf8Runs of the values: a constant chunk, a
                    // dictionary chunk, or arrow-rs's writer.
                    let value = |k: u32| values.get(k as usize).copied().unwrap_or("");
                    let mut present = keys.iter().filter(|r| r.1 > 0);
                    if let Some((first, _)) = present.next()
                        && present.all(|(k, _)| value(*k) == value(*first))
                        && let Some((data, close)) = constant_chunk(
                            descr.clone(),
                            &chunks::ConstValue::Utf8(value(*first).as_bytes().to_vec()),
                            group_rows,
                        )?
                    {
                        rg.append_column(&data, close)?;
                        continue;
                    }
                    if let Some((data, close)) =
                        chunks::utf8_keys_chunk(descr.clone(), values, keys, group_rows)?
                    {
                        rg.append_column(&data, close)?;
                        continue;
                    }
                    let runs: Vec<(&str, usize)> =
                        keys.iter().map(|(k, n)| (value(*k), *n)).collect();
                    made = utf8_runs_arrays(&self.table, field.name(), &runs, &cuts)?;
                    made.iter().collect()
                }
            };
            if let Some(value) = self.cache.constant(&cols)
                && let Some((data, close)) = constant_chunk(descr.clone(), &value, group_rows)?
            {
                rg.append_column(&data, close)?;
                continue;
            }
            if let Some((data, close)) = runs_chunk(descr.clone(), &cols, group_rows)? {
                rg.append_column(&data, close)?;
                continue;
            }
            if self.bulk
                && let Some((data, close)) =
                    numeric_chunk(descr.clone(), &cols, group_rows, &mut self.scratch)?
            {
                rg.append_column(&data, close)?;
                self.scratch.recycle(data);
                continue;
            }
            let ws = match &mut writers {
                Some(ws) => ws,
                None => writers.insert(
                    self.factory
                        .create_column_writers(self.groups)?
                        .into_iter()
                        .map(Some)
                        .collect(),
                ),
            };
            let mut w = ws.get_mut(i).and_then(Option::take).ok_or_else(|| {
                Error::Config(format!("no column writer for column {i} of {}", self.table))
            })?;
            for c in cols {
                for leaf in compute_leaves(field, c)? {
                    w.write(&leaf)?;
                }
            }
            w.close()?.append_to_row_group(&mut rg)?;
        }
        // The `date` column: one value, a constant chunk (with its statistics,
        // which readers prune row groups by).
        if let Some(days) = self.date_days {
            let i = schema.fields().len();
            match constant_chunk(
                parquet_schema.column(i),
                &chunks::ConstValue::Int32(days),
                group_rows,
            )? {
                Some((data, close)) => rg.append_column(&data, close)?,
                None => {
                    return Err(Error::Config(format!(
                        "{}: the date column cannot be written as a constant chunk",
                        self.table
                    )));
                }
            }
        }
        rg.close()?;
        self.groups += 1;
        self.rows += group_rows;
        Ok(())
    }

    /// Writes the footer and returns the file.
    pub fn finish(self) -> Result<Bytes> {
        match self.file.into_inner()? {
            Sink::Memory(v) => Ok(Bytes::from(v)),
            Sink::File(f) => Err(Error::Config(format!(
                "{}: the encoder wrote to {}; use finish_table",
                self.table,
                f.get_ref().path().display()
            ))),
        }
    }

    /// Writes the footer and returns the table, in memory or in its
    /// temporary file.
    pub fn finish_table(self, part: &str) -> Result<EncodedTable> {
        let (table, rows) = (self.table.clone(), self.rows);
        let (data, spilled) = match self.file.into_inner()? {
            Sink::Memory(v) => (Bytes::from(v), None),
            Sink::File(f) => {
                let path = f.get_ref().path().to_path_buf();
                let f = f.into_inner().map_err(|e| Error::Io {
                    path,
                    source: e.into_error(),
                })?;
                let len = f
                    .as_file()
                    .metadata()
                    .map_err(|e| Error::Io {
                        path: f.path().to_path_buf(),
                        source: e,
                    })?
                    .len();
                let path = Arc::new(f.into_temp_path());
                (Bytes::new(), Some(SpilledFile { path, len }))
            }
        };
        Ok(EncodedTable {
            table,
            part: part.to_string(),
            rows,
            data,
            spilled,
        })
    }
}

/// `all` cut into arrays of the lengths `cuts`.
fn cut_array(all: &arrow::array::ArrayRef, cuts: &[usize]) -> Vec<arrow::array::ArrayRef> {
    let mut at = 0;
    cuts.iter()
        .map(|&n| {
            let a = all.slice(at, n);
            at += n;
            a
        })
        .collect()
}

/// The values of `runs` as `Utf8` arrays of the lengths `cuts` (for
/// arrow-rs's writer, when the column is of no shape `chunks` writes).
fn utf8_runs_arrays(
    table: &str,
    column: &str,
    runs: &[(&str, usize)],
    cuts: &[usize],
) -> Result<Vec<arrow::array::ArrayRef>> {
    let mismatch = |message: String| Error::SchemaMismatch {
        table: table.to_string(),
        message,
    };
    let mut queue = runs.iter().copied().filter(|r| r.1 > 0);
    let mut carry: Option<(&str, usize)> = None;
    let mut out = Vec::with_capacity(cuts.len());
    for &len in cuts {
        let mut piece = Vec::new();
        let mut filled = 0;
        while filled < len {
            let Some((v, n)) = carry.take().or_else(|| queue.next()) else {
                return Err(mismatch(format!(
                    "column {column} has fewer values than its row group"
                )));
            };
            let take = n.min(len - filled);
            piece.push((v, take));
            filled += take;
            if take < n {
                carry = Some((v, n - take));
            }
        }
        out.push(
            utf8_runs_array(&piece).ok_or_else(|| {
                mismatch(format!("the {column} values of one batch exceed 2 GiB"))
            })?,
        );
    }
    Ok(out)
}

/// A `Utf8` array holding each `(value, rows)` run's value `rows` times, its
/// bytes reserved at once; `None` when they would pass the 2 GiB of i32
/// offsets.
pub fn utf8_runs_array(runs: &[(&str, usize)]) -> Option<arrow::array::ArrayRef> {
    let rows: usize = runs.iter().map(|r| r.1).sum();
    let size = runs.iter().try_fold(0usize, |acc, (v, n)| {
        v.len().checked_mul(*n).and_then(|b| b.checked_add(acc))
    })?;
    i32::try_from(size).ok()?;
    let mut offsets: Vec<i32> = Vec::with_capacity(rows + 1);
    offsets.push(0);
    let mut bytes: Vec<u8> = Vec::with_capacity(size);
    for (v, n) in runs {
        for _ in 0..*n {
            bytes.extend_from_slice(v.as_bytes());
            offsets.push(bytes.len() as i32);
        }
    }
    // SAFETY: the offsets start at 0 and grow with `bytes`, ending at its
    // length (checked to fit i32 above); every value is a whole `&str`, so
    // valid UTF-8.
    Some(Arc::new(unsafe {
        arrow::array::StringArray::new_unchecked(
            arrow::buffer::OffsetBuffer::new_unchecked(offsets.into()),
            bytes.into(),
            None,
        )
    }))
}
