//! An in-process cluster for tests: a coordinator on a port-0 listener with a
//! manual clock (no background loop: tests call `tick`), agents and workers as
//! tokio tasks speaking real gRPC to it.
//!
//! The coordinator's state is a SQLite file under the test's directory, or
//! with `BENCHLAKE_TEST_STATE=postgres` a database of its own on a PostgreSQL
//! server the test binary starts ([`TestState`]).
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use benchlake_coordinator::pg_testing::PgServer;
use benchlake_coordinator::store::{SqliteStore, StateStore};
use benchlake_coordinator::{Coordinator, CoordinatorConfig, Tokens};
use benchlake_core::clock::ManualClock;
use benchlake_core::lake::{Lake, StoreConfig};
use benchlake_proto::client::{Auth, channel};
use benchlake_proto::v1 as pb;
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

#[path = "../../../tests/support/unavailable.rs"]
mod unavailable;
// Not every test file that includes this one uses both.
#[allow(unused_imports)]
pub use unavailable::{this_test, unavailable};

pub type Ch = InterceptedService<Channel, Auth>;

/// 2026-11-23T00:00:00Z.
pub const T0: i64 = 1_795_392_000_000;

/// The catalog every test agent has. `{bin}` is the benchlake binary.
pub fn catalog(bin: &str) -> String {
    format!(
        r#"
[[benchmark]]
name = "sleep"
kind = "noop"
command = ["sleep", "{{seconds}}"]
timeout_s = 600
[[benchmark.param]]
name = "seconds"
type = "float"
default = "0"
min = 0
max = 600

[[benchmark]]
name = "hostinfo"
kind = "noop"
command = ["{bin}", "probe", "host", "--out", "{{out_dir}}/host.json"]
timeout_s = 60
[[benchmark.output]]
file = "host.json"
format = "hostinfo"
required = true

[[benchmark]]
name = "rank0-only"
kind = "noop"
description = "succeeds on rank 0, fails elsewhere"
command = ["test", "{{rank}}", "-eq", "0"]
timeout_s = 60
"#
    )
}

/// Whether coordinator state goes to PostgreSQL (`BENCHLAKE_TEST_STATE=postgres`)
/// rather than SQLite (unset, or `sqlite`).
pub fn on_postgres() -> bool {
    match std::env::var("BENCHLAKE_TEST_STATE").as_deref() {
        Ok("postgres") => true,
        Ok("sqlite" | "") | Err(_) => false,
        Ok(other) => panic!("BENCHLAKE_TEST_STATE={other}: expected `sqlite` or `postgres`"),
    }
}

/// The PostgreSQL server of this test binary: started by the first test that
/// needs it, shared by the tests running meanwhile, stopped (and its
/// directory removed) when the last [`TestState`] holding it is dropped.
fn pg_server() -> Arc<PgServer> {
    static SERVER: Mutex<Weak<PgServer>> = Mutex::new(Weak::new());
    let mut g = SERVER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = g.upgrade() {
        return s;
    }
    let t = std::time::Instant::now();
    let s = Arc::new(PgServer::start().unwrap_or_else(|e| {
        panic!("BENCHLAKE_TEST_STATE=postgres: cannot start a PostgreSQL server: {e}")
    }));
    eprintln!(
        "PostgreSQL test server on port {} started in {:?}",
        s.port(),
        t.elapsed()
    );
    *g = Arc::downgrade(&s);
    s
}

/// Where a test's coordinators keep their state: `state.db` under the test's
/// directory, or (`BENCHLAKE_TEST_STATE=postgres`) a fresh database of this
/// test's own. Coordinators restarted "on the same state" use the same value;
/// the server lives at least as long as it.
#[derive(Clone, Debug)]
pub struct TestState {
    pg: Option<(Arc<PgServer>, String)>,
}

impl TestState {
    /// New empty state on the backend the environment asks for.
    pub fn new() -> Self {
        if !on_postgres() {
            return Self { pg: None };
        }
        let server = pg_server();
        let url = server
            .fresh_db()
            .unwrap_or_else(|e| panic!("PostgreSQL test database: {e}"));
        Self {
            pg: Some((server, url)),
        }
    }

    /// A SQLite file whatever the environment asks for: settings that are
    /// never opened.
    pub fn sqlite() -> Self {
        Self { pg: None }
    }

    /// The database URL on PostgreSQL.
    pub fn postgres_url(&self) -> Option<&str> {
        self.pg.as_ref().map(|(_, u)| u.as_str())
    }

    /// The `--state` of a `benchlake coordinator` process over this state
    /// (`dir` holds the SQLite file).
    pub fn arg(&self, dir: &Path) -> std::ffi::OsString {
        match self.postgres_url() {
            Some(u) => u.into(),
            None => dir.join("state.db").into(),
        }
    }
}

impl Default for TestState {
    fn default() -> Self {
        Self::new()
    }
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub coord: Arc<Coordinator>,
    pub clock: ManualClock,
    pub addr: String,
    pub agents: HashMap<String, watch::Sender<bool>>,
    pub workers: Vec<watch::Sender<bool>>,
    stop: watch::Sender<bool>,
    pub token: Option<String>,
    /// The coordinator's state (restarts reuse it); last, so a PostgreSQL
    /// server outlives the coordinator.
    pub state: TestState,
}

pub fn bin() -> String {
    env!("CARGO_BIN_EXE_benchlake").to_string()
}

/// A coordinator's test settings over `state` (`dir` holds the SQLite file
/// and the lake).
pub fn config(dir: &Path, state: &TestState, tokens: Tokens) -> CoordinatorConfig {
    CoordinatorConfig {
        state_path: dir.join("state.db"),
        state_postgres: state.postgres_url().map(String::from),
        store: StoreConfig {
            url: dir.join("lake").display().to_string(),
            ..Default::default()
        },
        lease_timeout_ms: 10_000,
        heartbeat_interval_ms: 100,
        agent_lost_after_ms: 10_000,
        job_lease_timeout_ms: 10_000,
        task_max_attempts: 3,
        job_max_attempts: 3,
        retry_backoff_ms: 10,
        retry_backoff_max_ms: 100,
        tick_ms: 100,
        tokens,
        background: false,
        ..Default::default()
    }
}

/// A one-job-at-a-time test worker of `coordinator` on the lake and scratch
/// under `dir`.
pub fn worker_config(coordinator: &str, name: &str, dir: &Path) -> benchlake_worker::WorkerConfig {
    benchlake_worker::WorkerConfig {
        coordinator: coordinator.to_string(),
        token: None,
        name: name.to_string(),
        store: StoreConfig {
            url: dir.join("lake").display().to_string(),
            ..Default::default()
        },
        concurrency: 1,
        scratch_dir: dir.join("scratch"),
        lease_wait: Duration::from_millis(200),
        commit_delay: Duration::ZERO,
        retry_for: benchlake_proto::retry::DEFAULT_RETRY_FOR,
    }
}

/// A coordinator over `cfg`'s state (SQLite file or PostgreSQL database,
/// where it takes the lead) and lake on the manual `clock`.
pub fn open_coordinator(cfg: CoordinatorConfig, clock: &ManualClock) -> Arc<Coordinator> {
    let on_pg = cfg.state_postgres.is_some();
    let file = cfg.state_path.clone();
    let coord = Coordinator::open(cfg, Arc::new(clock.clone())).unwrap();
    assert!(
        !(on_pg && file.exists()),
        "a coordinator on PostgreSQL created the SQLite file {}",
        file.display()
    );
    coord
}

/// Serves `coord` on `listener` until the returned switch turns true.
pub fn serve_coordinator(
    coord: Arc<Coordinator>,
    listener: tokio::net::TcpListener,
) -> watch::Sender<bool> {
    let (stop, mut rx) = watch::channel(false);
    tokio::spawn(async move {
        benchlake_coordinator::serve(coord, listener, async move {
            let _ = rx.wait_for(|v| *v).await;
        })
        .await
        .unwrap();
    });
    stop
}

impl Cluster {
    pub async fn start(tokens: Tokens) -> Self {
        Self::start_with(tokens, |_| {}).await
    }

    /// [`Cluster::start`], with `f` adjusting the coordinator's configuration.
    pub async fn start_with(tokens: Tokens, f: impl FnOnce(&mut CoordinatorConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = TestState::new();
        let mut cfg = config(dir.path(), &state, tokens);
        f(&mut cfg);
        let clock = ManualClock::new(T0);
        let coord = open_coordinator(cfg, &clock);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = serve_coordinator(coord.clone(), listener);
        Self {
            dir,
            state,
            coord,
            clock,
            addr,
            agents: HashMap::new(),
            workers: Vec::new(),
            stop,
            token: None,
        }
    }

    pub fn lake_dir(&self) -> PathBuf {
        self.dir.path().join("lake")
    }

    pub async fn add_agent(&mut self, name: &str, token: Option<&str>) {
        let token = token.map(String::from);
        self.add_agent_with(name, |cfg| cfg.token = token).await;
    }

    /// An agent with its own catalog (TOML) instead of [`catalog`].
    pub async fn add_agent_with_catalog(&mut self, name: &str, toml: &str) {
        let cat = benchlake_core::bench::Catalog::from_toml(toml).unwrap();
        self.add_agent_with(name, |cfg| cfg.catalog = cat).await;
    }

    /// An agent whose config `f` adjusts (catalog, address, mpirun, ...) after
    /// the defaults of [`Cluster::add_agent`].
    pub async fn add_agent_with(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut benchlake_agent::AgentConfig),
    ) {
        let mut cfg =
            benchlake_agent::AgentConfig::new(&self.addr, self.dir.path().join("work").join(name))
                .unwrap();
        cfg.name = name.to_string();
        cfg.catalog = benchlake_core::bench::Catalog::from_toml(&catalog(&bin())).unwrap();
        cfg.poll_interval = Duration::from_millis(30);
        // Benchmarks run as the test's own user (root in CI: said explicitly).
        cfg.run_as = Some(benchlake_agent::contain::current_user_name());
        f(&mut cfg);
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            if let Err(e) = benchlake_agent::run(cfg, rx).await {
                eprintln!("agent ended: {e}");
            }
        });
        self.agents.insert(name.to_string(), tx);
        for _ in 0..200 {
            let listed = self
                .cluster()
                .list_agents(pb::ListAgentsRequest {})
                .await
                .map(|r| r.into_inner().agents.iter().any(|a| a.name == name))
                .unwrap_or(false);
            if listed {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("agent {name} did not register");
    }

    /// A worker offering only `executors`.
    pub fn add_worker_with(&mut self, name: &str, executors: benchlake_worker::Executors) {
        self.spawn_worker(name, None, executors, 1);
    }

    /// Stops every worker started so far.
    pub fn stop_workers(&mut self) {
        for w in self.workers.drain(..) {
            let _ = w.send(true);
        }
    }

    pub fn stop_agent(&mut self, name: &str) {
        if let Some(tx) = self.agents.remove(name) {
            let _ = tx.send(true);
        }
    }

    pub fn add_worker(&mut self, name: &str, token: Option<&str>) {
        self.spawn_worker(name, token, benchlake_worker::Executors::builtin(), 1);
    }

    /// A worker running `slots` jobs at a time (it leases as `NAME.0`, `NAME.1`, …).
    pub fn add_worker_slots(&mut self, name: &str, token: Option<&str>, slots: usize) {
        self.spawn_worker(name, token, benchlake_worker::Executors::builtin(), slots);
    }

    fn spawn_worker(
        &mut self,
        name: &str,
        token: Option<&str>,
        executors: benchlake_worker::Executors,
        slots: usize,
    ) {
        let mut cfg = worker_config(&self.addr, name, self.dir.path());
        cfg.concurrency = slots;
        cfg.token = token.map(String::from);
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            let _ = benchlake_worker::run(cfg, executors, rx).await;
        });
        self.workers.push(tx);
    }

    fn ch(&self) -> (Channel, Auth) {
        (
            channel(&self.addr).unwrap(),
            Auth::new(self.token.as_deref()).unwrap(),
        )
    }
    pub fn runs(&self) -> pb::run_service_client::RunServiceClient<Ch> {
        let (c, a) = self.ch();
        pb::run_service_client::RunServiceClient::with_interceptor(c, a)
    }
    pub fn schedules(&self) -> pb::schedule_service_client::ScheduleServiceClient<Ch> {
        let (c, a) = self.ch();
        pb::schedule_service_client::ScheduleServiceClient::with_interceptor(c, a)
    }
    pub fn cluster(&self) -> pb::cluster_service_client::ClusterServiceClient<Ch> {
        let (c, a) = self.ch();
        pb::cluster_service_client::ClusterServiceClient::with_interceptor(c, a)
    }
    pub fn workers_client(
        &self,
        token: Option<&str>,
    ) -> pb::worker_service_client::WorkerServiceClient<Ch> {
        pb::worker_service_client::WorkerServiceClient::with_interceptor(
            channel(&self.addr).unwrap(),
            Auth::new(token).unwrap(),
        )
    }
    pub fn agents_client(
        &self,
        token: Option<&str>,
    ) -> pb::agent_service_client::AgentServiceClient<Ch> {
        pb::agent_service_client::AgentServiceClient::with_interceptor(
            channel(&self.addr).unwrap(),
            Auth::new(token).unwrap(),
        )
    }

    pub async fn submit(
        &self,
        bench: &str,
        params: &[(&str, &str)],
        count: u32,
    ) -> Result<pb::Run, tonic::Status> {
        self.submit_spec(pb::BenchmarkSpec {
            nodes: Some(pb::NodeSelector {
                count,
                ..Default::default()
            }),
            ..bench_spec(bench, params)
        })
        .await
    }

    /// Submits a run of `spec` (no idempotency key).
    pub async fn submit_spec(&self, spec: pb::BenchmarkSpec) -> Result<pb::Run, tonic::Status> {
        self.runs()
            .submit_run(pb::SubmitRunRequest {
                spec: Some(spec),
                idempotency_key: String::new(),
                notify: Vec::new(),
            })
            .await
            .map(|r| r.into_inner())
    }

    pub async fn detail(&self, run_id: &str) -> pb::RunDetail {
        self.runs()
            .get_run(pb::GetRunRequest {
                run_id: run_id.into(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// Advances the manual clock (agents' heartbeats then carry the new time).
    pub fn advance(&self, ms: i64) {
        self.clock.advance(ms);
    }

    /// Advances the clock, then waits until every running agent has sent a
    /// heartbeat at the new time, so a tick right after does not see them as
    /// silent (agents heartbeat on real time, the coordinator judges on the
    /// manual clock).
    pub async fn advance_with_heartbeats(&self, ms: i64) {
        self.clock.advance(ms);
        let now = self.clock_now();
        for _ in 0..500 {
            let agents = self
                .cluster()
                .list_agents(pb::ListAgentsRequest {})
                .await
                .map(|r| r.into_inner().agents)
                .unwrap_or_default();
            let fresh = agents
                .iter()
                .filter(|a| self.agents.contains_key(&a.name))
                .all(|a| a.last_heartbeat_ms >= now);
            if fresh {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("agents did not heartbeat after the clock moved");
    }

    pub fn clock_now(&self) -> i64 {
        use benchlake_core::clock::Clock;
        self.clock.now_ms()
    }

    pub fn tick(&self) -> benchlake_coordinator::TickReport {
        self.coord.tick().unwrap()
    }

    /// Polls (ticking) until `pred` holds for the run, or panics after `secs`.
    pub async fn wait_run(
        &self,
        run_id: &str,
        secs: u64,
        pred: impl Fn(&pb::RunDetail) -> bool,
    ) -> pb::RunDetail {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let d = self.detail(run_id).await;
            if pred(&d) {
                return d;
            }
            if std::time::Instant::now() > deadline {
                panic!("run {run_id} did not reach the expected state: {d:#?}");
            }
            // Small clock steps let retry backoffs pass without expiring leases.
            self.advance(20);
            self.tick();
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn wait_settled(&self, run_id: &str, secs: u64) -> pb::RunDetail {
        self.wait_run(run_id, secs, |d| {
            let r = d.run.as_ref().unwrap();
            let fin = matches!(
                pb::RunState::try_from(r.state).unwrap(),
                pb::RunState::Succeeded | pb::RunState::Failed | pb::RunState::Cancelled
            );
            fin && d.jobs.iter().all(|j| {
                matches!(
                    pb::JobState::try_from(j.state).unwrap(),
                    pb::JobState::Done | pb::JobState::Failed | pb::JobState::Cancelled
                )
            })
        })
        .await
    }

    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
        for a in self.agents.values() {
            let _ = a.send(true);
        }
        for w in &self.workers {
            let _ = w.send(true);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub fn state(d: &pb::RunDetail) -> pb::RunState {
    pb::RunState::try_from(d.run.as_ref().unwrap().state).unwrap()
}

/// A benchmark spec with typed params on one node (callers override nodes,
/// launcher or attempts with struct update syntax).
pub fn bench_spec(bench: &str, params: &[(&str, &str)]) -> pb::BenchmarkSpec {
    pb::BenchmarkSpec {
        benchmark: bench.into(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        nodes: Some(pb::NodeSelector {
            count: 1,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The Parquet files of `table` under a local `lake`, optionally of one run,
/// in sorted order.
pub fn table_files(lake: &Path, table: &str, run_id: Option<&str>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![lake.join("tables").join(table)];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet")
                && run_id.is_none_or(|r| {
                    let key = p.strip_prefix(lake).unwrap().to_string_lossy().to_string();
                    benchlake_core::layout::parse_table_key(&key).is_some_and(|k| k.run_id == r)
                })
            {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// Every batch of `table` under a local `lake`, optionally of one run (files
/// in sorted order).
pub fn table_batches(
    lake: &Path,
    table: &str,
    run_id: Option<&str>,
) -> Vec<arrow::array::RecordBatch> {
    let mut out = Vec::new();
    for p in table_files(lake, table, run_id) {
        let f = std::fs::File::open(&p).unwrap();
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
            .unwrap()
            .build()
            .unwrap();
        out.extend(r.map(|b| b.unwrap()));
    }
    out
}

/// Rows of every Parquet file of `table` under `lake`, optionally of one run.
pub fn table_rows(lake: &Path, table: &str, run_id: Option<&str>) -> usize {
    table_batches(lake, table, run_id)
        .iter()
        .map(|b| b.num_rows())
        .sum()
}

/// A coordinator outage: stopping the server and starting a new one on the
/// same address over the same state and lake.
impl Cluster {
    /// Stops the coordinator's server (its listener closes at once, open
    /// connections are told to go away) and closes its state (the SQLite
    /// file, or the PostgreSQL connection, handing its lead on); the state
    /// and the lake stay. Until [`Cluster::restart_coordinator`], agents and
    /// workers get "connection refused"; `coord` is a stand-in over an empty
    /// in-memory store meanwhile.
    pub async fn stop_coordinator(&mut self) {
        let _ = self.stop.send(true);
        // The server holds the coordinator until its last connection closed.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while Arc::strong_count(&self.coord) > 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the coordinator's server did not stop"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Dropping the last handle closes the state file (and its exclusive
        // lock), or releases the PostgreSQL lead.
        let cfg = CoordinatorConfig {
            state_postgres: None,
            ..config(self.dir.path(), &self.state, Tokens::default())
        };
        let stand_in: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
        let lake = Lake::open(&cfg.store).unwrap();
        self.coord = Coordinator::new(stand_in, lake, Arc::new(self.clock.clone()), cfg).unwrap();
    }

    /// Starts a new coordinator on the address the old one served, over the
    /// same state, lake and clock (after [`Cluster::stop_coordinator`]).
    pub async fn restart_coordinator(&mut self, tokens: Tokens) {
        let cfg = config(self.dir.path(), &self.state, tokens);
        let coord = open_coordinator(cfg, &self.clock);
        let mut tries = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(&self.addr).await {
                Ok(l) => break l,
                Err(e) if tries < 100 => {
                    tries += 1;
                    eprintln!("rebinding {}: {e}", self.addr);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("cannot bind {} again: {e}", self.addr),
            }
        };
        self.stop = serve_coordinator(coord.clone(), listener);
        self.coord = coord;
    }
}

/// Writes an executable script (a stand-in for a benchmark, a Slurm hook).
pub fn write_script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The shell lines that make one task of a Slurm step a netprobe rank (the
/// LinkTest stand-in of the Slurm tests: real LinkTest is not installable
/// here): every rank on 127.0.0.1, rank and size from Slurm's variables,
/// then `args` (message counts and sizes).
pub fn srun_netprobe_lines(run_id: &str, args: &str) -> String {
    format!(
        "hosts=127.0.0.1; i=1\n\
         while [ $i -lt $SLURM_NTASKS ]; do hosts=$hosts,127.0.0.1; i=$((i+1)); done\n\
         exec '{bin}' netprobe --rank=$SLURM_PROCID --num-tasks=$SLURM_NTASKS --hosts=$hosts \
         --run-id={run_id} --out=pingpong_results_bin.sion {args}\n",
        bin = bin(),
    )
}
