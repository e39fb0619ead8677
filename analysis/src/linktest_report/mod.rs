//! The LinkTest report page: from a decoded run (`benchlake_formats::linktest`)
//! to one SVG with the rank×rank time matrix (colour map with rank ticks, host
//! boundaries and names), a histogram of pair times, a summary table (min,
//! median, mean, max with bandwidth; slowest pairs with their retests; host
//! pairs above a threshold), a host×host matrix of the slowest pair between
//! each two hosts, and the run's checks; and the same page as PNG.
//!
//! [`summarize`] computes every number the page shows, so tests and the CLI can
//! use them without parsing SVG; [`render_svg`] only draws a [`Summary`];
//! [`render_png`] rasterises the SVG with the embedded font ([`fonts`]).
use std::collections::HashMap;

pub mod fmt;
pub mod fonts;
pub mod stream;
mod svg;

pub use svg::{PAGE_W, Scale, ramp_rgb, render_svg};

use benchlake_formats::linktest::LinkTestRun;
use serde::Serialize;

/// Report options.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Permutation to draw.
    pub permutation: usize,
    /// Host pairs whose maximum time exceeds this (s) are listed; `None` = 2 × the median pair time.
    pub threshold_s: Option<f64>,
    /// Histogram bins.
    pub histogram_bins: usize,
    /// The matrix is drawn with at most this many cells per side (ranks are binned, keeping each bin's maximum).
    pub max_matrix_cells: usize,
    /// Slowest pairs listed.
    pub top_pairs: usize,
    /// Title line.
    pub title: String,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            permutation: 0,
            threshold_s: None,
            histogram_bins: 40,
            max_matrix_cells: 256,
            top_pairs: 10,
            title: "LinkTest report".into(),
        }
    }
}

/// A pair of hosts with its aggregate times.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostPair {
    /// Initiating host.
    pub from_host: String,
    /// Partner host.
    pub to_host: String,
    /// Measured rank pairs between them.
    pub pairs: usize,
    /// Mean time (s).
    pub mean_s: f64,
    /// Maximum time (s).
    pub max_s: f64,
}

/// A slow rank pair.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowPair {
    /// Initiator.
    pub from_rank: usize,
    /// Partner.
    pub to_rank: usize,
    /// Host of the initiator.
    pub from_host: String,
    /// Host of the partner.
    pub to_host: String,
    /// Time in the main test (s).
    pub time_s: f64,
    /// Time in the serial retest (s), when retested.
    pub retest_time_s: Option<f64>,
}

/// Everything the page shows.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Title.
    pub title: String,
    /// LinkTest version.
    pub version: String,
    /// Mode.
    pub mode: String,
    /// Ranks.
    pub num_tasks: usize,
    /// Messages per measurement.
    pub num_messages: u64,
    /// Bytes per message.
    pub message_size: u64,
    /// All-to-all run.
    pub all_to_all: bool,
    /// Serial mode.
    pub serial: bool,
    /// Measured pairs.
    pub pairs: usize,
    /// Minimum, mean, maximum pair time over the measured pairs (s).
    pub min_s: f64,
    /// Mean pair time (s).
    pub avg_s: f64,
    /// Maximum pair time (s).
    pub max_s: f64,
    /// Median pair time (s).
    pub median_s: f64,
    /// Recorded all-to-all (min, avg, max).
    pub a2a: Option<(f64, f64, f64)>,
    /// Host names, in order of first rank.
    pub hosts: Vec<String>,
    /// First rank of each host block along the rank axis (where the host changes).
    pub host_boundaries: Vec<(usize, String)>,
    /// Histogram of the measured pair times.
    pub histogram: Histogram,
    /// Colours (and histogram bins) are on a logarithmic scale: the slowest
    /// pair is at least [`LOG_SCALE_RATIO`] times the fastest.
    pub log_scale: bool,
    /// The slowest pairs (recorded retests first, then the slowest matrix entries).
    pub slowest: Vec<SlowPair>,
    /// Threshold used for `hot_host_pairs` (s).
    pub threshold_s: f64,
    /// Host pairs whose maximum exceeds the threshold, slowest first.
    pub hot_host_pairs: Vec<HostPair>,
    /// Host×host maximum times (`hosts.len()²`, row = initiating host; NaN = no pair).
    pub host_matrix_max: Vec<f64>,
    /// Host×host mean times (same layout; NaN = no pair).
    pub host_matrix_mean: Vec<f64>,
    /// Binned rank×rank matrix side and cells (maximum per bin; NaN = nothing measured).
    pub matrix: (usize, usize, Vec<f64>),
    /// The run's `checks` verdicts (empty when none were recorded or the report
    /// is drawn from a file).
    pub checks: Vec<Check>,
}

/// Histogram of pair times.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Histogram {
    /// Bin edges (s), one more than bins; log-spaced when `log` is set.
    pub edges: Vec<f64>,
    /// Pairs per bin (the last bin includes its upper edge).
    pub counts: Vec<usize>,
    /// Bins are spaced logarithmically.
    pub log: bool,
}

/// Ratio of the slowest to the fastest pair from which colours and histogram
/// bins use a logarithmic scale (a linear one shows one dark block then).
pub const LOG_SCALE_RATIO: f64 = 10.0;

/// One `checks` verdict of the run (rows of the `checks` table).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// File or component the check is about.
    pub source: String,
    /// Check name, e.g. `linktest.max_time_s`.
    pub check: String,
    /// PASS, FAIL or ERROR.
    pub status: String,
    /// Measured figure.
    pub value: Option<f64>,
    /// Bound or median it was compared with.
    pub reference: Option<f64>,
    /// Unit of value and reference.
    pub unit: Option<String>,
    /// Human-readable verdict.
    pub message: Option<String>,
}

/// Errors of the report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The requested permutation does not exist.
    #[error("permutation {0} not in the run ({1} stored)")]
    NoPermutation(usize, usize),
    /// The SVG could not be rasterised.
    #[error("PNG rendering: {0}")]
    Png(String),
}

/// The hosts of a run's ranks: each rank's host (`?` when the run does not
/// say), the hosts in order of first rank, their indices, and where each
/// block of consecutive ranks of one host starts.
pub(crate) struct HostLayout<'a> {
    pub(crate) host_of: Vec<&'a str>,
    pub(crate) hosts: Vec<String>,
    pub(crate) host_idx: HashMap<&'a str, usize>,
    pub(crate) host_boundaries: Vec<(usize, String)>,
}

impl<'a> HostLayout<'a> {
    pub(crate) fn of(run: &'a LinkTestRun) -> Self {
        let host_of: Vec<&str> = (0..run.num_tasks)
            .map(|r| run.ranks.get(r).map(|x| x.hostname.as_str()).unwrap_or("?"))
            .collect();
        let mut hosts: Vec<String> = Vec::new();
        let mut host_idx: HashMap<&str, usize> = HashMap::new();
        for h in &host_of {
            if !host_idx.contains_key(h) {
                host_idx.insert(h, hosts.len());
                hosts.push((*h).to_string());
            }
        }
        let mut host_boundaries = Vec::new();
        for (r, h) in host_of.iter().enumerate() {
            if r == 0 || host_of.get(r - 1) != Some(h) {
                host_boundaries.push((r, (*h).to_string()));
            }
        }
        Self {
            host_of,
            hosts,
            host_idx,
            host_boundaries,
        }
    }
}

/// Computes the report's numbers.
pub fn summarize(run: &LinkTestRun, opts: &ReportOptions) -> Result<Summary, ReportError> {
    let n = run.num_tasks;
    let p = run
        .permutations
        .get(opts.permutation)
        .ok_or(ReportError::NoPermutation(
            opts.permutation,
            run.permutations.len(),
        ))?;
    let HostLayout {
        host_of,
        hosts,
        host_idx,
        host_boundaries,
    } = HostLayout::of(run);
    // Measured pairs: off-diagonal, not (time 0 and step 0).
    let measured = |i: usize, j: usize| -> Option<f64> {
        let t = *p.times.get(i * n + j)?;
        let s = *p.steps.get(i * n + j)?;
        (i != j && !(t == 0.0 && s == 0)).then_some(t)
    };
    let mut all: Vec<f64> = Vec::with_capacity(n * n.saturating_sub(1));
    for i in 0..n {
        for j in 0..n {
            if let Some(t) = measured(i, j) {
                all.push(t);
            }
        }
    }
    let pairs = all.len();
    let (min_s, max_s) = all
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), t| {
            (a.min(*t), b.max(*t))
        });
    let (min_s, max_s) = if pairs == 0 {
        (0.0, 0.0)
    } else {
        (min_s, max_s)
    };
    // The average LinkTest recorded for the permutation (its own summation
    // order, so the page shows the same value as LinkTest's output); the mean
    // of the matrix when the file has none.
    let avg_s = if p.avg_time_s.is_finite() && p.avg_time_s >= min_s && p.avg_time_s <= max_s {
        p.avg_time_s
    } else if pairs > 0 {
        all.iter().sum::<f64>() / pairs as f64
    } else {
        0.0
    };
    let log_scale = min_s > 0.0 && max_s >= LOG_SCALE_RATIO * min_s;
    let bins = opts.histogram_bins.max(1);
    let edges: Vec<f64> = (0..=bins)
        .map(|k| {
            let f = k as f64 / bins as f64;
            if log_scale {
                min_s * (max_s / min_s).powf(f)
            } else if max_s > min_s {
                min_s + (max_s - min_s) * f
            } else {
                min_s + 1e-9 * k as f64
            }
        })
        .collect();
    let mut counts = vec![0usize; bins];
    for t in &all {
        let f = if log_scale {
            (t / min_s).ln() / (max_s / min_s).ln()
        } else if max_s > min_s {
            (t - min_s) / (max_s - min_s)
        } else {
            0.0
        };
        let b = ((f * bins as f64) as usize).min(bins - 1);
        if let Some(c) = counts.get_mut(b) {
            *c += 1;
        }
    }
    // Median by selection (no sorted copy: 16.8 M pairs at 4,096 ranks).
    let median_s = match pairs {
        0 => 0.0,
        k => {
            let (left, mid, _) = all.select_nth_unstable_by(k / 2, f64::total_cmp);
            let hi = *mid;
            if k % 2 == 1 {
                hi
            } else {
                let lo = left.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (lo + hi) / 2.0
            }
        }
    };
    drop(all);
    // Host × host aggregates.
    let nh = hosts.len();
    let mut hsum = vec![0f64; nh * nh];
    let mut hmax = vec![f64::NAN; nh * nh];
    let mut hcnt = vec![0usize; nh * nh];
    let host_no: Vec<usize> = host_of
        .iter()
        .map(|h| host_idx.get(h).copied().unwrap_or(0))
        .collect();
    for (i, hi) in host_no.iter().enumerate() {
        for (j, hj) in host_no.iter().enumerate() {
            if let Some(t) = measured(i, j) {
                let k = hi * nh + hj;
                hsum[k] += t;
                hcnt[k] += 1;
                hmax[k] = if hmax[k].is_nan() { t } else { hmax[k].max(t) };
            }
        }
    }
    let hmean: Vec<f64> = hsum
        .iter()
        .zip(&hcnt)
        .map(|(s, c)| if *c > 0 { s / *c as f64 } else { f64::NAN })
        .collect();
    let threshold_s = opts.threshold_s.unwrap_or(2.0 * median_s);
    let mut hot_host_pairs: Vec<HostPair> = (0..nh * nh)
        .filter(|k| hcnt[*k] > 0 && hmax[*k] > threshold_s)
        .map(|k| HostPair {
            from_host: hosts[k / nh].clone(),
            to_host: hosts[k % nh].clone(),
            pairs: hcnt[k],
            mean_s: hmean[k],
            max_s: hmax[k],
        })
        .collect();
    hot_host_pairs.sort_by(|a, b| b.max_s.total_cmp(&a.max_s));
    // Slowest pairs: the recorded retests, then the slowest matrix entries not already listed.
    let mut slowest: Vec<SlowPair> = p
        .slow_links
        .iter()
        .map(|s| SlowPair {
            from_rank: s.from_rank,
            to_rank: s.to_rank,
            from_host: host_of.get(s.from_rank).unwrap_or(&"?").to_string(),
            to_host: host_of.get(s.to_rank).unwrap_or(&"?").to_string(),
            time_s: s.time_s,
            retest_time_s: s.retest_time_s,
        })
        .collect();
    if slowest.len() < opts.top_pairs {
        // The slowest `keep` entries, kept by periodic selection (linear time).
        let keep = opts.top_pairs + slowest.len();
        let slower = |a: &(f64, usize, usize), b: &(f64, usize, usize)| {
            b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2))
        };
        let mut cand: Vec<(f64, usize, usize)> = Vec::with_capacity(4 * keep + 1);
        for i in 0..n {
            for j in 0..n {
                if let Some(t) = measured(i, j) {
                    cand.push((t, i, j));
                    if cand.len() > 4 * keep {
                        cand.select_nth_unstable_by(keep, slower);
                        cand.truncate(keep);
                    }
                }
            }
        }
        cand.sort_by(slower);
        for (t, i, j) in cand {
            if slowest.len() >= opts.top_pairs {
                break;
            }
            if slowest.iter().any(|s| s.from_rank == i && s.to_rank == j) {
                continue;
            }
            slowest.push(SlowPair {
                from_rank: i,
                to_rank: j,
                from_host: host_of[i].to_string(),
                to_host: host_of[j].to_string(),
                time_s: t,
                retest_time_s: None,
            });
        }
    }
    // Binned matrix.
    let cells = opts.max_matrix_cells.max(1);
    let bin = n.div_ceil(cells).max(1);
    let side = n.div_ceil(bin);
    let mut mat = vec![f64::NAN; side * side];
    for i in 0..n {
        for j in 0..n {
            if let Some(t) = measured(i, j) {
                let k = (i / bin) * side + j / bin;
                if let Some(c) = mat.get_mut(k) {
                    *c = if c.is_nan() { t } else { c.max(t) };
                }
            }
        }
    }
    Ok(Summary {
        title: opts.title.clone(),
        version: run.version_string(),
        mode: run.mode.clone(),
        num_tasks: n,
        num_messages: run.num_messages,
        message_size: run.message_size,
        all_to_all: run.flags.all_to_all,
        serial: run.flags.serial,
        pairs,
        min_s,
        avg_s,
        max_s,
        median_s,
        a2a: p.a2a.map(|[a, b, c]| (a, b, c)),
        hosts,
        host_boundaries,
        histogram: Histogram {
            edges,
            counts,
            log: log_scale,
        },
        log_scale,
        slowest,
        threshold_s,
        hot_host_pairs,
        host_matrix_max: hmax,
        host_matrix_mean: hmean,
        matrix: (side, bin, mat),
        checks: Vec::new(),
    })
}

/// Parses an SVG (as the PNG renderer does) and returns its size in pixels.
pub fn svg_size(svg: &str) -> Result<(u32, u32), ReportError> {
    let opt = resvg::usvg::Options::default();
    let tree =
        resvg::usvg::Tree::from_str(svg, &opt).map_err(|e| ReportError::Png(e.to_string()))?;
    let size = tree.size().to_int_size();
    Ok((size.width(), size.height()))
}

/// Rasterises the page (pure Rust: resvg/tiny-skia) to PNG bytes, with the
/// embedded font and the system's ([`fonts::database`]).
pub fn render_png(svg: &str) -> Result<Vec<u8>, ReportError> {
    let tree = resvg::usvg::Tree::from_str(svg, &fonts::usvg_options())
        .map_err(|e| ReportError::Png(e.to_string()))?;
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| ReportError::Png(format!("empty page {size:?}")))?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| ReportError::Png(e.to_string()))
}

/// A `side`×`side` matrix (row-major `cells`, NaN = nothing measured) as a
/// PNG with one pixel per cell, coloured like the report's matrix on `scale`
/// (unmeasured cells light grey). The dashboard's pair-matrix image.
pub fn matrix_png(side: usize, cells: &[f64], scale: Scale) -> Result<Vec<u8>, ReportError> {
    let px = u32::try_from(side)
        .ok()
        .filter(|s| *s > 0 && cells.len() == side * side)
        .ok_or_else(|| {
            ReportError::Png(format!("matrix of side {side} with {} cells", cells.len()))
        })?;
    let mut pixmap = resvg::tiny_skia::Pixmap::new(px, px)
        .ok_or_else(|| ReportError::Png(format!("empty matrix {side}")))?;
    for (dst, v) in pixmap.data_mut().chunks_exact_mut(4).zip(cells) {
        let [r, g, b] = if v.is_nan() {
            [0xee, 0xee, 0xee]
        } else {
            ramp_rgb(scale.norm(*v))
        };
        dst.copy_from_slice(&[r, g, b, 255]);
    }
    pixmap
        .encode_png()
        .map_err(|e| ReportError::Png(e.to_string()))
}

/// Width and height of a PNG (decoded, so a broken PNG is an error).
pub fn png_size(png: &[u8]) -> Result<(u32, u32), ReportError> {
    let p =
        resvg::tiny_skia::Pixmap::decode_png(png).map_err(|e| ReportError::Png(e.to_string()))?;
    Ok((p.width(), p.height()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn np16() -> LinkTestRun {
        let p = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/linktest/v1.2p1/np16_a2a_mix/pingpong_results_bin.sion"
        ));
        benchlake_formats::linktest::read_file(p).unwrap()
    }

    #[test]
    fn summary_of_real_file_matches_linktest_stats() {
        let run = np16();
        let s = summarize(&run, &ReportOptions::default()).unwrap();
        assert_eq!(s.pairs, 240);
        // LinkTest's own min/max (stat[0], stat[1]) are the matrix extremes.
        assert_eq!(s.min_s, "3.3657499443506822e-05".parse::<f64>().unwrap());
        assert_eq!(s.max_s, "0.0050112479366362095".parse::<f64>().unwrap());
        assert_eq!(s.histogram.counts.iter().sum::<usize>(), 240);
        // 33.7 µs to 5.01 ms: colours and bins on a log scale.
        assert!(s.log_scale && s.histogram.log);
        assert_eq!(s.histogram.edges.len(), 41);
        assert_eq!(s.histogram.edges[0], s.min_s);
        assert!((s.histogram.edges[40] - s.max_s).abs() < 1e-15);
        assert_eq!(s.hosts, vec!["vm".to_string()]);
        assert_eq!(s.host_boundaries, vec![(0, "vm".to_string())]);
        // The five retested pairs come first, with their retest times.
        assert_eq!(s.slowest.len(), 10);
        assert_eq!((s.slowest[0].from_rank, s.slowest[0].to_rank), (9, 12));
        assert_eq!(
            s.slowest[0].retest_time_s,
            Some("3.2207750336965546e-05".parse::<f64>().unwrap())
        );
        assert!(s.slowest[5].retest_time_s.is_none());
        let svg = render_svg(&s);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // Background, matrix background, 240 cells with tooltips, the legend.
        let bars = s.histogram.counts.iter().filter(|c| **c > 0).count();
        assert_eq!(svg.matches("<rect").count(), 1 + 1 + 240 + 1 + bars);
        assert!(svg.contains(">vm</text>"));
        assert!(svg.contains(">5.01 ms</text>"));
        assert!(svg.contains("<title>9 (vm) → 12 (vm): 5.01 ms (817 kB/s)</title>"));
    }

    #[test]
    fn matrix_png_colours_each_cell_on_the_scale() {
        // 3×3: the slowest cell yellow, the fastest dark violet, NaN grey.
        let cells = [f64::NAN, 1.0, 2.0, 3.0, f64::NAN, 10.0, 5.0, 7.0, f64::NAN];
        let scale = Scale {
            lo: 1.0,
            hi: 10.0,
            log: false,
        };
        let png = matrix_png(3, &cells, scale).unwrap();
        let p = resvg::tiny_skia::Pixmap::decode_png(&png).unwrap();
        assert_eq!((p.width(), p.height()), (3, 3));
        let px = |k: usize| {
            let c = p.pixels()[k];
            [c.red(), c.green(), c.blue()]
        };
        assert_eq!(px(0), [0xee, 0xee, 0xee]);
        assert_eq!(px(1), [68, 1, 84]);
        assert_eq!(px(5), [253, 231, 37]);
        assert_eq!(px(5), ramp_rgb(1.0));
        assert!(matrix_png(2, &cells, scale).is_err());
        assert!(matrix_png(0, &[], scale).is_err());
    }

    #[test]
    fn host_aggregates_and_binning() {
        let mut run = np16();
        for (r, info) in run.ranks.iter_mut().enumerate() {
            info.hostname = format!("n{}", r / 8);
        }
        let opts = ReportOptions {
            max_matrix_cells: 4,
            threshold_s: Some(0.004),
            ..Default::default()
        };
        let s = summarize(&run, &opts).unwrap();
        assert_eq!(s.hosts, vec!["n0".to_string(), "n1".to_string()]);
        assert_eq!(s.host_boundaries, vec![(0, "n0".into()), (8, "n1".into())]);
        let p = &run.permutations[0];
        let want_max = |a: usize, b: usize| {
            let mut m = f64::NEG_INFINITY;
            for i in a * 8..a * 8 + 8 {
                for j in b * 8..b * 8 + 8 {
                    if i != j {
                        m = m.max(p.times[i * 16 + j]);
                    }
                }
            }
            m
        };
        for a in 0..2 {
            for b in 0..2 {
                assert_eq!(s.host_matrix_max[a * 2 + b], want_max(a, b));
            }
        }
        // 9 → 12 (5.01 ms) and 11 → 7 (4.23 ms) exceed 4 ms: hosts n1→n1 and n1→n0.
        let names: Vec<(&str, &str)> = s
            .hot_host_pairs
            .iter()
            .map(|h| (h.from_host.as_str(), h.to_host.as_str()))
            .collect();
        assert_eq!(names, vec![("n1", "n1"), ("n1", "n0")]);
        assert_eq!((s.matrix.0, s.matrix.1), (4, 4));
        assert_eq!(
            s.matrix.2[2 * 4 + 3],
            (8..12)
                .flat_map(|i| (12..16).map(move |j| (i, j)))
                .map(|(i, j)| p.times[i * 16 + j])
                .fold(f64::NEG_INFINITY, f64::max)
        );
        assert!(render_svg(&s).contains("Host × host: slowest pair"));
        for a in 0..2 {
            for b in 0..2 {
                let k = a * 2 + b;
                let (mut sum, mut cnt) = (0.0, 0);
                for i in a * 8..a * 8 + 8 {
                    for j in b * 8..b * 8 + 8 {
                        if i != j {
                            sum += p.times[i * 16 + j];
                            cnt += 1;
                        }
                    }
                }
                assert!((s.host_matrix_mean[k] - sum / f64::from(cnt)).abs() < 1e-15);
            }
        }
        assert!(
            summarize(
                &run,
                &ReportOptions {
                    permutation: 3,
                    ..Default::default()
                }
            )
            .is_err()
        );
    }
}
