//! The replay view of a run, `/runs/{id}/replay` (docs/dashboard.md): for a
//! replay sweep, the predicted time against each swept parameter (one line
//! per value of the other parameters) and every point; for one replay
//! (`?replay=ID`, default the first), the per-rank breakdown of the
//! predicted time into computation, wait, latency and transfers
//! (`replay_ranks`); for a traced run, the whole run's predicted against
//! measured time per replay (model) with the calibration each used
//! (`replays.params`, docs/replay.md), and measured against modelled
//! communication time per MPI routine (`trace_comparison`).
//!
//! The run's `replays`, `replay_ranks` and `trace_comparison` objects are
//! read once per committed file set, on a blocking thread, into the
//! [`super::cache::ViewCache`].
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};

use benchlake_analysis::linktest_report::fmt as rfmt;

use super::html::{self, Chrome, esc};
use super::{access, cache, pages};
use crate::http::Http;

/// Tables the view reads.
const TABLES: &[&str] = &["replays", "replay_ranks", "trace_comparison"];
/// Ranks drawn one bar each; beyond, bars are means of blocks of ranks.
const MAX_BARS: usize = 256;
/// Line colours of the sweep curves.
const COLOURS: &[&str] = &[
    "#3577d4", "#d1352b", "#2e9d4f", "#e08a00", "#7b4fc4", "#0f8f8f", "#b0417a", "#5b6571",
];

/// One `replays` row.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayPoint {
    pub replay_id: String,
    pub model: String,
    pub trace_source: String,
    /// The sweep point: parameter → value (empty for a single replay).
    pub point: BTreeMap<String, String>,
    pub predicted_time_s: f64,
    pub records: i64,
    pub engine_wall_s: f64,
    /// The calibration the replay used (`replays.params` JSON's
    /// `calibration`): its id, or None with why none.
    pub calibration: Option<Calibration>,
}

/// The calibration a replay used, as its params record it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Calibration {
    /// The calibration's id (None: no calibration was found).
    pub id: Option<String>,
    /// Its parameters (`latency`, `bandwidth`, `intra_latency`, ...).
    pub params: BTreeMap<String, String>,
    /// Why none was used.
    pub note: String,
}

impl Calibration {
    /// The `calibration` object of a `replays.params` JSON text, if any.
    pub fn of_params(json: &str) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        let c = v.get("calibration")?;
        Some(Self {
            id: c.get("id").and_then(|x| x.as_str()).map(str::to_string),
            params: c
                .get("params")
                .and_then(|p| p.as_object())
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default(),
            note: c
                .get("note")
                .and_then(|x| x.as_str())
                .unwrap_or_default()
                .to_string(),
        })
    }

    /// `latency 4.1 µs, bandwidth 9,537 MB/s; intra ...`: the fitted figures.
    pub fn figures(&self) -> String {
        let f = |k: &str| self.params.get(k).and_then(|v| v.parse::<f64>().ok());
        let mut out = Vec::new();
        for (label, l, b) in [
            ("inter-node", "latency", "bandwidth"),
            ("intra-node", "intra_latency", "intra_bandwidth"),
        ] {
            if let (Some(l), Some(b)) = (f(l), f(b)) {
                out.push(format!(
                    "{label} {} + size / {}",
                    html::figure(Some(l), "s"),
                    html::figure(Some(b), "MB/s")
                ));
            }
        }
        if let Some(e) = self.params.get("eager_limit") {
            out.push(format!("eager limit {e} B"));
        }
        out.join("; ")
    }
}

/// One `replay_ranks` row.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RankTimes {
    pub rank: i64,
    pub total_s: f64,
    pub computation_s: f64,
    pub wait_s: f64,
    pub latency_s: f64,
    pub small_transfer_s: f64,
    pub big_transfer_s: f64,
}

/// Measured against modelled communication of one routine, over the ranks.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Routine {
    pub function: String,
    pub calls: i64,
    pub measured_s: f64,
    pub modelled_s: f64,
    pub ranks: usize,
}

/// What the page shows of a run.
#[derive(Debug, Default)]
pub struct ReplayView {
    /// Points by replay id order.
    pub points: Vec<ReplayPoint>,
    /// Per replay id, its ranks in rank order.
    pub ranks: BTreeMap<String, Vec<RankTimes>>,
    /// Per replay id, the routines of `trace_comparison` (the `all` row last).
    pub routines: BTreeMap<String, Vec<Routine>>,
    /// Per replay id of a traced run, the whole run's (measured, predicted)
    /// time: the largest over the ranks' `all` rows of `trace_comparison`.
    pub totals: BTreeMap<String, (f64, f64)>,
}

fn col<'a>(b: &'a RecordBatch, name: &str, table: &str) -> Result<&'a dyn Array, String> {
    b.column_by_name(name)
        .map(|c| c.as_ref())
        .ok_or_else(|| format!("{table}: no column {name}"))
}

fn strings(b: &RecordBatch, name: &str, table: &str) -> Result<Vec<String>, String> {
    let c = arrow::compute::cast(col(b, name, table)?, &DataType::Utf8)
        .map_err(|e| format!("{table}.{name}: {e}"))?;
    let c = c.as_string::<i32>();
    Ok((0..c.len())
        .map(|i| {
            if c.is_valid(i) {
                c.value(i).to_string()
            } else {
                String::new()
            }
        })
        .collect())
}

fn floats(b: &RecordBatch, name: &str, table: &str) -> Result<Vec<f64>, String> {
    let c = arrow::compute::cast(col(b, name, table)?, &DataType::Float64)
        .map_err(|e| format!("{table}.{name}: {e}"))?;
    let c = c.as_primitive::<Float64Type>();
    Ok((0..c.len())
        .map(|i| if c.is_valid(i) { c.value(i) } else { f64::NAN })
        .collect())
}

fn ints(b: &RecordBatch, name: &str, table: &str) -> Result<Vec<i64>, String> {
    let c = arrow::compute::cast(col(b, name, table)?, &DataType::Int64)
        .map_err(|e| format!("{table}.{name}: {e}"))?;
    let c = c.as_primitive::<Int64Type>();
    Ok((0..c.len())
        .map(|i| if c.is_valid(i) { c.value(i) } else { 0 })
        .collect())
}

/// Builds the view from the batches of the three tables.
pub fn build(
    replays: &[RecordBatch],
    ranks: &[RecordBatch],
    comparison: &[RecordBatch],
) -> Result<ReplayView, String> {
    let mut v = ReplayView::default();
    for b in replays {
        let t = "replays";
        let (id, model, src, point) = (
            strings(b, "replay_id", t)?,
            strings(b, "model", t)?,
            strings(b, "trace_source", t)?,
            strings(b, "point", t)?,
        );
        // Older test batches and files may lack params: no calibration then.
        let params = strings(b, "params", t).unwrap_or_default();
        let (pred, recs, wall) = (
            floats(b, "predicted_time_s", t)?,
            ints(b, "records", t)?,
            floats(b, "engine_wall_s", t)?,
        );
        for i in 0..b.num_rows() {
            // The point is a JSON object of parameter → value (strings or numbers).
            let point: BTreeMap<String, String> =
                match serde_json::from_str::<serde_json::Value>(&point[i]) {
                    Ok(serde_json::Value::Object(m)) => m
                        .into_iter()
                        .map(|(k, v)| {
                            let v = match v {
                                serde_json::Value::String(s) => s,
                                other => other.to_string(),
                            };
                            (k, v)
                        })
                        .collect(),
                    _ => BTreeMap::new(),
                };
            v.points.push(ReplayPoint {
                replay_id: id[i].clone(),
                model: model[i].clone(),
                trace_source: src[i].clone(),
                point,
                predicted_time_s: pred[i],
                records: recs[i],
                engine_wall_s: wall[i],
                calibration: params.get(i).and_then(|p| Calibration::of_params(p)),
            });
        }
    }
    // By the point's values (numerically), then by id.
    v.points.sort_by(|a, b| {
        let key = |p: &ReplayPoint| -> Vec<(String, OrdKey)> {
            p.point
                .iter()
                .map(|(k, v)| (k.clone(), OrdKey::of(v)))
                .collect()
        };
        key(a)
            .cmp(&key(b))
            .then_with(|| a.replay_id.cmp(&b.replay_id))
    });
    for b in ranks {
        let t = "replay_ranks";
        let id = strings(b, "replay_id", t)?;
        let rank = ints(b, "rank", t)?;
        let f = |n: &str| floats(b, n, t);
        let (tot, comp, wait, lat, small, big) = (
            f("total_s")?,
            f("computation_s")?,
            f("wait_s")?,
            f("latency_s")?,
            f("small_transfer_s")?,
            f("big_transfer_s")?,
        );
        for i in 0..b.num_rows() {
            v.ranks.entry(id[i].clone()).or_default().push(RankTimes {
                rank: rank[i],
                total_s: tot[i],
                computation_s: comp[i],
                wait_s: wait[i],
                latency_s: lat[i],
                small_transfer_s: small[i],
                big_transfer_s: big[i],
            });
        }
    }
    for r in v.ranks.values_mut() {
        r.sort_by_key(|x| x.rank);
    }
    let mut routines: BTreeMap<(String, String), Routine> = BTreeMap::new();
    for b in comparison {
        let t = "trace_comparison";
        let (id, func) = (strings(b, "replay_id", t)?, strings(b, "function", t)?);
        let calls = ints(b, "calls", t)?;
        let (meas, model) = (
            floats(b, "measured_comm_s", t)?,
            floats(b, "modelled_comm_s", t)?,
        );
        // Rows written before the whole-run times existed have no totals.
        let totals = match (
            floats(b, "measured_total_s", t),
            floats(b, "modelled_total_s", t),
        ) {
            (Ok(m), Ok(p)) => Some((m, p)),
            _ => None,
        };
        for i in 0..b.num_rows() {
            if let Some((mt, pt)) = &totals
                && func[i] == "all"
                && mt[i].is_finite()
                && pt[i].is_finite()
            {
                let e = v.totals.entry(id[i].clone()).or_insert((0.0, 0.0));
                e.0 = e.0.max(mt[i]);
                e.1 = e.1.max(pt[i]);
            }
            let r = routines
                .entry((id[i].clone(), func[i].clone()))
                .or_insert_with(|| Routine {
                    function: func[i].clone(),
                    ..Default::default()
                });
            r.calls += calls[i];
            if meas[i].is_finite() {
                r.measured_s += meas[i];
            }
            if model[i].is_finite() {
                r.modelled_s += model[i];
            }
            r.ranks += 1;
        }
    }
    for ((id, _), r) in routines {
        v.routines.entry(id).or_default().push(r);
    }
    for rs in v.routines.values_mut() {
        // Largest measured time first; the total (`all`) last.
        rs.sort_by(|a, b| {
            (a.function == "all")
                .cmp(&(b.function == "all"))
                .then(b.measured_s.total_cmp(&a.measured_s))
        });
    }
    Ok(v)
}

fn load(
    rt: tokio::runtime::Handle,
    lake: benchlake_core::lake::Lake,
    run_id: String,
    date: String,
) -> Result<(ReplayView, usize), String> {
    let read = |table: &str| {
        rt.block_on(
            lake.read_run_rows(benchlake_core::lake::RunRows::new(table, &run_id).on(&date)),
        )
        .map_err(|e| e.to_string())
    };
    let v = build(
        &read("replays")?,
        &read("replay_ranks")?,
        &read("trace_comparison")?,
    )?;
    let size = 1024
        + v.points.len() * 256
        + v.ranks.values().map(|r| r.len() * 64).sum::<usize>()
        + v.routines.values().map(|r| r.len() * 96).sum::<usize>();
    Ok((v, size))
}

/// The swept parameters: those with more than one value over the points.
fn axes(points: &[ReplayPoint]) -> Vec<String> {
    let mut vals: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in points {
        for (k, v) in &p.point {
            vals.entry(k).or_default().insert(v);
        }
    }
    vals.into_iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(k, _)| k.to_string())
        .collect()
}

fn num(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok().filter(|x| x.is_finite())
}

/// A parameter value that sorts numerically when it is a number.
#[derive(Debug, Clone, PartialEq)]
enum OrdKey {
    Num(f64),
    Text(String),
}

impl Eq for OrdKey {}

impl PartialOrd for OrdKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (Self::Num(a), Self::Num(b)) => a.total_cmp(b),
            (Self::Num(_), Self::Text(_)) => std::cmp::Ordering::Less,
            (Self::Text(_), Self::Num(_)) => std::cmp::Ordering::Greater,
            (Self::Text(a), Self::Text(b)) => a.cmp(b),
        }
    }
}

impl OrdKey {
    fn of(v: &str) -> Self {
        num(v)
            .map(Self::Num)
            .unwrap_or_else(|| Self::Text(v.to_string()))
    }
}

/// A value of a swept parameter with its unit where the name says it.
fn param_value(name: &str, v: &str) -> String {
    match (name, num(v)) {
        ("latency", Some(x)) | ("latency_s", Some(x)) => html::figure(Some(x), "s"),
        ("bandwidth", Some(x)) | ("bandwidth_mb_s", Some(x)) => html::figure(Some(x), "MB/s"),
        _ => v.to_string(),
    }
}

/// The sweep chart of axis `x`: predicted time against it, one line per
/// combination of the other parameters.
pub fn sweep_svg(points: &[ReplayPoint], x: &str) -> String {
    let (l, t, w, h) = (80.0, 14.0, 620.0, 260.0);
    let (width, height) = (l + w + 240.0, t + h + 50.0);
    let pts: Vec<(&ReplayPoint, f64)> = points
        .iter()
        .filter_map(|p| p.point.get(x).and_then(|v| num(v)).map(|xv| (p, xv)))
        .filter(|(p, _)| p.predicted_time_s.is_finite())
        .collect();
    let mut o = String::new();
    let _ = write!(
        o,
        "<svg class=\"chart\" id=\"sweep-{}\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"predicted time against {}\">",
        esc(x),
        esc(x)
    );
    if pts.is_empty() {
        o.push_str("</svg>");
        return o;
    }
    let (xmin, xmax) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (_, v)| {
            (a.min(*v), b.max(*v))
        });
    let log = xmin > 0.0 && xmax >= 10.0 * xmin;
    let fx = |v: f64| {
        let f = if xmax <= xmin {
            0.5
        } else if log {
            (v / xmin).ln() / (xmax / xmin).ln()
        } else {
            (v - xmin) / (xmax - xmin)
        };
        l + 20.0 + f * (w - 40.0)
    };
    let ymax = super::io::nice_max(
        pts.iter()
            .map(|(p, _)| p.predicted_time_s)
            .fold(0.0f64, f64::max)
            * 1.05,
    );
    let fy = |v: f64| t + h - (v / ymax).clamp(0.0, 1.0) * h;
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        let _ = write!(
            o,
            "<line x1=\"{l}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" class=\"grid\"/><text x=\"{2}\" y=\"{3:.1}\" class=\"tk\" text-anchor=\"end\">{4}</text>",
            fy(v),
            l + w,
            l - 6.0,
            fy(v) + 3.5,
            esc(&html::figure(Some(v), "s"))
        );
    }
    let _ = write!(
        o,
        "<line x1=\"{l}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" class=\"axis\"/><text x=\"16\" y=\"{2}\" class=\"ax\" text-anchor=\"middle\" transform=\"rotate(-90 16 {2})\">predicted time</text><text x=\"{3}\" y=\"{4}\" class=\"ax\" text-anchor=\"middle\">{5}{6}</text>",
        t + h,
        l + w,
        t + h / 2.0,
        l + w / 2.0,
        t + h + 38.0,
        esc(x),
        if log { " (logarithmic)" } else { "" }
    );
    let xs: BTreeSet<u64> = pts.iter().map(|(_, v)| v.to_bits()).collect();
    for bits in xs {
        let v = f64::from_bits(bits);
        let raw = pts
            .iter()
            .find(|(_, xv)| xv.to_bits() == bits)
            .and_then(|(p, _)| p.point.get(x))
            .cloned()
            .unwrap_or_default();
        let _ = write!(
            o,
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2}\" class=\"tick\"/><text x=\"{0:.1}\" y=\"{3}\" class=\"tk\" text-anchor=\"middle\">{4}</text>",
            fx(v),
            t + h,
            t + h + 4.0,
            t + h + 16.0,
            esc(&param_value(x, &raw))
        );
    }
    // One line per combination of the other parameters.
    type Line<'a> = (String, Vec<(f64, &'a ReplayPoint)>);
    let mut lines: BTreeMap<Vec<OrdKey>, Line<'_>> = BTreeMap::new();
    for (p, xv) in &pts {
        let others: Vec<(&String, &String)> =
            p.point.iter().filter(|(k, _)| k.as_str() != x).collect();
        let label: Vec<String> = others
            .iter()
            .map(|(k, v)| format!("{k} {}", param_value(k, v)))
            .collect();
        let key = others.iter().map(|(_, v)| OrdKey::of(v)).collect();
        lines
            .entry(key)
            .or_insert_with(|| (label.join(", "), Vec::new()))
            .1
            .push((*xv, p));
    }
    for (k, (label, line)) in lines.values_mut().enumerate() {
        line.sort_by(|a, b| a.0.total_cmp(&b.0));
        let colour = COLOURS[k % COLOURS.len()];
        let poly: Vec<String> = line
            .iter()
            .map(|(xv, p)| format!("{:.1},{:.1}", fx(*xv), fy(p.predicted_time_s)))
            .collect();
        let _ = write!(
            o,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.8\" points=\"{}\"/>",
            poly.join(" ")
        );
        for (xv, p) in line.iter() {
            let _ = write!(
                o,
                "<a href=\"?replay={0}\"><circle cx=\"{1:.1}\" cy=\"{2:.1}\" r=\"4\" fill=\"{colour}\" class=\"sw\" data-replay=\"{0}\"><title>{3} = {4}{5}{6}: predicted {7}</title></circle></a>",
                esc(&html::url_encode(&p.replay_id)),
                fx(*xv),
                fy(p.predicted_time_s),
                esc(x),
                esc(&param_value(
                    x,
                    p.point.get(x).map(String::as_str).unwrap_or("")
                )),
                if label.is_empty() { "" } else { ", " },
                esc(label),
                esc(&html::figure(Some(p.predicted_time_s), "s"))
            );
        }
        let ly = t + 10.0 + k as f64 * 16.0;
        let _ = write!(
            o,
            "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{colour}\" stroke-width=\"2\"/><text x=\"{3}\" y=\"{4}\">{5}</text>",
            l + w + 16.0,
            ly,
            l + w + 36.0,
            l + w + 42.0,
            ly + 3.5,
            esc(if label.is_empty() { "predicted" } else { label })
        );
    }
    o.push_str("</svg>");
    o
}

/// The per-rank breakdown: one stacked bar per rank (or per block of ranks
/// beyond [`MAX_BARS`]): computation, wait, latency, small and big
/// transfers, adding up to the rank's predicted total.
pub fn ranks_svg(ranks: &[RankTimes]) -> String {
    const PARTS: [(&str, &str); 5] = [
        ("computation", "#8a9bb0"),
        ("wait", "#e08a00"),
        ("latency", "#7b4fc4"),
        ("small transfers", "#0f8f8f"),
        ("big transfers", "#2e9d4f"),
    ];
    let n = ranks.len();
    let per = n.div_ceil(MAX_BARS).max(1);
    let bars: Vec<(i64, i64, [f64; 5], f64)> = ranks
        .chunks(per)
        .map(|c| {
            let k = c.len() as f64;
            let mut parts = [0.0; 5];
            let mut total = 0.0;
            for r in c {
                for (p, v) in parts.iter_mut().zip([
                    r.computation_s,
                    r.wait_s,
                    r.latency_s,
                    r.small_transfer_s,
                    r.big_transfer_s,
                ]) {
                    *p += v / k;
                }
                total += r.total_s / k;
            }
            (
                c.first().map(|r| r.rank).unwrap_or(0),
                c.last().map(|r| r.rank).unwrap_or(0),
                parts,
                total,
            )
        })
        .collect();
    let (l, t, w, h) = (80.0, 14.0, 760.0, 240.0);
    let (width, height) = (l + w + 150.0, t + h + 50.0);
    let mut o = String::new();
    let _ = write!(
        o,
        "<svg class=\"chart\" id=\"replay-ranks\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"predicted time per rank\">"
    );
    let ymax = bars
        .iter()
        .map(|b| b.3.max(b.2.iter().sum()))
        .fold(0.0f64, f64::max)
        * 1.05;
    let ymax = super::io::nice_max(ymax);
    let fy = |v: f64| v / ymax * h;
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        let _ = write!(
            o,
            "<line x1=\"{l}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" class=\"grid\"/><text x=\"{2}\" y=\"{3:.1}\" class=\"tk\" text-anchor=\"end\">{4}</text>",
            t + h - fy(v),
            l + w,
            l - 6.0,
            t + h - fy(v) + 3.5,
            esc(&html::figure(Some(v), "s"))
        );
    }
    let bw = w / bars.len().max(1) as f64;
    for (i, (a, z, parts, total)) in bars.iter().enumerate() {
        let x = l + i as f64 * bw;
        let mut y = t + h;
        let who = if a == z {
            format!("rank {a}")
        } else {
            format!("ranks {a}–{z} (mean)")
        };
        let mut tip = format!("{who}: total {}", html::figure(Some(*total), "s"));
        for ((name, _), v) in PARTS.iter().zip(parts) {
            let _ = write!(tip, "; {name} {}", html::figure(Some(*v), "s"));
        }
        let _ = write!(
            o,
            "<g class=\"rk\" data-rank=\"{a}\"><title>{}</title>",
            esc(&tip)
        );
        for ((_, colour), v) in PARTS.iter().zip(parts) {
            let hh = fy(*v);
            if hh <= 0.0 {
                continue;
            }
            y -= hh;
            let _ = write!(
                o,
                "<rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{hh:.2}\" fill=\"{colour}\"/>",
                (bw - if bw > 3.0 { 1.0 } else { 0.0 }).max(0.5)
            );
        }
        o.push_str("</g>");
    }
    let step = bars.len().div_ceil(16).max(1);
    for (i, (a, _, _, _)) in bars.iter().enumerate().step_by(step) {
        let x = l + (i as f64 + 0.5) * bw;
        let _ = write!(
            o,
            "<text x=\"{x:.1}\" y=\"{}\" class=\"tk\" text-anchor=\"middle\">{a}</text>",
            t + h + 14.0
        );
    }
    let _ = write!(
        o,
        "<line x1=\"{l}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" class=\"axis\"/><text x=\"{2}\" y=\"{3}\" class=\"ax\" text-anchor=\"middle\">rank{4}</text><text x=\"16\" y=\"{5}\" class=\"ax\" text-anchor=\"middle\" transform=\"rotate(-90 16 {5})\">predicted time</text>",
        t + h,
        l + w,
        l + w / 2.0,
        t + h + 34.0,
        if per > 1 {
            format!(" (bars are means of {per} ranks)")
        } else {
            String::new()
        },
        t + h / 2.0
    );
    for (k, (name, colour)) in PARTS.iter().enumerate() {
        let y = t + 8.0 + k as f64 * 16.0;
        let _ = write!(
            o,
            "<rect x=\"{}\" y=\"{y}\" width=\"12\" height=\"10\" fill=\"{colour}\"/><text x=\"{}\" y=\"{}\">{name}</text>",
            l + w + 14.0,
            l + w + 32.0,
            y + 9.0
        );
    }
    o.push_str("</svg>");
    o
}

/// Measured against modelled communication time per routine (summed over
/// the ranks): two bars per routine.
pub fn routines_svg(routines: &[Routine]) -> String {
    let rows: Vec<&Routine> = routines.iter().filter(|r| r.function != "all").collect();
    let (l, t, w) = (150.0, 24.0, 560.0);
    let rh = 30.0;
    let h = rh * rows.len() as f64;
    let (width, height) = (l + w + 170.0, t + h + 36.0);
    let mut o = String::new();
    let _ = write!(
        o,
        "<svg class=\"chart\" id=\"replay-routines\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"measured and modelled time per routine\">\
         <rect x=\"{l}\" y=\"4\" width=\"12\" height=\"10\" fill=\"#1d2733\"/><text x=\"{}\" y=\"13\">measured (trace statistics)</text>\
         <rect x=\"{}\" y=\"4\" width=\"12\" height=\"10\" fill=\"#7fb3ff\"/><text x=\"{}\" y=\"13\">modelled (replay)</text>",
        l + 16.0,
        l + 220.0,
        l + 236.0
    );
    let xmax = rows
        .iter()
        .map(|r| r.measured_s.max(r.modelled_s))
        .fold(0.0f64, f64::max)
        * 1.05;
    let xmax = if xmax > 0.0 { xmax } else { 1.0 };
    for (i, r) in rows.iter().enumerate() {
        let y = t + i as f64 * rh;
        let ratio = if r.measured_s > 0.0 {
            format!("{:.2}×", r.modelled_s / r.measured_s)
        } else {
            "—".into()
        };
        let _ = write!(
            o,
            "<g class=\"routine\" data-function=\"{0}\"><title>{0}: {1} calls; measured {2}, modelled {3} ({4})</title>\
             <text x=\"{5}\" y=\"{6:.1}\" text-anchor=\"end\" class=\"mono\">{0}</text>\
             <rect x=\"{l}\" y=\"{7:.1}\" width=\"{8:.2}\" height=\"11\" fill=\"#1d2733\"/>\
             <rect x=\"{l}\" y=\"{9:.1}\" width=\"{10:.2}\" height=\"11\" fill=\"#7fb3ff\"/>\
             <text x=\"{11:.1}\" y=\"{6:.1}\" class=\"tk\">{2} / {3} ({4})</text></g>",
            esc(&r.function),
            r.calls,
            esc(&html::figure(Some(r.measured_s), "s")),
            esc(&html::figure(Some(r.modelled_s), "s")),
            ratio,
            l - 8.0,
            y + 15.0,
            y + 3.0,
            (r.measured_s / xmax * w).max(0.5),
            y + 15.0,
            (r.modelled_s / xmax * w).max(0.5),
            l + (r.measured_s.max(r.modelled_s) / xmax * w) + 6.0,
        );
    }
    o.push_str("</svg>");
    o
}

/// `/runs/{id}/replay`: the page.
pub async fn page(
    State(h): State<Http>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> Response {
    let t0 = Instant::now();
    if let Err(r) = access(&h, &headers, &pages::path_and_query(&uri), false) {
        return r;
    }
    if let Some(r) = pages::validate_id(&h, &headers, &id) {
        return r;
    }
    let q = html::parse_query(uri.query().unwrap_or(""));
    let pick = q.get("replay").filter(|s| !s.is_empty()).cloned();
    if pick.as_ref().is_some_and(|s| {
        s.len() > 128
            || !s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    }) {
        return pages::error_page(
            &h,
            &headers,
            StatusCode::BAD_REQUEST,
            "replay: not a replay id",
        );
    }
    let c = match pages::coord(&h, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let d = match pages::read_run(&c, id.clone()).await {
        Ok(Some(d)) if d.files.iter().any(|f| f.table == "replays") => d,
        Ok(Some(_)) => {
            return pages::error_page(
                &h,
                &headers,
                StatusCode::NOT_FOUND,
                &format!("run {id} has no replay tables (replays)"),
            );
        }
        Ok(None) => {
            return pages::error_page(&h, &headers, StatusCode::NOT_FOUND, &format!("no run {id}"));
        }
        Err(e) => return pages::store_error(&h, &headers, e),
    };
    let key = format!("replay|{id}|{}", cache::fingerprint(&d.files, TABLES));
    let (lake, run_id, date) = (c.lake.clone(), id.clone(), d.run.date.clone());
    let rt = tokio::runtime::Handle::current();
    let v: Arc<ReplayView> = match h
        .views()
        .get(key, move || load(rt, lake, run_id, date))
        .await
    {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(run = %id, error = %e, "dashboard: cannot derive the replay view");
            return pages::error_page(
                &h,
                &headers,
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot read the run's replay tables: {e}"),
            );
        }
    };
    let chosen = match &pick {
        Some(p) => match v.points.iter().find(|x| &x.replay_id == p) {
            Some(x) => x,
            None => {
                return pages::error_page(
                    &h,
                    &headers,
                    StatusCode::NOT_FOUND,
                    &format!("run {id} has no replay {p}"),
                );
            }
        },
        None => match v.points.first() {
            Some(x) => x,
            None => {
                return pages::error_page(
                    &h,
                    &headers,
                    StatusCode::NOT_FOUND,
                    &format!("run {id} has no replays rows"),
                );
            }
        },
    };
    let body = render(&v, &id, chosen);
    Html(html::page(
        &format!("Replay {id}"),
        "",
        &Chrome::of(&h, &headers).at("/runs"),
        &format!("{body}{}", pages::footer(t0, "")),
    ))
    .into_response()
}

fn render(v: &ReplayView, id: &str, chosen: &ReplayPoint) -> String {
    let mut b = String::with_capacity(32 * 1024);
    let first = &v.points[0];
    let _ = write!(
        b,
        "<h1>Replay · run {}</h1><p class=\"muted\">model <b>{}</b> · trace <span class=\"mono\">{}</span> · {} replay{} · <a href=\"/runs/{}\">run page</a></p>",
        pages::run_link(id),
        esc(&first.model),
        esc(&first.trace_source),
        v.points.len(),
        if v.points.len() == 1 { "" } else { "s" },
        esc(id)
    );
    let swept = axes(&v.points);
    if !swept.is_empty() {
        b.push_str("<section><h2>Sweep</h2><p class=\"muted\">Predicted time of the replayed trace against each swept parameter; one line per value of the other parameters. A point opens its per-rank breakdown.</p>");
        for x in &swept {
            let _ = write!(
                b,
                "<h3>against {}</h3><div class=\"scroll\">{}</div>",
                esc(x),
                sweep_svg(&v.points, x)
            );
        }
        b.push_str("</section>");
    }
    // Traced runs: the whole run, predicted against measured, per replay.
    if !v.totals.is_empty() {
        b.push_str(&totals_section(v));
    }
    // Every point.
    b.push_str("<section><h2>Replays</h2><table id=\"replays\"><thead><tr><th>replay</th>");
    let keys: BTreeSet<&str> = v
        .points
        .iter()
        .flat_map(|p| p.point.keys().map(String::as_str))
        .collect();
    for k in &keys {
        let _ = write!(b, "<th>{}</th>", esc(k));
    }
    b.push_str("<th class=\"num\">predicted time</th><th class=\"num\">records</th><th class=\"num\">engine time</th></tr></thead><tbody>");
    for p in &v.points {
        let cur = if p.replay_id == chosen.replay_id {
            " class=\"current\""
        } else {
            ""
        };
        let _ = write!(
            b,
            "<tr{cur} data-replay=\"{0}\" data-predicted-s=\"{1}\"><td><a class=\"mono\" href=\"?replay={2}\">{0}</a></td>",
            esc(&p.replay_id),
            p.predicted_time_s,
            esc(&html::url_encode(&p.replay_id))
        );
        for k in &keys {
            let _ = write!(
                b,
                "<td>{}</td>",
                esc(&p
                    .point
                    .get(*k)
                    .map(|v| param_value(k, v))
                    .unwrap_or_default())
            );
        }
        let _ = write!(
            b,
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&html::figure(Some(p.predicted_time_s), "s")),
            rfmt::int(p.records.max(0) as u64),
            esc(&html::figure(Some(p.engine_wall_s), "s"))
        );
    }
    b.push_str("</tbody></table></section>");
    // Breakdown of the chosen replay.
    let point: Vec<String> = chosen
        .point
        .iter()
        .map(|(k, v)| format!("{k} = {}", param_value(k, v)))
        .collect();
    let _ = write!(
        b,
        "<section><h2>Per-rank breakdown</h2><p>Replay <span class=\"mono\" id=\"replay-chosen\">{}</span>{}: predicted <b id=\"replay-predicted\">{}</b> (the slowest rank).</p>",
        esc(&chosen.replay_id),
        if point.is_empty() {
            String::new()
        } else {
            format!(" ({})", esc(&point.join(", ")))
        },
        esc(&html::figure(Some(chosen.predicted_time_s), "s"))
    );
    if let Some(c) = &chosen.calibration {
        let _ = write!(
            b,
            "<p id=\"replay-calibration\">Calibration: {}</p>",
            calibration_text(c)
        );
    }
    match v.ranks.get(&chosen.replay_id) {
        Some(r) if !r.is_empty() => {
            let _ = write!(b, "<div class=\"scroll\">{}</div>", ranks_svg(r));
        }
        _ => b.push_str("<p class=\"muted\">No replay_ranks rows for this replay.</p>"),
    }
    b.push_str("</section>");
    // Traced runs: measured against modelled per routine.
    if let Some(rs) = v.routines.get(&chosen.replay_id).filter(|r| !r.is_empty()) {
        b.push_str("<section><h2>Measured against modelled</h2><p class=\"muted\">Communication time per MPI routine, summed over the ranks: as the traced run measured it, and as the replay models it (trace_comparison).</p>");
        let _ = write!(b, "<div class=\"scroll\">{}</div>", routines_svg(rs));
        b.push_str("<table id=\"routines\"><thead><tr><th>routine</th><th class=\"num\">calls</th><th class=\"num\">ranks</th><th class=\"num\">measured</th><th class=\"num\">modelled</th><th class=\"num\">modelled / measured</th></tr></thead><tbody>");
        for r in rs {
            let _ = write!(
                b,
                "<tr data-function=\"{0}\" data-measured-s=\"{1}\" data-modelled-s=\"{2}\"><td class=\"mono\">{0}</td><td class=\"num\">{3}</td><td class=\"num\">{4}</td><td class=\"num\">{5}</td><td class=\"num\">{6}</td><td class=\"num\">{7}</td></tr>",
                esc(&r.function),
                r.measured_s,
                r.modelled_s,
                rfmt::int(r.calls.max(0) as u64),
                r.ranks,
                esc(&html::figure(Some(r.measured_s), "s")),
                esc(&html::figure(Some(r.modelled_s), "s")),
                if r.measured_s > 0.0 {
                    format!("{:.2}", r.modelled_s / r.measured_s)
                } else {
                    "—".into()
                }
            );
        }
        b.push_str("</tbody></table></section>");
    }
    b
}

/// How a replay's calibration reads on the page (HTML).
fn calibration_text(c: &Calibration) -> String {
    match &c.id {
        Some(id) => format!(
            "<span class=\"mono\" data-calibration=\"{0}\">{0}</span> ({1})",
            esc(id),
            esc(&c.figures())
        ),
        None => format!("none — {}", esc(&c.note)),
    }
}

/// The whole run's measured time against each replay's prediction (one
/// pair of bars per replay) and the calibration each used.
fn totals_section(v: &ReplayView) -> String {
    let rows: Vec<(&ReplayPoint, f64, f64)> = v
        .points
        .iter()
        .filter_map(|p| v.totals.get(&p.replay_id).map(|(m, pr)| (p, *m, *pr)))
        .collect();
    let mut b = String::new();
    b.push_str("<section><h2>Predicted against measured</h2><p class=\"muted\">The whole traced run: its measured time (the slowest rank's computation and communication in the traced window) and each replay's predicted time, with the calibration it used (docs/replay.md).</p>");
    let (l, t, w, rh) = (150.0, 24.0, 520.0, 34.0);
    let (width, height) = (l + w + 190.0, t + rh * rows.len() as f64 + 12.0);
    let _ = write!(
        b,
        "<div class=\"scroll\"><svg class=\"chart\" id=\"replay-totals\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"predicted against measured time\">\
         <rect x=\"{l}\" y=\"4\" width=\"12\" height=\"10\" fill=\"#1d2733\"/><text x=\"{}\" y=\"13\">measured</text>\
         <rect x=\"{}\" y=\"4\" width=\"12\" height=\"10\" fill=\"#e08a00\"/><text x=\"{}\" y=\"13\">predicted</text>",
        l + 16.0,
        l + 110.0,
        l + 126.0
    );
    let xmax = rows
        .iter()
        .map(|(_, m, p)| m.max(*p))
        .fold(0.0f64, f64::max)
        * 1.05;
    let xmax = if xmax > 0.0 { xmax } else { 1.0 };
    for (i, (p, m, pr)) in rows.iter().enumerate() {
        let y = t + i as f64 * rh;
        let err = if *m > 0.0 {
            (pr - m) / m * 100.0
        } else {
            f64::NAN
        };
        let _ = write!(
            b,
            "<g class=\"total\" data-replay=\"{0}\"><title>{1}: measured {2}, predicted {3} ({4:+.1} %)</title>\
             <text x=\"{5}\" y=\"{6:.1}\" text-anchor=\"end\">{1}</text>\
             <rect x=\"{l}\" y=\"{7:.1}\" width=\"{8:.2}\" height=\"12\" fill=\"#1d2733\"/>\
             <rect x=\"{l}\" y=\"{9:.1}\" width=\"{10:.2}\" height=\"12\" fill=\"#e08a00\"/>\
             <text x=\"{11:.1}\" y=\"{6:.1}\" class=\"tk\">{3} vs {2} ({4:+.1} %)</text></g>",
            esc(&p.replay_id),
            esc(&p.model),
            esc(&html::figure(Some(*m), "s")),
            esc(&html::figure(Some(*pr), "s")),
            err,
            l - 8.0,
            y + 17.0,
            y + 3.0,
            (m / xmax * w).max(0.5),
            y + 16.0,
            (pr / xmax * w).max(0.5),
            l + (m.max(*pr) / xmax * w) + 6.0,
        );
    }
    b.push_str("</svg></div>");
    b.push_str("<table id=\"totals\"><thead><tr><th>replay</th><th>model</th><th class=\"num\">measured</th><th class=\"num\">predicted</th><th class=\"num\">error</th><th>calibration</th></tr></thead><tbody>");
    for (p, m, pr) in &rows {
        let err = if *m > 0.0 {
            (pr - m) / m * 100.0
        } else {
            f64::NAN
        };
        let _ = write!(
            b,
            "<tr data-replay=\"{0}\" data-model=\"{1}\" data-measured-s=\"{2}\" data-predicted-s=\"{3}\" data-calibration=\"{4}\"><td><a class=\"mono\" href=\"?replay={5}\">{0}</a></td><td>{1}</td><td class=\"num\">{6}</td><td class=\"num\">{7}</td><td class=\"num\">{8:+.1} %</td><td>{9}</td></tr>",
            esc(&p.replay_id),
            esc(&p.model),
            m,
            pr,
            esc(p
                .calibration
                .as_ref()
                .and_then(|c| c.id.as_deref())
                .unwrap_or("")),
            esc(&html::url_encode(&p.replay_id)),
            esc(&html::figure(Some(*m), "s")),
            esc(&html::figure(Some(*pr), "s")),
            err,
            p.calibration
                .as_ref()
                .map(calibration_text)
                .unwrap_or_else(|| "—".into())
        );
    }
    b.push_str("</tbody></table></section>");
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int32Array, Int64Array, StringArray};
    use std::sync::Arc;

    fn replays() -> RecordBatch {
        let pts = [
            ("a", r#"{"bandwidth":"1000","latency":"1e-6"}"#, 0.0339),
            ("b", r#"{"bandwidth":"1000","latency":"2e-5"}"#, 0.0512),
            ("c", r#"{"bandwidth":"10000","latency":"1e-6"}"#, 0.0330),
            ("d", r#"{"bandwidth":"10000","latency":"2e-5"}"#, 0.0510),
        ];
        RecordBatch::try_from_iter(vec![
            (
                "replay_id",
                Arc::new(StringArray::from_iter_values(pts.iter().map(|p| p.0))) as _,
            ),
            (
                "model",
                Arc::new(StringArray::from(vec!["dimemas"; 4])) as _,
            ),
            (
                "trace_source",
                Arc::new(StringArray::from(vec!["raw/x/<t>.dim"; 4])) as _,
            ),
            (
                "point",
                Arc::new(StringArray::from_iter_values(pts.iter().map(|p| p.1))) as _,
            ),
            (
                "predicted_time_s",
                Arc::new(Float64Array::from_iter_values(pts.iter().map(|p| p.2))) as _,
            ),
            ("records", Arc::new(Int64Array::from(vec![22720; 4])) as _),
            (
                "engine_wall_s",
                Arc::new(Float64Array::from(vec![0.01; 4])) as _,
            ),
        ])
        .unwrap()
    }

    fn ranks() -> RecordBatch {
        let n = 3;
        RecordBatch::try_from_iter(vec![
            ("replay_id", Arc::new(StringArray::from(vec!["b"; n])) as _),
            ("rank", Arc::new(Int32Array::from(vec![2, 0, 1])) as _),
            (
                "total_s",
                Arc::new(Float64Array::from(vec![0.0512; n])) as _,
            ),
            (
                "computation_s",
                Arc::new(Float64Array::from(vec![0.02, 0.03, 0.025])) as _,
            ),
            (
                "wait_s",
                Arc::new(Float64Array::from(vec![0.0122, 0.0022, 0.0072])) as _,
            ),
            (
                "latency_s",
                Arc::new(Float64Array::from(vec![0.019; n])) as _,
            ),
            (
                "small_transfer_s",
                Arc::new(Float64Array::from(vec![0.0; n])) as _,
            ),
            (
                "big_transfer_s",
                Arc::new(Float64Array::from(vec![0.0; n])) as _,
            ),
        ])
        .unwrap()
    }

    fn comparison() -> RecordBatch {
        RecordBatch::try_from_iter(vec![
            ("replay_id", Arc::new(StringArray::from(vec!["b"; 4])) as _),
            (
                "function",
                Arc::new(StringArray::from(vec![
                    "MPI_Isend",
                    "MPI_Isend",
                    "MPI_Barrier",
                    "all",
                ])) as _,
            ),
            (
                "calls",
                Arc::new(Int64Array::from(vec![20, 20, 5, 45])) as _,
            ),
            (
                "measured_comm_s",
                Arc::new(Float64Array::from(vec![1e-5, 3e-5, 2e-5, 6e-5])) as _,
            ),
            (
                "modelled_comm_s",
                Arc::new(Float64Array::from(vec![5e-5, 5e-5, 1e-4, 2e-4])) as _,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn the_sweep_breakdown_and_comparison_show_the_tables_values() {
        let v = build(&[replays()], &[ranks()], &[comparison()]).unwrap();
        assert_eq!(v.points.len(), 4);
        assert_eq!(
            axes(&v.points),
            vec!["bandwidth".to_string(), "latency".to_string()]
        );
        assert_eq!(
            v.ranks["b"].iter().map(|r| r.rank).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        let rs = &v.routines["b"];
        assert_eq!(rs[0].function, "MPI_Isend");
        assert_eq!((rs[0].calls, rs[0].ranks), (40, 2));
        assert!((rs[0].measured_s - 4e-5).abs() < 1e-18 && (rs[0].modelled_s - 1e-4).abs() < 1e-18);
        assert_eq!(rs.last().unwrap().function, "all");

        // Against latency: one line per bandwidth, log axis (1 µs to 20 µs).
        let svg = sweep_svg(&v.points, "latency");
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("latency (logarithmic)"));
        assert!(svg.contains(
            "<title>latency = 20.00 µs, bandwidth 1000 MB/s: predicted 51.20 ms</title>"
        ));
        assert!(svg.contains(">bandwidth 10,000 MB/s<"));
        assert!(svg.contains("href=\"?replay=b\""));

        let page = render(&v, "01JD3Q6Z5YV9C2M4T8N0R7K1PX", &v.points[1]);
        assert!(page.contains("raw/x/&lt;t&gt;.dim") && !page.contains("<t>"));
        assert!(
            page.contains("<tr class=\"current\" data-replay=\"b\" data-predicted-s=\"0.0512\">")
        );
        assert!(page.contains("id=\"replay-predicted\">51.20 ms</b>"));
        // Three ranks, stacked: computation, wait and latency (transfers are 0).
        assert_eq!(page.matches("<g class=\"rk\"").count(), 3);
        assert!(page.contains("<title>rank 0: total 51.20 ms; computation 30.00 ms; wait 2.200 ms; latency 19.00 ms; small transfers 0 s; big transfers 0 s</title>"));
        assert!(page.contains("<g class=\"routine\" data-function=\"MPI_Isend\"><title>MPI_Isend: 40 calls; measured 40.00 µs, modelled 100.0 µs (2.50×)</title>"));
        assert!(page.contains("data-function=\"all\" data-measured-s=\"0.00006\""));
    }

    #[test]
    fn traced_runs_show_predicted_against_measured_and_the_calibration() {
        let params = [
            r#"{"host_type":0,"calibration":{"id":"01KAXYZ","params":{"latency":"4.5e-6","bandwidth":"9536.74","intra_latency":"1e-6","intra_bandwidth":"38147"},"nodes":["n1"]}}"#,
            r#"{"calibration":{"id":null,"note":"no fitted calibration covers the nodes a1: the default parameters"}}"#,
        ];
        let replays = RecordBatch::try_from_iter(vec![
            (
                "replay_id",
                Arc::new(StringArray::from(vec!["j1-default", "j2-default"])) as _,
            ),
            (
                "model",
                Arc::new(StringArray::from(vec!["bandela", "dimemas"])) as _,
            ),
            (
                "trace_source",
                Arc::new(StringArray::from(vec!["raw/r/t/"; 2])) as _,
            ),
            ("params", Arc::new(StringArray::from(params.to_vec())) as _),
            ("point", Arc::new(StringArray::from(vec!["{}"; 2])) as _),
            (
                "predicted_time_s",
                Arc::new(Float64Array::from(vec![0.3, 0.12])) as _,
            ),
            ("records", Arc::new(Int64Array::from(vec![10, 10])) as _),
            (
                "engine_wall_s",
                Arc::new(Float64Array::from(vec![0.01; 2])) as _,
            ),
        ])
        .unwrap();
        let cmp = RecordBatch::try_from_iter(vec![
            (
                "replay_id",
                Arc::new(StringArray::from(vec![
                    "j1-default",
                    "j1-default",
                    "j2-default",
                ])) as _,
            ),
            (
                "function",
                Arc::new(StringArray::from(vec!["all", "all", "all"])) as _,
            ),
            ("calls", Arc::new(Int64Array::from(vec![1, 1, 1])) as _),
            (
                "measured_comm_s",
                Arc::new(Float64Array::from(vec![0.1, 0.1, 0.1])) as _,
            ),
            (
                "modelled_comm_s",
                Arc::new(Float64Array::from(vec![0.1, 0.1, 0.1])) as _,
            ),
            (
                "measured_total_s",
                Arc::new(Float64Array::from(vec![0.25, 0.2, 0.25])) as _,
            ),
            (
                "modelled_total_s",
                Arc::new(Float64Array::from(vec![0.3, 0.28, 0.12])) as _,
            ),
        ])
        .unwrap();
        let v = build(&[replays], &[], &[cmp]).unwrap();
        assert_eq!(v.totals["j1-default"], (0.25, 0.3));
        assert_eq!(v.totals["j2-default"], (0.25, 0.12));
        let c = v.points[0].calibration.clone().unwrap();
        assert_eq!(c.id.as_deref(), Some("01KAXYZ"));
        assert!(
            c.figures().contains("inter-node 4.500 µs"),
            "{}",
            c.figures()
        );
        let page = render(&v, "R", &v.points[0]);
        assert!(page.contains("id=\"replay-totals\""), "{page}");
        assert!(page.contains("data-replay=\"j1-default\" data-model=\"bandela\" data-measured-s=\"0.25\" data-predicted-s=\"0.3\" data-calibration=\"01KAXYZ\""), "{page}");
        assert!(page.contains("+20.0 %"), "{page}");
        assert!(page.contains("-52.0 %"), "{page}");
        assert!(
            page.contains("none — no fitted calibration covers the nodes a1"),
            "{page}"
        );
        assert!(page.contains("<p id=\"replay-calibration\">Calibration: <span class=\"mono\" data-calibration=\"01KAXYZ\">"), "{page}");
    }

    #[test]
    fn many_ranks_are_drawn_as_block_means() {
        let ranks: Vec<RankTimes> = (0..1000)
            .map(|r| RankTimes {
                rank: r,
                total_s: 1.0,
                computation_s: 1.0,
                ..Default::default()
            })
            .collect();
        let svg = ranks_svg(&ranks);
        assert_eq!(svg.matches("<g class=\"rk\"").count(), 250);
        assert!(svg.contains("ranks 0–3 (mean): total 1.000 s"));
        assert!(svg.contains("bars are means of 4 ranks"));
    }
}
