//! Compaction: many small files of a table's month merged into one
//! `tables/{table}/year=…/month=…/compacted-{first date}-{id}.parquet`
//! ([`layout::compacted_key`]), and the readers that find a run's rows in
//! such a file (docs/architecture.md, "Compaction").
//!
//! A merged file holds the rows of its inputs in key order (by day, then
//! run, then job), the catalog's columns then `date`; a row group never
//! spans two days, so `WHERE date = …` skips the others by their
//! statistics. Its footer says what it holds and replaces
//! ([`COMPACTED_META`]): readers that list the lake learn which runs a
//! merged file holds from the footer alone, and a merge stopped between
//! the upload of the merged file and the deletes of its inputs is finished
//! by the next one (inputs that a merged file already replaces are deleted,
//! not merged twice).
use std::collections::BTreeSet;

use arrow::array::{Array, AsArray, RecordBatch};
use bytes::Bytes;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};

use super::Lake;
use super::encode::writer_properties;
use crate::catalog;
use crate::error::{Error, Result};
use crate::layout::{self, TableFile};

/// Listings taken again when a listed file is gone before it is read.
pub const LISTING_ATTEMPTS: usize = 5;

/// The footer key of a merged file's [`CompactedMeta`] (JSON).
pub const COMPACTED_META: &str = "benchlake.compacted";

/// What a merged file holds: each file merged into it, with the row groups
/// that hold its rows (one input's rows never share a row group with
/// another's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactedMeta {
    /// The merged files, in the order of their rows.
    pub parts: Vec<MergedPart>,
    /// Earlier merged files whose parts this one took over.
    #[serde(default)]
    pub merged_from: Vec<String>,
}

/// One file merged into a merged file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergedPart {
    /// Its key (gone once the merge finished).
    pub key: String,
    /// Its run.
    pub run_id: String,
    /// Its job.
    pub job_id: String,
    /// The run's day.
    pub date: String,
    /// Its rows.
    pub rows: u64,
    /// Its row groups in the merged file: `first_group..first_group + groups`.
    pub first_group: usize,
    /// How many.
    pub groups: usize,
}

impl CompactedMeta {
    /// `(run_id, date)` of the runs with rows in the file, sorted, once each.
    pub fn runs(&self) -> Vec<(String, String)> {
        self.parts
            .iter()
            .map(|p| (p.run_id.clone(), p.date.clone()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }
}

/// A table object and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// Its key.
    pub key: String,
    /// Its size.
    pub bytes: u64,
    /// `(run_id, date)` of its runs: one for a committed part, those of its
    /// footer for a merged file.
    pub runs: Vec<(String, String)>,
    /// A merged file's footer (None for a committed part).
    pub merged: Option<CompactedMeta>,
}

/// What one merge did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    /// The merged file (empty when nothing was merged).
    pub key: String,
    /// Inputs (parts and earlier merged files) merged and then deleted.
    pub inputs: usize,
    /// Inputs found already merged by an earlier, stopped merge and deleted.
    pub leftovers: usize,
    /// Rows of the merged file.
    pub rows: u64,
    /// Bytes of the inputs.
    pub in_bytes: u64,
    /// Bytes of the merged file.
    pub out_bytes: u64,
}

/// Rows per batch of [`Lake::read_part`] (a nightly part is far smaller
/// than a row group).
pub const PART_BATCH_ROWS: usize = 8 * 1024;

impl Lake {
    /// The objects of `table` (of `date`'s month only when given) with the
    /// runs each holds, in key order; merged files' runs come from their
    /// footers (one ranged read each). Objects that are no table file are
    /// left out. With `date`, only files holding rows of that day are kept.
    pub async fn table_files(&self, table: &str, date: Option<&str>) -> Result<Vec<ListedFile>> {
        // A merged file listed and then replaced by a newer merge before its
        // footer was read: the listing is taken again.
        let mut attempt = 0;
        loop {
            match self.table_files_once(table, date).await {
                Err(Error::Gone { .. }) if attempt < LISTING_ATTEMPTS => attempt += 1,
                r => return r,
            }
        }
    }

    async fn table_files_once(&self, table: &str, date: Option<&str>) -> Result<Vec<ListedFile>> {
        let prefix = match date {
            Some(d) => layout::month_table_prefix(table, d)?,
            None => layout::table_prefix(table)?,
        };
        let mut out = Vec::new();
        for (key, bytes) in self.list(&prefix).await? {
            let f = match layout::parse_table_file(&key) {
                Some(TableFile::Part(k)) if k.table == table => ListedFile {
                    runs: vec![(k.run_id.to_string(), k.date.to_string())],
                    key,
                    bytes,
                    merged: None,
                },
                Some(TableFile::Compacted { table: t, .. }) if t == table => {
                    let meta = self.compacted_meta(&key).await?;
                    ListedFile {
                        runs: meta.runs(),
                        key,
                        bytes,
                        merged: Some(meta),
                    }
                }
                _ => continue,
            };
            if date.is_none_or(|d| f.runs.iter().any(|r| r.1 == d)) {
                out.push(f);
            }
        }
        // A part (or an earlier merged file) that a listed merged file holds
        // is left out: between a merge and the delete of its inputs (a
        // coordinator's grace period, a stopped offline merge) its rows
        // would otherwise be read twice.
        let replaced: BTreeSet<String> = out
            .iter()
            .filter_map(|f| f.merged.as_ref())
            .flat_map(|m| {
                m.parts
                    .iter()
                    .map(|p| p.key.clone())
                    .chain(m.merged_from.iter().cloned())
            })
            .collect();
        out.retain(|f| !replaced.contains(&f.key));
        Ok(out)
    }

    /// The rows of run `run_id` (of its job `job_id` when given) in the
    /// table object `f`: all of a part, the row groups of the run's (job's)
    /// parts of a merged file.
    pub async fn read_run_file(
        &self,
        f: &ListedFile,
        run_id: &str,
        job_id: Option<&str>,
    ) -> Result<Vec<RecordBatch>> {
        let gone = |e: Error| match e {
            Error::ObjectStore(object_store::Error::NotFound { .. }) => {
                Error::Gone { key: f.key.clone() }
            }
            e => e,
        };
        let Some(meta) = &f.merged else {
            return self.read_parquet(&f.key).await.map_err(gone);
        };
        let groups: Vec<usize> = meta
            .parts
            .iter()
            .filter(|p| p.run_id == run_id && job_id.is_none_or(|j| j == p.job_id))
            .flat_map(|p| p.first_group..p.first_group + p.groups)
            .collect();
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let data = self.get(&f.key).await.map_err(gone)?;
        let bad = |e: &dyn std::fmt::Display| Error::Decode {
            key: f.key.clone(),
            message: e.to_string(),
        };
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data)
            .map_err(|e| bad(&e))?;
        let n = reader.metadata().num_row_groups();
        if let Some(g) = groups.iter().find(|g| **g >= n) {
            return Err(bad(&format!(
                "its footer names row group {g} of {n} ('{COMPACTED_META}')"
            )));
        }
        let batches: Vec<RecordBatch> = reader
            .with_row_groups(groups)
            .build()
            .map_err(|e| bad(&e))?
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad(&e))?;
        // The footer must not lie: every row read is of the run.
        for b in &batches {
            check_run(&f.key, b, run_id)?;
        }
        Ok(batches)
    }

    /// The [`CompactedMeta`] in the footer of the merged file `key`.
    pub async fn compacted_meta(&self, key: &str) -> Result<CompactedMeta> {
        let md = self.footer(key).await?;
        let text = md
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|e| e.key == COMPACTED_META))
            .and_then(|e| e.value.clone())
            .ok_or_else(|| Error::Decode {
                key: key.into(),
                message: format!("a merged file without '{COMPACTED_META}' in its footer"),
            })?;
        serde_json::from_str(&text).map_err(|e| Error::Decode {
            key: key.into(),
            message: format!("footer '{COMPACTED_META}': {e}"),
        })
    }

    async fn footer(&self, key: &str) -> Result<parquet::file::metadata::ParquetMetaData> {
        let size = self
            .size(key)
            .await?
            .ok_or_else(|| Error::Gone { key: key.into() })?;
        let bad = |m: String| Error::Decode {
            key: key.into(),
            message: m,
        };
        if size < 12 {
            return Err(bad(format!("{size} bytes is too small for a Parquet file")));
        }
        let tail = self
            .store
            .get_range(&self.path(key), size - 8..size)
            .await?;
        if &tail[4..] != b"PAR1" {
            return Err(bad(format!("no footer magic at byte offset {}", size - 4)));
        }
        let len = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) as u64;
        if len + 12 > size {
            return Err(bad(format!(
                "footer length {len} at byte offset {} exceeds the object",
                size - 8
            )));
        }
        let meta = self
            .store
            .get_range(&self.path(key), size - 8 - len..size - 8)
            .await?;
        parquet::file::metadata::ParquetMetaDataReader::decode_metadata(&meta)
            .map_err(|e| bad(format!("footer at byte offset {}: {e}", size - 8 - len)))
    }

    /// Merges the files of `table` in `date`'s month that are smaller than
    /// `small_bytes` into one, when at least `min_files` of them are
    /// committed parts (or two are merged files): the parts and the month's
    /// earlier merged files, so a month compacted every night keeps one
    /// merged file and fewer than `min_files` parts. The merged file is
    /// uploaded and read back (rows and parts checked against its inputs)
    /// before any input is deleted; files that a merged file already
    /// replaces (a merge stopped before its deletes) are deleted first. `id`
    /// names the merged file (a ULID; a retried merge passes the same id:
    /// finding its file, it only finishes the deletes). With `dry_run`
    /// nothing is written or deleted; the result counts what would merge.
    pub async fn compact_month(
        &self,
        table: &str,
        date: &str,
        id: &str,
        small_bytes: u64,
        min_files: usize,
        dry_run: bool,
    ) -> Result<Merged> {
        let mut done = Merged::default();
        crate::ids::validate_id("id", id)?;
        let prefix = layout::month_table_prefix(table, date)?;
        let listed = self.list(&prefix).await?;
        let mut merged = Vec::new();
        for (k, bytes) in &listed {
            if let Some(TableFile::Compacted { table: t, .. }) = layout::parse_table_file(k)
                && t == table
            {
                merged.push((k.clone(), *bytes, self.compacted_meta(k).await?));
            }
        }
        // Leftovers of a stopped merge: files a merged file already holds.
        let replaced: BTreeSet<String> = merged
            .iter()
            .flat_map(|(_, _, m)| {
                m.parts
                    .iter()
                    .map(|p| p.key.clone())
                    .chain(m.merged_from.iter().cloned())
            })
            .collect();
        let mut inputs = Vec::new();
        let mut parts = 0usize;
        for (k, bytes) in &listed {
            if replaced.contains(k) {
                if !dry_run {
                    self.delete(k).await?;
                }
                done.leftovers += 1;
                continue;
            }
            if *bytes >= small_bytes {
                continue;
            }
            match layout::parse_table_file(k) {
                Some(TableFile::Part(p)) if p.table == table => {
                    parts += 1;
                    inputs.push(Input {
                        key: k.clone(),
                        bytes: *bytes,
                        date: p.date.to_string(),
                        what: What::Part {
                            run_id: p.run_id.to_string(),
                            job_id: p.job_id.to_string(),
                        },
                    });
                }
                Some(TableFile::Compacted {
                    table: t,
                    first_date,
                    ..
                }) if t == table => {
                    let meta = merged
                        .iter()
                        .find(|m| m.0 == *k)
                        .map(|m| m.2.clone())
                        .unwrap_or_default();
                    inputs.push(Input {
                        key: k.clone(),
                        bytes: *bytes,
                        date: first_date.to_string(),
                        what: What::Merged(meta),
                    });
                }
                _ => {}
            }
        }
        let merged_inputs = inputs.len() - parts;
        let enough = parts >= min_files.max(1) || merged_inputs >= 2;
        let retried = merged.iter().any(|(k, _, _)| {
            matches!(layout::parse_table_file(k), Some(TableFile::Compacted { id: i, .. }) if i == id)
        });
        if !enough || inputs.len() < 2 || retried {
            return Ok(done);
        }
        inputs.sort_by(|a, b| (&a.date, &a.key).cmp(&(&b.date, &b.key)));
        let first_date = inputs[0].date.clone();
        let key = layout::compacted_key(table, &first_date, id)?;
        done.inputs = inputs.len();
        done.in_bytes = inputs.iter().map(|i| i.bytes).sum();
        if dry_run {
            return Ok(done);
        }
        let (data, meta) = self.merge(table, &inputs).await?;
        let rows: u64 = meta.parts.iter().map(|p| p.rows).sum();
        done.out_bytes = data.len() as u64;
        self.put(&key, data).await?;
        // Read back: the footer as written, every row there.
        let back_meta = self.compacted_meta(&key).await?;
        let back: u64 = self
            .read_parquet(&key)
            .await?
            .iter()
            .map(|b| b.num_rows() as u64)
            .sum();
        if back != rows || back_meta != meta {
            return Err(Error::Decode {
                key,
                message: format!(
                    "read back {back} rows of {} parts, merged {rows} rows of {}",
                    back_meta.parts.len(),
                    meta.parts.len()
                ),
            });
        }
        for i in &inputs {
            self.delete(&i.key).await?;
        }
        done.key = key;
        done.rows = rows;
        Ok(done)
    }

    /// The merged file of `inputs`, in key order (see [`Self::merge_parts`]);
    /// the footer also names the earlier merged files it replaces.
    async fn merge(&self, table: &str, inputs: &[Input]) -> Result<(Bytes, CompactedMeta)> {
        let mut sources = Vec::new();
        let mut merged_from = Vec::new();
        for i in inputs {
            match &i.what {
                What::Part { run_id, job_id } => sources.push(PartSource {
                    key: i.key.clone(),
                    run_id: run_id.clone(),
                    job_id: job_id.clone(),
                    date: i.date.clone(),
                    object: i.key.clone(),
                    groups: None,
                    rows: None,
                }),
                What::Merged(old) => {
                    sources.extend(old.parts.iter().map(|p| PartSource::in_merged(&i.key, p)));
                    merged_from.push(i.key.clone());
                    merged_from.extend(old.merged_from.iter().cloned());
                }
            }
        }
        self.merge_parts(table, &sources, merged_from).await
    }

    /// One merged file of `sources`, in their order: the table's file
    /// columns, each part's rows in row groups of their own, and the footer's
    /// [`CompactedMeta`] (written last, once the row groups are known; it
    /// lists `merged_from` as the earlier merged files replaced). Every row
    /// copied is checked to be of its part's run, and a part with
    /// [`PartSource::rows`] must hold that many. Consecutive parts of one
    /// merged object fetch it once.
    pub async fn merge_parts(
        &self,
        table: &str,
        sources: &[PartSource],
        merged_from: Vec<String>,
    ) -> Result<(Bytes, CompactedMeta)> {
        let schema = catalog::file_schema(table)?;
        let werr = |e: parquet::errors::ParquetError| Error::Config(format!("{table}: {e}"));
        let mut w = parquet::arrow::ArrowWriter::try_new(
            Vec::new(),
            schema.clone(),
            Some(writer_properties()),
        )
        .map_err(werr)?;
        let mut meta = CompactedMeta {
            merged_from,
            ..CompactedMeta::default()
        };
        let mut fetched: Option<(String, Bytes)> = None;
        for p in sources {
            let first_group = w.flushed_row_groups().len();
            let rows = match p.groups {
                None => {
                    let s = self
                        .parquet_stream(&p.object, super::encode::ROW_GROUP_ROWS)
                        .await?;
                    copy(&mut w, &schema, &p.object, &p.run_id, s).await?
                }
                Some((first, n)) => {
                    let data = match &fetched {
                        Some((k, d)) if *k == p.object => d.clone(),
                        _ => {
                            let d = self.get(&p.object).await?;
                            fetched = Some((p.object.clone(), d.clone()));
                            d
                        }
                    };
                    let bad = |e: &dyn std::fmt::Display| Error::Decode {
                        key: p.object.clone(),
                        message: e.to_string(),
                    };
                    let builder =
                        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                            data,
                        )
                        .map_err(|e| bad(&e))?;
                    let total = builder.metadata().num_row_groups();
                    if first + n > total {
                        return Err(bad(&format!(
                            "part {} is said to be row groups {first}..{} of {total}",
                            p.key,
                            first + n
                        )));
                    }
                    let reader = builder
                        .with_row_groups((first..first + n).collect())
                        .build()
                        .map_err(|e| bad(&e))?;
                    let key = p.object.clone();
                    let s = futures::stream::iter(reader.map(move |b| {
                        b.map_err(|e| Error::Decode {
                            key: key.clone(),
                            message: e.to_string(),
                        })
                    }));
                    copy(&mut w, &schema, &p.object, &p.run_id, s).await?
                }
            };
            if let Some(want) = p.rows
                && rows != want
            {
                return Err(Error::Decode {
                    key: p.object.clone(),
                    message: format!("part {} holds {rows} rows, {want} were recorded", p.key),
                });
            }
            meta.parts.push(MergedPart {
                key: p.key.clone(),
                run_id: p.run_id.clone(),
                job_id: p.job_id.clone(),
                date: p.date.clone(),
                rows,
                first_group,
                groups: w.flushed_row_groups().len() - first_group,
            });
        }
        w.append_key_value_metadata(parquet::file::metadata::KeyValue::new(
            COMPACTED_META.to_string(),
            serde_json::to_string(&meta).map_err(|e| Error::Config(e.to_string()))?,
        ));
        let buf = w.into_inner().map_err(werr)?;
        Ok((Bytes::from(buf), meta))
    }

    /// The rows of one committed part: all of `object` (the part itself),
    /// or its row groups `groups` (first, count) of a merged file. Every row
    /// is checked to be of `run_id`.
    pub async fn read_part(
        &self,
        object: &str,
        groups: Option<(usize, usize)>,
        run_id: &str,
    ) -> Result<Vec<RecordBatch>> {
        let Some((first, n)) = groups else {
            return self.read_parquet(object).await;
        };
        // Batches of a part's size, not of a row group's: the reader sizes
        // its buffers by the batch, and the coordinator reads many parts at
        // once (its verdict index at start: 8 of 1 M rows each held 700 MB).
        let mut s = self
            .parquet_stream_groups(object, Some(first..first + n), PART_BATCH_ROWS)
            .await?;
        let mut out = Vec::new();
        while let Some(b) = s.next().await {
            let b = b?;
            check_run(object, &b, run_id)?;
            out.push(b);
        }
        Ok(out)
    }

    /// Checks a merged file a worker staged for `table` before the
    /// coordinator commits it: the table's file columns, a footer whose
    /// [`CompactedMeta`] lists exactly the parts of `expected` in order with
    /// their recorded rows, row groups that follow each other and cover the
    /// file, and for every part its row groups' `date` statistics of its day
    /// and `run_id` values of its run. Errors are [`Error::Invalid`] naming
    /// the object (a store failure stays retryable).
    pub async fn verify_compacted(
        &self,
        key: &str,
        table: &str,
        expected: &[PartSource],
    ) -> Result<CompactedMeta> {
        let bad = |m: String| Error::invalid("staged merged file", format!("{key}: {m}"));
        let md = self.footer(key).await.map_err(|e| match e {
            Error::Decode { message, .. } => bad(message),
            e => e,
        })?;
        let fm = md.file_metadata();
        let schema = std::sync::Arc::new(
            parquet::arrow::parquet_to_arrow_schema(fm.schema_descr(), fm.key_value_metadata())
                .map_err(|e| bad(format!("schema: {e}")))?,
        );
        super::check_file_schema(table, &schema).map_err(|e| bad(e.to_string()))?;
        let meta = self.compacted_meta(key).await.map_err(|e| match e {
            Error::Decode { message, .. } => bad(message),
            e => e,
        })?;
        if meta.parts.len() != expected.len() {
            return Err(bad(format!(
                "its footer lists {} parts, the job merged {}",
                meta.parts.len(),
                expected.len()
            )));
        }
        let mut next = 0usize;
        for (i, (p, e)) in meta.parts.iter().zip(expected).enumerate() {
            let same =
                p.key == e.key && p.run_id == e.run_id && p.job_id == e.job_id && p.date == e.date;
            if !same || e.rows.is_some_and(|r| r != p.rows) {
                return Err(bad(format!(
                    "part {i} of its footer is {} of run {} ({} rows), the job merged {} of run {} ({:?} rows)",
                    p.key, p.run_id, p.rows, e.key, e.run_id, e.rows
                )));
            }
            if p.first_group != next {
                return Err(bad(format!(
                    "part {i} starts at row group {}, not {next}",
                    p.first_group
                )));
            }
            next += p.groups;
            let in_groups: i64 = md
                .row_groups()
                .get(p.first_group..next)
                .ok_or_else(|| {
                    bad(format!(
                        "part {i} names row groups past the file's {}",
                        md.num_row_groups()
                    ))
                })?
                .iter()
                .map(|g| g.num_rows())
                .sum();
            if in_groups as u64 != p.rows {
                return Err(bad(format!(
                    "part {i} ({}) holds {in_groups} rows in its row groups, its footer says {}",
                    p.key, p.rows
                )));
            }
            let days = layout::date_days(&p.date)?;
            super::check_date_statistics(&md, days, p.first_group..next).map_err(|m| {
                bad(format!(
                    "part {i}, column 'date': {m} (its day is {})",
                    p.date
                ))
            })?;
            // The run of every row: its row groups' `run_id` column read
            // back (a month of LinkTest pairs is hundreds of MB; its run ids
            // are a few).
            let runs = async {
                let mut s = self
                    .parquet_stream_columns(
                        key,
                        Some(p.first_group..next),
                        &["run_id"],
                        PART_BATCH_ROWS,
                    )
                    .await?;
                while let Some(b) = s.next().await {
                    check_run(key, &b?, &p.run_id)?;
                }
                Ok::<(), Error>(())
            };
            runs.await.map_err(|e| match e {
                Error::Decode { message, .. } => bad(format!("part {i}: {message}")),
                e => e,
            })?;
        }
        if next != md.num_row_groups() {
            return Err(bad(format!(
                "its parts cover {next} row groups of {}",
                md.num_row_groups()
            )));
        }
        Ok(meta)
    }
}

/// Where one committed part's rows are, for [`Lake::merge_parts`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartSource {
    /// The part's committed key.
    pub key: String,
    /// Its run.
    pub run_id: String,
    /// Its job.
    pub job_id: String,
    /// The run's day.
    pub date: String,
    /// The object that holds its rows: the part itself or a merged file.
    pub object: String,
    /// Its row groups in a merged `object` (first, count); None: all of it.
    #[serde(default)]
    pub groups: Option<(usize, usize)>,
    /// The rows recorded for it, checked when given.
    #[serde(default)]
    pub rows: Option<u64>,
}

impl PartSource {
    /// The part `p` of the merged file `object`.
    pub fn in_merged(object: &str, p: &MergedPart) -> Self {
        Self {
            key: p.key.clone(),
            run_id: p.run_id.clone(),
            job_id: p.job_id.clone(),
            date: p.date.clone(),
            object: object.to_string(),
            groups: Some((p.first_group, p.groups)),
            rows: Some(p.rows),
        }
    }
}

/// A file to merge: a committed part or an earlier merged file.
struct Input {
    key: String,
    bytes: u64,
    /// The part's day, or the merged file's first.
    date: String,
    what: What,
}

enum What {
    Part { run_id: String, job_id: String },
    Merged(CompactedMeta),
}

/// Writes the batches of `s` (rows of run `run_id`, the table's file
/// columns) to `w` and ends the row group; the rows copied.
async fn copy(
    w: &mut parquet::arrow::ArrowWriter<Vec<u8>>,
    schema: &arrow::datatypes::SchemaRef,
    key: &str,
    run_id: &str,
    mut s: impl futures::Stream<Item = Result<RecordBatch>> + Unpin,
) -> Result<u64> {
    let werr = |e: parquet::errors::ParquetError| Error::Config(format!("{key}: {e}"));
    let mut rows = 0u64;
    while let Some(b) = s.next().await {
        let b = b?;
        if b.schema().fields() != schema.fields() {
            return Err(Error::Decode {
                key: key.into(),
                message: format!(
                    "its columns are not the table's today ({}): move it with `benchlake tables migrate` first",
                    b.schema()
                ),
            });
        }
        check_run(key, &b, run_id)?;
        rows += b.num_rows() as u64;
        let b = RecordBatch::try_new(schema.clone(), b.columns().to_vec()).map_err(|e| {
            Error::Decode {
                key: key.into(),
                message: e.to_string(),
            }
        })?;
        w.write(&b).map_err(werr)?;
    }
    w.flush().map_err(werr)?;
    Ok(rows)
}

fn run_column<'a>(key: &str, b: &'a RecordBatch) -> Result<&'a arrow::array::StringArray> {
    b.column_by_name("run_id")
        .and_then(|c| c.as_string_opt::<i32>())
        .ok_or_else(|| Error::Decode {
            key: key.into(),
            message: "no utf8 column 'run_id'".into(),
        })
}

/// Every row of an input is of the run its key names (a merged file's
/// footer must not lie about what it holds).
fn check_run(key: &str, b: &RecordBatch, run: &str) -> Result<()> {
    let runs = run_column(key, b)?;
    match (0..runs.len()).find(|&i| runs.is_null(i) || runs.value(i) != run) {
        None => Ok(()),
        Some(i) => Err(Error::Decode {
            key: key.into(),
            message: format!("row {i} is of run '{}', the key names {run}", runs.value(i)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::new_id;
    use crate::lake::{RunRows, TableOutput};
    use arrow::array::{ArrayRef, Int32Array, StringArray};
    use std::sync::Arc;

    const T: &str = "linktest_ranks";

    fn ranks(run: &str, first: i32, n: i32) -> RecordBatch {
        RecordBatch::try_new(
            catalog::schema(T).unwrap(),
            vec![
                Arc::new(StringArray::from(vec![run; n as usize])) as ArrayRef,
                Arc::new(StringArray::from(vec!["raw/x.sion"; n as usize])),
                Arc::new(Int32Array::from_iter_values(first..first + n)),
                Arc::new(StringArray::from(vec!["n1"; n as usize])),
                Arc::new(Int32Array::from(vec![None; n as usize])),
            ],
        )
        .unwrap()
    }

    /// Writes one part of `run` on `date`; the run's id.
    async fn part(lake: &Lake, date: &str, run: &str, job: &str, first: i32, n: i32) {
        lake.write_final(
            &[TableOutput::new(T, vec![ranks(run, first, n)])],
            date,
            run,
            job,
        )
        .await
        .unwrap();
    }

    fn rank_list(b: &[RecordBatch]) -> Vec<i32> {
        let mut v: Vec<i32> = b
            .iter()
            .flat_map(|b| {
                b.column_by_name("rank")
                    .unwrap()
                    .as_primitive::<arrow::datatypes::Int32Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        v.sort();
        v
    }

    async fn snapshot(
        lake: &Lake,
        runs: &[(String, String, String)],
    ) -> Vec<(Vec<i32>, Vec<i32>, Vec<i32>)> {
        let mut out = Vec::new();
        for (run, date, job) in runs {
            let all = lake.read_run_rows(RunRows::new(T, run)).await.unwrap();
            let day = lake
                .read_run_rows(RunRows::new(T, run).on(date))
                .await
                .unwrap();
            let job = lake
                .read_run_rows(RunRows::new(T, run).on(date).of_job(job))
                .await
                .unwrap();
            out.push((rank_list(&all), rank_list(&day), rank_list(&job)));
        }
        out
    }

    fn files(dir: &std::path::Path, month: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir.join(format!("tables/{T}/{month}")))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// A month of small parts becomes one merged file; every run reads the
    /// same rows before and after (by run, day and job); the next merge
    /// takes the merged file and the new parts into one; another month is
    /// not touched; row groups keep one day each.
    #[tokio::test]
    async fn a_month_merges_into_one_file_and_every_run_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let mut runs = Vec::new();
        for (i, date) in [
            "2026-11-01",
            "2026-11-01",
            "2026-11-02",
            "2026-11-03",
            "2026-11-03",
            "2026-12-01",
        ]
        .iter()
        .enumerate()
        {
            let (run, job, job2) = (new_id(), new_id(), new_id());
            part(&lake, date, &run, &job, i as i32 * 100, 3).await;
            // A second job of the run writes the table too.
            part(&lake, date, &run, &job2, i as i32 * 100 + 50, 2).await;
            runs.push((run, date.to_string(), job));
        }
        let before = snapshot(&lake, &runs).await;
        assert_eq!(before[0].0, vec![0, 1, 2, 50, 51]);
        assert_eq!(before[1].2, vec![100, 101, 102]);

        let dry = lake
            .compact_month(T, "2026-11-15", &new_id(), 1 << 20, 4, true)
            .await
            .unwrap();
        assert_eq!((dry.inputs, dry.key.as_str()), (10, ""));
        assert_eq!(files(dir.path(), "year=2026/month=11").len(), 10);

        let id = new_id();
        let m = lake
            .compact_month(T, "2026-11-15", &id, 1 << 20, 4, false)
            .await
            .unwrap();
        assert_eq!((m.inputs, m.rows), (10, 25));
        assert_eq!(
            files(dir.path(), "year=2026/month=11"),
            vec![format!("compacted-2026-11-01-{id}.parquet")]
        );
        assert_eq!(files(dir.path(), "year=2026/month=12").len(), 2);
        assert_eq!(snapshot(&lake, &runs).await, before);
        // The listing knows the runs of the merged file from its footer.
        let listed = lake.table_files(T, Some("2026-11-02")).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert!(
            listed[0]
                .runs
                .contains(&(runs[2].0.clone(), "2026-11-02".to_string()))
        );
        assert_eq!(listed[0].merged.as_ref().unwrap().runs().len(), 5);
        // One day per row group.
        let md = lake.footer(&m.key).await.unwrap();
        assert_eq!(md.num_row_groups(), 10);
        for g in md.row_groups() {
            let st = g.columns().last().unwrap().statistics().unwrap();
            assert_eq!(st.min_bytes_opt(), st.max_bytes_opt());
        }

        // Too few new parts: nothing; enough: one file again.
        let (run, job) = (new_id(), new_id());
        part(&lake, "2026-11-20", &run, &job, 900, 4).await;
        runs.push((run, "2026-11-20".into(), job));
        let before = snapshot(&lake, &runs).await;
        let none = lake
            .compact_month(T, "2026-11-01", &new_id(), 1 << 20, 4, false)
            .await
            .unwrap();
        assert_eq!(none.inputs, 0);
        let id2 = new_id();
        let m2 = lake
            .compact_month(T, "2026-11-01", &id2, 1 << 20, 1, false)
            .await
            .unwrap();
        assert_eq!((m2.inputs, m2.rows), (2, 29));
        assert_eq!(
            files(dir.path(), "year=2026/month=11"),
            vec![format!("compacted-2026-11-01-{id2}.parquet")]
        );
        assert_eq!(
            lake.compacted_meta(&m2.key).await.unwrap().merged_from,
            vec![m.key.clone()]
        );
        assert_eq!(snapshot(&lake, &runs).await, before);
    }

    /// A file listed and then replaced by a merge before it is read is
    /// [`Error::Gone`] (retryable), and a listing taken after the merge reads
    /// the same rows from the merged file.
    #[tokio::test]
    async fn a_file_merged_after_its_listing_is_gone_and_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let runs: Vec<String> = (0..3).map(|_| new_id()).collect();
        for (i, r) in runs.iter().enumerate() {
            part(
                &lake,
                &format!("2026-11-0{}", i + 1),
                r,
                &new_id(),
                i as i32 * 10,
                4,
            )
            .await;
        }
        let listed = lake.table_files(T, None).await.unwrap();
        lake.compact_month(T, "2026-11-01", &new_id(), 1 << 20, 2, false)
            .await
            .unwrap();
        let e = lake
            .read_run_file(&listed[0], &runs[0], None)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Gone { .. }) && e.is_retryable(), "{e}");
        let again = lake.read_run_rows(RunRows::new(T, &runs[0])).await.unwrap();
        assert_eq!(rank_list(&again), vec![0, 1, 2, 3]);
    }

    /// A merge stopped after its upload (inputs still there) is finished by
    /// the next one, which deletes the leftovers and merges nothing twice;
    /// a retry with the same id only finishes the deletes.
    #[tokio::test]
    async fn a_stopped_merge_is_finished_and_rows_are_never_doubled() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let mut runs = Vec::new();
        for i in 0..4 {
            let (run, job) = (new_id(), new_id());
            part(&lake, "2026-11-05", &run, &job, i * 10, 2).await;
            runs.push((run, "2026-11-05".to_string(), job));
        }
        let before = snapshot(&lake, &runs).await;
        // Keep a copy of the parts, merge, then put them back: the state of a
        // merge killed between its upload and its deletes.
        let keep: Vec<(String, Bytes)> = {
            let mut v = Vec::new();
            for (k, _) in lake.list(&format!("tables/{T}/")).await.unwrap() {
                v.push((k.clone(), lake.get(&k).await.unwrap()));
            }
            v
        };
        let id = new_id();
        lake.compact_month(T, "2026-11-05", &id, 1 << 20, 2, false)
            .await
            .unwrap();
        for (k, b) in &keep {
            lake.put(k, b.clone()).await.unwrap();
        }
        // The retry (same id) finds its file and deletes the leftovers.
        let again = lake
            .compact_month(T, "2026-11-05", &id, 1 << 20, 2, false)
            .await
            .unwrap();
        assert_eq!((again.leftovers, again.inputs), (4, 0));
        assert_eq!(files(dir.path(), "year=2026/month=11").len(), 1);
        assert_eq!(snapshot(&lake, &runs).await, before);
        // A merged file whose footer lies about a part's run is refused.
        let bad = lake.table_files(T, None).await.unwrap();
        let mut f = bad[0].clone();
        // (A part of another run: ids made in one millisecond need not
        // sort as they were made, so the file's order is not `runs`'.)
        if let Some(m) = f.merged.as_mut()
            && let Some(p) = m.parts.iter_mut().find(|p| p.run_id != runs[1].0)
        {
            p.run_id = runs[1].0.clone();
        }
        let e = lake
            .read_run_file(&f, &runs[1].0, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(&f.key) && e.contains(" is of run "), "{e}");
    }

    /// The coordinator's check of a staged merged file reads its parts'
    /// `run_id` column only, and still finds a row of another run under a
    /// footer that is right about everything else.
    #[tokio::test]
    async fn a_merged_file_with_a_row_of_another_run_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let mut sources = Vec::new();
        for i in 0..3 {
            let (run, job) = (new_id(), new_id());
            let date = format!("2026-11-0{}", i + 1);
            let keys = lake
                .write_final(
                    &[TableOutput::new(T, vec![ranks(&run, i * 10, 3)])],
                    &date,
                    &run,
                    &job,
                )
                .await
                .unwrap();
            sources.push(PartSource {
                key: keys[0].clone(),
                run_id: run,
                job_id: job,
                date,
                object: keys[0].clone(),
                groups: None,
                rows: Some(3),
            });
        }
        let (data, meta) = lake.merge_parts(T, &sources, Vec::new()).await.unwrap();
        let good = "_staging/good.parquet";
        lake.put(good, data.clone()).await.unwrap();
        assert_eq!(
            lake.verify_compacted(good, T, &sources).await.unwrap(),
            meta
        );

        // The same file, row group for row group and footer for footer, but
        // the second part's last row names the first part's run.
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data.clone())
                .unwrap();
        let kv = reader
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .cloned();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_key_value_metadata(kv)
            .build();
        let schema = reader.schema().clone();
        let mut w =
            parquet::arrow::ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props)).unwrap();
        let groups = reader.metadata().num_row_groups();
        assert_eq!(groups, 3);
        for i in 0..groups {
            let mut b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                data.clone(),
            )
            .unwrap()
            .with_row_groups(vec![i])
            .build()
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
            if i == 1 {
                let mut runs: Vec<String> = (0..b.num_rows())
                    .map(|_| sources[1].run_id.clone())
                    .collect();
                runs[2] = sources[0].run_id.clone();
                let mut cols = b.columns().to_vec();
                let at = schema.index_of("run_id").unwrap();
                cols[at] = Arc::new(StringArray::from(runs));
                b = RecordBatch::try_new(schema.clone(), cols).unwrap();
            }
            w.write(&b).unwrap();
            w.flush().unwrap();
        }
        let lying = "_staging/lying.parquet";
        lake.put(lying, Bytes::from(w.into_inner().unwrap()))
            .await
            .unwrap();
        let e = lake
            .verify_compacted(lying, T, &sources)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(lying) && e.contains("part 1") && e.contains("row 2 is of run"),
            "{e}"
        );
    }
}
