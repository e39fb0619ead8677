//! Row structs of the I/O tables and their conversion to Arrow batches with the
//! catalog schemas (`io_results`, `io_task_times`, `io_summary`,
//! `mdtest_results`, `mdtest_summary`). Keeping the column order in one place
//! means a catalog change breaks one file, not every reader.
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray};
use arrow::record_batch::RecordBatch;
use benchlake_core::catalog;
use benchlake_core::lake::TableOutput;

use crate::error::Result;

/// One row of `io_results`.
#[derive(Debug, Clone, PartialEq)]
pub struct IoResultRow {
    pub source: String,
    pub tool: String,
    pub api: String,
    pub pattern: String,
    pub file_per_proc: bool,
    pub num_tasks: i64,
    pub block_size: i64,
    pub transfer_size: i64,
    pub segments: i64,
    pub iteration: i64,
    pub operation: String,
    pub bytes: i64,
    pub bw_mib_s: f64,
    pub iops: Option<f64>,
    pub open_time_s: Option<f64>,
    pub xfer_time_s: Option<f64>,
    pub close_time_s: Option<f64>,
    pub total_time_s: f64,
    pub fsync: bool,
    pub collective: bool,
    pub test_id: Option<i64>,
    pub verify_errors: Option<i64>,
    pub cache_mode: Option<String>,
}

/// One row of `io_task_times`.
#[derive(Debug, Clone, PartialEq)]
pub struct IoTaskRow {
    pub source: String,
    pub iteration: i64,
    pub operation: String,
    pub rank: i32,
    pub open_time_s: Option<f64>,
    pub xfer_time_s: Option<f64>,
    pub close_time_s: Option<f64>,
    pub total_time_s: Option<f64>,
    pub bytes: Option<i64>,
    pub host: Option<String>,
    pub test_id: Option<i64>,
}

/// One row of `io_summary`.
#[derive(Debug, Clone, PartialEq)]
pub struct IoSummaryRow {
    pub source: String,
    pub tool: String,
    pub test_id: i64,
    pub operation: String,
    pub api: String,
    pub num_tasks: i64,
    pub iterations: i64,
    pub bytes: i64,
    pub bw_max_mib_s: f64,
    pub bw_min_mib_s: f64,
    pub bw_mean_mib_s: f64,
    pub bw_std_mib_s: f64,
    pub ops_max: Option<f64>,
    pub ops_min: Option<f64>,
    pub ops_mean: Option<f64>,
    pub ops_std: Option<f64>,
    pub mean_time_s: f64,
}

/// One row of `mdtest_results`.
#[derive(Debug, Clone, PartialEq)]
pub struct MdtestRow {
    pub source: String,
    pub operation: String,
    pub iteration: i64,
    pub num_tasks: i64,
    pub items: Option<i64>,
    pub rate_per_s: f64,
    pub time_s: Option<f64>,
    pub rank: Option<i32>,
}

/// One row of `mdtest_summary`.
#[derive(Debug, Clone, PartialEq)]
pub struct MdtestSummaryRow {
    pub source: String,
    pub operation: String,
    pub statistic: String,
    pub unit: String,
    pub num_tasks: i64,
    pub iterations: i64,
    pub items: Option<i64>,
    pub max: f64,
    pub min: f64,
    pub mean: f64,
    pub stddev: f64,
}

fn s<T>(rows: &[T], f: impl Fn(&T) -> &str) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(rows.iter().map(f)))
}
fn so<T>(rows: &[T], f: impl Fn(&T) -> Option<&str>) -> ArrayRef {
    Arc::new(rows.iter().map(f).collect::<StringArray>())
}
fn i64s<T>(rows: &[T], f: impl Fn(&T) -> i64) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(rows.iter().map(f)))
}
fn i64o<T>(rows: &[T], f: impl Fn(&T) -> Option<i64>) -> ArrayRef {
    Arc::new(rows.iter().map(f).collect::<Int64Array>())
}
fn i32s<T>(rows: &[T], f: impl Fn(&T) -> i32) -> ArrayRef {
    Arc::new(Int32Array::from_iter_values(rows.iter().map(f)))
}
fn i32o<T>(rows: &[T], f: impl Fn(&T) -> Option<i32>) -> ArrayRef {
    Arc::new(rows.iter().map(f).collect::<Int32Array>())
}
fn f64s<T>(rows: &[T], f: impl Fn(&T) -> f64) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(rows.iter().map(f)))
}
fn f64o<T>(rows: &[T], f: impl Fn(&T) -> Option<f64>) -> ArrayRef {
    Arc::new(rows.iter().map(f).collect::<Float64Array>())
}
fn bools<T>(rows: &[T], f: impl Fn(&T) -> bool) -> ArrayRef {
    Arc::new(rows.iter().map(|r| Some(f(r))).collect::<BooleanArray>())
}
fn run<T>(rows: &[T], run_id: &str) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(rows.iter().map(|_| run_id)))
}

fn batch(table: &str, cols: Vec<ArrayRef>) -> Result<TableOutput> {
    let schema = catalog::schema(table)?;
    let b = RecordBatch::try_new(schema, cols)?;
    Ok(TableOutput::new(table, vec![b]))
}

/// `io_results` rows as a table output.
pub fn io_results(run_id: &str, rows: &[IoResultRow]) -> Result<TableOutput> {
    batch(
        "io_results",
        vec![
            run(rows, run_id),
            s(rows, |r| &r.source),
            s(rows, |r| &r.tool),
            s(rows, |r| &r.api),
            s(rows, |r| &r.pattern),
            bools(rows, |r| r.file_per_proc),
            i64s(rows, |r| r.num_tasks),
            i64s(rows, |r| r.block_size),
            i64s(rows, |r| r.transfer_size),
            i64s(rows, |r| r.segments),
            i64s(rows, |r| r.iteration),
            s(rows, |r| &r.operation),
            i64s(rows, |r| r.bytes),
            f64s(rows, |r| r.bw_mib_s),
            f64o(rows, |r| r.iops),
            f64o(rows, |r| r.open_time_s),
            f64o(rows, |r| r.xfer_time_s),
            f64o(rows, |r| r.close_time_s),
            f64s(rows, |r| r.total_time_s),
            bools(rows, |r| r.fsync),
            bools(rows, |r| r.collective),
            i64o(rows, |r| r.test_id),
            i64o(rows, |r| r.verify_errors),
            so(rows, |r| r.cache_mode.as_deref()),
        ],
    )
}

/// `io_task_times` rows as a table output.
pub fn io_task_times(run_id: &str, rows: &[IoTaskRow]) -> Result<TableOutput> {
    batch(
        "io_task_times",
        vec![
            run(rows, run_id),
            s(rows, |r| &r.source),
            i64s(rows, |r| r.iteration),
            s(rows, |r| &r.operation),
            i32s(rows, |r| r.rank),
            f64o(rows, |r| r.open_time_s),
            f64o(rows, |r| r.xfer_time_s),
            f64o(rows, |r| r.close_time_s),
            f64o(rows, |r| r.total_time_s),
            i64o(rows, |r| r.bytes),
            so(rows, |r| r.host.as_deref()),
            i64o(rows, |r| r.test_id),
        ],
    )
}

/// `io_summary` rows as a table output.
pub fn io_summary(run_id: &str, rows: &[IoSummaryRow]) -> Result<TableOutput> {
    batch(
        "io_summary",
        vec![
            run(rows, run_id),
            s(rows, |r| &r.source),
            s(rows, |r| &r.tool),
            i64s(rows, |r| r.test_id),
            s(rows, |r| &r.operation),
            s(rows, |r| &r.api),
            i64s(rows, |r| r.num_tasks),
            i64s(rows, |r| r.iterations),
            i64s(rows, |r| r.bytes),
            f64s(rows, |r| r.bw_max_mib_s),
            f64s(rows, |r| r.bw_min_mib_s),
            f64s(rows, |r| r.bw_mean_mib_s),
            f64s(rows, |r| r.bw_std_mib_s),
            f64o(rows, |r| r.ops_max),
            f64o(rows, |r| r.ops_min),
            f64o(rows, |r| r.ops_mean),
            f64o(rows, |r| r.ops_std),
            f64s(rows, |r| r.mean_time_s),
        ],
    )
}

/// `mdtest_results` rows as a table output.
pub fn mdtest_results(run_id: &str, rows: &[MdtestRow]) -> Result<TableOutput> {
    batch(
        "mdtest_results",
        vec![
            run(rows, run_id),
            s(rows, |r| &r.source),
            s(rows, |r| &r.operation),
            i64s(rows, |r| r.iteration),
            i64s(rows, |r| r.num_tasks),
            i64o(rows, |r| r.items),
            f64s(rows, |r| r.rate_per_s),
            f64o(rows, |r| r.time_s),
            i32o(rows, |r| r.rank),
        ],
    )
}

/// `mdtest_summary` rows as a table output.
pub fn mdtest_summary(run_id: &str, rows: &[MdtestSummaryRow]) -> Result<TableOutput> {
    batch(
        "mdtest_summary",
        vec![
            run(rows, run_id),
            s(rows, |r| &r.source),
            s(rows, |r| &r.operation),
            s(rows, |r| &r.statistic),
            s(rows, |r| &r.unit),
            i64s(rows, |r| r.num_tasks),
            i64s(rows, |r| r.iterations),
            i64o(rows, |r| r.items),
            f64s(rows, |r| r.max),
            f64s(rows, |r| r.min),
            f64s(rows, |r| r.mean),
            f64s(rows, |r| r.stddev),
        ],
    )
}
