//! Calibration: the network parameters of the replay models fitted from the
//! cluster's own pair measurements (LinkTest and netprobe `linktest_timings`
//! at one or more message sizes), so a replay predicts this machine rather
//! than the reference `c1_base` one (docs/replay.md, "Calibration").
//!
//! The model both Dimemas and Bandela apply to a point-to-point message is
//! `t(s) = L + s / BW` (BW in MB/s, MB = 2^20 bytes). Per link class (two
//! ranks on one host: intra-node; on two hosts: inter-node) the pair times of
//! each message size are reduced to their median (slow links are the health
//! checks' business; the model wants the typical link), and `L` and `BW` are
//! fitted to those medians by least squares on *relative* residuals, so the
//! latency of small messages weighs as much as the bandwidth of large ones.
//!
//! With four or more sizes a change of protocol shows as two lines: the fit
//! tries every split into a smaller-size and a larger-size segment (two sizes
//! at least each) and keeps the split when it explains the data far better
//! than one line; the first size of the larger segment is the eager limit,
//! `L` comes from the eager segment and `BW` from the rendezvous one.
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};

use serde::{Deserialize, Serialize};

use crate::error::{ReplayError, Result};

/// Bytes in the models' MB.
const MB: f64 = (1u64 << 20) as f64;

/// A split is kept when it leaves at most this fraction of one line's
/// squared relative error ...
const SPLIT_GAIN: f64 = 0.25;
/// ... and one line misses the medians by more than this (relative RMS).
const SPLIT_MIN_ERROR: f64 = 0.05;

/// Which link a pair uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkClass {
    /// Both ranks on one host.
    Intra,
    /// Ranks on two hosts.
    Inter,
}

impl LinkClass {
    /// `intra` or `inter`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Intra => "intra",
            Self::Inter => "inter",
        }
    }
}

/// One measured pair time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// The link class of the pair.
    pub class: LinkClass,
    /// Message size, bytes.
    pub bytes: u64,
    /// Time per message (one way), seconds.
    pub time_s: f64,
}

/// The nodes whose pairs were measured, per link class.
pub type NodesByClass = BTreeMap<LinkClass, std::collections::BTreeSet<String>>;

/// A straight line `t = latency + bytes / bandwidth` and how well it fits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// Intercept, seconds.
    pub latency_s: f64,
    /// Inverse slope, MB/s (MB = 2^20 B).
    pub bandwidth_mb_s: f64,
    /// Relative RMS error of the line over the medians it was fitted to.
    pub rel_rms: f64,
}

/// The fit of one link class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassFit {
    /// The link class.
    pub class: LinkClass,
    /// Latency L, seconds.
    pub latency_s: f64,
    /// Bandwidth BW, MB/s (MB = 2^20 B).
    pub bandwidth_mb_s: f64,
    /// Messages of at least this many bytes use rendezvous (a protocol switch
    /// seen in the data), else None.
    pub eager_limit: Option<u64>,
    /// Coefficient of determination of the model over the medians (1 = exact).
    pub r2: f64,
    /// Largest relative error of the model at any measured size.
    pub max_rel_error: f64,
    /// Pair samples used.
    pub samples: u64,
    /// (message size, median time) per measured size, by size.
    pub medians: Vec<(u64, f64)>,
}

impl ClassFit {
    /// The modelled time of a message of `bytes` bytes.
    pub fn predict(&self, bytes: u64) -> f64 {
        let bw = self.bandwidth_mb_s * MB;
        self.latency_s + if bw > 0.0 { bytes as f64 / bw } else { 0.0 }
    }
}

/// The fitted parameters of both link classes (either may be missing when
/// no pair of that class was measured).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Ranks on one host.
    pub intra: Option<ClassFit>,
    /// Ranks on two hosts.
    pub inter: Option<ClassFit>,
}

impl Calibration {
    /// The replay parameters this calibration sets (names of
    /// [`crate::dimemas::PARAM_NAMES`]; a missing class leaves its defaults).
    pub fn params(&self) -> BTreeMap<String, String> {
        let mut p = BTreeMap::new();
        if let Some(f) = &self.inter {
            p.insert("latency".into(), format!("{:e}", sig(f.latency_s)));
            p.insert("bandwidth".into(), format!("{}", sig(f.bandwidth_mb_s)));
        }
        if let Some(f) = &self.intra {
            p.insert("intra_latency".into(), format!("{:e}", sig(f.latency_s)));
            p.insert(
                "intra_bandwidth".into(),
                format!("{}", sig(f.bandwidth_mb_s)),
            );
        }
        // One eager limit in the models: the inter-node one where both exist.
        if let Some(e) = self
            .inter
            .as_ref()
            .and_then(|f| f.eager_limit)
            .or_else(|| self.intra.as_ref().and_then(|f| f.eager_limit))
        {
            p.insert("eager_limit".into(), e.to_string());
        }
        p
    }

    /// The fits, intra first.
    pub fn fits(&self) -> impl Iterator<Item = &ClassFit> {
        self.intra.iter().chain(self.inter.iter())
    }
}

/// Pair times gathered per link class and message size (as `f32`, the
/// precision LinkTest stores), ready for [`fit`]. A 4,096-rank file adds 16.7 M
/// times: 67 MB here.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    by: BTreeMap<(LinkClass, u64), Vec<f32>>,
}

impl Samples {
    /// Adds one pair time; zero, negative and non-finite times are ignored
    /// (LinkTest writes 0 for pairs it did not measure).
    pub fn add(&mut self, class: LinkClass, bytes: u64, time_s: f64) {
        if time_s.is_finite() && time_s > 0.0 {
            self.by
                .entry((class, bytes))
                .or_default()
                .push(time_s as f32);
        }
    }

    /// The times of one class and size, to add many at once.
    pub fn slot(&mut self, class: LinkClass, bytes: u64) -> &mut Vec<f32> {
        self.by.entry((class, bytes)).or_default()
    }

    /// The times held, by class and size.
    pub fn iter(&self) -> impl Iterator<Item = ((LinkClass, u64), &Vec<f32>)> {
        self.by.iter().map(|(k, v)| (*k, v))
    }

    /// Pair times held.
    pub fn len(&self) -> usize {
        self.by.values().map(Vec::len).sum()
    }

    /// Whether no time is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The spread of each class and size: p90 / p50 of its times (nearest
    /// rank, by selection: the times are reordered, not sorted). A run whose
    /// spread is far above earlier runs' was disturbed.
    pub fn spreads(&mut self) -> BTreeMap<(LinkClass, u64), f64> {
        let mut out = BTreeMap::new();
        for (k, v) in &mut self.by {
            v.retain(|t| t.is_finite() && *t > 0.0);
            let n = v.len();
            if n == 0 {
                continue;
            }
            let at = |v: &mut Vec<f32>, q: f64| -> f64 {
                let i = ((n - 1) as f64 * q).round() as usize;
                let (_, x, _) = v.select_nth_unstable_by(i.min(n - 1), f32::total_cmp);
                f64::from(*x)
            };
            let p50 = at(v, 0.5);
            let p90 = at(v, 0.9);
            if p50 > 0.0 {
                out.insert(*k, p90 / p50);
            }
        }
        out
    }
}

impl FromIterator<Sample> for Samples {
    fn from_iter<I: IntoIterator<Item = Sample>>(it: I) -> Self {
        let mut s = Samples::default();
        for x in it {
            s.add(x.class, x.bytes, x.time_s);
        }
        s
    }
}

/// Fits both link classes from `samples`. A class needs two distinct message
/// sizes (one size cannot separate latency from bandwidth); no class with
/// enough data at all is an error that says what to measure.
pub fn fit(samples: Samples) -> Result<Calibration> {
    fit_medians(&medians(samples))
}

/// The median pair time and the number of times behind it, per link class
/// and message size (non-positive and non-finite times left out).
pub type Medians = BTreeMap<(LinkClass, u64), (f64, u64)>;

/// The per-class-and-size medians of `samples` (by selection, in place).
pub fn medians(samples: Samples) -> Medians {
    let mut out = Medians::new();
    for (k, mut v) in samples.by {
        v.retain(|t| t.is_finite() && *t > 0.0);
        if !v.is_empty() {
            let n = v.len() as u64;
            out.insert(k, (median(&mut v), n));
        }
    }
    out
}

/// [`fit`] from per-size medians: what a calibration combining the medians
/// of several runs fits.
pub fn fit_medians(by: &Medians) -> Result<Calibration> {
    let mut out = Calibration {
        intra: None,
        inter: None,
    };
    let mut why = Vec::new();
    for class in [LinkClass::Intra, LinkClass::Inter] {
        let mut medians = Vec::new();
        let mut n = 0u64;
        for ((_, bytes), (m, k)) in by.range((class, 0)..=(class, u64::MAX)) {
            n += k;
            medians.push((*bytes, *m));
        }
        if medians.is_empty() {
            continue;
        }
        match fit_class(class, medians, n) {
            Ok(f) => match class {
                LinkClass::Intra => out.intra = Some(f),
                LinkClass::Inter => out.inter = Some(f),
            },
            // The message only: the error below names the parameter once.
            Err(ReplayError::Param { message, .. }) => why.push(message),
            Err(e) => why.push(e.to_string()),
        }
    }
    if out.intra.is_none() && out.inter.is_none() {
        let detail = if why.is_empty() {
            "no pair times with a positive time".to_string()
        } else {
            why.join("; ")
        };
        return Err(ReplayError::param("calibration", detail));
    }
    for w in why {
        tracing::warn!("calibration: {w}");
    }
    Ok(out)
}

/// The median of a non-empty slice, by selection (O(n); the order is lost).
fn median(v: &mut [f32]) -> f64 {
    let n = v.len();
    let (lo, &mut hi, _) = v.select_nth_unstable_by(n / 2, f32::total_cmp);
    if n % 2 == 1 {
        f64::from(hi)
    } else {
        // The lower middle is the largest of the lower half.
        let lo = lo.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        (f64::from(lo) + f64::from(hi)) / 2.0
    }
}

fn fit_class(class: LinkClass, medians: Vec<(u64, f64)>, samples: u64) -> Result<ClassFit> {
    if medians.len() < 2 {
        let size = medians.first().map_or(0, |m| m.0);
        return Err(ReplayError::param(
            "calibration",
            format!(
                "{} pairs were measured at one message size only ({size} bytes): measure at least two sizes (e.g. netprobe or LinkTest runs at 8 B and 1 MiB) to separate latency from bandwidth",
                class.as_str()
            ),
        ));
    }
    let one = line(&medians).ok_or_else(|| no_growth(class))?;
    let mut best: Option<(usize, Line, Line, f64)> = None;
    if medians.len() >= 4 && one.rel_rms > SPLIT_MIN_ERROR {
        for k in 2..=medians.len() - 2 {
            let (Some(a), Some(b)) = (line(&medians[..k]), line(&medians[k..])) else {
                continue;
            };
            let sse = sq(a.rel_rms) * k as f64 + sq(b.rel_rms) * (medians.len() - k) as f64;
            if best.as_ref().is_none_or(|x| sse < x.3) {
                best = Some((k, a, b, sse));
            }
        }
    }
    let one_sse = sq(one.rel_rms) * medians.len() as f64;
    let (latency_s, bandwidth_mb_s, eager_limit) = match best {
        Some((k, eager, rdv, sse)) if sse <= SPLIT_GAIN * one_sse => {
            (eager.latency_s, rdv.bandwidth_mb_s, Some(medians[k].0))
        }
        _ => (one.latency_s, one.bandwidth_mb_s, None),
    };
    let mut f = ClassFit {
        class,
        latency_s,
        bandwidth_mb_s,
        eager_limit,
        r2: 0.0,
        max_rel_error: 0.0,
        samples,
        medians,
    };
    let mean = f.medians.iter().map(|m| m.1).sum::<f64>() / f.medians.len() as f64;
    let (mut ss_res, mut ss_tot, mut worst) = (0.0, 0.0, 0.0f64);
    for &(b, t) in &f.medians {
        let p = f.predict(b);
        ss_res += sq(t - p);
        ss_tot += sq(t - mean);
        worst = worst.max((p - t).abs() / t);
    }
    f.r2 = if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        1.0
    };
    f.max_rel_error = worst;
    Ok(f)
}

fn no_growth(class: LinkClass) -> ReplayError {
    ReplayError::param(
        "calibration",
        format!(
            "{} pair times do not grow with the message size, so no bandwidth can be fitted: measure sizes further apart (e.g. 8 B and 1 MiB)",
            class.as_str()
        ),
    )
}

fn sq(x: f64) -> f64 {
    x * x
}

/// Least squares of `t = a + b s` with weights `1/t²` (relative residuals),
/// `a ≥ 0`; None when the time does not grow with the size.
fn line(pts: &[(u64, f64)]) -> Option<Line> {
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(b, t) in pts {
        let w = 1.0 / sq(t);
        let x = b as f64;
        sw += w;
        sx += w * x;
        sy += w * t;
        sxx += w * x * x;
        sxy += w * x * t;
    }
    let det = sw * sxx - sx * sx;
    let (mut a, mut slope) = if det > 0.0 {
        ((sy * sxx - sx * sxy) / det, (sw * sxy - sx * sy) / det)
    } else {
        (0.0, 0.0)
    };
    if a < 0.0 {
        // Through the origin: the best slope with no latency.
        a = 0.0;
        slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    }
    if !(slope > 0.0 && slope.is_finite() && a.is_finite()) {
        return None;
    }
    let rel = pts
        .iter()
        .map(|&(b, t)| sq((a + slope * b as f64 - t) / t))
        .sum::<f64>()
        / pts.len() as f64;
    Some(Line {
        latency_s: a,
        bandwidth_mb_s: 1.0 / (slope * MB),
        rel_rms: rel.sqrt(),
    })
}

/// A Dimemas configuration file (`.cfg`) of the platform `c1_base` with the
/// calibrated network: `nodes` nodes of `tasks_per_node` tasks, the fitted
/// latencies and bandwidths, and `cpu_ratio` (bursts are divided by it).
/// The eager limit is no `.cfg` field (it is Dimemas's `-S`): it is in
/// [`Calibration::params`].
pub fn dimemas_cfg(c: &Calibration, nodes: u32, tasks_per_node: u32, cpu_ratio: f64) -> String {
    let d = crate::dimemas::Platform::default();
    let g = d.node_groups.first().cloned();
    let (intra_l, intra_bw) = c.intra.as_ref().map_or_else(
        || {
            g.as_ref()
                .map_or((1e-6, 10000.0), |g| (g.intra_latency, g.intra_bandwidth))
        },
        |f| (sig(f.latency_s), sig(f.bandwidth_mb_s)),
    );
    let (inter_l, inter_bw) = c.inter.as_ref().map_or_else(
        || (g.as_ref().map_or(5e-6, |g| g.inter_latency), d.bandwidth),
        |f| (sig(f.latency_s), sig(f.bandwidth_mb_s)),
    );
    let nodes = nodes.max(1);
    let tpn = tasks_per_node.max(1);
    format!(
        "#DIMEMAS_CONFIGURATION\n\n\
         \"wide area network information\" {{\"\", 1, 0, 4, 0.0, 0.0, 1}};;\n\n\
         \"environment information\" {{\"\", 0, \"\", {nodes}, {inter_bw:?}, 0, 2}};;\n\n\
         \"multi node information\" {{0, {nodes}, \"\", {tpn}, {cpu_ratio:?}, {intra_l:e}, {intra_bw:?}, 0, 1, 1, {inter_l:e}, 1, 1, 0.0}};;\n\n\
         \"predefined mapping information\" {{\"{tpn} TASKS_PER_NODE\"}};;\n\n\
         \"configuration files\" {{\"\", \"\", \"\", \"\"}};;\n\n\
         \"file system parameters\" {{0.0, 0.0, 8.0, 0, 1.0}};;\n"
    )
}

/// `x` rounded to 6 significant digits (measured figures carry no more; the
/// written inputs stay readable).
fn sig(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let e = 5 - x.abs().log10().floor() as i32;
    let m = 10f64.powi(e);
    (x * m).round() / m
}

/// A replaympi (Bandela) input of `hosts` hosts with `ranks_per_host` ranks
/// each (ranks in order), with the calibrated latencies and bandwidths
/// (replaympi counts latency in µs and MB as 10^6 bytes).
pub fn bandela_input(c: &Calibration, hosts: u32, ranks_per_host: u32) -> String {
    use std::fmt::Write as _;
    let hosts = hosts.max(1);
    let per = ranks_per_host.max(1);
    let mb10 = |f: &ClassFit| sig(f.bandwidth_mb_s * MB / 1e6);
    // Without an intra-node fit, the reference inputs' 2 µs and 800 MB/s.
    let (il, ib) = c
        .intra
        .as_ref()
        .map_or((2.0, 800.0), |f| (sig(f.latency_s * 1e6), mb10(f)));
    let mut s = format!(
        "# benchlake replay calibrate\nNUMBER_OF_HOSTS {hosts}\nHOST_TYPE {}\nINTRA_HOST_LATENCY {il}\nINTRA_HOST_BANDWIDTH_PEAK {ib}\n",
        if hosts == 1 { 0 } else { 2 }
    );
    if hosts > 1 {
        let (l, b) = c
            .inter
            .as_ref()
            .map_or((il, ib), |f| (sig(f.latency_s * 1e6), mb10(f)));
        let _ = write!(
            s,
            "INTER_HOST_LATENCY {l}\nINTER_HOST_BANDWIDTH_PEAKS {b} -1\n"
        );
    }
    for h in 0..hosts {
        let first = u64::from(h) * u64::from(per);
        let last = first + u64::from(per) - 1;
        let _ = write!(
            s,
            "BLOCK_HOST {h}\nNUMBER_OF_PROCS {per}\nMPI_RANKS {first}-{last}\nADAPTERS {}\n",
            u32::from(hosts > 1)
        );
    }
    s
}

/// The distinct `source` values of a batch (e.g. of `linktest_runs`).
pub fn sources(b: &RecordBatch) -> Result<Vec<String>> {
    let s = b
        .column_by_name("source")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| ReplayError::param("source", "no utf8 column source"))?;
    Ok((0..s.len()).map(|i| s.value(i).to_string()).collect())
}

/// The `replay_calibrations` rows of `c`: one per link class, with the nodes
/// whose pairs were used per class.
pub fn table(
    c: &Calibration,
    run_id: &str,
    source: &str,
    nodes: &NodesByClass,
    rejected: Option<&str>,
) -> Result<RecordBatch> {
    let fits: Vec<&ClassFit> = c.fits().collect();
    let n = fits.len();
    let i64_of = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    let size = |f: &ClassFit, last: bool| {
        let m = if last {
            f.medians.last()
        } else {
            f.medians.first()
        };
        m.map_or(0, |m| i64_of(m.0))
    };
    let f64s = |g: &dyn Fn(&ClassFit) -> f64| -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(fits.iter().map(|f| g(f))))
    };
    let i64s = |g: &dyn Fn(&ClassFit) -> i64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(fits.iter().map(|f| g(f))))
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![run_id; n])),
        Arc::new(StringArray::from(vec![source; n])),
        Arc::new(StringArray::from_iter_values(
            fits.iter().map(|f| f.class.as_str()),
        )),
        f64s(&|f| f.latency_s),
        f64s(&|f| f.bandwidth_mb_s),
        Arc::new(Int64Array::from_iter(
            fits.iter().map(|f| f.eager_limit.map(i64_of)),
        )),
        f64s(&|f| f.r2),
        f64s(&|f| f.max_rel_error),
        i64s(&|f| i64_of(f.samples)),
        i64s(&|f| f.medians.len() as i64),
        i64s(&|f| size(f, false)),
        i64s(&|f| size(f, true)),
        Arc::new(StringArray::from_iter_values(fits.iter().map(|f| {
            nodes
                .get(&f.class)
                .map(|s| s.iter().cloned().collect::<Vec<_>>().join(","))
                .unwrap_or_default()
        }))),
        Arc::new(StringArray::from(vec![rejected; n])),
    ];
    let schema = benchlake_core::catalog::schema("replay_calibrations")
        .map_err(|e| ReplayError::param("replay_calibrations", e.to_string()))?;
    RecordBatch::try_new(schema, cols)
        .map_err(|e| ReplayError::param("replay_calibrations", e.to_string()))
}

/// A traced run's whole-run figures, from its `trace_comparison` rows.
#[derive(Debug, Clone, PartialEq)]
pub struct WholeRun {
    /// The replay model.
    pub model: String,
    /// Ranks with an `all` row.
    pub ranks: usize,
    /// The largest measured time of a rank (s): the run's measured time.
    pub measured_s: f64,
    /// The largest predicted time of a rank (s): the run's predicted time.
    pub predicted_s: f64,
}

/// The whole-run figures of `trace_comparison` batches (one run's): the
/// `all` rows' `measured_total_s` and `modelled_total_s`, largest over ranks,
/// one per model (a traced run is replayed with Bandela and Dimemas), by
/// model name.
pub fn whole_runs(batches: &[RecordBatch]) -> Result<Vec<WholeRun>> {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float64Type, Int32Type};
    let bad = |m: String| ReplayError::param("trace_comparison", m);
    // model -> (ranks, measured, predicted)
    let mut by: BTreeMap<String, (std::collections::BTreeSet<i32>, f64, f64)> = BTreeMap::new();
    for b in batches {
        let col = |n: &str| {
            b.column_by_name(n).ok_or_else(|| {
                bad(format!(
                    "no column {n} (rows written before whole-run times were recorded: replay the run again)"
                ))
            })
        };
        let (f, rk, m, mt, pt) = (
            col("function")?,
            col("rank")?,
            col("model")?,
            col("measured_total_s")?,
            col("modelled_total_s")?,
        );
        let (Some(f), Some(rk), Some(m), Some(mt), Some(pt)) = (
            f.as_string_opt::<i32>(),
            rk.as_primitive_opt::<Int32Type>(),
            m.as_string_opt::<i32>(),
            mt.as_primitive_opt::<Float64Type>(),
            pt.as_primitive_opt::<Float64Type>(),
        ) else {
            return Err(bad("a column has an unexpected type".into()));
        };
        for i in 0..b.num_rows() {
            if f.value(i) != "all" || mt.is_null(i) || pt.is_null(i) {
                continue;
            }
            let e = by.entry(m.value(i).to_string()).or_default();
            e.0.insert(rk.value(i));
            e.1 = e.1.max(mt.value(i));
            e.2 = e.2.max(pt.value(i));
        }
    }
    if by.is_empty() {
        return Err(bad("no whole-run (`all`) rows".into()));
    }
    let mut out = Vec::new();
    for (model, (ranks, meas, pred)) in by {
        if meas <= 0.0 {
            return Err(bad(format!(
                "{model}: nothing was measured (every rank's measured time is 0)"
            )));
        }
        out.push(WholeRun {
            model,
            ranks: ranks.len(),
            measured_s: meas,
            predicted_s: pred,
        });
    }
    Ok(out)
}

/// The calibration each model's replay of a run used (`replays.params`
/// JSON's `calibration.id`; "-" when it used none), by model.
pub fn calibrations_used(replays: &[RecordBatch]) -> BTreeMap<String, String> {
    use arrow::array::AsArray;
    let mut out = BTreeMap::new();
    for b in replays {
        let (Some(m), Some(p)) = (
            b.column_by_name("model")
                .and_then(|c| c.as_string_opt::<i32>()),
            b.column_by_name("params")
                .and_then(|c| c.as_string_opt::<i32>()),
        ) else {
            continue;
        };
        for i in 0..b.num_rows() {
            let id = serde_json::from_str::<serde_json::Value>(p.value(i))
                .ok()
                .and_then(|v| v["calibration"]["id"].as_str().map(str::to_string))
                .unwrap_or_else(|| "-".into());
            out.insert(m.value(i).to_string(), id);
        }
    }
    out
}

/// The first value of the utf8 column `column` in `batches`.
pub fn first_string(batches: &[RecordBatch], column: &str) -> Option<String> {
    use arrow::array::AsArray;
    batches.iter().find_map(|b| {
        let c = b.column_by_name(column)?.as_string_opt::<i32>()?;
        (!c.is_empty() && !c.is_null(0)).then(|| c.value(0).to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(class: LinkClass, l: f64, bw_mb: f64, sizes: &[u64], noise: &[f64]) -> Vec<Sample> {
        let mut v = Vec::new();
        for &s in sizes {
            for &n in noise {
                v.push(Sample {
                    class,
                    bytes: s,
                    time_s: (l + s as f64 / (bw_mb * MB)) * (1.0 + n),
                });
            }
        }
        v
    }

    #[test]
    fn a_line_is_recovered_from_medians_despite_slow_outliers() {
        let sizes = [8, 1024, 65536, 1 << 20];
        // Five pairs per size, one of them four times slower (a bad link).
        let mut s = samples(
            LinkClass::Inter,
            2e-6,
            12000.0,
            &sizes,
            &[-0.01, 0.0, 0.01, 0.005],
        );
        s.extend(samples(LinkClass::Inter, 8e-6, 3000.0, &sizes, &[0.0]));
        s.extend(samples(
            LinkClass::Intra,
            0.3e-6,
            40000.0,
            &sizes,
            &[0.0, 0.002],
        ));
        let c = fit(s.iter().copied().collect()).unwrap();
        let inter = c.inter.as_ref().unwrap();
        assert!((inter.latency_s - 2e-6).abs() < 0.05e-6, "{inter:?}");
        assert!(
            (inter.bandwidth_mb_s - 12000.0).abs() / 12000.0 < 0.02,
            "{inter:?}"
        );
        assert_eq!(inter.eager_limit, None);
        assert_eq!(inter.samples, 20);
        assert!(inter.r2 > 0.999 && inter.max_rel_error < 0.02, "{inter:?}");
        let intra = c.intra.as_ref().unwrap();
        assert!((intra.latency_s - 0.3e-6).abs() < 0.01e-6, "{intra:?}");
        let p = c.params();
        // The medians of two noise levels (0 and +0.2 %) are 0.1 % slow.
        let bw: f64 = p.get("intra_bandwidth").unwrap().parse().unwrap();
        assert!((bw - 40000.0).abs() / 40000.0 < 0.002, "{bw}");
        assert!(p.get("latency").unwrap().parse::<f64>().unwrap() > 1.9e-6);
        assert!(!p.contains_key("eager_limit"));
    }

    #[test]
    fn a_protocol_switch_is_found() {
        // Eager up to 16 KiB (L 1 µs, 5000 MB/s), rendezvous above with an
        // extra handshake (L 6 µs, 10000 MB/s).
        let mut s = samples(
            LinkClass::Inter,
            1e-6,
            5000.0,
            &[8, 256, 4096, 16384],
            &[0.0],
        );
        s.extend(samples(
            LinkClass::Inter,
            6e-6,
            10000.0,
            &[32768, 262144, 1 << 20, 4 << 20],
            &[0.0],
        ));
        let f = fit(s.iter().copied().collect()).unwrap().inter.unwrap();
        assert_eq!(f.eager_limit, Some(32768), "{f:?}");
        assert!((f.latency_s - 1e-6).abs() < 0.01e-6, "{f:?}");
        assert!((f.bandwidth_mb_s - 10000.0).abs() < 10.0, "{f:?}");
        assert_eq!(
            fit(s.iter().copied().collect())
                .unwrap()
                .params()
                .get("eager_limit")
                .map(String::as_str),
            Some("32768")
        );
    }

    #[test]
    fn one_size_or_no_growth_is_refused_with_what_to_measure() {
        let s = samples(LinkClass::Inter, 1e-6, 5000.0, &[1024], &[0.0, 0.1]);
        let e = fit(s.iter().copied().collect()).unwrap_err().to_string();
        assert!(e.contains("one message size only (1024 bytes)"), "{e}");
        let flat: Vec<Sample> = [8u64, 1 << 20]
            .iter()
            .map(|&b| Sample {
                class: LinkClass::Intra,
                bytes: b,
                time_s: 1e-6,
            })
            .collect();
        let e = fit(flat.iter().copied().collect()).unwrap_err().to_string();
        assert!(e.contains("do not grow"), "{e}");
        assert!(fit(Samples::default()).is_err());
        // NaN and negative times are ignored, not fitted.
        let mut s = samples(LinkClass::Inter, 1e-6, 5000.0, &[8, 1 << 20], &[0.0]);
        s.push(Sample {
            class: LinkClass::Inter,
            bytes: 8,
            time_s: f64::NAN,
        });
        assert_eq!(
            fit(s.iter().copied().collect())
                .unwrap()
                .inter
                .unwrap()
                .samples,
            2
        );
    }

    #[test]
    fn the_cfg_reads_back_with_the_fitted_values() {
        let s = samples(LinkClass::Inter, 2e-6, 12000.0, &[8, 1 << 20], &[0.0]);
        let mut s2 = samples(LinkClass::Intra, 0.5e-6, 30000.0, &[8, 1 << 20], &[0.0]);
        s2.extend(s);
        let c = fit(s2.iter().copied().collect()).unwrap();
        let text = dimemas_cfg(&c, 4, 2, 0.5);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cal.cfg");
        std::fs::write(&p, &text).unwrap();
        let mut params = BTreeMap::new();
        params.insert("config".to_string(), p.display().to_string());
        let plat = crate::dimemas::Platform::default()
            .apply_params(&params)
            .unwrap();
        assert_eq!(plat.nodes, 4);
        assert!(
            (plat.bandwidth - 12000.0).abs() < 1e-6,
            "{}",
            plat.bandwidth
        );
        let g = &plat.node_groups[0];
        assert!((g.inter_latency - 2e-6).abs() < 1e-12);
        assert!((g.intra_latency - 0.5e-6).abs() < 1e-12);
        assert!((g.intra_bandwidth - 30000.0).abs() < 1e-6);
        assert!((g.cpu_ratio - 0.5).abs() < 1e-12);
        assert_eq!(
            plat.mapping,
            benchlake_formats::dimemas::config::Mapping::TasksPerNode(2)
        );
    }

    #[test]
    fn the_bandela_input_parses_with_the_fitted_values() {
        let mut s = samples(LinkClass::Inter, 2e-6, 12000.0, &[8, 1 << 20], &[0.0]);
        s.extend(samples(
            LinkClass::Intra,
            0.5e-6,
            30000.0,
            &[8, 1 << 20],
            &[0.0],
        ));
        let c = fit(s.iter().copied().collect()).unwrap();
        let text = bandela_input(&c, 2, 4);
        let i =
            benchlake_formats::bandela::BandelaInput::parse(std::path::Path::new("cal.in"), &text)
                .unwrap();
        assert_eq!(i.hosts, 2);
        assert!(
            (i.intra_latency.base - 0.5).abs() < 1e-9,
            "{:?}",
            i.intra_latency
        );
        // 30000 MB/s of 2^20 B = 31457.28 MB/s of 10^6 B.
        assert!((i.intra_bandwidth.base - 31457.3).abs() < 1e-6, "{text}");
        assert!((i.inter_latency.as_ref().unwrap().base - 2.0).abs() < 1e-9);
        assert!((i.inter_bandwidth.as_ref().unwrap().0 - 12582.9).abs() < 1e-6);
        let one = benchlake_formats::bandela::BandelaInput::parse(
            std::path::Path::new("one.in"),
            &bandela_input(&c, 1, 3),
        )
        .unwrap();
        assert_eq!(one.hosts, 1);
        assert!(one.inter_latency.is_none());
    }
}
