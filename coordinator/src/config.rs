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
#[derive(Clone, Default)]
pub struct Tokens {
    pub admin: Vec<String>,
    pub user: Vec<String>,
    pub agent: Vec<String>,
    pub worker: Vec<String>,
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

    /// The role of a presented token, compared in constant time.
    pub fn role_of(&self, token: &str) -> Option<Role> {
        let mut found = None;
        for (role, list) in [
            (Role::Admin, &self.admin),
            (Role::User, &self.user),
            (Role::Agent, &self.agent),
            (Role::Worker, &self.worker),
        ] {
            for t in list {
                if ct_eq(t.as_bytes(), token.as_bytes()) && found.is_none() {
                    found = Some(role);
                }
            }
        }
        found
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Everything the coordinator needs.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// SQLite state database.
    pub state_path: PathBuf,
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
    /// Role tokens.
    pub tokens: Tokens,
    /// Run the background scheduler/reaper loop (tests drive ticks by hand when false).
    pub background: bool,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self {
            state_path: PathBuf::from("benchlake-data/state.db"),
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
            tokens: Tokens::default(),
            background: true,
        }
    }
}
