//! Who may do what to which object: the one home of the rights model
//! (docs/configuration.md, "Roles and owners").
//!
//! - Every run and schedule records its **owner**: the principal of the
//!   credential that created it ([`Identity::principal`]); a scheduled,
//!   backfilled or triggered run is owned by its schedule's owner, a re-run by
//!   the run it re-runs.
//! - **Reading** (runs, schedules, agents, tables, reports, Flight) is open to
//!   every user: cluster health is shared knowledge.
//! - A **user** acts (cancel, re-run, analyse, pause, resume, delete,
//!   backfill, trigger) only on what they own.
//! - An **admin** acts on everything, and alone may act on nodes: draining
//!   agents, schedules whose node action is not `off` (they drain Slurm
//!   nodes), and acknowledging findings or declaring maintenance windows
//!   (they silence notifications and drains for everyone: [`crate::silence`]).
//!   Objects recorded before owners were (no owner) are admin-only.
//! - With authentication off (no token configured: `benchlake up` on
//!   loopback) every caller is the anonymous admin.
//!
//! [`RPC_RIGHTS`] lists every method of the user-facing services with the
//! right it needs; a test checks the list against the services' descriptors,
//! so a new method cannot be added without a decision here.
use crate::config::{Identity, Role};
use crate::error::{CoordError, Result};

/// The right a method needs beyond its service's role check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// Any user (or admin).
    Read,
    /// Any user; what it creates is owned by the caller.
    Create,
    /// The owner of the object named in the request, or an admin.
    Owner,
    /// Admins only.
    Admin,
    /// Any user, but admins only when it acts on nodes (a schedule's node
    /// action other than `off`).
    CreateNodeAction,
}

/// Every method of the user-facing services with the right it needs.
pub const RPC_RIGHTS: &[(&str, &str, Right)] = &[
    ("RunService", "SubmitRun", Right::Create),
    ("RunService", "GetRun", Right::Read),
    ("RunService", "ListRuns", Right::Read),
    ("RunService", "WatchRun", Right::Read),
    ("RunService", "CancelRun", Right::Owner),
    ("RunService", "RerunFailed", Right::Owner),
    ("RunService", "AnalyzeRun", Right::Owner),
    ("RunService", "DownloadReports", Right::Read),
    ("ScheduleService", "CreateSchedule", Right::CreateNodeAction),
    ("ScheduleService", "ListSchedules", Right::Read),
    ("ScheduleService", "PauseSchedule", Right::Owner),
    ("ScheduleService", "DeleteSchedule", Right::Owner),
    ("ScheduleService", "UpdateSchedule", Right::Owner),
    ("ScheduleService", "Backfill", Right::Owner),
    ("ScheduleService", "TriggerSchedule", Right::Owner),
    ("ClusterService", "ListAgents", Right::Read),
    ("ClusterService", "DrainAgent", Right::Admin),
    ("ClusterService", "ListWorkers", Right::Read),
    ("ClusterService", "ListTables", Right::Read),
    ("ClusterService", "GetNodeHealth", Right::Read),
    ("ClusterService", "ListBenchmarks", Right::Read),
    ("ClusterService", "AcknowledgeCheck", Right::Admin),
    ("ClusterService", "ListAcknowledgements", Right::Read),
    ("ClusterService", "RemoveAcknowledgement", Right::Admin),
    ("ClusterService", "CreateMaintenance", Right::Admin),
    ("ClusterService", "ListMaintenance", Right::Read),
    ("ClusterService", "DeleteMaintenance", Right::Admin),
    ("ReplayService", "TriggerReplay", Right::Create),
];

/// The services users call (their role check is the router's; the rest of
/// the rights are here).
pub const USER_SERVICES: &[&str] = &[
    "RunService",
    "ScheduleService",
    "ClusterService",
    "ReplayService",
];

/// The right `method` of `service` needs (`None`: not a user-facing method).
pub fn right_of(service: &str, method: &str) -> Option<Right> {
    RPC_RIGHTS
        .iter()
        .find(|(s, m, _)| *s == service && *m == method)
        .map(|r| r.2)
}

/// Refuses a caller that is not an admin; `what` says what needed it.
pub fn require_admin(id: &Identity, what: &str) -> Result<()> {
    if id.role == Role::Admin {
        Ok(())
    } else {
        Err(CoordError::PermissionDenied(format!(
            "{what} needs the admin role; this credential has the {} role",
            id.role.as_str()
        )))
    }
}

/// Refuses a caller that may not act on an object owned by `owner`: admins
/// may act on all, users on what they own. `what` names the object
/// (`run 0123…`, `schedule nightly`).
pub fn require_owner(id: &Identity, owner: Option<&str>, what: &str) -> Result<()> {
    if id.role == Role::Admin {
        return Ok(());
    }
    let me = id.principal();
    match owner {
        Some(o) if me.as_deref() == Some(o) => Ok(()),
        Some(o) => Err(CoordError::PermissionDenied(format!(
            "{what} belongs to '{o}': a user acts only on their own runs and schedules (the admin role may act on all)"
        ))),
        None => Err(CoordError::PermissionDenied(format!(
            "{what} has no recorded owner (created before owners were recorded): only the admin role may act on it"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(role: Role, name: Option<&str>, cred: &str) -> Identity {
        Identity {
            role,
            name: name.map(String::from),
            credential: cred.into(),
        }
    }

    #[test]
    fn owners_act_on_their_own_admins_on_all() {
        let alice = id(Role::User, Some("alice"), "aaaa");
        let bob = id(Role::User, Some("bob"), "bbbb");
        let admin = id(Role::Admin, None, "cccc");
        assert!(require_owner(&alice, Some("alice"), "run r").is_ok());
        let e = require_owner(&bob, Some("alice"), "run r").unwrap_err();
        assert!(e.to_string().contains("belongs to 'alice'"), "{e}");
        assert!(require_owner(&admin, Some("alice"), "run r").is_ok());
        assert!(require_owner(&admin, None, "run r").is_ok());
        assert!(require_owner(&alice, None, "run r").is_err());
        // An unbound token's principal is its fingerprint.
        let anon = id(Role::User, None, "dddd");
        assert!(require_owner(&anon, Some("token:dddd"), "run r").is_ok());
        assert!(require_owner(&anon, Some("token:eeee"), "run r").is_err());
        let e = require_admin(&alice, "draining an agent").unwrap_err();
        assert!(e.to_string().contains("needs the admin role"), "{e}");
    }

    #[test]
    fn every_user_facing_method_has_a_right_and_no_other() {
        use prost::Message;
        let set = prost_types::FileDescriptorSet::decode(benchlake_proto::FILE_DESCRIPTOR_SET)
            .expect("the descriptor set decodes");
        let mut found = Vec::new();
        for f in &set.file {
            for s in &f.service {
                if USER_SERVICES.contains(&s.name()) {
                    for m in &s.method {
                        found.push((s.name().to_string(), m.name().to_string()));
                    }
                }
            }
        }
        assert_eq!(found.len(), RPC_RIGHTS.len(), "{found:?}");
        for (s, m) in &found {
            assert!(
                right_of(s, m).is_some(),
                "{s}.{m} has no entry in RPC_RIGHTS"
            );
        }
    }
}
