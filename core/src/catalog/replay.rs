//! Replay and trace tables (DESIGN.md §4).
use arrow::datatypes::DataType::*;

use super::*;

/// Replay tables.
pub fn tables() -> Vec<TableDef> {
    vec![
        table(
            "mpi_trace_records",
            "One row per record of an ingested MPI trace.",
            vec![
                run_id(),
                source(),
                ("rank", Int32, false, "rank"),
                ("seq", Int64, false, "record index within the rank"),
                (
                    "main_function",
                    utf8(),
                    false,
                    "MPI routine the record belongs to",
                ),
                (
                    "kernel",
                    utf8(),
                    false,
                    "record kind (send, recv, isend, irecv, wait, compute, collective ...)",
                ),
                ("peer", Int32, true, "partner rank"),
                ("comm", Int64, true, "communicator id"),
                ("tag", Int64, true, "tag"),
                ("bytes", Int64, true, "bytes"),
                ("request", Int64, true, "request id"),
                ("symmetric", Boolean, true, "symmetric exchange"),
                (
                    "compute_s",
                    Float64,
                    true,
                    "computation burst before the record",
                ),
            ],
        ),
        table(
            "replays",
            "One row per replay (trace × model × sweep point).",
            vec![
                run_id(),
                (
                    "replay_id",
                    utf8(),
                    false,
                    "replay id (one per sweep point)",
                ),
                ("trace_source", utf8(), false, "trace that was replayed"),
                ("model", utf8(), false, "`bandela` or `dimemas`"),
                ("params", utf8(), false, "model parameters as JSON"),
                ("point", utf8(), false, "sweep point as JSON"),
                (
                    "predicted_time_s",
                    Float64,
                    false,
                    "predicted execution time",
                ),
                ("records", Int64, false, "trace records replayed"),
                ("engine_wall_s", Float64, false, "wall time of the replay"),
            ],
        ),
        table(
            "replay_ranks",
            "Per-rank breakdown of a replay.",
            vec![
                run_id(),
                ("replay_id", utf8(), false, "replay id"),
                ("rank", Int32, false, "rank"),
                ("total_s", Float64, false, "total time"),
                ("computation_s", Float64, false, "computation"),
                (
                    "communication_s",
                    Float64,
                    false,
                    "communication = wait + latency + small + big",
                ),
                ("wait_s", Float64, false, "waiting for a partner"),
                ("latency_s", Float64, false, "latency"),
                ("small_transfer_s", Float64, false, "small-message transfer"),
                ("big_transfer_s", Float64, false, "big-message transfer"),
                ("bytes_received", Int64, false, "bytes received"),
                ("bytes_buffered", Int64, false, "bytes buffered"),
                (
                    "idle_s",
                    Float64,
                    false,
                    "blocked in a rendezvous send before its receive is posted (Dimemas counts it in neither computation nor communication): total = computation + communication + idle",
                ),
            ],
        ),
        table(
            "replay_functions",
            "Per-rank, per-routine breakdown of a replay.",
            vec![
                run_id(),
                ("replay_id", utf8(), false, "replay id"),
                ("rank", Int32, false, "rank"),
                ("function", utf8(), false, "MPI routine"),
                ("wait_s", Float64, false, "wait"),
                ("latency_s", Float64, false, "latency"),
                ("small_transfer_s", Float64, false, "small transfer"),
                ("big_transfer_s", Float64, false, "big transfer"),
            ],
        ),
        table(
            "replay_adapters",
            "Adapter statistics of a host type 2 replay.",
            vec![
                run_id(),
                ("replay_id", utf8(), false, "replay id"),
                ("host", Int32, false, "host"),
                ("adapter", Int32, false, "adapter"),
                ("min_request", Float64, true, "smallest request (bytes)"),
                ("avg_request", Float64, true, "mean request (bytes)"),
                ("max_request", Float64, true, "largest request (bytes)"),
                ("busy_fraction", Float64, false, "fraction of time busy"),
                (
                    "aggregate_bw_mb_s",
                    Float64,
                    false,
                    "aggregate bandwidth (MB/s)",
                ),
                (
                    "avg_concurrent",
                    Float64,
                    false,
                    "mean concurrent transfers",
                ),
            ],
        ),
        table(
            "replay_transfers",
            "Transfer matrix of a replay: requests and bytes per receiver and sender.",
            vec![
                run_id(),
                ("replay_id", utf8(), false, "replay id"),
                ("receiver", Int32, false, "receiving rank"),
                ("sender", Int32, false, "sending rank"),
                ("requests", Int64, false, "messages"),
                ("bytes", Int64, false, "bytes"),
            ],
        ),
        table(
            "replay_calibrations",
            "Network parameters fitted from measured pair times (`benchlake replay calibrate`): one row per link class.",
            vec![
                run_id(),
                source(),
                (
                    "class",
                    utf8(),
                    false,
                    "intra (both ranks on one node) or inter (two nodes)",
                ),
                ("latency_s", Float64, false, "fitted latency L (s)"),
                (
                    "bandwidth_mb_s",
                    Float64,
                    false,
                    "fitted bandwidth BW (MB/s, MB = 2^20 B, as Dimemas)",
                ),
                (
                    "eager_limit",
                    Int64,
                    true,
                    "bytes from which rendezvous is used, when the data shows a protocol switch",
                ),
                (
                    "r2",
                    Float64,
                    false,
                    "coefficient of determination of the model over the per-size medians",
                ),
                (
                    "max_rel_error",
                    Float64,
                    false,
                    "largest relative error of the model at a measured size",
                ),
                ("samples", Int64, false, "pair times used"),
                ("sizes", Int64, false, "distinct message sizes measured"),
                ("min_bytes", Int64, false, "smallest message size"),
                ("max_bytes", Int64, false, "largest message size"),
                (
                    "nodes",
                    utf8(),
                    false,
                    "the nodes whose pairs were used, comma-separated",
                ),
            ],
        ),
    ]
}
