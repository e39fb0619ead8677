//! alltoallv profiler tables (DESIGN.md §4).
use arrow::datatypes::DataType::*;

use super::*;

/// alltoallv tables.
pub fn tables() -> Vec<TableDef> {
    vec![
        table(
            "alltoallv_calls",
            "One row per alltoallv call seen by a lead rank.",
            vec![
                run_id(),
                source(),
                ("job", Int64, false, "profiler job number"),
                ("lead_rank", Int64, false, "lead rank of the communicator"),
                ("call_id", Int64, false, "call number"),
                ("comm_size", Int64, false, "communicator size"),
                (
                    "send_datatype_size",
                    Int64,
                    false,
                    "bytes per send datatype element",
                ),
                (
                    "recv_datatype_size",
                    Int64,
                    false,
                    "bytes per receive datatype element",
                ),
                (
                    "send_block",
                    Int64,
                    true,
                    "index of the send count block holding this call",
                ),
                (
                    "recv_block",
                    Int64,
                    true,
                    "index of the receive count block holding this call",
                ),
            ],
        ),
        table(
            "alltoallv_count_rows",
            "One row per count row of a count block: the ranks sharing it and its counts.",
            vec![
                run_id(),
                source(),
                ("job", Int64, false, "profiler job number"),
                ("lead_rank", Int64, false, "lead rank"),
                ("direction", utf8(), false, "`send` or `recv`"),
                ("block", Int64, false, "block index in the file"),
                ("ranks", list(Int32), false, "ranks whose row this is"),
                ("counts", list(Int64), false, "counts per peer rank"),
            ],
        ),
        table(
            "alltoallv_call_times",
            "Per call and rank: execution time and late arrival.",
            vec![
                run_id(),
                source(),
                ("lead_rank", Int64, false, "lead rank"),
                ("call_id", Int64, false, "call number"),
                ("rank", Int64, false, "rank"),
                ("exec_time_s", Float64, true, "time in MPI_Alltoallv"),
                ("late_arrival_s", Float64, true, "late arrival time"),
            ],
        ),
        table(
            "alltoallv_patterns",
            "Communication patterns and the calls that follow each.",
            vec![
                run_id(),
                source(),
                ("lead_rank", Int64, false, "lead rank"),
                ("pattern_id", Int64, false, "pattern index"),
                ("direction", utf8(), false, "`send` or `recv`"),
                ("num_ranks", Int64, false, "N ranks ..."),
                (
                    "num_peers",
                    Int64,
                    false,
                    "... sent to (received from) M other ranks",
                ),
                ("num_calls", Int64, false, "calls with this pattern"),
                ("call_ids", list(Int64), false, "the calls"),
            ],
        ),
        table(
            "alltoallv_locations",
            "One row per communicator rank of a communicator led by a lead rank (location files): where it ran.",
            vec![
                run_id(),
                source(),
                (
                    "lead_rank",
                    Int64,
                    false,
                    "COMM_WORLD rank of the communicator's rank 0",
                ),
                (
                    "comm_id",
                    Int64,
                    false,
                    "per-lead-rank communicator index (file name `comm<K>`)",
                ),
                ("comm_rank", Int64, false, "rank in the communicator"),
                ("world_rank", Int64, false, "COMM_WORLD rank"),
                ("pid", Int64, true, "process id"),
                (
                    "hostname",
                    utf8(),
                    true,
                    "host the rank ran on (first call)",
                ),
            ],
        ),
        table(
            "alltoallv_comms",
            "One row per communicator led by a lead rank (location or comm-data files).",
            vec![
                run_id(),
                source(),
                (
                    "lead_rank",
                    Int64,
                    false,
                    "COMM_WORLD rank of the communicator's rank 0",
                ),
                ("comm_id", Int64, false, "per-lead-rank communicator index"),
                (
                    "comm_size",
                    Int64,
                    true,
                    "communicator size (null from comm-data files)",
                ),
                (
                    "call_ids",
                    list(Int64),
                    true,
                    "alltoallv calls made on it (null from comm-data files)",
                ),
            ],
        ),
        table(
            "alltoallv_backtraces",
            "One row per context of a backtrace file: the stack and the calls made from it.",
            vec![
                run_id(),
                source(),
                ("lead_rank", Int64, false, "lead rank (file name `rank<L>`)"),
                (
                    "trace_id",
                    Int64,
                    false,
                    "trace number (file name `trace<T>`)",
                ),
                ("executable", utf8(), false, "program path"),
                ("pid", Int64, false, "process id"),
                ("context_id", Int64, false, "context number in the file"),
                ("comm_id", Int64, false, "communicator index"),
                ("comm_rank", Int64, false, "communicator rank of the caller"),
                ("world_rank", Int64, false, "COMM_WORLD rank of the caller"),
                ("call_ids", list(Int64), false, "calls made from this stack"),
                (
                    "frames",
                    list(utf8()),
                    false,
                    "backtrace_symbols lines, innermost first",
                ),
            ],
        ),
        table(
            "alltoallv_stats",
            "Statistics of the alltoallv calls of a lead rank (the Go `stats-*` file), one row per figure.",
            vec![
                run_id(),
                source(),
                ("job", Int64, false, "profiler job number"),
                ("lead_rank", Int64, false, "lead rank"),
                ("direction", utf8(), false, "`send`, `recv` or `all`"),
                ("stat", utf8(), false, "figure name, see docs/counts.md"),
                (
                    "key",
                    Int64,
                    true,
                    "the value the figure is about (datatype size, comm size, min, ...)",
                ),
                (
                    "value",
                    Int64,
                    false,
                    "number of calls (distributions) or of messages (message sizes)",
                ),
            ],
        ),
        table(
            "alltoallv_heatmap",
            "Bytes exchanged between two ranks over all calls of a lead rank.",
            vec![
                run_id(),
                source(),
                ("lead_rank", Int64, false, "lead rank"),
                (
                    "direction",
                    utf8(),
                    false,
                    "`send`: rank sends to peer (the receive view is the transpose)",
                ),
                (
                    "rank",
                    Int64,
                    false,
                    "COMM_WORLD rank (communicator rank when no location data)",
                ),
                ("peer", Int64, false, "COMM_WORLD rank of the peer"),
                (
                    "bytes",
                    Int64,
                    false,
                    "sum over calls of count x datatype size",
                ),
            ],
        ),
        table(
            "alltoallv_host_heatmap",
            "Bytes exchanged between two hosts over all calls of a lead rank.",
            vec![
                run_id(),
                source(),
                ("lead_rank", Int64, false, "lead rank"),
                (
                    "direction",
                    utf8(),
                    false,
                    "`send`: bytes the host's ranks send to the peer host's ranks",
                ),
                ("host", utf8(), false, "host of the rank"),
                ("peer_host", utf8(), false, "host of the peer"),
                (
                    "bytes",
                    Int64,
                    false,
                    "sum over calls of count x datatype size",
                ),
            ],
        ),
    ]
}
