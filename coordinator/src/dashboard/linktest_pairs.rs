//! A run's LinkTest pairs streamed from the lake for the pair view
//! (`/runs/{id}/linktest?matrix=1`, issue 40): `linktest_timings` objects
//! read a row group at a time, only the columns the view needs (ranks, step,
//! time; the file and permutation columns only where the row groups'
//! statistics do not already say which file and permutation they hold), row
//! groups of other files, permutations or (for a zoomed window) initiating
//! ranks skipped by their statistics. The pairs go to a sink
//! ([`benchlake_analysis::linktest_report::stream`]) and are never kept: a
//! reader holds one row group's column chunks and one batch.
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int32Type};
use benchlake_analysis::linktest_report::stream::Sink;
use benchlake_core::lake::Lake;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
#[allow(deprecated)]
use parquet::arrow::async_reader::{ParquetObjectReader, ParquetRecordBatchStreamBuilder};
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::statistics::Statistics;

use crate::model::CommittedFile;

/// Rows per decoded batch.
const BATCH_ROWS: usize = 64 * 1024;

/// The pair table.
pub const TABLE: &str = "linktest_timings";

/// One object of the pair table with its footer.
struct Object {
    key: String,
    /// The part's row groups in a merged file (None: all of the object).
    within: Option<Range<usize>>,
    path: object_store::path::Path,
    size: u64,
    meta: ArrowReaderMetadata,
}

/// The pairs of one file (`source`) of a run.
pub struct Pairs {
    lake: Lake,
    objects: Vec<Object>,
    source: String,
}

impl std::fmt::Debug for Pairs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pairs")
            .field("source", &self.source)
            .field(
                "objects",
                &self.objects.iter().map(|o| &o.key).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// What a row group's statistics say about a column: one value throughout,
/// a range, or nothing.
#[derive(Debug, PartialEq)]
enum Known<T> {
    One(T),
    Range(T, T),
    Unknown,
}

fn int_stats(rg: &RowGroupMetaData, col: Option<usize>) -> Known<i32> {
    match col
        .and_then(|c| rg.columns().get(c))
        .and_then(|c| c.statistics())
    {
        Some(Statistics::Int32(s)) => match (s.min_opt(), s.max_opt()) {
            (Some(a), Some(b)) if a == b && s.null_count_opt() == Some(0) => Known::One(*a),
            (Some(a), Some(b)) => Known::Range(*a, *b),
            _ => Known::Unknown,
        },
        _ => Known::Unknown,
    }
}

fn text_stats(rg: &RowGroupMetaData, col: Option<usize>) -> Known<Vec<u8>> {
    match col
        .and_then(|c| rg.columns().get(c))
        .and_then(|c| c.statistics())
    {
        Some(Statistics::ByteArray(s)) if s.min_is_exact() && s.max_is_exact() => {
            match (s.min_opt(), s.max_opt()) {
                (Some(a), Some(b)) if a == b && s.null_count_opt() == Some(0) => {
                    Known::One(a.data().to_vec())
                }
                (Some(a), Some(b)) => Known::Range(a.data().to_vec(), b.data().to_vec()),
                _ => Known::Unknown,
            }
        }
        _ => Known::Unknown,
    }
}

/// The object store path and size of `key` in `lake`. A lake opened on
/// `s3://bucket/prefix` keeps its objects under `prefix` (as `Lake::open`
/// sets it; `Lake` does not expose its paths), other lakes at the key
/// itself: the prefixed path is tried first, then the key.
async fn locate(lake: &Lake, key: &str) -> Result<(object_store::path::Path, u64), String> {
    let prefix = lake
        .root()
        .strip_prefix("s3://")
        .and_then(|r| r.split_once('/'))
        .map(|(_, p)| p.trim_matches('/'))
        .filter(|p| !p.is_empty());
    let mut paths = vec![object_store::path::Path::from(key)];
    if let Some(p) = prefix {
        paths.insert(0, object_store::path::Path::from(format!("{p}/{key}")));
    }
    for p in paths {
        match lake.store().head(&p).await {
            Ok(m) => return Ok((p, m.size)),
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => return Err(format!("{key}: {e}")),
        }
    }
    Err(format!("{key}: no such object"))
}

#[allow(deprecated)]
fn reader(lake: &Lake, path: &object_store::path::Path, size: u64) -> ParquetObjectReader {
    ParquetObjectReader::new(lake.store().clone(), path.clone()).with_file_size(size)
}

/// The row groups to read and which of (source, permutation) must be read
/// to filter their rows.
struct Plan {
    groups: Vec<usize>,
    need_source: bool,
    need_perm: bool,
}

impl Pairs {
    /// The pair objects of the run (from its committed files), their footers
    /// read once.
    pub async fn open(lake: &Lake, files: &[CommittedFile], source: &str) -> Result<Self, String> {
        let mut objects = Vec::new();
        // A part merged by compaction is its row groups of a merged file.
        let mut parts: Vec<(&str, Option<Range<usize>>)> = files
            .iter()
            .filter(|f| f.table == TABLE)
            .map(|f| (f.object(), f.row_groups().map(|(a, n)| a..a + n)))
            .collect();
        parts.sort_by(|a, b| {
            (a.0, a.1.as_ref().map(|r| r.start)).cmp(&(b.0, b.1.as_ref().map(|r| r.start)))
        });
        parts.dedup();
        for (key, within) in parts {
            let (path, size) = locate(lake, key).await?;
            let mut r = reader(lake, &path, size);
            let meta = ArrowReaderMetadata::load_async(&mut r, ArrowReaderOptions::new())
                .await
                .map_err(|e| format!("{key}: {e}"))?;
            objects.push(Object {
                key: key.to_string(),
                within,
                path,
                size,
                meta,
            });
        }
        Ok(Self {
            lake: lake.clone(),
            objects,
            source: source.to_string(),
        })
    }

    fn column(o: &Object, name: &str) -> Option<usize> {
        let s = o.meta.metadata().file_metadata().schema_descr();
        (0..s.num_columns()).find(|i| s.column(*i).name() == name)
    }

    /// The row groups of `o` that may hold pairs of this file, permutation
    /// `perm` (any when None) and initiating ranks `rows`.
    fn plan(&self, o: &Object, perm: Option<i32>, rows: Option<&Range<usize>>) -> Plan {
        let (cs, cp, cf) = (
            Self::column(o, "source"),
            Self::column(o, "permutation"),
            Self::column(o, "from_rank"),
        );
        let src = self.source.as_bytes();
        let mut plan = Plan {
            groups: Vec::new(),
            need_source: false,
            need_perm: false,
        };
        for (g, rg) in o.meta.metadata().row_groups().iter().enumerate() {
            if o.within.as_ref().is_some_and(|w| !w.contains(&g)) {
                continue;
            }
            match text_stats(rg, cs) {
                Known::One(v) if v != src => continue,
                Known::One(_) => {}
                Known::Range(a, b) if src < a.as_slice() || src > b.as_slice() => continue,
                _ => plan.need_source = true,
            }
            if let Some(p) = perm {
                match int_stats(rg, cp) {
                    Known::One(v) if v != p => continue,
                    Known::One(_) => {}
                    Known::Range(a, b) if p < a || p > b => continue,
                    _ => plan.need_perm = true,
                }
            }
            if let Some(r) = rows {
                let (lo, hi) = match int_stats(rg, cf) {
                    Known::One(a) => (a, a),
                    Known::Range(a, b) => (a, b),
                    Known::Unknown => (i32::MIN, i32::MAX),
                };
                if i64::from(hi) < r.start as i64 || i64::from(lo) >= r.end as i64 {
                    continue;
                }
            }
            plan.groups.push(g);
        }
        plan
    }

    /// Streams the batches of `groups` of `o`, only `cols`, to `f`.
    async fn batches(
        &self,
        o: &Object,
        groups: Vec<usize>,
        cols: &[&str],
        mut f: impl FnMut(&RecordBatch) -> Result<(), String>,
    ) -> Result<(), String> {
        if groups.is_empty() {
            return Ok(());
        }
        let schema = o.meta.metadata().file_metadata().schema_descr();
        let ix: Vec<usize> = (0..schema.num_columns())
            .filter(|i| cols.contains(&schema.column(*i).name()))
            .collect();
        let mask = ProjectionMask::leaves(schema, ix);
        let mut s = ParquetRecordBatchStreamBuilder::new_with_metadata(
            reader(&self.lake, &o.path, o.size),
            o.meta.clone(),
        )
        .with_projection(mask)
        .with_row_groups(groups)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| format!("{}: {e}", o.key))?;
        while let Some(b) = s.next().await {
            f(&b.map_err(|e| format!("{}: {e}", o.key))?)?;
        }
        Ok(())
    }

    /// The permutation values stored for this file, ascending (the n-th is
    /// permutation n of the page). From the row groups' statistics when each
    /// holds one; otherwise the permutation column is read.
    pub async fn permutations(&self) -> Result<Vec<i32>, String> {
        let mut out: Vec<i32> = Vec::new();
        for o in &self.objects {
            let cp = Self::column(o, "permutation");
            let plan = self.plan(o, None, None);
            let mut scan = Vec::new();
            for g in plan.groups {
                match int_stats(&o.meta.metadata().row_groups()[g], cp) {
                    Known::One(v) if !plan.need_source => out.push(v),
                    _ => scan.push(g),
                }
            }
            let src = self.source.clone();
            let need_source = plan.need_source;
            self.batches(o, scan, &["source", "permutation"], |b| {
                let p = col_i32(b, "permutation")?;
                let s = if need_source {
                    Some(col_str(b, "source")?)
                } else {
                    None
                };
                for i in 0..b.num_rows() {
                    if s.is_some_and(|s| s.value(i) != src) || p.is_null(i) {
                        continue;
                    }
                    let v = p.value(i);
                    if out.last() != Some(&v) {
                        out.push(v);
                    }
                }
                Ok(())
            })
            .await?;
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Streams every pair of permutation `perm` (with initiating rank in
    /// `rows`, when given) to `sink`: `(from, to, time_s, step)`; a negative
    /// rank arrives as `usize::MAX` (the sink refuses it).
    pub async fn stream(
        &self,
        perm: i32,
        rows: Option<Range<usize>>,
        sink: &mut Sink<'_>,
    ) -> Result<u64, String> {
        let mut seen = 0u64;
        for o in &self.objects {
            let plan = self.plan(o, Some(perm), rows.as_ref());
            let mut cols = vec!["from_rank", "to_rank", "step", "time_s"];
            if plan.need_source {
                cols.push("source");
            }
            if plan.need_perm {
                cols.push("permutation");
            }
            let (need_source, need_perm) = (plan.need_source, plan.need_perm);
            let src = self.source.as_str();
            self.batches(o, plan.groups, &cols, |b| {
                let (from, to) = (col_i32(b, "from_rank")?, col_i32(b, "to_rank")?);
                let step = col_i32(b, "step")?;
                let time = b
                    .column_by_name("time_s")
                    .and_then(|c| c.as_primitive_opt::<Float64Type>())
                    .ok_or_else(|| format!("{TABLE}: no f64 column 'time_s'"))?;
                let s = if need_source {
                    Some(col_str(b, "source")?)
                } else {
                    None
                };
                let p = if need_perm {
                    Some(col_i32(b, "permutation")?)
                } else {
                    None
                };
                let rank = |v: i32| usize::try_from(v).unwrap_or(usize::MAX);
                for i in 0..b.num_rows() {
                    if s.is_some_and(|s| s.is_null(i) || s.value(i) != src)
                        || p.is_some_and(|p| p.is_null(i) || p.value(i) != perm)
                        || from.is_null(i)
                        || to.is_null(i)
                        || time.is_null(i)
                    {
                        continue;
                    }
                    let st = if step.is_null(i) { 0 } else { step.value(i) };
                    sink(rank(from.value(i)), rank(to.value(i)), time.value(i), st);
                    seen += 1;
                }
                Ok(())
            })
            .await?;
        }
        Ok(seen)
    }
}

fn col_i32<'a>(
    b: &'a RecordBatch,
    name: &str,
) -> Result<&'a arrow::array::PrimitiveArray<Int32Type>, String> {
    b.column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<Int32Type>())
        .ok_or_else(|| format!("{TABLE}: no i32 column '{name}'"))
}

fn col_str<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a arrow::array::StringArray, String> {
    b.column_by_name(name)
        .and_then(|c| c.as_string_opt::<i32>())
        .ok_or_else(|| format!("{TABLE}: no text column '{name}'"))
}

/// Shared handle for the blocking loads.
pub type SharedPairs = Arc<Pairs>;

#[cfg(test)]
mod tests {
    use super::*;
    use benchlake_analysis::linktest_report::stream::summarize_streamed;
    use benchlake_analysis::linktest_report::{ReportOptions, summarize};
    use benchlake_core::lake::TableOutput;
    use benchlake_formats::linktest::{LinkTestRun, into_run_tables, synth};

    /// The tables of `runs` (each with its file name) committed as one job:
    /// one object per table holding every file's rows.
    async fn commit(
        lake: &Lake,
        run_id: &str,
        runs: &[(&LinkTestRun, &str)],
    ) -> Vec<CommittedFile> {
        let mut by_table: Vec<TableOutput> = Vec::new();
        for (run, source) in runs {
            for t in into_run_tables((*run).clone(), run_id, source).unwrap() {
                match by_table.iter_mut().find(|o| o.table == t.table) {
                    Some(o) => o.batches.extend(t.batches),
                    None => by_table.push(t),
                }
            }
        }
        let job = benchlake_core::ids::new_id();
        let keys = lake
            .write_final(&by_table, "2026-12-07", run_id, &job)
            .await
            .unwrap();
        keys.into_iter()
            .zip(&by_table)
            .map(|(key, t)| CommittedFile {
                key,
                table: t.table.clone(),
                run_id: run_id.into(),
                job_id: job.clone(),
                date: "2026-12-07".into(),
                rows: 0,
                bytes: 0,
                committed_ms: 0,
                merged: None,
            })
            .collect()
    }

    async fn collect(
        p: &Pairs,
        perm: i32,
        rows: Option<Range<usize>>,
    ) -> Vec<(usize, usize, f64, i32)> {
        let mut out = Vec::new();
        let n = p
            .stream(perm, rows, &mut |i, j, t, s| out.push((i, j, t, s)))
            .await
            .unwrap();
        assert_eq!(n as usize, out.len());
        out
    }

    #[tokio::test]
    async fn the_pairs_of_one_file_stream_like_the_dense_matrix() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let run_id = benchlake_core::ids::new_id();
        let (a, b) = (
            synth::synthetic_run(120, 16, 1),
            synth::synthetic_run(50, 8, 2),
        );
        let files = commit(
            &lake,
            &run_id,
            &[(&a, "raw/x/a.sion"), (&b, "raw/x/b.sion")],
        )
        .await;
        for (run, source) in [(&a, "raw/x/a.sion"), (&b, "raw/x/b.sion")] {
            let p = Pairs::open(&lake, &files, source).await.unwrap();
            assert_eq!(p.permutations().await.unwrap(), vec![0]);
            let n = run.num_tasks;
            let got = collect(&p, 0, None).await;
            // Every pair of this file once, with the file's values; none of the other file.
            assert_eq!(got.len(), n * (n - 1));
            let dense = &run.permutations[0];
            for (i, j, t, s) in &got {
                assert_eq!(dense.times[i * n + j], *t);
                assert_eq!(dense.steps[i * n + j], *s);
            }
            // The report from the stream is the report of the dense run.
            let opts = ReportOptions {
                max_matrix_cells: 32,
                ..Default::default()
            };
            let s = summarize_streamed(run, &opts, |f| {
                for (i, j, t, st) in &got {
                    f(*i, *j, *t, *st);
                }
                Ok(())
            })
            .unwrap();
            assert_eq!(
                serde_json::to_value(&s.summary).unwrap(),
                serde_json::to_value(summarize(run, &opts).unwrap()).unwrap()
            );
            // A window's rows only; a permutation the file does not have: nothing.
            let rows = collect(&p, 0, Some(10..20)).await;
            assert!(rows.iter().filter(|r| (10..20).contains(&r.0)).count() == 10 * (n - 1));
            assert!(collect(&p, 3, None).await.is_empty());
        }
        // Both files in one object: its row groups hold two files, so the
        // file column is read to tell them apart.
        let p = Pairs::open(&lake, &files, "raw/x/a.sion").await.unwrap();
        let plan = p.plan(&p.objects[0], Some(0), None);
        assert!(plan.need_source && !plan.need_perm, "{:?}", plan.groups);
        // A missing object is an error naming it.
        let mut gone = files.clone();
        for f in &mut gone {
            f.key = f.key.replace(".parquet", "-gone.parquet");
        }
        let e = Pairs::open(&lake, &gone, "raw/x/a.sion")
            .await
            .err()
            .unwrap();
        assert!(
            e.contains("-gone.parquet") && e.contains("no such object"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn row_group_statistics_skip_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let run_id = benchlake_core::ids::new_id();
        let a = synth::synthetic_run(40, 8, 5);
        let files = commit(&lake, &run_id, &[(&a, "raw/y/a.sion")]).await;
        let p = Pairs::open(&lake, &files, "raw/y/a.sion").await.unwrap();
        // One file: the statistics say which file and permutation each row
        // group holds, so neither column is read.
        let plan = p.plan(&p.objects[0], Some(0), None);
        assert_eq!(
            (plan.groups.len(), plan.need_source, plan.need_perm),
            (1, false, false)
        );
        assert!(p.plan(&p.objects[0], Some(1), None).groups.is_empty());
        assert!(
            p.plan(&p.objects[0], Some(0), Some(&(40..80)))
                .groups
                .is_empty()
        );
        let other = Pairs::open(&lake, &files, "raw/y/other.sion")
            .await
            .unwrap();
        assert!(
            other
                .plan(&other.objects[0], Some(0), None)
                .groups
                .is_empty()
        );
        assert!(other.permutations().await.unwrap().is_empty());
    }
}
