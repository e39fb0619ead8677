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

/// The footer key of a merged file's [`CompactedMeta`] (JSON).
pub const COMPACTED_META: &str = "benchlake.compacted";

/// What a merged file holds: each file merged into it, with the row groups
/// that hold its rows (one input's rows never share a row group with
/// another's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactedMeta {
    /// The merged files, in the order of their rows.
    pub parts: Vec<MergedPart>,
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
    /// Inputs merged and then deleted.
    pub inputs: usize,
    /// Inputs found already merged by an earlier, stopped merge and deleted.
    pub leftovers: usize,
    /// Rows of the merged file.
    pub rows: u64,
    /// Bytes of the inputs and of the merged file.
    pub in_bytes: u64,
    /// Bytes of the merged file.
    pub out_bytes: u64,
}

impl Lake {
    /// The objects of `table` (of `date`'s month only when given) with the
    /// runs each holds, in key order; merged files' runs come from their
    /// footers (one ranged read each). Objects that are no table file are
    /// left out. With `date`, only files holding rows of that day are kept.
    pub async fn table_files(&self, table: &str, date: Option<&str>) -> Result<Vec<ListedFile>> {
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
        let Some(meta) = &f.merged else {
            return self.read_parquet(&f.key).await;
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
        let data = self.get(&f.key).await?;
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
            .ok_or_else(|| Error::invalid("table object", format!("{key}: no such object")))?;
        let bad = |m: String| Error::Decode {
            key: key.into(),
            message: m,
        };
        if size < 12 {
            return Err(bad(format!("{size} bytes is too small for a Parquet file")));
        }
        let tail = self.store.get_range(&self.path(key), size - 8..size).await?;
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
        let meta = self.store.get_range(&self.path(key), size - 8 - len..size - 8).await?;
        parquet::file::metadata::ParquetMetaDataReader::decode_metadata(&meta)
            .map_err(|e| bad(format!("footer at byte offset {}: {e}", size - 8 - len)))
    }

    /// Merges the committed parts of `table` in `date`'s month that are
    /// smaller than `small_bytes` into one file, when there are at least
    /// `min_files` of them; earlier merged files of the month are left as
    /// they are. The merged file is uploaded and read back (rows and runs
    /// checked against its inputs) before any input is deleted; inputs that
    /// an existing merged file already replaces (a merge stopped before its
    /// deletes) are deleted first. `id` names the merged file (a ULID; a
    /// retried merge passes the same id and writes the same key).
    pub async fn compact_month(
        &self,
        table: &str,
        date: &str,
        id: &str,
        small_bytes: u64,
        min_files: usize,
    ) -> Result<Merged> {
        let mut done = Merged::default();
        let prefix = layout::month_table_prefix(table, date)?;
        let listed = self.list(&prefix).await?;
        // Leftovers of a stopped merge: inputs a merged file already holds.
        let mut replaced = BTreeSet::new();
        for (key, _) in &listed {
            if let Some(TableFile::Compacted { table: t, .. }) = layout::parse_table_file(key)
                && t == table
            {
                replaced.extend(self.compacted_meta(key).await?.parts.into_iter().map(|p| p.key));
            }
        }
        let mut inputs = Vec::new();
        for (key, bytes) in listed {
            let Some(TableFile::Part(k)) = layout::parse_table_file(&key) else {
                continue;
            };
            if k.table != table {
                continue;
            }
            if replaced.contains(&key) {
                self.delete(&key).await?;
                done.leftovers += 1;
            } else if bytes < small_bytes {
                inputs.push(Input {
                    key: key.clone(),
                    bytes,
                    run_id: k.run_id.to_string(),
                    job_id: k.job_id.to_string(),
                    date: k.date.to_string(),
                });
            }
        }
        if inputs.len() < min_files.max(2) {
            return Ok(done);
        }
        let first_date = inputs.iter().map(|i| i.date.clone()).min().unwrap_or_default();
        let key = layout::compacted_key(table, &first_date, id)?;
        let (data, meta) = self.merge(table, &inputs).await?;
        let rows: u64 = meta.parts.iter().map(|p| p.rows).sum();
        done.out_bytes = data.len() as u64;
        self.put(&key, data).await?;
        // Read back: the rows of every run, as many as its inputs held.
        let check = self.table_files(table, Some(date)).await?;
        let Some(f) = check.iter().find(|f| f.key == key) else {
            return Err(Error::Decode {
                key,
                message: "the merged file is not listed after its upload".into(),
            });
        };
        let back: u64 = self
            .read_parquet(&f.key)
            .await?
            .iter()
            .map(|b| b.num_rows() as u64)
            .sum();
        if back != rows || f.merged.as_ref() != Some(&meta) {
            return Err(Error::Decode {
                key,
                message: format!(
                    "read back {back} rows of {} runs, merged {rows} rows of {}",
                    f.runs.len(),
                    meta.runs().len()
                ),
            });
        }
        for i in &inputs {
            self.delete(&i.key).await?;
            done.in_bytes += i.bytes;
        }
        done.key = key;
        done.inputs = inputs.len();
        done.rows = rows;
        Ok(done)
    }

    /// The merged file of `inputs`, in key order, with the catalog's
    /// columns then `date`; each input's rows in row groups of their own.
    /// The footer's [`CompactedMeta`] is written at the end, once the row
    /// groups are known.
    async fn merge(&self, table: &str, inputs: &[Input]) -> Result<(Bytes, CompactedMeta)> {
        let schema = catalog::file_schema(table)?;
        let werr = |e: parquet::errors::ParquetError| Error::Config(format!("{table}: {e}"));
        let mut w = parquet::arrow::ArrowWriter::try_new(
            Vec::new(),
            schema.clone(),
            Some(writer_properties()),
        )
        .map_err(werr)?;
        let mut meta = CompactedMeta::default();
        for i in inputs {
            let first_group = w.flushed_row_groups().len();
            let mut rows = 0u64;
            let mut s = self
                .parquet_stream(&i.key, super::encode::ROW_GROUP_ROWS)
                .await?;
            while let Some(b) = s.next().await {
                let b = b?;
                if b.schema().fields() != schema.fields() {
                    return Err(Error::Decode {
                        key: i.key.clone(),
                        message: format!(
                            "its columns are not the table's today ({}): move it with `benchlake tables migrate` first",
                            b.schema()
                        ),
                    });
                }
                check_run(&i.key, &b, &i.run_id)?;
                rows += b.num_rows() as u64;
                let b = RecordBatch::try_new(schema.clone(), b.columns().to_vec()).map_err(|e| {
                    Error::Decode {
                        key: i.key.clone(),
                        message: e.to_string(),
                    }
                })?;
                w.write(&b).map_err(werr)?;
            }
            w.flush().map_err(werr)?;
            meta.parts.push(MergedPart {
                key: i.key.clone(),
                run_id: i.run_id.clone(),
                job_id: i.job_id.clone(),
                date: i.date.clone(),
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
}

/// A committed part to merge.
struct Input {
    key: String,
    bytes: u64,
    run_id: String,
    job_id: String,
    date: String,
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

