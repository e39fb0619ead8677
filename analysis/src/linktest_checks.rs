//! LinkTest health checks: a run's `linktest_runs` and `linktest_timings`
//! rows → `checks` rows, with the same rules and verdicts as the I/O checks
//! ([`crate::io_checks::evaluate`]: absolute bound and/or the reference
//! learned from the same schedule's previous runs, [`crate::reference`]).
//! Pure: no I/O, no clock.
//!
//! Figures:
//! - `linktest.max_time_s`: the slowest pair's time per message (LinkTest's
//!   own maximum, `linktest_runs.max_time_s`; the largest over files), lower
//!   is better: one bad link or port shows here first;
//! - `linktest.avg_time_s`: the mean of the files' average pair times;
//! - `linktest.slow_pairs`: pairs measured slower than the slow-pair
//!   threshold (an absolute time when configured, else a factor of the
//!   median pair time of the pair's own file, 2 by default like the LinkTest
//!   report's host-pair listing: a run of several files, such as netprobe's
//!   size sweep with one file per message size, judges each size against
//!   itself). Judged against the history of the schedule's slow-pair counts
//!   (median + 5 scaled MADs, at least 3 pairs, 50 % and 5 × √median, the
//!   Poisson deviation of a count); an explicit
//!   `check_linktest_slow_pairs` bound replaces that;
//! - `linktest.pair_spread`: the run's own spread, p90 / p50 of the pair
//!   times (the largest over files): a run whose spread is far above its
//!   history was disturbed (a loaded host, a noisy neighbour), and its FAILs
//!   are INCONCLUSIVE instead.
use std::collections::BTreeMap;

use arrow::array::{Array, Float64Array, RecordBatch};

use crate::io_checks::{Better, IoCheckConfig, IoCheckError, rule};

/// Parameters that set the slow-pair threshold (not thresholds of a figure).
pub const SLOW_PAIR_PARAMS: &[&str] = &["check_slow_pair_factor", "check_slow_pair_time_s"];

/// How a slow pair is recognised.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowPair {
    /// A pair slower than this factor × the run's median pair time is slow.
    pub factor: f64,
    /// Absolute threshold (s); replaces the factor when set.
    pub time_s: Option<f64>,
}

impl Default for SlowPair {
    fn default() -> Self {
        SlowPair {
            factor: 2.0,
            time_s: None,
        }
    }
}

impl SlowPair {
    /// Reads `check_slow_pair_factor` / `check_slow_pair_time_s` from run
    /// parameters (absent = default).
    pub fn from_params(params: &BTreeMap<String, String>) -> Result<Self, String> {
        let mut s = SlowPair::default();
        let num = |k: &str| -> Result<Option<f64>, String> {
            params
                .get(k)
                .map(|v| {
                    v.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite() && *x > 0.0)
                        .ok_or_else(|| format!("params.{k}: '{v}' is not a positive number"))
                })
                .transpose()
        };
        if let Some(f) = num("check_slow_pair_factor")? {
            s.factor = f;
        }
        s.time_s = num("check_slow_pair_time_s")?;
        Ok(s)
    }

    /// The slow-pair threshold (s) of a file whose pairs' median time is
    /// `file_median`: the absolute time when set, else factor × the median.
    /// A pair slower than this is slow (the one rule of the run's
    /// `linktest.slow_pairs`, the per-node check and `linktest_host_summary`).
    pub fn threshold(&self, file_median: f64) -> f64 {
        self.time_s.unwrap_or(self.factor * file_median)
    }
}

/// The spread figure of a LinkTest run.
pub const PAIR_SPREAD: &str = "linktest.pair_spread";

/// The median pair time (the largest over the run's files): the network's
/// level as most pairs saw it.
pub const MEDIAN_TIME: &str = "linktest.median_time_s";

/// Default absolute floor of the slow-pair count's learned allowance.
pub const SLOW_PAIRS_FLOOR: f64 = 3.0;

/// The default rules, all against the reference learned from the
/// schedule's history: max pair time (floor: doubling), mean pair time
/// (floor 10 %), the count of slow pairs (floors 3 pairs, 50 % and 5 ×
/// √median), the
/// pair spread (floor +50 % and 0.5), each INCONCLUSIVE rather than FAIL
/// when the run's pair spread shows it was disturbed.
pub fn default_config() -> IoCheckConfig {
    let spread = [PAIR_SPREAD];
    IoCheckConfig {
        rules: vec![
            rule("linktest.max_time_s", Better::Lower, "s", None, Some(1.0))
                .spread(&spread)
                .held(&[MEDIAN_TIME]),
            rule("linktest.avg_time_s", Better::Lower, "s", None, Some(0.10))
                .spread(&spread)
                .held(&[MEDIAN_TIME]),
            rule(MEDIAN_TIME, Better::Lower, "s", None, Some(0.10)).spread(&spread),
            rule(
                "linktest.slow_pairs",
                Better::Lower,
                "pairs",
                None,
                Some(0.5),
            )
            .abs_floor(SLOW_PAIRS_FLOOR)
            .count()
            .plain()
            .spread(&spread),
            rule(PAIR_SPREAD, Better::Lower, "ratio", None, Some(0.5))
                .abs_floor(0.5)
                .spread(&spread),
        ],
        ..IoCheckConfig::default()
    }
}

fn f64_col<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a Float64Array, IoCheckError> {
    b.schema()
        .index_of(name)
        .ok()
        .and_then(|i| b.column(i).as_any().downcast_ref::<Float64Array>())
        .ok_or_else(|| IoCheckError::Column(name.into()))
}

fn values(batches: &[RecordBatch], name: &str) -> Result<Vec<f64>, IoCheckError> {
    let mut out = Vec::new();
    for b in batches {
        let c = f64_col(b, name)?;
        out.extend((0..c.len()).filter(|i| !c.is_null(*i)).map(|i| c.value(i)));
    }
    Ok(out)
}

/// The median of `v` (sorted in place); 0 when empty.
fn median_of(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// p90 / p50 of one file's pair times (None for an empty file or a zero
/// median).
pub fn pair_spread(times: &[f64]) -> Option<f64> {
    let p50 = crate::reference::quantile(times, 0.5)?;
    let p90 = crate::reference::quantile(times, 0.9)?;
    (p50 > 0.0).then(|| p90 / p50)
}

/// The pair times of `timings` grouped by their `source` (the file they
/// were read from; one group when the batches have no such column).
pub fn times_by_source(timings: &[RecordBatch]) -> Result<Vec<Vec<f64>>, IoCheckError> {
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for b in timings {
        let c = f64_col(b, "time_s")?;
        let src = b
            .column_by_name("source")
            .and_then(|a| arrow::compute::cast(a, &arrow::datatypes::DataType::Utf8).ok());
        let src = src
            .as_ref()
            .and_then(|a| a.as_any().downcast_ref::<arrow::array::StringArray>());
        for i in (0..c.len()).filter(|i| !c.is_null(*i)) {
            let key = src
                .filter(|s| s.is_valid(i))
                .map(|s| s.value(i).to_string())
                .unwrap_or_default();
            by.entry(key).or_default().push(c.value(i));
        }
    }
    Ok(by.into_values().collect())
}

/// The slow pairs among `groups` (pair times per file): above the absolute
/// time when set, else above the factor × the median of the pair's file.
pub fn count_slow(groups: &mut [Vec<f64>], slow: &SlowPair) -> usize {
    groups
        .iter_mut()
        .map(|g| {
            let threshold = match slow.time_s {
                Some(t) => t,
                None => slow.threshold(median_of(g)),
            };
            g.iter().filter(|t| **t > threshold).count()
        })
        .sum()
}

/// The figures of one run. Absent when the run has no rows for them.
pub fn figures(
    runs: &[RecordBatch],
    timings: &[RecordBatch],
    slow: &SlowPair,
) -> Result<BTreeMap<String, f64>, IoCheckError> {
    let mut out = BTreeMap::new();
    let max = values(runs, "max_time_s")?;
    let avg = values(runs, "avg_time_s")?;
    let times = values(timings, "time_s")?;
    if let Some(m) = max.iter().copied().reduce(f64::max) {
        out.insert("linktest.max_time_s".into(), m);
    } else if let Some(m) = times.iter().copied().reduce(f64::max) {
        out.insert("linktest.max_time_s".into(), m);
    }
    if !avg.is_empty() {
        out.insert(
            "linktest.avg_time_s".into(),
            avg.iter().sum::<f64>() / avg.len() as f64,
        );
    }
    if !times.is_empty() {
        let mut groups = times_by_source(timings)?;
        if let Some(s) = groups
            .iter()
            .filter_map(|g| pair_spread(g))
            .reduce(f64::max)
        {
            out.insert(PAIR_SPREAD.into(), s);
        }
        if let Some(m) = groups
            .iter()
            .filter_map(|g| crate::reference::quantile(g, 0.5))
            .reduce(f64::max)
        {
            out.insert(MEDIAN_TIME.into(), m);
        }
        let n = count_slow(&mut groups, slow);
        out.insert("linktest.slow_pairs".into(), n as f64);
    }
    Ok(out)
}

/// The `checks` batch of one LinkTest run.
pub fn linktest_checks(
    run_id: &str,
    source: &str,
    runs: &[RecordBatch],
    timings: &[RecordBatch],
    slow: &SlowPair,
    history: &BTreeMap<String, Vec<f64>>,
    cfg: &IoCheckConfig,
) -> Result<RecordBatch, IoCheckError> {
    let rows = crate::io_checks::evaluate(&figures(runs, timings, slow)?, history, cfg);
    crate::io_checks::to_batch(run_id, source, &rows)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::StringArray;
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(cols: &[(&str, Vec<f64>)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(
            cols.iter()
                .map(|(n, _)| Field::new(*n, DataType::Float64, false))
                .collect::<Vec<_>>(),
        ));
        RecordBatch::try_new(
            schema,
            cols.iter()
                .map(|(_, v)| Arc::new(Float64Array::from(v.clone())) as arrow::array::ArrayRef)
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn slow_pairs_against_the_median_or_an_absolute_time() {
        let runs = batch(&[("max_time_s", vec![9e-6]), ("avg_time_s", vec![3e-6])]);
        // Median 2e-6: 2× is 4e-6, so 5e-6 and 9e-6 are slow.
        let t = batch(&[("time_s", vec![1e-6, 2e-6, 2e-6, 5e-6, 9e-6])]);
        let f = figures(
            std::slice::from_ref(&runs),
            std::slice::from_ref(&t),
            &SlowPair::default(),
        )
        .unwrap();
        assert_eq!(f["linktest.max_time_s"], 9e-6);
        assert_eq!(f["linktest.avg_time_s"], 3e-6);
        assert_eq!(f["linktest.slow_pairs"], 2.0);
        let p: BTreeMap<String, String> =
            [("check_slow_pair_time_s".to_string(), "6e-6".to_string())].into();
        let abs = SlowPair::from_params(&p).unwrap();
        assert_eq!(
            figures(std::slice::from_ref(&runs), std::slice::from_ref(&t), &abs).unwrap()["linktest.slow_pairs"],
            1.0
        );
        let bad: BTreeMap<String, String> =
            [("check_slow_pair_factor".to_string(), "0".to_string())].into();
        assert!(SlowPair::from_params(&bad).is_err());

        // Verdicts: two slow pairs are within the floor of 3 pairs (even
        // without a history of counts); the max time is 3× its median of
        // [3e-6; 5] → FAIL (doubling allowed).
        let history: BTreeMap<String, Vec<f64>> = [
            ("linktest.max_time_s".to_string(), vec![3e-6; 5]),
            ("linktest.avg_time_s".to_string(), vec![3e-6; 5]),
        ]
        .into();
        let b = linktest_checks(
            "r",
            "s",
            std::slice::from_ref(&runs),
            std::slice::from_ref(&t),
            &SlowPair::default(),
            &history,
            &default_config(),
        )
        .unwrap();
        let check = b.column(2).as_any().downcast_ref::<StringArray>().unwrap();
        let status = b.column(3).as_any().downcast_ref::<StringArray>().unwrap();
        let reference = b.column(5).as_any().downcast_ref::<Float64Array>().unwrap();
        let get = |c: &str| {
            let i = (0..b.num_rows()).find(|i| check.value(*i) == c).unwrap();
            (status.value(i).to_string(), reference.value(i))
        };
        assert_eq!(get("linktest.slow_pairs").0, "PASS");
        assert_eq!(get("linktest.max_time_s.vs_median"), ("FAIL".into(), 3e-6));
        assert_eq!(get("linktest.avg_time_s.vs_median"), ("PASS".into(), 3e-6));
        assert_eq!(get("linktest.pair_spread.vs_median").0, "NO_REFERENCE");
        // An explicit bound replaces the learned slow-pair check.
        let mut cfg = default_config();
        let p: BTreeMap<String, String> =
            [("check_linktest_slow_pairs".to_string(), "0".to_string())].into();
        crate::io_checks::apply_params(&mut cfg, &p, SLOW_PAIR_PARAMS).unwrap();
        let f = figures(&[runs], &[t], &SlowPair::default()).unwrap();
        let rows = crate::io_checks::evaluate(&f, &history, &cfg);
        let slow: Vec<_> = rows
            .iter()
            .filter(|r| r.check.starts_with("linktest.slow_pairs"))
            .collect();
        assert_eq!(slow.len(), 1, "{slow:?}");
        assert_eq!(
            (slow[0].status.as_str(), slow[0].reference),
            ("FAIL", Some(0.0))
        );
    }

    /// The slow-pair count against its history: a loaded host's usual 16
    /// slow pairs pass, a jump to 60 fails, a jump with the pair spread far
    /// above its usual value is INCONCLUSIVE.
    #[test]
    fn slow_pairs_are_judged_against_their_history() {
        let cfg = default_config();
        let h: BTreeMap<String, Vec<f64>> = [
            (
                "linktest.slow_pairs".to_string(),
                vec![16.0, 14.0, 18.0, 15.0, 17.0, 16.0],
            ),
            ("linktest.pair_spread".to_string(), vec![1.3; 6]),
        ]
        .into();
        let judge = |slow: f64, spread: f64| {
            let f: BTreeMap<String, f64> = [
                ("linktest.slow_pairs".to_string(), slow),
                ("linktest.pair_spread".to_string(), spread),
            ]
            .into();
            let rows = crate::io_checks::evaluate(&f, &h, &cfg);
            let r = rows
                .iter()
                .find(|r| r.check == "linktest.slow_pairs")
                .unwrap()
                .clone();
            (r.status, r.message)
        };
        assert_eq!(judge(16.0, 1.3).0, "PASS");
        // median 16 + max(5 × (1 + 5/6) × 1.48 × 1, 50 % = 8, 3, 5 × √16 = 20) = 36.
        assert_eq!(judge(36.0, 1.3).0, "PASS");
        let (st, msg) = judge(37.0, 1.3);
        assert_eq!(st, "FAIL", "{msg}");
        assert!(msg.contains("limit 36"), "{msg}");
        let (st, msg) = judge(60.0, 4.0);
        assert_eq!(st, "INCONCLUSIVE", "{msg}");
        assert!(
            msg.starts_with("disturbed: spread 4 vs usual 1.300"),
            "{msg}"
        );
        // Without history: at most 3 pairs pass, more are NO_REFERENCE.
        let none = BTreeMap::new();
        let f: BTreeMap<String, f64> = [("linktest.slow_pairs".to_string(), 16.0)].into();
        let rows = crate::io_checks::evaluate(&f, &none, &cfg);
        let r = rows
            .iter()
            .find(|r| r.check == "linktest.slow_pairs")
            .unwrap();
        assert_eq!(r.status, "NO_REFERENCE", "{}", r.message);
    }

    #[test]
    fn pair_spread_is_p90_over_p50() {
        let t: Vec<f64> = (1..=10).map(f64::from).collect();
        // p50 = 5.5, p90 = 9.1.
        assert!((pair_spread(&t).unwrap() - 9.1 / 5.5).abs() < 1e-12);
        assert_eq!(pair_spread(&[]), None);
        assert_eq!(pair_spread(&[0.0, 0.0]), None);
    }

    /// A size sweep (one file per message size): each pair is judged
    /// against the median of its own file, not of the whole run.
    #[test]
    fn slow_pairs_of_a_sweep_are_judged_per_file() {
        let t = |src: &str, times: Vec<f64>| {
            let schema = Arc::new(Schema::new(vec![
                Field::new("source", DataType::Utf8, false),
                Field::new("time_s", DataType::Float64, false),
            ]));
            RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(StringArray::from(vec![src; times.len()])),
                    Arc::new(Float64Array::from(times)),
                ],
            )
            .unwrap()
        };
        // 8 B pairs at 2-3 us, 1 MiB pairs at 300 us: the run's median
        // would make every 1 MiB pair slow; per file one 8 B pair is.
        let timings = [
            t("raw/r/t/pp_8B.sion", vec![2e-6, 2e-6, 3e-6, 9e-6]),
            t("raw/r/t/pp_1048576B.sion", vec![3e-4, 3e-4, 3.1e-4, 3.2e-4]),
        ];
        let f = figures(&[], &timings, &SlowPair::default()).unwrap();
        assert_eq!(f["linktest.slow_pairs"], 1.0);
        // Without a source column: one group (the whole run's median,
        // 1.545e-4 s: the two slowest 1 MiB pairs are "slow", the 8 B
        // outlier is not).
        let plain = batch(&[(
            "time_s",
            vec![2e-6, 2e-6, 3e-6, 9e-6, 3e-4, 3e-4, 3.1e-4, 3.2e-4],
        )]);
        let f = figures(&[], std::slice::from_ref(&plain), &SlowPair::default()).unwrap();
        assert_eq!(f["linktest.slow_pairs"], 2.0);
    }

    #[test]
    fn a_run_without_rows_is_an_error_per_figure() {
        let rows = crate::io_checks::evaluate(
            &figures(&[], &[], &SlowPair::default()).unwrap(),
            &BTreeMap::new(),
            &default_config(),
        );
        // max, avg and median time, slow pairs, pair spread.
        assert_eq!(rows.len(), 5);
        assert!(rows.iter().all(|r| r.status == "ERROR"), "{rows:?}");
    }

    /// The figures of a real LinkTest file agree with its own header figures.
    #[test]
    fn figures_of_a_real_linktest_run() {
        let file = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/linktest/v1.2p1/np16_a2a_mix/pingpong_results_bin.sion"
        );
        let out = benchlake_formats::ingest(
            "linktest",
            &[benchlake_formats::InputFile::from_path(file)],
            &benchlake_formats::IngestContext {
                run_id: "r1".into(),
                date: "2026-11-22".into(),
            },
        )
        .unwrap();
        let get = |t: &str| {
            out.iter()
                .find(|o| o.table == t)
                .map(|o| o.batches.clone())
                .unwrap_or_default()
        };
        let (runs, timings) = (get("linktest_runs"), get("linktest_timings"));
        let f = figures(&runs, &timings, &SlowPair::default()).unwrap();
        let times = values(&timings, "time_s").unwrap();
        let max_pair = times.iter().copied().reduce(f64::max).unwrap();
        // LinkTest's header maximum is the maximum of the pair matrix.
        assert!(
            (f["linktest.max_time_s"] - max_pair).abs() <= 1e-9 * max_pair,
            "{} vs {max_pair}",
            f["linktest.max_time_s"]
        );
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let med = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let slow = times.iter().filter(|t| **t > 2.0 * med).count();
        assert_eq!(f["linktest.slow_pairs"], slow as f64);
        eprintln!("np16_a2a_mix: {n} pairs, median {med:e} s, {slow} slow, max {max_pair:e} s");
    }
}
