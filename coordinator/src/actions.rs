//! The actions people take on runs, schedules, agents and nodes, in one
//! place for the gRPC API and the dashboard (docs/architecture.md, "Actions
//! and the audit trail").
//!
//! Each action checks the caller's rights ([`crate::access`]: an owner or an
//! admin for runs and schedules, an admin for agents and nodes), makes its
//! change in one store transaction, hands the transaction's effects to
//! [`Coordinator::apply`], and writes an [`AuditRow`] ([`crate::audit`]): in
//! the same transaction when it succeeds, right after when it is refused or
//! fails. The gRPC handlers ([`crate::grpc`]) and the dashboard's forms
//! ([`crate::dashboard::actions`]) call these functions and nothing else, so
//! both paths check, act and record alike.
use crate::Coordinator;
use crate::access;
use crate::audit::{Actor, AuditRow, action};
use crate::config::Identity;
use crate::error::{CoordError, Result};
use crate::lifecycle::{self, Effects};
use crate::model::*;
use crate::scheduler::{self, CronSpec};
use crate::store::Tx;

/// A schedule by id or name.
pub(crate) fn find_schedule(tx: &mut dyn Tx, id_or_name: &str) -> Result<ScheduleRow> {
    if let Some(s) = tx.get_schedule(id_or_name)? {
        return Ok(s);
    }
    tx.schedule_by_name(id_or_name)?
        .ok_or_else(|| CoordError::NotFound(format!("schedule_id: no schedule '{id_or_name}'")))
}

/// [`find_schedule`], when the caller may act on it ([`access::require_owner`]).
pub(crate) fn owned_schedule(
    tx: &mut dyn Tx,
    id: &Identity,
    id_or_name: &str,
) -> Result<ScheduleRow> {
    let s = find_schedule(tx, id_or_name)?;
    access::require_owner(id, s.owner.as_deref(), &format!("schedule '{}'", s.name))?;
    Ok(s)
}

/// Run `run_id`, when the caller may act on it ([`access::require_owner`]).
pub(crate) fn owned_run(tx: &mut dyn Tx, id: &Identity, run_id: &str) -> Result<RunRow> {
    let run = tx
        .get_run(run_id)?
        .ok_or_else(|| CoordError::NotFound(format!("run_id: no run '{run_id}'")))?;
    access::require_owner(id, run.owner.as_deref(), &format!("run {run_id}"))?;
    Ok(run)
}

impl Coordinator {
    /// Runs action `f` in one transaction and records it: `f` returns its
    /// result, the audit detail and its effects.
    pub(crate) async fn audited<T: Send + 'static>(
        &self,
        who: &Actor,
        what: &str,
        target: &str,
        f: impl FnOnce(&mut dyn Tx) -> Result<(T, String, Effects)> + Send + 'static,
    ) -> Result<T> {
        let row = AuditRow::new(who, what, target, self.now());
        let ok = row.clone();
        let res = self
            .db(move |tx| {
                let (t, detail, fx) = f(tx)?;
                tx.insert_audit(&ok.ok(detail))?;
                Ok((t, fx))
            })
            .await;
        match res {
            Ok((t, fx)) => {
                self.apply(fx);
                tracing::info!(who = %row.who, via = %row.via, action = what, object = %target, "action taken");
                Ok(t)
            }
            Err(e) => {
                self.audit_failure(row.failed(&e)).await;
                Err(e)
            }
        }
    }

    /// Records a refused or failed action (a failure to record is logged).
    async fn audit_failure(&self, row: AuditRow) {
        tracing::warn!(who = %row.who, via = %row.via, action = %row.action, object = %row.target, outcome = %row.outcome, "action not taken: {}", row.detail);
        if let Err(e) = self.db(move |tx| tx.insert_audit(&row)).await {
            tracing::warn!(error = %e, "cannot record the action in the audit trail");
        }
    }

    /// Records an action taken outside a store transaction (node drains).
    async fn audit_done(&self, row: AuditRow) {
        tracing::info!(who = %row.who, via = %row.via, action = %row.action, object = %row.target, "action taken: {}", row.detail);
        if let Err(e) = self.db(move |tx| tx.insert_audit(&row)).await {
            tracing::warn!(error = %e, "cannot record the action in the audit trail");
        }
    }

    /// Starts a run of schedule `schedule` (id or name) now, unless one is
    /// active and the schedule does not allow overlap; `out` converts the
    /// new run inside the same transaction.
    pub async fn trigger_schedule<T: Send + 'static>(
        &self,
        who: &Actor,
        schedule: &str,
        out: impl FnOnce(&mut dyn Tx, &RunRow) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let now = self.now();
        let cfg = self.cfg.clone();
        let (id, sched) = (who.id.clone(), schedule.to_string());
        self.audited(who, action::SCHEDULE_TRIGGER, schedule, move |tx| {
            let s = owned_schedule(tx, &id, &sched)?;
            if !s.allow_overlap && !tx.active_runs_of_schedule(&s.schedule_id)?.is_empty() {
                return Err(CoordError::FailedPrecondition(format!(
                    "schedule '{}' has an active run and allow_overlap is off",
                    s.name
                )));
            }
            let (run, fx) = scheduler::fire_one(tx, &cfg, &s, now, now)?;
            let detail = format!("run {}", run.run_id);
            Ok((out(tx, &run)?, detail, fx))
        })
        .await
    }

    /// Pauses (`paused`) or resumes schedule `schedule` (id or name).
    /// Instants that passed while it was paused are not caught up.
    pub async fn pause_schedule(
        &self,
        who: &Actor,
        schedule: &str,
        paused: bool,
    ) -> Result<ScheduleRow> {
        let now = self.now();
        let (id, sched) = (who.id.clone(), schedule.to_string());
        let what = if paused {
            action::SCHEDULE_PAUSE
        } else {
            action::SCHEDULE_RESUME
        };
        self.audited(who, what, schedule, move |tx| {
            let mut s = owned_schedule(tx, &id, &sched)?;
            let was = s.paused;
            if s.paused && !paused {
                let cron = CronSpec::parse(&s.cron, &s.time_zone)?;
                s.next_fire_ms = cron.next_after(now);
            }
            s.paused = paused;
            tx.update_schedule(&s)?;
            let detail = match (was, paused) {
                (true, true) => "was paused already".to_string(),
                (false, false) => "was not paused".to_string(),
                (_, true) => "paused".to_string(),
                (_, false) => format!(
                    "resumed; next run {}",
                    s.next_fire_ms
                        .map(crate::silence::fmt_time)
                        .unwrap_or_else(|| "never".into())
                ),
            };
            Ok((s, detail, Effects::default()))
        })
        .await
    }

    /// Cancels run `run_id` with `reason`; `out` converts the run inside the
    /// same transaction.
    pub async fn cancel_run<T: Send + 'static>(
        &self,
        who: &Actor,
        run_id: &str,
        reason: &str,
        out: impl FnOnce(&mut dyn Tx, &RunRow) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let now = self.now();
        let cfg = self.cfg.clone();
        let (id, run_id2, reason) = (who.id.clone(), run_id.to_string(), reason.to_string());
        self.audited(who, action::RUN_CANCEL, run_id, move |tx| {
            let run_id = run_id2.as_str();
            owned_run(tx, &id, run_id)?;
            let (run, fx) = lifecycle::run::cancel(tx, &cfg, run_id, &reason, now)?;
            let detail = if reason.is_empty() {
                run.state.as_str().to_string()
            } else {
                format!("{}: {reason}", run.state.as_str())
            };
            Ok((out(tx, &run)?, detail, fx))
        })
        .await
    }

    /// Re-runs the failed tasks of finished run `run_id` as a new run (same
    /// benchmark, parameters and agents, owned by the same owner); `out`
    /// converts the new run inside the same transaction.
    pub async fn rerun_failed<T: Send + 'static>(
        &self,
        who: &Actor,
        run_id: &str,
        out: impl FnOnce(&mut dyn Tx, &RunRow) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let now = self.now();
        let cfg = self.cfg.clone();
        let (id, run_id2) = (who.id.clone(), run_id.to_string());
        self.audited(who, action::RUN_RERUN, run_id, move |tx| {
            let run_id = run_id2.as_str();
            owned_run(tx, &id, run_id)?;
            let (run, fx) = lifecycle::run::rerun_failed(tx, &cfg, run_id, now)?;
            let detail = format!("run {}", run.run_id);
            Ok((out(tx, &run)?, detail, fx))
        })
        .await
    }

    /// Drains agent `name` (no new tasks are placed on it; the running ones
    /// finish) or resumes it (`drain` false). Admins only.
    pub async fn drain_agent(&self, who: &Actor, name: &str, drain: bool) -> Result<AgentRow> {
        let what = if drain {
            action::AGENT_DRAIN
        } else {
            action::AGENT_RESUME
        };
        let (id, agent) = (who.id.clone(), name.to_string());
        let a = self
            .audited(who, what, name, move |tx| {
                access::require_admin(
                    &id,
                    if drain {
                        "draining an agent"
                    } else {
                        "resuming an agent"
                    },
                )?;
                let a = lifecycle::agent::set_drain(tx, &agent, drain)?;
                let detail = if drain { "drained" } else { "resumed" };
                Ok((a, detail.to_string(), Effects::default()))
            })
            .await?;
        let mut d = self.draining.lock().unwrap_or_else(|p| p.into_inner());
        if a.drain {
            d.insert(a.name.clone());
        } else {
            d.remove(&a.name);
        }
        Ok(a)
    }

    /// Drains Slurm node `node` by hand through benchlake's node actions
    /// ([`crate::node_actions::NodeActions::drain_by_hand`]: refused when
    /// Slurm shows it drained or down already; recorded, so benchlake may
    /// resume it) or resumes a node benchlake drained (`drain` false:
    /// [`crate::node_actions::NodeActions::resume_by_hand`]). Admins only.
    /// Returns what was done.
    pub async fn drain_node(&self, who: &Actor, node: &str, drain: bool) -> Result<String> {
        let what = if drain {
            action::NODE_DRAIN
        } else {
            action::NODE_RESUME
        };
        let now = self.now();
        let row = AuditRow::new(who, what, node, now);
        let checked = access::require_admin(
            &who.id,
            if drain {
                "draining a node"
            } else {
                "resuming a node"
            },
        )
        .and_then(|()| {
            benchlake_core::scontrol::check_node_name(node)
                .map_err(|e| CoordError::invalid("node", e))
        });
        if let Err(e) = checked {
            self.audit_failure(row.failed(&e)).await;
            return Err(e);
        }
        let (store, metrics, actions) = (
            self.store.clone(),
            self.metrics.clone(),
            self.node_actions.clone(),
        );
        let (n, by) = (node.to_string(), who.who());
        let res = tokio::task::spawn_blocking(move || {
            if drain {
                actions.drain_by_hand(&*store, &metrics, &n, &by, now)
            } else {
                actions.resume_by_hand(&*store, &metrics, &n, now)
            }
        })
        .await
        .map_err(|e| CoordError::Setup(format!("node action: {e}")))
        .and_then(|r| r);
        match res {
            Ok(detail) => {
                self.audit_done(row.ok(&detail)).await;
                Ok(detail)
            }
            Err(e) => {
                self.audit_failure(row.failed(&e)).await;
                Err(e)
            }
        }
    }

    /// The newest `limit` audit rows before row `before`, newest first.
    pub async fn audit_rows(&self, limit: u32, before: Option<String>) -> Result<Vec<AuditRow>> {
        self.db_read(move |tx| tx.list_audit(limit, before.as_deref()))
            .await
    }
}
