//! The coordinator's records (runs, tasks, jobs, agents, schedules, files) and
//! their conversion to the protocol messages. These are what the state store
//! keeps; the lifecycle rules that change them live in [`crate::logic`].
use std::collections::BTreeMap;

use benchlake_core::bench::{BenchmarkInfo, LauncherKind};
use benchlake_proto::v1 as pb;
use serde::{Deserialize, Serialize};

macro_rules! state_enum {
    ($name:ident, $pb:ident, $($v:ident = $s:literal),+ $(,)?) => {
        /// Lifecycle state (stored by name).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $($v),+ }
        impl $name {
            /// Upper-case name, as stored.
            pub fn as_str(self) -> &'static str { match self { $(Self::$v => $s),+ } }
            /// Parses a stored name.
            pub fn parse(s: &str) -> Option<Self> { match s { $($s => Some(Self::$v),)+ _ => None } }
            /// The protocol enum value.
            pub fn to_pb(self) -> i32 { match self { $(Self::$v => pb::$pb::$v as i32),+ } }
        }
    };
}

state_enum!(
    RunState,
    RunState,
    Pending = "PENDING",
    Running = "RUNNING",
    Processing = "PROCESSING",
    Succeeded = "SUCCEEDED",
    Failed = "FAILED",
    Cancelled = "CANCELLED"
);
state_enum!(
    TaskState,
    TaskState,
    Queued = "QUEUED",
    Leased = "LEASED",
    Running = "RUNNING",
    Done = "DONE",
    Failed = "FAILED",
    Cancelled = "CANCELLED"
);
state_enum!(
    JobState,
    JobState,
    Queued = "QUEUED",
    Leased = "LEASED",
    Done = "DONE",
    Failed = "FAILED",
    Cancelled = "CANCELLED"
);

impl RunState {
    /// SUCCEEDED, FAILED or CANCELLED.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
    /// From the protocol value (UNSPECIFIED = None).
    pub fn from_pb(v: i32) -> Option<Self> {
        match pb::RunState::try_from(v).ok()? {
            pb::RunState::Unspecified => None,
            pb::RunState::Pending => Some(Self::Pending),
            pb::RunState::Running => Some(Self::Running),
            pb::RunState::Processing => Some(Self::Processing),
            pb::RunState::Succeeded => Some(Self::Succeeded),
            pb::RunState::Failed => Some(Self::Failed),
            pb::RunState::Cancelled => Some(Self::Cancelled),
        }
    }
}
impl TaskState {
    /// DONE, FAILED or CANCELLED.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Done | Self::Failed | Self::Cancelled)
    }
}
impl JobState {
    /// DONE, FAILED or CANCELLED.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Done | Self::Failed | Self::Cancelled)
    }
}

/// Which agents a run goes to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Nodes {
    /// Explicit agent names (empty = any).
    #[serde(default)]
    pub names: Vec<String>,
    /// Labels that must all match.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Number of agents (0 = 1, or all named agents).
    #[serde(default)]
    pub count: u32,
}

/// A validated benchmark spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// Catalog benchmark name.
    pub benchmark: String,
    /// Canonical parameter values (defaults filled in).
    pub params: BTreeMap<String, String>,
    /// Node selection.
    pub nodes: Nodes,
    /// Launcher.
    pub launcher: LauncherKind,
    /// Attempts per task.
    pub max_attempts: u32,
    /// Timeout in seconds.
    pub timeout_s: u64,
}

impl Spec {
    /// The protocol message.
    pub fn to_pb(&self) -> pb::BenchmarkSpec {
        pb::BenchmarkSpec {
            benchmark: self.benchmark.clone(),
            params: self.params.clone().into_iter().collect(),
            nodes: Some(pb::NodeSelector {
                names: self.nodes.names.clone(),
                labels: self.nodes.labels.clone().into_iter().collect(),
                count: self.nodes.count,
            }),
            launcher: launcher_to_pb(self.launcher),
            max_attempts: self.max_attempts,
            timeout_s: self.timeout_s,
        }
    }
}

/// Protocol launcher value.
pub fn launcher_to_pb(l: LauncherKind) -> i32 {
    match l {
        LauncherKind::Local => pb::Launcher::Local as i32,
        LauncherKind::Mpirun => pb::Launcher::Mpirun as i32,
        LauncherKind::Srun => pb::Launcher::Srun as i32,
    }
}

/// A run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    pub run_id: String,
    pub schedule_id: Option<String>,
    pub benchmark: String,
    pub kind: String,
    pub state: RunState,
    pub spec: Spec,
    pub submitted_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    /// The cron instant the run stands for (schedules, backfills, triggers).
    pub scheduled_for_ms: Option<i64>,
    pub error: Option<String>,
    pub idempotency_key: Option<String>,
    /// The run this one re-runs the failed tasks of.
    pub rerun_of: Option<String>,
    /// Partition date (UTC day of `scheduled_for_ms`, else of `submitted_at_ms`).
    pub date: String,
    /// The final state decided while the `runs` record job is in flight.
    pub outcome: Option<RunState>,
}

/// A raw output file uploaded by an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawFileRow {
    pub key: String,
    pub bytes: u64,
    pub sha256: String,
    pub format: String,
}

impl RawFileRow {
    /// The protocol message.
    pub fn to_pb(&self) -> pb::RawFile {
        pb::RawFile {
            key: self.key.clone(),
            bytes: self.bytes,
            sha256: self.sha256.clone(),
            format: self.format.clone(),
        }
    }
}

/// A task: one agent's share of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    pub task_id: String,
    pub run_id: String,
    pub agent: String,
    pub rank: u32,
    pub num_tasks: u32,
    pub state: TaskState,
    pub attempt: u32,
    pub max_attempts: u32,
    pub lease_id: Option<String>,
    pub lease_expires_ms: Option<i64>,
    /// Not leased before this time (retry backoff).
    pub not_before_ms: i64,
    pub error: Option<String>,
    pub exit_code: Option<i32>,
    pub stdout_tail: String,
    pub stderr_tail: String,
    pub outputs: Vec<RawFileRow>,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    /// Agents of the run in rank order (for mpirun host lists and netprobe peers).
    pub peers: Vec<String>,
}

impl TaskRow {
    /// The protocol message.
    pub fn to_pb(&self) -> pb::Task {
        pb::Task {
            task_id: self.task_id.clone(),
            run_id: self.run_id.clone(),
            agent: self.agent.clone(),
            state: self.state.to_pb(),
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            rank: self.rank,
            error: self.error.clone().unwrap_or_default(),
            outputs: self.outputs.iter().map(RawFileRow::to_pb).collect(),
            stdout_tail: self.stdout_tail.clone(),
            stderr_tail: self.stderr_tail.clone(),
            exit_code: self.exit_code.unwrap_or_default(),
        }
    }
}

/// A worker job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRow {
    pub job_id: String,
    pub run_id: String,
    pub kind: String,
    pub state: JobState,
    pub attempt: u32,
    pub max_attempts: u32,
    pub spec_json: String,
    pub error: Option<String>,
    pub lease_id: Option<String>,
    pub leased_by: Option<String>,
    pub lease_expires_ms: Option<i64>,
    pub not_before_ms: i64,
    pub created_ms: i64,
    /// Final keys this job has committed (or is committing: see `commit`).
    pub committed_keys: Vec<String>,
    pub date: String,
}

impl JobRow {
    /// The protocol message.
    pub fn to_pb(&self) -> pb::Job {
        pb::Job {
            job_id: self.job_id.clone(),
            run_id: self.run_id.clone(),
            kind: self.kind.clone(),
            state: self.state.to_pb(),
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            spec_json: self.spec_json.clone(),
            error: self.error.clone().unwrap_or_default(),
            committed_keys: self.committed_keys.clone(),
        }
    }
}

/// Agent liveness as users see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AgentState {
    Online,
    Draining,
    Lost,
}

impl AgentState {
    /// Upper-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Online => "ONLINE",
            Self::Draining => "DRAINING",
            Self::Lost => "LOST",
        }
    }
    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ONLINE" => Some(Self::Online),
            "DRAINING" => Some(Self::Draining),
            "LOST" => Some(Self::Lost),
            _ => None,
        }
    }
}

/// A registered agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRow {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub hostname: String,
    pub cores: u32,
    pub memory_bytes: u64,
    pub address: String,
    pub version: String,
    pub slots: u32,
    pub catalog: Vec<BenchmarkInfo>,
    pub state: AgentState,
    pub drain: bool,
    pub registered_ms: i64,
    pub last_heartbeat_ms: i64,
    /// Fingerprint of the credential that registered the agent (empty with
    /// authentication off); another credential may not act as this agent.
    #[serde(default)]
    pub credential: String,
}

/// A cron schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRow {
    pub schedule_id: String,
    pub name: String,
    pub cron: String,
    pub time_zone: String,
    pub catch_up: CatchUp,
    pub max_catch_up: u32,
    pub allow_overlap: bool,
    pub paused: bool,
    pub spec: Spec,
    pub next_fire_ms: Option<i64>,
    pub last_fire_ms: Option<i64>,
    pub created_ms: i64,
}

/// What a schedule does with instants missed while the coordinator was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CatchUp {
    /// Missed instants are skipped.
    None,
    /// Only the most recent missed instant runs (the default).
    Latest,
    /// Every missed instant runs, up to `max_catch_up`.
    All,
}

impl CatchUp {
    /// Stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Latest => "latest",
            Self::All => "all",
        }
    }
    /// Parses a stored or user-given name.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Some(Self::None),
            "latest" | "" => Some(Self::Latest),
            "all" => Some(Self::All),
            _ => None,
        }
    }
    /// Protocol value.
    pub fn to_pb(self) -> i32 {
        match self {
            Self::None => pb::CatchUp::None as i32,
            Self::Latest => pb::CatchUp::Latest as i32,
            Self::All => pb::CatchUp::All as i32,
        }
    }
    /// From the protocol value (UNSPECIFIED = Latest).
    pub fn from_pb(v: i32) -> Option<Self> {
        match pb::CatchUp::try_from(v).ok()? {
            pb::CatchUp::Unspecified | pb::CatchUp::Latest => Some(Self::Latest),
            pb::CatchUp::None => Some(Self::None),
            pb::CatchUp::All => Some(Self::All),
        }
    }
}

impl ScheduleRow {
    /// The protocol message.
    pub fn to_pb(&self) -> pb::Schedule {
        pb::Schedule {
            schedule_id: self.schedule_id.clone(),
            name: self.name.clone(),
            cron: self.cron.clone(),
            time_zone: self.time_zone.clone(),
            catch_up: self.catch_up.to_pb(),
            max_catch_up: self.max_catch_up,
            allow_overlap: self.allow_overlap,
            paused: self.paused,
            spec: Some(self.spec.to_pb()),
            next_fire_ms: self.next_fire_ms.unwrap_or_default(),
            last_fire_ms: self.last_fire_ms.unwrap_or_default(),
            created_at_ms: self.created_ms,
        }
    }
}

/// A committed Parquet object of a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommittedFile {
    pub key: String,
    pub table: String,
    pub run_id: String,
    pub job_id: String,
    pub date: String,
    pub rows: u64,
    pub bytes: u64,
    pub committed_ms: i64,
}

impl RunRow {
    /// The protocol message (agents are filled in by the caller from tasks).
    pub fn to_pb(&self, agents: Vec<String>) -> pb::Run {
        pb::Run {
            run_id: self.run_id.clone(),
            schedule_id: self.schedule_id.clone().unwrap_or_default(),
            benchmark: self.benchmark.clone(),
            kind: self.kind.clone(),
            state: self.state.to_pb(),
            params_json: serde_json::to_string(&self.spec.params).unwrap_or_default(),
            submitted_at_ms: self.submitted_at_ms,
            started_at_ms: self.started_at_ms.unwrap_or_default(),
            finished_at_ms: self.finished_at_ms.unwrap_or_default(),
            agents,
            error: self.error.clone().unwrap_or_default(),
            spec: Some(self.spec.to_pb()),
            scheduled_for_ms: self.scheduled_for_ms.unwrap_or_default(),
        }
    }
}
