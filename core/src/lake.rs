//! The lake: the object store handle (local directory or S3-compatible), Parquet
//! encoding checked against the catalog ([`encode`]), the offline writer used by
//! `benchlake ingest ... --out DIR`, and reading a run's rows of a table back
//! ([`Lake::read_run_rows`], in `read`).
//!
//! Writers never expose partial data: a Parquet object is encoded fully in memory
//! (or in a local temp file) and then put in one request; object stores make a
//! single put atomic, and the local store writes to a temp file and renames.
use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::catalog;
use crate::error::{Error, Result};
use crate::layout;

pub mod bundle;
mod chunks;
pub mod compact;
mod encode;
mod int_runs;
pub mod migrate;
mod read;
#[cfg(test)]
mod tests;
pub use chunks::FloatPages;
pub use encode::*;
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
        date: &str,
    ) -> Result<()> {
        let bad = |m: String| Error::invalid("staged object", format!("{key}: {m}"));
        let days = layout::date_days(date)?;
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
        check_file_schema(table, &schema).map_err(|e| bad(e.to_string()))?;
        let n = fm.num_rows();
        let in_groups: i64 = md.row_groups().iter().map(|g| g.num_rows()).sum();
        if n < 0 || n as u64 != rows || in_groups != n {
            return Err(bad(format!(
                "holds {n} rows ({in_groups} in its row groups), the worker claimed {rows}"
            )));
        }
        check_date_statistics(&md, days, 0..md.num_row_groups())
            .map_err(|m| bad(format!("column 'date': {m} (the run's day is {date})")))?;
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
            .map(|o| EncodedTable::encode(o, date))
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

/// SHA-256 of bytes, lower-case hex.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(data))
}

/// Checks by the footer's statistics alone that every row of a file holds
/// `days` in its last column (`date`): each row group's chunk has min = max =
/// `days` and no nulls (the encoders write these statistics; a chunk without
/// them is refused, since its values could not be checked without reading).
pub(crate) fn check_date_statistics(
    md: &parquet::file::metadata::ParquetMetaData,
    days: i32,
    groups: std::ops::Range<usize>,
) -> std::result::Result<(), String> {
    use parquet::file::statistics::Statistics;
    for (g, rg) in md.row_groups().iter().enumerate() {
        if !groups.contains(&g) {
            continue;
        }
        let Some(col) = rg.columns().last() else {
            return Err(format!("row group {g} has no columns"));
        };
        if rg.num_rows() == 0 {
            continue;
        }
        match col.statistics() {
            Some(Statistics::Int32(st)) => {
                let (min, max) = (st.min_opt(), st.max_opt());
                if min != Some(&days) || max != Some(&days) || st.null_count_opt().unwrap_or(0) != 0
                {
                    return Err(format!(
                        "row group {g} (chunk at byte offset {}) holds days {min:?}..{max:?}, not only {days}",
                        col.byte_range().0
                    ));
                }
            }
            _ => {
                return Err(format!(
                    "row group {g} (chunk at byte offset {}) has no Int32 statistics",
                    col.byte_range().0
                ));
            }
        }
    }
    Ok(())
}
