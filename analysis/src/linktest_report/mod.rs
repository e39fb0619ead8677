//! The LinkTest report page: from a decoded run (`benchlake_formats::linktest`)
//! to one SVG with the rank×rank time matrix (colour map with host boundaries
//! and names), a histogram of pair times, a summary table (min/avg/max with
//! bandwidth, slowest pairs with their retests, host pairs above a threshold)
//! and a host×host aggregate matrix.
//!
//! [`summarize`] computes every number the page shows, so tests and the CLI can
//! use them without parsing SVG; [`render_svg`] only draws a [`Summary`].
use std::collections::HashMap;
use std::fmt::Write as _;

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
    /// Histogram: lower edge of the first bin, bin width (s), counts.
    pub histogram: (f64, f64, Vec<usize>),
    /// The slowest pairs (recorded retests first, then the slowest matrix entries).
    pub slowest: Vec<SlowPair>,
    /// Threshold used for `hot_host_pairs` (s).
    pub threshold_s: f64,
    /// Host pairs whose maximum exceeds the threshold, slowest first.
    pub hot_host_pairs: Vec<HostPair>,
    /// Host×host maximum times (`hosts.len()²`, row = initiating host; NaN = no pair).
    pub host_matrix_max: Vec<f64>,
    /// Binned rank×rank matrix side and cells (maximum per bin; NaN = nothing measured).
    pub matrix: (usize, usize, Vec<f64>),
    /// The run's `checks` verdicts (empty when none were recorded or the report
    /// is drawn from a file).
    pub checks: Vec<Check>,
}

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
    let host_of: Vec<&str> = (0..n)
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
    let mut sorted = all.clone();
    sorted.sort_by(f64::total_cmp);
    let median_s = match pairs {
        0 => 0.0,
        k if k % 2 == 1 => sorted[k / 2],
        k => (sorted[k / 2 - 1] + sorted[k / 2]) / 2.0,
    };
    let (min_s, max_s) = if pairs == 0 {
        (0.0, 0.0)
    } else {
        (min_s, max_s)
    };
    let bins = opts.histogram_bins.max(1);
    let width = if max_s > min_s {
        (max_s - min_s) / bins as f64
    } else {
        1e-9
    };
    let mut counts = vec![0usize; bins];
    for t in &all {
        let b = (((t - min_s) / width) as usize).min(bins - 1);
        if let Some(c) = counts.get_mut(b) {
            *c += 1;
        }
    }
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
    let threshold_s = opts.threshold_s.unwrap_or(2.0 * median_s);
    let mut hot_host_pairs: Vec<HostPair> = (0..nh * nh)
        .filter(|k| hcnt[*k] > 0 && hmax[*k] > threshold_s)
        .map(|k| HostPair {
            from_host: hosts[k / nh].clone(),
            to_host: hosts[k % nh].clone(),
            pairs: hcnt[k],
            mean_s: hsum[k] / hcnt[k] as f64,
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
        let mut cand: Vec<(f64, usize, usize)> = Vec::new();
        for i in 0..n {
            for j in 0..n {
                if let Some(t) = measured(i, j) {
                    cand.push((t, i, j));
                }
            }
        }
        cand.sort_by(|a, b| b.0.total_cmp(&a.0));
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
        histogram: (min_s, width, counts),
        slowest,
        threshold_s,
        hot_host_pairs,
        host_matrix_max: hmax,
        matrix: (side, bin, mat),
        checks: Vec::new(),
    })
}

/// Colour for `v` in [0, 1]: a perceptually ordered ramp (dark blue → green → yellow),
/// close to viridis.
fn ramp(v: f64) -> String {
    const STOPS: [(f64, [u8; 3]); 5] = [
        (0.0, [68, 1, 84]),
        (0.25, [59, 82, 139]),
        (0.5, [33, 145, 140]),
        (0.75, [94, 201, 98]),
        (1.0, [253, 231, 37]),
    ];
    let v = if v.is_finite() {
        v.clamp(0.0, 1.0)
    } else {
        0.0
    };
    for w in STOPS.windows(2) {
        let (a, ca) = w[0];
        let (b, cb) = w[1];
        if v <= b {
            let f = (v - a) / (b - a);
            let mix =
                |x: u8, y: u8| (f64::from(x) + f * (f64::from(y) - f64::from(x))).round() as u8;
            return format!(
                "#{:02x}{:02x}{:02x}",
                mix(ca[0], cb[0]),
                mix(ca[1], cb[1]),
                mix(ca[2], cb[2])
            );
        }
    }
    "#fde725".into()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn us(t: f64) -> String {
    format!("{:.3} µs", t * 1e6)
}

fn mib_s(size: u64, t: f64) -> String {
    if t > 0.0 {
        format!("{:.2} MiB/s", size as f64 / t / 1_048_576.0)
    } else {
        "-".into()
    }
}

/// Page width of the report (px; also the PNG's width).
pub const PAGE_W: u32 = 1400;
/// Page height of the report (px; also the PNG's height).
pub const PAGE_H: u32 = 1500;

/// Font database for [`render_png`]: the system's fonts. Without any installed
/// font the PNG has no text (the SVG is unaffected).
fn fonts() -> std::sync::Arc<resvg::usvg::fontdb::Database> {
    static DB: std::sync::OnceLock<std::sync::Arc<resvg::usvg::fontdb::Database>> =
        std::sync::OnceLock::new();
    DB.get_or_init(|| {
        let mut db = resvg::usvg::fontdb::Database::new();
        db.load_system_fonts();
        if db.is_empty() {
            tracing::warn!("no system fonts found: the PNG report will have no text");
        }
        std::sync::Arc::new(db)
    })
    .clone()
}

/// Parses an SVG (as the PNG renderer does) and returns its size in pixels.
pub fn svg_size(svg: &str) -> Result<(u32, u32), ReportError> {
    let opt = resvg::usvg::Options::default();
    let tree =
        resvg::usvg::Tree::from_str(svg, &opt).map_err(|e| ReportError::Png(e.to_string()))?;
    let size = tree.size().to_int_size();
    Ok((size.width(), size.height()))
}

/// Rasterises the page (pure Rust: resvg/tiny-skia) to PNG bytes.
pub fn render_png(svg: &str) -> Result<Vec<u8>, ReportError> {
    let opt = resvg::usvg::Options {
        fontdb: fonts(),
        font_family: "DejaVu Sans".into(),
        ..Default::default()
    };
    let tree =
        resvg::usvg::Tree::from_str(svg, &opt).map_err(|e| ReportError::Png(e.to_string()))?;
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

/// Width and height of a PNG (decoded, so a broken PNG is an error).
pub fn png_size(png: &[u8]) -> Result<(u32, u32), ReportError> {
    let p =
        resvg::tiny_skia::Pixmap::decode_png(png).map_err(|e| ReportError::Png(e.to_string()))?;
    Ok((p.width(), p.height()))
}

/// Draws the page.
pub fn render_svg(s: &Summary) -> String {
    let mut o = String::new();
    let (w, h) = (PAGE_W, PAGE_H);
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="20" y="30" font-size="20" font-weight="bold">{} — LinkTest {} ({}), {} ranks on {} hosts</text>"#,
        esc(&s.title),
        esc(&s.version),
        esc(&s.mode),
        s.num_tasks,
        s.hosts.len()
    );
    // Matrix.
    let (mx, my, msz) = (140.0, 90.0, 700.0);
    let (side, bin, cells) = (&s.matrix.0, &s.matrix.1, &s.matrix.2);
    let cell = msz / (*side).max(1) as f64;
    let span = (s.max_s - s.min_s).max(f64::MIN_POSITIVE);
    let _ = writeln!(
        o,
        r#"<text x="{mx}" y="{}" font-size="14">time per message, initiating rank (rows) → partner (columns){}</text>"#,
        my - 10.0,
        if *bin > 1 {
            format!(", {bin}×{bin} ranks per cell (max)")
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        o,
        r##"<rect x="{mx}" y="{my}" width="{msz}" height="{msz}" fill="#eeeeee"/>"##
    );
    for i in 0..*side {
        for j in 0..*side {
            let Some(v) = cells.get(i * side + j).copied().filter(|v| !v.is_nan()) else {
                continue;
            };
            let _ = writeln!(
                o,
                r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{}"/>"#,
                mx + j as f64 * cell,
                my + i as f64 * cell,
                cell + 0.05,
                cell + 0.05,
                ramp((v - s.min_s) / span)
            );
        }
    }
    // Host boundaries and names.
    let rank_px = msz / s.num_tasks.max(1) as f64;
    let label_every = s.host_boundaries.len().div_ceil(40).max(1);
    for (k, (r, host)) in s.host_boundaries.iter().enumerate() {
        let pos = *r as f64 * rank_px;
        if *r > 0 {
            let _ = writeln!(
                o,
                r#"<line x1="{mx}" y1="{:.2}" x2="{:.2}" y2="{:.2}" stroke="white" stroke-width="1"/>"#,
                my + pos,
                mx + msz,
                my + pos
            );
            let _ = writeln!(
                o,
                r#"<line x1="{:.2}" y1="{my}" x2="{:.2}" y2="{:.2}" stroke="white" stroke-width="1"/>"#,
                mx + pos,
                mx + pos,
                my + msz
            );
        }
        if k % label_every == 0 {
            let _ = writeln!(
                o,
                r#"<text x="{:.2}" y="{:.2}" text-anchor="end" font-size="10">{}</text>"#,
                mx - 4.0,
                my + pos + 10.0,
                esc(host)
            );
        }
    }
    // Colour legend.
    let (lx, ly) = (mx + msz + 20.0, my);
    for k in 0..100 {
        let _ = writeln!(
            o,
            r#"<rect x="{lx}" y="{:.2}" width="20" height="{:.2}" fill="{}"/>"#,
            ly + msz - (k + 1) as f64 * msz / 100.0,
            msz / 100.0 + 0.5,
            ramp(k as f64 / 99.0)
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}">{}</text>"#,
        lx + 26.0,
        ly + 10.0,
        us(s.max_s)
    );
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}">{}</text>"#,
        lx + 26.0,
        ly + msz,
        us(s.min_s)
    );

    // Histogram.
    let (hx, hy, hw, hh) = (140.0, 850.0, 600.0, 250.0);
    let (lo, width, counts) = (&s.histogram.0, &s.histogram.1, &s.histogram.2);
    let top = counts.iter().copied().max().unwrap_or(1).max(1);
    let _ = writeln!(
        o,
        r#"<text x="{hx}" y="{}" font-size="14">histogram of pair times ({} pairs)</text>"#,
        hy - 10.0,
        s.pairs
    );
    let bw = hw / counts.len().max(1) as f64;
    for (k, c) in counts.iter().enumerate() {
        let bh = hh * *c as f64 / top as f64;
        let _ = writeln!(
            o,
            r##"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="#3b528b"><title>{}–{}: {}</title></rect>"##,
            hx + k as f64 * bw,
            hy + hh - bh,
            (bw - 1.0).max(0.5),
            bh,
            us(lo + k as f64 * width),
            us(lo + (k + 1) as f64 * width),
            c
        );
    }
    let _ = writeln!(
        o,
        r#"<line x1="{hx}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        hy + hh,
        hx + hw,
        hy + hh
    );
    let _ = writeln!(
        o,
        r#"<text x="{hx}" y="{}">{}</text>"#,
        hy + hh + 15.0,
        us(*lo)
    );
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
        hx + hw,
        hy + hh + 15.0,
        us(lo + width * counts.len() as f64)
    );
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" text-anchor="end">{top}</text>"#,
        hx - 5.0,
        hy + 10.0
    );

    // Summary table.
    let (tx, mut ty) = (900.0, 850.0);
    let mut row = |o: &mut String, k: &str, v: String| {
        let _ = writeln!(
            o,
            r#"<text x="{tx}" y="{ty}">{}</text><text x="{}" y="{ty}">{}</text>"#,
            esc(k),
            tx + 170.0,
            esc(&v)
        );
        ty += 16.0;
    };
    row(&mut o, "message length", format!("{} B", s.message_size));
    row(&mut o, "messages", s.num_messages.to_string());
    row(
        &mut o,
        "tasks / hosts",
        format!("{} / {}", s.num_tasks, s.hosts.len()),
    );
    row(
        &mut o,
        "order",
        if s.serial {
            "serial".into()
        } else {
            "parallel".into()
        },
    );
    // The exact values (seconds, shortest round-trip form) ride along as
    // tooltips and data attributes, for tools that read the page.
    for (k, v) in [
        ("min time", s.min_s),
        ("avg time", s.avg_s),
        ("max time", s.max_s),
    ] {
        let _ = writeln!(
            o,
            r#"<text x="{tx}" y="{ty}">{k}</text><text x="{}" y="{ty}" data-seconds="{v:e}">{} ({})<title>{v:e} s</title></text>"#,
            tx + 170.0,
            us(v),
            esc(&mib_s(s.message_size, v))
        );
        ty += 16.0;
    }
    let mut row = |o: &mut String, k: &str, v: String| {
        let _ = writeln!(
            o,
            r#"<text x="{tx}" y="{ty}">{}</text><text x="{}" y="{ty}">{}</text>"#,
            esc(k),
            tx + 170.0,
            esc(&v)
        );
        ty += 16.0;
    };
    row(&mut o, "median time", us(s.median_s));
    match s.a2a {
        Some((a, b, c)) => row(
            &mut o,
            "all-to-all min/avg/max",
            format!("{} / {} / {}", us(a), us(b), us(c)),
        ),
        None => row(&mut o, "all-to-all", "not run".into()),
    }
    ty += 10.0;
    let _ = writeln!(
        o,
        r#"<text x="{tx}" y="{ty}" font-weight="bold">slowest pairs (retest)</text>"#
    );
    ty += 16.0;
    for p in &s.slowest {
        let _ = writeln!(
            o,
            r#"<text x="{tx}" y="{ty}" font-size="11">{} ({}) → {} ({}): {}{}</text>"#,
            p.from_rank,
            esc(&p.from_host),
            p.to_rank,
            esc(&p.to_host),
            us(p.time_s),
            p.retest_time_s
                .map(|r| format!(", retest {}", us(r)))
                .unwrap_or_default()
        );
        ty += 14.0;
    }
    ty += 10.0;
    let _ = writeln!(
        o,
        r#"<text x="{tx}" y="{ty}" font-weight="bold">host pairs with max above {}: {}</text>"#,
        us(s.threshold_s),
        s.hot_host_pairs.len()
    );
    ty += 16.0;
    for hp in s.hot_host_pairs.iter().take(12) {
        let _ = writeln!(
            o,
            r#"<text x="{tx}" y="{ty}" font-size="11">{} → {}: max {}, mean {} ({} pairs)</text>"#,
            esc(&hp.from_host),
            esc(&hp.to_host),
            us(hp.max_s),
            us(hp.mean_s),
            hp.pairs
        );
        ty += 14.0;
    }

    // Checks of the run.
    if !s.checks.is_empty() {
        let (cx, mut cy) = (140.0, 1150.0);
        let failed = s.checks.iter().filter(|c| c.status != "PASS").count();
        let _ = writeln!(
            o,
            r#"<text x="{cx}" y="{cy}" font-size="14" font-weight="bold">checks: {} of {} not passed</text>"#,
            failed,
            s.checks.len()
        );
        cy += 18.0;
        for c in s.checks.iter().take(18) {
            let colour = match c.status.as_str() {
                "PASS" => "#1a7f37",
                "FAIL" => "#cf222e",
                _ => "#9a6700",
            };
            let unit = c.unit.as_deref().unwrap_or("");
            let fig = |v: Option<f64>| v.map(|v| format!("{v} {unit}")).unwrap_or("-".into());
            let _ = writeln!(
                o,
                r#"<text x="{cx}" y="{cy}" font-size="11"><tspan fill="{colour}" font-weight="bold">{}</tspan> {}: {} (reference {}){}</text>"#,
                esc(&c.status),
                esc(&c.check),
                esc(&fig(c.value)),
                esc(&fig(c.reference)),
                c.message
                    .as_deref()
                    .map(|m| format!(" — {}", esc(m)))
                    .unwrap_or_default()
            );
            cy += 14.0;
        }
    }

    // Host × host matrix.
    let nh = s.hosts.len();
    if nh > 1 {
        let (gx, gy, gs) = (1000.0, 90.0, 360.0);
        let c = gs / nh as f64;
        let _ = writeln!(
            o,
            r#"<text x="{gx}" y="{}" font-size="14">host × host maximum</text>"#,
            gy - 10.0
        );
        for a in 0..nh {
            for b in 0..nh {
                let Some(v) = s
                    .host_matrix_max
                    .get(a * nh + b)
                    .copied()
                    .filter(|v| !v.is_nan())
                else {
                    continue;
                };
                let _ = writeln!(
                    o,
                    r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{}"><title>{} → {}: {}</title></rect>"#,
                    gx + b as f64 * c,
                    gy + a as f64 * c,
                    c + 0.05,
                    c + 0.05,
                    ramp((v - s.min_s) / span),
                    esc(&s.hosts[a]),
                    esc(&s.hosts[b]),
                    us(v)
                );
            }
        }
    }
    o.push_str("</svg>\n");
    o
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
        assert_eq!(s.histogram.2.iter().sum::<usize>(), 240);
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
        // Background, matrix background, 240 cells, 100 legend steps, 40 bars.
        assert_eq!(svg.matches("<rect").count(), 1 + 1 + 240 + 100 + 40);
        assert!(svg.contains(">vm</text>"));
        assert!(svg.contains("5011.248 µs"));
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
        assert!(render_svg(&s).contains("host × host maximum"));
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
