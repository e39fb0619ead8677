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
//! Fencing: once this coordinator leads, every transaction first reads the
//! leader row `FOR SHARE` in the same round trip as its `BEGIN` and is refused
//! ([`CoordError::Fenced`]) when the row's token is no longer ours. A takeover
//! must update that row, so it waits for our open transaction and every later
//! one of ours fails: a late write of an old leader never lands.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row, SimpleQueryMessage, Statement};

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
];

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
    /// Runs `f` with `prelude` (simple-query text: `BEGIN`, the fence check)
    /// sent ahead of it in the same flight: one round trip for both. The
    /// prelude's outcome comes back beside `f`'s.
    #[allow(clippy::type_complexity)]
    fn pipelined<T: Send>(
        &self,
        prelude: Option<&str>,
        f: impl std::future::Future<Output = Result<T, tokio_postgres::Error>> + Send,
    ) -> (
        Option<Result<Vec<SimpleQueryMessage>, tokio_postgres::Error>>,
        Result<T, tokio_postgres::Error>,
    ) {
        match prelude {
            None => (None, self.wait(f)),
            Some(sql) => {
                // join! polls (and so sends) the prelude first.
                let (a, b) = self.wait(async { futures::join!(self.client.simple_query(sql), f) });
                (Some(a), b)
            }
        }
    }
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
        };
        let out = f(&mut t).and_then(|()| {
            if t.begun {
                t.conn.client.batch_execute("COMMIT")?;
            }
            Ok(())
        });
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

    fn concurrent_transactions(&self) -> Option<usize> {
        // One connection carries every transaction.
        Some(1)
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
}

const FENCE_SQL: &str = "SELECT holder, token FROM leader WHERE id = 1 FOR SHARE";

type P<'a> = &'a (dyn ToSql + Sync);

impl PgTx<'_> {
    fn stmt(&mut self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.conn.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self.conn.client.prepare(sql)?;
        self.conn.stmts.insert(sql.to_string(), s.clone());
        Ok(s)
    }
    /// What must go out ahead of the next statement: BEGIN before the
    /// first, and before the first write the fence check, which holds the
    /// leader row FOR SHARE until COMMIT. Reads before it are safe: a
    /// takeover that committed before the check makes the check fail (and
    /// the whole transaction roll back); one after it waits for our COMMIT.
    /// A read-only transaction never locks the row.
    fn prelude(&mut self, write: bool) -> (Option<String>, bool) {
        let fence = write && self.fence.is_some() && !self.fence_checked;
        let mut parts = Vec::new();
        if !self.begun {
            parts.push("BEGIN");
        }
        if fence {
            parts.push(FENCE_SQL);
        }
        self.begun = true;
        self.fence_checked |= fence;
        ((!parts.is_empty()).then(|| parts.join("; ")), fence)
    }

    /// Checks the prelude's outcome: an error, or a fence row that is no
    /// longer ours (then the statement that went with it is rolled back).
    fn after_prelude(
        &self,
        out: Option<std::result::Result<Vec<SimpleQueryMessage>, tokio_postgres::Error>>,
        fenced: bool,
    ) -> Result<()> {
        let Some(out) = out else { return Ok(()) };
        let msgs = out?;
        let (Some(fence), true) = (self.fence, fenced) else {
            return Ok(());
        };
        let row = msgs.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        });
        let (holder, token) = match row {
            Some(r) => (
                r.get(0).unwrap_or_default().to_string(),
                r.get(1).and_then(|t| t.parse::<i64>().ok()).unwrap_or(-1),
            ),
            None => (String::new(), -1),
        };
        if holder != fence.holder || token != fence.token {
            self.fenced.notify_one();
            return Err(CoordError::Fenced(format!(
                "this coordinator is no longer the leader: its fencing token is {} \
                 and the state database's is {token} (held by {holder}); the write was refused",
                fence.token
            )));
        }
        Ok(())
    }

    fn exec(&mut self, sql: &str, p: &[P<'_>]) -> Result<u64> {
        let st = self.stmt(sql)?;
        let (pre, fenced) = self.prelude(true);
        let c = &self.conn.client;
        let (pr, r) = c.pipelined(pre.as_deref(), c.client.execute(&st, p));
        self.after_prelude(pr, fenced)?;
        Ok(r?)
    }
    fn rows(&mut self, sql: &str, p: &[P<'_>]) -> Result<Vec<Row>> {
        let st = self.stmt(sql)?;
        let (pre, _) = self.prelude(false);
        let c = &self.conn.client;
        let (pr, r) = c.pipelined(pre.as_deref(), c.client.query(&st, p));
        self.after_prelude(pr, false)?;
        Ok(r?)
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
        self.exec(
            "INSERT INTO runs(run_id, state, schedule_id, benchmark, submitted_ms, idem_key, data)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &r.run_id,
                &r.state.as_str(),
                &r.schedule_id,
                &r.benchmark,
                &r.submitted_at_ms,
                &r.idempotency_key,
                &enc(r)?,
            ],
        )?;
        Ok(())
    }
    fn update_run(&mut self, r: &RunRow) -> Result<()> {
        self.exec(
            "UPDATE runs SET state=$2, data=$3 WHERE run_id=$1",
            &[&r.run_id, &r.state.as_str(), &enc(r)?],
        )?;
        Ok(())
    }
    fn get_run(&mut self, id: &str) -> Result<Option<RunRow>> {
        self.one("SELECT data FROM runs WHERE run_id=$1", &[&id])
    }
    fn run_by_idempotency_key(&mut self, key: &str) -> Result<Option<RunRow>> {
        self.one("SELECT data FROM runs WHERE idem_key=$1", &[&key])
    }
    fn list_runs(&mut self, f: &RunFilter) -> Result<Vec<RunRow>> {
        let limit: i64 = if f.limit == 0 {
            100
        } else {
            i64::from(f.limit.min(10_000))
        };
        self.many(
            "SELECT data FROM runs WHERE ($1::TEXT IS NULL OR schedule_id=$1)
             AND ($2::TEXT IS NULL OR state=$2) AND ($3::TEXT IS NULL OR benchmark=$3)
             ORDER BY run_id DESC LIMIT $4",
            &[
                &f.schedule_id,
                &f.state.map(|s| s.as_str()),
                &f.benchmark,
                &limit,
            ],
        )
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
        self.exec(
            "INSERT INTO tasks(task_id, run_id, agent, state, not_before_ms, lease_expires_ms, data)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &t.task_id,
                &t.run_id,
                &t.agent,
                &t.state.as_str(),
                &t.not_before_ms,
                &t.lease_expires_ms,
                &enc(t)?,
            ],
        )?;
        let base = self.placement.read().unwrap_or_else(|p| p.into_inner());
        self.pending.task_written(&base, t);
        Ok(())
    }
    fn update_task(&mut self, t: &TaskRow) -> Result<()> {
        self.exec(
            "UPDATE tasks SET agent=$2, state=$3, not_before_ms=$4, lease_expires_ms=$5, data=$6
             WHERE task_id=$1",
            &[
                &t.task_id,
                &t.agent,
                &t.state.as_str(),
                &t.not_before_ms,
                &t.lease_expires_ms,
                &enc(t)?,
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
        self.exec(
            "INSERT INTO jobs(job_id, run_id, kind, state, not_before_ms, lease_expires_ms, created_ms, data)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &j.job_id,
                &j.run_id,
                &j.kind,
                &j.state.as_str(),
                &j.not_before_ms,
                &j.lease_expires_ms,
                &j.created_ms,
                &enc(j)?,
            ],
        )?;
        Ok(())
    }
    fn update_job(&mut self, j: &JobRow) -> Result<()> {
        self.exec(
            "UPDATE jobs SET state=$2, not_before_ms=$3, lease_expires_ms=$4, data=$5 WHERE job_id=$1",
            &[
                &j.job_id,
                &j.state.as_str(),
                &j.not_before_ms,
                &j.lease_expires_ms,
                &enc(j)?,
            ],
        )?;
        Ok(())
    }
    fn get_job(&mut self, id: &str) -> Result<Option<JobRow>> {
        self.one("SELECT data FROM jobs WHERE job_id=$1", &[&id])
    }
    fn jobs_of_run(&mut self, run_id: &str) -> Result<Vec<JobRow>> {
        self.many(
            "SELECT data FROM jobs WHERE run_id=$1 ORDER BY created_ms, job_id",
            &[&run_id],
        )
    }
    fn next_job(&mut self, kinds: &[String], now: i64) -> Result<Option<JobRow>> {
        if kinds.is_empty() {
            return self.one(
                "SELECT data FROM jobs WHERE state='QUEUED' AND not_before_ms<=$1
                 ORDER BY not_before_ms, created_ms LIMIT 1",
                &[&now],
            );
        }
        self.one(
            "SELECT data FROM jobs WHERE state='QUEUED' AND not_before_ms<=$1
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
        self.exec(
            "INSERT INTO agents(name, data) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET data=excluded.data",
            &[&a.name, &enc(a)?],
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
        self.exec(
            "INSERT INTO schedules(schedule_id, name, paused, next_fire_ms, data)
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &s.schedule_id,
                &s.name,
                &s.paused,
                &s.next_fire_ms,
                &enc(s)?,
            ],
        )?;
        Ok(())
    }
    fn update_schedule(&mut self, s: &ScheduleRow) -> Result<()> {
        self.exec(
            "UPDATE schedules SET name=$2, paused=$3, next_fire_ms=$4, data=$5 WHERE schedule_id=$1",
            &[
                &s.schedule_id,
                &s.name,
                &s.paused,
                &s.next_fire_ms,
                &enc(s)?,
            ],
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
        self.exec(
            "INSERT INTO committed_files(key, table_name, run_id, job_id, date, rows, bytes, committed_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (key) DO UPDATE SET rows=excluded.rows, bytes=excluded.bytes,
             committed_ms=excluded.committed_ms",
            &[
                &f.key,
                &f.table,
                &f.run_id,
                &f.job_id,
                &f.date,
                &(f.rows as i64),
                &(f.bytes as i64),
                &f.committed_ms,
            ],
        )?;
        Ok(())
    }
    fn delete_committed(&mut self, key: &str) -> Result<()> {
        self.exec("DELETE FROM committed_files WHERE key=$1", &[&key])?;
        Ok(())
    }
    fn committed_files(&mut self, table: Option<&str>) -> Result<Vec<CommittedFile>> {
        Ok(self
            .rows(
                "SELECT key, table_name, run_id, job_id, date, rows, bytes, committed_ms
                 FROM committed_files WHERE ($1::TEXT IS NULL OR table_name=$1)
                 ORDER BY table_name, date, run_id, key",
                &[&table],
            )?
            .into_iter()
            .map(|r| CommittedFile {
                key: r.get(0),
                table: r.get(1),
                run_id: r.get(2),
                job_id: r.get(3),
                date: r.get(4),
                rows: r.get::<_, i64>(5).max(0) as u64,
                bytes: r.get::<_, i64>(6).max(0) as u64,
                committed_ms: r.get(7),
            })
            .collect())
    }

    fn set_job_group(
        &mut self,
        job_id: &str,
        group: Option<&str>,
        wait_for: Option<&str>,
    ) -> Result<()> {
        self.exec(
            "UPDATE jobs SET grp=$2, wait_for=$3 WHERE job_id=$1",
            &[&job_id, &group, &wait_for],
        )?;
        Ok(())
    }
    fn job_group(&mut self, job_id: &str) -> Result<(Option<String>, Option<String>)> {
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
        self.exec(
            "INSERT INTO meta(k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v=excluded.v",
            &[&key, &value],
        )?;
        Ok(())
    }

    fn placement(&mut self) -> Option<View<'_>> {
        Some(View {
            base: self.placement.read().unwrap_or_else(|p| p.into_inner()),
            pending: &self.pending,
        })
    }
}
