//! Regressions found by change-point detection (docs/io.md, "Regressions";
//! issue 37 item 4): has a series that a site watches (a schedule's figure,
//! a node's figure) moved to a worse level and stayed there, even though no
//! single night crossed its bound?
//!
//! The learned references ([`crate::reference`]) follow a slow loss: the
//! median of the last 20 nights drifts down with the series, so a link that
//! loses 3 % a night is never more than a few MADs under its own reference.
//! This detector compares the newest nights with the nights **before** them
//! instead, for every possible first night of the change:
//!
//! - a candidate split at night `k` has a **baseline** (every value before
//!   `k` in the window, at least `min_baseline`) and a **recent** segment
//!   (from `k` to the newest value, at least `min_recent` nights);
//! - the baseline's level and noise are its median and scaled MAD (robust to
//!   busy nights in the history), the noise at least `sigma_floor` × the
//!   level and widened by 1 + 3/n for n baseline values;
//! - each recent night's deficit in baseline MADs is clipped to ±`clip`
//!   (Huber's rule: one night, however bad, is worth at most `clip`), and the
//!   **score** is their mean divided by its standard error
//!   √(1/m + π/2 / n_baseline) (the second term is the error of a median
//!   of normal values), a robust two-sample z;
//! - the split counts only when the **current level** (the median of the
//!   newest min(m, 3) nights) is worse than the baseline by at least
//!   `min_step` of it: a regression that has recovered, or one busy night
//!   among normal ones, is not a regression now.
//!
//! The split with the highest score is the change; it is a regression when
//! that score reaches `threshold`. The first night of the change is the
//! split, the **step** is the current level relative to the baseline
//! (−0.12: 12 % lower), and the **confidence** is 1 − the Bonferroni-adjusted
//! one-sided p-value of the score under normal noise (the number of splits
//! tried times the normal tail of the score), stated as such.
//!
//! Why not a library (docs/architecture.md, "A third new status,
//! REGRESSION"): Grafana's `augurs-changepoint` (BOCPD and autoregressive GP
//! change points from the `changepoint` crate) was measured on these series
//! (`scripts/changepoint-eval`): BOCPD finds steps and drifts quickly but
//! takes a single busy night for a change (33.6 alarmed nights per 1,000
//! with 5 % busy nights), it returns change indices only (no size, no
//! confidence), and it brings 132 crates (nalgebra, argmin, peroxide, slog)
//! into the worker. The normal tail is `libm::erfc`.
use crate::io_checks::Better;
use crate::reference::{MAD_SCALE, median};

/// Default number of newest values (the current one included) a series is
/// searched over (`check_changepoint_window`).
pub const DEFAULT_WINDOW: usize = 60;
/// Default minimum baseline before a change (`check_changepoint_min_history`).
pub const DEFAULT_MIN_BASELINE: usize = 10;
/// Default minimum nights of a change: one bad night is never a regression.
pub const DEFAULT_MIN_RECENT: usize = 2;
/// Default score threshold (`check_changepoint_score`), measured in
/// analysis/tests/changepoint_rates.rs.
pub const DEFAULT_THRESHOLD: f64 = 5.5;
/// Default clip of one night's deficit, in baseline MADs.
pub const DEFAULT_CLIP: f64 = 4.0;
/// Default smallest regression reported (`check_changepoint_min_step`): 2 %.
pub const DEFAULT_MIN_STEP: f64 = 0.02;
/// Default noise floor relative to the level: 0.2 %.
pub const DEFAULT_SIGMA_FLOOR: f64 = 0.002;
/// The baseline noise of n values is widened by 1 + this / n: the MAD of a
/// few values often understates the noise (as for the learned references,
/// [`crate::reference::small_sample`]); 3 halved the false alarms of CV 3 %
/// series against none (analysis/tests/changepoint_rates.rs).
pub const SMALL_SAMPLE: f64 = 3.0;

/// How regressions are searched for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// `check_changepoint = 0` (or `off`) switches the detector off.
    pub enabled: bool,
    /// Newest values searched (the current one included).
    pub window: usize,
    /// At least this many values before a change.
    pub min_baseline: usize,
    /// At least this many nights of a change.
    pub min_recent: usize,
    /// Score (robust two-sample z) from which a change is a regression.
    pub threshold: f64,
    /// One night's deficit is clipped to ± this many baseline MADs.
    pub clip: f64,
    /// Smallest current loss reported, relative to the baseline level.
    pub min_step: f64,
    /// The baseline noise is at least this fraction of its level.
    pub sigma_floor: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: true,
            window: DEFAULT_WINDOW,
            min_baseline: DEFAULT_MIN_BASELINE,
            min_recent: DEFAULT_MIN_RECENT,
            threshold: DEFAULT_THRESHOLD,
            clip: DEFAULT_CLIP,
            min_step: DEFAULT_MIN_STEP,
            sigma_floor: DEFAULT_SIGMA_FLOOR,
        }
    }
}

/// The parameters [`Config::from_params`] reads (not thresholds of a figure).
pub const PARAMS: &[&str] = &[
    "check_changepoint",
    "check_changepoint_window",
    "check_changepoint_min_history",
    "check_changepoint_min_nights",
    "check_changepoint_score",
    "check_changepoint_min_step",
];

impl Config {
    /// The configuration of a run's `check_changepoint*` parameters
    /// (docs/io.md, "Regressions"): `check_changepoint = 0` or `off` (`1`,
    /// `on`: the default),
    /// `check_changepoint_window` (values searched, default 60),
    /// `check_changepoint_min_history` (baseline, default 10),
    /// `check_changepoint_min_nights` (default 2), `check_changepoint_score`
    /// (default 5.5) and `check_changepoint_min_step` (default 0.02).
    pub fn from_params(
        params: &std::collections::BTreeMap<String, String>,
    ) -> Result<Config, String> {
        let mut c = Config::default();
        for (k, v) in params {
            let v = v.trim();
            let num = || -> Result<f64, String> {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| format!("params.{k}: '{v}' is not a non-negative number"))
            };
            let count = |min: usize| -> Result<usize, String> {
                v.parse::<usize>()
                    .ok()
                    .filter(|x| *x >= min)
                    .ok_or_else(|| format!("params.{k}: '{v}' is not a count of at least {min}"))
            };
            match k.as_str() {
                "check_changepoint" => {
                    c.enabled = match v.to_ascii_lowercase().as_str() {
                        "on" | "true" | "yes" | "1" => true,
                        "off" | "false" | "no" | "0" => false,
                        _ => return Err(format!("params.{k}: '{v}' is not on or off")),
                    }
                }
                "check_changepoint_window" => c.window = count(4)?,
                "check_changepoint_min_history" => c.min_baseline = count(3)?,
                "check_changepoint_min_nights" => c.min_recent = count(1)?,
                "check_changepoint_score" => c.threshold = num()?,
                "check_changepoint_min_step" => c.min_step = num()?,
                _ => {}
            }
        }
        Ok(c)
    }
}

/// A change found in a series of values (oldest first).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    /// Index (into the values given) of the first night of the change.
    pub start: usize,
    /// Current level relative to the baseline: (level − baseline) / |baseline|.
    pub step: f64,
    /// The robust two-sample z of the split.
    pub score: f64,
    /// 1 − the Bonferroni-adjusted one-sided p-value of the score.
    pub confidence: f64,
    /// Median of the values before the change.
    pub baseline: f64,
    /// Median of the newest min(nights, 3) values.
    pub level: f64,
    /// Nights since the change (the current one included).
    pub nights: usize,
}

/// One night of a watched series.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub run_id: String,
    /// The logical night (`YYYY-MM-DD`).
    pub date: String,
    pub value: f64,
}

/// A regression: a change to a worse level, located on its run.
#[derive(Debug, Clone, PartialEq)]
pub struct Regression {
    /// The first run of the change.
    pub since_run: String,
    /// Its logical night.
    pub since_date: String,
    /// Relative size (−0.12: 12 % lower than before).
    pub step: f64,
    /// 1 − the Bonferroni-adjusted one-sided p-value (see the module docs).
    pub confidence: f64,
    /// The score it was found with.
    pub score: f64,
    /// The level before the change.
    pub baseline: f64,
    /// Nights since the change (the current one included).
    pub nights: usize,
}

impl Regression {
    /// "regression since run R of 2026-11-20: -12.3 % over 4 nights
    /// (baseline 530 MiB/s, confidence 0.999)".
    pub fn message(&self, unit: &str) -> String {
        let conf = if self.confidence > 0.999 {
            "> 0.999".to_string()
        } else {
            format!("{:.3}", self.confidence)
        };
        format!(
            "regression since run {} of {}: {:+.1} % over {} night{} (baseline {} {unit}, confidence {conf})",
            self.since_run,
            self.since_date,
            self.step * 100.0,
            self.nights,
            if self.nights == 1 { "" } else { "s" },
            crate::io_checks::figure(self.baseline),
        )
    }
}

/// The `since_run`, `since_date`, `step` and `confidence` columns of
/// `checks` and `node_health` (null for rows without a change point).
pub fn columns<'a>(
    regs: impl Iterator<Item = Option<&'a Regression>> + Clone,
) -> Vec<arrow::array::ArrayRef> {
    use arrow::array::{Float64Array, StringArray};
    use std::sync::Arc;
    vec![
        Arc::new(
            regs.clone()
                .map(|r| r.map(|r| r.since_run.as_str()))
                .collect::<StringArray>(),
        ),
        Arc::new(
            regs.clone()
                .map(|r| r.map(|r| r.since_date.as_str()))
                .collect::<StringArray>(),
        ),
        Arc::new(
            regs.clone()
                .map(|r| r.map(|r| r.step))
                .collect::<Float64Array>(),
        ),
        Arc::new(
            regs.map(|r| r.map(|r| r.confidence))
                .collect::<Float64Array>(),
        ),
    ]
}

/// The upper tail of the standard normal, P(Z > z).
pub fn normal_tail(z: f64) -> f64 {
    0.5 * libm::erfc(z / std::f64::consts::SQRT_2)
}

/// The median and scaled MAD of `xs` (all finite), in `scratch`.
fn median_mad(xs: &[f64], scratch: &mut Vec<f64>) -> Option<(f64, f64)> {
    scratch.clear();
    scratch.extend_from_slice(xs);
    let m = median_in_place(scratch)?;
    for x in scratch.iter_mut() {
        *x = (*x - m).abs();
    }
    let mad = median_in_place(scratch)?;
    Some((m, MAD_SCALE * mad))
}

/// Median by selection (reorders `v`).
fn median_in_place(v: &mut [f64]) -> Option<f64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let (_, hi, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    let hi = *hi;
    if n % 2 == 1 {
        return Some(hi);
    }
    let lo = v.get(..n / 2)?.iter().copied().max_by(f64::total_cmp)?;
    Some((lo + hi) / 2.0)
}

/// The change of the newest `cfg.window` of `values` (oldest first, all
/// finite) to a worse level, if any (see the module docs). `start` is an
/// index into `values`.
pub fn find(values: &[f64], better: Better, cfg: &Config) -> Option<Change> {
    if !cfg.enabled || values.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let skip = values.len().saturating_sub(cfg.window.max(1));
    let v = values.get(skip..)?;
    let n = v.len();
    let (min_b, min_r) = (cfg.min_baseline.max(3), cfg.min_recent.max(1));
    if n < min_b + min_r {
        return None;
    }
    // Badness sign: a deficit is positive.
    let bad = |baseline: f64, x: f64| match better {
        Better::Higher => baseline - x,
        Better::Lower => x - baseline,
    };
    let mut scratch = Vec::with_capacity(n);
    let mut best: Option<Change> = None;
    let mut tried = 0usize;
    for k in min_b..=n - min_r {
        let (base, recent) = (v.get(..k)?, v.get(k..)?);
        let m = recent.len();
        let Some((mu, mad)) = median_mad(base, &mut scratch) else {
            continue;
        };
        if mu.abs() <= f64::EPSILON {
            // No relative size without a level (a count that is usually 0).
            continue;
        }
        tried += 1;
        let sigma = mad.max(cfg.sigma_floor * mu.abs()) * (1.0 + SMALL_SAMPLE / k as f64);
        let newest = recent.get(m.saturating_sub(3)..)?;
        let level = median(newest)?;
        if bad(mu, level) < cfg.min_step * mu.abs() {
            continue;
        }
        let mean_z = recent
            .iter()
            .map(|x| (bad(mu, *x) / sigma).clamp(-cfg.clip, cfg.clip))
            .sum::<f64>()
            / m as f64;
        let se = (1.0 / m as f64 + std::f64::consts::FRAC_PI_2 / k as f64).sqrt();
        let score = mean_z / se;
        if best.is_none_or(|b| score > b.score) {
            best = Some(Change {
                start: k + skip,
                step: (level - mu) / mu.abs(),
                score,
                confidence: 0.0,
                baseline: mu,
                level,
                nights: m,
            });
        }
    }
    let mut c = best.filter(|c| c.score >= cfg.threshold)?;
    c.confidence = 1.0 - (tried as f64 * normal_tail(c.score)).min(1.0);
    Some(c)
}

/// The regression of a series (oldest first; non-finite values are left
/// out), located on its run and night; None when there is none.
pub fn detect(series: &[Point], better: Better, cfg: &Config) -> Option<Regression> {
    let pts: Vec<&Point> = series.iter().filter(|p| p.value.is_finite()).collect();
    let values: Vec<f64> = pts.iter().map(|p| p.value).collect();
    let c = find(&values, better, cfg)?;
    let p = pts.get(c.start)?;
    Some(Regression {
        since_run: p.run_id.clone(),
        since_date: p.date.clone(),
        step: c.step,
        confidence: c.confidence,
        score: c.score,
        baseline: c.baseline,
        nights: c.nights,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed, repeatable noise of about CV 1 % (no generator needed).
    fn noise(i: usize) -> f64 {
        let x = ((i as f64 + 1.0) * 12.9898).sin() * 43_758.545;
        (x - x.floor() - 0.5) * 0.034
    }

    fn series(n: usize, f: impl Fn(usize) -> f64) -> Vec<f64> {
        (0..n).map(|i| 100.0 * f(i) * (1.0 + noise(i))).collect()
    }

    #[test]
    fn a_step_is_found_with_its_first_night_and_size() {
        let cfg = Config::default();
        let v = series(30, |i| if i >= 27 { 0.88 } else { 1.0 });
        let c = find(&v, Better::Higher, &cfg).expect("a 12 % step after 3 nights");
        assert_eq!((c.start, c.nights), (27, 3));
        assert!((c.step + 0.12).abs() < 0.02, "{c:?}");
        assert!(c.confidence > 0.99, "{c:?}");
        // Higher is worse for a time: the same step is an improvement.
        assert_eq!(find(&v, Better::Lower, &cfg), None);
        // Not yet on the first night of the step (one night is never enough).
        assert_eq!(find(&v[..28], Better::Higher, &cfg), None);
    }

    #[test]
    fn a_slow_drift_is_found_and_located_near_its_start() {
        let cfg = Config::default();
        let v = series(40, |i| 1.0 - 0.03 * i.saturating_sub(25) as f64);
        let c = find(&v, Better::Higher, &cfg).expect("14 nights of -3 %");
        assert!((24..=28).contains(&c.start), "{c:?}");
        assert!(c.step < -0.3, "{c:?}");
    }

    #[test]
    fn one_busy_night_is_not_a_regression() {
        let cfg = Config::default();
        let mut v = series(30, |_| 1.0);
        assert_eq!(find(&v, Better::Higher, &cfg), None);
        v[29] *= 0.5;
        assert_eq!(find(&v, Better::Higher, &cfg), None, "the newest night");
        v[29] /= 0.5;
        v[28] *= 0.5;
        assert_eq!(find(&v, Better::Higher, &cfg), None, "the night before");
        // A busy night in the baseline does not hide a later step.
        let mut w = series(30, |i| if i >= 26 { 0.9 } else { 1.0 });
        w[10] *= 0.3;
        assert_eq!(find(&w, Better::Higher, &cfg).map(|c| c.start), Some(26));
    }

    #[test]
    fn a_recovered_regression_is_over() {
        let cfg = Config::default();
        let v = series(30, |i| if (20..26).contains(&i) { 0.85 } else { 1.0 });
        assert_eq!(find(&v, Better::Higher, &cfg), None);
        assert!(find(&v[..26], Better::Higher, &cfg).is_some());
    }

    #[test]
    fn small_steps_short_histories_and_switches() {
        let cfg = Config::default();
        // 1.5 % is below min_step, however steady.
        let v = series(40, |i| if i >= 30 { 0.985 } else { 1.0 });
        assert_eq!(find(&v, Better::Higher, &cfg), None);
        // Too short: 10 baseline + 2 nights needed.
        let v = series(11, |i| if i >= 9 { 0.5 } else { 1.0 });
        assert_eq!(find(&v, Better::Higher, &cfg), None);
        let v = series(30, |i| if i >= 27 { 0.8 } else { 1.0 });
        let off = Config {
            enabled: false,
            ..cfg
        };
        assert_eq!(find(&v, Better::Higher, &off), None);
        // Lower is better: a time that grows 20 %.
        let t = series(30, |i| if i >= 27 { 1.2 } else { 1.0 });
        let c = find(&t, Better::Lower, &cfg).expect("slower");
        assert!((c.step - 0.2).abs() < 0.02 && c.start == 27, "{c:?}");
        // A window: the change is indexed in the whole slice.
        let small = Config { window: 20, ..cfg };
        let long = series(100, |i| if i >= 97 { 0.8 } else { 1.0 });
        assert_eq!(
            find(&long, Better::Higher, &small).map(|c| c.start),
            Some(97)
        );
        assert_eq!(find(&[f64::NAN; 20], Better::Higher, &cfg), None);
    }

    #[test]
    fn regressions_name_their_run_and_night() {
        let pts: Vec<Point> = series(20, |i| if i >= 17 { 0.877 } else { 1.0 })
            .into_iter()
            .enumerate()
            .map(|(i, value)| Point {
                run_id: format!("R{i:02}"),
                date: format!("2026-11-{:02}", i + 1),
                value,
            })
            .collect();
        let r = detect(&pts, Better::Higher, &Config::default()).expect("a step");
        assert_eq!(
            (r.since_run.as_str(), r.since_date.as_str()),
            ("R17", "2026-11-18")
        );
        let msg = r.message("MiB/s");
        assert!(
            msg.starts_with("regression since run R17 of 2026-11-18: -12."),
            "{msg}"
        );
        assert!(
            msg.contains("over 3 nights") && msg.contains("confidence"),
            "{msg}"
        );
    }

    #[test]
    fn params() {
        let p = |k: &str, v: &str| {
            Config::from_params(&[(k.to_string(), v.to_string())].into_iter().collect())
        };
        assert!(!p("check_changepoint", "off").unwrap().enabled);
        assert_eq!(p("check_changepoint_window", "90").unwrap().window, 90);
        assert_eq!(
            p("check_changepoint_min_step", "0.05").unwrap().min_step,
            0.05
        );
        assert!(p("check_changepoint", "maybe").is_err());
        assert!(p("check_changepoint_window", "2").is_err());
        assert!(p("check_changepoint_score", "-1").is_err());
        assert!((normal_tail(0.0) - 0.5).abs() < 1e-15);
        assert!((normal_tail(3.0) - 0.001_349_898).abs() < 1e-8);
    }
}
