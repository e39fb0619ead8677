//! The PostgreSQL state backend: the same records, columns and transitions as
//! the SQLite store ([`crate::store`]), behind the same [`Tx`] operations, for
//! sites that want a real database and standby coordinators ([`crate::leader`]).
//!
//! One connection carries every transaction of a coordinator, one at a time
//! (as with SQLite): the leader is the only writer, so serial transactions
//! need no retry loop and the placement index follows the commits in order.
//! Each transaction runs off the async threads ([`off_runtime`]) because every
//! statement is a network round trip.
//!
//! Round trips: a transaction's writes are not sent when made but queued, and
//! go out in one flight with its next read or with its COMMIT, after `BEGIN`
//! and the fence check ([`PgTx::flight`]); nothing reads a write's outcome but
//! its error, which fails the transaction as before.
//!
//! Fencing: once this coordinator leads, a transaction's first write is
//! preceded by `benchlake_fence(holder, token)`, which locks the leader row
//! `FOR SHARE` and raises an error (aborting the transaction, writes and
//! COMMIT of the same flight included) when the row's token is no longer
//! ours ([`CoordError::Fenced`]). A takeover must update that row, so it waits
//! for our open transaction and every later one of ours fails: a late write
//! of an old leader never lands.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row, Statement};

use crate::error::{CoordError, Result};
use crate::model::*;
use crate::placement::{ActiveTask, Pending, Placement, SharedPlacement, View};
use crate::store::{RunFilter, StateStore, Tx};

/// The schema as successive versions; `meta.schema_version` says how many
/// have been applied. Never edit a released step: add one.
const MIGRATIONS: &[&str] = &[
    // 1: the records of the SQLite store, job groups included, and the leader row.
    // Identifiers compare bytewise (COLLATE "C") as in SQLite, whatever the
    // database's locale, so both backends list in the same order.
    r#"
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE runs (
  run_id TEXT COLLATE "C" PRIMARY KEY, state TEXT NOT NULL, schedule_id TEXT COLLATE "C", benchmark TEXT NOT NULL,
  submitted_ms BIGINT NOT NULL, idem_key TEXT COLLATE "C" UNIQUE, data TEXT NOT NULL);
CREATE INDEX runs_state ON runs(state);
CREATE INDEX runs_schedule ON runs(schedule_id, state);
CREATE TABLE tasks (
  task_id TEXT COLLATE "C" PRIMARY KEY, run_id TEXT COLLATE "C" NOT NULL, agent TEXT COLLATE "C" NOT NULL, state TEXT NOT NULL,
  not_before_ms BIGINT NOT NULL, lease_expires_ms BIGINT, data TEXT NOT NULL);
CREATE INDEX tasks_agent ON tasks(agent, state, not_before_ms);
CREATE INDEX tasks_run ON tasks(run_id);
CREATE INDEX tasks_lease ON tasks(state, lease_expires_ms);
CREATE TABLE jobs (
  job_id TEXT COLLATE "C" PRIMARY KEY, run_id TEXT COLLATE "C" NOT NULL, kind TEXT COLLATE "C" NOT NULL, state TEXT NOT NULL,
  not_before_ms BIGINT NOT NULL, lease_expires_ms BIGINT, created_ms BIGINT NOT NULL,
  data TEXT NOT NULL, grp TEXT, wait_for TEXT);
CREATE INDEX jobs_queue ON jobs(state, not_before_ms, created_ms);
CREATE INDEX jobs_run ON jobs(run_id, state, kind);
CREATE INDEX jobs_group ON jobs(run_id, grp, state) WHERE grp IS NOT NULL;
CREATE INDEX jobs_wait ON jobs(run_id, wait_for) WHERE wait_for IS NOT NULL;
CREATE TABLE agents (name TEXT COLLATE "C" PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE schedules (
  schedule_id TEXT COLLATE "C" PRIMARY KEY, name TEXT COLLATE "C" NOT NULL UNIQUE, paused BOOLEAN NOT NULL,
  next_fire_ms BIGINT, data TEXT NOT NULL);
CREATE TABLE committed_files (
  key TEXT COLLATE "C" PRIMARY KEY, table_name TEXT COLLATE "C" NOT NULL, run_id TEXT COLLATE "C" NOT NULL, job_id TEXT COLLATE "C" NOT NULL,
  date TEXT COLLATE "C" NOT NULL, rows BIGINT NOT NULL, bytes BIGINT NOT NULL, committed_ms BIGINT NOT NULL);
CREATE INDEX committed_table ON committed_files(table_name, date, run_id);
CREATE TABLE leader (
  id INTEGER PRIMARY KEY CHECK (id = 1), holder TEXT NOT NULL, token BIGINT NOT NULL,
  expires_ms BIGINT NOT NULL);
INSERT INTO leader(id, holder, token, expires_ms) VALUES (1, '', 0, 0);
"#,
    // 2: the fence check as a statement that fails, so the writes and the
    // COMMIT sent in the same flight as it are rolled back by the server
    // itself when this coordinator no longer leads (a SELECT that returned
    // the row would let them commit before the client read it).
    r#"
CREATE OR REPLACE FUNCTION benchlake_fence(h TEXT, t BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE cur_h TEXT; cur_t BIGINT;
BEGIN
  SELECT holder, token INTO cur_h, cur_t FROM leader WHERE id = 1 FOR SHARE;
  IF cur_h IS DISTINCT FROM h OR cur_t IS DISTINCT FROM t THEN
    RAISE EXCEPTION 'the state database''s fencing token is % (held by %), not %', cur_t, cur_h, t
      USING ERRCODE = 'BLF01';
  END IF;
  RETURN t;
END $$;
"#,
    // 3: the notification outbox (`crate::notify`): one row per run and notifier.
    r#"
CREATE TABLE IF NOT EXISTS notifications (
  delivery_id TEXT COLLATE "C" PRIMARY KEY, run_id TEXT COLLATE "C" NOT NULL,
  notifier TEXT COLLATE "C" NOT NULL, state TEXT NOT NULL, next_ms BIGINT NOT NULL,
  data TEXT NOT NULL, UNIQUE (run_id, notifier));
CREATE INDEX IF NOT EXISTS notifications_due ON notifications(state, next_ms);
"#,
    // The drains benchlake made of Slurm nodes (`crate::node_actions`).
    r#"
CREATE TABLE IF NOT EXISTS node_drains (node TEXT COLLATE "C" PRIMARY KEY, data TEXT NOT NULL);
"#,
    // Acknowledgements and maintenance windows (`crate::silence`).
    r#"
CREATE TABLE IF NOT EXISTS acknowledgements (
  id TEXT COLLATE "C" PRIMARY KEY, expires_ms BIGINT NOT NULL, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS maintenance_windows (
  id TEXT COLLATE "C" PRIMARY KEY, end_ms BIGINT NOT NULL, data TEXT NOT NULL);
"#,
    // The audit trail of actions people took (`crate::audit`).
    r#"
CREATE TABLE IF NOT EXISTS audit_log (
  id TEXT COLLATE "C" PRIMARY KEY, at_ms BIGINT NOT NULL, data TEXT NOT NULL);
"#,
    // A page of runs by schedule, state or benchmark, newest first, from an
    // index (`RunFilter::sql`).
    crate::store::RUN_PAGE_INDEXES,
    // Where a part's rows are once a `compact` job merged it (`crate::compaction`).
    r#"
ALTER TABLE committed_files ADD COLUMN IF NOT EXISTS object TEXT COLLATE "C";
ALTER TABLE committed_files ADD COLUMN IF NOT EXISTS first_group BIGINT;
ALTER TABLE committed_files ADD COLUMN IF NOT EXISTS n_groups BIGINT;
CREATE INDEX IF NOT EXISTS committed_object ON committed_files(object) WHERE object IS NOT NULL;
"#,
];

/// A `committed_files` row of [`crate::store::COMMITTED_COLUMNS`].
fn committed_row(r: &Row) -> CommittedFile {
    let object: Option<String> = r.get(8);
    CommittedFile {
        key: r.get(0),
        table: r.get(1),
        run_id: r.get(2),
        job_id: r.get(3),
        date: r.get(4),
        rows: r.get::<_, i64>(5).max(0) as u64,
        bytes: r.get::<_, i64>(6).max(0) as u64,
        committed_ms: r.get(7),
        merged: object.map(|object| MergedIn {
            object,
            first_group: r.get::<_, Option<i64>>(9).unwrap_or(0).max(0) as u64,
            groups: r.get::<_, Option<i64>>(10).unwrap_or(0).max(0) as u64,
        }),
    }
}

/// Key of the advisory lock that serialises schema upgrades of coordinators
/// starting together ("bench" in ASCII).
const MIGRATION_LOCK: i64 = 0x0062_656e_6368;

/// The URL with any password replaced, for logs and errors.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Whether `state` names a PostgreSQL database rather than a SQLite file.
pub fn is_postgres_url(state: &str) -> bool {
    state.starts_with("postgres://") || state.starts_with("postgresql://")
}

/// A blocking connection: tokio-postgres whose connection is driven by the
/// calling thread itself (a current-thread runtime of its own, as the
/// `postgres` crate does), so a statement costs one network round trip and no
/// hand-off between threads. Callers on a Tokio worker run inside
/// `block_in_place` (which leaves the runtime's context, so a nested
/// `block_on` is allowed); on a current-thread runtime (tests) each call runs
/// on a scoped thread of its own.
pub(crate) struct Client {
    client: tokio_postgres::Client,
    connection: std::sync::Mutex<Option<ConnFuture>>,
    rt: Option<tokio::runtime::Runtime>,
}

type ConnFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

impl Drop for Client {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which Tokio forbids on its workers.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs `f` to completion on this thread, or on a scoped thread where this
/// one may not block on a runtime.
fn on_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Err(_) => f(),
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        Ok(_) => std::thread::scope(|s| match s.spawn(f).join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }),
    }
}

impl Client {
    /// Awaits `f` while driving the connection. One caller at a time (the
    /// store's lock, or the elector's own): a second would find no
    /// connection to drive.
    fn wait<T: Send>(&self, f: impl std::future::Future<Output = T> + Send) -> T {
        on_thread(|| {
            let Some(rt) = self.rt.as_ref() else {
                unreachable_runtime()
            };
            let mut conn = self
                .connection
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            let out = rt.block_on(async {
                let mut f = std::pin::pin!(f);
                loop {
                    let Some(c) = conn.as_mut() else {
                        // The connection ended: the client's calls fail on
                        // their own with "connection closed".
                        return f.await;
                    };
                    tokio::select! {
                        biased;
                        v = &mut f => return v,
                        r = c => {
                            if let Err(e) = r {
                                tracing::warn!(error = %e, "state database connection ended");
                            }
                            conn = None;
                        }
                    }
                }
            });
            *self.connection.lock().unwrap_or_else(|p| p.into_inner()) = conn;
            out
        })
    }
}

#[cold]
fn unreachable_runtime() -> ! {
    // `rt` is only taken in Drop.
    panic!("state database client used after drop")
}

impl Client {
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
    pub(crate) fn prepare(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        self.wait(self.client.prepare(sql))
    }
    pub(crate) fn query_sql(
        &self,
        sql: &str,
        p: &[P<'_>],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.wait(self.client.query(sql, p))
    }
    pub(crate) fn batch_execute(&self, sql: &str) -> Result<(), tokio_postgres::Error> {
        self.wait(self.client.batch_execute(sql))
    }
}

/// Opens a connection with the settings every coordinator connection uses.
pub(crate) fn connect(url: &str) -> Result<Client> {
    connect_with(url, &[])
}

/// [`connect`] with server settings for this session (`-c name=value`).
pub(crate) fn connect_with(url: &str, settings: &[(&str, String)]) -> Result<Client> {
    let mut cfg: tokio_postgres::Config = url
        .parse()
        .map_err(|e| CoordError::Setup(format!("state database URL '{}': {e}", redact(url))))?;
    cfg.application_name("benchlake-coordinator")
        .connect_timeout(std::time::Duration::from_secs(5));
    if !settings.is_empty() {
        let opts: Vec<String> = settings
            .iter()
            .map(|(k, v)| format!("-c {k}={v}"))
            .collect();
        cfg.options(opts.join(" "));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CoordError::Setup(format!("state database runtime: {e}")))?;
    let connected = on_thread(|| rt.block_on(cfg.connect(NoTls)));
    match connected {
        Ok((client, connection)) => Ok(Client {
            client,
            connection: std::sync::Mutex::new(Some(Box::pin(connection))),
            rt: Some(rt),
        }),
        Err(e) => {
            rt.shutdown_background();
            Err(CoordError::Store {
                message: format!(
                    "cannot connect to state database {}: {}",
                    redact(url),
                    benchlake_proto::client::error_chain(&e)
                ),
                retryable: true,
            })
        }
    }
}

/// A connection and its prepared statements.
struct Conn {
    client: Client,
    stmts: HashMap<String, Statement>,
}

/// Who this coordinator is while it leads, and its fencing token.
#[derive(Debug, Clone)]
pub struct Fence {
    pub holder: String,
    pub token: i64,
}

/// How the store's connection behaves.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// The server ends the connection when this coordinator leaves a
    /// transaction open this long (ms): a frozen process would otherwise hold
    /// the leader row's lock and keep a standby from taking over. The
    /// coordinator passes its leader lease.
    pub stall_ms: u64,
    /// Wait for the WAL flush at every commit. Off (the default), a commit
    /// returns once PostgreSQL has it in memory: durable across coordinator
    /// crashes and failovers (the server keeps it), while a crash of the
    /// database server itself may lose its last fraction of a second of
    /// transitions (never corrupts them) — the same trade SQLite's
    /// `synchronous=NORMAL` makes, and what lets one connection reach the
    /// lease rate of a large machine. On: every commit waits for an fsync.
    pub synchronous_commit: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            stall_ms: 5_000,
            synchronous_commit: false,
        }
    }
}

/// The PostgreSQL store.
pub struct PgStore {
    url: String,
    /// Server settings of the store's connection.
    settings: Vec<(&'static str, String)>,
    conn: Mutex<Option<Conn>>,
    placement: SharedPlacement,
    fence: RwLock<Option<Fence>>,
    /// The thread that runs transactions asked for from async code.
    thread: rayon_core::ThreadPool,
    /// Signalled when a transaction was refused for a stale token: the
    /// coordinator stops serving at once instead of at its next renewal.
    fenced: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgStore({})", redact(&self.url))
    }
}

impl PgStore {
    /// Connects, upgrades the schema to this build's version (refusing a
    /// newer one) and loads the placement index.
    pub fn open(url: &str) -> Result<Self> {
        Self::open_with(url, &PgOptions::default())
    }

    /// [`PgStore::open`] with `opts`.
    pub fn open_with(url: &str, opts: &PgOptions) -> Result<Self> {
        let settings = vec![
            (
                "idle_in_transaction_session_timeout",
                opts.stall_ms.max(100).to_string(),
            ),
            (
                "synchronous_commit",
                if opts.synchronous_commit { "on" } else { "off" }.to_string(),
            ),
        ];
        let client = connect_with(url, &settings)?;
        migrate(&client)?;
        let placement = Arc::new(RwLock::new(load_placement(&client)?));
        Ok(Self {
            url: url.to_string(),
            settings,
            conn: Mutex::new(Some(Conn {
                client,
                stmts: HashMap::new(),
            })),
            placement,
            fence: RwLock::new(None),
            fenced: Arc::new(tokio::sync::Notify::new()),
            thread: rayon_core::ThreadPoolBuilder::new()
                .num_threads(1)
                .thread_name(|_| "benchlake-pg".into())
                .build()
                .map_err(|e| CoordError::Setup(format!("state database thread: {e}")))?,
        })
    }

    /// From now on every transaction checks that `fence` still holds the
    /// leader row ([`crate::leader`]).
    pub fn set_fence(&self, fence: Fence) {
        *self.fence.write().unwrap_or_else(|p| p.into_inner()) = Some(fence);
    }

    /// Resolves once a transaction was refused for a stale fencing token.
    pub fn fenced(&self) -> Arc<tokio::sync::Notify> {
        self.fenced.clone()
    }

    /// Reloads the placement index from the rows (a new leader's first step:
    /// the previous leader wrote them).
    pub fn reload_placement(&self) -> Result<()> {
        let mut g = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let conn = self.conn_of(&mut g)?;
        let p = load_placement(&conn.client)?;
        *self.placement.write().unwrap_or_else(|p| p.into_inner()) = p;
        Ok(())
    }

    fn conn_of<'a>(&self, g: &'a mut Option<Conn>) -> Result<&'a mut Conn> {
        // A connection the server closed (restart, failover of the database)
        // is replaced before the next transaction; its statements with it.
        if g.as_ref().is_none_or(|c| c.client.is_closed()) {
            *g = Some(Conn {
                client: connect_with(&self.url, &self.settings)?,
                stmts: HashMap::new(),
            });
        }
        g.as_mut()
            .ok_or_else(|| CoordError::Setup("no state database connection".into()))
    }

    fn transact_blocking(
        &self,
        f: &mut (dyn FnMut(&mut dyn Tx) -> Result<()> + Send),
    ) -> Result<()> {
        let fence = self.fence.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut g = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let conn = self.conn_of(&mut g)?;
        // BEGIN goes out with the first statement and the fence check with
        // the first write (see `PgTx::prelude`): a transaction costs no
        // round trip of its own besides COMMIT.
        let mut t = PgTx {
            conn,
            placement: &self.placement,
            pending: Pending::default(),
            fence: fence.as_ref(),
            fenced: &self.fenced,
            begun: false,
            fence_checked: false,
            queued: Vec::new(),
            aborted: false,
            runs: HashMap::new(),
            groups: HashMap::new(),
        };
        let out = f(&mut t).and_then(|()| t.commit());
        match &out {
            Ok(()) => {
                if !t.pending.is_empty() {
                    // Still under the connection's lock: the index follows
                    // the commits in their order.
                    self.placement
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .apply(std::mem::take(&mut t.pending));
                }
            }
            Err(_) if t.begun => {
                if let Err(e) = t.conn.client.batch_execute("ROLLBACK") {
                    // The connection is unusable: drop it, the next
                    // transaction reconnects.
                    tracing::warn!(error = %e, "rollback failed; reconnecting");
                    *g = None;
                }
            }
            Err(_) => {}
        }
        out
    }
}

impl StateStore for PgStore {
    fn placement(&self) -> Option<SharedPlacement> {
        Some(self.placement.clone())
    }

    fn transact_dyn(&self, f: &mut (dyn FnMut(&mut dyn Tx) -> Result<()> + Send)) -> Result<()> {
        use tokio::runtime::Handle;
        match Handle::try_current() {
            Err(_) => self.transact_blocking(f),
            // On a runtime's thread the connection may not be driven here
            // (runtimes do not nest, and `block_in_place` stalls the worker's
            // other tasks for milliseconds): the store's own thread runs the
            // transaction while this one waits, as it would for SQLite's lock.
            Ok(_) => self.thread.install(|| self.transact_blocking(f)),
        }
    }
}

/// Applies the migrations this database lacks, under an advisory lock so
/// coordinators starting together upgrade it once.
fn migrate(client: &Client) -> Result<()> {
    client.batch_execute("BEGIN")?;
    let out = migrate_in(client);
    match &out {
        Ok(()) => client.batch_execute("COMMIT")?,
        Err(_) => {
            let _ = client.batch_execute("ROLLBACK");
        }
    }
    out
}

fn migrate_in(client: &Client) -> Result<()> {
    client.query_sql("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    let has_meta: bool = client
        .query_sql("SELECT to_regclass('meta') IS NOT NULL", &[])?
        .first()
        .is_some_and(|r| r.get(0));
    let mut have: usize = 0;
    if has_meta
        && let Some(r) = client
            .query_sql("SELECT v FROM meta WHERE k = 'schema_version'", &[])?
            .first()
    {
        let v: String = r.get(0);
        have = v
            .parse()
            .map_err(|_| CoordError::Setup(format!("state database has schema version '{v}'")))?;
    }
    if have > MIGRATIONS.len() {
        return Err(CoordError::Setup(format!(
            "state database has schema version {have}; this build knows up to {}: \
             upgrade benchlake before pointing it at this database",
            MIGRATIONS.len()
        )));
    }
    for (i, m) in MIGRATIONS.iter().enumerate().skip(have) {
        client.batch_execute(m)?;
        client.query_sql(
            "INSERT INTO meta(k, v) VALUES ('schema_version', $1)
             ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            &[&(i + 1).to_string()],
        )?;
        tracing::info!(version = i + 1, "state database schema upgraded");
    }
    Ok(())
}

/// The schema version this build writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

fn load_placement(client: &Client) -> Result<Placement> {
    let mut agents = Vec::new();
    for r in client.query_sql("SELECT data FROM agents", &[])? {
        agents.push(dec::<AgentRow>(r.get(0))?);
    }
    let mut tasks = Vec::new();
    for r in client.query_sql(
        "SELECT task_id, agent, state, lease_expires_ms FROM tasks
         WHERE state IN ('QUEUED','LEASED','RUNNING')",
        &[],
    )? {
        let id: String = r.get(0);
        let state: String = r.get(2);
        let state = TaskState::parse(&state)
            .ok_or_else(|| CoordError::Setup(format!("task {id}: unknown state {state}")))?;
        tasks.push((
            id,
            ActiveTask {
                agent: r.get(1),
                state,
                lease_expires_ms: r.get(3),
            },
        ));
    }
    Ok(Placement::build(agents, tasks))
}

fn enc<T: serde::Serialize>(v: &T) -> Result<String> {
    Ok(serde_json::to_string(v)?)
}

fn dec<T: serde::de::DeserializeOwned>(s: String) -> Result<T> {
    Ok(serde_json::from_str(&s)?)
}

struct PgTx<'a> {
    conn: &'a mut Conn,
    placement: &'a SharedPlacement,
    pending: Pending,
    /// This coordinator's lead, when it leads.
    fence: Option<&'a Fence>,
    fenced: &'a tokio::sync::Notify,
    /// Whether BEGIN has gone out.
    begun: bool,
    /// Whether the fence row is held FOR SHARE by this transaction.
    fence_checked: bool,
    /// Writes not sent yet: they go out in one flight with the next read or
    /// with COMMIT (nothing reads their outcome but the error).
    queued: Vec<Queued>,
    /// A statement failed: the server has aborted the transaction, so it
    /// must not be reported committed.
    aborted: bool,
    /// Rows this transaction read or wrote, served again without a round
    /// trip: the leader is the only writer and its transactions run one at a
    /// time, so a row cannot change under its own transaction. Runs by id;
    /// jobs' (group, wait_for) by job id.
    runs: HashMap<String, RunRow>,
    groups: HashMap<String, (Option<String>, Option<String>)>,
}

fn aborted() -> CoordError {
    CoordError::Store {
        message: "the transaction was aborted by an earlier failed statement".into(),
        retryable: false,
    }
}

/// A deferred write: its statement and its parameters, owned.
struct Queued {
    st: Statement,
    params: Vec<Owned>,
}

type Owned = Box<dyn ToSql + Sync + Send>;

/// Owned statement parameters.
macro_rules! params {
    ($($v:expr),* $(,)?) => { vec![$(Box::new($v) as Owned),*] };
}

/// Raises SQLSTATE `BLF01` (and so aborts the transaction) unless the
/// leader row is held by `$1` with token `$2`; locks the row FOR SHARE
/// until the transaction ends (migration 2).
const FENCE_SQL: &str = "SELECT benchlake_fence($1, $2)";
const FENCE_SQLSTATE: &str = "BLF01";

type P<'a> = &'a (dyn ToSql + Sync);

/// The statement that ends a flight.
enum Last<'p> {
    /// A read: its rows come back.
    Query(Statement, &'p [P<'p>]),
    /// A write whose affected row count is needed.
    Exec(Statement, &'p [P<'p>]),
    /// The end of the transaction.
    Commit,
}

/// What one member of a flight returned.
enum Reply {
    Rows(Vec<Row>),
    Count(u64),
    Done,
}

type Member<'f> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Reply, tokio_postgres::Error>> + Send + 'f>,
>;

/// Awaits every member, polling them first in order, so their messages go
/// out in that order in one write (the server runs them in it).
async fn in_order(mut members: Vec<Member<'_>>) -> Vec<Result<Reply, tokio_postgres::Error>> {
    let mut outs: Vec<Option<Result<Reply, tokio_postgres::Error>>> =
        members.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (m, o) in members.iter_mut().zip(outs.iter_mut()) {
            if o.is_none() {
                match m.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outs.into_iter().flatten().collect()
}

impl PgTx<'_> {
    fn stmt(&mut self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.conn.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self.conn.client.prepare(sql)?;
        self.conn.stmts.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    /// Queues a write for the next flight.
    fn defer(&mut self, sql: &str, params: Vec<Owned>) -> Result<()> {
        if self.aborted {
            return Err(aborted());
        }
        let st = self.stmt(sql)?;
        self.queued.push(Queued { st, params });
        Ok(())
    }

    /// Sends, in one round trip: BEGIN before the transaction's first
    /// statement; the fence check before its first write (it holds the
    /// leader row FOR SHARE until the end: reads before it are safe, since a
    /// takeover that committed before the check makes the check fail, and one
    /// after it waits for our COMMIT; a read-only transaction never locks the
    /// row); the queued writes; then `last`. The first failure is returned,
    /// and the transaction is then aborted on the server.
    fn flight(&mut self, last: Last<'_>) -> Result<Reply> {
        if self.aborted {
            return Err(aborted());
        }
        let writes = std::mem::take(&mut self.queued);
        if matches!(last, Last::Commit) && !self.begun && writes.is_empty() {
            return Ok(Reply::Done);
        }
        let writing = !writes.is_empty() || matches!(last, Last::Exec(..));
        let fence = match self.fence {
            Some(f) if writing && !self.fence_checked => {
                Some((self.stmt(FENCE_SQL)?, f.holder.clone(), f.token))
            }
            _ => None,
        };
        let begin = !self.begun;
        self.begun = true;
        self.fence_checked |= fence.is_some();

        let refs: Vec<(&Statement, Vec<P<'_>>)> = writes
            .iter()
            .map(|q| {
                (
                    &q.st,
                    q.params.iter().map(|b| b.as_ref() as P<'_>).collect(),
                )
            })
            .collect();
        let cl = &self.conn.client.client;
        let mut members: Vec<Member<'_>> = Vec::with_capacity(refs.len() + 3);
        if begin {
            members.push(Box::pin(async move {
                cl.batch_execute("BEGIN").await.map(|()| Reply::Done)
            }));
        }
        let fence_at = fence.as_ref().map(|_| members.len());
        if let Some((st, holder, token)) = &fence {
            members.push(Box::pin(async move {
                cl.execute(st, &[holder, token]).await.map(Reply::Count)
            }));
        }
        for (st, p) in &refs {
            members.push(Box::pin(async move {
                cl.execute(*st, p).await.map(Reply::Count)
            }));
        }
        members.push(match last {
            Last::Query(st, p) => Box::pin(async move { cl.query(&st, p).await.map(Reply::Rows) }),
            Last::Exec(st, p) => {
                Box::pin(async move { cl.execute(&st, p).await.map(Reply::Count) })
            }
            Last::Commit => {
                Box::pin(async move { cl.batch_execute("COMMIT").await.map(|()| Reply::Done) })
            }
        });
        let outs = self.conn.client.wait(in_order(members));
        let n = outs.len();
        let mut last_out = None;
        for (i, o) in outs.into_iter().enumerate() {
            match o {
                Ok(r) if i + 1 == n => last_out = Some(r),
                Ok(_) => {}
                Err(e) => {
                    self.aborted = true;
                    if Some(i) == fence_at || e.code().is_some_and(|c| c.code() == FENCE_SQLSTATE) {
                        return Err(self.refused(e));
                    }
                    return Err(e.into());
                }
            }
        }
        last_out.ok_or_else(|| CoordError::Setup("state database flight returned nothing".into()))
    }

    /// The error of a fence check that failed: refused for a stale token
    /// (and the coordinator told to stop serving), or the failure itself.
    fn refused(&self, e: tokio_postgres::Error) -> CoordError {
        match (self.fence, e.as_db_error()) {
            (Some(f), Some(d)) if d.code().code() == FENCE_SQLSTATE => {
                self.fenced.notify_one();
                CoordError::Fenced(format!(
                    "this coordinator is no longer the leader: {} (its own is {}); the write was refused",
                    d.message(),
                    f.token
                ))
            }
            _ => CoordError::from(e),
        }
    }

    /// Ends the transaction: the queued writes and COMMIT in one flight.
    fn commit(&mut self) -> Result<()> {
        self.flight(Last::Commit).map(|_| ())
    }

    fn exec(&mut self, sql: &str, p: &[P<'_>]) -> Result<u64> {
        let st = self.stmt(sql)?;
        match self.flight(Last::Exec(st, p))? {
            Reply::Count(n) => Ok(n),
            _ => Ok(0),
        }
    }
    fn rows(&mut self, sql: &str, p: &[P<'_>]) -> Result<Vec<Row>> {
        let st = self.stmt(sql)?;
        match self.flight(Last::Query(st, p))? {
            Reply::Rows(r) => Ok(r),
            _ => Ok(Vec::new()),
        }
    }
    /// One job (`data, grp, wait_for`), its group remembered for
    /// [`Tx::job_group`] in the same transaction.
    fn job_with_group(&mut self, sql: &str, p: &[P<'_>]) -> Result<Option<JobRow>> {
        let Some(r) = self.row_opt(sql, p)? else {
            return Ok(None);
        };
        let j: JobRow = dec(r.get(0))?;
        self.groups.insert(j.job_id.clone(), (r.get(1), r.get(2)));
        Ok(Some(j))
    }
    /// The first row (the queries are by key, `LIMIT 1` or an aggregate).
    fn row_opt(&mut self, sql: &str, p: &[P<'_>]) -> Result<Option<Row>> {
        Ok(self.rows(sql, p)?.into_iter().next())
    }
    fn one<T: serde::de::DeserializeOwned>(&mut self, sql: &str, p: &[P<'_>]) -> Result<Option<T>> {
        match self.row_opt(sql, p)? {
            Some(r) => Ok(Some(dec(r.get(0))?)),
            None => Ok(None),
        }
    }
    fn many<T: serde::de::DeserializeOwned>(&mut self, sql: &str, p: &[P<'_>]) -> Result<Vec<T>> {
        self.rows(sql, p)?
            .into_iter()
            .map(|r| dec(r.get(0)))
            .collect()
    }
    fn count(&mut self, sql: &str, p: &[P<'_>]) -> Result<u64> {
        let n: i64 = self.row_opt(sql, p)?.map(|r| r.get(0)).unwrap_or(0);
        Ok(n.max(0) as u64)
    }
}

impl Tx for PgTx<'_> {
    fn insert_run(&mut self, r: &RunRow) -> Result<()> {
        self.defer(
            "INSERT INTO runs(run_id, state, schedule_id, benchmark, submitted_ms, idem_key, data)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            params![
                r.run_id.clone(),
                r.state.as_str(),
                r.schedule_id.clone(),
                r.benchmark.clone(),
                r.submitted_at_ms,
                r.idempotency_key.clone(),
                enc(r)?
            ],
        )?;
        self.runs.insert(r.run_id.clone(), r.clone());
        Ok(())
    }
    fn update_run(&mut self, r: &RunRow) -> Result<()> {
        self.defer(
            "UPDATE runs SET state=$2, data=$3 WHERE run_id=$1",
            params![r.run_id.clone(), r.state.as_str(), enc(r)?],
        )?;
        self.runs.insert(r.run_id.clone(), r.clone());
        Ok(())
    }
    fn get_run(&mut self, id: &str) -> Result<Option<RunRow>> {
        if let Some(r) = self.runs.get(id) {
            return Ok(Some(r.clone()));
        }
        let r: Option<RunRow> = self.one("SELECT data FROM runs WHERE run_id=$1", &[&id])?;
        if let Some(r) = &r {
            self.runs.insert(r.run_id.clone(), r.clone());
        }
        Ok(r)
    }
    fn run_by_idempotency_key(&mut self, key: &str) -> Result<Option<RunRow>> {
        self.one("SELECT data FROM runs WHERE idem_key=$1", &[&key])
    }
    fn list_runs(&mut self, f: &RunFilter) -> Result<Vec<RunRow>> {
        let (sql, args) = f.sql(|n| format!("${n}"));
        let limit = i64::from(f.page());
        let mut p: Vec<P<'_>> = args.iter().map(|a| a as P<'_>).collect();
        p.push(&limit);
        self.many(&sql, &p)
    }
    fn active_runs_of_schedule(&mut self, schedule_id: &str) -> Result<Vec<RunRow>> {
        self.many(
            "SELECT data FROM runs WHERE schedule_id=$1
             AND state IN ('PENDING','RUNNING','PROCESSING')",
            &[&schedule_id],
        )
    }
    fn unfinished_runs(&mut self) -> Result<Vec<String>> {
        Ok(self
            .rows(
                "SELECT run_id FROM runs WHERE state IN ('PENDING','RUNNING','PROCESSING')
                 OR (data::jsonb ->> 'outcome') IS NOT NULL ORDER BY run_id",
                &[],
            )?
            .into_iter()
            .map(|r| r.get(0))
            .collect())
    }

    fn insert_task(&mut self, t: &TaskRow) -> Result<()> {
        self.defer(
            "INSERT INTO tasks(task_id, run_id, agent, state, not_before_ms, lease_expires_ms, data)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            params![t.task_id.clone(), t.run_id.clone(), t.agent.clone(), t.state.as_str(), t.not_before_ms, t.lease_expires_ms, enc(t)?],
        )?;
        let base = self.placement.read().unwrap_or_else(|p| p.into_inner());
        self.pending.task_written(&base, t);
        Ok(())
    }
    fn update_task(&mut self, t: &TaskRow) -> Result<()> {
        self.defer(
            "UPDATE tasks SET agent=$2, state=$3, not_before_ms=$4, lease_expires_ms=$5, data=$6
             WHERE task_id=$1",
            params![
                t.task_id.clone(),
                t.agent.clone(),
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
        self.one("SELECT data FROM tasks WHERE task_id=$1", &[&id])
    }
    fn tasks_of_run(&mut self, run_id: &str) -> Result<Vec<TaskRow>> {
        let mut tasks: Vec<TaskRow> = self.many(
            "SELECT data FROM tasks WHERE run_id=$1 ORDER BY task_id",
            &[&run_id],
        )?;
        tasks.sort_by_key(|t| t.rank);
        Ok(tasks)
    }
    fn next_task_for_agent(&mut self, agent: &str, now: i64) -> Result<Option<TaskRow>> {
        self.one(
            "SELECT data FROM tasks WHERE agent=$1 AND state='QUEUED' AND not_before_ms<=$2
             ORDER BY not_before_ms, task_id LIMIT 1",
            &[&agent, &now],
        )
    }
    fn expired_tasks(&mut self, now: i64) -> Result<Vec<TaskRow>> {
        self.many(
            "SELECT data FROM tasks WHERE state IN ('LEASED','RUNNING') AND lease_expires_ms<$1
             ORDER BY task_id",
            &[&now],
        )
    }
    fn tasks_of_agent(&mut self, agent: &str, states: &[TaskState]) -> Result<Vec<TaskRow>> {
        let states: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
        self.many(
            "SELECT data FROM tasks WHERE agent=$1 AND state = ANY($2) ORDER BY task_id",
            &[&agent, &states],
        )
    }

    fn insert_job(&mut self, j: &JobRow) -> Result<()> {
        self.defer(
            "INSERT INTO jobs(job_id, run_id, kind, state, not_before_ms, lease_expires_ms, created_ms, data)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            params![j.job_id.clone(), j.run_id.clone(), j.kind.clone(), j.state.as_str(), j.not_before_ms, j.lease_expires_ms, j.created_ms, enc(j)?],
        )?;
        Ok(())
    }
    fn update_job(&mut self, j: &JobRow) -> Result<()> {
        self.defer(
            "UPDATE jobs SET state=$2, not_before_ms=$3, lease_expires_ms=$4, data=$5 WHERE job_id=$1",
            params![j.job_id.clone(), j.state.as_str(), j.not_before_ms, j.lease_expires_ms, enc(j)?],
        )?;
        Ok(())
    }
    fn get_job(&mut self, id: &str) -> Result<Option<JobRow>> {
        self.job_with_group(
            "SELECT data, grp, wait_for FROM jobs WHERE job_id=$1",
            &[&id],
        )
    }
    fn jobs_of_run(&mut self, run_id: &str) -> Result<Vec<JobRow>> {
        self.many(
            "SELECT data FROM jobs WHERE run_id=$1 ORDER BY created_ms, job_id",
            &[&run_id],
        )
    }
    fn next_job(&mut self, kinds: &[String], now: i64) -> Result<Option<JobRow>> {
        if kinds.is_empty() {
            return self.job_with_group(
                "SELECT data, grp, wait_for FROM jobs WHERE state='QUEUED' AND not_before_ms<=$1
                 ORDER BY not_before_ms, created_ms LIMIT 1",
                &[&now],
            );
        }
        self.job_with_group(
            "SELECT data, grp, wait_for FROM jobs WHERE state='QUEUED' AND not_before_ms<=$1
             AND kind = ANY($2) ORDER BY not_before_ms, created_ms LIMIT 1",
            &[&now, &kinds],
        )
    }
    fn expired_jobs(&mut self, now: i64) -> Result<Vec<JobRow>> {
        self.many(
            "SELECT data FROM jobs WHERE state='LEASED' AND lease_expires_ms<$1 ORDER BY job_id",
            &[&now],
        )
    }
    fn queued_job_count(&mut self) -> Result<u64> {
        self.count("SELECT COUNT(*) FROM jobs WHERE state='QUEUED'", &[])
    }
    fn state_counts(&mut self, now: i64) -> Result<Vec<(String, String, u64)>> {
        let rows = self.rows(
            "SELECT 'run'::text, state, COUNT(*) FROM runs GROUP BY state
             UNION ALL SELECT 'task'::text, state, COUNT(*) FROM tasks GROUP BY state
             UNION ALL SELECT 'job'::text, state, COUNT(*) FROM jobs GROUP BY state
             UNION ALL SELECT 'task_due'::text, 'QUEUED'::text, COUNT(*) FROM tasks
               WHERE state='QUEUED' AND not_before_ms<=$1
             UNION ALL SELECT 'job_due'::text, 'QUEUED'::text, COUNT(*) FROM jobs
               WHERE state='QUEUED' AND not_before_ms<=$1",
            &[&now],
        )?;
        Ok(rows
            .into_iter()
            .map(|r| (r.get(0), r.get(1), r.get::<_, i64>(2).max(0) as u64))
            .collect())
    }
    fn job_of_kind(&mut self, run_id: &str, kind: &str) -> Result<Option<JobRow>> {
        self.one(
            "SELECT data FROM jobs WHERE run_id=$1 AND kind=$2 ORDER BY created_ms, job_id LIMIT 1",
            &[&run_id, &kind],
        )
    }
    fn count_open_jobs(&mut self, run_id: &str, except_kind: &str) -> Result<u64> {
        self.count(
            "SELECT COUNT(*) FROM jobs WHERE run_id=$1 AND state IN ('QUEUED','LEASED') AND kind<>$2",
            &[&run_id, &except_kind],
        )
    }
    fn failed_jobs(&mut self, run_id: &str) -> Result<Vec<JobRow>> {
        self.many(
            "SELECT data FROM jobs WHERE run_id=$1 AND state='FAILED' ORDER BY created_ms, job_id",
            &[&run_id],
        )
    }

    fn upsert_agent(&mut self, a: &AgentRow) -> Result<()> {
        self.defer(
            "INSERT INTO agents(name, data) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET data=excluded.data",
            params![a.name.clone(), enc(a)?],
        )?;
        self.pending.agent_written(a);
        Ok(())
    }
    fn get_agent(&mut self, name: &str) -> Result<Option<AgentRow>> {
        self.one("SELECT data FROM agents WHERE name=$1", &[&name])
    }
    fn list_agents(&mut self) -> Result<Vec<AgentRow>> {
        self.many("SELECT data FROM agents ORDER BY name", &[])
    }

    fn insert_schedule(&mut self, s: &ScheduleRow) -> Result<()> {
        self.defer(
            "INSERT INTO schedules(schedule_id, name, paused, next_fire_ms, data)
             VALUES ($1, $2, $3, $4, $5)",
            params![
                s.schedule_id.clone(),
                s.name.clone(),
                s.paused,
                s.next_fire_ms,
                enc(s)?
            ],
        )?;
        Ok(())
    }
    fn update_schedule(&mut self, s: &ScheduleRow) -> Result<()> {
        self.defer(
            "UPDATE schedules SET name=$2, paused=$3, next_fire_ms=$4, data=$5 WHERE schedule_id=$1",
            params![s.schedule_id.clone(), s.name.clone(), s.paused, s.next_fire_ms, enc(s)?],
        )?;
        Ok(())
    }
    fn get_schedule(&mut self, id: &str) -> Result<Option<ScheduleRow>> {
        self.one("SELECT data FROM schedules WHERE schedule_id=$1", &[&id])
    }
    fn schedule_by_name(&mut self, name: &str) -> Result<Option<ScheduleRow>> {
        self.one("SELECT data FROM schedules WHERE name=$1", &[&name])
    }
    fn delete_schedule(&mut self, id: &str) -> Result<bool> {
        Ok(self.exec("DELETE FROM schedules WHERE schedule_id=$1", &[&id])? > 0)
    }
    fn list_schedules(&mut self) -> Result<Vec<ScheduleRow>> {
        self.many("SELECT data FROM schedules ORDER BY name", &[])
    }
    fn due_schedules(&mut self, now: i64) -> Result<Vec<ScheduleRow>> {
        self.many(
            "SELECT data FROM schedules WHERE NOT paused AND next_fire_ms IS NOT NULL
             AND next_fire_ms<=$1 ORDER BY next_fire_ms",
            &[&now],
        )
    }

    fn upsert_committed(&mut self, f: &CommittedFile) -> Result<()> {
        let m = f.merged.as_ref();
        self.defer(
            "INSERT INTO committed_files(key, table_name, run_id, job_id, date, rows, bytes, committed_ms,
             object, first_group, n_groups)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (key) DO UPDATE SET rows=excluded.rows, bytes=excluded.bytes,
             committed_ms=excluded.committed_ms, object=excluded.object,
             first_group=excluded.first_group, n_groups=excluded.n_groups",
            params![f.key.clone(), f.table.clone(), f.run_id.clone(), f.job_id.clone(), f.date.clone(), f.rows as i64, f.bytes as i64, f.committed_ms,
                m.map(|m| m.object.clone()), m.map(|m| m.first_group as i64), m.map(|m| m.groups as i64)],
        )?;
        Ok(())
    }
    fn delete_committed(&mut self, key: &str) -> Result<()> {
        self.defer(
            "DELETE FROM committed_files WHERE key=$1",
            params![key.to_owned()],
        )?;
        Ok(())
    }
    fn committed_files(&mut self, table: Option<&str>) -> Result<Vec<CommittedFile>> {
        Ok(self
            .rows(
                &format!(
                    "SELECT {} FROM committed_files WHERE ($1::TEXT IS NULL OR table_name=$1)
                     ORDER BY table_name, date, run_id, key",
                    crate::store::COMMITTED_COLUMNS
                ),
                &[&table],
            )?
            .iter()
            .map(committed_row)
            .collect())
    }

    fn table_totals(&mut self) -> Result<Vec<TableTotals>> {
        Ok(self
            .rows(crate::store::TABLE_TOTALS, &[])?
            .into_iter()
            .map(|r| TableTotals {
                table: r.get(0),
                files: r.get::<_, i64>(1).max(0) as u64,
                rows: r.get::<_, i64>(2).max(0) as u64,
                bytes: r.get::<_, i64>(3).max(0) as u64,
            })
            .collect())
    }

    fn committed_files_of_run(&mut self, run_id: &str) -> Result<Vec<CommittedFile>> {
        Ok(self
            .rows(
                &format!(
                    "SELECT {} FROM committed_files WHERE run_id=$1 ORDER BY table_name, key",
                    crate::store::COMMITTED_COLUMNS
                ),
                &[&run_id],
            )?
            .iter()
            .map(committed_row)
            .collect())
    }

    fn set_job_group(
        &mut self,
        job_id: &str,
        group: Option<&str>,
        wait_for: Option<&str>,
    ) -> Result<()> {
        self.defer(
            "UPDATE jobs SET grp=$2, wait_for=$3 WHERE job_id=$1",
            params![
                job_id.to_owned(),
                group.map(str::to_owned),
                wait_for.map(str::to_owned)
            ],
        )?;
        self.groups.insert(
            job_id.to_owned(),
            (group.map(str::to_owned), wait_for.map(str::to_owned)),
        );
        Ok(())
    }
    fn job_group(&mut self, job_id: &str) -> Result<(Option<String>, Option<String>)> {
        if let Some(g) = self.groups.get(job_id) {
            return Ok(g.clone());
        }
        Ok(
            match self.row_opt("SELECT grp, wait_for FROM jobs WHERE job_id=$1", &[&job_id])? {
                Some(r) => (r.get(0), r.get(1)),
                None => (None, None),
            },
        )
    }
    fn open_jobs_in_group(&mut self, run_id: &str, group: &str) -> Result<u64> {
        self.count(
            "SELECT COUNT(*) FROM jobs WHERE run_id=$1 AND grp=$2 AND state IN ('QUEUED','LEASED')",
            &[&run_id, &group],
        )
    }
    fn failed_jobs_in_group(&mut self, run_id: &str, group: &str) -> Result<Vec<JobRow>> {
        self.many(
            "SELECT data FROM jobs WHERE run_id=$1 AND grp=$2 AND state IN ('FAILED','CANCELLED')
             ORDER BY created_ms, job_id",
            &[&run_id, &group],
        )
    }
    fn jobs_waiting_for(&mut self, run_id: &str, group: &str) -> Result<Vec<JobRow>> {
        self.many(
            "SELECT data FROM jobs WHERE run_id=$1 AND wait_for=$2 AND state='QUEUED'
             ORDER BY created_ms, job_id",
            &[&run_id, &group],
        )
    }
    fn get_meta(&mut self, key: &str) -> Result<Option<String>> {
        Ok(self
            .row_opt("SELECT v FROM meta WHERE k=$1", &[&key])?
            .map(|r| r.get(0)))
    }
    fn set_meta(&mut self, key: &str, value: &str) -> Result<()> {
        self.defer(
            "INSERT INTO meta(k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v=excluded.v",
            params![key.to_owned(), value.to_owned()],
        )?;
        Ok(())
    }

    fn upsert_node_drain(&mut self, d: &crate::model::NodeDrain) -> Result<()> {
        self.defer(
            "INSERT INTO node_drains(node, data) VALUES ($1, $2)
             ON CONFLICT (node) DO UPDATE SET data=excluded.data",
            params![d.node.clone(), enc(d)?],
        )
    }
    fn get_node_drain(&mut self, node: &str) -> Result<Option<crate::model::NodeDrain>> {
        self.one("SELECT data FROM node_drains WHERE node=$1", &[&node])
    }
    fn delete_node_drain(&mut self, node: &str) -> Result<bool> {
        Ok(self.exec("DELETE FROM node_drains WHERE node=$1", &[&node])? > 0)
    }
    fn list_node_drains(&mut self) -> Result<Vec<crate::model::NodeDrain>> {
        self.many("SELECT data FROM node_drains ORDER BY node", &[])
    }

    fn insert_ack(&mut self, a: &crate::model::Ack) -> Result<()> {
        self.defer(
            "INSERT INTO acknowledgements(id, expires_ms, data) VALUES ($1, $2, $3)",
            params![a.id.clone(), a.expires_ms, enc(a)?],
        )
    }
    fn list_acks(&mut self) -> Result<Vec<crate::model::Ack>> {
        self.many("SELECT data FROM acknowledgements ORDER BY id", &[])
    }
    fn delete_ack(&mut self, id: &str) -> Result<bool> {
        Ok(self.exec("DELETE FROM acknowledgements WHERE id=$1", &[&id])? > 0)
    }
    fn prune_acks(&mut self, before_ms: i64) -> Result<u64> {
        self.exec(
            "DELETE FROM acknowledgements WHERE expires_ms < $1",
            &[&before_ms],
        )
    }
    fn insert_audit(&mut self, a: &crate::model::AuditRow) -> Result<()> {
        self.defer(
            "INSERT INTO audit_log(id, at_ms, data) VALUES ($1, $2, $3)",
            params![a.id.clone(), a.at_ms, enc(a)?],
        )
    }
    fn list_audit(
        &mut self,
        limit: u32,
        before: Option<&str>,
    ) -> Result<Vec<crate::model::AuditRow>> {
        let limit = i64::from(limit);
        match before {
            Some(b) => self.many(
                "SELECT data FROM audit_log WHERE id < $1 ORDER BY id DESC LIMIT $2",
                &[&b, &limit],
            ),
            None => self.many(
                "SELECT data FROM audit_log ORDER BY id DESC LIMIT $1",
                &[&limit],
            ),
        }
    }
    fn insert_maintenance(&mut self, m: &crate::model::Maintenance) -> Result<()> {
        self.defer(
            "INSERT INTO maintenance_windows(id, end_ms, data) VALUES ($1, $2, $3)",
            params![m.id.clone(), m.end_ms, enc(m)?],
        )
    }
    fn list_maintenance(&mut self) -> Result<Vec<crate::model::Maintenance>> {
        self.many("SELECT data FROM maintenance_windows ORDER BY id", &[])
    }
    fn delete_maintenance(&mut self, id: &str) -> Result<bool> {
        Ok(self.exec("DELETE FROM maintenance_windows WHERE id=$1", &[&id])? > 0)
    }
    fn prune_maintenance(&mut self, before_ms: i64) -> Result<u64> {
        self.exec(
            "DELETE FROM maintenance_windows WHERE end_ms < $1",
            &[&before_ms],
        )
    }

    fn insert_notification(&mut self, n: &NotificationRow) -> Result<()> {
        self.defer(
            "INSERT INTO notifications(delivery_id, run_id, notifier, state, next_ms, data)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (run_id, notifier) DO NOTHING",
            params![
                n.delivery_id.clone(),
                n.run_id.clone(),
                n.notifier.clone(),
                n.state.as_str(),
                n.next_ms,
                enc(n)?
            ],
        )
    }
    fn update_notification(&mut self, n: &NotificationRow) -> Result<()> {
        self.defer(
            "UPDATE notifications SET state=$2, next_ms=$3, data=$4 WHERE delivery_id=$1",
            params![n.delivery_id.clone(), n.state.as_str(), n.next_ms, enc(n)?],
        )
    }
    fn due_notifications(&mut self, now: i64, limit: u32) -> Result<Vec<NotificationRow>> {
        let limit = i64::from(limit);
        self.many(
            "SELECT data FROM notifications WHERE state='PENDING' AND next_ms<=$1
             ORDER BY next_ms, delivery_id LIMIT $2",
            &[&now, &limit],
        )
    }
    fn next_notification_ms(&mut self) -> Result<Option<i64>> {
        Ok(self
            .row_opt(
                "SELECT MIN(next_ms) FROM notifications WHERE state='PENDING'",
                &[],
            )?
            .and_then(|r| r.get::<_, Option<i64>>(0)))
    }
    fn notifications_of_run(&mut self, run_id: &str) -> Result<Vec<NotificationRow>> {
        self.many(
            "SELECT data FROM notifications WHERE run_id=$1 ORDER BY notifier",
            &[&run_id],
        )
    }
    fn prune_notifications(&mut self, before_ms: i64) -> Result<u64> {
        self.exec(
            "DELETE FROM notifications WHERE state<>'PENDING' AND next_ms<$1",
            &[&before_ms],
        )
    }

    fn placement(&mut self) -> Option<View<'_>> {
        Some(View {
            base: self.placement.read().unwrap_or_else(|p| p.into_inner()),
            pending: &self.pending,
        })
    }
}
