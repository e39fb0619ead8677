//! Tables written by the backbone: `runs`, `raw_files`, `checks`.
use arrow::datatypes::DataType::*;

use super::*;

/// The backbone's tables.
pub fn tables() -> Vec<TableDef> {
    vec![
        table(
            "runs",
            "One row per finished run (written when the run reaches a final state).",
            vec![
                run_id(),
                ("source", utf8(), false, "always `coordinator`"),
                (
                    "schedule_id",
                    utf8(),
                    true,
                    "schedule that fired the run (null when on demand)",
                ),
                ("benchmark", utf8(), false, "catalog benchmark name"),
                (
                    "kind",
                    utf8(),
                    false,
                    "benchmark kind (io, linktest, netprobe, counts, replay, noop, ...)",
                ),
                ("status", utf8(), false, "SUCCEEDED, FAILED or CANCELLED"),
                ("params", utf8(), false, "parameters as JSON"),
                ("submitted_at", ts(), false, "when the run was created"),
                ("started_at", ts(), true, "when the first task started"),
                (
                    "finished_at",
                    ts(),
                    true,
                    "when the run reached its final state",
                ),
                ("agents", list(utf8()), false, "agents that ran its tasks"),
                ("error", utf8(), true, "why it failed, if it did"),
                (
                    "verdict",
                    utf8(),
                    true,
                    "PASS, FAIL, REGRESSION, ERROR, INCONCLUSIVE or NO_REFERENCE: the worst status of the run's checks, FAIL > REGRESSION > ERROR > INCONCLUSIVE > NO_REFERENCE > PASS (null when no check ran)",
                ),
                (
                    "scheduled_for",
                    ts(),
                    true,
                    "the cron instant the run stands for: a scheduled run's instant, a backfilled run's (the night it fills in), a triggered schedule's; null for on-demand runs",
                ),
                (
                    "logical_at",
                    ts(),
                    true,
                    "when the run counts for trends: `scheduled_for`, else `submitted_at` (the dashboard's I/O trends plot runs by it). `runs` files written before 2026-12 lack this column and `scheduled_for`: read the table with `read_parquet(…, union_by_name=true)` and `coalesce(logical_at, submitted_at)` (Flight serves both as null for those rows)",
                ),
            ],
        ),
        table(
            "raw_files",
            "One row per raw output object uploaded by an agent.",
            vec![
                run_id(),
                (
                    "source",
                    utf8(),
                    false,
                    "the raw object key (same as `key`)",
                ),
                ("task_id", utf8(), false, "task that produced the file"),
                ("agent", utf8(), false, "agent that ran the task"),
                (
                    "key",
                    utf8(),
                    false,
                    "object key raw/{run_id}/{task_id}/{file}",
                ),
                ("bytes", UInt64, false, "object size"),
                (
                    "sha256",
                    utf8(),
                    false,
                    "SHA-256 of the object, lower-case hex",
                ),
                (
                    "format",
                    utf8(),
                    false,
                    "declared output format (ingest kind)",
                ),
                (
                    "slurm_job_id",
                    utf8(),
                    true,
                    "the Slurm job that produced the file (sbatch launcher; null otherwise)",
                ),
                (
                    "slurm_nodes",
                    utf8(),
                    true,
                    "that job's nodes in Slurm's compact form, e.g. `n[1-3]` (null otherwise)",
                ),
                (
                    "bundle",
                    utf8(),
                    true,
                    "the run's bundle `raw/{run_id}/bundle.tar.zst` that holds the file (as member `key`) once its own object is gone: per-node kinds such as hostinfo; null: the file is its own object. `raw_files` files written before 2026-12-07 lack this column: read with `union_by_name=true`",
                ),
            ],
        ),
        table(
            "checks",
            "Health verdicts: one row per check of a run against its reference.",
            vec![
                run_id(),
                source(),
                (
                    "check",
                    utf8(),
                    false,
                    "check name, e.g. `io.write_bw_mib_s`, `linktest.max_time_s`",
                ),
                (
                    "status",
                    utf8(),
                    false,
                    "PASS, FAIL, REGRESSION (within its bound, but its series stepped or drifted to a worse level), ERROR (could not judge), INCONCLUSIVE (would fail, but the run was disturbed) or NO_REFERENCE (not enough history yet); docs/io.md, \"Outcomes\"",
                ),
                ("value", Float64, true, "measured figure"),
                (
                    "reference",
                    Float64,
                    true,
                    "bound or rolling median it was compared with",
                ),
                ("unit", utf8(), false, "unit of value and reference"),
                ("message", utf8(), false, "human-readable verdict"),
            ]
            .into_iter()
            .chain(change_point_columns())
            .collect(),
        ),
        table(
            "node_facts",
            "One row per node and `hostinfo` run: kernel, CPU, memory, load.",
            vec![
                run_id(),
                source(),
                ("hostname", utf8(), false, "node host name"),
                ("kernel_release", utf8(), false, "`uname -r`"),
                ("kernel_version", utf8(), false, "`uname -v`"),
                (
                    "cpu_model",
                    utf8(),
                    false,
                    "CPU model name from /proc/cpuinfo",
                ),
                ("cores", Int64, false, "online cores"),
                ("memory_bytes", Int64, false, "physical memory"),
                (
                    "load_1m",
                    Float64,
                    false,
                    "1-minute load average when collected",
                ),
                ("uptime_s", Float64, false, "seconds since boot"),
                ("collected_at", ts(), false, "when the facts were read"),
                // Added (docs/slurm.md): fake Slurm nodes share a host name.
                (
                    "node",
                    utf8(),
                    true,
                    "the node: the Slurm node name in a Slurm task, else the agent's node name, else the host name (null in rows written before 2026-12)",
                ),
            ],
        ),
        table(
            "node_health",
            "Per-node health verdicts: one row per node and node-level check of a run (docs/slurm.md). DESIGN.md's columns plus `source` and `unit`, like `checks`.",
            vec![
                run_id(),
                source(),
                (
                    "node",
                    utf8(),
                    false,
                    "Slurm node name where Slurm ran the task, else the agent's node",
                ),
                (
                    "check",
                    utf8(),
                    false,
                    "check name, e.g. `node.cores`, `node.write_bw_mib_s`",
                ),
                (
                    "status",
                    utf8(),
                    false,
                    "PASS, FAIL, REGRESSION (within its bound, but its series stepped or drifted to a worse level), ERROR (could not judge), INCONCLUSIVE (would fail, but the run was disturbed) or NO_REFERENCE (not enough history yet); docs/io.md, \"Outcomes\"",
                ),
                (
                    "value",
                    Float64,
                    true,
                    "measured figure (null for text facts)",
                ),
                (
                    "reference",
                    Float64,
                    true,
                    "expected value, bound or the run's median across nodes",
                ),
                ("unit", utf8(), false, "unit of value and reference"),
                ("message", utf8(), false, "human-readable verdict"),
            ]
            .into_iter()
            .chain(change_point_columns())
            .collect(),
        ),
        table(
            "link_health",
            "Per-link LinkTest verdicts: one row per failing pair of hosts of a LinkTest or netprobe run, its time against the same link's usual (docs/verdicts.md, \"Links\"). Passing links get no row; the run's `linktest.slow_links` check counts them.",
            vec![
                run_id(),
                source(),
                ("node_a", utf8(), false, "one host of the link (the smaller name)"),
                ("node_b", utf8(), false, "the other host"),
                ("check", utf8(), false, "check name: `link.pair_time`"),
                ("status", utf8(), false, "FAIL (only failing links are written)"),
                ("value", Float64, true, "the link's mean pair time tonight"),
                (
                    "reference",
                    Float64,
                    true,
                    "its usual time, at its hosts' speed tonight",
                ),
                ("unit", utf8(), false, "unit of value and reference"),
                ("message", utf8(), false, "human-readable verdict"),
            ],
        ),
    ]
}

/// The columns `checks` and `node_health` both end with (issue 37, docs/io.md
/// "Regressions"): the change point of a REGRESSION (or of a FAIL it
/// explains); null otherwise.
fn change_point_columns() -> [Col; 4] {
    [
        (
            "since_run",
            utf8(),
            true,
            "first run of the change a REGRESSION (or FAIL) was found with",
        ),
        (
            "since_date",
            utf8(),
            true,
            "that run's logical night, `YYYY-MM-DD`",
        ),
        (
            "step",
            Float64,
            true,
            "relative size of the change: the current level vs the level before it (-0.12 = 12 % lower)",
        ),
        (
            "confidence",
            Float64,
            true,
            "1 - the Bonferroni-adjusted one-sided p-value of the change under normal noise",
        ),
    ]
}
