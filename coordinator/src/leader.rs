//! Leader election among coordinators that share one PostgreSQL database.
//!
//! The `leader` row holds the current leader (a name unique to each process),
//! a fencing token and the instant its lease ends, all on the database's
//! clock so coordinators' clocks need not agree. A coordinator leads while it
//! renews the row before the lease ends; another takes the row only once the
//! lease has ended, and taking it increments the token. The leader's store
//! checks the token in every transaction ([`crate::store_pg`]), so a leader
//! that stalled past its lease can no longer write.
//!
//! A standby does not listen on its gRPC port: clients given the list of all
//! coordinators connect to whichever one accepts (`benchlake_proto::client`).
//! A leader that cannot renew in time stops serving (its port closes), rather
//! than serving reads from a state it no longer owns, and stands by to lead
//! again: it never exits on its own, so a slow database that defeats every
//! coordinator's renewal in turn does not leave the cluster without a leader.
use std::time::Duration;

use crate::error::{CoordError, Result};
use crate::store_pg::{Client, connect_with};

/// Who leads now, as the leader row says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderRow {
    pub holder: String,
    pub token: i64,
    /// Milliseconds until the lease ends (negative: ended).
    pub expires_in_ms: i64,
}

/// One coordinator's side of the election.
pub struct Elector {
    url: String,
    holder: String,
    lease_ms: i64,
    client: Option<Client>,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("holder", &self.holder)
            .field("lease_ms", &self.lease_ms)
            .finish()
    }
}

const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

impl Elector {
    /// An elector for the database at `url` whose leases last `lease_ms`; its
    /// name is `label` plus a suffix unique to this process.
    pub fn new(url: &str, label: &str, lease_ms: u64) -> Self {
        Self {
            url: url.to_string(),
            holder: format!("{label}#{}", ulid::Ulid::new()),
            lease_ms: lease_ms.clamp(100, 3_600_000) as i64,
            client: None,
        }
    }

    /// This coordinator's name in the leader row.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The lease length.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms as u64)
    }

    fn client(&mut self) -> Result<&Client> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            // A row lock held by a stalled leader's transaction must not hang
            // the election: the attempt fails and is made again.
            let wait = (self.lease_ms / 3).max(50) as u64;
            self.client = Some(connect_with(
                &self.url,
                &[
                    ("lock_timeout", wait.to_string()),
                    // A renewal may take up to the lease on a loaded host:
                    // its deadline is the lease's, not the store's.
                    ("statement_timeout", self.lease_ms.max(100).to_string()),
                    // Taking the lead is rare and must survive a database crash.
                    ("synchronous_commit", "on".to_string()),
                ],
            )?);
        }
        self.client
            .as_ref()
            .ok_or_else(|| CoordError::Setup("no leader-election connection".into()))
    }

    /// One attempt to take or renew the lease: the fencing token when this
    /// coordinator leads after it, `None` while another's lease runs.
    pub fn try_acquire(&mut self) -> Result<Option<i64>> {
        let holder = self.holder.clone();
        let lease = self.lease_ms;
        let sql = format!(
            "UPDATE leader SET token = CASE WHEN holder = $1 THEN token ELSE token + 1 END,
               holder = $1, expires_ms = {NOW_MS} + $2
             WHERE id = 1 AND (holder = $1 OR expires_ms < {NOW_MS}) RETURNING token"
        );
        let out = self
            .client()?
            .query_sql(&sql, &[&holder, &lease])
            .map_err(CoordError::from);
        match out {
            Ok(rows) => Ok(rows.first().map(|r| r.get::<_, i64>(0))),
            Err(e) => {
                // The next attempt opens a new connection.
                self.client = None;
                Err(e)
            }
        }
    }

    /// Gives the lease up at a clean stop, so a standby takes over at once
    /// instead of after the lease.
    pub fn release(&mut self) -> Result<()> {
        let holder = self.holder.clone();
        self.client()?.query_sql(
            &format!("UPDATE leader SET expires_ms = {NOW_MS} - 1 WHERE id = 1 AND holder = $1"),
            &[&holder],
        )?;
        Ok(())
    }

    /// The leader row.
    pub fn current(&mut self) -> Result<LeaderRow> {
        let rows = self.client()?.query_sql(
            &format!("SELECT holder, token, expires_ms - {NOW_MS} FROM leader WHERE id = 1"),
            &[],
        )?;
        let r = rows
            .first()
            .ok_or_else(|| CoordError::Setup("state database has no leader row".into()))?;
        Ok(LeaderRow {
            holder: r.get(0),
            token: r.get(1),
            expires_in_ms: r.get(2),
        })
    }
}

/// How often a leader renews and a standby tries: a third of the lease, so a
/// leader survives two lost renewals and a standby notices an ended lease
/// within a third of it.
pub fn poll_interval(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(50))
}

/// Runs `f` with the elector on a blocking thread.
pub async fn with_elector<T: Send + 'static>(
    el: std::sync::Arc<std::sync::Mutex<Elector>>,
    f: impl FnOnce(&mut Elector) -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(move || {
        let mut g = el.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    })
    .await
    .map_err(|e| CoordError::Setup(format!("leader election task: {e}")))?
}
