//! Per-link verdicts of LinkTest and netprobe runs: the rows of the
//! `link_health` table (docs/verdicts.md, "Links").
//!
//! A link is a pair of hosts; its time is the mean of the pair's measured
//! times (both directions, every permutation). The slowness of a whole host
//! (another job on it, a slow adapter) slows all of its pairs and is the
//! node check's business, not a link's: each link's time is divided by the
//! geometric mean of its two hosts' median pair times of the night, which
//! leaves the link's own part. That ratio is compared with **the same
//! link's** median ratio over its last `window` runs of the schedule (the
//! topology makes some pairs always slower than others, so the night's
//! other links are no reference), and the link fails when it is worse by
//! more than the larger of `mads` × the night's spread of all links'
//! deviations (scaled MAD) and `floor`. Links with fewer than
//! `min_history` earlier measurements have no reference yet.
//!
//! A smaller loss that persists is found over a few nights: the link's mean
//! deviation over tonight and its `persist - 1` latest earlier runs (2 up to
//! `persist` nights) fails beyond the larger of `mads` × the spread / √k
//! (the mean of k independent nights is √k times steadier) and
//! `persist_floor`. The same six-sigma rule, tested on means: a link 15 %
//! slower at a night-to-night spread of 3 % (5 sigma) is found on its
//! second night instead of hardly ever.
//!
//! Only failing links get a row (a 512-host run has 130,816 links); the
//! run's `checks` row `linktest.slow_links` counts them and says how many
//! were judged.
use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, Int32Array, RecordBatch, StringArray};
use benchlake_core::catalog;

use crate::reference::{MAD_SCALE, median};

/// The check name of a link row.
pub const LINK_CHECK: &str = "link.pair_time";
/// The run-level summary check.
pub const SLOW_LINKS_CHECK: &str = "linktest.slow_links";

/// Parameters of the link check (skipped by the run-level `check_*` parser).
pub const PARAMS: &[&str] = &[
    "check_link",
    "check_link_window",
    "check_link_min_history",
    "check_link_mads",
    "check_link_floor",
    "check_link_persist",
    "check_link_persist_floor",
];

/// Thresholds of the link check.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    pub enabled: bool,
    /// Earlier runs a link's reference is the median of.
    pub window: usize,
    pub min_history: usize,
    /// Allowance in scaled MADs of the night's link deviations.
    pub mads: f64,
    /// Smallest allowance (0.15 = 15 % slower than usual).
    pub floor: f64,
    /// Most nights whose mean deviation is judged (1 = tonight only).
    pub persist: usize,
    /// Smallest allowance of a mean over several nights.
    pub persist_floor: f64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            enabled: true,
            window: 20,
            min_history: 5,
            mads: 6.0,
            floor: 0.15,
            persist: 3,
            persist_floor: 0.10,
        }
    }
}

impl LinkConfig {
    /// From a run's parameters; an error names the parameter.
    pub fn from_params(p: &std::collections::BTreeMap<String, String>) -> Result<Self, String> {
        let mut c = LinkConfig::default();
        if let Some(v) = p.get("check_link") {
            c.enabled = match v.trim() {
                "on" | "1" => true,
                "off" | "0" => false,
                _ => return Err(format!("params.check_link: '{v}' is not on (1) or off (0)")),
            };
        }
        let int = |k: &str, lo: usize, hi: usize| -> Result<Option<usize>, String> {
            p.get(k)
                .map(|v| {
                    v.trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|x| (lo..=hi).contains(x))
                        .ok_or_else(|| {
                            format!("params.{k}: '{v}' is not a whole number from {lo} to {hi}")
                        })
                })
                .transpose()
        };
        let num = |k: &str, hi: f64| -> Result<Option<f64>, String> {
            p.get(k)
                .map(|v| {
                    v.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite() && *x > 0.0 && *x <= hi)
                        .ok_or_else(|| {
                            format!("params.{k}: '{v}' is not a number above 0, at most {hi}")
                        })
                })
                .transpose()
        };
        if let Some(w) = int("check_link_window", 1, 200)? {
            c.window = w;
        }
        if let Some(m) = int("check_link_min_history", 1, 200)? {
            c.min_history = m;
        }
        if c.min_history > c.window {
            return Err(format!(
                "params.check_link_min_history: {} is above the window ({})",
                c.min_history, c.window
            ));
        }
        if let Some(m) = num("check_link_mads", 100.0)? {
            c.mads = m;
        }
        if let Some(f) = num("check_link_floor", 10.0)? {
            c.floor = f;
        }
        if let Some(k) = int("check_link_persist", 1, 10)? {
            c.persist = k;
        }
        if let Some(f) = num("check_link_persist_floor", 10.0)? {
            c.persist_floor = f;
        }
        Ok(c)
    }
}

/// Host names as small numbers, shared by every run read for one verdict
/// (so a link is the same key in each).
#[derive(Debug, Default)]
pub struct Hosts {
    id: HashMap<String, u32>,
    names: Vec<String>,
}

impl Hosts {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.id.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.id.insert(name.to_string(), i);
        self.names.push(name.to_string());
        i
    }

    pub fn name(&self, i: u32) -> &str {
        self.names
            .get(i as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }
}

/// A link: the two hosts' numbers, smaller first.
pub type Link = (u32, u32);

/// One run's links: each link's mean time, and its ratio to its hosts'
/// median pair times.
#[derive(Debug, Default)]
pub struct RunLinks {
    pub time: HashMap<Link, f64>,
    pub ratio: HashMap<Link, f64>,
    /// Each host's median pair time.
    pub host_median: HashMap<u32, f64>,
    /// The median of those.
    pub center: f64,
}

fn text(b: &RecordBatch, n: &str) -> Option<StringArray> {
    b.column_by_name(n)
        .and_then(|a| a.as_any().downcast_ref::<StringArray>().cloned())
}

fn int(b: &RecordBatch, n: &str) -> Option<Int32Array> {
    b.column_by_name(n)
        .and_then(|a| a.as_any().downcast_ref::<Int32Array>().cloned())
}

fn float(b: &RecordBatch, n: &str) -> Option<Float64Array> {
    b.column_by_name(n)
        .and_then(|a| a.as_any().downcast_ref::<Float64Array>().cloned())
}

/// The links of one run from its `linktest_ranks` and `linktest_timings`
/// rows (pairs of ranks on one host are left out).
pub fn run_links(ranks: &[RecordBatch], timings: &[RecordBatch], hosts: &mut Hosts) -> RunLinks {
    // (source, rank) → host; sources are few, so a small map of maps.
    let mut host_of: HashMap<String, HashMap<i32, u32>> = HashMap::new();
    for b in ranks {
        let (Some(src), Some(rank), Some(host)) =
            (text(b, "source"), int(b, "rank"), text(b, "hostname"))
        else {
            continue;
        };
        for i in 0..b.num_rows() {
            if src.is_valid(i) && rank.is_valid(i) && host.is_valid(i) && !host.value(i).is_empty()
            {
                let h = hosts.intern(host.value(i));
                host_of
                    .entry(src.value(i).to_string())
                    .or_default()
                    .insert(rank.value(i), h);
            }
        }
    }
    let mut sum: HashMap<Link, (f64, u32)> = HashMap::new();
    for b in timings {
        let (Some(src), Some(from), Some(to), Some(t)) = (
            text(b, "source"),
            int(b, "from_rank"),
            int(b, "to_rank"),
            float(b, "time_s"),
        ) else {
            continue;
        };
        let mut last: Option<(&str, &HashMap<i32, u32>)> = None;
        for i in 0..b.num_rows() {
            if !(src.is_valid(i) && from.is_valid(i) && to.is_valid(i) && t.is_valid(i)) {
                continue;
            }
            let s = src.value(i);
            let map = match last {
                Some((name, m)) if name == s => m,
                _ => match host_of.get(s) {
                    Some(m) => {
                        last = Some((s, m));
                        m
                    }
                    None => continue,
                },
            };
            let (Some(&a), Some(&h)) = (map.get(&from.value(i)), map.get(&to.value(i))) else {
                continue;
            };
            let v = t.value(i);
            if a == h || !(v.is_finite() && v > 0.0) {
                continue;
            }
            let e = sum.entry((a.min(h), a.max(h))).or_default();
            e.0 += v;
            e.1 += 1;
        }
    }
    let time: HashMap<Link, f64> = sum
        .into_iter()
        .map(|(k, (s, n))| (k, s / f64::from(n)))
        .collect();
    let mut per_host: HashMap<u32, Vec<f64>> = HashMap::new();
    for (&(a, b), &t) in &time {
        per_host.entry(a).or_default().push(t);
        per_host.entry(b).or_default().push(t);
    }
    let host_median: HashMap<u32, f64> = per_host
        .into_iter()
        .filter_map(|(h, v)| median(&v).map(|m| (h, m)))
        .collect();
    finish(time, host_median)
}

/// The ratios of a run's links: t × M / (m_a × m_b), with m_h a host's
/// median pair time and M the median of those (so a host 40 % slower than
/// the others, busy or with a slow adapter, moves none of its links).
fn finish(time: HashMap<Link, f64>, host_median: HashMap<u32, f64>) -> RunLinks {
    let medians: Vec<f64> = host_median.values().copied().collect();
    let center = median(&medians).unwrap_or(0.0);
    let ratio = time
        .iter()
        .filter_map(|(&(a, b), &t)| {
            let g = host_median.get(&a)? * host_median.get(&b)?;
            (g > 0.0 && center > 0.0).then(|| ((a, b), t * center / g))
        })
        .collect();
    RunLinks {
        time,
        ratio,
        host_median,
        center,
    }
}

impl RunLinks {
    /// What a later run's verdict needs of this one: its ratios.
    pub fn history(self) -> RunLinks {
        RunLinks {
            ratio: self.ratio,
            ..RunLinks::default()
        }
    }
}

/// One `link_health` row (without `run_id` and `source`).
#[derive(Debug, Clone, PartialEq)]
pub struct LinkRow {
    pub node_a: String,
    pub node_b: String,
    pub check: String,
    pub status: String,
    pub value: Option<f64>,
    pub reference: Option<f64>,
    pub unit: String,
    pub message: String,
}

/// The verdicts of one run's links.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkVerdicts {
    /// The failing links, slowest first.
    pub rows: Vec<LinkRow>,
    /// Links measured tonight.
    pub links: usize,
    /// Links with a reference (judged).
    pub judged: usize,
    /// The allowance applied (a share: 0.15 = 15 % slower than usual).
    pub bound: Option<f64>,
}

fn us(s: f64) -> String {
    format!("{:.2} µs", s * 1e6)
}

/// Judges `now`'s links against `history` (earlier runs, newest first: the
/// persistence test takes the latest ones).
pub fn judge(
    now: &RunLinks,
    history: &[&RunLinks],
    hosts: &Hosts,
    cfg: &LinkConfig,
) -> LinkVerdicts {
    let mut devs: Vec<(Link, f64, f64)> = Vec::with_capacity(now.ratio.len());
    let mut buf = Vec::with_capacity(cfg.window);
    for (&link, &r) in &now.ratio {
        buf.clear();
        buf.extend(
            history
                .iter()
                .take(cfg.window)
                .filter_map(|h| h.ratio.get(&link).copied()),
        );
        if buf.len() < cfg.min_history {
            continue;
        }
        let Some(usual) = median(&buf).filter(|m| *m > 0.0) else {
            continue;
        };
        devs.push((link, r / usual - 1.0, usual));
    }
    let judged = devs.len();
    let mut out = LinkVerdicts {
        rows: Vec::new(),
        links: now.ratio.len(),
        judged,
        bound: None,
    };
    if judged == 0 {
        return out;
    }
    let d: Vec<f64> = devs.iter().map(|x| x.1).collect();
    let center = median(&d).unwrap_or(0.0);
    let abs: Vec<f64> = d.iter().map(|x| (x - center).abs()).collect();
    let sigma = MAD_SCALE * median(&abs).unwrap_or(0.0);
    let bound = (cfg.mads * sigma).max(cfg.floor);
    out.bound = Some(bound);
    for (link, dev, usual) in devs {
        // Tonight alone, else the mean over the latest k nights.
        let persisted = if dev - center > bound {
            Some((1, dev))
        } else {
            persisting(link, dev, usual, history, center, sigma, cfg)
        };
        let Some((k, dev)) = persisted else {
            continue;
        };
        let limit = if k == 1 {
            bound
        } else {
            (cfg.mads * sigma / (k as f64).sqrt()).max(cfg.persist_floor)
        };
        let (a, b) = link;
        let g = now.host_median.get(&a).copied().unwrap_or(0.0)
            * now.host_median.get(&b).copied().unwrap_or(0.0);
        let t = now.time.get(&link).copied().unwrap_or(f64::NAN);
        let expected = usual * g / now.center;
        out.rows.push(LinkRow {
            node_a: hosts.name(a).to_string(),
            node_b: hosts.name(b).to_string(),
            check: LINK_CHECK.into(),
            status: "FAIL".into(),
            value: Some(t),
            reference: Some(expected),
            unit: "s".into(),
            message: if k == 1 {
                // Judged beyond the night's median link; said apart when
                // that median itself moved (a night when most links did).
                let beyond = if center.abs() >= 0.005 {
                    format!(
                        ", {:+.0} % beyond tonight's median link ({:+.0} %)",
                        (dev - center) * 100.0,
                        center * 100.0
                    )
                } else {
                    String::new()
                };
                format!(
                    "{} {:+.0} % against its usual {} (its hosts' speed tonight taken out){beyond}; bound {:+.0} %",
                    us(t),
                    dev * 100.0,
                    us(expected),
                    limit * 100.0
                )
            } else {
                format!(
                    "{} against its usual {}: {:+.0} % on average over its last {k} runs (its hosts' speed taken out; bound {:+.0} % for a mean of {k})",
                    us(t),
                    us(expected),
                    (dev - center) * 100.0,
                    limit * 100.0
                )
            },
        });
    }
    out.rows.sort_by(|x, y| {
        let rx = x.value.unwrap_or(0.0) / x.reference.unwrap_or(1.0);
        let ry = y.value.unwrap_or(0.0) / y.reference.unwrap_or(1.0);
        ry.total_cmp(&rx)
    });
    out
}

/// The smallest k in 2..=`cfg.persist` for which the link's mean deviation
/// over tonight and its k − 1 latest earlier runs (each against the same
/// usual ratio) exceeds the mean's limit: (k, that mean). Every one of those
/// runs must have measured the link.
fn persisting(
    link: Link,
    dev: f64,
    usual: f64,
    history: &[&RunLinks],
    center: f64,
    sigma: f64,
    cfg: &LinkConfig,
) -> Option<(usize, f64)> {
    let mut sum = dev;
    for (i, h) in history
        .iter()
        .take(cfg.persist.saturating_sub(1))
        .enumerate()
    {
        sum += h.ratio.get(&link)? / usual - 1.0;
        let k = i + 2;
        let mean = sum / k as f64;
        let limit = (cfg.mads * sigma / (k as f64).sqrt()).max(cfg.persist_floor);
        if mean - center > limit {
            return Some((k, mean));
        }
    }
    None
}

/// The `link_health` batch of a run's rows.
pub fn to_batch(run_id: &str, source: &str, rows: &[LinkRow]) -> Result<RecordBatch, String> {
    let n = rows.len();
    let s = |f: &dyn Fn(&LinkRow) -> &str| -> ArrayRef {
        Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<_>>()))
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![run_id; n])),
        Arc::new(StringArray::from(vec![source; n])),
        s(&|r| &r.node_a),
        s(&|r| &r.node_b),
        s(&|r| &r.check),
        s(&|r| &r.status),
        Arc::new(Float64Array::from(
            rows.iter().map(|r| r.value).collect::<Vec<_>>(),
        )),
        Arc::new(Float64Array::from(
            rows.iter().map(|r| r.reference).collect::<Vec<_>>(),
        )),
        s(&|r| &r.unit),
        s(&|r| &r.message),
    ];
    let schema = catalog::schema("link_health").map_err(|e| e.to_string())?;
    RecordBatch::try_new(schema, cols).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_link_parameter_is_a_known_check_a_catalog_entry_may_declare() {
        for p in PARAMS {
            assert!(benchlake_core::bench::is_known_check(p), "{p}");
        }
    }

    /// A run of `n` hosts where link (a, b) has time `f(a, b)`.
    fn run(n: u32, hosts: &mut Hosts, f: impl Fn(u32, u32) -> f64) -> RunLinks {
        for i in 0..n {
            hosts.intern(&format!("h{i:02}"));
        }
        let mut time = HashMap::new();
        for a in 0..n {
            for b in a + 1..n {
                time.insert((a, b), f(a, b));
            }
        }
        let mut per: HashMap<u32, Vec<f64>> = HashMap::new();
        for (&(a, b), &t) in &time {
            per.entry(a).or_default().push(t);
            per.entry(b).or_default().push(t);
        }
        let host_median: HashMap<u32, f64> = per
            .into_iter()
            .map(|(h, v)| (h, median(&v).unwrap()))
            .collect();
        finish(time, host_median)
    }

    /// A fixed "topology" level per link and a little noise per night.
    fn level(a: u32, b: u32, night: u32) -> f64 {
        let topo = 1.0 + 0.1 * (((a * 7 + b * 13) % 10) as f64 / 10.0);
        let h = u64::from(a + b + night).wrapping_mul(2_654_435_761);
        let noise = 1.0 + 0.01 * ((h % 7) as f64 - 3.0) / 3.0;
        3e-6 * topo * noise
    }

    #[test]
    fn a_slow_link_fails_and_a_slow_host_does_not() {
        let mut hosts = Hosts::default();
        let hist: Vec<RunLinks> = (0..10)
            .map(|k| run(16, &mut hosts, |a, b| level(a, b, k)))
            .collect();
        // Tonight: link (2, 9) 30 % slower; host 5 busy (all its links 40 % slower).
        let now = run(16, &mut hosts, |a, b| {
            let mut t = level(a, b, 11);
            if (a, b) == (2, 9) {
                t *= 1.3;
            }
            if a == 5 || b == 5 {
                t *= 1.4;
            }
            t
        });
        let hist: Vec<&RunLinks> = hist.iter().collect();
        let v = judge(&now, &hist, &hosts, &LinkConfig::default());
        assert_eq!(v.judged, 120);
        let failing: Vec<(&str, &str)> = v
            .rows
            .iter()
            .map(|r| (r.node_a.as_str(), r.node_b.as_str()))
            .collect();
        assert_eq!(failing, [("h02", "h09")], "{:?}", v.rows);
        assert!(
            v.rows[0].message.contains("+2") || v.rows[0].message.contains("+3"),
            "{}",
            v.rows[0].message
        );
        // Too little history: nothing judged.
        let v = judge(&now, &hist[..3], &hosts, &LinkConfig::default());
        assert_eq!((v.judged, v.rows.len()), (0, 0));
    }

    #[test]
    fn a_smaller_loss_that_persists_fails_on_its_second_night() {
        let mut hosts = Hosts::default();
        let slow = |k: u32, slower: bool| {
            move |a: u32, b: u32| {
                level(a, b, k) * if slower && (a, b) == (3, 7) { 1.2 } else { 1.0 }
            }
        };
        // Newest first: ten steady runs.
        let steady: Vec<RunLinks> = (0..10)
            .rev()
            .map(|k| run(16, &mut hosts, slow(k, false)))
            .collect();
        // One-night bound 25 %, a mean's 10 %. Tonight 20 % slower (about
        // 16 % with its hosts' medians taken out): under the bound, passes.
        let cfg = LinkConfig {
            floor: 0.25,
            ..LinkConfig::default()
        };
        let now = run(16, &mut hosts, slow(11, true));
        let hist: Vec<&RunLinks> = steady.iter().collect();
        let v = judge(&now, &hist, &hosts, &cfg);
        assert!(v.rows.is_empty(), "{:?}", v.rows);
        // The next night too: the mean of the two fails (bound 10 %).
        let yesterday = now;
        let now = run(16, &mut hosts, slow(12, true));
        let hist: Vec<&RunLinks> = std::iter::once(&yesterday).chain(steady.iter()).collect();
        let v = judge(&now, &hist, &hosts, &cfg);
        let failing: Vec<(&str, &str)> = v
            .rows
            .iter()
            .map(|r| (r.node_a.as_str(), r.node_b.as_str()))
            .collect();
        assert_eq!(failing, [("h03", "h07")], "{:?}", v.rows);
        assert!(
            v.rows[0]
                .message
                .contains("on average over its last 2 runs"),
            "{}",
            v.rows[0].message
        );
        // Switched to one night: passes.
        let one = LinkConfig {
            persist: 1,
            ..cfg.clone()
        };
        assert!(judge(&now, &hist, &hosts, &one).rows.is_empty());
    }

    #[test]
    fn parameters_are_checked() {
        let p = |k: &str, v: &str| [(k.to_string(), v.to_string())].into_iter().collect();
        assert!(LinkConfig::from_params(&p("check_link_floor", "0")).is_err());
        assert!(LinkConfig::from_params(&p("check_link", "maybe")).is_err());
        assert_eq!(
            LinkConfig::from_params(&p("check_link_mads", "4"))
                .unwrap()
                .mads,
            4.0
        );
    }
}
