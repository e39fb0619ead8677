//! The LinkTest pair view's figures (`/runs/{id}/linktest?matrix=1`,
//! [`super::linktest`]): the matrix with its ticks, host labels, rings and
//! legend around the server-drawn image; the histogram of pair times; the
//! host × host matrix.
use std::fmt::Write;

use benchlake_analysis::linktest_report::{self as report, Scale, Summary, fmt as rfmt};

use super::html::esc;
use super::linktest::{LinkTestView, MATRIX_PX, Window};

/// Side of the drawn matrix (CSS px).
const MS: f64 = MATRIX_PX as f64;
/// Host×host matrices are drawn up to this many hosts.
const MAX_HOSTS: usize = 160;

/// A tick step of 1, 2 or 5 × 10^k giving at most `max` ticks over `n`.
pub(super) fn nice_step(n: usize, max: usize) -> usize {
    let mut step = 1;
    loop {
        for m in [1, 2, 5] {
            if n.div_ceil(step * m) <= max {
                return step * m;
            }
        }
        step *= 10;
    }
}

/// `s` shortened to `max` characters with an ellipsis.
pub(super) fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut o: String = s.chars().take(max.saturating_sub(1)).collect();
        o.push('…');
        o
    }
}

/// The matrix figure: the image, rank ticks on top and left, host labels at
/// the left, host boundaries, the colour legend.
pub(super) fn matrix_svg(
    v: &LinkTestView,
    img: &str,
    api: &str,
    win: &Window,
    zoom: &str,
) -> String {
    let s = &v.summary;
    let n = win.span.max(1);
    let (r0, c0) = (win.r0, win.c0);
    // Zooming in: a window of an eighth of this one, at least 32 ranks.
    let zspan = (n / 8).max(32).min(v.n);
    let (l, t) = (170.0, 34.0);
    // Below the matrix: the column hosts, rotated.
    let (w, hgt) = (l + MS + 110.0, t + MS + 96.0);
    // Position of a row (rank r, absolute) and of a column along the axes.
    let pos = |r: f64| (r - r0 as f64) / n as f64 * MS;
    let cpos = |c: f64| (c - c0 as f64) / n as f64 * MS;
    let inside = |r: usize, c: usize| r >= r0 && r < r0 + n && c >= c0 && c < c0 + n;
    let mut o = String::with_capacity(16 * 1024);
    let _ = write!(
        o,
        "<svg class=\"lt-matrix\" id=\"lt-matrix-svg\" width=\"{w}\" height=\"{hgt}\" viewBox=\"0 0 {w} {hgt}\" role=\"img\" aria-label=\"pair matrix of {n} ranks\">\
         <text x=\"{}\" y=\"11\" class=\"ax\" text-anchor=\"middle\">to rank</text>\
         <text x=\"12\" y=\"{}\" class=\"ax\" text-anchor=\"middle\" transform=\"rotate(-90 12 {})\">from rank (host)</text>\
         <rect x=\"{l}\" y=\"{t}\" width=\"{MS}\" height=\"{MS}\" fill=\"#eeeeee\"/>\
         <image id=\"lt-matrix\" href=\"{}\" x=\"{l}\" y=\"{t}\" width=\"{MS}\" height=\"{MS}\" preserveAspectRatio=\"none\" data-n=\"{n}\" data-r0=\"{r0}\" data-c0=\"{c0}\" data-total=\"{}\" data-bin=\"{}\" data-side=\"{}\" data-api=\"{}\"{}/>",
        l + MS / 2.0,
        t + MS / 2.0,
        t + MS / 2.0,
        esc(img),
        v.n,
        win.bin,
        win.side,
        esc(api),
        if win.bin > 1 {
            format!(" data-zoom=\"{}\" data-zspan=\"{zspan}\"", esc(zoom))
        } else {
            String::new()
        }
    );
    // Host boundaries (when they stay apart).
    let bounds = &s.host_boundaries;
    let shown = bounds
        .iter()
        .skip(1)
        .filter(|(r, _)| (*r > r0 && *r < r0 + n) || (*r > c0 && *r < c0 + n))
        .count();
    if shown > 0 && MS / shown as f64 >= 3.0 {
        let class = if shown > 32 { "hb many" } else { "hb" };
        for (r, _) in bounds.iter().skip(1) {
            if *r > c0 && *r < c0 + n {
                let x = l + cpos(*r as f64);
                let _ = write!(
                    o,
                    "<line x1=\"{x:.1}\" y1=\"{t}\" x2=\"{x:.1}\" y2=\"{}\" class=\"{class}\"/>",
                    t + MS
                );
            }
            if *r > r0 && *r < r0 + n {
                let y = t + pos(*r as f64);
                let _ = write!(
                    o,
                    "<line x1=\"{l}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" class=\"{class}\"/>",
                    l + MS
                );
            }
        }
    }
    // Rings around the five slowest pairs (a single slow pixel is easy to miss).
    for p in s
        .slowest
        .iter()
        .take(5)
        .filter(|p| inside(p.from_rank, p.to_rank))
    {
        let _ = write!(
            o,
            "<circle class=\"slowmark\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"6\"/>",
            l + cpos(p.to_rank as f64 + 0.5),
            t + pos(p.from_rank as f64 + 0.5)
        );
    }
    // The hovered cell (placed by the script).
    o.push_str(
        "<rect id=\"lt-cursor\" class=\"cursor\" x=\"0\" y=\"0\" width=\"0\" height=\"0\"/>",
    );
    // Rank ticks.
    let step = nice_step(n, 10);
    for k in 0..=n / step {
        // Columns from c0, rows from r0, each at the multiples of the step.
        let c = c0.div_ceil(step) * step + k * step;
        if c < c0 + n {
            let x = l + cpos(c as f64 + 0.5);
            let _ = write!(
                o,
                "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{t}\" class=\"tick\"/><text x=\"{x:.1}\" y=\"{}\" class=\"tk\" text-anchor=\"middle\">{c}</text>",
                t - 4.0,
                t - 7.0,
            );
        }
        let r = r0.div_ceil(step) * step + k * step;
        if r < r0 + n {
            let y = t + pos(r as f64 + 0.5);
            let _ = write!(
                o,
                "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{l}\" y2=\"{y:.1}\" class=\"tick\"/><text x=\"{}\" y=\"{:.1}\" class=\"tk\" text-anchor=\"end\">{r}</text>",
                l - 4.0,
                l - 6.0,
                y + 3.5,
            );
        }
    }
    // Host labels, thinned so that they never overlap (12 px apart).
    let mut last = f64::NEG_INFINITY;
    for (k, (start, host)) in bounds.iter().enumerate() {
        let end = bounds.get(k + 1).map(|x| x.0).unwrap_or(v.n);
        // The part of the host's block inside the window's rows.
        let (a, z) = ((*start).max(r0), end.min(r0 + n));
        if a >= z {
            continue;
        }
        let y = t + pos((a + z) as f64 / 2.0);
        if y - last < 12.0 {
            continue;
        }
        last = y;
        let _ = write!(
            o,
            "<text x=\"{}\" y=\"{:.1}\" class=\"host\" text-anchor=\"end\"><title>{} (ranks {}–{})</title>{}</text>",
            l - 36.0,
            y + 3.5,
            esc(host),
            start,
            end - 1,
            esc(&short(host, 16))
        );
    }
    // The columns' hosts below the matrix, the same way.
    let mut last = f64::NEG_INFINITY;
    for (k, (start, host)) in bounds.iter().enumerate() {
        let end = bounds.get(k + 1).map(|x| x.0).unwrap_or(v.n);
        let (a, z) = ((*start).max(c0), end.min(c0 + n));
        if a >= z {
            continue;
        }
        let x = l + cpos((a + z) as f64 / 2.0);
        if x - last < 12.0 {
            continue;
        }
        last = x;
        let y = t + MS + 8.0;
        let _ = write!(
            o,
            "<text x=\"{:.1}\" y=\"{y:.1}\" class=\"host\" text-anchor=\"end\" transform=\"rotate(-60 {:.1} {y:.1})\"><title>{} (ranks {}–{})</title>{}</text>",
            x + 3.0,
            x + 3.0,
            esc(host),
            start,
            end - 1,
            esc(&short(host, 16))
        );
    }
    // Legend.
    let scale = Scale::of(s);
    let (lx, ly, lh) = (l + MS + 18.0, t, MS * 0.6);
    const LEVELS: usize = 48;
    for k in 0..LEVELS {
        let f = 1.0 - (k as f64 + 0.5) / LEVELS as f64;
        let [rr, gg, bb] = report::ramp_rgb(f);
        let _ = write!(
            o,
            "<rect x=\"{lx}\" y=\"{:.2}\" width=\"14\" height=\"{:.2}\" fill=\"#{rr:02x}{gg:02x}{bb:02x}\"/>",
            ly + lh * k as f64 / LEVELS as f64,
            lh / LEVELS as f64 + 0.3
        );
    }
    for f in [1.0, 0.75, 0.5, 0.25, 0.0] {
        let _ = write!(
            o,
            "<text x=\"{}\" y=\"{:.1}\" class=\"tk\">{}</text>",
            lx + 18.0,
            ly + lh * (1.0 - f) + 3.5,
            esc(&rfmt::time(scale.value(f)))
        );
    }
    let _ = write!(
        o,
        "<rect x=\"{lx}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"#eeeeee\" stroke=\"#999\" stroke-width=\"0.5\"/><text x=\"{}\" y=\"{}\" class=\"tk\">not measured</text></svg>",
        ly + lh + 14.0,
        lx + 18.0,
        ly + lh + 23.0
    );
    o
}

/// The histogram: one bar per bin with its range and count as tooltip, the
/// time axis, the threshold.
pub(super) fn histogram_svg(s: &Summary) -> String {
    let h = &s.histogram;
    let bins = h.counts.len().max(1);
    let (l, t, w, hh) = (56.0, 12.0, 760.0, 180.0);
    let maxc = h.counts.iter().copied().max().unwrap_or(0).max(1);
    let mut o = String::with_capacity(8 * 1024);
    let _ = write!(
        o,
        "<svg class=\"chart\" id=\"lt-hist\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"histogram of pair times\">",
        l + w + 20.0,
        t + hh + 44.0,
        l + w + 20.0,
        t + hh + 44.0
    );
    let bw = w / bins as f64;
    for (k, c) in h.counts.iter().enumerate() {
        let bh = *c as f64 / maxc as f64 * hh;
        let (a, z) = (
            h.edges.get(k).copied().unwrap_or(0.0),
            h.edges.get(k + 1).copied().unwrap_or(0.0),
        );
        let _ = write!(
            o,
            "<rect class=\"bar\" x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\"><title>{} – {}: {} pairs</title></rect>",
            l + k as f64 * bw + 0.5,
            t + hh - bh,
            (bw - 1.0).max(0.5),
            bh.max(if *c > 0 { 1.0 } else { 0.0 }),
            esc(&rfmt::time(a)),
            esc(&rfmt::time(z)),
            rfmt::int(*c as u64)
        );
    }
    // Axes: counts at the left, times below.
    let _ = write!(
        o,
        "<line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"axis\"/><line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{}\" class=\"axis\"/>\
         <text x=\"{}\" y=\"{}\" class=\"tk\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{}\" class=\"tk\" text-anchor=\"end\">0</text>\
         <text x=\"14\" y=\"{}\" class=\"ax\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">pairs</text>",
        t + hh,
        l + w,
        t + hh,
        t + hh,
        l - 4.0,
        t + 8.0,
        rfmt::int(maxc as u64),
        l - 4.0,
        t + hh,
        t + hh / 2.0,
        t + hh / 2.0
    );
    for k in (0..=bins).step_by((bins / 5).max(1)) {
        let x = l + k as f64 * bw;
        let _ = write!(
            o,
            "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" class=\"tick\"/><text x=\"{x:.1}\" y=\"{}\" class=\"tk\" text-anchor=\"middle\">{}</text>",
            t + hh,
            t + hh + 4.0,
            t + hh + 16.0,
            esc(&rfmt::time(h.edges.get(k).copied().unwrap_or(0.0)))
        );
    }
    let _ = write!(
        o,
        "<text x=\"{}\" y=\"{}\" class=\"ax\" text-anchor=\"middle\">pair time ({} bins)</text>",
        l + w / 2.0,
        t + hh + 36.0,
        if h.log { "logarithmic" } else { "linear" }
    );
    // The threshold of the host-pair list.
    let first = h.edges.first().copied().unwrap_or(0.0);
    let lastv = h.edges.last().copied().unwrap_or(0.0);
    let f = if h.log && first > 0.0 && s.threshold_s > 0.0 && lastv > first {
        (s.threshold_s / first).ln() / (lastv / first).ln()
    } else if lastv > first {
        (s.threshold_s - first) / (lastv - first)
    } else {
        -1.0
    };
    if (0.0..=1.0).contains(&f) {
        let x = l + f * w;
        let _ = write!(
            o,
            "<line x1=\"{x:.1}\" y1=\"{t}\" x2=\"{x:.1}\" y2=\"{}\" class=\"thr\"/><text x=\"{:.1}\" y=\"{}\" class=\"tk thr-l\">2× median {}</text>",
            t + hh,
            x + 4.0,
            t + 10.0,
            esc(&rfmt::time(s.threshold_s))
        );
    }
    o.push_str("</svg>");
    o
}

/// The host×host matrix of the slowest pair (a tooltip per cell with the
/// slowest and mean time), up to [`MAX_HOSTS`] hosts.
pub(super) fn host_svg(s: &Summary) -> String {
    let nh = s.hosts.len();
    if nh == 0 {
        return String::new();
    }
    if nh > MAX_HOSTS {
        return format!(
            "<p class=\"muted\">{} hosts: the host matrix is drawn up to {MAX_HOSTS} hosts; the list below names the slow host pairs.</p>",
            rfmt::int(nh as u64)
        );
    }
    let cell = (480.0 / nh as f64).clamp(4.0, 28.0);
    let labels = cell >= 10.0;
    let l = if labels { 130.0 } else { 10.0 };
    let t = if labels { 110.0 } else { 10.0 };
    let side = cell * nh as f64;
    let scale = Scale::of(s);
    let mut o = String::with_capacity(nh * nh * 160 + 1024);
    let _ = write!(
        o,
        "<svg class=\"chart\" id=\"lt-hosts\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\" aria-label=\"host by host matrix\">",
        l + side + 10.0,
        t + side + 10.0
    );
    for a in 0..nh {
        for z in 0..nh {
            let k = a * nh + z;
            let max = s.host_matrix_max.get(k).copied().unwrap_or(f64::NAN);
            let mean = s.host_matrix_mean.get(k).copied().unwrap_or(f64::NAN);
            let fill = if max.is_nan() {
                "#eeeeee".to_string()
            } else {
                let [r, g, b] = report::ramp_rgb(scale.norm(max));
                format!("#{r:02x}{g:02x}{b:02x}")
            };
            let tip = if max.is_nan() {
                "no pair measured".to_string()
            } else {
                format!("slowest {}, mean {}", rfmt::time(max), rfmt::time(mean))
            };
            let _ = write!(
                o,
                "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{fill}\"><title>{} → {}: {}</title></rect>",
                l + z as f64 * cell,
                t + a as f64 * cell,
                cell - 0.5,
                cell - 0.5,
                esc(&s.hosts[a]),
                esc(&s.hosts[z]),
                esc(&tip)
            );
        }
    }
    if labels {
        for (k, host) in s.hosts.iter().enumerate() {
            let c = k as f64 * cell + cell / 2.0;
            let _ = write!(
                o,
                "<text x=\"{}\" y=\"{:.1}\" class=\"host\" text-anchor=\"end\">{}</text><text x=\"{:.1}\" y=\"{}\" class=\"host\" transform=\"rotate(-60 {:.1} {})\">{}</text>",
                l - 4.0,
                t + c + 3.5,
                esc(&short(host, 18)),
                l + c + 3.0,
                t - 4.0,
                l + c + 3.0,
                t - 4.0,
                esc(&short(host, 18))
            );
        }
    }
    o.push_str("</svg>");
    o
}
