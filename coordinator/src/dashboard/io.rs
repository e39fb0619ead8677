//! The I/O trends view, `/io` (docs/dashboard.md): per schedule (or per
//! benchmark for runs submitted without one) and operation, the bandwidth of
//! each run over time with its iterations, the rolling-median band the
//! relative check compares with, the check's bound, and each run's verdict.
//!
//! The figures are those of the checks (`benchlake_analysis::io_checks::
//! figures`: the mean `bw_mib_s` over a run's iterations, per operation), and
//! the band is computed as the checks job computes it: the median
//! ([`benchlake_analysis::reference`]) of the same figure over the last `window` earlier
//! succeeded runs of the series, once `min_history` exist, with the allowed
//! regression below it, both from the run's `check_*` parameters over the
//! defaults ([`io_checks::apply_params`]). Bounds are the `reference` of the
//! run's `io.{op}_bw_mib_s` rows in the `checks` table (the verdict index).
//! Each run's `io_results` is read once per committed object set and kept in
//! the [`super::cache::ViewCache`].
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use benchlake_analysis::io_checks::{self, IoCheckConfig};
use futures::StreamExt;

use super::html::{self, Chrome, badge, esc};
use super::{access, cache, pages};
use crate::http::Http;
use crate::model::{CommittedFile, RunRow, RunState};
use crate::store::RunFilter;

/// Runs shown per chart by default, and at most.
const SHOW: usize = 60;
const MAX_SHOW: usize = 500;
/// Operations charted, in order.
const OPS: &[&str] = &["write", "read"];
/// Newest runs the index page groups into series.
const INDEX_RUNS: u32 = 1000;

/// One run's `io_results`, as the charts need them.
#[derive(Debug, Clone, Default)]
pub struct IoRun {
    /// The checks' figures (`io.write_bw_mib_s`, …).
    pub figures: BTreeMap<String, f64>,
    /// Bandwidth of each iteration per operation (MiB/s).
    pub iterations: BTreeMap<String, Vec<f64>>,
    /// A line describing the access: tool, api, pattern, tasks, sizes.
    pub setup: String,
}

fn load_run(
    rt: tokio::runtime::Handle,
    lake: benchlake_core::lake::Lake,
    run_id: String,
    date: String,
) -> Result<(IoRun, usize), String> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, Int64Type};
    let batches = rt
        .block_on(
            lake.read_run_rows(benchlake_core::lake::RunRows::new("io_results", &run_id).on(&date)),
        )
        .map_err(|e| e.to_string())?;
    let figures = io_checks::figures(&batches).map_err(|e| e.to_string())?;
    let mut iterations: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut setup = String::new();
    for b in &batches {
        let (Some(op), Some(bw)) = (b.column_by_name("operation"), b.column_by_name("bw_mib_s"))
        else {
            continue;
        };
        let (Some(op), Some(bw)) = (
            op.as_string_opt::<i32>(),
            bw.as_primitive_opt::<Float64Type>(),
        ) else {
            continue;
        };
        for i in 0..b.num_rows() {
            if op.is_valid(i) && bw.is_valid(i) {
                iterations
                    .entry(op.value(i).to_string())
                    .or_default()
                    .push(bw.value(i));
            }
        }
        if setup.is_empty() && b.num_rows() > 0 {
            let s = |n: &str| {
                b.column_by_name(n)
                    .and_then(|c| c.as_string_opt::<i32>().map(|c| c.value(0).to_string()))
                    .unwrap_or_default()
            };
            let i = |n: &str| {
                b.column_by_name(n)
                    .and_then(|c| c.as_primitive_opt::<Int64Type>().map(|c| c.value(0)))
            };
            setup = format!(
                "{} {} {} · {} tasks · block {} · transfer {}",
                s("tool"),
                s("api"),
                s("pattern"),
                i("num_tasks").map(|x| x.to_string()).unwrap_or("?".into()),
                i("block_size")
                    .map(|x| html::bytes(x.max(0) as u64))
                    .unwrap_or("?".into()),
                i("transfer_size")
                    .map(|x| html::bytes(x.max(0) as u64))
                    .unwrap_or("?".into()),
            );
        }
    }
    let size = 512 + iterations.values().map(|v| v.len() * 8 + 32).sum::<usize>();
    Ok((
        IoRun {
            figures,
            iterations,
            setup,
        },
        size,
    ))
}

/// Which runs make a series: a schedule's, or a benchmark's runs submitted
/// without a schedule.
#[derive(Debug, Clone, PartialEq, Default)]
struct Query {
    schedule: Option<String>,
    benchmark: Option<String>,
    show: usize,
}

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

impl Query {
    fn parse(q: &str) -> Result<Self, String> {
        let m = html::parse_query(q);
        let get = |k: &str| m.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let mut out = Self {
            show: SHOW,
            ..Default::default()
        };
        if let Some(s) = get("schedule") {
            if !name_ok(s) {
                return Err("schedule: not a schedule id".into());
            }
            out.schedule = Some(s.to_string());
        }
        if let Some(s) = get("benchmark") {
            if !name_ok(s) {
                return Err("benchmark: letters, digits, '-', '_', '.' and ':' only".into());
            }
            out.benchmark = Some(s.to_string());
        }
        if let Some(s) = get("runs") {
            out.show = s
                .parse::<usize>()
                .ok()
                .filter(|n| (2..=MAX_SHOW).contains(n))
                .ok_or_else(|| format!("runs: a count from 2 to {MAX_SHOW}"))?;
        }
        Ok(out)
    }
}

/// One run of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Run id.
    pub run_id: String,
    /// The run's logical time (ms, [`RunRow::logical_at_ms`]): the cron
    /// instant of a scheduled or backfilled run, else its submission.
    pub at_ms: i64,
    /// The figure (mean bandwidth of the iterations, MiB/s).
    pub value: f64,
    /// Each iteration's bandwidth.
    pub iterations: Vec<f64>,
    /// Rolling median of the earlier runs (None: too few yet).
    pub median: Option<f64>,
    /// The relative check's limit (median × (1 − allowed regression)).
    pub limit: Option<f64>,
    /// Earlier runs the median is over.
    pub history: usize,
    /// The absolute bound of the run's check, when it had one.
    pub bound: Option<f64>,
    /// The worst status of the run's checks of this figure (its bound and
    /// its rolling median).
    pub status: Option<&'static str>,
}

/// The points of operation `op` over `runs` (in creation order, each with
/// its data, its parameters and its checks), with the rolling median as the
/// checks job computes it (over the runs created before), returned in the
/// order of their logical time (a backfill of past nights created after
/// tonight's run goes before it).
pub fn series(op: &str, runs: &[(&RunRow, &IoRun, Vec<crate::verdicts::CheckRow>)]) -> Vec<Point> {
    let figure = format!("io.{op}_bw_mib_s");
    let mut out = Vec::new();
    let mut earlier: Vec<f64> = Vec::new();
    for (run, data, checks) in runs {
        let Some(&value) = data.figures.get(&figure) else {
            continue;
        };
        let mut cfg = IoCheckConfig::default();
        // Bad parameters gave the run an ERROR row; the defaults draw it.
        let _ = io_checks::apply_params(
            &mut cfg,
            &run.spec.params,
            benchlake_analysis::linktest_checks::SLOW_PAIR_PARAMS,
        );
        let rule = cfg.rules.iter().find(|r| r.figure == figure);
        let learned = benchlake_analysis::reference::Reference::learn(
            &earlier,
            &rule.map(|r| cfg.learned(r)).unwrap_or_default(),
        );
        let history = match &learned {
            Ok(r) => r.n,
            Err(n) => *n,
        };
        let median = learned.as_ref().ok().map(|r| r.median);
        let limit = match (learned, rule) {
            (Ok(r), Some(rule)) if rule.rel_floor.is_some() => {
                Some(r.limit(rule.better, &cfg.learned(rule)))
            }
            _ => None,
        };
        let relative = format!("{figure}.vs_median");
        let bound = checks
            .iter()
            .find(|c| c.check == figure)
            .and_then(|c| c.reference);
        let status = crate::verdicts::worst(
            checks
                .iter()
                .filter(|c| c.check == figure || c.check == relative)
                .map(|c| c.status.as_str()),
        );
        out.push(Point {
            run_id: run.run_id.clone(),
            at_ms: run.logical_at_ms(),
            value,
            iterations: data.iterations.get(op).cloned().unwrap_or_default(),
            median,
            limit,
            history,
            bound,
            status,
        });
        if run.state == RunState::Succeeded {
            earlier.push(value);
        }
    }
    // Stable: runs of the same instant keep their creation order.
    out.sort_by_key(|p| p.at_ms);
    out
}

/// The chart of one operation: iterations as small dots, the run's figure
/// as a point coloured by its verdict (a link to the run), the rolling
/// median as a dashed line over the band down to the check's limit, and the
/// bound as a red line.
pub fn chart_svg(op: &str, points: &[Point]) -> String {
    let (l, t, w, h) = (78.0, 16.0, 900.0, 260.0);
    let (width, height) = (l + w + 150.0, t + h + 52.0);
    let mut o = String::with_capacity(16 * 1024);
    let _ = write!(
        o,
        "<svg class=\"chart io-chart\" id=\"io-{op}\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"{op} bandwidth per run\">"
    );
    if points.is_empty() {
        o.push_str("</svg>");
        return o;
    }
    let data_max = points
        .iter()
        .flat_map(|p| {
            p.iterations
                .iter()
                .copied()
                .chain([p.value, p.median.unwrap_or(0.0)])
        })
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    // A bound far above the data would flatten it: such bounds are named, not drawn.
    let bound_max = points
        .iter()
        .filter_map(|p| p.bound)
        .filter(|b| *b <= 2.0 * data_max)
        .fold(0.0f64, f64::max);
    let ymax = nice_max(data_max.max(bound_max) * 1.08);
    let n = points.len();
    // X: the runs' logical time (points come in its order); runs all of one
    // instant are spread by their order instead.
    let (t0, t1) = (
        points[0].at_ms,
        points.last().map(|p| p.at_ms).unwrap_or(points[0].at_ms),
    );
    let span = t1 - t0;
    let x = |k: usize| {
        if n == 1 {
            l + w / 2.0
        } else if span <= 0 {
            l + 12.0 + (w - 24.0) * k as f64 / (n - 1) as f64
        } else {
            l + 12.0 + (w - 24.0) * (points[k].at_ms - t0) as f64 / span as f64
        }
    };
    let y = |v: f64| t + h - (v / ymax).clamp(0.0, 1.02) * h;
    // Grid and y axis.
    for k in 0..=5 {
        let v = ymax * k as f64 / 5.0;
        let _ = write!(
            o,
            "<line x1=\"{l}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" class=\"grid\"/><text x=\"{2}\" y=\"{3:.1}\" class=\"tk\" text-anchor=\"end\">{4}</text>",
            y(v),
            l + w,
            l - 6.0,
            y(v) + 3.5,
            esc(&tick(v, ymax))
        );
    }
    let _ = write!(
        o,
        "<text x=\"16\" y=\"{0}\" class=\"ax\" text-anchor=\"middle\" transform=\"rotate(-90 16 {0})\">{op} bandwidth (MiB/s)</text>",
        t + h / 2.0
    );
    // Band: between the limit and the median, where both exist.
    let mut k = 0;
    while k < n {
        if points[k].median.is_none() {
            k += 1;
            continue;
        }
        let start = k;
        while k < n && points[k].median.is_some() {
            k += 1;
        }
        let seg = start..k;
        let mut poly = String::new();
        for i in seg.clone() {
            let m = points[i].median.unwrap_or(0.0);
            let _ = write!(poly, "{:.1},{:.1} ", x(i), y(m));
        }
        for i in seg.clone().rev() {
            let lim = points[i].limit.or(points[i].median).unwrap_or(0.0);
            let _ = write!(poly, "{:.1},{:.1} ", x(i), y(lim));
        }
        let _ = write!(
            o,
            "<polygon class=\"band\" points=\"{}\"><title>allowed range below the rolling median</title></polygon>",
            poly.trim_end()
        );
        let line: Vec<String> = seg
            .clone()
            .map(|i| format!("{:.1},{:.1}", x(i), y(points[i].median.unwrap_or(0.0))))
            .collect();
        let _ = write!(
            o,
            "<polyline class=\"median\" points=\"{}\"/>",
            line.join(" ")
        );
    }
    // Bounds drawn as steps; far ones named.
    let mut far = None;
    for (i, p) in points.iter().enumerate() {
        if let Some(b) = p.bound {
            if b > 2.0 * data_max {
                far = Some(b);
                continue;
            }
            // Half the way to the nearest neighbour (at least 4 px).
            let gap = [i.checked_sub(1), Some(i + 1).filter(|j| *j < n)]
                .into_iter()
                .flatten()
                .map(|j| (x(j) - x(i)).abs())
                .fold(f64::INFINITY, f64::min);
            let half = if gap.is_finite() {
                (gap / 2.0).max(4.0)
            } else {
                20.0
            };
            let _ = write!(
                o,
                "<line class=\"thr\" x1=\"{:.1}\" y1=\"{2:.1}\" x2=\"{:.1}\" y2=\"{2:.1}\"><title>bound {3} MiB/s</title></line>",
                (x(i) - half).max(l),
                (x(i) + half).min(l + w),
                y(b),
                esc(&html::figure(Some(b), ""))
            );
        }
    }
    // The values.
    let line: Vec<String> = points
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{:.1},{:.1}", x(i), y(p.value)))
        .collect();
    let _ = write!(
        o,
        "<polyline class=\"series\" points=\"{}\"/>",
        line.join(" ")
    );
    for (i, p) in points.iter().enumerate() {
        for v in &p.iterations {
            let _ = write!(
                o,
                "<circle class=\"iter\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\"/>",
                x(i),
                y(*v)
            );
        }
        let median = match (p.median, p.limit) {
            (Some(m), Some(lim)) => format!(
                "; rolling median {} of {} runs, limit {}",
                html::figure(Some(m), "MiB/s"),
                p.history,
                html::figure(Some(lim), "MiB/s")
            ),
            (Some(m), None) => format!("; rolling median {}", html::figure(Some(m), "MiB/s")),
            _ => format!("; {} earlier runs: no median yet", p.history),
        };
        let _ = write!(
            o,
            "<a href=\"/runs/{0}\"><circle class=\"pt v-{1}\" cx=\"{2:.1}\" cy=\"{3:.1}\" r=\"5\" data-run=\"{0}\"><title>{0} · {4} · {op} {5} ({6} iterations){7}{8} · {9}</title></circle></a>",
            esc(&p.run_id),
            p.status.unwrap_or("NONE"),
            x(i),
            y(p.value),
            html::time(p.at_ms),
            esc(&html::figure(Some(p.value), "MiB/s")),
            p.iterations.len(),
            esc(&median),
            p.bound
                .map(|b| format!("; bound {}", html::figure(Some(b), "MiB/s")))
                .unwrap_or_default(),
            p.status.unwrap_or("no verdict")
        );
    }
    // X axis: evenly spaced instants (the runs' own when all share one).
    let _ = write!(
        o,
        "<line x1=\"{l}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" class=\"axis\"/>",
        t + h,
        l + w
    );
    let ticks: Vec<(f64, String)> = if span > 0 {
        time_ticks(t0, t1)
            .into_iter()
            .map(|(at, label)| {
                (
                    l + 12.0 + (w - 24.0) * (at - t0) as f64 / span as f64,
                    label,
                )
            })
            .collect()
    } else {
        let step = n.div_ceil(6).max(1);
        (0..n)
            .step_by(step)
            .map(|i| {
                let when = html::time(points[i].at_ms);
                (x(i), when.get(11..).unwrap_or(&when).to_string())
            })
            .collect()
    };
    for (tx, when) in ticks {
        let _ = write!(
            o,
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2}\" class=\"tick\"/><text x=\"{0:.1}\" y=\"{3}\" class=\"tk\" text-anchor=\"middle\">{4}</text>",
            tx,
            t + h,
            t + h + 4.0,
            t + h + 16.0,
            esc(&when)
        );
    }
    let _ = write!(
        o,
        "<text x=\"{}\" y=\"{}\" class=\"ax\" text-anchor=\"middle\">logical time, UTC (a scheduled or backfilled run's cron instant, else its submission)</text>",
        l + w / 2.0,
        t + h + 40.0
    );
    // Legend.
    let lx = l + w + 16.0;
    let _ = write!(
        o,
        "<circle class=\"pt v-PASS\" cx=\"{0}\" cy=\"{1}\" r=\"5\"/><text x=\"{2}\" y=\"{3}\">run (mean)</text>\
         <circle class=\"iter\" cx=\"{0}\" cy=\"{4}\" r=\"2\"/><text x=\"{2}\" y=\"{5}\">iteration</text>\
         <line class=\"median\" x1=\"{6}\" y1=\"{7}\" x2=\"{8}\" y2=\"{7}\"/><text x=\"{2}\" y=\"{9}\">rolling median</text>\
         <rect class=\"band\" x=\"{6}\" y=\"{10}\" width=\"16\" height=\"10\"/><text x=\"{2}\" y=\"{11}\">allowed drop</text>\
         <line class=\"thr\" x1=\"{6}\" y1=\"{12}\" x2=\"{8}\" y2=\"{12}\"/><text x=\"{2}\" y=\"{13}\">bound</text>",
        lx + 8.0,
        t + 10.0,
        lx + 22.0,
        t + 14.0,
        t + 28.0,
        t + 32.0,
        lx,
        t + 46.0,
        lx + 16.0,
        t + 50.0,
        t + 59.0,
        t + 68.0,
        t + 82.0,
        t + 86.0
    );
    if let Some(b) = far {
        let _ = write!(
            o,
            "<text x=\"{lx}\" y=\"{}\" class=\"thr-l\">bound {} MiB/s</text><text x=\"{lx}\" y=\"{}\" class=\"thr-l\">(above the chart)</text>",
            t + 104.0,
            esc(&html::figure(Some(b), "")),
            t + 117.0
        );
    }
    o.push_str("</svg>");
    o
}

/// Ticks of a time axis from `t0` to `t1` (ms, UTC): at most 7 instants on
/// multiples of a round step (a second up to 30 days, whole UTC days from a
/// day on), each with its label — the day for steps of days, the day and
/// minute for spans over a day, else the time of day.
fn time_ticks(t0: i64, t1: i64) -> Vec<(i64, String)> {
    const S: i64 = 1_000;
    const M: i64 = 60 * S;
    const H: i64 = 60 * M;
    const D: i64 = 24 * H;
    let steps = [
        S,
        5 * S,
        15 * S,
        30 * S,
        M,
        5 * M,
        15 * M,
        30 * M,
        H,
        3 * H,
        6 * H,
        12 * H,
        D,
        2 * D,
        7 * D,
        30 * D,
    ];
    let span = (t1 - t0).max(1);
    let step = steps
        .into_iter()
        .find(|s| span <= 6 * s)
        .unwrap_or_else(|| (span / 6 / D + 1) * D);
    let mut out = Vec::new();
    let mut at = t0.div_euclid(step) * step;
    if at < t0 {
        at += step;
    }
    while at <= t1 && out.len() < 8 {
        let when = html::time(at);
        let label = if step >= D {
            when.get(..10)
        } else if span > D {
            when.get(..16)
        } else if step >= M {
            when.get(11..16)
        } else {
            when.get(11..)
        };
        out.push((at, label.unwrap_or(&when).to_string()));
        at += step;
    }
    out
}

/// A y-axis label: whole numbers from 10 up (with thousands separators),
/// else as many decimals as the scale needs.
fn tick(v: f64, ymax: f64) -> String {
    if ymax >= 10.0 {
        if v.abs() >= 10_000.0 {
            html::figure(Some(v.round()), "")
        } else {
            format!("{v:.0}")
        }
    } else {
        let d = (1.0 - ymax.log10().floor()).clamp(1.0, 6.0) as usize;
        format!("{v:.d$}")
    }
}

/// 1, 2, 2.5 or 5 × 10^k at or above `v` (the top of a chart's axis).
pub(super) fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

struct Group {
    title: String,
    link: String,
    runs: usize,
    newest: String,
}

/// `/io`: the series (schedules, and benchmarks' unscheduled runs) with I/O
/// results, or one series' charts.
pub async fn page(State(h): State<Http>, headers: HeaderMap, uri: Uri) -> Response {
    let t0 = Instant::now();
    if let Err(r) = access(&h, &headers, &pages::path_and_query(&uri), false) {
        return r;
    }
    let q = match Query::parse(uri.query().unwrap_or("")) {
        Ok(q) => q,
        Err(e) => return pages::error_page(&h, &headers, StatusCode::BAD_REQUEST, &e),
    };
    let c = match pages::coord(&h, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let chrome = Chrome::of(&h, &headers).at("/io");
    if q.schedule.is_none() && q.benchmark.is_none() {
        return index(&h, &headers, &c, chrome, t0).await;
    }
    // The series: newest first from the store, then oldest first.
    let q2 = q.clone();
    let read = c
        .db_read(move |tx| {
            let schedule = match &q2.schedule {
                Some(s) => tx.get_schedule(s)?,
                None => None,
            };
            let rows = tx.list_runs(&RunFilter {
                schedule_id: q2.schedule.clone(),
                benchmark: if q2.schedule.is_some() {
                    None
                } else {
                    q2.benchmark.clone()
                },
                limit: ((q2.show + 32) * 3) as u32,
                ..Default::default()
            })?;
            let mut out = Vec::new();
            for r in rows {
                if q2.schedule.is_none() && r.schedule_id.is_some() {
                    continue;
                }
                let files: Vec<CommittedFile> = tx
                    .committed_files_of_run(&r.run_id)?
                    .into_iter()
                    .filter(|f| f.table == "io_results")
                    .collect();
                if !files.is_empty() {
                    out.push((r, files));
                }
                if out.len() >= q2.show + 32 {
                    break;
                }
            }
            Ok((schedule, out))
        })
        .await;
    let (schedule, mut rows) = match read {
        Ok(x) => x,
        Err(e) => return pages::store_error(&h, &headers, e),
    };
    if q.schedule.is_some() && schedule.is_none() {
        return pages::error_page(&h, &headers, StatusCode::NOT_FOUND, "no such schedule");
    }
    rows.reverse();
    // Each run's io_results, through the cache, 8 reads at once.
    let jobs: Vec<_> = rows
        .iter()
        .map(|(r, files)| {
            let key = format!(
                "io|{}|{}",
                r.run_id,
                cache::fingerprint(files, &["io_results"])
            );
            (key, r.run_id.clone(), r.date.clone())
        })
        .collect();
    let loads = futures::stream::iter(jobs.into_iter().map(|(key, id, date)| {
        let (h, lake) = (h.clone(), c.lake.clone());
        let rt = tokio::runtime::Handle::current();
        async move {
            h.views()
                .get::<IoRun, _>(key, move || load_run(rt, lake, id, date))
                .await
        }
    }))
    .buffered(8)
    .collect::<Vec<_>>()
    .await;
    let mut data: Vec<Arc<IoRun>> = Vec::with_capacity(loads.len());
    let mut errors = Vec::new();
    let mut kept = Vec::new();
    for ((r, _), l) in rows.iter().zip(loads) {
        match l {
            Ok(d) => {
                data.push(d);
                kept.push(r);
            }
            Err(e) => errors.push(format!("{}: {e}", r.run_id)),
        }
    }
    let ix = c.verdicts();
    let input: Vec<(&RunRow, &IoRun, Vec<crate::verdicts::CheckRow>)> = kept
        .iter()
        .zip(&data)
        .map(|(r, d)| {
            let checks = ix
                .run(&r.run_id)
                .map(|v| v.rows().cloned().collect())
                .unwrap_or_default();
            (*r, d.as_ref(), checks)
        })
        .collect();

    let title = match (&schedule, &q.benchmark) {
        (Some(s), _) => format!("schedule {} ({})", s.name, s.spec.benchmark),
        (None, Some(b)) => format!("{b}, runs submitted without a schedule"),
        _ => String::new(),
    };
    let mut b = String::with_capacity(64 * 1024);
    let _ = write!(
        b,
        "<h1>I/O trends · {}</h1><p class=\"muted\"><a href=\"/io\">all series</a> · {}</p>",
        esc(&title),
        match &schedule {
            Some(s) => format!(
                "<a href=\"/runs?schedule={}\">runs of this schedule</a> · cron <span class=\"mono\">{} {}</span>",
                esc(&html::url_encode(&s.schedule_id)),
                esc(&s.cron),
                esc(&s.time_zone)
            ),
            None => format!(
                "<a href=\"/runs?benchmark={}\">runs of this benchmark</a>",
                esc(&html::url_encode(q.benchmark.as_deref().unwrap_or("")))
            ),
        }
    );
    // How many runs to show.
    let _ = write!(
        b,
        "<form method=\"get\" action=\"/io\" class=\"filters\" id=\"io-form\">{}<label>runs shown <select name=\"runs\">",
        match (&q.schedule, &q.benchmark) {
            (Some(s), _) => format!(
                "<input type=\"hidden\" name=\"schedule\" value=\"{}\">",
                esc(s)
            ),
            (None, Some(bm)) => format!(
                "<input type=\"hidden\" name=\"benchmark\" value=\"{}\">",
                esc(bm)
            ),
            _ => String::new(),
        }
    );
    for n in [20, 60, 120, 250, 500] {
        let sel = if n == q.show { " selected" } else { "" };
        let _ = write!(b, "<option{sel}>{n}</option>");
    }
    b.push_str("</select></label><button type=\"submit\">Show</button></form>");
    if let Some(setup) = data
        .last()
        .map(|d| d.setup.clone())
        .filter(|s| !s.is_empty())
    {
        let _ = write!(
            b,
            "<p>Newest run: <span class=\"mono\" id=\"io-setup\">{}</span></p>",
            esc(&setup)
        );
    }
    for e in &errors {
        let _ = write!(
            b,
            "<p class=\"note\">cannot read a run's io_results: {}</p>",
            esc(e)
        );
    }
    let mut tables = String::new();
    for op in OPS {
        let mut pts = series(op, &input);
        if pts.is_empty() {
            continue;
        }
        let skip = pts.len().saturating_sub(q.show);
        pts.drain(..skip);
        let last = pts.last().cloned();
        let _ = write!(
            b,
            "<section><h2>{op} bandwidth</h2><p class=\"muted\">{} runs; the band is the rolling median of the earlier succeeded runs down to the limit of the relative check (docs/io.md); points link to their runs.</p><div class=\"scroll\">{}</div>",
            pts.len(),
            chart_svg(op, &pts)
        );
        if let Some(p) = last {
            let _ = write!(
                b,
                "<p>Newest: <span id=\"io-{op}-last\">{}</span>{}{}</p>",
                esc(&html::figure(Some(p.value), "MiB/s")),
                p.median
                    .map(|m| format!(" · rolling median {}", esc(&html::figure(Some(m), "MiB/s"))))
                    .unwrap_or_default(),
                p.status
                    .map(|s| format!(" {}", badge(s)))
                    .unwrap_or_default()
            );
        }
        b.push_str("</section>");
        let _ = write!(
            tables,
            "<h3>{op}</h3><table id=\"io-{op}-runs\"><thead><tr><th>run</th><th title=\"the cron instant of a scheduled or backfilled run, else its submission\">logical time</th><th class=\"num\">bandwidth</th><th class=\"num\">iterations</th><th class=\"num\">rolling median</th><th class=\"num\">limit</th><th class=\"num\">bound</th><th>verdict</th></tr></thead><tbody>"
        );
        for p in pts.iter().rev() {
            let _ = write!(
                tables,
                "<tr data-run=\"{}\" data-value=\"{}\" data-median=\"{}\" data-bound=\"{}\"><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                esc(&p.run_id),
                p.value,
                p.median.map(|m| m.to_string()).unwrap_or_default(),
                p.bound.map(|m| m.to_string()).unwrap_or_default(),
                pages::run_link(&p.run_id),
                html::time(p.at_ms),
                esc(&html::figure(Some(p.value), "MiB/s")),
                p.iterations.len(),
                esc(&html::figure(p.median, "MiB/s")),
                esc(&html::figure(p.limit, "MiB/s")),
                esc(&html::figure(p.bound, "MiB/s")),
                pages::verdict_badge(p.status)
            );
        }
        tables.push_str("</tbody></table>");
    }
    if tables.is_empty() {
        b.push_str("<p class=\"muted\" id=\"io-none\">No run of this series has I/O results.</p>");
    } else {
        let _ = write!(b, "<section><h2>Runs</h2>{tables}</section>");
    }
    b.push_str(&pages::footer(t0, ""));
    Html(html::page(
        &format!("I/O trends · {title}"),
        "",
        &chrome,
        &b,
    ))
    .into_response()
}

async fn index(
    h: &Http,
    headers: &HeaderMap,
    c: &crate::Coordinator,
    chrome: Chrome,
    t0: Instant,
) -> Response {
    let read = c
        .db_read(|tx| {
            let schedules = tx.list_schedules()?;
            let runs = tx.list_runs(&RunFilter {
                limit: INDEX_RUNS,
                ..Default::default()
            })?;
            // A series has I/O results when one of its 3 newest runs does.
            let mut seen: BTreeMap<String, (usize, usize, String, bool)> = BTreeMap::new();
            for r in &runs {
                let key = match &r.schedule_id {
                    Some(s) => format!("s:{s}"),
                    None => format!("b:{}", r.benchmark),
                };
                let e = seen
                    .entry(key)
                    .or_insert((0, 0, r.submitted_at_ms.to_string(), false));
                e.0 += 1;
                if !e.3 && e.1 < 3 {
                    e.1 += 1;
                    e.2 = html::time(r.submitted_at_ms);
                    if tx
                        .committed_files_of_run(&r.run_id)?
                        .iter()
                        .any(|f| f.table == "io_results")
                    {
                        e.3 = true;
                    }
                }
            }
            Ok((schedules, seen))
        })
        .await;
    let (schedules, seen) = match read {
        Ok(x) => x,
        Err(e) => return pages::store_error(h, headers, e),
    };
    let names: BTreeMap<&str, (&str, &str)> = schedules
        .iter()
        .map(|s| {
            (
                s.schedule_id.as_str(),
                (s.name.as_str(), s.spec.benchmark.as_str()),
            )
        })
        .collect();
    let mut groups = Vec::new();
    for (key, (n, _, newest, io)) in &seen {
        if !io {
            continue;
        }
        if let Some(sid) = key.strip_prefix("s:") {
            let (name, bench) = names.get(sid).copied().unwrap_or((sid, "?"));
            groups.push(Group {
                title: format!("schedule {name} ({bench})"),
                link: format!("/io?schedule={}", html::url_encode(sid)),
                runs: *n,
                newest: newest.clone(),
            });
        } else if let Some(bench) = key.strip_prefix("b:") {
            groups.push(Group {
                title: format!("{bench}, submitted runs"),
                link: format!("/io?benchmark={}", html::url_encode(bench)),
                runs: *n,
                newest: newest.clone(),
            });
        }
    }
    let mut b = String::from(
        "<h1>I/O trends</h1><p class=\"muted\">Bandwidth per schedule and operation over time, with the rolling median the relative checks compare against and the checks' bounds. A series is a schedule's runs, or a benchmark's runs submitted without a schedule.</p>",
    );
    if groups.is_empty() {
        b.push_str("<p class=\"muted\" id=\"io-none\">No I/O results in the newest runs.</p>");
    } else {
        b.push_str("<table id=\"io-series\"><thead><tr><th>series</th><th class=\"num\">recent runs</th><th>newest</th></tr></thead><tbody>");
        for g in &groups {
            let _ = write!(
                b,
                "<tr><td><a href=\"{}\">{}</a></td><td class=\"num\">{}</td><td>{}</td></tr>",
                esc(&g.link),
                esc(&g.title),
                g.runs,
                esc(&g.newest)
            );
        }
        b.push_str("</tbody></table>");
    }
    b.push_str(&pages::footer(t0, ""));
    Html(html::page("I/O trends", "", &chrome, &b)).into_response()
}

/// The `/io` link of a run's series.
pub fn link_of(run: &RunRow) -> String {
    match &run.schedule_id {
        Some(s) => format!("/io?schedule={}", html::url_encode(s)),
        None => format!("/io?benchmark={}", html::url_encode(&run.benchmark)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, params: &[(&str, &str)], ok: bool) -> RunRow {
        let mut spec: crate::model::Spec = serde_json::from_value(serde_json::json!({
            "benchmark": "pio", "params": {},
            "nodes": {"names": [], "labels": {}, "count": 1},
            "launcher": "local", "max_attempts": 1, "timeout_s": 60,
        }))
        .unwrap();
        spec.params = params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RunRow {
            run_id: id.into(),
            schedule_id: Some("s1".into()),
            benchmark: "pio".into(),
            kind: "io".into(),
            state: if ok {
                RunState::Succeeded
            } else {
                RunState::Failed
            },
            spec,
            submitted_at_ms: 1_795_000_000_000 + id.len() as i64,
            started_at_ms: None,
            finished_at_ms: None,
            scheduled_for_ms: None,
            error: None,
            idempotency_key: None,
            rerun_of: None,
            date: "2026-11-24".into(),
            outcome: None,
            queued: false,
            owner: None,
            notify: vec![],
        }
    }

    fn data(w: f64) -> IoRun {
        IoRun {
            figures: [("io.write_bw_mib_s".to_string(), w)].into_iter().collect(),
            iterations: [("write".to_string(), vec![w - 10.0, w + 10.0])]
                .into_iter()
                .collect(),
            setup: String::new(),
        }
    }

    fn check(name: &str, status: &str, reference: Option<f64>) -> crate::verdicts::CheckRow {
        crate::verdicts::CheckRow {
            check: name.into(),
            status: status.into(),
            value: None,
            reference,
            unit: "MiB/s".into(),
            message: String::new(),
            ..Default::default()
        }
    }

    #[test]
    fn the_band_is_the_checks_rolling_median_and_the_bound_comes_from_the_checks() {
        let runs: Vec<RunRow> = (0..6)
            .map(|i| {
                let params: &[(&str, &str)] = match i {
                    5 => &[
                        ("check_window", "2"),
                        ("check_min_history", "2"),
                        ("check_mads", "0"),
                        ("check_io_write_bw_mib_s_floor", "0.5"),
                    ],
                    3 | 4 => &[("check_min_history", "3"), ("check_mads", "0")],
                    _ => &[],
                };
                run(&format!("R{i}"), params, i != 2)
            })
            .collect();
        let vals = [100.0, 200.0, 1000.0, 300.0, 400.0, 50.0];
        let ds: Vec<IoRun> = vals.iter().map(|v| data(*v)).collect();
        let input: Vec<_> = runs
            .iter()
            .zip(&ds)
            .enumerate()
            .map(|(i, (r, d))| {
                let checks = if i == 5 {
                    vec![
                        check("io.write_bw_mib_s", "PASS", Some(40.0)),
                        check("io.write_bw_mib_s.vs_median", "FAIL", Some(350.0)),
                    ]
                } else {
                    vec![]
                };
                (r, d, checks)
            })
            .collect();
        let pts = series("write", &input);
        assert_eq!(pts.len(), 6);
        // Fewer than 5 (the default) earlier succeeded runs: no median.
        assert_eq!(pts[2].median, None);
        // Run 3 (min history 3): earlier succeeded 100, 200 (run 2 FAILED is
        // left out): still 2.
        assert_eq!((pts[3].median, pts[3].history), (None, 2));
        // Run 4: 100, 200, 300 → 200, limit the 5 % floor below (no MADs).
        assert_eq!(pts[4].median, Some(200.0));
        assert!((pts[4].limit.unwrap() - 190.0).abs() < 1e-9);
        // Run 5 has window 2 (min history 2) and a 50 % floor: median of 300, 400.
        assert_eq!(pts[5].median, Some(350.0));
        assert_eq!(pts[5].limit, Some(175.0));
        assert_eq!(pts[5].bound, Some(40.0));
        assert_eq!(pts[5].status, Some("FAIL"));
        assert_eq!(pts[5].iterations, vec![40.0, 60.0]);
        assert!(series("read", &input).is_empty());

        let svg = chart_svg("write", &pts);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(
            svg.matches("class=\"pt v-").count(),
            6 + 1,
            "6 runs and the legend"
        );
        assert!(svg.contains("<circle class=\"pt v-FAIL\""));
        assert!(svg.contains("R5 · "));
        assert!(svg.contains("write 50.00 MiB/s (2 iterations); rolling median 350.0 MiB/s of 2 runs, limit 175.0 MiB/s; bound 40.00 MiB/s · FAIL"));
        assert_eq!(svg.matches("<polygon class=\"band\"").count(), 1);
        assert_eq!(
            svg.matches("<line class=\"thr\"").count(),
            1 + 1,
            "the bound and the legend"
        );
        // A bound far above the data is named, not drawn.
        let mut far = pts.clone();
        far[5].bound = Some(1e8);
        let svg = chart_svg("write", &far);
        assert!(svg.contains("bound 100,000,000 MiB/s"));
        assert_eq!(svg.matches("<line class=\"thr\"").count(), 1);
        assert_eq!(nice_max(1040.0), 2000.0);
        assert_eq!(nice_max(180.0), 200.0);
        assert_eq!(tick(12_000.0, 20_000.0), "12,000");
        assert_eq!(tick(100.0, 500.0), "100");
        assert_eq!(tick(0.0, 500.0), "0");
        assert_eq!(tick(10.0, 50.0), "10");
        assert_eq!(tick(0.25, 0.5), "0.25");
    }

    /// The `cx` of each run's point in `svg`, by run id.
    fn xs(svg: &str) -> Vec<(String, f64)> {
        svg.split("<circle class=\"pt v-")
            .skip(1)
            .filter_map(|c| {
                let cx = c.split("cx=\"").nth(1)?.split('"').next()?.parse().ok()?;
                let run = c.split("data-run=\"").nth(1)?.split('"').next()?;
                Some((run.to_string(), cx))
            })
            .collect()
    }

    #[test]
    fn backfilled_nights_are_plotted_at_their_nights_not_their_submission() {
        // Three nights backfilled at 02:41:45 on the 24th, after the 24th's
        // own nightly run (02:00); and a run of an older coordinator's row
        // without a cron instant (on demand: its submission).
        let day = 86_400_000;
        let night = |d: i64| 1_795_392_000_000 + d * day + 2 * 3_600_000; // 2026-11-23 02:00 + d days
        let backfill_at = night(1) + 41 * 60_000 + 45_000;
        let mut rows = Vec::new();
        let mut tonight = run("TONIGHT", &[], true);
        tonight.submitted_at_ms = night(1);
        tonight.scheduled_for_ms = Some(night(1));
        rows.push(tonight);
        for d in [-2, -1, 0] {
            let mut r = run(&format!("BACKFILL{}", d + 2), &[], true);
            r.submitted_at_ms = backfill_at;
            r.scheduled_for_ms = Some(night(d));
            rows.push(r);
        }
        let mut old = run("ONDEMAND", &[], true);
        old.submitted_at_ms = night(1) + 6 * 3_600_000;
        rows.push(old);
        let ds: Vec<IoRun> = (0..rows.len()).map(|i| data(100.0 + i as f64)).collect();
        let input: Vec<_> = rows.iter().zip(&ds).map(|(r, d)| (r, d, vec![])).collect();
        let pts = series("write", &input);
        let order: Vec<&str> = pts.iter().map(|p| p.run_id.as_str()).collect();
        assert_eq!(
            order,
            ["BACKFILL0", "BACKFILL1", "BACKFILL2", "TONIGHT", "ONDEMAND"],
            "by logical time"
        );
        assert_eq!(pts[0].at_ms, night(-2));
        assert_eq!(
            pts[4].at_ms,
            night(1) + 6 * 3_600_000,
            "no instant: submission"
        );
        let svg = chart_svg("write", &pts);
        let xs = xs(&svg);
        assert_eq!(xs.len(), 5, "{svg}");
        let x: Vec<f64> = xs.iter().map(|p| p.1).collect();
        // Three nights, three places, a night apart.
        assert!(
            x[0] < x[1] && x[1] < x[2] && x[2] < x[3] && x[3] < x[4],
            "{x:?}"
        );
        let per_night = x[1] - x[0];
        assert!((x[2] - x[1] - per_night).abs() < 0.2, "{x:?}");
        assert!((x[3] - x[2] - per_night).abs() < 0.2, "{x:?}");
        // Hovering names each night, and no label is the backfill's time.
        for d in [
            "2026-11-21 02:00:00",
            "2026-11-22 02:00:00",
            "2026-11-23 02:00:00",
        ] {
            assert!(svg.contains(&format!(" · {d} · write")), "{d}");
        }
        assert!(!svg.contains("02:41:45"), "{svg}");
        assert!(svg.contains("logical time, UTC"));
        // Ticks on whole days, named by the day.
        assert!(
            svg.contains(">2026-11-22<") && svg.contains(">2026-11-23<"),
            "{svg}"
        );
        assert_eq!(
            time_ticks(0, 3 * 86_400_000 + 1),
            [
                (0, "1970-01-01"),
                (86_400_000, "1970-01-02"),
                (172_800_000, "1970-01-03"),
                (259_200_000, "1970-01-04")
            ]
            .map(|(a, l)| (a, l.to_string()))
        );
        assert_eq!(
            time_ticks(90_000, 200_000)
                .into_iter()
                .map(|t| t.1)
                .collect::<Vec<_>>(),
            ["00:01:30", "00:02:00", "00:02:30", "00:03:00"]
        );
    }

    #[test]
    fn queries_are_validated() {
        assert_eq!(Query::parse("schedule=01ABC&runs=30").unwrap().show, 30);
        assert!(Query::parse("schedule=%3Cx%3E").is_err());
        assert!(Query::parse("runs=1").is_err());
        assert!(Query::parse("runs=100000").is_err());
        assert_eq!(
            Query::parse("").unwrap(),
            Query {
                show: SHOW,
                ..Default::default()
            }
        );
    }
}
