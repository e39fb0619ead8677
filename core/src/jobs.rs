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
}

/// A follow-up job an executor asks for in its `result_json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FollowUp {
    pub kind: String,
    #[serde(default)]
    pub spec: serde_json::Value,
}

/// What an executor may report on completion.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    #[serde(default)]
    pub follow_ups: Vec<FollowUp>,
}
