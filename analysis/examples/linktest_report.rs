//! Writes a LinkTest report page (SVG and PNG) for looking at it.
//!
//! ```sh
//! cargo run -p benchlake-analysis --example linktest_report -- FILE.sion OUT.svg
//! cargo run -p benchlake-analysis --example linktest_report -- synthetic:RANKS:PER_HOST OUT.svg [checks] [TITLE]
//! ```
//!
//! `checks` adds two sample `checks` verdicts (as a run id's page shows them).
use std::path::PathBuf;

use benchlake_analysis::linktest_report as lr;
use benchlake_formats::linktest::synth as linktest_synth;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(input), Some(out)) = (args.next(), args.next()) else {
        return Err("usage: linktest_report FILE.sion|synthetic:RANKS:PER_HOST OUT.svg".into());
    };
    let run = if let Some(spec) = input.strip_prefix("synthetic:") {
        let mut it = spec.split(':').map(str::parse::<usize>);
        let ranks = it.next().ok_or("synthetic:RANKS:PER_HOST")??;
        let per_host = it.next().ok_or("synthetic:RANKS:PER_HOST")??;
        linktest_synth::synthetic_run(ranks, per_host, 1)
    } else {
        benchlake_formats::linktest::read_file(std::path::Path::new(&input))?
    };
    let with_checks = args.next().is_some_and(|a| a == "checks");
    let opts = lr::ReportOptions {
        title: args.next().unwrap_or_else(|| input.clone()),
        ..Default::default()
    };
    let mut summary = lr::summarize(&run, &opts)?;
    if with_checks {
        summary.checks = vec![
            lr::Check {
                source: "pingpong_results_bin.sion".into(),
                check: "linktest.max_time_s".into(),
                status: "FAIL".into(),
                value: Some(summary.max_s),
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
                message: Some("no slow pairs".into()),
            },
        ];
    }
    let svg = lr::render_svg(&summary);
    let out = PathBuf::from(out);
    std::fs::write(&out, &svg)?;
    let t = std::time::Instant::now();
    let png = lr::render_png(&svg)?;
    std::fs::write(out.with_extension("png"), png)?;
    eprintln!(
        "wrote {} and .png ({} bytes of SVG, PNG in {:.2?})",
        out.display(),
        svg.len(),
        t.elapsed()
    );
    Ok(())
}
