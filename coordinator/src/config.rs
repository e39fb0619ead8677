//! Coordinator settings (flags and `BENCHLAKE_*` environment variables of
//! `benchlake coordinator` / `benchlake up`) and the role tokens.
use std::path::PathBuf;

use benchlake_core::lake::StoreConfig;

/// A caller's role (DESIGN.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Everything, including draining agents.
    Admin,
    /// Runs, schedules, replays, tables, Flight.
    User,
    /// The agent protocol.
    Agent,
    /// The worker protocol.
    Worker,
}

impl Role {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
            Role::Agent => "agent",
            Role::Worker => "worker",
        }
    }
}

/// Bearer tokens per role. With no token at all configured, authentication is off
/// (the single-user `benchlake up` default on loopback); otherwise every call must
/// carry a token of an allowed role.
///
/// Tokens may be bound to a name, written `NAME:TOKEN`. An agent or worker
/// token's holder may then act only as that agent or worker (a worker `W` also
/// as its slots `W.0`, `W.1`, …); a user or admin token's name is the owner
/// recorded on the runs and schedules it creates ([`crate::access`]). A token
/// without a name is shared by every agent (or worker) that has it and cannot
/// tell them apart; an unbound user token owns what it creates under its
/// fingerprint.
#[derive(Clone, Default)]
pub struct Tokens {
    pub admin: Vec<String>,
    pub user: Vec<String>,
    pub agent: Vec<String>,
    pub worker: Vec<String>,
}

/// Who a caller is: its role, the agent or worker name its token is bound to,
/// and a fingerprint of its credential (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The role.
    pub role: Role,
    /// The name the credential is bound to (agents and workers).
    pub name: Option<String>,
    /// SHA-256 prefix of the token (empty when authentication is off).
    pub credential: String,
}

impl Identity {
    /// The identity of every caller when authentication is off.
    pub fn anonymous_admin() -> Self {
        Self {
            role: Role::Admin,
            name: None,
            credential: String::new(),
        }
    }

    /// Whether this caller may act as agent or worker `name`: admins and
    /// unbound credentials may (subject to [`Identity::credential`] checks),
    /// bound ones only as their own name.
    pub fn may_act_as(&self, name: &str) -> bool {
        self.role == Role::Admin || self.name.as_deref().is_none_or(|n| n == name)
    }

    /// Who the caller is as an owner of runs and schedules
    /// ([`crate::access`]): the name its token is bound to (`NAME:TOKEN`),
    /// else `token:` and the token's fingerprint; `None` when authentication
    /// is off.
    pub fn principal(&self) -> Option<String> {
        match (&self.name, self.credential.is_empty()) {
            (Some(n), _) => Some(n.clone()),
            (None, false) => Some(format!("token:{}", self.credential)),
            (None, true) => None,
        }
    }

    /// Whether this caller may act as worker `name`: as
    /// [`Identity::may_act_as`], and a credential bound to `W` may also act as
    /// `W.N` (N decimal digits), the name a worker started with `--name W
    /// --concurrency K` leases under in its slot N (docs/configuration.md).
    pub fn may_act_as_worker(&self, name: &str) -> bool {
        self.may_act_as(name) || self.name.as_deref().is_some_and(|n| worker_base(name) == n)
    }
}

/// The worker a lease name belongs to: `W` for a slot name `W.N` (N decimal
/// digits), else the name itself.
pub fn worker_base(name: &str) -> &str {
    match name.rsplit_once('.') {
        Some((base, slot))
            if !base.is_empty() && !slot.is_empty() && slot.bytes().all(|b| b.is_ascii_digit()) =>
        {
            base
        }
        _ => name,
    }
}

/// Splits `NAME:TOKEN` (agent and worker lists) into its name and token.
pub fn split_bound(entry: &str) -> (Option<&str>, &str) {
    match entry.split_once(':') {
        Some((n, t))
            if !n.is_empty()
                && n.len() <= 128
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) =>
        {
            (Some(n), t)
        }
        _ => (None, entry),
    }
}

/// Fingerprint of a token: the first 16 hex digits of its SHA-256.
pub fn fingerprint(token: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(token.as_bytes())[..8])
}

impl std::fmt::Debug for Tokens {
    // Tokens are secrets: only their count is ever printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tokens {{ admin: {}, user: {}, agent: {}, worker: {} }}",
            self.admin.len(),
            self.user.len(),
            self.agent.len(),
            self.worker.len()
        )
    }
}

impl Tokens {
    /// Whether any token is configured (auth on).
    pub fn enabled(&self) -> bool {
        !(self.admin.is_empty()
            && self.user.is_empty()
            && self.agent.is_empty()
            && self.worker.is_empty())
    }

    /// Checks every token (at least 16 characters; bound names valid).
    pub fn check(&self) -> std::result::Result<(), String> {
        for (role, list) in self.lists() {
            for e in list {
                let t = split_bound(e).1;
                if t.len() < 16 {
                    return Err(format!(
                        "{} tokens must be at least 16 characters",
                        role.as_str()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Agent and worker tokens not bound to a name.
    pub fn shared(&self) -> usize {
        self.agent
            .iter()
            .chain(&self.worker)
            .filter(|e| split_bound(e).0.is_none())
            .count()
    }

    fn lists(&self) -> [(Role, &Vec<String>); 4] {
        [
            (Role::Admin, &self.admin),
            (Role::User, &self.user),
            (Role::Agent, &self.agent),
            (Role::Worker, &self.worker),
        ]
    }

    /// The identity of a presented token; every configured token is compared,
    /// in constant time.
    pub fn identify(&self, token: &str) -> Option<Identity> {
        let mut found = None;
        for (role, list) in self.lists() {
            for e in list {
                let (name, t) = split_bound(e);
                if ct_eq(t.as_bytes(), token.as_bytes()) && found.is_none() {
                    found = Some(Identity {
                        role,
                        name: name.map(String::from),
                        credential: fingerprint(token),
                    });
                }
            }
        }
        found
    }

    /// The role of a presented token.
    pub fn role_of(&self, token: &str) -> Option<Role> {
        self.identify(token).map(|i| i.role)
    }
}

/// Whether `a` equals `b`, in time independent of where they differ.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Everything the coordinator needs.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// SQLite state database (when `state_postgres` is not set).
    pub state_path: PathBuf,
    /// PostgreSQL state database (`postgres://USER@HOST:PORT/DB`): several
    /// coordinators may share it, one leads ([`crate::leader`]).
    pub state_postgres: Option<String>,
    /// Leader lease on PostgreSQL: a standby takes over at most this long
    /// (plus a third of it) after the leader stopped renewing.
    pub leader_lease_ms: u64,
    /// PostgreSQL: wait for the WAL flush at every commit
    /// ([`crate::store_pg::PgOptions::synchronous_commit`]).
    pub state_synchronous_commit: bool,
    /// The lake.
    pub store: StoreConfig,
    /// Task lease: an agent that does not heartbeat for this long loses its tasks.
    pub lease_timeout_ms: u64,
    /// Heartbeat interval told to agents.
    pub heartbeat_interval_ms: u64,
    /// An agent silent this long is LOST and gets no new tasks.
    pub agent_lost_after_ms: u64,
    /// Job lease: a worker that does not renew for this long loses its job.
    pub job_lease_timeout_ms: u64,
    /// Default attempts per task.
    pub task_max_attempts: u32,
    /// Attempts per job.
    pub job_max_attempts: u32,
    /// First retry delay; doubles per attempt.
    pub retry_backoff_ms: u64,
    /// Largest retry delay.
    pub retry_backoff_max_ms: u64,
    /// Scheduler and reaper period.
    pub tick_ms: u64,
    /// Largest raw file an agent may upload.
    pub max_upload_bytes: u64,
    /// Largest gRPC message.
    pub max_message_bytes: usize,
    /// How the node actions reach Slurm (`scontrol`, [`crate::node_actions`]).
    pub scontrol: benchlake_core::scontrol::Scontrol,
    /// How long the lake keeps raw files and tables ([`crate::retention`]).
    pub retention: crate::retention::RetentionConfig,
    /// When the coordinator merges its lake's small files ([`crate::compaction`]).
    pub compaction: crate::compaction::CompactionConfig,
    /// Role tokens.
    pub tokens: Tokens,
    /// Run the background scheduler/reaper loop (tests drive ticks by hand when false).
    pub background: bool,
    /// TLS certificate chain (PEM); with [`CoordinatorConfig::tls_key`], every
    /// service on the port (gRPC, Flight) speaks TLS only.
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) client certificates must be signed by: mutual TLS, no client
    /// without a certificate gets through the handshake.
    pub tls_client_ca: Option<PathBuf>,
    /// Tokens that may read `/metrics` and nothing else (Prometheus'); admin
    /// and user tokens may read it too ([`crate::http`]).
    pub metrics_tokens: MetricsTokens,
    /// Notifiers (webhooks) and their delivery settings ([`crate::notify`]).
    pub notify: crate::notify::NotifyConfig,
    /// OpenID Connect sign-in for the dashboard ([`crate::oidc`]).
    pub oidc: Option<crate::oidc::OidcConfig>,
}

/// Bearer tokens of the `/metrics` endpoint only (never printed).
#[derive(Clone, Default)]
pub struct MetricsTokens(pub Vec<String>);

impl std::fmt::Debug for MetricsTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MetricsTokens({})", self.0.len())
    }
}

impl MetricsTokens {
    /// Whether `token` is one of them (every one compared, in constant time).
    pub fn contains(&self, token: &str) -> bool {
        self.0
            .iter()
            .fold(false, |acc, t| acc | ct_eq(t.as_bytes(), token.as_bytes()))
    }
    /// Checks that every token has at least 16 characters.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.0.iter().any(|t| t.len() < 16) {
            return Err("metrics tokens must be at least 16 characters".into());
        }
        Ok(())
    }
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self {
            state_path: PathBuf::from("benchlake-data/state.db"),
            state_postgres: None,
            leader_lease_ms: 3_000,
            state_synchronous_commit: false,
            store: StoreConfig {
                url: "benchlake-data/lake".into(),
                ..Default::default()
            },
            lease_timeout_ms: 30_000,
            heartbeat_interval_ms: 5_000,
            agent_lost_after_ms: 30_000,
            job_lease_timeout_ms: 60_000,
            task_max_attempts: 3,
            job_max_attempts: 3,
            retry_backoff_ms: 1_000,
            retry_backoff_max_ms: 60_000,
            tick_ms: 500,
            max_upload_bytes: 64 << 30,
            max_message_bytes: 16 << 20,
            scontrol: Default::default(),
            retention: Default::default(),
            compaction: Default::default(),
            tokens: Tokens::default(),
            background: true,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            metrics_tokens: MetricsTokens::default(),
            notify: Default::default(),
            oidc: None,
        }
    }
}
