//! Moving a lake from the layout before 2026-12
//! (`tables/{table}/date={date}/run_id={run}/part-{job}[-{part}].parquet`) to
//! the `year=/month=` layout of [`layout::table_key`], whose files carry the
//! run's day as their last column (docs/architecture.md, "Compaction").
//!
//! One glob cannot read both layouts (DuckDB refuses mixed hive depths), so a
//! lake moves as a whole, once: `benchlake tables migrate` for a lake of
//! offline ingests, the coordinator at start for its own (it also moves the
//! keys its state store records). Each file is rewritten at its new key with
//! the catalog's columns today (columns added to the catalog since the file
//! was written come as nulls) and its `date` column, read back and checked
//! like a commit ([`Lake::verify_parquet`]), handed to the caller (who
//! records the new key), and only then is the old object deleted. The new
//! key is deterministic, so a migration stopped anywhere (`kill -9`) is
//! finished by running it again; nothing is ever lost: the old object goes
//! last.
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, new_null_array};
use futures::StreamExt;

use super::Lake;
use super::encode::{ParquetEncoder, ROW_GROUP_ROWS};
use crate::catalog;
use crate::error::{Error, Result};
use crate::layout::{self, TableKey};

/// One file moved to the new layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Its key in the layout before 2026-12 (deleted once the caller took the move).
    pub old_key: String,
    /// Its key now ([`layout::table_key`]).
    pub new_key: String,
    /// Catalog table.
    pub table: String,
    /// The run the rows belong to.
    pub run_id: String,
    /// The job that wrote them.
    pub job_id: String,
    /// The run's day.
    pub date: String,
    /// Rows (the same before and after).
    pub rows: u64,
    /// Size of the new object.
    pub bytes: u64,
}

/// What a migration did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrateReport {
    /// Files of the old layout found.
    pub legacy_files: usize,
    /// Files moved (0 on a dry run).
    pub moved: usize,
    /// Rows in the moved files.
    pub rows: u64,
    /// Bytes of the old files found.
    pub old_bytes: u64,
    /// Bytes of the new files written.
    pub new_bytes: u64,
}

/// The new key of a file of the old layout.
pub fn new_key_of(k: &TableKey<'_>) -> Result<String> {
    layout::table_key(k.table, k.date, k.run_id, k.job_id, k.part)
}

impl Lake {
    /// Every object of the old table layout, with its size, in key order.
    pub async fn legacy_table_files(&self) -> Result<Vec<(String, u64)>> {
        Ok(self
            .list(&format!("{}/", layout::TABLES))
            .await?
            .into_iter()
            .filter(|(k, _)| layout::parse_legacy_table_key(k).is_some())
            .collect())
    }

    /// Rewrites the old-layout file `old_key` at its new key with the
    /// catalog's columns and its `date` column, and checks what it wrote. The
    /// old object stays (see [`Lake::migrate_layout`]). A file that does not
    /// decode, or holds a column the catalog does not know (or lacks one the
    /// catalog requires), is an error naming it: nothing is dropped.
    pub async fn migrate_table_file(&self, old_key: &str) -> Result<Moved> {
        let k = layout::parse_legacy_table_key(old_key).ok_or_else(|| {
            Error::invalid(
                "key",
                format!("'{old_key}' is not a table file of the layout before 2026-12"),
            )
        })?;
        let new_key = new_key_of(&k)?;
        let want = catalog::schema(k.table)?;
        let rows = self.parquet_rows(old_key).await?;
        let mut enc = ParquetEncoder::new(k.table, k.date, rows as usize, rows as usize)?;
        let mut stream = self.parquet_stream(old_key, ROW_GROUP_ROWS).await?;
        while let Some(b) = stream.next().await {
            let b = conform(old_key, &want, b?)?;
            enc.write_row_group(&[b])?;
        }
        if enc.rows() as u64 != rows {
            return Err(Error::Decode {
                key: old_key.into(),
                message: format!("read {} rows, its footer says {rows}", enc.rows()),
            });
        }
        let data = enc.finish()?;
        let bytes = data.len() as u64;
        self.put(&new_key, data).await?;
        self.verify_parquet(&new_key, k.table, rows, k.run_id, k.date)
            .await?;
        Ok(Moved {
            old_key: old_key.into(),
            new_key,
            table: k.table.into(),
            run_id: k.run_id.into(),
            job_id: k.job_id.into(),
            date: k.date.into(),
            rows,
            bytes,
        })
    }

    /// Moves every file of the old layout: rewrites it ([`Self::migrate_table_file`]),
    /// hands the move to `took` (which records the new key where the old one
    /// was recorded; an error stops the migration with the old object still
    /// in place), then deletes the old object. With `dry_run` nothing is
    /// written; the report counts what would move. `progress` is told each
    /// move with its index and the total.
    pub async fn migrate_layout(
        &self,
        dry_run: bool,
        mut took: impl FnMut(&Moved) -> Result<()>,
        mut progress: impl FnMut(usize, usize, &Moved),
    ) -> Result<MigrateReport> {
        let files = self.legacy_table_files().await?;
        let mut r = MigrateReport {
            legacy_files: files.len(),
            old_bytes: files.iter().map(|f| f.1).sum(),
            ..Default::default()
        };
        if dry_run {
            return Ok(r);
        }
        for (i, (key, _)) in files.iter().enumerate() {
            let m = self.migrate_table_file(key).await?;
            took(&m)?;
            self.delete(key).await?;
            r.moved += 1;
            r.rows += m.rows;
            r.new_bytes += m.bytes;
            progress(i + 1, files.len(), &m);
        }
        if let Some(root) = &self.local {
            remove_empty_dirs(&root.join(layout::TABLES));
        }
        Ok(r)
    }

    /// The row count in the footer of the Parquet object `key`.
    async fn parquet_rows(&self, key: &str) -> Result<u64> {
        let data = self.get(key).await?;
        let md = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&data)
            .map_err(|e| Error::Decode {
                key: key.into(),
                message: format!("footer: {e}"),
            })?;
        u64::try_from(md.file_metadata().num_rows()).map_err(|_| Error::Decode {
            key: key.into(),
            message: format!("footer: {} rows", md.file_metadata().num_rows()),
        })
    }
}

/// `b` with the columns of `want`, in its order: a column the file lacks is
/// nulls when the catalog lets it be null (added to the catalog after the
/// file was written); anything else that does not fit is an error naming the
/// file and the column. A `date` column (the path's value, as some tools
/// add it) is left out: the encoder writes the run's day.
fn conform(key: &str, want: &Arc<arrow::datatypes::Schema>, b: RecordBatch) -> Result<RecordBatch> {
    let bad = |message: String| Error::Decode {
        key: key.into(),
        message,
    };
    let got = b.schema();
    for f in got.fields() {
        if f.name() != catalog::DATE_COLUMN && want.field_with_name(f.name()).is_err() {
            return Err(bad(format!(
                "column '{}' is not in the catalog's table (nothing is dropped: move it by hand)",
                f.name()
            )));
        }
    }
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(want.fields().len());
    for w in want.fields() {
        match got.index_of(w.name()) {
            Ok(i) => {
                let c = b.column(i);
                if c.data_type() != w.data_type() {
                    return Err(bad(format!(
                        "column '{}: {}' where the catalog has '{}'",
                        w.name(),
                        c.data_type(),
                        w.data_type()
                    )));
                }
                if !w.is_nullable() && c.null_count() > 0 {
                    return Err(bad(format!(
                        "column '{}' holds {} nulls; the catalog has it not null",
                        w.name(),
                        c.null_count()
                    )));
                }
                cols.push(c.clone());
            }
            Err(_) if w.is_nullable() => cols.push(new_null_array(w.data_type(), b.num_rows())),
            Err(_) => {
                return Err(bad(format!(
                    "no column '{}', which the catalog has not null",
                    w.name()
                )));
            }
        }
    }
    RecordBatch::try_new(want.clone(), cols).map_err(|e| bad(e.to_string()))
}

/// Removes the empty directories under `dir` (a local lake's old
/// `date=…/run_id=…/` directories once their files moved).
fn remove_empty_dirs(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_empty_dirs(&e.path());
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::new_id;
    use arrow::array::{AsArray, Int32Array, StringArray};

    /// A file of the old layout, written as before 2026-12 (no `date`
    /// column; `cols` of the catalog's columns, the others absent).
    fn old_file(table: &str, run: &str, cols: &[&str], n: usize) -> bytes::Bytes {
        let want = catalog::schema(table).unwrap();
        let fields: Vec<_> = want
            .fields()
            .iter()
            .filter(|f| cols.contains(&f.name().as_str()))
            .cloned()
            .collect();
        let schema = Arc::new(arrow::datatypes::Schema::new(fields));
        let arrays: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| -> ArrayRef {
                match f.name().as_str() {
                    "run_id" => Arc::new(StringArray::from(vec![run; n])),
                    _ => match f.data_type() {
                        arrow::datatypes::DataType::Utf8 => {
                            Arc::new(StringArray::from(vec!["x"; n]))
                        }
                        arrow::datatypes::DataType::Int32 => {
                            Arc::new(Int32Array::from_iter_values(0..n as i32))
                        }
                        t => arrow::array::new_null_array(t, n),
                    },
                }
            })
            .collect();
        let b = RecordBatch::try_new(schema.clone(), arrays).unwrap();
        let mut buf = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, schema, None).unwrap();
        w.write(&b).unwrap();
        w.close().unwrap();
        bytes::Bytes::from(buf)
    }

    #[tokio::test]
    async fn an_old_lake_moves_once_and_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let (run, job) = (new_id(), new_id());
        let schema = catalog::schema("linktest_ranks").unwrap();
        let all: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let required: Vec<&str> = schema
            .fields()
            .iter()
            .filter(|f| !f.is_nullable())
            .map(|f| f.name().as_str())
            .collect();
        assert!(
            required.len() < all.len(),
            "the test needs a nullable column"
        );
        let old = format!("tables/linktest_ranks/date=2026-11-22/run_id={run}/part-{job}.parquet");
        lake.put(&old, old_file("linktest_ranks", &run, &all, 5))
            .await
            .unwrap();
        // A column added to the catalog later (nullable) is absent in the old file.
        let old2 =
            format!("tables/linktest_ranks/date=2026-12-01/run_id={run}/part-{job}-b.parquet");
        lake.put(&old2, old_file("linktest_ranks", &run, &required, 3))
            .await
            .unwrap();

        let dry = lake
            .migrate_layout(true, |_| Ok(()), |_, _, _| {})
            .await
            .unwrap();
        assert_eq!((dry.legacy_files, dry.moved), (2, 0));
        assert!(lake.size(&old).await.unwrap().is_some());

        let mut took = Vec::new();
        let r = lake
            .migrate_layout(
                false,
                |m| {
                    took.push(m.clone());
                    Ok(())
                },
                |_, _, _| {},
            )
            .await
            .unwrap();
        assert_eq!((r.legacy_files, r.moved, r.rows), (2, 2, 8));
        assert_eq!(
            took[0].new_key,
            format!("tables/linktest_ranks/year=2026/month=11/part-2026-11-22-{run}-{job}.parquet")
        );
        assert_eq!(
            took[1].new_key,
            format!(
                "tables/linktest_ranks/year=2026/month=12/part-2026-12-01-{run}-{job}-b.parquet"
            )
        );
        assert!(lake.size(&old).await.unwrap().is_none());
        assert!(
            !dir.path()
                .join("tables/linktest_ranks/date=2026-11-22")
                .exists()
        );
        // The rows read the same, with the day as their last column.
        let b = lake.read_parquet(&took[0].new_key).await.unwrap();
        assert_eq!(b[0].num_rows(), 5);
        let days = b[0]
            .column_by_name("date")
            .unwrap()
            .as_primitive::<arrow::datatypes::Date32Type>();
        assert_eq!(days.value(0), layout::date_days("2026-11-22").unwrap());
        let b2 = lake.read_parquet(&took[1].new_key).await.unwrap();
        assert_eq!(
            b2[0].schema().as_ref(),
            catalog::file_schema("linktest_ranks").unwrap().as_ref()
        );
        // Again: nothing left to move.
        let again = lake
            .migrate_layout(false, |_| Ok(()), |_, _, _| {})
            .await
            .unwrap();
        assert_eq!(again.legacy_files, 0);
    }

    #[tokio::test]
    async fn a_stopped_migration_finishes_and_a_refused_move_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let (run, job) = (new_id(), new_id());
        let schema = catalog::schema("linktest_ranks").unwrap();
        let all: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let old = format!("tables/linktest_ranks/date=2026-11-22/run_id={run}/part-{job}.parquet");
        lake.put(&old, old_file("linktest_ranks", &run, &all, 4))
            .await
            .unwrap();
        // The caller could not record the move: the old object stays.
        let e = lake
            .migrate_layout(
                false,
                |_| Err(Error::Config("store down".into())),
                |_, _, _| {},
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("store down"), "{e}");
        assert!(lake.size(&old).await.unwrap().is_some());
        // The rerun writes the same new key and finishes.
        let r = lake
            .migrate_layout(false, |_| Ok(()), |_, _, _| {})
            .await
            .unwrap();
        assert_eq!((r.moved, r.rows), (1, 4));
        // A file with a column the catalog does not know is refused, whole.
        let bad = format!("tables/linktest_ranks/date=2026-11-23/run_id={run}/part-{job}.parquet");
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("run_id", arrow::datatypes::DataType::Utf8, false),
            arrow::datatypes::Field::new("mystery", arrow::datatypes::DataType::Utf8, true),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![run.as_str()])),
                Arc::new(StringArray::from(vec!["?"])),
            ],
        )
        .unwrap();
        let mut buf = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, schema, None).unwrap();
        w.write(&b).unwrap();
        w.close().unwrap();
        lake.put(&bad, bytes::Bytes::from(buf)).await.unwrap();
        let e = lake.migrate_table_file(&bad).await.unwrap_err().to_string();
        assert!(e.contains(&bad) && e.contains("'mystery'"), "{e}");
        assert!(lake.size(&bad).await.unwrap().is_some());
    }
}
