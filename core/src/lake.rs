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
use parquet::arrow::ArrowWriter;
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

/// Encodes batches of `table` into one Parquet file (catalog schema enforced).
pub fn encode_parquet(table: &str, batches: &[RecordBatch]) -> Result<Bytes> {
    let schema = catalog::schema(table)?;
    for b in batches {
        check_schema(table, &b.schema())?;
    }
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, schema, Some(writer_properties()))?;
    for b in batches {
        w.write(b)?;
    }
    w.close()?;
    Ok(Bytes::from(buf))
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

    #[test]
    fn wrong_schema_is_refused() {
        let b = timings(2);
        let e = encode_parquet("linktest_ranks", &[b]).unwrap_err();
        assert!(e.to_string().contains("linktest_ranks"), "{e}");
    }
}
