//! Every conversion between the protocol messages (`benchlake_proto::v1`) and
//! the coordinator's records ([`crate::model`]), in both directions: state
//! enums, specs, runs, tasks, jobs, schedules, agents, catalogs, leases handed
//! to agents and workers.
//!
//! The records, the store and the lifecycle never see a protocol type, and the
//! gRPC handlers never build a message field by field, so a change of the wire
//! format touches this module only. Validation that needs the state (a spec
//! against the agents' catalogs) stays with the rule it checks
//! ([`crate::logic::validate_spec`]); this module only maps values, refusing
//! the ones that have no domain meaning (an unknown enum value or type name).
use benchlake_core::bench::{BenchmarkInfo, LauncherKind, OutputDef, ParamDef, ParamType};
use benchlake_core::layout;
use benchlake_proto::v1 as pb;

use crate::error::{CoordError, Result};
use crate::model::*;
use crate::store::{RunFilter, Tx};

/// `to_pb` of the stored lifecycle states: the protocol enums name the same
/// variants, so the mapping is by name.
macro_rules! state_to_pb {
    ($name:ident, $pb:ident, $($v:ident),+ $(,)?) => {
        impl $name {
            /// The protocol enum value.
            pub fn to_pb(self) -> i32 {
                match self { $(Self::$v => pb::$pb::$v as i32),+ }
            }
        }
    };
}

state_to_pb!(
    RunState, RunState, Pending, Running, Processing, Succeeded, Failed, Cancelled
);
state_to_pb!(
    TaskState, TaskState, Queued, Leased, Running, Done, Failed, Cancelled
);
state_to_pb!(JobState, JobState, Queued, Leased, Done, Failed, Cancelled);

impl RunState {
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

impl CatchUp {
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

/// Protocol launcher value (mapped once, in [`benchlake_proto::launcher`]).
pub fn launcher_to_pb(l: LauncherKind) -> i32 {
    benchlake_proto::launcher::to_pb(l)
}

/// The launcher of a spec's protocol value; None for UNSPECIFIED (the caller
/// picks the benchmark's default). An unknown value is an error naming
/// `spec.launcher`.
pub fn launcher_from_pb(v: i32) -> Result<Option<LauncherKind>> {
    benchlake_proto::launcher::from_pb(v).map_err(|e| CoordError::invalid("spec.launcher", e))
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
            slurm: benchlake_proto::launcher::slurm_to_pb(&self.slurm),
        }
    }
}

impl RawFileRow {
    /// The protocol message.
    pub fn to_pb(&self) -> pb::RawFile {
        pb::RawFile {
            key: self.key.clone(),
            bytes: self.bytes,
            sha256: self.sha256.clone(),
            format: self.format.clone(),
            bundle: self.bundle.clone().unwrap_or_default(),
        }
    }

    /// The record of an output an agent reported (checked by the caller
    /// against the lake). An agent's `bundle` is ignored: only the
    /// coordinator records one (a record job's result).
    pub fn from_pb(o: &pb::RawFile) -> Self {
        Self {
            key: o.key.clone(),
            bytes: o.bytes,
            sha256: o.sha256.clone(),
            format: o.format.clone(),
            bundle: None,
        }
    }
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
            progress: self.report.message.clone(),
            slurm_job_id: self.report.slurm_job_id.clone(),
            slurm_nodes: self.report.slurm_nodes.clone(),
        }
    }
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
            node_action: self.node_action.to_pb(),
            created_at_ms: self.created_ms,
            notify: self.notify.clone(),
            owner: self.owner.clone().unwrap_or_default(),
            // ListSchedules fills these in.
            ..Default::default()
        }
    }
}

impl RunRow {
    /// The protocol message (agents are filled in by the caller from tasks:
    /// see [`run`]).
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
            // From the checks, not the state: see `Svc::with_verdict`.
            verdict: String::new(),
            queued: self.queued,
            owner: self.owner.clone().unwrap_or_default(),
        }
    }
}

/// A run as the protocol shows it: its agents are every peer of its tasks,
/// sorted, once each.
pub fn run(run: &RunRow, tasks: &[TaskRow]) -> pb::Run {
    let mut agents: Vec<String> = tasks.iter().flat_map(|t| t.peers.iter().cloned()).collect();
    agents.sort();
    agents.dedup();
    run.to_pb(agents)
}

/// [`run`], reading the run's tasks.
pub fn run_tx(tx: &mut dyn Tx, r: &RunRow) -> Result<pb::Run> {
    let tasks = tx.tasks_of_run(&r.run_id)?;
    Ok(run(r, &tasks))
}

/// A run with its tasks and jobs (`GetRun`, `WatchRun`).
pub fn run_detail(tx: &mut dyn Tx, run_id: &str) -> Result<pb::RunDetail> {
    let r = tx
        .get_run(run_id)?
        .ok_or_else(|| CoordError::NotFound(format!("run_id: no run '{run_id}'")))?;
    let tasks = tx.tasks_of_run(run_id)?;
    let jobs = tx.jobs_of_run(run_id)?;
    let notifications = tx
        .notifications_of_run(run_id)?
        .into_iter()
        .map(|n| pb::Notification {
            notifier: n.notifier,
            state: n.state.as_str().to_string(),
            delivery_id: n.delivery_id,
            event: n.event.unwrap_or_default(),
            attempts: n.attempt,
            last_error: n.last_error.unwrap_or_default(),
            next_attempt_ms: n.next_ms,
            delivered_at_ms: n.delivered_ms.unwrap_or_default(),
        })
        .collect();
    let schedule_name = match r.schedule_id.as_deref() {
        Some(id) if !id.is_empty() => tx.get_schedule(id)?.map(|s| s.name).unwrap_or_default(),
        _ => String::new(),
    };
    Ok(pb::RunDetail {
        schedule_name,
        run: Some(run(&r, &tasks)),
        tasks: tasks.iter().map(TaskRow::to_pb).collect(),
        jobs: jobs.iter().map(JobRow::to_pb).collect(),
        notifications,
        checks: Vec::new(),
    })
}

/// The filter of a `ListRuns` request (empty fields match everything).
pub fn run_filter(r: pb::ListRunsRequest) -> RunFilter {
    RunFilter {
        schedule_id: (!r.schedule_id.is_empty()).then_some(r.schedule_id),
        state: RunState::from_pb(r.state),
        benchmark: (!r.benchmark.is_empty()).then_some(r.benchmark),
        limit: r.limit,
        before: None,
    }
}

/// The peers of a task in rank order, with what the agents registered.
pub fn peers(tx: &mut dyn Tx, names: &[String]) -> Result<Vec<pb::PeerAgent>> {
    let mut out = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let a = tx.get_agent(n)?;
        out.push(pb::PeerAgent {
            rank: i as u32,
            name: n.clone(),
            hostname: a.as_ref().map(|a| a.hostname.clone()).unwrap_or_default(),
            address: a.as_ref().map(|a| a.address.clone()).unwrap_or_default(),
            cores: a.as_ref().map(|a| a.cores).unwrap_or_default(),
        });
    }
    Ok(out)
}

/// What `PollTask` hands an agent: the leased task and what it needs to run it.
pub fn task_assignment(
    t: &TaskRow,
    run: &RunRow,
    peers: Vec<pb::PeerAgent>,
    raw_prefix: String,
) -> pb::TaskAssignment {
    pb::TaskAssignment {
        task_id: t.task_id.clone(),
        run_id: t.run_id.clone(),
        attempt: t.attempt,
        lease_id: t.lease_id.clone().unwrap_or_default(),
        benchmark: run.spec.benchmark.clone(),
        params: run.spec.params.clone().into_iter().collect(),
        launcher: launcher_to_pb(run.spec.launcher),
        timeout_s: run.spec.timeout_s,
        rank: t.rank,
        num_tasks: t.num_tasks,
        peers,
        raw_prefix,
        slurm: benchlake_proto::launcher::slurm_to_pb(&run.spec.slurm),
    }
}

/// What `LeaseJob` hands a worker: the leased job and where to stage.
pub fn job_assignment(j: &JobRow, lease_ms: u64) -> Result<pb::JobAssignment> {
    Ok(pb::JobAssignment {
        job_id: j.job_id.clone(),
        run_id: j.run_id.clone(),
        kind: j.kind.clone(),
        attempt: j.attempt,
        lease_id: j.lease_id.clone().unwrap_or_default(),
        spec_json: j.spec_json.clone(),
        staging_prefix: layout::staging_prefix(&j.job_id, j.attempt)?,
        lease_timeout_ms: lease_ms,
        run_date: j.date.clone(),
    })
}

/// An agent as `ListAgents` and `DrainAgent` show it; `state` is the label
/// the caller derived (ONLINE, DRAINING, DRAINED, LOST).
pub fn agent_info(
    a: AgentRow,
    state: &str,
    last_heartbeat_ms: i64,
    running_tasks: u32,
) -> pb::AgentInfo {
    pb::AgentInfo {
        name: a.name,
        labels: a.labels.into_iter().collect(),
        hostname: a.hostname,
        cores: a.cores,
        memory_bytes: a.memory_bytes,
        state: state.into(),
        last_heartbeat_ms,
        benchmarks: a.catalog.into_iter().map(|b| b.name).collect(),
        address: a.address,
        version: a.version,
        running_tasks,
        refused: a
            .refused
            .into_iter()
            .map(|r| pb::RefusedBenchmark {
                name: r.name,
                reason: r.reason,
            })
            .collect(),
    }
}

/// The agent row of a `Register` request (catalog already converted with
/// [`catalog`]); the caller keeps the drain flag of an earlier registration.
pub fn agent_row(
    r: &pb::RegisterRequest,
    catalog: Vec<BenchmarkInfo>,
    drain: bool,
    credential: String,
    now: i64,
) -> AgentRow {
    AgentRow {
        name: r.name.clone(),
        labels: r.labels.clone().into_iter().collect(),
        hostname: r.hostname.clone(),
        cores: r.cores,
        memory_bytes: r.memory_bytes,
        address: r.address.clone(),
        version: r.version.clone(),
        slots: r.slots.max(1),
        catalog,
        state: AgentState::Online,
        drain,
        registered_ms: now,
        last_heartbeat_ms: now,
        credential,
        refused: refused(&r.refused),
    }
}

/// What an agent says it refuses, bounded (informational: at most 1000
/// entries, names of 128 and reasons of 512 characters).
fn refused(r: &[pb::RefusedBenchmark]) -> Vec<RefusedBenchmark> {
    let cut = |s: &str, n: usize| s.chars().take(n).collect::<String>();
    r.iter()
        .take(1000)
        .map(|b| RefusedBenchmark {
            name: cut(&b.name, 128),
            reason: cut(&b.reason, 512),
        })
        .collect()
}

fn param(p: pb::ParamDef, field: &str) -> Result<ParamDef> {
    let ty = ParamType::parse(&p.r#type).ok_or_else(|| {
        CoordError::invalid(field, format!("unknown parameter type '{}'", p.r#type))
    })?;
    Ok(ParamDef {
        name: p.name,
        ty,
        default: p.default,
        optional: p.optional,
        min: p.min,
        max: p.max,
        choices: p.choices,
        within: p.within,
        description: p.description,
    })
}

/// The benchmark catalog an agent registers. Errors name the field
/// (`catalog[i].…`).
pub fn catalog(defs: Vec<pb::BenchmarkDef>) -> Result<Vec<BenchmarkInfo>> {
    if defs.len() > 1000 {
        return Err(CoordError::invalid("catalog", "more than 1000 benchmarks"));
    }
    let mut out = Vec::new();
    for (i, b) in defs.into_iter().enumerate() {
        let field = format!("catalog[{i}]");
        crate::grpc::check_name(&format!("{field}.name"), &b.name, 64)?;
        let params = b
            .params
            .into_iter()
            .map(|p| param(p, &format!("{field}.params")))
            .collect::<Result<Vec<_>>>()?;
        let launchers = b
            .launchers
            .iter()
            .map(|l| {
                LauncherKind::parse(l).ok_or_else(|| {
                    CoordError::invalid(
                        &format!("{field}.launchers"),
                        format!("unknown launcher '{l}'"),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // Shown by `benchmarks show`, never used to run anything here: any
        // printable name (site accounts may hold '@' or '$'), no control
        // characters.
        let run_as = match b.run_as {
            Some(u) if u.is_empty() || u.len() > 256 || u.chars().any(char::is_control) => {
                return Err(CoordError::invalid(
                    &format!("{field}.run_as"),
                    "not a user name (1 to 256 bytes, no control characters)",
                ));
            }
            u => u,
        };
        out.push(BenchmarkInfo {
            name: b.name,
            kind: b.kind,
            description: b.description,
            params,
            outputs: b
                .outputs
                .into_iter()
                .map(|o| OutputDef {
                    file: o.file,
                    format: o.format,
                    required: o.required,
                })
                .collect(),
            timeout_s: b.timeout_s,
            max_timeout_s: b.max_timeout_s,
            launchers: if launchers.is_empty() {
                vec![LauncherKind::Local]
            } else {
                launchers
            },
            run_as,
        });
    }
    Ok(out)
}

/// Every benchmark the agents' catalogs name, with who offers it and who
/// refuses it (`ListBenchmarks`), in name order; `only` keeps one name.
/// LOST agents neither offer nor refuse.
pub fn benchmark_offers(agents: &[AgentRow], only: &str) -> Vec<pb::BenchmarkOffer> {
    let mut by_name: std::collections::BTreeMap<String, pb::BenchmarkOffer> =
        std::collections::BTreeMap::new();
    let mut sorted: Vec<&AgentRow> = agents
        .iter()
        .filter(|a| a.state != AgentState::Lost)
        .collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for a in sorted {
        for b in a
            .catalog
            .iter()
            .filter(|b| only.is_empty() || b.name == only)
        {
            let def = benchlake_proto::catalog::benchmark_def(b);
            let o = by_name.entry(b.name.clone()).or_default();
            match &o.def {
                None => o.def = Some(def),
                Some(d) if *d != def => o.definitions_differ = true,
                Some(_) => {}
            }
            o.agents.push(a.name.clone());
        }
        for r in a
            .refused
            .iter()
            .filter(|r| only.is_empty() || r.name == only)
        {
            by_name
                .entry(r.name.clone())
                .or_default()
                .refused
                .push(pb::AgentRefusal {
                    agent: a.name.clone(),
                    reason: r.reason.clone(),
                });
        }
    }
    by_name
        .into_iter()
        .map(|(name, mut o)| {
            // A benchmark every agent refuses: its name is all that is known.
            o.def.get_or_insert_with(|| pb::BenchmarkDef {
                name,
                ..Default::default()
            });
            o
        })
        .collect()
}
