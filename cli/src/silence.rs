//! `benchlake ack` and `benchlake maintenance`: findings an admin already
//! knows about are silenced — recorded as measured, but neither notified
//! nor drained, and not failing `node-check` (docs/slurm.md,
//! "Acknowledging and silencing"; the coordinator's `silence` module).
use anyhow::Context;
use benchlake_core::outln;
use benchlake_proto::v1 as pb;
use clap::{Args, Subcommand};

use crate::user::Conn;

/// `benchlake ack NODE CHECK --comment TEXT --expires WHEN`, or
/// `ack list` / `ack remove ID`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct AckArgs {
    #[command(subcommand)]
    pub cmd: Option<AckCmd>,
    /// The node (its Slurm or agent name), or `*` for every node (and the
    /// run-level checks).
    #[arg(required = true)]
    pub node: Option<String>,
    /// The check: a name (`node.cores`), a family (`node.`, every check
    /// whose name starts so), or `*`.
    #[arg(required = true)]
    pub check: Option<String>,
    /// Why (required): shown wherever the silenced finding is.
    #[arg(long, required = true)]
    pub comment: Option<String>,
    /// Until when: a duration from now (`7d`, `36h`, `2w`) or a time
    /// (`2026-12-12T00:00Z`, RFC 3339, or a date `2026-12-12`, UTC); at most
    /// 90 days ahead.
    #[arg(long, required = true)]
    pub expires: Option<String>,
    /// Only runs of this schedule (id or name): for a run-level check
    /// (`ack '*' io.write_bw_mib_s --schedule nightly-io …`) or a node's.
    #[arg(long)]
    pub schedule: Option<String>,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Debug, Subcommand)]
pub enum AckCmd {
    /// The acknowledgements in force (with `--all`, the expired ones kept
    /// for the record too).
    List {
        /// Expired ones too.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Removes an acknowledgement (its findings are notified and drained
    /// again from the next run on).
    Remove {
        /// The acknowledgement's id (`ack list` shows it).
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
}

/// `benchlake maintenance add|list|remove`.
#[derive(Debug, Subcommand)]
pub enum MaintenanceCmd {
    /// Declares a maintenance window: results of runs that overlap it on
    /// these nodes are silenced.
    Add {
        /// Node names or a Slurm hostlist expression (`n[1-4]`, `login1,gpu[01-08]`).
        nodes: String,
        /// Start: `now`, a time (`2026-12-08T08:00Z`, RFC 3339, a date) or a
        /// duration from now (`2h`).
        #[arg(long, default_value = "now")]
        start: String,
        /// End: a time, or a duration from the start (`4h`); at most 90 days
        /// after the start.
        #[arg(long)]
        end: String,
        /// Why (required).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// The windows that have not ended (with `--all`, ended ones too).
    List {
        /// Ended windows too.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Removes a window.
    Remove {
        /// The window's id (`maintenance list` shows it).
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A duration like `90s`, `30m`, `36h`, `7d`, `2w`, in milliseconds.
fn duration_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (num, unit) = s.split_at(split);
    let n: i64 = num.parse().ok()?;
    let unit_ms = match unit {
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit_ms)
}

/// A time flag: `now`, a duration after `base`, RFC 3339 (seconds optional:
/// `2026-12-12T00:00Z`) or a date (midnight UTC). `flag` names it in errors.
pub fn parse_when(flag: &str, s: &str, base: i64) -> anyhow::Result<i64> {
    let t = s.trim();
    if t == "now" {
        return Ok(now_ms());
    }
    if let Some(d) = duration_ms(t) {
        return base
            .checked_add(d)
            .with_context(|| format!("{flag}: '{s}' is too far ahead"));
    }
    if let Ok(x) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(x.timestamp_millis());
    }
    for f in ["%Y-%m-%dT%H:%M%#z", "%Y-%m-%d %H:%M%#z"] {
        if let Ok(x) = chrono::DateTime::parse_from_str(&t.replace('Z', "+00:00"), f) {
            return Ok(x.timestamp_millis());
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d")
        && let Some(x) = d.and_hms_opt(0, 0, 0)
    {
        return Ok(x.and_utc().timestamp_millis());
    }
    anyhow::bail!(
        "{flag}: '{s}' is not a time (now, 2026-12-12T08:00Z, RFC 3339, 2026-12-12) nor a duration (30m, 36h, 7d, 2w)"
    )
}

/// A time for people (`2026-12-12T08:00Z`).
fn fmt_time(ms: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) if ms % 60_000 == 0 => t.format("%Y-%m-%dT%H:%MZ").to_string(),
        Some(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => ms.to_string(),
    }
}

fn print_json(v: &serde_json::Value) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn ack_json(a: &pb::Acknowledgement) -> serde_json::Value {
    serde_json::json!({
        "id": a.id, "node": a.node, "check": a.check, "comment": a.comment,
        "author": a.author, "created_ms": a.created_ms, "expires_ms": a.expires_ms,
        "created": fmt_time(a.created_ms), "expires": fmt_time(a.expires_ms),
        "expired": a.expired,
        "schedule_id": (!a.schedule_id.is_empty()).then_some(&a.schedule_id),
        "schedule": (!a.schedule_name.is_empty()).then_some(&a.schedule_name),
    })
}

fn window_json(w: &pb::MaintenanceWindow) -> serde_json::Value {
    serde_json::json!({
        "id": w.id, "nodes": w.nodes, "node_names": w.node_names,
        "start_ms": w.start_ms, "end_ms": w.end_ms,
        "start": fmt_time(w.start_ms), "end": fmt_time(w.end_ms),
        "reason": w.reason, "author": w.author, "created_ms": w.created_ms, "state": w.state,
    })
}

fn ack_line(a: &pb::Acknowledgement) -> String {
    let scope = if a.schedule_name.is_empty() {
        String::new()
    } else {
        format!(" (schedule {})", a.schedule_name)
    };
    format!(
        "{}  {:<12} {:<26} until {}{}  by {}: {}",
        a.id,
        a.node,
        format!("{}{scope}", a.check),
        fmt_time(a.expires_ms),
        if a.expired { " (expired)" } else { "" },
        a.author,
        a.comment
    )
}

fn window_line(w: &pb::MaintenanceWindow) -> String {
    format!(
        "{}  {:<9} {:<16} {} to {}  by {}: {}",
        w.id,
        w.state,
        w.nodes,
        fmt_time(w.start_ms),
        fmt_time(w.end_ms),
        w.author,
        w.reason
    )
}

/// `benchlake ack …`.
pub async fn ack_cmd(a: AckArgs) -> anyhow::Result<()> {
    match a.cmd {
        Some(AckCmd::List { all, conn }) => {
            let r = conn
                .cluster()?
                .list_acknowledgements(pb::ListAcknowledgementsRequest { all })
                .await?
                .into_inner();
            if conn.json {
                return print_json(&serde_json::json!(
                    r.acknowledgements.iter().map(ack_json).collect::<Vec<_>>()
                ));
            }
            if r.acknowledgements.is_empty() {
                outln!("no acknowledgement{}", if all { "" } else { " in force" });
            }
            for x in &r.acknowledgements {
                outln!("{}", ack_line(x));
            }
            Ok(())
        }
        Some(AckCmd::Remove { id, conn }) => {
            let x = conn
                .cluster()?
                .remove_acknowledgement(pb::RemoveAcknowledgementRequest { id })
                .await?
                .into_inner();
            if conn.json {
                return print_json(&ack_json(&x));
            }
            outln!("removed {}", ack_line(&x));
            Ok(())
        }
        None => {
            let (Some(node), Some(check), Some(comment), Some(expires)) =
                (a.node, a.check, a.comment, a.expires)
            else {
                anyhow::bail!("ack needs NODE CHECK --comment TEXT --expires WHEN");
            };
            let expires_ms = parse_when("--expires", &expires, now_ms())?;
            let x = a
                .conn
                .cluster()?
                .acknowledge_check(pb::AcknowledgeCheckRequest {
                    node,
                    check,
                    comment,
                    expires_ms,
                    schedule: a.schedule.unwrap_or_default(),
                })
                .await?
                .into_inner();
            if a.conn.json {
                return print_json(&ack_json(&x));
            }
            outln!("acknowledged {}", ack_line(&x));
            Ok(())
        }
    }
}

/// `benchlake maintenance …`.
pub async fn maintenance_cmd(c: MaintenanceCmd) -> anyhow::Result<()> {
    match c {
        MaintenanceCmd::Add {
            nodes,
            start,
            end,
            reason,
            conn,
        } => {
            let start_ms = parse_when("--start", &start, now_ms())?;
            let end_ms = parse_when("--end", &end, start_ms)?;
            let w = conn
                .cluster()?
                .create_maintenance(pb::CreateMaintenanceRequest {
                    nodes,
                    start_ms,
                    end_ms,
                    reason,
                })
                .await?
                .into_inner();
            if conn.json {
                return print_json(&window_json(&w));
            }
            outln!("maintenance {}", window_line(&w));
            outln!("  nodes: {}", w.node_names.join(" "));
            Ok(())
        }
        MaintenanceCmd::List { all, conn } => {
            let r = conn
                .cluster()?
                .list_maintenance(pb::ListMaintenanceRequest { all })
                .await?
                .into_inner();
            if conn.json {
                return print_json(&serde_json::json!(
                    r.windows.iter().map(window_json).collect::<Vec<_>>()
                ));
            }
            if r.windows.is_empty() {
                outln!(
                    "no maintenance window{}",
                    if all { "" } else { " ahead or open" }
                );
            }
            for w in &r.windows {
                outln!("{}", window_line(w));
            }
            Ok(())
        }
        MaintenanceCmd::Remove { id, conn } => {
            let w = conn
                .cluster()?
                .delete_maintenance(pb::DeleteMaintenanceRequest { id })
                .await?
                .into_inner();
            if conn.json {
                return print_json(&window_json(&w));
            }
            outln!("removed maintenance {}", window_line(&w));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_parse() {
        let base = 1_796_000_000_000;
        assert_eq!(
            parse_when("--expires", "7d", base).unwrap(),
            base + 7 * 86_400_000
        );
        assert_eq!(
            parse_when("--end", "4h", base).unwrap(),
            base + 4 * 3_600_000
        );
        assert_eq!(
            parse_when("--end", "2w", base).unwrap(),
            base + 14 * 86_400_000
        );
        let t = |s: &str| parse_when("--start", s, base).unwrap();
        assert_eq!(t("2026-12-12T00:00Z"), 1_797_033_600_000);
        assert_eq!(t("2026-12-12T00:00:00Z"), 1_797_033_600_000);
        assert_eq!(t("2026-12-12T01:00+01:00"), 1_797_033_600_000);
        assert_eq!(t("2026-12-12"), 1_797_033_600_000);
        let e = parse_when("--expires", "friday", base)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--expires: 'friday' is not a time"), "{e}");
        assert!(parse_when("--expires", "7x", base).is_err());
    }
}
