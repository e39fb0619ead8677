//! The summary tables the ingest job writes beside the rows they summarise
//! (issue 40; docs/linktest.md, "Last night and one node's history"), so the
//! everyday questions ("which hosts were slow last night", "one node's
//! history") read a few rows per host instead of every pair:
//!
//! - `linktest_host_summary`: per LinkTest file, host and pair class
//!   (`intra`: both ranks on the host; `inter`: the partner elsewhere), the
//!   pairs counted, min/median/max time and the bandwidths they mean
//!   (`message_size / time`), and the slow pairs by the checks' one rule
//!   ([`SlowPair::threshold`]);
//! - `io_node_summary`: per I/O file, test, operation and node, the
//!   min/median/max process bandwidth ([`process_bw_mib_s`], the node
//!   checks' definition).
//!
//! Medians are [`crate::reference::median`]. Both are derived from the
//! tables as the ingest encoded them ([`derive`]), so the worker's job and
//! the offline `benchlake ingest` write the same rows.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use benchlake_core::catalog;
use benchlake_core::lake::{EncodedTable, TableOutput};
use benchlake_formats::kinds::Summary;

use crate::linktest_checks::SlowPair;
use crate::node_checks::{f64_col, process_bw_mib_s, text_col};
use crate::reference::{median, median_in_place};

/// Why a summary could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("summary of {table}: {source}")]
    Lake {
        table: String,
        #[source]
        source: benchlake_core::Error,
    },
    #[error("summary {table}: {source}")]
    Arrow {
        table: String,
        #[source]
        source: arrow::error::ArrowError,
    },
}

/// The summary tables of one ingest of format `format` (the summary its
/// descriptor declares, `benchlake_formats::kinds`: `linktest`, `pio`,
/// `ior`; none for others), from the tables it produced (encoded or as
/// batches). `params` are the run's (`check_slow_pair_*`); bad values
/// fall back to the defaults with a warning (the checks job reports them).
pub fn derive(
    format: &str,
    run_id: &str,
    encoded: &[EncodedTable],
    tables: &[TableOutput],
    params: &BTreeMap<String, String>,
) -> Result<Vec<TableOutput>, SummaryError> {
    let source = Rows { encoded, tables };
    let summary = benchlake_formats::kinds::get(format).and_then(|k| k.summary);
    match summary {
        Some(Summary::LinktestHosts) => {
            let slow = SlowPair::from_params(params).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "linktest_host_summary: default slow-pair rule");
                SlowPair::default()
            });
            let mut b = HostSummary::default();
            source.each("linktest_runs", &["source", "message_size"], |x| {
                b.add_runs(&x);
                Ok(())
            })?;
            source.each("linktest_ranks", &["source", "rank", "hostname"], |x| {
                b.add_ranks(&x);
                Ok(())
            })?;
            source.each(
                "linktest_timings",
                &["source", "from_rank", "to_rank", "time_s"],
                |x| {
                    b.add_timings(&x);
                    Ok(())
                },
            )?;
            Ok(b.finish(run_id, &slow)?.into_iter().collect())
        }
        Some(Summary::IoNodes) => {
            let mut b = IoNodeSummary::default();
            source.each(
                "io_task_times",
                &[
                    "source",
                    "test_id",
                    "operation",
                    "host",
                    "bytes",
                    "xfer_time_s",
                ],
                |x| {
                    b.add(&x);
                    Ok(())
                },
            )?;
            Ok(b.finish(run_id)?.into_iter().collect())
        }
        None => Ok(Vec::new()),
    }
}

/// An ingest's tables, encoded or as batches.
struct Rows<'a> {
    encoded: &'a [EncodedTable],
    tables: &'a [TableOutput],
}

impl Rows<'_> {
    /// Every batch of `table` (only `columns` of encoded ones) to `f`.
    fn each(
        &self,
        table: &str,
        columns: &[&str],
        mut f: impl FnMut(RecordBatch) -> Result<(), SummaryError>,
    ) -> Result<(), SummaryError> {
        for t in self.tables.iter().filter(|t| t.table == table) {
            for b in &t.batches {
                f(b.clone())?;
            }
        }
        let mut failed = None;
        for e in self.encoded.iter().filter(|e| e.table == table) {
            e.for_each_batch(columns, |b| {
                if let Err(err) = f(b) {
                    failed = Some(err);
                }
                Ok(())
            })
            .map_err(|source| SummaryError::Lake {
                table: table.to_string(),
                source,
            })?;
        }
        failed.map_or(Ok(()), Err)
    }
}

/// No host known for the rank.
const NO_HOST: u32 = u32::MAX;

/// Ranks beyond this are not summarised (LinkTest's largest runs are far
/// below; a damaged rank number cannot make a huge table).
const MAX_RANK: f64 = (1u32 << 24) as f64;

/// Column `n` as `Int32` (cast when stored otherwise).
fn i32_col(b: &RecordBatch, n: &str) -> Option<arrow::array::Int32Array> {
    b.column_by_name(n)
        .and_then(|a| arrow::compute::cast(a, &arrow::datatypes::DataType::Int32).ok())
        .and_then(|a| {
            a.as_any()
                .downcast_ref::<arrow::array::Int32Array>()
                .cloned()
        })
}

/// Whether row `i`'s pair columns are all set.
fn from_valid(b: &RecordBatch, i: usize) -> bool {
    ["from_rank", "to_rank", "time_s"]
        .iter()
        .all(|c| b.column_by_name(c).is_some_and(|a| a.is_valid(i)))
}

/// One LinkTest file's pairs, by host.
#[derive(Default)]
struct LinkFile {
    message_size: i64,
    /// Host number of each rank ([`NO_HOST`] for ranks without one).
    host_of: Vec<u32>,
    hosts: Vec<String>,
    /// Every pair time of the file (its median sets the slow threshold).
    times: Vec<f64>,
    /// Slot `2 × host + intra` → the times of the pairs with that host at
    /// either end (intra: both).
    groups: Vec<Vec<f64>>,
}

/// Builds `linktest_host_summary` from `linktest_runs`, `linktest_ranks` and
/// the pair batches, fed in that order.
#[derive(Default)]
pub struct HostSummary {
    files: Vec<(String, LinkFile)>,
    index: HashMap<String, usize>,
}

impl HostSummary {
    fn file(&mut self, source: &str) -> &mut LinkFile {
        let k = match self.index.get(source) {
            Some(k) => *k,
            None => {
                self.files.push((source.to_string(), LinkFile::default()));
                self.index.insert(source.to_string(), self.files.len() - 1);
                self.files.len() - 1
            }
        };
        &mut self.files[k].1
    }

    /// `linktest_runs` rows: each file's message size.
    pub fn add_runs(&mut self, b: &RecordBatch) {
        let (Some(src), Some(size)) = (text_col(b, "source"), f64_col(b, "message_size")) else {
            return;
        };
        for i in 0..b.num_rows() {
            if src.is_valid(i) && size.is_valid(i) {
                self.file(src.value(i)).message_size = size.value(i) as i64;
            }
        }
    }

    /// `linktest_ranks` rows: each rank's host. Ranks without a host name
    /// are left out (their pairs are summarised under no host).
    pub fn add_ranks(&mut self, b: &RecordBatch) {
        let (Some(src), Some(rank), Some(host)) = (
            text_col(b, "source"),
            f64_col(b, "rank"),
            text_col(b, "hostname"),
        ) else {
            return;
        };
        for i in 0..b.num_rows() {
            if !(src.is_valid(i) && rank.is_valid(i) && host.is_valid(i))
                || host.value(i).is_empty()
            {
                continue;
            }
            let f = self.file(src.value(i));
            let h = match f.hosts.iter().position(|x| x == host.value(i)) {
                Some(k) => k as u32,
                None => {
                    f.hosts.push(host.value(i).to_string());
                    (f.hosts.len() - 1) as u32
                }
            };
            let r = rank.value(i);
            if (0.0..MAX_RANK).contains(&r) {
                let r = r as usize;
                if f.host_of.len() <= r {
                    f.host_of.resize(r + 1, NO_HOST);
                }
                f.host_of[r] = h;
            }
        }
    }

    /// `linktest_timings` rows: a pair counts for its initiating host and,
    /// when that is another host, for its partner's.
    pub fn add_timings(&mut self, b: &RecordBatch) {
        let (Some(src), Some(from), Some(to), Some(t)) = (
            text_col(b, "source"),
            i32_col(b, "from_rank"),
            i32_col(b, "to_rank"),
            f64_col(b, "time_s"),
        ) else {
            return;
        };
        let nulls = src.null_count() + from.null_count() + to.null_count() + t.null_count() > 0;
        let (from, to, times) = (from.values(), to.values(), t.values());
        let mut last: Option<(&str, usize)> = None;
        for i in 0..b.num_rows() {
            if nulls && !(src.is_valid(i) && from_valid(b, i)) {
                continue;
            }
            let name = src.value(i);
            let k = match last {
                Some((n, k)) if n == name => k,
                _ => {
                    let Some(&k) = self.index.get(name) else {
                        continue;
                    };
                    last = Some((name, k));
                    k
                }
            };
            let f = &mut self.files[k].1;
            let time = times[i];
            f.times.push(time);
            let host = |r: i32| -> Option<u32> {
                let h = *f.host_of.get(usize::try_from(r).ok()?)?;
                (h != NO_HOST).then_some(h)
            };
            let (Some(a), Some(z)) = (host(from[i]), host(to[i])) else {
                continue;
            };
            let slot = |h: u32, intra: bool| 2 * h as usize + usize::from(intra);
            let need = slot(a.max(z), true) + 1;
            if f.groups.len() < need {
                f.groups.resize_with(need, Vec::new);
            }
            f.groups[slot(a, a == z)].push(time);
            if a != z {
                f.groups[slot(z, false)].push(time);
            }
        }
    }

    /// The table's rows, ordered by file, host and class; `None` when no
    /// pair had hosts.
    pub fn finish(
        self,
        run_id: &str,
        slow: &SlowPair,
    ) -> Result<Option<TableOutput>, SummaryError> {
        let mut rows: Vec<HostRow> = Vec::new();
        let mut files = self.files;
        files.sort_by(|a, b| a.0.cmp(&b.0));
        for (source, mut f) in files {
            let Some(file_median) = median_in_place(&mut f.times) else {
                continue;
            };
            let threshold = slow.threshold(file_median);
            // By host name, `intra` before `inter`.
            let mut keys: Vec<(u32, bool)> = (0..f.groups.len())
                .filter(|k| !f.groups[*k].is_empty())
                .map(|k| ((k / 2) as u32, k % 2 == 1))
                .collect();
            keys.sort_by(|a, b| {
                f.hosts[a.0 as usize]
                    .cmp(&f.hosts[b.0 as usize])
                    .then(b.1.cmp(&a.1))
            });
            for k in keys {
                let Some(times) = f.groups.get_mut(2 * k.0 as usize + usize::from(k.1)) else {
                    continue;
                };
                let (lo, hi) = (
                    times.iter().copied().fold(f64::INFINITY, f64::min),
                    times.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                );
                let Some(med) = median_in_place(times) else {
                    continue;
                };
                rows.push(HostRow {
                    source: source.clone(),
                    host: f.hosts[k.0 as usize].clone(),
                    class: if k.1 { "intra" } else { "inter" },
                    pairs: times.len() as i64,
                    time: [lo, med, hi],
                    message_size: f.message_size,
                    slow: times.iter().filter(|t| **t > threshold).count() as i64,
                    threshold,
                });
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let bw = |t: f64, size: i64| if t > 0.0 { size as f64 / t } else { f64::NAN };
        let f64s = |g: &dyn Fn(&HostRow) -> f64| -> ArrayRef {
            Arc::new(Float64Array::from_iter_values(rows.iter().map(g)))
        };
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|_| run_id))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.source.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.host.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.class))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.pairs))),
            f64s(&|r| r.time[0]),
            f64s(&|r| r.time[1]),
            f64s(&|r| r.time[2]),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| r.message_size),
            )),
            f64s(&|r| bw(r.time[0], r.message_size)),
            f64s(&|r| bw(r.time[1], r.message_size)),
            f64s(&|r| bw(r.time[2], r.message_size)),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.slow))),
            f64s(&|r| r.threshold),
        ];
        batch_of("linktest_host_summary", cols).map(Some)
    }
}

struct HostRow {
    source: String,
    host: String,
    class: &'static str,
    pairs: i64,
    /// min, median, max.
    time: [f64; 3],
    message_size: i64,
    slow: i64,
    threshold: f64,
}

fn batch_of(table: &str, cols: Vec<ArrayRef>) -> Result<TableOutput, SummaryError> {
    let schema = catalog::schema(table).map_err(|source| SummaryError::Lake {
        table: table.to_string(),
        source,
    })?;
    let b = RecordBatch::try_new(schema, cols).map_err(|source| SummaryError::Arrow {
        table: table.to_string(),
        source,
    })?;
    Ok(TableOutput::new(table, vec![b]))
}

/// An `io_node_summary` row's key: source, test_id, operation, node.
type IoKey = (String, Option<i64>, String, String);

/// Builds `io_node_summary` from `io_task_times` batches.
#[derive(Default)]
pub struct IoNodeSummary {
    /// (source, test_id, operation, node) → (bytes, process bandwidths).
    groups: BTreeMap<IoKey, (f64, Vec<f64>)>,
}

impl IoNodeSummary {
    /// `io_task_times` rows; rows without a host, or without bytes moved in
    /// a positive transfer time, are left out.
    pub fn add(&mut self, b: &RecordBatch) {
        let (Some(src), Some(op), Some(host), Some(bytes), Some(xfer)) = (
            text_col(b, "source"),
            text_col(b, "operation"),
            text_col(b, "host"),
            f64_col(b, "bytes"),
            f64_col(b, "xfer_time_s"),
        ) else {
            return;
        };
        let test = f64_col(b, "test_id");
        for i in 0..b.num_rows() {
            let valid = [&src, &op, &host].iter().all(|c| c.is_valid(i))
                && bytes.is_valid(i)
                && xfer.is_valid(i);
            if !valid || host.value(i).is_empty() {
                continue;
            }
            let Some(bw) = process_bw_mib_s(bytes.value(i), xfer.value(i)) else {
                continue;
            };
            let test_id = test
                .as_ref()
                .filter(|c| c.is_valid(i))
                .map(|c| c.value(i) as i64);
            let e = self
                .groups
                .entry((
                    src.value(i).to_string(),
                    test_id,
                    op.value(i).to_string(),
                    host.value(i).to_string(),
                ))
                .or_default();
            e.0 += bytes.value(i);
            e.1.push(bw);
        }
    }

    /// The table's rows, by file, test, operation and node; `None` when no
    /// row named a host.
    pub fn finish(self, run_id: &str) -> Result<Option<TableOutput>, SummaryError> {
        let mut rows = Vec::new();
        for ((source, test, op, node), (bytes, bws)) in self.groups {
            let (Some(med), Some(lo), Some(hi)) = (
                median(&bws),
                bws.iter().copied().reduce(f64::min),
                bws.iter().copied().reduce(f64::max),
            ) else {
                continue;
            };
            rows.push((
                source,
                test,
                op,
                node,
                bws.len() as i64,
                bytes as i64,
                [lo, med, hi],
            ));
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let f64s = |k: usize| -> ArrayRef {
            Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.6[k])))
        };
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|_| run_id))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.0.as_str()),
            )),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.2.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.3.as_str()),
            )),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.4))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.5))),
            f64s(0),
            f64s(1),
            f64s(2),
        ];
        batch_of("io_node_summary", cols).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;

    fn strings(v: &[&str]) -> ArrayRef {
        Arc::new(StringArray::from(v.to_vec()))
    }

    /// Four ranks, two per host (a: 0, 1; b: 2, 3), every ordered pair.
    fn linktest(times: impl Fn(i32, i32) -> f64) -> (RecordBatch, RecordBatch, RecordBatch) {
        let ranks = RecordBatch::try_new(
            catalog::schema("linktest_ranks").unwrap(),
            vec![
                strings(&["R"; 4]),
                strings(&["f"; 4]),
                Arc::new(Int32Array::from(vec![0, 1, 2, 3])),
                strings(&["a", "a", "b", "b"]),
                Arc::new(Int32Array::from(vec![None::<i32>; 4])),
            ],
        )
        .unwrap();
        let (mut from, mut to, mut t) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..4 {
            for j in 0..4 {
                if i != j {
                    from.push(i);
                    to.push(j);
                    t.push(times(i, j));
                }
            }
        }
        let n = t.len();
        let host = |r: &i32| if *r < 2 { "a" } else { "b" };
        let timings = RecordBatch::try_new(
            catalog::schema("linktest_timings").unwrap(),
            vec![
                strings(&vec!["R"; n]),
                strings(&vec!["f"; n]),
                Arc::new(Int32Array::from(vec![0; n])),
                Arc::new(Int32Array::from(from.clone())),
                Arc::new(Int32Array::from(to.clone())),
                Arc::new(Int32Array::from(vec![1; n])),
                Arc::new(Float64Array::from(t)),
                strings(&from.iter().map(host).collect::<Vec<_>>()),
                strings(&to.iter().map(host).collect::<Vec<_>>()),
            ],
        )
        .unwrap();
        // Only the columns the summary reads of linktest_runs.
        let runs = RecordBatch::try_from_iter(vec![
            ("source", strings(&["f"])),
            (
                "message_size",
                Arc::new(Int64Array::from(vec![1000])) as ArrayRef,
            ),
        ])
        .unwrap();
        (runs, ranks, timings)
    }

    fn col<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> &'a T {
        b.column_by_name(name)
            .unwrap()
            .as_any()
            .downcast_ref::<T>()
            .unwrap()
    }

    /// Exact values of a hand-made run: intra pairs 1 µs, inter pairs 2 µs,
    /// but every pair of rank 3 → rank 0 or 1 is 10 µs.
    #[test]
    fn host_summary_has_exact_values() {
        let (runs, ranks, timings) = linktest(|i, j| match (i, j) {
            (3, 0) | (3, 1) => 10e-6,
            _ if i / 2 == j / 2 => 1e-6,
            _ => 2e-6,
        });
        let t = derive(
            "linktest",
            "R",
            &[],
            &[
                TableOutput::new("linktest_runs", vec![runs]),
                TableOutput::new("linktest_ranks", vec![ranks]),
                TableOutput::new("linktest_timings", vec![timings]),
            ],
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(t.len(), 1);
        let b = &t[0].batches[0];
        assert_eq!(t[0].table, "linktest_host_summary");
        let host = col::<StringArray>(b, "host");
        let class = col::<StringArray>(b, "pair_class");
        let rows: Vec<(&str, &str)> = (0..b.num_rows())
            .map(|i| (host.value(i), class.value(i)))
            .collect();
        assert_eq!(
            rows,
            [
                ("a", "intra"),
                ("a", "inter"),
                ("b", "intra"),
                ("b", "inter")
            ]
        );
        let pairs = col::<Int64Array>(b, "pairs").values().to_vec();
        // Intra: 0→1, 1→0 (2 pairs); inter: the 8 pairs between the hosts.
        assert_eq!(pairs, [2, 8, 2, 8]);
        let get = |c: &str| col::<Float64Array>(b, c).values().to_vec();
        assert_eq!(get("min_time_s"), [1e-6, 2e-6, 1e-6, 2e-6]);
        // Inter times: six of 2 µs, two of 10 µs: median 2 µs.
        assert_eq!(get("median_time_s"), [1e-6, 2e-6, 1e-6, 2e-6]);
        assert_eq!(get("max_time_s"), [1e-6, 10e-6, 1e-6, 10e-6]);
        assert_eq!(get("max_bw_bytes_s"), [1e9, 5e8, 1e9, 5e8]);
        assert_eq!(get("min_bw_bytes_s")[1], 1000.0 / 10e-6);
        // File median of the 12 pairs (4 × 1 µs, 6 × 2 µs, 2 × 10 µs) is
        // 2 µs: slow above 4 µs, the two 10 µs pairs, on both hosts' inter rows.
        assert_eq!(get("slow_threshold_s"), [4e-6; 4]);
        assert_eq!(
            col::<Int64Array>(b, "slow_pairs").values().to_vec(),
            [0, 2, 0, 2]
        );
        // The run's rule is the checks' rule: an absolute threshold.
        let (runs, ranks, timings) = linktest(|_, j| if j == 0 { 3e-6 } else { 1e-6 });
        let p: BTreeMap<String, String> =
            [("check_slow_pair_time_s".to_string(), "2.5e-6".to_string())].into();
        let t = derive(
            "linktest",
            "R",
            &[],
            &[
                TableOutput::new("linktest_runs", vec![runs]),
                TableOutput::new("linktest_ranks", vec![ranks]),
                TableOutput::new("linktest_timings", vec![timings]),
            ],
            &p,
        )
        .unwrap();
        let b = &t[0].batches[0];
        // Pairs toward rank 0: 1→0 (a intra), 2→0 and 3→0 (inter, both hosts).
        assert_eq!(
            col::<Int64Array>(b, "slow_pairs").values().to_vec(),
            [1, 2, 0, 2]
        );
        assert_eq!(col::<Float64Array>(b, "slow_threshold_s").value(0), 2.5e-6);
    }

    /// Pairs of an older file (no host columns) are summarised from the
    /// rank table all the same.
    #[test]
    fn host_summary_of_pairs_without_host_columns() {
        let (runs, ranks, timings) = linktest(|i, j| if i / 2 == j / 2 { 1e-6 } else { 2e-6 });
        let old = timings.project(&[0, 1, 2, 3, 4, 5, 6]).unwrap();
        let mut b = HostSummary::default();
        b.add_runs(&runs);
        b.add_ranks(&ranks);
        b.add_timings(&old);
        let t = b.finish("R", &SlowPair::default()).unwrap().unwrap();
        assert_eq!(
            col::<Int64Array>(&t.batches[0], "pairs").values().to_vec(),
            [2, 8, 2, 8]
        );
    }

    #[test]
    fn io_node_summary_has_exact_values() {
        let mib = (1u64 << 20) as f64;
        let b = RecordBatch::try_from_iter(vec![
            ("source", strings(&["p"; 5])),
            (
                "test_id",
                Arc::new(Int64Array::from(vec![Some(0); 5])) as ArrayRef,
            ),
            (
                "operation",
                strings(&["write", "write", "write", "write", "read"]),
            ),
            ("host", strings(&["n1", "n1", "n1", "n2", "n1"])),
            (
                "bytes",
                Arc::new(Int64Array::from(vec![
                    100 * mib as i64,
                    100 * mib as i64,
                    100 * mib as i64,
                    50 * mib as i64,
                    10 * mib as i64,
                ])) as ArrayRef,
            ),
            (
                "xfer_time_s",
                Arc::new(Float64Array::from(vec![1.0, 2.0, 4.0, 1.0, 0.0])) as ArrayRef,
            ),
        ])
        .unwrap();
        let t = derive(
            "pio",
            "R",
            &[],
            &[TableOutput::new("io_task_times", vec![b])],
            &BTreeMap::new(),
        )
        .unwrap();
        let b = &t[0].batches[0];
        assert_eq!(t[0].table, "io_node_summary");
        // The read row moved bytes in no time: left out.
        assert_eq!(b.num_rows(), 2);
        let node = col::<StringArray>(b, "node");
        assert_eq!((node.value(0), node.value(1)), ("n1", "n2"));
        let get = |c: &str| col::<Float64Array>(b, c).values().to_vec();
        assert_eq!(get("min_bw_mib_s"), [25.0, 50.0]);
        assert_eq!(get("median_bw_mib_s"), [50.0, 50.0]);
        assert_eq!(get("max_bw_mib_s"), [100.0, 50.0]);
        assert_eq!(col::<Int64Array>(b, "processes").values().to_vec(), [3, 1]);
        assert_eq!(
            col::<Int64Array>(b, "bytes").values().to_vec(),
            [300 * mib as i64, 50 * mib as i64]
        );
        // Other formats have no summary.
        assert!(
            derive("mdtest", "R", &[], &[], &BTreeMap::new())
                .unwrap()
                .is_empty()
        );
    }
}
