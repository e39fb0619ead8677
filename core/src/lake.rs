//! The lake: the object store handle (local directory or S3-compatible), Parquet
//! encoding checked against the catalog, the offline writer used by
//! `benchlake ingest ... --out DIR`, and reading a run's rows of a table back
//! ([`Lake::read_run_rows`], in `read`).
//!
//! Writers never expose partial data: a Parquet object is encoded fully in memory
//! (or in a local temp file) and then put in one request; object stores make a
//! single put atomic, and the local store writes to a temp file and renames.
use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::catalog;
use crate::error::{Error, Result};
use crate::layout;

mod chunks;
mod int_runs;
mod read;
pub use chunks::FloatPages;
use chunks::{
    ConstantCache, NumericScratch, constant_chunk, numeric_chunk, runs_chunk, runs_int_chunk,
    utf8_runs_chunk,
};
pub use int_runs::IntRuns;
pub use read::RunRows;

/// Rows for one table produced by a reader or an executor.
#[derive(Debug, Clone)]
pub struct TableOutput {
    /// Catalog table name.
    pub table: String,
    /// Optional part suffix, so one job can write several objects of one table.
    pub part: String,
    /// The rows; every batch has the catalog schema.
    pub batches: Vec<RecordBatch>,
}

impl TableOutput {
    /// Output for `table` with the given batches and no part suffix.
    pub fn new(table: impl Into<String>, batches: Vec<RecordBatch>) -> Self {
        Self {
            table: table.into(),
            part: String::new(),
            batches,
        }
    }
    /// Total rows.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

/// Object store configuration (flags/env of every service).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StoreConfig {
    /// `file:///abs/dir`, a plain directory path, or `s3://bucket[/prefix]`.
    pub url: String,
    /// S3 endpoint, e.g. `http://127.0.0.1:8333` (empty = AWS).
    pub endpoint: String,
    /// S3 region (any value for SeaweedFS).
    pub region: String,
    /// S3 access key id.
    pub access_key_id: String,
    /// S3 secret key (never logged).
    #[serde(skip_serializing)]
    pub secret_access_key: String,
    /// Use virtual-hosted-style requests instead of path style.
    pub virtual_hosted: bool,
}

/// A handle on the lake's object store.
#[derive(Clone)]
pub struct Lake {
    store: Arc<dyn ObjectStore>,
    root: String,
    prefix: Option<ObjPath>,
    /// The directory of a local lake (object_store leaves empty directories behind).
    local: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Lake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lake").field("root", &self.root).finish()
    }
}

impl Lake {
    /// A lake in a local directory (created if missing).
    pub fn local(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let abs = dir.canonicalize().map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let store = LocalFileSystem::new_with_prefix(&abs)?;
        Ok(Self {
            store: Arc::new(store),
            root: abs.display().to_string(),
            prefix: None,
            local: Some(abs),
        })
    }

    /// A lake over any object store (tests use `InMemory`).
    pub fn from_store(store: Arc<dyn ObjectStore>, root: impl Into<String>) -> Self {
        Self {
            store,
            root: root.into(),
            prefix: None,
            local: None,
        }
    }

    /// Opens the lake described by `cfg`.
    pub fn open(cfg: &StoreConfig) -> Result<Self> {
        let url = cfg.url.trim();
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = match rest.split_once('/') {
                Some((b, p)) => (b, p.trim_matches('/')),
                None => (rest, ""),
            };
            if bucket.is_empty() {
                return Err(Error::Config(format!("no bucket in '{url}'")));
            }
            let mut b = AmazonS3Builder::new()
                .with_bucket_name(bucket)
                .with_region(if cfg.region.is_empty() {
                    "us-east-1"
                } else {
                    &cfg.region
                })
                .with_virtual_hosted_style_request(cfg.virtual_hosted);
            if !cfg.endpoint.is_empty() {
                b = b
                    .with_endpoint(&cfg.endpoint)
                    .with_allow_http(cfg.endpoint.starts_with("http://"));
            }
            if !cfg.access_key_id.is_empty() {
                b = b
                    .with_access_key_id(&cfg.access_key_id)
                    .with_secret_access_key(&cfg.secret_access_key);
            }
            let store = b.build()?;
            Ok(Self {
                store: Arc::new(store),
                root: url.to_string(),
                prefix: (!prefix.is_empty()).then(|| ObjPath::from(prefix)),
                local: None,
            })
        } else {
            let dir = url.strip_prefix("file://").unwrap_or(url);
            if dir.is_empty() {
                return Err(Error::Config("empty lake url".into()));
            }
            Self::local(Path::new(dir))
        }
    }

    /// Where the lake lives (directory or URL), for messages.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The underlying store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    fn path(&self, key: &str) -> ObjPath {
        match &self.prefix {
            Some(p) => ObjPath::from(format!("{p}/{key}")),
            None => ObjPath::from(key),
        }
    }

    fn strip(&self, p: &ObjPath) -> String {
        let s = p.as_ref();
        match &self.prefix {
            Some(pre) => s
                .strip_prefix(pre.as_ref())
                .map(|r| r.trim_start_matches('/').to_string())
                .unwrap_or_else(|| s.to_string()),
            None => s.to_string(),
        }
    }

    /// The directory of a local lake (None for object stores).
    pub fn local_dir(&self) -> Option<&Path> {
        self.local.as_deref()
    }

    /// Puts a spilled table as object `key`: renamed into place in a local
    /// lake (atomic, as a put), read and put otherwise.
    async fn put_file(&self, key: &str, f: &SpilledFile) -> Result<()> {
        let from: &Path = f.path.as_ref();
        if let Some(root) = &self.local {
            let to = root.join(self.path(key).as_ref());
            if let Some(dir) = to.parent() {
                std::fs::create_dir_all(dir).map_err(|e| Error::Io {
                    path: dir.to_path_buf(),
                    source: e,
                })?;
            }
            // Same file system (the encoder wrote it in the lake's
            // directory); a rename that fails falls back to a put.
            if std::fs::rename(from, &to).is_ok() {
                return Ok(());
            }
        }
        let data = std::fs::read(from).map_err(|e| Error::Io {
            path: from.to_path_buf(),
            source: e,
        })?;
        self.put(key, Bytes::from(data)).await
    }

    /// Puts an object in one request (atomic).
    pub async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.store
            .put(&self.path(key), PutPayload::from_bytes(data))
            .await?;
        Ok(())
    }

    /// Starts a streaming upload of `key`: the object appears only when the writer
    /// is finished (multipart on S3; a temp file renamed into place locally).
    pub async fn writer(&self, key: &str) -> Result<object_store::WriteMultipart> {
        let up = self.store.put_multipart(&self.path(key)).await?;
        Ok(object_store::WriteMultipart::new(up))
    }

    /// Streams an object into a local file (for executors that need a path).
    pub async fn download(&self, key: &str, dest: &Path) -> Result<u64> {
        use tokio::io::AsyncWriteExt;
        let mut stream = self.store.get(&self.path(key)).await?.into_stream();
        let io = |source| Error::Io {
            path: dest.to_path_buf(),
            source,
        };
        let mut f = tokio::fs::File::create(dest).await.map_err(io)?;
        let mut n = 0u64;
        while let Some(chunk) = stream.try_next().await? {
            n += chunk.len() as u64;
            f.write_all(&chunk).await.map_err(io)?;
        }
        f.flush().await.map_err(io)?;
        Ok(n)
    }

    /// Reads a whole object.
    pub async fn get(&self, key: &str) -> Result<Bytes> {
        Ok(self.store.get(&self.path(key)).await?.bytes().await?)
    }

    /// Size of an object, or None when it does not exist.
    pub async fn size(&self, key: &str) -> Result<Option<u64>> {
        match self.store.head(&self.path(key)).await {
            Ok(m) => Ok(Some(m.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Checks an object a worker staged as part of `table` before it is
    /// committed: a Parquet footer that decodes, the catalog's schema of the
    /// table, and `rows` rows. Errors name the object key; a malformed object
    /// is [`Error::Invalid`] (not retryable), a store failure stays retryable.
    pub async fn verify_parquet(
        &self,
        key: &str,
        table: &str,
        rows: u64,
        run_id: &str,
    ) -> Result<()> {
        let bad = |m: String| Error::invalid("staged object", format!("{key}: {m}"));
        let size = self
            .size(key)
            .await?
            .ok_or_else(|| bad("does not exist".into()))?;
        if size < 12 {
            return Err(bad(format!(
                "{size} bytes is too small for a Parquet file (no footer)"
            )));
        }
        let path = self.path(key);
        let tail = self.store.get_range(&path, size - 8..size).await?;
        if tail.len() != 8 || &tail[4..] != b"PAR1" {
            return Err(bad(format!(
                "no Parquet footer magic 'PAR1' at byte offset {}",
                size - 4
            )));
        }
        let meta_len = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) as u64;
        if meta_len + 12 > size {
            return Err(bad(format!(
                "footer length {meta_len} at byte offset {} exceeds the object ({size} bytes)",
                size - 8
            )));
        }
        let start = size - 8 - meta_len;
        let meta = self.store.get_range(&path, start..size - 8).await?;
        let md = parquet::file::metadata::ParquetMetaDataReader::decode_metadata(&meta).map_err(
            |e| {
                bad(format!(
                    "footer at byte offset {start} does not decode: {e}"
                ))
            },
        )?;
        let fm = md.file_metadata();
        let schema = Arc::new(
            parquet::arrow::parquet_to_arrow_schema(fm.schema_descr(), fm.key_value_metadata())
                .map_err(|e| bad(format!("schema: {e}")))?,
        );
        check_schema(table, &schema).map_err(|e| bad(e.to_string()))?;
        let n = fm.num_rows();
        let in_groups: i64 = md.row_groups().iter().map(|g| g.num_rows()).sum();
        if n < 0 || n as u64 != rows || in_groups != n {
            return Err(bad(format!(
                "holds {n} rows ({in_groups} in its row groups), the worker claimed {rows}"
            )));
        }
        self.verify_run_column(key, size, &schema, run_id).await
    }

    /// Checks that every row of the Parquet object `key` carries `run_id` in
    /// its `run_id` column (the catalog's first column): a job commits rows
    /// of its own run only. The column is read as a dictionary, so only the
    /// distinct values are compared (a file of millions of pair rows holds
    /// one dictionary entry per row group).
    // ParquetObjectReader is deprecated in parquet 60 in favour of a
    // hand-written AsyncFileReader; it still reads only the byte ranges the
    // run_id column needs (not the whole object), which is what matters here.
    #[allow(deprecated)]
    async fn verify_run_column(
        &self,
        key: &str,
        size: u64,
        schema: &arrow::datatypes::Schema,
        run_id: &str,
    ) -> Result<()> {
        use arrow::array::{Array, AsArray};
        use arrow::datatypes::{DataType, Field, Int32Type, Schema};
        use parquet::arrow::ProjectionMask;
        use parquet::arrow::arrow_reader::ArrowReaderOptions;
        use parquet::arrow::async_reader::{ParquetObjectReader, ParquetRecordBatchStreamBuilder};
        let bad = |m: String| Error::invalid("staged object", format!("{key}: {m}"));
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        let Some(first) = fields.first_mut().filter(|f| f.name() == "run_id") else {
            return Err(bad("its first column is not run_id".into()));
        };
        *first = Field::new(
            "run_id",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            first.is_nullable(),
        );
        let reader =
            ParquetObjectReader::new(self.store.clone(), self.path(key)).with_file_size(size);
        let opts = ArrowReaderOptions::new().with_schema(Arc::new(Schema::new(fields)));
        let b = ParquetRecordBatchStreamBuilder::new_with_options(reader, opts)
            .await
            .map_err(|e| bad(format!("run_id column: {e}")))?;
        let mask = ProjectionMask::roots(b.parquet_schema(), [0]);
        let mut stream = b
            .with_projection(mask)
            .with_batch_size(64 << 10)
            .build()
            .map_err(|e| bad(format!("run_id column: {e}")))?;
        let mut row = 0u64;
        while let Some(batch) = stream
            .try_next()
            .await
            .map_err(|e| bad(format!("run_id column near row {row}: {e}")))?
        {
            let col = batch.column(0);
            if col.null_count() > 0 {
                return Err(bad(format!("run_id is null in a row from row {row} on")));
            }
            let Some(d) = col.as_dictionary_opt::<Int32Type>() else {
                return Err(bad("run_id column is not text".into()));
            };
            let values = d.values().as_string::<i32>();
            // Only the dictionary entries some row refers to count.
            let mut used = vec![false; values.len()];
            for k in d.keys().values() {
                if let Some(u) = usize::try_from(*k).ok().and_then(|k| used.get_mut(k)) {
                    *u = true;
                }
            }
            for (i, u) in used.iter().enumerate() {
                if *u && values.value(i) != run_id {
                    return Err(bad(format!(
                        "holds rows of run '{}' (from row {row} on); this job belongs to run '{run_id}'",
                        values.value(i).chars().take(80).collect::<String>()
                    )));
                }
            }
            row += batch.num_rows() as u64;
        }
        Ok(())
    }

    /// Copies an object (used by the commit of staged outputs).
    pub async fn copy(&self, from: &str, to: &str) -> Result<()> {
        self.store.copy(&self.path(from), &self.path(to)).await?;
        Ok(())
    }

    /// Deletes an object; a missing object is not an error.
    pub async fn delete(&self, key: &str) -> Result<()> {
        match self.store.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Lists keys (relative to the lake root) and sizes under a prefix.
    pub async fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        let p = self.path(prefix.trim_end_matches('/'));
        let items: Vec<_> = self.store.list(Some(&p)).try_collect().await?;
        let mut out: Vec<(String, u64)> = items
            .into_iter()
            .map(|m| (self.strip(&m.location), m.size))
            .collect();
        out.sort();
        Ok(out)
    }

    /// Deletes every object under a prefix (and, in a local lake, the emptied
    /// directories up to the top-level one).
    pub async fn delete_prefix(&self, prefix: &str) -> Result<()> {
        for (k, _) in self.list(prefix).await? {
            self.delete(&k).await?;
        }
        if let Some(root) = &self.local {
            let mut dir = root.join(prefix.trim_end_matches('/'));
            // remove_dir only removes empty directories: concurrent jobs' staging survives.
            while dir.starts_with(root) && dir != *root {
                if std::fs::remove_dir(&dir).is_err() {
                    break;
                }
                match dir.parent() {
                    Some(p) => dir = p.to_path_buf(),
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// Writes table outputs straight to their final keys (offline ingest, no staging
    /// needed because nothing else reads the directory while it is written).
    /// Returns the keys written.
    pub async fn write_final(
        &self,
        outputs: &[TableOutput],
        date: &str,
        run_id: &str,
        job_id: &str,
    ) -> Result<Vec<String>> {
        // Encode everything first, so a bad batch writes nothing.
        let encoded = outputs
            .iter()
            .map(EncodedTable::encode)
            .collect::<Result<Vec<_>>>()?;
        self.write_final_encoded(&encoded, date, run_id, job_id)
            .await
    }

    /// [`Lake::write_final`] of tables already encoded. Every key is checked
    /// before anything is written.
    pub async fn write_final_encoded(
        &self,
        tables: &[EncodedTable],
        date: &str,
        run_id: &str,
        job_id: &str,
    ) -> Result<Vec<String>> {
        let keys = tables
            .iter()
            .map(|t| layout::table_key(&t.table, date, run_id, job_id, &t.part))
            .collect::<Result<Vec<_>>>()?;
        for (key, t) in keys.iter().zip(tables) {
            match &t.spilled {
                None => self.put(key, t.data.clone()).await?,
                Some(f) => self.put_file(key, f).await?,
            }
        }
        Ok(keys)
    }
}

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
    /// Encodes `o` with [`encode_parquet`].
    pub fn encode(o: &TableOutput) -> Result<Self> {
        Ok(Self {
            table: o.table.clone(),
            part: o.part.clone(),
            rows: o.rows(),
            data: encode_parquet(&o.table, &o.batches)?,
            spilled: None,
        })
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
pub fn encode_parquet(table: &str, batches: &[RecordBatch]) -> Result<Bytes> {
    let schema = catalog::schema(table)?;
    for b in batches {
        check_schema(table, &b.schema())?;
    }
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    encode_with_schema(
        table,
        schema,
        batches,
        rows >= BULK_ROWS,
        chunks::PAGE_VALUES,
    )
}

/// [`encode_parquet`] for a schema already checked; `bulk` selects the large
/// table path (bulk properties, hand-written numeric chunks of `page_values`
/// values per page).
fn encode_with_schema(
    table: &str,
    schema: SchemaRef,
    batches: &[RecordBatch],
    bulk: bool,
    page_values: usize,
) -> Result<Bytes> {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let mut enc = ParquetEncoder::with_schema(table, schema, bulk, page_values, rows)?;

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
    schema: SchemaRef,
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
    pub fn new(table: &str, rows: usize, expected: usize) -> Result<Self> {
        Self::new_in(table, rows, expected, None)
    }

    /// [`Self::new`], writing a large table (from [`BULK_ROWS`] rows) to a
    /// temporary file in `spill_dir` when one is given, rather than to memory.
    /// The directory must be on the lake's file system (it is renamed into
    /// place); [`Self::finish_table`] then returns it as a [`SpilledFile`].
    pub fn new_in(
        table: &str,
        rows: usize,
        expected: usize,
        spill_dir: Option<&Path>,
    ) -> Result<Self> {
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
            bulk,
            chunks::PAGE_VALUES,
            expected.max(rows),
            spill,
        )
    }

    fn with_schema(
        table: &str,
        schema: SchemaRef,
        bulk: bool,
        page_values: usize,
        rows: usize,
    ) -> Result<Self> {
        Self::with_sink(table, schema, bulk, page_values, rows, None)
    }

    fn with_sink(
        table: &str,
        schema: SchemaRef,
        bulk: bool,
        page_values: usize,
        rows: usize,
        spill: Option<tempfile::NamedTempFile>,
    ) -> Result<Self> {
        use parquet::arrow::arrow_writer::ArrowRowGroupWriterFactory;
        use parquet::arrow::{ArrowSchemaConverter, add_encoded_arrow_schema_to_metadata};
        use parquet::file::writer::SerializedFileWriter;

        let mut props = if bulk {
            bulk_writer_properties(&schema)
        } else {
            writer_properties()
        };
        add_encoded_arrow_schema_to_metadata(&schema, &mut props);
        let parquet_schema = ArrowSchemaConverter::new()
            .with_coerce_types(props.coerce_types())
            .convert(&schema)?;
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
        let factory = ArrowRowGroupWriterFactory::new(&file, schema.clone());
        Ok(Self {
            table: table.to_string(),
            schema,
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

/// SHA-256 of bytes, lower-case hex.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int32Array, StringArray};

    fn timings(n: i32) -> RecordBatch {
        let schema = catalog::schema("linktest_timings").unwrap();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["r"; n as usize])),
                Arc::new(StringArray::from(vec!["s"; n as usize])),
                Arc::new(Int32Array::from(vec![0; n as usize])),
                Arc::new(Int32Array::from((0..n).collect::<Vec<_>>())),
                Arc::new(Int32Array::from((0..n).map(|i| i + 1).collect::<Vec<_>>())),
                Arc::new(Int32Array::from(vec![1; n as usize])),
                Arc::new(Float64Array::from(vec![1e-6; n as usize])),
                Arc::new(StringArray::from(vec!["h0"; n as usize])),
                Arc::new(StringArray::from(vec![Some("h1"); n as usize])),
            ],
        )
        .unwrap()
    }

    /// Writes `t` into `lake` as one job's output; its key.
    async fn land(lake: &Lake, t: &EncodedTable) -> Vec<String> {
        let (run, job) = ("01JBENCH000000000000000001", "01JBENCH000000000000000002");
        lake.write_final_encoded(std::slice::from_ref(t), "2026-11-24", run, job)
            .await
            .unwrap()
    }

    /// A spilled table is renamed into a local lake's final key (the same
    /// bytes as encoded in memory) and read back; in an object store lake
    /// it is read and put. Its temporary file does not outlive either.
    #[tokio::test]
    async fn spilled_tables_land_at_their_final_keys() {
        let dir = tempfile::tempdir().unwrap();
        let rows = BULK_ROWS as i32 + 5;
        let b = timings(rows);
        let want = encode_parquet("linktest_timings", std::slice::from_ref(&b)).unwrap();
        let spill = |lake_dir: &Path| {
            let mut enc =
                ParquetEncoder::new_in("linktest_timings", rows as usize, 0, Some(lake_dir))
                    .unwrap();
            enc.write_row_group(std::slice::from_ref(&b)).unwrap();
            enc.finish_table("").unwrap()
        };
        let local = dir.path().join("lake");
        let lake = Lake::local(&local).unwrap();
        let t = spill(&local);
        let tmp = t.spilled.as_ref().unwrap().path.to_path_buf();
        assert!(tmp.exists() && t.data.is_empty() && t.rows == rows as usize);
        let keys = land(&lake, &t).await;
        assert!(!tmp.exists(), "renamed into place");
        let got = std::fs::read(local.join(&keys[0])).unwrap();
        assert!(got == want, "the bytes differ");
        let back: usize = read_back(Bytes::from(got))
            .iter()
            .map(|b| b.num_rows())
            .sum();
        assert_eq!(back, rows as usize);
        // A lake that is not a local directory: the file is read and put.
        let other = Lake::from_store(Arc::new(object_store::memory::InMemory::new()), "memory://");
        let t = spill(dir.path());
        let keys = land(&other, &t).await;
        assert!(other.get(&keys[0]).await.unwrap() == want);
        let tmp = t.spilled.as_ref().unwrap().path.to_path_buf();
        drop(t);
        assert!(!tmp.exists());
        // Small tables are never spilled.
        let mut enc = ParquetEncoder::new_in("linktest_timings", 10, 0, Some(dir.path())).unwrap();
        enc.write_row_group(&[timings(10)]).unwrap();
        assert!(enc.finish_table("").unwrap().spilled.is_none());
    }

    #[tokio::test]
    async fn offline_write_lands_at_final_keys_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let run = crate::ids::new_id();
        let job = crate::ids::new_id();
        let keys = lake
            .write_final(
                &[TableOutput::new("linktest_timings", vec![timings(5)])],
                "2026-11-22",
                &run,
                &job,
            )
            .await
            .unwrap();
        assert_eq!(keys.len(), 1);
        let data = lake.get(&keys[0]).await.unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data)
            .unwrap()
            .build()
            .unwrap();
        let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 5);
        assert_eq!(lake.list("tables/linktest_timings").await.unwrap().len(), 1);
    }

    /// Column `col` of `batches`, a non-null string column, as owned strings.
    fn strings_of(batches: &[RecordBatch], col: usize) -> Vec<String> {
        use arrow::array::AsArray;
        batches
            .iter()
            .flat_map(|b| {
                b.column(col)
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.unwrap().to_string())
            })
            .collect()
    }

    fn read_back(data: Bytes) -> Vec<RecordBatch> {
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data)
            .unwrap()
            .build()
            .unwrap()
            .map(|b| b.unwrap())
            .collect()
    }

    /// Host columns of one rank per host in a large table: values change
    /// every row (bit-packed dictionary indices, 1 to 12 bits wide), or in
    /// short runs; given as arrays or as keys, the same bytes, read back
    /// exactly by arrow-rs.
    #[test]
    fn short_runs_of_large_tables_are_bit_packed_and_read_back() {
        let schema = catalog::schema("linktest_timings").unwrap();
        for (hosts, run) in [(2, 1), (3, 1), (1000, 1), (4096, 1), (700, 3), (50, 9)] {
            let n = BULK_ROWS + 1234;
            let names: Vec<String> = (0..hosts).map(|h| format!("nd{h:05}")).collect();
            // A pseudo-random walk over the hosts, `run` rows each.
            let key = |i: usize| ((i / run) * 7919 + (i / run) / 3) % hosts;
            let from: Vec<&str> = (0..n).map(|i| names[key(i)].as_str()).collect();
            let b = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(vec!["01JRUN"; n])),
                    Arc::new(StringArray::from(vec!["raw/x.sion"; n])),
                    Arc::new(Int32Array::from(vec![0; n])),
                    Arc::new(Int32Array::from_iter_values(0..n as i32)),
                    Arc::new(Int32Array::from_iter_values(0..n as i32)),
                    Arc::new(Int32Array::from(vec![1; n])),
                    Arc::new(Float64Array::from(vec![1e-6; n])),
                    Arc::new(StringArray::from(from.clone())),
                    Arc::new(StringArray::from(vec!["h"; n])),
                ],
            )
            .unwrap();
            let arrays = encode_parquet("linktest_timings", std::slice::from_ref(&b)).unwrap();
            let back = read_back(arrays.clone());
            assert_eq!(strings_of(&back, 7), from, "{hosts} hosts, runs of {run}");
            // The same column given as keys into the host names.
            let mut keys: Vec<(u32, usize)> = Vec::new();
            for i in 0..n {
                match keys.last_mut() {
                    Some((k, m)) if *k as usize == key(i) => *m += 1,
                    _ => keys.push((key(i) as u32, 1)),
                }
            }
            let mut enc = ParquetEncoder::new("linktest_timings", n, n).unwrap();
            let cut = |i: usize| -> Vec<arrow::array::ArrayRef> {
                let c = b.column(i);
                (0..n)
                    .step_by(1 << 16)
                    .map(|at| c.slice(at, (1 << 16).min(n - at)))
                    .collect()
            };
            let values: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut cols: Vec<GroupColumn<'_>> =
                (0..7).map(|i| GroupColumn::Arrays(cut(i))).collect();
            cols.push(GroupColumn::Utf8Keys {
                values: values.clone(),
                keys: &keys,
            });
            cols.push(GroupColumn::Arrays(cut(8)));
            enc.write_row_group_columns(&mut cols).unwrap();
            drop(cols);
            let keyed = enc.finish().unwrap();
            assert_eq!(strings_of(&read_back(keyed), 7), from);
        }
    }

    /// `source` in runs (many files gathered into one table, a file's name
    /// recurring later, runs crossing batches): the dictionary-and-RLE chunk
    /// reads back the same strings, with min/max statistics over them and a
    /// dictionary of the distinct values; a column whose values change too
    /// often goes through arrow-rs and reads back the same too.
    #[test]
    fn string_columns_in_runs_read_back_identically() {
        use parquet::data_type::AsBytes;
        let schema = catalog::schema("linktest_timings").unwrap();
        let names = ["raw/b/file.sion", "raw/a/file.sion", "raw/c/file.sion"];
        let batch = |sources: Vec<&str>, hosts_like: bool| {
            let n = sources.len();
            let src: Vec<String> = if hosts_like {
                (0..n).map(|i| format!("h{}", i % 5)).collect()
            } else {
                sources.iter().map(|s| s.to_string()).collect()
            };
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(vec!["01JRUN"; n])),
                    Arc::new(StringArray::from(src)),
                    Arc::new(Int32Array::from(vec![0; n])),
                    Arc::new(Int32Array::from_iter_values(0..n as i32)),
                    Arc::new(Int32Array::from_iter_values(1..=n as i32)),
                    Arc::new(Int32Array::from(vec![1; n])),
                    Arc::new(Float64Array::from(vec![1e-6; n])),
                    Arc::new(StringArray::from(vec!["h0"; n])),
                    Arc::new(StringArray::from_iter_values(
                        (0..n).map(|i| format!("h{}", i / 3)),
                    )),
                ],
            )
            .unwrap()
        };
        let runs = |lens: &[(usize, usize)]| -> Vec<&str> {
            lens.iter()
                .flat_map(|(k, n)| std::iter::repeat_n(names[*k], *n))
                .collect()
        };
        for hosts_like in [false, true] {
            let batches = vec![
                batch(runs(&[(0, 40), (1, 25)]), hosts_like),
                batch(runs(&[(1, 15), (2, 30), (0, 10)]), hosts_like),
            ];
            let data = encode_parquet("linktest_timings", &batches).unwrap();
            let back = read_back(data.clone());
            let got = strings_of(&back, 1);
            let want = strings_of(&batches, 1);
            assert_eq!(got, want, "hosts_like {hosts_like}");
            let meta = parquet::file::reader::FileReader::metadata(
                &parquet::file::serialized_reader::SerializedFileReader::new(data).unwrap(),
            )
            .clone();
            let c = meta.row_group(0).column(1);
            let Some(parquet::file::statistics::Statistics::ByteArray(st)) = c.statistics() else {
                panic!("no statistics: {c:?}")
            };
            let (lo, hi) = if hosts_like {
                ("h0", "h4")
            } else {
                ("raw/a/file.sion", "raw/c/file.sion")
            };
            assert_eq!(st.min_opt().unwrap().as_bytes(), lo.as_bytes());
            assert_eq!(st.max_opt().unwrap().as_bytes(), hi.as_bytes());
            assert_eq!(st.null_count_opt(), Some(0));
            if !hosts_like {
                // Three distinct names, a dictionary page and RLE runs: a few
                // dozen bytes for 120 rows.
                assert!(c.compressed_size() < 200, "{}", c.compressed_size());
            }
        }
        // Many distinct values in runs: an index wider than one byte.
        let many: Vec<String> = (0..2000)
            .flat_map(|i| vec![format!("f{i:05}"); 8])
            .collect();
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec!["01JRUN"; many.len()])),
                Arc::new(StringArray::from(many.clone())),
                Arc::new(Int32Array::from(vec![0; many.len()])),
                Arc::new(Int32Array::from_iter_values(0..many.len() as i32)),
                Arc::new(Int32Array::from_iter_values(0..many.len() as i32)),
                Arc::new(Int32Array::from(vec![1; many.len()])),
                Arc::new(Float64Array::from(vec![1e-6; many.len()])),
                Arc::new(StringArray::from(many.clone())),
                Arc::new(StringArray::from(vec!["h"; many.len()])),
            ],
        )
        .unwrap();
        let back = read_back(encode_parquet("linktest_timings", &[b]).unwrap());
        assert_eq!(strings_of(&back, 7), many);
        let got = strings_of(&back, 1);
        assert_eq!(got, many);
    }

    #[test]
    fn bulk_tables_with_constant_columns_read_back_identically() {
        // Two row groups (the second partial), batches that straddle them, and
        // constant run_id/source/permutation columns (the hand-built path) next
        // to encoded ones.
        let n = ROW_GROUP_ROWS + 1000;
        let schema = catalog::schema("linktest_timings").unwrap();
        let mut batches = Vec::new();
        let mut at = 0;
        for len in [300_000, 600_000, n - 900_000] {
            let rows = at..at + len;
            batches.push(
                RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(StringArray::from(vec!["01JRUN"; len])),
                        Arc::new(StringArray::from(vec!["raw/x.sion"; len])),
                        Arc::new(Int32Array::from(vec![3; len])),
                        Arc::new(Int32Array::from_iter_values(
                            rows.clone().map(|i| (i / 4095) as i32),
                        )),
                        Arc::new(Int32Array::from_iter_values(
                            rows.clone().map(|i| (i % 4095) as i32),
                        )),
                        Arc::new(Int32Array::from_iter_values(
                            rows.clone().map(|i| (i * 7 % 4095) as i32),
                        )),
                        Arc::new(Float64Array::from_iter_values(
                            rows.clone().map(|i| f64::from((i as f32) * 1e-9)),
                        )),
                        Arc::new(StringArray::from_iter_values(
                            rows.clone().map(|i| format!("n{}", i / 4095 / 48)),
                        )),
                        Arc::new(StringArray::from_iter_values(
                            rows.map(|i| format!("n{}", i % 4095 / 48)),
                        )),
                    ],
                )
                .unwrap(),
            );
            at += len;
        }
        let data = encode_parquet("linktest_timings", &batches).unwrap();
        let meta = parquet::file::reader::FileReader::metadata(
            &parquet::file::serialized_reader::SerializedFileReader::new(data.clone()).unwrap(),
        )
        .clone();
        assert_eq!(meta.num_row_groups(), 2);
        assert_eq!(meta.row_group(0).num_rows(), ROW_GROUP_ROWS as i64);
        // run_id is the one-entry dictionary chunk with exact statistics.
        let c0 = meta.row_group(0).column(0);
        assert!(c0.compressed_size() < 100, "{}", c0.compressed_size());
        let back = read_back(data);
        let want = arrow::compute::concat_batches(&schema, &batches).unwrap();
        let got = arrow::compute::concat_batches(&schema, &back).unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn nullable_constant_and_small_tables_read_back_identically() {
        // linktest_runs has nullable Utf8 (git_hash) and Int64 columns; a few rows
        // go through the small-table path and still use the constant chunks.
        let schema = catalog::schema("linktest_ranks").unwrap();
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec!["r"; 5])),
                Arc::new(StringArray::from(vec!["s"; 5])),
                Arc::new(Int32Array::from(vec![0, 1, 2, 3, 4])),
                Arc::new(StringArray::from(vec!["h0", "h0", "h1", "h1", "h1"])),
                Arc::new(Int32Array::from(vec![Some(7); 5])),
            ],
        )
        .unwrap();
        let back = read_back(encode_parquet("linktest_ranks", std::slice::from_ref(&b)).unwrap());
        assert_eq!(back, vec![b]);
        let empty = encode_parquet("linktest_ranks", &[]).unwrap();
        assert!(read_back(empty).is_empty());
    }

    /// Int32, Int64 and Float64 columns, required and optional (without nulls),
    /// through the hand-written numeric chunks.
    fn numeric_batch(i32s: Vec<i32>, i64s: Vec<i64>, f64s: Vec<f64>) -> RecordBatch {
        use arrow::array::Int64Array;
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("b", DataType::Int64, true),
            Field::new("c", DataType::Float64, false),
            Field::new("d", DataType::Float64, true),
            Field::new("e", DataType::Int32, true),
        ]));
        let e: Vec<i32> = i32s.iter().rev().copied().collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(i32s)),
                Arc::new(Int64Array::from(i64s)),
                Arc::new(Float64Array::from(f64s.clone())),
                Arc::new(Float64Array::from(
                    f64s.into_iter().rev().collect::<Vec<_>>(),
                )),
                Arc::new(Int32Array::from(e)),
            ],
        )
        .unwrap()
    }

    /// Encodes `b` (split into batches at `cuts`) on the bulk path with
    /// `page_values` values per page, reads it back with arrow-rs and checks
    /// values (floats bit for bit) and chunk statistics.
    fn numeric_round_trip(b: &RecordBatch, cuts: &[usize], page_values: usize) {
        use arrow::array::AsArray;
        use arrow::datatypes::{Float64Type, Int32Type, Int64Type};
        use parquet::file::statistics::Statistics;
        let mut batches = Vec::new();
        let mut at = 0;
        for c in cuts.iter().copied().chain([b.num_rows()]) {
            let c = c.clamp(at, b.num_rows());
            batches.push(b.slice(at, c - at));
            at = c;
        }
        let data =
            encode_with_schema("numeric_test", b.schema(), &batches, true, page_values).unwrap();
        let reader =
            parquet::file::serialized_reader::SerializedFileReader::new(data.clone()).unwrap();
        let meta = parquet::file::reader::FileReader::metadata(&reader).clone();
        let back = read_back(data);
        let got = arrow::compute::concat_batches(&b.schema(), &back).unwrap();
        assert_eq!(got.num_rows(), b.num_rows());
        for col in [0, 4] {
            assert_eq!(
                got.column(col).as_primitive::<Int32Type>().values(),
                b.column(col).as_primitive::<Int32Type>().values(),
                "column {col}"
            );
        }
        assert_eq!(
            got.column(1).as_primitive::<Int64Type>().values(),
            b.column(1).as_primitive::<Int64Type>().values()
        );
        for col in [2, 3] {
            let bits = |a: &arrow::array::ArrayRef| -> Vec<u64> {
                a.as_primitive::<Float64Type>()
                    .values()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            };
            assert_eq!(bits(got.column(col)), bits(b.column(col)), "column {col}");
        }
        if b.num_rows() == 0 {
            return;
        }
        let rg = meta.row_group(0);
        // Every non-constant column chunk is the hand-written numeric one (no
        // dictionary page; constant integer chunks are a one-entry dictionary).
        for (i, c) in rg.columns().iter().enumerate() {
            let col = b.column(i);
            let constant = col.data_type().is_integer()
                && (1..col.len()).all(|r| {
                    arrow::array::make_comparator(col, col, Default::default()).unwrap()(0, r)
                        .is_eq()
                });
            assert_eq!(
                c.dictionary_page_offset().is_some(),
                constant,
                "{:?}",
                c.column_path()
            );
        }
        let a = b.column(0).as_primitive::<Int32Type>().values();
        match rg.column(0).statistics() {
            Some(Statistics::Int32(s)) => {
                assert_eq!(s.min_opt(), a.iter().min());
                assert_eq!(s.max_opt(), a.iter().max());
                assert_eq!(s.null_count_opt(), Some(0));
            }
            other => panic!("statistics of a: {other:?}"),
        }
        let c = b.column(2).as_primitive::<Float64Type>().values();
        let finite: Vec<f64> = c.iter().copied().filter(|v| !v.is_nan()).collect();
        match rg.column(2).statistics() {
            Some(Statistics::Double(s)) if finite.is_empty() => {
                assert_eq!(s.min_opt(), None);
            }
            Some(Statistics::Double(s)) => {
                let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                assert_eq!(s.min_opt().copied(), Some(lo));
                assert_eq!(s.max_opt().copied(), Some(hi));
            }
            other => panic!("statistics of c: {other:?}"),
        }
    }

    #[test]
    fn numeric_chunks_read_back_on_linktest_shapes() {
        // Runs, ascending sequences with a gap and a wrap, f32-widened times;
        // pages of 1,000 values so blocks, miniblocks and pages end unevenly.
        let n: usize = 4095 * 7 + 13;
        let from: Vec<i32> = (0..n).map(|i| (i / 4095) as i32).collect();
        let to: Vec<i64> = (0..n)
            .map(|i| (i % 4095) as i64 + i64::from(i % 4095 >= 3))
            .collect();
        let t: Vec<f64> = (0..n)
            .map(|i| f64::from((i as f32) * 1e-9 + 2e-6))
            .collect();
        let b = numeric_batch(from, to, t);
        numeric_round_trip(&b, &[100, 5000, 5001], 1000);
        numeric_round_trip(&b, &[], chunks::PAGE_VALUES);
    }

    #[test]
    fn numeric_chunks_handle_extremes() {
        let i32s = vec![i32::MIN, i32::MAX, 0, -1, i32::MAX, i32::MIN, 1, 1, 1];
        let i64s = vec![i64::MIN, i64::MAX, 0, -1, i64::MAX, i64::MIN, 1, 1, 1];
        let f64s = vec![
            f64::NAN,
            -0.0,
            0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            f64::MAX,
            -f64::MAX,
            1.5,
        ];
        let b = numeric_batch(i32s, i64s, f64s);
        for page in [1, 2, 5, 100] {
            numeric_round_trip(&b, &[3], page);
        }
        // A zero maximum is written as +0.0, a zero minimum as -0.0.
        let b = numeric_batch(vec![0; 3], vec![0; 3], vec![0.0, -0.0, 0.0]);
        numeric_round_trip(&b, &[], 100);
        // Only NaNs: no min/max.
        let b = numeric_batch(vec![0; 2], vec![0; 2], vec![f64::NAN; 2]);
        numeric_round_trip(&b, &[], 100);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn numeric_chunks_round_trip(
            rows in proptest::collection::vec(
                (proptest::prelude::any::<i32>(), proptest::prelude::any::<i64>(),
                 proptest::prelude::any::<f64>(), 0u8..4),
                1..700,
            ),
            cut in 0usize..700,
            page in 1usize..300,
        ) {
            // Mix full-range values with runs and small steps (bit widths 0..64).
            let mut prev = (0i32, 0i64);
            let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
            for (x, y, z, mode) in rows {
                let v = match mode {
                    0 => (x, y),
                    1 => prev,
                    2 => (prev.0.wrapping_add(x % 5), prev.1.wrapping_add(y % 1000)),
                    _ => (x >> 20, y >> 40),
                };
                prev = v;
                a.push(v.0);
                b.push(v.1);
                c.push(z);
            }
            numeric_round_trip(&numeric_batch(a, b, c), &[cut], page);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]
        /// String columns of any run structure (runs of 1 to 60, values that
        /// recur, empty and multi-byte strings, up to 600 distinct values),
        /// cut into batches anywhere, non-null and nullable (with nulls or
        /// without), read back as written, with min/max statistics equal to
        /// the column's: the run-length chunk where it applies, arrow-rs
        /// where not.
        #[test]
        fn string_columns_round_trip(
            pool in proptest::collection::vec("\\PC{0,24}", 1..600),
            runs in proptest::collection::vec((0usize..600, 1usize..60, 0u8..10), 1..120),
            cut in 0usize..4000,
        ) {
            use arrow::array::{Array, AsArray};
            use arrow::datatypes::{DataType, Field, Schema};
            use parquet::data_type::AsBytes;
            let mut plain: Vec<String> = Vec::new();
            let mut nullable: Vec<Option<String>> = Vec::new();
            for (k, n, null) in &runs {
                let v = &pool[k % pool.len()];
                for _ in 0..*n {
                    plain.push(v.clone());
                    nullable.push((*null != 0).then(|| v.clone()));
                }
            }
            let schema = Arc::new(Schema::new(vec![
                Field::new("s", DataType::Utf8, false),
                Field::new("t", DataType::Utf8, true),
                Field::new("u", DataType::Utf8, true),
            ]));
            let b = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(plain.clone())),
                    Arc::new(StringArray::from(nullable.clone())),
                    Arc::new(StringArray::from(plain.iter().map(|x| Some(x.as_str())).collect::<Vec<_>>())),
                ],
            )
            .unwrap();
            let cut = cut.min(b.num_rows());
            let batches = [b.slice(0, cut), b.slice(cut, b.num_rows() - cut)];
            let data = encode_with_schema("strings_test", schema.clone(), &batches, false, 1 << 17).unwrap();
            let meta = parquet::file::reader::FileReader::metadata(
                &parquet::file::serialized_reader::SerializedFileReader::new(data.clone()).unwrap(),
            )
            .clone();
            let got = arrow::compute::concat_batches(&schema, &read_back(data)).unwrap();
            proptest::prop_assert_eq!(got.num_rows(), plain.len());
            for col in [0, 2] {
                let c = got.column(col).as_string::<i32>();
                proptest::prop_assert_eq!(c.null_count(), 0);
                let back: Vec<&str> = (0..c.len()).map(|i| c.value(i)).collect();
                proptest::prop_assert_eq!(&back, &plain.iter().map(String::as_str).collect::<Vec<_>>());
            }
            let t = got.column(1).as_string::<i32>();
            let back: Vec<Option<&str>> = (0..t.len()).map(|i| t.is_valid(i).then(|| t.value(i))).collect();
            proptest::prop_assert_eq!(&back, &nullable.iter().map(|x| x.as_deref()).collect::<Vec<_>>());
            let (lo, hi) = (plain.iter().min().unwrap(), plain.iter().max().unwrap());
            for col in [0, 2] {
                let c = meta.row_group(0).column(col);
                let Some(parquet::file::statistics::Statistics::ByteArray(st)) = c.statistics() else {
                    panic!("column {col}: no statistics")
                };
                proptest::prop_assert_eq!(st.min_opt().unwrap().as_bytes(), lo.as_bytes());
                proptest::prop_assert_eq!(st.max_opt().unwrap().as_bytes(), hi.as_bytes());
            }
        }
    }

    /// Float64 columns given as pages built value by value
    /// ([`FloatPages`], pushed in uneven pieces, as `f64`s or as little-endian
    /// bytes) are the bytes the same values make through the batches, required
    /// and optional, one page or many, with NaN, -0.0 and infinities; a small
    /// table or a column of another type refuses them.
    #[test]
    fn float_pages_columns_are_the_bytes_of_their_values() {
        let n = 5000;
        let mut x = 99u64;
        let f: Vec<f64> = (0..n)
            .map(|i| match i {
                7 => f64::NAN,
                8 => -0.0,
                900 => f64::INFINITY,
                4001 => f64::NEG_INFINITY,
                _ => {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    1e-6 + (x % 100_000) as f64 * 1e-11
                }
            })
            .collect();
        let b = numeric_batch((0..n as i32).collect(), (0..n as i64).collect(), f.clone());
        let rev: Vec<f64> = f.iter().rev().copied().collect();
        for page in [256, 1 << 17] {
            let mut enc =
                ParquetEncoder::with_schema("numeric_test", b.schema(), true, page, n).unwrap();
            enc.write_row_group(std::slice::from_ref(&b)).unwrap();
            let want = enc.finish().unwrap();
            let pieces = |values: &[f64], optional: bool| {
                let mut p = FloatPages::new(page, optional);
                let mut at = 0;
                for (k, len) in [1usize, 15, 16, 17, 255, 256, 257, 1000]
                    .iter()
                    .cycle()
                    .enumerate()
                {
                    let end = (at + len).min(values.len());
                    if k % 2 == 0 {
                        p.push(&values[at..end]).unwrap();
                    } else {
                        let raw: Vec<u8> = values[at..end]
                            .iter()
                            .flat_map(|v| v.to_le_bytes())
                            .collect();
                        p.push_le(&raw).unwrap();
                    }
                    at = end;
                    if at == values.len() {
                        break;
                    }
                }
                assert_eq!(p.len(), values.len());
                p
            };
            let (mut c, mut d) = (pieces(&f, false), pieces(&rev, true));
            let mut enc =
                ParquetEncoder::with_schema("numeric_test", b.schema(), true, page, n).unwrap();
            enc.write_row_group_columns(&mut [
                GroupColumn::Arrays(vec![b.column(0).clone()]),
                GroupColumn::Arrays(vec![b.column(1).clone()]),
                GroupColumn::Float64Pages(&mut c),
                GroupColumn::Float64Pages(&mut d),
                GroupColumn::Arrays(vec![b.column(4).clone()]),
            ])
            .unwrap();
            assert!(c.is_empty() && d.is_empty(), "the pages were taken");
            let got = enc.finish().unwrap();
            assert!(got == want, "pages of {page}: the bytes differ");
            // Both went through FloatPages: the values read back by arrow-rs
            // are the check that the pages are right.
            let back = read_back(got);
            let back = arrow::compute::concat_batches(&b.schema(), &back).unwrap();
            for (col, values) in [(2, &f), (3, &rev)] {
                let bits: Vec<u64> = back
                    .column(col)
                    .as_any()
                    .downcast_ref::<Float64Array>()
                    .unwrap()
                    .values()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                let want: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
                assert_eq!(bits, want, "pages of {page}, column {col}");
            }
        }
        // Not whole values, another type, or a small table: refused.
        assert!(FloatPages::new(256, false).push_le(&[0; 12]).is_err());
        let small = numeric_batch(vec![1, 2], vec![1, 2], vec![1.0, 2.0]);
        for (bulk, col, want) in [
            (true, 1, "column b as Float64 pages for Int64"),
            (
                false,
                2,
                "column c as Float64 pages for Float64 in a small table",
            ),
        ] {
            let mut enc =
                ParquetEncoder::with_schema("numeric_test", small.schema(), bulk, 256, 2).unwrap();
            let mut p = FloatPages::new(256, false);
            p.push(&[1.0, 2.0]).unwrap();
            let mut cols: Vec<GroupColumn<'_>> = (0..5)
                .map(|i| GroupColumn::Arrays(vec![small.column(i).clone()]))
                .collect();
            cols[col] = GroupColumn::Float64Pages(&mut p);
            let e = enc.write_row_group_columns(&mut cols).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
        }
    }

    #[test]
    fn wrong_schema_is_refused() {
        let b = timings(2);
        let e = encode_parquet("linktest_ranks", &[b]).unwrap_err();
        assert!(e.to_string().contains("linktest_ranks"), "{e}");
    }

    /// Int32 columns given as runs are written as the same bytes as their
    /// values: bulk (hand-written delta pages, several pages per chunk) and
    /// small tables (arrow-rs), required and optional, constant columns.
    #[test]
    fn int_runs_columns_are_the_bytes_of_their_values() {
        use arrow::array::{Array, ArrayRef};
        let encode_both = |a: &IntRuns, e: &IntRuns, bulk: bool, page: usize| {
            let va = a.to_array().values().to_vec();
            let n = va.len();
            let b = numeric_batch(
                va,
                (0..n as i64).map(|i| i * 7 - 3).collect(),
                (0..n).map(|i| i as f64 * 1e-6).collect(),
            );
            let b = RecordBatch::try_new(b.schema(), {
                let mut c: Vec<ArrayRef> = b.columns().to_vec();
                c[4] = Arc::new(e.to_array());
                c
            })
            .unwrap();
            let mut enc =
                ParquetEncoder::with_schema("numeric_test", b.schema(), bulk, page, n).unwrap();
            enc.write_row_group(std::slice::from_ref(&b)).unwrap();
            let want = enc.finish().unwrap();
            let mut enc =
                ParquetEncoder::with_schema("numeric_test", b.schema(), bulk, page, n).unwrap();
            enc.write_row_group_columns(&mut [
                GroupColumn::Int32Runs(a),
                GroupColumn::Arrays(vec![b.column(1).clone()]),
                GroupColumn::Arrays(vec![
                    b.column(2).slice(0, 10),
                    b.column(2).slice(10, n - 10),
                ]),
                GroupColumn::Arrays(vec![b.column(3).clone()]),
                GroupColumn::Int32Runs(e),
            ])
            .unwrap();
            let got = enc.finish().unwrap();
            assert!(
                got == want,
                "bulk {bulk}, pages of {page}: the bytes differ"
            );
            read_back(want)
        };
        // Sender and partner ranks of 70 ranks (runs), a pseudo-random
        // column (one value at a time), a constant one, wrapping values.
        let (mut from, mut to, mut noise, mut constant) = (
            IntRuns::new(),
            IntRuns::new(),
            IntRuns::new(),
            IntRuns::new(),
        );
        let mut x = 12345u32;
        for r in 0..70 {
            from.push_run(r, 69, 0);
            to.push_run(0, r as usize, 1);
            to.push_run(r + 1, 69 - r as usize, 1);
            constant.push_run(4, 69, 0);
            for _ in 0..69 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                noise.push((x % 5000) as i32 - (if x.is_multiple_of(7) { i32::MAX } else { 0 }));
            }
        }
        for bulk in [true, false] {
            for page in [256, 1 << 17] {
                let back = encode_both(&from, &to, bulk, page);
                let got = arrow::compute::concat_batches(&back[0].schema(), &back).unwrap();
                assert_eq!(got.num_rows(), 70 * 69);
                assert_eq!(
                    got.column(4).as_any().downcast_ref::<Int32Array>().unwrap(),
                    &to.to_array()
                );
                encode_both(&noise, &constant, bulk, page);
                encode_both(&constant, &from, bulk, page);
            }
        }
        // A column of the wrong type or length is refused.
        let b = numeric_batch(vec![1, 2], vec![1, 2], vec![1.0, 2.0]);
        let mut enc =
            ParquetEncoder::with_schema("numeric_test", b.schema(), true, 256, 2).unwrap();
        let mut one = IntRuns::new();
        one.push(1);
        let e = enc
            .write_row_group_columns(&mut [
                GroupColumn::Int32Runs(&one),
                GroupColumn::Arrays(vec![b.column(1).clone()]),
                GroupColumn::Arrays(vec![b.column(2).clone()]),
                GroupColumn::Arrays(vec![b.column(3).clone()]),
                GroupColumn::Arrays(vec![b.column(4).clone()]),
            ])
            .unwrap_err();
        assert!(
            e.to_string().contains("column b has 2 rows, the others 1"),
            "{e}"
        );
        let e = enc
            .write_row_group_columns(&mut [
                GroupColumn::Arrays(vec![b.column(0).clone()]),
                GroupColumn::Int32Runs(&one),
                GroupColumn::Arrays(vec![b.column(2).clone()]),
                GroupColumn::Arrays(vec![b.column(3).clone()]),
                GroupColumn::Arrays(vec![b.column(4).clone()]),
            ])
            .unwrap_err();
        assert!(
            e.to_string().contains("column b as Int32 runs for Int64"),
            "{e}"
        );
    }

    /// A `Utf8` column given as runs of values gets the bytes of arrays of
    /// those values, in every shape the encoder tells apart: one value (also
    /// split over runs), runs of file names (one recurring), runs too short
    /// for a runs chunk and more distinct values than it takes (arrow-rs's
    /// writer, cut like the other columns), nullable or not, small or large
    /// tables.
    #[test]
    fn utf8_runs_columns_are_the_bytes_of_their_values() {
        use arrow::array::{Array, ArrayRef};
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, false),
            Field::new("t", DataType::Utf8, true),
            Field::new("v", DataType::Int32, false),
        ]));
        let both = |runs: &[(&str, usize)], bulk: bool, cuts: &[usize]| {
            let n: usize = runs.iter().map(|r| r.1).sum();
            assert_eq!(cuts.iter().sum::<usize>(), n);
            let values: Vec<&str> = runs
                .iter()
                .flat_map(|(v, k)| std::iter::repeat_n(*v, *k))
                .collect();
            let s: ArrayRef = Arc::new(StringArray::from(values.clone()));
            let t: ArrayRef = Arc::new(StringArray::from(
                values.iter().map(|v| Some(*v)).collect::<Vec<_>>(),
            ));
            let v: ArrayRef = Arc::new(Int32Array::from_iter_values((0..n as i32).map(|i| i * 3)));
            let mut at = 0;
            let pieces: Vec<(usize, usize)> = cuts
                .iter()
                .map(|&k| {
                    at += k;
                    (at - k, k)
                })
                .collect();
            let batches: Vec<RecordBatch> = pieces
                .iter()
                .map(|&(a, k)| {
                    RecordBatch::try_new(
                        schema.clone(),
                        vec![s.slice(a, k), t.slice(a, k), v.slice(a, k)],
                    )
                    .unwrap()
                })
                .collect();
            let mut enc =
                ParquetEncoder::with_schema("runs_test", schema.clone(), bulk, 256, n).unwrap();
            enc.write_row_group(&batches).unwrap();
            let want = enc.finish().unwrap();
            let mut enc =
                ParquetEncoder::with_schema("runs_test", schema.clone(), bulk, 256, n).unwrap();
            enc.write_row_group_columns(&mut [
                GroupColumn::Utf8Runs(runs.to_vec()),
                GroupColumn::Utf8Runs(runs.to_vec()),
                GroupColumn::Arrays(pieces.iter().map(|&(a, k)| v.slice(a, k)).collect()),
            ])
            .unwrap();
            let got = enc.finish().unwrap();
            assert!(
                got == want,
                "{} runs, bulk {bulk}: the bytes differ",
                runs.len()
            );
            let back = read_back(got);
            let back = arrow::compute::concat_batches(&schema, &back).unwrap();
            assert_eq!(back.column(0).as_ref(), s.as_ref());
            assert_eq!(back.column(1).as_ref(), t.as_ref());
        };
        let names: Vec<String> = (0..5000)
            .map(|i| format!("/data/r{i:04}/pingpong.sion"))
            .collect();
        for bulk in [false, true] {
            // One value, whole or in runs (an empty run among them), and "".
            both(&[("01JBENCH000000000000000001", 100)], bulk, &[100]);
            both(&[("a", 10), ("a", 0), ("a", 90)], bulk, &[40, 60]);
            both(&[("", 30)], bulk, &[30]);
            // Runs of file names, one recurring, runs crossing the cuts.
            let mut runs: Vec<(&str, usize)> =
                names[..50].iter().map(|n| (n.as_str(), 20)).collect();
            runs.push((names[3].as_str(), 9));
            both(&runs, bulk, &[333, 333, 343]);
            // Adjacent runs of one value are one run.
            let split = [
                (names[0].as_str(), 20),
                (names[0].as_str(), 20),
                (names[1].as_str(), 40),
            ];
            both(&split, bulk, &[80]);
            // Runs of 2 rows: no runs chunk, arrow-rs's writer.
            let short: Vec<(&str, usize)> = names[..100].iter().map(|n| (n.as_str(), 2)).collect();
            both(&short, bulk, &[37, 63, 100]);
        }
        // More distinct values than a runs chunk takes (8 rows each).
        let many: Vec<(&str, usize)> = names[..4097].iter().map(|n| (n.as_str(), 8)).collect();
        both(&many, true, &[32776]);
        // A runs column of the wrong type or length is refused.
        let mut enc =
            ParquetEncoder::with_schema("runs_test", schema.clone(), true, 256, 2).unwrap();
        let v: ArrayRef = Arc::new(Int32Array::from(vec![1, 2]));
        let e = enc
            .write_row_group_columns(&mut [
                GroupColumn::Utf8Runs(vec![("x", 2)]),
                GroupColumn::Utf8Runs(vec![("x", 1)]),
                GroupColumn::Arrays(vec![v.clone()]),
            ])
            .unwrap_err();
        assert!(
            e.to_string().contains("column t has 1 rows, the others 2"),
            "{e}"
        );
        let e = enc
            .write_row_group_columns(&mut [
                GroupColumn::Utf8Runs(vec![("x", 2)]),
                GroupColumn::Utf8Runs(vec![("x", 2)]),
                GroupColumn::Utf8Runs(vec![("x", 2)]),
            ])
            .unwrap_err();
        assert!(
            e.to_string().contains("column v as Utf8 runs for Int32"),
            "{e}"
        );
        assert_eq!(v.len(), 2);
    }
}
