//! Replay outcomes as catalog tables (`replays`, `replay_ranks`, `replay_functions`,
//! `replay_adapters`, `replay_transfers`; schemas in `benchlake_core::catalog::replay`).
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Builder, Int32Builder, Int64Builder, StringBuilder};
use arrow::record_batch::RecordBatch;
use benchlake_core::catalog;
use benchlake_core::lake::TableOutput;

use crate::error::Result;
use crate::result::ReplayResult;

fn i64c(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
fn i32c(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

fn batch(table: &str, cols: Vec<ArrayRef>) -> Result<TableOutput> {
    let schema = catalog::schema(table)?;
    Ok(TableOutput::new(
        table,
        vec![RecordBatch::try_new(schema, cols)?],
    ))
}

fn repeat(v: &str, n: usize) -> ArrayRef {
    let mut b = StringBuilder::with_capacity(n, n * v.len());
    for _ in 0..n {
        b.append_value(v);
    }
    Arc::new(b.finish())
}

/// Describes one replay for [`replay_tables`].
#[derive(Debug, Clone)]
pub struct ReplayMeta<'a> {
    /// The run the rows belong to.
    pub run_id: &'a str,
    /// One id per sweep point.
    pub replay_id: &'a str,
    /// The trace (object key or file name).
    pub trace_source: &'a str,
    /// The sweep point (the parameters that vary).
    pub point: &'a BTreeMap<String, String>,
    /// Wall time of the replay (s).
    pub engine_wall_s: f64,
}

/// The five replay tables of one replay.
pub fn replay_tables(result: &ReplayResult, meta: &ReplayMeta<'_>) -> Result<Vec<TableOutput>> {
    let (run, rid) = (meta.run_id, meta.replay_id);
    let mut out = Vec::with_capacity(5);
    // replays
    let point = serde_json::to_string(meta.point).unwrap_or_else(|_| "{}".into());
    let params = result.params.to_string();
    out.push(batch(
        "replays",
        vec![
            repeat(run, 1),
            repeat(rid, 1),
            repeat(meta.trace_source, 1),
            repeat(&result.model, 1),
            repeat(&params, 1),
            repeat(&point, 1),
            Arc::new(arrow::array::Float64Array::from(vec![
                result.predicted_time_s,
            ])),
            Arc::new(arrow::array::Int64Array::from(vec![i64c(result.records)])),
            Arc::new(arrow::array::Float64Array::from(vec![meta.engine_wall_s])),
        ],
    )?);
    // replay_ranks
    let n = result.ranks.len();
    let mut rank = Int32Builder::with_capacity(n);
    let mut f: Vec<Float64Builder> = (0..7).map(|_| Float64Builder::with_capacity(n)).collect();
    let mut recv = Int64Builder::with_capacity(n);
    let mut buffered = Int64Builder::with_capacity(n);
    let mut idle = Float64Builder::with_capacity(n);
    for r in &result.ranks {
        rank.append_value(i32c(r.rank));
        let vals = [
            r.total_s,
            r.computation_s,
            r.communication_s(),
            r.comm.wait,
            r.comm.latency,
            r.comm.small,
            r.comm.big,
        ];
        for (b, v) in f.iter_mut().zip(vals) {
            b.append_value(v);
        }
        recv.append_value(i64c(r.bytes_received));
        buffered.append_value(i64c(r.bytes_buffered));
        idle.append_value(r.idle_s);
    }
    let mut cols: Vec<ArrayRef> = vec![repeat(run, n), repeat(rid, n), Arc::new(rank.finish())];
    cols.extend(f.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    cols.push(Arc::new(recv.finish()));
    cols.push(Arc::new(buffered.finish()));
    cols.push(Arc::new(idle.finish()));
    out.push(batch("replay_ranks", cols)?);
    // replay_functions
    let rows: Vec<_> = result
        .ranks
        .iter()
        .flat_map(|r| r.functions.iter().map(move |(name, c)| (r.rank, name, c)))
        .collect();
    let n = rows.len();
    let mut rank = Int32Builder::with_capacity(n);
    let mut func = StringBuilder::new();
    let mut f: Vec<Float64Builder> = (0..4).map(|_| Float64Builder::with_capacity(n)).collect();
    for (r, name, c) in rows {
        rank.append_value(i32c(r));
        func.append_value(name);
        for (b, v) in f.iter_mut().zip([c.wait, c.latency, c.small, c.big]) {
            b.append_value(v);
        }
    }
    let mut cols: Vec<ArrayRef> = vec![
        repeat(run, n),
        repeat(rid, n),
        Arc::new(rank.finish()),
        Arc::new(func.finish()),
    ];
    cols.extend(f.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    out.push(batch("replay_functions", cols)?);
    // replay_adapters
    let n = result.adapters.len();
    let mut host = Int32Builder::with_capacity(n);
    let mut adapter = Int32Builder::with_capacity(n);
    let mut f: Vec<Float64Builder> = (0..6).map(|_| Float64Builder::with_capacity(n)).collect();
    for a in &result.adapters {
        host.append_value(i32c(a.host));
        adapter.append_value(i32c(a.adapter));
        f[0].append_option(a.min_request);
        f[1].append_option(a.avg_request);
        f[2].append_option(a.max_request);
        f[3].append_value(a.busy_fraction);
        f[4].append_value(a.aggregate_bw_mb_s);
        f[5].append_value(a.avg_concurrent);
    }
    let mut cols: Vec<ArrayRef> = vec![
        repeat(run, n),
        repeat(rid, n),
        Arc::new(host.finish()),
        Arc::new(adapter.finish()),
    ];
    cols.extend(f.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    out.push(batch("replay_adapters", cols)?);
    // replay_transfers
    let n = result.transfers.len();
    let mut receiver = Int32Builder::with_capacity(n);
    let mut sender = Int32Builder::with_capacity(n);
    let mut req = Int64Builder::with_capacity(n);
    let mut bytes = Int64Builder::with_capacity(n);
    for (&(r, s), &(c, b)) in &result.transfers {
        receiver.append_value(i32c(r));
        sender.append_value(i32c(s));
        req.append_value(i64c(c));
        bytes.append_value(i64c(b));
    }
    out.push(batch(
        "replay_transfers",
        vec![
            repeat(run, n),
            repeat(rid, n),
            Arc::new(receiver.finish()),
            Arc::new(sender.finish()),
            Arc::new(req.finish()),
            Arc::new(bytes.finish()),
        ],
    )?);
    Ok(out)
}
