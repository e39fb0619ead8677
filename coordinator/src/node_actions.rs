//! Drains and resumes of Slurm nodes after node-level checks (docs/slurm.md,
//! "Draining failing nodes").
//!
//! A schedule's [`NodeAction`] says what happens when the `node_health` rows
//! of one of its runs are committed ([`crate::commit`] hands them here, off
//! the request path, once the verdict index holds them):
//!
//! - `OFF` (the default): nothing.
//! - `DRY_RUN`: every drain and resume that `DRAIN` would make is logged
//!   (`node action (dry run)`) and kept in [`NodeActions::events_of`] (shown
//!   by `benchlake node-check`); Slurm is not touched.
//! - `DRAIN`: a node with a FAIL (or REGRESSION) row is drained with
//!   `scontrol update nodename=N state=drain reason="benchlake: CHECK VALUE vs
//!   REFERENCE (run RUN_ID)"` unless it is already drained or down (whoever
//!   did it: benchlake never overwrites another reason), and the drain is
//!   recorded in the state store ([`NodeDrain`]). A node benchlake drained is
//!   resumed when a later run of a schedule with `DRAIN` passes the check it
//!   was drained for on that node and has no FAIL or ERROR for it — and only
//!   when `scontrol show node` still shows it drained with exactly
//!   benchlake's reason. Otherwise the record is forgotten and the node left
//!   as it is (an administrator who re-drained it, or changed the reason,
//!   keeps it: the mistake NHC users met in mej/nhc#134). A record whose
//!   node an administrator resumed by hand is stale: the next failure drains
//!   the node again (and records that drain).
//!
//! `scontrol` runs as an argument vector ([`benchlake_core::scontrol`]) with
//! the program `--scontrol` names; its failures are logged and the record is
//! only written after a drain succeeded, so a retry at the next run is always
//! possible. Only the leading coordinator commits jobs, so only it acts. An
//! action lost to a coordinator stopped between the commit and the action is
//! taken at the schedule's next run.
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use benchlake_core::scontrol::{self, Scontrol};
use benchlake_proto::v1 as pb;
use serde::Serialize;

use crate::metrics::Metrics;
pub use crate::model::{NodeAction, NodeDrain};
use crate::store::StateStore;
use crate::verdicts::{CheckRow, VerdictIndex};

impl NodeAction {
    /// The name users type and see (`off`, `dry-run`, `drain`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::DryRun => "dry-run",
            Self::Drain => "drain",
        }
    }

    /// The protocol value.
    pub fn to_pb(self) -> i32 {
        (match self {
            Self::Off => pb::NodeAction::Off,
            Self::DryRun => pb::NodeAction::DryRun,
            Self::Drain => pb::NodeAction::Drain,
        }) as i32
    }

    /// From the protocol value (None: unknown).
    pub fn from_pb(v: i32) -> Option<Self> {
        match pb::NodeAction::try_from(v).ok()? {
            pb::NodeAction::Unspecified | pb::NodeAction::Off => Some(Self::Off),
            pb::NodeAction::DryRun => Some(Self::DryRun),
            pb::NodeAction::Drain => Some(Self::Drain),
        }
    }
}

/// What benchlake did (or, in a dry run, would have done) to a node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeEvent {
    pub at_ms: i64,
    pub node: String,
    pub run_id: String,
    /// `drain`, `resume`, `left-alone`, `forgot`, `error`, `silenced`.
    pub action: String,
    pub dry_run: bool,
    /// What it did and why, for people.
    pub detail: String,
}

/// Events kept per coordinator (newest last).
pub const MAX_EVENTS: usize = 1000;

/// The node actions of a coordinator: how to reach scontrol, and what was
/// done lately.
#[derive(Debug)]
pub struct NodeActions {
    scontrol: Scontrol,
    events: Mutex<VecDeque<NodeEvent>>,
}

impl Default for NodeActions {
    fn default() -> Self {
        Self::new(Scontrol::default())
    }
}

/// One decision for one node after a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Drain `node` for `check` with `reason`; `recorded` is the drain
    /// benchlake recorded earlier, if any (still in force when Slurm shows
    /// the node drained with its reason; stale when an administrator resumed
    /// the node or changed the reason since).
    Drain {
        node: String,
        check: String,
        reason: String,
        recorded: Option<NodeDrain>,
    },
    /// Resume `node`, drained by benchlake as `drain` says, now passing.
    Resume { node: String, drain: NodeDrain },
}

/// The decisions of one run from its `node_health` rows (node, row) and the
/// drains on record (by node). A node with a FAIL is drained for its first
/// failing check (by name), else one with a REGRESSION for its first
/// regressed check (whether benchlake's drain of it is still in force
/// is Slurm's to say: [`NodeActions::execute`]); a node
/// without FAIL or ERROR whose record names a check this later run passed is
/// resumed. The node `*` (rows about no node) is never acted on.
pub fn decide(
    run_id: &str,
    rows: &[(String, CheckRow)],
    drains: &BTreeMap<String, NodeDrain>,
) -> Vec<Decision> {
    let mut by_node: BTreeMap<&str, Vec<&CheckRow>> = BTreeMap::new();
    for (n, r) in rows {
        if scontrol::check_node_name(n).is_ok() {
            by_node.entry(n.as_str()).or_default().push(r);
        }
    }
    let mut out = Vec::new();
    for (node, mut rs) in by_node {
        rs.sort_by(|a, b| a.check.cmp(&b.check));
        // A FAIL first, else a REGRESSION (a finding too: docs/io.md, "Outcomes").
        let failing = rs.iter().find(|r| r.status == "FAIL").or_else(|| {
            rs.iter()
                .find(|r| benchlake_core::verdict::is_failure(&r.status))
        });
        if let Some(f) = failing {
            out.push(Decision::Drain {
                node: node.to_string(),
                check: f.check.clone(),
                reason: scontrol::drain_reason(&f.check, f.value, f.reference, run_id),
                recorded: drains.get(node).cloned(),
            });
            continue;
        }
        if rs.iter().any(|r| r.status != "PASS") {
            continue;
        }
        if let Some(d) = drains.get(node)
            && run_id > d.run_id.as_str()
            && rs.iter().any(|r| r.check == d.check)
        {
            out.push(Decision::Resume {
                node: node.to_string(),
                drain: d.clone(),
            });
        }
    }
    out
}

impl NodeActions {
    /// Node actions through `scontrol`.
    pub fn new(scontrol: Scontrol) -> Self {
        Self {
            scontrol,
            events: Mutex::new(VecDeque::new()),
        }
    }

    /// The events of `node`, oldest first.
    pub fn events_of(&self, node: &str) -> Vec<NodeEvent> {
        let g = self.events.lock().unwrap_or_else(|p| p.into_inner());
        g.iter().filter(|e| e.node == node).cloned().collect()
    }

    /// The events of `run_id`, oldest first.
    pub fn events_of_run(&self, run_id: &str) -> Vec<NodeEvent> {
        let g = self.events.lock().unwrap_or_else(|p| p.into_inner());
        g.iter().filter(|e| e.run_id == run_id).cloned().collect()
    }

    /// How this coordinator reaches scontrol.
    pub fn scontrol(&self) -> &Scontrol {
        &self.scontrol
    }

    fn event(&self, metrics: &Metrics, e: NodeEvent) {
        metrics
            .node_actions
            .inc(&[&e.action, if e.dry_run { "true" } else { "false" }]);
        if e.action == "error" {
            tracing::warn!(node = %e.node, run = %e.run_id, action = %e.action, dry_run = e.dry_run, "node action: {}", e.detail);
        } else if e.dry_run {
            tracing::info!(node = %e.node, run = %e.run_id, action = %e.action, "node action (dry run): {}", e.detail);
        } else {
            tracing::info!(node = %e.node, run = %e.run_id, action = %e.action, "node action: {}", e.detail);
        }
        let mut g = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if g.len() >= MAX_EVENTS {
            g.pop_front();
        }
        g.push_back(e);
    }

    /// Carries out `decisions` of `run_id` (blocking: scontrol and the
    /// store), counting each action in `metrics`
    /// (`benchlake_node_actions_total`).
    #[allow(clippy::too_many_arguments)]
    pub fn execute(
        &self,
        store: &dyn StateStore,
        metrics: &Metrics,
        action: NodeAction,
        run_id: &str,
        schedule_id: Option<&str>,
        decisions: Vec<Decision>,
        now: i64,
    ) {
        let dry_run = action == NodeAction::DryRun;
        let ev = |node: &str, what: &str, detail: String| NodeEvent {
            at_ms: now,
            node: node.to_string(),
            run_id: run_id.to_string(),
            action: what.to_string(),
            dry_run,
            detail,
        };
        for d in decisions {
            match d {
                Decision::Drain {
                    node,
                    check,
                    reason,
                    recorded,
                } => {
                    if dry_run {
                        if recorded.is_none() {
                            self.event(
                                metrics,
                                ev(&node, "drain", format!("would drain {node}: {reason}")),
                            );
                        }
                        continue;
                    }
                    match self.scontrol.show_node(&node) {
                        Err(e) => {
                            self.event(
                                metrics,
                                ev(&node, "error", format!("cannot read {node}: {e}")),
                            );
                            continue;
                        }
                        Ok(None) => {
                            self.event(
                                metrics,
                                ev(
                                    &node,
                                    "error",
                                    format!("scontrol does not know node {node}"),
                                ),
                            );
                            continue;
                        }
                        Ok(Some(st))
                            if st.drained()
                                && recorded
                                    .as_ref()
                                    .is_some_and(|r| st.reason.as_deref() == Some(&r.reason)) =>
                        {
                            // Still drained by benchlake: nothing to do.
                            tracing::debug!(node = %node, "node action: already drained by benchlake");
                            continue;
                        }
                        Ok(Some(st)) if st.drained() || st.down() => {
                            if recorded.is_some() {
                                // Another reason now: the drain is no longer benchlake's.
                                if let Err(e) =
                                    store.transact(|tx| tx.delete_node_drain(&node).map(|_| ()))
                                {
                                    self.event(
                                        metrics,
                                        ev(
                                            &node,
                                            "error",
                                            format!("cannot forget the drain of {node}: {e}"),
                                        ),
                                    );
                                }
                            }
                            self.event(metrics, ev(
                                &node,
                                "left-alone",
                                format!(
                                    "{node} is already {} (Reason={}): not drained again, and never resumed by benchlake",
                                    st.state,
                                    st.reason.as_deref().unwrap_or("none")
                                ),
                            ));
                            continue;
                        }
                        Ok(Some(_)) => {}
                    }
                    if let Err(e) = self.scontrol.drain(&node, &reason) {
                        self.event(
                            metrics,
                            ev(&node, "error", format!("cannot drain {node}: {e}")),
                        );
                        continue;
                    }
                    let rec = NodeDrain {
                        node: node.clone(),
                        reason: reason.clone(),
                        run_id: run_id.to_string(),
                        check,
                        schedule_id: schedule_id.map(String::from),
                        drained_ms: now,
                    };
                    match store.transact(|tx| tx.upsert_node_drain(&rec)) {
                        Ok(()) => self.event(metrics, ev(&node, "drain", format!("drained {node}: {reason}"))),
                        Err(e) => self.event(metrics, ev(
                            &node,
                            "error",
                            format!("drained {node} but cannot record it (it will not be resumed by benchlake): {e}"),
                        )),
                    }
                }
                Decision::Resume { node, drain } => {
                    if dry_run {
                        self.event(
                            metrics,
                            ev(
                                &node,
                                "resume",
                                format!("would resume {node}: {} passes again", drain.check),
                            ),
                        );
                        continue;
                    }
                    let st = match self.scontrol.show_node(&node) {
                        Ok(st) => st,
                        Err(e) => {
                            self.event(
                                metrics,
                                ev(&node, "error", format!("cannot read {node}: {e}")),
                            );
                            continue;
                        }
                    };
                    let ours = st
                        .as_ref()
                        .is_some_and(|s| s.drained() && s.reason.as_deref() == Some(&drain.reason));
                    if ours && let Err(e) = self.scontrol.resume(&node) {
                        self.event(
                            metrics,
                            ev(&node, "error", format!("cannot resume {node}: {e}")),
                        );
                        continue;
                    }
                    let forgot = store.transact(|tx| tx.delete_node_drain(&node));
                    let detail = match (&st, ours) {
                        (_, true) => format!(
                            "resumed {node}: {} passes again (drained by run {})",
                            drain.check, drain.run_id
                        ),
                        (None, _) => {
                            format!("forgot the drain of {node}: scontrol does not know it")
                        }
                        (Some(s), _) if !s.drained() => format!(
                            "forgot the drain of {node}: it is no longer drained ({})",
                            s.state
                        ),
                        (Some(s), _) => format!(
                            "forgot the drain of {node} and left it drained: its reason is now '{}', not benchlake's",
                            s.reason.as_deref().unwrap_or("")
                        ),
                    };
                    let what = if ours { "resume" } else { "forgot" };
                    match forgot {
                        Ok(_) => self.event(metrics, ev(&node, what, detail)),
                        Err(e) => self.event(
                            metrics,
                            ev(
                                &node,
                                "error",
                                format!("{detail}; but the record could not be deleted: {e}"),
                            ),
                        ),
                    }
                }
            }
        }
    }
}

impl NodeActions {
    /// Drains `node` by hand (an admin's action, [`crate::actions`]) with
    /// the reason `benchlake: drained by hand by WHO`, recorded as a
    /// [`NodeDrain`] with no run and no check (so no later run resumes it:
    /// only [`NodeActions::resume_by_hand`] does). Refused, with Slurm left as
    /// it is, when Slurm shows the node drained or down already (whoever did
    /// it: benchlake never overwrites another reason) or does not know it.
    /// Blocking (scontrol, the store). Returns what was done.
    pub fn drain_by_hand(
        &self,
        store: &dyn StateStore,
        metrics: &Metrics,
        node: &str,
        who: &str,
        now: i64,
    ) -> crate::Result<String> {
        use crate::CoordError;
        let st = self
            .scontrol
            .show_node(node)
            .map_err(|e| CoordError::FailedPrecondition(format!("cannot read {node}: {e}")))?
            .ok_or_else(|| {
                CoordError::NotFound(format!("node: scontrol does not know node {node}"))
            })?;
        if st.drained() || st.down() {
            return Err(CoordError::FailedPrecondition(format!(
                "{node} is already {} (Reason={}): benchlake does not drain it again",
                st.state,
                st.reason.as_deref().unwrap_or("none")
            )));
        }
        let reason = format!("{}drained by hand by {who}", scontrol::REASON_PREFIX);
        self.scontrol
            .drain(node, &reason)
            .map_err(|e| CoordError::FailedPrecondition(format!("cannot drain {node}: {e}")))?;
        let rec = NodeDrain {
            node: node.to_string(),
            reason: reason.clone(),
            run_id: String::new(),
            check: String::new(),
            schedule_id: None,
            drained_ms: now,
        };
        let detail = format!("drained {node}: {reason}");
        match store.transact(|tx| tx.upsert_node_drain(&rec)) {
            Ok(()) => {
                self.event(
                    metrics,
                    NodeEvent {
                        at_ms: now,
                        node: node.to_string(),
                        run_id: String::new(),
                        action: "drain".into(),
                        dry_run: false,
                        detail: detail.clone(),
                    },
                );
                Ok(detail)
            }
            Err(e) => Err(CoordError::FailedPrecondition(format!(
                "drained {node} but cannot record it (benchlake will not resume it): {e}"
            ))),
        }
    }

    /// Resumes `node`, drained by benchlake (a check's drain or one by
    /// hand), by hand: only when Slurm still shows it drained with exactly
    /// benchlake's recorded reason; otherwise the record is forgotten and the
    /// node left as it is (as a later passing run would). Refused when
    /// benchlake has no drain of the node on record. Blocking. Returns what
    /// was done.
    pub fn resume_by_hand(
        &self,
        store: &dyn StateStore,
        metrics: &Metrics,
        node: &str,
        now: i64,
    ) -> crate::Result<String> {
        use crate::CoordError;
        let Some(drain) = store.transact(|tx| tx.get_node_drain(node))? else {
            return Err(CoordError::FailedPrecondition(format!(
                "benchlake has no drain of {node} on record: a node someone else drained is theirs to resume (scontrol)"
            )));
        };
        let st = self
            .scontrol
            .show_node(node)
            .map_err(|e| CoordError::FailedPrecondition(format!("cannot read {node}: {e}")))?;
        let ours = st
            .as_ref()
            .is_some_and(|s| s.drained() && s.reason.as_deref() == Some(&drain.reason));
        if ours {
            self.scontrol.resume(node).map_err(|e| {
                CoordError::FailedPrecondition(format!("cannot resume {node}: {e}"))
            })?;
        }
        store.transact(|tx| tx.delete_node_drain(node))?;
        let (what, detail) = match &st {
            _ if ours => (
                "resume",
                format!("resumed {node} (drained: {})", drain.reason),
            ),
            None => (
                "forgot",
                format!("forgot the drain of {node}: scontrol does not know it"),
            ),
            Some(s) if !s.drained() => (
                "forgot",
                format!(
                    "forgot the drain of {node}: it is no longer drained ({})",
                    s.state
                ),
            ),
            Some(s) => (
                "forgot",
                format!(
                    "forgot the drain of {node} and left it drained: its reason is now '{}', not benchlake's",
                    s.reason.as_deref().unwrap_or("")
                ),
            ),
        };
        self.event(
            metrics,
            NodeEvent {
                at_ms: now,
                node: node.to_string(),
                run_id: String::new(),
                action: what.into(),
                dry_run: false,
                detail: detail.clone(),
            },
        );
        Ok(detail)
    }
}

/// After `node_health` rows of `run_id` were committed and recorded in
/// `index`: the run's schedule's node action, if any (runs in a blocking
/// task).
pub async fn after_node_rows(
    store: Arc<dyn StateStore>,
    index: Arc<VerdictIndex>,
    actions: Arc<NodeActions>,
    metrics: Arc<Metrics>,
    run_id: String,
    now: i64,
) {
    let res = tokio::task::spawn_blocking(move || {
        let id = run_id.clone();
        let found = store.transact(|tx| {
            let Some(run) = tx.get_run(&id)? else {
                return Ok(None);
            };
            let Some(sid) = run.schedule_id.clone() else {
                return Ok(None);
            };
            let Some(s) = tx.get_schedule(&sid)? else {
                return Ok(None);
            };
            if s.node_action == NodeAction::Off {
                return Ok(None);
            }
            let drains: BTreeMap<String, NodeDrain> = tx
                .list_node_drains()?
                .into_iter()
                .map(|d| (d.node.clone(), d))
                .collect();
            let silences = crate::silence::Silences::read(tx)?;
            Ok(Some((s.node_action, sid, (drains, silences, run))))
        });
        let (action, sid, (drains, silences, run)) = match found {
            Ok(Some(x)) => x,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(run = %run_id, error = %e, "node actions: cannot read the run's schedule");
                return;
            }
        };
        let rows: Vec<(String, CheckRow)> = index
            .run(&run_id)
            .map(|r| r.node_rows().cloned().collect())
            .unwrap_or_default();
        // Silenced rows (acknowledged, in maintenance) neither drain nor
        // resume a node (crate::silence).
        let (rows, silenced) = crate::silence::split_node_rows(&silences, &run, rows, now);
        for (node, r, why) in silenced.iter().filter(|(_, r, _)| r.status != "PASS") {
            let e = NodeEvent {
                at_ms: now,
                node: node.clone(),
                run_id: run_id.clone(),
                action: "silenced".into(),
                dry_run: action == NodeAction::DryRun,
                detail: format!("not acted on: {node} {} {} ({why})", r.check, r.status),
            };
            actions.event(&metrics, e);
        }
        let decisions = decide(&run_id, &rows, &drains);
        actions.execute(&*store, &metrics, action, &run_id, Some(&sid), decisions, now);
    })
    .await;
    if let Err(e) = res {
        tracing::warn!(error = %e, "node actions task failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(check: &str, status: &str, v: f64, r: f64) -> CheckRow {
        CheckRow {
            check: check.into(),
            status: status.into(),
            value: Some(v),
            reference: Some(r),
            unit: String::new(),
            message: String::new(),
            ..Default::default()
        }
    }

    fn drain(node: &str, run: &str, check: &str) -> NodeDrain {
        NodeDrain {
            node: node.into(),
            reason: format!("benchlake: {check} 1 vs 2 (run {run})"),
            run_id: run.into(),
            check: check.into(),
            schedule_id: None,
            drained_ms: 0,
        }
    }

    #[test]
    fn failing_nodes_drain_for_their_first_failing_check() {
        let rows = vec![
            ("n1".to_string(), row("node.cores", "PASS", 2.0, 2.0)),
            ("n2".to_string(), row("node.memory_bytes", "FAIL", 1.0, 8.0)),
            ("n2".to_string(), row("node.cores", "FAIL", 2.0, 64.0)),
            ("*".to_string(), row("node.config", "ERROR", 0.0, 0.0)),
            ("bad name".to_string(), row("node.cores", "FAIL", 0.0, 1.0)),
        ];
        let d = decide("01B", &rows, &BTreeMap::new());
        assert_eq!(
            d,
            [Decision::Drain {
                node: "n2".into(),
                check: "node.cores".into(),
                reason: "benchlake: node.cores 2 vs 64 (run 01B)".into(),
                recorded: None,
            }]
        );
        // Drained by benchlake before: the record goes with the decision
        // (Slurm says whether that drain is still in force).
        let drains = BTreeMap::from([("n2".to_string(), drain("n2", "01A", "node.cores"))]);
        assert!(matches!(
            &decide("01B", &rows, &drains)[..],
            [Decision::Drain { recorded: Some(r), .. }] if r.run_id == "01A"
        ));
    }

    /// INCONCLUSIVE (a disturbed run) and NO_REFERENCE (no history yet)
    /// neither drain a node nor count as the pass that resumes it.
    #[test]
    fn undecided_verdicts_neither_drain_nor_resume() {
        let rows = vec![
            (
                "n1".to_string(),
                row("node.cores", "INCONCLUSIVE", 2.0, 64.0),
            ),
            (
                "n2".to_string(),
                row("node.cores", "NO_REFERENCE", 2.0, 0.0),
            ),
        ];
        assert!(decide("01B", &rows, &BTreeMap::new()).is_empty());
        let drains = BTreeMap::from([("n1".to_string(), drain("n1", "01A", "node.cores"))]);
        assert!(decide("01B", &rows, &drains).is_empty());
    }

    /// A REGRESSION drains like a FAIL (after any FAIL of the node).
    #[test]
    fn a_regression_drains_after_any_fail() {
        let rows = vec![
            (
                "n1".to_string(),
                row("node.write_bw_mib_s", "REGRESSION", 850.0, 1000.0),
            ),
            ("n2".to_string(), row("node.a", "REGRESSION", 1.0, 2.0)),
            ("n2".to_string(), row("node.b", "FAIL", 1.0, 2.0)),
        ];
        let got: Vec<(String, String)> = decide("01B", &rows, &BTreeMap::new())
            .into_iter()
            .filter_map(|d| match d {
                Decision::Drain { node, check, .. } => Some((node, check)),
                Decision::Resume { .. } => None,
            })
            .collect();
        assert_eq!(
            got,
            [
                ("n1".to_string(), "node.write_bw_mib_s".to_string()),
                ("n2".to_string(), "node.b".to_string())
            ]
        );
    }

    #[test]
    fn only_a_later_pass_of_the_same_check_resumes() {
        let drains = BTreeMap::from([("n2".to_string(), drain("n2", "01B", "node.cores"))]);
        let pass = vec![("n2".to_string(), row("node.cores", "PASS", 64.0, 64.0))];
        assert!(matches!(
            &decide("01C", &pass, &drains)[..],
            [Decision::Resume { node, .. }] if node == "n2"
        ));
        // An older run (a late commit) does not resume.
        assert!(decide("01A", &pass, &drains).is_empty());
        // Another check passing says nothing about the one that failed.
        let other = vec![(
            "n2".to_string(),
            row("node.write_bw_mib_s", "PASS", 1.0, 1.0),
        )];
        assert!(decide("01C", &other, &drains).is_empty());
        // An ERROR beside the pass: cannot tell, leave it.
        let mixed = vec![
            ("n2".to_string(), row("node.cores", "PASS", 64.0, 64.0)),
            ("n2".to_string(), row("node.kernel", "ERROR", 0.0, 0.0)),
        ];
        assert!(decide("01C", &mixed, &drains).is_empty());
        // A node benchlake never drained is never resumed.
        let n3 = vec![("n3".to_string(), row("node.cores", "PASS", 64.0, 64.0))];
        assert!(decide("01C", &n3, &drains).is_empty());
    }

    /// A stand-in scontrol keeping each node's state and reason in files of
    /// `dir`, printing them as `scontrol show node` does.
    fn fake_scontrol(dir: &std::path::Path) -> Scontrol {
        let prog = dir.join("scontrol");
        std::fs::write(
            &prog,
            format!(
                r#"#!/bin/sh
d='{}'
case "$1" in
show)
  n=$3; st=$(cat "$d/$n.state" 2>/dev/null || echo IDLE)
  echo "NodeName=$n Arch=x86_64"
  echo "   State=$st ThreadsPerCore=1"
  if [ -f "$d/$n.reason" ]; then echo "   Reason=$(cat "$d/$n.reason") [root@2026-11-24T00:00:00]"; fi ;;
update)
  n=${{2#nodename=}}
  case "$3" in
  state=drain) echo IDLE+DRAIN > "$d/$n.state"; printf '%s' "${{4#reason=}}" > "$d/$n.reason" ;;
  state=resume) echo IDLE > "$d/$n.state"; rm -f "$d/$n.reason" ;;
  esac ;;
esac
"#,
                dir.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scontrol {
            program: vec![prog.display().to_string()],
            ..Default::default()
        }
    }

    #[test]
    fn execute_drains_records_resumes_and_leaves_other_drains_alone() {
        let dir = tempfile::tempdir().unwrap();
        let sc = fake_scontrol(dir.path());
        let store: Arc<dyn StateStore> = Arc::new(crate::store::SqliteStore::in_memory().unwrap());
        let metrics = Metrics::default();
        let na = NodeActions::new(sc.clone());
        std::fs::write(dir.path().join("n3.state"), "IDLE+DRAIN").unwrap();
        std::fs::write(dir.path().join("n3.reason"), "admin: PSU").unwrap();
        let fail = vec![
            ("n2".to_string(), row("node.cores", "FAIL", 2.0, 64.0)),
            ("n3".to_string(), row("node.cores", "FAIL", 2.0, 64.0)),
        ];
        let drains = |s: &dyn StateStore| -> BTreeMap<String, NodeDrain> {
            s.transact(|tx| tx.list_node_drains())
                .unwrap()
                .into_iter()
                .map(|d| (d.node.clone(), d))
                .collect()
        };
        // Dry run: nothing changes.
        let d = decide("01B", &fail, &drains(&*store));
        na.execute(&*store, &metrics, NodeAction::DryRun, "01B", None, d, 5);
        assert!(!sc.show_node("n2").unwrap().unwrap().drained());
        assert_eq!(metrics.node_actions.get(&["drain", "true"]), 2);
        // Drain: n2 drained and recorded, n3 (the admin's) left alone.
        let d = decide("01B", &fail, &drains(&*store));
        na.execute(&*store, &metrics, NodeAction::Drain, "01B", Some("S"), d, 7);
        let n2 = sc.show_node("n2").unwrap().unwrap();
        assert!(n2.drained());
        assert_eq!(
            n2.reason.as_deref(),
            Some("benchlake: node.cores 2 vs 64 (run 01B)")
        );
        assert_eq!(
            sc.show_node("n3").unwrap().unwrap().reason.as_deref(),
            Some("admin: PSU")
        );
        let rec = drains(&*store);
        assert_eq!(rec.keys().collect::<Vec<_>>(), ["n2"]);
        assert_eq!(
            (rec["n2"].drained_ms, rec["n2"].schedule_id.as_deref()),
            (7, Some("S"))
        );
        assert_eq!(metrics.node_actions.get(&["drain", "false"]), 1);
        assert_eq!(metrics.node_actions.get(&["left-alone", "false"]), 1);
        // Failing again while drained by benchlake: quiet, no second drain.
        let d = decide("01C", &fail[..1], &drains(&*store));
        na.execute(&*store, &metrics, NodeAction::Drain, "01C", None, d, 8);
        assert_eq!(metrics.node_actions.get(&["drain", "false"]), 1);
        assert_eq!(drains(&*store)["n2"].run_id, "01B");
        // A later pass resumes n2; n3 stays the admin's.
        let pass = vec![
            ("n2".to_string(), row("node.cores", "PASS", 64.0, 64.0)),
            ("n3".to_string(), row("node.cores", "PASS", 64.0, 64.0)),
        ];
        let d = decide("01D", &pass, &drains(&*store));
        na.execute(&*store, &metrics, NodeAction::Drain, "01D", None, d, 9);
        assert!(!sc.show_node("n2").unwrap().unwrap().drained());
        assert!(sc.show_node("n3").unwrap().unwrap().drained());
        assert!(drains(&*store).is_empty());
        let ev = na.events_of("n2");
        assert_eq!(
            ev.iter()
                .map(|e| (e.action.as_str(), e.dry_run))
                .collect::<Vec<_>>(),
            [("drain", true), ("drain", false), ("resume", false)]
        );
    }

    #[test]
    fn node_actions_round_trip_the_protocol() {
        for a in [NodeAction::Off, NodeAction::DryRun, NodeAction::Drain] {
            assert_eq!(NodeAction::from_pb(a.to_pb()), Some(a));
        }
        assert_eq!(NodeAction::from_pb(0), Some(NodeAction::Off));
        assert_eq!(NodeAction::from_pb(99), None);
    }
}
