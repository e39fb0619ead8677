//! What a notification says: the facts of a run read back from the state and
//! the lake, and the JSON body built from them (docs/notifications.md).
use super::*;

/// One failing check in a payload: a `checks` row as the verdict index
/// holds it (the same fields and JSON as the dashboard's API).
pub type FailingCheck = CheckRow;

/// A node with failing checks in a payload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailingNode {
    pub node: String,
    /// Its failing checks: `node_health` rows of the node, or the run's
    /// failing checks when the run has no `node_health` rows.
    pub checks: Vec<FailingCheck>,
}

/// The `node_health` rows (node, row) of decoded batches (the one reader:
/// [`crate::verdicts::node_rows`]).
pub use crate::verdicts::node_rows;

/// Whether a check status is failing (FAIL, REGRESSION or ERROR).
/// INCONCLUSIVE and NO_REFERENCE never are: they are not notified
/// (docs/notifications.md).
fn failing(status: &str) -> bool {
    benchlake_core::verdict::is_failure(status) || status == "ERROR"
}

/// What the sender learnt about a run: the payload's facts.
#[derive(Debug, Clone)]
pub struct RunFacts {
    pub run: RunRow,
    pub schedule_name: Option<String>,
    /// Agents of the run's tasks, sorted.
    pub agents: Vec<String>,
    /// Rows of the run's `checks` files.
    pub checks: Vec<CheckRow>,
    /// Rows of the run's `node_health` files.
    pub nodes: Vec<(String, CheckRow)>,
}

impl RunFacts {
    /// The run's verdict: the worst of its checks and node checks.
    pub fn verdict(&self) -> Option<&'static str> {
        crate::verdicts::worst(
            self.checks
                .iter()
                .map(|r| r.status.as_str())
                .chain(self.nodes.iter().map(|(_, r)| r.status.as_str())),
        )
    }

    /// The event to send, or None when the run ended well (nothing to say).
    pub fn event(&self) -> Option<&'static str> {
        if self.run.state == RunState::Failed {
            return Some("run.failed");
        }
        match self.verdict() {
            Some("FAIL") => Some("verdict.fail"),
            Some("REGRESSION") => Some("verdict.regression"),
            Some("ERROR") => Some("verdict.error"),
            _ => None,
        }
    }

    /// The failing checks of the run (its `checks` rows that are not PASS).
    pub fn failing_checks(&self) -> Vec<FailingCheck> {
        self.checks
            .iter()
            .filter(|r| failing(&r.status))
            .cloned()
            .collect()
    }

    /// The failing nodes: from `node_health` when the run has such rows,
    /// else every agent of a run with failing checks (the run's checks are
    /// over all its nodes).
    pub fn failing_nodes(&self) -> Vec<FailingNode> {
        let mut by: BTreeMap<String, Vec<FailingCheck>> = BTreeMap::new();
        if !self.nodes.is_empty() {
            for (n, r) in self.nodes.iter().filter(|(_, r)| failing(&r.status)) {
                by.entry(n.clone()).or_default().push(r.clone());
            }
        } else {
            let checks = self.failing_checks();
            if !checks.is_empty() {
                for a in &self.agents {
                    by.insert(a.clone(), checks.clone());
                }
            }
        }
        by.into_iter()
            .map(|(node, checks)| FailingNode { node, checks })
            .collect()
    }
}

/// ISO 8601 UTC of epoch milliseconds.
fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// The JSON body of a notification (docs/notifications.md lists the fields).
pub fn payload(
    facts: &RunFacts,
    event: &str,
    delivery_id: &str,
    notifier: &str,
    dashboard_url: Option<&str>,
    now: i64,
) -> String {
    let r = &facts.run;
    let opt = |v: Option<i64>| v.map(iso);
    let link = dashboard_url.map(|u| format!("{}/runs/{}", u.trim_end_matches('/'), r.run_id));
    let v = serde_json::json!({
        "event": event,
        "delivery_id": delivery_id,
        "notifier": notifier,
        "time": iso(now),
        "run": {
            "run_id": r.run_id,
            "status": r.state.as_str(),
            "verdict": facts.verdict(),
            "benchmark": r.benchmark,
            "kind": r.kind,
            "params": r.spec.params,
            "agents": facts.agents,
            "error": r.error,
            "submitted_at": iso(r.submitted_at_ms),
            "started_at": opt(r.started_at_ms),
            "finished_at": opt(r.finished_at_ms),
            "scheduled_for": opt(r.scheduled_for_ms),
            "date": r.date,
        },
        "schedule": r.schedule_id.as_ref().map(|id| serde_json::json!({
            "schedule_id": id,
            "name": facts.schedule_name,
        })),
        "failing_checks": facts.failing_checks(),
        "failing_nodes": facts.failing_nodes(),
        "links": { "run": link },
    });
    v.to_string()
}

/// Reads what the payload of `run_id` says: the run, its schedule's name,
/// its agents, and its committed `checks` and `node_health` rows.
pub async fn run_facts(c: &Coordinator, run_id: &str) -> Result<RunFacts> {
    let id = run_id.to_string();
    let (run, schedule_name, agents, files) = c
        .db(move |tx| {
            let run = tx
                .get_run(&id)?
                .ok_or_else(|| CoordError::NotFound(format!("run_id: no run '{id}'")))?;
            let schedule_name = match &run.schedule_id {
                Some(s) => tx.get_schedule(s)?.map(|s| s.name),
                None => None,
            };
            let mut agents: Vec<String> = tx
                .tasks_of_run(&id)?
                .into_iter()
                .flat_map(|t| t.peers)
                .collect();
            agents.sort();
            agents.dedup();
            let files: Vec<CommittedFile> = tx
                .committed_files_of_run(&id)?
                .into_iter()
                .filter(|f| f.table == "checks" || f.table == "node_health")
                .collect();
            Ok((run, schedule_name, agents, files))
        })
        .await?;
    let mut checks = Vec::new();
    let mut nodes = Vec::new();
    for f in files {
        let batches = crate::compaction::read_committed(c, &f).await?;
        if f.table == "checks" {
            checks.extend(crate::verdicts::check_rows(&batches));
        } else {
            nodes.extend(node_rows(&batches));
        }
    }
    Ok(RunFacts {
        run,
        schedule_name,
        agents,
        checks,
        nodes,
    })
}
