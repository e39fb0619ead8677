//! `benchlake report linktest` end to end through the real binary: from every
//! real LinkTest 1.2p1 file in shared/data (the page must carry the file's
//! hostnames and the min/avg/max of its libsion reference reading), and from a
//! run id over a lake written by `benchlake ingest linktest … --out DIR`, with
//! `checks` rows of the catalog schema shown on the page.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow::array::{Float64Array, RecordBatch, StringArray};
use benchlake_analysis::linktest_report::{PAGE_W, fmt, png_size, svg_size};

const DATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/linktest/v1.2p1"
);

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_benchlake"))
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// (hostnames, min, avg, max) from the reference reading of `case`.
fn reference(case: &Path) -> (Vec<String>, f64, f64, f64) {
    let p = case.join("pingpong_results_bin.sion.sionref.json");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let v = &j["linktest_v1"];
    let hosts = v["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["location"].as_str().unwrap().to_string())
        .collect();
    // serde_json's float parsing may be off by one ulp: parse the literal itself.
    let text =
        std::fs::read_to_string(case.join("pingpong_results_bin.sion.sionref.json")).unwrap();
    let f = |k: &str| -> f64 {
        let at = text.find(&format!("\"{k}\":")).unwrap() + k.len() + 3;
        let lit: String = text[at..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || "+-.eE".contains(*c))
            .collect();
        let x: f64 = lit.parse().unwrap();
        assert!((x - v[k].as_f64().unwrap()).abs() <= x.abs() * 1e-15);
        x
    };
    (hosts, f("min_time"), f("avg_time"), f("max_time"))
}

fn cases() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(DATA)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("pingpong_results_bin.sion").exists())
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no LinkTest files in {DATA}");
    v
}

/// Checks one page against the reference reading.
fn check_page(svg_path: &Path, case: &Path) -> String {
    let svg = std::fs::read_to_string(svg_path).unwrap();
    // Parses as SVG (XML), at the page width (the height follows the content).
    let size = svg_size(&svg).unwrap();
    assert_eq!(size.0, PAGE_W, "{}", svg_path.display());
    let (hosts, min, avg, max) = reference(case);
    for h in &hosts {
        assert!(svg.contains(&format!(">{h}")), "hostname {h} missing");
    }
    for v in [min, avg, max] {
        assert!(
            svg.contains(&format!("data-seconds=\"{v:e}\"")),
            "{}: value {v:e} s missing",
            svg_path.display()
        );
        // Shown with three significant digits and a unit.
        assert!(
            svg.contains(&format!(">{}  (", fmt::time(v))),
            "{}",
            fmt::time(v)
        );
    }
    let png = std::fs::read(svg_path.with_extension("png")).unwrap();
    assert_eq!(png_size(&png).unwrap(), size);
    svg
}

#[test]
fn report_from_every_real_file() {
    let dir = tempfile::tempdir().unwrap();
    for case in cases() {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let out = dir.path().join(format!("{name}.svg"));
        let stdout = run_ok(
            bin()
                .args(["report", "linktest"])
                .arg(case.join("pingpong_results_bin.sion"))
                .arg("--out")
                .arg(&out),
        );
        assert!(
            stdout.contains(&format!("wrote {}", out.display())),
            "{stdout}"
        );
        check_page(&out, &case);
    }
}

#[test]
fn report_from_a_run_id_in_the_lake_with_checks_and_threshold() {
    let case = Path::new(DATA).join("np16_a2a_mix");
    let lake = tempfile::tempdir().unwrap();
    let run_id = "01JREP0000000000000000000A";
    run_ok(
        bin()
            .args(["ingest", "linktest"])
            .arg(case.join("pingpong_results_bin.sion"))
            .arg("--out")
            .arg(lake.path())
            .args(["--run-id", run_id]),
    );
    // Checks of the run, as the checks job writes them (catalog schema).
    let schema = benchlake_core::catalog::schema("checks").unwrap();
    let (_, _, _, max) = reference(&case);
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec![run_id; 2])),
            Arc::new(StringArray::from(vec!["pingpong_results_bin.sion"; 2])),
            Arc::new(StringArray::from(vec![
                "linktest.max_time_s",
                "linktest.slow_pairs",
            ])),
            Arc::new(StringArray::from(vec!["FAIL", "PASS"])),
            Arc::new(Float64Array::from(vec![Some(max), Some(0.0)])),
            Arc::new(Float64Array::from(vec![Some(1e-5), Some(0.0)])),
            Arc::new(StringArray::from(vec!["s", "pairs"])),
            Arc::new(StringArray::from(vec![
                "max time above the bound",
                "no slow pairs",
            ])),
            // No change point (since_run, since_date, step, confidence).
            Arc::new(StringArray::from(vec![None::<&str>; 2])),
            Arc::new(StringArray::from(vec![None::<&str>; 2])),
            Arc::new(Float64Array::from(vec![None; 2])),
            Arc::new(Float64Array::from(vec![None; 2])),
        ],
    )
    .unwrap();
    let data = benchlake_core::lake::encode_parquet("checks", "2026-11-22", &[batch]).unwrap();
    let key = benchlake_core::layout::table_key(
        "checks",
        "2026-11-23",
        run_id,
        "01JREP0000000000000000000B",
        "",
    )
    .unwrap();
    let path = lake.path().join(&key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, data).unwrap();

    let out = tempfile::tempdir().unwrap();
    let stdout = run_ok(
        bin()
            .args(["report", "linktest", run_id, "--lake"])
            .arg(lake.path())
            .arg("--out")
            .arg(out.path())
            .args(["--threshold-us", "1"]),
    );
    let svg_path = out.path().join(format!("linktest-{run_id}.svg"));
    let svg = check_page(&svg_path, &case);
    assert!(svg.contains("Checks: 1 of 2 not passed"), "{stdout}");
    assert!(svg.contains("linktest.max_time_s"));
    assert!(svg.contains("max time above the bound"));
    assert!(svg.contains(&format!(
        "linktest.max_time_s: {} (reference 10.0 µs)",
        fmt::time(max)
    )));
    assert!(svg.contains(&format!(r#"data-value="{max:e}""#)));
    // Every host pair of the run is above 1 µs.
    assert!(
        svg.contains("Host pairs with max above 1.00 µs: 1"),
        "{stdout}"
    );
    assert!(stdout.contains("2 checks (1 not passed)"), "{stdout}");

    // The same page as from the file (timings and retests come back from the tables).
    let from_file = out.path().join("file.svg");
    run_ok(
        bin()
            .args(["report", "linktest"])
            .arg(case.join("pingpong_results_bin.sion"))
            .arg("--out")
            .arg(&from_file)
            .args(["--threshold-us", "1", "--no-png"]),
    );
    let file_svg = std::fs::read_to_string(&from_file).unwrap();
    let body = |s: &str| {
        s.lines()
            .filter(|l| {
                !l.contains("<svg ")
                    && !l.contains(r#"class="page""#)
                    && !l.contains(r#"class="title""#)
                    && !l.contains(r#"class="check""#)
                    && !l.contains(">Checks: ")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(body(&svg), body(&file_svg));

    // An unknown run id is an error naming it.
    let bad = bin()
        .args(["report", "linktest", "01JREP0000000000000000000C", "--lake"])
        .arg(lake.path())
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("01JREP0000000000000000000C"));
}
