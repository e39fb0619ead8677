//! References learned from history: the one home of "is this value worse
//! than it usually is?" for the relative checks (docs/io.md, "Learned
//! references").
//!
//! A reference is the **median** and the **scaled MAD** (1.4826 × the median
//! absolute deviation, which equals the standard deviation for normal noise
//! but is not moved by a few outliers) of the newest `window` previous values
//! of the same metric (the same figure of the same schedule; per node where
//! a check is per node). With fewer than `min_history` previous values there
//! is no reference: the verdict is `NO_REFERENCE`, never a green PASS.
//!
//! A value FAILs when it is worse than the median by more than the
//! **allowance** = max(`mads` × scaled MAD, `rel_floor` × |median|,
//! `abs_floor`). The floors keep a perfectly steady history (MAD 0) from
//! failing on the smallest noise.
//!
//! Median and MAD are small functions here, tested below: the statistics
//! crates on offer (`statrs`) have a median but no MAD, and nothing else in
//! the workspace needs them (docs/architecture.md, "Check statistics").
use crate::io_checks::{Better, figure};

/// Scale of the MAD to the standard deviation of normal noise.
pub const MAD_SCALE: f64 = 1.4826;
/// Default number of previous values a reference is taken over.
pub const DEFAULT_WINDOW: usize = 20;
/// Default number of previous values needed for a reference.
pub const DEFAULT_MIN_HISTORY: usize = 5;
/// Default allowance in scaled MADs (`check_mads`).
pub const DEFAULT_MADS: f64 = 5.0;

/// The median of the finite values of `xs` (the mean of the middle two for
/// an even count); None when there is none.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    median_of_finite(&mut v)
}

/// [`median`] of `v`, whose values are reordered (no copy: the summaries
/// of a million pair times). Non-finite values are dropped first.
pub fn median_in_place(v: &mut Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    median_of_finite(v)
}

/// The median of finite values, by selection (linear time; the same value
/// as sorting).
fn median_of_finite(v: &mut [f64]) -> Option<f64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let (left, hi, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    let hi = *hi;
    Some(if n % 2 == 1 {
        hi
    } else {
        // The lower middle value is the largest of those before it.
        let lo = left.iter().copied().reduce(f64::max)?;
        (lo + hi) / 2.0
    })
}

/// The scaled median absolute deviation of `xs` around `center`
/// (1.4826 × median |x − center|); None when `xs` has no finite value.
pub fn scaled_mad(xs: &[f64], center: f64) -> Option<f64> {
    let dev: Vec<f64> = xs
        .iter()
        .filter(|x| x.is_finite())
        .map(|x| (x - center).abs())
        .collect();
    median(&dev).map(|m| MAD_SCALE * m)
}

/// The quantile `q` (0..=1) of the finite values of `xs`, linear between
/// the order statistics (the "type 7" rule of R and NumPy).
pub fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let h = (v.len() - 1) as f64 * q;
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    let (a, b) = (*v.get(lo)?, *v.get(hi)?);
    Some(a + (b - a) * (h - lo as f64))
}

/// The widening of the MAD allowance for a short history: 1 + 5 / n
/// (2 at the minimum of 5 runs, 1.25 at 20). The MAD of a few values
/// often underestimates the noise (of 5 normal values, about one history in
/// six has a MAD under half the true one), which without this gave most of
/// the false alarms of the first nights (docs/testing.md, "Check accuracy").
pub fn small_sample(n: usize) -> f64 {
    1.0 + 5.0 / n.max(1) as f64
}

/// How a reference is learned and how far a value may stray from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Learned {
    /// The reference is over the newest this many previous values.
    pub window: usize,
    /// Fewer previous values than this: NO_REFERENCE.
    pub min_history: usize,
    /// Allowance in scaled MADs.
    pub mads: f64,
    /// Allowance at least this fraction of the median.
    pub rel_floor: f64,
    /// Allowance at least this much (the figure's unit).
    pub abs_floor: f64,
    /// The figure is a count of rare events: the allowance is at least
    /// `mads` × √median (the Poisson deviation).
    pub count: bool,
}

impl Default for Learned {
    fn default() -> Self {
        Learned {
            window: DEFAULT_WINDOW,
            min_history: DEFAULT_MIN_HISTORY,
            mads: DEFAULT_MADS,
            rel_floor: 0.0,
            abs_floor: 0.0,
            count: false,
        }
    }
}

/// A reference learned from history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reference {
    pub median: f64,
    /// 1.4826 × MAD.
    pub mad: f64,
    /// Previous values it is over.
    pub n: usize,
}

impl Reference {
    /// The reference of the newest `cfg.window` values of `history` (oldest
    /// first); `Err(n)` with the number of usable previous values when there
    /// are fewer than `cfg.min_history`.
    pub fn learn(history: &[f64], cfg: &Learned) -> Result<Reference, usize> {
        let recent: Vec<f64> = history
            .iter()
            .rev()
            .filter(|x| x.is_finite())
            .take(cfg.window.max(1))
            .copied()
            .collect();
        let n = recent.len();
        if n < cfg.min_history.max(1) {
            return Err(n);
        }
        let m = median(&recent).ok_or(n)?;
        let mad = scaled_mad(&recent, m).ok_or(n)?;
        Ok(Reference { median: m, mad, n })
    }

    /// max(mads × MAD × [`small_sample`]\(n\), rel_floor × |median|,
    /// abs_floor, and for a count `mads` × √median).
    pub fn allowance(&self, cfg: &Learned) -> f64 {
        let mut a = (cfg.mads * self.mad * small_sample(self.n))
            .max(cfg.rel_floor * self.median.abs())
            .max(cfg.abs_floor);
        if cfg.count {
            // Counts of rare events (slow pairs) vary like a Poisson count:
            // their standard deviation is √mean, whatever the MAD of a
            // short history says.
            a = a.max(cfg.mads * self.median.max(0.0).sqrt());
        }
        a
    }

    /// The limit a value must not be worse than. The figures judged where
    /// higher is better (bandwidths, rates, counts) are never negative, so a
    /// history noisy enough to allow more than the median itself gives a
    /// limit of 0 (nothing fails), not a negative one (seen on the
    /// dashboard as "limit -116.3 MiB/s").
    pub fn limit(&self, better: Better, cfg: &Learned) -> f64 {
        match better {
            Better::Higher => (self.median - self.allowance(cfg)).max(0.0),
            Better::Lower => self.median + self.allowance(cfg),
        }
    }
}

/// The outcome of judging one value against its history.
#[derive(Debug, Clone, PartialEq)]
pub enum Judgement {
    /// Fewer than `min_history` previous values (`n` of them).
    NoReference { n: usize, min_history: usize },
    /// Judged: `fail` when worse than `limit`.
    Judged {
        fail: bool,
        reference: Reference,
        limit: f64,
    },
}

impl Judgement {
    /// Whether the value is worse than its limit.
    pub fn fails(&self) -> bool {
        matches!(self, Judgement::Judged { fail: true, .. })
    }
}

/// Judges `value` against the reference of `history` (oldest first).
pub fn judge(value: f64, history: &[f64], better: Better, cfg: &Learned) -> Judgement {
    match Reference::learn(history, cfg) {
        Err(n) => Judgement::NoReference {
            n,
            min_history: cfg.min_history,
        },
        Ok(r) => {
            let limit = r.limit(better, cfg);
            let fail = match better {
                Better::Higher => value < limit,
                Better::Lower => value > limit,
            };
            Judgement::Judged {
                fail,
                reference: r,
                limit,
            }
        }
    }
}

/// The message of a judgement, explaining the bound:
/// "412 MiB/s vs median 530 ± 17.79 of the last 20 runs (-22.3 %; limit
/// 418.8: 5 MADs × 1.250 for 20 runs = 111.2, floor 5 % = 26.50)" or "no
/// reference yet: 2 of 5 previous runs".
pub fn message(value: f64, unit: &str, j: &Judgement, cfg: &Learned) -> String {
    match j {
        Judgement::NoReference { n, min_history } => {
            format!("no reference yet: {n} of {min_history} previous runs")
        }
        Judgement::Judged {
            reference: r,
            limit,
            ..
        } => {
            let change = if r.median != 0.0 {
                format!("{:+.1} %", (value - r.median) / r.median.abs() * 100.0)
            } else {
                format!("{:+}", figure(value - r.median))
            };
            let mut parts = vec![format!(
                "{} MADs × {} for {} runs = {}",
                figure(cfg.mads),
                figure(small_sample(r.n)),
                r.n,
                figure(cfg.mads * small_sample(r.n) * r.mad)
            )];
            if cfg.count {
                parts.push(format!(
                    "count {} × √median = {}",
                    figure(cfg.mads),
                    figure(cfg.mads * r.median.max(0.0).sqrt())
                ));
            }
            if cfg.rel_floor > 0.0 {
                parts.push(format!(
                    "floor {} % = {}",
                    figure(cfg.rel_floor * 100.0),
                    figure(cfg.rel_floor * r.median.abs())
                ));
            }
            if cfg.abs_floor > 0.0 {
                parts.push(format!("floor {} {unit}", figure(cfg.abs_floor)));
            }
            format!(
                "{} {unit} vs median {} ± {} of the last {} runs ({change}; limit {}: {})",
                figure(value),
                figure(r.median),
                figure(r.mad),
                r.n,
                figure(*limit),
                parts.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noisy_history_gives_a_limit_of_zero_not_below() {
        // The dashboard's read series: 5 runs, 2 iterations each, loaded host.
        let h = [195.2, 172.5, 165.9, 132.8, 195.0];
        let j = judge(1.0, &h, Better::Higher, &Learned::default());
        match j {
            Judgement::Judged { fail, limit, .. } => assert_eq!((fail, limit), (false, 0.0)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn median_mad_and_quantiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN]), None);
        assert_eq!(median(&[]), None);
        // |x - 2| = 1, 0, 1, 98 → median 1.
        let mad = scaled_mad(&[1.0, 2.0, 3.0, 100.0], 2.0).unwrap();
        assert!((mad - 1.4826).abs() < 1e-12);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.5), Some(3.0));
        assert_eq!(quantile(&[1.0, 2.0], 0.9), Some(1.9));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn too_little_history_is_no_reference() {
        let cfg = Learned::default();
        let j = judge(1.0, &[1.0, 1.0], Better::Higher, &cfg);
        assert_eq!(
            j,
            Judgement::NoReference {
                n: 2,
                min_history: 5
            }
        );
        assert_eq!(
            message(1.0, "x", &j, &cfg),
            "no reference yet: 2 of 5 previous runs"
        );
    }

    #[test]
    fn bound_is_the_largest_of_mads_and_floors() {
        let cfg = Learned {
            rel_floor: 0.05,
            ..Learned::default()
        };
        // A noisy history: median 530, MAD 12 scaled → 5 MADs win over 5 %.
        let h = [518.0, 530.0, 542.0, 530.0, 518.0, 542.0, 530.0];
        let r = Reference::learn(&h, &cfg).unwrap();
        assert_eq!(r.median, 530.0);
        assert!((r.mad - 12.0 * MAD_SCALE).abs() < 1e-9);
        let j = judge(412.0, &h, Better::Higher, &cfg);
        assert!(!j.fails(), "412 is within 152 of 530 with 7 runs");
        let msg = message(412.0, "MiB/s", &j, &cfg);
        assert!(msg.starts_with("412 MiB/s vs median 530 ± 17.79 of the last 7 runs (-22.3 %"));
        // 7 runs: 5 MADs widened by 1 + 5/7.
        assert!(msg.contains("5 MADs × 1.714 for 7 runs = 152.5"), "{msg}");
        assert!(msg.contains("floor 5 % = 26.50"), "{msg}");
        assert!(!judge(380.0, &h, Better::Higher, &cfg).fails());
        assert!(judge(370.0, &h, Better::Higher, &cfg).fails());
        // A perfectly steady history: MAD 0, the floor decides.
        let steady = [100.0; 10];
        assert!(!judge(96.0, &steady, Better::Higher, &cfg).fails());
        assert!(judge(94.0, &steady, Better::Higher, &cfg).fails());
        // Lower is better, with an absolute floor.
        let abs = Learned {
            abs_floor: 3.0,
            ..Learned::default()
        };
        assert!(!judge(3.0, &[0.0; 6], Better::Lower, &abs).fails());
        assert!(judge(4.0, &[0.0; 6], Better::Lower, &abs).fails());
        // A count: at least 5 × √median, whatever a steady history says.
        let count = Learned {
            count: true,
            ..Learned::default()
        };
        assert!(!judge(36.0, &[16.0; 6], Better::Lower, &count).fails());
        assert!(judge(37.0, &[16.0; 6], Better::Lower, &count).fails());
    }

    #[test]
    fn only_the_newest_window_counts() {
        let cfg = Learned {
            window: 5,
            rel_floor: 0.05,
            ..Learned::default()
        };
        let mut h = vec![1000.0; 30];
        h.extend([500.0; 5]);
        // The last 5 are at 500: 480 is within 5 % of them.
        assert!(!judge(480.0, &h, Better::Higher, &cfg).fails());
    }
}
