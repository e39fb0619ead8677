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
            ],
        ),
    ]
}
