//! I/O benchmark tables (DESIGN.md §4).
use arrow::datatypes::DataType::*;

use super::*;

/// I/O tables.
pub fn tables() -> Vec<TableDef> {
    vec![
        table(
            "io_results",
            "One row per iteration and operation of an IOR or pio run.",
            vec![
                run_id(),
                source(),
                ("tool", utf8(), false, "`pio` or `ior`"),
                ("api", utf8(), false, "I/O API (POSIX, MPIIO, ...)"),
                (
                    "pattern",
                    utf8(),
                    false,
                    "access pattern (segmented, strided, random, general)",
                ),
                ("file_per_proc", Boolean, false, "one file per process"),
                ("num_tasks", Int64, false, "processes"),
                ("block_size", Int64, false, "bytes per block"),
                ("transfer_size", Int64, false, "bytes per transfer"),
                ("segments", Int64, false, "segments"),
                ("iteration", Int64, false, "iteration index"),
                ("operation", utf8(), false, "`write` or `read`"),
                ("bytes", Int64, false, "aggregate bytes moved"),
                (
                    "bw_mib_s",
                    Float64,
                    false,
                    "bandwidth in MiB/s (2^20), open and close included",
                ),
                ("iops", Float64, true, "transfers per second"),
                ("open_time_s", Float64, true, "open phase"),
                ("xfer_time_s", Float64, true, "transfer phase"),
                ("close_time_s", Float64, true, "close phase"),
                (
                    "total_time_s",
                    Float64,
                    false,
                    "aggregate time: latest stop − earliest start",
                ),
                ("fsync", Boolean, false, "fsync after write"),
                ("collective", Boolean, false, "collective I/O"),
                // Added (docs/io.md): IOR runs several tests per file (`-f` scripts);
                // without it two tests' iteration 0 would collide.
                (
                    "test_id",
                    Int64,
                    true,
                    "test index within the run (IOR `TestID`)",
                ),
                // Added (docs/io.md): corruption must be visible in the lake and
                // turn into a failed check; null when the tool did not verify.
                (
                    "verify_errors",
                    Int64,
                    true,
                    "bytes that failed read-back verification (null = not verified)",
                ),
                // Added (docs/io.md): the rules require saying how the read
                // phase avoided cached data.
                (
                    "cache_mode",
                    utf8(),
                    true,
                    "how the read started uncached: `o_direct`, `fadvise_dontneed`, `drop_caches`, `none` (null = unknown)",
                ),
            ],
        ),
        table(
            "io_summary",
            "One row per test and operation: statistics over the iterations of an IOR or pio run.",
            vec![
                run_id(),
                source(),
                ("tool", utf8(), false, "`pio` or `ior`"),
                ("test_id", Int64, false, "test index within the run"),
                ("operation", utf8(), false, "`write` or `read`"),
                ("api", utf8(), false, "I/O API"),
                ("num_tasks", Int64, false, "processes"),
                ("iterations", Int64, false, "iterations summarised"),
                ("bytes", Int64, false, "aggregate bytes per iteration"),
                ("bw_max_mib_s", Float64, false, "best iteration (MiB/s)"),
                ("bw_min_mib_s", Float64, false, "worst iteration (MiB/s)"),
                (
                    "bw_mean_mib_s",
                    Float64,
                    false,
                    "mean over iterations (MiB/s)",
                ),
                (
                    "bw_std_mib_s",
                    Float64,
                    false,
                    "population standard deviation over iterations (MiB/s)",
                ),
                (
                    "ops_max",
                    Float64,
                    true,
                    "best iteration (transfers/s over the total time)",
                ),
                ("ops_min", Float64, true, "worst iteration (transfers/s)"),
                ("ops_mean", Float64, true, "mean (transfers/s)"),
                (
                    "ops_std",
                    Float64,
                    true,
                    "population standard deviation (transfers/s)",
                ),
                ("mean_time_s", Float64, false, "mean aggregate time"),
            ],
        ),
        table(
            "io_task_times",
            "Per-process phase times of each iteration and operation.",
            vec![
                run_id(),
                source(),
                ("iteration", Int64, false, "iteration index"),
                ("operation", utf8(), false, "`write` or `read`"),
                ("rank", Int32, false, "process rank"),
                ("open_time_s", Float64, true, "open"),
                ("xfer_time_s", Float64, true, "transfer"),
                ("close_time_s", Float64, true, "close"),
                // Added (docs/io.md): IOR's per-rank CSV gives only the time with and
                // without open/close; pio gives bytes and host per process.
                (
                    "total_time_s",
                    Float64,
                    true,
                    "open start to close stop of this process",
                ),
                ("bytes", Int64, true, "bytes this process moved"),
                ("host", utf8(), true, "host the process ran on"),
                ("test_id", Int64, true, "test index within the run"),
            ],
        ),
        table(
            "io_node_summary",
            "One row per I/O result file, test, operation and node: the bandwidths of the node's processes over all iterations (from `io_task_times` rows that name a host: pio; IOR's per-rank files name none). Written by the ingest job; `io_summary` is the per-test (file system target) summary over iterations.",
            vec![
                run_id(),
                source(),
                (
                    "test_id",
                    Int64,
                    true,
                    "test index within the run (null when the rows carry none)",
                ),
                ("operation", utf8(), false, "`write` or `read`"),
                ("node", utf8(), false, "the node (`io_task_times.host`)"),
                (
                    "processes",
                    Int64,
                    false,
                    "process rows summarised (processes × iterations)",
                ),
                ("bytes", Int64, false, "bytes these processes moved"),
                (
                    "min_bw_mib_s",
                    Float64,
                    false,
                    "slowest process: `bytes / xfer_time_s` in MiB/s (2^20), the per-process bandwidth of the node checks",
                ),
                (
                    "median_bw_mib_s",
                    Float64,
                    false,
                    "median process bandwidth (MiB/s)",
                ),
                ("max_bw_mib_s", Float64, false, "fastest process (MiB/s)"),
            ],
        ),
        table(
            "mdtest_results",
            "One row per mdtest operation and iteration.",
            vec![
                run_id(),
                source(),
                (
                    "operation",
                    utf8(),
                    false,
                    "operation (e.g. `File creation`)",
                ),
                ("iteration", Int64, false, "iteration index"),
                ("num_tasks", Int64, false, "processes"),
                ("items", Int64, true, "items per iteration"),
                ("rate_per_s", Float64, false, "operations per second"),
                ("time_s", Float64, true, "time (s)"),
                // Added (docs/io.md): mdtest's per-rank CSV has one row per rank and
                // iteration plus an aggregate row; null = all ranks.
                (
                    "rank",
                    Int32,
                    true,
                    "process rank (null = aggregate of all ranks)",
                ),
            ],
        ),
        table(
            "mdtest_summary",
            "One row per operation of mdtest's SUMMARY table (statistics over iterations).",
            vec![
                run_id(),
                source(),
                (
                    "operation",
                    utf8(),
                    false,
                    "operation (e.g. `File creation`)",
                ),
                (
                    "statistic",
                    utf8(),
                    false,
                    "`rate` or `time` (which SUMMARY table)",
                ),
                ("unit", utf8(), false, "`ops/s` for rate, `s` for time"),
                ("num_tasks", Int64, false, "processes"),
                ("iterations", Int64, false, "iterations summarised"),
                ("items", Int64, true, "files/directories over all tasks"),
                ("max", Float64, false, "maximum over iterations"),
                ("min", Float64, false, "minimum over iterations"),
                ("mean", Float64, false, "mean over iterations"),
                (
                    "stddev",
                    Float64,
                    false,
                    "sample standard deviation (mdtest divides by n-1)",
                ),
            ],
        ),
    ]
}
