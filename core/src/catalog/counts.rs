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
    ]
}
