//! The LinkTest report as people see it: the PNG must carry text (the page drawn
//! with its text hidden must differ from it where the title, the labels and the
//! summary are), every text must stay on the page without overlapping another
//! (parsed with usvg and the report's fonts, so the boxes are the rendered
//! ones), and labels, units and the host view must be there at 16 and at
//! thousands of ranks.
use std::path::Path;

use benchlake_analysis::linktest_report::{self as lr, PAGE_W, fonts};
use benchlake_formats::linktest::LinkTestRun;
use benchlake_formats::linktest::synth as linktest_synth;
use resvg::tiny_skia::Pixmap;
use resvg::usvg;

const DATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/linktest/v1.2p1"
);

fn real(case: &str) -> LinkTestRun {
    benchlake_formats::linktest::read_file(
        &Path::new(DATA).join(case).join("pingpong_results_bin.sion"),
    )
    .unwrap()
}

fn page(run: &LinkTestRun, title: &str, checks: Vec<lr::Check>) -> (lr::Summary, String) {
    let opts = lr::ReportOptions {
        title: title.into(),
        ..Default::default()
    };
    let mut s = lr::summarize(run, &opts).unwrap();
    s.checks = checks;
    let svg = lr::render_svg(&s);
    (s, svg)
}

fn sample_checks(max: f64) -> Vec<lr::Check> {
    vec![
        lr::Check {
            source: "pingpong_results_bin.sion".into(),
            check: "linktest.max_time_s".into(),
            status: "FAIL".into(),
            value: Some(max),
            reference: Some(0.000031744451958333334),
            unit: Some("s".into()),
            message: Some("max time above the bound".into()),
        },
        lr::Check {
            source: "pingpong_results_bin.sion".into(),
            check: "linktest.slow_pairs".into(),
            status: "PASS".into(),
            value: Some(0.0),
            reference: Some(0.0),
            unit: Some("pairs".into()),
            message: None,
        },
    ]
}

fn raster(svg: &str) -> Pixmap {
    Pixmap::decode_png(&lr::render_png(svg).unwrap()).unwrap()
}

/// Pixels of `a` and `b` that differ inside [x0, x1) × [y0, y1).
fn differing(a: &Pixmap, b: &Pixmap, (x0, y0, x1, y1): (u32, u32, u32, u32)) -> usize {
    assert_eq!((a.width(), a.height()), (b.width(), b.height()));
    let mut n = 0;
    for y in y0..y1.min(a.height()) {
        for x in x0..x1.min(a.width()) {
            if a.pixel(x, y) != b.pixel(x, y) {
                n += 1;
            }
        }
    }
    n
}

/// Dark pixels (luminance below 100) inside the region.
fn dark(p: &Pixmap, (x0, y0, x1, y1): (u32, u32, u32, u32)) -> usize {
    let mut n = 0;
    for y in y0..y1.min(p.height()) {
        for x in x0..x1.min(p.width()) {
            if let Some(c) = p.pixel(x, y) {
                let c = c.demultiply();
                let l = 0.299 * f64::from(c.red())
                    + 0.587 * f64::from(c.green())
                    + 0.114 * f64::from(c.blue());
                if l < 100.0 && c.alpha() > 200 {
                    n += 1;
                }
            }
        }
    }
    n
}

/// Distinct columns with a dark pixel inside the region (text spreads
/// sideways; one bar or line does not).
fn dark_columns(p: &Pixmap, (x0, y0, x1, y1): (u32, u32, u32, u32)) -> usize {
    (x0..x1.min(p.width()))
        .filter(|x| dark(p, (*x, y0, x + 1, y1)) > 0)
        .count()
}

/// The same page with every text hidden.
fn without_text(svg: &str) -> String {
    svg.replace("<text ", "<text display=\"none\" ")
}

#[test]
fn png_has_the_title_labels_and_figures_as_text() {
    let run = real("np16_a2a_mix");
    let title = "LinkTest np16_a2a_mix";
    let (s, svg) = page(&run, title, Vec::new());

    // (a) The SVG: title, rank and host labels, the slowest pair with a unit.
    assert!(svg.contains(&format!(">{title}</text>")), "title");
    let rank_labels: Vec<&str> = svg
        .lines()
        .filter(|l| l.contains(r#"class="rank""#))
        .collect();
    for r in 0..16 {
        let label = format!(">{r}</text>");
        let n = rank_labels.iter().filter(|l| l.ends_with(&label)).count();
        assert_eq!(n, 2, "rank {r}: a label on each axis");
    }
    assert_eq!(svg.matches(r#"class="rank""#).count(), 2 * 16);
    assert!(svg.contains(r#"class="host""#) && svg.contains(">vm</text>"));
    // The slowest pair of the file: 9 → 12, 5.011248 ms, retest 32.2 µs.
    let slow = &s.slowest[0];
    assert_eq!((slow.from_rank, slow.to_rank), (9, 12));
    assert_eq!(lr::fmt::time(slow.time_s), "5.01 ms");
    assert!(svg.contains(">9 (vm) → 12 (vm)</text>"));
    assert!(svg.contains(">5.01 ms</text>"));
    assert!(svg.contains(">32.2 µs</text>"));
    assert!(
        svg.contains(">33.7 µs  (122 MB/s)<title>"),
        "min with bandwidth"
    );

    // (b) The PNG: the page with text differs from the page without, in the
    // title band, beside the matrix (rank and host labels) and in the summary.
    let with = raster(&svg);
    let bare = raster(&without_text(&svg));
    assert_eq!(with.width(), PAGE_W);
    let title_band = (0, 0, PAGE_W, 48);
    let labels = (0, 150, 190, 800);
    let summary = (950, 90, PAGE_W, 300);
    let d = differing(&with, &bare, title_band);
    assert!(d > 1500, "title band: {d} pixels differ");
    assert!(differing(&with, &bare, labels) > 300, "rank/host labels");
    assert!(differing(&with, &bare, summary) > 3000, "summary table");
    // Dark anti-aliased glyphs spread over the title's width; none without text.
    assert_eq!(dark(&bare, title_band), 0);
    assert!(dark(&with, title_band) > 800);
    let cols = dark_columns(&with, title_band);
    let want = fonts::text_width(title, 20.0, true) as usize;
    assert!(
        cols > want / 2 && cols <= want + 4,
        "{cols} dark columns for a title {want} px wide"
    );
}

/// Text boxes of the page as usvg lays them out with the report's fonts.
fn text_boxes(svg: &str) -> (f32, f32, Vec<(String, usvg::Rect)>) {
    let tree = usvg::Tree::from_str(svg, &fonts::usvg_options()).unwrap();
    fn walk(g: &usvg::Group, out: &mut Vec<(String, usvg::Rect)>) {
        for n in g.children() {
            match n {
                usvg::Node::Group(g) => walk(g, out),
                usvg::Node::Text(t) => {
                    let s: String = t.chunks().iter().map(|c| c.text()).collect();
                    out.push((s, t.abs_bounding_box()));
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(tree.root(), &mut out);
    (tree.size().width(), tree.size().height(), out)
}

/// No text leaves the page or overlaps another (0.5 px tolerance); no visible
/// number carries more than four digits after its decimal point.
fn assert_layout(name: &str, svg: &str) {
    let (w, h, boxes) = text_boxes(svg);
    assert_eq!(w, PAGE_W as f32);
    assert!(boxes.len() > 40, "{name}: {} texts", boxes.len());
    for (s, b) in &boxes {
        assert!(
            b.left() >= 0.0 && b.top() >= 0.0 && b.right() <= w && b.bottom() <= h,
            "{name}: '{s}' {b:?} leaves the {w}×{h} page"
        );
        let long_decimal = s
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .any(|t| t.split_once('.').is_some_and(|(_, d)| d.len() > 4));
        assert!(!long_decimal, "{name}: '{s}' is not formatted");
    }
    for (i, (sa, a)) in boxes.iter().enumerate() {
        for (sb, b) in &boxes[i + 1..] {
            let ox = a.right().min(b.right()) - a.left().max(b.left());
            let oy = a.bottom().min(b.bottom()) - a.top().max(b.top());
            assert!(
                ox <= 0.5 || oy <= 0.5,
                "{name}: '{sa}' {a:?} overlaps '{sb}' {b:?}"
            );
        }
    }
    // The PNG has the SVG's size.
    let png = lr::render_png(svg).unwrap();
    assert_eq!(
        lr::png_size(&png).unwrap(),
        (w as u32, h.ceil() as u32),
        "{name}"
    );
}

#[test]
fn layout_fits_the_page_at_small_and_large_runs() {
    let long_title = format!(
        "/gpfs/projects/benchmarks/{}pingpong_results_bin.sion",
        "nightly/linktest/".repeat(12)
    );
    for case in ["np4_default", "np8_mix_retest3", "np16_a2a_mix"] {
        let run = real(case);
        let max = run.permutations[0].max_time_s;
        let (_, svg) = page(&run, &long_title, sample_checks(max));
        assert_layout(case, &svg);
        assert!(svg.contains(r#"class="title" font-weight="bold">…"#));
        assert!(svg.contains("pingpong_results_bin.sion</text>"));
        // Check figures are formatted: 31.7 µs, not 0.000031744451958333334 s.
        assert!(svg.contains("(reference 31.7 µs)"), "{case}");
        assert!(!svg.contains("0.000031744451958333334 s"));
    }
    for (ranks, per_host) in [(64, 8), (300, 7), (1024, 16), (2048, 4)] {
        let run = linktest_synth::synthetic_run(ranks, per_host, 7);
        let (_, svg) = page(
            &run,
            &format!("synthetic {ranks}/{per_host}"),
            sample_checks(1e-3),
        );
        assert_layout(&format!("{ranks} ranks"), &svg);
    }
}

#[test]
fn large_run_has_thinned_labels_and_the_host_view() {
    let (ranks, per_host) = (2048, 4);
    let run = linktest_synth::synthetic_run(ranks, per_host, 3);
    let (s, svg) = page(&run, "2048 ranks", Vec::new());
    assert_eq!(s.hosts.len(), 512);
    // Rank ticks every 200 ranks on both axes, the last rank too far to add.
    let ranks_shown: Vec<&str> = svg
        .lines()
        .filter(|l| l.contains(r#"class="rank""#))
        .filter_map(|l| l.rsplit_once("\">")?.1.strip_suffix("</text>"))
        .collect();
    assert_eq!(ranks_shown.len(), 2 * 11, "{ranks_shown:?}");
    assert!(ranks_shown.contains(&"2000"));
    // Host labels thinned to one per 13 px or more: 512 hosts → at most
    // 640/13 per axis on the rank matrix, plus the host matrix's.
    let host_labels = svg.matches(r#"class="host""#).count();
    assert!((40..=4 * 50).contains(&host_labels), "{host_labels}");
    assert!(svg.contains(">node0000</text>"));
    // The rank matrix is binned (8 ranks per cell), the host matrix too (4 hosts).
    assert_eq!((s.matrix.0, s.matrix.1), (256, 8));
    assert!(svg.contains("8×8 ranks per cell"));
    assert!(svg.contains("Host × host: slowest pair"));
    assert!(svg.contains("4×4 hosts per cell"));
    // The planted slowest pair and its retest, with units.
    let slowest = lr::fmt::time(linktest_synth::SLOWEST_PAIR_S);
    assert_eq!(slowest, "317 µs");
    assert!(svg.contains(&format!(">1 (node0000) → {} (node0511)</text>", ranks - 1)));
    assert!(svg.contains(&format!(">{slowest}</text>")));
    assert!(svg.contains(">4.20 µs</text>"));
    // The slow host's pairs stand out in the host aggregates.
    assert_eq!(s.hot_host_pairs[0].max_s, s.max_s);
    let slow_host_mean = s.host_matrix_mean[1];
    let fast = s.host_matrix_mean[2 * 512 + 3];
    assert!(slow_host_mean > 3.0 * fast, "{slow_host_mean} vs {fast}");
    // A matrix this size stays a small file (cells as one path per colour).
    assert!(svg.len() < 2_000_000, "{} bytes", svg.len());
}
