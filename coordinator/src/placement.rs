//! The placement index: what agent selection and heartbeats need, in memory.
//!
//! The SQLite store keeps it in step with its rows: every `upsert_agent`,
//! `insert_task` and `update_task` of a transaction is recorded in a
//! [`Pending`] journal, read through (a [`View`]) by the rest of the same
//! transaction, and applied to the shared [`Placement`] when the transaction
//! commits (dropped when it rolls back). So the index always equals the
//! committed rows, and a submit picks its agents without reading every agent
//! row, decoding every catalog, or counting every agent's tasks in SQL.
//!
//! It holds, per agent, what [`crate::logic::select_agents`] looks at (state,
//! drain, labels, catalog) and its load (QUEUED, LEASED and RUNNING tasks);
//! per benchmark, the agents offering it (sorted by name); and every task that
//! has not ended (agent, state, lease end), which is what a heartbeat checks
//! its running tasks against without touching the database.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use benchlake_core::bench::BenchmarkInfo;

use crate::model::*;

/// The index shared by the store (writer, at commit) and the coordinator
/// (heartbeats, the reaper).
pub type SharedPlacement = Arc<RwLock<Placement>>;

/// What selection needs of an agent (mirrors its row).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEntry {
    pub state: AgentState,
    pub drain: bool,
    pub labels: BTreeMap<String, String>,
    pub catalog: Vec<BenchmarkInfo>,
    /// `last_heartbeat_ms` as stored (the reaper decides when to write it).
    pub stored_heartbeat_ms: i64,
}

impl AgentEntry {
    /// The entry of a row.
    pub fn of(a: &AgentRow) -> Self {
        Self {
            state: a.state,
            drain: a.drain,
            labels: a.labels.clone(),
            catalog: a.catalog.clone(),
            stored_heartbeat_ms: a.last_heartbeat_ms,
        }
    }

    /// Whether it can take a new task of `spec` (the rule of
    /// [`crate::logic::select_agents`]).
    pub fn eligible(&self, spec: &Spec) -> bool {
        self.state == AgentState::Online
            && !self.drain
            && self.catalog.iter().any(|b| b.name == spec.benchmark)
            && spec
                .nodes
                .labels
                .iter()
                .all(|(k, v)| self.labels.get(k) == Some(v))
    }
}

/// A task that has not ended.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveTask {
    pub agent: String,
    pub state: TaskState,
    pub lease_expires_ms: Option<i64>,
}

impl ActiveTask {
    /// The entry of a task row; None once the task has ended.
    pub fn of(t: &TaskRow) -> Option<Self> {
        (!t.state.is_final()).then(|| Self {
            agent: t.agent.clone(),
            state: t.state,
            lease_expires_ms: t.lease_expires_ms,
        })
    }
}

/// A bell per agent waiting in a long `PollTask`, rung when a transaction
/// that queued a task for it commits ([`Placement::apply`]). One entry per
/// agent that has waited (registered names only), so it is as bounded as the
/// agents.
#[derive(Debug, Default)]
pub struct TaskBells {
    bells: std::sync::Mutex<HashMap<String, std::sync::Arc<tokio::sync::Notify>>>,
}

impl TaskBells {
    /// The bell of `agent` (created on first use).
    pub fn of(&self, agent: &str) -> std::sync::Arc<tokio::sync::Notify> {
        let mut g = self.bells.lock().unwrap_or_else(|p| p.into_inner());
        g.entry(agent.to_string()).or_default().clone()
    }

    /// Wakes the calls of `agent` waiting now (none: nothing to do).
    pub fn ring(&self, agent: &str) {
        let g = self.bells.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = g.get(agent) {
            b.notify_waiters();
        }
    }

    /// Agents with a bell.
    pub fn len(&self) -> usize {
        self.bells.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no agent has a bell.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The committed index.
#[derive(Debug, Default)]
pub struct Placement {
    agents: HashMap<String, AgentEntry>,
    /// Benchmark name → agents offering it (any state), by name.
    by_benchmark: HashMap<String, BTreeSet<String>>,
    /// Benchmark name → (load, agent) of the agents offering it: selection
    /// walks it from the least loaded and stops after the agents it needs.
    ranked: HashMap<String, BTreeSet<(u64, String)>>,
    /// Agent → tasks not ended (QUEUED, LEASED, RUNNING). No zero entries.
    load: HashMap<String, u64>,
    /// Task id → task not ended.
    tasks: HashMap<String, ActiveTask>,
    /// Rung for the agent of each task a commit leaves QUEUED.
    bells: std::sync::Arc<TaskBells>,
}

impl Placement {
    /// An index of these rows (`tasks`: at least every task not ended).
    pub fn build(
        agents: Vec<AgentRow>,
        tasks: impl IntoIterator<Item = (String, ActiveTask)>,
    ) -> Self {
        let mut p = Self::default();
        for a in agents {
            p.set_agent(&a.name, Some(AgentEntry::of(&a)));
        }
        for (id, t) in tasks {
            p.set_task(&id, Some(t));
        }
        p
    }

    /// The entry of agent `name`.
    pub fn agent(&self, name: &str) -> Option<&AgentEntry> {
        self.agents.get(name)
    }

    /// Every agent (the reaper's loop).
    pub fn agents(&self) -> impl Iterator<Item = (&String, &AgentEntry)> {
        self.agents.iter()
    }

    /// Number of agents.
    pub fn agent_count(&self) -> usize {
        self.agents.len()
    }

    /// A task that has not ended.
    pub fn task(&self, id: &str) -> Option<&ActiveTask> {
        self.tasks.get(id)
    }

    /// Tasks of `agent` that have not ended.
    pub fn load(&self, agent: &str) -> u64 {
        self.load.get(agent).copied().unwrap_or(0)
    }

    fn set_agent(&mut self, name: &str, e: Option<AgentEntry>) {
        let load = self.load(name);
        if let Some(old) = self.agents.remove(name) {
            for b in &old.catalog {
                if let Some(s) = self.by_benchmark.get_mut(&b.name) {
                    s.remove(name);
                    if s.is_empty() {
                        self.by_benchmark.remove(&b.name);
                    }
                }
                if let Some(s) = self.ranked.get_mut(&b.name) {
                    s.remove(&(load, name.to_string()));
                    if s.is_empty() {
                        self.ranked.remove(&b.name);
                    }
                }
            }
        }
        if let Some(e) = e {
            for b in &e.catalog {
                self.by_benchmark
                    .entry(b.name.clone())
                    .or_default()
                    .insert(name.to_string());
                self.ranked
                    .entry(b.name.clone())
                    .or_default()
                    .insert((load, name.to_string()));
            }
            self.agents.insert(name.to_string(), e);
        }
    }

    /// Moves `agent`'s load by `delta`, in the load map and the ranked sets.
    fn add_load(&mut self, agent: &str, delta: i64) {
        let old = self.load(agent);
        let new = (old as i64 + delta).max(0) as u64;
        if new == old {
            return;
        }
        if new == 0 {
            self.load.remove(agent);
        } else {
            self.load.insert(agent.to_string(), new);
        }
        if let Some(e) = self.agents.get(agent) {
            for b in &e.catalog {
                if let Some(s) = self.ranked.get_mut(&b.name) {
                    s.remove(&(old, agent.to_string()));
                    s.insert((new, agent.to_string()));
                }
            }
        }
    }

    fn set_task(&mut self, id: &str, t: Option<ActiveTask>) {
        if let Some(old) = self.tasks.remove(id) {
            self.add_load(&old.agent, -1);
        }
        if let Some(t) = t {
            self.add_load(&t.agent, 1);
            self.tasks.insert(id.to_string(), t);
        }
    }

    /// Applies a committed transaction's journal, and rings the bell of
    /// every agent that has a task QUEUED by it.
    pub fn apply(&mut self, p: Pending) {
        for (name, e) in p.agents {
            self.set_agent(&name, Some(e));
        }
        for (id, t) in p.tasks {
            if let Some(t) = t.as_ref().filter(|t| t.state == TaskState::Queued) {
                self.bells.ring(&t.agent);
            }
            self.set_task(&id, t);
        }
    }

    /// The agents' bells (long `PollTask` calls wait on them).
    pub fn bells(&self) -> std::sync::Arc<TaskBells> {
        self.bells.clone()
    }
}

/// The changes of a transaction not yet committed (last write wins).
#[derive(Debug, Default)]
pub struct Pending {
    agents: HashMap<String, AgentEntry>,
    tasks: HashMap<String, Option<ActiveTask>>,
    load_delta: HashMap<String, i64>,
}

impl Pending {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty() && self.tasks.is_empty()
    }

    /// Records an agent row written.
    pub fn agent_written(&mut self, a: &AgentRow) {
        self.agents.insert(a.name.clone(), AgentEntry::of(a));
    }

    /// Records a task row written; `base` is the committed index.
    pub fn task_written(&mut self, base: &Placement, t: &TaskRow) {
        let old = match self.tasks.get(&t.task_id) {
            Some(o) => o.clone(),
            None => base.task(&t.task_id).cloned(),
        };
        if let Some(o) = &old {
            *self.load_delta.entry(o.agent.clone()).or_default() -= 1;
        }
        let new = ActiveTask::of(t);
        if let Some(n) = &new {
            *self.load_delta.entry(n.agent.clone()).or_default() += 1;
        }
        self.tasks.insert(t.task_id.clone(), new);
    }
}

/// The index as one transaction sees it: committed state plus its own changes.
pub struct View<'a> {
    pub base: std::sync::RwLockReadGuard<'a, Placement>,
    pub pending: &'a Pending,
}

impl View<'_> {
    /// The entry of agent `name`.
    pub fn agent(&self, name: &str) -> Option<&AgentEntry> {
        self.pending
            .agents
            .get(name)
            .or_else(|| self.base.agent(name))
    }

    /// Tasks of `agent` that have not ended.
    pub fn load(&self, agent: &str) -> u64 {
        let d = self.pending.load_delta.get(agent).copied().unwrap_or(0);
        (self.base.load(agent) as i64 + d).max(0) as u64
    }

    /// The catalog entry of `benchmark` of the first agent (by name) offering
    /// it, like [`crate::logic::find_benchmark`] over every agent row.
    pub fn benchmark(&self, benchmark: &str) -> Option<BenchmarkInfo> {
        let base = self.base.by_benchmark.get(benchmark).and_then(|s| {
            s.iter()
                .find(|n| !self.pending.agents.contains_key(*n))
                .map(String::as_str)
        });
        let pending = self
            .pending
            .agents
            .iter()
            .filter(|(_, e)| e.catalog.iter().any(|b| b.name == benchmark))
            .map(|(n, _)| n.as_str())
            .min();
        let first = match (base, pending) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        self.agent(first)?
            .catalog
            .iter()
            .find(|b| b.name == benchmark)
            .cloned()
    }

    /// Names of the agents whose entry satisfies `f` (the reaper's loop).
    pub fn agents_where(&self, mut f: impl FnMut(&str, &AgentEntry) -> bool) -> Vec<String> {
        let mut out: Vec<String> = self
            .base
            .agents
            .iter()
            .filter(|(n, _)| !self.pending.agents.contains_key(*n))
            .chain(self.pending.agents.iter())
            .filter(|(n, e)| f(n, e))
            .map(|(n, _)| n.clone())
            .collect();
        out.sort_unstable();
        out
    }

    /// Every benchmark some agent offers (error messages).
    pub fn known_benchmarks(&self) -> Vec<String> {
        let mut known: BTreeSet<String> = self.base.by_benchmark.keys().cloned().collect();
        for e in self.pending.agents.values() {
            known.extend(e.catalog.iter().map(|b| b.name.clone()));
        }
        known.into_iter().collect()
    }

    /// The eligible agents of `spec` not in `exclude`, with their load; when
    /// there are more than `want`, only a part that holds the `want` least
    /// loaded (ties by name). Walks the benchmark's agents from the least
    /// loaded and stops after `want` eligible ones: O(want + ineligible agents
    /// skipped) plus the agents this transaction changed, no row read.
    pub fn candidates(&self, spec: &Spec, exclude: &[String], want: usize) -> Vec<(usize, String)> {
        let changed = |n: &str| {
            self.pending.agents.contains_key(n)
                || self.pending.load_delta.get(n).is_some_and(|d| *d != 0)
        };
        let mut out = Vec::new();
        if let Some(set) = self.base.ranked.get(&spec.benchmark) {
            for (load, n) in set {
                if out.len() >= want {
                    break;
                }
                if changed(n) || exclude.contains(n) {
                    continue;
                }
                if self.base.agent(n).is_some_and(|e| e.eligible(spec)) {
                    out.push((*load as usize, n.clone()));
                }
            }
        }
        // Agents this transaction wrote or loaded: their entry and load as it sees them.
        let mut touched: BTreeSet<&String> = self.pending.agents.keys().collect();
        touched.extend(
            self.pending
                .load_delta
                .iter()
                .filter(|(_, d)| **d != 0)
                .map(|(n, _)| n),
        );
        for n in touched {
            if !exclude.contains(n) && self.agent(n).is_some_and(|e| e.eligible(spec)) {
                out.push((self.load(n) as usize, n.clone()));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use benchlake_core::bench::LauncherKind;

    use super::*;
    use crate::error::CoordError;
    use crate::logic;
    use crate::store::{SqliteStore, StateStore};

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    fn bench(name: &str, kind: &str) -> BenchmarkInfo {
        BenchmarkInfo {
            name: name.into(),
            kind: kind.into(),
            description: String::new(),
            params: vec![],
            outputs: vec![],
            timeout_s: 60,
            max_timeout_s: 600,
            launchers: vec![LauncherKind::Local],
            run_as: None,
        }
    }

    fn agent(r: &mut Lcg, i: u64) -> AgentRow {
        let catalog = ["a", "b", "c"]
            .iter()
            .filter(|_| r.next(3) > 0)
            // Kinds differ by agent: validation takes the first agent's entry.
            .map(|b| bench(b, &format!("{b}-{i}")))
            .collect();
        AgentRow {
            name: format!("ag-{:03}", r.next(60)),
            labels: [("rack".to_string(), format!("r{}", r.next(3)))]
                .into_iter()
                .collect(),
            hostname: String::new(),
            cores: 1,
            memory_bytes: 0,
            address: String::new(),
            version: String::new(),
            slots: 1,
            catalog,
            state: if r.next(5) == 0 {
                AgentState::Lost
            } else {
                AgentState::Online
            },
            drain: r.next(6) == 0,
            registered_ms: 0,
            last_heartbeat_ms: 0,
            credential: String::new(),
            refused: Vec::new(),
        }
    }

    fn spec(r: &mut Lcg, names: Vec<String>) -> Spec {
        Spec {
            benchmark: ["a", "b", "c", "zz"][r.next(4) as usize].into(),
            params: Default::default(),
            nodes: Nodes {
                names,
                labels: if r.next(2) == 0 {
                    [("rack".to_string(), format!("r{}", r.next(3)))]
                        .into_iter()
                        .collect()
                } else {
                    Default::default()
                },
                count: r.next(4) as u32,
            },
            launcher: LauncherKind::Local,
            max_attempts: 3,
            timeout_s: 60,
            slurm: Default::default(),
        }
    }

    fn task(r: &mut Lcg, agent: &str, i: u64) -> TaskRow {
        TaskRow {
            report: Default::default(),
            task_id: format!("t{i:05}"),
            run_id: "r".into(),
            agent: agent.into(),
            rank: 0,
            num_tasks: 1,
            state: [
                TaskState::Queued,
                TaskState::Leased,
                TaskState::Running,
                TaskState::Done,
                TaskState::Failed,
                TaskState::Cancelled,
            ][r.next(6) as usize],
            attempt: 1,
            max_attempts: 1,
            lease_id: None,
            lease_expires_ms: Some(r.next(1000) as i64),
            not_before_ms: 0,
            error: None,
            exit_code: None,
            stdout_tail: String::new(),
            stderr_tail: String::new(),
            outputs: vec![],
            started_at_ms: None,
            finished_at_ms: None,
            peers: vec![],
        }
    }

    /// Selection and validation through the index equal the same rules over
    /// the rows, after random agent and task writes, committed and rolled back,
    /// and after a reopen (index rebuilt from the file).
    #[test]
    fn the_index_selects_like_the_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut r = Lcg(7);
        let mut chose = 0;
        for round in 0..2 {
            let store: Arc<dyn StateStore> = Arc::new(SqliteStore::open(&path).unwrap());
            for step in 0..60u64 {
                let commit = step % 5 != 4;
                let out = store.transact(|tx| {
                    for _ in 0..3 {
                        let a = agent(&mut r, step);
                        tx.upsert_agent(&a)?;
                    }
                    let agents = tx.list_agents()?;
                    for _ in 0..8 {
                        let a = &agents[r.next(agents.len() as u64) as usize].name;
                        // Rewrites of existing tasks move them between agents and states.
                        let id = r.next(200);
                        let t = task(&mut r, a, id);
                        if tx.get_task(&t.task_id)?.is_some() {
                            tx.update_task(&t)?;
                        } else {
                            tx.insert_task(&t)?;
                        }
                    }
                    // Inside the transaction the index sees its own writes.
                    compare(tx, &mut r, &agents)?;
                    if commit {
                        Ok(())
                    } else {
                        Err(CoordError::Setup("roll back".into()))
                    }
                });
                assert_eq!(out.is_ok(), commit, "round {round} step {step}: {out:?}");
                chose += store
                    .transact(|tx| {
                        let agents = tx.list_agents()?;
                        compare(tx, &mut r, &agents)
                    })
                    .unwrap();
            }
        }
        // Both outcomes were exercised (2 × 60 × 20 selections).
        assert!(
            (300..2100).contains(&chose),
            "{chose} selections chose agents"
        );
    }

    /// A heartbeat's running tasks are checked in memory; the lease it asks to
    /// extend is written by the next flush (here the tick: no runtime).
    #[test]
    fn heartbeats_check_tasks_in_memory_and_extensions_are_written_later() {
        use benchlake_core::clock::ManualClock;
        use benchlake_core::lake::Lake;
        const T0: i64 = 1_000_000;
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
        let cfg = crate::config::CoordinatorConfig {
            background: false,
            lease_timeout_ms: 30_000,
            ..Default::default()
        };
        let c = crate::Coordinator::new(
            store,
            Lake::local(dir.path()).unwrap(),
            Arc::new(clock.clone()),
            cfg,
        )
        .unwrap();
        let mut r = Lcg(1);
        let mut a = agent(&mut r, 0);
        a.name = "a1".into();
        let mut mine = task(&mut r, "a1", 1);
        mine.state = TaskState::Running;
        mine.lease_expires_ms = Some(T0 + 10_000); // less than half the lease left
        let mut fresh = task(&mut r, "a1", 2);
        fresh.state = TaskState::Leased;
        fresh.lease_expires_ms = Some(T0 + 20_000);
        let mut other = task(&mut r, "a2", 3);
        other.state = TaskState::Running;
        let mut done = task(&mut r, "a1", 4);
        done.state = TaskState::Done;
        c.store()
            .transact(|tx| {
                tx.upsert_agent(&a)?;
                for t in [&mine, &fresh, &other, &done] {
                    tx.insert_task(t)?;
                }
                Ok(())
            })
            .unwrap();
        let lease = |id: &str| {
            c.store()
                .transact(|tx| tx.get_task(id))
                .unwrap()
                .unwrap()
                .lease_expires_ms
        };
        let ids: Vec<String> = [&mine, &fresh, &other, &done]
            .iter()
            .map(|t| t.task_id.clone())
            .chain(["t99999".to_string()])
            .collect();
        let cancel = c.heartbeat_tasks("a1", &ids, T0).unwrap();
        assert_eq!(
            cancel,
            ids[2..].to_vec(),
            "another agent's, ended and unknown"
        );
        assert_eq!(lease(&mine.task_id), Some(T0 + 10_000), "not written yet");
        c.tick().unwrap();
        assert_eq!(lease(&mine.task_id), Some(T0 + 30_000));
        assert_eq!(
            lease(&fresh.task_id),
            Some(T0 + 20_000),
            "half left: untouched"
        );
        // The index saw the extension: nothing more to queue.
        assert!(c.heartbeat_tasks("a1", &ids[..2], T0).unwrap().is_empty());
        assert!(c.lease_ext.lock().unwrap().is_empty());
    }

    /// Compares 20 random selections; returns how many chose agents.
    fn compare(
        tx: &mut dyn crate::store::Tx,
        r: &mut Lcg,
        agents: &[AgentRow],
    ) -> Result<usize, CoordError> {
        let mut chose = 0;
        for _ in 0..20 {
            let names: Vec<String> = if r.next(4) == 0 {
                (0..1 + r.next(3))
                    .map(|_| format!("ag-{:03}", r.next(60)))
                    .collect()
            } else {
                vec![]
            };
            let s = spec(r, names);
            let exclude: Vec<String> = (0..r.next(3))
                .map(|_| format!("ag-{:03}", r.next(60)))
                .collect();
            let fast = logic::select_agents(tx, &s, &exclude).map_err(|e| e.to_string());
            let slow = logic::select_agents_from_rows(tx, &s, &exclude).map_err(|e| e.to_string());
            assert_eq!(fast, slow, "spec {s:?} exclude {exclude:?}");
            chose += usize::from(fast.is_ok());
            let raw = benchlake_proto::v1::BenchmarkSpec {
                benchmark: s.benchmark.clone(),
                nodes: Some(benchlake_proto::v1::NodeSelector {
                    names: s.nodes.names.clone(),
                    labels: Default::default(),
                    count: s.nodes.count,
                }),
                ..Default::default()
            };
            let cfg = crate::config::CoordinatorConfig::default();
            let fast = logic::validate_spec_tx(&cfg, tx, &raw).map_err(|e| e.to_string());
            let slow = logic::validate_spec(&cfg, agents, &raw).map_err(|e| e.to_string());
            assert_eq!(fast, slow);
        }
        Ok(chose)
    }
}
