//! I/O health checks: turns a run's `io_results` rows into `checks` rows by
//! comparing each figure with an absolute bound and/or the reference learned
//! from the same figure over the last N runs ([`crate::reference`]: median ±
//! k scaled MADs with floors; the caller supplies that history, e.g. from the
//! lake, for the same schedule). Statuses: PASS, FAIL, ERROR, NO_REFERENCE
//! (too little history), INCONCLUSIVE (would fail, but the run's own spread
//! shows it was disturbed). Pure: no I/O, no clock.
//!
//! Figures (one value per run; see docs/io.md):
//! - `io.write_bw_mib_s`, `io.read_bw_mib_s`: mean aggregate bandwidth over the
//!   iterations (MiB/s, higher is better);
//! - `io.write_bw_min_mib_s`, `io.read_bw_min_mib_s`: worst iteration;
//! - `io.write_bw_cv`, `io.read_bw_cv`: population deviation / mean across
//!   iterations, or across the processes of an iteration when that is larger
//!   ([`figures_with_ranks`]; lower is better): the run's own spread, which
//!   tells a disturbed run (its FAILs become INCONCLUSIVE);
//! - `io.open_time_max_s`: slowest open phase (metadata trouble);
//! - `io.verify_errors`: bytes that failed read-back verification; any is a
//!   FAIL, whatever the history (corruption is a verdict, not a trend).
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use benchlake_core::{catalog, verdict};

use crate::reference::{self, Judgement, Learned, judge};

/// Errors of the I/O checks.
#[derive(Debug, thiserror::Error)]
pub enum IoCheckError {
    /// A column of `io_results` is missing or has the wrong type.
    #[error("io_results: column {0} missing or of the wrong type")]
    Column(String),
    /// Building the `checks` batch failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// The catalog has no `checks` table.
    #[error(transparent)]
    Core(#[from] benchlake_core::Error),
}

impl IoCheckError {
    /// Nothing here is transient.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// Which way is good for a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

/// One configured check.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Figure name (see the module docs); also the `check` column.
    pub figure: String,
    pub better: Better,
    pub unit: String,
    /// FAIL when the value is below this (for `Higher`) / above it (`Lower`).
    pub bound: Option<f64>,
    /// Some: a check against the reference learned from history
    /// ([`crate::reference`]), with this relative floor of the allowance
    /// (0.05 = at least 5 % of the median). Emitted as a second row,
    /// `<figure>.vs_median` (or as `<figure>` for a [`Rule::plain`] rule).
    pub rel_floor: Option<f64>,
    /// Absolute floor of the learned allowance (the figure's unit).
    pub abs_floor: f64,
    /// The learned check's row is named `<figure>` and an explicit `bound`
    /// replaces it (`linktest.slow_pairs`: a count judged against its
    /// history unless a site sets its own bound).
    pub plain: bool,
    /// Spread figures that tell a disturbed run: when one of them is far
    /// above its own history, a FAIL of this rule is INCONCLUSIVE.
    pub spread: Vec<String>,
    /// A count of rare events: the allowance is at least `mads` × √median.
    pub count: bool,
    /// Robust figures of the same quantity (the median process, the median
    /// pair): when one of them held its usual level while this rule fails,
    /// the loss is in a few processes or pairs (a busy node, a slow node:
    /// the node checks' business), and a FAIL of this rule is INCONCLUSIVE.
    pub held: Vec<String>,
    /// A run without this figure skips the rule (it needs per-process
    /// rows, which IOR runs and single-process runs lack) instead of an
    /// ERROR.
    pub optional: bool,
}

impl Rule {
    /// With an absolute floor of the learned allowance.
    pub fn abs_floor(mut self, f: f64) -> Self {
        self.abs_floor = f;
        self
    }
    /// Judged as disturbed by these spread figures.
    pub fn spread(mut self, s: &[&str]) -> Self {
        self.spread = s.iter().map(|x| x.to_string()).collect();
        self
    }
    /// Judged as disturbed when one of these robust figures held its level.
    pub fn held(mut self, h: &[&str]) -> Self {
        self.held = h.iter().map(|x| x.to_string()).collect();
        self
    }
    /// Skipped when the run lacks the figure.
    pub fn optional(mut self) -> Self {
        self.optional = true;
        self
    }
    /// Learned row named as the figure; an explicit bound replaces it.
    pub fn plain(mut self) -> Self {
        self.plain = true;
        self
    }
    /// A count of rare events (Poisson-like noise).
    pub fn count(mut self) -> Self {
        self.count = true;
        self
    }
}

/// Thresholds and history settings.
#[derive(Debug, Clone, PartialEq)]
pub struct IoCheckConfig {
    pub rules: Vec<Rule>,
    /// N: the reference is over the newest N previous values (`check_window`).
    pub window: usize,
    /// Fewer previous values than this: NO_REFERENCE (`check_min_history`).
    pub min_history: usize,
    /// Allowance in scaled MADs (`check_mads`).
    pub mads: f64,
}

impl IoCheckConfig {
    /// The learned-reference settings of `r` under this configuration.
    pub fn learned(&self, r: &Rule) -> Learned {
        Learned {
            window: self.window,
            min_history: self.min_history,
            mads: self.mads,
            rel_floor: r.rel_floor.unwrap_or(0.0),
            abs_floor: r.abs_floor,
            count: r.count,
        }
    }
}

/// A rule (shorthand used by the default configurations): `floor` Some
/// makes it a learned-reference check with that relative floor.
pub fn rule(
    figure: &str,
    better: Better,
    unit: &str,
    bound: Option<f64>,
    floor: Option<f64>,
) -> Rule {
    Rule {
        figure: figure.into(),
        better,
        unit: unit.into(),
        bound,
        rel_floor: floor,
        abs_floor: 0.0,
        plain: false,
        spread: Vec::new(),
        count: false,
        held: Vec::new(),
        optional: false,
    }
}

/// The median process's write bandwidth (MiB/s; the median over
/// iterations of each iteration's median process, `io_task_times`): the
/// filesystem's level as most processes saw it.
pub const TASK_P50_WRITE: &str = "io.write_bw_task_p50_mib_s";
/// The same for reads.
pub const TASK_P50_READ: &str = "io.read_bw_task_p50_mib_s";

/// The spread figures of I/O (coefficient of variation of the iterations'
/// bandwidth, per operation).
pub const IO_SPREAD: [&str; 2] = ["io.write_bw_cv", "io.read_bw_cv"];

impl Default for IoCheckConfig {
    /// Learned references only (a site's absolute numbers are its own):
    /// median ± 5 scaled MADs of the newest 20 previous runs once 5 exist,
    /// with floors of 5 % for the mean bandwidth, 10 % for the worst
    /// iteration, doubling (and +0.05) for the variation and doubling (and
    /// +10 ms) for the open time. A run whose variation is far above its
    /// history is INCONCLUSIVE instead of FAIL.
    fn default() -> Self {
        let w = ["io.write_bw_cv"];
        let r = ["io.read_bw_cv"];
        IoCheckConfig {
            rules: vec![
                rule(
                    "io.write_bw_mib_s",
                    Better::Higher,
                    "MiB/s",
                    None,
                    Some(0.05),
                )
                .spread(&w)
                .held(&[TASK_P50_WRITE]),
                rule(
                    "io.read_bw_mib_s",
                    Better::Higher,
                    "MiB/s",
                    None,
                    Some(0.05),
                )
                .spread(&r)
                .held(&[TASK_P50_READ]),
                rule(
                    "io.write_bw_min_mib_s",
                    Better::Higher,
                    "MiB/s",
                    None,
                    Some(0.10),
                )
                .spread(&w)
                .held(&[TASK_P50_WRITE]),
                rule(
                    "io.read_bw_min_mib_s",
                    Better::Higher,
                    "MiB/s",
                    None,
                    Some(0.10),
                )
                .spread(&r)
                .held(&[TASK_P50_READ]),
                rule(TASK_P50_WRITE, Better::Higher, "MiB/s", None, Some(0.05))
                    .spread(&w)
                    .optional(),
                rule(TASK_P50_READ, Better::Higher, "MiB/s", None, Some(0.05))
                    .spread(&r)
                    .optional(),
                rule("io.write_bw_cv", Better::Lower, "ratio", None, Some(1.0))
                    .abs_floor(0.05)
                    .spread(&w),
                rule("io.read_bw_cv", Better::Lower, "ratio", None, Some(1.0))
                    .abs_floor(0.05)
                    .spread(&r),
                rule("io.open_time_max_s", Better::Lower, "s", None, Some(1.0))
                    .abs_floor(0.01)
                    .spread(&IO_SPREAD),
                rule("io.verify_errors", Better::Lower, "bytes", Some(0.0), None),
            ],
            window: reference::DEFAULT_WINDOW,
            min_history: reference::DEFAULT_MIN_HISTORY,
            mads: reference::DEFAULT_MADS,
        }
    }
}
/// One `checks` row (without run_id and source).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckRow {
    pub check: String,
    pub status: String,
    pub value: Option<f64>,
    pub reference: Option<f64>,
    pub unit: String,
    pub message: String,
    /// The change point of a REGRESSION (or of a FAIL it explains).
    pub regression: Option<crate::changepoint::Regression>,
}

fn col<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> Result<&'a T, IoCheckError> {
    b.schema()
        .index_of(name)
        .ok()
        .and_then(|i| b.column(i).as_any().downcast_ref::<T>())
        .ok_or_else(|| IoCheckError::Column(name.into()))
}

/// The figures of one run, from its `io_results` batches. Absent figures (no
/// read phase, no verification) are absent from the map.
pub fn figures(batches: &[RecordBatch]) -> Result<BTreeMap<String, f64>, IoCheckError> {
    let mut bw: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut open_max: Option<f64> = None;
    let mut verify: Option<f64> = None;
    for b in batches {
        let op = col::<StringArray>(b, "operation")?;
        let bwc = col::<Float64Array>(b, "bw_mib_s")?;
        // Optional columns: batches written before they existed lack them.
        let open = col::<Float64Array>(b, "open_time_s").ok();
        let ve = col::<Int64Array>(b, "verify_errors").ok();
        for i in 0..b.num_rows() {
            let key = match op.value(i) {
                "write" => "write",
                "read" => "read",
                _ => continue,
            };
            bw.entry(key).or_default().push(bwc.value(i));
            if let Some(o) = open.filter(|o| !o.is_null(i)) {
                open_max = Some(open_max.map_or(o.value(i), |m: f64| m.max(o.value(i))));
            }
            if let Some(v) = ve.filter(|v| !v.is_null(i)) {
                verify = Some(verify.unwrap_or(0.0) + v.value(i) as f64);
            }
        }
    }
    let mut out = BTreeMap::new();
    for (op, xs) in bw {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let sd = (xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt();
        out.insert(format!("io.{op}_bw_mib_s"), mean);
        out.insert(
            format!("io.{op}_bw_min_mib_s"),
            xs.iter().copied().fold(f64::INFINITY, f64::min),
        );
        out.insert(
            format!("io.{op}_bw_cv"),
            if mean > 0.0 { sd / mean } else { 0.0 },
        );
    }
    if let Some(o) = open_max {
        out.insert("io.open_time_max_s".into(), o);
    }
    if let Some(v) = verify {
        out.insert("io.verify_errors".into(), v);
    }
    Ok(out)
}

/// Per operation (`write`, `read`), the spread of a run's processes: the
/// coefficient of variation (population deviation / mean) of the processes'
/// bandwidth (`bytes / xfer_time_s`, or `1 / xfer_time_s` without bytes) in
/// each iteration, the median over iterations. From `io_task_times`; an
/// operation with fewer than 2 timed processes per iteration is absent.
pub fn rank_spread(task_times: &[RecordBatch]) -> Result<BTreeMap<String, f64>, IoCheckError> {
    Ok(rank_figures(task_times)?.0)
}

/// Per operation: the processes' spread ([`rank_spread`]) and the median
/// process's bandwidth in MiB/s (the median over iterations of each
/// iteration's median process).
#[allow(clippy::type_complexity)]
pub fn rank_figures(
    task_times: &[RecordBatch],
) -> Result<(BTreeMap<String, f64>, BTreeMap<String, f64>), IoCheckError> {
    let mut per: BTreeMap<(String, i64), Vec<f64>> = BTreeMap::new();
    for b in task_times {
        let op = col::<StringArray>(b, "operation")?;
        let it = col::<Int64Array>(b, "iteration")?;
        let xfer = col::<Float64Array>(b, "xfer_time_s")?;
        let bytes = col::<Int64Array>(b, "bytes").ok();
        for i in 0..b.num_rows() {
            if op.is_null(i) || it.is_null(i) || xfer.is_null(i) {
                continue;
            }
            let t = xfer.value(i);
            if !(t.is_finite() && t > 0.0) {
                continue;
            }
            let moved = bytes
                .filter(|c| c.is_valid(i))
                .map_or(1.0, |c| c.value(i) as f64);
            per.entry((op.value(i).to_string(), it.value(i)))
                .or_default()
                .push(moved / t);
        }
    }
    let mut by_op: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut p50: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for ((op, _), bw) in per {
        if bw.len() < 2 {
            continue;
        }
        if let Some(m) = reference::median(&bw) {
            p50.entry(op.clone()).or_default().push(m / MIB);
        }
        let n = bw.len() as f64;
        let mean = bw.iter().sum::<f64>() / n;
        if mean > 0.0 {
            let sd = (bw.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt();
            by_op.entry(op).or_default().push(sd / mean);
        }
    }
    let med = |m: BTreeMap<String, Vec<f64>>| -> BTreeMap<String, f64> {
        m.into_iter()
            .filter_map(|(op, v)| reference::median(&v).map(|x| (op, x)))
            .collect()
    };
    Ok((med(by_op), med(p50)))
}

/// Bytes in a MiB.
const MIB: f64 = 1_048_576.0;

/// [`figures`] of `io_results`, with each operation's spread
/// `io.<op>_bw_cv` the larger of its iterations' spread and its processes'
/// ([`rank_spread`] of `io_task_times`): a run disturbed on some nodes shows
/// in the processes even when it ran a single iteration.
pub fn figures_with_ranks(
    io_results: &[RecordBatch],
    task_times: &[RecordBatch],
) -> Result<BTreeMap<String, f64>, IoCheckError> {
    let mut out = figures(io_results)?;
    let (cvs, p50) = rank_figures(task_times)?;
    for (op, cv) in cvs {
        if let Some(v) = out.get_mut(&format!("io.{op}_bw_cv")) {
            *v = v.max(cv);
        }
    }
    for (op, m) in p50 {
        if matches!(op.as_str(), "write" | "read") && m.is_finite() && m > 0.0 {
            out.insert(format!("io.{op}_bw_task_p50_mib_s"), m);
        }
    }
    Ok(out)
}

/// The median of the finite values of `xs` (the mean of the middle two for
/// an even count): the reference of the relative checks
/// ([`reference::median`]), and of the dashboard's I/O trend band.
pub fn median(xs: Vec<f64>) -> Option<f64> {
    reference::median(&xs)
}

fn worse(better: Better, value: f64, limit: f64) -> bool {
    match better {
        Better::Higher => value < limit,
        Better::Lower => value > limit,
    }
}

/// A disturbed run's evidence: the spread figure, its value and its usual
/// value (the median of its history).
#[derive(Debug, Clone, PartialEq)]
pub struct Disturbance {
    pub figure: String,
    pub value: f64,
    pub usual: f64,
}

impl Disturbance {
    /// "disturbed: spread 0.41 vs usual 0.05 (io.write_bw_cv)".
    pub fn reason(&self) -> String {
        format!(
            "disturbed: spread {} vs usual {} ({})",
            figure(self.value),
            figure(self.usual),
            self.figure
        )
    }
}

/// A run whose robust figure held its level: the figure, its value and its
/// usual value.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub figure: String,
    pub value: f64,
    pub usual: f64,
}

impl Held {
    /// "a few processes: the median held at 1910 vs usual 1950 (…)".
    pub fn reason(&self) -> String {
        format!(
            "disturbed in a few processes or pairs: the median held at {} vs usual {} ({}); the node checks name them",
            figure(self.value),
            figure(self.usual),
            self.figure
        )
    }
}

/// Which robust figures ([`Rule::held`]) of a run are judged and within
/// their own learned limit. A figure without a learned rule, a value or
/// enough history tells nothing.
pub fn holds(
    figures: &BTreeMap<String, f64>,
    history: &BTreeMap<String, Vec<f64>>,
    cfg: &IoCheckConfig,
) -> BTreeMap<String, Held> {
    judged_figures(figures, history, cfg, |r| &r.held, false)
        .into_iter()
        .map(|(k, (value, usual))| {
            let h = Held {
                figure: k.clone(),
                value,
                usual,
            };
            (k, h)
        })
        .collect()
}

/// The figures named by `names` of any rule that are judged by their own
/// learned rule with the outcome `fail`: figure → (value, its usual value).
fn judged_figures(
    figures: &BTreeMap<String, f64>,
    history: &BTreeMap<String, Vec<f64>>,
    cfg: &IoCheckConfig,
    names: impl Fn(&Rule) -> &Vec<String>,
    fail: bool,
) -> BTreeMap<String, (f64, f64)> {
    let mut out = BTreeMap::new();
    let wanted: std::collections::BTreeSet<&String> = cfg.rules.iter().flat_map(&names).collect();
    for name in wanted {
        let Some(r) = cfg
            .rules
            .iter()
            .find(|r| &r.figure == name && r.rel_floor.is_some())
        else {
            continue;
        };
        let Some(&v) = figures.get(name).filter(|v| v.is_finite()) else {
            continue;
        };
        let prev = history.get(name).map(Vec::as_slice).unwrap_or(&[]);
        if let Judgement::Judged {
            fail: f, reference, ..
        } = judge(v, prev, r.better, &cfg.learned(r))
            && f == fail
        {
            out.insert(name.clone(), (v, reference.median));
        }
    }
    out
}

/// Which spread figures of a run are far above their own history: judged
/// by the spread figure's own learned rule (its median + the largest of
/// `mads` scaled MADs and its floors). A spread figure without a learned
/// rule, a value or enough history tells nothing.
pub fn disturbances(
    figures: &BTreeMap<String, f64>,
    history: &BTreeMap<String, Vec<f64>>,
    cfg: &IoCheckConfig,
) -> BTreeMap<String, Disturbance> {
    judged_figures(figures, history, cfg, |r| &r.spread, true)
        .into_iter()
        .map(|(k, (value, usual))| {
            let d = Disturbance {
                figure: k.clone(),
                value,
                usual,
            };
            (k, d)
        })
        .collect()
}

/// Makes the FAILs of `rows` that a disturbance can explain (rules with
/// spread figures: bandwidths, times; not corruption or error counts)
/// INCONCLUSIVE, with `reason` first: evidence from outside the run that it
/// ran on a disturbed machine (a busy night seen by that night's hostinfo
/// run, [`busy_machine`]). Returns how many rows it changed.
pub fn hold_for(rows: &mut [CheckRow], cfg: &IoCheckConfig, reason: &str) -> usize {
    let mut n = 0;
    for row in rows.iter_mut().filter(|r| r.status == verdict::FAIL) {
        let figure = row.check.strip_suffix(".vs_median").unwrap_or(&row.check);
        if cfg
            .rules
            .iter()
            .any(|r| r.figure == figure && !r.spread.is_empty())
        {
            row.status = verdict::INCONCLUSIVE.into();
            row.message = format!("{reason}; {}", row.message);
            n += 1;
        }
    }
    n
}

/// Share of a night's hostinfo nodes that must be loaded for the night to
/// count as busy for the whole machine.
pub const BUSY_SHARE: f64 = 0.5;
/// Fewest nodes a hostinfo run must have seen to tell a busy machine.
pub const BUSY_MIN_NODES: usize = 4;

/// Whether a night's hostinfo facts — `(load_1m, cores)` per node — show the
/// whole machine busy: at least [`BUSY_SHARE`] of at least
/// [`BUSY_MIN_NODES`] nodes with a 1-minute load of at least half their
/// cores (another job running there). Some(reason) naming the counts.
pub fn busy_machine(facts: &[(f64, i64)]) -> Option<String> {
    let n = facts.len();
    let loaded = facts
        .iter()
        .filter(|(load, cores)| *cores > 0 && *load >= 0.5 * *cores as f64)
        .count();
    (n >= BUSY_MIN_NODES && loaded as f64 >= BUSY_SHARE * n as f64).then(|| {
        format!(
            "the machine was busy that night: {loaded} of {n} nodes had a load of at least half \
             their cores in that night's hostinfo run"
        )
    })
}

/// Evaluates `cfg` on one run's figures against `history` (figure → previous
/// values, oldest first). Figures a rule names but the run lacks are skipped
/// for `io.verify_errors` (the tool did not verify) and an ERROR otherwise.
///
/// Statuses (`benchlake_core::verdict`): PASS; FAIL (worse than the bound or
/// than the learned limit); INCONCLUSIVE (would FAIL, but one of the rule's
/// spread figures shows the run was disturbed); NO_REFERENCE (a learned
/// check with fewer than `min_history` previous values, unless the value is
/// within the absolute floor, which passes whatever the history); ERROR.
pub fn evaluate(
    figures: &BTreeMap<String, f64>,
    history: &BTreeMap<String, Vec<f64>>,
    cfg: &IoCheckConfig,
) -> Vec<CheckRow> {
    let disturbed = disturbances(figures, history, cfg);
    let held = holds(figures, history, cfg);
    let mut out = Vec::new();
    for r in &cfg.rules {
        // A FAIL of a disturbed run is INCONCLUSIVE, with the reason first.
        let disturbance = r
            .spread
            .iter()
            .find_map(|s| disturbed.get(s).map(Disturbance::reason))
            .or_else(|| r.held.iter().find_map(|h| held.get(h).map(Held::reason)));
        let row = |suffix: &str,
                   status: &str,
                   value: Option<f64>,
                   reference: Option<f64>,
                   message: String| {
            let (status, message) = match (status, disturbance.as_deref()) {
                (verdict::FAIL, Some(d)) => (verdict::INCONCLUSIVE, format!("{d}; {message}")),
                _ => (status, message),
            };
            CheckRow {
                check: format!("{}{suffix}", r.figure),
                status: status.into(),
                value,
                reference,
                unit: r.unit.clone(),
                message,
                regression: None,
            }
        };
        let Some(&v) = figures.get(&r.figure) else {
            if r.figure != "io.verify_errors" && !r.optional {
                out.push(row(
                    "",
                    verdict::ERROR,
                    None,
                    None,
                    "the run has no data for this figure".into(),
                ));
            }
            continue;
        };
        if !v.is_finite() {
            out.push(row(
                "",
                verdict::ERROR,
                None,
                None,
                format!("value {v} is not finite"),
            ));
            continue;
        }
        if let Some(b) = r.bound {
            let (st, msg) = if worse(r.better, v, b) {
                (
                    verdict::FAIL,
                    format!(
                        "{} {} is {} the bound {}",
                        figure(v),
                        r.unit,
                        if r.better == Better::Higher {
                            "below"
                        } else {
                            "above"
                        },
                        figure(b)
                    ),
                )
            } else {
                (
                    verdict::PASS,
                    format!("{} {} within the bound {}", figure(v), r.unit, figure(b)),
                )
            };
            // The bound of a verify check is not disturbed by anything.
            let row = if r.figure == "io.verify_errors" {
                CheckRow {
                    check: r.figure.clone(),
                    status: st.into(),
                    value: Some(v),
                    reference: Some(b),
                    unit: r.unit.clone(),
                    message: msg,
                    regression: None,
                }
            } else {
                row("", st, Some(v), Some(b), msg)
            };
            out.push(row);
            if r.plain {
                continue;
            }
        }
        if r.rel_floor.is_some() {
            let learned = cfg.learned(r);
            let suffix = if r.plain { "" } else { ".vs_median" };
            let prev = history.get(&r.figure).map(Vec::as_slice).unwrap_or(&[]);
            let j = judge(v, prev, r.better, &learned);
            let msg = reference::message(v, &r.unit, &j, &learned);
            out.push(match j {
                Judgement::NoReference { .. }
                    if r.better == Better::Lower
                        && learned.abs_floor > 0.0
                        && v >= 0.0
                        && v <= learned.abs_floor =>
                {
                    // Within the absolute floor: no history of a
                    // non-negative figure could make this fail.
                    row(
                        suffix,
                        verdict::PASS,
                        Some(v),
                        None,
                        format!(
                            "{} {} within the floor of {} {} whatever the history ({msg})",
                            figure(v),
                            r.unit,
                            figure(learned.abs_floor),
                            r.unit
                        ),
                    )
                }
                Judgement::NoReference { .. } => {
                    row(suffix, verdict::NO_REFERENCE, Some(v), None, msg)
                }
                Judgement::Judged {
                    fail, reference, ..
                } => row(
                    suffix,
                    if fail { verdict::FAIL } else { verdict::PASS },
                    Some(v),
                    Some(reference.median),
                    msg,
                ),
            });
        }
    }
    out
}
/// Default relative floor of an mdtest rate's learned allowance (10 % of
/// the median; metadata rates are noisy, so the MADs usually decide).
pub const MDTEST_FLOOR: f64 = 0.10;

/// mdtest figures of one run from its `mdtest_summary` batches: the mean rate
/// over iterations of every operation of the `rate` table, named
/// `mdtest.<operation>_rate` (`File creation` → `mdtest.file_creation_rate`, ops/s).
pub fn mdtest_figures(batches: &[RecordBatch]) -> Result<BTreeMap<String, f64>, IoCheckError> {
    let mut out = BTreeMap::new();
    for b in batches {
        let op = col::<StringArray>(b, "operation")?;
        let stat = col::<StringArray>(b, "statistic")?;
        let mean = col::<Float64Array>(b, "mean")?;
        for i in 0..b.num_rows() {
            if stat.value(i) != "rate" {
                continue;
            }
            let name: String = op
                .value(i)
                .trim()
                .to_ascii_lowercase()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            out.insert(format!("mdtest.{name}_rate"), mean.value(i));
        }
    }
    Ok(out)
}

/// The mdtest configuration for a run's figures: one rule per operation the
/// run measured (mdtest's phases depend on its flags: `-F` has no directory
/// figures), learned references only, floor [`MDTEST_FLOOR`].
pub fn mdtest_config(figures: &BTreeMap<String, f64>) -> IoCheckConfig {
    IoCheckConfig {
        rules: figures
            .keys()
            .filter(|f| f.starts_with("mdtest."))
            .map(|f| rule(f, Better::Higher, "ops/s", None, Some(MDTEST_FLOOR)))
            .collect(),
        ..IoCheckConfig::default()
    }
}

/// Applies a run's `check_*` parameters to `cfg` (thresholds configured per
/// benchmark in the agent catalog as parameter defaults and per schedule or run
/// as parameter values):
/// - `check_window`, `check_min_history`: the history settings (newest N
///   previous runs; fewer than `min_history` gives NO_REFERENCE);
/// - `check_mads`: the learned allowance in scaled MADs (default 5);
/// - `check_<figure>`: the absolute bound of a figure, its name with `.` as `_`
///   (`check_io_write_bw_mib_s = 500` → FAIL below 500 MiB/s);
/// - `check_<figure>_floor`: the relative floor of the learned allowance
///   (`0.1` = at least 10 % of the median; a negative value switches the
///   learned check off); `check_<figure>_max_regression` is its older name;
/// - `check_<figure>_abs_floor`: the absolute floor (the figure's unit).
///
/// A bound for an mdtest operation the defaults do not list adds a rule
/// (higher is better), so a missing phase then gives ERROR. Other parameters
/// are ignored; `skip` lists `check_*` names that are not thresholds (e.g. the
/// LinkTest slow-pair settings). An unknown figure or a bad number is an error.
pub fn apply_params(
    cfg: &mut IoCheckConfig,
    params: &BTreeMap<String, String>,
    skip: &[&str],
) -> Result<(), String> {
    for (k, v) in params {
        let Some(name) = k.strip_prefix("check_") else {
            continue;
        };
        if skip.contains(&k.as_str()) {
            continue;
        }
        let num = || -> Result<f64, String> {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("params.{k}: '{v}' is not a number"))
        };
        let count = || -> Result<usize, String> {
            v.trim()
                .parse::<usize>()
                .map_err(|_| format!("params.{k}: '{v}' is not a count"))
        };
        /// What a parameter sets on its rule.
        enum Field {
            Bound,
            Floor,
            AbsFloor,
        }
        match name {
            "window" => cfg.window = count()?.max(1),
            "min_history" => cfg.min_history = count()?,
            "mads" => {
                cfg.mads = Some(num()?)
                    .filter(|x| *x >= 0.0)
                    .ok_or_else(|| format!("params.{k}: '{v}' is negative"))?
            }
            _ => {
                let (id, field) = if let Some(id) = name.strip_suffix("_max_regression") {
                    (id, Field::Floor)
                } else if let Some(id) = name.strip_suffix("_abs_floor") {
                    (id, Field::AbsFloor)
                } else if let Some(id) = name.strip_suffix("_floor") {
                    (id, Field::Floor)
                } else {
                    (name, Field::Bound)
                };
                let i = match cfg
                    .rules
                    .iter()
                    .position(|r| r.figure.replace('.', "_") == id)
                {
                    Some(i) => i,
                    None => match id.strip_prefix("mdtest_") {
                        Some(op) => {
                            cfg.rules.push(rule(
                                &format!("mdtest.{op}"),
                                Better::Higher,
                                "ops/s",
                                None,
                                None,
                            ));
                            cfg.rules.len() - 1
                        }
                        None => {
                            let known: Vec<String> = cfg
                                .rules
                                .iter()
                                .map(|r| format!("check_{}", r.figure.replace('.', "_")))
                                .collect();
                            return Err(format!(
                                "params.{k}: no such check (known: {})",
                                known.join(", ")
                            ));
                        }
                    },
                };
                let x = num()?;
                if let Some(r) = cfg.rules.get_mut(i) {
                    match field {
                        Field::Floor => r.rel_floor = (x >= 0.0).then_some(x),
                        Field::AbsFloor => r.abs_floor = x.max(0.0),
                        Field::Bound => r.bound = Some(x),
                    }
                }
            }
        }
    }
    Ok(())
}
/// The `checks` batch of one run: [`figures`] of its `io_results`, then
/// [`evaluate`]. `source` fills the `source` column (e.g. the raw key or `io_results`).
pub fn io_checks(
    run_id: &str,
    source: &str,
    io_results: &[RecordBatch],
    history: &BTreeMap<String, Vec<f64>>,
    cfg: &IoCheckConfig,
) -> Result<RecordBatch, IoCheckError> {
    let rows = evaluate(&figures(io_results)?, history, cfg);
    to_batch(run_id, source, &rows)
}

/// `checks` rows as a batch with the catalog schema.
pub fn to_batch(
    run_id: &str,
    source: &str,
    rows: &[CheckRow],
) -> Result<RecordBatch, IoCheckError> {
    let s = |f: &dyn Fn(&CheckRow) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(f)))
    };
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|_| run_id))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|_| source))),
        s(&|r| &r.check),
        s(&|r| &r.status),
        Arc::new(rows.iter().map(|r| r.value).collect::<Float64Array>()),
        Arc::new(rows.iter().map(|r| r.reference).collect::<Float64Array>()),
        s(&|r| &r.unit),
        s(&|r| &r.message),
    ];
    cols.extend(crate::changepoint::columns(
        rows.iter().map(|r| r.regression.as_ref()),
    ));
    Ok(RecordBatch::try_new(catalog::schema("checks")?, cols)?)
}

/// A measured figure for a verdict's message: a count as a whole number
/// ("330059 pairs", not "330059.0000"), anything else with four significant
/// digits (so 3.174e-4 s keeps its digits instead of printing "0.0003").
pub fn figure(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let mag = if v == 0.0 {
        0
    } else {
        v.abs().log10().floor() as i32
    };
    if mag >= 3 {
        return format!("{v:.1}");
    }
    if mag < -4 {
        return format!("{v:.3e}");
    }
    format!("{v:.*}", (3 - mag) as usize)
}

#[cfg(test)]
mod tests {
    #[test]
    fn figures_in_messages_keep_their_digits() {
        assert_eq!(super::figure(330059.0), "330059");
        assert_eq!(super::figure(261.731), "261.7");
        assert_eq!(super::figure(3.174e-4), "0.0003174");
        assert_eq!(super::figure(12345.678), "12345.7");
        assert_eq!(super::figure(1.5e-6), "1.500e-6");
        assert_eq!(super::figure(0.5), "0.5000");
    }

    use super::*;

    #[test]
    fn a_busy_machine_holds_the_fails_a_disturbance_explains() {
        // 3 of 4 nodes loaded: busy; 1 of 4, or 3 nodes in all: not.
        let busy = [(30.0, 32), (16.0, 32), (40.0, 32), (0.1, 32)];
        let why = busy_machine(&busy).expect("busy");
        assert!(why.contains("3 of 4 nodes"), "{why}");
        assert!(busy_machine(&[(30.0, 32), (0.1, 32), (0.2, 32), (0.0, 32)]).is_none());
        assert!(busy_machine(&busy[..3]).is_none());
        assert!(busy_machine(&[(1.0, 0); 8]).is_none());
        let cfg = IoCheckConfig::default();
        let row = |check: &str, status: &str| CheckRow {
            check: check.into(),
            status: status.into(),
            value: Some(1.0),
            reference: None,
            unit: String::new(),
            message: "below".into(),
            regression: None,
        };
        let mut rows = vec![
            row("io.write_bw_mib_s.vs_median", "FAIL"),
            row("io.write_bw_mib_s.vs_median", "PASS"),
            row("io.verify_errors", "FAIL"),
        ];
        assert_eq!(hold_for(&mut rows, &cfg, &why), 1);
        assert_eq!(rows[0].status, "INCONCLUSIVE");
        assert!(
            rows[0].message.starts_with("the machine was busy"),
            "{}",
            rows[0].message
        );
        assert!(rows[0].message.ends_with("; below"));
        assert_eq!(
            (rows[1].status.as_str(), rows[2].status.as_str()),
            ("PASS", "FAIL")
        );
    }

    fn results(rows: &[(&str, f64, f64, Option<i64>)]) -> RecordBatch {
        // Only the columns the checks read; the rest of io_results is ignored.
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("operation", arrow::datatypes::DataType::Utf8, false),
            arrow::datatypes::Field::new("bw_mib_s", arrow::datatypes::DataType::Float64, false),
            arrow::datatypes::Field::new("open_time_s", arrow::datatypes::DataType::Float64, true),
            arrow::datatypes::Field::new("verify_errors", arrow::datatypes::DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(rows.iter().map(|r| Some(r.2)).collect::<Float64Array>()),
                Arc::new(rows.iter().map(|r| r.3).collect::<Int64Array>()),
            ],
        )
        .unwrap()
    }

    fn find<'a>(rows: &'a [CheckRow], check: &str) -> &'a CheckRow {
        rows.iter().find(|r| r.check == check).unwrap()
    }

    #[test]
    fn figures_of_a_run() {
        let b = results(&[
            ("write", 100.0, 0.01, None),
            ("read", 300.0, 0.02, Some(0)),
            ("write", 300.0, 0.03, None),
            ("read", 300.0, 0.01, Some(0)),
        ]);
        let f = figures(&[b]).unwrap();
        assert_eq!(f["io.write_bw_mib_s"], 200.0);
        assert_eq!(f["io.write_bw_min_mib_s"], 100.0);
        assert_eq!(f["io.write_bw_cv"], 0.5);
        assert_eq!(f["io.read_bw_cv"], 0.0);
        assert_eq!(f["io.open_time_max_s"], 0.03);
        assert_eq!(f["io.verify_errors"], 0.0);
    }

    #[test]
    fn learned_reference_regression_and_bounds() {
        let f: BTreeMap<String, f64> = [
            ("io.write_bw_mib_s".to_string(), 800.0),
            ("io.read_bw_mib_s".to_string(), 1000.0),
        ]
        .into();
        // The newest 3 of [5000, 1000, 1005, 995]: median 1000, MAD 5
        // (scaled 7.41, 5 MADs × (1 + 5/3) = 98.8), so the 15 % floor
        // (150) decides.
        let h: BTreeMap<String, Vec<f64>> = [
            (
                "io.write_bw_mib_s".to_string(),
                vec![5000.0, 1000.0, 1005.0, 995.0],
            ),
            ("io.read_bw_mib_s".to_string(), vec![1000.0]),
        ]
        .into();
        let cfg = IoCheckConfig {
            rules: vec![
                rule(
                    "io.write_bw_mib_s",
                    Better::Higher,
                    "MiB/s",
                    Some(500.0),
                    Some(0.15),
                ),
                rule(
                    "io.read_bw_mib_s",
                    Better::Higher,
                    "MiB/s",
                    Some(1200.0),
                    Some(0.15),
                ),
                rule("io.open_time_max_s", Better::Lower, "s", None, Some(1.0)),
                rule("io.verify_errors", Better::Lower, "bytes", Some(0.0), None),
            ],
            window: 3,
            min_history: 2,
            mads: 5.0,
        };
        let rows = evaluate(&f, &h, &cfg);
        let w = find(&rows, "io.write_bw_mib_s.vs_median");
        assert_eq!((w.status.as_str(), w.reference), ("FAIL", Some(1000.0)));
        assert!(w.message.contains("-20.0 %"), "{}", w.message);
        assert!(
            w.message
                .contains("limit 850: 5 MADs × 2.667 for 3 runs = 98.84, floor 15 % = 150"),
            "{}",
            w.message
        );
        assert_eq!(find(&rows, "io.write_bw_mib_s").status, "PASS");
        let r = find(&rows, "io.read_bw_mib_s");
        assert_eq!((r.status.as_str(), r.reference), ("FAIL", Some(1200.0)));
        let rm = find(&rows, "io.read_bw_mib_s.vs_median");
        assert_eq!((rm.status.as_str(), rm.reference), ("NO_REFERENCE", None));
        assert_eq!(rm.message, "no reference yet: 1 of 2 previous runs");
        assert_eq!(find(&rows, "io.open_time_max_s").status, "ERROR");
        assert!(
            !rows.iter().any(|r| r.check.starts_with("io.verify")),
            "not verified: no row"
        );
        // 14 % below the median passes a 15 % floor.
        let ok: BTreeMap<String, f64> = [("io.write_bw_mib_s".to_string(), 860.0)].into();
        assert_eq!(
            find(&evaluate(&ok, &h, &cfg), "io.write_bw_mib_s.vs_median").status,
            "PASS"
        );
        // A wide history widens the allowance: 5 MADs of ±100 = 741.
        let wide: BTreeMap<String, Vec<f64>> =
            [("io.write_bw_mib_s".to_string(), vec![1000.0, 1100.0, 900.0])].into();
        assert_eq!(
            find(&evaluate(&f, &wide, &cfg), "io.write_bw_mib_s.vs_median").status,
            "PASS"
        );
    }

    #[test]
    fn the_processes_spread_raises_the_run_spread() {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("operation", arrow::datatypes::DataType::Utf8, false),
            arrow::datatypes::Field::new("iteration", arrow::datatypes::DataType::Int64, false),
            arrow::datatypes::Field::new("xfer_time_s", arrow::datatypes::DataType::Float64, true),
            arrow::datatypes::Field::new("bytes", arrow::datatypes::DataType::Int64, true),
        ]));
        // One iteration, 4 writers: 3 at 100 B/s, one at 25 B/s (a busy
        // node): bandwidths 100, 100, 100, 25 → mean 81.25, deviation
        // 32.48, CV 0.3997. One reader.
        let t = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![
                    "write", "write", "write", "write", "read",
                ])),
                Arc::new(Int64Array::from(vec![0, 0, 0, 0, 0])),
                Arc::new(Float64Array::from(vec![1.0, 1.0, 1.0, 4.0, 1.0])),
                Arc::new(Int64Array::from(vec![100, 100, 100, 100, 100])),
            ],
        )
        .unwrap();
        let r = rank_spread(std::slice::from_ref(&t)).unwrap();
        assert!(
            (r["write"] - 1054.6875f64.sqrt() / 81.25).abs() < 1e-12,
            "{r:?}"
        );
        assert!(!r.contains_key("read"), "one process: no spread");
        let b = results(&[("write", 325.0, 0.01, None), ("read", 100.0, 0.01, None)]);
        let f = figures_with_ranks(std::slice::from_ref(&b), &[t]).unwrap();
        assert!((f["io.write_bw_cv"] - r["write"]).abs() < 1e-12);
        assert_eq!(f["io.read_bw_cv"], 0.0);
        assert_eq!(
            figures_with_ranks(&[b], &[]).unwrap()["io.write_bw_cv"],
            0.0
        );
    }

    #[test]
    fn no_history_is_no_reference_never_a_pass() {
        let f: BTreeMap<String, f64> = [
            ("io.write_bw_mib_s".to_string(), 800.0),
            ("io.write_bw_min_mib_s".to_string(), 700.0),
            ("io.write_bw_cv".to_string(), 0.02),
        ]
        .into();
        let h: BTreeMap<String, Vec<f64>> =
            [("io.write_bw_mib_s".to_string(), vec![800.0; 4])].into();
        let rows = evaluate(&f, &h, &IoCheckConfig::default());
        let w = find(&rows, "io.write_bw_mib_s.vs_median");
        assert_eq!(w.status, "NO_REFERENCE");
        assert_eq!(w.message, "no reference yet: 4 of 5 previous runs");
        // The variation within its absolute floor (0.05) passes whatever
        // the history.
        let cv = find(&rows, "io.write_bw_cv.vs_median");
        assert_eq!(cv.status, "PASS", "{}", cv.message);
        assert!(
            cv.message.contains("whatever the history"),
            "{}",
            cv.message
        );
    }

    /// One slow process (a busy node) ends the phase late and takes the
    /// aggregate down while the median process holds: INCONCLUSIVE, naming
    /// the median. A filesystem that slows down slows the median too: FAIL.
    #[test]
    fn a_loss_in_a_few_processes_is_inconclusive_a_filesystems_is_not() {
        let hist: BTreeMap<String, Vec<f64>> = [
            ("io.write_bw_mib_s".to_string(), vec![20_000.0; 10]),
            (TASK_P50_WRITE.to_string(), vec![2_000.0; 10]),
            ("io.write_bw_cv".to_string(), vec![0.06; 10]),
        ]
        .into();
        let night = |agg: f64, p50: f64| -> BTreeMap<String, f64> {
            [
                ("io.write_bw_mib_s".to_string(), agg),
                (TASK_P50_WRITE.to_string(), p50),
                ("io.write_bw_cv".to_string(), 0.08),
            ]
            .into()
        };
        let rows = evaluate(&night(14_500.0, 1_990.0), &hist, &IoCheckConfig::default());
        let w = find(&rows, "io.write_bw_mib_s.vs_median");
        assert_eq!(w.status, "INCONCLUSIVE", "{}", w.message);
        assert!(
            w.message.starts_with(
                "disturbed in a few processes or pairs: the median held at 1990 vs usual 2000 (io.write_bw_task_p50_mib_s)"
            ),
            "{}",
            w.message
        );
        let rows = evaluate(&night(14_500.0, 1_500.0), &hist, &IoCheckConfig::default());
        assert_eq!(find(&rows, "io.write_bw_mib_s.vs_median").status, "FAIL");
        assert_eq!(
            find(&rows, &format!("{TASK_P50_WRITE}.vs_median")).status,
            "FAIL"
        );
    }

    #[test]
    fn a_disturbed_run_is_inconclusive_not_failed() {
        let hist = |bw: f64, cv: f64| -> BTreeMap<String, Vec<f64>> {
            [
                ("io.write_bw_mib_s".to_string(), vec![bw; 10]),
                ("io.write_bw_min_mib_s".to_string(), vec![bw * 0.95; 10]),
                ("io.write_bw_cv".to_string(), vec![cv; 10]),
                ("io.read_bw_mib_s".to_string(), vec![bw; 10]),
                ("io.read_bw_cv".to_string(), vec![cv; 10]),
            ]
            .into()
        };
        let f: BTreeMap<String, f64> = [
            ("io.write_bw_mib_s".to_string(), 412.0),
            ("io.write_bw_min_mib_s".to_string(), 200.0),
            ("io.write_bw_cv".to_string(), 0.41),
            ("io.read_bw_mib_s".to_string(), 400.0),
            ("io.read_bw_cv".to_string(), 0.05),
        ]
        .into();
        let rows = evaluate(&f, &hist(530.0, 0.05), &IoCheckConfig::default());
        let w = find(&rows, "io.write_bw_mib_s.vs_median");
        assert_eq!(w.status, "INCONCLUSIVE");
        assert!(
            w.message
                .starts_with("disturbed: spread 0.4100 vs usual 0.05000 (io.write_bw_cv); 412 MiB/s vs median 530"),
            "{}",
            w.message
        );
        assert_eq!(
            find(&rows, "io.write_bw_cv.vs_median").status,
            "INCONCLUSIVE"
        );
        // The read phase was not disturbed: its drop is a FAIL.
        assert_eq!(find(&rows, "io.read_bw_mib_s.vs_median").status, "FAIL");
        // The same drop with its usual spread is a FAIL.
        let calm: BTreeMap<String, f64> = [
            ("io.write_bw_mib_s".to_string(), 412.0),
            ("io.write_bw_cv".to_string(), 0.06),
        ]
        .into();
        let rows = evaluate(&calm, &hist(530.0, 0.05), &IoCheckConfig::default());
        assert_eq!(find(&rows, "io.write_bw_mib_s.vs_median").status, "FAIL");
        // A history of noisy runs makes 0.41 usual: not disturbed.
        let noisy = hist(530.0, 0.35);
        let rows = evaluate(&f, &noisy, &IoCheckConfig::default());
        assert_eq!(find(&rows, "io.write_bw_mib_s.vs_median").status, "FAIL");
    }

    #[test]
    fn corruption_fails_regardless_of_history() {
        let b = results(&[("write", 100.0, 0.01, None), ("read", 100.0, 0.01, Some(3))]);
        let batch = io_checks(
            "run1",
            "io_results",
            &[b],
            &BTreeMap::new(),
            &IoCheckConfig::default(),
        )
        .unwrap();
        assert_eq!(batch.schema(), catalog::schema("checks").unwrap());
        let check = batch
            .column(2)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let status = batch
            .column(3)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let i = (0..batch.num_rows())
            .find(|i| check.value(*i) == "io.verify_errors")
            .unwrap();
        assert_eq!(status.value(i), "FAIL");
        let value = batch
            .column(4)
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap();
        assert_eq!(value.value(i), 3.0);
        // Without history no relative check fails (NO_REFERENCE instead).
        let fails = (0..batch.num_rows())
            .filter(|i| status.value(*i) == "FAIL")
            .count();
        assert_eq!(fails, 1);
    }

    #[test]
    fn params_set_bounds_regressions_and_history() {
        let mut cfg = IoCheckConfig::default();
        let params: BTreeMap<String, String> = [
            ("check_io_write_bw_mib_s", "500"),
            ("check_io_read_bw_mib_s_max_regression", "0.1"),
            ("check_io_write_bw_cv_floor", "-1"),
            ("check_io_read_bw_cv_abs_floor", "0.2"),
            ("check_io_write_bw_min_mib_s_floor", "0.3"),
            ("check_mads", "4"),
            ("check_window", "4"),
            ("check_min_history", "2"),
            ("check_slow_pair_factor", "3"),
            ("block_size", "1048576"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        apply_params(&mut cfg, &params, &["check_slow_pair_factor"]).unwrap();
        let r = |f: &str| cfg.rules.iter().find(|r| r.figure == f).unwrap().clone();
        assert_eq!(r("io.write_bw_mib_s").bound, Some(500.0));
        assert_eq!(r("io.write_bw_mib_s").rel_floor, Some(0.05));
        assert_eq!(r("io.read_bw_mib_s").rel_floor, Some(0.1));
        assert_eq!(r("io.write_bw_min_mib_s").rel_floor, Some(0.3));
        assert_eq!(r("io.write_bw_cv").rel_floor, None);
        assert_eq!(r("io.read_bw_cv").abs_floor, 0.2);
        assert_eq!((cfg.window, cfg.min_history, cfg.mads), (4, 2, 4.0));
        let bad = |k: &str, v: &str| {
            let p: BTreeMap<String, String> = [(k.to_string(), v.to_string())].into();
            apply_params(&mut IoCheckConfig::default(), &p, &[]).unwrap_err()
        };
        assert!(bad("check_io_nope", "1").contains("no such check"));
        assert!(bad("check_io_write_bw_mib_s", "fast").contains("not a number"));
        assert!(bad("check_window", "-1").contains("not a count"));
        assert!(bad("check_mads", "-1").contains("negative"));
    }

    #[test]
    fn mdtest_rates_become_figures_and_rules() {
        let schema = catalog::schema("mdtest_summary").unwrap();
        let n = 3;
        let cols: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| -> ArrayRef {
                match f.name().as_str() {
                    "operation" => Arc::new(StringArray::from(vec![
                        "File creation",
                        "File creation",
                        "Tree removal",
                    ])),
                    "statistic" => Arc::new(StringArray::from(vec!["rate", "time", "rate"])),
                    "mean" => Arc::new(Float64Array::from(vec![3446.117, 7.0, 12.457])),
                    _ => arrow::array::new_null_array(f.data_type(), n),
                }
            })
            .collect();
        let b = RecordBatch::try_new_with_options(
            Arc::new(arrow::datatypes::Schema::new(
                schema
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(true))
                    .collect::<Vec<_>>(),
            )),
            cols,
            &Default::default(),
        )
        .unwrap();
        let f = mdtest_figures(&[b]).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f["mdtest.file_creation_rate"], 3446.117);
        assert_eq!(f["mdtest.tree_removal_rate"], 12.457);
        let mut cfg = mdtest_config(&f);
        assert_eq!(cfg.rules.len(), 2);
        let p: BTreeMap<String, String> = [(
            "check_mdtest_directory_creation_rate".to_string(),
            "1000".to_string(),
        )]
        .into();
        apply_params(&mut cfg, &p, &[]).unwrap();
        let rows = evaluate(&f, &BTreeMap::new(), &cfg);
        let d = find(&rows, "mdtest.directory_creation_rate");
        assert_eq!(d.status, "ERROR", "a bound on a phase the run lacks");
        assert_eq!(
            find(&rows, "mdtest.file_creation_rate.vs_median").status,
            "NO_REFERENCE"
        );
    }

    #[test]
    fn missing_columns_are_errors() {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("operation", arrow::datatypes::DataType::Utf8, false),
        ]));
        let b =
            RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(vec!["write"]))]).unwrap();
        assert!(matches!(figures(&[b]), Err(IoCheckError::Column(c)) if c == "bw_mib_s"));
    }

    /// The same checks on the io_results of a real IOR run (../shared/data/io).
    mod real {
        use std::collections::BTreeMap;

        use arrow::array::{Array, Float64Array, StringArray};
        use benchlake_formats::{IngestContext, InputFile, ingest};

        use crate::io_checks::{IoCheckConfig, figures, io_checks};

        fn io_results(case: &str) -> Vec<arrow::array::RecordBatch> {
            let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/io/").to_string()
                + case
                + "/summary.json";
            let out = ingest(
                "ior",
                &[InputFile::from_path(p)],
                &IngestContext {
                    run_id: "r1".into(),
                    date: "2026-11-22".into(),
                },
            )
            .unwrap();
            out.into_iter()
                .find(|t| t.table == "io_results")
                .unwrap()
                .batches
        }

        #[test]
        fn figures_of_a_real_ior_run_match_iors_own_summary() {
            let f = figures(&io_results("segmented_posix_shared_np4")).unwrap();
            // IOR's summary: write bwMeanMIB 3060.8331, bwMinMIB 2387.7060, bwStdMIB 484.4706.
            assert!((f["io.write_bw_mib_s"] - 3060.8331).abs() < 1e-3);
            assert_eq!(f["io.write_bw_min_mib_s"], 2387.7060);
            assert!((f["io.write_bw_cv"] - 484.4706 / 3060.8331).abs() < 1e-6);
            assert!((f["io.read_bw_mib_s"] - 7100.0).abs() < 1e-3);
            assert_eq!(f["io.open_time_max_s"], 0.0057);
            assert!(!f.contains_key("io.verify_errors"), "IOR did not verify");
        }

        #[test]
        fn a_real_run_against_healthy_and_degraded_histories() {
            let batches = io_results("segmented_posix_shared_np4");
            let cfg = IoCheckConfig::default();
            let status_of = |history: &BTreeMap<String, Vec<f64>>, check: &str| {
                let b = io_checks("r1", "io_results", &batches, history, &cfg).unwrap();
                let c = b.column(2).as_any().downcast_ref::<StringArray>().unwrap();
                let s = b.column(3).as_any().downcast_ref::<StringArray>().unwrap();
                let r = b.column(5).as_any().downcast_ref::<Float64Array>().unwrap();
                let i = (0..b.num_rows()).find(|i| c.value(*i) == check).unwrap();
                (s.value(i).to_string(), (!r.is_null(i)).then(|| r.value(i)))
            };
            let similar: BTreeMap<String, Vec<f64>> = [(
                "io.write_bw_mib_s".to_string(),
                vec![3100.0, 2900.0, 3300.0, 3000.0, 3200.0],
            )]
            .into();
            assert_eq!(
                status_of(&similar, "io.write_bw_mib_s.vs_median"),
                ("PASS".into(), Some(3100.0))
            );
            // The site used to see 4000 MiB/s (± 74): 3061 is 23 % below,
            // beyond 5 MADs (371) and the 5 % floor.
            let faster: BTreeMap<String, Vec<f64>> = [(
                "io.write_bw_mib_s".to_string(),
                vec![3900.0, 4000.0, 4100.0, 4000.0, 3950.0],
            )]
            .into();
            assert_eq!(
                status_of(&faster, "io.write_bw_mib_s.vs_median"),
                ("FAIL".into(), Some(4000.0))
            );
            assert_eq!(
                status_of(&faster, "io.read_bw_mib_s.vs_median"),
                ("NO_REFERENCE".into(), None)
            );
        }
    }
}
