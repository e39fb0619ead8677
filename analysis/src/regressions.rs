//! REGRESSION verdicts: the change-point detector ([`crate::changepoint`])
//! over the series a site watches, applied to the rows the other checks
//! made (docs/io.md, "Regressions").
//!
//! - Schedule-level figures ([`apply`]): every rule with a learned reference
//!   (I/O bandwidths and spreads, mdtest rates, LinkTest summary figures).
//!   Its learned row becomes REGRESSION when it PASSes but the figure's
//!   series (the schedule's previous runs and this one) moved to a worse
//!   level; a FAIL stays FAIL and gets the change point that explains it; a
//!   disturbed run (INCONCLUSIVE, or a spread figure far above its history)
//!   is never a regression.
//! - Per-node figures ([`apply_nodes`]): each numeric node check's value,
//!   per node, over the node's previous `node_health` rows of the schedule.
use std::collections::BTreeMap;

use benchlake_core::verdict;

use crate::changepoint::{self, Config, Point, Regression};
use crate::io_checks::{Better, CheckRow, IoCheckConfig};
use crate::node_checks::NodeRow;

/// The values of `series` (figure → points, oldest first): the history the
/// learned references take.
pub fn values(series: &BTreeMap<String, Vec<Point>>) -> BTreeMap<String, Vec<f64>> {
    series
        .iter()
        .map(|(k, v)| (k.clone(), v.iter().map(|p| p.value).collect()))
        .collect()
}

/// The series of a figure as the detector takes it: the earlier points in
/// the order of their logical nights (a backfilled night is created after
/// later ones; runs of one night stay in creation order), then the current
/// run's value.
fn with_current(earlier: Option<&Vec<Point>>, current: (&str, &str), value: f64) -> Vec<Point> {
    let mut s = earlier.cloned().unwrap_or_default();
    s.sort_by(|a, b| a.date.cmp(&b.date));
    s.push(Point {
        run_id: current.0.to_string(),
        date: current.1.to_string(),
        value,
    });
    s
}

/// Marks a row with a regression: a PASS becomes REGRESSION with the change
/// first in its message; a FAIL keeps its status and gets the change after
/// its message. Other statuses are left alone.
fn mark(
    status: &mut String,
    message: &mut String,
    reg: Regression,
    unit: &str,
) -> Option<Regression> {
    match status.as_str() {
        verdict::PASS => {
            *status = verdict::REGRESSION.to_string();
            *message = format!("{}; {message}", reg.message(unit));
            Some(reg)
        }
        verdict::FAIL => {
            *message = format!("{message}; {}", reg.message(unit));
            Some(reg)
        }
        _ => None,
    }
}

/// Applies the detector to the learned rows of [`crate::io_checks::evaluate`]
/// (see the module docs). `series` holds the previous runs of each figure
/// (oldest first), `current` this run's id and logical night.
pub fn apply(
    rows: &mut [CheckRow],
    figures: &BTreeMap<String, f64>,
    series: &BTreeMap<String, Vec<Point>>,
    current: (&str, &str),
    cfg: &IoCheckConfig,
    cp: &Config,
) {
    if !cp.enabled {
        return;
    }
    let disturbed = crate::io_checks::disturbances(figures, &values(series), cfg);
    let held = crate::io_checks::holds(figures, &values(series), cfg);
    for r in cfg.rules.iter().filter(|r| r.rel_floor.is_some()) {
        // A disturbed run, or a loss in a few processes while the median
        // held (a slow node: the node checks'), is no regression of the
        // schedule.
        if r.spread.iter().any(|s| disturbed.contains_key(s))
            || r.held.iter().any(|h| held.contains_key(h))
        {
            continue;
        }
        let Some(&v) = figures.get(&r.figure).filter(|v| v.is_finite()) else {
            continue;
        };
        let name = if r.plain {
            r.figure.clone()
        } else {
            format!("{}.vs_median", r.figure)
        };
        let Some(row) = rows.iter_mut().find(|x| x.check == name) else {
            continue;
        };
        let s = with_current(series.get(&r.figure), current, v);
        if let Some(reg) = changepoint::detect(&s, r.better, cp) {
            row.regression = mark(&mut row.status, &mut row.message, reg, &r.unit);
        }
    }
}

/// The values of a node history ((node, check) → points, oldest first).
pub fn node_values(
    history: &BTreeMap<(String, String), Vec<Point>>,
) -> BTreeMap<(String, String), Vec<f64>> {
    history
        .iter()
        .map(|(k, v)| (k.clone(), v.iter().map(|p| p.value).collect()))
        .collect()
}

/// Whether higher is better for a node check's value, for the numeric node
/// checks that have a series (None: not watched).
pub fn node_better(check: &str) -> Option<Better> {
    match check {
        "node.cores" | "node.memory_bytes" => Some(Better::Higher),
        c if c.starts_with("node.")
            && (c.ends_with("_bw_mib_s") || c.ends_with("_bw_of_median")) =>
        {
            Some(Better::Higher)
        }
        "traced.rank_time" => Some(Better::Lower),
        _ => None,
    }
}

/// The value of a node row in its node's series. A node's bandwidth against
/// the run's median node (`node.*_bw_of_median`) is followed as its share of
/// that run's bound (value ÷ reference, the reference being a fixed fraction
/// of the median node): a filesystem that slows down slows every node and
/// the median alike, so it moves no node's series (it is the schedule's
/// regression), while a node that falls behind its peers does.
pub fn node_series_value(check: &str, value: f64, reference: Option<f64>) -> Option<f64> {
    if check.ends_with("_bw_of_median") {
        return reference
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(|r| value / r)
            .filter(|v| v.is_finite());
    }
    value.is_finite().then_some(value)
}

/// The unit a node check's series is followed in ([`node_series_value`]).
fn node_series_unit(check: &str, unit: &str) -> String {
    if check.ends_with("_bw_of_median") {
        "× its bound".into()
    } else {
        unit.to_string()
    }
}

/// Applies the detector per (node, check) to a run's node rows: `history`
/// maps (node, check) to the node's previous values of the check (oldest
/// first). Only rows of [`node_better`] checks on a named node are judged.
pub fn apply_nodes(
    rows: &mut [NodeRow],
    history: &BTreeMap<(String, String), Vec<Point>>,
    current: (&str, &str),
    cp: &Config,
) {
    if !cp.enabled {
        return;
    }
    for row in rows.iter_mut().filter(|r| r.node != "*") {
        let (Some(better), Some(v)) = (
            node_better(&row.check),
            row.value
                .and_then(|v| node_series_value(&row.check, v, row.reference)),
        ) else {
            continue;
        };
        let key = (row.node.clone(), row.check.clone());
        let s = with_current(history.get(&key), current, v);
        if let Some(reg) = changepoint::detect(&s, better, cp) {
            let unit = node_series_unit(&row.check, &row.unit);
            row.regression = mark(&mut row.status, &mut row.message, reg, &unit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io_checks::{self, evaluate};

    fn pts(vals: &[f64]) -> Vec<Point> {
        vals.iter()
            .enumerate()
            .map(|(i, v)| Point {
                run_id: format!("R{i:02}"),
                date: format!("2026-11-{:02}", i + 1),
                value: *v,
            })
            .collect()
    }

    /// 1000 MiB/s nights with ±1 % of fixed noise.
    fn nights(n: usize, level: impl Fn(usize) -> f64) -> Vec<f64> {
        (0..n)
            .map(|i| {
                1000.0 * level(i) * (1.0 + 0.01 * [0.3, -0.8, 1.1, -0.2, 0.6, -1.2, 0.1][i % 7])
            })
            .collect()
    }

    #[test]
    fn a_drift_within_the_learned_limit_is_a_regression() {
        let cfg = IoCheckConfig::default();
        // -1 % a night from night 25 on; the current run is night 40.
        let all = nights(41, |i| 1.0 - 0.01 * i.saturating_sub(24) as f64);
        let (hist, now) = all.split_at(40);
        let mut series = BTreeMap::new();
        series.insert("io.write_bw_mib_s".to_string(), pts(hist));
        let figs: BTreeMap<String, f64> = [("io.write_bw_mib_s".to_string(), now[0])].into();
        let mut rows = evaluate(&figs, &values(&series), &cfg);
        let find = |rows: &[CheckRow]| {
            rows.iter()
                .find(|r| r.check == "io.write_bw_mib_s.vs_median")
                .cloned()
                .unwrap()
        };
        // The learned reference follows the drift: the 16 % loss passes it.
        assert_eq!(find(&rows).status, "PASS", "{}", find(&rows).message);
        apply(
            &mut rows,
            &figs,
            &series,
            ("RNOW", "2026-12-01"),
            &cfg,
            &Config::default(),
        );
        let r = find(&rows);
        assert_eq!(r.status, "REGRESSION", "{}", r.message);
        let reg = r.regression.clone().unwrap();
        let since: usize = reg.since_run[1..].parse().unwrap();
        assert!((23..=29).contains(&since), "{reg:?}");
        assert!(reg.step < -0.12 && reg.confidence > 0.99, "{reg:?}");
        assert!(
            r.message.starts_with("regression since run R2"),
            "{}",
            r.message
        );
        // Switched off: PASS as before.
        let mut rows = evaluate(&figs, &values(&series), &cfg);
        let off = Config {
            enabled: false,
            ..Config::default()
        };
        apply(
            &mut rows,
            &figs,
            &series,
            ("RNOW", "2026-12-01"),
            &cfg,
            &off,
        );
        assert_eq!(find(&rows).status, "PASS");
        // The batch carries the columns.
        let mut rows = evaluate(&figs, &values(&series), &cfg);
        apply(
            &mut rows,
            &figs,
            &series,
            ("RNOW", "x"),
            &cfg,
            &Config::default(),
        );
        let b = io_checks::to_batch("RNOW", "src", &rows).unwrap();
        assert!(b.schema().index_of("since_run").is_ok());
        assert!(b.schema().index_of("confidence").is_ok());
    }

    #[test]
    fn a_fail_stays_fail_and_a_steady_series_passes() {
        let cfg = IoCheckConfig::default();
        let all = nights(31, |i| if i >= 28 { 0.5 } else { 1.0 });
        let (hist, now) = all.split_at(30);
        let mut series = BTreeMap::new();
        series.insert("io.write_bw_mib_s".to_string(), pts(hist));
        let figs: BTreeMap<String, f64> = [("io.write_bw_mib_s".to_string(), now[0])].into();
        let mut rows = evaluate(&figs, &values(&series), &cfg);
        apply(
            &mut rows,
            &figs,
            &series,
            ("RNOW", "d"),
            &cfg,
            &Config::default(),
        );
        let r = rows
            .iter()
            .find(|r| r.check == "io.write_bw_mib_s.vs_median")
            .unwrap();
        // The median of the last 20 is still 1000: -50 % fails it.
        assert_eq!(r.status, "FAIL");
        assert_eq!(
            r.regression.as_ref().map(|g| g.since_run.as_str()),
            Some("R28")
        );
        let steady = nights(31, |_| 1.0);
        let (hist, now) = steady.split_at(30);
        series.insert("io.write_bw_mib_s".to_string(), pts(hist));
        let figs: BTreeMap<String, f64> = [("io.write_bw_mib_s".to_string(), now[0])].into();
        let mut rows = evaluate(&figs, &values(&series), &cfg);
        apply(
            &mut rows,
            &figs,
            &series,
            ("RNOW", "d"),
            &cfg,
            &Config::default(),
        );
        assert!(rows.iter().all(|r| r.regression.is_none()));
    }

    #[test]
    fn earlier_nights_are_taken_in_the_order_of_their_nights() {
        let mut p = pts(&[1.0, 2.0, 3.0]);
        // The second run was a backfill of an earlier night.
        p[1].date = "2026-10-01".into();
        let s = with_current(Some(&p), ("NOW", "2026-12-01"), 4.0);
        let order: Vec<&str> = s.iter().map(|x| x.run_id.as_str()).collect();
        assert_eq!(order, ["R01", "R00", "R02", "NOW"]);
    }

    #[test]
    fn node_series_per_node_and_check() {
        let mut hist = BTreeMap::new();
        let slow = nights(20, |i| if i >= 17 { 0.85 } else { 1.0 });
        let (h, now) = slow.split_at(19);
        hist.insert(
            ("n2".to_string(), "node.write_bw_mib_s".to_string()),
            pts(h),
        );
        let row = |node: &str, check: &str, v: f64| NodeRow {
            node: node.into(),
            check: check.into(),
            status: "PASS".into(),
            value: Some(v),
            reference: None,
            unit: "MiB/s".into(),
            message: "ok".into(),
            regression: None,
        };
        let mut rows = vec![
            row("n2", "node.write_bw_mib_s", now[0]),
            row("n1", "node.write_bw_mib_s", now[0]),
            row("n2", "node.kernel", 1.0),
        ];
        apply_nodes(&mut rows, &hist, ("RNOW", "d"), &Config::default());
        assert_eq!(rows[0].status, "REGRESSION", "{}", rows[0].message);
        assert_eq!(
            rows[0].regression.as_ref().map(|g| g.since_run.as_str()),
            Some("R17")
        );
        assert_eq!(
            (rows[1].status.as_str(), rows[2].status.as_str()),
            ("PASS", "PASS")
        );
        assert_eq!(node_better("traced.rank_time"), Some(Better::Lower));
        assert_eq!(node_better("node.kernel"), None);
    }
}
