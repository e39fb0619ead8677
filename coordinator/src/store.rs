//! Durable state behind the [`StateStore`] trait: one SQLite database (WAL) by
//! default. Every lifecycle transition runs inside one transaction
//! ([`StateStore::transact`]) over the primitive operations of [`Tx`], so a
//! coordinator killed at any point restarts into a consistent state.
//!
//! Each record is stored as JSON next to the columns that queries filter on; the
//! JSON is the truth, the columns are indexes kept in step by every write.
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{CoordError, Result};
use crate::model::*;
use crate::placement::{ActiveTask, Pending, Placement, SharedPlacement, View};

/// Filter of [`Tx::list_runs`].
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub schedule_id: Option<String>,
    pub state: Option<RunState>,
    pub benchmark: Option<String>,
    pub limit: u32,
    /// Only runs whose id sorts before this one (a page cursor: ids are
    /// ULIDs, so older runs).
    pub before: Option<String>,
}

/// The most runs one [`Tx::list_runs`] returns (a `limit` of 0 means 100).
pub const MAX_RUN_PAGE: u32 = 10_000;

impl RunFilter {
    /// The page size: `limit`, 100 when 0, at most [`MAX_RUN_PAGE`].
    pub fn page(&self) -> u32 {
        match self.limit {
            0 => 100,
            n => n.min(MAX_RUN_PAGE),
        }
    }

    /// The query of [`Tx::list_runs`] for both backends: only the filters
    /// given become conditions, so each combination is its own statement
    /// and the planner serves it from an index ending in `run_id`
    /// (`runs_schedule_id`, `runs_state_id`, `runs_benchmark_id`, or the
    /// primary key) and stops after the page, whatever the history's length.
    /// (`?n IS NULL OR col = ?n` in one statement for all combinations made
    /// both backends walk every run newest first, filtering as they went: a
    /// whole-history scan for a schedule or a state with few runs.)
    /// `placeholder(n)` spells the n-th parameter (`?n` or `$n`); returns
    /// the SQL and the text parameters in order, the page size last.
    pub fn sql<'a>(&'a self, placeholder: impl Fn(usize) -> String) -> (String, Vec<&'a str>) {
        let mut conds = Vec::new();
        let mut args: Vec<&'a str> = Vec::new();
        let mut add = |col: &str, op: &str, val: Option<&'a str>| {
            if let Some(val) = val {
                args.push(val);
                conds.push(format!("{col} {op} {}", placeholder(args.len())));
            }
        };
        add("schedule_id", "=", self.schedule_id.as_deref());
        add("state", "=", self.state.map(|s| s.as_str()));
        add("benchmark", "=", self.benchmark.as_deref());
        add("run_id", "<", self.before.as_deref());
        let mut sql = String::from("SELECT data FROM runs");
        if !conds.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conds.join(" AND "));
        }
        sql.push_str(&format!(
            " ORDER BY run_id DESC LIMIT {}",
            placeholder(args.len() + 1)
        ));
        (sql, args)
    }
}

/// Which queue a transaction waits in ([`crate::turns`] orders them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Everything that is not a person waiting for a read.
    Normal,
    /// A read-only request someone is waiting for, or an agent's lease of
    /// a task already queued for it.
    Interactive,
}

/// The primitive operations available inside a transaction.
pub trait Tx {
    fn insert_run(&mut self, r: &RunRow) -> Result<()>;
    fn update_run(&mut self, r: &RunRow) -> Result<()>;
    fn get_run(&mut self, id: &str) -> Result<Option<RunRow>>;
    fn run_by_idempotency_key(&mut self, key: &str) -> Result<Option<RunRow>>;
    fn list_runs(&mut self, f: &RunFilter) -> Result<Vec<RunRow>>;
    /// Runs of a schedule that are not final.
    fn active_runs_of_schedule(&mut self, schedule_id: &str) -> Result<Vec<RunRow>>;
    /// Ids of every run that is not final (recovery, reaping).
    fn unfinished_runs(&mut self) -> Result<Vec<String>>;

    fn insert_task(&mut self, t: &TaskRow) -> Result<()>;
    fn update_task(&mut self, t: &TaskRow) -> Result<()>;
    fn get_task(&mut self, id: &str) -> Result<Option<TaskRow>>;
    fn tasks_of_run(&mut self, run_id: &str) -> Result<Vec<TaskRow>>;
    /// The oldest QUEUED task of `agent` that may start at `now`.
    fn next_task_for_agent(&mut self, agent: &str, now: i64) -> Result<Option<TaskRow>>;
    /// LEASED or RUNNING tasks whose lease ended before `now`.
    fn expired_tasks(&mut self, now: i64) -> Result<Vec<TaskRow>>;
    /// Tasks of `agent` in the given states.
    fn tasks_of_agent(&mut self, agent: &str, states: &[TaskState]) -> Result<Vec<TaskRow>>;

    fn insert_job(&mut self, j: &JobRow) -> Result<()>;
    fn update_job(&mut self, j: &JobRow) -> Result<()>;
    fn get_job(&mut self, id: &str) -> Result<Option<JobRow>>;
    fn jobs_of_run(&mut self, run_id: &str) -> Result<Vec<JobRow>>;
    /// The oldest QUEUED job of one of `kinds` (empty = any) that may start at `now`.
    fn next_job(&mut self, kinds: &[String], now: i64) -> Result<Option<JobRow>>;
    /// LEASED jobs whose lease ended before `now`.
    fn expired_jobs(&mut self, now: i64) -> Result<Vec<JobRow>>;
    /// Number of QUEUED jobs (for metrics and long-poll decisions).
    fn queued_job_count(&mut self) -> Result<u64>;
    /// Runs, tasks and jobs by state, as `(entity, state, count)` with entity
    /// `run`, `task` or `job`, plus `task_due` and `job_due`: QUEUED ones whose
    /// backoff has ended by `now`. One aggregate query (metrics scrapes).
    fn state_counts(&mut self, now: i64) -> Result<Vec<(String, String, u64)>>;
    /// The (first) job of `kind` of a run.
    fn job_of_kind(&mut self, run_id: &str, kind: &str) -> Result<Option<JobRow>>;
    /// Jobs of a run that have not ended, other than `except_kind`.
    fn count_open_jobs(&mut self, run_id: &str, except_kind: &str) -> Result<u64>;
    /// FAILED jobs of a run.
    fn failed_jobs(&mut self, run_id: &str) -> Result<Vec<JobRow>>;

    fn upsert_agent(&mut self, a: &AgentRow) -> Result<()>;
    fn get_agent(&mut self, name: &str) -> Result<Option<AgentRow>>;
    fn list_agents(&mut self) -> Result<Vec<AgentRow>>;

    fn insert_schedule(&mut self, s: &ScheduleRow) -> Result<()>;
    fn update_schedule(&mut self, s: &ScheduleRow) -> Result<()>;
    fn get_schedule(&mut self, id: &str) -> Result<Option<ScheduleRow>>;
    fn schedule_by_name(&mut self, name: &str) -> Result<Option<ScheduleRow>>;
    fn delete_schedule(&mut self, id: &str) -> Result<bool>;
    fn list_schedules(&mut self) -> Result<Vec<ScheduleRow>>;
    /// Unpaused schedules whose next fire time is at or before `now`.
    fn due_schedules(&mut self, now: i64) -> Result<Vec<ScheduleRow>>;

    fn upsert_committed(&mut self, f: &CommittedFile) -> Result<()>;
    fn delete_committed(&mut self, key: &str) -> Result<()>;
    /// Committed files, of one table or all.
    fn committed_files(&mut self, table: Option<&str>) -> Result<Vec<CommittedFile>>;
    /// Per table with committed files: their count, rows and bytes, in
    /// table order (counted by the database, not by listing every file).
    fn table_totals(&mut self) -> Result<Vec<TableTotals>>;
    /// The committed files of one run (every table), in table and key order.
    fn committed_files_of_run(&mut self, run_id: &str) -> Result<Vec<CommittedFile>> {
        let mut v = self.committed_files(None)?;
        v.retain(|f| f.run_id == run_id);
        Ok(v)
    }

    // Job dependencies (see `lifecycle::job` and docs/architecture.md).
    /// Sets a job's group and the group it waits for (columns `grp`, `wait_for`).
    fn set_job_group(
        &mut self,
        job_id: &str,
        group: Option<&str>,
        wait_for: Option<&str>,
    ) -> Result<()>;
    /// A job's `(group, wait_for)`.
    fn job_group(&mut self, job_id: &str) -> Result<(Option<String>, Option<String>)>;
    /// Jobs of a run's group that have not ended (QUEUED or LEASED).
    fn open_jobs_in_group(&mut self, run_id: &str, group: &str) -> Result<u64>;
    /// FAILED or CANCELLED jobs of a run's group.
    fn failed_jobs_in_group(&mut self, run_id: &str, group: &str) -> Result<Vec<JobRow>>;
    /// QUEUED jobs of a run waiting for `group`.
    fn jobs_waiting_for(&mut self, run_id: &str, group: &str) -> Result<Vec<JobRow>>;

    // Coordinator bookkeeping (the `meta` table), e.g. the reconciler's last pass.
    /// A value of the `meta` table.
    fn get_meta(&mut self, key: &str) -> Result<Option<String>>;
    /// Sets a value of the `meta` table.
    fn set_meta(&mut self, key: &str, value: &str) -> Result<()>;

    // Drains benchlake made of Slurm nodes (`crate::node_actions`).
    /// Records (or replaces) the drain of a node.
    fn upsert_node_drain(&mut self, d: &crate::model::NodeDrain) -> Result<()>;
    /// The drain benchlake recorded for a node.
    fn get_node_drain(&mut self, node: &str) -> Result<Option<crate::model::NodeDrain>>;
    /// Forgets the drain of a node; whether there was one.
    fn delete_node_drain(&mut self, node: &str) -> Result<bool>;
    /// Every recorded drain, by node name.
    fn list_node_drains(&mut self) -> Result<Vec<crate::model::NodeDrain>>;

    // Acknowledgements and maintenance windows (`crate::silence`).
    /// Records an acknowledgement.
    fn insert_ack(&mut self, a: &crate::model::Ack) -> Result<()>;
    /// Every acknowledgement on record, by id (oldest first).
    fn list_acks(&mut self) -> Result<Vec<crate::model::Ack>>;
    /// Deletes an acknowledgement; whether there was one.
    fn delete_ack(&mut self, id: &str) -> Result<bool>;
    /// Deletes the acknowledgements that expired before `before_ms`.
    fn prune_acks(&mut self, before_ms: i64) -> Result<u64>;
    /// Records a maintenance window.
    fn insert_maintenance(&mut self, m: &crate::model::Maintenance) -> Result<()>;
    /// Every window on record, by id (oldest first).
    fn list_maintenance(&mut self) -> Result<Vec<crate::model::Maintenance>>;
    /// Deletes a window; whether there was one.
    fn delete_maintenance(&mut self, id: &str) -> Result<bool>;
    /// Deletes the windows that ended before `before_ms`.
    fn prune_maintenance(&mut self, before_ms: i64) -> Result<u64>;

    // The audit trail (`crate::audit`).
    /// Records an action taken.
    fn insert_audit(&mut self, a: &crate::model::AuditRow) -> Result<()>;
    /// The newest `limit` actions recorded before the row `before` (all when
    /// None), newest first.
    fn list_audit(
        &mut self,
        limit: u32,
        before: Option<&str>,
    ) -> Result<Vec<crate::model::AuditRow>>;

    // The notification outbox (`crate::notify`).
    /// Adds an outbox row; nothing when the run already has one for that
    /// notifier.
    fn insert_notification(&mut self, n: &NotificationRow) -> Result<()>;
    /// Writes an outbox row back (by delivery id).
    fn update_notification(&mut self, n: &NotificationRow) -> Result<()>;
    /// PENDING rows due at `now`, the earliest first, at most `limit`.
    fn due_notifications(&mut self, now: i64, limit: u32) -> Result<Vec<NotificationRow>>;
    /// When the earliest PENDING row is due.
    fn next_notification_ms(&mut self) -> Result<Option<i64>>;
    /// The rows of a run, by notifier.
    fn notifications_of_run(&mut self, run_id: &str) -> Result<Vec<NotificationRow>>;
    /// Deletes rows that have ended (not PENDING) whose last attempt was
    /// due before `before_ms`; how many.
    fn prune_notifications(&mut self, before_ms: i64) -> Result<u64>;

    /// The placement index as this transaction sees it (its own writes
    /// included), when the store keeps one; callers fall back to the rows.
    fn placement(&mut self) -> Option<crate::placement::View<'_>> {
        None
    }
}

/// A durable state store.
pub trait StateStore: Send + Sync + 'static {
    /// Runs `f` in one transaction: committed if it returns Ok, rolled back otherwise.
    fn transact_dyn(&self, f: &mut (dyn FnMut(&mut dyn Tx) -> Result<()> + Send)) -> Result<()>;

    /// [`StateStore::transact_dyn`] waiting in the queue of `p`
    /// ([`crate::turns`]); stores without turns ignore it.
    fn transact_dyn_at(
        &self,
        _p: Priority,
        f: &mut (dyn FnMut(&mut dyn Tx) -> Result<()> + Send),
    ) -> Result<()> {
        self.transact_dyn(f)
    }

    /// The in-memory placement index kept equal to the committed rows, when
    /// the store keeps one (see [`crate::placement`]).
    fn placement(&self) -> Option<SharedPlacement> {
        None
    }
}

impl dyn StateStore {
    /// Runs `f` in one transaction and returns its value.
    pub fn transact<T: Send>(&self, f: impl FnOnce(&mut dyn Tx) -> Result<T> + Send) -> Result<T> {
        self.transact_at(Priority::Normal, f)
    }

    /// [`Self::transact`] in the queue of `p` ([`crate::turns`]).
    pub fn transact_at<T: Send>(
        &self,
        p: Priority,
        f: impl FnOnce(&mut dyn Tx) -> Result<T> + Send,
    ) -> Result<T> {
        let mut f = Some(f);
        let mut out = None;
        self.transact_dyn_at(p, &mut |tx| {
            let f = f
                .take()
                .ok_or_else(|| CoordError::Setup("transaction body ran twice".into()))?;
            out = Some(f(tx)?);
            Ok(())
        })?;
        out.ok_or_else(|| CoordError::Setup("transaction produced no value".into()))
    }
}

/// The SQLite store (WAL, one writer connection).
pub struct SqliteStore {
    conn: Mutex<Connection>,
    /// Agents and tasks not ended, in memory; written only at commit, under
    /// `conn`'s lock, so it always equals the committed rows.
    placement: SharedPlacement,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteStore")
    }
}

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, state TEXT NOT NULL, schedule_id TEXT, benchmark TEXT NOT NULL,
  submitted_ms INTEGER NOT NULL, idem_key TEXT UNIQUE, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS runs_state ON runs(state);
CREATE INDEX IF NOT EXISTS runs_schedule ON runs(schedule_id, state);
CREATE TABLE IF NOT EXISTS tasks (
  task_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, agent TEXT NOT NULL, state TEXT NOT NULL,
  not_before_ms INTEGER NOT NULL, lease_expires_ms INTEGER, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS tasks_agent ON tasks(agent, state, not_before_ms);
CREATE INDEX IF NOT EXISTS tasks_run ON tasks(run_id);
CREATE INDEX IF NOT EXISTS tasks_lease ON tasks(state, lease_expires_ms);
CREATE TABLE IF NOT EXISTS jobs (
  job_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL,
  not_before_ms INTEGER NOT NULL, lease_expires_ms INTEGER, created_ms INTEGER NOT NULL,
  data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(state, not_before_ms, created_ms);
CREATE INDEX IF NOT EXISTS jobs_run ON jobs(run_id, state, kind);
CREATE TABLE IF NOT EXISTS agents (name TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS schedules (
  schedule_id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, paused INTEGER NOT NULL,
  next_fire_ms INTEGER, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS committed_files (
  key TEXT PRIMARY KEY, table_name TEXT NOT NULL, run_id TEXT NOT NULL, job_id TEXT NOT NULL,
  date TEXT NOT NULL, rows INTEGER NOT NULL, bytes INTEGER NOT NULL, committed_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS committed_table ON committed_files(table_name, date, run_id);
"#;

/// Migration 4: the notification outbox.
const NOTIFICATIONS_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS notifications (
  delivery_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, notifier TEXT NOT NULL, state TEXT NOT NULL,
  next_ms INTEGER NOT NULL, data TEXT NOT NULL, UNIQUE(run_id, notifier));
CREATE INDEX IF NOT EXISTS notifications_due ON notifications(state, next_ms);
"#;

/// The schema as successive steps; `meta.schema_version` says how many have
/// been applied. Each step is idempotent (a database of release 1 may already
/// have the job-group columns). Never edit a released step: add one.
const MIGRATIONS: &[fn(&Connection) -> Result<()>] = &[
    // 1: the base records.
    |c| Ok(c.execute_batch(SCHEMA)?),
    // 2: job groups.
    migrate_job_groups,
    // 3: a run's committed files by run (the dashboard's run page).
    |c| Ok(c.execute_batch("CREATE INDEX IF NOT EXISTS committed_run ON committed_files(run_id);")?),
    // 4: the notification outbox (`crate::notify`): one row per run and notifier.
    |c| Ok(c.execute_batch(NOTIFICATIONS_SCHEMA)?),
    // The drains benchlake made of Slurm nodes (`crate::node_actions`).
    |c| {
        Ok(c.execute_batch(
            "CREATE TABLE IF NOT EXISTS node_drains (node TEXT PRIMARY KEY, data TEXT NOT NULL);",
        )?)
    },
    // Acknowledgements and maintenance windows (`crate::silence`).
    |c| {
        Ok(c.execute_batch(
            "CREATE TABLE IF NOT EXISTS acknowledgements (id TEXT PRIMARY KEY, expires_ms INTEGER NOT NULL, data TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS maintenance_windows (id TEXT PRIMARY KEY, end_ms INTEGER NOT NULL, data TEXT NOT NULL);",
        )?)
    },
    // The audit trail of actions people took (`crate::audit`).
    |c| {
        Ok(c.execute_batch(
            "CREATE TABLE IF NOT EXISTS audit_log (id TEXT PRIMARY KEY, at_ms INTEGER NOT NULL, data TEXT NOT NULL);",
        )?)
    },
    // A page of runs by schedule, state or benchmark, newest first, read from
    // an index (`RunFilter::sql`), not by walking the whole history.
    |c| Ok(c.execute_batch(RUN_PAGE_INDEXES)?),
    // Where a part's rows are once a `compact` job merged it (`crate::compaction`).
    migrate_merged_parts,
];

/// [`Tx::active_runs_of_schedule`] on SQLite.
pub(crate) const ACTIVE_RUNS_OF_SCHEDULE: &str = "SELECT data FROM runs WHERE schedule_id=?1
 AND state IN ('PENDING','RUNNING','PROCESSING')";

/// [`Tx::table_totals`] on both backends.
pub const TABLE_TOTALS: &str =
    "SELECT table_name, COUNT(DISTINCT COALESCE(object, key)), CAST(COALESCE(SUM(rows), 0) AS BIGINT),
 CAST(COALESCE(SUM(bytes), 0) AS BIGINT)
 FROM committed_files GROUP BY table_name ORDER BY table_name";

/// The indexes of [`RunFilter::sql`] (the same on both backends).
pub const RUN_PAGE_INDEXES: &str = "
CREATE INDEX IF NOT EXISTS runs_schedule_id ON runs(schedule_id, run_id);
CREATE INDEX IF NOT EXISTS runs_state_id ON runs(state, run_id);
CREATE INDEX IF NOT EXISTS runs_benchmark_id ON runs(benchmark, run_id);
";

/// Prepared statements the SQLite connection keeps.
const STATEMENT_CACHE: usize = 128;

/// The schema version this build writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

impl SqliteStore {
    /// How many times the cached statement `sql` has run (tests count the
    /// reads an operation makes; 0 when it never ran).
    #[cfg(test)]
    pub(crate) fn statement_runs(&self, sql: &str) -> i32 {
        let c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        c.prepare_cached(sql)
            .map(|st| st.get_status(rusqlite::StatementStatus::Run))
            .unwrap_or(0)
    }

    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)
                .map_err(|e| CoordError::Setup(format!("cannot create {}: {e}", dir.display())))?;
        }
        // SQLite writes the database and its -wal and -shm files beside each
        // other: say plainly when the directory cannot take them.
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let probe = dir.join(format!(".benchlake-write-test-{}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
        {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
            }
            Err(e) => {
                return Err(CoordError::Setup(format!(
                    "state directory {} is read-only or not writable by this user ({e}): the \
                     coordinator writes its database {} and the -wal and -shm files beside it there",
                    dir.display(),
                    path.display()
                )));
            }
        }
        if path.exists() && std::fs::OpenOptions::new().write(true).open(path).is_err() {
            return Err(CoordError::Setup(format!(
                "state database {} is read-only: the coordinator must write it",
                path.display()
            )));
        }
        let conn = Connection::open(path)?;
        Self::init(conn)
    }

    /// An in-memory database (tests, benchmarks).
    pub fn in_memory() -> Result<Self> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<Self> {
        // First, so the pragmas below wait too: a coordinator restarted while
        // the old process still exits waits for its lock instead of failing.
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // The coordinator owns its state file: EXCLUSIVE locking (set before the
        // first access) keeps the WAL index in heap memory and takes the file lock
        // once instead of per transaction (a measurable share of each lease), and a
        // second coordinator pointed at the same file is refused instead of racing.
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
        // WAL: appends instead of rewriting pages; NORMAL: durable across process
        // crashes (the kill -9 case), fsync at checkpoints only.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // The store has about 80 statements, and a page of runs one per
        // combination of filters (`RunFilter::sql`); rusqlite's cache keeps 16
        // by default, so hot statements were prepared again and again.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        migrate(&conn)?;
        let placement = Arc::new(RwLock::new(load_placement(&conn)?));
        Ok(Self {
            conn: Mutex::new(conn),
            placement,
        })
    }
}

/// Brings the database to [`SCHEMA_VERSION`] in one transaction, refusing a
/// newer one (a downgrade would misread it).
fn migrate(conn: &Connection) -> Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let out = (|| {
        let has_meta: bool = conn.query_row(
            "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type='table' AND name='meta'",
            [],
            |r| r.get(0),
        )?;
        let have: usize = if has_meta {
            let v: Option<String> = conn
                .query_row("SELECT v FROM meta WHERE k='schema_version'", [], |r| {
                    r.get(0)
                })
                .optional()?;
            match v {
                None => 0,
                Some(v) => v.parse().map_err(|_| {
                    CoordError::Setup(format!("state database has schema version '{v}'"))
                })?,
            }
        } else {
            0
        };
        if have > SCHEMA_VERSION {
            return Err(CoordError::Setup(format!(
                "state database has schema version {have}; this build knows up to \
                 {SCHEMA_VERSION}: upgrade benchlake before opening it"
            )));
        }
        for (i, step) in MIGRATIONS.iter().enumerate().skip(have) {
            step(conn)?;
            conn.execute(
                "INSERT INTO meta(k, v) VALUES ('schema_version', ?1)
                 ON CONFLICT(k) DO UPDATE SET v=excluded.v",
                params![(i + 1).to_string()],
            )?;
            if have > 0 {
                tracing::info!(from = have, to = i + 1, "state database schema upgraded");
            }
        }
        Ok(())
    })();
    match out {
        Ok(()) => conn.execute_batch("COMMIT")?,
        Err(_) => {
            let _ = conn.execute_batch("ROLLBACK");
        }
    }
    out
}

/// Builds the placement index from the rows: every agent, every task that
/// has not ended.
fn load_placement(conn: &Connection) -> Result<Placement> {
    let mut agents = Vec::new();
    {
        let mut st = conn.prepare("SELECT data FROM agents")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        for r in rows {
            agents.push(dec::<AgentRow>(r?)?);
        }
    }
    let mut tasks = Vec::new();
    {
        let mut st = conn.prepare(
            "SELECT task_id, agent, state, lease_expires_ms FROM tasks
             WHERE state IN ('QUEUED','LEASED','RUNNING')",
        )?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<i64>>(3)?,
            ))
        })?;
        for r in rows {
            let (id, agent, state, lease) = r?;
            let state = TaskState::parse(&state)
                .ok_or_else(|| CoordError::Setup(format!("task {id}: unknown state {state}")))?;
            tasks.push((
                id,
                ActiveTask {
                    agent,
                    state,
                    lease_expires_ms: lease,
                },
            ));
        }
    }
    Ok(Placement::build(agents, tasks))
}

/// Adds the job-dependency columns and their indexes to a database created
/// before they existed (and to new ones: `SCHEMA` is left as it was). Idempotent.
/// Both indexes are partial, so jobs without a group cost nothing, and the lease
/// query (`jobs_queue`) is untouched: a waiting job is parked with
/// `not_before_ms = PARKED` until its group has ended.
fn migrate_job_groups(conn: &Connection) -> Result<()> {
    let mut have = std::collections::BTreeSet::new();
    {
        let mut st = conn.prepare("PRAGMA table_info(jobs)")?;
        let rows = st.query_map([], |r| r.get::<_, String>(1))?;
        for r in rows {
            have.insert(r?);
        }
    }
    for col in ["grp", "wait_for"] {
        if !have.contains(col) {
            conn.execute_batch(&format!("ALTER TABLE jobs ADD COLUMN {col} TEXT"))?;
        }
    }
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS jobs_group ON jobs(run_id, grp, state) WHERE grp IS NOT NULL;
         CREATE INDEX IF NOT EXISTS jobs_wait ON jobs(run_id, wait_for) WHERE wait_for IS NOT NULL;",
    )?;
    Ok(())
}

/// Migration: `committed_files.object`, `first_group`, `n_groups` (a merged
/// part's place; NULL while the part is its own object).
fn migrate_merged_parts(conn: &Connection) -> Result<()> {
    let mut have = std::collections::BTreeSet::new();
    {
        let mut st = conn.prepare("PRAGMA table_info(committed_files)")?;
        let rows = st.query_map([], |r| r.get::<_, String>(1))?;
        for r in rows {
            have.insert(r?);
        }
    }
    for (col, ty) in [
        ("object", "TEXT"),
        ("first_group", "INTEGER"),
        ("n_groups", "INTEGER"),
    ] {
        if !have.contains(col) {
            conn.execute_batch(&format!(
                "ALTER TABLE committed_files ADD COLUMN {col} {ty}"
            ))?;
        }
    }
    conn.execute_batch(MERGED_INDEX)?;
    Ok(())
}

/// The index of merged files' parts (both backends).
pub const MERGED_INDEX: &str = "CREATE INDEX IF NOT EXISTS committed_object ON committed_files(object) WHERE object IS NOT NULL;";

/// The columns of a [`CommittedFile`] in `committed_files` (both backends).
pub const COMMITTED_COLUMNS: &str = "key, table_name, run_id, job_id, date, rows, bytes, committed_ms, object, first_group, n_groups";

/// A `committed_files` row of [`COMMITTED_COLUMNS`].
fn committed_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<CommittedFile> {
    let object: Option<String> = r.get(8)?;
    Ok(CommittedFile {
        key: r.get(0)?,
        table: r.get(1)?,
        run_id: r.get(2)?,
        job_id: r.get(3)?,
        date: r.get(4)?,
        rows: r.get::<_, i64>(5)? as u64,
        bytes: r.get::<_, i64>(6)? as u64,
        committed_ms: r.get(7)?,
        merged: match object {
            Some(object) => Some(MergedIn {
                object,
                first_group: r.get::<_, Option<i64>>(9)?.unwrap_or(0).max(0) as u64,
                groups: r.get::<_, Option<i64>>(10)?.unwrap_or(0).max(0) as u64,
            }),
            None => None,
        },
    })
}

/// `not_before_ms` of a job that waits for a group: never due, so the lease
/// query skips it with no extra condition.
pub const PARKED: i64 = i64::MAX;

impl StateStore for SqliteStore {
    fn placement(&self) -> Option<SharedPlacement> {
        Some(self.placement.clone())
    }

    fn transact_dyn(&self, f: &mut (dyn FnMut(&mut dyn Tx) -> Result<()> + Send)) -> Result<()> {
        // A poisoned lock only means another thread panicked mid-transaction; that
        // transaction is rolled back below, so the connection is still consistent.
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if !conn.is_autocommit() {
            // Left open by a thread that panicked mid-transaction.
            conn.prepare_cached("ROLLBACK")?.execute([])?;
        }
        // BEGIN/COMMIT as cached statements: `Connection::transaction` re-parses them
        // on every call, which showed up in the lease path's profile.
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        let mut t = SqliteTx {
            c: &conn,
            placement: &self.placement,
            pending: Pending::default(),
        };
        let out = f(&mut t).and_then(|()| {
            conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(())
        });
        if out.is_ok() && !t.pending.is_empty() {
            // Still under the connection's lock: the index follows the commits
            // in their order. A rolled-back transaction's journal is dropped.
            self.placement
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .apply(std::mem::take(&mut t.pending));
        }
        if out.is_err()
            && !conn.is_autocommit()
            && let Err(e) = conn
                .prepare_cached("ROLLBACK")
                .and_then(|mut st| st.execute([]))
        {
            tracing::error!(error = %e, "rollback failed");
        }
        out
    }
}

struct SqliteTx<'a> {
    c: &'a Connection,
    placement: &'a SharedPlacement,
    /// This transaction's changes to the placement index.
    pending: Pending,
}

fn enc<T: serde::Serialize>(v: &T) -> Result<String> {
    Ok(serde_json::to_string(v)?)
}

fn dec<T: serde::de::DeserializeOwned>(s: String) -> Result<T> {
    Ok(serde_json::from_str(&s)?)
}

impl SqliteTx<'_> {
    fn one<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
    ) -> Result<Option<T>> {
        let mut st = self.c.prepare_cached(sql)?;
        let s: Option<String> = st.query_row(p, |r| r.get(0)).optional()?;
        s.map(dec).transpose()
    }
    /// Runs one statement (prepared once per connection); the rows it changed.
    fn exec(&self, sql: &str, p: impl rusqlite::Params) -> Result<usize> {
        Ok(self.c.prepare_cached(sql)?.execute(p)?)
    }

    fn many<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
    ) -> Result<Vec<T>> {
        let mut st = self.c.prepare_cached(sql)?;
        let rows = st.query_map(p, |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(dec(r?)?);
        }
        Ok(out)
    }
}

/// [`Tx::state_counts`] on SQLite (every part is served by an index on `state`).
const STATE_COUNTS_SQLITE: &str = "SELECT 'run', state, COUNT(*) FROM runs GROUP BY state
 UNION ALL SELECT 'task', state, COUNT(*) FROM tasks GROUP BY state
 UNION ALL SELECT 'job', state, COUNT(*) FROM jobs GROUP BY state
 UNION ALL SELECT 'task_due', 'QUEUED', COUNT(*) FROM tasks WHERE state='QUEUED' AND not_before_ms<=?1
 UNION ALL SELECT 'job_due', 'QUEUED', COUNT(*) FROM jobs WHERE state='QUEUED' AND not_before_ms<=?1";

fn states_sql(states: &[TaskState]) -> String {
    states
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(",")
}

impl Tx for SqliteTx<'_> {
    fn insert_run(&mut self, r: &RunRow) -> Result<()> {
        self.exec(
            "INSERT INTO runs(run_id, state, schedule_id, benchmark, submitted_ms, idem_key, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                r.run_id,
                r.state.as_str(),
                r.schedule_id,
                r.benchmark,
                r.submitted_at_ms,
                r.idempotency_key,
                enc(r)?
            ],
        )?;
        Ok(())
    }
    fn update_run(&mut self, r: &RunRow) -> Result<()> {
        self.exec(
            "UPDATE runs SET state=?2, data=?3 WHERE run_id=?1",
            params![r.run_id, r.state.as_str(), enc(r)?],
        )?;
        Ok(())
    }
    fn get_run(&mut self, id: &str) -> Result<Option<RunRow>> {
        self.one("SELECT data FROM runs WHERE run_id=?1", params![id])
    }
    fn run_by_idempotency_key(&mut self, key: &str) -> Result<Option<RunRow>> {
        self.one("SELECT data FROM runs WHERE idem_key=?1", params![key])
    }
    fn list_runs(&mut self, f: &RunFilter) -> Result<Vec<RunRow>> {
        let (sql, args) = f.sql(|n| format!("?{n}"));
        let limit = f.page();
        let mut p: Vec<&dyn rusqlite::ToSql> =
            args.iter().map(|a| a as &dyn rusqlite::ToSql).collect();
        p.push(&limit);
        self.many(&sql, p.as_slice())
    }
    fn active_runs_of_schedule(&mut self, schedule_id: &str) -> Result<Vec<RunRow>> {
        self.many(ACTIVE_RUNS_OF_SCHEDULE, params![schedule_id])
    }
    fn unfinished_runs(&mut self) -> Result<Vec<String>> {
        let mut st = self.c.prepare_cached(
            "SELECT run_id FROM runs WHERE state IN ('PENDING','RUNNING','PROCESSING')
             OR json_extract(data, '$.outcome') IS NOT NULL",
        )?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    fn insert_task(&mut self, t: &TaskRow) -> Result<()> {
        self.exec("INSERT INTO tasks(task_id, run_id, agent, state, not_before_ms, lease_expires_ms, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", params![
                t.task_id,
                t.run_id,
                t.agent,
                t.state.as_str(),
                t.not_before_ms,
                t.lease_expires_ms,
                enc(t)?
            ])?;
        let base = self.placement.read().unwrap_or_else(|p| p.into_inner());
        self.pending.task_written(&base, t);
        Ok(())
    }
    fn update_task(&mut self, t: &TaskRow) -> Result<()> {
        self.exec(
            "UPDATE tasks SET agent=?2, state=?3, not_before_ms=?4, lease_expires_ms=?5, data=?6
                 WHERE task_id=?1",
            params![
                t.task_id,
                t.agent,
                t.state.as_str(),
                t.not_before_ms,
                t.lease_expires_ms,
                enc(t)?
            ],
        )?;
        let base = self.placement.read().unwrap_or_else(|p| p.into_inner());
        self.pending.task_written(&base, t);
        Ok(())
    }
    fn get_task(&mut self, id: &str) -> Result<Option<TaskRow>> {
        self.one("SELECT data FROM tasks WHERE task_id=?1", params![id])
    }
    fn tasks_of_run(&mut self, run_id: &str) -> Result<Vec<TaskRow>> {
        // Sorted here: ordering by json_extract in SQL made SQLite re-prepare the
        // statement on every call.
        let mut tasks: Vec<TaskRow> = self.many(
            "SELECT data FROM tasks WHERE run_id=?1 ORDER BY task_id",
            params![run_id],
        )?;
        tasks.sort_by_key(|t| t.rank);
        Ok(tasks)
    }
    fn next_task_for_agent(&mut self, agent: &str, now: i64) -> Result<Option<TaskRow>> {
        self.one(
            "SELECT data FROM tasks WHERE agent=?1 AND state='QUEUED' AND not_before_ms<=?2
             ORDER BY not_before_ms, task_id LIMIT 1",
            params![agent, now],
        )
    }
    fn expired_tasks(&mut self, now: i64) -> Result<Vec<TaskRow>> {
        self.many(
            "SELECT data FROM tasks WHERE state IN ('LEASED','RUNNING') AND lease_expires_ms<?1",
            params![now],
        )
    }
    fn tasks_of_agent(&mut self, agent: &str, states: &[TaskState]) -> Result<Vec<TaskRow>> {
        self.many(
            &format!(
                "SELECT data FROM tasks WHERE agent=?1 AND state IN ({})",
                states_sql(states)
            ),
            params![agent],
        )
    }

    fn insert_job(&mut self, j: &JobRow) -> Result<()> {
        self.exec("INSERT INTO jobs(job_id, run_id, kind, state, not_before_ms, lease_expires_ms, created_ms, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)", params![
                j.job_id,
                j.run_id,
                j.kind,
                j.state.as_str(),
                j.not_before_ms,
                j.lease_expires_ms,
                j.created_ms,
                enc(j)?
            ])?;
        Ok(())
    }
    fn update_job(&mut self, j: &JobRow) -> Result<()> {
        self.exec("UPDATE jobs SET state=?2, not_before_ms=?3, lease_expires_ms=?4, data=?5 WHERE job_id=?1", params![
                j.job_id,
                j.state.as_str(),
                j.not_before_ms,
                j.lease_expires_ms,
                enc(j)?
            ])?;
        Ok(())
    }
    fn get_job(&mut self, id: &str) -> Result<Option<JobRow>> {
        self.one("SELECT data FROM jobs WHERE job_id=?1", params![id])
    }
    fn jobs_of_run(&mut self, run_id: &str) -> Result<Vec<JobRow>> {
        self.many(
            "SELECT data FROM jobs WHERE run_id=?1 ORDER BY created_ms, job_id",
            params![run_id],
        )
    }
    fn next_job(&mut self, kinds: &[String], now: i64) -> Result<Option<JobRow>> {
        if kinds.is_empty() {
            // Ordered as the jobs_queue index is, so the oldest eligible job comes
            // from an index range scan instead of a sort of the whole queue.
            return self.one(
                "SELECT data FROM jobs WHERE state='QUEUED' AND not_before_ms<=?1
                 ORDER BY not_before_ms, created_ms LIMIT 1",
                params![now],
            );
        }
        // Kinds are validated identifiers; bound as a JSON array to keep one statement.
        let k = enc(&kinds)?;
        self.one(
            "SELECT data FROM jobs WHERE state='QUEUED' AND not_before_ms<=?1
             AND kind IN (SELECT value FROM json_each(?2)) ORDER BY not_before_ms, created_ms LIMIT 1",
            params![now, k],
        )
    }
    fn expired_jobs(&mut self, now: i64) -> Result<Vec<JobRow>> {
        self.many(
            "SELECT data FROM jobs WHERE state='LEASED' AND lease_expires_ms<?1",
            params![now],
        )
    }
    fn queued_job_count(&mut self) -> Result<u64> {
        Ok(self
            .c
            .prepare_cached("SELECT COUNT(*) FROM jobs WHERE state='QUEUED'")?
            .query_row([], |r| r.get::<_, i64>(0))? as u64)
    }

    fn state_counts(&mut self, now: i64) -> Result<Vec<(String, String, u64)>> {
        let mut st = self.c.prepare_cached(STATE_COUNTS_SQLITE)?;
        let rows = st.query_map(params![now], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?.max(0) as u64,
            ))
        })?;
        Ok(rows.collect::<std::result::Result<Vec<_>, _>>()?)
    }

    fn job_of_kind(&mut self, run_id: &str, kind: &str) -> Result<Option<JobRow>> {
        self.one(
            "SELECT data FROM jobs WHERE run_id=?1 AND kind=?2 ORDER BY created_ms, job_id LIMIT 1",
            params![run_id, kind],
        )
    }
    fn count_open_jobs(&mut self, run_id: &str, except_kind: &str) -> Result<u64> {
        Ok(self
            .c
            .prepare_cached(
                "SELECT COUNT(*) FROM jobs WHERE run_id=?1 AND state IN ('QUEUED','LEASED') AND kind<>?2",
            )?
            .query_row(params![run_id, except_kind], |r| r.get::<_, i64>(0))? as u64)
    }
    fn failed_jobs(&mut self, run_id: &str) -> Result<Vec<JobRow>> {
        self.many(
            "SELECT data FROM jobs WHERE run_id=?1 AND state='FAILED' ORDER BY created_ms, job_id",
            params![run_id],
        )
    }

    fn upsert_agent(&mut self, a: &AgentRow) -> Result<()> {
        self.exec(
            "INSERT INTO agents(name, data) VALUES (?1, ?2)
                 ON CONFLICT(name) DO UPDATE SET data=excluded.data",
            params![a.name, enc(a)?],
        )?;
        self.pending.agent_written(a);
        Ok(())
    }
    fn get_agent(&mut self, name: &str) -> Result<Option<AgentRow>> {
        self.one("SELECT data FROM agents WHERE name=?1", params![name])
    }
    fn list_agents(&mut self) -> Result<Vec<AgentRow>> {
        self.many("SELECT data FROM agents ORDER BY name", [])
    }

    fn insert_schedule(&mut self, s: &ScheduleRow) -> Result<()> {
        self.exec(
            "INSERT INTO schedules(schedule_id, name, paused, next_fire_ms, data)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            params![s.schedule_id, s.name, s.paused, s.next_fire_ms, enc(s)?],
        )?;
        Ok(())
    }
    fn update_schedule(&mut self, s: &ScheduleRow) -> Result<()> {
        self.exec("UPDATE schedules SET name=?2, paused=?3, next_fire_ms=?4, data=?5 WHERE schedule_id=?1", params![
                s.schedule_id,
                s.name,
                s.paused,
                s.next_fire_ms,
                enc(s)?
            ])?;
        Ok(())
    }
    fn get_schedule(&mut self, id: &str) -> Result<Option<ScheduleRow>> {
        self.one(
            "SELECT data FROM schedules WHERE schedule_id=?1",
            params![id],
        )
    }
    fn schedule_by_name(&mut self, name: &str) -> Result<Option<ScheduleRow>> {
        self.one("SELECT data FROM schedules WHERE name=?1", params![name])
    }
    fn delete_schedule(&mut self, id: &str) -> Result<bool> {
        Ok(self.exec("DELETE FROM schedules WHERE schedule_id=?1", params![id])? > 0)
    }
    fn list_schedules(&mut self) -> Result<Vec<ScheduleRow>> {
        self.many("SELECT data FROM schedules ORDER BY name", [])
    }
    fn due_schedules(&mut self, now: i64) -> Result<Vec<ScheduleRow>> {
        self.many(
            "SELECT data FROM schedules WHERE paused=0 AND next_fire_ms IS NOT NULL AND next_fire_ms<=?1
             ORDER BY next_fire_ms",
            params![now],
        )
    }

    fn upsert_committed(&mut self, f: &CommittedFile) -> Result<()> {
        let m = f.merged.as_ref();
        self.exec("INSERT INTO committed_files(key, table_name, run_id, job_id, date, rows, bytes, committed_ms,
                 object, first_group, n_groups)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT(key) DO UPDATE SET rows=excluded.rows, bytes=excluded.bytes,
                 committed_ms=excluded.committed_ms, object=excluded.object,
                 first_group=excluded.first_group, n_groups=excluded.n_groups", params![
                f.key,
                f.table,
                f.run_id,
                f.job_id,
                f.date,
                f.rows as i64,
                f.bytes as i64,
                f.committed_ms,
                m.map(|m| m.object.as_str()),
                m.map(|m| m.first_group as i64),
                m.map(|m| m.groups as i64),
            ])?;
        Ok(())
    }
    fn delete_committed(&mut self, key: &str) -> Result<()> {
        self.exec("DELETE FROM committed_files WHERE key=?1", params![key])?;
        Ok(())
    }
    fn committed_files(&mut self, table: Option<&str>) -> Result<Vec<CommittedFile>> {
        let mut st = self.c.prepare_cached(&format!(
            "SELECT {COMMITTED_COLUMNS}
             FROM committed_files WHERE (?1 IS NULL OR table_name=?1) ORDER BY table_name, date, run_id, key",
        ))?;
        let rows = st.query_map(params![table], committed_row)?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }
    fn table_totals(&mut self) -> Result<Vec<TableTotals>> {
        let mut st = self.c.prepare_cached(TABLE_TOTALS)?;
        let rows = st.query_map([], |r| {
            Ok(TableTotals {
                table: r.get(0)?,
                files: r.get::<_, i64>(1)?.max(0) as u64,
                rows: r.get::<_, i64>(2)?.max(0) as u64,
                bytes: r.get::<_, i64>(3)?.max(0) as u64,
            })
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }
    fn committed_files_of_run(&mut self, run_id: &str) -> Result<Vec<CommittedFile>> {
        let mut st = self.c.prepare_cached(&format!(
            "SELECT {COMMITTED_COLUMNS}
             FROM committed_files WHERE run_id=?1 ORDER BY table_name, key",
        ))?;
        let rows = st.query_map(params![run_id], committed_row)?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }
    fn set_job_group(
        &mut self,
        job_id: &str,
        group: Option<&str>,
        wait_for: Option<&str>,
    ) -> Result<()> {
        self.exec(
            "UPDATE jobs SET grp=?2, wait_for=?3 WHERE job_id=?1",
            params![job_id, group, wait_for],
        )?;
        Ok(())
    }
    fn job_group(&mut self, job_id: &str) -> Result<(Option<String>, Option<String>)> {
        Ok(self
            .c
            .prepare_cached("SELECT grp, wait_for FROM jobs WHERE job_id=?1")?
            .query_row(params![job_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?
            .unwrap_or((None, None)))
    }
    fn open_jobs_in_group(&mut self, run_id: &str, group: &str) -> Result<u64> {
        Ok(self
            .c
            .prepare_cached(
                "SELECT COUNT(*) FROM jobs WHERE run_id=?1 AND grp=?2 AND state IN ('QUEUED','LEASED')",
            )?
            .query_row(params![run_id, group], |r| r.get::<_, i64>(0))? as u64)
    }
    fn failed_jobs_in_group(&mut self, run_id: &str, group: &str) -> Result<Vec<JobRow>> {
        self.many(
            "SELECT data FROM jobs WHERE run_id=?1 AND grp=?2 AND state IN ('FAILED','CANCELLED')
             ORDER BY created_ms, job_id",
            params![run_id, group],
        )
    }
    fn jobs_waiting_for(&mut self, run_id: &str, group: &str) -> Result<Vec<JobRow>> {
        self.many(
            "SELECT data FROM jobs WHERE run_id=?1 AND wait_for=?2 AND state='QUEUED'
             ORDER BY created_ms, job_id",
            params![run_id, group],
        )
    }
    fn get_meta(&mut self, key: &str) -> Result<Option<String>> {
        Ok(self
            .c
            .prepare_cached("SELECT v FROM meta WHERE k=?1")?
            .query_row(params![key], |r| r.get(0))
            .optional()?)
    }
    fn set_meta(&mut self, key: &str, value: &str) -> Result<()> {
        self.exec(
            "INSERT INTO meta(k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v=excluded.v",
            params![key, value],
        )?;
        Ok(())
    }

    fn upsert_node_drain(&mut self, d: &crate::model::NodeDrain) -> Result<()> {
        self.exec(
            "INSERT INTO node_drains(node, data) VALUES (?1, ?2)
                 ON CONFLICT(node) DO UPDATE SET data=excluded.data",
            params![d.node, enc(d)?],
        )?;
        Ok(())
    }
    fn get_node_drain(&mut self, node: &str) -> Result<Option<crate::model::NodeDrain>> {
        self.one("SELECT data FROM node_drains WHERE node=?1", params![node])
    }
    fn delete_node_drain(&mut self, node: &str) -> Result<bool> {
        Ok(self.exec("DELETE FROM node_drains WHERE node=?1", params![node])? > 0)
    }
    fn list_node_drains(&mut self) -> Result<Vec<crate::model::NodeDrain>> {
        self.many("SELECT data FROM node_drains ORDER BY node", [])
    }

    fn insert_ack(&mut self, a: &crate::model::Ack) -> Result<()> {
        self.exec(
            "INSERT INTO acknowledgements(id, expires_ms, data) VALUES (?1, ?2, ?3)",
            params![a.id, a.expires_ms, enc(a)?],
        )?;
        Ok(())
    }
    fn list_acks(&mut self) -> Result<Vec<crate::model::Ack>> {
        self.many("SELECT data FROM acknowledgements ORDER BY id", [])
    }
    fn delete_ack(&mut self, id: &str) -> Result<bool> {
        Ok(self.exec("DELETE FROM acknowledgements WHERE id=?1", params![id])? > 0)
    }
    fn prune_acks(&mut self, before_ms: i64) -> Result<u64> {
        Ok(self.exec(
            "DELETE FROM acknowledgements WHERE expires_ms < ?1",
            params![before_ms],
        )? as u64)
    }
    fn insert_maintenance(&mut self, m: &crate::model::Maintenance) -> Result<()> {
        self.exec(
            "INSERT INTO maintenance_windows(id, end_ms, data) VALUES (?1, ?2, ?3)",
            params![m.id, m.end_ms, enc(m)?],
        )?;
        Ok(())
    }
    fn list_maintenance(&mut self) -> Result<Vec<crate::model::Maintenance>> {
        self.many("SELECT data FROM maintenance_windows ORDER BY id", [])
    }
    fn delete_maintenance(&mut self, id: &str) -> Result<bool> {
        Ok(self.exec("DELETE FROM maintenance_windows WHERE id=?1", params![id])? > 0)
    }
    fn prune_maintenance(&mut self, before_ms: i64) -> Result<u64> {
        Ok(self.exec(
            "DELETE FROM maintenance_windows WHERE end_ms < ?1",
            params![before_ms],
        )? as u64)
    }

    fn insert_audit(&mut self, a: &crate::model::AuditRow) -> Result<()> {
        self.exec(
            "INSERT INTO audit_log(id, at_ms, data) VALUES (?1, ?2, ?3)",
            params![a.id, a.at_ms, enc(a)?],
        )?;
        Ok(())
    }
    fn list_audit(
        &mut self,
        limit: u32,
        before: Option<&str>,
    ) -> Result<Vec<crate::model::AuditRow>> {
        match before {
            Some(b) => self.many(
                "SELECT data FROM audit_log WHERE id < ?1 ORDER BY id DESC LIMIT ?2",
                params![b, limit],
            ),
            None => self.many(
                "SELECT data FROM audit_log ORDER BY id DESC LIMIT ?1",
                params![limit],
            ),
        }
    }

    fn insert_notification(&mut self, n: &NotificationRow) -> Result<()> {
        self.exec(
            "INSERT INTO notifications(delivery_id, run_id, notifier, state, next_ms, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(run_id, notifier) DO NOTHING",
            params![
                n.delivery_id,
                n.run_id,
                n.notifier,
                n.state.as_str(),
                n.next_ms,
                enc(n)?
            ],
        )?;
        Ok(())
    }
    fn update_notification(&mut self, n: &NotificationRow) -> Result<()> {
        self.exec(
            "UPDATE notifications SET state=?2, next_ms=?3, data=?4 WHERE delivery_id=?1",
            params![n.delivery_id, n.state.as_str(), n.next_ms, enc(n)?],
        )?;
        Ok(())
    }
    fn due_notifications(&mut self, now: i64, limit: u32) -> Result<Vec<NotificationRow>> {
        self.many(
            "SELECT data FROM notifications WHERE state='PENDING' AND next_ms<=?1
             ORDER BY next_ms, delivery_id LIMIT ?2",
            params![now, limit],
        )
    }
    fn next_notification_ms(&mut self) -> Result<Option<i64>> {
        Ok(self
            .c
            .prepare_cached("SELECT MIN(next_ms) FROM notifications WHERE state='PENDING'")?
            .query_row([], |r| r.get::<_, Option<i64>>(0))?)
    }
    fn notifications_of_run(&mut self, run_id: &str) -> Result<Vec<NotificationRow>> {
        self.many(
            "SELECT data FROM notifications WHERE run_id=?1 ORDER BY notifier",
            params![run_id],
        )
    }
    fn prune_notifications(&mut self, before_ms: i64) -> Result<u64> {
        Ok(self.exec(
            "DELETE FROM notifications WHERE state<>'PENDING' AND next_ms<?1",
            params![before_ms],
        )? as u64)
    }

    fn placement(&mut self) -> Option<View<'_>> {
        Some(View {
            base: self.placement.read().unwrap_or_else(|p| p.into_inner()),
            pending: &self.pending,
        })
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
