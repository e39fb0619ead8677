//! The lake: the object store handle (local directory or S3-compatible), Parquet
//! encoding checked against the catalog, and the offline writer used by
//! `benchlake ingest ... --out DIR`.
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
        let mut encoded = Vec::with_capacity(outputs.len());
        for o in outputs {
            let key = layout::table_key(&o.table, date, run_id, job_id, &o.part)?;
            encoded.push((key, encode_parquet(&o.table, &o.batches)?));
        }
        let mut keys = Vec::new();
        for (key, data) in encoded {
            self.put(&key, data).await?;
            keys.push(key);
        }
        Ok(keys)
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
    use parquet::arrow::arrow_writer::{ArrowRowGroupWriterFactory, compute_leaves};
    use parquet::arrow::{ArrowSchemaConverter, add_encoded_arrow_schema_to_metadata};
    use parquet::file::writer::SerializedFileWriter;

    let schema = catalog::schema(table)?;
    for b in batches {
        check_schema(table, &b.schema())?;
    }
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let mut props = if rows >= BULK_ROWS {
        bulk_writer_properties(&schema)
    } else {
        writer_properties()
    };
    add_encoded_arrow_schema_to_metadata(&schema, &mut props);
    let parquet_schema = ArrowSchemaConverter::new()
        .with_coerce_types(props.coerce_types())
        .convert(&schema)?;
    let mut buf = Vec::new();
    let mut file =
        SerializedFileWriter::new(&mut buf, parquet_schema.root_schema_ptr(), Arc::new(props))?;
    let factory = ArrowRowGroupWriterFactory::new(&file, schema.clone());
    let mut cache = ConstantCache::default();

    // Cut the batches into row groups of ROW_GROUP_ROWS rows.
    let mut groups: Vec<Vec<RecordBatch>> = Vec::new();
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
                groups.push(std::mem::take(&mut pending));
                pending_rows = 0;
            }
        }
    }
    if pending_rows > 0 {
        groups.push(pending);
    }

    for (index, group) in groups.iter().enumerate() {
        let group_rows: usize = group.iter().map(|b| b.num_rows()).sum();
        let writers = factory.create_column_writers(index)?;
        let mut rg = file.next_row_group()?;
        for ((i, field), mut w) in schema.fields().iter().enumerate().zip(writers) {
            let cols: Vec<&arrow::array::ArrayRef> = group.iter().map(|b| b.column(i)).collect();
            let descr = parquet_schema.column(i);
            if let Some(value) = cache.constant(&cols)
                && let Some((data, close)) = constant_chunk(descr, &value, group_rows)?
            {
                rg.append_column(&data, close)?;
                continue;
            }
            for c in cols {
                for leaf in compute_leaves(field, c)? {
                    w.write(&leaf)?;
                }
            }
            w.close()?.append_to_row_group(&mut rg)?;
        }
        rg.close()?;
    }
    file.close()?;
    Ok(Bytes::from(buf))
}

/// The single value of a constant column.
#[derive(Debug, Clone, PartialEq)]
enum ConstValue {
    Utf8(Vec<u8>),
    Int32(i32),
    Int64(i64),
}

/// Remembers string buffers already proven constant: the constant columns of
/// large tables are slices of one repeated array, so the byte comparison runs
/// once per buffer and not once per row group.
#[derive(Default)]
struct ConstantCache {
    /// (values buffer address, offsets address, rows verified, value)
    verified: Vec<(usize, usize, usize, Vec<u8>)>,
}

impl ConstantCache {
    /// The value when every array holds the same single non-null value.
    fn constant(&mut self, cols: &[&arrow::array::ArrayRef]) -> Option<ConstValue> {
        let mut value: Option<ConstValue> = None;
        for c in cols {
            if c.is_empty() {
                continue;
            }
            if c.null_count() > 0 {
                return None;
            }
            let v = self.constant_one(c)?;
            match &value {
                Some(prev) if *prev != v => return None,
                _ => value = Some(v),
            }
        }
        value
    }

    fn constant_one(&mut self, c: &arrow::array::ArrayRef) -> Option<ConstValue> {
        use arrow::array::AsArray;
        use arrow::datatypes::{DataType, Int32Type, Int64Type};
        match c.data_type() {
            DataType::Int32 => {
                let v = c.as_primitive::<Int32Type>().values();
                let first = *v.first()?;
                all_equal(v, first).then_some(ConstValue::Int32(first))
            }
            DataType::Int64 => {
                let v = c.as_primitive::<Int64Type>().values();
                let first = *v.first()?;
                all_equal(v, first).then_some(ConstValue::Int64(first))
            }
            DataType::Utf8 => {
                let s = c.as_string::<i32>();
                let offsets = s.value_offsets();
                let values = s.values().as_slice();
                let rows = arrow::array::Array::len(s);
                let key = (values.as_ptr() as usize, offsets.as_ptr() as usize);
                for (vp, op, n, val) in &self.verified {
                    if (*vp, *op) == key && rows <= *n {
                        return Some(ConstValue::Utf8(val.clone()));
                    }
                }
                let (o0, o1) = (*offsets.first()?, *offsets.get(1)?);
                let w = o1.checked_sub(o0)?;
                // Every value has the same length...
                let same_len = offsets
                    .windows(2)
                    .fold(true, |ok, p| ok & (p[1].wrapping_sub(p[0]) == w));
                if !same_len {
                    return None;
                }
                let start = usize::try_from(o0).ok()?;
                let end = usize::try_from(*offsets.last()?).ok()?;
                let bytes = values.get(start..end)?;
                let w = usize::try_from(w).ok()?;
                // ... and the bytes repeat with period w.
                if w > 0 && bytes.get(w..)? != bytes.get(..bytes.len() - w)? {
                    return None;
                }
                let val = bytes.get(..w)?.to_vec();
                self.verified.push((key.0, key.1, rows, val.clone()));
                Some(ConstValue::Utf8(val))
            }
            _ => None,
        }
    }
}

/// True when every element equals `first` (branch-free inner loop, early exit
/// per block so non-constant columns cost little).
fn all_equal<T: Copy + PartialEq>(v: &[T], first: T) -> bool {
    v.chunks(4096)
        .all(|c| c.iter().fold(true, |ok, x| ok & (*x == first)))
}

/// ULEB128 varint.
fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A column chunk of `rows` copies of `value`: a PLAIN dictionary page with the
/// value and one v1 data page whose dictionary indices (and, for a nullable
/// column, definition levels) are a single RLE run. Uncompressed: it is a few
/// dozen bytes. `None` for columns this does not cover (nested or repeated).
fn constant_chunk(
    descr: parquet::schema::types::ColumnDescPtr,
    value: &ConstValue,
    rows: usize,
) -> Result<Option<(Bytes, parquet::column::writer::ColumnCloseResult)>> {
    use parquet::basic::{Encoding, Type as PhysicalType};
    use parquet::column::page::{CompressedPage, Page, PageWriter};
    use parquet::column::writer::ColumnCloseResult;
    use parquet::data_type::ByteArray;
    use parquet::file::metadata::ColumnChunkMetaData;
    use parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
    use parquet::file::statistics::{Statistics, ValueStatistics};
    use parquet::file::writer::{SerializedPageWriter, TrackedWrite};

    if descr.max_rep_level() != 0 || descr.max_def_level() > 1 || rows == 0 {
        return Ok(None);
    }
    let (dict, stats) = match (value, descr.physical_type()) {
        (ConstValue::Utf8(b), PhysicalType::BYTE_ARRAY) => {
            let mut d = (b.len() as u32).to_le_bytes().to_vec();
            d.extend_from_slice(b);
            let v = ByteArray::from(b.clone());
            let s = ValueStatistics::new(Some(v.clone()), Some(v), None, Some(0), false);
            (d, Statistics::ByteArray(s))
        }
        (ConstValue::Int32(v), PhysicalType::INT32) => (
            v.to_le_bytes().to_vec(),
            Statistics::int32(Some(*v), Some(*v), None, Some(0), false),
        ),
        (ConstValue::Int64(v), PhysicalType::INT64) => (
            v.to_le_bytes().to_vec(),
            Statistics::int64(Some(*v), Some(*v), None, Some(0), false),
        ),
        _ => return Ok(None),
    };
    let run = (rows as u64) << 1;
    let mut data = Vec::with_capacity(32);
    if descr.max_def_level() == 1 {
        // Definition levels (v1 page): u32 length, then an RLE run of 1s (bit width 1).
        let mut levels = Vec::new();
        push_varint(&mut levels, run);
        levels.push(1);
        data.extend_from_slice(&(levels.len() as u32).to_le_bytes());
        data.extend_from_slice(&levels);
    }
    // Dictionary indices: bit width 1, an RLE run of index 0.
    data.push(1);
    push_varint(&mut data, run);
    data.push(0);

    let mut sink = TrackedWrite::new(Vec::with_capacity(128));
    let (dict_spec, data_spec) = {
        let mut pages = SerializedPageWriter::new(&mut sink);
        let dict_len = dict.len();
        let dict_spec = pages.write_page(CompressedPage::new(
            Page::DictionaryPage {
                buf: Bytes::from(dict),
                num_values: 1,
                encoding: Encoding::PLAIN,
                is_sorted: true,
            },
            dict_len,
        ))?;
        let data_len = data.len();
        let data_spec = pages.write_page(CompressedPage::new(
            Page::DataPage {
                buf: Bytes::from(data),
                num_values: u32::try_from(rows)
                    .map_err(|_| Error::Config(format!("{rows} rows in one row group")))?,
                encoding: Encoding::RLE_DICTIONARY,
                def_level_encoding: Encoding::RLE,
                rep_level_encoding: Encoding::RLE,
                statistics: None,
            },
            data_len,
        ))?;
        (dict_spec, data_spec)
    };
    let bytes = sink.into_inner()?;
    let total = bytes.len() as i64;
    let uncompressed = (dict_spec.uncompressed_size + data_spec.uncompressed_size) as i64;
    let metadata = ColumnChunkMetaData::builder(descr)
        .set_compression_codec(Compression::UNCOMPRESSED.into())
        .set_encodings(vec![
            Encoding::PLAIN,
            Encoding::RLE,
            Encoding::RLE_DICTIONARY,
        ])
        .set_num_values(rows as i64)
        .set_total_compressed_size(total)
        .set_total_uncompressed_size(uncompressed)
        .set_dictionary_page_offset(Some(dict_spec.offset as i64))
        .set_data_page_offset(data_spec.offset as i64)
        .set_statistics(stats)
        .build()?;
    let offset_index = OffsetIndexMetaData {
        page_locations: vec![PageLocation {
            offset: data_spec.offset as i64,
            compressed_page_size: data_spec.compressed_size as i32,
            first_row_index: 0,
        }],
        unencoded_byte_array_data_bytes: None,
    };
    Ok(Some((
        Bytes::from(bytes),
        ColumnCloseResult {
            bytes_written: total as u64,
            rows_written: rows as u64,
            metadata,
            bloom_filter: None,
            column_index: None,
            offset_index: Some(offset_index),
        },
    )))
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
            ],
        )
        .unwrap()
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

    fn read_back(data: Bytes) -> Vec<RecordBatch> {
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data)
            .unwrap()
            .build()
            .unwrap()
            .map(|b| b.unwrap())
            .collect()
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
                            rows.map(|i| f64::from((i as f32) * 1e-9)),
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

    #[test]
    fn wrong_schema_is_refused() {
        let b = timings(2);
        let e = encode_parquet("linktest_ranks", &[b]).unwrap_err();
        assert!(e.to_string().contains("linktest_ranks"), "{e}");
    }
}
