//! `benchlake schedule show NAME|ID` (issue 35, item 8): everything an admin
//! asks of one schedule in one place — what it runs, when (the next instants
//! in its own zone), what its last runs found, whom it tells and what it does
//! to failing nodes.

use anyhow::Context;
use benchlake_coordinator::scheduler::CronSpec;
use benchlake_core::outln;
use benchlake_proto::v1 as pb;

use crate::user::{Conn, find_schedule, fmt_ms_in, node_action_name, schedule_json, state_name};

pub async fn show(conn: &Conn, which: &str, count: u32) -> anyhow::Result<()> {
    let s = find_schedule(conn, which)
        .await?
        .with_context(|| format!("no schedule named '{which}' (schedule list shows them)"))?;
    let runs = conn
        .runs()?
        .list_runs(pb::ListRunsRequest {
            schedule_id: s.schedule_id.clone(),
            limit: count.max(1),
            ..Default::default()
        })
        .await?
        .into_inner()
        .runs;
    let next = next_instants(&s, count as usize);
    if conn.json {
        let mut j = schedule_json(&s);
        j["next_instants_ms"] = serde_json::json!(next);
        j["last_runs"] = serde_json::json!(
            runs.iter()
                .map(|r| serde_json::json!({
                    "run_id": r.run_id, "state": state_name(r.state), "verdict": r.verdict,
                    "scheduled_for_ms": r.scheduled_for_ms, "submitted_at_ms": r.submitted_at_ms,
                }))
                .collect::<Vec<_>>()
        );
        outln!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(());
    }
    for line in render(&s, &next, &runs) {
        outln!("{line}");
    }
    Ok(())
}

/// The next `n` instants of `s` after now, in UTC milliseconds (none for a
/// paused schedule or an expression the coordinator would refuse).
fn next_instants(s: &pb::Schedule, n: usize) -> Vec<i64> {
    if s.paused {
        return Vec::new();
    }
    let Ok(c) = CronSpec::parse(&s.cron, &s.time_zone) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut t = chrono::Utc::now().timestamp_millis();
    while out.len() < n {
        match c.next_after(t) {
            Some(x) => {
                out.push(x);
                t = x;
            }
            None => break,
        }
    }
    out
}

fn render(s: &pb::Schedule, next: &[i64], runs: &[pb::Run]) -> Vec<String> {
    let zone = if s.time_zone.is_empty() {
        "UTC"
    } else {
        &s.time_zone
    };
    let mut out = vec![format!(
        "{} ({}){}",
        s.name,
        s.schedule_id,
        if s.owner.is_empty() {
            String::new()
        } else {
            format!("  owner {}", s.owner)
        }
    )];
    if let Some(spec) = &s.spec {
        let mut params: Vec<String> = spec
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        params.sort();
        out.push(format!(
            "  runs: {}{}",
            spec.benchmark,
            if params.is_empty() {
                String::new()
            } else {
                format!(" -p {}", params.join(" -p "))
            }
        ));
    }
    out.push(format!(
        "  cron: \"{}\" in {zone}; catch-up {}; overlap {}{}",
        s.cron,
        pb::CatchUp::try_from(s.catch_up)
            .map(|c| c
                .as_str_name()
                .trim_start_matches("CATCH_UP_")
                .to_lowercase())
            .unwrap_or_default(),
        if s.allow_overlap { "allowed" } else { "no" },
        if s.paused { "; PAUSED" } else { "" }
    ));
    out.push(format!(
        "  failing nodes: {}",
        match node_action_name(s.node_action) {
            "on" => "drained (and resumed once a later run passes)",
            "dry-run" => "dry run (the drain is logged, not done)",
            _ => "left alone (drain mode off)",
        }
    ));
    out.push(format!(
        "  notify: {}",
        if s.notify.is_empty() {
            "the coordinator's defaults only".to_string()
        } else {
            s.notify.join(", ")
        }
    ));
    if next.is_empty() {
        out.push("  next: none (paused)".into());
    } else {
        out.push("  next:".into());
        for t in next {
            out.push(format!("    {}", fmt_ms_in(*t, &s.time_zone)));
        }
    }
    if runs.is_empty() {
        out.push("  last runs: none yet".into());
    } else {
        out.push("  last runs:".into());
        for r in runs {
            let when = if r.scheduled_for_ms != 0 {
                r.scheduled_for_ms
            } else {
                r.submitted_at_ms
            };
            out.push(format!(
                "    {}  {}  {:<10} {}",
                r.run_id,
                fmt_ms_in(when, &s.time_zone),
                state_name(r.state),
                if r.verdict.is_empty() {
                    "-"
                } else {
                    &r.verdict
                }
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_is_shown_with_its_zone_next_instants_and_last_runs() {
        let s = pb::Schedule {
            schedule_id: "01S".into(),
            name: "nightly".into(),
            cron: "0 2 * * *".into(),
            time_zone: "Europe/Berlin".into(),
            node_action: pb::NodeAction::Drain as i32,
            notify: vec!["ops".into()],
            spec: Some(pb::BenchmarkSpec {
                benchmark: "hostinfo".into(),
                params: [("expect_cores".to_string(), "128".to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let next = next_instants(&s, 3);
        assert_eq!(next.len(), 3);
        assert!(
            next.windows(2).all(|w| w[1] - w[0] == 86_400_000),
            "{next:?}"
        );
        let run = pb::Run {
            run_id: "01R".into(),
            state: pb::RunState::Succeeded as i32,
            verdict: "PASS".into(),
            scheduled_for_ms: 1_764_982_800_000, // 2025-12-06 01:00 UTC = 02:00 CET
            ..Default::default()
        };
        let text = render(&s, &next, &[run]).join("\n");
        assert!(
            text.contains("  runs: hostinfo -p expect_cores=128\n"),
            "{text}"
        );
        assert!(text.contains("\"0 2 * * *\" in Europe/Berlin"), "{text}");
        assert!(text.contains("failing nodes: drained"), "{text}");
        assert!(text.contains("notify: ops\n"), "{text}");
        assert!(text.contains("02:00:00 CET"), "{text}");
        assert!(
            text.contains("01R  2025-12-06 02:00:00 CET  SUCCEEDED  PASS"),
            "{text}"
        );
    }
}
