//! Job kinds and the JSON specs the coordinator hands to workers (and workers'
//! results), shared by both sides of the worker protocol.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Job kind that writes a finished run's rows to `runs` and `raw_files`.
pub const RECORD_JOB: &str = "record";
/// Job kind that turns raw files into tables.
pub const INGEST_JOB: &str = "ingest";

/// The spec of an `ingest` job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestSpec {
    /// Ingest kind (the files' declared format).
    pub format: String,
    /// Raw object keys.
    pub keys: Vec<String>,
    pub task_id: String,
    pub agent: String,
    /// The kernel host name the agent registered with: rows that name this
    /// host (a tool that records host names, outside Slurm) are the agent's
    /// node (benchlake_core::node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_hostname: Option<String>,
}

/// The spec of a `record` job: the rows to write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordSpec {
    pub run_id: String,
    pub schedule_id: Option<String>,
    pub benchmark: String,
    pub kind: String,
    pub status: String,
    pub params: BTreeMap<String, String>,
    pub submitted_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub agents: Vec<String>,
    pub error: Option<String>,
    pub raw_files: Vec<RecordRawFile>,
    /// The cron instant the run stands for (scheduled runs, backfills,
    /// triggers); absent in specs of coordinators before the column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_for_ms: Option<i64>,
}

impl RecordSpec {
    /// When the run counts for trends (`runs.logical_at`): its cron instant,
    /// else its submission.
    pub fn logical_at_ms(&self) -> i64 {
        self.scheduled_for_ms.unwrap_or(self.submitted_at_ms)
    }
}

/// One `raw_files` row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordRawFile {
    pub task_id: String,
    pub agent: String,
    pub key: String,
    pub bytes: u64,
    pub sha256: String,
    pub format: String,
    /// The Slurm job of the task (sbatch launcher) and its nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_nodes: Option<String>,
}

/// A follow-up job an executor asks for in its `result_json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FollowUp {
    pub kind: String,
    #[serde(default)]
    pub spec: serde_json::Value,
    /// The job group this job belongs to (e.g. the parts of one analysis). A
    /// name of `[A-Za-z0-9._-]`, at most 128 bytes, scoped to the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// A group of the same run this job waits for: it is not leased while a job
    /// of that group is queued or leased, and it fails (with the failed job named)
    /// instead of running when a job of that group failed or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for: Option<String>,
}

/// What an executor may report on completion.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    #[serde(default)]
    pub follow_ups: Vec<FollowUp>,
    /// The raw outputs a `record` job packed into its run's bundle
    /// (`raw/{run_id}/bundle.tar.zst`) and deleted: the coordinator records
    /// it on the run's tasks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bundled: Vec<String>,
}

/// Job kind that replays a trace at one sweep point.
pub const REPLAY_JOB: &str = "replay";

/// The spec of a `replay` job: one trace × model × sweep point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplaySpec {
    /// `dimemas` or `bandela`.
    pub model: String,
    /// The trace: a `.dim` object (Dimemas) or a prefix ending in `/` holding the
    /// `bandela.<rank>` objects (Bandela).
    pub trace_key: String,
    /// Raw objects passed to the model as files, by parameter name (`config`,
    /// `collectives`, `input`).
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Base parameters.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// This point's values (override `params`).
    #[serde(default)]
    pub point: BTreeMap<String, String>,
    /// The replay id (`replays.replay_id`).
    pub replay_id: String,
    /// The calibration whose parameters the replay uses (a LinkTest or
    /// netprobe run id, `calibrations/{id}/` in the lake): applied under
    /// `params` and `point`, recorded in the `replays.params` JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<String>,
    /// Why no calibration is used when one was looked for (recorded in the
    /// `replays.params` JSON, e.g. "no calibration covers node a1").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_note: Option<String>,
}

/// Job kind that fits a calibration after a LinkTest or netprobe ingest
/// (docs/replay.md, "Calibrations in the lake").
pub const CALIBRATE_JOB: &str = "calibrate";

/// The spec of a `calibrate` job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrateSpec {
    /// Raw keys of the LinkTest or netprobe result files (SION).
    pub keys: Vec<String>,
    /// The agent that ran the task.
    #[serde(default)]
    pub agent: String,
}

/// Job kind that plans a counts analysis: splits the count files into parts and
/// queues one `analyze_part` job per part plus an `analyze_merge` job waiting for
/// them (docs/counts.md).
pub const ANALYZE_PLAN_JOB: &str = "analyze_plan";
/// Job kind that analyses one part of a counts analysis.
pub const ANALYZE_PART_JOB: &str = "analyze_part";
/// Job kind that merges the parts of a counts analysis into tables and reports.
pub const ANALYZE_MERGE_JOB: &str = "analyze_merge";

/// Job kind that computes a run's health verdicts (`checks` table).
pub const CHECKS_JOB: &str = "checks";

/// Facts about the run an `ingest` job belongs to, carried in the same spec
/// JSON as [`IngestSpec`] (extra keys; see [`ingest_spec_json`]) so that
/// follow-up jobs (the checks) know the run's schedule and parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IngestRunInfo {
    /// The schedule that fired the run (none for on-demand runs).
    #[serde(default)]
    pub schedule_id: Option<String>,
    /// The run's benchmark.
    #[serde(default)]
    pub benchmark: Option<String>,
    /// The run's canonical parameters (the `check_*` thresholds among them).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// The run's benchmark kind (`traced` runs get a default replay and the
    /// `trace_comparison` table, docs/tracer.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Cores of the task's agent (traced runs only: the default Dimemas
    /// replay slows bursts down when ranks outnumber them, docs/replay.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
}

/// One JSON object holding an [`IngestSpec`] and its [`IngestRunInfo`]
/// (both deserialize from it; older workers ignore the extra keys).
pub fn ingest_spec_json(spec: &IngestSpec, info: &IngestRunInfo) -> String {
    let mut v = serde_json::to_value(spec).unwrap_or_default();
    if let (Some(obj), Ok(serde_json::Value::Object(extra))) =
        (v.as_object_mut(), serde_json::to_value(info))
    {
        for (k, x) in extra {
            obj.entry(k).or_insert(x);
        }
    }
    v.to_string()
}

/// The spec of a `checks` job: the verdicts of the rows one ingest job
/// committed for the run, against the same schedule's earlier runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChecksSpec {
    /// Ingest kind the figures come from (`ior`, `pio`, `mdtest`, `linktest`).
    pub format: String,
    /// The ingest job whose committed parts (`part-{job}*.parquet`) hold the rows.
    pub ingest_job_id: String,
    /// `source` column of the checks rows (the raw files' keys).
    pub source: String,
    /// Schedule of the run: history is read from its earlier runs.
    #[serde(default)]
    pub schedule_id: Option<String>,
    /// The run's parameters (`check_*` thresholds).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// The agent that ran the task (the node of node-level checks when the
    /// rows name no Slurm node).
    #[serde(default)]
    pub agent: String,
    /// The agent's kernel host name: a row naming it names the agent's node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_hostname: Option<String>,
}

/// Job kind that writes the `trace_comparison` table of a traced run once its
/// default replay has committed (docs/tracer.md).
pub const TRACE_COMPARE_JOB: &str = "trace_compare";

/// The tables a job kind may commit (DESIGN.md §2 step 5): the coordinator
/// refuses a staged file of any other table, so a worker credential cannot
/// write rows into a table through a job that never writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobTables {
    /// These tables.
    Fixed(&'static [&'static str]),
    /// Those its ingest format declares (`benchlake_formats::ingest::tables`).
    OfIngestFormat,
    /// Those the ingest kinds that queue it as a follow-up declare for it
    /// (`benchlake_formats::kinds::follow_up_tables`): the kind its spec's
    /// `format` names, else any kind's.
    OfFollowUp,
    /// The one table its [`CompactSpec`] names (a `compact` job rewrites a
    /// table's committed rows into a merged file; the coordinator checks the
    /// file holds exactly the parts it scheduled).
    OfCompactSpec,
}

/// Every job kind with the tables it may write; `None` for an unknown kind.
pub fn job_tables(kind: &str) -> Option<JobTables> {
    use JobTables::*;
    Some(match kind {
        RECORD_JOB => Fixed(&["runs", "raw_files"]),
        INGEST_JOB => OfIngestFormat,
        REPLAY_JOB => Fixed(&[
            "replays",
            "replay_ranks",
            "replay_functions",
            "replay_adapters",
            "replay_transfers",
        ]),
        // The follow-ups of an ingest kind (`benchlake_formats::kinds`).
        CALIBRATE_JOB | ANALYZE_PLAN_JOB | ANALYZE_PART_JOB | ANALYZE_MERGE_JOB | CHECKS_JOB => {
            OfFollowUp
        }
        TRACE_COMPARE_JOB => Fixed(&["trace_comparison"]),
        COMPACT_JOB => OfCompactSpec,
        // The worker's no-op job (tests and the demo's smoke run).
        "noop" => Fixed(&[]),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingest_spec_carries_run_info_beside_it() {
        let spec = IngestSpec {
            format: "pio".into(),
            keys: vec!["raw/r/t/pio-result.json".into()],
            task_id: "t".into(),
            agent: "a".into(),
            agent_hostname: None,
        };
        let info = IngestRunInfo {
            schedule_id: Some("S".into()),
            benchmark: Some("pio".into()),
            params: [("check_window".to_string(), "3".to_string())].into(),
            kind: Some("pio".into()),
            cores: Some(4),
        };
        let json = ingest_spec_json(&spec, &info);
        assert_eq!(serde_json::from_str::<IngestSpec>(&json).unwrap(), spec);
        assert_eq!(serde_json::from_str::<IngestRunInfo>(&json).unwrap(), info);
        // A spec without the info (older coordinators) reads as no info.
        let plain = serde_json::to_string(&spec).unwrap();
        assert_eq!(
            serde_json::from_str::<IngestRunInfo>(&plain).unwrap(),
            IngestRunInfo::default()
        );
    }

    #[test]
    fn every_fixed_job_table_is_in_the_catalog() {
        for k in [
            RECORD_JOB,
            INGEST_JOB,
            REPLAY_JOB,
            CALIBRATE_JOB,
            ANALYZE_PLAN_JOB,
            ANALYZE_PART_JOB,
            ANALYZE_MERGE_JOB,
            CHECKS_JOB,
            TRACE_COMPARE_JOB,
            "noop",
        ] {
            if let Some(JobTables::Fixed(t)) = job_tables(k) {
                for t in t {
                    assert!(crate::catalog::get(t).is_some(), "{k}: {t}");
                }
            }
        }
        assert_eq!(job_tables("evil"), None);
    }
}

/// Job kind that merges a table month's small committed parts into one file
/// (docs/architecture.md, "Compaction"). Scheduled by the coordinator, not
/// by a run: its job's run id names no run.
pub const COMPACT_JOB: &str = "compact";

/// The spec of a `compact` job: the parts to merge, in the order the merged
/// file holds them, as the coordinator's state store records them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactSpec {
    /// The table.
    pub table: String,
    /// Its month, `YYYY-MM`.
    pub month: String,
    /// Where each part's rows are now.
    pub parts: Vec<crate::lake::compact::PartSource>,
    /// Earlier merged files whose parts are all in `parts`.
    #[serde(default)]
    pub merged_from: Vec<String>,
}
