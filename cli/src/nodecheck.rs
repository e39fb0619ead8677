//! `benchlake node-check [NODE]`: a node's health from its newest node-level
//! verdicts (`node_health`), as the coordinator keeps them in memory
//! (`ClusterService.GetNodeHealth`), answered in well under a second so it
//! can be Slurm's `HealthCheckProgram` (deploy/slurm/healthcheck, docs/slurm.md).
//!
//! Exit status: 0 healthy (no node check's newest verdict FAIL or ERROR:
//! PASS, or INCONCLUSIVE / NO_REFERENCE, which are printed but neither
//! drain nor fail a node), 1 failing (at least one FAIL, or a REGRESSION:
//! the node's series stepped or drifted worse), 2 cannot tell (no
//! verdict for the node, an ERROR, the coordinator unreachable or still
//! loading, a bad argument).
//!
//! `--drain` (for the HealthCheckProgram, which runs as root on the node and
//! is expected to drain it itself): a failing node is drained with the same
//! reason benchlake's node actions use (`benchlake: CHECK VALUE vs REFERENCE
//! (run RUN_ID)`), unless Slurm shows it drained or down already, whoever did
//! it. node-check never resumes a node: resuming is the coordinator's (only a
//! node it drained, once a later run passes). It drains once per failing
//! verdict: the run it drained for is remembered in `--state-dir`, so a node
//! an administrator resumed is not drained again until a newer run fails it.
//!
//! Silenced verdicts (an admin's acknowledgement, a maintenance window:
//! the coordinator says why in `silenced`) neither fail the node nor drain
//! it; they are printed with the reason.
//!
//! `--max-age-s`: verdicts older than this do not count (a node whose newest
//! verdicts are all older cannot be told).
use benchlake_core::outln;
use std::process::ExitCode;
use std::time::Duration;

use benchlake_core::scontrol::{self, Scontrol};
use benchlake_proto::v1 as pb;
use clap::Args;

use crate::user::Conn;

/// `benchlake node-check`.
#[derive(Debug, Args)]
pub struct NodeCheckArgs {
    /// The node (default: `SLURMD_NODENAME`, which slurmd sets for its
    /// HealthCheckProgram, else `BENCHLAKE_NODE`, else this host's short
    /// name).
    pub node: Option<String>,
    /// Drain the node through scontrol when it is failing (never another
    /// reason's drain; never resumes).
    #[arg(long)]
    pub drain: bool,
    /// The scontrol program and fixed arguments, space-separated.
    #[arg(long, env = "BENCHLAKE_SCONTROL", default_value = "scontrol")]
    pub scontrol: String,
    /// Give up on the coordinator after this many milliseconds (exit 2).
    #[arg(long, env = "BENCHLAKE_NODE_CHECK_TIMEOUT_MS", default_value_t = 5000)]
    pub timeout_ms: u64,
    /// Verdicts older than this many seconds do not count (0: any age).
    #[arg(long, env = "BENCHLAKE_NODE_CHECK_MAX_AGE_S", default_value_t = 0)]
    pub max_age_s: u64,
    /// With --drain: where the run each drain was made for is remembered
    /// (one small file per node), so a resumed node is drained again only
    /// for a newer failing run.
    #[arg(
        long,
        env = "BENCHLAKE_NODE_CHECK_STATE",
        default_value = "/var/lib/benchlake/node-check"
    )]
    pub state_dir: std::path::PathBuf,
    #[command(flatten)]
    pub conn: Conn,
}

/// Healthy.
pub const HEALTHY: u8 = 0;
/// At least one FAIL.
pub const FAILING: u8 = 1;
/// Cannot tell.
pub const UNKNOWN: u8 = 2;

fn default_node() -> String {
    // The one rule of benchlake_core::node, with the short host name last
    // (Slurm's node names are short names).
    benchlake_core::node::name_from(&|k| std::env::var(k).ok(), || {
        let h = benchlake_core::node::hostname();
        h.split('.').next().unwrap_or_default().to_string()
    })
}

/// The exit status of a node's health answer, and why.
pub fn judge(h: &pb::NodeHealth) -> (u8, String) {
    match h.verdict.as_str() {
        "FAIL" => (FAILING, "failing".into()),
        "REGRESSION" => (
            FAILING,
            "failing: a node check regressed (its series stepped or drifted worse)".into(),
        ),
        "PASS" if h.complete => (HEALTHY, "healthy".into()),
        "INCONCLUSIVE" | "NO_REFERENCE" if h.complete => {
            let n = |s: &str| h.checks.iter().filter(|c| c.status == s).count();
            let parts: Vec<String> = ["INCONCLUSIVE", "NO_REFERENCE"]
                .iter()
                .filter(|s| n(s) > 0)
                .map(|s| format!("{} {s}", n(s)))
                .collect();
            (
                HEALTHY,
                format!(
                    "healthy as far as judged: no FAIL ({}: not judged, never drained)",
                    parts.join(", ")
                ),
            )
        }
        "PASS" | "INCONCLUSIVE" | "NO_REFERENCE" => (
            UNKNOWN,
            "cannot tell: the coordinator is still loading older verdicts".into(),
        ),
        "ERROR" => (
            UNKNOWN,
            "cannot tell: a node check could not be evaluated (ERROR)".into(),
        ),
        _ => (
            UNKNOWN,
            format!("cannot tell: no node-level verdict for {} yet", h.node),
        ),
    }
}

/// As [`judge`], with silenced verdicts (acknowledged, in maintenance:
/// `silenced` says why) left out: a node whose only findings are silenced
/// is healthy, and the answer says how many were silenced.
pub fn judge_silenced(h: &pb::NodeHealth) -> (u8, String) {
    let silenced = h
        .checks
        .iter()
        .filter(|c| !c.silenced.is_empty() && !matches!(c.status.as_str(), "PASS"))
        .count();
    if silenced == 0 && h.maintenance.is_empty() {
        return judge(h);
    }
    let mut rest = h.clone();
    rest.checks.retain(|c| c.silenced.is_empty());
    rest.verdict = benchlake_core::verdict::worst(rest.checks.iter().map(|c| c.status.as_str()))
        .unwrap_or_default()
        .to_string();
    let (code, why) = if rest.checks.is_empty() && !h.checks.is_empty() && h.complete {
        (HEALTHY, "healthy: every verdict is silenced".to_string())
    } else {
        judge(&rest)
    };
    let mut why = why;
    if silenced > 0 {
        why.push_str(&format!(
            " ({silenced} finding(s) silenced: acknowledged or in maintenance, never drained)"
        ));
    }
    if !h.maintenance.is_empty() {
        why.push_str(&format!("; in {}", h.maintenance));
    }
    (code, why)
}

/// A check's figure with its unit (`-` when there is none).
pub(crate) fn fmt_value(v: Option<f64>, unit: &str) -> String {
    match v {
        None => "-".into(),
        Some(x) => {
            let s = scontrol::fmt_figure(Some(x));
            if unit.is_empty() {
                s
            } else {
                format!("{s} {unit}")
            }
        }
    }
}

/// The first failing check (by name), else the first regressed one: what a
/// drain names.
fn first_fail(h: &pb::NodeHealth) -> Option<&pb::NodeCheckVerdict> {
    h.checks
        .iter()
        .find(|c| c.status == "FAIL" && c.silenced.is_empty())
        .or_else(|| {
            h.checks
                .iter()
                .find(|c| c.status == "REGRESSION" && c.silenced.is_empty())
        })
}

/// Drops the verdicts made longer than `max_age_s` before `now_ms` (0: none
/// dropped) and judges again what is left.
fn drop_stale(h: &mut pb::NodeHealth, max_age_s: u64, now_ms: i64) -> usize {
    if max_age_s == 0 {
        return 0;
    }
    let limit =
        now_ms.saturating_sub(i64::try_from(max_age_s.saturating_mul(1000)).unwrap_or(i64::MAX));
    let before = h.checks.len();
    h.checks
        .retain(|c| benchlake_core::ids::time_ms_of(&c.run_id).is_some_and(|t| t >= limit));
    h.verdict = benchlake_core::verdict::worst(h.checks.iter().map(|c| c.status.as_str()))
        .unwrap_or_default()
        .to_string();
    before - h.checks.len()
}

/// Drains `node` for its first failing check unless Slurm shows it drained
/// or down already, or node-check drained it for that same run before (an
/// administrator resumed it since); what happened, for the output.
fn drain(
    s: &Scontrol,
    state_dir: &std::path::Path,
    node: &str,
    f: &pb::NodeCheckVerdict,
) -> String {
    let reason = scontrol::drain_reason(&f.check, f.value, f.reference, &f.run_id);
    let mark = state_dir.join(format!("{node}.drained"));
    let before = std::fs::read_to_string(&mark).unwrap_or_default();
    match s.show_node(node) {
        Err(e) => format!("not drained: {e}"),
        Ok(None) => format!("not drained: scontrol does not know node {node}"),
        Ok(Some(st)) if st.drained() || st.down() => format!(
            "not drained again: {node} is already {} (Reason={})",
            st.state,
            st.reason.as_deref().unwrap_or("none")
        ),
        Ok(Some(_)) if before.trim() == f.run_id => format!(
            "not drained again: drained once for run {} (resumed since); a newer failing run drains it",
            f.run_id
        ),
        Ok(Some(_)) => match s.drain(node, &reason) {
            Ok(()) => {
                let kept = std::fs::create_dir_all(state_dir)
                    .and_then(|()| std::fs::write(&mark, &f.run_id));
                match kept {
                    Ok(()) => format!("drained: {reason}"),
                    Err(e) => format!(
                        "drained: {reason} (cannot remember it in {}: {e}; a resumed node may be drained again for this run)",
                        mark.display()
                    ),
                }
            }
            Err(e) => format!("not drained: {e}"),
        },
    }
}

/// Runs `node-check`; the process's exit status.
pub fn main(a: NodeCheckArgs) -> ExitCode {
    let node = a.node.clone().unwrap_or_else(default_node);
    if let Err(e) = scontrol::check_node_name(&node) {
        eprintln!("error: {e}");
        return ExitCode::from(UNKNOWN);
    }
    // One thread: this runs on every node every HealthCheckInterval.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(UNKNOWN);
        }
    };
    let conn = &a.conn;
    let asked = rt.block_on(async {
        let mut c = conn.cluster()?;
        let h = tokio::time::timeout(
            Duration::from_millis(a.timeout_ms),
            c.get_node_health(pb::GetNodeHealthRequest { node: node.clone() }),
        )
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {} ms", a.timeout_ms))??;
        anyhow::Ok(h.into_inner())
    });
    let h = match asked {
        Ok(h) => h,
        Err(e) => {
            if conn.json {
                outln!(
                    "{}",
                    serde_json::json!({"node": node, "health": "unknown", "exit_code": UNKNOWN,
                        "error": crate::error_text(&e)})
                );
            } else {
                outln!(
                    "{node}: cannot tell: the coordinator did not answer: {}",
                    crate::error_text(&e)
                );
            }
            return ExitCode::from(UNKNOWN);
        }
    };
    let mut h = h;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let stale = drop_stale(&mut h, a.max_age_s, now_ms);
    let (code, mut why) = judge_silenced(&h);
    if stale > 0 {
        why.push_str(&format!(
            " ({stale} verdict(s) older than {} s left out)",
            a.max_age_s
        ));
    }
    let drained = match (a.drain, code, first_fail(&h)) {
        (true, FAILING, Some(f)) => Some(drain(
            &Scontrol::from_command_line(&a.scontrol),
            &a.state_dir,
            &node,
            f,
        )),
        _ => None,
    };
    if conn.json {
        let v = serde_json::json!({
            "node": h.node,
            "health": match code { HEALTHY => "healthy", FAILING => "failing", _ => "unknown" },
            "verdict": (!h.verdict.is_empty()).then_some(&h.verdict),
            "exit_code": code,
            "why": why,
            "complete": h.complete,
            "checks": h.checks.iter().map(|c| serde_json::json!({
                "check": c.check, "status": c.status, "value": c.value, "reference": c.reference,
                "unit": c.unit, "message": c.message, "run_id": c.run_id,
                "silenced": (!c.silenced.is_empty()).then_some(&c.silenced),
            })).collect::<Vec<_>>(),
            "maintenance": (!h.maintenance.is_empty()).then_some(&h.maintenance),
            "drain": h.drain.as_ref().map(|d| serde_json::json!({
                "reason": d.reason, "run_id": d.run_id, "check": d.check,
                "schedule_id": d.schedule_id, "drained_at_ms": d.drained_at_ms,
            })),
            "events": h.events.iter().map(|e| serde_json::json!({
                "at_ms": e.at_ms, "run_id": e.run_id, "action": e.action,
                "dry_run": e.dry_run, "detail": e.detail,
            })).collect::<Vec<_>>(),
            "drain_action": drained,
        });
        outln!("{v}");
    } else {
        outln!("{}: {why}", h.node);
        for c in &h.checks {
            outln!(
                "  {:<5} {:<28} {} vs {}  run {}  {}{}",
                c.status,
                c.check,
                fmt_value(c.value, &c.unit),
                fmt_value(c.reference, &c.unit),
                c.run_id,
                c.message,
                if c.silenced.is_empty() {
                    String::new()
                } else {
                    format!("  ({})", c.silenced)
                }
            );
        }
        if let Some(d) = &h.drain {
            outln!("  drained by benchlake (run {}): {}", d.run_id, d.reason);
        }
        for e in &h.events {
            let dry = if e.dry_run { " (dry run)" } else { "" };
            outln!("  action{dry}: {}", e.detail);
        }
        if let Some(d) = drained {
            outln!("  {d}");
        }
    }
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(verdict: &str, complete: bool) -> pb::NodeHealth {
        pb::NodeHealth {
            node: "n2".into(),
            verdict: verdict.into(),
            complete,
            ..Default::default()
        }
    }

    #[test]
    fn old_verdicts_do_not_count() {
        let t0 = 1_795_392_000_000;
        let check = |status: &str, at: i64| pb::NodeCheckVerdict {
            check: format!("node.{status}"),
            status: status.into(),
            run_id: benchlake_core::ids::new_id_at(at),
            ..Default::default()
        };
        let mut h = health("FAIL", true);
        h.checks = vec![check("FAIL", t0), check("PASS", t0 + 3_600_000)];
        assert_eq!(drop_stale(&mut h.clone(), 0, t0 + 7_200_000), 0);
        assert_eq!(drop_stale(&mut h, 5400, t0 + 7_200_000), 1);
        assert_eq!((h.verdict.as_str(), judge(&h).0), ("PASS", HEALTHY));
        assert_eq!(drop_stale(&mut h, 60, t0 + 7_200_000), 1);
        assert_eq!(judge(&h).0, UNKNOWN);
    }

    #[test]
    fn silenced_findings_do_not_fail_the_node() {
        let check = |name: &str, status: &str, silenced: &str| pb::NodeCheckVerdict {
            check: name.into(),
            status: status.into(),
            silenced: silenced.into(),
            ..Default::default()
        };
        let ack = "acknowledged by alice until 2026-12-12T00:00Z: DIMM on order";
        let mut h = health("FAIL", true);
        h.checks = vec![
            check("node.cores", "FAIL", ack),
            check("node.kernel", "PASS", ""),
        ];
        let (code, why) = judge_silenced(&h);
        assert_eq!(code, HEALTHY, "{why}");
        assert!(why.starts_with("healthy (1 finding(s) silenced"), "{why}");
        assert!(first_fail(&h).is_none(), "a silenced FAIL is never drained");
        // Another, unsilenced FAIL still fails the node and is what drains.
        h.checks.push(check("node.memory_bytes", "FAIL", ""));
        assert_eq!(judge_silenced(&h).0, FAILING);
        assert_eq!(
            first_fail(&h).map(|c| c.check.as_str()),
            Some("node.memory_bytes")
        );
        // Every verdict silenced (in maintenance now).
        let mut h = health("FAIL", true);
        h.maintenance = "maintenance n[1-4] … by bob: firmware".into();
        h.checks = vec![check("node.cores", "FAIL", &h.maintenance.clone())];
        let (code, why) = judge_silenced(&h);
        assert_eq!(code, HEALTHY);
        assert!(
            why.contains("every verdict is silenced") && why.contains("in maintenance n[1-4]"),
            "{why}"
        );
        h.complete = false;
        assert_eq!(judge_silenced(&h).0, UNKNOWN);
    }

    #[test]
    fn exit_status_follows_the_newest_verdicts() {
        assert_eq!(judge(&health("PASS", true)).0, HEALTHY);
        assert_eq!(judge(&health("FAIL", false)).0, FAILING);
        assert_eq!(judge(&health("REGRESSION", true)).0, FAILING);
        assert_eq!(judge(&health("PASS", false)).0, UNKNOWN);
        assert_eq!(judge(&health("ERROR", true)).0, UNKNOWN);
        let (code, why) = judge(&health("NO_REFERENCE", true));
        assert_eq!(code, HEALTHY);
        assert!(why.starts_with("healthy as far as judged"), "{why}");
        assert_eq!(judge(&health("INCONCLUSIVE", true)).0, HEALTHY);
        assert_eq!(judge(&health("INCONCLUSIVE", false)).0, UNKNOWN);
        let (c, why) = judge(&health("", true));
        assert_eq!(c, UNKNOWN);
        assert!(why.contains("no node-level verdict for n2"), "{why}");
    }
}
