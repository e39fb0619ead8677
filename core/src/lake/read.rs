//! Reading committed rows back: one Parquet object ([`Lake::read_parquet`])
//! and a run's rows of a table ([`Lake::read_run_rows`]), the one table-level
//! read every in-process reader of the lake uses (a run's health checks and
//! their history, a traced run's comparison, the LinkTest report of a run).
//!
//! Objects are found by their keys ([`crate::layout::parse_table_key`]), not
//! through the state store, so this also reads a lake written offline.
use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::Lake;
use crate::error::{Error, Result};
use crate::layout;

/// Which objects of a table [`Lake::read_run_rows`] reads: those of one run,
/// optionally only in one date partition and only those one job wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRows<'a> {
    /// Catalog table.
    pub table: &'a str,
    /// The run.
    pub run_id: &'a str,
    /// The run's date partition; None searches every date (slower: the whole
    /// table is listed).
    pub date: Option<&'a str>,
    /// Only the objects this job wrote (`part-{job_id}[-{part}].parquet`).
    pub job_id: Option<&'a str>,
}

impl<'a> RunRows<'a> {
    /// Every object of `table` for `run_id`, in any date partition.
    pub fn new(table: &'a str, run_id: &'a str) -> Self {
        Self {
            table,
            run_id,
            date: None,
            job_id: None,
        }
    }

    /// Only the date partition `date` (the run's date: faster).
    pub fn on(mut self, date: &'a str) -> Self {
        self.date = Some(date);
        self
    }

    /// Only the objects the job `job_id` wrote.
    pub fn of_job(mut self, job_id: &'a str) -> Self {
        self.job_id = Some(job_id);
        self
    }
}

impl Lake {
    /// Every batch of the Parquet object `key`. An object that does not
    /// decode is [`Error::Decode`] naming the key (not retryable).
    pub async fn read_parquet(&self, key: &str) -> Result<Vec<RecordBatch>> {
        let data = self.get(key).await?;
        let bad = |e: &dyn std::fmt::Display| Error::Decode {
            key: key.to_string(),
            message: e.to_string(),
        };
        let reader = ParquetRecordBatchReaderBuilder::try_new(data)
            .and_then(|b| b.build())
            .map_err(|e| bad(&e))?;
        reader.map(|b| b.map_err(|e| bad(&e))).collect()
    }

    /// The batches of the Parquet object `key` as a stream that reads the
    /// object a row group at a time (byte ranges, not the whole object), so a
    /// reader holds at most one row group's column chunks plus the batch it
    /// is decoding, whatever the object's size. Batches have at most
    /// `batch_rows` rows. An object that does not decode is [`Error::Decode`]
    /// naming the key, at the start or at the row group that fails.
    // ParquetObjectReader: see verify_run_column in lake.rs.
    #[allow(deprecated)]
    pub async fn parquet_stream(
        &self,
        key: &str,
        batch_rows: usize,
    ) -> Result<futures::stream::BoxStream<'static, Result<RecordBatch>>> {
        self.parquet_stream_groups(key, None, batch_rows).await
    }

    /// [`Self::parquet_stream`] of the row groups `groups` only (all when
    /// None): a part's rows in a merged file ([`super::compact`]). A range
    /// past the object's row groups is [`Error::Decode`].
    pub async fn parquet_stream_groups(
        &self,
        key: &str,
        groups: Option<std::ops::Range<usize>>,
        batch_rows: usize,
    ) -> Result<futures::stream::BoxStream<'static, Result<RecordBatch>>> {
        self.parquet_stream_columns(key, groups, &[], batch_rows)
            .await
    }

    /// [`Self::parquet_stream_groups`] of the top-level `columns` only (all
    /// when empty): the other columns are neither fetched nor decoded.
    // ParquetObjectReader: see verify_run_column in lake.rs.
    #[allow(deprecated)]
    pub async fn parquet_stream_columns(
        &self,
        key: &str,
        groups: Option<std::ops::Range<usize>>,
        columns: &[&str],
        batch_rows: usize,
    ) -> Result<futures::stream::BoxStream<'static, Result<RecordBatch>>> {
        use futures::StreamExt;
        use parquet::arrow::async_reader::{ParquetObjectReader, ParquetRecordBatchStreamBuilder};
        let size = self
            .size(key)
            .await?
            .ok_or_else(|| Error::invalid("table object", format!("{key}: no such object")))?;
        let owned = key.to_string();
        let bad = move |e: &dyn std::fmt::Display| Error::Decode {
            key: owned.clone(),
            message: e.to_string(),
        };
        let reader =
            ParquetObjectReader::new(self.store.clone(), self.path(key)).with_file_size(size);
        let mut builder = ParquetRecordBatchStreamBuilder::new(reader)
            .await
            .map_err(|e| bad(&e))?;
        if let Some(g) = groups {
            let n = builder.metadata().num_row_groups();
            if g.end > n {
                return Err(bad(&format!(
                    "row groups {}..{} asked, the file has {n}",
                    g.start, g.end
                )));
            }
            builder = builder.with_row_groups(g.collect());
        }
        if !columns.is_empty() {
            let mask = parquet::arrow::ProjectionMask::columns(
                builder.parquet_schema(),
                columns.iter().copied(),
            );
            builder = builder.with_projection(mask);
        }
        let stream = builder
            .with_batch_size(batch_rows.max(1))
            .build()
            .map_err(|e| bad(&e))?;
        Ok(stream.map(move |b| b.map_err(|e| bad(&e))).boxed())
    }

    /// A run's rows of a table: the batches of every committed object
    /// `tables/{table}/year=…/month=…/part-{date}-{run}-….parquet` that `q` selects
    /// (and its row groups in merged files, [`super::compact`]),
    /// objects in key order. Objects under the table that are no table part
    /// (see [`layout::parse_table_key`]) are skipped; none at all is an empty
    /// result, not an error.
    pub async fn read_run_rows(&self, q: RunRows<'_>) -> Result<Vec<RecordBatch>> {
        crate::ids::validate_id("run_id", q.run_id)?;
        // A file replaced by a merge between the listing and its read
        // ([`Error::Gone`]): the run's rows are read again from a new listing.
        let mut attempt = 0;
        loop {
            match self.read_run_rows_once(q).await {
                Err(Error::Gone { .. }) if attempt < super::compact::LISTING_ATTEMPTS => {
                    attempt += 1
                }
                r => return r,
            }
        }
    }

    async fn read_run_rows_once(&self, q: RunRows<'_>) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        for f in self.table_files(q.table, q.date).await? {
            let mine = f
                .runs
                .iter()
                .any(|(r, d)| r == q.run_id && q.date.is_none_or(|want| want == d));
            if !mine {
                continue;
            }
            if f.merged.is_none()
                && q.job_id
                    .is_some_and(|j| layout::parse_table_key(&f.key).is_none_or(|k| k.job_id != j))
            {
                continue;
            }
            out.extend(self.read_run_file(&f, q.run_id, q.job_id).await?);
        }
        Ok(out)
    }
}

impl super::EncodedTable {
    /// Hands `f` the rows of this encoded table a batch at a time (from
    /// memory, or from its spilled file), only the columns `columns` (every
    /// column when empty): readers of a file just encoded, such as the
    /// ingest job's summaries, without holding its rows. A file that does
    /// not decode is [`Error::Decode`] naming the table.
    pub fn for_each_batch(
        &self,
        columns: &[&str],
        f: impl FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let name = format!("{} (just encoded)", self.table);
        match &self.spilled {
            Some(s) => {
                let file = std::fs::File::open(&*s.path).map_err(|e| Error::Io {
                    path: s.path.to_path_buf(),
                    source: e,
                })?;
                batches_of(file, &name, columns, f)
            }
            None => batches_of(self.data.clone(), &name, columns, f),
        }
    }
}

/// The batches of a Parquet file, only `columns` (all when empty), to `f`.
fn batches_of<R: parquet::file::reader::ChunkReader + 'static>(
    reader: R,
    name: &str,
    columns: &[&str],
    mut f: impl FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let bad = |e: &dyn std::fmt::Display| Error::Decode {
        key: name.to_string(),
        message: e.to_string(),
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(reader).map_err(|e| bad(&e))?;
    let builder = if columns.is_empty() {
        builder
    } else {
        let schema = builder.parquet_schema();
        let ix: Vec<usize> = (0..schema.num_columns())
            .filter(|i| columns.contains(&schema.column(*i).name()))
            .collect();
        let mask = parquet::arrow::ProjectionMask::leaves(schema, ix);
        builder.with_projection(mask)
    };
    for b in builder.build().map_err(|e| bad(&e))? {
        f(b.map_err(|e| bad(&e))?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, Float64Array, Int32Array, StringArray};

    use super::*;
    use crate::catalog;
    use crate::ids::new_id;
    use crate::lake::TableOutput;

    fn timings(run: &str, ranks: std::ops::Range<i32>) -> RecordBatch {
        let n = ranks.len();
        RecordBatch::try_new(
            catalog::schema("linktest_timings").unwrap(),
            vec![
                Arc::new(StringArray::from(vec![run; n])),
                Arc::new(StringArray::from(vec!["raw/x.sion"; n])),
                Arc::new(Int32Array::from(vec![0; n])),
                Arc::new(Int32Array::from_iter_values(ranks.clone())),
                Arc::new(Int32Array::from_iter_values(ranks.map(|r| r + 1))),
                Arc::new(Int32Array::from(vec![1; n])),
                Arc::new(Float64Array::from(vec![1e-6; n])),
                Arc::new(StringArray::from(vec!["h0"; n])),
                Arc::new(StringArray::from(vec!["h1"; n])),
            ],
        )
        .unwrap()
    }

    fn ranks(batches: &[RecordBatch]) -> Vec<i32> {
        let mut out = Vec::new();
        for b in batches {
            let c = b
                .column_by_name("from_rank")
                .unwrap()
                .as_any()
                .downcast_ref::<Int32Array>()
                .unwrap();
            out.extend(c.values().iter().copied());
        }
        out
    }

    #[tokio::test]
    async fn a_stream_reads_an_object_a_row_group_at_a_time() {
        use futures::TryStreamExt;
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let run = new_id();
        let batch = timings(&run, 0..10_000);
        // Row groups of 1,000 rows: the stream gives the rows back in order,
        // in batches of at most 700.
        let mut buf = Vec::new();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(1_000))
            .build();
        let mut w =
            parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        lake.put("tables/t/x.parquet", bytes::Bytes::from(buf))
            .await
            .unwrap();
        let got: Vec<RecordBatch> = lake
            .parquet_stream("tables/t/x.parquet", 700)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert!(got.iter().all(|b| b.num_rows() <= 700));
        assert_eq!(ranks(&got), (0..10_000).collect::<Vec<_>>());
        // Missing and undecodable objects are errors naming the key.
        let e = lake.parquet_stream("tables/t/none.parquet", 10).await.err();
        assert!(e.unwrap().to_string().contains("tables/t/none.parquet"));
        lake.put("tables/t/bad.parquet", bytes::Bytes::from_static(b"junk"))
            .await
            .unwrap();
        let e = lake.parquet_stream("tables/t/bad.parquet", 10).await.err();
        assert!(matches!(e, Some(Error::Decode { .. })), "{e:?}");
    }

    #[tokio::test]
    async fn a_runs_rows_come_back_from_a_local_lake() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let (run, other) = (new_id(), new_id());
        let (j1, j2) = (new_id(), new_id());
        let t = "linktest_timings";
        let out = |ranks, part: &str| {
            let mut o = TableOutput::new(t, vec![timings(&run, ranks)]);
            o.part = part.to_string();
            o
        };
        // Job 1 writes two parts, job 2 one (on another date), another run one.
        lake.write_final(&[out(0..2, ""), out(2..4, "b")], "2026-11-22", &run, &j1)
            .await
            .unwrap();
        lake.write_final(&[out(10..11, "")], "2026-11-23", &run, &j2)
            .await
            .unwrap();
        lake.write_final(
            &[TableOutput::new(t, vec![timings(&other, 50..53)])],
            "2026-11-22",
            &other,
            &j1,
        )
        .await
        .unwrap();
        // Something that is no table part is skipped.
        lake.put(
            &format!("tables/{t}/year=2026/month=11/notes.txt"),
            bytes::Bytes::from_static(b"x"),
        )
        .await
        .unwrap();

        // Objects in key order: `part-{j1}-b` sorts before `part-{j1}`.
        let all = lake.read_run_rows(RunRows::new(t, &run)).await.unwrap();
        assert_eq!(ranks(&all), vec![2, 3, 0, 1, 10]);
        let day = lake
            .read_run_rows(RunRows::new(t, &run).on("2026-11-22"))
            .await
            .unwrap();
        assert_eq!(ranks(&day), vec![2, 3, 0, 1]);
        let job = lake
            .read_run_rows(RunRows::new(t, &run).on("2026-11-23").of_job(&j2))
            .await
            .unwrap();
        assert_eq!(ranks(&job), vec![10]);
        let none = lake
            .read_run_rows(RunRows::new(t, &run).on("2026-11-22").of_job(&j2))
            .await
            .unwrap();
        assert!(none.is_empty());
        assert!(
            lake.read_run_rows(RunRows::new("checks", &run))
                .await
                .unwrap()
                .is_empty()
        );
        assert!(lake.read_run_rows(RunRows::new(t, "../x")).await.is_err());
        assert!(
            lake.read_run_rows(RunRows::new("../t", &run))
                .await
                .is_err()
        );

        // A part that does not decode is an error naming its key.
        let bad = crate::layout::table_key(t, "2026-11-22", &run, &new_id(), "").unwrap();
        lake.put(&bad, bytes::Bytes::from_static(b"not parquet"))
            .await
            .unwrap();
        let e = lake.read_run_rows(RunRows::new(t, &run)).await.unwrap_err();
        assert!(matches!(e, Error::Decode { .. }), "{e}");
        assert!(e.to_string().starts_with(&bad), "{e}");
        assert!(!e.is_retryable());
    }
}
