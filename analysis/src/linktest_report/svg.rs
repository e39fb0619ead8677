//! Drawing the page. Layout (px, page [`PAGE_W`] wide, as tall as its content):
//!
//! ```text
//!  title (shortened to fit) / run line
//!  ┌ rank × rank matrix (640², ticks, hosts) ┐ legend   summary table
//!  │                                         │          slowest pairs
//!  └─────────────────────────────────────────┘          host pairs above threshold
//!  histogram (time axis, threshold)                    host × host matrix
//!  checks
//! ```
//!
//! Every text is measured with the embedded font ([`super::fonts`]) and
//! shortened with an ellipsis where it would leave its column; the tests parse
//! the page with usvg and check that no text leaves the page or overlaps another.
use std::fmt::Write as _;

use super::fmt;
use super::fonts::{Keep, fit, text_width};
use super::{Check, Summary};

/// Page width of the report (px; also the PNG's width). The height follows the content.
pub const PAGE_W: u32 = 1400;

const W: f64 = PAGE_W as f64;
/// Outer margin.
const M: f64 = 24.0;
/// Rank × rank matrix: left edge, top edge, side.
const MX: f64 = 194.0;
const MY: f64 = 156.0;
const MSZ: f64 = 640.0;
/// Right column: left edge and width.
const RX: f64 = 956.0;
const RW: f64 = W - M - RX;
/// Tick label and host label sizes.
const TICK_FONT: f64 = 10.0;
const LABEL_FONT: f64 = 10.0;
/// Minimum distance between two labels along an axis.
const LABEL_GAP: f64 = 13.0;
/// Longest host label below a matrix (rotated), px.
const BOTTOM_LABEL_MAX: f64 = 96.0;
/// Host × host matrices above this many hosts are binned.
const MAX_HOST_CELLS: usize = 128;
/// Matrices up to this many cells per side get one element with a tooltip per cell.
const TOOLTIP_CELLS: usize = 64;
const GREY: &str = "#555555";
const EMPTY: &str = "#eeeeee";

/// Colour scale from the fastest to the slowest pair (logarithmic when `log`);
/// the dashboard colours its matrix image with the same scale and ramp.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    /// Value at the dark end.
    pub lo: f64,
    /// Value at the bright end.
    pub hi: f64,
    /// Logarithmic between them.
    pub log: bool,
}

impl Scale {
    /// The scale of a report: fastest to slowest pair.
    pub fn of(s: &Summary) -> Self {
        Self {
            lo: s.min_s,
            hi: s.max_s,
            log: s.log_scale,
        }
    }
    /// Position of `v` in [0, 1].
    pub fn norm(&self, v: f64) -> f64 {
        let f = if self.log && self.lo > 0.0 && v > 0.0 {
            (v / self.lo).ln() / (self.hi / self.lo).ln()
        } else if self.hi > self.lo {
            (v - self.lo) / (self.hi - self.lo)
        } else {
            0.0
        };
        if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }
    /// The value at position `f`.
    pub fn value(&self, f: f64) -> f64 {
        if self.log && self.lo > 0.0 {
            self.lo * (self.hi / self.lo).powf(f)
        } else {
            self.lo + (self.hi - self.lo) * f
        }
    }
}

/// Viridis-like ramp stops (dark blue → green → yellow).
const STOPS: [(f64, [u8; 3]); 5] = [
    (0.0, [68, 1, 84]),
    (0.25, [59, 82, 139]),
    (0.5, [33, 145, 140]),
    (0.75, [94, 201, 98]),
    (1.0, [253, 231, 37]),
];

/// Colour for `v` in [0, 1].
fn ramp(v: f64) -> String {
    let [r, g, b] = ramp_rgb(v);
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// Colour for `v` in [0, 1] as RGB (the ramp of the report's matrices).
pub fn ramp_rgb(v: f64) -> [u8; 3] {
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
            return [mix(ca[0], cb[0]), mix(ca[1], cb[1]), mix(ca[2], cb[2])];
        }
    }
    [253, 231, 37]
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Text anchor.
#[derive(Clone, Copy, PartialEq, Eq)]
enum A {
    Start,
    Middle,
    End,
}

/// One `<text>`: `extra` carries further attributes (leading space included).
fn text(o: &mut String, x: f64, y: f64, size: f64, anchor: A, extra: &str, s: &str) {
    let anchor = match anchor {
        A::Start => "",
        A::Middle => r#" text-anchor="middle""#,
        A::End => r#" text-anchor="end""#,
    };
    let _ = writeln!(
        o,
        r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}"{anchor}{extra}>{}</text>"#,
        esc(s)
    );
}

/// A panel heading and its note line below it; returns the y below both.
fn heading(o: &mut String, x: f64, y: f64, width: f64, title: &str, note: &str) -> f64 {
    text(
        o,
        x,
        y,
        15.0,
        A::Start,
        r#" font-weight="bold""#,
        &fit(title, 15.0, true, width, Keep::Start),
    );
    if note.is_empty() {
        return y + 10.0;
    }
    text(
        o,
        x,
        y + 17.0,
        11.0,
        A::Start,
        &format!(r#" fill="{GREY}""#),
        &fit(note, 11.0, false, width, Keep::Start),
    );
    y + 27.0
}

/// A "nice" step (1, 2, 5 × 10^k) giving at most `max_ticks` ticks over `n`.
fn nice_step(n: usize, max_ticks: usize) -> usize {
    let mut base = 1usize;
    loop {
        for m in [1, 2, 5] {
            let step = base * m;
            if n.div_ceil(step) <= max_ticks.max(1) {
                return step;
            }
        }
        base = base.saturating_mul(10);
    }
}

/// A block along a matrix axis: pixel start and end (from the matrix edge) and its label.
struct Block {
    start: f64,
    end: f64,
    label: String,
    tooltip: String,
}

/// Greedily keeps the blocks whose label centre is at least [`LABEL_GAP`]
/// after the previous kept one.
fn thin(blocks: &[Block]) -> Vec<&Block> {
    let mut last = f64::NEG_INFINITY;
    let mut out = Vec::new();
    for b in blocks {
        let mid = (b.start + b.end) / 2.0;
        if mid - last >= LABEL_GAP {
            out.push(b);
            last = mid;
        }
    }
    out
}

/// Host labels of a matrix at (`x`, `y`) of side `size`: to the left (right-aligned
/// at `left_edge`, at most `left_w` wide) and below (rotated, or one horizontal
/// label when there is a single block). With `lines`, boundary lines between
/// blocks when they are on average at least 16 px apart (closer, they would
/// hide the cells). Returns the y of the
/// lowest label.
#[allow(clippy::too_many_arguments)]
fn block_labels(
    o: &mut String,
    x: f64,
    y: f64,
    size: f64,
    blocks: &[Block],
    left_edge: f64,
    left_w: f64,
    class: &str,
    lines: bool,
) -> f64 {
    let avg = size / blocks.len().max(1) as f64;
    if lines && blocks.len() > 1 && avg >= 16.0 {
        let _ = writeln!(
            o,
            r#"<g stroke="white" stroke-width="1" stroke-opacity="0.7">"#
        );
        for b in blocks.iter().skip(1) {
            let _ = writeln!(
                o,
                r#"<line x1="{x:.1}" y1="{:.2}" x2="{:.1}" y2="{:.2}"/><line x1="{:.2}" y1="{y:.1}" x2="{:.2}" y2="{:.1}"/>"#,
                y + b.start,
                x + size,
                y + b.start,
                x + b.start,
                x + b.start,
                y + size
            );
        }
        let _ = writeln!(o, "</g>");
    }
    let shown = thin(blocks);
    let mut bottom = y + size;
    for b in &shown {
        let mid = (b.start + b.end) / 2.0;
        let tip = if b.tooltip.is_empty() {
            String::new()
        } else {
            format!("<title>{}</title>", esc(&b.tooltip))
        };
        let label = fit(&b.label, LABEL_FONT, false, left_w, Keep::Start);
        let _ = writeln!(
            o,
            r#"<text class="{class}" x="{:.1}" y="{:.1}" font-size="{LABEL_FONT}" text-anchor="end">{}{tip}</text>"#,
            left_edge,
            y + mid + 3.5,
            esc(&label)
        );
        // A bracket beside the label showing the block's extent.
        if b.end - b.start >= 8.0 && blocks.len() > 1 {
            let _ = writeln!(
                o,
                r##"<line x1="{:.1}" y1="{:.2}" x2="{:.1}" y2="{:.2}" stroke="#999999"/>"##,
                left_edge + 4.0,
                y + b.start + 1.5,
                left_edge + 4.0,
                y + b.end - 1.5
            );
        }
    }
    if blocks.len() == 1 {
        let label = fit(&blocks[0].label, LABEL_FONT, false, size, Keep::Start);
        let by = y + size + 16.0;
        let _ = writeln!(
            o,
            r#"<text class="{class}" x="{:.1}" y="{by:.1}" font-size="{LABEL_FONT}" text-anchor="middle">{}</text>"#,
            x + size / 2.0,
            esc(&label)
        );
        return by + 3.0;
    }
    for b in &shown {
        let mid = (b.start + b.end) / 2.0;
        let label = fit(&b.label, LABEL_FONT, false, BOTTOM_LABEL_MAX, Keep::Start);
        let (lx, ly) = (x + mid + 3.5, y + size + 5.0);
        let _ = writeln!(
            o,
            r#"<text class="{class}" x="{lx:.1}" y="{ly:.1}" font-size="{LABEL_FONT}" text-anchor="end" transform="rotate(-90 {lx:.1} {ly:.1})">{}</text>"#,
            esc(&label)
        );
        bottom = bottom.max(ly + text_width(&label, LABEL_FONT, false));
    }
    bottom
}

/// Cells of a `side`² matrix at (`x`, `y`), `size` px wide. NaN cells are left
/// empty (the background shows). Up to [`TOOLTIP_CELLS`] per side every cell is
/// a `<rect>` with a tooltip; above, cells are drawn as one path per colour
/// (64 levels, runs along a row merged) so a 256² matrix stays a small file.
#[allow(clippy::too_many_arguments)]
fn cells(
    o: &mut String,
    x: f64,
    y: f64,
    size: f64,
    side: usize,
    values: &[f64],
    scale: Scale,
    tooltip: &dyn Fn(usize, usize, f64) -> String,
) {
    let _ = writeln!(
        o,
        r#"<rect x="{x}" y="{y}" width="{size}" height="{size}" fill="{EMPTY}"/>"#
    );
    let cell = size / side.max(1) as f64;
    if side <= TOOLTIP_CELLS {
        // Without anti-aliasing: no light seams between neighbouring cells.
        let _ = writeln!(o, r#"<g shape-rendering="crispEdges">"#);
        for i in 0..side {
            for j in 0..side {
                let Some(v) = values.get(i * side + j).copied().filter(|v| !v.is_nan()) else {
                    continue;
                };
                let _ = writeln!(
                    o,
                    r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{}"><title>{}</title></rect>"#,
                    x + j as f64 * cell,
                    y + i as f64 * cell,
                    cell + 0.05,
                    cell + 0.05,
                    ramp(scale.norm(v)),
                    esc(&tooltip(i, j, v))
                );
            }
        }
        let _ = writeln!(o, "</g>");
        return;
    }
    const LEVELS: usize = 64;
    let mut paths = vec![String::new(); LEVELS];
    for i in 0..side {
        let mut j = 0;
        while j < side {
            let level = |j: usize| {
                values
                    .get(i * side + j)
                    .copied()
                    .filter(|v| !v.is_nan())
                    .map(|v| {
                        ((scale.norm(v) * (LEVELS - 1) as f64).round() as usize).min(LEVELS - 1)
                    })
            };
            let Some(l) = level(j) else {
                j += 1;
                continue;
            };
            let mut k = j + 1;
            while k < side && level(k) == Some(l) {
                k += 1;
            }
            let _ = write!(paths[l], "M{j} {i}h{}v1h-{}z", k - j, k - j);
            j = k;
        }
    }
    let _ = writeln!(
        o,
        r#"<g transform="translate({x} {y}) scale({cell})" shape-rendering="crispEdges">"#
    );
    for (l, d) in paths.iter().enumerate() {
        if !d.is_empty() {
            let _ = writeln!(
                o,
                r#"<path fill="{}" d="{d}"/>"#,
                ramp(l as f64 / (LEVELS - 1) as f64)
            );
        }
    }
    let _ = writeln!(o, "</g>");
}

/// Rank ticks along the top and the left of the rank matrix.
fn rank_ticks(o: &mut String, n: usize) {
    let rank_px = MSZ / n.max(1) as f64;
    let step = nice_step(n, (MSZ / 40.0) as usize);
    let mut ticks: Vec<usize> = (0..n).step_by(step).collect();
    // The last rank too, when it is not too close to the previous tick.
    if let Some(&last) = ticks.last()
        && n > 1
        && last != n - 1
        && ((n - 1 - last) as f64) * rank_px >= 30.0
    {
        ticks.push(n - 1);
    }
    let _ = writeln!(o, r##"<g stroke="#777777">"##);
    for r in &ticks {
        let p = (*r as f64 + 0.5) * rank_px;
        let _ = writeln!(
            o,
            r#"<line x1="{:.2}" y1="{MY}" x2="{:.2}" y2="{}"/><line x1="{MX}" y1="{:.2}" x2="{}" y2="{:.2}"/>"#,
            MX + p,
            MX + p,
            MY - 4.0,
            MY + p,
            MX - 4.0,
            MY + p
        );
    }
    let _ = writeln!(o, "</g>");
    for r in &ticks {
        let p = (*r as f64 + 0.5) * rank_px;
        let _ = writeln!(
            o,
            r#"<text class="rank" x="{:.2}" y="{:.1}" font-size="{TICK_FONT}" text-anchor="middle">{r}</text>"#,
            MX + p,
            MY - 7.0
        );
        let _ = writeln!(
            o,
            r#"<text class="rank" x="{:.1}" y="{:.2}" font-size="{TICK_FONT}" text-anchor="end">{r}</text>"#,
            MX - 7.0,
            MY + p + 3.5
        );
    }
}

/// The colour legend at (`x`, `y`), `h` tall; labels to its right.
fn legend(o: &mut String, x: f64, y: f64, h: f64, scale: Scale) {
    let _ = writeln!(
        o,
        r#"<defs><linearGradient id="ramp" x1="0" y1="1" x2="0" y2="0">{}</linearGradient></defs>"#,
        STOPS
            .iter()
            .map(|(f, c)| format!(
                r##"<stop offset="{f}" stop-color="#{:02x}{:02x}{:02x}"/>"##,
                c[0], c[1], c[2]
            ))
            .collect::<String>()
    );
    let _ = writeln!(
        o,
        r#"<rect x="{x}" y="{y}" width="14" height="{h}" fill="url(#ramp)"/>"#
    );
    for k in 0..=4 {
        let f = k as f64 / 4.0;
        let ty = y + h - f * h;
        let _ = writeln!(
            o,
            r##"<line x1="{}" y1="{ty:.1}" x2="{}" y2="{ty:.1}" stroke="#333333"/>"##,
            x + 14.0,
            x + 18.0
        );
        text(
            o,
            x + 21.0,
            ty + 3.5,
            TICK_FONT,
            A::Start,
            "",
            &fmt::time(scale.value(f)),
        );
    }
    text(
        o,
        x,
        y - 22.0,
        TICK_FONT,
        A::Start,
        &format!(r#" fill="{GREY}""#),
        "time/msg",
    );
    if scale.log {
        text(
            o,
            x,
            y + h + 16.0,
            TICK_FONT,
            A::Start,
            &format!(r#" fill="{GREY}""#),
            "log scale",
        );
    }
}

/// A two-column key/value row of the summary table.
fn kv(o: &mut String, y: &mut f64, k: &str, v: &str, extra: &str) {
    let vx = RX + 130.0;
    text(o, RX, *y, 12.0, A::Start, &format!(r#" fill="{GREY}""#), k);
    text(
        o,
        vx,
        *y,
        12.0,
        A::Start,
        extra,
        &fit(v, 12.0, false, W - M - vx, Keep::Start),
    );
    *y += 18.0;
}

/// A table row of right-aligned columns after a left text column.
/// `cols`: (right edge, text); the first text fills up to `first_w`.
fn row(o: &mut String, y: f64, first: &str, first_w: f64, cols: &[(f64, String)], extra: &str) {
    text(
        o,
        RX,
        y,
        11.0,
        A::Start,
        extra,
        &fit(first, 11.0, false, first_w, Keep::Start),
    );
    for (x, s) in cols {
        text(o, *x, y, 11.0, A::End, extra, s);
    }
}

/// Draws the page.
pub fn render_svg(s: &Summary) -> String {
    let mut o = String::new();
    let scale = Scale::of(s);
    let n = s.num_tasks;

    // Header.
    text(
        &mut o,
        M,
        38.0,
        20.0,
        A::Start,
        r#" class="title" font-weight="bold""#,
        &fit(&s.title, 20.0, true, W - 2.0 * M, Keep::End),
    );
    let plural =
        |k: usize, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
    let run_line = format!(
        "LinkTest {} · {} · {} on {} · {} × {} per pair · {}{}",
        s.version,
        s.mode,
        plural(n, "rank", "ranks"),
        plural(s.hosts.len(), "host", "hosts"),
        fmt::int(s.num_messages),
        fmt::size(s.message_size),
        if s.serial { "serial" } else { "parallel" },
        if s.all_to_all { " · all-to-all" } else { "" },
    );
    text(
        &mut o,
        M,
        62.0,
        13.0,
        A::Start,
        r##" class="subtitle" fill="#333333""##,
        &fit(&run_line, 13.0, false, W - 2.0 * M, Keep::Start),
    );
    let _ = writeln!(
        o,
        r##"<line class="page" x1="{M}" y1="76" x2="{}" y2="76" stroke="#cccccc"/>"##,
        W - M
    );

    // Rank × rank matrix.
    let (side, bin, values) = (s.matrix.0, s.matrix.1, &s.matrix.2);
    let note = format!(
        "rows: initiating rank, columns: partner rank{}; grey: not measured",
        if bin > 1 {
            format!("; {bin}×{bin} ranks per cell, colour = slowest")
        } else {
            String::new()
        }
    );
    heading(
        &mut o,
        M,
        106.0,
        MX + MSZ - M,
        "Time per message, rank × rank",
        &note,
    );
    let host_of_rank = |r: usize| -> &str {
        let k = s.host_boundaries.partition_point(|(b, _)| *b <= r);
        s.host_boundaries
            .get(k.saturating_sub(1))
            .map(|(_, h)| h.as_str())
            .unwrap_or("?")
    };
    cells(&mut o, MX, MY, MSZ, side, values, scale, &|i, j, v| {
        if bin > 1 {
            let end = |a: usize| ((a + 1) * bin).min(n) - 1;
            format!(
                "ranks {}–{} → {}–{}: slowest {}",
                i * bin,
                end(i),
                j * bin,
                end(j),
                fmt::time(v)
            )
        } else {
            format!(
                "{i} ({}) → {j} ({}): {} ({})",
                host_of_rank(i),
                host_of_rank(j),
                fmt::time(v),
                fmt::bandwidth(s.message_size, v)
            )
        }
    });
    let rank_px = MSZ / n.max(1) as f64;
    let host_blocks: Vec<Block> = s
        .host_boundaries
        .iter()
        .enumerate()
        .map(|(k, (r, h))| {
            let end = s.host_boundaries.get(k + 1).map(|b| b.0).unwrap_or(n);
            Block {
                start: *r as f64 * rank_px,
                end: end as f64 * rank_px,
                label: h.clone(),
                tooltip: format!("{h}: ranks {r}–{}", end.saturating_sub(1)),
            }
        })
        .collect();
    rank_ticks(&mut o, n);
    let left_bottom = block_labels(
        &mut o,
        MX,
        MY,
        MSZ,
        &host_blocks,
        MX - 40.0,
        MX - 40.0 - M,
        "host",
        true,
    );
    legend(&mut o, MX + MSZ + 16.0, MY, MSZ, scale);

    // Right column: summary.
    let mut y = heading(&mut o, RX, 106.0, RW, "Summary", "") + 14.0;
    kv(
        &mut o,
        &mut y,
        "message size",
        &fmt::size(s.message_size),
        "",
    );
    kv(
        &mut o,
        &mut y,
        "messages per pair",
        &fmt::int(s.num_messages),
        "",
    );
    kv(
        &mut o,
        &mut y,
        "ranks / hosts",
        &format!(
            "{} / {}",
            fmt::int(n as u64),
            fmt::int(s.hosts.len() as u64)
        ),
        "",
    );
    kv(
        &mut o,
        &mut y,
        "measured pairs",
        &fmt::int(s.pairs as u64),
        "",
    );
    // The exact values (seconds, shortest round-trip form) ride along as
    // tooltips and data attributes, for tools that read the page.
    for (k, v, exact) in [
        ("min time", s.min_s, true),
        ("median time", s.median_s, false),
        ("avg time", s.avg_s, true),
        ("max time", s.max_s, true),
    ] {
        let shown = format!("{}  ({})", fmt::time(v), fmt::bandwidth(s.message_size, v));
        if exact {
            let vx = RX + 130.0;
            text(
                &mut o,
                RX,
                y,
                12.0,
                A::Start,
                &format!(r#" fill="{GREY}""#),
                k,
            );
            let _ = writeln!(
                o,
                r#"<text x="{vx}" y="{y}" font-size="12" data-seconds="{v:e}">{}<title>{v:e} s</title></text>"#,
                esc(&shown)
            );
            y += 18.0;
        } else {
            kv(&mut o, &mut y, k, &shown, "");
        }
    }
    match s.a2a {
        Some((a, b, c)) => kv(
            &mut o,
            &mut y,
            "all-to-all",
            &format!(
                "min {} · avg {} · max {}",
                fmt::time(a),
                fmt::time(b),
                fmt::time(c)
            ),
            "",
        ),
        None => kv(&mut o, &mut y, "all-to-all", "not run", ""),
    }

    // Slowest pairs.
    y = heading(
        &mut o,
        RX,
        y + 22.0,
        RW,
        &format!("Slowest pairs ({})", s.slowest.len()),
        "recorded retests first, then the slowest measurements",
    ) + 12.0;
    let (c_time, c_retest) = (RX + RW - 80.0, RX + RW);
    let first_w = c_time - RX - 64.0;
    row(
        &mut o,
        y,
        "rank (host) → rank (host)",
        first_w,
        &[(c_time, "time".into()), (c_retest, "retest".into())],
        &format!(r#" fill="{GREY}""#),
    );
    y += 16.0;
    for p in &s.slowest {
        row(
            &mut o,
            y,
            &format!(
                "{} ({}) → {} ({})",
                p.from_rank, p.from_host, p.to_rank, p.to_host
            ),
            first_w,
            &[
                (c_time, fmt::time(p.time_s)),
                (
                    c_retest,
                    p.retest_time_s.map(fmt::time).unwrap_or_else(|| "-".into()),
                ),
            ],
            r#" class="slow-pair""#,
        );
        y += 15.0;
    }

    // Host pairs above the threshold.
    const HOT_ROWS: usize = 10;
    y = heading(
        &mut o,
        RX,
        y + 22.0,
        RW,
        &format!(
            "Host pairs with max above {}: {}",
            fmt::time(s.threshold_s),
            s.hot_host_pairs.len()
        ),
        "",
    ) + 12.0;
    if !s.hot_host_pairs.is_empty() {
        let (c_max, c_mean, c_pairs) = (RX + RW - 150.0, RX + RW - 70.0, RX + RW);
        let first_w = c_max - RX - 64.0;
        row(
            &mut o,
            y,
            "host → host",
            first_w,
            &[
                (c_max, "max".into()),
                (c_mean, "mean".into()),
                (c_pairs, "pairs".into()),
            ],
            &format!(r#" fill="{GREY}""#),
        );
        y += 16.0;
        for hp in s.hot_host_pairs.iter().take(HOT_ROWS) {
            row(
                &mut o,
                y,
                &format!("{} → {}", hp.from_host, hp.to_host),
                first_w,
                &[
                    (c_max, fmt::time(hp.max_s)),
                    (c_mean, fmt::time(hp.mean_s)),
                    (c_pairs, fmt::int(hp.pairs as u64)),
                ],
                "",
            );
            y += 15.0;
        }
        if s.hot_host_pairs.len() > HOT_ROWS {
            text(
                &mut o,
                RX,
                y,
                11.0,
                A::Start,
                &format!(r#" fill="{GREY}""#),
                &format!("… and {} more", s.hot_host_pairs.len() - HOT_ROWS),
            );
            y += 15.0;
        }
    }
    let right_bottom = y;

    // Second row: histogram (left) and host × host (right).
    let y0 = left_bottom.max(right_bottom).max(MY + MSZ + 20.0) + 40.0;
    let nh = s.hosts.len();
    let hist_right = if nh > 1 { MX + MSZ } else { W - M };
    let hist_bottom = histogram(&mut o, s, scale, y0, hist_right);
    let host_bottom = if nh > 1 {
        host_matrix(&mut o, s, scale, y0)
    } else {
        y0
    };

    // Checks.
    let mut bottom = hist_bottom.max(host_bottom);
    if !s.checks.is_empty() {
        bottom = checks(&mut o, &s.checks, bottom + 40.0);
    }

    let h = (bottom + M).ceil();
    let mut page = String::with_capacity(o.len() + 400);
    let _ = writeln!(
        page,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{PAGE_W}" height="{h}" viewBox="0 0 {PAGE_W} {h}" font-family="DejaVu Sans, sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        page,
        r#"<rect class="page" width="{PAGE_W}" height="{h}" fill="white"/>"#
    );
    page.push_str(&o);
    page.push_str("</svg>\n");
    page
}

/// The histogram with its axes below `y0`, from the left margin to `right`;
/// returns its bottom.
fn histogram(o: &mut String, s: &Summary, scale: Scale, y0: f64, right: f64) -> f64 {
    let hist = &s.histogram;
    heading(
        o,
        M,
        y0,
        right - M,
        &format!("Pair times ({} pairs)", fmt::int(s.pairs as u64)),
        &format!(
            "pairs per bin of time per message{}; red: the host-pair threshold",
            if hist.log { ", log-spaced bins" } else { "" }
        ),
    );
    let most = hist.counts.iter().copied().max().unwrap_or(0).max(1);
    // Count axis: up to 5 ticks at a nice step, the axis ending on a tick.
    let step = nice_step(most, 5);
    let top = most.div_ceil(step) * step;
    // Room on the left for the count labels and the axis caption.
    let label_w = text_width(&fmt::int(top as u64), TICK_FONT, false);
    let px = M + 18.0 + label_w + 10.0;
    let (py, pw, ph) = (y0 + 44.0, right - px, 170.0);
    let nb = hist.counts.len().max(1);
    let bw = pw / nb as f64;
    for (k, c) in hist.counts.iter().enumerate() {
        if *c == 0 {
            continue;
        }
        // At least 1 px, so single outliers stay visible.
        let bh = (ph * *c as f64 / top as f64).max(1.0);
        let lo = hist.edges.get(k).copied().unwrap_or(f64::NAN);
        let hi = hist.edges.get(k + 1).copied().unwrap_or(f64::NAN);
        let _ = writeln!(
            o,
            r##"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="#3b528b"><title>{} – {}: {} pairs</title></rect>"##,
            px + k as f64 * bw,
            py + ph - bh,
            (bw - 1.0).max(0.5),
            bh,
            fmt::time(lo),
            fmt::time(hi),
            c
        );
    }
    // Axes.
    let _ = writeln!(
        o,
        r#"<line x1="{px}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{px}" y1="{py}" x2="{px}" y2="{}" stroke="black"/>"#,
        py + ph,
        px + pw,
        py + ph,
        py + ph
    );
    for v in (0..=top).step_by(step) {
        let ty = py + ph - ph * v as f64 / top as f64;
        let v = v as u64;
        let _ = writeln!(
            o,
            r#"<line x1="{}" y1="{ty:.1}" x2="{px}" y2="{ty:.1}" stroke="black"/>"#,
            px - 4.0
        );
        text(o, px - 7.0, ty + 3.5, TICK_FONT, A::End, "", &fmt::int(v));
    }
    let ylab = (M + 10.0, py + ph / 2.0);
    text(
        o,
        ylab.0,
        ylab.1,
        TICK_FONT,
        A::Middle,
        &format!(
            r#" fill="{GREY}" transform="rotate(-90 {} {})""#,
            ylab.0, ylab.1
        ),
        "pairs",
    );
    let ticks = 4usize;
    for k in 0..=ticks {
        let e = k * nb / ticks;
        let x = px + e as f64 * bw;
        let v = hist.edges.get(e).copied().unwrap_or(f64::NAN);
        let _ = writeln!(
            o,
            r#"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="black"/>"#,
            py + ph,
            py + ph + 4.0
        );
        let anchor = match k {
            0 => A::Start,
            k if k == ticks => A::End,
            _ => A::Middle,
        };
        text(o, x, py + ph + 16.0, TICK_FONT, anchor, "", &fmt::time(v));
    }
    text(
        o,
        px + pw / 2.0,
        py + ph + 32.0,
        TICK_FONT,
        A::Middle,
        &format!(r#" fill="{GREY}""#),
        &format!(
            "time per message{}",
            if hist.log { " (log scale)" } else { "" }
        ),
    );
    // The threshold of the host-pair list.
    if s.threshold_s >= s.min_s && s.threshold_s <= s.max_s && s.max_s > s.min_s {
        let x = px + scale.norm(s.threshold_s) * pw;
        let _ = writeln!(
            o,
            r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="#cf222e" stroke-dasharray="4 3"/>"##,
            py - 4.0,
            py + ph
        );
        let label = format!("threshold {}", fmt::time(s.threshold_s));
        let anchor = if x + 4.0 + text_width(&label, TICK_FONT, false) > px + pw {
            A::End
        } else {
            A::Start
        };
        let lx = if anchor == A::End { x - 4.0 } else { x + 4.0 };
        text(
            o,
            lx,
            py + 6.0,
            TICK_FONT,
            anchor,
            r##" fill="#cf222e""##,
            &label,
        );
    }
    py + ph + 36.0
}

/// The host × host matrix of the slowest pair between each two hosts (binned
/// above [`MAX_HOST_CELLS`] hosts), in the right column below `y0`; returns its bottom.
fn host_matrix(o: &mut String, s: &Summary, scale: Scale, y0: f64) -> f64 {
    let nh = s.hosts.len();
    let hb = nh.div_ceil(MAX_HOST_CELLS).max(1);
    let side = nh.div_ceil(hb);
    let mut max = vec![f64::NAN; side * side];
    let mut sum = vec![0f64; side * side];
    let mut cnt = vec![0usize; side * side];
    for a in 0..nh {
        for b in 0..nh {
            let k = (a / hb) * side + b / hb;
            if let Some(v) = s.host_matrix_max.get(a * nh + b).filter(|v| !v.is_nan())
                && let Some(c) = max.get_mut(k)
            {
                *c = if c.is_nan() { *v } else { c.max(*v) };
            }
            if let Some(m) = s.host_matrix_mean.get(a * nh + b).filter(|v| !v.is_nan()) {
                sum[k] += m;
                cnt[k] += 1;
            }
        }
    }
    let note = if hb > 1 {
        format!("slowest rank pair between two hosts; {hb}×{hb} hosts per cell")
    } else {
        "rows: initiating host; colour: slowest rank pair, same scale".into()
    };
    let top = heading(o, RX, y0, RW, "Host × host: slowest pair", &note);
    let label_w = 100.0;
    let gx = RX + label_w + 8.0;
    let gy = top + 17.0;
    let gs = W - M - gx - 4.0;
    let name = |k: usize| -> String {
        if hb == 1 {
            s.hosts.get(k).cloned().unwrap_or_default()
        } else {
            let a = k * hb;
            let b = ((k + 1) * hb).min(nh) - 1;
            format!(
                "{}–{}",
                s.hosts.get(a).map(String::as_str).unwrap_or("?"),
                s.hosts.get(b).map(String::as_str).unwrap_or("?")
            )
        }
    };
    cells(o, gx, gy, gs, side, &max, scale, &|i, j, v| {
        let k = i * side + j;
        let mean = if cnt[k] > 0 {
            fmt::time(sum[k] / cnt[k] as f64)
        } else {
            "-".into()
        };
        format!(
            "{} → {}: slowest {}, mean {}",
            name(i),
            name(j),
            fmt::time(v),
            mean
        )
    });
    let cell = gs / side.max(1) as f64;
    let blocks: Vec<Block> = (0..side)
        .map(|k| {
            let label = if hb == 1 {
                name(k)
            } else {
                s.hosts.get(k * hb).cloned().unwrap_or_default()
            };
            Block {
                start: k as f64 * cell,
                end: (k + 1) as f64 * cell,
                label,
                tooltip: name(k),
            }
        })
        .collect();
    block_labels(
        o,
        gx,
        gy,
        gs,
        &blocks,
        gx - 8.0,
        label_w - 8.0,
        "host",
        false,
    )
}

/// The run's checks from `y`; returns the bottom.
fn checks(o: &mut String, checks: &[Check], y: f64) -> f64 {
    const ROWS: usize = 18;
    let failed = checks.iter().filter(|c| c.status != "PASS").count();
    let mut y = heading(
        o,
        M,
        y,
        W - 2.0 * M,
        &format!("Checks: {failed} of {} not passed", checks.len()),
        "",
    ) + 12.0;
    for c in checks.iter().take(ROWS) {
        let colour = match c.status.as_str() {
            "PASS" => "#1a7f37",
            "FAIL" => "#cf222e",
            // A change point (stepped or drifted worse): its own colour.
            "REGRESSION" => "#8e44ad",
            // Not judged (no reference yet) or a disturbed run: grey, never green.
            "INCONCLUSIVE" | "NO_REFERENCE" => "#6e7781",
            _ => "#9a6700",
        };
        let unit = c.unit.as_deref().unwrap_or("");
        let fig = |v: Option<f64>| {
            v.map(|v| fmt::with_unit(v, unit))
                .unwrap_or_else(|| "-".into())
        };
        // Room for the longest status (INCONCLUSIVE, NO_REFERENCE).
        let status_w = if checks.iter().any(|c| c.status.len() > 5) {
            116.0
        } else {
            52.0
        };
        let line = format!(
            "{}: {} (reference {}){}",
            c.check,
            fig(c.value),
            fig(c.reference),
            c.message
                .as_deref()
                .map(|m| format!(" — {m}"))
                .unwrap_or_default()
        );
        let exact = c
            .value
            .map(|v| format!(r#" data-value="{v:e}""#))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            r#"<text class="check" x="{M}" y="{y}" font-size="11" font-weight="bold" fill="{colour}">{}</text><text class="check" x="{}" y="{y}" font-size="11"{exact}>{}</text>"#,
            esc(&c.status),
            M + status_w,
            esc(&fit(
                &line,
                11.0,
                false,
                W - 2.0 * M - status_w,
                Keep::Start
            ))
        );
        y += 15.0;
    }
    if checks.len() > ROWS {
        text(
            o,
            M,
            y,
            11.0,
            A::Start,
            &format!(r#" class="check" fill="{GREY}""#),
            &format!("… and {} more", checks.len() - ROWS),
        );
        y += 15.0;
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_scale_and_labels() {
        assert_eq!(nice_step(16, 16), 1);
        assert_eq!(nice_step(17, 16), 2);
        assert_eq!(nice_step(4096, 16), 500);
        assert_eq!(nice_step(100, 16), 10);
        let lin = Scale {
            lo: 1.0,
            hi: 3.0,
            log: false,
        };
        assert_eq!(lin.norm(2.0), 0.5);
        assert_eq!(lin.value(0.5), 2.0);
        let log = Scale {
            lo: 1e-6,
            hi: 1e-4,
            log: true,
        };
        assert!((log.norm(1e-5) - 0.5).abs() < 1e-12);
        assert!((log.value(0.5) - 1e-5).abs() < 1e-18);
        assert_eq!(log.norm(f64::NAN), 0.0);
        let blocks: Vec<Block> = (0..100)
            .map(|k| Block {
                start: k as f64 * 3.0,
                end: (k + 1) as f64 * 3.0,
                label: k.to_string(),
                tooltip: String::new(),
            })
            .collect();
        // 3 px blocks with a 13 px gap: every fifth label.
        let shown: Vec<&str> = thin(&blocks).iter().map(|b| b.label.as_str()).collect();
        assert_eq!(&shown[..3], &["0", "5", "10"]);
    }
}
