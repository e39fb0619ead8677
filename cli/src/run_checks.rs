//! The checks of `benchlake run show`: counts by status, the rows that did
//! not pass (worst first) with the change point of a REGRESSION, and the
//! failing nodes (docs/io.md, "Outcomes").
use benchlake_core::outln;
use benchlake_core::verdict;
use benchlake_proto::v1 as pb;

/// The nodes with a FAIL, REGRESSION or ERROR `node_health` row in `d`,
/// sorted, once each (`*`, a row naming no node, is left out).
pub fn failing_nodes(d: &pb::RunDetail) -> Vec<&str> {
    let mut v: Vec<&str> = d
        .checks
        .iter()
        .filter(|c| {
            !c.node.is_empty()
                && c.node != "*"
                && (verdict::is_failure(&c.status) || c.status == verdict::ERROR)
        })
        .map(|c| c.node.as_str())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// One check as JSON (`run show --json`): the change point's fields only
/// when the row has one.
pub fn check_json(c: &pb::RunCheck) -> serde_json::Value {
    let mut v = serde_json::json!({
        "check": c.check, "status": c.status, "value": c.value, "reference": c.reference,
        "unit": c.unit, "message": c.message, "node": (!c.node.is_empty()).then_some(&c.node),
    });
    if let (Some(o), Some(since)) = (v.as_object_mut(), &c.since_run) {
        o.insert("since_run".into(), since.clone().into());
        o.insert("since_date".into(), c.since_date.clone().into());
        o.insert("step".into(), c.step.into());
        o.insert("confidence".into(), c.confidence.into());
    }
    v
}

/// "since run R of 2026-11-20: -12.3 % (confidence 0.999)" for a row with a
/// change point.
pub fn change_point(c: &pb::RunCheck) -> Option<String> {
    let since = c.since_run.as_deref()?;
    let mut s = format!(
        "since run {since} of {}",
        c.since_date.as_deref().unwrap_or("?")
    );
    if let Some(step) = c.step {
        s.push_str(&format!(": {:+.1} %", step * 100.0));
    }
    if let Some(conf) = c.confidence {
        s.push_str(&format!(" (confidence {conf:.3})"));
    }
    Some(s)
}

/// The lines of the run's checks (see the module docs).
pub fn check_lines(d: &pb::RunDetail) -> Vec<String> {
    let mut out = Vec::new();
    if d.checks.is_empty() {
        return out;
    }
    let count = |s: &str| d.checks.iter().filter(|c| c.status == s).count();
    // Regressions, not judged (no reference yet) and disturbed runs are
    // counted when there are any.
    let extra: String = [
        verdict::REGRESSION,
        verdict::INCONCLUSIVE,
        verdict::NO_REFERENCE,
    ]
    .iter()
    .filter(|s| count(s) > 0)
    .map(|s| format!(", {} {s}", count(s)))
    .collect();
    out.push(format!(
        "checks     {} FAIL, {} ERROR, {} PASS{extra}",
        count(verdict::FAIL),
        count(verdict::ERROR),
        count(verdict::PASS)
    ));
    let mut bad: Vec<&pb::RunCheck> = d.checks.iter().filter(|c| c.status != "PASS").collect();
    // Worst first (FAIL, REGRESSION, ERROR, INCONCLUSIVE, NO_REFERENCE),
    // then by check and node.
    let rank = |s: &str| verdict::rank(s).unwrap_or(0);
    bad.sort_by(|a, b| {
        (rank(&b.status), &a.check, &a.node).cmp(&(rank(&a.status), &b.check, &b.node))
    });
    for c in bad {
        let node = if c.node.is_empty() { "-" } else { &c.node };
        let figure = match c.reference {
            Some(_) => format!(
                "{} vs {}",
                crate::nodecheck::fmt_value(c.value, &c.unit),
                crate::nodecheck::fmt_value(c.reference, &c.unit)
            ),
            None => crate::nodecheck::fmt_value(c.value, &c.unit),
        };
        out.push(format!(
            "  {:<5} {:<24} {:<10} {}  {}",
            c.status, c.check, node, figure, c.message
        ));
        if let Some(cp) = change_point(c) {
            out.push(format!("        {cp}"));
        }
    }
    let nodes = failing_nodes(d);
    if !nodes.is_empty() {
        out.push(format!("failing nodes  {}", nodes.join(" ")));
    }
    out
}

/// Prints [`check_lines`].
pub fn print_checks(d: &pb::RunDetail) {
    for l in check_lines(d) {
        outln!("{l}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(status: &str, node: &str) -> pb::RunCheck {
        pb::RunCheck {
            check: "io.write_bw_mib_s.vs_median".into(),
            status: status.into(),
            value: Some(880.0),
            reference: Some(1000.0),
            unit: "MiB/s".into(),
            message: "m".into(),
            node: node.into(),
            ..Default::default()
        }
    }

    #[test]
    fn regressions_print_their_change_point() {
        let mut r = check("REGRESSION", "");
        r.since_run = Some("01RUN".into());
        r.since_date = Some("2026-11-20".into());
        r.step = Some(-0.123);
        r.confidence = Some(0.9991);
        let mut n = check("REGRESSION", "n2");
        n.check = "node.write_bw_mib_s".into();
        let d = pb::RunDetail {
            checks: vec![check("PASS", ""), check("ERROR", ""), r.clone(), n],
            ..Default::default()
        };
        let lines = check_lines(&d);
        assert_eq!(lines[0], "checks     0 FAIL, 1 ERROR, 1 PASS, 2 REGRESSION");
        // REGRESSION before ERROR; the change point under its row.
        assert!(
            lines[1].starts_with("  REGRESSION io.write_bw_mib_s.vs_median"),
            "{lines:?}"
        );
        assert_eq!(
            lines[2],
            "        since run 01RUN of 2026-11-20: -12.3 % (confidence 0.999)"
        );
        assert!(
            lines[3].starts_with("  REGRESSION node.write_bw_mib_s"),
            "{lines:?}"
        );
        assert!(lines[4].starts_with("  ERROR"), "{lines:?}");
        assert_eq!(lines[5], "failing nodes  n2");
        let j = check_json(&r);
        assert_eq!(j["since_run"], "01RUN");
        assert_eq!(j["step"], -0.123);
        assert!(check_json(&check("PASS", "")).get("since_run").is_none());
    }
}
