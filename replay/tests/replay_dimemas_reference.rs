//! The 40 reference cases: Dimemas 5.5's predictions for 4 real traces under 10
//! configurations (`shared/data/replay/dimemas/reference.json`). Execution time and
//! per-task computation and communication must match to Dimemas's printed precision
//! (9 decimals, i.e. 1 ns; we allow 2 ns for the last-digit rounding of sums).
use std::collections::BTreeMap;
use std::path::PathBuf;

use benchlake_replay::run_replay;

const TOL: f64 = 2e-9;

fn data() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/replay/dimemas"
    ))
}

fn case_params(config: &str, extra: &[serde_json::Value]) -> BTreeMap<String, String> {
    let mut p = BTreeMap::new();
    p.insert(
        "config".to_string(),
        data()
            .join("configs")
            .join(format!("{config}.cfg"))
            .display()
            .to_string(),
    );
    let extra: Vec<&str> = extra.iter().filter_map(|v| v.as_str()).collect();
    if let Some(i) = extra.iter().position(|a| *a == "-S") {
        p.insert(
            "eager_limit".to_string(),
            extra.get(i + 1).copied().unwrap_or("").to_string(),
        );
    }
    p
}

#[test]
fn dimemas_reference_40_cases() {
    let text = std::fs::read_to_string(data().join("reference.json")).expect("reference.json");
    let reference: serde_json::Value = serde_json::from_str(&text).expect("json");
    let results = reference["results"].as_array().expect("results");
    assert_eq!(results.len(), 40);
    let mut failures = Vec::new();
    for case in results {
        let trace = case["trace"].as_str().expect("trace");
        let config = case["config"].as_str().expect("config");
        let params = case_params(
            config,
            case["extra_args"]
                .as_array()
                .map(|v| v.as_slice())
                .unwrap_or(&[]),
        );
        let path = data().join("traces").join(format!("{trace}.dim"));
        let r = match run_replay("dimemas", &path, &params) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{trace}/{config}: error {e}"));
                continue;
            }
        };
        let exp = case["execution_time_s"].as_f64().expect("exec");
        let mut msgs = Vec::new();
        if (r.predicted_time_s - exp).abs() > TOL {
            msgs.push(format!("exec {:.9} vs {:.9}", r.predicted_time_s, exp));
        }
        for (i, t) in case["tasks"].as_array().expect("tasks").iter().enumerate() {
            let rk = &r.ranks[i];
            let comp = t["computation_s"].as_f64().expect("comp");
            let comm = t["communication_s"].as_f64().expect("comm");
            if (rk.computation_s - comp).abs() > TOL {
                msgs.push(format!(
                    "task {i} comp {:.9} vs {:.9}",
                    rk.computation_s, comp
                ));
            }
            if (rk.communication_s() - comm).abs() > TOL {
                msgs.push(format!(
                    "task {i} comm {:.9} vs {:.9}",
                    rk.communication_s(),
                    comm
                ));
            }
            // The identity and the end time agree.
            assert!(
                (rk.total_s - (rk.computation_s + rk.communication_s() + rk.idle_s)).abs() < 1e-9,
                "{trace}/{config} identity"
            );
        }
        if !msgs.is_empty() {
            failures.push(format!("{trace}/{config}: {}", msgs.join("; ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 40 cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The speed-anchor runs of `anchor_speed.tsv` also give Dimemas's simulated time for
/// the synthetic halo trace; our generator writes the same trace as `synth.py`.
#[test]
fn synthetic_halo_matches_the_dimemas_anchor_runs() {
    let tsv = std::fs::read_to_string(data().join("anchor_speed.tsv")).expect("tsv");
    let d = tempfile::tempdir().expect("tmp");
    let mut checked = 0;
    for line in tsv.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        if f.first() != Some(&"dimemas-5.5") {
            continue;
        }
        let (p, iters): (u32, u32) = (f[1].parse().expect("P"), f[2].parse().expect("iters"));
        // Keep the debug-build test short: the runs of at most ~460 k records.
        if u64::from(p) * u64::from(iters) > 70_000 {
            continue;
        }
        let sim: f64 = f[6].parse().expect("sim time");
        let path = d.path().join(format!("halo_{p}_{iters}.dim"));
        let halo = benchlake_replay::synth::Halo::new(p, iters);
        let n = halo.write_dim(&path).expect("synth");
        assert_eq!(n.to_string(), f[3], "record count of P={p}");
        let r = run_replay("dimemas", &path, &BTreeMap::new()).expect("replay");
        assert!(
            (r.predicted_time_s - sim).abs() < TOL,
            "P={p} iters={iters}: {:.9} vs {sim:.9}",
            r.predicted_time_s
        );
        checked += 1;
    }
    assert_eq!(checked, 4, "P=8x8000, P=64x1000, P=256x250, P=1024x60");
}
