//! The coordinator's records (runs, tasks, jobs, agents, schedules, files):
//! what the state store keeps. They know nothing of the protocol (the
//! conversions live in [`crate::convert`]); the transitions that change their
//! states live in [`crate::lifecycle`].
use std::collections::BTreeMap;

use benchlake_core::bench::{BenchmarkInfo, LauncherKind};
use benchlake_core::slurm::SlurmOptions;
use serde::{Deserialize, Serialize};

macro_rules! state_enum {
    ($name:ident, $($v:ident = $s:literal),+ $(,)?) => {
        /// Lifecycle state (stored by name).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $($v),+ }
        impl $name {
            /// Upper-case name, as stored.
            pub fn as_str(self) -> &'static str { match self { $(Self::$v => $s),+ } }
            /// Parses a stored name.
            pub fn parse(s: &str) -> Option<Self> { match s { $($s => Some(Self::$v),)+ _ => None } }
        }
    };
}

state_enum!(
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
    Queued = "QUEUED",
    Leased = "LEASED",
    Running = "RUNNING",
    Done = "DONE",
    Failed = "FAILED",
    Cancelled = "CANCELLED"
);
state_enum!(
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
    /// Slurm options (the `srun` launcher; empty for the others).
    #[serde(default, skip_serializing_if = "SlurmOptions::is_empty")]
    pub slurm: SlurmOptions,
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
    /// Queued behind an active run of its schedule (a backfill of a schedule
    /// without `allow_overlap`): PENDING without tasks until the schedule's
    /// runs before it have ended ([`crate::lifecycle::run::start_next_queued`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
    /// Names of the notifiers told when the run ends badly
    /// (docs/notifications.md), chosen at submission or from its schedule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<String>,
    /// Who owns the run ([`crate::access`]); `None` when authentication is
    /// off or for runs recorded before owners were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl RunRow {
    /// When the run counts for trends (`runs.logical_at`): the cron instant
    /// it stands for (a scheduled or backfilled run), else its submission.
    pub fn logical_at_ms(&self) -> i64 {
        self.scheduled_for_ms.unwrap_or(self.submitted_at_ms)
    }
}

/// Where a run comes from.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub schedule_id: Option<String>,
    pub scheduled_for_ms: Option<i64>,
    pub idempotency_key: Option<String>,
    pub rerun_of: Option<String>,
    /// Notifiers of the run (its schedule's, or the submitter's).
    pub notify: Vec<String>,
    /// The run's owner: the submitter, its schedule's owner, or the owner of
    /// the run it re-runs.
    pub owner: Option<String>,
}

impl RunRow {
    /// A new PENDING run of `spec`, submitted at `now`: the one constructor of
    /// runs (submitted, scheduled, re-run, replay and analysis runs alike; the
    /// lifecycle moves it on from there). Its partition date is the UTC day of
    /// the cron instant it stands for, else of its submission.
    pub fn new(
        run_id: String,
        spec: Spec,
        kind: impl Into<String>,
        origin: Origin,
        now: i64,
    ) -> Self {
        Self {
            run_id,
            schedule_id: origin.schedule_id,
            benchmark: spec.benchmark.clone(),
            kind: kind.into(),
            state: RunState::Pending,
            spec,
            submitted_at_ms: now,
            started_at_ms: None,
            finished_at_ms: None,
            scheduled_for_ms: origin.scheduled_for_ms,
            error: None,
            idempotency_key: origin.idempotency_key,
            rerun_of: origin.rerun_of,
            owner: origin.owner,
            date: benchlake_core::layout::date_of_ms(origin.scheduled_for_ms.unwrap_or(now)),
            outcome: None,
            queued: false,
            notify: origin.notify,
        }
    }
}

/// A raw output file uploaded by an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawFileRow {
    pub key: String,
    pub bytes: u64,
    pub sha256: String,
    pub format: String,
    /// The run's bundle (`raw/{run_id}/bundle.tar.zst`) holding the file
    /// once its own object is gone; set when the run's record job reports
    /// it bundled the file (`JobResult::bundled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
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
    /// What the agent last said about the task beyond its state (Slurm's).
    #[serde(default, skip_serializing_if = "TaskReport::is_empty")]
    pub report: TaskReport,
}

/// What an agent says about a task beyond its state: its last progress
/// message and, for the sbatch launcher, the Slurm job and its nodes
/// (docs/slurm.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskReport {
    /// The last progress message (`Slurm job 7 PENDING (Resources)`).
    pub message: String,
    /// The Slurm job of the latest attempt (empty when none).
    pub slurm_job_id: String,
    /// Its node list in Slurm's compact form (`n[1-3]`).
    pub slurm_nodes: String,
}

impl TaskReport {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
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
    /// Benchmarks of the agent's catalog file it will not run, with the
    /// reason it gave at registration (`RegisterRequest.refused`); never in
    /// `catalog`, so never placed on it. Rows written before this field have
    /// none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedBenchmark>,
}

/// A benchmark an agent refuses, and why (e.g. "running as root without
/// run_as").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedBenchmark {
    pub name: String,
    pub reason: String,
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
    /// What to do with the Slurm nodes its runs find failing
    /// ([`crate::node_actions`]).
    #[serde(default)]
    pub node_action: NodeAction,
    pub created_ms: i64,
    /// Notifiers told when a run of the schedule ends badly ([`crate::notify`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<String>,
    /// Who owns the schedule and its runs ([`crate::access`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
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
}

/// A committed part of a table: the Parquet object a job committed, or,
/// once a `compact` job merged it, its row groups in a merged file
/// ([`MergedIn`]). `key` stays the part's committed key either way (the
/// verdict index and notifications name parts by it); `bytes` is the part's
/// size when it was committed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CommittedFile {
    pub key: String,
    pub table: String,
    pub run_id: String,
    pub job_id: String,
    pub date: String,
    pub rows: u64,
    pub bytes: u64,
    pub committed_ms: i64,
    /// Where the rows are since a merge (None: at `key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<MergedIn>,
}

/// A part's place in a merged file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergedIn {
    /// The merged file's key.
    pub object: String,
    /// Its first row group there.
    pub first_group: u64,
    /// Its row groups there.
    pub groups: u64,
}

impl CommittedFile {
    /// The object that holds the part's rows.
    pub fn object(&self) -> &str {
        self.merged.as_ref().map_or(&self.key, |m| &m.object)
    }

    /// Its row groups in [`Self::object`] (first, count); None: all of it.
    pub fn row_groups(&self) -> Option<(usize, usize)> {
        self.merged
            .as_ref()
            .map(|m| (m.first_group as usize, m.groups as usize))
    }
}

/// The committed files of one table, counted ([`crate::store::Tx::table_totals`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableTotals {
    pub table: String,
    pub files: u64,
    pub rows: u64,
    pub bytes: u64,
}

/// Where a notification stands (the outbox of [`crate::notify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NotificationState {
    /// Not sent yet, or to be retried at `next_ms`.
    Pending,
    /// A 2xx answer was received.
    Delivered,
    /// Given up: refused (4xx), attempts ran out, or the notifier is gone.
    Failed,
    /// The run ended well (its checks passed): nothing was sent.
    Skipped,
}

impl NotificationState {
    /// Upper-case name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Delivered => "DELIVERED",
            Self::Failed => "FAILED",
            Self::Skipped => "SKIPPED",
        }
    }
}

/// One notification of a run to one notifier (an outbox row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotificationRow {
    /// The delivery id (a ULID), sent with every attempt.
    pub delivery_id: String,
    pub run_id: String,
    /// The notifier's name.
    pub notifier: String,
    pub state: NotificationState,
    /// Attempts made.
    pub attempt: u32,
    /// Not sent before this time.
    pub next_ms: i64,
    pub created_ms: i64,
    /// The event, once the payload is built.
    pub event: Option<String>,
    /// The JSON body, built once (every attempt sends the same bytes).
    pub body: Option<String>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    pub delivered_ms: Option<i64>,
}

impl NotificationRow {
    /// A PENDING row of `run_id` for `notifier`, due at `now`.
    pub fn new(run_id: &str, notifier: &str, now: i64) -> Self {
        Self {
            delivery_id: benchlake_core::ids::new_id_at(now),
            run_id: run_id.to_string(),
            notifier: notifier.to_string(),
            state: NotificationState::Pending,
            attempt: 0,
            next_ms: now,
            created_ms: now,
            event: None,
            body: None,
            last_error: None,
            delivered_ms: None,
        }
    }
}

// The rows of features the store keeps (their behaviour lives with the
// feature: node_actions, silence, audit). Defined here so the store depends
// on the model only.

/// What a schedule does with the nodes its runs find failing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeAction {
    /// Nothing.
    #[default]
    Off,
    /// Log what `Drain` would do.
    DryRun,
    /// Drain failing nodes, resume the ones benchlake drained once they pass.
    Drain,
}

/// A drain benchlake made (the state store's `node_drains`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDrain {
    /// Slurm node name.
    pub node: String,
    /// The reason given to Slurm, exactly.
    pub reason: String,
    /// The run whose verdict drained it.
    pub run_id: String,
    /// The check that failed (a passing later verdict of it resumes the node).
    pub check: String,
    /// The schedule of that run.
    pub schedule_id: Option<String>,
    /// When.
    pub drained_ms: i64,
}

/// An acknowledgement (the state store's `acknowledgements`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub id: String,
    /// A node name, or `*`.
    pub node: String,
    /// A check name, a family prefix ending in `.`, or `*`.
    pub check: String,
    pub comment: String,
    pub author: String,
    pub created_ms: i64,
    pub expires_ms: i64,
    /// Only runs of this schedule (None: every run).
    #[serde(default)]
    pub schedule_id: Option<String>,
    /// The schedule's name when the acknowledgement was made.
    #[serde(default)]
    pub schedule_name: Option<String>,
}

/// A maintenance window (the state store's `maintenance_windows`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Maintenance {
    pub id: String,
    /// As given (names or a hostlist expression).
    pub nodes: String,
    /// `nodes` expanded.
    pub node_names: Vec<String>,
    pub start_ms: i64,
    pub end_ms: i64,
    pub reason: String,
    pub author: String,
    pub created_ms: i64,
}

/// One action taken (or attempted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRow {
    /// A ULID of `at_ms`, increasing within this process (`audit::next_id`):
    /// orders the rows.
    pub id: String,
    /// When (Unix ms).
    pub at_ms: i64,
    /// Who: [`crate::audit::Actor::who`].
    pub who: String,
    /// Their role (`admin`, `user`).
    pub role: String,
    /// `api` or `dashboard`.
    pub via: String,
    /// What: one of [`crate::audit::action`].
    pub action: String,
    /// On what: a schedule's name, a run id, an agent or node name.
    pub target: String,
    /// `ok`, `refused` (the caller may not) or `failed`.
    pub outcome: String,
    /// The result (a new run's id, the state reached) or why it was refused
    /// or failed.
    pub detail: String,
}
