//! LinkTest tables (DESIGN.md §4).
use arrow::datatypes::DataType::*;

use super::*;

/// LinkTest tables.
pub fn tables() -> Vec<TableDef> {
    vec![
        table(
            "linktest_runs",
            "One row per LinkTest (or netprobe) result file: its header and summary.",
            vec![
                run_id(),
                source(),
                (
                    "linktest_version",
                    utf8(),
                    false,
                    "LinkTest version that wrote the file (e.g. 1.2p1, 2.1.17)",
                ),
                ("git_hash", utf8(), true, "LinkTest git hash (2.x only)"),
                ("mode", utf8(), false, "communication mode (MPI, TCP, ...)"),
                ("num_tasks", Int64, false, "ranks"),
                (
                    "num_messages",
                    Int64,
                    false,
                    "ping-pong messages per measurement",
                ),
                ("message_size", Int64, false, "bytes per message"),
                (
                    "num_warmup_messages",
                    Int64,
                    true,
                    "warm-up messages per pair (not recorded by LinkTest 1.x)",
                ),
                (
                    "num_serial_retests",
                    Int64,
                    false,
                    "slowest pairs retested serially",
                ),
                (
                    "num_multi_buffers",
                    Int64,
                    true,
                    "multi-buffer count (not recorded by LinkTest 1.x)",
                ),
                (
                    "num_randomized_tasks",
                    Int64,
                    true,
                    "randomized rank permutations",
                ),
                ("all_to_all", Boolean, false, "all-to-all phase run"),
                ("bidirectional", Boolean, false, "bidirectional tests"),
                ("unidirectional", Boolean, false, "unidirectional tests"),
                ("bisection", Boolean, false, "bisection test"),
                ("randomize_steps", Boolean, false, "step order randomized"),
                ("serial", Boolean, false, "serial test mode"),
                ("start_time", ts(), true, "run start"),
                ("end_time", ts(), true, "run end"),
                ("min_time_s", Float64, false, "minimum pair time"),
                ("avg_time_s", Float64, false, "average pair time"),
                ("max_time_s", Float64, false, "maximum pair time"),
                ("a2a_min_time_s", Float64, true, "all-to-all minimum"),
                ("a2a_avg_time_s", Float64, true, "all-to-all average"),
                ("a2a_max_time_s", Float64, true, "all-to-all maximum"),
            ],
        ),
        table(
            "linktest_ranks",
            "One row per rank of a LinkTest file.",
            vec![
                run_id(),
                source(),
                ("rank", Int32, false, "rank"),
                ("hostname", utf8(), false, "host the rank ran on"),
                (
                    "core_id",
                    Int32,
                    true,
                    "core the rank was bound to, if recorded",
                ),
            ],
        ),
        table(
            "linktest_timings",
            "One row per measured ordered rank pair.",
            vec![
                run_id(),
                source(),
                (
                    "permutation",
                    Int32,
                    false,
                    "rank permutation index (0 when not randomized)",
                ),
                (
                    "from_rank",
                    Int32,
                    false,
                    "rank that initiated the ping-pong",
                ),
                ("to_rank", Int32, false, "partner rank"),
                ("step", Int32, false, "step in which the pair was measured"),
                ("time_s", Float64, false, "time per message (s)"),
            ],
        ),
        table(
            "linktest_alltoall",
            "All-to-all phase times per rank.",
            vec![
                run_id(),
                source(),
                ("permutation", Int32, false, "rank permutation index"),
                ("rank", Int32, false, "rank"),
                ("step", Int32, true, "step, if recorded per step"),
                ("time_s", Float64, false, "time (s)"),
            ],
        ),
        table(
            "linktest_slow_links",
            "The slowest pairs and their serial retests.",
            vec![
                run_id(),
                source(),
                ("permutation", Int32, false, "rank permutation index"),
                ("kind", utf8(), false, "`slowest` or `retested`"),
                ("from_rank", Int32, false, "initiating rank"),
                ("to_rank", Int32, false, "partner rank"),
                ("time_s", Float64, false, "time in the main test (s)"),
                (
                    "retest_time_s",
                    Float64,
                    true,
                    "time in the serial retest (s)",
                ),
            ],
        ),
    ]
}
