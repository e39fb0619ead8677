//! Spec validation and agent placement: the rules that decide whether a
//! benchmark spec is valid against the catalogs the agents registered, and
//! which agents a run goes to (named ones, or the least loaded eligible ones).
//! The state transitions that use them live in [`crate::lifecycle`].
use std::collections::BTreeMap;

use benchlake_core::bench::{BenchmarkInfo, LauncherKind};

use crate::config::CoordinatorConfig;
use crate::error::{CoordError, Result};
use crate::model::*;
use crate::store::Tx;

/// The catalog entry of `benchmark` as registered by agents (first agent that has it).
pub fn find_benchmark(agents: &[AgentRow], benchmark: &str) -> Option<BenchmarkInfo> {
    agents
        .iter()
        .flat_map(|a| a.catalog.iter())
        .find(|b| b.name == benchmark)
        .cloned()
}

/// What the agents that refuse `benchmark` said, one `NAME refuses it:
/// REASON` each (none: empty).
pub fn refusals(agents: &[AgentRow], benchmark: &str) -> Vec<String> {
    agents
        .iter()
        .filter_map(|a| {
            a.refused
                .iter()
                .find(|r| r.name == benchmark)
                .map(|r| format!("{} refuses it: {}", a.name, r.reason))
        })
        .collect()
}

/// Validates a user spec against the registered catalogs; returns the canonical spec
/// and the benchmark's kind. Errors name the field. A benchmark no agent
/// offers but some agent refuses is `FAILED_PRECONDITION` naming each such
/// agent and its reason (`no agent offers 'ior': a1 refuses it: running as
/// root without run_as`); one nobody knows is `INVALID_ARGUMENT`.
pub fn validate_spec(
    cfg: &CoordinatorConfig,
    agents: &[AgentRow],
    raw: &benchlake_proto::v1::BenchmarkSpec,
) -> Result<(Spec, String)> {
    if !raw.benchmark.is_empty() && find_benchmark(agents, &raw.benchmark).is_none() {
        let why = refusals(agents, &raw.benchmark);
        if !why.is_empty() {
            return Err(CoordError::FailedPrecondition(format!(
                "spec.benchmark: no agent offers '{}': {}",
                raw.benchmark,
                why.join("; ")
            )));
        }
    }
    validate_spec_with(
        cfg,
        raw,
        |b| find_benchmark(agents, b),
        || {
            let mut known: Vec<_> = agents
                .iter()
                .flat_map(|a| a.catalog.iter().map(|b| b.name.clone()))
                .collect();
            known.sort();
            known.dedup();
            known
        },
        |n| agents.iter().any(|a| a.name == n),
    )
}

/// [`validate_spec`] against the store's placement index when it keeps one
/// (no agent row read or decoded), else against every agent row.
pub fn validate_spec_tx(
    cfg: &CoordinatorConfig,
    tx: &mut dyn Tx,
    raw: &benchlake_proto::v1::BenchmarkSpec,
) -> Result<(Spec, String)> {
    if let Some(v) = tx.placement() {
        // A benchmark nobody offers reads the rows (what agents refuse).
        if raw.benchmark.is_empty() || v.benchmark(&raw.benchmark).is_some() {
            return validate_spec_with(
                cfg,
                raw,
                |b| v.benchmark(b),
                || v.known_benchmarks(),
                |n| v.agent(n).is_some(),
            );
        }
    }
    let agents = tx.list_agents()?;
    validate_spec(cfg, &agents, raw)
}

fn validate_spec_with(
    cfg: &CoordinatorConfig,
    raw: &benchlake_proto::v1::BenchmarkSpec,
    find: impl Fn(&str) -> Option<BenchmarkInfo>,
    known: impl Fn() -> Vec<String>,
    exists: impl Fn(&str) -> bool,
) -> Result<(Spec, String)> {
    if raw.benchmark.is_empty() {
        return Err(CoordError::invalid("spec.benchmark", "is required"));
    }
    let info = find(&raw.benchmark).ok_or_else(|| {
        let known = known();
        CoordError::invalid(
            "spec.benchmark",
            format!(
                "unknown benchmark '{}' (no registered agent offers it; known: {})",
                raw.benchmark,
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            ),
        )
    })?;
    let params: BTreeMap<String, String> = raw.params.clone().into_iter().collect();
    let params = info
        .validate_params(&params, "spec.params")
        .map_err(CoordError::Invalid)?;
    // UNSPECIFIED: the benchmark's first launcher.
    let launcher = match crate::convert::launcher_from_pb(raw.launcher)? {
        Some(l) => l,
        None => *info.launchers.first().unwrap_or(&LauncherKind::Local),
    };
    if !info.launchers.contains(&launcher) {
        return Err(CoordError::invalid(
            "spec.launcher",
            format!(
                "benchmark '{}' does not support launcher '{}' (supported: {})",
                info.name,
                launcher.as_str(),
                info.launchers
                    .iter()
                    .map(|l| l.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let timeout_s = info
        .effective_timeout(raw.timeout_s)
        .map_err(CoordError::Invalid)?;
    let max_attempts = match raw.max_attempts {
        0 => cfg.task_max_attempts,
        n if n <= 20 => n,
        n => {
            return Err(CoordError::invalid(
                "spec.max_attempts",
                format!("{n} is above 20"),
            ));
        }
    };
    let sel = raw.nodes.clone().unwrap_or_default();
    if sel.names.len() > 10_000 {
        return Err(CoordError::invalid(
            "spec.nodes.names",
            "more than 10000 names",
        ));
    }
    for n in &sel.names {
        if !exists(n) {
            return Err(CoordError::invalid(
                "spec.nodes.names",
                format!("unknown agent '{n}'"),
            ));
        }
    }
    let slurm = benchlake_proto::launcher::slurm_from_pb(raw.slurm.as_ref());
    if !slurm.is_empty() && !launcher.is_slurm() {
        return Err(CoordError::invalid(
            "spec.slurm",
            format!(
                "Slurm options need the srun or sbatch launcher (this run's is '{}')",
                launcher.as_str()
            ),
        ));
    }
    slurm
        .validate("spec.slurm.")
        .map_err(|e| CoordError::invalid(&e.field, e.message))?;
    if sel.count > 100_000 {
        return Err(CoordError::invalid(
            "spec.nodes.count",
            format!("{} is absurd", sel.count),
        ));
    }
    Ok((
        Spec {
            benchmark: info.name.clone(),
            params,
            nodes: Nodes {
                names: sel.names,
                labels: sel.labels.into_iter().collect(),
                count: sel.count,
            },
            launcher,
            max_attempts,
            timeout_s,
            slurm,
        },
        info.kind,
    ))
}

/// Whether an agent can take a new task of `spec` (liveness is the tick's job: a
/// silent agent is LOST before its tasks expire).
fn eligible(a: &AgentRow, spec: &Spec) -> bool {
    a.state == AgentState::Online
        && !a.drain
        && a.catalog.iter().any(|b| b.name == spec.benchmark)
        && spec
            .nodes
            .labels
            .iter()
            .all(|(k, v)| a.labels.get(k) == Some(v))
}

/// Chooses the agents of a run. `exclude` are agents that must not be chosen.
///
/// With the store's placement index (the SQLite store keeps one) this reads no
/// row: named agents are looked up, and the least loaded eligible ones are
/// picked among the agents offering the benchmark with their in-memory loads.
/// [`select_agents_from_rows`] is the same rule over every agent row.
///
/// When no agent can be chosen, the error names the agents that refuse the
/// benchmark and why (read from the rows: only on this error path).
pub fn select_agents(tx: &mut dyn Tx, spec: &Spec, exclude: &[String]) -> Result<Vec<String>> {
    match select_agents_indexed(tx, spec, exclude) {
        Err(CoordError::FailedPrecondition(m)) => Err(CoordError::FailedPrecondition(
            with_refusals(tx, m, &spec.benchmark)?,
        )),
        r => r,
    }
}

/// `message`, followed by what the agents refusing `benchmark` said.
fn with_refusals(tx: &mut dyn Tx, message: String, benchmark: &str) -> Result<String> {
    let why = refusals(&tx.list_agents()?, benchmark);
    Ok(if why.is_empty() {
        message
    } else {
        format!("{message}; {}", why.join("; "))
    })
}

fn select_agents_indexed(tx: &mut dyn Tx, spec: &Spec, exclude: &[String]) -> Result<Vec<String>> {
    let Some(v) = tx.placement() else {
        return rows_select(tx, spec, exclude);
    };
    if !spec.nodes.names.is_empty() {
        let mut out = Vec::new();
        for n in &spec.nodes.names {
            let a = v.agent(n).ok_or_else(|| {
                CoordError::invalid("spec.nodes.names", format!("unknown agent '{n}'"))
            })?;
            if !a.eligible(spec) {
                return Err(not_eligible(n, a.state, a.drain, spec));
            }
            out.push(n.clone());
        }
        return named_count(spec, out);
    }
    let want = spec.nodes.count.max(1) as usize;
    let cands = v.candidates(spec, exclude, want);
    least_loaded(spec, want, cands)
}

/// Why named agent `n` cannot take a run of `spec`.
fn not_eligible(n: &str, state: AgentState, drain: bool, spec: &Spec) -> CoordError {
    CoordError::FailedPrecondition(format!(
        "spec.nodes.names: agent '{n}' cannot take the run (state {}, draining {drain}, or it lacks benchmark '{}' or the labels)",
        state.as_str(),
        spec.benchmark
    ))
}

/// The first `spec.nodes.count` of the named agents (all when 0).
fn named_count(spec: &Spec, mut out: Vec<String>) -> Result<Vec<String>> {
    let want = if spec.nodes.count == 0 {
        out.len()
    } else {
        spec.nodes.count as usize
    };
    if want > out.len() {
        return Err(CoordError::invalid(
            "spec.nodes.count",
            format!("{want} agents requested but only {} named", out.len()),
        ));
    }
    out.truncate(want);
    Ok(out)
}

/// The `want` least loaded of `(load, name)` candidates, ties by name.
fn least_loaded(spec: &Spec, want: usize, mut cands: Vec<(usize, String)>) -> Result<Vec<String>> {
    if cands.len() < want {
        return Err(CoordError::FailedPrecondition(format!(
            "spec.nodes.count: {want} agent(s) requested, {} eligible (online, not draining, offering '{}', matching labels)",
            cands.len(),
            spec.benchmark
        )));
    }
    // Least loaded first, then by name, so repeated runs spread over the agents.
    if want < cands.len() {
        cands.select_nth_unstable(want);
        cands.truncate(want);
    }
    cands.sort_unstable();
    Ok(cands.into_iter().map(|c| c.1).collect())
}

/// [`select_agents`] over every agent row, counting each eligible agent's tasks
/// in SQL (stores without a placement index; the tests compare both).
pub fn select_agents_from_rows(
    tx: &mut dyn Tx,
    spec: &Spec,
    exclude: &[String],
) -> Result<Vec<String>> {
    match rows_select(tx, spec, exclude) {
        Err(CoordError::FailedPrecondition(m)) => Err(CoordError::FailedPrecondition(
            with_refusals(tx, m, &spec.benchmark)?,
        )),
        r => r,
    }
}

fn rows_select(tx: &mut dyn Tx, spec: &Spec, exclude: &[String]) -> Result<Vec<String>> {
    let agents = tx.list_agents()?;
    if !spec.nodes.names.is_empty() {
        let mut out = Vec::new();
        for n in &spec.nodes.names {
            let a = agents.iter().find(|a| &a.name == n).ok_or_else(|| {
                CoordError::invalid("spec.nodes.names", format!("unknown agent '{n}'"))
            })?;
            if !eligible(a, spec) {
                return Err(not_eligible(n, a.state, a.drain, spec));
            }
            out.push(n.clone());
        }
        return named_count(spec, out);
    }
    let want = spec.nodes.count.max(1) as usize;
    let mut cands: Vec<(usize, String)> = Vec::new();
    for a in agents
        .iter()
        .filter(|a| eligible(a, spec) && !exclude.contains(&a.name))
    {
        let load = tx
            .tasks_of_agent(
                &a.name,
                &[TaskState::Queued, TaskState::Leased, TaskState::Running],
            )?
            .len();
        cands.push((load, a.name.clone()));
    }
    least_loaded(spec, want, cands)
}
