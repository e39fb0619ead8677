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
                // Added (issue 40): one node's pairs are a filter, not a join
                // with linktest_ranks per run. Null in files written before.
                (
                    "from_host",
                    utf8(),
                    true,
                    "node of `from_rank`: its `linktest_ranks.hostname` in the same file (null in rows written before 2026-12)",
                ),
                (
                    "to_host",
                    utf8(),
                    true,
                    "node of `to_rank`: its `linktest_ranks.hostname` in the same file (null in rows written before 2026-12)",
                ),
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
                // Added (issue 40), as in linktest_timings.
                (
                    "from_host",
                    utf8(),
                    true,
                    "node of `from_rank` (`linktest_ranks.hostname`; null in rows written before 2026-12)",
                ),
                (
                    "to_host",
                    utf8(),
                    true,
                    "node of `to_rank` (`linktest_ranks.hostname`; null in rows written before 2026-12)",
                ),
            ],
        ),
        table(
            "linktest_host_summary",
            "One row per LinkTest file, host and pair class: that host's measured pairs summarised (written by the ingest job beside the pairs; docs/linktest.md, \"Last night and one node's history\").",
            vec![
                run_id(),
                source(),
                (
                    "host",
                    utf8(),
                    false,
                    "the node (`linktest_ranks.hostname`, the same name as `from_host`/`to_host`)",
                ),
                (
                    "pair_class",
                    utf8(),
                    false,
                    "`intra`: both ranks on this host; `inter`: the partner on another host",
                ),
                (
                    "pairs",
                    Int64,
                    false,
                    "measured ordered pairs with this host at either end (an `intra` pair counts once, an `inter` pair for each of its two hosts)",
                ),
                (
                    "min_time_s",
                    Float64,
                    false,
                    "fastest of these pairs: time per message (s)",
                ),
                (
                    "median_time_s",
                    Float64,
                    false,
                    "median pair time (the mean of the middle two for an even count)",
                ),
                ("max_time_s", Float64, false, "slowest of these pairs (s)"),
                (
                    "message_size",
                    Int64,
                    false,
                    "bytes per message (`linktest_runs.message_size` of the file)",
                ),
                (
                    "max_bw_bytes_s",
                    Float64,
                    false,
                    "bandwidth of the fastest pair: `message_size / min_time_s` (bytes/s)",
                ),
                (
                    "median_bw_bytes_s",
                    Float64,
                    false,
                    "`message_size / median_time_s` (bytes/s)",
                ),
                (
                    "min_bw_bytes_s",
                    Float64,
                    false,
                    "bandwidth of the slowest pair: `message_size / max_time_s` (bytes/s)",
                ),
                (
                    "slow_pairs",
                    Int64,
                    false,
                    "of these pairs, those slower than `slow_threshold_s` (the `linktest.slow_pairs` rule of the checks, docs/verdicts.md)",
                ),
                (
                    "slow_threshold_s",
                    Float64,
                    false,
                    "the slow-pair threshold of the file: `check_slow_pair_time_s` when the run sets it, else `check_slow_pair_factor` (default 2) × the median time of all the file's pairs",
                ),
            ],
        ),
    ]
}
