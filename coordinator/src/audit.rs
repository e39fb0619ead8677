//! The audit trail: who did what to which object, when, and how it ended
//! (the state store's `audit_log`, docs/architecture.md "Audit trail").
//!
//! Every action a person takes on runs, schedules, agents and nodes through
//! [`crate::actions`] writes one [`AuditRow`], whether it came from the
//! dashboard or from the API (CLI, gRPC clients): a successful action in the
//! same transaction as its change, a refused or failed one right after. The
//! dashboard's `/audit` page (admins) lists them, newest first. The rows stay
//! in the state store (like the drain records, they are operational history
//! of the deployment, not measurements): they are not exported to the lake.

use crate::config::Identity;
use crate::error::CoordError;
pub use crate::model::AuditRow;

/// Where an action came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The gRPC API (the CLI, any client).
    Api,
    /// The web dashboard (a logged-in session).
    Dashboard,
}

impl Via {
    /// `api` or `dashboard`.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Api => "api",
            Via::Dashboard => "dashboard",
        }
    }
}

/// Who acts, and through what.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The caller's identity (role, bound name, credential fingerprint).
    pub id: Identity,
    /// API or dashboard.
    pub via: Via,
}

impl Actor {
    /// A caller of the API.
    pub fn api(id: Identity) -> Self {
        Self { id, via: Via::Api }
    }

    /// A dashboard session.
    pub fn dashboard(id: Identity) -> Self {
        Self {
            id,
            via: Via::Dashboard,
        }
    }

    /// The name recorded as `who`: the token's bound name, `token:` and its
    /// fingerprint, or `anonymous` when authentication is off.
    pub fn who(&self) -> String {
        self.id
            .principal()
            .unwrap_or_else(|| "anonymous".to_string())
    }
}

/// The actions recorded, by the name the audit trail shows.
pub mod action {
    pub const SCHEDULE_CREATE: &str = "schedule.create";
    pub const SCHEDULE_CHANGE: &str = "schedule.change";
    pub const SCHEDULE_DELETE: &str = "schedule.delete";
    pub const SCHEDULE_TRIGGER: &str = "schedule.trigger";
    pub const SCHEDULE_PAUSE: &str = "schedule.pause";
    pub const SCHEDULE_RESUME: &str = "schedule.resume";
    pub const RUN_CANCEL: &str = "run.cancel";
    pub const RUN_RERUN: &str = "run.rerun";
    pub const AGENT_DRAIN: &str = "agent.drain";
    pub const AGENT_RESUME: &str = "agent.resume";
    pub const NODE_DRAIN: &str = "node.drain";
    pub const NODE_RESUME: &str = "node.resume";
    pub const ACK_CREATE: &str = "ack.create";
    pub const ACK_REMOVE: &str = "ack.remove";
    pub const MAINTENANCE_CREATE: &str = "maintenance.create";
    pub const MAINTENANCE_REMOVE: &str = "maintenance.remove";
}

/// Longest `target` and `detail` kept (longer ones are cut).
pub const MAX_TEXT: usize = 1000;

fn cut(s: &str) -> String {
    if s.len() <= MAX_TEXT {
        return s.to_string();
    }
    let mut end = MAX_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A ULID of `now` greater than every one this process made before, so
/// rows of the same millisecond keep their order (a plain ULID's low bits
/// are random).
fn next_id(now: i64) -> String {
    static GEN: std::sync::Mutex<ulid::Generator> = std::sync::Mutex::new(ulid::Generator::new());
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(now.max(0) as u64);
    let mut g = GEN.lock().unwrap_or_else(|p| p.into_inner());
    match g.generate_from_datetime(at) {
        Ok(u) => u.to_string(),
        // 2^80 ids in one millisecond: cannot happen; stay unique anyway.
        Err(_) => benchlake_core::ids::new_id_at(now),
    }
}

impl AuditRow {
    /// The row of `action` on `target` by `who` at `now`.
    pub fn new(who: &Actor, action: &str, target: &str, now: i64) -> Self {
        Self {
            id: next_id(now),
            at_ms: now,
            who: who.who(),
            role: who.id.role.as_str().to_string(),
            via: who.via.as_str().to_string(),
            action: action.to_string(),
            target: cut(target),
            outcome: "ok".to_string(),
            detail: String::new(),
        }
    }

    /// With `detail` (a success's result).
    pub fn ok(mut self, detail: impl AsRef<str>) -> Self {
        self.detail = cut(detail.as_ref());
        self
    }

    /// As refused (permission) or failed (anything else) with `e`.
    pub fn failed(mut self, e: &CoordError) -> Self {
        self.outcome = match e {
            CoordError::PermissionDenied(_) => "refused",
            _ => "failed",
        }
        .to_string();
        self.detail = cut(&e.to_string());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Role;

    #[test]
    fn rows_name_who_and_cut_long_text() {
        let alice = Actor::dashboard(Identity {
            role: Role::Admin,
            name: Some("alice".into()),
            credential: "ab".into(),
        });
        let r = AuditRow::new(&alice, action::RUN_CANCEL, &"x".repeat(2000), 5).ok("cancelled");
        assert_eq!(
            (
                r.who.as_str(),
                r.role.as_str(),
                r.via.as_str(),
                r.outcome.as_str()
            ),
            ("alice", "admin", "dashboard", "ok")
        );
        assert_eq!(r.target.chars().count(), MAX_TEXT + 1);
        let anon = Actor::api(Identity::anonymous_admin());
        assert_eq!(anon.who(), "anonymous");
        let e = CoordError::PermissionDenied("no".into());
        assert_eq!(
            AuditRow::new(&anon, action::RUN_RERUN, "r", 1)
                .failed(&e)
                .outcome,
            "refused"
        );
        // Rows made in the same millisecond keep their order.
        let ids: Vec<String> = (0..50)
            .map(|_| AuditRow::new(&anon, action::RUN_RERUN, "r", 9).id)
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        let e = CoordError::NotFound("no run".into());
        assert_eq!(
            AuditRow::new(&anon, action::RUN_RERUN, "r", 1)
                .failed(&e)
                .outcome,
            "failed"
        );
    }
}
