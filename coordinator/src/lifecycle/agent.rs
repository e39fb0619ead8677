//! Agent transitions: registration (`ONLINE`, its earlier incarnation's task
//! attempts ended), drain on and off, and liveness (`ONLINE ⇄ LOST` from the
//! in-memory heartbeats, with last-seen times persisted at most every
//! [`LAST_SEEN_PERSIST_MS`](crate::LAST_SEEN_PERSIST_MS)). `DRAINING` is not a
//! stored state: it is how a live agent with `drain` set is shown.
use std::collections::HashMap;

use super::{Effects, task};
use crate::config::CoordinatorConfig;
use crate::error::{CoordError, Result};
use crate::model::{AgentRow, AgentState};
use crate::store::Tx;

/// Who registers: the credential's fingerprint, whether it is an admin's,
/// and when the coordinator last heard from an agent of this name.
#[derive(Debug, Clone)]
pub struct Registrant<'a> {
    pub credential: &'a str,
    pub admin: bool,
    pub last_seen_ms: Option<i64>,
}

/// Registers `row` (state ONLINE, seen now): keeps the stored drain flag,
/// refuses a name held by a live agent with another credential, and ends the
/// attempts leased to an earlier incarnation. Returns the effects and the
/// drain flag kept.
pub fn register(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    row: AgentRow,
    who: &Registrant<'_>,
    now: i64,
) -> Result<(Effects, bool)> {
    register_keeping(tx, cfg, row, who, &[], now).map(|(fx, drain, _)| (fx, drain))
}

/// [`register`], keeping the attempts the agent says it still holds
/// (`held`: task and lease ids; see [`task::agent_restarted_keeping`]).
/// Also returns the ids of the tasks kept.
pub fn register_keeping(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    mut row: AgentRow,
    who: &Registrant<'_>,
    held: &[(String, String)],
    now: i64,
) -> Result<(Effects, bool, Vec<String>)> {
    let prev = tx.get_agent(&row.name)?;
    let live_after = now - cfg.agent_lost_after_ms as i64;
    // A name held by a live agent is not taken over with another credential:
    // that would end its tasks and replace its catalog.
    if let Some(p) = &prev
        && !p.credential.is_empty()
        && p.credential != who.credential
        && !who.admin
        && p.state != AgentState::Lost
        && who.last_seen_ms.unwrap_or(p.last_heartbeat_ms) >= live_after
    {
        return Err(CoordError::PermissionDenied(format!(
            "name: agent '{}' is registered and alive with another credential",
            row.name
        )));
    }
    row.drain = prev.as_ref().map(|p| p.drain).unwrap_or(false);
    row.state = AgentState::Online;
    row.registered_ms = now;
    row.last_heartbeat_ms = now;
    row.credential = who.credential.to_string();
    let drain = row.drain;
    tx.upsert_agent(&row)?;
    // A (re-)registering agent knows none of the tasks leased to an earlier
    // incarnation but those it names: the other attempts are over.
    let (fx, kept) = task::agent_restarted_keeping(tx, cfg, &row.name, held, now)?;
    Ok((fx, drain, kept))
}

/// Sets or clears an agent's drain flag; the agent as stored after.
pub fn set_drain(tx: &mut dyn Tx, name: &str, drain: bool) -> Result<AgentRow> {
    let mut a = tx
        .get_agent(name)?
        .ok_or_else(|| CoordError::NotFound(format!("name: no agent '{name}'")))?;
    a.drain = drain;
    tx.upsert_agent(&a)?;
    Ok(a)
}

/// What a liveness pass changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LivenessChanges {
    /// Agents newly LOST.
    pub lost: Vec<String>,
    /// LOST agents heartbeating again (ONLINE).
    pub back: Vec<String>,
    /// Rows written (state changes and persisted last-seen times).
    pub written: usize,
}

/// Marks agents silent for longer than `agent_lost_after_ms` LOST and LOST
/// ones that heartbeat again ONLINE, and persists last-seen times that lag
/// the in-memory `heartbeats` by [`crate::LAST_SEEN_PERSIST_MS`] or more.
/// With the store's placement index only the rows to write are read.
pub fn check_liveness(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    heartbeats: &HashMap<String, i64>,
    now: i64,
) -> Result<LivenessChanges> {
    let lost_after = cfg.agent_lost_after_ms as i64;
    let due = tx.placement().map(|v| {
        v.agents_where(|name, e| {
            let last = heartbeats
                .get(name)
                .copied()
                .unwrap_or(e.stored_heartbeat_ms);
            let silent = now - last > lost_after;
            (e.state != AgentState::Lost && silent)
                || (e.state == AgentState::Lost && !silent)
                || last < e.stored_heartbeat_ms
                || last - e.stored_heartbeat_ms >= crate::LAST_SEEN_PERSIST_MS
        })
    });
    let rows = match due {
        Some(names) => {
            let mut rows = Vec::with_capacity(names.len());
            for n in names {
                rows.extend(tx.get_agent(&n)?);
            }
            rows
        }
        None => tx.list_agents()?,
    };
    let mut out = LivenessChanges::default();
    for mut a in rows {
        let last = heartbeats
            .get(&a.name)
            .copied()
            .unwrap_or(a.last_heartbeat_ms);
        let mut changed = last != a.last_heartbeat_ms;
        a.last_heartbeat_ms = last;
        let silent = now - last > lost_after;
        if a.state != AgentState::Lost && silent {
            a.state = AgentState::Lost;
            out.lost.push(a.name.clone());
            changed = true;
        } else if a.state == AgentState::Lost && !silent {
            a.state = AgentState::Online;
            out.back.push(a.name.clone());
            changed = true;
        }
        if changed {
            tx.upsert_agent(&a)?;
            out.written += 1;
        }
    }
    Ok(out)
}
